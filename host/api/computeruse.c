/*
 * computeruse: Anthropic's `computer` tool and OpenAI's computer-use actions
 * on envd's actions (see computeruse.h for the contract, docs/api.md for
 * each action).
 *
 * A request is parsed into the agent's action, its coordinates are mapped
 * from the agent's display to the screen, envd does it through
 * core_action_json() (the REST proxy's path), and a screenshot follows when
 * the tool expects one. Key names need no table of our own: envd already
 * takes xdotool's keysym names ("Return", "ctrl+shift+t", "super") and the
 * browser-style ones OpenAI sends ("ENTER", "ARROWLEFT", "CMD"), in any case.
 */
#include "computeruse.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base64.h"
#include "params.h"

/* Larger than any screen, small enough that envd's bounds checks see it. */
#define CU_COORD_LIMIT (1 << 24)
/* OpenAI scrolls by pixels; X scrolls by wheel notches of about this many. */
#define CU_PIXELS_PER_NOTCH 100
#define CU_MAX_KEYS	    16

/* One request. */
struct cu {
	struct core *core;
	const char *id, *ws;
	bool scaled;
	int sw, sh; /* the screen (when scaled) */
	int dw, dh; /* the agent's display (when scaled) */
};

/* What an action leaves for the answer. */
struct cu_result {
	char text[96]; /* Anthropic's text output, "" for none */
	bool image;    /* a screenshot follows */
	int region[4]; /* zoom: the screen region x, y, width, height to show */
	bool zoom;
};

/* ---- coordinates --------------------------------------------------------------- */

/* Agent pixel a (of d) → the screen pixel (of s) under the centre of what it
 * shows. A scaled pixel a shows screen [a*s/d, (a+1)*s/d) (envd's box filter). */
static int cu_to_screen(long long a, int d, int s)
{
	return (int)((2 * a + 1) * s / (2LL * d));
}

/* Screen pixel v → the agent pixel that shows its centre. With s >= d,
 * cu_to_agent(cu_to_screen(a)) == a for every a. */
static int cu_to_agent(long long v, int d, int s)
{
	return (int)((2 * v + 1) * d / (2LL * s));
}

/* One agent coordinate (of the display's d pixels, the screen's s) to the
 * screen; `name` names it in errors. */
static int cu_map1(const struct cu *u, const char *name, const json_t *j, int d, int s, int *out,
		   struct err *e)
{
	if (!json_is_integer(j))
		return err_param(e, name, "%s: expected integer pixel coordinates", name);
	long long v = json_integer_value(j);
	if (!u->scaled) {
		/* envd says what is off its screen; only keep ints ints here. */
		if (llabs(v) > CU_COORD_LIMIT)
			return err_param(e, name, "%s: %lld is off the screen", name, v);
		*out = (int)v;
		return 0;
	}
	if (v < 0 || v >= d)
		return err_param(e, name, "%s: %lld is outside the %dx%d display", name, v, u->dw,
				 u->dh);
	*out = cu_to_screen(v, d, s);
	return 0;
}

/* An agent point to the screen. */
static int cu_map(const struct cu *u, const char *xname, const char *yname, const json_t *jx,
		  const json_t *jy, int *x, int *y, struct err *e)
{
	if (cu_map1(u, xname, jx, u->dw, u->sw, x, e) < 0 ||
	    cu_map1(u, yname, jy, u->dh, u->sh, y, e) < 0)
		return -1;
	return 0;
}

/* An Anthropic [x, y]: 1 when present (mapped into x, y), 0 when absent. */
static int cu_coordinate(const struct cu *u, const json_t *in, const char *name, int *x, int *y,
			 struct err *e)
{
	json_t *a = NULL;
	int r = param_array(in, name, &a, e);
	if (r <= 0)
		return r;
	if (json_array_size(a) != 2)
		return err_param(e, name, "%s: expected [x, y]", name);
	if (cu_map(u, name, name, json_array_get(a, 0), json_array_get(a, 1), x, y, e) < 0)
		return -1;
	return 1;
}

/* An OpenAI x and y, both required. */
static int cu_xy(const struct cu *u, const json_t *in, int *x, int *y, struct err *e)
{
	return cu_map(u, "x", "y", json_object_get(in, "x"), json_object_get(in, "y"), x, y, e);
}

/* ---- doing things ----------------------------------------------------------------- */

/* Runs an envd action; params is stolen. *out, if asked for, is its answer. */
static int cu_do(struct cu *u, const char *action, json_t *params, json_t **out, struct err *e)
{
	json_t *res = NULL;
	int rc = params ? core_action_json(u->core, u->id, u->ws, action, params, &res, e)
			: err_set(e, ERR_INTERNAL, "out of memory");
	json_decref(params);
	if (rc == 0 && out)
		*out = res;
	else
		json_decref(res);
	return rc;
}

/* {"x": x, "y": y}, or {} when has is false. */
static json_t *cu_at(bool has, int x, int y)
{
	return has ? json_pack("{s:i, s:i}", "x", x, "y", y) : json_object();
}

static void cu_sleep_ms(long long ms)
{
	struct timespec t = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};
	while (nanosleep(&t, &t) < 0 && errno == EINTR)
		;
}

/* Splits s at any of seps into at most CU_MAX_KEYS names held in buf. */
static int cu_split(const char *s, const char *seps, char *buf, size_t len, char **names,
		    const char *param, struct err *e)
{
	snprintf(buf, len, "%s", s);
	int n = 0;
	for (char *save = NULL, *t = strtok_r(buf, seps, &save); t;
	     t = strtok_r(NULL, seps, &save)) {
		if (n == CU_MAX_KEYS)
			return err_param(e, param, "%s: at most %d keys at once", param,
					 CU_MAX_KEYS);
		names[n++] = t;
	}
	if (n == 0)
		return err_param(e, param, "%s: no key named", param);
	return n;
}

/* Holds keys[] (pressed in order) while an action runs (params stolen), or
 * for hold_ms when action is NULL; releases in reverse, failed or not. */
static int cu_with_keys(struct cu *u, char **keys, int n, const char *action, json_t *params,
			long long hold_ms, struct err *e)
{
	int down = 0, rc = 0;
	while (down < n && rc == 0)
		if ((rc = cu_do(u, "key_down", json_pack("{s:s}", "key", keys[down]), NULL, e)) ==
		    0)
			down++;
	if (rc == 0 && action)
		rc = cu_do(u, action, params, NULL, e);
	else
		json_decref(params);
	if (rc == 0 && !action)
		cu_sleep_ms(hold_ms);
	struct err ignore;
	while (down-- > 0)
		if (cu_do(u, "key_up", json_pack("{s:s}", "key", keys[down]), NULL,
			  rc == 0 ? e : &ignore) < 0)
			rc = -1;
	return rc;
}

/* Anthropic's `text` with a click or scroll: modifiers held, "shift" or
 * "ctrl+shift" (as xdotool keydown takes them). */
static int cu_with_mods(struct cu *u, const char *mods, const char *action, json_t *params,
			struct err *e)
{
	char buf[256], *keys[CU_MAX_KEYS];
	int n = 0;
	if (mods && (n = cu_split(mods, "+ ", buf, sizeof buf, keys, "text", e)) < 0) {
		json_decref(params);
		return -1;
	}
	return cu_with_keys(u, keys, n, action, params, 0, e);
}

/* A base64 PNG of what the agent sees: the screen at the display's size, or
 * (zoom) a screen region fitted into it. malloc'd into *b64. */
static int cu_screenshot(struct cu *u, const struct cu_result *res, char **b64, struct err *e)
{
	json_t *p;
	if (res->zoom)
		p = json_pack("{s:i, s:i, s:i, s:i}", "x", res->region[0], "y", res->region[1],
			      "width", res->region[2], "height", res->region[3]);
	else
		p = json_object();
	if (p && u->scaled) {
		json_object_set_new(p, res->zoom ? "max_width" : "out_width", json_integer(u->dw));
		json_object_set_new(p, res->zoom ? "max_height" : "out_height",
				    json_integer(u->dh));
	}
	struct envd_reply r;
	int rc = p ? core_action_ok(u->core, u->id, u->ws, "screenshot", p, &r, e)
		   : err_set(e, ERR_INTERNAL, "out of memory");
	json_decref(p);
	if (rc < 0)
		return -1;
	*b64 = base64_encode(r.body, r.body_len);
	envd_reply_free(&r);
	return *b64 ? 0 : err_set(e, ERR_INTERNAL, "out of memory encoding the screenshot");
}

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

/* The cursor, on the screen. */
static int cu_cursor(struct cu *u, int *x, int *y, struct err *e)
{
	json_t *p = NULL;
	if (cu_do(u, "get_cursor_position", json_object(), &p, e) < 0)
		return -1;
	*x = (int)json_integer_value(json_object_get(p, "x"));
	*y = (int)json_integer_value(json_object_get(p, "y"));
	json_decref(p);
	return 0;
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
	cu_sleep_ms((long long)(secs * 1000 + 0.5));
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

/* Keys the wrapper may carry besides the tool's input. */
static bool cu_wrapper_key(const char *k)
{
	return strcmp(k, "display") == 0 || strcmp(k, "dialect") == 0;
}

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

static int cu_anthropic(struct cu *u, const json_t *in, const char *tool_use_id, json_t **out,
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
	struct cu_result res = {0};
	char *b64 = NULL;
	if (cu_a_check(in, a, e) < 0 || a->run(u, a->name, in, &res, e) < 0 ||
	    (a->screenshot && cu_screenshot(u, &res, &b64, e) < 0))
		return -1;
	*out = cu_a_answer(&res, b64, tool_use_id);
	free(b64);
	return *out ? 0 : err_set(e, ERR_INTERNAL, "out of memory");
}

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
	(void)u, (void)in, (void)e;
	cu_sleep_ms(1000);
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

static int cu_openai(struct cu *u, const json_t *in, const char *call_id, json_t **out,
		     struct err *e)
{
	const char *name = NULL;
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
	struct cu_result res = {0};
	char *b64 = NULL;
	if (cu_o_check(in, a, e) < 0 || a->run(u, in, e) < 0 || cu_screenshot(u, &res, &b64, e) < 0)
		return -1;
	size_t len = strlen(b64) + 32;
	char *url = malloc(len);
	if (url)
		snprintf(url, len, "data:image/png;base64,%s", b64);
	free(b64);
	*out = url ? json_pack("{s:s, s:{s:s, s:s}}", "type", "computer_call_output", "output",
			       "type", "input_image", "image_url", url)
		   : NULL;
	free(url);
	if (*out && call_id)
		json_object_set_new(*out, "call_id", json_string(call_id));
	return *out ? 0 : err_set(e, ERR_INTERNAL, "out of memory");
}

/* ---- the request ------------------------------------------------------------------ */

/* The display from the body's {"width","height"} or ?display=WxH, and the
 * screen behind it. No display: nothing is scaled. */
static int cu_display(struct cu *u, const json_t *body, const struct httpd_request *req,
		      struct err *e)
{
	json_t *d = NULL;
	long long w = 0, h = 0;
	if (param_object(body, "display", &d, e) < 0)
		return -1;
	if (d) {
		static const char *const known[] = {"width", "height", NULL};
		if (params_check_known(d, known, e) < 0 ||
		    param_need_int(d, "width", 1, CU_COORD_LIMIT, &w, e) < 0 ||
		    param_need_int(d, "height", 1, CU_COORD_LIMIT, &h, e) < 0) {
			snprintf(e->param, sizeof e->param, "display");
			return -1;
		}
	} else {
		const char *q = httpd_query(req, "display");
		if (!q)
			return 0;
		char tail;
		if (sscanf(q, "%lldx%lld%c", &w, &h, &tail) != 2 || w < 1 || h < 1 ||
		    w > CU_COORD_LIMIT || h > CU_COORD_LIMIT)
			return err_param(e, "display",
					 "display: WIDTHxHEIGHT like 1024x768, not "
					 "'%.40s'",
					 q);
	}
	json_t *s = NULL;
	if (cu_do(u, "get_screen_size", json_object(), &s, e) < 0)
		return -1;
	u->sw = (int)json_integer_value(json_object_get(s, "width"));
	u->sh = (int)json_integer_value(json_object_get(s, "height"));
	json_decref(s);
	if (w > u->sw || h > u->sh)
		return err_param(e, "display",
				 "display: %lldx%lld is larger than the %dx%d screen; screenshots "
				 "are only scaled down",
				 w, h, u->sw, u->sh);
	u->dw = (int)w;
	u->dh = (int)h;
	u->scaled = w != u->sw || h != u->sh;
	return 0;
}

static int cu_run(struct cu *u, const json_t *body, const struct httpd_request *req, json_t **out,
		  struct err *e)
{
	static const char *const dialects[] = {"anthropic", "openai", NULL};
	int dialect = -1;
	if (param_enum(body, "dialect", dialects, &dialect, e) < 0)
		return -1;
	const char *q = httpd_query(req, "dialect");
	if (dialect < 0 && q) {
		for (int i = 0; dialects[i]; i++)
			if (strcmp(q, dialects[i]) == 0)
				dialect = i;
		if (dialect < 0)
			return err_param(e, "dialect", "dialect: anthropic or openai, not '%.40s'",
					 q);
	}
	/* Whole blocks: Anthropic's tool_use, OpenAI's computer_call. */
	const char *type = json_string_value(json_object_get(body, "type"));
	json_t *in = NULL;
	const char *ref = NULL;
	if (type && strcmp(type, "tool_use") == 0) {
		static const char *const known[] = {"type",    "id",	  "name", "input",
						    "display", "dialect", NULL};
		if (params_check_known(body, known, e) < 0 ||
		    param_object(body, "input", &in, e) < 0 || param_str(body, "id", &ref, e) < 0)
			return -1;
		if (!in)
			return err_param(e, "input", "input: required in a tool_use block");
		dialect = 0;
	} else if (type && strcmp(type, "computer_call") == 0) {
		static const char *const known[] = {
		    "type",   "id",	 "call_id", "action",
		    "status", "display", "dialect", "pending_safety_checks",
		    NULL};
		if (params_check_known(body, known, e) < 0 ||
		    param_object(body, "action", &in, e) < 0 ||
		    param_str(body, "call_id", &ref, e) < 0)
			return -1;
		if (!in)
			return err_param(e, "action", "action: required in a computer_call item");
		dialect = 1;
	} else if (dialect < 0) {
		if (json_is_string(json_object_get(body, "action")))
			dialect = 0;
		else if (type)
			dialect = 1;
		else
			return err_set(
			    e, ERR_INVALID,
			    "the body is neither Anthropic's computer tool input "
			    "({\"action\": \"left_click\", ...}) nor an OpenAI computer-use "
			    "action ({\"type\": \"click\", ...}); 'dialect' can say which");
	}
	if (cu_display(u, body, req, e) < 0)
		return -1;
	if (!in)
		in = (json_t *)body;
	return dialect == 0 ? cu_anthropic(u, in, ref, out, e) : cu_openai(u, in, ref, out, e);
}

void computeruse_handle(struct core *core, const char *id, const char *ws,
			struct httpd_request *req, struct httpd_response *resp)
{
	struct err e = {0};
	struct cu u = {.core = core, .id = id, .ws = ws};
	json_error_t je;
	json_t *body = req->body_len
			   ? json_loadb(req->body, req->body_len, JSON_REJECT_DUPLICATES, &je)
			   : NULL;
	json_t *out = NULL;
	int rc;
	if (!body)
		rc = err_set(&e, ERR_BAD_REQUEST, "the body must be a JSON object: %s",
			     req->body_len ? je.text : "it is empty");
	else if (!json_is_object(body))
		rc = err_set(&e, ERR_BAD_REQUEST, "the body must be a JSON object");
	else
		rc = cu_run(&u, body, req, &out, &e);
	json_decref(body);
	if (rc < 0)
		httpd_respond_err(resp, &e);
	else
		httpd_respond_json(resp, 200, out);
}
