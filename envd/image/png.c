/*
 * png: PNG encoding of screenshots (see the comment below for why not libpng).
 */
#include "image.h"

#include <limits.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>
#ifdef CUBICLE_HAVE_ISAL
#include <isa-l/igzip_lib.h>
#endif

/*
 * PNG: the container is three chunks, written here; the work is deflating
 * the rows, which arrive already in PNG's layout (a zero "none" filter byte
 * then RGB). Filter "none" measured fastest and smallest on desktop content,
 * whose flat areas and text repeat exactly (SUB, UP and Paeth were slower
 * and about 20% larger at zlib level 1; level 6 took 3x as long for 25%
 * less). libpng was not used: it deflates row by row on one core, about
 * 11 ms for a 1280x800 desktop on the 2-core build machine.
 *
 * With ISA-L (CUBICLE_HAVE_ISAL, libisal) the rows are deflated in one call
 * by igzip level 1: about 2.6 ms for the same desktop, 4% larger than zlib
 * level 1. Without it they are cut into horizontal strips deflated by zlib
 * level 1 in parallel, as pigz does: each strip is a raw deflate stream
 * ended by a sync flush (the last one finished), so their concatenation is
 * one valid stream, and the strips' Adler-32s are combined.
 */
#define PNG_HEAD (8 + 12 + 13 + 8) /* signature, IHDR chunk, IDAT length and type */
#define PNG_TAIL (4 + 12)	   /* IDAT CRC, IEND chunk */

static unsigned char *png_be32(unsigned char *p, uint32_t v)
{
	p[0] = (unsigned char)(v >> 24);
	p[1] = (unsigned char)(v >> 16);
	p[2] = (unsigned char)(v >> 8);
	p[3] = (unsigned char)v;
	return p + 4;
}

/*
 * Writes the chunks around a zlib stream of zlen bytes already placed at
 * b->data + PNG_HEAD (the buffer has PNG_TAIL bytes to spare).
 */
static void png_wrap(struct image_buf *b, int w, int h, size_t zlen)
{
	static const unsigned char sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
	unsigned char *o = b->data;
	memcpy(o, sig, 8);
	o = png_be32(o + 8, 13);
	unsigned char *ihdr = o;
	memcpy(o, "IHDR", 4);
	o = png_be32(o + 4, (uint32_t)w);
	o = png_be32(o, (uint32_t)h);
	*o++ = 8; /* bit depth */
	*o++ = 2; /* colour type: RGB */
	*o++ = 0; /* deflate */
	*o++ = 0; /* adaptive filtering (every row says "none") */
	*o++ = 0; /* not interlaced */
	o = png_be32(o, (uint32_t)crc32(0, ihdr, 4 + 13));
	o = png_be32(o, (uint32_t)zlen);
	memcpy(o, "IDAT", 4);
	o = png_be32(o + 4 + zlen, (uint32_t)crc32(0, o, (uInt)(4 + zlen)));
	o = png_be32(o, 0);
	memcpy(o, "IEND", 4);
	png_be32(o + 4, (uint32_t)crc32(0, o, 4));
	b->len = PNG_HEAD + zlen + PNG_TAIL;
}

#ifdef CUBICLE_HAVE_ISAL

/* Deflates all rows with igzip into a fresh PNG-sized buffer. */
static int png_deflate(const struct image_pix *p, struct image_buf *b, size_t *zlen, struct err *e)
{
	size_t in = p->stride * (size_t)p->h;
	/* Stored blocks bound the output; igzip needs room for its headers. */
	size_t cap = in + in / 64 + 2 * ISAL_DEF_MAX_HDR_SIZE + 64;
	b->data = malloc(PNG_HEAD + cap + PNG_TAIL);
	unsigned char *level_buf = malloc(ISAL_DEF_LVL1_DEFAULT);
	if (!b->data || !level_buf) {
		free(level_buf);
		free(b->data);
		b->data = NULL;
		return err_set(e, ERR_INTERNAL, "out of memory for a %dx%d PNG", p->w, p->h);
	}
	struct isal_zstream z;
	isal_deflate_stateless_init(&z);
	z.level = 1;
	z.level_buf = level_buf;
	z.level_buf_size = ISAL_DEF_LVL1_DEFAULT;
	z.gzip_flag = IGZIP_ZLIB;
	z.end_of_stream = 1;
	z.flush = NO_FLUSH;
	z.next_in = p->buf;
	z.avail_in = (uint32_t)in;
	z.next_out = b->data + PNG_HEAD;
	z.avail_out = (uint32_t)cap;
	int r = isal_deflate_stateless(&z);
	free(level_buf);
	if (r != COMP_OK) {
		free(b->data);
		b->data = NULL;
		return err_set(e, ERR_INTERNAL, "PNG encoding failed: igzip error %d", r);
	}
	*zlen = z.total_out;
	return 0;
}

#else

#define PNG_MAX_STRIPS 4
#define PNG_MIN_STRIP  (256 * 1024) /* bytes of rows worth a thread */

struct png_strip {
	const unsigned char *in;
	size_t in_len;
	bool last;
	unsigned char *out; /* malloc'd */
	size_t out_len;
	uLong adler;
	bool ok;
};

static void *png_deflate_strip(void *arg)
{
	struct png_strip *s = arg;
	z_stream z;
	memset(&z, 0, sizeof z);
	if (deflateInit2(&z, 1, Z_DEFLATED, -15, 8, Z_DEFAULT_STRATEGY) != Z_OK)
		return NULL;
	/* Room for the worst case plus the sync flush's empty block. */
	size_t cap = deflateBound(&z, (uLong)s->in_len) + 64;
	s->out = malloc(cap);
	if (s->out) {
		z.next_in = (Bytef *)s->in;
		z.avail_in = (uInt)s->in_len;
		z.next_out = s->out;
		z.avail_out = (uInt)cap;
		int r = deflate(&z, s->last ? Z_FINISH : Z_SYNC_FLUSH);
		s->ok = s->last ? r == Z_STREAM_END : r == Z_OK && z.avail_in == 0;
		s->out_len = cap - z.avail_out;
		s->adler = adler32(adler32(0, NULL, 0), s->in, (uInt)s->in_len);
	}
	deflateEnd(&z);
	return NULL;
}

/* Deflates the rows in parallel strips into a fresh PNG-sized buffer. */
static int png_deflate(const struct image_pix *p, struct image_buf *b, size_t *zlen, struct err *e)
{
	size_t total = p->stride * (size_t)p->h;
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);
	long n = (long)(total / PNG_MIN_STRIP);
	if (n > cpus)
		n = cpus;
	if (n > PNG_MAX_STRIPS)
		n = PNG_MAX_STRIPS;
	if (n > p->h)
		n = p->h;
	if (n < 1)
		n = 1;

	struct png_strip s[PNG_MAX_STRIPS];
	pthread_t th[PNG_MAX_STRIPS];
	bool threaded[PNG_MAX_STRIPS] = {false};
	memset(s, 0, sizeof s);
	for (long i = 0; i < n; i++) {
		size_t y0 = (size_t)p->h * (size_t)i / (size_t)n;
		size_t y1 = (size_t)p->h * (size_t)(i + 1) / (size_t)n;
		s[i].in = p->buf + y0 * p->stride;
		s[i].in_len = (y1 - y0) * p->stride;
		s[i].last = i == n - 1;
	}
	/* Strips 1.. on their own threads (inline if a thread cannot start),
	 * strip 0 on this one. */
	for (long i = 1; i < n; i++)
		threaded[i] = pthread_create(&th[i], NULL, png_deflate_strip, &s[i]) == 0;
	for (long i = 0; i < n; i++)
		if (!threaded[i])
			png_deflate_strip(&s[i]);
	bool ok = true;
	size_t sum = 0;
	for (long i = 0; i < n; i++) {
		if (threaded[i])
			pthread_join(th[i], NULL);
		ok = ok && s[i].ok;
		sum += s[i].out_len;
	}
	*zlen = 2 + sum + 4;
	b->data = ok ? malloc(PNG_HEAD + *zlen + PNG_TAIL) : NULL;
	if (!b->data) {
		for (long i = 0; i < n; i++)
			free(s[i].out);
		return err_set(e, ERR_INTERNAL, "out of memory for a %dx%d PNG", p->w, p->h);
	}
	unsigned char *o = b->data + PNG_HEAD;
	*o++ = 0x78; /* zlib header: deflate, 32K window, */
	*o++ = 0x01; /* fastest level */
	uLong adler = s[0].adler;
	for (long i = 0; i < n; i++) {
		memcpy(o, s[i].out, s[i].out_len);
		o += s[i].out_len;
		if (i)
			adler = adler32_combine(adler, s[i].adler, (z_off_t)s[i].in_len);
		free(s[i].out);
	}
	png_be32(o, (uint32_t)adler);
	return 0;
}

#endif

/* Encodes IMAGE_PNG_ROWS pixels as an 8-bit RGB PNG into a malloc'd buffer. */
int image_encode_png(const struct image_pix *p, struct image_buf *b, struct err *e)
{
	if (p->stride * (size_t)p->h > UINT32_MAX / 2)
		return err_set(e, ERR_TOO_LARGE, "a %dx%d PNG is too large to encode", p->w, p->h);
	size_t zlen;
	if (png_deflate(p, b, &zlen, e) < 0)
		return -1;
	png_wrap(b, p->w, p->h, zlen);
	unsigned char *shrunk = realloc(b->data, b->len); /* igzip's room was generous */
	if (shrunk)
		b->data = shrunk;
	return 0;
}
