/*
 * vnc-capture: keeps the RFB framebuffer equal to the X screen and the
 * cursor shape current, from one thread with its own X connection.
 *
 * Screen. XDamage on the root window (ReportNonEmpty: one event when damage
 * appears, then XDamageSubtract takes everything accumulated in one region)
 * says what changed; only those rectangles are read, with XShmGetImage into a
 * segment shared with the X server (XGetImage when MIT-SHM cannot be used,
 * e.g. with the server in another IPC namespace), copied into the framebuffer
 * and marked modified, which wakes the viewers' output threads. A still
 * screen costs nothing: the thread sleeps in poll(). Reads happen at most
 * VNC_CAPTURE_HZ times a second, so a full-screen animation costs one read
 * per frame however many damage events it makes. While nobody watches, damage
 * is dropped and the framebuffer marked stale; the next viewer's connection
 * waits for one full read (vnc_capture_refresh) before its first frame.
 *
 * Cursor. XFixes reports every cursor change; the image (ARGB, premultiplied)
 * becomes a libvncserver rich cursor: colours un-premultiplied, the alpha
 * kept for drawing it into frames of viewers that cannot show cursors, and a
 * dithered 1-bit mask for the RichCursor pseudo-encoding. libvncserver reads
 * screen->cursor without a lock while it sends the shape, so a replaced shape
 * cannot be freed at once: shapes are kept by XFixes serial (a desktop uses a
 * handful), and when that cache is full every viewer's send lock is taken
 * once, so no send still holds an old shape, before the old ones are freed.
 *
 * Size. When the root window changes size (set_screen_size, XRandR) the
 * framebuffer takes the new size in place (it was allocated for the largest
 * one) and every viewer that understands NewFBSize or ExtendedDesktopSize is
 * told; the whole screen is read again.
 *
 * Clipboard. The same connection hears when CLIPBOARD changes owner (XFixes
 * selection events) and tells vnc-input.c, which sends the text to viewers.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <X11/Xutil.h>
#include <X11/extensions/Xdamage.h>
#include <X11/extensions/Xfixes.h>

#include "clock.h"
#include "envd.h"
#include "randr.h"
#include "vnc-internal.h"
#include "xshm.h"

#include <rfb/rfbregion.h> /* after rfb.h, which it needs */

#define VNC_CAPTURE_HZ 60
/* More damaged rectangles than this are read as their bounding box: one
 * round trip instead of many. */
#define VNC_MAX_RECTS 32
/* Largest cursor side sent: libvncserver fails (and desynchronises the
 * viewer) when a shape does not fit its 30000-byte update buffer. */
#define VNC_CURSOR_MAX 64
/* How long a new viewer waits for the full read before its first frame. */
#define VNC_REFRESH_WAIT_MS 2000

/* Xlib calls this when the connection breaks; returning (instead of the
 * default exit) leaves the Display inert and the thread ends. */
static void vnc_capture_io_exit(Display *dpy, void *user)
{
	(void)dpy;
	((struct vnc *)user)->x_io_dead = true;
}

/* ---- reading the screen --------------------------------------------------- */

/* Reads one rectangle (inside the screen) into the framebuffer. */
static bool vnc_capture_rect(struct vnc *v, int x, int y, int w, int h)
{
	XImage *img;
	if (v->shm_ok) {
		img = XShmCreateImage(v->dpy, v->visual, (unsigned)v->depth, ZPixmap,
				      v->shm.shmaddr, &v->shm, (unsigned)w, (unsigned)h);
		if (img && !XShmGetImage(v->dpy, v->root, img, x, y, AllPlanes)) {
			XDestroyImage(img);
			img = NULL;
		}
	} else {
		img =
		    XGetImage(v->dpy, v->root, x, y, (unsigned)w, (unsigned)h, AllPlanes, ZPixmap);
	}
	if (!img)
		return false;
	size_t stride = (size_t)v->width * 4;
	for (int r = 0; r < h; r++)
		memcpy(v->fb + (size_t)(y + r) * stride + (size_t)x * 4,
		       img->data + (size_t)r * (size_t)img->bytes_per_line, (size_t)w * 4);
	XDestroyImage(img);
	return true;
}

/* Clips a rectangle to what both the framebuffer and the root window hold. */
static bool vnc_clip_rect(struct vnc *v, int *x, int *y, int *w, int *h)
{
	int maxw = v->width < v->root_w ? v->width : v->root_w;
	int maxh = v->height < v->root_h ? v->height : v->root_h;
	int x2 = *x + *w, y2 = *y + *h;
	if (*x < 0)
		*x = 0;
	if (*y < 0)
		*y = 0;
	if (x2 > maxw)
		x2 = maxw;
	if (y2 > maxh)
		y2 = maxh;
	*w = x2 - *x;
	*h = y2 - *y;
	return *w > 0 && *h > 0;
}

/* Takes the accumulated damage and reads just that. */
static void vnc_capture_damage(struct vnc *v)
{
	XDamageSubtract(v->dpy, v->damage, None, v->region);
	int n = 0;
	XRectangle bounds;
	XRectangle *rects = XFixesFetchRegionAndBounds(v->dpy, v->region, &n, &bounds);
	if (!rects)
		return;
	XRectangle *list = rects;
	if (n > VNC_MAX_RECTS) {
		list = &bounds;
		n = 1;
	}
	sraRegionPtr changed = sraRgnCreate();
	for (int i = 0; i < n; i++) {
		int x = list[i].x, y = list[i].y, w = list[i].width, h = list[i].height;
		if (!vnc_clip_rect(v, &x, &y, &w, &h) || !vnc_capture_rect(v, x, y, w, h))
			continue;
		sraRegionPtr r = sraRgnCreateRect(x, y, x + w, y + h);
		sraRgnOr(changed, r);
		sraRgnDestroy(r);
	}
	XFree(rects);
	if (!sraRgnEmpty(changed))
		rfbMarkRegionAsModified(v->screen, changed);
	sraRgnDestroy(changed);
}

/* Reads the whole screen (a viewer arrives after a time without any). */
static void vnc_capture_full(struct vnc *v)
{
	XDamageSubtract(v->dpy, v->damage, None, None);
	int x = 0, y = 0, w = v->width, h = v->height;
	if (vnc_clip_rect(v, &x, &y, &w, &h) && vnc_capture_rect(v, x, y, w, h))
		rfbMarkRectAsModified(v->screen, x, y, x + w, y + h);
}

/*
 * The screen changed size: the framebuffer takes it (rows of the new width)
 * and the viewers are told. What rfbNewFramebuffer does, but for the size
 * alone: that function also resets the pixel format to libvncserver's
 * default channel order (the framebuffer keeps X's 0x00RRGGBB) and
 * reinstalls every viewer's translation tables under their output threads.
 */
static void vnc_capture_resize(struct vnc *v)
{
	int w = v->root_w, h = v->root_h;
	if (w > v->fb_w || h > v->fb_h || w < 1 || h < 1) {
		fprintf(stderr, "envd: vnc: the screen is now %dx%d, over the %dx%d served\n", w, h,
			v->fb_w, v->fb_h);
		return;
	}
	__atomic_store_n(&v->width, w, __ATOMIC_RELAXED);
	__atomic_store_n(&v->height, h, __ATOMIC_RELAXED);
	rfbScreenInfoPtr s = v->screen;
	s->width = w;
	s->height = h;
	s->paddedWidthInBytes = w * 4;
	if (s->cursorX >= w)
		s->cursorX = w - 1;
	if (s->cursorY >= h)
		s->cursorY = h - 1;
	vnc_capture_full(v); /* the rows are laid out anew */
	rfbClientIteratorPtr it = rfbGetClientIterator(s);
	rfbClientPtr cl;
	while ((cl = rfbClientIteratorNext(it))) {
		pthread_mutex_lock(&cl->updateMutex);
		sraRgnDestroy(cl->modifiedRegion);
		cl->modifiedRegion = sraRgnCreateRect(0, 0, w, h);
		sraRgnMakeEmpty(cl->copyRegion);
		cl->copyDX = cl->copyDY = 0;
		if (cl->useNewFBSize || cl->useExtDesktopSize)
			cl->newFBSizePending = TRUE;
		pthread_cond_signal(&cl->updateCond);
		pthread_mutex_unlock(&cl->updateMutex);
	}
	rfbReleaseClientIterator(it);
}

/* ---- cursor --------------------------------------------------------------- */

static void vnc_cursor_free(rfbCursorPtr c)
{
	rfbFreeCursor(c); /* the arrays (cleanup* flags); not the struct itself */
	free(c);
}

/* A libvncserver rich cursor from an XFixes image, or NULL. */
static rfbCursorPtr vnc_cursor_make(struct vnc *v, const XFixesCursorImage *ci)
{
	int w = ci->width < VNC_CURSOR_MAX ? ci->width : VNC_CURSOR_MAX;
	int h = ci->height < VNC_CURSOR_MAX ? ci->height : VNC_CURSOR_MAX;
	if (w <= 0 || h <= 0)
		return NULL;
	rfbCursorPtr c = calloc(1, sizeof *c);
	unsigned char *rich = malloc((size_t)w * (size_t)h * 4);
	unsigned char *alpha = malloc((size_t)w * (size_t)h);
	if (!c || !rich || !alpha) {
		free(c);
		free(rich);
		free(alpha);
		return NULL;
	}
	for (int y = 0; y < h; y++)
		for (int x = 0; x < w; x++) {
			unsigned long p = ci->pixels[(size_t)y * ci->width + (size_t)x];
			uint32_t a = (p >> 24) & 0xff, r = (p >> 16) & 0xff, g = (p >> 8) & 0xff,
				 b = p & 0xff;
			if (a > 0 && a < 255) { /* XFixes colours are premultiplied */
				r = r * 255 / a > 255 ? 255 : r * 255 / a;
				g = g * 255 / a > 255 ? 255 : g * 255 / a;
				b = b * 255 / a > 255 ? 255 : b * 255 / a;
			}
			uint32_t px = r << 16 | g << 8 | b;
			memcpy(rich + ((size_t)y * (size_t)w + (size_t)x) * 4, &px, 4);
			alpha[(size_t)y * (size_t)w + (size_t)x] = (unsigned char)a;
		}
	c->width = (unsigned short)w;
	c->height = (unsigned short)h;
	c->xhot = (unsigned short)(ci->xhot < (unsigned short)w ? ci->xhot : w - 1);
	c->yhot = (unsigned short)(ci->yhot < (unsigned short)h ? ci->yhot : h - 1);
	c->richSource = rich;
	c->alphaSource = alpha;
	c->alphaPreMultiplied = FALSE;
	c->cleanupRichSource = TRUE; /* both richSource and alphaSource */
	c->mask = (unsigned char *)rfbMakeMaskFromAlphaSource(w, h, alpha);
	c->cleanupMask = TRUE;
	if (!c->mask) {
		vnc_cursor_free(c);
		return NULL;
	}
	/* The 1-bit shape for viewers that only take XCursor; made now, since
	 * libvncserver would otherwise make it lazily from several threads. */
	rfbMakeXCursorFromRichCursor(v->screen, c);
	if (!c->source) {
		vnc_cursor_free(c);
		return NULL;
	}
	c->cleanup = FALSE; /* the struct is ours */
	return c;
}

/* Frees every cached shape except the current one (see the top). */
static void vnc_cursor_evict(struct vnc *v)
{
	rfbClientIteratorPtr it = rfbGetClientIterator(v->screen);
	rfbClientPtr cl;
	while ((cl = rfbClientIteratorNext(it))) {
		pthread_mutex_lock(&cl->sendMutex);
		pthread_mutex_unlock(&cl->sendMutex);
	}
	rfbReleaseClientIterator(it);
	int kept = 0;
	for (int i = 0; i < v->ncursors; i++) {
		if (v->cursors[i].cursor == v->screen->cursor)
			v->cursors[kept++] = v->cursors[i];
		else
			vnc_cursor_free(v->cursors[i].cursor);
	}
	v->ncursors = kept;
}

static void vnc_cursor_update(struct vnc *v)
{
	XFixesCursorImage *ci = XFixesGetCursorImage(v->dpy);
	if (!ci)
		return;
	rfbCursorPtr c = NULL;
	for (int i = 0; i < v->ncursors && !c; i++)
		if (v->cursors[i].serial == ci->cursor_serial)
			c = v->cursors[i].cursor;
	if (!c && (c = vnc_cursor_make(v, ci))) {
		if (v->ncursors == VNC_CURSOR_CACHE)
			vnc_cursor_evict(v);
		v->cursors[v->ncursors++] = (struct vnc_cursor){ci->cursor_serial, c};
	}
	XFree(ci);
	if (!c || c == v->screen->cursor)
		return;
	rfbSetCursor(v->screen, c); /* flags the new shape for every viewer */
	/* ...whose output threads sleep until something changes: wake them. */
	rfbClientIteratorPtr it = rfbGetClientIterator(v->screen);
	rfbClientPtr cl;
	while ((cl = rfbClientIteratorNext(it))) {
		pthread_mutex_lock(&cl->updateMutex);
		pthread_cond_signal(&cl->updateCond);
		pthread_mutex_unlock(&cl->updateMutex);
	}
	rfbReleaseClientIterator(it);
}

/* ---- the thread ----------------------------------------------------------- */

static void *vnc_capture_main(void *arg)
{
	struct vnc *v = arg;
	vnc_cursor_update(v);
	int64_t last_read = 0;
	bool damaged = false;
	for (;;) {
		bool cursor = false, clip = false, resized = false;
		while (!v->x_io_dead && XPending(v->dpy)) {
			XEvent ev;
			XNextEvent(v->dpy, &ev);
			if (ev.type == v->damage_base + XDamageNotify)
				damaged = true;
			else if (ev.type == v->fixes_base + XFixesCursorNotify)
				cursor = true;
			else if (ev.type == v->fixes_base + XFixesSelectionNotify)
				clip = true;
			else if (ev.type == ConfigureNotify && ev.xconfigure.window == v->root) {
				v->root_w = ev.xconfigure.width;
				v->root_h = ev.xconfigure.height;
				resized = v->root_w != v->width || v->root_h != v->height;
			}
		}
		if (v->x_io_dead)
			break;
		if (cursor)
			vnc_cursor_update(v);
		if (clip)
			vnc_clip_changed(v);
		if (resized)
			vnc_capture_resize(v);

		pthread_mutex_lock(&v->lock);
		bool stop = v->capture_stop;
		unsigned asked = v->refresh_asked;
		bool watched = v->viewers > 0;
		if (damaged && !watched)
			v->fb_stale = true;
		pthread_mutex_unlock(&v->lock);
		if (stop)
			break;

		if (asked != v->refresh_done) {
			vnc_capture_full(v);
			XSync(v->dpy, False);
			damaged = false;
			last_read = clock_now_ms();
			pthread_mutex_lock(&v->lock);
			v->fb_stale = false;
			v->refresh_done = asked;
			pthread_cond_broadcast(&v->cond);
			pthread_mutex_unlock(&v->lock);
			continue;
		}
		int timeout = -1;
		if (damaged && !watched) {
			XDamageSubtract(v->dpy, v->damage, None, None); /* nobody to show it */
			damaged = false;
		} else if (damaged) {
			int64_t now = clock_now_ms(), due = last_read + 1000 / VNC_CAPTURE_HZ;
			if (now >= due) {
				vnc_capture_damage(v);
				damaged = false;
				last_read = now;
				continue;
			}
			timeout = (int)(due - now);
		}
		/* Round trips above (the cursor image) may have queued events that
		 * poll() cannot see any more; XPending also flushes requests. */
		if (XPending(v->dpy))
			continue;
		struct pollfd p[2] = {{ConnectionNumber(v->dpy), POLLIN, 0},
				      {v->x_wake[0], POLLIN, 0}};
		if (poll(p, 2, timeout) > 0 && p[1].revents) {
			char buf[64];
			while (read(v->x_wake[0], buf, sizeof buf) > 0)
				;
		}
	}
	if (v->x_io_dead) {
		fprintf(stderr, "envd: vnc: lost the X display; viewers keep the last frame\n");
		pthread_mutex_lock(&v->lock);
		v->x_dead = true;
		pthread_cond_broadcast(&v->cond);
		pthread_mutex_unlock(&v->lock);
	}
	return NULL;
}

/* ---- interface (vnc-internal.h) ------------------------------------------ */

int vnc_capture_open(struct vnc *v, struct err *e)
{
	const char *name = v->env->display;
	Display *dpy = XOpenDisplay(name);
	if (!dpy)
		return err_set(e, ERR_UNAVAILABLE, "cannot open X display '%s'", name);
	v->dpy = dpy;
	XSetIOErrorExitHandler(dpy, vnc_capture_io_exit, v);
	int scr = DefaultScreen(dpy);
	v->root = RootWindow(dpy, scr);
	v->visual = DefaultVisual(dpy, scr);
	v->depth = DefaultDepth(dpy, scr);
	int err_base, major = 0, minor = 0;
	if (!XDamageQueryExtension(dpy, &v->damage_base, &err_base))
		return err_set(e, ERR_UNAVAILABLE, "X display '%s' lacks the DAMAGE extension",
			       name);
	if (!XFixesQueryExtension(dpy, &v->fixes_base, &err_base) ||
	    !XFixesQueryVersion(dpy, &major, &minor) || major < 2)
		return err_set(e, ERR_UNAVAILABLE, "X display '%s' lacks XFIXES 2 or later", name);

	/* The framebuffer takes X's pixels as they are: 32-bit 0x00RRGGBB. */
	int bpp = 0, nformats = 0;
	XPixmapFormatValues *formats = XListPixmapFormats(dpy, &nformats);
	for (int i = 0; i < nformats; i++)
		if (formats[i].depth == v->depth)
			bpp = formats[i].bits_per_pixel;
	if (formats)
		XFree(formats);
	int host_order = rfbEndianTest ? LSBFirst : MSBFirst;
	if (v->visual->class != TrueColor || v->depth != 24 || bpp != 32 ||
	    v->visual->red_mask != 0xff0000 || v->visual->green_mask != 0xff00 ||
	    v->visual->blue_mask != 0xff || ImageByteOrder(dpy) != host_order)
		return err_set(e, ERR_UNAVAILABLE,
			       "X display '%s' is %d-bit (%d bits per pixel): the RFB server "
			       "needs 24-bit TrueColor in 32-bit pixels",
			       name, v->depth, bpp);
	XWindowAttributes wa;
	if (!XGetWindowAttributes(dpy, v->root, &wa))
		return err_set(e, ERR_UNAVAILABLE, "cannot read the root window's size");
	v->width = v->root_w = wa.width;
	v->height = v->root_h = wa.height;
	/* Room for the largest screen, so a resize never reallocates. */
	struct err re = {0};
	if (randr_max_size(dpy, v->root, &v->fb_w, &v->fb_h, &re) < 0 || v->fb_w < v->width ||
	    v->fb_h < v->height) {
		v->fb_w = v->width;
		v->fb_h = v->height;
	}

	v->shm_ok = xshm_attach(dpy, v->root, v->visual, v->depth,
				(size_t)v->fb_w * (size_t)v->fb_h * 4, &v->shm);
	if (!v->shm_ok)
		fprintf(stderr, "envd: vnc: MIT-SHM unavailable; reading the screen with "
				"XGetImage\n");

	v->damage = XDamageCreate(dpy, v->root, XDamageReportNonEmpty);
	v->region = XFixesCreateRegion(dpy, NULL, 0);
	XFixesSelectCursorInput(dpy, v->root, XFixesDisplayCursorNotifyMask);
	v->clipboard_atom = XInternAtom(dpy, "CLIPBOARD", False);
	XFixesSelectSelectionInput(dpy, v->root, v->clipboard_atom,
				   XFixesSetSelectionOwnerNotifyMask);
	XSelectInput(dpy, v->root, StructureNotifyMask);
	XSync(dpy, False);
	if (pipe2(v->x_wake, O_CLOEXEC | O_NONBLOCK) < 0)
		return err_set(e, ERR_INTERNAL, "pipe: %s", strerror(errno));
	return 0;
}

int vnc_capture_start(struct vnc *v, struct err *e)
{
	int rc = pthread_create(&v->x_thread, NULL, vnc_capture_main, v);
	if (rc != 0)
		return err_set(e, ERR_INTERNAL, "cannot start a thread: %s", strerror(rc));
	v->x_started = true;
	return 0;
}

void vnc_capture_refresh(struct vnc *v)
{
	pthread_mutex_lock(&v->lock);
	if (!v->fb_stale || v->x_dead || !v->x_started) {
		pthread_mutex_unlock(&v->lock);
		return;
	}
	unsigned want = ++v->refresh_asked;
	pthread_mutex_unlock(&v->lock);
	(void)!write(v->x_wake[1], "r", 1);

	struct timespec deadline = clock_deadline(CLOCK_MONOTONIC, VNC_REFRESH_WAIT_MS);
	pthread_mutex_lock(&v->lock);
	while ((int)(v->refresh_done - want) < 0 && !v->x_dead && !v->capture_stop)
		if (pthread_cond_timedwait(&v->cond, &v->lock, &deadline) == ETIMEDOUT)
			break;
	pthread_mutex_unlock(&v->lock);
}

void vnc_capture_stop(struct vnc *v)
{
	if (!v->x_started)
		return;
	pthread_mutex_lock(&v->lock);
	v->capture_stop = true;
	pthread_cond_broadcast(&v->cond);
	pthread_mutex_unlock(&v->lock);
	(void)!write(v->x_wake[1], "q", 1);
	pthread_join(v->x_thread, NULL);
	v->x_started = false;
}

void vnc_capture_close(struct vnc *v)
{
	for (int i = 0; i < v->ncursors; i++)
		vnc_cursor_free(v->cursors[i].cursor);
	v->ncursors = 0;
	if (v->dpy) {
		if (!v->x_io_dead) {
			if (v->damage)
				XDamageDestroy(v->dpy, v->damage);
			if (v->region)
				XFixesDestroyRegion(v->dpy, v->region);
			xshm_detach(v->dpy, &v->shm, true);
			XSync(v->dpy, False);
		}
		XCloseDisplay(v->dpy);
		v->dpy = NULL;
	}
	xshm_detach(NULL, &v->shm, false); /* the connection broke: unmap it only */
	v->shm_ok = false;
	for (int i = 0; i < 2; i++)
		if (v->x_wake[i] >= 0)
			close(v->x_wake[i]);
}
