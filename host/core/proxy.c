/*
 * proxy: the hot path from the API to a computer's envd, and session files.
 *
 * An action needs the computer's envd address and token, which the runtime
 * record holds in memory: no database round trip per click. Activity is
 * recorded in memory too and written by the ticker once a second.
 */
#include "core-internal.h"
#include "ident.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

int core_rt_running(struct core *c, const char *id, const char *ws, char *address, size_t alen,
		    char *token, size_t tlen, char *kind, size_t klen, struct err *e)
{
	pthread_mutex_lock(&c->lock);
	struct core_rt *r = core_rt_find(c, id);
	if (!r || (ws && strcmp(r->ws, ws) != 0)) {
		pthread_mutex_unlock(&c->lock);
		return err_set(e, ERR_NOT_FOUND, "no computer %.40s", id);
	}
	if (strcmp(r->state, "running") != 0 || !r->address[0]) {
		err_set(e, ERR_CONFLICT, "computer %s is %s, not running%s", id, r->state,
			strcmp(r->state, "stopped") == 0 ? "; POST .../start first" : "");
		pthread_mutex_unlock(&c->lock);
		return -1;
	}
	snprintf(address, alen, "%s", r->address);
	snprintf(token, tlen, "%s", r->token);
	if (kind)
		snprintf(kind, klen, "%s", r->kind);
	r->last_activity_ms = core_now_ms();
	r->activity_dirty = true;
	pthread_mutex_unlock(&c->lock);
	return 0;
}

static void core_count(struct core *c, bool failed)
{
	pthread_mutex_lock(&c->lock);
	c->actions_total++;
	if (failed)
		c->action_errors_total++;
	pthread_mutex_unlock(&c->lock);
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

int core_action(struct core *c, const char *id, const char *ws, const char *action,
		const char *body, size_t len, struct envd_reply *r, struct err *e)
{
	for (const char *p = action; *p; p++)
		if (!((*p >= 'a' && *p <= 'z') || *p == '_' || (*p >= '0' && *p <= '9')))
			return err_set(e, ERR_NOT_FOUND, "no action named '%.60s'", action);
	char address[320], token[80], kind[16];
	if (core_rt_running(c, id, ws, address, sizeof address, token, sizeof token, kind,
			    sizeof kind, e) < 0)
		return -1;
	/* bash/python carry their own timeout_s; leave room for it. */
	int rc = envd_action(address, token, action, body, len, 0, r, e);
	core_count(c, rc < 0 || r->status >= 500);
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

int core_file_get(struct core *c, const char *id, const char *ws, const char *path, int fd,
		  struct envd_reply *r, struct err *e)
{
	char address[320], token[80];
	if (core_rt_running(c, id, ws, address, sizeof address, token, sizeof token, NULL, 0, e) <
	    0)
		return -1;
	return envd_download(address, token, path, fd, r, e);
}

int core_file_put(struct core *c, const char *id, const char *ws, const char *path, int fd,
		  uint64_t len, struct envd_reply *r, struct err *e)
{
	char address[320], token[80];
	if (core_rt_running(c, id, ws, address, sizeof address, token, sizeof token, NULL, 0, e) <
	    0)
		return -1;
	return envd_upload(address, token, path, fd, len, r, e);
}

/* ---- sessions ------------------------------------------------------------------- */

int core_session_dir_for(struct core *c, const char *ws, const char *session, char *out, size_t len,
			 struct err *e)
{
	if (!ident_ok(session, 64))
		return err_param(e, "session", "session: 1 to 64 of A-Z a-z 0-9 - _, not '%.70s'",
				 session);
	char wsdir[600];
	snprintf(wsdir, sizeof wsdir, "%s/sessions/%s", c->cfg.state_dir, ws);
	mkdir(wsdir, 0711);
	snprintf(out, len, "%s/%s", wsdir, session);
	if (mkdir(out, 0755) < 0 && errno != EEXIST)
		return err_set(e, ERR_INTERNAL, "cannot create the session directory: %s",
			       strerror(errno));
	static const char *const subs[] = {"input", "output", "working"};
	for (size_t i = 0; i < 3; i++) {
		char sub[700];
		snprintf(sub, sizeof sub, "%s/%s", out, subs[i]);
		mkdir(sub, 0755);
	}
	return 0;
}

/* Opens path beneath the session directory: no "..", no symlink out. */
static int core_session_openat(struct core *c, const char *ws, const char *session,
			       const char *path, int flags, mode_t mode, struct err *e)
{
	if (!ws)
		return err_param(e, "workspace", "workspace: required with the admin key");
	char dir[600];
	if (core_session_dir_for(c, ws, session, dir, sizeof dir, e) < 0)
		return -1;
	if (!path || !*path || path[0] == '/')
		return err_param(e, "path",
				 "path: a path inside the session, like output/report.txt");
	int dfd = open(dir, O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (dfd < 0)
		return err_set(e, ERR_INTERNAL, "cannot open the session: %s", strerror(errno));
	struct open_how how = {
	    .flags = (uint64_t)(flags | O_CLOEXEC),
	    .mode = mode,
	    .resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS,
	};
	int fd = (int)syscall(SYS_openat2, dfd, path, &how, sizeof how);
	int err = errno;
	close(dfd);
	if (fd < 0) {
		if (err == EXDEV)
			return err_param(e, "path", "path: '%s' leaves the session", path);
		if (err == ENOENT)
			return err_set(e, ERR_NOT_FOUND, "no file '%s' in session %s", path,
				       session);
		return err_set(e, err == EISDIR ? ERR_INVALID : ERR_INTERNAL,
			       "cannot open '%s': %s", path, strerror(err));
	}
	return fd;
}

int core_session_open(struct core *c, const char *ws, const char *session, const char *path,
		      int *fd, uint64_t *size, struct err *e)
{
	/* O_NONBLOCK: a FIFO a guest left in the session must not hold the
	 * open (and a worker) until someone writes to it; httpd then reads the
	 * file on its event loop, so it must be a regular file. */
	int f = core_session_openat(c, ws, session, path, O_RDONLY | O_NONBLOCK, 0, e);
	if (f < 0)
		return -1;
	struct stat st;
	if (fstat(f, &st) < 0 || !S_ISREG(st.st_mode)) {
		close(f);
		return err_param(e, "path", "path: '%s' is not a regular file", path);
	}
	fcntl(f, F_SETFL, fcntl(f, F_GETFL) & ~O_NONBLOCK);
	*fd = f;
	*size = (uint64_t)st.st_size;
	return 0;
}

int core_session_write(struct core *c, const char *ws, const char *session, const char *path,
		       int from_fd, struct err *e)
{
	int f = core_session_openat(c, ws, session, path, O_WRONLY | O_CREAT | O_TRUNC, 0644, e);
	if (f < 0)
		return -1;
	char buf[65536];
	ssize_t n;
	lseek(from_fd, 0, SEEK_SET);
	while ((n = read(from_fd, buf, sizeof buf)) > 0) {
		if (write(f, buf, (size_t)n) != n) {
			close(f);
			return err_set(e, ERR_INTERNAL, "cannot write '%s': %s", path,
				       strerror(errno));
		}
	}
	/* Guests write here as their own uid: keep it writable for them. */
	fchmod(f, 0666);
	close(f);
	return 0;
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
	else if (strcmp(r->state, "running") != 0 || !r->vnc[0])
		rc = err_set(e, ERR_FORBIDDEN, "computer %s is %s, not running", id, r->state);
	else
		snprintf(path, len, "%s", r->vnc);
	pthread_mutex_unlock(&c->lock);
	return rc;
}

int64_t core_stream_issue_ms(struct core *c, const char *id)
{
	int64_t now = core_now_ms();
	pthread_mutex_lock(&c->lock);
	struct core_rt *r = core_rt_find(c, id);
	if (r && now <= r->revoked_ms)
		now = r->revoked_ms + 1;
	pthread_mutex_unlock(&c->lock);
	return now;
}

void core_stream_revoke(struct core *c, const char *id)
{
	pthread_mutex_lock(&c->lock);
	struct core_rt *r = core_rt_find(c, id);
	if (r)
		r->revoked_ms = core_now_ms();
	pthread_mutex_unlock(&c->lock);
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
		r->last_activity_ms = core_now_ms();
		r->activity_dirty = true;
	}
	pthread_mutex_unlock(&c->lock);
}
