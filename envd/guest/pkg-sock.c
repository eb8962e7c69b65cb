/*
 * pkg-sock: the package helper's socket server (see pkg-sock.h).
 */
#include "pkg-sock.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "clock.h"
#include "pkg.h"

static atomic_int pkg_sock_busy;

struct pkg_conn {
	int fd;
};

static void pkg_sock_answer(int fd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void pkg_sock_answer(int fd, const char *fmt, ...)
{
	char msg[700];
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	if (n < 0)
		return;
	if ((size_t)n >= sizeof msg)
		n = (int)sizeof msg - 1;
	(void)!send(fd, msg, (size_t)n, MSG_NOSIGNAL);
}

/* Whether a descriptor the client sent is something output may go to. */
static bool pkg_sock_sink_ok(int fd)
{
	struct stat st;
	return fstat(fd, &st) == 0 && (S_ISFIFO(st.st_mode) || S_ISCHR(st.st_mode) ||
				       S_ISREG(st.st_mode) || S_ISSOCK(st.st_mode));
}

/* One request: read, check, run, answer. */
static void pkg_sock_serve(int fd)
{
	char *buf = malloc(PKG_SOCK_MSG_MAX + 1);
	int sinks[2] = {-1, -1};
	union {
		struct cmsghdr hdr;
		char space[CMSG_SPACE(4 * sizeof(int))];
	} u;
	struct iovec iov = {buf, PKG_SOCK_MSG_MAX};
	struct msghdr msg = {.msg_iov = &iov,
			     .msg_iovlen = 1,
			     .msg_control = u.space,
			     .msg_controllen = sizeof u.space};
	struct ucred cred;
	socklen_t clen = sizeof cred;
	if (!buf || getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &clen) < 0) {
		pkg_sock_answer(fd, "error the helper cannot identify the caller");
		free(buf);
		return;
	}
	struct timeval tv = {5, 0};
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
	ssize_t n = recvmsg(fd, &msg, MSG_CMSG_CLOEXEC);
	int nfds = 0;
	for (struct cmsghdr *c = n > 0 ? CMSG_FIRSTHDR(&msg) : NULL; c; c = CMSG_NXTHDR(&msg, c)) {
		if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
			continue;
		int got = (int)((c->cmsg_len - CMSG_LEN(0)) / sizeof(int));
		int *fds = (int *)CMSG_DATA(c);
		for (int i = 0; i < got; i++) {
			if (nfds < 2)
				sinks[nfds] = fds[i];
			else
				close(fds[i]);
			nfds++;
		}
	}
	if (n <= 0 || (msg.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) || nfds != 2 ||
	    buf[n - 1] != '\0' || !pkg_sock_sink_ok(sinks[0]) || !pkg_sock_sink_ok(sinks[1])) {
		pkg_sock_answer(fd, "error a malformed request (the command line, NUL-separated, "
				    "with stdout and stderr)");
		goto out;
	}
	/* The words. */
	const char *words[PKG_ARGS_MAX + 2];
	int nw = 0;
	for (ssize_t i = 0; i < n; i += (ssize_t)strlen(buf + i) + 1) {
		if (nw == PKG_ARGS_MAX + 1) {
			pkg_sock_answer(fd, "error more than %d words", PKG_ARGS_MAX);
			goto out;
		}
		words[nw++] = buf + i;
	}
	words[nw] = NULL;
	if (nw < 1 || (strcmp(words[0], "apt-get") != 0 && strcmp(words[0], "apt") != 0)) {
		pkg_sock_answer(fd, "error the helper runs apt-get and apt only");
		goto out;
	}
	struct pkg_apt_plan plan;
	struct err e = {0};
	if (pkg_apt_parse(nw - 1, words + 1, &plan, &e) < 0) {
		pkg_sock_answer(fd, "error %s", e.message);
		pkg_log_line("envd: packages: refused %s for uid %u, pid %d: %s\n", words[0],
			     (unsigned)cred.uid, (int)cred.pid, e.message);
		goto out;
	}
	struct pkg_who who = {words[0], cred.uid, cred.pid};
	struct pkg_run r;
	if (pkg_apt(&plan, sinks[0], sinks[1], &who, clock_now_ms() + PKG_SOCK_TIMEOUT_S * 1000LL,
		    &r, &e) < 0) {
		pkg_sock_answer(fd, "error %s", e.message);
		goto out;
	}
	if (r.timed_out)
		pkg_sock_answer(fd, "error apt-get ran past the helper's %d s and was stopped",
				PKG_SOCK_TIMEOUT_S);
	else
		pkg_sock_answer(fd, "exit %d", r.exit_code);
	pkg_run_free(&r);
out:
	for (int i = 0; i < 2; i++)
		if (sinks[i] >= 0)
			close(sinks[i]);
	free(buf);
}

static void *pkg_sock_conn_main(void *arg)
{
	int fd = (int)(intptr_t)arg;
	pkg_sock_serve(fd);
	close(fd);
	atomic_fetch_sub(&pkg_sock_busy, 1);
	return NULL;
}

static void *pkg_sock_main(void *arg)
{
	int lfd = (int)(intptr_t)arg;
	for (;;) {
		int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
		if (fd < 0) {
			if (errno == EINTR || errno == ECONNABORTED || errno == EMFILE ||
			    errno == ENFILE || errno == ENOMEM)
				clock_sleep_ms(errno == EINTR || errno == ECONNABORTED ? 0 : 100);
			else
				clock_sleep_ms(100);
			continue;
		}
		if (atomic_fetch_add(&pkg_sock_busy, 1) >= PKG_SOCK_CLIENTS) {
			atomic_fetch_sub(&pkg_sock_busy, 1);
			pkg_sock_answer(fd, "error busy: %d package commands already wait or run",
					PKG_SOCK_CLIENTS);
			close(fd);
			continue;
		}
		pthread_t t;
		if (pthread_create(&t, NULL, pkg_sock_conn_main, (void *)(intptr_t)fd) != 0) {
			atomic_fetch_sub(&pkg_sock_busy, 1);
			pkg_sock_answer(fd, "error the helper cannot start a thread");
			close(fd);
			continue;
		}
		pthread_detach(t);
	}
	return NULL;
}

int pkg_sock_start(const char *path, struct err *e)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	if (strlen(path) >= sizeof sa.sun_path || path[0] != '/')
		return err_set(e, ERR_INVALID, "--package-helper %s: an absolute socket path",
			       path);
	strcpy(sa.sun_path, path);
	char dir[sizeof sa.sun_path];
	snprintf(dir, sizeof dir, "%s", path);
	char *slash = strrchr(dir, '/');
	if (slash && slash != dir) {
		*slash = '\0';
		if (mkdir(dir, 0755) < 0 && errno != EEXIST)
			return err_set(e, ERR_UNAVAILABLE, "--package-helper: mkdir %s: %s", dir,
				       strerror(errno));
	}
	int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return err_set(e, ERR_INTERNAL, "--package-helper: socket: %s", strerror(errno));
	unlink(path);
	if (bind(fd, (struct sockaddr *)&sa, sizeof sa) < 0 || chmod(path, 0666) < 0 ||
	    listen(fd, 16) < 0) {
		int saved = errno;
		close(fd);
		return err_set(e, ERR_UNAVAILABLE, "--package-helper %s: %s", path,
			       strerror(saved));
	}
	pthread_t t;
	int rc = pthread_create(&t, NULL, pkg_sock_main, (void *)(intptr_t)fd);
	if (rc) {
		close(fd);
		return err_set(e, ERR_INTERNAL, "--package-helper: thread: %s", strerror(rc));
	}
	pthread_detach(t);
	return 0;
}
