/*
 * base64: standard alphabet with padding (RFC 4648 §4), strict on decode;
 * and base64url without padding for MACs in URLs and headers.
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

/* base64url without padding (RFC 4648 §5) of n bytes into out, which holds
 * (4 * n + 2) / 3 + 1 bytes: the MACs of tokens and node credentials. */
void base64url_encode(const void *in, size_t n, char *out);

#endif
