#include "err.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static int err_vset(struct err *e, enum err_code code, const char *param, const char *fmt,
		    va_list ap)
{
	if (!e)
		return -1;
	/* Through a copy: a caller may wrap the error already in e, passing
	 * e->message as an argument ("step 2: %s"). */
	char msg[sizeof e->message];
	vsnprintf(msg, sizeof msg, fmt, ap);
	e->code = code;
	snprintf(e->param, sizeof e->param, "%s", param ? param : "");
	memcpy(e->message, msg, sizeof msg);
	return -1;
}

int err_set(struct err *e, enum err_code code, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	err_vset(e, code, NULL, fmt, ap);
	va_end(ap);
	return -1;
}

int err_param(struct err *e, const char *param, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	err_vset(e, ERR_INVALID, param, fmt, ap);
	va_end(ap);
	return -1;
}

int err_set_param(struct err *e, enum err_code code, const char *param, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	err_vset(e, code, param, fmt, ap);
	va_end(ap);
	return -1;
}

int err_rename_param(struct err *e, const char *param)
{
	if (e)
		snprintf(e->param, sizeof e->param, "%s", param ? param : "");
	return -1;
}

void err_clear(struct err *e)
{
	memset(e, 0, sizeof *e);
}

static const struct {
	int status;
	const char *name;
} err_table[] = {
    [ERR_OK] = {200, "ok"},
    [ERR_INVALID] = {400, "invalid_parameter"},
    [ERR_BAD_REQUEST] = {400, "bad_request"},
    [ERR_UNAUTHORIZED] = {401, "unauthorized"},
    [ERR_FORBIDDEN] = {403, "forbidden"},
    [ERR_NOT_FOUND] = {404, "not_found"},
    [ERR_CONFLICT] = {409, "conflict"},
    [ERR_TOO_LARGE] = {413, "too_large"},
    [ERR_LIMIT] = {429, "limit_reached"},
    [ERR_INTERNAL] = {500, "internal"},
    [ERR_UNAVAILABLE] = {503, "unavailable"},
    [ERR_TIMEOUT] = {504, "timeout"},
    [ERR_BAD_GATEWAY] = {502, "bad_gateway"},
    [ERR_NO_SPACE] = {507, "insufficient_storage"},
    [ERR_MISDIRECTED] = {421, "misdirected"},
};

int err_http_status(enum err_code code)
{
	if ((unsigned)code >= sizeof err_table / sizeof err_table[0])
		return 500;
	return err_table[code].status;
}

const char *err_code_name(enum err_code code)
{
	if ((unsigned)code >= sizeof err_table / sizeof err_table[0])
		return "internal";
	return err_table[code].name;
}

/* A message may end in a UTF-8 sequence cut by truncation, or quote bad input:
 * JSON needs valid UTF-8, so fall back to replacing every non-ASCII byte. */
static json_t *json_string_lossy(const char *s)
{
	json_t *j = json_string(s);
	if (j)
		return j;
	char buf[sizeof((struct err *)0)->message];
	size_t i;
	for (i = 0; s[i] && i + 1 < sizeof buf; i++)
		buf[i] = (unsigned char)s[i] < 0x80 ? s[i] : '?';
	buf[i] = 0;
	return json_string(buf);
}

json_t *err_to_json(const struct err *e)
{
	json_t *inner =
	    json_pack("{s:s, s:o}", "code", err_code_name(e->code), "message",
		      json_string_lossy(e->message[0] ? e->message : err_code_name(e->code)));
	if (inner && e->param[0])
		json_object_set_new(inner, "param", json_string_lossy(e->param));
	return json_pack("{s:o}", "error", inner);
}

/* The code whose status is `status`, the first of the table for a shared one. */
static enum err_code err_code_for_status(int status)
{
	for (size_t i = 1; i < sizeof err_table / sizeof err_table[0]; i++)
		if (err_table[i].status == status)
			return (enum err_code)i;
	return status >= 400 && status < 500 ? ERR_BAD_REQUEST : ERR_INTERNAL;
}

const char *err_code_static(const char *name, int status)
{
	for (size_t i = 1; name && i < sizeof err_table / sizeof err_table[0]; i++)
		if (strcmp(name, err_table[i].name) == 0)
			return err_table[i].name;
	if (status == 408)
		return "request_timeout";
	for (size_t i = 1; i < sizeof err_table / sizeof err_table[0]; i++)
		if (err_table[i].status == status)
			return err_table[i].name;
	return "other";
}

int err_code_index(const char *name)
{
	size_t n = sizeof err_table / sizeof err_table[0]; /* 1..n-1: the codes */
	for (size_t i = 1; name && i < n; i++)
		if (strcmp(name, err_table[i].name) == 0)
			return (int)i - 1;
	if (name && strcmp(name, "request_timeout") == 0)
		return (int)n - 1;
	return (int)n; /* other */
}

const char *err_code_at(int i)
{
	int n = (int)(sizeof err_table / sizeof err_table[0]);
	if (i >= 0 && i < n - 1)
		return err_table[i + 1].name;
	return i == n - 1 ? "request_timeout" : "other";
}

_Static_assert(sizeof err_table / sizeof err_table[0] + 1 == ERR_CODE_NAMES,
	       "ERR_CODE_NAMES: the codes, request_timeout and other");

int err_from_json(struct err *e, const json_t *j, int status)
{
	const json_t *inner = json_object_get(j, "error");
	const char *code = json_string_value(json_object_get(inner, "code"));
	const char *message = json_string_value(json_object_get(inner, "message"));
	const char *param = json_string_value(json_object_get(inner, "param"));
	enum err_code c = err_code_for_status(status);
	for (size_t i = 1; code && i < sizeof err_table / sizeof err_table[0]; i++)
		if (strcmp(code, err_table[i].name) == 0)
			c = (enum err_code)i;
	if (message && message[0])
		err_set(e, c, "%s", message);
	else
		err_set(e, c, "HTTP status %d (%s)", status, err_code_name(c));
	if (e && param)
		snprintf(e->param, sizeof e->param, "%s", param);
	return -1;
}
