#include "err.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static int err_vset(struct err *e, enum err_code code, const char *param, const char *fmt,
		    va_list ap)
{
	if (!e)
		return -1;
	e->code = code;
	snprintf(e->param, sizeof e->param, "%s", param ? param : "");
	vsnprintf(e->message, sizeof e->message, fmt, ap);
	return -1;
}

/* Sets e without formatting: the message is taken as it is. */
static void err_copy(struct err *e, enum err_code code, const char *param, const char *message)
{
	if (!e)
		return;
	e->code = code;
	snprintf(e->param, sizeof e->param, "%s", param ? param : "");
	snprintf(e->message, sizeof e->message, "%s", message);
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

int err_from_json(struct err *e, const json_t *j, int http_status)
{
	const json_t *inner = json_object_get(j, "error");
	const char *code = json_string_value(json_object_get(inner, "code"));
	const char *msg = json_string_value(json_object_get(inner, "message"));
	const char *param = json_string_value(json_object_get(inner, "param"));
	size_t n = sizeof err_table / sizeof err_table[0], i;
	for (i = 1; i < n; i++) /* by name, else the first code of the status */
		if (code && strcmp(err_table[i].name, code) == 0)
			break;
	for (size_t k = 1; i == n && k < n; k++)
		if (err_table[k].status == http_status)
			i = k;
	enum err_code c = i < n ? (enum err_code)i : ERR_INTERNAL;
	err_copy(e, c, param, msg ? msg : err_table[c].name);
	return -1;
}
