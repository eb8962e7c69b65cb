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

/* The column order every statement below shares (see store_computer_row):
 * what store_computer_bind binds (?1..?21), then where the computer lives,
 * which only placement, release, registration and the reaper write. */
#define STORE_COMPUTER_COLUMNS                                                                     \
	"id, workspace, kind, size, isolation, state, error, width, height, idle_timeout_s,"       \
	" external_workspace_id, session_id, envd_token, accel, metadata, driver_state,"           \
	" created_ms, updated_ms, last_activity_ms, deleted_ms, template"
#define STORE_COMPUTER_PLACE_COLUMNS " host, epoch, cpu_milli, mem_mb, disk_mb"
#define STORE_COMPUTER_READ	     STORE_COMPUTER_COLUMNS "," STORE_COMPUTER_PLACE_COLUMNS

/* An id collision (64 random bits) inserts nothing rather than failing, so
 * that PostgreSQL's transaction survives it and the next id is tried. */
static const char SQL_INSERT[] =
    "INSERT INTO computers (" STORE_COMPUTER_READ ")"
    " VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12,"
    " ?13, ?14, ?15, ?16, ?17, ?18, ?19, ?20, ?21, ?22, ?23, ?24, ?25, ?26)"
    " ON CONFLICT (id) DO NOTHING";
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
    "UPDATE computers SET last_activity_ms = GREATEST(last_activity_ms, ?2) WHERE id = ?1";
static const char SQL_GET[] = "SELECT " STORE_COMPUTER_READ " FROM computers"
			      " WHERE id = ?1 AND (?2 IS NULL OR workspace = ?2)";
static const char SQL_LIST[] = "SELECT " STORE_COMPUTER_READ " FROM computers"
			       " WHERE (?1 IS NULL OR workspace = ?1)"
			       " AND (?2 IS NULL OR state = ?2)"
			       " AND (?2 IS NOT NULL OR ?3 <> 0 OR state <> 'deleted')"
			       " AND (?4 IS NULL OR kind = ?4)"
			       " AND (?5 IS NULL OR host = ?5)"
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
/* A computer made from a template: the template must still be there. On
 * PostgreSQL its row is held until the commit (FOR UPDATE, appended), so a
 * template's delete, which takes the same row before it counts the
 * template's computers, runs wholly before or wholly after this create. */
static const char SQL_TEMPLATE_EXISTS[] = "SELECT 1 FROM templates WHERE id = ?1";
static const char SQL_TEMPLATE_LOCK[] = "SELECT 1 FROM templates WHERE id = ?1 FOR UPDATE";
/* PostgreSQL only: the workspace's row, held until the commit, so that two
 * hosts' creates in one workspace count one after the other (SQLite's
 * BEGIN IMMEDIATE already serialises every write). */
static const char SQL_WORKSPACE_LOCK[] = "SELECT 1 FROM workspaces WHERE id = ?1 FOR UPDATE";

/* Indexed by enum computer_state. */
static const char *const store_states[COMPUTER_STATES + 1] = {
    [COMPUTER_PROVISIONING] = "provisioning",
    [COMPUTER_RUNNING] = "running",
    [COMPUTER_STOPPING] = "stopping",
    [COMPUTER_STOPPED] = "stopped",
    [COMPUTER_STARTING] = "starting",
    [COMPUTER_DELETING] = "deleting",
    [COMPUTER_DELETED] = "deleted",
    [COMPUTER_ERROR] = "error",
    [COMPUTER_OFFLINE] = "offline",
    [COMPUTER_LOST] = "lost",
    [COMPUTER_STATES] = NULL,
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
				 "stopped, starting, deleting, deleted, error, offline, lost",
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
 * are handed to the statement (it frees them). */
static int store_computer_bind(struct store_stmt *st, const struct store_computer *c, struct err *e)
{
	char *meta = store_json_text(c->metadata);
	char *drv = store_json_text(c->driver_state);
	if (!meta || !drv) {
		free(meta);
		free(drv);
		return err_set(e, ERR_INTERNAL, "out of memory encoding computer %s", c->id);
	}
	store_bind_text(st, 1, c->id);
	store_bind_text(st, 2, c->workspace);
	store_bind_text(st, 3, c->kind);
	store_bind_text(st, 4, c->size);
	store_bind_text(st, 5, c->isolation);
	store_bind_text(st, 6, computer_state_name(c->state));
	store_bind_text(st, 7, c->error);
	store_bind_int64(st, 8, c->width);
	store_bind_int64(st, 9, c->height);
	store_bind_int64(st, 10, c->idle_timeout_s);
	store_bind_text(st, 11, c->external_workspace_id);
	store_bind_text(st, 12, c->session_id);
	store_bind_text(st, 13, c->envd_token);
	store_bind_text(st, 14, c->accel);
	store_bind_text_owned(st, 15, meta);
	store_bind_text_owned(st, 16, drv);
	store_bind_int64(st, 17, c->created_ms);
	store_bind_int64(st, 18, c->updated_ms);
	store_bind_int64(st, 19, c->last_activity_ms);
	store_bind_int64(st, 20, c->deleted_ms);
	store_bind_text(st, 21, c->template_id);
	return 0;
}

/* A JSON object column; NULL with e filled when the text is not an object. */
static json_t *store_json_column(struct store_stmt *st, int i, const char *id, const char *what,
				 struct err *e)
{
	const char *text = store_col_str(st, i);
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
static int store_computer_row(struct store_stmt *st, struct store_computer *out, struct err *e)
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
	c.width = store_col_int64(st, 7);
	c.height = store_col_int64(st, 8);
	c.idle_timeout_s = store_col_int64(st, 9);
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
	c.created_ms = store_col_int64(st, 16);
	c.updated_ms = store_col_int64(st, 17);
	c.last_activity_ms = store_col_int64(st, 18);
	c.deleted_ms = store_col_int64(st, 19);
	store_col_text(st, 20, c.template_id, sizeof c.template_id);
	store_col_text(st, 21, c.host, sizeof c.host);
	c.epoch = store_col_int64(st, 22);
	c.reserved.cpu_milli = store_col_int64(st, 23);
	c.reserved.mem_mb = store_col_int64(st, 24);
	c.reserved.disk_mb = store_col_int64(st, 25);
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
	if (step == STORE_ERR_FOREIGN)
		return err_param(e, "workspace", "workspace: no workspace %s", c->workspace);
	return store_db_error(s, doing, e);
}

/* How many computers of workspace ws other than `except` the counting
 * statement sql finds (lock held); -1 with e on a database error. */
static int store_count_others_locked(struct store *s, const char *sql, const char *ws,
				     const char *except, const char *doing, struct err *e)
{
	struct store_stmt *st = store_stmt(s, sql, e);
	if (!st)
		return -1;
	store_bind_text(st, 1, ws);
	store_bind_text(st, 2, except);
	int step = store_step(st);
	int n = step == STORE_ROW ? store_col_int64(st, 0) : 0;
	store_stmt_done(st);
	if (step != STORE_ROW)
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

/* Inserts w with a fresh id (written into w) and its placement columns
 * (lock held). */
static int store_computer_insert_locked(struct store *s, struct store_computer *w, struct err *e)
{
	struct store_stmt *st = store_stmt(s, SQL_WORKSPACE_EXISTS, e);
	if (!st)
		return -1;
	store_bind_text(st, 1, w->workspace);
	int step = store_step(st);
	store_stmt_done(st);
	if (step == STORE_DONE)
		return err_param(e, "workspace", "workspace: no workspace %s", w->workspace);
	if (step != STORE_ROW)
		return store_db_error(s, "reading a workspace", e);
	if (w->template_id[0]) {
		if (!(st = store_stmt(s, s->pg ? SQL_TEMPLATE_LOCK : SQL_TEMPLATE_EXISTS, e)))
			return -1;
		store_bind_text(st, 1, w->template_id);
		bool found = false;
		while ((step = store_step(st)) == STORE_ROW)
			found = true;
		store_stmt_done(st);
		if (step != STORE_DONE)
			return store_db_error(s, "reading a template", e);
		if (!found)
			return err_param(e, "template", "template: it was deleted meanwhile");
	}
	for (int attempt = 0; attempt < STORE_ID_ATTEMPTS; attempt++) {
		if (store_random_id("c-", w->id, sizeof w->id, e) ||
		    !(st = store_stmt(s, SQL_INSERT, e)))
			return -1;
		if (store_computer_bind(st, w, e)) {
			store_stmt_done(st);
			return -1;
		}
		store_bind_text(st, 22, w->host);
		store_bind_int64(st, 23, w->epoch);
		store_bind_int64(st, 24, w->reserved.cpu_milli);
		store_bind_int64(st, 25, w->reserved.mem_mb);
		store_bind_int64(st, 26, w->reserved.disk_mb);
		step = store_step(st);
		int64_t inserted = store_changes(st);
		store_stmt_done(st);
		if (step != STORE_DONE)
			return store_computer_write_error(s, step, w, "creating a computer", e);
		if (inserted == 1)
			return 0;
	}
	return err_set(e, ERR_INTERNAL, "could not find a free computer id");
}

/* Writes every column of w but its placement (lock held). */
static int store_computer_update_locked(struct store *s, const struct store_computer *w,
					struct err *e)
{
	int rc = -1;
	struct store_stmt *st = store_stmt(s, SQL_UPDATE, e);
	if (st && store_computer_bind(st, w, e) == 0) {
		int step = store_step(st);
		if (step != STORE_DONE)
			store_computer_write_error(s, step, w, "updating a computer", e);
		else if (store_changes(st) == 0)
			err_set(e, ERR_NOT_FOUND, "no computer %s", w->id);
		else
			rc = 0;
	}
	store_stmt_done(st);
	return rc;
}

static const char SQL_PLACEMENT[] =
    "SELECT" STORE_COMPUTER_PLACE_COLUMNS " FROM computers WHERE id = ?1";

/* Reads back where w lives now (lock held). */
static int store_computer_placement_locked(struct store *s, struct store_computer *w, struct err *e)
{
	struct store_stmt *st = store_stmt(s, SQL_PLACEMENT, e);
	if (!st)
		return -1;
	store_bind_text(st, 1, w->id);
	int step = store_step(st);
	if (step == STORE_ROW) {
		store_col_text(st, 0, w->host, sizeof w->host);
		w->epoch = store_col_int64(st, 1);
		w->reserved.cpu_milli = store_col_int64(st, 2);
		w->reserved.mem_mb = store_col_int64(st, 3);
		w->reserved.disk_mb = store_col_int64(st, 4);
	}
	store_stmt_done(st);
	return step == STORE_ROW ? 0 : store_db_error(s, "reading where a computer lives", e);
}

/* store_computer_commit's work inside its transaction (lock held). */
static int store_computer_commit_locked(struct store *s, struct store_computer *w,
					const struct store_commit *how, struct err *e)
{
	if (store_fence_locked(s, e))
		return -1;
	const char *except = how->insert ? "" : w->id;
	if ((how->limit > 0 || how->stopped_limit > 0) && s->pg) {
		struct store_stmt *st = store_stmt(s, SQL_WORKSPACE_LOCK, e);
		if (!st)
			return -1;
		store_bind_text(st, 1, w->workspace);
		int step = store_step(st);
		while (step == STORE_ROW)
			step = store_step(st);
		store_stmt_done(st);
		if (step != STORE_DONE)
			return store_db_error(s, "locking a workspace for its limits", e);
	}
	if (how->limit > 0 && store_computer_limit_locked(s, w->workspace, except, how->limit, e))
		return -1;
	if (how->stopped_limit > 0 &&
	    store_computer_stopped_limit_locked(s, w->workspace, except, how->stopped_limit, e))
		return -1;
	if (how->insert) {
		/* Reserve first (the row does not exist yet), then insert it
		 * where it was placed. */
		memset(w->host, 0, sizeof w->host);
		w->epoch = 0;
		memset(&w->reserved, 0, sizeof w->reserved);
		if (how->place) {
			struct store_placed at;
			if (store_place_locked(s, NULL, how->place, &at, e))
				return -1;
			snprintf(w->host, sizeof w->host, "%s", at.host);
			w->epoch = at.epoch;
			w->reserved = how->place->need;
		}
		if (store_computer_insert_locked(s, w, e))
			return -1;
	} else {
		/* The host's row before the computer's: the order the reaper
		 * takes them in, so the two never wait for each other. */
		if (how->place && store_place_locked(s, w->id, how->place, NULL, e))
			return -1;
		if (store_computer_update_locked(s, w, e))
			return -1;
	}
	/* An insert knows where it is; an update reads it back after the
	 * release its state may have made. */
	if (!how->insert && s->hosts_known &&
	    (store_release_locked(s, w->id, e) || store_computer_placement_locked(s, w, e)))
		return -1;
	if (how->bill && store_usage_switch_locked(s, w->id, w->workspace, w->size, how->rate_state,
						   how->at_ms, e))
		return -1;
	return 0;
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
	if (store_begin(s, e) == 0) {
		if (store_computer_commit_locked(s, &w, how, e) || store_commit_tx(s, e))
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
	/* One host that never placed: the one statement it always was. */
	bool tx = s->hosts_known || s->host[0];
	if (!tx || store_begin(s, e) == 0) {
		struct store_stmt *st = NULL;
		if (store_fence_locked(s, e) == 0 && (st = store_stmt(s, SQL_SET_STATE, e))) {
			store_bind_text(st, 1, id);
			store_bind_text(st, 2, state);
			store_bind_text(st, 3, msg);
			store_bind_int64(st, 4, clock_wall_ms());
			rc = store_step_change(s, st, "changing a computer's state", missing, e);
			store_stmt_done(st);
		}
		if (tx && rc == 0 && (store_release_locked(s, id, e) || store_commit_tx(s, e)))
			rc = -1;
		if (tx && rc < 0)
			store_rollback(s);
	}
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
	bool relaxed = store_relaxed_begin(s);
	struct store_stmt *st = store_stmt(s, SQL_TOUCH, e);
	if (st) {
		store_bind_text(st, 1, id);
		store_bind_int64(st, 2, now_ms);
		rc = store_step_change(s, st, "recording computer activity", missing, e);
	}
	store_stmt_done(st);
	store_relaxed_end(s, relaxed, rc == 0);
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
	struct store_stmt *st = store_stmt(s, SQL_GET, e);
	if (st) {
		store_bind_text(st, 1, id);
		store_bind_text(st, 2, workspace);
		int step = store_step(st);
		if (step == STORE_ROW)
			rc = store_computer_row(st, out, e);
		else if (step == STORE_DONE)
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
	struct store_stmt *st = store_stmt(s, SQL_LIST, e);
	if (st) {
		store_bind_text(st, 1, f->workspace);
		store_bind_text(st, 2, f->state);
		store_bind_int64(st, 3, f->include_deleted);
		store_bind_text(st, 4, f->kind);
		store_bind_text(st, 5, f->host);
		int step = STORE_DONE;
		rc = 0;
		while (rc == 0 && (step = store_step(st)) == STORE_ROW) {
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
		if (rc == 0 && step != STORE_DONE)
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
	struct store_stmt *st = store_stmt(s, SQL_COUNT_RUNNING, e);
	if (st) {
		store_bind_text(st, 1, workspace);
		if (store_step(st) == STORE_ROW) {
			*n = store_col_int64(st, 0);
			rc = 0;
		} else {
			store_db_error(s, "counting running computers", e);
		}
	}
	store_stmt_done(st);
	store_unlock(s);
	return rc;
}
