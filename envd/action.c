#include "action.h"

#include <stdlib.h>
#include <string.h>

#include "params.h"

static const struct action *const action_tables[] = {
    actions_input,   actions_screen, actions_windows, actions_clipboard,
    actions_desktop, actions_a11y,   actions_shell,   actions_files,
};

const struct action *action_find(const char *name)
{
	for (size_t t = 0; t < sizeof action_tables / sizeof action_tables[0]; t++)
		for (const struct action *a = action_tables[t]; a->name; a++)
			if (strcmp(a->name, name) == 0)
				return a;
	return NULL;
}

void action_foreach(void (*fn)(const struct action *a, void *arg), void *arg)
{
	for (size_t t = 0; t < sizeof action_tables / sizeof action_tables[0]; t++)
		for (const struct action *a = action_tables[t]; a->name; a++)
			fn(a, arg);
}

int action_run(struct envd *env, const struct action *a, const json_t *params,
	       struct action_reply *reply, struct err *e)
{
	if (params_check_known(params, a->params, e) < 0)
		return -1;
	if ((a->flags & ACTION_DISPLAY) && !env->desk)
		return err_set(e, ERR_CONFLICT,
			       "%s needs a display, and this computer has none (a headless "
			       "sandbox); use a desktop computer for screen, mouse and keyboard "
			       "actions",
			       a->name);
	return a->run(env, params, reply, e);
}

void action_reply_free(struct action_reply *reply)
{
	json_decref(reply->json);
	free(reply->body);
	memset(reply, 0, sizeof *reply);
}
