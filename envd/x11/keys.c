/*
 * keys: key names to keysyms.
 *
 * Order of lookup: the aliases people type ("enter", "cmd", "pgdn"), then the
 * exact X keysym name, then every keysym name case-insensitively (a table
 * generated from keysymdef.h at build time), then a lone UTF-8 character.
 */
#include "keys.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <X11/Xlib.h>
#include <X11/keysym.h>

#include "keysym-names.h"
#include "utf8.h"

static const struct {
	const char *alias;
	KeySym sym;
} keys_aliases[] = {
    {"enter", XK_Return},
    {"return", XK_Return},
    {"ret", XK_Return},
    {"esc", XK_Escape},
    {"escape", XK_Escape},
    {"ctrl", XK_Control_L},
    {"control", XK_Control_L},
    {"lctrl", XK_Control_L},
    {"rctrl", XK_Control_R},
    {"alt", XK_Alt_L},
    {"lalt", XK_Alt_L},
    {"ralt", XK_Alt_R},
    {"option", XK_Alt_L},
    {"altgr", XK_ISO_Level3_Shift},
    {"shift", XK_Shift_L},
    {"lshift", XK_Shift_L},
    {"rshift", XK_Shift_R},
    {"super", XK_Super_L},
    {"cmd", XK_Super_L},
    {"command", XK_Super_L},
    {"win", XK_Super_L},
    {"windows", XK_Super_L},
    {"meta", XK_Super_L},
    {"pageup", XK_Prior},
    {"page_up", XK_Prior},
    {"pgup", XK_Prior},
    {"pagedown", XK_Next},
    {"page_down", XK_Next},
    {"pgdn", XK_Next},
    {"del", XK_Delete},
    {"delete", XK_Delete},
    {"backspace", XK_BackSpace},
    {"bs", XK_BackSpace},
    {"tab", XK_Tab},
    {"space", XK_space},
    {"spacebar", XK_space},
    {"up", XK_Up},
    {"down", XK_Down},
    {"left", XK_Left},
    {"right", XK_Right},
    {"arrowup", XK_Up},
    {"arrowdown", XK_Down},
    {"arrowleft", XK_Left},
    {"arrowright", XK_Right},
    {"home", XK_Home},
    {"end", XK_End},
    {"insert", XK_Insert},
    {"ins", XK_Insert},
    {"capslock", XK_Caps_Lock},
    {"numlock", XK_Num_Lock},
    {"scrolllock", XK_Scroll_Lock},
    {"printscreen", XK_Print},
    {"print", XK_Print},
    {"prtsc", XK_Print},
    {"menu", XK_Menu},
    {"pause", XK_Pause},
    {"plus", XK_plus},
    {"minus", XK_minus},
};

KeySym keys_from_codepoint(unsigned long cp)
{
	switch (cp) {
	case '\n':
	case '\r':
		return XK_Return;
	case '\t':
		return XK_Tab;
	case '\b':
		return XK_BackSpace;
	case 0x1b:
		return XK_Escape;
	default:
		break;
	}
	/* Latin-1 keysyms equal their code points; everything else has the
	 * Unicode keysym range 0x01000000 + cp. */
	if ((cp >= 0x20 && cp <= 0x7e) || (cp >= 0xa0 && cp <= 0xff))
		return cp;
	if (cp < 0x20 || (cp >= 0x7f && cp < 0xa0) || cp > 0x10ffff)
		return NoSymbol;
	return 0x01000000ul | cp;
}

KeySym keys_lookup(const char *name)
{
	if (!name || !*name)
		return NoSymbol;
	for (size_t i = 0; i < sizeof keys_aliases / sizeof keys_aliases[0]; i++)
		if (strcasecmp(name, keys_aliases[i].alias) == 0)
			return keys_aliases[i].sym;
	/* F1..F35 in any case. */
	if ((name[0] == 'f' || name[0] == 'F') && name[1] >= '1' && name[1] <= '9') {
		char *end;
		long n = strtol(name + 1, &end, 10);
		if (!*end && n >= 1 && n <= 35)
			return XK_F1 + (KeySym)(n - 1);
	}
	unsigned long cp;
	size_t n = utf8_decode(name, strlen(name), &cp);
	if (n > 0 && name[n] == 0)
		return keys_from_codepoint(cp);
	KeySym sym = XStringToKeysym(name);
	if (sym != NoSymbol)
		return sym;
	for (size_t i = 0; i < sizeof keysym_names / sizeof keysym_names[0]; i++)
		if (strcasecmp(name, keysym_names[i].name) == 0)
			return keysym_names[i].sym;
	return NoSymbol;
}

int keys_parse_combo(const char *combo, KeySym *out, size_t max, const char *param, struct err *e)
{
	if (!combo || !*combo)
		return err_param(e, param, "%s: empty key name", param);
	size_t len = strlen(combo);
	if (len > 256)
		return err_param(e, param, "%s: key combination longer than 256 bytes", param);

	/* Keys are separated by '+'. Where a key is expected, a '+' is the plus
	 * key itself, so "+", "ctrl++" and "ctrl+plus" all work. */
	size_t count = 0, i = 0;
	while (i < len) {
		KeySym sym;
		if (combo[i] == '+') {
			sym = XK_plus;
			i++;
		} else {
			size_t j = i;
			while (j < len && combo[j] != '+')
				j++;
			char tok[128];
			size_t a = i, b = j;
			while (a < b && combo[a] == ' ')
				a++;
			while (b > a && combo[b - 1] == ' ')
				b--;
			if (b == a)
				return err_param(e, param, "%s: empty key name in '%s'", param,
						 combo);
			if (b - a >= sizeof tok)
				return err_param(e, param, "%s: key name too long", param);
			memcpy(tok, combo + a, b - a);
			tok[b - a] = 0;
			sym = keys_lookup(tok);
			if (sym == NoSymbol)
				return err_param(
				    e, param,
				    "%s: unknown key '%s' (use X keysym names such as "
				    "Return, Page_Up, F5, or aliases like enter, esc, ctrl, "
				    "cmd, pagedown)",
				    param, tok);
			i = j;
		}
		if (count == max)
			return err_param(e, param, "%s: more than %zu keys at once", param, max);
		out[count++] = sym;
		if (i < len) {
			if (combo[i] != '+')
				return err_param(e, param, "%s: expected '+' after a key in '%s'",
						 param, combo);
			i++;
			if (i == len)
				return err_param(e, param,
						 "%s: '%s' ends with '+': name the last key", param,
						 combo);
		}
	}
	return (int)count;
}
