/*
 * image: pixels in memory, scaled down and encoded as PNG or JPEG, for
 * screenshots. No X here: the desk's capture (x11/screen.c) reads the screen
 * into an image_pix, this library turns it into what the screenshot action
 * answers. It builds and is unit-tested alone (tests/unit/test_image.c).
 */
#ifndef CUBICLE_IMAGE_H
#define CUBICLE_IMAGE_H

#include <stddef.h>
#include <stdint.h>

#include "err.h"

/*
 * What pixels are stored as: 0x00RRGGBB words, packed RGB, or packed RGB
 * rows each led by a zero byte, which is exactly PNG's filtered image data
 * with filter "none" (so the PNG encoder compresses it in place).
 */
enum image_pixfmt { IMAGE_XRGB32, IMAGE_RGB24, IMAGE_PNG_ROWS };

/* A private buffer of pixels. */
struct image_pix {
	unsigned char *buf; /* malloc'd; row y starts at buf + y * stride */
	size_t stride;
	size_t lead; /* bytes before a row's first pixel: 1 for IMAGE_PNG_ROWS */
	int w, h;
};

/* Allocates p for w x h pixels of fmt (the PNG rows' filter bytes zeroed,
 * the pixels not); ERR_INTERNAL when out of memory. The caller frees p->buf. */
int image_pix_alloc(struct image_pix *p, enum image_pixfmt fmt, int w, int h, struct err *e);

/* The first pixel of row y. */
static inline unsigned char *image_pix_row(const struct image_pix *p, int y)
{
	return p->buf + (size_t)y * p->stride + p->lead;
}

/* The largest size within max_w x max_h (0 = no limit) keeping w:h, never
 * larger than w x h and never below 1x1. */
void image_fit(int w, int h, int max_w, int max_h, int *ow, int *oh);

/*
 * Box-filter downscale of src into dst, both packed RGB (IMAGE_RGB24 or
 * IMAGE_PNG_ROWS), dst already allocated at a size no larger than src's in
 * either direction. Output pixel i covers source pixels [i*W/w, (i+1)*W/w),
 * and a flat colour stays exactly flat. Returns -1 when out of memory.
 */
int image_downscale(const struct image_pix *src, struct image_pix *dst);

/* Encoded bytes. */
struct image_buf {
	unsigned char *data; /* malloc'd: the caller frees */
	size_t len;
};

/* An 8-bit RGB PNG of IMAGE_PNG_ROWS pixels. ERR_TOO_LARGE past 2 GiB of
 * rows, ERR_INTERNAL when out of memory. */
int image_encode_png(const struct image_pix *p, struct image_buf *b, struct err *e);

/* A JPEG of packed RGB pixels (quality 1..100; 4:2:0 chroma below 90, 4:4:4
 * from 90 up, for crisp text). ERR_INTERNAL when it fails. */
int image_encode_jpeg(const struct image_pix *p, int quality, struct image_buf *b, struct err *e);

#endif
