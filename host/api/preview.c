/*
 * preview: preview and CDP tokens, their URLs, and the relay router that
 * lets a browser or a CDP client through to a computer's port (preview.h).
 */
#include "preview.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "clock.h"
#include "ident.h"
#include "params.h"
#include "token.h"

struct previews {
	struct core *core;
	struct httpd *httpd;
	unsigned char key[TOKEN_KEY_BYTES];
	char scheme[8];	    /* "http" or "https" */
	char domain[200];   /* previews are <port>-<id>.<domain> */
	char port_part[8];  /* ":8081", or "" */
	char cdp_host[220]; /* the relay listener's host for CDP URLs */
	int ttl_max_s, per_computer, idle_s;
	bool public_allowed;
};

static void previews_close(void *ctx, const char *id, const char *sub)
{
	struct previews *p = ctx;
	httpd_relays_close(p->httpd, id, sub);
}

struct previews *previews_create(struct core *core, struct httpd *h, const struct previews_opts *o,
				 struct err *e)
{
	struct previews *p = calloc(1, sizeof *p);
	if (!p) {
		err_set(e, ERR_INTERNAL, "out of memory");
		return NULL;
	}
	p->core = core;
	p->httpd = h;
	memcpy(p->key, o->key, TOKEN_KEY_BYTES);
	p->ttl_max_s = o->ttl_max_s > 0 ? o->ttl_max_s : CORE_PREVIEW_TOKEN_MAX_S;
	p->per_computer = o->per_computer > 0 ? o->per_computer : 32;
	p->idle_s = o->idle_s > 0 ? o->idle_s : 300;
	p->public_allowed = o->public_allowed;
	/* SCHEME://DOMAIN[:PORT][/] */
	const char *u = o->url ? o->url : "";
	const char *rest = strncmp(u, "http://", 7) == 0    ? u + 7
			   : strncmp(u, "https://", 8) == 0 ? u + 8
							    : NULL;
	size_t dl = rest ? strcspn(rest, ":/") : 0;
	const char *after = rest ? rest + dl : NULL;
	bool ok = rest && dl > 0 && dl < sizeof p->domain;
	for (size_t i = 0; ok && i < dl; i++)
		ok = (rest[i] >= 'a' && rest[i] <= 'z') || (rest[i] >= '0' && rest[i] <= '9') ||
		     rest[i] == '-' || rest[i] == '.';
	if (ok && *after == ':') {
		size_t pl = strspn(after + 1, "0123456789");
		ok = pl > 0 && pl <= 5;
		if (ok)
			snprintf(p->port_part, sizeof p->port_part, ":%.*s", (int)pl, after + 1);
		after += 1 + pl;
	}
	if (!ok || !(*after == 0 || strcmp(after, "/") == 0)) {
		err_param(e, "preview_url",
			  "--preview-url: expected http(s)://DOMAIN[:PORT] (lower-case, no path), "
			  "not '%s'",
			  u);
		free(p);
		return NULL;
	}
	snprintf(p->scheme, sizeof p->scheme, "%s", rest == u + 7 ? "http" : "https");
	snprintf(p->domain, sizeof p->domain, "%.*s", (int)dl, rest);
	/* CDP clients are programs: "localhost" may resolve to ::1 first for
	 * them, and the listener is IPv4; its address works everywhere. */
	snprintf(p->cdp_host, sizeof p->cdp_host, "%s%s",
		 strcmp(p->domain, "localhost") == 0 ? "127.0.0.1" : p->domain, p->port_part);
	core_on_close_previews(core, previews_close, p);
	return p;
}

void previews_destroy(struct previews *p)
{
	free(p);
}

static void previews_when(int64_t unix_s, char out[32])
{
	time_t t = (time_t)unix_s;
	struct tm tm;
	gmtime_r(&t, &tm);
	strftime(out, 32, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

/* A token of `scope` for computer id of workspace ws, issued then. */
static int previews_mint(struct previews *p, const char *id, const char *ws, const char *scope,
			 int64_t issued, long long ttl_s, char token[TOKEN_MAX], int64_t *expires,
			 struct err *e)
{
	struct token_claims tc = {.issued = issued};
	snprintf(tc.computer, sizeof tc.computer, "%.39s", id);
	snprintf(tc.workspace, sizeof tc.workspace, "%s", ws);
	snprintf(tc.scope, sizeof tc.scope, "%s", scope);
	if (ident_random_hex(tc.nonce, 8, e) < 0)
		return -1;
	tc.expires = issued / 1000 + ttl_s;
	*expires = tc.expires;
	return token_mint(p->key, &tc, token, e);
}

/* ---- the routes -------------------------------------------------------------------- */

int previews_grant(struct previews *p, const char *id, const char *ws, const json_t *body,
		   json_t **out, struct err *e)
{
	static const char *const known[] = {"port", "ttl_s", "public", NULL};
	long long port = 0, ttl = 3600;
	bool pub = false;
	if (params_check_known(body, known, e) < 0 ||
	    param_need_int(body, "port", 1, 65535, &port, e) < 0 ||
	    param_int(body, "ttl_s", 1, p->ttl_max_s, &ttl, e) < 0 ||
	    param_bool(body, "public", &pub, e) < 0)
		return -1;
	if (port == CORE_ENVD_PORT)
		return err_param(e, "port", "port: %d is the computer's envd, not a preview's",
				 CORE_ENVD_PORT);
	if (port == CORE_CDP_PORT)
		return err_param(e, "port",
				 "port: %d is the desktop browser's DevTools: POST "
				 "/v1/computers/{id}/cdp opens it",
				 CORE_CDP_PORT);
	if (pub && !p->public_allowed)
		return err_set_param(e, ERR_FORBIDDEN, "public",
				     "public: public previews are off on this server (cubicled "
				     "--public-previews turns them on)");
	/* A computer another host holds: that host grants it (its listener,
	 * its URL). */
	char path[160];
	snprintf(path, sizeof path, "/v1/computers/%s/previews", id);
	int where = core_forward_json(p->core, id, ws, "POST", path, body, 201, out, e);
	if (where <= 0)
		return where;
	int64_t issued, expires;
	char wsid[40], token[TOKEN_MAX], scope[16];
	int64_t until = clock_wall_ms() + ttl * 1000;
	snprintf(scope, sizeof scope, "p%lld", port);
	if (core_preview_open(p->core, id, ws, (int)port, pub, until, &issued, wsid, e) < 0 ||
	    previews_mint(p, id, wsid, scope, issued, ttl, token, &expires, e) < 0)
		return -1;
	char url[1200], when[32];
	int n = snprintf(url, sizeof url, "%s://%lld-%s.%s%s/", p->scheme, port, id, p->domain,
			 p->port_part);
	if (!pub && n > 0 && (size_t)n < sizeof url)
		snprintf(url + n, sizeof url - (size_t)n, "?%s=%s", PREVIEW_QUERY, token);
	previews_when(expires, when);
	*out = json_pack("{s:s, s:s, s:I, s:b}", "url", url, "expires_at", when, "port",
			 (json_int_t)port, "public", pub);
	return *out ? 0 : err_set(e, ERR_INTERNAL, "out of memory");
}

int previews_revoke(struct previews *p, const char *id, const char *ws, const char *port,
		    struct err *e)
{
	char *end = NULL;
	long n = port ? strtol(port, &end, 10) : 0;
	if (!port || !*port || *end || n < 1 || n > 65535)
		return err_param(e, "port", "port: an integer in [1, 65535], not '%.20s'",
				 port ? port : "");
	char path[160];
	json_t *out = NULL;
	snprintf(path, sizeof path, "/v1/computers/%s/previews/%ld", id, n);
	int where = core_forward_json(p->core, id, ws, "DELETE", path, NULL, 200, &out, e);
	json_decref(out);
	if (where <= 0)
		return where;
	return core_preview_revoke(p->core, id, ws, (int)n, e);
}

int previews_list(struct previews *p, const char *id, const char *ws, json_t **out, struct err *e)
{
	char path[160];
	snprintf(path, sizeof path, "/v1/computers/%s/previews", id);
	int where = core_forward_json(p->core, id, ws, "GET", path, NULL, 200, out, e);
	if (where <= 0)
		return where;
	return core_previews_list(p->core, id, ws, out, e);
}

int previews_cdp(struct previews *p, const char *id, const char *ws, const json_t *body,
		 json_t **out, struct err *e)
{
	static const char *const known[] = {"ttl_s", NULL};
	long long ttl = 3600;
	if (params_check_known(body, known, e) < 0 ||
	    param_int(body, "ttl_s", 1, p->ttl_max_s, &ttl, e) < 0)
		return -1;
	char fpath[160];
	snprintf(fpath, sizeof fpath, "/v1/computers/%s/cdp", id);
	int where = core_forward_json(p->core, id, ws, "POST", fpath, body, 201, out, e);
	if (where <= 0)
		return where;
	json_t *b = NULL;
	int64_t issued, expires;
	char wsid[40], token[TOKEN_MAX];
	if (core_cdp(p->core, id, ws, &b, &issued, wsid, e) < 0)
		return -1;
	if (previews_mint(p, id, wsid, "cdp", issued, ttl, token, &expires, e) < 0) {
		json_decref(b);
		return -1;
	}
	const char *path = json_string_value(json_object_get(b, "browser_path"));
	const char *browser =
	    json_string_value(json_object_get(json_object_get(b, "version"), "Browser"));
	bool tls = strcmp(p->scheme, "https") == 0;
	char ws_url[1200], http_url[1200], when[32];
	snprintf(ws_url, sizeof ws_url, "%s://%s/cdp/%s%s", tls ? "wss" : "ws", p->cdp_host, token,
		 path);
	snprintf(http_url, sizeof http_url, "%s://%s/cdp/%s", p->scheme, p->cdp_host, token);
	previews_when(expires, when);
	*out = json_pack("{s:s, s:s, s:s, s:s?, s:b}", "ws_url", ws_url, "http_url", http_url,
			 "expires_at", when, "browser", browser, "started",
			 json_is_true(json_object_get(b, "started")));
	json_decref(b);
	return *out ? 0 : err_set(e, ERR_INTERNAL, "out of memory");
}

/* ---- the relay router (the event loop) ------------------------------------------------ */

static int previews_page(struct httpd_relay_answer *a, const struct httpreq_head *head,
			 const struct err *e)
{
	httpd_relay_page(a, head, e);
	return 1;
}

static void previews_gone(void *ctx, const char *tag)
{
	struct previews *p = ctx;
	core_viewer(p->core, tag, -1);
}

/* What every relay of computer id shares; counts it as a viewer. */
static int previews_target(struct previews *p, const char *id, const char *sub, int64_t until_s,
			   const struct httpreq_head *head, struct httpd_relay *r,
			   struct httpd_relay_answer *a)
{
	if (httpd_relays_tagged(p->httpd, id) >= p->per_computer) {
		struct err e = {0};
		err_set(&e, ERR_LIMIT,
			"computer %s already has %d connections through previews and CDP, the most "
			"allowed (--previews-per-computer); close some",
			id, p->per_computer);
		return previews_page(a, head, &e);
	}
	int64_t left = until_s - clock_wall_ms() / 1000;
	snprintf(r->tag, sizeof r->tag, "%s", id);
	snprintf(r->sub, sizeof r->sub, "%s", sub);
	r->max_seconds = left > 0 ? (int)(left < 86400 * 7 ? left : 86400 * 7) : 1;
	r->idle_seconds = p->idle_s;
	r->on_close = previews_gone;
	r->close_ctx = p;
	core_viewer(p->core, id, +1);
	return 0;
}

/* A navigation a browser makes (answered with a redirect that sets the
 * cookie), not a WebSocket nor a call with a body. */
static bool previews_navigation(const struct httpreq_head *head)
{
	bool get = (head->method_len == 3 && memcmp(head->method, "GET", 3) == 0) ||
		   (head->method_len == 4 && memcmp(head->method, "HEAD", 4) == 0);
	return get && !httpreq_get(head, "upgrade", NULL);
}

static int previews_route_port(struct previews *p, const struct httpreq_head *head, int port,
			       const char *id, struct httpd_relay *r, struct httpd_relay_answer *a)
{
	char scope[16], token[TOKEN_MAX];
	snprintf(scope, sizeof scope, "p%d", port);
	int64_t now_s = clock_wall_ms() / 1000;
	struct token_claims tc;
	struct err e = {0}, bad = {0};
	bool have = false;
	bool query =
	    httpreq_query(head->target, head->target_len, PREVIEW_QUERY, token, sizeof token) >= 0;
	if (query) {
		if (token_verify(p->key, token, id, scope, now_s, &tc, &bad) < 0)
			return previews_page(a, head, &bad);
		have = true;
	}
	/* A browser may hold several of our cookies (another domain's, one
	 * the app itself set): any that verifies will do. */
	for (int i = 0; !have && i < 8; i++) {
		if (httpreq_cookie(head, PREVIEW_COOKIE, i, token, sizeof token) < 0)
			break;
		struct err ce = {0};
		if (token_verify(p->key, token, id, scope, now_s, &tc, &ce) == 0)
			have = true;
		else if (!bad.code)
			bad = ce;
	}
	int64_t public_until = 0;
	if (core_preview_target(p->core, id, port, have ? tc.workspace : NULL,
				have ? tc.issued : -1, r->address, sizeof r->address, r->token,
				sizeof r->token, &public_until, &e) < 0)
		return previews_page(a, head, e.code == ERR_UNAUTHORIZED && bad.code ? &bad : &e);
	if (query && previews_navigation(head)) {
		/* The token becomes this host's cookie; the URL loses it. */
		char target[HTTPREQ_MAX_HEAD];
		/* A path on this host only: never "//elsewhere" (a browser reads
		 * it as another host) nor an absolute URL. */
		if (httpreq_without_query(head->target, head->target_len, PREVIEW_QUERY, target,
					  sizeof target) < 0 ||
		    target[0] != '/' || target[1] == '/' || target[1] == '\\' ||
		    strpbrk(target, "\r\n"))
			snprintf(target, sizeof target, "/");
		a->status = 302;
		int n = snprintf(a->headers, sizeof a->headers,
				 "location: %s\r\nset-cookie: %s=%s; Path=/; Max-Age=%lld; "
				 "HttpOnly; SameSite=Lax%s\r\n",
				 target, PREVIEW_COOKIE, token, (long long)(tc.expires - now_s),
				 strcmp(p->scheme, "https") == 0 ? "; Secure" : "");
		if (n < 0 || (size_t)n >= sizeof a->headers)
			snprintf(a->headers, sizeof a->headers,
				 "location: /\r\nset-cookie: %s=%s; Path=/; Max-Age=%lld; "
				 "HttpOnly; SameSite=Lax\r\n",
				 PREVIEW_COOKIE, token, (long long)(tc.expires - now_s));
		a->content_type = "text/plain; charset=utf-8";
		a->body = strdup("opening the preview\n");
		a->body_len = a->body ? strlen(a->body) : 0;
		return 1;
	}
	r->port = port;
	snprintf(r->what, sizeof r->what, "port %d of computer %s", port, id);
	snprintf(r->drop_cookie, sizeof r->drop_cookie, "%s", PREVIEW_COOKIE);
	snprintf(r->drop_query, sizeof r->drop_query, "%s", PREVIEW_QUERY);
	return previews_target(p, id, scope, have ? tc.expires : public_until / 1000, head, r, a);
}

/* GET /cdp/<token>/json/version, answered from what POST .../cdp learned. */
static int previews_cdp_version(struct previews *p, const struct httpreq_head *head, const char *id,
				const char *token, struct httpd_relay_answer *a)
{
	struct err e = {0};
	char path[100], host[256];
	char *version = NULL;
	if (core_cdp_info(p->core, id, path, sizeof path, &version) < 0) {
		err_set(&e, ERR_NOT_FOUND,
			"cubicled has not seen computer %s's browser since it started: POST "
			"/v1/computers/{id}/cdp again",
			id);
		return previews_page(a, head, &e);
	}
	json_t *v = json_loads(version, 0, NULL);
	free(version);
	if (!json_is_object(v)) {
		json_decref(v);
		v = json_object();
	}
	httpreq_copy(head, "host", host, sizeof host);
	char url[1400];
	snprintf(url, sizeof url, "%s://%s/cdp/%s%s",
		 strcmp(p->scheme, "https") == 0 ? "wss" : "ws", host, token, path);
	json_object_set_new(v, "webSocketDebuggerUrl", json_string(url));
	a->status = 200;
	a->content_type = "application/json";
	a->body = json_dumps(v, JSON_COMPACT);
	a->body_len = a->body ? strlen(a->body) : 0;
	json_decref(v);
	return 1;
}

static int previews_route_cdp(struct previews *p, const struct httpreq_head *head,
			      struct httpd_relay *r, struct httpd_relay_answer *a)
{
	struct err e = {0};
	const char *t = head->target + 5; /* after "/cdp/" */
	size_t left = head->target_len - 5, tl = 0;
	while (tl < left && t[tl] != '/' && t[tl] != '?')
		tl++;
	char token[TOKEN_MAX];
	if (tl == 0 || tl >= sizeof token) {
		err_set(&e, ERR_UNAUTHORIZED, "a CDP URL starts with /cdp/<token>/");
		return previews_page(a, head, &e);
	}
	memcpy(token, t, tl);
	token[tl] = 0;
	struct token_claims tc;
	if (token_verify(p->key, token, NULL, "cdp", clock_wall_ms() / 1000, &tc, &e) < 0)
		return previews_page(a, head, &e);
	int64_t unused;
	if (core_preview_target(p->core, tc.computer, CORE_CDP_PORT, tc.workspace, tc.issued,
				r->address, sizeof r->address, r->token, sizeof r->token, &unused,
				&e) < 0)
		return previews_page(a, head, &e);
	const char *rest = t + tl;
	size_t rl = 0;
	while (rl < left - tl && rest[rl] != '?')
		rl++;
	if ((rl == 13 && memcmp(rest, "/json/version", 13) == 0) ||
	    (rl == 14 && memcmp(rest, "/json/version/", 14) == 0))
		return previews_cdp_version(p, head, tc.computer, token, a);
	r->port = CORE_CDP_PORT;
	snprintf(r->what, sizeof r->what, "the desktop browser of computer %s", tc.computer);
	snprintf(r->host, sizeof r->host, "127.0.0.1:%d", CORE_CDP_PORT);
	r->drop_origin = true;
	snprintf(r->strip_prefix, sizeof r->strip_prefix, "/cdp/%s", token);
	return previews_target(p, tc.computer, "cdp", tc.expires, head, r, a);
}

int previews_relay(struct previews *p, const struct httpreq_head *head, struct httpd_relay *r,
		   struct httpd_relay_answer *a)
{
	struct err e = {0};
	char host[256];
	if (httpreq_copy(head, "host", host, sizeof host) <= 0 || strlen(host) >= sizeof host - 1) {
		err_set(&e, ERR_BAD_REQUEST, "a request needs a Host header");
		return previews_page(a, head, &e);
	}
	for (char *c = host; *c; c++)
		if (*c >= 'A' && *c <= 'Z')
			*c = (char)(*c - 'A' + 'a');
	char *colon = strrchr(host, ':');
	if (colon && colon[1] && strspn(colon + 1, "0123456789") == strlen(colon + 1))
		*colon = 0;
	/* <port>-<id>.<domain>: a preview. */
	size_t hl = strlen(host), dl = strlen(p->domain);
	if (hl > dl + 1 && host[hl - dl - 1] == '.' && strcmp(host + hl - dl, p->domain) == 0) {
		host[hl - dl - 1] = 0;
		size_t digits = strspn(host, "0123456789");
		long port = digits >= 1 && digits <= 5 && host[digits] == '-' ? atol(host) : 0;
		const char *id = host + digits + 1;
		if (port >= 1 && port <= 65535 && host[0] != '0' && ident_ok(id, 39) &&
		    !strchr(id, '.'))
			return previews_route_port(p, head, (int)port, id, r, a);
	}
	if (head->target_len > 5 && memcmp(head->target, "/cdp/", 5) == 0)
		return previews_route_cdp(p, head, r, a);
	err_set(&e, ERR_NOT_FOUND,
		"no preview here: a preview lives at %s://PORT-COMPUTER.%s%s/ (POST "
		"/v1/computers/{id}/previews answers its URL)",
		p->scheme, p->domain, p->port_part);
	return previews_page(a, head, &e);
}
