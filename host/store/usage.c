/*
 * store usage: the per-second ledger.
 *
 * A segment is one computer in one billable state ("running" or
 * "stopped") at one size, from start_ms to end_ms. The open segment of a
 * computer (at most one: a partial unique index) is extended by the
 * once-a-second tick, a single UPDATE of all open rows, so a cubicled
 * killed at any moment has every second up to its last tick on disk and
 * nothing after it. A state change closes the open segment and opens the
 * next in one transaction, at the same instant, so no millisecond is
 * billed twice or dropped.
 *
 * Cost is integer nano-dollars computed in C per segment (clipped to the
 * query's window): running ms * unit * multiplier / 1000, stopped
 * ms * stopped_rate / 1000, each rounded down (floor) per segment, then
 * summed. A segment spans a whole stay in one state, so flooring loses
 * less than one nano-dollar per state change. Products that would
 * overflow 64 bits are an error, never a wrapped number.
 */
#include "store-internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define STORE_UNIT_NANODOLLARS_DEFAULT 15000 /* 0.000015 USD per second for xs */

static const char SQL_CLOSE[] =
    "UPDATE usage_segments SET end_ms = GREATEST(start_ms, ?2), open = 0"
    " WHERE computer = ?1 AND open = 1 RETURNING end_ms";
static const char SQL_OPEN[] =
    "INSERT INTO usage_segments (computer, workspace, size, rate_state, start_ms, end_ms, open)"
    " VALUES (?1, ?2, ?3, ?4, ?5, ?5, 1)";
static const char SQL_TICK[] =
    "UPDATE usage_segments SET end_ms = ?1 WHERE open = 1 AND end_ms < ?1";
/* A registered host's tick: its own row first (which it holds till the
 * commit, so a reaper waits for it or it waits for the reaper), then only
 * the open segments of the computers it holds under its epoch. */
static const char SQL_TICK_HOST[] =
    "UPDATE hosts SET seen_ms = GREATEST(seen_ms, ?3) WHERE id = ?1 AND epoch = ?2";
static const char SQL_TICK_SEGMENTS[] =
    "UPDATE usage_segments SET end_ms = ?3 WHERE open = 1 AND end_ms < ?3"
    " AND computer IN (SELECT id FROM computers WHERE host = ?1 AND epoch = ?2)";
static const char SQL_OPEN_SEGMENTS[] = "SELECT computer, start_ms, end_ms, rate_state"
					" FROM usage_segments WHERE open = 1"
					" ORDER BY start_ms, id";
/* Segments overlapping [?2, ?3), clipped to it, grouped by computer
 * (oldest computer first). The LEFT JOIN keeps segments whose computer row
 * is gone, should one ever be removed; deleted computers keep their row. */
static const char SQL_QUERY[] =
    "SELECT u.computer, u.workspace, u.size, u.rate_state,"
    " GREATEST(u.start_ms, ?2), LEAST(u.end_ms, ?3), c.kind, c.size, c.external_workspace_id"
    " FROM usage_segments u LEFT JOIN computers c ON c.id = u.computer"
    " WHERE (?1 IS NULL OR u.workspace = ?1) AND u.start_ms < ?3 AND u.end_ms > ?2"
    " ORDER BY COALESCE(c.created_ms, 0), c.rowid, u.computer, u.start_ms, u.id";

int store_size_multiplier(const char *size)
{
	static const struct {
		const char *name;
		int multiplier;
	} sizes[] = {
	    {"xs", 1},	{"sm", 2},    {"md", 4},     {"lg", 8},
	    {"xl", 16}, {"small", 4}, {"medium", 8}, {"large", 16},
	};
	if (!size)
		return 0;
	for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
		if (strcmp(size, sizes[i].name) == 0)
			return sizes[i].multiplier;
	return 0;
}

int store_usage_check(const char *computer, const char *workspace, const char *size,
		      const char *rate_state, int64_t at_ms, struct err *e)
{
	if (!computer || !*computer)
		return err_param(e, "computer", "computer: the computer id is empty");
	if (at_ms < 0)
		return err_param(e, "at_ms", "at_ms: %lld is before 1970", (long long)at_ms);
	if (rate_state) {
		if (strcmp(rate_state, "running") != 0 && strcmp(rate_state, "stopped") != 0)
			return err_param(e, "rate_state",
					 "rate_state: '%.32s' is not running or stopped (or none)",
					 rate_state);
		if (!workspace || !*workspace)
			return err_param(e, "workspace", "workspace: empty for computer %.64s",
					 computer);
		/* "byo": a machine you bring, its connected seconds at no cost. */
		if (store_size_multiplier(size) == 0 && !(size && strcmp(size, "byo") == 0))
			return err_param(e, "size",
					 "size: '%.32s' is not one of xs, sm, md, lg, xl, small, "
					 "medium, large",
					 size ? size : "(null)");
	}
	return 0;
}

int store_usage_switch_locked(struct store *s, const char *computer, const char *workspace,
			      const char *size, const char *rate_state, int64_t at_ms,
			      struct err *e)
{
	struct store_stmt *st = store_stmt(s, SQL_CLOSE, e);
	if (!st)
		return -1;
	store_bind_text(st, 1, computer);
	store_bind_int64(st, 2, at_ms);
	/* The next segment starts where this one ended, even if the clock
	 * went back, so segments never overlap. */
	int64_t start = at_ms;
	int step;
	while ((step = store_step(st)) == STORE_ROW)
		if (store_col_int64(st, 0) > start)
			start = store_col_int64(st, 0);
	store_stmt_done(st);
	if (step != STORE_DONE)
		return store_db_error(s, "closing a usage segment", e);
	if (!rate_state)
		return 0;
	if (!(st = store_stmt(s, SQL_OPEN, e)))
		return -1;
	store_bind_text(st, 1, computer);
	store_bind_text(st, 2, workspace);
	store_bind_text(st, 3, size);
	store_bind_text(st, 4, rate_state);
	store_bind_int64(st, 5, start);
	step = store_step(st);
	store_stmt_done(st);
	if (step == STORE_ERR_FOREIGN)
		return err_param(e, "computer", "computer: no computer %.64s", computer);
	if (step != STORE_DONE)
		return store_db_error(s, "opening a usage segment", e);
	return 0;
}

int store_usage_switch(struct store *s, const char *computer, const char *workspace,
		       const char *size, const char *rate_state, int64_t at_ms, struct err *e)
{
	if (store_usage_check(computer, workspace, size, rate_state, at_ms, e))
		return -1;
	int rc = -1;
	store_lock(s);
	if (store_begin(s, e) == 0) {
		if (store_fence_locked(s, e) ||
		    store_usage_switch_locked(s, computer, workspace, size, rate_state, at_ms, e) ||
		    store_commit_tx(s, e))
			store_rollback(s);
		else
			rc = 0;
	}
	store_unlock(s);
	return rc;
}

/* One statement of the tick (lock held): rows changed, or -1. */
static int64_t store_tick_step(struct store *s, const char *sql, int64_t now_ms, struct err *e)
{
	struct store_stmt *st = store_stmt(s, sql, e);
	if (!st)
		return -1;
	if (s->host[0]) {
		store_bind_text(st, 1, s->host);
		store_bind_int64(st, 2, s->epoch);
		store_bind_int64(st, 3, now_ms);
	} else {
		store_bind_int64(st, 1, now_ms);
	}
	int64_t n = store_step(st) == STORE_DONE ? store_changes(st) : -1;
	store_stmt_done(st);
	if (n < 0)
		store_db_error(s, "recording a usage tick", e);
	return n;
}

int store_usage_tick(struct store *s, int64_t now_ms, struct err *e)
{
	int64_t n = -1;
	store_lock(s);
	if (!s->host[0]) {
		n = store_tick_step(s, SQL_TICK, now_ms, e);
	} else if (store_begin(s, e) == 0) {
		int64_t host = store_tick_step(s, SQL_TICK_HOST, now_ms, e);
		int64_t segs = host > 0 ? store_tick_step(s, SQL_TICK_SEGMENTS, now_ms, e) : 0;
		if (host < 0 || segs < 0 || store_commit_tx(s, e) < 0)
			store_rollback(s);
		else
			n = host + segs;
	}
	/* The keys' last uses ride along (a few rows a minute at most). */
	store_keys_flush_used_locked(s);
	store_unlock(s);
	return n < 0 ? -1 : n > INT32_MAX ? INT32_MAX : (int)n;
}

static const char SQL_TOTALS[] = "SELECT workspace, rate_state, SUM(end_ms - start_ms)"
				 " FROM usage_segments GROUP BY workspace, rate_state"
				 " ORDER BY workspace, rate_state";

int store_usage_totals(struct store *s,
		       void (*fn)(void *ctx, const char *ws, const char *rate_state,
				  double seconds),
		       void *ctx, struct err *e)
{
	int rc = -1;
	store_lock(s);
	struct store_stmt *st = store_stmt(s, SQL_TOTALS, e);
	if (st) {
		int step;
		while ((step = store_step(st)) == STORE_ROW) {
			char ws[64], state[16];
			store_col_text(st, 0, ws, sizeof ws);
			store_col_text(st, 1, state, sizeof state);
			fn(ctx, ws, state, (double)store_col_int64(st, 2) / 1e3);
		}
		if (step == STORE_DONE)
			rc = 0;
		else
			store_db_error(s, "summing the usage ledger", e);
	}
	store_stmt_done(st);
	store_unlock(s);
	return rc;
}

static const char SQL_LAST_END[] = "SELECT MAX(end_ms) FROM usage_segments WHERE computer = ?1";

int store_usage_last_end(struct store *s, const char *computer, int64_t *end_ms, struct err *e)
{
	*end_ms = 0;
	int rc = -1;
	store_lock(s);
	struct store_stmt *st = store_stmt(s, SQL_LAST_END, e);
	if (st) {
		store_bind_text(st, 1, computer);
		if (store_step(st) == STORE_ROW) {
			*end_ms = store_col_int64(st, 0); /* NULL reads as 0 */
			rc = 0;
		} else {
			store_db_error(s, "reading a computer's last usage", e);
		}
	}
	store_stmt_done(st);
	store_unlock(s);
	return rc;
}

int store_usage_open_segments(struct store *s, struct store_open_segment **out, size_t *n,
			      struct err *e)
{
	struct store_open_segment *list = NULL;
	size_t count = 0, cap = 0;
	int rc = -1;
	store_lock(s);
	struct store_stmt *st = store_stmt(s, SQL_OPEN_SEGMENTS, e);
	if (st) {
		int step = STORE_DONE;
		rc = 0;
		while ((step = store_step(st)) == STORE_ROW) {
			if (count == cap) {
				size_t ncap = cap ? 2 * cap : 16;
				struct store_open_segment *grown =
				    realloc(list, ncap * sizeof *list);
				if (!grown) {
					rc = err_set(e, ERR_INTERNAL,
						     "out of memory listing usage segments");
					break;
				}
				list = grown;
				cap = ncap;
			}
			struct store_open_segment *seg = &list[count++];
			memset(seg, 0, sizeof *seg);
			store_col_text(st, 0, seg->computer, sizeof seg->computer);
			seg->start_ms = store_col_int64(st, 1);
			seg->end_ms = store_col_int64(st, 2);
			store_col_text(st, 3, seg->rate_state, sizeof seg->rate_state);
		}
		if (rc == 0 && step != STORE_DONE)
			rc = store_db_error(s, "listing open usage segments", e);
	}
	store_stmt_done(st);
	store_unlock(s);
	if (rc != 0) {
		free(list);
		return -1;
	}
	*out = list;
	*n = count;
	return 0;
}

/* One computer's sums while store_usage_query walks its segments. */
struct store_usage_acc {
	char id[40], workspace[40], kind[16], size[16], external[128];
	int64_t running_ms, stopped_ms, cost;
};

static json_t *store_usage_acc_json(const struct store_usage_acc *a)
{
	return json_pack("{s:s, s:s, s:s, s:s, s:s, s:f, s:f, s:I}", "id", a->id, "workspace",
			 a->workspace, "external_workspace_id", a->external, "kind", a->kind,
			 "size", a->size, "running_seconds", (double)a->running_ms / 1000.0,
			 "stopped_seconds", (double)a->stopped_ms / 1000.0, "cost_nanodollars",
			 (json_int_t)a->cost);
}

/* a += b, or -1 on overflow. */
static int store_add(int64_t *a, int64_t b)
{
	return __builtin_add_overflow(*a, b, a) ? -1 : 0;
}

/* The floor cost of one clipped segment, or -1 on overflow. */
static int store_segment_cost(const char *rate_state, const char *size, int64_t ms,
			      const struct store_rates *r, int64_t *cost)
{
	int64_t rate = r->stopped_nanodollars_per_s; /* stopped: any size */
	if (strcmp(rate_state, "running") == 0 &&
	    __builtin_mul_overflow(r->unit_nanodollars_per_s, (int64_t)store_size_multiplier(size),
				   &rate))
		return -1;
	int64_t product;
	if (__builtin_mul_overflow(ms, rate, &product))
		return -1;
	*cost = product / 1000;
	return 0;
}

int store_usage_query(struct store *s, const char *workspace, int64_t from_ms, int64_t to_ms,
		      const struct store_rates *rates, json_t **out, struct err *e)
{
	static const struct store_rates defaults = {STORE_UNIT_NANODOLLARS_DEFAULT, 0};
	const struct store_rates *r = rates ? rates : &defaults;
	if (from_ms > to_ms)
		return err_param(e, "from", "from: %lld is after to (%lld)", (long long)from_ms,
				 (long long)to_ms);
	if (r->unit_nanodollars_per_s < 0 || r->stopped_nanodollars_per_s < 0)
		return err_param(e, "rates", "rates: negative rates are not allowed");

	json_t *computers = json_array();
	if (!computers)
		return err_set(e, ERR_INTERNAL, "out of memory computing usage");
	struct store_usage_acc acc = {0}, total = {0};
	bool have = false;
	int rc = -1;
	store_lock(s);
	struct store_stmt *st = store_stmt(s, SQL_QUERY, e);
	if (st) {
		store_bind_text(st, 1, workspace);
		store_bind_int64(st, 2, from_ms);
		store_bind_int64(st, 3, to_ms);
		int step = STORE_DONE;
		rc = 0;
		while (rc == 0 && (step = store_step(st)) == STORE_ROW) {
			const char *id = store_col_str(st, 0);
			if (have && strcmp(acc.id, id ? id : "") != 0) {
				json_array_append_new(computers, store_usage_acc_json(&acc));
				have = false;
			}
			if (!have) {
				memset(&acc, 0, sizeof acc);
				store_col_text(st, 0, acc.id, sizeof acc.id);
				store_col_text(st, 1, acc.workspace, sizeof acc.workspace);
				store_col_text(st, 6, acc.kind, sizeof acc.kind);
				store_col_text(st, 8, acc.external, sizeof acc.external);
				have = true;
			}
			/* The computer's size now; the segment's if its row is gone. */
			store_col_text(st, store_col_null(st, 7) ? 2 : 7, acc.size,
				       sizeof acc.size);
			char seg_size[16], rate_state[16];
			store_col_text(st, 2, seg_size, sizeof seg_size);
			store_col_text(st, 3, rate_state, sizeof rate_state);
			int64_t ms = store_col_int64(st, 5) - store_col_int64(st, 4);
			if (ms < 0)
				ms = 0;
			int64_t cost = 0;
			bool running = strcmp(rate_state, "running") == 0;
			if (store_segment_cost(rate_state, seg_size, ms, r, &cost) ||
			    store_add(running ? &acc.running_ms : &acc.stopped_ms, ms) ||
			    store_add(running ? &total.running_ms : &total.stopped_ms, ms) ||
			    store_add(&acc.cost, cost) || store_add(&total.cost, cost))
				rc = err_param(e, "rates",
					       "rates: the cost of computer %s overflows 64-bit "
					       "nano-dollars",
					       acc.id);
		}
		if (rc == 0 && step != STORE_DONE)
			rc = store_db_error(s, "reading the usage ledger", e);
	}
	store_stmt_done(st);
	store_unlock(s);
	if (rc != 0) {
		json_decref(computers);
		return -1;
	}
	if (have)
		json_array_append_new(computers, store_usage_acc_json(&acc));
	json_t *res = json_pack(
	    "{s:o, s:I, s:I, s:o, s:{s:f, s:f, s:I, s:f}}", "workspace",
	    workspace ? json_string(workspace) : json_null(), "from", (json_int_t)from_ms, "to",
	    (json_int_t)to_ms, "computers", computers, "total", "running_seconds",
	    (double)total.running_ms / 1000.0, "stopped_seconds", (double)total.stopped_ms / 1000.0,
	    "cost_nanodollars", (json_int_t)total.cost, "cost_usd", (double)total.cost / 1e9);
	if (!res)
		return err_set(e, ERR_INTERNAL, "out of memory building the usage answer");
	*out = res;
	return 0;
}
