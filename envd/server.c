/*
 * server: envd's endpoints on the shared HTTP server (wire/httpd.h).
 *
 * The router runs on the event loop: it checks the bearer token, picks the
 * handler and, for an upload, opens the temporary file the body streams
 * into (with the client's identity, beside the target). Handlers run on
 * worker threads: actions, health, and file downloads, which open the file
 * there and hand its descriptor back for streaming.
 */
#include "server.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <openssl/crypto.h>
#include <openssl/sha.h>

#include "action.h"
#include "cdp.h"
#include "files.h"
#include "httpd.h"
#include "ident.h"
#include "session.h"
#include "setup.h"

/* Byte tunnels to the computer's loopback ports open at once (previews, CDP). */
#define SERVER_MAX_TUNNELS 256

struct server {
	struct envd *env;
	struct httpd *httpd;
	unsigned char token_hash[SHA256_DIGEST_LENGTH];
	int own_port; /* the TCP port envd listens on (a microVM's 7777), 0 if none */
};

/* ---- handlers (worker threads) ------------------------------------------------- */

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

static void server_health(void *ctx, struct httpd_request *req, struct httpd_response *resp)
{
	struct server *srv = ctx;
	struct envd *env = srv->env;
	(void)req;
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
	httpd_respond_json(resp, 200, h);
}

/*
 * POST /v1/clock?unix_ms=N: sets the guest's wall clock. For the microVM
 * driver after a restore from a snapshot (the guest's clock stood still
 * while it was stopped). cubicled's proxy does not forward it: only the
 * host, which holds the token, calls it. Needs CAP_SYS_TIME (envd as root
 * in a VM; a container's envd gets 409).
 */
static void server_clock(void *ctx, struct httpd_request *req, struct httpd_response *resp)
{
	(void)ctx;
	struct err e = {0};
	const char *v = httpd_query(req, "unix_ms");
	char *end = NULL;
	long long ms = v ? strtoll(v, &end, 10) : 0;
	/* 2020-01-01 .. 2200-01-01 */
	if (!v || !*v || *end || ms < 1577836800000LL || ms > 7258118400000LL) {
		err_param(&e, "unix_ms", "unix_ms: milliseconds since 1970, after 2020");
		httpd_respond_err(resp, &e);
		return;
	}
	struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};
	if (clock_settime(CLOCK_REALTIME, &ts) < 0) {
		err_set(&e, ERR_CONFLICT, "cannot set the clock here: %s", strerror(errno));
		httpd_respond_err(resp, &e);
		return;
	}
	httpd_respond_json(resp, 200, json_pack("{s:b}", "ok", 1));
}

/*
 * POST /v1/setup: the host's settings for the guest at each start (the
 * operator's CA certificates, the pip index, the npm registry:
 * guest/setup.h). Like /v1/clock, only the host calls it (cubicled's proxy
 * does not forward it), and only an envd started with --guest takes it:
 * 409 elsewhere (a machine you bring keeps its owner's settings).
 */
static void server_setup(void *ctx, struct httpd_request *req, struct httpd_response *resp)
{
	struct server *srv = ctx;
	struct err e = {0};
	if (!srv->env->guest) {
		err_set(&e, ERR_CONFLICT, "this envd does not manage its system (no --guest)");
		httpd_respond_err(resp, &e);
		return;
	}
	json_error_t je;
	json_t *body = json_loadb(req->body ? req->body : "", req->body_len, 0, &je);
	if (!json_is_object(body)) {
		json_decref(body);
		err_set(&e, ERR_BAD_REQUEST, "the body must be a JSON object");
		httpd_respond_err(resp, &e);
		return;
	}
	json_t *answer = NULL;
	int rc = setup_apply(body, &answer, &e);
	json_decref(body);
	if (rc < 0) {
		fprintf(stderr, "envd: setup: %s\n", e.message);
		httpd_respond_err(resp, &e);
		return;
	}
	httpd_respond_json(resp, 200, answer);
}

/* POST /v1/cdp: the desktop's Chromium with its DevTools endpoint (cdp.h). */
static void server_cdp(void *ctx, struct httpd_request *req, struct httpd_response *resp)
{
	struct server *srv = ctx;
	(void)req;
	struct err e = {0};
	json_t *out = NULL;
	if (cdp_ensure(srv->env, &out, &e) < 0)
		httpd_respond_err(resp, &e);
	else
		httpd_respond_json(resp, 200, out);
}

static void server_action(void *ctx, struct httpd_request *req, struct httpd_response *resp)
{
	struct server *srv = ctx;
	const struct action *a = req->user;
	struct err e = {0};
	json_t *params;
	size_t i = 0;
	while (i < req->body_len && strchr(" \t\r\n", req->body[i]))
		i++;
	if (i == req->body_len) {
		params = json_object();
	} else {
		json_error_t je;
		params = json_loadb(req->body, req->body_len, JSON_REJECT_DUPLICATES, &je);
		if (!params) {
			err_set(&e, ERR_BAD_REQUEST,
				"the body is not valid JSON: %s (line %d, column %d)", je.text,
				je.line, je.column);
			httpd_respond_err(resp, &e);
			return;
		}
		if (!json_is_object(params)) {
			json_decref(params);
			err_set(&e, ERR_BAD_REQUEST,
				"the body must be a JSON object of parameters, like {\"x\": 10}");
			httpd_respond_err(resp, &e);
			return;
		}
	}
	struct action_reply reply = {0};
	if (action_run(srv->env, a, params, &reply, &e) < 0) {
		httpd_respond_err_detail(resp, &e, reply.json ? json_incref(reply.json) : NULL);
	} else if (reply.body) {
		resp->status = 200;
		resp->content_type =
		    reply.content_type ? reply.content_type : "application/octet-stream";
		resp->body = reply.body;
		resp->body_len = reply.body_len;
		reply.body = NULL;
		if (reply.width > 0) {
			char v[32];
			snprintf(v, sizeof v, "%d", reply.width);
			httpd_add_header(resp, "x-width:", v);
			snprintf(v, sizeof v, "%d", reply.height);
			httpd_add_header(resp, "x-height:", v);
			snprintf(v, sizeof v, "%.6g", reply.scale);
			httpd_add_header(resp, "x-scale:", v);
		}
	} else {
		httpd_respond_json(
		    resp, 200, reply.json ? json_incref(reply.json) : json_pack("{s:b}", "ok", 1));
	}
	action_reply_free(&reply);
	json_decref(params);
}

static struct run_as server_run_as(const struct envd *env)
{
	struct run_as as = {env->run_as_uid, env->run_as_gid, env->run_as_home};
	return as;
}

static void server_file_get(void *ctx, struct httpd_request *req, struct httpd_response *resp)
{
	struct server *srv = ctx;
	struct err e = {0};
	struct run_as as = server_run_as(srv->env);
	const char *path = httpd_query(req, "path");
	if (!path || !*path) {
		err_param(&e, "path", "path: required (GET /v1/files?path=/abs/file)");
		httpd_respond_err(resp, &e);
		return;
	}
	int fd = files_open_as(&as, path, O_RDONLY | O_CLOEXEC, 0, &e);
	if (fd < 0) {
		httpd_respond_err(resp, &e);
		return;
	}
	struct stat st;
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
		close(fd);
		err_param(&e, "path", "path: '%s' is not a regular file", path);
		httpd_respond_err(resp, &e);
		return;
	}
	resp->status = 200;
	resp->content_type = "application/octet-stream";
	resp->file_fd = fd;
	resp->file_len = (uint64_t)st.st_size;
}

/* An upload in progress: the body streams into fd (tmp), renamed over path. */
struct server_upload {
	int fd;
	char *path, *tmp;
};

static void server_upload_free(void *p)
{
	struct server_upload *u = p;
	free(u->path);
	free(u->tmp);
	free(u);
}

static void server_file_put(void *ctx, struct httpd_request *req, struct httpd_response *resp)
{
	(void)ctx;
	struct server_upload *u = req->user;
	struct err e = {0};
	struct stat st;
	/* Keep the mode of a file we replace, as an editor would. */
	if (stat(u->path, &st) == 0 && S_ISREG(st.st_mode))
		fchmod(u->fd, st.st_mode & 07777);
	if (fsync(u->fd) < 0) {
		unlink(u->tmp);
		err_set(&e, ERR_INTERNAL, "cannot write '%s': %s", u->path, strerror(errno));
		httpd_respond_err(resp, &e);
		return;
	}
	if (rename(u->tmp, u->path) < 0) {
		int err = errno;
		unlink(u->tmp);
		if (err == EISDIR)
			err_param(&e, "path", "path: '%s' is a directory", u->path);
		else
			err_set(&e, ERR_INTERNAL, "cannot replace '%s': %s", u->path,
				strerror(err));
		httpd_respond_err(resp, &e);
		return;
	}
	httpd_respond_json(resp, 200,
			   json_pack("{s:b, s:s, s:I}", "ok", 1, "path", u->path, "size",
				     (json_int_t)req->body_written));
}

/* ---- the router (event loop) ---------------------------------------------------- */

static bool server_authorized(const struct server *srv, const struct httpd_request *req)
{
	if (strncasecmp(req->authorization, "Bearer ", 7) != 0)
		return false;
	unsigned char h[SHA256_DIGEST_LENGTH];
	const char *t = req->authorization + 7;
	SHA256((const unsigned char *)t, strlen(t), h);
	/* Comparing digests keeps the time independent of where a guess differs. */
	return CRYPTO_memcmp(h, srv->token_hash, sizeof h) == 0;
}

static int server_route_put(struct server *srv, struct httpd_request *req,
			    struct httpd_route *route, struct err *e)
{
	struct run_as as = server_run_as(srv->env);
	const char *rel = httpd_query(req, "path");
	if (!rel || !*rel)
		return err_param(e, "path", "path: required (PUT /v1/files?path=/abs/file)");
	struct server_upload *u = calloc(1, sizeof *u);
	if (!u)
		return err_set(e, ERR_INTERNAL, "out of memory");
	/* Relative to the user's home, as for read_file/write_file. */
	if (!(u->path = files_resolve(&as, rel, e))) {
		free(u);
		return -1;
	}
	size_t n = strlen(u->path);
	char nonce[13];
	if (ident_random_hex(nonce, 6, e) < 0) {
		server_upload_free(u);
		return -1;
	}
	if (u->path[n - 1] == '/') {
		err_param(e, "path", "path: '%s' names a directory, not a file", u->path);
		server_upload_free(u);
		return -1;
	}
	if (asprintf(&u->tmp, "%s.envd-upload-%s", u->path, nonce) < 0) {
		u->tmp = NULL;
		server_upload_free(u);
		return err_set(e, ERR_INTERNAL, "out of memory");
	}
	u->fd = files_open_as(&as, u->tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644, e);
	if (u->fd < 0) {
		server_upload_free(u);
		return -1;
	}
	route->handler = server_file_put;
	route->body = HTTPD_BODY_FD;
	route->body_fd = u->fd;
	route->abandon_unlink = strdup(u->tmp);
	route->user = u;
	route->user_free = server_upload_free;
	return 0;
}

static int server_route(void *ctx, struct httpd_request *req, struct httpd_route *route,
			struct err *e)
{
	struct server *srv = ctx;
	if (!server_authorized(srv, req))
		return err_set(e, ERR_UNAUTHORIZED,
			       "missing or wrong token: send 'Authorization: Bearer <envd token>'");
	if (strcmp(req->path, "/health") == 0) {
		if (req->method != HTTPD_GET)
			return err_set(e, ERR_BAD_REQUEST, "/health answers GET only");
		route->handler = server_health;
		return 0;
	}
	if (strcmp(req->path, "/v1/clock") == 0) {
		if (req->method != HTTPD_POST)
			return err_set(e, ERR_BAD_REQUEST, "/v1/clock answers POST only");
		route->handler = server_clock;
		return 0;
	}
	if (strcmp(req->path, "/v1/setup") == 0) {
		if (req->method != HTTPD_POST)
			return err_set(e, ERR_BAD_REQUEST, "/v1/setup answers POST only");
		route->handler = server_setup;
		route->body = HTTPD_BODY_MEMORY;
		route->max_body = 2u << 20;
		return 0;
	}
	if (strncmp(req->path, "/v1/actions/", 12) == 0) {
		const char *name = req->path + 12;
		if (req->method != HTTPD_POST)
			return err_set(e, ERR_BAD_REQUEST, "actions are called with POST, not %s",
				       req->method_name);
		const struct action *a = action_find(name);
		if (!a)
			return err_set(e, ERR_NOT_FOUND,
				       "no action named '%.100s' (GET /health lists them)", name);
		route->handler = server_action;
		route->body = HTTPD_BODY_MEMORY;
		route->max_body = srv->env->max_body;
		route->user = (void *)a;
		return 0;
	}
	if (strcmp(req->path, "/v1/cdp") == 0) {
		if (req->method != HTTPD_POST)
			return err_set(e, ERR_BAD_REQUEST, "/v1/cdp answers POST only");
		route->handler = server_cdp;
		return 0;
	}
	if (strcmp(req->path, "/v1/tunnel") == 0)
		return err_set(
		    e, ERR_BAD_REQUEST,
		    "/v1/tunnel is a WebSocket (subprotocol binary): connect with Upgrade: "
		    "websocket");
	if (strcmp(req->path, "/v1/files") == 0) {
		if (req->method == HTTPD_GET) {
			route->handler = server_file_get;
			return 0;
		}
		if (req->method == HTTPD_PUT)
			return server_route_put(srv, req, route, e);
		return err_set(e, ERR_BAD_REQUEST, "/v1/files answers GET and PUT, not %s",
			       req->method_name);
	}
	return err_set(e, ERR_NOT_FOUND, "no such endpoint: %.200s", req->path);
}

/*
 * GET /v1/tunnel?port=N, upgraded to a WebSocket (subprotocol binary): a
 * byte tunnel to 127.0.0.1:N in the computer, for cubicled's previews and
 * CDP (the event loop: the connect is non-blocking; a port nothing listens
 * on closes the tunnel with 4502). The token is the only credential;
 * envd's own port is not a tunnel's.
 */
static int server_tunnel(void *ctx, struct httpd_request *req, struct httpd_tunnel *t,
			 struct err *e)
{
	struct server *srv = ctx;
	if (!server_authorized(srv, req))
		return err_set(e, ERR_UNAUTHORIZED,
			       "missing or wrong token: send 'Authorization: Bearer <envd token>'");
	if (strcmp(req->path, "/v1/tunnel") != 0)
		return err_set(e, ERR_NOT_FOUND, "no WebSocket endpoint at %.200s", req->path);
	const char *v = httpd_query(req, "port");
	char *end = NULL;
	long port = v ? strtol(v, &end, 10) : 0;
	if (!v || !*v || *end || port < 1 || port > 65535)
		return err_param(e, "port", "port: an integer in [1, 65535]");
	if (port == srv->own_port)
		return err_set_param(e, ERR_FORBIDDEN, "port", "port %ld is envd's own", port);
	if (httpd_tunnels_tagged(srv->httpd, "tcp") >= SERVER_MAX_TUNNELS)
		return err_set(e, ERR_LIMIT, "%d tunnels are open, the most envd keeps",
			       SERVER_MAX_TUNNELS);
	t->tcp_port = (int)port;
	t->answer_seconds = -1; /* an HTTP server waits for its client */
	snprintf(t->tag, sizeof t->tag, "tcp");
	return 0;
}

/* ---- lifecycle ------------------------------------------------------------------ */

struct server *server_create(struct envd *env, const struct server_opts *o, struct err *e)
{
	struct server *srv = calloc(1, sizeof *srv);
	if (!srv) {
		err_set(e, ERR_INTERNAL, "out of memory");
		return NULL;
	}
	srv->env = env;
	SHA256((const unsigned char *)o->token, strlen(o->token), srv->token_hash);
	struct httpd_opts ho = {
	    .listen = o->listen,
	    .router = server_route,
	    .tunnel = server_tunnel,
	    .ctx = srv,
	    .max_body = env->max_body,
	    .max_jobs = o->max_jobs,
	    .log_prefix = "envd",
	};
	srv->httpd = httpd_create(&ho, e);
	if (!srv->httpd) {
		free(srv);
		return NULL;
	}
	const char *addr = httpd_address(srv->httpd);
	if (strncmp(addr, "tcp:", 4) == 0)
		srv->own_port = atoi(strrchr(addr, ':') + 1);
	return srv;
}

const char *server_address(const struct server *s)
{
	return httpd_address(s->httpd);
}

int server_run(struct server *s)
{
	return httpd_run(s->httpd);
}

void server_stop(struct server *s)
{
	httpd_stop(s->httpd);
}

int server_destroy(struct server *s)
{
	if (!s)
		return 0;
	if (httpd_destroy(s->httpd) < 0)
		return -1;
	free(s);
	return 0;
}
