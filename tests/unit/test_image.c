/*
 * The image library (envd/image/) alone, without X: known pixels are
 * encoded, decoded back with libpng and libturbojpeg, and compared; the
 * box-filter downscale and image_fit against sums done by hand.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <png.h>
#include <stdlib.h>
#include <string.h>
#include <turbojpeg.h>

#include "image.h"

/* A deterministic picture: flat blocks, gradients, text-like noise. */
static unsigned char pattern(int x, int y, int c)
{
	if (x < 16 && y < 16)
		return (unsigned char)(c == 0 ? 200 : c == 1 ? 30 : 90); /* a flat block */
	if ((x + y) % 7 == 0)
		return (unsigned char)((x * 31 + y * 17 + c * 101) * 2654435761u >> 24);
	return (unsigned char)((x * (c + 1) + y * (3 - c)) & 0xff);
}

static void fill(struct image_pix *p)
{
	for (int y = 0; y < p->h; y++) {
		unsigned char *row = image_pix_row(p, y);
		for (int x = 0; x < p->w; x++)
			for (int c = 0; c < 3; c++)
				row[3 * x + c] = pattern(x, y, c);
	}
}

/* Decodes a PNG into packed RGB (malloc'd), checking its size. */
static unsigned char *png_decode(const struct image_buf *b, int w, int h)
{
	png_image pi;
	memset(&pi, 0, sizeof pi);
	pi.version = PNG_IMAGE_VERSION;
	assert_true(png_image_begin_read_from_memory(&pi, b->data, b->len));
	assert_int_equal(pi.width, w);
	assert_int_equal(pi.height, h);
	pi.format = PNG_FORMAT_RGB;
	unsigned char *px = malloc(PNG_IMAGE_SIZE(pi));
	assert_non_null(px);
	assert_true(png_image_finish_read(&pi, NULL, px, 0, NULL));
	return px;
}

static void png_round_trip(int w, int h)
{
	struct image_pix p;
	assert_int_equal(image_pix_alloc(&p, IMAGE_PNG_ROWS, w, h, NULL), 0);
	fill(&p);
	struct image_buf b = {0};
	struct err e = {0};
	assert_int_equal(image_encode_png(&p, &b, &e), 0);
	assert_non_null(b.data);
	unsigned char *px = png_decode(&b, w, h);
	for (int y = 0; y < h; y++)
		assert_memory_equal(px + (size_t)y * 3 * (size_t)w, image_pix_row(&p, y),
				    3 * (size_t)w);
	free(px);
	free(b.data);
	free(p.buf);
}

static void test_png_exact(void **state)
{
	(void)state;
	png_round_trip(1, 1);
	png_round_trip(37, 23);
	/* Large enough for several deflate strips (zlib) or one igzip call. */
	png_round_trip(1280, 800);
}

static void test_png_too_large(void **state)
{
	(void)state;
	/* Refused before any pixel is read, so no buffer is needed. */
	struct image_pix p = {.buf = NULL, .lead = 1, .w = 40000, .h = 40000};
	p.stride = 3 * (size_t)p.w + 1;
	struct image_buf b = {0};
	struct err e = {0};
	assert_int_equal(image_encode_png(&p, &b, &e), -1);
	assert_int_equal(e.code, ERR_TOO_LARGE);
	assert_null(b.data);
}

static void jpeg_check(int quality, int want_samp)
{
	int w = 96, h = 64;
	struct image_pix p;
	assert_int_equal(image_pix_alloc(&p, IMAGE_RGB24, w, h, NULL), 0);
	/* Four flat quadrants: JPEG keeps flat 8x8 blocks almost exact. */
	static const unsigned char q[4][3] = {
	    {255, 0, 0}, {0, 0, 255}, {12, 34, 56}, {240, 240, 240}};
	for (int y = 0; y < h; y++)
		for (int x = 0; x < w; x++)
			memcpy(image_pix_row(&p, y) + 3 * x, q[(y >= h / 2) * 2 + (x >= w / 2)], 3);
	struct image_buf b = {0};
	struct err e = {0};
	assert_int_equal(image_encode_jpeg(&p, quality, &b, &e), 0);
	assert_true(b.len > 2 && b.data[0] == 0xff && b.data[1] == 0xd8);

	tjhandle tj = tjInitDecompress();
	assert_non_null(tj);
	int dw, dh, samp, cs;
	assert_int_equal(tjDecompressHeader3(tj, b.data, b.len, &dw, &dh, &samp, &cs), 0);
	assert_int_equal(dw, w);
	assert_int_equal(dh, h);
	assert_int_equal(samp, want_samp);
	unsigned char *px = malloc(3 * (size_t)w * (size_t)h);
	assert_non_null(px);
	assert_int_equal(tjDecompress2(tj, b.data, b.len, px, w, 0, h, TJPF_RGB, 0), 0);
	/* Inside each quadrant, away from the edges chroma subsampling blurs. */
	for (int y = 0; y < h; y++)
		for (int x = 0; x < w; x++) {
			if (abs(x - w / 2) < 16 || abs(y - h / 2) < 16)
				continue;
			const unsigned char *want = q[(y >= h / 2) * 2 + (x >= w / 2)];
			for (int c = 0; c < 3; c++)
				assert_true(abs(px[3 * ((size_t)y * w + x) + c] - want[c]) <= 8);
		}
	tjDestroy(tj);
	free(px);
	free(b.data);
	free(p.buf);
}

static void test_jpeg(void **state)
{
	(void)state;
	jpeg_check(80, TJSAMP_420);
	jpeg_check(90, TJSAMP_444);
}

static void test_downscale(void **state)
{
	(void)state;
	/* 4x2 -> 2x1: each output is the mean of a 2x2 block. */
	struct image_pix src, dst;
	assert_int_equal(image_pix_alloc(&src, IMAGE_RGB24, 4, 2, NULL), 0);
	assert_int_equal(image_pix_alloc(&dst, IMAGE_PNG_ROWS, 2, 1, NULL), 0);
	static const unsigned char r[2][4] = {{0, 100, 10, 20}, {200, 100, 30, 40}};
	for (int y = 0; y < 2; y++)
		for (int x = 0; x < 4; x++) {
			unsigned char *px = image_pix_row(&src, y) + 3 * x;
			px[0] = r[y][x];
			px[1] = 255;
			px[2] = 7;
		}
	assert_int_equal(image_downscale(&src, &dst), 0);
	const unsigned char *o = image_pix_row(&dst, 0);
	assert_int_equal(o[0], 100); /* (0+100+200+100)/4 */
	assert_int_equal(o[3], 25);  /* (10+20+30+40)/4 */
	assert_int_equal(o[1], 255); /* flat stays flat */
	assert_int_equal(o[5], 7);
	assert_int_equal(dst.buf[0], 0); /* the PNG row's filter byte */
	free(src.buf);
	free(dst.buf);

	/* A flat picture shrunk by an uneven factor stays exactly flat. */
	assert_int_equal(image_pix_alloc(&src, IMAGE_RGB24, 1280, 800, NULL), 0);
	assert_int_equal(image_pix_alloc(&dst, IMAGE_RGB24, 333, 211, NULL), 0);
	for (int y = 0; y < 800; y++)
		for (int x = 0; x < 1280; x++)
			memcpy(image_pix_row(&src, y) + 3 * x, "\x0c\x22\x38", 3);
	assert_int_equal(image_downscale(&src, &dst), 0);
	for (int y = 0; y < 211; y++)
		for (int x = 0; x < 333; x++)
			assert_memory_equal(image_pix_row(&dst, y) + 3 * x, "\x0c\x22\x38", 3);
	free(src.buf);
	free(dst.buf);
}

static void test_fit(void **state)
{
	(void)state;
	int w, h;
	image_fit(1280, 800, 640, 0, &w, &h);
	assert_int_equal(w, 640);
	assert_int_equal(h, 400);
	image_fit(1280, 800, 0, 200, &w, &h);
	assert_int_equal(w, 320);
	assert_int_equal(h, 200);
	image_fit(1280, 800, 2000, 2000, &w, &h); /* never larger */
	assert_int_equal(w, 1280);
	assert_int_equal(h, 800);
	image_fit(1000, 2, 10, 0, &w, &h); /* never below one pixel */
	assert_int_equal(w, 10);
	assert_int_equal(h, 1);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_png_exact), cmocka_unit_test(test_png_too_large),
	    cmocka_unit_test(test_jpeg),      cmocka_unit_test(test_downscale),
	    cmocka_unit_test(test_fit),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
