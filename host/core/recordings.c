/*
 * recordings: a computer's screen recorded into a WebM file, with the track
 * of every action the API ran on it meanwhile.
 *
 * Where it runs: cubicled opens the computer's RFB socket itself, as a view
 * viewer (the gateway's mode line, then RFB), and hands it to a
 * cubicle-record process (host/record/record.c), which decodes, encodes
 * VP8 and writes the file; the host pays the CPU, and the same code records
 * a container, a microVM and a machine you bring (docs/architecture.md,
 * "Recordings", says why not in envd). The recorder is sandboxed by itself
 * before it reads the guest's first byte; what it says back (two status
 * lines) is parsed as untrusted.
 *
 * Files: sessions/<ws>/.recordings/<id>.webm and <id>.actions (one JSON
 * object a line), on the workspace's session disk, so recordings count
 * against the workspace's storage quota (--session-quota-mb) with its
 * session files, and the kernel enforces it. Guests never see them: a
 * computer mounts sessions/<ws>/<session>, never the disk's root.
 *
 * Life: start (201 once the first picture is in) → stop (by the API, the
 * computer stopping or going away, --recording-max-s, the size cap, the
 * quota) → kept or deleted with its computer. A kept one is deleted
 * --recording-keep-days after it stopped (the ticker's sweep, once a
 * minute). A watcher thread per recording waits for its recorder's end and
 * writes the row.
 *
 * Locks: rec_lock (struct core) guards the list of live recordings and each
 * one's descriptors; it is innermost, never held with c->lock, and held
 * across the small local write of one action line (core_recordings_note).
 */
#include "core-internal.h"
#include "clock.h"
#include "drvutil.h"
#include "ident.h"
#include "store-recordings.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

/* Free storage a recording needs to start. */
#define REC_START_FREE (8ull << 20)
/* The action track's cap; past it actions are counted, not written. */
#define REC_TRACK_MAX (16u << 20)
/* A string parameter longer than this is cut in the track. */
#define REC_PARAM_STR 256
/* How long the first picture may take (the recorder waits 10 s itself). */
#define REC_READY_MS 15000
/* How long a stop waits for the recorder to finish its file. */
#define REC_STOP_MS 15000
/* The gateway's line for a view viewer (host/api/stream.h says the same). */
#define REC_PREAMBLE "cubicle-viewer view\n"

struct core_rec {
	struct core_rec *next;
	struct store_recording row; /* id, computer, workspace, keep, started_ms */
	pid_t pid;
	int ctl;     /* the recorder's fd 5: closing it stops the recording */
	int status;  /* its stdout */
	int actions; /* the action track, appended */
	uint64_t track_bytes;
	int64_t t0_us;	 /* the video's time 0, CLOCK_MONOTONIC */
	bool live;	 /* started: actions are written; false while starting */
	bool stop_asked; /* a stop came while it started: it ends once started */
};

/* ---- paths --------------------------------------------------------------------- */

/* sessions/<ws>/.recordings on the workspace's session disk (mounted and
 * made when missing): an O_PATH descriptor, or -1 with e. */
static int rec_dir(struct core *c, const char *ws, struct err *e)
{
	if (ident_param("workspace", ws, 63, false, e) < 0)
		return -1;
	char dir[700];
	snprintf(dir, sizeof dir, "%s/sessions", c->cfg.state_dir);
	mkdir(dir, 0711);
	snprintf(dir, sizeof dir, "%s/sessions/%s", c->cfg.state_dir, ws);
	if (core_session_disk(c, ws, dir, e) < 0)
		return -1;
	snprintf(dir, sizeof dir, "%s/sessions/%s/.recordings", c->cfg.state_dir, ws);
	if (mkdir(dir, 0700) < 0 && errno != EEXIST)
		return err_set(e, ERR_INTERNAL, "cannot create %s: %s", dir, strerror(errno));
	int fd = open(dir, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return err_set(e, ERR_INTERNAL, "cannot open %s: %s", dir, strerror(errno));
	return fd;
}

static void rec_name(char *out, size_t len, const char *id, const char *ext)
{
	snprintf(out, len, "%s.%s", id, ext);
}

/* Removes a recording's files (the workspace's directory may be gone). */
static void rec_unlink(struct core *c, const struct store_recording *r)
{
	char path[900];
	static const char *const ext[] = {"webm", "actions"};
	for (int i = 0; i < 2; i++) {
		snprintf(path, sizeof path, "%s/sessions/%s/.recordings/%s.%s", c->cfg.state_dir,
			 r->workspace, r->id, ext[i]);
		if (unlink(path) < 0 && errno != ENOENT)
			fprintf(stderr, "cubicled: cannot remove %s: %s\n", path, strerror(errno));
	}
}

/* 507 when the workspace's storage cannot take a recording. */
static int rec_check_free(struct core *c, int dfd, struct err *e)
{
	struct statvfs sv;
	if (fstatvfs(dfd, &sv) < 0)
		return err_set(e, ERR_INTERNAL, "statvfs: %s", strerror(errno));
	uint64_t free_b = (uint64_t)sv.f_bavail * sv.f_frsize;
	if (free_b >= REC_START_FREE)
		return 0;
	if (c->cfg.session_quota)
		return err_set(e, ERR_NO_SPACE,
			       "the workspace's storage quota is full: %llu MiB free of %llu MiB "
			       "(cubicled --session-quota-mb; session files and recordings share "
			       "it), and a recording needs %llu MiB to start: delete recordings or "
			       "session files",
			       (unsigned long long)(free_b >> 20),
			       (unsigned long long)(c->cfg.session_quota >> 20),
			       (unsigned long long)(REC_START_FREE >> 20));
	return err_set(e, ERR_NO_SPACE,
		       "the host's disk has %llu MiB free; a recording needs %llu MiB to start",
		       (unsigned long long)(free_b >> 20),
		       (unsigned long long)(REC_START_FREE >> 20));
}

/* ---- the live list ------------------------------------------------------------- */

static struct core_rec *rec_find(struct core *c, const char *id)
{
	for (struct core_rec *r = c->recs; r; r = r->next)
		if (strcmp(r->row.id, id) == 0)
			return r;
	return NULL;
}

static void rec_unlist(struct core *c, struct core_rec *rec)
{
	for (struct core_rec **p = &c->recs; *p; p = &(*p)->next)
		if (*p == rec) {
			*p = rec->next;
			break;
		}
	__atomic_sub_fetch(&c->nrecs, 1, __ATOMIC_RELAXED);
	pthread_cond_broadcast(&c->rec_changed);
}

static void rec_close_fds(struct core_rec *rec)
{
	int *fds[] = {&rec->ctl, &rec->status, &rec->actions};
	for (int i = 0; i < 3; i++)
		if (*fds[i] >= 0) {
			close(*fds[i]);
			*fds[i] = -1;
		}
}

/* ---- the recorder's status lines (untrusted: bounded, strictly parsed) --------- */

/* Reads one line of at most len - 1 bytes from fd by deadline (a monotonic
 * ms, or 0 for none); 0, or -1 at EOF, on a timeout or an overlong line. */
static int rec_line(int fd, char *out, size_t len, int64_t deadline)
{
	size_t n = 0;
	for (;;) {
		int wait = -1;
		if (deadline) {
			int64_t left = deadline - clock_now_ms();
			if (left <= 0)
				return -1;
			wait = (int)left;
		}
		struct pollfd p = {fd, POLLIN, 0};
		int r = poll(&p, 1, wait);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return -1;
		char ch;
		ssize_t got = read(fd, &ch, 1);
		if (got < 0 && errno == EINTR)
			continue;
		if (got != 1)
			return -1;
		if (ch == '\n')
			break;
		if (n + 1 >= len)
			return -1;
		out[n++] = ch;
	}
	out[n] = 0;
	return 0;
}

/* "done FRAMES BYTES DURATION_MS REASON MESSAGE" into the row. */
static void rec_parse_done(const char *line, struct store_recording *row)
{
	unsigned long long frames = 0, bytes = 0;
	long long duration = 0;
	char reason[32] = "";
	int used = 0;
	if (sscanf(line, "done %llu %llu %lld %31s %n", &frames, &bytes, &duration, reason, &used) <
	    4) {
		snprintf(row->reason, sizeof row->reason, "error");
		snprintf(row->error, sizeof row->error, "the recorder ended without saying why");
		return;
	}
	static const char *const known[] = {"stopped",	    "max_duration", "max_bytes",
					    "storage_full", "source_ended", "error"};
	bool ok = false;
	for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
		ok = ok || strcmp(reason, known[i]) == 0;
	snprintf(row->reason, sizeof row->reason, "%s", ok ? reason : "error");
	row->frames = frames;
	row->duration_ms = duration > 0 ? duration : 0;
	const char *msg = used > 0 ? line + used : "";
	if (strcmp(row->reason, "storage_full") == 0)
		snprintf(row->error, sizeof row->error,
			 "the workspace's storage quota is full (cubicled --session-quota-mb): "
			 "the recording ended there");
	else if (strcmp(row->reason, "error") == 0 || strcmp(row->reason, "max_bytes") == 0)
		snprintf(row->error, sizeof row->error, "%.250s", msg);
	for (char *p = row->error; *p; p++)
		if ((unsigned char)*p < 0x20 || (unsigned char)*p >= 0x7f)
			*p = '?';
	(void)bytes; /* the file's own size is what counts */
}

/* ---- the watcher: one thread per live recording ---------------------------------- */

static void *rec_watch(void *arg)
{
	struct core *c = ((void **)arg)[0];
	struct core_rec *rec = ((void **)arg)[1];
	free(arg);
	char line[400];
	bool said = rec_line(rec->status, line, sizeof line, 0) == 0;
	int st = 0;
	while (waitpid(rec->pid, &st, 0) < 0 && errno == EINTR)
		;
	struct store_recording row;
	pthread_mutex_lock(&c->rec_lock);
	row = rec->row;
	rec->live = false;
	rec->pid = 0; /* reaped: never signalled again */
	pthread_mutex_unlock(&c->rec_lock);
	if (said && strncmp(line, "done ", 5) == 0) {
		rec_parse_done(line, &row);
	} else {
		snprintf(row.reason, sizeof row.reason, "error");
		snprintf(row.error, sizeof row.error, "the recorder %s",
			 WIFSIGNALED(st) ? "was killed" : "ended without finishing the file");
	}
	int dfd = rec_dir(c, row.workspace, NULL);
	char name[80];
	rec_name(name, sizeof name, row.id, "webm");
	struct stat sb;
	if (dfd >= 0 && fstatat(dfd, name, &sb, AT_SYMLINK_NOFOLLOW) == 0)
		row.bytes = (uint64_t)sb.st_size;
	if (dfd >= 0)
		close(dfd);
	snprintf(row.state, sizeof row.state, "%s",
		 strcmp(row.reason, "error") == 0 && row.frames == 0 ? "failed" : "stopped");
	row.stopped_ms = clock_wall_ms();
	struct err e = {0};
	if (store_recording_update(c->store, &row, &e) < 0)
		fprintf(stderr, "cubicled: recording %s: %s\n", row.id, e.message);
	if (strcmp(row.reason, "stopped") != 0)
		fprintf(stderr, "cubicled: recording %s of %s ended: %s%s%s\n", row.id,
			row.computer, row.reason, row.error[0] ? ": " : "", row.error);
	pthread_mutex_lock(&c->rec_lock);
	rec_close_fds(rec);
	rec_unlist(c, rec);
	pthread_mutex_unlock(&c->rec_lock);
	free(rec);
	return NULL;
}

/* ---- start ---------------------------------------------------------------------- */

/* Connects to the computer's RFB socket as a view viewer. */
static int rec_connect(const char *path, struct err *e)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	if (strlen(path) >= sizeof sa.sun_path)
		return err_set(e, ERR_INTERNAL, "the RFB socket's path is too long");
	memcpy(sa.sun_path, path, strlen(path) + 1);
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0)
		return err_set(e, ERR_INTERNAL, "socket: %s", strerror(errno));
	if (connect(fd, (struct sockaddr *)&sa, sizeof sa) < 0 && errno != EINPROGRESS) {
		int err = errno;
		close(fd);
		return err_set(e, ERR_UNAVAILABLE,
			       "the computer's screen takes no viewer now (%s)%s", strerror(err),
			       err == EAGAIN ? ": a microVM's screen serves one viewer at a time"
					     : "");
	}
	struct pollfd p = {fd, POLLOUT, 0};
	int soerr = 0;
	socklen_t sl = sizeof soerr;
	if (poll(&p, 1, 5000) != 1 || getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) < 0 ||
	    soerr != 0 ||
	    send(fd, REC_PREAMBLE, strlen(REC_PREAMBLE), MSG_NOSIGNAL) !=
		(ssize_t)strlen(REC_PREAMBLE)) {
		close(fd);
		return err_set(e, ERR_UNAVAILABLE, "the computer's screen does not answer");
	}
	return fd;
}

/* Starts cubicle-record on the three descriptors; its pid, or -1 with e. */
static pid_t rec_spawn(struct core *c, int rfb, int out, int ctl_r, int status_w,
		       const char *encodings, struct err *e)
{
	char fps[16], maxs[24], maxb[32], uid[16];
	snprintf(fps, sizeof fps, "%d", c->cfg.record_fps);
	snprintf(maxs, sizeof maxs, "%d", c->cfg.record_max_s);
	snprintf(maxb, sizeof maxb, "%llu", (unsigned long long)c->cfg.record_max_bytes);
	snprintf(uid, sizeof uid, "%u", (unsigned)c->cfg.record_uid);
	char *const argv[] = {"cubicle-record",
			      "--fps",
			      fps,
			      "--max-seconds",
			      maxs,
			      "--max-bytes",
			      maxb,
			      "--encodings",
			      (char *)encodings,
			      "--uid",
			      uid,
			      "--gid",
			      uid,
			      NULL};
	pid_t pid = fork();
	if (pid < 0)
		return err_set(e, ERR_INTERNAL, "fork: %s", strerror(errno));
	if (pid == 0) {
		int devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);
		if (devnull < 0 || dup2(devnull, 0) < 0 || dup2(status_w, 1) < 0 ||
		    dup2(rfb, 10) < 0 || dup2(out, 11) < 0 || dup2(ctl_r, 12) < 0 ||
		    dup2(10, 3) < 0 || dup2(11, 4) < 0 || dup2(12, 5) < 0 ||
		    close_range(6, ~0u, 0) < 0)
			_exit(127);
		execve(c->cfg.recorder, argv, drv_child_env);
		_exit(127);
	}
	return pid;
}

/* The sanitized parameters of a start or stop body: {"keep"?}. */
static int rec_keep_param(const json_t *params, bool *keep, bool *given, struct err *e)
{
	*given = false;
	if (!params)
		return 0;
	const char *k;
	json_t *v;
	json_object_foreach((json_t *)params, k, v)
	{
		if (strcmp(k, "keep") != 0)
			return err_param(e, k, "%.60s: not a parameter here (keep)", k);
		if (!json_is_boolean(v))
			return err_param(e, "keep", "keep: expected true or false");
		*keep = json_is_true(v);
		*given = true;
	}
	return 0;
}

int core_recording_start(struct core *c, const char *id, const char *ws, const json_t *params,
			 json_t **out, struct err *e)
{
	char path[160];
	snprintf(path, sizeof path, "/v1/computers/%s/recordings", id);
	int where = core_forward_json(c, id, ws, "POST", path, params, 201, out, e);
	if (where <= 0)
		return where;
	bool keep = false, given;
	if (rec_keep_param(params, &keep, &given, e) < 0)
		return -1;
	if (!c->cfg.recorder || !c->cfg.recorder[0] || access(c->cfg.recorder, X_OK) < 0)
		return err_set(e, ERR_UNAVAILABLE,
			       "recordings are off: no cubicle-record beside "
			       "cubicled");
	/* The computer: running, with a screen, the caller's. */
	char vnc[320], cws[40], address[320];
	bool byo = false;
	pthread_mutex_lock(&c->lock);
	struct core_rt *rt = core_rt_find(c, id);
	int rc = 0;
	if (!rt || (ws && strcmp(rt->ws, ws) != 0))
		rc = err_set(e, ERR_NOT_FOUND, "no computer %.40s", id);
	else if (strcmp(rt->kind, "desktop") != 0)
		rc = err_set(e, ERR_CONFLICT,
			     "computer %s is a sandbox: it has no screen to record", id);
	else if (rt->state != COMPUTER_RUNNING || !rt->vnc[0])
		rc = err_set(e, ERR_CONFLICT,
			     "computer %s is %s, not running: only a running "
			     "desktop is recorded",
			     id, computer_state_name(rt->state));
	if (rc == 0) {
		snprintf(vnc, sizeof vnc, "%s", rt->vnc);
		snprintf(cws, sizeof cws, "%s", rt->ws);
		snprintf(address, sizeof address, "%s", rt->address);
		byo = rt->byo;
	}
	pthread_mutex_unlock(&c->lock);
	if (rc < 0)
		return -1;

	/* A place in the limits, held while it starts. */
	struct core_rec *rec = calloc(1, sizeof *rec);
	if (!rec)
		return err_set(e, ERR_INTERNAL, "out of memory");
	rec->ctl = rec->status = rec->actions = -1;
	struct store_recording *row = &rec->row;
	memcpy(row->id, "rec-", 4);
	if (ident_random_hex(row->id + 4, 8, e) < 0) {
		free(rec);
		return -1;
	}
	snprintf(row->computer, sizeof row->computer, "%s", id);
	snprintf(row->workspace, sizeof row->workspace, "%s", cws);
	snprintf(row->state, sizeof row->state, "recording");
	row->keep = keep;
	row->started_ms = clock_wall_ms();
	pthread_mutex_lock(&c->rec_lock);
	int here = 0;
	for (struct core_rec *r = c->recs; r; r = r->next)
		here += strcmp(r->row.computer, id) == 0;
	if (here >= c->cfg.record_per_computer)
		rc = err_set(e, ERR_LIMIT,
			     "computer %s has %d recording%s running, the most "
			     "--recordings-per-computer allows: stop one first",
			     id, here, here == 1 ? "" : "s");
	else if (c->nrecs >= c->cfg.record_per_host)
		rc = err_set(e, ERR_LIMIT,
			     "this host runs %d recordings, the most --max-recordings allows; "
			     "retry when one ends",
			     c->nrecs);
	if (rc == 0) {
		rec->next = c->recs;
		c->recs = rec;
		__atomic_add_fetch(&c->nrecs, 1, __ATOMIC_RELAXED);
	}
	pthread_mutex_unlock(&c->rec_lock);
	if (rc < 0) {
		free(rec);
		return -1;
	}

	int dfd = -1, rfb = -1, out_fd = -1, ctl[2] = {-1, -1}, st[2] = {-1, -1};
	pid_t pid = -1;
	char name[80], line[400] = "";
	bool inserted = false;
	if ((dfd = rec_dir(c, cws, e)) < 0 || rec_check_free(c, dfd, e) < 0)
		goto fail;
	rec_name(name, sizeof name, row->id, "webm");
	out_fd = openat(dfd, name, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	rec_name(name, sizeof name, row->id, "actions");
	rec->actions = openat(
	    dfd, name, O_WRONLY | O_APPEND | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (out_fd < 0 || rec->actions < 0) {
		err_set(e, errno == ENOSPC ? ERR_NO_SPACE : ERR_INTERNAL,
			"cannot create the recording's files: %s", strerror(errno));
		goto fail;
	}
	if (store_recording_insert(c->store, row, e) < 0)
		goto fail;
	inserted = true;
	if ((rfb = rec_connect(vnc, e)) < 0)
		goto fail;
	if (pipe2(ctl, O_CLOEXEC) < 0 || pipe2(st, O_CLOEXEC) < 0 ||
	    fcntl(ctl[1], F_SETFL, O_NONBLOCK) < 0) {
		err_set(e, ERR_INTERNAL, "pipe: %s", strerror(errno));
		goto fail;
	}
	/* A container's socket is local: raw pixels cost the least; a microVM's
	 * port and a machine you bring's link carry ZRLE. */
	bool local = !byo && strncmp(address, "unix:", 5) == 0;
	pid = rec_spawn(c, rfb, out_fd, ctl[0], st[1], local ? "raw copyrect" : "zrle copyrect raw",
			e);
	if (pid < 0)
		goto fail;
	close(ctl[0]), ctl[0] = -1;
	close(st[1]), st[1] = -1;
	close(rfb), rfb = -1;
	close(out_fd), out_fd = -1;
	pthread_mutex_lock(&c->rec_lock);
	rec->pid = pid; /* a stop that waits too long may kill it from here on */
	pthread_mutex_unlock(&c->rec_lock);
	long long t0_ns = 0;
	int w = 0, h = 0;
	if (rec_line(st[0], line, sizeof line, clock_now_ms() + REC_READY_MS) < 0 ||
	    sscanf(line, "ready %lld %d %d", &t0_ns, &w, &h) != 3 || t0_ns <= 0 || w < 1 || h < 1 ||
	    w > 4096 || h > 4096) {
		char why[320] = "";
		int used = 0;
		char reason[32];
		if (sscanf(line, "done %*u %*u %*d %31s %n", reason, &used) == 1 && used > 0) {
			snprintf(why, sizeof why, ": %.290s", line + used);
			for (char *q = why; *q; q++)
				if ((unsigned char)*q < 0x20 || (unsigned char)*q >= 0x7f)
					*q = '?';
		}
		err_set(e, ERR_UNAVAILABLE, "the recording could not start%s", why);
		pthread_mutex_lock(&c->rec_lock);
		rec->pid = 0; /* reaped below: never signalled again */
		pthread_mutex_unlock(&c->rec_lock);
		kill(pid, SIGKILL);
		while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
			;
		pid = -1;
		goto fail;
	}
	row->width = w;
	row->height = h;
	store_recording_update(c->store, row, NULL);
	*out = store_recording_json(row);
	fprintf(stderr, "cubicled: recording %s of %s started (%dx%d)\n", row->id, id, w, h);
	void **arg = malloc(2 * sizeof *arg);
	pthread_t t;
	pthread_attr_t attr;
	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	pthread_mutex_lock(&c->rec_lock);
	rec->t0_us = t0_ns / 1000;
	rec->live = true;
	rec->ctl = ctl[1], ctl[1] = -1; /* rec owns them now */
	rec->status = st[0], st[0] = -1;
	if (rec->stop_asked) { /* the computer stops, or a stop came: end at once */
		close(rec->ctl);
		rec->ctl = -1;
	}
	pthread_mutex_unlock(&c->rec_lock);
	if (!arg || (arg[0] = c, arg[1] = rec, pthread_create(&t, &attr, rec_watch, arg) != 0)) {
		free(arg);
		pthread_attr_destroy(&attr);
		err_set(e, ERR_INTERNAL, "cannot start the recording's watcher");
		json_decref(*out);
		*out = NULL;
		pthread_mutex_lock(&c->rec_lock);
		rec->pid = 0; /* reaped below: never signalled again */
		pthread_mutex_unlock(&c->rec_lock);
		kill(pid, SIGKILL);
		while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
			;
		pid = -1;
		goto fail;
	}
	pthread_attr_destroy(&attr);
	close(dfd);
	return 0; /* rec is the watcher's now */
fail:
	for (int i = 0; i < 2; i++) {
		if (ctl[i] >= 0)
			close(ctl[i]);
		if (st[i] >= 0)
			close(st[i]);
	}
	if (rfb >= 0)
		close(rfb);
	if (out_fd >= 0)
		close(out_fd);
	if (dfd >= 0)
		close(dfd);
	if (inserted)
		store_recording_delete(c->store, row->id, NULL);
	struct store_recording gone = *row;
	pthread_mutex_lock(&c->rec_lock);
	rec_close_fds(rec);
	rec_unlist(c, rec);
	pthread_mutex_unlock(&c->rec_lock);
	free(rec);
	rec_unlink(c, &gone);
	return -1;
}

/* ---- stop, list, get, delete ---------------------------------------------------------- */

/* The recording rid of computer id as ws may see it. */
static int rec_get(struct core *c, const char *id, const char *ws, const char *rid,
		   struct store_recording *row, struct err *e)
{
	if (!ident_ok(rid, 39))
		return err_set(e, ERR_NOT_FOUND, "no recording %.40s", rid);
	if (store_recording_get(c->store, rid, id, ws, row, e) < 0) {
		if (e && e->code == ERR_NOT_FOUND)
			err_set(e, ERR_NOT_FOUND, "no recording %.40s of computer %.40s", rid, id);
		return -1;
	}
	return 0;
}

/* Asks the live recording rid to end (lock held); true when it is live. */
static bool rec_ask_stop(struct core *c, const char *rid, bool keep)
{
	struct core_rec *rec = rec_find(c, rid);
	if (!rec)
		return false;
	rec->stop_asked = true;
	if (keep)
		rec->row.keep = true;
	if (rec->ctl >= 0) {
		close(rec->ctl);
		rec->ctl = -1;
	}
	return true;
}

/* Waits (lock held) until rid is no longer live; SIGKILL after REC_STOP_MS. */
static void rec_wait_gone(struct core *c, const char *rid)
{
	struct timespec until = clock_deadline(CLOCK_REALTIME, REC_STOP_MS);
	bool killed = false;
	struct core_rec *rec;
	while ((rec = rec_find(c, rid))) {
		if (pthread_cond_timedwait(&c->rec_changed, &c->rec_lock, &until) == ETIMEDOUT) {
			if (killed)
				break;
			if (rec->pid > 0)
				kill(rec->pid, SIGKILL);
			killed = true;
			until = clock_deadline(CLOCK_REALTIME, 5000);
		}
	}
}

int core_recording_stop(struct core *c, const char *id, const char *ws, const char *rid,
			const json_t *params, json_t **out, struct err *e)
{
	char path[200];
	snprintf(path, sizeof path, "/v1/computers/%s/recordings/%.40s/stop", id, rid);
	int where = core_forward_json(c, id, ws, "POST", path, params, 200, out, e);
	if (where <= 0)
		return where;
	bool keep = false, given;
	struct store_recording row;
	if (rec_keep_param(params, &keep, &given, e) < 0 || rec_get(c, id, ws, rid, &row, e) < 0)
		return -1;
	pthread_mutex_lock(&c->rec_lock);
	if (rec_ask_stop(c, rid, given && keep))
		rec_wait_gone(c, rid);
	pthread_mutex_unlock(&c->rec_lock);
	if (rec_get(c, id, ws, rid, &row, e) < 0)
		return -1;
	if (given && row.keep != keep && strcmp(row.state, "recording") != 0) {
		row.keep = keep;
		if (store_recording_update(c->store, &row, e) < 0)
			return -1;
	}
	*out = store_recording_json(&row);
	return 0;
}

int core_recording_list(struct core *c, const char *id, const char *ws, json_t **out, struct err *e)
{
	char path[160];
	snprintf(path, sizeof path, "/v1/computers/%s/recordings", id);
	int where = core_forward_json(c, id, ws, "GET", path, NULL, 200, out, e);
	if (where <= 0)
		return where;
	struct store_recording *all;
	size_t n;
	if (store_recordings_find(c->store, id, ws, NULL, 0, &all, &n, e) < 0)
		return -1;
	if (n == 0) {
		/* No recording: still a 404 for a computer that is not the caller's. */
		struct store_computer sc = {0};
		int rc = store_computer_get(c->store, id, ws, &sc, e);
		store_computer_clear(&sc);
		if (rc < 0) {
			free(all);
			return err_set(e, ERR_NOT_FOUND, "no computer %.40s", id);
		}
	}
	json_t *arr = json_array();
	pthread_mutex_lock(&c->rec_lock);
	for (size_t i = 0; i < n; i++) {
		struct core_rec *live = rec_find(c, all[i].id);
		if (live && live->live) {
			all[i].actions = live->row.actions;
			all[i].duration_ms = clock_now_us() / 1000 - live->t0_us / 1000;
		}
		json_array_append_new(arr, store_recording_json(&all[i]));
	}
	pthread_mutex_unlock(&c->rec_lock);
	free(all);
	*out = json_pack("{s:o}", "recordings", arr);
	return 0;
}

int core_recording_open(struct core *c, const char *id, const char *ws, const char *rid, int *fd,
			uint64_t *size, struct err *e)
{
	/* (in a cluster the API asks the holder for the file: core_forward_get) */
	struct store_recording row;
	if (rec_get(c, id, ws, rid, &row, e) < 0)
		return -1;
	if (strcmp(row.state, "recording") == 0)
		return err_set(e, ERR_CONFLICT,
			       "recording %s is still recording: POST .../recordings/%s/stop first",
			       rid, rid);
	int dfd = rec_dir(c, row.workspace, e);
	if (dfd < 0)
		return -1;
	char name[80];
	rec_name(name, sizeof name, rid, "webm");
	*fd = openat(dfd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
	close(dfd);
	struct stat sb;
	if (*fd < 0 || fstat(*fd, &sb) < 0 || !S_ISREG(sb.st_mode)) {
		if (*fd >= 0)
			close(*fd);
		return err_set(e, ERR_NOT_FOUND, "recording %s has no file", rid);
	}
	*size = (uint64_t)sb.st_size;
	return 0;
}

int core_recording_actions(struct core *c, const char *id, const char *ws, const char *rid,
			   json_t **out, struct err *e)
{
	char path[200];
	snprintf(path, sizeof path, "/v1/computers/%s/recordings/%.40s/actions", id, rid);
	int where = core_forward_json(c, id, ws, "GET", path, NULL, 200, out, e);
	if (where <= 0)
		return where;
	struct store_recording row;
	if (rec_get(c, id, ws, rid, &row, e) < 0)
		return -1;
	int dfd = rec_dir(c, row.workspace, e);
	if (dfd < 0)
		return -1;
	char name[80];
	rec_name(name, sizeof name, rid, "actions");
	int fd = openat(dfd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
	close(dfd);
	FILE *f = fd >= 0 ? fdopen(fd, "r") : NULL;
	json_t *arr = json_array();
	if (f) {
		char *line = NULL;
		size_t cap = 0;
		ssize_t len;
		uint64_t total = 0;
		while ((len = getline(&line, &cap, f)) > 0 && total < REC_TRACK_MAX) {
			total += (uint64_t)len;
			json_t *j = json_loadb(line, (size_t)len, 0, NULL);
			if (json_is_object(j))
				json_array_append_new(arr, j);
			else
				json_decref(j);
		}
		free(line);
		fclose(f);
	} else if (fd >= 0) {
		close(fd);
	}
	pthread_mutex_lock(&c->rec_lock);
	struct core_rec *live = rec_find(c, rid);
	if (live && live->live) {
		row.actions = live->row.actions;
		row.duration_ms = clock_now_us() / 1000 - live->t0_us / 1000;
	}
	pthread_mutex_unlock(&c->rec_lock);
	*out = json_pack("{s:o, s:o}", "recording", store_recording_json(&row), "actions", arr);
	return 0;
}

int core_recording_delete(struct core *c, const char *id, const char *ws, const char *rid,
			  json_t **out, struct err *e)
{
	char path[200];
	snprintf(path, sizeof path, "/v1/computers/%s/recordings/%.40s", id, rid);
	int where = core_forward_json(c, id, ws, "DELETE", path, NULL, 200, out, e);
	if (where <= 0)
		return where;
	struct store_recording row;
	if (rec_get(c, id, ws, rid, &row, e) < 0)
		return -1;
	pthread_mutex_lock(&c->rec_lock);
	if (rec_ask_stop(c, rid, false))
		rec_wait_gone(c, rid);
	pthread_mutex_unlock(&c->rec_lock);
	if (store_recording_delete(c->store, rid, e) < 0)
		return -1;
	rec_unlink(c, &row);
	*out = json_pack("{s:s, s:b}", "id", rid, "deleted", 1);
	return 0;
}

/* ---- the action track --------------------------------------------------------------- */

/* A copy of v with long strings cut (a write_file's content, a long text). */
static json_t *rec_sanitize(json_t *v, int depth)
{
	if (depth > 8)
		return json_string("(nested too deep)");
	if (json_is_string(v) && json_string_length(v) > REC_PARAM_STR) {
		char buf[REC_PARAM_STR + 64];
		size_t n = REC_PARAM_STR;
		const char *s = json_string_value(v);
		while (n > 0 && ((unsigned char)s[n] & 0xC0) == 0x80)
			n--; /* cut at a character's start */
		snprintf(buf, sizeof buf, "%.*s...(%zu bytes)", (int)n, s, json_string_length(v));
		return json_string(buf);
	}
	if (json_is_object(v)) {
		json_t *o = json_object();
		const char *k;
		json_t *x;
		json_object_foreach(v, k, x) json_object_set_new(o, k, rec_sanitize(x, depth + 1));
		return o;
	}
	if (json_is_array(v)) {
		json_t *a = json_array();
		size_t i;
		json_t *x;
		json_array_foreach(v, i, x)
		{
			if (i >= 64) {
				json_array_append_new(a, json_string("..."));
				break;
			}
			json_array_append_new(a, rec_sanitize(x, depth + 1));
		}
		return a;
	}
	return json_deep_copy(v);
}

/* Where envd's answer says the pointer is ({"x", "y"} of a pointer
 * action): true with them. */
static bool rec_pointer(const struct envd_reply *reply, int *x, int *y)
{
	if (!reply || reply->status != 200 || !reply->body ||
	    strncmp(reply->content_type, "application/json", 16) != 0)
		return false;
	json_t *j = json_loadb(reply->body, reply->body_len, 0, NULL);
	json_t *jx = json_object_get(j, "x"), *jy = json_object_get(j, "y");
	bool ok = json_is_integer(jx) && json_is_integer(jy) && json_integer_value(jx) >= 0 &&
		  json_integer_value(jy) >= 0 && json_integer_value(jx) < 65536 &&
		  json_integer_value(jy) < 65536;
	if (ok) {
		*x = (int)json_integer_value(jx);
		*y = (int)json_integer_value(jy);
	}
	json_decref(j);
	return ok;
}

void core_recordings_note(struct core *c, const char *id, const char *action, const char *body,
			  size_t len, int status, int64_t t_start_us, int64_t t_end_us,
			  const struct envd_reply *reply)
{
	if (__atomic_load_n(&c->nrecs, __ATOMIC_RELAXED) == 0)
		return;
	/* Is this computer recorded? (Cheap: the list is short.) */
	pthread_mutex_lock(&c->rec_lock);
	bool any = false;
	for (struct core_rec *r = c->recs; r && !any; r = r->next)
		any = r->live && strcmp(r->row.computer, id) == 0;
	pthread_mutex_unlock(&c->rec_lock);
	if (!any)
		return;
	json_t *p = json_loadb(body ? body : "", len, 0, NULL);
	json_t *params = json_is_object(p) ? rec_sanitize(p, 0) : json_object();
	json_decref(p);
	char *ptext = json_dumps(params, JSON_COMPACT);
	json_decref(params);
	if (!ptext)
		return;
	int px = 0, py = 0;
	char pointer[48] = "";
	if (rec_pointer(reply, &px, &py))
		snprintf(pointer, sizeof pointer, "pointer %d %d\n", px, py);
	pthread_mutex_lock(&c->rec_lock);
	for (struct core_rec *r = c->recs; r; r = r->next) {
		if (!r->live || strcmp(r->row.computer, id) != 0 || r->actions < 0)
			continue;
		/* The control pipe is non-blocking: a recorder that does not read
		 * loses a pointer move, never holds this thread. */
		if (pointer[0] && r->ctl >= 0 &&
		    write(r->ctl, pointer, strlen(pointer)) != (ssize_t)strlen(pointer)) {
			/* dropped */
		}
		r->row.actions++;
		if (r->track_bytes >= REC_TRACK_MAX)
			continue;
		int64_t at = t_start_us - r->t0_us;
		char *line = NULL;
		int n =
		    asprintf(&line,
			     "{\"t_ms\":%lld,\"duration_ms\":%lld,\"action\":\"%s\","
			     "\"params\":%s,\"status\":%d}\n",
			     (long long)(at > 0 ? at / 1000 : 0),
			     (long long)((t_end_us - t_start_us) / 1000), action, ptext, status);
		if (n > 0 && write(r->actions, line, (size_t)n) == n)
			r->track_bytes += (uint64_t)n;
		else
			r->track_bytes = REC_TRACK_MAX; /* the disk is full: stop writing */
		free(line);
	}
	pthread_mutex_unlock(&c->rec_lock);
	free(ptext);
}

/* ---- the computer's life, recovery, retention -------------------------------------- */

void core_recordings_end(struct core *c, const char *id, bool deleting)
{
	pthread_mutex_lock(&c->rec_lock);
	char ids[16][40];
	int n = 0;
	for (struct core_rec *r = c->recs; r && n < 16; r = r->next)
		if (strcmp(r->row.computer, id) == 0)
			snprintf(ids[n++], sizeof ids[0], "%s", r->row.id);
	for (int i = 0; i < n; i++)
		rec_ask_stop(c, ids[i], false);
	for (int i = 0; i < n; i++)
		rec_wait_gone(c, ids[i]);
	pthread_mutex_unlock(&c->rec_lock);
	if (!deleting)
		return;
	struct store_recording *all;
	size_t m;
	if (store_recordings_find(c->store, id, NULL, NULL, 0, &all, &m, NULL) < 0)
		return;
	for (size_t i = 0; i < m; i++) {
		if (all[i].keep)
			continue;
		store_recording_delete(c->store, all[i].id, NULL);
		rec_unlink(c, &all[i]);
	}
	free(all);
}

void core_recordings_forget_workspace(struct core *c, const char *ws)
{
	struct store_recording *all;
	size_t n;
	if (store_recordings_find(c->store, NULL, ws, NULL, 0, &all, &n, NULL) < 0)
		return;
	for (size_t i = 0; i < n; i++)
		store_recording_delete(c->store, all[i].id, NULL);
	free(all);
}

int core_recordings_recover(struct core *c, struct err *e)
{
	pthread_mutex_init(&c->rec_lock, NULL);
	pthread_cond_init(&c->rec_changed, NULL);
	struct store_recording *all;
	size_t n;
	if (store_recordings_find(c->store, NULL, NULL, "recording", 0, &all, &n, e) < 0)
		return -1;
	/* Their recorders ended with the cubicled before (its death closed
	 * their control pipes: they finished their files if they could). */
	for (size_t i = 0; i < n; i++) {
		struct store_recording *r = &all[i];
		char path[900];
		snprintf(path, sizeof path, "%s/sessions/%s/.recordings/%s.webm", c->cfg.state_dir,
			 r->workspace, r->id);
		struct stat sb;
		r->bytes = stat(path, &sb) == 0 ? (uint64_t)sb.st_size : 0;
		snprintf(r->state, sizeof r->state, "stopped");
		snprintf(r->reason, sizeof r->reason, "error");
		snprintf(r->error, sizeof r->error,
			 "cubicled stopped during the recording; the file ends there");
		r->stopped_ms = clock_wall_ms();
		if (r->duration_ms == 0)
			r->duration_ms = r->stopped_ms - r->started_ms;
		store_recording_update(c->store, r, NULL);
	}
	free(all);
	return 0;
}

void core_recordings_sweep(struct core *c)
{
	int64_t now = clock_wall_ms();
	if (now - c->rec_swept_ms < 60000)
		return;
	c->rec_swept_ms = now;
	struct store_recording *all;
	size_t n;
	int64_t before = now - (int64_t)c->cfg.record_keep_days * 86400000;
	if (store_recordings_find(c->store, NULL, NULL, NULL, before, &all, &n, NULL) < 0)
		return;
	for (size_t i = 0; i < n; i++) {
		fprintf(stderr, "cubicled: recording %s: kept %d days, deleted\n", all[i].id,
			c->cfg.record_keep_days);
		store_recording_delete(c->store, all[i].id, NULL);
		rec_unlink(c, &all[i]);
	}
	free(all);
}

void core_recordings_close(struct core *c)
{
	pthread_mutex_lock(&c->rec_lock);
	for (struct core_rec *r = c->recs; r; r = r->next)
		if (r->ctl >= 0) {
			close(r->ctl);
			r->ctl = -1;
		}
	struct timespec until = clock_deadline(CLOCK_REALTIME, REC_STOP_MS);
	while (c->recs)
		if (pthread_cond_timedwait(&c->rec_changed, &c->rec_lock, &until) == ETIMEDOUT)
			break;
	pthread_mutex_unlock(&c->rec_lock);
}
