/*
 * libFuzzer harness for what a guest's user sends the package helper and
 * what the size files are made from: the apt command line of the user's
 * apt-get/apt (envd/guest/pkg-policy.c, as the socket server runs it), pip
 * and npm names of install_packages, and the host and cgroup texts of
 * envd/guest/procview-text.c.
 *
 * Input: one byte saying which, then NUL-separated words (the command
 * line), or two texts and a CPU list (procview). Checked: the argv the
 * helper would run as root starts with its own fixed options, every -o in
 * it is the helper's, the command is one of the helper's, every word after
 * "--" passes pkg_debian_name_ok and none starts with '-', a refusal names
 * "args"; an accepted pip/npm spec has no URL, path or option character;
 * procview output is NUL-terminated within its buffer and says when it did
 * not fit.
 */
#include "fuzz.h"

#include "pkg-policy.h"
#include "procview-text.h"

static const char *const helper_commands[] = {
    "update",	  "install", "reinstall",    "remove",	     "purge",
    "autoremove", "upgrade", "full-upgrade", "dist-upgrade", NULL};

static bool in(const char *s, const char *const *list)
{
	for (size_t i = 0; list[i]; i++)
		if (strcmp(s, list[i]) == 0)
			return true;
	return false;
}

static void fuzz_apt(struct fz *f)
{
	char *words[PKG_ARGS_MAX + 8];
	int n = 0;
	while (f->n && n < PKG_ARGS_MAX + 8)
		words[n++] = fz_str(f, NULL);
	(void)pkg_apt_route(n, (const char *const *)words);
	struct pkg_apt_plan plan;
	struct err e = {0};
	if (pkg_apt_parse(n, (const char *const *)words, &plan, &e) < 0) {
		CHECK(e.code == ERR_INVALID && strcmp(e.param, "args") == 0 && e.message[0]);
	} else {
		CHECK(in(plan.command, helper_commands));
		const char **argv = pkg_apt_argv(&plan);
		CHECK(argv);
		CHECK(strcmp(argv[0], "/usr/bin/apt-get") == 0 && strcmp(argv[1], "-y") == 0);
		int k = 2, dashes = -1;
		for (; argv[k]; k++) {
			if (dashes < 0 && strcmp(argv[k], "--") == 0) {
				dashes = k;
				continue;
			}
			if (dashes >= 0) {
				CHECK(pkg_debian_name_ok(argv[k]) && argv[k][0] != '-');
				continue;
			}
			if (strcmp(argv[k], "-o") == 0) {
				CHECK(k < 10); /* only the helper's own four */
				k++;
			}
			CHECK(strncmp(argv[k], "--force", 7) != 0 &&
			      strncmp(argv[k], "-c", 2) != 0 &&
			      strncmp(argv[k], "--config", 8) != 0 &&
			      strncmp(argv[k], "--allow-u", 9) != 0);
		}
		CHECK(dashes > 0 && in(argv[dashes - 1], helper_commands));
		free((void *)argv);
	}
	for (int i = 0; i < n; i++) {
		if (pkg_pip_spec_ok(words[i]))
			CHECK(!strpbrk(words[i], " /:;@\\'\"$`") && words[i][0] != '-');
		if (pkg_npm_spec_ok(words[i])) {
			const char *w = words[i], *slash = strchr(w, '/');
			CHECK(w[0] != '-' && !strpbrk(w, ":;\\'\"$`"));
			CHECK(!slash || (w[0] == '@' && !strchr(slash + 1, '/')));
		}
		if (pkg_debian_name_ok(words[i]))
			CHECK(!strpbrk(words[i], " ;|&$`'\"\\*?[]{}()<>\n\t") &&
			      words[i][0] != '-');
		free(words[i]);
	}
}

static void fuzz_procview(struct fz *f)
{
	int version = fz_u8(f) & 1 ? 2 : 1;
	int cpus[64], n = fz_u8(f) % 65;
	for (int i = 0; i < n; i++)
		cpus[i] = i * (fz_u8(f) % 3 + 1);
	size_t cap = fz_u8(f) * 64 + 1;
	char *a = fz_str(f, NULL), *b = fz_str(f, NULL);
	char *out = malloc(cap);
	struct procview_mem m = {.limit = fz_u32(f), .usage = fz_u32(f)};
	procview_memstat_parse(version, a, &m);
	int r = procview_meminfo(&m, out, cap);
	CHECK(r == -1 || ((size_t)r < cap && strlen(out) == (size_t)r));
	r = procview_stat(a, cpus, n, out, cap);
	CHECK(r == -1 || ((size_t)r < cap && strlen(out) == (size_t)r));
	r = procview_cpuinfo(b, cpus, n, out, cap);
	CHECK(r == -1 || ((size_t)r < cap && strlen(out) == (size_t)r));
	r = procview_online(n, out, cap);
	CHECK(r == -1 || ((size_t)r < cap && strlen(out) == (size_t)r));
	free(out);
	free(a);
	free(b);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct fz f = {data, size};
	if (fz_u8(&f) & 1)
		fuzz_procview(&f);
	else
		fuzz_apt(&f);
	return 0;
}
