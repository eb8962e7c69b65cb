/*
 * store-cluster: the store's cluster cases, run by test_store.c on both
 * back ends: hosts, placement (also under contention from many
 * connections), the release that follows a state, fencing and the reaper,
 * stream-token keys; and on PostgreSQL only: changes that reach another
 * host through the listener, a server that stops, crashes or freezes.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include <pthread.h>
#include <time.h>
#include <unistd.h>

#include "store-fixture.h"
#include "store-internal.h" /* store_pg_set_timeout */
#include "store.h"

static int64_t now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void cl_workspace(struct store *s, struct store_workspace *w)
{
	struct err e = {0};
	if (store_workspace_create(s, "acme", 0, w, &e))
		fail_msg("workspace_create: %s", e.message);
}

/* A computer of w, for commits. */
static void cl_computer(const char *ws, const char *state, struct store_computer *c)
{
	memset(c, 0, sizeof *c);
	snprintf(c->workspace, sizeof c->workspace, "%s", ws);
	snprintf(c->kind, sizeof c->kind, "sandbox");
	snprintf(c->size, sizeof c->size, "md");
	snprintf(c->isolation, sizeof c->isolation, "container");
	assert_int_equal(computer_state_parse(state, &c->state), 0);
}

/* Registers host id on s with the given capacity (CPU in vCPUs). */
static void cl_register(struct store *s, const char *id, int64_t epoch, int vcpus, int pct,
			int64_t mem, int64_t disk)
{
	struct store_host h = {0};
	snprintf(h.id, sizeof h.id, "%s", id);
	snprintf(h.address, sizeof h.address, "http://%s:8080", id);
	h.epoch = epoch;
	h.capacity.cpu_milli = vcpus * 1000;
	h.cpu_overcommit_pct = pct;
	h.capacity.mem_mb = mem;
	h.capacity.disk_mb = disk;
	struct err e = {0};
	if (store_host_register(s, &h, false, NULL, &e))
		fail_msg("host_register %s: %s", id, e.message);
}

static struct store_host cl_host(struct store *s, const char *id)
{
	struct store_host h;
	struct err e = {0};
	if (store_host_get(s, id, &h, &e))
		fail_msg("host_get %s: %s", id, e.message);
	return h;
}

/* Inserts a computer of ws placed by p; its struct into c. */
static int cl_place_new(struct store *s, const char *ws, const struct store_place *p,
			struct store_computer *c, struct err *e)
{
	cl_computer(ws, "provisioning", c);
	struct store_commit how = {.insert = true, .place = p};
	return store_computer_commit(s, c, &how, e);
}

/* ---- hosts ---------------------------------------------------------------------- */

static void test_hosts_register_and_list(void **state)
{
	struct fixture *f = *state;
	struct err e = {0};
	cl_register(f->s, "h1", 101, 4, 200, 8192, 40960);
	struct store_host h = cl_host(f->s, "h1");
	assert_string_equal(h.address, "http://h1:8080");
	assert_int_equal(h.epoch, 101);
	assert_string_equal(h.state, "up");
	assert_int_equal(h.capacity.cpu_milli, 4000);
	assert_int_equal(h.cpu_overcommit_pct, 200);
	assert_int_equal(h.used.mem_mb, 0);
	assert_int_equal(h.computers, 0);
	assert_true(h.registered_ms > 0);

	json_t *j = store_host_json(&h);
	assert_non_null(j);
	assert_string_equal(json_string_value(json_object_get(j, "state")), "up");
	assert_int_equal(
	    json_integer_value(json_object_get(json_object_get(j, "capacity"), "mem_mb")), 8192);
	json_decref(j);

	/* A second host through another connection: one list. */
	struct store *other = fixture_open_another(f, &e);
	assert_non_null(other);
	cl_register(other, "h2", 202, 2, 100, 4096, 20480);
	struct store_host *list;
	size_t n;
	assert_int_equal(store_host_list(f->s, &list, &n, &e), 0);
	assert_int_equal(n, 2);
	assert_string_equal(list[0].id, "h1");
	assert_string_equal(list[1].id, "h2");
	free(list);

	/* Drain and back; a down or unknown host cannot be drained. */
	assert_int_equal(store_host_set_state(f->s, "h1", "draining", &e), 0);
	assert_string_equal(cl_host(f->s, "h1").state, "draining");
	/* Registering again keeps it draining. */
	cl_register(f->s, "h1", 103, 4, 200, 8192, 40960);
	assert_string_equal(cl_host(f->s, "h1").state, "draining");
	assert_int_equal(store_host_set_state(f->s, "h1", "up", &e), 0);
	assert_int_equal(store_host_set_state(f->s, "nope", "draining", &e), -1);
	assert_int_equal(e.code, ERR_NOT_FOUND);
	assert_int_equal(store_host_set_state(f->s, "h1", "down", &e), -1);
	assert_int_equal(e.code, ERR_INVALID);
	assert_int_equal(store_host_reap(f->s, "h2", 202, "test", NULL, &e), 1);
	assert_int_equal(store_host_set_state(f->s, "h2", "draining", &e), -1);
	assert_int_equal(e.code, ERR_CONFLICT);

	/* Bad registrations say what is wrong. */
	struct store_host bad = {.epoch = 1, .cpu_overcommit_pct = 100};
	snprintf(bad.id, sizeof bad.id, "a/b");
	assert_int_equal(store_host_register(f->s, &bad, false, NULL, &e), -1);
	assert_string_equal(e.param, "host");
	snprintf(bad.id, sizeof bad.id, "ok");
	bad.epoch = 0;
	assert_int_equal(store_host_register(f->s, &bad, false, NULL, &e), -1);
	assert_string_equal(e.param, "epoch");
	bad.epoch = 5;
	bad.cpu_overcommit_pct = 50;
	assert_int_equal(store_host_register(f->s, &bad, false, NULL, &e), -1);
	assert_string_equal(e.param, "cpu_overcommit_pct");
	store_close(other);
}

/* ---- placement ---------------------------------------------------------------------- */

static void test_place_by_free_memory_and_capacity(void **state)
{
	struct fixture *f = *state;
	struct err e = {0};
	struct store_workspace w;
	cl_workspace(f->s, &w);
	/* Placement needs no identity: one store registers both (the
	 * identity it keeps is the last one's). */
	struct store *b = fixture_open_another(f, &e);
	assert_non_null(b);
	cl_register(f->s, "small", 1, 2, 200, 8192, 100000);
	cl_register(b, "big", 2, 2, 200, 16384, 100000);

	struct store_place p = {.need = {1000, 4096, 10240}};
	struct store_computer c1, c2, c3;
	assert_int_equal(cl_place_new(f->s, w.id, &p, &c1, &e), 0);
	assert_string_equal(c1.host, "big"); /* 16 GiB free beats 8 */
	assert_int_equal(c1.epoch, 2);
	assert_int_equal(c1.reserved.mem_mb, 4096);
	assert_int_equal(cl_place_new(f->s, w.id, &p, &c2, &e), 0);
	/* 12 GiB free on big still beats 8 on small. */
	assert_string_equal(c2.host, "big");
	assert_int_equal(cl_place_new(f->s, w.id, &p, &c3, &e), 0);
	assert_string_equal(c3.host, "small"); /* a tie on memory: the more free CPU */
	struct store_computer g;
	assert_int_equal(store_computer_get(f->s, c3.id, NULL, &g, &e), 0);
	assert_string_equal(g.host, c3.host);
	assert_int_equal(g.reserved.disk_mb, 10240);
	store_computer_clear(&g);

	/* CPU: 2 vCPUs at 200% hand out 4000 milli-vCPU per host; big holds
	 * 2000, small 1000. */
	struct store_place cpu = {.need = {3001, 1, 1}};
	struct store_computer c4;
	assert_int_equal(cl_place_new(f->s, w.id, &cpu, &c4, &e), -1);
	assert_int_equal(e.code, ERR_UNAVAILABLE);
	assert_string_equal(e.param, "size");
	assert_non_null(strstr(e.message, "no host has room"));
	cpu.need.cpu_milli = 3000; /* exactly small's room */
	assert_int_equal(cl_place_new(f->s, w.id, &cpu, &c4, &e), 0);
	assert_string_equal(c4.host, "small");
	assert_int_equal(cl_host(f->s, "small").used.cpu_milli, 4000);

	/* Excluded and draining hosts are skipped; naming one still works. */
	struct store_place mem = {.need = {0, 1024, 0}, .exclude = "big"};
	struct store_computer c5, c6, c7;
	assert_int_equal(cl_place_new(f->s, w.id, &mem, &c5, &e), 0);
	assert_string_equal(c5.host, "small");
	assert_int_equal(store_host_set_state(f->s, "big", "draining", &e), 0);
	mem.exclude = NULL;
	assert_int_equal(cl_place_new(f->s, w.id, &mem, &c6, &e), 0);
	assert_string_equal(c6.host, "small");
	mem.host = "big";
	assert_int_equal(cl_place_new(f->s, w.id, &mem, &c7, &e), 0);
	assert_string_equal(c7.host, "big");
	struct store_computer c8;
	mem.host = "small,big"; /* not an id */
	assert_int_equal(cl_place_new(f->s, w.id, &mem, &c8, &e), -1);
	assert_string_equal(e.param, "host");
	mem.host = NULL;
	mem.need.mem_mb = -1;
	assert_int_equal(cl_place_new(f->s, w.id, &mem, &c8, &e), -1);
	assert_string_equal(e.param, "size");

	/* A create that fails after its placement leaves nothing reserved
	 * (one transaction): here its workspace does not exist. */
	struct store_host before = cl_host(f->s, "small");
	cl_computer("ws-0000000000000000", "provisioning", &c8);
	struct store_place one = {.need = {0, 1, 1}, .host = "small"};
	struct store_commit how = {.insert = true, .place = &one};
	assert_int_equal(store_computer_commit(f->s, &c8, &how, &e), -1);
	assert_string_equal(e.param, "workspace");
	struct store_host after = cl_host(f->s, "small");
	assert_int_equal(after.used.mem_mb, before.used.mem_mb);
	assert_int_equal(after.used.disk_mb, before.used.disk_mb);
	struct store_computer *all[] = {&c1, &c2, &c3, &c4, &c5, &c6, &c7};
	for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
		store_computer_clear(all[i]);

	/* The CHECK holds whatever writes: nothing can overcommit a host. */
	assert_int_equal(fixture_sql(f, "UPDATE hosts SET mem_mb_used = mem_mb + 1"), -1);
	assert_int_equal(fixture_sql(f, "UPDATE hosts SET disk_mb_used = -1"), -1);
	assert_int_equal(fixture_sql(f, "UPDATE computers SET cpu_milli = -1"), -1);
	store_close(b);
}

/* What a state no longer holds goes back, in the transaction that writes
 * the state; starting again on the host reserves only what it lacks. */
static void test_release_follows_state(void **state)
{
	struct fixture *f = *state;
	struct err e = {0};
	struct store_workspace w;
	cl_workspace(f->s, &w);
	cl_register(f->s, "h", 7, 4, 100, 8192, 50000);
	struct store_place p = {.need = {2000, 4096, 20000}};
	struct store_computer c;
	assert_int_equal(cl_place_new(f->s, w.id, &p, &c, &e), 0);
	struct store_host h = cl_host(f->s, "h");
	assert_int_equal(h.used.cpu_milli, 2000);
	assert_int_equal(h.used.mem_mb, 4096);
	assert_int_equal(h.used.disk_mb, 20000);
	assert_int_equal(h.computers, 1);

	/* running → stopping holds; stopped frees CPU and memory. */
	assert_int_equal(store_computer_set_state(f->s, c.id, "running", NULL, &e), 0);
	assert_int_equal(store_computer_set_state(f->s, c.id, "stopping", NULL, &e), 0);
	assert_int_equal(cl_host(f->s, "h").used.mem_mb, 4096);
	assert_int_equal(store_computer_set_state(f->s, c.id, "stopped", NULL, &e), 0);
	h = cl_host(f->s, "h");
	assert_int_equal(h.used.cpu_milli, 0);
	assert_int_equal(h.used.mem_mb, 0);
	assert_int_equal(h.used.disk_mb, 20000);
	struct store_computer g;
	assert_int_equal(store_computer_get(f->s, c.id, NULL, &g, &e), 0);
	assert_int_equal(g.reserved.cpu_milli, 0);
	assert_int_equal(g.reserved.disk_mb, 20000);

	/* Starting again where its disk is: CPU and memory only. */
	struct store_place again = {.need = {2000, 4096, 20000}, .host = "h"};
	g.state = COMPUTER_STARTING;
	struct store_commit how = {.place = &again};
	assert_int_equal(store_computer_commit(f->s, &g, &how, &e), 0);
	assert_int_equal(g.reserved.cpu_milli, 2000);
	assert_int_equal(g.reserved.disk_mb, 20000);
	h = cl_host(f->s, "h");
	assert_int_equal(h.used.cpu_milli, 2000);
	assert_int_equal(h.used.disk_mb, 20000);

	/* Through the commit path too (the core's): error frees CPU and
	 * memory, deleted frees the disk. */
	g.state = COMPUTER_ERROR;
	assert_int_equal(store_computer_commit(f->s, &g, NULL, &e), 0);
	assert_int_equal(cl_host(f->s, "h").used.mem_mb, 0);
	assert_int_equal(cl_host(f->s, "h").used.disk_mb, 20000);
	assert_int_equal(store_computer_set_state(f->s, c.id, "deleted", NULL, &e), 0);
	h = cl_host(f->s, "h");
	assert_int_equal(h.used.disk_mb, 0);
	assert_int_equal(h.computers, 0);
	store_computer_clear(&g);
	store_computer_clear(&c);
}

/* ---- placement under contention ---------------------------------------------------------- */

#define CL_THREADS 8

struct placer {
	struct fixture *f;
	const char *ws;
	int placed, deleted, full, errors;
	char error[600];
};

/* Places until no host has room, deleting every third of its own. */
static void *placer_main(void *arg)
{
	struct placer *pl = arg;
	struct err e = {0};
	struct store *s = fixture_open_another(pl->f, &e);
	if (!s) {
		pl->errors++;
		snprintf(pl->error, sizeof pl->error, "open: %s", e.message);
		return NULL;
	}
	struct store_place p = {.need = {500, 512, 1024}};
	for (int i = 0; pl->full < 3 && i < 10000; i++) {
		struct store_computer c;
		if (cl_place_new(s, pl->ws, &p, &c, &e) == 0) {
			pl->placed++;
			if (pl->placed % 3 == 0 &&
			    store_computer_set_state(s, c.id, "deleted", NULL, &e) == 0)
				pl->deleted++;
			store_computer_clear(&c);
		} else if (e.code == ERR_UNAVAILABLE && strstr(e.message, "no host has room")) {
			pl->full++;
		} else {
			pl->errors++;
			snprintf(pl->error, sizeof pl->error, "%s", e.message);
			break;
		}
	}
	store_close(s);
	return NULL;
}

static void test_placement_never_overcommits(void **state)
{
	struct fixture *f = *state;
	struct err e = {0};
	struct store_workspace w;
	cl_workspace(f->s, &w);
	/* Memory binds: 3 hosts x 20 of 512 MiB; CPU (4000 x 300%) and disk
	 * have room for more. */
	struct store *h2 = fixture_open_another(f, &e), *h3 = fixture_open_another(f, &e);
	assert_non_null(h2);
	assert_non_null(h3);
	cl_register(f->s, "p1", 11, 4, 300, 20 * 512, 1 << 20);
	cl_register(h2, "p2", 12, 4, 300, 20 * 512 + 300, 1 << 20);
	cl_register(h3, "p3", 13, 4, 300, 20 * 512 + 511, 1 << 20);

	struct placer pl[CL_THREADS];
	pthread_t t[CL_THREADS];
	int64_t t0 = now_ms();
	for (int i = 0; i < CL_THREADS; i++) {
		pl[i] = (struct placer){.f = f, .ws = w.id};
		assert_int_equal(pthread_create(&t[i], NULL, placer_main, &pl[i]), 0);
	}
	int placed = 0, deleted = 0, errors = 0;
	for (int i = 0; i < CL_THREADS; i++) {
		pthread_join(t[i], NULL);
		placed += pl[i].placed;
		deleted += pl[i].deleted;
		errors += pl[i].errors;
		if (pl[i].errors)
			fprintf(stderr, "placer %d: %s\n", i, pl[i].error);
	}
	int64_t ms = now_ms() - t0;
	assert_int_equal(errors, 0);
	/* Every host is full (its room for another < 512 MiB), never over. */
	assert_int_equal(placed - deleted, 60);
	const char *ids[] = {"p1", "p2", "p3"};
	for (int i = 0; i < 3; i++) {
		struct store_host h = cl_host(f->s, ids[i]);
		assert_true(h.used.mem_mb <= h.capacity.mem_mb);
		assert_true(h.capacity.mem_mb - h.used.mem_mb < 512);
		assert_int_equal(h.used.mem_mb, 512 * h.computers);
		assert_int_equal(h.used.cpu_milli, 500 * h.computers);
	}
	/* And what the hosts count is what the computers hold. */
	assert_int_equal(fixture_sql_int(f, "SELECT COUNT(*) FROM hosts h WHERE mem_mb_used <>"
					    " (SELECT COALESCE(SUM(mem_mb), 0) FROM computers c"
					    " WHERE c.host = h.id)"),
			 0);
	printf("placement under contention (%s, %d connections): %d placements and %d "
	       "deletes in %lld ms = %.0f placements/s\n",
	       f->pg ? "postgresql" : "sqlite", CL_THREADS, placed, deleted, (long long)ms,
	       ms > 0 ? placed * 1000.0 / (double)ms : 0.0);
	store_close(h2);
	store_close(h3);
}

/* ---- fencing and the reaper -------------------------------------------------------------- */

static void test_fencing_and_reap(void **state)
{
	struct fixture *f = *state;
	struct err e = {0};
	struct store_workspace w;
	cl_workspace(f->s, &w);
	/* Host a (this fixture's store) and the reaper's store. */
	cl_register(f->s, "a", 500, 4, 100, 8192, 50000);
	struct store *reaper = fixture_open_another(f, &e);
	assert_non_null(reaper);
	cl_register(reaper, "r", 900, 4, 100, 8192, 50000);

	struct store_place p = {.need = {1000, 1024, 2048}, .host = "a"};
	struct store_computer c, d;
	assert_int_equal(cl_place_new(f->s, w.id, &p, &c, &e), 0);
	assert_int_equal(cl_place_new(f->s, w.id, &p, &d, &e), 0);
	assert_int_equal(c.epoch, 500);
	const int64_t t0 = 1700000000000LL;
	c.state = COMPUTER_RUNNING;
	struct store_commit run = {.bill = true, .rate_state = "running", .at_ms = t0};
	assert_int_equal(store_computer_commit(f->s, &c, &run, &e), 0);
	d.state = COMPUTER_DELETING;
	assert_int_equal(store_computer_commit(f->s, &d, NULL, &e), 0);
	/* The tick: a's row and c's segment. */
	assert_int_equal(store_usage_tick(f->s, t0 + 1000, &e), 2);
	assert_int_equal(store_usage_tick(f->s, t0 + 2000, &e), 2);
	/* The reaper's tick is its own: its row only. */
	assert_int_equal(store_usage_tick(reaper, t0 + 2000, &e), 1);

	/* A stale epoch reaps nothing. */
	int lost = -1;
	assert_int_equal(store_host_reap(reaper, "a", 499, "test", &lost, &e), 0);
	assert_int_equal(lost, 0);
	/* The lease is gone: c lost, d (deleting) deleted, billing closed at the
	 * last tick, capacity freed, the host down. */
	assert_int_equal(store_host_reap(reaper, "a", 500, "its lease expired", &lost, &e), 1);
	assert_int_equal(lost, 1);
	struct store_computer g;
	assert_int_equal(store_computer_get(reaper, c.id, NULL, &g, &e), 0);
	assert_int_equal(g.state, COMPUTER_LOST);
	assert_string_equal(g.error, "its lease expired");
	assert_int_equal(g.reserved.mem_mb, 0);
	store_computer_clear(&g);
	assert_int_equal(store_computer_get(reaper, d.id, NULL, &g, &e), 0);
	assert_int_equal(g.state, COMPUTER_DELETED);
	store_computer_clear(&g);
	struct store_host h = cl_host(reaper, "a");
	assert_string_equal(h.state, "down");
	assert_int_equal(h.epoch, 0);
	assert_int_equal(h.used.mem_mb, 0);
	assert_int_equal(h.used.disk_mb, 0);
	struct store_open_segment *segs;
	size_t n;
	assert_int_equal(store_usage_open_segments(reaper, &segs, &n, &e), 0);
	assert_int_equal(n, 0);
	free(segs);
	int64_t end = 0;
	assert_int_equal(store_usage_last_end(reaper, c.id, &end, &e), 0);
	assert_int_equal(end, t0 + 2000);
	/* Reaping twice is nothing. */
	assert_int_equal(store_host_reap(reaper, "a", 500, "again", &lost, &e), 0);

	/* The fenced host: its tick touches nothing, its writes are refused,
	 * nothing is billed after. */
	assert_int_equal(store_usage_tick(f->s, t0 + 3000, &e), 0);
	assert_int_equal(store_computer_set_state(f->s, c.id, "stopped", NULL, &e), -1);
	assert_int_equal(e.code, ERR_CONFLICT);
	assert_non_null(strstr(e.message, "no longer holds its lease"));
	c.state = COMPUTER_STOPPED;
	struct store_commit stop = {.bill = true, .rate_state = "stopped", .at_ms = t0 + 3000};
	assert_int_equal(store_computer_commit(f->s, &c, &stop, &e), -1);
	assert_int_equal(e.code, ERR_CONFLICT);
	assert_int_equal(store_usage_switch(f->s, c.id, w.id, "md", "running", t0 + 3000, &e), -1);
	assert_int_equal(e.code, ERR_CONFLICT);
	assert_int_equal(store_place(f->s, c.id, &p, NULL, &e), -1);
	assert_int_equal(e.code, ERR_CONFLICT);
	assert_int_equal(store_usage_last_end(reaper, c.id, &end, &e), 0);
	assert_int_equal(end, t0 + 2000);
	assert_int_equal(store_computer_get(reaper, c.id, NULL, &g, &e), 0);
	assert_int_equal(g.state, COMPUTER_LOST);

	/* It registers again (a new lease): its tick is its row again. A lost
	 * computer is re-created elsewhere: same id, a new host. */
	cl_register(f->s, "a", 501, 4, 100, 8192, 50000);
	assert_int_equal(store_usage_tick(f->s, t0 + 4000, &e), 1);
	struct store_place elsewhere = {.need = {1000, 1024, 2048}, .exclude = "a"};
	g.state = COMPUTER_PROVISIONING;
	struct store_commit recreate = {.place = &elsewhere};
	assert_int_equal(store_computer_commit(f->s, &g, &recreate, &e), 0);
	assert_string_equal(g.host, "r");
	assert_int_equal(g.epoch, 900);
	assert_int_equal(cl_host(reaper, "r").used.mem_mb, 1024);
	store_computer_clear(&g);
	store_computer_clear(&c);
	store_computer_clear(&d);
	store_close(reaper);
}

/* A host that registers under a new lease adopts what it held under the
 * old one (cubicled restarted, the computers kept running), or declares
 * it lost (it was fenced and stopped them). */
static void test_register_adopts_or_loses(void **state)
{
	struct fixture *f = *state;
	struct err e = {0};
	struct store_workspace w;
	cl_workspace(f->s, &w);
	cl_register(f->s, "a", 10, 4, 100, 8192, 50000);
	struct store_place p = {.need = {1000, 1024, 2048}};
	struct store_computer c;
	assert_int_equal(cl_place_new(f->s, w.id, &p, &c, &e), 0);
	const int64_t t0 = 1700000000000LL;
	assert_int_equal(store_usage_switch(f->s, c.id, w.id, "md", "running", t0, &e), 0);

	struct store_host h = {
	    .epoch = 11, .cpu_overcommit_pct = 100, .capacity = {4000, 8192, 50000}};
	snprintf(h.id, sizeof h.id, "a");
	int moved = -1;
	assert_int_equal(store_host_register(f->s, &h, true, &moved, &e), 0);
	assert_int_equal(moved, 1);
	struct store_computer g;
	assert_int_equal(store_computer_get(f->s, c.id, NULL, &g, &e), 0);
	assert_int_equal(g.epoch, 11);
	assert_int_equal(g.state, COMPUTER_PROVISIONING);
	store_computer_clear(&g);
	assert_int_equal(store_usage_tick(f->s, t0 + 1000, &e), 2); /* row + segment */
	assert_int_equal(cl_host(f->s, "a").used.mem_mb, 1024);

	h.epoch = 12;
	assert_int_equal(store_host_register(f->s, &h, false, &moved, &e), 0);
	assert_int_equal(moved, 1);
	assert_int_equal(store_computer_get(f->s, c.id, NULL, &g, &e), 0);
	assert_int_equal(g.state, COMPUTER_LOST);
	assert_int_equal(g.epoch, 11);
	store_computer_clear(&g);
	h = cl_host(f->s, "a");
	assert_int_equal(h.used.mem_mb, 0);
	assert_int_equal(h.epoch, 12);
	int64_t end = 0;
	assert_int_equal(store_usage_last_end(f->s, c.id, &end, &e), 0);
	assert_int_equal(end, t0 + 1000);
	assert_int_equal(store_usage_tick(f->s, t0 + 2000, &e), 1);

	/* A declared capacity below what is held is raised to it. */
	store_computer_clear(&c);
	assert_int_equal(cl_place_new(f->s, w.id, &p, &c, &e), 0);
	struct store_host tiny = {.epoch = 13, .cpu_overcommit_pct = 100, .capacity = {0, 0, 0}};
	snprintf(tiny.id, sizeof tiny.id, "a");
	assert_int_equal(store_host_register(f->s, &tiny, true, NULL, &e), 0);
	h = cl_host(f->s, "a");
	assert_int_equal(h.capacity.mem_mb, 1024);
	assert_int_equal(h.capacity.cpu_milli, 1000);
	assert_int_equal(h.used.mem_mb, 1024);
	store_computer_clear(&c);
}

/* ---- stream-token keys --------------------------------------------------------------------- */

struct keyer {
	struct store *s;
	pthread_barrier_t *go;
	struct store_stream_key k;
	int rc;
};

static void *keyer_main(void *arg)
{
	struct keyer *k = arg;
	struct err e = {0};
	pthread_barrier_wait(k->go);
	k->rc = store_stream_key_current(k->s, NULL, &k->k, &e);
	return NULL;
}

/* Hosts that start together make one first key, not one each. */
static void test_stream_key_first_race(void **state)
{
	struct fixture *f = *state;
	struct err e = {0};
	struct keyer k[4];
	pthread_t t[4];
	pthread_barrier_t go;
	pthread_barrier_init(&go, NULL, 4);
	for (int i = 0; i < 4; i++) {
		k[i] = (struct keyer){.s = fixture_open_another(f, &e), .go = &go};
		assert_non_null(k[i].s);
	}
	for (int i = 0; i < 4; i++)
		assert_int_equal(pthread_create(&t[i], NULL, keyer_main, &k[i]), 0);
	for (int i = 0; i < 4; i++) {
		pthread_join(t[i], NULL);
		store_close(k[i].s);
		assert_int_equal(k[i].rc, 0);
		assert_string_equal(k[i].k.id, k[0].k.id);
		assert_memory_equal(k[i].k.secret, k[0].k.secret, STORE_STREAM_KEY_BYTES);
	}
	pthread_barrier_destroy(&go);
	assert_int_equal(fixture_sql_int(f, "SELECT COUNT(*) FROM stream_keys"), 1);
}

static void test_stream_keys(void **state)
{
	struct fixture *f = *state;
	struct err e = {0};
	struct store *b = fixture_open_another(f, &e);
	assert_non_null(b);
	unsigned char seed[STORE_STREAM_KEY_BYTES];
	memset(seed, 0x5a, sizeof seed);
	struct store_stream_key k1, k2, k3;
	assert_int_equal(store_stream_key_current(f->s, seed, &k1, &e), 0);
	assert_int_equal(strncmp(k1.id, "sk-", 3), 0);
	assert_memory_equal(k1.secret, seed, sizeof seed);
	/* Another host gets the same key, whatever it would have seeded. */
	assert_int_equal(store_stream_key_current(b, NULL, &k2, &e), 0);
	assert_string_equal(k2.id, k1.id);
	assert_memory_equal(k2.secret, k1.secret, sizeof seed);
	assert_int_equal(store_stream_key_get(b, k1.id, &k3, &e), 0);
	assert_memory_equal(k3.secret, seed, sizeof seed);
	assert_int_equal(store_stream_key_get(b, "sk-0000000000000000", &k3, &e), -1);
	assert_int_equal(e.code, ERR_NOT_FOUND);
	assert_int_equal(store_stream_key_get(b, "", &k3, &e), -1);
	assert_int_equal(e.code, ERR_NOT_FOUND);

	/* Rotation: a new current key; the old one verifies until retired. */
	usleep(2000); /* a later created_ms than k1's */
	assert_int_equal(store_stream_key_rotate(f->s, &k2, &e), 0);
	assert_string_not_equal(k2.id, k1.id);
	assert_int_equal(store_stream_key_current(b, NULL, &k3, &e), 0);
	assert_string_equal(k3.id, k2.id);
	assert_int_equal(store_stream_key_get(b, k1.id, &k3, &e), 0);
	assert_int_equal(store_stream_key_retire(b, k2.created_ms + 1, &e), 0);
	assert_int_equal(store_stream_key_get(b, k1.id, &k3, &e), -1);
	assert_int_equal(store_stream_key_get(b, k2.id, &k3, &e), 0); /* never the newest */
	store_close(b);
}

/* ---- PostgreSQL only ------------------------------------------------------------------------ */

struct revoked {
	pthread_mutex_t lock;
	char computer[64];
	int64_t ms;
	int calls;
};

static void on_revoked(void *ctx, const char *computer, int64_t revoked_ms)
{
	struct revoked *r = ctx;
	pthread_mutex_lock(&r->lock);
	snprintf(r->computer, sizeof r->computer, "%s", computer);
	r->ms = revoked_ms;
	r->calls++;
	pthread_mutex_unlock(&r->lock);
}

/* A key revoked on one host fails on another within a second (the
 * listener); a stream revocation reaches the other's callback. On SQLite:
 * the same store's callback, at once. */
static void test_revocation_reaches_other_host(void **state)
{
	struct fixture *f = *state;
	struct err e = {0};
	struct store_workspace w;
	cl_workspace(f->s, &w);
	struct store *b = f->pg ? fixture_open_another(f, &e) : f->s;
	assert_non_null(b);
	struct revoked r = {.lock = PTHREAD_MUTEX_INITIALIZER};
	store_on_stream_revoke(b, on_revoked, &r);

	/* A key made on a is valid on b as soon as the notice arrives. */
	char key[64], ws[40];
	bool admin;
	assert_int_equal(store_key_create(f->s, w.id, key, &e), 0);
	int64_t t0 = now_ms(), seen = -1;
	while (now_ms() - t0 < 10000 && seen < 0)
		if (store_key_lookup(b, key, ws, &admin, &e) == 0)
			seen = now_ms() - t0;
		else
			usleep(5000);
	assert_true(seen >= 0);
	assert_int_equal(store_key_revoke(f->s, key, &e), 0);
	t0 = now_ms();
	int64_t gone = -1;
	while (now_ms() - t0 < 10000 && gone < 0)
		if (store_key_lookup(b, key, ws, &admin, &e) < 0 && e.code == ERR_UNAUTHORIZED)
			gone = now_ms() - t0;
		else
			usleep(5000);
	assert_true(gone >= 0);

	assert_int_equal(
	    store_stream_revoke(f->s, "c-0123456789abcdef", 1234, now_ms() + 60000, &e), 0);
	t0 = now_ms();
	int calls = 0;
	while (now_ms() - t0 < 10000 && calls == 0) {
		pthread_mutex_lock(&r.lock);
		calls = r.calls;
		pthread_mutex_unlock(&r.lock);
		if (!calls)
			usleep(5000);
	}
	assert_true(calls > 0);
	assert_string_equal(r.computer, "c-0123456789abcdef");
	assert_int_equal(r.ms, 1234);
	printf("revocation on another host (%s): key %lld ms, stream %lld ms\n",
	       f->pg ? "postgresql" : "sqlite", (long long)gone, (long long)(now_ms() - t0));
	store_on_stream_revoke(b, NULL, NULL);
	if (b != f->s)
		store_close(b);
}

/* The server stops (fast: sessions ended) and starts again: calls in
 * between fail at once with 503 saying so; the store reconnects by itself
 * and nothing acknowledged is lost. */
static void test_pg_outage_is_503_then_reconnects(void **state)
{
	struct fixture *f = *state;
	if (!f->pg)
		skip();
	struct err e = {0};
	struct store_workspace w, g;
	cl_workspace(f->s, &w);
	char key[64];
	assert_int_equal(store_key_create(f->s, w.id, key, &e), 0);
	pgserver_stop(false);

	int64_t t0 = now_ms();
	assert_int_equal(store_workspace_get(f->s, w.id, &g, &e), -1);
	assert_int_equal(e.code, ERR_UNAVAILABLE);
	assert_non_null(strstr(e.message, "database"));
	assert_int_equal(store_workspace_create(f->s, "during", 0, &g, &e), -1);
	assert_int_equal(e.code, ERR_UNAVAILABLE);
	/* Backoff: the next calls do not even try, and say when they will. */
	assert_int_equal(store_ping(f->s, &e), -1);
	assert_int_equal(e.code, ERR_UNAVAILABLE);
	assert_true(now_ms() - t0 < 15000); /* never a hang (a bound, not a timing) */
	/* Keys still answer from memory. */
	char ws[40];
	bool admin;
	assert_int_equal(store_key_lookup(f->s, key, ws, &admin, &e), 0);
	assert_string_equal(ws, w.id);

	assert_int_equal(pgserver_restart(), 0);
	t0 = now_ms();
	while (store_ping(f->s, &e) < 0 && now_ms() - t0 < 30000)
		usleep(20000);
	assert_int_equal(store_ping(f->s, &e), 0);
	printf("postgresql outage: the store answered again %lld ms after the server did\n",
	       (long long)(now_ms() - t0));
	assert_int_equal(store_workspace_get(f->s, w.id, &g, &e), 0);
	assert_int_equal(store_workspace_create(f->s, "after", 0, &g, &e), 0);
}

/* The server crashes (SIGQUIT: no shutdown checkpoint) while a thread
 * ticks: every tick the store acknowledged is there after recovery. */
struct ticker {
	struct store *s;
	int64_t acked; /* the last acknowledged tick's time (atomic) */
	int stop;      /* atomic */
};

static void *ticker_main(void *arg)
{
	struct ticker *t = arg;
	struct err e = {0};
	for (int64_t at = 1700000001000LL; !__atomic_load_n(&t->stop, __ATOMIC_ACQUIRE); at += 10)
		if (store_usage_tick(t->s, at, &e) >= 0)
			__atomic_store_n(&t->acked, at, __ATOMIC_RELEASE);
	return NULL;
}

static void test_pg_crash_keeps_acknowledged_ticks(void **state)
{
	struct fixture *f = *state;
	if (!f->pg)
		skip();
	struct err e = {0};
	struct store_workspace w;
	cl_workspace(f->s, &w);
	struct store_computer c;
	cl_computer(w.id, "running", &c);
	assert_int_equal(store_computer_insert(f->s, &c, &e), 0);
	assert_int_equal(store_usage_switch(f->s, c.id, w.id, "md", "running", 1700000000000LL, &e),
			 0);
	struct ticker t = {.s = f->s};
	pthread_t th;
	assert_int_equal(pthread_create(&th, NULL, ticker_main, &t), 0);
	while (__atomic_load_n(&t.acked, __ATOMIC_ACQUIRE) < 1700000001000LL + 500)
		usleep(1000); /* some ticks went through */
	pgserver_stop(true);
	__atomic_store_n(&t.stop, 1, __ATOMIC_RELEASE);
	pthread_join(th, NULL);
	int64_t acked = t.acked;
	assert_int_equal(pgserver_restart(), 0);
	int64_t t0 = now_ms();
	while (store_ping(f->s, &e) < 0 && now_ms() - t0 < 30000)
		usleep(20000);
	int64_t end = 0;
	assert_int_equal(store_usage_last_end(f->s, c.id, &end, &e), 0);
	assert_true(end >= acked);
	store_computer_clear(&c);
}

/* A frozen server (every process stopped: a hung machine) is a 503 after
 * the statement deadline, never a hang; it thaws and the store goes on. */
static void test_pg_frozen_server_times_out(void **state)
{
	struct fixture *f = *state;
	if (!f->pg)
		skip();
	struct err e = {0};
	struct store_workspace w, g;
	cl_workspace(f->s, &w);
	store_pg_set_timeout(f->s, 1000);
	pgserver_freeze(true);
	int64_t t0 = now_ms();
	int rc = store_workspace_get(f->s, w.id, &g, &e);
	int64_t took = now_ms() - t0;
	pgserver_freeze(false);
	assert_int_equal(rc, -1);
	assert_int_equal(e.code, ERR_UNAVAILABLE);
	/* "did not answer within 1000 ms", or the connection's timeout when
	 * another call had already dropped it. */
	assert_non_null(strstr(e.message, "database"));
	assert_true(took < 30000); /* the deadlines bound it (a bound, not a timing) */
	t0 = now_ms();
	while (store_ping(f->s, &e) < 0 && now_ms() - t0 < 30000)
		usleep(20000);
	assert_int_equal(store_workspace_get(f->s, w.id, &g, &e), 0);
}

int store_cluster_run(const char *name)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_hosts_register_and_list, fixture_setup,
					    fixture_teardown),
	    cmocka_unit_test_setup_teardown(test_place_by_free_memory_and_capacity, fixture_setup,
					    fixture_teardown),
	    cmocka_unit_test_setup_teardown(test_release_follows_state, fixture_setup,
					    fixture_teardown),
	    cmocka_unit_test_setup_teardown(test_placement_never_overcommits, fixture_setup,
					    fixture_teardown),
	    cmocka_unit_test_setup_teardown(test_fencing_and_reap, fixture_setup, fixture_teardown),
	    cmocka_unit_test_setup_teardown(test_register_adopts_or_loses, fixture_setup,
					    fixture_teardown),
	    cmocka_unit_test_setup_teardown(test_stream_keys, fixture_setup, fixture_teardown),
	    cmocka_unit_test_setup_teardown(test_stream_key_first_race, fixture_setup,
					    fixture_teardown),
	    cmocka_unit_test_setup_teardown(test_revocation_reaches_other_host, fixture_setup,
					    fixture_teardown),
	    cmocka_unit_test_setup_teardown(test_pg_outage_is_503_then_reconnects, fixture_setup,
					    fixture_teardown),
	    cmocka_unit_test_setup_teardown(test_pg_crash_keeps_acknowledged_ticks, fixture_setup,
					    fixture_teardown),
	    cmocka_unit_test_setup_teardown(test_pg_frozen_server_times_out, fixture_setup,
					    fixture_teardown),
	};
	return _cmocka_run_group_tests(name, tests, sizeof tests / sizeof tests[0], NULL, NULL);
}
