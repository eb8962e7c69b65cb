/*
 * log: the log's format (the text of today, or one JSON object per line)
 * and request ids.
 *
 * Every binary writes its log to stderr with fprintf. log_set_format(JSON)
 * replaces stderr with a line-buffered stream that writes each line it is
 * given as {"ts","prog","msg"} (a line that is already a JSON object passes
 * as it is), synchronously to descriptor 2: no thread, nothing lost in a
 * crash that a plain fprintf would not lose. Children keep descriptor 2
 * itself.
 *
 * A request id names one request across cubicled and envd: httpd takes a
 * sane incoming X-Request-Id (1 to 64 of [A-Za-z0-9._:-]) or makes one,
 * echoes it in the answer, logs it, and sets it as the handler thread's
 * current id (log_request_id_set), which httpc sends on as X-Request-Id
 * with every call that thread makes: envd's log line for an action carries
 * the id of the cubicled request that caused it.
 */
#ifndef CUBICLE_WIRE_LOG_H
#define CUBICLE_WIRE_LOG_H

#include <stdbool.h>
#include <stddef.h>

enum log_format { LOG_TEXT, LOG_JSON };

#define LOG_REQUEST_ID_MAX 64

/* "text" or "json" into *out; -1 for anything else. */
int log_format_parse(const char *s, enum log_format *out);

/* Sets the format for the process (call once, early, before threads); prog
 * names the binary in JSON lines. 0, or -1 when stderr could not be
 * replaced (the format stays text). */
int log_set_format(enum log_format f, const char *prog);
enum log_format log_get_format(void);

/* Whether s is a request id to keep as it is. */
bool log_request_id_ok(const char *s);

/* A new request id (16 hex digits, unique in this process) into out
 * (len >= 17). Thread-safe, no system call. */
void log_request_id_new(char *out, size_t len);

/* The calling thread's current request id ("" = none), and setting it
 * (NULL or "" clears it). */
const char *log_request_id(void);
void log_request_id_set(const char *id);

/* Appends s to out (at *k, within len, always NUL-terminated) as a JSON
 * string body, without the quotes: ", \ and control bytes escaped. */
void log_json_escape(char *out, size_t len, size_t *k, const char *s);

#endif
