#include "randr.h"

#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <X11/extensions/Xrandr.h>

/* Millimetres at 96 DPI, what Xvfb is started with (-dpi 96). */
static int randr_mm(int px)
{
	return (int)((double)px * 25.4 / 96.0 + 0.5);
}

int randr_max_size(Display *dpy, Window root, int *w, int *h, struct err *e)
{
	int ev, er, major = 0, minor = 0, minw, minh;
	if (!XRRQueryExtension(dpy, &ev, &er) || !XRRQueryVersion(dpy, &major, &minor) ||
	    (major == 1 && minor < 2) || !XRRGetScreenSizeRange(dpy, root, &minw, &minh, w, h))
		return err_set(e, ERR_CONFLICT,
			       "this X server cannot change its screen size (it lacks RandR 1.2)");
	return 0;
}

static int randr_check(const char *name, int v, int max, int maxw, int maxh, struct err *e)
{
	if (v < RANDR_MIN_SIZE || v > max)
		return err_param(e, name,
				 "%s: %d is outside %d..%d (this screen can be at most %dx%d)",
				 name, v, RANDR_MIN_SIZE, max, maxw, maxh);
	return 0;
}

/* The mode of exactly w x h among the server's, or a new one. */
static RRMode randr_mode(Display *dpy, Window root, XRRScreenResources *res, int w, int h)
{
	for (int i = 0; i < res->nmode; i++)
		if ((int)res->modes[i].width == w && (int)res->modes[i].height == h)
			return res->modes[i].id;
	char name[32];
	snprintf(name, sizeof name, "%dx%d", w, h);
	XRRModeInfo *mi = XRRAllocModeInfo(name, (int)strlen(name));
	if (!mi)
		return None;
	mi->width = (unsigned)w;
	mi->height = (unsigned)h;
	/* Timings mean nothing to a virtual screen; a plausible 60 Hz. */
	mi->hTotal = (unsigned)w;
	mi->vTotal = (unsigned)h;
	mi->dotClock = (unsigned long)w * (unsigned long)h * 60;
	RRMode m = XRRCreateMode(dpy, root, mi);
	XRRFreeModeInfo(mi);
	return m;
}

/* The first connected output and its CRTC (the one it uses, or may use). */
static int randr_output(Display *dpy, XRRScreenResources *res, RROutput *out, RRCrtc *crtc,
			XRROutputInfo **info)
{
	for (int i = 0; i < res->noutput; i++) {
		XRROutputInfo *oi = XRRGetOutputInfo(dpy, res, res->outputs[i]);
		if (!oi)
			continue;
		if (oi->connection == RR_Connected && (oi->crtc || oi->ncrtc > 0)) {
			*out = res->outputs[i];
			*crtc = oi->crtc ? oi->crtc : oi->crtcs[0];
			*info = oi;
			return 0;
		}
		XRRFreeOutputInfo(oi);
	}
	return -1;
}

static int randr_apply(Display *dpy, Window root, XRRScreenResources *res, int w, int h,
		       struct err *e)
{
	RROutput out;
	RRCrtc crtc;
	XRROutputInfo *oi;
	if (randr_output(dpy, res, &out, &crtc, &oi) < 0)
		return err_set(e, ERR_UNAVAILABLE,
			       "the X server has no connected output to resize");
	RRMode mode = randr_mode(dpy, root, res, w, h);
	bool listed = false;
	for (int i = 0; i < oi->nmode && mode; i++)
		listed = listed || oi->modes[i] == mode;
	XRRFreeOutputInfo(oi);
	if (!mode)
		return err_set(e, ERR_UNAVAILABLE, "the X server refused a %dx%d mode", w, h);
	if (!listed)
		XRRAddOutputMode(dpy, out, mode);

	XWindowAttributes wa;
	if (!XGetWindowAttributes(dpy, root, &wa))
		return err_set(e, ERR_UNAVAILABLE, "cannot read the root window's size");
	/* The CRTC must fit the screen at every step: grow the screen to hold
	 * both the old and the new size, switch the CRTC, then shrink it. */
	int bw = w > wa.width ? w : wa.width, bh = h > wa.height ? h : wa.height;
	if (bw != wa.width || bh != wa.height)
		XRRSetScreenSize(dpy, root, bw, bh, randr_mm(bw), randr_mm(bh));
	Status st = XRRSetCrtcConfig(dpy, res, crtc, CurrentTime, 0, 0, mode, RR_Rotate_0, &out, 1);
	if (st != RRSetConfigSuccess)
		return err_set(e, ERR_UNAVAILABLE, "the X server refused the %dx%d mode (%d)", w, h,
			       (int)st);
	if (bw != w || bh != h)
		XRRSetScreenSize(dpy, root, w, h, randr_mm(w), randr_mm(h));
	return 0;
}

int randr_set_size(Display *dpy, Window root, int width, int height, struct err *e)
{
	int maxw, maxh;
	if (randr_max_size(dpy, root, &maxw, &maxh, e) < 0 ||
	    randr_check("width", width, maxw, maxw, maxh, e) < 0 ||
	    randr_check("height", height, maxh, maxw, maxh, e) < 0)
		return -1;
	XRRScreenResources *res = XRRGetScreenResourcesCurrent(dpy, root);
	if (!res)
		return err_set(e, ERR_UNAVAILABLE, "cannot read the X server's screen resources");
	/* Clients see the final state only (xrandr does the same). */
	XGrabServer(dpy);
	int rc = randr_apply(dpy, root, res, width, height, e);
	XUngrabServer(dpy);
	XSync(dpy, False);
	XRRFreeScreenResources(res);
	if (rc < 0)
		return -1;
	/* What the server really did: an error in the middle went to the
	 * caller's handler, not to us. */
	XWindowAttributes wa;
	if (!XGetWindowAttributes(dpy, root, &wa) || wa.width != width || wa.height != height)
		return err_set(e, ERR_UNAVAILABLE,
			       "the X server did not take the size %dx%d (the screen is %dx%d)",
			       width, height, wa.width, wa.height);
	return 0;
}
