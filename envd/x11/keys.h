/*
 * keys: key names to X keysyms. A name is an X keysym name ("Return",
 * "Page_Up", "adiaeresis") or a common alias ("enter", "esc", "ctrl", "cmd",
 * "pagedown", "del", "left", "f13"), case-insensitively; a single character
 * names its own key ("a", "A", "é", "+").
 */
#ifndef CUBICLE_DESK_KEYS_H
#define CUBICLE_DESK_KEYS_H

#include <stddef.h>
#include <X11/X.h>

#include "err.h"

/* The keysym for one name, or NoSymbol. */
KeySym keys_lookup(const char *name);

/* Unicode code point to keysym (Latin-1 directly, others 0x1000000 + cp). */
KeySym keys_from_codepoint(unsigned long cp);

/*
 * Splits "ctrl+shift+t" (or a lone "+") into keysyms. Returns the number of
 * keys, or -1 with ERR_INVALID naming `param` and the unknown key.
 */
int keys_parse_combo(const char *combo, KeySym *out, size_t max, const char *param, struct err *e);

#endif
