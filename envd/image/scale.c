/*
 * scale: image buffers, and shrinking them with an area-averaging (box)
 * filter in fixed point.
 */
#include "image.h"

#include <stdlib.h>
#include <string.h>

int image_pix_alloc(struct image_pix *p, enum image_pixfmt fmt, int w, int h, struct err *e)
{
	p->w = w;
	p->h = h;
	p->lead = fmt == IMAGE_PNG_ROWS ? 1 : 0;
	p->stride = (size_t)w * (fmt == IMAGE_XRGB32 ? 4 : 3) + p->lead;
	p->buf = malloc(p->stride * (size_t)h);
	if (!p->buf)
		return err_set(e, ERR_INTERNAL, "out of memory for a %dx%d image", w, h);
	if (p->lead)
		for (int y = 0; y < h; y++)
			p->buf[(size_t)y * p->stride] = 0;
	return 0;
}

/*
 * Area-averaging weights for shrinking n source pixels to m (m <= n), in
 * fixed point with `one` as 1.0. Output i covers source interval
 * [i*n/m, (i+1)*n/m); in units of 1/m of a source pixel the overlaps are
 * exact integers, and rounding the cumulative sum keeps every output's
 * weights summing to exactly `one` (so flat colours stay exactly flat).
 * first[i] is output i's first source pixel, count[i] how many it covers, and
 * its weights are at wt + start[i].
 */
struct scale_weights {
	int *first, *count, *start;
	uint32_t *wt;
};

static void scale_weights_free(struct scale_weights *W)
{
	free(W->first);
	free(W->count);
	free(W->start);
	free(W->wt);
}

static int scale_weights_init(struct scale_weights *W, int n, int m, uint32_t one)
{
	/* Each output covers at most ceil(n/m) + 1 source pixels. */
	size_t per = (size_t)(n / m) + 2;
	W->first = malloc(sizeof(int) * (size_t)m);
	W->count = malloc(sizeof(int) * (size_t)m);
	W->start = malloc(sizeof(int) * (size_t)m);
	W->wt = malloc(sizeof(uint32_t) * per * (size_t)m);
	if (!W->first || !W->count || !W->start || !W->wt) {
		scale_weights_free(W);
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
int image_downscale(const struct image_pix *src, struct image_pix *dst)
{
	int w = src->w, h = src->h, ow = dst->w, oh = dst->h;
	struct scale_weights H = {0}, V = {0};
	size_t row = 3 * (size_t)w;
	uint32_t *acc = malloc(sizeof(uint32_t) * row);
	int rc = -1;
	if (!acc || scale_weights_init(&H, w, ow, 1u << 12) < 0 ||
	    scale_weights_init(&V, h, oh, 1u << 16) < 0)
		goto out;
	for (int oy = 0; oy < oh; oy++) {
		memset(acc, 0, sizeof(uint32_t) * row);
		for (int k = 0; k < V.count[oy]; k++) {
			uint32_t wy = V.wt[V.start[oy] + k];
			if (!wy)
				continue;
			const unsigned char *s = image_pix_row(src, V.first[oy] + k);
			for (size_t i = 0; i < row; i++)
				acc[i] += wy * s[i];
		}
		for (size_t i = 0; i < row; i++)
			acc[i] = (acc[i] + 128) >> 8;
		unsigned char *o = image_pix_row(dst, oy);
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
	scale_weights_free(&H);
	scale_weights_free(&V);
	free(acc);
	return rc;
}

/* The largest size within max_width x max_height keeping w:h (never larger). */
void image_fit(int w, int h, int max_w, int max_h, int *ow, int *oh)
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
