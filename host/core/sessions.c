/*
 * sessions: a workspace's session directories (sessions/<ws>/<session>/
 * {input,output,working} on its session disk) and the API's session files
 * without a computer. A guest writes into its session, so everything here
 * is opened beneath the session's directory: never through a symlink or
 * out of it, and only regular files (openat2 RESOLVE_BENEATH |
 * RESOLVE_NO_SYMLINKS, O_NONBLOCK: a FIFO never holds a thread).
 */
#include "core-internal.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "ident.h"

/* Resolving beneath a directory: never out of it, never through a symlink
 * (a guest can put symlinks in its session) or a /proc magic link. */
#define CORE_BENEATH (RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS)

static int core_openat2(int dfd, const char *path, int flags, mode_t mode)
{
	struct open_how how = {
	    .flags = (uint64_t)(flags | O_CLOEXEC), .mode = mode, .resolve = CORE_BENEATH};
	return (int)syscall(SYS_openat2, dfd, path, &how, sizeof how);
}

/* dfd/name as a directory (made with mode when missing), opened O_PATH
 * beneath dfd; -1 with errno. */
static int core_subdir(int dfd, const char *name, mode_t mode)
{
	if (mkdirat(dfd, name, mode) < 0 && errno != EEXIST)
		return -1;
	return core_openat2(dfd, name, O_PATH | O_DIRECTORY, 0);
}

/*
 * The session directory of workspace ws as an O_PATH descriptor, made with
 * input/, output/ and working/ when missing. Every component is checked
 * (ident_param) and opened beneath the state directory, so no request
 * value can name a place outside it.
 */
static int core_session_dirfd(struct core *c, const char *ws, const char *session, struct err *e)
{
	if (ident_param("workspace", ws, 63, false, e) < 0)
		return -1;
	if (!session || !ident_ok(session, 64))
		return err_param(e, "session", "session: 1 to 64 of A-Z a-z 0-9 - _, not '%.70s'",
				 session ? session : "");
	mkdir(c->sessions_root, 0711);
	int all = open(c->sessions_root, O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (all >= 0) {
		/* The workspace's session disk (its quota) mounted on
		 * sessions/<ws>; ws is an identifier, checked above. */
		char wsdir[600];
		snprintf(wsdir, sizeof wsdir, "%s/%s", c->sessions_root, ws);
		if (core_session_disk(c, ws, wsdir, e) < 0) {
			close(all);
			return -1;
		}
	}
	int wsd = all < 0 ? -1 : core_subdir(all, ws, 0711);
	int fd = wsd < 0 ? -1 : core_subdir(wsd, session, 0755);
	int err = errno;
	static const char *const subs[] = {"input", "output", "working"};
	for (size_t i = 0; fd >= 0 && i < 3; i++)
		mkdirat(fd, subs[i], 0755);
	if (all >= 0)
		close(all);
	if (wsd >= 0)
		close(wsd);
	if (fd < 0)
		return err_set(e, ERR_INTERNAL, "cannot create the session directory: %s",
			       strerror(err));
	return fd;
}

int core_session_dir_for(struct core *c, const char *ws, const char *session, char *out, size_t len,
			 struct err *e)
{
	int fd = core_session_dirfd(c, ws, session, e);
	if (fd < 0)
		return -1;
	close(fd);
	int n = snprintf(out, len, "%s/%s/%s", c->sessions_root, ws, session);
	if (n < 0 || (size_t)n >= len)
		return err_set(e, ERR_INTERNAL, "the session directory's path is too long");
	return 0;
}

/* Opens path beneath the session directory: no "..", no symlink, nothing out. */
static int core_session_openat(struct core *c, const char *ws, const char *session,
			       const char *path, int flags, mode_t mode, struct err *e)
{
	if (!ws)
		return err_param(e, "workspace", "workspace: required with the admin key");
	if (ident_param("workspace", ws, 63, false, e) < 0)
		return -1;
	if (store_workspace_get(c->store, ws, NULL, NULL) < 0)
		return err_set(e, ERR_NOT_FOUND, "no workspace %s", ws);
	if (!path || !*path || path[0] == '/' || strlen(path) > 4096)
		return err_param(e, "path",
				 "path: a path inside the session, like output/report.txt");
	for (const char *p = path; *p; p++)
		if ((unsigned char)*p < 0x20 || *p == 0x7f)
			return err_param(e, "path", "path: control characters are not allowed");
	json_t *utf8 = json_string(path); /* NULL when path is not UTF-8 */
	if (!utf8)
		return err_param(e, "path", "path: not UTF-8");
	json_decref(utf8);
	int dfd = core_session_dirfd(c, ws, session, e);
	if (dfd < 0)
		return -1;
	/* Non-blocking: a FIFO a guest left there must not hold a thread. */
	int fd = core_openat2(dfd, path, flags | O_NONBLOCK | O_NOCTTY, mode);
	int err = errno;
	close(dfd);
	struct stat st;
	if (fd >= 0 && (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode))) {
		close(fd);
		return err_param(e, "path", "path: '%s' is not a regular file", path);
	}
	if (fd >= 0)
		fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
	if (fd < 0) {
		if (err == EXDEV || err == ELOOP)
			return err_param(e, "path",
					 "path: '%s' leaves the session or goes through a symlink",
					 path);
		if (err == ENOENT)
			return err_set(e, ERR_NOT_FOUND, "no file '%s' in session %s", path,
				       session);
		if (err == ENXIO)
			return err_param(e, "path", "path: '%s' is not a regular file", path);
		if (err == ENAMETOOLONG)
			return err_param(e, "path", "path: too long");
		return err_set(e, err == EISDIR ? ERR_INVALID : ERR_INTERNAL,
			       "cannot open '%s': %s", path, strerror(err));
	}
	return fd;
}

int core_session_open(struct core *c, const char *ws, const char *session, const char *path,
		      int *fd, uint64_t *size, struct err *e)
{
	/* O_NONBLOCK: a FIFO a guest left in the session must not hold the
	 * open (and a worker) until someone writes to it; httpd then reads the
	 * file on its event loop, so it must be a regular file. */
	int f = core_session_openat(c, ws, session, path, O_RDONLY | O_NONBLOCK, 0, e);
	if (f < 0)
		return -1;
	struct stat st;
	if (fstat(f, &st) < 0 || !S_ISREG(st.st_mode)) {
		close(f);
		return err_param(e, "path", "path: '%s' is not a regular file", path);
	}
	fcntl(f, F_SETFL, fcntl(f, F_GETFL) & ~O_NONBLOCK);
	*fd = f;
	*size = (uint64_t)st.st_size;
	return 0;
}

int core_session_write(struct core *c, const char *ws, const char *session, const char *path,
		       int from_fd, struct err *e)
{
	int f = core_session_openat(c, ws, session, path, O_WRONLY | O_CREAT | O_TRUNC, 0644, e);
	if (f < 0)
		return -1;
	char buf[65536];
	ssize_t n;
	lseek(from_fd, 0, SEEK_SET);
	while ((n = read(from_fd, buf, sizeof buf)) > 0) {
		if (write(f, buf, (size_t)n) != n) {
			int err = errno;
			/* Give the space back: a half-written file helps nobody. */
			if (ftruncate(f, 0) < 0) {
			}
			close(f);
			if (err == ENOSPC || err == EDQUOT)
				return err_set(
				    e, ERR_NO_SPACE,
				    "cannot write '%s': the workspace's session storage is "
				    "full (its quota is %llu MiB: cubicled --session-quota-mb)",
				    path, (unsigned long long)(c->cfg.session_quota >> 20));
			return err_set(e, ERR_INTERNAL, "cannot write '%s': %s", path,
				       strerror(err));
		}
	}
	/* Guests write here as their own uid: keep it writable for them. */
	fchmod(f, 0666);
	close(f);
	return 0;
}
