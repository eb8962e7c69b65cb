/*
 * hub: every sandbox and run of a code-runner supervisor, on one event
 * loop (hub.h says what it promises).
 *
 * A sandbox goes MAKING (forked, setting itself up) → READY (said 'R',
 * waits for a run) → REQ (a run's connection came; its request is read) →
 * RUN (the code runs; the limits are watched) → [REAP (ended; how, the
 * zygote says)] → ANSWER (the answer is written) → GONE (killed, let go of;
 * freed once the zygote reaped it).
 */
#include "hub.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/wait.h>

#include "clock.h"
#include "runproto.h"

#define CTL_FD	     3
#define HUB_READY_MS 30000 /* a child not ready by then is given up */
#define HUB_REQ_MS   5000  /* a run's request arrives within this */
/* The zygote makes a sandbox's replacement once its run answered, so that
 * making it never competes with the run; a run longer than this lets it
 * start at once (a pool of long runs must not run dry). */
#define HUB_TELL_MS 10

enum hub_phase { HP_MAKING, HP_READY, HP_REQ, HP_RUN, HP_REAP, HP_ANSWER, HP_GONE };

/* The descriptors of a sandbox the loop watches; data.ptr is a tag. */
enum hub_fd { HF_ST, HF_OUT, HF_ERR, HF_PID, HF_IN, HF_CONN, HF_N };

struct hub_sb;
struct hub_tag {
	struct hub_sb *sb;
	int which; /* enum hub_fd */
};

struct hub_sb {
	struct hub_sb *next;
	pid_t pid;
	enum hub_phase phase;
	int fd[HF_N];		 /* -1 when closed */
	uint32_t watching[HF_N]; /* events registered with epoll, 0 when none */
	struct hub_tag tag[HF_N];
	int code;	     /* the code pipe's write end */
	clockid_t clk;	     /* the child's CPU clock */
	int64_t deadline_ms; /* MAKING: ready by; REQ: the request by */
	uint64_t ready_seq;  /* the oldest ready sandbox takes the next run */
	bool exited;	     /* its pidfd said so */
	bool reaped;	     /* HUB_EXIT came */
	bool told;	     /* HUB_DONE sent */
	int wstatus;
	int64_t cpu_us, maxrss_kb;
	/* the run */
	struct run_req req;
	size_t got; /* request bytes read: header, code, stdin */
	char *codebuf, *inbuf;
	size_t in_off;
	int64_t t0_ms, base_cpu_us;
	long base_rss_kb;
	enum run_error verdict;
	char *out, *err;
	size_t nout, nerr, cap;
	char status[RUN_MSG_MAX + 2]; /* the child's verdict record */
	size_t nstatus;
	/* the answer */
	struct run_resp resp;
	char sigmsg[80];
	struct iovec iov[4];
	int iov_at;
#ifdef ZYGOTE_TRACE
	int64_t tr_t0;
#endif
};

static struct {
	const char *name;
	int ep, zfd;
	struct hub_sb *sbs;
	int nready;
	uint64_t seq;
	bool ctl_in; /* CTL_FD watched for runs (only while one is ready) */
} hub;

static struct hub_tag hub_ctl_tag, hub_z_tag;

#ifdef ZYGOTE_TRACE
void hub_trace(pid_t who, const char *what, int64_t t0_us)
{
	struct rusage ru;
	getrusage(RUSAGE_SELF, &ru);
	char buf[200];
	int64_t now = clock_now_us();
	int n = snprintf(buf, sizeof buf, "T %d %-14s %6lld us cpu %6ld us minflt %ld at %lld\n",
			 (int)(who ? who : getpid()), what, (long long)(now - t0_us),
			 ru.ru_utime.tv_sec * 1000000 + ru.ru_utime.tv_usec +
			     ru.ru_stime.tv_sec * 1000000 + ru.ru_stime.tv_usec,
			 ru.ru_minflt, (long long)now);
	(void)!write(9, buf, (size_t)n);
}
#define TR(sb, x) hub_trace((sb)->pid, x, (sb)->tr_t0)
#else
#define TR(sb, x) ((void)0)
#endif

static void hlog(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void hlog(const char *fmt, ...)
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

/* ---- the child, seen from outside ------------------------------------------------ */

static int64_t child_cpu_us(clockid_t clk)
{
	struct timespec t;
	if (clock_gettime(clk, &t) < 0)
		return -1;
	return (int64_t)t.tv_sec * 1000000 + t.tv_nsec / 1000;
}

/* Reads a /proc file of the child into buf (NUL-terminated). */
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

/* Through its pidfd: never another process that reused its pid (the
 * zygote, not the hub, reaps it). */
static void child_kill(struct hub_sb *sb)
{
	if (sb->fd[HF_PID] >= 0 && !sb->exited)
		syscall(SYS_pidfd_send_signal, sb->fd[HF_PID], SIGKILL, NULL, 0);
}

/* Fresh anonymous memory for a run's bytes; NULL if none. */
static void *fresh(size_t n)
{
	void *p = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	return p == MAP_FAILED ? NULL : p;
}

static void unfresh(char **p, size_t n)
{
	if (*p)
		munmap(*p, n);
	*p = NULL;
}

/* ---- the loop's bookkeeping ------------------------------------------------------- */

static void watch(struct hub_sb *sb, int which, uint32_t events)
{
	if (sb->fd[which] < 0 || sb->watching[which] == events)
		return;
	struct epoll_event ev = {.events = events, .data.ptr = &sb->tag[which]};
	int op = !sb->watching[which] ? EPOLL_CTL_ADD : events ? EPOLL_CTL_MOD : EPOLL_CTL_DEL;
	if (epoll_ctl(hub.ep, op, sb->fd[which], &ev) == 0)
		sb->watching[which] = events;
}

static void shut(struct hub_sb *sb, int which)
{
	watch(sb, which, 0);
	if (sb->fd[which] >= 0)
		close(sb->fd[which]);
	sb->fd[which] = -1;
}

/* CTL_FD is read only while a sandbox is ready: runs wait in the socket
 * (cubicled's queue) for one, not in the hub. */
static void ctl_watch(void)
{
	bool want = hub.nready > 0;
	if (want == hub.ctl_in)
		return;
	struct epoll_event ev = {.events = want ? EPOLLIN : 0, .data.ptr = &hub_ctl_tag};
	if (epoll_ctl(hub.ep, EPOLL_CTL_MOD, CTL_FD, &ev) == 0)
		hub.ctl_in = want;
}

/* Tells the zygote the hub let go of sb: it makes another. */
static void tell(struct hub_sb *sb, bool taken)
{
	if (sb->told)
		return;
	sb->told = true;
	struct hub_msg d = {.type = HUB_DONE, .pid = sb->pid, .taken = taken};
	(void)!send(hub.zfd, &d, sizeof d, MSG_NOSIGNAL);
}

/* Lets go of sb: killed, every descriptor closed; freed once reaped. */
static void let_go(struct hub_sb *sb, bool taken)
{
	if (sb->phase == HP_READY) {
		hub.nready--;
		ctl_watch();
	}
	tell(sb, taken);
	child_kill(sb);
	for (int i = 0; i < HF_N; i++)
		shut(sb, i);
	if (sb->code >= 0)
		close(sb->code), sb->code = -1;
	unfresh(&sb->codebuf, sb->req.code_len + 1);
	unfresh(&sb->inbuf, sb->req.stdin_len + 1);
	unfresh(&sb->out, sb->cap + 1);
	unfresh(&sb->err, sb->cap + 1);
	sb->phase = HP_GONE;
}

/* ---- answering ------------------------------------------------------------------ */

static void answer_write(struct hub_sb *sb)
{
	while (sb->iov_at < 4) {
		struct iovec *v = &sb->iov[sb->iov_at];
		if (v->iov_len == 0) {
			sb->iov_at++;
			continue;
		}
		ssize_t w = writev(sb->fd[HF_CONN], v, 4 - sb->iov_at);
		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0 && errno == EAGAIN) {
			watch(sb, HF_CONN, EPOLLOUT);
			return;
		}
		if (w <= 0)
			break; /* cubicled went away: nothing to answer */
		for (size_t left = (size_t)w; left && sb->iov_at < 4;) {
			v = &sb->iov[sb->iov_at];
			size_t k = left < v->iov_len ? left : v->iov_len;
			v->iov_base = (char *)v->iov_base + k;
			v->iov_len -= k;
			left -= k;
			if (v->iov_len == 0)
				sb->iov_at++;
		}
	}
	TR(sb, "m.answered");
	/* Answered: its replacement may be made, and its teardown is off the
	 * run's time. */
	let_go(sb, true);
}

static void answer(struct hub_sb *sb, const char *msg)
{
	struct run_resp *r = &sb->resp;
	r->magic = RUN_RESP_MAGIC;
	r->error = sb->verdict;
	r->stdout_len = (uint32_t)sb->nout;
	r->stderr_len = (uint32_t)sb->nerr;
	r->msg_len = msg ? (uint32_t)strnlen(msg, RUN_MSG_MAX) : 0;
	sb->iov[0] = (struct iovec){r, sizeof *r};
	sb->iov[1] = (struct iovec){sb->out, sb->nout};
	sb->iov[2] = (struct iovec){sb->err, sb->nerr};
	sb->iov[3] = (struct iovec){(void *)msg, r->msg_len};
	sb->iov_at = 0;
	sb->phase = HP_ANSWER;
	for (int i = 0; i < HF_N; i++)
		if (i != HF_CONN)
			watch(sb, i, 0);
	answer_write(sb);
}

/* The child said how it ended and closed its output: answered before it
 * exits (tearing down its address space is not the run's time). */
static void finish_early(struct hub_sb *sb)
{
	struct run_resp *r = &sb->resp;
	int64_t cpu_us = child_cpu_us(sb->clk) - sb->base_cpu_us;
	r->cpu_ms = (uint32_t)(cpu_us > 0 ? cpu_us / 1000 : 0);
	r->wall_ms = (uint32_t)(clock_now_ms() - sb->t0_ms);
	long hwm = child_hwm_kb(sb->pid), now = child_rss_kb(sb->pid);
	long mem = (hwm > now ? hwm : now) - sb->base_rss_kb;
	r->memory_kb = (uint32_t)(mem > 0 ? mem : 0);
	char code3[4] = {sb->status[1], sb->status[2], sb->status[3], 0};
	r->exit_code = atoi(code3);
	sb->verdict = sb->status[0] == 'M'   ? RUN_MEMORY_LIMIT
		      : sb->status[0] == 'E' ? RUN_EXCEPTION
					     : RUN_OK;
	sb->status[sb->nstatus] = 0;
	answer(sb, sb->verdict == RUN_OK ? NULL : sb->status + 4);
}

/* The child exited and the zygote said how (HUB_EXIT). */
static void finish_late(struct hub_sb *sb)
{
	struct run_resp *r = &sb->resp;
	int ws = sb->wstatus;
	int64_t cpu_us = sb->cpu_us - sb->base_cpu_us;
	r->cpu_ms = (uint32_t)(cpu_us > 0 ? cpu_us / 1000 : 0);
	r->wall_ms = (uint32_t)(clock_now_ms() - sb->t0_ms);
	long mem = (long)sb->maxrss_kb - sb->base_rss_kb;
	r->memory_kb = (uint32_t)(mem > 0 ? mem : 0);
	if (WIFEXITED(ws))
		r->exit_code = WEXITSTATUS(ws);
	else if (WIFSIGNALED(ws))
		r->exit_code = 128 + WTERMSIG(ws);
	sb->status[sb->nstatus] = 0;
	const char *msg = NULL;
	enum run_error v = sb->verdict;
	if (v == RUN_CPU_LIMIT) {
		msg = "the code used its CPU time";
	} else if (v == RUN_TIMEOUT) {
		msg = "the code ran past its wall-clock time";
	} else if (v == RUN_OUTPUT_LIMIT) {
		msg = "the code printed more than the output limit; the output is cut";
	} else if (WIFSIGNALED(ws) && (WTERMSIG(ws) == SIGXCPU || WTERMSIG(ws) == SIGKILL)) {
		v = RUN_CPU_LIMIT;
		msg = "the code used its CPU time";
	} else if (sb->nstatus >= 4 && sb->status[0] == 'M') {
		v = RUN_MEMORY_LIMIT;
		msg = sb->status + 4;
	} else if (sb->nstatus >= 4 && sb->status[0] == 'E') {
		v = RUN_EXCEPTION;
		msg = sb->status + 4;
	} else if (sb->nstatus && sb->status[0] == 'I') {
		v = RUN_INTERNAL;
		msg = sb->status + 1;
		hlog("%s: sandbox: %s", hub.name, msg);
	} else if (WIFSIGNALED(ws)) {
		/* A crash near the memory cap is the cap (an allocation that
		 * failed where the interpreter could not raise). */
		bool mem_cap = r->memory_kb + 8192 >= sb->req.mem_mb * 1024u;
		v = mem_cap ? RUN_MEMORY_LIMIT : RUN_EXCEPTION;
		snprintf(sb->sigmsg, sizeof sb->sigmsg,
			 "the process was killed by signal %d (%s)%s", WTERMSIG(ws),
			 strsignal(WTERMSIG(ws)), mem_cap ? " at the memory limit" : "");
		msg = sb->sigmsg;
	}
	sb->verdict = v;
	answer(sb, msg);
}

/* A run that cannot be run in sb: RUN_INTERNAL with why. */
static void refuse(struct hub_sb *sb, const char *why)
{
	child_kill(sb);
	sb->nout = sb->nerr = 0;
	sb->verdict = RUN_INTERNAL;
	answer(sb, why);
}

/* ---- a run ---------------------------------------------------------------------- */

static void nonblock(int fd)
{
	fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
}

/* The request is in: the code goes to the child at once (it fits a pipe's
 * buffer), stdin as the child takes it. */
static void run_start(struct hub_sb *sb)
{
	watch(sb, HF_CONN, 0);
	sb->cap = sb->req.out_max;
	sb->out = fresh(sb->cap + 1);
	sb->err = fresh(sb->cap + 1);
	if (!sb->out || !sb->err) {
		refuse(sb, "out of memory");
		return;
	}
	sb->base_rss_kb = child_rss_kb(sb->pid);
	sb->base_cpu_us = child_cpu_us(sb->clk);
	sb->t0_ms = clock_now_ms();
	TR(sb, "m.req");
	const char *c = sb->codebuf;
	for (size_t n = sb->req.code_len; n;) {
		ssize_t w = write(sb->code, c, n);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0) {
			hlog("%s: the child took no code", hub.name);
			break;
		}
		c += w;
		n -= (size_t)w;
	}
	close(sb->code);
	sb->code = -1;
	if (sb->req.stdin_len == 0)
		shut(sb, HF_IN);
	else
		watch(sb, HF_IN, EPOLLOUT);
	sb->phase = HP_RUN;
	watch(sb, HF_OUT, EPOLLIN);
	watch(sb, HF_ERR, EPOLLIN);
	watch(sb, HF_ST, EPOLLIN);
	watch(sb, HF_PID, EPOLLIN);
}

static void req_read(struct hub_sb *sb)
{
	const size_t hdr = sizeof sb->req;
	for (;;) {
		char *at;
		size_t want;
		if (sb->got < hdr) {
			at = (char *)&sb->req + sb->got;
			want = hdr - sb->got;
		} else if (sb->got < hdr + sb->req.code_len) {
			at = sb->codebuf + (sb->got - hdr);
			want = hdr + sb->req.code_len - sb->got;
		} else if (sb->got < hdr + sb->req.code_len + sb->req.stdin_len) {
			at = sb->inbuf + (sb->got - hdr - sb->req.code_len);
			want = hdr + sb->req.code_len + sb->req.stdin_len - sb->got;
		} else {
			run_start(sb);
			return;
		}
		ssize_t r = read(sb->fd[HF_CONN], at, want);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0 && errno == EAGAIN)
			return;
		if (r <= 0) {
			refuse(sb, "a malformed run request");
			return;
		}
		sb->got += (size_t)r;
		if (sb->got == hdr) {
			if (sb->req.magic != RUN_REQ_MAGIC || sb->req.code_len > RUN_CODE_MAX ||
			    sb->req.stdin_len > RUN_STDIN_MAX) {
				sb->req.code_len = sb->req.stdin_len = 0;
				refuse(sb, "a malformed run request");
				return;
			}
			sb->codebuf = fresh(sb->req.code_len + 1);
			sb->inbuf = fresh(sb->req.stdin_len + 1);
			if (!sb->codebuf || !sb->inbuf) {
				refuse(sb, "out of memory");
				return;
			}
		}
	}
}

/* Output as it comes, cut at the limit (the child is then killed). */
static void run_output(struct hub_sb *sb, int which)
{
	static char tmp[65536];
	ssize_t r = read(sb->fd[which], tmp, sizeof tmp);
	if (r < 0 && (errno == EAGAIN || errno == EINTR))
		return;
	if (r <= 0) {
		shut(sb, which);
		return;
	}
	char *buf = which == HF_OUT ? sb->out : sb->err;
	size_t *len = which == HF_OUT ? &sb->nout : &sb->nerr;
	size_t room = sb->cap - sb->nout - sb->nerr;
	size_t take = (size_t)r < room ? (size_t)r : room;
	memcpy(buf + *len, tmp, take);
	*len += take;
	if (take < (size_t)r && sb->verdict == RUN_OK) {
		sb->verdict = RUN_OUTPUT_LIMIT;
		sb->resp.truncated = 1;
		child_kill(sb);
	}
}

static void run_status(struct hub_sb *sb)
{
	ssize_t r = read(sb->fd[HF_ST], sb->status + sb->nstatus, RUN_MSG_MAX - sb->nstatus);
	if (r < 0 && (errno == EAGAIN || errno == EINTR))
		return;
	if (r <= 0) {
		shut(sb, HF_ST);
	} else {
		sb->nstatus += (size_t)r;
		TR(sb, "m.verdict");
	}
}

static void run_stdin(struct hub_sb *sb)
{
	ssize_t w = write(sb->fd[HF_IN], sb->inbuf + sb->in_off, sb->req.stdin_len - sb->in_off);
	if (w < 0 && (errno == EAGAIN || errno == EINTR))
		return;
	if (w > 0)
		sb->in_off += (size_t)w;
	if (w <= 0 || sb->in_off == sb->req.stdin_len)
		shut(sb, HF_IN);
}

/* Whether the run ended, and how it is answered. */
static void run_check(struct hub_sb *sb)
{
	if (sb->phase != HP_RUN)
		return;
	bool closed = sb->fd[HF_OUT] < 0 && sb->fd[HF_ERR] < 0 && sb->fd[HF_ST] < 0;
	if (closed && sb->nstatus >= 4 && memchr("0EM", sb->status[0], 3) && !sb->exited &&
	    sb->verdict == RUN_OK) {
		finish_early(sb);
	} else if (closed && sb->exited) {
		shut(sb, HF_IN);
		if (sb->reaped)
			finish_late(sb);
		else
			sb->phase = HP_REAP; /* the zygote's HUB_EXIT finishes it */
	}
}

/* The limits, from outside: CPU time off the child's clock (it has one
 * thread, so its CPU time never runs faster than wall time), wall time;
 * how long the loop may sleep before looking again (ms, -1: no limit). */
static int run_limits(struct hub_sb *sb, int64_t now)
{
	int64_t el = now - sb->t0_ms, left = -1;
	if (!sb->told) {
		if (el >= HUB_TELL_MS)
			tell(sb, true);
		else
			left = HUB_TELL_MS - el;
	}
	if (sb->exited || sb->verdict != RUN_OK)
		return (int)left;
	int64_t cpu = (child_cpu_us(sb->clk) - sb->base_cpu_us) / 1000;
	if (cpu >= (int64_t)sb->req.cpu_ms)
		sb->verdict = RUN_CPU_LIMIT;
	else if (el >= (int64_t)sb->req.wall_ms)
		sb->verdict = RUN_TIMEOUT;
	if (sb->verdict != RUN_OK) {
		child_kill(sb);
		return (int)left;
	}
	int64_t l = (int64_t)sb->req.cpu_ms - cpu;
	if ((int64_t)sb->req.wall_ms - el < l)
		l = (int64_t)sb->req.wall_ms - el;
	if (l < 1)
		l = 1;
	return (int)(left < 0 || l < left ? l : left);
}

/* ---- sandboxes coming and going --------------------------------------------------- */

static struct hub_sb *sb_find(pid_t pid)
{
	for (struct hub_sb *sb = hub.sbs; sb; sb = sb->next)
		if (sb->pid == pid)
			return sb;
	return NULL;
}

static void sb_new(pid_t pid, const int fds[HUB_NEW_FDS])
{
	struct hub_sb *sb = calloc(1, sizeof *sb);
	clockid_t clk;
	if (!sb || clock_getcpuclockid(pid, &clk) != 0) {
		hlog("%s: cannot watch sandbox %d", hub.name, (int)pid);
		syscall(SYS_pidfd_send_signal, fds[0], SIGKILL, NULL, 0);
		for (int i = 0; i < HUB_NEW_FDS; i++)
			close(fds[i]);
		struct hub_msg d = {.type = HUB_DONE, .pid = pid, .taken = 0};
		(void)!send(hub.zfd, &d, sizeof d, MSG_NOSIGNAL);
		free(sb);
		return;
	}
	sb->pid = pid;
	sb->clk = clk;
	sb->phase = HP_MAKING;
	sb->fd[HF_PID] = fds[0];
	sb->fd[HF_IN] = fds[1];
	sb->fd[HF_OUT] = fds[2];
	sb->fd[HF_ERR] = fds[3];
	sb->fd[HF_ST] = fds[4];
	sb->code = fds[5];
	sb->fd[HF_CONN] = -1;
	for (int i = 0; i < HF_N; i++)
		sb->tag[i] = (struct hub_tag){sb, i};
	for (int i = HF_ST; i <= HF_IN; i++)
		if (i != HF_PID)
			nonblock(sb->fd[i]);
	sb->deadline_ms = clock_now_ms() + HUB_READY_MS;
	sb->next = hub.sbs;
	hub.sbs = sb;
	watch(sb, HF_ST, EPOLLIN);
}

/* The child's first word: 'R' ready, or why its sandbox failed ("I...",
 * kept for the run it is given: cubicled answers 503 with it). */
static void sb_ready(struct hub_sb *sb)
{
	char first;
	ssize_t r = read(sb->fd[HF_ST], &first, 1);
	if (r < 0 && (errno == EAGAIN || errno == EINTR))
		return;
	if (r != 1) {
		hlog("%s: a sandbox did not get ready", hub.name);
		let_go(sb, false);
		return;
	}
#ifdef ZYGOTE_TRACE
	sb->tr_t0 = clock_now_us();
#endif
	TR(sb, "m.ready");
	if (first == 'R') {
		setpriority(PRIO_PROCESS, (id_t)sb->pid, 0); /* made at nice 10 */
	} else {
		sb->status[sb->nstatus++] = first;
		watch(sb, HF_ST, 0); /* the rest of its reason is read in the run */
	}
	sb->phase = HP_READY;
	sb->ready_seq = ++hub.seq;
	hub.nready++;
	ctl_watch();
}

/* Runs that came on CTL_FD, one to each ready sandbox, oldest first. */
static void ctl_read(void)
{
	while (hub.nready > 0) {
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
		ssize_t r = recvmsg(CTL_FD, &mh, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
		if (r < 0 && (errno == EAGAIN || errno == EINTR))
			return;
		if (r <= 0)
			_exit(0); /* cubicled is gone */
		struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
		if (!c || c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
			continue;
		int conn;
		memcpy(&conn, CMSG_DATA(c), sizeof conn);
		struct hub_sb *sb = NULL;
		for (struct hub_sb *s = hub.sbs; s; s = s->next)
			if (s->phase == HP_READY && (!sb || s->ready_seq < sb->ready_seq))
				sb = s;
		if (!sb) { /* cannot be: nready counts the ready ones */
			close(conn);
			hub.nready = 0;
			ctl_watch();
			return;
		}
		hub.nready--;
		ctl_watch();
		watch(sb, HF_ST, 0); /* until the code runs (a death then is the run's) */
		sb->fd[HF_CONN] = conn;
#ifdef ZYGOTE_TRACE
		sb->tr_t0 = clock_now_us();
#endif
		TR(sb, "m.got");
		nonblock(conn);
		sb->phase = HP_REQ;
		sb->deadline_ms = clock_now_ms() + HUB_REQ_MS;
		watch(sb, HF_CONN, EPOLLIN);
		req_read(sb);
	}
}

/* HUB_NEW and HUB_EXIT from the zygote. */
static void zygote_read(void)
{
	for (;;) {
		struct hub_msg m;
		struct iovec iov = {&m, sizeof m};
		union {
			struct cmsghdr h;
			char buf[CMSG_SPACE(sizeof(int) * HUB_NEW_FDS)];
		} cm;
		struct msghdr mh = {.msg_iov = &iov,
				    .msg_iovlen = 1,
				    .msg_control = cm.buf,
				    .msg_controllen = sizeof cm.buf};
		ssize_t r = recvmsg(hub.zfd, &mh, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
		if (r < 0 && (errno == EAGAIN || errno == EINTR))
			return;
		if (r <= 0) {
			hlog("%s: the zygote is gone", hub.name);
			_exit(1);
		}
		int fds[HUB_NEW_FDS], nfds = 0;
		for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c))
			if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
				int k = (int)((c->cmsg_len - CMSG_LEN(0)) / sizeof(int));
				for (int i = 0; i < k; i++) {
					int fd;
					memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof fd);
					if (nfds < HUB_NEW_FDS)
						fds[nfds++] = fd;
					else
						close(fd);
				}
			}
		if (r == (ssize_t)sizeof m && m.type == HUB_NEW && nfds == HUB_NEW_FDS) {
			sb_new(m.pid, fds);
			continue;
		}
		for (int i = 0; i < nfds; i++)
			close(fds[i]);
		struct hub_sb *sb =
		    r == (ssize_t)sizeof m && m.type == HUB_EXIT ? sb_find(m.pid) : NULL;
		if (!sb || sb->reaped)
			continue;
		sb->reaped = true;
		sb->wstatus = m.status;
		sb->cpu_us = m.cpu_us;
		sb->maxrss_kb = m.maxrss_kb;
		if (sb->phase == HP_REAP)
			finish_late(sb);
	}
}

static void sb_event(struct hub_sb *sb, int which, uint32_t events)
{
	if (sb->fd[which] < 0 || sb->phase == HP_GONE)
		return;
	switch (sb->phase) {
	case HP_MAKING:
		sb_ready(sb);
		return;
	case HP_READY: /* only an 'R' sandbox's verdict pipe: it died waiting */
		let_go(sb, false);
		return;
	case HP_REQ:
		req_read(sb);
		return;
	case HP_ANSWER:
		answer_write(sb);
		return;
	case HP_RUN:
		break;
	default:
		return;
	}
	if (which == HF_OUT || which == HF_ERR)
		run_output(sb, which);
	else if (which == HF_ST)
		run_status(sb);
	else if (which == HF_PID) {
		sb->exited = true;
		watch(sb, HF_PID, 0);
	} else if (which == HF_IN)
		run_stdin(sb);
	(void)events;
	run_check(sb);
}

void hub_serve(const char *name, int zfd)
{
	hub.name = name;
	hub.zfd = zfd;
	signal(SIGPIPE, SIG_IGN);
	/* Seven descriptors a sandbox, for the pool and every run in flight. */
	struct rlimit nofile;
	if (getrlimit(RLIMIT_NOFILE, &nofile) == 0 && nofile.rlim_cur < nofile.rlim_max) {
		nofile.rlim_cur = nofile.rlim_max;
		setrlimit(RLIMIT_NOFILE, &nofile);
	}
	/* No PR_SET_PDEATHSIG: its "parent" is the thread that forked, and
	 * cubicled restarts a supervisor from a request's thread, which ends
	 * with the request. cubicled's death closes fd 3 (EPOLLHUP below). */
	hub.ep = epoll_create1(EPOLL_CLOEXEC);
	struct epoll_event ev = {.events = EPOLLIN, .data.ptr = &hub_z_tag};
	if (hub.ep < 0 || epoll_ctl(hub.ep, EPOLL_CTL_ADD, zfd, &ev) < 0) {
		hlog("%s: epoll: %s", name, strerror(errno));
		_exit(1);
	}
	ev = (struct epoll_event){.events = 0, .data.ptr = &hub_ctl_tag};
	if (epoll_ctl(hub.ep, EPOLL_CTL_ADD, CTL_FD, &ev) < 0) {
		hlog("%s: no control socket: %s", name, strerror(errno));
		_exit(1);
	}
	for (;;) {
		/* Deadlines and limits; how long the loop may sleep. */
		int64_t now = clock_now_ms();
		int timeout = -1;
		for (struct hub_sb *sb = hub.sbs; sb; sb = sb->next) {
			int t = -1;
			if (sb->phase == HP_MAKING || sb->phase == HP_REQ) {
				if (now >= sb->deadline_ms) {
					if (sb->phase == HP_MAKING) {
						hlog("%s: a sandbox did not get ready", name);
						let_go(sb, false);
					} else {
						refuse(sb, "a malformed run request");
					}
					continue;
				}
				t = (int)(sb->deadline_ms - now);
			} else if (sb->phase == HP_RUN) {
				t = run_limits(sb, now);
			}
			if (t >= 0 && (timeout < 0 || t < timeout))
				timeout = t;
		}
		/* Sandboxes let go of and reaped are done with. */
		for (struct hub_sb **p = &hub.sbs; *p;) {
			struct hub_sb *sb = *p;
			if (sb->phase == HP_GONE && sb->reaped) {
				*p = sb->next;
				free(sb);
			} else {
				p = &sb->next;
			}
		}
		struct epoll_event evs[64];
		int n = epoll_wait(hub.ep, evs, 64, timeout);
		if (n < 0 && errno != EINTR) {
			hlog("%s: epoll_wait: %s", name, strerror(errno));
			_exit(1);
		}
		for (int i = 0; i < n; i++) {
			struct hub_tag *t = evs[i].data.ptr;
			if (t == &hub_ctl_tag) {
				if (evs[i].events & (EPOLLHUP | EPOLLERR))
					_exit(0); /* cubicled closed the control socket */
				ctl_read();
			} else if (t == &hub_z_tag) {
				zygote_read();
			} else {
				sb_event(t->sb, t->which, evs[i].events);
			}
		}
	}
}
