#include "rfbfilter.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

enum rfbfilter_phase { PH_VERSION, PH_SECURITY, PH_INIT, PH_MESSAGES, PH_CLOSED };

/* The longest message head the filter needs to know a message's length. */
#define RFBFILTER_HEAD_MAX 8

struct rfbfilter {
	enum rfbfilter_mode mode;
	enum rfbfilter_phase phase;
	int minor;   /* 3, 7 or 8 once the version is read */
	size_t have; /* bytes of the version, or of the current message's head */
	unsigned char head[RFBFILTER_HEAD_MAX];
	size_t head_need; /* the current message's head size (0: between messages) */
	bool pass;	  /* the current message passes */
	uint64_t left;	  /* bytes of the current message after its head */
};

struct rfbfilter *rfbfilter_new(enum rfbfilter_mode mode)
{
	struct rfbfilter *f = calloc(1, sizeof *f);
	if (f)
		f->mode = mode;
	return f;
}

void rfbfilter_free(void *f)
{
	free(f);
}

int rfbfilter_version(const struct rfbfilter *f)
{
	return f->minor;
}

static uint32_t rfbfilter_u32(const unsigned char *p)
{
	return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}

/* How many bytes of a message of this type the filter needs to size it, or
 * 0 for a type it does not know. */
static size_t rfbfilter_head_size(unsigned char type)
{
	switch (type) {
	case 0: /* SetPixelFormat: bits-per-pixel at 4 */
		return 5;
	case 2: /* SetEncodings: u16 count at 2 */
		return 4;
	case 3:	  /* FramebufferUpdateRequest */
	case 4:	  /* KeyEvent */
	case 5:	  /* PointerEvent */
	case 150: /* EnableContinuousUpdates */
		return 1;
	case 6:	  /* ClientCutText: s32 length at 4 */
	case 251: /* SetDesktopSize: u8 screens at 6 */
		return 8;
	case 255: /* QEMU: u8 subtype at 1 */
		return 2;
	default:
		return 0;
	}
}

/* The length of the rest of the message after its complete head, or -1
 * when the head says the stream must close. */
static int64_t rfbfilter_rest(const unsigned char *h)
{
	switch (h[0]) {
	case 0: {
		unsigned bpp = h[4];
		return bpp == 8 || bpp == 16 || bpp == 32 ? 20 - 5 : -1;
	}
	case 2:
		return 4 * (int64_t)((h[2] << 8) | h[3]);
	case 3:
	case 150:
		return 10 - 1;
	case 4:
		return 8 - 1;
	case 5:
		return 6 - 1;
	case 6: {
		/* Negative: the extended clipboard, |length| bytes of payload. */
		uint32_t l = rfbfilter_u32(h + 4);
		uint64_t n = l & 0x80000000u ? (uint64_t)0x100000000ull - l : l;
		return n <= RFBFILTER_CUT_MAX ? (int64_t)n : -1;
	}
	case 251:
		return h[6] >= 1 ? 16 * (int64_t)h[6] : -1;
	case 255:
		return h[1] == 0 ? 12 - 2 : -1; /* extended KeyEvent only */
	default:
		return -1;
	}
}

/* What a view stream may send: nothing that changes the desktop. */
static bool rfbfilter_view_ok(unsigned char type)
{
	return type == 0 || type == 2 || type == 3;
}

/* One handshake byte: whether it is the next one of a valid handshake. */
static bool rfbfilter_handshake(struct rfbfilter *f, unsigned char b)
{
	static const char want[] = "RFB 003.00";
	switch (f->phase) {
	case PH_VERSION:
		if (f->have < 10) {
			if (b != (unsigned char)want[f->have])
				return false;
		} else if (f->have == 10) {
			if (b != '3' && b != '7' && b != '8')
				return false;
			f->minor = b - '0';
		} else if (b != '\n') {
			return false;
		}
		if (++f->have == 12) {
			f->have = 0;
			/* 3.3: the server picks the security type; the client says nothing. */
			f->phase = f->minor == 3 ? PH_INIT : PH_SECURITY;
		}
		return true;
	case PH_SECURITY:
		if (b != 1) /* None: the gateway checked the token */
			return false;
		f->phase = PH_INIT;
		return true;
	case PH_INIT: /* the shared flag, any value */
		f->phase = PH_MESSAGES;
		return true;
	default:
		return false;
	}
}

long rfbfilter_run(void *state, const unsigned char *in, size_t len, unsigned char *out)
{
	struct rfbfilter *f = state;
	size_t o = 0, i = 0;
	while (i < len) {
		if (f->phase == PH_CLOSED)
			return -1;
		if (f->phase != PH_MESSAGES) {
			if (!rfbfilter_handshake(f, in[i]))
				goto close;
			out[o++] = in[i++];
			continue;
		}
		if (f->head_need == 0 && f->left == 0) {
			/* A new message: its type decides its head and its fate. */
			unsigned char type = in[i];
			f->head_need = rfbfilter_head_size(type);
			if (f->head_need == 0)
				goto close;
			f->pass = f->mode == RFBFILTER_CONTROL || rfbfilter_view_ok(type);
			f->have = 0;
		}
		if (f->have < f->head_need) {
			unsigned char b = in[i++];
			f->head[f->have++] = b;
			if (f->pass)
				out[o++] = b;
			if (f->have == f->head_need) {
				int64_t rest = rfbfilter_rest(f->head);
				if (rest < 0)
					goto close;
				f->left = (uint64_t)rest;
				f->head_need = 0;
			}
			continue;
		}
		size_t n = len - i < f->left ? len - i : (size_t)f->left;
		if (f->pass) {
			memcpy(out + o, in + i, n);
			o += n;
		}
		i += n;
		f->left -= n;
	}
	return (long)o;
close:
	f->phase = PH_CLOSED;
	return -1;
}
