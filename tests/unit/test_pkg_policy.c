/*
 * pkg-policy: what the package helper agrees to run as the guest's root
 * (envd/guest/pkg-policy.h), word by word (cmocka). The attacks of
 * tests/host/test_packages.py go through a real guest; here every rule is
 * checked on its own, including the ones a guest test would not reach (a
 * name apt itself would refuse).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "pkg-policy.h"

#define WORDS(...)	    ((const char *const[]){__VA_ARGS__})
#define NWORDS(...)	    ((int)(sizeof((const char *const[]){__VA_ARGS__}) / sizeof(const char *)))
#define PARSE(plan, e, ...) pkg_apt_parse(NWORDS(__VA_ARGS__), WORDS(__VA_ARGS__), plan, e)
#define ROUTE(...)	    pkg_apt_route(NWORDS(__VA_ARGS__), WORDS(__VA_ARGS__))

static void test_debian_names(void **state)
{
	(void)state;
	static const char *const good[] = {"jq",
					   "g++",
					   "python3.11",
					   "libc6:amd64",
					   "jq=1.6-2.1+deb12u1",
					   "jq/bookworm",
					   "0ad",
					   "libstdc++6:i386=12.2.0-14",
					   "x11-utils",
					   "jq=1:2.0~rc1"};
	for (size_t i = 0; i < sizeof good / sizeof good[0]; i++)
		assert_true(pkg_debian_name_ok(good[i]));
	static const char *const bad[] = {
	    "",		  "a",	      "Jq",	   "-o",       "./evil.deb",
	    "/tmp/e.deb", "evil.deb", "evil.udeb", "jq;id",    "jq$(id)",
	    "jq id",	  "jq`id`",   "jq|sh",	   "jq&",      "http://x/y.deb",
	    "jq=",	  "jq:",      "jq/",	   "jq=1;2",   "jq/../x",
	    "jq\n",	  "jq\tx",    "jq=1 2",	   "-jq",      "+jq",
	    ".jq",	  "jq:AMD64", "jq/-t",	   "jq=$HOME", "~jq",
	    "jq*",	  "jq?",      "jq[a]",	   "jq{a,b}",  "jq>1",
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		if (pkg_debian_name_ok(bad[i]))
			fail_msg("accepted '%s'", bad[i]);
	}
	char longname[PKG_WORD_MAX + 2];
	memset(longname, 'a', sizeof longname - 1);
	longname[sizeof longname - 1] = '\0';
	assert_false(pkg_debian_name_ok(longname));
}

static void test_route(void **state)
{
	(void)state;
	assert_int_equal(ROUTE("install", "jq"), PKG_ROUTE_HELPER);
	assert_int_equal(ROUTE("-y", "install", "jq"), PKG_ROUTE_HELPER);
	assert_int_equal(ROUTE("update"), PKG_ROUTE_HELPER);
	assert_int_equal(ROUTE("remove", "jq"), PKG_ROUTE_HELPER);
	assert_int_equal(ROUTE("-o", "Debug::x=1", "install", "jq"), PKG_ROUTE_HELPER);
	/* Simulations and read-only commands need no root. */
	assert_int_equal(ROUTE("-s", "install", "jq"), PKG_ROUTE_DIRECT);
	assert_int_equal(ROUTE("install", "-s", "jq"), PKG_ROUTE_DIRECT);
	assert_int_equal(ROUTE("install", "-ys", "jq"), PKG_ROUTE_DIRECT);
	assert_int_equal(ROUTE("--dry-run", "install", "jq"), PKG_ROUTE_DIRECT);
	assert_int_equal(ROUTE("show", "jq"), PKG_ROUTE_DIRECT);
	assert_int_equal(ROUTE("download", "jq"), PKG_ROUTE_DIRECT);
	assert_int_equal(ROUTE("source", "jq"), PKG_ROUTE_DIRECT);
	assert_int_equal(ROUTE("changelog", "jq"), PKG_ROUTE_DIRECT);
	assert_int_equal(ROUTE("search", "jq"), PKG_ROUTE_DIRECT);
	assert_int_equal(pkg_apt_route(0, NULL), PKG_ROUTE_DIRECT);
	/* -o's value is not a command, nor is what follows "--". */
	assert_int_equal(ROUTE("-o", "install", "show"), PKG_ROUTE_DIRECT);
	assert_int_equal(ROUTE("--", "install"), PKG_ROUTE_DIRECT);
	/* "-os" is -o with the value "s", not a simulation. */
	assert_int_equal(ROUTE("-os", "install", "jq"), PKG_ROUTE_HELPER);
}

static void test_parse_ok(void **state)
{
	(void)state;
	struct pkg_apt_plan p;
	struct err e = {0};
	assert_int_equal(PARSE(&p, &e, "install", "-y", "jq", "g++"), 0);
	assert_string_equal(p.command, "install");
	assert_true(p.needs_lists);
	assert_int_equal(p.nnames, 2);
	assert_string_equal(p.names[1], "g++");
	assert_int_equal(PARSE(&p, &e, "-yq", "--no-install-recommends", "install", "--", "jq"), 0);
	assert_int_equal(p.nopts, 3); /* -y -q --no-install-recommends */
	assert_int_equal(PARSE(&p, &e, "-tbookworm", "install", "jq"), 0);
	assert_string_equal(p.opts[0], "-t");
	assert_string_equal(p.opts[1], "bookworm");
	assert_int_equal(PARSE(&p, &e, "--target-release=bookworm-backports", "install", "jq"), 0);
	assert_string_equal(p.opts[1], "bookworm-backports");
	assert_int_equal(PARSE(&p, &e, "update"), 0);
	assert_false(p.needs_lists);
	assert_int_equal(PARSE(&p, &e, "remove", "--purge", "jq"), 0);
	assert_false(p.needs_lists);
	assert_int_equal(PARSE(&p, &e, "autoremove"), 0);
	assert_int_equal(PARSE(&p, &e, "upgrade"), 0);
	assert_true(p.needs_lists);
}

/* Every refusal names "args" and the word. */
static void refused(struct err *e, const char *word)
{
	assert_int_equal(e->code, ERR_INVALID);
	assert_string_equal(e->param, "args");
	if (word && !strstr(e->message, word))
		fail_msg("the message does not name '%s': %s", word, e->message);
}

static void test_parse_refused(void **state)
{
	(void)state;
	struct pkg_apt_plan p;
	struct err e = {0};
	/* apt's configuration, hence dpkg's and its hooks', as root. */
	assert_int_equal(PARSE(&p, &e, "-o", "DPkg::Pre-Invoke::=sh -c id", "install", "jq"), -1);
	refused(&e, "-o");
	assert_int_equal(PARSE(&p, &e, "-oAPT::Update::Pre-Invoke::=id", "update"), -1);
	refused(&e, "-o");
	assert_int_equal(PARSE(&p, &e, "--option=Dir::Etc=/home/user", "update"), -1);
	refused(&e, "--option");
	assert_int_equal(PARSE(&p, &e, "install", "jq", "-o", "x"), -1);
	refused(&e, "-o");
	assert_int_equal(PARSE(&p, &e, "-c", "/home/user/apt.conf", "install", "jq"), -1);
	refused(&e, "-c");
	assert_int_equal(PARSE(&p, &e, "--config-file=/home/user/apt.conf", "install", "jq"), -1);
	refused(&e, "--config-file");
	/* dpkg's and apt's safety switches. */
	assert_int_equal(PARSE(&p, &e, "install", "--force-yes", "jq"), -1);
	refused(&e, "--force-yes");
	assert_int_equal(PARSE(&p, &e, "install", "--allow-unauthenticated", "jq"), -1);
	refused(&e, "--allow-unauthenticated");
	assert_int_equal(PARSE(&p, &e, "remove", "--allow-remove-essential", "bash"), -1);
	refused(&e, "--allow-remove-essential");
	assert_int_equal(PARSE(&p, &e, "install", "--allow-insecure-repositories", "jq"), -1);
	assert_int_equal(PARSE(&p, &e, "install", "--allow-change-held-packages", "jq"), -1);
	assert_int_equal(PARSE(&p, &e, "install", "-yo", "x"), -1);
	refused(&e, "-o");
	/* Not a command of the helper, or nothing. */
	assert_int_equal(PARSE(&p, &e, "download", "jq"), -1);
	refused(&e, "download");
	assert_int_equal(PARSE(&p, &e, "source", "jq"), -1);
	assert_int_equal(PARSE(&p, &e, "build-dep", "jq"), -1);
	assert_int_equal(PARSE(&p, &e, "-y"), -1);
	refused(&e, NULL);
	assert_int_equal(PARSE(&p, &e, "install"), -1);
	assert_int_equal(PARSE(&p, &e, "--", "install", "jq"), -1);
	/* Files, URLs and shell words are not package names. */
	assert_int_equal(PARSE(&p, &e, "install", "./evil.deb"), -1);
	refused(&e, "./evil.deb");
	assert_int_equal(PARSE(&p, &e, "install", "/home/user/evil.deb"), -1);
	assert_int_equal(PARSE(&p, &e, "install", "evil.deb"), -1);
	assert_int_equal(PARSE(&p, &e, "install", "jq; id"), -1);
	assert_int_equal(PARSE(&p, &e, "install", "--", "-o"), -1);
	assert_int_equal(PARSE(&p, &e, "install", "$(id)"), -1);
	/* Words where none go, unknown options, simulations (the user's own). */
	assert_int_equal(PARSE(&p, &e, "update", "jq"), -1);
	refused(&e, "jq");
	assert_int_equal(PARSE(&p, &e, "install", "--no-such-option", "jq"), -1);
	assert_int_equal(PARSE(&p, &e, "install", "-s", "jq"), -1);
	assert_int_equal(PARSE(&p, &e, "install", "-d", "jq"), -1);
	assert_int_equal(PARSE(&p, &e, "-t", "../../x", "install", "jq"), -1);
	assert_int_equal(PARSE(&p, &e, "-t"), -1);
	/* Too many words, too long a word. */
	const char *many[PKG_ARGS_MAX + 2];
	many[0] = "install";
	for (int i = 1; i < PKG_ARGS_MAX + 2; i++)
		many[i] = "jq";
	assert_int_equal(pkg_apt_parse(PKG_ARGS_MAX + 1, many, &p, &e), -1);
	char longword[PKG_WORD_MAX + 10];
	memset(longword, 'y', sizeof longword - 1);
	longword[0] = '-';
	longword[sizeof longword - 1] = '\0';
	assert_int_equal(PARSE(&p, &e, "install", longword, "jq"), -1);
	/* A cluster of allowed flags long enough to overflow the plan. */
	char flags[PKG_WORD_MAX];
	memset(flags, 'y', sizeof flags - 1);
	flags[0] = '-';
	flags[sizeof flags - 1] = '\0';
	assert_int_equal(PARSE(&p, &e, flags, "install", "jq"), -1);
}

static void test_argv(void **state)
{
	(void)state;
	struct pkg_apt_plan p;
	struct err e = {0};
	assert_int_equal(PARSE(&p, &e, "-q", "install", "jq", "curl"), 0);
	const char **argv = pkg_apt_argv(&p);
	assert_non_null(argv);
	assert_string_equal(argv[0], "/usr/bin/apt-get");
	int n = 0, dashes = -1, cmd = -1;
	while (argv[n]) {
		if (strcmp(argv[n], "--") == 0 && dashes < 0)
			dashes = n;
		if (strcmp(argv[n], "install") == 0)
			cmd = n;
		/* Every -o is the helper's own, with one of its values. */
		if (strcmp(argv[n], "-o") == 0)
			assert_true(strncmp(argv[n + 1], "Dpkg::", 6) == 0 ||
				    strncmp(argv[n + 1], "APT::Keep-Downloaded", 20) == 0);
		n++;
	}
	assert_int_equal(dashes, cmd + 1);
	assert_string_equal(argv[dashes + 1], "jq");
	assert_string_equal(argv[dashes + 2], "curl");
	assert_null(argv[dashes + 3]);
	free(argv);
}

static void test_pip(void **state)
{
	(void)state;
	static const char *const good[] = {"requests", "pandas==2.2.2",	 "httpx[http2]>=0.27,<1",
					   "A_b.c",    "numpy~=1.26",	 "pkg!=1.0",
					   "x===1.0",  "zope.interface", "scikit-learn>=1.4.0",
					   "pkg[a,b]"};
	for (size_t i = 0; i < sizeof good / sizeof good[0]; i++)
		if (!pkg_pip_spec_ok(good[i]))
			fail_msg("refused '%s'", good[i]);
	static const char *const bad[] = {"",
					  "-r",
					  "--index-url=http://x",
					  "-e.",
					  "git+https://x/y",
					  "./pkg",
					  "/tmp/pkg.whl",
					  "pkg @ http://x/y.whl",
					  "pkg@http://x",
					  "pkg;python_version<'3'",
					  "pkg==",
					  "pkg,",
					  "pkg[",
					  "pkg[]",
					  "pkg ==1",
					  "pkg==1,",
					  "pkg-",
					  "_pkg",
					  "pkg==1 ; x",
					  "pkg==$(id)",
					  "http://x/y.tar.gz"};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
		if (pkg_pip_spec_ok(bad[i]))
			fail_msg("accepted '%s'", bad[i]);
}

static void test_npm(void **state)
{
	(void)state;
	static const char *const good[] = {"typescript",     "@types/node", "left-pad@1.3.0",
					   "lodash@^4.17.0", "foo@latest",  "a@>=1 <2",
					   "is-odd@~3",	     "x@1.x"};
	for (size_t i = 0; i < sizeof good / sizeof good[0]; i++)
		if (!pkg_npm_spec_ok(good[i]))
			fail_msg("refused '%s'", good[i]);
	static const char *const bad[] = {"",
					  "-g",
					  "--registry=http://x",
					  "git+https://x/y",
					  "file:../x",
					  "../x",
					  "/abs/x.tgz",
					  "github:user/repo",
					  "npm:alias@1",
					  "@scope",
					  "@scope/",
					  "Foo",
					  ".hidden",
					  "_x",
					  "a@",
					  "http://x/y.tgz",
					  "user/repo",
					  "a@$(id)",
					  "a@1;id"};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
		if (pkg_npm_spec_ok(bad[i]))
			fail_msg("accepted '%s'", bad[i]);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_debian_names), cmocka_unit_test(test_route),
	    cmocka_unit_test(test_parse_ok),	 cmocka_unit_test(test_parse_refused),
	    cmocka_unit_test(test_argv),	 cmocka_unit_test(test_pip),
	    cmocka_unit_test(test_npm),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
