#include "desk-internal.h"

#include "randr.h"

#include <poll.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <string.h>
#include <X11/extensions/XTest.h>

/* X errors of the calling thread, caught instead of exiting (see desk_trap_*). */
static _Thread_local int desk_x_error;

static int desk_on_x_error(Display *dpy, XErrorEvent *ev)
{
	(void)dpy;
	if (!desk_x_error)
		desk_x_error = ev->error_code;
	return 0;
}

/* Xlib calls this when the connection breaks. Returning (rather than exiting,
 * the default) leaves the Display inert; the desk reconnects on next use. */
static void desk_on_io_exit(Display *dpy, void *user)
{
	(void)dpy;
	struct desk *d = user;
	if (d)
		d->dead = true;
}

static int desk_on_io_error(Display *dpy)
{
	(void)dpy;
	return 0;
}

void desk_trap_begin(void)
{
	desk_x_error = 0;
}

int desk_trap_end(struct desk *d)
{
	XSync(d->dpy, False);
	int code = desk_x_error;
	desk_x_error = 0;
	return code;
}

static int desk_connect(struct desk *d, struct err *e)
{
	Display *dpy = XOpenDisplay(d->name);
	if (!dpy)
		return err_set(e, ERR_UNAVAILABLE, "cannot open X display '%s'", d->name);
	int ev, er, maj, min;
	if (!XTestQueryExtension(dpy, &ev, &er, &maj, &min)) {
		XCloseDisplay(dpy);
		return err_set(e, ERR_UNAVAILABLE, "X display '%s' lacks the XTEST extension",
			       d->name);
	}
	XSetIOErrorExitHandler(dpy, desk_on_io_exit, d);
	d->dpy = dpy;
	d->screen = DefaultScreen(dpy);
	d->root = RootWindow(dpy, d->screen);
	d->dead = false;
	/* Keymap, scratch keycodes and the shared screen image belong to the old
	 * connection: the families rebuild them lazily. */
	free(d->keymap);
	d->keymap = NULL;
	d->nscratch = 0;
	d->shm_image = NULL;
	d->shm_ok = false;
	return 0;
}

struct desk *desk_open(const char *display, struct err *e)
{
	static pthread_once_t once = PTHREAD_ONCE_INIT;
	pthread_once(&once, (void (*)(void))XInitThreads);
	XSetErrorHandler(desk_on_x_error);
	XSetIOErrorHandler(desk_on_io_error);

	if (!display)
		display = getenv("DISPLAY");
	if (!display || !*display) {
		err_set(e, ERR_UNAVAILABLE, "no X display: DISPLAY is not set");
		return NULL;
	}
	struct desk *d = calloc(1, sizeof *d);
	if (!d || !(d->name = strdup(display))) {
		free(d);
		err_set(e, ERR_INTERNAL, "out of memory");
		return NULL;
	}
	pthread_mutex_init(&d->lock, NULL);
	d->client_uid = (uid_t)-1;
	d->client_gid = (gid_t)-1;
	if (desk_connect(d, e) < 0) {
		free(d->name);
		free(d);
		return NULL;
	}
	return d;
}

void desk_close(struct desk *d)
{
	if (!d)
		return;
	if (d->dpy) {
		if (!d->dead)
			desk_screen_release(d);
		XCloseDisplay(d->dpy);
	}
	free(d->keymap);
	pthread_mutex_destroy(&d->lock);
	free(d->name);
	free(d);
}

void desk_set_client(struct desk *d, uid_t uid, gid_t gid)
{
	d->client_uid = uid;
	d->client_gid = gid;
}

const char *desk_display_name(const struct desk *d)
{
	return d->name;
}

/*
 * Whether the X server closed our connection. Xlib only notices when a
 * request fails, so the first action after a server restart would fail;
 * peeking at the socket notices it up front (EOF reads as 0 bytes, whereas
 * pending events read as data). Lock held.
 */
static bool desk_connection_closed(struct desk *d)
{
	struct pollfd p = {ConnectionNumber(d->dpy), POLLIN, 0};
	if (poll(&p, 1, 0) <= 0)
		return false;
	if (p.revents & (POLLHUP | POLLERR | POLLNVAL))
		return true;
	char c;
	return recv(p.fd, &c, 1, MSG_PEEK | MSG_DONTWAIT) == 0;
}

int desk_lock(struct desk *d, struct err *e)
{
	pthread_mutex_lock(&d->lock);
	if (!d->dead && desk_connection_closed(d))
		d->dead = true;
	if (d->dead) {
		/* The old Display is inert after an IO error; free it and try again. */
		desk_screen_release(d);
		XCloseDisplay(d->dpy);
		d->dpy = NULL;
		if (desk_connect(d, e) < 0) {
			d->dead = true;
			pthread_mutex_unlock(&d->lock);
			err_set(e, ERR_UNAVAILABLE,
				"the X display '%s' is gone (the desktop session is restarting?)",
				d->name);
			return -1;
		}
	}
	return 0;
}

void desk_unlock(struct desk *d)
{
	pthread_mutex_unlock(&d->lock);
}

Atom desk_atom(struct desk *d, const char *name)
{
	return XInternAtom(d->dpy, name, False);
}

int desk_screen_size(struct desk *d, int *width, int *height, struct err *e)
{
	if (desk_lock(d, e) < 0)
		return -1;
	XWindowAttributes wa;
	int ok = XGetWindowAttributes(d->dpy, d->root, &wa);
	desk_unlock(d);
	if (!ok)
		return err_set(e, ERR_UNAVAILABLE, "cannot read the root window's size");
	*width = wa.width;
	*height = wa.height;
	return 0;
}

int desk_set_screen_size(struct desk *d, int width, int height, struct err *e)
{
	if (desk_lock(d, e) < 0)
		return -1;
	desk_trap_begin();
	int rc = randr_set_size(d->dpy, d->root, width, height, e);
	desk_trap_end(d);
	desk_unlock(d);
	return rc;
}

int desk_check_point(struct desk *d, int x, int y, const char *xname, const char *yname,
		     struct err *e)
{
	int w, h;
	if (desk_screen_size(d, &w, &h, e) < 0)
		return -1;
	if (x < 0 || x >= w)
		return err_param(e, xname, "%s: %d is off-screen (the screen is %dx%d, so 0..%d)",
				 xname, x, w, h, w - 1);
	if (y < 0 || y >= h)
		return err_param(e, yname, "%s: %d is off-screen (the screen is %dx%d, so 0..%d)",
				 yname, y, w, h, h - 1);
	return 0;
}
