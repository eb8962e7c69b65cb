/*
 * db-pg: the PostgreSQL back end, through libpq (a cluster's shared state).
 *
 * One connection behind the store's mutex, like SQLite's, so a store call's
 * statements are one sequence and its transactions stay simple. Each
 * statement is prepared once per connection (named s<N>, its parameters'
 * types those of its first binding) with the store's ?N placeholders
 * rewritten as $N.
 *
 * Never a hang: every statement is sent asynchronously and waited for with
 * poll() against a deadline (STORE_PG_TIMEOUT_MS); past it the connection
 * is dropped and the call fails with ERR_UNAVAILABLE. Never a crash on a
 * lost server: a failed connection is reconnected by the next call that
 * is not inside a transaction (a transaction that lost its connection is
 * gone; its call fails, its caller rolls back), at most once per backoff
 * (200 ms doubling to 5 s); calls in between fail at once, saying why. A
 * fresh connection is one that can write: a standby left behind by a
 * failover is refused, and a "read-only transaction" error (the server
 * became one) drops the connection, so the next call finds the new primary
 * (through whatever address the URI names: HAProxy, a multi-host URI with
 * target_session_attrs=read-write, ...).
 *
 * Durability: every session runs with synchronous_commit = on, so a COMMIT
 * that returned is on the primary's disk (and on a synchronous standby's,
 * when the server is configured with one). A connection lost during a
 * COMMIT is reported as a failure, although the commit may have happened.
 *
 * The listener: a second connection, on a thread of its own, LISTENs for
 * cubicle_keys (the key table is rebuilt) and cubicle_revoked (the
 * store_on_stream_revoke callback is called), which the schema's triggers
 * send (store-schema.c). After it reconnects it rebuilds and re-reports
 * everything, since what it missed is unknown.
 */
#include "store-internal.h"
#include "clock.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <libpq-fe.h>

#define STORE_PG_TIMEOUT_MS	 15000 /* one statement, sent to answered */
#define STORE_PG_BACKOFF_MIN_MS	 200
#define STORE_PG_BACKOFF_MAX_MS	 5000
#define STORE_PG_LISTEN_RETRY_MS 1000

struct store_pg {
	char uri[4096];
	int timeout_ms; /* a statement's deadline */
	PGconn *conn;
	unsigned gen; /* bumped by every new connection: statements re-prepare */
	bool in_tx;
	int64_t retry_ms; /* no reconnection before (monotonic) */
	int backoff_ms;
	/* The last failure, for store_pg_error. */
	char sqlstate[6];
	char message[400];
	bool lost; /* the failure was the connection's */
	/* The listener, and its first connection until its thread takes it. */
	PGconn *lconn;
	pthread_t listener;
	bool listening;
	int wake[2];
};

/* ---- connections ------------------------------------------------------------------ */

static void store_pg_notice(void *arg, const char *message);

/* Our defaults first, then the URI, whose own settings win. */
static PGconn *store_pg_connect(const char *uri)
{
	static const char *const keys[] = {"connect_timeout",
					   "application_name",
					   "keepalives",
					   "keepalives_idle",
					   "keepalives_interval",
					   "keepalives_count",
					   "tcp_user_timeout",
					   "dbname",
					   NULL};
	const char *values[] = {"3", "cubicled", "1", "5", "2", "3", "9000", uri, NULL};
	PGconn *conn = PQconnectdbParams(keys, values, 1);
	if (conn)
		PQsetNoticeProcessor(conn, store_pg_notice, NULL);
	return conn;
}

/* Copies libpq's message (one line, no trailing newline) into buf. */
static void store_pg_message(char *buf, size_t size, const char *msg)
{
	snprintf(buf, size, "%s", msg && *msg ? msg : "no message from libpq");
	/* libpq's messages are lines, some indented: one line, single spaces. */
	char *o = buf;
	for (const char *p = buf; *p; p++) {
		char c = *p == '\n' || *p == '\r' || *p == '\t' ? ' ' : *p;
		if (c != ' ' || (o > buf && o[-1] != ' '))
			*o++ = c;
	}
	while (o > buf && o[-1] == ' ')
		o--;
	*o = 0;
}

/* What the server says besides answers (a warning, the FATAL before it
 * drops us): one line in cubicled's log rather than libpq's raw text. */
static void store_pg_notice(void *arg, const char *message)
{
	(void)arg;
	char line[400];
	store_pg_message(line, sizeof line, message);
	fprintf(stderr, "cubicled: store: the database says: %s\n", line);
}

static void store_pg_fail(struct store_pg *pg, const char *sqlstate, const char *msg, bool lost)
{
	snprintf(pg->sqlstate, sizeof pg->sqlstate, "%s", sqlstate ? sqlstate : "");
	store_pg_message(pg->message, sizeof pg->message, msg);
	pg->lost = lost;
}

static void store_pg_drop(struct store_pg *pg)
{
	if (pg->conn)
		PQfinish(pg->conn);
	pg->conn = NULL;
}

/* Waits until conn has a whole result (or nothing more to send) before the
 * deadline: 0, or -1 when the connection failed or time ran out. */
static int store_pg_ready(PGconn *conn, int64_t deadline, bool *timed_out)
{
	for (;;) {
		int f = PQflush(conn);
		if (f < 0)
			return -1;
		if (f == 0 && !PQisBusy(conn))
			return 0;
		int64_t left = deadline - clock_now_ms();
		if (left <= 0) {
			*timed_out = true;
			return -1;
		}
		struct pollfd p = {PQsocket(conn), (short)(POLLIN | (f == 1 ? POLLOUT : 0)), 0};
		int n = poll(&p, 1, (int)(left > 1000 ? 1000 : left));
		if (n < 0 && errno != EINTR)
			return -1;
		if (n > 0 && (p.revents & (POLLIN | POLLERR | POLLHUP)) && !PQconsumeInput(conn))
			return -1;
	}
}

/*
 * Waits for the answer to what was just sent and returns its result (the
 * first error if any, else the last result), or NULL with pg's failure set
 * (the connection is dropped then: its state is unknown).
 */
static PGresult *store_pg_answer(struct store_pg *pg)
{
	int64_t deadline = clock_now_ms() + pg->timeout_ms;
	PGresult *res = NULL;
	bool timed_out = false;
	for (;;) {
		if (store_pg_ready(pg->conn, deadline, &timed_out) < 0) {
			if (timed_out) {
				char msg[80];
				snprintf(msg, sizeof msg,
					 "the database did not answer within %d ms",
					 pg->timeout_ms);
				store_pg_fail(pg, "", msg, true);
			} else
				store_pg_fail(pg, "", PQerrorMessage(pg->conn), true);
			PQclear(res);
			store_pg_drop(pg);
			return NULL;
		}
		PGresult *r = PQgetResult(pg->conn);
		if (!r)
			break;
		if (!res || (PQresultStatus(r) == PGRES_FATAL_ERROR &&
			     PQresultStatus(res) != PGRES_FATAL_ERROR)) {
			PQclear(res);
			res = r;
		} else {
			PQclear(r);
		}
	}
	if (!res)
		store_pg_fail(pg, "", PQerrorMessage(pg->conn),
			      PQstatus(pg->conn) != CONNECTION_OK);
	return res;
}

/* Checks an answer: 0 for a success; else records the failure, drops the
 * connection if it is gone or read-only, and returns the STORE_ERR_*. */
static int store_pg_check(struct store_pg *pg, PGresult *res)
{
	if (!res)
		return STORE_ERR;
	ExecStatusType st = PQresultStatus(res);
	if (st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK)
		return 0;
	const char *state = PQresultErrorField(res, PG_DIAG_SQLSTATE);
	bool gone = PQstatus(pg->conn) != CONNECTION_OK || !state || strncmp(state, "08", 2) == 0 ||
		    strncmp(state, "57P", 3) == 0 || strcmp(state, "25006") == 0;
	store_pg_fail(pg, state, PQresultErrorMessage(res), gone);
	if (gone)
		store_pg_drop(pg);
	if (state && strcmp(state, "23505") == 0)
		return STORE_ERR_UNIQUE;
	if (state && strcmp(state, "23503") == 0)
		return STORE_ERR_FOREIGN;
	if (state && strcmp(state, "23514") == 0)
		return STORE_ERR_CHECK;
	return STORE_ERR;
}

/* Runs sql on conn without parameters (session set-up, the listener). */
static int store_pg_simple(struct store_pg *pg, PGconn *conn, const char *sql)
{
	PGconn *saved = pg->conn;
	pg->conn = conn;
	int rc = -1;
	if (PQsendQuery(conn, sql)) {
		PGresult *res = store_pg_answer(pg);
		rc = store_pg_check(pg, res) == 0 ? 0 : -1;
		PQclear(res);
	} else {
		store_pg_fail(pg, "", PQerrorMessage(conn), true);
	}
	/* store_pg_answer/check may have dropped conn (pg->conn now NULL). */
	bool dropped = pg->conn == NULL;
	pg->conn = saved;
	return dropped ? -2 : rc;
}

/* A connection ready for the store: durable commits, a bound on idle
 * transactions (a frozen host must not hold locks), and a primary. NULL
 * with pg's failure set. */
static PGconn *store_pg_session(struct store_pg *pg)
{
	PGconn *conn = store_pg_connect(pg->uri);
	if (!conn || PQstatus(conn) != CONNECTION_OK) {
		store_pg_fail(pg, "", conn ? PQerrorMessage(conn) : "out of memory", true);
		PQfinish(conn);
		return NULL;
	}
	PQsetnonblocking(conn, 1);
	int rc = store_pg_simple(pg, conn,
				 "SET synchronous_commit = on;"
				 "SET idle_in_transaction_session_timeout = '30s';"
				 "SET client_min_messages = warning;"
				 "SET TIME ZONE 'UTC'");
	if (rc != 0) {
		if (rc != -2)
			PQfinish(conn);
		return NULL;
	}
	/* A standby (a failover not finished behind a proxy) cannot write. */
	PGconn *saved = pg->conn;
	pg->conn = conn;
	PGresult *res = NULL;
	bool primary = false;
	if (PQsendQuery(conn, "SELECT pg_is_in_recovery()") && (res = store_pg_answer(pg)) &&
	    store_pg_check(pg, res) == 0)
		primary = PQntuples(res) == 1 && strcmp(PQgetvalue(res, 0, 0), "f") == 0;
	bool dropped = pg->conn == NULL;
	pg->conn = saved;
	PQclear(res);
	if (dropped)
		return NULL;
	if (!primary) {
		if (res) /* answered, but in recovery */
			store_pg_fail(pg, "25006", "the server is a read-only standby", true);
		PQfinish(conn);
		return NULL;
	}
	return conn;
}

/* A working connection for the next statement: 0, or -1 (unavailable,
 * with pg's failure set). Reconnects only outside a transaction. */
static int store_pg_usable(struct store_pg *pg)
{
	if (pg->conn && PQstatus(pg->conn) == CONNECTION_OK)
		return 0;
	store_pg_drop(pg);
	if (pg->in_tx) {
		store_pg_fail(pg, "", "the connection was lost during this transaction", true);
		return -1;
	}
	int64_t now = clock_now_ms();
	if (now < pg->retry_ms) {
		/* Keep the last reason; say when the next attempt is. */
		pg->lost = true;
		return -1;
	}
	pg->conn = store_pg_session(pg);
	if (!pg->conn) {
		pg->backoff_ms = pg->backoff_ms ? pg->backoff_ms * 2 : STORE_PG_BACKOFF_MIN_MS;
		if (pg->backoff_ms > STORE_PG_BACKOFF_MAX_MS)
			pg->backoff_ms = STORE_PG_BACKOFF_MAX_MS;
		pg->retry_ms = clock_now_ms() + pg->backoff_ms;
		return -1;
	}
	pg->backoff_ms = 0;
	pg->retry_ms = 0;
	pg->gen++;
	return 0;
}

/* ---- statements ---------------------------------------------------------------------- */

/* The store's SQL with ?N (or bare ?, numbered in order) as $N, outside
 * quotes; malloc'd. *nparams: the highest number. */
static char *store_pg_translate(const char *sql, int *nparams)
{
	size_t n = strlen(sql);
	char *out = malloc(2 * n + 1);
	if (!out)
		return NULL;
	char *o = out;
	bool quoted = false;
	int seq = 0, most = 0;
	for (const char *p = sql; *p; p++) {
		if (*p == '\'')
			quoted = !quoted;
		if (quoted || *p != '?') {
			*o++ = *p;
			continue;
		}
		int k = 0;
		if (p[1] >= '0' && p[1] <= '9') {
			while (p[1] >= '0' && p[1] <= '9')
				k = k * 10 + (*++p - '0');
		} else {
			k = ++seq;
		}
		if (k > most)
			most = k;
		o += sprintf(o, "$%d", k);
	}
	*o = 0;
	*nparams = most;
	return out;
}

int store_pg_step(struct store_stmt *st)
{
	struct store_pg *pg = st->s->pg;
	if (st->res) { /* walking the result */
		if (++st->row < st->nrows)
			return STORE_ROW;
		return STORE_DONE;
	}
	if (store_pg_usable(pg) < 0)
		return STORE_ERR;
	int nparams = 0;
	if (st->prepared_gen != pg->gen) {
		char *sql = store_pg_translate(st->sql, &nparams);
		if (!sql) {
			store_pg_fail(pg, "", "out of memory", false);
			return STORE_ERR;
		}
		if (nparams > STORE_PARAMS_MAX) {
			free(sql);
			store_pg_fail(pg, "", "a statement with too many parameters", false);
			return STORE_ERR;
		}
		int ok = PQsendPrepare(pg->conn, st->name, sql, nparams, st->types);
		free(sql);
		PGresult *res = ok ? store_pg_answer(pg) : NULL;
		if (!ok)
			store_pg_fail(pg, "", PQerrorMessage(pg->conn), true);
		int rc = store_pg_check(pg, res);
		PQclear(res);
		if (rc != 0)
			return rc;
		st->prepared_gen = pg->gen;
		st->sql_nparams = nparams;
	}
	/* Parameters left unbound are NULL. */
	int n = st->sql_nparams > st->nparams ? st->sql_nparams : st->nparams;
	if (!PQsendQueryPrepared(pg->conn, st->name, n, st->values, st->lengths, st->formats, 0)) {
		store_pg_fail(pg, "", PQerrorMessage(pg->conn), true);
		store_pg_drop(pg);
		return STORE_ERR;
	}
	PGresult *res = store_pg_answer(pg);
	int rc = store_pg_check(pg, res);
	if (rc != 0) {
		PQclear(res);
		return rc;
	}
	st->res = res;
	st->nrows = PQntuples(res);
	st->row = 0;
	const char *tuples = PQcmdTuples(res);
	st->changes = tuples && *tuples ? strtoll(tuples, NULL, 10) : 0;
	return st->nrows > 0 ? STORE_ROW : STORE_DONE;
}

void store_pg_stmt_done(struct store_stmt *st)
{
	PQclear(st->res);
	st->res = NULL;
	st->row = st->nrows = 0;
}

const char *store_pg_col(struct store_stmt *st, int i)
{
	PGresult *res = st->res;
	if (!res || st->row >= st->nrows || i >= PQnfields(res) || PQgetisnull(res, st->row, i))
		return NULL;
	return PQgetvalue(res, st->row, i);
}

int store_pg_exec(struct store *s, const char *sql, struct err *e)
{
	struct store_pg *pg = s->pg;
	bool begin = strncmp(sql, "BEGIN", 5) == 0;
	bool end = strcmp(sql, "COMMIT") == 0 || strcmp(sql, "ROLLBACK") == 0;
	int rc = -1;
	if (store_pg_usable(pg) == 0) {
		if (PQsendQuery(pg->conn, sql)) {
			PGresult *res = store_pg_answer(pg);
			rc = store_pg_check(pg, res) == 0 ? 0 : -1;
			PQclear(res);
		} else {
			store_pg_fail(pg, "", PQerrorMessage(pg->conn), true);
			store_pg_drop(pg);
		}
	}
	if (begin && rc == 0)
		pg->in_tx = true;
	if (end)
		pg->in_tx = false;
	if (rc < 0 && e)
		store_pg_error(s, strncmp(sql, "SELECT pg_advisory", 18) == 0 ? "migrating" : sql,
			       e);
	return rc;
}

void store_pg_set_timeout(struct store *s, int ms)
{
	if (s->pg)
		s->pg->timeout_ms = ms;
}

bool store_pg_in_tx(struct store *s)
{
	return s->pg->in_tx;
}

int store_pg_error(struct store *s, const char *doing, struct err *e)
{
	struct store_pg *pg = s->pg;
	if (pg->lost) {
		int64_t wait = pg->retry_ms - clock_now_ms();
		if (wait > 0)
			return err_set(e, ERR_UNAVAILABLE,
				       "the database (%s) is unreachable while %s: %s; trying "
				       "again in %lld ms",
				       s->where, doing, pg->message, (long long)wait);
		return err_set(e, ERR_UNAVAILABLE,
			       "the database (%s) is unavailable while %s: %s; try again", s->where,
			       doing, pg->message);
	}
	if (strncmp(pg->sqlstate, "53100", 5) == 0)
		return err_set(e, ERR_NO_SPACE,
			       "the database's disk is full: cannot record this (while %s); "
			       "nothing was changed",
			       doing);
	if (strncmp(pg->sqlstate, "40", 2) == 0 || strncmp(pg->sqlstate, "53", 2) == 0 ||
	    strcmp(pg->sqlstate, "57014") == 0 || strcmp(pg->sqlstate, "55P03") == 0)
		return err_set(e, ERR_UNAVAILABLE,
			       "the database is busy while %s: %s; nothing was changed, try again",
			       doing, pg->message);
	return err_set(e, ERR_INTERNAL, "database error while %s: %s%s%s%s", doing, pg->message,
		       pg->sqlstate[0] ? " (SQLSTATE " : "", pg->sqlstate,
		       pg->sqlstate[0] ? ")" : "");
}

/* ---- the listener ---------------------------------------------------------------------- */

/* store_stream_revocations's callback: to the registered one. */
static void store_pg_revoked(void *ctx, const char *computer, int64_t revoked_ms)
{
	struct store *s = ctx;
	pthread_mutex_lock(&s->revoke_lock);
	if (s->on_revoke)
		s->on_revoke(s->on_revoke_ctx, computer, revoked_ms);
	pthread_mutex_unlock(&s->revoke_lock);
}

static void store_pg_notified(struct store *s, const PGnotify *n)
{
	if (strcmp(n->relname, "cubicle_keys") == 0) {
		store_keys_invalidate(s);
		return;
	}
	char computer[64];
	long long ms = 0;
	if (strcmp(n->relname, "cubicle_revoked") == 0 &&
	    sscanf(n->extra, "%63s %lld", computer, &ms) == 2)
		store_pg_revoked(s, computer, ms);
}

/* After the listener (re)connects: what it may have missed. 0, or -1 to
 * try again later (the store's own connection may still be waiting). */
static int store_pg_catch_up(struct store *s)
{
	/* The database answers the listener: the store need not wait out its
	 * backoff to reconnect. */
	store_lock(s);
	s->pg->retry_ms = 0;
	s->keys_dirty = true;
	store_unlock(s); /* rebuilds the key table */
	struct err e = {0};
	store_lock(s);
	bool stale = s->keys_dirty;
	store_unlock(s);
	/* All revocations, pruning none (0): pruning is the core's, on its clock. */
	if (stale || store_stream_revocations(s, 0, store_pg_revoked, s, &e) < 0)
		return -1;
	return 0;
}

/* A listening connection, or NULL. */
static PGconn *store_pg_listener_connect(struct store_pg *pg, char *why, size_t size)
{
	PGconn *conn = store_pg_connect(pg->uri);
	if (!conn || PQstatus(conn) != CONNECTION_OK) {
		store_pg_message(why, size, conn ? PQerrorMessage(conn) : "out of memory");
		PQfinish(conn);
		return NULL;
	}
	PGresult *res = PQexec(conn, "LISTEN cubicle_keys; LISTEN cubicle_revoked");
	bool ok = PQresultStatus(res) == PGRES_COMMAND_OK;
	if (!ok)
		store_pg_message(why, size, PQerrorMessage(conn));
	PQclear(res);
	if (!ok) {
		PQfinish(conn);
		return NULL;
	}
	PQsetnonblocking(conn, 1);
	return conn;
}

static void *store_pg_listener_main(void *arg)
{
	struct store *s = arg;
	struct store_pg *pg = s->pg;
	/* The first connection is store_pg_listen's, made before store_open
	 * loaded the keys: nothing can have been missed before it. */
	PGconn *conn = pg->lconn;
	pg->lconn = NULL;
	bool reported = false, behind = false;
	for (;;) {
		if (!conn) {
			char why[300];
			conn = store_pg_listener_connect(pg, why, sizeof why);
			if (conn) {
				if (reported)
					fprintf(stderr, "cubicled: store: listener reconnected\n");
				reported = false;
				behind = true;
			} else if (!reported) {
				fprintf(stderr,
					"cubicled: store: listener lost the database (%s): "
					"retrying every second\n",
					why);
				reported = true;
			}
		}
		/* Until the catch-up worked (once a second). */
		if (conn && behind)
			behind = store_pg_catch_up(s) < 0;
		struct pollfd p[2] = {{pg->wake[0], POLLIN, 0},
				      {conn ? PQsocket(conn) : -1, POLLIN, 0}};
		int n = poll(p, 2, STORE_PG_LISTEN_RETRY_MS);
		if (n > 0 && p[0].revents)
			break;
		if (!conn || n <= 0 || !p[1].revents)
			continue;
		if (!PQconsumeInput(conn) || PQstatus(conn) != CONNECTION_OK) {
			PQfinish(conn);
			conn = NULL;
			continue;
		}
		PGnotify *note;
		while ((note = PQnotifies(conn))) {
			store_pg_notified(s, note);
			PQfreemem(note);
		}
	}
	PQfinish(conn);
	return NULL;
}

int store_pg_listen(struct store *s, struct err *e)
{
	struct store_pg *pg = s->pg;
	char why[300];
	if (!(pg->lconn = store_pg_listener_connect(pg, why, sizeof why)))
		return err_set(e, ERR_UNAVAILABLE, "cannot listen on the database %s: %s", s->where,
			       why);
	if (pipe2(pg->wake, O_CLOEXEC) < 0) {
		PQfinish(pg->lconn);
		pg->lconn = NULL;
		return err_set(e, ERR_INTERNAL, "store: pipe: %s", strerror(errno));
	}
	if (pthread_create(&pg->listener, NULL, store_pg_listener_main, s) != 0) {
		PQfinish(pg->lconn);
		pg->lconn = NULL;
		close(pg->wake[0]);
		close(pg->wake[1]);
		pg->wake[0] = pg->wake[1] = -1;
		return err_set(e, ERR_INTERNAL, "store: cannot start the database listener");
	}
	pg->listening = true;
	return 0;
}

/* ---- opening and closing ----------------------------------------------------------------- */

/* s->where: the URI with any password replaced by "***". */
static void store_pg_mask(struct store *s, const char *uri)
{
	snprintf(s->where, sizeof s->where, "%s", uri);
	char *auth = strstr(s->where, "://");
	if (auth) {
		auth += 3;
		char *at = strchr(auth, '@'), *slash = strchr(auth, '/');
		char *colon = strchr(auth, ':');
		if (at && (!slash || at < slash) && colon && colon < at)
			memmove(colon + 4, at, strlen(at) + 1), memcpy(colon + 1, "***", 3);
	}
	char *pw = strstr(s->where, "password=");
	if (pw) {
		pw += 9;
		char *end = pw + strcspn(pw, "&");
		memmove(pw + 3, end, strlen(end) + 1);
		memcpy(pw, "***", 3);
	}
}

int store_pg_open(struct store *s, const char *uri, struct err *e)
{
	struct store_pg *pg = calloc(1, sizeof *pg);
	if (!pg)
		return err_set(e, ERR_INTERNAL, "out of memory opening the store");
	pg->wake[0] = pg->wake[1] = -1;
	pg->timeout_ms = STORE_PG_TIMEOUT_MS;
	s->pg = pg;
	snprintf(pg->uri, sizeof pg->uri, "%s", uri);
	store_pg_mask(s, uri);
	if (store_pg_usable(pg) < 0) {
		/* At start a database that cannot be reached is an error: the
		 * operator should see it at once, not on the first request. */
		return err_set(e, ERR_UNAVAILABLE, "cannot connect to the database %s: %s",
			       s->where, pg->message);
	}
	return 0;
}

void store_pg_close(struct store *s)
{
	struct store_pg *pg = s->pg;
	if (!pg)
		return;
	if (pg->listening) {
		if (write(pg->wake[1], "x", 1) < 0) {
			/* the listener also ends when the pipe closes */
		}
		pthread_join(pg->listener, NULL);
	}
	if (pg->wake[0] >= 0) {
		close(pg->wake[0]);
		close(pg->wake[1]);
	}
	if (pg->lconn)
		PQfinish(pg->lconn);
	store_pg_drop(pg);
	free(pg);
	s->pg = NULL;
}
