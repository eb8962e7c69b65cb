/*
 * What the desk's family files share; not part of the library's interface.
 */
#ifndef CUBICLE_DESK_INTERNAL_H
#define CUBICLE_DESK_INTERNAL_H

#include <pthread.h>
#include <stdint.h>
#include <X11/Xlib.h>
#include <X11/extensions/XShm.h>

#include "desk.h"

/* Keycodes envd borrows to type keysyms the keymap lacks (see input.c). */
#define DESK_SCRATCH_MAX 64

struct desk_scratch {
	KeyCode code;
	KeySym sym;	/* what it is bound to now, NoSymbol if free */
	uint64_t stamp; /* last use, for least-recently-used reuse */
};

struct desk {
	char *name; /* display name */
	Display *dpy;
	int screen;
	Window root;
	pthread_mutex_t lock; /* held around every X call on dpy */
	bool dead;	      /* the X connection broke; desk_lock() reconnects */

	/* The session user helpers run as (desk_set_client); -1 = as envd. */
	uid_t client_uid;
	gid_t client_gid;

	/* keyboard (input.c) */
	int min_keycode, max_keycode;
	int syms_per_code;
	KeySym *keymap; /* (max-min+1) * syms_per_code, refreshed on change */
	struct desk_scratch scratch[DESK_SCRATCH_MAX];
	int nscratch;
	uint64_t scratch_clock;

	/* screen capture (screen.c) */
	bool shm_ok;
	XShmSegmentInfo shm;
	XImage *shm_image; /* full-screen shared image, recreated on size change */
};

/*
 * Takes the lock and makes sure the connection is alive (reconnecting once if
 * the display came back). Returns 0 with the lock held, or -1 (lock not held)
 * with ERR_UNAVAILABLE.
 */
int desk_lock(struct desk *d, struct err *e);
void desk_unlock(struct desk *d);

/*
 * X errors are caught per thread instead of killing the process: call
 * desk_trap_begin(), make requests, then desk_trap_end(d) which XSyncs and
 * returns the first X error code seen (0 = none).
 */
void desk_trap_begin(void);
int desk_trap_end(struct desk *d);

Atom desk_atom(struct desk *d, const char *name);

/* screen.c: frees the shared image of the current connection (lock held). */
void desk_screen_release(struct desk *d);

#endif
