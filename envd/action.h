/*
 * action: the table of envd actions and how a request runs one.
 *
 * Each action family (input, screen, windows, clipboard, a11y, shell, files,
 * desktop) lives in actions/<family>.c: a handler act_NAME per action.
 * The table of actions is spec/actions.json (spec/README.md), from which
 * the build generates actions_all[]. Handlers are thin: they read
 * parameters with wire/params.h, call the desk or proc library and fill a
 * reply.
 *
 * Handlers run on worker threads, never on the HTTP event loop, so a slow
 * bash call cannot delay a screenshot. Libraries they call serialise their
 * own shared state (the X connection, the AT-SPI bus).
 */
#ifndef CUBICLE_ENVD_ACTION_H
#define CUBICLE_ENVD_ACTION_H

#include <jansson.h>

#include "envd.h"
#include "err.h"

struct action_reply {
	json_t *json; /* the JSON answer (owned); on error it is merged with the error */
	/* Or raw bytes (screenshot): body is malloc'd and owned by the reply. */
	unsigned char *body;
	size_t body_len;
	const char *content_type; /* static string, for body */
	int width, height;	  /* image replies: sent as X-Width / X-Height */
	double scale;		  /* image replies: sent as X-Scale */
};

/* Returns 0 and fills reply, or -1 with e filled (reply->json may add detail). */
typedef int (*action_fn)(struct envd *env, const json_t *params, struct action_reply *reply,
			 struct err *e);

enum action_flags {
	ACTION_DISPLAY = 1 << 0, /* needs the X display: 409 when headless */
};

struct action {
	const char *name;
	action_fn run;
	unsigned flags;
	const char *const *params; /* accepted parameter names, NULL-terminated */
};

/*
 * Every action, generated from spec/actions.json by spec/gen.py into the
 * build directory (actions-gen.c): name, handler act_NAME, ACTION_DISPLAY
 * for the desktop kind, and the parameter names. Ends with a NULL name.
 */
extern const struct action actions_all[];

/* The handlers' prototypes, generated likewise. */
#include "actions-gen.h"

/*
 * `envd --a11y-tree`: reads get_accessibility_tree's parameters (JSON) on
 * stdin, prints the tree or {"error":...} on stdout and exits (see
 * actions/a11y.c: the tree is read out of envd's process).
 */
_Noreturn void a11y_helper_main(void);

/* The action called `name`, or NULL. */
const struct action *action_find(const char *name);

/* Every action, for /health's capabilities: calls fn for each. */
void action_foreach(void (*fn)(const struct action *a, void *arg), void *arg);

/*
 * Checks parameters against the action's list and its display need, then
 * runs it. Returns 0 or -1 with e filled.
 */
int action_run(struct envd *env, const struct action *a, const json_t *params,
	       struct action_reply *reply, struct err *e);

void action_reply_free(struct action_reply *reply);

#endif
