/*
 * session: Xvfb → D-Bus session bus → AT-SPI bus → xfce4-session, supervised.
 *
 * Each child runs in its own process group as the session user, so stopping
 * one stops what it spawned. The supervisor thread waits on the children's
 * pidfds (no polling, no SIGCHLD games with the HTTP loop) and, when one
 * dies, restarts it and every child after it: they all hang off the X
 * server and the bus. Restarts back off when a child keeps dying.
 *
 * Readiness is what a person would call a usable desktop: the Xfce panel and
 * the desktop (xfdesktop) windows are mapped. It is checked on the thread's
 * own X connection every 25 ms until true, then again whenever the window
 * manager's client list changes (a PropertyNotify on the root), so a panel
 * that crashes makes the desktop not ready until it is back. A desktop that
 * stays not ready for SESSION_UNREADY_RESTART_MS after it was ready gets its
 * xfce4-session restarted.
 *
 * Xvfb never grows its framebuffer (randr.h): it starts at the largest size
 * set_screen_size may ask for (SESSION_MAX_W x SESSION_MAX_H, or the
 * requested size if larger) and is set to the requested size at once.
 */
#include "session.h"
#include "userenv.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <pthread.h>
#include <pwd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <X11/Xlib.h>
#include <X11/Xatom.h>
#include <X11/Xutil.h>

#include "clock.h"
#include "randr.h"

/* Xvfb's framebuffer: the largest screen set_screen_size can make. It costs
 * width x height x 4 bytes of resident memory whatever the screen's size
 * (1920x1200: 9 MB, 5 MB more than 1280x800). */
#define SESSION_MAX_W 1920
#define SESSION_MAX_H 1200

/* How long a desktop that was ready may stay not ready before envd restarts
 * xfce4-session (xfce4-session restarts a crashed panel itself, faster). */
#define SESSION_UNREADY_RESTART_MS 15000

enum { CHILD_XVFB, CHILD_DBUS, CHILD_A11Y, CHILD_DESKTOP, CHILD_COUNT };

struct session_child {
	const char *name;
	pid_t pid;  /* 0 when not running */
	int pidfd;  /* -1 when not running */
	int recent; /* restarts in the current burst, for back-off */
	double last_start_ms;
};

struct session {
	struct session_opts o;
	char display[16];
	char runtime_dir[64];
	char bus_address[128];
	char **env; /* the children's environment, NULL-terminated */
	struct session_child child[CHILD_COUNT];

	pthread_t thread;
	int wake[2]; /* session_stop() writes here */
	pthread_mutex_t lock;
	bool ready;
	bool was_ready; /* ready at some point since the last restart */
	double unready_since_ms;
	double ready_ms;
	double start_ms; /* when the current (re)start began */
	bool stopping;
};

/* ---- environment ------------------------------------------------------ */

static int session_env_set(struct session *s, size_t *n, size_t *cap, const char *key,
			   const char *value)
{
	size_t klen = strlen(key);
	char *entry;
	if (asprintf(&entry, "%s=%s", key, value) < 0)
		return -1;
	for (size_t i = 0; i < *n; i++) {
		if (strncmp(s->env[i], key, klen) == 0 && s->env[i][klen] == '=') {
			free(s->env[i]);
			s->env[i] = entry;
			return 0;
		}
	}
	if (*n + 2 > *cap) {
		size_t nc = *cap ? *cap * 2 : 64;
		char **ne = realloc(s->env, nc * sizeof *ne);
		if (!ne) {
			free(entry);
			return -1;
		}
		s->env = ne;
		*cap = nc;
	}
	s->env[(*n)++] = entry;
	s->env[*n] = NULL;
	return 0;
}

/*
 * The children's environment: envd's own, the session's variables, then the
 * image's /etc/cubicle/session.env (accessibility switches and the like).
 * The session variables are also set in envd itself, so the apps it launches
 * and the commands it runs find the display and the buses.
 */
static int session_build_env(struct session *s, struct err *e)
{
	extern char **environ;
	size_t n = 0, cap = 0;
	for (char **p = environ; *p; p++) {
		const char *eq = strchr(*p, '=');
		if (!eq)
			continue;
		char key[256];
		size_t kl = (size_t)(eq - *p);
		if (kl >= sizeof key)
			continue;
		memcpy(key, *p, kl);
		key[kl] = 0;
		if (session_env_set(s, &n, &cap, key, eq + 1) < 0)
			goto oom;
	}
	const char *pairs[][2] = {
	    {"DISPLAY", s->display},
	    {"XDG_RUNTIME_DIR", s->runtime_dir},
	    {"DBUS_SESSION_BUS_ADDRESS", s->bus_address},
	    {"XDG_CURRENT_DESKTOP", "XFCE"},
	    {"XDG_SESSION_TYPE", "x11"},
	    {"GNOME_ACCESSIBILITY", "1"},
	};
	for (size_t i = 0; i < sizeof pairs / sizeof pairs[0]; i++) {
		if (session_env_set(s, &n, &cap, pairs[i][0], pairs[i][1]) < 0)
			goto oom;
		setenv(pairs[i][0], pairs[i][1], 1);
	}
	if (!getenv("LANG")) {
		session_env_set(s, &n, &cap, "LANG", "C.UTF-8");
		setenv("LANG", "C.UTF-8", 1);
	}
	if (s->o.home && session_env_set(s, &n, &cap, "HOME", s->o.home) < 0)
		goto oom;
	if (s->o.user && (session_env_set(s, &n, &cap, "USER", s->o.user) < 0 ||
			  session_env_set(s, &n, &cap, "LOGNAME", s->o.user) < 0))
		goto oom;

	/* The user's environment from the image (userenv.h): the session's
	 * processes only, never envd's own (no setenv). */
	for (const char *const *u = userenv_entries(); *u; u++) {
		const char *eq = strchr(*u, '=');
		char key[256];
		if (!eq || (size_t)(eq - *u) >= sizeof key)
			continue;
		memcpy(key, *u, (size_t)(eq - *u));
		key[eq - *u] = '\0';
		if (session_env_set(s, &n, &cap, key, eq + 1) < 0)
			goto oom;
	}

	FILE *f = fopen(s->o.env_file ? s->o.env_file : "/etc/cubicle/session.env", "r");
	if (f) {
		char line[1024];
		while (fgets(line, sizeof line, f)) {
			line[strcspn(line, "\r\n")] = 0;
			char *eq = strchr(line, '=');
			if (line[0] == '#' || !eq || eq == line)
				continue;
			*eq = 0;
			if (session_env_set(s, &n, &cap, line, eq + 1) < 0) {
				fclose(f);
				goto oom;
			}
			setenv(line, eq + 1, 1);
		}
		fclose(f);
	}
	return 0;
oom:
	return err_set(e, ERR_INTERNAL, "out of memory building the session environment");
}

/* ---- children --------------------------------------------------------- */

/*
 * Forks argv as the session user in its own process group. out_fd, when
 * >= 0, is the write end of a pipe the child keeps as fd 3 (for -displayfd
 * and --print-address); every other descriptor is closed.
 */
static pid_t session_spawn(struct session *s, char *const argv[], int out_fd)
{
	pid_t pid = fork();
	if (pid != 0)
		return pid;
	/* Child: only async-signal-safe calls until exec. */
	sigset_t none;
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
	for (int sig = 1; sig < NSIG; sig++)
		signal(sig, SIG_DFL);
	setsid();
	int devnull = open("/dev/null", O_RDWR);
	if (devnull >= 0) {
		dup2(devnull, 0);
		dup2(devnull, 1);
		if (!getenv("CUBICLE_SESSION_LOG"))
			dup2(devnull, 2);
	}
	/* The pipe end, if any, becomes fd 3 (what the argv names); the rest closes. */
	if (out_fd >= 0) {
		if (out_fd != 3 && dup2(out_fd, 3) < 0)
			_exit(126);
		fcntl(3, F_SETFD, 0);
	}
	close_range(out_fd >= 0 ? 4 : 3, ~0u, 0);
	if (s->o.uid != (uid_t)-1 && s->o.uid != geteuid()) {
		gid_t g = s->o.gid;
		if (setgroups(1, &g) < 0 || setgid(s->o.gid) < 0 || setuid(s->o.uid) < 0)
			_exit(126);
	}
	if (s->o.home && chdir(s->o.home) < 0 && chdir("/") < 0)
		_exit(126);
	execvpe(argv[0], argv, s->env);
	_exit(127);
}

/* Reads one line from fd within timeout_ms; returns its length or -1. */
static int session_read_line(int fd, char *buf, size_t len, int timeout_ms)
{
	size_t got = 0;
	double until = clock_now_us() / 1e3 + timeout_ms;
	while (got + 1 < len) {
		int left = (int)(until - clock_now_us() / 1e3);
		if (left <= 0)
			return -1;
		struct pollfd p = {fd, POLLIN, 0};
		if (poll(&p, 1, left) <= 0)
			continue;
		ssize_t n = read(fd, buf + got, len - 1 - got);
		if (n <= 0)
			return -1;
		got += (size_t)n;
		if (memchr(buf, '\n', got))
			break;
	}
	buf[got] = 0;
	buf[strcspn(buf, "\n")] = 0;
	return (int)strlen(buf);
}

/* Sets the fresh X server to the session's size (it started at the largest). */
static void session_size_screen(struct session *s)
{
	pthread_mutex_lock(&s->lock);
	int w = s->o.width, h = s->o.height;
	pthread_mutex_unlock(&s->lock);
	struct err e = {0};
	Display *dpy = XOpenDisplay(s->display);
	if (!dpy || randr_set_size(dpy, DefaultRootWindow(dpy), w, h, &e) < 0)
		fprintf(stderr, "envd: session: cannot make the screen %dx%d: %s\n", w, h,
			dpy ? e.message : "cannot open the display");
	if (dpy)
		XCloseDisplay(dpy);
}

static int session_start_child(struct session *s, int i, struct err *e)
{
	struct session_child *c = &s->child[i];
	char res[32];
	int pipefd[2] = {-1, -1};
	pid_t pid;
	switch (i) {
	case CHILD_XVFB: {
		/* A crashed server leaves its lock and socket behind. */
		char path[64];
		snprintf(path, sizeof path, "/tmp/.X%d-lock", s->o.display);
		unlink(path);
		snprintf(path, sizeof path, "/tmp/.X11-unix/X%d", s->o.display);
		unlink(path);
		mkdir("/tmp/.X11-unix", 01777);
		chmod("/tmp/.X11-unix", 01777);
		if (pipe2(pipefd, O_CLOEXEC) < 0)
			return err_set(e, ERR_INTERNAL, "pipe: %s", strerror(errno));
		pthread_mutex_lock(&s->lock);
		int w = s->o.width, h = s->o.height;
		pthread_mutex_unlock(&s->lock);
		snprintf(res, sizeof res, "%dx%dx24", w > SESSION_MAX_W ? w : SESSION_MAX_W,
			 h > SESSION_MAX_H ? h : SESSION_MAX_H);
		char *argv[] = {"Xvfb",	      s->display, "-screen",	"0",	res,
				"-nolisten",  "tcp",	  "-noreset",	"-dpi", "96",
				"+extension", "RANDR",	  "-displayfd", "3",	NULL};
		pid = session_spawn(s, argv, pipefd[1]);
		break;
	}
	case CHILD_DBUS: {
		unlink(s->bus_address + strlen("unix:path="));
		if (pipe2(pipefd, O_CLOEXEC) < 0)
			return err_set(e, ERR_INTERNAL, "pipe: %s", strerror(errno));
		char addr[160];
		snprintf(addr, sizeof addr, "--address=%s", s->bus_address);
		char *argv[] = {"dbus-daemon", "--session",	    "--nofork", "--nopidfile",
				addr,	       "--print-address=3", NULL};
		pid = session_spawn(s, argv, pipefd[1]);
		break;
	}
	case CHILD_A11Y: {
		char *argv[] = {"/usr/libexec/at-spi-bus-launcher", "--launch-immediately", NULL};
		pid = session_spawn(s, argv, -1);
		break;
	}
	default: {
		char *argv[] = {"xfce4-session", NULL};
		pid = session_spawn(s, argv, -1);
		break;
	}
	}
	if (pid < 0) {
		if (pipefd[0] >= 0) {
			close(pipefd[0]);
			close(pipefd[1]);
		}
		return err_set(e, ERR_INTERNAL, "cannot start %s: %s", c->name, strerror(errno));
	}
	c->pid = pid;
	c->pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
	c->last_start_ms = clock_now_us() / 1e3;
	if (pipefd[0] >= 0) {
		close(pipefd[1]);
		char line[256];
		int n = session_read_line(pipefd[0], line, sizeof line, 10000);
		close(pipefd[0]);
		if (n <= 0)
			return err_set(e, ERR_UNAVAILABLE, "%s did not start (no answer in 10 s)",
				       c->name);
	}
	if (i == CHILD_XVFB)
		session_size_screen(s);
	return 0;
}

/* SIGTERM to the child's group, SIGKILL after 2 s; reaps it. */
static void session_kill_child(struct session_child *c)
{
	if (c->pid <= 0)
		return;
	kill(-c->pid, SIGTERM);
	kill(c->pid, SIGTERM);
	struct pollfd p = {c->pidfd, POLLIN, 0};
	if (c->pidfd < 0 || poll(&p, 1, 2000) <= 0) {
		kill(-c->pid, SIGKILL);
		kill(c->pid, SIGKILL);
	}
	waitpid(c->pid, NULL, 0);
	kill(-c->pid, SIGKILL); /* anything of its group that outlived it */
	if (c->pidfd >= 0)
		close(c->pidfd);
	c->pid = 0;
	c->pidfd = -1;
}

/* ---- readiness -------------------------------------------------------- */

static bool session_class_is(Display *dpy, Window w, const char *a, const char *b)
{
	XClassHint ch = {0};
	if (!XGetClassHint(dpy, w, &ch))
		return false;
	bool hit =
	    (ch.res_class && (strcmp(ch.res_class, a) == 0 || strcmp(ch.res_class, b) == 0)) ||
	    (ch.res_name && (strcmp(ch.res_name, a) == 0 || strcmp(ch.res_name, b) == 0));
	XFree(ch.res_name);
	XFree(ch.res_class);
	return hit;
}

static int session_ignore_x_error(Display *dpy, XErrorEvent *ev)
{
	(void)dpy;
	(void)ev;
	return 0;
}

/* The X server went away under the readiness check: keep envd alive (Xlib's
 * default is exit()); the pidfd of Xvfb tells the thread to restart it. */
static void session_on_io_exit(Display *dpy, void *user)
{
	(void)dpy;
	*(bool *)user = true;
}

/*
 * The panel and the desktop window are mapped: both are in the window
 * manager's _NET_CLIENT_LIST (so xfwm4 is up and manages them) and viewable.
 */
static bool session_desktop_mapped(Display *dpy)
{
	bool panel = false, desktop = false;
	Atom list = XInternAtom(dpy, "_NET_CLIENT_LIST", False), type;
	int format;
	unsigned long n = 0, after;
	unsigned char *data = NULL;
	if (XGetWindowProperty(dpy, DefaultRootWindow(dpy), list, 0, 4096, False, XA_WINDOW, &type,
			       &format, &n, &after, &data) != Success ||
	    !data || format != 32) {
		if (data)
			XFree(data);
		return false;
	}
	const Window *ids = (const Window *)data;
	for (unsigned long i = 0; i < n && !(panel && desktop); i++) {
		XWindowAttributes wa;
		if (!XGetWindowAttributes(dpy, ids[i], &wa) || wa.map_state != IsViewable)
			continue;
		panel = panel || session_class_is(dpy, ids[i], "Xfce4-panel", "xfce4-panel");
		desktop = desktop || session_class_is(dpy, ids[i], "Xfdesktop", "xfdesktop");
	}
	XFree(data);
	return panel && desktop;
}

/* ---- the supervisor thread -------------------------------------------- */

static void session_set_ready(struct session *s, bool ready)
{
	pthread_mutex_lock(&s->lock);
	if (ready && !s->ready) {
		double now = clock_now_us() / 1e3;
		if (s->was_ready) {
			fprintf(stderr, "envd: session: desktop ready again after %.0f ms\n",
				now - s->unready_since_ms);
		} else {
			s->ready_ms = now - s->start_ms;
			fprintf(stderr, "envd: session: desktop ready in %.0f ms\n", s->ready_ms);
		}
		s->was_ready = true;
	} else if (!ready && s->ready) {
		s->unready_since_ms = clock_now_us() / 1e3;
	}
	s->ready = ready;
	pthread_mutex_unlock(&s->lock);
}

/* Restarts child i and every child after it. */
static void session_restart_from(struct session *s, int first)
{
	session_set_ready(s, false);
	for (int i = CHILD_COUNT - 1; i >= first; i--)
		session_kill_child(&s->child[i]);
	pthread_mutex_lock(&s->lock);
	s->start_ms = clock_now_us() / 1e3;
	s->was_ready = false;
	pthread_mutex_unlock(&s->lock);
	for (int i = first; i < CHILD_COUNT; i++) {
		struct err e = {0};
		if (session_start_child(s, i, &e) < 0) {
			fprintf(stderr, "envd: session: %s\n", e.message);
			break;
		}
	}
}

static void *session_main(void *arg)
{
	struct session *s = arg;
	Display *dpy = NULL;
	bool dpy_dead = false;
	Atom client_list = None;
	for (;;) {
		struct pollfd p[CHILD_COUNT + 2];
		int idx[CHILD_COUNT + 2];
		int np = 0;
		p[np].fd = s->wake[0];
		p[np].events = POLLIN;
		idx[np++] = -1;
		for (int i = 0; i < CHILD_COUNT; i++) {
			if (s->child[i].pidfd >= 0) {
				p[np].fd = s->child[i].pidfd;
				p[np].events = POLLIN;
				idx[np++] = i;
			}
		}
		/* The X connection: its events say when to look again. */
		if (dpy && !dpy_dead) {
			p[np].fd = ConnectionNumber(dpy);
			p[np].events = POLLIN;
			idx[np++] = CHILD_COUNT;
		}
		pthread_mutex_lock(&s->lock);
		bool ready = s->ready;
		bool stuck =
		    !ready && s->was_ready &&
		    clock_now_us() / 1e3 - s->unready_since_ms > SESSION_UNREADY_RESTART_MS;
		pthread_mutex_unlock(&s->lock);
		if (stuck) {
			fprintf(stderr,
				"envd: session: the desktop is still not usable after %d s; "
				"restarting %s\n",
				SESSION_UNREADY_RESTART_MS / 1000, s->child[CHILD_DESKTOP].name);
			session_restart_from(s, CHILD_DESKTOP);
			continue;
		}
		/* Queued events are not on the socket any more: look at them now. */
		int timeout = ready ? -1 : 25;
		if (dpy && !dpy_dead && XPending(dpy))
			timeout = 0;
		int rc = poll(p, (nfds_t)np, timeout);
		if (rc < 0 && errno != EINTR)
			break;
		if (p[0].revents)
			break; /* session_stop() */
		int died = CHILD_COUNT;
		for (int k = 1; k < np; k++) {
			if (p[k].revents && idx[k] < died)
				died = idx[k];
		}
		if (died < CHILD_COUNT) {
			struct session_child *c = &s->child[died];
			int st = 0;
			waitpid(c->pid, &st, WNOHANG);
			fprintf(stderr, "envd: session: %s (pid %d) %s %d; restarting\n", c->name,
				c->pid, WIFSIGNALED(st) ? "killed by signal" : "exited with",
				WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st));
			close(c->pidfd);
			c->pidfd = -1;
			c->pid = 0;
			/* Back off when it keeps dying right after starting. */
			if (clock_now_us() / 1e3 - c->last_start_ms < 5000)
				c->recent++;
			else
				c->recent = 0;
			if (c->recent > 2) {
				int ms = c->recent > 6 ? 5000 : 500 * c->recent;
				struct pollfd w = {s->wake[0], POLLIN, 0};
				if (poll(&w, 1, ms) > 0)
					break;
			}
			/* Everything hangs off the X server and the bus. */
			if (died <= CHILD_DBUS && dpy) {
				XCloseDisplay(dpy);
				dpy = NULL;
			}
			session_restart_from(s, died);
			continue;
		}
		if (dpy && dpy_dead) {
			XCloseDisplay(dpy);
			dpy = NULL;
		}
		if (!dpy) {
			dpy_dead = false;
			dpy = XOpenDisplay(s->display);
			if (dpy) {
				XSetIOErrorExitHandler(dpy, session_on_io_exit, &dpy_dead);
				XSelectInput(dpy, DefaultRootWindow(dpy), PropertyChangeMask);
				client_list = XInternAtom(dpy, "_NET_CLIENT_LIST", False);
			}
		}
		if (!dpy || dpy_dead)
			continue;
		/* Ready: look again only when the window manager's list changed. */
		bool look = !ready;
		while (!dpy_dead && XPending(dpy)) {
			XEvent ev;
			XNextEvent(dpy, &ev);
			look =
			    look || (ev.type == PropertyNotify && ev.xproperty.atom == client_list);
		}
		if (look && !dpy_dead)
			session_set_ready(s, session_desktop_mapped(dpy));
	}
	if (dpy)
		XCloseDisplay(dpy);
	return NULL;
}

/* Frees what session_start made once its thread is gone (or never ran). */
static void session_free(struct session *s)
{
	if (s->wake[0] >= 0) {
		close(s->wake[0]);
		close(s->wake[1]);
	}
	for (char **p = s->env; p && *p; p++)
		free(*p);
	free(s->env);
	pthread_mutex_destroy(&s->lock);
	free(s);
}

struct session *session_start(const struct session_opts *o, struct err *e)
{
	struct session *s = calloc(1, sizeof *s);
	if (!s) {
		err_set(e, ERR_INTERNAL, "out of memory");
		return NULL;
	}
	s->o = *o;
	if (s->o.width <= 0 || s->o.height <= 0) {
		s->o.width = 1280;
		s->o.height = 800;
	}
	static const char *const names[] = {"Xvfb", "dbus-daemon", "at-spi-bus-launcher",
					    "xfce4-session"};
	for (int i = 0; i < CHILD_COUNT; i++) {
		s->child[i].name = names[i];
		s->child[i].pidfd = -1;
	}
	s->wake[0] = s->wake[1] = -1;
	pthread_mutex_init(&s->lock, NULL);
	uid_t uid = o->uid != (uid_t)-1 ? o->uid : geteuid();
	snprintf(s->display, sizeof s->display, ":%d", o->display);
	snprintf(s->runtime_dir, sizeof s->runtime_dir, "/run/user/%u", (unsigned)uid);
	snprintf(s->bus_address, sizeof s->bus_address, "unix:path=%s/bus", s->runtime_dir);
	mkdir("/run/user", 0755);
	if (mkdir(s->runtime_dir, 0700) < 0 && errno != EEXIST) {
		err_set(e, ERR_INTERNAL, "cannot create %s: %s", s->runtime_dir, strerror(errno));
		goto fail;
	}
	if (o->uid != (uid_t)-1 && chown(s->runtime_dir, o->uid, o->gid) < 0) {
		err_set(e, ERR_INTERNAL, "cannot give %s to uid %u: %s", s->runtime_dir,
			(unsigned)o->uid, strerror(errno));
		goto fail;
	}
	if (session_build_env(s, e) < 0)
		goto fail;
	if (pipe2(s->wake, O_CLOEXEC) < 0) {
		err_set(e, ERR_INTERNAL, "pipe: %s", strerror(errno));
		goto fail;
	}
	/* The readiness check queries windows that may vanish mid-query, and the
	 * screen is sized right after Xvfb starts: Xlib's default handler would
	 * exit envd on an X error. (desk_open installs its own trapping handler
	 * later, which does not exit either.) */
	XInitThreads();
	XSetErrorHandler(session_ignore_x_error);
	s->start_ms = clock_now_us() / 1e3;
	for (int i = 0; i < CHILD_COUNT; i++) {
		if (session_start_child(s, i, e) < 0) {
			for (int j = i; j >= 0; j--)
				session_kill_child(&s->child[j]);
			goto fail;
		}
	}
	if (pthread_create(&s->thread, NULL, session_main, s) != 0) {
		for (int j = CHILD_COUNT - 1; j >= 0; j--)
			session_kill_child(&s->child[j]);
		err_set(e, ERR_INTERNAL, "cannot start the session thread");
		goto fail;
	}
	return s;
fail:
	session_free(s);
	return NULL;
}

void session_set_screen_size(struct session *s, int width, int height)
{
	pthread_mutex_lock(&s->lock);
	s->o.width = width;
	s->o.height = height;
	pthread_mutex_unlock(&s->lock);
}

bool session_ready(struct session *s)
{
	pthread_mutex_lock(&s->lock);
	bool r = s->ready;
	pthread_mutex_unlock(&s->lock);
	return r;
}

double session_ready_ms(struct session *s)
{
	pthread_mutex_lock(&s->lock);
	double r = s->ready ? s->ready_ms : 0;
	pthread_mutex_unlock(&s->lock);
	return r;
}

/*
 * Asks every process of the session user to end (SIGTERM) and waits up to
 * timeout_ms for them to go: apps and daemons outside the session's process
 * groups (xfconfd is started by D-Bus) get to save their state, so a
 * stopped computer keeps its settings. Only for a dedicated session user:
 * never for root or envd's own user.
 */
static void session_terminate_user(uid_t uid, int timeout_ms)
{
	if (uid == (uid_t)-1 || uid == 0 || uid == geteuid())
		return;
	double until = clock_now_us() / 1e3 + timeout_ms;
	bool first = true;
	for (;;) {
		int left = 0;
		DIR *d = opendir("/proc");
		if (!d)
			return;
		struct dirent *de;
		while ((de = readdir(d))) {
			char *end;
			long pid = strtol(de->d_name, &end, 10);
			if (*end || pid <= 1)
				continue;
			char path[64];
			struct stat st;
			snprintf(path, sizeof path, "/proc/%ld", pid);
			if (stat(path, &st) < 0 || st.st_uid != uid)
				continue;
			/* A zombie has ended already (its parent reaps it later). */
			char stat_path[80], buf[256] = "";
			snprintf(stat_path, sizeof stat_path, "%s/stat", path);
			FILE *f = fopen(stat_path, "r");
			if (f) {
				if (!fgets(buf, sizeof buf, f))
					buf[0] = 0;
				fclose(f);
			}
			const char *paren = strrchr(buf, ')');
			if (paren && paren[1] == ' ' && paren[2] == 'Z')
				continue;
			left++;
			if (first)
				kill((pid_t)pid, SIGTERM);
		}
		closedir(d);
		first = false;
		if (left == 0 || clock_now_us() / 1e3 >= until)
			return;
		clock_sleep_ms(20);
	}
}

void session_stop(struct session *s)
{
	if (!s)
		return;
	if (write(s->wake[1], "x", 1) < 0) {
		/* The thread still exits when the pipe closes below. */
	}
	pthread_join(s->thread, NULL);
	session_terminate_user(s->o.uid, 2000);
	for (int i = CHILD_COUNT - 1; i >= 0; i--)
		session_kill_child(&s->child[i]);
	session_free(s);
}
