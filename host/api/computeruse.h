/*
 * computeruse: POST /v1/computers/{id}/computer-use, drop-in compatibility
 * with the computer-use tools agents are trained on (docs/computer-use.md).
 *
 * The body is what the agent's model sent, in one of five shapes:
 *
 *   Anthropic  {"action": "left_click", ...}       one input (computer_2024..2025)
 *              {"type": "tool_use", ...}           one tool_use block, any version
 *              {"content": [blocks...]}            a turn: its computer tool_use
 *                                                  blocks, a batch
 *   OpenAI     {"type": "click", ...}              one action
 *              {"type": "computer_call", ...}      one item: its `action`, or
 *                                                  its actions[], a batch
 *
 * `tool` (in the body or the query) names the tool the agent was given,
 * the `type` of its tools[] entry: computer_20241022, computer_20250124,
 * computer_20251124, computer_toolset_20260801, computer_use_preview or
 * computer; without it the shape decides (computer_20251124 for an
 * Anthropic input, the toolset for tool_use blocks carrying toolset_name,
 * computer_use_preview for one OpenAI action, computer for actions[]).
 * `dialect` ("anthropic"|"openai") may say which vendor instead.
 *
 * The answer is what the tool's loop sends back: a tool_result block, a
 * user message {"role": "user", "content": [tool_result, ...]} with one
 * result per computer tool_use of a turn, or a computer_call_output item.
 * A batch runs in order and stops at the first failure: in a turn the
 * failing call's result has "is_error": true and the message, and every
 * later computer call's result is the text "Not executed: an earlier
 * computer action in this turn failed."; a computer_call's output is the
 * screenshot after what ran, "status": "incomplete". The request itself
 * being wrong (its shape, an unknown `tool`, a bad display) is a 4xx
 * before anything runs, as is any failure of a single call, and of a
 * batch's first call that is not the agent's input (no display, the
 * computer gone).
 *
 * A display ({"display":{"width","height"}} in the body, or
 * ?display=WxH) makes the agent see a screen of that size: screenshots are
 * scaled to exactly that size (x and y apart when the aspect differs) and
 * the agent's coordinates are scaled back, for every call of a batch alike.
 * Both directions round at pixel centres, so a point the agent reads off
 * the scaled screenshot lands on a screen pixel whose centre lies inside
 * what that scaled pixel shows, and cursor_position gives the agent its own
 * point back.
 */
#ifndef CUBICLE_COMPUTERUSE_H
#define CUBICLE_COMPUTERUSE_H

#include <jansson.h>

#include "core.h"
#include "httpd.h"

/* How a request went, besides its answer. */
struct computeruse_outcome {
	int calls;	 /* calls in the request (1 but for a batch) */
	int ran;	 /* done, in order */
	int failed;	 /* the call that failed, -1 for none */
	bool batch;	 /* a turn or actions[]: failures are in the answer */
	char error[300]; /* why it failed, "" for none */
};

/* Runs the request `body` for computer `id` (`ws` NULL for the admin), its
 * query parameters from req (NULL: none). *out is the answer (new
 * reference); -1 fills e when the request is refused as a whole. Worker
 * thread: it blocks for the actions and the screenshots. */
int computeruse_run(struct core *core, const char *id, const char *ws, const json_t *body,
		    const struct httpd_request *req, json_t **out, struct computeruse_outcome *oc,
		    struct err *e);

/* The HTTP handler: the body parsed, computeruse_run, the answer; a batch's
 * outcome also in headers X-Computer-Use-Ran, -Failed (the index), -Error. */
void computeruse_handle(struct core *core, const char *id, const char *ws,
			struct httpd_request *req, struct httpd_response *resp);

#endif
