/*
 * The windows family: list, launch, focus, move, resize, maximize, minimize
 * and close top-level windows. Thin: parameters in, desk (windows.h) or
 * proc (launch.h) calls, and the window's resulting state out, so a caller
 * sees what actually happened (a window manager may clamp a move, an app may
 * refuse to close).
 */
#include <stdlib.h>
#include <string.h>

#include "action.h"
#include "launch.h"
#include "params.h"
#include "windows.h"

static json_t *windows_json(const struct desk_window *w)
{
	return json_pack("{s:I, s:s, s:s, s:i, s:i, s:i, s:i, s:i, s:b, s:b, s:b}", "id",
			 (json_int_t)w->id, "title", w->title ? w->title : "", "app_class",
			 w->app_class ? w->app_class : "", "pid", w->pid, "x", w->x, "y", w->y,
			 "width", w->width, "height", w->height, "focused", w->focused, "minimized",
			 w->minimized, "maximized", w->maximized);
}

/*
 * The required "id": an integer, or a string holding one in decimal or as
 * hex with 0x (as xprop and wmctrl print them).
 */
static int windows_param_id(const json_t *params, unsigned long *id, struct err *e)
{
	json_t *v = json_is_object(params) ? json_object_get(params, "id") : NULL;
	if (!v || json_is_null(v))
		return err_param(e, "id", "id: required; the window id from the windows action");
	unsigned long long n;
	if (json_is_integer(v)) {
		if (json_integer_value(v) <= 0)
			return err_param(e, "id", "id: %lld is not a window id (they are positive)",
					 (long long)json_integer_value(v));
		n = (unsigned long long)json_integer_value(v);
	} else if (json_is_string(v)) {
		const char *s = json_string_value(v);
		bool hex = s[0] == '0' && (s[1] == 'x' || s[1] == 'X');
		const char *digits = hex ? s + 2 : s;
		char *end = NULL;
		if (!*digits || !strchr("0123456789abcdefABCDEF", *digits) ||
		    (!hex && !strchr("0123456789", *digits)))
			return err_param(e, "id",
					 "id: '%.40s' is not a window id (an integer, or a string "
					 "like \"0x1a00007\" or \"27262983\")",
					 s);
		n = strtoull(digits, &end, hex ? 16 : 10);
		if (*end)
			return err_param(e, "id",
					 "id: '%.40s' is not a window id (an integer, or a string "
					 "like \"0x1a00007\" or \"27262983\")",
					 s);
		if (n == 0)
			return err_param(e, "id", "id: 0 is not a window id (they are positive)");
	} else {
		return err_param(e, "id", "id: expected an integer or a string, got %s",
				 json_is_array(v)    ? "an array"
				 : json_is_object(v) ? "an object"
				 : json_is_real(v)   ? "a fractional number"
						     : "a boolean");
	}
	if (n > 0xFFFFFFFFull)
		return err_param(e, "id", "id: %llu is too large for an X window id", n);
	*id = (unsigned long)n;
	return 0;
}

/* {"ok":true,"window":{...}} with the window's state now. */
static int windows_reply_state(struct envd *env, unsigned long id, struct action_reply *reply,
			       struct err *e)
{
	struct desk_window w;
	if (desk_window_get(env->desk, id, &w, e) < 0)
		return -1;
	reply->json = json_pack("{s:b, s:o}", "ok", 1, "window", windows_json(&w));
	desk_window_clear(&w);
	return 0;
}

int act_windows(struct envd *env, const json_t *params, struct action_reply *reply, struct err *e)
{
	struct desk_window *list;
	size_t n;
	if (desk_windows(env->desk, &list, &n, e) < 0)
		return -1;
	json_t *arr = json_array();
	for (size_t i = 0; i < n; i++)
		json_array_append_new(arr, windows_json(&list[i]));
	desk_windows_free(list, n);
	reply->json = json_pack("{s:o}", "windows", arr);
	return 0;
}

int act_launch(struct envd *env, const json_t *params, struct action_reply *reply, struct err *e)
{
	const char *app;
	if (param_need_str(params, "app", &app, e) < 0)
		return -1;
	json_t *args_json = NULL;
	if (param_array(params, "args", &args_json, e) < 0)
		return -1;
	double wait_s = 0;
	if (param_double(params, "wait_s", 0, 60, &wait_s, e) < 0)
		return -1;
	size_t nargs = args_json ? json_array_size(args_json) : 0;
	const char **args = calloc(nargs + 1, sizeof *args);
	if (!args)
		return err_set(e, ERR_INTERNAL, "out of memory");
	for (size_t i = 0; i < nargs; i++) {
		json_t *a = json_array_get(args_json, i);
		if (!json_is_string(a)) {
			free(args);
			return err_param(e, "args", "args[%zu]: expected a string", i);
		}
		args[i] = json_string_value(a);
	}

	/* The windows there are before, to recognise the app's new one. */
	unsigned long *before = NULL;
	size_t n_before = 0;
	if (wait_s > 0) {
		struct desk_window *list;
		if (desk_windows(env->desk, &list, &n_before, e) < 0) {
			free(args);
			return -1;
		}
		before = calloc(n_before ? n_before : 1, sizeof *before);
		for (size_t i = 0; before && i < n_before; i++)
			before[i] = list[i].id;
		desk_windows_free(list, n_before);
		if (!before) {
			free(args);
			return err_set(e, ERR_INTERNAL, "out of memory");
		}
	}

	struct launch_opts o = {
	    .app = app,
	    .args = args,
	    .display = env->display ? env->display : desk_display_name(env->desk),
	    .as = {env->run_as_uid, env->run_as_gid, env->run_as_home},
	};
	pid_t pid;
	int rc = launch_app(&o, &pid, e);
	free(args);
	if (rc < 0) {
		free(before);
		return -1;
	}
	json_t *window = json_null();
	if (wait_s > 0) {
		unsigned long id = 0;
		struct desk_window w;
		if (desk_window_wait_new(env->desk, before, n_before, pid, (int)(wait_s * 1000),
					 &id, e) == 0 &&
		    id && desk_window_get(env->desk, id, &w, e) == 0) {
			window = windows_json(&w);
			desk_window_clear(&w);
		}
		/* No window (yet) is an answer, not a failure: the app runs. */
		err_clear(e);
	}
	free(before);
	reply->json = json_pack("{s:b, s:i, s:o}", "ok", 1, "pid", (int)pid, "window", window);
	return 0;
}

int act_focus_window(struct envd *env, const json_t *params, struct action_reply *reply,
		     struct err *e)
{
	unsigned long id;
	if (windows_param_id(params, &id, e) < 0 || desk_window_focus(env->desk, id, e) < 0)
		return -1;
	return windows_reply_state(env, id, reply, e);
}

int act_get_window_size(struct envd *env, const json_t *params, struct action_reply *reply,
			struct err *e)
{
	unsigned long id;
	struct desk_window w;
	if (windows_param_id(params, &id, e) < 0 || desk_window_get(env->desk, id, &w, e) < 0)
		return -1;
	reply->json = json_pack("{s:I, s:i, s:i}", "id", (json_int_t)id, "width", w.width, "height",
				w.height);
	desk_window_clear(&w);
	return 0;
}

int act_set_window_size(struct envd *env, const json_t *params, struct action_reply *reply,
			struct err *e)
{
	unsigned long id;
	long long width, height;
	if (windows_param_id(params, &id, e) < 0 ||
	    param_need_int(params, "width", 1, 32767, &width, e) < 0 ||
	    param_need_int(params, "height", 1, 32767, &height, e) < 0 ||
	    desk_window_resize(env->desk, id, (int)width, (int)height, e) < 0)
		return -1;
	return windows_reply_state(env, id, reply, e);
}

int act_get_window_position(struct envd *env, const json_t *params, struct action_reply *reply,
			    struct err *e)
{
	unsigned long id;
	struct desk_window w;
	if (windows_param_id(params, &id, e) < 0 || desk_window_get(env->desk, id, &w, e) < 0)
		return -1;
	reply->json = json_pack("{s:I, s:i, s:i}", "id", (json_int_t)id, "x", w.x, "y", w.y);
	desk_window_clear(&w);
	return 0;
}

int act_set_window_position(struct envd *env, const json_t *params, struct action_reply *reply,
			    struct err *e)
{
	unsigned long id;
	long long x, y;
	if (windows_param_id(params, &id, e) < 0 ||
	    param_need_int(params, "x", -32768, 32767, &x, e) < 0 ||
	    param_need_int(params, "y", -32768, 32767, &y, e) < 0 ||
	    desk_window_move(env->desk, id, (int)x, (int)y, e) < 0)
		return -1;
	return windows_reply_state(env, id, reply, e);
}

int act_maximize_window(struct envd *env, const json_t *params, struct action_reply *reply,
			struct err *e)
{
	unsigned long id;
	if (windows_param_id(params, &id, e) < 0 || desk_window_maximize(env->desk, id, e) < 0)
		return -1;
	return windows_reply_state(env, id, reply, e);
}

int act_minimize_window(struct envd *env, const json_t *params, struct action_reply *reply,
			struct err *e)
{
	unsigned long id;
	if (windows_param_id(params, &id, e) < 0 || desk_window_minimize(env->desk, id, e) < 0)
		return -1;
	return windows_reply_state(env, id, reply, e);
}

/* {"ok":true,"id","closed"} and, if it is still open (a "save changes?"
 * prompt), its "window"; otherwise "window" is null. */
int act_close_window(struct envd *env, const json_t *params, struct action_reply *reply,
		     struct err *e)
{
	unsigned long id;
	if (windows_param_id(params, &id, e) < 0 || desk_window_close(env->desk, id, e) < 0)
		return -1;
	struct desk_window w;
	struct err ge;
	if (desk_window_get(env->desk, id, &w, &ge) < 0) {
		if (ge.code != ERR_NOT_FOUND) {
			*e = ge;
			return -1;
		}
		reply->json = json_pack("{s:b, s:I, s:b, s:n}", "ok", 1, "id", (json_int_t)id,
					"closed", 1, "window");
		return 0;
	}
	reply->json = json_pack("{s:b, s:I, s:b, s:o}", "ok", 1, "id", (json_int_t)id, "closed", 0,
				"window", windows_json(&w));
	desk_window_clear(&w);
	return 0;
}
