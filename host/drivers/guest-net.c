/*
 * guest-net: see guest-net.h.
 *
 * The routes are added over a bare rtnetlink socket rather than with libmnl
 * or `ip`: the container's launcher adds them between fork and exec of a
 * multi-threaded service, where nothing may allocate; each message is one
 * fixed-size struct on the stack.
 */
#include "guest-net.h"

#include <arpa/inet.h>
#include <errno.h>
#include <ifaddrs.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <net/if.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

static int deny_has(const struct guest_net_deny *d, uint32_t addr, unsigned char len)
{
	for (int i = 0; i < d->n; i++) {
		uint32_t mask = d->v[i].len ? htonl(~0U << (32 - d->v[i].len)) : 0;
		if (d->v[i].len <= len && (addr & mask) == d->v[i].addr)
			return 1; /* already covered */
	}
	return 0;
}

static int deny_add(struct guest_net_deny *d, const char *text, unsigned char len, struct err *e)
{
	struct in_addr a;
	if (inet_pton(AF_INET, text, &a) != 1)
		return err_set(e, ERR_INTERNAL, "guest network: bad address %s", text);
	if (deny_has(d, a.s_addr, len))
		return 0;
	if (d->n >= GUEST_NET_DENY_MAX)
		return err_set(e, ERR_UNAVAILABLE,
			       "guest network: the host has more than %d IPv4 addresses to "
			       "keep guests away from",
			       GUEST_NET_DENY_MAX - 1);
	d->v[d->n].addr = a.s_addr;
	d->v[d->n].len = len;
	d->n++;
	return 0;
}

int guest_net_deny_host(struct guest_net_deny *d, struct err *e)
{
	d->n = 0;
	if (deny_add(d, "169.254.0.0", 16, e) < 0)
		return -1;
	struct ifaddrs *ifs;
	if (getifaddrs(&ifs) < 0)
		return err_set(e, ERR_UNAVAILABLE, "guest network: getifaddrs: %s",
			       strerror(errno));
	int rc = 0;
	for (struct ifaddrs *i = ifs; i && rc == 0; i = i->ifa_next) {
		if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET)
			continue;
		uint32_t h = ntohl(((struct sockaddr_in *)i->ifa_addr)->sin_addr.s_addr);
		if ((h >> 24) == 127 || (h >> 8) == 0x0a0002) /* 127/8, 10.0.2/24 */
			continue;
		char text[INET_ADDRSTRLEN];
		inet_ntop(AF_INET, &((struct sockaddr_in *)i->ifa_addr)->sin_addr, text,
			  sizeof text);
		rc = deny_add(d, text, 32, e);
	}
	freeifaddrs(ifs);
	return rc;
}

int guest_net_deny_format(const struct guest_net_deny *d, char *out, size_t len)
{
	size_t used = 0;
	if (len)
		out[0] = '\0';
	for (int i = 0; i < d->n; i++) {
		char a[INET_ADDRSTRLEN];
		struct in_addr in = {d->v[i].addr};
		inet_ntop(AF_INET, &in, a, sizeof a);
		int n = snprintf(out + used, len - used, "%s%s/%u", i ? "," : "", a, d->v[i].len);
		if (n < 0 || (size_t)n >= len - used)
			return -1;
		used += (size_t)n;
	}
	return 0;
}

static int lo_up(void)
{
	int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (s < 0)
		return -1;
	struct ifreq ifr;
	memset(&ifr, 0, sizeof(ifr));
	memcpy(ifr.ifr_name, "lo", 3);
	int rc = ioctl(s, SIOCGIFFLAGS, &ifr);
	if (rc == 0) {
		ifr.ifr_flags |= IFF_UP;
		rc = ioctl(s, SIOCSIFFLAGS, &ifr);
	}
	int saved = errno;
	close(s);
	errno = saved;
	return rc;
}

/* One RTM_NEWROUTE "prohibit PREFIX" and its acknowledgement. */
static int add_prohibit(int nl, const struct guest_net_prefix *p, unsigned seq)
{
	struct {
		struct nlmsghdr h;
		struct rtmsg r;
		struct rtattr dst;
		uint32_t addr;
	} req;
	memset(&req, 0, sizeof(req));
	req.h.nlmsg_len = sizeof(req);
	req.h.nlmsg_type = RTM_NEWROUTE;
	req.h.nlmsg_flags = NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE | NLM_F_EXCL;
	req.h.nlmsg_seq = seq;
	req.r.rtm_family = AF_INET;
	req.r.rtm_dst_len = p->len;
	req.r.rtm_table = RT_TABLE_MAIN;
	req.r.rtm_protocol = RTPROT_STATIC;
	req.r.rtm_scope = RT_SCOPE_UNIVERSE;
	req.r.rtm_type = RTN_PROHIBIT;
	req.dst.rta_len = RTA_LENGTH(sizeof(uint32_t));
	req.dst.rta_type = RTA_DST;
	req.addr = p->addr;
	struct sockaddr_nl kernel = {.nl_family = AF_NETLINK};
	if (sendto(nl, &req, sizeof(req), 0, (struct sockaddr *)&kernel, sizeof(kernel)) < 0)
		return -1;
	union {
		struct nlmsghdr h;
		char buf[512];
	} ack;
	for (;;) {
		ssize_t n = recv(nl, &ack, sizeof(ack), 0);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -1;
		if ((size_t)n < NLMSG_LENGTH(sizeof(struct nlmsgerr)) ||
		    ack.h.nlmsg_type != NLMSG_ERROR) {
			errno = EPROTO;
			return -1;
		}
		if (ack.h.nlmsg_seq != seq)
			continue;
		int err = ((struct nlmsgerr *)NLMSG_DATA(&ack.h))->error;
		if (err == 0 || err == -EEXIST)
			return 0;
		errno = -err;
		return -1;
	}
}

int guest_net_apply(const struct guest_net_deny *d, const char **step)
{
	*step = "bring lo up";
	if (lo_up() < 0)
		return -1;
	*step = "open rtnetlink";
	int nl = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE);
	if (nl < 0)
		return -1;
	*step = "add a prohibit route";
	for (int i = 0; i < d->n; i++) {
		if (add_prohibit(nl, &d->v[i], (unsigned)i + 1) < 0) {
			int saved = errno;
			close(nl);
			errno = saved;
			return -1;
		}
	}
	close(nl);
	return 0;
}
