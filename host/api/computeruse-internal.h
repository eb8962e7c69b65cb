/*
 * computeruse-internal: what the computer-use dialects share (computeruse.c)
 * and each dialect's entry point (computeruse-anthropic.c,
 * computeruse-openai.c).
 */
#ifndef CUBICLE_COMPUTERUSE_INTERNAL_H
#define CUBICLE_COMPUTERUSE_INTERNAL_H

#include <stdbool.h>
#include <jansson.h>

#include "core.h"

/* Larger than any screen, small enough that envd's bounds checks see it. */
#define CU_COORD_LIMIT (1 << 24)
/* OpenAI scrolls by pixels; X scrolls by wheel notches of about this many. */
#define CU_PIXELS_PER_NOTCH 100
#define CU_MAX_KEYS	    16

/* One request. */
struct cu {
	struct core *core;
	const char *id, *ws;
	bool scaled;
	int sw, sh;    /* the screen (when scaled) */
	int dw, dh;    /* the agent's display (when scaled) */
	int settle_ms; /* wait before the screenshot that follows an action */
};

/* What an action leaves for the answer. */
struct cu_result {
	char text[96]; /* Anthropic's text output, "" for none */
	int region[4]; /* zoom: the screen region x, y, width, height to show */
	bool zoom;
	bool settle; /* the screen may still be changing: wait settle_ms first */
};

/* ---- coordinates (computeruse.c) ---- */

/* Agent pixel a (of d) → the screen pixel (of s) under the centre of what it
 * shows: a scaled pixel a shows screen [a*s/d, (a+1)*s/d) (envd's box
 * filter), whose middle is (2a+1)*s / 2d. */
static inline int cu_to_screen(long long a, int d, int s)
{
	return (int)((2 * a + 1) * s / (2LL * d));
}

/* Screen pixel v → the agent pixel that shows its centre (v + 1/2). With
 * s >= d, cu_to_agent(cu_to_screen(a)) == a for every a (tests/unit). */
static inline int cu_to_agent(long long v, int d, int s)
{
	return (int)((2 * v + 1) * d / (2LL * s));
}
/* An agent point (JSON integers) to the screen; the names name them in errors. */
int cu_map(const struct cu *u, const char *xname, const char *yname, const json_t *jx,
	   const json_t *jy, int *x, int *y, struct err *e);
/* Anthropic's [x, y] parameter `name`: 1 when present (mapped), 0 when absent. */
int cu_coordinate(const struct cu *u, const json_t *in, const char *name, int *x, int *y,
		  struct err *e);
/* OpenAI's x and y, both required. */
int cu_xy(const struct cu *u, const json_t *in, int *x, int *y, struct err *e);

/* ---- doing things (computeruse.c) ---- */

/* Runs an envd action; params is stolen. *out, if asked for, is its answer. */
int cu_do(struct cu *u, const char *action, json_t *params, json_t **out, struct err *e);
/* {"x": x, "y": y}, or {} when has is false. */
json_t *cu_at(bool has, int x, int y);
/* Splits s at any of seps into at most CU_MAX_KEYS names held in buf. */
int cu_split(const char *s, const char *seps, char *buf, size_t len, char **names,
	     const char *param, struct err *e);
/* Holds keys[] (pressed in order) while an action runs (params stolen), or
 * for hold_ms when action is NULL; releases in reverse, failed or not. */
int cu_with_keys(struct cu *u, char **keys, int n, const char *action, json_t *params,
		 long long hold_ms, struct err *e);
/* The same with Anthropic's "shift" / "ctrl+shift" (NULL: none). */
int cu_with_mods(struct cu *u, const char *mods, const char *action, json_t *params, struct err *e);
/* The cursor, on the screen. */
int cu_cursor(struct cu *u, int *x, int *y, struct err *e);
/* A base64 PNG of what the agent sees (malloc'd into *b64). */
int cu_screenshot(struct cu *u, const struct cu_result *res, char **b64, struct err *e);
/* Keys the request may carry besides the tool's input (display, dialect,
 * screenshot_delay_ms). */
bool cu_wrapper_key(const char *k);

/* ---- the dialects ---- */

/* Does `in` and makes the tool's answer; ref is the tool_use id or call_id. */
int cu_anthropic(struct cu *u, const json_t *in, const char *ref, json_t **out, struct err *e);
int cu_openai(struct cu *u, const json_t *in, const char *ref, json_t **out, struct err *e);

#endif
