/*
 * zygote: pre-forked monitors and sandboxed children for the code runner
 * (zygote.h says what it promises).
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

#include "runproto.h"
#include "clock.h"

#define CTL_FD 3

/* Landlock, spelled out: the build machine's kernel headers may predate
 * the kernel (network rules are ABI 4, scopes ABI 6). */
#define LL_CREATE_VERSION    (1U << 0)
#define LL_RULE_PATH_BENEATH 1
#define LL_FS_READ_FILE	     (1ULL << 2)
#define LL_FS_READ_DIR	     (1ULL << 3)
#define LL_NET_ALL	     ((1ULL << 0) | (1ULL << 1)) /* bind and connect TCP */
#define LL_SCOPE_ALL	     ((1ULL << 0) | (1ULL << 1)) /* abstract unix sockets, signals */

struct ll_ruleset_attr {
	uint64_t handled_access_fs;
	uint64_t handled_access_net;
	uint64_t scoped;
};

struct ll_path_beneath {
	uint64_t allowed_access;
	int32_t parent_fd;
} __attribute__((packed));

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
static void tr(const char *what)
{
	struct rusage ru;
	getrusage(RUSAGE_SELF, &ru);
	char buf[200];
	int n = snprintf(buf, sizeof buf, "T %d %-14s %6lld us cpu %6ld us minflt %ld\n",
			 (int)getpid(), what, (long long)(clock_now_us() - tr_t0),
			 ru.ru_utime.tv_sec * 1000000 + ru.ru_utime.tv_usec +
			     ru.ru_stime.tv_sec * 1000000 + ru.ru_stime.tv_usec,
			 ru.ru_minflt);
	(void)!write(9, buf, (size_t)n);
}
#define TR(x) tr(x)
#else
#define TR(x) ((void)0)
#endif

/* ---- the sandbox (in the child, before the code arrives) ------------------------ */

static int sb_landlock(const struct zygote_opts *o, char *why, size_t len)
{
	long abi = syscall(SYS_landlock_create_ruleset, NULL, 0, LL_CREATE_VERSION);
	if (abi < 1) {
		snprintf(why, len, "Landlock is not available in this kernel: %s", strerror(errno));
		return -1;
	}
	/* Every filesystem right this ABI knows is handled: only what a rule
	 * grants is allowed (read files and directories beneath o->readable). */
	uint64_t fs = (1ULL << 13) - 1; /* ABI 1: execute .. make_sym */
	if (abi >= 2)
		fs |= 1ULL << 13; /* refer */
	if (abi >= 3)
		fs |= 1ULL << 14; /* truncate */
	if (abi >= 5)
		fs |= 1ULL << 15; /* ioctl_dev */
	struct ll_ruleset_attr ra = {.handled_access_fs = fs};
	size_t size = sizeof ra.handled_access_fs;
	if (abi >= 4) {
		ra.handled_access_net = LL_NET_ALL;
		size = offsetof(struct ll_ruleset_attr, scoped);
	}
	if (abi >= 6) {
		ra.scoped = LL_SCOPE_ALL;
		size = sizeof ra;
	}
	int rfd = (int)syscall(SYS_landlock_create_ruleset, &ra, size, 0);
	if (rfd < 0) {
		snprintf(why, len, "landlock_create_ruleset: %s", strerror(errno));
		return -1;
	}
	for (size_t i = 0; o->readable && o->readable[i]; i++) {
		int dfd = open(o->readable[i], O_PATH | O_CLOEXEC | O_DIRECTORY);
		if (dfd < 0)
			continue; /* not on this machine: nothing to grant */
		struct ll_path_beneath pb = {.allowed_access = LL_FS_READ_FILE | LL_FS_READ_DIR,
					     .parent_fd = dfd};
		long rc = syscall(SYS_landlock_add_rule, rfd, LL_RULE_PATH_BENEATH, &pb, 0);
		close(dfd);
		if (rc < 0) {
			snprintf(why, len, "landlock_add_rule %s: %s", o->readable[i],
				 strerror(errno));
			close(rfd);
			return -1;
		}
	}
	long rc = syscall(SYS_landlock_restrict_self, rfd, 0);
	close(rfd);
	if (rc < 0) {
		snprintf(why, len, "landlock_restrict_self: %s", strerror(errno));
		return -1;
	}
	return 0;
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

static long vm_size_bytes(void)
{
	FILE *f = fopen("/proc/self/statm", "re");
	long pages = 0;
	if (f) {
		if (fscanf(f, "%ld", &pages) != 1)
			pages = 0;
		fclose(f);
	}
	return pages * sysconf(_SC_PAGESIZE);
}

static int sb_enter(const struct zygote_opts *o, uint32_t mem_mb, char *why, size_t len)
{
	long as = vm_size_bytes() + (long)mem_mb * 1024 * 1024;
	struct {
		int res;
		rlim_t v;
	} lim[] = {
	    {RLIMIT_AS, (rlim_t)as}, {RLIMIT_CPU, 2}, /* seconds: a backstop, see the monitor */
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

/* ---- the monitor: one run ------------------------------------------------------- */

static int write_all(int fd, const void *p, size_t n)
{
	const char *c = p;
	while (n) {
		ssize_t w = write(fd, c, n);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return -1;
		c += w;
		n -= (size_t)w;
	}
	return 0;
}

static int read_all(int fd, void *p, size_t n)
{
	char *c = p;
	while (n) {
		ssize_t r = read(fd, c, n);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return -1;
		c += r;
		n -= (size_t)r;
	}
	return 0;
}

static void answer(int conn, struct run_resp *r, const char *out, const char *err, const char *msg)
{
	r->magic = RUN_RESP_MAGIC;
	r->msg_len = msg ? (uint32_t)strnlen(msg, RUN_MSG_MAX) : 0;
	if (write_all(conn, r, sizeof *r) == 0 && write_all(conn, out, r->stdout_len) == 0 &&
	    write_all(conn, err, r->stderr_len) == 0)
		(void)write_all(conn, msg, r->msg_len);
}

static int64_t child_cpu_us(clockid_t clk)
{
	struct timespec t;
	if (clock_gettime(clk, &t) < 0)
		return -1;
	return (int64_t)t.tv_sec * 1000000 + t.tv_nsec / 1000;
}

/* Reads a /proc file into buf (NUL-terminated) without stdio: the monitor
 * is a fork of the zygote, and a malloc on the request path writes to the
 * zygote's fragmented heap, each page a copy-on-write fault (tens of
 * microseconds each in this VM: docs/code-runner.md). */
static void read_proc(pid_t pid, const char *what, char *buf, size_t len)
{
	char path[64];
	snprintf(path, sizeof path, "/proc/%d/%s", (int)pid, what);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	ssize_t n = fd >= 0 ? read(fd, buf, len - 1) : -1;
	buf[n > 0 ? n : 0] = 0;
	if (fd >= 0)
		close(fd);
}

static long child_rss_kb(pid_t pid)
{
	char buf[128];
	long size = 0, rss = 0;
	read_proc(pid, "statm", buf, sizeof buf);
	if (sscanf(buf, "%ld %ld", &size, &rss) != 2)
		rss = 0;
	return rss * (sysconf(_SC_PAGESIZE) / 1024);
}

/* The child's peak resident memory (VmHWM), KiB. */
static long child_hwm_kb(pid_t pid)
{
	char buf[4096];
	long kb = 0;
	read_proc(pid, "status", buf, sizeof buf);
	const char *l = strstr(buf, "VmHWM:");
	if (!l || sscanf(l, "VmHWM: %ld", &kb) != 1)
		kb = 0;
	return kb;
}

/* Fresh anonymous memory, not the heap (see read_proc); NULL if none. */
static void *fresh(size_t n)
{
	void *p = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	return p == MAP_FAILED ? NULL : p;
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

struct run_io {
	char *out, *err;
	size_t nout, nerr, cap;
	char status[RUN_MSG_MAX + 2];
	size_t nstatus;
};

static void monitor(const struct zygote_lang *l, const struct zygote_opts *o, int taken_fd,
		    uint32_t mem_mb)
{
	TR("monitor");
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	signal(SIGPIPE, SIG_IGN);
	int in[2], out[2], err[2], st[2], code[2];
	if (pipe2(in, O_CLOEXEC) < 0 || pipe2(out, O_CLOEXEC) < 0 || pipe2(err, O_CLOEXEC) < 0 ||
	    pipe2(st, O_CLOEXEC) < 0 || pipe2(code, O_CLOEXEC) < 0) {
		zlog("%s: monitor: pipe: %s", l->name, strerror(errno));
		_exit(1);
	}
	if (l->before_fork)
		l->before_fork();
	TR("m.before_fork");
	pid_t pid = fork();
	if (pid < 0) {
		zlog("%s: monitor: fork: %s", l->name, strerror(errno));
		_exit(1);
	}
	if (pid == 0) {
		TR("c.forked");
		if (l->after_fork_child)
			l->after_fork_child();
		TR("c.afterfork");
		/* Everything above 20 first, so that no dup2 below hits a pipe. */
		int keep[5] = {in[0], out[1], err[1], st[1], code[0]};
		for (int i = 0; i < 5; i++)
			keep[i] = fcntl(keep[i], F_DUPFD_CLOEXEC, 20);
		for (int i = 0; i < 5; i++)
			child_fd(keep[i], i);
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
		(void)!write(3, "R", 1); /* ready: the monitor may take a run */
		l->run(4, 3);
		_exit(126);
	}
	TR("m.forked");
	if (l->after_fork_parent)
		l->after_fork_parent();
	TR("m.afterfork");
	close(in[0]), close(out[1]), close(err[1]), close(st[1]), close(code[0]);
	int pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
	clockid_t clk;
	if (pidfd < 0 || clock_getcpuclockid(pid, &clk) != 0) {
		zlog("%s: monitor: cannot watch the child: %s", l->name, strerror(errno));
		kill(pid, SIGKILL);
		_exit(1);
	}

	/* The child is ready once it says so ('R'); a child whose sandbox
	 * failed says why instead ("I..."), kept for the run's answer. */
	char first = 0;
	struct pollfd rp = {st[0], POLLIN, 0};
	if (poll(&rp, 1, 30000) != 1 || read(st[0], &first, 1) != 1) {
		zlog("%s: monitor: the child did not get ready", l->name);
		kill(pid, SIGKILL);
		_exit(1);
	}
	/* Ready: back to normal priority, this monitor and its child (they
	 * are made at nice 10, so making sandboxes never competes with runs in
	 * flight; a ready one wakes at once when its run comes). */
	TR("m.ready");
	setpriority(PRIO_PROCESS, 0, 0);
	setpriority(PRIO_PROCESS, (id_t)pid, 0);
	/* Wait for a run (one message carrying the connection). */
	int conn = -1;
	for (;;) {
		char byte;
		struct iovec iov = {&byte, 1};
		union {
			struct cmsghdr h;
			char buf[CMSG_SPACE(sizeof(int))];
		} cm;
		struct msghdr mh = {.msg_iov = &iov,
				    .msg_iovlen = 1,
				    .msg_control = cm.buf,
				    .msg_controllen = sizeof cm.buf};
		ssize_t r = recvmsg(CTL_FD, &mh, MSG_CMSG_CLOEXEC);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0) { /* cubicled is gone */
			kill(pid, SIGKILL);
			_exit(0);
		}
		struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
		if (c && c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
			memcpy(&conn, CMSG_DATA(c), sizeof conn);
			break;
		}
	}
#ifdef ZYGOTE_TRACE
	tr_t0 = clock_now_us();
#endif
	TR("m.got");
	close(CTL_FD);
	pid_t me = getpid();
	(void)!write(taken_fd, &me, sizeof me);
	close(taken_fd);

	struct run_resp resp = {0};
	struct run_req req;
	struct timeval tv = {5, 0};
	setsockopt(conn, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
	char *codebuf = NULL, *inbuf = NULL;
	if (read_all(conn, &req, sizeof req) < 0 || req.magic != RUN_REQ_MAGIC ||
	    req.code_len > RUN_CODE_MAX || req.stdin_len > RUN_STDIN_MAX ||
	    !(codebuf = fresh(req.code_len + 1)) || !(inbuf = fresh(req.stdin_len + 1)) ||
	    read_all(conn, codebuf, req.code_len) < 0 || read_all(conn, inbuf, req.stdin_len) < 0) {
		kill(pid, SIGKILL);
		resp.error = RUN_INTERNAL;
		answer(conn, &resp, "", "", "a malformed run request");
		_exit(0);
	}
	struct run_io io = {.cap = req.out_max};
	if (first != 'R')
		io.status[io.nstatus++] = first;
	io.out = fresh(io.cap + 1);
	io.err = fresh(io.cap + 1);
	if (!io.out || !io.err) {
		kill(pid, SIGKILL);
		_exit(1);
	}
	long base_rss = child_rss_kb(pid);
	int64_t base_cpu = child_cpu_us(clk), t0 = clock_now_ms();

	TR("m.req");
	/* The code at once (it fits a pipe's buffer), stdin as it is taken. */
	if (write_all(code[1], codebuf, req.code_len) < 0)
		zlog("%s: monitor: the child took no code", l->name);
	close(code[1]);
	fcntl(in[1], F_SETFL, O_NONBLOCK);
	size_t in_off = 0;
	if (req.stdin_len == 0) {
		close(in[1]);
		in[1] = -1;
	}
	enum run_error verdict = RUN_OK;
	bool exited = false;
	int open_out = 1, open_err = 1, open_st = 1;
	bool early = false; /* the child said how it ended and closed its output */
	while (!exited || open_out || open_err || open_st) {
		if (!open_out && !open_err && !open_st && io.nstatus >= 4 &&
		    strchr("0EM", io.status[0]) && !exited && verdict == RUN_OK) {
			early = true;
			break;
		}
		int64_t el = clock_now_ms() - t0;
		int timeout = -1;
		if (!exited && verdict == RUN_OK) {
			int64_t cpu = (child_cpu_us(clk) - base_cpu) / 1000;
			if (cpu >= (int64_t)req.cpu_ms)
				verdict = RUN_CPU_LIMIT;
			else if (el >= (int64_t)req.wall_ms)
				verdict = RUN_TIMEOUT;
			if (verdict != RUN_OK) {
				kill(pid, SIGKILL);
			} else {
				int64_t left = (int64_t)req.cpu_ms - cpu;
				if ((int64_t)req.wall_ms - el < left)
					left = (int64_t)req.wall_ms - el;
				timeout = (int)(left < 1 ? 1 : left);
			}
		}
		struct pollfd p[5] = {
		    {open_out ? out[0] : -1, POLLIN, 0},
		    {open_err ? err[0] : -1, POLLIN, 0},
		    {open_st ? st[0] : -1, POLLIN, 0},
		    {exited ? -1 : pidfd, POLLIN, 0},
		    {in[1], POLLOUT, 0},
		};
		int n = poll(p, 5, timeout);
		if (n < 0 && errno != EINTR)
			break;
		if (n <= 0)
			continue;
		for (int i = 0; i < 2; i++) {
			if (!p[i].revents)
				continue;
			char *buf = i == 0 ? io.out : io.err;
			size_t *len = i == 0 ? &io.nout : &io.nerr;
			char tmp[65536];
			ssize_t r = read(p[i].fd, tmp, sizeof tmp);
			if (r <= 0) {
				*(i == 0 ? &open_out : &open_err) = 0;
				continue;
			}
			size_t room = io.cap - io.nout - io.nerr;
			size_t take = (size_t)r < room ? (size_t)r : room;
			memcpy(buf + *len, tmp, take);
			*len += take;
			if (take < (size_t)r && verdict == RUN_OK) {
				verdict = RUN_OUTPUT_LIMIT;
				resp.truncated = 1;
				kill(pid, SIGKILL);
			}
		}
		if (p[2].revents) {
			ssize_t r = read(st[0], io.status + io.nstatus, RUN_MSG_MAX - io.nstatus);
			if (r <= 0)
				open_st = 0;
			else
				io.nstatus += (size_t)r;
		}
		if (p[3].revents)
			exited = true;
		if (in[1] >= 0 && p[4].revents) {
			ssize_t w = p[4].revents & POLLOUT
					? write(in[1], inbuf + in_off, req.stdin_len - in_off)
					: -1;
			if (w > 0)
				in_off += (size_t)w;
			if (w < 0 && errno == EAGAIN)
				continue;
			if (w < 0 || in_off == req.stdin_len) {
				close(in[1]);
				in[1] = -1;
			}
		}
	}
	io.status[io.nstatus] = 0;
	const char *msg = NULL;
	int ws = 0;
	if (early) {
		/* Answered before the child's exit (tearing down its address
		 * space is not the run's time); it is killed right after. */
		int64_t cpu_us = child_cpu_us(clk) - base_cpu;
		resp.cpu_ms = (uint32_t)(cpu_us > 0 ? cpu_us / 1000 : 0);
		resp.wall_ms = (uint32_t)(clock_now_ms() - t0);
		long hwm = child_hwm_kb(pid), now = child_rss_kb(pid);
		long mem = (hwm > now ? hwm : now) - base_rss;
		resp.memory_kb = (uint32_t)(mem > 0 ? mem : 0);
		char code3[4] = {io.status[1], io.status[2], io.status[3], 0};
		resp.exit_code = atoi(code3);
		verdict = io.status[0] == 'M'	? RUN_MEMORY_LIMIT
			  : io.status[0] == 'E' ? RUN_EXCEPTION
						: RUN_OK;
		msg = verdict == RUN_OK ? NULL : io.status + 4;
		resp.error = verdict;
		resp.stdout_len = (uint32_t)io.nout;
		resp.stderr_len = (uint32_t)io.nerr;
		answer(conn, &resp, io.out, io.err, msg);
		close(conn);
		TR("m.answered");
		kill(pid, SIGKILL);
		while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
			;
		_exit(0);
	}
	struct rusage ru;
	while (wait4(pid, &ws, 0, &ru) < 0 && errno == EINTR)
		;
	int64_t cpu_us = (int64_t)ru.ru_utime.tv_sec * 1000000 + ru.ru_utime.tv_usec +
			 (int64_t)ru.ru_stime.tv_sec * 1000000 + ru.ru_stime.tv_usec - base_cpu;
	resp.cpu_ms = (uint32_t)(cpu_us > 0 ? cpu_us / 1000 : 0);
	resp.wall_ms = (uint32_t)(clock_now_ms() - t0);
	long mem = ru.ru_maxrss - base_rss;
	resp.memory_kb = (uint32_t)(mem > 0 ? mem : 0);
	if (WIFEXITED(ws))
		resp.exit_code = WEXITSTATUS(ws);
	else if (WIFSIGNALED(ws))
		resp.exit_code = 128 + WTERMSIG(ws);
	char sigmsg[80];
	if (verdict == RUN_CPU_LIMIT)
		msg = "the code used its CPU time";
	else if (verdict == RUN_TIMEOUT)
		msg = "the code ran past its wall-clock time";
	else if (verdict == RUN_OUTPUT_LIMIT)
		msg = "the code printed more than the output limit; the output is cut";
	else if (WIFSIGNALED(ws) && (WTERMSIG(ws) == SIGXCPU || WTERMSIG(ws) == SIGKILL)) {
		verdict = RUN_CPU_LIMIT;
		msg = "the code used its CPU time";
	} else if (io.nstatus >= 4 && io.status[0] == 'M') {
		verdict = RUN_MEMORY_LIMIT;
		msg = io.status + 4;
	} else if (io.nstatus >= 4 && io.status[0] == 'E') {
		verdict = RUN_EXCEPTION;
		msg = io.status + 4;
	} else if (io.nstatus && io.status[0] == 'I') {
		verdict = RUN_INTERNAL;
		msg = io.status + 1;
		zlog("%s: sandbox: %s", l->name, msg);
	} else if (WIFSIGNALED(ws)) {
		/* A crash near the memory cap is the cap (an allocation that
		 * failed where the interpreter could not raise). */
		bool mem_cap = resp.memory_kb + 8192 >= req.mem_mb * 1024u;
		verdict = mem_cap ? RUN_MEMORY_LIMIT : RUN_EXCEPTION;
		snprintf(sigmsg, sizeof sigmsg, "the process was killed by signal %d (%s)%s",
			 WTERMSIG(ws), strsignal(WTERMSIG(ws)),
			 mem_cap ? " at the memory limit" : "");
		msg = sigmsg;
	}
	resp.error = verdict;
	resp.stdout_len = (uint32_t)io.nout;
	resp.stderr_len = (uint32_t)io.nerr;
	answer(conn, &resp, io.out, io.err, msg);
	_exit(0);
}

/* ---- the zygote: keeps `pool` monitors ready ------------------------------------ */

struct mon {
	pid_t pid;
	bool ready;
};

void zygote_serve(const struct zygote_lang *l, const struct zygote_opts *o)
{
	int cur_nice = 10;
	setpriority(PRIO_PROCESS, 0, cur_nice); /* making sandboxes is background work */
	sb_seccomp_compile();
	prctl(PR_SET_CHILD_SUBREAPER, 1);
	/* No PR_SET_PDEATHSIG: its "parent" is the thread that forked it, and
	 * cubicled starts a supervisor again from a request's thread, which
	 * ends with the request. cubicled's exit closes fd 3 (POLLHUP below). */
	int taken[2];
	if (pipe2(taken, O_CLOEXEC | O_NONBLOCK) < 0) {
		zlog("%s: pipe: %s", l->name, strerror(errno));
		_exit(1);
	}
	sigset_t chld;
	sigemptyset(&chld);
	sigaddset(&chld, SIGCHLD);
	sigprocmask(SIG_BLOCK, &chld, NULL);
	int sfd = signalfd(-1, &chld, SFD_CLOEXEC | SFD_NONBLOCK);
	size_t cap = 64, nmon = 0;
	struct mon *mons = calloc(cap, sizeof *mons);
	int ready = 0, failures = 0;
	uint32_t mem_mb = 128;
	const char *m = getenv("CUBICLE_RUN_MEM_MB");
	if (m && atoi(m) > 0)
		mem_mb = (uint32_t)atoi(m);
	if (!mons || sfd < 0) {
		zlog("%s: out of resources", l->name);
		_exit(1);
	}
	for (;;) {
		int backoff = -1;
		while (ready < o->pool) {
			if (failures > 3) { /* monitors die before serving: slow down */
				backoff = 200;
				break;
			}
			if (nmon == cap) {
				struct mon *nm = realloc(mons, 2 * cap * sizeof *mons);
				if (!nm)
					break;
				mons = nm, cap *= 2;
			}
			/* No interpreter hooks around this fork: the monitor runs
			 * no interpreter code; it brackets its own fork of the
			 * sandboxed child with them (the zygote is single-threaded,
			 * so the copy it gets is consistent). Each hook run costs
			 * copy-on-write faults. */
			/* Making sandboxes is background work (nice 10) while
			 * half the pool is ready; below that, runs are about to
			 * wait for one, so it is the most urgent work there is. */
			int nice = ready < (o->pool + 1) / 2 ? 0 : 10;
			if (nice != cur_nice && setpriority(PRIO_PROCESS, 0, nice) == 0)
				cur_nice = nice;
#ifdef ZYGOTE_TRACE
			tr_t0 = clock_now_us();
#endif
			pid_t pid = fork();
			TR(pid == 0 ? "z.fork(child)" : "z.fork(parent)");
			if (pid == 0) {
				close(taken[0]), close(sfd);
				sigprocmask(SIG_UNBLOCK, &chld, NULL);
				monitor(l, o, taken[1], mem_mb);
				_exit(1);
			}
			if (pid < 0) {
				backoff = 100;
				break;
			}
			mons[nmon++] = (struct mon){pid, true};
			ready++;
		}
		struct pollfd p[3] = {{CTL_FD, 0, 0}, {taken[0], POLLIN, 0}, {sfd, POLLIN, 0}};
		int n = poll(p, 3, backoff);
		if (n < 0 && errno != EINTR)
			_exit(1);
		if (n == 0)
			failures = 0;
		if (p[0].revents & (POLLHUP | POLLERR))
			_exit(0); /* cubicled closed the control socket */
		/* Always before reaping: a monitor tells it took a run before it
		 * can exit, so a reaped monitor still marked ready never served. */
		{
			pid_t pids[64];
			ssize_t r = read(taken[0], pids, sizeof pids);
			for (ssize_t i = 0; r > 0 && i < r / (ssize_t)sizeof(pid_t); i++)
				for (size_t k = 0; k < nmon; k++)
					if (mons[k].pid == pids[i] && mons[k].ready) {
						mons[k].ready = false;
						ready--;
						failures = 0;
					}
		}
		if (p[2].revents) {
			struct signalfd_siginfo si;
			while (read(sfd, &si, sizeof si) > 0)
				;
			pid_t pid;
			int ws;
			while ((pid = waitpid(-1, &ws, WNOHANG)) > 0) {
				for (size_t k = 0; k < nmon; k++) {
					if (mons[k].pid != pid)
						continue;
					if (mons[k].ready) { /* died before serving */
						ready--;
						failures++;
					}
					mons[k] = mons[--nmon];
					break;
				}
			}
		}
	}
}
