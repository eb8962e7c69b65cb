/*
 * desktop: which desktop environment runs, and its wallpaper.
 *
 * The window manager names itself through EWMH (_NET_SUPPORTING_WM_CHECK);
 * Xfce is recognised by $XDG_CURRENT_DESKTOP, its window manager or its
 * session, and its version is asked of its components (`xfce4-session
 * --version`, else `xfwm4 --version`) with a short deadline, once.
 *
 * The wallpaper goes where the desktop draws it. Under Xfce the desktop is
 * xfdesktop's window, painted from xfconf properties, so those are set for
 * every monitor and workspace and xfdesktop repaints itself. Without
 * xfdesktop the root window shows through: the image is decoded, zoomed to
 * cover the screen and set as the root background pixmap. That pixmap is
 * made on a connection of its own closed in RetainPermanent mode, so it
 * outlives envd and can be published in _XROOTPMAP_ID / ESETROOT_PMAP_ID
 * (what compositors and pseudo-transparent terminals read); the previous
 * such pixmap is freed with XKillClient, the Esetroot convention.
 */
#include "desktop.h"
#include "desk-internal.h"
#include "shell.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>
#include <png.h>
#include <turbojpeg.h>
#include <X11/Xatom.h>
#include <X11/Xutil.h>
#include <X11/extensions/Xrandr.h>

#define DESKTOP_CMD_TIMEOUT_MS 3000
#define DESKTOP_MAX_PIXELS     (64L * 1024 * 1024) /* larger images are refused */
#define DESKTOP_MAX_FILE       (128L * 1024 * 1024)

/* Xfce's image-style "zoomed": fill the monitor, keep the aspect, crop. */
#define XFCE_IMAGE_STYLE_ZOOMED "5"

/* Whether a program of that name is an executable in $PATH. */
static bool desktop_in_path(const char *prog)
{
	const char *path = getenv("PATH");
	if (!path || !*path)
		path = "/usr/local/bin:/usr/bin:/bin";
	char buf[4096];
	for (const char *p = path; *p;) {
		const char *colon = strchr(p, ':');
		size_t len = colon ? (size_t)(colon - p) : strlen(p);
		if (len > 0 &&
		    snprintf(buf, sizeof buf, "%.*s/%s", (int)len, p, prog) < (int)sizeof buf &&
		    access(buf, X_OK) == 0)
			return true;
		p += len + (colon ? 1 : 0);
	}
	return false;
}

/*
 * Runs argv (looked up in $PATH) through proc's shell_run, as the session
 * user (its D-Bus session bus, xfconf's, refuses root), with envd's
 * environment and DISPLAY set to the desk's display, stdin empty, and
 * collects its stdout then its stderr into out (NUL-terminated, truncated to
 * size). Kills its process group after DESKTOP_CMD_TIMEOUT_MS. Returns its
 * exit status (0..255), or -1 with e filled when it could not start
 * (ERR_UNAVAILABLE), died of a signal or ran out of time.
 */
static int desktop_run(struct desk *d, const char *const *argv, char *out, size_t size,
		       struct err *e)
{
	char display[300];
	snprintf(display, sizeof display, "DISPLAY=%s", d->name);
	const char *const env[] = {display, NULL};
	struct shell_opts o = {
	    .argv = argv,
	    .env = env,
	    .timeout_ms = DESKTOP_CMD_TIMEOUT_MS,
	    .max_output = size > 1 ? size - 1 : 1,
	    .as = {.uid = d->client_uid, .gid = d->client_gid},
	};
	struct shell_result r;
	struct err why = {0};
	if (shell_run(&o, &r, &why) < 0)
		return err_set(e, ERR_UNAVAILABLE, "cannot run %s: %s", argv[0], why.message);
	size_t n = r.out_len < size - 1 ? r.out_len : size - 1;
	memcpy(out, r.out, n);
	size_t m = r.err_len < size - 1 - n ? r.err_len : size - 1 - n;
	memcpy(out + n, r.err, m);
	out[n + m] = '\0';
	int rc = r.exit_code;
	if (r.timed_out)
		rc = err_set(e, ERR_TIMEOUT, "%s did not answer within %d ms", argv[0],
			     DESKTOP_CMD_TIMEOUT_MS);
	else if (r.signal)
		rc = err_set(e, ERR_UNAVAILABLE, "%s died of signal %d", argv[0], r.signal);
	shell_result_free(&r);
	return rc;
}

/* Whether /proc/PID/environ holds DISPLAY=display. */
static bool desktop_environ_has_display(const char *pid, const char *display)
{
	char path[300];
	snprintf(path, sizeof path, "/proc/%s/environ", pid);
	FILE *f = fopen(path, "re");
	if (!f)
		return false;
	char want[300];
	snprintf(want, sizeof want, "DISPLAY=%s", display);
	bool found = false;
	char entry[4096];
	size_t k = 0;
	int c;
	while (!found && (c = fgetc(f)) != EOF) {
		if (c != '\0') {
			if (k < sizeof entry - 1)
				entry[k++] = (char)c;
			continue;
		}
		entry[k] = '\0';
		found = strcmp(entry, want) == 0;
		k = 0;
	}
	fclose(f);
	return found;
}

/*
 * Whether a process with this command name (/proc/PID/comm) runs on this
 * desk's display (several desktops may share the machine, as in tests).
 */
/* Whether process pid (a /proc name) sees the files envd sees: its mount
 * namespace is envd's. A display's name (":1") means a socket in
 * /tmp/.X11-unix of one mount namespace: on a host that also runs container
 * computers, their sessions' ":1" is another display. Unknown (no access to
 * its namespace link) counts as the same. */
static bool desktop_same_files(const char *pid)
{
	char path[300];
	struct stat mine, theirs;
	snprintf(path, sizeof path, "/proc/%s/ns/mnt", pid);
	if (stat("/proc/self/ns/mnt", &mine) < 0 || stat(path, &theirs) < 0)
		return true;
	return mine.st_ino == theirs.st_ino && mine.st_dev == theirs.st_dev;
}

static bool desktop_process_on_display(struct desk *d, const char *comm)
{
	DIR *dir = opendir("/proc");
	if (!dir)
		return false;
	bool found = false;
	struct dirent *de;
	while (!found && (de = readdir(dir))) {
		if (!isdigit((unsigned char)de->d_name[0]))
			continue;
		char path[300], name[64] = "";
		snprintf(path, sizeof path, "/proc/%s/comm", de->d_name);
		FILE *f = fopen(path, "re");
		if (!f)
			continue;
		if (fgets(name, sizeof name, f)) {
			name[strcspn(name, "\n")] = '\0';
			found = strcmp(name, comm) == 0 &&
				desktop_environ_has_display(de->d_name, d->name) &&
				desktop_same_files(de->d_name);
		}
		fclose(f);
	}
	closedir(dir);
	return found;
}

/* Whether xfdesktop draws this display's desktop: it owns its selection. */
static bool desktop_xfdesktop_runs(struct desk *d)
{
	if (desk_lock(d, NULL) < 0)
		return false;
	char name[64];
	snprintf(name, sizeof name, "XFDESKTOP_SELECTION_%d", d->screen);
	bool owned = XGetSelectionOwner(d->dpy, desk_atom(d, name)) != None;
	desk_unlock(d);
	return owned;
}

/* The first "N.N[.N...]" in text, copied into out ("" if none). */
static void desktop_parse_version(const char *text, char *out, size_t size)
{
	out[0] = '\0';
	for (const char *p = text; *p; p++) {
		if (!isdigit((unsigned char)*p) || (p > text && isalnum((unsigned char)p[-1])))
			continue;
		const char *q = p;
		while (isdigit((unsigned char)*q))
			q++;
		if (*q != '.' || !isdigit((unsigned char)q[1]))
			continue;
		while (isdigit((unsigned char)*q) || (*q == '.' && isdigit((unsigned char)q[1])))
			q++;
		snprintf(out, size, "%.*s", (int)(q - p), p);
		return;
	}
}

/* Xfce's version, asked once of its components; "" when none answers. */
static void desktop_xfce_version(struct desk *d, char *out, size_t size)
{
	static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
	static char cached[64];
	pthread_mutex_lock(&lock);
	if (!cached[0]) {
		static const char *const probes[][3] = {
		    {"xfce4-session", "--version", NULL},
		    {"xfwm4", "--version", NULL},
		    {"xfdesktop", "--version", NULL},
		};
		for (size_t i = 0; i < sizeof probes / sizeof probes[0] && !cached[0]; i++) {
			if (!desktop_in_path(probes[i][0]))
				continue;
			char text[2048];
			if (desktop_run(d, probes[i], text, sizeof text, NULL) == 0)
				desktop_parse_version(text, cached, sizeof cached);
		}
	}
	snprintf(out, size, "%s", cached);
	pthread_mutex_unlock(&lock);
}

/* Whether a colon-separated $XDG_CURRENT_DESKTOP names `want`. */
static bool desktop_xdg_current_is(const char *want)
{
	const char *v = getenv("XDG_CURRENT_DESKTOP");
	if (!v)
		return false;
	size_t wl = strlen(want);
	for (const char *p = v; *p;) {
		size_t len = strcspn(p, ":");
		if (len == wl && strncasecmp(p, want, wl) == 0)
			return true;
		p += len + (p[len] ? 1 : 0);
	}
	return false;
}

/* The EWMH window manager's name into out ("" if none); lock held. */
static void desktop_wm_name(struct desk *d, char *out, size_t size)
{
	out[0] = '\0';
	Atom check = desk_atom(d, "_NET_SUPPORTING_WM_CHECK");
	Atom actual;
	int format;
	unsigned long n, after;
	unsigned char *data = NULL;
	desk_trap_begin();
	Window wm = 0;
	if (XGetWindowProperty(d->dpy, d->root, check, 0, 1, False, XA_WINDOW, &actual, &format, &n,
			       &after, &data) == Success &&
	    data && n == 1)
		wm = (Window)((unsigned long *)data)[0];
	if (data)
		XFree(data);
	data = NULL;
	/* The check window names itself too; a stale id from a dead WM does not. */
	Window self = 0;
	if (wm &&
	    XGetWindowProperty(d->dpy, wm, check, 0, 1, False, XA_WINDOW, &actual, &format, &n,
			       &after, &data) == Success &&
	    data && n == 1)
		self = (Window)((unsigned long *)data)[0];
	if (data)
		XFree(data);
	data = NULL;
	if (wm && self == wm &&
	    XGetWindowProperty(d->dpy, wm, desk_atom(d, "_NET_WM_NAME"), 0, 64, False,
			       desk_atom(d, "UTF8_STRING"), &actual, &format, &n, &after,
			       &data) == Success &&
	    data && actual != None) {
		snprintf(out, size, "%.*s", (int)n, (char *)data);
	}
	if (data)
		XFree(data);
	if (desk_trap_end(d))
		out[0] = '\0';
}

int desk_environment(struct desk *d, struct desk_environment *out, struct err *e)
{
	memset(out, 0, sizeof *out);
	if (desk_lock(d, e) < 0)
		return -1;
	desktop_wm_name(d, out->wm, sizeof out->wm);
	desk_unlock(d);
	bool xfce = desktop_xdg_current_is("XFCE") || strcasecmp(out->wm, "Xfwm4") == 0 ||
		    desktop_process_on_display(d, "xfce4-session");
	if (xfce) {
		snprintf(out->name, sizeof out->name, "xfce");
		desktop_xfce_version(d, out->version, sizeof out->version);
	} else {
		snprintf(out->name, sizeof out->name, "%s", out->wm);
	}
	return 0;
}

/* ---- the image ---- */

struct desktop_rgb {
	unsigned char *px; /* width * height * 3, malloc'd */
	int width, height;
};

static int desktop_decode_png(const char *path, struct desktop_rgb *img, struct err *e)
{
	png_image pi;
	memset(&pi, 0, sizeof pi);
	pi.version = PNG_IMAGE_VERSION;
	if (!png_image_begin_read_from_file(&pi, path))
		return err_param(e, "path", "path: %s is not a readable PNG image (%s)", path,
				 pi.message);
	if ((long)pi.width * pi.height > DESKTOP_MAX_PIXELS || pi.width == 0 || pi.height == 0) {
		png_image_free(&pi);
		return err_param(e, "path", "path: %s is %ux%u, over the %ld-pixel limit", path,
				 pi.width, pi.height, DESKTOP_MAX_PIXELS);
	}
	pi.format = PNG_FORMAT_RGB; /* transparency is composed on black */
	img->px = malloc(PNG_IMAGE_SIZE(pi));
	if (!img->px) {
		png_image_free(&pi);
		return err_set(e, ERR_INTERNAL, "out of memory for a %ux%u image", pi.width,
			       pi.height);
	}
	png_color black = {0, 0, 0};
	if (!png_image_finish_read(&pi, &black, img->px, 0, NULL)) {
		free(img->px);
		img->px = NULL;
		return err_param(e, "path", "path: %s is a damaged PNG image (%s)", path,
				 pi.message);
	}
	img->width = (int)pi.width;
	img->height = (int)pi.height;
	return 0;
}

static int desktop_decode_jpeg(const char *path, struct desktop_rgb *img, struct err *e)
{
	FILE *f = fopen(path, "rbe");
	if (!f)
		return err_param(e, "path", "path: cannot read %s: %s", path, strerror(errno));
	struct stat st;
	if (fstat(fileno(f), &st) < 0 || st.st_size > DESKTOP_MAX_FILE) {
		fclose(f);
		return err_param(e, "path", "path: %s is larger than %ld bytes", path,
				 DESKTOP_MAX_FILE);
	}
	unsigned char *buf = malloc(st.st_size ? (size_t)st.st_size : 1);
	size_t len = buf ? fread(buf, 1, (size_t)st.st_size, f) : 0;
	fclose(f);
	if (!buf)
		return err_set(e, ERR_INTERNAL, "out of memory");
	tjhandle tj = tjInitDecompress();
	int w = 0, h = 0, subsamp = 0, colorspace = 0, rc = -1;
	if (tj && tjDecompressHeader3(tj, buf, len, &w, &h, &subsamp, &colorspace) == 0) {
		if ((long)w * h > DESKTOP_MAX_PIXELS || w <= 0 || h <= 0) {
			err_param(e, "path", "path: %s is %dx%d, over the %ld-pixel limit", path, w,
				  h, DESKTOP_MAX_PIXELS);
		} else if (!(img->px = malloc((size_t)w * h * 3))) {
			err_set(e, ERR_INTERNAL, "out of memory for a %dx%d image", w, h);
		} else if (tjDecompress2(tj, buf, len, img->px, w, 0, h, TJPF_RGB, 0) != 0 &&
			   tjGetErrorCode(tj) == TJERR_FATAL) {
			err_param(e, "path", "path: %s is a damaged JPEG image (%s)", path,
				  tjGetErrorStr2(tj));
			free(img->px);
			img->px = NULL;
		} else {
			img->width = w;
			img->height = h;
			rc = 0;
		}
	} else {
		err_param(e, "path", "path: %s is not a readable JPEG image (%s)", path,
			  tj ? tjGetErrorStr2(tj) : "no decoder");
	}
	if (tj)
		tjDestroy(tj);
	free(buf);
	return rc;
}

/* Which image kind the file's first bytes announce: 'p' PNG, 'j' JPEG. */
static int desktop_image_kind(const char *path, char *kind, struct err *e)
{
	struct stat st;
	if (stat(path, &st) < 0) {
		if (errno == ENOENT || errno == ENOTDIR) {
			return err_set_param(e, ERR_NOT_FOUND, "path", "path: %s does not exist",
					     path);
		}
		return err_param(e, "path", "path: cannot read %s: %s", path, strerror(errno));
	}
	if (!S_ISREG(st.st_mode))
		return err_param(e, "path", "path: %s is not a regular file", path);
	unsigned char magic[8] = {0};
	FILE *f = fopen(path, "rbe");
	if (!f)
		return err_param(e, "path", "path: cannot read %s: %s", path, strerror(errno));
	size_t n = fread(magic, 1, sizeof magic, f);
	fclose(f);
	static const unsigned char png[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'};
	if (n == 8 && memcmp(magic, png, 8) == 0)
		*kind = 'p';
	else if (n >= 3 && magic[0] == 0xFF && magic[1] == 0xD8 && magic[2] == 0xFF)
		*kind = 'j';
	else
		return err_param(e, "path", "path: %s is not a PNG or JPEG image", path);
	return 0;
}

/* Position of the lowest set bit of a colour mask, and its width. */
static void desktop_mask_shift(unsigned long mask, int *shift, int *bits)
{
	*shift = 0;
	*bits = 0;
	if (!mask)
		return;
	while (!(mask & 1)) {
		mask >>= 1;
		(*shift)++;
	}
	while (mask & 1) {
		mask >>= 1;
		(*bits)++;
	}
}

/*
 * An XImage of the screen's size in the root visual's pixel format, showing
 * img zoomed to cover it (aspect kept, the overflow cropped evenly),
 * bilinearly sampled. NULL with e filled when the visual is not TrueColor.
 */
static XImage *desktop_cover_image(Display *dpy, int screen, const struct desktop_rgb *img, int sw,
				   int sh, struct err *e)
{
	Visual *vis = DefaultVisual(dpy, screen);
	int depth = DefaultDepth(dpy, screen);
	if (vis->class != TrueColor && vis->class != DirectColor) {
		err_set(e, ERR_UNAVAILABLE,
			"the root window's visual is not TrueColor; cannot "
			"draw a wallpaper on it");
		return NULL;
	}
	XImage *xi = XCreateImage(dpy, vis, (unsigned)depth, ZPixmap, 0, NULL, (unsigned)sw,
				  (unsigned)sh, 32, 0);
	if (!xi || !(xi->data = malloc((size_t)xi->bytes_per_line * sh))) {
		if (xi)
			XDestroyImage(xi);
		err_set(e, ERR_INTERNAL, "out of memory for a %dx%d wallpaper", sw, sh);
		return NULL;
	}
	int rs, rb, gs, gb, bs, bb;
	desktop_mask_shift(vis->red_mask, &rs, &rb);
	desktop_mask_shift(vis->green_mask, &gs, &gb);
	desktop_mask_shift(vis->blue_mask, &bs, &bb);
	double scale = (double)sw / img->width;
	if ((double)sh / img->height > scale)
		scale = (double)sh / img->height;
	double ox = (img->width - sw / scale) / 2.0, oy = (img->height - sh / scale) / 2.0;
	for (int y = 0; y < sh; y++) {
		double fy = oy + (y + 0.5) / scale - 0.5;
		if (fy < 0)
			fy = 0;
		int y0 = (int)fy;
		if (y0 > img->height - 1)
			y0 = img->height - 1;
		int y1 = y0 + 1 < img->height ? y0 + 1 : y0;
		double wy = fy - y0;
		for (int x = 0; x < sw; x++) {
			double fx = ox + (x + 0.5) / scale - 0.5;
			if (fx < 0)
				fx = 0;
			int x0 = (int)fx;
			if (x0 > img->width - 1)
				x0 = img->width - 1;
			int x1 = x0 + 1 < img->width ? x0 + 1 : x0;
			double wx = fx - x0;
			const unsigned char *p00 = img->px + ((size_t)y0 * img->width + x0) * 3;
			const unsigned char *p01 = img->px + ((size_t)y0 * img->width + x1) * 3;
			const unsigned char *p10 = img->px + ((size_t)y1 * img->width + x0) * 3;
			const unsigned char *p11 = img->px + ((size_t)y1 * img->width + x1) * 3;
			unsigned c[3];
			for (int k = 0; k < 3; k++) {
				double top = p00[k] + (p01[k] - p00[k]) * wx;
				double bottom = p10[k] + (p11[k] - p10[k]) * wx;
				c[k] = (unsigned)(top + (bottom - top) * wy + 0.5);
			}
			unsigned long pixel =
			    ((unsigned long)(c[0] * ((1u << rb) - 1) / 255) << rs) |
			    ((unsigned long)(c[1] * ((1u << gb) - 1) / 255) << gs) |
			    ((unsigned long)(c[2] * ((1u << bb) - 1) / 255) << bs);
			XPutPixel(xi, x, y, pixel);
		}
	}
	return xi;
}

static void desktop_on_io_exit(Display *dpy, void *user)
{
	(void)dpy;
	(void)user; /* the private connection is simply abandoned */
}

/* Reads a PIXMAP-typed root property, 0 if absent. */
static Pixmap desktop_root_pixmap(Display *dpy, Window root, Atom prop)
{
	Atom actual;
	int format;
	unsigned long n, after;
	unsigned char *data = NULL;
	Pixmap p = 0;
	if (XGetWindowProperty(dpy, root, prop, 0, 1, False, XA_PIXMAP, &actual, &format, &n,
			       &after, &data) == Success &&
	    data && n == 1)
		p = (Pixmap)((unsigned long *)data)[0];
	if (data)
		XFree(data);
	return p;
}

/* Decodes the image and makes it the root window's background. */
static int desktop_wallpaper_root(struct desk *d, const char *path, char kind, struct err *e)
{
	struct desktop_rgb img = {0};
	if ((kind == 'p' ? desktop_decode_png(path, &img, e) : desktop_decode_jpeg(path, &img, e)) <
	    0)
		return -1;
	Display *dpy = XOpenDisplay(d->name);
	if (!dpy) {
		free(img.px);
		return err_set(e, ERR_UNAVAILABLE, "cannot open X display '%s'", d->name);
	}
	XSetIOErrorExitHandler(dpy, desktop_on_io_exit, NULL);
	int screen = DefaultScreen(dpy);
	Window root = RootWindow(dpy, screen);
	XWindowAttributes wa;
	if (!XGetWindowAttributes(dpy, root, &wa) || wa.width <= 0 || wa.height <= 0) {
		free(img.px);
		XCloseDisplay(dpy);
		return err_set(e, ERR_UNAVAILABLE, "cannot read the root window's size");
	}
	XImage *xi = desktop_cover_image(dpy, screen, &img, wa.width, wa.height, e);
	free(img.px);
	if (!xi) {
		XCloseDisplay(dpy);
		return -1;
	}
	desk_trap_begin();
	Atom xroot = XInternAtom(dpy, "_XROOTPMAP_ID", False);
	Atom esetroot = XInternAtom(dpy, "ESETROOT_PMAP_ID", False);
	XGrabServer(dpy);
	/* A pixmap left by an earlier Esetroot-style setter (both properties
	 * naming it) belongs to a retained, closed client: free it. Another
	 * program's live pixmap (xfdesktop sets only _XROOTPMAP_ID) is left be. */
	Pixmap old = desktop_root_pixmap(dpy, root, xroot);
	if (old && old == desktop_root_pixmap(dpy, root, esetroot))
		XKillClient(dpy, old);
	Pixmap pix = XCreatePixmap(dpy, root, (unsigned)wa.width, (unsigned)wa.height,
				   (unsigned)DefaultDepth(dpy, screen));
	GC gc = XCreateGC(dpy, pix, 0, NULL);
	XPutImage(dpy, pix, gc, xi, 0, 0, 0, 0, (unsigned)wa.width, (unsigned)wa.height);
	XFreeGC(dpy, gc);
	XDestroyImage(xi);
	XChangeProperty(dpy, root, xroot, XA_PIXMAP, 32, PropModeReplace, (unsigned char *)&pix, 1);
	XChangeProperty(dpy, root, esetroot, XA_PIXMAP, 32, PropModeReplace, (unsigned char *)&pix,
			1);
	XSetWindowBackgroundPixmap(dpy, root, pix);
	XClearWindow(dpy, root);
	XUngrabServer(dpy);
	XSync(dpy, False);
	/* desk_trap_end syncs envd's main connection; errors of this thread on
	 * either connection were recorded by the same handler. */
	int xerr = 0;
	if (desk_lock(d, NULL) == 0) {
		xerr = desk_trap_end(d);
		desk_unlock(d);
	}
	if (!xerr)
		XSetCloseDownMode(dpy, RetainPermanent);
	XCloseDisplay(dpy);
	if (xerr)
		return err_set(e, ERR_UNAVAILABLE,
			       "the X server refused the wallpaper (X error %d)", xerr);
	return 0;
}

/* ---- Xfce: xfconf ---- */

/* Runs xfconf-query with args; a failure becomes ERR_UNAVAILABLE with its output. */
static int desktop_xfconf(struct desk *d, const char *const *argv, char *out, size_t size,
			  struct err *e)
{
	int rc = desktop_run(d, argv, out, size, e);
	if (rc < 0)
		return -1;
	if (rc != 0) {
		out[strcspn(out, "\n")] = '\0';
		return err_set(e, ERR_UNAVAILABLE, "xfconf-query failed (exit %d): %.300s", rc,
			       out);
	}
	return 0;
}

/* Whether prop is /backdrop/screenN/monitorNAME/workspaceN/last-image. */
static bool desktop_is_backdrop_image(const char *prop)
{
	unsigned screen, ws;
	int n = 0;
	char monitor[128];
	if (sscanf(prop, "/backdrop/screen%u/monitor%127[^/]/workspace%u/last-image%n", &screen,
		   monitor, &ws, &n) != 3)
		return false;
	return prop[n] == '\0';
}

/*
 * The last-image properties for the monitors and workspaces there are now,
 * as xfdesktop names them (monitor<RandR output name>), for a desktop whose
 * settings were never written. Appends to props (count *n, room max).
 */
static void desktop_backdrop_defaults(struct desk *d, char props[][256], size_t *n, size_t max)
{
	char monitors[16][64];
	size_t nmon = 0;
	long workspaces = 1;
	if (desk_lock(d, NULL) < 0)
		return;
	desk_trap_begin();
	XRRScreenResources *res = XRRGetScreenResourcesCurrent(d->dpy, d->root);
	for (int i = 0; res && i < res->noutput && nmon < 16; i++) {
		XRROutputInfo *oi = XRRGetOutputInfo(d->dpy, res, res->outputs[i]);
		if (oi && oi->connection == RR_Connected && oi->crtc)
			snprintf(monitors[nmon++], sizeof monitors[0], "%.*s", oi->nameLen,
				 oi->name);
		if (oi)
			XRRFreeOutputInfo(oi);
	}
	if (res)
		XRRFreeScreenResources(res);
	Atom actual;
	int format;
	unsigned long cnt, after;
	unsigned char *data = NULL;
	if (XGetWindowProperty(d->dpy, d->root, desk_atom(d, "_NET_NUMBER_OF_DESKTOPS"), 0, 1,
			       False, XA_CARDINAL, &actual, &format, &cnt, &after,
			       &data) == Success &&
	    data && cnt == 1)
		workspaces = (long)((unsigned long *)data)[0];
	if (data)
		XFree(data);
	desk_trap_end(d);
	desk_unlock(d);
	if (nmon == 0)
		snprintf(monitors[nmon++], sizeof monitors[0], "0");
	if (workspaces < 1 || workspaces > 32)
		workspaces = 1;
	for (size_t m = 0; m < nmon; m++)
		for (long w = 0; w < workspaces && *n < max; w++)
			snprintf(props[(*n)++], 256,
				 "/backdrop/screen0/monitor%.63s/workspace%ld/last-image",
				 monitors[m], w);
}

#define DESKTOP_MAX_BACKDROPS 128

/* Points every Xfce backdrop (monitor x workspace) at path, zoomed. */
static int desktop_wallpaper_xfconf(struct desk *d, const char *path, struct err *e)
{
	static char props[DESKTOP_MAX_BACKDROPS][256];
	static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
	size_t out_size = 64 * 1024;
	char *out = malloc(out_size);
	if (!out)
		return err_set(e, ERR_INTERNAL, "out of memory");
	pthread_mutex_lock(&lock); /* one wallpaper change at a time: props is shared */
	size_t n = 0;
	int rc = -1;
	const char *list[] = {"xfconf-query", "-c", "xfce4-desktop", "-l", NULL};
	if (desktop_xfconf(d, list, out, out_size, e) < 0)
		goto done;
	for (char *line = strtok(out, "\n"); line && n < DESKTOP_MAX_BACKDROPS;
	     line = strtok(NULL, "\n"))
		if (desktop_is_backdrop_image(line))
			snprintf(props[n++], sizeof props[0], "%s", line);
	if (n == 0)
		desktop_backdrop_defaults(d, props, &n, DESKTOP_MAX_BACKDROPS);
	for (size_t i = 0; i < n; i++) {
		const char *set_image[] = {"xfconf-query", "-c",     "xfce4-desktop",
					   "-p",	   props[i], "-n",
					   "-t",	   "string", "-s",
					   path,	   NULL};
		if (desktop_xfconf(d, set_image, out, out_size, e) < 0)
			goto done;
		char style[256];
		snprintf(style, sizeof style, "%.*simage-style",
			 (int)(strlen(props[i]) - strlen("last-image")), props[i]);
		const char *set_style[] = {
		    "xfconf-query", "-c", "xfce4-desktop",	   "-p", style, "-n", "-t",
		    "int",	    "-s", XFCE_IMAGE_STYLE_ZOOMED, NULL};
		if (desktop_xfconf(d, set_style, out, out_size, e) < 0)
			goto done;
	}
	rc = 0;
done:
	pthread_mutex_unlock(&lock);
	free(out);
	return rc;
}

int desk_set_wallpaper(struct desk *d, const char *path, const char **method, struct err *e)
{
	if (method)
		*method = NULL;
	if (!path || !*path)
		return err_param(e, "path", "path: empty; give the image file's path");
	char kind = 0;
	if (desktop_image_kind(path, &kind, e) < 0)
		return -1;
	char *abs = realpath(path, NULL);
	if (!abs)
		return err_param(e, "path", "path: cannot resolve %s: %s", path, strerror(errno));
	int rc;
	if (desktop_xfdesktop_runs(d) && desktop_in_path("xfconf-query")) {
		rc = desktop_wallpaper_xfconf(d, abs, e);
		if (method && rc == 0)
			*method = "xfconf";
	} else {
		rc = desktop_wallpaper_root(d, abs, kind, e);
		if (method && rc == 0)
			*method = "root_window";
	}
	free(abs);
	return rc;
}
