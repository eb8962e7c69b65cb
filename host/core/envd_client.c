/*
 * envd_client: envd's HTTP API over wire/httpc (libcurl), on a unix socket
 * or loopback TCP.
 *
 * Calls come from short-lived worker threads; they all share one connection
 * cache, so consecutive actions on a computer reuse a kept-alive connection
 * to its envd instead of paying a connect per call.
 */
#include "envd_client.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static struct httpc_share *envd_share;
static pthread_once_t envd_once = PTHREAD_ONCE_INIT;

static struct envd_limits envd_limits = {
    .max_answer = 64u << 20,
    .max_answers = 512u << 20,
    .max_headers = 64u << 10,
    .action_s = 120,
    .file_s = 3600,
    .file_min_bps = 1024,
    .file_min_bps_s = 30,
};

void envd_set_limits(const struct envd_limits *l)
{
	if (l->max_answer)
		envd_limits.max_answer = l->max_answer;
	if (l->max_answers)
		envd_limits.max_answers = l->max_answers;
	if (l->max_headers)
		envd_limits.max_headers = l->max_headers;
	if (l->action_s > 0)
		envd_limits.action_s = l->action_s;
	if (l->file_s > 0)
		envd_limits.file_s = l->file_s;
	if (l->file_min_bps > 0)
		envd_limits.file_min_bps = l->file_min_bps;
	if (l->file_min_bps_s > 0)
		envd_limits.file_min_bps_s = l->file_min_bps_s;
}

struct envd_limits envd_get_limits(void)
{
	return envd_limits;
}

static void envd_init(void)
{
	envd_share = httpc_share_new();
}

void envd_reply_free(struct envd_reply *r)
{
	httpc_reply_free(r);
}

/* Bytes of envd answers held in memory by transfers in progress, all
 * computers together: one computer's many calls cannot take the host's
 * memory even when each stays under max_answer. */
static pthread_mutex_t envd_mem_lock = PTHREAD_MUTEX_INITIALIZER;
static uint64_t envd_mem_used;

static int envd_mem_reserve(uint64_t more, struct err *e)
{
	pthread_mutex_lock(&envd_mem_lock);
	bool ok = envd_mem_used + more <= envd_limits.max_answers;
	if (ok)
		envd_mem_used += more;
	uint64_t used = envd_mem_used;
	pthread_mutex_unlock(&envd_mem_lock);
	if (!ok)
		return err_set(
		    e, ERR_UNAVAILABLE,
		    "cubicled holds %llu MiB of agents' answers being received, its limit "
		    "(cubicled --max-envd-answers-mb); try again",
		    (unsigned long long)(used >> 20));
	return 0;
}

static void envd_mem_release(uint64_t bytes)
{
	pthread_mutex_lock(&envd_mem_lock);
	envd_mem_used = envd_mem_used > bytes ? envd_mem_used - bytes : 0;
	pthread_mutex_unlock(&envd_mem_lock);
}

/* Fills q's transport and auth for url_path (starting with '/') on address. */
static int envd_request(struct httpc_request *q, const char *address, const char *token,
			const char *url_path, char *url, size_t url_len, struct err *e)
{
	pthread_once(&envd_once, envd_init);
	q->share = envd_share;
	q->bearer = token;
	if (strncmp(address, "unix:", 5) == 0) {
		q->unix_socket = address + 5;
		snprintf(url, url_len, "http://envd%s", url_path);
	} else if (strncmp(address, "tcp:", 4) == 0) {
		snprintf(url, url_len, "http://%s%s", address + 4, url_path);
	} else {
		return err_set(e, ERR_INTERNAL, "bad envd address '%s'", address);
	}
	q->url = url;
	q->mem_reserve = envd_mem_reserve;
	q->mem_release = envd_mem_release;
	q->max_body = envd_limits.max_answer;
	q->max_headers = envd_limits.max_headers;
	return 0;
}

/* who: what answered ("the computer's agent", "the host that holds the
 * computer"), for the messages. */
static int envd_perform_as(const char *who, const struct httpc_request *q, struct envd_reply *r,
			   struct err *e)
{
	struct err te = {0};
	if (httpc_perform(q, r, &te) == 0)
		return 0;
	httpc_reply_free(r);
	if (strncmp(te.message, "cubicled holds", 14) == 0) { /* the memory budget */
		*e = te;
		return -1;
	}
	switch (te.code) {
	case ERR_INTERNAL:
		return err_set(e, ERR_INTERNAL, "cannot store what %s sent: %s", who, te.message);
	case ERR_TIMEOUT:
		return err_set(e, ERR_TIMEOUT, "%s did not answer within the %ld s deadline: %s",
			       who, q->timeout_ms / 1000, te.message);
	case ERR_BAD_GATEWAY:
		return err_set(e, ERR_BAD_GATEWAY, "%s answered badly: %s%s", who, te.message,
			       strstr(te.message, "MiB)") ? " (cubicled --max-envd-answer-mb)"
							  : "");
	case ERR_UNAVAILABLE:
		return err_set(e, te.code, "%s did not answer: %s", who, te.message);
	default: /* the caller's own refusal (a quota) */
		*e = te;
		return -1;
	}
}

static int envd_perform(const struct httpc_request *q, struct envd_reply *r, struct err *e)
{
	return envd_perform_as("the computer's agent", q, r, e);
}

int envd_node(const char *address, const struct envd_node_call *c, struct envd_reply *r,
	      struct err *e)
{
	memset(r, 0, sizeof *r);
	char url[9000], addr[200];
	snprintf(addr, sizeof addr, "tcp:%s", address);
	const char *headers[] = {c->header, NULL};
	struct httpc_request q = HTTPC_REQUEST_INIT;
	if (envd_request(&q, addr, NULL, c->path, url, sizeof url, e) < 0)
		return -1;
	q.headers = headers;
	q.method = c->method;
	q.body = c->body;
	q.body_len = c->len;
	q.body_type = c->body ? "application/json" : NULL;
	q.body_fd = c->body_fd;
	q.body_fd_len = c->body_fd_len;
	q.out_fd = c->out_fd;
	q.out_fd_always = c->out_fd >= 0;
	q.out_reserve = c->out_reserve;
	q.out_reserve_arg = c->out_reserve_arg;
	q.timeout_ms = c->timeout_ms > 0 ? c->timeout_ms : envd_limits.action_s * 1000;
	/* A node that is gone costs a second, not a request's deadline. */
	q.connect_timeout_ms = 1000;
	if (c->body_fd >= 0 || c->out_fd >= 0) {
		q.min_speed_bps = envd_limits.file_min_bps;
		q.min_speed_s = envd_limits.file_min_bps_s;
	}
	return envd_perform_as("the host that holds the computer", &q, r, e);
}

int envd_action(const char *address, const char *token, const char *action, const char *body,
		size_t len, long timeout_s, struct envd_reply *r, struct err *e)
{
	memset(r, 0, sizeof *r);
	char path[256], url[400];
	snprintf(path, sizeof path, "/v1/actions/%s", action);
	struct httpc_request q = HTTPC_REQUEST_INIT;
	if (envd_request(&q, address, token, path, url, sizeof url, e) < 0)
		return -1;
	q.method = "POST";
	q.body = body ? body : "";
	q.body_len = body ? len : 0;
	q.body_type = "application/json";
	q.timeout_ms = (timeout_s > 0 ? timeout_s : envd_limits.action_s) * 1000;
	return envd_perform(&q, r, e);
}

int envd_setup(const char *address, const char *token, const char *body, size_t len,
	       long timeout_ms, struct envd_reply *r, struct err *e)
{
	memset(r, 0, sizeof *r);
	char url[400];
	struct httpc_request q = HTTPC_REQUEST_INIT;
	if (envd_request(&q, address, token, "/v1/setup", url, sizeof url, e) < 0)
		return -1;
	q.method = "POST";
	q.body = body;
	q.body_len = len;
	q.body_type = "application/json";
	q.timeout_ms = timeout_ms;
	return envd_perform(&q, r, e);
}

int envd_health(const char *address, const char *token, long timeout_ms, struct envd_reply *r,
		struct err *e)
{
	memset(r, 0, sizeof *r);
	char url[400];
	struct httpc_request q = HTTPC_REQUEST_INIT;
	if (envd_request(&q, address, token, "/health", url, sizeof url, e) < 0)
		return -1;
	q.method = "GET";
	q.timeout_ms = timeout_ms;
	return envd_perform(&q, r, e);
}

int envd_cdp(const char *address, const char *token, long timeout_s, struct envd_reply *r,
	     struct err *e)
{
	memset(r, 0, sizeof *r);
	char url[400];
	struct httpc_request q = HTTPC_REQUEST_INIT;
	if (envd_request(&q, address, token, "/v1/cdp", url, sizeof url, e) < 0)
		return -1;
	q.method = "POST";
	q.body = "";
	q.body_len = 0;
	q.timeout_ms = timeout_s * 1000;
	return envd_perform(&q, r, e);
}

/* "/v1/files?path=<escaped>" */
static int envd_files_path(const char *path, char *out, size_t len, struct err *e)
{
	char *esc = httpc_escape(path);
	if (!esc)
		return err_set(e, ERR_INTERNAL, "out of memory");
	int n = snprintf(out, len, "/v1/files?path=%s", esc);
	free(esc);
	if (n < 0 || (size_t)n >= len)
		return err_param(e, "path", "path: too long");
	return 0;
}

/* GET (len < 0: the file into fd) or PUT (len bytes from fd) of envd's
 * /v1/files?path=. */
static int envd_files(const char *address, const char *token, const char *path, int fd, int64_t len,
		      int (*reserve)(void *arg, uint64_t more, struct err *e), void *reserve_arg,
		      struct envd_reply *r, struct err *e)
{
	memset(r, 0, sizeof *r);
	char files[8300], url[8700];
	struct httpc_request q = HTTPC_REQUEST_INIT;
	if (envd_files_path(path, files, sizeof files, e) < 0 ||
	    envd_request(&q, address, token, files, url, sizeof url, e) < 0)
		return -1;
	if (len < 0) {
		q.method = "GET";
		/* Error answers land in fd too: the caller reads them back from there. */
		q.out_fd = fd;
		q.out_fd_always = true;
		q.out_reserve = reserve;
		q.out_reserve_arg = reserve_arg;
	} else {
		q.method = "PUT";
		q.body_fd = fd;
		q.body_fd_len = (uint64_t)len;
	}
	/* Any size, but not forever, and not at a trickle. */
	q.timeout_ms = envd_limits.file_s * 1000;
	q.min_speed_bps = envd_limits.file_min_bps;
	q.min_speed_s = envd_limits.file_min_bps_s;
	return envd_perform(&q, r, e);
}

int envd_download(const char *address, const char *token, const char *path, int fd,
		  int (*reserve)(void *arg, uint64_t more, struct err *e), void *reserve_arg,
		  struct envd_reply *r, struct err *e)
{
	return envd_files(address, token, path, fd, -1, reserve, reserve_arg, r, e);
}

int envd_upload(const char *address, const char *token, const char *path, int fd, uint64_t len,
		struct envd_reply *r, struct err *e)
{
	if (len > INT64_MAX)
		return err_param(e, "length", "length: too large");
	return envd_files(address, token, path, fd, (int64_t)len, NULL, NULL, r, e);
}
