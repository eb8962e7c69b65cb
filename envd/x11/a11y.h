/*
 * a11y: the accessibility tree through AT-SPI (the D-Bus accessibility bus
 * that GTK, Qt and Firefox publish to).
 */
#ifndef CUBICLE_DESK_A11Y_H
#define CUBICLE_DESK_A11Y_H

#include <stdbool.h>
#include <sys/types.h>
#include <jansson.h>

#include "err.h"

struct a11y_opts {
	int max_depth;	 /* levels below each application (default 10) */
	const char *app; /* only applications whose name contains this, NULL = all */
	int max_nodes;	 /* stop after this many nodes, flagging truncation */
	/* Talk to the bus as this user ((uid_t)-1 = as envd): AT-SPI's
	 * per-application sockets accept only the application's own user. */
	uid_t uid;
	gid_t gid;
};

/*
 * {"applications":[node...], "truncated":bool} where node is
 * {"role","name","description","states":[...],
 *  "bounds":{"x","y","width","height"} (screen pixels, absent if none),
 *  "actions":[...], "children":[node...]}.
 * ERR_UNAVAILABLE with a clear message when there is no accessibility bus.
 * The caller owns *out.
 */
int a11y_tree(const struct a11y_opts *o, json_t **out, struct err *e);

#endif
