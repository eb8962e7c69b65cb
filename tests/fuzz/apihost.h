/*
 * apihost: cubicled's API in process, for the harnesses that fuzz it
 * (fuzz_api, fuzz_mcp, fuzz_computeruse). host/api/api.c is included, so
 * its router and handlers run exactly as under httpd: the request is built
 * here as httpd would hand it over (decoded path, "name=value" query
 * fragments, headers, body), routed by api_route, handled, and freed.
 * Behind the API: the real store (SQLite in a temporary file, with a
 * workspace key and the admin key), the real MCP, computer-use and stream
 * code, and the fake core (fakecore.h) whose envd answers the harness
 * queues. Nothing listens: the httpd made for the stream code is never run.
 */
#ifndef CUBICLE_FUZZ_APIHOST_H
#define CUBICLE_FUZZ_APIHOST_H

#include <ftw.h>

#include "../../host/api/api.c"
#include "fakecore.h"
#include "fuzz.h"
#include "token.h"

#define ADMIN_KEY "admin-key-for-fuzzing"

static struct api *host_api;
static char host_ws_key[64];
static char host_dir[64];

/* The temporary state (the database, the spool) goes with the process. */
static int host_rm(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	return remove(path);
}
static void host_cleanup(void)
{
	nftw(host_dir, host_rm, 8, FTW_DEPTH | FTW_PHYS);
}

static void host_init(void)
{
	if (host_api)
		return;
	struct err e = {0};
	char *dir = host_dir;
	snprintf(host_dir, sizeof host_dir, "/tmp/cubicle-fuzz-XXXXXX");
	CHECK(mkdtemp(dir));
	atexit(host_cleanup);
	char db[128];
	snprintf(db, sizeof db, "%s/cubicle.db", dir);
	struct store *st = store_open(db, &e);
	CHECK(st);
	struct store_workspace w = {0};
	CHECK(store_workspace_create(st, "fuzz", 4, &w, &e) == 0);
	snprintf(fake_ws, sizeof fake_ws, "%s", w.id);
	struct store_key_info ki;
	CHECK(store_key_issue(st, FAKE_WS, host_ws_key, &ki, &e) == 0);
	struct api *a = calloc(1, sizeof *a);
	CHECK(a);
	a->core = fake_core();
	a->store = st;
	SHA256((const unsigned char *)ADMIN_KEY, strlen(ADMIN_KEY), a->admin_hash);
	snprintf(a->spool_dir, sizeof a->spool_dir, "%s/spool", dir);
	mkdir(a->spool_dir, 0700);
	a->max_requests_ws = 32;
	a->max_waits_ws = 16;
	a->max_body = 1u << 20;
	pthread_mutex_init(&a->tenants_lock, NULL);
	pthread_mutex_init(&a->parked_lock, NULL);
	/* As api_create: GET /metrics reads them (found by fuzz.api: a NULL). */
	CHECK(api_stats_open(a, &e) == 0);
	struct httpd_opts ho = {.listen = "127.0.0.1:0", .router = api_route, .ctx = a};
	a->httpd = httpd_create(&ho, &e);
	CHECK(a->httpd);
	static const unsigned char key[TOKEN_KEY_BYTES] = "stream key for fuzzing, 32 bytes";
	struct streams_opts so = {.stream_key = key, .web_dir = "/nonexistent"};
	a->streams = streams_create(a->core, a->httpd, &so);
	CHECK(a->streams);
	struct previews_opts po = {.key = key, .url = "http://localhost:8081"};
	a->previews = previews_create(a->core, a->httpd, &po, &e);
	CHECK(a->previews);
	a->mcp =
	    mcp_create(a->core, a->streams, a->previews, a->runner, "https://allowed.example", &e);
	CHECK(a->mcp);
	host_api = a;
}

/* What an answer must look like whatever was asked: a status, and for an
 * error the one error shape with a code, a message and the status the
 * code has (when no guest answered: envd's own answers pass through). A
 * 500 is a bug unless the fake envd answered something. */
static void host_check_answer(const struct httpd_response *resp, bool guest_answered)
{
	CHECK(resp->status >= 200 && resp->status < 600);
	if (!guest_answered)
		CHECK(resp->status != 500);
	/* envd's answer to an action passes through as it is (host/api/api.c
	 * api_action): a compromised guest can send its own tenant a malformed
	 * error, so the shape is only checked when no guest answered. */
	if (!guest_answered && resp->status >= 400 && resp->content_type &&
	    strncmp(resp->content_type, "application/json", 16) == 0) {
		json_t *j = json_loadb((const char *)resp->body, resp->body_len, 0, NULL);
		CHECK(j);
		json_t *inner = json_object_get(j, "error");
		/* MCP's protocol faults are JSON-RPC errors (an integer code). */
		if (json_object_get(j, "jsonrpc"))
			CHECK(json_is_integer(json_object_get(inner, "code")));
		else
			CHECK(json_is_string(json_object_get(inner, "code")));
		CHECK(json_is_string(json_object_get(inner, "message")));
		json_decref(j);
	}
}

/*
 * One request through the router and its handler. query: "name=value"
 * fragments (NULL-terminated). Returns the status (0 when the router
 * refused before a handler: then *resp holds the router's error).
 */
static int host_request(enum httpd_method m, const char *path, char **query,
			const char *authorization, const char *origin, const char *body, size_t len,
			struct httpd_response *resp, bool guest_answered)
{
	static const char *const names[] = {"GET",   "POST",	"PUT", "DELETE",
					    "PATCH", "OPTIONS", "BREW"};
	struct httpd_request req = {0};
	req.method = m;
	req.method_name = names[m];
	snprintf(req.path, sizeof req.path, "%s", path);
	snprintf(req.authorization, sizeof req.authorization, "%s", authorization);
	snprintf(req.host, sizeof req.host, "127.0.0.1:8080");
	snprintf(req.origin, sizeof req.origin, "%s", origin ? origin : "");
	snprintf(req.content_type, sizeof req.content_type, "application/json");
	req.content_length = (long long)len;
	for (; query && *query && req.nquery < HTTPD_MAX_QUERY; query++)
		req.query[req.nquery++] = *query;
	struct httpd_route route = {.body_fd = -1};
	struct err e = {0};
	memset(resp, 0, sizeof *resp);
	resp->file_fd = -1;
	int status;
	if (api_route(host_api, &req, &route, &e) < 0) {
		CHECK(e.code != ERR_OK && e.message[0]);
		CHECK(err_http_status(e.code) != 500);
		if (route.err_detail)
			httpd_respond_err_detail(resp, &e, route.err_detail);
		else
			httpd_respond_err(resp, &e);
		status = 0;
	} else {
		CHECK(route.handler);
		char *copy = malloc(len + 1);
		CHECK(copy);
		memcpy(copy, body, len);
		copy[len] = 0;
		if (route.body == HTTPD_BODY_FD) {
			CHECK(route.body_fd >= 0);
			CHECK(write(route.body_fd, body, len) == (ssize_t)len);
			req.body_written = len;
		} else {
			size_t max = route.max_body ? route.max_body : 4096;
			if (len > max) {
				free(copy);
				copy = NULL;
				len = 0;
			}
			req.body = copy;
			req.body_len = len;
		}
		req.user = route.user;
		route.handler(host_api, &req, resp);
		if (route.body_fd >= 0)
			close(route.body_fd);
		free(copy);
		status = resp->status;
		host_check_answer(resp, guest_answered);
	}
	free(route.abandon_unlink);
	if (route.user_free)
		route.user_free(route.user);
	return status;
}

static void host_response_free(struct httpd_response *resp)
{
	free(resp->body);
	if (resp->file_fd >= 0)
		close(resp->file_fd);
	memset(resp, 0, sizeof *resp);
}

#endif
