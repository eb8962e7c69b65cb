/*
 * guest-net: what a guest's network must not reach, for both drivers.
 *
 * Both drivers give the guest user-mode networking (slirp4netns, QEMU's
 * libslirp): the guest's connections are made by a process on the host, in
 * the host's network namespace, so without more a guest reaches every
 * service the host itself reaches — the host's own addresses (everything
 * bound to 0.0.0.0 or to a docker bridge) and the link-local range (a cloud
 * host's metadata service, 169.254.169.254). The deny list is those
 * destinations, as IPv4 prefixes that the guest's routing table answers
 * with "prohibited" (EACCES at connect) before a packet reaches slirp.
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

/* Enough for a host with dozens of bridges; its text form fits a kernel
 * command line (x86: 2048 bytes) with room for the rest. */
#define GUEST_NET_DENY_MAX 64

struct guest_net_prefix {
	uint32_t addr; /* network byte order */
	unsigned char len;
};

struct guest_net_deny {
	struct guest_net_prefix v[GUEST_NET_DENY_MAX];
	int n;
};

/*
 * Fills d with 169.254.0.0/16 and each IPv4 address of the host's
 * interfaces (/32), without duplicates, except the loopback range (the
 * guest's 127.0.0.1 is its own) and slirp's own network 10.0.2.0/24 (the
 * guest's traffic there never leaves slirp as a host connection, and a
 * route over its gateway would break the default route). Addresses the
 * host gains later are not in it: the list is taken at each start.
 */
int guest_net_deny_host(struct guest_net_deny *d, struct err *e);

/* "a.b.c.d/len,..." for a kernel command line; -1 if it does not fit. */
int guest_net_deny_format(const struct guest_net_deny *d, char *out, size_t len);

/*
 * In the calling thread's network namespace: brings lo up and adds a
 * "prohibit" route to the main table for each prefix. Only system calls on
 * the caller's memory (safe between fork and exec). 0, or -1 with errno
 * and *step naming what failed.
 */
int guest_net_apply(const struct guest_net_deny *d, const char **step);

#endif
