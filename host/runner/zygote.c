/*
 * zygote: the sandboxes of the code runner, made ahead and handed to the
 * hub (zygote.h says what it promises).
 */
#include "zygote.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sys/time.h>
#include <sys/wait.h>

#include <seccomp.h>

#include "hub.h"
#include "landlock.h"
#include "runproto.h"
#include "clock.h"

#define CTL_FD 3

static void zlog(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void zlog(const char *fmt, ...)
{
	char buf[512];
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(buf, sizeof buf, fmt, ap);
	va_end(ap);
	if (n > 0) {
		if ((size_t)n >= sizeof buf)
			n = sizeof buf - 1;
		buf[n++] = '\n';
		(void)!write(2, buf, (size_t)n);
	}
}

int zygote_isolate(char *why, size_t len)
{
	if (unshare(CLONE_NEWNET | CLONE_NEWIPC) < 0) {
		snprintf(why, len, "cannot make an empty network namespace: %s", strerror(errno));
		return -1;
	}
	return 0;
}

#ifdef ZYGOTE_TRACE
static int64_t tr_t0;
#define TR(x) hub_trace(0, x, tr_t0)
#else
#define TR(x) ((void)0)
#endif

/* ---- the sandbox (in the child, before the code arrives) ------------------------ */

static int sb_landlock(const struct zygote_opts *o, char *why, size_t len)
{
	struct landlock_rule rules[32];
	size_t n = 0;
	for (size_t i = 0; o->readable && o->readable[i]; i++) {
		if (n == sizeof rules / sizeof rules[0]) {
			snprintf(why, len, "more than %zu readable directories", n);
			return -1;
		}
		rules[n++] = (struct landlock_rule){o->readable[i], LANDLOCK_READ};
	}
	int abi = landlock_restrict(rules, n, why, len);
	if (abi == 0)
		snprintf(why, len, "Landlock is not available in this kernel");
	return abi > 0 ? 0 : -1;
}

/* The system calls an interpreter running a snippet needs, and no more:
 * no sockets (socketpair within the process only), no processes or
 * threads, no exec, no signals to anyone but itself, no ptrace, no
 * namespaces, no writes to files (opens for reading only). Anything else
 * fails with EPERM. */
static int sb_seccomp_rules(scmp_filter_ctx f, pid_t self);

/* The filter, compiled once by the zygote for a stand-in pid (SB_PID_MARK):
 * a child writes its own pid into the comparisons that held the stand-in
 * and loads it, the same filter as compiling it for its pid, without
 * libseccomp's ~200 copy-on-write faults (16 ms of CPU here) per child. */
#define SB_PID_MARK 0x7ffffffeu
static struct sock_fprog sb_prog;

static int sb_seccomp(pid_t self, char *why, size_t len)
{
	if (sb_prog.len) {
		for (unsigned short i = 0; i < sb_prog.len; i++)
			if (sb_prog.filter[i].code == (BPF_JMP | BPF_JEQ | BPF_K) &&
			    sb_prog.filter[i].k == SB_PID_MARK)
				sb_prog.filter[i].k = (uint32_t)self;
		if (syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &sb_prog) == 0)
			return 0;
		snprintf(why, len, "seccomp: %s", strerror(errno));
		return -1;
	}
	scmp_filter_ctx f = seccomp_init(SCMP_ACT_ERRNO(EPERM));
	int rc = f ? sb_seccomp_rules(f, self) : -ENOMEM;
	if (rc == 0)
		rc = seccomp_load(f);
	seccomp_release(f);
	if (rc < 0) {
		snprintf(why, len, "seccomp: %s", strerror(-rc));
		return -1;
	}
	return 0;
}

/* Compiles the filter for every child, for SB_PID_MARK: kept only if the
 * stand-in appears in pid comparisons only, else each child compiles its
 * own. */
static void sb_seccomp_compile(void)
{
	scmp_filter_ctx f = seccomp_init(SCMP_ACT_ERRNO(EPERM));
	int fd = memfd_create("seccomp", MFD_CLOEXEC);
	if (f && fd >= 0 && sb_seccomp_rules(f, (pid_t)SB_PID_MARK) == 0 &&
	    seccomp_export_bpf(f, fd) == 0) {
		off_t n = lseek(fd, 0, SEEK_END);
		struct sock_filter *prog = n > 0 ? malloc((size_t)n) : NULL;
		bool got = prog && pread(fd, prog, (size_t)n, 0) == n;
		int marks = 0, other = 0;
		for (off_t i = 0; got && i < n / (off_t)sizeof *prog; i++)
			if (prog[i].k == SB_PID_MARK)
				*(prog[i].code == (BPF_JMP | BPF_JEQ | BPF_K) ? &marks : &other) +=
				    1;
		/* (libseccomp shares the one comparison between kill and tgkill) */
		if (got && marks >= 1 && !other && n / (off_t)sizeof *prog < 65536) {
			sb_prog.filter = prog;
			sb_prog.len = (unsigned short)(n / sizeof *prog);
		} else {
			free(prog);
		}
	}
	if (fd >= 0)
		close(fd);
	seccomp_release(f);
}

static int sb_seccomp_rules(scmp_filter_ctx f, pid_t self)
{
	static const char *const allow[] = {
	    "read",
	    "write",
	    "readv",
	    "writev",
	    "pread64",
	    "lseek",
	    "close",
	    "fstat",
	    "newfstatat",
	    "statx",
	    "stat",
	    "lstat",
	    "getdents64",
	    "readlink",
	    "readlinkat",
	    "access",
	    "faccessat",
	    "faccessat2",
	    "getcwd",
	    "chdir",
	    "fchdir",
	    "mmap",
	    "munmap",
	    "mprotect",
	    "mremap",
	    "brk",
	    "madvise",
	    "rt_sigaction",
	    "rt_sigprocmask",
	    "rt_sigreturn",
	    "rt_sigpending",
	    "sigaltstack",
	    "exit",
	    "exit_group",
	    "getpid",
	    "gettid",
	    "getppid",
	    "getuid",
	    "geteuid",
	    "getgid",
	    "getegid",
	    "getresuid",
	    "getresgid",
	    "getgroups",
	    "getpgrp",
	    "getsid",
	    "getrandom",
	    "clock_gettime",
	    "clock_getres",
	    "clock_nanosleep",
	    "nanosleep",
	    "gettimeofday",
	    "time",
	    "futex",
	    "set_robust_list",
	    "get_robust_list",
	    "rseq",
	    "sched_yield",
	    "sched_getaffinity",
	    "uname",
	    "getrlimit",
	    "getrusage",
	    "times",
	    "sysinfo",
	    "fcntl",
	    "dup",
	    "dup2",
	    "dup3",
	    "pipe",
	    "pipe2",
	    "poll",
	    "ppoll",
	    "select",
	    "pselect6",
	    "epoll_create1",
	    "epoll_ctl",
	    "epoll_wait",
	    "epoll_pwait",
	    "eventfd2",
	    "umask",
	    "statfs",
	    "fstatfs",
	    "fadvise64",
	    "restart_syscall",
	    "set_tid_address",
	    "alarm",
	    "setitimer",
	    "getitimer",
	    "timer_create",
	    "timer_settime",
	    "timer_gettime",
	    "timer_delete",
	    "membarrier",
	    "sched_getparam",
	    "sched_getscheduler",
	    "getpriority",
	    "capget",
	    "arch_prctl",
	    "close_range",
	    "shutdown",
	    "sendmsg",
	    "recvmsg",
	    "sendto",
	    "recvfrom",
	    "getsockname",
	    "getpeername",
	    "getsockopt",
	    "setsockopt",
	};
	int rc = 0;
	for (size_t i = 0; i < sizeof allow / sizeof allow[0] && rc == 0; i++) {
		int nr = seccomp_syscall_resolve_name(allow[i]);
		if (nr != __NR_SCMP_ERROR)
			rc = seccomp_rule_add(f, SCMP_ACT_ALLOW, nr, 0);
	}
	/* Opens for reading only (Landlock confines which files). */
	const scmp_datum_t wr = O_WRONLY | O_RDWR | O_CREAT | O_TRUNC | O_APPEND;
	if (rc == 0)
		rc = seccomp_rule_add(f, SCMP_ACT_ALLOW, SCMP_SYS(openat), 1,
				      SCMP_A2(SCMP_CMP_MASKED_EQ, wr, 0));
	if (rc == 0)
		rc = seccomp_rule_add(f, SCMP_ACT_ALLOW, SCMP_SYS(open), 1,
				      SCMP_A1(SCMP_CMP_MASKED_EQ, wr, 0));
	/* A pair of connected sockets inside the process (asyncio's wakeup). */
	if (rc == 0)
		rc = seccomp_rule_add(f, SCMP_ACT_ALLOW, SCMP_SYS(socketpair), 1,
				      SCMP_A0(SCMP_CMP_EQ, AF_UNIX));
	/* Signals to itself only (raise, os.kill(os.getpid())). */
	if (rc == 0)
		rc = seccomp_rule_add(f, SCMP_ACT_ALLOW, SCMP_SYS(kill), 1,
				      SCMP_A0(SCMP_CMP_EQ, (scmp_datum_t)self));
	if (rc == 0)
		rc = seccomp_rule_add(f, SCMP_ACT_ALLOW, SCMP_SYS(tgkill), 1,
				      SCMP_A0(SCMP_CMP_EQ, (scmp_datum_t)self));
	/* Reading limits, not setting them. */
	if (rc == 0)
		rc = seccomp_rule_add(f, SCMP_ACT_ALLOW, SCMP_SYS(prlimit64), 2,
				      SCMP_A0(SCMP_CMP_EQ, 0), SCMP_A2(SCMP_CMP_EQ, 0));
	/* isatty() and friends: not a terminal. */
	if (rc == 0)
		rc = seccomp_rule_add(f, SCMP_ACT_ERRNO(ENOTTY), SCMP_SYS(ioctl), 0);
	return rc;
}

/* This process's address space, bytes (read without stdio: a malloc in a
 * fresh child writes to the zygote's heap, a copy-on-write fault a page). */
static long vm_size_bytes(void)
{
	char buf[128];
	int fd = open("/proc/self/statm", O_RDONLY | O_CLOEXEC);
	ssize_t n = fd >= 0 ? read(fd, buf, sizeof buf - 1) : -1;
	if (fd >= 0)
		close(fd);
	buf[n > 0 ? n : 0] = 0;
	return strtol(buf, NULL, 10) * sysconf(_SC_PAGESIZE);
}

static int sb_enter(const struct zygote_opts *o, uint32_t mem_mb, char *why, size_t len)
{
	long as = vm_size_bytes() + (long)mem_mb * 1024 * 1024;
	struct {
		int res;
		rlim_t v;
	} lim[] = {
	    {RLIMIT_AS, (rlim_t)as}, {RLIMIT_CPU, 2}, /* seconds: a backstop, see the hub */
	    {RLIMIT_FSIZE, 0},	     {RLIMIT_NPROC, 0},	      {RLIMIT_NOFILE, 64},
	    {RLIMIT_CORE, 0},	     {RLIMIT_MEMLOCK, 0},     {RLIMIT_MSGQUEUE, 0},
	    {RLIMIT_LOCKS, 0},	     {RLIMIT_SIGPENDING, 64},
	};
	for (size_t i = 0; i < sizeof lim / sizeof lim[0]; i++) {
		struct rlimit r = {lim[i].v, lim[i].v};
		if (setrlimit(lim[i].res, &r) < 0) {
			snprintf(why, len, "setrlimit %d: %s", lim[i].res, strerror(errno));
			return -1;
		}
	}
	TR("c.rlimits");
	if (setgroups(0, NULL) < 0 || setresgid(o->gid, o->gid, o->gid) < 0 ||
	    setresuid(o->uid, o->uid, o->uid) < 0) {
		snprintf(why, len, "cannot become uid %u: %s", (unsigned)o->uid, strerror(errno));
		return -1;
	}
	if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0 || prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0 ||
	    prctl(PR_SET_DUMPABLE, 0) < 0) {
		snprintf(why, len, "prctl: %s", strerror(errno));
		return -1;
	}
	TR("c.uid+prctl");
	if (sb_landlock(o, why, len) < 0)
		return -1;
	TR("c.landlock");
	int rc = sb_seccomp(getpid(), why, len);
	TR("c.seccomp");
	return rc;
}

/* ---- the zygote: keeps `pool` sandboxes made ahead ------------------------------ */

static int zygote_hub = -1; /* the zygote's end of the socketpair with the hub */

int zygote_split(const char *name, char *why, size_t len)
{
	int sv[2];
	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0) {
		snprintf(why, len, "socketpair: %s", strerror(errno));
		return -1;
	}
	pid_t hub = getpid();
	pid_t pid = fork();
	if (pid < 0) {
		snprintf(why, len, "fork: %s", strerror(errno));
		return -1;
	}
	if (pid > 0) {
		close(sv[1]);
		hub_serve(name, sv[0]);
		_exit(1);
	}
	/* The zygote: dies with the hub; runs never come its way. */
	close(sv[0]);
	close(CTL_FD);
	if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0 || getppid() != hub)
		_exit(1);
	zygote_hub = sv[1];
	return 0;
}

/* Moves fd to `to` (which must not be in use by another of our pipes). */
static void child_fd(int fd, int to)
{
	if (fd == to) {
		int fl = fcntl(fd, F_GETFD);
		fcntl(fd, F_SETFD, fl & ~FD_CLOEXEC);
	} else {
		dup2(fd, to);
	}
}

/* In a new sandboxed child: the sandbox, the warm-up, then its one run.
 * Its pipes on 0-4: stdin, stdout, stderr, the verdict, the code. */
static void zygote_child(const struct zygote_lang *l, const struct zygote_opts *o, uint32_t mem_mb,
			 int p[5])
{
	TR("c.forked");
	sigset_t all;
	sigemptyset(&all);
	sigprocmask(SIG_SETMASK, &all, NULL); /* the zygote blocks SIGCHLD for its signalfd */
	if (l->after_fork_child)
		l->after_fork_child();
	TR("c.afterfork");
	/* Everything above 20 first, so that no dup2 below hits a pipe. */
	for (int i = 0; i < 5; i++)
		p[i] = fcntl(p[i], F_DUPFD_CLOEXEC, 20);
	for (int i = 0; i < 5; i++)
		child_fd(p[i], i);
#ifdef ZYGOTE_TRACE
	close_range(5, 8, 0);
	close_range(10, ~0U, 0);
#else
	close_range(5, ~0U, 0);
#endif
	TR("c.fds");
	char why[300];
	if (sb_enter(o, mem_mb, why, sizeof why) < 0) {
		char line[320];
		int n = snprintf(line, sizeof line, "I%s", why);
		(void)!write(3, line, (size_t)n);
		_exit(125);
	}
	TR("c.sandboxed");
	if (l->prepare)
		l->prepare();
	TR("c.prepared");
	(void)!write(3, "R", 1); /* ready: the hub may give it a run */
	l->run(4, 3);
	_exit(126);
}

/* Forks one sandbox and hands its pipes and pidfd to the hub. */
static int zygote_make(const struct zygote_lang *l, const struct zygote_opts *o, uint32_t mem_mb)
{
	int in[2], out[2], err[2], st[2], code[2];
	int *pipes[5] = {in, out, err, st, code};
	int made = 0;
	for (; made < 5; made++)
		if (pipe2(pipes[made], O_CLOEXEC) < 0)
			break;
	if (made < 5) {
		zlog("%s: pipe: %s", l->name, strerror(errno));
		for (int i = 0; i < made; i++)
			close(pipes[i][0]), close(pipes[i][1]);
		return -1;
	}
	if (l->before_fork)
		l->before_fork();
#ifdef ZYGOTE_TRACE
	tr_t0 = clock_now_us();
#endif
	pid_t pid = fork();
	if (pid == 0) {
		int p[5] = {in[0], out[1], err[1], st[1], code[0]};
		zygote_child(l, o, mem_mb, p);
	}
	TR("z.forked");
	if (l->after_fork_parent)
		l->after_fork_parent();
	/* The hub's ends; the child's ends are the child's alone. */
	int fds[HUB_NEW_FDS] = {-1, in[1], out[0], err[0], st[0], code[1]};
	close(in[0]), close(out[1]), close(err[1]), close(st[1]), close(code[0]);
	int rc = -1;
	if (pid < 0) {
		zlog("%s: fork: %s", l->name, strerror(errno));
	} else if ((fds[0] = (int)syscall(SYS_pidfd_open, pid, 0)) < 0) {
		zlog("%s: pidfd_open: %s", l->name, strerror(errno));
		kill(pid, SIGKILL); /* ours and not reaped: the pid is still its */
	} else {
		struct hub_msg m = {.type = HUB_NEW, .pid = pid};
		struct iovec iov = {&m, sizeof m};
		union {
			struct cmsghdr h;
			char buf[CMSG_SPACE(sizeof fds)];
		} cm;
		memset(&cm, 0, sizeof cm);
		struct msghdr mh = {.msg_iov = &iov,
				    .msg_iovlen = 1,
				    .msg_control = cm.buf,
				    .msg_controllen = sizeof cm.buf};
		struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN(sizeof fds);
		memcpy(CMSG_DATA(c), fds, sizeof fds);
		if (sendmsg(zygote_hub, &mh, MSG_NOSIGNAL) == (ssize_t)sizeof m)
			rc = 0;
		else
			kill(pid, SIGKILL); /* the hub is gone (we exit next) */
	}
	for (int i = 0; i < HUB_NEW_FDS; i++)
		if (fds[i] >= 0)
			close(fds[i]);
	return rc;
}

void zygote_serve(const struct zygote_lang *l, const struct zygote_opts *o)
{
	int cur_nice = 10;
	setpriority(PRIO_PROCESS, 0, cur_nice); /* making sandboxes is background work */
	sb_seccomp_compile();
	sigset_t chld;
	sigemptyset(&chld);
	sigaddset(&chld, SIGCHLD);
	sigprocmask(SIG_BLOCK, &chld, NULL);
	int sfd = signalfd(-1, &chld, SFD_CLOEXEC | SFD_NONBLOCK);
	int made = 0, failures = 0; /* made: sandboxes the hub holds */
	uint32_t mem_mb = 128;
	const char *m = getenv("CUBICLE_RUN_MEM_MB");
	if (m && atoi(m) > 0)
		mem_mb = (uint32_t)atoi(m);
	if (sfd < 0 || zygote_hub < 0) {
		zlog("%s: out of resources", l->name);
		_exit(1);
	}
	for (;;) {
		int backoff = -1;
		while (made < o->pool) {
			if (failures > 3) { /* sandboxes die before serving: slow down */
				backoff = 200;
				break;
			}
			/* Making sandboxes is background work (nice 10) while
			 * half the pool is ready; below that, runs are about to
			 * wait for one, so it is the most urgent work there is.
			 * The hub puts each child back to nice 0 once it is
			 * ready. */
			int nice = made < (o->pool + 1) / 2 ? 0 : 10;
			if (nice != cur_nice && setpriority(PRIO_PROCESS, 0, nice) == 0)
				cur_nice = nice;
			if (zygote_make(l, o, mem_mb) < 0) {
				backoff = 100;
				break;
			}
			made++;
		}
		struct pollfd p[2] = {{zygote_hub, POLLIN, 0}, {sfd, POLLIN, 0}};
		int n = poll(p, 2, backoff);
		if (n < 0 && errno != EINTR)
			_exit(1);
		if (n == 0)
			failures = 0;
		if (p[0].revents) {
			struct hub_msg d;
			ssize_t r;
			while ((r = recv(zygote_hub, &d, sizeof d, MSG_DONTWAIT)) ==
			       (ssize_t)sizeof d)
				if (d.type == HUB_DONE) {
					made--;
					failures = d.taken ? 0 : failures + 1;
				}
			if (r == 0 || (r < 0 && errno != EAGAIN && errno != EINTR))
				_exit(0); /* the hub is gone */
		}
		if (p[1].revents) {
			struct signalfd_siginfo si;
			while (read(sfd, &si, sizeof si) > 0)
				;
			/* Our children are the sandboxes: the hub learns how each
			 * ended (it cannot wait for another's child). */
			pid_t pid;
			int ws;
			struct rusage ru;
			while ((pid = wait4(-1, &ws, WNOHANG, &ru)) > 0) {
				struct hub_msg x = {
				    .type = HUB_EXIT,
				    .pid = pid,
				    .status = ws,
				    .cpu_us = (int64_t)ru.ru_utime.tv_sec * 1000000 +
					      ru.ru_utime.tv_usec +
					      (int64_t)ru.ru_stime.tv_sec * 1000000 +
					      ru.ru_stime.tv_usec,
				    .maxrss_kb = ru.ru_maxrss,
				};
				if (send(zygote_hub, &x, sizeof x, MSG_NOSIGNAL) < 0)
					_exit(0);
			}
		}
	}
}
