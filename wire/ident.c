#include "ident.h"

#include <stdio.h>
#include <string.h>

#include <openssl/rand.h>

bool ident_ok(const char *s, size_t max_len)
{
	size_t n = strlen(s);
	if (n == 0 || n > max_len)
		return false;
	for (size_t i = 0; i < n; i++)
		if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= 'A' && s[i] <= 'Z') ||
		      (s[i] >= '0' && s[i] <= '9') || s[i] == '-' || s[i] == '_'))
			return false;
	return true;
}

int ident_param(const char *param, const char *value, size_t max_len, bool optional, struct err *e)
{
	if (!value && optional)
		return 0;
	if (value && ident_ok(value, max_len))
		return 0;
	return err_param(e, param, "%s: %s1 to %zu of A-Z a-z 0-9 - _ (no '.', '/' or other bytes)",
			 param, value ? "" : "required: ", max_len);
}

int ident_random_hex(char *out, size_t nbytes, struct err *e)
{
	unsigned char b[64];
	if (nbytes > sizeof b || RAND_bytes(b, (int)nbytes) != 1)
		return err_set(e, ERR_INTERNAL, "the random generator failed");
	for (size_t i = 0; i < nbytes; i++)
		snprintf(out + 2 * i, 3, "%02x", b[i]);
	out[2 * nbytes] = 0;
	return 0;
}
