/*
 * answers: an action's answer for a person — values on a line, tables,
 * the accessibility tree, decoded files, bash's streams and exit status,
 * screenshots to a file. --json prints the API's JSON instead.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "actions.h"
#include "base64.h"
#include "params.h"

static void answer_fields(const json_t *r, const char *fields)
{
	char name[64];
	const char *f = fields;
	while (*f) {
		size_t n = strcspn(f, " ");
		snprintf(name, sizeof name, "%.*s", (int)n, f);
		char *v = out_scalar(json_object_get(r, name));
		printf("%s%s", f == fields ? "" : " ", v ? v : "");
		free(v);
		f += n + (f[n] == ' ');
	}
	putchar('\n');
}

static void answer_windows(const json_t *r)
{
	static const char *const head[] = {"ID",    "X",     "Y",   "WIDTH", "HEIGHT",
					   "STATE", "CLASS", "PID", "TITLE"};
	static const char *const fields[] = {"id", "x",		"y",   "width", "height",
					     NULL, "app_class", "pid", "title"};
	struct table *t = table_new(9, head);
	size_t i;
	json_t *w;
	json_array_foreach(json_object_get(r, "windows"), i, w)
	{
		char *cells[9];
		char state[40];
		snprintf(state, sizeof state, "%s%s%s",
			 json_is_true(json_object_get(w, "focused")) ? "focused " : "",
			 json_is_true(json_object_get(w, "minimized")) ? "minimized " : "",
			 json_is_true(json_object_get(w, "maximized")) ? "maximized " : "");
		for (int k = 0; k < 9; k++)
			cells[k] = fields[k] ? out_scalar(json_object_get(w, fields[k]))
					     : strdup(state[0] ? state : "-");
		table_add(t, (const char *const *)cells);
		for (int k = 0; k < 9; k++)
			free(cells[k]);
	}
	table_print(t);
}

/* A string field, "" when absent. */
static const char *answer_str(const json_t *j, const char *name)
{
	const char *s = json_string_value(json_object_get(j, name));
	return s ? s : "";
}

static void answer_node(const json_t *n, int depth)
{
	const json_t *b = json_object_get(n, "bounds");
	char bounds[96] = "";
	if (b)
		snprintf(bounds, sizeof bounds, " at %lld,%lld %lldx%lld",
			 (long long)json_integer_value(json_object_get(b, "x")),
			 (long long)json_integer_value(json_object_get(b, "y")),
			 (long long)json_integer_value(json_object_get(b, "width")),
			 (long long)json_integer_value(json_object_get(b, "height")));
	printf("%*s%s \"%s\"%s\n", depth * 2, "", answer_str(n, "role"), answer_str(n, "name"),
	       bounds);
	size_t i;
	json_t *c;
	json_array_foreach(json_object_get(n, "children"), i, c)
	{
		answer_node(c, depth + 1);
	}
}

static int answer_file(const json_t *r)
{
	const char *content = json_string_value(json_object_get(r, "content"));
	const char *enc = json_string_value(json_object_get(r, "encoding"));
	if (!content)
		return 0;
	if (enc && strcmp(enc, "base64") == 0) {
		size_t n;
		unsigned char *bytes = base64_decode(content, strlen(content), &n);
		if (!bytes) {
			fprintf(stderr, "cubicle: read_file answered bad base64\n");
			return EXIT_API;
		}
		fwrite(bytes, 1, n, stdout);
		free(bytes);
		return 0;
	}
	fputs(content, stdout);
	return 0;
}

/* bash/python: the command's output and its exit status. */
static int answer_proc(struct cli *cli, const json_t *r, int status)
{
	if (cli->json) {
		out_json(r);
	} else {
		/* With their length: the output may hold NUL characters. */
		const json_t *out = json_object_get(r, "stdout"),
			     *err = json_object_get(r, "stderr");
		fwrite(json_string_value(out), 1, json_string_length(out), stdout);
		fflush(stdout);
		fwrite(json_string_value(err), 1, json_string_length(err), stderr);
	}
	if (status == 504) {
		const char *why =
		    json_string_value(json_object_get(json_object_get(r, "error"), "message"));
		fprintf(stderr, "cubicle: %s\n", why ? why : "timed out");
		return EXIT_TIMEDOUT;
	}
	long long code = EXIT_API;
	struct err e;
	param_int(r, "exit_code", 0, 255, &code, &e);
	return (int)code;
}

/* Writes a screenshot's bytes where -o says. */
static int answer_image(struct cli *cli, const struct httpc_reply *r, const char *path)
{
	bool to_stdout = !path || strcmp(path, "-") == 0;
	if (!path && isatty(STDOUT_FILENO)) {
		fprintf(stderr,
			"cubicle: the answer is an image: say where it goes with -o FILE\n");
		return EXIT_USAGE;
	}
	FILE *f = to_stdout ? stdout : fopen(path, "wb");
	if (!f) {
		fprintf(stderr, "cubicle: cannot write %s: %s\n", path, strerror(errno));
		return EXIT_API;
	}
	size_t n = fwrite(r->body, 1, r->body_len, f);
	int bad = n != r->body_len || (to_stdout ? fflush(f) : fclose(f)) != 0;
	if (bad) {
		fprintf(stderr, "cubicle: cannot write %s: %s\n", to_stdout ? "stdout" : path,
			strerror(errno));
		return EXIT_API;
	}
	if (to_stdout)
		return 0;
	if (cli->json) {
		json_t *j = json_pack("{s:s, s:I, s:i, s:i, s:f}", "path", path, "bytes",
				      (json_int_t)r->body_len, "width", atoi(r->x_width), "height",
				      atoi(r->x_height), "scale", atof(r->x_scale));
		out_json(j);
		json_decref(j);
	} else
		printf("%s %sx%s\n", path, r->x_width, r->x_height);
	return 0;
}

static int answer_json(struct cli *cli, const struct action_spec *s, const json_t *j)
{
	if (cli->json) {
		out_json(j);
		return 0;
	}
	switch (s ? s->show : S_KV) {
	case S_QUIET:
		break;
	case S_FIELDS:
		answer_fields(j, s->fields);
		break;
	case S_TEXT:
		fputs(answer_str(j, s->fields), stdout);
		if (strcmp(s->fields, "image") == 0)
			putchar('\n');
		break;
	case S_WINDOWS:
		answer_windows(j);
		break;
	case S_TREE: {
		size_t i;
		json_t *n;
		json_array_foreach(json_object_get(j, "applications"), i, n)
		{
			answer_node(n, 0);
		}
		break;
	}
	case S_FILE:
		return answer_file(j);
	default:
		out_kv(j);
	}
	return 0;
}

/* Posts the action and shows its answer; the command's exit status. */

int answer_show(struct cli *cli, const struct action_spec *s, const struct httpc_reply *r,
		const char *output)
{
	struct err e = {0};
	int rc;
	json_t *j = api_reply_json(r);
	if (s && s->show == S_PROC && (r->status == 200 || r->status == 504) && j)
		rc = answer_proc(cli, j, r->status);
	else if (r->status < 200 || r->status >= 300)
		rc = err_from_json(&e, j, r->status) < 0 ? cli_fail(&e) : EXIT_API;
	else if (strncmp(r->content_type, "image/", 6) == 0)
		rc = answer_image(cli, r, output);
	else if (!j)
		rc = cli_fail(
		    &(struct err){.code = ERR_INTERNAL,
				  .message = "cubicled answered something that is not JSON"});
	else
		rc = answer_json(cli, s, j);
	json_decref(j);
	return rc;
}
