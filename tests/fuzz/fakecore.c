/* fakecore: see fakecore.h. */
#include "fakecore.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "runner.h"

struct core {
	int unused;
};
static struct core the_core;
char fake_ws[40] = "ws1";

struct core *fake_core(void)
{
	return &the_core;
}

#define QMAX 16
static struct envd_reply queue[QMAX];
static size_t qhead, qlen;

#define LOGMAX FAKE_LOGMAX
static char *log_name[LOGMAX];
static json_t *log_params[LOGMAX];
static size_t nlog;

static int64_t slept_ms;

/* clock_sleep_ms, wrapped (-Wl,--wrap): the fuzzer must not sleep. */
void __wrap_clock_sleep_ms(int64_t ms);
void __wrap_clock_sleep_ms(int64_t ms)
{
	if (ms > 0)
		slept_ms += ms;
}

int64_t fake_slept_ms(void)
{
	return slept_ms;
}

void fake_reset(void)
{
	slept_ms = 0;
	while (qlen) {
		free(queue[qhead].body);
		qhead = (qhead + 1) % QMAX;
		qlen--;
	}
	qhead = 0;
	for (size_t i = 0; i < nlog; i++) {
		free(log_name[i]);
		json_decref(log_params[i]);
	}
	nlog = 0;
}

void fake_envd_push(int status, const char *ct, const char *xw, const char *xh, const char *xs,
		    const void *body, size_t len)
{
	if (qlen == QMAX)
		return;
	struct envd_reply *r = &queue[(qhead + qlen++) % QMAX];
	memset(r, 0, sizeof *r);
	r->status = status;
	snprintf(r->content_type, sizeof r->content_type, "%s", ct ? ct : "application/json");
	snprintf(r->x_width, sizeof r->x_width, "%s", xw ? xw : "");
	snprintf(r->x_height, sizeof r->x_height, "%s", xh ? xh : "");
	snprintf(r->x_scale, sizeof r->x_scale, "%s", xs ? xs : "");
	r->body = malloc(len + 1);
	CHECK(r->body);
	memcpy(r->body, body, len);
	r->body[len] = 0;
	r->body_len = len;
}

void fake_envd_push_fuzz(const uint8_t *p, size_t n, int max)
{
	struct fz f = {p, n};
	for (int i = 0; i < max && f.n; i++) {
		uint8_t s = fz_u8(&f);
		int status = s < 200 ? 200 : s < 230 ? 400 + (s - 200) : 500 + (s % 5);
		size_t len;
		char *xw = fz_str(&f, NULL), *xs = fz_str(&f, NULL);
		char *body = fz_str(&f, &len);
		fake_envd_push(status, s & 1 ? "image/png" : "application/json", xw, xw, xs, body,
			       len);
		free(xw), free(xs), free(body);
	}
}

size_t fake_actions(void)
{
	return nlog;
}
const char *fake_action_name(size_t i)
{
	return log_name[i];
}
const json_t *fake_action_params(size_t i)
{
	return log_params[i];
}

static int fake_find(const char *id, const char *ws, struct err *e)
{
	if (!id || strcmp(id, FAKE_ID) != 0 || (ws && strcmp(ws, FAKE_WS) != 0))
		return err_set(e, ERR_NOT_FOUND, "no computer %.40s", id ? id : "");
	return 0;
}

static json_t *fake_json(void)
{
	return json_pack("{s:s, s:s, s:s, s:s}", "id", FAKE_ID, "workspace", FAKE_WS, "state",
			 "running", "kind", "desktop");
}

void envd_reply_free(struct envd_reply *r)
{
	free(r->body);
	memset(r, 0, sizeof *r);
}

const char *core_host_id(struct core *c)
{
	(void)c;
	return "fuzz";
}

int core_hosts(struct core *c, json_t **out, struct err *e)
{
	(void)c;
	*out = json_pack("{s:[]}", "hosts");
	return *out ? 0 : err_set(e, ERR_INTERNAL, "out of memory");
}

int core_host_drain(struct core *c, const char *host, const char *mode, json_t **out, struct err *e)
{
	(void)c, (void)host, (void)mode, (void)out;
	return err_set(e, ERR_CONFLICT, "not in a cluster");
}

int core_recreate(struct core *c, const char *id, const char *ws, json_t **out, struct err *e)
{
	(void)c, (void)id, (void)ws, (void)out;
	return err_set(e, ERR_CONFLICT, "not lost");
}

/* One host: no cluster catalog. */
int core_host_address(struct core *c, const char *host, char *out, size_t len)
{
	(void)c, (void)host, (void)out, (void)len;
	return -1;
}

int core_stream_key(struct core *c, const char *kid, unsigned char key[32])
{
	(void)c, (void)kid, (void)key;
	return -1;
}

int core_stream_key_now(struct core *c, char kid[24], unsigned char key[32])
{
	(void)c, (void)kid, (void)key;
	return -1;
}

bool core_stream_revoked(struct core *c, const char *id, int64_t issued)
{
	(void)c, (void)id, (void)issued;
	return false;
}

int core_boot_placed(struct core *c, const char *id, json_t **out, struct err *e)
{
	(void)c, (void)id, (void)out;
	return err_set(e, ERR_NOT_FOUND, "not in a cluster");
}

bool core_holds(struct core *c, const char *id)
{
	(void)c, (void)id;
	return true;
}

int core_action(struct core *c, const char *id, const char *ws, const char *action,
		const char *body, size_t len, struct envd_reply *r, struct err *e)
{
	memset(r, 0, sizeof *r);
	for (const char *p = action; *p; p++)
		if (!((*p >= 'a' && *p <= 'z') || *p == '_' || (*p >= '0' && *p <= '9')))
			return err_set(e, ERR_NOT_FOUND, "no action named '%.60s'", action);
	if (fake_find(id, ws, e) < 0)
		return -1;
	if (nlog < LOGMAX) {
		log_name[nlog] = strdup(action);
		log_params[nlog] = json_loadb(body ? body : "", len, 0, NULL);
		nlog++;
	}
	if (qlen) {
		*r = queue[qhead];
		qhead = (qhead + 1) % QMAX;
		qlen--;
		return 0;
	}
	r->status = 200;
	snprintf(r->content_type, sizeof r->content_type, "application/json");
	r->body = strdup("{}");
	r->body_len = 2;
	return 0;
}

int core_action_ok(struct core *c, const char *id, const char *ws, const char *action,
		   const json_t *params, struct envd_reply *r, struct err *e)
{
	char *body = params ? json_dumps(params, JSON_COMPACT) : NULL;
	int rc = core_action(c, id, ws, action, body ? body : "{}", body ? strlen(body) : 2, r, e);
	free(body);
	if (rc < 0)
		return -1;
	if (r->status >= 200 && r->status < 300)
		return 0;
	json_t *j = json_loadb(r->body ? r->body : "", r->body_len, 0, NULL);
	err_from_json(e, j, r->status);
	json_decref(j);
	envd_reply_free(r);
	return -1;
}

int core_action_json(struct core *c, const char *id, const char *ws, const char *action,
		     const json_t *params, json_t **out, struct err *e)
{
	struct envd_reply r;
	if (core_action_ok(c, id, ws, action, params, &r, e) < 0)
		return -1;
	*out = json_loadb(r.body ? r.body : "", r.body_len, 0, NULL);
	envd_reply_free(&r);
	if (!*out)
		return err_set(e, ERR_INTERNAL, "the computer's agent answered %s with no JSON",
			       action);
	return 0;
}

int core_create(struct core *c, const char *ws, const json_t *params, json_t **out, struct err *e)
{
	*out = fake_json();
	return 0;
}
int core_get(struct core *c, const char *id, const char *ws, json_t **out, struct err *e)
{
	if (fake_find(id, ws, e) < 0)
		return -1;
	*out = fake_json();
	return 0;
}
int core_list(struct core *c, const char *ws, const char *state, const char *kind, json_t **out,
	      struct err *e)
{
	*out = json_pack("{s:[o]}", "computers", fake_json());
	return 0;
}
int core_stop(struct core *c, const char *id, const char *ws, json_t **out, struct err *e)
{
	return core_get(c, id, ws, out, e);
}
int core_start(struct core *c, const char *id, const char *ws, json_t **out, struct err *e)
{
	return core_get(c, id, ws, out, e);
}
int core_delete(struct core *c, const char *id, const char *ws, json_t **out, struct err *e)
{
	return core_get(c, id, ws, out, e);
}
int core_wait(struct core *c, const char *id, const char *ws, enum computer_state state,
	      int timeout_s, json_t **out, struct err *e)
{
	return core_get(c, id, ws, out, e);
}
int core_wait_begin(struct core *c, const char *id, const char *ws, enum computer_state *stored,
		    struct err *e)
{
	if (fake_find(id, ws, e) < 0)
		return -1;
	*stored = COMPUTER_RUNNING;
	return 0;
}
/* Every wait is over at once: nothing is ever parked (no httpd loop here). */
bool core_wait_over(struct core *c, const char *id, enum computer_state state,
		    enum computer_state stored, enum computer_state *now)
{
	*now = COMPUTER_RUNNING;
	return true;
}
void core_await_change(struct core *c, int timeout_ms)
{
}
int core_spool_reserve(struct core *c, const char *ws, uint64_t bytes, struct err *e)
{
	return bytes > (1u << 20) ? err_set(e, ERR_NO_SPACE, "over the spool quota") : 0;
}
void core_spool_release(struct core *c, const char *ws, uint64_t bytes)
{
}
/* One host: nothing is forwarded. */
bool core_in_cluster(const struct core *c)
{
	(void)c;
	return false;
}
int core_forward_json(struct core *c, const char *id, const char *ws, const char *method,
		      const char *path, const json_t *body, int ok_status, json_t **out,
		      struct err *e)
{
	(void)c, (void)id, (void)ws, (void)method, (void)path, (void)body, (void)ok_status,
	    (void)out, (void)e;
	return 1;
}
int core_forward_get(struct core *c, const char *id, const char *ws, const char *path, int fd,
		     char spool_ws[40], uint64_t *spooled, int *status, struct err *e)
{
	(void)c, (void)id, (void)ws, (void)path, (void)fd, (void)spool_ws, (void)status, (void)e;
	*spooled = 0;
	return 1;
}
int core_file_get(struct core *c, const char *id, const char *ws, const char *path, int fd,
		  char spool_ws[40], uint64_t *spooled, struct envd_reply *r, struct err *e)
{
	memset(r, 0, sizeof *r);
	*spooled = 0;
	snprintf(spool_ws, 40, "%s", ws ? ws : "");
	if (fake_find(id, ws, e) < 0)
		return -1;
	return err_set(e, ERR_UNAVAILABLE, "no computers here");
}
int core_file_put(struct core *c, const char *id, const char *ws, const char *path, int fd,
		  uint64_t len, struct envd_reply *r, struct err *e)
{
	memset(r, 0, sizeof *r);
	if (fake_find(id, ws, e) < 0)
		return -1;
	return err_set(e, ERR_UNAVAILABLE, "no computers here");
}
int core_session_open(struct core *c, const char *ws, const char *session, const char *path,
		      int *fd, uint64_t *size, struct err *e)
{
	return err_set(e, ERR_NOT_FOUND, "no session %.40s", session);
}
int core_session_write(struct core *c, const char *ws, const char *session, const char *path,
		       int from_fd, struct err *e)
{
	return err_set(e, ERR_NOT_FOUND, "no session %.40s", session);
}
int core_recording_start(struct core *c, const char *id, const char *ws, const json_t *params,
			 json_t **out, struct err *e)
{
	if (fake_find(id, ws, e) < 0)
		return -1;
	return err_set(e, ERR_UNAVAILABLE, "no recorder here");
}
int core_recording_stop(struct core *c, const char *id, const char *ws, const char *rid,
			const json_t *params, json_t **out, struct err *e)
{
	return err_set(e, ERR_NOT_FOUND, "no recording %.40s", rid);
}
int core_recording_list(struct core *c, const char *id, const char *ws, json_t **out, struct err *e)
{
	if (fake_find(id, ws, e) < 0)
		return -1;
	*out = json_pack("{s:[]}", "recordings");
	return 0;
}
int core_recording_open(struct core *c, const char *id, const char *ws, const char *rid, int *fd,
			uint64_t *size, struct err *e)
{
	return err_set(e, ERR_NOT_FOUND, "no recording %.40s", rid);
}
int core_recording_actions(struct core *c, const char *id, const char *ws, const char *rid,
			   json_t **out, struct err *e)
{
	return err_set(e, ERR_NOT_FOUND, "no recording %.40s", rid);
}
int core_recording_delete(struct core *c, const char *id, const char *ws, const char *rid,
			  json_t **out, struct err *e)
{
	return err_set(e, ERR_NOT_FOUND, "no recording %.40s", rid);
}
int core_usage(struct core *c, const char *ws, int64_t from_ms, int64_t to_ms, json_t **out,
	       struct err *e)
{
	*out = json_pack("{s:I, s:I}", "from", (json_int_t)from_ms, "to", (json_int_t)to_ms);
	return 0;
}
int core_workspace_delete(struct core *c, const char *ws, json_t **out, struct err *e)
{
	return err_set(e, ERR_CONFLICT, "not here");
}
void core_on_close_streams(struct core *c, void (*fn)(void *ctx, const char *id), void *ctx)
{
}
int core_stream_target(struct core *c, const char *id, const char *ws, int64_t issued, char *path,
		       size_t len, struct err *e)
{
	if (fake_find(id, ws, e) < 0)
		return -1;
	return err_set(e, ERR_CONFLICT, "no display here");
}
int64_t core_stream_issue_ms(struct core *c, const char *id)
{
	return 1;
}
void core_stream_revoke(struct core *c, const char *id)
{
}
void core_viewer(struct core *c, const char *id, int delta)
{
}
/* Previews: the fake computer runs, so previews open; CDP has no browser
 * behind it (the api's own checks and URLs are what the harnesses reach). */
void core_on_close_previews(struct core *c, void (*fn)(void *ctx, const char *id, const char *sub),
			    void *ctx)
{
}
int core_preview_open(struct core *c, const char *id, const char *ws, int port, bool public_,
		      int64_t expires_ms, int64_t *issued, char workspace[40], struct err *e)
{
	if (fake_find(id, ws, e) < 0)
		return -1;
	*issued = 1;
	snprintf(workspace, 40, "%s", FAKE_WS);
	return 0;
}
int core_preview_revoke(struct core *c, const char *id, const char *ws, int port, struct err *e)
{
	return fake_find(id, ws, e);
}
int core_previews_list(struct core *c, const char *id, const char *ws, json_t **out, struct err *e)
{
	if (fake_find(id, ws, e) < 0)
		return -1;
	*out = json_pack("{s:[]}", "previews");
	return 0;
}
int core_preview_target(struct core *c, const char *id, int port, const char *ws, int64_t issued,
			char *address, size_t alen, char *token, size_t tlen,
			int64_t *public_until_ms, struct err *e)
{
	if (issued < 0)
		return err_set(e, ERR_UNAUTHORIZED, "not public");
	if (fake_find(id, ws, e) < 0)
		return -1;
	snprintf(address, alen, "unix:/nonexistent/envd.sock");
	snprintf(token, tlen, "fake-envd-token");
	return 0;
}
int core_cdp(struct core *c, const char *id, const char *ws, json_t **out, int64_t *issued,
	     char workspace[40], struct err *e)
{
	if (fake_find(id, ws, e) < 0)
		return -1;
	return err_set(e, ERR_CONFLICT, "no browser here");
}
int core_cdp_info(struct core *c, const char *id, char *path, size_t plen, char **version)
{
	*version = NULL;
	return -1;
}
char *core_metrics(struct core *c)
{
	return strdup("");
}

/* The code runner has its own harness (fuzz_runner): here it only checks. */
int runner_run(struct runner *r, const char *ws, const json_t *body, json_t **out, struct err *e)
{
	return err_set(e, ERR_UNAVAILABLE, "no runner here");
}
char *runner_metrics(struct runner *r)
{
	return strdup("");
}

/* Machines you bring: a token's parameters are checked by the real core
 * (host/core/byo.c); here the API's side only. */
int core_connect_token(struct core *c, const char *ws, const json_t *params, const char *base_url,
		       json_t **out, struct err *e)
{
	return err_set(e, ERR_UNAVAILABLE, "no machines here");
}
int core_byo_admit(struct core *c, const char *authorization, const char *hostname, bool display,
		   int width, int height, char *path, size_t plen, char *preamble, size_t prelen,
		   struct err *e)
{
	return err_set(e, ERR_UNAUTHORIZED, "no machines here");
}
void driver_names(const char *sep, char *out, size_t len)
{
	snprintf(out, len, "container%svm", sep);
}

/* ---- templates: a fake one, "t1", of the fake workspace ------------------------ */

static int fake_template(const char *ws, const char *name, json_t **out, struct err *e)
{
	if ((ws && strcmp(ws, fake_ws) != 0) || !name || strcmp(name, "t1") != 0)
		return err_set(e, ERR_NOT_FOUND, "no template %.63s", name ? name : "");
	*out = json_pack("{s:s, s:s, s:s, s:s, s:i, s:i}", "id", "tpl-1", "name", "t1", "base",
			 "sandbox", "state", "ready", "size_mb", 1, "build_s", 2);
	return 0;
}
int core_template_create(struct core *c, const char *ws, const json_t *params, json_t **out,
			 struct err *e)
{
	const char *name = json_string_value(json_object_get(params, "name"));
	if (!name)
		return err_param(e, "name", "name: required");
	return fake_template(ws, "t1", out, e);
}
int core_template_get(struct core *c, const char *ws, const char *workspace, const char *name,
		      json_t **out, struct err *e)
{
	return fake_template(ws, name, out, e);
}
int core_template_list(struct core *c, const char *ws, const char *workspace, json_t **out,
		       struct err *e)
{
	json_t *t = NULL;
	fake_template(fake_ws, "t1", &t, e);
	*out = json_pack("{s:[o]}", "templates", t);
	return 0;
}
int core_template_delete(struct core *c, const char *ws, const char *workspace, const char *name,
			 json_t **out, struct err *e)
{
	return fake_template(ws, name, out, e);
}
int core_template_log(struct core *c, const char *ws, const char *workspace, const char *name,
		      long long offset, long long max, json_t **out, struct err *e)
{
	json_t *t = NULL;
	if (fake_template(ws, name, &t, e) < 0)
		return -1;
	json_decref(t);
	*out = json_pack("{s:s, s:s, s:I, s:I, s:I, s:s}", "name", name, "state", "ready", "offset",
			 (json_int_t)offset, "next_offset", (json_int_t)offset, "size",
			 (json_int_t)0, "log", "");
	return 0;
}
int core_template_wait_begin(struct core *c, const char *ws, const char *workspace,
			     const char *name, char id[40], struct err *e)
{
	json_t *t = NULL;
	if (fake_template(ws, name, &t, e) < 0)
		return -1;
	json_decref(t);
	snprintf(id, 40, "tpl-1");
	return 0;
}
/* Every wait is over at once, as for computers. */
bool core_template_wait_over(struct core *c, const char *id, enum template_state *now)
{
	*now = TEMPLATE_READY;
	return true;
}
int core_template_json_by_id(struct core *c, const char *id, json_t **out, struct err *e)
{
	return fake_template(NULL, "t1", out, e);
}
