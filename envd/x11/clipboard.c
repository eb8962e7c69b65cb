/*
 * clipboard: the CLIPBOARD selection, owned and read from envd's own X
 * connection and thread.
 *
 * X selections are a conversation, not a value: whoever owns CLIPBOARD must
 * answer every SelectionRequest (possibly in INCR chunks paced by the
 * requestor's PropertyNotify events) for as long as it owns it. The desk's
 * connection is shared by worker threads and nobody reads its event queue, so
 * the clipboard has its own Display and one thread that owns an invisible
 * window, sleeps in poll() on the X socket and a wake pipe, and does every X
 * call of this connection. clipboard_get/set are requests queued to that
 * thread (a mutex + condition variable); the thread runs one at a time as a
 * small state machine (waiting for a timestamp, a SelectionNotify, INCR
 * chunks) while it keeps serving other clients' requests, so a slow owner
 * never stops envd from serving its own selection.
 *
 * Served targets: TARGETS, TIMESTAMP, UTF8_STRING, TEXT (as UTF8_STRING),
 * text/plain;charset=utf-8, text/plain (UTF-8 bytes, as GTK does) and STRING:
 * ISO-8859-1 when every character fits, otherwise the UTF-8 bytes typed
 * UTF8_STRING, which is what xclip answers for any target. Text larger than
 * a quarter of the server's maximum request (at most 256 KiB) goes by INCR.
 */
#include "clipboard.h"
#include "clock.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <X11/Xatom.h>
#include <X11/Xlib.h>

#define CLIP_SET_TIMEOUT_MS 5000  /* the server answering our own property change */
#define CLIP_SEND_STALE_MS  30000 /* an INCR requestor that stopped reading */
#define CLIP_CHUNK_MAX	    (256 * 1024)
#define CLIP_GET_MAX	    (64u << 20) /* text accepted from another owner */
#define CLIP_NTARGETS	    7
#define CLIP_NPROPS	    8 /* rotating properties for conversions */

/* Text shared by the owned selection and the INCR transfers still sending it. */
struct clip_text {
	int refs; /* touched by the clipboard thread only */
	size_t len;
	char data[];
};

enum clip_op { CLIP_GET, CLIP_SET };

/* One clipboard_get/set call, on the caller's stack until done. */
struct clip_req {
	enum clip_op op;
	struct clip_text *text; /* SET: handed to the thread, consumed on success */
	int timeout_ms;		/* GET */
	char *out;		/* GET: malloc'd NUL-terminated UTF-8 */
	size_t out_len;
	int rc;
	struct err err;
	bool done;
	struct clip_req *next;
};

/* An INCR transfer to a requestor, paced by its property deletions. */
struct clip_send {
	Window requestor;
	Atom property, type;
	struct clip_text *text;
	size_t off;
	int64_t deadline;
	struct clip_send *next;
};

enum clip_phase {
	CLIP_IDLE,
	CLIP_WAIT_STAMP,  /* SET: our zero-length append, to learn the server time */
	CLIP_WAIT_NOTIFY, /* GET: XConvertSelection sent, SelectionNotify pending */
	CLIP_WAIT_CHUNK,  /* GET: INCR transfer from the owner */
};

struct clipboard {
	char *name;
	pthread_t thread;
	int wake[2]; /* written by callers, read by the thread */

	pthread_mutex_t mu; /* guards the queue, stop and req->done */
	pthread_cond_t cv;
	struct clip_req *head, *tail;
	bool stop;

	/* Everything below belongs to the clipboard thread. */
	Display *dpy;
	bool dead; /* the connection broke (set by Xlib's IO exit handler) */
	Window win;
	Atom a_clipboard, a_targets, a_timestamp, a_multiple, a_utf8, a_text, a_mime_utf8,
	    a_mime_plain, a_incr, a_stamp;
	Atom a_props[CLIP_NPROPS];
	Atom targets[CLIP_NTARGETS]; /* the answer to TARGETS */
	unsigned next_prop;
	size_t chunk;

	struct clip_text *owned; /* what we serve while we own CLIPBOARD */
	Time owned_time;
	struct clip_send *sends;

	struct clip_req *active;
	enum clip_phase phase;
	int64_t deadline;
	Atom conv_target, conv_prop;
	Window conv_owner;
	char *in; /* GET: bytes received so far */
	size_t in_len, in_cap;
	Atom in_type;
};

/* ---- small helpers ---------------------------------------------------------- */

static struct clip_text *clip_text_new(const char *data, size_t len)
{
	struct clip_text *t = malloc(sizeof *t + len + 1);
	if (!t)
		return NULL;
	t->refs = 1;
	t->len = len;
	if (data && len)
		memcpy(t->data, data, len);
	t->data[len] = '\0';
	return t;
}

static struct clip_text *clip_text_ref(struct clip_text *t)
{
	t->refs++;
	return t;
}

static void clip_text_unref(struct clip_text *t)
{
	if (t && --t->refs == 0)
		free(t);
}

/*
 * Decodes one UTF-8 sequence at s[0..n). Returns its length and sets *cp, or
 * 0 for an invalid, overlong or truncated sequence.
 */
static size_t clip_utf8_next(const unsigned char *s, size_t n, uint32_t *cp)
{
	if (s[0] < 0x80) {
		*cp = s[0];
		return 1;
	}
	size_t len;
	uint32_t c, min;
	if ((s[0] & 0xe0) == 0xc0) {
		len = 2, c = s[0] & 0x1f, min = 0x80;
	} else if ((s[0] & 0xf0) == 0xe0) {
		len = 3, c = s[0] & 0x0f, min = 0x800;
	} else if ((s[0] & 0xf8) == 0xf0) {
		len = 4, c = s[0] & 0x07, min = 0x10000;
	} else {
		return 0;
	}
	if (len > n)
		return 0;
	for (size_t i = 1; i < len; i++) {
		if ((s[i] & 0xc0) != 0x80)
			return 0;
		c = (c << 6) | (s[i] & 0x3f);
	}
	if (c < min || c > 0x10ffff || (c >= 0xd800 && c <= 0xdfff))
		return 0;
	*cp = c;
	return len;
}

/* Writes code point cp as UTF-8 to o (if not NULL); returns its length. */
static size_t clip_utf8_put(uint32_t cp, unsigned char *o)
{
	unsigned char b[4];
	size_t n;
	if (cp < 0x80) {
		b[0] = (unsigned char)cp;
		n = 1;
	} else if (cp < 0x800) {
		b[0] = 0xc0 | (cp >> 6);
		b[1] = 0x80 | (cp & 0x3f);
		n = 2;
	} else {
		b[0] = 0xe0 | (cp >> 12);
		b[1] = 0x80 | ((cp >> 6) & 0x3f);
		b[2] = 0x80 | (cp & 0x3f);
		n = 3;
	}
	if (o)
		memcpy(o, b, n);
	return n;
}

/*
 * Bytes from another client as UTF-8: ISO-8859-1 (`latin1`) is widened,
 * invalid UTF-8 sequences become U+FFFD. Two passes: the size, then the
 * bytes. Returns a malloc'd NUL-terminated buffer, NULL when out of memory.
 */
static char *clip_to_utf8(const char *src, size_t n, bool latin1, size_t *out_len)
{
	const unsigned char *s = (const unsigned char *)src;
	unsigned char *out = NULL;
	size_t len = 0;
	for (int pass = 0; pass < 2; pass++) {
		if (pass == 1 && !(out = malloc(len + 1)))
			return NULL;
		len = 0;
		for (size_t i = 0; i < n;) {
			uint32_t cp;
			size_t k = latin1 ? 0 : clip_utf8_next(s + i, n - i, &cp);
			if (k > 0) { /* valid UTF-8: copied as is */
				if (out)
					memcpy(out + len, s + i, k);
				len += k;
				i += k;
				continue;
			}
			cp = latin1 ? s[i] : 0xfffd;
			len += clip_utf8_put(cp, out ? out + len : NULL);
			i++;
		}
	}
	out[len] = '\0';
	*out_len = len;
	return (char *)out;
}

/* The text as ISO-8859-1 if every character fits, else NULL. */
static struct clip_text *clip_to_latin1(const struct clip_text *t)
{
	struct clip_text *l = clip_text_new(NULL, t->len);
	if (!l)
		return NULL;
	const unsigned char *s = (const unsigned char *)t->data;
	size_t n = 0;
	for (size_t i = 0; i < t->len;) {
		uint32_t cp;
		size_t k = clip_utf8_next(s + i, t->len - i, &cp);
		if (k == 0 || cp > 0xff) {
			clip_text_unref(l);
			return NULL;
		}
		l->data[n++] = (char)cp;
		i += k;
	}
	l->len = n;
	l->data[n] = '\0';
	return l;
}

/* ---- X error handling --------------------------------------------------------- */

/*
 * X error handlers are process-wide. Errors on the clipboard's connection
 * (a requestor window destroyed mid-transfer: BadWindow) are expected and
 * ignored; they are always read by the clipboard thread, which is how the
 * handler recognises them. Other threads' errors go to whoever was installed
 * before (the desk's handler, or Xlib's default).
 */
static _Thread_local bool clip_on_thread;
static XErrorHandler clip_prev_error;
static XIOErrorHandler clip_prev_io_error;

static int clip_on_x_error(Display *dpy, XErrorEvent *ev)
{
	if (clip_on_thread || !clip_prev_error)
		return 0;
	return clip_prev_error(dpy, ev);
}

static int clip_on_io_error(Display *dpy)
{
	if (clip_on_thread || !clip_prev_io_error)
		return 0;
	return clip_prev_io_error(dpy);
}

/* Xlib calls this after an IO error; returning (not exiting) leaves the
 * Display inert, and the thread reconnects on the next request. */
static void clip_on_io_exit(Display *dpy, void *user)
{
	(void)dpy;
	struct clipboard *c = user;
	c->dead = true;
}

static void clip_global_init(void)
{
	XInitThreads();
	clip_prev_error = XSetErrorHandler(clip_on_x_error);
	clip_prev_io_error = XSetIOErrorHandler(clip_on_io_error);
}

/* ---- connection ------------------------------------------------------------ */

static int clip_connect(struct clipboard *c, struct err *e)
{
	Display *dpy = XOpenDisplay(c->name);
	if (!dpy)
		return err_set(
		    e, ERR_UNAVAILABLE,
		    "clipboard: cannot open X display '%s' (is the desktop session running?)",
		    c->name);
	XSetIOErrorExitHandler(dpy, clip_on_io_exit, c);
	c->dpy = dpy;
	c->dead = false;
	Window root = DefaultRootWindow(dpy);
	c->win = XCreateSimpleWindow(dpy, root, -10, -10, 1, 1, 0, 0, 0);
	XSelectInput(dpy, c->win, PropertyChangeMask);
	XStoreName(dpy, c->win, "cubicle clipboard");

	const char *names[] = {"CLIPBOARD",
			       "TARGETS",
			       "TIMESTAMP",
			       "MULTIPLE",
			       "UTF8_STRING",
			       "TEXT",
			       "text/plain;charset=utf-8",
			       "text/plain",
			       "INCR",
			       "_CUBICLE_CLIP_TIMESTAMP"};
	Atom atoms[sizeof names / sizeof names[0]];
	XInternAtoms(dpy, (char **)names, sizeof names / sizeof names[0], False, atoms);
	c->a_clipboard = atoms[0];
	c->a_targets = atoms[1];
	c->a_timestamp = atoms[2];
	c->a_multiple = atoms[3];
	c->a_utf8 = atoms[4];
	c->a_text = atoms[5];
	c->a_mime_utf8 = atoms[6];
	c->a_mime_plain = atoms[7];
	c->a_incr = atoms[8];
	c->a_stamp = atoms[9];
	Atom targets[CLIP_NTARGETS] = {c->a_targets, c->a_timestamp, c->a_utf8,	     c->a_mime_utf8,
				       c->a_text,    XA_STRING,	     c->a_mime_plain};
	memcpy(c->targets, targets, sizeof targets);
	for (int i = 0; i < CLIP_NPROPS; i++) {
		char name[32];
		snprintf(name, sizeof name, "_CUBICLE_CLIP_%d", i);
		c->a_props[i] = XInternAtom(dpy, name, False);
	}

	long max = XExtendedMaxRequestSize(dpy);
	if (max <= 0)
		max = XMaxRequestSize(dpy);
	/* A quarter of the largest request (in 4-byte units = max bytes / 4). */
	c->chunk = (size_t)max < CLIP_CHUNK_MAX ? (size_t)max : CLIP_CHUNK_MAX;
	XSync(dpy, False);
	if (c->dead) {
		XCloseDisplay(dpy);
		c->dpy = NULL;
		return err_set(e, ERR_UNAVAILABLE, "clipboard: lost X display '%s'", c->name);
	}
	return 0;
}

static void clip_sends_free(struct clipboard *c)
{
	while (c->sends) {
		struct clip_send *s = c->sends;
		c->sends = s->next;
		clip_text_unref(s->text);
		free(s);
	}
}

static void clip_disconnect(struct clipboard *c)
{
	clip_sends_free(c);
	clip_text_unref(c->owned);
	c->owned = NULL;
	if (c->dpy) {
		if (!c->dead)
			XDestroyWindow(c->dpy, c->win);
		XCloseDisplay(c->dpy);
	}
	c->dpy = NULL;
	c->win = None;
}

/* ---- requests -------------------------------------------------------------- */

/* Hands a finished request back to its caller. */
static void clip_finish(struct clipboard *c, struct clip_req *r)
{
	pthread_mutex_lock(&c->mu);
	r->done = true;
	pthread_cond_broadcast(&c->cv);
	pthread_mutex_unlock(&c->mu);
}

static void clip_active_done(struct clipboard *c)
{
	struct clip_req *r = c->active;
	c->active = NULL;
	c->phase = CLIP_IDLE;
	free(c->in);
	c->in = NULL;
	c->in_len = c->in_cap = 0;
	if (r)
		clip_finish(c, r);
}

static void clip_active_fail(struct clipboard *c, enum err_code code, const char *msg)
{
	if (!c->active)
		return;
	c->active->rc = err_set(&c->active->err, code, "%s", msg);
	clip_active_done(c);
}

/* GET result from bytes (latin1: the owner answered STRING). */
static void clip_get_answer(struct clipboard *c, const char *data, size_t len, bool latin1)
{
	struct clip_req *r = c->active;
	r->out = clip_to_utf8(data ? data : "", data ? len : 0, latin1, &r->out_len);
	if (!r->out)
		r->rc = err_set(&r->err, ERR_INTERNAL, "clipboard: out of memory");
	clip_active_done(c);
}

static void clip_start_set(struct clipboard *c)
{
	/* A zero-length append changes nothing but makes the server send a
	 * PropertyNotify carrying the current server time: the timestamp ICCCM
	 * wants for XSetSelectionOwner (CurrentTime is racy). */
	XChangeProperty(c->dpy, c->win, c->a_stamp, XA_STRING, 8, PropModeAppend,
			(const unsigned char *)"", 0);
	c->phase = CLIP_WAIT_STAMP;
	c->deadline = clock_now_ms() + CLIP_SET_TIMEOUT_MS;
}

static void clip_take_ownership(struct clipboard *c, Time t)
{
	XSetSelectionOwner(c->dpy, c->a_clipboard, c->win, t);
	if (XGetSelectionOwner(c->dpy, c->a_clipboard) != c->win) {
		clip_active_fail(
		    c, ERR_UNAVAILABLE,
		    "clipboard: the X server did not give envd the CLIPBOARD selection "
		    "(another client took it at the same moment); try again");
		return;
	}
	clip_text_unref(c->owned);
	c->owned = c->active->text;
	c->active->text = NULL;
	c->owned_time = t;
	clip_active_done(c);
}

static void clip_convert(struct clipboard *c, Atom target)
{
	c->conv_target = target;
	c->conv_prop = c->a_props[c->next_prop++ % CLIP_NPROPS];
	XDeleteProperty(c->dpy, c->win, c->conv_prop);
	XConvertSelection(c->dpy, c->a_clipboard, target, c->conv_prop, c->win, CurrentTime);
	c->phase = CLIP_WAIT_NOTIFY;
}

static void clip_start_get(struct clipboard *c)
{
	Window owner = XGetSelectionOwner(c->dpy, c->a_clipboard);
	if (owner == None) {
		clip_get_answer(c, "", 0, false);
		return;
	}
	if (owner == c->win && c->owned) {
		clip_get_answer(c, c->owned->data, c->owned->len, false);
		return;
	}
	c->conv_owner = owner;
	c->deadline = clock_now_ms() + c->active->timeout_ms;
	clip_convert(c, c->a_utf8);
}

/* Starts the next queued request, if any and none is running. */
static void clip_start_next(struct clipboard *c)
{
	if (c->active)
		return;
	pthread_mutex_lock(&c->mu);
	struct clip_req *r = c->head;
	if (r) {
		c->head = r->next;
		if (!c->head)
			c->tail = NULL;
	}
	pthread_mutex_unlock(&c->mu);
	if (!r)
		return;
	c->active = r;
	if (!c->dpy) {
		struct err e;
		if (clip_connect(c, &e) < 0) {
			clip_active_fail(c, e.code, e.message);
			return;
		}
	}
	if (r->op == CLIP_SET)
		clip_start_set(c);
	else
		clip_start_get(c);
}

/* ---- reading a conversion ------------------------------------------------------- */

/*
 * Reads (and deletes) our conversion property. Returns 0 with the bytes
 * appended to c->in and *nbytes set, or -1 when it is missing or not text.
 */
static int clip_read_prop(struct clipboard *c, Atom *type, size_t *nbytes)
{
	Atom t;
	int fmt;
	unsigned long n, after;
	unsigned char *data = NULL;
	if (XGetWindowProperty(c->dpy, c->win, c->conv_prop, 0, 0, False, AnyPropertyType, &t, &fmt,
			       &n, &after, &data) != Success)
		return -1;
	XFree(data);
	data = NULL;
	if (t == None)
		return -1;
	long words = (long)((after + 3) / 4);
	if (XGetWindowProperty(c->dpy, c->win, c->conv_prop, 0, words, True, AnyPropertyType, &t,
			       &fmt, &n, &after, &data) != Success)
		return -1;
	*type = t;
	size_t bytes = 0;
	if (t == c->a_incr) {
		bytes = 0; /* the size hint is not needed */
	} else if (fmt == 8) {
		bytes = n;
	} else if (n > 0) {
		XFree(data);
		return -1; /* 16/32-bit data is not text */
	}
	if (bytes) {
		if (c->in_len + bytes > CLIP_GET_MAX) {
			XFree(data);
			return -2;
		}
		if (c->in_len + bytes + 1 > c->in_cap) {
			size_t cap = (c->in_len + bytes + 1) * 2;
			char *p = realloc(c->in, cap);
			if (!p) {
				XFree(data);
				return -2;
			}
			c->in = p;
			c->in_cap = cap;
		}
		memcpy(c->in + c->in_len, data, bytes);
		c->in_len += bytes;
	}
	XFree(data);
	*nbytes = bytes;
	return 0;
}

static void clip_too_large(struct clipboard *c)
{
	char msg[160];
	snprintf(msg, sizeof msg, "clipboard: the clipboard holds more than %u MiB of text",
		 CLIP_GET_MAX >> 20);
	c->active->rc = err_set(&c->active->err, ERR_TOO_LARGE, "%s", msg);
	clip_active_done(c);
}

static void clip_on_selection_notify(struct clipboard *c, XSelectionEvent *ev)
{
	if (c->phase != CLIP_WAIT_NOTIFY || ev->requestor != c->win ||
	    ev->selection != c->a_clipboard || ev->target != c->conv_target)
		return;
	if (ev->property == None) {
		if (c->conv_target == c->a_utf8) {
			clip_convert(c, XA_STRING); /* an older client: ask for Latin-1 */
			return;
		}
		clip_get_answer(c, "", 0, false); /* the owner has no text (an image?) */
		return;
	}
	if (ev->property != c->conv_prop)
		return;
	Atom type;
	size_t n;
	int rc = clip_read_prop(c, &type, &n);
	if (rc == -2) {
		clip_too_large(c);
		return;
	}
	if (rc < 0) {
		clip_get_answer(c, "", 0, false);
		return;
	}
	if (type == c->a_incr) {
		/* Deleting the INCR property (done by the read) starts the transfer. */
		c->phase = CLIP_WAIT_CHUNK;
		c->in_type = None;
		c->deadline = clock_now_ms() + c->active->timeout_ms;
		return;
	}
	clip_get_answer(c, c->in, c->in_len, type == XA_STRING);
}

static void clip_on_incr_chunk(struct clipboard *c)
{
	Atom type;
	size_t n;
	int rc = clip_read_prop(c, &type, &n);
	if (rc == -2) {
		clip_too_large(c);
		return;
	}
	if (rc < 0)
		return; /* a deletion raced with us; wait for the next NewValue */
	if (c->in_type == None)
		c->in_type = type;
	if (n == 0) {
		clip_get_answer(c, c->in, c->in_len, c->in_type == XA_STRING);
		return;
	}
	c->deadline = clock_now_ms() + c->active->timeout_ms;
}

/* ---- serving our selection ------------------------------------------------------ */

static struct clip_send *clip_send_find(struct clipboard *c, Window w, Atom prop)
{
	for (struct clip_send *s = c->sends; s; s = s->next)
		if (s->requestor == w && (prop == None || s->property == prop))
			return s;
	return NULL;
}

static void clip_send_remove(struct clipboard *c, struct clip_send *s)
{
	for (struct clip_send **p = &c->sends; *p; p = &(*p)->next) {
		if (*p == s) {
			*p = s->next;
			break;
		}
	}
	if (!clip_send_find(c, s->requestor, None))
		XSelectInput(c->dpy, s->requestor, NoEventMask);
	clip_text_unref(s->text);
	free(s);
}

/* The requestor deleted the property: the next chunk, or the closing empty one. */
static void clip_send_next(struct clipboard *c, struct clip_send *s)
{
	size_t n = s->text->len - s->off;
	if (n > c->chunk)
		n = c->chunk;
	XChangeProperty(c->dpy, s->requestor, s->property, s->type, 8, PropModeReplace,
			(const unsigned char *)s->text->data + s->off, (int)n);
	s->off += n;
	s->deadline = clock_now_ms() + CLIP_SEND_STALE_MS;
	if (n == 0)
		clip_send_remove(c, s);
}

/*
 * Writes `t` as `type` into the requestor's property, directly or by INCR.
 * Returns false if it could not (out of memory).
 */
static bool clip_serve_text(struct clipboard *c, Window requestor, Atom prop, Atom type,
			    struct clip_text *t)
{
	if (t->len <= c->chunk) {
		XChangeProperty(c->dpy, requestor, prop, type, 8, PropModeReplace,
				(const unsigned char *)t->data, (int)t->len);
		return true;
	}
	struct clip_send *s = calloc(1, sizeof *s);
	if (!s)
		return false;
	s->requestor = requestor;
	s->property = prop;
	s->type = type;
	s->text = clip_text_ref(t);
	s->deadline = clock_now_ms() + CLIP_SEND_STALE_MS;
	s->next = c->sends;
	c->sends = s;
	XSelectInput(c->dpy, requestor, PropertyChangeMask | StructureNotifyMask);
	long size = (long)t->len;
	XChangeProperty(c->dpy, requestor, prop, c->a_incr, 32, PropModeReplace,
			(const unsigned char *)&size, 1);
	return true;
}

static void clip_on_selection_request(struct clipboard *c, XSelectionRequestEvent *req)
{
	XSelectionEvent ev = {
	    .type = SelectionNotify,
	    .display = req->display,
	    .requestor = req->requestor,
	    .selection = req->selection,
	    .target = req->target,
	    .property = None,
	    .time = req->time,
	};
	Atom prop = req->property != None ? req->property : req->target; /* obsolete clients */
	bool ours = req->selection == c->a_clipboard && req->owner == c->win && c->owned;
	Atom t = req->target;

	if (!ours || t == c->a_multiple) {
		/* refused: property None */
	} else if (t == c->a_targets) {
		XChangeProperty(c->dpy, req->requestor, prop, XA_ATOM, 32, PropModeReplace,
				(const unsigned char *)c->targets, CLIP_NTARGETS);
		ev.property = prop;
	} else if (t == c->a_timestamp) {
		long stamp = (long)c->owned_time;
		XChangeProperty(c->dpy, req->requestor, prop, XA_INTEGER, 32, PropModeReplace,
				(const unsigned char *)&stamp, 1);
		ev.property = prop;
	} else if (t == c->a_utf8 || t == c->a_text || t == c->a_mime_utf8 ||
		   t == c->a_mime_plain) {
		Atom type = t == c->a_text ? c->a_utf8 : t;
		if (clip_serve_text(c, req->requestor, prop, type, c->owned))
			ev.property = prop;
	} else if (t == XA_STRING) {
		struct clip_text *l = clip_to_latin1(c->owned);
		bool ok = l ? clip_serve_text(c, req->requestor, prop, XA_STRING, l)
			    : clip_serve_text(c, req->requestor, prop, c->a_utf8, c->owned);
		clip_text_unref(l);
		if (ok)
			ev.property = prop;
	}
	XSendEvent(c->dpy, req->requestor, False, NoEventMask, (XEvent *)&ev);
}

/* ---- the thread ------------------------------------------------------------------ */

static void clip_on_event(struct clipboard *c, XEvent *ev)
{
	switch (ev->type) {
	case SelectionRequest:
		clip_on_selection_request(c, &ev->xselectionrequest);
		break;
	case SelectionClear:
		if (ev->xselectionclear.selection == c->a_clipboard &&
		    ev->xselectionclear.window == c->win) {
			clip_text_unref(c->owned); /* INCR transfers keep their own reference */
			c->owned = NULL;
		}
		break;
	case SelectionNotify:
		clip_on_selection_notify(c, &ev->xselection);
		break;
	case PropertyNotify: {
		XPropertyEvent *p = &ev->xproperty;
		if (p->window == c->win) {
			if (p->atom == c->a_stamp && c->phase == CLIP_WAIT_STAMP)
				clip_take_ownership(c, p->time);
			else if (p->atom == c->conv_prop && p->state == PropertyNewValue &&
				 c->phase == CLIP_WAIT_CHUNK)
				clip_on_incr_chunk(c);
		} else if (p->state == PropertyDelete) {
			struct clip_send *s = clip_send_find(c, p->window, p->atom);
			if (s)
				clip_send_next(c, s);
		}
		break;
	}
	case DestroyNotify: {
		struct clip_send *s;
		while ((s = clip_send_find(c, ev->xdestroywindow.window, None)))
			clip_send_remove(c, s);
		break;
	}
	default:
		break;
	}
}

/* Expires the active request and stale INCR sends; returns the poll timeout. */
static int clip_check_deadlines(struct clipboard *c)
{
	int64_t now = clock_now_ms(), next = INT64_MAX;
	if (c->active && c->phase != CLIP_IDLE) {
		if (now >= c->deadline) {
			char msg[200];
			if (c->phase == CLIP_WAIT_STAMP)
				snprintf(msg, sizeof msg,
					 "clipboard: the X server did not answer within %d ms",
					 CLIP_SET_TIMEOUT_MS);
			else
				snprintf(msg, sizeof msg,
					 "clipboard: the clipboard owner (X window 0x%lx) did not "
					 "answer within %d ms",
					 (unsigned long)c->conv_owner, c->active->timeout_ms);
			clip_active_fail(c, ERR_TIMEOUT, msg);
		} else {
			next = c->deadline;
		}
	}
	for (struct clip_send *s = c->sends, *nx; s; s = nx) {
		nx = s->next;
		if (now >= s->deadline)
			clip_send_remove(c, s);
		else if (s->deadline < next)
			next = s->deadline;
	}
	if (next == INT64_MAX)
		return -1;
	return next - now > INT_MAX ? INT_MAX : (int)(next - now);
}

static void clip_drain_events(struct clipboard *c)
{
	while (c->dpy && !c->dead && XPending(c->dpy) > 0) {
		XEvent ev;
		XNextEvent(c->dpy, &ev);
		clip_on_event(c, &ev);
	}
}

static void clip_fail_all(struct clipboard *c, const char *msg)
{
	clip_active_fail(c, ERR_UNAVAILABLE, msg);
	pthread_mutex_lock(&c->mu);
	struct clip_req *r = c->head;
	c->head = c->tail = NULL;
	for (; r; r = r->next) {
		r->rc = err_set(&r->err, ERR_UNAVAILABLE, "%s", msg);
		r->done = true;
	}
	pthread_cond_broadcast(&c->cv);
	pthread_mutex_unlock(&c->mu);
}

static void *clip_thread_main(void *arg)
{
	struct clipboard *c = arg;
	clip_on_thread = true;
	for (;;) {
		clip_drain_events(c);
		if (c->dead) {
			clip_active_fail(c, ERR_UNAVAILABLE,
					 "clipboard: the connection to the X display broke (the "
					 "desktop session is restarting?)");
			clip_disconnect(c);
		}
		pthread_mutex_lock(&c->mu);
		bool stop = c->stop;
		bool queued = c->head != NULL;
		pthread_mutex_unlock(&c->mu);
		if (stop)
			break;
		if (!c->active && queued) {
			clip_start_next(c);
			continue; /* it may have finished at once, or left events to read */
		}
		int timeout = clip_check_deadlines(c);
		if (!c->active) {
			pthread_mutex_lock(&c->mu);
			queued = c->head != NULL;
			pthread_mutex_unlock(&c->mu);
			if (queued)
				continue;
		}
		struct pollfd p[2] = {{.fd = c->wake[0], .events = POLLIN}, {.fd = -1}};
		if (c->dpy && !c->dead) {
			XFlush(c->dpy);
			if (XEventsQueued(c->dpy, QueuedAlready) > 0)
				continue;
			p[1].fd = ConnectionNumber(c->dpy);
			p[1].events = POLLIN;
		}
		if (poll(p, 2, timeout) < 0 && errno != EINTR) {
			/* Cannot wait any more: refuse new requests rather than hang them. */
			pthread_mutex_lock(&c->mu);
			c->stop = true;
			pthread_mutex_unlock(&c->mu);
			break;
		}
		if (p[0].revents & POLLIN) {
			char buf[64];
			while (read(c->wake[0], buf, sizeof buf) > 0) {
			}
		}
	}
	clip_fail_all(c, "clipboard: envd is shutting down");
	clip_disconnect(c);
	return NULL;
}

/* Queues r for the thread and waits until it is done. */
static int clip_submit(struct clipboard *c, struct clip_req *r)
{
	pthread_mutex_lock(&c->mu);
	if (c->stop) {
		pthread_mutex_unlock(&c->mu);
		return err_set(&r->err, ERR_UNAVAILABLE, "clipboard: envd is shutting down");
	}
	if (c->tail)
		c->tail->next = r;
	else
		c->head = r;
	c->tail = r;
	pthread_mutex_unlock(&c->mu);
	ssize_t w = write(c->wake[1], "", 1); /* EAGAIN: a wake-up is pending anyway */
	(void)w;
	pthread_mutex_lock(&c->mu);
	while (!r->done)
		pthread_cond_wait(&c->cv, &c->mu);
	pthread_mutex_unlock(&c->mu);
	return r->rc;
}

/* ---- interface ------------------------------------------------------------------ */

struct clipboard *clipboard_open(const char *display, struct err *e)
{
	static pthread_once_t once = PTHREAD_ONCE_INIT;
	pthread_once(&once, clip_global_init);

	if (!display)
		display = getenv("DISPLAY");
	if (!display || !*display) {
		err_set(e, ERR_UNAVAILABLE, "clipboard: no X display: DISPLAY is not set");
		return NULL;
	}
	struct clipboard *c = calloc(1, sizeof *c);
	if (!c || !(c->name = strdup(display))) {
		free(c);
		err_set(e, ERR_INTERNAL, "out of memory");
		return NULL;
	}
	if (pipe2(c->wake, O_CLOEXEC | O_NONBLOCK) < 0) {
		err_set(e, ERR_INTERNAL, "clipboard: pipe: %s", strerror(errno));
		free(c->name);
		free(c);
		return NULL;
	}
	pthread_mutex_init(&c->mu, NULL);
	pthread_cond_init(&c->cv, NULL);
	/* Connect here so a bad display fails clipboard_open; from now on only
	 * the thread touches the connection. Errors while connecting count as
	 * the clipboard's own. */
	clip_on_thread = true;
	int rc = clip_connect(c, e);
	clip_on_thread = false;
	if (rc == 0 && (errno = pthread_create(&c->thread, NULL, clip_thread_main, c)) != 0) {
		err_set(e, ERR_INTERNAL, "clipboard: cannot start its thread: %s", strerror(errno));
		clip_on_thread = true;
		clip_disconnect(c);
		clip_on_thread = false;
		rc = -1;
	}
	if (rc < 0) {
		close(c->wake[0]);
		close(c->wake[1]);
		pthread_mutex_destroy(&c->mu);
		pthread_cond_destroy(&c->cv);
		free(c->name);
		free(c);
		return NULL;
	}
	return c;
}

void clipboard_close(struct clipboard *c)
{
	if (!c)
		return;
	pthread_mutex_lock(&c->mu);
	c->stop = true;
	pthread_mutex_unlock(&c->mu);
	ssize_t w = write(c->wake[1], "", 1);
	(void)w;
	pthread_join(c->thread, NULL);
	close(c->wake[0]);
	close(c->wake[1]);
	pthread_mutex_destroy(&c->mu);
	pthread_cond_destroy(&c->cv);
	free(c->name);
	free(c);
}

int clipboard_set(struct clipboard *c, const char *utf8, size_t len, struct err *e)
{
	if (len > INT_MAX)
		return err_set(e, ERR_TOO_LARGE, "clipboard: text over 2 GiB");
	struct clip_req r = {.op = CLIP_SET};
	if (!(r.text = clip_text_new(utf8, len)))
		return err_set(e, ERR_INTERNAL, "out of memory");
	int rc = clip_submit(c, &r);
	clip_text_unref(r.text); /* still ours if the thread did not take it */
	if (rc < 0 && e)
		*e = r.err;
	return rc;
}

int clipboard_get(struct clipboard *c, int timeout_ms, char **out, size_t *len, struct err *e)
{
	struct clip_req r = {.op = CLIP_GET, .timeout_ms = timeout_ms > 0 ? timeout_ms : 1};
	int rc = clip_submit(c, &r);
	if (rc < 0) {
		free(r.out);
		if (e)
			*e = r.err;
		return -1;
	}
	*out = r.out;
	if (len)
		*len = r.out_len;
	return 0;
}
