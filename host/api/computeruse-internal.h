/*
 * computeruse-internal: what the computer-use files share.
 *
 *   computeruse.c            the request: its shapes (a single call, an
 *                            Anthropic turn of tool_use blocks, an OpenAI
 *                            computer_call with actions[]), the tool
 *                            version, running a batch, the answer
 *   computeruse-envd.c       coordinates, input and screenshots on envd's
 *                            actions, the agent's display
 *   computeruse-anthropic.c  one call of Anthropic's computer tool, any
 *                            version, and its tool_result content
 *   computeruse-openai.c     one OpenAI action, and computer_call_output
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
/* Calls in one request: tool_use blocks of a turn, actions of a computer_call. */
#define CU_MAX_BATCH 32
/* What the waits, held keys and screenshot delays of one request may add
 * up to (a delay is cut short when it would pass it). */
#define CU_MAX_WAIT_MS 100000

/* The tool the agent was given: the `type` of its tools[] entry. */
enum cu_tool {
	CU_TOOL_NONE = 0,     /* not said: the request's shape decides */
	CU_COMPUTER_20241022, /* Anthropic, input.action */
	CU_COMPUTER_20250124,
	CU_COMPUTER_20251124, /* ... zoom */
	CU_TOOLSET_20260801,  /* Anthropic, tool_use.name is the member */
	CU_USE_PREVIEW,	      /* OpenAI computer_use_preview: one action per call */
	CU_COMPUTER,	      /* OpenAI computer: actions[] per call */
};

/* "computer_20250124", ... ("" for CU_TOOL_NONE). */
const char *cu_tool_name(enum cu_tool t);
static inline bool cu_tool_openai(enum cu_tool t)
{
	return t == CU_USE_PREVIEW || t == CU_COMPUTER;
}

/* One request. */
struct cu {
	struct core *core;
	const char *id, *ws;
	enum cu_tool tool; /* never CU_TOOL_NONE once the request is parsed */
	bool scaled;
	int sw, sh;		/* the screen (when scaled) */
	int dw, dh;		/* the agent's display (when scaled) */
	int settle_ms;		/* wait before the screenshot that follows an action */
	long long wait_left_ms; /* of CU_MAX_WAIT_MS */
	bool changed; /* an action ran since the last screenshot: settle before the next */
};

/* What a call leaves for its answer. */
struct cu_result {
	char text[256]; /* Anthropic's text output, "" for none */
	int region[4];	/* zoom: the screen region x, y, width, height to show */
	bool zoom;
	bool shot; /* the answer carries a screenshot */
};

/* ---- coordinates (computeruse-envd.c) ---- */

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

/* ---- doing things (computeruse-envd.c) ---- */

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
/* Takes ms of the request's wait budget (CU_MAX_WAIT_MS), naming `param`. */
int cu_spend_wait(struct cu *u, long long ms, const char *param, struct err *e);
/* The cursor, on the screen. */
int cu_cursor(struct cu *u, int *x, int *y, struct err *e);
/* A base64 PNG of what the agent sees (malloc'd into *b64): the screen at the
 * display's size, or res's zoom region fitted into it. Waits settle_ms first
 * when an action ran since the last one. */
int cu_screenshot(struct cu *u, const struct cu_result *res, char **b64, struct err *e);
/* The agent's display ({"display"} in the body, else ?display=WxH, query
 * NULL for none) and the screen behind it; screenshot_delay_ms the same. */
int cu_display(struct cu *u, const json_t *body, const char *query, struct err *e);
int cu_settle(struct cu *u, const json_t *body, const char *query, struct err *e);
/* Keys a request may carry besides the tool's input (display, dialect, tool,
 * screenshot_delay_ms). */
bool cu_wrapper_key(const char *k);

/* ---- the dialects ---- */

/* One call of Anthropic's computer tool (u->tool one of the four): a
 * toolset call names its `member`, an earlier version's input names it in
 * `action` (member NULL). *content is the tool_result's content. */
int cu_anthropic(struct cu *u, const char *member, const json_t *in, json_t **content,
		 struct err *e);
/* One OpenAI action ({"type": "click", ...}); nothing is answered. */
int cu_openai(struct cu *u, const json_t *action, struct err *e);
/* The computer_call_output after the actions: a screenshot of what the
 * agent sees; call_id NULL for none, incomplete when an action failed. */
int cu_openai_output(struct cu *u, const char *call_id, bool incomplete, json_t **out,
		     struct err *e);

#endif
