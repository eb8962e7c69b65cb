/*
 * landlock: the helpers' domain allows what its rules grant and nothing
 * else: files and directories, a file rule on its own, TCP, signals out of
 * the domain (host/sandbox/landlock.h; cmocka).
 *
 * Each case restricts a forked child (child.h). Root is no exception to
 * Landlock, so the child runs as the test's root and still gets EACCES.
 */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <cmocka.h>

#include "child.h"
#include "landlock.h"

static char dir[64], inside[96], sibling[96];

static int setup(void **state)
{
	(void)state;
	snprintf(dir, sizeof dir, "/tmp/cubicle-landlock-XXXXXX");
	assert_non_null(mkdtemp(dir));
	snprintf(inside, sizeof inside, "%s/readable", dir);
	snprintf(sibling, sizeof sibling, "%s-sibling", dir);
	FILE *f = fopen(inside, "w");
	assert_non_null(f);
	fputs("yes", f);
	fclose(f);
	f = fopen(sibling, "w");
	assert_non_null(f);
	fputs("no", f);
	fclose(f);
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	char made[128];
	snprintf(made, sizeof made, "%s/made", dir);
	unlink(made);
	unlink(inside);
	unlink(sibling);
	rmdir(dir);
	return 0;
}

static int abi; /* what the child's landlock_restrict applied */

static int restrict_to(const struct landlock_rule *rules, size_t n)
{
	char why[256];
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
		return 10;
	abi = landlock_restrict(rules, n, why, sizeof why);
	if (abi == 0)
		return 77; /* no Landlock in this kernel */
	if (abi < 0) {
		fprintf(stderr, "landlock_restrict: %s\n", why);
		return 11;
	}
	return 0;
}

static int denied_open(const char *path, int flags)
{
	int fd = open(path, flags | O_CLOEXEC, 0600);
	if (fd >= 0) {
		close(fd);
		return 0;
	}
	return errno == EACCES;
}

/* A directory rule: read beneath it; write, create and read elsewhere denied. */
static int body_directory(void)
{
	const struct landlock_rule rules[] = {
	    {dir, LANDLOCK_READ},
	    {"/nonexistent/cubicle/path", LANDLOCK_READ}, /* skipped, not an error */
	};
	int rc = restrict_to(rules, 2);
	if (rc)
		return rc;
	int fd = open(inside, O_RDONLY | O_CLOEXEC);
	char buf[4] = {0};
	if (fd < 0 || read(fd, buf, 3) != 3 || strcmp(buf, "yes") != 0)
		return 20;
	close(fd);
	if (!denied_open(inside, O_WRONLY))
		return 21;
	char made[128];
	snprintf(made, sizeof made, "%s/made", dir);
	if (!denied_open(made, O_WRONLY | O_CREAT))
		return 22;
	if (!denied_open(sibling, O_RDONLY))
		return 23;
	if (!denied_open("/etc/hostname", O_RDONLY))
		return 24;
	return 0;
}

/* A file rule with directory rights takes the file's rights only, and
 * grants nothing beside the file. */
static int body_file(void)
{
	const struct landlock_rule rules[] = {{inside, LANDLOCK_READ}};
	int rc = restrict_to(rules, 1);
	if (rc)
		return rc;
	int fd = open(inside, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return 30;
	close(fd);
	if (!denied_open(dir, O_RDONLY | O_DIRECTORY))
		return 31;
	if (!denied_open(sibling, O_RDONLY))
		return 32;
	return 0;
}

/* No rule: no file, no TCP (ABI 4), no signal out of the domain (ABI 6). */
static int body_nothing(void)
{
	int rc = restrict_to(NULL, 0);
	if (rc)
		return rc;
	if (!denied_open("/etc/hostname", O_RDONLY))
		return 40;
	if (abi >= 4) {
		int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (s < 0)
			return 41;
		struct sockaddr_in sa = {.sin_family = AF_INET,
					 .sin_port = htons(1),
					 .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
		if (connect(s, (struct sockaddr *)&sa, sizeof sa) == 0 || errno != EACCES)
			return 42;
		sa.sin_port = 0;
		if (bind(s, (struct sockaddr *)&sa, sizeof sa) == 0 || errno != EACCES)
			return 43;
		close(s);
	}
	if (abi >= 6 && (kill(getppid(), 0) == 0 || errno != EPERM))
		return 44;
	return 0;
}

static void test_directory(void **state)
{
	(void)state;
	child_check(body_directory);
}

static void test_file(void **state)
{
	(void)state;
	child_check(body_file);
}

static void test_nothing(void **state)
{
	(void)state;
	child_check(body_nothing);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_directory),
	    cmocka_unit_test(test_file),
	    cmocka_unit_test(test_nothing),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
