/*
 * vnc-input: what viewers send. Pointer and keys go to the X server through
 * XTest, the extension the actions use (every application accepts its
 * events), on a connection of the RFB server's own so that viewers never wait
 * for the desk's lock; cut text goes to the CLIPBOARD, and the CLIPBOARD goes
 * back to every viewer when it changes.
 *
 * Keys arrive as X keysyms. One in the keymap is pressed by its keycode, with
 * Shift added around the press if it needs Shift and none is held (some
 * clients send 'A' without Shift). A keysym the keymap lacks (é on a US
 * keymap, any Unicode character) goes through desk_key, which binds a spare
 * keycode to it the way the type action does. Every viewer's held keys and
 * buttons are remembered and released when it leaves, so a viewer that drops
 * in the middle of a drag or with Shift down leaves nothing stuck.
 *
 * Plain RFB cut text is ISO-8859-1; the extended clipboard (noVNC, TigerVNC)
 * is UTF-8 with CRLF line ends, zlib-compressed. Text from viewers arrives
 * through libvncserver's hooks in either form. Text to viewers is written by
 * envd itself: libvncserver 0.9.14's rfbSendServerCutTextUTF8 puts the UTF-8
 * length in front of the Latin-1 text it sends plain viewers (which breaks
 * them on any non-ASCII text) and, given no Latin-1 text, leaves every plain
 * viewer's send lock locked, which freezes that viewer for good.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <X11/XKBlib.h>
#include <X11/extensions/XTest.h>
#include <X11/keysym.h>
#include <zlib.h>

#include "clipboard.h"
#include "envd.h"
#include "input.h"
#include "vnc-internal.h"
#include "utf8.h"

/* How long the clipboard's owner gets to hand over its text. */
#define VNC_CLIP_TIMEOUT_MS 2000
/* Largest clipboard text sent to viewers (libvncserver's own limit for text
 * coming the other way is 1 MiB). */
#define VNC_CLIP_MAX (1u << 20)
/* How long the text waits for one viewer's send lock. */
#define VNC_CLIP_LOCK_WAIT_S 1

static void vnc_input_io_exit(Display *dpy, void *user)
{
	(void)dpy;
	((struct vnc *)user)->input_dead = true;
}

/* ---- keymap (input_lock held) -------------------------------------------- */

/* Drops the keymap when the mapping changed (the desk binds spare keycodes;
 * every client hears MappingNotify), then loads it if needed. */
static bool vnc_keymap_load(struct vnc *v)
{
	Display *dpy = v->input_dpy;
	while (XPending(dpy)) {
		XEvent ev;
		XNextEvent(dpy, &ev);
		if (ev.type == MappingNotify) {
			XRefreshKeyboardMapping(&ev.xmapping);
			if (v->keymap) {
				XFree(v->keymap);
				v->keymap = NULL;
			}
		}
	}
	if (v->keymap)
		return true;
	XDisplayKeycodes(dpy, &v->min_keycode, &v->max_keycode);
	v->keymap = XGetKeyboardMapping(dpy, (KeyCode)v->min_keycode,
					v->max_keycode - v->min_keycode + 1, &v->syms_per_code);
	return v->keymap != NULL;
}

/* Finds sym at level 0 or 1 (Shift) of the first group. */
static bool vnc_keymap_find(struct vnc *v, KeySym sym, KeyCode *code, bool *shift)
{
	int levels = v->syms_per_code < 2 ? v->syms_per_code : 2;
	for (int level = 0; level < levels; level++)
		for (int c = v->min_keycode; c <= v->max_keycode; c++)
			if (v->keymap[(size_t)(c - v->min_keycode) * (size_t)v->syms_per_code +
				      (size_t)level] == sym) {
				*code = (KeyCode)c;
				*shift = level == 1;
				return true;
			}
	return false;
}

static bool vnc_shift_held(struct vnc *v)
{
	XkbStateRec st;
	return XkbGetState(v->input_dpy, XkbUseCoreKbd, &st) == Success && (st.mods & ShiftMask);
}

/* ---- keys ------------------------------------------------------------------ */

static void vnc_key_name(KeySym sym, char *buf, size_t len)
{
	const char *name = XKeysymToString(sym);
	if (name)
		snprintf(buf, len, "%s", name);
	else
		snprintf(buf, len, "0x%lx", (unsigned long)sym);
}

/* Presses or releases a keysym the keymap lacks, through the desk. */
static bool vnc_key_desk(struct vnc *v, KeySym sym, bool down)
{
	char name[64];
	vnc_key_name(sym, name, sizeof name);
	/* The X server interleaves clients freely: keys sent on the input
	 * connection must be processed before the desk's (desk_key syncs its
	 * own before it returns). */
	pthread_mutex_lock(&v->input_lock);
	if (!v->input_dead)
		XSync(v->input_dpy, False);
	pthread_mutex_unlock(&v->input_lock);
	struct err e = {0};
	if (desk_key(v->env->desk, name, down ? DESK_KEY_DOWN : DESK_KEY_UP, "key", &e) == 0)
		return true;
	fprintf(stderr, "envd: vnc: key %s from a viewer: %s\n", name, e.message);
	return false;
}

static void vnc_viewer_remember(struct vnc_viewer *vw, KeySym sym, KeyCode code, bool via_desk)
{
	for (int i = 0; i < vw->nkeys; i++)
		if (vw->keys[i].sym == sym)
			return; /* auto-repeat: still one key to release */
	if (vw->nkeys < VNC_VIEWER_KEYS)
		vw->keys[vw->nkeys++] = (struct vnc_key){(uint32_t)sym, code, via_desk};
}

static bool vnc_viewer_forget(struct vnc_viewer *vw, KeySym sym, struct vnc_key *out)
{
	for (int i = 0; i < vw->nkeys; i++)
		if (vw->keys[i].sym == sym) {
			*out = vw->keys[i];
			vw->keys[i] = vw->keys[--vw->nkeys];
			return true;
		}
	return false;
}

static void vnc_key_down(struct vnc *v, struct vnc_viewer *vw, KeySym sym)
{
	KeyCode code = 0, shift_code = 0;
	bool shift = false, found = false, dummy;
	pthread_mutex_lock(&v->input_lock);
	if (!v->input_dead && vnc_keymap_load(v) && vnc_keymap_find(v, sym, &code, &shift)) {
		found = true;
		if (shift && !vnc_shift_held(v) &&
		    !vnc_keymap_find(v, XK_Shift_L, &shift_code, &dummy))
			shift_code = 0;
		Display *dpy = v->input_dpy;
		if (shift_code)
			XTestFakeKeyEvent(dpy, shift_code, True, CurrentTime);
		XTestFakeKeyEvent(dpy, code, True, CurrentTime);
		if (shift_code)
			XTestFakeKeyEvent(dpy, shift_code, False, CurrentTime);
		XFlush(dpy);
	}
	pthread_mutex_unlock(&v->input_lock);
	if (found)
		vnc_viewer_remember(vw, sym, code, false);
	else if (vnc_key_desk(v, sym, true))
		vnc_viewer_remember(vw, sym, 0, true);
}

static void vnc_key_up(struct vnc *v, struct vnc_viewer *vw, KeySym sym)
{
	struct vnc_key k = {0};
	bool known = vnc_viewer_forget(vw, sym, &k);
	if (known && k.via_desk) {
		vnc_key_desk(v, sym, false);
		return;
	}
	KeyCode code = k.code;
	bool shift;
	pthread_mutex_lock(&v->input_lock);
	if (!v->input_dead &&
	    (known || (vnc_keymap_load(v) && vnc_keymap_find(v, sym, &code, &shift)))) {
		XTestFakeKeyEvent(v->input_dpy, code, False, CurrentTime);
		XFlush(v->input_dpy);
	}
	pthread_mutex_unlock(&v->input_lock);
}

void vnc_input_key(rfbBool down, rfbKeySym sym, rfbClientPtr cl)
{
	struct vnc_viewer *vw = cl->clientData;
	if (!vw || cl->viewOnly || sym == 0)
		return;
	if (down)
		vnc_key_down(vw->v, vw, (KeySym)sym);
	else
		vnc_key_up(vw->v, vw, (KeySym)sym);
}

/* ---- pointer --------------------------------------------------------------- */

void vnc_input_pointer(int mask, int x, int y, rfbClientPtr cl)
{
	struct vnc_viewer *vw = cl->clientData;
	if (!vw || cl->viewOnly)
		return;
	struct vnc *v = vw->v;
	if (x < 0)
		x = 0;
	if (y < 0)
		y = 0;
	int w = __atomic_load_n(&v->width, __ATOMIC_RELAXED);
	int h = __atomic_load_n(&v->height, __ATOMIC_RELAXED);
	if (x >= w)
		x = w - 1;
	if (y >= h)
		y = h - 1;
	pthread_mutex_lock(&v->input_lock);
	if (!v->input_dead) {
		Display *dpy = v->input_dpy;
		XTestFakeMotionEvent(dpy, v->input_screen, x, y, CurrentTime);
		/* RFB button bit n is X button n+1 (4-7 are the wheel's). */
		for (int b = 0; b < 8; b++)
			if ((mask ^ vw->buttons) & (1 << b))
				XTestFakeButtonEvent(dpy, (unsigned)b + 1, (mask >> b) & 1,
						     CurrentTime);
		XFlush(dpy);
	}
	pthread_mutex_unlock(&v->input_lock);
	vw->buttons = mask;
	/* Keeps libvncserver's idea of the pointer (drawn cursors, PointerPos). */
	rfbDefaultPtrAddEvent(mask, x, y, cl);
}

void vnc_input_release(struct vnc *v, struct vnc_viewer *vw)
{
	for (int i = 0; i < vw->nkeys; i++)
		if (vw->keys[i].via_desk)
			vnc_key_desk(v, vw->keys[i].sym, false);
	pthread_mutex_lock(&v->input_lock);
	if (!v->input_dead) {
		Display *dpy = v->input_dpy;
		for (int i = 0; i < vw->nkeys; i++)
			if (!vw->keys[i].via_desk)
				XTestFakeKeyEvent(dpy, vw->keys[i].code, False, CurrentTime);
		for (int b = 0; b < 8; b++)
			if (vw->buttons & (1 << b))
				XTestFakeButtonEvent(dpy, (unsigned)b + 1, False, CurrentTime);
		XFlush(dpy);
	}
	pthread_mutex_unlock(&v->input_lock);
	vw->nkeys = 0;
	vw->buttons = 0;
}

/* ---- clipboard: text encodings -------------------------------------------- */

/* ISO-8859-1 to UTF-8 (malloc'd). */
static char *vnc_latin1_to_utf8(const char *s, size_t len, size_t *out_len)
{
	char *out = malloc(len * 2 + 1);
	if (!out)
		return NULL;
	size_t n = 0;
	for (size_t i = 0; i < len; i++) {
		unsigned char c = (unsigned char)s[i];
		if (c < 0x80) {
			out[n++] = (char)c;
		} else {
			out[n++] = (char)(0xc0 | c >> 6);
			out[n++] = (char)(0x80 | (c & 0x3f));
		}
	}
	out[n] = 0;
	*out_len = n;
	return out;
}

/* UTF-8 to ISO-8859-1, '?' for characters it lacks and for bad bytes. */
static char *vnc_utf8_to_latin1(const char *s, size_t len, size_t *out_len)
{
	char *out = malloc(len + 1);
	if (!out)
		return NULL;
	size_t n = 0, i = 0;
	while (i < len) {
		unsigned long cp = '?';
		size_t k = utf8_decode(s + i, len - i, &cp);
		if (k == 0) {
			/* A bad byte: skip it and its continuation bytes. */
			cp = '?';
			k = 1;
			while (i + k < len && ((unsigned char)s[i + k] & 0xc0) == 0x80)
				k++;
		}
		out[n++] = cp < 0x100 ? (char)cp : '?';
		i += k;
	}
	out[n] = 0;
	*out_len = n;
	return out;
}

/* A copy with "\r\n" made "\n" (to X) or "\n" made "\r\n" (to extended
 * clipboard viewers), malloc'd. */
static char *vnc_line_ends(const char *s, size_t len, bool to_crlf, size_t *out_len)
{
	char *out = malloc(len * 2 + 1);
	if (!out)
		return NULL;
	size_t n = 0;
	for (size_t i = 0; i < len; i++) {
		if (!to_crlf && s[i] == '\r' && i + 1 < len && s[i + 1] == '\n')
			continue;
		if (to_crlf && s[i] == '\n' && (i == 0 || s[i - 1] != '\r'))
			out[n++] = '\r';
		out[n++] = s[i];
	}
	out[n] = 0;
	*out_len = n;
	return out;
}

/* ---- clipboard: viewers to X ---------------------------------------------- */

static void vnc_clip_set(struct vnc *v, const char *utf8, size_t len)
{
	struct err e = {0};
	if (clipboard_set(v->env->clipboard, utf8, len, &e) < 0)
		fprintf(stderr, "envd: vnc: a viewer's clipboard text was not set: %s\n",
			e.message);
}

void vnc_input_cut_text(char *latin1, int len, rfbClientPtr cl)
{
	struct vnc_viewer *vw = cl->clientData;
	if (!vw || cl->viewOnly || len < 0)
		return;
	size_t n;
	char *utf8 = vnc_latin1_to_utf8(latin1, (size_t)len, &n);
	if (utf8)
		vnc_clip_set(vw->v, utf8, n);
	free(utf8);
}

void vnc_input_cut_text_utf8(char *utf8, int len, rfbClientPtr cl)
{
	struct vnc_viewer *vw = cl->clientData;
	if (!vw || cl->viewOnly || len < 0)
		return;
	while (len > 0 && utf8[len - 1] == 0) /* the extended clipboard ends text with NUL */
		len--;
	size_t n;
	char *text = vnc_line_ends(utf8, (size_t)len, false, &n);
	if (text)
		vnc_clip_set(vw->v, text, n);
	free(text);
}

/* ---- clipboard: X to viewers ---------------------------------------------- */

/* One ServerCutText message, ready to write to any number of viewers. */
struct vnc_clip_msg {
	unsigned char *data;
	size_t len;
};

/* Plain: ISO-8859-1 text. */
static bool vnc_clip_msg_plain(struct vnc_clip_msg *m, const char *utf8, size_t len)
{
	size_t n;
	char *latin1 = vnc_utf8_to_latin1(utf8, len, &n);
	if (!latin1 || !(m->data = malloc(sz_rfbServerCutTextMsg + n))) {
		free(latin1);
		return false;
	}
	rfbServerCutTextMsg h = {.type = rfbServerCutText};
	h.length = Swap32IfLE((uint32_t)n);
	memcpy(m->data, &h, sz_rfbServerCutTextMsg);
	memcpy(m->data + sz_rfbServerCutTextMsg, latin1, n);
	m->len = sz_rfbServerCutTextMsg + n;
	free(latin1);
	return true;
}

/* Extended clipboard "provide": a negative length, the action and format
 * flags, then a zlib stream of its own holding the text's size and the
 * text (CRLF line ends, NUL-terminated). */
static bool vnc_clip_msg_provide(struct vnc_clip_msg *m, const char *utf8, size_t len)
{
	size_t n;
	char *text = vnc_line_ends(utf8, len, true, &n);
	if (!text)
		return false;
	size_t raw_len = 4 + n + 1;
	unsigned char *raw = malloc(raw_len);
	uLongf zlen = compressBound(raw_len);
	m->data = malloc(sz_rfbServerCutTextMsg + 4 + zlen);
	bool ok = raw && m->data;
	if (ok) {
		uint32_t size = (uint32_t)(n + 1);
		raw[0] = (unsigned char)(size >> 24);
		raw[1] = (unsigned char)(size >> 16);
		raw[2] = (unsigned char)(size >> 8);
		raw[3] = (unsigned char)size;
		memcpy(raw + 4, text, n + 1); /* with its NUL */
		ok = compress2(m->data + sz_rfbServerCutTextMsg + 4, &zlen, raw, raw_len,
			       Z_DEFAULT_COMPRESSION) == Z_OK;
	}
	if (ok) {
		rfbServerCutTextMsg h = {.type = rfbServerCutText};
		h.length = Swap32IfLE((uint32_t)(-(int32_t)(4 + zlen)));
		uint32_t flags = Swap32IfLE(
		    (uint32_t)(rfbExtendedClipboard_Provide | rfbExtendedClipboard_Text));
		memcpy(m->data, &h, sz_rfbServerCutTextMsg);
		memcpy(m->data + sz_rfbServerCutTextMsg, &flags, 4);
		m->len = sz_rfbServerCutTextMsg + 4 + zlen;
	} else {
		free(m->data);
		m->data = NULL;
	}
	free(raw);
	free(text);
	return ok;
}

/*
 * Sends the text to every viewer but view-only ones: the extended "provide" to viewers that
 * take it unasked at this size, plain ISO-8859-1 to the others. Messages are
 * written under the viewer's send lock, between framebuffer updates.
 */
static void vnc_clip_send_viewers(struct vnc *v, const char *utf8, size_t len)
{
	struct vnc_clip_msg plain = {0}, provide = {0};
	rfbClientIteratorPtr it = rfbGetClientIterator(v->screen);
	rfbClientPtr cl;
	while ((cl = rfbClientIteratorNext(it))) {
		/* A view-only viewer never gets the clipboard: an agent's
		 * copied secrets stay off the screens of people watching. */
		if (cl->state != RFB_NORMAL || cl->viewOnly)
			continue;
		struct vnc_clip_msg *m = &plain;
		if (cl->enableExtendedClipboard &&
		    (cl->extClipboardUserCap & rfbExtendedClipboard_Provide) &&
		    len + 1 <= cl->extClipboardMaxUnsolicitedSize)
			m = &provide;
		if (!m->data && !(m == &plain ? vnc_clip_msg_plain(m, utf8, len)
					      : vnc_clip_msg_provide(m, utf8, len)))
			continue;
		/* A viewer that stopped reading holds its send lock while
		 * libvncserver waits to write: skip it rather than wait too. */
		struct timespec deadline;
		clock_gettime(CLOCK_REALTIME, &deadline);
		deadline.tv_sec += VNC_CLIP_LOCK_WAIT_S;
		if (pthread_mutex_timedlock(&cl->sendMutex, &deadline) != 0)
			continue;
		rfbWriteExact(cl, (char *)m->data, (int)m->len);
		pthread_mutex_unlock(&cl->sendMutex);
	}
	rfbReleaseClientIterator(it);
	free(plain.data);
	free(provide.data);
}

static void vnc_clip_send(struct vnc *v)
{
	char *text = NULL;
	size_t len = 0;
	struct err e = {0};
	if (clipboard_get(v->env->clipboard, VNC_CLIP_TIMEOUT_MS, &text, &len, &e) < 0) {
		fprintf(stderr, "envd: vnc: cannot read the clipboard for viewers: %s\n",
			e.message);
		return;
	}
	if (len > 0 && len <= VNC_CLIP_MAX)
		vnc_clip_send_viewers(v, text, len);
	free(text);
}

static void *vnc_clip_main(void *arg)
{
	struct vnc *v = arg;
	pthread_mutex_lock(&v->lock);
	for (;;) {
		while (!v->clip_wanted && !v->clip_stop)
			pthread_cond_wait(&v->cond, &v->lock);
		if (v->clip_stop)
			break;
		v->clip_wanted = false;
		bool watched = v->viewers > 0;
		pthread_mutex_unlock(&v->lock);
		if (watched)
			vnc_clip_send(v);
		pthread_mutex_lock(&v->lock);
	}
	pthread_mutex_unlock(&v->lock);
	return NULL;
}

void vnc_clip_changed(struct vnc *v)
{
	pthread_mutex_lock(&v->lock);
	v->clip_wanted = true;
	pthread_cond_broadcast(&v->cond);
	pthread_mutex_unlock(&v->lock);
}

int vnc_clip_start(struct vnc *v, struct err *e)
{
	int rc = pthread_create(&v->clip_thread, NULL, vnc_clip_main, v);
	if (rc != 0)
		return err_set(e, ERR_INTERNAL, "cannot start a thread: %s", strerror(rc));
	v->clip_started = true;
	return 0;
}

void vnc_clip_stop(struct vnc *v)
{
	if (!v->clip_started)
		return;
	pthread_mutex_lock(&v->lock);
	v->clip_stop = true;
	pthread_cond_broadcast(&v->cond);
	pthread_mutex_unlock(&v->lock);
	pthread_join(v->clip_thread, NULL);
	v->clip_started = false;
}

/* ---- the input connection -------------------------------------------------- */

int vnc_input_open(struct vnc *v, struct err *e)
{
	Display *dpy = XOpenDisplay(v->env->display);
	if (!dpy)
		return err_set(e, ERR_UNAVAILABLE, "cannot open X display '%s'", v->env->display);
	int ev, er, major, minor;
	if (!XTestQueryExtension(dpy, &ev, &er, &major, &minor)) {
		XCloseDisplay(dpy);
		return err_set(e, ERR_UNAVAILABLE, "X display '%s' lacks the XTEST extension",
			       v->env->display);
	}
	XSetIOErrorExitHandler(dpy, vnc_input_io_exit, v);
	v->input_dpy = dpy;
	v->input_screen = DefaultScreen(dpy);
	return 0;
}

void vnc_input_close(struct vnc *v)
{
	if (v->keymap)
		XFree(v->keymap);
	v->keymap = NULL;
	if (v->input_dpy)
		XCloseDisplay(v->input_dpy);
	v->input_dpy = NULL;
}
