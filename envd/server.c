/*
 * server: envd's HTTP front on one libwebsockets event loop.
 *
 * Life of an action request: LWS_CALLBACK_HTTP authenticates and routes it,
 * the JSON body accumulates in HTTP_BODY, and at BODY_COMPLETION a `struct
 * job` runs the action on a detached worker thread. The worker marks the job
 * done and wakes the loop with lws_cancel_service(); EVENT_WAIT_CANCELLED
 * collects finished jobs, turns each into a response and asks for a
 * writable callback, which sends headers, then the body one chunk per
 * callback. If the client disconnects first, the job is orphaned and freed by
 * whichever side finishes last. Only `lock` is shared with workers; every
 * wsi and request is touched on the loop thread alone.
 *
 * File transfers never leave the loop: GET reads one chunk per writable
 * callback, PUT writes each body chunk to a temporary file that is renamed
 * over the target when the body is complete (and unlinked if it is not).
 */
#include "server.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <libwebsockets.h>
#include <openssl/crypto.h>
#include <openssl/sha.h>

#include "action.h"
#include "files.h"
#include "session.h"

#define SERVER_CHUNK   (64 * 1024)
#define SERVER_MAX_URL 8192

enum req_kind {
	REQ_NONE,
	REQ_ACTION,   /* waiting for the body, then for the job */
	REQ_FILE_PUT, /* body goes to fd */
	REQ_RESPOND,  /* response ready in resp (or fd for a file GET) */
	REQ_DISCARD,  /* answered early; drop any body and close */
};

struct request;

struct job {
	struct job *next;
	struct server *srv;
	struct lws *wsi;     /* loop thread only */
	struct request *req; /* loop thread only; valid while !orphaned */
	const struct action *action;
	json_t *params;
	struct action_reply reply;
	struct err err;
	int rc;
	bool done;     /* under srv->lock */
	bool orphaned; /* under srv->lock: the connection went away */
};

/* lws per-session data: one per connection, reset for each transaction. */
struct request {
	enum req_kind kind;
	int method;
	const struct action *action;
	char target[160]; /* method and path, for the log */
	struct timespec t0;

	char *body;
	size_t body_len, body_cap;

	/* lws zero-fills this struct, so "no file" must not be fd 0: has_fd says. */
	bool has_fd;
	int fd;			  /* file GET source or PUT temporary */
	char *put_path, *put_tmp; /* PUT: final and temporary paths */
	uint64_t file_left;	  /* GET: bytes still to send */
	uint64_t put_len;

	int status;
	const char *content_type;
	unsigned char *resp;
	size_t resp_len, resp_sent;
	int img_width, img_height;
	double img_scale;
	bool is_image;
	bool headers_sent;
	bool close_after;

	struct job *job;
};

struct server {
	struct envd *env;
	struct lws_context *ctx;
	struct lws_vhost *vhost;
	char address[300];
	char *unix_path;
	unsigned char token_hash[SHA256_DIGEST_LENGTH];
	int max_jobs;
	volatile sig_atomic_t stopping;

	pthread_mutex_t lock;
	pthread_cond_t idle;
	struct job *jobs; /* running, or done and not collected */
	int running;	  /* worker threads that have not finished */
};

/* ---- responses ------------------------------------------------------- */

static double request_ms(const struct request *r)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)(t.tv_sec - r->t0.tv_sec) * 1e3 + (double)(t.tv_nsec - r->t0.tv_nsec) / 1e6;
}

static void request_release(struct request *r)
{
	free(r->body);
	free(r->resp);
	if (r->has_fd)
		close(r->fd);
	r->has_fd = false;
	if (r->put_tmp)
		unlink(r->put_tmp);
	free(r->put_tmp);
	free(r->put_path);
	r->body = NULL;
	r->resp = NULL;
	r->put_tmp = NULL;
	r->put_path = NULL;
}

static void request_reset(struct request *r)
{
	request_release(r);
	memset(r, 0, sizeof *r);
}

/* Queues `body` (taken over) as the response and asks for a writable callback. */
static void respond(struct lws *wsi, struct request *r, int status, const char *content_type,
		    unsigned char *body, size_t len)
{
	free(r->resp);
	r->kind = REQ_RESPOND;
	r->status = status;
	r->content_type = content_type;
	r->resp = body;
	r->resp_len = len;
	r->resp_sent = 0;
	lws_callback_on_writable(wsi);
}

/* Takes a reference to j. */
static void respond_json(struct lws *wsi, struct request *r, int status, json_t *j)
{
	char *s = j ? json_dumps(j, JSON_COMPACT) : NULL;
	json_decref(j);
	if (!s) {
		static const char oom[] =
		    "{\"error\":{\"code\":\"internal\",\"message\":\"cannot encode the answer\"}}";
		s = strdup(oom);
		status = 500;
	}
	respond(wsi, r, status, "application/json", (unsigned char *)s, s ? strlen(s) : 0);
}

static void respond_err(struct lws *wsi, struct request *r, const struct err *e)
{
	respond_json(wsi, r, err_http_status(e->code), err_to_json(e));
}

/* An answer sent before the request body was read: the connection closes. */
static void respond_early(struct lws *wsi, struct request *r, const struct err *e)
{
	respond_err(wsi, r, e);
	r->close_after = true;
}

static int server_add_header(struct lws *wsi, const char *name, const char *value,
			     unsigned char **p, unsigned char *end)
{
	return lws_add_http_header_by_name(wsi, (const unsigned char *)name,
					   (const unsigned char *)value, (int)strlen(value), p,
					   end);
}

static int request_write(struct lws *wsi, struct server *srv, struct request *r)
{
	static unsigned char buf[LWS_PRE + SERVER_CHUNK];
	(void)srv;
	if (r->kind != REQ_RESPOND)
		return 0;
	bool is_file = r->has_fd;
	if (!r->headers_sent) {
		unsigned char *start = buf + LWS_PRE, *p = start, *end = buf + sizeof buf - 1;
		uint64_t len = is_file ? r->file_left : r->resp_len;
		if (lws_add_http_common_headers(wsi, (unsigned)r->status, r->content_type, len, &p,
						end))
			return -1;
		if (r->is_image) {
			char w[16], h[16], sc[32];
			snprintf(w, sizeof w, "%d", r->img_width);
			snprintf(h, sizeof h, "%d", r->img_height);
			snprintf(sc, sizeof sc, "%.6g", r->img_scale);
			if (server_add_header(wsi, "x-width:", w, &p, end) ||
			    server_add_header(wsi, "x-height:", h, &p, end) ||
			    server_add_header(wsi, "x-scale:", sc, &p, end))
				return -1;
		}
		if (r->close_after && server_add_header(wsi, "connection:", "close", &p, end))
			return -1;
		if (lws_finalize_write_http_header(wsi, start, &p, end))
			return -1;
		r->headers_sent = true;
		if (len > 0) {
			lws_callback_on_writable(wsi);
			return 0;
		}
	} else {
		size_t n;
		bool final;
		if (is_file) {
			size_t want =
			    r->file_left < SERVER_CHUNK ? (size_t)r->file_left : SERVER_CHUNK;
			ssize_t got = read(r->fd, buf + LWS_PRE, want);
			if (got <= 0) {
				/* The file shrank or failed under us: the status is sent
				 * already, so the only honest signal is a short body. */
				lwsl_warn("envd: %s: read failed mid-stream\n", r->target);
				return -1;
			}
			n = (size_t)got;
			r->file_left -= n;
			final = r->file_left == 0;
		} else {
			n = r->resp_len - r->resp_sent;
			if (n > SERVER_CHUNK)
				n = SERVER_CHUNK;
			memcpy(buf + LWS_PRE, r->resp + r->resp_sent, n);
			r->resp_sent += n;
			final = r->resp_sent == r->resp_len;
		}
		if (lws_write(wsi, buf + LWS_PRE, n,
			      final ? LWS_WRITE_HTTP_FINAL : LWS_WRITE_HTTP) != (int)n)
			return -1;
		if (!final) {
			lws_callback_on_writable(wsi);
			return 0;
		}
	}
	fprintf(stderr, "envd: %s %d %.2fms\n", r->target, r->status, request_ms(r));
	bool close_after = r->close_after;
	request_reset(r);
	if (close_after || lws_http_transaction_completed(wsi))
		return -1;
	return 0;
}

/* ---- jobs ------------------------------------------------------------ */

static void job_free(struct job *j)
{
	json_decref(j->params);
	action_reply_free(&j->reply);
	free(j);
}

static void *job_main(void *arg)
{
	struct job *j = arg;
	struct server *srv = j->srv;
	j->rc = action_run(srv->env, j->action, j->params, &j->reply, &j->err);

	pthread_mutex_lock(&srv->lock);
	j->done = true;
	if (j->orphaned) {
		struct job **pp = &srv->jobs;
		while (*pp && *pp != j)
			pp = &(*pp)->next;
		if (*pp)
			*pp = j->next;
		job_free(j);
	}
	lws_cancel_service(srv->ctx);
	srv->running--;
	pthread_cond_broadcast(&srv->idle);
	pthread_mutex_unlock(&srv->lock);
	return NULL;
}

static void job_start(struct lws *wsi, struct server *srv, struct request *r, json_t *params)
{
	struct err e = {0};
	struct job *j = calloc(1, sizeof *j);
	if (!j) {
		json_decref(params);
		err_set(&e, ERR_INTERNAL, "out of memory");
		respond_err(wsi, r, &e);
		return;
	}
	j->srv = srv;
	j->wsi = wsi;
	j->req = r;
	j->action = r->action;
	j->params = params;

	pthread_mutex_lock(&srv->lock);
	if (srv->running >= srv->max_jobs || srv->stopping) {
		pthread_mutex_unlock(&srv->lock);
		job_free(j);
		err_set(&e, ERR_UNAVAILABLE, "envd is busy: %d actions are running; retry shortly",
			srv->max_jobs);
		respond_err(wsi, r, &e);
		return;
	}
	pthread_attr_t attr;
	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	pthread_t t;
	int rc = pthread_create(&t, &attr, job_main, j);
	pthread_attr_destroy(&attr);
	if (rc != 0) {
		pthread_mutex_unlock(&srv->lock);
		job_free(j);
		err_set(&e, ERR_UNAVAILABLE, "cannot start a worker thread: %s", strerror(rc));
		respond_err(wsi, r, &e);
		return;
	}
	srv->running++;
	j->next = srv->jobs;
	srv->jobs = j;
	r->job = j;
	pthread_mutex_unlock(&srv->lock);
}

/* Turns a finished job into its request's response (loop thread). */
static void job_deliver(struct job *j)
{
	struct request *r = j->req;
	struct lws *wsi = j->wsi;
	r->job = NULL;
	if (j->rc == 0 && j->reply.body) {
		r->is_image = j->reply.width > 0;
		r->img_width = j->reply.width;
		r->img_height = j->reply.height;
		r->img_scale = j->reply.scale;
		respond(wsi, r, 200,
			j->reply.content_type ? j->reply.content_type : "application/octet-stream",
			j->reply.body, j->reply.body_len);
		j->reply.body = NULL;
	} else if (j->rc == 0) {
		json_t *out =
		    j->reply.json ? json_incref(j->reply.json) : json_pack("{s:b}", "ok", 1);
		respond_json(wsi, r, 200, out);
	} else {
		json_t *ej = err_to_json(&j->err);
		if (json_is_object(j->reply.json)) {
			json_object_update(j->reply.json, ej);
			json_decref(ej);
			ej = json_incref(j->reply.json);
		}
		respond_json(wsi, r, err_http_status(j->err.code), ej);
	}
	job_free(j);
}

static void server_collect(struct server *srv)
{
	struct job *done = NULL;
	pthread_mutex_lock(&srv->lock);
	struct job **pp = &srv->jobs;
	while (*pp) {
		struct job *j = *pp;
		if (j->done && !j->orphaned) {
			*pp = j->next;
			j->next = done;
			done = j;
		} else {
			pp = &j->next;
		}
	}
	pthread_mutex_unlock(&srv->lock);
	while (done) {
		struct job *next = done->next;
		job_deliver(done);
		done = next;
	}
}

/* The connection is going away: a running job keeps running but answers nobody. */
static void request_abandon(struct server *srv, struct request *r)
{
	if (r->job) {
		pthread_mutex_lock(&srv->lock);
		struct job *j = r->job;
		if (j->done) {
			struct job **pp = &srv->jobs;
			while (*pp && *pp != j)
				pp = &(*pp)->next;
			if (*pp)
				*pp = j->next;
			job_free(j);
		} else {
			j->orphaned = true;
		}
		pthread_mutex_unlock(&srv->lock);
		r->job = NULL;
	}
	request_release(r);
	r->kind = REQ_NONE;
}

/* ---- routing --------------------------------------------------------- */

static bool server_authorized(struct server *srv, struct lws *wsi)
{
	char hdr[512];
	int n = lws_hdr_copy(wsi, hdr, sizeof hdr, WSI_TOKEN_HTTP_AUTHORIZATION);
	if (n <= 7 || strncasecmp(hdr, "Bearer ", 7) != 0)
		return false;
	unsigned char h[SHA256_DIGEST_LENGTH];
	SHA256((const unsigned char *)hdr + 7, (size_t)n - 7, h);
	/* Comparing digests keeps the time independent of where a guess differs. */
	return CRYPTO_memcmp(h, srv->token_hash, sizeof h) == 0;
}

static long long request_content_length(struct lws *wsi)
{
	char v[32];
	if (lws_hdr_copy(wsi, v, sizeof v, WSI_TOKEN_HTTP_CONTENT_LENGTH) <= 0)
		return -1;
	char *end;
	long long n = strtoll(v, &end, 10);
	return (*end || n < 0) ? -1 : n;
}

struct health_caps {
	json_t *names;
	bool display;
};

/* Display actions are listed only where they can work. */
static void health_add(const struct action *a, void *arg)
{
	struct health_caps *c = arg;
	if (!(a->flags & ACTION_DISPLAY) || c->display)
		json_array_append_new(c->names, json_string(a->name));
}

static json_t *server_health(struct server *srv)
{
	struct envd *env = srv->env;
	struct health_caps caps = {json_array(), env->desk != NULL};
	action_foreach(health_add, &caps);
	/* Ready: a supervised desktop is usable (panel and desktop mapped); an
	 * unsupervised envd is ready as soon as it answers. */
	bool ready = env->session ? session_ready(env->session) : true;
	json_t *h =
	    json_pack("{s:b, s:s, s:b, s:s?, s:o, s:b}", "ok", 1, "version", CUBICLE_VERSION,
		      "display", env->desk != NULL, "display_name", env->desk ? env->display : NULL,
		      "capabilities", caps.names, "ready", ready);
	if (env->session && ready)
		json_object_set_new(h, "ready_ms", json_real(session_ready_ms(env->session)));
	return h;
}

/* A relative path is relative to the client user's home, as for the
 * read_file/write_file actions. Returns a malloc'd absolute path. */
static char *files_absolute(const struct envd *env, const char *path)
{
	if (path[0] == '/')
		return strdup(path);
	const char *home = env->run_as_home ? env->run_as_home : getenv("HOME");
	char *abs = NULL;
	if (asprintf(&abs, "%s/%s", home && *home ? home : "", path) < 0)
		return NULL;
	return abs;
}

/* PUT /v1/files: the body goes to a temporary file beside the target. */
static int files_put_begin(struct server *srv, struct request *r, const char *rel, struct err *e)
{
	struct envd *env = srv->env;
	struct run_as as = {env->run_as_uid, env->run_as_gid, env->run_as_home};
	if (!*rel)
		return err_param(e, "path", "path: required (PUT /v1/files?path=/abs/file)");
	char *path = files_absolute(env, rel);
	if (!path)
		return err_set(e, ERR_INTERNAL, "out of memory");
	size_t n = strlen(path);
	if (path[n - 1] == '/') {
		err_param(e, "path", "path: '%s' names a directory, not a file", path);
		free(path);
		return -1;
	}
	char *tmp = NULL;
	if (asprintf(&tmp, "%s.envd-upload-%ld-%d", path, (long)getpid(), rand()) < 0) {
		free(path);
		return err_set(e, ERR_INTERNAL, "out of memory");
	}
	int fd = files_open_as(&as, tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644, e);
	if (fd < 0) {
		free(tmp);
		free(path);
		return -1;
	}
	r->fd = fd;
	r->has_fd = true;
	r->put_tmp = tmp;
	r->put_path = path;
	r->kind = REQ_FILE_PUT;
	return 0;
}

static void files_put_finish(struct lws *wsi, struct request *r)
{
	struct err e = {0};
	struct stat st;
	/* Keep the mode of a file we replace, as an editor would. */
	if (stat(r->put_path, &st) == 0 && S_ISREG(st.st_mode))
		fchmod(r->fd, st.st_mode & 07777);
	r->has_fd = false;
	if (fsync(r->fd) < 0 || close(r->fd) < 0) {
		err_set(&e, ERR_INTERNAL, "cannot write '%s': %s", r->put_path, strerror(errno));
		respond_err(wsi, r, &e);
		return;
	}
	if (rename(r->put_tmp, r->put_path) < 0) {
		err_set(&e, errno == EISDIR ? ERR_INVALID : ERR_INTERNAL, "cannot replace '%s': %s",
			r->put_path, strerror(errno));
		if (errno == EISDIR)
			snprintf(e.param, sizeof e.param, "path");
		respond_err(wsi, r, &e);
		return;
	}
	free(r->put_tmp);
	r->put_tmp = NULL;
	respond_json(wsi, r, 200,
		     json_pack("{s:b, s:s, s:I}", "ok", 1, "path", r->put_path, "size",
			       (json_int_t)r->put_len));
}

static int files_get_begin(struct server *srv, struct request *r, const char *path, struct err *e)
{
	struct envd *env = srv->env;
	struct run_as as = {env->run_as_uid, env->run_as_gid, env->run_as_home};
	if (!*path)
		return err_param(e, "path", "path: required (GET /v1/files?path=/abs/file)");
	int fd = files_open_as(&as, path, O_RDONLY | O_CLOEXEC, 0, e);
	if (fd < 0)
		return -1;
	struct stat st;
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
		close(fd);
		return err_param(e, "path", "path: '%s' is not a regular file", path);
	}
	r->fd = fd;
	r->has_fd = true;
	r->file_left = (uint64_t)st.st_size;
	r->kind = REQ_RESPOND;
	r->status = 200;
	r->content_type = "application/octet-stream";
	return 0;
}

/* Starts the action once its whole JSON body is in. */
static void action_begin(struct lws *wsi, struct server *srv, struct request *r)
{
	struct err e = {0};
	json_t *params = NULL;
	size_t i = 0;
	while (i < r->body_len && strchr(" \t\r\n", r->body[i]))
		i++;
	if (i == r->body_len) {
		params = json_object();
	} else {
		json_error_t je;
		params = json_loadb(r->body, r->body_len, JSON_REJECT_DUPLICATES, &je);
		if (!params) {
			err_set(&e, ERR_BAD_REQUEST,
				"the body is not valid JSON: %s (line %d, column %d)", je.text,
				je.line, je.column);
			respond_err(wsi, r, &e);
			return;
		}
		if (!json_is_object(params)) {
			json_decref(params);
			err_set(&e, ERR_BAD_REQUEST,
				"the body must be a JSON object of parameters, like {\"x\": 10}");
			respond_err(wsi, r, &e);
			return;
		}
	}
	free(r->body);
	r->body = NULL;
	r->body_len = r->body_cap = 0;
	job_start(wsi, srv, r, params);
}

static int request_route(struct lws *wsi, struct server *srv, struct request *r)
{
	struct envd *env = srv->env;
	struct err e = {0};
	char *uri = NULL;
	int ulen = 0;
	r->method = lws_http_get_uri_and_method(wsi, &uri, &ulen);
	static const char *const names[] = {"GET",    "POST",	 "OPTIONS", "PUT",  "PATCH",
					    "DELETE", "CONNECT", "HEAD",    ":path"};
	const char *mname = r->method >= 0 && r->method < (int)(sizeof names / sizeof names[0])
				? names[r->method]
				: "?";
	snprintf(r->target, sizeof r->target, "%s %.*s", mname, ulen > 140 ? 140 : ulen,
		 uri ? uri : "");
	char path[512];
	snprintf(path, sizeof path, "%.*s", uri ? ulen : 0, uri ? uri : "");
	long long clen = request_content_length(wsi);
	bool has_body = clen > 0 || lws_hdr_total_length(wsi, WSI_TOKEN_HTTP_TRANSFER_ENCODING) > 0;

	if (!server_authorized(srv, wsi)) {
		err_set(&e, ERR_UNAUTHORIZED,
			"missing or wrong token: send 'Authorization: Bearer <envd token>'");
		respond_early(wsi, r, &e);
		return 0;
	}

	if (strcmp(path, "/health") == 0) {
		if (r->method != LWSHUMETH_GET) {
			err_set(&e, ERR_BAD_REQUEST, "/health answers GET only");
			respond_early(wsi, r, &e);
			return 0;
		}
		respond_json(wsi, r, 200, server_health(srv));
		return 0;
	}

	if (strncmp(path, "/v1/actions/", 12) == 0) {
		const char *name = path + 12;
		if (r->method != LWSHUMETH_POST) {
			err_set(&e, ERR_BAD_REQUEST, "actions are called with POST, not %s", mname);
			respond_early(wsi, r, &e);
			return 0;
		}
		r->action = action_find(name);
		if (!r->action) {
			err_set(&e, ERR_NOT_FOUND,
				"no action named '%.100s' (GET /health lists them)", name);
			respond_early(wsi, r, &e);
			return 0;
		}
		if (clen > (long long)env->max_body) {
			err_set(
			    &e, ERR_TOO_LARGE,
			    "the request body is %lld bytes, over the %zu-byte limit for actions; "
			    "send large files with PUT /v1/files?path=...",
			    clen, env->max_body);
			respond_early(wsi, r, &e);
			return 0;
		}
		r->kind = REQ_ACTION;
		if (!has_body)
			action_begin(wsi, srv, r);
		return 0;
	}

	if (strcmp(path, "/v1/files") == 0) {
		char buf[SERVER_MAX_URL];
		const char *p = lws_get_urlarg_by_name(wsi, "path=", buf, sizeof buf);
		if (!p)
			p = "";
		int rc;
		if (r->method == LWSHUMETH_GET) {
			rc = files_get_begin(srv, r, p, &e);
			if (rc == 0)
				lws_callback_on_writable(wsi);
		} else if (r->method == LWSHUMETH_PUT) {
			rc = files_put_begin(srv, r, p, &e);
			if (rc == 0 && !has_body)
				files_put_finish(wsi, r);
		} else {
			rc = err_set(&e, ERR_BAD_REQUEST, "/v1/files answers GET and PUT, not %s",
				     mname);
		}
		if (rc < 0)
			respond_early(wsi, r, &e);
		return 0;
	}

	err_set(&e, ERR_NOT_FOUND, "no such endpoint: %.200s", path);
	respond_early(wsi, r, &e);
	return 0;
}

static int request_body(struct lws *wsi, struct server *srv, struct request *r, const void *in,
			size_t len)
{
	struct err e = {0};
	if (r->kind == REQ_FILE_PUT) {
		const char *p = in;
		size_t left = len;
		while (left) {
			ssize_t n = write(r->fd, p, left);
			if (n < 0 && errno == EINTR)
				continue;
			if (n < 0) {
				err_set(&e,
					errno == ENOSPC || errno == EDQUOT ? ERR_TOO_LARGE
									   : ERR_INTERNAL,
					"cannot write '%s': %s", r->put_path, strerror(errno));
				request_release(r);
				respond_early(wsi, r, &e);
				return 0;
			}
			p += n;
			left -= (size_t)n;
		}
		r->put_len += len;
		return 0;
	}
	if (r->kind != REQ_ACTION)
		return 0; /* answered early: drop the body */
	if (r->body_len + len > srv->env->max_body) {
		err_set(&e, ERR_TOO_LARGE,
			"the request body is over the %zu-byte limit for actions; send large files "
			"with PUT /v1/files?path=...",
			srv->env->max_body);
		free(r->body);
		r->body = NULL;
		respond_early(wsi, r, &e);
		return 0;
	}
	if (r->body_len + len + 1 > r->body_cap) {
		size_t cap = r->body_cap ? r->body_cap : 4096;
		while (cap < r->body_len + len + 1)
			cap *= 2;
		char *nb = realloc(r->body, cap);
		if (!nb) {
			err_set(&e, ERR_INTERNAL, "out of memory reading the body");
			respond_early(wsi, r, &e);
			return 0;
		}
		r->body = nb;
		r->body_cap = cap;
	}
	memcpy(r->body + r->body_len, in, len);
	r->body_len += len;
	return 0;
}

static int server_callback(struct lws *wsi, enum lws_callback_reasons reason, void *user, void *in,
			   size_t len)
{
	struct request *r = user;
	struct lws_context *ctx = lws_get_context(wsi);
	struct server *srv = ctx ? lws_context_user(ctx) : NULL;

	switch (reason) {
	case LWS_CALLBACK_HTTP:
		if (r->job)
			request_abandon(srv, r);
		request_reset(r);
		clock_gettime(CLOCK_MONOTONIC, &r->t0);
		return request_route(wsi, srv, r);

	case LWS_CALLBACK_HTTP_BODY:
		return request_body(wsi, srv, r, in, len);

	case LWS_CALLBACK_HTTP_BODY_COMPLETION:
		if (r->kind == REQ_ACTION)
			action_begin(wsi, srv, r);
		else if (r->kind == REQ_FILE_PUT)
			files_put_finish(wsi, r);
		return 0;

	case LWS_CALLBACK_HTTP_WRITEABLE:
		return request_write(wsi, srv, r);

	case LWS_CALLBACK_EVENT_WAIT_CANCELLED:
		if (srv)
			server_collect(srv);
		return 0;

	case LWS_CALLBACK_CLOSED_HTTP:
	case LWS_CALLBACK_HTTP_DROP_PROTOCOL:
		if (r)
			request_abandon(srv, r);
		return 0;

	default:
		break;
	}
	return lws_callback_http_dummy(wsi, reason, user, in, len);
}

static const struct lws_protocols server_protocols[] = {
    {"http", server_callback, sizeof(struct request), 0, 0, NULL, 0},
    {NULL, NULL, 0, 0, 0, NULL, 0},
};

/* ---- lifecycle ------------------------------------------------------- */

static void server_log(int level, const char *line)
{
	(void)level;
	fprintf(stderr, "envd: lws: %s", line);
}

struct server *server_create(struct envd *env, const struct server_opts *o, struct err *e)
{
	struct server *srv = calloc(1, sizeof *srv);
	if (!srv) {
		err_set(e, ERR_INTERNAL, "out of memory");
		return NULL;
	}
	srv->env = env;
	srv->max_jobs = o->max_jobs > 0 ? o->max_jobs : 64;
	pthread_mutex_init(&srv->lock, NULL);
	pthread_cond_init(&srv->idle, NULL);
	SHA256((const unsigned char *)o->token, strlen(o->token), srv->token_hash);

	lws_set_log_level(LLL_ERR | LLL_WARN, server_log);

	struct lws_context_creation_info info;
	memset(&info, 0, sizeof info);
	info.protocols = server_protocols;
	info.user = srv;
	info.max_http_header_data = SERVER_MAX_URL + 1024;
	info.timeout_secs = 30;
	info.keepalive_timeout = 60;
	info.options = LWS_SERVER_OPTION_DISABLE_IPV6;
	char host[256] = "";
	if (strncmp(o->listen, "unix:", 5) == 0) {
		const char *path = o->listen + 5;
		if (!*path || strlen(path) >= 100) {
			err_param(e, "listen",
				  "--listen unix:PATH needs a path shorter than 100 bytes");
			goto fail;
		}
		srv->unix_path = strdup(path);
		unlink(path);
		info.options |= LWS_SERVER_OPTION_UNIX_SOCK;
		info.iface = srv->unix_path;
		info.port = 0;
		snprintf(srv->address, sizeof srv->address, "unix:%s", path);
	} else if (strncmp(o->listen, "tcp:", 4) == 0) {
		const char *hp = o->listen + 4;
		const char *colon = strrchr(hp, ':');
		char *end;
		long port = colon ? strtol(colon + 1, &end, 10) : -1;
		if (!colon || colon == hp || *end || port < 0 || port > 65535 ||
		    (size_t)(colon - hp) >= sizeof host) {
			err_param(e, "listen", "--listen tcp:HOST:PORT, e.g. tcp:127.0.0.1:7777");
			goto fail;
		}
		memcpy(host, hp, (size_t)(colon - hp));
		info.iface = host;
		info.port = (int)port;
	} else {
		err_param(e, "listen", "--listen takes unix:PATH or tcp:HOST:PORT, not '%s'",
			  o->listen);
		goto fail;
	}

	srv->ctx = lws_create_context(&info);
	if (!srv->ctx) {
		err_set(e, ERR_UNAVAILABLE, "cannot listen on %s (in use, or no such address?)",
			o->listen);
		goto fail;
	}
	srv->vhost = lws_get_vhost_by_name(srv->ctx, "default");
	if (srv->unix_path) {
		chmod(srv->unix_path, 0600);
	} else {
		int port = srv->vhost ? lws_get_vhost_listen_port(srv->vhost) : info.port;
		snprintf(srv->address, sizeof srv->address, "tcp:%s:%d", host, port);
	}
	return srv;
fail:
	free(srv->unix_path);
	pthread_cond_destroy(&srv->idle);
	pthread_mutex_destroy(&srv->lock);
	free(srv);
	return NULL;
}

const char *server_address(const struct server *s)
{
	return s->address;
}

int server_run(struct server *s)
{
	while (!s->stopping)
		if (lws_service(s->ctx, 0) < 0)
			break;
	return 0;
}

void server_stop(struct server *s)
{
	s->stopping = 1;
	if (s->ctx)
		lws_cancel_service(s->ctx);
}

void server_destroy(struct server *s)
{
	if (!s)
		return;
	/* Give running actions a moment (a bash call may be mid-way). */
	struct timespec until;
	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += 10;
	pthread_mutex_lock(&s->lock);
	s->stopping = 1;
	while (s->running > 0)
		if (pthread_cond_timedwait(&s->idle, &s->lock, &until) != 0)
			break;
	int still = s->running;
	pthread_mutex_unlock(&s->lock);
	if (still > 0) {
		/* Workers still use env and s: leave them be, the process is exiting. */
		fprintf(stderr, "envd: %d actions still running at exit\n", still);
		return;
	}
	lws_context_destroy(s->ctx);
	while (s->jobs) {
		struct job *j = s->jobs;
		s->jobs = j->next;
		job_free(j);
	}
	if (s->unix_path)
		unlink(s->unix_path);
	free(s->unix_path);
	pthread_cond_destroy(&s->idle);
	pthread_mutex_destroy(&s->lock);
	free(s);
}
