/*
 * runner: the code runner's supervisors and runs, from cubicled's side
 * (runner.h says what it promises).
 */
#include "runner.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/time.h>
#include <sys/wait.h>

#include "params.h"
#include "runproto.h"
#include "store-runs.h"
#include "utf8.h"
#include "clock.h"
#include "metrics.h"

enum { LANG_PYTHON, LANG_JS, LANG_N };

static const char *const lang_names[] = {"python", "javascript", NULL};
static const char *const lang_bins[] = {"cubicle-pyrun", "cubicle-jsrun"};
static const char *const error_names[] = {
    [RUN_EXCEPTION] = "exception",	 [RUN_CPU_LIMIT] = "cpu_limit",
    [RUN_MEMORY_LIMIT] = "memory_limit", [RUN_TIMEOUT] = "timeout",
    [RUN_OUTPUT_LIMIT] = "output_limit",
};

struct supervisor {
	pthread_mutex_t lock;
	pid_t pid;
	int ctl; /* our end of the control socket, -1 when not running */
	char path[4096];
	/* JavaScript: runs in flight on the one stream, by id */
	pthread_mutex_t wlock; /* one frame written at a time */
	pthread_cond_t answered;
	struct js_pending *pending;
	uint32_t next_id;
	unsigned gen;
	int readers; /* js_read threads alive */
};

struct runner {
	struct runner_config c;
	char node[4096]; /* the node binary, found on $PATH */
	struct supervisor sup[LANG_N];
	pthread_mutex_t lock; /* the slots and the counters */
	pthread_cond_t slot;
	int running;
	/* /metrics: lock-free (wire/metrics.h), the same buckets as every
	 * latency of cubicled's; runs are the histogram's count. */
	_Atomic uint64_t errors[LANG_N][RUN_INTERNAL + 1];
	struct metrics_hist hist[LANG_N];
};

struct js_pending {
	struct js_pending *next;
	uint32_t id;
	unsigned gen;
	bool done, failed;
	struct run_resp *resp;
	char **bufs;
};

struct js_reader {
	struct runner *r;
	struct supervisor *s;
	int fd;
	unsigned gen;
};

static int io_all(int fd, void *p, size_t n, bool wr);

/* Reads the JavaScript supervisor's answers and hands each to its run;
 * when the stream ends, every run still waiting on it fails. */
static void *js_read(void *arg)
{
	struct js_reader *jr = arg;
	struct supervisor *s = jr->s;
	for (;;) {
		uint32_t id;
		struct run_resp resp;
		if (io_all(jr->fd, &id, sizeof id, false) < 0 ||
		    io_all(jr->fd, &resp, sizeof resp, false) < 0 || resp.magic != RUN_RESP_MAGIC ||
		    resp.stdout_len > jr->r->c.out_max || resp.stderr_len > jr->r->c.out_max ||
		    resp.msg_len > RUN_MSG_MAX)
			break;
		uint32_t lens[3] = {resp.stdout_len, resp.stderr_len, resp.msg_len};
		char *bufs[3] = {NULL, NULL, NULL};
		bool ok = true;
		for (int i = 0; i < 3 && ok; i++) {
			bufs[i] = malloc(lens[i] + 1);
			ok = bufs[i] && io_all(jr->fd, bufs[i], lens[i], false) == 0;
			if (bufs[i])
				bufs[i][lens[i]] = 0;
		}
		if (!ok) {
			for (int i = 0; i < 3; i++)
				free(bufs[i]);
			break;
		}
		pthread_mutex_lock(&s->lock);
		struct js_pending *p = s->pending;
		while (p && !(p->id == id && p->gen == jr->gen))
			p = p->next;
		if (p && !p->done) {
			*p->resp = resp;
			for (int i = 0; i < 3; i++)
				p->bufs[i] = bufs[i], bufs[i] = NULL;
			p->done = true;
			pthread_cond_broadcast(&s->answered);
		}
		pthread_mutex_unlock(&s->lock);
		for (int i = 0; i < 3; i++)
			free(bufs[i]);
	}
	pthread_mutex_lock(&s->lock);
	for (struct js_pending *p = s->pending; p; p = p->next)
		if (p->gen == jr->gen && !p->done)
			p->done = p->failed = true;
	pthread_cond_broadcast(&s->answered);
	if (s->ctl == jr->fd)
		s->ctl = -1; /* the next run starts it again */
	close(jr->fd);
	s->readers--;
	pthread_cond_broadcast(&s->answered);
	pthread_mutex_unlock(&s->lock);
	free(jr);
	return NULL;
}

/* Starts the language's supervisor; sup->lock held. */
static int sup_start(struct runner *r, int lang, struct err *e)
{
	struct supervisor *s = &r->sup[lang];
	if (s->ctl >= 0) {
		if (lang == LANG_JS)
			shutdown(s->ctl, SHUT_RDWR); /* its reader closes it */
		else
			close(s->ctl);
		s->ctl = -1;
	}
	if (s->pid > 0) {
		kill(s->pid, SIGKILL);
		waitpid(s->pid, NULL, 0);
		s->pid = 0;
	}
	if (access(s->path, X_OK) < 0)
		return err_set(e, ERR_UNAVAILABLE, "%s is not available here: %s missing (%s)",
			       lang_names[lang], s->path, strerror(errno));
	int sv[2];
	/* Python: one message per run, carrying the run's connection. JavaScript
	 * (Node cannot take descriptors): one stream, runs multiplexed by id. */
	if (socketpair(AF_UNIX, (lang == LANG_JS ? SOCK_STREAM : SOCK_SEQPACKET) | SOCK_CLOEXEC, 0,
		       sv) < 0)
		return err_set(e, ERR_UNAVAILABLE, "socketpair: %s", strerror(errno));
	char uid[24], gid[24], pool[24], mem[48];
	snprintf(uid, sizeof uid, "--uid=%u", (unsigned)r->c.uid);
	snprintf(gid, sizeof gid, "--gid=%u", (unsigned)r->c.gid);
	snprintf(pool, sizeof pool, "--pool=%d", r->c.pool);
	snprintf(mem, sizeof mem, "CUBICLE_RUN_MEM_MB=%d", r->c.mem_mb);
	char node[4200], script[4200];
	snprintf(node, sizeof node, "--node=%s", r->node);
	snprintf(script, sizeof script, "--script=%s/../runner-js/jsrun.mjs", r->c.bin_dir);
	char *const pyargv[] = {(char *)lang_bins[lang], uid, gid, pool, NULL};
	char *const jsargv[] = {(char *)lang_bins[lang], uid, gid, node, script, NULL};
	char *const *argv = lang == LANG_JS ? jsargv : pyargv;
	char *const envp[] = {mem, "PATH=/usr/bin:/bin", "LANG=C.UTF-8", NULL};
	pid_t pid = fork();
	if (pid == 0) {
		/* Nothing of cubicled's but the control socket and its log. */
		int devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);
		int ctl = fcntl(sv[1], F_DUPFD, 10);
		if (devnull < 0 || ctl < 0 || dup2(devnull, 0) < 0 || dup2(2, 1) < 0 ||
		    dup2(ctl, 3) < 0)
			_exit(127);
		close_range(4, ~0U, 0);
		sigset_t none;
		sigemptyset(&none);
		sigprocmask(SIG_SETMASK, &none, NULL);
		signal(SIGPIPE, SIG_DFL);
		execve(s->path, argv, envp);
		_exit(127);
	}
	close(sv[1]);
	if (pid < 0) {
		close(sv[0]);
		return err_set(e, ERR_UNAVAILABLE, "cannot start %s: %s", lang_bins[lang],
			       strerror(errno));
	}
	s->pid = pid;
	s->ctl = sv[0];
	if (lang == LANG_JS) {
		struct js_reader *jr = malloc(sizeof *jr);
		pthread_t t;
		if (jr) {
			*jr = (struct js_reader){r, s, sv[0], ++s->gen};
			if (pthread_create(&t, NULL, js_read, jr) == 0) {
				pthread_detach(t);
				s->readers++;
			} else {
				free(jr), shutdown(sv[0], SHUT_RDWR);
			}
		}
	}
	return 0;
}

struct runner *runner_open(const struct runner_config *c, struct err *e)
{
	struct runner *r = calloc(1, sizeof *r);
	if (!r) {
		err_set(e, ERR_INTERNAL, "out of memory");
		return NULL;
	}
	r->c = *c;
	if (!r->c.uid)
		r->c.uid = 65534;
	if (!r->c.gid)
		r->c.gid = 65534;
	if (r->c.pool <= 0)
		r->c.pool = 8;
	if (r->c.cpu_ms <= 0)
		r->c.cpu_ms = 100;
	if (r->c.wall_ms <= 0)
		r->c.wall_ms = 30000;
	if (r->c.mem_mb <= 0)
		r->c.mem_mb = 128;
	if (!r->c.out_max)
		r->c.out_max = 1u << 20;
	if (!r->c.code_max || r->c.code_max > RUN_CODE_MAX)
		r->c.code_max = RUN_CODE_MAX;
	if (r->c.max_concurrent <= 0)
		r->c.max_concurrent = 32;
	pthread_mutex_init(&r->lock, NULL);
	pthread_cond_init(&r->slot, NULL);
	const char *path = getenv("PATH");
	snprintf(r->node, sizeof r->node, "/usr/bin/node");
	for (const char *p = path; p && *p;) {
		const char *colon = strchr(p, ':');
		size_t n = colon ? (size_t)(colon - p) : strlen(p);
		char cand[4096];
		snprintf(cand, sizeof cand, "%.*s/node", (int)n, p);
		if (n && access(cand, X_OK) == 0) {
			snprintf(r->node, sizeof r->node, "%s", cand);
			break;
		}
		p += n + (colon ? 1 : 0);
	}
	for (int i = 0; i < LANG_N; i++) {
		struct supervisor *s = &r->sup[i];
		pthread_mutex_init(&s->lock, NULL);
		pthread_mutex_init(&s->wlock, NULL);
		pthread_cond_init(&s->answered, NULL);
		s->ctl = -1;
		snprintf(s->path, sizeof s->path, "%s/%s", c->bin_dir ? c->bin_dir : ".",
			 lang_bins[i]);

		struct err se = {0};
		pthread_mutex_lock(&s->lock);
		if (sup_start(r, i, &se) < 0)
			fprintf(stderr, "cubicled: run: %s\n", se.message);
		pthread_mutex_unlock(&s->lock);
	}
	return r;
}

void runner_close(struct runner *r)
{
	if (!r)
		return;
	for (int i = 0; i < LANG_N; i++) {
		struct supervisor *s = &r->sup[i];
		pthread_mutex_lock(&s->lock);
		if (s->ctl >= 0 && i == LANG_JS)
			shutdown(s->ctl, SHUT_RDWR); /* its reader closes it */
		else if (s->ctl >= 0)
			close(s->ctl); /* the supervisor exits when it sees this */
		s->ctl = -1;
		if (s->pid > 0) {
			kill(s->pid, SIGKILL);
			waitpid(s->pid, NULL, 0);
		}
		while (s->readers > 0)
			pthread_cond_wait(&s->answered, &s->lock);
		pthread_mutex_unlock(&s->lock);
		pthread_mutex_destroy(&s->lock);
		pthread_mutex_destroy(&s->wlock);
		pthread_cond_destroy(&s->answered);
	}
	pthread_cond_destroy(&r->slot);
	pthread_mutex_destroy(&r->lock);
	free(r);
}

/* Hands `fd` to the language's supervisor, starting it if it is not
 * running or died. */
static int sup_send(struct runner *r, int lang, int fd, struct err *e)
{
	struct supervisor *s = &r->sup[lang];
	pthread_mutex_lock(&s->lock);
	int rc = -1;
	for (int attempt = 0; attempt < 2; attempt++) {
		if (s->ctl < 0 && sup_start(r, lang, e) < 0)
			break;
		char byte = 'r';
		struct iovec iov = {&byte, 1};
		union {
			struct cmsghdr h;
			char buf[CMSG_SPACE(sizeof(int))];
		} cm;
		memset(&cm, 0, sizeof cm);
		struct msghdr mh = {.msg_iov = &iov,
				    .msg_iovlen = 1,
				    .msg_control = cm.buf,
				    .msg_controllen = sizeof cm.buf};
		struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN(sizeof(int));
		memcpy(CMSG_DATA(c), &fd, sizeof fd);
		if (sendmsg(s->ctl, &mh, MSG_NOSIGNAL) == 1) {
			rc = 0;
			break;
		}
		fprintf(stderr, "cubicled: run: %s supervisor gone (%s); starting it again\n",
			lang_names[lang], strerror(errno));
		close(s->ctl);
		s->ctl = -1;
		err_set(e, ERR_UNAVAILABLE, "the %s sandbox is not available", lang_names[lang]);
	}
	pthread_mutex_unlock(&s->lock);
	return rc;
}

/* One run on the JavaScript supervisor's stream. */
static int js_run(struct runner *r, const struct run_req *req, const char *code, const char *in,
		  struct run_resp *resp, char **bufs, struct err *e)
{
	struct supervisor *s = &r->sup[LANG_JS];
	struct js_pending p = {.resp = resp, .bufs = bufs};
	pthread_mutex_lock(&s->lock);
	int fd = s->ctl;
	if (fd < 0 && sup_start(r, LANG_JS, e) == 0)
		fd = s->ctl;
	if (fd < 0) {
		pthread_mutex_unlock(&s->lock);
		return -1;
	}
	p.id = ++s->next_id;
	p.gen = s->gen;
	p.next = s->pending;
	s->pending = &p;
	pthread_mutex_unlock(&s->lock);

	pthread_mutex_lock(&s->wlock);
	bool sent = io_all(fd, &p.id, sizeof p.id, true) == 0 &&
		    io_all(fd, (void *)req, sizeof *req, true) == 0 &&
		    io_all(fd, (void *)code, req->code_len, true) == 0 &&
		    io_all(fd, (void *)in, req->stdin_len, true) == 0;
	pthread_mutex_unlock(&s->wlock);

	struct timespec dl;
	clock_gettime(CLOCK_REALTIME, &dl);
	dl.tv_sec += req->wall_ms / 1000 + 60;
	pthread_mutex_lock(&s->lock);
	if (!sent) {
		p.failed = true;
		if (s->ctl == fd)
			shutdown(fd, SHUT_RDWR);
	}
	bool timed_out = false;
	while (!p.done && !p.failed)
		if (pthread_cond_timedwait(&s->answered, &s->lock, &dl) != 0)
			p.failed = timed_out = true;
	struct js_pending **pp = &s->pending;
	while (*pp != &p)
		pp = &(*pp)->next;
	*pp = p.next;
	pthread_mutex_unlock(&s->lock);
	if (p.failed)
		err_set(e, ERR_UNAVAILABLE,
			"the javascript sandbox failed before it answered; try again");
	/* -2: the stream ended under the run (Node died): worth one more try */
	return p.failed ? (timed_out ? -1 : -2) : 0;
}

/* Whether the language's supervisor exited (then the next run starts it). */
static bool sup_died(struct runner *r, int lang)
{
	struct supervisor *s = &r->sup[lang];
	pthread_mutex_lock(&s->lock);
	bool died = s->pid > 0 && waitpid(s->pid, NULL, WNOHANG) == s->pid;
	if (died) {
		fprintf(stderr, "cubicled: run: the %s supervisor exited; starting it again\n",
			lang_names[lang]);
		s->pid = 0;
		if (s->ctl >= 0 && lang == LANG_JS)
			shutdown(s->ctl, SHUT_RDWR); /* its reader closes it */
		else if (s->ctl >= 0)
			close(s->ctl);
		s->ctl = -1;
	}
	pthread_mutex_unlock(&s->lock);
	return died;
}

static int io_all(int fd, void *p, size_t n, bool wr)
{
	char *c = p;
	while (n) {
		ssize_t k = wr ? send(fd, c, n, MSG_NOSIGNAL) : read(fd, c, n);
		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			return -1;
		c += k;
		n -= (size_t)k;
	}
	return 0;
}

/* Bytes as a JSON string: invalid UTF-8 becomes U+FFFD. */
static json_t *text(const char *p, size_t n)
{
	char *buf = malloc(n * 3 + 1);
	if (!buf)
		return NULL;
	size_t o = 0;
	for (size_t i = 0; i < n;) {
		unsigned long cp;
		size_t k = utf8_decode(p + i, n - i, &cp);
		if (k == 0) {
			memcpy(buf + o, "\xef\xbf\xbd", 3);
			o += 3;
			i++;
		} else {
			memcpy(buf + o, p + i, k);
			o += k;
			i += k;
		}
	}
	json_t *j = json_stringn(buf, o);
	free(buf);
	return j;
}

static void count(struct runner *r, int lang, uint32_t error, int64_t us)
{
	if (error <= RUN_INTERNAL)
		metrics_add(&r->errors[lang][error], 1);
	metrics_observe(&r->hist[lang], us);
}

static int slot_take(struct runner *r, struct err *e)
{
	struct timespec dl;
	clock_gettime(CLOCK_REALTIME, &dl);
	dl.tv_sec +=
	    r->c.wall_ms / 1000 + 60; /* a queue, not a refusal: only a stuck runner says no */
	pthread_mutex_lock(&r->lock);
	int rc = 0;
	while (r->running >= r->c.max_concurrent && rc == 0)
		rc = pthread_cond_timedwait(&r->slot, &r->lock, &dl);
	if (rc == 0)
		r->running++;
	pthread_mutex_unlock(&r->lock);
	return rc == 0 ? 0
		       : err_set(e, ERR_UNAVAILABLE,
				 "every code runner slot stayed busy (%d runs at once); try again",
				 r->c.max_concurrent);
}

static void slot_give(struct runner *r)
{
	pthread_mutex_lock(&r->lock);
	r->running--;
	pthread_cond_signal(&r->slot);
	pthread_mutex_unlock(&r->lock);
}

/* One run on the supervisor; the answer's parts are malloc'd into *bufs. */
static int run_once(struct runner *r, int lang, const char *code, size_t code_len, const char *in,
		    size_t in_len, struct run_resp *resp, char **bufs, struct err *e)
{
	struct run_req req = {
	    .magic = RUN_REQ_MAGIC,
	    .code_len = (uint32_t)code_len,
	    .stdin_len = (uint32_t)in_len,
	    .cpu_ms = (uint32_t)r->c.cpu_ms,
	    .wall_ms = (uint32_t)r->c.wall_ms,
	    .mem_mb = (uint32_t)r->c.mem_mb,
	    .out_max = (uint32_t)r->c.out_max,
	};
	if (lang == LANG_JS)
		return js_run(r, &req, code, in, resp, bufs, e);
	int sv[2];
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0)
		return err_set(e, ERR_UNAVAILABLE, "socketpair: %s", strerror(errno));
	int rc = sup_send(r, lang, sv[1], e);
	close(sv[1]);
	if (rc < 0) {
		close(sv[0]);
		return -1;
	}
	/* The hub answers within the wall limit (it kills the run then),
	 * once a ready sandbox took the run (under a burst it may wait). */
	struct timeval tv = {r->c.wall_ms / 1000 + 60, 0};
	setsockopt(sv[0], SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
	rc = -1;
	if (io_all(sv[0], &req, sizeof req, true) == 0 &&
	    io_all(sv[0], (void *)code, code_len, true) == 0 &&
	    io_all(sv[0], (void *)in, in_len, true) == 0 &&
	    io_all(sv[0], resp, sizeof *resp, false) == 0 && resp->magic == RUN_RESP_MAGIC &&
	    resp->stdout_len <= r->c.out_max && resp->stderr_len <= r->c.out_max &&
	    resp->msg_len <= RUN_MSG_MAX) {
		uint32_t lens[3] = {resp->stdout_len, resp->stderr_len, resp->msg_len};
		rc = 0;
		for (int i = 0; i < 3 && rc == 0; i++) {
			bufs[i] = malloc(lens[i] + 1);
			rc = bufs[i] && io_all(sv[0], bufs[i], lens[i], false) == 0 ? 0 : -1;
			if (bufs[i])
				bufs[i][lens[i]] = 0;
		}
	}
	close(sv[0]);
	if (rc < 0)
		return err_set(e, ERR_UNAVAILABLE,
			       "the %s sandbox failed before it answered; try again",
			       lang_names[lang]);
	return 0;
}

int runner_run(struct runner *r, const char *ws, const json_t *body, json_t **out, struct err *e)
{
	static const char *const known[] = {"language", "code", "stdin", NULL};
	const char *code = NULL, *in = "";
	int lang = -1;
	if (!r)
		return err_set(e, ERR_UNAVAILABLE, "this cubicled runs no code (no runner)");
	if (params_check_known(body, known, e) < 0)
		return -1;
	int has = param_enum(body, "language", lang_names, &lang, e);
	if (has < 0)
		return -1;
	if (has == 0)
		return err_param(e, "language", "language: required, \"python\" or \"javascript\"");
	if (param_need_str(body, "code", &code, e) < 0 || param_str(body, "stdin", &in, e) < 0)
		return -1;
	size_t code_len = json_string_length(json_object_get(body, "code"));
	json_t *jin = json_object_get(body, "stdin");
	size_t in_len = json_is_string(jin) ? json_string_length(jin) : 0;
	if (code_len > r->c.code_max) {
		return err_set_param(e, ERR_TOO_LARGE, "code", "code: %zu bytes; at most %zu",
				     code_len, r->c.code_max);
	}
	if (in_len > RUN_STDIN_MAX) {
		return err_set_param(e, ERR_TOO_LARGE, "stdin", "stdin: %zu bytes; at most %u",
				     in_len, RUN_STDIN_MAX);
	}
	if (slot_take(r, e) < 0)
		return -1;
	int64_t t0 = clock_now_us();
	struct run_resp resp = {0};
	char *bufs[3] = {NULL, NULL, NULL};
	int rc = run_once(r, lang, code, code_len, in, in_len, &resp, bufs, e);
	if (rc == -2 ||
	    (rc < 0 && sup_died(r, lang))) { /* its run died with it: once more, on a new one */
		for (int i = 0; i < 3; i++)
			free(bufs[i]), bufs[i] = NULL;
		rc = run_once(r, lang, code, code_len, in, in_len, &resp, bufs, e);
	}
	slot_give(r);
	if (rc == 0 && resp.error == RUN_INTERNAL) {
		err_set(e, ERR_UNAVAILABLE, "the %s sandbox could not be made: %.300s",
			lang_names[lang], bufs[2]);
		rc = -1;
	}
	count(r, lang, rc < 0 ? RUN_INTERNAL : resp.error, clock_now_us() - t0);
	if (rc == 0) {
		*out = json_pack("{s:s, s:o, s:o, s:i, s:i, s:i, s:i}", "language",
				 lang_names[lang], "stdout", text(bufs[0], resp.stdout_len),
				 "stderr", text(bufs[1], resp.stderr_len), "exit_code",
				 (int)resp.exit_code, "cpu_ms", (int)resp.cpu_ms, "wall_ms",
				 (int)resp.wall_ms, "memory_kb", (int)resp.memory_kb);
		if (*out && resp.error != RUN_OK && resp.error < RUN_INTERNAL)
			json_object_set_new(*out, "error",
					    json_pack("{s:s, s:o}", "type", error_names[resp.error],
						      "message", text(bufs[2], resp.msg_len)));
		if (*out && resp.truncated)
			json_object_set_new(*out, "truncated", json_true());
		if (!*out)
			rc = err_set(e, ERR_INTERNAL, "out of memory");
	}
	for (int i = 0; i < 3; i++)
		free(bufs[i]);
	if (rc == 0 && r->c.store && ws) {
		struct err se = {0};
		if (store_runs_add(r->c.store, ws, lang_names[lang], (int64_t)time(NULL) * 1000,
				   resp.error != RUN_OK, &se) < 0)
			fprintf(stderr, "cubicled: run: %s\n", se.message);
	}
	return rc;
}

char *runner_metrics(struct runner *r)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);
	if (!f)
		return NULL;
	metrics_head(f, "cubicle_runs_total", "counter", "Code runs (POST /v1/run, run_code).");
	for (int l = 0; l < LANG_N; l++)
		fprintf(f, "cubicle_runs_total{language=\"%s\"} %llu\n", lang_names[l],
			(unsigned long long)metrics_count(&r->hist[l]));
	metrics_head(f, "cubicle_run_errors_total", "counter",
		     "Code runs that ended in an error, by type (unavailable: no sandbox could "
		     "be made).");
	for (int l = 0; l < LANG_N; l++)
		for (int t = RUN_EXCEPTION; t <= RUN_INTERNAL; t++)
			fprintf(f, "cubicle_run_errors_total{language=\"%s\",type=\"%s\"} %llu\n",
				lang_names[l], t == RUN_INTERNAL ? "unavailable" : error_names[t],
				(unsigned long long)metrics_get(&r->errors[l][t]));
	metrics_head(f, "cubicle_run_duration_seconds", "histogram",
		     "A run from request to answer, by language.");
	for (int l = 0; l < LANG_N; l++) {
		char labels[64];
		snprintf(labels, sizeof labels, "language=\"%s\"", lang_names[l]);
		metrics_write_hist(f, "cubicle_run_duration_seconds", labels, &r->hist[l]);
	}
	fclose(f);
	return buf;
}
