/*
 * handlers: the REST API's handlers (docs/api.md). Each is thin: parse,
 * call the core (or the live streams, the runner, MCP, computer-use), shape
 * the answer. They run on worker threads; the router (api.c) picked them,
 * authenticated the caller and checked the path's ids.
 */
#include "api-internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <openssl/crypto.h>

#include "computeruse.h"
#include "guest-net.h"
#include "ident.h"
#include "params.h"
#include "routes.h"
#include "store-runs.h"

/* ---- request helpers -------------------------------------------------------------- */

const char *api_ws(const struct api_caller *c)
{
	return c->admin ? NULL : c->ws;
}

json_t *api_body_json(struct httpd_request *req, struct err *e)
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

void api_answer(struct httpd_response *resp, int rc, int status, json_t *out, const struct err *e)
{
	if (rc < 0)
		httpd_respond_err(resp, e);
	else
		httpd_respond_json(resp, status, out);
}

int api_query_int(struct httpd_request *req, const char *name, long long lo, long long hi,
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

int api_query_time(struct httpd_request *req, const char *name, int64_t def, int64_t *out,
		   struct err *e)
{
	const char *v = httpd_query(req, name);
	*out = def;
	if (!v || !*v)
		return 0;
	char *end;
	double secs = strtod(v, &end);
	if (!*end && end != v) {
		/* Up to the year 5138: a bigger number (or inf, nan) is no time
		 * and would not fit the milliseconds (found by fuzz_api). */
		if (!(secs >= 0 && secs < 1e11))
			return err_param(e, name, "%s: Unix seconds from 0 to 1e11, not '%.40s'",
					 name, v);
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

int api_query_known(struct httpd_request *req, const char *const *known, struct err *e)
{
	for (size_t i = 0; i < req->nquery; i++) {
		const char *q = req->query[i];
		size_t len = strcspn(q, "=");
		bool ok = false;
		for (int k = 0; known[k] && !ok; k++)
			ok = strlen(known[k]) == len && strncmp(q, known[k], len) == 0;
		if (!ok) {
			char name[64], list[256] = "none";
			snprintf(name, sizeof name, "%.*s", (int)(len < 63 ? len : 63), q);
			for (int k = 0, n = 0; known[k] && n < (int)sizeof list; k++)
				n += snprintf(list + n, sizeof list - (size_t)n, "%s%s",
					      k ? ", " : "", known[k]);
			return err_param(e, name, "%s: not a query parameter here (%s)", name,
					 list);
		}
	}
	return 0;
}

/* ---- handlers ----------------------------------------------------------------- */

void api_healthz(void *ctx, struct httpd_request *req, struct httpd_response *resp)
{
	(void)ctx, (void)req;
	httpd_respond_json(resp, 200, json_pack("{s:b, s:s}", "ok", 1, "version", CUBICLE_VERSION));
}

/* docs/openapi.json, built in (routes.h). */
void api_openapi(void *ctx, struct httpd_request *req, struct httpd_response *resp)
{
	(void)ctx, (void)req;
	size_t len;
	const unsigned char *doc = routes_openapi(&len);
	resp->body = malloc(len);
	if (!resp->body) {
		struct err e = {0};
		err_set(&e, ERR_INTERNAL, "out of memory");
		httpd_respond_err(resp, &e);
		return;
	}
	memcpy(resp->body, doc, len);
	resp->body_len = len;
	resp->status = 200;
	resp->content_type = "application/json";
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
void api_workspace(void *ctx, struct httpd_request *req, struct httpd_response *resp)
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

void api_workspaces(void *ctx, struct httpd_request *req, struct httpd_response *resp)
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
	static const char *const known[] = {"name",	    "max_running", "max_stopped",
					    "egress_allow", "egress_deny", NULL};
	const char *name = NULL;
	long long max_running = 0, max_stopped = 0;
	struct store_workspace w;
	char allow[STORE_EGRESS_LEN], deny[STORE_EGRESS_LEN];
	bool given;
	int rc = params_check_known(body, known, &e);
	if (rc == 0)
		rc = param_need_str(body, "name", &name, &e);
	if (rc == 0)
		rc = param_int(body, "max_running", 0, 100000, &max_running, &e) < 0 ? -1 : 0;
	if (rc == 0)
		rc = param_int(body, "max_stopped", 0, 100000, &max_stopped, &e) < 0 ? -1 : 0;
	if (rc == 0)
		rc = api_egress_param(body, "egress_allow", 1, allow, sizeof allow, &given, &e);
	if (rc == 0)
		rc = api_egress_param(body, "egress_deny", 0, deny, sizeof deny, &given, &e);
	if (rc == 0)
		rc = store_workspace_create_egress(a->store, name, (int)max_running, allow, deny,
						   &w, &e);
	if (rc == 0 && max_stopped > 0 &&
	    (rc = store_workspace_set_max_stopped(a->store, w.id, (int)max_stopped, &e)) == 0)
		w.max_stopped = (int)max_stopped;
	api_answer(resp, rc, 201, rc == 0 ? store_workspace_json(&w) : NULL, &e);
	json_decref(body);
}

void api_keys(void *ctx, struct httpd_request *req, struct httpd_response *resp)
{
	struct api *a = ctx;
	struct api_caller *c = req->user;
	struct err e = {0};
	struct store_workspace w;
	struct store_key_info info;
	char key[64];
	int rc = store_workspace_get(a->store, c->id, &w, &e);
	if (rc == 0)
		rc = store_key_issue(a->store, w.id, key, &info, &e);
	api_answer(resp, rc, 201,
		   rc == 0 ? json_pack("{s:s, s:s, s:s, s:s, s:I}", "key", key, "id", info.id,
				       "prefix", info.prefix, "workspace", w.id, "created_at",
				       (json_int_t)info.created_ms)
			   : NULL,
		   &e);
	OPENSSL_cleanse(key, sizeof key);
}

/* GET /v1/workspaces/{ws}/keys: ids and prefixes, never the keys. */
void api_keys_list(void *ctx, struct httpd_request *req, struct httpd_response *resp)
{
	struct api *a = ctx;
	struct api_caller *c = req->user;
	struct err e = {0};
	json_t *keys = NULL;
	int rc = store_key_list(a->store, c->id, &keys, &e);
	api_answer(resp, rc, 200,
		   rc == 0 ? json_pack("{s:s, s:o}", "workspace", c->id, "keys", keys) : NULL, &e);
}

/* DELETE /v1/workspaces/{ws}/keys/{key_id}: the key answers 401 from now on. */
void api_key_delete(void *ctx, struct httpd_request *req, struct httpd_response *resp)
{
	struct api *a = ctx;
	struct api_caller *c = req->user;
	struct err e = {0};
	int rc = store_key_revoke_id(a->store, c->id, c->sub, &e);
	api_answer(
	    resp, rc, 200,
	    rc == 0 ? json_pack("{s:s, s:s, s:b}", "id", c->sub, "workspace", c->id, "deleted", 1)
		    : NULL,
	    &e);
}

/* DELETE /v1/workspaces/{ws}: its keys, then its computers; its ledger stays. */
void api_workspace_delete(void *ctx, struct httpd_request *req, struct httpd_response *resp)
{
	struct api *a = ctx;
	struct api_caller *c = req->user;
	struct err e = {0};
	json_t *out = NULL;
	/* The HTTP library folds dot segments before we see the path:
	 * DELETE .../{ws}/keys/.. arrives as DELETE .../{ws}. So the one
	 * call that removes a workspace must also name it in ?confirm=. */
	const char *confirm = httpd_query(req, "confirm");
	int rc = 0;
	if (!confirm || strcmp(confirm, c->id) != 0)
		rc = err_param(&e, "confirm",
			       "confirm: deleting a workspace needs ?confirm=<its id> as well");
	if (rc == 0)
		rc = core_workspace_delete(a->core, c->id, &out, &e);
	api_answer(resp, rc, 200, out, &e);
}

static const char *const api_wait_query[] = {"wait", "timeout_s", NULL};

void api_computers(void *ctx, struct httpd_request *req, struct httpd_response *resp)
{
	struct api *a = ctx;
	struct api_caller *c = req->user;
	struct err e = {0};
	json_t *out = NULL;
	if (req->method == HTTPD_GET) {
		const char *ws = api_ws(c);
		if (!ws)
			ws = httpd_query(req, "workspace");
		const char *host = httpd_query(req, "host");
		int rc = 0;
		if (host && !c->admin)
			rc = err_param(&e, "host", "host: the admin key only");
		if (rc == 0)
			rc = core_list(a->core, ws, httpd_query(req, "state"),
				       httpd_query(req, "kind"), &out, &e);
		/* ?host=: the computers a host of the cluster holds (a computer
		 * without "host" is this one host's own). */
		json_t *list = rc == 0 ? json_object_get(out, "computers") : NULL;
		for (size_t i = json_array_size(list); host && i-- > 0;) {
			const char *h =
			    json_string_value(json_object_get(json_array_get(list, i), "host"));
			if (strcmp(h ? h : core_host_id(a->core), host) != 0)
				json_array_remove(list, i);
		}
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
	api_answer_wait(a, req, resp, &w, id, api_ws(c), true, out);
}

void api_computer(void *ctx, struct httpd_request *req, struct httpd_response *resp)
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
	else if (rc == 0 && strcmp(c->sub, "recreate") == 0)
		rc = core_recreate(a->core, c->id, api_ws(c), &out, &e);
	else if (rc == 0 && strcmp(c->sub, "boot") == 0)
		rc = core_boot_placed(a->core, c->id, &out, &e);
	else if (rc == 0)
		rc = core_get(a->core, c->id, api_ws(c), &out, &e);
	if (rc == 0)
		api_answer_wait(a, req, resp, &w, c->id, api_ws(c), false, out);
	else
		httpd_respond_err(resp, &e);
}

void api_action(void *ctx, struct httpd_request *req, struct httpd_response *resp)
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

void api_computer_use(void *ctx, struct httpd_request *req, struct httpd_response *resp)
{
	struct api *a = ctx;
	struct api_caller *c = req->user;
	computeruse_handle(a->core, c->id, api_ws(c), req, resp);
}

void api_mcp(void *ctx, struct httpd_request *req, struct httpd_response *resp)
{
	struct api *a = ctx;
	mcp_handle(a->mcp, api_ws(req->user), req, resp);
}

void api_error_from_fd(struct httpd_response *resp, int fd, int status)
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

void api_answer_spooled(struct httpd_response *resp, int fd, int status, const char *type)
{
	if (status != 200) {
		api_error_from_fd(resp, fd, status);
		close(fd);
		return;
	}
	struct stat st;
	if (fstat(fd, &st) < 0 || lseek(fd, 0, SEEK_SET) < 0) {
		struct err e = {0};
		err_set(&e, ERR_INTERNAL, "cannot read the spooled answer: %s", strerror(errno));
		close(fd);
		httpd_respond_err(resp, &e);
		return;
	}
	resp->status = 200;
	resp->content_type = type;
	resp->file_fd = fd;
	resp->file_len = (uint64_t)st.st_size;
}

int api_tmpfile(struct api *a, struct err *e)
{
	int fd = open(a->spool_dir, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
	if (fd < 0)
		err_set(e, ERR_INTERNAL, "cannot create a spool file: %s", strerror(errno));
	return fd;
}

void api_files(void *ctx, struct httpd_request *req, struct httpd_response *resp)
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
	const char *asked = httpd_query(req, "workspace");
	if (session && ws && asked && strcmp(ws, asked) != 0) {
		err_set(&e, ERR_NOT_FOUND, "no workspace %.40s", asked);
		httpd_respond_err(resp, &e);
		return;
	}
	if (session && !ws)
		ws = asked;
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
		if (fd < 0 || core_file_get(a->core, c->id, ws, path, fd, c->spool_ws, &c->spooled,
					    &r, &e) < 0) {
			if (fd >= 0)
				close(fd);
			httpd_respond_err(resp, &e);
			return;
		}
		int status = r.status;
		envd_reply_free(&r);
		api_answer_spooled(resp, fd, status, "application/octet-stream");
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

void api_usage(void *ctx, struct httpd_request *req, struct httpd_response *resp)
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
	json_t *runs = NULL;
	if (rc == 0 && (rc = store_runs_query(a->store, ws, from, to, &runs, &e)) == 0)
		json_object_set_new(out, "runs", runs);
	else if (rc < 0)
		json_decref(out), out = NULL;
	api_answer(resp, rc, 200, out, &e);
}

/* GET /v1/hosts (admin): docs/cluster.md. */
void api_hosts(void *ctx, struct httpd_request *req, struct httpd_response *resp)
{
	struct api *a = ctx;
	(void)req;
	struct err e = {0};
	json_t *out = NULL;
	int rc = core_hosts(a->core, &out, &e);
	api_answer(resp, rc, 200, out, &e);
}

/* POST /v1/hosts/{id}/drain {"mode": "wait" | "move" | "off"} (admin). */
void api_host_drain(void *ctx, struct httpd_request *req, struct httpd_response *resp)
{
	struct api *a = ctx;
	struct api_caller *c = req->user;
	struct err e = {0};
	static const char *const known[] = {"mode", NULL};
	static const char *const modes[] = {"wait", "move", "off", NULL};
	json_t *out = NULL, *body = api_body_json(req, &e);
	int mode = 0;
	int rc = body ? params_check_known(body, known, &e) : -1;
	if (rc == 0)
		rc = param_enum(body, "mode", modes, &mode, &e) < 0 ? -1 : 0;
	if (rc == 0)
		rc = core_host_drain(a->core, c->id, modes[mode], &out, &e);
	json_decref(body);
	api_answer(resp, rc, 200, out, &e);
}

/* POST /v1/connect-tokens: a machine you bring (docs/byo.md). The command
 * dials the address this request came to (its Host header). */
void api_connect_tokens(void *ctx, struct httpd_request *req, struct httpd_response *resp)
{
	struct api *a = ctx;
	struct api_caller *c = req->user;
	struct err e = {0};
	json_t *out = NULL, *body = api_body_json(req, &e);
	char base[300];
	snprintf(base, sizeof base, "http://%s", req->host[0] ? req->host : "127.0.0.1");
	for (char *p = base + 7; *p; p++)
		if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
		      (*p >= '0' && *p <= '9') || *p == '.' || *p == ':' || *p == '-' ||
		      *p == '[' || *p == ']'))
			*p = '_';
	int rc = body ? core_connect_token(a->core, api_ws(c), body, base, &out, &e) : -1;
	json_decref(body);
	api_answer(resp, rc, 201, out, &e);
}

/* POST /v1/run: docs/code-runner.md. */
void api_run_handler(void *ctx, struct httpd_request *req, struct httpd_response *resp)
{
	struct api_caller *c = req->user;
	struct err e = {0};
	json_t *body = api_body_json(req, &e), *out = NULL;
	int rc = body ? runner_run(((struct api *)ctx)->runner, api_ws(c), body, &out, &e) : -1;
	json_decref(body);
	api_answer(resp, rc, 200, out, &e);
}

/* ---- live streams (stream.c) ---------------------------------------------------- */

/* POST /v1/computers/{id}/stream {"ttl_s", "view_only"} → a token and URLs. */
void api_stream(void *ctx, struct httpd_request *req, struct httpd_response *resp)
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
		rc =
		    param_int(body, "ttl_s", 1, streams_ttl_max(a->streams), &ttl, &e) < 0 ? -1 : 0;
	if (rc == 0)
		rc = param_bool(body, "view_only", &view, &e) < 0 ? -1 : 0;
	if (rc == 0)
		rc = streams_grant(a->streams, c->id, api_ws(c), req->host, ttl, view, &out, &e);
	json_decref(body);
	api_answer(resp, rc, 201, out, &e);
}

void api_stream_revoke(void *ctx, struct httpd_request *req, struct httpd_response *resp)
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
	streams_revoke(a->streams, c->id);
	httpd_respond_json(resp, 200, json_pack("{s:b, s:s}", "ok", 1, "id", c->id));
}

void api_embed(void *ctx, struct httpd_request *req, struct httpd_response *resp)
{
	struct api *a = ctx;
	streams_embed(a->streams, req, resp);
}

/* ---- previews and CDP (preview.c) ----------------------------------------------------- */

static int api_previews_on(struct api *a, struct err *e)
{
	return a->previews ? 0
			   : err_set(e, ERR_UNAVAILABLE,
				     "previews and CDP are off on this server (cubicled "
				     "--preview-listen off)");
}

/* POST /v1/computers/{id}/previews {"port","ttl_s"?,"public"?}; GET lists them. */
void api_previews(void *ctx, struct httpd_request *req, struct httpd_response *resp)
{
	struct api *a = ctx;
	struct api_caller *c = req->user;
	struct err e = {0};
	json_t *out = NULL;
	if (req->method == HTTPD_GET) {
		int rc = api_previews_on(a, &e) == 0
			     ? previews_list(a->previews, c->id, api_ws(c), &out, &e)
			     : -1;
		api_answer(resp, rc, 200, out, &e);
		return;
	}
	json_t *body = api_body_json(req, &e);
	int rc = body && api_previews_on(a, &e) == 0
		     ? previews_grant(a->previews, c->id, api_ws(c), body, &out, &e)
		     : -1;
	json_decref(body);
	api_answer(resp, rc, 201, out, &e);
}

void api_preview_delete(void *ctx, struct httpd_request *req, struct httpd_response *resp)
{
	struct api *a = ctx;
	struct api_caller *c = req->user;
	struct err e = {0};
	int rc = api_previews_on(a, &e) == 0
		     ? previews_revoke(a->previews, c->id, api_ws(c), c->sub, &e)
		     : -1;
	api_answer(resp, rc, 200,
		   rc == 0
		       ? json_pack("{s:b, s:s, s:i}", "ok", 1, "id", c->id, "port", atoi(c->sub))
		       : NULL,
		   &e);
}

/* POST /v1/computers/{id}/cdp {"ttl_s"?} → {"ws_url", "http_url", ...}. */
void api_cdp(void *ctx, struct httpd_request *req, struct httpd_response *resp)
{
	struct api *a = ctx;
	struct api_caller *c = req->user;
	struct err e = {0};
	json_t *out = NULL, *body = api_body_json(req, &e);
	int rc = body && api_previews_on(a, &e) == 0
		     ? previews_cdp(a->previews, c->id, api_ws(c), body, &out, &e)
		     : -1;
	json_decref(body);
	api_answer(resp, rc, 201, out, &e);
}
