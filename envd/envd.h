/*
 * envd: the agent inside every computer. This header is the process-wide
 * context the HTTP front hands to every action handler.
 */
#ifndef CUBICLE_ENVD_H
#define CUBICLE_ENVD_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

struct desk;
struct clipboard;
struct session;
struct vnc;

struct envd {
	const char *display;	     /* $DISPLAY envd drives, NULL when headless */
	struct desk *desk;	     /* NULL when there is no display */
	struct clipboard *clipboard; /* NULL when there is no display */
	struct session *session;     /* the supervised desktop, NULL when not supervising */
	struct vnc *vnc;	     /* the RFB server (--vnc), NULL when off or headless */

	/* Identity every client command runs as (bash, python, launch, files).
	 * run_as_uid == (uid_t)-1 means "as envd itself". */
	uid_t run_as_uid;
	gid_t run_as_gid;
	const char *run_as_home; /* HOME for client commands, NULL = inherit */

	/* envd --guest: the guest's root agent in a cubicle computer, which may
	 * change the guest's system (the package helper, POST /v1/setup).
	 * Never on a machine you bring or a development desktop. */
	bool guest;

	size_t max_body;      /* largest request body accepted for actions */
	size_t max_read_file; /* read_file's limit; larger files use /v1/files */
};

#endif
