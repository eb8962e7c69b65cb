/*
 * cdp: the desktop's Chromium for CDP clients (cdp.h).
 */
#include "cdp.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>
#include <netinet/in.h>

#include "clock.h"
#include "launch.h"

static pthread_mutex_t cdp_lock = PTHREAD_MUTEX_INITIALIZER;

/* GET /json/version from the endpoint: its JSON, or NULL (nothing answers,
 * or not as Chromium would). Bounded: 1 s per step, 64 KiB. */
static json_t *cdp_version(void)
{
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return NULL;
	struct timeval tv = {1, 0};
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
	setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
	struct sockaddr_in sa = {.sin_family = AF_INET,
				 .sin_port = htons(CDP_PORT),
				 .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	char req[128];
	int n = snprintf(req, sizeof req,
			 "GET /json/version HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nConnection: "
			 "close\r\n\r\n",
			 CDP_PORT);
	json_t *j = NULL;
	char *buf = malloc(65536);
	size_t len = 0;
	if (!buf || connect(fd, (struct sockaddr *)&sa, sizeof sa) < 0 ||
	    send(fd, req, (size_t)n, MSG_NOSIGNAL) != n)
		goto out;
	/* Until the body is complete (Content-Length) or the server closes. */
	for (;;) {
		ssize_t r = recv(fd, buf + len, 65535 - len, 0);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			break;
		len += (size_t)r;
		buf[len] = 0;
		char *body = strstr(buf, "\r\n\r\n");
		char *cl = strcasestr(buf, "\r\ncontent-length:");
		if (body && cl && cl < body &&
		    len - (size_t)(body + 4 - buf) >= strtoul(cl + 17, NULL, 10))
			break;
		if (len == 65535)
			goto out;
	}
	buf[len] = 0;
	char *body = strstr(buf, "\r\n\r\n");
	if (len < 12 || strncmp(buf, "HTTP/1.1 200", 12) != 0 || !body)
		goto out;
	j = json_loads(body + 4, 0, NULL);
	if (!json_is_object(j)) {
		json_decref(j);
		j = NULL;
	}
out:
	free(buf);
	close(fd);
	return j;
}

/* The answer from Chromium's /json/version (v: stolen). */
static int cdp_answer(json_t *v, bool started, json_t **out, struct err *e)
{
	const char *url = json_string_value(json_object_get(v, "webSocketDebuggerUrl"));
	const char *path = url ? strstr(url, "/devtools/browser/") : NULL;
	if (!path || strlen(path) > 96) {
		json_decref(v);
		return err_set(e, ERR_BAD_GATEWAY,
			       "the browser on port %d does not say its DevTools URL", CDP_PORT);
	}
	json_t *version = json_object();
	const char *k;
	json_t *val;
	json_object_foreach(v, k, val)
	{
		if (json_is_string(val) && strcmp(k, "webSocketDebuggerUrl") != 0)
			json_object_set(version, k, val);
	}
	*out = json_pack("{s:i, s:s, s:o, s:b}", "port", CDP_PORT, "browser_path", path, "version",
			 version, "started", started);
	json_decref(v);
	return *out ? 0 : err_set(e, ERR_INTERNAL, "out of memory");
}

int cdp_ensure(struct envd *env, json_t **out, struct err *e)
{
	if (!env->desk && !env->display)
		return err_set(e, ERR_CONFLICT,
			       "CDP needs a desktop: this computer has no display");
	pthread_mutex_lock(&cdp_lock);
	json_t *v = cdp_version();
	if (v) {
		pthread_mutex_unlock(&cdp_lock);
		return cdp_answer(v, false, out, e);
	}
	const char *home = env->run_as_home ? env->run_as_home : getenv("HOME");
	char profile[600], port[64];
	snprintf(profile, sizeof profile, "--user-data-dir=%s/.config/cubicle-cdp",
		 home && *home ? home : "/tmp");
	snprintf(port, sizeof port, "--remote-debugging-port=%d", CDP_PORT);
	const char *args[] = {port,
			      "--remote-debugging-address=127.0.0.1",
			      profile,
			      "--no-first-run",
			      "--no-default-browser-check",
			      "--no-sandbox",
			      "--password-store=basic",
			      "--disable-gpu",
			      "--disable-background-networking",
			      "--disable-component-update",
			      "--start-maximized",
			      "about:blank",
			      NULL};
	struct launch_opts o = {
	    .app = "chromium",
	    .args = args,
	    .display = env->display,
	    .as = {env->run_as_uid, env->run_as_gid, env->run_as_home},
	};
	pid_t pid;
	if (launch_app(&o, &pid, e) < 0) {
		pthread_mutex_unlock(&cdp_lock);
		if (e->code == ERR_NOT_FOUND)
			err_set(e, ERR_NOT_FOUND, "Chromium is not installed on this computer");
		return -1;
	}
	int64_t until = clock_now_us() + CDP_START_S * 1000000LL;
	while (!(v = cdp_version()) && clock_now_us() < until) {
		if (kill(pid, 0) < 0 && errno == ESRCH)
			break;
		struct timespec ts = {0, 100 * 1000 * 1000};
		nanosleep(&ts, NULL);
	}
	if (!v && !(v = cdp_version())) {
		bool dead = kill(pid, 0) < 0 && errno == ESRCH;
		pthread_mutex_unlock(&cdp_lock);
		if (dead)
			return err_set(e, ERR_UNAVAILABLE,
				       "Chromium exited before its DevTools endpoint answered");
		return err_set(e, ERR_TIMEOUT,
			       "Chromium's DevTools endpoint did not answer within %d s",
			       CDP_START_S);
	}
	pthread_mutex_unlock(&cdp_lock);
	return cdp_answer(v, true, out, e);
}
