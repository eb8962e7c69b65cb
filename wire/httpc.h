/*
 * httpc: one blocking HTTP request on libcurl, for cubicle's clients
 * (cubicled's envd client, the `cubicle` CLI).
 *
 * A request is described by a struct; the answer's status, content type,
 * image headers and body come back in a struct httpc_reply. Bodies can be
 * streamed both ways through file descriptors, so files of any size never
 * sit in memory. Connections are kept alive and reused through a share
 * (httpc_share_new), which may be used from several threads.
 *
 * This is a separate library (wire_httpc) from wire: envd links wire and
 * must not depend on libcurl inside the guest images.
 */
#ifndef CUBICLE_WIRE_HTTPC_H
#define CUBICLE_WIRE_HTTPC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "err.h"

struct httpc_share; /* a connection cache shared by requests */

struct httpc_request {
	const char *method;	 /* "GET", "POST", "PUT", "DELETE" */
	const char *url;	 /* absolute, query string escaped (httpc_escape) */
	const char *unix_socket; /* connect here instead of the URL's host, or NULL */
	const char *bearer;	 /* "Authorization: Bearer <bearer>", or NULL */
	/* More request header lines ("Name: value"), NULL-terminated; NULL = none. */
	const char *const *headers;
	/* The request body: len bytes in memory, or streamed from body_fd. */
	const void *body;
	size_t body_len;
	const char *body_type; /* its Content-Type, or NULL */
	int body_fd;	       /* >= 0: upload body_fd_len bytes from here */
	uint64_t body_fd_len;
	/* The answer's body goes to memory, except: out_fd >= 0 takes a 2xx
	 * body (an error's JSON still lands in memory), or every body when
	 * out_fd_always is set. */
	int out_fd;
	bool out_fd_always;
	long timeout_ms;	 /* the whole request; 0 = no limit */
	long connect_timeout_ms; /* the connection alone; 0 = 10 s */
	/* Limits on what the server sends (0 = none). Past one the transfer is
	 * aborted, its connection closed (never reused), and httpc_perform is
	 * -1 with ERR_BAD_GATEWAY naming the limit. */
	size_t max_body;    /* bytes of a body kept in memory */
	size_t max_headers; /* bytes of all header lines together */
	long min_speed_bps; /* abort when slower than this ... */
	long min_speed_s;   /* ... for this many seconds in a row */
	/* out_fd mode: asked before bytes are written to out_fd, with how many
	 * more are about to be (first with the announced Content-Length, when
	 * there is one, so a huge file fails before its first byte). Returns 0
	 * to go on, or -1 with e filled: the transfer stops and httpc_perform
	 * fails with that error. NULL = no limit. */
	int (*out_reserve)(void *arg, uint64_t more, struct err *e);
	void *out_reserve_arg;
	/* Memory mode: asked before the body's buffer grows by `more` bytes,
	 * so that many transfers together stay under a budget; returns 0, or
	 * -1 with e filled to stop the transfer. Everything it allowed is
	 * given back at the end of httpc_perform with mem_release. NULL = no
	 * budget. */
	int (*mem_reserve)(uint64_t more, struct err *e);
	void (*mem_release)(uint64_t bytes);
	struct httpc_share *share;
	/* Called during the transfer (and at least once a second while
	 * waiting): totals are 0 when unknown. */
	void (*progress)(void *arg, uint64_t down_total, uint64_t down_now, uint64_t up_total,
			 uint64_t up_now);
	void *progress_arg;
};

/* What an initialiser of struct httpc_request should start from. */
#define HTTPC_REQUEST_INIT                                                                         \
	{                                                                                          \
		.body_fd = -1, .out_fd = -1                                                        \
	}

struct httpc_reply {
	int status; /* the HTTP status, 0 when none came */
	char content_type[64];
	char *body; /* malloc'd and NUL-terminated (may be NULL when empty) */
	size_t body_len;
	char x_width[16], x_height[16], x_scale[32]; /* image headers, "" if absent */
};

/*
 * Performs q. Any HTTP answer, error statuses included, is 0 with r filled
 * (free it with httpc_reply_free). A transport failure is -1: ERR_TIMEOUT
 * when q->timeout_ms ran out, ERR_UNAVAILABLE when the server could not be
 * reached, ERR_BAD_GATEWAY when it answered something that is not HTTP,
 * broke off its answer, or passed one of q's limits (the message names
 * it), ERR_INTERNAL when out_fd or body_fd failed, out_reserve's error
 * when it refused; the message is libcurl's or the limit's (callers say
 * who did not answer).
 */
int httpc_perform(const struct httpc_request *q, struct httpc_reply *r, struct err *e);

void httpc_reply_free(struct httpc_reply *r);

/* URL-escapes s for a query string; the caller frees the result (NULL on OOM). */
char *httpc_escape(const char *s);

/* A connection cache for requests from any thread; NULL on failure. */
struct httpc_share *httpc_share_new(void);
void httpc_share_free(struct httpc_share *s);

#endif
