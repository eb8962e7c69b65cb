/*
 * xshm: one MIT-SHM attach path (see xshm.h).
 */
#include "xshm.h"

#include <string.h>
#include <sys/ipc.h>
#include <sys/shm.h>
#include <X11/Xutil.h>

void xshm_detach(Display *dpy, XShmSegmentInfo *seg, bool alive)
{
	if (seg->shmaddr && seg->shmaddr != (char *)-1) {
		if (alive && dpy)
			XShmDetach(dpy, seg);
		shmdt(seg->shmaddr);
	}
	memset(seg, 0, sizeof *seg);
}

/* One try with permissions `mode`; on failure everything is undone. */
static bool xshm_try(Display *dpy, Window root, Visual *vis, int depth, size_t size, int mode,
		     XShmSegmentInfo *seg)
{
	memset(seg, 0, sizeof *seg);
	seg->shmid = shmget(IPC_PRIVATE, size, IPC_CREAT | mode);
	if (seg->shmid < 0) {
		seg->shmid = 0;
		return false;
	}
	seg->shmaddr = shmat(seg->shmid, NULL, 0);
	if (seg->shmaddr == (char *)-1) {
		shmctl(seg->shmid, IPC_RMID, NULL);
		memset(seg, 0, sizeof *seg);
		return false;
	}
	seg->readOnly = False;
	bool ok = XShmAttach(dpy, seg);
	XSync(dpy, False);
	/* Removed now, it lives until both sides detach. */
	shmctl(seg->shmid, IPC_RMID, NULL);
	if (ok) {
		XImage *img =
		    XShmCreateImage(dpy, vis, (unsigned)depth, ZPixmap, seg->shmaddr, seg, 1, 1);
		ok = img && XShmGetImage(dpy, root, img, 0, 0, AllPlanes);
		if (img)
			XDestroyImage(img); /* the header only */
	}
	if (!ok) {
		xshm_detach(dpy, seg, true);
		XSync(dpy, False);
	}
	return ok;
}

bool xshm_attach(Display *dpy, Window root, Visual *vis, int depth, size_t size,
		 XShmSegmentInfo *seg)
{
	memset(seg, 0, sizeof *seg);
	if (!XShmQueryExtension(dpy))
		return false;
	return xshm_try(dpy, root, vis, depth, size, 0600, seg) ||
	       xshm_try(dpy, root, vis, depth, size, 0666, seg);
}
