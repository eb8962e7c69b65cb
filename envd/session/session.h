/*
 * session: envd as the supervisor of a computer's desktop session.
 *
 * `envd --session desktop` brings up, in order and as the client user:
 * Xvfb at the requested resolution, a D-Bus session bus, the AT-SPI
 * accessibility bus and xfce4-session. It restarts whichever dies (the ones
 * after it too, when the X server or the bus died), and reports the desktop
 * ready only once it is really usable: the Xfce panel and the desktop window
 * are mapped. A sandbox runs no session.
 *
 * Children are watched through pidfds on the session's own thread, so the
 * HTTP loop never waits for them.
 */
#ifndef CUBICLE_ENVD_SESSION_H
#define CUBICLE_ENVD_SESSION_H

#include <stdbool.h>
#include <sys/types.h>

#include "err.h"

struct session;

struct session_opts {
	int width, height; /* the screen, default 1280x800 */
	int display;	   /* X display number, default 0 */
	uid_t uid;	   /* who runs the session; (uid_t)-1 = envd's own user */
	gid_t gid;
	const char *home;     /* the user's home ($HOME), NULL = envd's */
	const char *user;     /* the user's name ($USER), NULL = envd's */
	const char *env_file; /* extra KEY=VALUE lines, default /etc/cubicle/session.env */
};

/*
 * Starts the session and returns once the X server accepts connections
 * (the desktop itself becomes ready later: session_ready()). Sets DISPLAY,
 * DBUS_SESSION_BUS_ADDRESS and XDG_RUNTIME_DIR in envd's own environment,
 * so call it before starting any thread.
 */
struct session *session_start(const struct session_opts *o, struct err *e);

/* The screen's size now (set_screen_size): an X server restart keeps it. */
void session_set_screen_size(struct session *s, int width, int height);

/* True while the panel and the desktop are mapped (re-checked whenever the
 * window manager's client list changes). */
bool session_ready(struct session *s);

/* How long the last start took to become ready, in ms (0 if not yet). */
double session_ready_ms(struct session *s);

/* Stops every child (SIGTERM, then SIGKILL) and frees the session. */
void session_stop(struct session *s);

#endif
