/*
 * launch: start a desktop application, detached, the way a menu would.
 *
 * `app` is a .desktop id ("firefox-esr", "xfce4-terminal.desktop") looked up
 * in $XDG_DATA_DIRS/applications, whose Exec line is used with its field
 * codes removed and `args` appended; otherwise it is a command run with args.
 */
#ifndef CUBICLE_PROC_LAUNCH_H
#define CUBICLE_PROC_LAUNCH_H

#include <stddef.h>
#include <sys/types.h>

#include "shell.h"

struct launch_opts {
	const char *app;
	const char *const *args; /* NULL-terminated, or NULL */
	const char *display;	 /* DISPLAY for the child */
	struct run_as as;
};

/*
 * Starts it in its own session with stdio on /dev/null and returns its pid
 * once exec succeeded. ERR_NOT_FOUND (param "app") when neither a .desktop
 * file nor a program of that name exists.
 */
int launch_app(const struct launch_opts *o, pid_t *pid, struct err *e);

/*
 * The argv of a .desktop file's Exec value, as written in the file: string
 * escapes (\s \n \t \r \\) are undone, then the value is split by the
 * Desktop Entry spec's quoting rules and field codes are removed (an argument
 * that was only a field code, such as %U, disappears; %% becomes %).
 * Returns a malloc'd NULL-terminated array (launch_argv_free), or NULL with
 * ERR_INVALID (an unterminated quote, an empty command).
 */
char **launch_exec_argv(const char *exec, struct err *e);
void launch_argv_free(char **argv);

#endif
