/* httpreq: request heads parsed strictly, and request streams rewritten
 * head by head with their bodies passed by their framing (cmocka). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "httpreq.h"

struct sink {
	char buf[65536];
	size_t len;
};

static int sink_emit(void *ctx, const void *p, size_t n)
{
	struct sink *s = ctx;
	if (s->len + n > sizeof s->buf)
		return -1;
	memcpy(s->buf + s->len, p, n);
	s->len += n;
	return 0;
}

/* Feeds in, cut every `step` bytes (0: at once); the stream's verdict. */
static int feed(const struct httpreq_rules *r, const char *in, size_t step, struct sink *out)
{
	struct httpreq_stream *s = httpreq_stream_new(r);
	assert_non_null(s);
	memset(out, 0, sizeof *out);
	size_t len = strlen(in);
	int rc = 0;
	struct err e = {0};
	for (size_t i = 0; i < len && rc == 0;) {
		size_t n = step && len - i > step ? step : len - i;
		rc = httpreq_stream_feed(s, (const unsigned char *)in + i, n, sink_emit, out, &e);
		i += n;
	}
	httpreq_stream_free(s);
	return rc;
}

static void test_parse(void **state)
{
	(void)state;
	const char *req = "GET /a?cubicle_token=T&x=1 HTTP/1.1\r\nHost: 3000-c-x.localhost:8081\r\n"
			  "Cookie: a=1; cubicle_preview=tok; b=2\r\nAccept:  text/html  \r\n\r\n";
	struct httpreq_head h;
	struct err e = {0};
	long end = httpreq_head_end(req, strlen(req));
	assert_int_equal(end, (long)strlen(req));
	assert_int_equal(httpreq_parse(req, (size_t)end, &h, &e), 0);
	assert_int_equal(h.minor, 1);
	assert_int_equal(h.nheaders, 3);
	char v[64];
	assert_int_equal(httpreq_copy(&h, "accept", v, sizeof v), 9);
	assert_string_equal(v, "text/html");
	assert_int_equal(httpreq_cookie(&h, "cubicle_preview", 0, v, sizeof v), 3);
	assert_string_equal(v, "tok");
	assert_int_equal(httpreq_cookie(&h, "cubicle_preview", 1, v, sizeof v), -1);
	assert_int_equal(httpreq_cookie(&h, "c", 0, v, sizeof v), -1);
	assert_int_equal(httpreq_query(h.target, h.target_len, "cubicle_token", v, sizeof v), 1);
	assert_string_equal(v, "T");
	char t[64];
	assert_true(httpreq_without_query(h.target, h.target_len, "cubicle_token", t, sizeof t) >
		    0);
	assert_string_equal(t, "/a?x=1");
	assert_true(httpreq_without_query("/?cubicle_token=T", 17, "cubicle_token", t, sizeof t) >
		    0);
	assert_string_equal(t, "/");
	/* Several of one name (set for different domains): each in turn. */
	const char *two = "GET / HTTP/1.1\r\nCookie: k=1\r\nCookie: x=0; k=2\r\n\r\n";
	assert_int_equal(httpreq_parse(two, strlen(two), &h, &e), 0);
	assert_int_equal(httpreq_cookie(&h, "k", 1, v, sizeof v), 1);
	assert_string_equal(v, "2");
	/* Incomplete, then malformed heads. */
	assert_int_equal(httpreq_head_end("GET / HTTP/1.1\r\nHost: x\r\n", 25), 0);
	assert_int_equal(httpreq_head_end("GET / HTTP/1.1\nHost: x\n\n", 24), -1);
	const char *bad[] = {
	    "GET / HTTP/2.0\r\n\r\n",
	    "GET  / HTTP/1.1\r\n\r\n",
	    "G(T / HTTP/1.1\r\n\r\n",
	    "GET / HTTP/1.1\r\nHost : x\r\n\r\n",
	    "GET / HTTP/1.1\r\nHost: x\r\n folded\r\n\r\n",
	    "GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n",
	    "GET / HTTP/1.1\r\nX: a\x01z\r\n\r\n",
	    "GET /\x7f HTTP/1.1\r\n\r\n",
	    NULL,
	};
	for (int i = 0; bad[i]; i++)
		assert_int_equal(httpreq_parse(bad[i], strlen(bad[i]), &h, &e), -1);
}

static void test_rewrite(void **state)
{
	(void)state;
	struct httpreq_rules r = {.drop_cookie = "cubicle_preview"};
	struct sink out;
	/* The cookie goes, the others stay; a Cookie with only ours goes whole. */
	assert_int_equal(
	    feed(&r,
		 "GET / HTTP/1.1\r\nHost: h\r\nCookie: a=1; cubicle_preview=t; b=2\r\n\r\n"
		 "GET /2 HTTP/1.1\r\nHost: h\r\nCookie: cubicle_preview=t\r\n\r\n",
		 0, &out),
	    0);
	out.buf[out.len] = 0;
	assert_string_equal(out.buf, "GET / HTTP/1.1\r\nHost: h\r\nCookie: a=1; b=2\r\n\r\n"
				     "GET /2 HTTP/1.1\r\nHost: h\r\n\r\n");
	/* CDP: the prefix stripped, Host replaced, Origin dropped. */
	struct httpreq_rules cdp = {
	    .host = "127.0.0.1:9222", .drop_origin = true, .strip_prefix = "/cdp/TOKEN"};
	assert_int_equal(feed(&cdp,
			      "GET /cdp/TOKEN/devtools/browser/x HTTP/1.1\r\nHost: a:1\r\nOrigin: "
			      "http://evil\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n"
			      "\x81\x05hello GET /cdp/TOKEN HTTP/1.1\r\n",
			      3, &out),
			 0);
	out.buf[out.len] = 0;
	assert_string_equal(out.buf, "GET /devtools/browser/x HTTP/1.1\r\nHost: 127.0.0.1:9222\r\n"
				     "Upgrade: websocket\r\nConnection: Upgrade\r\n\r\n"
				     "\x81\x05hello GET /cdp/TOKEN HTTP/1.1\r\n");
	/* A query parameter removed, the others kept. */
	struct httpreq_rules q = {.drop_query = "cubicle_token"};
	assert_int_equal(feed(&q,
			      "GET /a?x=1&cubicle_token=T&y HTTP/1.1\r\n\r\n"
			      "GET /?cubicle_token=T HTTP/1.1\r\n\r\n",
			      2, &out),
			 0);
	out.buf[out.len] = 0;
	assert_string_equal(out.buf, "GET /a?x=1&y HTTP/1.1\r\n\r\nGET / HTTP/1.1\r\n\r\n");
	/* A prefix only counts as a whole path segment. */
	assert_int_equal(feed(&cdp,
			      "GET /cdp/TOKENX HTTP/1.1\r\n\r\nGET /cdp/TOKEN?a HTTP/1.0\r\n\r\n",
			      0, &out),
			 0);
	out.buf[out.len] = 0;
	assert_string_equal(out.buf, "GET /cdp/TOKENX HTTP/1.1\r\nHost: 127.0.0.1:9222\r\n\r\n"
				     "GET /?a HTTP/1.0\r\nHost: 127.0.0.1:9222\r\n\r\n");
}

static void test_bodies(void **state)
{
	(void)state;
	struct httpreq_rules r = {.drop_cookie = "k"};
	struct sink out;
	/* A body that looks like a head with the cookie is a body: untouched. */
	const char *in = "POST / HTTP/1.1\r\nContent-Length: 23\r\n\r\n"
			 "Cookie: k=1\r\n\r\nGET / HT"
			 "POST /c HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"
			 "5;ext=1\r\nCook:\r\n0\r\nX-Trailer: 1\r\n\r\n"
			 "GET /last HTTP/1.1\r\nCookie: k=2\r\n\r\n";
	for (size_t step = 0; step < 9; step++) {
		assert_int_equal(feed(&r, in, step, &out), 0);
		out.buf[out.len] = 0;
		assert_string_equal(out.buf,
				    "POST / HTTP/1.1\r\nContent-Length: 23\r\n\r\n"
				    "Cookie: k=1\r\n\r\nGET / HT"
				    "POST /c HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"
				    "5;ext=1\r\nCook:\r\n0\r\nX-Trailer: 1\r\n\r\n"
				    "GET /last HTTP/1.1\r\n\r\n");
	}
	/* Ambiguous framing and malformed chunks close the stream. */
	const char *bad[] = {
	    "POST / HTTP/1.1\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n",
	    "POST / HTTP/1.1\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\n",
	    "POST / HTTP/1.1\r\nContent-Length: -3\r\n\r\n",
	    "POST / HTTP/1.1\r\nTransfer-Encoding: gzip, chunked\r\n\r\n",
	    "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
	    "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nabX\r\n",
	    "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n1\nx",
	    "GET / HTTP/1.1\nHost: x\n\n",
	    NULL,
	};
	for (int i = 0; bad[i]; i++)
		assert_int_equal(feed(&r, bad[i], 0, &out), -1);
	/* A head past the limit. */
	char *big = malloc(HTTPREQ_MAX_HEAD + 64);
	assert_non_null(big);
	int n = snprintf(big, 64, "GET / HTTP/1.1\r\nX: ");
	memset(big + n, 'a', HTTPREQ_MAX_HEAD);
	big[n + HTTPREQ_MAX_HEAD] = 0;
	assert_int_equal(feed(&r, big, 1000, &out), -1);
	free(big);
	/* Empty lines between requests are dropped. */
	assert_int_equal(feed(&r, "\r\n\r\nGET / HTTP/1.1\r\n\r\n", 1, &out), 0);
	out.buf[out.len] = 0;
	assert_string_equal(out.buf, "GET / HTTP/1.1\r\n\r\n");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_parse),
	    cmocka_unit_test(test_rewrite),
	    cmocka_unit_test(test_bodies),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
