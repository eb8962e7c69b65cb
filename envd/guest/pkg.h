/*
 * pkg: package installs for a user who is not root.
 *
 * Debian packages need the guest's root; envd is it. The package helper
 * runs `apt-get` for two kinds of callers: the user's `apt-get`/`apt`
 * (envd under those names, over /run/envd/pkg.sock: pkg-sock.h) and the
 * `install_packages` action. It runs only what pkg-policy.h allows, as
 * /usr/bin/apt-get with a fixed environment (never the caller's: no
 * APT_CONFIG, DPKG_*, PATH or LD_* get through), from /, one operation at
 * a time, within a deadline; Debian's own maintainer scripts run as root as
 * they would under apt anywhere (the guest's root: an unprivileged host uid
 * in a container, the VM's own in a microVM).
 *
 * pip and npm need no root: they install into the user's default virtual
 * environment and npm prefix (rootfs/README.md), run as the user with the
 * user's environment (proc/userenv.h); the action runs them here too.
 *
 * A computer starts with no package lists (the image keeps none): an
 * install updates them first, and updates once more and retries when apt
 * cannot find or fetch a package its lists name (a mirror that moved on).
 *
 * Every operation is logged: a line on envd's stderr (the computer's
 * console.log on the host, both drivers; at most 30 lines a minute, so a
 * user cannot fill the host's disk through it) and a JSON line in
 * /var/log/cubicle/packages.log in the guest (root's, readable by the user:
 * {"time","via","uid","pid","tool","args","exit_code","duration_ms"}).
 */
#ifndef CUBICLE_PKG_H
#define CUBICLE_PKG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "err.h"
#include "pkg-policy.h"
#include "shell.h"

#define PKG_LOG "/var/log/cubicle/packages.log"

/* Who asked, for the log. */
struct pkg_who {
	const char *via; /* "apt-get" or "apt" (the user's command), "install_packages" */
	uid_t uid;
	pid_t pid; /* 0 when unknown (the API) */
};

/* How a run ended, and what it printed. */
struct pkg_run {
	int exit_code;	/* exit status, 128 + signal, -1 when it ran out of time */
	bool timed_out; /* killed at the deadline */
	long duration_ms;
	char *output; /* the last PKG_OUTPUT_TAIL bytes of stdout and stderr,
			 interleaved as they came, NUL-terminated (malloc'd) */
	size_t output_len;
	bool output_cut;		/* earlier output was dropped */
	char missing[PKG_WORD_MAX + 1]; /* a package the tool could not find, or "" */
};

#define PKG_OUTPUT_TAIL (64 * 1024)

/* A line on envd's stderr (the console log, a file on the host), at most
 * 30 a minute whatever the user does; dropped ones are counted. */
void pkg_log_line(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

void pkg_run_free(struct pkg_run *r);

/*
 * Runs plan's apt-get as root until deadline_ms (clock_now_ms() time):
 * waits its turn, finishes an interrupted dpkg run first (`dpkg
 * --configure -a`), updates the lists when the computer has none and the
 * command installs, retries once after an update when apt could not find
 * or fetch a package. Output goes to out_fd and err_fd as it comes (-1:
 * nowhere; writes that would block are dropped, so a caller that stops
 * reading cannot stall it) and its tail into r. 0 when apt ran, whatever
 * its exit status (r says); -1 with e when it could not run (ERR_TIMEOUT:
 * the deadline passed while waiting for another operation).
 */
int pkg_apt(const struct pkg_apt_plan *plan, int out_fd, int err_fd, const struct pkg_who *who,
	    int64_t deadline_ms, struct pkg_run *r, struct err *e);

/*
 * `python3 -m pip install --no-input -- SPECS` (tool "pip") or `npm install
 * -g --no-audit --no-fund -- SPECS` (tool "npm") as the user `as`, with the
 * user's environment, until deadline_ms. Specs must have passed
 * pkg_pip_spec_ok / pkg_npm_spec_ok. 0 when the tool ran (r says how), -1
 * with e when it could not start.
 */
int pkg_user_tool(const char *tool, const char *const *specs, size_t n, const struct run_as *as,
		  const struct pkg_who *who, int64_t deadline_ms, struct pkg_run *r, struct err *e);

#endif
