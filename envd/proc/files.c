/*
 * files: whole-file reads and writes with the client's identity.
 *
 * Identity. envd usually runs as root while client files belong to an
 * ordinary user, and several requests run at once on different threads. So
 * instead of seteuid (process-wide through glibc) the calling thread alone
 * takes the user's filesystem identity: the supplementary groups through the
 * raw setgroups syscall (credentials are per-thread in the kernel; glibc's
 * wrapper would broadcast the change to every thread), then setfsgid and
 * setfsuid, which only govern permission checks and the owner of new files.
 * Only open/mkdir/rename and friends run under it; the identity is restored
 * before the function returns, whatever happened. With run_as.uid ==
 * (uid_t)-1 none of this happens.
 *
 * Writes are atomic: a temporary file in the target's directory, written,
 * fsync'd, then renamed over the target, so a reader sees the old or the new
 * content, never half of it. Missing parent directories are created (owned by
 * the user). A symlink target is followed (the file it points to is
 * replaced, not the link). Mode: an explicit mode is applied exactly (no
 * umask); otherwise an existing file keeps its mode and a new one gets 0644.
 * An existing file's owner is kept where the identity allows it.
 */
#include "files.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/fsuid.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

/* The thread's identity before files_id_enter, to put back. */
struct files_id {
	bool switched;
	uid_t fsuid;
	gid_t fsgid;
	gid_t *groups;
	int ngroups;
};

/* Takes as's filesystem identity on this thread (see the top comment). */
static int files_id_enter(const struct run_as *as, struct files_id *saved, struct err *e)
{
	memset(saved, 0, sizeof *saved);
	if (as->uid == (uid_t)-1)
		return 0;
	if (geteuid() != 0 && as->uid == geteuid() && as->gid == getegid())
		return 0; /* already that user: nothing to switch (and no right to) */
	gid_t *groups;
	int n;
	if (run_as_groups(as, NULL, 0, &groups, &n, e) < 0)
		return -1;
	int cur = getgroups(0, NULL);
	if (cur < 0)
		cur = 0;
	saved->groups = malloc(((size_t)cur + 1) * sizeof *saved->groups);
	if (!saved->groups) {
		free(groups);
		return err_set(e, ERR_INTERNAL, "out of memory");
	}
	saved->ngroups = cur ? getgroups(cur, saved->groups) : 0;
	if (saved->ngroups < 0)
		saved->ngroups = 0;
	if (syscall(SYS_setgroups, (size_t)n, groups) < 0) {
		int err = errno;
		free(groups);
		free(saved->groups);
		saved->groups = NULL;
		return err_set(e, ERR_FORBIDDEN,
			       "cannot act as uid %u: setgroups: %s (envd must run as root to "
			       "switch users)",
			       (unsigned)as->uid, strerror(err));
	}
	free(groups);
	saved->switched = true;
	saved->fsgid = (gid_t)setfsgid(as->gid);
	saved->fsuid = (uid_t)setfsuid(as->uid);
	if ((gid_t)setfsgid((gid_t)-1) != as->gid || (uid_t)setfsuid((uid_t)-1) != as->uid) {
		/* Not permitted: undo and refuse rather than act as envd. */
		setfsuid(saved->fsuid);
		setfsgid(saved->fsgid);
		syscall(SYS_setgroups, (size_t)saved->ngroups, saved->groups);
		free(saved->groups);
		memset(saved, 0, sizeof *saved);
		return err_set(e, ERR_FORBIDDEN,
			       "cannot act as uid %u gid %u (envd must run as root to switch "
			       "users)",
			       (unsigned)as->uid, (unsigned)as->gid);
	}
	return 0;
}

/* Restores the thread's identity; keeps errno. */
static void files_id_leave(struct files_id *saved)
{
	if (!saved->switched)
		return;
	int err = errno;
	setfsuid(saved->fsuid);
	setfsgid(saved->fsgid);
	if (syscall(SYS_setgroups, (size_t)saved->ngroups, saved->groups) < 0 ||
	    (uid_t)setfsuid((uid_t)-1) != saved->fsuid)
		fprintf(stderr, "envd: files: cannot restore this thread's identity: %s\n",
			strerror(errno));
	free(saved->groups);
	memset(saved, 0, sizeof *saved);
	errno = err;
}

char *files_resolve(const struct run_as *as, const char *path, struct err *e)
{
	if (!path || !path[0]) {
		err_param(e, "path", "path: empty");
		return NULL;
	}
	if (strlen(path) >= PATH_MAX) {
		err_param(e, "path", "path: longer than %d bytes", PATH_MAX - 1);
		return NULL;
	}
	char *abs = NULL;
	if (path[0] == '/') {
		abs = strdup(path);
	} else {
		const char *home = as->home ? as->home : getenv("HOME");
		if (!home || home[0] != '/')
			home = "/";
		if (asprintf(&abs, "%s%s%s", home, home[strlen(home) - 1] == '/' ? "" : "/", path) <
		    0)
			abs = NULL;
	}
	if (!abs)
		err_set(e, ERR_INTERNAL, "out of memory");
	return abs;
}

/* Turns an errno from acting on `path` into the error a user can act on. */
static int files_errno(struct err *e, int err, const char *what, const char *path)
{
	switch (err) {
	case ENOENT:
		return err_set(e, ERR_NOT_FOUND, "%s '%.300s': no such file or directory", what,
			       path);
	case EACCES:
	case EPERM:
		return err_set(e, ERR_FORBIDDEN, "%s '%.300s': permission denied", what, path);
	case EROFS:
		return err_set(e, ERR_FORBIDDEN, "%s '%.300s': read-only file system", what, path);
	case ENOTDIR:
		return err_param(e, "path", "path: a component of '%.300s' is not a directory",
				 path);
	case EISDIR:
		return err_param(e, "path", "path: '%.300s' is a directory", path);
	case ENAMETOOLONG:
	case ELOOP:
	case EINVAL:
		return err_param(e, "path", "path: '%.300s': %s", path, strerror(err));
	case ENOSPC:
	case EDQUOT:
		return err_set(e, ERR_LIMIT, "%s '%.300s': %s", what, path, strerror(err));
	default:
		return err_set(e, ERR_INTERNAL, "%s '%.300s': %s", what, path, strerror(err));
	}
}

/*
 * mkdir -p of the directories above `abs` (with the current identity).
 * Returns 0, or -1 with errno set by the failing mkdir.
 */
static int files_mkdir_parents(const char *abs)
{
	char buf[PATH_MAX];
	snprintf(buf, sizeof buf, "%s", abs);
	char *slash = strrchr(buf, '/');
	if (!slash || slash == buf)
		return 0;
	*slash = '\0';
	struct stat st;
	if (stat(buf, &st) == 0)
		return 0; /* the common case: the directory exists (or is not one: open says) */
	for (char *p = buf + 1; *p; p++) {
		if (*p != '/')
			continue;
		*p = '\0';
		if (mkdir(buf, 0755) < 0 && errno != EEXIST)
			return -1;
		*p = '/';
	}
	if (mkdir(buf, 0755) < 0 && errno != EEXIST)
		return -1;
	return 0;
}

/*
 * files_resolve, then files_id_enter: the absolute path (malloc'd) with this
 * thread acting as `as` until files_id_leave, or NULL with e filled and
 * nothing to undo.
 */
static char *files_enter(const struct run_as *as, const char *path, struct files_id *id,
			 struct err *e)
{
	char *abs = files_resolve(as, path, e);
	if (abs && files_id_enter(as, id, e) < 0) {
		free(abs);
		return NULL;
	}
	return abs;
}

int files_read(const struct run_as *as, const char *path, size_t max_len, char **out, size_t *len,
	       struct err *e)
{
	*out = NULL;
	*len = 0;
	struct files_id id;
	char *abs = files_enter(as, path, &id, e);
	if (!abs)
		return -1;
	/* O_NONBLOCK: opening a FIFO must not hang; regular files ignore it. */
	int fd = open(abs, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
	files_id_leave(&id);
	if (fd < 0) {
		files_errno(e, errno, "cannot read", abs);
		free(abs);
		return -1;
	}
	int ret = -1;
	char *buf = NULL;
	struct stat st;
	if (fstat(fd, &st) < 0) {
		files_errno(e, errno, "cannot read", abs);
		goto out;
	}
	if (S_ISDIR(st.st_mode)) {
		err_param(e, "path",
			  "path: '%.300s' is a directory, not a file (list it with bash)", abs);
		goto out;
	}
	if (!S_ISREG(st.st_mode)) {
		err_param(e, "path", "path: '%.300s' is not a regular file", abs);
		goto out;
	}
	if ((size_t)st.st_size > max_len)
		goto too_large;
	/* Read to EOF: the size may be 0 (procfs) or change while we read. */
	size_t cap = (size_t)st.st_size + 1 < 4096 ? 4096 : (size_t)st.st_size + 1;
	if (cap > max_len + 1)
		cap = max_len + 1;
	buf = malloc(cap + 1);
	if (!buf) {
		err_set(e, ERR_INTERNAL, "out of memory reading '%.300s'", abs);
		goto out;
	}
	size_t got = 0;
	for (;;) {
		if (got == cap) {
			if (cap > max_len)
				goto too_large;
			size_t ncap = cap * 2 > max_len + 1 ? max_len + 1 : cap * 2;
			char *nb = realloc(buf, ncap + 1);
			if (!nb) {
				err_set(e, ERR_INTERNAL, "out of memory reading '%.300s'", abs);
				goto out;
			}
			buf = nb;
			cap = ncap;
		}
		ssize_t r = read(fd, buf + got, cap - got);
		if (r < 0) {
			if (errno == EINTR)
				continue;
			files_errno(e, errno, "cannot read", abs);
			goto out;
		}
		if (r == 0)
			break;
		got += (size_t)r;
	}
	if (got > max_len)
		goto too_large;
	buf[got] = '\0';
	*out = buf;
	*len = got;
	buf = NULL;
	ret = 0;
	goto out;
too_large:
	if ((size_t)st.st_size > max_len)
		err_set_param(e, ERR_TOO_LARGE, "path",
			      "'%.300s' is %lld bytes, over read_file's limit of %zu bytes; "
			      "download it with GET /v1/files?path=%.300s",
			      abs, (long long)st.st_size, max_len, abs);
	else
		err_set_param(e, ERR_TOO_LARGE, "path",
			      "'%.300s' is over read_file's limit of %zu bytes; download it with "
			      "GET /v1/files?path=%.300s",
			      abs, max_len, abs);
out:
	free(buf);
	close(fd);
	free(abs);
	return ret;
}

static int files_write_all(int fd, const void *data, size_t len)
{
	const char *p = data;
	while (len) {
		ssize_t w = write(fd, p, len);
		if (w < 0) {
			if (errno == EINTR)
				continue;
			return -1;
		}
		p += w;
		len -= (size_t)w;
	}
	return 0;
}

/*
 * The body of files_write, run with the user's identity. On failure returns
 * -1 with e filled (the temporary file removed).
 */
static int files_write_as(char *abs, const void *data, size_t len, int mode, struct err *e)
{
	char *target = abs, *real = NULL;
	struct stat st;
	bool exists = false;
	if (lstat(abs, &st) == 0) {
		exists = true;
		if (S_ISLNK(st.st_mode)) {
			/* Follow it (realpath fails on a dangling link, which is replaced). */
			real = realpath(abs, NULL);
			exists = real && stat(real, &st) == 0;
			if (exists)
				target = real;
		}
		if (exists && S_ISDIR(st.st_mode)) {
			free(real);
			return err_param(e, "path", "path: '%.300s' is a directory", abs);
		}
		if (exists && !S_ISREG(st.st_mode)) {
			free(real);
			return err_param(e, "path",
					 "path: '%.300s' exists and is not a regular file", abs);
		}
	} else if (errno != ENOENT) {
		return files_errno(e, errno, "cannot write", abs);
	}
	if (!exists && files_mkdir_parents(target) < 0) {
		int err = errno;
		free(real);
		return files_errno(e, err, "cannot create the directories of", abs);
	}

	char tmp[PATH_MAX + 32];
	const char *slash = strrchr(target, '/');
	int dlen = (int)(slash - target);
	snprintf(tmp, sizeof tmp, "%.*s/.cubicle-write-XXXXXX", dlen, target);
	int fd = mkostemp(tmp, O_CLOEXEC);
	if (fd < 0) {
		int err = errno;
		free(real);
		return files_errno(e, err, "cannot write", abs);
	}
	mode_t final_mode = mode >= 0 ? (mode_t)mode : exists ? (st.st_mode & 07777) : 0644;
	int err = 0;
	const char *step = "cannot write";
	if (files_write_all(fd, data, len) < 0)
		err = errno;
	if (!err && exists && (st.st_uid != geteuid() || st.st_gid != getegid()))
		(void)!fchown(fd, st.st_uid, st.st_gid); /* best effort: keep the owner */
	if (!err && fchmod(fd, final_mode) < 0)
		err = errno, step = "cannot set the mode of";
	if (!err && fsync(fd) < 0)
		err = errno;
	if (close(fd) < 0 && !err)
		err = errno;
	if (!err && rename(tmp, target) < 0)
		err = errno;
	if (err) {
		unlink(tmp);
		free(real);
		return files_errno(e, err, step, abs);
	}
	/* Make the rename itself durable. */
	char dir[PATH_MAX];
	snprintf(dir, sizeof dir, "%.*s", dlen > 0 ? dlen : 1, dlen > 0 ? target : "/");
	int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd >= 0) {
		fsync(dfd);
		close(dfd);
	}
	free(real);
	return 0;
}

int files_write(const struct run_as *as, const char *path, const void *data, size_t len, int mode,
		struct err *e)
{
	if (mode > 07777)
		return err_param(e, "mode", "mode: %o is out of range [0, 07777]", mode);
	char *abs = files_resolve(as, path, e);
	if (!abs)
		return -1;
	size_t alen = strlen(abs);
	if (abs[alen - 1] == '/') {
		int r = err_param(e, "path", "path: '%.300s' names a directory (ends with /)", abs);
		free(abs);
		return r;
	}
	struct files_id id;
	if (files_id_enter(as, &id, e) < 0) {
		free(abs);
		return -1;
	}
	int r = files_write_as(abs, data, len, mode, e);
	files_id_leave(&id);
	free(abs);
	return r;
}

int files_open_as(const struct run_as *as, const char *path, int flags, mode_t mode, struct err *e)
{
	struct files_id id;
	char *abs = files_enter(as, path, &id, e);
	if (!abs)
		return -1;
	int fd = -1;
	if ((flags & O_CREAT) && files_mkdir_parents(abs) < 0) {
		files_errno(e, errno, "cannot create the directories of", abs);
		files_id_leave(&id);
		free(abs);
		return -1;
	}
	/* O_NONBLOCK so that a FIFO cannot hang the open; cleared again below. */
	fd = open(abs, flags | O_CLOEXEC | O_NOCTTY | O_NONBLOCK, mode);
	files_id_leave(&id);
	if (fd < 0 && errno == ENXIO) { /* a FIFO without reader, a socket */
		err_param(e, "path", "path: '%.300s' is not a regular file", abs);
		free(abs);
		return -1;
	}
	if (fd < 0) {
		files_errno(e, errno,
			    (flags & O_ACCMODE) == O_RDONLY ? "cannot read" : "cannot write", abs);
		free(abs);
		return -1;
	}
	if (!(flags & O_NONBLOCK))
		fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
	/* A read is of a regular file only: a FIFO, a character device
	 * (/dev/zero, a tty) or a socket would hold the reader forever or
	 * never end. Checked on the opened descriptor, so no rename in between
	 * can swap the file. */
	struct stat st;
	if ((flags & O_ACCMODE) == O_RDONLY) {
		const char *bad = NULL;
		if (fstat(fd, &st) < 0)
			bad = "cannot be examined";
		else if (S_ISDIR(st.st_mode))
			bad = "is a directory, not a file";
		else if (!S_ISREG(st.st_mode))
			bad = S_ISFIFO(st.st_mode)   ? "is a FIFO, not a regular file"
			      : S_ISCHR(st.st_mode)  ? "is a character device, not a regular file"
			      : S_ISBLK(st.st_mode)  ? "is a block device, not a regular file"
			      : S_ISSOCK(st.st_mode) ? "is a socket, not a regular file"
						     : "is not a regular file";
		if (bad) {
			close(fd);
			err_param(e, "path", "path: '%.300s' %s", abs, bad);
			free(abs);
			return -1;
		}
	}
	free(abs);
	return fd;
}
