/*
 * utf8: decoding one code point, the one place cubicle reads UTF-8 by hand.
 */
#ifndef CUBICLE_WIRE_UTF8_H
#define CUBICLE_WIRE_UTF8_H

#include <jansson.h>
#include <stddef.h>

/* Decodes the code point at s[0..len) into *cp and returns its length in
 * bytes, or 0 for an invalid or truncated sequence (or len == 0): only
 * RFC 3629's well-formed UTF-8 passes (no overlong forms, no surrogates,
 * nothing past U+10FFFF), so what it accepts json_string accepts too. */
size_t utf8_decode(const char *s, size_t len, unsigned long *cp);

/* A JSON string of the bytes s[0..len) (program output, a tool's log):
 * what is not well-formed UTF-8 (utf8_decode) becomes U+FFFD, a byte at a
 * time; NUL bytes are kept. New reference, NULL when out of memory. */
json_t *utf8_json(const char *s, size_t len);

#endif
