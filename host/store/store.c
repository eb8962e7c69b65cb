/*
 * store: opening and closing (either back end), the schema migrations, the
 * lock, and the helpers the other store files share (ids, the key table's
 * staleness, change callbacks).
 *
 * Schema changes: append a migration to both lists of store-schema.c
 * (SQLite's and PostgreSQL's). SQLite's PRAGMA user_version and
 * PostgreSQL's cubicle_schema.version record how many have run. Never edit
 * a migration that has shipped.
 */
#include "store-internal.h"
#include "clock.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <openssl/rand.h>

void store_lock(struct store *s)
{
	pthread_mutex_lock(&s->lock);
}

void store_unlock(struct store *s)
{
	/* Outside a transaction only: inside one the change may still roll
	 * back, and the transaction's own store_unlock comes later. */
	if (s->keys_dirty && !store_in_tx(s)) {
		struct err e = {0};
		/* Said once per 10 s: while a database is away, every call
		 * tries again. */
		if (store_keys_reload_locked(s, &e) < 0 &&
		    clock_now_ms() - s->keys_said_ms > 10000) {
			fprintf(stderr, "cubicled: store: %s\n", e.message);
			s->keys_said_ms = clock_now_ms();
		}
	}
	pthread_mutex_unlock(&s->lock);
}

void store_keys_changed(struct store *s)
{
	s->keys_dirty = true;
}

void store_keys_invalidate(struct store *s)
{
	store_lock(s);
	s->keys_dirty = true;
	store_unlock(s);
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

int store_fits(const char *str, size_t size)
{
	return str && strnlen(str, size) < size;
}

bool store_where_is_postgres(const char *where)
{
	return where &&
	       (strncmp(where, "postgresql://", 13) == 0 || strncmp(where, "postgres://", 11) == 0);
}

const char *store_backend(const struct store *s)
{
	return s->pg ? "postgresql" : "sqlite";
}

static const char SQL_PING[] = "SELECT 1";

int store_ping(struct store *s, struct err *e)
{
	store_lock(s);
	struct store_stmt *st = store_stmt(s, SQL_PING, e);
	int rc =
	    st ? (store_step(st) == STORE_ROW ? 0 : store_db_error(s, "answering a ping", e)) : -1;
	store_stmt_done(st);
	store_unlock(s);
	return rc;
}

void store_on_stream_revoke(struct store *s,
			    void (*fn)(void *ctx, const char *computer, int64_t revoked_ms),
			    void *ctx)
{
	pthread_mutex_lock(&s->revoke_lock);
	s->on_revoke = fn;
	s->on_revoke_ctx = ctx;
	pthread_mutex_unlock(&s->revoke_lock);
}

static const char SQL_HOSTS_ANY[] = "SELECT 1 FROM hosts LIMIT 1";

/* s->hosts_known (store-internal.h) at open. */
static int store_hosts_known_locked(struct store *s, struct err *e)
{
	if (s->pg) {
		s->hosts_known = true;
		return 0;
	}
	struct store_stmt *st = store_stmt(s, SQL_HOSTS_ANY, e);
	int step = st ? store_step(st) : STORE_ERR;
	store_stmt_done(st);
	s->hosts_known = step == STORE_ROW;
	return step == STORE_ROW || step == STORE_DONE ? 0 : store_db_error(s, "reading hosts", e);
}

/* PostgreSQL: the same, in one transaction under an advisory lock, so
 * hosts that start together migrate once and never see half a schema. */
static const char SQL_PG_VERSION[] = "SELECT version FROM cubicle_schema";
static const char SQL_PG_SET_VERSION[] = "UPDATE cubicle_schema SET version = ?1";

static int store_pg_migrate(struct store *s, struct err *e)
{
	if (store_begin(s, e))
		return -1;
	/* 0x637562696331 = "cubic1": the lock the store's migrations share. */
	if (store_exec(s,
		       "SELECT pg_advisory_xact_lock(109278208795441);"
		       "CREATE TABLE IF NOT EXISTS cubicle_schema (version BIGINT NOT NULL);"
		       "INSERT INTO cubicle_schema SELECT 0"
		       " WHERE NOT EXISTS (SELECT 1 FROM cubicle_schema)",
		       e))
		goto fail;
	struct store_stmt *st = store_stmt(s, SQL_PG_VERSION, e);
	if (!st)
		goto fail;
	int64_t version = store_step(st) == STORE_ROW ? store_col_int64(st, 0) : -1;
	store_stmt_done(st);
	if (version < 0) {
		store_db_error(s, "reading the schema version", e);
		goto fail;
	}
	if (version > store_pg_schema_version) {
		err_set(e, ERR_INTERNAL,
			"database %s has schema version %lld, newer than this cubicled knows "
			"(%d): run a newer cubicled on every host",
			s->where, (long long)version, store_pg_schema_version);
		goto fail;
	}
	for (; version < store_pg_schema_version; version++)
		if (store_exec(s, store_pg_migrations[version], e))
			goto fail;
	if (!(st = store_stmt(s, SQL_PG_SET_VERSION, e)))
		goto fail;
	store_bind_int64(st, 1, version);
	int step = store_step(st);
	store_stmt_done(st);
	if (step != STORE_DONE) {
		store_db_error(s, "recording the schema version", e);
		goto fail;
	}
	return store_commit_tx(s, e);
fail:
	store_rollback(s);
	return -1;
}

struct store *store_open(const char *where, struct err *e)
{
	if (!where || !*where) {
		err_param(e, "database", "database: neither a path nor a postgresql:// URI");
		return NULL;
	}
	struct store *s = calloc(1, sizeof *s);
	if (!s) {
		err_set(e, ERR_INTERNAL, "out of memory opening the store");
		return NULL;
	}
	if (strlen(where) >= sizeof s->where) {
		free(s);
		err_param(e, "database", "database: longer than %zu bytes", sizeof s->where - 1);
		return NULL;
	}
	pthread_mutex_init(&s->lock, NULL);
	pthread_mutex_init(&s->keys_lock, NULL);
	pthread_mutex_init(&s->revoke_lock, NULL);
	bool pg = store_where_is_postgres(where);
	if (!pg)
		snprintf(s->where, sizeof s->where, "%s", where);
	/* PostgreSQL's listener starts once its tables exist, and before the
	 * keys are loaded, so no change falls between the two. */
	if (pg ? store_pg_open(s, where, e) || store_pg_migrate(s, e) || store_pg_listen(s, e)
	       : store_lite_open(s, where, e) || store_lite_migrate(s, e)) {
		store_close(s);
		return NULL;
	}
	store_lock(s);
	int rc = store_keys_reload_locked(s, e);
	if (rc == 0)
		rc = store_hosts_known_locked(s, e);
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
	if (s->db || s->pg) {
		store_lock(s);
		store_keys_flush_used_locked(s);
		for (int i = 0; i < s->nstmts; i++)
			store_stmt_done(&s->stmts[i]);
		pthread_mutex_unlock(&s->lock);
	}
	if (s->pg)
		store_pg_close(s);
	if (s->db)
		store_lite_close(s);
	pthread_mutex_destroy(&s->lock);
	pthread_mutex_destroy(&s->keys_lock);
	pthread_mutex_destroy(&s->revoke_lock);
	free(s->keys);
	free(s);
}
