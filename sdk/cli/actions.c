/*
 * actions: every envd action (envd/README.md) as a command, generated from
 * the one action table, spec/actions.json: its positional parameters and
 * their types, its options, its help, and how a person reads its answer.
 * Any parameter can also be given as --NAME VALUE, and any at all as
 * --param NAME=VALUE.
 */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "actions.h"

/* The table: generated from spec/actions.json by spec/gen.py (spec/README.md). */
static const struct action_spec specs[] = {
#include "cli-actions.inc"
};

#define NSPECS (sizeof specs / sizeof specs[0])

/* The parameters of s, parsed from its spec string once. */
static const struct pspec *action_params(const struct action_spec *s)
{
	static struct pspec parsed[NSPECS][ACTION_MAX_PARAMS + 1];
	static bool done[NSPECS];
	size_t i = (size_t)(s - specs);
	if (done[i])
		return parsed[i];
	const char *w = s->params;
	for (int n = 0; *w && n < ACTION_MAX_PARAMS; n++) {
		struct pspec *p = &parsed[i][n];
		size_t len = strcspn(w, " ");
		char word[64];
		snprintf(word, sizeof word, "%.*s", (int)len, w);
		size_t wl = strlen(word);
		p->flags = word[0] == '-' ? 0 : F_POS | F_REQ;
		p->type = T_STR;
		if (wl > 1 && word[wl - 1] == '?') {
			word[--wl] = 0;
			p->flags &= ~(unsigned)F_REQ;
		}
		if (wl > 3 && strcmp(word + wl - 3, "...") == 0) {
			word[wl - 3] = 0;
			p->type = T_STRS;
		}
		char *colon = strchr(word, ':');
		if (colon) {
			static const char types[] = "inj";
			static const enum ptype as[] = {T_INT, T_NUM, T_ANY};
			const char *t = strchr(types, colon[1]);
			p->type = t && *t ? as[t - types] : T_WIN;
			*colon = 0;
		}
		snprintf(p->name, sizeof p->name, "%s", word + (word[0] == '-'));
		w += len;
		while (*w == ' ')
			w++;
	}
	done[i] = true;
	return parsed[i];
}

const struct action_spec *action_spec_find(const char *name)
{
	for (size_t i = 0; i < NSPECS; i++)
		if (strcmp(specs[i].name, name) == 0)
			return &specs[i];
	return NULL;
}

/* ---- help, from the table ---- */

static void action_param_name(char *buf, size_t len, const char *name)
{
	size_t i = 0;
	for (; name[i] && i + 1 < len; i++)
		buf[i] = name[i] == '_' ? '-' : name[i];
	buf[i] = 0;
}

void action_usage_line(const struct action_spec *s, FILE *f)
{
	char line[1024];
	size_t n = (size_t)snprintf(line, sizeof line, "usage: cubicle %s ID", s->name);
	bool open = false;
	for (const struct pspec *p = action_params(s); p->name[0] && n < sizeof line; p++) {
		if (!(p->flags & F_POS))
			continue;
		char up[32];
		const char *name = strcmp(p->name, "id") == 0 ? "window_id" : p->name;
		size_t i = 0;
		for (; name[i] && i + 1 < sizeof up; i++)
			up[i] = (char)(name[i] >= 'a' && name[i] <= 'z' ? name[i] - 32 : name[i]);
		up[i] = 0;
		/* The optional positionals form one group: [X Y]. */
		bool req = p->flags & F_REQ;
		n += (size_t)snprintf(line + n, sizeof line - n, " %s%s%s",
				      !req && !open ? "[" : "", up, p->type == T_STRS ? "..." : "");
		open = open || !req;
	}
	if (open && n + 1 < sizeof line)
		line[n++] = ']', line[n] = 0;
	for (const struct pspec *p = action_params(s); p->name[0] && n < sizeof line; p++) {
		char opt[40];
		action_param_name(opt, sizeof opt, p->name);
		if (!(p->flags & F_POS))
			n += (size_t)snprintf(line + n, sizeof line - n, " [--%s %s]", opt,
					      p->type == T_INT || p->type == T_NUM ? "N"
					      : p->type == T_ANY		   ? "JSON"
										   : "S");
	}
	if (s->show == S_IMAGE && n < sizeof line)
		snprintf(line + n, sizeof line - n, " [--region X,Y,W,H] [--scale F] -o FILE");
	out_wrap(f, line, 8);
}

void action_help(const struct action_spec *s)
{
	action_usage_line(s, stdout);
	putchar('\n');
	out_wrap(stdout, s->help, 0);
	putchar('\n');
	out_wrap(stdout,
		 "Any parameter of the action (envd/README.md) can be given as --NAME VALUE or "
		 "--param NAME=VALUE; '--' ends the options.",
		 0);
}

void action_list(void)
{
	size_t col = 0;
	for (size_t i = 0; i < NSPECS; i++) {
		size_t n = strlen(specs[i].name) + 1;
		if (col + n > 78) {
			putchar('\n');
			col = 0;
		}
		printf("%s%s", col ? " " : "  ", specs[i].name);
		col += n + (col ? 0 : 1);
	}
	putchar('\n');
}

/* ---- the command line → the action's JSON parameters ---- */

/* Converts one value of parameter p; EXIT_USAGE (said) or 0. */
static int action_value(const char *cmd, const struct pspec *p, const char *v, json_t **out)
{
	long long n;
	char *end;
	switch (p->type) {
	case T_INT:
		if (args_int(v, -(1LL << 53), 1LL << 53, &n) < 0)
			return cli_usage(cmd, "%s: expected an integer, got '%s'", p->name, v);
		*out = json_integer(n);
		return 0;
	case T_NUM: {
		errno = 0;
		double d = strtod(v, &end);
		if (!*v || *end || errno || !isfinite(d))
			return cli_usage(cmd, "%s: expected a number, got '%s'", p->name, v);
		*out = json_real(d);
		return 0;
	}
	case T_WIN:
		*out = args_int(v, 0, 1LL << 53, &n) == 0 ? json_integer(n) : json_string(v);
		return 0;
	case T_ANY:
		*out = args_value(v);
		return 0;
	case T_STR:
	case T_STRS:
		break;
	}
	*out = json_string(v);
	return *out ? 0 : cli_usage(cmd, "%s: not valid UTF-8", p->name);
}

/* Sets (or appends, for T_STRS) parameter p = v in body. */
static int action_set(const char *cmd, const struct pspec *p, const char *v, json_t *body)
{
	json_t *j;
	int rc = action_value(cmd, p, v, &j);
	if (rc)
		return rc;
	if (p->type != T_STRS)
		return json_object_set_new(body, p->name, j), 0;
	json_t *arr = json_object_get(body, p->name);
	if (!arr)
		json_object_set_new(body, p->name, arr = json_array());
	json_array_append_new(arr, j);
	return 0;
}

static int action_param_option(const char *cmd, const char *kv, json_t *body)
{
	const char *eq = strchr(kv, '=');
	if (!eq || eq == kv)
		return cli_usage(cmd, "--param: expected NAME=VALUE, got '%s'", kv);
	char name[128];
	snprintf(name, sizeof name, "%.*s", (int)(eq - kv), kv);
	json_object_set_new(body, name, args_value(eq + 1));
	return 0;
}

/* The positionals after ID, then the options, into body. */
static int action_body(const struct action_spec *s, const struct args *a, json_t *body)
{
	int next = 1, rc = 0;
	for (const struct pspec *p = action_params(s); p->name[0] && rc == 0; p++) {
		if (!(p->flags & F_POS))
			continue;
		if (next >= a->npos && (p->flags & F_REQ))
			return cli_usage(s->name, "missing %s", p->name);
		while (next < a->npos && rc == 0) {
			rc = action_set(s->name, p, a->pos[next++], body);
			if (p->type != T_STRS)
				break;
		}
	}
	if (rc == 0 && next < a->npos)
		return cli_usage(s->name, "too many arguments (unexpected '%s')", a->pos[next]);
	for (int i = 0; i < a->nopt && rc == 0; i++) {
		const struct pspec *p = action_params(s);
		while (p->name[0] && !args_same_name(p->name, a->opt[i].name))
			p++;
		if (p->name[0])
			rc = action_set(s->name, p, a->opt[i].value, body);
		else if (strcmp(a->opt[i].name, "param") == 0)
			rc = action_param_option(s->name, a->opt[i].value, body);
	}
	return rc;
}

/* Posts the action and shows its answer; the command's exit status. */
static int action_run(struct cli *cli, const struct action_spec *s, const char *id,
		      const char *name, const json_t *body, const char *output)
{
	char path[400];
	snprintf(path, sizeof path, "/v1/computers/%s/actions/%s", id, name);
	struct httpc_reply r;
	struct err e = {0};
	if (api_call(cli, "POST", path, body, &r, &e) < 0)
		return cli_fail(&e);
	int rc = answer_show(cli, s, &r, output);
	httpc_reply_free(&r);
	return rc;
}

/* --region X,Y,W,H and --scale F into the screenshot's parameters. */
static int action_shot_options(struct cli *cli, const struct args *a, const char *id, json_t *body)
{
	const char *region = args_get(a, "region"), *scale = args_get(a, "scale");
	int x, y, w, h;
	char end;
	if (region) {
		if (sscanf(region, "%d,%d,%d,%d%c", &x, &y, &w, &h, &end) != 4)
			return cli_usage(a->cmd, "--region: expected X,Y,WIDTH,HEIGHT, got '%s'",
					 region);
		json_object_set_new(body, "x", json_integer(x));
		json_object_set_new(body, "y", json_integer(y));
		json_object_set_new(body, "width", json_integer(w));
		json_object_set_new(body, "height", json_integer(h));
	}
	if (!scale)
		return 0;
	char *e;
	double f = strtod(scale, &e);
	if (!*scale || *e || !(f > 0 && f <= 1))
		return cli_usage(a->cmd, "--scale: expected a factor in (0, 1], got '%s'", scale);
	if (!region) {
		char path[300];
		snprintf(path, sizeof path, "/v1/computers/%s/actions/get_screen_size", id);
		json_t *size;
		struct err err = {0};
		if (api_json(cli, "POST", path, NULL, &size, &err) < 0)
			return cli_fail(&err);
		w = (int)json_integer_value(json_object_get(size, "width"));
		h = (int)json_integer_value(json_object_get(size, "height"));
		json_decref(size);
	}
	json_object_set_new(body, "max_width", json_integer(lround(w * f) > 0 ? lround(w * f) : 1));
	json_object_set_new(body, "max_height",
			    json_integer(lround(h * f) > 0 ? lround(h * f) : 1));
	return 0;
}

/* The options of an action command: its parameters, and the common ones. */
static struct opt *action_opts(const struct action_spec *s)
{
	struct opt *o = calloc(ACTION_MAX_PARAMS + 5, sizeof *o);
	int n = 0;
	for (const struct pspec *p = action_params(s); o && p->name[0]; p++)
		o[n++] = (struct opt){p->name, true, 0};
	if (o) {
		o[n++] = (struct opt){"param", true, 'p'};
		if (s->show == S_IMAGE) {
			o[n++] = (struct opt){"output", true, 'o'};
			o[n++] = (struct opt){"region", true, 0};
			o[n++] = (struct opt){"scale", true, 0};
		}
	}
	return o;
}

int action_command(struct cli *cli, const struct action_spec *s, int argc, char **argv)
{
	struct opt *opts = action_opts(s);
	struct args a;
	json_t *body = json_object();
	int rc = args_parse(cli, s->name, argc, argv, opts, &a);
	if (rc == 0 && a.help) {
		action_help(s);
		goto out;
	}
	if (rc == 0 && a.npos < 1)
		rc = cli_usage(s->name, "missing the computer's ID");
	if (rc == 0)
		rc = action_body(s, &a, body);
	const char *output = args_get(&a, "output");
	if (rc == 0 && s->show == S_IMAGE && !output && isatty(STDOUT_FILENO))
		rc = cli_usage(s->name, "say where the image goes: -o FILE (or -o - for stdout)");
	if (rc == 0)
		rc = api_need_key(cli);
	if (rc == 0 && s->show == S_IMAGE)
		rc = action_shot_options(cli, &a, a.pos[0], body);
	if (rc == 0)
		rc = action_run(cli, s, a.pos[0], s->name, body, output);
out:
	json_decref(body);
	args_free(&a);
	free(opts);
	return rc;
}

int cmd_action_generic(struct cli *cli, struct args *a)
{
	int rc = cli_need(a, 2, 3);
	if (rc)
		return rc;
	json_t *body = json_object();
	if (a->npos == 3) {
		json_error_t je;
		json_decref(body);
		body = json_loads(a->pos[2], 0, &je);
		if (!json_is_object(body)) {
			json_decref(body);
			return cli_usage(a->cmd, "the parameters must be a JSON object: %s",
					 body ? "not an object" : je.text);
		}
	}
	for (int i = 0; i < a->nopt && rc == 0; i++)
		if (strcmp(a->opt[i].name, "param") == 0)
			rc = action_param_option(a->cmd, a->opt[i].value, body);
	const char *output = args_get(a, "output");
	if (rc == 0)
		rc = action_run(cli, action_spec_find(a->pos[1]), a->pos[0], a->pos[1], body,
				output);
	json_decref(body);
	return rc;
}
