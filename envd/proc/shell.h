/*
 * shell: run a program to completion with a deadline and capture its output.
 * The basis of the bash and python actions.
 *
 * The child gets its own session and process group; on timeout the whole
 * group is killed and whatever it printed so far is returned. Output beyond
 * max_output bytes per stream is dropped (the child is not blocked) and the
 * result says so.
 */
#ifndef CUBICLE_PROC_SHELL_H
#define CUBICLE_PROC_SHELL_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include "err.h"

struct run_as {
	uid_t uid; /* (uid_t)-1 = stay as we are */
	gid_t gid;
	const char *home; /* HOME and the default cwd, NULL = inherit */
};

/*
 * The supplementary groups as->uid should carry: its groups in the group
 * database plus as->gid (just as->gid when the uid has no passwd entry).
 * *groups is malloc'd, the caller frees it; `name` (may be NULL) receives the
 * user name, "" when unknown. Thread-safe (getpwuid_r, getgrouplist).
 */
int run_as_groups(const struct run_as *as, char *name, size_t name_size, gid_t **groups, int *n,
		  struct err *e);

struct shell_opts {
	const char *const *argv; /* argv[0] is looked up in PATH */
	const char *cwd;	 /* NULL = run_as home, else inherit */
	const char *const *env;	 /* extra "KEY=VALUE" entries, NULL-terminated, or NULL */
	const void *stdin_data;	 /* fed to the child's stdin, then closed; NULL = empty */
	size_t stdin_len;
	int timeout_ms;	   /* > 0 */
	size_t max_output; /* per stream; 0 = 16 MiB */
	struct run_as as;
};

struct shell_result {
	char *out, *err; /* NUL-terminated, malloc'd: shell_result_free() */
	size_t out_len, err_len;
	bool out_truncated, err_truncated;
	int exit_code;	/* exit status, or 128 + signal when killed by one, -1 on timeout */
	int signal;	/* the signal that ended it, 0 if it exited */
	bool timed_out; /* killed at the deadline */
	long duration_ms;
};

/*
 * Returns 0 when the program ran (whatever its exit code), -1 when it could
 * not start (ERR_INVALID naming "cwd" for a bad directory, ERR_NOT_FOUND for
 * a missing program). A timeout returns 0 with timed_out set: the caller
 * decides how to report it.
 */
int shell_run(const struct shell_opts *o, struct shell_result *r, struct err *e);
void shell_result_free(struct shell_result *r);

#endif
