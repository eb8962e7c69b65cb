/*
 * layer: a template's layer copied out of an overlay upper dir and applied
 * onto an image tree (host/drivers/layer.c), against trees made here the
 * way a hostile build could leave them (cmocka). Needs root (whiteouts
 * are character devices, owners are other users'); skipped otherwise.
 *
 * What must hold: owners shifted to the guest's ids, no setuid or setgid
 * bit, no FIFO or device but whiteouts, nothing at /proc, /sys, /dev,
 * /run, /tmp, /session, opaque directories and hard links kept, the size
 * cap enforced; and applying never follows a symlink the layer or the
 * tree holds out of the tree, whatever it points at.
 */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>
#include <unistd.h>
#include <cmocka.h>

#include "drvutil.h"
#include "layer.h"

#define BASE 300000u /* the fake guest's host uid of its root */

static char tmp[256];

static void at(char *out, size_t len, const char *rel)
{
	snprintf(out, len, "%s/%s", tmp, rel);
}

static void mk_dir(const char *rel, unsigned uid)
{
	char p[512];
	at(p, sizeof p, rel);
	assert_int_equal(mkdir(p, 0755), 0);
	assert_int_equal(lchown(p, uid, uid), 0);
}

static void mk_file(const char *rel, const char *data, mode_t mode, unsigned uid)
{
	char p[512];
	at(p, sizeof p, rel);
	FILE *f = fopen(p, "w");
	assert_non_null(f);
	fputs(data, f);
	fclose(f);
	assert_int_equal(lchown(p, uid, uid), 0);
	assert_int_equal(chmod(p, mode), 0);
}

static void mk_link(const char *rel, const char *target)
{
	char p[512];
	at(p, sizeof p, rel);
	assert_int_equal(symlink(target, p), 0);
}

static bool exists(const char *rel, struct stat *st)
{
	char p[512];
	struct stat s;
	at(p, sizeof p, rel);
	return lstat(p, st ? st : &s) == 0;
}

static char *slurp(const char *rel)
{
	static char buf[256];
	char p[512];
	at(p, sizeof p, rel);
	FILE *f = fopen(p, "r");
	if (!f)
		return NULL;
	size_t n = fread(buf, 1, sizeof buf - 1, f);
	fclose(f);
	buf[n] = 0;
	return buf;
}

static int setup(void **state)
{
	(void)state;
	if (geteuid() != 0)
		return 0;
	snprintf(tmp, sizeof tmp, "/tmp/cubicle-test-layer-XXXXXX");
	return mkdtemp(tmp) ? 0 : -1;
}

static int teardown(void **state)
{
	(void)state;
	if (geteuid() == 0 && tmp[0]) {
		drv_rm_contents(tmp);
		rmdir(tmp);
	}
	return 0;
}

static int upper_fd(void)
{
	char p[512];
	at(p, sizeof p, "upper");
	return open(p, O_RDONLY | O_DIRECTORY);
}

/* An upper dir as a guest's build leaves it, copied out. */
static void test_copy_sanitizes(void **state)
{
	(void)state;
	if (geteuid() != 0)
		skip();
	char p[512], q[512];
	mk_dir("upper", BASE);
	mk_file("upper/a", "user's\n", 0644, BASE + 1000);
	mk_file("upper/rootbash", "#!/bin/sh\n", 04755, BASE);
	mk_file("upper/sgid", "x", 02755, BASE);
	mk_file("upper/stranger", "x", 0644, 12345); /* outside the guest's range */
	mk_dir("upper/opaque", BASE);
	at(p, sizeof p, "upper/opaque");
	assert_int_equal(setxattr(p, "user.overlay.opaque", "y", 1, 0), 0);
	mk_file("upper/opaque/new", "n", 0644, BASE);
	at(p, sizeof p, "upper/gone");
	assert_int_equal(mknod(p, S_IFCHR, makedev(0, 0)), 0);
	at(p, sizeof p, "upper/fifo");
	assert_int_equal(mkfifo(p, 0644), 0);
	mk_link("upper/tohost", "/etc/shadow");
	mk_file("upper/h1", "linked", 0644, BASE);
	at(p, sizeof p, "upper/h1");
	at(q, sizeof q, "upper/h2");
	assert_int_equal(link(p, q), 0);
	/* What every start mounts over: left out, even as a symlink. */
	mk_link("upper/tmp", "/");
	mk_dir("upper/proc", BASE);
	mk_file("upper/proc/x", "x", 0644, BASE);
	mk_dir("upper/etc", BASE);
	mk_link("upper/etc/tmp", "/"); /* only the top level is special */

	int fd = upper_fd();
	struct layer_stats st;
	struct err e = {0};
	at(p, sizeof p, "layer");
	assert_int_equal(layer_copy(fd, p, BASE, 0, &st, &e), 0);
	close(fd);

	struct stat s;
	assert_true(exists("layer/a", &s));
	assert_int_equal(s.st_uid, 1000);
	assert_string_equal(slurp("layer/a"), "user's\n");
	assert_true(exists("layer/rootbash", &s));
	assert_int_equal(s.st_mode & 07777, 0755);
	assert_int_equal(s.st_uid, 0);
	assert_true(exists("layer/sgid", &s));
	assert_int_equal(s.st_mode & 07777, 0755);
	assert_true(exists("layer/stranger", &s));
	assert_int_equal(s.st_uid, 0);
	char v[4] = "";
	at(p, sizeof p, "layer/opaque");
	assert_int_equal(getxattr(p, "user.overlay.opaque", v, sizeof v), 1);
	assert_true(exists("layer/gone", &s));
	assert_true(S_ISCHR(s.st_mode) && s.st_rdev == makedev(0, 0));
	assert_false(exists("layer/fifo", NULL));
	assert_true(exists("layer/tohost", &s));
	assert_true(S_ISLNK(s.st_mode));
	struct stat s1, s2;
	assert_true(exists("layer/h1", &s1) && exists("layer/h2", &s2));
	assert_int_equal(s1.st_ino, s2.st_ino);
	assert_false(exists("layer/tmp", NULL));
	assert_false(exists("layer/proc", NULL));
	assert_true(exists("layer/etc/tmp", &s));
	assert_int_equal(st.whiteouts, 1);
	assert_int_equal(st.dropped, 3); /* fifo, tmp, proc */
}

/* Past the cap: ERR_TOO_LARGE. */
static void test_copy_cap(void **state)
{
	(void)state;
	if (geteuid() != 0)
		skip();
	char p[512];
	mk_dir("upper", BASE);
	at(p, sizeof p, "upper/big");
	int fd = open(p, O_WRONLY | O_CREAT, 0644);
	assert_true(fd >= 0);
	static char block[65536];
	for (int i = 0; i < 40; i++) /* 2.5 MiB */
		assert_int_equal(write(fd, block, sizeof block), (ssize_t)sizeof block);
	close(fd);
	fd = upper_fd();
	struct layer_stats st;
	struct err e = {0};
	at(p, sizeof p, "layer");
	assert_int_equal(layer_copy(fd, p, BASE, 1 << 20, &st, &e), -1);
	close(fd);
	assert_int_equal(e.code, ERR_TOO_LARGE);
	assert_non_null(strstr(e.message, "1 MiB"));
}

/* Applying: whiteouts, opaque directories, replacements; a symlink in the
 * tree or the layer is never followed out of it. */
static void test_apply(void **state)
{
	(void)state;
	if (geteuid() != 0)
		skip();
	char p[1024], host[512], root[512], layer[512];
	mk_dir("host", 0); /* stands for the host's files */
	mk_file("host/keep", "host file\n", 0644, 0);
	at(host, sizeof host, "host");
	/* The image tree. */
	mk_dir("rootfs", 0);
	mk_file("rootfs/old", "old\n", 0644, 0);
	mk_dir("rootfs/dir", 0);
	mk_file("rootfs/dir/kept", "kept\n", 0644, 0);
	mk_dir("rootfs/opaque", 0);
	mk_file("rootfs/opaque/hidden", "hidden\n", 0644, 0);
	mk_link("rootfs/wasalink", host); /* the tree points out; the layer has a dir there */
	mk_file("rootfs/becomes-dir", "f\n", 0644, 0);
	/* The layer. */
	mk_dir("layer", 0);
	at(p, sizeof p, "layer/old");
	assert_int_equal(mknod(p, S_IFCHR, makedev(0, 0)), 0);
	mk_dir("layer/dir", 0);
	mk_file("layer/dir/new", "new\n", 0644, 1000);
	mk_dir("layer/opaque", 0);
	at(p, sizeof p, "layer/opaque");
	assert_int_equal(setxattr(p, "user.overlay.opaque", "y", 1, 0), 0);
	mk_file("layer/opaque/only", "only\n", 0644, 0);
	mk_dir("layer/wasalink", 0);
	mk_file("layer/wasalink/planted", "x\n", 0644, 0);
	mk_dir("layer/becomes-dir", 0);
	mk_link("layer/escape", "/"); /* a symlink out, kept as a symlink */
	/* A layer with what every start mounts over (a cache entry made by
	 * hand, an older build): /tmp as a symlink to the host's directory
	 * and a whiteout of /run. Skipped: the tree keeps its directories. */
	mk_dir("rootfs/tmp", 0);
	mk_dir("rootfs/run", 0);
	mk_link("layer/tmp", host);
	at(p, sizeof p, "layer/run");
	assert_int_equal(mknod(p, S_IFCHR, makedev(0, 0)), 0);

	at(layer, sizeof layer, "layer");
	at(root, sizeof root, "rootfs");
	struct err e = {0};
	assert_int_equal(layer_apply(layer, root, &e), 0);

	struct stat s;
	assert_false(exists("rootfs/old", NULL));
	assert_string_equal(slurp("rootfs/dir/kept"), "kept\n");
	assert_string_equal(slurp("rootfs/dir/new"), "new\n");
	assert_true(exists("rootfs/dir/new", &s));
	assert_int_equal(s.st_uid, 1000);
	struct stat ls;
	assert_true(exists("layer/dir/new", &ls));
	assert_int_equal(s.st_ino, ls.st_ino); /* hard-linked, not copied */
	assert_false(exists("rootfs/opaque/hidden", NULL));
	assert_string_equal(slurp("rootfs/opaque/only"), "only\n");
	assert_true(exists("rootfs/wasalink", &s));
	assert_true(S_ISDIR(s.st_mode));
	assert_true(exists("rootfs/wasalink/planted", NULL));
	assert_false(exists("host/planted", NULL));
	assert_string_equal(slurp("host/keep"), "host file\n");
	assert_true(exists("rootfs/becomes-dir", &s));
	assert_true(S_ISDIR(s.st_mode));
	assert_true(exists("rootfs/escape", &s));
	assert_true(S_ISLNK(s.st_mode));
	assert_true(exists("rootfs/tmp", &s));
	assert_true(S_ISDIR(s.st_mode));
	assert_true(exists("rootfs/run", &s));
	assert_true(S_ISDIR(s.st_mode));

	/* A change made later through the tree stays in it: /etc -> the
	 * host's directory resolves as the tree's own "/" would. */
	mk_dir("host/cubicle", 0);
	snprintf(p, sizeof p, "%s/etc", root);
	assert_int_equal(symlink(host, p), 0);
	int fd = layer_open_dir(root, "etc/cubicle", &e);
	assert_int_equal(fd, -1);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_copy_sanitizes, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_copy_cap, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_apply, setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
