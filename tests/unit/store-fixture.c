/*
 * store-fixture: the store tests' fixture and PostgreSQL server
 * (store-fixture.h).
 */
#include "store-fixture.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <grp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <libpq-fe.h>
#include <sqlite3.h>

#define PG_UID 65534 /* the server's user when the test runs as root */

bool fixture_pg;
bool pgserver_durable;

static struct {
	char bin[256];
	char dir[64], data[96], sock[96];
	pid_t pid;
	int ndb;
} pgs;

static int64_t fixture_now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* ---- the server ------------------------------------------------------------ */

void pgserver_uri(const char *db, char *out, size_t size)
{
	snprintf(out, size, "postgresql:///%s?host=%s&user=cubicle", db, pgs.sock);
}

/* In a forked child: become the server's user, output to log, exec. */
static void pgserver_exec(const char *log, char *const argv[], bool server)
{
	int fd = open(log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
	if (fd < 0 || dup2(fd, 1) < 0 || dup2(fd, 2) < 0)
		_exit(120);
	int null = open("/dev/null", O_RDONLY | O_CLOEXEC);
	if (null < 0 || dup2(null, 0) < 0)
		_exit(120);
	if (server) {
		setsid(); /* a group of its own: pgserver_freeze stops all of it */
	}
	if (getuid() == 0 && (setgroups(0, NULL) < 0 || setgid(PG_UID) < 0 || setuid(PG_UID) < 0))
		_exit(121);
	/* Dies with the test binary, whatever kills it. */
	if (server && prctl(PR_SET_PDEATHSIG, SIGQUIT) < 0)
		_exit(122);
	char *const env[] = {"PATH=/usr/bin:/bin", "LC_ALL=C", "TZ=UTC", NULL};
	execve(argv[0], argv, env);
	_exit(127);
}

static int pgserver_launch(void)
{
	char postgres[300];
	snprintf(postgres, sizeof postgres, "%s/postgres", pgs.bin);
	char log[128];
	snprintf(log, sizeof log, "%s/postgres.log", pgs.dir);
	pid_t parent = getpid();
	pid_t pid = fork();
	if (pid < 0) {
		fprintf(stderr, "pgserver: fork: %s\n", strerror(errno));
		return -1;
	}
	if (pid == 0) {
		if (getppid() != parent)
			_exit(123);
		char *const argv[] = {postgres,
				      "-D",
				      pgs.data,
				      "-k",
				      pgs.sock,
				      "-c",
				      "listen_addresses=",
				      "-c",
				      pgserver_durable ? "fsync=on" : "fsync=off",
				      "-c",
				      pgserver_durable ? "full_page_writes=on"
						       : "full_page_writes=off",
				      "-c",
				      "max_connections=100",
				      "-c",
				      "log_min_messages=warning",
				      NULL};
		pgserver_exec(log, argv, true);
	}
	pgs.pid = pid;
	/* Wait for it to answer (a deadlock's bound, not a timing). */
	char info[200];
	snprintf(info, sizeof info, "host=%s dbname=postgres user=cubicle", pgs.sock);
	for (int64_t until = fixture_now_ms() + 60000; fixture_now_ms() < until;) {
		if (PQping(info) == PQPING_OK)
			return 0;
		int status;
		if (waitpid(pid, &status, WNOHANG) == pid) {
			fprintf(stderr, "pgserver: postgres exited at once (status %#x)\n", status);
			pgs.pid = 0;
			return -1;
		}
		usleep(20000);
	}
	fprintf(stderr, "pgserver: postgres (pid %d) did not answer within 60 s\n", (int)pid);
	return -1;
}

/* Removes path's tree. */
static int pgserver_rm(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st, (void)flag, (void)ftw;
	remove(path);
	return 0;
}

int pgserver_start(char *why, size_t size, bool *skip)
{
	*skip = false;
	const char *bin = getenv("CUBICLE_PG_BIN");
	snprintf(pgs.bin, sizeof pgs.bin, "%s", bin && *bin ? bin : "/usr/lib/postgresql/15/bin");
	char initdb[300], postgres[300];
	snprintf(initdb, sizeof initdb, "%s/initdb", pgs.bin);
	snprintf(postgres, sizeof postgres, "%s/postgres", pgs.bin);
	if (access(initdb, X_OK) < 0 || access(postgres, X_OK) < 0) {
		snprintf(why, size,
			 "PostgreSQL 15's initdb and postgres are not in %s (Debian's "
			 "postgresql-15 package; or set CUBICLE_PG_BIN)",
			 pgs.bin);
		*skip = true;
		return -1;
	}
	snprintf(pgs.dir, sizeof pgs.dir, "/tmp/cubicle-store-pg-XXXXXX");
	if (!mkdtemp(pgs.dir)) {
		snprintf(why, size, "mkdtemp: %s", strerror(errno));
		return -1;
	}
	snprintf(pgs.data, sizeof pgs.data, "%s/data", pgs.dir);
	snprintf(pgs.sock, sizeof pgs.sock, "%s/sock", pgs.dir);
	bool root = getuid() == 0;
	if (chmod(pgs.dir, 0711) < 0 || mkdir(pgs.data, 0700) < 0 || mkdir(pgs.sock, 0700) < 0 ||
	    (root &&
	     (chown(pgs.data, PG_UID, PG_UID) < 0 || chown(pgs.sock, PG_UID, PG_UID) < 0))) {
		snprintf(why, size, "preparing %s: %s", pgs.dir, strerror(errno));
		return -1;
	}
	char log[128];
	snprintf(log, sizeof log, "%s/initdb.log", pgs.dir);
	pid_t pid = fork();
	if (pid == 0) {
		char *const argv[] = {
		    initdb, "-D",   pgs.data,	  "-U",	       "cubicle",	    "-A", "trust",
		    "-E",   "UTF8", "--locale=C", "--no-sync", "--no-instructions", NULL};
		pgserver_exec(log, argv, false);
	}
	int status = 0;
	if (pid < 0 || waitpid(pid, &status, 0) != pid || !WIFEXITED(status) ||
	    WEXITSTATUS(status) != 0) {
		snprintf(why, size, "initdb failed (exit %d): see %s", WEXITSTATUS(status), log);
		return -1;
	}
	if (pgserver_launch() < 0) {
		snprintf(why, size, "postgres did not start: see %s/postgres.log", pgs.dir);
		return -1;
	}
	return 0;
}

void pgserver_stop(bool immediate)
{
	if (pgs.pid <= 0)
		return;
	pgserver_freeze(false); /* in case it was frozen */
	kill(pgs.pid, immediate ? SIGQUIT : SIGINT);
	waitpid(pgs.pid, NULL, 0);
	pgs.pid = 0;
}

int pgserver_restart(void)
{
	return pgserver_launch();
}

void pgserver_freeze(bool frozen)
{
	if (pgs.pid <= 0)
		return;
	/* The postmaster and its children (each backend is a session of its
	 * own: a signal to the postmaster's group misses them). */
	int sig = frozen ? SIGSTOP : SIGCONT;
	kill(pgs.pid, sig);
	DIR *d = opendir("/proc");
	struct dirent *de;
	while (d && (de = readdir(d))) {
		char path[300], buf[512];
		snprintf(path, sizeof path, "/proc/%s/stat", de->d_name);
		FILE *fp = fopen(path, "r");
		if (!fp)
			continue;
		size_t n = fread(buf, 1, sizeof buf - 1, fp);
		fclose(fp);
		buf[n] = 0;
		char *close = strrchr(buf, ')');
		int ppid = 0;
		char st;
		if (close && sscanf(close + 1, " %c %d", &st, &ppid) == 2 && ppid == pgs.pid)
			kill(atoi(de->d_name), sig);
	}
	if (d)
		closedir(d);
}

void pgserver_remove(void)
{
	pgserver_stop(true);
	if (getenv("CUBICLE_PG_KEEP")) { /* to read its logs */
		fprintf(stderr, "pgserver: kept %s\n", pgs.dir);
		return;
	}
	if (pgs.dir[0])
		nftw(pgs.dir, pgserver_rm, 16, FTW_DEPTH | FTW_PHYS);
	pgs.dir[0] = 0;
}

/* ---- the fixture -------------------------------------------------------------- */

/* Statements on database db of the server: 0 or -1. */
static int pgserver_admin(const char *db, const char *sql)
{
	char uri[256];
	pgserver_uri(db, uri, sizeof uri);
	PGconn *c = PQconnectdb(uri);
	PGresult *r = PQstatus(c) == CONNECTION_OK ? PQexec(c, sql) : NULL;
	int rc =
	    r && (PQresultStatus(r) == PGRES_COMMAND_OK || PQresultStatus(r) == PGRES_TUPLES_OK)
		? 0
		: -1;
	if (rc < 0)
		fprintf(stderr, "pgserver: %s: %s\n", sql, PQerrorMessage(c));
	PQclear(r);
	PQfinish(c);
	return rc;
}

/* The cases share one database, emptied before each (cheaper than a
 * database each: the first case migrates an empty one, the others find
 * the schema and no rows). */
#define PG_TEST_DB "cases"
static const char SQL_EMPTY[] =
    "DO $$ DECLARE t text; BEGIN"
    " SELECT string_agg(quote_ident(tablename), ', ') INTO t FROM pg_tables"
    "  WHERE schemaname = 'public' AND tablename <> 'cubicle_schema';"
    " IF t IS NOT NULL THEN EXECUTE 'TRUNCATE ' || t || ' RESTART IDENTITY CASCADE'; END IF;"
    " END $$";

int fixture_setup(void **state)
{
	struct fixture *f = calloc(1, sizeof *f);
	if (!f)
		return -1;
	f->pg = fixture_pg;
	if (f->pg) {
		snprintf(f->db, sizeof f->db, PG_TEST_DB);
		if ((pgs.ndb++ == 0 ? pgserver_admin("postgres", "CREATE DATABASE " PG_TEST_DB)
				    : pgserver_admin(PG_TEST_DB, SQL_EMPTY)) < 0) {
			free(f);
			return -1;
		}
		pgserver_uri(f->db, f->where, sizeof f->where);
	} else {
		snprintf(f->dir, sizeof f->dir, "/tmp/cubicle-store-XXXXXX");
		if (!mkdtemp(f->dir)) {
			free(f);
			return -1;
		}
		snprintf(f->where, sizeof f->where, "%s/cubicle.db", f->dir);
	}
	struct err e = {0};
	f->s = store_open(f->where, &e);
	if (!f->s) {
		fprintf(stderr, "store_open(%s): %s\n", f->where, e.message);
		free(f);
		return -1;
	}
	*state = f;
	return 0;
}

int fixture_teardown(void **state)
{
	struct fixture *f = *state;
	store_close(f->s);
	if (!f->pg) {
		DIR *d = opendir(f->dir);
		struct dirent *de;
		while (d && (de = readdir(d))) {
			if (de->d_name[0] == '.')
				continue;
			char p[512];
			snprintf(p, sizeof p, "%s/%s", f->dir, de->d_name);
			unlink(p);
		}
		if (d)
			closedir(d);
		rmdir(f->dir);
	}
	free(f);
	return 0;
}

void fixture_reopen(struct fixture *f)
{
	struct err e = {0};
	store_close(f->s);
	f->s = store_open(f->where, &e);
	if (!f->s) {
		fprintf(stderr, "reopen: %s\n", e.message);
		abort();
	}
}

struct store *fixture_open_another(struct fixture *f, struct err *e)
{
	return store_open(f->where, e);
}

int fixture_sql(struct fixture *f, const char *sql)
{
	if (!f->pg) {
		sqlite3 *db = NULL;
		int rc = sqlite3_open(f->where, &db) == SQLITE_OK &&
				 sqlite3_busy_timeout(db, 5000) == SQLITE_OK &&
				 sqlite3_exec(db, sql, NULL, NULL, NULL) == SQLITE_OK
			     ? 0
			     : -1;
		sqlite3_close(db);
		return rc;
	}
	PGconn *c = PQconnectdb(f->where + 0);
	PGresult *r = PQstatus(c) == CONNECTION_OK ? PQexec(c, sql) : NULL;
	int rc =
	    r && (PQresultStatus(r) == PGRES_COMMAND_OK || PQresultStatus(r) == PGRES_TUPLES_OK)
		? 0
		: -1;
	PQclear(r);
	PQfinish(c);
	return rc;
}

int64_t fixture_sql_int(struct fixture *f, const char *sql)
{
	int64_t v = -1;
	if (!f->pg) {
		sqlite3 *db = NULL;
		sqlite3_stmt *st = NULL;
		if (sqlite3_open(f->where, &db) == SQLITE_OK &&
		    sqlite3_prepare_v2(db, sql, -1, &st, NULL) == SQLITE_OK &&
		    sqlite3_step(st) == SQLITE_ROW)
			v = sqlite3_column_int64(st, 0);
		sqlite3_finalize(st);
		sqlite3_close(db);
		return v;
	}
	PGconn *c = PQconnectdb(f->where);
	PGresult *r = PQstatus(c) == CONNECTION_OK ? PQexec(c, sql) : NULL;
	if (r && PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) > 0 && !PQgetisnull(r, 0, 0))
		v = strtoll(PQgetvalue(r, 0, 0), NULL, 10);
	PQclear(r);
	PQfinish(c);
	return v;
}
