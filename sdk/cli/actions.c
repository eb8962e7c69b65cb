/*
 * actions: every envd action (envd/README.md) as a command, generated from
 * one table: its positional parameters and their types, its options, its
 * help, and how a person reads its answer. Any parameter can also be given
 * as --NAME VALUE, and any at all as --param NAME=VALUE.
 */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base64.h"
#include "cli.h"
#include "params.h"

enum ptype {
	T_INT,	/* a JSON integer */
	T_NUM,	/* a JSON number */
	T_STR,	/* a JSON string */
	T_ANY,	/* JSON when it parses as JSON, else a string */
	T_WIN,	/* a window id: an integer, or a "0x..." string */
	T_STRS, /* the remaining arguments, as an array of strings */
};

enum { F_POS = 1, F_REQ = 2 };

struct pspec {
	const char *name;
	enum ptype type;
	unsigned flags; /* F_POS: positional, in table order; F_REQ: required */
};

/* How a person reads the answer (--json always prints the API's JSON). */
enum show {
	S_QUIET,   /* nothing: the exit status says it worked */
	S_FIELDS,  /* `fields`' values on one line: "1280 800" */
	S_KV,	   /* every field, aligned */
	S_TEXT,	   /* field `fields` as raw text */
	S_WINDOWS, /* a table of windows */
	S_TREE,	   /* the accessibility tree, indented */
	S_FILE,	   /* read_file's content, decoded */
	S_PROC,	   /* bash/python: stdout, stderr, and the exit status */
	S_IMAGE,   /* screenshot: bytes to -o FILE */
};

struct action_spec {
	const char *name;
	const char *help;
	struct pspec p[9];
	enum show show;
	const char *fields;
};

#define POS(n, t)                                                                                  \
	{                                                                                          \
		n, t, F_POS                                                                        \
	}
#define REQ(n, t)                                                                                  \
	{                                                                                          \
		n, t, F_POS | F_REQ                                                                \
	}
#define OPT(n, t)                                                                                  \
	{                                                                                          \
		n, t, 0                                                                            \
	}
#define XY     POS("x", T_INT), POS("y", T_INT)
#define AT_XY  OPT("x", T_INT), OPT("y", T_INT)
#define BUTTON OPT("button", T_STR)
#define WIN    REQ("id", T_WIN)
#define SHOT                                                                                       \
	OPT("format", T_STR), OPT("quality", T_INT), OPT("x", T_INT), OPT("y", T_INT),             \
	    OPT("width", T_INT), OPT("height", T_INT), OPT("max_width", T_INT),                    \
	    OPT("max_height", T_INT)
#define PROC OPT("timeout_s", T_INT), OPT("cwd", T_STR), OPT("env", T_ANY), OPT("stdin", T_STR)

static const struct action_spec specs[] = {
    /* mouse */
    {"click",
     "Clicks at X Y, or where the cursor is (button left|middle|right, 1..3 clicks).",
     {XY, BUTTON, OPT("clicks", T_INT)},
     S_QUIET,
     NULL},
    {"left_click", "Left-clicks at X Y, or where the cursor is.", {XY}, S_QUIET, NULL},
    {"right_click", "Right-clicks at X Y, or where the cursor is.", {XY}, S_QUIET, NULL},
    {"middle_click", "Middle-clicks at X Y, or where the cursor is.", {XY}, S_QUIET, NULL},
    {"double_click", "Double-clicks at X Y, or where the cursor is.", {XY, BUTTON}, S_QUIET, NULL},
    {"triple_click", "Triple-clicks at X Y, or where the cursor is.", {XY, BUTTON}, S_QUIET, NULL},
    {"move_cursor",
     "Moves the mouse pointer to X Y.",
     {REQ("x", T_INT), REQ("y", T_INT)},
     S_QUIET,
     NULL},
    {"mouse_down", "Presses a mouse button (at X Y).", {XY, BUTTON}, S_QUIET, NULL},
    {"mouse_up", "Releases a mouse button (at X Y).", {XY, BUTTON}, S_QUIET, NULL},
    {"drag",
     "Drags from one point to another; --path '[[x,y],...]' adds waypoints, --duration-ms "
     "slows it down.",
     {REQ("from_x", T_INT), REQ("from_y", T_INT), REQ("to_x", T_INT), REQ("to_y", T_INT),
      OPT("path", T_ANY), OPT("duration_ms", T_INT), BUTTON},
     S_QUIET,
     NULL},
    {"scroll",
     "Scrolls (up|down|left|right) by CLICKS wheel clicks, at --x --y if given.",
     {POS("direction", T_STR), POS("clicks", T_INT), AT_XY},
     S_QUIET,
     NULL},
    {"scroll_up",
     "Scrolls up by CLICKS wheel clicks.",
     {POS("clicks", T_INT), AT_XY},
     S_QUIET,
     NULL},
    {"scroll_down",
     "Scrolls down by CLICKS wheel clicks.",
     {POS("clicks", T_INT), AT_XY},
     S_QUIET,
     NULL},
    {"scroll_left",
     "Scrolls left by CLICKS wheel clicks.",
     {POS("clicks", T_INT), AT_XY},
     S_QUIET,
     NULL},
    {"scroll_right",
     "Scrolls right by CLICKS wheel clicks.",
     {POS("clicks", T_INT), AT_XY},
     S_QUIET,
     NULL},
    /* keyboard */
    {"type",
     "Types TEXT (any Unicode; \\n is Return).",
     {REQ("text", T_STR), OPT("delay_ms", T_INT)},
     S_QUIET,
     NULL},
    {"key",
     "Presses a key or a combination: Return, ctrl+l, ctrl+shift+t.",
     {REQ("key", T_STR)},
     S_QUIET,
     NULL},
    {"hotkey",
     "Presses KEYS in order and releases them in reverse: hotkey ID ctrl c.",
     {REQ("keys", T_STRS)},
     S_QUIET,
     NULL},
    {"key_down", "Presses KEY and holds it.", {REQ("key", T_STR)}, S_QUIET, NULL},
    {"key_up", "Releases KEY.", {REQ("key", T_STR)}, S_QUIET, NULL},
    /* screen */
    {"screenshot",
     "Writes a screenshot to -o FILE ('-' = stdout). --region X,Y,W,H captures part of the "
     "screen; --scale F (0..1) or --max-width/--max-height downscale; --format jpeg "
     "--quality Q.",
     {SHOT},
     S_IMAGE,
     NULL},
    {"screenshot_base64",
     "Prints a screenshot as base64 (same options as screenshot).",
     {SHOT},
     S_TEXT,
     "image"},
    {"get_screen_size", "Prints the screen's width and height.", {{0}}, S_FIELDS, "width height"},
    {"get_cursor_position", "Prints the pointer's X and Y.", {{0}}, S_FIELDS, "x y"},
    /* windows and apps */
    {"windows", "Lists the windows.", {{0}}, S_WINDOWS, NULL},
    {"launch",
     "Starts APP (a .desktop id like firefox-esr, or a command) with ARGS; --wait-s waits "
     "for its window.",
     {REQ("app", T_STR), POS("args", T_STRS), OPT("wait_s", T_INT)},
     S_KV,
     NULL},
    {"focus_window", "Focuses window WINDOW_ID.", {WIN}, S_QUIET, NULL},
    {"maximize_window", "Maximizes window WINDOW_ID.", {WIN}, S_QUIET, NULL},
    {"minimize_window", "Minimizes window WINDOW_ID.", {WIN}, S_QUIET, NULL},
    {"close_window", "Asks window WINDOW_ID to close.", {WIN}, S_QUIET, NULL},
    {"get_window_size", "Prints a window's width and height.", {WIN}, S_FIELDS, "width height"},
    {"set_window_size",
     "Resizes a window.",
     {WIN, REQ("width", T_INT), REQ("height", T_INT)},
     S_QUIET,
     NULL},
    {"get_window_position", "Prints a window's X and Y.", {WIN}, S_FIELDS, "x y"},
    {"set_window_position",
     "Moves a window.",
     {WIN, REQ("x", T_INT), REQ("y", T_INT)},
     S_QUIET,
     NULL},
    /* desktop */
    {"get_desktop_environment",
     "Prints the desktop environment and window manager.",
     {{0}},
     S_KV,
     NULL},
    {"set_wallpaper",
     "Sets the wallpaper to a PNG or JPEG inside the computer.",
     {REQ("path", T_STR)},
     S_QUIET,
     NULL},
    {"get_accessibility_tree",
     "Prints the accessibility tree (roles, names, bounds).",
     {OPT("max_depth", T_INT), OPT("app", T_STR), OPT("max_nodes", T_INT)},
     S_TREE,
     NULL},
    {"get_clipboard", "Prints the clipboard's text.", {OPT("timeout_ms", T_INT)}, S_TEXT, "text"},
    {"set_clipboard", "Puts TEXT on the clipboard.", {REQ("text", T_STR)}, S_QUIET, NULL},
    /* shell and files */
    {"bash",
     "Runs COMMAND with bash; prints its stdout and stderr and exits with its status (124 "
     "when it ran past --timeout-s).",
     {REQ("command", T_STR), PROC},
     S_PROC,
     NULL},
    {"python", "Runs CODE with python3, like bash.", {REQ("code", T_STR), PROC}, S_PROC, NULL},
    {"write_file",
     "Writes CONTENT to PATH (small files; cp streams any size). --content-base64 for bytes.",
     {REQ("path", T_STR), POS("content", T_STR), OPT("content_base64", T_STR), OPT("mode", T_ANY)},
     S_QUIET,
     NULL},
    {"read_file",
     "Prints the file at PATH (small files; cp streams any size).",
     {REQ("path", T_STR), OPT("encoding", T_STR)},
     S_FILE,
     NULL},
};

#define NSPECS (sizeof specs / sizeof specs[0])

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
	for (const struct pspec *p = s->p; p->name && n < sizeof line; p++) {
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
	for (const struct pspec *p = s->p; p->name && n < sizeof line; p++) {
		char opt[40];
		action_param_name(opt, sizeof opt, p->name);
		if (!(p->flags & F_POS))
			n += (size_t)snprintf(line + n, sizeof line - n, " [--%s %s]", opt,
					      p->type == T_INT	 ? "N"
					      : p->type == T_ANY ? "JSON"
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
	for (const struct pspec *p = s->p; p->name && rc == 0; p++) {
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
		const struct pspec *p = s->p;
		while (p->name && !args_same_name(p->name, a->opt[i].name))
			p++;
		if (p->name)
			rc = action_set(s->name, p, a->opt[i].value, body);
		else if (strcmp(a->opt[i].name, "param") == 0)
			rc = action_param_option(s->name, a->opt[i].value, body);
	}
	return rc;
}

/* ---- the answer, for a person ---- */

static void action_show_fields(const json_t *r, const char *fields)
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

static void action_show_windows(const json_t *r)
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
static const char *action_str(const json_t *j, const char *name)
{
	const char *s = json_string_value(json_object_get(j, name));
	return s ? s : "";
}

static void action_show_node(const json_t *n, int depth)
{
	const json_t *b = json_object_get(n, "bounds");
	char bounds[96] = "";
	if (b)
		snprintf(bounds, sizeof bounds, " at %lld,%lld %lldx%lld",
			 (long long)json_integer_value(json_object_get(b, "x")),
			 (long long)json_integer_value(json_object_get(b, "y")),
			 (long long)json_integer_value(json_object_get(b, "width")),
			 (long long)json_integer_value(json_object_get(b, "height")));
	printf("%*s%s \"%s\"%s\n", depth * 2, "", action_str(n, "role"), action_str(n, "name"),
	       bounds);
	size_t i;
	json_t *c;
	json_array_foreach(json_object_get(n, "children"), i, c)
	{
		action_show_node(c, depth + 1);
	}
}

static int action_show_file(const json_t *r)
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
static int action_show_proc(struct cli *cli, const json_t *r, int status)
{
	if (cli->json) {
		out_json(r);
	} else {
		fputs(action_str(r, "stdout"), stdout);
		fflush(stdout);
		fputs(action_str(r, "stderr"), stderr);
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
static int action_show_image(struct cli *cli, const struct httpc_reply *r, const char *path)
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

static int action_show(struct cli *cli, const struct action_spec *s, const json_t *j)
{
	if (cli->json) {
		out_json(j);
		return 0;
	}
	switch (s ? s->show : S_KV) {
	case S_QUIET:
		break;
	case S_FIELDS:
		action_show_fields(j, s->fields);
		break;
	case S_TEXT:
		fputs(action_str(j, s->fields), stdout);
		if (strcmp(s->fields, "image") == 0)
			putchar('\n');
		break;
	case S_WINDOWS:
		action_show_windows(j);
		break;
	case S_TREE: {
		size_t i;
		json_t *n;
		json_array_foreach(json_object_get(j, "applications"), i, n)
		{
			action_show_node(n, 0);
		}
		break;
	}
	case S_FILE:
		return action_show_file(j);
	default:
		out_kv(j);
	}
	return 0;
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
	int rc;
	json_t *j = api_reply_json(&r);
	if (s && s->show == S_PROC && (r.status == 200 || r.status == 504) && j)
		rc = action_show_proc(cli, j, r.status);
	else if (r.status < 200 || r.status >= 300)
		rc = err_from_json(&e, j, r.status) < 0 ? cli_fail(&e) : EXIT_API;
	else if (strncmp(r.content_type, "image/", 6) == 0)
		rc = action_show_image(cli, &r, output);
	else
		rc = action_show(cli, s, j);
	json_decref(j);
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
	struct opt *o = calloc(16, sizeof *o);
	int n = 0;
	for (const struct pspec *p = s->p; o && p->name; p++)
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
