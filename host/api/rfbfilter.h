/*
 * rfbfilter: what a view-only viewer may send to a computer.
 *
 * The gateway passes the client→server half of an RFB 3.8 connection
 * through this filter when the stream token is a view token: it follows the
 * handshake (version, security type, ClientInit) and then the message
 * stream, message by message across any split into WebSocket frames, and
 * drops KeyEvent, PointerEvent, ClientCutText and the other input or
 * control messages, so a viewer cannot type or click even with a modified
 * client. A message it does not know closes the stream: failing closed.
 */
#ifndef CUBICLE_RFBFILTER_H
#define CUBICLE_RFBFILTER_H

#include <stddef.h>

struct rfbfilter;

struct rfbfilter *rfbfilter_new(void);
void rfbfilter_free(void *f);

/* Writes the allowed bytes of in[0..len) to out (room for len) and returns
 * their count, or -1 when the stream must be closed. */
long rfbfilter_run(void *f, const unsigned char *in, size_t len, unsigned char *out);

#endif
