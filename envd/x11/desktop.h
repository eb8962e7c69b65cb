/*
 * desktop: which desktop environment runs, and its wallpaper.
 */
#ifndef CUBICLE_DESK_DESKTOP_H
#define CUBICLE_DESK_DESKTOP_H

#include "desk.h"

struct desk_environment {
	char name[64];	  /* "xfce", or the window manager's name, "" if none */
	char version[64]; /* "4.18.1", "" if unknown */
	char wm[64];	  /* the EWMH window manager name ("Xfwm4"), "" if none */
};

int desk_environment(struct desk *d, struct desk_environment *out, struct err *e);

/*
 * Sets the wallpaper to the image at `path` (PNG or JPEG): on Xfce through
 * xfconf for every monitor and workspace, elsewhere on the root window.
 * ERR_NOT_FOUND (param "path") if the file is missing, ERR_INVALID if it is
 * not an image. *method (may be NULL) is set to the static string "xfconf"
 * or "root_window", saying which way was taken.
 */
int desk_set_wallpaper(struct desk *d, const char *path, const char **method, struct err *e);

#endif
