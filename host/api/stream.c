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

#include "ident.h"
#include "rfbfilter.h"
#include "token.h"
#include "clock.h"

struct streams {
	struct core *core;
	struct httpd *httpd;
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
	free(s);
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
	json_decref(c);
	/* Only a computer that could stream now gets a token. */
	tc.issued = core_stream_issue_ms(s->core, id);
	char path[300], token[TOKEN_MAX];
	if (core_stream_target(s->core, id, ws, tc.issued, path, sizeof path, e) < 0 ||
	    ident_random_hex(tc.nonce, 8, e) < 0)
		return -1;
	tc.expires = tc.issued / 1000 + ttl_s;
	if (token_mint(s->stream_key, &tc, token, e) < 0)
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

/* Checks a stream URL's token and finds where its stream goes (loop thread). */
static int stream_check(struct streams *s, struct httpd_request *req, struct httpd_tunnel *t,
			bool *view_only, struct err *e)
{
	char id[64];
	if (!stream_path_id(req->path, id))
		return err_set(e, ERR_NOT_FOUND, "no WebSocket endpoint at %.200s", req->path);
	struct token_claims tc;
	if (token_verify(s->stream_key, httpd_query(req, "token"), id, TOKEN_SCOPE_STREAM,
			 clock_wall_ms() / 1000, &tc, e) < 0)
		return -1;
	if (core_stream_target(s->core, id, tc.workspace, tc.issued, t->unix_path,
			       sizeof t->unix_path, e) < 0)
		return -1;
	snprintf(t->tag, sizeof t->tag, "%s", id);
	t->max_seconds = s->stream_max_s;
	*view_only = tc.view_only;
	return 0;
}

int streams_check(struct streams *s, struct httpd_request *req, struct err *e)
{
	struct httpd_tunnel t = {0};
	bool view_only;
	return stream_check(s, req, &t, &view_only, e);
}

int streams_tunnel(struct streams *s, struct httpd_request *req, struct httpd_tunnel *t,
		   struct err *e)
{
	bool view_only;
	if (stream_check(s, req, t, &view_only, e) < 0)
		return -1;
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
