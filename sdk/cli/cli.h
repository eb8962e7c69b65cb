/*
 * cli: what the `cubicle` command's files share — the configuration, the
 * parsed command line of one command, exit codes, and the calls to
 * cubicled's REST API (docs/api.md).
 *
 *   main.c       global options, the command table, help, dispatch
 *   args.c       one command's options and positional arguments
 *   api.c        REST calls on wire/httpc: JSON, downloads, uploads
 *   output.c     tables, key/value listings, JSON, the progress line
 *   computers.c  create, ls, get, stop, start, rm, stream, usage
 *   actions.c    every envd action as a command, from one table
 *   files.c      cp to and from a computer, streamed
 *   templates.c  template create, ls, get, log, rm
 *   recordings.c record start|stop|ls|get|actions|rm
 */
#ifndef CUBICLE_CLI_H
#define CUBICLE_CLI_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include <jansson.h>

#include "err.h"
#include "httpc.h"

/* Exit codes (besides `bash`/`python`, which pass the command's through). */
enum {
	EXIT_API = 1,	    /* cubicled said no, could not be reached, or a local file failed */
	EXIT_USAGE = 2,	    /* bad command line or configuration: nothing was sent */
	EXIT_TIMEDOUT = 124 /* bash/python ran past its timeout_s (as timeout(1)) */
};

struct cli {
	char url[512];	     /* cubicled's base URL, no trailing slash */
	const char *api_key; /* NULL until a command needs it */
	bool json;	     /* --json: print the API's JSON */
	bool tty;	     /* stderr is a terminal: progress lines */
	const char *waiting; /* set: api_call shows "<waiting>… N s" while it waits */
	struct httpc_share *share;
};

/* One command's options, as it declares them. */
struct opt {
	const char *name; /* long name, "-" and "_" alike; NULL ends a list */
	bool arg;	  /* takes a value */
	char letter;	  /* short form, or 0 */
};

/* A command line parsed against a list of struct opt. */
struct args {
	const char *cmd;
	int npos;
	char **pos;
	int nopt;
	struct {
		const char *name; /* the declared name */
		const char *value;
	} * opt;
	bool help;
};

/* ---- args.c ---- */
/* Parses argv (after the command name). Global options (--json, --url,
 * --api-key) are accepted anywhere. Returns 0, or EXIT_USAGE after saying why. */
int args_parse(struct cli *cli, const char *cmd, int argc, char **argv, const struct opt *opts,
	       struct args *a);
void args_free(struct args *a);
/* The last value of option `name`, or NULL. */
const char *args_get(const struct args *a, const char *name);
bool args_has(const struct args *a, const char *name);
/* Option names compare with '-' and '_' alike. */
bool args_same_name(const char *a, const char *b);
/* Strict number parsing: 0, or -1 when s is not one in [lo, hi]. */
int args_int(const char *s, long long lo, long long hi, long long *out);
/* A value for --param k=v: JSON when it parses as JSON, else the string. */
json_t *args_value(const char *s);

/* ---- main.c ---- */
/* Prints "cubicle: <message>", the command's usage line, returns EXIT_USAGE. */
int cli_usage(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Prints the error's message and returns EXIT_API. */
int cli_fail(const struct err *e);
/* Checks the positional count: EXIT_USAGE (said) or 0. */
int cli_need(const struct args *a, int min, int max);

/* ---- api.c ---- */
/* The API key, or EXIT_USAGE after saying how to set one. */
int api_need_key(struct cli *cli);
/* method + path (with query) + optional JSON body. Any HTTP answer is 0
 * with r filled; -1 when cubicled could not be reached. */
int api_call(struct cli *cli, const char *method, const char *path, const json_t *body,
	     struct httpc_reply *r, struct err *e);
/* As api_call, but an error status is -1 with the API's error in e, and a
 * JSON answer is parsed into *out (the caller owns it). */
int api_json(struct cli *cli, const char *method, const char *path, const json_t *body,
	     json_t **out, struct err *e);
/* Parses r's body as JSON (NULL when it is not). */
json_t *api_reply_json(const struct httpc_reply *r);
/* GET path into fd (a 2xx body only), with a progress line labelled `what`. */
int api_download(struct cli *cli, const char *path, int fd, const char *what, struct err *e);
/* PUT len bytes of fd to path, with a progress line; *out = the answer. */
int api_upload(struct cli *cli, const char *path, int fd, uint64_t len, const char *what,
	       json_t **out, struct err *e);
/* Appends "?name=value" or "&name=value" (escaped) to buf; skips a NULL value. */
int api_query(char *buf, size_t len, const char *name, const char *value);

/* ---- output.c ---- */
void out_json(const json_t *j);
/* "key   value" lines, aligned; nested values as compact JSON. */
void out_kv(const json_t *obj);
/* A scalar as plain text ("" for null); a container as compact JSON. malloc'd. */
char *out_scalar(const json_t *v);

struct table;
struct table *table_new(int ncols, const char *const *headers);
/* Adds a row of ncols strings (copied). */
void table_add(struct table *t, const char *const *cells);
/* Prints the rows in aligned columns (by UTF-8 characters) and frees t. */
void table_print(struct table *t);

/* A one-line progress report on stderr, only when it is a terminal. */
void progress_show(struct cli *cli, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void progress_clear(struct cli *cli);
/* Prints text word-wrapped at 79 columns, continuation lines indented. */
void out_wrap(FILE *f, const char *text, int indent);
/* "12.5 MiB" */
void out_bytes(char *buf, size_t len, uint64_t n);

/* ---- the commands ---- */
int cmd_create(struct cli *cli, struct args *a);
int cmd_ls(struct cli *cli, struct args *a);
int cmd_get(struct cli *cli, struct args *a);
int cmd_stop(struct cli *cli, struct args *a);
int cmd_start(struct cli *cli, struct args *a);
int cmd_rm(struct cli *cli, struct args *a);
int cmd_stream(struct cli *cli, struct args *a);
int cmd_preview(struct cli *cli, struct args *a);
int cmd_cdp(struct cli *cli, struct args *a);
int cmd_usage(struct cli *cli, struct args *a);
int cmd_run(struct cli *cli, struct args *a); /* run.c */
int cmd_cp(struct cli *cli, struct args *a);
int cmd_record(struct cli *cli, struct args *a); /* recordings.c */
int cmd_action_generic(struct cli *cli, struct args *a);
int cmd_template(struct cli *cli, struct args *a); /* templates.c */

/* ---- actions.c: the action commands, generated from one table ---- */
struct action_spec;
const struct action_spec *action_spec_find(const char *name);
/* Runs action command `name` on argv (after the name). */
int action_command(struct cli *cli, const struct action_spec *s, int argc, char **argv);
/* Help of one action command, and the one-line list of all of them. */
void action_help(const struct action_spec *s);
void action_usage_line(const struct action_spec *s, FILE *f);
void action_list(void);

#endif
