/*
 * store: the SQLite connection, its schema migrations and the helpers the
 * other store files share (statement cache, errors, ids, clock).
 *
 * One connection behind one mutex: cubicled's store traffic is small (a
 * tick a second, a touch per API call, a few writes per lifecycle step),
 * so serialising it costs nothing and keeps every multi-statement step
 * (close one usage segment, open the next) trivially atomic. SQLite's file
 * locking still protects against a second process on the same file.
 *
 * Durability: WAL with synchronous=NORMAL. A commit is in the WAL file (in
 * the kernel's page cache) when sqlite3_step returns, so a cubicled killed
 * with SIGKILL loses nothing it committed; only a power loss can drop the
 * last commits, which is an accepted trade for a ledger ticked every second.
 *
 * Schema changes: append a migration to store_migrations[]; PRAGMA
 * user_version records how many have run. Never edit a migration that has
 * shipped.
 */
#include "store-internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <openssl/rand.h>

/* Milliseconds a statement waits for another process's lock before failing. */
#define STORE_BUSY_TIMEOUT_MS 5000

static const char *const store_migrations[] = {
    /* 1: workspaces, keys, computers, usage ledger. */
    "CREATE TABLE workspaces ("
    " id TEXT PRIMARY KEY,"
    " name TEXT NOT NULL,"
    " max_running INTEGER NOT NULL DEFAULT 0,"
    " created_ms INTEGER NOT NULL);"

    /* The key itself is never stored: hash = SHA-256(key). workspace NULL =
     * admin key. revoked_ms 0 = valid. */
    "CREATE TABLE api_keys ("
    " id INTEGER PRIMARY KEY,"
    " hash BLOB NOT NULL,"
    " workspace TEXT REFERENCES workspaces(id),"
    " created_ms INTEGER NOT NULL,"
    " revoked_ms INTEGER NOT NULL DEFAULT 0);"
    "CREATE UNIQUE INDEX api_keys_hash ON api_keys(hash);"

    /* Rows are never removed: a deleted computer keeps its row (state
     * 'deleted', deleted_ms) so usage stays attributable. */
    "CREATE TABLE computers ("
    " id TEXT PRIMARY KEY,"
    " workspace TEXT NOT NULL REFERENCES workspaces(id),"
    " kind TEXT NOT NULL,"
    " size TEXT NOT NULL,"
    " isolation TEXT NOT NULL,"
    " state TEXT NOT NULL,"
    " error TEXT NOT NULL DEFAULT '',"
    " width INTEGER NOT NULL DEFAULT 0,"
    " height INTEGER NOT NULL DEFAULT 0,"
    " idle_timeout_s INTEGER NOT NULL DEFAULT 0,"
    " external_workspace_id TEXT NOT NULL DEFAULT '',"
    " session_id TEXT NOT NULL DEFAULT '',"
    " envd_token TEXT NOT NULL DEFAULT '',"
    " accel TEXT NOT NULL DEFAULT '',"
    " metadata TEXT NOT NULL DEFAULT '{}',"
    " driver_state TEXT NOT NULL DEFAULT '{}',"
    " created_ms INTEGER NOT NULL,"
    " updated_ms INTEGER NOT NULL,"
    " last_activity_ms INTEGER NOT NULL DEFAULT 0,"
    " deleted_ms INTEGER NOT NULL DEFAULT 0);"
    "CREATE INDEX computers_workspace_state ON computers(workspace, state);"
    "CREATE INDEX computers_created ON computers(created_ms);"

    /* One row per (computer, billable state, size) stretch of time; at
     * most one open row per computer. */
    "CREATE TABLE usage_segments ("
    " id INTEGER PRIMARY KEY,"
    " computer TEXT NOT NULL REFERENCES computers(id),"
    " workspace TEXT NOT NULL,"
    " size TEXT NOT NULL,"
    " rate_state TEXT NOT NULL CHECK (rate_state IN ('running', 'stopped')),"
    " start_ms INTEGER NOT NULL,"
    " end_ms INTEGER NOT NULL CHECK (end_ms >= start_ms),"
    " open INTEGER NOT NULL DEFAULT 1 CHECK (open IN (0, 1)));"
    "CREATE UNIQUE INDEX usage_segments_open ON usage_segments(computer) WHERE open = 1;"
    "CREATE INDEX usage_segments_workspace_start ON usage_segments(workspace, start_ms);"
    "CREATE INDEX usage_segments_start ON usage_segments(start_ms);",

    /* 2: the admin API (keys listed by id and prefix, last use, deleted
     * workspaces) and stream revocations that survive a restart. */
    "ALTER TABLE api_keys ADD COLUMN prefix TEXT NOT NULL DEFAULT '';"
    "ALTER TABLE api_keys ADD COLUMN last_used_ms INTEGER NOT NULL DEFAULT 0;"
    "CREATE INDEX api_keys_workspace ON api_keys(workspace);"
    /* A deleted workspace keeps its row (its computers' rows and its
     * ledger refer to it); deleted_ms 0 = live. */
    "ALTER TABLE workspaces ADD COLUMN deleted_ms INTEGER NOT NULL DEFAULT 0;"
    /* Stream tokens of `computer` issued at or before revoked_ms are
     * refused; the row goes once every such token has expired. */
    "CREATE TABLE stream_revocations ("
    " computer TEXT PRIMARY KEY,"
    " revoked_ms INTEGER NOT NULL,"
    " expires_ms INTEGER NOT NULL);",
    /* 3: code runs (POST /v1/run), counted per workspace, language and
     * hour; not billed. */
    "CREATE TABLE code_runs ("
    " workspace TEXT NOT NULL,"
    " language TEXT NOT NULL,"
    " hour_ms INTEGER NOT NULL,"
    " runs INTEGER NOT NULL DEFAULT 0,"
    " errors INTEGER NOT NULL DEFAULT 0,"
    " PRIMARY KEY (workspace, language, hour_ms));",
    /* 4: stopped computers allowed per workspace (0 = the server's
     * --max-stopped-per-workspace). */
    "ALTER TABLE workspaces ADD COLUMN max_stopped INTEGER NOT NULL DEFAULT 0;",
    /* 5: a workspace's egress policy override, each a list of IPv4
     * prefixes "a.b.c.d/len,..." ('' = none), checked by the API. */
    "ALTER TABLE workspaces ADD COLUMN egress_allow TEXT NOT NULL DEFAULT '';"
    "ALTER TABLE workspaces ADD COLUMN egress_deny TEXT NOT NULL DEFAULT '';",
    /* 6: connect tokens (machines you bring, docs/byo.md): single-use,
     * short-lived; only the SHA-256 of the token is kept. used_ms 0 =
     * unused; computer = the machine it made. */
    "CREATE TABLE connect_tokens ("
    " id TEXT PRIMARY KEY,"
    " workspace TEXT NOT NULL,"
    " kind TEXT NOT NULL,"
    " name TEXT NOT NULL DEFAULT '',"
    " metadata TEXT NOT NULL DEFAULT '{}',"
    " digest TEXT NOT NULL,"
    " created_ms INTEGER NOT NULL,"
    " expires_ms INTEGER NOT NULL,"
    " used_ms INTEGER NOT NULL DEFAULT 0,"
    " computer TEXT NOT NULL DEFAULT '');",
    /* 7: templates (store-templates.h): a recipe built into an image.
     * workspace '' = a global template (the admin's, or built in). A row
     * goes when its template is deleted; computers name the one they were
     * made from (template = its id), and a template is not deleted while
     * a computer that is not deleted names it. */
    "CREATE TABLE templates ("
    " id TEXT PRIMARY KEY,"
    " workspace TEXT NOT NULL,"
    " name TEXT NOT NULL,"
    " base TEXT NOT NULL,"
    " recipe TEXT NOT NULL,"
    " layer_key TEXT NOT NULL DEFAULT '',"
    " image TEXT NOT NULL DEFAULT '',"
    " state TEXT NOT NULL CHECK (state IN ('building', 'ready', 'error')),"
    " error TEXT NOT NULL DEFAULT '',"
    " size_bytes INTEGER NOT NULL DEFAULT 0,"
    " build_ms INTEGER NOT NULL DEFAULT 0,"
    " builtin INTEGER NOT NULL DEFAULT 0,"
    " build TEXT NOT NULL DEFAULT '{}',"
    " created_ms INTEGER NOT NULL,"
    " updated_ms INTEGER NOT NULL,"
    " UNIQUE (workspace, name));"
    "ALTER TABLE computers ADD COLUMN template TEXT NOT NULL DEFAULT '';"
    "CREATE INDEX computers_template ON computers(template) WHERE template <> '';",
};

#define STORE_SCHEMA_VERSION ((int)(sizeof store_migrations / sizeof store_migrations[0]))

void store_lock(struct store *s)
{
	pthread_mutex_lock(&s->lock);
}

void store_unlock(struct store *s)
{
	/* Outside a transaction only: inside one the change may still roll
	 * back, and the transaction's own store_unlock comes later. */
	if (s->keys_dirty && sqlite3_get_autocommit(s->db)) {
		struct err e = {0};
		if (store_keys_reload_locked(s, &e) < 0)
			fprintf(stderr, "cubicled: store: %s\n", e.message);
	}
	pthread_mutex_unlock(&s->lock);
}

/* SQLite calls this (on the thread that holds s->lock) for every row
 * inserted, updated or deleted on our connection, foreign-key actions
 * included: a change to who may authenticate marks the key table stale. */
static void store_update_hook(void *arg, int op, const char *db, const char *table,
			      sqlite3_int64 rowid)
{
	struct store *s = arg;
	(void)op, (void)db, (void)rowid;
	if (strcmp(table, "api_keys") == 0 || strcmp(table, "workspaces") == 0)
		s->keys_dirty = true;
}

void store_keys_invalidate(struct store *s)
{
	store_lock(s);
	s->keys_dirty = true;
	store_unlock(s);
}

int store_db_error(struct store *s, const char *doing, struct err *e)
{
	/* A full disk or a busy database is the host's state, not a bug: say
	 * so (507 / 503). SQLite rolls the statement back, nothing is half
	 * written, and the next call works once there is room again. */
	int code = sqlite3_extended_errcode(s->db) & 0xff;
	if (code == SQLITE_FULL)
		return err_set(e, ERR_NO_SPACE,
			       "the host's disk is full: cubicled cannot record this (while %s); "
			       "nothing was changed, try again when there is space",
			       doing);
	if (code == SQLITE_BUSY || code == SQLITE_LOCKED || code == SQLITE_IOERR)
		return err_set(e, ERR_UNAVAILABLE,
			       "the database is unavailable while %s: %s; nothing was changed",
			       doing, sqlite3_errmsg(s->db));
	return err_set(e, ERR_INTERNAL, "database error while %s: %s (database %s)", doing,
		       sqlite3_errmsg(s->db), s->path);
}

int store_step_change(struct store *s, sqlite3_stmt *st, const char *doing, const char *missing,
		      struct err *e)
{
	if (sqlite3_step(st) != SQLITE_DONE)
		return store_db_error(s, doing, e);
	if (sqlite3_changes(s->db) == 0)
		return err_set(e, ERR_NOT_FOUND, "%s", missing);
	return 0;
}

sqlite3_stmt *store_stmt(struct store *s, const char *sql, struct err *e)
{
	int i;
	for (i = 0; i < STORE_STMT_MAX && s->stmts[i].sql; i++) {
		if (s->stmts[i].sql == sql) {
			sqlite3_reset(s->stmts[i].stmt);
			sqlite3_clear_bindings(s->stmts[i].stmt);
			return s->stmts[i].stmt;
		}
	}
	sqlite3_stmt *st = NULL;
	if (sqlite3_prepare_v3(s->db, sql, -1, SQLITE_PREPARE_PERSISTENT, &st, NULL) != SQLITE_OK) {
		store_db_error(s, "preparing a statement", e);
		return NULL;
	}
	if (i < STORE_STMT_MAX) {
		s->stmts[i].sql = sql;
		s->stmts[i].stmt = st;
		return st;
	}
	/* Cannot happen with the store's fixed set of statements; refuse
	 * rather than leak one statement per call. */
	sqlite3_finalize(st);
	err_set(e, ERR_INTERNAL, "store: more than %d distinct statements (raise STORE_STMT_MAX)",
		STORE_STMT_MAX);
	return NULL;
}

void store_stmt_done(sqlite3_stmt *st)
{
	if (st) {
		sqlite3_reset(st);
		sqlite3_clear_bindings(st);
	}
}

int store_exec(struct store *s, const char *sql, struct err *e)
{
	if (sqlite3_exec(s->db, sql, NULL, NULL, NULL) != SQLITE_OK)
		return store_db_error(s, sql, e);
	return 0;
}

void store_rollback(struct store *s)
{
	/* Fails harmlessly when SQLite already rolled back by itself. */
	sqlite3_exec(s->db, "ROLLBACK", NULL, NULL, NULL);
}

int store_random_id(const char *prefix, char *out, size_t size, struct err *e)
{
	unsigned char b[8];
	size_t plen = strlen(prefix);
	if (size < plen + 2 * sizeof b + 1)
		return err_set(e, ERR_INTERNAL, "store: id buffer of %zu bytes is too small", size);
	if (RAND_bytes(b, sizeof b) != 1)
		return err_set(e, ERR_INTERNAL, "store: the random generator failed (RAND_bytes)");
	memcpy(out, prefix, plen);
	for (size_t i = 0; i < sizeof b; i++)
		snprintf(out + plen + 2 * i, 3, "%02x", b[i]);
	return 0;
}

void store_col_text(sqlite3_stmt *st, int i, char *buf, size_t size)
{
	const unsigned char *t = sqlite3_column_text(st, i);
	snprintf(buf, size, "%s", t ? (const char *)t : "");
}

int store_fits(const char *str, size_t size)
{
	return str && strnlen(str, size) < size;
}

/* Brings the schema from PRAGMA user_version up to STORE_SCHEMA_VERSION,
 * one migration per transaction. */
static int store_migrate(struct store *s, struct err *e)
{
	sqlite3_stmt *st = NULL;
	if (sqlite3_prepare_v2(s->db, "PRAGMA user_version", -1, &st, NULL) != SQLITE_OK)
		return store_db_error(s, "reading the schema version", e);
	int version = sqlite3_step(st) == SQLITE_ROW ? sqlite3_column_int(st, 0) : -1;
	sqlite3_finalize(st);
	if (version < 0)
		return store_db_error(s, "reading the schema version", e);
	if (version > STORE_SCHEMA_VERSION)
		return err_set(e, ERR_INTERNAL,
			       "database %s has schema version %d, newer than this cubicled "
			       "knows (%d): run a newer cubicled or use another --state-dir",
			       s->path, version, STORE_SCHEMA_VERSION);
	for (; version < STORE_SCHEMA_VERSION; version++) {
		char bump[64];
		snprintf(bump, sizeof bump, "PRAGMA user_version = %d", version + 1);
		if (store_exec(s, "BEGIN IMMEDIATE", e))
			return -1;
		if (sqlite3_exec(s->db, store_migrations[version], NULL, NULL, NULL) != SQLITE_OK) {
			char doing[64];
			snprintf(doing, sizeof doing, "migrating the schema to version %d",
				 version + 1);
			store_db_error(s, doing, e);
			store_rollback(s);
			return -1;
		}
		if (store_exec(s, bump, e) || store_exec(s, "COMMIT", e)) {
			store_rollback(s);
			return -1;
		}
	}
	return 0;
}

/* Connection settings: WAL, NORMAL sync, foreign keys, busy timeout. */
static int store_configure(struct store *s, struct err *e)
{
	sqlite3_stmt *st = NULL;
	if (sqlite3_prepare_v2(s->db, "PRAGMA journal_mode = WAL", -1, &st, NULL) != SQLITE_OK)
		return store_db_error(s, "switching to WAL mode", e);
	char mode[16] = "";
	if (sqlite3_step(st) == SQLITE_ROW)
		store_col_text(st, 0, mode, sizeof mode);
	sqlite3_finalize(st);
	if (strcmp(mode, "wal") != 0)
		return err_set(e, ERR_INTERNAL,
			       "database %s cannot use WAL mode (journal mode is '%s'): put the "
			       "state directory on a local filesystem",
			       s->path, mode);
	if (sqlite3_busy_timeout(s->db, STORE_BUSY_TIMEOUT_MS) != SQLITE_OK)
		return store_db_error(s, "setting the busy timeout", e);
	if (store_exec(s, "PRAGMA synchronous = NORMAL", e) ||
	    store_exec(s, "PRAGMA foreign_keys = ON", e))
		return -1;
	return 0;
}

struct store *store_open(const char *path, struct err *e)
{
	if (!path || !*path) {
		err_param(e, "path", "path: the database path is empty");
		return NULL;
	}
	struct store *s = calloc(1, sizeof *s);
	if (!s) {
		err_set(e, ERR_INTERNAL, "out of memory opening the store");
		return NULL;
	}
	if (snprintf(s->path, sizeof s->path, "%s", path) >= (int)sizeof s->path) {
		free(s);
		err_param(e, "path", "path: longer than %zu bytes", sizeof s->path - 1);
		return NULL;
	}
	pthread_mutex_init(&s->lock, NULL);
	pthread_mutex_init(&s->keys_lock, NULL);

	/* The database holds envd tokens: create it owner-only before SQLite
	 * does (SQLite gives its -wal and -shm files the same mode). */
	int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	if (fd < 0) {
		err_set(e, ERR_INTERNAL, "cannot open database %s: %s", path, strerror(errno));
		pthread_mutex_destroy(&s->keys_lock);
		pthread_mutex_destroy(&s->lock);
		free(s);
		return NULL;
	}
	close(fd);

	if (sqlite3_open_v2(path, &s->db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX, NULL) !=
	    SQLITE_OK) {
		err_set(e, ERR_INTERNAL, "cannot open database %s: %s", path,
			s->db ? sqlite3_errmsg(s->db) : "out of memory");
		store_close(s);
		return NULL;
	}
	sqlite3_extended_result_codes(s->db, 1);
	if (store_configure(s, e) || store_migrate(s, e)) {
		store_close(s);
		return NULL;
	}
	sqlite3_update_hook(s->db, store_update_hook, s);
	store_lock(s);
	int rc = store_keys_reload_locked(s, e);
	pthread_mutex_unlock(&s->lock);
	if (rc < 0) {
		store_close(s);
		return NULL;
	}
	return s;
}

void store_close(struct store *s)
{
	if (!s)
		return;
	store_lock(s);
	store_keys_flush_used_locked(s);
	pthread_mutex_unlock(&s->lock);
	for (int i = 0; i < STORE_STMT_MAX && s->stmts[i].sql; i++)
		sqlite3_finalize(s->stmts[i].stmt);
	/* Also checkpoints the WAL into the database file when last out. */
	sqlite3_close(s->db);
	pthread_mutex_destroy(&s->lock);
	pthread_mutex_destroy(&s->keys_lock);
	free(s->keys);
	free(s);
}
