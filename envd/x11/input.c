/*
 * input: mouse and keyboard through XTest.
 *
 * XTest events are indistinguishable from a real device's, which is why
 * Firefox and every toolkit accept them (XSendEvent events are flagged and
 * often ignored). Each call ends with XSync so that, when it returns, the
 * server has processed the events and a screenshot will see their effect.
 *
 * Typing text: a character whose keysym is in the keymap at level 0 or 1 is
 * typed with its keycode (plus Shift for level 1). Any other character (é on
 * a US map, 世, 🙂) is bound to a spare keycode first. Clients re-read the
 * keymap lazily after MappingNotify, so a binding must not change while a
 * client may still be translating an earlier key press made through it: all
 * missing keysyms of a run of text are bound at once, to distinct scratch
 * keycodes, before any of it is typed, and a scratch keycode is only rebound
 * (least recently used first) after a short pause that lets clients catch
 * up. Bindings are kept afterwards, so typing the same characters again costs
 * nothing.
 */
#include "input.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <time.h>
#include <X11/XKBlib.h>
#include <X11/extensions/XTest.h>
#include <X11/keysym.h>

#include "clock.h"
#include "desk-internal.h"
#include "keys.h"
#include "utf8.h"

/* Before a scratch keycode is rebound, the focused client must have
 * translated the key presses made through it: envd pings it (EWMH
 * _NET_WM_PING, answered only once every earlier event is processed) and
 * waits up to INPUT_PING_MS; a client that does not answer pings gets
 * INPUT_REBIND_PAUSE_MS instead. */
#define INPUT_PING_MS	      2000
#define INPUT_REBIND_PAUSE_MS 300

/* ---- keymap ----------------------------------------------------------- */

/* Drops the cached keymap when some client changed the mapping (lock held). */
static void input_check_mapping(struct desk *d)
{
	XEvent ev;
	bool changed = false;
	while (XCheckTypedEvent(d->dpy, MappingNotify, &ev)) {
		XRefreshKeyboardMapping(&ev.xmapping);
		if (ev.xmapping.request == MappingKeyboard)
			changed = true;
	}
	if (changed) {
		free(d->keymap);
		d->keymap = NULL;
	}
}

/* Loads the keymap and finds the scratch keycodes (lock held). */
static int input_load_keymap(struct desk *d, struct err *e)
{
	input_check_mapping(d);
	if (d->keymap)
		return 0;
	XDisplayKeycodes(d->dpy, &d->min_keycode, &d->max_keycode);
	int n = d->max_keycode - d->min_keycode + 1;
	KeySym *map = XGetKeyboardMapping(d->dpy, (KeyCode)d->min_keycode, n, &d->syms_per_code);
	if (!map)
		return err_set(e, ERR_UNAVAILABLE, "cannot read the keyboard mapping");
	size_t bytes = (size_t)n * (size_t)d->syms_per_code * sizeof(KeySym);
	d->keymap = malloc(bytes);
	if (!d->keymap) {
		XFree(map);
		return err_set(e, ERR_INTERNAL, "out of memory");
	}
	memcpy(d->keymap, map, bytes);
	XFree(map);

	/* Scratch keycodes: ones we bound before (they keep their keysym), then
	 * keycodes with no keysym at all, from the top of the range down. */
	if (d->nscratch == 0) {
		for (int code = d->max_keycode; code >= d->min_keycode; code--) {
			if (d->nscratch == DESK_SCRATCH_MAX)
				break;
			const KeySym *row =
			    d->keymap + (size_t)(code - d->min_keycode) * (size_t)d->syms_per_code;
			bool empty = true;
			for (int i = 0; i < d->syms_per_code; i++)
				if (row[i] != NoSymbol)
					empty = false;
			if (empty) {
				struct desk_scratch *s = &d->scratch[d->nscratch++];
				s->code = (KeyCode)code;
				s->sym = NoSymbol;
				s->stamp = 0;
			}
		}
	}
	return 0;
}

/* Finds sym in the keymap at level 0 or 1 (Shift). Lock held. */
static bool input_find_sym(struct desk *d, KeySym sym, KeyCode *code, bool *shift)
{
	int levels = d->syms_per_code < 2 ? d->syms_per_code : 2;
	for (int level = 0; level < levels; level++) {
		for (int c = d->min_keycode; c <= d->max_keycode; c++) {
			const KeySym *row =
			    d->keymap + (size_t)(c - d->min_keycode) * (size_t)d->syms_per_code;
			if (row[level] == sym) {
				*code = (KeyCode)c;
				*shift = level == 1;
				return true;
			}
		}
	}
	return false;
}

static KeyCode input_code_of(struct desk *d, KeySym sym)
{
	KeyCode c;
	bool shift;
	return input_find_sym(d, sym, &c, &shift) ? c : 0;
}

static Bool input_is_pong(Display *dpy, XEvent *ev, XPointer arg)
{
	(void)dpy;
	const long *want = (const long *)arg;
	return ev->type == ClientMessage && ev->xclient.format == 32 &&
	       (Atom)ev->xclient.data.l[0] == (Atom)want[0] && ev->xclient.data.l[1] == want[1];
}

/* The focused top-level client and whether it answers _NET_WM_PING. Lock held. */
static Window input_focused_client(struct desk *d, bool *pings)
{
	Window w;
	int revert;
	*pings = false;
	XGetInputFocus(d->dpy, &w, &revert);
	Atom ping = desk_atom(d, "_NET_WM_PING");
	desk_trap_begin();
	for (int depth = 0; w != None && w != PointerRoot && w != d->root && depth < 16; depth++) {
		Atom *list = NULL;
		int n = 0;
		if (XGetWMProtocols(d->dpy, w, &list, &n)) {
			for (int i = 0; i < n; i++)
				*pings = *pings || list[i] == ping;
			XFree(list);
			if (n > 0)
				break;
		}
		Window root, parent, *kids = NULL;
		unsigned nk = 0;
		if (!XQueryTree(d->dpy, w, &root, &parent, &kids, &nk))
			break;
		if (kids)
			XFree(kids);
		w = parent;
	}
	if (desk_trap_end(d))
		*pings = false;
	return w;
}

/*
 * Waits until the focused client has processed every event sent so far: a
 * ping it answers only after them. Falls back to a pause for clients that
 * do not answer pings. Lock held.
 */
static void input_barrier(struct desk *d)
{
	static long serial;
	bool pings;
	XSync(d->dpy, False);
	Window w = input_focused_client(d, &pings);
	if (!pings) {
		clock_sleep_ms(INPUT_REBIND_PAUSE_MS);
		return;
	}
	long want[2] = {(long)desk_atom(d, "_NET_WM_PING"), 0x70000000L + (++serial & 0xffffff)};
	/* The answer goes to the root window: watch it just for this. */
	XSelectInput(d->dpy, d->root, SubstructureNotifyMask);
	XEvent ev;
	memset(&ev, 0, sizeof ev);
	ev.xclient.type = ClientMessage;
	ev.xclient.window = w;
	ev.xclient.message_type = desk_atom(d, "WM_PROTOCOLS");
	ev.xclient.format = 32;
	ev.xclient.data.l[0] = want[0];
	ev.xclient.data.l[1] = want[1];
	ev.xclient.data.l[2] = (long)w;
	desk_trap_begin();
	XSendEvent(d->dpy, w, False, NoEventMask, &ev);
	XFlush(d->dpy);
	int64_t t0 = clock_now_ms();
	bool answered = false;
	for (;;) {
		XEvent got;
		if (XCheckIfEvent(d->dpy, &got, input_is_pong, (XPointer)want)) {
			answered = true;
			break;
		}
		if (clock_now_ms() - t0 >= INPUT_PING_MS)
			break;
		struct pollfd p = {ConnectionNumber(d->dpy), POLLIN, 0};
		poll(&p, 1, 5);
	}
	XSelectInput(d->dpy, d->root, NoEventMask);
	desk_trap_end(d);
	/* Drop what the root selection brought in, keeping keymap changes. */
	XEvent junk;
	while (XCheckMaskEvent(d->dpy, SubstructureNotifyMask, &junk))
		;
	if (!answered)
		clock_sleep_ms(INPUT_REBIND_PAUSE_MS);
}

/*
 * Binds each of syms[0..n) that the keymap lacks to a scratch keycode. The
 * keysyms in `keep` (already bound for the text being typed) are never
 * evicted. Returns 0, or -1 when more distinct keysyms are needed at once
 * than there are scratch keycodes. Lock held.
 */
static int input_bind(struct desk *d, const KeySym *syms, size_t n, struct err *e)
{
	bool paused = false;
	for (size_t i = 0; i < n; i++) {
		KeyCode code;
		bool shift;
		if (input_find_sym(d, syms[i], &code, &shift))
			continue;
		/* Least recently used scratch keycode not needed by this batch. */
		struct desk_scratch *victim = NULL;
		for (int s = 0; s < d->nscratch; s++) {
			struct desk_scratch *sc = &d->scratch[s];
			bool needed = false;
			for (size_t j = 0; j < n && !needed; j++)
				needed = sc->sym != NoSymbol && sc->sym == syms[j];
			if (needed)
				continue;
			if (!victim || sc->stamp < victim->stamp)
				victim = sc;
		}
		if (!victim)
			return err_set(
			    e, ERR_UNAVAILABLE,
			    "no spare keycode left to type this character (the keymap is "
			    "full)");
		if (victim->sym != NoSymbol && !paused) {
			/* Someone may still be translating a press through this code. */
			input_barrier(d);
			paused = true;
		}
		KeySym row[8] = {0};
		int per = d->syms_per_code < 8 ? d->syms_per_code : 8;
		for (int k = 0; k < per && k < 2; k++)
			row[k] = syms[i];
		XChangeKeyboardMapping(d->dpy, victim->code, per, row, 1);
		KeySym *cached =
		    d->keymap + (size_t)(victim->code - d->min_keycode) * (size_t)d->syms_per_code;
		for (int k = 0; k < d->syms_per_code; k++)
			cached[k] = k < 2 ? syms[i] : NoSymbol;
		victim->sym = syms[i];
		victim->stamp = ++d->scratch_clock;
	}
	/* Our own change also produces a MappingNotify: consume it now, with the
	 * cache already up to date. */
	XSync(d->dpy, False);
	XEvent ev;
	while (XCheckTypedEvent(d->dpy, MappingNotify, &ev))
		XRefreshKeyboardMapping(&ev.xmapping);
	return 0;
}

static void input_touch_scratch(struct desk *d, KeyCode code)
{
	for (int s = 0; s < d->nscratch; s++)
		if (d->scratch[s].code == code)
			d->scratch[s].stamp = ++d->scratch_clock;
}

/* Presses and releases one keysym that is in the keymap (lock held). */
static void input_tap_sym(struct desk *d, KeySym sym)
{
	KeyCode code;
	bool shift;
	if (!input_find_sym(d, sym, &code, &shift))
		return;
	input_touch_scratch(d, code);
	KeyCode shift_code = shift ? input_code_of(d, XK_Shift_L) : 0;
	if (shift_code)
		XTestFakeKeyEvent(d->dpy, shift_code, True, CurrentTime);
	XTestFakeKeyEvent(d->dpy, code, True, CurrentTime);
	XTestFakeKeyEvent(d->dpy, code, False, CurrentTime);
	if (shift_code)
		XTestFakeKeyEvent(d->dpy, shift_code, False, CurrentTime);
}

/* ---- keyboard --------------------------------------------------------- */

/* Decodes UTF-8 into keysyms; ERR_INVALID on bad UTF-8 or control chars. */
static int input_text_syms(const char *utf8, KeySym **out, size_t *n, struct err *e)
{
	size_t len = strlen(utf8);
	KeySym *syms = malloc((len + 1) * sizeof *syms);
	if (!syms)
		return err_set(e, ERR_INTERNAL, "out of memory");
	size_t count = 0;
	size_t i = 0;
	while (i < len) {
		unsigned long cp;
		size_t k = utf8_decode(utf8 + i, len - i, &cp);
		if (k == 0)
			goto bad;
		i += k;
		if (cp == '\r' && i < len && utf8[i] == '\n')
			continue; /* CRLF types one Return */
		KeySym sym = keys_from_codepoint(cp);
		if (sym == NoSymbol) {
			free(syms);
			return err_param(e, "text",
					 "text: character U+%04lX at byte %zu cannot be typed", cp,
					 i - k);
		}
		syms[count++] = sym;
	}
	*out = syms;
	*n = count;
	return 0;
bad:
	free(syms);
	return err_param(e, "text", "text: invalid UTF-8 at byte %zu", i);
}

int desk_type(struct desk *d, const char *utf8, int delay_ms, struct err *e)
{
	KeySym *syms = NULL;
	size_t n = 0;
	if (input_text_syms(utf8, &syms, &n, e) < 0)
		return -1;
	int rc = 0;
	size_t i = 0;
	while (i < n && rc == 0) {
		if (desk_lock(d, e) < 0) {
			rc = -1;
			break;
		}
		if (input_load_keymap(d, e) < 0) {
			desk_unlock(d);
			rc = -1;
			break;
		}
		/* The longest run from i whose missing keysyms fit in the scratch
		 * keycodes, so the whole run is bound before any of it is typed. */
		size_t end = i, missing = 0;
		KeySym seen[DESK_SCRATCH_MAX];
		while (end < n) {
			KeyCode c;
			bool sh;
			if (!input_find_sym(d, syms[end], &c, &sh)) {
				bool dup = false;
				for (size_t j = 0; j < missing; j++)
					dup = dup || seen[j] == syms[end];
				if (!dup) {
					if (missing == (size_t)d->nscratch)
						break;
					seen[missing++] = syms[end];
				}
			}
			end++;
		}
		if (end == i) {
			desk_unlock(d);
			rc = err_set(e, ERR_UNAVAILABLE,
				     "no spare keycode to type U+%04lX (the keymap is full)",
				     syms[i] & 0xffffff);
			break;
		}
		if (missing && input_bind(d, seen, missing, e) < 0) {
			desk_unlock(d);
			rc = -1;
			break;
		}
		if (delay_ms <= 0) {
			for (size_t k = i; k < end; k++)
				input_tap_sym(d, syms[k]);
			XSync(d->dpy, False);
			desk_unlock(d);
			i = end;
		} else {
			/* One character per lock, pausing between them unlocked. */
			input_tap_sym(d, syms[i]);
			XSync(d->dpy, False);
			desk_unlock(d);
			i++;
			if (i < n)
				clock_sleep_ms(delay_ms);
		}
	}
	free(syms);
	return rc;
}

#define INPUT_MAX_COMBO 16

/* Keycodes for a parsed combination, binding missing keysyms; a keysym that
 * lives at the Shift level gets Shift added unless the combo has it. */
static int input_combo_codes(struct desk *d, const KeySym *syms, int n, KeyCode *codes, int *ncodes,
			     struct err *e)
{
	if (input_load_keymap(d, e) < 0)
		return -1;
	if (input_bind(d, syms, (size_t)n, e) < 0)
		return -1;
	bool has_shift = false;
	for (int i = 0; i < n; i++)
		has_shift = has_shift || syms[i] == XK_Shift_L || syms[i] == XK_Shift_R;
	int k = 0;
	for (int i = 0; i < n; i++) {
		KeyCode code;
		bool shift;
		if (!input_find_sym(d, syms[i], &code, &shift))
			return err_set(e, ERR_INTERNAL, "keysym 0x%lx vanished from the keymap",
				       syms[i]);
		if (shift && !has_shift) {
			KeyCode sc = input_code_of(d, XK_Shift_L);
			if (sc && k < INPUT_MAX_COMBO * 2) {
				codes[k++] = sc;
				has_shift = true;
			}
		}
		input_touch_scratch(d, code);
		codes[k++] = code;
	}
	*ncodes = k;
	return 0;
}

static int input_press_codes(struct desk *d, const KeyCode *codes, int n, enum desk_key_action act)
{
	if (act == DESK_KEY_TAP || act == DESK_KEY_DOWN)
		for (int i = 0; i < n; i++)
			XTestFakeKeyEvent(d->dpy, codes[i], True, CurrentTime);
	if (act == DESK_KEY_TAP || act == DESK_KEY_UP)
		for (int i = n - 1; i >= 0; i--)
			XTestFakeKeyEvent(d->dpy, codes[i], False, CurrentTime);
	XSync(d->dpy, False);
	return 0;
}

static int input_keysyms(struct desk *d, const KeySym *syms, int n, enum desk_key_action act,
			 struct err *e)
{
	if (desk_lock(d, e) < 0)
		return -1;
	KeyCode codes[INPUT_MAX_COMBO * 2];
	int ncodes = 0;
	int rc = input_combo_codes(d, syms, n, codes, &ncodes, e);
	if (rc == 0)
		rc = input_press_codes(d, codes, ncodes, act);
	desk_unlock(d);
	return rc;
}

int desk_key(struct desk *d, const char *combo, enum desk_key_action act, const char *param,
	     struct err *e)
{
	KeySym syms[INPUT_MAX_COMBO];
	int n = keys_parse_combo(combo, syms, INPUT_MAX_COMBO, param, e);
	if (n < 0)
		return -1;
	return input_keysyms(d, syms, n, act, e);
}

int desk_hotkey(struct desk *d, const char *const *keys, size_t n, struct err *e)
{
	KeySym syms[INPUT_MAX_COMBO];
	size_t count = 0;
	for (size_t i = 0; i < n; i++) {
		char param[32];
		snprintf(param, sizeof param, "keys[%zu]", i);
		int got =
		    keys_parse_combo(keys[i], syms + count, INPUT_MAX_COMBO - count, param, e);
		if (got < 0)
			return -1;
		count += (size_t)got;
	}
	if (count == 0)
		return err_param(e, "keys", "keys: give at least one key");
	return input_keysyms(d, syms, (int)count, DESK_KEY_TAP, e);
}

/*
 * Waits until the server's pointer is where the injected events put it and
 * the button is up or down as they left it (lock held). A window manager's
 * passive grab in synchronous mode (xfwm4's click to focus) freezes the
 * pointer at a press until it replays the event, so XTest motion queues up
 * behind it and XQueryPointer still shows the press position: the answer
 * and the next action would see a stale pointer. A client that keeps the
 * pointer frozen costs at most INPUT_SETTLE_MS. Takes the lock for each look,
 * so other threads are not held up while it waits.
 */
#define INPUT_SETTLE_MS 1000

/*
 * Sends the injected events (lock held). Without a settle to follow, XSync
 * waits until the server has processed them; with one, input_settle's first
 * XQueryPointer is that round trip already (its reply comes after every
 * request before it), so a flush is enough and a click costs one round trip.
 */
static void input_done(struct desk *d, bool settle_follows)
{
	if (settle_follows)
		XFlush(d->dpy);
	else
		XSync(d->dpy, False);
}

static void input_settle(struct desk *d, int x, int y, unsigned button, bool down)
{
	unsigned bit = button >= 1 && button <= 5 ? Button1Mask << (button - 1) : 0;
	int64_t t0 = clock_now_ms();
	for (int pause_us = 25;; pause_us = pause_us < 4000 ? pause_us * 2 : pause_us) {
		Window root_ret, child;
		int px, py, wx, wy;
		unsigned mask;
		struct err e;
		if (desk_lock(d, &e) < 0)
			return;
		Bool ok =
		    XQueryPointer(d->dpy, d->root, &root_ret, &child, &px, &py, &wx, &wy, &mask);
		desk_unlock(d);
		if (!ok)
			return;
		if (px == x && py == y && (!bit || !!(mask & bit) == down))
			return;
		if (clock_now_ms() - t0 >= INPUT_SETTLE_MS)
			return;
		struct timespec ts = {0, pause_us * 1000L};
		nanosleep(&ts, NULL);
	}
}

/* ---- mouse ------------------------------------------------------------ */

int desk_cursor_position(struct desk *d, int *x, int *y, struct err *e)
{
	if (desk_lock(d, e) < 0)
		return -1;
	Window root_ret, child;
	int wx, wy;
	unsigned mask;
	Bool ok = XQueryPointer(d->dpy, d->root, &root_ret, &child, x, y, &wx, &wy, &mask);
	desk_unlock(d);
	if (!ok)
		return err_set(e, ERR_UNAVAILABLE, "the pointer is on another screen");
	return 0;
}

/* Lock held. */
static void input_motion(struct desk *d, int x, int y)
{
	XTestFakeMotionEvent(d->dpy, d->screen, x, y, CurrentTime);
}

int desk_move(struct desk *d, int x, int y, struct err *e)
{
	if (desk_lock(d, e) < 0)
		return -1;
	input_motion(d, x, y);
	input_done(d, true);
	desk_unlock(d);
	input_settle(d, x, y, 0, false);
	return 0;
}

int desk_click(struct desk *d, const struct desk_point *at, enum desk_button button, int count,
	       struct err *e)
{
	if (count < 1 || count > 3)
		return err_param(e, "clicks", "clicks: %d is not 1, 2 or 3", count);
	if (desk_lock(d, e) < 0)
		return -1;
	if (at)
		input_motion(d, at->x, at->y);
	for (int i = 0; i < count; i++) {
		XTestFakeButtonEvent(d->dpy, (unsigned)button, True, CurrentTime);
		XTestFakeButtonEvent(d->dpy, (unsigned)button, False, CurrentTime);
	}
	input_done(d, at != NULL);
	desk_unlock(d);
	if (at)
		input_settle(d, at->x, at->y, (unsigned)button, false);
	return 0;
}

int desk_button(struct desk *d, const struct desk_point *at, enum desk_button button, bool down,
		struct err *e)
{
	if (desk_lock(d, e) < 0)
		return -1;
	if (at)
		input_motion(d, at->x, at->y);
	XTestFakeButtonEvent(d->dpy, (unsigned)button, down ? True : False, CurrentTime);
	input_done(d, at != NULL);
	desk_unlock(d);
	if (at)
		input_settle(d, at->x, at->y, (unsigned)button, down);
	return 0;
}

/*
 * Drags along the path. Between two points the pointer moves in steps of at
 * most 20 px, since toolkits start a drag only after motion past a threshold
 * and some ignore a single jump. With a duration the steps are spread over it
 * (the lock is released while waiting, so other actions interleave).
 */
int desk_drag(struct desk *d, const struct desk_point *path, size_t n, int duration_ms,
	      enum desk_button button, struct err *e)
{
	if (n < 2)
		return err_param(e, "path", "path: a drag needs at least two points");
	size_t steps = 0;
	for (size_t i = 1; i < n; i++) {
		int dx = abs(path[i].x - path[i - 1].x), dy = abs(path[i].y - path[i - 1].y);
		int dist = dx > dy ? dx : dy;
		steps += (size_t)(dist / 20 + 1);
	}
	double per_step_ms = duration_ms > 0 ? (double)duration_ms / (double)steps : 0;

	if (desk_lock(d, e) < 0)
		return -1;
	input_motion(d, path[0].x, path[0].y);
	XTestFakeButtonEvent(d->dpy, (unsigned)button, True, CurrentTime);
	XSync(d->dpy, False);
	desk_unlock(d);

	int64_t t0 = clock_now_us();
	size_t done = 0;
	for (size_t i = 1; i < n; i++) {
		int dx = path[i].x - path[i - 1].x, dy = path[i].y - path[i - 1].y;
		int dist = abs(dx) > abs(dy) ? abs(dx) : abs(dy);
		int k = dist / 20 + 1;
		for (int s = 1; s <= k; s++) {
			int x = path[i - 1].x + (int)((long)dx * s / k);
			int y = path[i - 1].y + (int)((long)dy * s / k);
			if (desk_lock(d, e) < 0)
				return -1;
			input_motion(d, x, y);
			XSync(d->dpy, False);
			desk_unlock(d);
			done++;
			if (per_step_ms > 0) {
				/* Sleep until this step's due time, so drift does not add up. */
				double elapsed = (double)(clock_now_us() - t0) / 1e3;
				double due = per_step_ms * (double)done;
				if (due > elapsed)
					clock_sleep_ms((int64_t)(due - elapsed));
			}
		}
	}
	if (desk_lock(d, e) < 0)
		return -1;
	XTestFakeButtonEvent(d->dpy, (unsigned)button, False, CurrentTime);
	XSync(d->dpy, False);
	desk_unlock(d);
	input_settle(d, path[n - 1].x, path[n - 1].y, (unsigned)button, false);
	return 0;
}

int desk_scroll(struct desk *d, const struct desk_point *at, enum desk_scroll_dir dir, int clicks,
		struct err *e)
{
	static const unsigned buttons[] = {
	    [DESK_SCROLL_UP] = 4,
	    [DESK_SCROLL_DOWN] = 5,
	    [DESK_SCROLL_LEFT] = 6,
	    [DESK_SCROLL_RIGHT] = 7,
	};
	if (clicks < 1)
		return err_param(e, "clicks", "clicks: must be at least 1");
	if (desk_lock(d, e) < 0)
		return -1;
	if (at)
		input_motion(d, at->x, at->y);
	for (int i = 0; i < clicks; i++) {
		XTestFakeButtonEvent(d->dpy, buttons[dir], True, CurrentTime);
		XTestFakeButtonEvent(d->dpy, buttons[dir], False, CurrentTime);
	}
	XSync(d->dpy, False);
	desk_unlock(d);
	return 0;
}
