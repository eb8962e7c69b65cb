/*
 * args: one command's command line. Options may come before, between or
 * after the positional arguments (`cubicle click ID 10 20 --button right`);
 * "--" ends them, so a positional may start with '-'.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

bool args_same_name(const char *a, const char *b)
{
	for (; *a && *b; a++, b++) {
		char x = *a == '-' ? '_' : *a, y = *b == '-' ? '_' : *b;
		if (x != y)
			return false;
	}
	return *a == *b;
}

static const struct opt args_global[] = {
    {"json", false, 0}, {"url", true, 0}, {"api-key", true, 0}, {NULL, false, 0}};

static const struct opt *args_find(const struct opt *opts, const char *name, size_t len,
				   char letter)
{
	char buf[64];
	snprintf(buf, sizeof buf, "%.*s", (int)len, name ? name : "");
	for (const struct opt *o = opts; o && o->name; o++)
		if (letter ? o->letter == letter : args_same_name(o->name, buf))
			return o;
	return NULL;
}

/* A global option found after the command applies to the whole run. */
static void args_global_set(struct cli *cli, const char *name, const char *value)
{
	if (strcmp(name, "json") == 0)
		cli->json = true;
	else if (strcmp(name, "url") == 0)
		snprintf(cli->url, sizeof cli->url, "%s", value);
	else
		cli->api_key = value;
}

static int args_push_opt(struct args *a, const char *name, const char *value)
{
	void *n = realloc(a->opt, (size_t)(a->nopt + 1) * sizeof a->opt[0]);
	if (!n)
		return -1;
	a->opt = n;
	a->opt[a->nopt].name = name;
	a->opt[a->nopt].value = value;
	a->nopt++;
	return 0;
}

int args_parse(struct cli *cli, const char *cmd, int argc, char **argv, const struct opt *opts,
	       struct args *a)
{
	memset(a, 0, sizeof *a);
	a->cmd = cmd;
	a->pos = calloc((size_t)argc + 1, sizeof *a->pos);
	if (!a->pos)
		return cli_usage(cmd, "out of memory");
	bool dashdash = false;
	for (int i = 0; i < argc; i++) {
		char *s = argv[i];
		if (dashdash || s[0] != '-' || strcmp(s, "-") == 0) {
			a->pos[a->npos++] = s;
			continue;
		}
		if (strcmp(s, "--") == 0) {
			dashdash = true;
			continue;
		}
		if (strcmp(s, "-h") == 0 || strcmp(s, "--help") == 0) {
			a->help = true;
			continue;
		}
		const struct opt *o;
		const char *value = NULL;
		bool global = false;
		if (s[1] == '-') {
			const char *name = s + 2, *eq = strchr(name, '=');
			size_t len = eq ? (size_t)(eq - name) : strlen(name);
			o = args_find(opts, name, len, 0);
			if (!o && (o = args_find(args_global, name, len, 0)))
				global = true;
			if (eq)
				value = eq + 1;
			if (!o)
				return cli_usage(cmd, "unknown option '--%.*s'", (int)len, name);
		} else {
			o = s[2] == 0 ? args_find(opts, NULL, 0, s[1]) : NULL;
			if (!o)
				return cli_usage(cmd, "unknown option '%s'", s);
		}
		if (o->arg && !value) {
			if (i + 1 >= argc)
				return cli_usage(cmd, "option '%s' needs a value", s);
			value = argv[++i];
		} else if (!o->arg && value) {
			return cli_usage(cmd, "option '--%s' takes no value", o->name);
		}
		if (global)
			args_global_set(cli, o->name, value);
		else if (args_push_opt(a, o->name, value ? value : "") < 0)
			return cli_usage(cmd, "out of memory");
	}
	return 0;
}

void args_free(struct args *a)
{
	free(a->pos);
	free(a->opt);
	memset(a, 0, sizeof *a);
}

const char *args_get(const struct args *a, const char *name)
{
	const char *v = NULL;
	for (int i = 0; i < a->nopt; i++)
		if (args_same_name(a->opt[i].name, name))
			v = a->opt[i].value;
	return v;
}

bool args_has(const struct args *a, const char *name)
{
	return args_get(a, name) != NULL;
}

int args_int(const char *s, long long lo, long long hi, long long *out)
{
	char *end;
	errno = 0;
	long long v = strtoll(s, &end, 10);
	if (!*s || *end || errno || v < lo || v > hi)
		return -1;
	*out = v;
	return 0;
}

json_t *args_value(const char *s)
{
	json_t *j = json_loads(s, JSON_DECODE_ANY, NULL);
	return j ? j : json_string(s);
}
