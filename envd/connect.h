/*
 * connect: envd on a machine you bring (docs/byo.md). envd dials cubicled
 * (`envd --connect URL`), one WebSocket to URL/v1/connect that carries
 * every stream (wire/mux.h): cubicled opens a stream per HTTP connection to
 * envd's API and per viewer of its RFB server, and envd relays each to its
 * own server on a UNIX socket in a private directory (0700).
 *
 * The first connection presents the single-use connect token; cubicled's
 * HELLO then carries the machine's own credential, kept in
 * credential_file (0600) and presented on every reconnect (a dropped
 * link, a restart of either side). cubicled's BYE (the machine was
 * deleted), or a refused credential, ends envd with the reason on stderr.
 */
#ifndef CUBICLE_ENVD_CONNECT_H
#define CUBICLE_ENVD_CONNECT_H

#include <stdbool.h>

#include "err.h"

struct connect_opts {
	const char *url;	     /* http://HOST[:PORT][/prefix] or https://... */
	const char *token;	     /* the connect token, or NULL to use the credential */
	const char *credential_file; /* where the credential is kept */
	const char *http_sock;	     /* envd's API: a UNIX socket path */
	const char *vnc_sock;	     /* its RFB server, or NULL */
	const char *hostname;
	bool display;	   /* envd drives an X display */
	int width, height; /* its screen, when display */
};

struct connector;

/* Starts the connection thread; it reconnects until connect_wait_end. */
struct connector *connect_start(const struct connect_opts *o, struct err *e);
/* Waits for the first HELLO: envd's API token (cubicled's, for the local
 * server) into token (len ≥ 80). -1 with e when the first connection was
 * refused or no HELLO came in 60 s. */
int connect_hello(struct connector *cn, char *token, size_t len, struct err *e);
/* Blocks until cubicled ended the machine (BYE) or refused its credential:
 * the reason into why. */
void connect_wait_end(struct connector *cn, char *why, size_t len);

#endif
