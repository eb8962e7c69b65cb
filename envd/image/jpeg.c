/*
 * jpeg: JPEG encoding of screenshots through libturbojpeg.
 */
#include "image.h"

#include <stdlib.h>
#include <turbojpeg.h>

/* Encodes packed RGB as JPEG into a malloc'd buffer. */
int image_encode_jpeg(const struct image_pix *p, int quality, struct image_buf *b, struct err *e)
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
	if (tjCompress2(tj, image_pix_row(p, 0), p->w, (int)p->stride, p->h, TJPF_RGB, &b->data,
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
