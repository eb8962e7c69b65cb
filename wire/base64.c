#include "base64.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/evp.h>

char *base64_encode(const void *data, size_t len)
{
	if (len > ((size_t)1 << 40))
		return NULL;
	size_t out_len = 4 * ((len + 2) / 3);
	char *out = malloc(out_len + 1);
	if (!out)
		return NULL;
	/* EVP_EncodeBlock takes an int length: encode in chunks of 3 * 2^20. */
	size_t done = 0, w = 0;
	while (done < len) {
		size_t n = len - done;
		if (n > 3u << 20)
			n = 3u << 20;
		w += (size_t)EVP_EncodeBlock((unsigned char *)out + w,
					     (const unsigned char *)data + done, (int)n);
		done += n;
	}
	out[w] = 0;
	return out;
}

unsigned char *base64_decode(const char *text, size_t len, size_t *out_len)
{
	if (len % 4 != 0)
		return NULL;
	size_t pad = 0;
	if (len >= 1 && text[len - 1] == '=')
		pad++;
	if (len >= 2 && text[len - 2] == '=')
		pad++;
	/* Only the alphabet before the padding ('=' nowhere else, no
	 * whitespace, which EVP_DecodeBlock would skip), and the bits the
	 * padding leaves over are zero (RFC 4648 3.5): every byte string has
	 * exactly one text. */
	static const char alphabet[] =
	    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
	for (size_t i = 0; i < len - pad; i++)
		if (!text[i] || !strchr(alphabet, text[i]))
			return NULL;
	if (pad) {
		size_t last = (size_t)(strchr(alphabet, text[len - pad - 1]) - alphabet);
		if (last & (pad == 1 ? 0x3 : 0xf))
			return NULL;
	}
	unsigned char *out = malloc(len / 4 * 3 + 1);
	if (!out)
		return NULL;
	size_t done = 0, w = 0;
	while (done < len) {
		size_t n = len - done;
		if (n > 4u << 20)
			n = 4u << 20;
		int r = EVP_DecodeBlock(out + w, (const unsigned char *)text + done, (int)n);
		if (r < 0) {
			free(out);
			return NULL;
		}
		w += (size_t)r;
		done += n;
	}
	w -= pad;
	out[w] = 0;
	*out_len = w;
	return out;
}

void base64url_encode(const void *in, size_t n, char *out)
{
	static const char al[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
	const unsigned char *b = in;
	size_t o = 0;
	for (size_t i = 0; i < n; i += 3) {
		uint32_t v = (uint32_t)b[i] << 16;
		if (i + 1 < n)
			v |= (uint32_t)b[i + 1] << 8;
		if (i + 2 < n)
			v |= b[i + 2];
		out[o++] = al[(v >> 18) & 63];
		out[o++] = al[(v >> 12) & 63];
		if (i + 1 < n)
			out[o++] = al[(v >> 6) & 63];
		if (i + 2 < n)
			out[o++] = al[v & 63];
	}
	out[o] = 0;
}
