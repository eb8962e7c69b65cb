/*
 * httpd: the HTTP/1.1 server envd and cubicled share, on libwebsockets.
 *
 * One lws event loop accepts connections and moves bytes; it never blocks.
 * For each request it calls the router (on the loop, so it must be quick:
 * look at method and path, check credentials, open a spool file) which
 * picks a handler and how the body is kept: in memory up to a limit, or
 * written as it arrives to a file descriptor the router opened (any size).
 * Once the body is complete the handler runs on a worker thread, fills a
 * response (bytes in memory, or a file descriptor streamed a chunk per
 * writable callback) and the loop sends it. A client that goes away
 * mid-request orphans the worker's result, which is then dropped. A
 * handler that must wait long may park its request (httpd_park) instead of
 * holding its thread. Slow or greedy clients are bounded: connections per
 * address, header and body deadlines, body sizes (httpd_opts).
 */
#ifndef CUBICLE_WIRE_HTTPD_H
#define CUBICLE_WIRE_HTTPD_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <jansson.h>

#include "err.h"
#include "log.h"

#define HTTPD_MAX_URL	8192
#define HTTPD_MAX_QUERY 32
#define HTTPD_MAX_EXTRA 4 /* httpd_opts.extra_headers */
#define HTTPD_LOG_KV	6 /* httpd_route.log_kv pairs */

enum httpd_method {
	HTTPD_GET,
	HTTPD_POST,
	HTTPD_PUT,
	HTTPD_DELETE,
	HTTPD_PATCH,
	HTTPD_OPTIONS,
	HTTPD_OTHER
};

/* A request as handlers see it: everything copied off the connection. */
struct httpd_request {
	enum httpd_method method;
	const char *method_name;
	char path[1024];		  /* decoded, without the query */
	char authorization[512];	  /* the Authorization header, "" if none */
	char host[256];			  /* the Host header */
	char origin[256];		  /* the Origin header, "" if none */
	char accept[256];		  /* the Accept header, "" if none */
	char content_type[128];		  /* the Content-Type header, "" if none */
	char extra[HTTPD_MAX_EXTRA][128]; /* httpd_opts.extra_headers' values, "" if absent */
	/* The incoming X-Request-Id when sane (log.h), else a new one; echoed
	 * in the answer, logged, and the handler thread's log_request_id(). */
	char request_id[LOG_REQUEST_ID_MAX + 1];
	long long content_length; /* -1 when not given */
	size_t nquery;
	char *query[HTTPD_MAX_QUERY]; /* decoded "name=value" fragments */
	char *body;		      /* memory mode: the body, NUL-terminated */
	size_t body_len;
	uint64_t body_written; /* file mode: bytes written to the route's fd */
	void *user;	       /* the router's per-request pointer (route.user) */
};

/* The value of query parameter `name`, or NULL. */
const char *httpd_query(const struct httpd_request *req, const char *name);

#define HTTPD_MAX_HEADERS 8

struct httpd_response {
	int status;
	const char *content_type; /* static string */
	unsigned char *body;	  /* malloc'd, freed by httpd */
	size_t body_len;
	int file_fd; /* >= 0: stream file_len bytes from it instead; httpd closes it */
	/* An error answer's code, static (err_code_name, err_code_static):
	 * set by httpd_respond_err*; a handler that relays someone else's
	 * error sets it itself. NULL: derived from the status. */
	const char *err_code;
	uint64_t file_len;
	size_t nheaders;
	struct {
		char name[48]; /* with the colon: "x-width:" */
		char value[208];
	} headers[HTTPD_MAX_HEADERS];
};

/* Helpers for handlers. */
void httpd_respond_json(struct httpd_response *resp, int status, json_t *j); /* steals j */
void httpd_respond_err(struct httpd_response *resp, const struct err *e);
/* Merges e into `detail` (an object, stolen) as {"error":{...}, ...detail}. */
void httpd_respond_err_detail(struct httpd_response *resp, const struct err *e, json_t *detail);
void httpd_add_header(struct httpd_response *resp, const char *name, const char *value);

typedef void (*httpd_handler)(void *ctx, struct httpd_request *req, struct httpd_response *resp);

/*
 * Parking: a handler that must wait for something (a state change) without
 * holding its worker thread calls httpd_park(req) and returns without
 * answering. The request then holds no thread; whoever got the handle
 * fills httpd_parked_response() and calls httpd_parked_done() exactly once,
 * from any thread, even before the handler returned. A client that goes
 * away meanwhile is seen by httpd_parked_gone(); its answer is dropped.
 * Parked requests do not count against max_jobs.
 */
struct httpd_parked;
struct httpd_parked *httpd_park(struct httpd_request *req);
struct httpd_response *httpd_parked_response(struct httpd_parked *p);
bool httpd_parked_gone(struct httpd_parked *p);
void httpd_parked_done(struct httpd_parked *p);

enum httpd_body_mode {
	HTTPD_BODY_MEMORY, /* up to max_body bytes, else 413 */
	HTTPD_BODY_FD,	   /* written to body_fd as it arrives */
};

struct httpd_route {
	httpd_handler handler;
	enum httpd_body_mode body;
	size_t max_body;      /* memory mode; 0 = the server's default */
	int body_fd;	      /* fd mode: where the body goes; httpd closes it after the handler */
	char *abandon_unlink; /* malloc'd path unlinked if the request dies before its handler
				 ran (a spool or temporary file); httpd frees it */
	void *user;	      /* handed to the handler as req->user */
	void (*user_free)(void *user); /* called when the request is done or abandoned */
	/* With the router's -1 only: the answer carries "Retry-After: N" (N > 0)
	 * and these members are added to its "error" object (stolen). */
	int retry_after_s;
	json_t *err_detail;
	/* More of the request's log line: key and value pairs, NULL-ended,
	 * valid until user_free (the router points them into `user`). */
	const char *log_kv[2 * HTTPD_LOG_KV + 1];
};

/* What httpd_opts.on_done learns of a request that ended. */
struct httpd_done {
	int status;
	const char *err_code; /* status >= 400: the answer's error code (static); else NULL */
	int64_t us;	      /* from its headers to its last byte (or its end) */
	uint64_t bytes_out;   /* the body's bytes sent */
	bool gone;	      /* the client left (or the server stopped) before the end */
};

/*
 * Runs on the event loop for every request, headers in, body not yet:
 * fills *route, or returns -1 with e filled to answer at once (the body, if
 * any, is not read and the connection closes after the answer).
 */
typedef int (*httpd_router)(void *ctx, struct httpd_request *req, struct httpd_route *route,
			    struct err *e);

/*
 * WebSocket tunnels: a GET that asks to upgrade to a WebSocket with the
 * subprotocol "binary" (what noVNC asks for) goes to the tunnel router on
 * the loop before the upgrade is accepted. It refuses (the client gets the
 * error's HTTP status, never a WebSocket) or names a unix socket, or a TCP
 * port on 127.0.0.1, or another server's WebSocket to relay to (below);
 * from then on the client's binary frames are written to the socket, byte
 * for byte (through `filter`, if set), and what the socket sends comes back
 * as binary frames. Both directions are flow-controlled; when the socket
 * ends, what it sent is delivered before the close frame (1000).
 *
 * Nothing here blocks the loop: the socket is connected non-blocking (a
 * listener whose backlog is full refuses the upgrade with 503 at once), a
 * socket that sends nothing within `answer_seconds` of the upgrade (a
 * listener that never accepts) closes the tunnel with code 4504, and a TCP
 * port nothing listens on (or that does not connect within 10 s) closes it
 * with 4502 and the reason.
 */
struct httpd;

struct httpd_tunnel {
	char unix_path[108]; /* where the bytes go */
	int tcp_port;	     /* > 0: to 127.0.0.1:tcp_port instead */
	/* Or, with relay_host set: another server's WebSocket, ws://relay_host:
	 * relay_port relay_path (subprotocol "binary"), whose binary messages'
	 * bytes are relayed both ways; relay_header ("name: value" or "") is
	 * added to its handshake. How a node of a cluster hands a stream to the
	 * node that holds its computer: that node checks it all again. Its
	 * refusal arrives after this upgrade was accepted: the client's
	 * WebSocket closes with 4000 + that HTTP status (4403, 4503...), and a
	 * close code 4000..4999 it sends is passed on as it is. relay_host is
	 * an IP address (the loop never waits for a name lookup). */
	char relay_host[64];
	int relay_port;
	char relay_path[512];
	char relay_header[512];
	char tag[64];	 /* for httpd_close_tagged(), e.g. the computer id */
	int max_seconds; /* the tunnel closes after this long; 0 = no limit */
	/* The socket's first bytes must come within this; 0 = 10; < 0 = no such
	 * deadline (a server that waits for its client, such as HTTP). */
	int answer_seconds;
	/* Written to the socket before anything the client sends ("" = none):
	 * how the router tells the socket's server about the connection. */
	char preamble[64];
	/* Rewrites the client→socket stream (it may drop bytes): writes at most
	 * len bytes to out and returns how many, or -1 to close the tunnel.
	 * NULL passes everything. Runs on the loop: must be quick. */
	long (*filter)(void *state, const unsigned char *in, size_t len, unsigned char *out);
	void *state;
	void (*state_free)(void *state);
	void (*on_close)(void *close_ctx, const char *tag); /* once, when the tunnel ends */
	void *close_ctx;
	/* Counters the tunnel adds its bytes to (relaxed atomics, loop thread):
	 * [0] from the client (before the filter), [1] to the client. NULL:
	 * not counted. */
	_Atomic uint64_t *bytes;
};

typedef int (*httpd_tunnel_router)(void *ctx, struct httpd_request *req, struct httpd_tunnel *t,
				   struct err *e);

/* How many tunnels with this tag are open (or being opened). Thread-safe. */
int httpd_tunnels_tagged(struct httpd *h, const char *tag);

/* Closes every tunnel with this tag, soon, with a WebSocket close frame
 * (code 4000..4999 and a short reason the client may show). Thread-safe. */
void httpd_close_tagged(struct httpd *h, const char *tag, int code, const char *reason);

/*
 * Relays (previews and CDP, host/api/preview.h): a second listener
 * (httpd_opts.relay_listen) whose connections are not requests for the
 * router but byte streams to a port inside a computer, through its envd's
 * tunnel (GET /v1/tunnel?port=N on envd, a WebSocket httpd dials itself).
 *
 * The first request head of each connection is read (HTTPREQ_MAX_HEAD
 * bytes within header_timeout_s) and given to the relay router on the loop,
 * which answers it (a redirect, a refusal page: the connection then closes)
 * or says where the connection goes. From then on bytes pass both ways with
 * flow control: the client's through a request-stream rewriter (httpreq.h:
 * every later head is rewritten by the same rules, bodies pass by their
 * framing, a malformed stream closes the connection), the computer's
 * untouched. When the computer's side fails before any of its bytes reached
 * the client (nothing listens on the port, envd cannot be reached) the
 * client gets a page saying so (HTML for a browser, JSON otherwise) instead
 * of a dropped connection. A relay ends with either side, after
 * idle_seconds without a byte either way, after max_seconds, or through
 * httpd_relays_close.
 */
struct httpreq_head;

struct httpd_relay {
	char address[320]; /* the computer's envd: "unix:PATH" or "tcp:HOST:PORT" */
	char token[128];   /* envd's bearer token */
	int port;	   /* the port on the computer's loopback */
	char tag[64];	   /* the computer: httpd_relays_tagged, httpd_relays_close */
	char sub[32];	   /* which of its relays ("p3000", "cdp"): httpd_relays_close */
	char what[160];	   /* for pages: "port 3000 of computer c-…" */
	int max_seconds;   /* the connection ends this long after it was routed (0: never) */
	int idle_seconds;  /* ... or this long after the last byte either way (0: never) */
	/* How every request head the client sends is rewritten (httpreq_rules;
	 * "" / false: left alone). */
	char drop_cookie[32];
	char host[128];
	bool drop_origin;
	char strip_prefix[448]; /* "/cdp/" and a token (TOKEN_MAX) */
	char drop_query[32];
	void (*on_close)(void *close_ctx, const char *tag); /* once, when a routed relay ends */
	void *close_ctx;
};

/* What the relay router answers instead of relaying: status, extra header
 * lines (each ending in CRLF: "location: /\r\n"), a body (malloc'd, freed
 * by httpd) of content_type (a static string). */
struct httpd_relay_answer {
	int status;
	char headers[1200];
	const char *content_type;
	char *body;
	size_t body_len;
};

/* On the loop, with the first request head of a relay connection: 0 with *r
 * filled to relay the connection, 1 with *a filled to answer it instead.
 * Must be quick (memory only). */
typedef int (*httpd_relay_router)(void *ctx, const struct httpreq_head *head, struct httpd_relay *r,
				  struct httpd_relay_answer *a);

/* Fills a with a page saying e: HTML when head's Accept asks for text/html,
 * else {"error":{"code","message"}}; the status is e's. */
void httpd_relay_page(struct httpd_relay_answer *a, const struct httpreq_head *head,
		      const struct err *e);

/* Relays of this tag open now (routed ones). Thread-safe. */
int httpd_relays_tagged(struct httpd *h, const char *tag);
/* Closes the relays of this tag (and sub, unless NULL), soon. Thread-safe. */
void httpd_relays_close(struct httpd *h, const char *tag, const char *sub);
/* "tcp:HOST:PORT" where relays are accepted, "" without a relay listener. */
const char *httpd_relay_address(const struct httpd *h);

struct httpd_opts {
	const char *listen; /* "unix:/path" or "tcp:HOST:PORT" (PORT 0 = any free port) */
	/* A second listener for relays ("tcp:HOST:PORT"; NULL: none), and the
	 * router of their first heads (ctx is the router's too). Connections
	 * per address count with the main listener's. */
	const char *relay_listen;
	httpd_relay_router relay;
	httpd_router router;
	void *ctx;		    /* passed to router and handlers */
	size_t max_body;	    /* default memory-mode limit */
	int max_jobs;		    /* concurrent handlers; more get 503 + Retry-After (0 = 64) */
	const char *log_prefix;	    /* "envd", "cubicled": one log line per request */
	httpd_tunnel_router tunnel; /* NULL: WebSocket upgrades are refused */
	/* Up to HTTPD_MAX_EXTRA more header names (lowercase, no colon, e.g.
	 * "mcp-protocol-version"), NULL-terminated: their values land in
	 * req->extra[] in this order. */
	const char *const *extra_headers;
	/* Connections open at once from one client address (IPv4/IPv6; unix
	 * sockets are not counted); past it a new connection gets a 429 (when
	 * it can be written at once) and is closed before any of it is read.
	 * 0 = no limit. */
	int max_conns_per_addr;
	/* Slow clients: a request's headers must be complete within
	 * header_timeout_s of their first byte (0 = 10), and its body within
	 * body_timeout_s of the headers plus 1 s per body_min_rate bytes
	 * received (0 = 30 s, 16384 B/s); past either the client gets a 408
	 * (when it can be written) and the connection closes. */
	int header_timeout_s;
	int body_timeout_s;
	int body_min_rate;
	/* Called once per request when it ends (answered, refused early, or
	 * its client gone), on the loop or on its worker: it must be quick and
	 * thread-safe (counters, histograms). req->user is the router's. Then
	 * httpd logs the request's line: log_prefix, method and path, status,
	 * milliseconds, the request id, route.log_kv, in log_get_format(). */
	void (*on_done)(void *ctx, const struct httpd_request *req, const struct httpd_done *d);
};

struct httpd;

struct httpd *httpd_create(const struct httpd_opts *o, struct err *e);
/* "tcp:127.0.0.1:43121" or "unix:/run/x.sock": where it really listens. */
const char *httpd_address(const struct httpd *h);
/* Serves until httpd_stop(). */
int httpd_run(struct httpd *h);
/* Makes httpd_run() return soon. Async-signal-safe. */
void httpd_stop(struct httpd *h);
/*
 * Waits up to 10 s for running handlers, then frees everything and returns
 * 0. Returns -1, freeing nothing, when handlers still run (they use h and
 * the caller's ctx: leave both alone, the process is exiting).
 */
int httpd_destroy(struct httpd *h);

/*
 * A byte queue for code that pipes bytes through libwebsockets (the tunnels
 * and relays here, envd's connect link): what one connection received and
 * the other has not sent yet, in one buffer however small the pieces came
 * (a viewer's pointer events are a few bytes a frame; a list of segments
 * would hit lws's 1024-segment limit long before any byte limit).
 * httpd_queue_put appends n bytes (-1: out of memory); httpd_queue_send
 * writes at most `chunk` (<= 64 KiB) bytes to wsi (loop thread, when
 * writable) and asks for another writable callback while bytes remain (-1
 * when lws cannot take them); httpd_queue_free releases the buffer. A
 * queue that empties gives back a large buffer. Zero-initialized is empty.
 */
struct lws;
struct httpd_queue {
	unsigned char *buf;
	size_t head; /* the first byte not sent */
	size_t len;  /* bytes queued */
	size_t cap;
};
int httpd_queue_put(struct httpd_queue *q, const void *in, size_t n);
int httpd_queue_send(struct lws *wsi, struct httpd_queue *q, int how, size_t chunk);
void httpd_queue_free(struct httpd_queue *q);

#endif
