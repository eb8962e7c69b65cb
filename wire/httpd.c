/*
 * httpd: see httpd.h for the model.
 *
 * Each request lives in a heap `struct exchange`, not in lws's per-session
 * memory, so a worker thread can keep using it after the client went away.
 * The connection's session data only points at the current exchange.
 * Ownership: the loop owns an exchange until its handler starts; then the
 * worker owns the request and response until it marks the job done; if the
 * connection closed meanwhile (`orphaned`), the worker frees it, otherwise
 * the loop collects it, sends the response and frees it. `lock` guards only
 * the job list and those two flags.
 */
#include "httpd.h"
#include "clock.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <netinet/in.h>
#include <time.h>
#include <unistd.h>

#include <libwebsockets.h>

#include "httpd-internal.h"

/* ---- responses -------------------------------------------------------------- */

const char *httpd_query(const struct httpd_request *req, const char *name)
{
	size_t n = strlen(name);
	for (size_t i = 0; i < req->nquery; i++)
		if (strncmp(req->query[i], name, n) == 0 && req->query[i][n] == '=')
			return req->query[i] + n + 1;
	return NULL;
}

void httpd_add_header(struct httpd_response *resp, const char *name, const char *value)
{
	if (resp->nheaders == HTTPD_MAX_HEADERS)
		return;
	snprintf(resp->headers[resp->nheaders].name, sizeof resp->headers[0].name, "%s", name);
	snprintf(resp->headers[resp->nheaders].value, sizeof resp->headers[0].value, "%s", value);
	resp->nheaders++;
}

void httpd_respond_json(struct httpd_response *resp, int status, json_t *j)
{
	char *s = j ? json_dumps(j, JSON_COMPACT) : NULL;
	json_decref(j);
	if (!s) {
		s = strdup(
		    "{\"error\":{\"code\":\"internal\",\"message\":\"cannot encode the answer\"}}");
		status = 500;
	}
	free(resp->body);
	resp->status = status;
	resp->content_type = "application/json";
	resp->body = (unsigned char *)s;
	resp->body_len = s ? strlen(s) : 0;
}

void httpd_respond_err(struct httpd_response *resp, const struct err *e)
{
	httpd_respond_json(resp, err_http_status(e->code), err_to_json(e));
	resp->err_code = err_code_name(e->code);
}

void httpd_respond_err_detail(struct httpd_response *resp, const struct err *e, json_t *detail)
{
	json_t *ej = err_to_json(e);
	if (json_is_object(detail)) {
		json_object_update(detail, ej);
		json_decref(ej);
		ej = detail;
	} else {
		json_decref(detail);
	}
	httpd_respond_json(resp, err_http_status(e->code), ej);
	resp->err_code = err_code_name(e->code);
}

/* ---- exchanges ---------------------------------------------------------------- */

/* The request's end: httpd_opts.on_done, then its log line (log.h's
 * format). Once per exchange, from exchange_free. */
static void exchange_end(struct exchange *x)
{
	struct httpd *h = x->h;
	const struct httpd_response *r = &x->resp;
	struct httpd_done d = {
	    .status = r->status ? r->status : 200,
	    .us = clock_now_us() - x->t0_us,
	    .bytes_out = x->headers_sent ? x->resp_sent : 0,
	    .gone = !x->finished,
	};
	if (d.status >= 400)
		d.err_code = r->err_code ? r->err_code : err_code_static(NULL, d.status);
	if (h->o.on_done)
		h->o.on_done(h->o.ctx, &x->req, &d);
	const char *const *kv = x->route.log_kv;
	if (log_get_format() == LOG_JSON) {
		char line[2048], path[600];
		size_t k = 0;
		log_json_escape(path, sizeof path, &k, x->req.path);
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		struct tm tm;
		gmtime_r(&ts.tv_sec, &tm);
		int n = snprintf(line, sizeof line,
				 "{\"ts\":\"%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ\",\"prog\":\"%s\","
				 "\"rid\":\"%s\",\"method\":\"%s\",\"path\":\"%s\",\"status\":%d,"
				 "\"ms\":%.3f,\"bytes\":%llu",
				 tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour,
				 tm.tm_min, tm.tm_sec, ts.tv_nsec / 1000000, h->o.log_prefix,
				 x->req.request_id, x->req.method_name, path, d.status,
				 (double)d.us / 1e3, (unsigned long long)d.bytes_out);
		size_t at = n > 0 && (size_t)n < sizeof line ? (size_t)n : 0;
		if (d.err_code && at + 40 < sizeof line)
			at += (size_t)snprintf(line + at, sizeof line - at, ",\"error\":\"%s\"",
					       d.err_code);
		for (int i = 0; kv[i] && kv[i + 1] && at + 80 < sizeof line; i += 2) {
			at += (size_t)snprintf(line + at, sizeof line - at, ",\"%s\":\"", kv[i]);
			log_json_escape(line, sizeof line - 40, &at, kv[i + 1]);
			line[at++] = '"';
		}
		if (d.gone && at + 20 < sizeof line)
			at += (size_t)snprintf(line + at, sizeof line - at, ",\"gone\":true");
		if (at + 3 < sizeof line) {
			line[at++] = '}';
			line[at++] = '\n';
			line[at] = 0;
			fputs(line, stderr);
		}
		return;
	}
	char more[512] = "";
	size_t at = 0;
	for (int i = 0; kv[i] && kv[i + 1] && at < sizeof more; i += 2)
		at += (size_t)snprintf(more + at, sizeof more - at, " %s=%.100s", kv[i], kv[i + 1]);
	fprintf(stderr, "%s: %s %d %.2fms rid=%s%s%s\n", h->o.log_prefix, x->target, d.status,
		(double)d.us / 1e3, x->req.request_id, more, d.gone ? " gone" : "");
}

static void exchange_free(struct exchange *x)
{
	if (x->target[0])
		exchange_end(x);
	/* Scheduled only while the body arrives (loop thread); a worker frees
	 * an exchange only after that, when this is a no-op. */
	lws_sul_cancel(&x->body_sul);
	json_decref(x->route.err_detail);
	free(x->req.body);
	for (size_t i = 0; i < x->req.nquery; i++)
		free(x->req.query[i]);
	if (x->route.body_fd >= 0)
		close(x->route.body_fd);
	if (!x->handler_ran && x->route.abandon_unlink)
		unlink(x->route.abandon_unlink);
	free(x->route.abandon_unlink);
	if (x->route.user_free)
		x->route.user_free(x->route.user);
	free(x->resp.body);
	if (x->resp.file_fd >= 0)
		close(x->resp.file_fd);
	free(x);
}

static double exchange_ms(const struct exchange *x)
{
	return (double)(clock_now_us() - x->t0_us) / 1e3;
}

/* Answers now, before the body was read: the connection closes afterwards.
 * retry_after_s > 0 adds Retry-After; detail's members (stolen) go into the
 * "error" object. */
static void exchange_answer_early_ex(struct exchange *x, const struct err *e, int retry_after_s,
				     json_t *detail)
{
	lws_sul_cancel(&x->body_sul);
	json_t *j = err_to_json(e);
	if (json_is_object(detail))
		json_object_update(json_object_get(j, "error"), detail);
	json_decref(detail);
	httpd_respond_json(&x->resp, err_http_status(e->code), j);
	x->resp.err_code = err_code_name(e->code);
	if (retry_after_s > 0) {
		char v[16];
		snprintf(v, sizeof v, "%d", retry_after_s);
		httpd_add_header(&x->resp, "retry-after:", v);
	}
	x->state = X_RESPOND;
	x->close_after = true;
	lws_callback_on_writable(x->wsi);
}

static void exchange_answer_early(struct exchange *x, const struct err *e)
{
	exchange_answer_early_ex(x, e, 0, NULL);
}

static int httpd_header(struct lws *wsi, const char *name, const char *value, unsigned char **p,
			unsigned char *end)
{
	return lws_add_http_header_by_name(wsi, (const unsigned char *)name,
					   (const unsigned char *)value, (int)strlen(value), p,
					   end);
}

/* Sends headers, then one chunk per writable callback. 0 = keep going. */
static int exchange_write(struct httpd *h, struct lws *wsi, struct conn *c)
{
	static unsigned char buf[LWS_PRE + HTTPD_CHUNK];
	struct exchange *x = c->x;
	if (!x || x->state != X_RESPOND)
		return 0;
	struct httpd_response *r = &x->resp;
	bool is_file = r->file_fd >= 0;
	uint64_t total = is_file ? r->file_len : r->body_len;
	if (!x->headers_sent) {
		unsigned char *start = buf + LWS_PRE, *p = start, *end = buf + sizeof buf - 1;
		if (lws_add_http_common_headers(wsi, (unsigned)(r->status ? r->status : 200),
						r->content_type ? r->content_type
								: "application/octet-stream",
						total, &p, end))
			return -1;
		for (size_t i = 0; i < r->nheaders; i++)
			if (httpd_header(wsi, r->headers[i].name, r->headers[i].value, &p, end))
				return -1;
		if (x->close_after && httpd_header(wsi, "connection:", "close", &p, end))
			return -1;
		if (x->req.request_id[0] &&
		    httpd_header(wsi, "x-request-id:", x->req.request_id, &p, end))
			return -1;
		if (lws_finalize_write_http_header(wsi, start, &p, end))
			return -1;
		x->headers_sent = true;
		if (total > 0) {
			lws_callback_on_writable(wsi);
			return 0;
		}
	} else {
		size_t n;
		bool final;
		if (is_file) {
			uint64_t left = r->file_len - x->resp_sent;
			size_t want = left < HTTPD_CHUNK ? (size_t)left : HTTPD_CHUNK;
			ssize_t got = read(r->file_fd, buf + LWS_PRE, want);
			if (got <= 0) {
				/* The status is out already: a short body is the only signal. */
				lwsl_warn("%s: %s: read failed mid-stream\n", h->o.log_prefix,
					  x->target);
				return -1;
			}
			n = (size_t)got;
		} else {
			n = r->body_len - x->resp_sent;
			if (n > HTTPD_CHUNK)
				n = HTTPD_CHUNK;
			memcpy(buf + LWS_PRE, r->body + x->resp_sent, n);
		}
		x->resp_sent += n;
		final = x->resp_sent == total;
		if (lws_write(wsi, buf + LWS_PRE, n,
			      final ? LWS_WRITE_HTTP_FINAL : LWS_WRITE_HTTP) != (int)n)
			return -1;
		if (!final) {
			lws_callback_on_writable(wsi);
			return 0;
		}
	}
	x->finished = true;
	bool close_after = x->close_after;
	exchange_free(x);
	c->x = NULL;
	if (close_after || lws_http_transaction_completed(wsi))
		return -1;
	return 0;
}

/* ---- jobs --------------------------------------------------------------------- */

/* Under h->lock: the exchange's answer is ready (or its client gone). */
static void exchange_done_locked(struct httpd *h, struct exchange *x)
{
	x->done = true;
	if (x->orphaned) {
		struct exchange **pp = &h->jobs;
		while (*pp && *pp != x)
			pp = &(*pp)->next;
		if (*pp)
			*pp = x->next;
		exchange_free(x);
	}
	lws_cancel_service(h->ctx);
}

struct httpd_parked *httpd_park(struct httpd_request *req)
{
	struct exchange *x = lws_container_of(req, struct exchange, req);
	x->parked = true;
	return (struct httpd_parked *)x;
}

struct httpd_response *httpd_parked_response(struct httpd_parked *p)
{
	return &((struct exchange *)p)->resp;
}

bool httpd_parked_gone(struct httpd_parked *p)
{
	struct exchange *x = (struct exchange *)p;
	pthread_mutex_lock(&x->h->lock);
	bool gone = x->orphaned;
	pthread_mutex_unlock(&x->h->lock);
	return gone;
}

void httpd_parked_done(struct httpd_parked *p)
{
	struct exchange *x = (struct exchange *)p;
	struct httpd *h = x->h;
	pthread_mutex_lock(&h->lock);
	if (x->released)
		exchange_done_locked(h, x);
	else
		x->answered = true; /* its job thread is still on the way out: it finishes it */
	pthread_mutex_unlock(&h->lock);
}

static void *httpd_job(void *arg)
{
	struct exchange *x = arg;
	struct httpd *h = x->h;
	log_request_id_set(x->req.request_id);
	x->route.handler(h->o.ctx, &x->req, &x->resp);
	log_request_id_set(NULL);
	if (x->route.body_fd >= 0) {
		close(x->route.body_fd);
		x->route.body_fd = -1;
	}
	pthread_mutex_lock(&h->lock);
	if (x->parked && !x->answered) {
		/* Answered later by httpd_parked_done(), without this thread. */
		x->released = true;
		h->running--;
		pthread_cond_broadcast(&h->idle);
		pthread_mutex_unlock(&h->lock);
		return NULL;
	}
	exchange_done_locked(h, x);
	h->running--;
	pthread_cond_broadcast(&h->idle);
	pthread_mutex_unlock(&h->lock);
	return NULL;
}

static void exchange_start(struct httpd *h, struct exchange *x)
{
	struct err e = {0};
	x->handler_ran = true; /* from here on the handler owns spool files */
	pthread_mutex_lock(&h->lock);
	if (h->running >= h->o.max_jobs || h->stopping) {
		pthread_mutex_unlock(&h->lock);
		x->handler_ran = false;
		err_set(&e, ERR_UNAVAILABLE,
			"the server is busy (%d requests running); retry shortly", h->o.max_jobs);
		exchange_answer_early_ex(x, &e, 1, NULL);
		return;
	}
	pthread_attr_t attr;
	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	pthread_t t;
	x->state = X_RUNNING;
	int rc = pthread_create(&t, &attr, httpd_job, x);
	pthread_attr_destroy(&attr);
	if (rc != 0) {
		pthread_mutex_unlock(&h->lock);
		x->handler_ran = false;
		err_set(&e, ERR_UNAVAILABLE, "cannot start a worker thread: %s", strerror(rc));
		exchange_answer_early(x, &e);
		return;
	}
	h->running++;
	x->next = h->jobs;
	h->jobs = x;
	pthread_mutex_unlock(&h->lock);
	/* The handler may take long on purpose (a wait for a state, a long
	 * command, a cold boot): lws's own timeout (timeout_secs, which a
	 * request without a body is left under after its headers) must not
	 * close the connection under it. A client that goes away is still
	 * noticed, and the handlers bound their own time. */
	lws_set_timeout(x->wsi, NO_PENDING_TIMEOUT, 0);
}

/* Finished jobs whose clients are still there get their response sent. */
static void httpd_collect(struct httpd *h)
{
	struct exchange *done = NULL;
	pthread_mutex_lock(&h->lock);
	struct exchange **pp = &h->jobs;
	while (*pp) {
		struct exchange *x = *pp;
		if (x->done && !x->orphaned) {
			*pp = x->next;
			x->next = done;
			done = x;
		} else {
			pp = &x->next;
		}
	}
	pthread_mutex_unlock(&h->lock);
	while (done) {
		struct exchange *next = done->next;
		done->state = X_RESPOND;
		lws_callback_on_writable(done->wsi);
		done = next;
	}
}

/* The connection is going away, with or without a request in flight. */
static void conn_abandon(struct httpd *h, struct conn *c)
{
	struct exchange *x = c->x;
	if (!x)
		return;
	c->x = NULL;
	pthread_mutex_lock(&h->lock);
	if (x->state == X_RUNNING && !x->done) {
		x->orphaned = true; /* the worker frees it */
		pthread_mutex_unlock(&h->lock);
		return;
	}
	/* Done but maybe not yet collected: unlink it from the job list. */
	struct exchange **pp = &h->jobs;
	while (*pp && *pp != x)
		pp = &(*pp)->next;
	if (*pp)
		*pp = x->next;
	pthread_mutex_unlock(&h->lock);
	exchange_free(x);
}

/* ---- request intake ----------------------------------------------------------- */

static void request_fill(struct lws *wsi, struct exchange *x)
{
	request_fill_req(wsi, &x->req, x->target, sizeof x->target);
}

/* The owner's extra headers (httpd_opts.extra_headers), a request's or a
 * WebSocket upgrade's alike. */
static void request_fill_extra(struct lws *wsi, struct httpd_request *req)
{
	struct lws_context *ctx = lws_get_context(wsi);
	struct httpd *h = ctx ? lws_context_user(ctx) : NULL;
	const char *const *names = h ? h->o.extra_headers : NULL;
	for (int i = 0; names && names[i] && i < HTTPD_MAX_EXTRA; i++) {
		char name[64];
		int n = snprintf(name, sizeof name, "%s:", names[i]);
		if (n > 0 && (size_t)n < sizeof name &&
		    lws_hdr_custom_copy(wsi, req->extra[i], sizeof req->extra[i], name, n) < 0)
			req->extra[i][0] = 0;
	}
	char rid[LOG_REQUEST_ID_MAX + 2];
	if (lws_hdr_custom_copy(wsi, rid, sizeof rid, "x-request-id:", 13) > 0 &&
	    log_request_id_ok(rid))
		memcpy(req->request_id, rid, strlen(rid) + 1); /* ok: at most 64 bytes */
	else
		log_request_id_new(req->request_id, sizeof req->request_id);
}

void request_fill_req(struct lws *wsi, struct httpd_request *req, char *target, size_t tlen)
{
	char *uri = NULL;
	int ulen = 0;
	int m = lws_http_get_uri_and_method(wsi, &uri, &ulen);
	static const struct {
		int lws;
		enum httpd_method m;
		const char *name;
	} methods[] = {
	    {LWSHUMETH_GET, HTTPD_GET, "GET"},	     {LWSHUMETH_POST, HTTPD_POST, "POST"},
	    {LWSHUMETH_PUT, HTTPD_PUT, "PUT"},	     {LWSHUMETH_DELETE, HTTPD_DELETE, "DELETE"},
	    {LWSHUMETH_PATCH, HTTPD_PATCH, "PATCH"}, {LWSHUMETH_OPTIONS, HTTPD_OPTIONS, "OPTIONS"},
	};
	req->method = HTTPD_OTHER;
	req->method_name = "?";
	for (size_t i = 0; i < sizeof methods / sizeof methods[0]; i++) {
		if (methods[i].lws == m) {
			req->method = methods[i].m;
			req->method_name = methods[i].name;
		}
	}
	snprintf(req->path, sizeof req->path, "%.*s", uri ? ulen : 0, uri ? uri : "");
	/* A decoded %00 must not cut the path short (".../ws%00/keys/k" would
	 * be ".../ws"): it becomes DEL, which no route or id accepts. */
	for (int i = (int)strlen(req->path); uri && i < ulen && i < (int)sizeof req->path - 1; i++)
		req->path[i] = uri[i] ? uri[i] : '\x7f';
	if (uri && ulen < (int)sizeof req->path)
		req->path[ulen] = 0;
	/* libwebsockets 4.1 ends the URI at a decoded CR or LF and skips the
	 * rest of the request line, its HTTP version included: a path cut
	 * short that way (".../ws%0A/keys/k" would be ".../ws") is marked
	 * so that no route matches it. */
	if (uri && lws_hdr_total_length(wsi, WSI_TOKEN_HTTP) <= 0)
		snprintf(req->path + strlen(req->path), sizeof req->path - strlen(req->path),
			 "\x7f");
	snprintf(target, tlen, "%s %.140s", req->method_name, req->path);
	lws_hdr_copy(wsi, req->authorization, sizeof req->authorization,
		     WSI_TOKEN_HTTP_AUTHORIZATION);
	lws_hdr_copy(wsi, req->host, sizeof req->host, WSI_TOKEN_HOST);
	request_fill_extra(wsi, req);
	/* An Origin too long to copy must not pass for no Origin at all. */
	if (lws_hdr_copy(wsi, req->origin, sizeof req->origin, WSI_TOKEN_ORIGIN) < 0)
		snprintf(req->origin, sizeof req->origin, "?");
	lws_hdr_copy(wsi, req->accept, sizeof req->accept, WSI_TOKEN_HTTP_ACCEPT);
	lws_hdr_copy(wsi, req->content_type, sizeof req->content_type, WSI_TOKEN_HTTP_CONTENT_TYPE);
	char v[32];
	req->content_length = -1;
	if (lws_hdr_copy(wsi, v, sizeof v, WSI_TOKEN_HTTP_CONTENT_LENGTH) > 0) {
		char *end;
		long long n = strtoll(v, &end, 10);
		if (!*end && n >= 0)
			req->content_length = n;
	}
	char frag[HTTPD_MAX_URL];
	for (int i = 0; req->nquery < HTTPD_MAX_QUERY; i++) {
		int n = lws_hdr_copy_fragment(wsi, frag, sizeof frag, WSI_TOKEN_HTTP_URI_ARGS, i);
		if (n < 0)
			break;
		for (int k = 0; k < n && k < (int)sizeof frag - 1; k++)
			if (!frag[k])
				frag[k] = '\x7f'; /* as in the path: a NUL cuts nothing short */
		char *dup = strdup(frag);
		if (dup)
			req->query[req->nquery++] = dup;
	}
}

static void exchange_body_done(struct httpd *h, struct exchange *x)
{
	lws_sul_cancel(&x->body_sul);
	if (x->state == X_ROUTED)
		exchange_start(h, x);
}

/* The body is late: 408 and close (loop thread, from lws's timer list). */
static void exchange_body_late(lws_sorted_usec_list_t *sul)
{
	struct exchange *x = lws_container_of(sul, struct exchange, body_sul);
	if (x->state != X_ROUTED)
		return;
	fprintf(stderr, "%s: %s: the body is late (%llu bytes in %.0f ms): cut off\n",
		x->h->o.log_prefix, x->target, (unsigned long long)x->body_got, exchange_ms(x));
	x->state = X_RESPOND;
	httpd_respond_json(&x->resp, 408,
			   json_pack("{s:{s:s, s:s}}", "error", "code", "request_timeout",
				     "message",
				     "the request body arrived too slowly; the connection is "
				     "closed"));
	x->resp.err_code = "request_timeout";
	x->close_after = true;
	lws_callback_on_writable(x->wsi);
}

/* (Re)arms the body's deadline from what has arrived so far. */
static void exchange_body_deadline(struct exchange *x)
{
	struct httpd *h = x->h;
	double allowed_s =
	    (double)h->o.body_timeout_s + (double)x->body_got / (double)h->o.body_min_rate;
	double left_ms = allowed_s * 1e3 - exchange_ms(x);
	lws_usec_t us = left_ms > 0 ? (lws_usec_t)(left_ms * 1e3) : 1;
	lws_sul_schedule(h->ctx, 0, &x->body_sul, exchange_body_late, us);
}

static int exchange_route(struct httpd *h, struct lws *wsi, struct conn *c)
{
	struct exchange *x = calloc(1, sizeof *x);
	if (!x)
		return -1;
	x->h = h;
	x->wsi = wsi;
	x->route.body_fd = -1;
	x->resp.file_fd = -1;
	x->t0_us = clock_now_us();
	c->x = x;
	request_fill(wsi, x);
	struct err e = {0};
	int routed = h->o.router(h->o.ctx, &x->req, &x->route, &e);
	x->req.user = x->route.user; /* on_done sees it, refused or not */
	if (routed < 0) {
		json_t *detail = x->route.err_detail;
		x->route.err_detail = NULL;
		exchange_answer_early_ex(x, &e, x->route.retry_after_s, detail);
		return 0;
	}
	if (!x->route.max_body)
		x->route.max_body = h->o.max_body;
	if (x->route.body == HTTPD_BODY_MEMORY && x->req.content_length > 0 &&
	    (size_t)x->req.content_length > x->route.max_body) {
		err_set(&e, ERR_TOO_LARGE,
			"the request body is %lld bytes, over the %zu-byte limit here; send large "
			"files through the files endpoint",
			x->req.content_length, x->route.max_body);
		exchange_answer_early(x, &e);
		return 0;
	}
	x->state = X_ROUTED;
	bool has_body = x->req.content_length > 0 ||
			lws_hdr_total_length(wsi, WSI_TOKEN_HTTP_TRANSFER_ENCODING) > 0;
	if (!has_body)
		exchange_body_done(h, x);
	else
		exchange_body_deadline(x);
	return 0;
}

static int exchange_body(struct exchange *x, const void *in, size_t len)
{
	struct err e = {0};
	if (x->state != X_ROUTED)
		return 0; /* answered early: drop it */
	x->body_got += len;
	exchange_body_deadline(x);
	if (x->route.body == HTTPD_BODY_FD) {
		const char *p = in;
		size_t left = len;
		while (left) {
			ssize_t n = write(x->route.body_fd, p, left);
			if (n < 0 && errno == EINTR)
				continue;
			if (n < 0) {
				err_set(&e,
					errno == ENOSPC || errno == EDQUOT ? ERR_TOO_LARGE
									   : ERR_INTERNAL,
					"cannot store the request body: %s", strerror(errno));
				x->state = X_DISCARD;
				exchange_answer_early(x, &e);
				return 0;
			}
			p += n;
			left -= (size_t)n;
		}
		x->req.body_written += len;
		return 0;
	}
	if (x->req.body_len + len > x->route.max_body) {
		err_set(&e, ERR_TOO_LARGE, "the request body is over the %zu-byte limit here",
			x->route.max_body);
		exchange_answer_early(x, &e);
		return 0;
	}
	if (x->req.body_len + len + 1 > x->body_cap) {
		size_t cap = x->body_cap ? x->body_cap : 4096;
		while (cap < x->req.body_len + len + 1)
			cap *= 2;
		char *nb = realloc(x->req.body, cap);
		if (!nb) {
			err_set(&e, ERR_INTERNAL, "out of memory reading the body");
			exchange_answer_early(x, &e);
			return 0;
		}
		x->req.body = nb;
		x->body_cap = cap;
	}
	memcpy(x->req.body + x->req.body_len, in, len);
	x->req.body_len += len;
	x->req.body[x->req.body_len] = 0;
	return 0;
}

/* ---- connections per client address ----------------------------------------------- */

static unsigned peer_hash(const unsigned char *b, size_t n)
{
	unsigned v = 2166136261u; /* FNV-1a */
	for (size_t i = 0; i < n; i++)
		v = (v ^ b[i]) * 16777619u;
	return v % PEER_BUCKETS;
}

static unsigned peer_conn_hash(const struct lws *wsi)
{
	return (unsigned)(((uintptr_t)wsi >> 4) % PEER_BUCKETS);
}

static void peer_release(struct httpd *h, struct peer *p)
{
	if (--p->conns > 0)
		return;
	struct peer **pp = &h->peers[peer_hash(p->addr, sizeof p->addr)];
	while (*pp && *pp != p)
		pp = &(*pp)->next;
	if (*pp)
		*pp = p->next;
	free(p);
}

/* Past the limit: a 429 if the socket takes it at once, then lws closes it.
 * What the client already sent is read first, so that the close is a FIN
 * the client can read the answer before, not a reset. */
static void peer_refuse(int fd, int open, int limit)
{
	char body[300], buf[600];
	int blen = snprintf(body, sizeof body,
			    "{\"error\":{\"code\":\"limit_reached\",\"message\":\"this address has "
			    "%d connections open, the most allowed; close some and retry\","
			    "\"limit\":\"connections_per_address\",\"max\":%d}}",
			    open, limit);
	int n = snprintf(buf, sizeof buf,
			 "HTTP/1.1 429 Too Many Requests\r\ncontent-type: application/json\r\n"
			 "content-length: %d\r\nretry-after: 1\r\nconnection: close\r\n\r\n%s",
			 blen, body);
	char sink[4096];
	for (int i = 0; i < 16 && recv(fd, sink, sizeof sink, MSG_DONTWAIT) > 0; i++)
		;
	if (n > 0 && send(fd, buf, (size_t)n, MSG_DONTWAIT | MSG_NOSIGNAL) == n)
		shutdown(fd, SHUT_WR);
}

/* A connection was accepted: counts it, or refuses it (returns 1). */
int peer_admit(struct httpd *h, const struct lws_filter_network_conn_args *a, int fd)
{
	if (h->o.max_conns_per_addr <= 0 || !a)
		return 0;
	if (h->peer_pending) { /* the last one accepted never became a wsi */
		peer_release(h, h->peer_pending);
		h->peer_pending = NULL;
	}
	unsigned char key[16] = {0};
	int family = a->cli_addr.ss_family;
	if (family == AF_INET)
		memcpy(key, &((const struct sockaddr_in *)&a->cli_addr)->sin_addr, 4);
	else if (family == AF_INET6)
		memcpy(key, &((const struct sockaddr_in6 *)&a->cli_addr)->sin6_addr, 16);
	else
		return 0;
	unsigned b = peer_hash(key, sizeof key);
	struct peer *p = h->peers[b];
	while (p && !(p->family == family && memcmp(p->addr, key, sizeof key) == 0))
		p = p->next;
	if (p && p->conns >= h->o.max_conns_per_addr) {
		peer_refuse(fd, p->conns, h->o.max_conns_per_addr);
		return 1;
	}
	if (!p) {
		p = calloc(1, sizeof *p);
		if (!p)
			return 1;
		p->family = family;
		memcpy(p->addr, key, sizeof key);
		p->next = h->peers[b];
		h->peers[b] = p;
	}
	p->conns++;
	h->peer_pending = p;
	return 0;
}

void peer_wsi_created(struct httpd *h, const struct lws *wsi)
{
	struct peer *p = h->peer_pending;
	if (!p)
		return;
	h->peer_pending = NULL;
	struct peer_conn *pc = malloc(sizeof *pc);
	if (!pc) {
		peer_release(h, p);
		return;
	}
	unsigned b = peer_conn_hash(wsi);
	pc->wsi = wsi;
	pc->p = p;
	pc->next = h->peer_conns[b];
	h->peer_conns[b] = pc;
}

void peer_wsi_destroyed(struct httpd *h, const struct lws *wsi)
{
	struct peer_conn **pp = &h->peer_conns[peer_conn_hash(wsi)];
	while (*pp && (*pp)->wsi != wsi)
		pp = &(*pp)->next;
	struct peer_conn *pc = *pp;
	if (!pc)
		return;
	*pp = pc->next;
	peer_release(h, pc->p);
	free(pc);
}

static int httpd_callback(struct lws *wsi, enum lws_callback_reasons reason, void *user, void *in,
			  size_t len)
{
	struct conn *c = user;
	struct lws_context *ctx = lws_get_context(wsi);
	struct httpd *h = ctx ? lws_context_user(ctx) : NULL;

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
		return 0;
	case LWS_CALLBACK_HTTP:
		conn_abandon(h, c); /* a pipelined request replaces any leftover */
		return exchange_route(h, wsi, c);
	case LWS_CALLBACK_HTTP_BODY:
		return c->x ? exchange_body(c->x, in, len) : 0;
	case LWS_CALLBACK_HTTP_BODY_COMPLETION:
		if (c->x)
			exchange_body_done(h, c->x);
		return 0;
	case LWS_CALLBACK_HTTP_WRITEABLE:
		return exchange_write(h, wsi, c);
	case LWS_CALLBACK_EVENT_WAIT_CANCELLED:
		if (h) {
			httpd_collect(h);
			tunnel_reap(h);
			relay_reap(h);
		}
		return 0;
	case LWS_CALLBACK_CLOSED_HTTP:
	case LWS_CALLBACK_HTTP_DROP_PROTOCOL:
		if (c && h)
			conn_abandon(h, c);
		return 0;
	default:
		break;
	}
	return lws_callback_http_dummy(wsi, reason, user, in, len);
}

static const struct lws_protocols httpd_protocols[] = {
    {"http", httpd_callback, sizeof(struct conn), 0, 0, NULL, 0},
    {"binary", tunnel_ws_callback, sizeof(struct tunnel_conn), HTTPD_CHUNK, 0, NULL, 0},
    {"cubicle-raw", tunnel_raw_callback, 0, HTTPD_CHUNK, 0, NULL, 0},
    {"cubicle-relay", tunnel_relay_callback, 0, HTTPD_CHUNK, 0, NULL, 0},
    {NULL, NULL, 0, 0, 0, NULL, 0},
};

/* ---- lifecycle ------------------------------------------------------------------ */

static void httpd_log(int level, const char *line)
{
	(void)level;
	fprintf(stderr, "lws: %s", line);
}

struct httpd *httpd_create(const struct httpd_opts *o, struct err *e)
{
	struct httpd *h = calloc(1, sizeof *h);
	if (!h) {
		err_set(e, ERR_INTERNAL, "out of memory");
		return NULL;
	}
	h->o = *o;
	if (h->o.max_jobs <= 0)
		h->o.max_jobs = 64;
	if (!h->o.max_body)
		h->o.max_body = 64u << 20;
	if (!h->o.log_prefix)
		h->o.log_prefix = "httpd";
	if (h->o.header_timeout_s <= 0)
		h->o.header_timeout_s = 10;
	if (h->o.body_timeout_s <= 0)
		h->o.body_timeout_s = 30;
	if (h->o.body_min_rate <= 0)
		h->o.body_min_rate = 16384;
	pthread_mutex_init(&h->lock, NULL);
	pthread_cond_init(&h->idle, NULL);
	lws_set_log_level(LLL_ERR | LLL_WARN, httpd_log);

	struct lws_context_creation_info info;
	memset(&info, 0, sizeof info);
	info.protocols = httpd_protocols;
	info.user = h;
	info.max_http_header_data = HTTPD_MAX_URL + 1024;
	info.timeout_secs = 30;
	info.keepalive_timeout = 60;
	/* lws holds a header table for a connection from its first byte and
	 * closes the connection when the headers are not complete this long
	 * after: a client that trickles its headers is cut off. */
	info.timeout_secs_ah_idle = (unsigned)h->o.header_timeout_s;
	/* lws reads a tunnel's unix socket into this per-thread buffer, and each
	 * read becomes one WebSocket frame: at the default 4 KiB a 60 fps stream
	 * costs ~4,500 reads, frames and sends a second (half a core). */
	info.pt_serv_buf_size = HTTPD_CHUNK;
	info.options = LWS_SERVER_OPTION_DISABLE_IPV6;
	char host[256] = "";
	if (strncmp(o->listen, "unix:", 5) == 0) {
		const char *path = o->listen + 5;
		if (!*path || strlen(path) >= 100) {
			err_param(e, "listen",
				  "listen: unix:PATH needs a path shorter than 100 bytes");
			goto fail;
		}
		h->unix_path = strdup(path);
		unlink(path);
		info.options |= LWS_SERVER_OPTION_UNIX_SOCK;
		info.iface = h->unix_path;
		snprintf(h->address, sizeof h->address, "unix:%s", path);
	} else {
		const char *hp = strncmp(o->listen, "tcp:", 4) == 0 ? o->listen + 4 : o->listen;
		const char *colon = strrchr(hp, ':');
		char *end;
		long port = colon ? strtol(colon + 1, &end, 10) : -1;
		if (!colon || colon == hp || *end || port < 0 || port > 65535 ||
		    (size_t)(colon - hp) >= sizeof host) {
			err_param(e, "listen",
				  "listen: expected unix:PATH or [tcp:]HOST:PORT, not '%s'",
				  o->listen);
			goto fail;
		}
		memcpy(host, hp, (size_t)(colon - hp));
		info.iface = host;
		info.port = (int)port;
	}
	h->ctx = lws_create_context(&info);
	if (!h->ctx) {
		err_set(e, ERR_UNAVAILABLE, "cannot listen on %s (in use, or no such address?)",
			o->listen);
		goto fail;
	}
	if (o->relay_listen && relay_listen(h, e) < 0) {
		lws_context_destroy(h->ctx);
		goto fail;
	}
	if (h->unix_path) {
		chmod(h->unix_path, 0600);
	} else {
		struct lws_vhost *vh = lws_get_vhost_by_name(h->ctx, "default");
		int port = vh ? lws_get_vhost_listen_port(vh) : info.port;
		snprintf(h->address, sizeof h->address, "tcp:%s:%d", host, port);
	}
	return h;
fail:
	free(h->unix_path);
	pthread_cond_destroy(&h->idle);
	pthread_mutex_destroy(&h->lock);
	free(h);
	return NULL;
}

const char *httpd_address(const struct httpd *h)
{
	return h->address;
}

int httpd_run(struct httpd *h)
{
	while (!h->stopping)
		if (lws_service(h->ctx, 0) < 0)
			break;
	return 0;
}

void httpd_stop(struct httpd *h)
{
	h->stopping = 1;
	if (h->ctx)
		lws_cancel_service(h->ctx);
}

int httpd_destroy(struct httpd *h)
{
	if (!h)
		return 0;
	struct timespec until;
	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += 10;
	pthread_mutex_lock(&h->lock);
	h->stopping = 1;
	while (h->running > 0)
		if (pthread_cond_timedwait(&h->idle, &h->lock, &until) != 0)
			break;
	int still = h->running;
	pthread_mutex_unlock(&h->lock);
	if (still > 0) {
		/* Workers still use the context: leave it, the process is exiting. */
		fprintf(stderr, "%s: %d requests still running at exit\n", h->o.log_prefix, still);
		return -1;
	}
	lws_context_destroy(h->ctx); /* closes connections: abandons their exchanges */
	while (h->jobs) {
		struct exchange *x = h->jobs;
		h->jobs = x->next;
		exchange_free(x);
	}
	for (int b = 0; b < PEER_BUCKETS; b++) { /* none left once lws destroyed its wsis */
		while (h->peer_conns[b]) {
			struct peer_conn *pc = h->peer_conns[b];
			h->peer_conns[b] = pc->next;
			free(pc);
		}
		while (h->peers[b]) {
			struct peer *p = h->peers[b];
			h->peers[b] = p->next;
			free(p);
		}
	}
	if (h->unix_path)
		unlink(h->unix_path);
	free(h->unix_path);
	pthread_cond_destroy(&h->idle);
	pthread_mutex_destroy(&h->lock);
	free(h);
	return 0;
}
