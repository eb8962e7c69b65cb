/*
 * computeruse-envd: what both computer-use dialects do on envd's actions:
 * the agent's coordinates mapped onto the screen, input with keys held,
 * screenshots of what the agent sees, and the display it sees. Every action
 * goes through core_action_json() / core_action_ok(), the REST proxy's path.
 * Key names need no table of our own: envd already takes xdotool's keysym
 * names ("Return", "ctrl+shift+t", "super") and the browser-style ones
 * OpenAI sends ("ENTER", "ARROWLEFT", "CMD"), in any case.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base64.h"
#include "clock.h"
#include "computeruse-internal.h"
#include "params.h"

/* ---- coordinates --------------------------------------------------------------- */

/* One agent coordinate (of the display's d pixels, the screen's s) to the
 * screen; `name` names it in errors. */
static int cu_map1(const struct cu *u, const char *name, const json_t *j, int d, int s, int *out,
		   struct err *e)
{
	if (!json_is_integer(j))
		return err_param(e, name, "%s: expected integer pixel coordinates", name);
	long long v = json_integer_value(j);
	if (!u->scaled) {
		/* envd says what is off its screen; here only keep it an int. */
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
int cu_map(const struct cu *u, const char *xname, const char *yname, const json_t *jx,
	   const json_t *jy, int *x, int *y, struct err *e)
{
	if (cu_map1(u, xname, jx, u->dw, u->sw, x, e) < 0 ||
	    cu_map1(u, yname, jy, u->dh, u->sh, y, e) < 0)
		return -1;
	return 0;
}

/* An Anthropic [x, y]: 1 when present (mapped into x, y), 0 when absent. */
int cu_coordinate(const struct cu *u, const json_t *in, const char *name, int *x, int *y,
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
int cu_xy(const struct cu *u, const json_t *in, int *x, int *y, struct err *e)
{
	return cu_map(u, "x", "y", json_object_get(in, "x"), json_object_get(in, "y"), x, y, e);
}

/* ---- doing things ----------------------------------------------------------------- */

/* Runs an envd action; params is stolen. *out, if asked for, is its answer. */
int cu_do(struct cu *u, const char *action, json_t *params, json_t **out, struct err *e)
{
	/* Anything but asking may change the screen: the next screenshot settles. */
	if (strncmp(action, "get_", 4) != 0)
		u->changed = true;
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
json_t *cu_at(bool has, int x, int y)
{
	return has ? json_pack("{s:i, s:i}", "x", x, "y", y) : json_object();
}

/* Splits s at any of seps into at most CU_MAX_KEYS names held in buf. */
int cu_split(const char *s, const char *seps, char *buf, size_t len, char **names,
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
int cu_with_keys(struct cu *u, char **keys, int n, const char *action, json_t *params,
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
		clock_sleep_ms(hold_ms);
	struct err ignore;
	while (down-- > 0)
		if (cu_do(u, "key_up", json_pack("{s:s}", "key", keys[down]), NULL,
			  rc == 0 ? e : &ignore) < 0)
			rc = -1;
	return rc;
}

/* Anthropic's `text` with a click or scroll: modifiers held, "shift" or
 * "ctrl+shift" (as xdotool keydown takes them). */
int cu_with_mods(struct cu *u, const char *mods, const char *action, json_t *params, struct err *e)
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
int cu_screenshot(struct cu *u, const struct cu_result *res, char **b64, struct err *e)
{
	if (u->changed && u->settle_ms > 0) { /* out of the wait budget too: never past it */
		long long ms = u->settle_ms < u->wait_left_ms ? u->settle_ms : u->wait_left_ms;
		u->wait_left_ms -= ms;
		clock_sleep_ms(ms);
	}
	u->changed = false;
	json_t *p;
	if (res && res->zoom)
		p = json_pack("{s:i, s:i, s:i, s:i}", "x", res->region[0], "y", res->region[1],
			      "width", res->region[2], "height", res->region[3]);
	else
		p = json_object();
	if (p && u->scaled) {
		bool zoom = res && res->zoom;
		json_object_set_new(p, zoom ? "max_width" : "out_width", json_integer(u->dw));
		json_object_set_new(p, zoom ? "max_height" : "out_height", json_integer(u->dh));
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

/* Takes ms of the request's wait budget. */
int cu_spend_wait(struct cu *u, long long ms, const char *param, struct err *e)
{
	if (ms > u->wait_left_ms)
		return err_param(e, param,
				 "%s: the waits and held keys of one request add up to at most "
				 "%d s",
				 param, CU_MAX_WAIT_MS / 1000);
	u->wait_left_ms -= ms;
	return 0;
}

/* The cursor, on the screen. */
int cu_cursor(struct cu *u, int *x, int *y, struct err *e)
{
	json_t *p = NULL;
	if (cu_do(u, "get_cursor_position", json_object(), &p, e) < 0)
		return -1;
	*x = (int)json_integer_value(json_object_get(p, "x"));
	*y = (int)json_integer_value(json_object_get(p, "y"));
	json_decref(p);
	return 0;
}

/* Keys the wrapper may carry besides the tool's input. */
bool cu_wrapper_key(const char *k)
{
	return strcmp(k, "display") == 0 || strcmp(k, "dialect") == 0 || strcmp(k, "tool") == 0 ||
	       strcmp(k, "screenshot_delay_ms") == 0;
}

/* ---- the display ------------------------------------------------------------------ */

/* The display from the body's {"width","height"} or ?display=WxH, and the
 * screen behind it. No display: nothing is scaled. */
int cu_display(struct cu *u, const json_t *body, const char *q, struct err *e)
{
	json_t *d = NULL;
	long long w = 0, h = 0;
	if (param_object(body, "display", &d, e) < 0)
		return -1;
	if (d) {
		static const char *const known[] = {"width", "height", NULL};
		if (params_check_known(d, known, e) < 0 ||
		    param_need_int(d, "width", 1, CU_COORD_LIMIT, &w, e) < 0 ||
		    param_need_int(d, "height", 1, CU_COORD_LIMIT, &h, e) < 0)
			return err_rename_param(e, "display");
	} else {
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

/* screenshot_delay_ms from the body or the query: 0 to 10000. */
int cu_settle(struct cu *u, const json_t *body, const char *q, struct err *e)
{
	long long ms = 0;
	int r = param_int(body, "screenshot_delay_ms", 0, 10000, &ms, e);
	if (r < 0)
		return -1;
	if (r == 0 && q) {
		char *end;
		errno = 0;
		ms = strtoll(q, &end, 10);
		if (errno || *end || end == q || ms < 0 || ms > 10000)
			return err_param(
			    e, "screenshot_delay_ms",
			    "screenshot_delay_ms: milliseconds, 0 to 10000, not '%.40s'", q);
	}
	u->settle_ms = (int)ms;
	return 0;
}
