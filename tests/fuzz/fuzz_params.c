/*
 * libFuzzer harness for request parameters (wire/params.c) and error
 * answers (wire/err.c): every route of envd and cubicled reads its JSON
 * body through params.h, and cubicled turns every error answer of a guest's
 * envd into its own error with err_from_json.
 *
 * Input: byte 0 an HTTP status for err_from_json, then a JSON text. Checked:
 *   - every getter answers 1 (a value within the asked range or choices),
 *     0 (absent or null) or -1 (with an error naming the parameter);
 *   - params_check_known refuses exactly the objects with a name outside the
 *     list, and every non-object;
 *   - err_from_json makes a usable error of any JSON and any status (a code
 *     of the table, a message), and err_to_json always makes
 *     {"error":{"code","message"}} of it: what a compromised guest answers
 *     cannot make cubicled's own answer malformed.
 */
#include <math.h>

#include "err.h"
#include "fuzz.h"
#include "params.h"

static const char *const names[] = {"x",    "y",    "text",    "button", "timeout_s", "path",
				    "kind", "keys", "display", "scale",	 NULL};
static const char *const choices[] = {"left", "middle", "right", NULL};

static void check_err(const struct err *e, const char *param)
{
	CHECK(e->code != ERR_OK && e->message[0]);
	if (param)
		CHECK(strcmp(e->param, param) == 0 || e->param[0] == 0);
	json_t *j = err_to_json(e);
	CHECK(j && json_is_string(json_object_get(json_object_get(j, "error"), "code")) &&
	      json_is_string(json_object_get(json_object_get(j, "error"), "message")));
	json_decref(j);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1)
		return 0;
	int status = 100 + data[0] * 2;
	json_t *j = json_loadb((const char *)data + 1, size - 1, JSON_DECODE_ANY, NULL);
	if (!j)
		return 0;
	struct err e = {0};
	for (const char *const *n = names; *n; n++) {
		long long i = 7;
		int rc = param_int(j, *n, -5, 5000, &i, &e);
		CHECK(rc >= -1 && rc <= 1);
		if (rc == 1)
			CHECK(i >= -5 && i <= 5000);
		if (rc == 0)
			CHECK(i == 7);
		if (rc < 0)
			check_err(&e, *n);
		double d = 0.5;
		rc = param_double(j, *n, 0.1, 4.0, &d, &e);
		if (rc == 1)
			CHECK(d >= 0.1 && d <= 4.0 && !isnan(d));
		if (rc < 0)
			check_err(&e, *n);
		bool b;
		if (param_bool(j, *n, &b, &e) < 0)
			check_err(&e, *n);
		const char *s = NULL;
		rc = param_str(j, *n, &s, &e);
		if (rc == 1)
			CHECK(s);
		if (rc < 0)
			check_err(&e, *n);
		int k = -1;
		rc = param_enum(j, *n, choices, &k, &e);
		if (rc == 1)
			CHECK(k >= 0 && k < 3);
		if (rc < 0)
			check_err(&e, *n);
		json_t *a = NULL;
		if (param_array(j, *n, &a, &e) == 1)
			CHECK(json_is_array(a));
		if (param_object(j, *n, &a, &e) == 1)
			CHECK(json_is_object(a));
		if (param_need_int(j, *n, 0, 10, &i, &e) < 0)
			check_err(&e, *n);
		if (param_need_str(j, *n, &s, &e) < 0)
			check_err(&e, *n);
	}
	int rc = params_check_known(j, names, &e);
	bool unknown = !json_is_object(j);
	const char *key;
	json_t *v;
	if (json_is_object(j))
		json_object_foreach(j, key, v)
		{
			bool found = false;
			for (const char *const *n = names; *n; n++)
				found |= strcmp(*n, key) == 0;
			unknown |= !found;
		}
	CHECK((rc < 0) == unknown);
	if (rc < 0)
		check_err(&e, NULL);

	/* The same JSON as an envd error answer. */
	struct err g = {0};
	CHECK(err_from_json(&g, j, status) == -1);
	CHECK(err_http_status(g.code) >= 400);
	check_err(&g, NULL);
	json_decref(j);
	return 0;
}
