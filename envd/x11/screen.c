/*
 * screen: capture the display (or a region); the image library (../image/)
 * downscales and encodes it as PNG or JPEG.
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
 */
#include "screen.h"

#include <stdlib.h>
#include <string.h>

#include "desk-internal.h"
#include "image.h"
#include "xshm.h"
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
 * all clear (not tried yet). The segment itself is xshm.c's.
 */
void desk_screen_release(struct desk *d)
{
	if (d->shm_image) {
		XDestroyImage(d->shm_image); /* frees the header only, not the segment */
		d->shm_image = NULL;
		xshm_detach(d->dpy, &d->shm, !d->dead && d->dpy);
	}
	d->shm_ok = false;
	xshm_detach(NULL, &d->shm, false); /* a dead connection's, if any */
}

/*
 * Makes d->shm_image a shared image of exactly w x h for the root's visual,
 * creating or recreating it as needed. Lock held. Returns false when MIT-SHM
 * cannot be used (the caller falls back to XGetImage), and stays so for this
 * server.
 */
static bool screen_shm_ensure(struct desk *d, Visual *vis, int depth, int w, int h)
{
	XImage *cur = d->shm_image;
	if (cur && cur->width == w && cur->height == h && cur->depth == depth)
		return true;
	if (cur || d->shm.shmaddr)
		desk_screen_release(d); /* another size, or left by a dead connection */
	else if (d->shm.shmid == -1)
		return false;

	XImage *img = XShmCreateImage(d->dpy, vis, (unsigned)depth, ZPixmap, NULL, &d->shm,
				      (unsigned)w, (unsigned)h);
	bool ok = img != NULL;
	if (ok) {
		size_t size = (size_t)img->bytes_per_line * (size_t)img->height;
		desk_trap_begin(); /* a refused attach's errors end here */
		ok = xshm_attach(d->dpy, d->root, vis, depth, size, &d->shm);
		desk_trap_end(d);
	}
	if (!ok) {
		if (img)
			XDestroyImage(img);
		d->shm.shmid = -1; /* do not try again with this server */
		d->shm_ok = false;
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
static int screen_convert(const XImage *img, const Visual *vis, enum image_pixfmt fmt,
			  struct image_pix *out, struct err *e)
{
	int w = img->width, h = img->height;
	struct screen_layout *L = malloc(sizeof *L);
	unsigned char *scratch = fmt == IMAGE_XRGB32 ? malloc((size_t)w * 3) : NULL;
	if (!L || (fmt == IMAGE_XRGB32 && !scratch)) {
		free(L);
		free(scratch);
		return err_set(e, ERR_INTERNAL, "out of memory for a %dx%d capture", w, h);
	}
	if (image_pix_alloc(out, fmt, w, h, e) < 0) {
		free(L);
		free(scratch);
		return -1;
	}
	screen_layout_init(L, img, vis);
	for (int y = 0; y < h; y++) {
		const unsigned char *src =
		    (const unsigned char *)img->data + (size_t)y * (size_t)img->bytes_per_line;
		if (fmt == IMAGE_XRGB32)
			screen_row_to_xrgb(L, src, w, (uint32_t *)image_pix_row(out, y), scratch);
		else
			screen_row_to_rgb(L, src, w, image_pix_row(out, y));
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
static int screen_read(struct desk *d, const struct screen_rect *r, enum image_pixfmt fmt,
		       struct image_pix *out, struct err *e)
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
	struct image_pix p;
	if (screen_read(d, &r, IMAGE_XRGB32, &p, e) < 0)
		return -1;
	*pixels = (uint32_t *)p.buf;
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
	enum image_pixfmt want = o->format == SCREEN_PNG ? IMAGE_PNG_ROWS : IMAGE_RGB24;
	bool scaling = exact || o->max_width > 0 || o->max_height > 0;
	struct screen_rect r = {!o->region, o->x, o->y, o->width, o->height};
	struct image_pix pix;
	if (screen_read(d, &r, scaling ? IMAGE_RGB24 : want, &pix, e) < 0)
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
		image_fit(w, h, o->max_width, o->max_height, &ow, &oh);
	if (ow != w || oh != h || (scaling && want != IMAGE_RGB24)) {
		struct image_pix small;
		if (image_pix_alloc(&small, want, ow, oh, e) < 0) {
			free(pix.buf);
			return -1;
		}
		int rc = 0;
		if (ow != w || oh != h)
			rc = image_downscale(&pix, &small);
		else
			for (int y = 0; y < h; y++)
				memcpy(image_pix_row(&small, y), image_pix_row(&pix, y),
				       3 * (size_t)w);
		free(pix.buf);
		if (rc < 0) {
			free(small.buf);
			return err_set(e, ERR_INTERNAL, "out of memory scaling to %dx%d", ow, oh);
		}
		pix = small;
	}

	struct image_buf b = {0};
	int rc = o->format == SCREEN_JPEG ? image_encode_jpeg(&pix, o->quality, &b, e)
					  : image_encode_png(&pix, &b, e);
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
