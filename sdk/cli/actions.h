/*
 * actions.h: the action table's types, shared by actions.c (the table and
 * the command line) and answers.c (how a person reads an answer).
 */
#ifndef CUBICLE_CLI_ACTIONS_H
#define CUBICLE_CLI_ACTIONS_H

#include "cli.h"

enum ptype {
	T_INT,	/* a JSON integer */
	T_NUM,	/* a JSON number */
	T_STR,	/* a JSON string */
	T_ANY,	/* JSON when it parses as JSON, else a string */
	T_WIN,	/* a window id: an integer, or a "0x..." string */
	T_STRS, /* the remaining arguments, as an array of strings */
};

enum { F_POS = 1, F_REQ = 2 };

/* One parameter, parsed from the table's spec string. */
struct pspec {
	char name[32]; /* "" ends a list */
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

/*
 * An action command. `params` lists its parameters in the order of the
 * positional arguments, separated by spaces:
 *   name     required positional        name?     optional positional
 *   name...  the remaining arguments    name...?  zero or more of them
 *   -name    an option only (--name VALUE)
 * with a type after a colon, before ? or ...: name:i integer, :n number,
 * :j JSON (else a string), :w window id; a string without one.
 */
struct action_spec {
	const char *name;
	const char *params;
	enum show show;
	const char *fields; /* S_FIELDS: "width height"; S_TEXT: the field */
	const char *help;
};

#define ACTION_MAX_PARAMS 12

/* Shows an action's answer r (any status) as s says, the image to
 * `output`; returns the command's exit status. s may be NULL (unknown
 * action: JSON shown as key/value lines). */
int answer_show(struct cli *cli, const struct action_spec *s, const struct httpc_reply *r,
		const char *output);

#endif
