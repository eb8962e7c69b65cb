/*
 * cgroup: what cgroup.c writes for a size on cgroup v2 and v1, and how it
 * cleans up (cmocka).
 *
 * The development machine runs cgroup v1, so the v2 path is tested in two
 * halves:
 * - the limits, against a fake hierarchy of plain files in a temporary
 *   directory, found through a fake mount table (cgroup_locate_in): every
 *   file and value written for the `xs` size of host/core/sizes.c, in order
 *   (cgroup.c appends, so a plain file keeps each write);
 * - membership and cleanup, on a real cgroup2 hierarchy mounted in a
 *   private mount namespace: on a v1 (or hybrid) host it has no cpu, memory
 *   or pids controller, but cgroup.procs, cgroup.kill and rmdir are the
 *   kernel's own. Skipped where cgroup2 cannot be mounted (not root).
 */
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>
#include "child.h"

#include "cgroup.h"
#include "drvutil.h"
#include "sizes.h"

static char tmp[256];

static void path_of(char *out, size_t len, const char *rel)
{
	snprintf(out, len, "%s/%s", tmp, rel);
}

static void put(const char *rel, const char *data)
{
	char p[512];
	path_of(p, sizeof(p), rel);
	FILE *f = fopen(p, "w");
	assert_non_null(f);
	fputs(data, f);
	fclose(f);
}

static void dir(const char *rel)
{
	char p[512];
	path_of(p, sizeof(p), rel);
	assert_int_equal(mkdir(p, 0755), 0);
}

/* The file's contents, in a static buffer. */
static const char *got(const char *rel)
{
	static char buf[256];
	char p[512];
	path_of(p, sizeof(p), rel);
	FILE *f = fopen(p, "r");
	assert_non_null(f);
	size_t n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = '\0';
	return buf;
}

static int setup(void **state)
{
	(void)state;
	snprintf(tmp, sizeof(tmp), "/tmp/cubicle-cgroup-XXXXXX");
	return mkdtemp(tmp) ? 0 : -1;
}

static int teardown(void **state)
{
	(void)state;
	char cmd[300];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmp);
	return system(cmd) == 0 ? 0 : -1;
}

/* A mount table with one line per (mount point, type, super options). */
static void mountinfo(const char *const lines[][3], size_t n)
{
	char p[512], line[1024];
	path_of(p, sizeof(p), "mountinfo");
	FILE *f = fopen(p, "w");
	assert_non_null(f);
	fputs("27 1 254:0 / / rw,relatime - ext4 /dev/vda rw\n", f);
	for (size_t i = 0; i < n; i++) {
		snprintf(line, sizeof(line), "%zu 31 0:%zu / %s/%s rw,relatime - %s %s %s\n",
			 40 + i, 29 + i, tmp, lines[i][0], lines[i][1], lines[i][1], lines[i][2]);
		fputs(line, f);
	}
	fclose(f);
}

static const struct size *xs(void)
{
	struct err e = {0};
	const struct size *s = size_find("sandbox", "xs", &e);
	assert_non_null(s);
	return s;
}

/* The files the kernel would create in a new v2 group. */
static void v2_group_files(const char *group)
{
	static const char *const files[] = {
	    "cpu.max",	    "memory.max",  "memory.swap.max",	    "pids.max",
	    "cgroup.procs", "cgroup.kill", "cgroup.subtree_control"};
	char rel[256];
	dir(group);
	for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
		snprintf(rel, sizeof(rel), "%s/%s", group, files[i]);
		put(rel, "");
	}
}

static void test_v2_limits_of_a_size(void **state)
{
	(void)state;
	dir("unified");
	put("unified/cgroup.controllers", "cpuset cpu io memory hugetlb pids rdma misc\n");
	put("unified/cgroup.subtree_control", "cpu\n"); /* already delegated: not again */
	dir("unified/cubicle");
	put("unified/cubicle/cgroup.subtree_control", "");
	v2_group_files("unified/cubicle/c-unit");
	const char *const mounts[][3] = {{"cpu", "cgroup", "rw,cpu"},
					 {"unified", "cgroup2", "rw,nsdelegate"}};
	mountinfo(mounts, 2);

	char mi[512];
	path_of(mi, sizeof(mi), "mountinfo");
	struct cgroup_set s;
	struct err e = {0};
	assert_int_equal(cgroup_locate_in(mi, "c-unit", &s, &e), 0);
	assert_int_equal(s.version, 2);
	assert_int_equal(s.n, 1);
	char want[512];
	path_of(want, sizeof(want), "unified/cubicle/c-unit");
	assert_string_equal(s.dirs[0], want);

	const struct size *sz = xs();
	struct cgroup_limits lim = {sz->millicpus, sz->memory_mb, sz->pids_max};
	assert_int_equal(cgroup_create(&s, &lim, &e), 0);
	/* Controllers enabled top-down, only those missing. */
	assert_string_equal(got("unified/cgroup.subtree_control"), "cpu\n+memory+pids");
	assert_string_equal(got("unified/cubicle/cgroup.subtree_control"), "+cpu+memory+pids");
	/* xs: half a CPU, 512 MiB and no swap, 512 processes. */
	assert_string_equal(got("unified/cubicle/c-unit/cpu.max"), "50000 100000");
	assert_string_equal(got("unified/cubicle/c-unit/memory.max"), "536870912");
	assert_string_equal(got("unified/cubicle/c-unit/memory.swap.max"), "0");
	assert_string_equal(got("unified/cubicle/c-unit/pids.max"), "512");
	assert_string_equal(got("unified/cubicle/c-unit/cgroup.procs"), "");

	assert_int_equal(cgroup_attach(&s, 4242, &e), 0);
	assert_string_equal(got("unified/cubicle/c-unit/cgroup.procs"), "4242");

	/* The JSON kept in the state finds the same group again. */
	json_t *j = cgroup_to_json(&s);
	struct cgroup_set back;
	assert_int_equal(cgroup_from_json(j, &back), 0);
	json_decref(j);
	assert_int_equal(back.version, 2);
	assert_string_equal(back.dirs[0], s.dirs[0]);

	/* Cleanup: cgroup.kill, then the directory (once the kernel has
	 * emptied it; here the test plays the kernel). */
	put("unified/cubicle/c-unit/cgroup.procs", "");
	static const char *const iface[] = {"cpu.max", "memory.max", "memory.swap.max", "pids.max",
					    "cgroup.subtree_control"};
	for (size_t i = 0; i < sizeof(iface) / sizeof(iface[0]); i++) {
		char p[512];
		snprintf(p, sizeof(p), "%s/%s", s.dirs[0], iface[i]);
		assert_int_equal(unlink(p), 0);
	}
	char kill_file[512];
	snprintf(kill_file, sizeof(kill_file), "%s/cgroup.kill", s.dirs[0]);
	/* cgroup_remove writes cgroup.kill while the directory exists; rmdir
	 * then fails on the fake's leftover files, which it reports. */
	assert_int_equal(cgroup_remove(&s, &e), -1);
	assert_string_equal(got("unified/cubicle/c-unit/cgroup.kill"), "1");
	assert_non_null(strstr(e.message, "c-unit"));
	unlink(kill_file);
	char procs[512];
	snprintf(procs, sizeof(procs), "%s/cgroup.procs", s.dirs[0]);
	unlink(procs);
	assert_int_equal(cgroup_remove(&s, &e), 0);
	struct stat st;
	assert_int_equal(stat(s.dirs[0], &st), -1);
	/* Idempotent. */
	assert_int_equal(cgroup_remove(&s, &e), 0);
}

static void test_v2_no_limits(void **state)
{
	(void)state;
	dir("unified");
	put("unified/cgroup.controllers", "cpu memory pids\n");
	put("unified/cgroup.subtree_control", "cpu memory pids\n");
	dir("unified/cubicle");
	put("unified/cubicle/cgroup.subtree_control", "cpu memory pids\n");
	v2_group_files("unified/cubicle/c-free");
	const char *const mounts[][3] = {{"unified", "cgroup2", "rw"}};
	mountinfo(mounts, 1);
	char mi[512];
	path_of(mi, sizeof(mi), "mountinfo");
	struct cgroup_set s;
	struct err e = {0};
	assert_int_equal(cgroup_locate_in(mi, "c-free", &s, &e), 0);
	struct cgroup_limits lim = {0, 0, 0};
	assert_int_equal(cgroup_create(&s, &lim, &e), 0);
	assert_string_equal(got("unified/cgroup.subtree_control"), "cpu memory pids\n");
	assert_string_equal(got("unified/cubicle/c-free/cpu.max"), "max 100000");
	assert_string_equal(got("unified/cubicle/c-free/memory.max"), "max");
	assert_string_equal(got("unified/cubicle/c-free/memory.swap.max"), "max");
	assert_string_equal(got("unified/cubicle/c-free/pids.max"), "max");
}

static void test_v2_without_controllers_is_v1_or_an_error(void **state)
{
	(void)state;
	dir("unified");
	put("unified/cgroup.controllers", "hugetlb\n"); /* a hybrid host's unified mount */
	const char *const mounts[][3] = {{"unified", "cgroup2", "rw"}};
	mountinfo(mounts, 1);
	char mi[512];
	path_of(mi, sizeof(mi), "mountinfo");
	struct cgroup_set s;
	struct err e = {0};
	assert_int_equal(cgroup_locate_in(mi, "c-x", &s, &e), -1);
	assert_int_equal(e.code, ERR_UNAVAILABLE);
	assert_non_null(strstr(e.message, "'cpu'"));
}

static void test_v1_limits_of_a_size(void **state)
{
	(void)state;
	static const char *const hier[] = {"cpu,cpuacct", "memory", "pids", "systemd"};
	for (size_t i = 0; i < 4; i++) {
		char rel[128];
		snprintf(rel, sizeof(rel), "%s", hier[i]);
		dir(rel);
		snprintf(rel, sizeof(rel), "%s/cubicle", hier[i]);
		dir(rel);
		snprintf(rel, sizeof(rel), "%s/cubicle/c-v1", hier[i]);
		dir(rel);
		snprintf(rel, sizeof(rel), "%s/cubicle/c-v1/cgroup.procs", hier[i]);
		put(rel, "");
	}
	put("cpu,cpuacct/cubicle/c-v1/cpu.cfs_period_us", "");
	put("cpu,cpuacct/cubicle/c-v1/cpu.cfs_quota_us", "");
	put("memory/cubicle/c-v1/memory.limit_in_bytes", "");
	put("memory/cubicle/c-v1/memory.memsw.limit_in_bytes", "");
	put("pids/cubicle/c-v1/pids.max", "");
	const char *const mounts[][3] = {{"cpu,cpuacct", "cgroup", "rw,cpu,cpuacct"},
					 {"memory", "cgroup", "rw,memory"},
					 {"pids", "cgroup", "rw,pids"},
					 {"systemd", "cgroup", "rw,xattr,name=systemd"},
					 {"unified", "cgroup2", "rw"}};
	mountinfo(mounts, 5);
	char mi[512];
	path_of(mi, sizeof(mi), "mountinfo");
	struct cgroup_set s;
	struct err e = {0};
	assert_int_equal(cgroup_locate_in(mi, "c-v1", &s, &e), 0);
	assert_int_equal(s.version, 1);
	assert_int_equal(s.n, 4); /* cpu and cpuacct share a mount */
	const struct size *sz = xs();
	struct cgroup_limits lim = {sz->millicpus, sz->memory_mb, sz->pids_max};
	assert_int_equal(cgroup_create(&s, &lim, &e), 0);
	assert_string_equal(got("cpu,cpuacct/cubicle/c-v1/cpu.cfs_period_us"), "100000");
	assert_string_equal(got("cpu,cpuacct/cubicle/c-v1/cpu.cfs_quota_us"), "50000");
	assert_string_equal(got("memory/cubicle/c-v1/memory.limit_in_bytes"), "536870912");
	/* memory+swap lifted first (it may never be below memory), then set. */
	assert_string_equal(got("memory/cubicle/c-v1/memory.memsw.limit_in_bytes"), "-1536870912");
	assert_string_equal(got("pids/cubicle/c-v1/pids.max"), "512");
	assert_int_equal(cgroup_attach(&s, 77, &e), 0);
	for (size_t i = 0; i < 4; i++) {
		char rel[128];
		snprintf(rel, sizeof(rel), "%s/cubicle/c-v1/cgroup.procs", hier[i]);
		assert_string_equal(got(rel), "77");
	}
}

/*
 * In a child with a private mount namespace: a real cgroup2 hierarchy,
 * a group with a sleeping process in it, cgroup_remove. Exit status 0 when
 * all went as it should, 77 when cgroup2 cannot be mounted here, else the
 * number of the failed step.
 */
static int real_v2_child(void)
{
	char mnt[100], parent[160];
	snprintf(mnt, sizeof(mnt), "%.80s/cg2", tmp);
	if (mkdir(mnt, 0755) < 0 || unshare(CLONE_NEWNS) < 0 ||
	    mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0 ||
	    mount("none", mnt, "cgroup2", 0, NULL) < 0)
		return 77;
	struct cgroup_set s = {.version = 2, .n = 1};
	snprintf(parent, sizeof(parent), "%s/cubicle-unit-%d", mnt, (int)getpid());
	snprintf(s.dirs[0], sizeof(s.dirs[0]), "%s/c-real", parent);
	snprintf(s.procs[0], sizeof(s.procs[0]), "%s/cgroup.procs", s.dirs[0]);
	if (mkdir(parent, 0755) < 0 || mkdir(s.dirs[0], 0755) < 0)
		return 1;
	pid_t sleeper = fork();
	if (sleeper == 0) {
		pause();
		_exit(0);
	}
	struct err e = {0};
	if (cgroup_attach(&s, sleeper, &e) < 0)
		return 2;
	if (!cgroup_populated(&s))
		return 3;
	char path[64], line[512] = "";
	snprintf(path, sizeof(path), "/proc/%d/cgroup", (int)sleeper);
	FILE *f = fopen(path, "r");
	bool inside = false;
	while (f && fgets(line, sizeof(line), f))
		if (strncmp(line, "0::/", 4) == 0 && strstr(line, "/c-real"))
			inside = true;
	if (f)
		fclose(f);
	if (!inside)
		return 4;
	/* With the controllers (a v2 host), the limits hold; without them
	 * (a v1 host's empty hierarchy), create names the file that refused. */
	struct cgroup_limits lim = {500, 512, 512};
	if (cgroup_create(&s, &lim, &e) == 0) {
		char cpu[512], v[64] = "";
		snprintf(cpu, sizeof(cpu), "%s/cpu.max", s.dirs[0]);
		FILE *m = fopen(cpu, "r");
		if (!m || !fgets(v, sizeof(v), m) || strcmp(v, "50000 100000\n") != 0)
			return 5;
		fclose(m);
	} else if (!strstr(e.message, "cgroup.subtree_control")) {
		return 5;
	}
	if (cgroup_remove(&s, &e) < 0)
		return 6;
	int status;
	if (waitpid(sleeper, &status, 0) != sleeper || !WIFSIGNALED(status) ||
	    WTERMSIG(status) != SIGKILL)
		return 7;
	struct stat st;
	if (stat(s.dirs[0], &st) == 0 || cgroup_populated(&s))
		return 8;
	if (rmdir(parent) < 0)
		return 9;
	umount2(mnt, MNT_DETACH);
	return 0;
}

static void test_v2_real_hierarchy_attach_and_remove(void **state)
{
	(void)state;
	if (geteuid() != 0)
		skip();
	child_check(real_v2_child);
}

/* drv_run's stderr file: a regular file is replaced, anything else (a FIFO
 * here; /dev/null once, which a caller passed and drv_run deleted) is left. */
static void test_drv_run_leaves_what_is_not_a_file(void **state)
{
	(void)state;
	char dir[] = "/tmp/cubicle-drvrun-XXXXXX", fifo[64], file[64];
	assert_non_null(mkdtemp(dir));
	snprintf(fifo, sizeof fifo, "%s/fifo", dir);
	snprintf(file, sizeof file, "%s/err", dir);
	assert_int_equal(mkfifo(fifo, 0600), 0);
	char *ok[] = {"sh", "-c", "echo to-stderr >&2", NULL};
	struct err e = {0};
	assert_int_equal(drv_run(ok, fifo, "test", &e), 0);
	struct stat st;
	assert_int_equal(lstat(fifo, &st), 0);
	assert_true(S_ISFIFO(st.st_mode));
	char *bad[] = {"sh", "-c", "echo why-it-failed >&2; exit 3", NULL};
	assert_int_equal(drv_run(bad, file, "test", &e), -1);
	assert_non_null(strstr(e.message, "why-it-failed"));
	assert_int_equal(lstat(file, &st), 0);
	assert_true(S_ISREG(st.st_mode));
	unlink(fifo), unlink(file), rmdir(dir);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_v2_limits_of_a_size, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_v2_no_limits, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_v2_without_controllers_is_v1_or_an_error, setup,
					    teardown),
	    cmocka_unit_test_setup_teardown(test_v1_limits_of_a_size, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_v2_real_hierarchy_attach_and_remove, setup,
					    teardown),
	    cmocka_unit_test(test_drv_run_leaves_what_is_not_a_file),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
