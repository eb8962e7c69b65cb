/*
 * etcd: the few etcd v3 calls a cluster of cubicled needs, over etcd's JSON
 * gateway (grpc-gateway) with libcurl. Debian has no etcd C client; the
 * gateway takes the protocol's messages as JSON, with keys and values in
 * base64 and 64-bit numbers (lease ids, revisions) as decimal strings.
 *
 * Paths are etcd 3.4's: [CLIENT-URL]/v3/... (3.3 used /v3beta, 3.2 /v3alpha;
 * 3.5 keeps /v3 only). Each call goes to the member that answered last and
 * moves on to the next one when a member cannot be reached or cannot serve
 * (no leader, stopping): a dead member costs one connect attempt, not the
 * call. Reads are linearizable (the gateway's default), so a member cut off
 * from the quorum answers with an error, never with stale data.
 *
 * One struct etcd may be used from several threads (calls are independent;
 * connections are shared).
 */
#ifndef CUBICLE_CLUSTER_ETCD_H
#define CUBICLE_CLUSTER_ETCD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "err.h"

#define ETCD_MAX_ENDPOINTS 16
#define ETCD_VALUE_MAX	   1024 /* the values cubicled stores are small JSON */

struct etcd;

/*
 * endpoints: "http://HOST:PORT,http://HOST:PORT,..." (the members' client
 * URLs; https is refused: the gateway's TLS needs certificates this client
 * does not take yet). timeout_ms bounds each attempt at one member
 * (0 = 1000). ERR_INVALID naming "endpoints" for a malformed list.
 */
struct etcd *etcd_open(const char *endpoints, long timeout_ms, struct err *e);
void etcd_close(struct etcd *c);

/* A new lease of ttl_s seconds; *lease is its id (> 0). */
int etcd_lease_grant(struct etcd *c, int ttl_s, int64_t *lease, struct err *e);

/*
 * Renews a lease once (LeaseKeepAlive, one message). *ttl_s is its TTL
 * after the renewal, or 0 when etcd says the lease does not exist (expired
 * or revoked): then it can never be renewed again.
 */
int etcd_lease_keepalive(struct etcd *c, int64_t lease, int *ttl_s, struct err *e);

/* LeaseTimeToLive: *ttl_s the seconds left, -1 when the lease is gone.
 * Only a -1 proves a lease is gone; an error proves nothing. */
int etcd_lease_ttl(struct etcd *c, int64_t lease, int *ttl_s, struct err *e);

int etcd_lease_revoke(struct etcd *c, int64_t lease, struct err *e);

/* Every live lease (LeaseLeases): *ids malloc'd (free it), *n of them. */
int etcd_lease_list(struct etcd *c, int64_t **ids, size_t *n, struct err *e);

/* A key's current value, as etcd has it. */
struct etcd_kv {
	bool found;
	char value[ETCD_VALUE_MAX]; /* decoded, NUL-terminated (truncated past the max) */
	int64_t lease;		    /* 0 = none */
	int64_t create_revision, mod_revision;
};

/* Puts key = value, attached to lease (0 = none). */
int etcd_put(struct etcd *c, const char *key, const char *value, int64_t lease, struct err *e);

/*
 * Creates key = value with lease only if the key does not exist, in one
 * transaction (compare create_revision == 0): *created says whether this
 * call made it; kv (may be NULL) is the key as it is afterwards (ours, or
 * whoever holds it). How one leader is elected: the key lives as long as
 * its holder's lease.
 */
int etcd_create(struct etcd *c, const char *key, const char *value, int64_t lease, bool *created,
		struct etcd_kv *kv, struct err *e);

int etcd_get(struct etcd *c, const char *key, struct etcd_kv *kv, struct err *e);

/* Deletes key only while it is attached to `lease` (a leader stepping
 * down never deletes its successor's key). */
int etcd_delete_if_lease(struct etcd *c, const char *key, int64_t lease, struct err *e);

#endif
