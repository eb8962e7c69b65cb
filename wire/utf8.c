#include "utf8.h"

#include <stdlib.h>
#include <string.h>

/* RFC 3629's well-formed sequences (its table in section 4): the second
 * byte's range depends on the first, which rules out overlong forms, the
 * UTF-16 surrogates and code points past U+10FFFF. */
size_t utf8_decode(const char *s, size_t len, unsigned long *cp)
{
	const unsigned char *u = (const unsigned char *)s;
	if (len == 0)
		return 0;
	size_t n;
	unsigned long c;
	unsigned char lo = 0x80, hi = 0xbf; /* the second byte's range */
	if (u[0] < 0x80) {
		*cp = u[0];
		return 1;
	} else if (u[0] >= 0xc2 && u[0] <= 0xdf) {
		n = 2;
		c = u[0] & 0x1f;
	} else if (u[0] >= 0xe0 && u[0] <= 0xef) {
		n = 3;
		c = u[0] & 0x0f;
		if (u[0] == 0xe0)
			lo = 0xa0; /* overlong below U+0800 */
		else if (u[0] == 0xed)
			hi = 0x9f; /* surrogates U+D800..U+DFFF */
	} else if (u[0] >= 0xf0 && u[0] <= 0xf4) {
		n = 4;
		c = u[0] & 0x07;
		if (u[0] == 0xf0)
			lo = 0x90; /* overlong below U+10000 */
		else if (u[0] == 0xf4)
			hi = 0x8f; /* past U+10FFFF */
	} else {
		return 0; /* a continuation byte, C0/C1 (overlong), F5..FF */
	}
	if (n > len || u[1] < lo || u[1] > hi)
		return 0;
	for (size_t i = 1; i < n; i++) {
		if ((u[i] & 0xc0) != 0x80)
			return 0;
		c = (c << 6) | (u[i] & 0x3f);
	}
	*cp = c;
	return n;
}

json_t *utf8_json(const char *s, size_t len)
{
	unsigned long cp;
	size_t i = 0, n;
	while (i < len && (n = utf8_decode(s + i, len - i, &cp)) != 0)
		i += n;
	if (i == len) /* the common case: nothing to replace */
		return json_stringn(s, len);
	char *buf = malloc(len * 3 + 1); /* at worst every byte becomes 3 */
	if (!buf)
		return NULL;
	size_t o = 0;
	for (i = 0; i < len;) {
		n = utf8_decode(s + i, len - i, &cp);
		if (n) {
			memcpy(buf + o, s + i, n);
			o += n;
			i += n;
		} else {
			memcpy(buf + o, "\xef\xbf\xbd", 3);
			o += 3;
			i++;
		}
	}
	json_t *j = json_stringn(buf, o);
	free(buf);
	return j;
}
