/*
 * computeruse-openai: OpenAI's computer-use actions on envd's actions, and
 * the computer_call_output item that answers a computer_call: a screenshot
 * taken after its action (computer_use_preview) or its actions[] (the
 * computer tool), as {"type": "computer_screenshot", "image_url": "data:..."}
 * (docs/computer-use.md has the sources).
 */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "computeruse-internal.h"
#include "params.h"
#include "clock.h"

/* ---- OpenAI ------------------------------------------------------------------------ */

/* Names for envd, from keys[]: letters in a combination are lowercased
 * (["CTRL","A"] is ctrl+a, not ctrl+shift+a); a lone key is as sent. */
static int cu_o_keys(const json_t *in, const char *param, bool required, char names[][48], int *n,
		     struct err *e)
{
	json_t *keys = NULL;
	*n = 0;
	if (param_array(in, param, &keys, e) < 0)
		return -1;
	if (!keys && !required)
		return 0;
	if (!keys || json_array_size(keys) == 0 || json_array_size(keys) > CU_MAX_KEYS)
		return err_param(e, param, "%s: 1 to %d key names, like [\"CTRL\", \"A\"]", param,
				 CU_MAX_KEYS);
	size_t count = json_array_size(keys);
	for (size_t i = 0; i < count; i++) {
		const char *k = json_string_value(json_array_get(keys, i));
		if (!k || !*k || strlen(k) >= 48)
			return err_param(e, param, "%s: item %zu is not a key name", param, i);
		snprintf(names[i], 48, "%s", k);
		if (count > 1 && strlen(k) == 1 && isalpha((unsigned char)k[0]))
			names[i][0] = (char)tolower((unsigned char)k[0]);
	}
	*n = (int)count;
	return 0;
}

/* Runs one envd action with OpenAI's optional held `keys` (params stolen). */
static int cu_o_held(struct cu *u, const json_t *in, const char *action, json_t *params,
		     struct err *e)
{
	char names[CU_MAX_KEYS][48], *keys[CU_MAX_KEYS];
	int n;
	if (cu_o_keys(in, "keys", false, names, &n, e) < 0) {
		json_decref(params);
		return -1;
	}
	for (int i = 0; i < n; i++)
		keys[i] = names[i];
	return cu_with_keys(u, keys, n, action, params, 0, e);
}

typedef int (*cu_o_fn)(struct cu *u, const json_t *in, struct err *e);

static int cu_o_click(struct cu *u, const json_t *in, struct err *e)
{
	static const char *const buttons[] = {"left", "right", "wheel", "back", "forward", NULL};
	static const char *const envd[] = {"left", "right", "middle", "back", "forward"};
	int x, y, b = 0;
	if (param_enum(in, "button", buttons, &b, e) < 0 || cu_xy(u, in, &x, &y, e) < 0)
		return -1;
	json_t *p = cu_at(true, x, y);
	json_object_set_new(p, "button", json_string(envd[b]));
	return cu_o_held(u, in, "click", p, e);
}

static int cu_o_double_click(struct cu *u, const json_t *in, struct err *e)
{
	int x, y;
	if (cu_xy(u, in, &x, &y, e) < 0)
		return -1;
	return cu_o_held(u, in, "double_click", cu_at(true, x, y), e);
}

static int cu_o_move(struct cu *u, const json_t *in, struct err *e)
{
	int x, y;
	if (cu_xy(u, in, &x, &y, e) < 0)
		return -1;
	return cu_o_held(u, in, "move_cursor", cu_at(true, x, y), e);
}

/* path: [{x, y}, ...], the first point pressed, the last released. */
static int cu_o_drag(struct cu *u, const json_t *in, struct err *e)
{
	json_t *path = NULL;
	if (param_array(in, "path", &path, e) < 0)
		return -1;
	size_t n = json_array_size(path);
	if (n < 2 || n > 1000)
		return err_param(e, "path", "path: 2 to 1000 points [{\"x\", \"y\"}, ...]");
	json_t *via = json_array();
	int x0 = 0, y0 = 0, x = 0, y = 0;
	for (size_t i = 0; i < n; i++) {
		json_t *pt = json_array_get(path, i);
		if (!json_is_object(pt) || cu_map(u, "path", "path", json_object_get(pt, "x"),
						  json_object_get(pt, "y"), &x, &y, e) < 0) {
			json_decref(via);
			char why[sizeof e->message];
			snprintf(why, sizeof why, "%s", json_is_object(pt) ? e->message : "");
			return err_param(e, "path",
					 "path: point %zu must be {\"x\": int, \"y\": int}%s%s", i,
					 why[0] ? "; " : "", why);
		}
		if (i == 0) {
			x0 = x;
			y0 = y;
		} else if (i + 1 < n) {
			json_array_append_new(via, json_pack("[i, i]", x, y));
		}
	}
	json_t *p = json_pack("{s:i, s:i, s:i, s:i, s:o}", "from_x", x0, "from_y", y0, "to_x", x,
			      "to_y", y, "path", via);
	return cu_o_held(u, in, "drag", p, e);
}

static int cu_o_keypress(struct cu *u, const json_t *in, struct err *e)
{
	char names[CU_MAX_KEYS][48];
	int n;
	if (cu_o_keys(in, "keys", true, names, &n, e) < 0)
		return -1;
	if (n == 1)
		return cu_do(u, "key", json_pack("{s:s}", "key", names[0]), NULL, e);
	json_t *keys = json_array();
	for (int i = 0; i < n; i++)
		json_array_append_new(keys, json_string(names[i]));
	return cu_do(u, "hotkey", json_pack("{s:o}", "keys", keys), NULL, e);
}

/* Pixels to wheel notches: at least one for any movement. */
static long long cu_notches(long long px)
{
	long long n = (llabs(px) + CU_PIXELS_PER_NOTCH / 2) / CU_PIXELS_PER_NOTCH;
	return n < 1 ? 1 : n > 1000 ? 1000 : n;
}

static int cu_o_scroll(struct cu *u, const json_t *in, struct err *e)
{
	int x, y;
	long long sx = 0, sy = 0;
	if (cu_xy(u, in, &x, &y, e) < 0 ||
	    param_int(in, "scroll_x", -1000000, 1000000, &sx, e) < 0 ||
	    param_int(in, "scroll_y", -1000000, 1000000, &sy, e) < 0)
		return -1;
	if (sx == 0 && sy == 0)
		return cu_o_held(u, in, "move_cursor", cu_at(true, x, y), e);
	for (int axis = 0; axis < 2; axis++) {
		long long v = axis ? sx : sy;
		if (!v)
			continue;
		const char *dir = axis ? (v > 0 ? "right" : "left") : (v > 0 ? "down" : "up");
		json_t *p = cu_at(true, x, y);
		json_object_set_new(p, "direction", json_string(dir));
		json_object_set_new(p, "clicks", json_integer(cu_notches(v)));
		if (cu_o_held(u, in, "scroll", p, e) < 0)
			return -1;
	}
	return 0;
}

static int cu_o_type(struct cu *u, const json_t *in, struct err *e)
{
	const char *text = NULL;
	if (param_str(in, "text", &text, e) < 0)
		return -1;
	if (!text)
		return err_param(e, "text", "text: required for type");
	return cu_do(u, "type", json_pack("{s:s}", "text", text), NULL, e);
}

/* OpenAI's wait has no length: a second, as its sample computers do. */
static int cu_o_wait(struct cu *u, const json_t *in, struct err *e)
{
	(void)in;
	if (cu_spend_wait(u, 1000, "type", e) < 0)
		return -1;
	clock_sleep_ms(1000);
	u->changed = false; /* waited for it to settle */
	return 0;
}

static int cu_o_screenshot(struct cu *u, const json_t *in, struct err *e)
{
	(void)u, (void)in, (void)e;
	return 0;
}

static const char *const cu_o_xy[] = {"x", "y", "keys", NULL};

static const struct cu_o_action {
	const char *name;
	cu_o_fn run;
	const char *const *params; /* besides type */
} cu_o_actions[] = {
    {"click", cu_o_click, (const char *const[]){"x", "y", "button", "keys", NULL}},
    {"double_click", cu_o_double_click, cu_o_xy},
    {"drag", cu_o_drag, (const char *const[]){"path", "keys", NULL}},
    {"keypress", cu_o_keypress, (const char *const[]){"keys", NULL}},
    {"move", cu_o_move, cu_o_xy},
    {"screenshot", cu_o_screenshot, (const char *const[]){NULL}},
    {"scroll", cu_o_scroll, (const char *const[]){"x", "y", "scroll_x", "scroll_y", "keys", NULL}},
    {"type", cu_o_type, (const char *const[]){"text", NULL}},
    {"wait", cu_o_wait, (const char *const[]){NULL}},
};

static int cu_o_check(const json_t *in, const struct cu_o_action *a, struct err *e)
{
	const char *k;
	json_t *v;
	json_object_foreach((json_t *)in, k, v)
	{
		bool ok = strcmp(k, "type") == 0 || cu_wrapper_key(k) || json_is_null(v);
		for (size_t i = 0; !ok && a->params[i]; i++)
			ok = strcmp(a->params[i], k) == 0;
		if (!ok)
			return err_param(e, k, "%.60s: not a parameter of OpenAI's %s action", k,
					 a->name);
	}
	return 0;
}

int cu_openai(struct cu *u, const json_t *in, struct err *e)
{
	const char *name = NULL;
	if (!json_is_object(in))
		return err_param(e, "type", "type: an action is an object {\"type\": ...}");
	if (param_str(in, "type", &name, e) < 0)
		return -1;
	if (!name)
		return err_param(e, "type", "type: required");
	const struct cu_o_action *a = NULL;
	for (size_t i = 0; i < sizeof cu_o_actions / sizeof cu_o_actions[0]; i++)
		if (strcmp(cu_o_actions[i].name, name) == 0)
			a = &cu_o_actions[i];
	if (!a)
		return err_param(e, "type",
				 "type: '%.40s' is not an OpenAI computer-use action (click, "
				 "double_click, drag, keypress, move, screenshot, scroll, type, "
				 "wait)",
				 name);
	return cu_o_check(in, a, e) < 0 ? -1 : a->run(u, in, e);
}

int cu_openai_output(struct cu *u, const char *call_id, bool incomplete, json_t **out,
		     struct err *e)
{
	char *b64 = NULL;
	if (cu_screenshot(u, NULL, &b64, e) < 0)
		return -1;
	size_t len = strlen(b64) + 32;
	char *url = malloc(len);
	if (url)
		snprintf(url, len, "data:image/png;base64,%s", b64);
	free(b64);
	*out = url ? json_pack("{s:s, s:{s:s, s:s}}", "type", "computer_call_output", "output",
			       "type", "computer_screenshot", "image_url", url)
		   : NULL;
	free(url);
	if (*out && call_id)
		json_object_set_new(*out, "call_id", json_string(call_id));
	if (*out && incomplete)
		json_object_set_new(*out, "status", json_string("incomplete"));
	return *out ? 0 : err_set(e, ERR_INTERNAL, "out of memory");
}
