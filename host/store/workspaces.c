/*
 * store workspaces and API keys.
 *
 * A key is "ck_" + 48 hex digits (192 random bits). Only its SHA-256 is
 * stored, under a unique index, so a lookup is one index probe on the hash
 * of what was presented; the stored hash is then compared with
 * CRYPTO_memcmp so that nothing about the key's content shows in timing
 * (the hash of a wrong key has no useful relation to the right one, and
 * the comparison of the found row is constant time). A key with no
 * workspace is an admin key.
 */
#include "store-internal.h"

#include <stdio.h>
#include <string.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/rand.h>

#define STORE_KEY_PREFIX  "ck_"
#define STORE_KEY_RANDOM  24 /* bytes: 48 hex digits */
#define STORE_KEY_HASH	  32 /* SHA-256 */
#define STORE_ID_ATTEMPTS 4  /* fresh ids to try on a (64-bit) collision */

static const char SQL_WS_INSERT[] =
    "INSERT INTO workspaces (id, name, max_running, created_ms, egress_allow, egress_deny)"
    " VALUES (?1, ?2, ?3, ?4, ?5, ?6)";
static const char SQL_WS_GET[] = "SELECT id, name, max_running, created_ms, egress_allow,"
				 " egress_deny FROM workspaces WHERE id = ?1";
static const char SQL_WS_LIST[] = "SELECT id, name, max_running, created_ms, egress_allow,"
				  " egress_deny FROM workspaces ORDER BY created_ms, rowid";
static const char SQL_WS_SET_EGRESS[] =
    "UPDATE workspaces SET egress_allow = coalesce(?2, egress_allow),"
    " egress_deny = coalesce(?3, egress_deny) WHERE id = ?1";
static const char SQL_KEY_INSERT[] =
    "INSERT INTO api_keys (hash, workspace, created_ms) VALUES (?1, ?2, ?3)";
static const char SQL_KEY_LOOKUP[] =
    "SELECT hash, workspace, revoked_ms FROM api_keys WHERE hash = ?1";
static const char SQL_KEY_REVOKE[] =
    "UPDATE api_keys SET revoked_ms = CASE WHEN revoked_ms = 0 THEN ?2 ELSE revoked_ms END"
    " WHERE hash = ?1";

static void store_workspace_row(sqlite3_stmt *st, struct store_workspace *out)
{
	store_col_text(st, 0, out->id, sizeof out->id);
	store_col_text(st, 1, out->name, sizeof out->name);
	out->max_running = sqlite3_column_int(st, 2);
	out->created_ms = sqlite3_column_int64(st, 3);
	store_col_text(st, 4, out->egress_allow, sizeof out->egress_allow);
	store_col_text(st, 5, out->egress_deny, sizeof out->egress_deny);
}

/* A comma-separated list as a JSON array of strings. */
static json_t *store_csv_json(const char *csv)
{
	json_t *a = json_array();
	while (a && *csv) {
		size_t n = strcspn(csv, ",");
		if (n)
			json_array_append_new(a, json_stringn(csv, n));
		csv += n;
		if (*csv == ',')
			csv++;
	}
	return a;
}

json_t *store_workspace_json(const struct store_workspace *w)
{
	return json_pack("{s:s, s:s, s:i, s:I, s:o, s:o}", "id", w->id, "name", w->name,
			 "max_running", w->max_running, "created_at", (json_int_t)w->created_ms,
			 "egress_allow", store_csv_json(w->egress_allow), "egress_deny",
			 store_csv_json(w->egress_deny));
}

static int store_egress_fits(const char *list, const char *param, struct err *e)
{
	if (list && !store_fits(list, STORE_EGRESS_LEN))
		return err_param(e, param, "%s: longer than %d bytes", param, STORE_EGRESS_LEN - 1);
	return 0;
}

int store_workspace_create(struct store *s, const char *name, int max_running,
			   struct store_workspace *out, struct err *e)
{
	return store_workspace_create_egress(s, name, max_running, NULL, NULL, out, e);
}

int store_workspace_create_egress(struct store *s, const char *name, int max_running,
				  const char *egress_allow, const char *egress_deny,
				  struct store_workspace *out, struct err *e)
{
	struct store_workspace w = {0};
	if (store_egress_fits(egress_allow, "egress_allow", e) < 0 ||
	    store_egress_fits(egress_deny, "egress_deny", e) < 0)
		return -1;
	snprintf(w.egress_allow, sizeof w.egress_allow, "%s", egress_allow ? egress_allow : "");
	snprintf(w.egress_deny, sizeof w.egress_deny, "%s", egress_deny ? egress_deny : "");
	if (!name || !*name)
		return err_param(e, "name", "name: a workspace needs a non-empty name");
	if (!store_fits(name, sizeof w.name))
		return err_param(e, "name", "name: longer than %zu bytes", sizeof w.name - 1);
	if (max_running < 0)
		return err_param(e, "max_running",
				 "max_running: %d is negative (0 means the server default)",
				 max_running);
	snprintf(w.name, sizeof w.name, "%s", name);
	w.max_running = max_running;
	w.created_ms = store_now_ms();

	int rc = -1, step = 0;
	store_lock(s);
	for (int attempt = 0; attempt < STORE_ID_ATTEMPTS; attempt++) {
		if (store_random_id("ws-", w.id, sizeof w.id, e))
			break;
		sqlite3_stmt *st = store_stmt(s, SQL_WS_INSERT, e);
		if (!st)
			break;
		sqlite3_bind_text(st, 1, w.id, -1, SQLITE_STATIC);
		sqlite3_bind_text(st, 2, w.name, -1, SQLITE_STATIC);
		sqlite3_bind_int(st, 3, w.max_running);
		sqlite3_bind_int64(st, 4, w.created_ms);
		sqlite3_bind_text(st, 5, w.egress_allow, -1, SQLITE_STATIC);
		sqlite3_bind_text(st, 6, w.egress_deny, -1, SQLITE_STATIC);
		step = sqlite3_step(st);
		if (step == SQLITE_DONE) {
			rc = 0;
		} else if (step != SQLITE_CONSTRAINT_PRIMARYKEY) {
			store_db_error(s, "creating a workspace", e);
		}
		store_stmt_done(st);
		if (step != SQLITE_CONSTRAINT_PRIMARYKEY)
			break;
	}
	store_unlock(s);
	if (rc != 0 && step == SQLITE_CONSTRAINT_PRIMARYKEY)
		err_set(e, ERR_INTERNAL, "could not find a free workspace id");
	if (rc == 0 && out)
		*out = w;
	return rc;
}

int store_workspace_get(struct store *s, const char *id, struct store_workspace *out, struct err *e)
{
	if (!id || !*id)
		return err_param(e, "workspace", "workspace: the workspace id is empty");
	store_lock(s);
	int rc = -1;
	sqlite3_stmt *st = store_stmt(s, SQL_WS_GET, e);
	if (st) {
		sqlite3_bind_text(st, 1, id, -1, SQLITE_STATIC);
		int step = sqlite3_step(st);
		if (step == SQLITE_ROW) {
			struct store_workspace w = {0};
			store_workspace_row(st, &w);
			if (out)
				*out = w;
			rc = 0;
		} else if (step == SQLITE_DONE) {
			err_set(e, ERR_NOT_FOUND, "no workspace %.64s", id);
		} else {
			store_db_error(s, "reading a workspace", e);
		}
	}
	store_stmt_done(st);
	store_unlock(s);
	return rc;
}

int store_workspace_list(struct store *s, json_t **out, struct err *e)
{
	json_t *list = json_array();
	if (!list)
		return err_set(e, ERR_INTERNAL, "out of memory listing workspaces");
	store_lock(s);
	int rc = -1;
	sqlite3_stmt *st = store_stmt(s, SQL_WS_LIST, e);
	if (st) {
		int step;
		while ((step = sqlite3_step(st)) == SQLITE_ROW) {
			struct store_workspace w = {0};
			store_workspace_row(st, &w);
			json_array_append_new(list, store_workspace_json(&w));
		}
		if (step == SQLITE_DONE)
			rc = 0;
		else
			store_db_error(s, "listing workspaces", e);
	}
	store_stmt_done(st);
	store_unlock(s);
	if (rc == 0)
		*out = list;
	else
		json_decref(list);
	return rc;
}

int store_workspace_set_egress(struct store *s, const char *id, const char *egress_allow,
			       const char *egress_deny, struct err *e)
{
	if (!id || !*id)
		return err_param(e, "workspace", "workspace: the workspace id is empty");
	if (store_egress_fits(egress_allow, "egress_allow", e) < 0 ||
	    store_egress_fits(egress_deny, "egress_deny", e) < 0)
		return -1;
	store_lock(s);
	int rc = -1;
	sqlite3_stmt *st = store_stmt(s, SQL_WS_SET_EGRESS, e);
	if (st) {
		sqlite3_bind_text(st, 1, id, -1, SQLITE_STATIC);
		if (egress_allow)
			sqlite3_bind_text(st, 2, egress_allow, -1, SQLITE_STATIC);
		if (egress_deny)
			sqlite3_bind_text(st, 3, egress_deny, -1, SQLITE_STATIC);
		rc = store_step_change(s, st, "changing a workspace's egress policy",
				       "no such workspace", e);
	}
	store_stmt_done(st);
	store_unlock(s);
	return rc;
}

static int store_key_hash(const char *key, unsigned char hash[STORE_KEY_HASH], struct err *e)
{
	unsigned int len = 0;
	if (EVP_Digest(key, strlen(key), hash, &len, EVP_sha256(), NULL) != 1 ||
	    len != STORE_KEY_HASH)
		return err_set(e, ERR_INTERNAL, "SHA-256 of the API key failed (OpenSSL)");
	return 0;
}

/* Whether workspace id exists; -1 with e filled on a database error. */
static int store_workspace_exists(struct store *s, const char *id, struct err *e)
{
	sqlite3_stmt *st = store_stmt(s, SQL_WS_GET, e);
	if (!st)
		return -1;
	sqlite3_bind_text(st, 1, id, -1, SQLITE_STATIC);
	int step = sqlite3_step(st);
	store_stmt_done(st);
	if (step == SQLITE_ROW)
		return 1;
	if (step == SQLITE_DONE)
		return 0;
	return store_db_error(s, "reading a workspace", e);
}

int store_key_create(struct store *s, const char *workspace_id, char key_out[64], struct err *e)
{
	if (workspace_id && !*workspace_id)
		return err_param(e, "workspace",
				 "workspace: empty (pass no workspace for an admin key)");
	unsigned char raw[STORE_KEY_RANDOM];
	if (RAND_bytes(raw, sizeof raw) != 1)
		return err_set(e, ERR_INTERNAL, "the random generator failed (RAND_bytes)");
	char key[64];
	size_t n = strlen(STORE_KEY_PREFIX);
	memcpy(key, STORE_KEY_PREFIX, n);
	for (size_t i = 0; i < sizeof raw; i++)
		snprintf(key + n + 2 * i, 3, "%02x", raw[i]);
	OPENSSL_cleanse(raw, sizeof raw);
	unsigned char hash[STORE_KEY_HASH];
	if (store_key_hash(key, hash, e)) {
		OPENSSL_cleanse(key, sizeof key);
		return -1;
	}

	store_lock(s);
	int rc = -1;
	sqlite3_stmt *st = NULL;
	int exists = workspace_id ? store_workspace_exists(s, workspace_id, e) : 1;
	if (exists == 0)
		err_set(e, ERR_NOT_FOUND, "no workspace %.64s", workspace_id);
	if (exists == 1 && (st = store_stmt(s, SQL_KEY_INSERT, e))) {
		sqlite3_bind_blob(st, 1, hash, sizeof hash, SQLITE_STATIC);
		if (workspace_id)
			sqlite3_bind_text(st, 2, workspace_id, -1, SQLITE_STATIC);
		else
			sqlite3_bind_null(st, 2);
		sqlite3_bind_int64(st, 3, store_now_ms());
		if (sqlite3_step(st) == SQLITE_DONE)
			rc = 0;
		else
			store_db_error(s, "storing an API key", e);
	}
	store_stmt_done(st);
	store_unlock(s);
	if (rc == 0)
		memcpy(key_out, key, sizeof key);
	OPENSSL_cleanse(key, sizeof key);
	return rc;
}

int store_key_lookup(struct store *s, const char *key, char workspace_out[40], bool *admin,
		     struct err *e)
{
	unsigned char hash[STORE_KEY_HASH];
	if (!key || !*key || strnlen(key, 1024) >= 1024)
		return err_set(e, ERR_UNAUTHORIZED, "missing or malformed API key");
	if (store_key_hash(key, hash, e))
		return -1;

	store_lock(s);
	int rc = -1;
	sqlite3_stmt *st = store_stmt(s, SQL_KEY_LOOKUP, e);
	if (st) {
		sqlite3_bind_blob(st, 1, hash, sizeof hash, SQLITE_STATIC);
		int step = sqlite3_step(st);
		if (step == SQLITE_ROW) {
			const void *stored = sqlite3_column_blob(st, 0);
			int stored_len = sqlite3_column_bytes(st, 0);
			bool same = stored && stored_len == STORE_KEY_HASH &&
				    CRYPTO_memcmp(stored, hash, STORE_KEY_HASH) == 0;
			if (same && sqlite3_column_int64(st, 2) == 0) {
				bool is_admin = sqlite3_column_type(st, 1) == SQLITE_NULL;
				if (workspace_out)
					store_col_text(st, 1, workspace_out, 40);
				if (admin)
					*admin = is_admin;
				rc = 0;
			}
		} else if (step != SQLITE_DONE) {
			store_db_error(s, "looking up an API key", e);
			step = -1;
		}
		if (rc != 0 && step != -1)
			err_set(e, ERR_UNAUTHORIZED,
				"the API key is not valid (unknown or revoked)");
	}
	store_stmt_done(st);
	store_unlock(s);
	return rc;
}

int store_key_revoke(struct store *s, const char *key, struct err *e)
{
	unsigned char hash[STORE_KEY_HASH];
	if (!key || !*key)
		return err_param(e, "key", "key: empty");
	if (store_key_hash(key, hash, e))
		return -1;
	store_lock(s);
	int rc = -1;
	sqlite3_stmt *st = store_stmt(s, SQL_KEY_REVOKE, e);
	if (st) {
		sqlite3_bind_blob(st, 1, hash, sizeof hash, SQLITE_STATIC);
		sqlite3_bind_int64(st, 2, store_now_ms());
		rc = store_step_change(s, st, "revoking an API key", "no such API key", e);
	}
	store_stmt_done(st);
	store_unlock(s);
	return rc;
}
