/*
 * proxy: the hot path from the API to a computer's envd, the spool's quotas
 * and live streams' targets. Session files are sessions.c's.
 *
 * An action needs the computer's envd address and token, which the runtime
 * record holds in memory: no database round trip per click. Activity is
 * recorded in memory too and written by the ticker once a second.
 */
#include "core-internal.h"
#include "clock.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

int core_rt_running(struct core *c, const char *id, const char *ws, char *address, size_t alen,
		    char *token, size_t tlen, char *kind, size_t klen, struct err *e)
{
	pthread_mutex_lock(&c->lock);
	struct core_rt *r = core_rt_find(c, id);
	if (!r || (ws && strcmp(r->ws, ws) != 0) || r->state == COMPUTER_LOST) {
		pthread_mutex_unlock(&c->lock);
		/* A cluster's computer nobody holds: lost, most likely. */
		struct store_computer sc = {0};
		if (c->cluster && store_computer_get(c->store, id, ws, &sc, NULL) == 0) {
			enum computer_state st = sc.state;
			store_computer_clear(&sc);
			if (st == COMPUTER_LOST)
				return err_set(e, ERR_CONFLICT,
					       "computer %s is lost: its host died (POST "
					       ".../recreate makes it again on another host)",
					       id);
			return err_set(e, ERR_CONFLICT, "computer %s is %s, not running", id,
				       computer_state_name(st));
		}
		return err_set(e, ERR_NOT_FOUND, "no computer %.40s", id);
	}
	if (r->state != COMPUTER_RUNNING || !r->address[0]) {
		err_set(e, ERR_CONFLICT, "computer %s is %s, not running%s", id,
			computer_state_name(r->state),
			r->state == COMPUTER_STOPPED ? "; POST .../start first"
			: r->state == COMPUTER_OFFLINE
			    ? ": the machine's envd is not connected (it reconnects by itself)"
			    : "");
		pthread_mutex_unlock(&c->lock);
		return -1;
	}
	snprintf(address, alen, "%s", r->address);
	snprintf(token, tlen, "%s", r->token);
	if (kind)
		snprintf(kind, klen, "%s", r->kind);
	r->last_activity_ms = clock_wall_ms();
	r->activity_dirty = true;
	pthread_mutex_unlock(&c->lock);
	return 0;
}

bool core_holds(struct core *c, const char *id)
{
	if (!c->cluster)
		return true;
	pthread_mutex_lock(&c->lock);
	struct core_rt *r = core_rt_find(c, id);
	bool held = r && r->state != COMPUTER_DELETED;
	pthread_mutex_unlock(&c->lock);
	return held;
}

/* set_screen_size changed the desktop's resolution: the computer reports it,
 * and a later start (or a restarted X server) comes back at it. */
static void core_note_resolution(struct core *c, const char *id, const char *ws,
				 const struct envd_reply *r)
{
	json_t *j = json_loadb(r->body ? r->body : "", r->body_len, 0, NULL);
	json_int_t w = json_integer_value(json_object_get(j, "width"));
	json_int_t h = json_integer_value(json_object_get(j, "height"));
	json_decref(j);
	struct store_computer sc = {0};
	struct core_rt *rt;
	struct err ignore = {0};
	if (w <= 0 || h <= 0 || core_lock_computer(c, id, ws, &sc, &rt, &ignore) < 0)
		return;
	if (sc.width != w || sc.height != h) {
		sc.width = (int)w;
		sc.height = (int)h;
		if (store_computer_update(c->store, &sc, &ignore) < 0)
			fprintf(stderr,
				"cubicled: %s: cannot record the resolution %lldx%lld: %s\n", id,
				(long long)w, (long long)h, ignore.message);
	}
	pthread_mutex_unlock(&rt->op);
	store_computer_clear(&sc);
}

/* How long an action may take in envd: bash, python and install_packages
 * carry their own timeout_s (envd's defaults 60 s and 600 s when absent),
 * and get 30 s more to answer; every other action has envd_limits'
 * deadline (0). */
static long core_action_deadline(const char *action, const char *body, size_t len)
{
	bool install = strcmp(action, "install_packages") == 0;
	if (strcmp(action, "bash") != 0 && strcmp(action, "python") != 0 && !install)
		return 0;
	json_t *j = json_loadb(body ? body : "", len, 0, NULL);
	json_t *t = json_object_get(j, "timeout_s");
	long s =
	    json_is_integer(t) && json_integer_value(t) > 0 && json_integer_value(t) <= 7 * 86400
		? (long)json_integer_value(t)
	    : install ? 600
		      : 60;
	json_decref(j);
	long dflt = envd_get_limits().action_s;
	return s + 30 > dflt ? s + 30 : dflt;
}

/* A failed action's error code for /metrics (static), or NULL: the transport's
 * error, or the code of envd's error answer (parsed only when it is one). */
static const char *core_action_err_code(int rc, const struct envd_reply *r, const struct err *e)
{
	if (rc < 0)
		return err_code_name(e->code);
	if (r->status < 400)
		return NULL;
	json_t *j = json_loadb(r->body ? r->body : "", r->body_len, 0, NULL);
	const char *code = err_code_static(
	    json_string_value(json_object_get(json_object_get(j, "error"), "code")), r->status);
	json_decref(j);
	return code;
}

int core_action(struct core *c, const char *id, const char *ws, const char *action,
		const char *body, size_t len, struct envd_reply *r, struct err *e)
{
	for (const char *p = action; *p; p++)
		if (!((*p >= 'a' && *p <= 'z') || *p == '_' || (*p >= '0' && *p <= '9')))
			return err_set(e, ERR_NOT_FOUND, "no action named '%.60s'", action);
	if (c->cluster) {
		/* Held by another host: its API answers (envd's bytes through it). */
		char path[200];
		snprintf(path, sizeof path, "/v1/computers/%s/actions/%s", id, action);
		struct core_node_call q = {.method = "POST",
					   .path = path,
					   .body = body ? body : "",
					   .len = body ? len : 0,
					   .body_fd = -1,
					   .out_fd = -1,
					   .timeout_ms = core_action_deadline(action, body, len)};
		if (q.timeout_ms <= 0)
			q.timeout_ms = envd_get_limits().action_s;
		q.timeout_ms = q.timeout_ms * 1000 + 5000; /* the holder's own deadline first */
		int64_t t0 = clock_now_us();
		int where = core_cluster_call(c, id, ws, &q, r, e);
		/* The holder counts (and records) what it runs; only a call that
		 * reached no holder is counted here. */
		if (where < 0)
			core_stats_action(c, action, clock_now_us() - t0,
					  core_action_err_code(-1, r, e));
		if (where <= 0)
			return where;
	}
	char address[320], token[80], kind[16];
	if (core_rt_running(c, id, ws, address, sizeof address, token, sizeof token, kind,
			    sizeof kind, e) < 0)
		return -1;
	int64_t t0 = clock_now_us();
	int rc = envd_action(address, token, action, body, len,
			     core_action_deadline(action, body, len), r, e);
	core_stats_action(c, action, clock_now_us() - t0, core_action_err_code(rc, r, e));
	core_recordings_note(c, id, action, body, len,
			     rc < 0 ? err_http_status(e->code) : r->status, t0, clock_now_us(),
			     rc < 0 ? NULL : r);
	if (rc == 0 && r->status == 200 && strcmp(action, "set_screen_size") == 0)
		core_note_resolution(c, id, ws, r);
	return rc;
}

int core_action_ok(struct core *c, const char *id, const char *ws, const char *action,
		   const json_t *params, struct envd_reply *r, struct err *e)
{
	char *body = params ? json_dumps(params, JSON_COMPACT) : NULL;
	if (params && !body)
		return err_set(e, ERR_INTERNAL, "out of memory");
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

/* ---- the spool ------------------------------------------------------------------ */

static struct core_spool *core_spool_find(struct core *c, const char *ws, bool add)
{
	for (struct core_spool *s = c->spools; s; s = s->next)
		if (strcmp(s->ws, ws) == 0)
			return s;
	if (!add)
		return NULL;
	struct core_spool *s = calloc(1, sizeof *s);
	if (!s)
		return NULL;
	snprintf(s->ws, sizeof s->ws, "%s", ws);
	s->next = c->spools;
	c->spools = s;
	return s;
}

static unsigned long long core_mib(uint64_t b)
{
	return (unsigned long long)((b + (1u << 20) - 1) >> 20);
}

int core_spool_reserve(struct core *c, const char *ws, uint64_t bytes, struct err *e)
{
	const char *who = ws ? ws : "";
	uint64_t per_ws = c->cfg.spool_max_workspace, total = c->cfg.spool_max;
	pthread_mutex_lock(&c->lock);
	struct core_spool *s = core_spool_find(c, who, true);
	int rc = 0;
	if (!s)
		rc = err_set(e, ERR_INTERNAL, "out of memory");
	else if (bytes > per_ws || s->used + bytes > per_ws)
		rc = err_set(
		    e, ERR_NO_SPACE,
		    "the transfer needs %llu MiB of spool, over the workspace's spool quota "
		    "of %llu MiB (%llu MiB in use; cubicled --spool-max-workspace-mb)",
		    core_mib(bytes), core_mib(per_ws), core_mib(s->used));
	else if (bytes > total || c->spool_used + bytes > total)
		rc = err_set(
		    e, ERR_NO_SPACE,
		    "the transfer needs %llu MiB of spool, over the server's spool quota of "
		    "%llu MiB (%llu MiB in use; cubicled --spool-max-mb)",
		    core_mib(bytes), core_mib(total), core_mib(c->spool_used));
	if (rc == 0) {
		s->used += bytes;
		c->spool_used += bytes;
	}
	pthread_mutex_unlock(&c->lock);
	if (rc < 0)
		return rc;
	/* Whatever the quotas say, the spool never takes the disk's last bytes
	 * (the ledger and every computer's disk live there too). */
	char spool[600];
	snprintf(spool, sizeof spool, "%s/spool", c->cfg.state_dir);
	struct statvfs vfs;
	if (statvfs(spool, &vfs) == 0) {
		uint64_t avail = (uint64_t)vfs.f_bavail * vfs.f_frsize;
		if (avail < bytes || avail - bytes < c->cfg.spool_min_free) {
			core_spool_release(c, ws, bytes);
			return err_set(
			    e, ERR_NO_SPACE,
			    "the host's disk is nearly full: %llu MiB free, the transfer "
			    "needs %llu MiB and %llu MiB must stay free (cubicled "
			    "--spool-min-free-mb)",
			    core_mib(avail), core_mib(bytes), core_mib(c->cfg.spool_min_free));
		}
	}
	return 0;
}

void core_spool_release(struct core *c, const char *ws, uint64_t bytes)
{
	if (!bytes)
		return;
	pthread_mutex_lock(&c->lock);
	struct core_spool *s = core_spool_find(c, ws ? ws : "", false);
	if (s)
		s->used = s->used > bytes ? s->used - bytes : 0;
	c->spool_used = c->spool_used > bytes ? c->spool_used - bytes : 0;
	pthread_mutex_unlock(&c->lock);
}

int core_download_reserve(void *arg, uint64_t more, struct err *e)
{
	struct core_download *d = arg;
	if (core_spool_reserve(d->c, d->ws, more, e) < 0)
		return -1;
	*d->reserved += more;
	return 0;
}

int core_file_get(struct core *c, const char *id, const char *ws, const char *fpath, int fd,
		  char spool_ws[40], uint64_t *spooled, struct envd_reply *r, struct err *e)
{
	char address[320], token[80];
	*spooled = 0;
	memset(r, 0, sizeof *r);
	if (c->cluster) {
		/* From the host that holds it, through this host's spool (charged
		 * to the caller's workspace here, the computer's there). */
		char path[160];
		snprintf(path, sizeof path, "/v1/computers/%s/files", id);
		char *frag = NULL;
		if (asprintf(&frag, "path=%s", fpath) < 0)
			return err_set(e, ERR_INTERNAL, "out of memory");
		const char *query[] = {frag};
		snprintf(spool_ws, 40, "%s", ws ? ws : "");
		struct core_download d = {c, spool_ws, spooled};
		struct core_node_call q = {.method = "GET",
					   .path = path,
					   .query = query,
					   .nquery = 1,
					   .body_fd = -1,
					   .out_fd = fd,
					   .out_reserve = core_download_reserve,
					   .out_reserve_arg = &d,
					   .timeout_ms = envd_get_limits().file_s * 1000};
		int where = core_cluster_call(c, id, ws, &q, r, e);
		free(frag);
		if (where <= 0)
			return where;
	}
	if (core_rt_running(c, id, ws, address, sizeof address, token, sizeof token, NULL, 0, e) <
	    0)
		return -1;
	/* Charged to the computer's workspace, whoever asks. */
	pthread_mutex_lock(&c->lock);
	struct core_rt *rt = core_rt_find(c, id);
	snprintf(spool_ws, 40, "%s", rt ? rt->ws : (ws ? ws : ""));
	pthread_mutex_unlock(&c->lock);
	struct core_download d = {c, spool_ws, spooled};
	return envd_download(address, token, fpath, fd, core_download_reserve, &d, r, e);
}

int core_file_put(struct core *c, const char *id, const char *ws, const char *path, int fd,
		  uint64_t len, struct envd_reply *r, struct err *e)
{
	char address[320], token[80];
	if (c->cluster) {
		char upath[160];
		snprintf(upath, sizeof upath, "/v1/computers/%s/files", id);
		char *frag = NULL;
		if (asprintf(&frag, "path=%s", path) < 0)
			return err_set(e, ERR_INTERNAL, "out of memory");
		const char *query[] = {frag};
		struct core_node_call q = {.method = "PUT",
					   .path = upath,
					   .query = query,
					   .nquery = 1,
					   .body_fd = fd,
					   .body_fd_len = len,
					   .out_fd = -1,
					   .timeout_ms = envd_get_limits().file_s * 1000};
		int where = core_cluster_call(c, id, ws, &q, r, e);
		free(frag);
		if (where <= 0)
			return where;
	}
	if (core_rt_running(c, id, ws, address, sizeof address, token, sizeof token, NULL, 0, e) <
	    0)
		return -1;
	return envd_upload(address, token, path, fd, len, r, e);
}

/* ---- live streams -------------------------------------------------------------- */

void core_on_close_streams(struct core *c, void (*fn)(void *ctx, const char *id), void *ctx)
{
	c->close_streams = fn;
	c->close_streams_ctx = ctx;
}

int core_stream_target(struct core *c, const char *id, const char *ws, int64_t issued, char *path,
		       size_t len, struct err *e)
{
	pthread_mutex_lock(&c->lock);
	struct core_rt *r = core_rt_find(c, id);
	int rc = 0;
	if (!r || (ws && strcmp(r->ws, ws) != 0))
		rc = err_set(e, ERR_FORBIDDEN, "this stream token's computer is gone");
	else if (issued <= r->revoked_ms)
		rc = err_set(e, ERR_FORBIDDEN, "this computer's streams were revoked");
	else if (strcmp(r->kind, "desktop") != 0)
		rc = err_set(e, ERR_CONFLICT, "computer %s is a sandbox: it has no screen", id);
	else if (r->state != COMPUTER_RUNNING || !r->vnc[0])
		rc = err_set(e, ERR_FORBIDDEN, "computer %s is %s, not running", id,
			     computer_state_name(r->state));
	else
		snprintf(path, len, "%s", r->vnc);
	pthread_mutex_unlock(&c->lock);
	return rc;
}

int64_t core_stream_issue_ms(struct core *c, const char *id)
{
	int64_t now = c->cluster ? core_cluster_issue_ms(c, id) : clock_wall_ms();
	pthread_mutex_lock(&c->lock);
	struct core_rt *r = core_rt_find(c, id);
	if (r && now <= r->revoked_ms)
		now = r->revoked_ms + 1;
	pthread_mutex_unlock(&c->lock);
	return now;
}

void core_stream_revoke(struct core *c, const char *id)
{
	int64_t now = clock_wall_ms();
	pthread_mutex_lock(&c->lock);
	struct core_rt *r = core_rt_find(c, id);
	if (r)
		r->revoked_ms = now;
	pthread_mutex_unlock(&c->lock);
	if (c->cluster)
		core_cluster_revoked(c, id, now); /* the other hosts hear it from the database */
	struct err e = {0};
	if (store_stream_revoke(c->store, id, now, now + CORE_STREAM_TOKEN_MAX_S * 1000LL, &e) < 0)
		fprintf(stderr,
			"cubicled: %s: the stream revocation is not kept across a restart: %s\n",
			id, e.message);
	if (c->close_streams)
		c->close_streams(c->close_streams_ctx, id);
}

void core_viewer(struct core *c, const char *id, int delta)
{
	pthread_mutex_lock(&c->lock);
	struct core_rt *r = core_rt_find(c, id);
	if (r) {
		r->viewers += delta;
		if (r->viewers < 0)
			r->viewers = 0;
		r->last_activity_ms = clock_wall_ms();
		r->activity_dirty = true;
	}
	pthread_mutex_unlock(&c->lock);
}
