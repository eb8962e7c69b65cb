/*
 * base64: standard alphabet with padding (RFC 4648 §4), strict on decode.
 */
#ifndef CUBICLE_WIRE_BASE64_H
#define CUBICLE_WIRE_BASE64_H

#include <stddef.h>

/* Returns a NUL-terminated string the caller frees, or NULL on OOM. */
char *base64_encode(const void *data, size_t len);

/*
 * Decodes `len` characters of `text` (whitespace is not allowed). Returns a
 * buffer the caller frees (NUL-terminated for convenience) and its length in
 * *out_len, or NULL when the text is not valid base64.
 */
unsigned char *base64_decode(const char *text, size_t len, size_t *out_len);

#endif
