/*
 * xshm: the MIT-SHM segment an X client reads the screen through, for the
 * desk's screenshots (screen.c) and the RFB server's capture
 * (../vnc/vnc-capture.c), each on its own connection.
 */
#ifndef CUBICLE_DESK_XSHM_H
#define CUBICLE_DESK_XSHM_H

#include <stdbool.h>
#include <stddef.h>
#include <X11/Xlib.h>
#include <X11/extensions/XShm.h>

/*
 * Creates a segment of `size` bytes and has dpy's X server attach it:
 * private to envd's user (0600) first, else open to all (0666) for a server
 * running as another user (envd as root, Xvfb as the desktop's user), which
 * can read the screen anyway. The attach is proven by reading one pixel of
 * root (of visual vis, depth depth) through the segment, so a refusal is
 * seen whatever the connection's X error handler does with the error. The
 * segment is marked for removal at once: it lives until both sides detach,
 * so nothing leaks if envd or the server dies.
 *
 * Returns true with seg filled (seg->shmaddr is the memory), or false with
 * seg cleared when MIT-SHM cannot be used with this server (no extension,
 * another IPC namespace, out of segments): the caller reads with XGetImage.
 */
bool xshm_attach(Display *dpy, Window root, Visual *vis, int depth, size_t size,
		 XShmSegmentInfo *seg);

/*
 * Has the server detach seg (only when `alive`: dpy is usable) and unmaps
 * it here; seg is cleared. Nothing happens to a cleared seg.
 */
void xshm_detach(Display *dpy, XShmSegmentInfo *seg, bool alive);

#endif
