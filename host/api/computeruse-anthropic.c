/*
 * computeruse-anthropic: one call of Anthropic's computer tool on envd's
 * actions, and the content of its tool_result.
 *
 * Four versions, told apart by u->tool (docs/computer-use.md has the
 * sources): computer_20241022, computer_20250124 and computer_20251124
 * send {"action": NAME, ...} and are answered, as their reference
 * implementation does, with a screenshot after every action but
 * cursor_position; computer_toolset_20260801 names the member tool in the
 * tool_use block, sends only its parameters, and is answered with the
 * image of screenshot and zoom, "X=..,Y=.." for cursor_position, and the
 * SDK's one-line acknowledgment ("Clicked.") for every other member.
 */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "computeruse-internal.h"
#include "params.h"

enum {
	A_COORD = 1 << 0,
	A_START = 1 << 1,
	A_TEXT = 1 << 2,
	A_DURATION = 1 << 3,
	A_SCROLL = 1 << 4,
	A_REGION = 1 << 5,
	A_REPEAT = 1 << 6,
};

static const struct {
	const char *name;
	unsigned bit;
} cu_a_params[] = {
    {"coordinate", A_COORD},  {"start_coordinate", A_START},  {"text", A_TEXT},
    {"duration", A_DURATION}, {"scroll_direction", A_SCROLL}, {"scroll_amount", A_SCROLL},
    {"region", A_REGION},     {"repeat", A_REPEAT},
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

/* From start_coordinate (the toolset needs it; earlier versions start at
 * the cursor without it) to coordinate, `text`'s modifiers held. */
static int cu_a_drag(struct cu *u, const char *action, const json_t *in, struct cu_result *res,
		     struct err *e)
{
	(void)action, (void)res;
	int x0, y0, x1, y1;
	const char *mods = NULL;
	int has_end = cu_coordinate(u, in, "coordinate", &x1, &y1, e);
	if (has_end == 0)
		return err_param(e, "coordinate", "coordinate: required (where the drag ends)");
	int has_start = has_end < 0 ? -1 : cu_coordinate(u, in, "start_coordinate", &x0, &y0, e);
	if (has_start == 0 && u->tool == CU_TOOLSET_20260801)
		return err_param(e, "start_coordinate",
				 "start_coordinate: required (where the drag starts)");
	if (has_start < 0 || (has_start == 0 && cu_cursor(u, &x0, &y0, e) < 0) ||
	    param_str(in, "text", &mods, e) < 0)
		return -1;
	return cu_with_mods(
	    u, mods, "drag",
	    json_pack("{s:i, s:i, s:i, s:i}", "from_x", x0, "from_y", y0, "to_x", x1, "to_y", y1),
	    e);
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

/* xdotool's `key` takes several space-separated combinations: one by one,
 * `repeat` times over (the toolset's, 1 to 100). */
static int cu_a_key(struct cu *u, const char *action, const json_t *in, struct cu_result *res,
		    struct err *e)
{
	(void)res;
	const char *text;
	char buf[512], *combos[CU_MAX_KEYS];
	long long repeat = 1;
	int n;
	if (cu_need_text(in, action, &text, e) < 0 ||
	    param_int(in, "repeat", 1, 100, &repeat, e) < 0 ||
	    (n = cu_split(text, " \t\n", buf, sizeof buf, combos, "text", e)) < 0)
		return -1;
	for (long long r = 0; r < repeat; r++)
		for (int i = 0; i < n; i++)
			if (cu_do(u, "key", json_pack("{s:s}", "key", combos[i]), NULL, e) < 0)
				return -1;
	return 0;
}

/* Seconds, (0, 100] for hold_key and [0, 100] for wait, as the reference;
 * taken from the request's wait budget. */
static int cu_duration(struct cu *u, const json_t *in, const char *action, double lo, long long *ms,
		       struct err *e)
{
	double secs = -1;
	if (param_double(in, "duration", 0, 100, &secs, e) < 0)
		return -1;
	if (secs < 0)
		return err_param(e, "duration", "duration: required for %s (seconds)", action);
	if (secs < lo)
		return err_param(e, "duration", "duration: must be more than 0 seconds");
	*ms = (long long)(secs * 1000 + 0.5);
	return cu_spend_wait(u, *ms, "duration", e);
}

static int cu_a_hold_key(struct cu *u, const char *action, const json_t *in, struct cu_result *res,
			 struct err *e)
{
	(void)res;
	const char *text;
	long long ms;
	char buf[256], *keys[CU_MAX_KEYS];
	int n;
	if (cu_need_text(in, action, &text, e) < 0 ||
	    (n = cu_split(text, "+ ", buf, sizeof buf, keys, "text", e)) < 0 ||
	    cu_duration(u, in, action, 1e-9, &ms, e) < 0)
		return -1;
	return cu_with_keys(u, keys, n, NULL, NULL, ms, e);
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
	(void)res;
	long long ms;
	if (cu_duration(u, in, action, 0, &ms, e) < 0)
		return -1;
	clock_sleep_ms(ms);
	u->changed = false; /* waited for it to settle */
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

#define NO_2024 UINT_MAX /* not an action of computer_20241022 */

static const struct cu_a_action {
	const char *name;
	cu_a_fn run;
	enum cu_tool since;
	unsigned params;      /* A_* it takes: computer_20250124 and computer_20251124 */
	unsigned params_2024; /* ... computer_20241022 */
	unsigned params_set;  /* ... as a member of the toolset */
	const char *ack;      /* the toolset's answer ({text}, {duration}, {scroll_direction}) */
} cu_a_actions[] = {
    {"key", cu_a_key, CU_COMPUTER_20241022, A_TEXT, A_TEXT, A_TEXT | A_REPEAT, "Pressed {text}."},
    {"hold_key", cu_a_hold_key, CU_COMPUTER_20250124, A_TEXT | A_DURATION, NO_2024,
     A_TEXT | A_DURATION, "Held {text} for {duration}s."},
    {"type", cu_a_type, CU_COMPUTER_20241022, A_TEXT, A_TEXT, A_TEXT, "Typed."},
    {"cursor_position", cu_a_cursor_position, CU_COMPUTER_20241022, 0, 0, 0, NULL},
    {"mouse_move", cu_a_mouse_move, CU_COMPUTER_20241022, A_COORD, A_COORD, A_COORD,
     "Moved the mouse."},
    {"left_mouse_down", cu_a_mouse_button, CU_COMPUTER_20250124, A_COORD, NO_2024, 0,
     "Left mouse button pressed."},
    {"left_mouse_up", cu_a_mouse_button, CU_COMPUTER_20250124, A_COORD, NO_2024, 0,
     "Left mouse button released."},
    {"left_click", cu_a_click, CU_COMPUTER_20241022, A_COORD | A_TEXT, 0, A_COORD | A_TEXT,
     "Clicked."},
    {"left_click_drag", cu_a_drag, CU_COMPUTER_20241022, A_COORD | A_START | A_TEXT, A_COORD,
     A_COORD | A_START | A_TEXT, "Dragged."},
    {"right_click", cu_a_click, CU_COMPUTER_20241022, A_COORD | A_TEXT, 0, A_COORD | A_TEXT,
     "Right-clicked."},
    {"middle_click", cu_a_click, CU_COMPUTER_20241022, A_COORD | A_TEXT, 0, A_COORD | A_TEXT,
     "Middle-clicked."},
    {"double_click", cu_a_click, CU_COMPUTER_20241022, A_COORD | A_TEXT, 0, A_COORD | A_TEXT,
     "Double-clicked."},
    {"triple_click", cu_a_click, CU_COMPUTER_20250124, A_COORD | A_TEXT, NO_2024, A_COORD | A_TEXT,
     "Triple-clicked."},
    {"scroll", cu_a_scroll, CU_COMPUTER_20250124, A_COORD | A_SCROLL | A_TEXT, NO_2024,
     A_COORD | A_SCROLL | A_TEXT, "Scrolled {scroll_direction}."},
    {"wait", cu_a_wait, CU_COMPUTER_20250124, A_DURATION, NO_2024, A_DURATION,
     "Waited {duration}s."},
    {"screenshot", cu_a_screenshot, CU_COMPUTER_20241022, 0, 0, 0, NULL},
    {"zoom", cu_a_zoom, CU_COMPUTER_20251124, A_REGION, NO_2024, A_REGION, NULL},
};
#define CU_A_NACTIONS (sizeof cu_a_actions / sizeof cu_a_actions[0])

static unsigned cu_a_params_of(const struct cu *u, const struct cu_a_action *a)
{
	return u->tool == CU_COMPUTER_20241022	? a->params_2024
	       : u->tool == CU_TOOLSET_20260801 ? a->params_set
						: a->params;
}

static const struct cu_a_action *cu_a_find(const struct cu *u, const char *name)
{
	for (size_t i = 0; i < CU_A_NACTIONS; i++)
		if (strcmp(cu_a_actions[i].name, name) == 0)
			return cu_a_actions[i].since <= u->tool &&
				       cu_a_params_of(u, &cu_a_actions[i]) != NO_2024
				   ? &cu_a_actions[i]
				   : NULL;
	return NULL;
}

/* "'fly' is not a tool of computer_toolset_20260801 (key, ...)" into e. */
static int cu_a_unknown(const struct cu *u, const char *param, const char *name, struct err *e)
{
	char list[400] = "";
	size_t len = 0;
	for (size_t i = 0; i < CU_A_NACTIONS; i++)
		if (cu_a_find(u, cu_a_actions[i].name) && len < sizeof list)
			len += (size_t)snprintf(list + len, sizeof list - len, "%s%s",
						len ? ", " : "", cu_a_actions[i].name);
	return err_param(e, param, "%s: '%.40s' is not %s of %s (%s)", param, name,
			 u->tool == CU_TOOLSET_20260801 ? "a member tool" : "an action",
			 cu_tool_name(u->tool), list);
}

static int cu_a_check(const struct cu *u, const json_t *in, const struct cu_a_action *a,
		      struct err *e)
{
	unsigned takes = cu_a_params_of(u, a);
	const char *k;
	json_t *v;
	json_object_foreach((json_t *)in, k, v)
	{
		if ((u->tool != CU_TOOLSET_20260801 && strcmp(k, "action") == 0) ||
		    cu_wrapper_key(k) || json_is_null(v))
			continue;
		unsigned bit = 0;
		for (size_t i = 0; i < sizeof cu_a_params / sizeof cu_a_params[0]; i++)
			if (strcmp(cu_a_params[i].name, k) == 0)
				bit = cu_a_params[i].bit;
		if (!bit || (bit == A_REPEAT && u->tool != CU_TOOLSET_20260801))
			return err_param(e, k, "%.60s: not a parameter of %s", k,
					 cu_tool_name(u->tool));
		if (!(takes & bit))
			return err_param(e, k, "%.60s: not accepted by %s", k, a->name);
	}
	return 0;
}

/* The toolset's acknowledgment, its fields filled in from the input, on
 * one line. */
static void cu_a_ack(const struct cu_a_action *a, const json_t *in, char *out, size_t len)
{
	size_t n = 0;
	for (const char *t = a->ack; *t && n + 1 < len;) {
		const char *field = NULL;
		size_t skip = 1;
		static const char *const fields[] = {"text", "duration", "scroll_direction"};
		for (size_t i = 0; i < 3 && *t == '{'; i++) {
			size_t fl = strlen(fields[i]);
			if (strncmp(t + 1, fields[i], fl) == 0 && t[1 + fl] == '}') {
				field = fields[i];
				skip = fl + 2;
			}
		}
		if (!field) {
			out[n++] = *t++;
			continue;
		}
		t += skip;
		json_t *v = json_object_get(in, field);
		char val[200] = "";
		if (json_is_string(v))
			snprintf(val, sizeof val, "%s", json_string_value(v));
		else if (json_is_number(v))
			snprintf(val, sizeof val, "%g", json_number_value(v));
		for (char *c = val; *c && n + 1 < len; c++)
			out[n++] = (unsigned char)*c < 0x20 || *c == 0x7f ? ' ' : *c;
	}
	out[n] = 0;
}

static json_t *cu_a_content(const struct cu_result *res, const char *b64)
{
	json_t *content = json_array();
	if (res->text[0])
		json_array_append_new(content,
				      json_pack("{s:s, s:s}", "type", "text", "text", res->text));
	if (b64)
		json_array_append_new(content, json_pack("{s:s, s:{s:s, s:s, s:s}}", "type",
							 "image", "source", "type", "base64",
							 "media_type", "image/png", "data", b64));
	return content;
}

int cu_anthropic(struct cu *u, const char *member, const json_t *in, json_t **content,
		 struct err *e)
{
	const char *name = member;
	const char *param = "name";
	if (!member) {
		param = "action";
		if (param_str(in, "action", &name, e) < 0)
			return -1;
		if (!name)
			return err_param(e, "action", "action: required");
	}
	const struct cu_a_action *a = cu_a_find(u, name);
	if (!a)
		return cu_a_unknown(u, param, name, e);
	bool toolset = u->tool == CU_TOOLSET_20260801;
	/* The reference answers every action but cursor_position with a
	 * screenshot; the toolset only screenshot and zoom. */
	bool screenshot = strcmp(a->name, "screenshot") == 0 || strcmp(a->name, "zoom") == 0;
	struct cu_result res = {.shot =
				    toolset ? screenshot : strcmp(a->name, "cursor_position") != 0};
	char *b64 = NULL;
	if (cu_a_check(u, in, a, e) < 0 || a->run(u, a->name, in, &res, e) < 0 ||
	    (res.shot && cu_screenshot(u, &res, &b64, e) < 0))
		return -1;
	if (toolset && a->ack)
		cu_a_ack(a, in, res.text, sizeof res.text);
	*content = cu_a_content(&res, b64);
	free(b64);
	return *content ? 0 : err_set(e, ERR_INTERNAL, "out of memory");
}
