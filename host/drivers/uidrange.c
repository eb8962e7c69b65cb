/*
 * uidrange: the registry of per-computer host uid ranges (see uidrange.h).
 *
 * A symlink per claimed range is the simplest record that is atomic to
 * create (symlink() fails on an existing name), readable by a person
 * (ls -l shows which computer holds which range) and needs no database of
 * its own: the core's SQLite keeps the range a computer has in its driver
 * state, this registry only keeps two computers from taking the same one.
 */
#include "uidrange.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#define UIDRANGE_DIR "/var/lib/cubicle/uid-slots"

unsigned uidrange_base(long long slot)
{
	return UIDRANGE_FIRST + (unsigned)slot * UIDRANGE_SIZE;
}

static const char *uidrange_dir(void)
{
	const char *d = getenv("CUBICLE_UID_SLOTS");
	return d && d[0] ? d : UIDRANGE_DIR;
}

static int uidrange_mkdir_p(const char *path, mode_t mode)
{
	char buf[4096];
	snprintf(buf, sizeof(buf), "%s", path);
	for (char *p = buf + 1; *p; p++) {
		if (*p != '/')
			continue;
		*p = '\0';
		if (mkdir(buf, mode) < 0 && errno != EEXIST)
			return -1;
		*p = '/';
	}
	return mkdir(buf, mode) < 0 && errno != EEXIST ? -1 : 0;
}

/* Locks the registry; returns the lock's descriptor (close() unlocks). */
static int uidrange_lock(struct err *e)
{
	const char *dir = uidrange_dir();
	char lock[4200];
	if (uidrange_mkdir_p(dir, 0700) < 0)
		return err_set(e, ERR_UNAVAILABLE, "container: cannot create %s: %s", dir,
			       strerror(errno));
	snprintf(lock, sizeof(lock), "%s/.lock", dir);
	int fd = open(lock, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	if (fd < 0 || flock(fd, LOCK_EX) < 0) {
		int saved = errno;
		if (fd >= 0)
			close(fd);
		return err_set(e, ERR_UNAVAILABLE, "container: cannot lock %s: %s", lock,
			       strerror(saved));
	}
	return fd;
}

/* Whether a claim's computer is gone: its directory has neither upper/ (a
 * container) nor vm/ (a microVM, whose QEMU runs as the range's first id). */
static bool uidrange_stale(const char *target)
{
	static const char *const marks[] = {"upper", "vm"};
	for (size_t i = 0; i < 2; i++) {
		char path[4200];
		snprintf(path, sizeof(path), "%s/%s", target, marks[i]);
		if (access(path, F_OK) == 0 || errno != ENOENT)
			return false;
	}
	return true;
}

/* Marks in `used` (UIDRANGE_COUNT entries) the ranges in which some process
 * still runs: a computer whose directory is gone (a crashed test, a wiped
 * state dir) may have left processes behind, and a new computer given their
 * ids could signal or ptrace them. One /proc scan per claim. When /proc
 * cannot be read, every range counts as used. */
static void uidrange_scan(bool *used)
{
	DIR *proc = opendir("/proc");
	if (!proc) {
		memset(used, 1, UIDRANGE_COUNT * sizeof *used);
		return;
	}
	memset(used, 0, UIDRANGE_COUNT * sizeof *used);
	struct dirent *de;
	while ((de = readdir(proc))) {
		if (de->d_name[0] < '1' || de->d_name[0] > '9')
			continue;
		char path[300], line[256];
		snprintf(path, sizeof path, "/proc/%s/status", de->d_name);
		FILE *f = fopen(path, "re");
		if (!f)
			continue;
		while (fgets(line, sizeof line, f)) {
			unsigned ids[4];
			if (sscanf(line, "Uid: %u %u %u %u", &ids[0], &ids[1], &ids[2], &ids[3]) !=
			    4)
				continue;
			for (int k = 0; k < 4; k++)
				if (ids[k] >= UIDRANGE_FIRST && ids[k] < UIDRANGE_END)
					used[(ids[k] - UIDRANGE_FIRST) / UIDRANGE_SIZE] = true;
			break;
		}
		fclose(f);
	}
	closedir(proc);
}

/* Whether the registry entry `link` for a slot is free for owner: owner's
 * own; or missing or stale, with no process left in the range (`busy`). */
static bool uidrange_free_for(const char *owner, const char *link, bool busy)
{
	char target[4096];
	ssize_t n = readlink(link, target, sizeof(target) - 1);
	if (n < 0)
		return errno == ENOENT && !busy;
	target[n] = '\0';
	return strcmp(target, owner) == 0 || (!busy && uidrange_stale(target));
}

long long uidrange_claim(const char *owner, long long want, struct err *e)
{
	int lock = uidrange_lock(e);
	if (lock < 0)
		return -1;
	bool *used = malloc(UIDRANGE_COUNT * sizeof *used);
	if (!used) {
		close(lock);
		return err_set(e, ERR_INTERNAL, "out of memory");
	}
	uidrange_scan(used);
	const char *dir = uidrange_dir();
	char link[4200];
	long long slot = -1;
	int rc = 0;
	if (want >= 0 && want < (long long)UIDRANGE_COUNT) {
		snprintf(link, sizeof(link), "%s/%lld", dir, want);
		if (!uidrange_free_for(owner, link, used[want]))
			rc = err_set(e, ERR_INTERNAL,
				     "container: uid range %lld of %s is claimed by another "
				     "computer in %s",
				     want, owner, dir);
		else if ((unlink(link) < 0 && errno != ENOENT) || symlink(owner, link) < 0)
			rc = err_set(e, ERR_UNAVAILABLE, "container: cannot claim %s: %s", link,
				     strerror(errno));
		else
			slot = want;
	}
	for (unsigned s = 0; rc == 0 && slot < 0 && s < UIDRANGE_COUNT; s++) {
		snprintf(link, sizeof(link), "%s/%u", dir, s);
		if (used[s])
			continue; /* a left-over process, whatever the registry says */
		if (symlink(owner, link) == 0)
			slot = s;
		else if (errno != EEXIST)
			rc = err_set(e, ERR_UNAVAILABLE, "container: cannot claim %s: %s", link,
				     strerror(errno));
		else if (uidrange_free_for(owner, link, false) && unlink(link) == 0 &&
			 symlink(owner, link) == 0)
			slot = s;
	}
	free(used);
	close(lock);
	if (rc < 0)
		return -1;
	if (slot < 0)
		return err_set(e, ERR_LIMIT, "container: all %u uid ranges in %s are in use",
			       UIDRANGE_COUNT, dir);
	return slot;
}

void uidrange_release(const char *owner, long long slot)
{
	if (slot < 0)
		return;
	int lock = uidrange_lock(NULL);
	if (lock < 0)
		return;
	char link[4200], target[4096];
	snprintf(link, sizeof(link), "%s/%lld", uidrange_dir(), slot);
	ssize_t n = readlink(link, target, sizeof(target) - 1);
	if (n >= 0 && (size_t)n == strlen(owner) && strncmp(target, owner, (size_t)n) == 0)
		unlink(link);
	close(lock);
}

/* nftw gives no context pointer: the base being moved to, per thread. */
static _Thread_local unsigned uidrange_adopt_base;

static unsigned uidrange_shift(unsigned id)
{
	unsigned base = uidrange_adopt_base;
	if (id >= UIDRANGE_FIRST && id < UIDRANGE_END && (id < base || id >= base + UIDRANGE_SIZE))
		return base + (id - UIDRANGE_FIRST) % UIDRANGE_SIZE;
	return id;
}

static int uidrange_adopt_one(const char *path, const struct stat *st, int flag, struct FTW *f)
{
	unsigned uid = uidrange_shift(st->st_uid), gid = uidrange_shift(st->st_gid);
	if (flag != FTW_NS && (uid != st->st_uid || gid != st->st_gid))
		(void)!lchown(path, uid, gid);
	return 0;
}

void uidrange_adopt_tree(const char *path, unsigned base)
{
	uidrange_adopt_base = base;
	nftw(path, uidrange_adopt_one, 16, FTW_PHYS | FTW_MOUNT);
}

int uidrange_session_prepare(const char *dir, unsigned base, struct err *e)
{
	unsigned user = base + UIDRANGE_GUEST_USER;
	if (mkdir(dir, 0755) < 0 && errno != EEXIST)
		return err_set(e, ERR_UNAVAILABLE, "cannot create the session directory %s: %s",
			       dir, strerror(errno));
	uidrange_adopt_tree(dir, base);
	static const char *const subs[] = {"input", "output", "working"};
	for (size_t i = 0; i < 3; i++) {
		char path[4096];
		snprintf(path, sizeof(path), "%s/%s", dir, subs[i]);
		if ((mkdir(path, 0755) < 0 && errno != EEXIST) || lchown(path, user, user) < 0)
			return err_set(e, ERR_UNAVAILABLE, "cannot set up %s: %s", path,
				       strerror(errno));
	}
	return 0;
}
