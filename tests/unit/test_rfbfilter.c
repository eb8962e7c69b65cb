/* rfbfilter: a view-only viewer's input never passes, however it is split. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "rfbfilter.h"

/* A client stream: handshake, then one of each message. */
static size_t build(unsigned char *b)
{
	size_t n = 0;
	memcpy(b + n, "RFB 003.008\n", 12), n += 12;
	b[n++] = 1; /* security: None */
	b[n++] = 1; /* ClientInit: shared */
	unsigned char spf[20] = {0};
	memcpy(b + n, spf, 20), n += 20; /* SetPixelFormat */
	unsigned char se[12] = {2, 0, 0, 2, 0, 0, 0, 7, 0xff, 0xff, 0xff, 0x11};
	memcpy(b + n, se, 12), n += 12; /* SetEncodings, 2 */
	unsigned char key[8] = {4, 1, 0, 0, 0, 0, 0, 0x61};
	memcpy(b + n, key, 8), n += 8; /* KeyEvent 'a' */
	unsigned char ptr[6] = {5, 1, 0, 10, 0, 20};
	memcpy(b + n, ptr, 6), n += 6; /* PointerEvent */
	unsigned char cut[13] = {6, 0, 0, 0, 0, 0, 0, 5, 'h', 'e', 'l', 'l', 'o'};
	memcpy(b + n, cut, 13), n += 13; /* ClientCutText */
	unsigned char fur[10] = {3, 1, 0, 0, 0, 0, 5, 0, 3, 0x20};
	memcpy(b + n, fur, 10), n += 10; /* FramebufferUpdateRequest */
	return n;
}

static const size_t expect_len = 12 + 1 + 1 + 20 + 12 + 10;

static void test_drops_input_in_any_split(void **state)
{
	(void)state;
	unsigned char in[256], out[256], all[256];
	size_t n = build(in);
	for (size_t chunk = 1; chunk <= n; chunk++) {
		struct rfbfilter *f = rfbfilter_new();
		size_t total = 0;
		for (size_t i = 0; i < n; i += chunk) {
			size_t len = n - i < chunk ? n - i : chunk;
			long got = rfbfilter_run(f, in + i, len, out);
			assert_true(got >= 0);
			memcpy(all + total, out, (size_t)got);
			total += (size_t)got;
		}
		assert_int_equal(total, expect_len);
		/* Exactly the handshake, SetPixelFormat, SetEncodings and the
		 * update request: no key, pointer or clipboard byte. */
		assert_memory_equal(all, in, 12 + 1 + 1 + 20 + 12);
		assert_int_equal(all[46], 3);
		rfbfilter_free(f);
	}
}

static void test_unknown_message_closes(void **state)
{
	(void)state;
	unsigned char in[64], out[64];
	size_t n = 0;
	memcpy(in, "RFB 003.008\n", 12), n = 12;
	in[n++] = 1;
	in[n++] = 1;
	in[n++] = 99; /* no such message */
	struct rfbfilter *f = rfbfilter_new();
	assert_int_equal(rfbfilter_run(f, in, n, out), -1);
	rfbfilter_free(f);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_drops_input_in_any_split),
	    cmocka_unit_test(test_unknown_message_closes),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
