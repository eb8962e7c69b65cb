/*
 * cgroup: a computer's control group on cgroup v1 or v2 (see cgroup.h).
 *
 * The hierarchy is found at run time from /proc/self/mountinfo: a cgroup2
 * mount whose root offers cpu, memory and pids is v2 (most hosts today);
 * otherwise each controller's v1 mount is used (older hosts and this
 * project's development machine, which has v1 with an empty v2 mount).
 * Limits are written per file with a message naming the file, so a host
 * that refuses one (a delegated v2 subtree without the memory controller,
 * say) says exactly which.
 */
#include "cgroup.h"
#include "clock.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define CGROUP_PARENT	 "cubicle"
#define CGROUP_PERIOD_US 100000

/* Decodes mountinfo's octal escapes (\040 for a space) in place. */
static void cgroup_unescape(char *s)
{
	char *w = s;
	for (char *r = s; *r; r++) {
		if (r[0] == '\\' && r[1] >= '0' && r[1] <= '7' && r[2] >= '0' && r[2] <= '7' &&
		    r[3] >= '0' && r[3] <= '7') {
			*w++ = (char)((r[1] - '0') * 64 + (r[2] - '0') * 8 + (r[3] - '0'));
			r += 3;
		} else {
			*w++ = *r;
		}
	}
	*w = '\0';
}

/* Whether the comma-separated list has the token. */
static bool cgroup_has_token(const char *list, const char *tok, char sep)
{
	size_t n = strlen(tok);
	const char *p = list;
	while (p && *p) {
		const char *end = strchr(p, sep);
		size_t len = end ? (size_t)(end - p) : strlen(p);
		if (len == n && strncmp(p, tok, n) == 0)
			return true;
		p = end ? end + 1 : NULL;
	}
	return false;
}

/* Reads a small file into buf (NUL-terminated, trailing newline removed). */
static int cgroup_read_small(const char *path, char *buf, size_t len)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	ssize_t n = read(fd, buf, len - 1);
	close(fd);
	if (n < 0)
		return -1;
	buf[n] = '\0';
	while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == ' '))
		buf[--n] = '\0';
	return 0;
}

static bool cgroup_file_exists(const char *dir, const char *file)
{
	char path[512];
	snprintf(path, sizeof(path), "%s/%s", dir, file);
	return access(path, F_OK) == 0;
}

static int cgroup_write(const char *dir, const char *file, const char *value, struct err *e)
{
	char path[512];
	snprintf(path, sizeof(path), "%s/%s", dir, file);
	/* O_APPEND changes nothing on cgroupfs (each write is one command) and
	 * makes a fake hierarchy of plain files keep every write, in order
	 * (tests/unit/test_cgroup.c). */
	int fd = open(path, O_WRONLY | O_APPEND | O_CLOEXEC);
	if (fd < 0)
		return err_set(e, ERR_UNAVAILABLE, "cgroup: cannot open %s: %s", path,
			       strerror(errno));
	ssize_t n = write(fd, value, strlen(value));
	int saved = errno;
	close(fd);
	if (n < 0)
		return err_set(e, ERR_UNAVAILABLE, "cgroup: cannot write '%s' to %s: %s", value,
			       path, strerror(saved));
	return 0;
}

static void cgroup_add_dir(struct cgroup_set *s, const char *mount, const char *id)
{
	for (int i = 0; i < s->n; i++)
		if (strncmp(s->dirs[i], mount, strlen(mount)) == 0 &&
		    s->dirs[i][strlen(mount)] == '/')
			return; /* a combined mount (cpu,cpuacct) already listed */
	if (s->n >= CGROUP_MAX_DIRS)
		return;
	char dir[sizeof(s->dirs[0])];
	snprintf(dir, sizeof(dir), "%s/%s/%s", mount, CGROUP_PARENT, id);
	memcpy(s->dirs[s->n], dir, sizeof(dir));
	snprintf(s->procs[s->n], sizeof(s->procs[0]), "%s/cgroup.procs", dir);
	s->n++;
}

int cgroup_locate(const char *id, struct cgroup_set *out, struct err *e)
{
	return cgroup_locate_in("/proc/self/mountinfo", id, out, e);
}

bool cgroup_usable(char *why, size_t len)
{
	struct cgroup_set cg;
	struct err e;
	if (cgroup_locate("probe", &cg, &e) < 0) {
		snprintf(why, len, "%s", e.message);
		return false;
	}
	if (why && len)
		why[0] = '\0';
	return true;
}

int cgroup_locate_in(const char *mountinfo, const char *id, struct cgroup_set *out, struct err *e)
{
	memset(out, 0, sizeof(*out));
	FILE *f = fopen(mountinfo, "re");
	if (!f)
		return err_set(e, ERR_INTERNAL, "cgroup: cannot read %s: %s", mountinfo,
			       strerror(errno));
	/* v1 controllers we want, and where each is mounted. */
	static const char *const v1[] = {"cpu", "cpuacct", "memory", "pids", "name=systemd"};
	char v1mount[5][256] = {{0}};
	char v2mount[256] = "";
	char *line = NULL;
	size_t cap = 0;
	while (getline(&line, &cap, f) > 0) {
		/* ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTS [OPTIONAL...] - FSTYPE SOURCE SUPEROPTS */
		char *sep = strstr(line, " - ");
		if (!sep)
			continue;
		*sep = '\0';
		char mnt[256], fstype[64], source[256], super[512];
		if (sscanf(line, "%*s %*s %*s %*s %255s", mnt) != 1 ||
		    sscanf(sep + 3, "%63s %255s %511s", fstype, source, super) != 3)
			continue;
		cgroup_unescape(mnt);
		if (strcmp(fstype, "cgroup2") == 0 && !v2mount[0]) {
			char path[512], ctl[512];
			snprintf(path, sizeof(path), "%s/cgroup.controllers", mnt);
			if (cgroup_read_small(path, ctl, sizeof(ctl)) == 0 &&
			    cgroup_has_token(ctl, "cpu", ' ') &&
			    cgroup_has_token(ctl, "memory", ' ') &&
			    cgroup_has_token(ctl, "pids", ' '))
				snprintf(v2mount, sizeof(v2mount), "%s", mnt);
		} else if (strcmp(fstype, "cgroup") == 0) {
			for (size_t i = 0; i < sizeof(v1) / sizeof(v1[0]); i++)
				if (!v1mount[i][0] && cgroup_has_token(super, v1[i], ','))
					snprintf(v1mount[i], sizeof(v1mount[i]), "%s", mnt);
		}
	}
	free(line);
	fclose(f);

	if (v2mount[0]) {
		out->version = 2;
		cgroup_add_dir(out, v2mount, id);
		return 0;
	}
	const char *missing = !v1mount[0][0]   ? "cpu"
			      : !v1mount[2][0] ? "memory"
			      : !v1mount[3][0] ? "pids"
					       : NULL;
	if (missing)
		return err_set(
		    e, ERR_UNAVAILABLE,
		    "cgroup: this host mounts neither a cgroup v2 hierarchy with the cpu, "
		    "memory and pids controllers nor a cgroup v1 '%s' hierarchy; the "
		    "container driver needs them to enforce sizes",
		    missing);
	out->version = 1;
	for (size_t i = 0; i < sizeof(v1) / sizeof(v1[0]); i++)
		if (v1mount[i][0])
			cgroup_add_dir(out, v1mount[i], id);
	return 0;
}

/* mkdir that accepts an existing directory. */
static int cgroup_mkdir(const char *path, struct err *e)
{
	if (mkdir(path, 0755) < 0 && errno != EEXIST)
		return err_set(e, ERR_UNAVAILABLE, "cgroup: cannot create %s: %s", path,
			       strerror(errno));
	return 0;
}

/* dirname(dir): the shared "cubicle" parent. */
static void cgroup_parent_of(const char *dir, char *out, size_t len)
{
	snprintf(out, len, "%s", dir);
	char *slash = strrchr(out, '/');
	if (slash)
		*slash = '\0';
}

/*
 * Enables cpu, memory and pids for dir's children, writing only what is
 * missing: a group that already delegates them may hold processes (the
 * root of a cgroup namespace), and writing to it again would fail.
 */
static int cgroup_enable(const char *dir, struct err *e)
{
	static const char *const ctl[] = {"cpu", "memory", "pids"};
	char path[512], have[512] = "", v[16];
	snprintf(path, sizeof(path), "%s/cgroup.subtree_control", dir);
	cgroup_read_small(path, have, sizeof(have));
	for (size_t i = 0; i < sizeof(ctl) / sizeof(ctl[0]); i++) {
		if (cgroup_has_token(have, ctl[i], ' '))
			continue;
		snprintf(v, sizeof(v), "+%s", ctl[i]);
		if (cgroup_write(dir, "cgroup.subtree_control", v, e) < 0)
			return -1;
	}
	return 0;
}

static int cgroup_create_v2(const struct cgroup_set *s, const struct cgroup_limits *lim,
			    struct err *e)
{
	const char *dir = s->dirs[0];
	char parent[256], root[256];
	cgroup_parent_of(dir, parent, sizeof(parent));
	cgroup_parent_of(parent, root, sizeof(root));
	/* Controllers must be enabled top-down for the leaf to offer them. */
	if (cgroup_enable(root, e) < 0 || cgroup_mkdir(parent, e) < 0 ||
	    cgroup_enable(parent, e) < 0 || cgroup_mkdir(dir, e) < 0)
		return -1;

	char v[64];
	if (lim->millicpus > 0)
		snprintf(v, sizeof(v), "%lld %d",
			 (long long)lim->millicpus * CGROUP_PERIOD_US / 1000, CGROUP_PERIOD_US);
	else
		snprintf(v, sizeof(v), "max %d", CGROUP_PERIOD_US);
	if (cgroup_write(dir, "cpu.max", v, e) < 0)
		return -1;
	if (lim->memory_mb > 0)
		snprintf(v, sizeof(v), "%lld", lim->memory_mb * 1024 * 1024);
	else
		snprintf(v, sizeof(v), "max");
	if (cgroup_write(dir, "memory.max", v, e) < 0)
		return -1;
	if (cgroup_file_exists(dir, "memory.swap.max") &&
	    cgroup_write(dir, "memory.swap.max", lim->memory_mb > 0 ? "0" : "max", e) < 0)
		return -1;
	if (lim->pids_max > 0)
		snprintf(v, sizeof(v), "%d", lim->pids_max);
	else
		snprintf(v, sizeof(v), "max");
	return cgroup_write(dir, "pids.max", v, e);
}

/* One v1 hierarchy: writes the limits its controllers have files for. */
static int cgroup_create_v1(const char *dir, const struct cgroup_limits *lim, struct err *e)
{
	char parent[256], v[64];
	cgroup_parent_of(dir, parent, sizeof(parent));
	if (cgroup_mkdir(parent, e) < 0 || cgroup_mkdir(dir, e) < 0)
		return -1;
	if (cgroup_file_exists(dir, "cpu.cfs_quota_us")) {
		snprintf(v, sizeof(v), "%d", CGROUP_PERIOD_US);
		if (cgroup_write(dir, "cpu.cfs_period_us", v, e) < 0)
			return -1;
		if (lim->millicpus > 0)
			snprintf(v, sizeof(v), "%lld",
				 (long long)lim->millicpus * CGROUP_PERIOD_US / 1000);
		else
			snprintf(v, sizeof(v), "-1");
		if (cgroup_write(dir, "cpu.cfs_quota_us", v, e) < 0)
			return -1;
	}
	if (cgroup_file_exists(dir, "memory.limit_in_bytes")) {
		bool memsw = cgroup_file_exists(dir, "memory.memsw.limit_in_bytes");
		/* memory+swap may never be below memory: lift it first. */
		if (memsw && cgroup_write(dir, "memory.memsw.limit_in_bytes", "-1", e) < 0)
			return -1;
		if (lim->memory_mb > 0)
			snprintf(v, sizeof(v), "%lld", lim->memory_mb * 1024 * 1024);
		else
			snprintf(v, sizeof(v), "-1");
		if (cgroup_write(dir, "memory.limit_in_bytes", v, e) < 0)
			return -1;
		if (memsw && cgroup_write(dir, "memory.memsw.limit_in_bytes", v, e) < 0)
			return -1;
		/* Without memsw accounting (no swap accounting on the kernel
		 * command line), at least keep the group from swapping. */
		if (!memsw && lim->memory_mb > 0 && cgroup_file_exists(dir, "memory.swappiness") &&
		    cgroup_write(dir, "memory.swappiness", "0", e) < 0)
			return -1;
	}
	if (cgroup_file_exists(dir, "pids.max")) {
		if (lim->pids_max > 0)
			snprintf(v, sizeof(v), "%d", lim->pids_max);
		else
			snprintf(v, sizeof(v), "max");
		if (cgroup_write(dir, "pids.max", v, e) < 0)
			return -1;
	}
	return 0;
}

int cgroup_create(const struct cgroup_set *s, const struct cgroup_limits *lim, struct err *e)
{
	if (s->version == 2)
		return cgroup_create_v2(s, lim, e);
	for (int i = 0; i < s->n; i++)
		if (cgroup_create_v1(s->dirs[i], lim, e) < 0)
			return -1;
	return 0;
}

int cgroup_attach(const struct cgroup_set *s, pid_t pid, struct err *e)
{
	char v[32];
	snprintf(v, sizeof(v), "%d", (int)pid);
	for (int i = 0; i < s->n; i++)
		if (cgroup_write(s->dirs[i], "cgroup.procs", v, e) < 0)
			return -1;
	return 0;
}

/*
 * Calls fn for every pid listed in the set's cgroup.procs files; returns
 * how many were listed.
 */
static int cgroup_each_pid(const struct cgroup_set *s, void (*fn)(pid_t))
{
	int count = 0;
	for (int i = 0; i < s->n; i++) {
		FILE *f = fopen(s->procs[i], "re");
		if (!f)
			continue;
		long pid;
		while (fscanf(f, "%ld", &pid) == 1) {
			count++;
			if (fn)
				fn((pid_t)pid);
		}
		fclose(f);
	}
	return count;
}

int cgroup_open_memory(const struct cgroup_set *s, int *usage_fd, int *stat_fd, struct err *e)
{
	const char *usage = s->version == 2 ? "memory.current" : "memory.usage_in_bytes";
	*usage_fd = *stat_fd = -1;
	for (int i = 0; i < s->n; i++) {
		if (!cgroup_file_exists(s->dirs[i], usage))
			continue;
		char path[512];
		snprintf(path, sizeof(path), "%s/%s", s->dirs[i], usage);
		*usage_fd = open(path, O_RDONLY | O_CLOEXEC);
		if (*usage_fd < 0)
			return err_set(e, ERR_UNAVAILABLE, "cgroup: cannot open %s: %s", path,
				       strerror(errno));
		snprintf(path, sizeof(path), "%s/memory.stat", s->dirs[i]);
		*stat_fd = open(path, O_RDONLY | O_CLOEXEC);
		if (*stat_fd < 0) {
			int saved = errno;
			close(*usage_fd);
			*usage_fd = -1;
			return err_set(e, ERR_UNAVAILABLE, "cgroup: cannot open %s: %s", path,
				       strerror(saved));
		}
		return 0;
	}
	return err_set(e, ERR_UNAVAILABLE, "cgroup: the computer's group has no %s", usage);
}

bool cgroup_populated(const struct cgroup_set *s)
{
	return cgroup_each_pid(s, NULL) > 0;
}

static void cgroup_sigkill(pid_t pid)
{
	if (pid > 1)
		kill(pid, SIGKILL);
}

int cgroup_kill(const struct cgroup_set *s, int timeout_ms, struct err *e)
{
	for (int waited = 0;; waited += 10) {
		/* v2's cgroup.kill kills the whole subtree at once, forks racing it included. */
		if (s->version == 2 && cgroup_file_exists(s->dirs[0], "cgroup.kill"))
			cgroup_write(s->dirs[0], "cgroup.kill", "1", NULL);
		int left = cgroup_each_pid(s, cgroup_sigkill);
		if (left == 0)
			return 0;
		if (waited >= timeout_ms)
			return err_set(e, ERR_TIMEOUT,
				       "cgroup: %d processes in %s survived SIGKILL for %d ms",
				       left, s->dirs[0], timeout_ms);
		clock_sleep_ms(10);
	}
}

int cgroup_remove(const struct cgroup_set *s, struct err *e)
{
	if (cgroup_kill(s, 5000, e) < 0)
		return -1;
	for (int i = 0; i < s->n; i++) {
		/* A group empties a moment after its last process is reaped. */
		for (int waited = 0; rmdir(s->dirs[i]) < 0; waited += 10) {
			if (errno == ENOENT)
				break;
			if (errno != EBUSY || waited >= 2000)
				return err_set(e, ERR_UNAVAILABLE, "cgroup: cannot remove %s: %s",
					       s->dirs[i], strerror(errno));
			cgroup_each_pid(s, cgroup_sigkill);
			clock_sleep_ms(10);
		}
	}
	return 0;
}

json_t *cgroup_to_json(const struct cgroup_set *s)
{
	json_t *dirs = json_array();
	for (int i = 0; i < s->n; i++)
		json_array_append_new(dirs, json_string(s->dirs[i]));
	return json_pack("{s:i,s:o}", "version", s->version, "dirs", dirs);
}

int cgroup_from_json(const json_t *j, struct cgroup_set *out)
{
	memset(out, 0, sizeof(*out));
	json_t *dirs = json_object_get(j, "dirs");
	json_t *ver = json_object_get(j, "version");
	if (!json_is_integer(ver) || !json_is_array(dirs) ||
	    json_array_size(dirs) > CGROUP_MAX_DIRS)
		return -1;
	out->version = (int)json_integer_value(ver);
	size_t i;
	json_t *d;
	json_array_foreach(dirs, i, d)
	{
		const char *p = json_string_value(d);
		/* Only ever a cubicle group: a corrupted state must not make us
		 * kill or remove anything else. */
		if (!p || strlen(p) >= sizeof(out->dirs[0]) || p[0] != '/' ||
		    !strstr(p, "/" CGROUP_PARENT "/") || strstr(p, ".."))
			return -1;
		snprintf(out->dirs[out->n], sizeof(out->dirs[0]), "%s", p);
		snprintf(out->procs[out->n], sizeof(out->procs[0]), "%s/cgroup.procs", p);
		out->n++;
	}
	return 0;
}
