/*
 * rfbfilter: the client→server half of every live-view stream, parsed.
 *
 * The gateway passes what a viewer sends through this filter before it
 * reaches the computer's RFB server. It follows the protocol version the
 * client answers with (RFB 003.003, 003.007 or 003.008; anything else
 * closes), that version's security handshake (3.3: the client sends no
 * security byte; 3.7 and 3.8: one byte, which must be None (1)), the
 * ClientInit byte, and then every client message with its exact length,
 * across any split into WebSocket frames (a byte at a time too).
 *
 * Known messages: SetPixelFormat (0), SetEncodings (2),
 * FramebufferUpdateRequest (3), KeyEvent (4), PointerEvent (5),
 * ClientCutText (6, plain or extended, at most RFBFILTER_CUT_MAX bytes of
 * text), EnableContinuousUpdates (150), SetDesktopSize (251) and QEMU's
 * extended KeyEvent (255/0). A view stream passes only SetPixelFormat,
 * SetEncodings and FramebufferUpdateRequest: nothing that can change the
 * desktop or its clipboard; the rest is dropped whole. A control stream
 * passes every known message. Anything else (an unknown message type, a
 * pixel format of an impossible size, a cut text over the cap) closes the
 * stream: the filter fails closed.
 *
 * Extensions that change a known message's framing (ExtendedMouseButtons'
 * longer PointerEvent) are not spoken: envd's libvncserver 0.9.14 never
 * offers them, so no client may use them.
 *
 * Bytes pass as soon as the filter knows they may: the output of a call is
 * never longer than its input, and a message's head is remembered across
 * calls in the filter's own state (no buffer depends on a frame's size).
 */
#ifndef CUBICLE_RFBFILTER_H
#define CUBICLE_RFBFILTER_H

#include <stddef.h>

/* Largest ClientCutText text (plain, or an extended clipboard's payload):
 * what envd's RFB server (libvncserver) accepts. */
#define RFBFILTER_CUT_MAX (1u << 20)

enum rfbfilter_mode {
	RFBFILTER_VIEW,	   /* a view token: no input, no clipboard */
	RFBFILTER_CONTROL, /* a control token: every known message */
};

struct rfbfilter;

/* NULL when out of memory. */
struct rfbfilter *rfbfilter_new(enum rfbfilter_mode mode);
void rfbfilter_free(void *f);

/*
 * Writes the bytes of in[0..len) that may pass to out and returns their
 * count, at most len (out needs room for len bytes only), or -1 when the
 * stream must be closed (the filter stays closed: every later call is -1).
 */
long rfbfilter_run(void *f, const unsigned char *in, size_t len, unsigned char *out);

/* The minor version the client chose (3, 7 or 8), or 0 before it did. */
int rfbfilter_version(const struct rfbfilter *f);

#endif
