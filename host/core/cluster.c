/*
 * cluster: the core's side of a cluster of hosts (docs/cluster.md).
 *
 * Each host serves the whole API. What it holds itself (its computers, in
 * c->rts) it serves as one host does; a computer another host holds is
 * reached through that host's REST API (cluster-ops.c). Here:
 *
 *   - membership: the member (member.h) and its hooks: registering this
 *     host under its epoch (store_host_register), stopping every computer
 *     when fenced, the leader's reaping of hosts whose lease is gone
 *     (store_host_reap);
 *   - the catalog, memory the API's event loop reads (under c->lock): the
 *     hosts and their addresses, the stream-token keys, the stream
 *     revocations (pushed by the store as they commit on any host);
 *   - where a computer is: this host's memory, a short-lived cache of
 *     which host holds which computer, else the database.
 *
 * The database is the truth for where a computer is (its host and epoch),
 * etcd for who is alive.
 */
#include "cluster-internal.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/crypto.h>

#include "clock.h"
#include "member.h"

/* ---- membership's hooks (the member's thread) ------------------------------------------- */

static int cl_registered(void *ctx, int64_t epoch, bool reused, struct err *e)
{
	struct core *c = ctx;
	struct core_cluster *cl = c->cluster;
	struct core_capacity cap;
	core_capacity(c, &cap);
	struct store_host h = {.epoch = epoch,
			       .cpu_overcommit_pct = c->cfg.cluster.cpu_overcommit_pct > 0
							 ? c->cfg.cluster.cpu_overcommit_pct
							 : CL_OVERCOMMIT,
			       .capacity = {cap.millicpus, cap.memory_mb, cap.disk_mb}};
	snprintf(h.id, sizeof h.id, "%s", c->host_id);
	snprintf(h.address, sizeof h.address, "%s", c->cfg.cluster.address);
	/* At start, the computers of our previous epoch (cubicled restarted,
	 * they kept running) are ours again unless reaped meanwhile; after a
	 * fence they were stopped: they are lost. */
	int moved = 0;
	bool adopt = !cl->fenced_once;
	if (store_host_register(c->store, &h, adopt, &moved, e) < 0)
		return -1;
	if (moved)
		fprintf(stderr,
			"cubicled: cluster: %d computers of this host's previous epoch %s\n", moved,
			adopt ? "adopted" : "lost");
	(void)reused;
	return 0;
}

static void cl_fenced(void *ctx, int64_t epoch, const char *why)
{
	core_cluster_fenced(ctx, epoch, why);
}

static int cl_hosts(void *ctx, struct member_host **out, size_t *n, struct err *e)
{
	struct core *c = ctx;
	struct store_host *h = NULL;
	size_t nh = 0;
	*out = NULL;
	*n = 0;
	if (store_host_list(c->store, &h, &nh, e) < 0)
		return -1;
	*out = calloc(nh ? nh : 1, sizeof **out);
	if (!*out) {
		free(h);
		return err_set(e, ERR_INTERNAL, "out of memory");
	}
	for (size_t i = 0; i < nh; i++) {
		if (h[i].epoch <= 0)
			continue;
		snprintf((*out)[*n].id, sizeof(*out)[*n].id, "%s", h[i].id);
		(*out)[*n].epoch = h[i].epoch;
		(*n)++;
	}
	free(h);
	return 0;
}

static int cl_reap(void *ctx, const char *host, int64_t epoch, struct err *e)
{
	struct core *c = ctx;
	int lost = 0;
	int rc = store_host_reap(c->store, host, epoch, "its host died: its lease in etcd expired",
				 &lost, e);
	if (rc == 1)
		fprintf(stderr,
			"cubicled: cluster: host %s (epoch %" PRId64 "): %d computers lost\n", host,
			epoch, lost);
	return rc < 0 ? -1 : 0;
}

/* ---- stream revocations (the store's listener thread) ------------------------------------- */

void core_cluster_revoked(struct core *c, const char *computer, int64_t revoked_ms)
{
	struct core_cluster *cl = c->cluster;
	bool fresh = false;
	pthread_mutex_lock(&c->lock);
	size_t i = 0;
	while (cl && i < cl->nrevoked && strcmp(cl->revoked[i].id, computer) != 0)
		i++;
	if (cl && i == cl->nrevoked) {
		struct cl_revoked *grown = realloc(cl->revoked, (cl->nrevoked + 1) * sizeof *grown);
		if (grown) {
			cl->revoked = grown;
			snprintf(cl->revoked[i].id, sizeof cl->revoked[i].id, "%s", computer);
			cl->revoked[i].ms = 0;
			cl->nrevoked++;
		}
	}
	if (cl && i < cl->nrevoked && cl->revoked[i].ms < revoked_ms) {
		cl->revoked[i].ms = revoked_ms;
		fresh = true;
	}
	struct core_rt *r = core_rt_find(c, computer);
	if (r && r->revoked_ms < revoked_ms)
		r->revoked_ms = revoked_ms;
	pthread_mutex_unlock(&c->lock);
	/* Made on any host: this host's streams of that computer close too,
	 * relays to its holder included. */
	if (fresh && c->close_streams)
		c->close_streams(c->close_streams_ctx, computer);
}

static void cl_revoked(void *ctx, const char *computer, int64_t revoked_ms)
{
	core_cluster_revoked(ctx, computer, revoked_ms);
}

/* ---- opening and closing --------------------------------------------------------------------- */

int core_cluster_open(struct core *c, struct err *e)
{
	const struct core_cluster_config *cfg = &c->cfg.cluster;
	if (!cfg->etcd)
		return 0;
	if (strcmp(store_backend(c->store), "postgresql") != 0)
		return err_set(
		    e, ERR_INVALID,
		    "a cluster shares its state in PostgreSQL: --database postgresql://...");
	struct core_cluster *cl = calloc(1, sizeof *cl);
	if (!cl)
		return err_set(e, ERR_INTERNAL, "out of memory");
	cl->c = c;
	cl->nodeauth = cfg->nodeauth;
	struct member_config mc = {.etcd = cfg->etcd,
				   .host_id = c->host_id,
				   .address = cfg->address,
				   .ttl_s = cfg->ttl_s,
				   .state_dir = c->cfg.state_dir};
	struct member_hooks hooks = {.ctx = c,
				     .registered = cl_registered,
				     .fenced = cl_fenced,
				     .hosts = cl_hosts,
				     .reap = cl_reap};
	cl->member = member_create(&mc, &hooks, e);
	if (!cl->member) {
		free(cl);
		return -1;
	}
	c->cluster = cl;
	store_on_stream_revoke(c->store, cl_revoked, c);
	/* Registered before anything else: recovery needs the epoch, and
	 * what the database says this host holds under it. */
	if (member_start(cl->member, 60, e) < 0)
		return -1;
	core_cluster_refresh(c);
	return 0;
}

void core_cluster_close(struct core *c)
{
	struct core_cluster *cl = c->cluster;
	if (!cl || !cl->member)
		return;
	/* The lease is kept, not given back: a restart within its TTL adopts
	 * this host's computers (they keep running meanwhile). */
	struct member *m = cl->member;
	member_stop(m);
	pthread_mutex_lock(&c->lock);
	cl->stopped = true;
	pthread_mutex_unlock(&c->lock);
	store_on_stream_revoke(c->store, NULL, NULL);
}

void core_cluster_free(struct core *c)
{
	struct core_cluster *cl = c->cluster;
	if (!cl)
		return;
	core_cluster_close(c);
	member_destroy(cl->member);
	c->cluster = NULL;
	free(cl->hosts);
	free(cl->revoked);
	OPENSSL_cleanse(cl->keys, sizeof cl->keys);
	free(cl);
}

int64_t core_cluster_epoch(struct core *c)
{
	return c->cluster ? member_epoch(c->cluster->member) : 0;
}

void core_cluster_fence(struct core *c, int64_t epoch, const char *why)
{
	if (c->cluster)
		member_fence(c->cluster->member, epoch, why);
}

/* ---- the catalog ------------------------------------------------------------------------------
 */

void core_cluster_refresh(struct core *c)
{
	struct core_cluster *cl = c->cluster;
	if (!cl)
		return;
	struct store_host *hosts = NULL;
	size_t nh = 0;
	if (store_host_list(c->store, &hosts, &nh, NULL) == 0) {
		pthread_mutex_lock(&c->lock);
		free(cl->hosts);
		cl->hosts = hosts;
		cl->nhosts = nh;
		pthread_mutex_unlock(&c->lock);
	}
	/* The current key (made by the first host that asks), kept with the
	 * few before it: tokens they signed verify until they expire. */
	struct store_stream_key k;
	if (store_stream_key_current(c->store, NULL, &k, NULL) == 0) {
		pthread_mutex_lock(&c->lock);
		if (!cl->nkeys || strcmp(cl->keys[0].id, k.id) != 0) {
			size_t keep = cl->nkeys < CL_KEYS ? cl->nkeys : CL_KEYS - 1;
			memmove(&cl->keys[1], &cl->keys[0], keep * sizeof cl->keys[0]);
			cl->keys[0] = k;
			cl->nkeys = keep + 1;
		}
		pthread_mutex_unlock(&c->lock);
		OPENSSL_cleanse(&k, sizeof k);
	}
}

int core_host_address(struct core *c, const char *host, char *out, size_t len)
{
	int rc = -1;
	pthread_mutex_lock(&c->lock);
	struct core_cluster *cl = c->cluster;
	for (size_t i = 0; cl && i < cl->nhosts && rc < 0; i++) {
		if (strcmp(cl->hosts[i].id, host) == 0 && cl->hosts[i].epoch > 0) {
			snprintf(out, len, "%s", cl->hosts[i].address);
			rc = 0;
		}
	}
	pthread_mutex_unlock(&c->lock);
	return rc;
}

int core_stream_key(struct core *c, const char *kid, unsigned char key[32])
{
	int rc = -1;
	pthread_mutex_lock(&c->lock);
	struct core_cluster *cl = c->cluster;
	for (size_t i = 0; cl && i < cl->nkeys && rc < 0; i++) {
		if (strcmp(cl->keys[i].id, kid) == 0) {
			memcpy(key, cl->keys[i].secret, STORE_STREAM_KEY_BYTES);
			rc = 0;
		}
	}
	pthread_mutex_unlock(&c->lock);
	return rc;
}

int core_stream_key_now(struct core *c, char kid[24], unsigned char key[32])
{
	int rc = -1;
	pthread_mutex_lock(&c->lock);
	struct core_cluster *cl = c->cluster;
	if (cl && cl->nkeys) {
		snprintf(kid, 24, "%s", cl->keys[0].id);
		memcpy(key, cl->keys[0].secret, STORE_STREAM_KEY_BYTES);
		rc = 0;
	}
	pthread_mutex_unlock(&c->lock);
	return rc;
}

bool core_stream_revoked(struct core *c, const char *id, int64_t issued)
{
	bool revoked = false;
	pthread_mutex_lock(&c->lock);
	struct core_cluster *cl = c->cluster;
	for (size_t i = 0; cl && i < cl->nrevoked; i++)
		if (strcmp(cl->revoked[i].id, id) == 0 && issued <= cl->revoked[i].ms)
			revoked = true;
	struct core_rt *r = core_rt_find(c, id);
	if (r && issued <= r->revoked_ms)
		revoked = true;
	pthread_mutex_unlock(&c->lock);
	return revoked;
}

int64_t core_cluster_issue_ms(struct core *c, const char *id)
{
	int64_t now = clock_wall_ms();
	pthread_mutex_lock(&c->lock);
	struct core_cluster *cl = c->cluster;
	for (size_t i = 0; cl && i < cl->nrevoked; i++)
		if (strcmp(cl->revoked[i].id, id) == 0 && now <= cl->revoked[i].ms)
			now = cl->revoked[i].ms + 1;
	pthread_mutex_unlock(&c->lock);
	return now;
}

/* ---- where a computer is --------------------------------------------------------------------- */

void cl_where_put(struct core *c, const char *id, const char *host)
{
	pthread_mutex_lock(&c->lock);
	struct core_cluster *cl = c->cluster;
	struct cl_where *w = NULL;
	for (unsigned i = 0; cl && i < CL_WHERE && !w; i++)
		if (strcmp(cl->where[i].id, id) == 0)
			w = &cl->where[i];
	if (cl && !w)
		w = &cl->where[cl->where_next++ % CL_WHERE];
	if (w) {
		snprintf(w->id, sizeof w->id, "%s", id);
		snprintf(w->host, sizeof w->host, "%s", host);
		w->until_ms = clock_now_ms() + CL_WHERE_MS;
	}
	pthread_mutex_unlock(&c->lock);
}

void core_cluster_forget(struct core *c, const char *id)
{
	pthread_mutex_lock(&c->lock);
	struct core_cluster *cl = c->cluster;
	for (unsigned i = 0; cl && i < CL_WHERE; i++)
		if (strcmp(cl->where[i].id, id) == 0)
			cl->where[i].id[0] = 0;
	pthread_mutex_unlock(&c->lock);
}

int core_cluster_holder(struct core *c, const char *id, const char *ws, char *address, size_t alen,
			struct err *e)
{
	if (!c->cluster)
		return 0;
	char host[64] = "";
	int64_t now = clock_now_ms();
	pthread_mutex_lock(&c->lock);
	struct core_cluster *cl = c->cluster;
	struct core_rt *r = core_rt_find(c, id);
	bool local = r && r->state != COMPUTER_DELETED && r->state != COMPUTER_LOST;
	for (unsigned i = 0; cl && !local && i < CL_WHERE && !host[0]; i++)
		if (strcmp(cl->where[i].id, id) == 0 && cl->where[i].until_ms > now)
			snprintf(host, sizeof host, "%s", cl->where[i].host);
	/* A cached host that is not up any more says nothing: ask again. */
	bool up = false;
	for (size_t i = 0; cl && host[0] && i < cl->nhosts; i++)
		if (strcmp(cl->hosts[i].id, host) == 0 && cl->hosts[i].epoch > 0)
			up = true;
	if (!up)
		host[0] = 0;
	pthread_mutex_unlock(&c->lock);
	if (local)
		return 0;
	/* The cache is by id alone: the workspace check is the holder's (a
	 * call forwarded there with another workspace is a 404 there). */
	if (!host[0]) {
		struct store_computer sc = {0};
		if (store_computer_get(c->store, id, ws, &sc, e) < 0)
			return -1;
		snprintf(host, sizeof host, "%s", sc.host);
		enum computer_state st = sc.state;
		store_computer_clear(&sc);
		if (st == COMPUTER_LOST || st == COMPUTER_DELETED || !host[0] ||
		    strcmp(host, c->host_id) == 0)
			return 0; /* nobody else holds it: the local path says why */
		cl_where_put(c, id, host);
	}
	if (core_host_address(c, host, address, alen) < 0)
		return err_set(
		    e, ERR_UNAVAILABLE,
		    "computer %s is on host %s, which is down (its computers become lost "
		    "when its lease expires)",
		    id, host);
	return 1;
}
