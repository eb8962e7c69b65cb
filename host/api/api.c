/*
 * api: routes, authentication and the JSON shapes of cubicled's REST API.
 *
 * Handlers are thin: parse, call the core, shape the answer. Paths are
 * matched segment by segment; ids are checked for shape before they reach
 * SQL or a file name.
 */
#include "api.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <linux/openat2.h>
#include <sys/syscall.h>

#include <openssl/crypto.h>
#include <openssl/sha.h>

#include "computeruse.h"
#include "guest-net.h"
#include "httpd.h"
#include "ident.h"
#include "mcp.h"
#include "params.h"
#include "rfbfilter.h"
#include "token.h"

struct api {
	struct core *core;
	struct store *store;
	struct httpd *httpd;
	struct mcp *mcp;
	unsigned char admin_hash[SHA256_DIGEST_LENGTH];
	char spool_dir[512];
	unsigned char stream_key[TOKEN_KEY_BYTES];
	char web_dir[512];
	char frame_ancestors[256];
	int stream_ttl_max_s, stream_max_s;
};

/* Who is calling, decided by the router. */
struct api_caller {
	bool admin;
	char ws[40];  /* "" for the admin */
	char id[64];  /* the path's computer/workspace/session id */
	char sub[64]; /* the action name, or stop/start */
	int spool_fd;
	char spool_path[600];
};

static void api_caller_free(void *p)
{
	struct api_caller *c = p;
	free(c);
}

/* NULL for the admin (sees every workspace), else the caller's workspace. */
static const char *api_ws(const struct api_caller *c)
{
	return c->admin ? NULL : c->ws;
}

static json_t *api_body_json(struct httpd_request *req, struct err *e)
{
	if (req->body_len == 0)
		return json_object();
	json_error_t je;
	json_t *j = json_loadb(req->body, req->body_len, JSON_REJECT_DUPLICATES, &je);
	if (!j) {
		err_set(e, ERR_BAD_REQUEST, "the body is not valid JSON: %s (line %d, column %d)",
			je.text, je.line, je.column);
		return NULL;
	}
	if (!json_is_object(j)) {
		json_decref(j);
		err_set(e, ERR_BAD_REQUEST, "the body must be a JSON object");
		return NULL;
	}
	return j;
}

static void api_answer(struct httpd_response *resp, int rc, int status, json_t *out,
		       const struct err *e)
{
	if (rc < 0)
		httpd_respond_err(resp, e);
	else
		httpd_respond_json(resp, status, out);
}

/* A query integer, or def; -1 with e naming it when malformed. */
static int api_query_int(struct httpd_request *req, const char *name, long long lo, long long hi,
			 long long def, long long *out, struct err *e)
{
	const char *v = httpd_query(req, name);
	*out = def;
	if (!v)
		return 0;
	char *end;
	errno = 0;
	long long n = strtoll(v, &end, 10);
	if (errno || *end || end == v || n < lo || n > hi)
		return err_param(e, name, "%s: expected an integer in [%lld, %lld], got '%.40s'",
				 name, lo, hi, v);
	*out = n;
	return 0;
}

/* Unix seconds or RFC 3339 ("2026-11-22T04:00:00Z") to ms. */
static int api_query_time(struct httpd_request *req, const char *name, int64_t def, int64_t *out,
			  struct err *e)
{
	const char *v = httpd_query(req, name);
	*out = def;
	if (!v || !*v)
		return 0;
	char *end;
	double secs = strtod(v, &end);
	if (!*end && end != v) {
		*out = (int64_t)(secs * 1000);
		return 0;
	}
	struct tm tm = {0};
	char *rest = strptime(v, "%Y-%m-%dT%H:%M:%S", &tm);
	if (!rest || (*rest && strcmp(rest, "Z") != 0 && strncmp(rest, ".", 1) != 0))
		return err_param(e, name,
				 "%s: Unix seconds or UTC RFC 3339 like 2026-11-22T04:00:00Z, not "
				 "'%.40s'",
				 name, v);
	*out = (int64_t)timegm(&tm) * 1000;
	return 0;
}

/* ---- handlers ----------------------------------------------------------------- */

static void api_healthz(void *ctx, struct httpd_request *req, struct httpd_response *resp)
{
	(void)ctx, (void)req;
	httpd_respond_json(resp, 200, json_pack("{s:b, s:s}", "ok", 1, "version", CUBICLE_VERSION));
}

static void api_metrics(void *ctx, struct httpd_request *req, struct httpd_response *resp)
{
	struct api *a = ctx;
	(void)req;
	char *text = core_metrics(a->core);
	resp->status = 200;
	resp->content_type = "text/plain; version=0.0.4";
	resp->body = (unsigned char *)text;
	resp->body_len = text ? strlen(text) : 0;
}

/*
 * A workspace's egress list from the body: *given false when absent; null or
 * [] is the empty list. Every entry must be an IPv4 prefix string
 * (guest-net.h); the error names the bad one. out: "a.b.c.d/len,...".
 */
static int api_egress_param(const json_t *body, const char *name, int allow, char *out, size_t len,
			    bool *given, struct err *e)
{
	json_t *arr = NULL;
	*given = false;
	out[0] = 0;
	if (json_is_null(json_object_get(body, name))) {
		*given = json_object_get(body, name) != NULL;
		return 0;
	}
	if (param_array(body, name, &arr, e) < 0)
		return -1;
	if (!arr)
		return 0;
	*given = true;
	struct guest_net_list l = {0};
	size_t i;
	json_t *v;
	json_array_foreach(arr, i, v)
	{
		if (!json_is_string(v))
			return err_param(e, name, "%s[%zu]: expected a string like \"10.1.0.0/16\"",
					 name, i);
		if (guest_net_list_add(&l, json_string_value(v), allow, name, e) < 0)
			return -1;
	}
	if (guest_net_list_format(&l, out, len) < 0)
		return err_param(e, name, "%s: too long", name);
	return 0;
}

/* GET and PATCH /v1/workspaces/{id}: PATCH changes the egress lists (an
 * absent one is kept); running computers get them at their next start. */
static void api_workspace(void *ctx, struct httpd_request *req, struct httpd_response *resp)
{
	struct api *a = ctx;
	struct api_caller *c = req->user;
	struct err e = {0};
	struct store_workspace w;
	int rc = 0;
	if (req->method == HTTPD_PATCH) {
		static const char *const known[] = {"egress_allow", "egress_deny", NULL};
		char allow[STORE_EGRESS_LEN], deny[STORE_EGRESS_LEN];
		bool has_allow = false, has_deny = false;
		json_t *body = api_body_json(req, &e);
		rc = body ? params_check_known(body, known, &e) : -1;
		if (rc == 0)
			rc = api_egress_param(body, "egress_allow", 1, allow, sizeof allow,
					      &has_allow, &e);
		if (rc == 0)
			rc = api_egress_param(body, "egress_deny", 0, deny, sizeof deny, &has_deny,
					      &e);
		if (rc == 0)
			rc = store_workspace_set_egress(a->store, c->id, has_allow ? allow : NULL,
							has_deny ? deny : NULL, &e);
		json_decref(body);
		if (rc < 0 && e.code == ERR_NOT_FOUND)
			err_set(&e, ERR_NOT_FOUND, "no workspace %.40s", c->id);
	}
	if (rc == 0)
		rc = store_workspace_get(a->store, c->id, &w, &e);
	api_answer(resp, rc, 200, rc == 0 ? store_workspace_json(&w) : NULL, &e);
}

static void api_workspaces(void *ctx, struct httpd_request *req, struct httpd_response *resp)
{
	struct api *a = ctx;
	struct err e = {0};
	if (req->method == HTTPD_GET) {
		json_t *out = NULL;
		int rc = store_workspace_list(a->store, &out, &e);
		api_answer(resp, rc, 200, rc == 0 ? json_pack("{s:o}", "workspaces", out) : NULL,
			   &e);
		return;
	}
	json_t *body = api_body_json(req, &e);
	if (!body) {
		httpd_respond_err(resp, &e);
		return;
	}
	static const char *const known[] = {"name", "max_running", "egress_allow", "egress_deny",
					    NULL};
	const char *name = NULL;
	long long max_running = 0;
	struct store_workspace w;
	char allow[STORE_EGRESS_LEN], deny[STORE_EGRESS_LEN];
	bool given;
	int rc = params_check_known(body, known, &e);
	if (rc == 0)
		rc = param_need_str(body, "name", &name, &e);
	if (rc == 0)
		rc = param_int(body, "max_running", 0, 100000, &max_running, &e) < 0 ? -1 : 0;
	if (rc == 0)
		rc = api_egress_param(body, "egress_allow", 1, allow, sizeof allow, &given, &e);
	if (rc == 0)
		rc = api_egress_param(body, "egress_deny", 0, deny, sizeof deny, &given, &e);
	if (rc == 0)
		rc = store_workspace_create_egress(a->store, name, (int)max_running, allow, deny,
						   &w, &e);
	api_answer(resp, rc, 201, rc == 0 ? store_workspace_json(&w) : NULL, &e);
	json_decref(body);
}

static void api_keys(void *ctx, struct httpd_request *req, struct httpd_response *resp)
{
	struct api *a = ctx;
	struct api_caller *c = req->user;
	struct err e = {0};
	struct store_workspace w;
	char key[64];
	int rc = store_workspace_get(a->store, c->id, &w, &e);
	if (rc == 0)
		rc = store_key_create(a->store, w.id, key, &e);
	api_answer(resp, rc, 201,
		   rc == 0 ? json_pack("{s:s, s:s}", "key", key, "workspace", w.id) : NULL, &e);
}

/* ?wait=STATE&timeout_s=N, read and checked before the operation runs, so
 * a bad value changes nothing. */
struct api_wait {
	const char *state; /* NULL: answer at once */
	int timeout_s;
};

static int api_wait_parse(struct httpd_request *req, struct api_wait *w, struct err *e)
{
	static const char *const states[] = {"running", "stopped", "deleted", "error", NULL};
	w->state = httpd_query(req, "wait");
	bool ok = !w->state;
	for (int i = 0; w->state && states[i]; i++)
		ok = ok || strcmp(w->state, states[i]) == 0;
	if (!ok)
		return err_param(e, "wait",
				 "wait: one of running, stopped, deleted, error, not '%.40s'",
				 w->state);
	long long timeout = 60;
	if (api_query_int(req, "timeout_s", 0, 3600, 60, &timeout, e) < 0)
		return -1;
	w->timeout_s = (int)timeout;
	return 0;
}

/* Refuses a query parameter that is not in known (NULL-terminated). */
static int api_query_known(struct httpd_request *req, const char *const *known, struct err *e)
{
	for (size_t i = 0; i < req->nquery; i++) {
		const char *q = req->query[i];
		size_t len = strcspn(q, "=");
		bool ok = false;
		for (int k = 0; known[k] && !ok; k++)
			ok = strlen(known[k]) == len && strncmp(q, known[k], len) == 0;
		if (!ok) {
			char name[64];
			snprintf(name, sizeof name, "%.*s", (int)(len < 63 ? len : 63), q);
			return err_param(e, name,
					 "%s: not a query parameter here (wait, timeout_s)", name);
		}
	}
	return 0;
}

/* After an operation: blocks until the computer reaches w->state. */
static int api_wait(struct api *a, const struct api_wait *w, const char *id, const char *ws,
		    json_t **out, struct err *e)
{
	if (!w->state)
		return 0;
	json_t *got = NULL;
	if (core_wait(a->core, id, ws, w->state, w->timeout_s, &got, e) < 0)
		return -1;
	json_decref(*out);
	*out = got;
	return 0;
}

static const char *const api_wait_query[] = {"wait", "timeout_s", NULL};

static void api_computers(void *ctx, struct httpd_request *req, struct httpd_response *resp)
{
	struct api *a = ctx;
	struct api_caller *c = req->user;
	struct err e = {0};
	json_t *out = NULL;
	if (req->method == HTTPD_GET) {
		const char *ws = api_ws(c);
		if (!ws)
			ws = httpd_query(req, "workspace");
		int rc = core_list(a->core, ws, httpd_query(req, "state"), httpd_query(req, "kind"),
				   &out, &e);
		api_answer(resp, rc, 200, out, &e);
		return;
	}
	struct api_wait w;
	json_t *body = NULL;
	if (api_query_known(req, api_wait_query, &e) < 0 || api_wait_parse(req, &w, &e) < 0 ||
	    !(body = api_body_json(req, &e)) ||
	    core_create(a->core, api_ws(c), body, &out, &e) < 0) {
		json_decref(body);
		httpd_respond_err(resp, &e);
		return;
	}
	json_decref(body);
	char id[40];
	snprintf(id, sizeof id, "%s", json_string_value(json_object_get(out, "id")));
	if (api_wait(a, &w, id, api_ws(c), &out, &e) < 0) {
		/* The computer exists (and goes on booting): say which it is. */
		json_t *ej = err_to_json(&e);
		json_object_set_new(json_object_get(ej, "error"), "computer_id", json_string(id));
		httpd_respond_json(resp, err_http_status(e.code), ej);
		json_decref(out);
		return;
	}
	httpd_respond_json(resp, 201, out);
}

static void api_computer(void *ctx, struct httpd_request *req, struct httpd_response *resp)
{
	struct api *a = ctx;
	struct api_caller *c = req->user;
	struct err e = {0};
	json_t *out = NULL;
	struct api_wait w;
	int rc = api_wait_parse(req, &w, &e);
	if (rc == 0 && req->method == HTTPD_DELETE)
		rc = core_delete(a->core, c->id, api_ws(c), &out, &e);
	else if (rc == 0 && strcmp(c->sub, "stop") == 0)
		rc = core_stop(a->core, c->id, api_ws(c), &out, &e);
	else if (rc == 0 && strcmp(c->sub, "start") == 0)
		rc = core_start(a->core, c->id, api_ws(c), &out, &e);
	else if (rc == 0)
		rc = core_get(a->core, c->id, api_ws(c), &out, &e);
	if (rc == 0)
		rc = api_wait(a, &w, c->id, api_ws(c), &out, &e);
	api_answer(resp, rc, 200, out, &e);
}

static void api_action(void *ctx, struct httpd_request *req, struct httpd_response *resp)
{
	struct api *a = ctx;
	struct api_caller *c = req->user;
	struct err e = {0};
	struct envd_reply r;
	if (core_action(a->core, c->id, api_ws(c), c->sub, req->body, req->body_len, &r, &e) < 0) {
		httpd_respond_err(resp, &e);
		return;
	}
	/* envd's answer passes through: status, type, body, image headers. */
	resp->status = r.status;
	resp->content_type = strncmp(r.content_type, "image/png", 9) == 0     ? "image/png"
			     : strncmp(r.content_type, "image/jpeg", 10) == 0 ? "image/jpeg"
									      : "application/json";
	resp->body = (unsigned char *)r.body;
	resp->body_len = r.body_len;
	r.body = NULL;
	if (r.x_width[0]) {
		httpd_add_header(resp, "x-width:", r.x_width);
		httpd_add_header(resp, "x-height:", r.x_height);
		httpd_add_header(resp, "x-scale:", r.x_scale);
	}
	envd_reply_free(&r);
}

static void api_computer_use(void *ctx, struct httpd_request *req, struct httpd_response *resp)
{
	struct api *a = ctx;
	struct api_caller *c = req->user;
	computeruse_handle(a->core, c->id, api_ws(c), req, resp);
}

static void api_mcp(void *ctx, struct httpd_request *req, struct httpd_response *resp)
{
	struct api *a = ctx;
	mcp_handle(a->mcp, api_ws(req->user), req, resp);
}

/* Reads a small error answer that a download wrote into fd. */
static void api_error_from_fd(struct httpd_response *resp, int fd, int status)
{
	char buf[4096];
	ssize_t n = pread(fd, buf, sizeof buf - 1, 0);
	buf[n > 0 ? n : 0] = 0;
	json_t *j = json_loads(buf, 0, NULL);
	if (!j)
		j = json_pack("{s:{s:s, s:s}}", "error", "code", "unavailable", "message",
			      "the computer's agent failed to send the file");
	httpd_respond_json(resp, status, j);
}

static int api_tmpfile(struct api *a, struct err *e)
{
	int fd = open(a->spool_dir, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
	if (fd < 0)
		err_set(e, ERR_INTERNAL, "cannot create a spool file: %s", strerror(errno));
	return fd;
}

static void api_files(void *ctx, struct httpd_request *req, struct httpd_response *resp)
{
	struct api *a = ctx;
	struct api_caller *c = req->user;
	struct err e = {0};
	const char *path = httpd_query(req, "path");
	bool session = strncmp(req->path, "/v1/sessions/", 13) == 0;
	if (!path || !*path) {
		err_param(&e, "path", "path: required (?path=...)");
		httpd_respond_err(resp, &e);
		return;
	}
	const char *ws = api_ws(c);
	if (session && !ws)
		ws = httpd_query(req, "workspace");
	if (req->method == HTTPD_GET) {
		if (session) {
			int fd;
			uint64_t size;
			if (core_session_open(a->core, ws, c->id, path, &fd, &size, &e) < 0) {
				httpd_respond_err(resp, &e);
				return;
			}
			resp->status = 200;
			resp->content_type = "application/octet-stream";
			resp->file_fd = fd;
			resp->file_len = size;
			return;
		}
		int fd = api_tmpfile(a, &e);
		struct envd_reply r;
		if (fd < 0 || core_file_get(a->core, c->id, ws, path, fd, &r, &e) < 0) {
			if (fd >= 0)
				close(fd);
			httpd_respond_err(resp, &e);
			return;
		}
		int status = r.status;
		envd_reply_free(&r);
		if (status != 200) {
			api_error_from_fd(resp, fd, status);
			close(fd);
			return;
		}
		struct stat st;
		fstat(fd, &st);
		lseek(fd, 0, SEEK_SET);
		resp->status = 200;
		resp->content_type = "application/octet-stream";
		resp->file_fd = fd;
		resp->file_len = (uint64_t)st.st_size;
		return;
	}
	/* PUT: the body is in the spool file. */
	lseek(c->spool_fd, 0, SEEK_SET);
	if (session) {
		int rc = core_session_write(a->core, ws, c->id, path, c->spool_fd, &e);
		api_answer(resp, rc, 200,
			   rc == 0 ? json_pack("{s:b, s:s, s:I}", "ok", 1, "path", path, "size",
					       (json_int_t)req->body_written)
				   : NULL,
			   &e);
		return;
	}
	struct envd_reply r;
	if (core_file_put(a->core, c->id, ws, path, c->spool_fd, req->body_written, &r, &e) < 0) {
		httpd_respond_err(resp, &e);
		return;
	}
	resp->status = r.status;
	resp->content_type = "application/json";
	resp->body = (unsigned char *)r.body;
	resp->body_len = r.body_len;
	r.body = NULL;
	envd_reply_free(&r);
}

static void api_usage(void *ctx, struct httpd_request *req, struct httpd_response *resp)
{
	struct api *a = ctx;
	struct api_caller *c = req->user;
	struct err e = {0};
	const char *ws = api_ws(c);
	const char *asked = httpd_query(req, "workspace");
	if (ws && asked && strcmp(ws, asked) != 0) {
		err_set(&e, ERR_NOT_FOUND, "no workspace %.40s", asked);
		httpd_respond_err(resp, &e);
		return;
	}
	if (!ws)
		ws = asked;
	int64_t now = (int64_t)time(NULL) * 1000, from, to;
	json_t *out = NULL;
	int rc = api_query_time(req, "from", 0, &from, &e);
	if (rc == 0)
		rc = api_query_time(req, "to", now + 1000, &to, &e);
	if (rc == 0 && to < from)
		rc = err_param(&e, "to", "to: before from");
	if (rc == 0)
		rc = core_usage(a->core, ws, from, to, &out, &e);
	api_answer(resp, rc, 200, out, &e);
}

/* ---- live streams ------------------------------------------------------------- */

static int api_segments(const char *path, char segs[][64], int n);
static int api_tunnel_check(struct api *a, struct httpd_request *req, struct httpd_tunnel *t,
			    struct err *e);

static int64_t api_now_ms(void)
{
	struct timespec t;
	clock_gettime(CLOCK_REALTIME, &t);
	return (int64_t)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

int api_stream_grant(struct api *a, const char *id, const char *ws, const char *host,
		     long long ttl_s, bool view_only, json_t **out, struct err *e)
{
	if (ttl_s < 1 || ttl_s > a->stream_ttl_max_s)
		return err_param(e, "ttl_s", "ttl_s: expected an integer in [1, %d], got %lld",
				 a->stream_ttl_max_s, ttl_s);
	json_t *c = NULL;
	if (core_get(a->core, id, ws, &c, e) < 0)
		return -1;
	struct token_claims tc = {.view_only = view_only};
	snprintf(tc.computer, sizeof tc.computer, "%.39s", id);
	snprintf(tc.workspace, sizeof tc.workspace, "%s",
		 json_string_value(json_object_get(c, "workspace")));
	json_decref(c);
	/* Only a computer that could stream now gets a token. */
	tc.issued = core_stream_issue_ms(a->core, id);
	char path[300], token[TOKEN_MAX];
	if (core_stream_target(a->core, id, ws, tc.issued, path, sizeof path, e) < 0 ||
	    ident_random_hex(tc.nonce, 8, e) < 0)
		return -1;
	tc.expires = tc.issued / 1000 + ttl_s;
	if (token_mint(a->stream_key, &tc, token, e) < 0)
		return -1;
	char ws_url[1200], embed_url[1200], expires[40];
	if (!host || !*host)
		host = "127.0.0.1";
	snprintf(ws_url, sizeof ws_url, "ws://%s/v1/computers/%s/stream?token=%s", host, id, token);
	snprintf(embed_url, sizeof embed_url, "http://%s/embed/%s?token=%s%s", host, id, token,
		 view_only ? "&view_only=1" : "");
	time_t t = (time_t)tc.expires;
	struct tm tm;
	gmtime_r(&t, &tm);
	strftime(expires, sizeof expires, "%Y-%m-%dT%H:%M:%SZ", &tm);
	*out = json_pack("{s:s, s:s, s:s, s:s, s:b}", "token", token, "expires_at", expires,
			 "ws_url", ws_url, "embed_url", embed_url, "view_only", view_only);
	return *out ? 0 : err_set(e, ERR_INTERNAL, "out of memory");
}

/* POST /v1/computers/{id}/stream {"ttl_s", "view_only"} → a token and URLs. */
static void api_stream(void *ctx, struct httpd_request *req, struct httpd_response *resp)
{
	struct api *a = ctx;
	struct api_caller *c = req->user;
	struct err e = {0};
	json_t *body = api_body_json(req, &e), *out = NULL;
	static const char *const known[] = {"ttl_s", "view_only", NULL};
	long long ttl = 60;
	bool view = false;
	int rc = body ? params_check_known(body, known, &e) : -1;
	if (rc == 0)
		rc = param_int(body, "ttl_s", 1, a->stream_ttl_max_s, &ttl, &e) < 0 ? -1 : 0;
	if (rc == 0)
		rc = param_bool(body, "view_only", &view, &e) < 0 ? -1 : 0;
	if (rc == 0)
		rc = api_stream_grant(a, c->id, api_ws(c), req->host, ttl, view, &out, &e);
	json_decref(body);
	api_answer(resp, rc, 201, out, &e);
}

static void api_stream_revoke(void *ctx, struct httpd_request *req, struct httpd_response *resp)
{
	struct api *a = ctx;
	struct api_caller *c = req->user;
	struct err e = {0};
	json_t *out = NULL;
	if (core_get(a->core, c->id, api_ws(c), &out, &e) < 0) {
		httpd_respond_err(resp, &e);
		return;
	}
	json_decref(out);
	core_stream_revoke(a->core, c->id);
	httpd_respond_json(resp, 200, json_pack("{s:b, s:s}", "ok", 1, "id", c->id));
}

static void api_close_streams(void *ctx, const char *id)
{
	struct api *a = ctx;
	httpd_close_tagged(a->httpd, id, 4403,
			   "the stream was closed: revoked or computer stopped");
}

static void api_viewer_gone(void *ctx, const char *tag)
{
	struct api *a = ctx;
	core_viewer(a->core, tag, -1);
}

/* Checks a stream URL's token and finds where its stream goes (loop thread).
 * t->state is set non-NULL for a view token (api_tunnel installs the filter). */
static int api_tunnel_check(struct api *a, struct httpd_request *req, struct httpd_tunnel *t,
			    struct err *e)
{
	char s[6][64];
	int n = api_segments(req->path, s, 6);
	if (n != 4 || strcmp(s[0], "v1") != 0 || strcmp(s[1], "computers") != 0 ||
	    strcmp(s[3], "stream") != 0 || !ident_ok(s[2], 63))
		return err_set(e, ERR_NOT_FOUND, "no WebSocket endpoint at %.200s", req->path);
	struct token_claims tc;
	if (token_verify(a->stream_key, httpd_query(req, "token"), s[2], api_now_ms() / 1000, &tc,
			 e) < 0)
		return -1;
	if (core_stream_target(a->core, s[2], tc.workspace, tc.issued, t->unix_path,
			       sizeof t->unix_path, e) < 0)
		return -1;
	snprintf(t->tag, sizeof t->tag, "%s", s[2]);
	t->max_seconds = a->stream_max_s;
	t->state = tc.view_only ? (void *)1 : NULL;
	return 0;
}

/* The WebSocket upgrade of GET /v1/computers/{id}/stream?token= (loop thread). */
static int api_tunnel(void *ctx, struct httpd_request *req, struct httpd_tunnel *t, struct err *e)
{
	struct api *a = ctx;
	if (api_tunnel_check(a, req, t, e) < 0)
		return -1;
	bool view_only = t->state != NULL;
	t->state = NULL;
	if (view_only) {
		t->filter = rfbfilter_run;
		t->state = rfbfilter_new();
		t->state_free = rfbfilter_free;
		if (!t->state)
			return err_set(e, ERR_INTERNAL, "out of memory");
	}
	t->on_close = api_viewer_gone;
	core_viewer(a->core, t->tag, +1);
	return 0;
}

/* GET /embed/{id} (the page) and /embed/assets/... (its files). */
static void api_embed(void *ctx, struct httpd_request *req, struct httpd_response *resp)
{
	struct api *a = ctx;
	struct err e = {0};
	const char *rel = "embed.html";
	if (strncmp(req->path, "/embed/assets/", 14) == 0)
		rel = req->path + 7; /* assets/... in the built web client */
	int dfd = open(a->web_dir, O_PATH | O_DIRECTORY | O_CLOEXEC);
	struct open_how how = {.flags = O_RDONLY | O_CLOEXEC,
			       .resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS};
	int fd = dfd < 0 ? -1 : (int)syscall(SYS_openat2, dfd, rel, &how, sizeof how);
	if (dfd >= 0)
		close(dfd);
	struct stat st;
	if (fd < 0 || fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
		if (fd >= 0)
			close(fd);
		err_set(&e, ERR_NOT_FOUND, "no such file: %.200s%s", req->path,
			dfd < 0 ? " (the embed page is not built: make build)" : "");
		httpd_respond_err(resp, &e);
		return;
	}
	static const struct {
		const char *ext, *type;
	} types[] = {{".html", "text/html; charset=utf-8"},
		     {".js", "text/javascript; charset=utf-8"},
		     {".mjs", "text/javascript; charset=utf-8"},
		     {".css", "text/css; charset=utf-8"},
		     {".svg", "image/svg+xml"},
		     {".png", "image/png"},
		     {".json", "application/json"}};
	resp->content_type = "application/octet-stream";
	const char *dot = strrchr(rel, '.');
	for (size_t i = 0; dot && i < sizeof types / sizeof types[0]; i++)
		if (strcmp(dot, types[i].ext) == 0)
			resp->content_type = types[i].type;
	/* Framable by whom the configuration says (no X-Frame-Options DENY);
	 * everything else comes from here alone. noVNC draws the remote cursor
	 * as a data: image. */
	char csp[400];
	snprintf(csp, sizeof csp, "default-src 'self'; img-src 'self' data:; frame-ancestors %s",
		 a->frame_ancestors);
	httpd_add_header(resp, "content-security-policy:", csp);
	httpd_add_header(resp, "referrer-policy:", "no-referrer");
	httpd_add_header(resp, "x-content-type-options:", "nosniff");
	httpd_add_header(resp, "cache-control:", "no-cache");
	resp->status = 200;
	resp->file_fd = fd;
	resp->file_len = (uint64_t)st.st_size;
}

/* ---- the router ----------------------------------------------------------------- */

static int api_auth(struct api *a, struct httpd_request *req, struct api_caller *c, struct err *e)
{
	if (strncasecmp(req->authorization, "Bearer ", 7) != 0)
		return err_set(e, ERR_UNAUTHORIZED,
			       "missing API key: send 'Authorization: Bearer <key>'");
	const char *key = req->authorization + 7;
	unsigned char h[SHA256_DIGEST_LENGTH];
	SHA256((const unsigned char *)key, strlen(key), h);
	if (CRYPTO_memcmp(h, a->admin_hash, sizeof h) == 0) {
		c->admin = true;
		return 0;
	}
	bool admin = false;
	if (store_key_lookup(a->store, key, c->ws, &admin, e) < 0)
		return err_set(e, ERR_UNAUTHORIZED, "unknown or revoked API key");
	c->admin = admin;
	return 0;
}

/* Splits "/a/b/c" into at most n segments (copied into segs). */
static int api_segments(const char *path, char segs[][64], int n)
{
	int k = 0;
	const char *p = path;
	while (*p == '/')
		p++;
	while (*p && k < n) {
		const char *s = strchr(p, '/');
		size_t len = s ? (size_t)(s - p) : strlen(p);
		if (len >= 64)
			return -1;
		memcpy(segs[k], p, len);
		segs[k][len] = 0;
		k++;
		p += len;
		while (*p == '/')
			p++;
	}
	return *p ? -1 : k;
}

static int api_route_files_put(struct api *a, struct httpd_route *route, struct api_caller *c,
			       struct err *e)
{
	snprintf(c->spool_path, sizeof c->spool_path, "%s/upload-XXXXXX", a->spool_dir);
	c->spool_fd = mkostemp(c->spool_path, O_CLOEXEC);
	if (c->spool_fd < 0)
		return err_set(e, ERR_INTERNAL, "cannot spool the upload: %s", strerror(errno));
	/* The handler reads it back; httpd closes body_fd, so hand it a dup. */
	route->body = HTTPD_BODY_FD;
	route->body_fd = dup(c->spool_fd);
	unlink(c->spool_path); /* the open descriptors keep it alive */
	return 0;
}

static void api_caller_close(void *p)
{
	struct api_caller *c = p;
	if (c->spool_fd >= 0)
		close(c->spool_fd);
	api_caller_free(c);
}

static int api_route(void *ctx, struct httpd_request *req, struct httpd_route *route, struct err *e)
{
	struct api *a = ctx;
	if (strcmp(req->path, "/healthz") == 0) {
		route->handler = api_healthz;
		return 0;
	}
	if (strcmp(req->path, "/metrics") == 0) {
		route->handler = api_metrics;
		return 0;
	}
	/* A plain GET of a stream URL: the embed page asks why its WebSocket
	 * failed. The token answers: 401/403 when it is bad, 426 when it is
	 * good (then only the WebSocket was missing). */
	if (req->method == HTTPD_GET && strncmp(req->path, "/v1/computers/", 14) == 0 &&
	    strlen(req->path) > 7 && strcmp(req->path + strlen(req->path) - 7, "/stream") == 0) {
		struct httpd_tunnel t = {0};
		if (api_tunnel_check(a, req, &t, e) < 0)
			return -1;
		return err_set(e, ERR_BAD_REQUEST,
			       "this is a WebSocket endpoint: connect with Upgrade: websocket");
	}
	/* The embed page carries its token in its URL: no API key. */
	if (strncmp(req->path, "/embed/", 7) == 0 && req->method == HTTPD_GET) {
		route->handler = api_embed;
		return 0;
	}
	bool mcp = strcmp(req->path, "/mcp") == 0;
	if (mcp && mcp_check_origin(a->mcp, req, e) < 0)
		return -1;
	if (mcp && req->method == HTTPD_OPTIONS) { /* a CORS preflight has no key */
		route->handler = mcp_preflight;
		return 0;
	}
	struct api_caller *c = calloc(1, sizeof *c);
	if (!c)
		return err_set(e, ERR_INTERNAL, "out of memory");
	c->spool_fd = -1;
	route->user = c;
	route->user_free = api_caller_close;
	if (api_auth(a, req, c, e) < 0)
		return -1;
	route->body = HTTPD_BODY_MEMORY;
	route->max_body = 64u << 20;
	if (mcp) {
		route->handler = api_mcp;
		return 0;
	}
	char s[6][64];
	int n = api_segments(req->path, s, 6);
	enum httpd_method m = req->method;
	if (n < 2 || strcmp(s[0], "v1") != 0)
		goto not_found;
	if (strcmp(s[1], "workspaces") == 0) {
		if (!c->admin)
			return err_set(e, ERR_FORBIDDEN, "managing workspaces needs the admin key");
		if (n == 2 && (m == HTTPD_GET || m == HTTPD_POST)) {
			route->handler = api_workspaces;
			return 0;
		}
		if (n == 3 && (m == HTTPD_GET || m == HTTPD_PATCH) && ident_ok(s[2], 63)) {
			snprintf(c->id, sizeof c->id, "%s", s[2]);
			route->handler = api_workspace;
			return 0;
		}
		if (n == 4 && strcmp(s[3], "keys") == 0 && m == HTTPD_POST && ident_ok(s[2], 63)) {
			snprintf(c->id, sizeof c->id, "%s", s[2]);
			route->handler = api_keys;
			return 0;
		}
		goto not_found;
	}
	if (strcmp(s[1], "usage") == 0 && n == 2 && m == HTTPD_GET) {
		route->handler = api_usage;
		return 0;
	}
	if (strcmp(s[1], "computers") == 0) {
		if (n == 2 && (m == HTTPD_GET || m == HTTPD_POST)) {
			route->handler = api_computers;
			return 0;
		}
		if (!ident_ok(s[2], 63))
			return err_set(e, ERR_NOT_FOUND, "no computer %.40s", s[2]);
		snprintf(c->id, sizeof c->id, "%s", s[2]);
		if (n == 3 && (m == HTTPD_GET || m == HTTPD_DELETE)) {
			route->handler = api_computer;
			return 0;
		}
		if (n == 4 && m == HTTPD_POST &&
		    (strcmp(s[3], "stop") == 0 || strcmp(s[3], "start") == 0)) {
			snprintf(c->sub, sizeof c->sub, "%s", s[3]);
			route->handler = api_computer;
			return 0;
		}
		if (n == 5 && strcmp(s[3], "actions") == 0) {
			if (m != HTTPD_POST)
				return err_set(e, ERR_BAD_REQUEST, "actions are called with POST");
			snprintf(c->sub, sizeof c->sub, "%s", s[4]);
			route->handler = api_action;
			return 0;
		}
		if (n == 4 && strcmp(s[3], "computer-use") == 0) {
			if (m != HTTPD_POST)
				return err_set(e, ERR_BAD_REQUEST,
					       "computer-use is called with POST");
			route->handler = api_computer_use;
			return 0;
		}
		if (n == 4 && strcmp(s[3], "stream") == 0) {
			if (m != HTTPD_POST)
				return err_set(e, ERR_BAD_REQUEST,
					       "GET .../stream is a WebSocket (subprotocol binary) "
					       "with ?token=; POST mints the token");
			route->handler = api_stream;
			return 0;
		}
		if (n == 5 && strcmp(s[3], "stream") == 0 && strcmp(s[4], "revoke") == 0 &&
		    m == HTTPD_POST) {
			route->handler = api_stream_revoke;
			return 0;
		}
		if (n == 4 && strcmp(s[3], "files") == 0) {
			route->handler = api_files;
			if (m == HTTPD_GET)
				return 0;
			if (m == HTTPD_PUT)
				return api_route_files_put(a, route, c, e);
			return err_set(e, ERR_BAD_REQUEST, "files answer GET and PUT");
		}
		goto not_found;
	}
	if (strcmp(s[1], "sessions") == 0 && n == 4 && strcmp(s[3], "files") == 0) {
		if (!ident_ok(s[2], 63))
			return err_param(e, "session", "session: not a session id");
		snprintf(c->id, sizeof c->id, "%s", s[2]);
		route->handler = api_files;
		if (m == HTTPD_GET)
			return 0;
		if (m == HTTPD_PUT)
			return api_route_files_put(a, route, c, e);
		return err_set(e, ERR_BAD_REQUEST, "files answer GET and PUT");
	}
not_found:
	return err_set(e, ERR_NOT_FOUND, "no such endpoint: %s %.200s (see docs/api.md)",
		       req->method_name, req->path);
}

struct api *api_create(struct core *core, struct store *store, const struct api_opts *o,
		       struct err *e)
{
	struct api *a = calloc(1, sizeof *a);
	if (!a) {
		err_set(e, ERR_INTERNAL, "out of memory");
		return NULL;
	}
	a->core = core;
	a->store = store;
	SHA256((const unsigned char *)o->admin_key, strlen(o->admin_key), a->admin_hash);
	snprintf(a->spool_dir, sizeof a->spool_dir, "%s", o->spool_dir);
	memcpy(a->stream_key, o->stream_key, TOKEN_KEY_BYTES);
	snprintf(a->web_dir, sizeof a->web_dir, "%s", o->web_dir ? o->web_dir : "");
	snprintf(a->frame_ancestors, sizeof a->frame_ancestors, "%s",
		 o->frame_ancestors ? o->frame_ancestors : "'self'");
	a->stream_ttl_max_s = o->stream_ttl_max_s > 0 ? o->stream_ttl_max_s : 600;
	a->stream_max_s = o->stream_max_s > 0 ? o->stream_max_s : 3600;
	mkdir(a->spool_dir, 0700);
	struct httpd_opts ho = {
	    .listen = o->listen,
	    .router = api_route,
	    .ctx = a,
	    .max_body = 64u << 20,
	    .max_jobs = 256,
	    .log_prefix = "cubicled",
	    .tunnel = api_tunnel,
	    .extra_headers = mcp_extra_headers,
	};
	a->mcp = mcp_create(core, a, o->mcp_origins, e);
	a->httpd = a->mcp ? httpd_create(&ho, e) : NULL;
	if (!a->httpd) {
		mcp_destroy(a->mcp);
		free(a);
		return NULL;
	}
	core_on_close_streams(core, api_close_streams, a);
	return a;
}

const char *api_address(const struct api *a)
{
	return httpd_address(a->httpd);
}

int api_run(struct api *a)
{
	return httpd_run(a->httpd);
}

void api_stop(struct api *a)
{
	httpd_stop(a->httpd);
}

void api_destroy(struct api *a)
{
	if (a && httpd_destroy(a->httpd) == 0) {
		mcp_destroy(a->mcp);
		free(a);
	}
}
