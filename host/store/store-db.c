/*
 * store-db: the dialect layer (store-internal.h). The store's files speak
 * to their database only through these functions; each one is a thin
 * switch between SQLite (sqlite3_* directly, so the embedded default costs
 * what it always did) and PostgreSQL (db-pg.c, libpq).
 */
#include "store-internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* PostgreSQL's type oids of what the store binds (pg_type.h). */
#define STORE_OID_BYTEA 17
#define STORE_OID_INT8	20
#define STORE_OID_TEXT	25

struct store_stmt *store_stmt(struct store *s, const char *sql, struct err *e)
{
	int i;
	for (i = 0; i < s->nstmts; i++) {
		if (s->stmts[i].sql == sql) {
			store_stmt_done(&s->stmts[i]);
			return &s->stmts[i];
		}
	}
	if (i == STORE_STMT_MAX) {
		/* Cannot happen with the store's fixed set of statements. */
		err_set(e, ERR_INTERNAL,
			"store: more than %d distinct statements (raise STORE_STMT_MAX)",
			STORE_STMT_MAX);
		return NULL;
	}
	struct store_stmt *st = &s->stmts[i];
	memset(st, 0, sizeof *st);
	st->s = s;
	st->sql = sql;
	snprintf(st->name, sizeof st->name, "s%d", i);
	if (s->db && store_lite_prepare(s, st, e) < 0)
		return NULL;
	/* PostgreSQL prepares at the first step, once the parameters' types
	 * are known. */
	s->nstmts++;
	return st;
}

void store_stmt_done(struct store_stmt *st)
{
	if (!st)
		return;
	if (st->lite) {
		sqlite3_reset(st->lite);
		sqlite3_clear_bindings(st->lite);
		return;
	}
	store_pg_stmt_done(st);
	for (int i = 0; i < st->nparams; i++) {
		free(st->owned[i]);
		st->owned[i] = NULL;
		st->values[i] = NULL;
		st->lengths[i] = st->formats[i] = 0;
		st->types[i] = 0;
	}
	st->nparams = 0;
}

/* The PostgreSQL slot of parameter i (1-based), or NULL past the limit. */
static int store_pg_param(struct store_stmt *st, int i)
{
	if (i < 1 || i > STORE_PARAMS_MAX)
		return -1;
	if (i > st->nparams)
		st->nparams = i;
	free(st->owned[i - 1]);
	st->owned[i - 1] = NULL;
	st->lengths[i - 1] = st->formats[i - 1] = 0;
	return i - 1;
}

void store_bind_text(struct store_stmt *st, int i, const char *v)
{
	if (st->lite) {
		if (v)
			sqlite3_bind_text(st->lite, i, v, -1, SQLITE_STATIC);
		else
			sqlite3_bind_null(st->lite, i);
		return;
	}
	int k = store_pg_param(st, i);
	if (k < 0)
		return;
	st->values[k] = v;
	st->types[k] = STORE_OID_TEXT;
}

void store_bind_text_owned(struct store_stmt *st, int i, char *v)
{
	if (st->lite) {
		if (v)
			sqlite3_bind_text(st->lite, i, v, -1, free);
		else
			sqlite3_bind_null(st->lite, i);
		return;
	}
	int k = store_pg_param(st, i);
	if (k < 0) {
		free(v);
		return;
	}
	st->values[k] = v;
	st->owned[k] = v;
	st->types[k] = STORE_OID_TEXT;
}

void store_bind_int64(struct store_stmt *st, int i, int64_t v)
{
	if (st->lite) {
		sqlite3_bind_int64(st->lite, i, v);
		return;
	}
	int k = store_pg_param(st, i);
	if (k < 0)
		return;
	snprintf(st->ints[k], sizeof st->ints[k], "%lld", (long long)v);
	st->values[k] = st->ints[k];
	st->types[k] = STORE_OID_INT8;
}

void store_bind_blob(struct store_stmt *st, int i, const void *p, size_t n)
{
	if (st->lite) {
		sqlite3_bind_blob(st->lite, i, p, (int)n, SQLITE_STATIC);
		return;
	}
	int k = store_pg_param(st, i);
	if (k < 0)
		return;
	st->values[k] = p;
	st->lengths[k] = (int)n;
	st->formats[k] = 1; /* binary */
	st->types[k] = STORE_OID_BYTEA;
}

int store_step(struct store_stmt *st)
{
	return st->lite ? store_lite_step(st) : store_pg_step(st);
}

int64_t store_changes(struct store_stmt *st)
{
	return st->lite ? st->s->changes : st->changes;
}

bool store_col_null(struct store_stmt *st, int i)
{
	if (st->lite)
		return sqlite3_column_type(st->lite, i) == SQLITE_NULL;
	return store_pg_col(st, i) == NULL;
}

int64_t store_col_int64(struct store_stmt *st, int i)
{
	if (st->lite)
		return sqlite3_column_int64(st->lite, i);
	const char *v = store_pg_col(st, i);
	return v ? strtoll(v, NULL, 10) : 0;
}

const char *store_col_str(struct store_stmt *st, int i)
{
	if (st->lite)
		return (const char *)sqlite3_column_text(st->lite, i);
	return store_pg_col(st, i);
}

void store_col_text(struct store_stmt *st, int i, char *buf, size_t size)
{
	const char *t = store_col_str(st, i);
	snprintf(buf, size, "%s", t ? t : "");
}

static int store_hex(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

int store_col_blob(struct store_stmt *st, int i, void *buf, size_t n)
{
	if (st->lite) {
		if (sqlite3_column_bytes(st->lite, i) != (int)n)
			return -1;
		memcpy(buf, sqlite3_column_blob(st->lite, i), n);
		return 0;
	}
	/* bytea in text form: "\x" and two hex digits a byte. */
	const char *v = store_pg_col(st, i);
	if (!v || strncmp(v, "\\x", 2) != 0 || strlen(v + 2) != 2 * n)
		return -1;
	unsigned char *out = buf;
	for (size_t k = 0; k < n; k++) {
		int hi = store_hex(v[2 + 2 * k]), lo = store_hex(v[3 + 2 * k]);
		if (hi < 0 || lo < 0)
			return -1;
		out[k] = (unsigned char)(hi << 4 | lo);
	}
	return 0;
}

int store_exec(struct store *s, const char *sql, struct err *e)
{
	if (s->pg)
		return store_pg_exec(s, sql, e);
	if (sqlite3_exec(s->db, sql, NULL, NULL, NULL) != SQLITE_OK)
		return store_db_error(s, sql, e);
	return 0;
}

int store_begin(struct store *s, struct err *e)
{
	return store_exec(s, s->pg ? "BEGIN" : "BEGIN IMMEDIATE", e);
}

int store_commit_tx(struct store *s, struct err *e)
{
	return store_exec(s, "COMMIT", e);
}

void store_rollback(struct store *s)
{
	/* Fails harmlessly when the database already rolled back by itself
	 * (or the connection is gone, and the transaction with it). */
	if (s->pg)
		store_pg_exec(s, "ROLLBACK", NULL);
	else
		sqlite3_exec(s->db, "ROLLBACK", NULL, NULL, NULL);
}

bool store_in_tx(struct store *s)
{
	return s->pg ? store_pg_in_tx(s) : !sqlite3_get_autocommit(s->db);
}

bool store_relaxed_begin(struct store *s)
{
	if (!s->pg || store_in_tx(s))
		return false;
	return store_pg_exec(s, "BEGIN; SET LOCAL synchronous_commit = off", NULL) == 0;
}

void store_relaxed_end(struct store *s, bool began, bool ok)
{
	if (!began)
		return;
	if (!ok || store_commit_tx(s, NULL) < 0)
		store_rollback(s);
}

int store_db_error(struct store *s, const char *doing, struct err *e)
{
	return s->pg ? store_pg_error(s, doing, e) : store_lite_error(s, doing, e);
}

int store_step_change(struct store *s, struct store_stmt *st, const char *doing,
		      const char *missing, struct err *e)
{
	if (store_step(st) != STORE_DONE)
		return store_db_error(s, doing, e);
	if (store_changes(st) == 0)
		return err_set(e, ERR_NOT_FOUND, "%s", missing);
	return 0;
}
