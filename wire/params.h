/*
 * params: typed access to a JSON object of request parameters, with errors
 * that name the parameter ("x: expected an integer, got string").
 *
 * Each getter returns 1 when the parameter is present and valid (*out set),
 * 0 when it is absent or null (*out untouched, so preset the default), and -1
 * with e filled when it is present but wrong. `params` may be NULL (= {}).
 */
#ifndef CUBICLE_WIRE_PARAMS_H
#define CUBICLE_WIRE_PARAMS_H

#include <stdbool.h>
#include <stddef.h>
#include <jansson.h>

#include "err.h"

int param_int(const json_t *params, const char *name, long long lo, long long hi, long long *out,
	      struct err *e);
int param_double(const json_t *params, const char *name, double lo, double hi, double *out,
		 struct err *e);
int param_bool(const json_t *params, const char *name, bool *out, struct err *e);
/* *out points into params; valid as long as params is. */
int param_str(const json_t *params, const char *name, const char **out, struct err *e);
/* One of the NULL-terminated `choices`; *out is its index. The error lists them. */
int param_enum(const json_t *params, const char *name, const char *const *choices, int *out,
	       struct err *e);
/* A JSON array (borrowed reference). */
int param_array(const json_t *params, const char *name, json_t **out, struct err *e);
/* A JSON object (borrowed reference). */
int param_object(const json_t *params, const char *name, json_t **out, struct err *e);

/* Same as the getters above but absence is an error too: return 0 or -1. */
int param_need_int(const json_t *params, const char *name, long long lo, long long hi,
		   long long *out, struct err *e);
int param_need_str(const json_t *params, const char *name, const char **out, struct err *e);

/*
 * Rejects a parameter not in the NULL-terminated `known` list, so a typo
 * ("widht") is a 400 naming it rather than silently ignored. Also rejects a
 * non-object `params`.
 */
int params_check_known(const json_t *params, const char *const *known, struct err *e);

#endif
