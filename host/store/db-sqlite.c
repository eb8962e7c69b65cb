/*
 * db-sqlite: the embedded back end (one host, the default).
 *
 * One connection behind one mutex: cubicled's store traffic is small (a
 * tick a second, a touch per API call, a few writes per lifecycle step),
 * so serialising it costs nothing and keeps every multi-statement step
 * trivially atomic. SQLite's file locking still protects against a second
 * process on the same file (BEGIN IMMEDIATE takes the write lock at once).
 *
 * Durability: WAL with synchronous=NORMAL. A commit is in the WAL file (in
 * the kernel's page cache) when sqlite3_step returns, so a cubicled killed
 * with SIGKILL loses nothing it committed; only a power loss can drop the
 * last commits, which is an accepted trade for a ledger ticked every second.
 *
 * PostgreSQL's GREATEST, LEAST and STRPOS are registered as functions of
 * the connection, so the store's SQL is one text for both back ends.
 */
#include "store-internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* Milliseconds a statement waits for another process's lock before failing. */
#define STORE_BUSY_TIMEOUT_MS 5000

int store_lite_error(struct store *s, const char *doing, struct err *e)
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
		       sqlite3_errmsg(s->db), s->where);
}

int store_lite_prepare(struct store *s, struct store_stmt *st, struct err *e)
{
	if (sqlite3_prepare_v3(s->db, st->sql, -1, SQLITE_PREPARE_PERSISTENT, &st->lite, NULL) !=
	    SQLITE_OK) {
		st->lite = NULL;
		return store_lite_error(s, "preparing a statement", e);
	}
	return 0;
}

int store_lite_step(struct store_stmt *st)
{
	int rc = sqlite3_step(st->lite);
	switch (rc) {
	case SQLITE_ROW:
		return STORE_ROW;
	case SQLITE_DONE:
		st->s->changes = sqlite3_changes64(st->s->db);
		return STORE_DONE;
	case SQLITE_CONSTRAINT_PRIMARYKEY:
	case SQLITE_CONSTRAINT_UNIQUE:
		return STORE_ERR_UNIQUE;
	case SQLITE_CONSTRAINT_FOREIGNKEY:
		return STORE_ERR_FOREIGN;
	case SQLITE_CONSTRAINT_CHECK:
		return STORE_ERR_CHECK;
	default:
		return STORE_ERR;
	}
}

/* GREATEST(a, b, ...) and LEAST(...) as PostgreSQL has them: integers,
 * NULLs ignored, NULL only when all are. */
static void store_lite_extreme(sqlite3_context *ctx, int argc, sqlite3_value **argv, bool most)
{
	bool have = false;
	sqlite3_int64 best = 0;
	for (int i = 0; i < argc; i++) {
		if (sqlite3_value_type(argv[i]) == SQLITE_NULL)
			continue;
		sqlite3_int64 v = sqlite3_value_int64(argv[i]);
		if (!have || (most ? v > best : v < best))
			best = v;
		have = true;
	}
	if (have)
		sqlite3_result_int64(ctx, best);
	else
		sqlite3_result_null(ctx);
}

static void store_lite_greatest(sqlite3_context *ctx, int argc, sqlite3_value **argv)
{
	store_lite_extreme(ctx, argc, argv, true);
}

static void store_lite_least(sqlite3_context *ctx, int argc, sqlite3_value **argv)
{
	store_lite_extreme(ctx, argc, argv, false);
}

/* STRPOS(haystack, needle): 1-based position of needle, 0 when absent. */
static void store_lite_strpos(sqlite3_context *ctx, int argc, sqlite3_value **argv)
{
	(void)argc;
	const char *h = (const char *)sqlite3_value_text(argv[0]);
	const char *n = (const char *)sqlite3_value_text(argv[1]);
	if (!h || !n) {
		sqlite3_result_null(ctx);
		return;
	}
	const char *at = strstr(h, n);
	sqlite3_result_int64(ctx, at ? (sqlite3_int64)(at - h) + 1 : 0);
}

/* Connection settings: WAL, NORMAL sync, foreign keys, busy timeout, the
 * functions the shared SQL uses. */
static int store_lite_configure(struct store *s, struct err *e)
{
	sqlite3_stmt *st = NULL;
	if (sqlite3_prepare_v2(s->db, "PRAGMA journal_mode = WAL", -1, &st, NULL) != SQLITE_OK)
		return store_lite_error(s, "switching to WAL mode", e);
	char mode[16] = "";
	if (sqlite3_step(st) == SQLITE_ROW)
		snprintf(mode, sizeof mode, "%s", (const char *)sqlite3_column_text(st, 0));
	sqlite3_finalize(st);
	if (strcmp(mode, "wal") != 0)
		return err_set(e, ERR_INTERNAL,
			       "database %s cannot use WAL mode (journal mode is '%s'): put the "
			       "state directory on a local filesystem",
			       s->where, mode);
	if (sqlite3_busy_timeout(s->db, STORE_BUSY_TIMEOUT_MS) != SQLITE_OK)
		return store_lite_error(s, "setting the busy timeout", e);
	const int fl = SQLITE_UTF8 | SQLITE_DETERMINISTIC | SQLITE_INNOCUOUS;
	if (sqlite3_create_function(s->db, "greatest", -1, fl, NULL, store_lite_greatest, NULL,
				    NULL) != SQLITE_OK ||
	    sqlite3_create_function(s->db, "least", -1, fl, NULL, store_lite_least, NULL, NULL) !=
		SQLITE_OK ||
	    sqlite3_create_function(s->db, "strpos", 2, fl, NULL, store_lite_strpos, NULL, NULL) !=
		SQLITE_OK)
		return store_lite_error(s, "registering the SQL functions", e);
	if (store_exec(s, "PRAGMA synchronous = NORMAL", e) ||
	    store_exec(s, "PRAGMA foreign_keys = ON", e))
		return -1;
	return 0;
}

int store_lite_open(struct store *s, const char *path, struct err *e)
{
	/* The database holds envd tokens: create it owner-only before SQLite
	 * does (SQLite gives its -wal and -shm files the same mode). */
	int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	if (fd < 0)
		return err_set(e, ERR_INTERNAL, "cannot open database %s: %s", path,
			       strerror(errno));
	close(fd);
	if (sqlite3_open_v2(path, &s->db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX, NULL) !=
	    SQLITE_OK) {
		err_set(e, ERR_INTERNAL, "cannot open database %s: %s", path,
			s->db ? sqlite3_errmsg(s->db) : "out of memory");
		return -1;
	}
	sqlite3_extended_result_codes(s->db, 1);
	return store_lite_configure(s, e);
}

void store_lite_close(struct store *s)
{
	for (int i = 0; i < s->nstmts; i++)
		sqlite3_finalize(s->stmts[i].lite);
	/* Also checkpoints the WAL into the database file when last out. */
	sqlite3_close(s->db);
	s->db = NULL;
}

/* PRAGMA user_version counts the migrations that ran (store-internal.h). */
int store_lite_migrate(struct store *s, struct err *e)
{
	int version = -1;
	sqlite3_stmt *st = NULL;
	if (sqlite3_prepare_v2(s->db, "PRAGMA user_version", -1, &st, NULL) == SQLITE_OK &&
	    sqlite3_step(st) == SQLITE_ROW)
		version = sqlite3_column_int(st, 0);
	sqlite3_finalize(st);
	if (version < 0)
		return store_db_error(s, "reading the schema version", e);
	if (version > store_lite_schema_version)
		return err_set(e, ERR_INTERNAL,
			       "database %s has schema version %d, newer than this cubicled "
			       "knows (%d): run a newer cubicled or use another --state-dir",
			       s->where, version, store_lite_schema_version);
	for (; version < store_lite_schema_version; version++) {
		char bump[64], doing[64];
		snprintf(bump, sizeof bump, "PRAGMA user_version = %d", version + 1);
		snprintf(doing, sizeof doing, "migrating the schema to version %d", version + 1);
		if (store_begin(s, e))
			return -1;
		if (sqlite3_exec(s->db, store_lite_migrations[version], NULL, NULL, NULL) !=
		    SQLITE_OK) {
			store_db_error(s, doing, e);
			store_rollback(s);
			return -1;
		}
		if (store_exec(s, bump, e) || store_commit_tx(s, e)) {
			store_rollback(s);
			return -1;
		}
	}
	return 0;
}
