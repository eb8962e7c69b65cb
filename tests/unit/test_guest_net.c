/*
 * guest-net: the egress policy (cmocka). Parsing and validation of the
 * operators' CIDR lists, the host's addresses, how the sources merge into
 * the policy (what wins, what is left out), its compact kernel
 * command-line form, and the routes it becomes in a network namespace: in
 * a private network namespace of a child (root only; skipped otherwise) a
 * connect() to a denied address gets EACCES, one to an allowed or slirp
 * address falls through to main (ENETUNREACH: main is empty there), lo is
 * up and IPv6 is off for new interfaces.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>
#include "child.h"

#include "guest-net.h"

static uint32_t ip(const char *text)
{
	struct in_addr a;
	assert_int_equal(inet_pton(AF_INET, text, &a), 1);
	return a.s_addr;
}

static int list_has(const struct guest_net_list *d, const char *addr, unsigned len)
{
	for (int i = 0; i < d->n; i++)
		if (d->v[i].addr == ip(addr) && d->v[i].len == len)
			return 1;
	return 0;
}

/* The route p has for exactly addr/len: 'a' allow, 'd' deny, 0 none. */
static char route(const struct guest_net_policy *p, const char *addr, unsigned len)
{
	for (int i = 0; i < p->n; i++)
		if (p->v[i].addr == ip(addr) && p->v[i].len == len)
			return p->v[i].allow ? 'a' : 'd';
	return 0;
}

static int denies(const struct guest_net_policy *p, const char *addr)
{
	return guest_net_policy_denies(p, ip(addr));
}

static void test_parse(void **state)
{
	(void)state;
	struct guest_net_prefix p;
	char why[160];
	assert_int_equal(guest_net_parse("10.213.7.0/30", &p, why, sizeof why), 0);
	assert_int_equal(p.addr, ip("10.213.7.0"));
	assert_int_equal(p.len, 30);
	assert_int_equal(guest_net_parse("100.100.100.200", &p, why, sizeof why), 0);
	assert_int_equal(p.len, 32);
	assert_int_equal(guest_net_parse("0.0.0.0/0", &p, why, sizeof why), 0);
	assert_int_equal(p.len, 0);

	assert_int_equal(guest_net_parse("10.213.7.1/30", &p, why, sizeof why), -1);
	assert_non_null(strstr(why, "10.213.7.0/30"));
	assert_int_equal(guest_net_parse("fd00:ec2::254/128", &p, why, sizeof why), -1);
	assert_non_null(strstr(why, "IPv6"));
	assert_int_equal(guest_net_parse("10.0.2.3/32", &p, why, sizeof why), -1);
	assert_non_null(strstr(why, "10.0.2.0/24"));
	assert_int_equal(guest_net_parse("10.0.2.0/24", &p, why, sizeof why), -1);
	/* Wider than slirp's network is fine (denying 10/8 keeps 10.0.2/24). */
	assert_int_equal(guest_net_parse("10.0.0.0/16", &p, why, sizeof why), 0);
	const char *bad[] = {"",
			     "/8",
			     "10/8",
			     "10.0.0.0/",
			     "10.0.0.0/33",
			     "10.0.0.0/08",
			     "10.0.0.0/-1",
			     "10.0.0.0/8/8",
			     "1.2.3.4.5",
			     "example.com",
			     "10.0.0.0 /8",
			     "10.0.0.0/8 "};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
		assert_int_equal(guest_net_parse(bad[i], &p, why, sizeof why), -1);
}

static void test_lists(void **state)
{
	(void)state;
	struct guest_net_list l;
	struct err e = {0};
	assert_int_equal(
	    guest_net_list_parse(&l, "10.213.7.0/30,172.16.9.0/24,10.213.7.0/30", 1, "p", &e), 0);
	assert_int_equal(l.n, 2); /* a duplicate once */
	char out[128];
	assert_int_equal(guest_net_list_format(&l, out, sizeof out), 0);
	assert_string_equal(out, "10.213.7.0/30,172.16.9.0/24");
	assert_int_equal(guest_net_list_format(&l, out, 10), -1);
	assert_int_equal(guest_net_list_parse(&l, "", 1, "p", &e), 0);
	assert_int_equal(l.n, 0);

	/* The bad one is named, with the parameter. */
	e = (struct err){0};
	assert_int_equal(
	    guest_net_list_parse(&l, "10.213.7.0/30,10.213.7.1/30", 1, "egress_allow", &e), -1);
	assert_int_equal(e.code, ERR_INVALID);
	assert_string_equal(e.param, "egress_allow");
	assert_non_null(strstr(e.message, "10.213.7.1/30"));
	e = (struct err){0};
	assert_int_equal(guest_net_list_parse(&l, "10.213.7.0/30,", 0, "d", &e), -1);
	e = (struct err){0};
	assert_int_equal(guest_net_list_parse(&l, ",10.213.7.0/30", 0, "d", &e), -1);
	/* Link-local cannot be allowed, but may be denied (it is anyway). */
	e = (struct err){0};
	assert_int_equal(guest_net_list_parse(&l, "169.254.169.254", 1, "a", &e), -1);
	assert_non_null(strstr(e.message, "link-local"));
	assert_int_equal(guest_net_list_parse(&l, "169.254.169.254", 0, "d", &e), 0);
	/* At most GUEST_NET_LIST_MAX. */
	char many[GUEST_NET_LIST_MAX * 20 + 20] = "";
	for (int i = 0; i <= GUEST_NET_LIST_MAX; i++)
		snprintf(many + strlen(many), sizeof many - strlen(many), "%s203.0.113.%d",
			 i ? "," : "", i);
	e = (struct err){0};
	assert_int_equal(guest_net_list_parse(&l, many, 0, "d", &e), -1);
	assert_non_null(strstr(e.message, "more than"));

	/* Merging keeps each once. */
	struct guest_net_list a, b;
	assert_int_equal(guest_net_list_parse(&a, "10.213.7.0/30", 1, "a", &e), 0);
	assert_int_equal(guest_net_list_parse(&b, "10.213.7.0/30,100.64.7.0/30", 1, "b", &e), 0);
	assert_int_equal(guest_net_list_merge(&a, &b, &e), 0);
	assert_int_equal(a.n, 2);
	assert_int_equal(guest_net_list_merge(&a, NULL, &e), 0);
}

static void test_the_host_addresses_and_link_local(void **state)
{
	(void)state;
	struct guest_net_list d;
	struct err e = {0};
	assert_int_equal(guest_net_host(&d, &e), 0);
	assert_true(d.n >= 1);
	assert_true(list_has(&d, "169.254.0.0", 16));
	struct ifaddrs *ifs, *i;
	assert_int_equal(getifaddrs(&ifs), 0);
	int want = 1;
	for (i = ifs; i; i = i->ifa_next) {
		if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET)
			continue;
		char a[INET_ADDRSTRLEN];
		uint32_t h = ntohl(((struct sockaddr_in *)i->ifa_addr)->sin_addr.s_addr);
		inet_ntop(AF_INET, &((struct sockaddr_in *)i->ifa_addr)->sin_addr, a, sizeof a);
		if ((h >> 24) == 127 || (h >> 8) == 0x0a0002)
			assert_false(list_has(&d, a, 32)); /* the guest's own, slirp's */
		else if ((h >> 16) != 0xa9fe) {
			assert_true(list_has(&d, a, 32));
			want++;
		}
	}
	freeifaddrs(ifs);
	for (int x = 0; x < d.n; x++)
		for (int y = x + 1; y < d.n; y++)
			assert_false(d.v[x].addr == d.v[y].addr && d.v[x].len == d.v[y].len);
	assert_true(d.n <= want);
}

static void test_default_policy(void **state)
{
	(void)state;
	struct guest_net_list host;
	struct err e = {0};
	assert_int_equal(
	    guest_net_list_parse(&host, "169.254.0.0/16,10.1.2.3,203.0.113.9", 0, "h", &e), 0);
	struct guest_net_policy p;
	assert_int_equal(guest_net_policy_make(&p, &host, NULL, NULL, &e), 0);
	const char *denied[] = {
	    "10.213.7.2",      "172.16.9.2",	  "172.31.255.255",  "192.168.1.1",
	    "100.64.7.2",      "100.127.255.254", "100.100.100.200", "169.254.169.254",
	    "168.63.129.16",   "0.1.2.3",	  "192.0.0.9",	     "198.18.0.1",
	    "198.19.255.255",  "224.0.0.1",	  "239.255.255.250", "240.0.0.1",
	    "255.255.255.255", "10.1.2.3",	  "203.0.113.9"};
	for (size_t i = 0; i < sizeof denied / sizeof denied[0]; i++) {
		if (!denies(&p, denied[i]))
			fail_msg("%s is not denied", denied[i]);
	}
	const char *allowed[] = {"10.0.2.2",	 "10.0.2.3",	   "1.1.1.1",	     "198.51.100.6",
				 "172.32.0.1",	 "172.15.255.255", "100.128.0.1",    "192.0.2.1",
				 "203.0.113.10", "11.0.0.1",	   "223.255.255.255"};
	for (size_t i = 0; i < sizeof allowed / sizeof allowed[0]; i++) {
		if (denies(&p, allowed[i]))
			fail_msg("%s is denied", allowed[i]);
	}
	/* Minimal: the host's 10.1.2.3 and the metadata address inside 100.64/10
	 * cost no route; slirp's network is an allow inside 10/8. */
	assert_int_equal(route(&p, "10.1.2.3", 32), 0);
	assert_int_equal(route(&p, "100.100.100.200", 32), 0);
	assert_int_equal(route(&p, "203.0.113.9", 32), 'd');
	assert_int_equal(route(&p, "10.0.2.0", 24), 'a');
	assert_int_equal(route(&p, "10.0.0.0", 8), 'd');
	/* Sorted. */
	for (int i = 1; i < p.n; i++)
		assert_true(ntohl(p.v[i - 1].addr) < ntohl(p.v[i].addr) ||
			    (p.v[i - 1].addr == p.v[i].addr && p.v[i - 1].len < p.v[i].len));
}

static void test_allow_and_deny(void **state)
{
	(void)state;
	struct guest_net_list host, allow, deny;
	struct err e = {0};
	/* The host's own address inside the allowed /30 (the veth's host end). */
	assert_int_equal(guest_net_list_parse(&host, "169.254.0.0/16,10.213.7.1", 0, "h", &e), 0);
	assert_int_equal(guest_net_list_parse(&allow,
					      "10.213.7.0/30,100.64.0.0/10,172.16.9.0/30,"
					      "192.168.0.0/16,198.51.100.0/24,0.0.0.0/0",
					      1, "a", &e),
			 0);
	assert_int_equal(
	    guest_net_list_parse(&deny, "172.16.0.0/12,198.51.100.6,8.8.8.0/24", 0, "d", &e), 0);
	struct guest_net_policy p;
	assert_int_equal(guest_net_policy_make(&p, &host, &allow, &deny, &e), 0);
	assert_false(denies(&p, "10.213.7.2"));	    /* allowed */
	assert_true(denies(&p, "10.213.7.1"));	    /* the host's, whatever the allow says */
	assert_true(denies(&p, "10.213.7.6"));	    /* next to the allowed /30 */
	assert_false(denies(&p, "100.64.7.2"));	    /* an allow equal to a default replaces it */
	assert_true(denies(&p, "100.100.100.200")); /* a more specific default still wins */
	assert_int_equal(route(&p, "100.64.0.0", 10), 0);
	assert_true(denies(&p, "172.16.9.2")); /* an allow inside an explicit deny is dropped */
	assert_false(denies(&p, "192.168.4.4"));
	assert_true(denies(&p, "198.51.100.6")); /* a deny inside an allow wins */
	assert_false(denies(&p, "198.51.100.5"));
	assert_true(denies(&p, "8.8.8.8"));  /* a deny of what no default denies */
	assert_true(denies(&p, "10.1.1.1")); /* 0/0 is an allow of nothing: defaults are narrower */
	assert_false(denies(&p, "10.0.2.3"));
	assert_true(denies(&p, "169.254.169.254"));

	/* An explicit deny wider than slirp's network keeps it (the gateway). */
	struct guest_net_list all;
	assert_int_equal(guest_net_list_parse(&all, "0.0.0.0/0", 0, "d", &e), 0);
	assert_int_equal(guest_net_policy_make(&p, &host, &allow, &all, &e), 0);
	assert_true(denies(&p, "1.1.1.1"));
	assert_true(denies(&p, "10.213.7.2"));
	assert_false(denies(&p, "10.0.2.2"));
	assert_false(denies(&p, "10.0.2.3"));

	/* An allow of a whole default range: the host's address inside it stays. */
	struct guest_net_list ten;
	assert_int_equal(guest_net_list_parse(&ten, "10.0.0.0/8", 1, "a", &e), 0);
	assert_int_equal(guest_net_policy_make(&p, &host, &ten, NULL, &e), 0);
	assert_false(denies(&p, "10.9.9.9"));
	assert_true(denies(&p, "10.213.7.1"));
	assert_int_equal(route(&p, "10.0.2.0", 24), 0); /* nothing to throw past */
}

static void test_format(void **state)
{
	(void)state;
	struct guest_net_list host, allow;
	struct err e = {0};
	assert_int_equal(guest_net_list_parse(&host, "169.254.0.0/16,192.0.2.2", 0, "h", &e), 0);
	assert_int_equal(guest_net_list_parse(&allow, "10.213.7.0/30", 1, "a", &e), 0);
	struct guest_net_policy p;
	assert_int_equal(guest_net_policy_make(&p, &host, &allow, NULL, &e), 0);
	char deny_s[512], allow_s[512];
	assert_int_equal(
	    guest_net_policy_format(&p, deny_s, sizeof deny_s, allow_s, sizeof allow_s), 0);
	assert_string_equal(deny_s,
			    "0/8,10/8,100.64/10,168.63.129.16,169.254/16,172.16/12,192.0.0/24,"
			    "192.0.2.2,192.168/16,198.18/15,224/4,240/4");
	assert_string_equal(allow_s, "10.0.2/24,10.213.7.0/30");
	assert_int_equal(guest_net_policy_format(&p, deny_s, 20, allow_s, sizeof allow_s), -1);
	assert_int_equal(guest_net_policy_format(&p, deny_s, sizeof deny_s, allow_s, 8), -1);

	/* The largest policy the sources allow is within GUEST_NET_POLICY_MAX. */
	struct guest_net_list big_host = {.n = GUEST_NET_HOST_MAX}, a = {.n = GUEST_NET_HOST_MAX},
			      d = {.n = GUEST_NET_HOST_MAX};
	for (int i = 0; i < GUEST_NET_HOST_MAX; i++) {
		big_host.v[i].addr = htonl(0x0b000000u + (unsigned)i); /* 11.0.0.i */
		big_host.v[i].len = 32;
		a.v[i].addr = htonl(0x0c000000u + ((unsigned)i << 8)); /* 12.0.i.0/24 */
		a.v[i].len = 24;
		d.v[i].addr = htonl(0x0d000000u + (unsigned)i); /* 13.0.0.i */
		d.v[i].len = 32;
	}
	assert_int_equal(guest_net_policy_make(&p, &big_host, &a, &d, &e), 0);
	assert_true(p.n >=
		    2 * GUEST_NET_HOST_MAX); /* the allows are redundant, no enclosing deny */
	assert_true(denies(&p, "13.0.0.5"));
	assert_true(denies(&p, "11.0.0.63"));
}

/* In the child's own network namespace: errno of a TCP connect to addr:port
 * (0 when it connected). */
static int connect_errno(const char *addr, int port)
{
	int s = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
	inet_pton(AF_INET, addr, &sa.sin_addr);
	int rc = connect(s, (struct sockaddr *)&sa, sizeof sa) == 0 ? 0 : errno;
	close(s);
	return rc;
}

/* The child's checks; its exit status says which failed (0: none). */
static int routes_child(void)
{
	if (unshare(CLONE_NEWNET) < 0)
		return 10;
	struct guest_net_list host, allow, deny;
	struct err e = {0};
	if (guest_net_list_parse(&host, "169.254.0.0/16,198.51.100.7", 0, "h", &e) < 0 ||
	    guest_net_list_parse(&allow, "10.213.7.0/30", 1, "a", &e) < 0 ||
	    guest_net_list_parse(&deny, "203.0.113.0/24", 0, "d", &e) < 0)
		return 9;
	struct guest_net_policy p;
	if (guest_net_policy_make(&p, &host, &allow, &deny, &e) < 0)
		return 8;
	const char *step;
	if (guest_net_apply(&p, &step) < 0)
		return 11;
	if (guest_net_apply(&p, &step) < 0) /* again: existing routes and rule are fine */
		return 12;
	const char *eacces[] = {"169.254.169.254", "198.51.100.7", "10.213.7.5", "172.16.9.2",
				"100.64.7.2",	   "203.0.113.9",  "192.168.1.1"};
	for (size_t i = 0; i < sizeof eacces / sizeof eacces[0]; i++)
		if (connect_errno(eacces[i], 80) != EACCES)
			return 20 + (int)i;
	/* Not denied: on to main, which has no route in this namespace. */
	const char *through[] = {"10.213.7.2", "10.0.2.3", "198.51.100.8"};
	for (size_t i = 0; i < sizeof through / sizeof through[0]; i++)
		if (connect_errno(through[i], 80) != ENETUNREACH)
			return 30 + (int)i;
	/* lo is up: a listener on 127.0.0.1 takes a connection. */
	int l = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in sa = {.sin_family = AF_INET};
	inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
	socklen_t len = sizeof sa;
	if (bind(l, (struct sockaddr *)&sa, sizeof sa) < 0 || listen(l, 1) < 0 ||
	    getsockname(l, (struct sockaddr *)&sa, &len) < 0)
		return 16;
	if (connect_errno("127.0.0.1", ntohs(sa.sin_port)) != 0)
		return 17;
	/* IPv6 off for interfaces made from now on. */
	char v[4] = "";
	int fd = open("/proc/sys/net/ipv6/conf/default/disable_ipv6", O_RDONLY);
	if (fd >= 0 && (read(fd, v, sizeof v - 1) < 1 || v[0] != '1'))
		return 18;
	if (fd >= 0)
		close(fd);
	return 0;
}

static void test_routes_in_a_private_namespace(void **state)
{
	(void)state;
	if (geteuid() != 0)
		skip();
	child_check(routes_child);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_parse),
	    cmocka_unit_test(test_lists),
	    cmocka_unit_test(test_the_host_addresses_and_link_local),
	    cmocka_unit_test(test_default_policy),
	    cmocka_unit_test(test_allow_and_deny),
	    cmocka_unit_test(test_format),
	    cmocka_unit_test(test_routes_in_a_private_namespace),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
