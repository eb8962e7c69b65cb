/*
 * computeruse-anthropic: the input of Anthropic's `computer` tool
 * (computer_20250124 and zoom) on envd's actions, answered with a
 * tool_result block: a screenshot after every action but cursor_position,
 * as the reference implementation does (docs/api.md has the table).
 */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "computeruse-internal.h"
#include "params.h"
#include "clock.h"

/* ---- Anthropic ------------------------------------------------------------------- */

enum {
	A_COORD = 1 << 0,
	A_START = 1 << 1,
	A_TEXT = 1 << 2,
	A_DURATION = 1 << 3,
	A_SCROLL = 1 << 4,
	A_REGION = 1 << 5,
};

static const struct {
	const char *name;
	unsigned bit;
} cu_a_params[] = {
    {"coordinate", A_COORD},  {"start_coordinate", A_START},  {"text", A_TEXT},
    {"duration", A_DURATION}, {"scroll_direction", A_SCROLL}, {"scroll_amount", A_SCROLL},
    {"region", A_REGION},
};

typedef int (*cu_a_fn)(struct cu *u, const char *action, const json_t *in, struct cu_result *res,
		       struct err *e);

/* left_click, right_click, middle_click, double_click, triple_click: envd's
 * actions of the same names, with `text`'s modifier keys held. */
static int cu_a_click(struct cu *u, const char *action, const json_t *in, struct cu_result *res,
		      struct err *e)
{
	(void)res;
	int x, y, has;
	const char *mods = NULL;
	if ((has = cu_coordinate(u, in, "coordinate", &x, &y, e)) < 0 ||
	    param_str(in, "text", &mods, e) < 0)
		return -1;
	return cu_with_mods(u, mods, action, cu_at(has, x, y), e);
}

static int cu_a_mouse_move(struct cu *u, const char *action, const json_t *in,
			   struct cu_result *res, struct err *e)
{
	(void)action, (void)res;
	int x, y, has = cu_coordinate(u, in, "coordinate", &x, &y, e);
	if (has == 0)
		return err_param(e, "coordinate", "coordinate: required for mouse_move");
	return has < 0 ? -1 : cu_do(u, "move_cursor", cu_at(true, x, y), NULL, e);
}

static int cu_a_drag(struct cu *u, const char *action, const json_t *in, struct cu_result *res,
		     struct err *e)
{
	(void)action, (void)res;
	int x0, y0, x1, y1;
	int has_end = cu_coordinate(u, in, "coordinate", &x1, &y1, e);
	if (has_end == 0)
		return err_param(e, "coordinate", "coordinate: required (where the drag ends)");
	int has_start = has_end < 0 ? -1 : cu_coordinate(u, in, "start_coordinate", &x0, &y0, e);
	if (has_start < 0 || (has_start == 0 && cu_cursor(u, &x0, &y0, e) < 0))
		return -1;
	return cu_do(
	    u, "drag",
	    json_pack("{s:i, s:i, s:i, s:i}", "from_x", x0, "from_y", y0, "to_x", x1, "to_y", y1),
	    NULL, e);
}

static int cu_a_mouse_button(struct cu *u, const char *action, const json_t *in,
			     struct cu_result *res, struct err *e)
{
	(void)res;
	int x, y, has = cu_coordinate(u, in, "coordinate", &x, &y, e);
	if (has < 0)
		return -1;
	const char *envd = strcmp(action, "left_mouse_down") == 0 ? "mouse_down" : "mouse_up";
	return cu_do(u, envd, cu_at(has, x, y), NULL, e);
}

static int cu_a_scroll(struct cu *u, const char *action, const json_t *in, struct cu_result *res,
		       struct err *e)
{
	(void)action, (void)res;
	static const char *const dirs[] = {"up", "down", "left", "right", NULL};
	int x, y, dir = -1, has;
	long long amount = -1;
	const char *mods = NULL;
	if ((has = cu_coordinate(u, in, "coordinate", &x, &y, e)) < 0 ||
	    param_enum(in, "scroll_direction", dirs, &dir, e) < 0 ||
	    param_int(in, "scroll_amount", 0, 1000, &amount, e) < 0 ||
	    param_str(in, "text", &mods, e) < 0)
		return -1;
	if (dir < 0)
		return err_param(e, "scroll_direction",
				 "scroll_direction: required, one of up, down, left, right");
	if (amount < 0)
		return err_param(e, "scroll_amount", "scroll_amount: required (wheel notches)");
	if (amount == 0) /* nothing to scroll: only go there */
		return has ? cu_do(u, "move_cursor", cu_at(true, x, y), NULL, e) : 0;
	json_t *p = cu_at(has, x, y);
	json_object_set_new(p, "direction", json_string(dirs[dir]));
	json_object_set_new(p, "clicks", json_integer(amount));
	return cu_with_mods(u, mods, "scroll", p, e);
}

static int cu_need_text(const json_t *in, const char *action, const char **text, struct err *e)
{
	*text = NULL;
	if (param_str(in, "text", text, e) < 0)
		return -1;
	if (!*text)
		return err_param(e, "text", "text: required for %s", action);
	return 0;
}

/* xdotool's `key` takes several space-separated combinations: one by one. */
static int cu_a_key(struct cu *u, const char *action, const json_t *in, struct cu_result *res,
		    struct err *e)
{
	(void)res;
	const char *text;
	char buf[512], *combos[CU_MAX_KEYS];
	int n;
	if (cu_need_text(in, action, &text, e) < 0 ||
	    (n = cu_split(text, " \t\n", buf, sizeof buf, combos, "text", e)) < 0)
		return -1;
	for (int i = 0; i < n; i++)
		if (cu_do(u, "key", json_pack("{s:s}", "key", combos[i]), NULL, e) < 0)
			return -1;
	return 0;
}

/* Seconds, (0, 100] for hold_key and [0, 100] for wait, as the reference. */
static int cu_duration(const json_t *in, const char *action, double lo, double *secs, struct err *e)
{
	*secs = -1;
	if (param_double(in, "duration", 0, 100, secs, e) < 0)
		return -1;
	if (*secs < 0)
		return err_param(e, "duration", "duration: required for %s (seconds)", action);
	if (*secs < lo)
		return err_param(e, "duration", "duration: must be more than 0 seconds");
	return 0;
}

static int cu_a_hold_key(struct cu *u, const char *action, const json_t *in, struct cu_result *res,
			 struct err *e)
{
	(void)res;
	const char *text;
	double secs;
	char buf[256], *keys[CU_MAX_KEYS];
	int n;
	if (cu_need_text(in, action, &text, e) < 0 || cu_duration(in, action, 1e-9, &secs, e) < 0 ||
	    (n = cu_split(text, "+ ", buf, sizeof buf, keys, "text", e)) < 0)
		return -1;
	return cu_with_keys(u, keys, n, NULL, NULL, (long long)(secs * 1000 + 0.5), e);
}

static int cu_a_type(struct cu *u, const char *action, const json_t *in, struct cu_result *res,
		     struct err *e)
{
	(void)res;
	const char *text;
	if (cu_need_text(in, action, &text, e) < 0)
		return -1;
	return cu_do(u, "type", json_pack("{s:s}", "text", text), NULL, e);
}

static int cu_a_wait(struct cu *u, const char *action, const json_t *in, struct cu_result *res,
		     struct err *e)
{
	(void)u, (void)res;
	double secs;
	if (cu_duration(in, action, 0, &secs, e) < 0)
		return -1;
	clock_sleep_ms((long long)(secs * 1000 + 0.5));
	return 0;
}

static int cu_a_screenshot(struct cu *u, const char *action, const json_t *in,
			   struct cu_result *res, struct err *e)
{
	(void)u, (void)action, (void)in, (void)res, (void)e;
	return 0;
}

static int cu_a_cursor_position(struct cu *u, const char *action, const json_t *in,
				struct cu_result *res, struct err *e)
{
	(void)action, (void)in;
	int x, y;
	if (cu_cursor(u, &x, &y, e) < 0)
		return -1;
	if (u->scaled) {
		x = cu_to_agent(x, u->dw, u->sw);
		y = cu_to_agent(y, u->dh, u->sh);
	}
	snprintf(res->text, sizeof res->text, "X=%d,Y=%d", x, y);
	return 0;
}

/* zoom: region [x0, y0, x1, y1] of the display (x1, y1 excluded), shown at
 * the screen's own resolution, fitted into the display. */
static int cu_a_zoom(struct cu *u, const char *action, const json_t *in, struct cu_result *res,
		     struct err *e)
{
	(void)action;
	json_t *a = NULL;
	if (param_array(in, "region", &a, e) < 0)
		return -1;
	long long v[4];
	for (size_t i = 0; i < 4; i++) {
		json_t *j = json_array_get(a, i);
		if (!a || json_array_size(a) != 4 || !json_is_integer(j))
			return err_param(e, "region", "region: expected [x0, y0, x1, y1] integers");
		v[i] = json_integer_value(j);
	}
	int dw = u->scaled ? u->dw : INT_MAX, dh = u->scaled ? u->dh : INT_MAX;
	if (v[0] < 0 || v[1] < 0 || v[2] <= v[0] || v[3] <= v[1] || v[2] > dw || v[3] > dh)
		return err_param(e, "region",
				 "region: [x0, y0, x1, y1] with 0 <= x0 < x1 <= width and 0 <= y0 "
				 "< y1 <= height of the display");
	if (u->scaled) { /* the screen pixels the display pixels show */
		for (int i = 0; i < 4; i++) {
			int d = i % 2 ? u->dh : u->dw, s = i % 2 ? u->sh : u->sw;
			v[i] = i < 2 ? v[i] * s / d : (v[i] * s + d - 1) / d;
		}
	}
	res->zoom = true;
	res->region[0] = (int)v[0];
	res->region[1] = (int)v[1];
	res->region[2] = (int)(v[2] - v[0]);
	res->region[3] = (int)(v[3] - v[1]);
	return 0;
}

static const struct cu_a_action {
	const char *name;
	cu_a_fn run;
	unsigned params; /* A_* it takes */
	bool screenshot; /* answered with a screenshot, as the reference does */
} cu_a_actions[] = {
    {"key", cu_a_key, A_TEXT, true},
    {"type", cu_a_type, A_TEXT, true},
    {"hold_key", cu_a_hold_key, A_TEXT | A_DURATION, true},
    {"mouse_move", cu_a_mouse_move, A_COORD, true},
    {"left_click", cu_a_click, A_COORD | A_TEXT, true},
    {"right_click", cu_a_click, A_COORD | A_TEXT, true},
    {"middle_click", cu_a_click, A_COORD | A_TEXT, true},
    {"double_click", cu_a_click, A_COORD | A_TEXT, true},
    {"triple_click", cu_a_click, A_COORD | A_TEXT, true},
    {"left_click_drag", cu_a_drag, A_COORD | A_START | A_TEXT, true},
    {"left_mouse_down", cu_a_mouse_button, A_COORD, true},
    {"left_mouse_up", cu_a_mouse_button, A_COORD, true},
    {"scroll", cu_a_scroll, A_COORD | A_SCROLL | A_TEXT, true},
    {"wait", cu_a_wait, A_DURATION, true},
    {"screenshot", cu_a_screenshot, 0, true},
    {"cursor_position", cu_a_cursor_position, 0, false},
    {"zoom", cu_a_zoom, A_REGION, true},
};

static int cu_a_check(const json_t *in, const struct cu_a_action *a, struct err *e)
{
	const char *k;
	json_t *v;
	json_object_foreach((json_t *)in, k, v)
	{
		if (strcmp(k, "action") == 0 || cu_wrapper_key(k) || json_is_null(v))
			continue;
		unsigned bit = 0;
		for (size_t i = 0; i < sizeof cu_a_params / sizeof cu_a_params[0]; i++)
			if (strcmp(cu_a_params[i].name, k) == 0)
				bit = cu_a_params[i].bit;
		if (!bit)
			return err_param(e, k,
					 "%.60s: not a parameter of Anthropic's computer tool", k);
		if (!(a->params & bit))
			return err_param(e, k, "%.60s: not accepted by %s", k, a->name);
	}
	return 0;
}

static json_t *cu_a_answer(const struct cu_result *res, char *b64, const char *tool_use_id)
{
	json_t *content = json_array();
	if (res->text[0])
		json_array_append_new(content,
				      json_pack("{s:s, s:s}", "type", "text", "text", res->text));
	if (b64)
		json_array_append_new(content, json_pack("{s:s, s:{s:s, s:s, s:s}}", "type",
							 "image", "source", "type", "base64",
							 "media_type", "image/png", "data", b64));
	json_t *out = json_pack("{s:s, s:o}", "type", "tool_result", "content", content);
	if (out && tool_use_id)
		json_object_set_new(out, "tool_use_id", json_string(tool_use_id));
	return out;
}

int cu_anthropic(struct cu *u, const json_t *in, const char *tool_use_id, json_t **out,
		 struct err *e)
{
	const char *name = NULL;
	if (param_str(in, "action", &name, e) < 0)
		return -1;
	if (!name)
		return err_param(e, "action", "action: required");
	const struct cu_a_action *a = NULL;
	for (size_t i = 0; i < sizeof cu_a_actions / sizeof cu_a_actions[0]; i++)
		if (strcmp(cu_a_actions[i].name, name) == 0)
			a = &cu_a_actions[i];
	if (!a)
		return err_param(
		    e, "action",
		    "action: '%.40s' is not an action of Anthropic's computer tool "
		    "(key, type, mouse_move, left_click, left_click_drag, right_click, "
		    "middle_click, double_click, triple_click, screenshot, "
		    "cursor_position, scroll, hold_key, wait, left_mouse_down, "
		    "left_mouse_up, zoom)",
		    name);
	/* The reference waits for the screen to settle but for a screenshot. */
	struct cu_result res = {.settle = strcmp(name, "screenshot") != 0 &&
					  strcmp(name, "zoom") != 0 && strcmp(name, "wait") != 0};
	char *b64 = NULL;
	if (cu_a_check(in, a, e) < 0 || a->run(u, a->name, in, &res, e) < 0 ||
	    (a->screenshot && cu_screenshot(u, &res, &b64, e) < 0))
		return -1;
	*out = cu_a_answer(&res, b64, tool_use_id);
	free(b64);
	return *out ? 0 : err_set(e, ERR_INTERNAL, "out of memory");
}
