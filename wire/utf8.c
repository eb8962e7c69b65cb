#include "utf8.h"

size_t utf8_decode(const char *s, size_t len, unsigned long *cp)
{
	const unsigned char *u = (const unsigned char *)s;
	if (len == 0)
		return 0;
	size_t n;
	unsigned long c;
	if (u[0] < 0x80) {
		*cp = u[0];
		return 1;
	} else if ((u[0] & 0xe0) == 0xc0) {
		n = 2;
		c = u[0] & 0x1f;
	} else if ((u[0] & 0xf0) == 0xe0) {
		n = 3;
		c = u[0] & 0x0f;
	} else if ((u[0] & 0xf8) == 0xf0) {
		n = 4;
		c = u[0] & 0x07;
	} else {
		return 0;
	}
	if (n > len)
		return 0;
	for (size_t i = 1; i < n; i++) {
		if ((u[i] & 0xc0) != 0x80)
			return 0;
		c = (c << 6) | (u[i] & 0x3f);
	}
	*cp = c;
	return n;
}
