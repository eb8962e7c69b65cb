#include "httpc.h"
#include "log.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include <curl/curl.h>

struct httpc_share {
	CURLSH *sh;
	pthread_mutex_t locks[CURL_LOCK_DATA_LAST];
};

static pthread_once_t httpc_once = PTHREAD_ONCE_INIT;

static void httpc_global_init(void)
{
	curl_global_init(CURL_GLOBAL_DEFAULT);
}

static void httpc_share_lock(CURL *h, curl_lock_data data, curl_lock_access a, void *u)
{
	(void)h, (void)a;
	pthread_mutex_lock(&((struct httpc_share *)u)->locks[data]);
}

static void httpc_share_unlock(CURL *h, curl_lock_data data, void *u)
{
	(void)h;
	pthread_mutex_unlock(&((struct httpc_share *)u)->locks[data]);
}

struct httpc_share *httpc_share_new(void)
{
	pthread_once(&httpc_once, httpc_global_init);
	struct httpc_share *s = calloc(1, sizeof *s);
	if (!s || !(s->sh = curl_share_init())) {
		free(s);
		return NULL;
	}
	for (int i = 0; i < CURL_LOCK_DATA_LAST; i++)
		pthread_mutex_init(&s->locks[i], NULL);
	curl_share_setopt(s->sh, CURLSHOPT_LOCKFUNC, httpc_share_lock);
	curl_share_setopt(s->sh, CURLSHOPT_UNLOCKFUNC, httpc_share_unlock);
	curl_share_setopt(s->sh, CURLSHOPT_USERDATA, s);
	curl_share_setopt(s->sh, CURLSHOPT_SHARE, CURL_LOCK_DATA_CONNECT);
	return s;
}

void httpc_share_free(struct httpc_share *s)
{
	if (!s)
		return;
	curl_share_cleanup(s->sh);
	for (int i = 0; i < CURL_LOCK_DATA_LAST; i++)
		pthread_mutex_destroy(&s->locks[i]);
	free(s);
}

void httpc_reply_free(struct httpc_reply *r)
{
	free(r->body);
	memset(r, 0, sizeof *r);
}

char *httpc_escape(const char *s)
{
	pthread_once(&httpc_once, httpc_global_init);
	char *esc = curl_easy_escape(NULL, s, 0);
	char *out = esc ? strdup(esc) : NULL;
	curl_free(esc);
	return out;
}

/* One transfer in progress. */
struct httpc_xfer {
	const struct httpc_request *q;
	struct httpc_reply *r;
	CURL *h;
	size_t cap;
	int fd_error;	       /* out_fd or body_fd failed */
	size_t header_bytes;   /* all header lines so far */
	uint64_t out_written;  /* bytes written to out_fd */
	uint64_t out_reserved; /* bytes out_reserve allowed */
	uint64_t mem_reserved; /* bytes mem_reserve allowed */
	bool over;	       /* a limit stopped the transfer: e_over says which */
	struct err e_over;
};

/* Stops the transfer for a limit (the write callbacks then return an error). */
static size_t httpc_stop(struct httpc_xfer *x, enum err_code code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static size_t httpc_stop(struct httpc_xfer *x, enum err_code code, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	x->over = true;
	x->e_over.code = code;
	vsnprintf(x->e_over.message, sizeof x->e_over.message, fmt, ap);
	va_end(ap);
	return 0;
}

/* Asks the caller for room for `more` bytes on out_fd beyond those allowed. */
static int httpc_reserve(struct httpc_xfer *x, uint64_t upto)
{
	if (!x->q->out_reserve || upto <= x->out_reserved)
		return 0;
	struct err e = {0};
	if (x->q->out_reserve(x->q->out_reserve_arg, upto - x->out_reserved, &e) < 0) {
		x->over = true;
		x->e_over = e;
		return -1;
	}
	x->out_reserved = upto;
	return 0;
}

/* Appends to the body, growing it by doubling but never past limit + 1
 * bytes (limit 0 = none), within the memory budget (mem_reserve). */
static int httpc_append(struct httpc_xfer *x, size_t limit, const char *p, size_t len)
{
	struct httpc_reply *r = x->r;
	size_t *cap = &x->cap;
	if (r->body_len + len + 1 > *cap) {
		size_t n = *cap ? *cap : 4096;
		while (n < r->body_len + len + 1)
			n *= 2;
		if (limit && n > limit + 1)
			n = limit + 1;
		if (x->q->mem_reserve) {
			struct err e = {0};
			if (x->q->mem_reserve(n - *cap, &e) < 0) {
				x->over = true;
				x->e_over = e;
				return -1;
			}
			x->mem_reserved += n - *cap;
		}
		char *nb = realloc(r->body, n);
		if (!nb)
			return -1;
		r->body = nb;
		*cap = n;
	}
	memcpy(r->body + r->body_len, p, len);
	r->body_len += len;
	r->body[r->body_len] = 0;
	return 0;
}

static int httpc_write_all(int fd, const char *p, size_t len)
{
	while (len) {
		ssize_t w = write(fd, p, len);
		if (w <= 0)
			return -1;
		p += w;
		len -= (size_t)w;
	}
	return 0;
}

static size_t httpc_on_body(char *p, size_t size, size_t n, void *u)
{
	struct httpc_xfer *x = u;
	size_t len = size * n;
	long status = 0;
	curl_easy_getinfo(x->h, CURLINFO_RESPONSE_CODE, &status);
	bool to_fd = x->q->out_fd >= 0 && (x->q->out_fd_always || (status >= 200 && status < 300));
	if (to_fd) {
		if (httpc_reserve(x, x->out_written + len) < 0)
			return 0;
		if (httpc_write_all(x->q->out_fd, p, len) < 0) {
			x->fd_error = 1;
			return 0;
		}
		x->out_written += len;
		return len;
	}
	if (x->q->max_body && x->r->body_len + len > x->q->max_body)
		return httpc_stop(x, ERR_BAD_GATEWAY,
				  "the answer's body is over the %zu-byte limit (%zu MiB)",
				  x->q->max_body, x->q->max_body >> 20);
	return httpc_append(x, x->q->max_body, p, len) < 0 ? 0 : len;
}

static size_t httpc_on_header(char *p, size_t size, size_t n, void *u)
{
	struct httpc_xfer *x = u;
	size_t len = size * n;
	/* Every header line counts, 1xx answers' included: a server that
	 * sends endless interim answers runs into the limit too. */
	x->header_bytes += len;
	if (x->q->max_headers && x->header_bytes > x->q->max_headers)
		return httpc_stop(x, ERR_BAD_GATEWAY,
				  "the answer's headers are over the %zu-byte limit",
				  x->q->max_headers);
	/* The announced length of a body headed for out_fd: reserve it all at
	 * once, so that a file over a quota fails before its first byte. */
	if (x->q->out_fd >= 0 && x->q->out_reserve && len > 15 &&
	    strncasecmp(p, "content-length:", 15) == 0) {
		long status = 0;
		curl_easy_getinfo(x->h, CURLINFO_RESPONSE_CODE, &status);
		if (x->q->out_fd_always || (status >= 200 && status < 300)) {
			char num[32];
			snprintf(num, sizeof num, "%.*s", (int)(len - 15 < 31 ? len - 15 : 31),
				 p + 15);
			char *end;
			unsigned long long cl = strtoull(num, &end, 10);
			if (end != num && httpc_reserve(x, cl) < 0)
				return 0;
		}
	}
	static const struct {
		const char *name;
		size_t off, cap;
	} want[] = {
	    {"content-type:", offsetof(struct httpc_reply, content_type), 64},
	    {"x-width:", offsetof(struct httpc_reply, x_width), 16},
	    {"x-height:", offsetof(struct httpc_reply, x_height), 16},
	    {"x-scale:", offsetof(struct httpc_reply, x_scale), 32},
	};
	for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
		size_t nl = strlen(want[i].name);
		if (len > nl && strncasecmp(p, want[i].name, nl) == 0) {
			const char *v = p + nl;
			size_t vl = len - nl;
			while (vl && (*v == ' ' || *v == '\t'))
				v++, vl--;
			while (vl && (v[vl - 1] == '\r' || v[vl - 1] == '\n' || v[vl - 1] == ' '))
				vl--;
			char *dst = (char *)x->r + want[i].off;
			snprintf(dst, want[i].cap, "%.*s", (int)vl, v);
		}
	}
	return len;
}

static size_t httpc_on_read(char *p, size_t size, size_t n, void *u)
{
	struct httpc_xfer *x = u;
	ssize_t got = read(x->q->body_fd, p, size * n);
	if (got < 0) {
		x->fd_error = 1;
		return CURL_READFUNC_ABORT;
	}
	return (size_t)got;
}

static int httpc_on_progress(void *u, curl_off_t dt, curl_off_t dn, curl_off_t ut, curl_off_t un)
{
	struct httpc_xfer *x = u;
	x->q->progress(x->q->progress_arg, (uint64_t)dt, (uint64_t)dn, (uint64_t)ut, (uint64_t)un);
	return 0;
}

/* Everything but the body callbacks; returns the header list to free. */
static struct curl_slist *httpc_setup(CURL *h, const struct httpc_request *q)
{
	struct curl_slist *hdrs = curl_slist_append(NULL, "Expect:");
	curl_easy_setopt(h, CURLOPT_URL, q->url);
	if (q->unix_socket)
		curl_easy_setopt(h, CURLOPT_UNIX_SOCKET_PATH, q->unix_socket);
	if (q->share)
		curl_easy_setopt(h, CURLOPT_SHARE, q->share->sh);
	curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(h, CURLOPT_TCP_NODELAY, 1L);
	curl_easy_setopt(h, CURLOPT_PROXY, "");
	curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS,
			 q->connect_timeout_ms > 0 ? q->connect_timeout_ms : 10000L);
	if (q->timeout_ms > 0)
		curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, q->timeout_ms);
	if (q->min_speed_bps > 0 && q->min_speed_s > 0) {
		curl_easy_setopt(h, CURLOPT_LOW_SPEED_LIMIT, q->min_speed_bps);
		curl_easy_setopt(h, CURLOPT_LOW_SPEED_TIME, q->min_speed_s);
	}
	if (q->max_body && !(q->out_fd >= 0 && q->out_fd_always))
		curl_easy_setopt(h, CURLOPT_MAXFILESIZE_LARGE, (curl_off_t)q->max_body);
	/* The request this thread serves, named to whoever we call (log.h). */
	if (log_request_id()[0]) {
		char rid[32 + LOG_REQUEST_ID_MAX];
		snprintf(rid, sizeof rid, "X-Request-Id: %s", log_request_id());
		hdrs = curl_slist_append(hdrs, rid);
	}
	if (q->bearer) {
		char auth[512];
		snprintf(auth, sizeof auth, "Authorization: Bearer %s", q->bearer);
		hdrs = curl_slist_append(hdrs, auth);
	}
	for (size_t i = 0; q->headers && q->headers[i]; i++)
		hdrs = curl_slist_append(hdrs, q->headers[i]);
	if (q->body_type) {
		char type[128];
		snprintf(type, sizeof type, "Content-Type: %s", q->body_type);
		hdrs = curl_slist_append(hdrs, type);
	}
	if (q->body_fd >= 0) {
		curl_easy_setopt(h, CURLOPT_UPLOAD, 1L);
		curl_easy_setopt(h, CURLOPT_INFILESIZE_LARGE, (curl_off_t)q->body_fd_len);
	} else if (q->body || strcmp(q->method, "POST") == 0) {
		curl_easy_setopt(h, CURLOPT_POST, 1L);
		curl_easy_setopt(h, CURLOPT_POSTFIELDS, q->body ? (const char *)q->body : "");
		curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)q->body_len);
	}
	if (strcmp(q->method, "GET") != 0 && strcmp(q->method, "POST") != 0 &&
	    strcmp(q->method, "PUT") != 0)
		curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, q->method);
	else if (strcmp(q->method, "PUT") == 0 && q->body_fd < 0)
		curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, "PUT");
	return hdrs;
}

int httpc_perform(const struct httpc_request *q, struct httpc_reply *r, struct err *e)
{
	memset(r, 0, sizeof *r);
	pthread_once(&httpc_once, httpc_global_init);
	CURL *h = curl_easy_init();
	if (!h)
		return err_set(e, ERR_INTERNAL, "cannot initialise libcurl");
	struct httpc_xfer x = {.q = q, .r = r, .h = h};
	struct curl_slist *hdrs = httpc_setup(h, q);
	char detail[CURL_ERROR_SIZE] = "";
	curl_easy_setopt(h, CURLOPT_ERRORBUFFER, detail);
	curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdrs);
	curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, httpc_on_body);
	curl_easy_setopt(h, CURLOPT_WRITEDATA, &x);
	curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, httpc_on_header);
	curl_easy_setopt(h, CURLOPT_HEADERDATA, &x);
	if (q->body_fd >= 0) {
		curl_easy_setopt(h, CURLOPT_READFUNCTION, httpc_on_read);
		curl_easy_setopt(h, CURLOPT_READDATA, &x);
	}
	if (q->progress) {
		curl_easy_setopt(h, CURLOPT_NOPROGRESS, 0L);
		curl_easy_setopt(h, CURLOPT_XFERINFOFUNCTION, httpc_on_progress);
		curl_easy_setopt(h, CURLOPT_XFERINFODATA, &x);
	}
	CURLcode rc = curl_easy_perform(h);
	if (q->mem_release && x.mem_reserved)
		q->mem_release(x.mem_reserved);
	long status = 0;
	curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
	curl_slist_free_all(hdrs);
	curl_easy_cleanup(h);
	r->status = (int)status;
	if (rc == CURLE_OK)
		return 0;
	if (x.over) {
		if (e)
			*e = x.e_over;
		return -1;
	}
	if (rc == CURLE_FILESIZE_EXCEEDED)
		return err_set(e, ERR_BAD_GATEWAY,
			       "the answer's body is over the %zu-byte limit (%zu MiB)",
			       q->max_body, q->max_body >> 20);
	if (rc == CURLE_OPERATION_TIMEDOUT && q->min_speed_bps > 0 && strstr(detail, "too slow"))
		return err_set(e, ERR_BAD_GATEWAY,
			       "the answer came slower than %ld bytes/s for %ld s: %s",
			       q->min_speed_bps, q->min_speed_s, detail);
	if (x.fd_error)
		return err_set(e, ERR_INTERNAL, "%s the local file failed",
			       rc == CURLE_ABORTED_BY_CALLBACK ? "reading" : "writing");
	enum err_code code = ERR_BAD_GATEWAY; /* it answered, but not a whole HTTP answer */
	if (rc == CURLE_OPERATION_TIMEDOUT)
		code = ERR_TIMEOUT;
	else if (rc == CURLE_COULDNT_CONNECT || rc == CURLE_COULDNT_RESOLVE_HOST ||
		 rc == CURLE_SEND_ERROR || rc == CURLE_GOT_NOTHING || rc == CURLE_URL_MALFORMAT ||
		 rc == CURLE_FAILED_INIT)
		code = ERR_UNAVAILABLE;
	return err_set(e, code, "%s", detail[0] ? detail : curl_easy_strerror(rc));
}
