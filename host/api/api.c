/*
 * api: routes, authentication and the JSON shapes of cubicled's REST API.
 *
 * Handlers are thin: parse, call the core, shape the answer. Paths are
 * matched segment by segment; ids are checked for shape before they reach
 * SQL or a file name.
 */
#include "api.h"

#include <errno.h>
#include <pthread.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <openssl/crypto.h>
#include <openssl/sha.h>

#include "computeruse.h"
#include "guest-net.h"
#include "httpd.h"
#include "ident.h"
#include "mcp.h"
#include "params.h"
#include "store-runs.h"
#include "stream.h"

/* Requests in flight of one workspace ("" = the callers without a key). */
struct api_tenant {
	struct api_tenant *next;
	char ws[40];
	int requests, waits;
};

#define API_TENANT_BUCKETS 64

/* A ?wait= request parked (httpd_park) until its computer reaches the
 * state, its deadline passes or its client leaves: api_waiter answers it. */
struct api_parked {
	struct api_parked *next;
	struct httpd_parked *hp;
	char id[40], ws[40];
	bool admin;  /* ws NULL: the admin sees every workspace */
	bool create; /* POST /v1/computers: 201, and an error names the computer */
	char state[16], stored[16];
	int timeout_s;
	struct timespec deadline; /* CLOCK_MONOTONIC */
};

struct api {
	struct core *core;
	struct store *store;
	struct httpd *httpd;
	struct mcp *mcp;
	unsigned char admin_hash[SHA256_DIGEST_LENGTH];
	char spool_dir[512];
	struct streams *streams;
	struct runner *runner;
	int max_requests_ws, max_waits_ws;
	size_t max_body;
	pthread_mutex_t tenants_lock;
	struct api_tenant *tenants[API_TENANT_BUCKETS]; /* under tenants_lock */
	/* Parked waits; lock order: parked_lock, then the core's or httpd's. */
	pthread_mutex_t parked_lock;
	struct api_parked *parked; /* under parked_lock */
	bool waiter_stop;	   /* under parked_lock */
	bool waiter_started;
	pthread_t waiter;
};

/* Who is calling, decided by the router. */
struct api_caller {
	struct api *a;
	bool admin;
	char ws[40];  /* "" for the admin */
	char id[64];  /* the path's computer/workspace/session id */
	char sub[64]; /* the action name, or stop/start */
	int spool_fd;
	char spool_path[600];
	/* Spool bytes reserved for this request's transfer, released when the
	 * request is done (its spool file closed). */
	struct core *core;
	char spool_ws[40];
	uint64_t spooled;
	int counted; /* 0, or what api_tenant_enter counted: API_COUNT_* */
	char counted_ws[40];
};

enum { API_COUNT_REQUEST = 1, API_COUNT_WAIT = 2 };

static unsigned api_tenant_hash(const char *ws)
{
	unsigned v = 2166136261u;
	for (; *ws; ws++)
		v = (v ^ (unsigned char)*ws) * 16777619u;
	return v % API_TENANT_BUCKETS;
}

/*
 * Counts a request in flight for workspace ws ("" = no key), as a long wait
 * or not; past the workspace's limit fills e (429) and the route's
 * Retry-After and detail, and returns -1. Thread-safe; quick (the router
 * calls it on the loop).
 */
static int api_tenant_enter(struct api *a, struct api_caller *c, const char *ws, bool wait,
			    struct httpd_route *route, struct err *e)
{
	pthread_mutex_lock(&a->tenants_lock);
	unsigned b = api_tenant_hash(ws);
	struct api_tenant *t = a->tenants[b];
	while (t && strcmp(t->ws, ws) != 0)
		t = t->next;
	if (!t && (t = calloc(1, sizeof *t))) {
		snprintf(t->ws, sizeof t->ws, "%s", ws);
		t->next = a->tenants[b];
		a->tenants[b] = t;
	}
	int rc = 0;
	if (!t) {
		rc = err_set(e, ERR_INTERNAL, "out of memory");
	} else if (wait && t->waits >= a->max_waits_ws) {
		rc = err_set(e, ERR_LIMIT,
			     "workspace %s has %d requests with ?wait= open, the most "
			     "--max-waits-per-workspace allows; retry when one ends",
			     ws, t->waits);
		route->retry_after_s = 5;
		route->err_detail =
		    json_pack("{s:s, s:i}", "limit", "max_waits_per_workspace", "max", t->waits);
	} else if (!wait && t->requests >= a->max_requests_ws) {
		if (*ws)
			err_set(e, ERR_LIMIT,
				"workspace %s has %d requests running, the most "
				"--max-requests-per-workspace allows; retry when one ends",
				ws, t->requests);
		else
			err_set(e, ERR_LIMIT,
				"%d requests without an API key are running, the most "
				"--max-requests-per-workspace allows them together; retry shortly",
				t->requests);
		rc = -1;
		route->retry_after_s = 1;
		route->err_detail = json_pack("{s:s, s:i}", "limit", "max_requests_per_workspace",
					      "max", t->requests);
	} else {
		if (wait)
			t->waits++;
		else
			t->requests++;
		c->counted = wait ? API_COUNT_WAIT : API_COUNT_REQUEST;
		snprintf(c->counted_ws, sizeof c->counted_ws, "%s", ws);
	}
	pthread_mutex_unlock(&a->tenants_lock);
	return rc;
}

/* The request counted by api_tenant_enter is done (any thread). */
static void api_tenant_leave(struct api *a, struct api_caller *c)
{
	if (!c->counted)
		return;
	pthread_mutex_lock(&a->tenants_lock);
	struct api_tenant **pp = &a->tenants[api_tenant_hash(c->counted_ws)];
	while (*pp && strcmp((*pp)->ws, c->counted_ws) != 0)
		pp = &(*pp)->next;
	struct api_tenant *t = *pp;
	if (t) {
		if (c->counted == API_COUNT_WAIT)
			t->waits--;
		else
			t->requests--;
		if (t->waits <= 0 && t->requests <= 0) {
			*pp = t->next;
			free(t);
		}
	}
	pthread_mutex_unlock(&a->tenants_lock);
	c->counted = 0;
}

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
	char *text = core_metrics(a->core), *runs = a->runner ? runner_metrics(a->runner) : NULL;
	if (text && runs) {
		char *both = NULL;
		if (asprintf(&both, "%s%s", text, runs) > 0)
			free(text), text = both;
	}
	free(runs);
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

static void api_keys(void *ctx, struct httpd_request *req, struct httpd_response *resp)
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
static void api_keys_list(void *ctx, struct httpd_request *req, struct httpd_response *resp)
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
static void api_key_delete(void *ctx, struct httpd_request *req, struct httpd_response *resp)
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
static void api_workspace_delete(void *ctx, struct httpd_request *req, struct httpd_response *resp)
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

/* An error after a create: the computer exists (and goes on booting), so
 * the error says which it is. */
static void api_respond_err_id(struct httpd_response *resp, const struct err *e, const char *id)
{
	json_t *ej = err_to_json(e);
	json_object_set_new(json_object_get(ej, "error"), "computer_id", json_string(id));
	httpd_respond_json(resp, err_http_status(e->code), ej);
}

/* The answer of a wait that ended: the computer's JSON, or why not. */
static void api_wait_answer(struct api *a, const struct api_parked *w, bool timed_out,
			    const char *now, struct httpd_response *resp)
{
	struct err e = {0};
	json_t *out = NULL;
	int rc = timed_out ? err_set(&e, ERR_TIMEOUT, "computer %s is still %s after %d s", w->id,
				     now, w->timeout_s)
			   : core_get(a->core, w->id, w->admin ? NULL : w->ws, &out, &e);
	if (rc == 0)
		httpd_respond_json(resp, w->create ? 201 : 200, out);
	else if (w->create)
		api_respond_err_id(resp, &e, w->id);
	else
		httpd_respond_err(resp, &e);
}

/*
 * The waiter: one thread answers every parked wait. It looks at them after
 * each state change of any computer (core_await_change) and at least every
 * 250 ms (deadlines, clients that left, waits parked meanwhile).
 */
static void *api_waiter(void *arg)
{
	struct api *a = arg;
	for (;;) {
		struct timespec t;
		clock_gettime(CLOCK_MONOTONIC, &t);
		struct api_parked *ended = NULL;
		pthread_mutex_lock(&a->parked_lock);
		bool stop = a->waiter_stop;
		struct api_parked **pp = &a->parked;
		while (*pp) {
			struct api_parked *w = *pp;
			char now[16];
			bool over =
			    stop || httpd_parked_gone(w->hp) ||
			    core_wait_over(a->core, w->id, w->state, w->stored, now) ||
			    t.tv_sec > w->deadline.tv_sec ||
			    (t.tv_sec == w->deadline.tv_sec && t.tv_nsec >= w->deadline.tv_nsec);
			if (over) {
				*pp = w->next;
				w->next = ended;
				ended = w;
			} else {
				pp = &w->next;
			}
		}
		pthread_mutex_unlock(&a->parked_lock);
		while (ended) {
			struct api_parked *w = ended;
			ended = w->next;
			char now[16];
			struct httpd_response *resp = httpd_parked_response(w->hp);
			if (stop) {
				struct err e = {0};
				err_set(&e, ERR_UNAVAILABLE,
					"cubicled is stopping; wait again later");
				httpd_respond_err(resp, &e);
			} else if (!httpd_parked_gone(w->hp)) {
				bool reached =
				    core_wait_over(a->core, w->id, w->state, w->stored, now);
				api_wait_answer(a, w, !reached, now, resp);
			}
			httpd_parked_done(w->hp);
			free(w);
		}
		if (stop)
			return NULL;
		core_await_change(a->core, 250);
	}
}

/*
 * After an operation that answered `out` (stolen): answers now, or, with
 * ?wait=, when the computer reaches the state. A wait that is not over at
 * once is parked: it holds no worker thread while it waits.
 */
static void api_answer_wait(struct api *a, struct httpd_request *req, struct httpd_response *resp,
			    const struct api_wait *wt, const char *id, const char *ws, bool create,
			    json_t *out)
{
	if (!wt->state) {
		httpd_respond_json(resp, create ? 201 : 200, out);
		return;
	}
	json_decref(out);
	struct api_parked *w = calloc(1, sizeof *w);
	struct err e = {0};
	char now[16];
	if (!w) {
		err_set(&e, ERR_INTERNAL, "out of memory");
		goto fail;
	}
	snprintf(w->id, sizeof w->id, "%s", id);
	snprintf(w->ws, sizeof w->ws, "%s", ws ? ws : "");
	w->admin = !ws;
	w->create = create;
	snprintf(w->state, sizeof w->state, "%s", wt->state);
	w->timeout_s = wt->timeout_s;
	clock_gettime(CLOCK_MONOTONIC, &w->deadline);
	w->deadline.tv_sec += wt->timeout_s;
	if (core_wait_begin(a->core, id, ws, w->stored, &e) < 0)
		goto fail;
	if (core_wait_over(a->core, id, w->state, w->stored, now) || wt->timeout_s == 0) {
		api_wait_answer(a, w,
				strcmp(now, w->state) != 0 && strcmp(now, "error") != 0 &&
				    strcmp(now, "deleted") != 0,
				now, resp);
		free(w);
		return;
	}
	pthread_mutex_lock(&a->parked_lock);
	if (!a->waiter_stop) {
		w->hp = httpd_park(req);
		w->next = a->parked;
		a->parked = w;
		pthread_mutex_unlock(&a->parked_lock);
		return;
	}
	pthread_mutex_unlock(&a->parked_lock);
	err_set(&e, ERR_UNAVAILABLE, "cubicled is stopping; wait again later");
fail:
	free(w);
	if (create)
		api_respond_err_id(resp, &e, id);
	else
		httpd_respond_err(resp, &e);
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
	api_answer_wait(a, req, resp, &w, id, api_ws(c), true, out);
}

/* POST /v1/connect-tokens: a machine you bring (docs/byo.md). The command
 * dials the address this request came to (its Host header). */
static void api_connect_tokens(void *ctx, struct httpd_request *req, struct httpd_response *resp)
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
		api_answer_wait(a, req, resp, &w, c->id, api_ws(c), false, out);
	else
		httpd_respond_err(resp, &e);
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
	json_t *runs = NULL;
	if (rc == 0 && (rc = store_runs_query(a->store, ws, from, to, &runs, &e)) == 0)
		json_object_set_new(out, "runs", runs);
	else if (rc < 0)
		json_decref(out), out = NULL;
	api_answer(resp, rc, 200, out, &e);
}

int api_run_code(struct api *a, const char *ws, const json_t *body, json_t **out, struct err *e)
{
	if (!a->runner)
		return err_set(e, ERR_UNAVAILABLE, "this cubicled runs no code (no runner)");
	return runner_run(a->runner, ws, body, out, e);
}

/* POST /v1/run: docs/code-runner.md. */
static void api_run_handler(void *ctx, struct httpd_request *req, struct httpd_response *resp)
{
	struct api_caller *c = req->user;
	struct err e = {0};
	json_t *body = api_body_json(req, &e), *out = NULL;
	int rc = body ? api_run_code(ctx, api_ws(c), body, &out, &e) : -1;
	json_decref(body);
	api_answer(resp, rc, 200, out, &e);
}

/* ---- live streams (stream.c) ------------------------------------------------- */

int api_stream_grant(struct api *a, const char *id, const char *ws, const char *host,
		     long long ttl_s, bool view_only, json_t **out, struct err *e)
{
	return streams_grant(a->streams, id, ws, host, ttl_s, view_only, out, e);
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
		rc =
		    param_int(body, "ttl_s", 1, streams_ttl_max(a->streams), &ttl, &e) < 0 ? -1 : 0;
	if (rc == 0)
		rc = param_bool(body, "view_only", &view, &e) < 0 ? -1 : 0;
	if (rc == 0)
		rc = streams_grant(a->streams, c->id, api_ws(c), req->host, ttl, view, &out, &e);
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
	streams_revoke(a->streams, c->id);
	httpd_respond_json(resp, 200, json_pack("{s:b, s:s}", "ok", 1, "id", c->id));
}

/* The WebSocket upgrade of GET /v1/computers/{id}/stream?token= (loop thread). */
static int api_tunnel(void *ctx, struct httpd_request *req, struct httpd_tunnel *t, struct err *e)
{
	struct api *a = ctx;
	if (strcmp(req->path, "/v1/connect") == 0) {
		/* A machine you bring dials in (docs/byo.md): its link goes to the
		 * core's byo listener, named by the preamble. */
		const char *d = httpd_query(req, "display"), *w = httpd_query(req, "width"),
			   *h = httpd_query(req, "height");
		if (core_byo_admit(a->core, req->authorization, httpd_query(req, "hostname"),
				   d && strcmp(d, "1") == 0, w ? atoi(w) : 0, h ? atoi(h) : 0,
				   t->unix_path, sizeof t->unix_path, t->preamble,
				   sizeof t->preamble, e) < 0)
			return -1;
		snprintf(t->tag, sizeof t->tag, "byo-link");
		t->answer_seconds = 10;
		return 0;
	}
	return streams_tunnel(a->streams, req, t, e);
}

static void api_embed(void *ctx, struct httpd_request *req, struct httpd_response *resp)
{
	struct api *a = ctx;
	streams_embed(a->streams, req, resp);
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
		if (*p == '/')
			p++;
		if (*p == '/')
			return -1; /* an empty segment ("//", a decoded %2F) names nothing */
	}
	return *p ? -1 : k;
}

static int api_route_files_put(struct api *a, struct httpd_request *req, struct httpd_route *route,
			       struct api_caller *c, struct err *e)
{
	/* The body is spooled to disk: its length is reserved against the
	 * spool quotas before a byte of it is read. */
	if (req->content_length < 0)
		return err_set(e, ERR_BAD_REQUEST,
			       "a file upload needs a Content-Length (no chunked uploads)");
	snprintf(c->spool_ws, sizeof c->spool_ws, "%s", c->ws);
	if (core_spool_reserve(a->core, c->spool_ws, (uint64_t)req->content_length, e) < 0)
		return -1;
	c->spooled = (uint64_t)req->content_length;
	snprintf(c->spool_path, sizeof c->spool_path, "%s/upload-XXXXXX", a->spool_dir);
	c->spool_fd = mkostemp(c->spool_path, O_CLOEXEC);
	if (c->spool_fd < 0)
		return err_set(e, ERR_INTERNAL, "cannot spool the upload: %s", strerror(errno));
	/* The handler reads it back; httpd closes body_fd, so hand it a dup. */
	route->body = HTTPD_BODY_FD;
	route->body_fd = fcntl(c->spool_fd, F_DUPFD_CLOEXEC, 0);
	unlink(c->spool_path); /* the open descriptors keep it alive */
	return 0;
}

static void api_caller_close(void *p)
{
	struct api_caller *c = p;
	if (c->spool_fd >= 0)
		close(c->spool_fd);
	if (c->spooled)
		core_spool_release(c->core, c->spool_ws, c->spooled);
	api_tenant_leave(c->a, c);
	api_caller_free(c);
}

/* Picks the handler; c is the caller (c->counted tells whether it holds a
 * key: routes without one leave it unauthenticated, !c->admin && !c->ws[0]). */
static int api_route_pick(struct api *a, struct httpd_request *req, struct httpd_route *route,
			  struct api_caller *c, bool *keyed, struct err *e)
{
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
		if (streams_check(a->streams, req, e) < 0)
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
	if (api_auth(a, req, c, e) < 0)
		return -1;
	*keyed = true;
	route->body = HTTPD_BODY_MEMORY;
	route->max_body = a->max_body;
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
		if (n >= 3 && ident_param("workspace", s[2], 63, false, e) < 0)
			return -1;
		if (n >= 3)
			snprintf(c->id, sizeof c->id, "%s", s[2]);
		if (n == 3 && (m == HTTPD_GET || m == HTTPD_PATCH)) {
			route->handler = api_workspace;
			return 0;
		}
		if (n == 3 && m == HTTPD_DELETE) {
			route->handler = api_workspace_delete;
			return 0;
		}
		if (n == 4 && strcmp(s[3], "keys") == 0 && (m == HTTPD_POST || m == HTTPD_GET)) {
			route->handler = m == HTTPD_POST ? api_keys : api_keys_list;
			return 0;
		}
		if (n == 5 && strcmp(s[3], "keys") == 0 && m == HTTPD_DELETE) {
			if (ident_param("key_id", s[4], 31, false, e) < 0)
				return -1;
			snprintf(c->sub, sizeof c->sub, "%s", s[4]);
			route->handler = api_key_delete;
			return 0;
		}
		goto not_found;
	}
	if (strcmp(s[1], "run") == 0 && n == 2) {
		if (m != HTTPD_POST)
			return err_set(e, ERR_BAD_REQUEST, "run is called with POST");
		route->max_body = 8u << 20; /* the runner answers 413 past its own limits */
		route->handler = api_run_handler;
		return 0;
	}
	if (strcmp(s[1], "connect-tokens") == 0 && n == 2) {
		if (m != HTTPD_POST)
			return err_set(e, ERR_BAD_REQUEST, "connect-tokens are made with POST");
		route->handler = api_connect_tokens;
		return 0;
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
				return api_route_files_put(a, req, route, c, e);
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
			return api_route_files_put(a, req, route, c, e);
		return err_set(e, ERR_BAD_REQUEST, "files answer GET and PUT");
	}
not_found:
	return err_set(e, ERR_NOT_FOUND, "no such endpoint: %s %.200s (see docs/api.md)",
		       req->method_name, req->path);
}

/*
 * On the event loop for every request: must not block (no SQLite, no
 * network): the key is checked from memory, the workspace's budget counted.
 * A workspace key's request with ?wait= counts as a long wait, any other as
 * a request; the admin is not limited; requests without a key share the
 * budget of workspace "".
 */
static int api_route(void *ctx, struct httpd_request *req, struct httpd_route *route, struct err *e)
{
	struct api *a = ctx;
	struct api_caller *c = calloc(1, sizeof *c);
	if (!c)
		return err_set(e, ERR_INTERNAL, "out of memory");
	c->a = a;
	c->core = a->core;
	c->spool_fd = -1;
	route->user = c;
	route->user_free = api_caller_close;
	bool keyed = false;
	if (api_route_pick(a, req, route, c, &keyed, e) < 0)
		return -1;
	if (keyed && c->admin)
		return 0;
	bool wait = keyed && httpd_query(req, "wait") != NULL;
	return api_tenant_enter(a, c, keyed ? c->ws : "", wait, route, e);
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
	a->runner = o->runner;
	a->max_requests_ws = o->max_requests_per_workspace > 0 ? o->max_requests_per_workspace : 32;
	a->max_waits_ws = o->max_waits_per_workspace > 0 ? o->max_waits_per_workspace : 16;
	a->max_body = o->max_body > 0 ? o->max_body : 1u << 20;
	pthread_mutex_init(&a->tenants_lock, NULL);
	pthread_mutex_init(&a->parked_lock, NULL);
	mkdir(a->spool_dir, 0700);
	struct httpd_opts ho = {
	    .listen = o->listen,
	    .router = api_route,
	    .ctx = a,
	    .max_body = o->max_body_anonymous > 0 ? o->max_body_anonymous : 4096,
	    .max_jobs = o->max_requests > 0 ? o->max_requests : 256,
	    .log_prefix = "cubicled",
	    .tunnel = api_tunnel,
	    .extra_headers = mcp_extra_headers,
	    .max_conns_per_addr = o->max_conns_per_addr > 0 ? o->max_conns_per_addr : 64,
	    .header_timeout_s = o->header_timeout_s,
	    .body_timeout_s = o->body_timeout_s,
	    .body_min_rate = o->body_min_rate,
	};
	a->mcp = mcp_create(core, a, o->mcp_origins, e);
	a->httpd = a->mcp ? httpd_create(&ho, e) : NULL;
	struct streams_opts so = {
	    .stream_key = o->stream_key,
	    .web_dir = o->web_dir,
	    .frame_ancestors = o->frame_ancestors,
	    .stream_ttl_max_s = o->stream_ttl_max_s,
	    .stream_max_s = o->stream_max_s,
	    .per_computer = o->streams_per_computer,
	};
	a->streams = a->httpd ? streams_create(core, a->httpd, &so) : NULL;
	if (a->httpd && !a->streams)
		err_set(e, ERR_INTERNAL, "out of memory");
	if (a->streams && pthread_create(&a->waiter, NULL, api_waiter, a) != 0)
		err_set(e, ERR_INTERNAL, "cannot start the waiter thread");
	else if (a->streams)
		a->waiter_started = true;
	if (!a->waiter_started) {
		streams_destroy(a->streams);
		if (a->httpd)
			httpd_destroy(a->httpd);
		mcp_destroy(a->mcp);
		pthread_mutex_destroy(&a->parked_lock);
		pthread_mutex_destroy(&a->tenants_lock);
		free(a);
		return NULL;
	}
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
	if (!a)
		return;
	/* The parked waits are httpd's exchanges: answer them (the loop has
	 * stopped, so nothing is sent) before httpd frees them. */
	if (a->waiter_started) {
		pthread_mutex_lock(&a->parked_lock);
		a->waiter_stop = true;
		pthread_mutex_unlock(&a->parked_lock);
		pthread_join(a->waiter, NULL);
		a->waiter_started = false;
	}
	if (httpd_destroy(a->httpd) == 0) {
		mcp_destroy(a->mcp);
		streams_destroy(a->streams);
		for (int b = 0; b < API_TENANT_BUCKETS; b++) {
			while (a->tenants[b]) {
				struct api_tenant *t = a->tenants[b];
				a->tenants[b] = t->next;
				free(t);
			}
		}
		pthread_mutex_destroy(&a->parked_lock);
		pthread_mutex_destroy(&a->tenants_lock);
		free(a);
	}
}
