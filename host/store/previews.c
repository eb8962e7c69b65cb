/*
 * previews: the ports of computers made public and the revocations of
 * preview and CDP tokens, kept across a restart (store.h).
 */
#include "store-internal.h"

#include <stdlib.h>
#include <string.h>

static const char SQL_PREVIEW_PUT[] =
    "INSERT INTO previews (computer, port, public_since_ms, public_until_ms, revoked_ms,"
    " expires_ms, issued_ms) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)"
    " ON CONFLICT (computer, port) DO UPDATE SET"
    " public_since_ms = CASE WHEN excluded.public_until_ms > 0 THEN excluded.public_since_ms"
    "  WHEN excluded.revoked_ms >= previews.public_since_ms THEN 0"
    "  ELSE previews.public_since_ms END,"
    " public_until_ms = CASE WHEN excluded.public_until_ms > 0 THEN excluded.public_until_ms"
    "  WHEN excluded.revoked_ms >= previews.public_since_ms THEN 0"
    "  ELSE previews.public_until_ms END,"
    " revoked_ms = GREATEST(previews.revoked_ms, excluded.revoked_ms),"
    " issued_ms = GREATEST(previews.issued_ms, excluded.issued_ms),"
    " expires_ms = GREATEST(previews.expires_ms, excluded.expires_ms)";
static const char SQL_PREVIEW_PRUNE[] = "DELETE FROM previews WHERE expires_ms < ?1";
static const char SQL_PREVIEW_LIST[] =
    "SELECT computer, port, public_since_ms, public_until_ms, revoked_ms, expires_ms,"
    " issued_ms FROM previews";

int store_preview_put(struct store *s, const struct store_preview *p, struct err *e)
{
	if (!p->computer[0] || p->port < 0 || p->port > 65535)
		return err_param(e, "computer", "computer: not a preview of a computer's port");
	store_lock(s);
	int rc = -1;
	struct store_stmt *st = store_stmt(s, SQL_PREVIEW_PUT, e);
	if (st) {
		store_bind_text(st, 1, p->computer);
		store_bind_int64(st, 2, p->port);
		store_bind_int64(st, 3, p->public_since_ms);
		store_bind_int64(st, 4, p->public_until_ms);
		store_bind_int64(st, 5, p->revoked_ms);
		store_bind_int64(st, 6, p->expires_ms);
		store_bind_int64(st, 7, p->issued_ms);
		if (store_step(st) == STORE_DONE)
			rc = 0;
		else
			store_db_error(s, "recording a preview", e);
	}
	store_stmt_done(st);
	store_unlock(s);
	return rc;
}

int store_previews(struct store *s, int64_t now_ms,
		   void (*fn)(void *ctx, const struct store_preview *p), void *ctx, struct err *e)
{
	/* Copied out first: fn may take other locks. */
	struct store_preview *list = NULL;
	size_t n = 0, cap = 0;
	int rc = -1;
	store_lock(s);
	struct store_stmt *st = store_stmt(s, SQL_PREVIEW_PRUNE, e);
	if (st) {
		store_bind_int64(st, 1, now_ms);
		if (store_step(st) == STORE_DONE)
			rc = 0;
		else
			store_db_error(s, "pruning previews", e);
		store_stmt_done(st);
	}
	if (rc == 0 && (st = store_stmt(s, SQL_PREVIEW_LIST, e))) {
		int step = STORE_DONE;
		while (rc == 0 && (step = store_step(st)) == STORE_ROW) {
			if (n == cap) {
				size_t ncap = cap ? 2 * cap : 16;
				struct store_preview *grown = realloc(list, ncap * sizeof *list);
				if (!grown) {
					rc = err_set(e, ERR_INTERNAL, "out of memory");
					break;
				}
				list = grown;
				cap = ncap;
			}
			struct store_preview *p = &list[n++];
			store_col_text(st, 0, p->computer, sizeof p->computer);
			p->port = (int)store_col_int64(st, 1);
			p->public_since_ms = store_col_int64(st, 2);
			p->public_until_ms = store_col_int64(st, 3);
			p->revoked_ms = store_col_int64(st, 4);
			p->expires_ms = store_col_int64(st, 5);
			p->issued_ms = store_col_int64(st, 6);
		}
		if (rc == 0 && step != STORE_DONE)
			rc = store_db_error(s, "reading previews", e);
		store_stmt_done(st);
	} else if (rc == 0) {
		rc = -1;
	}
	store_unlock(s);
	for (size_t i = 0; rc == 0 && i < n; i++)
		fn(ctx, &list[i]);
	free(list);
	return rc;
}
