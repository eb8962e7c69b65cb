/*
 * computeruse: POST /v1/computers/{id}/computer-use, drop-in compatibility
 * with the two computer-use tools agents are trained on.
 *
 * The body is the input of Anthropic's `computer` tool ({"action":
 * "left_click","coordinate":[x,y]}, or a whole tool_use block) or one
 * OpenAI computer-use action ({"type":"click","x","y","button"}, or a whole
 * computer_call item); `dialect` ("anthropic"|"openai", in the body or the
 * query) settles it, else the shape does: `action` is Anthropic's, `type`
 * OpenAI's. The answer is what each tool's loop sends back to its model: a
 * tool_result block (text and/or a base64 PNG) or a computer_call_output
 * item (a data: URL of a PNG). Every action is done with envd's actions, on
 * the same path as POST .../actions/{name}.
 *
 * A display ({"display":{"width","height"}} in the body, or
 * ?display=WxH) makes the agent see a screen of that size: screenshots are
 * scaled to exactly that size (x and y apart when the aspect differs) and
 * the agent's coordinates are scaled back. Both directions round at pixel
 * centres, so a point the agent reads off the scaled screenshot lands on a
 * screen pixel whose centre lies inside what that scaled pixel shows, and
 * cursor_position gives the agent its own point back.
 */
#ifndef CUBICLE_COMPUTERUSE_H
#define CUBICLE_COMPUTERUSE_H

#include "core.h"
#include "httpd.h"

/* Handles one request for computer `id` (`ws` NULL for the admin). Worker
 * thread: it blocks for the action and the screenshot after it. */
void computeruse_handle(struct core *core, const char *id, const char *ws,
			struct httpd_request *req, struct httpd_response *resp);

#endif
