/*
 * shell: run a program to completion with a deadline and capture its output.
 *
 * How the child is started. envd is multi-threaded and several calls run at
 * once, so the child is made with plain fork() and, between fork and exec,
 * only async-signal-safe calls: everything that may allocate or take a lock
 * (the environment array, the user's groups, the directory) is prepared in
 * the parent first. posix_spawn would be faster but cannot change the user;
 * fork of envd is cheap enough (a few hundred microseconds) next to bash.
 * The child:
 *   - resets every signal disposition and then its mask (the parent blocks all
 *     signals around fork, so no envd handler can run in the child),
 *   - setsid(): its own session and process group, which is what we kill,
 *   - moves the pipes to 0/1/2 and closes every other descriptor (another
 *     thread may have created one without O_CLOEXEC),
 *   - takes the run_as identity with raw syscalls (setgroups, setresgid,
 *     setresuid: glibc's wrappers would try to synchronise threads that do
 *     not exist in the child) and verifies it, never running the command as
 *     envd's user when the switch failed,
 *   - chdir()s and searches PATH itself, calling execve.
 * A failure before exec is written to a CLOEXEC "error pipe" as {stage,
 * errno}; the parent reads that pipe until EOF (exec succeeded) or a report,
 * so a bad cwd becomes ERR_INVALID naming "cwd" and a missing program
 * ERR_NOT_FOUND.
 *
 * The parent feeds stdin and drains stdout/stderr with poll() on non-blocking
 * pipes, keeping up to max_output bytes per stream and discarding (but still
 * reading) the rest so the child never blocks on a full pipe. The child's exit
 * is seen through a pidfd (a short tick where pidfd_open is missing). It is
 * reaped with waitpid on its own pid only: other threads reap their own.
 *
 * Termination. The call ends when the child has exited and both output pipes
 * reached EOF; or when the child has exited and its process group is empty
 * although a pipe is still open (a daemonised grandchild in another session
 * holds it: we do not wait for it); or at the deadline, where the whole group
 * gets SIGKILL (background jobs such as `sleep 100 &` included) and what was
 * printed so far is kept. After the child is reaped its pid stays reserved as
 * long as the group exists, so kill(-pgid) cannot hit a stranger except in the
 * window between our emptiness check and the kill (it would need a full pid
 * wrap-around within microseconds).
 *
 * SIGPIPE: writing stdin to a child that closed it must not kill envd, so
 * this thread blocks SIGPIPE while it runs and consumes the one it caused.
 */
#include "shell.h"
#include "userenv.h"
#include "clock.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <poll.h>
#include <pwd.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

#define SHELL_DEFAULT_MAX_OUTPUT (16u << 20)
#define SHELL_READ_CHUNK	 65536
#define SHELL_LOOP_MAX_READS	 16  /* per wake-up: 1 MiB, then back to poll */
#define SHELL_DRAIN_MAX_READS	 512 /* the final drain: 32 MiB at most */
#define SHELL_DEFAULT_PATH	 "/usr/local/bin:/usr/bin:/bin"

/* What the child reports through the error pipe when it cannot exec. */
enum shell_stage {
	SHELL_STAGE_SETUP = 1, /* moving descriptors */
	SHELL_STAGE_IDENTITY,  /* setgroups / setgid / setuid */
	SHELL_STAGE_CHDIR,
	SHELL_STAGE_EXEC,
};

struct shell_child_report {
	int stage;
	int err;
};

/* Everything the child needs, prepared by the parent before fork. */
struct shell_child {
	const char *const *argv;
	char *const *envp;
	const char *path; /* PATH to search when argv[0] has no '/' */
	const char *dir;  /* chdir target, or NULL */
	bool switch_id;
	uid_t uid;
	gid_t gid;
	const gid_t *groups;
	int ngroups;
	int in_fd, out_fd, err_fd, report_fd;
};

/* One output stream being drained. */
struct shell_stream {
	int fd;
	char *buf;
	size_t len, cap, max;
	bool truncated;
};

int run_as_groups(const struct run_as *as, char *name, size_t name_size, gid_t **groups, int *n,
		  struct err *e)
{
	if (name && name_size)
		name[0] = '\0';
	*groups = NULL;
	*n = 0;
	struct passwd pw, *found = NULL;
	size_t bufsize = 16384;
	char *buf = NULL;
	int rc;
	for (;;) {
		char *nb = realloc(buf, bufsize);
		if (!nb) {
			free(buf);
			return err_set(e, ERR_INTERNAL, "out of memory looking up uid %u",
				       (unsigned)as->uid);
		}
		buf = nb;
		rc = getpwuid_r(as->uid, &pw, buf, bufsize, &found);
		if (rc != ERANGE || bufsize >= (1u << 20))
			break;
		bufsize *= 4;
	}
	if (!found) {
		free(buf);
		gid_t *g = malloc(sizeof *g);
		if (!g)
			return err_set(e, ERR_INTERNAL, "out of memory");
		g[0] = as->gid;
		*groups = g;
		*n = 1;
		return 0;
	}
	if (name && name_size)
		snprintf(name, name_size, "%s", pw.pw_name);
	int count = 32;
	gid_t *g = NULL;
	for (;;) {
		gid_t *ng = realloc(g, (size_t)count * sizeof *g);
		if (!ng) {
			free(g);
			free(buf);
			return err_set(e, ERR_INTERNAL, "out of memory");
		}
		g = ng;
		int want = count;
		if (getgrouplist(pw.pw_name, as->gid, g, &want) >= 0) {
			count = want;
			break;
		}
		if (want <= count || want > 65536) { /* not a size problem: give up on extras */
			g[0] = as->gid;
			count = 1;
			break;
		}
		count = want;
	}
	free(buf);
	*groups = g;
	*n = count;
	return 0;
}

/* Child side: report why exec did not happen and leave. Async-signal-safe. */
static __attribute__((noreturn)) void shell_child_fail(int fd, int stage, int err)
{
	struct shell_child_report r = {stage, err};
	ssize_t w;
	do
		w = write(fd, &r, sizeof r);
	while (w < 0 && errno == EINTR);
	_exit(127);
}

/* Child side: a descriptor moved out of 0..2 so the dup2s cannot clobber it. */
static int shell_child_lift(int fd)
{
	if (fd > 2)
		return fd;
	return fcntl(fd, F_DUPFD_CLOEXEC, 3);
}

/*
 * Child side, between fork and exec: only async-signal-safe calls (and raw
 * syscalls) are allowed here, see the top comment.
 */
static __attribute__((noreturn)) void shell_child_run(const struct shell_child *c)
{
	struct sigaction dfl;
	memset(&dfl, 0, sizeof dfl);
	dfl.sa_handler = SIG_DFL;
	sigemptyset(&dfl.sa_mask);
	for (int sig = 1; sig < NSIG; sig++)
		sigaction(sig, &dfl, NULL); /* fails harmlessly for SIGKILL, SIGSTOP, ... */
	sigset_t none;
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);

	int rep = c->report_fd;
	setsid();

	/* Move the report pipe to 3 and the pipes to 0, 1, 2. */
	int in = shell_child_lift(c->in_fd), out = shell_child_lift(c->out_fd),
	    errfd = shell_child_lift(c->err_fd);
	rep = shell_child_lift(rep);
	if (in < 0 || out < 0 || errfd < 0 || rep < 0)
		shell_child_fail(rep >= 0 ? rep : c->report_fd, SHELL_STAGE_SETUP, errno);
	if (dup2(in, 0) < 0 || dup2(out, 1) < 0 || dup2(errfd, 2) < 0)
		shell_child_fail(rep, SHELL_STAGE_SETUP, errno);
	if (rep != 3) {
		if (dup3(rep, 3, O_CLOEXEC) < 0)
			shell_child_fail(rep, SHELL_STAGE_SETUP, errno);
		rep = 3;
	}
	if (close_range(4, ~0u, 0) < 0)
		for (int fd = 4; fd < 4096; fd++)
			close(fd);

	if (c->switch_id) {
		if (syscall(SYS_setgroups, (size_t)c->ngroups, c->groups) < 0)
			shell_child_fail(rep, SHELL_STAGE_IDENTITY, errno);
		if (syscall(SYS_setresgid, c->gid, c->gid, c->gid) < 0)
			shell_child_fail(rep, SHELL_STAGE_IDENTITY, errno);
		if (syscall(SYS_setresuid, c->uid, c->uid, c->uid) < 0)
			shell_child_fail(rep, SHELL_STAGE_IDENTITY, errno);
		/* Belt and braces: never run the command as envd by mistake. */
		if (getuid() != c->uid || geteuid() != c->uid || getgid() != c->gid ||
		    getegid() != c->gid)
			shell_child_fail(rep, SHELL_STAGE_IDENTITY, EPERM);
	}

	if (c->dir && chdir(c->dir) < 0)
		shell_child_fail(rep, SHELL_STAGE_CHDIR, errno);

	const char *prog = c->argv[0];
	if (strchr(prog, '/')) {
		execve(prog, (char *const *)c->argv, c->envp);
		shell_child_fail(rep, SHELL_STAGE_EXEC, errno);
	}
	/* PATH search by hand (execvpe is not async-signal-safe). */
	char full[PATH_MAX];
	size_t plen = strlen(prog);
	int saved = ENOENT;
	bool denied = false;
	const char *p = c->path;
	for (;;) {
		const char *end = strchr(p, ':');
		size_t dlen = end ? (size_t)(end - p) : strlen(p);
		if (dlen + 1 + plen + 1 <= sizeof full) {
			if (dlen == 0) {
				full[0] = '.';
				dlen = 1;
			} else {
				memcpy(full, p, dlen);
			}
			full[dlen] = '/';
			memcpy(full + dlen + 1, prog, plen + 1);
			execve(full, (char *const *)c->argv, c->envp);
			if (errno == EACCES)
				denied = true;
			else if (errno != ENOENT && errno != ENOTDIR && errno != ESTALE &&
				 errno != ENODEV && errno != ETIMEDOUT)
				saved = errno;
		}
		if (!end)
			break;
		p = end + 1;
	}
	shell_child_fail(rep, SHELL_STAGE_EXEC, saved != ENOENT ? saved : denied ? EACCES : ENOENT);
}

/* Length of the key of a "KEY=VALUE" entry, including the '='. */
static size_t shell_env_keylen(const char *kv)
{
	const char *eq = strchr(kv, '=');
	return eq ? (size_t)(eq - kv) + 1 : strlen(kv);
}

static bool shell_env_overridden(const char *kv, char *const *over, size_t nover)
{
	size_t k = shell_env_keylen(kv);
	for (size_t i = 0; i < nover; i++)
		if (shell_env_keylen(over[i]) == k && strncmp(kv, over[i], k) == 0)
			return true;
	return false;
}

/*
 * The child's environment: envd's own, then HOME/USER/LOGNAME for run_as,
 * then the caller's entries (later ones win). The array and its added strings
 * live in *owned (freed with shell_env_free); inherited strings are borrowed.
 */
struct shell_env {
	char **envp;
	char **added;
	size_t nadded;
};

static void shell_env_free(struct shell_env *se)
{
	for (size_t i = 0; i < se->nadded; i++)
		free(se->added[i]);
	free(se->added);
	free(se->envp);
}

static int shell_env_build(const struct shell_opts *o, const char *user, struct shell_env *se,
			   struct err *e)
{
	memset(se, 0, sizeof *se);
	size_t nextra = 0;
	for (size_t i = 0; o->env && o->env[i]; i++) {
		const char *kv = o->env[i];
		const char *eq = strchr(kv, '=');
		if (!eq || eq == kv)
			return err_param(e, "env",
					 "env: '%.80s' is not KEY=VALUE with a non-empty KEY", kv);
		nextra++;
	}
	/* The image's environment for the user (userenv.h), only for a
	 * command that runs as someone else than envd. */
	const char *const *uenv = o->as.uid != (uid_t)-1 ? userenv_entries() : NULL;
	size_t nuser = 0;
	while (uenv && uenv[nuser])
		nuser++;
	se->added = calloc(nuser + nextra + 3, sizeof *se->added);
	if (!se->added)
		return err_set(e, ERR_INTERNAL, "out of memory");
	/* Added entries, in order of increasing priority; duplicates resolved below. */
	for (size_t i = 0; i < nuser; i++)
		if (!(se->added[se->nadded++] = strdup(uenv[i])))
			goto oom;
	if (o->as.home && asprintf(&se->added[se->nadded++], "HOME=%s", o->as.home) < 0)
		goto oom;
	if (user && *user) {
		if (asprintf(&se->added[se->nadded++], "USER=%s", user) < 0)
			goto oom;
		if (asprintf(&se->added[se->nadded++], "LOGNAME=%s", user) < 0)
			goto oom;
	}
	size_t nfixed = se->nadded;
	char **all = realloc(se->added, (nfixed + nextra + 1) * sizeof *all);
	if (!all)
		goto oom;
	se->added = all;
	for (size_t i = 0; i < nextra; i++) {
		se->added[se->nadded] = strdup(o->env[i]);
		if (!se->added[se->nadded])
			goto oom;
		se->nadded++;
	}
	size_t ninherit = 0;
	for (char **ep = environ; ep && *ep; ep++)
		ninherit++;
	se->envp = calloc(ninherit + se->nadded + 1, sizeof *se->envp);
	if (!se->envp)
		goto oom;
	size_t n = 0;
	for (char **ep = environ; ep && *ep; ep++)
		if (!shell_env_overridden(*ep, se->added, se->nadded))
			se->envp[n++] = *ep;
	for (size_t i = 0; i < se->nadded; i++)
		if (!shell_env_overridden(se->added[i], se->added + i + 1, se->nadded - i - 1))
			se->envp[n++] = se->added[i];
	se->envp[n] = NULL;
	return 0;
oom:
	shell_env_free(se);
	memset(se, 0, sizeof *se);
	return err_set(e, ERR_INTERNAL, "out of memory building the environment");
}

static const char *shell_env_path(char *const *envp)
{
	for (size_t i = 0; envp[i]; i++)
		if (strncmp(envp[i], "PATH=", 5) == 0)
			return envp[i] + 5;
	return SHELL_DEFAULT_PATH;
}

/*
 * Reads what is available on s->fd, at most `reads` chunks so that a writer
 * faster than us (or a daemon that never stops) cannot keep us from the
 * deadline; closes it at EOF or on error.
 */
static void shell_stream_drain(struct shell_stream *s, char *scratch, int reads)
{
	while (s->fd >= 0 && reads-- > 0) {
		ssize_t r = read(s->fd, scratch, SHELL_READ_CHUNK);
		if (r < 0) {
			if (errno == EINTR)
				continue;
			if (errno == EAGAIN)
				return;
			r = 0; /* a read error ends the stream like EOF */
		}
		if (r == 0) {
			close(s->fd);
			s->fd = -1;
			return;
		}
		size_t keep = (size_t)r;
		if (s->len + keep > s->max) {
			keep = s->max - s->len;
			s->truncated = true;
		}
		if (keep && s->len + keep + 1 > s->cap) {
			size_t cap = s->cap ? s->cap : 4096;
			while (cap < s->len + keep + 1)
				cap *= 2;
			if (cap > s->max + 1)
				cap = s->max + 1;
			char *nb = realloc(s->buf, cap);
			if (!nb) { /* keep draining; drop what does not fit */
				s->truncated = true;
				continue;
			}
			s->buf = nb;
			s->cap = cap;
		}
		if (keep) {
			memcpy(s->buf + s->len, scratch, keep);
			s->len += keep;
		}
	}
}

static void shell_close(int *fd)
{
	if (*fd >= 0) {
		close(*fd);
		*fd = -1;
	}
}

static int shell_start_error(const struct shell_opts *o, const struct shell_child_report *rep,
			     const char *dir, struct err *e)
{
	const char *why = strerror(rep->err);
	switch (rep->stage) {
	case SHELL_STAGE_CHDIR:
		if (o->cwd)
			return err_param(e, "cwd", "cwd: cannot enter '%.200s': %s", o->cwd, why);
		return err_param(e, "cwd",
				 "cwd: not given, and the home directory '%.200s' cannot be "
				 "entered: %s; pass an existing cwd",
				 dir, why);
	case SHELL_STAGE_IDENTITY:
		return err_set(e, ERR_FORBIDDEN,
			       "cannot run as uid %u gid %u: %s (envd needs to run as root to "
			       "switch users)",
			       (unsigned)o->as.uid, (unsigned)o->as.gid, why);
	case SHELL_STAGE_EXEC:
		if (rep->err == ENOENT)
			return err_set(e, ERR_NOT_FOUND, "program '%.200s' not found%s", o->argv[0],
				       strchr(o->argv[0], '/') ? "" : " in PATH");
		if (rep->err == EACCES)
			return err_set(e, ERR_FORBIDDEN, "program '%.200s': permission denied",
				       o->argv[0]);
		return err_set(e, ERR_INTERNAL, "cannot execute '%.200s': %s", o->argv[0], why);
	default:
		return err_set(e, ERR_INTERNAL, "cannot set up the child process: %s", why);
	}
}

/* Writes what the child will take of the remaining stdin; closes it when done. */
static void shell_feed_stdin(int *fd, const struct shell_opts *o, size_t *sent, bool *epipe)
{
	while (*fd >= 0 && *sent < o->stdin_len) {
		size_t want = o->stdin_len - *sent;
		if (want > SHELL_READ_CHUNK)
			want = SHELL_READ_CHUNK;
		ssize_t w = write(*fd, (const char *)o->stdin_data + *sent, want);
		if (w < 0) {
			if (errno == EINTR)
				continue;
			if (errno == EAGAIN)
				return;
			if (errno == EPIPE)
				*epipe = true;
			shell_close(fd); /* the child does not read its stdin: fine */
			return;
		}
		*sent += (size_t)w;
	}
	shell_close(fd);
}

static void shell_decode_status(int status, struct shell_result *r)
{
	if (WIFEXITED(status)) {
		r->exit_code = WEXITSTATUS(status);
		r->signal = 0;
	} else if (WIFSIGNALED(status)) {
		r->signal = WTERMSIG(status);
		r->exit_code = 128 + r->signal;
	}
}

static int shell_waitpid(pid_t pid, int *status, int flags)
{
	for (;;) {
		pid_t w = waitpid(pid, status, flags);
		if (w >= 0 || errno != EINTR)
			return w;
	}
}

/* A started child and the parent's ends of its pipes. */
struct shell_job {
	pid_t pid;
	int pidfd; /* -1 where pidfd_open is unavailable */
	int in_fd; /* -1 once stdin is fully fed or refused */
	size_t sent;
	bool epipe; /* a stdin write raised SIGPIPE on this thread */
	struct shell_stream out, errs;
	char *scratch;
	int64_t start, deadline;
	bool exited, timed_out;
	int status;
};

/* The directory the child starts in: cwd (relative to home), else home. */
static int shell_dir(const struct shell_opts *o, char **dir, struct err *e)
{
	*dir = NULL;
	if (o->cwd && !o->cwd[0])
		return err_param(e, "cwd", "cwd: empty path");
	if (o->cwd && o->cwd[0] != '/' && o->as.home) {
		if (asprintf(dir, "%s/%s", o->as.home, o->cwd) < 0)
			*dir = NULL;
	} else if (o->cwd) {
		*dir = strdup(o->cwd);
	} else if (o->as.home) {
		*dir = strdup(o->as.home);
	}
	if ((o->cwd || o->as.home) && !*dir)
		return err_set(e, ERR_INTERNAL, "out of memory");
	return 0;
}

/*
 * Forks and execs `c` (whose descriptors are filled in here) and waits for
 * the exec to succeed. All signals are blocked around fork so that no envd
 * handler runs in the child before it resets them.
 */
static int shell_spawn(const struct shell_opts *o, struct shell_child *c, struct shell_job *j,
		       struct err *e)
{
	int in_p[2] = {-1, -1}, out_p[2] = {-1, -1}, err_p[2] = {-1, -1}, rep_p[2] = {-1, -1};
	if (pipe2(in_p, O_CLOEXEC) < 0 || pipe2(out_p, O_CLOEXEC) < 0 ||
	    pipe2(err_p, O_CLOEXEC) < 0 || pipe2(rep_p, O_CLOEXEC) < 0) {
		err_set(e, ERR_UNAVAILABLE, "cannot create pipes: %s", strerror(errno));
		goto fail;
	}
	c->in_fd = in_p[0];
	c->out_fd = out_p[1];
	c->err_fd = err_p[1];
	c->report_fd = rep_p[1];

	sigset_t all, mask;
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &mask);
	j->start = clock_now_ms();
	j->pid = fork();
	if (j->pid == 0)
		shell_child_run(c);
	int fork_errno = errno;
	pthread_sigmask(SIG_SETMASK, &mask, NULL);
	shell_close(&in_p[0]);
	shell_close(&out_p[1]);
	shell_close(&err_p[1]);
	shell_close(&rep_p[1]);
	if (j->pid < 0) {
		err_set(e, ERR_UNAVAILABLE, "cannot start a process: %s", strerror(fork_errno));
		goto fail;
	}

	/* EOF on the report pipe means exec succeeded; otherwise a report. */
	struct shell_child_report rep;
	size_t got = 0;
	while (got < sizeof rep) {
		ssize_t n = read(rep_p[0], (char *)&rep + got, sizeof rep - got);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		got += (size_t)n;
	}
	shell_close(&rep_p[0]);
	if (got == sizeof rep) {
		int status;
		shell_waitpid(j->pid, &status, 0);
		shell_start_error(o, &rep, c->dir, e);
		goto fail;
	}

	j->pidfd = (int)syscall(SYS_pidfd_open, j->pid, 0);
	fcntl(in_p[1], F_SETFL, O_NONBLOCK);
	fcntl(out_p[0], F_SETFL, O_NONBLOCK);
	fcntl(err_p[0], F_SETFL, O_NONBLOCK);
	j->in_fd = in_p[1];
	j->out.fd = out_p[0];
	j->errs.fd = err_p[0];
	if (!o->stdin_data || o->stdin_len == 0)
		shell_close(&j->in_fd);
	j->deadline = j->start + o->timeout_ms;
	return 0;
fail:
	for (int i = 0; i < 2; i++) {
		shell_close(&in_p[i]);
		shell_close(&out_p[i]);
		shell_close(&err_p[i]);
		shell_close(&rep_p[i]);
	}
	return -1;
}

/*
 * The parent's loop: feeds stdin, drains the outputs, and ends as the top
 * comment says (EOF after exit, empty group after exit, or the deadline with
 * the group killed). Returns 0, or -1 (poll failed) with the group killed.
 */
static int shell_collect(const struct shell_opts *o, struct shell_job *j, struct err *e)
{
	for (;;) {
		if (!j->exited) {
			pid_t w = shell_waitpid(j->pid, &j->status, WNOHANG);
			if (w == j->pid || (w < 0 && errno == ECHILD))
				j->exited = true;
		}
		if (j->exited && j->out.fd < 0 && j->errs.fd < 0)
			return 0;
		/* Pipes still open after the child left: wait only while its group lives. */
		if (j->exited && kill(-j->pid, 0) < 0 && errno == ESRCH) {
			shell_stream_drain(&j->out, j->scratch, SHELL_DRAIN_MAX_READS);
			shell_stream_drain(&j->errs, j->scratch, SHELL_DRAIN_MAX_READS);
			return 0;
		}
		int64_t now = clock_now_ms();
		if (now >= j->deadline) {
			kill(-j->pid, SIGKILL);
			if (!j->exited) {
				kill(j->pid, SIGKILL); /* in case it left its group */
				shell_waitpid(j->pid, &j->status, 0);
				j->exited = true;
			}
			j->timed_out = true;
			/* What the group wrote before dying is in the pipes: take it. */
			shell_stream_drain(&j->out, j->scratch, SHELL_DRAIN_MAX_READS);
			shell_stream_drain(&j->errs, j->scratch, SHELL_DRAIN_MAX_READS);
			return 0;
		}

		struct pollfd pfd[4];
		int np = 0, i_in = -1, i_out = -1, i_err = -1;
		if (j->in_fd >= 0) {
			i_in = np;
			pfd[np++] = (struct pollfd){.fd = j->in_fd, .events = POLLOUT};
		}
		if (j->out.fd >= 0) {
			i_out = np;
			pfd[np++] = (struct pollfd){.fd = j->out.fd, .events = POLLIN};
		}
		if (j->errs.fd >= 0) {
			i_err = np;
			pfd[np++] = (struct pollfd){.fd = j->errs.fd, .events = POLLIN};
		}
		/* Its readiness only wakes us up: the waitpid above reaps. */
		if (!j->exited && j->pidfd >= 0)
			pfd[np++] = (struct pollfd){.fd = j->pidfd, .events = POLLIN};
		int64_t wait = j->deadline - now;
		if (j->exited) /* re-check the group now and then */
			wait = wait < 50 ? wait : 50;
		else if (j->pidfd < 0)
			wait = wait < 10 ? wait : 10;
		if (poll(pfd, (nfds_t)np, (int)wait) < 0) {
			if (errno == EINTR)
				continue;
			err_set(e, ERR_INTERNAL, "poll: %s", strerror(errno));
			kill(-j->pid, SIGKILL);
			if (!j->exited)
				shell_waitpid(j->pid, &j->status, 0);
			return -1;
		}
		if (i_in >= 0 && pfd[i_in].revents)
			shell_feed_stdin(&j->in_fd, o, &j->sent, &j->epipe);
		if (i_out >= 0 && pfd[i_out].revents)
			shell_stream_drain(&j->out, j->scratch, SHELL_LOOP_MAX_READS);
		if (i_err >= 0 && pfd[i_err].revents)
			shell_stream_drain(&j->errs, j->scratch, SHELL_LOOP_MAX_READS);
	}
}

/* Moves the collected output and status into r. */
static int shell_result_fill(struct shell_job *j, struct shell_result *r, struct err *e)
{
	r->duration_ms = clock_now_ms() - j->start;
	shell_decode_status(j->status, r);
	r->timed_out = j->timed_out;
	if (r->timed_out)
		r->exit_code = -1;
	r->out = j->out.buf ? j->out.buf : strdup("");
	r->err = j->errs.buf ? j->errs.buf : strdup("");
	j->out.buf = j->errs.buf = NULL;
	if (!r->out || !r->err) {
		shell_result_free(r);
		return err_set(e, ERR_INTERNAL, "out of memory");
	}
	r->out[j->out.len] = '\0';
	r->err[j->errs.len] = '\0';
	r->out_len = j->out.len;
	r->err_len = j->errs.len;
	r->out_truncated = j->out.truncated;
	r->err_truncated = j->errs.truncated;
	return 0;
}

int shell_run(const struct shell_opts *o, struct shell_result *r, struct err *e)
{
	memset(r, 0, sizeof *r);
	if (!o->argv || !o->argv[0] || !o->argv[0][0])
		return err_set(e, ERR_INVALID, "no program to run");
	if (o->timeout_ms <= 0)
		return err_param(e, "timeout_s", "timeout_s: must be positive");

	/* Everything the child needs, prepared before fork (see the top comment). */
	struct shell_child child = {.argv = o->argv, .uid = o->as.uid, .gid = o->as.gid};
	child.switch_id = o->as.uid != (uid_t)-1 &&
			  !(o->as.uid == geteuid() && o->as.gid == getegid() && geteuid() != 0);
	char user[256] = "";
	gid_t *groups = NULL;
	char *dir = NULL;
	struct shell_env se = {0};
	struct shell_job j = {.pid = -1, .pidfd = -1, .in_fd = -1};
	j.out = (struct shell_stream){
	    .fd = -1, .max = o->max_output ? o->max_output : SHELL_DEFAULT_MAX_OUTPUT};
	j.errs = (struct shell_stream){.fd = -1, .max = j.out.max};
	int ret = -1;
	if (o->as.uid != (uid_t)-1 &&
	    run_as_groups(&o->as, user, sizeof user, &groups, &child.ngroups, e) < 0)
		goto done;
	child.groups = groups;
	if (shell_dir(o, &dir, e) < 0 || shell_env_build(o, user, &se, e) < 0)
		goto done;
	child.dir = dir;
	child.envp = se.envp;
	child.path = shell_env_path(se.envp);
	if (!(j.scratch = malloc(SHELL_READ_CHUNK))) {
		err_set(e, ERR_INTERNAL, "out of memory");
		goto done;
	}

	/* SIGPIPE stays blocked in this thread for the whole call (see top comment). */
	sigset_t pipe_set, mask, pending;
	sigemptyset(&pipe_set);
	sigaddset(&pipe_set, SIGPIPE);
	sigpending(&pending);
	bool pipe_was_pending = sigismember(&pending, SIGPIPE) == 1;
	pthread_sigmask(SIG_BLOCK, &pipe_set, &mask);
	if (shell_spawn(o, &child, &j, e) == 0 && shell_collect(o, &j, e) == 0)
		ret = shell_result_fill(&j, r, e);
	shell_close(&j.in_fd);
	if (j.epipe && !pipe_was_pending) {
		struct timespec zero = {0, 0};
		while (sigtimedwait(&pipe_set, NULL, &zero) < 0 && errno == EINTR)
			;
	}
	pthread_sigmask(SIG_SETMASK, &mask, NULL);
done:
	shell_close(&j.out.fd);
	shell_close(&j.errs.fd);
	shell_close(&j.pidfd);
	free(j.out.buf);
	free(j.errs.buf);
	free(j.scratch);
	shell_env_free(&se);
	free(groups);
	free(dir);
	return ret;
}

void shell_result_free(struct shell_result *r)
{
	free(r->out);
	free(r->err);
	r->out = r->err = NULL;
	r->out_len = r->err_len = 0;
}
