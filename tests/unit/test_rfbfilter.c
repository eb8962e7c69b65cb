/*
 * rfbfilter: every protocol version, every split into frames, both token
 * modes, hostile lengths. Every frame's output buffer is allocated at the
 * frame's size, so a filter writing past it fails under AddressSanitizer
 * (the gateway sizes it the same way).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "rfbfilter.h"

/* A client stream under construction, and what each mode must let through. */
struct stream {
	unsigned char b[4096];
	size_t n;
	unsigned char view[4096], control[4096];
	size_t nview, ncontrol;
};

/* Appends bytes: `view` says whether a view stream passes them. */
static void put(struct stream *s, const void *p, size_t n, int view)
{
	assert_true(s->n + n <= sizeof s->b);
	memcpy(s->b + s->n, p, n);
	s->n += n;
	memcpy(s->control + s->ncontrol, p, n);
	s->ncontrol += n;
	if (view) {
		memcpy(s->view + s->nview, p, n);
		s->nview += n;
	}
}

static void handshake(struct stream *s, int minor)
{
	char v[13];
	memcpy(v, "RFB 003.00", 10);
	v[10] = (char)('0' + minor);
	v[11] = '\n';
	put(s, v, 12, 1);
	if (minor != 3)
		put(s, "\x01", 1, 1); /* security: None */
	put(s, "\x01", 1, 1);	      /* ClientInit: shared */
}

static const unsigned char spf[20] = {0, 0, 0, 0, 32, 24, 0, 1, 0, 255, 0, 255, 0, 255, 16, 8, 0};
static const unsigned char se[12] = {2, 0, 0, 2, 0, 0, 0, 7, 0xff, 0xff, 0xff, 0x11};
static const unsigned char fur[10] = {3, 1, 0, 0, 0, 0, 5, 0, 3, 0x20};
static const unsigned char key[8] = {4, 1, 0, 0, 0, 0, 0, 0x61};
static const unsigned char ptr[6] = {5, 1, 0, 10, 0, 20};
static const unsigned char cut[13] = {6, 0, 0, 0, 0, 0, 0, 5, 'h', 'e', 'l', 'l', 'o'};
/* extended clipboard: length -8, flags, 4 bytes of payload */
static const unsigned char cut_ext[16] = {6,	0, 0, 0, 0xff, 0xff, 0xff, 0xf8,
					  0x10, 0, 0, 1, 1,    2,    3,	   4};
static const unsigned char ecu[10] = {150, 1, 0, 0, 0, 0, 1, 0, 1, 0};
static const unsigned char sds[24] = {251, 0, 4, 0, 3, 0, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 4, 0, 3, 0};
static const unsigned char qkey[12] = {255, 0, 0, 1, 0, 0, 0, 0x61, 0, 0, 0, 0x1e};

/* The handshake of `minor`, then every known message, input among them. */
static void build(struct stream *s, int minor)
{
	memset(s, 0, sizeof *s);
	handshake(s, minor);
	put(s, spf, sizeof spf, 1);
	put(s, se, sizeof se, 1);
	put(s, key, sizeof key, 0);
	put(s, fur, sizeof fur, 1);
	put(s, ptr, sizeof ptr, 0);
	put(s, cut, sizeof cut, 0);
	put(s, cut_ext, sizeof cut_ext, 0);
	put(s, ecu, sizeof ecu, 0);
	put(s, sds, sizeof sds, 0);
	put(s, qkey, sizeof qkey, 0);
	put(s, fur, sizeof fur, 1);
}

/* Runs in[] through a new filter split at cuts[] (ascending, inside (0, n)),
 * each frame's output in a buffer of the frame's size; the output lands in
 * all[]. Returns the total, or -1 when the filter closed. */
static long run_split(enum rfbfilter_mode mode, const unsigned char *in, size_t n,
		      const size_t *cuts, size_t ncuts, unsigned char *all)
{
	struct rfbfilter *f = rfbfilter_new(mode);
	assert_non_null(f);
	size_t total = 0, at = 0;
	long rc = 0;
	for (size_t k = 0; k <= ncuts; k++) {
		size_t end = k < ncuts ? cuts[k] : n;
		size_t len = end - at;
		unsigned char *out = malloc(len ? len : 1);
		long got = rfbfilter_run(f, in + at, len, out);
		if (got < 0) {
			free(out);
			rc = -1;
			break;
		}
		assert_true((size_t)got <= len);
		memcpy(all + total, out, (size_t)got);
		free(out);
		total += (size_t)got;
		at = end;
	}
	rfbfilter_free(f);
	return rc < 0 ? -1 : (long)total;
}

static void expect_split(const struct stream *s, enum rfbfilter_mode mode, const size_t *cuts,
			 size_t ncuts)
{
	unsigned char all[4096];
	long got = run_split(mode, s->b, s->n, cuts, ncuts, all);
	const unsigned char *want = mode == RFBFILTER_VIEW ? s->view : s->control;
	size_t nwant = mode == RFBFILTER_VIEW ? s->nview : s->ncontrol;
	assert_int_equal(got, (long)nwant);
	assert_memory_equal(all, want, nwant);
}

/* Every version, both modes, frames of every fixed size (1 = byte by byte). */
static void test_every_chunk_size(void **state)
{
	(void)state;
	static const int minors[] = {3, 7, 8};
	size_t cuts[4096];
	for (int v = 0; v < 3; v++) {
		struct stream s;
		build(&s, minors[v]);
		for (int mode = 0; mode < 2; mode++)
			for (size_t chunk = 1; chunk <= s.n; chunk++) {
				size_t nc = 0;
				for (size_t at = chunk; at < s.n; at += chunk)
					cuts[nc++] = at;
				expect_split(&s, (enum rfbfilter_mode)mode, cuts, nc);
			}
	}
}

/* Every split into two and three frames. */
static void test_every_two_and_three_way_split(void **state)
{
	(void)state;
	static const int minors[] = {3, 7, 8};
	for (int v = 0; v < 3; v++) {
		struct stream s;
		build(&s, minors[v]);
		for (int mode = 0; mode < 2; mode++)
			for (size_t i = 1; i < s.n; i++) {
				size_t cuts[2] = {i, 0};
				expect_split(&s, (enum rfbfilter_mode)mode, cuts, 1);
				for (size_t j = i + 1; j < s.n; j += 3) {
					cuts[1] = j;
					expect_split(&s, (enum rfbfilter_mode)mode, cuts, 2);
				}
			}
	}
}

/* Random splits, empty frames among them. */
static void test_random_splits(void **state)
{
	(void)state;
	srand(11);
	size_t cuts[4096];
	for (int round = 0; round < 3000; round++) {
		struct stream s;
		build(&s, round % 3 == 0 ? 3 : round % 3 == 1 ? 7 : 8);
		size_t nc = 0, at = 0;
		while (nc < 4000) {
			at += (size_t)(rand() % 9); /* 0: an empty frame */
			if (at >= s.n)
				break;
			cuts[nc++] = at;
		}
		expect_split(&s, (enum rfbfilter_mode)(round & 1), cuts, nc);
	}
}

/* The 3.3 slip: a 3.3 client sends no security byte. Were it counted as one,
 * ClientInit would be read as the security type and the framing would slip
 * by a byte; KeyEvent and PointerEvent must still be dropped. */
static void test_version_3_3_does_not_slip(void **state)
{
	(void)state;
	struct stream s = {0};
	handshake(&s, 3);
	put(&s, key, sizeof key, 0);
	put(&s, ptr, sizeof ptr, 0);
	put(&s, fur, sizeof fur, 1);
	assert_int_equal(s.nview, 12 + 1 + 10);
	size_t cuts[1] = {13};
	expect_split(&s, RFBFILTER_VIEW, cuts, 1);
	expect_split(&s, RFBFILTER_VIEW, NULL, 0);
	struct rfbfilter *f = rfbfilter_new(RFBFILTER_VIEW);
	unsigned char out[64];
	assert_int_equal(rfbfilter_run(f, s.b, 12, out), 12);
	assert_int_equal(rfbfilter_version(f), 3);
	rfbfilter_free(f);
}

static long feed(enum rfbfilter_mode mode, const void *p, size_t n)
{
	unsigned char all[1 << 12];
	assert_true(n <= sizeof all);
	return run_split(mode, p, n, NULL, 0, all);
}

static void test_other_versions_close(void **state)
{
	(void)state;
	static const char *const bad[] = {"RFB 003.005\n",  "RFB 003.006\n", "RFB 003.889\n",
					  "RFB 004.001\n",  "RFB 003.008\r", "rfb 003.008\n",
					  "GET / HTTP/1.1", "RFB 003.0080"};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
		for (int mode = 0; mode < 2; mode++)
			assert_int_equal(feed((enum rfbfilter_mode)mode, bad[i], 12), -1);
}

/* 3.7 and 3.8 must pick None (1): VNC authentication (2) or anything else closes. */
static void test_security_other_than_none_closes(void **state)
{
	(void)state;
	for (int minor = 7; minor <= 8; minor++)
		for (int type = 0; type < 256; type++) {
			if (type == 1)
				continue;
			unsigned char b[14];
			memcpy(b, minor == 7 ? "RFB 003.007\n" : "RFB 003.008\n", 12);
			b[12] = (unsigned char)type;
			b[13] = 1;
			for (int mode = 0; mode < 2; mode++)
				assert_int_equal(feed((enum rfbfilter_mode)mode, b, 14), -1);
		}
}

static int known(int type)
{
	return type == 0 || type == 2 || type == 3 || type == 4 || type == 5 || type == 6 ||
	       type == 150 || type == 251 || type == 255;
}

static void test_unknown_messages_close_in_both_modes(void **state)
{
	(void)state;
	for (int type = 0; type < 256; type++) {
		if (known(type))
			continue;
		struct stream s = {0};
		handshake(&s, 8);
		unsigned char m[16] = {(unsigned char)type};
		put(&s, m, sizeof m, 0);
		for (int mode = 0; mode < 2; mode++)
			assert_int_equal(feed((enum rfbfilter_mode)mode, s.b, s.n), -1);
	}
}

/* Once closed, a filter stays closed. */
static void test_closed_stays_closed(void **state)
{
	(void)state;
	struct rfbfilter *f = rfbfilter_new(RFBFILTER_CONTROL);
	unsigned char out[32];
	assert_int_equal(
	    rfbfilter_run(f, (const unsigned char *)"RFB 003.008\n\x01\x01\x63", 15, out), -1);
	assert_int_equal(rfbfilter_run(f, fur, sizeof fur, out), -1);
	assert_int_equal(rfbfilter_run(f, (const unsigned char *)"", 0, out), 0);
	rfbfilter_free(f);
}

/* A head whose length or content is impossible closes, whatever the mode. */
static void test_hostile_heads_close(void **state)
{
	(void)state;
	static const unsigned char heads[][8] = {
	    {6, 0, 0, 0, 0x7f, 0xff, 0xff, 0xff}, /* 2 GiB of cut text */
	    {6, 0, 0, 0, 0x80, 0, 0, 0},	  /* INT32_MIN extended */
	    {6, 0, 0, 0, 0, 0x10, 0, 1},	  /* the cap + 1 */
	    {6, 0, 0, 0, 0xff, 0xef, 0xff, 0xff}, /* -(cap + 1) */
	    {0, 0, 0, 0, 24, 24, 0, 1},		  /* 24 bits per pixel */
	    {0, 0, 0, 0, 0, 0, 0, 0},		  /* 0 bits per pixel */
	    {251, 0, 4, 0, 3, 0, 0, 0},		  /* SetDesktopSize, no screen */
	    {255, 1, 0, 0, 0, 0, 0, 0},		  /* QEMU audio */
	};
	for (size_t i = 0; i < sizeof heads / sizeof heads[0]; i++) {
		struct stream s = {0};
		handshake(&s, 8);
		put(&s, heads[i], 8, 0);
		for (int mode = 0; mode < 2; mode++) {
			assert_int_equal(feed((enum rfbfilter_mode)mode, s.b, s.n), -1);
			/* byte by byte too */
			size_t cuts[64];
			for (size_t k = 1; k < s.n; k++)
				cuts[k - 1] = k;
			unsigned char all[64];
			assert_int_equal(
			    run_split((enum rfbfilter_mode)mode, s.b, s.n, cuts, s.n - 1, all), -1);
		}
	}
}

/* Cut text exactly at the cap passes a control stream whole and a view
 * stream not at all; the message after it is framed right. */
static void test_cut_text_at_the_cap(void **state)
{
	(void)state;
	size_t n = 14 + 8 + RFBFILTER_CUT_MAX + sizeof fur;
	unsigned char *b = calloc(1, n), *out = malloc(n);
	memcpy(b, "RFB 003.008\n\x01\x01", 14);
	unsigned char h[8] = {6, 0, 0, 0, 0, 0x10, 0, 0};
	memcpy(b + 14, h, 8);
	memset(b + 22, 'k', RFBFILTER_CUT_MAX);
	memcpy(b + 22 + RFBFILTER_CUT_MAX, fur, sizeof fur);
	for (int mode = 0; mode < 2; mode++) {
		struct rfbfilter *f = rfbfilter_new((enum rfbfilter_mode)mode);
		long got = 0;
		for (size_t at = 0; at < n; at += 4093) {
			size_t len = n - at < 4093 ? n - at : 4093;
			long r = rfbfilter_run(f, b + at, len, out + got);
			assert_true(r >= 0 && (size_t)r <= len);
			got += r;
		}
		if (mode == RFBFILTER_CONTROL) {
			assert_int_equal(got, (long)n);
			assert_memory_equal(out, b, n);
		} else {
			assert_int_equal(got, 14 + (long)sizeof fur);
			assert_memory_equal(out + 14, fur, sizeof fur);
		}
		rfbfilter_free(f);
	}
	free(b);
	free(out);
}

/* The largest SetEncodings (65535 of them) is legal and passes either mode. */
static void test_largest_set_encodings(void **state)
{
	(void)state;
	size_t n = 14 + 4 + 4 * 65535 + sizeof fur;
	unsigned char *b = calloc(1, n), *out = malloc(n);
	memcpy(b, "RFB 003.007\n\x01\x00", 14);
	b[14] = 2;
	b[16] = b[17] = 0xff;
	memcpy(b + n - sizeof fur, fur, sizeof fur);
	struct rfbfilter *f = rfbfilter_new(RFBFILTER_VIEW);
	assert_int_equal(rfbfilter_run(f, b, n, out), (long)n);
	assert_memory_equal(out, b, n);
	rfbfilter_free(f);
	free(b);
	free(out);
}

/* The gateway hands the filter an output buffer the size of the frame: a
 * message head split across frames must not write past it (ASan). */
static void test_split_head_fits_frame_buffer(void **state)
{
	(void)state;
	struct stream s;
	build(&s, 8);
	struct rfbfilter *f = rfbfilter_new(RFBFILTER_VIEW);
	/* up to the SetEncodings head's first byte, then 1-byte frames */
	size_t first = 12 + 1 + 1 + 20 + 1;
	unsigned char *out = malloc(first);
	assert_true(rfbfilter_run(f, s.b, first, out) >= 0);
	free(out);
	for (size_t i = first; i < s.n; i++) {
		out = malloc(1);
		assert_true(rfbfilter_run(f, s.b + i, 1, out) >= 0);
		free(out);
	}
	rfbfilter_free(f);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_split_head_fits_frame_buffer),
	    cmocka_unit_test(test_every_chunk_size),
	    cmocka_unit_test(test_every_two_and_three_way_split),
	    cmocka_unit_test(test_random_splits),
	    cmocka_unit_test(test_version_3_3_does_not_slip),
	    cmocka_unit_test(test_other_versions_close),
	    cmocka_unit_test(test_security_other_than_none_closes),
	    cmocka_unit_test(test_unknown_messages_close_in_both_modes),
	    cmocka_unit_test(test_closed_stays_closed),
	    cmocka_unit_test(test_hostile_heads_close),
	    cmocka_unit_test(test_cut_text_at_the_cap),
	    cmocka_unit_test(test_largest_set_encodings),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
