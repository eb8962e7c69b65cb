/*
 * libFuzzer harness for the gateway's RFB filter (host/api/rfbfilter.c).
 *
 * Input: byte 0 picks the token mode (bit 0: control) and seeds the frame
 * splitter; the rest is what a viewer sends, cut into WebSocket frames of
 * 0..64 bytes. Each frame's output goes to a buffer of the frame's size
 * (as the gateway allocates it), so AddressSanitizer catches a write past
 * it. Checked against an independent whole-buffer parser:
 *   - no call returns more bytes than it was given;
 *   - a view stream's output never holds a message other than
 *     SetPixelFormat, SetEncodings or FramebufferUpdateRequest;
 *   - a stream the filter did not close comes out exactly as the reference
 *     says (control: unchanged; view: the other messages cut out), and one
 *     it closed had an error the reference finds too.
 *
 * Build: clang -fsanitize=fuzzer,address,undefined (tests/CMakeLists.txt,
 * target fuzz_rfbfilter, only when clang is installed). Seeds: corpus/rfbfilter.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "rfbfilter.h"

#define CHECK(x)                                                                                   \
	do {                                                                                       \
		if (!(x))                                                                          \
			__builtin_trap();                                                          \
	} while (0)

/* The reference: parses the whole client stream; writes what `view` may
 * pass to out; returns false when the stream is invalid (a prefix of it may
 * be valid: *valid_len says how far it was, in messages). Incomplete tails
 * are fine. */
static bool ref_parse(const uint8_t *in, size_t n, bool view, uint8_t *out, size_t *out_len)
{
	size_t i = 0, o = 0;
	*out_len = 0;
	static const char want[] = "RFB 003.00";
	for (; i < n && i < 12; i++) {
		if (i < 10 && in[i] != (uint8_t)want[i])
			return false;
		if (i == 10 && in[i] != '3' && in[i] != '7' && in[i] != '8')
			return false;
		if (i == 11 && in[i] != '\n')
			return false;
		out[o++] = in[i];
	}
	if (i < 12)
		goto done;
	if (in[10] != '3') {
		if (i == n)
			goto done;
		if (in[i] != 1)
			return false;
		out[o++] = in[i++];
	}
	if (i == n)
		goto done;
	out[o++] = in[i++]; /* ClientInit */
	while (i < n) {
		uint8_t t = in[i];
		size_t need_head, total;
		bool pass;
		switch (t) {
		case 0:
			need_head = 5;
			break;
		case 2:
			need_head = 4;
			break;
		case 3:
		case 4:
		case 5:
		case 150:
			need_head = 1;
			break;
		case 6:
		case 251:
			need_head = 8;
			break;
		case 255:
			need_head = 2;
			break;
		default:
			return false;
		}
		pass = !view || t == 0 || t == 2 || t == 3;
		if (n - i < need_head) {
			if (pass)
				memcpy(out + o, in + i, n - i), o += n - i;
			break;
		}
		const uint8_t *h = in + i;
		switch (t) {
		case 0:
			if (h[4] != 8 && h[4] != 16 && h[4] != 32)
				return false;
			total = 20;
			break;
		case 2:
			total = 4 + 4 * (size_t)((h[2] << 8) | h[3]);
			break;
		case 3:
		case 150:
			total = 10;
			break;
		case 4:
			total = 8;
			break;
		case 5:
			total = 6;
			break;
		case 6: {
			int32_t l = (int32_t)(((uint32_t)h[4] << 24) | ((uint32_t)h[5] << 16) |
					      ((uint32_t)h[6] << 8) | h[7]);
			int64_t a = l < 0 ? -(int64_t)l : l;
			if (a > RFBFILTER_CUT_MAX)
				return false;
			total = 8 + (size_t)a;
			break;
		}
		case 251:
			if (h[6] == 0)
				return false;
			total = 8 + 16 * (size_t)h[6];
			break;
		default: /* 255 */
			if (h[1] != 0)
				return false;
			total = 12;
			break;
		}
		size_t take = n - i < total ? n - i : total;
		if (pass)
			memcpy(out + o, in + i, take), o += take;
		i += take;
	}
done:
	*out_len = o;
	return true;
}

/* Whether a view stream's output holds only what a view may send. */
static bool view_clean(const uint8_t *b, size_t n)
{
	uint8_t ref[1];
	(void)ref;
	size_t i = 12;
	if (n <= i)
		return true;
	if (b[10] != '3')
		i++;
	i++; /* ClientInit */
	while (i < n) {
		uint8_t t = b[i];
		size_t total;
		if (t == 0)
			total = 20;
		else if (t == 3)
			total = 10;
		else if (t == 2) {
			if (n - i < 4)
				return true;
			total = 4 + 4 * (size_t)((b[i + 2] << 8) | b[i + 3]);
		} else
			return false;
		i += total;
	}
	return true;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1)
		return 0;
	bool control = data[0] & 1;
	uint32_t seed = data[0] * 2654435761u + 1;
	const uint8_t *in = data + 1;
	size_t n = size - 1;
	uint8_t *all = malloc(n + 1), *want = malloc(n + 1);
	CHECK(all && want);
	struct rfbfilter *f = rfbfilter_new(control ? RFBFILTER_CONTROL : RFBFILTER_VIEW);
	CHECK(f);
	size_t at = 0, total = 0;
	bool closed = false;
	while (at < n || at == 0) {
		seed = seed * 1103515245u + 12345u;
		size_t len = (seed >> 16) % 65;
		if (len > n - at)
			len = n - at;
		uint8_t *out = malloc(len ? len : 1);
		CHECK(out);
		long got = rfbfilter_run(f, in + at, len, out);
		if (got < 0) {
			free(out);
			closed = true;
			break;
		}
		CHECK((size_t)got <= len);
		memcpy(all + total, out, (size_t)got);
		total += (size_t)got;
		free(out);
		at += len;
		if (n == 0)
			break;
	}
	rfbfilter_free(f);
	if (!control)
		CHECK(view_clean(all, total));
	size_t want_len;
	bool ok = ref_parse(in, n, !control, want, &want_len);
	if (!closed) {
		CHECK(ok);
		CHECK(total == want_len && memcmp(all, want, total) == 0);
	} else {
		CHECK(!ok);
	}
	free(all);
	free(want);
	return 0;
}
