/*
 * libFuzzer harness for the preview listener (wire/httpreq.c and the relay
 * router of host/api/preview.c): every byte a browser, a CDP client or
 * anyone who can reach the listener sends.
 *
 * Input: a byte of rules, a byte of a split point, then the client's bytes.
 * In those, "CID" becomes the fake core's running computer and "PTOKEN" /
 * "CTOKEN" a valid preview token of port 3000 / CDP token of it, so the
 * deep paths (cookies, redirects, relays) are reached without the key.
 * Checked:
 *   - httpreq_head_end and httpreq_parse stay inside the buffer; a parsed
 *     head's target and header values hold no CR, LF or NUL;
 *   - the request stream's verdict and output are the same whether the
 *     bytes come at once, cut at one point, or byte by byte;
 *   - the relay router answers every head: a status 200..599 with a body,
 *     or a relay to port 3000 or CDP's (9222) of the fake computer only,
 *     whose rules drop the cookie (a preview) or the token's path (CDP).
 */
#include "fuzz.h"
#include "fakecore.h"
#include "httpd.h"
#include "httpreq.h"
#include "preview.h"
#include "token.h"

static const unsigned char key[TOKEN_KEY_BYTES] = "preview key for fuzzing, 32 byte";
static struct httpd *h;
static struct previews *pv;
static char ptoken[TOKEN_MAX], ctoken[TOKEN_MAX];

struct sink {
	char *p;
	size_t len, cap;
};

static int sink_emit(void *ctx, const void *p, size_t n)
{
	struct sink *s = ctx;
	if (s->len + n > s->cap) {
		size_t cap = (s->len + n) * 2 + 64;
		char *q = realloc(s->p, cap);
		if (!q)
			return -1;
		s->p = q;
		s->cap = cap;
	}
	memcpy(s->p + s->len, p, n);
	s->len += n;
	return 0;
}

/* Feeds in through a stream, cut at the given points (ascending, < n). */
static int feed(const struct httpreq_rules *r, const char *in, size_t n, const size_t *cuts,
		size_t ncuts, struct sink *out)
{
	struct httpreq_stream *s = httpreq_stream_new(r);
	CHECK(s);
	struct err e = {0};
	int rc = 0;
	size_t at = 0;
	for (size_t i = 0; i <= ncuts && rc == 0; i++) {
		size_t end = i < ncuts ? cuts[i] : n;
		rc = httpreq_stream_feed(s, (const unsigned char *)in + at, end - at, sink_emit,
					 out, &e);
		at = end;
	}
	httpreq_stream_free(s);
	return rc;
}

static void setup(void)
{
	if (h)
		return;
	struct err e = {0};
	snprintf(fake_ws, sizeof fake_ws, "ws-fuzz");
	struct httpd_opts ho = {.listen = "127.0.0.1:0"};
	h = httpd_create(&ho, &e);
	CHECK(h);
	struct previews_opts po = {.key = key, .url = "http://localhost:8081"};
	pv = previews_create(fake_core(), h, &po, &e);
	CHECK(pv);
	struct token_claims c = {.issued = 2, .expires = 4102444800LL};
	snprintf(c.computer, sizeof c.computer, FAKE_ID);
	snprintf(c.workspace, sizeof c.workspace, "%s", FAKE_WS);
	snprintf(c.nonce, sizeof c.nonce, "0123456789abcdef");
	snprintf(c.scope, sizeof c.scope, "p3000");
	CHECK(token_mint(key, &c, ptoken, &e) == 0);
	snprintf(c.scope, sizeof c.scope, "cdp");
	CHECK(token_mint(key, &c, ctoken, &e) == 0);
}

/* in with the placeholders replaced (malloc'd, *n its length). */
static char *expand(const char *in, size_t len, size_t *n)
{
	static const struct {
		const char *from, *to;
	} subs[] = {{"PTOKEN", ptoken}, {"CTOKEN", ctoken}, {"CID", FAKE_ID}};
	size_t cap = len * 8 + 1, o = 0;
	char *out = malloc(cap);
	CHECK(out);
	for (size_t i = 0; i < len;) {
		bool done = false;
		for (size_t k = 0; k < 3 && !done; k++) {
			size_t fl = strlen(subs[k].from), tl = strlen(subs[k].to);
			if (len - i >= fl && memcmp(in + i, subs[k].from, fl) == 0 &&
			    o + tl < cap) {
				memcpy(out + o, subs[k].to, tl);
				o += tl;
				i += fl;
				done = true;
			}
		}
		if (!done) {
			if (o + 1 >= cap)
				break;
			out[o++] = in[i++];
		}
	}
	*n = o;
	return out;
}

static bool clean(const char *p, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (p[i] == '\r' || p[i] == '\n' || p[i] == 0)
			return false;
	return true;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	setup();
	struct fz f = {data, size};
	uint8_t rules = fz_u8(&f), split = fz_u8(&f);
	size_t n;
	char *in = expand((const char *)f.p, f.n, &n);

	/* The first head, as the relay reads it. */
	long end = httpreq_head_end(in, n);
	CHECK(end >= -1 && end <= (long)n && end <= HTTPREQ_MAX_HEAD);
	struct httpreq_head *head = malloc(sizeof *head);
	CHECK(head);
	struct err e = {0};
	if (end > 0 && httpreq_parse(in, (size_t)end, head, &e) == 0) {
		CHECK(head->target >= in && head->target + head->target_len <= in + end);
		CHECK(clean(head->target, head->target_len));
		for (size_t i = 0; i < head->nheaders; i++) {
			const struct httpreq_header *hd = &head->headers[i];
			CHECK(hd->value >= in && hd->value + hd->vlen <= in + end);
			CHECK(clean(hd->value, hd->vlen) && clean(hd->name, hd->nlen));
		}
		struct httpd_relay r = {0};
		struct httpd_relay_answer a = {0};
		int rc = previews_relay(pv, head, &r, &a);
		if (rc == 1) {
			CHECK(a.status >= 200 && a.status < 600);
			CHECK(a.body || a.body_len == 0);
			CHECK(!strpbrk(a.headers, "\n") || strstr(a.headers, "\r\n"));
		} else {
			CHECK(rc == 0);
			CHECK(r.port == 3000 || r.port == CORE_CDP_PORT);
			CHECK(strcmp(r.tag, FAKE_ID) == 0);
			CHECK(r.port == 3000
				  ? strcmp(r.drop_cookie, PREVIEW_COOKIE) == 0
				  : r.drop_origin && strncmp(r.strip_prefix, "/cdp/", 5) == 0);
			if (r.on_close)
				r.on_close(r.close_ctx, r.tag);
		}
		free(a.body);
	}
	free(head);

	/* The stream: the same whatever the cuts. */
	struct httpreq_rules rs = {
	    .drop_cookie = rules & 1 ? PREVIEW_COOKIE : NULL,
	    .host = rules & 2 ? "127.0.0.1:9222" : NULL,
	    .drop_origin = rules & 4,
	    .strip_prefix = rules & 8 ? "/cdp/x" : NULL,
	    .drop_query = rules & 16 ? PREVIEW_QUERY : NULL,
	};
	struct sink whole = {0}, two = {0}, bytes = {0};
	int rc1 = feed(&rs, in, n, NULL, 0, &whole);
	size_t cut = n ? split % (n + 1) : 0;
	int rc2 = feed(&rs, in, n, &cut, 1, &two);
	CHECK(rc1 == rc2 && whole.len == two.len &&
	      (!whole.len || memcmp(whole.p, two.p, whole.len) == 0));
	if (n <= 4096) {
		size_t *cuts = malloc((n ? n : 1) * sizeof *cuts);
		CHECK(cuts);
		for (size_t i = 0; i + 1 < n; i++)
			cuts[i] = i + 1;
		int rc3 = feed(&rs, in, n, cuts, n ? n - 1 : 0, &bytes);
		free(cuts);
		CHECK(rc1 == rc3 && whole.len == bytes.len &&
		      (!whole.len || memcmp(whole.p, bytes.p, whole.len) == 0));
	}
	free(whole.p), free(two.p), free(bytes.p), free(in);
	return 0;
}
