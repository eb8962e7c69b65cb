/*
 * hosts: what a host offers and holds (GET /v1/hosts), its drain
 * (POST /v1/hosts/{id}/drain) and the re-creation of a lost computer
 * (POST /v1/computers/{id}/recreate). On one host these answer for that
 * host alone; a cluster's side is cluster.c's.
 */
#include "core-internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "sizes.h"

void core_capacity(struct core *c, struct core_capacity *out)
{
	const struct core_cluster_config *cl = &c->cfg.cluster;
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);
	long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
	struct statvfs vfs;
	out->millicpus = (cl->vcpus > 0 ? cl->vcpus : (cpus > 0 ? cpus : 1)) * 1000LL;
	out->memory_mb = cl->memory_mb > 0	 ? cl->memory_mb
			 : pages > 0 && page > 0 ? (int64_t)pages * page / (1 << 20)
						 : 1024;
	out->disk_mb = cl->disk_mb > 0 ? cl->disk_mb
		       : statvfs(c->cfg.state_dir, &vfs) == 0
			   ? (int64_t)((uint64_t)vfs.f_blocks * vfs.f_frsize >> 20)
			   : 0;
}

/* What computer sc takes of its host while it holds it (running or not:
 * a stopped one keeps its disk, and its place to start again). */
void core_capacity_of(const char *kind, const char *size, struct core_capacity *out)
{
	const struct size *sz = size_find(kind, size, NULL);
	out->millicpus = sz ? sz->millicpus : 0;
	out->memory_mb = sz ? sz->memory_mb : 0;
	out->disk_mb = sz ? sz->disk_mb : 0;
}

json_t *core_capacity_json(const struct core_capacity *cap)
{
	return json_pack("{s:f, s:I, s:I}", "vcpus", cap->millicpus / 1000.0, "memory_mb",
			 (json_int_t)cap->memory_mb, "disk_mb", (json_int_t)cap->disk_mb);
}

const char *core_host_id(struct core *c)
{
	return c->host_id;
}

void core_host_id_init(struct core *c)
{
	if (c->cfg.cluster.host_id) {
		snprintf(c->host_id, sizeof c->host_id, "%s", c->cfg.cluster.host_id);
		return;
	}
	char hn[256] = "";
	gethostname(hn, sizeof hn - 1);
	snprintf(c->host_id, sizeof c->host_id, "%.63s", hn[0] ? hn : "local");
	for (char *p = c->host_id; *p; p++)
		if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
		      (*p >= '0' && *p <= '9') || *p == '-' || *p == '_'))
			*p = '-';
}

/* This host's line of GET /v1/hosts from its own memory. */
static json_t *core_host_local_json(struct core *c)
{
	struct core_capacity cap, used = {0};
	core_capacity(c, &cap);
	int computers = 0, warm = 0;
	pthread_mutex_lock(&c->lock);
	for (struct core_rt *r = c->rts; r; r = r->next) {
		if (r->state == COMPUTER_DELETED || r->state == COMPUTER_ERROR)
			continue;
		struct core_capacity one;
		core_capacity_of(r->kind, r->size, &one);
		used.millicpus += one.millicpus;
		used.memory_mb += one.memory_mb;
		used.disk_mb += one.disk_mb;
		computers++;
		if (c->pool_ws[0] && strcmp(r->ws, c->pool_ws) == 0)
			warm++;
	}
	pthread_mutex_unlock(&c->lock);
	return json_pack("{s:s, s:s, s:s, s:b, s:n, s:o, s:o, s:i, s:i}", "id", c->host_id,
			 "address", "", "state", "up", "leader", 1, "lease_age_ms", "capacity",
			 core_capacity_json(&cap), "allocated", core_capacity_json(&used),
			 "computers", computers, "warm", warm);
}

int core_hosts(struct core *c, json_t **out, struct err *e)
{
	if (c->cluster)
		return core_cluster_hosts(c, out, e);
	json_t *one = core_host_local_json(c);
	*out = json_pack("{s:[o]}", "hosts", one);
	return *out ? 0 : err_set(e, ERR_INTERNAL, "out of memory");
}

int core_host_drain(struct core *c, const char *host, const char *mode, json_t **out, struct err *e)
{
	if (c->cluster)
		return core_cluster_drain(c, host, mode, out, e);
	(void)out;
	return err_set(e, ERR_CONFLICT,
		       "host %s: this cubicled is not in a cluster (--cluster-etcd): there is "
		       "nowhere to drain to",
		       host);
}

int core_recreate(struct core *c, const char *id, const char *ws, json_t **out, struct err *e)
{
	if (c->cluster)
		return core_cluster_recreate(c, id, ws, out, e);
	struct store_computer sc = {0};
	if (store_computer_get(c->store, id, ws, &sc, e) < 0)
		return -1;
	int rc = err_set(e, ERR_CONFLICT,
			 "computer %s is %s: only a lost computer (its host of a cluster died) is "
			 "re-created",
			 id, computer_state_name(sc.state));
	store_computer_clear(&sc);
	return rc;
}
