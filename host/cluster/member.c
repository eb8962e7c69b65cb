/*
 * member: the lease, its renewal, fencing, the leader key and the reaper
 * (member.h).
 */
#include "member.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "clock.h"
#include "etcd.h"
#include "ident.h"

struct member {
	struct member_config cfg;
	struct member_hooks hooks;
	char host_id[64], address[128], prefix[128], epoch_file[600];
	struct etcd *etcd;
	int interval_ms; /* between renewals: a quarter of the TTL */

	pthread_mutex_t lock;
	pthread_cond_t wake;
	bool stop, started, leave;
	pthread_t thread, leader_thread; /* the lease's; the leader key's and the reaper's */
	/* Under lock: what other threads read. */
	int64_t epoch;	     /* 0 while not registered */
	int64_t deadline_ms; /* the lease is surely alive before this (clock_now_ms) */
	int64_t renewed_ms;  /* the last renewal etcd confirmed */
	bool leader;
	char leader_id[64];  /* whose the leader key was, last round */
	int64_t fence_epoch; /* member_fence() asked for this epoch (0 = no) */
	char fence_why[200];
	bool registered_once; /* for member_start */
	struct err start_err;
};

struct member *member_create(const struct member_config *cfg, const struct member_hooks *hooks,
			     struct err *e)
{
	if (!cfg->host_id || !ident_ok(cfg->host_id, 63)) {
		err_param(e, "host_id",
			  "host id: 1 to 63 of A-Z a-z 0-9 - _, not '%.80s' (--host-id)",
			  cfg->host_id ? cfg->host_id : "");
		return NULL;
	}
	if (!cfg->address || !*cfg->address || strlen(cfg->address) >= 128) {
		err_param(e, "address", "address: IP:PORT other hosts reach this one at");
		return NULL;
	}
	int ttl = cfg->ttl_s > 0 ? cfg->ttl_s : 5;
	if (ttl < 2 || ttl > 3600) {
		err_param(e, "ttl_s", "cluster TTL: 2 to 3600 seconds, not %d", ttl);
		return NULL;
	}
	struct member *m = calloc(1, sizeof *m);
	if (!m) {
		err_set(e, ERR_INTERNAL, "out of memory");
		return NULL;
	}
	m->cfg = *cfg;
	m->cfg.ttl_s = ttl;
	m->hooks = *hooks;
	snprintf(m->host_id, sizeof m->host_id, "%s", cfg->host_id);
	snprintf(m->address, sizeof m->address, "%s", cfg->address);
	snprintf(m->prefix, sizeof m->prefix, "%s", cfg->prefix ? cfg->prefix : "/cubicle");
	if (cfg->state_dir)
		snprintf(m->epoch_file, sizeof m->epoch_file, "%s/cluster.epoch", cfg->state_dir);
	m->interval_ms = ttl * 1000 / 4;
	/* An attempt at one etcd member never takes more than a renewal's
	 * interval: a dead member costs that much, not the lease. */
	m->etcd = etcd_open(cfg->etcd, m->interval_ms, e);
	if (!m->etcd) {
		free(m);
		return NULL;
	}
	pthread_mutex_init(&m->lock, NULL);
	pthread_cond_init(&m->wake, NULL);
	return m;
}

int member_ttl(const struct member *m)
{
	return m->cfg.ttl_s;
}

int64_t member_epoch(struct member *m)
{
	pthread_mutex_lock(&m->lock);
	int64_t epoch = m->epoch && clock_now_ms() < m->deadline_ms ? m->epoch : 0;
	pthread_mutex_unlock(&m->lock);
	return epoch;
}

bool member_leader(struct member *m)
{
	pthread_mutex_lock(&m->lock);
	bool l = m->leader && m->epoch && clock_now_ms() < m->deadline_ms;
	pthread_mutex_unlock(&m->lock);
	return l;
}

void member_leader_id(struct member *m, char out[64])
{
	pthread_mutex_lock(&m->lock);
	snprintf(out, 64, "%s", m->leader_id);
	pthread_mutex_unlock(&m->lock);
}

int64_t member_lease_age_ms(struct member *m)
{
	pthread_mutex_lock(&m->lock);
	int64_t age = m->renewed_ms ? clock_now_ms() - m->renewed_ms : -1;
	pthread_mutex_unlock(&m->lock);
	return age;
}

void member_fence(struct member *m, int64_t epoch, const char *why)
{
	pthread_mutex_lock(&m->lock);
	if (epoch && epoch == m->epoch && !m->fence_epoch) {
		m->fence_epoch = epoch;
		snprintf(m->fence_why, sizeof m->fence_why, "%s", why);
		pthread_cond_broadcast(&m->wake);
	}
	pthread_mutex_unlock(&m->lock);
}

/* ---- the epoch kept across a restart ----------------------------------------------- */

static int64_t member_epoch_load(struct member *m)
{
	if (!m->epoch_file[0])
		return 0;
	FILE *f = fopen(m->epoch_file, "re");
	if (!f)
		return 0;
	int64_t v = 0;
	if (fscanf(f, "%" SCNd64, &v) != 1)
		v = 0;
	fclose(f);
	return v > 0 ? v : 0;
}

static void member_epoch_save(struct member *m, int64_t epoch)
{
	if (!m->epoch_file[0])
		return;
	char tmp[620];
	snprintf(tmp, sizeof tmp, "%s.tmp", m->epoch_file);
	int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0)
		return;
	bool ok = dprintf(fd, "%" PRId64 "\n", epoch) > 0 && fsync(fd) == 0;
	close(fd);
	if (!ok || rename(tmp, m->epoch_file) < 0)
		unlink(tmp);
}

/* ---- registration, renewal, fencing ------------------------------------------------ */

static void member_set(struct member *m, int64_t epoch, int64_t deadline, int64_t renewed)
{
	pthread_mutex_lock(&m->lock);
	m->epoch = epoch;
	m->deadline_ms = deadline;
	m->renewed_ms = renewed;
	if (!epoch)
		m->leader = false;
	pthread_mutex_unlock(&m->lock);
}

/* The host's key (<prefix>/hosts/<id>, on the lease): who is up, for
 * whoever looks at etcd (the database is what cubicled reads). */
static int member_put_host(struct member *m, int64_t epoch, struct err *e)
{
	char key[300], value[400];
	snprintf(key, sizeof key, "%s/hosts/%s", m->prefix, m->host_id);
	snprintf(value, sizeof value, "{\"address\":\"%s\",\"epoch\":\"%" PRId64 "\"}", m->address,
		 epoch);
	return etcd_put(m->etcd, key, value, epoch, e);
}

/* Takes a lease (or keeps the one a restart left alive) and registers. */
static int member_register(struct member *m, struct err *e)
{
	int64_t t0 = clock_now_ms(), epoch = member_epoch_load(m);
	int ttl = 0;
	bool reused = false;
	if (epoch && etcd_lease_keepalive(m->etcd, epoch, &ttl, NULL) == 0 && ttl > 0) {
		reused = true;
	} else {
		if (etcd_lease_grant(m->etcd, m->cfg.ttl_s, &epoch, e) < 0)
			return -1;
		ttl = m->cfg.ttl_s;
	}
	/* Live from now on (the grant's TTL runs from when etcd made it, after
	 * t0): the registered hook writes with this epoch. */
	member_set(m, epoch, t0 + (int64_t)ttl * 1000, clock_now_ms());
	if (member_put_host(m, epoch, e) < 0 ||
	    m->hooks.registered(m->hooks.ctx, epoch, reused, e) < 0) {
		member_set(m, 0, 0, 0);
		if (!reused)
			etcd_lease_revoke(m->etcd, epoch, NULL);
		return -1;
	}
	member_epoch_save(m, epoch);
	fprintf(stderr, "cubicled: cluster: host %s %s epoch %" PRId64 " (lease TTL %d s)\n",
		m->host_id, reused ? "kept" : "registered with", epoch, m->cfg.ttl_s);
	return 0;
}

/* Stops everything of `epoch` and forgets it; the next round registers. */
static void member_do_fence(struct member *m, int64_t epoch, const char *why)
{
	fprintf(stderr, "cubicled: cluster: host %s fenced (epoch %" PRId64 "): %s\n", m->host_id,
		epoch, why);
	member_set(m, 0, 0, 0);
	m->hooks.fenced(m->hooks.ctx, epoch, why);
	/* Whatever is left of the lease goes (it may still be alive when the
	 * database fenced us, or etcd came back): nothing of ours keeps it. */
	etcd_lease_revoke(m->etcd, epoch, NULL);
	pthread_mutex_lock(&m->lock);
	if (m->fence_epoch == epoch)
		m->fence_epoch = 0;
	pthread_mutex_unlock(&m->lock);
}

/* One renewal; fences when the lease is gone or may be. */
static void member_renew(struct member *m, int64_t epoch)
{
	int64_t sent = clock_now_ms();
	int ttl = 0;
	struct err e = {0};
	if (etcd_lease_keepalive(m->etcd, epoch, &ttl, &e) == 0) {
		if (ttl <= 0) {
			member_do_fence(m, epoch, "etcd says its lease is gone");
			return;
		}
		pthread_mutex_lock(&m->lock);
		if (m->epoch == epoch) {
			m->deadline_ms = sent + (int64_t)ttl * 1000;
			m->renewed_ms = clock_now_ms();
		}
		pthread_mutex_unlock(&m->lock);
		return;
	}
	pthread_mutex_lock(&m->lock);
	bool expired = clock_now_ms() >= m->deadline_ms;
	pthread_mutex_unlock(&m->lock);
	if (expired) {
		char why[600];
		snprintf(why, sizeof why, "its lease could not be renewed for %d s: %.500s",
			 m->cfg.ttl_s, e.message);
		member_do_fence(m, epoch, why);
	}
}

/* ---- the leader and its reaper ------------------------------------------------------ */

static void member_elect(struct member *m, int64_t epoch)
{
	char key[300];
	snprintf(key, sizeof key, "%s/leader", m->prefix);
	bool created = false;
	struct etcd_kv kv;
	struct err e = {0};
	bool leader = false;
	if (etcd_create(m->etcd, key, m->host_id, epoch, &created, &kv, &e) == 0)
		leader = kv.found && kv.lease == epoch;
	else
		return; /* unknown: as we were (our key, if ours, lives as long as our lease) */
	pthread_mutex_lock(&m->lock);
	bool was = m->leader;
	m->leader = leader && m->epoch == epoch;
	snprintf(m->leader_id, sizeof m->leader_id, "%.63s", kv.found ? kv.value : "");
	pthread_mutex_unlock(&m->lock);
	if (leader != was)
		fprintf(stderr, "cubicled: cluster: host %s %s the leader\n", m->host_id,
			leader ? "is" : "is no longer");
}

static bool member_in(const int64_t *ids, size_t n, int64_t id)
{
	for (size_t i = 0; i < n; i++)
		if (ids[i] == id)
			return true;
	return false;
}

/* The leader's round: every host of the database whose lease etcd proves
 * gone is reaped, with the epoch that lease was. */
static void member_reap(struct member *m, int64_t epoch)
{
	struct member_host *hosts = NULL;
	size_t n = 0;
	int64_t *live = NULL;
	size_t nlive = 0;
	struct err e = {0};
	if (m->hooks.hosts(m->hooks.ctx, &hosts, &n, &e) < 0 || n == 0 ||
	    etcd_lease_list(m->etcd, &live, &nlive, &e) < 0) {
		free(hosts);
		return;
	}
	for (size_t i = 0; i < n; i++) {
		if (hosts[i].epoch == epoch || hosts[i].epoch <= 0 ||
		    member_in(live, nlive, hosts[i].epoch))
			continue;
		/* Not in the list: a candidate. Only LeaseTimeToLive's -1 proves
		 * the lease is gone (the list may be older than a lease granted
		 * since, and an error proves nothing). */
		int ttl = 0;
		if (etcd_lease_ttl(m->etcd, hosts[i].epoch, &ttl, NULL) < 0 || ttl != -1)
			continue;
		if (member_epoch(m) != epoch)
			break; /* we stopped being live meanwhile: leave it to the next leader */
		struct err re = {0};
		if (m->hooks.reap(m->hooks.ctx, hosts[i].id, hosts[i].epoch, &re) < 0)
			fprintf(stderr,
				"cubicled: cluster: reaping host %s (epoch %" PRId64 "): %s\n",
				hosts[i].id, hosts[i].epoch, re.message);
		else
			fprintf(stderr,
				"cubicled: cluster: host %s reaped: its lease (epoch %" PRId64
				") is gone\n",
				hosts[i].id, hosts[i].epoch);
	}
	free(hosts);
	free(live);
}

/* ---- the thread ---------------------------------------------------------------------- */

static void *member_main(void *arg)
{
	struct member *m = arg;
	for (;;) {
		int64_t t0 = clock_now_ms();
		pthread_mutex_lock(&m->lock);
		bool stop = m->stop;
		int64_t fence = m->fence_epoch, epoch = m->epoch;
		char why[200];
		snprintf(why, sizeof why, "%s", m->fence_why);
		pthread_mutex_unlock(&m->lock);
		if (stop)
			break;
		if (fence && fence == epoch) {
			member_do_fence(m, epoch, why);
			epoch = 0;
		}
		if (!epoch) {
			struct err e = {0};
			int rc = member_register(m, &e);
			pthread_mutex_lock(&m->lock);
			if (rc == 0)
				m->registered_once = true;
			else
				m->start_err = e;
			pthread_cond_broadcast(&m->wake);
			pthread_mutex_unlock(&m->lock);
			if (rc < 0)
				fprintf(stderr, "cubicled: cluster: cannot register: %s\n",
					e.message);
		} else {
			member_renew(m, epoch);
		}
		/* Next round an interval after this one began (or at once when
		 * fenced from outside or stopped). */
		int64_t next = t0 + m->interval_ms;
		pthread_mutex_lock(&m->lock);
		while (!m->stop && !(m->fence_epoch && m->fence_epoch == m->epoch)) {
			int64_t left = next - clock_now_ms();
			if (left <= 0)
				break;
			struct timespec until = clock_deadline(CLOCK_REALTIME, left);
			pthread_cond_timedwait(&m->wake, &m->lock, &until);
		}
		pthread_mutex_unlock(&m->lock);
	}
	return NULL;
}

/* The leader's thread: the leader key and, while this host holds it, the
 * reaper. Apart from the lease's thread because the reaper waits on the
 * database (a failover takes seconds), and a renewal must never wait
 * behind it: the lease would expire under a live host. */
static void *member_leader_main(void *arg)
{
	struct member *m = arg;
	for (;;) {
		int64_t t0 = clock_now_ms();
		pthread_mutex_lock(&m->lock);
		bool stop = m->stop;
		pthread_mutex_unlock(&m->lock);
		if (stop)
			break;
		int64_t epoch = member_epoch(m);
		if (epoch) {
			member_elect(m, epoch);
			if (member_leader(m))
				member_reap(m, epoch);
		}
		int64_t next = t0 + m->interval_ms;
		pthread_mutex_lock(&m->lock);
		while (!m->stop) {
			int64_t left = next - clock_now_ms();
			if (left <= 0)
				break;
			struct timespec until = clock_deadline(CLOCK_REALTIME, left);
			pthread_cond_timedwait(&m->wake, &m->lock, &until);
		}
		pthread_mutex_unlock(&m->lock);
	}
	return NULL;
}

int member_start(struct member *m, int wait_s, struct err *e)
{
	if (pthread_create(&m->thread, NULL, member_main, m) != 0)
		return err_set(e, ERR_INTERNAL, "cannot start the cluster thread");
	if (pthread_create(&m->leader_thread, NULL, member_leader_main, m) != 0) {
		pthread_mutex_lock(&m->lock);
		m->stop = true;
		pthread_cond_broadcast(&m->wake);
		pthread_mutex_unlock(&m->lock);
		pthread_join(m->thread, NULL);
		return err_set(e, ERR_INTERNAL, "cannot start the cluster's leader thread");
	}
	m->started = true;
	struct timespec until = clock_deadline(CLOCK_REALTIME, wait_s * 1000);
	pthread_mutex_lock(&m->lock);
	while (!m->registered_once)
		if (pthread_cond_timedwait(&m->wake, &m->lock, &until) != 0)
			break;
	bool ok = m->registered_once;
	struct err last = m->start_err;
	pthread_mutex_unlock(&m->lock);
	if (!ok)
		return err_set(e, ERR_UNAVAILABLE, "not registered in the cluster after %d s: %s",
			       wait_s, last.message[0] ? last.message : "etcd did not answer");
	member_elect(m, member_epoch(m)); /* who leads, known from the start */
	return 0;
}

void member_stop(struct member *m)
{
	if (!m->started)
		return;
	pthread_mutex_lock(&m->lock);
	m->stop = true;
	pthread_cond_broadcast(&m->wake);
	pthread_mutex_unlock(&m->lock);
	pthread_join(m->thread, NULL);
	pthread_join(m->leader_thread, NULL);
	m->started = false;
	/* Not live any more for this process: nothing ticks after a stop. */
	pthread_mutex_lock(&m->lock);
	m->deadline_ms = 0;
	pthread_mutex_unlock(&m->lock);
}

void member_leave(struct member *m)
{
	if (!m)
		return;
	pthread_mutex_lock(&m->lock);
	int64_t epoch = m->epoch;
	pthread_mutex_unlock(&m->lock);
	member_stop(m);
	if (epoch) {
		char key[300];
		snprintf(key, sizeof key, "%s/leader", m->prefix);
		etcd_delete_if_lease(m->etcd, key, epoch, NULL);
		etcd_lease_revoke(m->etcd, epoch, NULL);
	}
	member_set(m, 0, 0, 0);
	if (m->epoch_file[0])
		unlink(m->epoch_file);
}

void member_destroy(struct member *m)
{
	if (!m)
		return;
	member_stop(m);
	etcd_close(m->etcd);
	pthread_cond_destroy(&m->wake);
	pthread_mutex_destroy(&m->lock);
	free(m);
}
