#include "rfbfilter.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

enum rfbfilter_phase { PH_VERSION, PH_SECURITY, PH_INIT, PH_MESSAGES };

struct rfbfilter {
	enum rfbfilter_phase phase;
	size_t need;	      /* bytes left of the current unit */
	bool drop;	      /* the current message is dropped */
	unsigned char hdr[8]; /* the head of a message whose length is in it */
	size_t hdr_have, hdr_need;
};

struct rfbfilter *rfbfilter_new(void)
{
	struct rfbfilter *f = calloc(1, sizeof *f);
	if (f) {
		f->phase = PH_VERSION;
		f->need = 12; /* "RFB 003.008\n" */
	}
	return f;
}

void rfbfilter_free(void *f)
{
	free(f);
}

/*
 * The length of a client message from its head (hdr_have bytes of it), or
 * 0 when more of the head is needed (*head_need says how much), or -1 for a
 * type this filter does not know. *drop says whether a viewer may send it.
 */
static long rfbfilter_length(const unsigned char *h, size_t have, size_t *head_need, bool *drop)
{
	*drop = false;
	switch (h[0]) {
	case 0: /* SetPixelFormat */
		return 20;
	case 2: /* SetEncodings: u16 count at 2 */
		if (have < 4) {
			*head_need = 4;
			return 0;
		}
		return 4 + 4 * (long)((h[2] << 8) | h[3]);
	case 3: /* FramebufferUpdateRequest */
		return 10;
	case 4: /* KeyEvent */
		*drop = true;
		return 8;
	case 5: /* PointerEvent */
		*drop = true;
		return 6;
	case 6: /* ClientCutText: u32 length at 4 */
		*drop = true;
		if (have < 8) {
			*head_need = 8;
			return 0;
		}
		return 8 + (long)(((uint32_t)h[4] << 24) | ((uint32_t)h[5] << 16) |
				  ((uint32_t)h[6] << 8) | h[7]);
	case 150: /* EnableContinuousUpdates */
		return 10;
	case 251: /* SetDesktopSize: u8 screens at 6, 16 bytes each */
		*drop = true;
		if (have < 8) {
			*head_need = 8;
			return 0;
		}
		return 8 + 16 * (long)h[6];
	default:
		return -1;
	}
}

long rfbfilter_run(void *state, const unsigned char *in, size_t len, unsigned char *out)
{
	struct rfbfilter *f = state;
	size_t o = 0, i = 0;
	while (i < len) {
		if (f->phase != PH_MESSAGES) {
			/* Handshake bytes pass as they are, counted. */
			size_t n = len - i < f->need ? len - i : f->need;
			memcpy(out + o, in + i, n);
			o += n;
			i += n;
			f->need -= n;
			if (f->need == 0) {
				f->phase++;
				/* then the security type and the shared flag, a byte each */
				f->need = f->phase == PH_MESSAGES ? 0 : 1;
			}
			continue;
		}
		if (f->need == 0) {
			/* A new message: gather enough of its head to know its length. */
			if (f->hdr_have == 0)
				f->hdr_need = 1;
			while (f->hdr_have < f->hdr_need && i < len)
				f->hdr[f->hdr_have++] = in[i++];
			if (f->hdr_have < f->hdr_need)
				break;
			size_t more = 0;
			bool drop;
			long total = rfbfilter_length(f->hdr, f->hdr_have, &more, &drop);
			if (total < 0)
				return -1;
			if (total == 0) {
				f->hdr_need = more;
				continue;
			}
			f->drop = drop;
			if (!drop) {
				memcpy(out + o, f->hdr, f->hdr_have);
				o += f->hdr_have;
			}
			f->need = (size_t)total - f->hdr_have;
			f->hdr_have = 0;
			continue;
		}
		size_t n = len - i < f->need ? len - i : f->need;
		if (!f->drop) {
			memcpy(out + o, in + i, n);
			o += n;
		}
		i += n;
		f->need -= n;
	}
	return (long)o;
}
