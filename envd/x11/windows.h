/*
 * windows: top-level windows through EWMH, as the window manager sees them.
 * Requests go to the window manager (client messages to the root window) and
 * each call waits, briefly, until the change is visible, then reports it.
 */
#ifndef CUBICLE_DESK_WINDOWS_H
#define CUBICLE_DESK_WINDOWS_H

#include <stdbool.h>
#include <stddef.h>

#include "desk.h"

struct desk_window {
	unsigned long id;
	char *title;	 /* _NET_WM_NAME or WM_NAME, UTF-8, malloc'd ("" if none) */
	char *app_class; /* WM_CLASS class part, malloc'd ("" if none) */
	int pid;	 /* _NET_WM_PID, 0 if unknown */
	int x, y;	 /* outer top-left corner of the client area, root coordinates */
	int width, height;
	bool focused;	/* it is _NET_ACTIVE_WINDOW */
	bool minimized; /* _NET_WM_STATE_HIDDEN */
	bool maximized; /* _NET_WM_STATE_MAXIMIZED_VERT and _HORZ */
};

/*
 * The window manager's client list, in stacking order (bottom first) if it
 * offers one, without desktop and dock windows (xfdesktop, panels): the
 * application windows. The other calls accept exactly these ids.
 */
int desk_windows(struct desk *d, struct desk_window **out, size_t *n, struct err *e);
void desk_windows_free(struct desk_window *w, size_t n);

/* One window; ERR_NOT_FOUND (param "id") if it is not a managed window. */
int desk_window_get(struct desk *d, unsigned long id, struct desk_window *out, struct err *e);
void desk_window_clear(struct desk_window *w);

/* The focused window id, 0 if none. */
int desk_window_focused(struct desk *d, unsigned long *id, struct err *e);

int desk_window_focus(struct desk *d, unsigned long id, struct err *e);
int desk_window_move(struct desk *d, unsigned long id, int x, int y, struct err *e);
int desk_window_resize(struct desk *d, unsigned long id, int width, int height, struct err *e);
int desk_window_maximize(struct desk *d, unsigned long id, struct err *e);
int desk_window_minimize(struct desk *d, unsigned long id, struct err *e);
int desk_window_close(struct desk *d, unsigned long id, struct err *e);

/*
 * Waits up to timeout_ms for a managed window that was not in `before`
 * (n_before ids) and, if pid > 0, prefers one owned by pid. *id = 0 when none
 * appeared in time (not an error).
 */
int desk_window_wait_new(struct desk *d, const unsigned long *before, size_t n_before, int pid,
			 int timeout_ms, unsigned long *id, struct err *e);

#endif
