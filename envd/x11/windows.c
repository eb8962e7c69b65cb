/*
 * windows: top-level windows through EWMH, as the window manager sees them.
 *
 * The window manager owns window placement, so every change is a request to
 * it (a client message to the root window, the way pagers and taskbars ask),
 * never a direct reconfiguration of the client: that is what keeps frames,
 * the stacking order and _NET_WM_STATE consistent. Requests are asynchronous
 * in X, so each call then polls the window's properties until the change is
 * visible (or ~2 s passed), sleeping without the desk lock so other actions
 * run meanwhile.
 *
 * The set of windows is the window manager's client list minus the desktop
 * and dock windows (xfdesktop, panels): what a person would call the open
 * application windows. Windows can vanish at any moment, so every request on
 * one is made between desk_trap_begin/end and a BadWindow means "gone".
 */
#include "windows.h"
#include "desk-internal.h"
#include "clock.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <X11/Xatom.h>
#include <X11/Xutil.h>

#define WINDOWS_WAIT_MS	  2000 /* how long a request may take to become visible */
#define WINDOWS_POLL_MS	  10   /* between two looks at the window's state */
#define WINDOWS_SETTLE_MS 200  /* a changed geometry that stays put this long is final */

/* _NET_WM_STATE actions and the EWMH source indication of a pager. */
#define NET_WM_STATE_REMOVE 0
#define NET_WM_STATE_ADD    1
#define NET_SOURCE_PAGER    2

/*
 * Reads a property of w (lock held). Returns the XFree'able data and its
 * item count, or NULL when absent, of another type, or the window is gone.
 * Format-32 items come back as longs, as Xlib delivers them.
 */
static unsigned char *windows_prop(struct desk *d, Window w, const char *name, Atom type,
				   unsigned long *n, Atom *actual_type)
{
	Atom actual = None;
	int format = 0;
	unsigned long nitems = 0, after = 0;
	unsigned char *data = NULL;
	if (XGetWindowProperty(d->dpy, w, desk_atom(d, name), 0, 1L << 20, False, type, &actual,
			       &format, &nitems, &after, &data) != Success)
		return NULL;
	if (actual == None || (type != AnyPropertyType && actual != type) || !data) {
		if (data)
			XFree(data);
		return NULL;
	}
	*n = nitems;
	if (actual_type)
		*actual_type = actual;
	return data;
}

/* One window-valued property of w, 0 if absent (lock held). */
static Window windows_prop_window(struct desk *d, Window w, const char *name)
{
	unsigned long n = 0;
	unsigned char *data = windows_prop(d, w, name, XA_WINDOW, &n, NULL);
	Window v = data && n > 0 ? (Window)((unsigned long *)data)[0] : 0;
	if (data)
		XFree(data);
	return v;
}

/* Whether the window manager lists `atom_name` in _NET_SUPPORTED (lock held). */
static bool windows_wm_supports(struct desk *d, const char *atom_name)
{
	unsigned long n = 0;
	unsigned char *data = windows_prop(d, d->root, "_NET_SUPPORTED", XA_ATOM, &n, NULL);
	if (!data)
		return false;
	Atom want = desk_atom(d, atom_name);
	bool found = false;
	for (unsigned long i = 0; i < n && !found; i++)
		found = ((unsigned long *)data)[i] == want;
	XFree(data);
	return found;
}

/* Desktop backgrounds and panels are managed but are not application windows. */
static bool windows_is_application(struct desk *d, Window w)
{
	unsigned long n = 0;
	unsigned char *data = windows_prop(d, w, "_NET_WM_WINDOW_TYPE", XA_ATOM, &n, NULL);
	if (!data)
		return true;
	Atom desktop = desk_atom(d, "_NET_WM_WINDOW_TYPE_DESKTOP");
	Atom dock = desk_atom(d, "_NET_WM_WINDOW_TYPE_DOCK");
	bool app = true;
	for (unsigned long i = 0; i < n; i++) {
		Atom a = ((unsigned long *)data)[i];
		if (a == desktop || a == dock)
			app = false;
	}
	XFree(data);
	return app;
}

/*
 * The application windows the window manager manages, bottom to top when it
 * publishes the stacking order (lock held). *ids is malloc'd (may be NULL
 * when n is 0). Errors from windows that vanish mid-way are swallowed.
 */
static int windows_client_ids(struct desk *d, Window **ids, size_t *count, struct err *e)
{
	unsigned long n = 0;
	unsigned char *data =
	    windows_prop(d, d->root, "_NET_CLIENT_LIST_STACKING", XA_WINDOW, &n, NULL);
	if (!data)
		data = windows_prop(d, d->root, "_NET_CLIENT_LIST", XA_WINDOW, &n, NULL);
	*ids = NULL;
	*count = 0;
	if (!data)
		return 0; /* no EWMH window manager: no managed windows */
	Window *out = malloc((n ? n : 1) * sizeof *out);
	if (!out) {
		XFree(data);
		return err_set(e, ERR_INTERNAL, "out of memory");
	}
	size_t k = 0;
	desk_trap_begin();
	for (unsigned long i = 0; i < n; i++) {
		Window w = ((unsigned long *)data)[i];
		if (windows_is_application(d, w))
			out[k++] = w;
	}
	desk_trap_end(d);
	XFree(data);
	*ids = out;
	*count = k;
	return 0;
}

/* Appends the UTF-8 encoding of code point c to buf (room for 4 bytes). */
static size_t windows_utf8_put(char *buf, unsigned c)
{
	if (c < 0x80) {
		buf[0] = (char)c;
		return 1;
	}
	if (c < 0x800) {
		buf[0] = (char)(0xC0 | (c >> 6));
		buf[1] = (char)(0x80 | (c & 0x3F));
		return 2;
	}
	if (c < 0x10000) {
		buf[0] = (char)(0xE0 | (c >> 12));
		buf[1] = (char)(0x80 | ((c >> 6) & 0x3F));
		buf[2] = (char)(0x80 | (c & 0x3F));
		return 3;
	}
	buf[0] = (char)(0xF0 | (c >> 18));
	buf[1] = (char)(0x80 | ((c >> 12) & 0x3F));
	buf[2] = (char)(0x80 | ((c >> 6) & 0x3F));
	buf[3] = (char)(0x80 | (c & 0x3F));
	return 4;
}

/* Length of the valid UTF-8 sequence at s (up to end), 0 if invalid. */
static size_t windows_utf8_valid(const unsigned char *s, const unsigned char *end)
{
	unsigned c = s[0];
	size_t len;
	unsigned cp, min;
	if (c < 0x80)
		return 1;
	if ((c & 0xE0) == 0xC0) {
		len = 2, cp = c & 0x1F, min = 0x80;
	} else if ((c & 0xF0) == 0xE0) {
		len = 3, cp = c & 0x0F, min = 0x800;
	} else if ((c & 0xF8) == 0xF0) {
		len = 4, cp = c & 0x07, min = 0x10000;
	} else {
		return 0;
	}
	if ((size_t)(end - s) < len)
		return 0;
	for (size_t i = 1; i < len; i++) {
		if ((s[i] & 0xC0) != 0x80)
			return 0;
		cp = (cp << 6) | (s[i] & 0x3F);
	}
	if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
		return 0;
	return len;
}

/*
 * A malloc'd, valid UTF-8 copy of text that claims to be UTF-8 (latin1 =
 * false) or is ISO 8859-1 (X's STRING type). Invalid bytes become U+FFFD and
 * NULs (list separators in text properties) end the text. NULL on OOM.
 */
static char *windows_text_dup(const unsigned char *s, size_t len, bool latin1)
{
	char *out = malloc(len * 3 + 1);
	if (!out)
		return NULL;
	const unsigned char *end = s + len;
	size_t k = 0;
	while (s < end && *s) {
		size_t l = latin1 ? 0 : windows_utf8_valid(s, end);
		if (latin1) {
			k += windows_utf8_put(out + k, *s);
			s++;
		} else if (l) {
			memcpy(out + k, s, l);
			k += l;
			s += l;
		} else {
			k += windows_utf8_put(out + k, 0xFFFD);
			s++;
		}
	}
	out[k] = '\0';
	return out;
}

/* The title: _NET_WM_NAME (UTF-8) or the ICCCM WM_NAME (lock held). */
static char *windows_title(struct desk *d, Window w)
{
	unsigned long n = 0;
	unsigned char *data =
	    windows_prop(d, w, "_NET_WM_NAME", desk_atom(d, "UTF8_STRING"), &n, NULL);
	if (data) {
		char *t = windows_text_dup(data, n, false);
		XFree(data);
		return t;
	}
	Atom type = None;
	data = windows_prop(d, w, "WM_NAME", AnyPropertyType, &n, &type);
	if (!data)
		return strdup("");
	char *t = NULL;
	if (type == desk_atom(d, "COMPOUND_TEXT")) {
		XTextProperty tp = {data, type, 8, n};
		char **list = NULL;
		int count = 0;
		if (Xutf8TextPropertyToTextList(d->dpy, &tp, &list, &count) >= Success && count > 0)
			t = windows_text_dup((unsigned char *)list[0], strlen(list[0]), false);
		if (list)
			XFreeStringList(list);
	}
	if (!t)
		t = windows_text_dup(data, n, type != desk_atom(d, "UTF8_STRING"));
	XFree(data);
	return t;
}

/* Whether _NET_WM_STATE of w holds the named atoms (lock held). */
static void windows_state(struct desk *d, Window w, bool *hidden, bool *maximized)
{
	*hidden = *maximized = false;
	unsigned long n = 0;
	unsigned char *data = windows_prop(d, w, "_NET_WM_STATE", XA_ATOM, &n, NULL);
	if (!data)
		return;
	Atom a_hidden = desk_atom(d, "_NET_WM_STATE_HIDDEN");
	Atom a_vert = desk_atom(d, "_NET_WM_STATE_MAXIMIZED_VERT");
	Atom a_horz = desk_atom(d, "_NET_WM_STATE_MAXIMIZED_HORZ");
	bool vert = false, horz = false;
	for (unsigned long i = 0; i < n; i++) {
		Atom a = ((unsigned long *)data)[i];
		*hidden |= a == a_hidden;
		vert |= a == a_vert;
		horz |= a == a_horz;
	}
	*maximized = vert && horz;
	XFree(data);
}

/*
 * Fills out for window w (lock held). Returns 0, or -1 when the window is
 * gone (an X error while reading it) or memory ran out.
 */
static int windows_read(struct desk *d, Window w, Window active, struct desk_window *out)
{
	memset(out, 0, sizeof *out);
	out->id = w;
	desk_trap_begin();
	Window root = 0, child = 0;
	int x = 0, y = 0;
	unsigned width = 0, height = 0, border = 0, depth = 0;
	bool ok = XGetGeometry(d->dpy, w, &root, &x, &y, &width, &height, &border, &depth) &&
		  XTranslateCoordinates(d->dpy, w, d->root, 0, 0, &x, &y, &child);
	if (ok) {
		out->x = x;
		out->y = y;
		out->width = (int)width;
		out->height = (int)height;
		out->title = windows_title(d, w);
		XClassHint hint = {0};
		if (XGetClassHint(d->dpy, w, &hint)) {
			out->app_class = hint.res_class
					     ? windows_text_dup((unsigned char *)hint.res_class,
								strlen(hint.res_class), true)
					     : strdup("");
			XFree(hint.res_name);
			XFree(hint.res_class);
		} else {
			out->app_class = strdup("");
		}
		unsigned long n = 0;
		unsigned char *pid = windows_prop(d, w, "_NET_WM_PID", XA_CARDINAL, &n, NULL);
		if (pid) {
			out->pid = n > 0 ? (int)((unsigned long *)pid)[0] : 0;
			XFree(pid);
		}
		windows_state(d, w, &out->minimized, &out->maximized);
		out->focused = w == active;
	}
	if (desk_trap_end(d) || !ok || !out->title || !out->app_class) {
		desk_window_clear(out);
		return -1;
	}
	return 0;
}

void desk_window_clear(struct desk_window *w)
{
	if (!w)
		return;
	free(w->title);
	free(w->app_class);
	w->title = w->app_class = NULL;
}

void desk_windows_free(struct desk_window *w, size_t n)
{
	for (size_t i = 0; i < n; i++)
		desk_window_clear(&w[i]);
	free(w);
}

int desk_windows(struct desk *d, struct desk_window **out, size_t *count, struct err *e)
{
	*out = NULL;
	*count = 0;
	if (desk_lock(d, e) < 0)
		return -1;
	Window *ids;
	size_t n;
	if (windows_client_ids(d, &ids, &n, e) < 0) {
		desk_unlock(d);
		return -1;
	}
	struct desk_window *list = calloc(n ? n : 1, sizeof *list);
	if (!list) {
		desk_unlock(d);
		free(ids);
		return err_set(e, ERR_INTERNAL, "out of memory");
	}
	Window active = windows_prop_window(d, d->root, "_NET_ACTIVE_WINDOW");
	size_t k = 0;
	for (size_t i = 0; i < n; i++)
		if (windows_read(d, ids[i], active, &list[k]) == 0)
			k++; /* else it vanished while we looked: skip it */
	desk_unlock(d);
	free(ids);
	*out = list;
	*count = k;
	return 0;
}

/* ERR_NOT_FOUND naming the "id" parameter. */
static int windows_not_found(struct err *e, unsigned long id)
{
	return err_set_param(e, ERR_NOT_FOUND, "id",
			     "id: no window 0x%lx (%lu) on the desktop; the windows action lists "
			     "the open windows",
			     id, id);
}

/* Whether id is one of the managed application windows (lock held). */
static int windows_is_managed(struct desk *d, unsigned long id, bool *managed, struct err *e)
{
	Window *ids;
	size_t n;
	if (windows_client_ids(d, &ids, &n, e) < 0)
		return -1;
	*managed = false;
	for (size_t i = 0; i < n && !*managed; i++)
		*managed = ids[i] == id;
	free(ids);
	return 0;
}

int desk_window_get(struct desk *d, unsigned long id, struct desk_window *out, struct err *e)
{
	memset(out, 0, sizeof *out);
	if (desk_lock(d, e) < 0)
		return -1;
	bool managed;
	if (windows_is_managed(d, id, &managed, e) < 0) {
		desk_unlock(d);
		return -1;
	}
	int r = -1;
	if (managed) {
		Window active = windows_prop_window(d, d->root, "_NET_ACTIVE_WINDOW");
		r = windows_read(d, id, active, out);
	}
	desk_unlock(d);
	return r < 0 ? windows_not_found(e, id) : 0;
}

int desk_window_focused(struct desk *d, unsigned long *id, struct err *e)
{
	if (desk_lock(d, e) < 0)
		return -1;
	*id = windows_prop_window(d, d->root, "_NET_ACTIVE_WINDOW");
	desk_unlock(d);
	return 0;
}

/* Sends an EWMH client message about w to the root window (lock held). */
static void windows_send(struct desk *d, Window w, const char *type, long l0, long l1, long l2,
			 long l3, long l4)
{
	XEvent ev;
	memset(&ev, 0, sizeof ev);
	ev.xclient.type = ClientMessage;
	ev.xclient.send_event = True;
	ev.xclient.display = d->dpy;
	ev.xclient.window = w;
	ev.xclient.message_type = desk_atom(d, type);
	ev.xclient.format = 32;
	ev.xclient.data.l[0] = l0;
	ev.xclient.data.l[1] = l1;
	ev.xclient.data.l[2] = l2;
	ev.xclient.data.l[3] = l3;
	ev.xclient.data.l[4] = l4;
	XSendEvent(d->dpy, d->root, False, SubstructureRedirectMask | SubstructureNotifyMask, &ev);
}

/* What a request waits for: the window's state reached the goal. */
struct windows_goal {
	enum {
		GOAL_FOCUSED,
		GOAL_MINIMIZED,
		GOAL_MAXIMIZED,
		GOAL_UNMAXIMIZED,
		GOAL_MOVED,
		GOAL_RESIZED,
		GOAL_GONE
	} kind;
	int x, y;	   /* GOAL_MOVED */
	int width, height; /* GOAL_RESIZED */
	int inc_w, inc_h;  /* the client's size increments (xterm: character cells) */
};

static bool windows_goal_met(const struct windows_goal *g, const struct desk_window *w)
{
	switch (g->kind) {
	case GOAL_FOCUSED:
		return w->focused;
	case GOAL_MINIMIZED:
		return w->minimized;
	case GOAL_MAXIMIZED:
		return w->maximized;
	case GOAL_UNMAXIMIZED:
		return !w->maximized;
	case GOAL_MOVED:
		return w->x == g->x && w->y == g->y;
	case GOAL_RESIZED:
		return abs(w->width - g->width) < g->inc_w && abs(w->height - g->height) < g->inc_h;
	case GOAL_GONE:
		return false;
	}
	return false;
}

/*
 * Polls window id until the goal is met, for up to WINDOWS_WAIT_MS, without
 * holding the lock while sleeping. Moves and resizes also stop once the
 * geometry changed from `before` (the state ahead of the request, NULL for
 * other goals) and then stayed put: the window manager may clamp a request,
 * e.g. to keep a title bar on screen. Reaching the deadline is not
 * an error: the caller reports whatever state resulted. Returns -1 only for
 * X trouble or, unless the goal is GOAL_GONE, a window that vanished.
 */
static int windows_wait(struct desk *d, unsigned long id, const struct windows_goal *g,
			const struct desk_window *before, struct err *e)
{
	int64_t start = clock_now_ms(), changed_at = 0;
	bool geometric = g->kind == GOAL_MOVED || g->kind == GOAL_RESIZED;
	int px = before ? before->x : 0, py = before ? before->y : 0;
	int pw = before ? before->width : 0, ph = before ? before->height : 0;
	for (;;) {
		struct desk_window w;
		struct err ge;
		if (desk_window_get(d, id, &w, &ge) < 0) {
			if (g->kind == GOAL_GONE && ge.code == ERR_NOT_FOUND) {
				/* The X window can die before the window manager drops
				 * it from _NET_CLIENT_LIST: gone means gone from both,
				 * so a `windows` call right after no longer lists it. */
				bool listed = false;
				if (desk_lock(d, e) < 0)
					return -1;
				int rc = windows_is_managed(d, id, &listed, e);
				desk_unlock(d);
				if (rc < 0)
					return -1;
				if (!listed || clock_now_ms() - start >= WINDOWS_WAIT_MS)
					return 0;
				clock_sleep_ms(WINDOWS_POLL_MS);
				continue;
			}
			if (e)
				*e = ge;
			return -1;
		}
		bool met = windows_goal_met(g, &w);
		int64_t now = clock_now_ms();
		if (geometric && before &&
		    (w.x != px || w.y != py || w.width != pw || w.height != ph)) {
			changed_at = now;
			px = w.x, py = w.y, pw = w.width, ph = w.height;
		}
		desk_window_clear(&w);
		if (met || now - start >= WINDOWS_WAIT_MS ||
		    (changed_at && now - changed_at >= WINDOWS_SETTLE_MS))
			return 0;
		clock_sleep_ms(WINDOWS_POLL_MS);
	}
}

/*
 * Takes the lock, checks id is a managed window and reads its state into
 * *state (cleared by the caller). On failure the lock is not held.
 */
static int windows_begin(struct desk *d, unsigned long id, struct desk_window *state, struct err *e)
{
	if (desk_lock(d, e) < 0)
		return -1;
	bool managed;
	if (windows_is_managed(d, id, &managed, e) < 0) {
		desk_unlock(d);
		return -1;
	}
	Window active = windows_prop_window(d, d->root, "_NET_ACTIVE_WINDOW");
	if (!managed || windows_read(d, id, active, state) < 0) {
		desk_unlock(d);
		return windows_not_found(e, id);
	}
	return 0;
}

/* Ends a request begun with windows_begin: unlocks, maps an X error to "gone". */
static int windows_end(struct desk *d, unsigned long id, struct desk_window *state, struct err *e)
{
	int xerr = desk_trap_end(d);
	desk_unlock(d);
	desk_window_clear(state);
	return xerr ? windows_not_found(e, id) : 0;
}

/* Asks the window manager to activate (raise, focus, de-iconify) w (lock held). */
static void windows_request_activate(struct desk *d, Window w)
{
	Window active = windows_prop_window(d, d->root, "_NET_ACTIVE_WINDOW");
	windows_send(d, w, "_NET_ACTIVE_WINDOW", NET_SOURCE_PAGER, CurrentTime, (long)active, 0, 0);
	XRaiseWindow(d->dpy, w);
}

int desk_window_focus(struct desk *d, unsigned long id, struct err *e)
{
	struct desk_window st;
	if (windows_begin(d, id, &st, e) < 0)
		return -1;
	desk_trap_begin();
	windows_request_activate(d, id);
	if (windows_end(d, id, &st, e) < 0)
		return -1;
	struct windows_goal g = {.kind = GOAL_FOCUSED};
	return windows_wait(d, id, &g, NULL, e);
}

/* Un-maximizes id if it is maximized, so that it can be moved or resized. */
static int windows_unmaximize(struct desk *d, unsigned long id, struct err *e)
{
	struct desk_window st;
	if (windows_begin(d, id, &st, e) < 0)
		return -1;
	bool was = st.maximized;
	desk_trap_begin();
	if (was)
		windows_send(d, id, "_NET_WM_STATE", NET_WM_STATE_REMOVE,
			     (long)desk_atom(d, "_NET_WM_STATE_MAXIMIZED_VERT"),
			     (long)desk_atom(d, "_NET_WM_STATE_MAXIMIZED_HORZ"), NET_SOURCE_PAGER,
			     0);
	if (windows_end(d, id, &st, e) < 0)
		return -1;
	if (!was)
		return 0;
	struct windows_goal g = {.kind = GOAL_UNMAXIMIZED};
	return windows_wait(d, id, &g, NULL, e);
}

/*
 * Moves and/or resizes the client area of id: x/y are where its top-left
 * client pixel goes (root coordinates), width/height its client size.
 * Through _NET_MOVERESIZE_WINDOW with StaticGravity, which asks the window
 * manager to place the client area itself (not the frame) at x, y; without
 * an EWMH window manager, through a plain ConfigureWindow.
 */
static int windows_moveresize(struct desk *d, unsigned long id, bool move, int x, int y,
			      bool resize, int width, int height, struct err *e)
{
	if (windows_unmaximize(d, id, e) < 0)
		return -1;
	struct desk_window st;
	if (windows_begin(d, id, &st, e) < 0)
		return -1;
	struct windows_goal g = {.kind = move ? GOAL_MOVED : GOAL_RESIZED,
				 .x = x,
				 .y = y,
				 .width = width,
				 .height = height,
				 .inc_w = 1,
				 .inc_h = 1};
	desk_trap_begin();
	if (resize) {
		/* The client may only take sizes in steps (xterm: character cells)
		 * and within bounds: aim at what it can take. */
		XSizeHints hints;
		long supplied = 0;
		if (XGetWMNormalHints(d->dpy, id, &hints, &supplied)) {
			if ((hints.flags & PResizeInc) && hints.width_inc > 1)
				g.inc_w = hints.width_inc;
			if ((hints.flags & PResizeInc) && hints.height_inc > 1)
				g.inc_h = hints.height_inc;
			if ((hints.flags & PMinSize) && g.width < hints.min_width)
				g.width = hints.min_width;
			if ((hints.flags & PMinSize) && g.height < hints.min_height)
				g.height = hints.min_height;
			if ((hints.flags & PMaxSize) && hints.max_width > 0 &&
			    g.width > hints.max_width)
				g.width = hints.max_width;
			if ((hints.flags & PMaxSize) && hints.max_height > 0 &&
			    g.height > hints.max_height)
				g.height = hints.max_height;
		}
	}
	if (windows_wm_supports(d, "_NET_MOVERESIZE_WINDOW")) {
		long flags = StaticGravity | (NET_SOURCE_PAGER << 12);
		if (move)
			flags |= (1L << 8) | (1L << 9);
		if (resize)
			flags |= (1L << 10) | (1L << 11);
		windows_send(d, id, "_NET_MOVERESIZE_WINDOW", flags, x, y, width, height);
	} else if (move && resize) {
		XMoveResizeWindow(d->dpy, id, x, y, (unsigned)width, (unsigned)height);
	} else if (move) {
		XMoveWindow(d->dpy, id, x, y);
	} else {
		XResizeWindow(d->dpy, id, (unsigned)width, (unsigned)height);
	}
	if (windows_end(d, id, &st, e) < 0)
		return -1;
	return windows_wait(d, id, &g, &st, e); /* st keeps its geometry */
}

int desk_window_move(struct desk *d, unsigned long id, int x, int y, struct err *e)
{
	return windows_moveresize(d, id, true, x, y, false, 0, 0, e);
}

int desk_window_resize(struct desk *d, unsigned long id, int width, int height, struct err *e)
{
	if (width < 1)
		return err_param(e, "width", "width: %d is not a window size (at least 1)", width);
	if (height < 1)
		return err_param(e, "height", "height: %d is not a window size (at least 1)",
				 height);
	return windows_moveresize(d, id, false, 0, 0, true, width, height, e);
}

int desk_window_maximize(struct desk *d, unsigned long id, struct err *e)
{
	struct desk_window st;
	if (windows_begin(d, id, &st, e) < 0)
		return -1;
	bool minimized = st.minimized;
	desk_trap_begin();
	if (minimized)
		windows_request_activate(d, id); /* a hidden window cannot show maximized */
	windows_send(d, id, "_NET_WM_STATE", NET_WM_STATE_ADD,
		     (long)desk_atom(d, "_NET_WM_STATE_MAXIMIZED_VERT"),
		     (long)desk_atom(d, "_NET_WM_STATE_MAXIMIZED_HORZ"), NET_SOURCE_PAGER, 0);
	if (windows_end(d, id, &st, e) < 0)
		return -1;
	struct windows_goal g = {.kind = GOAL_MAXIMIZED};
	return windows_wait(d, id, &g, NULL, e);
}

int desk_window_minimize(struct desk *d, unsigned long id, struct err *e)
{
	struct desk_window st;
	if (windows_begin(d, id, &st, e) < 0)
		return -1;
	desk_trap_begin();
	/* ICCCM WM_CHANGE_STATE(IconicState), which EWMH window managers map to
	 * _NET_WM_STATE_HIDDEN. */
	XIconifyWindow(d->dpy, id, d->screen);
	if (windows_end(d, id, &st, e) < 0)
		return -1;
	struct windows_goal g = {.kind = GOAL_MINIMIZED};
	return windows_wait(d, id, &g, NULL, e);
}

int desk_window_close(struct desk *d, unsigned long id, struct err *e)
{
	struct desk_window st;
	if (windows_begin(d, id, &st, e) < 0)
		return -1;
	desk_trap_begin();
	/* A polite close, as the title bar's button does: the application may
	 * ask to save first, so the window can outlive the wait. */
	windows_send(d, id, "_NET_CLOSE_WINDOW", CurrentTime, NET_SOURCE_PAGER, 0, 0, 0);
	if (windows_end(d, id, &st, e) < 0)
		return -1;
	struct windows_goal g = {.kind = GOAL_GONE};
	return windows_wait(d, id, &g, NULL, e);
}

/* Whether the window's process belongs to the launched process's session. */
static bool windows_pid_matches(int window_pid, int pid)
{
	if (window_pid <= 0 || pid <= 0)
		return false;
	if (window_pid == pid)
		return true;
	/* launch_app starts apps as session leaders, so helpers they fork (a
	 * wrapper script's real program) share the session id. */
	pid_t sid = getsid(window_pid);
	return sid > 0 && sid == pid;
}

/* How long a new window of another process may wait for one of pid's. */
#define WINDOWS_FOREIGN_GRACE_MS 2000

int desk_window_wait_new(struct desk *d, const unsigned long *before, size_t n_before, int pid,
			 int timeout_ms, unsigned long *id, struct err *e)
{
	*id = 0;
	int64_t start = clock_now_ms(), foreign_since = 0;
	unsigned long foreign = 0;
	for (;;) {
		if (desk_lock(d, e) < 0)
			return -1;
		Window *ids;
		size_t n;
		if (windows_client_ids(d, &ids, &n, e) < 0) {
			desk_unlock(d);
			return -1;
		}
		unsigned long mine = 0;
		for (size_t i = n; i-- > 0 && !mine;) { /* topmost first */
			bool old = false;
			for (size_t j = 0; j < n_before && !old; j++)
				old = before[j] == ids[i];
			if (old)
				continue;
			if (pid <= 0) {
				mine = ids[i];
				break;
			}
			unsigned long np = 0;
			desk_trap_begin();
			unsigned char *data =
			    windows_prop(d, ids[i], "_NET_WM_PID", XA_CARDINAL, &np, NULL);
			desk_trap_end(d);
			int wpid = data && np ? (int)((unsigned long *)data)[0] : 0;
			if (data)
				XFree(data);
			if (windows_pid_matches(wpid, pid))
				mine = ids[i];
			else if (!foreign)
				foreign = ids[i], foreign_since = clock_now_ms();
		}
		desk_unlock(d);
		free(ids);
		int64_t now = clock_now_ms();
		if (mine) {
			*id = mine;
			return 0;
		}
		/* Apps that hand over to a running instance (firefox) open their
		 * window in another process: take that one after a grace period. */
		if (foreign && now - foreign_since >= WINDOWS_FOREIGN_GRACE_MS) {
			*id = foreign;
			return 0;
		}
		if (now - start >= timeout_ms) {
			*id = foreign;
			return 0;
		}
		clock_sleep_ms(50);
	}
}
