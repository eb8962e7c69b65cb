/*
 * metrics: what the core counts for /metrics, and its part of the text.
 *
 * Counted where it happens, without a lock (wire/metrics.h: relaxed
 * atomics): each action's round trip to envd by action and its errors by
 * code (proxy.c, the hot path: one bsearch over the generated names and
 * three atomic additions), boots, starts and stops by driver (core.c), the
 * warm pool's hits and misses (pool.c). Read at scrape time under the
 * locks that already exist: the computers by state, kind, size and
 * isolation, viewers and the pool's depth from the runtime records
 * (c->lock, memory only), the ledger's seconds per workspace from the store
 * (one GROUP BY, on the scrape's worker).
 *
 * Action names are the spec's (action-names.inc, generated); any other name
 * a tenant sends counts as "other", so no request can grow the label set.
 */
#include "core-internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "action-names.inc"

#define CORE_DRIVERS_MAX 8

static const char *const core_life_names[CORE_LIFE_N] = {"boot", "start", "stop"};
static const char *const core_pool_sizes[3] = {"small", "medium", "large"};

struct core_stats {
	struct metrics_hist action[CORE_ACTIONS + 1]; /* by name; the last: other */
	_Atomic uint64_t action_errors[CORE_ACTIONS + 1][ERR_CODE_NAMES];
	struct metrics_hist life[CORE_LIFE_N][CORE_DRIVERS_MAX];
	_Atomic uint64_t life_failed[CORE_LIFE_N][CORE_DRIVERS_MAX];
	_Atomic uint64_t pool[3][2]; /* size; [0] hits, [1] misses */
};

int core_stats_open(struct core *c, struct err *e)
{
	c->stats = calloc(1, sizeof *c->stats);
	if (!c->stats)
		return err_set(e, ERR_INTERNAL, "out of memory");
	for (int i = 0; i <= CORE_ACTIONS; i++)
		c->stats->action[i].b = &metrics_latency;
	for (int o = 0; o < CORE_LIFE_N; o++)
		for (int d = 0; d < CORE_DRIVERS_MAX; d++)
			c->stats->life[o][d].b = &metrics_lifecycle;
	return 0;
}

void core_stats_close(struct core *c)
{
	free(c->stats);
	c->stats = NULL;
}

static int core_names_cmp(const void *key, const void *elem)
{
	return strcmp(key, *(const char *const *)elem);
}

static int core_action_index(const char *action)
{
	const char *const *p = bsearch(action, core_action_names, CORE_ACTIONS,
				       sizeof core_action_names[0], core_names_cmp);
	return p ? (int)(p - core_action_names) : CORE_ACTIONS;
}

void core_stats_action(struct core *c, const char *action, int64_t us, const char *err_code)
{
	int i = core_action_index(action);
	metrics_observe(&c->stats->action[i], us);
	if (err_code)
		metrics_add(&c->stats->action_errors[i][err_code_index(err_code)], 1);
}

static int core_driver_index(const struct driver_ops *ops)
{
	for (int i = 0; i < CORE_DRIVERS_MAX; i++) {
		const struct driver_ops *d = driver_at((size_t)i);
		if (!d)
			break;
		if (d == ops)
			return i;
	}
	return -1;
}

void core_stats_life(struct core *c, enum core_life op, const struct driver_ops *ops, int64_t us,
		     bool ok)
{
	int d = core_driver_index(ops);
	if (d < 0)
		return;
	if (ok)
		metrics_observe(&c->stats->life[op][d], us);
	else
		metrics_add(&c->stats->life_failed[op][d], 1);
}

void core_stats_pool(struct core *c, const char *size, bool hit)
{
	for (int s = 0; s < 3; s++)
		if (strcmp(size, core_pool_sizes[s]) == 0)
			metrics_add(&c->stats->pool[s][hit ? 0 : 1], 1);
}

/* ---- the text ------------------------------------------------------------------- */

/* One combination of labels of cubicle_computers, and how many. */
struct core_group {
	enum computer_state state;
	char kind[16], size[16], isolation[16];
	int n;
};

static void core_usage_line(void *ctx, const char *ws, const char *rate_state, double seconds)
{
	char label[128];
	metrics_label(label, sizeof label, ws);
	fprintf(ctx, "cubicle_usage_seconds_total{workspace=\"%s\",state=\"%s\"} %.3f\n", label,
		rate_state, seconds);
}

char *core_metrics(struct core *c)
{
	char *out = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&out, &len);
	if (!f)
		return NULL;
	struct core_stats *st = c->stats;

	/* The runtime records, under c->lock (memory only). */
	size_t ngroups = 0, cap = 64;
	struct core_group *groups = calloc(cap, sizeof *groups);
	int viewers = 0, pool_ready[3] = {0}, pool_booting[3] = {0};
	pthread_mutex_lock(&c->lock);
	for (struct core_rt *r = c->rts; r && groups; r = r->next) {
		if (r->state == COMPUTER_DELETED)
			continue;
		viewers += r->viewers;
		if (c->pool_ws[0] && strcmp(r->ws, c->pool_ws) == 0)
			for (int s = 0; s < 3; s++)
				if (strcmp(r->size, core_pool_sizes[s]) == 0) {
					if (r->state == COMPUTER_RUNNING)
						pool_ready[s]++;
					else if (r->state == COMPUTER_PROVISIONING)
						pool_booting[s]++;
				}
		size_t g = 0;
		while (g < ngroups &&
		       !(groups[g].state == r->state && strcmp(groups[g].kind, r->kind) == 0 &&
			 strcmp(groups[g].size, r->size) == 0 &&
			 strcmp(groups[g].isolation, r->isolation) == 0))
			g++;
		if (g == ngroups) {
			if (ngroups == cap) {
				struct core_group *more = realloc(groups, 2 * cap * sizeof *groups);
				if (!more)
					break;
				groups = more;
				cap *= 2;
			}
			memset(&groups[g], 0, sizeof groups[g]);
			groups[g].state = r->state;
			snprintf(groups[g].kind, sizeof groups[g].kind, "%s", r->kind);
			snprintf(groups[g].size, sizeof groups[g].size, "%s", r->size);
			snprintf(groups[g].isolation, sizeof groups[g].isolation, "%s",
				 r->isolation);
			ngroups++;
		}
		groups[g].n++;
	}
	pthread_mutex_unlock(&c->lock);

	metrics_head(f, "cubicle_computers", "gauge",
		     "Computers by state, kind, size and isolation (deleted ones not counted).");
	/* Every state, so that a dashboard's "running" is 0 rather than absent. */
	for (int s = 0; s < COMPUTER_STATES; s++) {
		if (s == COMPUTER_DELETED)
			continue;
		bool any = false;
		for (size_t g = 0; g < ngroups; g++) {
			if ((int)groups[g].state != s)
				continue;
			any = true;
			fprintf(f,
				"cubicle_computers{state=\"%s\",kind=\"%s\",size=\"%s\","
				"isolation=\"%s\"} %d\n",
				computer_state_name(groups[g].state), groups[g].kind,
				groups[g].size, groups[g].isolation, groups[g].n);
		}
		if (!any)
			fprintf(f, "cubicle_computers{state=\"%s\"} 0\n",
				computer_state_name((enum computer_state)s));
	}
	free(groups);

	metrics_head(f, "cubicle_stream_viewers", "gauge",
		     "Live streams (viewers) open now, all computers.");
	fprintf(f, "cubicle_stream_viewers %d\n", viewers);

	/* Actions. */
	uint64_t total = 0;
	for (int i = 0; i <= CORE_ACTIONS; i++)
		total += metrics_count(&st->action[i]);
	metrics_head(f, "cubicle_actions_total", "counter",
		     "Actions proxied to computers (REST, MCP, computer-use).");
	fprintf(f, "cubicle_actions_total %llu\n", (unsigned long long)total);
	metrics_head(f, "cubicle_action_duration_seconds", "histogram",
		     "An action's round trip from cubicled to the computer's envd and back.");
	for (int i = 0; i <= CORE_ACTIONS; i++) {
		if (metrics_count(&st->action[i]) == 0)
			continue;
		char labels[96];
		snprintf(labels, sizeof labels, "action=\"%s\"",
			 i < CORE_ACTIONS ? core_action_names[i] : "other");
		metrics_write_hist(f, "cubicle_action_duration_seconds", labels, &st->action[i]);
	}
	metrics_head(f, "cubicle_action_errors_total", "counter",
		     "Actions that failed, by action and error code (envd's answer, or the "
		     "transport's).");
	for (int i = 0; i <= CORE_ACTIONS; i++)
		for (int k = 0; k < ERR_CODE_NAMES; k++) {
			uint64_t n = metrics_get(&st->action_errors[i][k]);
			if (n)
				fprintf(
				    f,
				    "cubicle_action_errors_total{action=\"%s\",code=\"%s\"} %llu\n",
				    i < CORE_ACTIONS ? core_action_names[i] : "other",
				    err_code_at(k), (unsigned long long)n);
		}

	/* Lifecycle, per driver. */
	metrics_head(f, "cubicle_lifecycle_duration_seconds", "histogram",
		     "Boots (create to running), starts (stopped to running) and stops that "
		     "succeeded, by driver.");
	for (int o = 0; o < CORE_LIFE_N; o++)
		for (int d = 0; d < CORE_DRIVERS_MAX && driver_at((size_t)d); d++) {
			char labels[96];
			snprintf(labels, sizeof labels, "op=\"%s\",driver=\"%s\"",
				 core_life_names[o], driver_at((size_t)d)->name);
			metrics_write_hist(f, "cubicle_lifecycle_duration_seconds", labels,
					   &st->life[o][d]);
		}
	metrics_head(f, "cubicle_lifecycle_failures_total", "counter",
		     "Boots, starts and stops that failed (the computer went to error), by "
		     "driver.");
	for (int o = 0; o < CORE_LIFE_N; o++)
		for (int d = 0; d < CORE_DRIVERS_MAX && driver_at((size_t)d); d++)
			fprintf(f,
				"cubicle_lifecycle_failures_total{op=\"%s\",driver=\"%s\"} %llu\n",
				core_life_names[o], driver_at((size_t)d)->name,
				(unsigned long long)metrics_get(&st->life_failed[o][d]));

	/* The warm pool. */
	metrics_head(f, "cubicle_warm_pool_desktops", "gauge",
		     "The warm pool's desktops: ready (running, unclaimed) or booting.");
	for (int s = 0; s < 3; s++) {
		fprintf(f, "cubicle_warm_pool_desktops{size=\"%s\",state=\"ready\"} %d\n",
			core_pool_sizes[s], pool_ready[s]);
		fprintf(f, "cubicle_warm_pool_desktops{size=\"%s\",state=\"booting\"} %d\n",
			core_pool_sizes[s], pool_booting[s]);
	}
	metrics_head(f, "cubicle_warm_pool_claims_total", "counter",
		     "Creates the warm pool could serve: served from it (hit) or booted (miss).");
	for (int s = 0; s < 3; s++)
		for (int h = 0; h < 2; h++)
			fprintf(f,
				"cubicle_warm_pool_claims_total{size=\"%s\",result=\"%s\"} %llu\n",
				core_pool_sizes[s], h == 0 ? "hit" : "miss",
				(unsigned long long)metrics_get(&st->pool[s][h]));

	/* The ledger. */
	metrics_head(f, "cubicle_usage_seconds_total", "counter",
		     "The usage ledger's seconds per workspace and rate state, all time.");
	struct err e = {0};
	if (store_usage_totals(c->store, core_usage_line, f, &e) < 0)
		fprintf(stderr, "cubicled: /metrics: %s\n", e.message);
	fclose(f);
	return out;
}
