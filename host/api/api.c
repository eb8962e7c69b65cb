/*
 * api: the router of cubicled's REST API, and its lifecycle.
 *
 * On the event loop for every request: authentication (the key from
 * memory), the path matched segment by segment (ids checked for shape
 * before they reach SQL or a file name), the handler picked (handlers.c),
 * the workspace's request budget counted. Never blocks. The handlers, the
 * ?wait= waiter (wait.c), live streams (stream.c) and /mcp (mcp.c) are
 * files of their own.
 */
#include "api-internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/crypto.h>

#include "clock.h"
#include "ident.h"
#include "nodeauth.h"
#include "routes.h"

/* The headers the router reads besides httpd's own: MCP's first (mcp.h
 * expects them at the start of req->extra), then the cluster's node
 * credential. */
static const char *const api_extra_headers[] = {"mcp-protocol-version", NODEAUTH_HEADER, NULL};
#define API_EXTRA_NODE 1 /* req->extra[] index of X-Cubicle-Node */

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
		t->bytes = api_stream_bytes(a, true);
		return 0;
	}
	if (streams_tunnel(a->streams, req, t, e) < 0)
		return -1;
	t->bytes = api_stream_bytes(a, false);
	return 0;
}

/* The first request head of a connection to the preview listener (loop thread). */
static int api_relay(void *ctx, const struct httpreq_head *head, struct httpd_relay *r,
		     struct httpd_relay_answer *a)
{
	struct api *api = ctx;
	if (!api->previews) { /* not yet (or no longer) wired up */
		struct err e = {0};
		err_set(&e, ERR_UNAVAILABLE, "previews are starting; retry");
		httpd_relay_page(a, head, &e);
		return 1;
	}
	return previews_relay(api->previews, head, r, a);
}

/* ---- the router ----------------------------------------------------------------- */

/* The canonical form of a request's path and query that a node's credential
 * signs (nodeauth.h): the decoded path, then each decoded query fragment
 * in order, length-prefixed so no two requests share one. */
static int api_canonical(const struct httpd_request *req, char *out, size_t len)
{
	return nodeauth_canonical(req->path, (const char *const *)req->query, req->nquery, out,
				  len);
}

/* A call another node of the cluster forwarded: its credential says whose. */
static int api_auth_node(struct api *a, struct httpd_request *req, struct api_caller *c,
			 struct err *e)
{
	char canon[HTTPD_MAX_URL + 64], ws[40];
	bool admin = false;
	if (api_canonical(req, canon, sizeof canon) < 0)
		return err_set(e, ERR_UNAUTHORIZED, "node credential: the request is too long");
	if (nodeauth_verify(a->nodeauth, req->extra[API_EXTRA_NODE], req->method_name, canon,
			    clock_wall_ms(), c->from_host, ws, &admin, e) < 0)
		return -1;
	c->forwarded = true;
	c->admin = admin;
	snprintf(c->ws, sizeof c->ws, "%s", ws);
	return 0;
}

static int api_auth(struct api *a, struct httpd_request *req, struct api_caller *c, struct err *e)
{
	if (req->extra[API_EXTRA_NODE][0]) {
		if (!a->nodeauth)
			return err_set(
			    e, ERR_UNAUTHORIZED,
			    "this host is not in a cluster: node credentials are refused");
		return api_auth_node(a, req, c, e);
	}
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

/* .../files of a computer or a session: GET, or PUT with the body spooled. */
static int api_route_files(struct api *a, struct httpd_request *req, struct httpd_route *route,
			   struct api_caller *c, struct err *e)
{
	route->handler = api_files;
	if (req->method == HTTPD_GET)
		return 0;
	if (req->method == HTTPD_PUT)
		return api_route_files_put(a, req, route, c, e);
	return err_set(e, ERR_BAD_REQUEST, "files answer GET and PUT");
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
	/* /metrics names workspaces: the admin key's, unless --metrics-open. */
	bool metrics = strcmp(req->path, "/metrics") == 0;
	if (metrics && a->metrics_open) {
		route->handler = api_metrics;
		return 0;
	}
	if (strcmp(req->path, "/openapi.json") == 0) {
		route->handler = api_openapi;
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
	/* A plain GET of the machines' WebSocket (docs/byo.md). */
	if (req->method == HTTPD_GET && strcmp(req->path, "/v1/connect") == 0)
		return err_set(
		    e, ERR_BAD_REQUEST,
		    "this is a WebSocket endpoint: envd --connect dials it with Upgrade: "
		    "websocket");
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
	if (metrics) {
		if (!c->admin)
			return err_set(e, ERR_FORBIDDEN,
				       "/metrics names every workspace: it needs the admin key "
				       "(or cubicled --metrics-open)");
		route->handler = api_metrics;
		return 0;
	}
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
	if (strcmp(s[1], "templates") == 0) {
		if (n == 2 && (m == HTTPD_GET || m == HTTPD_POST)) {
			route->handler = api_templates;
			return 0;
		}
		if (n < 3)
			goto not_found;
		/* A name that is no identifier names no template (the body's
		 * name gets a 400 from the create). */
		if (!ident_ok(s[2], 63))
			return err_set(e, ERR_NOT_FOUND, "no template %.40s", s[2]);
		snprintf(c->id, sizeof c->id, "%s", s[2]);
		if (n == 3 && (m == HTTPD_GET || m == HTTPD_DELETE)) {
			route->handler = api_template;
			return 0;
		}
		if (n == 4 && strcmp(s[3], "log") == 0 && m == HTTPD_GET) {
			route->handler = api_template_log;
			return 0;
		}
		goto not_found;
	}
	if (strcmp(s[1], "hosts") == 0) {
		if (!c->admin)
			return err_set(e, ERR_FORBIDDEN, "the cluster's hosts need the admin key");
		if (n == 2 && m == HTTPD_GET) {
			route->handler = api_hosts;
			return 0;
		}
		if (n == 4 && strcmp(s[3], "drain") == 0 && m == HTTPD_POST) {
			if (ident_param("host", s[2], 63, false, e) < 0)
				return -1;
			snprintf(c->id, sizeof c->id, "%s", s[2]);
			route->handler = api_host_drain;
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
		if (n < 3) /* another method on /v1/computers */
			goto not_found;
		if (!ident_ok(s[2], 63))
			return err_set(e, ERR_NOT_FOUND, "no computer %.40s", s[2]);
		snprintf(c->id, sizeof c->id, "%s", s[2]);
		/* A call forwarded to the host that holds the computer, which
		 * this one does not (any more): the sender looks again. */
		if (c->forwarded && (n >= 4 || m == HTTPD_DELETE) &&
		    !(n == 4 && strcmp(s[3], "boot") == 0) && !core_holds(a->core, c->id))
			return err_set(e, ERR_MISDIRECTED, "host does not hold computer %s", c->id);
		if (n == 3 && (m == HTTPD_GET || m == HTTPD_DELETE)) {
			route->handler = api_computer;
			return 0;
		}
		/* What another node placed here, to boot: a node's call only. */
		if (n == 4 && m == HTTPD_POST && strcmp(s[3], "boot") == 0) {
			if (!c->forwarded)
				return err_set(e, ERR_FORBIDDEN,
					       "boot is called by the hosts of a cluster only");
			snprintf(c->sub, sizeof c->sub, "%s", s[3]);
			route->handler = api_computer;
			return 0;
		}
		if (n == 4 && m == HTTPD_POST &&
		    (strcmp(s[3], "stop") == 0 || strcmp(s[3], "start") == 0 ||
		     strcmp(s[3], "recreate") == 0)) {
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
		if (n == 4 && strcmp(s[3], "files") == 0)
			return api_route_files(a, req, route, c, e);
		if (n == 4 && strcmp(s[3], "previews") == 0 &&
		    (m == HTTPD_POST || m == HTTPD_GET)) {
			route->handler = api_previews;
			return 0;
		}
		if (n == 5 && strcmp(s[3], "previews") == 0 && m == HTTPD_DELETE) {
			snprintf(c->sub, sizeof c->sub, "%s", s[4]);
			route->handler = api_preview_delete;
			return 0;
		}
		if (n == 4 && strcmp(s[3], "cdp") == 0) {
			if (m != HTTPD_POST)
				return err_set(e, ERR_BAD_REQUEST,
					       "POST .../cdp opens the desktop browser's DevTools; "
					       "its ws_url is the WebSocket");
			route->handler = api_cdp;
			return 0;
		}
		if (n >= 4 && strcmp(s[3], "recordings") == 0) {
			if (n >= 5 && !ident_ok(s[4], 39))
				return err_set(e, ERR_NOT_FOUND, "no recording %.40s", s[4]);
			if (n >= 5)
				snprintf(c->sub, sizeof c->sub, "%s", s[4]);
			bool ok = (n == 4 && (m == HTTPD_GET || m == HTTPD_POST)) ||
				  (n == 5 && (m == HTTPD_GET || m == HTTPD_DELETE)) ||
				  (n == 6 && strcmp(s[5], "stop") == 0 && m == HTTPD_POST) ||
				  (n == 6 && strcmp(s[5], "actions") == 0 && m == HTTPD_GET);
			if (!ok)
				goto not_found;
			route->handler = api_recordings;
			return 0;
		}
		goto not_found;
	}
	if (strcmp(s[1], "sessions") == 0 && n == 4 && strcmp(s[3], "files") == 0) {
		if (!ident_ok(s[2], 63))
			return err_param(e, "session", "session: not a session id");
		snprintf(c->id, sizeof c->id, "%s", s[2]);
		return api_route_files(a, req, route, c, e);
	}
not_found:
	return err_set(e, ERR_NOT_FOUND, "no such endpoint: %s %.200s (see docs/api.md)",
		       req->method_name, req->path);
}

/* The request's log line gets its route, workspace, id and action (httpd.h's
 * log_kv, pointing into c, which lives as long as the request). */
static void api_log_kv(struct api_caller *c, struct httpd_route *route)
{
	int k = 0;
	route->log_kv[k++] = "route";
	route->log_kv[k++] = routes_pattern(c->route);
	if (c->admin || c->ws[0]) {
		route->log_kv[k++] = "ws";
		route->log_kv[k++] = c->admin ? "admin" : c->ws;
	}
	if (c->id[0]) {
		route->log_kv[k++] = "id";
		route->log_kv[k++] = c->id;
	}
	if (c->sub[0] && route->handler == api_action) {
		route->log_kv[k++] = "action";
		route->log_kv[k++] = c->sub;
	}
	route->log_kv[k] = NULL;
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
	int picked = api_route_pick(a, req, route, c, &keyed, e);
	c->route = routes_find(req->method, req->path);
	api_log_kv(c, route);
	if (picked < 0)
		return -1;
	/* What the router serves must be in the route table (spec/api.json):
	 * anything else answers as a missing endpoint (routes.h). */
	if (c->route < 0)
		return err_set(e, ERR_NOT_FOUND, "no such endpoint: %s %.200s (see docs/api.md)",
			       req->method_name, req->path);
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
	a->nodeauth = o->nodeauth;
	a->max_requests_ws = o->max_requests_per_workspace > 0 ? o->max_requests_per_workspace : 32;
	a->max_waits_ws = o->max_waits_per_workspace > 0 ? o->max_waits_per_workspace : 16;
	a->max_body = o->max_body > 0 ? o->max_body : 1u << 20;
	a->metrics_open = o->metrics_open;
	if (api_stats_open(a, e) < 0) {
		free(a);
		return NULL;
	}
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
	    .relay_listen = o->preview_listen,
	    .relay = api_relay,
	    .extra_headers = api_extra_headers,
	    .max_conns_per_addr = o->max_conns_per_addr > 0 ? o->max_conns_per_addr : 64,
	    .header_timeout_s = o->header_timeout_s,
	    .body_timeout_s = o->body_timeout_s,
	    .body_min_rate = o->body_min_rate,
	    .on_done = api_done,
	};
	a->httpd = httpd_create(&ho, e);
	struct streams_opts so = {
	    .stream_key = o->stream_key,
	    .web_dir = o->web_dir,
	    .frame_ancestors = o->frame_ancestors,
	    .stream_ttl_max_s = o->stream_ttl_max_s,
	    .stream_max_s = o->stream_max_s,
	    .per_computer = o->streams_per_computer,
	    .nodeauth = o->nodeauth,
	};
	a->streams = a->httpd ? streams_create(core, a->httpd, &so) : NULL;
	if (a->streams)
		streams_node_header(a->streams, API_EXTRA_NODE);
	if (a->httpd && !a->streams)
		err_set(e, ERR_INTERNAL, "out of memory");
	bool previews_ok = true;
	if (a->streams && o->preview_listen) {
		char url[300];
		const char *relay = httpd_relay_address(a->httpd);
		snprintf(url, sizeof url, "http://localhost:%s",
			 strrchr(relay, ':') ? strrchr(relay, ':') + 1 : "8081");
		struct previews_opts po = {
		    .key = o->stream_key,
		    .url = o->preview_url ? o->preview_url : url,
		    .ttl_max_s = o->preview_ttl_max_s,
		    .per_computer = o->previews_per_computer,
		    .idle_s = o->preview_idle_s,
		    .public_allowed = o->public_previews,
		};
		a->previews = previews_create(core, a->httpd, &po, e);
		previews_ok = a->previews != NULL;
	}
	a->mcp = a->streams && previews_ok
		     ? mcp_create(core, a->streams, a->previews, a->runner, o->mcp_origins, e)
		     : NULL;
	if (a->mcp && pthread_create(&a->waiter, NULL, api_waiter, a) != 0)
		err_set(e, ERR_INTERNAL, "cannot start the waiter thread");
	else if (a->mcp)
		a->waiter_started = true;
	if (!a->waiter_started) {
		previews_destroy(a->previews);
		streams_destroy(a->streams);
		if (a->httpd)
			httpd_destroy(a->httpd);
		mcp_destroy(a->mcp);
		pthread_mutex_destroy(&a->parked_lock);
		pthread_mutex_destroy(&a->tenants_lock);
		api_stats_close(a);
		free(a);
		return NULL;
	}
	return a;
}

const char *api_address(const struct api *a)
{
	return httpd_address(a->httpd);
}

const char *api_preview_address(const struct api *a)
{
	return httpd_relay_address(a->httpd);
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
		previews_destroy(a->previews);
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
		api_stats_close(a);
		free(a);
	}
}
