/*
 * xanim: the X clients of the streaming benchmark (bench/stream.py).
 *
 *   xanim scroll [--fps N] [--step PX]
 *   xanim witness WxH+X+Y
 *
 * scroll: grabs the screen as it is (the bench fills it with a desktop first:
 * wallpaper, terminals full of text), maps a full-screen window over it and
 * repaints the whole window every frame with that picture scrolled up by
 * STEP rows (8 by default; it wraps around), at N frames a second (60 by
 * default). Every pixel changes every frame, and the content stays what a
 * desktop looks like, so encoders work as hard as on a real scrolling page.
 * Frames go out with MIT-SHM and XSync, so the X server has drawn each one
 * before the next. Prints "ready" once the window is mapped; on SIGTERM or
 * SIGINT prints "frames N seconds S" (what it really drew) and exits.
 *
 * witness: the input witness for input-to-pixel latency. Maps a window with a
 * striped background; every ButtonPress fills a 24x24 square centred on the
 * pointer with the next of a few colours, and the ButtonRelease paints the
 * stripes back. Prints "ready" once mapped.
 *
 * Both windows are override-redirect: no window manager moves or decorates
 * them, so the bench knows where every pixel is.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ipc.h>
#include <sys/shm.h>
#include <time.h>
#include <X11/Xlib.h>
#include <X11/Xutil.h>
#include <X11/extensions/XShm.h>

#define WITNESS_SQUARE 24

static volatile sig_atomic_t stop_asked;

static void on_signal(int sig)
{
	(void)sig;
	stop_asked = 1;
}

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* An override-redirect window, mapped and exposed before this returns. */
static Window map_window(Display *dpy, int x, int y, unsigned w, unsigned h, unsigned long bg)
{
	int scr = DefaultScreen(dpy);
	XSetWindowAttributes a = {0};
	a.override_redirect = True;
	a.background_pixel = bg;
	a.event_mask = ExposureMask | ButtonPressMask | ButtonReleaseMask | StructureNotifyMask;
	Window win =
	    XCreateWindow(dpy, RootWindow(dpy, scr), x, y, w, h, 0, CopyFromParent, InputOutput,
			  CopyFromParent, CWOverrideRedirect | CWBackPixel | CWEventMask, &a);
	XMapRaised(dpy, win);
	for (;;) {
		XEvent ev;
		XNextEvent(dpy, &ev);
		if (ev.type == Expose)
			break;
	}
	return win;
}

/* A full-screen XImage in a shared memory segment, or NULL. */
static XImage *shm_image(Display *dpy, XShmSegmentInfo *shm, unsigned w, unsigned h)
{
	int scr = DefaultScreen(dpy);
	XImage *img = XShmCreateImage(dpy, DefaultVisual(dpy, scr),
				      (unsigned)DefaultDepth(dpy, scr), ZPixmap, NULL, shm, w, h);
	if (!img)
		return NULL;
	shm->shmid = shmget(IPC_PRIVATE, (size_t)img->bytes_per_line * h, IPC_CREAT | 0600);
	if (shm->shmid < 0)
		return NULL;
	shm->shmaddr = img->data = shmat(shm->shmid, NULL, 0);
	shm->readOnly = False;
	if (shm->shmaddr == (char *)-1 || !XShmAttach(dpy, shm))
		return NULL;
	XSync(dpy, False);
	shmctl(shm->shmid, IPC_RMID, NULL); /* freed when both sides detach */
	return img;
}

static int run_scroll(Display *dpy, int fps, int step)
{
	int scr = DefaultScreen(dpy);
	unsigned w = (unsigned)DisplayWidth(dpy, scr), h = (unsigned)DisplayHeight(dpy, scr);
	XShmSegmentInfo shm;
	XImage *img = shm_image(dpy, &shm, w, h);
	if (!img || !XShmGetImage(dpy, RootWindow(dpy, scr), img, 0, 0, AllPlanes)) {
		fprintf(stderr, "xanim: MIT-SHM is needed to grab and paint the screen\n");
		return 1;
	}
	Window win = map_window(dpy, 0, 0, w, h, BlackPixel(dpy, scr));
	GC gc = XCreateGC(dpy, win, 0, NULL);
	printf("ready\n");
	fflush(stdout);

	double start = now_s(), period = 1.0 / fps, next = start;
	long frames = 0;
	unsigned off = 0;
	while (!stop_asked) {
		/* Rows [off, h) on top, then [0, off) below them: a scroll. */
		XShmPutImage(dpy, win, gc, img, 0, (int)off, 0, 0, w, h - off, False);
		if (off)
			XShmPutImage(dpy, win, gc, img, 0, 0, 0, (int)(h - off), w, off, False);
		XSync(dpy, False);
		frames++;
		off = (off + (unsigned)step) % h;
		next += period;
		double t = now_s();
		if (next < t) {
			next = t; /* behind: no catching up in a burst */
			continue;
		}
		struct timespec d = {(time_t)(next - t),
				     (long)((next - t - (time_t)(next - t)) * 1e9)};
		nanosleep(&d, NULL);
	}
	printf("frames %ld seconds %.3f\n", frames, now_s() - start);
	fflush(stdout);
	XShmDetach(dpy, &shm);
	XCloseDisplay(dpy);
	shmdt(shm.shmaddr);
	return 0;
}

/* The witness's background in a rectangle: grey with darker stripes, not a
 * flat colour, so a square is a real change to encode. */
static void paint_stripes(Display *dpy, Window win, GC gc, int x, int y, int w, int h)
{
	XClearArea(dpy, win, x, y, (unsigned)w, (unsigned)h, False);
	XSetForeground(dpy, gc, 0x606060);
	for (int i = x - (x % 16 + 16) % 16; i < x + w; i += 16) {
		int a = i > x ? i : x, b = i + 8 < x + w ? i + 8 : x + w;
		if (b > a)
			XFillRectangle(dpy, win, gc, a, y, (unsigned)(b - a), (unsigned)h);
	}
}

static int run_witness(Display *dpy, const char *geometry)
{
	unsigned w, h;
	int x, y;
	if (sscanf(geometry, "%ux%u+%d+%d", &w, &h, &x, &y) != 4) {
		fprintf(stderr, "xanim: witness WxH+X+Y\n");
		return 2;
	}
	static const unsigned long colours[] = {0xd03020, 0x20a040, 0x2050d0,
						0xe0c020, 0x9030c0, 0x10a0a0};
	Window win = map_window(dpy, x, y, w, h, 0x808080);
	GC gc = XCreateGC(dpy, win, 0, NULL);
	paint_stripes(dpy, win, gc, 0, 0, (int)w, (int)h);
	XSync(dpy, False);
	printf("ready\n");
	fflush(stdout);
	unsigned n = 0;
	const int half = WITNESS_SQUARE / 2;
	while (!stop_asked) {
		XEvent ev;
		XNextEvent(dpy, &ev);
		int sx = ev.xbutton.x - half, sy = ev.xbutton.y - half;
		if (ev.type == ButtonPress) {
			XSetForeground(dpy, gc,
				       colours[n++ % (sizeof colours / sizeof colours[0])]);
			XFillRectangle(dpy, win, gc, sx, sy, WITNESS_SQUARE, WITNESS_SQUARE);
		} else if (ev.type == ButtonRelease) {
			/* Back as it was: the screen is the same for every run. */
			paint_stripes(dpy, win, gc, sx, sy, WITNESS_SQUARE, WITNESS_SQUARE);
		}
		XFlush(dpy);
	}
	XCloseDisplay(dpy);
	return 0;
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		fprintf(stderr, "usage: xanim scroll [--fps N] [--step PX] | witness WxH+X+Y\n");
		return 2;
	}
	struct sigaction sa = {0};
	sa.sa_handler = on_signal; /* no SA_RESTART: a blocked wait returns */
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	Display *dpy = XOpenDisplay(NULL);
	if (!dpy) {
		fprintf(stderr, "xanim: cannot open the display\n");
		return 1;
	}
	if (strcmp(argv[1], "scroll") == 0) {
		int fps = 60, step = 8;
		for (int i = 2; i + 1 < argc; i += 2) {
			if (strcmp(argv[i], "--fps") == 0)
				fps = atoi(argv[i + 1]);
			else if (strcmp(argv[i], "--step") == 0)
				step = atoi(argv[i + 1]);
		}
		if (fps < 1 || step < 1) {
			fprintf(stderr, "xanim: --fps and --step take positive numbers\n");
			return 2;
		}
		return run_scroll(dpy, fps, step);
	}
	if (strcmp(argv[1], "witness") == 0 && argc == 3)
		return run_witness(dpy, argv[2]);
	fprintf(stderr, "xanim: unknown mode %s\n", argv[1]);
	return 2;
}
