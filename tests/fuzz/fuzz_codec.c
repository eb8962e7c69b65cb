/*
 * libFuzzer harness for the byte codecs every binary shares: base64
 * (wire/base64.c: files and screenshots in JSON, clipboard, write_file),
 * UTF-8 (wire/utf8.c: type, key names, the runner's output, the CLI) and
 * ids (wire/ident.c: every id that becomes a path or SQL text).
 *
 * Checked against independent references:
 *   - base64_decode accepts exactly the canonical RFC 4648 encodings: what
 *     it accepts encodes back to the same text, and every encoding of any
 *     bytes decodes back to those bytes;
 *   - utf8_decode accepts exactly RFC 3629's well-formed sequences (no
 *     overlong forms, no surrogates, nothing past U+10FFFF) and gives the
 *     code point a strict decoder gives;
 *   - ident_ok accepts only 1..max of [A-Za-z0-9_-].
 */
#include "base64.h"
#include "fuzz.h"
#include "ident.h"
#include "utf8.h"

/* RFC 3629's table 4. */
static size_t ref_utf8(const unsigned char *s, size_t n, unsigned long *cp)
{
	if (!n)
		return 0;
	unsigned c = s[0];
	if (c < 0x80)
		return *cp = c, 1;
	size_t k;
	unsigned lo = 0x80, hi = 0xbf;
	unsigned long v;
	if (c >= 0xc2 && c <= 0xdf)
		k = 2, v = c & 0x1f;
	else if (c >= 0xe0 && c <= 0xef) {
		k = 3, v = c & 0x0f;
		if (c == 0xe0)
			lo = 0xa0;
		if (c == 0xed)
			hi = 0x9f;
	} else if (c >= 0xf0 && c <= 0xf4) {
		k = 4, v = c & 0x07;
		if (c == 0xf0)
			lo = 0x90;
		if (c == 0xf4)
			hi = 0x8f;
	} else
		return 0;
	if (n < k || s[1] < lo || s[1] > hi)
		return 0;
	for (size_t i = 1; i < k; i++) {
		if (i > 1 && (s[i] & 0xc0) != 0x80)
			return 0;
		v = v << 6 | (s[i] & 0x3f);
	}
	*cp = v;
	return k;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	/* base64: decode the input as text. */
	size_t out_len;
	unsigned char *d = base64_decode((const char *)data, size, &out_len);
	if (d) {
		char *back = base64_encode(d, out_len);
		CHECK(back && strlen(back) == size && memcmp(back, data, size) == 0);
		free(back);
		free(d);
	}
	/* base64: encode the input, decode it back. */
	char *enc = base64_encode(data, size);
	CHECK(enc);
	d = base64_decode(enc, strlen(enc), &out_len);
	CHECK(d && out_len == size && memcmp(d, data, size) == 0);
	free(d);
	free(enc);

	/* UTF-8 at every offset. */
	for (size_t i = 0; i < size; i++) {
		unsigned long a = ~0ul, b = ~0ul;
		size_t k = utf8_decode((const char *)data + i, size - i, &a);
		size_t r = ref_utf8(data + i, size - i, &b);
		CHECK(k == r);
		if (k)
			CHECK(a == b && a <= 0x10ffff && !(a >= 0xd800 && a <= 0xdfff));
	}

	/* ids */
	char s[80];
	size_t n = size < sizeof s - 1 ? size : sizeof s - 1;
	memcpy(s, data, n);
	s[n] = 0;
	size_t max = size ? data[0] % 70 : 0;
	bool ok = ident_ok(s, max), want = strlen(s) >= 1 && strlen(s) <= max;
	for (size_t i = 0; s[i]; i++)
		if (!strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_",
			    s[i]))
			want = false;
	CHECK(ok == want);
	return 0;
}
