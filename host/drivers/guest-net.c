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
#include <fcntl.h>
#include <ifaddrs.h>
#include <linux/fib_rules.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <net/if.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

static uint32_t gn_mask(unsigned len)
{
	return len ? htonl(~0U << (32 - len)) : 0;
}

/* Whether prefix (a, alen) lies inside (b, blen) (equal counts). */
static int gn_inside(uint32_t a, unsigned alen, uint32_t b, unsigned blen)
{
	return alen >= blen && (a & gn_mask(blen)) == b;
}

/* slirp's own network: the guest, its gateway 10.0.2.2 and DNS 10.0.2.3. */
#define GN_SLIRP_NET  htonl(0x0a000200u)
#define GN_SLIRP_LEN  24
#define GN_LINK_LOCAL htonl(0xa9fe0000u)

int guest_net_parse(const char *text, struct guest_net_prefix *out, char *whybuf, size_t whylen)
{
	char addr[INET6_ADDRSTRLEN + 8];
	const char *slash = strchr(text, '/');
	size_t alen = slash ? (size_t)(slash - text) : strlen(text);
	if (alen == 0 || alen >= sizeof addr) {
		snprintf(whybuf, whylen, "not an IPv4 prefix (a.b.c.d/len)");
		return -1;
	}
	memcpy(addr, text, alen);
	addr[alen] = 0;
	struct in_addr a;
	struct in6_addr a6;
	if (inet_pton(AF_INET, addr, &a) != 1) {
		if (inet_pton(AF_INET6, addr, &a6) == 1)
			snprintf(whybuf, whylen,
				 "an IPv6 prefix: IPv6 is off in every guest, lists are IPv4 only");
		else
			snprintf(whybuf, whylen, "not an IPv4 prefix (a.b.c.d/len)");
		return -1;
	}
	unsigned len = 32;
	if (slash) {
		const char *l = slash + 1;
		if (!*l || strlen(l) > 2 || strspn(l, "0123456789") != strlen(l) ||
		    (l[0] == '0' && l[1]) || (len = (unsigned)atoi(l)) > 32) {
			snprintf(whybuf, whylen, "the prefix length must be 0..32");
			return -1;
		}
	}
	if ((a.s_addr & ~gn_mask(len)) != 0) {
		struct in_addr net = {a.s_addr & gn_mask(len)};
		char n[INET_ADDRSTRLEN];
		inet_ntop(AF_INET, &net, n, sizeof n);
		snprintf(whybuf, whylen, "host bits set (did you mean %s/%u?)", n, len);
		return -1;
	}
	if (gn_inside(a.s_addr, len, GN_SLIRP_NET, GN_SLIRP_LEN)) {
		snprintf(whybuf, whylen,
			 "inside 10.0.2.0/24, the guest's own network (its gateway and DNS)");
		return -1;
	}
	out->addr = a.s_addr;
	out->len = (unsigned char)len;
	return 0;
}

static int gn_list_has(const struct guest_net_list *l, const struct guest_net_prefix *p)
{
	for (int i = 0; i < l->n; i++)
		if (l->v[i].addr == p->addr && l->v[i].len == p->len)
			return 1;
	return 0;
}

int guest_net_list_add(struct guest_net_list *l, const char *text, int allow, const char *param,
		       struct err *e)
{
	struct guest_net_prefix p;
	char why[160];
	if (guest_net_parse(text, &p, why, sizeof why) < 0)
		return err_param(e, param, "%s: '%.60s' is %s", param, text, why);
	if (allow && gn_inside(p.addr, p.len, GN_LINK_LOCAL, 16))
		return err_param(e, param,
				 "%s: '%.60s' is link-local (169.254.0.0/16), which guests never "
				 "reach",
				 param, text);
	if (gn_list_has(l, &p))
		return 0;
	if (l->n >= GUEST_NET_LIST_MAX)
		return err_param(e, param, "%s: more than %d prefixes", param, GUEST_NET_LIST_MAX);
	l->v[l->n++] = p;
	return 0;
}

int guest_net_list_parse(struct guest_net_list *l, const char *csv, int allow, const char *param,
			 struct err *e)
{
	l->n = 0;
	const char *s = csv ? csv : "";
	while (*s) {
		size_t n = strcspn(s, ",");
		char one[64];
		if (n == 0 || n >= sizeof one)
			return err_param(e, param, "%s: '%.*s' is not an IPv4 prefix (a.b.c.d/len)",
					 param, (int)(n < 60 ? n : 60), s);
		memcpy(one, s, n);
		one[n] = 0;
		if (guest_net_list_add(l, one, allow, param, e) < 0)
			return -1;
		s += n;
		if (*s == ',' && !*++s)
			return err_param(e, param, "%s: ends with a comma", param);
	}
	return 0;
}

int guest_net_list_merge(struct guest_net_list *to, const struct guest_net_list *l, struct err *e)
{
	for (int i = 0; l && i < l->n; i++) {
		if (gn_list_has(to, &l->v[i]))
			continue;
		if (to->n >= GUEST_NET_HOST_MAX)
			return err_set(e, ERR_INVALID, "guest network: more than %d prefixes",
				       GUEST_NET_HOST_MAX);
		to->v[to->n++] = l->v[i];
	}
	return 0;
}

int guest_net_list_format(const struct guest_net_list *l, char *out, size_t len)
{
	size_t used = 0;
	if (len)
		out[0] = '\0';
	for (int i = 0; i < l->n; i++) {
		char a[INET_ADDRSTRLEN];
		struct in_addr in = {l->v[i].addr};
		inet_ntop(AF_INET, &in, a, sizeof a);
		int n = snprintf(out + used, len - used, "%s%s/%u", i ? "," : "", a, l->v[i].len);
		if (n < 0 || (size_t)n >= len - used)
			return -1;
		used += (size_t)n;
	}
	return 0;
}

/* Network byte order in a constant expression (htonl is not one). */
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
#define GN_NBO(x) __builtin_bswap32(x)
#else
#define GN_NBO(x) (x)
#endif
#define P(a, b, c, d, l)                                                                           \
	{                                                                                          \
		GN_NBO((a##u << 24) | (b##u << 16) | (c##u << 8) | d##u), l                        \
	}
static const struct guest_net_list gn_defaults = {
    .v =
	{
	    P(0, 0, 0, 0, 8),	       /* "this network" */
	    P(10, 0, 0, 0, 8),	       /* private */
	    P(100, 64, 0, 0, 10),      /* CGNAT (some clouds' metadata) */
	    P(172, 16, 0, 0, 12),      /* private */
	    P(192, 0, 0, 0, 24),       /* IETF protocol assignments */
	    P(192, 168, 0, 0, 16),     /* private */
	    P(198, 18, 0, 0, 15),      /* benchmarking */
	    P(224, 0, 0, 0, 4),	       /* multicast */
	    P(240, 0, 0, 0, 4),	       /* reserved, broadcast */
	    P(100, 100, 100, 200, 32), /* Alibaba Cloud's metadata */
	    P(168, 63, 129, 16, 32),   /* Azure's wire server */
	},
    .n = 11,
};
#undef P

const struct guest_net_list *guest_net_defaults(void)
{
	return &gn_defaults;
}

static int gn_host_add(struct guest_net_list *l, uint32_t addr, unsigned char len, struct err *e)
{
	for (int i = 0; i < l->n; i++)
		if (gn_inside(addr, len, l->v[i].addr, l->v[i].len))
			return 0; /* already covered */
	if (l->n >= GUEST_NET_HOST_MAX)
		return err_set(e, ERR_UNAVAILABLE,
			       "guest network: the host has more than %d IPv4 addresses to "
			       "keep guests away from",
			       GUEST_NET_HOST_MAX - 1);
	l->v[l->n].addr = addr;
	l->v[l->n].len = len;
	l->n++;
	return 0;
}

int guest_net_host(struct guest_net_list *host, struct err *e)
{
	host->n = 0;
	if (gn_host_add(host, GN_LINK_LOCAL, 16, e) < 0)
		return -1;
	struct ifaddrs *ifs;
	if (getifaddrs(&ifs) < 0)
		return err_set(e, ERR_UNAVAILABLE, "guest network: getifaddrs: %s",
			       strerror(errno));
	int rc = 0;
	for (struct ifaddrs *i = ifs; i && rc == 0; i = i->ifa_next) {
		if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET)
			continue;
		uint32_t a = ((struct sockaddr_in *)i->ifa_addr)->sin_addr.s_addr;
		uint32_t h = ntohl(a);
		if ((h >> 24) == 127 || gn_inside(a, 32, GN_SLIRP_NET, GN_SLIRP_LEN))
			continue;
		rc = gn_host_add(host, a, 32, e);
	}
	freeifaddrs(ifs);
	return rc;
}

/* ---- the policy ------------------------------------------------------------------ */

enum { GN_DEFAULT = 1, GN_ALLOW, GN_DENY, GN_HARD, GN_SLIRP };

struct gn_entry {
	uint32_t addr;
	unsigned char len, rank, allow, drop;
};

static int gn_cmp(const void *a, const void *b)
{
	const struct guest_net_route *x = a, *y = b;
	uint32_t ha = ntohl(x->addr), hb = ntohl(y->addr);
	if (ha != hb)
		return ha < hb ? -1 : 1;
	return (int)x->len - (int)y->len;
}

int guest_net_policy_make(struct guest_net_policy *p, const struct guest_net_list *host,
			  const struct guest_net_list *allow, const struct guest_net_list *deny,
			  struct err *e)
{
	static struct gn_entry empty;
	struct gn_entry v[GUEST_NET_POLICY_MAX];
	int n = 0;
	const struct {
		const struct guest_net_list *l;
		unsigned char rank;
	} src[] = {{host, GN_HARD}, {deny, GN_DENY}, {allow, GN_ALLOW}, {&gn_defaults, GN_DEFAULT}};
	p->n = 0;
	v[n] = empty;
	v[n].addr = GN_SLIRP_NET, v[n].len = GN_SLIRP_LEN, v[n].rank = GN_SLIRP, v[n].allow = 1;
	n++;
	for (size_t s = 0; s < sizeof src / sizeof src[0]; s++)
		for (int i = 0; src[s].l && i < src[s].l->n; i++) {
			if (n >= GUEST_NET_POLICY_MAX)
				return err_set(e, ERR_INVALID,
					       "guest network: more than %d egress prefixes",
					       GUEST_NET_POLICY_MAX);
			v[n] = empty;
			v[n].addr = src[s].l->v[i].addr & gn_mask(src[s].l->v[i].len);
			v[n].len = src[s].l->v[i].len;
			v[n].rank = src[s].rank;
			v[n].allow = src[s].rank == GN_ALLOW;
			n++;
		}
	/* An allow inside an always-denied or explicitly denied prefix is
	 * dropped; of equal prefixes the strongest stays. */
	for (int i = 0; i < n; i++)
		for (int j = 0; j < n && !v[i].drop; j++) {
			if (i == j || v[j].drop)
				continue;
			if (v[i].rank == GN_ALLOW && v[j].rank >= GN_DENY && !v[j].allow &&
			    gn_inside(v[i].addr, v[i].len, v[j].addr, v[j].len))
				v[i].drop = 1;
			else if (v[i].addr == v[j].addr && v[i].len == v[j].len &&
				 (v[i].rank < v[j].rank || (v[i].rank == v[j].rank && i > j)))
				v[i].drop = 1;
		}
	/* Minimal: an entry that does what its nearest enclosing one does (or,
	 * for an allow, what main does when nothing encloses it) adds nothing.
	 * Decided against the whole set at once: an entry left out this way
	 * does what its parent does, so its children's verdicts do not change. */
	unsigned char redundant[GUEST_NET_POLICY_MAX] = {0};
	for (int i = 0; i < n; i++) {
		if (v[i].drop)
			continue;
		int parent = -1;
		for (int j = 0; j < n; j++)
			if (j != i && !v[j].drop && v[j].len < v[i].len &&
			    gn_inside(v[i].addr, v[i].len, v[j].addr, v[j].len) &&
			    (parent < 0 || v[j].len > v[parent].len))
				parent = j;
		redundant[i] = parent >= 0 ? v[parent].allow == v[i].allow : v[i].allow;
	}
	for (int i = 0; i < n; i++) {
		if (v[i].drop || redundant[i])
			continue;
		p->v[p->n].addr = v[i].addr;
		p->v[p->n].len = v[i].len;
		p->v[p->n].allow = v[i].allow;
		p->n++;
	}
	qsort(p->v, (size_t)p->n, sizeof p->v[0], gn_cmp);
	return 0;
}

int guest_net_policy_build(struct guest_net_policy *p, const struct guest_net_list *allow,
			   const struct guest_net_list *deny, struct err *e)
{
	struct guest_net_list host;
	if (guest_net_host(&host, e) < 0)
		return -1;
	return guest_net_policy_make(p, &host, allow, deny, e);
}

int guest_net_policy_denies(const struct guest_net_policy *p, uint32_t addr)
{
	int best = -1;
	for (int i = 0; i < p->n; i++)
		if (gn_inside(addr, 32, p->v[i].addr, p->v[i].len) &&
		    (best < 0 || p->v[i].len > p->v[best].len))
			best = i;
	return best >= 0 && !p->v[best].allow;
}

/* "10/8", "172.16/12", "100.100.100.200": iproute2 fills left-out octets with zeros. */
static int gn_compact(const struct guest_net_route *r, char *out, size_t len)
{
	uint32_t h = ntohl(r->addr);
	int octets = r->len ? (r->len + 7) / 8 : 1;
	while (octets < 4 && (h & (0xffffffffu >> (8 * octets))) != 0)
		octets++; /* cannot happen: host bits are zero */
	size_t used = 0;
	for (int i = 0; i < octets; i++) {
		int n = snprintf(out + used, len - used, "%s%u", i ? "." : "",
				 (h >> (24 - 8 * i)) & 0xff);
		if (n < 0 || (size_t)n >= len - used)
			return -1;
		used += (size_t)n;
	}
	if (r->len != 32) {
		int n = snprintf(out + used, len - used, "/%u", r->len);
		if (n < 0 || (size_t)n >= len - used)
			return -1;
	}
	return 0;
}

int guest_net_policy_format(const struct guest_net_policy *p, char *deny, size_t deny_len,
			    char *allow, size_t allow_len)
{
	size_t used[2] = {0, 0};
	char *out[2] = {deny, allow};
	size_t len[2] = {deny_len, allow_len};
	for (int k = 0; k < 2; k++) {
		if (!len[k])
			return -1;
		out[k][0] = 0;
	}
	for (int i = 0; i < p->n; i++) {
		int k = p->v[i].allow ? 1 : 0;
		char one[24];
		if (gn_compact(&p->v[i], one, sizeof one) < 0)
			return -1;
		int n =
		    snprintf(out[k] + used[k], len[k] - used[k], "%s%s", used[k] ? "," : "", one);
		if (n < 0 || (size_t)n >= len[k] - used[k])
			return -1;
		used[k] += (size_t)n;
	}
	return 0;
}

/* ---- applying it ------------------------------------------------------------------ */

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

/* IPv6 off on interfaces made from now on (slirp4netns' tap). A kernel
 * without IPv6 has nothing to turn off. */
static int ipv6_off(void)
{
	int fd = open("/proc/sys/net/ipv6/conf/default/disable_ipv6", O_WRONLY | O_CLOEXEC);
	if (fd < 0)
		return errno == ENOENT ? 0 : -1;
	int rc = write(fd, "1\n", 2) == 2 ? 0 : -1;
	int saved = errno;
	close(fd);
	errno = saved;
	return rc;
}

/* Sends one request and waits for its acknowledgement. */
static int nl_call(int nl, void *req, size_t len, unsigned seq)
{
	struct sockaddr_nl kernel = {.nl_family = AF_NETLINK};
	if (sendto(nl, req, len, 0, (struct sockaddr *)&kernel, sizeof(kernel)) < 0)
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

/* One RTM_NEWROUTE "prohibit|throw PREFIX table GUEST_NET_TABLE". */
static int add_route(int nl, const struct guest_net_route *p, unsigned seq)
{
	struct {
		struct nlmsghdr h;
		struct rtmsg r;
		struct rtattr dst;
		uint32_t addr;
		struct rtattr table;
		uint32_t table_id;
	} req;
	memset(&req, 0, sizeof(req));
	req.h.nlmsg_len = sizeof(req);
	req.h.nlmsg_type = RTM_NEWROUTE;
	req.h.nlmsg_flags = NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE | NLM_F_EXCL;
	req.h.nlmsg_seq = seq;
	req.r.rtm_family = AF_INET;
	req.r.rtm_dst_len = p->len;
	req.r.rtm_table = RT_TABLE_UNSPEC; /* > 255: in RTA_TABLE */
	req.r.rtm_protocol = RTPROT_STATIC;
	req.r.rtm_scope = RT_SCOPE_UNIVERSE;
	req.r.rtm_type = p->allow ? RTN_THROW : RTN_PROHIBIT;
	req.dst.rta_len = RTA_LENGTH(sizeof(uint32_t));
	req.dst.rta_type = RTA_DST;
	req.addr = p->addr;
	req.table.rta_len = RTA_LENGTH(sizeof(uint32_t));
	req.table.rta_type = RTA_TABLE;
	req.table_id = GUEST_NET_TABLE;
	return nl_call(nl, &req, sizeof req, seq);
}

/* RTM_NEWRULE "pref GUEST_NET_RULE_PREF lookup GUEST_NET_TABLE". */
static int add_rule(int nl, unsigned seq)
{
	struct {
		struct nlmsghdr h;
		struct fib_rule_hdr r;
		struct rtattr table;
		uint32_t table_id;
		struct rtattr prio;
		uint32_t pref;
	} req;
	memset(&req, 0, sizeof(req));
	req.h.nlmsg_len = sizeof(req);
	req.h.nlmsg_type = RTM_NEWRULE;
	req.h.nlmsg_flags = NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE | NLM_F_EXCL;
	req.h.nlmsg_seq = seq;
	req.r.family = AF_INET;
	req.r.table = RT_TABLE_UNSPEC;
	req.r.action = FR_ACT_TO_TBL;
	req.table.rta_len = RTA_LENGTH(sizeof(uint32_t));
	req.table.rta_type = FRA_TABLE;
	req.table_id = GUEST_NET_TABLE;
	req.prio.rta_len = RTA_LENGTH(sizeof(uint32_t));
	req.prio.rta_type = FRA_PRIORITY;
	req.pref = GUEST_NET_RULE_PREF;
	return nl_call(nl, &req, sizeof req, seq);
}

int guest_net_apply(const struct guest_net_policy *p, const char **step)
{
	*step = "bring lo up";
	if (lo_up() < 0)
		return -1;
	*step = "turn IPv6 off";
	if (ipv6_off() < 0)
		return -1;
	*step = "open rtnetlink";
	int nl = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE);
	if (nl < 0)
		return -1;
	unsigned seq = 1;
	int rc = 0;
	*step = "add an egress route";
	for (int i = 0; i < p->n && rc == 0; i++)
		rc = add_route(nl, &p->v[i], seq++);
	if (rc == 0) {
		*step = "add the egress rule";
		rc = add_rule(nl, seq++);
	}
	int saved = errno;
	close(nl);
	errno = saved;
	return rc;
}
