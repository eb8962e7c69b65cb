/*
 * store computers: one row per computer, never removed (a deleted computer
 * keeps its row with state "deleted" so its usage stays attributable).
 *
 * metadata and driver_state are JSON objects stored as compact JSON text;
 * they are read back as fresh objects owned by the caller's struct. A
 * workspace-scoped read filters in the WHERE clause, so another
 * workspace's computer takes exactly the path of a missing one and gets the
 * same error.
 */
#include "store-internal.h"
#include "clock.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define STORE_ID_ATTEMPTS 4

/* The column order every statement below shares (see store_computer_row). */
#define STORE_COMPUTER_COLUMNS                                                                     \
	"id, workspace, kind, size, isolation, state, error, width, height, idle_timeout_s,"       \
	" external_workspace_id, session_id, envd_token, accel, metadata, driver_state,"           \
	" created_ms, updated_ms, last_activity_ms, deleted_ms, template"

/* The states in which a computer holds host resources (counted by the
 * per-workspace running limit). */
#define STORE_STATES_HOLDING "('provisioning', 'starting', 'running', 'stopping')"

static const char SQL_INSERT[] = "INSERT INTO computers (" STORE_COMPUTER_COLUMNS ")"
				 " VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12,"
				 " ?13, ?14, ?15, ?16, ?17, ?18, ?19, ?20, ?21)";
/* ?17 (created_ms) is bound but deliberately not written. */
static const char SQL_UPDATE[] =
    "UPDATE computers SET workspace = ?2, kind = ?3, size = ?4, isolation = ?5, state = ?6,"
    " error = ?7, width = ?8, height = ?9, idle_timeout_s = ?10, external_workspace_id = ?11,"
    " session_id = ?12, envd_token = ?13, accel = ?14, metadata = ?15, driver_state = ?16,"
    " updated_ms = ?18, last_activity_ms = ?19, deleted_ms = ?20, template = ?21 WHERE id = ?1";
static const char SQL_SET_STATE[] =
    "UPDATE computers SET state = ?2, error = ?3, updated_ms = ?4,"
    " deleted_ms = CASE WHEN ?2 = 'deleted' AND deleted_ms = 0 THEN ?4 ELSE deleted_ms END"
    " WHERE id = ?1";
static const char SQL_TOUCH[] =
    "UPDATE computers SET last_activity_ms = MAX(last_activity_ms, ?2) WHERE id = ?1";
static const char SQL_GET[] = "SELECT " STORE_COMPUTER_COLUMNS " FROM computers"
			      " WHERE id = ?1 AND (?2 IS NULL OR workspace = ?2)";
static const char SQL_LIST[] = "SELECT " STORE_COMPUTER_COLUMNS " FROM computers"
			       " WHERE (?1 IS NULL OR workspace = ?1)"
			       " AND (?2 IS NULL OR state = ?2)"
			       " AND (?2 IS NOT NULL OR ?3 OR state <> 'deleted')"
			       " AND (?4 IS NULL OR kind = ?4)"
			       " ORDER BY created_ms, rowid";
static const char SQL_COUNT_RUNNING[] = "SELECT COUNT(*) FROM computers"
					" WHERE (?1 IS NULL OR workspace = ?1)"
					" AND state IN " STORE_STATES_HOLDING;
static const char SQL_COUNT_HOLDING_OTHERS[] = "SELECT COUNT(*) FROM computers"
					       " WHERE workspace = ?1 AND id <> ?2"
					       " AND state IN " STORE_STATES_HOLDING;
static const char SQL_COUNT_STOPPED_OTHERS[] = "SELECT COUNT(*) FROM computers"
					       " WHERE workspace = ?1 AND id <> ?2"
					       " AND state IN ('stopping', 'stopped')";
static const char SQL_WORKSPACE_EXISTS[] = "SELECT 1 FROM workspaces WHERE id = ?1";
/* A computer made from a template: the template must still be there (a
 * template's delete checks for its computers in its own transaction). */
static const char SQL_TEMPLATE_EXISTS[] = "SELECT 1 FROM templates WHERE id = ?1";

/* Indexed by enum computer_state. */
static const char *const store_states[COMPUTER_STATES + 1] = {
    [COMPUTER_PROVISIONING] = "provisioning", [COMPUTER_RUNNING] = "running",
    [COMPUTER_STOPPING] = "stopping",	      [COMPUTER_STOPPED] = "stopped",
    [COMPUTER_STARTING] = "starting",	      [COMPUTER_DELETING] = "deleting",
    [COMPUTER_DELETED] = "deleted",	      [COMPUTER_ERROR] = "error",
    [COMPUTER_OFFLINE] = "offline",	      [COMPUTER_STATES] = NULL,
};

const char *computer_state_name(enum computer_state s)
{
	return (unsigned)s < COMPUTER_STATES ? store_states[s] : "?";
}

int computer_state_parse(const char *name, enum computer_state *out)
{
	for (int i = 0; name && i < COMPUTER_STATES; i++)
		if (strcmp(name, store_states[i]) == 0) {
			*out = (enum computer_state)i;
			return 0;
		}
	return -1;
}

static bool store_one_of(const char *v, const char *const *set)
{
	for (; *set; set++)
		if (strcmp(v, *set) == 0)
			return true;
	return false;
}

/* An isolation: a driver's name (the core checks it against its registry,
 * which the store does not know): lower-case letters, 1 to 15 of them. */
static bool store_is_name(const char *v)
{
	size_t n = 0;
	for (; v[n]; n++)
		if (v[n] < 'a' || v[n] > 'z')
			return false;
	return n > 0 && n < 16;
}

static int store_state_check(const char *state, struct err *e)
{
	if (!state || !store_one_of(state, store_states))
		return err_param(e, "state",
				 "state: '%.32s' is not one of provisioning, running, stopping, "
				 "stopped, starting, deleting, deleted, error, offline",
				 state ? state : "(null)");
	return 0;
}

/* Checks what the database's meaning depends on; the API validates user
 * input first with friendlier messages, this is the last line. */
static int store_computer_check(const struct store_computer *c, struct err *e)
{
	static const char *const kinds[] = {"desktop", "sandbox", NULL};
	static const char *const accels[] = {"", "kvm", "tcg", NULL};
#define STORE_CHECK_TERMINATED(field)                                                              \
	if (!store_fits(c->field, sizeof c->field))                                                \
		return err_param(e, #field, #field ": not terminated within %zu bytes",            \
				 sizeof c->field);
	STORE_CHECK_TERMINATED(workspace)
	STORE_CHECK_TERMINATED(kind)
	STORE_CHECK_TERMINATED(size)
	STORE_CHECK_TERMINATED(isolation)
	STORE_CHECK_TERMINATED(error)
	STORE_CHECK_TERMINATED(external_workspace_id)
	STORE_CHECK_TERMINATED(session_id)
	STORE_CHECK_TERMINATED(envd_token)
	STORE_CHECK_TERMINATED(accel)
	STORE_CHECK_TERMINATED(template_id)
#undef STORE_CHECK_TERMINATED
	if (!*c->workspace)
		return err_param(e, "workspace", "workspace: every computer needs a workspace");
	if (!store_one_of(c->kind, kinds))
		return err_param(e, "kind", "kind: '%s' is not desktop or sandbox", c->kind);
	if (store_size_multiplier(c->size) == 0 && strcmp(c->size, "byo") != 0)
		return err_param(
		    e, "size", "size: '%s' is not one of xs, sm, md, lg, xl, small, medium, large",
		    c->size);
	if (!store_is_name(c->isolation))
		return err_param(e, "isolation", "isolation: '%s' is not a driver's name",
				 c->isolation);
	if (!store_one_of(c->accel, accels))
		return err_param(e, "accel", "accel: '%s' is not empty, kvm or tcg", c->accel);
	if ((unsigned)c->state >= COMPUTER_STATES)
		return err_param(e, "state", "state: %d is not a computer state", (int)c->state);
	if (c->width < 0 || c->height < 0)
		return err_param(e, "resolution", "resolution: %dx%d is negative", c->width,
				 c->height);
	if (c->idle_timeout_s < 0)
		return err_param(e, "idle_timeout_s", "idle_timeout_s: %d is negative",
				 c->idle_timeout_s);
	if (c->metadata && !json_is_object(c->metadata))
		return err_param(e, "metadata", "metadata: must be a JSON object");
	if (c->driver_state && !json_is_object(c->driver_state))
		return err_param(e, "driver_state", "driver_state: must be a JSON object");
	return 0;
}

/* Compact JSON text of obj ({} for NULL); malloc'd, NULL when out of memory. */
static char *store_json_text(const json_t *obj)
{
	if (!obj || json_object_size(obj) == 0)
		return strdup("{}");
	return json_dumps(obj, JSON_COMPACT);
}

/* Binds every column of c in STORE_COMPUTER_COLUMNS order; the JSON texts
 * are handed to SQLite (it frees them). */
static int store_computer_bind(sqlite3_stmt *st, const struct store_computer *c, struct err *e)
{
	char *meta = store_json_text(c->metadata);
	char *drv = store_json_text(c->driver_state);
	if (!meta || !drv) {
		free(meta);
		free(drv);
		return err_set(e, ERR_INTERNAL, "out of memory encoding computer %s", c->id);
	}
	sqlite3_bind_text(st, 1, c->id, -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 2, c->workspace, -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 3, c->kind, -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 4, c->size, -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 5, c->isolation, -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 6, computer_state_name(c->state), -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 7, c->error, -1, SQLITE_STATIC);
	sqlite3_bind_int(st, 8, c->width);
	sqlite3_bind_int(st, 9, c->height);
	sqlite3_bind_int(st, 10, c->idle_timeout_s);
	sqlite3_bind_text(st, 11, c->external_workspace_id, -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 12, c->session_id, -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 13, c->envd_token, -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 14, c->accel, -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 15, meta, -1, free);
	sqlite3_bind_text(st, 16, drv, -1, free);
	sqlite3_bind_int64(st, 17, c->created_ms);
	sqlite3_bind_int64(st, 18, c->updated_ms);
	sqlite3_bind_int64(st, 19, c->last_activity_ms);
	sqlite3_bind_int64(st, 20, c->deleted_ms);
	sqlite3_bind_text(st, 21, c->template_id, -1, SQLITE_STATIC);
	return 0;
}

/* A JSON object column; NULL with e filled when the text is not an object. */
static json_t *store_json_column(sqlite3_stmt *st, int i, const char *id, const char *what,
				 struct err *e)
{
	const char *text = (const char *)sqlite3_column_text(st, i);
	json_t *obj = json_loads(text ? text : "{}", 0, NULL);
	if (!json_is_object(obj)) {
		json_decref(obj);
		err_set(e, ERR_INTERNAL, "computer %s has a corrupt %s column in the database", id,
			what);
		return NULL;
	}
	return obj;
}

/* Reads one row into out (which it overwrites; JSON members fresh). */
static int store_computer_row(sqlite3_stmt *st, struct store_computer *out, struct err *e)
{
	struct store_computer c;
	memset(&c, 0, sizeof c);
	store_col_text(st, 0, c.id, sizeof c.id);
	store_col_text(st, 1, c.workspace, sizeof c.workspace);
	store_col_text(st, 2, c.kind, sizeof c.kind);
	store_col_text(st, 3, c.size, sizeof c.size);
	store_col_text(st, 4, c.isolation, sizeof c.isolation);
	char state[16];
	store_col_text(st, 5, state, sizeof state);
	if (computer_state_parse(state, &c.state) < 0)
		return err_set(e, ERR_INTERNAL,
			       "computer %s has a corrupt state in the database: %.16s", c.id,
			       state);
	store_col_text(st, 6, c.error, sizeof c.error);
	c.width = sqlite3_column_int(st, 7);
	c.height = sqlite3_column_int(st, 8);
	c.idle_timeout_s = sqlite3_column_int(st, 9);
	store_col_text(st, 10, c.external_workspace_id, sizeof c.external_workspace_id);
	store_col_text(st, 11, c.session_id, sizeof c.session_id);
	store_col_text(st, 12, c.envd_token, sizeof c.envd_token);
	store_col_text(st, 13, c.accel, sizeof c.accel);
	c.metadata = store_json_column(st, 14, c.id, "metadata", e);
	c.driver_state = c.metadata ? store_json_column(st, 15, c.id, "driver_state", e) : NULL;
	if (!c.driver_state) {
		store_computer_clear(&c);
		return -1;
	}
	c.created_ms = sqlite3_column_int64(st, 16);
	c.updated_ms = sqlite3_column_int64(st, 17);
	c.last_activity_ms = sqlite3_column_int64(st, 18);
	c.deleted_ms = sqlite3_column_int64(st, 19);
	store_col_text(st, 20, c.template_id, sizeof c.template_id);
	*out = c;
	return 0;
}

/* After a successful write: {} for absent JSON members, as they are stored
 * (so the caller's struct matches what a get returns). */
static void store_computer_default_json(struct store_computer *c)
{
	if (!c->metadata)
		c->metadata = json_object();
	if (!c->driver_state)
		c->driver_state = json_object();
}

void store_computer_clear(struct store_computer *c)
{
	if (!c)
		return;
	json_decref(c->metadata);
	json_decref(c->driver_state);
	c->metadata = NULL;
	c->driver_state = NULL;
}

/* Maps a failed write to the parameter at fault when it is a constraint. */
static int store_computer_write_error(struct store *s, int step, const struct store_computer *c,
				      const char *doing, struct err *e)
{
	if (step == SQLITE_CONSTRAINT_FOREIGNKEY)
		return err_param(e, "workspace", "workspace: no workspace %s", c->workspace);
	return store_db_error(s, doing, e);
}

/* How many computers of workspace ws other than `except` the counting
 * statement sql finds (lock held); -1 with e on a database error. */
static int store_count_others_locked(struct store *s, const char *sql, const char *ws,
				     const char *except, const char *doing, struct err *e)
{
	sqlite3_stmt *st = store_stmt(s, sql, e);
	if (!st)
		return -1;
	sqlite3_bind_text(st, 1, ws, -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 2, except, -1, SQLITE_STATIC);
	int step = sqlite3_step(st);
	int n = step == SQLITE_ROW ? sqlite3_column_int(st, 0) : 0;
	store_stmt_done(st);
	if (step != SQLITE_ROW)
		return store_db_error(s, doing, e);
	return n;
}

/* ERR_LIMIT when workspace ws holds `limit` computers (other than `except`)
 * in a state that holds resources (lock held). */
static int store_computer_limit_locked(struct store *s, const char *ws, const char *except,
				       int limit, struct err *e)
{
	int n = store_count_others_locked(s, SQL_COUNT_HOLDING_OTHERS, ws, except,
					  "counting running computers", e);
	if (n < 0)
		return -1;
	if (n >= limit)
		return err_set(e, ERR_LIMIT,
			       "workspace %s already runs %d computers, its limit; stop or delete "
			       "one first",
			       ws, n);
	return 0;
}

/* The stopped-computer limit of store_commit (lock held). */
static int store_computer_stopped_limit_locked(struct store *s, const char *ws, const char *except,
					       int limit, struct err *e)
{
	int n = store_count_others_locked(s, SQL_COUNT_STOPPED_OTHERS, ws, except,
					  "counting stopped computers", e);
	if (n < 0)
		return -1;
	if (n >= limit)
		return err_set(e, ERR_LIMIT,
			       "workspace %s already holds %d stopped computers, its limit "
			       "(max_stopped %d); delete one first",
			       ws, n, limit);
	return 0;
}

/* Inserts w with a fresh id (written into w) (lock held). */
static int store_computer_insert_locked(struct store *s, struct store_computer *w, struct err *e)
{
	int rc = -1, step = 0;
	sqlite3_stmt *st = store_stmt(s, SQL_WORKSPACE_EXISTS, e);
	if (st) {
		sqlite3_bind_text(st, 1, w->workspace, -1, SQLITE_STATIC);
		step = sqlite3_step(st);
		store_stmt_done(st);
		if (step == SQLITE_DONE)
			err_param(e, "workspace", "workspace: no workspace %s", w->workspace);
		else if (step != SQLITE_ROW)
			store_db_error(s, "reading a workspace", e);
	}
	if (step == SQLITE_ROW && w->template_id[0] &&
	    (st = store_stmt(s, SQL_TEMPLATE_EXISTS, e))) {
		sqlite3_bind_text(st, 1, w->template_id, -1, SQLITE_STATIC);
		step = sqlite3_step(st);
		store_stmt_done(st);
		if (step == SQLITE_DONE)
			err_param(e, "template", "template: it was deleted meanwhile");
		else if (step != SQLITE_ROW)
			store_db_error(s, "reading a template", e);
	}
	for (int attempt = 0; step == SQLITE_ROW ||
			      (step == SQLITE_CONSTRAINT_PRIMARYKEY && attempt < STORE_ID_ATTEMPTS);
	     attempt++) {
		if (store_random_id("c-", w->id, sizeof w->id, e))
			break;
		if (!(st = store_stmt(s, SQL_INSERT, e)) || store_computer_bind(st, w, e))
			break;
		step = sqlite3_step(st);
		store_stmt_done(st);
		if (step == SQLITE_DONE)
			rc = 0;
		else if (step != SQLITE_CONSTRAINT_PRIMARYKEY)
			store_computer_write_error(s, step, w, "creating a computer", e);
		else if (attempt + 1 == STORE_ID_ATTEMPTS)
			err_set(e, ERR_INTERNAL, "could not find a free computer id");
	}
	return rc;
}

/* Writes every column of w (lock held). */
static int store_computer_update_locked(struct store *s, const struct store_computer *w,
					struct err *e)
{
	int rc = -1;
	sqlite3_stmt *st = store_stmt(s, SQL_UPDATE, e);
	if (st && store_computer_bind(st, w, e) == 0) {
		int step = sqlite3_step(st);
		if (step != SQLITE_DONE)
			store_computer_write_error(s, step, w, "updating a computer", e);
		else if (sqlite3_changes(s->db) == 0)
			err_set(e, ERR_NOT_FOUND, "no computer %s", w->id);
		else
			rc = 0;
	}
	store_stmt_done(st);
	return rc;
}

int store_computer_commit(struct store *s, struct store_computer *c, const struct store_commit *how,
			  struct err *e)
{
	static const struct store_commit plain = {0};
	if (!how)
		how = &plain;
	if (!c)
		return err_param(e, "computer", "computer: missing");
	if (!how->insert && (!store_fits(c->id, sizeof c->id) || !*c->id))
		return err_param(e, "id", "id: the computer id is empty");
	if (store_computer_check(c, e))
		return -1;
	if (how->bill && store_usage_check(how->insert ? "new" : c->id, c->workspace, c->size,
					   how->rate_state, how->at_ms, e))
		return -1;
	struct store_computer w = *c;
	w.updated_ms = clock_wall_ms();
	if (how->insert) {
		w.created_ms = w.updated_ms;
		if (w.last_activity_ms == 0)
			w.last_activity_ms = w.created_ms;
	}

	int rc = -1;
	store_lock(s);
	if (store_exec(s, "BEGIN IMMEDIATE", e) == 0) {
		if ((how->limit > 0 &&
		     store_computer_limit_locked(s, w.workspace, how->insert ? "" : w.id,
						 how->limit, e)) ||
		    (how->stopped_limit > 0 &&
		     store_computer_stopped_limit_locked(s, w.workspace, how->insert ? "" : w.id,
							 how->stopped_limit, e)) ||
		    (how->insert ? store_computer_insert_locked(s, &w, e)
				 : store_computer_update_locked(s, &w, e)) ||
		    (how->bill && store_usage_switch_locked(s, w.id, w.workspace, w.size,
							    how->rate_state, how->at_ms, e)) ||
		    store_exec(s, "COMMIT", e))
			store_rollback(s);
		else
			rc = 0;
	}
	store_unlock(s);
	if (rc == 0) {
		*c = w;
		store_computer_default_json(c);
	}
	return rc;
}

int store_computer_insert(struct store *s, struct store_computer *c, struct err *e)
{
	static const struct store_commit insert = {.insert = true};
	return store_computer_commit(s, c, &insert, e);
}

int store_computer_update(struct store *s, struct store_computer *c, struct err *e)
{
	return store_computer_commit(s, c, NULL, e);
}

/* Copies msg into buf, cutting at a UTF-8 character boundary if too long
 * (so the JSON layer can always encode it). */
static void store_copy_utf8(char *buf, size_t size, const char *msg)
{
	size_t n = strlen(msg);
	if (n >= size) {
		n = size - 1;
		while (n > 0 && ((unsigned char)msg[n] & 0xC0) == 0x80)
			n--;
	}
	memcpy(buf, msg, n);
	buf[n] = 0;
}

int store_computer_set_state(struct store *s, const char *id, const char *state, const char *error,
			     struct err *e)
{
	if (!id || !*id)
		return err_param(e, "id", "id: the computer id is empty");
	if (store_state_check(state, e))
		return -1;
	char msg[sizeof((struct store_computer *)0)->error];
	store_copy_utf8(msg, sizeof msg, error ? error : "");

	char missing[96];
	snprintf(missing, sizeof missing, "no computer %.64s", id);
	int rc = -1;
	store_lock(s);
	sqlite3_stmt *st = store_stmt(s, SQL_SET_STATE, e);
	if (st) {
		sqlite3_bind_text(st, 1, id, -1, SQLITE_STATIC);
		sqlite3_bind_text(st, 2, state, -1, SQLITE_STATIC);
		sqlite3_bind_text(st, 3, msg, -1, SQLITE_STATIC);
		sqlite3_bind_int64(st, 4, clock_wall_ms());
		rc = store_step_change(s, st, "changing a computer's state", missing, e);
	}
	store_stmt_done(st);
	store_unlock(s);
	return rc;
}

int store_computer_touch(struct store *s, const char *id, int64_t now_ms, struct err *e)
{
	if (!id || !*id)
		return err_param(e, "id", "id: the computer id is empty");
	char missing[96];
	snprintf(missing, sizeof missing, "no computer %.64s", id);
	int rc = -1;
	store_lock(s);
	sqlite3_stmt *st = store_stmt(s, SQL_TOUCH, e);
	if (st) {
		sqlite3_bind_text(st, 1, id, -1, SQLITE_STATIC);
		sqlite3_bind_int64(st, 2, now_ms);
		rc = store_step_change(s, st, "recording computer activity", missing, e);
	}
	store_stmt_done(st);
	store_unlock(s);
	return rc;
}

int store_computer_get(struct store *s, const char *id, const char *workspace,
		       struct store_computer *out, struct err *e)
{
	if (!id || !*id)
		return err_param(e, "id", "id: the computer id is empty");
	int rc = -1;
	store_lock(s);
	sqlite3_stmt *st = store_stmt(s, SQL_GET, e);
	if (st) {
		sqlite3_bind_text(st, 1, id, -1, SQLITE_STATIC);
		if (workspace)
			sqlite3_bind_text(st, 2, workspace, -1, SQLITE_STATIC);
		int step = sqlite3_step(st);
		if (step == SQLITE_ROW)
			rc = store_computer_row(st, out, e);
		else if (step == SQLITE_DONE)
			err_set(e, ERR_NOT_FOUND, "no computer %.64s", id);
		else
			store_db_error(s, "reading a computer", e);
	}
	store_stmt_done(st);
	store_unlock(s);
	return rc;
}

int store_computer_list(struct store *s, const struct store_filter *f, struct store_computer **out,
			size_t *n, struct err *e)
{
	static const struct store_filter none = {0};
	if (!f)
		f = &none;
	if (f->state && store_state_check(f->state, e))
		return -1;
	struct store_computer *list = NULL;
	size_t count = 0, cap = 0;
	int rc = -1;
	store_lock(s);
	sqlite3_stmt *st = store_stmt(s, SQL_LIST, e);
	if (st) {
		if (f->workspace)
			sqlite3_bind_text(st, 1, f->workspace, -1, SQLITE_STATIC);
		if (f->state)
			sqlite3_bind_text(st, 2, f->state, -1, SQLITE_STATIC);
		sqlite3_bind_int(st, 3, f->include_deleted);
		if (f->kind)
			sqlite3_bind_text(st, 4, f->kind, -1, SQLITE_STATIC);
		int step = SQLITE_DONE;
		rc = 0;
		while (rc == 0 && (step = sqlite3_step(st)) == SQLITE_ROW) {
			if (count == cap) {
				size_t ncap = cap ? 2 * cap : 16;
				struct store_computer *grown = realloc(list, ncap * sizeof *list);
				if (!grown) {
					rc = err_set(e, ERR_INTERNAL,
						     "out of memory listing computers");
					break;
				}
				list = grown;
				cap = ncap;
			}
			if (store_computer_row(st, &list[count], e))
				rc = -1;
			else
				count++;
		}
		if (rc == 0 && step != SQLITE_DONE)
			rc = store_db_error(s, "listing computers", e);
	}
	store_stmt_done(st);
	store_unlock(s);
	if (rc != 0) {
		for (size_t i = 0; i < count; i++)
			store_computer_clear(&list[i]);
		free(list);
		return -1;
	}
	*out = list;
	*n = count;
	return 0;
}

int store_computer_count_running(struct store *s, const char *workspace, int *n, struct err *e)
{
	int rc = -1;
	store_lock(s);
	sqlite3_stmt *st = store_stmt(s, SQL_COUNT_RUNNING, e);
	if (st) {
		if (workspace)
			sqlite3_bind_text(st, 1, workspace, -1, SQLITE_STATIC);
		if (sqlite3_step(st) == SQLITE_ROW) {
			*n = sqlite3_column_int(st, 0);
			rc = 0;
		} else {
			store_db_error(s, "counting running computers", e);
		}
	}
	store_stmt_done(st);
	store_unlock(s);
	return rc;
}

/* ---- stream revocations ------------------------------------------------------ */

static const char SQL_STREAM_REVOKE[] =
    "INSERT INTO stream_revocations (computer, revoked_ms, expires_ms) VALUES (?1, ?2, ?3)"
    " ON CONFLICT(computer) DO UPDATE SET revoked_ms = MAX(revoked_ms, excluded.revoked_ms),"
    " expires_ms = MAX(expires_ms, excluded.expires_ms)";
static const char SQL_STREAM_PRUNE[] = "DELETE FROM stream_revocations WHERE expires_ms < ?1";
static const char SQL_STREAM_LIST[] = "SELECT computer, revoked_ms FROM stream_revocations";

int store_stream_revoke(struct store *s, const char *computer, int64_t revoked_ms,
			int64_t expires_ms, struct err *e)
{
	if (!computer || !*computer)
		return err_param(e, "computer", "computer: the computer id is empty");
	store_lock(s);
	int rc = -1;
	sqlite3_stmt *st = store_stmt(s, SQL_STREAM_PRUNE, e);
	if (st) {
		sqlite3_bind_int64(st, 1, revoked_ms);
		sqlite3_step(st); /* pruning is housekeeping: its failure is not this call's */
		store_stmt_done(st);
	}
	if ((st = store_stmt(s, SQL_STREAM_REVOKE, e))) {
		sqlite3_bind_text(st, 1, computer, -1, SQLITE_STATIC);
		sqlite3_bind_int64(st, 2, revoked_ms);
		sqlite3_bind_int64(st, 3, expires_ms);
		if (sqlite3_step(st) == SQLITE_DONE)
			rc = 0;
		else
			store_db_error(s, "recording a stream revocation", e);
	}
	store_stmt_done(st);
	store_unlock(s);
	return rc;
}

int store_stream_revocations(struct store *s, int64_t now_ms,
			     void (*fn)(void *ctx, const char *computer, int64_t revoked_ms),
			     void *ctx, struct err *e)
{
	/* Copied out first: fn may take other locks. */
	struct rev {
		char computer[40];
		int64_t revoked_ms;
	} *list = NULL;
	size_t n = 0, cap = 0;
	int rc = -1;
	store_lock(s);
	sqlite3_stmt *st = store_stmt(s, SQL_STREAM_PRUNE, e);
	if (st) {
		sqlite3_bind_int64(st, 1, now_ms);
		if (sqlite3_step(st) == SQLITE_DONE)
			rc = 0;
		else
			store_db_error(s, "pruning stream revocations", e);
		store_stmt_done(st);
	}
	if (rc == 0 && (st = store_stmt(s, SQL_STREAM_LIST, e))) {
		int step = SQLITE_DONE;
		while (rc == 0 && (step = sqlite3_step(st)) == SQLITE_ROW) {
			if (n == cap) {
				size_t ncap = cap ? 2 * cap : 16;
				struct rev *grown = realloc(list, ncap * sizeof *list);
				if (!grown) {
					rc = err_set(e, ERR_INTERNAL, "out of memory");
					break;
				}
				list = grown;
				cap = ncap;
			}
			store_col_text(st, 0, list[n].computer, sizeof list[n].computer);
			list[n].revoked_ms = sqlite3_column_int64(st, 1);
			n++;
		}
		if (rc == 0 && step != SQLITE_DONE)
			rc = store_db_error(s, "reading stream revocations", e);
		store_stmt_done(st);
	} else if (rc == 0) {
		rc = -1;
	}
	store_unlock(s);
	for (size_t i = 0; rc == 0 && i < n; i++)
		fn(ctx, list[i].computer, list[i].revoked_ms);
	free(list);
	return rc;
}
