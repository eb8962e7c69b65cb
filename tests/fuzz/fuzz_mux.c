/*
 * libFuzzer harness for the link of a machine you bring (wire/mux.c): on
 * cubicled's side every byte of the link comes from a connected machine,
 * which is untrusted (docs/byo.md); on the machine's side, from whoever
 * answered its dial.
 *
 * Input: one byte of options, then the peer's bytes on the link.
 *   bit 0: cubicled's side (host) or the machine's;
 *   host: a local connection is waiting on the listener, so stream 1 is
 *   open before the peer's bytes arrive (its DATA, WINDOW and CLOSE are
 *   then legal); machine: OPENs are dialled to socket pairs.
 * Small window and frame limits make credit and size violations reachable.
 * Checked: mux_run ends once the link does (EOF after the input), never
 * crashes or leaks, and closes every stream it opened.
 */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "clock.h"
#include "fuzz.h"
#include "mux.h"

#define PEERS 64

static int peers[PEERS], npeers;

/* The machine's side dials: a socket pair whose far end the harness keeps
 * (and never reads, so a stream's output backs up as a slow app's would). */
static int dial(void *ctx, const char *target)
{
	(void)ctx;
	(void)target;
	int sv[2];
	if (npeers == PEERS ||
	    socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv) < 0)
		return -1;
	peers[npeers++] = sv[1];
	return sv[0];
}

struct run {
	struct mux *m;
	int rc;
	char why[256];
};

static void *run_main(void *arg)
{
	struct run *r = arg;
	r->rc = mux_run(r->m, r->why, sizeof r->why);
	return NULL;
}

/* cubicled's listener for local connections (an abstract UNIX address of
 * this process), made once. */
static int listener(struct sockaddr_un *a, socklen_t *alen)
{
	static int fd = -1;
	static struct sockaddr_un addr;
	static socklen_t len;
	if (fd < 0) {
		addr.sun_family = AF_UNIX;
		int n = snprintf(addr.sun_path + 1, sizeof addr.sun_path - 1, "cubicle-fuzz-mux-%d",
				 (int)getpid());
		len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n);
		fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
		CHECK(fd >= 0 && bind(fd, (struct sockaddr *)&addr, len) == 0 &&
		      listen(fd, 8) == 0);
	}
	*a = addr;
	*alen = len;
	return fd;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct fz f = {data, size};
	bool host = fz_u8(&f) & 1;
	int link[2];
	CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, link) == 0);
	struct mux_opts o = {
	    .link = link[0],
	    .host = host,
	    .dial = dial,
	    .window = 1024,
	    .max_frame = 2048,
	    .max_streams = 8,
	    .ping_ms = 1000,
	    .dead_ms = 5000,
	    .out_high = 16384,
	};
	int client = -1;
	if (host) {
		struct sockaddr_un a;
		socklen_t alen;
		o.listeners[0] = (struct mux_listener){.fd = listener(&a, &alen), .target = "http"};
		o.nlisteners = 1;
		client = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
		CHECK(client >= 0 && connect(client, (struct sockaddr *)&a, alen) == 0);
	}
	struct run r = {.m = mux_new(&o)};
	CHECK(r.m);
	pthread_t th;
	CHECK(pthread_create(&th, NULL, run_main, &r) == 0);
	/* cubicled opens stream 1 for the waiting connection first. */
	for (int64_t until = clock_now_ms() + 2000; host && mux_streams(r.m) < 1;) {
		CHECK(clock_now_ms() < until);
		poll(NULL, 0, 1);
	}
	/* The peer's bytes, then its end of the link; what mux sends back is
	 * read meanwhile so the link never backs up. */
	size_t off = 0;
	bool shut = false;
	for (;;) {
		struct pollfd p = {.fd = link[1], .events = POLLIN | (shut ? 0 : POLLOUT)};
		/* A link mux stops serving is a hang libFuzzer's -timeout reports;
		 * a deadline of the harness's own failed a smoke whose process got
		 * no CPU for 10 s (niced beside a loaded CI), not mux. */
		int n = poll(&p, 1, shut ? 5 : 1000);
		if (n < 0 && errno == EINTR) /* libFuzzer's -timeout timer */
			continue;
		CHECK(n >= 0);
		if (p.revents & POLLOUT && !shut) {
			ssize_t w = off < f.n ? send(link[1], f.p + off, f.n - off,
						     MSG_DONTWAIT | MSG_NOSIGNAL)
					      : 0;
			if (w > 0)
				off += (size_t)w;
			if (off == f.n || (w < 0 && errno != EAGAIN)) {
				shutdown(link[1], SHUT_WR);
				shut = true;
			}
		}
		if (p.revents & POLLIN) {
			char sink[4096];
			(void)!recv(link[1], sink, sizeof sink, MSG_DONTWAIT);
		}
		/* mux never closes the link itself: it ends when it sees ours
		 * end (or a violation before that), and its thread exits. */
		if (shut && pthread_tryjoin_np(th, NULL) == 0)
			break;
	}
	CHECK(r.rc == -1 || r.rc == 1);
	CHECK(r.rc == 1 || r.why[0]); /* an end that is not a BYE says why */
	CHECK(mux_streams(r.m) == 0);
	mux_free(r.m);
	close(link[0]);
	close(link[1]);
	if (client >= 0)
		close(client);
	for (int i = 0; i < npeers; i++)
		close(peers[i]);
	npeers = 0;
	return 0;
}
