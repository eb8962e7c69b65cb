/*
 * cluster-internal: what cluster.c (membership, the catalog, where a
 * computer is) and cluster-ops.c (forwarding, booting what was placed on
 * another host, hosts, drain, recreate) share: the core's cluster state.
 */
#ifndef CUBICLE_CLUSTER_INTERNAL_H
#define CUBICLE_CLUSTER_INTERNAL_H

#include "core-internal.h"

#define CL_WHERE       1024 /* computer → host cache entries */
#define CL_WHERE_MS    5000 /* how long one is trusted without asking */
#define CL_KEYS	       8    /* stream-token keys kept for verifying */
#define CL_PLACE_TRIES 3    /* hosts a create tries before it fails */
#define CL_OVERCOMMIT  400  /* vCPUs placed per physical one, in % (--capacity) */
#define CL_MAX_FORWARD 9000 /* a forwarded path and query */

struct cl_where {
	char id[40], host[64];
	int64_t until_ms;
};

struct cl_revoked {
	char id[40];
	int64_t ms;
};

struct core_cluster {
	struct core *c;
	struct member *member;
	struct nodeauth *nodeauth;
	bool fenced_once; /* member thread: a registration after a fence adopts nothing */
	bool stopped;	  /* under c->lock: the member stopped (a clean shutdown) */
	/* The catalog, under c->lock: */
	struct store_host *hosts;
	size_t nhosts;
	struct cl_where where[CL_WHERE];
	unsigned where_next;
	struct store_stream_key keys[CL_KEYS];
	size_t nkeys; /* keys[0]: the current one, which signs */
	struct cl_revoked *revoked;
	size_t nrevoked;
};

/* Remembers that host holds computer id, for CL_WHERE_MS (cluster.c). */
void cl_where_put(struct core *c, const char *id, const char *host);

#endif
