/*
 * err: how every cubicle function reports failure.
 *
 * A function that can fail takes a `struct err *` as its last argument,
 * returns -1 (or NULL) and fills it with a code and a message a user can act
 * on. The HTTP layers turn it into {"error":{"code","message","param"?}} with
 * the status err_http_status() gives. Nothing in cubicle aborts on bad input.
 */
#ifndef CUBICLE_WIRE_ERR_H
#define CUBICLE_WIRE_ERR_H

#include <jansson.h>

enum err_code {
	ERR_OK = 0,
	ERR_INVALID,	  /* 400 a parameter is missing, malformed or out of range */
	ERR_BAD_REQUEST,  /* 400 the request itself is malformed (JSON syntax, ...) */
	ERR_UNAUTHORIZED, /* 401 no or wrong credentials */
	ERR_FORBIDDEN,	  /* 403 credentials fine, not allowed */
	ERR_NOT_FOUND,	  /* 404 no such action, computer, window, file */
	ERR_CONFLICT,	  /* 409 not possible in this state (no display, ...) */
	ERR_TOO_LARGE,	  /* 413 body or file over a limit */
	ERR_LIMIT,	  /* 429 a quota is reached */
	ERR_INTERNAL,	  /* 500 a bug or an unexpected system failure */
	ERR_UNAVAILABLE,  /* 503 a dependency is down or busy */
	ERR_TIMEOUT,	  /* 504 the operation ran past its deadline */
	ERR_BAD_GATEWAY,  /* 502 a dependency answered wrong: malformed, too large */
	ERR_NO_SPACE,	  /* 507 a storage quota is reached, or the disk is full */
	ERR_MISDIRECTED,  /* 421 a node-to-node call reached a host that does not hold it */
};

struct err {
	enum err_code code;
	char param[64];	   /* the parameter at fault, "" if none */
	char message[512]; /* one sentence, no trailing newline */
};

/* Fills e (which may be NULL) and returns -1, so callers can `return err_set(...)`.
 * The arguments may be e's own message (wrapping it: "step 2: %s"). */
int err_set(struct err *e, enum err_code code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* ERR_INVALID naming `param`; the message should say what is wrong with it. */
int err_param(struct err *e, const char *param, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Any other code naming `param`: a well-formed parameter that names what is
 * not there (ERR_NOT_FOUND), is too large (ERR_TOO_LARGE), is forbidden... */
int err_set_param(struct err *e, enum err_code code, const char *param, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* Names `param` as the parameter at fault of the error already in e (which
 * may be NULL), keeping its code and message: a nested field's check
 * reported under its parent ("display" for display.width). Returns -1. */
int err_rename_param(struct err *e, const char *param);

/* Clears e to ERR_OK. */
void err_clear(struct err *e);

int err_http_status(enum err_code code);
/* Stable machine-readable names: "invalid_parameter", "not_found", ... */
const char *err_code_name(enum err_code code);

/* The static name of an answer's error code: `name` when it is one of the
 * table's, else the code of `status` (the first of the table for a shared
 * status, "request_timeout" for 408, "other" for one the table lacks):
 * what /metrics counts errors by, whatever a guest answered. */
const char *err_code_static(const char *name, int status);

/* The names err_code_static answers, as indices for counters:
 * 0 <= err_code_index(name) < ERR_CODE_NAMES ("other" for a name it does not
 * know), err_code_at(i) its name. */
#define ERR_CODE_NAMES 16
int err_code_index(const char *name);
const char *err_code_at(int i);

/* {"error":{"code","message","param"?}}; the caller owns the reference. */
json_t *err_to_json(const struct err *e);

/*
 * The reverse, for clients: fills e from an error answer `j` of HTTP status
 * `status` and returns -1. An unknown code or a body that is not such an
 * object still gives a usable error (code from the status, a generic message).
 */
int err_from_json(struct err *e, const json_t *j, int status);

#endif
