/*
 * The packages family: `install_packages`, a thin handler over guest/pkg.
 *
 * {"apt": [...], "pip": [...], "npm": [...], "timeout_s"?} installs Debian
 * packages as the guest's root (the package helper's rules:
 * guest/pkg-policy.h), then pip requirements into the user's default
 * virtual environment and npm packages into the user's global prefix (both
 * as the user), in that order, stopping at the first tool that fails. Every
 * name is checked before anything runs: a bad one is a 400 naming its list.
 *
 * Answer: {"ok": true, "duration_ms", "apt"?, "pip"?, "npm"?}, each tool's
 * {"packages", "exit_code", "duration_ms", "output"} (its output's last
 * 64 KiB, stdout and stderr as they came). A tool that could not find a
 * package is a 404 naming the list and the package; another failure a 409
 * with the tool's last line; running past timeout_s a 504 (the tool is
 * stopped); the error bodies carry the same per-tool objects.
 */
#include "action.h"

#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "params.h"
#include "pkg.h"
#include "utf8.h"

#define PKG_ACTION_MAX_NAMES   64
#define PKG_ACTION_TIMEOUT_S   600
#define PKG_ACTION_TIMEOUT_MAX 3600

/* One list: its names, checked with ok(). */
struct pkg_list {
	const char *tool; /* "apt", "pip", "npm" */
	const char *names[PKG_ACTION_MAX_NAMES];
	size_t n;
};

static int pkg_list_parse(const json_t *params, const char *tool, bool (*ok)(const char *),
			  const char *shape, struct pkg_list *l, struct err *e)
{
	memset(l, 0, sizeof *l);
	l->tool = tool;
	json_t *arr = NULL;
	if (param_array(params, tool, &arr, e) < 0)
		return -1;
	if (!arr)
		return 0;
	if (json_array_size(arr) > PKG_ACTION_MAX_NAMES)
		return err_param(e, tool, "%s: at most %d packages", tool, PKG_ACTION_MAX_NAMES);
	size_t i;
	json_t *v;
	json_array_foreach(arr, i, v)
	{
		const char *s = json_string_value(v);
		if (!s)
			return err_param(e, tool, "%s: a list of package names (strings)", tool);
		if (!ok(s))
			return err_param(e, tool, "%s: '%.100s' is not %s", tool, s, shape);
		l->names[l->n++] = s;
	}
	return 0;
}

/* The tail's last non-empty line, for a message. */
static void pkg_last_line(const char *text, char *out, size_t len)
{
	out[0] = '\0';
	if (!text)
		return;
	size_t n = strlen(text);
	while (n > 0 && (text[n - 1] == '\n' || text[n - 1] == ' '))
		n--;
	size_t start = n;
	while (start > 0 && text[start - 1] != '\n')
		start--;
	snprintf(out, len, "%.*s", (int)(n - start), text + start);
}

static json_t *pkg_result_json(const struct pkg_list *l, const struct pkg_run *r)
{
	json_t *names = json_array();
	for (size_t i = 0; i < l->n; i++)
		json_array_append_new(names, json_string(l->names[i]));
	json_t *out = utf8_json(r->output ? r->output : "", r->output_len);
	json_t *j = json_pack("{s:o, s:o, s:I, s:o}", "packages", names, "exit_code",
			      r->timed_out ? json_null() : json_integer(r->exit_code),
			      "duration_ms", (json_int_t)r->duration_ms, "output", out);
	if (r->output_cut)
		json_object_set_new(j, "output_truncated", json_true());
	return j;
}

int act_install_packages(struct envd *env, const json_t *params, struct action_reply *reply,
			 struct err *e)
{
	long long timeout_s = PKG_ACTION_TIMEOUT_S;
	if (param_int(params, "timeout_s", 1, PKG_ACTION_TIMEOUT_MAX, &timeout_s, e) < 0)
		return -1;
	struct pkg_list lists[3];
	if (pkg_list_parse(params, "apt", pkg_debian_name_ok,
			   "a Debian package name (lower-case letters, digits, + - .; optionally "
			   ":ARCH, =VERSION or /RELEASE)",
			   &lists[0], e) < 0 ||
	    pkg_list_parse(params, "pip", pkg_pip_spec_ok,
			   "a pip requirement (NAME, NAME[extra], NAME==1.2, NAME>=1,<2; no URL, "
			   "path or option)",
			   &lists[1], e) < 0 ||
	    pkg_list_parse(params, "npm", pkg_npm_spec_ok,
			   "an npm package (NAME, @scope/NAME, NAME@1.2.3, NAME@^1; no URL, path "
			   "or git spec)",
			   &lists[2], e) < 0)
		return -1;
	if (!lists[0].n && !lists[1].n && !lists[2].n)
		return err_param(e, "apt", "nothing to install: give apt, pip or npm a package");

	int64_t t0 = clock_now_ms();
	int64_t deadline = t0 + timeout_s * 1000;
	json_t *answer = json_object();
	struct pkg_who who = {"install_packages", env->run_as_uid, 0};
	struct run_as as = {env->run_as_uid, env->run_as_gid, env->run_as_home};
	int rc = 0;
	for (int t = 0; t < 3 && rc == 0; t++) {
		struct pkg_list *l = &lists[t];
		if (!l->n)
			continue;
		struct pkg_run r;
		if (t == 0 && !env->guest) {
			rc = err_set_param(e, ERR_CONFLICT, "apt",
					   "apt: Debian packages need the guest's package helper "
					   "(envd --guest), which this computer does not run");
			break;
		}
		if (t == 0) {
			struct pkg_apt_plan plan = {.command = "install", .needs_lists = true};
			plan.nnames = (int)l->n;
			for (size_t i = 0; i < l->n; i++)
				plan.names[i] = l->names[i];
			rc = pkg_apt(&plan, -1, -1, &who, deadline, &r, e);
		} else {
			rc = pkg_user_tool(l->tool, l->names, l->n, &as, &who, deadline, &r, e);
		}
		if (rc < 0)
			break;
		json_object_set_new(answer, l->tool, pkg_result_json(l, &r));
		if (r.timed_out) {
			rc = err_set(e, ERR_TIMEOUT,
				     "%s ran past timeout_s (%lld s) and was stopped", l->tool,
				     timeout_s);
		} else if (r.exit_code != 0 && r.missing[0]) {
			rc = err_set_param(e, ERR_NOT_FOUND, l->tool,
					   "%s: no package '%s' in the computer's %s", l->tool,
					   r.missing,
					   t == 0   ? "Debian sources"
					   : t == 1 ? "package index (cubicled --pip-index-url)"
						    : "npm registry (cubicled --npm-registry)");
		} else if (r.exit_code != 0) {
			char last[300];
			pkg_last_line(r.output, last, sizeof last);
			rc = err_set_param(e, ERR_CONFLICT, l->tool, "%s failed (exit %d): %s",
					   l->tool, r.exit_code, last);
		}
		pkg_run_free(&r);
	}
	json_object_set_new(answer, "duration_ms", json_integer(clock_now_ms() - t0));
	if (rc < 0) {
		reply->json = answer;
		return -1;
	}
	json_object_set_new(answer, "ok", json_true());
	reply->json = answer;
	return 0;
}
