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
 *
 * Lookups never touch the database: the valid keys (SQL_KEYS_VALID) are
 * kept in memory, sorted by hash, and rebuilt whenever a call here changed
 * who may authenticate (store_keys_changed; the rebuild runs in
 * store_unlock, on the thread that made the change, before its call
 * returns), so a revoked key fails from the moment its revoke returns.
 * With PostgreSQL other hosts change api_keys too: a trigger NOTIFYs
 * every host's listener, which rebuilds its table (db-pg.c).
 */
#include "store-internal.h"
#include "clock.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/rand.h>

#define STORE_KEY_PREFIX	"ck_"
#define STORE_KEY_RANDOM	24    /* bytes: 48 hex digits */
#define STORE_KEY_HASH		32    /* SHA-256 */
#define STORE_ID_ATTEMPTS	4     /* fresh ids to try on a (64-bit) collision */
#define STORE_KEY_USED_EVERY_MS 60000 /* last_used_ms is written at most this often */

static const char SQL_WS_INSERT[] =
    "INSERT INTO workspaces (id, name, max_running, created_ms, egress_allow, egress_deny)"
    " VALUES (?1, ?2, ?3, ?4, ?5, ?6)";
static const char SQL_WS_GET[] =
    "SELECT id, name, max_running, created_ms, max_stopped, egress_allow, egress_deny"
    " FROM workspaces WHERE id = ?1 AND deleted_ms = 0";
static const char SQL_WS_LIST[] =
    "SELECT id, name, max_running, created_ms, max_stopped, egress_allow, egress_deny"
    " FROM workspaces WHERE deleted_ms = 0 ORDER BY created_ms, rowid";
static const char SQL_WS_SET_MAX_STOPPED[] = "UPDATE workspaces SET max_stopped = ?2 WHERE id = ?1";
static const char SQL_WS_SET_EGRESS[] =
    "UPDATE workspaces SET egress_allow = coalesce(?2, egress_allow),"
    " egress_deny = coalesce(?3, egress_deny) WHERE id = ?1";
static const char SQL_KEY_INSERT[] = "INSERT INTO api_keys (hash, workspace, created_ms, prefix)"
				     " VALUES (?1, ?2, ?3, ?4) RETURNING id";
static const char SQL_KEY_USED[] = "UPDATE api_keys SET last_used_ms = ?2 WHERE id = ?1";
static const char SQL_KEY_LIST[] = "SELECT id, prefix, created_ms, last_used_ms FROM api_keys"
				   " WHERE workspace = ?1 AND revoked_ms = 0 ORDER BY id";
static const char SQL_KEY_REVOKE_ID[] =
    "UPDATE api_keys SET revoked_ms = ?3 WHERE id = ?1 AND workspace = ?2 AND revoked_ms = 0";
static const char SQL_KEY_REVOKE_WS[] =
    "UPDATE api_keys SET revoked_ms = ?2 WHERE workspace = ?1 AND revoked_ms = 0";
static const char SQL_WS_DELETE[] =
    "UPDATE workspaces SET deleted_ms = ?2 WHERE id = ?1 AND deleted_ms = 0";
/* The keys that authenticate, which store_key_lookup answers from memory:
 * extend this query when a key's validity comes to depend on more. */
static const char SQL_KEYS_VALID[] =
    "SELECT hash, workspace, id, last_used_ms FROM api_keys WHERE revoked_ms = 0";
static const char SQL_KEY_REVOKE[] =
    "UPDATE api_keys SET revoked_ms = CASE WHEN revoked_ms = 0 THEN ?2 ELSE revoked_ms END"
    " WHERE hash = ?1";

static void store_workspace_row(struct store_stmt *st, struct store_workspace *out)
{
	store_col_text(st, 0, out->id, sizeof out->id);
	store_col_text(st, 1, out->name, sizeof out->name);
	out->max_running = store_col_int64(st, 2);
	out->created_ms = store_col_int64(st, 3);
	out->max_stopped = store_col_int64(st, 4);
	store_col_text(st, 5, out->egress_allow, sizeof out->egress_allow);
	store_col_text(st, 6, out->egress_deny, sizeof out->egress_deny);
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
	return json_pack("{s:s, s:s, s:i, s:i, s:I, s:o, s:o}", "id", w->id, "name", w->name,
			 "max_running", w->max_running, "max_stopped", w->max_stopped, "created_at",
			 (json_int_t)w->created_ms, "egress_allow", store_csv_json(w->egress_allow),
			 "egress_deny", store_csv_json(w->egress_deny));
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
	w.created_ms = clock_wall_ms();

	int rc = -1, step = 0;
	store_lock(s);
	for (int attempt = 0; attempt < STORE_ID_ATTEMPTS; attempt++) {
		if (store_random_id("ws-", w.id, sizeof w.id, e))
			break;
		struct store_stmt *st = store_stmt(s, SQL_WS_INSERT, e);
		if (!st)
			break;
		store_bind_text(st, 1, w.id);
		store_bind_text(st, 2, w.name);
		store_bind_int64(st, 3, w.max_running);
		store_bind_int64(st, 4, w.created_ms);
		store_bind_text(st, 5, w.egress_allow);
		store_bind_text(st, 6, w.egress_deny);
		step = store_step(st);
		if (step == STORE_DONE) {
			rc = 0;
		} else if (step != STORE_ERR_UNIQUE) {
			store_db_error(s, "creating a workspace", e);
		}
		store_stmt_done(st);
		if (step != STORE_ERR_UNIQUE)
			break;
	}
	store_unlock(s);
	if (rc != 0 && step == STORE_ERR_UNIQUE)
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
	struct store_stmt *st = store_stmt(s, SQL_WS_GET, e);
	if (st) {
		store_bind_text(st, 1, id);
		int step = store_step(st);
		if (step == STORE_ROW) {
			struct store_workspace w = {0};
			store_workspace_row(st, &w);
			if (out)
				*out = w;
			rc = 0;
		} else if (step == STORE_DONE) {
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
	struct store_stmt *st = store_stmt(s, SQL_WS_LIST, e);
	if (st) {
		int step;
		while ((step = store_step(st)) == STORE_ROW) {
			struct store_workspace w = {0};
			store_workspace_row(st, &w);
			json_array_append_new(list, store_workspace_json(&w));
		}
		if (step == STORE_DONE)
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

int store_workspace_set_max_stopped(struct store *s, const char *id, int max_stopped, struct err *e)
{
	if (max_stopped < 0)
		return err_param(e, "max_stopped",
				 "max_stopped: %d is negative (0 means the server default)",
				 max_stopped);
	char missing[96];
	snprintf(missing, sizeof missing, "no workspace %.64s", id ? id : "");
	int rc = -1;
	store_lock(s);
	struct store_stmt *st = store_stmt(s, SQL_WS_SET_MAX_STOPPED, e);
	if (st) {
		store_bind_text(st, 1, id);
		store_bind_int64(st, 2, max_stopped);
		rc = store_step_change(s, st, "setting a workspace's max_stopped", missing, e);
	}
	store_stmt_done(st);
	store_unlock(s);
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
	struct store_stmt *st = store_stmt(s, SQL_WS_SET_EGRESS, e);
	if (st) {
		store_bind_text(st, 1, id);
		store_bind_text(st, 2, egress_allow);
		store_bind_text(st, 3, egress_deny);
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

/* PostgreSQL: the workspace's row held (shared) until the commit, so a
 * concurrent delete either waits for a key being issued (and then revokes
 * it with the others) or is seen by it. */
static const char SQL_WS_GET_SHARE[] =
    "SELECT id FROM workspaces WHERE id = ?1 AND deleted_ms = 0 FOR SHARE";

/* Whether workspace id exists; -1 with e filled on a database error. */
static int store_workspace_exists(struct store *s, const char *id, struct err *e)
{
	struct store_stmt *st =
	    store_stmt(s, store_in_tx(s) && s->pg ? SQL_WS_GET_SHARE : SQL_WS_GET, e);
	if (!st)
		return -1;
	store_bind_text(st, 1, id);
	int step = store_step(st);
	store_stmt_done(st);
	if (step == STORE_ROW)
		return 1;
	if (step == STORE_DONE)
		return 0;
	return store_db_error(s, "reading a workspace", e);
}

int store_key_create(struct store *s, const char *workspace_id, char key_out[64], struct err *e)
{
	return store_key_issue(s, workspace_id, key_out, NULL, e);
}

int store_key_issue(struct store *s, const char *workspace_id, char key_out[64],
		    struct store_key_info *info, struct err *e)
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
	struct store_stmt *st = NULL;
	/* PostgreSQL: in a transaction holding the workspace (above). */
	bool tx = s->pg && workspace_id;
	int exists = tx && store_begin(s, e) < 0 ? -1
		     : workspace_id		 ? store_workspace_exists(s, workspace_id, e)
						 : 1;
	if (exists == 0)
		err_set(e, ERR_NOT_FOUND, "no workspace %.64s", workspace_id);
	if (exists == 1 && (st = store_stmt(s, SQL_KEY_INSERT, e))) {
		store_bind_blob(st, 1, hash, sizeof hash);
		store_bind_text(st, 2, workspace_id);
		int64_t now = clock_wall_ms();
		char prefix[STORE_KEY_PREFIX_SHOWN + 1];
		memcpy(prefix, key, STORE_KEY_PREFIX_SHOWN); /* the key is longer */
		prefix[STORE_KEY_PREFIX_SHOWN] = 0;
		store_bind_int64(st, 3, now);
		store_bind_text(st, 4, prefix);
		int64_t id = store_step(st) == STORE_ROW ? store_col_int64(st, 0) : 0;
		if (id > 0 && store_step(st) == STORE_DONE) {
			rc = 0;
			store_keys_changed(s);
			if (info) {
				memset(info, 0, sizeof *info);
				snprintf(info->id, sizeof info->id, "key-%lld", (long long)id);
				snprintf(info->prefix, sizeof info->prefix, "%s", prefix);
				info->created_ms = now;
			}
		} else {
			store_db_error(s, "storing an API key", e);
		}
	}
	if (tx && exists >= 0) {
		store_stmt_done(st);
		if (rc == 0 && store_commit_tx(s, e) < 0)
			rc = -1;
		if (rc < 0)
			store_rollback(s);
	}
	store_stmt_done(st);
	store_unlock(s);
	if (rc == 0)
		memcpy(key_out, key, sizeof key);
	OPENSSL_cleanse(key, sizeof key);
	return rc;
}

static int store_keyent_cmp(const void *a, const void *b)
{
	return memcmp(((const struct store_keyent *)a)->hash,
		      ((const struct store_keyent *)b)->hash, STORE_KEY_HASH);
}

void store_keys_flush_used_locked(struct store *s)
{
	struct {
		int64_t id, ms;
	} used[64];
	bool dirty = s->keys_dirty;
	for (size_t from = 0;;) {
		size_t n = 0;
		pthread_mutex_lock(&s->keys_lock);
		for (; from < s->nkeys && n < 64; from++) {
			struct store_keyent *k = &s->keys[from];
			if (k->used_ms > k->saved_ms) {
				used[n].id = k->id, used[n].ms = k->used_ms;
				k->saved_ms = k->used_ms;
				n++;
			}
		}
		bool more = from < s->nkeys;
		pthread_mutex_unlock(&s->keys_lock);
		bool relaxed = n > 0 && store_relaxed_begin(s);
		for (size_t i = 0; i < n; i++) {
			struct store_stmt *st = store_stmt(s, SQL_KEY_USED, NULL);
			if (!st)
				break;
			store_bind_int64(st, 1, used[i].id);
			store_bind_int64(st, 2, used[i].ms);
			store_step(st); /* a failure loses a last use, nothing else */
			store_stmt_done(st);
		}
		store_relaxed_end(s, relaxed, true);
		if (!more)
			break;
	}
	/* A last use changes no key's validity: the table stays as it is. */
	s->keys_dirty = dirty;
}

int store_keys_reload_locked(struct store *s, struct err *e)
{
	store_keys_flush_used_locked(s);
	struct store_keyent *keys = NULL;
	size_t n = 0, cap = 0;
	int rc = 0, step;
	struct store_stmt *st = store_stmt(s, SQL_KEYS_VALID, e);
	if (!st)
		rc = -1;
	while (rc == 0 && (step = store_step(st)) == STORE_ROW) {
		if (n == cap) {
			size_t ncap = cap ? cap * 2 : 64;
			struct store_keyent *nk = realloc(keys, ncap * sizeof *nk);
			if (!nk) {
				rc = err_set(e, ERR_INTERNAL, "out of memory loading the API keys");
				break;
			}
			keys = nk;
			cap = ncap;
		}
		if (store_col_blob(st, 0, keys[n].hash, STORE_KEY_HASH) < 0)
			continue;
		store_col_text(st, 1, keys[n].workspace, sizeof keys[n].workspace);
		keys[n].id = store_col_int64(st, 2);
		keys[n].used_ms = keys[n].saved_ms = store_col_int64(st, 3);
		n++;
	}
	if (rc == 0 && step != STORE_DONE)
		rc = store_db_error(s, "loading the API keys", e);
	store_stmt_done(st);
	if (rc == 0 && n > 1)
		qsort(keys, n, sizeof *keys, store_keyent_cmp);
	pthread_mutex_lock(&s->keys_lock);
	/* A lookup may have recorded a use in the old table after the flush
	 * above: carry it over (both tables are sorted by hash). */
	for (size_t i = 0; rc == 0 && s->keys && i < n; i++) {
		struct store_keyent *was =
		    bsearch(&keys[i], s->keys, s->nkeys, sizeof *s->keys, store_keyent_cmp);
		if (was && was->used_ms > keys[i].used_ms)
			keys[i].used_ms = was->used_ms;
	}
	/* A database that cannot be reached (PostgreSQL away) keeps the last
	 * table: nothing can be revoked through it from here, and what another
	 * host revokes meanwhile applies here once it is back (the listener
	 * rebuilds then). Any other failure: no key authenticates (503) rather
	 * than a revoked one still working. Either way the table stays stale
	 * (keys_dirty), so the next store_unlock tries again. */
	bool keep = rc < 0 && s->keys && e && e->code == ERR_UNAVAILABLE;
	struct store_keyent *old = NULL;
	if (!keep) {
		old = s->keys;
		s->keys = rc == 0 ? keys : NULL;
		s->nkeys = rc == 0 ? n : 0;
		s->keys_failed = rc < 0;
	}
	pthread_mutex_unlock(&s->keys_lock);
	free(old);
	if (rc < 0)
		free(keys);
	else
		s->keys_dirty = false;
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
	struct store_keyent probe;
	memcpy(probe.hash, hash, STORE_KEY_HASH);
	int rc = -1;
	pthread_mutex_lock(&s->keys_lock);
	struct store_keyent *k =
	    s->keys ? bsearch(&probe, s->keys, s->nkeys, sizeof *s->keys, store_keyent_cmp) : NULL;
	if (k && CRYPTO_memcmp(k->hash, hash, STORE_KEY_HASH) == 0) {
		/* Last use, in memory: written by store_keys_flush_used_locked
		 * (listing keys, the usage tick, a reload, closing). */
		int64_t now = clock_wall_ms();
		if (now - k->used_ms >= STORE_KEY_USED_EVERY_MS)
			k->used_ms = now;
		if (workspace_out)
			snprintf(workspace_out, 40, "%s", k->workspace);
		if (admin)
			*admin = !k->workspace[0];
		rc = 0;
	} else if (s->keys_failed) {
		err_set(e, ERR_UNAVAILABLE, "cannot check API keys now (the database failed)");
	} else {
		err_set(e, ERR_UNAUTHORIZED, "the API key is not valid (unknown or revoked)");
	}
	pthread_mutex_unlock(&s->keys_lock);
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
	struct store_stmt *st = store_stmt(s, SQL_KEY_REVOKE, e);
	if (st) {
		store_bind_blob(st, 1, hash, sizeof hash);
		store_bind_int64(st, 2, clock_wall_ms());
		rc = store_step_change(s, st, "revoking an API key", "no such API key", e);
		if (rc == 0)
			store_keys_changed(s);
	}
	store_stmt_done(st);
	store_unlock(s);
	return rc;
}

/* "key-N" to N; 0 when it is not one. */
static int64_t store_key_id_parse(const char *id)
{
	if (!id || strncmp(id, "key-", 4) != 0 || !id[4] || strlen(id) > 24)
		return 0;
	int64_t n = 0;
	for (const char *p = id + 4; *p; p++) {
		if (*p < '0' || *p > '9' || n > (INT64_MAX - 9) / 10)
			return 0;
		n = n * 10 + (*p - '0');
	}
	return n;
}

int store_key_list(struct store *s, const char *workspace_id, json_t **out, struct err *e)
{
	json_t *list = json_array();
	if (!list)
		return err_set(e, ERR_INTERNAL, "out of memory listing keys");
	store_lock(s);
	store_keys_flush_used_locked(s);
	int rc = -1;
	int exists = store_workspace_exists(s, workspace_id, e);
	struct store_stmt *st = NULL;
	if (exists == 0)
		err_set(e, ERR_NOT_FOUND, "no workspace %.64s", workspace_id);
	if (exists == 1 && (st = store_stmt(s, SQL_KEY_LIST, e))) {
		store_bind_text(st, 1, workspace_id);
		int step;
		while ((step = store_step(st)) == STORE_ROW) {
			char id[32], prefix[32];
			snprintf(id, sizeof id, "key-%lld", (long long)store_col_int64(st, 0));
			store_col_text(st, 1, prefix, sizeof prefix);
			int64_t used = store_col_int64(st, 3);
			json_array_append_new(
			    list, json_pack("{s:s, s:s, s:I, s:o}", "id", id, "prefix", prefix,
					    "created_at", (json_int_t)store_col_int64(st, 2),
					    "last_used_at",
					    used ? json_integer((json_int_t)used) : json_null()));
		}
		if (step == STORE_DONE)
			rc = 0;
		else
			store_db_error(s, "listing API keys", e);
	}
	store_stmt_done(st);
	store_unlock(s);
	if (rc == 0)
		*out = list;
	else
		json_decref(list);
	return rc;
}

int store_key_revoke_id(struct store *s, const char *workspace_id, const char *key_id,
			struct err *e)
{
	int64_t id = store_key_id_parse(key_id);
	if (!id)
		return err_set(e, ERR_NOT_FOUND, "no key %.40s in workspace %.64s",
			       key_id ? key_id : "", workspace_id);
	store_lock(s);
	int rc = -1;
	struct store_stmt *st = store_stmt(s, SQL_KEY_REVOKE_ID, e);
	if (st) {
		store_bind_int64(st, 1, id);
		store_bind_text(st, 2, workspace_id);
		store_bind_int64(st, 3, clock_wall_ms());
		rc = store_step_change(s, st, "revoking an API key", "no such key", e);
		if (rc == 0)
			store_keys_changed(s);
		if (rc < 0 && e && e->code == ERR_NOT_FOUND)
			err_set(e, ERR_NOT_FOUND, "no key %.40s in workspace %.64s", key_id,
				workspace_id);
	}
	store_stmt_done(st);
	store_unlock(s);
	return rc;
}

int store_workspace_delete(struct store *s, const char *id, struct err *e)
{
	if (!id || !*id)
		return err_param(e, "workspace", "workspace: the workspace id is empty");
	int64_t now = clock_wall_ms();
	int rc = -1;
	store_lock(s);
	if (store_begin(s, e) == 0) {
		struct store_stmt *st = store_stmt(s, SQL_WS_DELETE, e);
		if (st) {
			store_bind_text(st, 1, id);
			store_bind_int64(st, 2, now);
			char missing[100];
			snprintf(missing, sizeof missing, "no workspace %.64s", id);
			rc = store_step_change(s, st, "deleting a workspace", missing, e);
			store_stmt_done(st);
		}
		if (rc == 0 && (st = store_stmt(s, SQL_KEY_REVOKE_WS, e))) {
			store_bind_text(st, 1, id);
			store_bind_int64(st, 2, now);
			if (store_step(st) != STORE_DONE)
				rc = store_db_error(s, "revoking a workspace's keys", e);
			store_stmt_done(st);
		} else if (rc == 0) {
			rc = -1;
		}
		if (rc == 0 && store_commit_tx(s, e) < 0)
			rc = -1;
		if (rc < 0)
			store_rollback(s);
		else
			store_keys_changed(s);
	}
	store_unlock(s);
	return rc;
}
