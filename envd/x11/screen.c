/*
 * screen: capture the display (or a region), downscale it, encode PNG/JPEG.
 *
 * Pixels are read through MIT-SHM: one shared XImage the size of the screen
 * is kept in the desk (recreated when the screen size changes) and the X
 * server copies the framebuffer straight into it, several times cheaper than
 * XGetImage pushing 4 MB through the socket. A region is read into the same
 * segment through a temporary image header of the region's size, so the
 * server copies only the region (no full grab and crop). Without MIT-SHM (a
 * remote display, another IPC namespace) XGetImage does the same job, slower.
 *
 * The shared image belongs to the connection, so it is converted into a
 * private buffer while desk_lock is held; scaling and encoding run after the
 * lock is released so a slow encode never delays a click.
 *
 * Encoders are tuned for desktop content (see screen_encode_png for the PNG
 * measurements); JPEG goes through libturbojpeg with 4:2:0 chroma below
 * quality 90 and 4:4:4 from 90 up, where the caller asks for crisp text.
 */
#include "screen.h"

#include <limits.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ipc.h>
#include <sys/shm.h>
#include <unistd.h>
#include <turbojpeg.h>
#include <zlib.h>
#ifdef CUBICLE_HAVE_ISAL
#include <isa-l/igzip_lib.h>
#endif

#include "desk-internal.h"
#include <X11/Xutil.h>

/* How the pixels of an XImage are laid out, decoded once per capture. */
struct screen_layout {
	int bpp;  /* bits per pixel: 8, 16, 24 or 32 */
	bool msb; /* MSBFirst byte order */
	unsigned long mask[3];
	int shift[3], bits[3];
	int byte[3];		   /* byte offset of an 8-bit byte-aligned channel, or -1 */
	unsigned char lut[3][256]; /* channels narrower than 8 bits, widened */
};

/* ---- shared memory image -------------------------------------------------- */

/*
 * The desk's shm fields have four states: shm_image set (live); shm_image
 * NULL but shm.shmaddr set (a mapping left by a connection that died, to be
 * unmapped); shm.shmid == -1 (MIT-SHM does not work with this server); or
 * all clear (not tried yet).
 */
static void screen_shm_forget(struct desk *d)
{
	if (d->shm.shmaddr && d->shm.shmaddr != (char *)-1)
		shmdt(d->shm.shmaddr);
	d->shm.shmaddr = NULL;
	d->shm.shmid = 0;
	d->shm.shmseg = 0;
}

void desk_screen_release(struct desk *d)
{
	if (d->shm_image) {
		if (!d->dead && d->dpy)
			XShmDetach(d->dpy, &d->shm);
		XDestroyImage(d->shm_image); /* frees the header only, not the segment */
		d->shm_image = NULL;
	}
	d->shm_ok = false;
	screen_shm_forget(d);
}

/* Marks MIT-SHM unusable with this server so later captures go straight to
 * XGetImage. */
static void screen_shm_give_up(struct desk *d, XImage *img)
{
	if (img)
		XDestroyImage(img);
	screen_shm_forget(d);
	d->shm.shmid = -1;
	d->shm_ok = false;
}

/*
 * Creates a segment of `size` bytes with permissions `mode` and has the X
 * server attach it. Lock held. On failure everything is undone.
 */
static bool screen_shm_attach(struct desk *d, size_t size, int mode)
{
	d->shm.shmid = shmget(IPC_PRIVATE, size, IPC_CREAT | mode);
	if (d->shm.shmid < 0)
		return false;
	d->shm.shmaddr = shmat(d->shm.shmid, NULL, 0);
	if (d->shm.shmaddr == (char *)-1) {
		d->shm.shmaddr = NULL;
		shmctl(d->shm.shmid, IPC_RMID, NULL);
		return false;
	}
	d->shm.readOnly = False;
	desk_trap_begin();
	Status ok = XShmAttach(d->dpy, &d->shm);
	int xerr = desk_trap_end(d);
	/* Removed now, the segment lives until both sides detach: nothing leaks
	 * if envd or the server dies. */
	shmctl(d->shm.shmid, IPC_RMID, NULL);
	if (!ok || xerr) {
		screen_shm_forget(d);
		return false;
	}
	return true;
}

/*
 * Makes d->shm_image a shared image of exactly w x h for the root's visual,
 * creating or recreating it as needed. Lock held. Returns false when MIT-SHM
 * cannot be used (the caller falls back to XGetImage).
 */
static bool screen_shm_ensure(struct desk *d, Visual *vis, int depth, int w, int h)
{
	XImage *cur = d->shm_image;
	if (cur && cur->width == w && cur->height == h && cur->depth == depth)
		return true;
	if (cur)
		desk_screen_release(d);
	else if (d->shm.shmaddr)
		screen_shm_forget(d); /* left over from a dead connection */
	else if (d->shm.shmid == -1)
		return false;

	if (!XShmQueryExtension(d->dpy)) {
		screen_shm_give_up(d, NULL);
		return false;
	}
	XImage *img = XShmCreateImage(d->dpy, vis, (unsigned)depth, ZPixmap, NULL, &d->shm,
				      (unsigned)w, (unsigned)h);
	if (!img) {
		screen_shm_give_up(d, NULL);
		return false;
	}
	size_t size = (size_t)img->bytes_per_line * (size_t)img->height;
	/* Private to envd's user first; an X server running as another user
	 * (envd as root, Xvfb as the desktop's user) needs the segment open to
	 * it, and can read the screen anyway. */
	if (!screen_shm_attach(d, size, 0600) && !screen_shm_attach(d, size, 0666)) {
		screen_shm_give_up(d, img);
		return false;
	}
	img->data = d->shm.shmaddr;
	d->shm_image = img;
	d->shm_ok = true;
	return true;
}

/* ---- pixel conversion --------------------------------------------------- */

static void screen_layout_init(struct screen_layout *L, const XImage *img, const Visual *vis)
{
	L->bpp = img->bits_per_pixel;
	L->msb = img->byte_order == MSBFirst;
	L->mask[0] = vis->red_mask;
	L->mask[1] = vis->green_mask;
	L->mask[2] = vis->blue_mask;
	for (int c = 0; c < 3; c++) {
		unsigned long m = L->mask[c];
		int shift = 0, bits = 0;
		while (m && !(m & 1)) {
			m >>= 1;
			shift++;
		}
		while (m & 1) {
			m >>= 1;
			bits++;
		}
		L->shift[c] = shift;
		L->bits[c] = bits;
		L->byte[c] = -1;
		if (bits == 8 && shift % 8 == 0 && (L->bpp == 24 || L->bpp == 32)) {
			int b = shift / 8;
			L->byte[c] = L->msb ? L->bpp / 8 - 1 - b : b;
		}
		if (bits > 0 && bits < 8) {
			unsigned max = (1u << bits) - 1;
			for (unsigned v = 0; v <= max; v++)
				L->lut[c][v] = (unsigned char)((v * 255 + max / 2) / max);
		}
	}
}

static unsigned long screen_pixel_at(const struct screen_layout *L, const unsigned char *s)
{
	switch (L->bpp) {
	case 8:
		return s[0];
	case 16:
		return L->msb ? (unsigned long)s[0] << 8 | s[1] : (unsigned long)s[1] << 8 | s[0];
	case 24:
		return L->msb ? (unsigned long)s[0] << 16 | (unsigned long)s[1] << 8 | s[2]
			      : (unsigned long)s[2] << 16 | (unsigned long)s[1] << 8 | s[0];
	default:
		return L->msb ? (unsigned long)s[0] << 24 | (unsigned long)s[1] << 16 |
				    (unsigned long)s[2] << 8 | s[3]
			      : (unsigned long)s[3] << 24 | (unsigned long)s[2] << 16 |
				    (unsigned long)s[1] << 8 | s[0];
	}
}

/* One row of w image pixels to packed RGB (3 bytes a pixel). */
static void screen_row_to_rgb(const struct screen_layout *L, const unsigned char *src, int w,
			      unsigned char *dst)
{
	if (L->bpp == 32 && L->byte[0] == 2 && L->byte[1] == 1 && L->byte[2] == 0) {
		/* The common case (BGRX in memory): let the compiler unroll it. */
		for (int x = 0; x < w; x++, src += 4, dst += 3) {
			dst[0] = src[2];
			dst[1] = src[1];
			dst[2] = src[0];
		}
		return;
	}
	if (L->byte[0] >= 0 && L->byte[1] >= 0 && L->byte[2] >= 0) {
		int step = L->bpp / 8, r = L->byte[0], g = L->byte[1], b = L->byte[2];
		for (int x = 0; x < w; x++, src += step, dst += 3) {
			dst[0] = src[r];
			dst[1] = src[g];
			dst[2] = src[b];
		}
		return;
	}
	int step = L->bpp / 8;
	for (int x = 0; x < w; x++, src += step, dst += 3) {
		unsigned long p = screen_pixel_at(L, src);
		for (int c = 0; c < 3; c++) {
			unsigned long v = (p & L->mask[c]) >> L->shift[c];
			if (L->bits[c] >= 8)
				dst[c] = (unsigned char)(v >> (L->bits[c] - 8));
			else
				dst[c] = L->lut[c][v];
		}
	}
}

/* One row of w image pixels to 0x00RRGGBB; rgb is scratch for 3*w bytes. */
static void screen_row_to_xrgb(const struct screen_layout *L, const unsigned char *src, int w,
			       uint32_t *dst, unsigned char *rgb)
{
	if (L->bpp == 32 && !L->msb && L->mask[0] == 0xff0000 && L->mask[1] == 0xff00 &&
	    L->mask[2] == 0xff) {
		for (int x = 0; x < w; x++, src += 4)
			dst[x] = (uint32_t)src[2] << 16 | (uint32_t)src[1] << 8 | src[0];
		return;
	}
	screen_row_to_rgb(L, src, w, rgb);
	for (int x = 0; x < w; x++)
		dst[x] =
		    (uint32_t)rgb[3 * x] << 16 | (uint32_t)rgb[3 * x + 1] << 8 | rgb[3 * x + 2];
}

/* ---- reading the screen ------------------------------------------------- */

/*
 * What a capture is converted into: 0x00RRGGBB words, packed RGB, or packed
 * RGB rows each led by a zero byte, which is exactly PNG's filtered image
 * data with filter "none" (so the PNG encoder compresses it in place).
 */
enum screen_pixfmt { SCREEN_XRGB32, SCREEN_RGB24, SCREEN_PNG_ROWS };

/* A private copy of captured (or scaled) pixels. */
struct screen_pix {
	unsigned char *buf; /* malloc'd; row y starts at buf + y * stride */
	size_t stride;
	size_t lead; /* bytes before a row's first pixel: 1 for SCREEN_PNG_ROWS */
	int w, h;
};

static int screen_pix_alloc(struct screen_pix *p, enum screen_pixfmt fmt, int w, int h,
			    struct err *e)
{
	p->w = w;
	p->h = h;
	p->lead = fmt == SCREEN_PNG_ROWS ? 1 : 0;
	p->stride = (size_t)w * (fmt == SCREEN_XRGB32 ? 4 : 3) + p->lead;
	p->buf = malloc(p->stride * (size_t)h);
	if (!p->buf)
		return err_set(e, ERR_INTERNAL, "out of memory for a %dx%d image", w, h);
	if (p->lead)
		for (int y = 0; y < h; y++)
			p->buf[(size_t)y * p->stride] = 0;
	return 0;
}

static unsigned char *screen_pix_row(const struct screen_pix *p, int y)
{
	return p->buf + (size_t)y * p->stride + p->lead;
}

/* A capture rectangle; whole = the full screen whatever its size. */
struct screen_rect {
	bool whole;
	int x, y, width, height;
};

static int screen_check_rect(const struct screen_rect *r, int sw, int sh, struct err *e)
{
	if (r->x < 0 || r->x >= sw)
		return err_param(e, "x", "x: %d is off-screen (the screen is %dx%d, so 0..%d)",
				 r->x, sw, sh, sw - 1);
	if (r->y < 0 || r->y >= sh)
		return err_param(e, "y", "y: %d is off-screen (the screen is %dx%d, so 0..%d)",
				 r->y, sw, sh, sh - 1);
	if (r->width < 1)
		return err_param(e, "width", "width: must be at least 1, got %d", r->width);
	if (r->height < 1)
		return err_param(e, "height", "height: must be at least 1, got %d", r->height);
	if ((long long)r->x + r->width > sw)
		return err_param(e, "width",
				 "width: x + width = %lld goes past the screen's right edge (the "
				 "screen is %d wide)",
				 (long long)r->x + r->width, sw);
	if ((long long)r->y + r->height > sh)
		return err_param(e, "height",
				 "height: y + height = %lld goes past the screen's bottom edge "
				 "(the screen is %d high)",
				 (long long)r->y + r->height, sh);
	return 0;
}

/* Converts every row of img into a fresh buffer of the requested format. */
static int screen_convert(const XImage *img, const Visual *vis, enum screen_pixfmt fmt,
			  struct screen_pix *out, struct err *e)
{
	int w = img->width, h = img->height;
	struct screen_layout *L = malloc(sizeof *L);
	unsigned char *scratch = fmt == SCREEN_XRGB32 ? malloc((size_t)w * 3) : NULL;
	if (!L || (fmt == SCREEN_XRGB32 && !scratch)) {
		free(L);
		free(scratch);
		return err_set(e, ERR_INTERNAL, "out of memory for a %dx%d capture", w, h);
	}
	if (screen_pix_alloc(out, fmt, w, h, e) < 0) {
		free(L);
		free(scratch);
		return -1;
	}
	screen_layout_init(L, img, vis);
	for (int y = 0; y < h; y++) {
		const unsigned char *src =
		    (const unsigned char *)img->data + (size_t)y * (size_t)img->bytes_per_line;
		if (fmt == SCREEN_XRGB32)
			screen_row_to_xrgb(L, src, w, (uint32_t *)screen_pix_row(out, y), scratch);
		else
			screen_row_to_rgb(L, src, w, screen_pix_row(out, y));
	}
	free(scratch);
	free(L);
	return 0;
}

/*
 * Reads rectangle r (validated against the current screen size) into a
 * fresh buffer of fmt pixels. The lock is held for the read and the
 * conversion only.
 */
static int screen_read(struct desk *d, const struct screen_rect *r, enum screen_pixfmt fmt,
		       struct screen_pix *out, struct err *e)
{
	if (desk_lock(d, e) < 0)
		return -1;
	XWindowAttributes wa;
	if (!XGetWindowAttributes(d->dpy, d->root, &wa)) {
		desk_unlock(d);
		return err_set(e, ERR_UNAVAILABLE, "cannot read the root window's attributes");
	}
	if (wa.visual->class != TrueColor && wa.visual->class != DirectColor) {
		desk_unlock(d);
		return err_set(e, ERR_CONFLICT,
			       "the display uses a %d-bit colour-mapped visual; screenshots need "
			       "a TrueColor display (depth 16, 24 or 30)",
			       wa.depth);
	}
	struct screen_rect rr = {false, 0, 0, wa.width, wa.height};
	if (!r->whole) {
		if (screen_check_rect(r, wa.width, wa.height, e) < 0) {
			desk_unlock(d);
			return -1;
		}
		rr = *r;
	}

	int rc = -1;
	bool done = false;
	if (screen_shm_ensure(d, wa.visual, wa.depth, wa.width, wa.height)) {
		XImage *img = d->shm_image, *sub = NULL;
		if (rr.width != wa.width || rr.height != wa.height) {
			/* Same segment, a header of the region's size: the server
			 * writes only the region, rows packed at the region's pitch. */
			sub = XShmCreateImage(d->dpy, wa.visual, (unsigned)wa.depth, ZPixmap,
					      d->shm.shmaddr, &d->shm, (unsigned)rr.width,
					      (unsigned)rr.height);
			img = sub;
		}
		if (img && XShmGetImage(d->dpy, d->root, img, rr.x, rr.y, AllPlanes)) {
			rc = screen_convert(img, wa.visual, fmt, out, e);
			done = true;
		}
		if (sub)
			XDestroyImage(sub);
	}
	if (!done) {
		desk_trap_begin();
		XImage *img = XGetImage(d->dpy, d->root, rr.x, rr.y, (unsigned)rr.width,
					(unsigned)rr.height, AllPlanes, ZPixmap);
		int xerr = desk_trap_end(d);
		if (!img || xerr) {
			if (img)
				XDestroyImage(img);
			desk_unlock(d);
			return err_set(e, ERR_UNAVAILABLE,
				       "the X server refused to read the screen (X error %d)",
				       xerr);
		}
		rc = screen_convert(img, wa.visual, fmt, out, e);
		XDestroyImage(img);
	}
	desk_unlock(d);
	return rc;
}

int screen_grab_rgb(struct desk *d, int x, int y, int width, int height, uint32_t **pixels,
		    struct err *e)
{
	struct screen_rect r = {false, x, y, width, height};
	struct screen_pix p;
	if (screen_read(d, &r, SCREEN_XRGB32, &p, e) < 0)
		return -1;
	*pixels = (uint32_t *)p.buf;
	return 0;
}

/* ---- downscaling -------------------------------------------------------- */

/*
 * Area-averaging weights for shrinking n source pixels to m (m <= n), in
 * fixed point with `one` as 1.0. Output i covers source interval
 * [i*n/m, (i+1)*n/m); in units of 1/m of a source pixel the overlaps are
 * exact integers, and rounding the cumulative sum keeps every output's
 * weights summing to exactly `one` (so flat colours stay exactly flat).
 * first[i] is output i's first source pixel, count[i] how many it covers, and
 * its weights are at wt + start[i].
 */
struct screen_weights {
	int *first, *count, *start;
	uint32_t *wt;
};

static void screen_weights_free(struct screen_weights *W)
{
	free(W->first);
	free(W->count);
	free(W->start);
	free(W->wt);
}

static int screen_weights_init(struct screen_weights *W, int n, int m, uint32_t one)
{
	/* Each output covers at most ceil(n/m) + 1 source pixels. */
	size_t per = (size_t)(n / m) + 2;
	W->first = malloc(sizeof(int) * (size_t)m);
	W->count = malloc(sizeof(int) * (size_t)m);
	W->start = malloc(sizeof(int) * (size_t)m);
	W->wt = malloc(sizeof(uint32_t) * per * (size_t)m);
	if (!W->first || !W->count || !W->start || !W->wt) {
		screen_weights_free(W);
		return -1;
	}
	size_t k = 0;
	for (int i = 0; i < m; i++) {
		long long lo = (long long)i * n, hi = (long long)(i + 1) * n; /* in 1/m units */
		int j0 = (int)(lo / m), j1 = (int)((hi + m - 1) / m);	      /* [j0, j1) */
		W->first[i] = j0;
		W->count[i] = j1 - j0;
		W->start[i] = (int)k;
		uint32_t given = 0;
		long long cum = 0;
		for (int j = j0; j < j1; j++) {
			long long a = (long long)j * m > lo ? (long long)j * m : lo;
			long long b = (long long)(j + 1) * m < hi ? (long long)(j + 1) * m : hi;
			cum += b - a;
			uint32_t upto = (uint32_t)((cum * one + n / 2) / n);
			W->wt[k++] = upto - given;
			given = upto;
		}
	}
	return 0;
}

/*
 * Box-filter downscale of src into dst (already allocated at the smaller
 * size; packed RGB either way). Rows are first blended vertically (weights
 * sum to 2^16) into 8.8 fixed point, then columns horizontally (weights sum
 * to 2^12), which fits 32 bits.
 */
static int screen_downscale(const struct screen_pix *src, struct screen_pix *dst)
{
	int w = src->w, h = src->h, ow = dst->w, oh = dst->h;
	struct screen_weights H = {0}, V = {0};
	size_t row = 3 * (size_t)w;
	uint32_t *acc = malloc(sizeof(uint32_t) * row);
	int rc = -1;
	if (!acc || screen_weights_init(&H, w, ow, 1u << 12) < 0 ||
	    screen_weights_init(&V, h, oh, 1u << 16) < 0)
		goto out;
	for (int oy = 0; oy < oh; oy++) {
		memset(acc, 0, sizeof(uint32_t) * row);
		for (int k = 0; k < V.count[oy]; k++) {
			uint32_t wy = V.wt[V.start[oy] + k];
			if (!wy)
				continue;
			const unsigned char *s = screen_pix_row(src, V.first[oy] + k);
			for (size_t i = 0; i < row; i++)
				acc[i] += wy * s[i];
		}
		for (size_t i = 0; i < row; i++)
			acc[i] = (acc[i] + 128) >> 8;
		unsigned char *o = screen_pix_row(dst, oy);
		for (int ox = 0; ox < ow; ox++) {
			uint32_t r = 1u << 19, g = 1u << 19, b = 1u << 19;
			const uint32_t *wt = H.wt + H.start[ox];
			const uint32_t *a = acc + 3 * (size_t)H.first[ox];
			for (int k = 0; k < H.count[ox]; k++, a += 3) {
				r += wt[k] * a[0];
				g += wt[k] * a[1];
				b += wt[k] * a[2];
			}
			o[3 * ox] = (unsigned char)(r >> 20);
			o[3 * ox + 1] = (unsigned char)(g >> 20);
			o[3 * ox + 2] = (unsigned char)(b >> 20);
		}
	}
	rc = 0;
out:
	screen_weights_free(&H);
	screen_weights_free(&V);
	free(acc);
	return rc;
}

/* The largest size within max_width x max_height keeping w:h (never larger). */
static void screen_fit(int w, int h, int max_w, int max_h, int *ow, int *oh)
{
	double s = 1.0;
	if (max_w > 0 && max_w < w)
		s = (double)max_w / w;
	if (max_h > 0 && max_h < h && (double)max_h / h < s)
		s = (double)max_h / h;
	*ow = w;
	*oh = h;
	if (s < 1.0) {
		*ow = (int)(w * s + 0.5);
		*oh = (int)(h * s + 0.5);
		if (*ow < 1)
			*ow = 1;
		if (*oh < 1)
			*oh = 1;
		if (max_w > 0 && *ow > max_w)
			*ow = max_w;
		if (max_h > 0 && *oh > max_h)
			*oh = max_h;
	}
}

/* ---- encoders ------------------------------------------------------------ */

struct screen_buf {
	unsigned char *data;
	size_t len;
};

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
#define SCREEN_PNG_HEAD (8 + 12 + 13 + 8) /* signature, IHDR chunk, IDAT length and type */
#define SCREEN_PNG_TAIL (4 + 12)	  /* IDAT CRC, IEND chunk */

static unsigned char *screen_be32(unsigned char *p, uint32_t v)
{
	p[0] = (unsigned char)(v >> 24);
	p[1] = (unsigned char)(v >> 16);
	p[2] = (unsigned char)(v >> 8);
	p[3] = (unsigned char)v;
	return p + 4;
}

/*
 * Writes the chunks around a zlib stream of zlen bytes already placed at
 * b->data + SCREEN_PNG_HEAD (the buffer has SCREEN_PNG_TAIL bytes to spare).
 */
static void screen_png_wrap(struct screen_buf *b, int w, int h, size_t zlen)
{
	static const unsigned char sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
	unsigned char *o = b->data;
	memcpy(o, sig, 8);
	o = screen_be32(o + 8, 13);
	unsigned char *ihdr = o;
	memcpy(o, "IHDR", 4);
	o = screen_be32(o + 4, (uint32_t)w);
	o = screen_be32(o, (uint32_t)h);
	*o++ = 8; /* bit depth */
	*o++ = 2; /* colour type: RGB */
	*o++ = 0; /* deflate */
	*o++ = 0; /* adaptive filtering (every row says "none") */
	*o++ = 0; /* not interlaced */
	o = screen_be32(o, (uint32_t)crc32(0, ihdr, 4 + 13));
	o = screen_be32(o, (uint32_t)zlen);
	memcpy(o, "IDAT", 4);
	o = screen_be32(o + 4 + zlen, (uint32_t)crc32(0, o, (uInt)(4 + zlen)));
	o = screen_be32(o, 0);
	memcpy(o, "IEND", 4);
	screen_be32(o + 4, (uint32_t)crc32(0, o, 4));
	b->len = SCREEN_PNG_HEAD + zlen + SCREEN_PNG_TAIL;
}

#ifdef CUBICLE_HAVE_ISAL

/* Deflates all rows with igzip into a fresh PNG-sized buffer. */
static int screen_png_deflate(const struct screen_pix *p, struct screen_buf *b, size_t *zlen,
			      struct err *e)
{
	size_t in = p->stride * (size_t)p->h;
	/* Stored blocks bound the output; igzip needs room for its headers. */
	size_t cap = in + in / 64 + 2 * ISAL_DEF_MAX_HDR_SIZE + 64;
	b->data = malloc(SCREEN_PNG_HEAD + cap + SCREEN_PNG_TAIL);
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
	z.next_out = b->data + SCREEN_PNG_HEAD;
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

#define SCREEN_PNG_MAX_STRIPS 4
#define SCREEN_PNG_MIN_STRIP  (256 * 1024) /* bytes of rows worth a thread */

struct screen_strip {
	const unsigned char *in;
	size_t in_len;
	bool last;
	unsigned char *out; /* malloc'd */
	size_t out_len;
	uLong adler;
	bool ok;
};

static void *screen_png_deflate_strip(void *arg)
{
	struct screen_strip *s = arg;
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
static int screen_png_deflate(const struct screen_pix *p, struct screen_buf *b, size_t *zlen,
			      struct err *e)
{
	size_t total = p->stride * (size_t)p->h;
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);
	long n = (long)(total / SCREEN_PNG_MIN_STRIP);
	if (n > cpus)
		n = cpus;
	if (n > SCREEN_PNG_MAX_STRIPS)
		n = SCREEN_PNG_MAX_STRIPS;
	if (n > p->h)
		n = p->h;
	if (n < 1)
		n = 1;

	struct screen_strip s[SCREEN_PNG_MAX_STRIPS];
	pthread_t th[SCREEN_PNG_MAX_STRIPS];
	bool threaded[SCREEN_PNG_MAX_STRIPS] = {false};
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
		threaded[i] = pthread_create(&th[i], NULL, screen_png_deflate_strip, &s[i]) == 0;
	for (long i = 0; i < n; i++)
		if (!threaded[i])
			screen_png_deflate_strip(&s[i]);
	bool ok = true;
	size_t sum = 0;
	for (long i = 0; i < n; i++) {
		if (threaded[i])
			pthread_join(th[i], NULL);
		ok = ok && s[i].ok;
		sum += s[i].out_len;
	}
	*zlen = 2 + sum + 4;
	b->data = ok ? malloc(SCREEN_PNG_HEAD + *zlen + SCREEN_PNG_TAIL) : NULL;
	if (!b->data) {
		for (long i = 0; i < n; i++)
			free(s[i].out);
		return err_set(e, ERR_INTERNAL, "out of memory for a %dx%d PNG", p->w, p->h);
	}
	unsigned char *o = b->data + SCREEN_PNG_HEAD;
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
	screen_be32(o, (uint32_t)adler);
	return 0;
}

#endif

/* Encodes SCREEN_PNG_ROWS pixels as an 8-bit RGB PNG into a malloc'd buffer. */
static int screen_encode_png(const struct screen_pix *p, struct screen_buf *b, struct err *e)
{
	if (p->stride * (size_t)p->h > UINT32_MAX / 2)
		return err_set(e, ERR_TOO_LARGE, "a %dx%d PNG is too large to encode", p->w, p->h);
	size_t zlen;
	if (screen_png_deflate(p, b, &zlen, e) < 0)
		return -1;
	screen_png_wrap(b, p->w, p->h, zlen);
	unsigned char *shrunk = realloc(b->data, b->len); /* igzip's room was generous */
	if (shrunk)
		b->data = shrunk;
	return 0;
}

/* Encodes packed RGB as JPEG into a malloc'd buffer. */
static int screen_encode_jpeg(const struct screen_pix *p, int quality, struct screen_buf *b,
			      struct err *e)
{
	int samp = quality >= 90 ? TJSAMP_444 : TJSAMP_420;
	unsigned long size = tjBufSize(p->w, p->h, samp);
	if (size == (unsigned long)-1)
		return err_set(e, ERR_INTERNAL, "JPEG encoding failed: %s", tjGetErrorStr());
	b->data = malloc(size);
	tjhandle tj = tjInitCompress();
	if (!b->data || !tj) {
		free(b->data);
		b->data = NULL;
		if (tj)
			tjDestroy(tj);
		return err_set(e, ERR_INTERNAL, "out of memory for the JPEG encoder");
	}
	if (tjCompress2(tj, screen_pix_row(p, 0), p->w, (int)p->stride, p->h, TJPF_RGB, &b->data,
			&size, samp, quality, TJFLAG_NOREALLOC | TJFLAG_FASTDCT) < 0) {
		err_set(e, ERR_INTERNAL, "JPEG encoding failed: %s", tjGetErrorStr2(tj));
		tjDestroy(tj);
		free(b->data);
		b->data = NULL;
		return -1;
	}
	tjDestroy(tj);
	b->len = size;
	unsigned char *shrunk = realloc(b->data, size ? size : 1);
	if (shrunk)
		b->data = shrunk;
	return 0;
}

/* ---- capture -------------------------------------------------------------- */

int screen_capture(struct desk *d, const struct screen_opts *o, struct screen_image *out,
		   struct err *e)
{
	if (o->format == SCREEN_JPEG && (o->quality < 1 || o->quality > 100))
		return err_param(e, "quality", "quality: %d is out of range [1, 100]", o->quality);
	if (o->max_width < 0)
		return err_param(e, "max_width", "max_width: must be positive, got %d",
				 o->max_width);
	if (o->max_height < 0)
		return err_param(e, "max_height", "max_height: must be positive, got %d",
				 o->max_height);

	bool exact = o->out_width > 0 && o->out_height > 0;
	if ((o->out_width > 0) != (o->out_height > 0))
		return err_param(e, o->out_width > 0 ? "out_height" : "out_width",
				 "%s: out_width and out_height go together",
				 o->out_width > 0 ? "out_height" : "out_width");

	/* Unscaled PNG rows are captured straight into PNG's row layout. */
	enum screen_pixfmt want = o->format == SCREEN_PNG ? SCREEN_PNG_ROWS : SCREEN_RGB24;
	bool scaling = exact || o->max_width > 0 || o->max_height > 0;
	struct screen_rect r = {!o->region, o->x, o->y, o->width, o->height};
	struct screen_pix pix;
	if (screen_read(d, &r, scaling ? SCREEN_RGB24 : want, &pix, e) < 0)
		return -1;
	int w = pix.w, h = pix.h, ow = o->out_width, oh = o->out_height;
	if (exact && (ow > w || oh > h)) {
		free(pix.buf);
		return err_param(
		    e, ow > w ? "out_width" : "out_height",
		    "%s: %dx%d is larger than the captured %dx%d; screenshots are only "
		    "scaled down",
		    ow > w ? "out_width" : "out_height", ow, oh, w, h);
	}
	if (!exact)
		screen_fit(w, h, o->max_width, o->max_height, &ow, &oh);
	if (ow != w || oh != h || (scaling && want != SCREEN_RGB24)) {
		struct screen_pix small;
		if (screen_pix_alloc(&small, want, ow, oh, e) < 0) {
			free(pix.buf);
			return -1;
		}
		int rc = 0;
		if (ow != w || oh != h)
			rc = screen_downscale(&pix, &small);
		else
			for (int y = 0; y < h; y++)
				memcpy(screen_pix_row(&small, y), screen_pix_row(&pix, y),
				       3 * (size_t)w);
		free(pix.buf);
		if (rc < 0) {
			free(small.buf);
			return err_set(e, ERR_INTERNAL, "out of memory scaling to %dx%d", ow, oh);
		}
		pix = small;
	}

	struct screen_buf b = {0};
	int rc = o->format == SCREEN_JPEG ? screen_encode_jpeg(&pix, o->quality, &b, e)
					  : screen_encode_png(&pix, &b, e);
	free(pix.buf);
	if (rc < 0)
		return -1;
	out->data = b.data;
	out->len = b.len;
	out->width = ow;
	out->height = oh;
	out->scale = (double)ow / w;
	out->mime = o->format == SCREEN_JPEG ? "image/jpeg" : "image/png";
	return 0;
}
