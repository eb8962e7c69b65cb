/*
 * httpreq: a client's HTTP/1.1 request stream, read head by head, for a
 * relay that passes it on to a server it does not trust the client's
 * framing to (previews and CDP: host/api/preview.h).
 *
 * httpreq_parse reads one request head (request line and headers, ending
 * in an empty line) strictly: CRLF line ends only, tokens for the method
 * and header names, no control bytes in the target or values, no obsolete
 * line folding, at most HTTPREQ_MAX_HEAD bytes and HTTPREQ_MAX_HEADERS
 * headers. Anything else is malformed: a relay closes such a connection
 * rather than guess where the next request starts.
 *
 * A stream (httpreq_stream_*) then follows every request on a connection:
 * each head is parsed and rewritten by the rules (a cookie or a query
 * parameter removed, Host replaced, Origin dropped, a path prefix stripped) and its body passed
 * through unchanged by its framing (Content-Length or chunked; both at once,
 * two different lengths or another transfer coding is malformed). After a
 * request that upgrades the connection (Upgrade, or CONNECT) every byte
 * passes untouched. Output comes out through a callback; bytes pass as soon
 * as their place in the stream is known.
 */
#ifndef CUBICLE_WIRE_HTTPREQ_H
#define CUBICLE_WIRE_HTTPREQ_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "err.h"

#define HTTPREQ_MAX_HEAD    16384
#define HTTPREQ_MAX_HEADERS 100

struct httpreq_header {
	const char *name, *value; /* into the parsed buffer; not NUL-terminated */
	size_t nlen, vlen;	  /* the value without surrounding spaces */
};

struct httpreq_head {
	const char *method, *target; /* into the buffer */
	size_t method_len, target_len;
	int minor; /* HTTP/1.minor: 0 or 1 */
	size_t nheaders;
	struct httpreq_header headers[HTTPREQ_MAX_HEADERS];
	size_t len; /* bytes of the head, its empty line included */
};

/*
 * Where the head that starts buf ends: its length (empty line included), 0
 * when more bytes are needed, -1 when it cannot be a head (longer than
 * HTTPREQ_MAX_HEAD, or a bare LF). Leading empty lines are not skipped.
 */
long httpreq_head_end(const char *buf, size_t len);

/* Parses the head at the start of buf (len: httpreq_head_end's answer);
 * h points into buf. ERR_BAD_REQUEST saying what is wrong. */
int httpreq_parse(const char *buf, size_t len, struct httpreq_head *h, struct err *e);

/* The first header called name (case-insensitive), or NULL; *vlen its length. */
const char *httpreq_get(const struct httpreq_head *h, const char *name, size_t *vlen);
/* Copies the first header called name into out (NUL-terminated, truncated to
 * len - 1): its length, or -1 when absent (out is then ""). */
long httpreq_copy(const struct httpreq_head *h, const char *name, char *out, size_t len);
/* The value of the nth cookie called `name` (from 0, across the Cookie
 * headers: a browser may send several of one name, set for different
 * domains or paths), copied into out: its length, -1 when there is no nth
 * or it is longer than len - 1. */
long httpreq_cookie(const struct httpreq_head *h, const char *name, int nth, char *out, size_t len);
/* The raw value of query parameter `name` of a request target, copied into
 * out: its length, -1 when absent or longer than len - 1. */
long httpreq_query(const char *target, size_t tlen, const char *name, char *out, size_t len);
/* The target without query parameter `name` (every occurrence), into out
 * (NUL-terminated): its length, or -1 when out is too small. */
long httpreq_without_query(const char *target, size_t tlen, const char *name, char *out,
			   size_t len);
/* Whether a header's comma-separated value lists `token` (case-insensitive). */
bool httpreq_lists(const struct httpreq_head *h, const char *name, const char *token);

/* How a stream rewrites each request head. NULL / false: left alone. */
struct httpreq_rules {
	const char *drop_cookie;  /* this cookie is removed from Cookie headers */
	const char *host;	  /* replaces the Host header's value */
	bool drop_origin;	  /* the Origin header goes */
	const char *strip_prefix; /* removed from the start of a target that has it */
	const char *drop_query;	  /* this query parameter is removed from targets */
};

struct httpreq_stream;

/* The rules' strings are copied. NULL when out of memory. */
struct httpreq_stream *httpreq_stream_new(const struct httpreq_rules *rules);
void httpreq_stream_free(struct httpreq_stream *s);

/*
 * Feeds len client bytes; what is to be sent on goes out through emit (any
 * number of calls, possibly none yet). 0, or -1 with e when the stream is
 * malformed or emit failed (emit returns -1): the connection must close.
 */
int httpreq_stream_feed(struct httpreq_stream *s, const unsigned char *in, size_t len,
			int (*emit)(void *ctx, const void *p, size_t n), void *ctx, struct err *e);

/* Requests whose heads were read so far, and whether the stream passes bytes
 * untouched now (after an upgrade). */
uint64_t httpreq_stream_requests(const struct httpreq_stream *s);
bool httpreq_stream_raw(const struct httpreq_stream *s);

#endif
