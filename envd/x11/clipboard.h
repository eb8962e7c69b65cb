/*
 * clipboard: the CLIPBOARD selection, UTF-8 text. After clipboard_set()
 * envd owns the selection and serves it (UTF8_STRING, STRING, TEXT,
 * text/plain;charset=utf-8, TARGETS, INCR for large text) to any client that
 * pastes, from its own X connection and thread, until another client takes
 * ownership.
 */
#ifndef CUBICLE_DESK_CLIPBOARD_H
#define CUBICLE_DESK_CLIPBOARD_H

#include <stddef.h>

#include "err.h"

struct clipboard;

struct clipboard *clipboard_open(const char *display, struct err *e);
void clipboard_close(struct clipboard *c);

int clipboard_set(struct clipboard *c, const char *utf8, size_t len, struct err *e);

/*
 * The current clipboard text, from whichever client owns it, in a malloc'd
 * NUL-terminated buffer the caller frees. An empty clipboard (no owner) is
 * "" and not an error. ERR_TIMEOUT if the owner does not answer in time.
 */
int clipboard_get(struct clipboard *c, int timeout_ms, char **out, size_t *len, struct err *e);

#endif
