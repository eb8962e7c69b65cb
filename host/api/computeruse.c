/*
 * computeruse: the request (see computeruse.h for the contract,
 * docs/computer-use.md for every shape and its source).
 *
 * A request is told apart by its shape and `tool`, its calls are checked
 * for what the whole request needs (ids, sizes, one tool version), the
 * agent's display is measured once, and the calls run in order through the
 * dialect files; the answer is built here. A batch stops at its first
 * failure, which is answered in the vendor's own shape.
 */
#include "computeruse.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "computeruse-internal.h"
#include "params.h"

static const char *const cu_tools[] = {
    [CU_TOOL_NONE] = "",
    [CU_COMPUTER_20241022] = "computer_20241022",
    [CU_COMPUTER_20250124] = "computer_20250124",
    [CU_COMPUTER_20251124] = "computer_20251124",
    [CU_TOOLSET_20260801] = "computer_toolset_20260801",
    [CU_USE_PREVIEW] = "computer_use_preview",
    [CU_COMPUTER] = "computer",
};
#define CU_NTOOLS (sizeof cu_tools / sizeof cu_tools[0])

#define CU_NOT_EXECUTED "Not executed: an earlier computer action in this turn failed."

const char *cu_tool_name(enum cu_tool t)
{
	return (size_t)t < CU_NTOOLS ? cu_tools[t] : "";
}

static const char *cu_query(const struct httpd_request *req, const char *name)
{
	return req ? httpd_query(req, name) : NULL;
}

/* A failure of the agent's input (its result is in the answer), or of the
 * computer (nothing to answer the agent with when nothing ran yet). */
static bool cu_input_error(const struct err *e)
{
	return e->code == ERR_INVALID || e->code == ERR_BAD_REQUEST;
}

static void cu_fail(struct computeruse_outcome *oc, int i, const char *what, const struct err *e)
{
	oc->failed = i;
	snprintf(oc->error, sizeof oc->error, "%s[%d]: %.260s", what, i, e->message);
}

/* ---- which tool ------------------------------------------------------------------- */

enum { D_NONE = -1, D_ANTHROPIC = 0, D_OPENAI = 1 };

/* `tool` and `dialect` from the body, else the query: *tool CU_TOOL_NONE and
 * *dialect D_NONE when not said; a tool says its dialect. */
static int cu_said(const json_t *body, const struct httpd_request *req, enum cu_tool *tool,
		   int *dialect, struct err *e)
{
	static const char *const dialects[] = {"anthropic", "openai", NULL};
	const char *t = NULL, *q;
	*tool = CU_TOOL_NONE;
	*dialect = D_NONE;
	if (param_enum(body, "dialect", dialects, dialect, e) < 0 ||
	    param_str(body, "tool", &t, e) < 0)
		return -1;
	if (*dialect == D_NONE && (q = cu_query(req, "dialect"))) {
		for (int i = 0; dialects[i]; i++)
			if (strcmp(q, dialects[i]) == 0)
				*dialect = i;
		if (*dialect == D_NONE)
			return err_param(e, "dialect", "dialect: anthropic or openai, not '%.40s'",
					 q);
	}
	if (!t)
		t = cu_query(req, "tool");
	if (!t)
		return 0;
	for (size_t i = 1; i < CU_NTOOLS; i++)
		if (strcmp(t, cu_tools[i]) == 0)
			*tool = (enum cu_tool)i;
	if (*tool == CU_TOOL_NONE)
		return err_param(e, "tool",
				 "tool: '%.60s' is not a computer-use tool cubicle speaks "
				 "(computer_20241022, computer_20250124, computer_20251124, "
				 "computer_toolset_20260801; computer_use_preview, computer)",
				 t);
	int vendor = cu_tool_openai(*tool) ? D_OPENAI : D_ANTHROPIC;
	if (*dialect != D_NONE && *dialect != vendor)
		return err_param(e, "tool", "tool: %s is %s's, and the dialect says %s",
				 cu_tools[*tool], dialects[vendor], dialects[*dialect]);
	*dialect = vendor;
	return 0;
}

/* ---- Anthropic --------------------------------------------------------------------- */

/* {"type": "tool_result", "tool_use_id"?, "toolset_name"?, "content"}: content stolen. */
static json_t *cu_tool_result(const char *id, bool toolset, json_t *content, bool is_error)
{
	json_t *r = json_pack("{s:s}", "type", "tool_result");
	if (r && id)
		json_object_set_new(r, "tool_use_id", json_string(id));
	if (r && toolset)
		json_object_set_new(r, "toolset_name", json_string("computer"));
	if (r && is_error)
		json_object_set_new(r, "is_error", json_true());
	if (r)
		json_object_set_new(r, "content", content);
	else
		json_decref(content);
	return r;
}

static json_t *cu_text_content(const char *text)
{
	return json_pack("[{s:s, s:s}]", "type", "text", "text", text);
}

/* The version a call in this block shape runs as: toolset calls carry
 * toolset_name "computer", earlier versions' name "computer". */
static int cu_a_version(struct cu *u, enum cu_tool said, bool toolset, struct err *e)
{
	if (toolset && said != CU_TOOL_NONE && said != CU_TOOLSET_20260801)
		return err_param(e, "tool",
				 "tool: %s's tool_use blocks have no toolset_name; this one is "
				 "computer_toolset_20260801's",
				 cu_tools[said]);
	if (!toolset && said == CU_TOOLSET_20260801)
		return err_param(
		    e, "toolset_name",
		    "toolset_name: computer_toolset_20260801's tool_use blocks carry "
		    "\"toolset_name\": \"computer\" and the member tool as their name");
	u->tool = toolset		 ? CU_TOOLSET_20260801
		  : said != CU_TOOL_NONE ? said
					 : CU_COMPUTER_20251124;
	return 0;
}

/* {"action": ...}: one input of computer_20241022..computer_20251124. */
static int cu_a_input(struct cu *u, const json_t *body, enum cu_tool said, json_t **out,
		      struct err *e)
{
	if (said == CU_TOOLSET_20260801)
		return err_param(e, "action",
				 "action: computer_toolset_20260801's calls are tool_use blocks "
				 "named by their member tool, with \"toolset_name\": \"computer\"");
	json_t *content = NULL;
	if (cu_a_version(u, said, false, e) < 0 || cu_anthropic(u, NULL, body, &content, e) < 0)
		return -1;
	*out = cu_tool_result(NULL, false, content, false);
	return 0;
}

/* A tool_use block's computer call: *toolset, *member (NULL for an earlier
 * version's), *input. 0 when the block is another tool's. */
static int cu_a_block(const json_t *b, bool *toolset, const char **member, const json_t **input,
		      struct err *e)
{
	const char *ts = NULL, *name = NULL;
	json_t *in = NULL;
	if (param_str(b, "toolset_name", &ts, e) < 0 || param_str(b, "name", &name, e) < 0)
		return -1;
	*toolset = ts && strcmp(ts, "computer") == 0;
	if (ts && !*toolset)
		return 0; /* another toolset's (browser, ...) */
	if (!*toolset && (!name || strcmp(name, "computer") != 0))
		return 0; /* another tool's */
	if (*toolset && !name)
		return err_param(e, "name", "name: the member tool (left_click, ...) is required");
	in = json_object_get(b, "input");
	*member = *toolset ? name : NULL;
	*input = in;
	return 1;
}

/* One call of a block: the input object checked, then done. */
static int cu_a_call(struct cu *u, const char *member, const json_t *in, json_t **content,
		     struct err *e)
{
	if (!json_is_object(in))
		return err_param(e, "input", "input: required, an object");
	return cu_anthropic(u, member, in, content, e);
}

/* {"type": "tool_use", ...}: one block, answered with its tool_result. */
static int cu_a_tool_use(struct cu *u, const json_t *body, enum cu_tool said, json_t **out,
			 struct err *e)
{
	static const char *const known[] = {
	    "type",	     "id",	"name",	   "input", "toolset_name",	   "caller",
	    "cache_control", "display", "dialect", "tool",  "screenshot_delay_ms", NULL};
	const char *id = NULL, *member = NULL;
	const json_t *in = NULL;
	bool toolset = false;
	int r;
	if (params_check_known(body, known, e) < 0 || param_str(body, "id", &id, e) < 0 ||
	    (r = cu_a_block(body, &toolset, &member, &in, e)) < 0)
		return -1;
	if (r == 0)
		return err_param(e, json_object_get(body, "toolset_name") ? "toolset_name" : "name",
				 "%s: this tool_use is not the computer tool's (\"name\": "
				 "\"computer\", or \"toolset_name\": \"computer\")",
				 json_object_get(body, "toolset_name") ? "toolset_name" : "name");
	if (!in)
		return err_param(e, "input", "input: required in a tool_use block");
	json_t *content = NULL;
	if (cu_a_version(u, said, toolset, e) < 0 || cu_a_call(u, member, in, &content, e) < 0)
		return -1;
	*out = cu_tool_result(id, toolset, content, false);
	return 0;
}

/* {"content": [...]}: an assistant turn (or the Messages API's whole
 * answer, {"type": "message", ...}), its computer tool_use blocks a batch. */
static int cu_a_turn(struct cu *u, const json_t *body, enum cu_tool said, json_t **out,
		     struct computeruse_outcome *oc, struct err *e)
{
	const char *type = NULL, *role = NULL;
	json_t *blocks = NULL;
	if (param_str(body, "type", &type, e) < 0 || param_str(body, "role", &role, e) < 0 ||
	    param_array(body, "content", &blocks, e) < 0)
		return -1;
	if (!type) { /* a message of our caller's: nothing unknown */
		static const char *const known[] = {
		    "role", "content", "display", "dialect", "tool", "screenshot_delay_ms", NULL};
		if (params_check_known(body, known, e) < 0)
			return -1;
	}
	if (role && strcmp(role, "assistant") != 0)
		return err_param(e, "role", "role: the turn to run is the assistant's");
	size_t n = json_array_size(blocks);
	size_t idx[CU_MAX_BATCH];
	int calls = 0, toolsets = 0;
	for (size_t i = 0; i < n; i++) {
		const json_t *b = json_array_get(blocks, i), *in;
		const char *bt = NULL, *member, *id = NULL;
		bool toolset;
		int r;
		if (!json_is_object(b))
			return err_param(e, "content", "content[%zu]: not a content block", i);
		if (param_str(b, "type", &bt, e) < 0 || !bt || strcmp(bt, "tool_use") != 0)
			continue; /* text, thinking, ...; the loop's own business */
		if ((r = cu_a_block(b, &toolset, &member, &in, e)) < 0 ||
		    param_str(b, "id", &id, e) < 0)
			return err_rename_param(e, "content");
		if (r == 0)
			continue; /* bash, another toolset: the loop runs those */
		if (!id)
			return err_param(e, "content",
					 "content[%zu]: a tool_use block needs its id", i);
		if (calls == CU_MAX_BATCH)
			return err_param(e, "content",
					 "content: at most %d computer calls in one request",
					 CU_MAX_BATCH);
		idx[calls++] = i;
		toolsets += toolset;
	}
	if (calls == 0)
		return err_param(e, "content",
				 "content: no tool_use block of the computer tool (\"name\": "
				 "\"computer\", or \"toolset_name\": \"computer\")");
	if (toolsets != 0 && toolsets != calls)
		return err_param(e, "content",
				 "content: toolset calls and computer_2025... calls in one turn");
	if (cu_a_version(u, said, toolsets > 0, e) < 0)
		return -1;
	bool toolset = toolsets > 0;
	json_t *results = json_array();
	oc->calls = calls;
	for (int c = 0; c < calls; c++) {
		const json_t *b = json_array_get(blocks, idx[c]);
		const char *id = json_string_value(json_object_get(b, "id"));
		const char *member = toolset ? json_string_value(json_object_get(b, "name")) : NULL;
		json_t *content = NULL;
		struct err ce = {0};
		json_t *r;
		if (oc->failed >= 0) {
			r = cu_tool_result(id, toolset, cu_text_content(CU_NOT_EXECUTED), true);
		} else if (cu_a_call(u, member, json_object_get(b, "input"), &content, &ce) == 0) {
			r = cu_tool_result(id, toolset, content, false);
			oc->ran++;
		} else if (c == 0 && !cu_input_error(&ce)) {
			json_decref(results);
			*e = ce;
			return -1; /* nothing ran, nothing to tell the agent */
		} else {
			cu_fail(oc, (int)idx[c], "content", &ce);
			r = cu_tool_result(id, toolset, cu_text_content(ce.message), true);
		}
		json_array_append_new(results, r);
	}
	*out = json_pack("{s:s, s:o}", "role", "user", "content", results);
	return *out ? 0 : err_set(e, ERR_INTERNAL, "out of memory");
}

/* ---- OpenAI ------------------------------------------------------------------------- */

/* {"type": "computer_call", ...}: its action, or its actions[] (a batch). */
static int cu_o_call(struct cu *u, const json_t *body, enum cu_tool said, json_t **out,
		     struct computeruse_outcome *oc, struct err *e)
{
	static const char *const known[] = {"type",
					    "id",
					    "call_id",
					    "action",
					    "actions",
					    "status",
					    "pending_safety_checks",
					    "display",
					    "dialect",
					    "tool",
					    "screenshot_delay_ms",
					    NULL};
	json_t *action = NULL, *actions = NULL;
	const char *call_id = NULL;
	if (params_check_known(body, known, e) < 0 ||
	    param_object(body, "action", &action, e) < 0 ||
	    param_array(body, "actions", &actions, e) < 0 ||
	    param_str(body, "call_id", &call_id, e) < 0)
		return -1;
	if (action && actions)
		return err_param(e, "actions", "actions: a computer_call has action or actions[]");
	if (!action && !actions)
		return err_param(e, "action",
				 "action: required in a computer_call item (or "
				 "actions[])");
	if (action) { /* computer_use_preview's, or a computer's single action */
		u->tool = said != CU_TOOL_NONE ? said : CU_USE_PREVIEW;
		return cu_openai(u, action, e) < 0 ? -1
						   : cu_openai_output(u, call_id, false, out, e);
	}
	if (said == CU_USE_PREVIEW)
		return err_param(e, "actions",
				 "actions: computer_use_preview sends one action; actions[] is the "
				 "computer tool's");
	size_t n = json_array_size(actions);
	if (n == 0 || n > CU_MAX_BATCH)
		return err_param(e, "actions", "actions: 1 to %d actions", CU_MAX_BATCH);
	u->tool = CU_COMPUTER;
	oc->batch = true;
	oc->calls = (int)n;
	for (size_t i = 0; i < n; i++) {
		struct err ae = {0};
		if (cu_openai(u, json_array_get(actions, i), &ae) == 0) {
			oc->ran++;
			continue;
		}
		if (i == 0 && !cu_input_error(&ae)) {
			*e = ae;
			return -1;
		}
		cu_fail(oc, (int)i, "actions", &ae);
		break;
	}
	return cu_openai_output(u, call_id, oc->failed >= 0, out, e);
}

/* ---- the request ------------------------------------------------------------------- */

enum cu_shape { S_A_INPUT, S_A_TOOL_USE, S_A_TURN, S_O_ACTION, S_O_CALL };

static int cu_shape(const json_t *body, int dialect, enum cu_shape *shape, struct err *e)
{
	const char *type = json_string_value(json_object_get(body, "type"));
	bool turn = json_object_get(body, "content") && (!type || strcmp(type, "message") == 0);
	int vendor;
	if (turn || (type && strcmp(type, "tool_use") == 0)) {
		*shape = turn ? S_A_TURN : S_A_TOOL_USE;
		vendor = D_ANTHROPIC;
	} else if (type && strcmp(type, "computer_call") == 0) {
		*shape = S_O_CALL;
		vendor = D_OPENAI;
	} else if (type && strcmp(type, "message") == 0) {
		return err_param(e, "content", "content: required in a message");
	} else if (dialect != D_NONE) { /* a single input, as said */
		*shape = dialect == D_ANTHROPIC ? S_A_INPUT : S_O_ACTION;
		return 0;
	} else if (json_is_string(json_object_get(body, "action"))) {
		*shape = S_A_INPUT;
		return 0;
	} else if (type) {
		*shape = S_O_ACTION;
		return 0;
	} else {
		return err_set(e, ERR_INVALID,
			       "the body is neither Anthropic's computer tool input "
			       "({\"action\": \"left_click\", ...}), tool_use block or turn "
			       "({\"content\": [...]}) nor an OpenAI computer-use action "
			       "({\"type\": \"click\", ...}) or computer_call item; 'tool' or "
			       "'dialect' can say which");
	}
	if (dialect != D_NONE && dialect != vendor)
		return err_param(e, "dialect", "dialect: this is %s's shape, not %s's",
				 vendor == D_ANTHROPIC ? "Anthropic" : "OpenAI",
				 dialect == D_ANTHROPIC ? "Anthropic" : "OpenAI");
	return 0;
}

int computeruse_run(struct core *core, const char *id, const char *ws, const json_t *body,
		    const struct httpd_request *req, json_t **out, struct computeruse_outcome *oc,
		    struct err *e)
{
	struct cu u = {.core = core, .id = id, .ws = ws, .wait_left_ms = CU_MAX_WAIT_MS};
	*oc = (struct computeruse_outcome){.calls = 1, .failed = -1};
	*out = NULL;
	enum cu_tool said;
	enum cu_shape shape = S_A_INPUT;
	int dialect;
	if (!json_is_object(body))
		return err_set(e, ERR_BAD_REQUEST, "the body must be a JSON object");
	if (cu_said(body, req, &said, &dialect, e) < 0 || cu_shape(body, dialect, &shape, e) < 0 ||
	    cu_display(&u, body, cu_query(req, "display"), e) < 0 ||
	    cu_settle(&u, body, cu_query(req, "screenshot_delay_ms"), e) < 0)
		return -1;
	oc->batch = shape == S_A_TURN;
	int rc;
	switch (shape) {
	case S_A_INPUT:
		rc = cu_a_input(&u, body, said, out, e);
		break;
	case S_A_TOOL_USE:
		rc = cu_a_tool_use(&u, body, said, out, e);
		break;
	case S_A_TURN:
		rc = cu_a_turn(&u, body, said, out, oc, e);
		break;
	case S_O_ACTION:
		u.tool = said != CU_TOOL_NONE ? said : CU_USE_PREVIEW;
		rc = cu_openai(&u, body, e) < 0 ? -1 : cu_openai_output(&u, NULL, false, out, e);
		break;
	default:
		rc = cu_o_call(&u, body, said, out, oc, e);
	}
	if (rc < 0) {
		json_decref(*out);
		*out = NULL;
		return -1;
	}
	if (!oc->batch)
		oc->ran = 1;
	return 0;
}

/* A header value: printable ASCII of msg. */
static void cu_header_text(char *out, size_t len, const char *msg)
{
	size_t n = 0;
	for (; *msg && n + 1 < len; msg++)
		out[n++] = *msg >= 0x20 && *msg < 0x7f ? *msg : '?';
	out[n] = 0;
}

void computeruse_handle(struct core *core, const char *id, const char *ws,
			struct httpd_request *req, struct httpd_response *resp)
{
	struct err e = {0};
	json_error_t je;
	json_t *body = req->body_len
			   ? json_loadb(req->body, req->body_len, JSON_REJECT_DUPLICATES, &je)
			   : NULL;
	json_t *out = NULL;
	struct computeruse_outcome oc;
	int rc;
	if (!body)
		rc = err_set(&e, ERR_BAD_REQUEST, "the body must be a JSON object: %s",
			     req->body_len ? je.text : "it is empty");
	else
		rc = computeruse_run(core, id, ws, body, req, &out, &oc, &e);
	json_decref(body);
	if (rc < 0) {
		httpd_respond_err(resp, &e);
		return;
	}
	if (oc.batch) {
		char v[sizeof oc.error];
		snprintf(v, sizeof v, "%d", oc.ran);
		httpd_add_header(resp, "x-computer-use-ran:", v);
		if (oc.failed >= 0) {
			snprintf(v, sizeof v, "%d", oc.failed);
			httpd_add_header(resp, "x-computer-use-failed:", v);
			cu_header_text(v, sizeof v, oc.error);
			httpd_add_header(resp, "x-computer-use-error:", v);
		}
	}
	httpd_respond_json(resp, 200, out);
}
