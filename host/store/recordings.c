/*
 * recordings: the rows of screen recordings (store-recordings.h).
 */
#include "store-internal.h"
#include "store-recordings.h"

#include <stdlib.h>
#include <string.h>

#define REC_COLS                                                                                   \
	"id, computer, workspace, state, keep, started_ms, stopped_ms, duration_ms, bytes, "       \
	"frames, actions, width, height, reason, error"

static const char SQL_INSERT[] = "INSERT INTO recordings (" REC_COLS ") VALUES (?1, ?2, ?3, ?4,"
				 " ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15)";
static const char SQL_UPDATE[] =
    "UPDATE recordings SET state = ?4, keep = ?5, stopped_ms = ?7, duration_ms = ?8, bytes = ?9,"
    " frames = ?10, actions = ?11, width = ?12, height = ?13, reason = ?14, error = ?15"
    " WHERE id = ?1";
static const char SQL_DELETE[] = "DELETE FROM recordings WHERE id = ?1";
static const char SQL_FIND[] =
    "SELECT " REC_COLS " FROM recordings WHERE (?1 IS NULL OR computer = ?1) AND"
    " (?2 IS NULL OR workspace = ?2) AND (?3 IS NULL OR state = ?3) AND"
    " (?4 = 0 OR (keep = 1 AND state != 'recording' AND stopped_ms < ?4)) AND"
    " (?5 IS NULL OR id = ?5) ORDER BY started_ms, id";

static void rec_bind(struct store_stmt *st, const struct store_recording *r)
{
	store_bind_text(st, 1, r->id);
	store_bind_text(st, 2, r->computer);
	store_bind_text(st, 3, r->workspace);
	store_bind_text(st, 4, r->state);
	store_bind_int64(st, 5, r->keep ? 1 : 0);
	store_bind_int64(st, 6, r->started_ms);
	store_bind_int64(st, 7, r->stopped_ms);
	store_bind_int64(st, 8, r->duration_ms);
	store_bind_int64(st, 9, (int64_t)r->bytes);
	store_bind_int64(st, 10, (int64_t)r->frames);
	store_bind_int64(st, 11, (int64_t)r->actions);
	store_bind_int64(st, 12, r->width);
	store_bind_int64(st, 13, r->height);
	store_bind_text(st, 14, r->reason);
	store_bind_text(st, 15, r->error);
}

static int rec_exec(struct store *s, const char *sql, const struct store_recording *r,
		    const char *id, const char *doing, struct err *e)
{
	int rc = -1;
	store_lock(s);
	struct store_stmt *st = store_stmt(s, sql, e);
	if (st) {
		if (r)
			rec_bind(st, r);
		else
			store_bind_text(st, 1, id);
		if (store_step(st) == STORE_DONE)
			rc = 0;
		else
			store_db_error(s, doing, e);
	}
	store_stmt_done(st);
	store_unlock(s);
	return rc;
}

int store_recording_insert(struct store *s, const struct store_recording *r, struct err *e)
{
	return rec_exec(s, SQL_INSERT, r, NULL, "recording a recording", e);
}

int store_recording_update(struct store *s, const struct store_recording *r, struct err *e)
{
	return rec_exec(s, SQL_UPDATE, r, NULL, "updating a recording", e);
}

int store_recording_delete(struct store *s, const char *id, struct err *e)
{
	return rec_exec(s, SQL_DELETE, NULL, id, "deleting a recording", e);
}

static int rec_query(struct store *s, const char *id, const char *computer, const char *ws,
		     const char *state, int64_t kept_before_ms, struct store_recording **out,
		     size_t *n, struct err *e)
{
	*out = NULL;
	*n = 0;
	size_t cap = 0;
	int rc = -1;
	store_lock(s);
	struct store_stmt *st = store_stmt(s, SQL_FIND, e);
	if (st) {
		store_bind_text(st, 1, computer);
		store_bind_text(st, 2, ws);
		store_bind_text(st, 3, state);
		store_bind_int64(st, 4, kept_before_ms);
		store_bind_text(st, 5, id);
		int r;
		rc = 0;
		while ((r = store_step(st)) == STORE_ROW) {
			if (*n == cap) {
				size_t ncap = cap ? cap * 2 : 8;
				struct store_recording *m = realloc(*out, ncap * sizeof *m);
				if (!m) {
					rc = err_set(e, ERR_INTERNAL, "out of memory");
					break;
				}
				*out = m;
				cap = ncap;
			}
			struct store_recording *x = &(*out)[(*n)++];
			memset(x, 0, sizeof *x);
			store_col_text(st, 0, x->id, sizeof x->id);
			store_col_text(st, 1, x->computer, sizeof x->computer);
			store_col_text(st, 2, x->workspace, sizeof x->workspace);
			store_col_text(st, 3, x->state, sizeof x->state);
			x->keep = store_col_int64(st, 4) != 0;
			x->started_ms = store_col_int64(st, 5);
			x->stopped_ms = store_col_int64(st, 6);
			x->duration_ms = store_col_int64(st, 7);
			x->bytes = (uint64_t)store_col_int64(st, 8);
			x->frames = (uint64_t)store_col_int64(st, 9);
			x->actions = (uint64_t)store_col_int64(st, 10);
			x->width = (int)store_col_int64(st, 11);
			x->height = (int)store_col_int64(st, 12);
			store_col_text(st, 13, x->reason, sizeof x->reason);
			store_col_text(st, 14, x->error, sizeof x->error);
		}
		if (rc == 0 && r != STORE_DONE)
			rc = store_db_error(s, "reading recordings", e);
	}
	store_stmt_done(st);
	store_unlock(s);
	if (rc < 0) {
		free(*out);
		*out = NULL;
		*n = 0;
	}
	return rc;
}

int store_recordings_find(struct store *s, const char *computer, const char *ws, const char *state,
			  int64_t kept_before_ms, struct store_recording **out, size_t *n,
			  struct err *e)
{
	return rec_query(s, NULL, computer, ws, state, kept_before_ms, out, n, e);
}

int store_recording_get(struct store *s, const char *id, const char *computer, const char *ws,
			struct store_recording *out, struct err *e)
{
	struct store_recording *all;
	size_t n;
	if (rec_query(s, id, computer, ws, NULL, 0, &all, &n, e) < 0)
		return -1;
	if (n == 0) {
		free(all);
		return err_set(e, ERR_NOT_FOUND, "no recording %.40s", id);
	}
	*out = all[0];
	free(all);
	return 0;
}

json_t *store_recording_json(const struct store_recording *r)
{
	json_t *j = json_pack("{s:s, s:s, s:s, s:s, s:b, s:I, s:I, s:I, s:I, s:I, s:i, s:i}", "id",
			      r->id, "computer_id", r->computer, "workspace", r->workspace, "state",
			      r->state, "keep", r->keep, "started_at", (json_int_t)r->started_ms,
			      "duration_ms", (json_int_t)r->duration_ms, "bytes",
			      (json_int_t)r->bytes, "frames", (json_int_t)r->frames, "actions",
			      (json_int_t)r->actions, "width", r->width, "height", r->height);
	if (!j)
		return NULL;
	json_object_set_new(j, "stopped_at",
			    r->stopped_ms ? json_integer(r->stopped_ms) : json_null());
	json_object_set_new(j, "format", json_string("video/webm; codecs=vp8"));
	if (r->reason[0])
		json_object_set_new(j, "reason", json_string(r->reason));
	if (r->error[0])
		json_object_set_new(j, "error", json_string(r->error));
	return j;
}
