/*
 * pkg-policy: the package helper's rules (see pkg-policy.h).
 */
#include "pkg-policy.h"

#include <stdlib.h>
#include <string.h>

/* The helper's commands; the flag says whether they install (update first
 * when the computer has no package lists yet). */
static const struct {
	const char *name;
	bool installs;
	bool takes_names;
} pkg_commands[] = {
    {"update", false, false}, {"install", true, true},	     {"reinstall", true, true},
    {"remove", false, true},  {"purge", false, true},	     {"autoremove", false, true},
    {"upgrade", true, false}, {"full-upgrade", true, false}, {"dist-upgrade", true, false},
};

/* Long options allowed as they are (no value). */
static const char *const pkg_long_ok[] = {
    "--yes",
    "--assume-yes",
    "--quiet",
    "--fix-broken",
    "--fix-missing",
    "--verbose-versions",
    "--purge",
    "--auto-remove",
    "--autoremove",
    "--reinstall",
    "--no-install-recommends",
    "--install-recommends",
    "--no-install-suggests",
    "--install-suggests",
    "--no-upgrade",
    "--only-upgrade",
    "--allow-downgrades",
    NULL,
};

/* Options that make apt-get simulate: nothing needs root. */
static const char *const pkg_long_simulate[] = {
    "--simulate", "--just-print", "--dry-run", "--recon", "--no-act", NULL,
};

static bool pkg_in(const char *s, const char *const *list)
{
	for (size_t i = 0; list[i]; i++)
		if (strcmp(s, list[i]) == 0)
			return true;
	return false;
}

static int pkg_command(const char *s)
{
	for (size_t i = 0; i < sizeof pkg_commands / sizeof pkg_commands[0]; i++)
		if (strcmp(s, pkg_commands[i].name) == 0)
			return (int)i;
	return -1;
}

static bool pkg_charset(const char *s, const char *extra)
{
	for (; *s; s++)
		if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') ||
		      (*s >= '0' && *s <= '9') || strchr(extra, *s)))
			return false;
	return true;
}

/* A release name for -t: bookworm, bookworm-backports, stable, 12. */
static bool pkg_release_ok(const char *s)
{
	size_t n = strlen(s);
	return n > 0 && n <= 64 && s[0] != '-' && pkg_charset(s, ".+~_-");
}

bool pkg_debian_name_ok(const char *s)
{
	size_t n = strlen(s);
	if (n < 2 || n > PKG_WORD_MAX)
		return false;
	/* NAME: [a-z0-9][a-z0-9+.-]+ */
	if (!((s[0] >= 'a' && s[0] <= 'z') || (s[0] >= '0' && s[0] <= '9')))
		return false;
	size_t i = 1;
	while (s[i] && ((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= '0' && s[i] <= '9') ||
			s[i] == '+' || s[i] == '.' || s[i] == '-'))
		i++;
	if (i < 2)
		return false;
	/* A name that looks like a package file is refused outright (apt takes
	 * only paths with a slash as files, but no one means a name here). */
	static const char *const files[] = {".deb", ".udeb", ".ddeb"};
	for (size_t k = 0; k < sizeof files / sizeof files[0]; k++) {
		size_t fl = strlen(files[k]);
		if (i > fl && strncmp(s + i - fl, files[k], fl) == 0)
			return false;
	}
	/* :ARCH */
	if (s[i] == ':') {
		size_t a = ++i;
		while (s[i] && ((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= '0' && s[i] <= '9') ||
				s[i] == '-'))
			i++;
		if (i == a)
			return false;
	}
	if (!s[i])
		return true;
	/* =VERSION: [A-Za-z0-9.+~:-]+ ; /RELEASE */
	if (s[i] == '=')
		return s[i + 1] && pkg_charset(s + i + 1, ".+~:-");
	if (s[i] == '/')
		return pkg_release_ok(s + i + 1);
	return false;
}

/* Whether the word is an option that makes apt simulate (-s, -ys, --dry-run...). */
static bool pkg_simulates(const char *a)
{
	if (pkg_in(a, pkg_long_simulate))
		return true;
	if (a[0] != '-' || a[1] == '-' || !strchr(a + 1, 's'))
		return false;
	/* a short cluster of flags only: -s, -ys, -sq (not -oFoo=s) */
	for (const char *c = a + 1; *c; c++)
		if (!strchr("yqfmVs", *c))
			return false;
	return true;
}

/* Whether the option takes the next word as its value. */
static bool pkg_takes_value(const char *a)
{
	return strcmp(a, "-o") == 0 || strcmp(a, "-c") == 0 || strcmp(a, "-t") == 0 ||
	       strcmp(a, "--option") == 0 || strcmp(a, "--config-file") == 0 ||
	       strcmp(a, "--target-release") == 0 || strcmp(a, "--default-release") == 0;
}

enum pkg_route pkg_apt_route(int argc, const char *const *args)
{
	int cmd = -1;
	for (int i = 0; i < argc; i++) {
		const char *a = args[i];
		if (strcmp(a, "--") == 0)
			break;
		if (a[0] == '-') {
			if (pkg_simulates(a))
				return PKG_ROUTE_DIRECT;
			if (pkg_takes_value(a))
				i++;
			continue;
		}
		if (cmd < 0)
			cmd = pkg_command(a);
		if (cmd < 0)
			return PKG_ROUTE_DIRECT; /* show, search, download, source... */
	}
	/* No command: apt-get prints its help. */
	return cmd >= 0 ? PKG_ROUTE_HELPER : PKG_ROUTE_DIRECT;
}

/* Why an option is refused, for the message. */
static const char *pkg_refusal(const char *opt)
{
	if (strcmp(opt, "-o") == 0 || strncmp(opt, "--option", 8) == 0 ||
	    strncmp(opt, "-o", 2) == 0)
		return "apt's configuration options reach dpkg and its hooks as root";
	if (strcmp(opt, "-c") == 0 || strncmp(opt, "--config-file", 13) == 0 ||
	    strncmp(opt, "-c", 2) == 0)
		return "another configuration file is apt's whole configuration, as root";
	if (strncmp(opt, "--force", 7) == 0)
		return "dpkg's and apt's --force options undo their safety checks";
	if (strncmp(opt, "--allow-", 8) == 0)
		return "it installs what apt would refuse (unsigned, essential or held packages)";
	return "it is not among the options the package helper passes on";
}

int pkg_apt_parse(int argc, const char *const *args, struct pkg_apt_plan *plan, struct err *e)
{
	memset(plan, 0, sizeof *plan);
	if (argc > PKG_ARGS_MAX)
		return err_param(e, "args", "more than %d words", PKG_ARGS_MAX);
	int cmd = -1;
	bool after_dashes = false;
	for (int i = 0; i < argc; i++) {
		const char *a = args[i];
		if (strlen(a) > PKG_WORD_MAX)
			return err_param(e, "args", "'%.40s...' is longer than %d bytes", a,
					 PKG_WORD_MAX);
		if (!after_dashes && strcmp(a, "--") == 0) {
			after_dashes = true;
			continue;
		}
		if (!after_dashes && a[0] == '-' && a[1]) {
			if (plan->nopts >= PKG_ARGS_MAX - 2)
				return err_param(e, "args", "too many options");
			if (a[1] == '-') {
				const char *eq = strchr(a, '=');
				if (pkg_in(a, pkg_long_ok)) {
					plan->opts[plan->nopts++] = a;
					continue;
				}
				bool tr = strcmp(a, "--target-release") == 0 ||
					  strcmp(a, "--default-release") == 0;
				bool tr_eq = eq && ((size_t)(eq - a) == 16 &&
						    strncmp(a, "--target-release", 16) == 0);
				if (tr || tr_eq) {
					const char *rel =
					    tr ? (i + 1 < argc ? args[++i] : NULL) : eq + 1;
					if (!rel || !pkg_release_ok(rel))
						return err_param(e, "args",
								 "%s needs a release name like "
								 "bookworm-backports",
								 a);
					if (plan->nopts + 2 > PKG_ARGS_MAX)
						return err_param(e, "args", "too many words");
					plan->opts[plan->nopts++] = "-t";
					plan->opts[plan->nopts++] = rel;
					continue;
				}
				return err_param(
				    e, "args",
				    "the option %.80s is not allowed through the package "
				    "helper: %s",
				    a, pkg_refusal(a));
			}
			/* A short cluster: -y, -q, -qq, -yq, -f, -m, -V, or -t REL / -tREL. */
			for (const char *c = a + 1; *c; c++) {
				if (strchr("yqfmV", *c)) {
					static const char *const one[] = {"-y", "-q", "-f", "-m",
									  "-V"};
					plan->opts[plan->nopts++] =
					    one[strchr("yqfmV", *c) - "yqfmV"];
					if (plan->nopts >= PKG_ARGS_MAX - 2)
						return err_param(e, "args", "too many words");
					continue;
				}
				if (*c == 't') {
					const char *rel =
					    c[1] ? c + 1 : (i + 1 < argc ? args[++i] : NULL);
					if (!rel || !pkg_release_ok(rel))
						return err_param(e, "args",
								 "-t needs a release name like "
								 "bookworm-backports");
					plan->opts[plan->nopts++] = "-t";
					plan->opts[plan->nopts++] = rel;
					break;
				}
				char opt[3] = {'-', *c, 0}, in[64] = "";
				if (strcmp(opt, a) != 0)
					snprintf(in, sizeof in, " (in %.40s)", a);
				return err_param(
				    e, "args",
				    "the option %s%s is not allowed through the package "
				    "helper: %s",
				    opt, in, pkg_refusal(opt));
			}
			continue;
		}
		if (cmd < 0) {
			if (after_dashes || (cmd = pkg_command(a)) < 0)
				return err_param(
				    e, "args",
				    "'%.80s' is not a command of the package helper (update, "
				    "install, "
				    "reinstall, remove, purge, autoremove, upgrade, full-upgrade)",
				    a);
			continue;
		}
		if (!pkg_commands[cmd].takes_names)
			return err_param(e, "args", "%s takes no package names ('%.80s')",
					 pkg_commands[cmd].name, a);
		if (!pkg_debian_name_ok(a))
			return err_param(
			    e, "args",
			    "'%.80s' is not a Debian package name (lower-case letters, "
			    "digits, + - . ; optionally :ARCH, =VERSION or /RELEASE): the "
			    "helper installs from the computer's Debian sources only, never "
			    "a file or a URL",
			    a);
		plan->names[plan->nnames++] = a;
	}
	if (cmd < 0)
		return err_param(e, "args", "no command (install, remove, update, ...)");
	if (strcmp(pkg_commands[cmd].name, "install") == 0 && plan->nnames == 0)
		return err_param(e, "args", "install: which packages?");
	plan->command = pkg_commands[cmd].name;
	plan->needs_lists = pkg_commands[cmd].installs;
	return 0;
}

const char **pkg_apt_argv(const struct pkg_apt_plan *plan)
{
	static const char *const fixed[] = {
	    "/usr/bin/apt-get",
	    "-y",
	    /* Keep changed configuration files, never ask about them. */
	    "-o",
	    "Dpkg::Options::=--force-confdef",
	    "-o",
	    "Dpkg::Options::=--force-confold",
	    "-o",
	    "Dpkg::Use-Pty=0",
	    /* The computer's disk is the user's: no copy of every .deb. */
	    "-o",
	    "APT::Keep-Downloaded-Packages=false",
	};
	size_t nfixed = sizeof fixed / sizeof fixed[0];
	size_t n = nfixed + (size_t)plan->nopts + 2 + (size_t)plan->nnames + 1;
	const char **argv = calloc(n, sizeof *argv);
	if (!argv)
		return NULL;
	size_t k = 0;
	for (size_t i = 0; i < nfixed; i++)
		argv[k++] = fixed[i];
	for (int i = 0; i < plan->nopts; i++)
		argv[k++] = plan->opts[i];
	argv[k++] = plan->command;
	argv[k++] = "--";
	for (int i = 0; i < plan->nnames; i++)
		argv[k++] = plan->names[i];
	argv[k] = NULL;
	return argv;
}

bool pkg_pip_spec_ok(const char *s)
{
	size_t n = strlen(s);
	if (n == 0 || n > 200)
		return false;
	size_t i = 0;
	/* NAME */
	if (!((s[0] >= 'a' && s[0] <= 'z') || (s[0] >= 'A' && s[0] <= 'Z') ||
	      (s[0] >= '0' && s[0] <= '9')))
		return false;
	while (s[i] && ((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= 'A' && s[i] <= 'Z') ||
			(s[i] >= '0' && s[i] <= '9') || s[i] == '.' || s[i] == '_' || s[i] == '-'))
		i++;
	char last = s[i - 1];
	if (last == '.' || last == '_' || last == '-')
		return false;
	/* [EXTRAS] */
	if (s[i] == '[') {
		size_t close = i + 1;
		while (s[close] && s[close] != ']')
			close++;
		if (s[close] != ']' || close == i + 1)
			return false;
		for (size_t k = i + 1; k < close; k++)
			if (!((s[k] >= 'a' && s[k] <= 'z') || (s[k] >= 'A' && s[k] <= 'Z') ||
			      (s[k] >= '0' && s[k] <= '9') || s[k] == '.' || s[k] == '_' ||
			      s[k] == '-' || s[k] == ','))
				return false;
		i = close + 1;
	}
	/* SPECIFIERS */
	while (s[i]) {
		static const char *const ops[] = {"===", "==", "!=", "<=", ">=", "~=", "<", ">"};
		size_t oplen = 0;
		for (size_t k = 0; k < sizeof ops / sizeof ops[0] && !oplen; k++)
			if (strncmp(s + i, ops[k], strlen(ops[k])) == 0)
				oplen = strlen(ops[k]);
		if (!oplen)
			return false;
		i += oplen;
		size_t v = i;
		while (s[i] && ((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= 'A' && s[i] <= 'Z') ||
				(s[i] >= '0' && s[i] <= '9') || strchr(".*+!_-", s[i])))
			i++;
		if (i == v)
			return false;
		if (s[i] == ',')
			i++;
		else if (s[i])
			return false;
		else
			break;
		if (!s[i])
			return false; /* a trailing comma */
	}
	return true;
}

bool pkg_npm_spec_ok(const char *s)
{
	size_t n = strlen(s);
	if (n == 0 || n > 214)
		return false;
	size_t i = 0;
	const char *ok = "._~-";
	if (s[0] == '@') {
		/* @SCOPE/ */
		i = 1;
		size_t b = i;
		while (s[i] && ((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= '0' && s[i] <= '9') ||
				(s[i] && strchr(ok, s[i]))))
			i++;
		if (i == b || s[i] != '/' || s[b] == '.' || s[b] == '_')
			return false;
		i++;
	}
	size_t b = i;
	while (s[i] &&
	       ((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= '0' && s[i] <= '9') || strchr(ok, s[i])))
		i++;
	if (i == b || s[b] == '.' || s[b] == '_' || s[b] == '-' || s[b] == '~')
		return false;
	if (!s[i])
		return true;
	if (s[i] != '@' || !s[i + 1])
		return false;
	return pkg_charset(s + i + 1, "._^~<>=*|+ -");
}
