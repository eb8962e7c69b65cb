#include "params.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

static const char *json_type_word(const json_t *v)
{
	switch (json_typeof(v)) {
	case JSON_OBJECT:
		return "an object";
	case JSON_ARRAY:
		return "an array";
	case JSON_STRING:
		return "a string";
	case JSON_INTEGER:
		return "an integer";
	case JSON_REAL:
		return "a number";
	case JSON_TRUE:
	case JSON_FALSE:
		return "a boolean";
	case JSON_NULL:
		return "null";
	}
	return "something else";
}

/* The parameter's value, or NULL when absent or JSON null. */
static json_t *param_get(const json_t *params, const char *name)
{
	if (!params || !json_is_object(params))
		return NULL;
	json_t *v = json_object_get(params, name);
	return json_is_null(v) ? NULL : v;
}

int param_int(const json_t *params, const char *name, long long lo, long long hi, long long *out,
	      struct err *e)
{
	json_t *v = param_get(params, name);
	if (!v)
		return 0;
	long long n;
	if (json_is_integer(v)) {
		n = json_integer_value(v);
	} else if (json_is_real(v) && floor(json_real_value(v)) == json_real_value(v) &&
		   fabs(json_real_value(v)) < 9e15) {
		n = (long long)json_real_value(v);
	} else {
		return err_param(e, name, "%s: expected an integer, got %s", name,
				 json_type_word(v));
	}
	if (n < lo || n > hi)
		return err_param(e, name, "%s: %lld is out of range [%lld, %lld]", name, n, lo, hi);
	*out = n;
	return 1;
}

int param_double(const json_t *params, const char *name, double lo, double hi, double *out,
		 struct err *e)
{
	json_t *v = param_get(params, name);
	if (!v)
		return 0;
	if (!json_is_number(v))
		return err_param(e, name, "%s: expected a number, got %s", name, json_type_word(v));
	double d = json_number_value(v);
	if (!(d >= lo && d <= hi))
		return err_param(e, name, "%s: %g is out of range [%g, %g]", name, d, lo, hi);
	*out = d;
	return 1;
}

int param_bool(const json_t *params, const char *name, bool *out, struct err *e)
{
	json_t *v = param_get(params, name);
	if (!v)
		return 0;
	if (!json_is_boolean(v))
		return err_param(e, name, "%s: expected true or false, got %s", name,
				 json_type_word(v));
	*out = json_is_true(v);
	return 1;
}

int param_str(const json_t *params, const char *name, const char **out, struct err *e)
{
	json_t *v = param_get(params, name);
	if (!v)
		return 0;
	if (!json_is_string(v))
		return err_param(e, name, "%s: expected a string, got %s", name, json_type_word(v));
	*out = json_string_value(v);
	return 1;
}

int param_enum(const json_t *params, const char *name, const char *const *choices, int *out,
	       struct err *e)
{
	const char *s;
	int r = param_str(params, name, &s, e);
	if (r <= 0)
		return r;
	for (int i = 0; choices[i]; i++) {
		if (strcasecmp(s, choices[i]) == 0) {
			*out = i;
			return 1;
		}
	}
	char list[256] = "";
	size_t used = 0;
	for (int i = 0; choices[i] && used < sizeof list; i++)
		used +=
		    snprintf(list + used, sizeof list - used, "%s%s", i ? ", " : "", choices[i]);
	return err_param(e, name, "%s: '%.64s' is not one of: %s", name, s, list);
}

int param_array(const json_t *params, const char *name, json_t **out, struct err *e)
{
	json_t *v = param_get(params, name);
	if (!v)
		return 0;
	if (!json_is_array(v))
		return err_param(e, name, "%s: expected an array, got %s", name, json_type_word(v));
	*out = v;
	return 1;
}

int param_object(const json_t *params, const char *name, json_t **out, struct err *e)
{
	json_t *v = param_get(params, name);
	if (!v)
		return 0;
	if (!json_is_object(v))
		return err_param(e, name, "%s: expected an object, got %s", name,
				 json_type_word(v));
	*out = v;
	return 1;
}

int param_need_int(const json_t *params, const char *name, long long lo, long long hi,
		   long long *out, struct err *e)
{
	int r = param_int(params, name, lo, hi, out, e);
	if (r == 0)
		return err_param(e, name, "%s: required", name);
	return r < 0 ? -1 : 0;
}

int param_need_str(const json_t *params, const char *name, const char **out, struct err *e)
{
	int r = param_str(params, name, out, e);
	if (r == 0)
		return err_param(e, name, "%s: required", name);
	return r < 0 ? -1 : 0;
}

int params_check_known(const json_t *params, const char *const *known, struct err *e)
{
	if (!params)
		return 0;
	if (!json_is_object(params))
		return err_set(e, ERR_BAD_REQUEST,
			       "the request body must be a JSON object of parameters, got %s",
			       json_type_word(params));
	const char *key;
	json_t *v;
	json_object_foreach((json_t *)params, key, v)
	{
		int found = 0;
		for (int i = 0; known && known[i]; i++)
			if (strcmp(key, known[i]) == 0)
				found = 1;
		if (!found) {
			char list[256] = "";
			size_t used = 0;
			for (int i = 0; known && known[i] && used < sizeof list; i++)
				used += snprintf(list + used, sizeof list - used, "%s%s",
						 i ? ", " : "", known[i]);
			return err_param(e, key, "%.60s: unknown parameter (accepted: %s)", key,
					 used ? list : "none");
		}
	}
	return 0;
}
