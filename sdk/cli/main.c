/*
 * cubicle: the command line for cubicled's REST API (sdk/README.md).
 *
 *   cubicle [--url URL] [--api-key KEY] [--json] COMMAND [ARGS...]
 *
 * The lifecycle commands are in the table below; every envd action is a
 * command too, generated from actions.c's table.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"

struct command {
	const char *name;
	const char *synopsis; /* after "cubicle NAME " */
	const char *help;
	const struct opt *opts;
	int (*run)(struct cli *cli, struct args *a);
};

static const struct opt create_opts[] = {
    {"kind", true, 'k'},      {"size", true, 's'},	 {"isolation", true, 0},
    {"workspace", true, 'w'}, {"resolution", true, 'r'}, {"idle-timeout", true, 0},
    {"metadata", true, 'm'},  {"session", true, 0},	 {"external-workspace-id", true, 0},
    {"template", true, 'T'},  {"wait", false, 0},	 {"timeout", true, 't'},
    {NULL, false, 0}};
static const struct opt template_opts[] = {
    {"base", true, 'b'},  {"apt", true, 0},	  {"pip", true, 0},	    {"npm", true, 0},
    {"run", true, 0},	  {"file", true, 'f'},	  {"workspace", true, 'w'}, {"wait", false, 0},
    {"follow", false, 0}, {"timeout", true, 't'}, {NULL, false, 0}};
static const struct opt ls_opts[] = {
    {"state", true, 0}, {"kind", true, 'k'}, {"workspace", true, 'w'}, {NULL, false, 0}};
static const struct opt no_opts[] = {{NULL, false, 0}};
static const struct opt stream_opts[] = {
    {"view-only", false, 0}, {"ttl", true, 0}, {NULL, false, 0}};
static const struct opt preview_opts[] = {
    {"ttl", true, 0}, {"public", false, 0}, {"revoke", false, 0}, {NULL, false, 0}};
static const struct opt cdp_opts[] = {{"ttl", true, 0}, {NULL, false, 0}};
static const struct opt record_opts[] = {
    {"keep", false, 0}, {"output", true, 'o'}, {NULL, false, 0}};
static const struct opt usage_opts[] = {
    {"workspace", true, 'w'}, {"from", true, 0}, {"to", true, 0}, {NULL, false, 0}};
static const struct opt run_opts[] = {{"c", true, 'c'}, {"stdin", true, 0}, {NULL, false, 0}};
static const struct opt action_opts[] = {
    {"param", true, 'p'}, {"output", true, 'o'}, {NULL, false, 0}};

static const struct command commands[] = {
    {"create",
     "[--kind desktop|sandbox] [--size S] [--isolation container|vm] [--workspace W] "
     "[--resolution WxH] [--idle-timeout S] [--metadata K=V]... [--session NAME] "
     "[--template NAME] [--wait [--timeout S]]",
     "Creates a computer and prints its id. --wait returns once it runs (or fails), "
     "waiting up to --timeout seconds (default 120).",
     create_opts, cmd_create},
    {"ls", "[--state STATE] [--kind KIND] [--workspace W]", "Lists computers.", ls_opts, cmd_ls},
    {"template",
     "create NAME [--base sandbox|desktop] [--apt PKG]... [--pip PKG]... [--npm PKG]... "
     "[--run CMD]... [--file PATH=LOCAL]... [--workspace W] [--follow | --wait [--timeout S]] "
     "| ls | get NAME [--wait] | log NAME [--follow] | rm NAME...",
     "Templates: a recipe built once into an image computers start from (create --template "
     "NAME). create --follow prints the build's log as it goes and exits 1 if it fails; "
     "--wait waits quietly. PKG and CMD repeat; --file copies a local text file into the "
     "image.",
     template_opts, cmd_template},
    {"get", "ID", "Shows one computer.", no_opts, cmd_get},
    {"stop", "ID...", "Stops computers; their disks stay.", no_opts, cmd_stop},
    {"start", "ID...", "Starts stopped computers again.", no_opts, cmd_start},
    {"rm", "ID...", "Deletes computers, for good.", no_opts, cmd_rm},
    {"cp", "LOCAL ID:PATH | ID:PATH LOCAL",
     "Copies a file of any size to or from a computer, streamed. '-' is stdin or stdout; a "
     "LOCAL directory or a PATH ending in '/' takes the other side's file name.",
     no_opts, cmd_cp},
    {"stream", "ID [--view-only] [--ttl SECONDS]",
     "Prints a URL of the live desktop for a browser or an iframe (valid --ttl seconds, "
     "default 60).",
     stream_opts, cmd_stream},
    {"preview", "ID PORT [--ttl SECONDS] [--public] | ID PORT --revoke | ID",
     "Prints a URL that opens PORT of the computer in a browser, HTTP and WebSocket (valid "
     "--ttl seconds, default 3600; --public: no token needed, if the server allows it). "
     "--revoke ends every URL of PORT; with no PORT, lists the computer's previews.",
     preview_opts, cmd_preview},
    {"cdp", "ID [--ttl SECONDS]",
     "Prints the WebSocket URL of the desktop browser's DevTools (Chromium, started if "
     "needed), for Playwright's connectOverCDP.",
     cdp_opts, cmd_cdp},
    {"record",
     "start ID [--keep] | stop ID REC [--keep] | ls ID | get ID REC [-o FILE] | "
     "actions ID REC | rm ID REC",
     "Records a desktop's screen: start prints the recording's id; stop finishes the file "
     "(--keep keeps it after the computer is deleted); get downloads the WebM (default "
     "REC.webm, '-' for stdout); actions lists what the API ran meanwhile.",
     record_opts, cmd_record},
    {"usage", "[--workspace W] [--from TIME] [--to TIME]",
     "Prints the metered usage per computer (TIME: Unix seconds or 2026-11-22T04:00:00Z).",
     usage_opts, cmd_usage},
    {"run", "python|js (-c CODE | FILE | -) [--stdin TEXT]",
     "Runs a snippet in a fresh sandbox (no computer): prints its output and exits with its "
     "exit code.",
     run_opts, cmd_run},
    {"action", "ID NAME [JSON] [--param K=V]... [-o FILE]",
     "Runs any envd action with a JSON object of parameters; --param values are JSON when "
     "they parse as JSON, else strings.",
     action_opts, cmd_action_generic},
};

static const struct command *command_find(const char *name)
{
	for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
		if (strcmp(commands[i].name, name) == 0)
			return &commands[i];
	return NULL;
}

static void help_usage_line(FILE *f, const struct command *c)
{
	char line[1024];
	snprintf(line, sizeof line, "usage: cubicle %s %s", c->name, c->synopsis);
	out_wrap(f, line, 8);
}

int cli_usage(const char *cmd, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	fputs("cubicle: ", stderr);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	va_end(ap);
	const struct command *c = cmd ? command_find(cmd) : NULL;
	const struct action_spec *s = cmd && !c ? action_spec_find(cmd) : NULL;
	if (c)
		help_usage_line(stderr, c);
	else if (s)
		action_usage_line(s, stderr);
	fprintf(stderr, "Try 'cubicle %s%s--help'.\n", cmd ? cmd : "", cmd ? " " : "");
	return EXIT_USAGE;
}

int cli_fail(const struct err *e)
{
	fprintf(stderr, "cubicle: %s\n", e->message);
	return EXIT_API;
}

int cli_need(const struct args *a, int min, int max)
{
	if (a->npos < min)
		return cli_usage(a->cmd, "missing argument%s", min - a->npos > 1 ? "s" : "");
	if (max >= 0 && a->npos > max)
		return cli_usage(a->cmd, "too many arguments (unexpected '%s')", a->pos[max]);
	return 0;
}

static void help_main(void)
{
	printf("usage: cubicle [--url URL] [--api-key KEY] [--json] COMMAND [ARGS...]\n\n"
	       "Drives cubicled's computers: desktops and sandboxes for agents.\n\n"
	       "Configuration: CUBICLE_URL (default http://127.0.0.1:8080) and "
	       "CUBICLE_API_KEY,\nor --url and --api-key. --json prints the API's JSON.\n\n"
	       "Computers:\n");
	for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++) {
		/* The first sentence of its help. */
		const char *h = commands[i].help;
		printf("  %-8s %.*s\n", commands[i].name, (int)(strcspn(h, ".") + 1), h);
	}
	printf("\nActions (cubicle ACTION --help for each):\n");
	action_list();
	putchar('\n');
	out_wrap(stdout,
		 "Exit status: 0 done; 1 the API refused (its message is on stderr), cubicled "
		 "could not be reached, or a local file failed; 2 a bad command line or no API "
		 "key; bash and python exit with the command's own status (124 when it ran past "
		 "its timeout).",
		 0);
}

static void help_command(const struct command *c)
{
	help_usage_line(stdout, c);
	putchar('\n');
	out_wrap(stdout, c->help, 0);
}

static void cli_init(struct cli *cli)
{
	memset(cli, 0, sizeof *cli);
	const char *url = getenv("CUBICLE_URL");
	snprintf(cli->url, sizeof cli->url, "%s", url && *url ? url : "http://127.0.0.1:8080");
	cli->api_key = getenv("CUBICLE_API_KEY");
	cli->tty = isatty(STDERR_FILENO);
}

/* The global options before the command; returns the command's index.
 * *done >= 0 when the run ends here with that status (--version, errors). */
static int cli_globals(struct cli *cli, int argc, char **argv, bool *help, int *done)
{
	int i = 1;
	for (; i < argc && argv[i][0] == '-'; i++) {
		const char *s = argv[i];
		if (strcmp(s, "--json") == 0) {
			cli->json = true;
		} else if (strcmp(s, "-h") == 0 || strcmp(s, "--help") == 0) {
			*help = true;
		} else if (strcmp(s, "--version") == 0) {
			printf("cubicle %s\n", CUBICLE_VERSION);
			*done = 0;
			return i;
		} else if ((strcmp(s, "--url") == 0 || strcmp(s, "--api-key") == 0) &&
			   i + 1 < argc) {
			if (s[2] == 'u')
				snprintf(cli->url, sizeof cli->url, "%s", argv[++i]);
			else
				cli->api_key = argv[++i];
		} else if (strncmp(s, "--url=", 6) == 0) {
			snprintf(cli->url, sizeof cli->url, "%s", s + 6);
		} else if (strncmp(s, "--api-key=", 10) == 0) {
			cli->api_key = s + 10;
		} else {
			*done = cli_usage(NULL, "unknown option '%s'", s);
			return i;
		}
	}
	return i;
}

static int cli_run(struct cli *cli, int argc, char **argv)
{
	bool help = false;
	int done = -1;
	int i = cli_globals(cli, argc, argv, &help, &done);
	if (done >= 0)
		return done;
	if (i >= argc) {
		if (help) {
			help_main();
			return 0;
		}
		return cli_usage(NULL, "no command given");
	}
	const char *name = argv[i];
	if (strcmp(name, "help") == 0) {
		help_main();
		return 0;
	}
	const struct command *c = command_find(name);
	const struct action_spec *s = c ? NULL : action_spec_find(name);
	if (!c && !s)
		return cli_usage(NULL, "unknown command '%s'", name);
	if (s && help) {
		action_help(s);
		return 0;
	}
	if (s)
		return action_command(cli, s, argc - i - 1, argv + i + 1);
	struct args a;
	int rc = args_parse(cli, c->name, argc - i - 1, argv + i + 1, c->opts, &a);
	if (rc == 0 && (a.help || help))
		help_command(c);
	else if (rc == 0 && (rc = api_need_key(cli)) == 0)
		rc = c->run(cli, &a);
	args_free(&a);
	return rc;
}

int main(int argc, char **argv)
{
	struct cli cli;
	cli_init(&cli);
	cli.share = httpc_share_new();
	int rc = cli_run(&cli, argc, argv);
	httpc_share_free(cli.share);
	fflush(stdout);
	if (ferror(stdout)) {
		fprintf(stderr, "cubicle: cannot write the output\n");
		return EXIT_API;
	}
	return rc;
}
