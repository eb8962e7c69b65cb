/*
 * desk: one X display, driven like a person would (a library with no HTTP).
 *
 * A `struct desk` is one connection to one display. Every desk_* call is
 * thread-safe: it takes the desk's lock for the X work it does, so callers
 * never lock. Coordinates are root-window pixels. Failures fill a struct err
 * whose param names the argument at fault (e.g. "x" for an off-screen x).
 *
 * The families live beside this file: input.h (mouse, keyboard), keys.h
 * (key names), screen.h (capture), windows.h (EWMH), clipboard.h,
 * a11y.h (AT-SPI) and desktop.h (environment, wallpaper).
 */
#ifndef CUBICLE_DESK_H
#define CUBICLE_DESK_H

#include <stdbool.h>
#include <sys/types.h>

#include "err.h"

struct desk;

/* Connects to `display` (NULL = $DISPLAY). Needs the XTEST extension. */
struct desk *desk_open(const char *display, struct err *e);
void desk_close(struct desk *d);

/*
 * The user whose desktop this is, when envd runs as root: helpers that talk
 * to the session's D-Bus (xfconf-query) run as this user. Default: as envd.
 */
void desk_set_client(struct desk *d, uid_t uid, gid_t gid);

/* The display name this desk was opened on (e.g. ":1"). */
const char *desk_display_name(const struct desk *d);

/* Current root window size in pixels (follows RANDR changes). */
int desk_screen_size(struct desk *d, int *width, int *height, struct err *e);

/*
 * Resizes the screen to width x height through XRandR (randr.h): at most the
 * size the X server was started with. ERR_INVALID naming "width"/"height"
 * for a size it cannot take, ERR_CONFLICT without RandR 1.2.
 */
int desk_set_screen_size(struct desk *d, int width, int height, struct err *e);

/* Fails with ERR_INVALID naming xname/yname if (x, y) is off-screen. */
int desk_check_point(struct desk *d, int x, int y, const char *xname, const char *yname,
		     struct err *e);

#endif
