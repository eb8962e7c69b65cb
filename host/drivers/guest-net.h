/*
 * guest-net: what a guest's network may reach (the egress policy), for both
 * drivers.
 *
 * Both drivers give the guest user-mode networking (slirp4netns, QEMU's
 * libslirp): the guest's connections are made by a process on the host, in
 * the host's network namespace, so without more a guest reaches every
 * service the host itself reaches — the host's own addresses (everything
 * bound to 0.0.0.0 or to a docker bridge), the link-local range (a cloud
 * host's metadata service, 169.254.169.254), private networks behind the
 * host, CGNAT (another cloud's metadata service at 100.100.100.200).
 *
 * The policy is a list of IPv4 prefixes, each "deny" or "allow", that the
 * guest's routing table applies before a packet reaches slirp: a table of
 * its own (GUEST_NET_TABLE, looked up by a rule before main) holding a
 * "prohibit" route per deny (EACCES at connect) and a "throw" route per
 * allow (the lookup goes on to main: the default route). The most specific
 * prefix wins, as routes do. Made from, in order of strength:
 *
 *   1. always denied, whatever any allow says: the host's own IPv4
 *      addresses (/32, taken at each start) and 169.254.0.0/16;
 *   2. the explicit denies (cubicled --egress-deny, the workspace's
 *      egress_deny): an allow inside one (or equal to it) is dropped;
 *   3. the explicit allows (--egress-allow, egress_allow): holes in
 *   4. the default denies (guest_net_defaults: private ranges, CGNAT,
 *      special-purpose ranges, known metadata addresses). An allow equal to
 *      a default deny replaces it; a default deny more specific than an
 *      allow (a metadata /32 inside an allowed range) still wins.
 *
 * slirp's own network 10.0.2.0/24 (gateway 10.0.2.2, DNS 10.0.2.3, the
 * guest) is always an allow, so no deny of 10/8 or wider cuts the guest off
 * its gateway; prefixes inside it are refused in lists. IPv6 is off in
 * both drivers (no address, no route), so lists are IPv4 only.
 *
 * The host's loopback is the other way in (slirp maps the guest's 10.0.2.2
 * to it): slirp4netns closes it with --disable-host-loopback, QEMU 7.2 has
 * no such option, so cubicle-init adds policy rules in the VM (see
 * host/README.md).
 */
#ifndef CUBICLE_GUEST_NET_H
#define CUBICLE_GUEST_NET_H

#include <stddef.h>
#include <stdint.h>

#include "err.h"

/* Prefixes in one list an operator or admin gives (a flag, a workspace field). */
#define GUEST_NET_LIST_MAX 32
/* The host's addresses kept from guests, link-local included. */
#define GUEST_NET_HOST_MAX 64
/* Entries of a merged policy: every source at its largest. */
#define GUEST_NET_POLICY_MAX (GUEST_NET_HOST_MAX + 4 * GUEST_NET_LIST_MAX + 32)
/* The routing table the policy's routes live in (a rule looks it up before main). */
#define GUEST_NET_TABLE 1000
/* That rule's preference: after the VM's rules for 10.0.2.2 (100, 101). */
#define GUEST_NET_RULE_PREF 200

struct guest_net_prefix {
	uint32_t addr; /* network byte order, host bits zero */
	unsigned char len;
};

struct guest_net_list {
	struct guest_net_prefix v[GUEST_NET_HOST_MAX];
	int n;
};

struct guest_net_route {
	uint32_t addr; /* network byte order */
	unsigned char len;
	unsigned char allow; /* 1: throw (on to main), 0: prohibit */
};

struct guest_net_policy {
	struct guest_net_route v[GUEST_NET_POLICY_MAX];
	int n;
};

/*
 * Parses one prefix of a list: "a.b.c.d/len" or "a.b.c.d" (/32). Refuses,
 * with *why saying so: anything not a dotted-quad IPv4 prefix (IPv6 has its
 * own message: it is off in guests), host bits set ("10.213.7.1/30": did
 * you mean 10.213.7.0/30?), and prefixes inside slirp's 10.0.2.0/24. why
 * is a static string or, for host bits, written to whybuf.
 */
int guest_net_parse(const char *text, struct guest_net_prefix *out, char *whybuf, size_t whylen);

/*
 * Appends text's prefix to l (a duplicate is kept once). -1 with e
 * (ERR_INVALID, param) naming the bad one, or the list being longer than
 * GUEST_NET_LIST_MAX. For allows (allow != 0) it also refuses prefixes in
 * 169.254.0.0/16: link-local is always denied.
 */
int guest_net_list_add(struct guest_net_list *l, const char *text, int allow, const char *param,
		       struct err *e);

/* "a,b,c" (commas, no spaces; "" = empty) into l (cleared first), each through
 * guest_net_list_add. */
int guest_net_list_parse(struct guest_net_list *l, const char *csv, int allow, const char *param,
			 struct err *e);

/* l's prefixes appended to to (duplicates kept once; no limit check past
 * the array's size: -1 with e if it is full). */
int guest_net_list_merge(struct guest_net_list *to, const struct guest_net_list *l, struct err *e);

/* "a.b.c.d/len,..." (full form, for JSON and the store). -1 if it does not fit. */
int guest_net_list_format(const struct guest_net_list *l, char *out, size_t len);

/* The default denies (the table in host/README.md). */
const struct guest_net_list *guest_net_defaults(void);

/*
 * Fills host with 169.254.0.0/16 and each IPv4 address of the host's
 * interfaces (/32), without duplicates, except the loopback range (the
 * guest's 127.0.0.1 is its own) and slirp's 10.0.2.0/24 (the guest's
 * traffic there never leaves slirp as a host connection). Addresses the
 * host gains later are not in it: the list is taken at each start.
 */
int guest_net_host(struct guest_net_list *host, struct err *e);

/*
 * The policy of the order above, from the always-denied list (host), the
 * explicit allows and denies (NULL = none), and guest_net_defaults().
 * Minimal: an entry whose nearest enclosing entry does the same (or, for an
 * allow, that no deny encloses) is left out, so the host's private
 * addresses inside 10/8 cost no route. Sorted by address, then length.
 */
int guest_net_policy_make(struct guest_net_policy *p, const struct guest_net_list *host,
			  const struct guest_net_list *allow, const struct guest_net_list *deny,
			  struct err *e);

/* guest_net_host + guest_net_policy_make. */
int guest_net_policy_build(struct guest_net_policy *p, const struct guest_net_list *allow,
			   const struct guest_net_list *deny, struct err *e);

/*
 * The policy for a kernel command line, compact: the denies into deny and
 * the allows into allow, comma-separated, zero octets and "/32" left out
 * where iproute2 reads the same prefix ("10/8", "172.16/12",
 * "100.100.100.200"). -1 if either does not fit.
 */
int guest_net_policy_format(const struct guest_net_policy *p, char *deny, size_t deny_len,
			    char *allow, size_t allow_len);

/* Whether addr (network byte order) is denied by p (longest match; none = allowed). */
int guest_net_policy_denies(const struct guest_net_policy *p, uint32_t addr);

/*
 * In the calling thread's network namespace: brings lo up, turns IPv6 off
 * for every interface made from now on (the guest's tap; lo keeps ::1),
 * adds the policy's routes to GUEST_NET_TABLE and the rule that looks it up
 * before main. Only system calls on the caller's memory (safe between fork
 * and exec). 0, or -1 with errno and *step naming what failed.
 */
int guest_net_apply(const struct guest_net_policy *p, const char **step);

#endif
