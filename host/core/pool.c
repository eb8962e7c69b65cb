/*
 * pool: the warm pool. A few desktops per size are kept started in a
 * workspace of their own, so a create that matches (a desktop of that size
 * at the default resolution, without a session, which must be mounted at
 * boot) gets a running computer at once: the claim moves it to the
 * caller's workspace and re-opens its usage there from that instant. The
 * pool's own running time is billed to the pool workspace: the operator's
 * cost, visible in /v1/usage like any other.
 *
 * The pool's unclaimed desktops are cubicled's own and hold nothing of a
 * user's, so a clean shutdown deletes them (the next start makes new ones);
 * after a crash they are adopted like every other computer.
 */
#include "core-internal.h"

#include <stdio.h>
#include <string.h>

#include "sizes.h"
#include "clock.h"

#define POOL_WORKSPACE "cubicle-warm-pool"

int pool_open(struct core *c, struct err *e)
{
	c->pool_ws[0] = 0;
	if (c->cfg.warm_small + c->cfg.warm_medium + c->cfg.warm_large == 0)
		return 0;
	json_t *all = NULL;
	if (store_workspace_list(c->store, &all, e) < 0)
		return -1;
	size_t i;
	json_t *w;
	json_array_foreach(all, i, w)
	{
		if (strcmp(json_string_value(json_object_get(w, "name")), POOL_WORKSPACE) == 0)
			snprintf(c->pool_ws, sizeof c->pool_ws, "%s",
				 json_string_value(json_object_get(w, "id")));
	}
	json_decref(all);
	if (c->pool_ws[0])
		return 0;
	struct store_workspace ws;
	if (store_workspace_create(c->store, POOL_WORKSPACE, 1000, &ws, e) < 0)
		return -1;
	snprintf(c->pool_ws, sizeof c->pool_ws, "%s", ws.id);
	return 0;
}

static int pool_want(const struct core *c, const char *size)
{
	if (strcmp(size, "small") == 0)
		return c->cfg.warm_small;
	if (strcmp(size, "medium") == 0)
		return c->cfg.warm_medium;
	if (strcmp(size, "large") == 0)
		return c->cfg.warm_large;
	return 0;
}

/* Starts one more pool desktop of each size that is short. One that failed
 * (error) is the pool's own: it is deleted (in a cluster it would hold its
 * disk's reservation), and the pool waits POOL_RETRY_MS before the next. */
#define POOL_RETRY_MS 30000
void pool_tick(struct core *c)
{
	if (!c->pool_ws[0])
		return;
	char failed[1][40];
	if (core_rt_select(c, c->pool_ws, NULL, COMPUTER_STATE_BIT(COMPUTER_ERROR), failed, 1) >
	    0) {
		json_t *out = NULL;
		struct err e = {0};
		if (core_delete(c, failed[0], c->pool_ws, &out, &e) < 0)
			fprintf(stderr, "cubicled: warm pool: cannot delete %s: %s\n", failed[0],
				e.message);
		json_decref(out);
		c->pool_retry_ms = clock_wall_ms() + POOL_RETRY_MS;
	}
	if (clock_wall_ms() < c->pool_retry_ms)
		return;
	static const char *const sizes[] = {"small", "medium", "large"};
	for (int s = 0; s < 3; s++) {
		int want = pool_want(c, sizes[s]);
		if (want == 0)
			continue;
		unsigned live = COMPUTER_STATE_BIT(COMPUTER_PROVISIONING) |
				COMPUTER_STATE_BIT(COMPUTER_RUNNING);
		if (core_rt_select(c, c->pool_ws, sizes[s], live, NULL, 0) >= want)
			continue;
		json_t *params =
		    json_pack("{s:s, s:s, s:s, s:i}", "kind", "desktop", "size", sizes[s],
			      "workspace", c->pool_ws, "idle_timeout_s", 7 * 86400);
		json_t *out = NULL;
		struct err e = {0};
		if (core_create(c, NULL, params, &out, &e) < 0)
			fprintf(stderr, "cubicled: warm pool: cannot start a %s desktop: %s\n",
				sizes[s], e.message);
		json_decref(out);
		json_decref(params);
	}
}

static int pool_claim_one(struct core *c, const struct core_create_req *req, json_t **out,
			  struct err *e);

int pool_claim(struct core *c, const struct core_create_req *req, json_t **out, struct err *e)
{
	const char *ws = req->sc.workspace;
	if (!c->pool_ws[0] || strcmp(ws, c->pool_ws) == 0 || req->sc.session_id[0] ||
	    req->resolution_given || pool_want(c, req->sc.size) == 0)
		return 0;
	int rc = pool_claim_one(c, req, out, e);
	core_stats_pool(c, req->sc.size, rc > 0);
	return rc;
}

/* pool_claim for a create the pool could serve. */
static int pool_claim_one(struct core *c, const struct core_create_req *req, json_t **out,
			  struct err *e)
{
	unsigned running = COMPUTER_STATE_BIT(COMPUTER_RUNNING);
	const char *ws = req->sc.workspace;
	for (int attempt = 0; attempt < 4; attempt++) {
		char ids[1][40];
		if (core_rt_select(c, c->pool_ws, req->sc.size, running, ids, 1) == 0)
			return 0;
		const char *id = ids[0];
		struct store_computer sc = {0};
		if (store_computer_get(c->store, id, NULL, &sc, NULL) < 0)
			continue;
		pthread_mutex_lock(&c->lock);
		struct core_rt *r = core_rt_find(c, id);
		pthread_mutex_unlock(&c->lock);
		if (!r || pthread_mutex_trylock(&r->op) != 0) {
			store_computer_clear(&sc);
			continue; /* someone else is claiming it */
		}
		store_computer_clear(&sc);
		if (store_computer_get(c->store, id, NULL, &sc, NULL) < 0 ||
		    strcmp(sc.workspace, c->pool_ws) != 0 || sc.state != COMPUTER_RUNNING) {
			pthread_mutex_unlock(&r->op);
			store_computer_clear(&sc);
			continue;
		}
		int64_t now = clock_wall_ms();
		snprintf(sc.workspace, sizeof sc.workspace, "%s", ws);
		json_decref(sc.metadata);
		sc.metadata = json_deep_copy(req->sc.metadata);
		snprintf(sc.external_workspace_id, sizeof sc.external_workspace_id, "%s",
			 req->sc.external_workspace_id);
		sc.idle_timeout_s = req->sc.idle_timeout_s;
		sc.last_activity_ms = now;
		/* The move and the bill's switch to the workspace are one
		 * transaction, with the workspace's limit checked in it. */
		struct store_commit how = {.limit = core_limit(c, ws),
					   .bill = true,
					   .rate_state = "running",
					   .at_ms = now};
		int rc = store_computer_commit(c->store, &sc, &how, e);
		if (rc == 0) {
			pthread_mutex_lock(&c->lock);
			snprintf(r->ws, sizeof r->ws, "%s", ws);
			r->idle_s = sc.idle_timeout_s;
			r->last_activity_ms = now;
			pthread_mutex_unlock(&c->lock);
			*out = core_json_public(&sc);
		}
		pthread_mutex_unlock(&r->op);
		store_computer_clear(&sc);
		return rc < 0 ? -1 : 1;
	}
	return 0;
}

/* Deletes the pool's unclaimed desktops (at a clean shutdown, once no boot
 * is running any more). */
void pool_drain(struct core *c)
{
	if (!c->pool_ws[0])
		return;
	for (;;) {
		unsigned undeleted =
		    ((1u << COMPUTER_STATES) - 1) & ~COMPUTER_STATE_BIT(COMPUTER_DELETED);
		char ids[1][40];
		if (core_rt_select(c, c->pool_ws, NULL, undeleted, ids, 1) == 0)
			return;
		const char *id = ids[0];
		json_t *out = NULL;
		struct err e = {0};
		if (core_delete(c, id, c->pool_ws, &out, &e) < 0) {
			fprintf(stderr, "cubicled: warm pool: cannot delete %s: %s\n", id,
				e.message);
			return;
		}
		json_decref(out);
	}
}
