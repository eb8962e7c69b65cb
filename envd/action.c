#include "action.h"

#include <stdlib.h>
#include <string.h>

#include "params.h"

const struct action *action_find(const char *name)
{
	for (const struct action *a = actions_all; a->name; a++)
		if (strcmp(a->name, name) == 0)
			return a;
	return NULL;
}

void action_foreach(void (*fn)(const struct action *a, void *arg), void *arg)
{
	for (const struct action *a = actions_all; a->name; a++)
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
