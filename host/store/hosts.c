/*
 * hosts: a cluster's members in the shared database: registration under a
 * lease (the epoch), capacity and placement, the release of what a
 * computer no longer holds, fencing and the reaper's step (store.h).
 *
 * Placement is one UPDATE of hosts whose WHERE clause both chooses the host
 * (a scalar subquery: the most free memory among those with room) and
 * re-checks the room on the row it updates. Two placements racing for the
 * last room of a host: SQLite runs them one after the other (its write
 * lock); PostgreSQL makes the second wait for the first's row lock and then
 * re-evaluates the WHERE clause on the updated row (read committed), so it
 * changes no row, and store_place_locked tries again (a new statement, a
 * new snapshot: the next best host). The hosts_within_capacity CHECK is the
 * last line behind it: nothing can commit an overcommitted host.
 *
 * Fencing: a registered host's writes first check, in their transaction,
 * that its row still has its epoch; the reaper and a re-registration change
 * the epoch under the same lock, so a write either commits before the reap
 * (which then takes what it wrote into account) or fails after it. On
 * PostgreSQL the lock is a transaction-level advisory lock keyed by the
 * host's id (shared for a host's own writes, exclusive for the reaper and
 * registration): a row lock there would deadlock two hosts that place on
 * each other. On SQLite, BEGIN IMMEDIATE already serialises every write.
 */
#include "store-internal.h"
#include "clock.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Placement attempts lost to a concurrent placement before giving up. */
#define STORE_PLACE_ATTEMPTS 8

/* The advisory locks' first key: "cubh". */
#define STORE_HOST_LOCK_CLASS "1668637288"

static const char SQL_FENCE_SHARED[] =
    "SELECT pg_advisory_xact_lock_shared(" STORE_HOST_LOCK_CLASS ", hashtext(?1))";
static const char SQL_FENCE_EXCLUSIVE[] =
    "SELECT pg_advisory_xact_lock(" STORE_HOST_LOCK_CLASS ", hashtext(?1))";
static const char SQL_FENCE_CHECK[] = "SELECT 1 FROM hosts WHERE id = ?1 AND epoch = ?2";

/* What a computer's state no longer holds goes back to its host: CPU and
 * memory outside the holding states, the disk once deleted or lost. */
#define STORE_RELEASE_CPU  "CASE WHEN state IN " STORE_STATES_HOLDING " THEN 0 ELSE cpu_milli END"
#define STORE_RELEASE_MEM  "CASE WHEN state IN " STORE_STATES_HOLDING " THEN 0 ELSE mem_mb END"
#define STORE_RELEASE_DISK "CASE WHEN state IN ('deleted', 'lost') THEN disk_mb ELSE 0 END"
static const char SQL_RELEASE_HOST[] =
    "UPDATE hosts SET cpu_milli_used = cpu_milli_used - r.cpu,"
    " mem_mb_used = mem_mb_used - r.mem, disk_mb_used = disk_mb_used - r.disk"
    " FROM (SELECT host, " STORE_RELEASE_CPU " AS cpu, " STORE_RELEASE_MEM
    " AS mem, " STORE_RELEASE_DISK " AS disk FROM computers WHERE id = ?1) AS r"
    " WHERE hosts.id = r.host AND (r.cpu <> 0 OR r.mem <> 0 OR r.disk <> 0)";
static const char SQL_RELEASE_COMPUTER[] =
    "UPDATE computers SET cpu_milli = cpu_milli - " STORE_RELEASE_CPU ","
    " mem_mb = mem_mb - " STORE_RELEASE_MEM ", disk_mb = disk_mb - " STORE_RELEASE_DISK
    " WHERE id = ?1";

/* The placement: ?1..?3 the need, ?4 a host or NULL, ?5 ",excluded,ids,". */
#define STORE_PLACE_ELIGIBLE                                                                       \
	"epoch <> 0 AND (state = 'up' OR (?4 IS NOT NULL AND state = 'draining'))"                 \
	" AND (?4 IS NULL OR id = ?4) AND STRPOS(?5, ',' || id || ',') = 0"
#define STORE_PLACE_ROOM                                                                           \
	"(cpu_milli_used + ?1) * 100 <= cpu_milli * cpu_overcommit_pct"                            \
	" AND mem_mb_used + ?2 <= mem_mb AND disk_mb_used + ?3 <= disk_mb"
static const char SQL_PLACE[] =
    "UPDATE hosts SET cpu_milli_used = cpu_milli_used + ?1, mem_mb_used = mem_mb_used + ?2,"
    " disk_mb_used = disk_mb_used + ?3"
    " WHERE id = (SELECT id FROM hosts WHERE " STORE_PLACE_ELIGIBLE " AND " STORE_PLACE_ROOM
    " ORDER BY mem_mb - mem_mb_used DESC,"
    " cpu_milli * cpu_overcommit_pct - cpu_milli_used * 100 DESC, id LIMIT 1)"
    " AND " STORE_PLACE_ELIGIBLE " AND " STORE_PLACE_ROOM " RETURNING id, epoch, address";
static const char SQL_PLACE_ANY_ROOM[] =
    "SELECT COUNT(*) FROM hosts WHERE " STORE_PLACE_ELIGIBLE " AND " STORE_PLACE_ROOM;
/* Moving a computer: what it held on another host goes back there. */
static const char SQL_PLACE_LEAVE[] =
    "UPDATE hosts SET cpu_milli_used = cpu_milli_used - c.cpu_milli,"
    " mem_mb_used = mem_mb_used - c.mem_mb, disk_mb_used = disk_mb_used - c.disk_mb"
    " FROM (SELECT host, cpu_milli, mem_mb, disk_mb FROM computers WHERE id = ?1) AS c"
    " WHERE hosts.id = c.host AND c.host <> ?2";
static const char SQL_PLACE_RECORD[] =
    "UPDATE computers SET"
    " cpu_milli = CASE WHEN host = ?2 THEN cpu_milli ELSE 0 END + ?4,"
    " mem_mb = CASE WHEN host = ?2 THEN mem_mb ELSE 0 END + ?5,"
    " disk_mb = CASE WHEN host = ?2 THEN disk_mb ELSE 0 END + ?6,"
    " host = ?2, epoch = ?3 WHERE id = ?1";
static const char SQL_PLACE_HELD[] =
    "SELECT host, cpu_milli, mem_mb, disk_mb FROM computers WHERE id = ?1";

static const char SQL_HOST_ENSURE[] =
    "INSERT INTO hosts (id) VALUES (?1) ON CONFLICT (id) DO NOTHING";
static const char SQL_HOST_EPOCH[] = "SELECT epoch FROM hosts WHERE id = ?1";
static const char SQL_HOST_ADOPT[] =
    "UPDATE computers SET epoch = ?3 WHERE host = ?1 AND epoch = ?2"
    " AND state NOT IN ('deleted', 'lost')";
static const char SQL_HOST_REGISTER[] =
    "UPDATE hosts SET address = ?2, epoch = ?3,"
    " state = CASE WHEN state = 'draining' THEN 'draining' ELSE 'up' END,"
    " cpu_overcommit_pct = ?5,"
    " cpu_milli = GREATEST(?4, (cpu_milli_used * 100 + ?5 - 1) / ?5),"
    " mem_mb = GREATEST(?6, mem_mb_used), disk_mb = GREATEST(?7, disk_mb_used),"
    " registered_ms = ?8, seen_ms = ?8 WHERE id = ?1";
static const char SQL_HOST_DOWN[] =
    "UPDATE hosts SET epoch = 0, state = 'down' WHERE id = ?1 AND epoch = ?2";
static const char SQL_REAP_SEGMENTS[] =
    "UPDATE usage_segments SET open = 0 WHERE open = 1"
    " AND computer IN (SELECT id FROM computers WHERE host = ?1 AND epoch = ?2)";
static const char SQL_REAP_DELETING[] =
    "UPDATE computers SET state = 'deleted', updated_ms = ?3,"
    " deleted_ms = CASE WHEN deleted_ms = 0 THEN ?3 ELSE deleted_ms END,"
    " cpu_milli = 0, mem_mb = 0, disk_mb = 0"
    " WHERE host = ?1 AND epoch = ?2 AND state = 'deleting'";
static const char SQL_REAP_LOST[] =
    "UPDATE computers SET state = 'lost', error = ?4, updated_ms = ?3,"
    " cpu_milli = 0, mem_mb = 0, disk_mb = 0"
    " WHERE host = ?1 AND epoch = ?2 AND state NOT IN ('deleted', 'lost')";
static const char SQL_REAP_USED[] =
    "UPDATE hosts SET"
    " cpu_milli_used = (SELECT COALESCE(SUM(cpu_milli), 0) FROM computers WHERE host = ?1),"
    " mem_mb_used = (SELECT COALESCE(SUM(mem_mb), 0) FROM computers WHERE host = ?1),"
    " disk_mb_used = (SELECT COALESCE(SUM(disk_mb), 0) FROM computers WHERE host = ?1)"
    " WHERE id = ?1";

#define STORE_HOST_COLUMNS                                                                         \
	"id, address, epoch, state, cpu_milli, cpu_overcommit_pct, mem_mb, disk_mb,"               \
	" cpu_milli_used, mem_mb_used, disk_mb_used, registered_ms, seen_ms,"                      \
	" (SELECT COUNT(*) FROM computers c WHERE c.host = hosts.id"                               \
	"  AND c.state NOT IN ('deleted', 'lost'))"
static const char SQL_HOST_GET[] = "SELECT " STORE_HOST_COLUMNS " FROM hosts WHERE id = ?1";
static const char SQL_HOST_LIST[] = "SELECT " STORE_HOST_COLUMNS " FROM hosts ORDER BY id";
static const char SQL_HOST_SET_STATE[] =
    "UPDATE hosts SET state = ?2 WHERE id = ?1 AND state <> 'down'";

/* ---- helpers ------------------------------------------------------------------- */

/* Runs a bound statement without rows: its changes, or -1 with e. */
static int64_t store_run(struct store *s, struct store_stmt *st, const char *doing, struct err *e)
{
	int step = store_step(st);
	int64_t n = store_changes(st);
	store_stmt_done(st);
	if (step == STORE_ERR_CHECK)
		return err_set(e, ERR_CONFLICT,
			       "a host's capacity would be exceeded (or go negative) while %s; "
			       "nothing was changed",
			       doing);
	if (step != STORE_DONE)
		return store_db_error(s, doing, e);
	return n;
}

/* A statement taking a host id (?1) and an epoch (?2), run (lock held). */
static int64_t store_run_host(struct store *s, const char *sql, const char *id, int64_t epoch,
			      const char *doing, struct err *e)
{
	struct store_stmt *st = store_stmt(s, sql, e);
	if (!st)
		return -1;
	store_bind_text(st, 1, id);
	store_bind_int64(st, 2, epoch);
	return store_run(s, st, doing, e);
}

/* PostgreSQL: the host's advisory lock for this transaction (lock held). */
static int store_host_lock_locked(struct store *s, const char *id, bool exclusive, struct err *e)
{
	if (!s->pg)
		return 0; /* SQLite: BEGIN IMMEDIATE holds the database */
	struct store_stmt *st =
	    store_stmt(s, exclusive ? SQL_FENCE_EXCLUSIVE : SQL_FENCE_SHARED, e);
	if (!st)
		return -1;
	store_bind_text(st, 1, id);
	int step = store_step(st);
	store_stmt_done(st);
	return step == STORE_ROW ? 0 : store_db_error(s, "locking a host", e);
}

static bool store_host_id_ok(const char *id)
{
	size_t n = 0;
	for (; id && id[n]; n++) {
		char c = id[n];
		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
		      c == '-' || c == '_' || c == '.'))
			return false;
	}
	return n > 0 && n < STORE_HOST_ID_LEN;
}

int store_fence_locked(struct store *s, struct err *e)
{
	if (!s->host[0])
		return 0;
	if (store_host_lock_locked(s, s->host, false, e))
		return -1;
	struct store_stmt *st = store_stmt(s, SQL_FENCE_CHECK, e);
	if (!st)
		return -1;
	store_bind_text(st, 1, s->host);
	store_bind_int64(st, 2, s->epoch);
	int step = store_step(st);
	store_stmt_done(st);
	if (step == STORE_ROW)
		return 0;
	if (step != STORE_DONE)
		return store_db_error(s, "checking this host's lease", e);
	return err_set(e, ERR_CONFLICT,
		       "this host (%s) no longer holds its lease (epoch %lld): it was declared "
		       "dead or registered again; nothing was changed",
		       s->host, (long long)s->epoch);
}

int store_release_locked(struct store *s, const char *id, struct err *e)
{
	struct store_stmt *st = store_stmt(s, SQL_RELEASE_HOST, e);
	if (!st)
		return -1;
	store_bind_text(st, 1, id);
	int64_t n = store_run(s, st, "freeing what a computer held", e);
	if (n <= 0)
		return n < 0 ? -1 : 0;
	if (!(st = store_stmt(s, SQL_RELEASE_COMPUTER, e)))
		return -1;
	store_bind_text(st, 1, id);
	return store_run(s, st, "freeing what a computer held", e) < 0 ? -1 : 0;
}

/* ---- placement ------------------------------------------------------------------- */

/* How many hosts could take need now (lock held); -1 on error. */
static int64_t store_place_room_locked(struct store *s, const struct store_place *p,
				       const struct store_capacity *need, const char *excl,
				       struct err *e)
{
	struct store_stmt *st = store_stmt(s, SQL_PLACE_ANY_ROOM, e);
	if (!st)
		return -1;
	store_bind_int64(st, 1, need->cpu_milli);
	store_bind_int64(st, 2, need->mem_mb);
	store_bind_int64(st, 3, need->disk_mb);
	store_bind_text(st, 4, p->host);
	store_bind_text(st, 5, excl);
	int step = store_step(st);
	int64_t n = step == STORE_ROW ? store_col_int64(st, 0) : -1;
	store_stmt_done(st);
	return n < 0 ? store_db_error(s, "looking for a host with room", e) : n;
}

/* The placement statement once: 1 placed (out filled), 0 no row, -1 error. */
static int store_place_once_locked(struct store *s, const struct store_place *p,
				   const struct store_capacity *need, const char *excl,
				   struct store_placed *out, struct err *e)
{
	struct store_stmt *st = store_stmt(s, SQL_PLACE, e);
	if (!st)
		return -1;
	store_bind_int64(st, 1, need->cpu_milli);
	store_bind_int64(st, 2, need->mem_mb);
	store_bind_int64(st, 3, need->disk_mb);
	store_bind_text(st, 4, p->host);
	store_bind_text(st, 5, excl);
	int step = store_step(st), found = 0;
	if (step == STORE_ROW) {
		memset(out, 0, sizeof *out);
		store_col_text(st, 0, out->host, sizeof out->host);
		out->epoch = store_col_int64(st, 1);
		store_col_text(st, 2, out->address, sizeof out->address);
		found = 1;
		step = store_step(st);
	}
	store_stmt_done(st);
	if (step == STORE_ERR_CHECK)
		return err_set(e, ERR_UNAVAILABLE,
			       "placing a computer would overcommit its host; nothing was "
			       "changed, try again");
	if (step != STORE_DONE)
		return store_db_error(s, "placing a computer", e);
	return found;
}

static int store_place_check(const struct store_place *p, struct err *e)
{
	if (!p)
		return err_param(e, "place", "place: missing");
	if (p->need.cpu_milli < 0 || p->need.mem_mb < 0 || p->need.disk_mb < 0)
		return err_param(e, "size", "size: a computer cannot need a negative amount");
	if (p->host && !store_host_id_ok(p->host))
		return err_param(e, "host", "host: '%.64s' is not a host id", p->host);
	if (p->exclude && strlen(p->exclude) > 4000)
		return err_param(e, "exclude", "exclude: longer than 4000 bytes");
	return 0;
}

int store_place_locked(struct store *s, const char *id, const struct store_place *p,
		       struct store_placed *out, struct err *e)
{
	if (store_place_check(p, e))
		return -1;
	struct store_capacity need = p->need;
	/* Starting again where it is: it lacks only what it does not hold. */
	if (id && p->host) {
		struct store_stmt *st = store_stmt(s, SQL_PLACE_HELD, e);
		if (!st)
			return -1;
		store_bind_text(st, 1, id);
		int step = store_step(st);
		if (step == STORE_ROW && strcmp(store_col_str(st, 0), p->host) == 0) {
			need.cpu_milli -= store_col_int64(st, 1);
			need.mem_mb -= store_col_int64(st, 2);
			need.disk_mb -= store_col_int64(st, 3);
		}
		store_stmt_done(st);
		if (step == STORE_DONE)
			return err_set(e, ERR_NOT_FOUND, "no computer %.64s", id);
		if (step != STORE_ROW)
			return store_db_error(s, "reading what a computer holds", e);
		need.cpu_milli = need.cpu_milli < 0 ? 0 : need.cpu_milli;
		need.mem_mb = need.mem_mb < 0 ? 0 : need.mem_mb;
		need.disk_mb = need.disk_mb < 0 ? 0 : need.disk_mb;
	}
	char excl[4100];
	snprintf(excl, sizeof excl, ",%s,", p->exclude ? p->exclude : "");
	struct store_placed at;
	int found = 0;
	for (int attempt = 0; attempt < STORE_PLACE_ATTEMPTS && found == 0; attempt++) {
		found = store_place_once_locked(s, p, &need, excl, &at, e);
		if (found != 0)
			break;
		/* No row: no host had room, or a concurrent placement took the
		 * room of the one this statement chose. Only the latter retries. */
		int64_t room = store_place_room_locked(s, p, &need, excl, e);
		if (room < 0)
			return -1;
		if (room == 0)
			break;
	}
	if (found < 0)
		return -1;
	s->hosts_known = true;
	if (found == 0) {
		if (p->host)
			return err_set_param(
			    e, ERR_UNAVAILABLE, "size",
			    "host %s has no room now for %lld milli-vCPU, %lld MiB "
			    "of memory and %lld MiB of disk (or it is down)",
			    p->host, (long long)need.cpu_milli, (long long)need.mem_mb,
			    (long long)need.disk_mb);
		return err_set_param(e, ERR_UNAVAILABLE, "size",
				     "no host has room now for %lld milli-vCPU, %lld MiB of "
				     "memory and %lld MiB of disk; try a smaller size or later",
				     (long long)need.cpu_milli, (long long)need.mem_mb,
				     (long long)need.disk_mb);
	}
	if (id) {
		struct store_stmt *st = store_stmt(s, SQL_PLACE_LEAVE, e);
		if (!st)
			return -1;
		store_bind_text(st, 1, id);
		store_bind_text(st, 2, at.host);
		if (store_run(s, st, "moving a computer off its host", e) < 0)
			return -1;
		if (!(st = store_stmt(s, SQL_PLACE_RECORD, e)))
			return -1;
		store_bind_text(st, 1, id);
		store_bind_text(st, 2, at.host);
		store_bind_int64(st, 3, at.epoch);
		store_bind_int64(st, 4, need.cpu_milli);
		store_bind_int64(st, 5, need.mem_mb);
		store_bind_int64(st, 6, need.disk_mb);
		int64_t n = store_run(s, st, "recording where a computer lives", e);
		if (n < 0)
			return -1;
		if (n == 0)
			return err_set(e, ERR_NOT_FOUND, "no computer %.64s", id);
	}
	if (out)
		*out = at;
	return 0;
}

int store_place(struct store *s, const char *id, const struct store_place *p,
		struct store_placed *out, struct err *e)
{
	if (!id || !*id)
		return err_param(e, "id", "id: the computer id is empty");
	int rc = -1;
	store_lock(s);
	if (store_begin(s, e) == 0) {
		if (store_fence_locked(s, e) || store_place_locked(s, id, p, out, e) ||
		    store_commit_tx(s, e))
			store_rollback(s);
		else
			rc = 0;
	}
	store_unlock(s);
	return rc;
}

/* ---- registration and the reaper --------------------------------------------------- */

/* The computers of host id under epoch become lost (deleting ones
 * deleted), their billing ends at their last tick, and the host's used
 * counts are what is still held there (lock held, in a transaction).
 * Returns how many became lost. */
static int64_t store_reap_computers_locked(struct store *s, const char *id, int64_t epoch,
					   const char *why, struct err *e)
{
	int64_t now = clock_wall_ms();
	if (store_run_host(s, SQL_REAP_SEGMENTS, id, epoch, "closing a dead host's billing", e) < 0)
		return -1;
	struct store_stmt *st = store_stmt(s, SQL_REAP_DELETING, e);
	if (!st)
		return -1;
	store_bind_text(st, 1, id);
	store_bind_int64(st, 2, epoch);
	store_bind_int64(st, 3, now);
	if (store_run(s, st, "finishing a dead host's deletions", e) < 0)
		return -1;
	if (!(st = store_stmt(s, SQL_REAP_LOST, e)))
		return -1;
	char msg[sizeof((struct store_computer *)0)->error];
	snprintf(msg, sizeof msg, "%s", why && *why ? why : "its host stopped answering");
	store_bind_text(st, 1, id);
	store_bind_int64(st, 2, epoch);
	store_bind_int64(st, 3, now);
	store_bind_text(st, 4, msg);
	int64_t lost = store_run(s, st, "declaring a dead host's computers lost", e);
	if (lost < 0)
		return -1;
	if (!(st = store_stmt(s, SQL_REAP_USED, e)))
		return -1;
	store_bind_text(st, 1, id);
	if (store_run(s, st, "freeing a dead host's capacity", e) < 0)
		return -1;
	return lost;
}

int store_host_reap(struct store *s, const char *id, int64_t epoch, const char *why, int *lost,
		    struct err *e)
{
	if (!store_host_id_ok(id))
		return err_param(e, "host", "host: '%.64s' is not a host id", id ? id : "");
	if (epoch <= 0)
		return err_param(e, "epoch", "epoch: %lld is not a lease", (long long)epoch);
	int rc = -1;
	int64_t n = 0;
	store_lock(s);
	if (store_begin(s, e) == 0) {
		int64_t down = -1;
		if (store_host_lock_locked(s, id, true, e) == 0)
			down =
			    store_run_host(s, SQL_HOST_DOWN, id, epoch, "declaring a host dead", e);
		if (down == 0)
			rc = 0; /* it registered again, or was reaped already */
		else if (down > 0 && (n = store_reap_computers_locked(s, id, epoch, why, e)) >= 0)
			rc = 1;
		if (rc < 0 || store_commit_tx(s, e) < 0) {
			store_rollback(s);
			rc = -1;
		}
	}
	store_unlock(s);
	if (rc == 1 && lost)
		*lost = (int)n;
	else if (lost)
		*lost = 0;
	return rc;
}

static int store_host_check(const struct store_host *h, struct err *e)
{
	if (!h || !store_host_id_ok(h->id))
		return err_param(e, "host", "host: '%.64s' is not a host id (A-Z a-z 0-9 . - _)",
				 h ? h->id : "");
	if (h->epoch <= 0)
		return err_param(e, "epoch", "epoch: %lld is not a lease", (long long)h->epoch);
	if (!store_fits(h->address, sizeof h->address))
		return err_param(e, "address", "address: not terminated within %zu bytes",
				 sizeof h->address);
	if (h->capacity.cpu_milli < 0 || h->capacity.mem_mb < 0 || h->capacity.disk_mb < 0)
		return err_param(e, "capacity", "capacity: negative");
	if (h->cpu_overcommit_pct < 100 || h->cpu_overcommit_pct > 10000)
		return err_param(e, "cpu_overcommit_pct",
				 "cpu_overcommit_pct: %d is not in [100, 10000]",
				 h->cpu_overcommit_pct);
	return 0;
}

/* store_host_register's work (lock held, in a transaction). */
static int store_host_register_locked(struct store *s, const struct store_host *h, bool adopt,
				      int64_t *moved, struct err *e)
{
	if (store_host_lock_locked(s, h->id, true, e))
		return -1;
	struct store_stmt *st = store_stmt(s, SQL_HOST_ENSURE, e);
	if (!st)
		return -1;
	store_bind_text(st, 1, h->id);
	if (store_run(s, st, "registering a host", e) < 0 ||
	    !(st = store_stmt(s, SQL_HOST_EPOCH, e)))
		return -1;
	s->hosts_known = true;
	store_bind_text(st, 1, h->id);
	int step = store_step(st);
	int64_t old = step == STORE_ROW ? store_col_int64(st, 0) : -1;
	store_stmt_done(st);
	if (old < 0)
		return store_db_error(s, "reading a host's epoch", e);
	*moved = 0;
	if (old != 0 && old != h->epoch) {
		if (adopt) {
			if (!(st = store_stmt(s, SQL_HOST_ADOPT, e)))
				return -1;
			store_bind_text(st, 1, h->id);
			store_bind_int64(st, 2, old);
			store_bind_int64(st, 3, h->epoch);
			*moved = store_run(s, st, "adopting a host's computers", e);
		} else {
			*moved = store_reap_computers_locked(
			    s, h->id, old, "its host registered again without it", e);
		}
		if (*moved < 0)
			return -1;
	}
	if (!(st = store_stmt(s, SQL_HOST_REGISTER, e)))
		return -1;
	store_bind_text(st, 1, h->id);
	store_bind_text(st, 2, h->address);
	store_bind_int64(st, 3, h->epoch);
	store_bind_int64(st, 4, h->capacity.cpu_milli);
	store_bind_int64(st, 5, h->cpu_overcommit_pct);
	store_bind_int64(st, 6, h->capacity.mem_mb);
	store_bind_int64(st, 7, h->capacity.disk_mb);
	store_bind_int64(st, 8, clock_wall_ms());
	return store_run(s, st, "registering a host", e) == 1 ? 0 : -1;
}

int store_host_register(struct store *s, const struct store_host *h, bool adopt, int *moved,
			struct err *e)
{
	if (store_host_check(h, e))
		return -1;
	int rc = -1;
	int64_t n = 0;
	store_lock(s);
	if (store_begin(s, e) == 0) {
		if (store_host_register_locked(s, h, adopt, &n, e) || store_commit_tx(s, e)) {
			store_rollback(s);
		} else {
			rc = 0;
			snprintf(s->host, sizeof s->host, "%s", h->id);
			s->epoch = h->epoch;
		}
	}
	store_unlock(s);
	if (moved)
		*moved = rc == 0 ? (int)n : 0;
	return rc;
}

/* ---- reading and draining ------------------------------------------------------------ */

static void store_host_row(struct store_stmt *st, struct store_host *h)
{
	memset(h, 0, sizeof *h);
	store_col_text(st, 0, h->id, sizeof h->id);
	store_col_text(st, 1, h->address, sizeof h->address);
	h->epoch = store_col_int64(st, 2);
	store_col_text(st, 3, h->state, sizeof h->state);
	h->capacity.cpu_milli = store_col_int64(st, 4);
	h->cpu_overcommit_pct = (int)store_col_int64(st, 5);
	h->capacity.mem_mb = store_col_int64(st, 6);
	h->capacity.disk_mb = store_col_int64(st, 7);
	h->used.cpu_milli = store_col_int64(st, 8);
	h->used.mem_mb = store_col_int64(st, 9);
	h->used.disk_mb = store_col_int64(st, 10);
	h->registered_ms = store_col_int64(st, 11);
	h->seen_ms = store_col_int64(st, 12);
	h->computers = (int)store_col_int64(st, 13);
}

int store_host_get(struct store *s, const char *id, struct store_host *out, struct err *e)
{
	if (!store_host_id_ok(id))
		return err_set(e, ERR_NOT_FOUND, "no host %.64s", id ? id : "");
	int rc = -1;
	store_lock(s);
	struct store_stmt *st = store_stmt(s, SQL_HOST_GET, e);
	if (st) {
		store_bind_text(st, 1, id);
		int step = store_step(st);
		if (step == STORE_ROW) {
			store_host_row(st, out);
			rc = 0;
		} else if (step == STORE_DONE) {
			err_set(e, ERR_NOT_FOUND, "no host %.64s", id);
		} else {
			store_db_error(s, "reading a host", e);
		}
	}
	store_stmt_done(st);
	store_unlock(s);
	return rc;
}

int store_host_list(struct store *s, struct store_host **out, size_t *n, struct err *e)
{
	struct store_host *list = NULL;
	size_t count = 0, cap = 0;
	int rc = -1;
	store_lock(s);
	struct store_stmt *st = store_stmt(s, SQL_HOST_LIST, e);
	if (st) {
		int step;
		rc = 0;
		while ((step = store_step(st)) == STORE_ROW) {
			if (count == cap) {
				size_t ncap = cap ? 2 * cap : 8;
				struct store_host *grown = realloc(list, ncap * sizeof *list);
				if (!grown) {
					rc =
					    err_set(e, ERR_INTERNAL, "out of memory listing hosts");
					break;
				}
				list = grown;
				cap = ncap;
			}
			store_host_row(st, &list[count++]);
		}
		if (rc == 0 && step != STORE_DONE)
			rc = store_db_error(s, "listing hosts", e);
	}
	store_stmt_done(st);
	store_unlock(s);
	if (rc < 0) {
		free(list);
		return -1;
	}
	*out = list;
	*n = count;
	return 0;
}

int store_host_set_state(struct store *s, const char *id, const char *state, struct err *e)
{
	if (!state || (strcmp(state, "up") != 0 && strcmp(state, "draining") != 0))
		return err_param(e, "state", "state: '%.16s' is not up or draining",
				 state ? state : "");
	struct store_host h;
	if (store_host_get(s, id, &h, e))
		return -1;
	store_lock(s);
	int64_t n = -1;
	struct store_stmt *st = store_stmt(s, SQL_HOST_SET_STATE, e);
	if (st) {
		store_bind_text(st, 1, id);
		store_bind_text(st, 2, state);
		n = store_run(s, st, "changing a host's state", e);
	}
	store_unlock(s);
	if (n == 0)
		return err_set(e, ERR_CONFLICT, "host %s is down: it cannot be %s", id, state);
	return n < 0 ? -1 : 0;
}

json_t *store_host_json(const struct store_host *h)
{
	return json_pack("{s:s, s:s, s:I, s:s, s:{s:I, s:I, s:I, s:i}, s:{s:I, s:I, s:I},"
			 " s:I, s:I, s:i}",
			 "id", h->id, "address", h->address, "epoch", (json_int_t)h->epoch, "state",
			 h->state, "capacity", "cpu_milli", (json_int_t)h->capacity.cpu_milli,
			 "mem_mb", (json_int_t)h->capacity.mem_mb, "disk_mb",
			 (json_int_t)h->capacity.disk_mb, "cpu_overcommit_pct",
			 h->cpu_overcommit_pct, "used", "cpu_milli", (json_int_t)h->used.cpu_milli,
			 "mem_mb", (json_int_t)h->used.mem_mb, "disk_mb",
			 (json_int_t)h->used.disk_mb, "registered_at", (json_int_t)h->registered_ms,
			 "seen_at", (json_int_t)h->seen_ms, "computers", h->computers);
}
