/*
 * httpd-relay: relays to ports inside computers (httpd.h, "Relays").
 *
 * A connection on the relay listener is accepted as a raw socket; its first
 * request head is read here and routed by the owner's relay router, which
 * answers it or names the computer's port. A relayed connection is then a
 * WebSocket client connection to the computer's envd (GET
 * /v1/tunnel?port=N, subprotocol binary, envd's token as the bearer: envd's
 * tunnel connects to 127.0.0.1:N in the guest) carrying the bytes both ways:
 * the client's through the request-stream rewriter (httpreq.h), the
 * computer's as they come. Everything runs on the loop; nothing blocks.
 */
#include "httpd-internal.h"
#include "httpreq.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define RELAY_IN_MAX (HTTPREQ_MAX_HEAD + HTTPD_CHUNK) /* the first head and what came with it */

/* ---- pages ----------------------------------------------------------------------- */

static const char *relay_reason(int status)
{
	switch (status) {
	case 200:
		return "OK";
	case 302:
		return "Found";
	case 400:
		return "Bad Request";
	case 401:
		return "Unauthorized";
	case 403:
		return "Forbidden";
	case 404:
		return "Not Found";
	case 409:
		return "Conflict";
	case 429:
		return "Too Many Requests";
	case 502:
		return "Bad Gateway";
	case 503:
		return "Service Unavailable";
	case 504:
		return "Gateway Timeout";
	default:
		return "Error";
	}
}

/* A page for e: HTML (the message escaped) or the API's JSON error. */
static void relay_page(struct httpd_relay_answer *a, bool html, const struct err *e)
{
	a->status = err_http_status(e->code);
	free(a->body);
	a->body = NULL;
	a->body_len = 0;
	if (!html) {
		json_t *j = err_to_json(e);
		a->body = json_dumps(j, JSON_COMPACT);
		json_decref(j);
		a->content_type = "application/json";
	} else {
		char msg[sizeof e->message * 6];
		size_t o = 0;
		for (const char *p = e->message; *p && o + 7 < sizeof msg; p++) {
			const char *rep = *p == '<'    ? "&lt;"
					  : *p == '>'  ? "&gt;"
					  : *p == '&'  ? "&amp;"
					  : *p == '"'  ? "&quot;"
					  : *p == '\'' ? "&#39;"
						       : NULL;
			if (rep) {
				memcpy(msg + o, rep, strlen(rep));
				o += strlen(rep);
			} else {
				msg[o++] = *p;
			}
		}
		msg[o] = 0;
		if (asprintf(&a->body,
			     "<!doctype html><html lang=\"en\"><meta charset=\"utf-8\">"
			     "<meta name=\"viewport\" content=\"width=device-width\">"
			     "<title>%d %s</title><style>body{font:16px/1.5 "
			     "system-ui,sans-serif;margin:3em auto;max-width:40em;padding:0 "
			     "1em;color:#222}code{background:#eee}</style>"
			     "<h1>%d %s</h1><p id=\"message\">%s</p><p><small>cubicle "
			     "(%s)</small></p></html>\n",
			     a->status, relay_reason(a->status), a->status, relay_reason(a->status),
			     msg, err_code_name(e->code)) < 0)
			a->body = NULL;
		a->content_type = "text/html; charset=utf-8";
	}
	a->body_len = a->body ? strlen(a->body) : 0;
}

static bool relay_wants_html(const struct httpreq_head *head)
{
	char accept[256];
	return head && httpreq_copy(head, "accept", accept, sizeof accept) >= 0 &&
	       strstr(accept, "text/html") != NULL;
}

void httpd_relay_page(struct httpd_relay_answer *a, const struct httpreq_head *head,
		      const struct err *e)
{
	relay_page(a, relay_wants_html(head), e);
}

/* ---- the relay list ---------------------------------------------------------------- */

int httpd_relays_tagged(struct httpd *h, const char *tag)
{
	int n = 0;
	pthread_mutex_lock(&h->lock);
	for (struct relay *r = h->relays; r; r = r->next)
		if (r->routed && strcmp(r->r.tag, tag) == 0)
			n++;
	pthread_mutex_unlock(&h->lock);
	return n;
}

void httpd_relays_close(struct httpd *h, const char *tag, const char *sub)
{
	pthread_mutex_lock(&h->lock);
	for (struct relay *r = h->relays; r; r = r->next)
		if (r->routed && strcmp(r->r.tag, tag) == 0 && (!sub || strcmp(r->r.sub, sub) == 0))
			r->kill = true;
	pthread_mutex_unlock(&h->lock);
	if (h->ctx)
		lws_cancel_service(h->ctx);
}

const char *httpd_relay_address(const struct httpd *h)
{
	return h->relay_address;
}

/* Loop thread: ends the relays httpd_relays_close() marked. */
void relay_reap(struct httpd *h)
{
	pthread_mutex_lock(&h->lock);
	for (struct relay *r = h->relays; r; r = r->next) {
		if (!r->kill)
			continue;
		if (r->cl)
			lws_set_timeout(r->cl, PENDING_TIMEOUT_USER_OK, LWS_TO_KILL_ASYNC);
		if (r->up)
			lws_set_timeout(r->up, PENDING_TIMEOUT_USER_OK, LWS_TO_KILL_ASYNC);
	}
	pthread_mutex_unlock(&h->lock);
}

static void relay_maybe_free(struct relay *r)
{
	if (r->cl || r->up)
		return;
	struct httpd *h = r->h;
	pthread_mutex_lock(&h->lock);
	struct relay **pp = &h->relays;
	while (*pp && *pp != r)
		pp = &(*pp)->next;
	if (*pp)
		*pp = r->next;
	pthread_mutex_unlock(&h->lock);
	lws_sul_cancel(&r->life);
	free(r->in);
	httpreq_stream_free(r->rw);
	httpd_queue_free(&r->to_up);
	httpd_queue_free(&r->to_cl);
	if (r->routed && r->r.on_close)
		r->r.on_close(r->r.close_ctx, r->r.tag);
	free(r);
}

/* ---- answers ------------------------------------------------------------------------ */

/* Sends a (an answer or a page) to the client, which is then closed. */
static void relay_answer(struct relay *r, const struct httpd_relay_answer *a, bool body)
{
	char head[2048];
	int n = snprintf(head, sizeof head,
			 "HTTP/1.1 %d %s\r\ncontent-type: %s\r\ncontent-length: %zu\r\n"
			 "cache-control: no-store\r\nx-content-type-options: nosniff\r\n"
			 "referrer-policy: no-referrer\r\nconnection: close\r\n%s\r\n",
			 a->status, relay_reason(a->status),
			 a->content_type ? a->content_type : "text/plain", a->body_len, a->headers);
	r->answering = true;
	if (n < 0 || (size_t)n >= sizeof head || httpd_queue_put(&r->to_cl, head, (size_t)n) < 0 ||
	    (body && httpd_queue_put(&r->to_cl, a->body, a->body_len) < 0)) {
		lws_set_timeout(r->cl, PENDING_TIMEOUT_USER_OK, LWS_TO_KILL_ASYNC);
		return;
	}
	/* What the client still sends is read and dropped (RAW_RX), so that
	 * closing after the answer is a FIN it can read the answer before, not
	 * a reset; it has 10 s. */
	lws_set_timeout(r->cl, PENDING_TIMEOUT_USER_OK, 10);
	lws_callback_on_writable(r->cl);
}

/* The computer's side failed before its first byte: the client hears why. */
static void relay_fail(struct relay *r, const struct err *e)
{
	if (!r->cl || r->answering || r->guest_spoke)
		return;
	fprintf(stderr, "%s: relay to %s: %s\n", r->h->o.log_prefix, r->r.what, e->message);
	struct httpd_relay_answer a = {0};
	relay_page(&a, r->html, e);
	relay_answer(r, &a, true);
	free(a.body);
}

/* ---- routed: the WebSocket to envd -------------------------------------------------- */

static void relay_life_over(lws_sorted_usec_list_t *sul)
{
	struct relay *r = lws_container_of(sul, struct relay, life);
	if (r->cl)
		lws_set_timeout(r->cl, PENDING_TIMEOUT_USER_OK, LWS_TO_KILL_ASYNC);
	if (r->up)
		lws_set_timeout(r->up, PENDING_TIMEOUT_USER_OK, LWS_TO_KILL_ASYNC);
}

/* A byte passed: the idle deadline moves. */
static void relay_touch(struct relay *r)
{
	if (r->cl && !r->answering)
		lws_set_timeout(
		    r->cl, r->r.idle_seconds > 0 ? PENDING_TIMEOUT_USER_OK : NO_PENDING_TIMEOUT,
		    r->r.idle_seconds);
}

static int relay_to_up(void *ctx, const void *p, size_t n)
{
	struct relay *r = ctx;
	return httpd_queue_put(&r->to_up, p, n);
}

/* Client bytes through the rewriter toward envd; -1 closes the client. */
static int relay_feed(struct relay *r, const void *in, size_t len)
{
	struct err e = {0};
	if (httpreq_stream_feed(r->rw, in, len, relay_to_up, r, &e) < 0) {
		fprintf(stderr, "%s: relay to %s: the client's requests: %s\n", r->h->o.log_prefix,
			r->r.what, e.message);
		return -1;
	}
	if (r->up && r->up_open && r->to_up.len)
		lws_callback_on_writable(r->up);
	if (r->to_up.len > TUNNEL_HIGH && !r->cl_paused && r->cl) {
		r->cl_paused = true;
		lws_rx_flow_control(r->cl, 0);
	}
	return 0;
}

static int relay_dial(struct relay *r)
{
	struct lws_client_connect_info ci;
	memset(&ci, 0, sizeof ci);
	char addr[330], path[64];
	int port = 0;
	if (strncmp(r->r.address, "unix:", 5) == 0) {
		snprintf(addr, sizeof addr, "+%s", r->r.address + 5); /* lws: a unix socket */
	} else if (strncmp(r->r.address, "tcp:", 4) == 0 && strrchr(r->r.address, ':')) {
		const char *colon = strrchr(r->r.address, ':');
		snprintf(addr, sizeof addr, "%.*s", (int)(colon - r->r.address - 4),
			 r->r.address + 4);
		port = atoi(colon + 1);
	} else {
		return -1;
	}
	snprintf(path, sizeof path, "/v1/tunnel?port=%d", r->r.port);
	ci.context = r->h->ctx;
	ci.vhost = r->h->relay_vh;
	ci.address = addr;
	ci.port = port;
	ci.path = path;
	ci.host = "envd";
	ci.protocol = "binary";
	ci.local_protocol_name = "cubicle-relay-up";
	ci.opaque_user_data = r;
	struct lws *up = lws_client_connect_via_info(&ci);
	if (up && !r->up_ended) /* it may have failed already, inside the call */
		r->up = up;
	return up || r->up_ended ? 0 : -1;
}

/* The router said where the connection goes: start relaying. */
static void relay_start(struct relay *r)
{
	struct err e = {0};
	struct httpreq_rules rules = {
	    .drop_cookie = r->r.drop_cookie[0] ? r->r.drop_cookie : NULL,
	    .host = r->r.host[0] ? r->r.host : NULL,
	    .drop_origin = r->r.drop_origin,
	    .strip_prefix = r->r.strip_prefix[0] ? r->r.strip_prefix : NULL,
	    .drop_query = r->r.drop_query[0] ? r->r.drop_query : NULL,
	};
	r->rw = httpreq_stream_new(&rules);
	if (!r->rw) {
		err_set(&e, ERR_INTERNAL, "out of memory");
		relay_fail(r, &e);
		return;
	}
	if (r->r.max_seconds > 0)
		lws_sul_schedule(r->h->ctx, 0, &r->life, relay_life_over,
				 (lws_usec_t)r->r.max_seconds * LWS_US_PER_SEC);
	relay_touch(r);
	/* What came with the head goes first (through the rewriter too). */
	char *in = r->in;
	size_t len = r->in_len;
	r->in = NULL;
	r->in_len = 0;
	int rc = relay_feed(r, in, len);
	free(in);
	if (rc < 0) {
		err_set(&e, ERR_BAD_REQUEST, "the request is malformed");
		relay_fail(r, &e);
		return;
	}
	if (relay_dial(r) < 0 && !r->answering) {
		err_set(&e, ERR_UNAVAILABLE, "cannot reach the envd of %s", r->r.what);
		relay_fail(r, &e);
	}
}

/* The first head is complete (or cannot be): answer or relay. */
static void relay_route(struct relay *r, long end)
{
	struct httpd *h = r->h;
	struct err e = {0};
	struct httpd_relay_answer a = {0};
	struct httpreq_head *head = malloc(sizeof *head);
	if (!head) {
		err_set(&e, ERR_INTERNAL, "out of memory");
		relay_page(&a, false, &e);
	} else if (end < 0 || httpreq_parse(r->in, (size_t)end, head, &e) < 0) {
		if (end < 0)
			err_set(&e, ERR_BAD_REQUEST,
				"the request head is malformed or longer than %d bytes",
				HTTPREQ_MAX_HEAD);
		relay_page(&a, false, &e);
	} else {
		r->html = relay_wants_html(head);
		if (h->o.relay && h->o.relay(h->o.ctx, head, &r->r, &a) == 0) {
			pthread_mutex_lock(&h->lock);
			r->routed = true;
			pthread_mutex_unlock(&h->lock);
			fprintf(stderr, "%s: relay %.*s %.*s to %s\n", h->o.log_prefix,
				(int)head->method_len, head->method,
				(int)(head->target_len < 120 ? head->target_len : 120),
				head->target, r->r.what);
			free(head);
			relay_start(r);
			return;
		}
		if (!h->o.relay) {
			err_set(&e, ERR_NOT_FOUND, "nothing is relayed here");
			relay_page(&a, r->html, &e);
		}
	}
	bool parsed = head && head->target;
	bool body = !(parsed && head->method_len == 4 && memcmp(head->method, "HEAD", 4) == 0);
	fprintf(stderr, "%s: relay %.*s: %d\n", h->o.log_prefix,
		parsed ? (int)(head->target_len < 120 ? head->target_len : 120) : 1,
		parsed ? head->target : "?", a.status);
	relay_answer(r, &a, body);
	free(a.body);
	free(head);
}

/* ---- the two callbacks ---------------------------------------------------------------- */

static void relay_up_gone(struct relay *r, struct lws *wsi, const char *why);

static int relay_cl_callback(struct lws *wsi, enum lws_callback_reasons reason, void *user,
			     void *in, size_t len)
{
	struct lws_context *ctx = lws_get_context(wsi);
	struct httpd *h = ctx ? lws_context_user(ctx) : NULL;
	struct relay *r = lws_get_opaque_user_data(wsi);
	switch (reason) {
	case LWS_CALLBACK_FILTER_NETWORK_CONNECTION:
		return h ? peer_admit(h, user, (int)(intptr_t)in) : 0;
	case LWS_CALLBACK_WSI_CREATE:
		if (h)
			peer_wsi_created(h, wsi);
		return 0;
	case LWS_CALLBACK_WSI_DESTROY:
		if (h)
			peer_wsi_destroyed(h, wsi);
		/* Every wsi of this vhost ends here, also one whose close
		 * callback never came (a WebSocket to envd killed while it was
		 * still connecting). */
		if (r && r->up == wsi)
			relay_up_gone(r, wsi, "closed while connecting");
		else if (r && r->cl == wsi) {
			r->cl = NULL;
			lws_set_opaque_user_data(wsi, NULL);
			if (r->up)
				lws_set_timeout(r->up, PENDING_TIMEOUT_USER_OK, LWS_TO_KILL_ASYNC);
			relay_maybe_free(r);
		}
		return 0;
	case LWS_CALLBACK_RAW_ADOPT:
		if (!h || !(r = calloc(1, sizeof *r)))
			return -1;
		r->h = h;
		r->cl = wsi;
		lws_set_opaque_user_data(wsi, r);
		pthread_mutex_lock(&h->lock);
		r->next = h->relays;
		h->relays = r;
		pthread_mutex_unlock(&h->lock);
		/* The first head must be complete this soon. */
		lws_set_timeout(wsi, PENDING_TIMEOUT_USER_OK, h->o.header_timeout_s);
		return 0;
	case LWS_CALLBACK_RAW_RX:
		if (!r)
			return -1;
		if (r->answering)
			return 0; /* an answer is on its way: the rest is dropped */
		if (r->routed) {
			relay_touch(r);
			return relay_feed(r, in, len);
		}
		if (r->in_len + len > RELAY_IN_MAX) {
			struct err e = {0};
			err_set(&e, ERR_BAD_REQUEST, "the request head is longer than %d bytes",
				HTTPREQ_MAX_HEAD);
			relay_fail(r, &e);
			return 0;
		}
		char *grown = realloc(r->in, r->in_len + len + 1);
		if (!grown)
			return -1;
		r->in = grown;
		memcpy(r->in + r->in_len, in, len);
		r->in_len += len;
		long end = httpreq_head_end(r->in, r->in_len);
		if (end != 0)
			relay_route(r, end);
		return 0;
	case LWS_CALLBACK_RAW_WRITEABLE:
		if (!r)
			return -1;
		if (httpd_queue_send(wsi, &r->to_cl, LWS_WRITE_RAW, HTTPD_CHUNK) < 0)
			return -1;
		if (r->to_cl.len == 0 && (r->answering || (r->routed && !r->up)))
			return -1; /* all of it went out: done */
		if (r->up_paused && r->up && r->to_cl.len < TUNNEL_HIGH / 2) {
			r->up_paused = false;
			lws_rx_flow_control(r->up, 1);
		}
		return 0;
	case LWS_CALLBACK_RAW_CLOSE:
		if (r) {
			r->cl = NULL;
			lws_set_opaque_user_data(wsi, NULL);
			if (r->up)
				lws_set_timeout(r->up, PENDING_TIMEOUT_USER_OK, LWS_TO_KILL_ASYNC);
			relay_maybe_free(r);
		}
		return 0;
	default:
		break;
	}
	return 0;
}

/* envd's side ended (closed, refused, unreachable). */
static void relay_up_gone(struct relay *r, struct lws *wsi, const char *why)
{
	lws_set_opaque_user_data(wsi, NULL);
	r->up = NULL;
	r->up_open = false;
	r->up_ended = true;
	struct err e = {0};
	if (r->up_close_code == 4502)
		err_set(&e, ERR_BAD_GATEWAY,
			"nothing answers on %s: is a server listening there (on 127.0.0.1 or "
			"0.0.0.0)?",
			r->r.what);
	else if (r->up_http_status == 429)
		err_set(&e, ERR_UNAVAILABLE, "%s has too many connections open; retry", r->r.what);
	else if (r->up_http_status)
		err_set(&e, ERR_BAD_GATEWAY, "the envd of %s refused the tunnel (HTTP %d)",
			r->r.what, r->up_http_status);
	else if (r->up_close_code || r->up_open || !why)
		err_set(&e, ERR_BAD_GATEWAY,
			"the server on %s closed the connection without an answer", r->r.what);
	else
		err_set(&e, ERR_UNAVAILABLE, "cannot reach the envd of %s: %s", r->r.what, why);
	if (r->cl && !r->guest_spoke && !r->answering && r->rw &&
	    httpreq_stream_requests(r->rw) > 0)
		relay_fail(r, &e);
	else if (r->cl)
		lws_callback_on_writable(r->cl); /* what came goes out, then the close */
	relay_maybe_free(r);
}

static int relay_up_callback(struct lws *wsi, enum lws_callback_reasons reason, void *user,
			     void *in, size_t len)
{
	(void)user;
	struct relay *r = lws_get_opaque_user_data(wsi);
	switch (reason) {
	case LWS_CALLBACK_CLIENT_APPEND_HANDSHAKE_HEADER: {
		if (!r)
			return -1;
		unsigned char **p = in, *end = (*p) + len;
		char auth[160];
		snprintf(auth, sizeof auth, "Bearer %s", r->r.token);
		return lws_add_http_header_by_token(wsi, WSI_TOKEN_HTTP_AUTHORIZATION,
						    (unsigned char *)auth, (int)strlen(auth), p,
						    end)
			   ? -1
			   : 0;
	}
	case LWS_CALLBACK_CLIENT_ESTABLISHED:
		if (!r || !r->cl)
			return -1;
		r->up = wsi;
		r->up_open = true;
		if (r->to_up.len)
			lws_callback_on_writable(wsi);
		return 0;
	case LWS_CALLBACK_CLIENT_RECEIVE:
		if (!r || !r->cl || r->answering)
			return -1;
		r->guest_spoke = true;
		if (httpd_queue_put(&r->to_cl, in, len) < 0)
			return -1;
		relay_touch(r);
		lws_callback_on_writable(r->cl);
		if (r->to_cl.len > TUNNEL_HIGH && !r->up_paused) {
			r->up_paused = true;
			lws_rx_flow_control(wsi, 0);
		}
		return 0;
	case LWS_CALLBACK_CLIENT_WRITEABLE:
		if (!r)
			return -1;
		if (httpd_queue_send(wsi, &r->to_up, LWS_WRITE_BINARY, HTTPD_CHUNK) < 0)
			return -1;
		if (r->cl_paused && r->cl && r->to_up.len < TUNNEL_HIGH / 2) {
			r->cl_paused = false;
			lws_rx_flow_control(r->cl, 1);
		}
		return 0;
	case LWS_CALLBACK_WS_PEER_INITIATED_CLOSE:
		if (r && len >= 2) {
			const unsigned char *p = in;
			r->up_close_code = p[0] << 8 | p[1];
			snprintf(r->up_close_reason, sizeof r->up_close_reason, "%.*s",
				 (int)(len - 2), (const char *)in + 2);
		}
		return 0;
	case LWS_CALLBACK_CLIENT_CONNECTION_ERROR:
		if (r) {
			r->up_http_status = (int)lws_http_client_http_response(wsi);
			char why[160];
			snprintf(why, sizeof why, "%.*s", in ? (int)len : 0,
				 in ? (const char *)in : "");
			relay_up_gone(r, wsi, why[0] ? why : "connection failed");
		}
		return 0;
	case LWS_CALLBACK_CLIENT_CLOSED:
		if (r)
			relay_up_gone(r, wsi, NULL);
		return 0;
	case LWS_CALLBACK_WSI_DESTROY:
		/* Its end without a close callback (killed while connecting). */
		if (r && r->up == wsi)
			relay_up_gone(r, wsi, "closed while connecting");
		return 0;
	default:
		break;
	}
	return 0;
}

static const struct lws_protocols relay_protocols[] = {
    {"cubicle-relay", relay_cl_callback, 0, HTTPD_CHUNK, 0, NULL, 0},
    {"cubicle-relay-up", relay_up_callback, 0, HTTPD_CHUNK, 0, NULL, 0},
    {NULL, NULL, 0, 0, 0, NULL, 0},
};

int relay_listen(struct httpd *h, struct err *e)
{
	const char *hp = h->o.relay_listen;
	if (strncmp(hp, "tcp:", 4) == 0)
		hp += 4;
	const char *colon = strrchr(hp, ':');
	char *end;
	long port = colon ? strtol(colon + 1, &end, 10) : -1;
	if (!colon || colon == hp || *end || port < 0 || port > 65535 ||
	    (size_t)(colon - hp) >= sizeof h->relay_host)
		return err_param(e, "relay_listen", "expected [tcp:]HOST:PORT, not '%s'",
				 h->o.relay_listen);
	memcpy(h->relay_host, hp, (size_t)(colon - hp));
	h->relay_host[colon - hp] = 0;
	struct lws_context_creation_info vi;
	memset(&vi, 0, sizeof vi);
	vi.vhost_name = "cubicle-relay";
	vi.iface = h->relay_host;
	vi.port = (int)port;
	vi.protocols = relay_protocols;
	vi.options =
	    LWS_SERVER_OPTION_ADOPT_APPLY_LISTEN_ACCEPT_CONFIG | LWS_SERVER_OPTION_DISABLE_IPV6;
	vi.listen_accept_role = "raw-skt";
	vi.listen_accept_protocol = "cubicle-relay";
	vi.timeout_secs = 10; /* the WebSocket to envd: connected and upgraded within */
	h->relay_vh = lws_create_vhost(h->ctx, &vi);
	if (!h->relay_vh)
		return err_set(e, ERR_UNAVAILABLE, "cannot listen on %s (in use?)",
			       h->o.relay_listen);
	snprintf(h->relay_address, sizeof h->relay_address, "tcp:%s:%d", h->relay_host,
		 lws_get_vhost_listen_port(h->relay_vh));
	return 0;
}
