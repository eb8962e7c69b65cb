/*
 * httpd's two halves (httpd.c: HTTP exchanges, their jobs and the
 * connections per address; httpd-tunnel.c: WebSocket tunnels to UNIX
 * sockets): the structures and calls they share. Not a public header.
 */
#ifndef CUBICLE_WIRE_HTTPD_INTERNAL_H
#define CUBICLE_WIRE_HTTPD_INTERNAL_H

#include "httpd.h"

#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>

#include <libwebsockets.h>

#define HTTPD_CHUNK (64 * 1024)

enum exchange_state {
	X_ROUTED,  /* waiting for the body */
	X_RUNNING, /* the handler runs on a worker */
	X_RESPOND, /* the response is ready or being sent */
	X_DISCARD, /* answered early: drop any further body */
};

struct exchange {
	struct exchange *next; /* in httpd.jobs while running or done-uncollected */
	struct httpd *h;
	struct lws *wsi; /* loop thread only */
	enum exchange_state state;
	struct httpd_request req;
	struct httpd_route route;
	struct httpd_response resp;
	size_t body_cap;
	bool handler_ran;
	bool done;     /* under h->lock */
	bool orphaned; /* under h->lock */
	bool parked;   /* httpd_park() was called (by the handler's thread) */
	bool released; /* under h->lock: parked, and its job thread has returned */
	bool answered; /* under h->lock: parked, answered before its job thread returned */
	bool headers_sent, close_after;
	bool finished; /* its answer's last byte went out */
	size_t resp_sent;
	char target[160];
	int64_t t0_us; /* clock_now_us() when it began */
	/* The body's deadline (loop thread): body_timeout_s after the headers,
	 * plus 1 s per body_min_rate bytes received. */
	lws_sorted_usec_list_t body_sul;
	uint64_t body_got;
};

struct conn {
	struct exchange *x;
};

/* A WebSocket ⇄ unix socket pipe: `ws` is the client's connection, `raw`
 * the adopted socket (or, for a relay, the WebSocket client connection to
 * the other server). Freed when both are gone. */
struct tunnel {
	struct tunnel *next;
	struct httpd *h;
	struct lws *ws, *raw;
	struct httpd_queue to_raw, to_ws;
	bool ws_paused, raw_paused;
	bool kill;	/* under h->lock: httpd_close_tagged() asked, or the socket went silent */
	bool answered;	/* the socket sent its first bytes */
	bool connected; /* the socket is connected (a TCP port's may still be connecting) */
	bool raw_gone;	/* the socket ended: the client gets what it sent, then a close */
	bool closing;	/* the close frame is asked for: lws finishes the close */
	int close_code;
	char close_reason[64];
	int fd; /* the socket until it is adopted */
	struct httpd_tunnel t;
};

struct tunnel_conn {
	struct tunnel *tn;
};

#define TUNNEL_HIGH (1u << 20) /* pause the sender above this many buffered bytes */

/* A relay (httpd.h): `cl` the client's raw connection on the relay
 * listener, `up` the WebSocket to the computer's envd. Freed when both are
 * gone. */
struct relay {
	struct relay *next; /* h->relays, under h->lock */
	struct httpd *h;
	struct lws *cl, *up;
	bool routed;	  /* the router relayed it (r is filled) */
	bool answering;	  /* an answer or a page is on its way: close after it */
	bool up_open;	  /* the WebSocket to envd is established */
	bool up_ended;	  /* ... and has ended (maybe before its dial returned) */
	bool guest_spoke; /* bytes from the computer reached to_cl */
	bool html;	  /* the first head's Accept asks for text/html (pages) */
	bool kill;	  /* under h->lock: httpd_relays_close() asked */
	bool cl_paused, up_paused;
	char *in; /* the first head (and what came with it) until routed */
	size_t in_len;
	struct httpreq_stream *rw; /* the client's request stream, once routed */
	struct httpd_queue to_up, to_cl;
	int up_close_code; /* envd's close frame, 0 if none */
	char up_close_reason[124];
	int up_http_status;	     /* envd refused the upgrade with this status */
	lws_sorted_usec_list_t life; /* max_seconds */
	struct httpd_relay r;
};

/* Open connections per client address (opts.max_conns_per_addr), loop
 * thread only. A connection is counted when accepted (FILTER_NETWORK_
 * CONNECTION, which knows the address) and tied to its wsi by the
 * WSI_CREATE that lws sends right after for it; WSI_DESTROY uncounts it. */
#define PEER_BUCKETS 256

struct peer {
	struct peer *next;
	int family;
	unsigned char addr[16];
	int conns;
};

struct peer_conn {
	struct peer_conn *next;
	const struct lws *wsi;
	struct peer *p;
};

struct httpd {
	struct httpd_opts o;
	struct lws_context *ctx;
	char address[300];
	char *unix_path;
	volatile sig_atomic_t stopping;
	pthread_mutex_t lock;
	pthread_cond_t idle;
	struct exchange *jobs;
	int running;
	struct tunnel *tunnels;	    /* under lock */
	struct relay *relays;	    /* under lock */
	struct lws_vhost *relay_vh; /* the relay listener's, or NULL */
	char relay_host[256];	    /* its interface (lws keeps the pointer) */
	char relay_address[300];
	struct peer *peers[PEER_BUCKETS];	    /* loop thread */
	struct peer_conn *peer_conns[PEER_BUCKETS]; /* loop thread */
	struct peer *peer_pending;		    /* accepted, its wsi not created yet */
};

/* httpd.c, for the tunnels and relays: a request's fields from its wsi (the
 * upgrade's path, query, headers), and the per-address accounting of a new
 * connection (1: refused) and of its wsi. */
void request_fill_req(struct lws *wsi, struct httpd_request *req, char *target, size_t tlen);
int peer_admit(struct httpd *h, const struct lws_filter_network_conn_args *a, int fd);
void peer_wsi_created(struct httpd *h, const struct lws *wsi);
void peer_wsi_destroyed(struct httpd *h, const struct lws *wsi);

/* httpd-relay.c: the relay listener (from httpd_create) and the loop
 * thread's part of httpd_relays_close(). */
int relay_listen(struct httpd *h, struct err *e);
void relay_reap(struct httpd *h);

/* httpd-tunnel.c: the loop thread closes the tunnels httpd_close_tagged()
 * marked; the two lws protocols' callbacks (the client's WebSocket, the
 * adopted UNIX socket). */
void tunnel_reap(struct httpd *h);
int tunnel_ws_callback(struct lws *wsi, enum lws_callback_reasons reason, void *user, void *in,
		       size_t len);
int tunnel_raw_callback(struct lws *wsi, enum lws_callback_reasons reason, void *user, void *in,
			size_t len);
int tunnel_relay_callback(struct lws *wsi, enum lws_callback_reasons reason, void *user, void *in,
			  size_t len);

#endif
