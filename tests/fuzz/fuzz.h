/*
 * fuzz.h: what the libFuzzer harnesses share: CHECK (a property that must
 * hold: a failed one is a crash libFuzzer reports and keeps), and a reader
 * that cuts the fuzzer's bytes into the pieces a harness needs.
 */
#ifndef CUBICLE_FUZZ_H
#define CUBICLE_FUZZ_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(x)                                                                                   \
	do {                                                                                       \
		if (!(x)) {                                                                        \
			fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #x);      \
			__builtin_trap();                                                          \
		}                                                                                  \
	} while (0)

struct fz {
	const uint8_t *p;
	size_t n;
};

static inline uint8_t fz_u8(struct fz *f)
{
	if (!f->n)
		return 0;
	f->n--;
	return *f->p++;
}

static inline uint32_t fz_u32(struct fz *f)
{
	uint32_t v = 0;
	for (int i = 0; i < 4; i++)
		v = v << 8 | fz_u8(f);
	return v;
}

/* The next piece: bytes up to a NUL (not included) or the end, malloc'd
 * and NUL-terminated; *len its length. Seeds are NUL-separated fields. */
static inline char *fz_str(struct fz *f, size_t *len)
{
	const uint8_t *z = memchr(f->p, 0, f->n);
	size_t k = z ? (size_t)(z - f->p) : f->n;
	char *s = malloc(k + 1);
	if (!s)
		abort();
	memcpy(s, f->p, k);
	s[k] = 0;
	f->p += k + (z ? 1 : 0);
	f->n -= k + (z ? 1 : 0);
	if (len)
		*len = k;
	return s;
}

#endif
