/*
 * xrecorder: a test X client that records what it receives.
 *
 *   xrecorder [--geometry WxH+X+Y] [--color RRGGBB] [--title T] [--override-redirect]
 *
 * Maps one window filled with a solid colour, waits until it is viewable,
 * prints {"ready":true,"window":ID}, then one JSON object per line for every
 * pointer, key, focus and configure event. Tests compare these lines with
 * what they asked envd to do, so input is checked by an independent client
 * rather than by envd's own view of the display. --override-redirect keeps
 * the window manager away: the window is exactly where asked, with no frame
 * (to witness clicks at the screen's edges, x = 0 or y = 0).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <X11/Xlib.h>
#include <X11/Xutil.h>
#include <X11/Xatom.h>
#include <unistd.h>

static void print_key(const char *type, XKeyEvent *ev)
{
	char buf[32];
	KeySym sym = NoSymbol;
	int n = XLookupString(ev, buf, sizeof buf - 1, &sym, NULL);
	(void)n;
	/* The keysym as an application sees it: modifiers applied. */
	const char *name = sym != NoSymbol ? XKeysymToString(sym) : NULL;
	printf("{\"type\":\"%s\",\"keycode\":%u,\"keysym\":%lu,\"name\":\"%s\",\"state\":%u}\n",
	       type, ev->keycode, (unsigned long)sym, name ? name : "", ev->state);
}

int main(int argc, char **argv)
{
	unsigned w = 300, h = 200;
	int x = 100, y = 100;
	unsigned long rgb = 0x3366cc;
	const char *title = "xrecorder";
	Bool override = False;
	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--override-redirect") == 0) {
			override = True;
			continue;
		}
		if (i + 1 >= argc) {
			fprintf(stderr, "xrecorder: %s needs a value\n", argv[i]);
			return 2;
		}
		const char *opt = argv[i], *val = argv[++i];
		if (strcmp(opt, "--geometry") == 0) {
			if (sscanf(val, "%ux%u+%d+%d", &w, &h, &x, &y) != 4) {
				fprintf(stderr, "xrecorder: --geometry WxH+X+Y\n");
				return 2;
			}
		} else if (strcmp(opt, "--color") == 0) {
			rgb = strtoul(val, NULL, 16);
		} else if (strcmp(opt, "--title") == 0) {
			title = val;
		} else {
			fprintf(stderr, "xrecorder: unknown option %s\n", opt);
			return 2;
		}
	}
	Display *dpy = XOpenDisplay(NULL);
	if (!dpy) {
		fprintf(stderr, "xrecorder: cannot open display\n");
		return 1;
	}
	int scr = DefaultScreen(dpy);
	XSetWindowAttributes a;
	a.background_pixel = rgb; /* TrueColor 24-bit: the pixel is the RGB value */
	a.override_redirect = override;
	a.event_mask = ButtonPressMask | ButtonReleaseMask | PointerMotionMask | KeyPressMask |
		       KeyReleaseMask | FocusChangeMask | StructureNotifyMask | ExposureMask;
	Window win =
	    XCreateWindow(dpy, RootWindow(dpy, scr), x, y, w, h, 0, CopyFromParent, InputOutput,
			  CopyFromParent, CWBackPixel | CWEventMask | CWOverrideRedirect, &a);
	XStoreName(dpy, win, title);
	XClassHint ch = {(char *)"xrecorder", (char *)"XRecorder"};
	XSetClassHint(dpy, win, &ch);
	XSizeHints *sh = XAllocSizeHints();
	sh->flags = USPosition | USSize | PPosition | PSize;
	sh->x = x;
	sh->y = y;
	sh->width = (int)w;
	sh->height = (int)h;
	XSetWMNormalHints(dpy, win, sh);
	XFree(sh);
	XWMHints wmh = {.flags = InputHint, .input = True};
	XSetWMHints(dpy, win, &wmh);
	Atom pid_atom = XInternAtom(dpy, "_NET_WM_PID", False);
	long pid = (long)getpid();
	XChangeProperty(dpy, win, pid_atom, XA_CARDINAL, 32, PropModeReplace, (unsigned char *)&pid,
			1);
	Atom wm_delete = XInternAtom(dpy, "WM_DELETE_WINDOW", False);
	XSetWMProtocols(dpy, win, &wm_delete, 1);
	XMapWindow(dpy, win);

	int ready = 0;
	for (;;) {
		XEvent ev;
		XNextEvent(dpy, &ev);
		switch (ev.type) {
		case Expose:
			if (!ready && ev.xexpose.count == 0) {
				ready = 1;
				printf("{\"ready\":true,\"window\":%lu}\n", win);
			}
			break;
		case ButtonPress:
		case ButtonRelease:
			printf("{\"type\":\"%s\",\"x\":%d,\"y\":%d,\"x_root\":%d,\"y_root\":%d,"
			       "\"button\":%u,\"state\":%u,\"time\":%lu}\n",
			       ev.type == ButtonPress ? "press" : "release", ev.xbutton.x,
			       ev.xbutton.y, ev.xbutton.x_root, ev.xbutton.y_root,
			       ev.xbutton.button, ev.xbutton.state, ev.xbutton.time);
			break;
		case MotionNotify:
			printf("{\"type\":\"motion\",\"x_root\":%d,\"y_root\":%d,\"state\":%u}\n",
			       ev.xmotion.x_root, ev.xmotion.y_root, ev.xmotion.state);
			break;
		case KeyPress:
			print_key("key_press", &ev.xkey);
			break;
		case KeyRelease:
			print_key("key_release", &ev.xkey);
			break;
		case FocusIn:
		case FocusOut:
			printf("{\"type\":\"%s\"}\n",
			       ev.type == FocusIn ? "focus_in" : "focus_out");
			break;
		case ConfigureNotify:
			printf("{\"type\":\"configure\",\"x\":%d,\"y\":%d,\"width\":%d,"
			       "\"height\":%d}\n",
			       ev.xconfigure.x, ev.xconfigure.y, ev.xconfigure.width,
			       ev.xconfigure.height);
			break;
		case ClientMessage:
			if ((Atom)ev.xclient.data.l[0] == wm_delete) {
				printf("{\"type\":\"close\"}\n");
				fflush(stdout);
				XCloseDisplay(dpy);
				return 0;
			}
			break;
		default:
			break;
		}
		fflush(stdout);
	}
}
