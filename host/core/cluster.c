/*
 * cluster: the core's side of a cluster of hosts (docs/cluster.md). The
 * store's cluster tables (branch pgstore) are not here yet: a cluster
 * cannot start (main.c refuses --database), and these answer so.
 */
#include "core-internal.h"

int core_cluster_hosts(struct core *c, json_t **out, struct err *e)
{
	(void)c, (void)out;
	return err_set(e, ERR_UNAVAILABLE, "no cluster");
}

int core_cluster_drain(struct core *c, const char *host, const char *mode, json_t **out,
		       struct err *e)
{
	(void)c, (void)host, (void)mode, (void)out;
	return err_set(e, ERR_UNAVAILABLE, "no cluster");
}

int core_cluster_recreate(struct core *c, const char *id, const char *ws, json_t **out,
			  struct err *e)
{
	(void)c, (void)id, (void)ws, (void)out;
	return err_set(e, ERR_UNAVAILABLE, "no cluster");
}
