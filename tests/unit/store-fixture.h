/*
 * store-fixture: what test_store.c and store-cluster.c share: a fixture
 * that opens the store on the back end of the pass being run (SQLite in a
 * fresh temporary directory, or a fresh database of the PostgreSQL server
 * the test binary started), SQL behind the store's back, and the server.
 *
 * The PostgreSQL server: Debian's postgresql-15 binaries, initdb'd into a
 * temporary directory as an unprivileged user (uid 65534 when the test runs
 * as root), listening only on a UNIX socket in that directory (fsync off:
 * the tests kill processes, not the machine). One server for the whole
 * binary; each test gets a database of its own. It dies with the test
 * binary (PR_SET_PDEATHSIG) and its directory is removed at the end.
 */
#ifndef CUBICLE_TEST_STORE_FIXTURE_H
#define CUBICLE_TEST_STORE_FIXTURE_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "store.h"

struct fixture {
	bool pg;	 /* the PostgreSQL pass */
	char dir[64];	 /* SQLite: the temporary directory */
	char where[512]; /* what store_open takes: the file or the URI */
	char db[32];	 /* PostgreSQL: the database's name */
	struct store *s;
};

/* Which back end the fixtures open: false = SQLite, true = PostgreSQL. */
extern bool fixture_pg;

int fixture_setup(void **state);
int fixture_teardown(void **state);
/* Closes and reopens the fixture's store (fails the test if it cannot). */
void fixture_reopen(struct fixture *f);
/* Another store on the same database (another host), or NULL with e. */
struct store *fixture_open_another(struct fixture *f, struct err *e);

/* SQL behind the store's back, on a connection of its own: 0 or -1. */
int fixture_sql(struct fixture *f, const char *sql);
/* The first column of the first row of a query, as an integer (-1 when
 * the query fails or has no row). */
int64_t fixture_sql_int(struct fixture *f, const char *sql);

/* ---- the PostgreSQL server ------------------------------------------------ */

/* Before pgserver_start: fsync and full-page writes on, as a production
 * server runs (bench/store); the tests run without them. */
extern bool pgserver_durable;
/* Starts the server (initdb first): 0; -1 with why filled when it cannot
 * (77 in *skip when the binaries are not installed). */
int pgserver_start(char *why, size_t size, bool *skip);
/* Stops it: fast (SIGINT: sessions are ended), or immediate (SIGQUIT: a
 * crash, recovery at the next start). Waits for it to be gone. */
void pgserver_stop(bool immediate);
/* Starts it again on the same data directory and waits until it answers. */
int pgserver_restart(void);
/* Freezes (SIGSTOP) or thaws (SIGCONT) every process of the server. */
void pgserver_freeze(bool frozen);
/* Stops it for good and removes its directory. */
void pgserver_remove(void);
/* A URI for database db on it. */
void pgserver_uri(const char *db, char *out, size_t size);

#endif
