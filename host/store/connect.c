/*
 * connect tokens: what makes a machine you bring (store.h, docs/byo.md).
 */
#include "store-internal.h"

#include <stdlib.h>
#include <string.h>

static const char SQL_CT_INSERT[] =
    "INSERT INTO connect_tokens (id, workspace, kind, name, metadata, digest, created_ms,"
    " expires_ms) VALUES (?, ?, ?, ?, ?, ?, ?, ?)";
static const char SQL_CT_REDEEM[] = "UPDATE connect_tokens SET used_ms = ?3 WHERE id = ?1 AND"
				    " digest = ?2 AND used_ms = 0 AND expires_ms > ?3";
static const char SQL_CT_GET[] =
    "SELECT id, workspace, kind, name, metadata, digest, created_ms, expires_ms, used_ms,"
    " computer FROM connect_tokens WHERE id = ?";
static const char SQL_CT_SET_COMPUTER[] = "UPDATE connect_tokens SET computer = ? WHERE id = ?";
static const char SQL_CT_PRUNE[] = "DELETE FROM connect_tokens WHERE expires_ms < ?";

int store_connect_token_insert(struct store *s, const struct store_connect_token *t, struct err *e)
{
	char *meta = t->metadata ? json_dumps(t->metadata, JSON_COMPACT) : strdup("{}");
	if (!meta)
		return err_set(e, ERR_INTERNAL, "out of memory");
	store_lock(s);
	int rc = -1;
	struct store_stmt *st = store_stmt(s, SQL_CT_INSERT, e);
	if (st) {
		store_bind_text(st, 1, t->id);
		store_bind_text(st, 2, t->workspace);
		store_bind_text(st, 3, t->kind);
		store_bind_text(st, 4, t->name);
		store_bind_text(st, 5, meta);
		store_bind_text(st, 6, t->digest);
		store_bind_int64(st, 7, t->created_ms);
		store_bind_int64(st, 8, t->expires_ms);
		rc = store_step(st) == STORE_DONE
			 ? 0
			 : store_db_error(s, "recording a connect token", e);
	}
	store_stmt_done(st);
	store_unlock(s);
	free(meta);
	return rc;
}

int store_connect_token_redeem(struct store *s, const char *id, const char *digest, int64_t now_ms,
			       struct store_connect_token *t, struct err *e)
{
	memset(t, 0, sizeof *t);
	store_lock(s);
	int rc = -1;
	struct store_stmt *st = store_stmt(s, SQL_CT_REDEEM, e);
	if (st) {
		store_bind_text(st, 1, id);
		store_bind_text(st, 2, digest);
		store_bind_int64(st, 3, now_ms);
		if (store_step(st) != STORE_DONE)
			store_db_error(s, "redeeming a connect token", e);
		else if (store_changes(st) != 1)
			err_set(e, ERR_UNAUTHORIZED,
				"the connect token is not valid: unknown, used, or expired");
		else
			rc = 0;
	}
	store_stmt_done(st);
	if (rc == 0) {
		rc = -1;
		st = store_stmt(s, SQL_CT_GET, e);
		if (st) {
			store_bind_text(st, 1, id);
			if (store_step(st) == STORE_ROW) {
				store_col_text(st, 0, t->id, sizeof t->id);
				store_col_text(st, 1, t->workspace, sizeof t->workspace);
				store_col_text(st, 2, t->kind, sizeof t->kind);
				store_col_text(st, 3, t->name, sizeof t->name);
				const char *m = store_col_str(st, 4);
				t->metadata = m ? json_loads(m, 0, NULL) : NULL;
				if (!json_is_object(t->metadata)) {
					json_decref(t->metadata);
					t->metadata = json_object();
				}
				store_col_text(st, 5, t->digest, sizeof t->digest);
				t->created_ms = store_col_int64(st, 6);
				t->expires_ms = store_col_int64(st, 7);
				t->used_ms = store_col_int64(st, 8);
				store_col_text(st, 9, t->computer, sizeof t->computer);
				rc = 0;
			} else {
				store_db_error(s, "reading a connect token", e);
			}
		}
		store_stmt_done(st);
	}
	store_unlock(s);
	return rc;
}

int store_connect_token_set_computer(struct store *s, const char *id, const char *computer,
				     struct err *e)
{
	store_lock(s);
	int rc = -1;
	struct store_stmt *st = store_stmt(s, SQL_CT_SET_COMPUTER, e);
	if (st) {
		store_bind_text(st, 1, computer);
		store_bind_text(st, 2, id);
		rc = store_step_change(s, st, "recording a connect token's machine",
				       "no such connect token", e);
	}
	store_stmt_done(st);
	store_unlock(s);
	return rc;
}

int store_connect_tokens_prune(struct store *s, int64_t before_ms, struct err *e)
{
	store_lock(s);
	int rc = -1;
	struct store_stmt *st = store_stmt(s, SQL_CT_PRUNE, e);
	if (st) {
		store_bind_int64(st, 1, before_ms);
		rc = store_step(st) == STORE_DONE ? 0
						  : store_db_error(s, "pruning connect tokens", e);
	}
	store_stmt_done(st);
	store_unlock(s);
	return rc;
}
