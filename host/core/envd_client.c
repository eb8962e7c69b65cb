/*
 * envd_client: libcurl over a unix socket or loopback TCP.
 *
 * Each call uses a fresh easy handle (calls come from short-lived worker
 * threads), but all handles share one connection cache through a CURLSH,
 * so consecutive actions on a computer reuse a kept-alive connection to its
 * envd instead of paying a connect per call.
 */
#include "envd_client.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include <curl/curl.h>

static CURLSH *envd_share;
static pthread_mutex_t envd_share_locks[CURL_LOCK_DATA_LAST];
static pthread_once_t envd_once = PTHREAD_ONCE_INIT;

static void envd_share_lock(CURL *h, curl_lock_data data, curl_lock_access a, void *u)
{
	(void)h, (void)a, (void)u;
	pthread_mutex_lock(&envd_share_locks[data]);
}

static void envd_share_unlock(CURL *h, curl_lock_data data, void *u)
{
	(void)h, (void)u;
	pthread_mutex_unlock(&envd_share_locks[data]);
}

static void envd_init(void)
{
	curl_global_init(CURL_GLOBAL_DEFAULT);
	for (int i = 0; i < CURL_LOCK_DATA_LAST; i++)
		pthread_mutex_init(&envd_share_locks[i], NULL);
	envd_share = curl_share_init();
	curl_share_setopt(envd_share, CURLSHOPT_LOCKFUNC, envd_share_lock);
	curl_share_setopt(envd_share, CURLSHOPT_UNLOCKFUNC, envd_share_unlock);
	curl_share_setopt(envd_share, CURLSHOPT_SHARE, CURL_LOCK_DATA_CONNECT);
}

void envd_reply_free(struct envd_reply *r)
{
	free(r->body);
	memset(r, 0, sizeof *r);
}

struct envd_buf {
	struct envd_reply *r;
	size_t cap;
	int fd; /* >= 0: the body goes here instead */
	int write_error;
};

static size_t envd_on_body(char *p, size_t size, size_t n, void *u)
{
	struct envd_buf *b = u;
	size_t len = size * n;
	if (b->fd >= 0) {
		size_t off = 0;
		while (off < len) {
			ssize_t w = write(b->fd, p + off, len - off);
			if (w <= 0) {
				b->write_error = 1;
				return 0;
			}
			off += (size_t)w;
		}
		return len;
	}
	struct envd_reply *r = b->r;
	if (r->body_len + len + 1 > b->cap) {
		size_t cap = b->cap ? b->cap : 4096;
		while (cap < r->body_len + len + 1)
			cap *= 2;
		char *nb = realloc(r->body, cap);
		if (!nb)
			return 0;
		r->body = nb;
		b->cap = cap;
	}
	memcpy(r->body + r->body_len, p, len);
	r->body_len += len;
	r->body[r->body_len] = 0;
	return len;
}

static size_t envd_on_header(char *p, size_t size, size_t n, void *u)
{
	struct envd_buf *b = u;
	size_t len = size * n;
	static const struct {
		const char *name;
		size_t off, cap;
	} want[] = {
	    {"content-type:", offsetof(struct envd_reply, content_type), 64},
	    {"x-width:", offsetof(struct envd_reply, x_width), 16},
	    {"x-height:", offsetof(struct envd_reply, x_height), 16},
	    {"x-scale:", offsetof(struct envd_reply, x_scale), 32},
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
			char *dst = (char *)b->r + want[i].off;
			snprintf(dst, want[i].cap, "%.*s", (int)vl, v);
		}
	}
	return len;
}

/* Sets up the handle's transport and auth; url_path starts with '/'. */
static CURL *envd_handle(const char *address, const char *token, const char *url_path,
			 struct curl_slist **hdrs, struct err *e)
{
	pthread_once(&envd_once, envd_init);
	CURL *h = curl_easy_init();
	if (!h) {
		err_set(e, ERR_INTERNAL, "cannot initialise libcurl");
		return NULL;
	}
	char url[8400];
	if (strncmp(address, "unix:", 5) == 0) {
		curl_easy_setopt(h, CURLOPT_UNIX_SOCKET_PATH, address + 5);
		snprintf(url, sizeof url, "http://envd%s", url_path);
	} else if (strncmp(address, "tcp:", 4) == 0) {
		snprintf(url, sizeof url, "http://%s%s", address + 4, url_path);
	} else {
		curl_easy_cleanup(h);
		err_set(e, ERR_INTERNAL, "bad envd address '%s'", address);
		return NULL;
	}
	curl_easy_setopt(h, CURLOPT_URL, url);
	curl_easy_setopt(h, CURLOPT_SHARE, envd_share);
	curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(h, CURLOPT_TCP_NODELAY, 1L);
	curl_easy_setopt(h, CURLOPT_PROXY, "");
	char auth[200];
	snprintf(auth, sizeof auth, "Authorization: Bearer %s", token);
	*hdrs = curl_slist_append(NULL, auth);
	*hdrs = curl_slist_append(*hdrs, "Expect:");
	return h;
}

static int envd_perform(CURL *h, struct curl_slist *hdrs, struct envd_buf *b, struct err *e)
{
	curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdrs);
	curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, envd_on_body);
	curl_easy_setopt(h, CURLOPT_WRITEDATA, b);
	curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, envd_on_header);
	curl_easy_setopt(h, CURLOPT_HEADERDATA, b);
	CURLcode rc = curl_easy_perform(h);
	long status = 0;
	curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
	curl_slist_free_all(hdrs);
	curl_easy_cleanup(h);
	b->r->status = (int)status;
	if (rc != CURLE_OK) {
		if (b->write_error)
			return err_set(e, ERR_INTERNAL, "cannot store what the computer sent");
		return err_set(e, rc == CURLE_OPERATION_TIMEDOUT ? ERR_TIMEOUT : ERR_UNAVAILABLE,
			       "the computer's agent did not answer: %s", curl_easy_strerror(rc));
	}
	return 0;
}

int envd_action(const char *address, const char *token, const char *action, const char *body,
		size_t len, long timeout_s, struct envd_reply *r, struct err *e)
{
	memset(r, 0, sizeof *r);
	char path[256];
	snprintf(path, sizeof path, "/v1/actions/%s", action);
	struct curl_slist *hdrs;
	CURL *h = envd_handle(address, token, path, &hdrs, e);
	if (!h)
		return -1;
	hdrs = curl_slist_append(hdrs, "Content-Type: application/json");
	curl_easy_setopt(h, CURLOPT_POST, 1L);
	curl_easy_setopt(h, CURLOPT_POSTFIELDS, body ? body : "");
	curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)(body ? len : 0));
	curl_easy_setopt(h, CURLOPT_TIMEOUT, timeout_s > 0 ? timeout_s : 600L);
	struct envd_buf b = {r, 0, -1, 0};
	return envd_perform(h, hdrs, &b, e);
}

int envd_health(const char *address, const char *token, long timeout_ms, struct envd_reply *r,
		struct err *e)
{
	memset(r, 0, sizeof *r);
	struct curl_slist *hdrs;
	CURL *h = envd_handle(address, token, "/health", &hdrs, e);
	if (!h)
		return -1;
	curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, timeout_ms);
	struct envd_buf b = {r, 0, -1, 0};
	return envd_perform(h, hdrs, &b, e);
}

/* "/v1/files?path=<escaped>" */
static int envd_files_path(const char *path, char *out, size_t len, struct err *e)
{
	char *esc = curl_easy_escape(NULL, path, 0);
	if (!esc)
		return err_set(e, ERR_INTERNAL, "out of memory");
	int n = snprintf(out, len, "/v1/files?path=%s", esc);
	curl_free(esc);
	if (n < 0 || (size_t)n >= len)
		return err_param(e, "path", "path: too long");
	return 0;
}

int envd_download(const char *address, const char *token, const char *path, int fd,
		  struct envd_reply *r, struct err *e)
{
	memset(r, 0, sizeof *r);
	char url[8300];
	if (envd_files_path(path, url, sizeof url, e) < 0)
		return -1;
	struct curl_slist *hdrs;
	CURL *h = envd_handle(address, token, url, &hdrs, e);
	if (!h)
		return -1;
	/* Errors come back as JSON, successes as the file: look at the status
	 * first by sending error bodies to memory. */
	struct envd_buf b = {r, 0, fd, 0};
	int rc = envd_perform(h, hdrs, &b, e);
	return rc;
}

static size_t envd_on_read(char *p, size_t size, size_t n, void *u)
{
	int fd = *(int *)u;
	ssize_t got = read(fd, p, size * n);
	return got < 0 ? CURL_READFUNC_ABORT : (size_t)got;
}

int envd_upload(const char *address, const char *token, const char *path, int fd, uint64_t len,
		struct envd_reply *r, struct err *e)
{
	memset(r, 0, sizeof *r);
	char url[8300];
	if (envd_files_path(path, url, sizeof url, e) < 0)
		return -1;
	struct curl_slist *hdrs;
	CURL *h = envd_handle(address, token, url, &hdrs, e);
	if (!h)
		return -1;
	curl_easy_setopt(h, CURLOPT_UPLOAD, 1L);
	curl_easy_setopt(h, CURLOPT_READFUNCTION, envd_on_read);
	curl_easy_setopt(h, CURLOPT_READDATA, &fd);
	curl_easy_setopt(h, CURLOPT_INFILESIZE_LARGE, (curl_off_t)len);
	struct envd_buf b = {r, 0, -1, 0};
	return envd_perform(h, hdrs, &b, e);
}
