/*
 * templates: `cubicle template create|ls|get|log|rm` (docs/api.md,
 * Templates). A template is built by cubicled in the background; create
 * --follow prints its build's log as it grows (GET .../log with an
 * offset, every half second) and exits 1 if the build fails.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"

#define TEMPLATES_POLL_NS 500000000L

static const char *templates_name(const json_t *t)
{
	return json_string_value(json_object_get(t, "name"));
}

/* Appends every value of a repeatable option to body[field] (a list). */
static void templates_list_opt(const struct args *a, const char *opt, json_t *body,
			       const char *field)
{
	json_t *list = NULL;
	for (int i = 0; i < a->nopt; i++) {
		if (!args_same_name(a->opt[i].name, opt))
			continue;
		if (!list)
			json_object_set_new(body, field, list = json_array());
		json_array_append_new(list, json_string(a->opt[i].value));
	}
}

/* A local file's bytes as a JSON string (the recipe's files are text). */
static json_t *templates_read(const char *path, struct err *e)
{
	FILE *f = fopen(path, "rb");
	if (!f) {
		err_set(e, ERR_INVALID, "%s: %s", path, strerror(errno));
		return NULL;
	}
	size_t cap = 65536, n = 0, k;
	char *buf = malloc(cap);
	while (buf && (k = fread(buf + n, 1, cap - n, f)) > 0) {
		n += k;
		if (n == cap) {
			char *more = cap < (2u << 20) ? realloc(buf, cap * 2) : NULL;
			if (!more) {
				free(buf);
				buf = NULL;
				break;
			}
			buf = more, cap *= 2;
		}
	}
	fclose(f);
	json_t *s = buf ? json_stringn(buf, n) : NULL;
	free(buf);
	if (!s)
		err_set(e, ERR_INVALID, "%s: not UTF-8 text of at most 1 MiB", path);
	return s;
}

/* --file PATH=LOCAL (repeatable): the content of LOCAL at PATH. */
static int templates_files(const struct args *a, json_t *body, struct err *e)
{
	json_t *files = NULL;
	for (int i = 0; i < a->nopt; i++) {
		if (!args_same_name(a->opt[i].name, "file"))
			continue;
		const char *v = a->opt[i].value, *eq = strchr(v, '=');
		if (!eq || eq == v || !eq[1])
			return cli_usage(a->cmd, "--file: expected PATH=LOCAL_FILE, got '%s'", v);
		json_t *content = templates_read(eq + 1, e);
		if (!content)
			return cli_fail(e);
		if (!files)
			json_object_set_new(body, "files", files = json_object());
		char path[1200];
		snprintf(path, sizeof path, "%.*s", (int)(eq - v), v);
		json_object_set_new(files, path, content);
	}
	return 0;
}

/* Prints the build's log from *offset on; the template's state in state. */
static int templates_log_once(struct cli *cli, const char *name, long long *offset, char state[16],
			      struct err *e)
{
	char path[300];
	snprintf(path, sizeof path, "/v1/templates/%s/log?offset=%lld", name, *offset);
	json_t *out = NULL;
	if (api_json(cli, "GET", path, NULL, &out, e) < 0)
		return -1;
	json_t *log = json_object_get(out, "log");
	fwrite(json_string_value(log) ? json_string_value(log) : "", 1, json_string_length(log),
	       stdout);
	fflush(stdout);
	*offset = (long long)json_integer_value(json_object_get(out, "next_offset"));
	snprintf(state, 16, "%s", json_string_value(json_object_get(out, "state")) ?: "");
	json_decref(out);
	return 0;
}

/* Prints the log until the build is over; -1 with e when it failed. */
static int templates_follow(struct cli *cli, const char *name, struct err *e)
{
	long long offset = 0;
	char state[16];
	for (;;) {
		if (templates_log_once(cli, name, &offset, state, e) < 0)
			return -1;
		if (strcmp(state, "building") != 0)
			break;
		struct timespec ts = {0, TEMPLATES_POLL_NS};
		nanosleep(&ts, NULL);
	}
	/* What was written between the last read and the end. */
	if (templates_log_once(cli, name, &offset, state, e) < 0)
		return -1;
	if (strcmp(state, "ready") != 0)
		return err_set(e, ERR_CONFLICT, "template %s is %s", name, state);
	return 0;
}

/* GET the template, with ?wait=ready when asked; a failed build is -1. */
static int templates_wait(struct cli *cli, const char *name, const char *timeout, json_t **out,
			  struct err *e)
{
	char path[300];
	snprintf(path, sizeof path, "/v1/templates/%s?wait=ready&timeout_s=%s", name,
		 timeout ? timeout : "1800");
	char what[120];
	snprintf(what, sizeof what, "%s: building", name);
	cli->waiting = what;
	int rc = api_json(cli, "GET", path, NULL, out, e);
	cli->waiting = NULL;
	if (rc < 0)
		return -1;
	const char *state = json_string_value(json_object_get(*out, "state"));
	if (state && strcmp(state, "ready") != 0) {
		const char *why = json_string_value(json_object_get(*out, "error"));
		return err_set(e, ERR_CONFLICT, "template %s is %s%s%s", name, state,
			       why ? ": " : "", why ? why : "");
	}
	return 0;
}

static int templates_create(struct cli *cli, struct args *a)
{
	int rc = cli_need(a, 2, 2);
	if (rc)
		return rc;
	const char *timeout = args_get(a, "timeout");
	long long n;
	if (timeout && args_int(timeout, 0, 3600, &n) < 0)
		return cli_usage(a->cmd, "--timeout: expected seconds (0..3600), got '%s'",
				 timeout);
	json_t *body = json_pack("{s:s}", "name", a->pos[1]), *out = NULL;
	const char *v;
	if ((v = args_get(a, "base")))
		json_object_set_new(body, "base", json_string(v));
	if ((v = args_get(a, "workspace")))
		json_object_set_new(body, "workspace", json_string(v));
	templates_list_opt(a, "apt", body, "apt");
	templates_list_opt(a, "pip", body, "pip");
	templates_list_opt(a, "npm", body, "npm");
	templates_list_opt(a, "run", body, "run");
	struct err e = {0};
	if ((rc = templates_files(a, body, &e)) == 0 &&
	    api_json(cli, "POST", "/v1/templates", body, &out, &e) < 0)
		rc = cli_fail(&e);
	json_decref(body);
	if (rc == 0 && args_has(a, "follow")) {
		if (templates_follow(cli, a->pos[1], &e) < 0)
			rc = cli_fail(&e);
	} else if (rc == 0 && args_has(a, "wait")) {
		json_decref(out);
		out = NULL;
		if (templates_wait(cli, a->pos[1], timeout, &out, &e) < 0)
			rc = cli_fail(&e);
	}
	if (rc == 0 && cli->json && out)
		out_json(out);
	else if (rc == 0 && !args_has(a, "follow"))
		puts(a->pos[1]);
	json_decref(out);
	return rc;
}

static int templates_ls(struct cli *cli, struct args *a)
{
	int rc = cli_need(a, 1, 1);
	if (rc)
		return rc;
	char path[300] = "/v1/templates";
	if (api_query(path, sizeof path, "workspace", args_get(a, "workspace")) < 0)
		return cli_usage(a->cmd, "--workspace: too long");
	json_t *out = NULL;
	struct err e = {0};
	if (api_json(cli, "GET", path, NULL, &out, &e) < 0)
		return cli_fail(&e);
	if (cli->json) {
		out_json(out);
		json_decref(out);
		return 0;
	}
	static const char *const head[] = {"NAME", "BASE", "STATE", "SIZE_MB", "BUILD_S", "OWNER"};
	struct table *t = table_new(6, head);
	size_t i;
	json_t *tp;
	json_array_foreach(json_object_get(out, "templates"), i, tp)
	{
		char *size = out_scalar(json_object_get(tp, "size_mb"));
		char *secs = out_scalar(json_object_get(tp, "build_s"));
		const char *ws = json_string_value(json_object_get(tp, "workspace"));
		const char *cells[] = {templates_name(tp),
				       json_string_value(json_object_get(tp, "base")),
				       json_string_value(json_object_get(tp, "state")),
				       size,
				       secs,
				       ws					      ? ws
				       : json_is_true(json_object_get(tp, "builtin")) ? "built-in"
										      : "global"};
		table_add(t, cells);
		free(size);
		free(secs);
	}
	table_print(t);
	json_decref(out);
	return 0;
}

static int templates_get(struct cli *cli, struct args *a)
{
	int rc = cli_need(a, 2, 2);
	if (rc)
		return rc;
	json_t *out = NULL;
	struct err e = {0};
	char path[300];
	snprintf(path, sizeof path, "/v1/templates/%s", a->pos[1]);
	if (args_has(a, "wait") ? templates_wait(cli, a->pos[1], args_get(a, "timeout"), &out, &e)
				: api_json(cli, "GET", path, NULL, &out, &e))
		rc = cli_fail(&e);
	if (out && cli->json)
		out_json(out);
	else if (out)
		out_kv(out);
	json_decref(out);
	return rc;
}

static int templates_log(struct cli *cli, struct args *a)
{
	int rc = cli_need(a, 2, 2);
	if (rc)
		return rc;
	struct err e = {0};
	long long offset = 0;
	char state[16];
	if (args_has(a, "follow") ? templates_follow(cli, a->pos[1], &e)
				  : templates_log_once(cli, a->pos[1], &offset, state, &e))
		return cli_fail(&e);
	return 0;
}

static int templates_rm(struct cli *cli, struct args *a)
{
	int rc = cli_need(a, 2, -1);
	if (rc)
		return rc;
	for (int i = 1; i < a->npos; i++) {
		char path[300];
		snprintf(path, sizeof path, "/v1/templates/%s", a->pos[i]);
		json_t *out = NULL;
		struct err e = {0};
		if (api_json(cli, "DELETE", path, NULL, &out, &e) < 0) {
			rc = cli_fail(&e);
			continue;
		}
		if (cli->json)
			out_json(out);
		else
			printf("%s deleted\n", a->pos[i]);
		json_decref(out);
	}
	return rc;
}

int cmd_template(struct cli *cli, struct args *a)
{
	if (a->npos < 1)
		return cli_usage(a->cmd, "missing what to do: create, ls, get, log or rm");
	const char *what = a->pos[0];
	if (strcmp(what, "create") == 0)
		return templates_create(cli, a);
	if (strcmp(what, "ls") == 0 || strcmp(what, "list") == 0)
		return templates_ls(cli, a);
	if (strcmp(what, "get") == 0)
		return templates_get(cli, a);
	if (strcmp(what, "log") == 0)
		return templates_log(cli, a);
	if (strcmp(what, "rm") == 0 || strcmp(what, "delete") == 0)
		return templates_rm(cli, a);
	return cli_usage(a->cmd, "unknown template command '%s' (create, ls, get, log, rm)", what);
}
