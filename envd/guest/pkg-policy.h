/*
 * pkg-policy: what the package helper (pkg.h) agrees to run as the guest's
 * root, decided from words alone: no file, no process, no environment.
 * Unit-tested and fuzzed on its own (tests/unit/test_pkg_policy.c).
 *
 * The user's `apt-get` and `apt` (envd under those names, pkg-client.c)
 * send their command line; the helper runs Debian's apt-get only for
 *
 *   update | install | reinstall | remove | purge | autoremove | upgrade |
 *   full-upgrade | dist-upgrade
 *
 * with these options (short ones may be clustered, -yq):
 *
 *   -y --yes --assume-yes -q --quiet -f --fix-broken -m --fix-missing -V
 *   --verbose-versions --purge --auto-remove --autoremove --reinstall
 *   --no-install-recommends --install-recommends --no-install-suggests
 *   --install-suggests --no-upgrade --only-upgrade --allow-downgrades
 *   -t REL --target-release REL (also -tREL, --target-release=REL)
 *
 * and package names in Debian's policy charset: NAME[:ARCH][=VERSION |
 * /RELEASE], NAME = [a-z0-9][a-z0-9+.-]+ not ending in .deb (so never a
 * path, a file, an option or a shell word). Everything else is refused
 * with the word that was, above all -o/--option and -c/--config-file
 * (apt's and dpkg's whole configuration, hence root), --force-* and
 * --allow-unauthenticated, --allow-insecure-repositories,
 * --allow-remove-essential, --allow-change-held-packages. The helper adds
 * -y and its own fixed options, and never a shell.
 *
 * Commands that need no root (show, search, policy, download, source,
 * changelog, a simulation with -s...) are the real program's, run as the
 * user: pkg_apt_route says which.
 */
#ifndef CUBICLE_PKG_POLICY_H
#define CUBICLE_PKG_POLICY_H

#include <stdbool.h>
#include <stddef.h>

#include "err.h"

#define PKG_ARGS_MAX 256 /* words of one command line */
#define PKG_WORD_MAX 256 /* bytes of one word */

enum pkg_route {
	PKG_ROUTE_HELPER, /* root's work: send it to the helper */
	PKG_ROUTE_DIRECT, /* the real program, as the user (it needs no root) */
};

/* Where `apt-get ARGS` or `apt ARGS` (args without the program name) goes:
 * the helper when the first word that is not an option is one of its
 * commands and no option asks for a simulation; the real program else. */
enum pkg_route pkg_apt_route(int argc, const char *const *args);

/* What the helper runs. */
struct pkg_apt_plan {
	const char *command; /* "install", "update", ... (static) */
	bool needs_lists;    /* install-like: update first when there are no lists */
	int nopts;	     /* the user's allowed options, normalised */
	const char *opts[PKG_ARGS_MAX];
	int nnames; /* package words, validated */
	const char *names[PKG_ARGS_MAX];
};

/*
 * Checks args (the words after the program name) and fills plan (pointing
 * into args and static strings). -1 with e (ERR_INVALID, param "args") naming
 * the refused word and why.
 */
int pkg_apt_parse(int argc, const char *const *args, struct pkg_apt_plan *plan, struct err *e);

/*
 * The argv to execute as root for plan (NULL-terminated, malloc'd array of
 * pointers into plan and static strings; free the array only):
 * /usr/bin/apt-get -y <fixed options> <plan's options> COMMAND -- NAMES.
 */
const char **pkg_apt_argv(const struct pkg_apt_plan *plan);

/* One Debian package word: NAME[:ARCH][=VERSION | /RELEASE] (see above). */
bool pkg_debian_name_ok(const char *s);

/* One pip requirement: NAME[EXTRAS][SPECIFIERS], no URL, path, marker or
 * option: NAME = [A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?, EXTRAS =
 * "[name,name]", SPECIFIERS = (==|!=|<=|>=|~=|<|>|===)VERSION joined by
 * commas, VERSION = [A-Za-z0-9.*+!_-]+. At most 200 bytes. */
bool pkg_pip_spec_ok(const char *s);

/* One npm package: [@SCOPE/]NAME[@RANGE], NAME and SCOPE lower-case
 * [a-z0-9][a-z0-9._~-]*, RANGE a version, tag or semver range
 * ([A-Za-z0-9._^~<>=*|+ -]); no URL, path, git or alias spec. At most 214
 * bytes. */
bool pkg_npm_spec_ok(const char *s);

#endif
