/*
 * member: this host's membership in a cluster of cubicled (docs/cluster.md).
 *
 * Each host holds an etcd lease of ttl_s seconds, renewed every ttl_s/4;
 * the lease id is the host's *epoch*: everything the host writes to the
 * shared database is fenced by it (its ledger tick updates only rows of
 * its own epoch). The host is live while its lease surely is: until a TTL
 * after the last renewal it *sent* (etcd counts from when it received it,
 * later), so the host always believes itself dead no later than etcd does.
 *
 * A host that loses its lease (etcd says it is gone), or cannot renew it
 * for a whole TTL (cut off from etcd: it must assume the worst), is
 * *fenced*: the fenced hook stops its computers and its billing, then it
 * registers again with a new lease, a new epoch.
 *
 * One host is the leader: the one whose lease holds the key <prefix>/leader
 * (created in a transaction only if absent; it goes when its holder's lease
 * does). The leader reaps: a host of the database whose epoch is not among
 * etcd's live leases, and for which LeaseTimeToLive answers -1 (gone, not
 * merely unreachable: an error proves nothing), is handed to the reap hook
 * with that epoch, and the hook acts only on rows of that epoch (a host that
 * registered again meanwhile has a new one and is not touched). Comparing two
 * snapshots of the host list is not enough: a prototype that did reaped a
 * host re-registering between them.
 *
 * A restarted cubicled whose lease is still alive (it was down for less
 * than a TTL) keeps it, and with it its computers: the lease id is kept in
 * <state-dir>/cluster.epoch.
 *
 * Two threads of the member's own: the lease's (registration, renewals,
 * fencing: the registered and fenced hooks run there) and the leader's
 * (the leader key and the reaper: the hosts and reap hooks, which wait on
 * the database). Apart, so that a renewal never waits behind the database
 * (a PostgreSQL failover takes seconds: the lease of a live host would
 * expire).
 */
#ifndef CUBICLE_CLUSTER_MEMBER_H
#define CUBICLE_CLUSTER_MEMBER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "err.h"

struct member;

struct member_config {
	const char *etcd;      /* "http://HOST:PORT,..." */
	const char *host_id;   /* this host's id (ident_ok, at most 63) */
	const char *address;   /* where other nodes reach this one's API: "IP:PORT" */
	int ttl_s;	       /* the lease's TTL (default 5, at least 2) */
	const char *prefix;    /* etcd keys under this (default "/cubicle") */
	const char *state_dir; /* cluster.epoch is kept here */
};

/* A host the database knows, as the leader's reaper looks at it. */
struct member_host {
	char id[64];
	int64_t epoch;
};

struct member_hooks {
	void *ctx;
	/* Registered with a new epoch (or kept `epoch` after a restart: reused
	 * true): record this host as up with that epoch. An error is retried
	 * (the lease is given back and a new one taken next time). */
	int (*registered)(void *ctx, int64_t epoch, bool reused, struct err *e);
	/* Fenced: the lease of `epoch` is lost or may be. Stop every computer of
	 * this host and its billing before returning. */
	void (*fenced)(void *ctx, int64_t epoch, const char *why);
	/* The leader's reaper: the hosts the database holds as up (malloc'd
	 * array, freed by the member). */
	int (*hosts)(void *ctx, struct member_host **out, size_t *n, struct err *e);
	/* The lease of host's epoch is gone: its computers of that epoch are
	 * lost, their billing closed at their last tick, its capacity freed. */
	int (*reap)(void *ctx, const char *host, int64_t epoch, struct err *e);
};

/* Checks the configuration and connects nothing yet. */
struct member *member_create(const struct member_config *cfg, const struct member_hooks *hooks,
			     struct err *e);
/*
 * Registers (waiting up to wait_s seconds for etcd and the registered hook)
 * and starts the member's thread. -1 when it could not register in time;
 * the thread then keeps trying.
 */
int member_start(struct member *m, int wait_s, struct err *e);
/* Stops the thread and gives the lease back (the host leaves at once
 * instead of a TTL later: its computers are then reaped as lost). */
void member_leave(struct member *m);
/* Stops the thread, keeping the lease (a restart within a TTL adopts);
 * member_epoch() is 0 from then on. */
void member_stop(struct member *m);
/* member_stop, then frees m. */
void member_destroy(struct member *m);

/* The epoch while the lease is surely alive, else 0. Thread-safe, cheap. */
int64_t member_epoch(struct member *m);
/* Whether this host is the leader now. */
bool member_leader(struct member *m);
/* The leader's host id as last seen ("" when unknown). */
void member_leader_id(struct member *m, char out[64]);
/* ms since the last renewal etcd confirmed (-1 if none yet). */
int64_t member_lease_age_ms(struct member *m);
/* The TTL in seconds. */
int member_ttl(const struct member *m);

/* Fences this host from outside (its ledger tick touched no row: it was
 * reaped): the member's thread calls the fenced hook and registers anew. */
void member_fence(struct member *m, int64_t epoch, const char *why);

#endif
