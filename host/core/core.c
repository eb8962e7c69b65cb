/*
 * core: lifecycle, recovery, the usage ticker and idle timeouts.
 *
 * Order of every transition: write the new state (and usage switch) to the
 * store, then call the driver, then write the result. A crash between any
 * two steps leaves a state core_open() knows how to finish: a computer
 * "stopping" is stopped, one "deleting" is deleted, one "provisioning" or
 * "starting" is adopted if its processes run and cleaned up otherwise.
 */
#include "core-internal.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "guest-net.h"
#include "ident.h"
#include "params.h"
#include "sizes.h"
#include "clock.h"

static void core_iso8601(int64_t ms, char *out, size_t len)
{
	time_t s = (time_t)(ms / 1000);
	struct tm tm;
	gmtime_r(&s, &tm);
	size_t n = strftime(out, len, "%Y-%m-%dT%H:%M:%S", &tm);
	snprintf(out + n, len - n, ".%03dZ", (int)(ms % 1000));
}

/* ---- runtime records ------------------------------------------------------------ */

struct core_rt *core_rt_find(struct core *c, const char *id)
{
	for (struct core_rt *r = c->rts; r; r = r->next)
		if (strcmp(r->id, id) == 0)
			return r;
	return NULL;
}

int core_rt_select(struct core *c, const char *ws, const char *size, unsigned states,
		   char (*ids)[40], int max)
{
	int n = 0;
	pthread_mutex_lock(&c->lock);
	for (struct core_rt *r = c->rts; r; r = r->next) {
		if (strcmp(r->ws, ws) != 0 || (size && strcmp(r->size, size) != 0))
			continue;
		if (!(states & COMPUTER_STATE_BIT(r->state)))
			continue;
		if (n < max)
			snprintf(ids[n], sizeof ids[n], "%s", r->id);
		n++;
	}
	pthread_mutex_unlock(&c->lock);
	return n;
}

struct core_rt *core_rt_add(struct core *c, const struct store_computer *sc)
{
	pthread_mutex_lock(&c->lock);
	struct core_rt *r = core_rt_find(c, sc->id);
	if (!r) {
		r = calloc(1, sizeof *r);
		if (!r) {
			pthread_mutex_unlock(&c->lock);
			return NULL;
		}
		pthread_mutex_init(&r->op, NULL);
		snprintf(r->id, sizeof r->id, "%s", sc->id);
		r->next = c->rts;
		c->rts = r;
	}
	snprintf(r->ws, sizeof r->ws, "%s", sc->workspace);
	snprintf(r->kind, sizeof r->kind, "%s", sc->kind);
	snprintf(r->size, sizeof r->size, "%s", sc->size);
	snprintf(r->isolation, sizeof r->isolation, "%s", sc->isolation);
	r->state = sc->state;
	snprintf(r->token, sizeof r->token, "%s", sc->envd_token);
	r->idle_s = sc->idle_timeout_s;
	r->byo = core_is_byo(sc);
	snprintf(r->cred, sizeof r->cred, "%s",
		 r->byo ? json_string_value(json_object_get(sc->driver_state, "credential_sha256"))
			      ?: ""
			: "");
	r->last_activity_ms = sc->last_activity_ms ? sc->last_activity_ms : clock_wall_ms();
	pthread_mutex_unlock(&c->lock);
	return r;
}

/* The driver of a computer, by the isolation it was created with. */
static const struct driver_ops *core_ops(const struct store_computer *sc)
{
	const struct driver_ops *d = driver_find(sc->isolation);
	return d ? d : &driver_missing;
}

/* Records where envd and, for a desktop, its RFB server are (lock held). */
static void core_rt_addresses(const struct driver_ops *ops, struct core_rt *r,
			      const struct driver_computer *dc, const char *address)
{
	snprintf(r->address, sizeof r->address, "%s", address);
	r->vnc[0] = 0;
	if (strcmp(r->kind, "desktop") == 0 && ops->vnc_path(dc, r->vnc, sizeof r->vnc, NULL) < 0)
		r->vnc[0] = 0;
}

/* ---- JSON ----------------------------------------------------------------------- */

json_t *core_json_public(const struct store_computer *sc)
{
	char created[40], updated[40], active[40];
	core_iso8601(sc->created_ms, created, sizeof created);
	core_iso8601(sc->updated_ms, updated, sizeof updated);
	core_iso8601(sc->last_activity_ms, active, sizeof active);
	const struct size *sz = size_find(sc->kind, sc->size, NULL);
	json_t *j = json_pack(
	    "{s:s, s:s, s:s, s:s, s:s, s:s, s:[i,i], s:i, s:O, s:s, s:s?, s:s, s:s, s:s}", "id",
	    sc->id, "workspace", sc->workspace, "kind", sc->kind, "size", sc->size, "isolation",
	    sc->isolation, "state", computer_state_name(sc->state), "resolution", sc->width,
	    sc->height, "idle_timeout_s", sc->idle_timeout_s, "metadata",
	    sc->metadata ? sc->metadata : json_object(), "external_workspace_id",
	    sc->external_workspace_id, "session", sc->session_id[0] ? sc->session_id : NULL,
	    "created_at", created, "updated_at", updated, "last_activity_at", active);
	if (!j)
		return json_object();
	if (sc->error[0])
		json_object_set_new(j, "error", json_string(sc->error));
	if (sc->accel[0])
		json_object_set_new(j, "accel", json_string(sc->accel));
	if (sc->template_id[0])
		json_object_set_new(j, "template_id", json_string(sc->template_id));
	if (sc->host[0]) /* a cluster's: where it is (or was, when lost) */
		json_object_set_new(j, "host", json_string(sc->host));
	if (strcmp(sc->isolation, "byo") == 0) {
		const char *hn = json_string_value(json_object_get(sc->driver_state, "hostname"));
		const char *nm = json_string_value(json_object_get(sc->driver_state, "name"));
		json_object_set_new(j, "hostname", json_string(hn ? hn : ""));
		json_object_set_new(j, "name", json_string(nm ? nm : ""));
	}
	if (sz)
		json_object_set_new(j, "limits",
				    json_pack("{s:f, s:I, s:i}", "vcpus", sz->millicpus / 1000.0,
					      "memory_mb", (json_int_t)sz->memory_mb, "pids",
					      sz->pids_max));
	return j;
}

/* ---- driver plumbing ------------------------------------------------------------ */

struct core_paths {
	char dir[512], image[512], session[512];
	struct guest_net_list egress_allow, egress_deny; /* the server's + the workspace's */
};

void core_egress_lists(struct core *c, const char *ws, struct guest_net_list *allow,
		       struct guest_net_list *deny)
{
	struct err e = {0};
	allow->n = deny->n = 0;
	guest_net_list_merge(allow, c->cfg.egress_allow, &e);
	guest_net_list_merge(deny, c->cfg.egress_deny, &e);
	struct store_workspace w;
	if (!ws || !*ws || store_workspace_get(c->store, ws, &w, NULL) < 0)
		return;
	struct guest_net_list l;
	if (guest_net_list_parse(&l, w.egress_allow, 1, "egress_allow", &e) < 0 ||
	    guest_net_list_merge(allow, &l, &e) < 0 ||
	    guest_net_list_parse(&l, w.egress_deny, 0, "egress_deny", &e) < 0 ||
	    guest_net_list_merge(deny, &l, &e) < 0)
		fprintf(stderr, "cubicled: workspace %s: egress: %s\n", ws, e.message);
}

/* The server's egress lists plus workspace ws's, for a boot. */
static void core_egress(struct core *c, const char *ws, struct core_paths *p)
{
	core_egress_lists(c, ws, &p->egress_allow, &p->egress_deny);
}

/* Whether workspace ws changes the egress policy (its computers cannot be
 * warm-pool desktops, which were started with the server's). */
static bool core_ws_egress(struct core *c, const char *ws)
{
	struct store_workspace w;
	return store_workspace_get(c->store, ws, &w, NULL) == 0 &&
	       (w.egress_allow[0] || w.egress_deny[0]);
}

static void core_driver_computer(struct core *c, struct store_computer *sc, struct core_paths *p,
				 struct driver_computer *dc)
{
	const struct size *sz = size_find(sc->kind, sc->size, NULL);
	snprintf(p->dir, sizeof p->dir, "%s/computers/%s", c->cfg.state_dir, sc->id);
	snprintf(p->image, sizeof p->image, "%s/%s", c->cfg.images_dir, sc->kind);
	p->session[0] = 0;
	if (sc->session_id[0])
		core_session_dir_for(c, sc->workspace, sc->session_id, p->session,
				     sizeof p->session, NULL);
	memset(dc, 0, sizeof *dc);
	dc->id = sc->id;
	dc->kind = sc->kind;
	dc->image_dir = p->image;
	dc->dir = p->dir;
	dc->session_dir = p->session[0] ? p->session : NULL;
	dc->envd_token = sc->envd_token;
	dc->width = sc->width;
	dc->height = sc->height;
	dc->millicpus = sz ? sz->millicpus : 1000;
	dc->memory_mb = sz ? sz->memory_mb : 1024;
	dc->disk_mb = sz ? sz->disk_mb : 0;
	dc->pids_max = sz ? sz->pids_max : 1024;
	dc->host_sizes = c->cfg.host_sizes;
	if (!sc->driver_state)
		sc->driver_state = json_object();
	dc->state = sc->driver_state;
}

/*
 * Persists a new state, the driver state in sc and what `how` adds (the
 * usage switch, the workspace's limit) in one transaction, so a crash never
 * separates a state change from its billing. Broadcasts. On failure sc
 * keeps its old state.
 */
static int core_commit(struct core *c, struct store_computer *sc, enum computer_state state,
		       const char *error, const struct store_commit *how, struct err *e)
{
	char old_error[sizeof sc->error];
	enum computer_state old_state = sc->state;
	int64_t old_deleted = sc->deleted_ms;
	memcpy(old_error, sc->error, sizeof old_error);
	sc->state = state;
	snprintf(sc->error, sizeof sc->error, "%s", error ? error : "");
	if (state == COMPUTER_DELETED)
		sc->deleted_ms = clock_wall_ms();
	if (store_computer_commit(c->store, sc, how, e) < 0) {
		sc->state = old_state;
		memcpy(sc->error, old_error, sizeof old_error);
		sc->deleted_ms = old_deleted;
		return -1;
	}
	pthread_mutex_lock(&c->lock);
	struct core_rt *r = core_rt_find(c, sc->id);
	if (r)
		r->state = state;
	pthread_cond_broadcast(&c->changed);
	pthread_mutex_unlock(&c->lock);
	return 0;
}

static int core_set_state(struct core *c, struct store_computer *sc, enum computer_state state,
			  const char *error, struct err *e)
{
	return core_commit(c, sc, state, error, NULL, e);
}

/* A new state and the usage switch to rate_state (NULL: billing ends) at at_ms, together. */
int core_set_state_billed(struct core *c, struct store_computer *sc, enum computer_state state,
			  const char *error, const char *rate_state, int64_t at_ms, struct err *e)
{
	struct store_commit how = {.bill = true, .rate_state = rate_state, .at_ms = at_ms};
	return core_commit(c, sc, state, error, &how, e);
}

/* Polls envd's /health until it says ready (the desktop is usable). */
static int core_wait_ready(struct core *c, const char *address, const char *token, struct err *e)
{
	int64_t until = clock_wall_ms() + (int64_t)c->cfg.ready_timeout_s * 1000;
	struct err last = {0};
	while (clock_wall_ms() < until) {
		struct envd_reply r;
		if (envd_health(address, token, 2000, &r, &last) == 0 && r.status == 200) {
			json_t *j = json_loadb(r.body, r.body_len, 0, NULL);
			bool ready = json_is_true(json_object_get(j, "ready"));
			json_decref(j);
			envd_reply_free(&r);
			if (ready)
				return 0;
		} else {
			envd_reply_free(&r);
		}
		clock_sleep_ms(25);
	}
	return err_set(e, ERR_TIMEOUT, "the computer did not become ready in %d s%s%s",
		       c->cfg.ready_timeout_s, last.message[0] ? ": " : "", last.message);
}

/* Tells the guest the operator's settings (guest-setup.h), before it counts
 * as running; an envd that refuses them fails the start with its reason. */
static int core_guest_setup(struct core *c, const char *address, const char *token, struct err *e)
{
	struct envd_reply r;
	struct err te = {0};
	if (envd_setup(address, token, c->cfg.guest_setup, strlen(c->cfg.guest_setup), 30000, &r,
		       &te) < 0)
		return err_set(e, ERR_UNAVAILABLE, "setting up the guest failed: %s", te.message);
	int rc = 0;
	if (r.status != 200) {
		json_t *j = json_loadb(r.body, r.body_len, 0, NULL);
		const char *msg =
		    json_string_value(json_object_get(json_object_get(j, "error"), "message"));
		rc = err_set(e, ERR_UNAVAILABLE,
			     "setting up the guest failed: its agent answered %d: %.300s", r.status,
			     msg ? msg : "(no message)");
		json_decref(j);
	}
	envd_reply_free(&r);
	return rc;
}

/*
 * Boots a computer that is provisioning or starting: driver start, wait
 * for envd, running. On failure the computer ends in error with the reason
 * and its processes cleaned up. rt->op held by the caller.
 */
static int core_boot(struct core *c, struct store_computer *sc, bool create, struct err *e)
{
	struct core_paths p;
	struct driver_computer dc;
	const struct driver_ops *ops = core_ops(sc);
	core_driver_computer(c, sc, &p, &dc);
	mkdir(p.dir, 0700);
	struct err de = {0};
	char address[320] = "";
	int rc = 0;
	int64_t t0 = clock_now_us();
	enum core_life op = create ? CORE_BOOT : CORE_START;
	/* A computer made from a template boots its image (template.h); a
	 * microVM only reads it at create (it keeps hard links of it). */
	bool vm = strcmp(ops->name, "vm") == 0;
	if (sc->template_id[0] && (create || !vm))
		rc = core_template_image(c, sc->template_id, vm, p.image, sizeof p.image, &de);
	if (rc == 0 && create)
		rc = ops->create(&dc, &de);
	if (rc == 0) {
		/* The egress policy is read at each start (a store read: not on
		 * every driver call, the ticker's alive checks included). */
		core_egress(c, sc->workspace, &p);
		dc.egress_allow = &p.egress_allow;
		dc.egress_deny = &p.egress_deny;
		rc = ops->start(&dc, &de);
		snprintf(sc->accel, sizeof sc->accel, "%s", dc.accel);
		store_computer_update(c->store, sc, NULL); /* the driver state, now */
	}
	if (rc == 0)
		rc = ops->envd_address(&dc, address, sizeof address, &de);
	if (rc == 0) {
		pthread_mutex_lock(&c->lock);
		struct core_rt *r = core_rt_find(c, sc->id);
		if (r)
			core_rt_addresses(ops, r, &dc, address);
		pthread_mutex_unlock(&c->lock);
		if (ops->guest_setup && c->cfg.guest_setup)
			rc = core_guest_setup(c, address, sc->envd_token, &de);
		if (rc == 0)
			rc = core_wait_ready(c, address, sc->envd_token, &de);
	}
	if (rc < 0) {
		core_stats_life(c, op, ops, clock_now_us() - t0, false);
		struct err ignore;
		ops->stop(&dc, &ignore);
		/* A computer in error is not billed (a failed start ends the
		 * stopped rate too). */
		core_set_state_billed(c, sc, COMPUTER_ERROR, de.message, NULL, clock_wall_ms(),
				      NULL);
		if (e)
			*e = de;
		return -1;
	}
	/* In a cluster the computer may have been placed again elsewhere
	 * while this host booted it (its boot call timed out): then this copy
	 * goes, and the other host's is the computer. */
	struct store_computer now_sc = {0};
	if (c->cluster && store_computer_get(c->store, sc->id, NULL, &now_sc, NULL) == 0 &&
	    strcmp(now_sc.host, core_host_id(c)) != 0) {
		store_computer_clear(&now_sc);
		struct err ignore;
		ops->destroy(&dc, &ignore);
		pthread_mutex_lock(&c->lock);
		struct core_rt *gone = core_rt_find(c, sc->id);
		if (gone) {
			gone->state = COMPUTER_LOST;
			gone->address[0] = gone->vnc[0] = 0;
		}
		pthread_mutex_unlock(&c->lock);
		return err_set(e, ERR_CONFLICT, "computer %s was placed on another host meanwhile",
			       sc->id);
	}
	store_computer_clear(&now_sc);
	core_stats_life(c, op, ops, clock_now_us() - t0, true);
	int64_t now = clock_wall_ms();
	sc->last_activity_ms = now;
	pthread_mutex_lock(&c->lock);
	struct core_rt *r = core_rt_find(c, sc->id);
	if (r)
		r->last_activity_ms = now;
	pthread_mutex_unlock(&c->lock);
	return core_set_state_billed(c, sc, COMPUTER_RUNNING, NULL, "running", now, e);
}

/* ---- background operations ------------------------------------------------------ */

struct core_job {
	struct core *c;
	char id[40];
	enum { JOB_BOOT, JOB_STOP, JOB_DELETE, JOB_DEAD } kind;
};

static int core_do_stop(struct core *c, struct store_computer *sc, struct err *e);
static int core_do_delete(struct core *c, struct store_computer *sc, struct err *e);
static void core_do_dead(struct core *c, struct store_computer *sc);

static void *core_job_main(void *arg)
{
	struct core_job *j = arg;
	struct core *c = j->c;
	struct store_computer sc = {0};
	pthread_mutex_lock(&c->lock);
	struct core_rt *r = core_rt_find(c, j->id);
	pthread_mutex_unlock(&c->lock);
	if (r) {
		pthread_mutex_lock(&r->op);
		if (store_computer_get(c->store, j->id, NULL, &sc, NULL) == 0) {
			if (j->kind == JOB_BOOT && sc.state == COMPUTER_PROVISIONING)
				core_boot(c, &sc, true, NULL);
			else if (j->kind == JOB_STOP && sc.state == COMPUTER_RUNNING) {
				/* Past the workspace's stopped limit an idle desktop
				 * stays running (max_running still bounds it); the
				 * ticker tries again after another idle timeout. */
				struct err se = {0};
				if (core_do_stop(c, &sc, &se) < 0)
					fprintf(stderr, "cubicled: %s idle: not stopped: %s\n",
						j->id, se.message);
			} else if (j->kind == JOB_DELETE && sc.state != COMPUTER_DELETED)
				core_do_delete(c, &sc, NULL);
			else if (j->kind == JOB_DEAD && sc.state == COMPUTER_RUNNING)
				core_do_dead(c, &sc);
		}
		store_computer_clear(&sc);
		pthread_mutex_unlock(&r->op);
	}
	pthread_mutex_lock(&c->lock);
	c->background--;
	pthread_cond_broadcast(&c->changed);
	pthread_mutex_unlock(&c->lock);
	free(j);
	return NULL;
}

static void core_background(struct core *c, const char *id, int kind)
{
	struct core_job *j = calloc(1, sizeof *j);
	if (!j)
		return;
	j->c = c;
	j->kind = kind;
	snprintf(j->id, sizeof j->id, "%s", id);
	pthread_attr_t attr;
	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	pthread_t t;
	pthread_mutex_lock(&c->lock);
	c->background++;
	pthread_mutex_unlock(&c->lock);
	if (pthread_create(&t, &attr, core_job_main, j) != 0) {
		pthread_mutex_lock(&c->lock);
		c->background--;
		pthread_mutex_unlock(&c->lock);
		free(j);
	}
	pthread_attr_destroy(&attr);
}

void core_boot_later(struct core *c, const char *id)
{
	core_background(c, id, JOB_BOOT);
}

void core_lose_local(struct core *c, const char *id, const char *why)
{
	pthread_mutex_lock(&c->lock);
	struct core_rt *r = core_rt_find(c, id);
	pthread_mutex_unlock(&c->lock);
	if (!r)
		return;
	/* An operation in flight (a boot waiting for its agent) may hold the
	 * computer for long: a few seconds, then on without it (its own writes
	 * fail once this host is fenced or the computer lost). */
	struct timespec until = clock_deadline(CLOCK_REALTIME, 5000);
	bool locked = pthread_mutex_timedlock(&r->op, &until) == 0;
	if (c->close_streams)
		c->close_streams(c->close_streams_ctx, id);
	struct store_computer sc = {0};
	if (store_computer_get(c->store, id, NULL, &sc, NULL) < 0) {
		/* The database is away: what memory knows, an empty driver state
		 * (the driver still finds its cgroup and directory by id). */
		memset(&sc, 0, sizeof sc);
		snprintf(sc.id, sizeof sc.id, "%s", id);
		pthread_mutex_lock(&c->lock);
		snprintf(sc.kind, sizeof sc.kind, "%s", r->kind);
		snprintf(sc.size, sizeof sc.size, "%s", r->size);
		pthread_mutex_unlock(&c->lock);
		snprintf(sc.isolation, sizeof sc.isolation, "%s", driver_default()->name);
	}
	struct core_paths p;
	struct driver_computer dc;
	core_driver_computer(c, &sc, &p, &dc);
	struct err de = {0};
	if (!core_is_byo(&sc) && core_ops(&sc)->destroy(&dc, &de) < 0)
		fprintf(stderr, "cubicled: %s: not all of it could be removed: %s\n", id,
			de.message);
	rmdir(p.dir);
	pthread_mutex_lock(&c->lock);
	r->state = COMPUTER_LOST;
	r->address[0] = r->vnc[0] = 0;
	pthread_cond_broadcast(&c->changed);
	pthread_mutex_unlock(&c->lock);
	fprintf(stderr, "cubicled: %s lost: %s\n", id, why);
	store_computer_clear(&sc);
	if (locked)
		pthread_mutex_unlock(&r->op);
}

void core_cluster_fenced(struct core *c, int64_t epoch, const char *why)
{
	/* Everything this host held under epoch stops now, whatever the
	 * database says (it may be away too): nothing of it may run or bill. */
	char(*ids)[40] = NULL;
	int n = 0;
	pthread_mutex_lock(&c->lock);
	for (struct core_rt *r = c->rts; r; r = r->next)
		n++;
	ids = calloc((size_t)n + 1, sizeof *ids);
	n = 0;
	for (struct core_rt *r = c->rts; r && ids; r = r->next)
		if (r->state != COMPUTER_DELETED && r->state != COMPUTER_LOST)
			snprintf(ids[n++], sizeof ids[0], "%s", r->id);
	pthread_mutex_unlock(&c->lock);
	for (int i = 0; i < n; i++)
		core_lose_local(c, ids[i], why);
	free(ids);
	/* Lost in the database too, billing closed at the last tick (as the
	 * leader's reaper does; whichever comes first, the other finds the
	 * epoch gone and changes nothing). */
	struct err e = {0};
	int lost = 0;
	if (store_host_reap(c->store, c->host_id, epoch, why, &lost, &e) < 0)
		fprintf(
		    stderr,
		    "cubicled: cluster: cannot mark this host's computers lost (the reaper or the "
		    "next registration will): %s\n",
		    e.message);
	fprintf(stderr, "cubicled: cluster: fenced: %d computers stopped\n", n);
}

/* ---- operations ----------------------------------------------------------------- */

/* Asks the guest to write what it has not yet written to its disk, so a
 * start that cannot restore the stop's snapshot boots cold with every file
 * the user wrote (sync(2) needs no privilege). Best effort, bounded: a guest
 * that does not answer is stopped all the same. */
static void core_guest_sync(const struct store_computer *sc, struct driver_computer *dc)
{
	char address[320];
	struct envd_reply r;
	struct err se = {0};
	static const char body[] = "{\"command\": \"sync\", \"timeout_s\": 20}";
	if (core_ops(sc)->envd_address(dc, address, sizeof address, &se) < 0 ||
	    envd_action(address, sc->envd_token, "bash", body, sizeof body - 1, 25, &r, &se) < 0) {
		fprintf(stderr, "cubicled: %s: the guest's disk not synced before stop: %s\n",
			sc->id, se.message);
		return;
	}
	if (r.status != 200)
		fprintf(stderr,
			"cubicled: %s: the guest's disk not synced before stop: envd answered %d\n",
			sc->id, r.status);
	envd_reply_free(&r);
}

static int core_do_stop(struct core *c, struct store_computer *sc, struct err *e)
{
	struct core_paths p;
	struct driver_computer dc;
	core_driver_computer(c, sc, &p, &dc);
	if (c->close_streams)
		c->close_streams(c->close_streams_ctx, sc->id);
	core_previews_down(c, sc->id);
	core_recordings_end(c, sc->id, false); /* their files end with the screen */
	/* Billing at the running rate ends when the stop is decided; the
	 * workspace's stopped-computer limit is checked in the same
	 * transaction, so concurrent stops never pass it together. */
	struct store_commit how = {.bill = true,
				   .rate_state = "stopped",
				   .at_ms = clock_wall_ms(),
				   .stopped_limit = core_stopped_limit(c, sc->workspace)};
	if (core_commit(c, sc, COMPUTER_STOPPING, NULL, &how, e) < 0)
		return -1;
	if (core_ops(sc)->sync_before_stop)
		core_guest_sync(sc, &dc);
	struct err de = {0};
	int64_t t0 = clock_now_us();
	if (core_ops(sc)->stop(&dc, &de) < 0) {
		core_stats_life(c, CORE_STOP, core_ops(sc), clock_now_us() - t0, false);
		core_set_state(c, sc, COMPUTER_ERROR, de.message, NULL);
		if (e)
			*e = de;
		return -1;
	}
	core_stats_life(c, CORE_STOP, core_ops(sc), clock_now_us() - t0, true);
	pthread_mutex_lock(&c->lock);
	struct core_rt *r = core_rt_find(c, sc->id);
	if (r)
		r->address[0] = r->vnc[0] = 0;
	pthread_mutex_unlock(&c->lock);
	return core_set_state(c, sc, COMPUTER_STOPPED, NULL, e);
}

static int core_do_delete(struct core *c, struct store_computer *sc, struct err *e)
{
	struct core_paths p;
	struct driver_computer dc;
	core_driver_computer(c, sc, &p, &dc);
	if (c->close_streams)
		c->close_streams(c->close_streams_ctx, sc->id);
	core_previews_down(c, sc->id);
	core_recordings_end(c, sc->id, true); /* kept ones stay */
	if (core_set_state_billed(c, sc, COMPUTER_DELETING, NULL, NULL, clock_wall_ms(), e) < 0)
		return -1;
	struct err de = {0};
	if (core_is_byo(sc)) {
		/* A machine you bring: its link is told why and ends; the
		 * credential dies with the computer (core_byo_admit). */
		byo_disconnect(c, sc->id, "the machine was deleted through the API");
		char io[600];
		snprintf(io, sizeof io, "%s/io", p.dir);
		rmdir(io);
	} else if (core_ops(sc)->destroy(&dc, &de) < 0) {
		core_set_state(c, sc, COMPUTER_ERROR, de.message, NULL);
		if (e)
			*e = de;
		return -1;
	}
	rmdir(p.dir);
	return core_set_state(c, sc, COMPUTER_DELETED, NULL, e);
}

/*
 * A running computer whose processes are gone (QEMU or the container's init
 * killed from outside, or crashed): error with the reason, billing ended,
 * what is left cleaned up. Checked again under the op lock.
 */
static void core_do_dead(struct core *c, struct store_computer *sc)
{
	struct core_paths p;
	struct driver_computer dc;
	const struct driver_ops *ops = core_ops(sc);
	core_driver_computer(c, sc, &p, &dc);
	if (ops->alive(&dc))
		return;
	if (c->close_streams)
		c->close_streams(c->close_streams_ctx, sc->id);
	core_previews_down(c, sc->id);
	core_recordings_end(c, sc->id, false);
	/* Billing ends now; it is written with the error state below (a crash
	 * in between is finished by recovery, which ends it at the last tick). */
	int64_t end = clock_wall_ms();
	struct err ignore;
	ops->stop(&dc, &ignore);
	pthread_mutex_lock(&c->lock);
	struct core_rt *r = core_rt_find(c, sc->id);
	if (r)
		r->address[0] = r->vnc[0] = 0;
	pthread_mutex_unlock(&c->lock);
	char why[200];
	snprintf(why, sizeof why,
		 "its %s ended while it was running (killed from outside or crashed)",
		 ops->processes);
	fprintf(stderr, "cubicled: %s: %s\n", sc->id, why);
	core_set_state_billed(c, sc, COMPUTER_ERROR, why, NULL, end, NULL);
}

/* Queues core_do_dead for every running computer whose processes are gone.
 * One that is busy with an operation is looked at on a later tick. */
static void core_check_alive(struct core *c)
{
	struct core_rt *running[64];
	int n = 0;
	pthread_mutex_lock(&c->lock);
	for (struct core_rt *r = c->rts; r && n < 64; r = r->next)
		if (r->state == COMPUTER_RUNNING && !r->byo)
			running[n++] = r; /* records live until core_close */
	pthread_mutex_unlock(&c->lock);
	for (int i = 0; i < n; i++) {
		if (pthread_mutex_trylock(&running[i]->op) != 0)
			continue;
		struct store_computer sc = {0};
		bool dead = false;
		if (store_computer_get(c->store, running[i]->id, NULL, &sc, NULL) == 0 &&
		    sc.state == COMPUTER_RUNNING) {
			struct core_paths p;
			struct driver_computer dc;
			core_driver_computer(c, &sc, &p, &dc);
			dead = !core_ops(&sc)->alive(&dc);
		}
		store_computer_clear(&sc);
		pthread_mutex_unlock(&running[i]->op);
		if (dead)
			core_background(c, running[i]->id, JOB_DEAD);
	}
}

/* Loads a computer the caller may see, with its op lock taken. */
int core_lock_computer(struct core *c, const char *id, const char *ws, struct store_computer *sc,
		       struct core_rt **rt, struct err *e)
{
	if (store_computer_get(c->store, id, ws, sc, e) < 0)
		return -1;
	pthread_mutex_lock(&c->lock);
	struct core_rt *r = core_rt_find(c, id);
	pthread_mutex_unlock(&c->lock);
	if (!r) {
		store_computer_clear(sc);
		return err_set(e, ERR_NOT_FOUND, "no computer %s", id);
	}
	pthread_mutex_lock(&r->op);
	/* Reload under the lock: a concurrent operation may have moved it. */
	store_computer_clear(sc);
	if (store_computer_get(c->store, id, ws, sc, e) < 0) {
		pthread_mutex_unlock(&r->op);
		return -1;
	}
	*rt = r;
	return 0;
}

int core_limit(struct core *c, const char *ws)
{
	struct store_workspace w;
	if (store_workspace_get(c->store, ws, &w, NULL) == 0 && w.max_running > 0)
		return w.max_running;
	return c->cfg.default_max_running;
}

int core_stopped_limit(struct core *c, const char *ws)
{
	struct store_workspace w;
	if (store_workspace_get(c->store, ws, &w, NULL) == 0 && w.max_stopped > 0)
		return w.max_stopped;
	return c->cfg.default_max_stopped;
}

/*
 * Parses and checks a create's parameters into req (its sc->metadata owned:
 * store_computer_clear(&req->sc)): kind, size, isolation (a registered driver
 * that runs here), workspace (the key's, or the admin's choice; it must
 * exist), resolution, idle timeout, metadata, external id and session (its
 * directory made). Nothing is stored or started.
 */
static int core_create_parse(struct core *c, const char *ws, const json_t *params,
			     struct core_create_req *req, struct err *e)
{
	static const char *const known[] = {
	    "kind",	  "size",	    "isolation", "workspace",
	    "resolution", "idle_timeout_s", "metadata",	 "external_workspace_id",
	    "session",	  "template",	    "host",	 NULL};
	static const char *const kinds[] = {"desktop", "sandbox", NULL};
	if (params_check_known(params, known, e) < 0)
		return -1;
	memset(req, 0, sizeof *req);
	struct store_computer *sc = &req->sc;
	int kind = 0;
	int kind_given = param_enum(params, "kind", kinds, &kind, e);
	if (kind_given < 0)
		return -1;
	snprintf(sc->kind, sizeof sc->kind, "%s", kinds[kind]);
	/* A template decides the kind: its base. */
	const char *tname = NULL;
	bool tglobal = false;
	if (param_str(params, "template", &tname, e) < 0)
		return -1;
	if (tname) {
		const char *tws = ws ? ws : json_string_value(json_object_get(params, "workspace"));
		char base[16];
		if (core_template_resolve(c, tws ? tws : "", tname, sc->template_id, base, &tglobal,
					  e) < 0)
			return -1;
		if (kind_given && strcmp(base, sc->kind) != 0)
			return err_param(e, "kind", "kind: template %s is a %s, not a %s", tname,
					 base, sc->kind);
		snprintf(sc->kind, sizeof sc->kind, "%s", base);
	}
	const char *size = NULL;
	if (param_str(params, "size", &size, e) < 0)
		return -1;
	const struct size *sz = size_find(sc->kind, size, e);
	if (!sz)
		return -1;
	snprintf(sc->size, sizeof sc->size, "%s", sz->name);
	const char *isolation = NULL;
	if (param_str(params, "isolation", &isolation, e) < 0)
		return -1;
	req->ops = isolation ? driver_find(isolation) : driver_default();
	if (!req->ops) {
		char names[256];
		driver_names(", ", names, sizeof names);
		return err_param(e, "isolation", "isolation: '%.64s' is not one of: %s", isolation,
				 names);
	}
	if (driver_why(req->ops)[0])
		return err_param(e, "isolation",
				 "isolation: '%s' is not available on this host: %s",
				 req->ops->name, driver_why(req->ops));
	/* A microVM's network guard runs inside its own image (cubicle-init):
	 * a workspace's recipe could replace it, so a workspace's template
	 * boots as a container (whose guard is the host's). docs/templates.md. */
	if (tname && strcmp(req->ops->name, "container") != 0 &&
	    !(tglobal && strcmp(req->ops->name, "vm") == 0))
		return err_param(e, "isolation",
				 "isolation: template %s boots as a container only%s", tname,
				 tglobal ? ""
					 : " (a workspace's template never boots as a microVM: "
					   "its recipe could change the guest's own network "
					   "guard; the admin's global templates may)");
	snprintf(sc->isolation, sizeof sc->isolation, "%s", req->ops->name);
	const char *wsp = NULL;
	if (param_str(params, "workspace", &wsp, e) < 0)
		return -1;
	if (ws && wsp && strcmp(ws, wsp) != 0)
		return err_param(e, "workspace", "workspace: your key belongs to %s, not %s", ws,
				 wsp);
	if (!ws && !wsp)
		return err_param(e, "workspace", "workspace: required with the admin key");
	struct store_workspace w;
	if (store_workspace_get(c->store, ws ? ws : wsp, &w, NULL) < 0)
		return err_param(e, "workspace", "workspace: no workspace %s", ws ? ws : wsp);
	snprintf(sc->workspace, sizeof sc->workspace, "%s", w.id);
	sc->width = 1280;
	sc->height = 800;
	json_t *res = NULL;
	if (param_array(params, "resolution", &res, e) < 0)
		return -1;
	req->resolution_given = res != NULL;
	if (res) {
		json_t *rw = json_array_get(res, 0), *rh = json_array_get(res, 1);
		if (json_array_size(res) != 2 || !json_is_integer(rw) || !json_is_integer(rh) ||
		    json_integer_value(rw) < 320 || json_integer_value(rw) > 3840 ||
		    json_integer_value(rh) < 240 || json_integer_value(rh) > 2160)
			return err_param(e, "resolution",
					 "resolution: [width, height] within 320x240..3840x2160");
		sc->width = (int)json_integer_value(rw);
		sc->height = (int)json_integer_value(rh);
	}
	long long idle = c->cfg.default_idle_s;
	if (param_int(params, "idle_timeout_s", 10, 7 * 86400, &idle, e) < 0)
		return -1;
	sc->idle_timeout_s = (int)idle;
	json_t *meta = NULL;
	if (param_object(params, "metadata", &meta, e) < 0)
		return -1;
	sc->metadata = meta ? json_deep_copy(meta) : json_object();
	const char *ext = NULL, *session = NULL;
	if (param_str(params, "external_workspace_id", &ext, e) < 0 ||
	    param_str(params, "session", &session, e) < 0)
		goto fail;
	if (ext && strlen(ext) >= sizeof sc->external_workspace_id) {
		err_param(e, "external_workspace_id", "external_workspace_id: at most 127 bytes");
		goto fail;
	}
	snprintf(sc->external_workspace_id, sizeof sc->external_workspace_id, "%s", ext ? ext : "");
	if (session) {
		char dir[512];
		if (core_session_dir_for(c, sc->workspace, session, dir, sizeof dir, e) < 0)
			goto fail;
		snprintf(sc->session_id, sizeof sc->session_id, "%s", session);
	}
	const char *host = NULL;
	if (param_str(params, "host", &host, e) < 0)
		goto fail;
	if (host && ws) {
		err_param(e, "host", "host: choosing a host needs the admin key");
		goto fail;
	}
	if (host && (!c->cluster || ident_param("host", host, 63, false, e) < 0)) {
		if (!c->cluster)
			err_param(e, "host", "host: this cubicled is not in a cluster");
		goto fail;
	}
	snprintf(req->host, sizeof req->host, "%s", host ? host : "");
	return 0;
fail:
	store_computer_clear(sc);
	return -1;
}

int core_create(struct core *c, const char *ws, const json_t *params, json_t **out, struct err *e)
{
	struct core_create_req req;
	if (core_create_parse(c, ws, params, &req, e) < 0)
		return -1;
	struct store_computer sc = req.sc;
	/* The pool's desktops have the default isolation. */
	if (strcmp(sc.kind, "desktop") == 0 && req.ops == driver_default() && !sc.template_id[0] &&
	    !core_ws_egress(c, sc.workspace)) {
		int claimed = pool_claim(c, &req, out, e);
		if (claimed != 0) {
			store_computer_clear(&sc);
			return claimed < 0 ? -1 : 0;
		}
	}
	if (ident_random_hex(sc.envd_token, 24, e) < 0)
		goto fail;
	sc.state = COMPUTER_PROVISIONING;
	sc.driver_state = json_object();
	sc.last_activity_ms = clock_wall_ms();
	/* The workspace's limit is checked in the insert's transaction: two
	 * creates at once cannot both take the last place. In a cluster the
	 * same transaction places it (store_place: the host with the most free
	 * memory and room for it all), and the chosen host boots it: this one,
	 * another (told so), or a third when that one cannot. The warm pool's
	 * desktops are this host's own. */
	struct store_commit how = {.insert = true, .limit = core_limit(c, sc.workspace)};
	struct core_capacity need;
	core_capacity_of(sc.kind, sc.size, &need);
	bool pool = !ws && c->pool_ws[0] && strcmp(sc.workspace, c->pool_ws) == 0;
	struct store_place place = {.need = {need.millicpus, need.memory_mb, need.disk_mb},
				    .host = req.host[0] ? req.host
					    : pool	? c->host_id
							: NULL};
	if (c->cluster)
		how.place = &place;
	if (store_computer_commit(c->store, &sc, &how, e) < 0)
		goto fail;
	if (c->cluster) {
		int rc = core_cluster_launch(c, &sc, out, e);
		store_computer_clear(&sc);
		return rc;
	}
	if (!core_rt_add(c, &sc)) {
		err_set(e, ERR_INTERNAL, "out of memory");
		goto fail;
	}
	core_background(c, sc.id, JOB_BOOT);
	*out = core_json_public(&sc);
	store_computer_clear(&sc);
	return 0;
fail:
	store_computer_clear(&sc);
	return -1;
}

int core_get(struct core *c, const char *id, const char *ws, json_t **out, struct err *e)
{
	struct store_computer sc = {0};
	if (store_computer_get(c->store, id, ws, &sc, e) < 0)
		return -1;
	*out = core_json_public(&sc);
	store_computer_clear(&sc);
	return 0;
}

int core_list(struct core *c, const char *ws, const char *state, const char *kind, json_t **out,
	      struct err *e)
{
	struct store_filter f = {.workspace = ws, .state = state, .kind = kind};
	struct store_computer *all = NULL;
	size_t n = 0;
	if (store_computer_list(c->store, &f, &all, &n, e) < 0)
		return -1;
	json_t *arr = json_array();
	for (size_t i = 0; i < n; i++) {
		json_array_append_new(arr, core_json_public(&all[i]));
		store_computer_clear(&all[i]);
	}
	free(all);
	*out = json_pack("{s:o}", "computers", arr);
	return 0;
}

/* A lifecycle call for a computer another host of the cluster holds goes
 * there (its answer is ours); 1 when this host serves it. */
static int core_elsewhere(struct core *c, const char *id, const char *ws, const char *method,
			  const char *what, json_t **out, struct err *e)
{
	if (!c->cluster)
		return 1;
	char path[160];
	snprintf(path, sizeof path, "/v1/computers/%s%s", id, what);
	return core_cluster_json(c, id, ws, method, path, NULL, 200, out, e);
}

int core_boot_placed(struct core *c, const char *id, json_t **out, struct err *e)
{
	if (!c->cluster)
		return err_set(e, ERR_NOT_FOUND, "no such endpoint: this host is not in a cluster");
	return core_cluster_boot(c, id, out, e);
}

int core_stop(struct core *c, const char *id, const char *ws, json_t **out, struct err *e)
{
	struct store_computer sc = {0};
	struct core_rt *rt;
	int where = core_elsewhere(c, id, ws, "POST", "/stop", out, e);
	if (where <= 0)
		return where;
	if (core_lock_computer(c, id, ws, &sc, &rt, e) < 0)
		return -1;
	int rc = 0;
	if (core_is_byo(&sc))
		rc = err_set(e, ERR_CONFLICT,
			     "computer %s is a machine you brought: it is yours to power (DELETE "
			     "disconnects it)",
			     id);
	else if (sc.state == COMPUTER_RUNNING)
		rc = core_do_stop(c, &sc, e);
	else if (sc.state != COMPUTER_STOPPED)
		rc = err_set(e, ERR_CONFLICT, "computer %s is %s; only a running computer stops",
			     id, computer_state_name(sc.state));
	if (rc == 0)
		*out = core_json_public(&sc);
	pthread_mutex_unlock(&rt->op);
	store_computer_clear(&sc);
	return rc;
}

int core_start(struct core *c, const char *id, const char *ws, json_t **out, struct err *e)
{
	struct store_computer sc = {0};
	struct core_rt *rt;
	int where = core_elsewhere(c, id, ws, "POST", "/start", out, e);
	if (where <= 0)
		return where;
	if (core_lock_computer(c, id, ws, &sc, &rt, e) < 0)
		return -1;
	int rc = 0;
	if (core_is_byo(&sc)) {
		rc = err_set(e, ERR_CONFLICT,
			     "computer %s is a machine you brought: it is yours to power; it is "
			     "running whenever its envd is connected",
			     id);
	} else if (sc.state == COMPUTER_STOPPED) {
		/* In a cluster it starts where its disk is, if this host has
		 * room for its CPU and memory again (the store places it here). */
		struct core_capacity need;
		core_capacity_of(sc.kind, sc.size, &need);
		struct store_place here = {.need = {need.millicpus, need.memory_mb, 0},
					   .host = c->host_id};
		struct store_commit how = {.limit = core_limit(c, sc.workspace),
					   .place = c->cluster ? &here : NULL};
		char image[512];
		/* A container's template image must be there (it stays stopped
		 * if not); a microVM keeps its own links to it. */
		if (sc.template_id[0] && strcmp(sc.isolation, "vm") != 0)
			rc = core_template_image(c, sc.template_id, false, image, sizeof image, e);
		if (rc == 0)
			rc = core_commit(c, &sc, COMPUTER_STARTING, NULL, &how, e);
		if (rc == 0)
			rc = core_boot(c, &sc, false, e);
	} else if (sc.state != COMPUTER_RUNNING) {
		rc = err_set(e, ERR_CONFLICT, "computer %s is %s; only a stopped computer starts",
			     id, computer_state_name(sc.state));
	}
	if (rc == 0)
		*out = core_json_public(&sc);
	pthread_mutex_unlock(&rt->op);
	store_computer_clear(&sc);
	return rc;
}

/* A lost computer (nobody holds it): deleted in the database alone. */
static int core_delete_lost(struct core *c, const char *id, const char *ws, json_t **out,
			    struct err *e)
{
	struct store_computer sc = {0};
	if (store_computer_get(c->store, id, ws, &sc, e) < 0)
		return -1;
	int rc = 1;
	if (sc.state == COMPUTER_LOST) {
		sc.state = COMPUTER_DELETED;
		sc.deleted_ms = clock_wall_ms();
		rc = store_computer_commit(c->store, &sc, NULL, e);
		if (rc == 0)
			*out = core_json_public(&sc);
	}
	store_computer_clear(&sc);
	return rc;
}

int core_delete(struct core *c, const char *id, const char *ws, json_t **out, struct err *e)
{
	struct store_computer sc = {0};
	struct core_rt *rt;
	int where = core_elsewhere(c, id, ws, "DELETE", "", out, e);
	if (where <= 0)
		return where;
	if (c->cluster && (where = core_delete_lost(c, id, ws, out, e)) <= 0)
		return where;
	if (core_lock_computer(c, id, ws, &sc, &rt, e) < 0)
		return -1;
	int rc = 0;
	if (sc.state != COMPUTER_DELETED)
		rc = core_do_delete(c, &sc, e);
	if (rc == 0)
		*out = core_json_public(&sc);
	pthread_mutex_unlock(&rt->op);
	store_computer_clear(&sc);
	return rc;
}

/* Whether a wait for `state` is over in state `now` (error and deleted end
 * every wait). */
static bool core_wait_done(enum computer_state now, enum computer_state state)
{
	return now == state || now == COMPUTER_ERROR || now == COMPUTER_DELETED ||
	       now == COMPUTER_LOST;
}

int core_wait(struct core *c, const char *id, const char *ws, enum computer_state state,
	      int timeout_s, json_t **out, struct err *e)
{
	int64_t until = clock_now_ms() + (int64_t)timeout_s * 1000;
	struct store_computer sc = {0};
	if (store_computer_get(c->store, id, ws, &sc, e) < 0)
		return -1;
	enum computer_state stored = sc.state, now;
	store_computer_clear(&sc);
	/* A state change here wakes it at once; one on another host of a
	 * cluster is seen within a quarter of a second (core_wait_over). */
	while (!core_wait_over(c, id, state, stored, &now)) {
		int64_t left = until - clock_now_ms();
		if (left <= 0)
			return err_set(e, ERR_TIMEOUT, "computer %s is still %s after %d s", id,
				       computer_state_name(now), timeout_s);
		core_await_change(c, (int)(left < 250 ? left : 250));
	}
	return core_get(c, id, ws, out, e);
}

int core_wait_begin(struct core *c, const char *id, const char *ws, enum computer_state *stored,
		    struct err *e)
{
	struct store_computer sc = {0};
	if (store_computer_get(c->store, id, ws, &sc, e) < 0)
		return -1;
	*stored = sc.state;
	store_computer_clear(&sc);
	return 0;
}

bool core_wait_over(struct core *c, const char *id, enum computer_state state,
		    enum computer_state stored, enum computer_state *now)
{
	pthread_mutex_lock(&c->lock);
	struct core_rt *r = core_rt_find(c, id);
	*now = r ? r->state : stored;
	bool local = r && r->state != COMPUTER_LOST;
	pthread_mutex_unlock(&c->lock);
	/* Held by another host of a cluster: its state is in the database. */
	struct store_computer sc = {0};
	if (!local && c->cluster && store_computer_get(c->store, id, NULL, &sc, NULL) == 0) {
		*now = sc.state;
		store_computer_clear(&sc);
	}
	return core_wait_done(*now, state);
}

void core_await_change(struct core *c, int timeout_ms)
{
	struct timespec until = clock_deadline(CLOCK_REALTIME, timeout_ms);
	pthread_mutex_lock(&c->lock);
	pthread_cond_timedwait(&c->changed, &c->lock, &until);
	pthread_mutex_unlock(&c->lock);
}

int core_usage(struct core *c, const char *ws, int64_t from_ms, int64_t to_ms, json_t **out,
	       struct err *e)
{
	return store_usage_query(c->store, ws, from_ms, to_ms, &c->cfg.rates, out, e);
}

static int core_rm_one(const char *path, const struct stat *st, int flag, struct FTW *f)
{
	(void)st, (void)f;
	if (flag == FTW_DP)
		return rmdir(path) < 0 && errno != ENOENT ? -1 : 0;
	return unlink(path) < 0 && errno != ENOENT ? -1 : 0;
}

int core_workspace_delete(struct core *c, const char *ws, json_t **out, struct err *e)
{
	if (c->pool_ws[0] && strcmp(ws, c->pool_ws) == 0)
		return err_set(
		    e, ERR_CONFLICT,
		    "%s is the warm pool's workspace: stop cubicled's --warm-pool instead", ws);
	/* First gone (no create, no key from here on), then its computers. */
	if (store_workspace_delete(c->store, ws, e) < 0)
		return -1;
	struct store_filter f = {.workspace = ws};
	struct store_computer *all = NULL;
	size_t n = 0;
	if (store_computer_list(c->store, &f, &all, &n, e) < 0)
		return -1;
	json_t *ids = json_array();
	int rc = 0;
	for (size_t i = 0; i < n; i++) {
		json_t *one = NULL;
		struct err de = {0};
		if (core_delete(c, all[i].id, ws, &one, &de) == 0)
			json_array_append_new(ids, json_string(all[i].id));
		else if (rc == 0)
			rc = err_set(e, de.code,
				     "workspace %s is deleted, but computer %s is not: %s", ws,
				     all[i].id, de.message);
		json_decref(one);
		store_computer_clear(&all[i]);
	}
	free(all);
	if (rc < 0) {
		json_decref(ids);
		return -1;
	}
	core_templates_workspace_deleted(c, ws);
	/* Its session files go too (its computers, which mounted them, are
	 * gone): never following a symlink or crossing a mount. */
	char dir[600];
	struct stat st;
	core_recordings_forget_workspace(c, ws); /* their files are on the session disk */
	if (ident_ok(ws, 63))
		core_session_disk_remove(c, ws);
	if (ident_ok(ws, 63) &&
	    snprintf(dir, sizeof dir, "%s/%s", c->sessions_root, ws) < (int)sizeof dir &&
	    lstat(dir, &st) == 0 && S_ISDIR(st.st_mode) &&
	    nftw(dir, core_rm_one, 16, FTW_DEPTH | FTW_PHYS | FTW_MOUNT) < 0)
		fprintf(stderr, "cubicled: workspace %s deleted, but not all of %s: %s\n", ws, dir,
			strerror(errno));
	*out = json_pack("{s:s, s:b, s:o}", "id", ws, "deleted", 1, "computers", ids);
	return 0;
}

/* ---- the ticker: usage every second, idle timeouts ------------------------------ */

/* The ledger's tick. In a cluster only while this host's lease is surely
 * alive, and fenced in the database by its epoch: a tick that touches no
 * row means the host was reaped (or registered again elsewhere), and it
 * stops everything and registers anew. */
static void core_tick_ledger(struct core *c, int64_t now)
{
	if (!c->cluster) {
		store_usage_tick(c->store, now, NULL);
		return;
	}
	int64_t epoch = core_cluster_epoch(c);
	if (epoch && store_usage_tick(c->store, now, NULL) == 0)
		core_cluster_fence(c, epoch, "its ledger tick touched no row: it was reaped");
	core_cluster_refresh(c);
}

static void core_tick(struct core *c)
{
	int64_t now = clock_wall_ms();
	core_tick_ledger(c, now);
	struct {
		char id[40];
		int kind;
	} idle[32];
	int nidle = 0;
	/* Activity goes to the store after the lock is let go: the loop thread
	 * takes c->lock (a stream's open and close) and must never wait on SQLite.
	 * More than fit here stay dirty for the next tick. */
	struct {
		char id[40];
		int64_t at;
	} touch[64];
	int ntouch = 0;
	pthread_mutex_lock(&c->lock);
	for (struct core_rt *r = c->rts; r; r = r->next) {
		if (r->activity_dirty && ntouch < 64) {
			snprintf(touch[ntouch].id, sizeof touch[0].id, "%s", r->id);
			touch[ntouch++].at = r->last_activity_ms;
			r->activity_dirty = false;
		}
		if (r->viewers > 0)
			r->last_activity_ms = now; /* someone is watching: not idle */
		if (r->state == COMPUTER_RUNNING && r->idle_s > 0 &&
		    now - r->last_activity_ms > (int64_t)r->idle_s * 1000 && nidle < 32) {
			snprintf(idle[nidle].id, sizeof idle[0].id, "%s", r->id);
			/* Desktops keep their state; sandboxes are throwaway. */
			idle[nidle].kind = strcmp(r->kind, "desktop") == 0 ? JOB_STOP : JOB_DELETE;
			r->last_activity_ms = now; /* one attempt per timeout */
			nidle++;
		}
	}
	pthread_mutex_unlock(&c->lock);
	for (int i = 0; i < ntouch; i++)
		store_computer_touch(c->store, touch[i].id, touch[i].at, NULL);
	core_check_alive(c);
	core_recordings_sweep(c);
	pool_tick(c);
	for (int i = 0; i < nidle; i++) {
		fprintf(stderr, "cubicled: %s idle: %s\n", idle[i].id,
			idle[i].kind == JOB_STOP ? "stopping" : "deleting");
		core_background(c, idle[i].id, idle[i].kind);
	}
}

static void *core_ticker_main(void *arg)
{
	struct core *c = arg;
	for (;;) {
		struct pollfd p = {c->wake[0], POLLIN, 0};
		if (poll(&p, 1, 1000) > 0)
			break;
		core_tick(c);
	}
	return NULL;
}

/* ---- recovery ------------------------------------------------------------------- */

static void core_recover_one(struct core *c, struct store_computer *sc)
{
	struct core_paths p;
	struct driver_computer dc;
	core_driver_computer(c, sc, &p, &dc);
	const struct driver_ops *ops = core_ops(sc);
	struct core_rt *r = core_rt_add(c, sc);
	enum computer_state s = sc->state;
	if (core_is_byo(sc)) {
		/* A machine you bring is offline until its envd reconnects. */
		if (s == COMPUTER_DELETING)
			core_set_state(c, sc, COMPUTER_DELETED, NULL, NULL);
		else if (s == COMPUTER_RUNNING)
			core_set_state_billed(c, sc, COMPUTER_OFFLINE, NULL, NULL, clock_wall_ms(),
					      NULL);
		return;
	}
	switch (s) {
	case COMPUTER_DELETING:
		core_do_delete(c, sc, NULL);
		return;
	case COMPUTER_STOPPING: {
		struct err ignore;
		ops->stop(&dc, &ignore);
		core_set_state(c, sc, COMPUTER_STOPPED, NULL, NULL);
		return;
	}
	case COMPUTER_RUNNING:
	case COMPUTER_PROVISIONING:
	case COMPUTER_STARTING:
		break;
	case COMPUTER_STOPPED:
	case COMPUTER_DELETED:
	case COMPUTER_ERROR:
	case COMPUTER_OFFLINE: /* only machines you bring, handled above */
	case COMPUTER_LOST:    /* its host was declared dead: nothing of it runs here */
		return;	       /* nothing runs: nothing to adopt or clean up */
	}
	{
		char address[320];
		if (ops->alive(&dc) && ops->envd_address(&dc, address, sizeof address, NULL) == 0) {
			if (r) {
				pthread_mutex_lock(&c->lock);
				core_rt_addresses(ops, r, &dc, address);
				pthread_mutex_unlock(&c->lock);
			}
			if (s != COMPUTER_RUNNING) {
				/* It came up while we were down: bill from now on. */
				core_set_state_billed(c, sc, COMPUTER_RUNNING, NULL, "running",
						      clock_wall_ms(), NULL);
			}
			fprintf(stderr, "cubicled: adopted %s (running)\n", sc->id);
			return;
		}
		char why[200];
		snprintf(why, sizeof why,
			 "its processes were gone when cubicled restarted (it was %s)",
			 computer_state_name(s));
		struct err ignore;
		ops->stop(&dc, &ignore);
		core_set_state(c, sc, COMPUTER_ERROR, why, NULL);
		fprintf(stderr, "cubicled: %s: %s\n", sc->id, why);
	}
}

static int core_recover(struct core *c, struct err *e)
{
	struct store_open_segment *segs = NULL;
	size_t nsegs = 0;
	if (store_usage_open_segments(c->store, &segs, &nsegs, e) < 0)
		return -1;
	/* In a cluster, this host's own computers only (the others' belong to
	 * their hosts); lost ones hold nothing here to recover. */
	struct store_filter f = {.host = c->cluster ? c->host_id : NULL};
	struct store_computer *all = NULL;
	size_t n = 0;
	if (store_computer_list(c->store, &f, &all, &n, e) < 0) {
		free(segs);
		return -1;
	}
	for (size_t i = 0; i < n; i++)
		if (all[i].state != COMPUTER_LOST)
			core_recover_one(c, &all[i]);
	/* Open segments of computers that did not survive end at their last tick:
	 * at most one second after they really stopped counting. */
	for (size_t s = 0; s < nsegs; s++) {
		bool alive = false, ours = !c->cluster;
		for (size_t i = 0; i < n; i++)
			if (strcmp(all[i].id, segs[s].computer) == 0) {
				ours = true;
				alive = all[i].state == COMPUTER_RUNNING ||
					all[i].state == COMPUTER_STOPPED;
			}
		if (ours && !alive)
			store_usage_switch(c->store, segs[s].computer, "", "", NULL, segs[s].end_ms,
					   NULL);
	}
	free(segs);
	segs = NULL;
	nsegs = 0;
	/* Whatever came before (a clean stop, a crash, a segment closed too
	 * early), a computer running or stopped now is billed in that state:
	 * one without an open segment gets one from where its last segment
	 * ended (an adopted computer's processes are the same ones, by pid and
	 * start time, so it ran all along), or from now if it never had one. */
	if (store_usage_open_segments(c->store, &segs, &nsegs, e) < 0)
		nsegs = 0;
	for (size_t i = 0; i < n; i++) {
		if (all[i].state != COMPUTER_RUNNING && all[i].state != COMPUTER_STOPPED)
			continue;
		/* The billing rate is named like the state it bills. */
		const char *st = computer_state_name(all[i].state);
		bool open = false;
		for (size_t s = 0; s < nsegs && !open; s++)
			open = strcmp(segs[s].computer, all[i].id) == 0;
		int64_t from = 0;
		if (open || store_usage_last_end(c->store, all[i].id, &from, NULL) < 0)
			continue;
		if (from <= 0)
			from = clock_wall_ms();
		fprintf(stderr, "cubicled: %s: %s with no open usage segment: billed from %lld\n",
			all[i].id, st, (long long)from);
		store_usage_switch(c->store, all[i].id, all[i].workspace, all[i].size, st, from,
				   NULL);
	}
	for (size_t i = 0; i < n; i++)
		store_computer_clear(&all[i]);
	free(all);
	free(segs);
	/* The survivors ran (or stayed stopped) while we were down: count it. */
	return store_usage_tick(c->store, clock_wall_ms(), e);
}

/*
 * A cluster's host cleans what it holds no more: a directory under
 * computers/ whose computer is not this host's now (lost while cubicled was
 * down, re-created elsewhere since, or deleted) is stopped and destroyed,
 * with its driver state when the database still has it for this host.
 */
static void core_janitor(struct core *c)
{
	if (!c->cluster)
		return;
	char dir[600];
	snprintf(dir, sizeof dir, "%s/computers", c->cfg.state_dir);
	DIR *d = opendir(dir);
	if (!d)
		return;
	struct dirent *de;
	while ((de = readdir(d))) {
		if (de->d_name[0] == '.' || !ident_ok(de->d_name, 39))
			continue;
		pthread_mutex_lock(&c->lock);
		struct core_rt *r = core_rt_find(c, de->d_name);
		bool held = r && r->state != COMPUTER_DELETED && r->state != COMPUTER_LOST;
		pthread_mutex_unlock(&c->lock);
		if (held)
			continue;
		struct store_computer sc = {0};
		bool known = store_computer_get(c->store, de->d_name, NULL, &sc, NULL) == 0;
		if (!known) {
			memset(&sc, 0, sizeof sc);
			snprintf(sc.id, sizeof sc.id, "%.39s", de->d_name);
			snprintf(sc.kind, sizeof sc.kind, "sandbox");
			snprintf(sc.size, sizeof sc.size, "sm");
			snprintf(sc.isolation, sizeof sc.isolation, "%s", driver_default()->name);
		} else if (strcmp(sc.host, c->host_id) != 0) {
			/* Not ours in the database any more: its driver state is
			 * another host's; the driver finds what is left by id. */
			json_decref(sc.driver_state);
			sc.driver_state = json_object();
		}
		struct core_paths p;
		struct driver_computer dc;
		core_driver_computer(c, &sc, &p, &dc);
		struct err de2 = {0};
		if (!core_is_byo(&sc) && core_ops(&sc)->destroy(&dc, &de2) < 0)
			fprintf(stderr, "cubicled: %s: leftovers not removed: %s\n", sc.id,
				de2.message);
		else
			fprintf(stderr, "cubicled: %s: not this host's any more: removed\n", sc.id);
		rmdir(p.dir);
		store_computer_clear(&sc);
	}
	closedir(d);
}

/* A stream revocation kept in the store: back on the computer's record. */
static void core_revoked_load(void *ctx, const char *computer, int64_t revoked_ms)
{
	struct core *c = ctx;
	pthread_mutex_lock(&c->lock);
	struct core_rt *r = core_rt_find(c, computer);
	if (r && r->revoked_ms < revoked_ms)
		r->revoked_ms = revoked_ms;
	pthread_mutex_unlock(&c->lock);
}

struct core *core_open(const struct core_config *cfg, struct store *store, struct err *e)
{
	struct core *c = calloc(1, sizeof *c);
	if (!c) {
		err_set(e, ERR_INTERNAL, "out of memory");
		return NULL;
	}
	c->cfg = *cfg;
	if (c->cfg.ready_timeout_s <= 0)
		c->cfg.ready_timeout_s = 120;
	if (c->cfg.default_idle_s <= 0)
		c->cfg.default_idle_s = 600;
	if (c->cfg.default_max_running <= 0)
		c->cfg.default_max_running = 10;
	if (c->cfg.default_max_stopped <= 0)
		c->cfg.default_max_stopped = 20;
	if (!c->cfg.spool_max_workspace)
		c->cfg.spool_max_workspace = 4ull << 30;
	if (!c->cfg.spool_max)
		c->cfg.spool_max = 16ull << 30;
	if (!c->cfg.spool_min_free)
		c->cfg.spool_min_free = 1ull << 30;
	if (c->cfg.record_fps <= 0)
		c->cfg.record_fps = 10;
	if (c->cfg.record_max_s <= 0)
		c->cfg.record_max_s = 3600;
	if (!c->cfg.record_max_bytes)
		c->cfg.record_max_bytes = 1ull << 30;
	if (c->cfg.record_per_computer <= 0)
		c->cfg.record_per_computer = 1;
	if (c->cfg.record_per_host <= 0)
		c->cfg.record_per_host = 4;
	if (c->cfg.record_keep_days <= 0)
		c->cfg.record_keep_days = 30;
	if (!c->cfg.record_uid)
		c->cfg.record_uid = 65534;
	c->store = store;
	core_host_id_init(c);
	pthread_mutex_init(&c->lock, NULL);
	pthread_cond_init(&c->changed, NULL);
	char dir[600];
	snprintf(dir, sizeof dir, "%s/computers", cfg->state_dir);
	mkdir(dir, 0700);
	if (cfg->sessions_dir)
		snprintf(c->sessions_root, sizeof c->sessions_root, "%s", cfg->sessions_dir);
	else
		snprintf(c->sessions_root, sizeof c->sessions_root, "%s/sessions", cfg->state_dir);
	mkdir(c->sessions_root, 0711);
	drivers_probe();
	/* A cluster's host registers first: recovery needs its epoch, under
	 * which the database says what it holds (its previous epoch's
	 * computers adopted, unless reaped meanwhile). */
	if (core_cluster_open(c, e) < 0) {
		core_cluster_free(c);
		free(c);
		return NULL;
	}
	if (core_recordings_recover(c, e) < 0 || core_stats_open(c, e) < 0 ||
	    core_recover(c, e) < 0 || core_templates_open(c, &cfg->templates, e) < 0 ||
	    store_stream_revocations(store, clock_wall_ms(), core_revoked_load, c, e) < 0 ||
	    core_previews_load(c, e) < 0 || pool_open(c, e) < 0 || pipe2(c->wake, O_CLOEXEC) < 0 ||
	    pthread_create(&c->ticker, NULL, core_ticker_main, c) != 0) {
		if (!e || !e->message[0])
			err_set(e, ERR_INTERNAL, "cannot start the core");
		core_cluster_free(c);
		core_stats_close(c);
		free(c);
		return NULL;
	}
	core_janitor(c);
	struct err be = {0};
	if (byo_open(c, &be) < 0)
		fprintf(stderr, "cubicled: machines cannot connect: %s\n", be.message);
	return c;
}

int core_quiesce(struct core *c)
{
	if (c->quiesced)
		return c->quiesced > 0 ? 0 : -1;
	byo_close(c);
	if (write(c->wake[1], "x", 1) < 0) {
		/* the ticker also ends when the pipe closes */
	}
	pthread_join(c->ticker, NULL);
	core_recordings_close(c); /* their files finished, before anything else goes */
	/* Builds in flight stop (they are built again at the next start). */
	core_templates_close(c);
	core_cluster_close(c);
	/* Let boots and idle operations finish writing their state. */
	struct timespec until;
	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += 30;
	pthread_mutex_lock(&c->lock);
	while (c->background > 0)
		if (pthread_cond_timedwait(&c->changed, &c->lock, &until) == ETIMEDOUT)
			break;
	int left = c->background;
	pthread_mutex_unlock(&c->lock);
	c->quiesced = left > 0 ? -1 : 1;
	if (left > 0)
		return -1;
	pool_drain(c);
	return 0;
}

void core_close(struct core *c)
{
	if (!c)
		return;
	if (core_quiesce(c) < 0)
		return; /* operations still use c: the process is exiting anyway */
	core_session_disks_release(c);
	core_templates_free(c);
	core_cluster_free(c);
	close(c->wake[0]);
	close(c->wake[1]);
	while (c->rts) {
		struct core_rt *r = c->rts;
		c->rts = r->next;
		pthread_mutex_destroy(&r->op);
		free(r);
	}
	while (c->spools) {
		struct core_spool *s = c->spools;
		c->spools = s->next;
		free(s);
	}
	pthread_cond_destroy(&c->changed);
	pthread_mutex_destroy(&c->lock);
	core_stats_close(c);
	free(c);
}
