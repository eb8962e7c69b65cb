/*
 * envd_client: how cubicled talks to a computer's envd (the contract in
 * envd/README.md), over the address the driver gives ("unix:/path" or
 * "tcp:127.0.0.1:port"), with the computer's token. libcurl, blocking: call
 * it from worker threads.
 */
#ifndef CUBICLE_ENVD_CLIENT_H
#define CUBICLE_ENVD_CLIENT_H

#include <stddef.h>
#include <stdint.h>

#include "err.h"
#include "httpc.h"

/* envd's answer is an HTTP reply: status, content type, body, image
 * headers (struct httpc_reply of wire/httpc.h). */
#define envd_reply httpc_reply

void envd_reply_free(struct envd_reply *r);

/*
 * What cubicled accepts from a guest, whatever its envd does (set once at
 * startup, before any call; 0 keeps a default). Every byte from envd is
 * untrusted: past a limit the call fails, the connection to that envd is
 * dropped (never reused) and the caller gets ERR_BAD_GATEWAY (502) naming
 * the limit, or ERR_TIMEOUT (504) naming the deadline.
 */
struct envd_limits {
	size_t max_answer;   /* an answer's body kept in memory (JSON, a screenshot): 64 MiB */
	size_t max_answers;  /* all answers being received at once, together: 512 MiB */
	size_t max_headers;  /* all its header lines: 64 KiB */
	long action_s;	     /* an action's deadline, when the action has none: 120 s */
	long file_s;	     /* a file transfer's deadline: 3600 s */
	long file_min_bps;   /* a file transfer slower than this ... : 1024 bytes/s */
	long file_min_bps_s; /* ... for this long fails: 30 s */
};
void envd_set_limits(const struct envd_limits *l);
/* The limits in force (defaults filled in). */
struct envd_limits envd_get_limits(void);

/*
 * POSTs a JSON body to /v1/actions/<action>, waiting at most timeout_s (0 =
 * the action deadline of envd_limits). A transport failure is -1:
 * ERR_UNAVAILABLE (envd unreachable), ERR_TIMEOUT (the deadline),
 * ERR_BAD_GATEWAY (not HTTP, cut short, over a limit); any HTTP answer,
 * error statuses included, is 0 with the reply filled.
 */
int envd_action(const char *address, const char *token, const char *action, const char *body,
		size_t len, long timeout_s, struct envd_reply *r, struct err *e);

/* POST /v1/setup with a JSON body (host/core/guest-setup.h): the guest's
 * settings at each start, within timeout_ms. */
int envd_setup(const char *address, const char *token, const char *body, size_t len,
	       long timeout_ms, struct envd_reply *r, struct err *e);

/* GET /health. */
int envd_health(const char *address, const char *token, long timeout_ms, struct envd_reply *r,
		struct err *e);

/* POST /v1/cdp: the desktop's Chromium with its DevTools endpoint, started
 * or reused (envd/cdp.h); within timeout_s. */
int envd_cdp(const char *address, const char *token, long timeout_s, struct envd_reply *r,
	     struct err *e);

/* GET /v1/files?path= into fd (not into memory): any size, as far as
 * reserve (see httpc_request.out_reserve; NULL = no limit) allows. An error
 * answer lands in fd too. */
int envd_download(const char *address, const char *token, const char *path, int fd,
		  int (*reserve)(void *arg, uint64_t more, struct err *e), void *reserve_arg,
		  struct envd_reply *r, struct err *e);

/* PUT /v1/files?path= from fd (len bytes from its current offset). */
int envd_upload(const char *address, const char *token, const char *path, int fd, uint64_t len,
		struct envd_reply *r, struct err *e);

/*
 * A call to another cubicled of a cluster, the host that holds a computer
 * (core/remote.c): the same client, limits and memory budget as an envd's
 * answers (the other host's bytes are as untrusted), a second to connect.
 * address is "IP:PORT"; header the node's credential line.
 */
struct envd_node_call {
	const char *method; /* "GET", "POST", "PUT", "DELETE" */
	const char *path;   /* with its query, escaped */
	const char *header; /* "X-Cubicle-Node: ..." */
	const char *body;   /* JSON, or NULL */
	size_t len;
	int body_fd; /* >= 0: upload body_fd_len bytes from here */
	uint64_t body_fd_len;
	int out_fd; /* >= 0: the answer's body (any status) goes here */
	int (*out_reserve)(void *arg, uint64_t more, struct err *e);
	void *out_reserve_arg;
	long timeout_ms; /* 0 = the action deadline */
};
int envd_node(const char *address, const struct envd_node_call *c, struct envd_reply *r,
	      struct err *e);

#endif
