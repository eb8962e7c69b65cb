/*
 * store: workspaces, keys, computers and the usage ledger (cmocka), every
 * case twice: against a real SQLite database in a fresh temporary
 * directory, and against a real PostgreSQL 15 server the binary starts
 * (store-fixture.h), a fresh database per case. Includes a SIGKILL of a
 * process mid-ledger and concurrent use from several threads; the
 * cluster's cases (hosts, placement, fencing, outages) are in
 * store-cluster.c.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include <dirent.h>
#include <pthread.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "store-fixture.h"
#include "store-internal.h" /* store_lock: to hold the store busy; the migrations */
#include "store-recordings.h"
#include "store-templates.h"
#include "store.h"

/* store-cluster.c's cases, on the current pass's back end. */
int store_cluster_run(const char *name);

static bool is_hex(const char *p, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (!((p[i] >= '0' && p[i] <= '9') || (p[i] >= 'a' && p[i] <= 'f')))
			return false;
	return p[n] == 0;
}

static void make_workspace(struct store *s, const char *name, struct store_workspace *w)
{
	struct err e = {0};
	if (store_workspace_create(s, name, 0, w, &e))
		fail_msg("workspace_create: %s", e.message);
}

/* Inserts a computer with the given workspace, kind, size, state. */
static void make_computer(struct store *s, const char *ws, const char *kind, const char *size,
			  const char *state, struct store_computer *out)
{
	struct store_computer c;
	memset(&c, 0, sizeof c);
	snprintf(c.workspace, sizeof c.workspace, "%s", ws);
	snprintf(c.kind, sizeof c.kind, "%s", kind);
	snprintf(c.size, sizeof c.size, "%s", size);
	snprintf(c.isolation, sizeof c.isolation, "container");
	assert_int_equal(computer_state_parse(state, &c.state), 0);
	c.width = 1280;
	c.height = 800;
	c.idle_timeout_s = 600;
	struct err e = {0};
	if (store_computer_insert(s, &c, &e))
		fail_msg("computer_insert: %s", e.message);
	*out = c;
}

/* ---- workspaces and keys ---------------------------------------------- */

static void test_workspace_create_get_list(void **state)
{
	struct fixture *f = *state;
	struct err e = {0};
	struct store_workspace a, b, got;
	assert_int_equal(store_workspace_create(f->s, "acme", 3, &a, &e), 0);
	assert_int_equal(strncmp(a.id, "ws-", 3), 0);
	assert_true(is_hex(a.id + 3, 16));
	assert_string_equal(a.name, "acme");
	assert_int_equal(a.max_running, 3);
	assert_true(a.created_ms > 1600000000000LL);
	make_workspace(f->s, "globex", &b);
	assert_string_not_equal(a.id, b.id);

	assert_int_equal(store_workspace_get(f->s, a.id, &got, &e), 0);
	assert_string_equal(got.id, a.id);
	assert_string_equal(got.name, "acme");
	assert_int_equal(got.max_running, 3);
	assert_int_equal(got.created_ms, a.created_ms);

	assert_int_equal(store_workspace_get(f->s, "ws-0000000000000000", &got, &e), -1);
	assert_int_equal(e.code, ERR_NOT_FOUND);
	assert_string_equal(e.message, "no workspace ws-0000000000000000");

	assert_int_equal(store_workspace_create(f->s, "", 0, &got, &e), -1);
	assert_int_equal(e.code, ERR_INVALID);
	assert_string_equal(e.param, "name");
	assert_int_equal(store_workspace_create(f->s, NULL, 0, &got, &e), -1);
	assert_string_equal(e.param, "name");
	assert_int_equal(store_workspace_create(f->s, "x", -1, &got, &e), -1);
	assert_string_equal(e.param, "max_running");
	char longname[200];
	memset(longname, 'n', sizeof longname - 1);
	longname[sizeof longname - 1] = 0;
	assert_int_equal(store_workspace_create(f->s, longname, 0, &got, &e), -1);
	assert_string_equal(e.param, "name");

	json_t *list = NULL;
	assert_int_equal(store_workspace_list(f->s, &list, &e), 0);
	assert_int_equal(json_array_size(list), 2);
	json_t *first = json_array_get(list, 0);
	assert_string_equal(json_string_value(json_object_get(first, "id")), a.id);
	assert_string_equal(json_string_value(json_object_get(first, "name")), "acme");
	assert_int_equal(json_integer_value(json_object_get(first, "max_running")), 3);
	assert_int_equal(json_integer_value(json_object_get(first, "created_at")), a.created_ms);
	assert_string_equal(json_string_value(json_object_get(json_array_get(list, 1), "id")),
			    b.id);
	json_decref(list);
}

/* Whether needle occurs anywhere in the bytes of the file at path. */
static bool file_contains(const char *path, const char *needle)
{
	FILE *fp = fopen(path, "rb");
	if (!fp)
		return false;
	size_t cap = 1 << 16, len = 0;
	char *buf = malloc(cap);
	size_t got;
	while ((got = fread(buf + len, 1, cap - len, fp)) > 0) {
		len += got;
		if (len == cap)
			buf = realloc(buf, cap *= 2);
	}
	fclose(fp);
	bool found = memmem(buf, len, needle, strlen(needle)) != NULL;
	free(buf);
	return found;
}

/* A workspace's egress lists: stored as given, changed one at a time, in its JSON. */
static void test_workspace_egress(void **state)
{
	struct fixture *f = *state;
	struct err e = {0};
	struct store_workspace a, got;
	assert_int_equal(
	    store_workspace_create_egress(f->s, "acme", 0, "10.213.7.0/30", NULL, &a, &e), 0);
	assert_int_equal(store_workspace_get(f->s, a.id, &got, &e), 0);
	assert_string_equal(got.egress_allow, "10.213.7.0/30");
	assert_string_equal(got.egress_deny, "");
	/* NULL keeps a list, "" clears it. */
	assert_int_equal(
	    store_workspace_set_egress(f->s, a.id, NULL, "203.0.113.0/24,8.8.8.8/32", &e), 0);
	assert_int_equal(store_workspace_get(f->s, a.id, &got, &e), 0);
	assert_string_equal(got.egress_allow, "10.213.7.0/30");
	assert_string_equal(got.egress_deny, "203.0.113.0/24,8.8.8.8/32");
	json_t *j = store_workspace_json(&got);
	assert_int_equal(json_array_size(json_object_get(j, "egress_deny")), 2);
	assert_string_equal(json_string_value(json_array_get(json_object_get(j, "egress_deny"), 1)),
			    "8.8.8.8/32");
	assert_int_equal(json_array_size(json_object_get(j, "egress_allow")), 1);
	json_decref(j);
	assert_int_equal(store_workspace_set_egress(f->s, a.id, "", NULL, &e), 0);
	assert_int_equal(store_workspace_get(f->s, a.id, &got, &e), 0);
	assert_string_equal(got.egress_allow, "");
	assert_string_equal(got.egress_deny, "203.0.113.0/24,8.8.8.8/32");
	/* A plain create has none; an unknown workspace is not found; too long is refused. */
	assert_int_equal(store_workspace_create(f->s, "globex", 0, &got, &e), 0);
	assert_string_equal(got.egress_allow, "");
	assert_int_equal(store_workspace_set_egress(f->s, "ws-0000000000000000", "", "", &e), -1);
	assert_int_equal(e.code, ERR_NOT_FOUND);
	char big[STORE_EGRESS_LEN + 1];
	memset(big, '1', sizeof big - 1);
	big[sizeof big - 1] = 0;
	assert_int_equal(store_workspace_set_egress(f->s, a.id, big, NULL, &e), -1);
	assert_string_equal(e.param, "egress_allow");
}

static void test_keys(void **state)
{
	struct fixture *f = *state;
	struct err e = {0};
	struct store_workspace w;
	make_workspace(f->s, "acme", &w);

	char key[64], admin_key[64];
	assert_int_equal(store_key_create(f->s, w.id, key, &e), 0);
	assert_int_equal(strlen(key), 51);
	assert_int_equal(strncmp(key, "ck_", 3), 0);
	assert_true(is_hex(key + 3, 48));
	assert_int_equal(store_key_create(f->s, NULL, admin_key, &e), 0);
	assert_string_not_equal(key, admin_key);

	char ws[40] = "junk";
	bool admin = true;
	assert_int_equal(store_key_lookup(f->s, key, ws, &admin, &e), 0);
	assert_string_equal(ws, w.id);
	assert_false(admin);
	assert_int_equal(store_key_lookup(f->s, admin_key, ws, &admin, &e), 0);
	assert_string_equal(ws, "");
	assert_true(admin);

	/* A wrong key: one changed digit, a prefix, empty, NULL. */
	char wrong[64];
	memcpy(wrong, key, sizeof wrong);
	wrong[10] = wrong[10] == '0' ? '1' : '0';
	assert_int_equal(store_key_lookup(f->s, wrong, ws, &admin, &e), -1);
	assert_int_equal(e.code, ERR_UNAUTHORIZED);
	char prefix[64];
	snprintf(prefix, sizeof prefix, "%.50s", key);
	assert_int_equal(store_key_lookup(f->s, prefix, ws, &admin, &e), -1);
	assert_int_equal(e.code, ERR_UNAUTHORIZED);
	assert_int_equal(store_key_lookup(f->s, "", ws, &admin, &e), -1);
	assert_int_equal(e.code, ERR_UNAUTHORIZED);
	assert_int_equal(store_key_lookup(f->s, NULL, ws, &admin, &e), -1);
	assert_int_equal(e.code, ERR_UNAUTHORIZED);

	/* Keys for a workspace that does not exist, or "". */
	char other[64];
	assert_int_equal(store_key_create(f->s, "ws-ffffffffffffffff", other, &e), -1);
	assert_int_equal(e.code, ERR_NOT_FOUND);
	assert_int_equal(store_key_create(f->s, "", other, &e), -1);
	assert_int_equal(e.code, ERR_INVALID);

	if (f->pg) {
		/* The plaintext is in no column of any key's row; the check can
		 * see what is there (the prefix shown to the admin). */
		char sql[256];
		snprintf(sql, sizeof sql,
			 "SELECT COUNT(*) FROM api_keys k WHERE position('%.11s' in"
			 " row_to_json(k)::text) > 0",
			 key);
		assert_int_equal(fixture_sql_int(f, sql), 1);
		snprintf(sql, sizeof sql,
			 "SELECT COUNT(*) FROM api_keys k WHERE position('%s' in"
			 " row_to_json(k)::text) > 0 OR position('%s' in row_to_json(k)::text) > 0",
			 key + 3, admin_key + 3);
		assert_int_equal(fixture_sql_int(f, sql), 0);
		fixture_reopen(f);
	} else {
		/* The plaintext is in neither the database nor its WAL, while
		 * open and after close (checkpointed). */
		char wal[600];
		snprintf(wal, sizeof wal, "%s-wal", f->where);
		assert_true(file_contains(wal, w.id)); /* the check can see what is there */
		assert_false(file_contains(wal, key + 3));
		assert_false(file_contains(f->where, key + 3));
		assert_false(file_contains(wal, admin_key + 3));
		fixture_reopen(f);
		assert_int_equal(store_key_lookup(f->s, key, ws, &admin, &e), 0);
		assert_string_equal(ws, w.id);
		store_close(f->s);
		f->s = NULL;
		assert_true(file_contains(f->where, w.id));
		assert_false(file_contains(f->where, key + 3));
		assert_false(file_contains(f->where, admin_key + 3));
		struct stat st;
		assert_int_equal(stat(f->where, &st), 0);
		assert_int_equal(st.st_mode & 0777, 0600);
		fixture_reopen(f);
	}

	/* Revocation: twice is fine; a never-created key is not found. */
	assert_int_equal(store_key_revoke(f->s, key, &e), 0);
	assert_int_equal(store_key_revoke(f->s, key, &e), 0);
	assert_int_equal(store_key_lookup(f->s, key, ws, &admin, &e), -1);
	assert_int_equal(e.code, ERR_UNAUTHORIZED);
	assert_int_equal(store_key_lookup(f->s, admin_key, ws, &admin, &e), 0);
	assert_int_equal(store_key_revoke(f->s, wrong, &e), -1);
	assert_int_equal(e.code, ERR_NOT_FOUND);
}

/* ---- computers ---------------------------------------------------------- */

/* The state names are the database's and the API's: every state has one,
 * parse is its inverse, and nothing else parses. */
static void test_computer_state_names(void **state)
{
	(void)state;
	static const char *const names[] = {"provisioning", "running",	"stopping", "stopped",
					    "starting",	    "deleting", "deleted",  "error",
					    "offline",	    "lost"};
	for (int i = 0; i < COMPUTER_STATES; i++) {
		enum computer_state s;
		assert_string_equal(computer_state_name((enum computer_state)i), names[i]);
		assert_int_equal(computer_state_parse(names[i], &s), 0);
		assert_int_equal(s, i);
	}
	enum computer_state s = COMPUTER_RUNNING;
	assert_int_equal(computer_state_parse("Running", &s), -1);
	assert_int_equal(computer_state_parse("", &s), -1);
	assert_int_equal(computer_state_parse(NULL, &s), -1);
	assert_string_equal(computer_state_name((enum computer_state)COMPUTER_STATES), "?");
}

static void test_computer_roundtrip(void **state)
{
	struct fixture *f = *state;
	struct err e = {0};
	struct store_workspace w;
	make_workspace(f->s, "acme", &w);

	struct store_computer c;
	memset(&c, 0, sizeof c);
	snprintf(c.workspace, sizeof c.workspace, "%s", w.id);
	snprintf(c.kind, sizeof c.kind, "desktop");
	snprintf(c.size, sizeof c.size, "medium");
	snprintf(c.isolation, sizeof c.isolation, "container");
	c.state = COMPUTER_PROVISIONING;
	snprintf(c.external_workspace_id, sizeof c.external_workspace_id, "tenant-42");
	snprintf(c.session_id, sizeof c.session_id, "sess-1");
	snprintf(c.envd_token, sizeof c.envd_token, "tok-abc");
	snprintf(c.accel, sizeof c.accel, "kvm");
	c.width = 1920;
	c.height = 1080;
	c.idle_timeout_s = 300;
	c.metadata = json_pack("{s:s, s:{s:[i,i,f]}, s:b, s:n}", "owner", "Zoë \u2603", "nested",
			       "list", 1, 2, 3.5, "flag", 1, "nothing");
	assert_int_equal(store_computer_insert(f->s, &c, &e), 0);
	assert_int_equal(strncmp(c.id, "c-", 2), 0);
	assert_true(is_hex(c.id + 2, 16));
	assert_true(c.created_ms > 0);
	assert_int_equal(c.updated_ms, c.created_ms);
	assert_int_equal(c.last_activity_ms, c.created_ms);
	assert_true(json_is_object(c.driver_state)); /* {} filled in */

	struct store_computer g;
	assert_int_equal(store_computer_get(f->s, c.id, NULL, &g, &e), 0);
	assert_string_equal(g.id, c.id);
	assert_string_equal(g.workspace, w.id);
	assert_string_equal(g.kind, "desktop");
	assert_string_equal(g.size, "medium");
	assert_string_equal(g.isolation, "container");
	assert_int_equal(g.state, COMPUTER_PROVISIONING);
	assert_string_equal(g.error, "");
	assert_string_equal(g.external_workspace_id, "tenant-42");
	assert_string_equal(g.session_id, "sess-1");
	assert_string_equal(g.envd_token, "tok-abc");
	assert_string_equal(g.accel, "kvm");
	assert_int_equal(g.width, 1920);
	assert_int_equal(g.height, 1080);
	assert_int_equal(g.idle_timeout_s, 300);
	assert_int_equal(g.created_ms, c.created_ms);
	assert_int_equal(g.deleted_ms, 0);
	assert_true(json_equal(g.metadata, c.metadata));
	assert_true(json_is_object(g.driver_state));
	assert_int_equal(json_object_size(g.driver_state), 0);
	store_computer_clear(&g);

	/* Update every column; driver_state round trip. */
	json_object_set_new(c.driver_state, "pid", json_integer(4242));
	json_object_set_new(c.driver_state, "cgroup", json_string("/sys/fs/cgroup/cubicle/x"));
	c.state = COMPUTER_RUNNING;
	snprintf(c.size, sizeof c.size, "large");
	c.width = 1024;
	json_decref(c.metadata);
	c.metadata = NULL; /* stored as {} */
	assert_int_equal(store_computer_update(f->s, &c, &e), 0);
	assert_true(c.updated_ms >= c.created_ms);
	assert_int_equal(store_computer_get(f->s, c.id, w.id, &g, &e), 0);
	assert_int_equal(g.state, COMPUTER_RUNNING);
	assert_string_equal(g.size, "large");
	assert_int_equal(g.width, 1024);
	assert_int_equal(json_integer_value(json_object_get(g.driver_state, "pid")), 4242);
	assert_true(json_equal(g.driver_state, c.driver_state));
	assert_true(json_is_object(g.metadata));
	assert_int_equal(json_object_size(g.metadata), 0);
	assert_int_equal(g.created_ms, c.created_ms);
	store_computer_clear(&g);

	/* set_state with a reason; deleted sets deleted_ms once. */
	assert_int_equal(store_computer_set_state(f->s, c.id, "error", "envd did not start", &e),
			 0);
	assert_int_equal(store_computer_get(f->s, c.id, NULL, &g, &e), 0);
	assert_int_equal(g.state, COMPUTER_ERROR);
	assert_string_equal(g.error, "envd did not start");
	assert_int_equal(json_integer_value(json_object_get(g.driver_state, "pid")), 4242);
	store_computer_clear(&g);
	assert_int_equal(store_computer_set_state(f->s, c.id, "deleted", NULL, &e), 0);
	assert_int_equal(store_computer_get(f->s, c.id, NULL, &g, &e), 0);
	assert_int_equal(g.state, COMPUTER_DELETED);
	assert_string_equal(g.error, "");
	assert_true(g.deleted_ms > 0);
	store_computer_clear(&g);

	/* A too-long error is cut at a character boundary, not refused. */
	char longerr[1200];
	size_t n = 0;
	while (n + 3 < sizeof longerr) {
		memcpy(longerr + n, "\u00e9", 2); /* 2-byte é */
		n += 2;
	}
	longerr[n] = 0;
	assert_int_equal(store_computer_set_state(f->s, c.id, "error", longerr, &e), 0);
	assert_int_equal(store_computer_get(f->s, c.id, NULL, &g, &e), 0);
	assert_int_equal(strlen(g.error), 510);
	store_computer_clear(&g);

	/* Touch moves last activity forward only. */
	assert_int_equal(store_computer_touch(f->s, c.id, c.created_ms + 5000, &e), 0);
	assert_int_equal(store_computer_touch(f->s, c.id, c.created_ms + 1000, &e), 0);
	assert_int_equal(store_computer_get(f->s, c.id, NULL, &g, &e), 0);
	assert_int_equal(g.last_activity_ms, c.created_ms + 5000);
	store_computer_clear(&g);
	assert_int_equal(store_computer_touch(f->s, "c-0000000000000000", 1, &e), -1);
	assert_int_equal(e.code, ERR_NOT_FOUND);

	store_computer_clear(&c);
}

static void test_computer_other_workspace_is_not_found(void **state)
{
	struct fixture *f = *state;
	struct err e = {0}, e_missing = {0};
	struct store_workspace a, b;
	make_workspace(f->s, "a", &a);
	make_workspace(f->s, "b", &b);
	struct store_computer c, g;
	make_computer(f->s, a.id, "sandbox", "xs", "running", &c);

	assert_int_equal(store_computer_get(f->s, c.id, a.id, &g, &e), 0);
	store_computer_clear(&g);
	assert_int_equal(store_computer_get(f->s, c.id, b.id, &g, &e), -1);
	assert_int_equal(e.code, ERR_NOT_FOUND);
	char expect[80];
	snprintf(expect, sizeof expect, "no computer %s", c.id);
	assert_string_equal(e.message, expect);

	/* A missing id of the same shape gives the same error. */
	char missing[40];
	snprintf(missing, sizeof missing, "%s", c.id);
	missing[2] = missing[2] == 'a' ? 'b' : 'a';
	assert_int_equal(store_computer_get(f->s, missing, b.id, &g, &e_missing), -1);
	assert_int_equal(e_missing.code, e.code);
	assert_string_equal(e_missing.param, e.param);
	snprintf(expect, sizeof expect, "no computer %s", missing);
	assert_string_equal(e_missing.message, expect);
	store_computer_clear(&c);
}

static void test_computer_list_filters_and_count(void **state)
{
	struct fixture *f = *state;
	struct err e = {0};
	struct store_workspace a, b;
	make_workspace(f->s, "a", &a);
	make_workspace(f->s, "b", &b);
	struct store_computer c[6];
	make_computer(f->s, a.id, "desktop", "small", "running", &c[0]);
	make_computer(f->s, a.id, "sandbox", "md", "stopped", &c[1]);
	make_computer(f->s, a.id, "sandbox", "xs", "deleted", &c[2]);
	make_computer(f->s, b.id, "desktop", "large", "provisioning", &c[3]);
	make_computer(f->s, a.id, "sandbox", "sm", "stopping", &c[4]);
	make_computer(f->s, a.id, "desktop", "small", "error", &c[5]);

	struct store_computer *list = NULL;
	size_t n = 0;
	/* NULL filter: everything but deleted, oldest first. */
	assert_int_equal(store_computer_list(f->s, NULL, &list, &n, &e), 0);
	assert_int_equal(n, 5);
	const int all[] = {0, 1, 3, 4, 5};
	for (size_t i = 0; i < n; i++) {
		assert_string_equal(list[i].id, c[all[i]].id);
		store_computer_clear(&list[i]);
	}
	free(list);

	struct {
		struct store_filter f;
		int expect[6];
		size_t n;
	} cases[] = {
	    {{.workspace = a.id}, {0, 1, 4, 5}, 4},
	    {{.workspace = a.id, .include_deleted = true}, {0, 1, 2, 4, 5}, 5},
	    {{.workspace = a.id, .kind = "sandbox"}, {1, 4}, 2},
	    {{.state = "deleted"}, {2}, 1},
	    {{.state = "running"}, {0}, 1},
	    {{.workspace = b.id, .state = "running"}, {0}, 0},
	    {{.kind = "desktop", .include_deleted = true}, {0, 3, 5}, 3},
	    {{.workspace = "ws-nobody"}, {0}, 0},
	};
	for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
		assert_int_equal(store_computer_list(f->s, &cases[k].f, &list, &n, &e), 0);
		assert_int_equal(n, cases[k].n);
		for (size_t i = 0; i < n; i++) {
			assert_string_equal(list[i].id, c[cases[k].expect[i]].id);
			store_computer_clear(&list[i]);
		}
		free(list);
	}
	struct store_filter bad = {.state = "sleeping"};
	assert_int_equal(store_computer_list(f->s, &bad, &list, &n, &e), -1);
	assert_int_equal(e.code, ERR_INVALID);
	assert_string_equal(e.param, "state");

	int running = -1;
	assert_int_equal(store_computer_count_running(f->s, a.id, &running, &e), 0);
	assert_int_equal(running, 2); /* running + stopping */
	assert_int_equal(store_computer_count_running(f->s, b.id, &running, &e), 0);
	assert_int_equal(running, 1); /* provisioning */
	assert_int_equal(store_computer_set_state(f->s, c[1].id, "starting", NULL, &e), 0);
	assert_int_equal(store_computer_count_running(f->s, a.id, &running, &e), 0);
	assert_int_equal(running, 3);
	assert_int_equal(store_computer_count_running(f->s, NULL, &running, &e), 0);
	assert_int_equal(running, 4);
	for (int i = 0; i < 6; i++)
		store_computer_clear(&c[i]);
}

static void test_computer_bad_input(void **state)
{
	struct fixture *f = *state;
	struct err e = {0};
	struct store_workspace w;
	make_workspace(f->s, "a", &w);
	struct store_computer c;
	memset(&c, 0, sizeof c);
	snprintf(c.workspace, sizeof c.workspace, "%s", w.id);
	snprintf(c.kind, sizeof c.kind, "sandbox");
	snprintf(c.size, sizeof c.size, "huge");
	snprintf(c.isolation, sizeof c.isolation, "container");
	c.state = COMPUTER_PROVISIONING;
	assert_int_equal(store_computer_insert(f->s, &c, &e), -1);
	assert_int_equal(e.code, ERR_INVALID);
	assert_string_equal(e.param, "size");
	snprintf(c.size, sizeof c.size, "xs");
	c.state = (enum computer_state)COMPUTER_STATES; /* not a state */
	assert_int_equal(store_computer_insert(f->s, &c, &e), -1);
	assert_string_equal(e.param, "state");
	c.state = COMPUTER_PROVISIONING;
	snprintf(c.kind, sizeof c.kind, "toaster");
	assert_int_equal(store_computer_insert(f->s, &c, &e), -1);
	assert_string_equal(e.param, "kind");
	snprintf(c.kind, sizeof c.kind, "sandbox");
	snprintf(c.workspace, sizeof c.workspace, "ws-ffffffffffffffff");
	assert_int_equal(store_computer_insert(f->s, &c, &e), -1);
	assert_int_equal(e.code, ERR_INVALID);
	assert_string_equal(e.param, "workspace");
	assert_non_null(strstr(e.message, "ws-ffffffffffffffff"));
	snprintf(c.workspace, sizeof c.workspace, "%s", w.id);
	c.metadata = json_array();
	assert_int_equal(store_computer_insert(f->s, &c, &e), -1);
	assert_string_equal(e.param, "metadata");
	json_decref(c.metadata);
	c.metadata = NULL;
	assert_int_equal(store_computer_insert(f->s, &c, &e), 0);

	/* Update of an unknown id, set_state with a bad state. */
	struct store_computer ghost = c;
	snprintf(ghost.id, sizeof ghost.id, "c-0000000000000000");
	assert_int_equal(store_computer_update(f->s, &ghost, &e), -1);
	assert_int_equal(e.code, ERR_NOT_FOUND);
	assert_string_equal(e.message, "no computer c-0000000000000000");
	snprintf(ghost.workspace, sizeof ghost.workspace, "ws-nobody");
	snprintf(ghost.id, sizeof ghost.id, "%s", c.id);
	assert_int_equal(store_computer_update(f->s, &ghost, &e), -1);
	assert_int_equal(e.code, ERR_INVALID);
	assert_string_equal(e.param, "workspace");
	assert_int_equal(store_computer_set_state(f->s, c.id, "asleep", NULL, &e), -1);
	assert_string_equal(e.param, "state");
	assert_int_equal(store_computer_set_state(f->s, "c-0000000000000000", "running", NULL, &e),
			 -1);
	assert_int_equal(e.code, ERR_NOT_FOUND);
	assert_int_equal(store_computer_get(f->s, "", NULL, &ghost, &e), -1);
	assert_int_equal(e.code, ERR_INVALID);
	store_computer_clear(&c);
}

/* ---- usage ------------------------------------------------------------ */

static json_t *usage_computer(json_t *usage, const char *id)
{
	size_t i;
	json_t *c;
	json_array_foreach(json_object_get(usage, "computers"), i, c)
	{
		if (strcmp(json_string_value(json_object_get(c, "id")), id) == 0)
			return c;
	}
	return NULL;
}

static json_int_t jint(json_t *o, const char *k)
{
	json_t *v = json_object_get(o, k);
	assert_true(json_is_integer(v));
	return json_integer_value(v);
}

static double jreal(json_t *o, const char *k)
{
	json_t *v = json_object_get(o, k);
	assert_true(json_is_real(v));
	return json_real_value(v);
}

static void test_size_multiplier(void **state)
{
	(void)state;
	const char *names[] = {"xs", "sm", "md", "lg", "xl", "small", "medium", "large"};
	const int mult[] = {1, 2, 4, 8, 16, 4, 8, 16};
	for (int i = 0; i < 8; i++)
		assert_int_equal(store_size_multiplier(names[i]), mult[i]);
	assert_int_equal(store_size_multiplier("XS"), 0);
	assert_int_equal(store_size_multiplier(""), 0);
	assert_int_equal(store_size_multiplier(NULL), 0);
}

static void test_usage_arithmetic(void **state)
{
	struct fixture *f = *state;
	struct err e = {0};
	struct store_workspace w, other;
	make_workspace(f->s, "acme", &w);
	make_workspace(f->s, "globex", &other);
	struct store_computer md, small, elsewhere;
	make_computer(f->s, w.id, "sandbox", "md", "running", &md);
	make_computer(f->s, w.id, "desktop", "small", "running", &small);
	make_computer(f->s, other.id, "sandbox", "xl", "running", &elsewhere);
	const int64_t t0 = 1700000000000LL;

	/* md: running 1500 ms, stopped 2500 ms, then nothing. */
	assert_int_equal(store_usage_switch(f->s, md.id, w.id, "md", "running", t0, &e), 0);
	assert_int_equal(store_usage_tick(f->s, t0 + 1000, &e), 1); /* md's segment */
	assert_int_equal(store_usage_switch(f->s, md.id, w.id, "md", "stopped", t0 + 1500, &e), 0);
	assert_int_equal(store_usage_switch(f->s, md.id, w.id, "md", NULL, t0 + 4000, &e), 0);
	/* small: running 10 s from t0 + 2000 (open, ticked). */
	assert_int_equal(
	    store_usage_switch(f->s, small.id, w.id, "small", "running", t0 + 2000, &e), 0);
	/* The other workspace: xl running 1 s. */
	assert_int_equal(store_usage_switch(f->s, elsewhere.id, other.id, "xl", "running", t0, &e),
			 0);
	assert_int_equal(store_usage_tick(f->s, t0 + 12000, &e), 2); /* small, elsewhere */
	assert_int_equal(
	    store_usage_switch(f->s, elsewhere.id, other.id, "xl", NULL, t0 + 1000, &e), 0);

	struct store_rates rates = {15000, 1000};
	json_t *u = NULL;
	assert_int_equal(store_usage_query(f->s, w.id, t0, t0 + 20000, &rates, &u, &e), 0);
	assert_string_equal(json_string_value(json_object_get(u, "workspace")), w.id);
	assert_int_equal(jint(u, "from"), t0);
	assert_int_equal(jint(u, "to"), t0 + 20000);
	assert_int_equal(json_array_size(json_object_get(u, "computers")), 2);
	json_t *m = usage_computer(u, md.id);
	assert_non_null(m);
	assert_string_equal(json_string_value(json_object_get(m, "kind")), "sandbox");
	assert_string_equal(json_string_value(json_object_get(m, "size")), "md");
	assert_true(jreal(m, "running_seconds") == 1.5);
	assert_true(jreal(m, "stopped_seconds") == 2.5);
	/* 1500 ms * 15000 * 4 / 1000 = 90000; 2500 ms * 1000 / 1000 = 2500 */
	assert_int_equal(jint(m, "cost_nanodollars"), 90000 + 2500);
	json_t *sm = usage_computer(u, small.id);
	assert_string_equal(json_string_value(json_object_get(sm, "kind")), "desktop");
	assert_true(jreal(sm, "running_seconds") == 10.0);
	assert_int_equal(jint(sm, "cost_nanodollars"), 10000LL * 15000 * 4 / 1000); /* 600000 */
	json_t *total = json_object_get(u, "total");
	assert_true(jreal(total, "running_seconds") == 11.5);
	assert_true(jreal(total, "stopped_seconds") == 2.5);
	assert_int_equal(jint(total, "cost_nanodollars"), 692500);
	assert_true(jreal(total, "cost_usd") == 692500 / 1e9);
	json_decref(u);

	/* Clipping: [t0 + 1000, t0 + 3000) sees 500 ms running + 1500 ms
	 * stopped of md, and 1000 ms of small. Default rates (stopped 0). */
	assert_int_equal(store_usage_query(f->s, w.id, t0 + 1000, t0 + 3000, NULL, &u, &e), 0);
	m = usage_computer(u, md.id);
	assert_true(jreal(m, "running_seconds") == 0.5);
	assert_true(jreal(m, "stopped_seconds") == 1.5);
	assert_int_equal(jint(m, "cost_nanodollars"), 500LL * 15000 * 4 / 1000); /* 30000 */
	sm = usage_computer(u, small.id);
	assert_true(jreal(sm, "running_seconds") == 1.0);
	assert_int_equal(jint(sm, "cost_nanodollars"), 60000);
	assert_int_equal(jint(json_object_get(u, "total"), "cost_nanodollars"), 90000);
	json_decref(u);

	/* All workspaces; the xl computer bills 1000 ms * 15000 * 16 / 1000. */
	assert_int_equal(store_usage_query(f->s, NULL, t0, t0 + 20000, NULL, &u, &e), 0);
	assert_true(json_is_null(json_object_get(u, "workspace")));
	assert_int_equal(json_array_size(json_object_get(u, "computers")), 3);
	json_t *xl = usage_computer(u, elsewhere.id);
	assert_int_equal(jint(xl, "cost_nanodollars"), 240000);
	assert_string_equal(json_string_value(json_object_get(xl, "workspace")), other.id);
	assert_int_equal(jint(json_object_get(u, "total"), "cost_nanodollars"),
			 90000 + 600000 + 240000);
	/* Oldest computer first. */
	assert_string_equal(json_string_value(json_object_get(
				json_array_get(json_object_get(u, "computers"), 0), "id")),
			    md.id);
	json_decref(u);

	/* A window with nothing in it, and a window before everything. */
	assert_int_equal(store_usage_query(f->s, w.id, t0 - 5000, t0, NULL, &u, &e), 0);
	assert_int_equal(json_array_size(json_object_get(u, "computers")), 0);
	assert_int_equal(jint(json_object_get(u, "total"), "cost_nanodollars"), 0);
	assert_true(jreal(json_object_get(u, "total"), "cost_usd") == 0.0);
	json_decref(u);

	/* Deleted computers stay in the usage. */
	assert_int_equal(store_computer_set_state(f->s, md.id, "deleted", NULL, &e), 0);
	assert_int_equal(store_usage_query(f->s, w.id, t0, t0 + 20000, NULL, &u, &e), 0);
	assert_non_null(usage_computer(u, md.id));
	json_decref(u);

	/* Bad windows and rates. */
	assert_int_equal(store_usage_query(f->s, w.id, t0 + 1, t0, NULL, &u, &e), -1);
	assert_int_equal(e.code, ERR_INVALID);
	assert_string_equal(e.param, "from");
	struct store_rates neg = {-1, 0};
	assert_int_equal(store_usage_query(f->s, w.id, t0, t0 + 1, &neg, &u, &e), -1);
	assert_string_equal(e.param, "rates");
	struct store_rates huge = {INT64_MAX / 2, 0};
	assert_int_equal(store_usage_query(f->s, w.id, t0, t0 + 20000, &huge, &u, &e), -1);
	assert_string_equal(e.param, "rates");

	store_computer_clear(&md);
	store_computer_clear(&small);
	store_computer_clear(&elsewhere);
}

/* Cost is floored per segment: two 1 ms segments at 1500 nd/s cost 1 + 1,
 * not 3; a 1 ms segment at 999 nd/s costs 0. */
static void test_usage_rounding_is_floor_per_segment(void **state)
{
	struct fixture *f = *state;
	struct err e = {0};
	struct store_workspace w;
	make_workspace(f->s, "acme", &w);
	struct store_computer c;
	make_computer(f->s, w.id, "sandbox", "xs", "running", &c);
	const int64_t t0 = 1700000000000LL;
	assert_int_equal(store_usage_switch(f->s, c.id, w.id, "xs", "running", t0, &e), 0);
	assert_int_equal(store_usage_switch(f->s, c.id, w.id, "xs", "stopped", t0 + 1, &e), 0);
	assert_int_equal(store_usage_switch(f->s, c.id, w.id, "xs", "running", t0 + 2, &e), 0);
	assert_int_equal(store_usage_switch(f->s, c.id, w.id, "xs", NULL, t0 + 3, &e), 0);
	struct store_rates r = {1500, 999};
	json_t *u = NULL;
	assert_int_equal(store_usage_query(f->s, NULL, t0, t0 + 10, &r, &u, &e), 0);
	json_t *m = usage_computer(u, c.id);
	assert_true(jreal(m, "running_seconds") == 0.002);
	assert_true(jreal(m, "stopped_seconds") == 0.001);
	assert_int_equal(jint(m, "cost_nanodollars"), 2);
	json_decref(u);
	store_computer_clear(&c);
}

static void test_usage_switch_and_open_segments(void **state)
{
	struct fixture *f = *state;
	struct err e = {0};
	struct store_workspace w;
	make_workspace(f->s, "acme", &w);
	struct store_computer a, b;
	make_computer(f->s, w.id, "sandbox", "xs", "running", &a);
	make_computer(f->s, w.id, "sandbox", "sm", "stopped", &b);
	const int64_t t0 = 1700000000000LL;

	struct store_open_segment *segs = NULL;
	size_t n = 99;
	assert_int_equal(store_usage_open_segments(f->s, &segs, &n, &e), 0);
	assert_int_equal(n, 0);
	free(segs);

	assert_int_equal(store_usage_switch(f->s, a.id, w.id, "xs", "running", t0, &e), 0);
	assert_int_equal(store_usage_switch(f->s, b.id, w.id, "sm", "stopped", t0 + 100, &e), 0);
	/* Switching to the same state again just starts a new segment. */
	assert_int_equal(store_usage_switch(f->s, a.id, w.id, "xs", "running", t0 + 50, &e), 0);
	assert_int_equal(store_usage_tick(f->s, t0 + 1000, &e), 2); /* rows it moved */
	/* A tick never moves an end backwards (and says it moved nothing). */
	assert_int_equal(store_usage_tick(f->s, t0 + 900, &e), 0);

	assert_int_equal(store_usage_open_segments(f->s, &segs, &n, &e), 0);
	assert_int_equal(n, 2);
	assert_string_equal(segs[0].computer, a.id);
	assert_int_equal(segs[0].start_ms, t0 + 50);
	assert_int_equal(segs[0].end_ms, t0 + 1000);
	assert_string_equal(segs[0].rate_state, "running");
	assert_string_equal(segs[1].computer, b.id);
	assert_int_equal(segs[1].start_ms, t0 + 100);
	assert_int_equal(segs[1].end_ms, t0 + 1000);
	assert_string_equal(segs[1].rate_state, "stopped");
	free(segs);

	/* Closing at an earlier time than the last tick (the recorded end after
	 * a restart) sets the end there; closing twice is a no-op. */
	assert_int_equal(store_usage_switch(f->s, a.id, NULL, NULL, NULL, t0 + 800, &e), 0);
	assert_int_equal(store_usage_switch(f->s, a.id, NULL, NULL, NULL, t0 + 900, &e), 0);
	/* A switch whose time is before the segment's start clamps: no
	 * overlap, no negative length. */
	assert_int_equal(store_usage_switch(f->s, b.id, w.id, "sm", "running", t0 + 10, &e), 0);
	assert_int_equal(store_usage_open_segments(f->s, &segs, &n, &e), 0);
	assert_int_equal(n, 1);
	assert_string_equal(segs[0].computer, b.id);
	assert_int_equal(segs[0].start_ms, t0 + 100);
	free(segs);

	json_t *u = NULL;
	assert_int_equal(store_usage_query(f->s, w.id, t0, t0 + 5000, NULL, &u, &e), 0);
	json_t *ua = usage_computer(u, a.id);
	assert_true(jreal(ua, "running_seconds") == 0.8); /* 0..50 and 50..800 */
	assert_int_equal(jint(ua, "cost_nanodollars"), 50 * 15 + 750 * 15);
	json_t *ub = usage_computer(u, b.id);
	assert_true(jreal(ub, "stopped_seconds") == 0.0);
	assert_true(jreal(ub, "running_seconds") == 0.0);
	json_decref(u);

	/* Bad input. */
	assert_int_equal(store_usage_switch(f->s, a.id, w.id, "xs", "paused", t0, &e), -1);
	assert_string_equal(e.param, "rate_state");
	assert_int_equal(store_usage_switch(f->s, a.id, w.id, "jumbo", "running", t0, &e), -1);
	assert_string_equal(e.param, "size");
	assert_int_equal(store_usage_switch(f->s, a.id, NULL, "xs", "running", t0, &e), -1);
	assert_string_equal(e.param, "workspace");
	assert_int_equal(store_usage_switch(f->s, "", w.id, "xs", "running", t0, &e), -1);
	assert_string_equal(e.param, "computer");
	assert_int_equal(
	    store_usage_switch(f->s, "c-0000000000000000", w.id, "xs", "running", t0, &e), -1);
	assert_int_equal(e.code, ERR_INVALID);
	assert_string_equal(e.param, "computer");
	/* The failed switch rolled back: still only b's segment is open. */
	assert_int_equal(store_usage_open_segments(f->s, &segs, &n, &e), 0);
	assert_int_equal(n, 1);
	free(segs);
	store_computer_clear(&a);
	store_computer_clear(&b);
}

struct lookup_arg {
	struct store *s;
	const char *key;
	int rc;
	char ws[40];
};

static void *lookup_thread(void *p)
{
	struct lookup_arg *a = p;
	struct err e = {0};
	bool admin;
	a->rc = store_key_lookup(a->s, a->key, a->ws, &admin, &e);
	return NULL;
}

/* The API checks keys on its event loop: a lookup must answer while the
 * store is busy (here: its lock held, as by a long statement), and a key
 * revoked behind the store's back stops working once the table is
 * invalidated. */
static void test_key_lookup_never_waits(void **state)
{
	struct fixture *f = *state;
	struct err e = {0};
	struct store_workspace w;
	make_workspace(f->s, "acme", &w);
	char key[64];
	assert_int_equal(store_key_create(f->s, w.id, key, &e), 0);

	store_lock(f->s);
	struct lookup_arg a = {.s = f->s, .key = key, .rc = -2};
	pthread_t t;
	assert_int_equal(pthread_create(&t, NULL, lookup_thread, &a), 0);
	struct timespec until;
	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += 30; /* a deadlock's bound, not a timing */
	int joined = pthread_timedjoin_np(t, NULL, &until);
	store_unlock(f->s);
	if (joined != 0)
		pthread_join(t, NULL);
	assert_int_equal(joined, 0);
	assert_int_equal(a.rc, 0);
	assert_string_equal(a.ws, w.id);

	/* Another connection revokes it, behind the store's back: invalidating
	 * the table applies it (PostgreSQL's listener would too: see
	 * test_revocation_reaches_other_host). */
	assert_int_equal(fixture_sql(f, "UPDATE api_keys SET revoked_ms = 1"), 0);
	store_keys_invalidate(f->s);
	char ws[40];
	bool admin;
	assert_int_equal(store_key_lookup(f->s, key, ws, &admin, &e), -1);
	assert_int_equal(e.code, ERR_UNAUTHORIZED);
}

/* ---- durability --------------------------------------------------------- */

static void test_reopen_finds_everything(void **state)
{
	struct fixture *f = *state;
	struct err e = {0};
	struct store_workspace w;
	make_workspace(f->s, "acme", &w);
	char key[64];
	assert_int_equal(store_key_create(f->s, w.id, key, &e), 0);
	struct store_computer c;
	make_computer(f->s, w.id, "desktop", "small", "running", &c);
	json_object_set_new(c.driver_state, "pid", json_integer(77));
	assert_int_equal(store_computer_update(f->s, &c, &e), 0);
	const int64_t t0 = 1700000000000LL;
	assert_int_equal(store_usage_switch(f->s, c.id, w.id, "small", "running", t0, &e), 0);
	assert_int_equal(store_usage_tick(f->s, t0 + 3000, &e), 1);

	fixture_reopen(f);
	struct store_workspace gw;
	assert_int_equal(store_workspace_get(f->s, w.id, &gw, &e), 0);
	char ws[40];
	bool admin;
	assert_int_equal(store_key_lookup(f->s, key, ws, &admin, &e), 0);
	assert_string_equal(ws, w.id);
	struct store_computer g;
	assert_int_equal(store_computer_get(f->s, c.id, w.id, &g, &e), 0);
	assert_int_equal(json_integer_value(json_object_get(g.driver_state, "pid")), 77);
	store_computer_clear(&g);
	struct store_open_segment *segs;
	size_t n;
	assert_int_equal(store_usage_open_segments(f->s, &segs, &n, &e), 0);
	assert_int_equal(n, 1);
	assert_int_equal(segs[0].end_ms, t0 + 3000);
	free(segs);

	/* The schema version is recorded (one per migration). */
	assert_true(fixture_sql_int(f, f->pg ? "SELECT version FROM cubicle_schema"
					     : "PRAGMA user_version") >= 1);
	store_computer_clear(&c);
}

/* A child process opens the store, ticks, tells the parent, and is killed
 * with SIGKILL without closing anything: the parent finds the tick. */
static void test_kill9_keeps_last_tick(void **state)
{
	struct fixture *f = *state;
	struct err e = {0};
	struct store_workspace w;
	make_workspace(f->s, "acme", &w);
	struct store_computer c;
	make_computer(f->s, w.id, "sandbox", "md", "running", &c);
	const int64_t t0 = 1700000000000LL;
	assert_int_equal(store_usage_switch(f->s, c.id, w.id, "md", "running", t0, &e), 0);
	store_close(f->s); /* no connection across fork */
	f->s = NULL;

	int pipefd[2];
	assert_int_equal(pipe(pipefd), 0);
	fflush(NULL);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		close(pipefd[0]);
		struct err ce = {0};
		struct store *cs = store_open(f->where, &ce);
		int ok = cs != NULL;
		for (int i = 1; ok && i <= 5; i++)
			ok = store_usage_tick(cs, t0 + i * 1000, &ce) == 1;
		if (ok)
			ok = store_computer_touch(cs, c.id, c.created_ms + 5000, &ce) == 0;
		char r = ok ? 'y' : 'n';
		if (write(pipefd[1], &r, 1) != 1)
			_exit(3);
		for (;;)
			pause(); /* wait for SIGKILL with the connection open */
	}
	close(pipefd[1]);
	char r = 0;
	assert_int_equal(read(pipefd[0], &r, 1), 1);
	close(pipefd[0]);
	assert_int_equal(r, 'y');
	assert_int_equal(kill(pid, SIGKILL), 0);
	int status;
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);

	f->s = store_open(f->where, &e);
	assert_non_null(f->s);
	struct store_open_segment *segs;
	size_t n;
	assert_int_equal(store_usage_open_segments(f->s, &segs, &n, &e), 0);
	assert_int_equal(n, 1);
	assert_int_equal(segs[0].end_ms, t0 + 5000);
	free(segs);
	struct store_computer g;
	assert_int_equal(store_computer_get(f->s, c.id, NULL, &g, &e), 0);
	assert_int_equal(g.last_activity_ms, c.created_ms + 5000);
	store_computer_clear(&g);
	/* The core then closes the computer's segment at its last tick. */
	assert_int_equal(store_usage_switch(f->s, c.id, NULL, NULL, NULL, t0 + 5000, &e), 0);
	json_t *u = NULL;
	assert_int_equal(store_usage_query(f->s, NULL, t0, t0 + 60000, NULL, &u, &e), 0);
	assert_int_equal(jint(json_object_get(u, "total"), "cost_nanodollars"),
			 5000LL * 15000 * 4 / 1000);
	json_decref(u);
	store_computer_clear(&c);
}

/* ---- store_computer_commit: one transaction ------------------------------- */

/* The computer's one open segment's rate state ("" when none is open). */
static void open_rate(struct store *s, const char *id, char out[16])
{
	struct err e = {0};
	struct store_open_segment *segs = NULL;
	size_t n = 0;
	out[0] = 0;
	if (store_usage_open_segments(s, &segs, &n, &e))
		fail_msg("open_segments: %s", e.message);
	for (size_t i = 0; i < n; i++)
		if (strcmp(segs[i].computer, id) == 0) {
			if (out[0])
				fail_msg("two open segments for %s", id);
			snprintf(out, 16, "%s", segs[i].rate_state);
		}
	free(segs);
}

static void set_state(struct store_computer *c, const char *state)
{
	assert_int_equal(computer_state_parse(state, &c->state), 0);
}

/* A state change and its usage switch land together, or neither does. */
static void test_commit_state_and_usage_together(void **state)
{
	struct fixture *f = *state;
	struct err e = {0};
	struct store_workspace w, other;
	make_workspace(f->s, "acme", &w);
	make_workspace(f->s, "other", &other);
	struct store_computer c, busy;
	make_computer(f->s, w.id, "sandbox", "md", "running", &c);
	make_computer(f->s, w.id, "sandbox", "xs", "running", &busy);
	const int64_t t0 = 1700000000000LL;
	assert_int_equal(store_usage_switch(f->s, c.id, w.id, "md", "running", t0, &e), 0);

	/* stop: "stopping" and the stopped rate, at one instant */
	set_state(&c, "stopping");
	struct store_commit stop = {.bill = true, .rate_state = "stopped", .at_ms = t0 + 1000};
	assert_int_equal(store_computer_commit(f->s, &c, &stop, &e), 0);
	struct store_computer g;
	assert_int_equal(store_computer_get(f->s, c.id, NULL, &g, &e), 0);
	assert_int_equal(g.state, COMPUTER_STOPPING);
	store_computer_clear(&g);
	char rate[16];
	open_rate(f->s, c.id, rate);
	assert_string_equal(rate, "stopped");

	/* A refused limit writes neither the state nor the switch, and leaves c as it was. */
	set_state(&c, "starting");
	struct store_commit start = {
	    .limit = 1, .bill = true, .rate_state = "running", .at_ms = t0 + 2000};
	assert_int_equal(store_computer_commit(f->s, &c, &start, &e), -1);
	assert_int_equal(e.code, ERR_LIMIT);
	assert_non_null(strstr(e.message, "its limit"));
	assert_int_equal(store_computer_get(f->s, c.id, NULL, &g, &e), 0);
	assert_int_equal(g.state, COMPUTER_STOPPING);
	store_computer_clear(&g);
	open_rate(f->s, c.id, rate);
	assert_string_equal(rate, "stopped");
	/* The computer itself is not counted: a limit of 2 holds busy and c. */
	start.limit = 2;
	assert_int_equal(store_computer_commit(f->s, &c, &start, &e), 0);
	open_rate(f->s, c.id, rate);
	assert_string_equal(rate, "running");

	/* A bad switch refuses the whole write. */
	set_state(&c, "error");
	struct store_commit bad = {.bill = true, .rate_state = "paused", .at_ms = t0 + 3000};
	assert_int_equal(store_computer_commit(f->s, &c, &bad, &e), -1);
	assert_string_equal(e.param, "rate_state");
	assert_int_equal(store_computer_get(f->s, c.id, NULL, &g, &e), 0);
	assert_int_equal(g.state, COMPUTER_STARTING);
	store_computer_clear(&g);

	/* A claim: the move to another workspace and its billing there together. */
	set_state(&c, "running");
	snprintf(c.workspace, sizeof c.workspace, "%s", other.id);
	struct store_commit claim = {
	    .limit = 1, .bill = true, .rate_state = "running", .at_ms = t0 + 4000};
	assert_int_equal(store_computer_commit(f->s, &c, &claim, &e), 0);
	/* error ends billing with the state */
	set_state(&c, "error");
	struct store_commit end = {.bill = true, .rate_state = NULL, .at_ms = t0 + 5000};
	assert_int_equal(store_computer_commit(f->s, &c, &end, &e), 0);
	open_rate(f->s, c.id, rate);
	assert_string_equal(rate, "");
	json_t *u = NULL;
	assert_int_equal(store_usage_query(f->s, w.id, t0, t0 + 60000, NULL, &u, &e), 0);
	/* acme: 1 s running (t0..t0+1), stopped t0+1..t0+2, running t0+2..t0+4 */
	assert_true(jreal(usage_computer(u, c.id), "running_seconds") == 3.0);
	assert_true(jreal(usage_computer(u, c.id), "stopped_seconds") == 1.0);
	json_decref(u);
	assert_int_equal(store_usage_query(f->s, other.id, t0, t0 + 60000, NULL, &u, &e), 0);
	assert_true(jreal(usage_computer(u, c.id), "running_seconds") == 1.0);
	json_decref(u);
	store_computer_clear(&c);
	store_computer_clear(&busy);
}

#define RACERS	   8
#define RACE_LIMIT 3

struct racer {
	struct store *s;
	const char *ws;
	pthread_barrier_t *go;
	int rc;
	enum err_code code;
};

static void *racer_run(void *arg)
{
	struct racer *r = arg;
	pthread_barrier_wait(r->go);
	struct store_computer c;
	memset(&c, 0, sizeof c);
	snprintf(c.workspace, sizeof c.workspace, "%s", r->ws);
	snprintf(c.kind, sizeof c.kind, "sandbox");
	snprintf(c.size, sizeof c.size, "xs");
	snprintf(c.isolation, sizeof c.isolation, "container");
	c.state = COMPUTER_PROVISIONING;
	struct store_commit how = {.insert = true, .limit = RACE_LIMIT};
	struct err e = {0};
	r->rc = store_computer_commit(r->s, &c, &how, &e);
	r->code = e.code;
	store_computer_clear(&c);
	return NULL;
}

/* Creates at once from several threads, each on a connection of its own
 * (as several hosts would): exactly the limit get in. */
static void test_commit_limit_under_concurrent_inserts(void **state)
{
	struct fixture *f = *state;
	struct err e = {0};
	struct store_workspace w;
	make_workspace(f->s, "acme", &w);
	struct store_computer stopped;
	make_computer(f->s, w.id, "sandbox", "xs", "stopped", &stopped); /* holds nothing */
	struct racer r[RACERS];
	pthread_t th[RACERS];
	pthread_barrier_t go;
	pthread_barrier_init(&go, NULL, RACERS);
	for (int i = 0; i < RACERS; i++) {
		r[i] = (struct racer){.s = fixture_open_another(f, &e), .ws = w.id, .go = &go};
		assert_non_null(r[i].s);
	}
	for (int i = 0; i < RACERS; i++)
		assert_int_equal(pthread_create(&th[i], NULL, racer_run, &r[i]), 0);
	int ok = 0;
	for (int i = 0; i < RACERS; i++) {
		pthread_join(th[i], NULL);
		store_close(r[i].s);
		if (r[i].rc == 0)
			ok++;
		else
			assert_int_equal(r[i].code, ERR_LIMIT);
	}
	pthread_barrier_destroy(&go);
	assert_int_equal(ok, RACE_LIMIT);
	int n = 0;
	assert_int_equal(store_computer_count_running(f->s, w.id, &n, &e), 0);
	assert_int_equal(n, RACE_LIMIT);
	/* Starting the stopped one would be one too many. */
	set_state(&stopped, "starting");
	struct store_commit start = {.limit = RACE_LIMIT};
	assert_int_equal(store_computer_commit(f->s, &stopped, &start, &e), -1);
	assert_int_equal(e.code, ERR_LIMIT);
	store_computer_clear(&stopped);
}

/* A child commits stop/start pairs (state and usage switch) in a loop and
 * is killed with SIGKILL mid-way: the state found on disk always matches
 * the open segment's rate. */
static void test_kill9_between_state_and_usage(void **state)
{
	struct fixture *f = *state;
	struct err e = {0};
	struct store_workspace w;
	make_workspace(f->s, "acme", &w);
	struct store_computer c;
	make_computer(f->s, w.id, "sandbox", "sm", "running", &c);
	const int64_t t0 = 1700000000000LL;
	assert_int_equal(store_usage_switch(f->s, c.id, w.id, "sm", "running", t0, &e), 0);
	store_close(f->s);
	f->s = NULL;
	for (int round = 0; round < 5; round++) {
		int pipefd[2];
		assert_int_equal(pipe(pipefd), 0);
		fflush(NULL);
		pid_t pid = fork();
		assert_true(pid >= 0);
		if (pid == 0) {
			close(pipefd[0]);
			struct err ce = {0};
			struct store *cs = store_open(f->where, &ce);
			for (int i = 0; cs; i++) {
				bool stop = i % 2 == 0;
				set_state(&c, stop ? "stopping" : "running");
				struct store_commit how = {.bill = true,
							   .rate_state =
							       stop ? "stopped" : "running",
							   .at_ms = t0 + i};
				if (store_computer_commit(cs, &c, &how, &ce))
					_exit(2);
				if (i == 20 && write(pipefd[1], "y", 1) != 1)
					_exit(3);
			}
			_exit(4);
		}
		close(pipefd[1]);
		char r = 0;
		assert_int_equal(read(pipefd[0], &r, 1), 1);
		close(pipefd[0]);
		usleep(1000 * (round * 3));
		assert_int_equal(kill(pid, SIGKILL), 0);
		int status;
		assert_int_equal(waitpid(pid, &status, 0), pid);
		assert_true(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
		struct store *s = store_open(f->where, &e);
		assert_non_null(s);
		struct store_computer g;
		assert_int_equal(store_computer_get(s, c.id, NULL, &g, &e), 0);
		char rate[16];
		open_rate(s, c.id, rate);
		assert_string_equal(rate, g.state == COMPUTER_STOPPING ? "stopped" : "running");
		store_computer_clear(&g);
		store_close(s);
	}
	f->s = store_open(f->where, &e);
	assert_non_null(f->s);
	store_computer_clear(&c);
}

/* The stopped limit: counted in the stop's own transaction (stopping and
 * stopped, the computer itself not counted), per workspace; a workspace's
 * max_stopped is kept and listed. */
static void test_commit_stopped_limit(void **state)
{
	struct fixture *f = *state;
	struct err e = {0};
	struct store_workspace w, other;
	make_workspace(f->s, "acme", &w);
	make_workspace(f->s, "other", &other);
	struct store_computer a, b, c, d;
	make_computer(f->s, w.id, "sandbox", "xs", "stopped", &a);
	make_computer(f->s, w.id, "sandbox", "xs", "stopping", &b);
	make_computer(f->s, w.id, "sandbox", "xs", "running", &c);
	make_computer(f->s, other.id, "sandbox", "xs", "running", &d);
	struct store_commit stop = {.stopped_limit = 2};
	set_state(&c, "stopping");
	assert_int_equal(store_computer_commit(f->s, &c, &stop, &e), -1);
	assert_int_equal(e.code, ERR_LIMIT);
	assert_non_null(strstr(e.message, "max_stopped 2"));
	struct store_computer g;
	assert_int_equal(store_computer_get(f->s, c.id, NULL, &g, &e), 0);
	assert_int_equal(g.state, COMPUTER_RUNNING);
	store_computer_clear(&g);
	stop.stopped_limit = 3;
	assert_int_equal(store_computer_commit(f->s, &c, &stop, &e), 0);
	/* Another workspace counts its own. */
	set_state(&d, "stopping");
	stop.stopped_limit = 1;
	assert_int_equal(store_computer_commit(f->s, &d, &stop, &e), 0);
	/* A computer already stopped does not count against itself. */
	assert_int_equal(store_computer_commit(f->s, &d, &stop, &e), 0);

	assert_int_equal(store_workspace_set_max_stopped(f->s, w.id, 7, &e), 0);
	assert_int_equal(store_workspace_get(f->s, w.id, &w, &e), 0);
	assert_int_equal(w.max_stopped, 7);
	assert_int_equal(store_workspace_set_max_stopped(f->s, w.id, -1, &e), -1);
	assert_string_equal(e.param, "max_stopped");
	assert_int_equal(store_workspace_set_max_stopped(f->s, "ws-nope", 1, &e), -1);
	assert_int_equal(e.code, ERR_NOT_FOUND);
	json_t *list;
	assert_int_equal(store_workspace_list(f->s, &list, &e), 0);
	assert_int_equal(
	    json_integer_value(json_object_get(json_array_get(list, 0), "max_stopped")), 7);
	json_decref(list);
	store_computer_clear(&a);
	store_computer_clear(&b);
	store_computer_clear(&c);
	store_computer_clear(&d);
}

/* A database from a newer cubicled is refused with a message saying so. */
static void test_newer_schema_is_refused(void **state)
{
	struct fixture *f = *state;
	store_close(f->s);
	f->s = NULL;
	const char *version_sql =
	    f->pg ? "SELECT version FROM cubicle_schema" : "PRAGMA user_version";
	int64_t version = fixture_sql_int(f, version_sql);
	assert_true(version >= 1);
	char sql[96];
	snprintf(sql, sizeof sql,
		 f->pg ? "UPDATE cubicle_schema SET version = %d" : "PRAGMA user_version = %d", 99);
	assert_int_equal(fixture_sql(f, sql), 0);
	struct err e = {0};
	assert_null(store_open(f->where, &e));
	assert_int_equal(e.code, ERR_INTERNAL);
	assert_non_null(strstr(e.message, "schema version 99"));
	snprintf(sql, sizeof sql,
		 f->pg ? "UPDATE cubicle_schema SET version = %d" : "PRAGMA user_version = %d",
		 (int)version);
	assert_int_equal(fixture_sql(f, sql), 0);
	f->s = store_open(f->where, &e);
	assert_non_null(f->s);

	/* A database that is not there: a clear error naming it. */
	if (f->pg) {
		char uri[600];
		pgserver_uri("nosuchdb", uri, sizeof uri);
		assert_null(store_open(uri, &e));
		assert_int_equal(e.code, ERR_UNAVAILABLE);
		assert_non_null(strstr(e.message, "cannot connect to the database"));
		assert_non_null(strstr(e.message, "does not exist"));
	}
	assert_null(store_open("/nonexistent-dir/x.db", &e));
	assert_int_equal(e.code, ERR_INTERNAL);
	assert_non_null(strstr(e.message, "/nonexistent-dir/x.db"));
	assert_null(store_open("", &e));
	assert_int_equal(e.code, ERR_INVALID);
}

/* ---- threads ------------------------------------------------------------ */

#define THREADS 4
#define ROUNDS	200

struct worker {
	struct store *s;
	const char *workspace;
	struct store_computer *c;
	int64_t t0;
	int index;
	int failures;
	char first_error[512];
};

static void *worker_run(void *arg)
{
	struct worker *w = arg;
	struct err e = {0};
	for (int i = 0; i < ROUNDS; i++) {
		int64_t now = w->t0 + (int64_t)i * 10;
		int rc = 0;
		switch ((i + w->index) % 4) {
		case 0:
			rc = store_usage_tick(w->s, now, &e) < 0 ? -1 : 0;
			break;
		case 1:
			rc = store_computer_touch(w->s, w->c->id, now, &e);
			break;
		case 2: {
			struct store_computer g;
			rc = store_computer_get(w->s, w->c->id, w->workspace, &g, &e);
			if (rc == 0)
				store_computer_clear(&g);
			break;
		}
		case 3: {
			char ws[40];
			bool admin;
			rc = store_key_lookup(w->s, "ck_nope", ws, &admin, &e) == -1 &&
				     e.code == ERR_UNAUTHORIZED
				 ? 0
				 : -1;
			break;
		}
		}
		if (rc && w->failures++ == 0)
			snprintf(w->first_error, sizeof w->first_error, "%s", e.message);
	}
	/* Each thread ends its own computer's open segment at a known time. */
	if (store_usage_switch(w->s, w->c->id, NULL, NULL, NULL, w->t0 + 1000 * (w->index + 1),
			       &e) &&
	    w->failures++ == 0)
		snprintf(w->first_error, sizeof w->first_error, "%s", e.message);
	return NULL;
}

static void test_threads(void **state)
{
	struct fixture *f = *state;
	struct err e = {0};
	struct store_workspace ws;
	make_workspace(f->s, "acme", &ws);
	struct store_computer c[THREADS];
	struct worker w[THREADS];
	pthread_t th[THREADS];
	const int64_t t0 = 1700000000000LL;
	for (int i = 0; i < THREADS; i++) {
		make_computer(f->s, ws.id, "sandbox", "xs", "running", &c[i]);
		assert_int_equal(store_usage_switch(f->s, c[i].id, ws.id, "xs", "running", t0, &e),
				 0);
		w[i] = (struct worker){
		    .s = f->s, .workspace = ws.id, .c = &c[i], .t0 = t0, .index = i};
	}
	for (int i = 0; i < THREADS; i++)
		assert_int_equal(pthread_create(&th[i], NULL, worker_run, &w[i]), 0);
	for (int i = 0; i < THREADS; i++) {
		pthread_join(th[i], NULL);
		if (w[i].failures)
			fail_msg("thread %d: %d failures, first: %s", i, w[i].failures,
				 w[i].first_error);
	}
	/* Computer i ran i+1 seconds: total (1+2+3+4) s * 15000 nd/s. */
	json_t *u = NULL;
	assert_int_equal(store_usage_query(f->s, ws.id, t0, t0 + 60000, NULL, &u, &e), 0);
	assert_int_equal(jint(json_object_get(u, "total"), "cost_nanodollars"), 10 * 15000);
	for (int i = 0; i < THREADS; i++)
		assert_true(jreal(usage_computer(u, c[i].id), "running_seconds") == i + 1.0);
	json_decref(u);
	for (int i = 0; i < THREADS; i++)
		store_computer_clear(&c[i]);
}

/* The admin's view of keys: ids and prefixes, revocation by id (of its own
 * workspace only), taking effect at once, and a deleted workspace's keys
 * and listing. */
static void test_key_admin(void **state)
{
	struct fixture *f = *state;
	struct err e = {0};
	struct store_workspace a, b;
	assert_int_equal(store_workspace_create(f->s, "a", 0, &a, &e), 0);
	assert_int_equal(store_workspace_create(f->s, "b", 0, &b, &e), 0);
	char k1[64], k2[64], kb[64];
	struct store_key_info i1, i2, ib;
	assert_int_equal(store_key_issue(f->s, a.id, k1, &i1, &e), 0);
	assert_int_equal(store_key_issue(f->s, a.id, k2, &i2, &e), 0);
	assert_int_equal(store_key_issue(f->s, b.id, kb, &ib, &e), 0);
	assert_string_not_equal(i1.id, i2.id);
	assert_int_equal(strlen(i1.prefix), STORE_KEY_PREFIX_SHOWN);
	assert_memory_equal(i1.prefix, k1, STORE_KEY_PREFIX_SHOWN);

	json_t *list = NULL;
	assert_int_equal(store_key_list(f->s, a.id, &list, &e), 0);
	assert_int_equal(json_array_size(list), 2);
	json_t *first = json_array_get(list, 0);
	assert_string_equal(json_string_value(json_object_get(first, "id")), i1.id);
	assert_string_equal(json_string_value(json_object_get(first, "prefix")), i1.prefix);
	assert_true(json_is_null(json_object_get(first, "last_used_at")));
	/* The key itself is nowhere in the listing. */
	char *dump = json_dumps(list, 0);
	assert_null(strstr(dump, k1));
	free(dump);
	json_decref(list);

	/* A lookup records the last use. */
	char ws[40];
	bool admin;
	assert_int_equal(store_key_lookup(f->s, k1, ws, &admin, &e), 0);
	assert_int_equal(store_key_list(f->s, a.id, &list, &e), 0);
	assert_true(json_is_integer(json_object_get(json_array_get(list, 0), "last_used_at")));
	json_decref(list);

	/* Another workspace's key id, garbage ids: not found, nothing revoked. */
	assert_int_equal(store_key_revoke_id(f->s, a.id, ib.id, &e), -1);
	assert_int_equal(e.code, ERR_NOT_FOUND);
	assert_int_equal(store_key_revoke_id(f->s, a.id, "key-", &e), -1);
	assert_int_equal(store_key_revoke_id(f->s, a.id, "key-99999999999999999999", &e), -1);
	assert_int_equal(store_key_revoke_id(f->s, a.id, "1", &e), -1);
	assert_int_equal(store_key_lookup(f->s, k1, ws, &admin, &e), 0);
	assert_int_equal(store_key_lookup(f->s, k2, ws, &admin, &e), 0);
	assert_int_equal(store_key_lookup(f->s, kb, ws, &admin, &e), 0);

	assert_int_equal(store_key_revoke_id(f->s, a.id, i1.id, &e), 0);
	assert_int_equal(store_key_lookup(f->s, k1, ws, &admin, &e), -1);
	assert_int_equal(e.code, ERR_UNAUTHORIZED);
	assert_int_equal(store_key_revoke_id(f->s, a.id, i1.id, &e), -1); /* gone */
	assert_int_equal(e.code, ERR_NOT_FOUND);
	assert_int_equal(store_key_list(f->s, a.id, &list, &e), 0);
	assert_int_equal(json_array_size(list), 1);
	json_decref(list);

	/* Deleting a workspace: its keys fail, it is not listed or found, the
	 * other stays. */
	assert_int_equal(store_workspace_delete(f->s, a.id, &e), 0);
	assert_int_equal(store_key_lookup(f->s, k2, ws, &admin, &e), -1);
	assert_int_equal(store_workspace_get(f->s, a.id, NULL, &e), -1);
	assert_int_equal(e.code, ERR_NOT_FOUND);
	assert_int_equal(store_key_list(f->s, a.id, &list, &e), -1);
	assert_int_equal(store_key_issue(f->s, a.id, k1, NULL, &e), -1);
	assert_int_equal(store_workspace_delete(f->s, a.id, &e), -1);
	assert_int_equal(e.code, ERR_NOT_FOUND);
	assert_int_equal(store_workspace_list(f->s, &list, &e), 0);
	assert_int_equal(json_array_size(list), 1);
	json_decref(list);
	assert_int_equal(store_key_lookup(f->s, kb, ws, &admin, &e), 0);
}

static void collect_rev(void *ctx, const char *computer, int64_t revoked_ms)
{
	json_object_set_new(ctx, computer, json_integer(revoked_ms));
}

/* Stream revocations survive a reopen and go once expired. */
static void test_stream_revocations(void **state)
{
	struct fixture *f = *state;
	struct err e = {0};
	assert_int_equal(store_stream_revoke(f->s, "c-1", 1000, 5000, &e), 0);
	assert_int_equal(store_stream_revoke(f->s, "c-2", 2000, 9000, &e), 0);
	assert_int_equal(store_stream_revoke(f->s, "c-1", 1500, 6000, &e), 0); /* later wins */
	fixture_reopen(f);
	json_t *got = json_object();
	assert_int_equal(store_stream_revocations(f->s, 3000, collect_rev, got, &e), 0);
	assert_int_equal(json_object_size(got), 2);
	assert_int_equal(json_integer_value(json_object_get(got, "c-1")), 1500);
	json_object_clear(got);
	assert_int_equal(store_stream_revocations(f->s, 7000, collect_rev, got, &e), 0);
	assert_int_equal(json_object_size(got), 1); /* c-1 expired and pruned */
	assert_non_null(json_object_get(got, "c-2"));
	json_decref(got);
}

/* ---- templates --------------------------------------------------------- */

static void make_template(struct store *s, const char *ws, const char *name, int limit,
			  struct store_template *t, struct err *e)
{
	memset(t, 0, sizeof *t);
	snprintf(t->workspace, sizeof t->workspace, "%s", ws);
	snprintf(t->name, sizeof t->name, "%s", name);
	snprintf(t->base, sizeof t->base, "sandbox");
	t->recipe = strdup("{\"base\":\"sandbox\",\"run\":[\"true\"]}");
	t->build = json_object();
	t->state = TEMPLATE_BUILDING;
	int rc = store_template_insert(s, t, limit, e);
	if (rc < 0)
		store_template_clear(t);
}

/* Names per workspace and against the global ones, the count limit, who
 * sees what, updates, and no delete while a computer uses it. */
static void test_templates(void **state)
{
	struct fixture *f = *state;
	struct err e = {0};
	struct store_workspace a, b;
	make_workspace(f->s, "a", &a);
	make_workspace(f->s, "b", &b);
	struct store_template ta, tb, g, x, got;
	make_template(f->s, a.id, "etl", 2, &ta, &e);
	assert_string_equal(e.message, "");
	assert_true(strncmp(ta.id, "tpl-", 4) == 0 && is_hex(ta.id + 4, 16));
	/* The same name again in a: 409; in b: fine. */
	make_template(f->s, a.id, "etl", 2, &x, &e);
	assert_int_equal(e.code, ERR_CONFLICT);
	err_clear(&e);
	make_template(f->s, b.id, "etl", 2, &tb, &e);
	assert_int_equal(e.code, ERR_OK);
	/* A global name: no workspace may take it afterwards. */
	make_template(f->s, "", "data", 0, &g, &e);
	assert_int_equal(e.code, ERR_OK);
	make_template(f->s, a.id, "data", 2, &x, &e);
	assert_int_equal(e.code, ERR_CONFLICT);
	assert_non_null(strstr(e.message, "global"));
	/* The limit counts a's own only. */
	err_clear(&e);
	make_template(f->s, a.id, "second", 2, &x, &e);
	assert_int_equal(e.code, ERR_OK);
	store_template_clear(&x);
	make_template(f->s, a.id, "third", 2, &x, &e);
	assert_int_equal(e.code, ERR_LIMIT);

	/* Finding: a's own, the global one; never b's. */
	assert_int_equal(store_template_find(f->s, a.id, "etl", &got, &e), 0);
	assert_string_equal(got.id, ta.id);
	store_template_clear(&got);
	assert_int_equal(store_template_find(f->s, a.id, "data", &got, &e), 0);
	assert_string_equal(got.id, g.id);
	store_template_clear(&got);
	assert_int_equal(store_template_find(f->s, "", "etl", &got, &e), -1);
	assert_int_equal(e.code, ERR_NOT_FOUND);
	struct store_template *all = NULL;
	size_t n = 0;
	assert_int_equal(store_template_list(f->s, b.id, &all, &n, &e), 0);
	assert_int_equal(n, 2); /* b's etl and the global data */
	for (size_t i = 0; i < n; i++) {
		assert_true(strcmp(all[i].id, ta.id) != 0);
		store_template_clear(&all[i]);
	}
	free(all);

	/* An update keeps what it is given. */
	ta.state = TEMPLATE_READY;
	snprintf(ta.image, sizeof ta.image, "tpl-image-0123456789abcdef");
	ta.size_bytes = 12345;
	assert_int_equal(store_template_update(f->s, &ta, &e), 0);
	assert_int_equal(store_template_get(f->s, ta.id, &got, &e), 0);
	assert_int_equal(got.state, TEMPLATE_READY);
	assert_string_equal(got.image, "tpl-image-0123456789abcdef");
	assert_int_equal(got.size_bytes, 12345);
	store_template_clear(&got);

	/* A computer made from it: no delete until the computer is deleted. */
	struct store_computer c;
	memset(&c, 0, sizeof c);
	snprintf(c.workspace, sizeof c.workspace, "%s", a.id);
	snprintf(c.kind, sizeof c.kind, "sandbox");
	snprintf(c.size, sizeof c.size, "sm");
	snprintf(c.isolation, sizeof c.isolation, "container");
	snprintf(c.template_id, sizeof c.template_id, "%s", ta.id);
	c.state = COMPUTER_RUNNING;
	assert_int_equal(store_computer_insert(f->s, &c, &e), 0);
	assert_int_equal(store_template_delete(f->s, ta.id, &e), -1);
	assert_int_equal(e.code, ERR_CONFLICT);
	assert_non_null(strstr(e.message, c.id));
	assert_int_equal(store_computer_set_state(f->s, c.id, "deleted", NULL, &e), 0);
	assert_int_equal(store_template_delete(f->s, ta.id, &e), 0);
	assert_int_equal(store_template_get(f->s, ta.id, &got, &e), -1);
	/* A computer naming a template that is gone is refused. */
	struct store_computer c2 = c;
	c2.metadata = c2.driver_state = NULL;
	assert_int_equal(store_computer_insert(f->s, &c2, &e), -1);
	assert_string_equal(e.param, "template");
	store_computer_clear(&c);
	store_template_clear(&ta);
	store_template_clear(&tb);
	store_template_clear(&g);
}

static void collect_preview(void *ctx, const struct store_preview *p)
{
	struct store_preview *out = ctx;
	for (int i = 0; i < 4; i++) {
		if (!out[i].computer[0]) {
			out[i] = *p;
			return;
		}
	}
}

/* Previews: a public span, a revocation that ends it, values that only
 * grow, a reopen, and pruning once expired. */
static void test_previews(void **state)
{
	struct fixture *f = *state;
	struct err e = {0};
	struct store_preview p = {.computer = "c-1",
				  .port = 3000,
				  .public_since_ms = 100,
				  .public_until_ms = 9000,
				  .issued_ms = 100,
				  .expires_ms = 9000};
	assert_int_equal(store_preview_put(f->s, &p, &e), 0);
	/* A later token: issued and expiry grow, the public span stays. */
	struct store_preview later = {
	    .computer = "c-1", .port = 3000, .issued_ms = 200, .expires_ms = 8000};
	assert_int_equal(store_preview_put(f->s, &later, &e), 0);
	/* Port 0 (a stop) of c-1, and c-2's port revoked. */
	struct store_preview stop = {
	    .computer = "c-1", .port = 0, .revoked_ms = 300, .expires_ms = 20000};
	assert_int_equal(store_preview_put(f->s, &stop, &e), 0);
	struct store_preview rev = {.computer = "c-2",
				    .port = 80,
				    .public_since_ms = 50,
				    .public_until_ms = 9000,
				    .expires_ms = 9000};
	assert_int_equal(store_preview_put(f->s, &rev, &e), 0);
	struct store_preview rev2 = {
	    .computer = "c-2", .port = 80, .revoked_ms = 400, .expires_ms = 5000};
	assert_int_equal(store_preview_put(f->s, &rev2, &e), 0);
	fixture_reopen(f);
	struct store_preview got[4];
	memset(got, 0, sizeof got);
	assert_int_equal(store_previews(f->s, 1000, collect_preview, got, &e), 0);
	int seen = 0;
	for (int i = 0; i < 4 && got[i].computer[0]; i++, seen++) {
		if (strcmp(got[i].computer, "c-1") == 0 && got[i].port == 3000) {
			assert_int_equal(got[i].public_since_ms, 100);
			assert_int_equal(got[i].public_until_ms, 9000);
			assert_int_equal(got[i].issued_ms, 200);
			assert_int_equal(got[i].expires_ms, 9000);
		} else if (strcmp(got[i].computer, "c-1") == 0) {
			assert_int_equal(got[i].port, 0);
			assert_int_equal(got[i].revoked_ms, 300);
		} else {
			/* The revocation ended the public span; expiry never shrinks. */
			assert_int_equal(got[i].public_until_ms, 0);
			assert_int_equal(got[i].revoked_ms, 400);
			assert_int_equal(got[i].expires_ms, 9000);
		}
	}
	assert_int_equal(seen, 3);
	memset(got, 0, sizeof got);
	assert_int_equal(store_previews(f->s, 10000, collect_preview, got, &e), 0);
	assert_string_equal(got[0].computer, "c-1"); /* only the stop's row is left */
	assert_int_equal(got[0].port, 0);
	assert_int_equal(got[1].computer[0], 0);
	struct store_preview bad = {.computer = "", .port = 1};
	assert_int_equal(store_preview_put(f->s, &bad, &e), -1);
}

/* Recordings: the filters of find, get as a workspace sees it, what an
 * update writes and what it keeps, the retention rule, delete. */
static void test_recordings(void **state)
{
	struct fixture *f = *state;
	struct err e = {0};
	struct store_recording a = {.id = "rec-a",
				    .computer = "c-1",
				    .workspace = "w-1",
				    .state = "recording",
				    .started_ms = 1000};
	struct store_recording b = {.id = "rec-b",
				    .computer = "c-2",
				    .workspace = "w-1",
				    .state = "stopped",
				    .keep = true,
				    .started_ms = 2000,
				    .stopped_ms = 5000,
				    .duration_ms = 3000,
				    .bytes = 5000000000ULL, /* past 32 bits */
				    .frames = 42,
				    .actions = 7,
				    .width = 1280,
				    .height = 800,
				    .reason = "stopped"};
	struct store_recording c = {.id = "rec-c",
				    .computer = "c-3",
				    .workspace = "w-2",
				    .state = "failed",
				    .started_ms = 3000,
				    .stopped_ms = 3500,
				    .reason = "error",
				    .error = "the recorder's 'screen' was 0x0"};
	assert_int_equal(store_recording_insert(f->s, &a, &e), 0);
	assert_int_equal(store_recording_insert(f->s, &b, &e), 0);
	assert_int_equal(store_recording_insert(f->s, &c, &e), 0);
	assert_int_equal(store_recording_insert(f->s, &a, &e), -1); /* its id is taken */
	fixture_reopen(f);

	struct store_recording *all;
	size_t n;
	assert_int_equal(store_recordings_find(f->s, NULL, NULL, NULL, 0, &all, &n, &e), 0);
	assert_int_equal(n, 3); /* oldest first */
	assert_string_equal(all[0].id, "rec-a");
	assert_string_equal(all[1].id, "rec-b");
	assert_string_equal(all[2].id, "rec-c");
	assert_string_equal(all[2].error, c.error);
	assert_false(all[2].keep);
	free(all);
	assert_int_equal(store_recordings_find(f->s, "c-2", NULL, NULL, 0, &all, &n, &e), 0);
	assert_int_equal(n, 1);
	assert_string_equal(all[0].id, "rec-b");
	assert_string_equal(all[0].workspace, "w-1");
	assert_string_equal(all[0].state, "stopped");
	assert_true(all[0].keep);
	assert_int_equal(all[0].started_ms, 2000);
	assert_int_equal(all[0].stopped_ms, 5000);
	assert_int_equal(all[0].duration_ms, 3000);
	assert_int_equal(all[0].bytes, 5000000000ULL);
	assert_int_equal(all[0].frames, 42);
	assert_int_equal(all[0].actions, 7);
	assert_int_equal(all[0].width, 1280);
	assert_int_equal(all[0].height, 800);
	assert_string_equal(all[0].reason, "stopped");
	assert_string_equal(all[0].error, "");
	free(all);
	assert_int_equal(store_recordings_find(f->s, NULL, "w-1", NULL, 0, &all, &n, &e), 0);
	assert_int_equal(n, 2);
	free(all);
	assert_int_equal(store_recordings_find(f->s, NULL, NULL, "recording", 0, &all, &n, &e), 0);
	assert_int_equal(n, 1);
	assert_string_equal(all[0].id, "rec-a");
	free(all);
	assert_int_equal(store_recordings_find(f->s, "c-1", "w-2", NULL, 0, &all, &n, &e), 0);
	assert_int_equal(n, 0);
	free(all);
	/* Retention: kept, ended, and stopped before the cut (strictly). */
	assert_int_equal(store_recordings_find(f->s, NULL, NULL, NULL, 6000, &all, &n, &e), 0);
	assert_int_equal(n, 1);
	assert_string_equal(all[0].id, "rec-b");
	free(all);
	assert_int_equal(store_recordings_find(f->s, NULL, NULL, NULL, 5000, &all, &n, &e), 0);
	assert_int_equal(n, 0);
	free(all);

	/* get: only as its computer and workspace. */
	struct store_recording g;
	assert_int_equal(store_recording_get(f->s, "rec-b", "c-2", "w-1", &g, &e), 0);
	assert_int_equal(g.bytes, 5000000000ULL);
	assert_int_equal(store_recording_get(f->s, "rec-b", NULL, NULL, &g, &e), 0);
	assert_int_equal(store_recording_get(f->s, "rec-b", "c-2", "w-2", &g, &e), -1);
	assert_int_equal(e.code, ERR_NOT_FOUND);
	assert_int_equal(store_recording_get(f->s, "rec-b", "c-1", "w-1", &g, &e), -1);
	assert_int_equal(e.code, ERR_NOT_FOUND);

	/* update: every field but id, computer, workspace and started_ms. */
	struct store_recording u = a;
	snprintf(u.workspace, sizeof u.workspace, "w-2");
	u.started_ms = 1;
	snprintf(u.state, sizeof u.state, "stopped");
	u.keep = true;
	u.stopped_ms = 9000;
	u.duration_ms = 8000;
	u.frames = 3;
	u.width = 640;
	u.height = 480;
	snprintf(u.reason, sizeof u.reason, "max_duration");
	assert_int_equal(store_recording_update(f->s, &u, &e), 0);
	assert_int_equal(store_recording_get(f->s, "rec-a", "c-1", "w-1", &g, &e), 0);
	assert_int_equal(g.started_ms, 1000);
	assert_string_equal(g.state, "stopped");
	assert_true(g.keep);
	assert_int_equal(g.stopped_ms, 9000);
	assert_int_equal(g.frames, 3);
	assert_int_equal(g.width, 640);
	assert_string_equal(g.reason, "max_duration");

	json_t *j = store_recording_json(&b);
	assert_non_null(j);
	assert_int_equal(json_integer_value(json_object_get(j, "bytes")), 5000000000LL);
	assert_int_equal(json_integer_value(json_object_get(j, "stopped_at")), 5000);
	assert_string_equal(json_string_value(json_object_get(j, "reason")), "stopped");
	assert_null(json_object_get(j, "error"));
	json_decref(j);

	assert_int_equal(store_recording_delete(f->s, "rec-b", &e), 0);
	assert_int_equal(store_recording_get(f->s, "rec-b", NULL, NULL, &g, &e), -1);
	assert_int_equal(e.code, ERR_NOT_FOUND);
	assert_int_equal(store_recordings_find(f->s, NULL, NULL, NULL, 0, &all, &n, &e), 0);
	assert_int_equal(n, 2);
	free(all);
}

struct usage_total {
	char ws[40], state[16];
	double seconds;
};

static void collect_total(void *ctx, const char *ws, const char *rate_state, double seconds)
{
	struct usage_total *out = ctx;
	for (int i = 0; i < 4; i++) {
		if (!out[i].ws[0]) {
			snprintf(out[i].ws, sizeof out[i].ws, "%s", ws);
			snprintf(out[i].state, sizeof out[i].state, "%s", rate_state);
			out[i].seconds = seconds;
			return;
		}
	}
	fail_msg("more than 4 totals");
}

/* The ledger's totals per workspace and rate state (/metrics), deleted
 * computers' included. */
static void test_usage_totals(void **state)
{
	struct fixture *f = *state;
	struct err e = {0};
	struct store_workspace w1, w2;
	make_workspace(f->s, "acme", &w1);
	make_workspace(f->s, "globex", &w2);
	struct store_computer a, b, c;
	make_computer(f->s, w1.id, "sandbox", "md", "running", &a);
	make_computer(f->s, w1.id, "sandbox", "md", "running", &b);
	make_computer(f->s, w2.id, "desktop", "small", "running", &c);
	const int64_t t0 = 1700000000000LL;
	assert_int_equal(store_usage_switch(f->s, a.id, w1.id, "md", "running", t0, &e), 0);
	assert_int_equal(store_usage_switch(f->s, a.id, w1.id, "md", "stopped", t0 + 1500, &e), 0);
	assert_int_equal(store_usage_switch(f->s, a.id, NULL, NULL, NULL, t0 + 2000, &e), 0);
	assert_int_equal(store_usage_switch(f->s, b.id, w1.id, "md", "running", t0, &e), 0);
	assert_int_equal(store_usage_switch(f->s, b.id, NULL, NULL, NULL, t0 + 250, &e), 0);
	assert_int_equal(store_usage_switch(f->s, c.id, w2.id, "small", "running", t0, &e), 0);
	assert_int_equal(store_usage_tick(f->s, t0 + 4000, &e), 1); /* c's segment is open */

	struct usage_total got[4];
	memset(got, 0, sizeof got);
	assert_int_equal(store_usage_totals(f->s, collect_total, got, &e), 0);
	int seen = 0;
	for (int i = 0; i < 4 && got[i].ws[0]; i++, seen++) {
		if (strcmp(got[i].ws, w1.id) == 0 && strcmp(got[i].state, "running") == 0)
			assert_true(got[i].seconds == 1.75);
		else if (strcmp(got[i].ws, w1.id) == 0 && strcmp(got[i].state, "stopped") == 0)
			assert_true(got[i].seconds == 0.5);
		else if (strcmp(got[i].ws, w2.id) == 0 && strcmp(got[i].state, "running") == 0)
			assert_true(got[i].seconds == 4.0);
		else
			fail_msg("an unexpected total: %s %s", got[i].ws, got[i].state);
	}
	assert_int_equal(seen, 3);
	store_computer_clear(&a);
	store_computer_clear(&b);
	store_computer_clear(&c);
}

/* ---- upgrades ------------------------------------------------------------ */

/* A SQLite database as cubicled made it before the store had hosts (main's
 * versions 6 and 8: previews are 7 and recordings 8, the cluster's columns
 * and tables 9), with rows in it, upgrades in place and keeps them. */
static void test_upgrade_from_older_sqlite(void **state)
{
	struct fixture *f = *state;
	if (f->pg)
		skip(); /* PostgreSQL's schema starts at today's */
	/* The numbers databases in the field have. */
	assert_true(store_lite_schema_version >= 9);
	assert_ptr_equal(strstr(store_lite_migrations[6], "CREATE TABLE previews"),
			 store_lite_migrations[6]);
	assert_ptr_equal(strstr(store_lite_migrations[7], "CREATE TABLE recordings"),
			 store_lite_migrations[7]);
	assert_true(store_lite_schema_version >= 10);
	assert_ptr_equal(strstr(store_lite_migrations[9], "CREATE TABLE templates"),
			 store_lite_migrations[9]);
	static const int from[] = {6, 8};
	for (size_t k = 0; k < sizeof from / sizeof from[0]; k++) {
		const int v = from[k];
		store_close(f->s);
		f->s = NULL;
		static const char *const suffix[] = {"", "-wal", "-shm"};
		for (int i = 0; i < 3; i++) {
			char p[600];
			snprintf(p, sizeof p, "%s%s", f->where, suffix[i]);
			unlink(p);
		}
		assert_int_equal(fixture_sql(f, "PRAGMA journal_mode = WAL"), 0);
		for (int i = 0; i < v; i++)
			assert_int_equal(fixture_sql(f, store_lite_migrations[i]), 0);
		char sql[64];
		snprintf(sql, sizeof sql, "PRAGMA user_version = %d", v);
		assert_int_equal(fixture_sql(f, sql), 0);
		assert_int_equal(
		    fixture_sql(f, "INSERT INTO workspaces (id, name, created_ms)"
				   " VALUES ('ws-old', 'old', 1);"
				   "INSERT INTO computers (id, workspace, kind, size, isolation,"
				   " state, created_ms, updated_ms) VALUES ('c-old', 'ws-old',"
				   " 'desktop', 'small', 'container', 'running', 1, 1);"
				   "INSERT INTO usage_segments (computer, workspace, size,"
				   " rate_state, start_ms, end_ms) VALUES ('c-old', 'ws-old',"
				   " 'small', 'running', 1000, 4000)"),
		    0);
		if (v >= 7)
			assert_int_equal(
			    fixture_sql(f, "INSERT INTO previews (computer, port, public_since_ms,"
					   " public_until_ms, expires_ms) VALUES ('c-old', 3000,"
					   " 10, 4000000000000, 4000000000000)"),
			    0);
		if (v >= 8)
			assert_int_equal(
			    fixture_sql(f,
					"INSERT INTO recordings (id, computer, workspace,"
					" state, keep, started_ms, stopped_ms) VALUES"
					" ('rec-old', 'c-old', 'ws-old', 'stopped', 1, 100, 200)"),
			    0);

		struct err e = {0};
		f->s = store_open(f->where, &e);
		if (!f->s)
			fail_msg("upgrading from version %d: %s", v, e.message);
		assert_int_equal(fixture_sql_int(f, "PRAGMA user_version"),
				 store_lite_schema_version);
		assert_int_equal(fixture_sql_int(f, "SELECT COUNT(*) FROM sqlite_master WHERE name"
						    " IN ('previews', 'recordings', 'hosts',"
						    " 'stream_keys', 'computers_host', 'templates',"
						    " 'computers_template')"),
				 7);
		/* What was there is there, the cluster's columns empty. */
		struct store_computer g;
		assert_int_equal(store_computer_get(f->s, "c-old", "ws-old", &g, &e), 0);
		assert_int_equal(g.state, COMPUTER_RUNNING);
		assert_string_equal(g.host, "");
		assert_int_equal(g.epoch, 0);
		assert_int_equal(g.reserved.mem_mb, 0);
		assert_string_equal(g.template_id, "");
		store_computer_clear(&g);
		struct store_open_segment *segs;
		size_t n;
		assert_int_equal(store_usage_open_segments(f->s, &segs, &n, &e), 0);
		assert_int_equal(n, 1);
		assert_int_equal(segs[0].end_ms, 4000);
		free(segs);
		struct store_preview got[4];
		memset(got, 0, sizeof got);
		assert_int_equal(store_previews(f->s, 1000, collect_preview, got, &e), 0);
		if (v >= 7) {
			assert_string_equal(got[0].computer, "c-old");
			assert_int_equal(got[0].public_until_ms, 4000000000000LL);
		} else {
			assert_int_equal(got[0].computer[0], 0);
		}
		struct store_recording r;
		if (v >= 8) {
			assert_int_equal(
			    store_recording_get(f->s, "rec-old", "c-old", "ws-old", &r, &e), 0);
			assert_true(r.keep);
			assert_int_equal(r.stopped_ms, 200);
		}
		struct store_host *hosts;
		assert_int_equal(store_host_list(f->s, &hosts, &n, &e), 0);
		assert_int_equal(n, 0);
		free(hosts);

		/* And everything writes. */
		struct store_computer c;
		make_computer(f->s, "ws-old", "sandbox", "md", "running", &c);
		assert_int_equal(
		    store_usage_switch(f->s, c.id, "ws-old", "md", "running", 5000, &e), 0);
		assert_int_equal(store_usage_tick(f->s, 6000, &e), 2);
		store_computer_clear(&c);
		struct store_preview p = {.computer = "c-new", .port = 80, .expires_ms = 9000};
		assert_int_equal(store_preview_put(f->s, &p, &e), 0);
		struct store_recording nr = {.id = "rec-new",
					     .computer = "c-old",
					     .workspace = "ws-old",
					     .state = "recording",
					     .started_ms = 7000};
		assert_int_equal(store_recording_insert(f->s, &nr, &e), 0);
		assert_int_equal(store_recording_get(f->s, "rec-new", "c-old", "ws-old", &r, &e),
				 0);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_workspace_create_get_list, fixture_setup,
					    fixture_teardown),
	    cmocka_unit_test_setup_teardown(test_workspace_egress, fixture_setup, fixture_teardown),
	    cmocka_unit_test_setup_teardown(test_keys, fixture_setup, fixture_teardown),
	    cmocka_unit_test_setup_teardown(test_key_admin, fixture_setup, fixture_teardown),
	    cmocka_unit_test_setup_teardown(test_templates, fixture_setup, fixture_teardown),
	    cmocka_unit_test_setup_teardown(test_stream_revocations, fixture_setup,
					    fixture_teardown),
	    cmocka_unit_test_setup_teardown(test_previews, fixture_setup, fixture_teardown),
	    cmocka_unit_test_setup_teardown(test_recordings, fixture_setup, fixture_teardown),
	    cmocka_unit_test_setup_teardown(test_usage_totals, fixture_setup, fixture_teardown),
	    cmocka_unit_test_setup_teardown(test_key_lookup_never_waits, fixture_setup,
					    fixture_teardown),
	    cmocka_unit_test(test_computer_state_names),
	    cmocka_unit_test_setup_teardown(test_computer_roundtrip, fixture_setup,
					    fixture_teardown),
	    cmocka_unit_test_setup_teardown(test_computer_other_workspace_is_not_found,
					    fixture_setup, fixture_teardown),
	    cmocka_unit_test_setup_teardown(test_computer_list_filters_and_count, fixture_setup,
					    fixture_teardown),
	    cmocka_unit_test_setup_teardown(test_computer_bad_input, fixture_setup,
					    fixture_teardown),
	    cmocka_unit_test(test_size_multiplier),
	    cmocka_unit_test_setup_teardown(test_usage_arithmetic, fixture_setup, fixture_teardown),
	    cmocka_unit_test_setup_teardown(test_usage_rounding_is_floor_per_segment, fixture_setup,
					    fixture_teardown),
	    cmocka_unit_test_setup_teardown(test_usage_switch_and_open_segments, fixture_setup,
					    fixture_teardown),
	    cmocka_unit_test_setup_teardown(test_reopen_finds_everything, fixture_setup,
					    fixture_teardown),
	    cmocka_unit_test_setup_teardown(test_kill9_keeps_last_tick, fixture_setup,
					    fixture_teardown),
	    cmocka_unit_test_setup_teardown(test_commit_state_and_usage_together, fixture_setup,
					    fixture_teardown),
	    cmocka_unit_test_setup_teardown(test_commit_limit_under_concurrent_inserts,
					    fixture_setup, fixture_teardown),
	    cmocka_unit_test_setup_teardown(test_kill9_between_state_and_usage, fixture_setup,
					    fixture_teardown),
	    cmocka_unit_test_setup_teardown(test_commit_stopped_limit, fixture_setup,
					    fixture_teardown),
	    cmocka_unit_test_setup_teardown(test_newer_schema_is_refused, fixture_setup,
					    fixture_teardown),
	    cmocka_unit_test_setup_teardown(test_upgrade_from_older_sqlite, fixture_setup,
					    fixture_teardown),
	    cmocka_unit_test_setup_teardown(test_threads, fixture_setup, fixture_teardown),
	};
	/* Every case on SQLite, then on PostgreSQL (one server for all). */
	fixture_pg = false;
	int failed = cmocka_run_group_tests_name("sqlite", tests, NULL, NULL);
	failed += store_cluster_run("sqlite cluster");
	char why[300];
	bool skip;
	if (pgserver_start(why, sizeof why, &skip) < 0) {
		pgserver_remove();
		if (skip) {
			printf("SKIP: the PostgreSQL passes: %s\n", why);
			return failed;
		}
		fprintf(stderr, "the PostgreSQL passes cannot run: %s\n", why);
		return failed + 1;
	}
	fixture_pg = true;
	failed += cmocka_run_group_tests_name("postgresql", tests, NULL, NULL);
	failed += store_cluster_run("postgresql cluster");
	pgserver_remove();
	return failed;
}
