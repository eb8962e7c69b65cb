/*
 * server: envd's HTTP API on libwebsockets (see envd/README.md for the
 * contract the host proxies).
 *
 *   POST /v1/actions/<name>   JSON parameters → JSON answer (or image bytes)
 *   GET  /v1/files?path=P     the file's bytes, streamed, any size
 *   PUT  /v1/files?path=P     the body becomes the file (atomic replace)
 *   GET  /health              version, display, capabilities
 *
 * Every request needs `Authorization: Bearer <token>`, compared in constant
 * time. One lws event loop serves all connections; actions run on worker
 * threads (wire/httpd.h), so a slow action never stalls the loop; files
 * stream a chunk per writable callback.
 */
#ifndef CUBICLE_ENVD_SERVER_H
#define CUBICLE_ENVD_SERVER_H

#include "envd.h"
#include "err.h"

struct server;

struct server_opts {
	const char *listen; /* "unix:/path" or "tcp:HOST:PORT" (PORT 0 = any free port) */
	const char *token;  /* the bearer token clients must present */
	int max_jobs;	    /* concurrent actions; more get 503 (0 = 64) */
};

struct server *server_create(struct envd *env, const struct server_opts *o, struct err *e);

/* "tcp:127.0.0.1:43121" or "unix:/run/envd.sock": where it really listens. */
const char *server_address(const struct server *s);

/* Serves until server_stop(). Returns 0. */
int server_run(struct server *s);

/* Makes server_run() return soon. Async-signal-safe. */
void server_stop(struct server *s);

/* Waits (bounded) for running actions, then frees everything and returns 0;
 * -1 when actions still run (they use the envd context: do not free it). */
int server_destroy(struct server *s);

#endif
