/*
 * vnc: an RFB (VNC) server on the X display envd drives, so that people can
 * watch an agent's desktop live and take it over.
 *
 * The wire is plain RFB 3.8 with security type None on a UNIX socket (a
 * container) or a virtio-serial port whose host end is a UNIX socket of
 * QEMU's (a microVM), and nothing else: no TCP listener, no HTTP, no
 * WebSocket framing. cubicled's gateway checks the stream token, terminates
 * the browser's WebSocket and pipes its binary frames to this socket through
 * its RFB parser (which drops the input messages of view-only viewers). Every
 * connection starts with one line from the gateway, before RFB:
 * "cubicle-viewer view\n" or "cubicle-viewer control\n" (within 5 s; anything
 * else is closed unheard). A view connection's key, pointer and cut text are
 * ignored (libvncserver's viewOnly, checked again in vnc-input.c) and it
 * never gets the clipboard: an agent's copied secrets do not reach people who
 * only watch.
 *
 * What viewers get: the screen from XDamage (only damaged regions are read,
 * through MIT-SHM; nothing is read while the screen is still, or while nobody
 * watches), the cursor shape from XFixes as the RichCursor pseudo-encoding,
 * libvncserver's encodings (Tight with JPEG, ZRLE, Zlib, Hextile, Raw; the
 * client chooses, and its quality level sets the JPEG quality), pointer and
 * keys injected through XTest, the CLIPBOARD both ways (also as the extended
 * clipboard, UTF-8), several viewers at once (one at a time on a port). The
 * desktop's size is the screen's: when set_screen_size (XRandR) changes it,
 * the framebuffer follows and viewers that understand NewFBSize or
 * ExtendedDesktopSize are told (vnc-capture.c). A viewer's own
 * SetDesktopSize requests are refused (libvncserver's default, no hook set):
 * the API decides the size.
 */
#ifndef CUBICLE_ENVD_VNC_H
#define CUBICLE_ENVD_VNC_H

#include "err.h"

struct envd;
struct vnc;

/*
 * Starts serving env's display (env->display, env->desk and env->clipboard
 * set) on addr: "unix:PATH" (a stale socket at PATH is replaced, the new one
 * is private to envd's user, 0600) or "port:/dev/vportNpM" (a virtio-serial
 * port, opened again for each viewer). Fails (NULL, e filled) when the
 * address is neither, the display lacks XDamage, XFixes or 24-bit colour, or
 * the socket cannot be made.
 */
struct vnc *vnc_start(struct envd *env, const char *addr, struct err *e);

/* Disconnects every viewer, stops the threads, removes the socket; NULL is fine. */
void vnc_stop(struct vnc *v);

#endif
