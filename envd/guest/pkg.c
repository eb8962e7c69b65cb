/*
 * pkg: running package operations (see pkg.h).
 *
 * apt runs as a child of envd, forked from a multi-threaded process, so
 * between fork and exec the child only makes system calls on memory made
 * before the fork (its argv and the fixed environment). Its stdout and
 * stderr are pipes read here: what comes is relayed to the caller's
 * descriptors when they can take it (checked with poll, written in pieces
 * of at most PIPE_BUF bytes, so a full pipe or a stopped terminal never
 * blocks the helper) and its tail kept to answer the action and to see why
 * apt failed.
 */
#include "pkg.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"

#define PKG_KILL_GRACE_MS 5000

/* The environment of everything the helper runs as root: fixed, never the
 * caller's. */
static char *const pkg_root_env[] = {
    "PATH=/usr/sbin:/usr/bin:/sbin:/bin",
    "HOME=/root",
    "LANG=C.UTF-8",
    "TERM=dumb",
    "DEBIAN_FRONTEND=noninteractive",
    "DEBCONF_NONINTERACTIVE_SEEN=true",
    NULL,
};

/* One package operation at a time (apt and dpkg would refuse a second one
 * anyway, with a lock error). */
static pthread_mutex_t pkg_lock = PTHREAD_MUTEX_INITIALIZER;

void pkg_run_free(struct pkg_run *r)
{
	free(r->output);
	memset(r, 0, sizeof *r);
}

/* ---- output ----------------------------------------------------------------------- */

/* Keeps the last PKG_OUTPUT_TAIL bytes. */
static void pkg_tail_add(struct pkg_run *r, const char *buf, size_t n)
{
	if (!r->output) {
		r->output = malloc(PKG_OUTPUT_TAIL + 1);
		if (!r->output)
			return;
		r->output_len = 0;
	}
	if (n >= PKG_OUTPUT_TAIL) {
		memcpy(r->output, buf + n - PKG_OUTPUT_TAIL, PKG_OUTPUT_TAIL);
		r->output_len = PKG_OUTPUT_TAIL;
		r->output_cut = true;
	} else {
		if (r->output_len + n > PKG_OUTPUT_TAIL) {
			size_t drop = r->output_len + n - PKG_OUTPUT_TAIL;
			memmove(r->output, r->output + drop, r->output_len - drop);
			r->output_len -= drop;
			r->output_cut = true;
		}
		memcpy(r->output + r->output_len, buf, n);
		r->output_len += n;
	}
	r->output[r->output_len] = '\0';
}

/* Writes to the caller's descriptor what it can take now; drops the rest. */
static void pkg_relay(int fd, const char *buf, size_t n)
{
	while (fd >= 0 && n > 0) {
		struct pollfd p = {fd, POLLOUT, 0};
		if (poll(&p, 1, 0) != 1 || !(p.revents & POLLOUT))
			return;
		size_t chunk = n < PIPE_BUF ? n : PIPE_BUF;
		ssize_t w = write(fd, buf, chunk);
		if (w <= 0)
			return;
		buf += w;
		n -= (size_t)w;
	}
}

/* A line of the helper's own on the caller's stderr and in the tail. */
static void pkg_say(struct pkg_run *r, int err_fd, const char *line)
{
	pkg_relay(err_fd, line, strlen(line));
	pkg_tail_add(r, line, strlen(line));
}

/* ---- running a program as root ------------------------------------------------------- */

static __attribute__((noreturn)) void pkg_child(char *const *argv, int out, int errfd)
{
	struct sigaction dfl;
	memset(&dfl, 0, sizeof dfl);
	dfl.sa_handler = SIG_DFL;
	for (int sig = 1; sig < NSIG; sig++)
		sigaction(sig, &dfl, NULL);
	sigset_t none;
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
	setsid();
	int null = open("/dev/null", O_RDONLY | O_CLOEXEC);
	if (null < 0 || dup2(null, 0) < 0 || dup2(out, 1) < 0 || dup2(errfd, 2) < 0)
		_exit(127);
	if (syscall(SYS_close_range, 3U, ~0U, 0U) < 0)
		for (int fd = 3; fd < 4096; fd++)
			close(fd);
	umask(022);
	if (chdir("/") < 0)
		_exit(127);
	execve(argv[0], argv, pkg_root_env);
	_exit(127);
}

/* Runs argv as root until deadline_ms, relaying and keeping its output. */
static int pkg_exec(const char *const *argv, int out_fd, int err_fd, int64_t deadline_ms,
		    struct pkg_run *r, struct err *e)
{
	int64_t t0 = clock_now_ms();
	int po[2], pe[2];
	if (pipe2(po, O_CLOEXEC) < 0)
		return err_set(e, ERR_INTERNAL, "pipe: %s", strerror(errno));
	if (pipe2(pe, O_CLOEXEC) < 0) {
		close(po[0]);
		close(po[1]);
		return err_set(e, ERR_INTERNAL, "pipe: %s", strerror(errno));
	}
	pid_t pid = fork();
	if (pid < 0) {
		int saved = errno;
		close(po[0]);
		close(po[1]);
		close(pe[0]);
		close(pe[1]);
		return err_set(e, ERR_INTERNAL, "fork: %s", strerror(saved));
	}
	if (pid == 0)
		pkg_child((char *const *)argv, po[1], pe[1]);
	close(po[1]);
	close(pe[1]);
	struct pollfd p[2] = {{po[0], POLLIN, 0}, {pe[0], POLLIN, 0}};
	const int sink[2] = {out_fd, err_fd};
	int open_streams = 2;
	bool killed = false;
	int64_t kill_at = 0;
	char buf[8192];
	while (open_streams > 0) {
		int64_t now = clock_now_ms();
		if (!killed && now >= deadline_ms) {
			kill(-pid, SIGTERM);
			killed = true;
			kill_at = now + PKG_KILL_GRACE_MS;
		}
		if (killed && now >= kill_at) {
			kill(-pid, SIGKILL);
			break;
		}
		int64_t wait = (killed ? kill_at : deadline_ms) - now;
		int rc = poll(p, 2, wait > 1000 ? 1000 : (int)(wait < 0 ? 0 : wait));
		if (rc < 0 && errno != EINTR)
			break;
		for (int i = 0; i < 2; i++) {
			if (p[i].fd < 0 || !(p[i].revents & (POLLIN | POLLHUP | POLLERR)))
				continue;
			ssize_t n = read(p[i].fd, buf, sizeof buf);
			if (n < 0 && errno == EINTR)
				continue;
			if (n <= 0) {
				close(p[i].fd);
				p[i].fd = -1;
				open_streams--;
				continue;
			}
			pkg_relay(sink[i], buf, (size_t)n);
			pkg_tail_add(r, buf, (size_t)n);
		}
	}
	for (int i = 0; i < 2; i++)
		if (p[i].fd >= 0)
			close(p[i].fd);
	/* Its output is closed: wait for it, within the same deadline. */
	int status = 0;
	for (;;) {
		pid_t w = waitpid(pid, &status, WNOHANG);
		if (w == pid || (w < 0 && errno != EINTR))
			break;
		int64_t now = clock_now_ms();
		if (!killed && now >= deadline_ms) {
			kill(-pid, SIGTERM);
			killed = true;
			kill_at = now + PKG_KILL_GRACE_MS;
		} else if (killed && now >= kill_at) {
			kill(-pid, SIGKILL);
			while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
				;
			break;
		}
		clock_sleep_ms(20);
	}
	/* What it left in its process group (a daemon a maintainer script
	 * started by mistake) goes with it. */
	kill(-pid, SIGKILL);
	r->timed_out = killed;
	r->exit_code = killed		     ? -1
		       : WIFEXITED(status)   ? WEXITSTATUS(status)
		       : WIFSIGNALED(status) ? 128 + WTERMSIG(status)
					     : -1;
	r->duration_ms += (long)(clock_now_ms() - t0);
	return 0;
}

/* ---- the log ------------------------------------------------------------------------- */

/* envd's stderr is the computer's console log, a file on the host: the
 * user must not be able to grow it at will (a loop of refused commands
 * costs nothing). At most PKG_LOG_LINES lines a minute; what is dropped is
 * counted in the next line that passes. */
#define PKG_LOG_LINES 30

static pthread_mutex_t pkg_log_lock = PTHREAD_MUTEX_INITIALIZER;

void pkg_log_line(const char *fmt, ...)
{
	static int64_t window_start;
	static int lines, dropped;
	int64_t now = clock_now_ms();
	pthread_mutex_lock(&pkg_log_lock);
	if (now - window_start >= 60000) {
		window_start = now;
		lines = 0;
	}
	if (lines >= PKG_LOG_LINES) {
		dropped++;
		pthread_mutex_unlock(&pkg_log_lock);
		return;
	}
	lines++;
	if (dropped) {
		fprintf(stderr, "envd: packages: %d lines not logged (at most %d a minute)\n",
			dropped, PKG_LOG_LINES);
		dropped = 0;
	}
	va_list ap;
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	pthread_mutex_unlock(&pkg_log_lock);
}

static void pkg_log(const struct pkg_who *who, const char *tool, const char *const *args,
		    const struct pkg_run *r)
{
	json_t *a = json_array();
	char line[600];
	size_t off = 0;
	line[0] = '\0';
	for (size_t i = 0; args && args[i]; i++) {
		json_array_append_new(a, json_string(args[i]));
		int n = snprintf(line + off, sizeof line - off, "%s%s", i ? " " : "", args[i]);
		if (n > 0 && (size_t)n < sizeof line - off)
			off += (size_t)n;
	}
	pkg_log_line("envd: packages: %s (uid %u, pid %d, via %s): %s: %s %d in %.1f s\n", tool,
		     (unsigned)who->uid, (int)who->pid, who->via, line,
		     r->timed_out ? "ran out of time, exit" : "exit", r->exit_code,
		     r->duration_ms / 1000.0);
	json_t *j =
	    json_pack("{s:I, s:s, s:i, s:i, s:s, s:o, s:i, s:I, s:b}", "time",
		      (json_int_t)clock_wall_ms(), "via", who->via, "uid", (int)who->uid, "pid",
		      (int)who->pid, "tool", tool, "args", a, "exit_code", r->exit_code,
		      "duration_ms", (json_int_t)r->duration_ms, "timed_out", r->timed_out);
	char *s = j ? json_dumps(j, JSON_COMPACT) : NULL;
	json_decref(j);
	if (!s)
		return;
	mkdir("/var/log/cubicle", 0755);
	int fd = open(PKG_LOG, O_WRONLY | O_CREAT | O_APPEND | O_NOFOLLOW | O_CLOEXEC, 0644);
	if (fd >= 0) {
		struct stat st;
		/* Only a file of root's: never one the user could have placed. */
		if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == 0 &&
		    st.st_nlink == 1) {
			size_t n = strlen(s);
			s[n] = '\n';
			(void)!write(fd, s, n + 1);
			s[n] = '\0';
		}
		close(fd);
	}
	free(s);
}

/* ---- apt ----------------------------------------------------------------------------- */

/* Whether apt has package lists (an image has none: common_finish). */
static bool pkg_have_lists(void)
{
	DIR *d = opendir("/var/lib/apt/lists");
	if (!d)
		return false;
	bool found = false;
	struct dirent *de;
	while (!found && (de = readdir(d)))
		found = strstr(de->d_name, "_Packages") != NULL;
	closedir(d);
	return found;
}

/* Whether a dpkg run was interrupted (its journal has entries). */
static bool pkg_dpkg_interrupted(void)
{
	DIR *d = opendir("/var/lib/dpkg/updates");
	if (!d)
		return false;
	bool found = false;
	struct dirent *de;
	while (!found && (de = readdir(d)))
		found = de->d_name[0] >= '0' && de->d_name[0] <= '9';
	closedir(d);
	return found;
}

/* Why the last apt run failed, if it was a package it could not find or
 * fetch (stale lists, or a name that does not exist). Fills missing with
 * the name apt gave, when it gave one. */
static bool pkg_apt_missing(const struct pkg_run *r, char *missing, size_t len)
{
	static const char *const named[] = {"Unable to locate package ", "Package '"};
	const char *out = r->output ? r->output : "";
	for (size_t i = 0; i < sizeof named / sizeof named[0]; i++) {
		const char *p = strstr(out, named[i]);
		if (p) {
			p += strlen(named[i]);
			size_t n = strcspn(p, "' \n");
			snprintf(missing, len, "%.*s", (int)(n < len ? n : len - 1), p);
			return true;
		}
	}
	if (strstr(out, "has no installation candidate") || strstr(out, "Unable to fetch") ||
	    strstr(out, "404  Not Found") || strstr(out, "Failed to fetch")) {
		missing[0] = '\0';
		return true;
	}
	return false;
}

static const char *const pkg_update_argv[] = {"/usr/bin/apt-get", "-q", "update", NULL};
static const char *const pkg_dpkg_resume_argv[] = {
    "/usr/bin/dpkg", "--force-confdef", "--force-confold", "--configure", "-a", NULL};

int pkg_apt(const struct pkg_apt_plan *plan, int out_fd, int err_fd, const struct pkg_who *who,
	    int64_t deadline_ms, struct pkg_run *r, struct err *e)
{
	memset(r, 0, sizeof *r);
	const char **argv = pkg_apt_argv(plan);
	if (!argv)
		return err_set(e, ERR_INTERNAL, "out of memory");
	int64_t t0 = clock_now_ms();
	struct timespec until = clock_deadline(CLOCK_REALTIME, deadline_ms - t0);
	int lr = pthread_mutex_timedlock(&pkg_lock, &until);
	if (lr) {
		free(argv);
		return err_set(e, lr == ETIMEDOUT ? ERR_TIMEOUT : ERR_INTERNAL,
			       "another package operation ran for the whole time allowed");
	}
	int rc = 0;
	bool updated = false;
	if (pkg_dpkg_interrupted()) {
		pkg_say(r, err_fd,
			"cubicle: an earlier package operation was interrupted: "
			"dpkg --configure -a first\n");
		rc = pkg_exec(pkg_dpkg_resume_argv, out_fd, err_fd, deadline_ms, r, e);
	}
	if (rc == 0 && plan->needs_lists && !pkg_have_lists()) {
		pkg_say(r, err_fd,
			"cubicle: no package lists in this computer yet: apt-get update first\n");
		rc = pkg_exec(pkg_update_argv, out_fd, err_fd, deadline_ms, r, e);
		updated = true;
	}
	if (rc == 0 && !r->timed_out)
		rc = pkg_exec(argv, out_fd, err_fd, deadline_ms, r, e);
	char missing[sizeof r->missing];
	if (rc == 0 && !r->timed_out && r->exit_code != 0 && plan->needs_lists && !updated &&
	    pkg_apt_missing(r, missing, sizeof missing)) {
		pkg_say(r, err_fd,
			"cubicle: apt could not find or fetch a package: apt-get update, "
			"then once more\n");
		rc = pkg_exec(pkg_update_argv, out_fd, err_fd, deadline_ms, r, e);
		if (rc == 0 && !r->timed_out)
			rc = pkg_exec(argv, out_fd, err_fd, deadline_ms, r, e);
	}
	pthread_mutex_unlock(&pkg_lock);
	if (rc == 0 && !r->timed_out && r->exit_code != 0)
		pkg_apt_missing(r, r->missing, sizeof r->missing);
	r->duration_ms = (long)(clock_now_ms() - t0);
	if (rc == 0)
		pkg_log(who, "apt-get", argv + 1, r);
	free(argv);
	return rc;
}

/* ---- pip and npm ------------------------------------------------------------------------- */

int pkg_user_tool(const char *tool, const char *const *specs, size_t n, const struct run_as *as,
		  const struct pkg_who *who, int64_t deadline_ms, struct pkg_run *r, struct err *e)
{
	memset(r, 0, sizeof *r);
	bool pip = strcmp(tool, "pip") == 0;
	static const char *const pip_head[] = {"python3", "-m",		"pip",
					       "install", "--no-input", "--"};
	static const char *const npm_head[] = {"npm",	     "install",	  "-g",
					       "--no-audit", "--no-fund", "--"};
	const char *const *head = pip ? pip_head : npm_head;
	size_t nhead = 6;
	const char **argv = calloc(nhead + n + 1, sizeof *argv);
	if (!argv)
		return err_set(e, ERR_INTERNAL, "out of memory");
	for (size_t i = 0; i < nhead; i++)
		argv[i] = head[i];
	for (size_t i = 0; i < n; i++)
		argv[nhead + i] = specs[i];
	int64_t left = deadline_ms - clock_now_ms();
	struct shell_opts o = {
	    .argv = argv,
	    .timeout_ms = (int)(left > 1000 ? left : 1000),
	    .max_output = PKG_OUTPUT_TAIL,
	    .as = *as,
	};
	struct shell_result sr;
	if (shell_run(&o, &sr, e) < 0) {
		free(argv);
		return -1;
	}
	pkg_tail_add(r, sr.out, sr.out_len);
	pkg_tail_add(r, sr.err, sr.err_len);
	r->output_cut = r->output_cut || sr.out_truncated || sr.err_truncated;
	r->exit_code = sr.exit_code;
	r->timed_out = sr.timed_out;
	r->duration_ms = sr.duration_ms;
	shell_result_free(&sr);
	if (r->exit_code != 0 && r->output) {
		/* The package the tool could not find, if that is why. */
		const char *p = NULL;
		if (pip && (p = strstr(r->output, "No matching distribution found for ")))
			p += strlen("No matching distribution found for ");
		else if (!pip && (strstr(r->output, "E404") || strstr(r->output, "404 Not Found")))
			p = "";
		if (p) {
			size_t len = strcspn(p, " \n");
			snprintf(r->missing, sizeof r->missing, "%.*s",
				 (int)(len < PKG_WORD_MAX ? len : PKG_WORD_MAX), p);
			if (!r->missing[0])
				snprintf(r->missing, sizeof r->missing, "%s", specs[0]);
		}
	}
	pkg_log(who, pip ? "pip" : "npm", argv + 1, r);
	free(argv);
	return 0;
}
