/*
 * templates: the templates table (store-templates.h).
 */
#include "store-internal.h"
#include "store-templates.h"
#include "clock.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define STORE_TEMPLATE_COLUMNS                                                                     \
	"id, workspace, name, base, recipe, layer_key, image, state, error, size_bytes,"           \
	" build_ms, builtin, build, created_ms, updated_ms"

static const char SQL_INSERT[] = "INSERT INTO templates (" STORE_TEMPLATE_COLUMNS ")"
				 " VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12,"
				 " ?13, ?14, ?15) ON CONFLICT (id) DO NOTHING";
static const char SQL_UPDATE[] =
    "UPDATE templates SET base = ?4, recipe = ?5, layer_key = ?6, image = ?7, state = ?8,"
    " error = ?9, size_bytes = ?10, build_ms = ?11, builtin = ?12, build = ?13,"
    " updated_ms = ?15 WHERE id = ?1";
static const char SQL_GET[] = "SELECT " STORE_TEMPLATE_COLUMNS " FROM templates WHERE id = ?1";
/* Its own first, then the global one ('' sorts first, hence DESC). */
static const char SQL_FIND[] = "SELECT " STORE_TEMPLATE_COLUMNS " FROM templates"
			       " WHERE name = ?2 AND (workspace = ?1 OR workspace = '')"
			       " ORDER BY workspace DESC LIMIT 1";
static const char SQL_LIST[] = "SELECT " STORE_TEMPLATE_COLUMNS " FROM templates"
			       " WHERE ?1 IS NULL OR workspace = ?1 OR workspace = ''"
			       " ORDER BY created_ms, rowid";
static const char SQL_CLASH[] = "SELECT workspace FROM templates WHERE name = ?2"
				" AND (workspace = ?1 OR workspace = '') LIMIT 1";
static const char SQL_COUNT[] = "SELECT COUNT(*) FROM templates WHERE workspace = ?1";
static const char SQL_USERS[] = "SELECT id, (SELECT COUNT(*) FROM computers WHERE template = ?1"
				" AND state <> 'deleted') FROM computers WHERE template = ?1"
				" AND state <> 'deleted' ORDER BY created_ms LIMIT 1";
static const char SQL_DELETE[] = "DELETE FROM templates WHERE id = ?1";
/* PostgreSQL only (SQLite's BEGIN IMMEDIATE already serialises every
 * write): the template's row, held until the commit, so that a computer's
 * create from it (which takes the same row, computers.c) runs wholly before
 * or after the delete counts the template's computers; and the
 * workspace's row, so that two hosts' creates count its templates one
 * after the other. */
static const char SQL_LOCK[] = "SELECT 1 FROM templates WHERE id = ?1 FOR UPDATE";
static const char SQL_WORKSPACE_LOCK[] = "SELECT 1 FROM workspaces WHERE id = ?1 FOR UPDATE";

#define STORE_ID_ATTEMPTS 4

static const char *const store_template_states[] = {
    [TEMPLATE_BUILDING] = "building", [TEMPLATE_READY] = "ready", [TEMPLATE_ERROR] = "error"};

const char *template_state_name(enum template_state s)
{
	return (unsigned)s <= TEMPLATE_ERROR ? store_template_states[s] : "?";
}

int template_state_parse(const char *name, enum template_state *out)
{
	for (int i = 0; name && i <= TEMPLATE_ERROR; i++)
		if (strcmp(name, store_template_states[i]) == 0) {
			*out = (enum template_state)i;
			return 0;
		}
	return -1;
}

void store_template_clear(struct store_template *t)
{
	if (!t)
		return;
	free(t->recipe);
	json_decref(t->build);
	t->recipe = NULL;
	t->build = NULL;
}

/* Binds every column of t in STORE_TEMPLATE_COLUMNS order. */
static int store_template_bind(struct store_stmt *st, const struct store_template *t, struct err *e)
{
	char *build = t->build && json_object_size(t->build) ? json_dumps(t->build, JSON_COMPACT)
							     : strdup("{}");
	if (!build)
		return err_set(e, ERR_INTERNAL, "out of memory encoding template %s", t->id);
	store_bind_text(st, 1, t->id);
	store_bind_text(st, 2, t->workspace);
	store_bind_text(st, 3, t->name);
	store_bind_text(st, 4, t->base);
	store_bind_text(st, 5, t->recipe ? t->recipe : "{}");
	store_bind_text(st, 6, t->layer_key);
	store_bind_text(st, 7, t->image);
	store_bind_text(st, 8, template_state_name(t->state));
	store_bind_text(st, 9, t->error);
	store_bind_int64(st, 10, t->size_bytes);
	store_bind_int64(st, 11, t->build_ms);
	store_bind_int64(st, 12, t->builtin ? 1 : 0);
	store_bind_text_owned(st, 13, build);
	store_bind_int64(st, 14, t->created_ms);
	store_bind_int64(st, 15, t->updated_ms);
	return 0;
}

static int store_template_row(struct store_stmt *st, struct store_template *out, struct err *e)
{
	struct store_template t;
	memset(&t, 0, sizeof t);
	store_col_text(st, 0, t.id, sizeof t.id);
	store_col_text(st, 1, t.workspace, sizeof t.workspace);
	store_col_text(st, 2, t.name, sizeof t.name);
	store_col_text(st, 3, t.base, sizeof t.base);
	const char *recipe = store_col_str(st, 4);
	t.recipe = strdup(recipe ? recipe : "{}");
	store_col_text(st, 5, t.layer_key, sizeof t.layer_key);
	store_col_text(st, 6, t.image, sizeof t.image);
	char state[16];
	store_col_text(st, 7, state, sizeof state);
	store_col_text(st, 8, t.error, sizeof t.error);
	t.size_bytes = store_col_int64(st, 9);
	t.build_ms = store_col_int64(st, 10);
	t.builtin = store_col_int64(st, 11) != 0;
	const char *build = store_col_str(st, 12);
	t.build = json_loads(build ? build : "{}", 0, NULL);
	t.created_ms = store_col_int64(st, 13);
	t.updated_ms = store_col_int64(st, 14);
	if (!t.recipe || !json_is_object(t.build) || template_state_parse(state, &t.state) < 0) {
		store_template_clear(&t);
		return err_set(e, ERR_INTERNAL, "template %s has a corrupt row in the database",
			       t.id);
	}
	*out = t;
	return 0;
}

static int store_template_check(const struct store_template *t, struct err *e)
{
	if (!store_fits(t->workspace, sizeof t->workspace) ||
	    !store_fits(t->name, sizeof t->name) || !t->name[0] ||
	    !store_fits(t->base, sizeof t->base) ||
	    !store_fits(t->layer_key, sizeof t->layer_key) ||
	    !store_fits(t->image, sizeof t->image) || !store_fits(t->error, sizeof t->error))
		return err_param(e, "template", "template: a field is not terminated");
	if ((unsigned)t->state > TEMPLATE_ERROR)
		return err_param(e, "state", "state: %d is not a template state", (int)t->state);
	return 0;
}

/* ERR_CONFLICT when the name is taken for t's workspace (lock held). */
static int store_template_clash_locked(struct store *s, const struct store_template *t,
				       struct err *e)
{
	struct store_stmt *st = store_stmt(s, SQL_CLASH, e);
	if (!st)
		return -1;
	store_bind_text(st, 1, t->workspace);
	store_bind_text(st, 2, t->name);
	int step = store_step(st);
	char owner[40] = "";
	if (step == STORE_ROW)
		store_col_text(st, 0, owner, sizeof owner);
	store_stmt_done(st);
	if (step == STORE_ROW)
		return err_set(e, ERR_CONFLICT, "%s template %s already exists%s",
			       owner[0] ? "a" : "a global", t->name,
			       owner[0] ? "; delete it first or pick another name"
					: " (pick another name)");
	if (step != STORE_DONE)
		return store_db_error(s, "reading templates", e);
	return 0;
}

static int store_template_limit_locked(struct store *s, const char *ws, int limit, struct err *e)
{
	struct store_stmt *st = store_stmt(s, SQL_COUNT, e);
	if (!st)
		return -1;
	store_bind_text(st, 1, ws);
	int step = store_step(st);
	int64_t n = step == STORE_ROW ? store_col_int64(st, 0) : 0;
	store_stmt_done(st);
	if (step != STORE_ROW)
		return store_db_error(s, "counting templates", e);
	if (n >= limit)
		return err_set(e, ERR_LIMIT,
			       "workspace %s already has %lld templates, the most "
			       "--max-templates-per-workspace allows; delete one first",
			       ws, (long long)n);
	return 0;
}

/* Holds the row `id` of the statement `lock` until the commit (PostgreSQL;
 * nothing on SQLite, whose write lock already serialises): 0, or -1 with e. */
static int store_template_hold_locked(struct store *s, const char *lock, const char *id,
				      struct err *e)
{
	if (!s->pg)
		return 0;
	struct store_stmt *st = store_stmt(s, lock, e);
	if (!st)
		return -1;
	store_bind_text(st, 1, id);
	int step;
	while ((step = store_step(st)) == STORE_ROW)
		;
	store_stmt_done(st);
	return step == STORE_DONE ? 0 : store_db_error(s, "locking a row", e);
}

/* Inserts w with a fresh id (written into w) (transaction open). */
static int store_template_insert_locked(struct store *s, struct store_template *w, struct err *e)
{
	for (int attempt = 0; attempt < STORE_ID_ATTEMPTS; attempt++) {
		struct store_stmt *st = NULL;
		if (store_random_id("tpl-", w->id, sizeof w->id, e) < 0 ||
		    !(st = store_stmt(s, SQL_INSERT, e)))
			return -1;
		if (store_template_bind(st, w, e) < 0) {
			store_stmt_done(st);
			return -1;
		}
		int step = store_step(st);
		int64_t inserted = store_changes(st);
		store_stmt_done(st);
		/* An id collision inserts nothing (ON CONFLICT); only (workspace,
		 * name) is left to clash on: another host made the name between
		 * the check and this insert. */
		if (step == STORE_ERR_UNIQUE)
			return err_set(e, ERR_CONFLICT, "a template %s already exists", w->name);
		if (step != STORE_DONE)
			return store_db_error(s, "creating a template", e);
		if (inserted == 1)
			return 0;
	}
	return err_set(e, ERR_INTERNAL, "could not find a free template id");
}

int store_template_insert(struct store *s, struct store_template *t, int limit, struct err *e)
{
	if (store_template_check(t, e) < 0)
		return -1;
	struct store_template w = *t;
	w.created_ms = w.updated_ms = clock_wall_ms();
	int rc = -1;
	store_lock(s);
	if (store_begin(s, e) == 0) {
		rc = w.workspace[0]
			 ? store_template_hold_locked(s, SQL_WORKSPACE_LOCK, w.workspace, e)
			 : 0;
		if (rc == 0)
			rc = store_template_clash_locked(s, &w, e);
		if (rc == 0 && limit > 0 && w.workspace[0])
			rc = store_template_limit_locked(s, w.workspace, limit, e);
		if (rc == 0)
			rc = store_template_insert_locked(s, &w, e);
		if (rc == 0 && store_commit_tx(s, e) < 0)
			rc = -1;
		if (rc < 0)
			store_rollback(s);
	}
	store_unlock(s);
	if (rc == 0) {
		memcpy(t->id, w.id, sizeof t->id);
		t->created_ms = w.created_ms;
		t->updated_ms = w.updated_ms;
	}
	return rc;
}

int store_template_update(struct store *s, const struct store_template *t, struct err *e)
{
	if (store_template_check(t, e) < 0)
		return -1;
	struct store_template w = *t;
	w.updated_ms = clock_wall_ms();
	int rc = -1;
	store_lock(s);
	struct store_stmt *st = store_stmt(s, SQL_UPDATE, e);
	if (st && store_template_bind(st, &w, e) == 0)
		rc = store_step_change(s, st, "updating a template", "the template is gone", e);
	store_stmt_done(st);
	store_unlock(s);
	return rc;
}

/* One row of a statement with ?1 (and ?2) bound; ERR_NOT_FOUND `missing`. */
static int store_template_one(struct store *s, const char *sql, const char *a, const char *b,
			      const char *missing, struct store_template *out, struct err *e)
{
	int rc = -1;
	store_lock(s);
	struct store_stmt *st = store_stmt(s, sql, e);
	if (st) {
		store_bind_text(st, 1, a);
		if (b)
			store_bind_text(st, 2, b);
		int step = store_step(st);
		if (step == STORE_ROW)
			rc = store_template_row(st, out, e);
		else if (step == STORE_DONE)
			err_set(e, ERR_NOT_FOUND, "%s", missing);
		else
			store_db_error(s, "reading a template", e);
	}
	store_stmt_done(st);
	store_unlock(s);
	return rc;
}

int store_template_get(struct store *s, const char *id, struct store_template *out, struct err *e)
{
	char missing[80];
	snprintf(missing, sizeof missing, "no template %.40s", id);
	return store_template_one(s, SQL_GET, id, NULL, missing, out, e);
}

int store_template_find(struct store *s, const char *ws, const char *name,
			struct store_template *out, struct err *e)
{
	char missing[100];
	snprintf(missing, sizeof missing, "no template %.63s", name);
	return store_template_one(s, SQL_FIND, ws ? ws : "", name, missing, out, e);
}

int store_template_list(struct store *s, const char *ws, struct store_template **out, size_t *n,
			struct err *e)
{
	*out = NULL;
	*n = 0;
	size_t cap = 0;
	int rc = -1;
	store_lock(s);
	struct store_stmt *st = store_stmt(s, SQL_LIST, e);
	if (st) {
		store_bind_text(st, 1, ws);
		int step = STORE_DONE;
		rc = 0;
		while (rc == 0 && (step = store_step(st)) == STORE_ROW) {
			if (*n == cap) {
				cap = cap ? cap * 2 : 16;
				struct store_template *more = realloc(*out, cap * sizeof **out);
				if (!more) {
					rc = err_set(e, ERR_INTERNAL, "out of memory");
					break;
				}
				*out = more;
			}
			if ((rc = store_template_row(st, &(*out)[*n], e)) == 0)
				(*n)++;
		}
		if (rc == 0 && step != STORE_DONE)
			rc = store_db_error(s, "listing templates", e);
	}
	store_stmt_done(st);
	store_unlock(s);
	if (rc < 0) {
		for (size_t i = 0; i < *n; i++)
			store_template_clear(&(*out)[i]);
		free(*out);
		*out = NULL;
		*n = 0;
	}
	return rc;
}

int store_template_delete(struct store *s, const char *id, struct err *e)
{
	int rc = -1;
	store_lock(s);
	if (store_begin(s, e) == 0) {
		struct store_stmt *st = NULL;
		if (store_template_hold_locked(s, SQL_LOCK, id, e) == 0 &&
		    (st = store_stmt(s, SQL_USERS, e))) {
			store_bind_text(st, 1, id);
			int step = store_step(st);
			char user[40] = "";
			int count = 0;
			if (step == STORE_ROW) {
				store_col_text(st, 0, user, sizeof user);
				count = (int)store_col_int64(st, 1);
			}
			store_stmt_done(st);
			if (step == STORE_ROW)
				err_set(e, ERR_CONFLICT,
					"the template is in use by computer %s%s%.0d%s; delete %s "
					"first",
					user, count > 1 ? " and " : "", count > 1 ? count - 1 : 0,
					count > 1 ? " more" : "", count > 1 ? "them" : "it");
			else if (step != STORE_DONE)
				store_db_error(s, "reading a template's computers", e);
			else if ((st = store_stmt(s, SQL_DELETE, e))) {
				store_bind_text(st, 1, id);
				rc = store_step_change(s, st, "deleting a template",
						       "the template is gone", e);
				store_stmt_done(st);
			}
		}
		if (rc == 0 && store_commit_tx(s, e) < 0)
			rc = -1;
		if (rc < 0)
			store_rollback(s);
	}
	store_unlock(s);
	return rc;
}
