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
 * POSTs a JSON body to /v1/actions/<action>. A transport failure (envd
 * unreachable, timeout) is -1 with ERR_UNAVAILABLE; any HTTP answer,
 * error statuses included, is 0 with the reply filled.
 */
int envd_action(const char *address, const char *token, const char *action, const char *body,
		size_t len, long timeout_s, struct envd_reply *r, struct err *e);

/* GET /health. */
int envd_health(const char *address, const char *token, long timeout_ms, struct envd_reply *r,
		struct err *e);

/* GET /v1/files?path= into fd (not into memory): any size. */
int envd_download(const char *address, const char *token, const char *path, int fd,
		  struct envd_reply *r, struct err *e);

/* PUT /v1/files?path= from fd (len bytes from its current offset). */
int envd_upload(const char *address, const char *token, const char *path, int fd, uint64_t len,
		struct envd_reply *r, struct err *e);

#endif
