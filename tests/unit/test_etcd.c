/*
 * etcd's JSON gateway client and a host's membership (host/cluster/)
 * against a real etcd (Debian's etcd-server) on loopback ports this test
 * picks, in a temporary directory: leases (a gone one renews to 0 and
 * answers -1), the create-if-absent transaction a leader is elected with,
 * a dead endpoint skipped, and a member that registers, leads, reaps only
 * a host whose lease etcd proves gone, is fenced from outside and when etcd
 * stops answering (SIGSTOP: cut off), then registers again with a new epoch.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "clock.h"
#include "etcd.h"
#include "member.h"

static char dir[64];
static pid_t etcd_pid = -1;
static char endpoint[64];
static int dead_port;

static int free_port(void)
{
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct sockaddr_in sa = {.sin_family = AF_INET};
	inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
	socklen_t len = sizeof sa;
	if (bind(fd, (struct sockaddr *)&sa, sizeof sa) < 0 ||
	    getsockname(fd, (struct sockaddr *)&sa, &len) < 0) {
		close(fd);
		return -1;
	}
	int port = ntohs(sa.sin_port);
	close(fd);
	return port;
}

static int setup(void **state)
{
	(void)state;
	if (access("/usr/bin/etcd", X_OK) != 0)
		return 0; /* each test skips */
	snprintf(dir, sizeof dir, "/tmp/cubicle-cluster-etcd-XXXXXX");
	if (!mkdtemp(dir))
		return -1;
	int client = free_port(), peer = free_port();
	dead_port = free_port();
	snprintf(endpoint, sizeof endpoint, "http://127.0.0.1:%d", client);
	char data[128], curl[64], purl[64], cluster[96], log[128];
	snprintf(data, sizeof data, "%s/data", dir);
	snprintf(curl, sizeof curl, "http://127.0.0.1:%d", client);
	snprintf(purl, sizeof purl, "http://127.0.0.1:%d", peer);
	snprintf(cluster, sizeof cluster, "t=%s", purl);
	snprintf(log, sizeof log, "%s/etcd.log", dir);
	etcd_pid = fork();
	if (etcd_pid == 0) {
		FILE *f = freopen(log, "w", stderr);
		(void)f;
		execl("/usr/bin/etcd", "etcd", "--name", "t", "--data-dir", data,
		      "--listen-client-urls", curl, "--advertise-client-urls", curl,
		      "--listen-peer-urls", purl, "--initial-advertise-peer-urls", purl,
		      "--initial-cluster", cluster, "--heartbeat-interval", "50",
		      "--election-timeout", "500", (char *)NULL);
		_exit(127);
	}
	/* Up when it grants a lease. */
	struct err e = {0};
	struct etcd *c = etcd_open(endpoint, 500, &e);
	int64_t lease = 0;
	for (int i = 0; i < 200 && etcd_lease_grant(c, 5, &lease, NULL) < 0; i++)
		clock_sleep_ms(50);
	etcd_close(c);
	return lease > 0 ? 0 : -1;
}

static int teardown(void **state)
{
	(void)state;
	if (etcd_pid > 0) {
		kill(etcd_pid, SIGCONT);
		kill(etcd_pid, SIGKILL);
		waitpid(etcd_pid, NULL, 0);
	}
	if (dir[0]) {
		char cmd[128];
		snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
		if (system(cmd) != 0)
			return -1;
	}
	return 0;
}

#define NEED_ETCD()                                                                                \
	do {                                                                                       \
		if (etcd_pid <= 0)                                                                 \
			skip();                                                                    \
	} while (0)

static void test_leases(void **state)
{
	(void)state;
	NEED_ETCD();
	struct err e = {0};
	struct etcd *c = etcd_open(endpoint, 1000, &e);
	assert_non_null(c);
	int64_t lease = 0;
	assert_int_equal(etcd_lease_grant(c, 30, &lease, &e), 0);
	assert_true(lease > 0);
	int ttl = 0;
	assert_int_equal(etcd_lease_keepalive(c, lease, &ttl, &e), 0);
	assert_int_equal(ttl, 30);
	assert_int_equal(etcd_lease_ttl(c, lease, &ttl, &e), 0);
	assert_true(ttl > 0 && ttl <= 30);
	int64_t *ids = NULL;
	size_t n = 0;
	assert_int_equal(etcd_lease_list(c, &ids, &n, &e), 0);
	bool listed = false;
	for (size_t i = 0; i < n; i++)
		listed |= ids[i] == lease;
	free(ids);
	assert_true(listed);
	assert_int_equal(etcd_lease_revoke(c, lease, &e), 0);
	/* Gone: a renewal answers no TTL, TimeToLive -1. */
	assert_int_equal(etcd_lease_keepalive(c, lease, &ttl, &e), 0);
	assert_int_equal(ttl, 0);
	assert_int_equal(etcd_lease_ttl(c, lease, &ttl, &e), 0);
	assert_int_equal(ttl, -1);
	/* A lease that never was is gone too. */
	assert_int_equal(etcd_lease_ttl(c, 12345, &ttl, &e), 0);
	assert_int_equal(ttl, -1);
	etcd_close(c);
}

static void test_create_if_absent(void **state)
{
	(void)state;
	NEED_ETCD();
	struct err e = {0};
	struct etcd *c = etcd_open(endpoint, 1000, &e);
	int64_t a = 0, b = 0;
	assert_int_equal(etcd_lease_grant(c, 30, &a, &e), 0);
	assert_int_equal(etcd_lease_grant(c, 30, &b, &e), 0);
	bool created = false;
	struct etcd_kv kv;
	assert_int_equal(etcd_create(c, "/test/leader", "a", a, &created, &kv, &e), 0);
	assert_true(created);
	assert_int_equal(kv.lease, a);
	assert_int_equal(etcd_create(c, "/test/leader", "b", b, &created, &kv, &e), 0);
	assert_false(created);
	assert_string_equal(kv.value, "a");
	assert_int_equal(kv.lease, a);
	/* b cannot delete a's key; a's lease going takes it. */
	assert_int_equal(etcd_delete_if_lease(c, "/test/leader", b, &e), 0);
	assert_int_equal(etcd_get(c, "/test/leader", &kv, &e), 0);
	assert_true(kv.found);
	assert_int_equal(etcd_lease_revoke(c, a, &e), 0);
	assert_int_equal(etcd_get(c, "/test/leader", &kv, &e), 0);
	assert_false(kv.found);
	assert_int_equal(etcd_create(c, "/test/leader", "b", b, &created, &kv, &e), 0);
	assert_true(created);
	assert_string_equal(kv.value, "b");
	/* Values of any bytes survive base64 both ways. */
	assert_int_equal(etcd_put(c, "/test/x", "{\"a\":\"\\u00e9 / +=\"}", 0, &e), 0);
	assert_int_equal(etcd_get(c, "/test/x", &kv, &e), 0);
	assert_string_equal(kv.value, "{\"a\":\"\\u00e9 / +=\"}");
	etcd_lease_revoke(c, b, NULL);
	etcd_close(c);
}

static void test_dead_endpoint_skipped(void **state)
{
	(void)state;
	NEED_ETCD();
	char list[160];
	snprintf(list, sizeof list, "http://127.0.0.1:%d,%s", dead_port, endpoint);
	struct err e = {0};
	struct etcd *c = etcd_open(list, 1000, &e);
	assert_non_null(c);
	int64_t lease = 0;
	assert_int_equal(etcd_lease_grant(c, 5, &lease, &e), 0);
	assert_true(lease > 0);
	etcd_lease_revoke(c, lease, NULL);
	etcd_close(c);
	/* Only dead members: an error naming why, no hang. */
	snprintf(list, sizeof list, "http://127.0.0.1:%d", dead_port);
	c = etcd_open(list, 500, &e);
	assert_int_equal(etcd_lease_grant(c, 5, &lease, &e), -1);
	assert_int_equal(e.code, ERR_UNAVAILABLE);
	etcd_close(c);
	/* Malformed lists are refused. */
	assert_null(etcd_open("127.0.0.1:2379", 0, &e));
	assert_string_equal(e.param, "endpoints");
	assert_null(etcd_open("http://a,,http://b", 0, &e));
	assert_null(etcd_open("https://a:1", 0, &e));
}

/* ---- a member ------------------------------------------------------------------------ */

struct hooks_log {
	pthread_mutex_t lock;
	int registered, fenced, reaped;
	int64_t last_epoch, fenced_epoch, reaped_epoch;
	char reaped_host[64], why[200];
	struct member_host hosts[4];
	size_t nhosts;
};

static int h_registered(void *ctx, int64_t epoch, bool reused, struct err *e)
{
	(void)reused, (void)e;
	struct hooks_log *l = ctx;
	pthread_mutex_lock(&l->lock);
	l->registered++;
	l->last_epoch = epoch;
	pthread_mutex_unlock(&l->lock);
	return 0;
}

static void h_fenced(void *ctx, int64_t epoch, const char *why)
{
	struct hooks_log *l = ctx;
	pthread_mutex_lock(&l->lock);
	l->fenced++;
	l->fenced_epoch = epoch;
	snprintf(l->why, sizeof l->why, "%s", why);
	pthread_mutex_unlock(&l->lock);
}

static int h_hosts(void *ctx, struct member_host **out, size_t *n, struct err *e)
{
	(void)e;
	struct hooks_log *l = ctx;
	pthread_mutex_lock(&l->lock);
	*out = calloc(l->nhosts + 1, sizeof **out);
	memcpy(*out, l->hosts, l->nhosts * sizeof **out);
	*n = l->nhosts;
	pthread_mutex_unlock(&l->lock);
	return 0;
}

static int h_reap(void *ctx, const char *host, int64_t epoch, struct err *e)
{
	(void)e;
	struct hooks_log *l = ctx;
	pthread_mutex_lock(&l->lock);
	l->reaped++;
	l->reaped_epoch = epoch;
	snprintf(l->reaped_host, sizeof l->reaped_host, "%s", host);
	/* Reaped hosts leave the database's list of live ones. */
	for (size_t i = 0; i < l->nhosts; i++)
		if (strcmp(l->hosts[i].id, host) == 0 && l->hosts[i].epoch == epoch)
			l->hosts[i] = l->hosts[--l->nhosts];
	pthread_mutex_unlock(&l->lock);
	return 0;
}

static int wait_for(struct hooks_log *l, int *field, int want, int ms)
{
	int64_t until = clock_now_ms() + ms;
	for (;;) {
		pthread_mutex_lock(&l->lock);
		int v = *field;
		pthread_mutex_unlock(&l->lock);
		if (v >= want || clock_now_ms() > until)
			return v;
		clock_sleep_ms(20);
	}
}

static void test_member(void **state)
{
	(void)state;
	NEED_ETCD();
	struct hooks_log l = {.lock = PTHREAD_MUTEX_INITIALIZER};
	struct member_hooks hooks = {.ctx = &l,
				     .registered = h_registered,
				     .fenced = h_fenced,
				     .hosts = h_hosts,
				     .reap = h_reap};
	struct member_config cfg = {.etcd = endpoint,
				    .host_id = "h1",
				    .address = "127.0.0.1:1",
				    .ttl_s = 2,
				    .prefix = "/member-test",
				    .state_dir = dir};
	struct err e = {0};
	struct member *m = member_create(&cfg, &hooks, &e);
	assert_non_null(m);
	assert_int_equal(member_start(m, 10, &e), 0);
	int64_t epoch = member_epoch(m);
	assert_true(epoch > 0);
	assert_int_equal(epoch, l.last_epoch);
	/* The only host: it becomes the leader. */
	int64_t until = clock_now_ms() + 5000;
	while (!member_leader(m) && clock_now_ms() < until)
		clock_sleep_ms(20);
	assert_true(member_leader(m));

	/* Two hosts in the database: one whose lease lives (renewed here), one
	 * whose lease is gone. Only the second is reaped, with its epoch. */
	struct etcd *c = etcd_open(endpoint, 1000, &e);
	int64_t alive = 0, gone = 0;
	assert_int_equal(etcd_lease_grant(c, 60, &alive, &e), 0);
	assert_int_equal(etcd_lease_grant(c, 60, &gone, &e), 0);
	assert_int_equal(etcd_lease_revoke(c, gone, &e), 0);
	pthread_mutex_lock(&l.lock);
	l.hosts[0] = (struct member_host){.id = "h1", .epoch = epoch};
	l.hosts[1] = (struct member_host){.id = "alive", .epoch = alive};
	l.hosts[2] = (struct member_host){.id = "dead", .epoch = gone};
	l.nhosts = 3;
	pthread_mutex_unlock(&l.lock);
	assert_int_equal(wait_for(&l, &l.reaped, 1, 5000), 1);
	assert_string_equal(l.reaped_host, "dead");
	assert_int_equal(l.reaped_epoch, gone);
	/* A few more rounds: nothing else is reaped. */
	clock_sleep_ms(1500);
	assert_int_equal(l.reaped, 1);

	/* Fenced from outside (its tick touched no row): the hook, then a new epoch. */
	member_fence(m, epoch, "test: reaped");
	assert_int_equal(wait_for(&l, &l.fenced, 1, 5000), 1);
	assert_int_equal(l.fenced_epoch, epoch);
	assert_int_equal(wait_for(&l, &l.registered, 2, 5000), 2);
	int64_t epoch2 = member_epoch(m);
	assert_true(epoch2 > 0 && epoch2 != epoch);
	/* The old lease was given back. */
	int ttl = 0;
	assert_int_equal(etcd_lease_ttl(c, epoch, &ttl, &e), 0);
	assert_int_equal(ttl, -1);

	/* Cut off from etcd: within a TTL (plus a round) it is not live any
	 * more, and the hook stops everything; back, it registers anew. */
	kill(etcd_pid, SIGSTOP);
	int64_t cut = clock_now_ms();
	while (member_epoch(m) && clock_now_ms() - cut < 4000)
		clock_sleep_ms(10);
	assert_int_equal(member_epoch(m), 0);
	assert_true(clock_now_ms() - cut <= 2000 + 100);
	assert_int_equal(wait_for(&l, &l.fenced, 2, 6000), 2);
	assert_int_equal(l.fenced_epoch, epoch2);
	assert_non_null(strstr(l.why, "could not be renewed"));
	kill(etcd_pid, SIGCONT);
	assert_int_equal(wait_for(&l, &l.registered, 3, 10000), 3);
	assert_true(member_epoch(m) > 0 && member_epoch(m) != epoch2);

	/* A restart within the TTL keeps the epoch (and so its computers). */
	int64_t epoch3 = member_epoch(m);
	member_destroy(m);
	m = member_create(&cfg, &hooks, &e);
	assert_int_equal(member_start(m, 10, &e), 0);
	assert_int_equal(member_epoch(m), epoch3);
	/* Leaving gives the lease back at once. */
	member_leave(m);
	assert_int_equal(etcd_lease_ttl(c, epoch3, &ttl, &e), 0);
	assert_int_equal(ttl, -1);
	member_destroy(m);
	etcd_lease_revoke(c, alive, NULL);
	etcd_close(c);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_leases),
	    cmocka_unit_test(test_create_if_absent),
	    cmocka_unit_test(test_dead_endpoint_skipped),
	    cmocka_unit_test(test_member),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
