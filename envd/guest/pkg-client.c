/*
 * pkg-client: envd run as `apt-get` or `apt` (see pkg-sock.h).
 */
#include "pkg-sock.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "pkg-policy.h"

/* The real program, as the caller. */
static _Noreturn void pkg_client_exec(const char *prog, char **argv)
{
	char real[64];
	snprintf(real, sizeof real, "/usr/bin/%s", prog);
	execv(real, argv);
	fprintf(stderr, "%s: cannot run %s: %s\n", prog, real, strerror(errno));
	exit(127);
}

_Noreturn void pkg_client_main(const char *prog, int argc, char **argv)
{
	if (geteuid() == 0 ||
	    pkg_apt_route(argc - 1, (const char *const *)argv + 1) == PKG_ROUTE_DIRECT)
		pkg_client_exec(prog, argv);

	const char *path = getenv("CUBICLE_PKG_SOCK");
	if (!path || !*path)
		path = PKG_SOCK_DEFAULT;
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	snprintf(sa.sun_path, sizeof sa.sun_path, "%s", path);
	int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof sa) < 0) {
		fprintf(stderr,
			"%s: cubicle's package helper does not answer at %s (%s); as root, run "
			"/usr/bin/%s\n",
			prog, path, strerror(errno), prog);
		exit(100);
	}
	/* The command line, NUL-separated. */
	static char msg[PKG_SOCK_MSG_MAX];
	size_t len = 0;
	for (int i = 0; i < argc; i++) {
		const char *w = i == 0 ? prog : argv[i];
		size_t n = strlen(w) + 1;
		if (len + n > sizeof msg) {
			fprintf(stderr, "%s: the command line is too long for the package helper\n",
				prog);
			exit(100);
		}
		memcpy(msg + len, w, n);
		len += n;
	}
	/* Where the output goes: this process's stdout and stderr (or
	 * /dev/null for a closed one). */
	int sinks[2];
	for (int i = 0; i < 2; i++) {
		sinks[i] = fcntl(i + 1, F_GETFD) >= 0 ? i + 1 : open("/dev/null", O_WRONLY);
		if (sinks[i] < 0) {
			fprintf(stderr, "%s: /dev/null: %s\n", prog, strerror(errno));
			exit(100);
		}
	}
	union {
		struct cmsghdr hdr;
		char space[CMSG_SPACE(2 * sizeof(int))];
	} u;
	memset(&u, 0, sizeof u);
	struct iovec iov = {msg, len};
	struct msghdr mh = {.msg_iov = &iov,
			    .msg_iovlen = 1,
			    .msg_control = u.space,
			    .msg_controllen = sizeof u.space};
	struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
	c->cmsg_level = SOL_SOCKET;
	c->cmsg_type = SCM_RIGHTS;
	c->cmsg_len = CMSG_LEN(2 * sizeof(int));
	memcpy(CMSG_DATA(c), sinks, sizeof sinks);
	if (sendmsg(fd, &mh, MSG_NOSIGNAL) < 0) {
		fprintf(stderr, "%s: cannot reach the package helper: %s\n", prog, strerror(errno));
		exit(100);
	}
	char answer[1024];
	ssize_t n;
	do
		n = recv(fd, answer, sizeof answer - 1, 0);
	while (n < 0 && errno == EINTR);
	if (n <= 0) {
		fprintf(stderr, "%s: the package helper ended without an answer\n", prog);
		exit(100);
	}
	answer[n] = '\0';
	int code;
	if (sscanf(answer, "exit %d", &code) == 1)
		exit(code >= 0 && code < 256 ? code : 100);
	fprintf(stderr, "%s: %s\n", prog, strncmp(answer, "error ", 6) == 0 ? answer + 6 : answer);
	exit(100);
}
