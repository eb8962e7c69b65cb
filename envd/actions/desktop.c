/*
 * The desktop family: which desktop environment runs (get_desktop_environment)
 * and its wallpaper (set_wallpaper). Thin: the work is in x11/desktop.c.
 */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>

#include "action.h"
#include "desktop.h"
#include "params.h"

int act_get_desktop_environment(struct envd *env, const json_t *params, struct action_reply *reply,
				struct err *e)
{
	struct desk_environment de;
	if (desk_environment(env->desk, &de, e) < 0)
		return -1;
	reply->json = json_pack("{s:s, s:s, s:s}", "name", de.name, "version", de.version,
				"window_manager", de.wm);
	return 0;
}

/* A relative path is taken from the client's home, where its files are. */
int act_set_wallpaper(struct envd *env, const json_t *params, struct action_reply *reply,
		      struct err *e)
{
	const char *path;
	if (param_need_str(params, "path", &path, e) < 0)
		return -1;
	if (!*path)
		return err_param(e, "path", "path: empty; give the image file's path");
	char joined[PATH_MAX];
	if (path[0] != '/' && env->run_as_home) {
		if (snprintf(joined, sizeof joined, "%s/%s", env->run_as_home, path) >=
		    (int)sizeof joined)
			return err_param(e, "path", "path: too long");
		path = joined;
	}
	const char *method = NULL;
	if (desk_set_wallpaper(env->desk, path, &method, e) < 0)
		return -1;
	char *abs = realpath(path, NULL);
	reply->json = json_pack("{s:b, s:s, s:s}", "ok", 1, "path", abs ? abs : path, "method",
				method ? method : "");
	free(abs);
	return 0;
}
