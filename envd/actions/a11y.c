/*
 * Accessibility action: get_accessibility_tree, the AT-SPI tree of the
 * desktop's applications (x11/a11y.h), optionally narrowed to applications
 * whose name contains `app` and cut at `max_depth` levels and `max_nodes`
 * nodes ("truncated": true when the node cap or the time limit was hit).
 *
 * Each tree is read by a helper process, envd itself run as
 * `envd --a11y-tree` (a11y_helper_main) with the options on stdin and the
 * answer on stdout, as the client user. libatspi connects once per process
 * and never again: once the session's supervisor restarts the accessibility
 * bus (or the session bus under it), a connection kept in envd would stay
 * dead for good, and atspi_exit() does not leave it able to connect anew.
 * A fresh process always finds the bus of the moment, for the price of one
 * exec (a few ms next to the walk's D-Bus round trips).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "a11y.h"
#include "action.h"
#include "params.h"
#include "shell.h"

/* The helper's own deadline: the walk stops itself at 45 s (x11/a11y.c). */
#define A11Y_HELPER_TIMEOUT_MS 60000

/*
 * The tree's options, read on both sides: envd checks them (a 400 comes
 * from envd, not from the helper), the helper uses them. o->app points
 * into params.
 */
static int a11y_params(const json_t *params, struct a11y_opts *o, struct err *e)
{
	*o = (struct a11y_opts){
	    .max_depth = 10, .max_nodes = 5000, .uid = (uid_t)-1, .gid = (gid_t)-1};
	long long v;
	int r = param_int(params, "max_depth", 1, 50, &v, e);
	if (r < 0)
		return -1;
	if (r > 0)
		o->max_depth = (int)v;
	r = param_int(params, "max_nodes", 1, 100000, &v, e);
	if (r < 0)
		return -1;
	if (r > 0)
		o->max_nodes = (int)v;
	return param_str(params, "app", &o->app, e) < 0 ? -1 : 0;
}

int act_get_accessibility_tree(struct envd *env, const json_t *params, struct action_reply *reply,
			       struct err *e)
{
	struct a11y_opts o;
	if (a11y_params(params, &o, e) < 0)
		return -1;
	char *in = json_dumps(params, JSON_COMPACT);
	if (!in)
		return err_set(e, ERR_INTERNAL, "out of memory");
	const char *const argv[] = {"/proc/self/exe", "--a11y-tree", NULL};
	struct shell_opts so = {
	    .argv = argv,
	    .stdin_data = in,
	    .stdin_len = strlen(in),
	    .timeout_ms = A11Y_HELPER_TIMEOUT_MS,
	    .as = {env->run_as_uid, env->run_as_gid, env->run_as_home},
	};
	struct shell_result r = {0};
	int rc = shell_run(&so, &r, e);
	free(in);
	if (rc < 0)
		return -1;
	json_error_t je;
	json_t *out = r.exit_code == 0 ? json_loadb(r.out, r.out_len, 0, &je) : NULL;
	if (!json_is_object(out))
		rc = err_set(e, ERR_UNAVAILABLE, "the accessibility helper failed (%s %d): %.300s",
			     r.timed_out ? "timed out after ms" : "exit code",
			     r.timed_out ? A11Y_HELPER_TIMEOUT_MS : r.exit_code, r.err);
	else if (json_object_get(out, "error"))
		rc = err_from_json(e, out, 503);
	else
		reply->json = json_incref(out);
	json_decref(out);
	shell_result_free(&r);
	return rc;
}

_Noreturn void a11y_helper_main(void)
{
	json_error_t je;
	json_t *params = json_loadf(stdin, 0, &je);
	struct a11y_opts o;
	struct err e = {0};
	json_t *out = NULL;
	if (!json_is_object(params))
		err_set(&e, ERR_BAD_REQUEST, "--a11y-tree reads a JSON object on stdin");
	else if (a11y_params(params, &o, &e) == 0)
		a11y_tree(&o, &out, &e);
	if (!out)
		out = err_to_json(&e);
	int ok = out && json_dumpf(out, stdout, JSON_COMPACT) == 0 && fflush(stdout) == 0;
	/* No exit handlers: libatspi's and GLib's process-long state is not
	 * worth freeing (and a leak checker would count it). */
	_exit(ok ? 0 : 1);
}
