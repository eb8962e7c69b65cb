/*
 * randr: changing the screen's size through XRandR 1.2.
 *
 * Xvfb (21.1) offers RandR with one output and one CRTC, and takes any size
 * from 1x1 up to the framebuffer it was started with: it never grows its
 * framebuffer. So whoever starts Xvfb starts it at the largest size it may
 * need (the session: 1920x1200, or the requested size if larger) and sets the
 * size it wants at once; later changes stay within that maximum.
 *
 * These calls take a bare Display (the session uses them before any desk
 * exists); the desk wraps them in desk_set_screen_size (desk.h). A failed
 * request must not exit the process: the caller has installed an X error
 * handler that returns (desk and session both do).
 */
#ifndef CUBICLE_DESK_RANDR_H
#define CUBICLE_DESK_RANDR_H

#include <X11/Xlib.h>

#include "err.h"

/* The smallest screen envd sets; smaller ones are of no use to anyone. */
#define RANDR_MIN_SIZE 64

/*
 * The largest size the screen can take (*w, *h). Returns 0, or -1 with
 * ERR_CONFLICT when the server has no RandR 1.2.
 */
int randr_max_size(Display *dpy, Window root, int *w, int *h, struct err *e);

/*
 * Makes the screen exactly width x height (96 DPI): adds the mode to the
 * output if it lacks it, points the CRTC at it and resizes the screen, in
 * an order that keeps the CRTC inside the screen at every step, under a
 * server grab so clients see only the final state. ERR_INVALID naming
 * "width" or "height" for a size outside RANDR_MIN_SIZE..randr_max_size;
 * ERR_UNAVAILABLE if the server refused.
 */
int randr_set_size(Display *dpy, Window root, int width, int height, struct err *e);

#endif
