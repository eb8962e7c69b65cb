/*
 * httpd-tunnel: the WebSocket tunnels of wire/httpd (httpd.h: the tunnel
 * hook, httpd_close_tagged, httpd_tunnels_tagged). A WebSocket upgrade the
 * owner's tunnel hook accepts is piped to a UNIX socket, both ways, with
 * backpressure (TUNNEL_HIGH) and the owner's first-answer deadline.
 */
#include "httpd-internal.h"
#include "clock.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <unistd.h>

void httpd_close_tagged(struct httpd *h, const char *tag, int code, const char *reason)
{
	pthread_mutex_lock(&h->lock);
	for (struct tunnel *tn = h->tunnels; tn; tn = tn->next) {
		if (strcmp(tn->t.tag, tag) == 0) {
			tn->kill = true;
			tn->close_code = code;
			snprintf(tn->close_reason, sizeof tn->close_reason, "%s", reason);
		}
	}
	pthread_mutex_unlock(&h->lock);
	lws_cancel_service(h->ctx);
}

int httpd_tunnels_tagged(struct httpd *h, const char *tag)
{
	int n = 0;
	pthread_mutex_lock(&h->lock);
	for (struct tunnel *tn = h->tunnels; tn; tn = tn->next)
		if (strcmp(tn->t.tag, tag) == 0)
			n++;
	pthread_mutex_unlock(&h->lock);
	return n;
}

/* Loop thread: closes the tunnels httpd_close_tagged() marked. */
void tunnel_reap(struct httpd *h)
{
	pthread_mutex_lock(&h->lock);
	for (struct tunnel *tn = h->tunnels; tn; tn = tn->next) {
		if (!tn->kill)
			continue;
		/* The client gets a close frame with the reason (its writable
		 * callback sends it); the computer's side just goes. */
		if (tn->ws)
			lws_callback_on_writable(tn->ws);
		if (tn->raw)
			lws_set_timeout(tn->raw, PENDING_TIMEOUT_USER_OK, LWS_TO_KILL_ASYNC);
	}
	pthread_mutex_unlock(&h->lock);
}

static void tunnel_maybe_free(struct tunnel *tn)
{
	if (tn->ws || tn->raw)
		return;
	struct httpd *h = tn->h;
	pthread_mutex_lock(&h->lock);
	struct tunnel **pp = &h->tunnels;
	while (*pp && *pp != tn)
		pp = &(*pp)->next;
	if (*pp)
		*pp = tn->next;
	pthread_mutex_unlock(&h->lock);
	if (tn->fd >= 0)
		close(tn->fd);
	httpd_queue_free(&tn->to_raw);
	httpd_queue_free(&tn->to_ws);
	if (tn->t.on_close)
		tn->t.on_close(tn->t.close_ctx, tn->t.tag);
	if (tn->t.state_free)
		tn->t.state_free(tn->t.state);
	free(tn);
}

/* Writes an HTTP error before the upgrade: the client never gets a WebSocket. */
static void tunnel_refuse(struct lws *wsi, const struct err *e)
{
	static unsigned char buf[LWS_PRE + 2048];
	unsigned char *start = buf + LWS_PRE, *p = start, *end = buf + sizeof buf - 1;
	json_t *j = err_to_json(e);
	char *body = json_dumps(j, JSON_COMPACT);
	json_decref(j);
	size_t len = body ? strlen(body) : 0;
	if (!lws_add_http_common_headers(wsi, (unsigned)err_http_status(e->code),
					 "application/json", len, &p, end) &&
	    !lws_add_http_header_by_name(wsi, (const unsigned char *)"connection:",
					 (const unsigned char *)"close", 5, &p, end) &&
	    !lws_finalize_http_header(wsi, &p, end) && body && (size_t)(end - p) > len) {
		memcpy(p, body, len);
		p += len;
		lws_write(wsi, start, (size_t)(p - start), LWS_WRITE_HTTP_HEADERS);
	}
	free(body);
}

static int tunnel_accept(struct httpd *h, struct lws *wsi, struct tunnel_conn *tc)
{
	struct err e = {0};
	struct httpd_request req;
	char target[160];
	memset(&req, 0, sizeof req);
	request_fill_req(wsi, &req, target, sizeof target);
	struct tunnel *tn = calloc(1, sizeof *tn);
	int rc = -1;
	if (!tn) {
		err_set(&e, ERR_INTERNAL, "out of memory");
	} else if (!h->o.tunnel) {
		tn->fd = -1;
		err_set(&e, ERR_NOT_FOUND, "no WebSocket endpoint here");
	} else {
		tn->fd = -1;
		rc = h->o.tunnel(h->o.ctx, &req, &tn->t, &e);
	}
	if (rc == 0 && tn->t.relay_host[0]) {
		/* A relay connects once the upgrade is accepted (ESTABLISHED). */
		if (tn->t.relay_port <= 0 || tn->t.relay_port > 65535 || !tn->t.relay_path[0]) {
			err_set(&e, ERR_INTERNAL, "a relay needs a port and a path");
			rc = -1;
		}
	} else if (rc == 0 && tn->t.tcp_port > 0) {
		/* A TCP port on the loopback: the connect completes (or is
		 * refused) after the upgrade; RAW_CLOSE before RAW_WRITEABLE says
		 * it was refused. */
		struct sockaddr_in sa = {.sin_family = AF_INET,
					 .sin_port = htons((uint16_t)tn->t.tcp_port),
					 .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
		tn->fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
		if (tn->fd < 0 || (connect(tn->fd, (struct sockaddr *)&sa, sizeof sa) < 0 &&
				   errno != EINPROGRESS)) {
			err_set(&e, errno == ECONNREFUSED ? ERR_BAD_GATEWAY : ERR_UNAVAILABLE,
				"cannot connect to port %d: %s", tn->t.tcp_port, strerror(errno));
			rc = -1;
		}
	} else if (rc == 0) {
		struct sockaddr_un sa = {.sun_family = AF_UNIX};
		snprintf(sa.sun_path, sizeof sa.sun_path, "%s", tn->t.unix_path);
		/* Non-blocking: a unix listener whose backlog is full (a microVM's
		 * port serves one viewer at a time; a guest that never accepts)
		 * answers EAGAIN at once instead of holding the loop. */
		tn->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
		if (tn->fd >= 0 && connect(tn->fd, (struct sockaddr *)&sa, sizeof sa) == 0)
			tn->connected = true;
		else if (tn->fd < 0 || errno != EINPROGRESS) {
			if (errno == EAGAIN)
				err_set(&e, ERR_UNAVAILABLE,
					"the computer's stream is busy (its server takes no more "
					"viewers now): try again later");
			else
				err_set(&e, ERR_UNAVAILABLE,
					"the computer's stream is not available: %s",
					strerror(errno));
			rc = -1;
		}
	}
	for (size_t i = 0; i < req.nquery; i++)
		free(req.query[i]);
	fprintf(stderr, "%s: %s websocket %s\n", h->o.log_prefix, target,
		rc == 0 ? "accepted" : e.message);
	if (rc < 0) {
		tunnel_refuse(wsi, &e);
		if (tn) {
			if (tn->fd >= 0)
				close(tn->fd);
			if (tn->t.state_free)
				tn->t.state_free(tn->t.state);
			free(tn);
		}
		return -1;
	}
	tn->h = h;
	tc->tn = tn;
	pthread_mutex_lock(&h->lock);
	tn->next = h->tunnels;
	h->tunnels = tn;
	pthread_mutex_unlock(&h->lock);
	return 0;
}

/* Past this a queue that empties frees its buffer (an idle tunnel that once
 * carried a burst keeps none of it). */
#define QUEUE_KEEP (256 * 1024)

int httpd_queue_put(struct httpd_queue *q, const void *in, size_t n)
{
	if (n == 0)
		return 0;
	if (q->head + q->len + n > q->cap) {
		if (q->head && q->len + n <= q->cap) {
			memmove(q->buf, q->buf + q->head, q->len); /* room at the front */
		} else {
			size_t cap = q->cap ? q->cap : 4096;
			while (cap < q->len + n)
				cap *= 2;
			unsigned char *grown = malloc(cap);
			if (!grown)
				return -1;
			if (q->len)
				memcpy(grown, q->buf + q->head, q->len);
			free(q->buf);
			q->buf = grown;
			q->cap = cap;
		}
		q->head = 0;
	}
	memcpy(q->buf + q->head + q->len, in, n);
	q->len += n;
	return 0;
}

int httpd_queue_send(struct lws *wsi, struct httpd_queue *q, int how, size_t chunk)
{
	unsigned char buf[LWS_PRE + HTTPD_CHUNK]; /* the loop thread's stack */
	if (q->len == 0)
		return 0;
	size_t n = q->len;
	if (chunk > HTTPD_CHUNK)
		chunk = HTTPD_CHUNK;
	if (n > chunk)
		n = chunk;
	memcpy(buf + LWS_PRE, q->buf + q->head, n);
	if (lws_write(wsi, buf + LWS_PRE, n, (enum lws_write_protocol)how) < (int)n)
		return -1;
	q->head += n;
	q->len -= n;
	if (q->len) {
		lws_callback_on_writable(wsi);
	} else {
		q->head = 0;
		if (q->cap > QUEUE_KEEP) {
			free(q->buf);
			q->buf = NULL;
			q->cap = 0;
		}
	}
	return 0;
}

void httpd_queue_free(struct httpd_queue *q)
{
	free(q->buf);
	*q = (struct httpd_queue){0};
}

/* ---- relays: the other side is another server's WebSocket ---------------------- */

/* Marks the tunnel to close its client's WebSocket with code and reason
 * (unless something else closes it already). Loop thread. */
static void tunnel_kill_with(struct tunnel *tn, int code, const char *reason)
{
	pthread_mutex_lock(&tn->h->lock);
	if (!tn->kill) {
		tn->kill = true;
		tn->close_code = code;
		snprintf(tn->close_reason, sizeof tn->close_reason, "%s", reason);
	}
	pthread_mutex_unlock(&tn->h->lock);
	if (tn->ws) {
		lws_callback_on_writable(tn->ws);
		lws_set_timeout(tn->ws, PENDING_TIMEOUT_USER_OK, 5);
	}
}

/* The client's upgrade is accepted: dial the relay (loop thread). */
static int tunnel_relay_open(struct tunnel *tn, struct lws *wsi)
{
	char host[80];
	snprintf(host, sizeof host, "%s:%d", tn->t.relay_host, tn->t.relay_port);
	struct lws_client_connect_info ci = {0};
	ci.context = lws_get_context(wsi);
	ci.vhost = lws_get_vhost(wsi);
	ci.address = tn->t.relay_host;
	ci.port = tn->t.relay_port;
	ci.path = tn->t.relay_path;
	ci.host = host;
	ci.origin = host;
	ci.protocol = "binary";
	ci.local_protocol_name = "cubicle-relay";
	ci.opaque_user_data = tn;
	ci.pwsi = &tn->raw;
	if (tn->t.max_seconds > 0)
		lws_set_timeout(wsi, PENDING_TIMEOUT_USER_OK, tn->t.max_seconds);
	if (!lws_client_connect_via_info(&ci)) {
		tn->raw = NULL;
		tunnel_kill_with(tn, 4502, "the node that holds the computer cannot be reached");
		return 0;
	}
	/* It must speak within the deadline, like a socket. */
	if (tn->raw)
		lws_set_timeout(tn->raw, PENDING_TIMEOUT_USER_OK,
				tn->t.answer_seconds > 0 ? tn->t.answer_seconds : 10);
	return 0;
}

int tunnel_relay_callback(struct lws *wsi, enum lws_callback_reasons reason, void *user, void *in,
			  size_t len)
{
	(void)user;
	struct tunnel *tn = lws_get_opaque_user_data(wsi);
	switch (reason) {
	case LWS_CALLBACK_CLIENT_APPEND_HANDSHAKE_HEADER: {
		if (!tn || !tn->t.relay_header[0])
			return 0;
		unsigned char **p = in, *end = (*p) + len;
		char name[64];
		const char *colon = strchr(tn->t.relay_header, ':');
		if (!colon || colon == tn->t.relay_header ||
		    (size_t)(colon - tn->t.relay_header) >= sizeof name - 1)
			return -1;
		size_t nl = (size_t)(colon - tn->t.relay_header);
		for (size_t i = 0; i < nl; i++) {
			char ch = tn->t.relay_header[i];
			name[i] = (char)(ch >= 'A' && ch <= 'Z' ? ch - 'A' + 'a' : ch);
		}
		name[nl] = ':';
		name[nl + 1] = 0;
		const char *v = colon + 1;
		while (*v == ' ')
			v++;
		return lws_add_http_header_by_name(wsi, (const unsigned char *)name,
						   (const unsigned char *)v, (int)strlen(v), p, end)
			   ? -1
			   : 0;
	}
	case LWS_CALLBACK_CLIENT_ESTABLISHED:
		if (!tn || !tn->ws)
			return -1;
		if (tn->to_raw.len)
			lws_callback_on_writable(wsi);
		return 0;
	case LWS_CALLBACK_CLIENT_RECEIVE:
		if (!tn || !tn->ws)
			return -1;
		if (!tn->answered) {
			tn->answered = true;
			lws_set_timeout(wsi, NO_PENDING_TIMEOUT, 0);
		}
		if (httpd_queue_put(&tn->to_ws, in, len) < 0)
			return -1;
		lws_callback_on_writable(tn->ws);
		if (tn->to_ws.len > TUNNEL_HIGH && !tn->raw_paused) {
			tn->raw_paused = true;
			lws_rx_flow_control(wsi, 0);
		}
		return 0;
	case LWS_CALLBACK_CLIENT_WRITEABLE:
		if (!tn)
			return -1;
		if (httpd_queue_send(wsi, &tn->to_raw, LWS_WRITE_BINARY, HTTPD_CHUNK) < 0)
			return -1;
		if (tn->ws_paused && tn->to_raw.len < TUNNEL_HIGH / 2 && tn->ws) {
			tn->ws_paused = false;
			lws_rx_flow_control(tn->ws, 1);
		}
		return 0;
	case LWS_CALLBACK_WS_PEER_INITIATED_CLOSE:
		/* The far side's close code, when it is one of ours, is the
		 * viewer's too (4403: revoked; 4504: no answer). */
		if (tn && len >= 2) {
			const unsigned char *b = in;
			int code = (b[0] << 8) | b[1];
			char reason_text[64];
			size_t rl =
			    len - 2 < sizeof reason_text - 1 ? len - 2 : sizeof reason_text - 1;
			memcpy(reason_text, b + 2, rl);
			reason_text[rl] = 0;
			for (size_t i = 0; i < rl; i++)
				if ((unsigned char)reason_text[i] < 0x20)
					reason_text[i] = ' ';
			if (code >= 4000 && code <= 4999)
				tunnel_kill_with(tn, code, reason_text);
		}
		return 0;
	case LWS_CALLBACK_CLIENT_CONNECTION_ERROR:
		if (tn) {
			int status = (int)lws_http_client_http_response(wsi);
			char why[64];
			if (status >= 400 && status <= 599) {
				snprintf(why, sizeof why,
					 "the node that holds the computer: HTTP %d", status);
				tunnel_kill_with(tn, 4000 + status, why);
			} else {
				tunnel_kill_with(
				    tn, 4502, "the node that holds the computer cannot be reached");
			}
		}
		/* fall through */
	case LWS_CALLBACK_CLIENT_CLOSED:
		if (tn) {
			lws_set_opaque_user_data(wsi, NULL);
			tn->raw = NULL;
			if (tn->ws && !tn->answered)
				tunnel_kill_with(tn, 4504,
						 "the computer's live view did not answer");
			else if (tn->ws)
				lws_set_timeout(tn->ws, PENDING_TIMEOUT_USER_OK, LWS_TO_KILL_ASYNC);
			tunnel_maybe_free(tn);
		}
		return 0;
	default:
		break;
	}
	return 0;
}

int tunnel_ws_callback(struct lws *wsi, enum lws_callback_reasons reason, void *user, void *in,
		       size_t len)
{
	struct tunnel_conn *tc = user;
	struct lws_context *ctx = lws_get_context(wsi);
	struct httpd *h = ctx ? lws_context_user(ctx) : NULL;
	struct tunnel *tn = tc ? tc->tn : NULL;
	switch (reason) {
	case LWS_CALLBACK_FILTER_PROTOCOL_CONNECTION:
		return tc && tunnel_accept(h, wsi, tc) == 0 ? 0 : -1;
	case LWS_CALLBACK_ESTABLISHED: {
		if (!tn)
			return -1;
		tn->ws = wsi;
		if (tn->t.relay_host[0])
			return tunnel_relay_open(tn, wsi);
		lws_sock_file_fd_type fd = {.sockfd = tn->fd};
		tn->raw = lws_adopt_descriptor_vhost(lws_get_vhost(wsi), LWS_ADOPT_SOCKET, fd,
						     "cubicle-raw", NULL);
		tn->fd = -1; /* lws owns (or closed) it now */
		if (!tn->raw)
			return -1;
		lws_set_opaque_user_data(tn->raw, tn);
		if (tn->t.max_seconds > 0)
			lws_set_timeout(wsi, PENDING_TIMEOUT_USER_OK, tn->t.max_seconds);
		/* The socket's server speaks first: silence past the deadline
		 * ends the tunnel (RAW_CLOSE tells the client why). A server
		 * that waits for its client still has to connect. */
		if (tn->t.answer_seconds >= 0 || !tn->connected)
			lws_set_timeout(tn->raw, PENDING_TIMEOUT_USER_OK,
					tn->t.answer_seconds > 0 ? tn->t.answer_seconds : 10);
		if (!tn->connected)
			lws_callback_on_writable(tn->raw); /* writable = connected */
		size_t pre = strnlen(tn->t.preamble, sizeof tn->t.preamble);
		if (pre) {
			if (httpd_queue_put(&tn->to_raw, tn->t.preamble, pre) < 0)
				return -1;
			lws_callback_on_writable(tn->raw);
		}
		return 0;
	}
	case LWS_CALLBACK_RECEIVE: {
		if (!tn)
			return -1;
		/* The socket's side is gone (refused, ended or killed) and the
		 * close frame that says why is on its way: what the client still
		 * sends has nowhere to go. Closing here would lose that frame. */
		if (!tn->raw)
			return 0;
		if (tn->t.bytes)
			atomic_fetch_add_explicit(&tn->t.bytes[0], len, memory_order_relaxed);
		/* The queue copies what it keeps: only a filter needs a buffer. */
		long n = (long)len;
		int rc;
		if (tn->t.filter) {
			unsigned char *out = malloc(len ? len : 1);
			if (!out)
				return -1;
			n = tn->t.filter(tn->t.state, in, len, out);
			rc = n < 0 ? -1 : httpd_queue_put(&tn->to_raw, out, (size_t)n);
			free(out);
		} else {
			rc = httpd_queue_put(&tn->to_raw, in, len);
		}
		if (rc < 0)
			return -1;
		if (n > 0)
			lws_callback_on_writable(tn->raw);
		if (tn->to_raw.len > TUNNEL_HIGH && !tn->ws_paused) {
			tn->ws_paused = true;
			lws_rx_flow_control(wsi, 0);
		}
		return 0;
	}
	case LWS_CALLBACK_SERVER_WRITEABLE:
		if (!tn)
			return -1;
		/* The close is under way: lws has sent (or sends) the close frame
		 * and waits for the client's answer to it. A -1 on a later
		 * writable would cut the connection at once, and a client whose
		 * last write crossed our frame would never read that frame. */
		if (tn->closing)
			return 0;
		pthread_mutex_lock(&h->lock);
		bool kill = tn->kill;
		pthread_mutex_unlock(&h->lock);
		if (kill) {
			tn->closing = true;
			lws_close_reason(wsi, (enum lws_close_status)tn->close_code,
					 (unsigned char *)tn->close_reason,
					 strlen(tn->close_reason));
			return -1;
		}
		if (httpd_queue_send(wsi, &tn->to_ws, LWS_WRITE_BINARY, HTTPD_CHUNK) < 0)
			return -1;
		if (tn->raw_gone && tn->to_ws.len == 0) { /* all it sent is delivered */
			tn->closing = true;
			lws_close_reason(wsi, LWS_CLOSE_STATUS_NORMAL, NULL, 0);
			return -1;
		}
		if (tn->raw_paused && tn->to_ws.len < TUNNEL_HIGH / 2 && tn->raw) {
			tn->raw_paused = false;
			lws_rx_flow_control(tn->raw, 1);
		}
		return 0;
	case LWS_CALLBACK_CLOSED:
		if (tn) {
			tn->ws = NULL;
			tc->tn = NULL;
			if (tn->raw)
				lws_set_timeout(tn->raw, PENDING_TIMEOUT_USER_OK,
						LWS_TO_KILL_ASYNC);
			tunnel_maybe_free(tn);
		}
		return 0;
	default:
		break;
	}
	return 0;
}

int tunnel_raw_callback(struct lws *wsi, enum lws_callback_reasons reason, void *user, void *in,
			size_t len)
{
	(void)user;
	struct tunnel *tn = lws_get_opaque_user_data(wsi);
	switch (reason) {
	case LWS_CALLBACK_RAW_RX:
		if (!tn || !tn->ws)
			return -1;
		if (!tn->answered) {
			tn->answered = true;
			lws_set_timeout(wsi, NO_PENDING_TIMEOUT, 0);
		}
		if (httpd_queue_put(&tn->to_ws, in, len) < 0)
			return -1;
		if (tn->t.bytes)
			atomic_fetch_add_explicit(&tn->t.bytes[1], len, memory_order_relaxed);
		lws_callback_on_writable(tn->ws);
		if (tn->to_ws.len > TUNNEL_HIGH && !tn->raw_paused) {
			tn->raw_paused = true;
			lws_rx_flow_control(wsi, 0);
		}
		return 0;
	case LWS_CALLBACK_RAW_WRITEABLE:
		if (!tn)
			return -1;
		if (!tn->connected) {
			/* Writable can come with the error of a refused connect
			 * (POLLOUT and POLLERR together): only no error is a
			 * connection. */
			int err = 0;
			socklen_t el = sizeof err;
			if (getsockopt(lws_get_socket_fd(wsi), SOL_SOCKET, SO_ERROR, &err, &el) <
				0 ||
			    err)
				return -1; /* RAW_CLOSE says it was refused */
			tn->connected = true;
			if (tn->t.answer_seconds < 0)
				lws_set_timeout(wsi, NO_PENDING_TIMEOUT, 0);
		}
		if (httpd_queue_send(wsi, &tn->to_raw, LWS_WRITE_RAW, HTTPD_CHUNK) < 0)
			return -1;
		if (tn->ws_paused && tn->to_raw.len < TUNNEL_HIGH / 2 && tn->ws) {
			tn->ws_paused = false;
			lws_rx_flow_control(tn->ws, 1);
		}
		return 0;
	case LWS_CALLBACK_RAW_CLOSE:
		if (tn) {
			tn->raw = NULL;
			lws_set_opaque_user_data(wsi, NULL);
			bool refused = !tn->connected;
			if (tn->ws && (refused || (!tn->answered && tn->t.answer_seconds >= 0))) {
				/* It never connected, or never spoke: say so in a
				 * close frame. */
				pthread_mutex_lock(&tn->h->lock);
				if (!tn->kill) {
					tn->kill = true;
					tn->close_code = refused ? 4502 : 4504;
					if (refused && tn->t.tcp_port > 0)
						snprintf(tn->close_reason, sizeof tn->close_reason,
							 "nothing answers on port %d",
							 tn->t.tcp_port);
					else
						snprintf(tn->close_reason, sizeof tn->close_reason,
							 "the computer's live view did not answer");
				}
				pthread_mutex_unlock(&tn->h->lock);
				lws_callback_on_writable(tn->ws);
				lws_set_timeout(tn->ws, PENDING_TIMEOUT_USER_OK, 5);
			} else if (tn->ws) {
				/* What it sent goes first, then a normal close; a
				 * client that stops reading has 30 s to take it. */
				tn->raw_gone = true;
				lws_callback_on_writable(tn->ws);
				lws_set_timeout(tn->ws, PENDING_TIMEOUT_USER_OK, 30);
			}
			tunnel_maybe_free(tn);
		}
		return 0;
	default:
		break;
	}
	return 0;
}
