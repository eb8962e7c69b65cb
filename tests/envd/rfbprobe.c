/*
 * rfbprobe: a real RFB client for the tests, built on Debian's libvncclient,
 * so envd's RFB server is checked by an independent implementation.
 *
 *   rfbprobe SOCKET [--encodings "tight zrle raw"] [--quality 0-9]
 *            [--compress 0-9] [--mode control|view|none] [-c COMMAND]... [--stdin]
 *
 * Connects to the UNIX socket SOCKET, says the mode in the gateway's
 * preamble line ("cubicle-viewer control\n" unless --mode says otherwise;
 * none: no line), then speaks plain RFB with security None, and prints
 *   {"event":"init","width","height","name","connect_ms","init_ms"}
 * where init_ms is the time from the connection to the ServerInit message,
 * then runs each -c COMMAND and, with --stdin, one command per input line
 * until "quit" or end of input, answering each with one JSON line. Between
 * commands it keeps reading the server (and asking for updates), so counts
 * and waits cover everything that arrived.
 *
 * Commands:
 *   first [TIMEOUT_S]            wait for the first update with pixels since
 *                                connecting -> {"event":"first"}
 *   watch [X Y W H]              start watching for updates with pixels (in
 *                                the region) -> {"event":"watching"}
 *   frame [TIMEOUT_S]            wait for an update seen since "watch" (without
 *                                one: for the next update with pixels)
 *                                -> {"event":"frame","rects","bbox":[x,y,w,h]}
 *   pixel X Y                    -> {"event":"pixel","x","y","rgb":"rrggbb"}
 *   dump FILE                    the framebuffer as a PPM -> {"event":"dump"}
 *   count SECONDS                -> {"event":"count","updates","pixel_updates",
 *                                   "cursor_updates","rects","pixels","bytes"}
 *   fps SECONDS                  -> {"event":"fps","frames","fps","bytes_per_frame"}
 *   pointer X Y MASK             a PointerEvent
 *   key KEYSYM, keydown KEYSYM, keyup KEYSYM  (0x61 or 97)
 *   cut TEXT                     ClientCutText (TEXT is UTF-8, sent as ISO-8859-1)
 *   cutwait [TIMEOUT_S]          -> {"event":"cut","text"} (a cut text received
 *                                   since the last cutwait, else the next one)
 *   cursor [TIMEOUT_S]           -> {"event":"cursor","width","height","xhot","yhot"}
 *   size W H [TIMEOUT_S]         wait until the framebuffer is W x H (the
 *                                server's NewFBSize) -> {"event":"size",
 *                                "width","height"}
 *   sync                         -> {"event":"sync"}
 *   roundtrip [TIMEOUT_S]        a full (non-incremental) update request, and
 *                                its answer -> {"event":"roundtrip"}: the
 *                                server has handled everything sent before
 *   quit
 * A wait that runs out answers {"event":"timeout","what"}; a closed connection
 * prints {"event":"closed"} and exits with status 3.
 */
#include <errno.h>
#include <poll.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>
#include <rfb/rfbclient.h>

struct probe_stats {
	long updates, pixel_updates, cursor_updates, rects;
	long long pixels;
};

static struct {
	rfbClient *client;
	struct probe_stats stats;
	/* the update being received */
	long cur_rects;
	bool cur_cursor;
	int bx1, by1, bx2, by2;
	/* a frame waiter's region and whether the current update touched it */
	bool want_any;
	int wx, wy, ww, wh;
	bool cur_hit;
	bool watching;	 /* "watch" was given: "frame" waits for what it started */
	bool frame_done; /* an update touching the region finished */
	long frame_rects;
	int fx1, fy1, fx2, fy2;
	long frames_seen; /* updates with pixels since connecting */
	bool full_done;	  /* an update covering the whole screen finished */
	/* cut text and cursor */
	char *cut; /* UTF-8, the last one not yet reported */
	bool cursor_new;
	int cursor_w, cursor_h, cursor_xhot, cursor_yhot;
} P;

static double probe_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

__attribute__((format(printf, 1, 2))) static void probe_out(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	putchar('\n');
	fflush(stdout);
}

static void probe_quiet(const char *fmt, ...)
{
	(void)fmt;
}

static void probe_err(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	fputs("rfbprobe: ", stderr);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
}

/* Bytes read by this process so far (the socket, mostly). */
static long long probe_rchar(void)
{
	FILE *f = fopen("/proc/self/io", "r");
	long long v = 0;
	char line[128];
	while (f && fgets(line, sizeof line, f))
		if (sscanf(line, "rchar: %lld", &v) == 1)
			break;
	if (f)
		fclose(f);
	return v;
}

/* JSON string body for UTF-8 text (malloc'd). */
static char *probe_json_escape(const char *s)
{
	size_t n = strlen(s);
	char *out = malloc(n * 6 + 1), *o = out;
	if (!out)
		return NULL;
	for (; *s; s++) {
		unsigned char c = (unsigned char)*s;
		if (c == '"' || c == '\\') {
			*o++ = '\\';
			*o++ = (char)c;
		} else if (c < 0x20) {
			o += sprintf(o, "\\u%04x", c);
		} else {
			*o++ = (char)c;
		}
	}
	*o = 0;
	return out;
}

/* ---- libvncclient callbacks ------------------------------------------------ */

static void probe_got_update(rfbClient *c, int x, int y, int w, int h)
{
	(void)c;
	if (P.cur_rects == 0) {
		P.bx1 = x, P.by1 = y, P.bx2 = x + w, P.by2 = y + h;
	} else {
		P.bx1 = x < P.bx1 ? x : P.bx1;
		P.by1 = y < P.by1 ? y : P.by1;
		P.bx2 = x + w > P.bx2 ? x + w : P.bx2;
		P.by2 = y + h > P.by2 ? y + h : P.by2;
	}
	P.cur_rects++;
	P.stats.rects++;
	P.stats.pixels += (long long)w * h;
	if (P.want_any || (x < P.wx + P.ww && P.wx < x + w && y < P.wy + P.wh && P.wy < y + h))
		P.cur_hit = true;
}

static void probe_finished_update(rfbClient *c)
{
	P.stats.updates++;
	if (P.cur_rects > 0) {
		P.stats.pixel_updates++;
		P.frames_seen++;
	} else if (P.cur_cursor) {
		P.stats.cursor_updates++;
	}
	if (P.cur_rects > 0 && P.bx1 == 0 && P.by1 == 0 && P.bx2 >= c->width && P.by2 >= c->height)
		P.full_done = true;
	if (P.cur_hit && !P.frame_done) {
		P.frame_done = true;
		P.frame_rects = P.cur_rects;
		P.fx1 = P.bx1, P.fy1 = P.by1, P.fx2 = P.bx2, P.fy2 = P.by2;
	}
	P.cur_rects = 0;
	P.cur_cursor = false;
	P.cur_hit = false;
}

static void probe_got_cursor(rfbClient *c, int xhot, int yhot, int w, int h, int bpp)
{
	(void)c;
	(void)bpp;
	P.cur_cursor = true;
	P.cursor_new = true;
	P.cursor_w = w, P.cursor_h = h, P.cursor_xhot = xhot, P.cursor_yhot = yhot;
}

static void probe_got_cut(rfbClient *c, const char *text, int len)
{
	(void)c;
	/* Plain RFB cut text is ISO-8859-1. */
	char *utf8 = malloc((size_t)len * 2 + 1);
	if (!utf8)
		return;
	size_t n = 0;
	for (int i = 0; i < len; i++) {
		unsigned char ch = (unsigned char)text[i];
		if (ch < 0x80) {
			utf8[n++] = (char)ch;
		} else {
			utf8[n++] = (char)(0xc0 | ch >> 6);
			utf8[n++] = (char)(0x80 | (ch & 0x3f));
		}
	}
	utf8[n] = 0;
	free(P.cut);
	P.cut = utf8;
}

/* ---- reading the server ------------------------------------------------------ */

static void probe_closed(void)
{
	probe_out("{\"event\":\"closed\"}");
	exit(3);
}

/* Handles whatever the server sent within `ms` milliseconds. */
static void probe_pump(int ms)
{
	rfbClient *c = P.client;
	if (c->buffered == 0) {
		int n = WaitForMessage(c, (unsigned)ms * 1000u);
		if (n < 0)
			probe_closed();
		if (n == 0)
			return;
	}
	if (!HandleRFBServerMessage(c))
		probe_closed();
}

/* Pumps until done() or the timeout; false on timeout. */
static bool probe_wait(double timeout_s, bool (*done)(void))
{
	double deadline = probe_now() + timeout_s;
	while (!done()) {
		double left = deadline - probe_now();
		if (left <= 0)
			return false;
		probe_pump(left > 0.05 ? 50 : (int)(left * 1000) + 1);
	}
	return true;
}

static bool probe_frame_done(void)
{
	return P.frame_done;
}
/* An update covering the whole screen finished (a non-incremental request's
 * answer). */
static bool probe_full_frame(void)
{
	return P.full_done;
}
static bool probe_first_frame(void)
{
	return P.frames_seen > 0;
}
static bool probe_have_cut(void)
{
	return P.cut != NULL;
}
static bool probe_have_cursor(void)
{
	return P.cursor_new;
}
static int probe_want_w, probe_want_h;
static bool probe_has_size(void)
{
	return P.client->width == probe_want_w && P.client->height == probe_want_h;
}

static bool probe_never(void)
{
	return false;
}

/* ---- commands ----------------------------------------------------------------- */

static void probe_dump(const char *path)
{
	rfbClient *c = P.client;
	probe_wait(10, probe_first_frame);
	FILE *f = fopen(path, "wb");
	if (!f) {
		probe_out("{\"event\":\"error\",\"message\":\"cannot write %s\"}", path);
		return;
	}
	fprintf(f, "P6\n%d %d\n255\n", c->width, c->height);
	/* 32-bit pixels, red at shift 0: bytes R, G, B, unused. */
	for (int i = 0; i < c->width * c->height; i++)
		fwrite(c->frameBuffer + (size_t)i * 4, 1, 3, f);
	fclose(f);
	probe_out("{\"event\":\"dump\",\"path\":\"%s\",\"width\":%d,\"height\":%d}", path, c->width,
		  c->height);
}

static void probe_count(double seconds, bool fps)
{
	memset(&P.stats, 0, sizeof P.stats);
	long long b0 = probe_rchar();
	double t0 = probe_now();
	probe_wait(seconds, probe_never);
	double dt = probe_now() - t0;
	long long bytes = probe_rchar() - b0;
	struct probe_stats s = P.stats;
	if (fps)
		probe_out("{\"event\":\"fps\",\"seconds\":%.3f,\"frames\":%ld,\"fps\":%.2f,"
			  "\"bytes\":%lld,\"bytes_per_frame\":%lld}",
			  dt, s.pixel_updates, (double)s.pixel_updates / dt, bytes,
			  s.pixel_updates ? bytes / s.pixel_updates : 0);
	else
		probe_out("{\"event\":\"count\",\"seconds\":%.3f,\"updates\":%ld,"
			  "\"pixel_updates\":%ld,\"cursor_updates\":%ld,\"rects\":%ld,"
			  "\"pixels\":%lld,\"bytes\":%lld}",
			  dt, s.updates, s.pixel_updates, s.cursor_updates, s.rects, s.pixels,
			  bytes);
}

/* "cut" sends its text as ISO-8859-1, '?' for other characters. */
static void probe_cut(const char *utf8)
{
	size_t len = strlen(utf8), n = 0;
	char *l1 = malloc(len + 1);
	if (!l1)
		return;
	const unsigned char *u = (const unsigned char *)utf8;
	for (size_t i = 0; i < len;) {
		if (u[i] < 0x80) {
			l1[n++] = (char)u[i++];
		} else if ((u[i] & 0xe0) == 0xc0 && i + 1 < len) {
			unsigned cp = (unsigned)(u[i] & 0x1f) << 6 | (u[i + 1] & 0x3f);
			l1[n++] = cp < 0x100 ? (char)cp : '?';
			i += 2;
		} else {
			l1[n++] = '?';
			i++;
			while (i < len && (u[i] & 0xc0) == 0x80)
				i++;
		}
	}
	SendClientCutText(P.client, l1, (int)n);
	free(l1);
	probe_out("{\"event\":\"sent\",\"what\":\"cut\",\"length\":%zu}", n);
}

/* Runs one command line; false for "quit". */
static bool probe_command(char *line)
{
	rfbClient *c = P.client;
	char *save = NULL;
	char *cmd = strtok_r(line, " \t\r\n", &save);
	if (!cmd)
		return true;
	char *args[6] = {0};
	int nargs = 0;
	if (strcmp(cmd, "cut") == 0) {
		/* The rest of the line, verbatim. */
		char *rest = save ? save : (char *)"";
		rest[strcspn(rest, "\r\n")] = 0;
		probe_cut(rest);
		return true;
	}
	while (nargs < 6 && (args[nargs] = strtok_r(NULL, " \t\r\n", &save)))
		nargs++;
	double timeout = nargs > 0 ? atof(args[0]) : 10;
	if (strcmp(cmd, "quit") == 0)
		return false;
	if (strcmp(cmd, "sync") == 0) {
		probe_out("{\"event\":\"sync\"}");
	} else if (strcmp(cmd, "size") == 0 && nargs >= 2) {
		probe_want_w = atoi(args[0]);
		probe_want_h = atoi(args[1]);
		if (probe_wait(nargs > 2 ? atof(args[2]) : 10, probe_has_size))
			probe_out("{\"event\":\"size\",\"width\":%d,\"height\":%d}", c->width,
				  c->height);
		else
			probe_out("{\"event\":\"timeout\",\"what\":\"size\",\"width\":%d,"
				  "\"height\":%d}",
				  c->width, c->height);
	} else if (strcmp(cmd, "roundtrip") == 0) {
		P.full_done = false;
		if (SendFramebufferUpdateRequest(c, 0, 0, c->width, c->height, FALSE) &&
		    probe_wait(timeout, probe_full_frame))
			probe_out("{\"event\":\"roundtrip\"}");
		else
			probe_out("{\"event\":\"timeout\",\"what\":\"roundtrip\"}");
	} else if (strcmp(cmd, "first") == 0) {
		if (probe_wait(timeout, probe_first_frame))
			probe_out("{\"event\":\"first\"}");
		else
			probe_out("{\"event\":\"timeout\",\"what\":\"first\"}");
	} else if (strcmp(cmd, "watch") == 0) {
		P.want_any = nargs < 4;
		if (!P.want_any) {
			P.wx = atoi(args[0]), P.wy = atoi(args[1]);
			P.ww = atoi(args[2]), P.wh = atoi(args[3]);
		}
		P.frame_done = false;
		P.cur_hit = false;
		P.watching = true;
		probe_out("{\"event\":\"watching\"}");
	} else if (strcmp(cmd, "frame") == 0) {
		if (!P.watching) {
			P.want_any = true;
			P.frame_done = false;
			P.cur_hit = false;
		}
		P.watching = false;
		if (probe_wait(timeout, probe_frame_done))
			probe_out("{\"event\":\"frame\",\"rects\":%ld,\"bbox\":[%d,%d,%d,%d]}",
				  P.frame_rects, P.fx1, P.fy1, P.fx2 - P.fx1, P.fy2 - P.fy1);
		else
			probe_out("{\"event\":\"timeout\",\"what\":\"frame\"}");
	} else if (strcmp(cmd, "pixel") == 0 && nargs == 2) {
		probe_wait(10, probe_first_frame);
		int x = atoi(args[0]), y = atoi(args[1]);
		if (x < 0 || y < 0 || x >= c->width || y >= c->height) {
			probe_out("{\"event\":\"error\",\"message\":\"pixel off-screen\"}");
		} else {
			const uint8_t *p = c->frameBuffer + ((size_t)y * c->width + x) * 4;
			probe_out(
			    "{\"event\":\"pixel\",\"x\":%d,\"y\":%d,\"rgb\":\"%02x%02x%02x\"}", x,
			    y, p[0], p[1], p[2]);
		}
	} else if (strcmp(cmd, "dump") == 0 && nargs == 1) {
		probe_dump(args[0]);
	} else if (strcmp(cmd, "count") == 0 && nargs == 1) {
		probe_count(timeout, false);
	} else if (strcmp(cmd, "fps") == 0 && nargs == 1) {
		probe_count(timeout, true);
	} else if (strcmp(cmd, "pointer") == 0 && nargs == 3) {
		SendPointerEvent(c, atoi(args[0]), atoi(args[1]), atoi(args[2]));
		probe_out("{\"event\":\"sent\",\"what\":\"pointer\"}");
	} else if ((strcmp(cmd, "key") == 0 || strcmp(cmd, "keydown") == 0 ||
		    strcmp(cmd, "keyup") == 0) &&
		   nargs == 1) {
		uint32_t sym = (uint32_t)strtoul(args[0], NULL, 0);
		if (strcmp(cmd, "keyup") != 0)
			SendKeyEvent(c, sym, TRUE);
		if (strcmp(cmd, "keydown") != 0)
			SendKeyEvent(c, sym, FALSE);
		probe_out("{\"event\":\"sent\",\"what\":\"%s\"}", cmd);
	} else if (strcmp(cmd, "cutwait") == 0) {
		if (probe_wait(timeout, probe_have_cut)) {
			char *j = probe_json_escape(P.cut);
			probe_out("{\"event\":\"cut\",\"text\":\"%s\"}", j ? j : "");
			free(j);
			free(P.cut);
			P.cut = NULL;
		} else {
			probe_out("{\"event\":\"timeout\",\"what\":\"cut\"}");
		}
	} else if (strcmp(cmd, "cursor") == 0) {
		if (probe_wait(timeout, probe_have_cursor)) {
			P.cursor_new = false;
			probe_out("{\"event\":\"cursor\",\"width\":%d,\"height\":%d,\"xhot\":%d,"
				  "\"yhot\":%d}",
				  P.cursor_w, P.cursor_h, P.cursor_xhot, P.cursor_yhot);
		} else {
			probe_out("{\"event\":\"timeout\",\"what\":\"cursor\"}");
		}
	} else {
		probe_out("{\"event\":\"error\",\"message\":\"bad command\"}");
	}
	return true;
}

/* Reads commands from stdin while reading the server; returns at quit/EOF. */
static void probe_stdin_loop(void)
{
	char buf[65536];
	size_t have = 0;
	for (;;) {
		char *nl;
		while ((nl = memchr(buf, '\n', have))) {
			*nl = 0;
			bool more = probe_command(buf);
			size_t used = (size_t)(nl - buf) + 1;
			memmove(buf, nl + 1, have - used);
			have -= used;
			if (!more)
				return;
		}
		if (P.client->buffered > 0) {
			probe_pump(0);
			continue;
		}
		struct pollfd p[2] = {{0, POLLIN, 0}, {P.client->sock, POLLIN, 0}};
		if (poll(p, 2, -1) < 0) {
			if (errno == EINTR)
				continue;
			return;
		}
		if (p[1].revents)
			probe_pump(0);
		if (p[0].revents) {
			if (have == sizeof buf - 1)
				have = 0; /* a line too long: drop it */
			ssize_t n = read(0, buf + have, sizeof buf - 1 - have);
			if (n <= 0)
				return;
			have += (size_t)n;
		}
	}
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		fprintf(stderr, "usage: rfbprobe SOCKET [--encodings E] [--quality N] "
				"[--compress N] [-c COMMAND]... [--stdin]\n");
		return 2;
	}
	const char *path = argv[1];
	const char *encodings = "tight zrle zlib hextile raw";
	int quality = 6, compress = 2;
	const char *mode = "control";
	bool use_stdin = false;
	for (int i = 2; i < argc; i++) {
		if (strcmp(argv[i], "--stdin") == 0)
			use_stdin = true;
		else if (i + 1 < argc && strcmp(argv[i], "--mode") == 0)
			mode = argv[++i];
		else if (i + 1 < argc && strcmp(argv[i], "--encodings") == 0)
			encodings = argv[++i];
		else if (i + 1 < argc && strcmp(argv[i], "--quality") == 0)
			quality = atoi(argv[++i]);
		else if (i + 1 < argc && strcmp(argv[i], "--compress") == 0)
			compress = atoi(argv[++i]);
		else if (i + 1 < argc && strcmp(argv[i], "-c") == 0)
			i++; /* run after connecting */
		else {
			fprintf(stderr, "rfbprobe: unknown option %s\n", argv[i]);
			return 2;
		}
	}
	rfbClientLog = probe_quiet;
	rfbClientErr = probe_err;

	rfbClient *c = rfbGetClient(8, 3, 4);
	P.client = c;
	c->appData.encodingsString = encodings;
	c->appData.qualityLevel = quality;
	c->appData.compressLevel = compress;
	c->appData.enableJPEG = TRUE;
	c->appData.useRemoteCursor = TRUE;
	c->appData.shareDesktop = TRUE;
	c->canHandleNewFBSize = TRUE;
	c->GotFrameBufferUpdate = probe_got_update;
	c->FinishedFrameBufferUpdate = probe_finished_update;
	c->GotCursorShape = probe_got_cursor;
	c->GotXCutText = probe_got_cut;

	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	if (strlen(path) >= sizeof sa.sun_path) {
		fprintf(stderr, "rfbprobe: socket path too long\n");
		return 2;
	}
	strcpy(sa.sun_path, path);
	double t0 = probe_now();
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof sa) < 0) {
		probe_out("{\"event\":\"error\",\"message\":\"connect: %s\"}", strerror(errno));
		return 1;
	}
	double t1 = probe_now();
	if (strcmp(mode, "none") != 0) {
		char line[64];
		int n = snprintf(line, sizeof line, "cubicle-viewer %s\n", mode);
		if (write(fd, line, (size_t)n) != n) {
			probe_out("{\"event\":\"error\",\"message\":\"write: %s\"}",
				  strerror(errno));
			return 1;
		}
	}
	c->sock = fd;
	if (!InitialiseRFBConnection(c)) {
		probe_out("{\"event\":\"error\",\"message\":\"RFB handshake failed\"}");
		return 1;
	}
	double t2 = probe_now();
	c->width = c->si.framebufferWidth;
	c->height = c->si.framebufferHeight;
	/* What rfbInitClient would do: later (incremental) requests ask for this. */
	c->updateRect.x = c->updateRect.y = 0;
	c->updateRect.w = c->width;
	c->updateRect.h = c->height;
	if (!c->MallocFrameBuffer(c) || !SetFormatAndEncodings(c) ||
	    !SendFramebufferUpdateRequest(c, 0, 0, c->width, c->height, FALSE)) {
		probe_out("{\"event\":\"error\",\"message\":\"cannot start updates\"}");
		return 1;
	}
	char *name = probe_json_escape(c->desktopName ? c->desktopName : "");
	probe_out("{\"event\":\"init\",\"width\":%d,\"height\":%d,\"name\":\"%s\","
		  "\"connect_ms\":%.3f,\"init_ms\":%.3f}",
		  c->width, c->height, name ? name : "", (t1 - t0) * 1e3, (t2 - t1) * 1e3);
	free(name);

	bool more = true;
	for (int i = 2; i < argc && more; i++)
		if (strcmp(argv[i], "-c") == 0 && i + 1 < argc) {
			char *cmd = strdup(argv[++i]);
			more = cmd && probe_command(cmd);
			free(cmd);
		} else if (strcmp(argv[i], "--encodings") == 0 ||
			   strcmp(argv[i], "--quality") == 0 || strcmp(argv[i], "--mode") == 0 ||
			   strcmp(argv[i], "--compress") == 0) {
			i++;
		}
	if (more && use_stdin)
		probe_stdin_loop();

	free(P.cut);
	free(c->frameBuffer);
	c->frameBuffer = NULL;
	rfbClientCleanup(c);
	return 0;
}
