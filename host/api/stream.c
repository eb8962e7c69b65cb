/*
 * stream: stream tokens, the WebSocket tunnel to a desktop's VNC socket and
 * the embed page (stream.h).
 */
#include "stream.h"

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

#include "ident.h"
#include "nodeauth.h"
#include "rfbfilter.h"
#include "token.h"
#include "clock.h"

struct streams {
	struct core *core;
	struct httpd *httpd;
	struct nodeauth *nodeauth; /* a cluster's, NULL on one host */
	int node_header;	   /* req->extra[] index of X-Cubicle-Node, -1 none */
	unsigned char stream_key[TOKEN_KEY_BYTES];
	char web_dir[512];
	char frame_ancestors[256];
	int stream_ttl_max_s, stream_max_s;
	int per_computer;
};

static void stream_close_all(void *ctx, const char *id)
{
	struct streams *s = ctx;
	httpd_close_tagged(s->httpd, id, 4403,
			   "the stream was closed: revoked or computer stopped");
}

struct streams *streams_create(struct core *core, struct httpd *h, const struct streams_opts *o)
{
	struct streams *s = calloc(1, sizeof *s);
	if (!s)
		return NULL;
	s->core = core;
	s->httpd = h;
	s->nodeauth = o->nodeauth;
	s->node_header = -1;
	memcpy(s->stream_key, o->stream_key, TOKEN_KEY_BYTES);
	snprintf(s->web_dir, sizeof s->web_dir, "%s", o->web_dir ? o->web_dir : "");
	snprintf(s->frame_ancestors, sizeof s->frame_ancestors, "%s",
		 o->frame_ancestors ? o->frame_ancestors : "'self'");
	s->stream_ttl_max_s = o->stream_ttl_max_s > 0 ? o->stream_ttl_max_s : 600;
	s->stream_max_s = o->stream_max_s > 0 ? o->stream_max_s : 3600;
	s->per_computer = o->per_computer > 0 ? o->per_computer : 8;
	core_on_close_streams(core, stream_close_all, s);
	return s;
}

void streams_destroy(struct streams *s)
{
	if (s)
		OPENSSL_cleanse(s->stream_key, sizeof s->stream_key);
	free(s);
}

void streams_node_header(struct streams *s, int index)
{
	s->node_header = index;
}

/* The key ring tokens verify against: a v1 token's key is this host's own
 * (stream.key), a v2 token's the cluster's key of its id (the database's,
 * in the core's memory). */
static int streams_key_for(void *ctx, const char *kid, unsigned char key[TOKEN_KEY_BYTES])
{
	struct streams *s = ctx;
	if (!kid[0]) {
		memcpy(key, s->stream_key, TOKEN_KEY_BYTES);
		return 0;
	}
	return core_stream_key(s->core, kid, key);
}

int streams_ttl_max(const struct streams *s)
{
	return s->stream_ttl_max_s;
}

int streams_grant(struct streams *s, const char *id, const char *ws, const char *host,
		  long long ttl_s, bool view_only, json_t **out, struct err *e)
{
	if (ttl_s < 1 || ttl_s > s->stream_ttl_max_s)
		return err_param(e, "ttl_s", "ttl_s: expected an integer in [1, %d], got %lld",
				 s->stream_ttl_max_s, ttl_s);
	json_t *c = NULL;
	if (core_get(s->core, id, ws, &c, e) < 0)
		return -1;
	struct token_claims tc = {.view_only = view_only};
	snprintf(tc.computer, sizeof tc.computer, "%.39s", id);
	snprintf(tc.workspace, sizeof tc.workspace, "%s",
		 json_string_value(json_object_get(c, "workspace")));
	const char *holder = json_string_value(json_object_get(c, "host"));
	const char *state = json_string_value(json_object_get(c, "state"));
	const char *kind = json_string_value(json_object_get(c, "kind"));
	snprintf(tc.host, sizeof tc.host, "%s", holder ? holder : "");
	/* Only a computer that could stream now gets a token. */
	tc.issued = core_stream_issue_ms(s->core, id);
	char path[300], token[TOKEN_MAX];
	unsigned char key[TOKEN_KEY_BYTES];
	int rc = 0;
	if (s->nodeauth && tc.host[0] && strcmp(tc.host, core_host_id(s->core)) != 0) {
		/* Another host holds it: what the database says must do. */
		if (kind && strcmp(kind, "desktop") != 0)
			rc = err_set(e, ERR_CONFLICT, "computer %s is a sandbox: it has no screen",
				     id);
		else if (!state || strcmp(state, "running") != 0)
			rc = err_set(e, ERR_FORBIDDEN, "computer %s is %s, not running", id,
				     state ? state : "?");
	} else {
		rc = core_stream_target(s->core, id, ws, tc.issued, path, sizeof path, e);
	}
	json_decref(c);
	if (rc < 0 || ident_random_hex(tc.nonce, 8, e) < 0)
		return -1;
	tc.expires = tc.issued / 1000 + ttl_s;
	/* A cluster's token names its key and the host, and verifies on any
	 * host; one host's is v1, signed with its own key. */
	if (s->nodeauth && tc.host[0] && core_stream_key_now(s->core, tc.kid, key) == 0) {
		rc = token_mint(key, &tc, token, e);
		OPENSSL_cleanse(key, sizeof key);
	} else {
		tc.host[0] = 0;
		rc = token_mint(s->stream_key, &tc, token, e);
	}
	if (rc < 0)
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

void streams_revoke(struct streams *s, const char *id)
{
	core_stream_revoke(s->core, id);
}

static void stream_viewer_gone(void *ctx, const char *tag)
{
	struct streams *s = ctx;
	core_viewer(s->core, tag, -1);
}

/* The computer id of /v1/computers/{id}/stream (any run of slashes between
 * segments), or false. */
static bool stream_path_id(const char *path, char id[64])
{
	static const char *const want[] = {"v1", "computers", NULL, "stream"};
	const char *p = path;
	for (int k = 0; k < 4; k++) {
		while (*p == '/')
			p++;
		const char *end = strchr(p, '/');
		size_t len = end ? (size_t)(end - p) : strlen(p);
		if (len == 0 || len >= 64)
			return false;
		if (want[k] && (strlen(want[k]) != len || memcmp(p, want[k], len) != 0))
			return false;
		if (!want[k]) {
			memcpy(id, p, len);
			id[len] = 0;
		}
		p += len;
	}
	while (*p == '/')
		p++;
	return *p == 0 && ident_ok(id, 63);
}

/* The relay of a stream whose computer host `host` holds (loop thread:
 * memory only): its address from the catalog, the holder's own URL with
 * the token, and this node's credential for the same workspace. */
static int stream_relay(struct streams *s, const char *id, const struct token_claims *tc,
			const char *token, struct httpd_tunnel *t, struct err *e)
{
	char address[256];
	if (core_host_address(s->core, tc->host, address, sizeof address) < 0)
		return err_set(e, ERR_UNAVAILABLE,
			       "the host that holds computer %s (%s) is down: its computers become "
			       "lost when its lease expires",
			       id, tc->host);
	if (core_stream_revoked(s->core, id, tc->issued))
		return err_set(e, ERR_FORBIDDEN, "this computer's streams were revoked");
	const char *colon = strrchr(address, ':');
	if (!colon || (size_t)(colon - address) >= sizeof t->relay_host)
		return err_set(e, ERR_INTERNAL, "host %s has no usable address", tc->host);
	snprintf(t->relay_host, sizeof t->relay_host, "%.*s", (int)(colon - address), address);
	t->relay_port = atoi(colon + 1);
	char path[100], frag[TOKEN_MAX + 8], canon[TOKEN_MAX + 160], cred[NODEAUTH_MAX];
	snprintf(path, sizeof path, "/v1/computers/%s/stream", id);
	snprintf(frag, sizeof frag, "token=%s", token);
	const char *query[] = {frag};
	if (nodeauth_canonical(path, query, 1, canon, sizeof canon) < 0 ||
	    nodeauth_url(path, query, 1, t->relay_path, sizeof t->relay_path) < 0 ||
	    nodeauth_sign(s->nodeauth, core_host_id(s->core), tc->workspace, "GET", canon,
			  clock_wall_ms(), cred, e) < 0)
		return err_set(e, ERR_INTERNAL, "cannot sign the relay of computer %s's stream",
			       id);
	snprintf(t->relay_header, sizeof t->relay_header, NODEAUTH_HEADER ": %s", cred);
	return 0;
}

/* Checks a stream URL's token and finds where its stream goes (loop thread).
 * *relay: another host holds it and t relays there. */
static int stream_check(struct streams *s, struct httpd_request *req, struct httpd_tunnel *t,
			bool *view_only, bool *relay, struct err *e)
{
	char id[64];
	*relay = false;
	if (!stream_path_id(req->path, id))
		return err_set(e, ERR_NOT_FOUND, "no WebSocket endpoint at %.200s", req->path);
	/* A stream another node relays here carries its credential: checked
	 * like any node call, and never relayed again. */
	const char *node = s->node_header >= 0 ? req->extra[s->node_header] : "";
	bool relayed = false;
	if (node[0]) {
		char canon[HTTPD_MAX_URL + 64], from[64], ws[40];
		bool admin;
		if (!s->nodeauth)
			return err_set(
			    e, ERR_UNAUTHORIZED,
			    "this host is not in a cluster: node credentials are refused");
		if (nodeauth_canonical(req->path, (const char *const *)req->query, req->nquery,
				       canon, sizeof canon) < 0 ||
		    nodeauth_verify(s->nodeauth, node, req->method_name, canon, clock_wall_ms(),
				    from, ws, &admin, e) < 0)
			return err_set(e, ERR_UNAUTHORIZED, "%s", e ? e->message : "bad node");
		relayed = true;
	}
	struct token_claims tc;
	const char *token = httpd_query(req, "token");
	if (token_verify_ring(streams_key_for, s, token, id, TOKEN_SCOPE_STREAM,
			      clock_wall_ms() / 1000, &tc, e) < 0)
		return -1;
	snprintf(t->tag, sizeof t->tag, "%s", id);
	t->max_seconds = s->stream_max_s;
	*view_only = tc.view_only;
	if (s->nodeauth && tc.host[0] && strcmp(tc.host, core_host_id(s->core)) != 0) {
		if (relayed)
			return err_set(e, ERR_MISDIRECTED, "computer %s is not on this host", id);
		*relay = true;
		return stream_relay(s, id, &tc, token, t, e);
	}
	return core_stream_target(s->core, id, tc.workspace, tc.issued, t->unix_path,
				  sizeof t->unix_path, e);
}

int streams_check(struct streams *s, struct httpd_request *req, struct err *e)
{
	struct httpd_tunnel t = {0};
	bool view_only, relay;
	return stream_check(s, req, &t, &view_only, &relay, e);
}

int streams_tunnel(struct streams *s, struct httpd_request *req, struct httpd_tunnel *t,
		   struct err *e)
{
	bool view_only, relay;
	if (stream_check(s, req, t, &view_only, &relay, e) < 0)
		return -1;
	/* Relayed: the holder parses, filters, counts and says the mode. */
	if (relay)
		return 0;
	/* The router runs on the loop, as does every tunnel's start and end:
	 * the count cannot change between this check and the new tunnel. */
	if (httpd_tunnels_tagged(s->httpd, t->tag) >= s->per_computer)
		return err_set(e, ERR_LIMIT,
			       "computer %s already has %d open streams (--streams-per-computer)",
			       t->tag, s->per_computer);
	snprintf(t->preamble, sizeof t->preamble, "%s",
		 view_only ? STREAM_PREAMBLE_VIEW : STREAM_PREAMBLE_CONTROL);
	/* Every stream is parsed; a view stream's input is dropped. */
	t->filter = rfbfilter_run;
	t->state = rfbfilter_new(view_only ? RFBFILTER_VIEW : RFBFILTER_CONTROL);
	t->state_free = rfbfilter_free;
	if (!t->state)
		return err_set(e, ERR_INTERNAL, "out of memory");
	t->on_close = stream_viewer_gone;
	t->close_ctx = s;
	core_viewer(s->core, t->tag, +1);
	return 0;
}

void streams_embed(struct streams *s, struct httpd_request *req, struct httpd_response *resp)
{
	struct err e = {0};
	const char *rel = "embed.html";
	if (strncmp(req->path, "/embed/assets/", 14) == 0)
		rel = req->path + 7; /* assets/... in the built web client */
	int dfd = open(s->web_dir, O_PATH | O_DIRECTORY | O_CLOEXEC);
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
		 s->frame_ancestors);
	httpd_add_header(resp, "content-security-policy:", csp);
	httpd_add_header(resp, "referrer-policy:", "no-referrer");
	httpd_add_header(resp, "x-content-type-options:", "nosniff");
	httpd_add_header(resp, "cache-control:", "no-cache");
	resp->status = 200;
	resp->file_fd = fd;
	resp->file_len = (uint64_t)st.st_size;
}
