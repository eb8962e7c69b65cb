/*
 * Accessibility action: get_accessibility_tree, the AT-SPI tree of the
 * desktop's applications (x11/a11y.h), optionally narrowed to applications
 * whose name contains `app` and cut at `max_depth` levels and `max_nodes`
 * nodes ("truncated": true when the node cap or the time limit was hit).
 */
#include "a11y.h"
#include "action.h"
#include "params.h"

static int a11y_run_tree(struct envd *env, const json_t *params, struct action_reply *reply,
			 struct err *e)
{
	struct a11y_opts o = {
	    .max_depth = 10,
	    .max_nodes = 5000,
	    .uid = env->run_as_uid,
	    .gid = env->run_as_gid,
	};
	long long v;
	int r = param_int(params, "max_depth", 1, 50, &v, e);
	if (r < 0)
		return -1;
	if (r > 0)
		o.max_depth = (int)v;
	r = param_int(params, "max_nodes", 1, 100000, &v, e);
	if (r < 0)
		return -1;
	if (r > 0)
		o.max_nodes = (int)v;
	if (param_str(params, "app", &o.app, e) < 0)
		return -1;
	return a11y_tree(&o, &reply->json, e);
}

static const char *const a11y_tree_params[] = {"max_depth", "app", "max_nodes", NULL};

const struct action actions_a11y[] = {
    {"get_accessibility_tree", a11y_run_tree, ACTION_DISPLAY, a11y_tree_params},
    {0},
};
