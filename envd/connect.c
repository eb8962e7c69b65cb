/*
 * connect: the machine's side of a connected machine (connect.h).
 *
 * Two threads: the lws thread owns the WebSocket (a libwebsockets client)
 * and relays its binary frames, byte for byte, to one end of a socketpair
 * it adopts; the link thread runs the multiplexer (wire/mux.h) on the
 * other end, dialling envd's own UNIX sockets for each stream, and
 * reconnects with a growing pause (1 s doubling to 15 s) when the link
 * ends.
 */

#include "connect.h"

#include <errno.h>
#include <fcntl.h>
#include <libwebsockets.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>
#include <jansson.h>

#include "clock.h"
#include "httpd.h"
#include "mux.h"

#define CN_HIGH	 (1024 * 1024) /* bytes queued one way before its reader pauses */
#define CN_CHUNK 16384

struct connector {
	struct connect_opts o;
	char url_host[256], url_path[512];
	int url_port;
	bool tls;
	char token[512];       /* what the next connection presents */
	bool token_is_connect; /* token is the single-use connect token */

	pthread_mutex_t lock;
	pthread_cond_t cond;
	bool hello; /* the first HELLO came */
	char api_token[80];
	bool ended;
	char why[512];

	struct lws_context *ctx;
	int pending_fd; /* a socketpair end for the lws thread's next connection */

	pthread_t lws_thread, link_thread;
};

static void cn_end(struct connector *cn, const char *fmt, const char *arg)
{
	pthread_mutex_lock(&cn->lock);
	if (!cn->ended) {
		cn->ended = true;
		snprintf(cn->why, sizeof cn->why, fmt, arg);
	}
	pthread_cond_broadcast(&cn->cond);
	pthread_mutex_unlock(&cn->lock);
}

/* ---- the credential ------------------------------------------------------------- */

static int cn_save_credential(struct connector *cn, const char *cred)
{
	char tmp[4200];
	snprintf(tmp, sizeof tmp, "%s.new", cn->o.credential_file);
	int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (fd < 0)
		return -1;
	size_t n = strlen(cred);
	bool ok = write(fd, cred, n) == (ssize_t)n && write(fd, "\n", 1) == 1 && fsync(fd) == 0;
	close(fd);
	if (!ok || rename(tmp, cn->o.credential_file) < 0) {
		unlink(tmp);
		return -1;
	}
	return 0;
}

static int cn_load_credential(struct connector *cn)
{
	FILE *f = fopen(cn->o.credential_file, "re");
	if (!f)
		return -1;
	char buf[512];
	char *line = fgets(buf, sizeof buf, f);
	fclose(f);
	if (!line)
		return -1;
	buf[strcspn(buf, "\r\n")] = 0;
	if (strlen(buf) < 16)
		return -1;
	snprintf(cn->token, sizeof cn->token, "%s", buf);
	return 0;
}

/* ---- the multiplexer's callbacks (link thread) ---------------------------------- */

static int cn_dial(void *ctx, const char *target)
{
	struct connector *cn = ctx;
	const char *path = strcmp(target, "http") == 0	? cn->o.http_sock
			   : strcmp(target, "vnc") == 0 ? cn->o.vnc_sock
							: NULL;
	if (!path)
		return -1;
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	snprintf(sa.sun_path, sizeof sa.sun_path, "%s", path);
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0)
		return -1;
	if (connect(fd, (struct sockaddr *)&sa, sizeof sa) < 0 && errno != EINPROGRESS) {
		close(fd);
		return -1;
	}
	return fd;
}

static void cn_control(void *ctx, enum mux_type type, const unsigned char *p, size_t n)
{
	struct connector *cn = ctx;
	if (type == MUX_BYE) {
		char reason[300];
		snprintf(reason, sizeof reason, "%.*s", (int)(n < 256 ? n : 256), (const char *)p);
		cn_end(cn, "cubicled disconnected this machine: %s", reason);
		return;
	}
	json_t *j = json_loadb((const char *)p, n, 0, NULL);
	const char *tok = json_string_value(json_object_get(j, "token"));
	const char *cred = json_string_value(json_object_get(j, "credential"));
	const char *id = json_string_value(json_object_get(j, "id"));
	if (cred && strlen(cred) < sizeof cn->token) {
		if (cn_save_credential(cn, cred) < 0)
			fprintf(stderr, "envd: cannot save the credential in %s: %s\n",
				cn->o.credential_file, strerror(errno));
		pthread_mutex_lock(&cn->lock);
		snprintf(cn->token, sizeof cn->token, "%s", cred);
		cn->token_is_connect = false;
		pthread_mutex_unlock(&cn->lock);
	}
	if (tok && strlen(tok) < sizeof cn->api_token) {
		pthread_mutex_lock(&cn->lock);
		if (!cn->hello) {
			snprintf(cn->api_token, sizeof cn->api_token, "%s", tok);
			cn->hello = true;
			pthread_cond_broadcast(&cn->cond);
		}
		pthread_mutex_unlock(&cn->lock);
	}
	fprintf(stderr, "envd: connected as %s\n", id ? id : "?");
	json_decref(j);
}

/* ---- the WebSocket (lws thread) -------------------------------------------------- */

/* One connection attempt: its WebSocket, the socketpair end it relays to,
 * what waits each way. Freed when both the WebSocket and the raw end are
 * gone (an attempt the link thread gave up on ends by itself). */
struct cn_conn {
	struct connector *cn;
	int fd; /* the socketpair end until adopted, then -1 */
	struct lws *ws, *raw;
	bool ws_done, raw_done;
	struct httpd_queue to_ws, to_raw;
	bool ws_paused, raw_paused;
};

static void cn_conn_maybe_free(struct cn_conn *k)
{
	if (!k->ws_done || !k->raw_done)
		return;
	if (k->fd >= 0)
		close(k->fd);
	httpd_queue_free(&k->to_ws);
	httpd_queue_free(&k->to_raw);
	free(k);
}

static void cn_connect(struct connector *cn, int fd)
{
	struct cn_conn *k = calloc(1, sizeof *k);
	if (!k) {
		close(fd);
		return;
	}
	k->cn = cn;
	k->fd = fd;
	char path[1200], host[300];
	char hn[128];
	snprintf(hn, sizeof hn, "%s", cn->o.hostname);
	for (char *p = hn; *p; p++)
		if (!(*p == '-' || *p == '.' || *p == '_' || (*p >= '0' && *p <= '9') ||
		      (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z')))
			*p = '_';
	snprintf(path, sizeof path, "%s/v1/connect?hostname=%s&display=%d&width=%d&height=%d",
		 cn->url_path, hn, cn->o.display ? 1 : 0, cn->o.width, cn->o.height);
	if ((cn->tls && cn->url_port != 443) || (!cn->tls && cn->url_port != 80))
		snprintf(host, sizeof host, "%s:%d", cn->url_host, cn->url_port);
	else
		snprintf(host, sizeof host, "%s", cn->url_host);
	struct lws_client_connect_info ci = {0};
	ci.context = cn->ctx;
	ci.address = cn->url_host;
	ci.port = cn->url_port;
	ci.ssl_connection = cn->tls ? LCCSCF_USE_SSL : 0;
	ci.path = path;
	ci.host = host;
	ci.origin = host;
	ci.protocol = "binary";
	ci.local_protocol_name = "envd-connect";
	ci.opaque_user_data = k;
	k->raw_done = true; /* until adopted */
	k->ws = lws_client_connect_via_info(&ci);
	if (!k->ws) {
		k->ws_done = true;
		cn_conn_maybe_free(k);
	}
}

static int cn_ws_callback(struct lws *wsi, enum lws_callback_reasons reason, void *user, void *in,
			  size_t len)
{
	(void)user;
	struct lws_context *ctx = lws_get_context(wsi);
	struct connector *cn = ctx ? lws_context_user(ctx) : NULL;
	struct cn_conn *k = lws_get_opaque_user_data(wsi);
	if (!cn)
		return 0;
	switch (reason) {
	case LWS_CALLBACK_EVENT_WAIT_CANCELLED: {
		pthread_mutex_lock(&cn->lock);
		int fd = cn->pending_fd;
		cn->pending_fd = -1;
		pthread_mutex_unlock(&cn->lock);
		if (fd >= 0)
			cn_connect(cn, fd);
		return 0;
	}
	case LWS_CALLBACK_CLIENT_APPEND_HANDSHAKE_HEADER: {
		unsigned char **p = in, *end = (*p) + len;
		char auth[600];
		pthread_mutex_lock(&cn->lock);
		snprintf(auth, sizeof auth, "Bearer %s", cn->token);
		pthread_mutex_unlock(&cn->lock);
		if (lws_add_http_header_by_token(wsi, WSI_TOKEN_HTTP_AUTHORIZATION,
						 (unsigned char *)auth, (int)strlen(auth), p, end))
			return -1;
		return 0;
	}
	case LWS_CALLBACK_CLIENT_ESTABLISHED: {
		if (!k || k->fd < 0)
			return -1;
		lws_sock_file_fd_type fd = {.sockfd = k->fd};
		k->raw = lws_adopt_descriptor_vhost(lws_get_vhost(wsi), LWS_ADOPT_SOCKET, fd,
						    "envd-raw", NULL);
		k->fd = -1; /* lws owns (or closed) it now */
		if (!k->raw)
			return -1;
		k->raw_done = false;
		lws_set_opaque_user_data(k->raw, k);
		return 0;
	}
	case LWS_CALLBACK_CLIENT_RECEIVE:
		if (!k || !k->raw || httpd_queue_put(&k->to_raw, in, len) < 0)
			return -1;
		lws_callback_on_writable(k->raw);
		if (k->to_raw.len > CN_HIGH && !k->ws_paused) {
			k->ws_paused = true;
			lws_rx_flow_control(wsi, 0);
		}
		return 0;
	case LWS_CALLBACK_CLIENT_WRITEABLE:
		if (!k || httpd_queue_send(wsi, &k->to_ws, LWS_WRITE_BINARY, CN_CHUNK) < 0)
			return -1;
		if (k->raw_paused && k->to_ws.len < CN_HIGH / 2 && k->raw) {
			k->raw_paused = false;
			lws_rx_flow_control(k->raw, 1);
		}
		return 0;
	case LWS_CALLBACK_CLIENT_CONNECTION_ERROR: {
		int status = (int)lws_http_client_http_response(wsi);
		fprintf(stderr, "envd: cannot connect to %s: %.*s\n", cn->o.url, in ? (int)len : 0,
			in ? (const char *)in : "");
		if (status == 401 || status == 403 || status == 404 || status == 410) {
			pthread_mutex_lock(&cn->lock);
			bool was_connect = cn->token_is_connect;
			pthread_mutex_unlock(&cn->lock);
			char msg[80];
			snprintf(msg, sizeof msg, "%d", status);
			cn_end(cn,
			       was_connect
				   ? "cubicled refused the connect token (HTTP %s): it may be "
				     "used, expired or revoked; ask for a new one"
				   : "cubicled refused this machine's credential (HTTP %s): "
				     "the machine was deleted; connect it again with a new "
				     "token",
			       msg);
		}
	}
		/* fall through */
	case LWS_CALLBACK_CLIENT_CLOSED:
		if (k) {
			lws_set_opaque_user_data(wsi, NULL);
			k->ws = NULL;
			k->ws_done = true;
			if (k->raw)
				lws_set_timeout(k->raw, PENDING_TIMEOUT_USER_OK, LWS_TO_KILL_ASYNC);
			cn_conn_maybe_free(k);
		}
		return 0;
	default:
		break;
	}
	return 0;
}

static int cn_raw_callback(struct lws *wsi, enum lws_callback_reasons reason, void *user, void *in,
			   size_t len)
{
	(void)user;
	struct cn_conn *k = lws_get_opaque_user_data(wsi);
	switch (reason) {
	case LWS_CALLBACK_RAW_RX:
		if (!k || !k->ws || httpd_queue_put(&k->to_ws, in, len) < 0)
			return -1;
		lws_callback_on_writable(k->ws);
		if (k->to_ws.len > CN_HIGH && !k->raw_paused) {
			k->raw_paused = true;
			lws_rx_flow_control(wsi, 0);
		}
		return 0;
	case LWS_CALLBACK_RAW_WRITEABLE:
		if (!k || httpd_queue_send(wsi, &k->to_raw, LWS_WRITE_RAW, CN_CHUNK) < 0)
			return -1;
		if (k->ws_paused && k->to_raw.len < CN_HIGH / 2 && k->ws) {
			k->ws_paused = false;
			lws_rx_flow_control(k->ws, 1);
		}
		return 0;
	case LWS_CALLBACK_RAW_CLOSE:
		if (k) {
			lws_set_opaque_user_data(wsi, NULL);
			k->raw = NULL;
			k->raw_done = true;
			if (k->ws)
				lws_set_timeout(k->ws, PENDING_TIMEOUT_USER_OK, LWS_TO_KILL_ASYNC);
			cn_conn_maybe_free(k);
		}
		return 0;
	default:
		break;
	}
	return 0;
}

static const struct lws_protocols cn_protocols[] = {
    {"envd-connect", cn_ws_callback, 0, CN_CHUNK, 0, NULL, 0},
    {"envd-raw", cn_raw_callback, 0, CN_CHUNK, 0, NULL, 0},
    {NULL, NULL, 0, 0, 0, NULL, 0},
};

static void *cn_lws_main(void *arg)
{
	struct connector *cn = arg;
	for (;;) {
		pthread_mutex_lock(&cn->lock);
		bool ended = cn->ended;
		pthread_mutex_unlock(&cn->lock);
		if (ended)
			break;
		lws_service(cn->ctx, 0);
	}
	return NULL;
}

/* ---- the link thread ------------------------------------------------------------- */

static void *cn_link_main(void *arg)
{
	struct connector *cn = arg;
	int pause_ms = 1000;
	for (;;) {
		pthread_mutex_lock(&cn->lock);
		bool ended = cn->ended;
		pthread_mutex_unlock(&cn->lock);
		if (ended)
			break;
		int sp[2];
		if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sp) < 0) {
			cn_end(cn, "socketpair: %s", strerror(errno));
			break;
		}
		/* The lws thread takes sp[0] and dials (a cancel wakes its loop). */
		pthread_mutex_lock(&cn->lock);
		if (cn->pending_fd >= 0)
			close(cn->pending_fd);
		cn->pending_fd = sp[0];
		pthread_mutex_unlock(&cn->lock);
		lws_cancel_service(cn->ctx);
		struct mux_opts mo = {
		    .link = sp[1],
		    .host = false,
		    .dial = cn_dial,
		    .on_control = cn_control,
		    .ctx = cn,
		    .dead_ms = 6000,
		};
		struct mux *m = mux_new(&mo);
		char why[256] = "";
		int64_t began = clock_now_ms();
		int rc = m ? mux_run(m, why, sizeof why) : -1;
		mux_free(m);
		close(sp[1]);
		if (rc == 1)
			break; /* BYE: cn_control ended it */
		pthread_mutex_lock(&cn->lock);
		ended = cn->ended;
		pthread_mutex_unlock(&cn->lock);
		if (ended)
			break;
		if (clock_now_ms() - began > 10000)
			pause_ms = 1000;
		fprintf(stderr, "envd: link to %s ended (%s); reconnecting in %d ms\n", cn->o.url,
			why, pause_ms);
		for (int64_t until = clock_now_ms() + pause_ms; clock_now_ms() < until;) {
			pthread_mutex_lock(&cn->lock);
			ended = cn->ended;
			pthread_mutex_unlock(&cn->lock);
			if (ended)
				break;
			clock_sleep_ms(100);
		}
		pause_ms = pause_ms * 2 > 15000 ? 15000 : pause_ms * 2;
	}
	lws_cancel_service(cn->ctx);
	return NULL;
}

struct connector *connect_start(const struct connect_opts *o, struct err *e)
{
	struct connector *cn = calloc(1, sizeof *cn);
	if (!cn) {
		err_set(e, ERR_INTERNAL, "out of memory");
		return NULL;
	}
	cn->o = *o;
	cn->pending_fd = -1;
	pthread_mutex_init(&cn->lock, NULL);
	pthread_cond_init(&cn->cond, NULL);
	char url[1024];
	snprintf(url, sizeof url, "%s", o->url);
	const char *proto = NULL, *addr = NULL, *path = NULL;
	int port = 0;
	if (lws_parse_uri(url, &proto, &addr, &port, &path) ||
	    (strcmp(proto, "http") != 0 && strcmp(proto, "https") != 0) || !*addr) {
		err_set(e, ERR_INVALID, "--connect takes http://HOST[:PORT] or https://..., not %s",
			o->url);
		goto fail;
	}
	cn->tls = strcmp(proto, "https") == 0;
	cn->url_port = port; /* 80 or 443 when the URL names none */
	snprintf(cn->url_host, sizeof cn->url_host, "%s", addr);
	/* path comes without its leading '/'; drop a trailing one. */
	snprintf(cn->url_path, sizeof cn->url_path, "%s%s", *path ? "/" : "", path);
	size_t pl = strlen(cn->url_path);
	while (pl && cn->url_path[pl - 1] == '/')
		cn->url_path[--pl] = 0;
	if (o->token) {
		snprintf(cn->token, sizeof cn->token, "%s", o->token);
		cn->token_is_connect = true;
	} else if (cn_load_credential(cn) < 0) {
		err_set(e, ERR_INVALID,
			"no connect token (--token-file) and no credential in %s: ask cubicled for "
			"a connect token",
			o->credential_file);
		goto fail;
	}
	struct lws_context_creation_info ci = {0};
	ci.port = CONTEXT_PORT_NO_LISTEN;
	ci.protocols = cn_protocols;
	ci.user = cn;
	ci.options = cn->tls ? LWS_SERVER_OPTION_DO_SSL_GLOBAL_INIT : 0;
	lws_set_log_level(LLL_ERR, NULL);
	cn->ctx = lws_create_context(&ci);
	if (!cn->ctx) {
		err_set(e, ERR_INTERNAL, "cannot create the WebSocket client");
		goto fail;
	}
	pthread_create(&cn->lws_thread, NULL, cn_lws_main, cn);
	pthread_create(&cn->link_thread, NULL, cn_link_main, cn);
	return cn;
fail:
	pthread_mutex_destroy(&cn->lock);
	pthread_cond_destroy(&cn->cond);
	free(cn);
	return NULL;
}

int connect_hello(struct connector *cn, char *token, size_t len, struct err *e)
{
	struct timespec until;
	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += 60;
	pthread_mutex_lock(&cn->lock);
	while (!cn->hello && !cn->ended)
		if (pthread_cond_timedwait(&cn->cond, &cn->lock, &until) == ETIMEDOUT)
			break;
	int rc = 0;
	if (cn->hello)
		snprintf(token, len, "%s", cn->api_token);
	else
		rc = err_set(e, ERR_UNAVAILABLE, "%s",
			     cn->ended ? cn->why : "no answer from cubicled in 60 s");
	pthread_mutex_unlock(&cn->lock);
	return rc;
}

void connect_wait_end(struct connector *cn, char *why, size_t len)
{
	pthread_mutex_lock(&cn->lock);
	while (!cn->ended)
		pthread_cond_wait(&cn->cond, &cn->lock);
	snprintf(why, len, "%s", cn->why);
	pthread_mutex_unlock(&cn->lock);
}
