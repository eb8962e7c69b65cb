/*
 * store-internal: what the store's files share and nothing outside
 * host/store/ may use: the connection, its mutex, the statement cache, the
 * key table, and the dialect layer every store file talks to its database
 * through, whichever back end it is (host/store/README.md):
 *
 *   store_stmt(s, SQL)      a prepared statement of the store's connection
 *   store_bind_*            its parameters, ?1..?N (or ?) in the SQL
 *   store_step              STORE_ROW per row, then STORE_DONE; < 0 on error
 *   store_col_*             the current row's columns
 *   store_changes           rows the statement inserted, updated or deleted
 *   store_stmt_done         resets it (no lock, no result kept)
 *   store_begin/_commit_tx  a write transaction (SQLite: BEGIN IMMEDIATE)
 *
 * The SQL is one text for both back ends: the common subset of SQLite and
 * PostgreSQL (?N becomes $N for libpq; GREATEST, LEAST and STRPOS are
 * registered as SQLite functions). Only the schema (store-schema.c) is
 * spelled per back end.
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

#define STORE_STMT_MAX	 128
#define STORE_PARAMS_MAX 32

/* A key that authenticates, as the in-memory table keeps it. */
struct store_keyent {
	unsigned char hash[32]; /* SHA-256 of the key */
	char workspace[40];	/* "" for an admin key */
	int64_t id;		/* api_keys.id */
	int64_t used_ms;	/* last use, at most STORE_KEY_USED_EVERY_MS old (memory) */
	int64_t saved_ms;	/* the last use the database has */
};

struct store_pg; /* db-pg.c's connection state */

/* A prepared statement (one per SQL text per store). */
struct store_stmt {
	struct store *s;
	const char *sql;    /* the key: a string constant of the calling file */
	sqlite3_stmt *lite; /* SQLite */
	/* PostgreSQL: the statement's name on the connection, whether it is
	 * prepared there (in which connection generation), its parameters
	 * and the result being walked. */
	char name[12];
	unsigned prepared_gen;
	int sql_nparams; /* the parameters the SQL has */
	int nparams;	 /* the highest bound */
	const char *values[STORE_PARAMS_MAX];
	int lengths[STORE_PARAMS_MAX], formats[STORE_PARAMS_MAX];
	unsigned types[STORE_PARAMS_MAX];
	char ints[STORE_PARAMS_MAX][24];
	char *owned[STORE_PARAMS_MAX];
	void *res; /* PGresult */
	int row, nrows;
	int64_t changes;
};

struct store {
	sqlite3 *db;	     /* SQLite, or NULL */
	struct store_pg *pg; /* PostgreSQL, or NULL */
	pthread_mutex_t lock;
	char where[4096]; /* the path, or the URI with any password masked */
	int64_t changes;  /* the last statement's (both back ends) */
	/* The keys that authenticate, sorted by hash, so store_key_lookup never
	 * waits for the database or s->lock (it runs on the API's event loop).
	 * Rebuilt by store_unlock() after a store call changed api_keys or
	 * workspaces (it sets keys_dirty), by store_keys_invalidate(), and with
	 * PostgreSQL by the listener when another host changed them.
	 * keys_lock guards keys/nkeys/keys_failed only and is never held across
	 * a statement; keys_dirty is under s->lock. */
	pthread_mutex_t keys_lock;
	struct store_keyent *keys;
	size_t nkeys;
	bool keys_failed; /* the last rebuild failed: lookups answer 503 until one works */
	bool keys_dirty;
	int64_t keys_said_ms; /* when a failed rebuild was last logged */
	/* Whether computers may hold something on hosts: PostgreSQL always (other
	 * processes place); SQLite once its hosts table has a row. Until then a
	 * state change has nothing to release, and costs what it always did. */
	bool hosts_known;
	/* This process's host in a cluster (store_host_register), under s->lock;
	 * host[0] == 0: one host, no fencing. */
	char host[STORE_HOST_ID_LEN];
	int64_t epoch;
	/* store_on_stream_revoke's callback, under revoke_lock. */
	pthread_mutex_t revoke_lock;
	void (*on_revoke)(void *ctx, const char *computer, int64_t revoked_ms);
	void *on_revoke_ctx;
	struct store_stmt stmts[STORE_STMT_MAX];
	int nstmts;
};

/* Step results. */
enum {
	STORE_DONE = 0,
	STORE_ROW = 1,
	STORE_ERR = -1,		/* see store_db_error */
	STORE_ERR_UNIQUE = -2,	/* a primary key or unique index */
	STORE_ERR_FOREIGN = -3, /* a foreign key */
	STORE_ERR_CHECK = -4,	/* a CHECK constraint */
};

void store_lock(struct store *s);
/* Unlocks; first rebuilds the in-memory key table if keys changed and no
 * transaction is open. */
void store_unlock(struct store *s);
/* Rebuilds the key table now (s->lock held); -1 with e on a database error. */
int store_keys_reload_locked(struct store *s, struct err *e);
/* Writes the keys' last uses that the database lacks (s->lock held). */
void store_keys_flush_used_locked(struct store *s);
/* Marks the key table stale: the store call that changed api_keys or
 * workspaces calls it; store_unlock rebuilds. */
void store_keys_changed(struct store *s);

/* ---- the dialect layer ------------------------------------------------------ */

/* The prepared statement for `sql` (prepared on first use), reset and with
 * no bindings; NULL with e filled when the database refuses it. */
struct store_stmt *store_stmt(struct store *s, const char *sql, struct err *e);
/* Resets st so it holds no lock and no result; st may be NULL. */
void store_stmt_done(struct store_stmt *st);

/* Parameters are numbered from 1. A NULL text binds SQL NULL. The value
 * must stay valid until the statement is done (as SQLITE_STATIC). */
void store_bind_text(struct store_stmt *st, int i, const char *v);
/* The same, the statement owning (and freeing) the malloc'd v. */
void store_bind_text_owned(struct store_stmt *st, int i, char *v);
void store_bind_int64(struct store_stmt *st, int i, int64_t v);
void store_bind_blob(struct store_stmt *st, int i, const void *p, size_t n);

/* STORE_ROW, STORE_DONE or a STORE_ERR*: runs the statement (the first
 * call) and moves to the next row. */
int store_step(struct store_stmt *st);
/* Rows the statement changed (after STORE_DONE). */
int64_t store_changes(struct store_stmt *st);

bool store_col_null(struct store_stmt *st, int i);
int64_t store_col_int64(struct store_stmt *st, int i); /* 0 for NULL */
/* The text of column i, NULL for SQL NULL; valid until the next step. */
const char *store_col_str(struct store_stmt *st, int i);
/* Copies text column i into buf (always NUL-terminated, "" for NULL). */
void store_col_text(struct store_stmt *st, int i, char *buf, size_t size);
/* Copies blob column i into buf when it is exactly n bytes: 0, else -1. */
int store_col_blob(struct store_stmt *st, int i, void *buf, size_t n);

/* Runs SQL without parameters or results (DDL, several statements). */
int store_exec(struct store *s, const char *sql, struct err *e);
/* A write transaction: SQLite's BEGIN IMMEDIATE takes the database's write
 * lock at once; PostgreSQL's BEGIN (read committed) locks rows as the
 * statements touch them. */
int store_begin(struct store *s, struct err *e);
int store_commit_tx(struct store *s, struct err *e);
/* ROLLBACK after a failure inside a transaction; never fails (the error
 * already reported is the one that matters). */
void store_rollback(struct store *s);
/* Whether a transaction is open. */
bool store_in_tx(struct store *s);
/* For writes that may be lost in a crash (activity, a key's last use: the
 * core accepts a second of them): PostgreSQL commits them without waiting
 * for the WAL flush (SET LOCAL synchronous_commit = off); SQLite writes them
 * as always. Returns whether it opened a transaction, which
 * store_relaxed_end commits (ok) or rolls back. */
bool store_relaxed_begin(struct store *s);
void store_relaxed_end(struct store *s, bool began, bool ok);

/* The last failure of the connection as e: ERR_NO_SPACE for a full disk,
 * ERR_UNAVAILABLE for a busy, unreachable or read-only database (nothing
 * was changed; try again), else ERR_INTERNAL "database error while
 * <doing>: ..."; returns -1. */
int store_db_error(struct store *s, const char *doing, struct err *e);

/* Steps a bound statement that must change at least one row: 0; or -1 with
 * the database error (while `doing`), or ERR_NOT_FOUND `missing` when no
 * row matched. */
int store_step_change(struct store *s, struct store_stmt *st, const char *doing,
		      const char *missing, struct err *e);

/* ---- the back ends (db-sqlite.c, db-pg.c) ---------------------------------- */

int store_lite_open(struct store *s, const char *path, struct err *e);
void store_lite_close(struct store *s);
int store_lite_prepare(struct store *s, struct store_stmt *st, struct err *e);
int store_lite_step(struct store_stmt *st);
int store_lite_error(struct store *s, const char *doing, struct err *e);
/* Brings the schema from PRAGMA user_version up to the last of
 * store_lite_migrations, one migration per transaction; refuses a database
 * from a newer cubicled. */
int store_lite_migrate(struct store *s, struct err *e);

int store_pg_open(struct store *s, const char *uri, struct err *e);
void store_pg_close(struct store *s);
int store_pg_step(struct store_stmt *st);
void store_pg_stmt_done(struct store_stmt *st);
const char *store_pg_col(struct store_stmt *st, int i);
int store_pg_exec(struct store *s, const char *sql, struct err *e);
bool store_pg_in_tx(struct store *s);
int store_pg_error(struct store *s, const char *doing, struct err *e);
/* Starts the listener (keys, revocations): after the schema exists. */
int store_pg_listen(struct store *s, struct err *e);
/* A statement's deadline (default 15 s; tests shorten it). */
void store_pg_set_timeout(struct store *s, int ms);

/* The schema (store-schema.c): migrations per back end, run by store_open
 * (store_lite_migrate; store.c's store_pg_migrate). */
extern const char *const store_lite_migrations[];
extern const int store_lite_schema_version;
extern const char *const store_pg_migrations[];
extern const int store_pg_schema_version;

/* ---- shared by the store files ------------------------------------------- */

/* Checks store_usage_switch's arguments (no lock needed). */
int store_usage_check(const char *computer, const char *workspace, const char *size,
		      const char *rate_state, int64_t at_ms, struct err *e);
/* store_usage_switch's work, inside a transaction the caller opened (lock
 * held, arguments checked): lets one transaction change a computer and its
 * billing together. */
int store_usage_switch_locked(struct store *s, const char *computer, const char *workspace,
			      const char *size, const char *rate_state, int64_t at_ms,
			      struct err *e);

/* Inside a write transaction of a registered host (lock held): holds the
 * host's row and checks it still has this store's epoch; ERR_CONFLICT when
 * it was fenced. 0 at once on one host. */
int store_fence_locked(struct store *s, struct err *e);
/* Inside a transaction (lock held): gives back to its host what computer
 * id's state no longer holds (store.h, store_computer_commit). */
int store_release_locked(struct store *s, const char *id, struct err *e);
/* Inside a transaction (lock held): store_place's work. */
int store_place_locked(struct store *s, const char *id, const struct store_place *p,
		       struct store_placed *out, struct err *e);

/* prefix + 16 lowercase hex digits of a CSPRNG into out (size >= len(prefix)+17). */
int store_random_id(const char *prefix, char *out, size_t size, struct err *e);

/* Whether str is non-NULL and fits (with its NUL) in a buffer of size bytes. */
int store_fits(const char *str, size_t size);

/* The states in which a computer holds CPU and memory on its host (and
 * counts against the per-workspace running limit). */
#define STORE_STATES_HOLDING "('provisioning', 'starting', 'running', 'stopping')"

#endif
