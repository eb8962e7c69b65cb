/*
 * runs: the code runner's counts (store-runs.h).
 */
#include "store-internal.h"
#include "store-runs.h"

static const char SQL_ADD[] =
    "INSERT INTO code_runs (workspace, language, hour_ms, runs, errors) VALUES (?1, ?2, ?3, 1, ?4)"
    " ON CONFLICT (workspace, language, hour_ms) DO UPDATE SET runs = code_runs.runs + 1,"
    " errors = code_runs.errors + ?4";
static const char SQL_QUERY[] = "SELECT language, SUM(runs), SUM(errors) FROM code_runs"
				" WHERE (?1 IS NULL OR workspace = ?1) AND hour_ms >= ?2 AND"
				" hour_ms < ?3 GROUP BY language ORDER BY language";

#define HOUR_MS 3600000

int store_runs_add(struct store *s, const char *workspace, const char *language, int64_t at_ms,
		   bool error, struct err *e)
{
	int rc = -1;
	store_lock(s);
	struct store_stmt *st = store_stmt(s, SQL_ADD, e);
	if (st) {
		store_bind_text(st, 1, workspace);
		store_bind_text(st, 2, language);
		store_bind_int64(st, 3, at_ms - at_ms % HOUR_MS);
		store_bind_int64(st, 4, error ? 1 : 0);
		if (store_step(st) == STORE_DONE)
			rc = 0;
		else
			store_db_error(s, "counting a code run", e);
	}
	store_stmt_done(st);
	store_unlock(s);
	return rc;
}

int store_runs_query(struct store *s, const char *workspace, int64_t from_ms, int64_t to_ms,
		     json_t **out, struct err *e)
{
	int rc = -1;
	json_int_t total = 0, errors = 0;
	json_t *by = json_object();
	store_lock(s);
	struct store_stmt *st = by ? store_stmt(s, SQL_QUERY, e) : NULL;
	if (st) {
		store_bind_text(st, 1, workspace);
		/* Hours that start in the window: an hour counts once it began. */
		store_bind_int64(st, 2, from_ms - from_ms % HOUR_MS);
		store_bind_int64(st, 3, to_ms);
		int r;
		while ((r = store_step(st)) == STORE_ROW) {
			json_int_t n = store_col_int64(st, 1);
			json_object_set_new(by, store_col_str(st, 0), json_integer(n));
			total += n;
			errors += store_col_int64(st, 2);
		}
		if (r == STORE_DONE)
			rc = 0;
		else
			store_db_error(s, "reading code runs", e);
	} else if (!by) {
		err_set(e, ERR_INTERNAL, "out of memory");
	}
	store_stmt_done(st);
	store_unlock(s);
	if (rc == 0)
		*out = json_pack("{s:I, s:I, s:o}", "total", total, "errors", errors, "by_language",
				 by);
	else
		json_decref(by);
	return rc == 0 && *out ? 0 : -1;
}
