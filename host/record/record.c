/*
 * cubicle-record: records one computer's screen into a WebM file.
 *
 *   cubicle-record [--fps N] [--max-seconds S] [--max-bytes B] [--t0-ns NS]
 *                  [--encodings "raw copyrect"] [--kbps N] [--cq N]
 *                  [--uid N] [--gid N]
 *
 * cubicled starts one per recording (host/core/recordings.c) with:
 *   fd 3  the computer's RFB socket, connected, the gateway's mode line
 *         ("cubicle-viewer view") already sent: this is a view-only viewer
 *   fd 4  the WebM file (read-write, seekable, empty)
 *   fd 5  the control pipe: "pointer X Y" lines (where the API last put the
 *         pointer); EOF (cubicled closed it, or died) ends the recording, as
 *         does SIGTERM
 *   fd 1  status lines for cubicled, "ready T0_NS WIDTH HEIGHT" once the
 *         first frame is in, and at the end
 *         "done FRAMES BYTES DURATION_MS REASON MESSAGE..." (REASON: stopped,
 *         max_duration, max_bytes, storage_full, source_ended, error)
 *   fd 2  cubicled's log
 *
 * Every byte on fd 3 comes from inside the computer and is hostile: it is
 * parsed here (libvncclient), in a process that owns nothing else. Before
 * reading a byte of it, the process drops to an unprivileged uid, sets
 * no_new_privs, rlimits (its memory; its file size, the recording's cap),
 * a Landlock domain that opens no file at all and a seccomp filter that
 * allows only what reading, encoding and writing need (no open, no socket,
 * no exec, no new process). Updates are asked for at most --fps times a
 * second; the server may send at most 2 x fps + 2 updates with pixels and
 * RECORD_MAX_EMPTY without (cursor shapes, size changes) in a second, each
 * of at most RECORD_MAX_SCREENS screens of pixels; more ends the recording.
 *
 * Frames are encoded only when an update brings pixels (webm.h), stamped
 * with the time the update arrived, in milliseconds since T0 (CLOCK_MONOTONIC,
 * shared with cubicled, which stamps the action track with the same clock),
 * so a still screen costs nothing and is one frame held. At the end the last
 * picture is sent once more, stamped with the end, so the file lasts as
 * long as the recording did.
 *
 * The cursor. The RFB server draws a cursor where its viewers last pointed,
 * not where the agent did (the API moves the pointer through XTest), so the
 * recorder takes the cursor's shape (RichCursor) and draws it itself where
 * cubicled says the pointer is (fd 5): a pointer that moves is a frame too,
 * within the same --fps.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <grp.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>

#include <rfb/rfbclient.h>
#include <seccomp.h>

#include "landlock.h"
#include "webm.h"

#define RECORD_FD_RFB	3
#define RECORD_FD_OUT	4
#define RECORD_FD_CTL	5
#define RECORD_MAX_SIDE 4096
/* Pixels one update may carry, in screens (overlapping rectangles). */
#define RECORD_MAX_SCREENS 4
/* Updates without pixels a server may send in a second. */
#define RECORD_MAX_EMPTY 30
/* Left for the trailer (cues, the duration): under the size cap, and
 * allocated on the disk ahead of what is written (record_reserve), so a
 * disk that others fill still takes the trailer. */
#define RECORD_RESERVE (1u << 20)
/* Free space the recording leaves on its disk (the workspace's storage). */
#define RECORD_MIN_FREE (1u << 20)
/* How long the first frame may take to come. */
#define RECORD_FIRST_MS 10000
/* The largest cursor drawn (bigger shapes are not drawn). */
#define RECORD_CURSOR_MAX 128

struct rec {
	int fps;
	int64_t max_ms;
	uint64_t max_bytes;
	int64_t t0_ns;
	const char *encodings;
	struct webm_opts wo;

	rfbClient *cl;
	struct webm *webm;
	int out_w, out_h;
	uint8_t *canvas; /* out_w x out_h BGRX when the screen's size differs */

	int outstanding;	       /* update requests not yet answered */
	int64_t window_ns;	       /* the second the counts below are of */
	int window_full, window_empty; /* updates with and without pixels in it */
	uint64_t update_px;	       /* pixels of the update being read */
	bool update_pixels;	       /* ... whether it had any */
	bool update_over;	       /* ... too many: the server is not to be trusted */
	bool have_update;	       /* an update with pixels arrived, not yet encoded */
	int64_t update_ns;	       /* ... when */
	int64_t next_req_ns;	       /* when the next request may go */
	int64_t last_pts;
	int64_t last_enc_ns; /* when the last frame was encoded */

	/* The cursor (its shape from the server, its place from cubicled). */
	uint8_t cur_px[RECORD_CURSOR_MAX * RECORD_CURSOR_MAX * 4];
	uint8_t cur_mask[RECORD_CURSOR_MAX * RECORD_CURSOR_MAX];
	uint8_t under[RECORD_CURSOR_MAX * RECORD_CURSOR_MAX * 4];
	int cur_w, cur_h, cur_hx, cur_hy; /* cur_w 0: no shape to draw */
	int ptr_x, ptr_y;
	bool ptr_known;
	char ctl[128]; /* a control line being read */
	size_t ctl_len;

	char reason[32];
	char message[300];
};

static volatile sig_atomic_t record_term;

static void record_on_term(int sig)
{
	(void)sig;
	record_term = 1;
}

static int64_t record_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

__attribute__((format(printf, 3, 4))) static void record_end(struct rec *r, const char *reason,
							     const char *fmt, ...)
{
	if (r->reason[0])
		return; /* the first reason stands */
	snprintf(r->reason, sizeof r->reason, "%s", reason);
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(r->message, sizeof r->message, fmt, ap);
	va_end(ap);
}

static void record_die(const char *what)
{
	dprintf(1, "done 0 0 0 error %s: %s\n", what, strerror(errno));
	exit(1);
}

/* ---- the sandbox --------------------------------------------------------------- */

/* Landlock with no rule: no file can be opened, no TCP port bound or
 * connected, no signal sent out of the domain. */
static void record_landlock(void)
{
	char why[256];
	int abi = landlock_restrict(NULL, 0, why, sizeof why);
	if (abi == 0)
		fprintf(stderr, "cubicle-record: no Landlock in this kernel; seccomp alone\n");
	else if (abi < 0) {
		dprintf(1, "done 0 0 0 error %s\n", why);
		exit(1);
	}
}

/* What reading a socket, encoding and writing a file need; every other
 * system call fails with EPERM. */
static void record_seccomp(void)
{
	static const char *const allow[] = {
	    "read",
	    "write",
	    "readv",
	    "writev",
	    "pread64",
	    "pwrite64",
	    "lseek",
	    "fstat",
	    "newfstatat",
	    "fstatfs",
	    "poll",
	    "ppoll",
	    "select",
	    "pselect6",
	    "mmap",
	    "munmap",
	    "mremap",
	    "mprotect",
	    "brk",
	    "madvise",
	    "close",
	    "exit",
	    "exit_group",
	    "rt_sigreturn",
	    "rt_sigprocmask",
	    "rt_sigaction",
	    "clock_gettime",
	    "clock_nanosleep",
	    "nanosleep",
	    "gettimeofday",
	    "getrandom",
	    "futex",
	    "getpid",
	    "gettid",
	    "sched_yield",
	    "sched_getaffinity",
	    "getsockopt",
	    "setsockopt",
	    "getpeername",
	    "getsockname",
	    "recvfrom",
	    "sendto",
	    "fcntl",
	    "sysinfo",
	    "restart_syscall",
	    "uname",
	    "fallocate",
	    "ftruncate",
	};
	scmp_filter_ctx f = seccomp_init(SCMP_ACT_ERRNO(EPERM));
	if (!f)
		record_die("seccomp_init");
	int rc = 0;
	for (size_t i = 0; i < sizeof allow / sizeof allow[0] && rc == 0; i++) {
		int nr = seccomp_syscall_resolve_name(allow[i]);
		if (nr != __NR_SCMP_ERROR)
			rc = seccomp_rule_add(f, SCMP_ACT_ALLOW, nr, 0);
	}
	/* abort() signals itself, nothing else */
	if (rc == 0)
		rc = seccomp_rule_add(f, SCMP_ACT_ALLOW, SCMP_SYS(tgkill), 1,
				      SCMP_A0(SCMP_CMP_EQ, (scmp_datum_t)getpid()));
	if (rc == 0)
		rc = seccomp_rule_add(f, SCMP_ACT_ERRNO(ENOTTY), SCMP_SYS(ioctl), 0);
	if (rc == 0)
		rc = seccomp_load(f);
	seccomp_release(f);
	if (rc < 0) {
		errno = -rc;
		record_die("seccomp");
	}
}

static void record_sandbox(struct rec *r, uid_t uid, gid_t gid)
{
	/* Memory: the screen (up to 4096x4096 x 4 bytes, twice), the encoder's
	 * frames and the libraries; a hostile server's allocations fail past it. */
	struct {
		int res;
		rlim_t v;
	} lim[] = {
	    {RLIMIT_AS, (rlim_t)1536 << 20},
	    {RLIMIT_FSIZE, (rlim_t)r->max_bytes},
	    {RLIMIT_NOFILE, 16},
	    {RLIMIT_NPROC, 0},
	    {RLIMIT_CORE, 0},
	    {RLIMIT_MEMLOCK, 0},
	};
	for (size_t i = 0; i < sizeof lim / sizeof lim[0]; i++) {
		struct rlimit rl = {lim[i].v, lim[i].v};
		if (setrlimit(lim[i].res, &rl) < 0)
			record_die("setrlimit");
	}
	signal(SIGXFSZ, SIG_IGN); /* past the size cap a write fails (EFBIG) */
	signal(SIGPIPE, SIG_IGN);
	if (setpriority(PRIO_PROCESS, 0, 10) < 0)
		fprintf(stderr, "cubicle-record: cannot lower the priority: %s\n", strerror(errno));
	if (getuid() == 0 && (setgroups(0, NULL) < 0 || setresgid(gid, gid, gid) < 0 ||
			      setresuid(uid, uid, uid) < 0))
		record_die("cannot drop to the recorder's uid");
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0 || prctl(PR_SET_DUMPABLE, 0) < 0)
		record_die("prctl");
	record_landlock();
	record_seccomp();
}

/* ---- RFB (libvncclient) ----------------------------------------------------------- */

static void record_log_quiet(const char *fmt, ...)
{
	(void)fmt;
}

static struct rec *record_of(rfbClient *cl)
{
	return rfbClientGetClientData(cl, (void *)record_of);
}

/* The server says the screen's size (at the start, and when it changes):
 * refused past RECORD_MAX_SIDE. */
static rfbBool record_fb_alloc(rfbClient *cl)
{
	struct rec *r = record_of(cl);
	if (cl->width < 1 || cl->height < 1 || cl->width > RECORD_MAX_SIDE ||
	    cl->height > RECORD_MAX_SIDE) {
		record_end(r, "error", "the computer's screen is %dx%d, over %dx%d", cl->width,
			   cl->height, RECORD_MAX_SIDE, RECORD_MAX_SIDE);
		return FALSE;
	}
	free(cl->frameBuffer);
	cl->frameBuffer = calloc((size_t)cl->width * (size_t)cl->height, 4);
	if (!cl->frameBuffer) {
		record_end(r, "error", "out of memory for a %dx%d screen", cl->width, cl->height);
		return FALSE;
	}
	if (r->out_w && (cl->width != r->out_w || cl->height != r->out_h) && !r->canvas &&
	    !(r->canvas = calloc((size_t)r->out_w * (size_t)r->out_h, 4))) {
		record_end(r, "error", "out of memory");
		return FALSE;
	}
	return TRUE;
}

static void record_got_rect(rfbClient *cl, int x, int y, int w, int h)
{
	(void)x, (void)y;
	struct rec *r = record_of(cl);
	r->update_pixels = true;
	r->update_px += (uint64_t)w * (uint64_t)h;
	if (r->update_px >
	    (uint64_t)RECORD_MAX_SCREENS * (uint64_t)cl->width * (uint64_t)cl->height)
		r->update_over = true;
}

static void record_update_done(rfbClient *cl)
{
	struct rec *r = record_of(cl);
	if (r->outstanding > 0)
		r->outstanding--;
	int64_t now = record_now_ns();
	if (now - r->window_ns >= 1000000000) {
		r->window_ns = now;
		r->window_full = r->window_empty = 0;
	}
	if (r->update_pixels) {
		r->have_update = true;
		r->update_ns = now;
		r->window_full++;
	} else {
		r->window_empty++;
	}
	r->update_pixels = false;
	r->update_px = 0;
}

/* A new cursor shape (RichCursor): pixels in our format, a byte of mask
 * per pixel; kept when it fits RECORD_CURSOR_MAX. */
static void record_cursor_shape(rfbClient *cl, int xhot, int yhot, int w, int h, int bpp)
{
	struct rec *r = record_of(cl);
	r->cur_w = 0;
	if (bpp != 4 || w < 1 || h < 1 || w > RECORD_CURSOR_MAX || h > RECORD_CURSOR_MAX ||
	    !cl->rcSource || !cl->rcMask)
		return;
	memcpy(r->cur_px, cl->rcSource, (size_t)w * (size_t)h * 4);
	memcpy(r->cur_mask, cl->rcMask, (size_t)w * (size_t)h);
	r->cur_w = w;
	r->cur_h = h;
	r->cur_hx = xhot < w ? xhot : w - 1;
	r->cur_hy = yhot < h ? yhot : h - 1;
	if (r->ptr_known && !r->have_update) {
		r->have_update = true; /* the shape changed: a frame */
		r->update_ns = record_now_ns();
	}
}

static int record_rfb_open(struct rec *r)
{
	rfbClientLog = rfbClientErr = record_log_quiet;
	rfbClient *cl = rfbGetClient(8, 3, 4);
	if (!cl)
		return -1;
	r->cl = cl;
	rfbClientSetClientData(cl, (void *)record_of, r);
	/* The X server's own layout, bytes B G R X: no conversion on either side. */
	cl->format.redShift = 16;
	cl->format.greenShift = 8;
	cl->format.blueShift = 0;
	cl->MallocFrameBuffer = record_fb_alloc;
	cl->GotFrameBufferUpdate = record_got_rect;
	cl->FinishedFrameBufferUpdate = record_update_done;
	cl->GotCursorShape = record_cursor_shape;
	cl->canHandleNewFBSize = TRUE;
	/* The cursor as a shape, not drawn into the pictures: the server would
	 * draw it where a viewer last pointed, not where the agent did. */
	cl->appData.useRemoteCursor = TRUE;
	cl->appData.encodingsString = r->encodings;
	cl->appData.compressLevel = 1;
	cl->readTimeout = 10;
	cl->listenSpecified = TRUE; /* connected already: fd 3 */
	cl->sock = RECORD_FD_RFB;
	fcntl(RECORD_FD_RFB, F_SETFL, fcntl(RECORD_FD_RFB, F_GETFL) | O_NONBLOCK);
	r->outstanding = 1; /* rfbInitClient asks for the whole screen */
	if (!rfbInitClient(cl, NULL, NULL)) {
		r->cl = NULL; /* rfbInitClient freed it */
		return -1;
	}
	return 0;
}

/* ---- frames ------------------------------------------------------------------------ */

/* The screen as the recording's picture (cropped or padded when the
 * screen changed size since the start). */
static uint8_t *record_picture(struct rec *r, size_t *stride)
{
	rfbClient *cl = r->cl;
	if (cl->width == r->out_w && cl->height == r->out_h) {
		*stride = (size_t)cl->width * 4;
		return cl->frameBuffer;
	}
	size_t ow = (size_t)r->out_w * 4, cw = (size_t)cl->width * 4;
	size_t n = ow < cw ? ow : cw;
	memset(r->canvas, 0, ow * (size_t)r->out_h);
	for (int y = 0; y < r->out_h && y < cl->height; y++)
		memcpy(r->canvas + (size_t)y * ow, cl->frameBuffer + (size_t)y * cw, n);
	*stride = ow;
	return r->canvas;
}

/* The cursor's rectangle on the picture, clipped: false when none shows. */
static bool record_cursor_rect(const struct rec *r, int *x0, int *y0, int *cx, int *cy, int *w,
			       int *h)
{
	if (!r->cur_w || !r->ptr_known)
		return false;
	*x0 = r->ptr_x - r->cur_hx;
	*y0 = r->ptr_y - r->cur_hy;
	*cx = *x0 < 0 ? -*x0 : 0; /* the first of the cursor's columns shown */
	*cy = *y0 < 0 ? -*y0 : 0;
	*w = r->cur_w - *cx;
	*h = r->cur_h - *cy;
	*x0 += *cx;
	*y0 += *cy;
	if (*x0 + *w > r->out_w)
		*w = r->out_w - *x0;
	if (*y0 + *h > r->out_h)
		*h = r->out_h - *y0;
	return *w > 0 && *h > 0;
}

/* Draws the cursor into pic (saving what it covers), or puts that back. */
static void record_cursor_draw(struct rec *r, uint8_t *pic, size_t stride, bool restore)
{
	int x0, y0, cx, cy, w, h;
	if (!record_cursor_rect(r, &x0, &y0, &cx, &cy, &w, &h))
		return;
	for (int y = 0; y < h; y++) {
		uint8_t *row = pic + (size_t)(y0 + y) * stride + (size_t)x0 * 4;
		uint8_t *save = r->under + (size_t)y * RECORD_CURSOR_MAX * 4;
		if (restore) {
			memcpy(row, save, (size_t)w * 4);
			continue;
		}
		memcpy(save, row, (size_t)w * 4);
		for (int x = 0; x < w; x++) {
			size_t i = (size_t)(cy + y) * (size_t)r->cur_w + (size_t)(cx + x);
			if (r->cur_mask[i])
				memcpy(row + (size_t)x * 4, r->cur_px + i * 4, 4);
		}
	}
}

/* Keeps RECORD_RESERVE bytes allocated past what is written (the file's
 * size unchanged); false when the disk cannot give them: the recording
 * must end while the last reservation still takes its trailer. */
static bool record_reserve(struct rec *r)
{
	uint64_t at = r->webm ? webm_bytes(r->webm) : 0;
	if (fallocate(RECORD_FD_OUT, FALLOC_FL_KEEP_SIZE, (off_t)at, RECORD_RESERVE) == 0)
		return true;
	if (errno == EOPNOTSUPP || errno == ENOSYS)
		return true; /* a filesystem without it: the free-space check alone */
	record_end(r, "storage_full", "the workspace's storage is full");
	return false;
}

static int record_encode(struct rec *r, int64_t at_ns, bool last)
{
	int64_t pts = (at_ns - r->t0_ns) / 1000000;
	if (pts < 0)
		pts = 0;
	size_t stride;
	uint8_t *pic = record_picture(r, &stride);
	char why[300];
	record_cursor_draw(r, pic, stride, false);
	int rc = webm_frame(r->webm, pic, stride, pts, last, why, sizeof why);
	record_cursor_draw(r, pic, stride, true);
	r->last_enc_ns = record_now_ns();
	if (rc == 0 && !record_reserve(r))
		return -1;
	if (rc < 0) {
		if (strstr(why, "File too large"))
			record_end(r, "max_bytes", "the recording reached its size cap");
		else
			record_end(r, strstr(why, "No space") ? "storage_full" : "error", "%s",
				   why);
		return -1;
	}
	r->last_pts = pts;
	return 0;
}

/*
 * libvncclient asks for the next update as soon as one arrives, so the
 * server would send them as fast as the screen changes. It skips messages
 * the server does not support: FramebufferUpdateRequest is marked so while
 * libvncclient handles a message, and the recording asks itself, at its
 * own pace (record_loop).
 */
static void record_requests(rfbClient *cl, bool on)
{
	uint8_t bit = (uint8_t)(1u << (rfbFramebufferUpdateRequest % 8));
	uint8_t *b = &cl->supportedMessages.client2server[rfbFramebufferUpdateRequest / 8];
	*b = on ? (uint8_t)(*b | bit) : (uint8_t)(*b & ~bit);
}

/* Reads what the server sent: one message (an update, a cursor shape...). */
static int record_read(struct rec *r)
{
	record_requests(r->cl, false);
	if (!HandleRFBServerMessage(r->cl)) {
		record_end(r, "source_ended",
			   "the computer's screen went away (stopped, deleted, or its RFB "
			   "server closed the connection)");
		return -1;
	}
	if (r->update_over) {
		record_end(r, "error",
			   "the computer's RFB server sent an update of more than %d screens of "
			   "pixels",
			   RECORD_MAX_SCREENS);
		return -1;
	}
	if (r->window_full > 2 * r->fps + 2 || r->window_empty > RECORD_MAX_EMPTY) {
		record_end(r, "error",
			   "the computer's RFB server sent %d updates in a second, more than it "
			   "was asked for",
			   r->window_full + r->window_empty);
		return -1;
	}
	return 0;
}

static void record_housekeeping(struct rec *r, int64_t now)
{
	if ((now - r->t0_ns) / 1000000 >= r->max_ms)
		record_end(r, "max_duration", "the recording reached its longest duration");
	if (webm_bytes(r->webm) + RECORD_RESERVE >= r->max_bytes)
		record_end(r, "max_bytes", "the recording reached its size cap");
	struct statvfs sv;
	if (fstatvfs(RECORD_FD_OUT, &sv) == 0 &&
	    (uint64_t)sv.f_bavail * sv.f_frsize < RECORD_MIN_FREE + RECORD_RESERVE)
		record_end(r, "storage_full", "the workspace's storage is full");
}

/* Reads cubicled's control lines; false at EOF (stop). A line that is not
 * "pointer X Y" is ignored; an overlong one is dropped. */
static bool record_control(struct rec *r)
{
	char buf[256];
	ssize_t got = read(RECORD_FD_CTL, buf, sizeof buf);
	if (got < 0)
		return errno == EINTR || errno == EAGAIN;
	if (got == 0)
		return false;
	for (ssize_t i = 0; i < got; i++) {
		if (buf[i] != '\n') {
			if (r->ctl_len < sizeof r->ctl - 1)
				r->ctl[r->ctl_len++] = buf[i];
			else
				r->ctl_len = sizeof r->ctl; /* too long: dropped at its end */
			continue;
		}
		int x, y, used = 0;
		if (r->ctl_len < sizeof r->ctl) {
			r->ctl[r->ctl_len] = 0;
			if (sscanf(r->ctl, "pointer %d %d%n", &x, &y, &used) == 2 &&
			    (size_t)used == r->ctl_len && x >= 0 && y >= 0 && x < 65536 &&
			    y < 65536 && (!r->ptr_known || x != r->ptr_x || y != r->ptr_y)) {
				r->ptr_x = x;
				r->ptr_y = y;
				r->ptr_known = true;
				if (!r->have_update) {
					r->have_update = true;
					r->update_ns = record_now_ns();
				}
			}
		}
		r->ctl_len = 0;
	}
	return true;
}

static void record_loop(struct rec *r)
{
	int64_t period = 1000000000 / r->fps, last_check = 0;
	bool ctl_open = true;
	while (!r->reason[0]) {
		int64_t now = record_now_ns();
		if (record_term || !ctl_open) {
			record_end(r, "stopped", "stopped");
			break;
		}
		if (now - last_check >= 1000000000) {
			record_housekeeping(r, now);
			last_check = now;
			if (r->reason[0])
				break;
		}
		/* At most fps frames a second: a change inside the window waits
		 * for its end, and is stamped with when it is encoded. */
		int64_t due = r->last_enc_ns + period * 9 / 10;
		if (r->have_update && now >= due) {
			r->have_update = false;
			if (record_encode(r, r->update_ns >= due ? r->update_ns : now, false) < 0)
				break;
			now = record_now_ns();
		}
		if (r->outstanding == 0 && now >= r->next_req_ns) {
			record_requests(r->cl, true);
			bool sent = SendFramebufferUpdateRequest(r->cl, 0, 0, r->cl->width,
								 r->cl->height, TRUE);
			record_requests(r->cl, false);
			if (!sent) {
				record_end(r, "source_ended", "the computer's screen went away");
				break;
			}
			r->outstanding++;
			/* The pace is the requests': an answer's delay (the
			 * server's capture) does not slow the frame rate. */
			r->next_req_ns = now + period;
		}
		int timeout = 1000;
		if (r->outstanding == 0) {
			int64_t wait = (r->next_req_ns - now) / 1000000 + 1;
			timeout = wait < timeout ? (int)wait : timeout;
		}
		if (r->have_update) {
			int64_t wait = (r->last_enc_ns + period * 9 / 10 - now) / 1000000 + 1;
			timeout = wait < timeout ? (int)wait : timeout;
		}
		struct pollfd p[2] = {{RECORD_FD_RFB, POLLIN, 0}, {RECORD_FD_CTL, POLLIN, 0}};
		int n = poll(p, 2, timeout < 0 ? 0 : timeout);
		if (n < 0 && errno != EINTR) {
			record_end(r, "error", "poll: %s", strerror(errno));
			break;
		}
		if (n <= 0)
			continue;
		if (p[1].revents && !record_control(r))
			ctl_open = false;
		/* libvncclient keeps its own buffer: drain what it already has. */
		if (p[0].revents || r->cl->buffered) {
			do {
				if (record_read(r) < 0)
					break;
			} while (r->cl->buffered > 0 && !r->reason[0]);
		}
	}
}

/* ---- main ------------------------------------------------------------------------- */

static long long record_num(const char *s, const char *flag, long long lo, long long hi)
{
	char *end;
	errno = 0;
	long long v = strtoll(s, &end, 10);
	if (errno || *end || end == s || v < lo || v > hi) {
		fprintf(stderr, "cubicle-record: %s takes %lld..%lld, not '%s'\n", flag, lo, hi, s);
		exit(2);
	}
	return v;
}

int main(int argc, char **argv)
{
	struct rec r = {.fps = 10,
			.max_ms = 3600000,
			.max_bytes = 1ull << 30,
			.encodings = "raw copyrect",
			.last_pts = -1};
	uid_t uid = 65534;
	gid_t gid = 65534;
	static const struct option longopts[] = {
	    {"fps", required_argument, NULL, 'f'},
	    {"max-seconds", required_argument, NULL, 's'},
	    {"max-bytes", required_argument, NULL, 'b'},
	    {"t0-ns", required_argument, NULL, 't'},
	    {"encodings", required_argument, NULL, 'e'},
	    {"kbps", required_argument, NULL, 'k'},
	    {"cq", required_argument, NULL, 'q'},
	    {"uid", required_argument, NULL, 'u'},
	    {"gid", required_argument, NULL, 'g'},
	    {NULL, 0, NULL, 0},
	};
	int ch;
	while ((ch = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
		switch (ch) {
		case 'f':
			r.fps = (int)record_num(optarg, "--fps", 1, 60);
			break;
		case 's':
			r.max_ms = record_num(optarg, "--max-seconds", 1, 7 * 86400) * 1000;
			break;
		case 'b':
			r.max_bytes =
			    (uint64_t)record_num(optarg, "--max-bytes", 4 << 20, 1ll << 40);
			break;
		case 't':
			r.t0_ns = record_num(optarg, "--t0-ns", 0, INT64_MAX);
			break;
		case 'e':
			r.encodings = optarg;
			break;
		case 'k':
			r.wo.kbps = (int)record_num(optarg, "--kbps", 100, 100000);
			break;
		case 'q':
			r.wo.cq = (int)record_num(optarg, "--cq", 4, 63);
			break;
		case 'u':
			uid = (uid_t)record_num(optarg, "--uid", 1, 4294967294LL);
			break;
		case 'g':
			gid = (gid_t)record_num(optarg, "--gid", 1, 4294967294LL);
			break;
		default:
			fprintf(stderr, "usage: see the top of host/record/record.c\n");
			return 2;
		}
	}
	/* No PR_SET_PDEATHSIG: its "parent" is the thread that forked, a
	 * request's worker that ends at once. cubicled's death closes fd 5,
	 * whose EOF ends the recording with its file finished. */
	struct sigaction sa;
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = record_on_term;
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	if (!r.t0_ns)
		r.t0_ns = record_now_ns();
	record_sandbox(&r, uid, gid);

	if (record_rfb_open(&r) < 0) {
		dprintf(1, "done 0 0 0 source_ended %s\n",
			r.message[0] ? r.message
				     : "the computer's RFB server did not complete the handshake");
		return 1;
	}
	/* The first frame: the whole screen, asked for by rfbInitClient. */
	int64_t deadline = record_now_ns() + (int64_t)RECORD_FIRST_MS * 1000000;
	while (!r.have_update && !r.reason[0] && !record_term) {
		int64_t left = (deadline - record_now_ns()) / 1000000;
		if (left <= 0) {
			record_end(&r, "error",
				   "the computer's screen sent no first picture within "
				   "%d s",
				   RECORD_FIRST_MS / 1000);
			break;
		}
		struct pollfd p = {RECORD_FD_RFB, POLLIN, 0};
		if (!r.cl->buffered && poll(&p, 1, (int)left) <= 0)
			continue;
		record_read(&r);
	}
	if (r.reason[0] || record_term) {
		dprintf(1, "done 0 0 0 %s %s\n", r.reason[0] ? r.reason : "stopped",
			r.reason[0] ? r.message : "stopped before the first picture");
		return 1;
	}
	r.out_w = r.cl->width;
	r.out_h = r.cl->height;
	if (!record_reserve(&r)) {
		dprintf(1, "done 0 0 0 storage_full %s\n", r.message);
		return 1;
	}
	r.wo.fd = RECORD_FD_OUT;
	r.wo.width = r.out_w;
	r.wo.height = r.out_h;
	char why[300];
	if (!(r.webm = webm_open(&r.wo, why, sizeof why))) {
		dprintf(1, "done 0 0 0 error %s\n", why);
		return 1;
	}
	/* T0 is the first picture's arrival: the video starts there. */
	r.t0_ns = r.update_ns;
	dprintf(1, "ready %lld %d %d\n", (long long)r.t0_ns, r.out_w, r.out_h);
	record_loop(&r);

	/* The last picture again, stamped with the end: the file lasts as long
	 * as the recording did, still stretches included. A full disk or the
	 * size cap still takes it: it is a few bytes, inside the reservation
	 * kept for the trailer. */
	int64_t end = record_now_ns();
	int64_t end_ms = (end - r.t0_ns) / 1000000;
	if (webm_frames(r.webm) > 0 && end_ms > r.last_pts) {
		char keep[32], msg[300];
		snprintf(keep, sizeof keep, "%s", r.reason);
		snprintf(msg, sizeof msg, "%s", r.message);
		r.reason[0] = 0;
		record_encode(&r, end, true);
		snprintf(r.reason, sizeof r.reason, "%s", keep);
		snprintf(r.message, sizeof r.message, "%s", msg);
	}
	uint64_t frames = webm_frames(r.webm);
	int64_t duration = r.last_pts + 1;
	int rc = webm_close(r.webm, why, sizeof why);
	struct stat st;
	uint64_t bytes = fstat(RECORD_FD_OUT, &st) == 0 ? (uint64_t)st.st_size : 0;
	if (bytes && ftruncate(RECORD_FD_OUT, (off_t)bytes) < 0) {
		/* the reservation past the end stays allocated: harmless */
	}
	if (rc < 0 && strcmp(r.reason, "stopped") == 0)
		snprintf(r.reason, sizeof r.reason, "error"),
		    snprintf(r.message, sizeof r.message, "%s", why);
	dprintf(1, "done %llu %llu %lld %s %s\n", (unsigned long long)frames,
		(unsigned long long)bytes, (long long)duration, r.reason, r.message);
	if (r.cl) {
		free(r.cl->frameBuffer);
		r.cl->frameBuffer = NULL;
		rfbClientCleanup(r.cl);
	}
	free(r.canvas);
	return 0;
}
