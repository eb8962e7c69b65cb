/*
 * vnc: the RFB server's life: its UNIX socket, one libvncserver screen, and
 * the viewers that come and go. The screen is captured in vnc-capture.c and
 * viewers' input lands in vnc-input.c.
 *
 * Threads. libvncserver's threaded mode gives each viewer an input thread and
 * an output thread (rfbStartOnHoldClient): a slow viewer never holds up
 * another, and encoding runs in parallel. Its listener (rfbRunEventLoop) only
 * knows TCP, so envd accepts on its own UNIX socket (vnc_accept_main) and
 * hands each connection to rfbNewClient; nothing in libvncserver ever opens a
 * socket (rfbInitServer is never called). libvncserver never joins the input
 * thread of a viewer that leaves: the gone hook runs on that thread, records
 * it, and envd joins it later (vnc_reap). To stop, envd shuts down every
 * viewer's socket (through a duplicate of its fd that envd keeps, so it can
 * never hit a recycled descriptor), which ends each viewer's threads at
 * once, even one blocked writing to a viewer that stopped reading.
 *
 * No WebSocket sniffing. libvncserver 0.9.14 peeks at every new connection
 * for 100 ms in case it starts with an HTTP WebSocket handshake, but an RFB
 * client says nothing until the server greets it, so every viewer would wait
 * the full 100 ms for its first byte. The check is the library's exported
 * webSocketsCheck(), called through the PLT; envd defines its own, which
 * answers "plain RFB" at once, and since the executable's definition comes
 * first in symbol lookup the library's call binds to it. vnc_start checks that
 * it did. WebSockets end at the host's gateway, so nothing is lost.
 */
#include "vnc.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "envd.h"
#include "vnc-internal.h"

/* libvncserver select()s on each viewer's fd (and a pipe it makes per
 * viewer), so descriptors must stay below FD_SETSIZE: keep a margin. */
#define VNC_MAX_FD (FD_SETSIZE - 64)

/* How long libvncserver waits before sending an update, to gather changes;
 * the capture thread already batches damage, so keep it short. */
#define VNC_DEFER_MS 2

/* How long a viewer on a virtio port may make no progress (see vnc_start). */
#define VNC_PORT_WAIT_MS 5000

/* How long the gateway's preamble may take to arrive (see vnc_preamble). */
#define VNC_PREAMBLE_MS 5000

/* How long vnc_stop waits for the viewers' threads to end. */
#define VNC_STOP_WAIT_S 10

/* Overrides libvncserver's 100 ms WebSocket sniffing (see the top). */
rfbBool webSocketsCheck(rfbClientPtr cl)
{
	(void)cl;
	return TRUE;
}

/* libvncserver chats on stderr about every connection; only errors pass. */
static void vnc_log_quiet(const char *fmt, ...)
{
	(void)fmt;
}

__attribute__((format(printf, 1, 2))) static void vnc_log_error(const char *fmt, ...)
{
	char buf[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(buf, sizeof buf, fmt, ap);
	va_end(ap);
	/* Said for every connection: TCP_NODELAY does not apply to UNIX sockets. */
	if (strstr(buf, "TCP_NODELAY"))
		return;
	size_t n = strlen(buf);
	while (n > 0 && buf[n - 1] == '\n')
		buf[--n] = 0;
	fprintf(stderr, "envd: vnc: %s\n", buf);
}

/* ---- viewers ------------------------------------------------------------ */

/* Remembers a thread to join (lock held). If memory runs out the thread is
 * detached instead, which frees it as well. */
static void vnc_finished_push(struct vnc *v, pthread_t t)
{
	if (v->nfinished == v->finished_cap) {
		size_t cap = v->finished_cap ? v->finished_cap * 2 : 8;
		pthread_t *n = realloc(v->finished, cap * sizeof *n);
		if (!n) {
			pthread_detach(t);
			return;
		}
		v->finished = n;
		v->finished_cap = cap;
	}
	v->finished[v->nfinished++] = t;
}

/* Joins the input threads of viewers that left (each ends right after its
 * gone hook, so this waits for a moment at most). */
static void vnc_reap(struct vnc *v)
{
	pthread_mutex_lock(&v->lock);
	pthread_t *list = v->finished;
	size_t n = v->nfinished;
	v->finished = NULL;
	v->nfinished = v->finished_cap = 0;
	pthread_mutex_unlock(&v->lock);
	for (size_t i = 0; i < n; i++)
		pthread_join(list[i], NULL);
	free(list);
}

static void vnc_on_client_gone(rfbClientPtr cl)
{
	struct vnc_viewer *vw = cl->clientData;
	struct vnc *v = vw->v;
	vnc_input_release(v, vw);
	cl->clientData = NULL;

	pthread_mutex_lock(&v->lock);
	for (struct vnc_viewer **p = &v->viewer_list; *p; p = &(*p)->next)
		if (*p == vw) {
			*p = vw->next;
			break;
		}
	if (vw->fd >= 0)
		close(vw->fd);
	v->viewers--;
	/* This runs on the viewer's input thread, which ends right after. */
	if (!(v->accept_started && pthread_equal(pthread_self(), v->accept_thread)))
		vnc_finished_push(v, pthread_self());
	pthread_cond_broadcast(&v->cond);
	pthread_mutex_unlock(&v->lock);
	free(vw);
}

/*
 * The gateway's line in front of every connection, before RFB starts:
 * "cubicle-viewer view\n" or "cubicle-viewer control\n". It is read a byte
 * at a time (nothing past the line is consumed; an RFB client says nothing
 * before the server's greeting anyway), within VNC_PREAMBLE_MS. Returns 1
 * for view, 0 for control, -1 for anything else: the connection is closed
 * unheard, so a connection that does not say its mode gets nothing.
 */
static int vnc_preamble(int fd)
{
	char line[64];
	size_t n = 0;
	int64_t t0 = clock_now_ms();
	for (;;) {
		int64_t left = VNC_PREAMBLE_MS - (clock_now_ms() - t0);
		if (left <= 0)
			return -1;
		struct pollfd p = {fd, POLLIN, 0};
		int r = poll(&p, 1, (int)left);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0 || !(p.revents & POLLIN))
			return -1;
		char c;
		ssize_t got = read(fd, &c, 1);
		if (got < 0 && (errno == EINTR || errno == EAGAIN))
			continue;
		if (got != 1)
			return -1;
		if (c == '\n')
			break;
		if (n == sizeof line - 1)
			return -1;
		line[n++] = c;
	}
	line[n] = 0;
	if (strcmp(line, "cubicle-viewer view") == 0)
		return 1;
	if (strcmp(line, "cubicle-viewer control") == 0)
		return 0;
	return -1;
}

/* Runs inside rfbNewClient, on the accept thread. */
static enum rfbNewClientAction vnc_on_new_client(rfbClientPtr cl)
{
	struct vnc *v = cl->screen->screenData;
	struct vnc_viewer *vw = calloc(1, sizeof *vw);
	if (!vw)
		return RFB_CLIENT_REFUSE;
	vw->v = v;
	vw->fd = v->accepting_dup;
	v->accepting_dup = -1;
	/* libvncserver drops a view-only client's key, pointer and cut text;
	 * vnc-input.c checks it again and never sends such a client the
	 * clipboard. */
	cl->viewOnly = v->accepting_view ? TRUE : FALSE;
	cl->clientData = vw;
	cl->clientGoneHook = vnc_on_client_gone;
	pthread_mutex_lock(&v->lock);
	vw->next = v->viewer_list;
	v->viewer_list = vw;
	pthread_mutex_unlock(&v->lock);
	return RFB_CLIENT_ACCEPT;
}

/* Hands one accepted connection to libvncserver (accept thread). */
static void vnc_accept_one(struct vnc *v, int fd)
{
	int view = vnc_preamble(fd);
	if (view < 0) {
		fprintf(stderr, "envd: vnc: refusing a viewer: no cubicle-viewer line "
				"(view or control) came first\n");
		close(fd);
		return;
	}
	v->accepting_view = view == 1;
	if (fd >= VNC_MAX_FD) {
		fprintf(stderr,
			"envd: vnc: refusing a viewer: descriptor %d is too high for "
			"libvncserver's select()\n",
			fd);
		close(fd);
		return;
	}
	pthread_mutex_lock(&v->lock);
	bool stopping = v->stopping;
	if (!stopping)
		v->viewers++;
	pthread_mutex_unlock(&v->lock);
	if (stopping) {
		close(fd);
		return;
	}
	/* The first frame must show the screen as it is now. */
	vnc_capture_refresh(v);
	v->accepting_dup = fcntl(fd, F_DUPFD_CLOEXEC, 0);
	rfbClientPtr cl = rfbNewClient(v->screen, fd);
	if (!cl) {
		/* Failed before the new-client hook: nothing else counts it. */
		if (v->accepting_dup >= 0)
			close(v->accepting_dup);
		v->accepting_dup = -1;
		pthread_mutex_lock(&v->lock);
		v->viewers--;
		pthread_cond_broadcast(&v->cond);
		pthread_mutex_unlock(&v->lock);
		return;
	}
	rfbStartOnHoldClient(cl); /* starts its input and output threads */
}

static void *vnc_accept_main(void *arg)
{
	struct vnc *v = arg;
	bool told = false;
	for (;;) {
		struct pollfd p[2] = {{v->listen_fd, POLLIN, 0}, {v->accept_wake[0], POLLIN, 0}};
		if (poll(p, 2, -1) < 0) {
			if (errno == EINTR)
				continue;
			fprintf(stderr, "envd: vnc: poll: %s; no more viewers accepted\n",
				strerror(errno));
			break;
		}
		if (p[1].revents)
			break;
		if (!(p[0].revents & POLLIN))
			continue;
		int fd = accept4(v->listen_fd, NULL, NULL, SOCK_CLOEXEC);
		if (fd < 0) {
			if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS ||
			    errno == ENOMEM) {
				if (!told)
					fprintf(stderr, "envd: vnc: cannot accept a viewer: %s\n",
						strerror(errno));
				told = true;
				/* Let descriptors free up instead of spinning. */
				struct pollfd w = {v->accept_wake[0], POLLIN, 0};
				poll(&w, 1, 100);
			}
			continue;
		}
		told = false;
		vnc_reap(v);
		vnc_accept_one(v, fd);
	}
	return NULL;
}

/*
 * A microVM's viewer comes through a virtio-serial port: the host end is a
 * UNIX socket of QEMU's that the gateway connects to. The port carries one
 * viewer at a time and has no accept: poll says POLLHUP while no host end is
 * connected. envd opens the port, waits for a host end, gives the port to
 * libvncserver as the viewer's descriptor (the greeting goes out at once),
 * and when that viewer ends (EOF: the host end closed) opens it again; the
 * open drops what the last viewer left unread.
 */
static bool vnc_port_wait(struct vnc *v, int ms)
{
	struct pollfd w = {v->accept_wake[0], POLLIN, 0};
	return poll(&w, 1, ms) > 0; /* true: stop */
}

static void *vnc_port_main(void *arg)
{
	struct vnc *v = arg;
	bool told = false;
	for (;;) {
		pthread_mutex_lock(&v->lock);
		int viewers = v->viewers;
		pthread_mutex_unlock(&v->lock);
		if (viewers > 0) {
			if (vnc_port_wait(v, 100))
				break;
			continue;
		}
		vnc_reap(v);
		int fd = open(v->port, O_RDWR | O_CLOEXEC);
		if (fd < 0) {
			if (!told)
				fprintf(stderr, "envd: vnc: cannot open %s: %s\n", v->port,
					strerror(errno));
			told = true;
			if (vnc_port_wait(v, 1000))
				break;
			continue;
		}
		told = false;
		bool stop = false;
		for (;;) {
			struct pollfd p = {fd, POLLOUT, 0};
			if (poll(&p, 1, 0) == 1 && (p.revents & POLLOUT) && !(p.revents & POLLHUP))
				break;
			if ((stop = vnc_port_wait(v, 100)))
				break;
		}
		if (stop) {
			close(fd);
			break;
		}
		vnc_accept_one(v, fd);
	}
	return NULL;
}

/* ---- start and stop ----------------------------------------------------- */

static int vnc_listen(struct vnc *v, const char *path, struct err *e)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	size_t len = strlen(path);
	if (len >= sizeof sa.sun_path)
		return err_param(e, "vnc", "--vnc: the socket path is longer than %zu bytes",
				 sizeof sa.sun_path - 1);
	memcpy(sa.sun_path, path, len + 1);
	struct stat st;
	if (lstat(path, &st) == 0) {
		if (!S_ISSOCK(st.st_mode))
			return err_param(e, "vnc", "--vnc: %s exists and is not a socket", path);
		unlink(path); /* left by an envd that did not exit cleanly */
	}
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return err_set(e, ERR_INTERNAL, "--vnc: socket: %s", strerror(errno));
	/* Unauthenticated RFB: only envd's user may connect (the host's gateway
	 * checks tokens before it does). umask is process-wide, but envd starts
	 * the server before any thread that creates files. */
	mode_t old = umask(0177);
	int rc = bind(fd, (struct sockaddr *)&sa, sizeof sa);
	int bind_errno = errno;
	umask(old);
	if (rc < 0 || listen(fd, 16) < 0) {
		int err = rc < 0 ? bind_errno : errno;
		close(fd);
		return err_set(e, ERR_INTERNAL, "--vnc: cannot listen on %s: %s", path,
			       strerror(err));
	}
	v->listen_fd = fd;
	if (!(v->path = strdup(path)))
		return err_set(e, ERR_INTERNAL, "out of memory");
	return 0;
}

static int vnc_screen_init(struct vnc *v, struct err *e)
{
	/* calloc: pages of a larger screen than today's are never touched. */
	size_t bytes = (size_t)v->fb_w * (size_t)v->fb_h * 4;
	if (!(v->fb = calloc(1, bytes)))
		return err_set(e, ERR_INTERNAL, "out of memory for a %dx%d framebuffer", v->fb_w,
			       v->fb_h);
	int argc = 1;
	char *argv[] = {(char *)"envd", NULL};
	rfbScreenInfoPtr s = rfbGetScreen(&argc, argv, v->width, v->height, 8, 3, 4);
	if (!s)
		return err_set(e, ERR_INTERNAL, "libvncserver could not make a screen");
	v->screen = s;
	s->screenData = v;
	s->frameBuffer = v->fb;
	/* The framebuffer holds pixels as X reads them: 0x00RRGGBB words. */
	s->serverFormat.bigEndian = rfbEndianTest ? FALSE : TRUE;
	s->serverFormat.redShift = 16;
	s->serverFormat.greenShift = 8;
	s->serverFormat.blueShift = 0;
	s->desktopName = "cubicle";
	/* Several viewers: a ClientInit asking for exclusive access is ignored. */
	s->alwaysShared = TRUE;
	s->neverShared = FALSE;
	/* No listener of libvncserver's own, ever (rfbInitServer is not called
	 * either): connections come from envd's UNIX socket only. */
	s->autoPort = FALSE;
	s->port = 0;
	s->ipv6port = 0;
	s->httpPort = 0;
	s->http6Port = 0;
	s->httpDir = NULL;
	s->deferUpdateTime = VNC_DEFER_MS;
	s->deferPtrUpdateTime = 0; /* pointer motion goes in at once */
	s->permitFileTransfer = FALSE;
	/* Per-viewer threads, started by rfbStartOnHoldClient. */
	s->backgroundLoop = TRUE;
	s->newClientHook = vnc_on_new_client;
	s->kbdAddEvent = vnc_input_key;
	s->ptrAddEvent = vnc_input_pointer;
	s->setXCutText = vnc_input_cut_text;
	s->setXCutTextUTF8 = vnc_input_cut_text_utf8;
	return 0;
}

struct vnc *vnc_start(struct envd *env, const char *addr, struct err *e)
{
	bool port = addr && strncmp(addr, "port:", 5) == 0 && addr[5] == '/';
	if (!addr || (!port && (strncmp(addr, "unix:", 5) != 0 || !addr[5]))) {
		err_param(e, "vnc", "--vnc takes unix:PATH or port:/dev/vportNpM, not '%s'",
			  addr ? addr : "");
		return NULL;
	}
	if (!env->display || !env->desk || !env->clipboard) {
		err_set(e, ERR_CONFLICT, "the RFB server needs the X display and its clipboard");
		return NULL;
	}
	struct vnc *v = calloc(1, sizeof *v);
	if (!v) {
		err_set(e, ERR_INTERNAL, "out of memory");
		return NULL;
	}
	v->env = env;
	v->listen_fd = v->accepting_dup = -1;
	v->accept_wake[0] = v->accept_wake[1] = v->x_wake[0] = v->x_wake[1] = -1;
	v->fb_stale = true; /* read in full when the first viewer comes */
	pthread_mutex_init(&v->lock, NULL);
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&v->cond, &ca);
	pthread_condattr_destroy(&ca);
	pthread_mutex_init(&v->input_lock, NULL);

	rfbLog = vnc_log_quiet;
	rfbErr = vnc_log_error;

	if (pipe2(v->accept_wake, O_CLOEXEC | O_NONBLOCK) < 0) {
		err_set(e, ERR_INTERNAL, "pipe: %s", strerror(errno));
		goto fail;
	}
	if (port && !(v->port = strdup(addr + 5))) {
		err_set(e, ERR_INTERNAL, "out of memory");
		goto fail;
	}
	if (vnc_capture_open(v, e) < 0 || vnc_screen_init(v, e) < 0 || vnc_input_open(v, e) < 0 ||
	    (!port && vnc_listen(v, addr + 5, e) < 0) || vnc_capture_start(v, e) < 0 ||
	    vnc_clip_start(v, e) < 0)
		goto fail;
	/* A port's writes block (EAGAIN, as libvncserver makes fds non-blocking)
	 * once its host end is gone, and nothing like shutdown() ends them:
	 * give up on such a viewer after 5 s (libvncserver's default is 20),
	 * so the next one is not kept waiting longer. */
	if (port) {
		v->screen->maxClientWait = VNC_PORT_WAIT_MS;
		rfbMaxClientWait = VNC_PORT_WAIT_MS; /* what rfbWriteExact reads */
	}
	int rc = pthread_create(&v->accept_thread, NULL, port ? vnc_port_main : vnc_accept_main, v);
	if (rc != 0) {
		err_set(e, ERR_INTERNAL, "cannot start a thread: %s", strerror(rc));
		goto fail;
	}
	v->accept_started = true;

	if (dlsym(RTLD_DEFAULT, "webSocketsCheck") != (void *)webSocketsCheck)
		fprintf(stderr, "envd: vnc: libvncserver's WebSocket check is not overridden: "
				"every viewer waits 100 ms before the greeting\n");
	return v;
fail:
	vnc_stop(v);
	return NULL;
}

/* Waits for every viewer's gone hook; false after VNC_STOP_WAIT_S. */
static bool vnc_wait_viewers_gone(struct vnc *v)
{
	struct timespec deadline;
	clock_gettime(CLOCK_MONOTONIC, &deadline);
	deadline.tv_sec += VNC_STOP_WAIT_S;
	pthread_mutex_lock(&v->lock);
	while (v->viewers > 0)
		if (pthread_cond_timedwait(&v->cond, &v->lock, &deadline) == ETIMEDOUT)
			break;
	bool gone = v->viewers == 0;
	pthread_mutex_unlock(&v->lock);
	return gone;
}

void vnc_stop(struct vnc *v)
{
	if (!v)
		return;
	pthread_mutex_lock(&v->lock);
	v->stopping = true;
	pthread_mutex_unlock(&v->lock);
	if (v->accept_started) {
		(void)!write(v->accept_wake[1], "q", 1);
		pthread_join(v->accept_thread, NULL);
	}
	if (v->listen_fd >= 0)
		close(v->listen_fd);
	if (v->path)
		unlink(v->path);

	/* These two send to the viewers: stop them before the viewers go. */
	vnc_clip_stop(v);
	vnc_capture_stop(v);

	/* EOF for every viewer's input thread, EPIPE for its output thread. */
	pthread_mutex_lock(&v->lock);
	for (struct vnc_viewer *vw = v->viewer_list; vw; vw = vw->next)
		if (vw->fd >= 0)
			shutdown(vw->fd, SHUT_RDWR);
	pthread_mutex_unlock(&v->lock);
	bool gone = vnc_wait_viewers_gone(v);
	vnc_reap(v);
	if (!gone) {
		/* Their threads may still use the screen: leave it allocated. */
		fprintf(stderr, "envd: vnc: viewers did not go within %d s; not freeing them\n",
			VNC_STOP_WAIT_S);
		return;
	}

	if (v->screen) {
		/* The cursors are the capture's (freed below), not libvncserver's. */
		v->screen->cursor = NULL;
		rfbScreenCleanup(v->screen);
	}
	vnc_capture_close(v);
	vnc_input_close(v);
	for (int i = 0; i < 2; i++)
		if (v->accept_wake[i] >= 0)
			close(v->accept_wake[i]);
	pthread_mutex_destroy(&v->input_lock);
	pthread_cond_destroy(&v->cond);
	pthread_mutex_destroy(&v->lock);
	free(v->finished);
	free(v->fb);
	free(v->path);
	free(v->port);
	free(v);
}
