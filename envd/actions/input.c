/*
 * actions/input: mouse and keyboard actions, thin over x11/input.h.
 *
 * Coordinates are optional where a person could act "where the mouse is"
 * (click, mouse_down/up, scroll); given, both x and y are needed and must be
 * on screen, and 0 is a real coordinate. Every answer reports where the
 * cursor ended up.
 */
#include <stdio.h>
#include <string.h>

#include "action.h"
#include "input.h"
#include "params.h"

static const char *const input_buttons[] = {"left", "middle", "right", "back", "forward", NULL};
static const enum desk_button input_button_codes[] = {
    DESK_BUTTON_LEFT, DESK_BUTTON_MIDDLE, DESK_BUTTON_RIGHT, DESK_BUTTON_BACK, DESK_BUTTON_FORWARD};

/* Optional (x, y): returns 1 and fills *p when given, 0 when absent, -1 on error. */
static int input_point(struct envd *env, const json_t *params, const char *xn, const char *yn,
		       struct desk_point *p, struct err *e)
{
	long long x = 0, y = 0;
	int hx = param_int(params, xn, -1000000, 1000000, &x, e);
	if (hx < 0)
		return -1;
	int hy = param_int(params, yn, -1000000, 1000000, &y, e);
	if (hy < 0)
		return -1;
	if (hx != hy)
		return err_param(e, hx ? yn : xn, "%s: required when %s is given", hx ? yn : xn,
				 hx ? xn : yn);
	if (!hx)
		return 0;
	if (desk_check_point(env->desk, (int)x, (int)y, xn, yn, e) < 0)
		return -1;
	p->x = (int)x;
	p->y = (int)y;
	return 1;
}

static int input_need_point(struct envd *env, const json_t *params, const char *xn, const char *yn,
			    struct desk_point *p, struct err *e)
{
	int r = input_point(env, params, xn, yn, p, e);
	if (r == 0)
		return err_param(e, xn, "%s: required (with %s)", xn, yn);
	return r < 0 ? -1 : 0;
}

static int input_button(const json_t *params, enum desk_button def, enum desk_button *out,
			struct err *e)
{
	int idx;
	int r = param_enum(params, "button", input_buttons, &idx, e);
	if (r < 0)
		return -1;
	*out = r ? input_button_codes[idx] : def;
	return 0;
}

/* The answer of every input action: {"ok":true,"x","y"} with the cursor. */
static int input_reply(struct envd *env, struct action_reply *reply, struct err *e)
{
	int x, y;
	if (desk_cursor_position(env->desk, &x, &y, e) < 0)
		return -1;
	reply->json = json_pack("{s:b, s:i, s:i}", "ok", 1, "x", x, "y", y);
	return 0;
}

static int input_click_n(struct envd *env, const json_t *params, struct action_reply *reply,
			 struct err *e, enum desk_button def_button, bool button_param, int count)
{
	struct desk_point p;
	int has = input_point(env, params, "x", "y", &p, e);
	if (has < 0)
		return -1;
	enum desk_button b = def_button;
	if (button_param && input_button(params, def_button, &b, e) < 0)
		return -1;
	if (desk_click(env->desk, has ? &p : NULL, b, count, e) < 0)
		return -1;
	return input_reply(env, reply, e);
}

int act_click(struct envd *env, const json_t *params, struct action_reply *reply, struct err *e)
{
	long long clicks = 1;
	if (param_int(params, "clicks", 1, 3, &clicks, e) < 0)
		return -1;
	return input_click_n(env, params, reply, e, DESK_BUTTON_LEFT, true, (int)clicks);
}

int act_left_click(struct envd *env, const json_t *params, struct action_reply *reply,
		   struct err *e)
{
	return input_click_n(env, params, reply, e, DESK_BUTTON_LEFT, false, 1);
}

int act_right_click(struct envd *env, const json_t *params, struct action_reply *reply,
		    struct err *e)
{
	return input_click_n(env, params, reply, e, DESK_BUTTON_RIGHT, false, 1);
}

int act_middle_click(struct envd *env, const json_t *params, struct action_reply *reply,
		     struct err *e)
{
	return input_click_n(env, params, reply, e, DESK_BUTTON_MIDDLE, false, 1);
}

int act_double_click(struct envd *env, const json_t *params, struct action_reply *reply,
		     struct err *e)
{
	return input_click_n(env, params, reply, e, DESK_BUTTON_LEFT, true, 2);
}

int act_triple_click(struct envd *env, const json_t *params, struct action_reply *reply,
		     struct err *e)
{
	return input_click_n(env, params, reply, e, DESK_BUTTON_LEFT, true, 3);
}

int act_move_cursor(struct envd *env, const json_t *params, struct action_reply *reply,
		    struct err *e)
{
	struct desk_point p;
	if (input_need_point(env, params, "x", "y", &p, e) < 0)
		return -1;
	if (desk_move(env->desk, p.x, p.y, e) < 0)
		return -1;
	return input_reply(env, reply, e);
}

static int input_mouse_button(struct envd *env, const json_t *params, struct action_reply *reply,
			      struct err *e, bool down)
{
	struct desk_point p;
	int has = input_point(env, params, "x", "y", &p, e);
	if (has < 0)
		return -1;
	enum desk_button b;
	if (input_button(params, DESK_BUTTON_LEFT, &b, e) < 0)
		return -1;
	if (desk_button(env->desk, has ? &p : NULL, b, down, e) < 0)
		return -1;
	return input_reply(env, reply, e);
}

int act_mouse_down(struct envd *env, const json_t *params, struct action_reply *reply,
		   struct err *e)
{
	return input_mouse_button(env, params, reply, e, true);
}

int act_mouse_up(struct envd *env, const json_t *params, struct action_reply *reply, struct err *e)
{
	return input_mouse_button(env, params, reply, e, false);
}

#define INPUT_MAX_PATH 1000

/* drag: from → each point of `path` → to. path items are [x, y] or {"x","y"}. */
int act_drag(struct envd *env, const json_t *params, struct action_reply *reply, struct err *e)
{
	struct desk_point pts[INPUT_MAX_PATH + 2];
	size_t n = 0;
	if (input_need_point(env, params, "from_x", "from_y", &pts[n++], e) < 0)
		return -1;
	json_t *path = NULL;
	if (param_array(params, "path", &path, e) < 0)
		return -1;
	if (path && json_array_size(path) > INPUT_MAX_PATH)
		return err_param(e, "path", "path: at most %d points", INPUT_MAX_PATH);
	size_t i;
	json_t *pt;
	json_array_foreach(path, i, pt)
	{
		char name[32];
		snprintf(name, sizeof name, "path[%zu]", i);
		json_t *jx = NULL, *jy = NULL;
		if (json_is_array(pt) && json_array_size(pt) == 2) {
			jx = json_array_get(pt, 0);
			jy = json_array_get(pt, 1);
		} else if (json_is_object(pt)) {
			jx = json_object_get(pt, "x");
			jy = json_object_get(pt, "y");
		}
		if (!json_is_integer(jx) || !json_is_integer(jy))
			return err_param(e, "path", "%s: expected [x, y] or {\"x\": .., \"y\": ..}",
					 name);
		int x = (int)json_integer_value(jx), y = (int)json_integer_value(jy);
		if (desk_check_point(env->desk, x, y, "path", "path", e) < 0)
			return err_param(e, "path", "%s: (%d, %d) is off-screen", name, x, y);
		pts[n].x = x;
		pts[n].y = y;
		n++;
	}
	if (input_need_point(env, params, "to_x", "to_y", &pts[n++], e) < 0)
		return -1;
	long long duration = 0;
	if (param_int(params, "duration_ms", 0, 60000, &duration, e) < 0)
		return -1;
	enum desk_button b;
	if (input_button(params, DESK_BUTTON_LEFT, &b, e) < 0)
		return -1;
	if (desk_drag(env->desk, pts, n, (int)duration, b, e) < 0)
		return -1;
	return input_reply(env, reply, e);
}

int act_type(struct envd *env, const json_t *params, struct action_reply *reply, struct err *e)
{
	const char *text;
	long long delay = 0;
	if (param_need_str(params, "text", &text, e) < 0)
		return -1;
	if (param_int(params, "delay_ms", 0, 1000, &delay, e) < 0)
		return -1;
	if (desk_type(env->desk, text, (int)delay, e) < 0)
		return -1;
	reply->json = json_pack("{s:b, s:I}", "ok", 1, "length", (json_int_t)strlen(text));
	return 0;
}

static int input_key_act(struct envd *env, const json_t *params, struct action_reply *reply,
			 struct err *e, enum desk_key_action act)
{
	const char *key;
	if (param_need_str(params, "key", &key, e) < 0)
		return -1;
	if (desk_key(env->desk, key, act, "key", e) < 0)
		return -1;
	reply->json = json_pack("{s:b, s:s}", "ok", 1, "key", key);
	return 0;
}

int act_key(struct envd *env, const json_t *params, struct action_reply *reply, struct err *e)
{
	return input_key_act(env, params, reply, e, DESK_KEY_TAP);
}

int act_key_down(struct envd *env, const json_t *params, struct action_reply *reply, struct err *e)
{
	return input_key_act(env, params, reply, e, DESK_KEY_DOWN);
}

int act_key_up(struct envd *env, const json_t *params, struct action_reply *reply, struct err *e)
{
	return input_key_act(env, params, reply, e, DESK_KEY_UP);
}

int act_hotkey(struct envd *env, const json_t *params, struct action_reply *reply, struct err *e)
{
	json_t *arr = NULL;
	int r = param_array(params, "keys", &arr, e);
	if (r < 0)
		return -1;
	if (r == 0)
		return err_param(e, "keys", "keys: required, e.g. [\"ctrl\", \"c\"]");
	size_t n = json_array_size(arr);
	if (n == 0 || n > 16)
		return err_param(e, "keys", "keys: give 1 to 16 keys");
	const char *keys[16];
	for (size_t i = 0; i < n; i++) {
		json_t *k = json_array_get(arr, i);
		if (!json_is_string(k))
			return err_param(e, "keys", "keys[%zu]: expected a key name string", i);
		keys[i] = json_string_value(k);
	}
	if (desk_hotkey(env->desk, keys, n, e) < 0)
		return -1;
	reply->json = json_pack("{s:b, s:O}", "ok", 1, "keys", arr);
	return 0;
}

static const char *const input_dirs[] = {"up", "down", "left", "right", NULL};

static int input_scroll(struct envd *env, const json_t *params, struct action_reply *reply,
			struct err *e, int dir)
{
	if (dir < 0) {
		dir = DESK_SCROLL_DOWN;
		if (param_enum(params, "direction", input_dirs, &dir, e) < 0)
			return -1;
	}
	long long clicks = 1;
	if (param_int(params, "clicks", 1, 1000, &clicks, e) < 0)
		return -1;
	struct desk_point p;
	int has = input_point(env, params, "x", "y", &p, e);
	if (has < 0)
		return -1;
	if (desk_scroll(env->desk, has ? &p : NULL, (enum desk_scroll_dir)dir, (int)clicks, e) < 0)
		return -1;
	return input_reply(env, reply, e);
}

int act_scroll(struct envd *env, const json_t *params, struct action_reply *reply, struct err *e)
{
	return input_scroll(env, params, reply, e, -1);
}

int act_scroll_up(struct envd *env, const json_t *params, struct action_reply *reply, struct err *e)
{
	return input_scroll(env, params, reply, e, DESK_SCROLL_UP);
}

int act_scroll_down(struct envd *env, const json_t *params, struct action_reply *reply,
		    struct err *e)
{
	return input_scroll(env, params, reply, e, DESK_SCROLL_DOWN);
}

int act_scroll_left(struct envd *env, const json_t *params, struct action_reply *reply,
		    struct err *e)
{
	return input_scroll(env, params, reply, e, DESK_SCROLL_LEFT);
}

int act_scroll_right(struct envd *env, const json_t *params, struct action_reply *reply,
		     struct err *e)
{
	return input_scroll(env, params, reply, e, DESK_SCROLL_RIGHT);
}
