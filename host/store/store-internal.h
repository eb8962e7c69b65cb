/*
 * store-internal: what the store's files (store.c, workspaces.c,
 * computers.c, usage.c) share and nothing outside host/store/ may use: the
 * connection, its mutex, the prepared-statement cache and the error
 * helpers.
 *
 * Locking rule: every public store_* function takes s->lock for its whole
 * duration, and every statement it uses is reset (store_stmt_done) before it
 * unlocks, so no read transaction stays open between calls (an open one
 * would stop WAL checkpoints and let the WAL file grow without bound).
 */
#ifndef CUBICLE_STORE_INTERNAL_H
#define CUBICLE_STORE_INTERNAL_H

#include <pthread.h>
#include <sqlite3.h>

#include "store.h"

#define STORE_STMT_MAX 96

/* A key that authenticates, as the in-memory table keeps it. */
struct store_keyent {
	unsigned char hash[32]; /* SHA-256 of the key */
	char workspace[40];	/* "" for an admin key */
	int64_t id;		/* api_keys.id */
	int64_t used_ms;	/* last use, at most STORE_KEY_USED_EVERY_MS old (memory) */
	int64_t saved_ms;	/* the last use the database has */
};

struct store {
	sqlite3 *db;
	pthread_mutex_t lock;
	char path[4096];
	/* The keys that authenticate, sorted by hash, so store_key_lookup never
	 * waits for SQLite or s->lock (it runs on the API's event loop). Rebuilt
	 * from the database by store_unlock() after any change to api_keys or
	 * workspaces (seen by an SQLite update hook) or store_keys_invalidate().
	 * keys_lock guards keys/nkeys/keys_failed only and is never held across
	 * a statement; keys_dirty is under s->lock. */
	pthread_mutex_t keys_lock;
	struct store_keyent *keys;
	size_t nkeys;
	bool keys_failed; /* the last rebuild failed: lookups answer 503 until one works */
	bool keys_dirty;
	/* Prepared statements keyed by their SQL text's address (the SQL is
	 * always a string constant of the calling file). */
	struct {
		const char *sql;
		sqlite3_stmt *stmt;
	} stmts[STORE_STMT_MAX];
};

void store_lock(struct store *s);
/* Unlocks; first rebuilds the in-memory key table if keys changed and no
 * transaction is open. */
void store_unlock(struct store *s);
/* Rebuilds the key table now (s->lock held); -1 with e on a database error. */
int store_keys_reload_locked(struct store *s, struct err *e);
/* Writes the keys' last uses that the database lacks (s->lock held). */
void store_keys_flush_used_locked(struct store *s);

/* The prepared statement for `sql` (prepared on first use), reset and with
 * no bindings; NULL with e filled (ERR_INTERNAL) when SQLite refuses it. */
sqlite3_stmt *store_stmt(struct store *s, const char *sql, struct err *e);
/* Resets st so it holds no lock; st may be NULL. */
void store_stmt_done(sqlite3_stmt *st);

/* Runs a statement without results (BEGIN, COMMIT, ...). */
int store_exec(struct store *s, const char *sql, struct err *e);
/* ROLLBACK after a failure inside BEGIN; never fails (the error already
 * reported is the one that matters). */
void store_rollback(struct store *s);

/* ERR_INTERNAL "database error while <doing>: <sqlite3_errmsg>"; returns -1. */
int store_db_error(struct store *s, const char *doing, struct err *e);

/* Steps a bound statement that must change at least one row: 0; or -1 with
 * the database error (while `doing`), or ERR_NOT_FOUND `missing` when no
 * row matched. */
int store_step_change(struct store *s, sqlite3_stmt *st, const char *doing, const char *missing,
		      struct err *e);

/* Checks store_usage_switch's arguments (no lock needed). */
int store_usage_check(const char *computer, const char *workspace, const char *size,
		      const char *rate_state, int64_t at_ms, struct err *e);
/* store_usage_switch's work, inside a transaction the caller opened (lock
 * held, arguments checked): lets one transaction change a computer and its
 * billing together. */
int store_usage_switch_locked(struct store *s, const char *computer, const char *workspace,
			      const char *size, const char *rate_state, int64_t at_ms,
			      struct err *e);

/* prefix + 16 lowercase hex digits of a CSPRNG into out (size >= len(prefix)+17). */
int store_random_id(const char *prefix, char *out, size_t size, struct err *e);

/* Copies text column i into buf (always NUL-terminated, "" for NULL). */
void store_col_text(sqlite3_stmt *st, int i, char *buf, size_t size);

/* Whether str is non-NULL and fits (with its NUL) in a buffer of size bytes. */
int store_fits(const char *str, size_t size);

#endif
