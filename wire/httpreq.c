/*
 * httpreq: request heads parsed strictly, and a client's request stream
 * rewritten head by head (httpreq.h).
 */
#include "httpreq.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

static bool httpreq_tchar(unsigned char c)
{
	return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
	       (c && strchr("!#$%&'*+-.^_`|~", c));
}

/* A byte of a header value: HTAB, visible ASCII, space, or obs-text. */
static bool httpreq_vchar(unsigned char c)
{
	return c == '\t' || (c >= 0x20 && c != 0x7f);
}

long httpreq_head_end(const char *buf, size_t len)
{
	for (size_t i = 0; i < len; i++) {
		if (buf[i] == '\n' && (i == 0 || buf[i - 1] != '\r'))
			return -1; /* a bare LF */
		if (buf[i] == '\r' && i + 1 < len && buf[i + 1] != '\n')
			return -1; /* a bare CR */
		if (i >= 3 && memcmp(buf + i - 3, "\r\n\r\n", 4) == 0)
			return i + 1 <= HTTPREQ_MAX_HEAD ? (long)(i + 1) : -1;
	}
	return len >= HTTPREQ_MAX_HEAD ? -1 : 0;
}

int httpreq_parse(const char *buf, size_t len, struct httpreq_head *h, struct err *e)
{
	memset(h, 0, sizeof *h);
	if (len < 4 || memcmp(buf + len - 4, "\r\n\r\n", 4) != 0)
		return err_set(e, ERR_BAD_REQUEST,
			       "the request head does not end in an empty line");
	const char *p = buf, *end = buf + len;
	/* The request line: METHOD SP TARGET SP HTTP/1.x CRLF. */
	h->method = p;
	while (p < end && httpreq_tchar((unsigned char)*p))
		p++;
	h->method_len = (size_t)(p - h->method);
	if (h->method_len == 0 || h->method_len > 32 || p >= end || *p != ' ')
		return err_set(e, ERR_BAD_REQUEST, "the request line has no valid method");
	h->target = ++p;
	while (p < end && (unsigned char)*p > 0x20 && *p != 0x7f)
		p++;
	h->target_len = (size_t)(p - h->target);
	if (h->target_len == 0 || p >= end || *p != ' ')
		return err_set(e, ERR_BAD_REQUEST, "the request line has no valid target");
	p++;
	if (end - p < 10 || memcmp(p, "HTTP/1.", 7) != 0 || (p[7] != '0' && p[7] != '1') ||
	    memcmp(p + 8, "\r\n", 2) != 0)
		return err_set(e, ERR_BAD_REQUEST,
			       "the request line does not end in HTTP/1.0 or 1.1");
	h->minor = p[7] - '0';
	p += 10;
	int hosts = 0;
	/* Header lines until the empty one. */
	while (p < end && !(end - p >= 2 && p[0] == '\r' && p[1] == '\n')) {
		if (h->nheaders == HTTPREQ_MAX_HEADERS)
			return err_set(e, ERR_BAD_REQUEST, "more than %d header lines",
				       HTTPREQ_MAX_HEADERS);
		struct httpreq_header *hd = &h->headers[h->nheaders];
		hd->name = p;
		while (p < end && httpreq_tchar((unsigned char)*p))
			p++;
		hd->nlen = (size_t)(p - hd->name);
		if (hd->nlen == 0 || p >= end || *p != ':')
			return err_set(e, ERR_BAD_REQUEST,
				       "a header line is not NAME: VALUE (or is folded)");
		p++;
		while (p < end && (*p == ' ' || *p == '\t'))
			p++;
		hd->value = p;
		while (p < end && *p != '\r') {
			if (!httpreq_vchar((unsigned char)*p))
				return err_set(e, ERR_BAD_REQUEST,
					       "a header value holds a control byte");
			p++;
		}
		if (end - p < 2 || p[1] != '\n')
			return err_set(e, ERR_BAD_REQUEST, "a header line does not end in CRLF");
		const char *v = p;
		while (v > hd->value && (v[-1] == ' ' || v[-1] == '\t'))
			v--;
		hd->vlen = (size_t)(v - hd->value);
		if (hd->nlen == 4 && strncasecmp(hd->name, "host", 4) == 0)
			hosts++;
		h->nheaders++;
		p += 2;
	}
	if (hosts > 1)
		return err_set(e, ERR_BAD_REQUEST, "more than one Host header");
	h->len = len;
	return 0;
}

const char *httpreq_get(const struct httpreq_head *h, const char *name, size_t *vlen)
{
	size_t n = strlen(name);
	for (size_t i = 0; i < h->nheaders; i++) {
		if (h->headers[i].nlen == n && strncasecmp(h->headers[i].name, name, n) == 0) {
			if (vlen)
				*vlen = h->headers[i].vlen;
			return h->headers[i].value;
		}
	}
	return NULL;
}

long httpreq_copy(const struct httpreq_head *h, const char *name, char *out, size_t len)
{
	size_t n;
	const char *v = httpreq_get(h, name, &n);
	if (len)
		out[0] = 0;
	if (!v)
		return -1;
	if (len)
		snprintf(out, len, "%.*s", (int)(n < len ? n : len - 1), v);
	return (long)n;
}

/* Calls fn for each comma- or semicolon-separated item of [p, p+n), trimmed. */
static bool httpreq_items(const char *p, size_t n, char sep,
			  bool (*fn)(void *ctx, const char *item, size_t len), void *ctx)
{
	const char *end = p + n;
	while (p < end) {
		const char *q = memchr(p, sep, (size_t)(end - p));
		const char *stop = q ? q : end;
		const char *a = p, *b = stop;
		while (a < b && (*a == ' ' || *a == '\t'))
			a++;
		while (b > a && (b[-1] == ' ' || b[-1] == '\t'))
			b--;
		if (b > a && fn(ctx, a, (size_t)(b - a)))
			return true;
		p = q ? q + 1 : end;
	}
	return false;
}

struct httpreq_find {
	const char *name;
	char *out;
	size_t len;
	long found;
	int skip; /* matches to pass over first */
};

static bool httpreq_cookie_item(void *ctx, const char *item, size_t len)
{
	struct httpreq_find *f = ctx;
	size_t n = strlen(f->name);
	if (len <= n || memcmp(item, f->name, n) != 0 || item[n] != '=')
		return false;
	if (f->skip-- > 0)
		return false;
	size_t vl = len - n - 1;
	if (vl >= f->len) {
		f->found = -1;
		return true;
	}
	memcpy(f->out, item + n + 1, vl);
	f->out[vl] = 0;
	f->found = (long)vl;
	return true;
}

long httpreq_cookie(const struct httpreq_head *h, const char *name, int nth, char *out, size_t len)
{
	struct httpreq_find f = {name, out, len, -1, nth};
	if (len)
		out[0] = 0;
	for (size_t i = 0; i < h->nheaders; i++) {
		const struct httpreq_header *hd = &h->headers[i];
		if (hd->nlen == 6 && strncasecmp(hd->name, "cookie", 6) == 0 &&
		    httpreq_items(hd->value, hd->vlen, ';', httpreq_cookie_item, &f))
			return f.found;
	}
	return -1;
}

long httpreq_query(const char *target, size_t tlen, const char *name, char *out, size_t len)
{
	const char *q = memchr(target, '?', tlen);
	if (len)
		out[0] = 0;
	if (!q)
		return -1;
	struct httpreq_find f = {name, out, len, -1, 0};
	q++;
	httpreq_items(q, tlen - (size_t)(q - target), '&', httpreq_cookie_item, &f);
	return f.found;
}

long httpreq_without_query(const char *target, size_t tlen, const char *name, char *out, size_t len)
{
	const char *q = memchr(target, '?', tlen);
	size_t n = strlen(name), o = 0;
	size_t plen = q ? (size_t)(q - target) : tlen;
	if (plen + 1 > len)
		return -1;
	memcpy(out, target, plen);
	o = plen;
	const char *p = q ? q + 1 : target + tlen, *end = target + tlen;
	bool first = true;
	while (p < end) {
		const char *amp = memchr(p, '&', (size_t)(end - p));
		const char *stop = amp ? amp : end;
		size_t il = (size_t)(stop - p);
		bool drop =
		    il == 0 || (il >= n && memcmp(p, name, n) == 0 && (il == n || p[n] == '='));
		if (!drop) {
			if (o + il + 2 > len)
				return -1;
			out[o++] = first ? '?' : '&';
			memcpy(out + o, p, il);
			o += il;
			first = false;
		}
		p = amp ? amp + 1 : end;
	}
	out[o] = 0;
	return (long)o;
}

struct httpreq_token {
	const char *token;
};

static bool httpreq_token_item(void *ctx, const char *item, size_t len)
{
	const struct httpreq_token *t = ctx;
	return strlen(t->token) == len && strncasecmp(item, t->token, len) == 0;
}

bool httpreq_lists(const struct httpreq_head *h, const char *name, const char *token)
{
	size_t n = strlen(name);
	struct httpreq_token t = {token};
	for (size_t i = 0; i < h->nheaders; i++) {
		const struct httpreq_header *hd = &h->headers[i];
		if (hd->nlen == n && strncasecmp(hd->name, name, n) == 0 &&
		    httpreq_items(hd->value, hd->vlen, ',', httpreq_token_item, &t))
			return true;
	}
	return false;
}

/* ---- the stream ------------------------------------------------------------------ */

enum httpreq_state {
	S_HEAD,	      /* reading a request head */
	S_BODY,	      /* `left` bytes of a Content-Length body */
	S_CHUNK_SIZE, /* a chunk-size line */
	S_CHUNK_DATA, /* `left` bytes of a chunk */
	S_CHUNK_CRLF, /* the CRLF after a chunk */
	S_TRAILER,    /* the trailer section after the last chunk */
	S_RAW,	      /* after an upgrade: everything passes */
};

#define HTTPREQ_MAX_LINE 1024 /* a chunk-size line, its extensions included */

struct httpreq_stream {
	char *drop_cookie, *host, *strip_prefix, *drop_query;
	bool drop_origin;
	enum httpreq_state state;
	char *buf; /* the head, chunk line or trailer being read */
	size_t blen;
	uint64_t left;
	bool upgrade; /* the current request upgrades the connection */
	uint64_t requests;
};

struct httpreq_stream *httpreq_stream_new(const struct httpreq_rules *r)
{
	struct httpreq_stream *s = calloc(1, sizeof *s);
	if (!s)
		return NULL;
	s->buf = malloc(HTTPREQ_MAX_HEAD);
	s->drop_cookie = r && r->drop_cookie ? strdup(r->drop_cookie) : NULL;
	s->host = r && r->host ? strdup(r->host) : NULL;
	s->strip_prefix = r && r->strip_prefix && *r->strip_prefix ? strdup(r->strip_prefix) : NULL;
	s->drop_query = r && r->drop_query ? strdup(r->drop_query) : NULL;
	s->drop_origin = r && r->drop_origin;
	bool lost = r && ((r->drop_cookie && !s->drop_cookie) || (r->host && !s->host) ||
			  (r->strip_prefix && *r->strip_prefix && !s->strip_prefix) ||
			  (r->drop_query && !s->drop_query));
	if (!s->buf || lost) {
		httpreq_stream_free(s);
		return NULL;
	}
	return s;
}

void httpreq_stream_free(struct httpreq_stream *s)
{
	if (!s)
		return;
	free(s->buf);
	free(s->drop_cookie);
	free(s->host);
	free(s->strip_prefix);
	free(s->drop_query);
	free(s);
}

uint64_t httpreq_stream_requests(const struct httpreq_stream *s)
{
	return s->requests;
}

bool httpreq_stream_raw(const struct httpreq_stream *s)
{
	return s->state == S_RAW;
}

/* An output buffer for a rewritten head. */
struct httpreq_out {
	char *p;
	size_t len, cap;
};

static void httpreq_put(struct httpreq_out *o, const char *s, size_t n)
{
	if (o->len + n <= o->cap) {
		memcpy(o->p + o->len, s, n);
		o->len += n;
	} else {
		o->len = o->cap + 1; /* overflow: noticed by the caller */
	}
}

struct httpreq_cookies {
	struct httpreq_out *o;
	const char *drop;
	bool first;
};

static bool httpreq_cookie_keep(void *ctx, const char *item, size_t len)
{
	struct httpreq_cookies *c = ctx;
	size_t n = strlen(c->drop);
	if (len > n && memcmp(item, c->drop, n) == 0 && item[n] == '=')
		return false;
	if (!c->first)
		httpreq_put(c->o, "; ", 2);
	httpreq_put(c->o, item, len);
	c->first = false;
	return false;
}

/* The head rewritten by the stream's rules into o. */
static int httpreq_rewrite(struct httpreq_stream *s, const struct httpreq_head *h,
			   struct httpreq_out *o)
{
	httpreq_put(o, h->method, h->method_len);
	httpreq_put(o, " ", 1);
	const char *t = h->target;
	size_t tl = h->target_len;
	size_t pl = s->strip_prefix ? strlen(s->strip_prefix) : 0;
	if (pl && tl >= pl && memcmp(t, s->strip_prefix, pl) == 0 &&
	    (tl == pl || t[pl] == '/' || t[pl] == '?')) {
		t += pl;
		tl -= pl;
		if (tl == 0 || *t == '?')
			httpreq_put(o, "/", 1);
	}
	char *without = NULL;
	if (s->drop_query && memchr(t, '?', tl) && (without = malloc(tl + 1))) {
		long n = httpreq_without_query(t, tl, s->drop_query, without, tl + 1);
		if (n >= 0) {
			t = without;
			tl = (size_t)n;
		}
	}
	httpreq_put(o, t, tl);
	free(without);
	httpreq_put(o, h->minor ? " HTTP/1.1\r\n" : " HTTP/1.0\r\n", 11);
	bool host_done = false;
	for (size_t i = 0; i < h->nheaders; i++) {
		const struct httpreq_header *hd = &h->headers[i];
		bool is_host = hd->nlen == 4 && strncasecmp(hd->name, "host", 4) == 0;
		if (s->drop_origin && hd->nlen == 6 && strncasecmp(hd->name, "origin", 6) == 0)
			continue;
		if (is_host && s->host) {
			httpreq_put(o, "Host: ", 6);
			httpreq_put(o, s->host, strlen(s->host));
			httpreq_put(o, "\r\n", 2);
			host_done = true;
			continue;
		}
		if (s->drop_cookie && hd->nlen == 6 && strncasecmp(hd->name, "cookie", 6) == 0) {
			size_t mark = o->len;
			httpreq_put(o, "Cookie: ", 8);
			struct httpreq_cookies c = {o, s->drop_cookie, true};
			httpreq_items(hd->value, hd->vlen, ';', httpreq_cookie_keep, &c);
			if (c.first) /* nothing kept: no Cookie header at all */
				o->len = o->len > o->cap ? o->len : mark;
			else
				httpreq_put(o, "\r\n", 2);
			continue;
		}
		httpreq_put(o, hd->name, hd->nlen);
		httpreq_put(o, ": ", 2);
		httpreq_put(o, hd->value, hd->vlen);
		httpreq_put(o, "\r\n", 2);
	}
	if (s->host && !host_done) {
		httpreq_put(o, "Host: ", 6);
		httpreq_put(o, s->host, strlen(s->host));
		httpreq_put(o, "\r\n", 2);
	}
	httpreq_put(o, "\r\n", 2);
	return o->len > o->cap ? -1 : 0;
}

/* After a head: how its body is framed (the stream's next state). */
static int httpreq_framing(struct httpreq_stream *s, const struct httpreq_head *h, struct err *e)
{
	size_t tel = 0;
	const char *te = httpreq_get(h, "transfer-encoding", &tel);
	long long cl = -1;
	for (size_t i = 0; i < h->nheaders; i++) {
		const struct httpreq_header *hd = &h->headers[i];
		if (!(hd->nlen == 14 && strncasecmp(hd->name, "content-length", 14) == 0))
			continue;
		long long v = 0;
		if (hd->vlen == 0 || hd->vlen > 15)
			return err_set(e, ERR_BAD_REQUEST, "a Content-Length is not a number");
		for (size_t k = 0; k < hd->vlen; k++) {
			if (hd->value[k] < '0' || hd->value[k] > '9')
				return err_set(e, ERR_BAD_REQUEST,
					       "a Content-Length is not a number");
			v = v * 10 + (hd->value[k] - '0');
		}
		if (cl >= 0 && cl != v)
			return err_set(e, ERR_BAD_REQUEST, "two different Content-Lengths");
		cl = v;
	}
	s->upgrade = (h->method_len == 7 && memcmp(h->method, "CONNECT", 7) == 0) ||
		     (httpreq_get(h, "upgrade", NULL) && httpreq_lists(h, "connection", "upgrade"));
	if (te) {
		if (cl >= 0)
			return err_set(e, ERR_BAD_REQUEST,
				       "both Transfer-Encoding and Content-Length");
		if (!(tel == 7 && strncasecmp(te, "chunked", 7) == 0))
			return err_set(e, ERR_BAD_REQUEST,
				       "a Transfer-Encoding other than chunked");
		s->state = S_CHUNK_SIZE;
		return 0;
	}
	if (cl > 0) {
		s->left = (uint64_t)cl;
		s->state = S_BODY;
		return 0;
	}
	s->state = s->upgrade ? S_RAW : S_HEAD;
	return 0;
}

/* The current request is over: the next head, or raw after an upgrade. */
static void httpreq_request_done(struct httpreq_stream *s)
{
	s->state = s->upgrade ? S_RAW : S_HEAD;
	s->blen = 0;
}

/* A chunk-size line (its CRLF included): the size, or -1. */
static long long httpreq_chunk_size(const char *p, size_t n)
{
	long long v = 0;
	size_t i = 0;
	for (; i < n && i < 15; i++) {
		char c = p[i];
		int d = c >= '0' && c <= '9'   ? c - '0'
			: c >= 'a' && c <= 'f' ? c - 'a' + 10
			: c >= 'A' && c <= 'F' ? c - 'A' + 10
					       : -1;
		if (d < 0)
			break;
		v = v * 16 + d;
	}
	if (i == 0 || i == 15 || n < 2 || i > n - 2)
		return -1;
	/* Then nothing, or whitespace and extensions without control bytes. */
	if (i < n - 2 && p[i] != ';' && p[i] != ' ' && p[i] != '\t')
		return -1;
	for (; i < n - 2; i++)
		if (!httpreq_vchar((unsigned char)p[i]))
			return -1;
	return v;
}

int httpreq_stream_feed(struct httpreq_stream *s, const unsigned char *in, size_t len,
			int (*emit)(void *ctx, const void *p, size_t n), void *ctx, struct err *e)
{
	size_t i = 0;
	while (i < len) {
		switch (s->state) {
		case S_RAW:
			if (emit(ctx, in + i, len - i) < 0)
				return err_set(e, ERR_INTERNAL, "cannot pass the bytes on");
			return 0;
		case S_BODY:
		case S_CHUNK_DATA: {
			size_t n = len - i;
			if ((uint64_t)n > s->left)
				n = (size_t)s->left;
			if (emit(ctx, in + i, n) < 0)
				return err_set(e, ERR_INTERNAL, "cannot pass the bytes on");
			i += n;
			s->left -= n;
			if (s->left == 0) {
				if (s->state == S_BODY)
					httpreq_request_done(s);
				else
					s->state = S_CHUNK_CRLF, s->blen = 0;
			}
			break;
		}
		case S_HEAD: {
			if (s->blen == 0 && (in[i] == '\r' || in[i] == '\n')) {
				i++; /* empty lines between requests are ignored */
				break;
			}
			size_t room = HTTPREQ_MAX_HEAD - s->blen;
			size_t n = len - i < room ? len - i : room;
			memcpy(s->buf + s->blen, in + i, n);
			size_t before = s->blen;
			s->blen += n;
			long end = httpreq_head_end(s->buf, s->blen);
			if (end < 0 || (end == 0 && s->blen == HTTPREQ_MAX_HEAD))
				return err_set(e, ERR_BAD_REQUEST,
					       end < 0 ? "a request head is malformed (bare CR or "
							 "LF) or too long"
						       : "a request head is over %d bytes",
					       HTTPREQ_MAX_HEAD);
			if (end == 0) {
				i += n;
				break;
			}
			i += (size_t)end - before; /* the rest is the body's, or the next's */
			struct httpreq_head *h = malloc(sizeof *h);
			if (!h)
				return err_set(e, ERR_INTERNAL, "out of memory");
			int rc = httpreq_parse(s->buf, (size_t)end, h, e);
			if (rc == 0)
				rc = httpreq_framing(s, h, e);
			struct httpreq_out o = {NULL, 0, 0};
			if (rc == 0) {
				o.cap = (size_t)end + 128 + (s->host ? strlen(s->host) : 0);
				o.p = malloc(o.cap);
				if (!o.p)
					rc = err_set(e, ERR_INTERNAL, "out of memory");
			}
			if (rc == 0 && httpreq_rewrite(s, h, &o) < 0)
				rc = err_set(e, ERR_INTERNAL, "a rewritten head does not fit");
			if (rc == 0 && emit(ctx, o.p, o.len) < 0)
				rc = err_set(e, ERR_INTERNAL, "cannot pass the bytes on");
			free(o.p);
			free(h);
			if (rc < 0)
				return -1;
			s->requests++;
			s->blen = 0;
			break;
		}
		case S_CHUNK_SIZE:
		case S_CHUNK_CRLF:
		case S_TRAILER: {
			/* Line by line, byte by byte: these lines are short. */
			size_t cap = s->state == S_TRAILER ? HTTPREQ_MAX_HEAD : HTTPREQ_MAX_LINE;
			if (s->blen == cap)
				return err_set(e, ERR_BAD_REQUEST,
					       "a chunk line or trailer is too long");
			char c = (char)in[i++];
			s->buf[s->blen++] = c;
			if (c == '\n' && (s->blen < 2 || s->buf[s->blen - 2] != '\r'))
				return err_set(e, ERR_BAD_REQUEST, "a bare LF in a chunked body");
			if (s->state == S_CHUNK_CRLF) {
				if (s->blen == 2) {
					if (memcmp(s->buf, "\r\n", 2) != 0)
						return err_set(e, ERR_BAD_REQUEST,
							       "a chunk does not end in CRLF");
					if (emit(ctx, s->buf, 2) < 0)
						return err_set(e, ERR_INTERNAL,
							       "cannot pass the bytes on");
					s->state = S_CHUNK_SIZE;
					s->blen = 0;
				} else if (c != '\r') {
					return err_set(e, ERR_BAD_REQUEST,
						       "a chunk does not end in CRLF");
				}
				break;
			}
			if (c != '\n')
				break;
			if (s->state == S_CHUNK_SIZE) {
				long long size = httpreq_chunk_size(s->buf, s->blen);
				if (size < 0)
					return err_set(e, ERR_BAD_REQUEST,
						       "a chunk size is malformed");
				if (emit(ctx, s->buf, s->blen) < 0)
					return err_set(e, ERR_INTERNAL, "cannot pass the bytes on");
				s->blen = 0;
				if (size == 0) {
					s->state = S_TRAILER;
				} else {
					s->left = (uint64_t)size;
					s->state = S_CHUNK_DATA;
				}
				break;
			}
			/* The trailer section ends with an empty line. */
			bool over = s->blen == 2 || (s->blen >= 4 && memcmp(s->buf + s->blen - 4,
									    "\r\n\r\n", 4) == 0);
			if (!over)
				break;
			if (emit(ctx, s->buf, s->blen) < 0)
				return err_set(e, ERR_INTERNAL, "cannot pass the bytes on");
			httpreq_request_done(s);
			break;
		}
		}
	}
	return 0;
}
