/*
 * mux: the protocol of mux.h, one poll loop per link.
 */

#include "mux.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "clock.h"

#define MUX_CHUNK      16384	  /* read from a stream per turn */
#define MUX_CREDIT_MAX (1u << 30) /* a peer's credit past this is a violation */

struct mux_buf {
	unsigned char *p;
	size_t off, len, cap; /* bytes [off, off+len) wait */
};

struct mux_stream {
	struct mux_stream *next;
	uint32_t id;
	int fd;
	size_t credit;	   /* bytes we may still send the peer */
	size_t recv_left;  /* bytes the peer may still send us */
	size_t grant;	   /* bytes passed on locally, not yet credited back */
	struct mux_buf in; /* from the peer, for the local end */
	bool closing;	   /* the peer closed: flush `in`, then end */
};

struct mux {
	struct mux_opts o;
	struct mux_buf out, rx;
	struct mux_stream *streams;
	int nstreams;
	uint32_t next_id;  /* host: the next stream id */
	uint32_t max_seen; /* machine: the highest id opened */
	int wake[2];
	pthread_mutex_t lock; /* stop, bye */
	bool stop, bye;
	char bye_reason[256];
	int64_t last_rx, last_ping;
};

static int mux_buf_add(struct mux_buf *b, const void *p, size_t n)
{
	if (!n) /* an empty DATA frame: nothing to keep (and b->p may be NULL) */
		return 0;
	if (b->off && b->off + b->len + n > b->cap) {
		memmove(b->p, b->p + b->off, b->len);
		b->off = 0;
	}
	if (b->len + n > b->cap) {
		size_t cap = b->cap ? b->cap : 4096;
		while (cap < b->len + n)
			cap *= 2;
		unsigned char *q = realloc(b->p, cap);
		if (!q)
			return -1;
		b->p = q;
		b->cap = cap;
	}
	memcpy(b->p + b->off + b->len, p, n);
	b->len += n;
	return 0;
}

static void mux_buf_drop(struct mux_buf *b, size_t n)
{
	b->off += n;
	b->len -= n;
	if (!b->len)
		b->off = 0;
}

static void mux_put32(unsigned char *p, uint32_t v)
{
	p[0] = (unsigned char)(v >> 24);
	p[1] = (unsigned char)(v >> 16);
	p[2] = (unsigned char)(v >> 8);
	p[3] = (unsigned char)v;
}

static uint32_t mux_get32(const unsigned char *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static int mux_frame(struct mux *m, enum mux_type type, uint32_t id, const void *p, size_t n)
{
	unsigned char h[MUX_HEADER];
	h[0] = (unsigned char)type;
	mux_put32(h + 1, id);
	mux_put32(h + 5, (uint32_t)n);
	if (mux_buf_add(&m->out, h, sizeof h) < 0 || (n && mux_buf_add(&m->out, p, n) < 0))
		return -1;
	return 0;
}

struct mux *mux_new(const struct mux_opts *o)
{
	struct mux *m = calloc(1, sizeof *m);
	if (!m)
		return NULL;
	m->o = *o;
	if (!m->o.window)
		m->o.window = 256 * 1024;
	if (!m->o.max_frame || m->o.max_frame > MUX_MAX_FRAME)
		m->o.max_frame = MUX_MAX_FRAME;
	if (!m->o.max_streams)
		m->o.max_streams = 64;
	if (!m->o.ping_ms)
		m->o.ping_ms = 1000;
	if (!m->o.dead_ms)
		m->o.dead_ms = 5000;
	if (!m->o.out_high)
		m->o.out_high = 1024 * 1024;
	m->next_id = 1;
	if (pipe2(m->wake, O_CLOEXEC | O_NONBLOCK) < 0) {
		free(m);
		return NULL;
	}
	pthread_mutex_init(&m->lock, NULL);
	return m;
}

int mux_send(struct mux *m, enum mux_type type, const void *p, size_t n)
{
	if (n > MUX_MAX_FRAME)
		return -1;
	return mux_frame(m, type, 0, p, n);
}

static void mux_wake(struct mux *m)
{
	char c = 1;
	ssize_t w = write(m->wake[1], &c, 1);
	(void)w;
}

void mux_bye(struct mux *m, const char *reason)
{
	pthread_mutex_lock(&m->lock);
	m->bye = true;
	snprintf(m->bye_reason, sizeof m->bye_reason, "%s", reason);
	pthread_mutex_unlock(&m->lock);
	mux_wake(m);
}

void mux_stop(struct mux *m)
{
	pthread_mutex_lock(&m->lock);
	m->stop = true;
	pthread_mutex_unlock(&m->lock);
	mux_wake(m);
}

int mux_streams(struct mux *m)
{
	return m->nstreams;
}

static struct mux_stream *mux_find(struct mux *m, uint32_t id)
{
	for (struct mux_stream *s = m->streams; s; s = s->next)
		if (s->id == id)
			return s;
	return NULL;
}

static struct mux_stream *mux_add(struct mux *m, uint32_t id, int fd)
{
	struct mux_stream *s = calloc(1, sizeof *s);
	if (!s)
		return NULL;
	s->id = id;
	s->fd = fd;
	s->credit = m->o.window;
	s->recv_left = m->o.window;
	s->next = m->streams;
	m->streams = s;
	m->nstreams++;
	return s;
}

static void mux_end(struct mux *m, struct mux_stream *s)
{
	for (struct mux_stream **pp = &m->streams; *pp; pp = &(*pp)->next)
		if (*pp == s) {
			*pp = s->next;
			break;
		}
	close(s->fd);
	free(s->in.p);
	free(s);
	m->nstreams--;
}

/* Whether id is one this side knows about, open or closed before. */
static bool mux_known(struct mux *m, uint32_t id)
{
	return m->o.host ? id > 0 && id < m->next_id : id > 0 && id <= m->max_seen;
}

static int mux_fail(char *why, size_t len, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int mux_fail(char *why, size_t len, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(why, len, fmt, ap);
	va_end(ap);
	return -1;
}

/* One frame from the peer: 0, 1 (BYE received), -1 (violation: why). */
static int mux_handle(struct mux *m, enum mux_type type, uint32_t id, const unsigned char *p,
		      size_t n, char *why, size_t len)
{
	struct mux_stream *s = id ? mux_find(m, id) : NULL;
	switch (type) {
	case MUX_HELLO:
	case MUX_BYE:
		if (m->o.host)
			return mux_fail(why, len, "the machine sent a %s frame",
					type == MUX_HELLO ? "HELLO" : "BYE");
		if (m->o.on_control)
			m->o.on_control(m->o.ctx, type, p, n);
		return type == MUX_BYE ? 1 : 0;
	case MUX_OPEN: {
		if (m->o.host)
			return mux_fail(why, len, "the machine tried to open stream %u", id);
		if (id <= m->max_seen || n == 0 || n > 15)
			return mux_fail(why, len, "a bad OPEN of stream %u", id);
		m->max_seen = id;
		char target[16];
		memcpy(target, p, n);
		target[n] = 0;
		int fd =
		    m->nstreams < m->o.max_streams && m->o.dial ? m->o.dial(m->o.ctx, target) : -1;
		if (fd < 0 || !mux_add(m, id, fd)) {
			if (fd >= 0)
				close(fd);
			return mux_frame(m, MUX_CLOSE, id, NULL, 0) < 0
				   ? mux_fail(why, len, "out of memory")
				   : 0;
		}
		return 0;
	}
	case MUX_DATA:
		if (!s) {
			if (mux_known(m, id))
				return 0; /* closed here while it was on its way */
			return mux_fail(why, len, "DATA for stream %u, which was never opened", id);
		}
		if (s->closing)
			return mux_fail(why, len, "DATA after CLOSE on stream %u", id);
		if (n > s->recv_left)
			return mux_fail(why, len, "stream %u sent %zu bytes past its credit", id,
					n - s->recv_left);
		s->recv_left -= n;
		return mux_buf_add(&s->in, p, n) < 0 ? mux_fail(why, len, "out of memory") : 0;
	case MUX_WINDOW:
		if (n != 4)
			return mux_fail(why, len, "a WINDOW frame of %zu bytes", n);
		if (!s)
			return mux_known(m, id)
				   ? 0
				   : mux_fail(why, len, "WINDOW for stream %u, never opened", id);
		s->credit += mux_get32(p);
		if (s->credit > MUX_CREDIT_MAX)
			return mux_fail(why, len, "stream %u's credit passed 1 GiB", id);
		return 0;
	case MUX_CLOSE:
		if (!s)
			return mux_known(m, id)
				   ? 0
				   : mux_fail(why, len, "CLOSE for stream %u, never opened", id);
		s->closing = true;
		if (!s->in.len)
			mux_end(m, s);
		return 0;
	case MUX_PING:
		if (n > 8)
			return mux_fail(why, len, "a PING of %zu bytes", n);
		return mux_frame(m, MUX_PONG, 0, p, n) < 0 ? mux_fail(why, len, "out of memory")
							   : 0;
	case MUX_PONG:
		return n > 8 ? mux_fail(why, len, "a PONG of %zu bytes", n) : 0;
	}
	return mux_fail(why, len, "an unknown frame type %d", (int)type);
}

/* Parses what rx holds: 0, 1 (BYE), -1. */
static int mux_parse(struct mux *m, char *why, size_t len)
{
	while (m->rx.len >= MUX_HEADER) {
		const unsigned char *h = m->rx.p + m->rx.off;
		uint32_t id = mux_get32(h + 1), n = mux_get32(h + 5);
		if (n > m->o.max_frame)
			return mux_fail(why, len, "a frame of %u bytes (the limit is %zu)", n,
					m->o.max_frame);
		if (m->rx.len < MUX_HEADER + (size_t)n)
			break;
		int rc = mux_handle(m, (enum mux_type)h[0], id, h + MUX_HEADER, n, why, len);
		mux_buf_drop(&m->rx, MUX_HEADER + n);
		if (rc != 0)
			return rc;
	}
	return 0;
}

/* Writes what waits for the link: 0, or -1 when the link is gone. */
static int mux_flush(struct mux *m, char *why, size_t len)
{
	while (m->out.len) {
		ssize_t w = send(m->o.link, m->out.p + m->out.off, m->out.len, MSG_NOSIGNAL);
		if (w > 0) {
			mux_buf_drop(&m->out, (size_t)w);
			continue;
		}
		if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
			return 0;
		return mux_fail(why, len, "the link closed (%s)", w < 0 ? strerror(errno) : "EOF");
	}
	return 0;
}

/* A stream's local end is readable: one chunk as DATA, or its end. */
static void mux_stream_read(struct mux *m, struct mux_stream *s)
{
	unsigned char buf[MUX_CHUNK];
	size_t want = s->credit < sizeof buf ? s->credit : sizeof buf;
	if (want > m->o.max_frame)
		want = m->o.max_frame;
	ssize_t r = recv(s->fd, buf, want, MSG_DONTWAIT);
	if (r > 0) {
		s->credit -= (size_t)r;
		if (mux_frame(m, MUX_DATA, s->id, buf, (size_t)r) < 0)
			s->closing = true;
		return;
	}
	if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
		return;
	mux_frame(m, MUX_CLOSE, s->id, NULL, 0);
	mux_end(m, s);
}

/* A stream's local end is writable: pass on what the peer sent, credit it back. */
static void mux_stream_write(struct mux *m, struct mux_stream *s)
{
	while (s->in.len) {
		ssize_t w =
		    send(s->fd, s->in.p + s->in.off, s->in.len, MSG_NOSIGNAL | MSG_DONTWAIT);
		if (w > 0) {
			mux_buf_drop(&s->in, (size_t)w);
			s->grant += (size_t)w;
			continue;
		}
		if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
			break;
		if (!s->closing)
			mux_frame(m, MUX_CLOSE, s->id, NULL, 0);
		mux_end(m, s);
		return;
	}
	if (s->closing) {
		if (!s->in.len)
			mux_end(m, s);
		return;
	}
	if (s->grant && (s->grant >= m->o.window / 4 || !s->in.len)) {
		unsigned char v[4];
		mux_put32(v, (uint32_t)s->grant);
		s->recv_left += s->grant;
		s->grant = 0;
		mux_frame(m, MUX_WINDOW, s->id, v, 4);
	}
}

static void mux_accept(struct mux *m, const struct mux_listener *l)
{
	int fd = accept4(l->fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
	if (fd < 0)
		return;
	if (m->nstreams >= m->o.max_streams || m->next_id == UINT32_MAX) {
		close(fd);
		return;
	}
	uint32_t id = m->next_id++;
	if (!mux_add(m, id, fd)) {
		close(fd);
		return;
	}
	mux_frame(m, MUX_OPEN, id, l->target, strlen(l->target));
}

/* BYE, flushed for at most a second. */
static void mux_send_bye(struct mux *m, const char *reason)
{
	char why[64];
	mux_frame(m, MUX_BYE, 0, reason, strlen(reason));
	int64_t until = clock_now_ms() + 1000;
	while (m->out.len && clock_now_ms() < until) {
		struct pollfd p = {.fd = m->o.link, .events = POLLOUT};
		if (poll(&p, 1, (int)(until - clock_now_ms())) <= 0 ||
		    mux_flush(m, why, sizeof why) < 0)
			break;
	}
}

int mux_run(struct mux *m, char *why, size_t len)
{
	int fl = fcntl(m->o.link, F_GETFL);
	fcntl(m->o.link, F_SETFL, fl | O_NONBLOCK);
	m->last_rx = m->last_ping = clock_now_ms();
	struct pollfd *pf = NULL;
	struct mux_stream **ps = NULL;
	size_t cap = 0;
	int rc = -1;
	for (;;) {
		pthread_mutex_lock(&m->lock);
		bool stop = m->stop, bye = m->bye;
		char reason[256];
		snprintf(reason, sizeof reason, "%s", m->bye_reason);
		pthread_mutex_unlock(&m->lock);
		if (bye)
			mux_send_bye(m, reason);
		if (stop || bye) {
			snprintf(why, len, "%s", bye ? reason : "stopped");
			rc = 0;
			break;
		}
		int64_t now = clock_now_ms();
		if (now - m->last_rx >= m->o.dead_ms) {
			mux_fail(why, len, "nothing from the peer in %d ms", m->o.dead_ms);
			break;
		}
		if (now - m->last_ping >= m->o.ping_ms) {
			unsigned char ts[8] = {0};
			mux_put32(ts + 4, (uint32_t)now);
			mux_frame(m, MUX_PING, 0, ts, sizeof ts);
			m->last_ping = now;
		}
		size_t need = 2 + (size_t)m->o.nlisteners + (size_t)m->nstreams;
		if (need > cap) {
			cap = need * 2;
			struct pollfd *npf = realloc(pf, cap * sizeof *pf);
			if (npf)
				pf = npf;
			struct mux_stream **nps = realloc(ps, cap * sizeof *ps);
			if (nps)
				ps = nps;
			if (!npf || !nps) {
				mux_fail(why, len, "out of memory");
				break;
			}
		}
		bool room = m->out.len < m->o.out_high;
		size_t n = 0;
		pf[n++] = (struct pollfd){.fd = m->wake[0], .events = POLLIN};
		pf[n++] = (struct pollfd){
		    .fd = m->o.link,
		    .events = (short)((room ? POLLIN : 0) | (m->out.len ? POLLOUT : 0))};
		size_t first_l = n;
		for (int i = 0; i < m->o.nlisteners; i++)
			pf[n++] = (struct pollfd){
			    .fd = m->o.listeners[i].fd,
			    .events = (short)(room && m->nstreams < m->o.max_streams ? POLLIN : 0)};
		size_t first_s = n;
		for (struct mux_stream *s = m->streams; s; s = s->next) {
			ps[n - first_s] = s;
			short ev = 0;
			if (room && s->credit && !s->closing)
				ev |= POLLIN;
			if (s->in.len)
				ev |= POLLOUT;
			pf[n++] = (struct pollfd){.fd = s->fd, .events = ev};
		}
		int timeout = (int)(m->last_ping + m->o.ping_ms - now);
		if (timeout < 0)
			timeout = 0;
		if (poll(pf, n, timeout) < 0 && errno != EINTR) {
			mux_fail(why, len, "poll: %s", strerror(errno));
			break;
		}
		if (pf[0].revents) {
			char drain[64];
			while (read(m->wake[0], drain, sizeof drain) > 0)
				;
		}
		if (pf[1].revents & POLLIN) {
			unsigned char buf[65536];
			ssize_t r = recv(m->o.link, buf, sizeof buf, MSG_DONTWAIT);
			if (r == 0 || (r < 0 && errno != EAGAIN && errno != EINTR)) {
				mux_fail(why, len, "the link closed");
				break;
			}
			if (r > 0) {
				m->last_rx = clock_now_ms();
				if (mux_buf_add(&m->rx, buf, (size_t)r) < 0) {
					mux_fail(why, len, "out of memory");
					break;
				}
				int pr = mux_parse(m, why, len);
				if (pr == 1) {
					rc = 1;
					break;
				}
				if (pr < 0)
					break;
			}
		} else if (pf[1].revents & (POLLHUP | POLLERR)) {
			if (!(pf[1].events & POLLIN)) {
				mux_fail(why, len, "the link closed");
				break;
			}
		}
		for (int i = 0; i < m->o.nlisteners; i++)
			if (pf[first_l + (size_t)i].revents & POLLIN)
				mux_accept(m, &m->o.listeners[i]);
		/* Streams: each its turn; one may end (and be freed) in its turn,
		 * so only those still listed are looked at. */
		for (size_t i = first_s; i < n; i++) {
			struct mux_stream *s = ps[i - first_s];
			bool listed = false;
			for (struct mux_stream *t = m->streams; t; t = t->next)
				if (t == s) {
					listed = true;
					break;
				}
			if (!listed || !pf[i].revents)
				continue;
			if (pf[i].revents & POLLOUT ||
			    (s->in.len && pf[i].revents & (POLLHUP | POLLERR)))
				mux_stream_write(m, s);
			else if (pf[i].revents & (POLLIN | POLLHUP | POLLERR))
				mux_stream_read(m, s);
		}
		if (m->out.len && mux_flush(m, why, len) < 0)
			break;
	}
	while (m->streams)
		mux_end(m, m->streams);
	free(pf);
	free(ps);
	return rc;
}

void mux_free(struct mux *m)
{
	if (!m)
		return;
	while (m->streams)
		mux_end(m, m->streams);
	close(m->wake[0]);
	close(m->wake[1]);
	pthread_mutex_destroy(&m->lock);
	free(m->out.p);
	free(m->rx.p);
	free(m);
}
