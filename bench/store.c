/*
 * bench/store: the store's operations per second on its two back ends,
 * side by side in one run (host/store/README.md): SQLite (the embedded
 * default, what one host uses today) in a temporary directory, and
 * PostgreSQL 15 started here as the store tests start it
 * (tests/unit/store-fixture.c), but durable: fsync and full-page writes on,
 * synchronous_commit on (the store sets it), over its UNIX socket.
 *
 *   build/bench/store [--seconds S] [--threads N]
 *
 * Each operation runs for S seconds (default 2) on one connection; then
 * placements/s with N connections at once (default 8), each placing a
 * computer (one transaction: the placement UPDATE, the insert) and deleting
 * it again (its release), on 3 hosts. Nothing here is pass/fail.
 */
#include <getopt.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "store-fixture.h"
#include "store.h"

static double bench_seconds = 2.0;
static int bench_threads = 8;

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static void die(const char *what, const struct err *e)
{
	fprintf(stderr, "bench/store: %s: %s\n", what, e->message);
	exit(1);
}

/* What every operation gets: a store with a workspace, a key, a running
 * computer and 100 computers with an open ledger segment. */
struct bench {
	struct fixture *f;
	struct store_workspace w;
	char key[64];
	struct store_computer c;
	int64_t t;
};

typedef int (*bench_op)(struct bench *b, struct err *e);

static int op_key_lookup(struct bench *b, struct err *e)
{
	char ws[40];
	bool admin;
	return store_key_lookup(b->f->s, b->key, ws, &admin, e);
}

static int op_workspace_get(struct bench *b, struct err *e)
{
	struct store_workspace w;
	return store_workspace_get(b->f->s, b->w.id, &w, e);
}

static int op_computer_get(struct bench *b, struct err *e)
{
	struct store_computer c;
	int rc = store_computer_get(b->f->s, b->c.id, b->w.id, &c, e);
	if (rc == 0)
		store_computer_clear(&c);
	return rc;
}

static int op_touch(struct bench *b, struct err *e)
{
	return store_computer_touch(b->f->s, b->c.id, ++b->t, e);
}

/* A lifecycle step: the state and its billing in one transaction. */
static int op_commit_billed(struct bench *b, struct err *e)
{
	bool run = b->c.state != COMPUTER_RUNNING;
	b->c.state = run ? COMPUTER_RUNNING : COMPUTER_STOPPED;
	struct store_commit how = {
	    .bill = true, .rate_state = run ? "running" : "stopped", .at_ms = ++b->t};
	return store_computer_commit(b->f->s, &b->c, &how, e);
}

static int op_insert(struct bench *b, struct err *e)
{
	struct store_computer c = {0};
	snprintf(c.workspace, sizeof c.workspace, "%s", b->w.id);
	snprintf(c.kind, sizeof c.kind, "sandbox");
	snprintf(c.size, sizeof c.size, "md");
	snprintf(c.isolation, sizeof c.isolation, "container");
	c.state = COMPUTER_DELETED;
	int rc = store_computer_insert(b->f->s, &c, e);
	store_computer_clear(&c);
	return rc;
}

static int op_tick(struct bench *b, struct err *e)
{
	return store_usage_tick(b->f->s, ++b->t, e) < 0 ? -1 : 0;
}

/* Place a new computer and delete it (its release). */
static int op_place_delete(struct bench *b, struct err *e)
{
	struct store_computer c = {0};
	snprintf(c.workspace, sizeof c.workspace, "%s", b->w.id);
	snprintf(c.kind, sizeof c.kind, "sandbox");
	snprintf(c.size, sizeof c.size, "md");
	snprintf(c.isolation, sizeof c.isolation, "container");
	c.state = COMPUTER_PROVISIONING;
	struct store_place p = {.need = {500, 512, 1024}};
	struct store_commit how = {.insert = true, .place = &p};
	int rc = store_computer_commit(b->f->s, &c, &how, e);
	if (rc == 0)
		rc = store_computer_set_state(b->f->s, c.id, "deleted", NULL, e);
	store_computer_clear(&c);
	return rc;
}

static double bench_run(struct bench *b, bench_op op, const char *name)
{
	struct err e = {0};
	long n = 0;
	double t0 = now_s(), t;
	while ((t = now_s()) - t0 < bench_seconds) {
		for (int i = 0; i < 16; i++, n++)
			if (op(b, &e) < 0)
				die(name, &e);
	}
	return n / (t - t0);
}

/* Three hosts, each registered by a store of its own (a host's store
 * ticks as that host: the measured one stays a single host's). */
static void bench_hosts(struct fixture *f, struct store **extra)
{
	struct err e = {0};
	const char *ids[] = {"h1", "h2", "h3"};
	for (int i = 0; i < 3; i++) {
		struct store *s = extra[i] = fixture_open_another(f, &e);
		if (!s)
			die("open", &e);
		struct store_host h = {.epoch = 100 + i,
				       .cpu_overcommit_pct = 400,
				       .capacity = {64000, 1 << 20, 1 << 24}};
		snprintf(h.id, sizeof h.id, "%s", ids[i]);
		if (store_host_register(s, &h, false, NULL, &e) < 0)
			die("host_register", &e);
	}
}

struct placer {
	struct bench *b;
	long placed;
	double until;
	char error[600];
};

static void *placer_main(void *arg)
{
	struct placer *pl = arg;
	struct err e = {0};
	struct bench own = *pl->b;
	struct fixture f = *pl->b->f;
	if (!(f.s = fixture_open_another(pl->b->f, &e))) {
		snprintf(pl->error, sizeof pl->error, "%s", e.message);
		return NULL;
	}
	own.f = &f;
	while (now_s() < pl->until) {
		if (op_place_delete(&own, &e) < 0) {
			snprintf(pl->error, sizeof pl->error, "%s", e.message);
			break;
		}
		pl->placed++;
	}
	store_close(f.s);
	return NULL;
}

static double bench_contention(struct bench *b)
{
	struct placer *pl = calloc((size_t)bench_threads, sizeof *pl);
	pthread_t *t = calloc((size_t)bench_threads, sizeof *t);
	double t0 = now_s();
	for (int i = 0; i < bench_threads; i++) {
		pl[i] = (struct placer){.b = b, .until = t0 + bench_seconds};
		pthread_create(&t[i], NULL, placer_main, &pl[i]);
	}
	long placed = 0;
	for (int i = 0; i < bench_threads; i++) {
		pthread_join(t[i], NULL);
		placed += pl[i].placed;
		if (pl[i].error[0])
			fprintf(stderr, "bench/store: placer %d: %s\n", i, pl[i].error);
	}
	double r = placed / (now_s() - t0);
	free(pl);
	free(t);
	return r;
}

static const struct {
	const char *name;
	bench_op op;
} ops[] = {
    {"key lookup (memory, the API's path)", op_key_lookup},
    {"workspace get", op_workspace_get},
    {"computer get", op_computer_get},
    {"computer touch", op_touch},
    {"state + billing switch (1 tx)", op_commit_billed},
    {"computer insert", op_insert},
    {"ledger tick (100 open segments)", op_tick},
    {"place + delete (2 tx)", op_place_delete},
};
#define NOPS (sizeof ops / sizeof ops[0])

/* All figures of one back end into rate[]. */
static void bench_backend(bool pg, double rate[NOPS + 1])
{
	fixture_pg = pg;
	void *state;
	if (fixture_setup(&state) < 0) {
		fprintf(stderr, "bench/store: cannot open the %s store\n",
			pg ? "postgresql" : "sqlite");
		exit(1);
	}
	struct bench b = {.f = state, .t = 1700000000000LL};
	struct err e = {0};
	if (store_workspace_create(b.f->s, "bench", 0, &b.w, &e) < 0 ||
	    store_key_create(b.f->s, b.w.id, b.key, &e) < 0)
		die("setup", &e);
	for (int i = 0; i <= 100; i++) {
		struct store_computer c = {0};
		snprintf(c.workspace, sizeof c.workspace, "%s", b.w.id);
		snprintf(c.kind, sizeof c.kind, "sandbox");
		snprintf(c.size, sizeof c.size, "md");
		snprintf(c.isolation, sizeof c.isolation, "container");
		c.state = COMPUTER_RUNNING;
		struct store_commit how = {
		    .insert = true, .bill = true, .rate_state = "running", .at_ms = b.t};
		if (store_computer_commit(b.f->s, &c, &how, &e) < 0)
			die("setup", &e);
		if (i == 0)
			b.c = c;
		else
			store_computer_clear(&c);
	}
	struct store *extra[3] = {NULL, NULL, NULL};
	for (size_t i = 0; i < NOPS; i++) {
		if (ops[i].op == op_place_delete)
			bench_hosts(b.f, extra);
		rate[i] = bench_run(&b, ops[i].op, ops[i].name);
	}
	rate[NOPS] = bench_contention(&b);
	store_computer_clear(&b.c);
	for (int i = 0; i < 3; i++)
		store_close(extra[i]);
	fixture_teardown(&state);
}

int main(int argc, char **argv)
{
	static const struct option longopts[] = {{"seconds", required_argument, NULL, 's'},
						 {"threads", required_argument, NULL, 't'},
						 {NULL, 0, NULL, 0}};
	int ch;
	while ((ch = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
		if (ch == 's')
			bench_seconds = atof(optarg);
		else if (ch == 't')
			bench_threads = atoi(optarg);
		else
			return 2;
	}
	if (bench_seconds <= 0 || bench_threads < 1 || bench_threads > 64) {
		fprintf(stderr, "usage: store [--seconds S] [--threads 1..64]\n");
		return 2;
	}
	double lite[NOPS + 1], pg[NOPS + 1];
	bench_backend(false, lite);
	char why[300];
	bool skip;
	pgserver_durable = true;
	bool have_pg = pgserver_start(why, sizeof why, &skip) == 0;
	if (have_pg)
		bench_backend(true, pg);
	else
		fprintf(stderr, "bench/store: no PostgreSQL: %s\n", why);
	pgserver_remove();

	printf("\nstore operations per second (%.1f s each; PostgreSQL 15 on a UNIX socket, "
	       "fsync on)\n\n",
	       bench_seconds);
	printf("| operation | SQLite (one host, today) | PostgreSQL (shared) |\n|---|---|---|\n");
	for (size_t i = 0; i <= NOPS; i++) {
		char name[96];
		if (i < NOPS)
			snprintf(name, sizeof name, "%s", ops[i].name);
		else
			snprintf(name, sizeof name, "place + delete, %d connections at once",
				 bench_threads);
		if (have_pg)
			printf("| %s | %.0f | %.0f |\n", name, lite[i], pg[i]);
		else
			printf("| %s | %.0f | - |\n", name, lite[i]);
	}
	return 0;
}
