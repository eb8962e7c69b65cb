/*
 * ident: the shape of the ids cubicle hands out and accepts, and the one
 * source of random ones.
 */
#ifndef CUBICLE_WIRE_IDENT_H
#define CUBICLE_WIRE_IDENT_H

#include <stdbool.h>
#include <stddef.h>

#include "err.h"

/* 1..max_len of [A-Za-z0-9_-]: safe in a path segment, a file name, a token
 * field or SQL text, whatever a client sent. */
bool ident_ok(const char *s, size_t max_len);

/*
 * The one check for a request value that names something (a workspace, a
 * computer, a session, a key): ident_ok(value, max_len), so never "", ".",
 * "..", a '/', a NUL, '%' or a non-ASCII byte, and never longer than
 * max_len. 0 when it passes; else -1 with e set to ERR_INVALID (400)
 * naming `param` (the value is not echoed: it may be anything). NULL
 * passes only when optional.
 */
int ident_param(const char *param, const char *value, size_t max_len, bool optional, struct err *e);

/* nbytes random bytes (OpenSSL's CSPRNG) as 2*nbytes lowercase hex digits
 * and a NUL into out. ERR_INTERNAL when the generator fails. */
int ident_random_hex(char *out, size_t nbytes, struct err *e);

#endif
