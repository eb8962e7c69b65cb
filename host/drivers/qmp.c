/*
 * qmp: see qmp.h. Replies are one JSON object per line; asynchronous
 * events ({"event": ...}) may come before a reply and are dropped.
 */
#include "qmp.h"
#include "clock.h"

#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

/* The next line that is not an event, parsed. */
static json_t *qmp_read(struct qmp *q, struct err *e)
{
	long long deadline = clock_now_ms() + q->timeout_ms;
	for (;;) {
		char *nl = memchr(q->buf, '\n', q->len);
		if (nl) {
			size_t n = (size_t)(nl - q->buf) + 1;
			json_t *j = json_loadb(q->buf, n, 0, NULL);
			memmove(q->buf, q->buf + n, q->len - n);
			q->len -= n;
			if (!j) {
				err_set(e, ERR_INTERNAL, "qmp: QEMU sent a line that is not JSON");
				return NULL;
			}
			if (json_object_get(j, "event")) {
				json_decref(j);
				continue;
			}
			return j;
		}
		if (q->len == sizeof q->buf) {
			err_set(e, ERR_INTERNAL, "qmp: a reply longer than %zu bytes",
				sizeof q->buf);
			return NULL;
		}
		long long left = deadline - clock_now_ms();
		struct pollfd p = {q->fd, POLLIN, 0};
		int r = left > 0 ? poll(&p, 1, (int)left) : 0;
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0) {
			err_set(e, ERR_TIMEOUT, "qmp: QEMU did not answer within %d ms",
				q->timeout_ms);
			return NULL;
		}
		ssize_t got = read(q->fd, q->buf + q->len, sizeof q->buf - q->len);
		if (got <= 0) {
			err_set(e, ERR_UNAVAILABLE, "qmp: QEMU closed its control socket");
			return NULL;
		}
		q->len += (size_t)got;
	}
}

static int qmp_send(struct qmp *q, const char *text, int pass_fd, struct err *e)
{
	struct iovec iov = {(void *)text, strlen(text)};
	union {
		char buf[CMSG_SPACE(sizeof(int))];
		struct cmsghdr align;
	} u;
	struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1};
	if (pass_fd >= 0) {
		memset(&u, 0, sizeof u);
		m.msg_control = u.buf;
		m.msg_controllen = sizeof u.buf;
		struct cmsghdr *c = CMSG_FIRSTHDR(&m);
		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN(sizeof(int));
		memcpy(CMSG_DATA(c), &pass_fd, sizeof(int));
	}
	/* One sendmsg: the command is a few hundred bytes, far below the
	 * socket buffer, and the fd must travel with its first byte. */
	if (sendmsg(q->fd, &m, MSG_NOSIGNAL) != (ssize_t)iov.iov_len)
		return err_set(e, ERR_UNAVAILABLE, "qmp: cannot send to QEMU: %s", strerror(errno));
	return 0;
}

int qmp_cmd(struct qmp *q, const char *name, json_t *args, int pass_fd, json_t **ret, struct err *e)
{
	json_t *cmd = json_pack("{s:s}", "execute", name);
	if (args)
		json_object_set_new(cmd, "arguments", args);
	char *text = json_dumps(cmd, JSON_COMPACT);
	json_decref(cmd);
	if (!text)
		return err_set(e, ERR_INTERNAL, "out of memory");
	int rc = qmp_send(q, text, pass_fd, e);
	free(text);
	if (rc < 0)
		return -1;
	json_t *r = qmp_read(q, e);
	if (!r)
		return -1;
	json_t *error = json_object_get(r, "error");
	if (error) {
		err_set(e, ERR_UNAVAILABLE, "qmp: %s: %s", name,
			json_string_value(json_object_get(error, "desc")) ?: "failed");
		json_decref(r);
		return -1;
	}
	if (ret)
		*ret = json_incref(json_object_get(r, "return"));
	json_decref(r);
	return 0;
}

int qmp_open(struct qmp *q, const char *path, int timeout_ms, struct err *e)
{
	memset(q, 0, sizeof *q);
	q->fd = -1;
	q->timeout_ms = timeout_ms;
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	if (strlen(path) >= sizeof sa.sun_path)
		return err_set(e, ERR_INVALID, "qmp: the socket path %s is too long", path);
	strcpy(sa.sun_path, path);
	long long deadline = clock_now_ms() + timeout_ms;
	for (;;) {
		q->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (q->fd < 0)
			return err_set(e, ERR_INTERNAL, "qmp: socket: %s", strerror(errno));
		if (connect(q->fd, (struct sockaddr *)&sa, sizeof sa) == 0)
			break;
		int saved = errno;
		close(q->fd);
		q->fd = -1;
		if (clock_now_ms() >= deadline)
			return err_set(e, ERR_UNAVAILABLE, "qmp: cannot connect to %s: %s", path,
				       strerror(saved));
		clock_sleep_ms(10);
	}
	json_t *greeting = qmp_read(q, e);
	if (!greeting || !json_object_get(greeting, "QMP")) {
		json_decref(greeting);
		qmp_close(q);
		return e && e->code ? -1 : err_set(e, ERR_UNAVAILABLE, "qmp: no QMP greeting");
	}
	json_decref(greeting);
	if (qmp_cmd(q, "qmp_capabilities", NULL, -1, NULL, e) < 0) {
		qmp_close(q);
		return -1;
	}
	return 0;
}

void qmp_close(struct qmp *q)
{
	if (q->fd >= 0)
		close(q->fd);
	q->fd = -1;
}
