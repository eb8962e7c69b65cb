/*
 * nodeauth: how one node of a cluster proves itself to another when it
 * forwards a call (docs/cluster.md, "Node to node").
 *
 * A node never forwards a tenant's API key. It says who the caller is (a
 * workspace, or the admin) in a header of its own, signed with the cluster
 * secret every node holds:
 *
 *   X-Cubicle-Node: n1.<host>.<ms>.<workspace|*>.<nonce>.<mac>
 *
 * mac = base64url(HMAC-SHA256(key, "n1.<host>.<ms>.<workspace|*>.<nonce>\n
 * <METHOD>\n<path and query>")), key = SHA-256 of the secret. The receiving
 * node checks the mac in constant time, that <ms> is within
 * NODEAUTH_WINDOW_MS of its own clock, and that the nonce was not seen in
 * that window (a captured header cannot be replayed), then treats the call
 * as the workspace's, parsed and limited like any other (the bytes are
 * untrusted all the same: the sender may be a compromised node). The
 * header also marks the call as forwarded: its receiver never forwards it
 * again (a stale lookup ends as 421, not a loop).
 *
 * The body is not signed: a node link is meant to be a private network
 * (or TLS: docs/cluster.md); what the signature stops is anyone without
 * the secret speaking for a workspace, and replays.
 */
#ifndef CUBICLE_CLUSTER_NODEAUTH_H
#define CUBICLE_CLUSTER_NODEAUTH_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "err.h"

#define NODEAUTH_HEADER	   "x-cubicle-node"
#define NODEAUTH_MAX	   256	 /* the header's value, with its NUL */
#define NODEAUTH_WINDOW_MS 30000 /* clocks of nodes may differ this much */
/* Nonces remembered: a window's worth at ~2,000 forwarded calls a second
 * into one host; past that (a hash bucket full) a call is refused rather
 * than a replay risked. */
#define NODEAUTH_SEEN_MAX (1u << 17)

struct nodeauth;

/* key material: the secret (at least 32 bytes of text); NULL on OOM or a
 * short secret (e says which). */
struct nodeauth *nodeauth_create(const char *secret, struct err *e);
void nodeauth_destroy(struct nodeauth *a);

/*
 * The header's value for a call of method (upper case) to path_query as
 * workspace ws (NULL: the admin), from host `host`, at now_ms. out holds
 * NODEAUTH_MAX bytes.
 */
int nodeauth_sign(struct nodeauth *a, const char *host, const char *ws, const char *method,
		  const char *path_query, int64_t now_ms, char out[NODEAUTH_MAX], struct err *e);

/*
 * What is signed of a call's path and query: the receiver's view of it,
 * its decoded path and its decoded query fragments ("name=value") in
 * order, each length-prefixed so no two calls share a form. -1 when it
 * does not fit in len.
 */
int nodeauth_canonical(const char *path, const char *const *query, size_t n, char *out, size_t len);
/* The URL path of the same call: path, then the fragments with their name
 * and value escaped. -1 when it does not fit (or out of memory). */
int nodeauth_url(const char *path, const char *const *query, size_t n, char *out, size_t len);

/*
 * Checks a presented value for a call of method to path_query at now_ms:
 * 0 and the claims, or ERR_UNAUTHORIZED saying why (malformed, forged,
 * outside the window, replayed). ws_out gets the workspace ("" = the admin).
 * Records the nonce. Thread-safe; memory only (the router calls it on the
 * event loop).
 */
int nodeauth_verify(struct nodeauth *a, const char *value, const char *method,
		    const char *path_query, int64_t now_ms, char host_out[64], char ws_out[40],
		    bool *admin, struct err *e);

#endif
