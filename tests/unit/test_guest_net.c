/*
 * guest-net: the deny list of the host's addresses, its kernel command-line
 * form, and the routes it becomes in a network namespace (cmocka). The
 * routes are tested in a private network namespace of a child (root only;
 * skipped otherwise): a connect() to a denied address gets EACCES, one to
 * another address does not, and lo is up.
 */
#include <arpa/inet.h>
#include <errno.h>
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

static int has(const struct guest_net_deny *d, const char *addr, unsigned len)
{
	struct in_addr a;
	inet_pton(AF_INET, addr, &a);
	for (int i = 0; i < d->n; i++)
		if (d->v[i].addr == a.s_addr && d->v[i].len == len)
			return 1;
	return 0;
}

static void test_the_host_addresses_and_link_local(void **state)
{
	(void)state;
	struct guest_net_deny d;
	struct err e = {0};
	assert_int_equal(guest_net_deny_host(&d, &e), 0);
	assert_true(d.n >= 1);
	assert_true(has(&d, "169.254.0.0", 16));
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
			assert_false(has(&d, a, 32)); /* the guest's own, slirp's */
		else if ((h >> 16) != 0xa9fe) {
			assert_true(has(&d, a, 32));
			want++;
		}
	}
	freeifaddrs(ifs);
	/* Each once: an address on two interfaces is one route. */
	for (int x = 0; x < d.n; x++)
		for (int y = x + 1; y < d.n; y++)
			assert_false(d.v[x].addr == d.v[y].addr && d.v[x].len == d.v[y].len);
	assert_true(d.n <= want);
}

static void test_format(void **state)
{
	(void)state;
	struct guest_net_deny d = {.n = 2};
	inet_pton(AF_INET, "169.254.0.0", &d.v[0].addr);
	d.v[0].len = 16;
	inet_pton(AF_INET, "192.0.2.2", &d.v[1].addr);
	d.v[1].len = 32;
	char out[64];
	assert_int_equal(guest_net_deny_format(&d, out, sizeof out), 0);
	assert_string_equal(out, "169.254.0.0/16,192.0.2.2/32");
	assert_int_equal(guest_net_deny_format(&d, out, 20), -1);
	/* The longest list fits the buffer the microVM driver gives it. */
	struct guest_net_deny full = {.n = GUEST_NET_DENY_MAX};
	for (int i = 0; i < full.n; i++) {
		full.v[i].addr = htonl(0xfffffff0u + (unsigned)i % 16);
		full.v[i].len = 32;
	}
	char big[GUEST_NET_DENY_MAX * 20];
	assert_int_equal(guest_net_deny_format(&full, big, sizeof big), 0);
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
	struct guest_net_deny d = {.n = 2};
	inet_pton(AF_INET, "169.254.0.0", &d.v[0].addr);
	d.v[0].len = 16;
	inet_pton(AF_INET, "198.51.100.7", &d.v[1].addr);
	d.v[1].len = 32;
	const char *step;
	if (guest_net_apply(&d, &step) < 0)
		return 11;
	if (guest_net_apply(&d, &step) < 0) /* again: existing routes are fine */
		return 12;
	if (connect_errno("169.254.169.254", 80) != EACCES)
		return 13;
	if (connect_errno("198.51.100.7", 80) != EACCES)
		return 14;
	/* Not denied: no route at all in this namespace. */
	if (connect_errno("198.51.100.8", 80) != ENETUNREACH)
		return 15;
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
	    cmocka_unit_test(test_the_host_addresses_and_link_local),
	    cmocka_unit_test(test_format),
	    cmocka_unit_test(test_routes_in_a_private_namespace),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
