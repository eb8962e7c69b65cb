/*
 * What the RFB server's files share (vnc.c, vnc-capture.c, vnc-input.c); not
 * part of its interface, which is vnc.h.
 */
#ifndef CUBICLE_ENVD_VNC_INTERNAL_H
#define CUBICLE_ENVD_VNC_INTERNAL_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <rfb/rfb.h>
#include <X11/Xlib.h>
#include <X11/extensions/XShm.h>

#include "err.h"
#include "vnc.h"

/* Cursor shapes kept alive at once (see vnc-capture.c: libvncserver reads the
 * current cursor without a lock, so a replaced one is not freed at once). */
#define VNC_CURSOR_CACHE 64

/* Keys one viewer may hold down at once (more are pressed but not tracked). */
#define VNC_VIEWER_KEYS 32

struct envd;

/* One held key of a viewer: what to release when it lets go or leaves. */
struct vnc_key {
	uint32_t sym;
	KeyCode code;  /* pressed through XTest on the input connection */
	bool via_desk; /* or bound and pressed by desk_key (not in the keymap) */
};

/* Per viewer (rfbClientRec.clientData); touched by its input thread only. */
struct vnc_viewer {
	struct vnc *v;
	struct vnc_viewer *next; /* in vnc.viewer_list, under vnc.lock */
	int fd;			 /* a duplicate of its socket, to shut it down */
	int buttons;		 /* button mask this viewer holds down */
	struct vnc_key keys[VNC_VIEWER_KEYS];
	int nkeys;
};

struct vnc_cursor {
	unsigned long serial; /* XFixes cursor serial */
	rfbCursorPtr cursor;
};

struct vnc {
	struct envd *env;
	char *path; /* the UNIX socket */
	int listen_fd;
	char *port; /* or the virtio-serial port (/dev/vportNpM) of a microVM */
	int accept_wake[2];
	pthread_t accept_thread;
	bool accept_started;
	int accepting_dup;   /* accept thread: the fd duplicate for the new viewer */
	bool accepting_view; /* accept thread: the new viewer's preamble said "view" */

	rfbScreenInfoPtr screen;
	/* The screen's pixels, 0x00RRGGBB little-endian as X reads them, rows of
	 * width * 4 bytes. Allocated once for the largest screen RandR allows
	 * (fb_w x fb_h), so a resize never moves it under libvncserver's output
	 * threads. width and height follow the screen (the capture thread
	 * writes them; others read them atomically). */
	char *fb;
	int width, height;
	int fb_w, fb_h;

	/* Shared state, under lock. */
	pthread_mutex_t lock;
	pthread_cond_t cond;
	int viewers;   /* accepted connections whose viewer has not gone */
	bool fb_stale; /* screen changes were skipped while nobody watched */
	unsigned refresh_asked, refresh_done;
	bool x_dead; /* the capture connection broke */
	bool stopping;
	bool clip_wanted; /* the CLIPBOARD owner changed: send it to the viewers */
	struct vnc_viewer *viewer_list;
	pthread_t *finished; /* viewer threads that ended, to join */
	size_t nfinished, finished_cap;

	/* Capture thread (vnc-capture.c): its own X connection. */
	Display *dpy;
	Window root;
	Visual *visual;
	int depth;
	int root_w, root_h; /* the root window now (width/height follow it) */
	int x_wake[2];
	pthread_t x_thread;
	bool x_started;
	bool capture_stop; /* under lock */
	bool x_io_dead;	   /* set by Xlib's IO error handler on the capture thread */
	int damage_base, fixes_base;
	unsigned long damage; /* the Damage on the root window */
	unsigned long region; /* an XFixes region to fetch damage into */
	Atom clipboard_atom;
	bool shm_ok;
	XShmSegmentInfo shm;
	struct vnc_cursor cursors[VNC_CURSOR_CACHE];
	int ncursors;

	/* Clipboard thread (vnc-input.c): CLIPBOARD changes to the viewers. */
	pthread_t clip_thread;
	bool clip_started;
	bool clip_stop; /* under lock */

	/* Input (vnc-input.c): XTest on a third connection, one viewer at a time. */
	pthread_mutex_t input_lock;
	Display *input_dpy;
	int input_screen;
	bool input_dead; /* the input connection broke */
	KeySym *keymap;	 /* the server's keyboard mapping, reloaded on MappingNotify */
	int min_keycode, max_keycode, syms_per_code;
};

/* vnc-capture.c */
int vnc_capture_open(struct vnc *v, struct err *e);
int vnc_capture_start(struct vnc *v, struct err *e);
/* Makes sure the framebuffer is current before a viewer's first frame. */
void vnc_capture_refresh(struct vnc *v);
void vnc_capture_stop(struct vnc *v);
void vnc_capture_close(struct vnc *v);

/* vnc-input.c */
int vnc_input_open(struct vnc *v, struct err *e);
void vnc_input_close(struct vnc *v);
int vnc_clip_start(struct vnc *v, struct err *e);
void vnc_clip_stop(struct vnc *v);
/* Called by the capture thread when the CLIPBOARD selection changes owner. */
void vnc_clip_changed(struct vnc *v);
/* Releases every key and button the viewer still holds (it is leaving). */
void vnc_input_release(struct vnc *v, struct vnc_viewer *vw);
/* libvncserver hooks */
void vnc_input_key(rfbBool down, rfbKeySym sym, rfbClientPtr cl);
void vnc_input_pointer(int mask, int x, int y, rfbClientPtr cl);
void vnc_input_cut_text(char *latin1, int len, rfbClientPtr cl);
void vnc_input_cut_text_utf8(char *utf8, int len, rfbClientPtr cl);

#endif
