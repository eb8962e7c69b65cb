/*
 * log: see log.h. The JSON stream is a glibc fopencookie stream that
 * replaces stderr; its write function gathers whole lines and writes each
 * as one JSON object with one write(2).
 */
#include "log.h"
#include "utf8.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

static enum log_format log_format_now = LOG_TEXT;
static char log_prog[32] = "cubicle";

int log_format_parse(const char *s, enum log_format *out)
{
	if (s && strcmp(s, "text") == 0)
		*out = LOG_TEXT;
	else if (s && strcmp(s, "json") == 0)
		*out = LOG_JSON;
	else
		return -1;
	return 0;
}

enum log_format log_get_format(void)
{
	return log_format_now;
}

void log_json_escape(char *out, size_t len, size_t *k, const char *s)
{
	static const char hex[] = "0123456789abcdef";
	size_t n = strlen(s), i = 0, at = *k;
	while (i < n && at + 7 < len) {
		unsigned char ch = (unsigned char)s[i];
		if (ch == '"' || ch == '\\') {
			out[at++] = '\\';
			out[at++] = (char)ch;
			i++;
		} else if (ch < 0x20 || ch == 0x7f) {
			at += (size_t)snprintf(out + at, len - at, "\\u00%c%c", hex[ch >> 4],
					       hex[ch & 15]);
			i++;
		} else if (ch < 0x80) {
			out[at++] = (char)ch;
			i++;
		} else {
			/* Well-formed UTF-8 passes; any other byte becomes U+FFFD, so
			 * that a tenant's bytes never make a line that is not JSON. */
			unsigned long cp;
			size_t m = utf8_decode(s + i, n - i, &cp);
			if (m == 0) {
				memcpy(out + at, "\\ufffd", 6);
				at += 6;
				i++;
			} else {
				if (at + m + 1 >= len)
					break;
				memcpy(out + at, s + i, m);
				at += m;
				i += m;
			}
		}
	}
	out[at] = 0;
	*k = at;
}

/* ---- the JSON stream ------------------------------------------------------------- */

#define LOG_LINE_MAX 8192

static char log_pending[LOG_LINE_MAX];
static size_t log_pending_len;

static void log_write_all(const char *p, size_t n)
{
	while (n > 0) {
		ssize_t w = write(2, p, n);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return;
		p += w;
		n -= (size_t)w;
	}
}

/* Writes one line (no newline in it) as a JSON object. */
static void log_emit(const char *line, size_t n)
{
	static char out[LOG_LINE_MAX * 2 + 256];
	char msg[LOG_LINE_MAX + 1];
	memcpy(msg, line, n);
	msg[n] = 0;
	if (n >= 2 && msg[0] == '{' && msg[n - 1] == '}') { /* a JSON line already */
		msg[n] = '\n';
		log_write_all(msg, n + 1);
		return;
	}
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	struct tm tm;
	gmtime_r(&ts.tv_sec, &tm);
	size_t k = (size_t)snprintf(
	    out, sizeof out,
	    "{\"ts\":\"%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ\",\"prog\":\"%s\",\"msg\":\"",
	    tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
	    ts.tv_nsec / 1000000, log_prog);
	log_json_escape(out, sizeof out - 4, &k, msg);
	memcpy(out + k, "\"}\n", 3);
	log_write_all(out, k + 3);
}

/* glibc calls this under the stream's lock, so the statics need no other. */
static ssize_t log_cookie_write(void *cookie, const char *buf, size_t size)
{
	(void)cookie;
	for (size_t i = 0; i < size; i++) {
		if (buf[i] == '\n' || log_pending_len == LOG_LINE_MAX) {
			log_emit(log_pending, log_pending_len);
			log_pending_len = 0;
			if (buf[i] == '\n')
				continue;
		}
		log_pending[log_pending_len++] = buf[i];
	}
	return (ssize_t)size;
}

int log_set_format(enum log_format f, const char *prog)
{
	snprintf(log_prog, sizeof log_prog, "%s", prog ? prog : "cubicle");
	if (f == LOG_TEXT) {
		log_format_now = LOG_TEXT;
		return 0;
	}
	cookie_io_functions_t io = {.write = log_cookie_write};
	FILE *s = fopencookie(NULL, "w", io);
	if (!s)
		return -1;
	setvbuf(s, NULL, _IOLBF, LOG_LINE_MAX);
	fflush(stderr);
	stderr = s;
	log_format_now = LOG_JSON;
	return 0;
}

/* ---- request ids --------------------------------------------------------------- */

static _Thread_local char log_rid[LOG_REQUEST_ID_MAX + 1];

bool log_request_id_ok(const char *s)
{
	size_t n = 0;
	for (; s && s[n]; n++) {
		char ch = s[n];
		if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
		      (ch >= '0' && ch <= '9') || ch == '.' || ch == '_' || ch == ':' || ch == '-'))
			return false;
		if (n >= LOG_REQUEST_ID_MAX)
			return false;
	}
	return n > 0;
}

static uint64_t log_rid_seed;
static pthread_once_t log_rid_once = PTHREAD_ONCE_INIT;
static _Atomic uint64_t log_rid_next;

static void log_rid_init(void)
{
	if (getrandom(&log_rid_seed, sizeof log_rid_seed, GRND_NONBLOCK) != sizeof log_rid_seed) {
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		log_rid_seed = (uint64_t)ts.tv_nsec * 0x9e3779b97f4a7c15ull ^ (uint64_t)ts.tv_sec ^
			       ((uint64_t)getpid() << 32);
	}
}

void log_request_id_new(char *out, size_t len)
{
	pthread_once(&log_rid_once, log_rid_init);
	/* splitmix64 of seed + counter: distinct for distinct counters. */
	uint64_t z =
	    log_rid_seed + atomic_fetch_add_explicit(&log_rid_next, 1, memory_order_relaxed) *
			       0x9e3779b97f4a7c15ull;
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	z ^= z >> 31;
	snprintf(out, len, "%016llx", (unsigned long long)z);
}

const char *log_request_id(void)
{
	return log_rid;
}

void log_request_id_set(const char *id)
{
	snprintf(log_rid, sizeof log_rid, "%s", id && log_request_id_ok(id) ? id : "");
}
