/*
 * streams: what lets a stream token be checked on any host: the keys
 * tokens are signed with (by id) and the revocations (store.h).
 */
#include "store-internal.h"
#include "clock.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/crypto.h>
#include <openssl/rand.h>

/* ---- revocations ------------------------------------------------------------ */

static const char SQL_STREAM_REVOKE[] =
    "INSERT INTO stream_revocations (computer, revoked_ms, expires_ms) VALUES (?1, ?2, ?3)"
    " ON CONFLICT (computer) DO UPDATE SET"
    " revoked_ms = GREATEST(stream_revocations.revoked_ms, excluded.revoked_ms),"
    " expires_ms = GREATEST(stream_revocations.expires_ms, excluded.expires_ms)";
static const char SQL_STREAM_PRUNE[] = "DELETE FROM stream_revocations WHERE expires_ms < ?1";
static const char SQL_STREAM_LIST[] = "SELECT computer, revoked_ms FROM stream_revocations";

int store_stream_revoke(struct store *s, const char *computer, int64_t revoked_ms,
			int64_t expires_ms, struct err *e)
{
	if (!computer || !*computer)
		return err_param(e, "computer", "computer: the computer id is empty");
	store_lock(s);
	int rc = -1;
	struct store_stmt *st = store_stmt(s, SQL_STREAM_PRUNE, e);
	if (st) {
		store_bind_int64(st, 1, revoked_ms);
		store_step(st); /* pruning is housekeeping: its failure is not this call's */
		store_stmt_done(st);
	}
	if ((st = store_stmt(s, SQL_STREAM_REVOKE, e))) {
		store_bind_text(st, 1, computer);
		store_bind_int64(st, 2, revoked_ms);
		store_bind_int64(st, 3, expires_ms);
		if (store_step(st) == STORE_DONE)
			rc = 0;
		else
			store_db_error(s, "recording a stream revocation", e);
	}
	store_stmt_done(st);
	store_unlock(s);
	/* PostgreSQL's trigger tells every host's listener, this one's too;
	 * SQLite has no other host: tell the callback here. */
	if (rc == 0 && !s->pg) {
		pthread_mutex_lock(&s->revoke_lock);
		if (s->on_revoke)
			s->on_revoke(s->on_revoke_ctx, computer, revoked_ms);
		pthread_mutex_unlock(&s->revoke_lock);
	}
	return rc;
}

int store_stream_revocations(struct store *s, int64_t now_ms,
			     void (*fn)(void *ctx, const char *computer, int64_t revoked_ms),
			     void *ctx, struct err *e)
{
	/* Copied out first: fn may take other locks. */
	struct rev {
		char computer[40];
		int64_t revoked_ms;
	} *list = NULL;
	size_t n = 0, cap = 0;
	int rc = -1;
	store_lock(s);
	struct store_stmt *st = store_stmt(s, SQL_STREAM_PRUNE, e);
	if (st) {
		store_bind_int64(st, 1, now_ms);
		if (store_step(st) == STORE_DONE)
			rc = 0;
		else
			store_db_error(s, "pruning stream revocations", e);
		store_stmt_done(st);
	}
	if (rc == 0 && (st = store_stmt(s, SQL_STREAM_LIST, e))) {
		int step = STORE_DONE;
		while (rc == 0 && (step = store_step(st)) == STORE_ROW) {
			if (n == cap) {
				size_t ncap = cap ? 2 * cap : 16;
				struct rev *grown = realloc(list, ncap * sizeof *list);
				if (!grown) {
					rc = err_set(e, ERR_INTERNAL, "out of memory");
					break;
				}
				list = grown;
				cap = ncap;
			}
			store_col_text(st, 0, list[n].computer, sizeof list[n].computer);
			list[n].revoked_ms = store_col_int64(st, 1);
			n++;
		}
		if (rc == 0 && step != STORE_DONE)
			rc = store_db_error(s, "reading stream revocations", e);
		store_stmt_done(st);
	} else if (rc == 0) {
		rc = -1;
	}
	store_unlock(s);
	for (size_t i = 0; rc == 0 && i < n; i++)
		fn(ctx, list[i].computer, list[i].revoked_ms);
	free(list);
	return rc;
}

/* ---- signing keys ------------------------------------------------------------ */

/* The advisory lock the first key is made under: "cubk". */
#define STORE_STREAM_KEY_LOCK "1668637291"

static const char SQL_KEY_NEWEST[] =
    "SELECT id, secret, created_ms FROM stream_keys ORDER BY created_ms DESC, id DESC LIMIT 1";
static const char SQL_KEY_GET[] = "SELECT id, secret, created_ms FROM stream_keys WHERE id = ?1";
/* The first key of a database: a host that lost the race inserts nothing
 * and reads the winner's. */
static const char SQL_KEY_FIRST[] =
    "INSERT INTO stream_keys (id, secret, created_ms)"
    " SELECT ?1, ?2, ?3 WHERE NOT EXISTS (SELECT 1 FROM stream_keys)";
static const char SQL_KEY_ADD[] =
    "INSERT INTO stream_keys (id, secret, created_ms) VALUES (?1, ?2, ?3)";
static const char SQL_KEY_RETIRE[] =
    "DELETE FROM stream_keys WHERE created_ms < ?1 AND id <> (SELECT id FROM stream_keys"
    " ORDER BY created_ms DESC, id DESC LIMIT 1)";

/* Reads one key row of a bound statement: 1 found, 0 none, -1 error. */
static int store_stream_key_row(struct store *s, struct store_stmt *st,
				struct store_stream_key *out, struct err *e)
{
	int step = store_step(st);
	if (step == STORE_DONE)
		return 0;
	if (step != STORE_ROW)
		return store_db_error(s, "reading a stream-token key", e);
	memset(out, 0, sizeof *out);
	store_col_text(st, 0, out->id, sizeof out->id);
	out->created_ms = store_col_int64(st, 2);
	if (store_col_blob(st, 1, out->secret, sizeof out->secret) < 0)
		return err_set(e, ERR_INTERNAL, "stream-token key %s is corrupt in the database",
			       out->id);
	return 1;
}

/* A fresh key into k (random, or seed's bytes). */
static int store_stream_key_make(const unsigned char *seed, struct store_stream_key *k,
				 struct err *e)
{
	memset(k, 0, sizeof *k);
	if (store_random_id("sk-", k->id, sizeof k->id, e))
		return -1;
	if (seed)
		memcpy(k->secret, seed, sizeof k->secret);
	else if (RAND_bytes(k->secret, sizeof k->secret) != 1)
		return err_set(e, ERR_INTERNAL, "the random generator failed (RAND_bytes)");
	k->created_ms = clock_wall_ms();
	return 0;
}

/* Inserts k with statement sql (lock held). */
static int store_stream_key_insert_locked(struct store *s, const char *sql,
					  const struct store_stream_key *k, struct err *e)
{
	struct store_stmt *st = store_stmt(s, sql, e);
	if (!st)
		return -1;
	store_bind_text(st, 1, k->id);
	store_bind_blob(st, 2, k->secret, sizeof k->secret);
	store_bind_int64(st, 3, k->created_ms);
	int step = store_step(st);
	store_stmt_done(st);
	return step == STORE_DONE ? 0 : store_db_error(s, "storing a stream-token key", e);
}

int store_stream_key_current(struct store *s, const unsigned char *seed,
			     struct store_stream_key *out, struct err *e)
{
	struct store_stream_key fresh;
	if (store_stream_key_make(seed, &fresh, e))
		return -1;
	int rc = -1;
	store_lock(s);
	/* One transaction (PostgreSQL: under a lock of its own), so hosts
	 * starting together make one first key, not one each. */
	int found = -1;
	struct store_stmt *st = NULL;
	if (store_begin(s, e) == 0 &&
	    (!s->pg ||
	     store_exec(s, "SELECT pg_advisory_xact_lock(" STORE_STREAM_KEY_LOCK ")", e) == 0) &&
	    (st = store_stmt(s, SQL_KEY_NEWEST, e)))
		found = store_stream_key_row(s, st, out, e);
	store_stmt_done(st);
	if (found == 0 && store_stream_key_insert_locked(s, SQL_KEY_FIRST, &fresh, e) == 0 &&
	    (st = store_stmt(s, SQL_KEY_NEWEST, e))) {
		found = store_stream_key_row(s, st, out, e);
		store_stmt_done(st);
		if (found == 0)
			err_set(e, ERR_INTERNAL, "no stream-token key after making one");
	}
	if (found == 1 && store_commit_tx(s, e) == 0)
		rc = 0;
	else
		store_rollback(s);
	store_unlock(s);
	OPENSSL_cleanse(&fresh, sizeof fresh);
	return rc;
}

int store_stream_key_get(struct store *s, const char *id, struct store_stream_key *out,
			 struct err *e)
{
	if (!id || !*id || strlen(id) >= sizeof out->id)
		return err_set(e, ERR_NOT_FOUND, "no stream-token key %.32s", id ? id : "");
	store_lock(s);
	struct store_stmt *st = store_stmt(s, SQL_KEY_GET, e);
	int found = -1;
	if (st) {
		store_bind_text(st, 1, id);
		found = store_stream_key_row(s, st, out, e);
	}
	store_stmt_done(st);
	store_unlock(s);
	if (found == 0)
		return err_set(e, ERR_NOT_FOUND, "no stream-token key %.32s", id);
	return found == 1 ? 0 : -1;
}

int store_stream_key_rotate(struct store *s, struct store_stream_key *out, struct err *e)
{
	struct store_stream_key k;
	if (store_stream_key_make(NULL, &k, e))
		return -1;
	store_lock(s);
	int rc = store_stream_key_insert_locked(s, SQL_KEY_ADD, &k, e);
	store_unlock(s);
	if (rc == 0 && out)
		*out = k;
	OPENSSL_cleanse(&k, sizeof k);
	return rc;
}

int store_stream_key_retire(struct store *s, int64_t before_ms, struct err *e)
{
	store_lock(s);
	int rc = -1;
	struct store_stmt *st = store_stmt(s, SQL_KEY_RETIRE, e);
	if (st) {
		store_bind_int64(st, 1, before_ms);
		rc = store_step(st) == STORE_DONE
			 ? 0
			 : store_db_error(s, "retiring stream-token keys", e);
	}
	store_stmt_done(st);
	store_unlock(s);
	return rc;
}
