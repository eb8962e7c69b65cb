/*
 * mcp-tools: the tool table, its JSON Schemas, argument checks and calls.
 *
 * A tool is a name, a description, a parameter list and how it is done:
 * an envd action (most of them: the action of the same name, its arguments
 * passed through; their tools are generated from spec/actions.json) or one
 * of the few functions below for the lifecycle, screenshots, code runs and
 * stream URLs.
 */
#include "mcp-tools.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base64.h"
#include "computeruse.h"
#include "driver.h"
#include "ident.h"
#include "params.h"

enum mcp_type {
	T_INT,	      /* integer in [lo, hi] */
	T_NUM,	      /* number in [lo, hi] */
	T_STR,	      /* string */
	T_BOOL,	      /* boolean */
	T_ENUM,	      /* one of choices ("a|b|c"; NULL: the registered isolations) */
	T_STRS,	      /* array of lo..hi strings */
	T_POINTS,     /* array of up to hi [x, y] integer pairs */
	T_STRMAP,     /* object of string values */
	T_OBJ,	      /* any object */
	T_ID,	      /* integer, or a string like "0x1a00007" */
	T_RESOLUTION, /* [width, height] of a desktop */
};

struct mcp_param {
	const char *name;
	enum mcp_type type;
	double lo, hi;
	const char *choices;
	bool required;
	const char *doc;
};

struct mcp_tool;
typedef int (*mcp_fn)(const struct mcp_caller *c, const struct mcp_tool *t, const json_t *args,
		      json_t **result, struct err *e);

enum {
	F_XY = 1 << 0,	     /* x and y: both or neither */
	F_READONLY = 1 << 1, /* changes nothing (annotations.readOnlyHint) */
	F_DESTROYS = 1 << 2, /* destroys something (annotations.destructiveHint) */
	F_COMPUTER = 1 << 3, /* takes computer_id (added to its parameters) */
	F_REGION = 1 << 4,   /* x, y, width, height: all or none */
	F_RESULT = 1 << 5,   /* the call makes the whole CallToolResult */
};

struct mcp_tool {
	const char *name;
	const char *doc;
	const struct mcp_param *params; /* ends with {0} */
	unsigned flags;
	mcp_fn call; /* NULL: the envd action named like the tool */
};

/* ---- parameters ------------------------------------------------------------------- */

static char mcp_isolations[256];
static pthread_once_t mcp_isolations_once = PTHREAD_ONCE_INIT;

static void mcp_isolations_fill(void)
{
	driver_names("|", mcp_isolations, sizeof mcp_isolations);
}

/* A T_ENUM's choices: its own, or the isolation drivers' names. */
static const char *mcp_choices(const struct mcp_param *p)
{
	if (p->choices)
		return p->choices;
	pthread_once(&mcp_isolations_once, mcp_isolations_fill);
	return mcp_isolations;
}

static const struct mcp_param mcp_computer_id = {
    "computer_id",
    T_STR,
    0,
    0,
    NULL,
    true,
    "The computer's id, as create_computer or list_computers give it (\"c-...\")."};

static const struct mcp_param p_none[] = {{0}};
static const struct mcp_param p_create[] = {
    {"kind", T_ENUM, 0, 0, "desktop|sandbox", false,
     "desktop (Xfce, Firefox; the default) or sandbox (headless: bash, python, files)."},
    {"size", T_ENUM, 0, 0, "small|medium|large|xs|sm|md|lg|xl", false,
     "Desktops small (default), medium, large; sandboxes xs, sm (default), md, lg, xl."},
    {"isolation", T_ENUM, 0, 0, NULL, false, "Default: what the host offers."},
    {"resolution", T_RESOLUTION, 0, 0, NULL, false,
     "Desktop [width, height], 320x240 to 3840x2160 (default [1280, 800])."},
    {"idle_timeout_s", T_INT, 10, 604800, NULL, false,
     "Stop (desktop) or delete (sandbox) after this long without use (default 600)."},
    {"metadata", T_OBJ, 0, 0, NULL, false, "Your own JSON, kept with the computer."},
    {"session", T_STR, 0, 0, NULL, false, "A session id: /session files kept across computers."},
    {"template", T_STR, 0, 0, NULL, false,
     "Start from this template (list_templates; e.g. \"data\": pandas, matplotlib, openpyxl, "
     "python-docx, pypdf, pandoc, Chromium with playwright-core); its base is the kind."},
    {"external_workspace_id", T_STR, 0, 0, NULL, false, "Your own tenant id, kept."},
    {"workspace", T_STR, 0, 0, NULL, false, "The workspace (the admin key only)."},
    {"wait", T_BOOL, 0, 0, NULL, false, "Return once it runs (default true)."},
    {"timeout_s", T_INT, 1, 600, NULL, false, "How long to wait for it (default 120)."},
    {0}};
static const struct mcp_param p_list[] = {
    {"state", T_ENUM, 0, 0, "provisioning|running|stopped|error|deleted", false,
     "Only computers in this state."},
    {"kind", T_ENUM, 0, 0, "desktop|sandbox", false, "Only this kind."},
    {0}};
static const struct mcp_param p_stream[] = {
    {"ttl_s", T_INT, 1, 86400, NULL, false,
     "How long the token may be used to connect (default 60)."},
    {"view_only", T_BOOL, 0, 0, NULL, false, "Watch only: input is dropped (default false)."},
    {0}};

static const struct mcp_param p_preview[] = {
    {"port", T_INT, 1, 65535, NULL, true,
     "The port a server listens on inside the computer (on 127.0.0.1 or 0.0.0.0)."},
    {"ttl_s", T_INT, 1, 86400, NULL, false, "How long the URL works (default 3600)."},
    {"public", T_BOOL, 0, 0, NULL, false,
     "No token needed (default false; only where the server allows public previews)."},
    {0}};
static const struct mcp_param p_cdp[] = {
    {"ttl_s", T_INT, 1, 86400, NULL, false, "How long the URLs work (default 3600)."}, {0}};
static const struct mcp_param p_rec_start[] = {
    {"keep", T_BOOL, 0, 0, NULL, false,
     "Keep the recording after the computer is deleted (default false)."},
    {0}};
static const struct mcp_param p_rec_stop[] = {
    {"recording_id", T_STR, 0, 0, NULL, true, "The recording's id (rec-...)."},
    {"keep", T_BOOL, 0, 0, NULL, false,
     "Keep the recording after the computer is deleted (default: unchanged)."},
    {0}};

/* ---- tool calls that are not one envd action ------------------------------------ */

static const char *mcp_id(const json_t *args)
{
	return json_string_value(json_object_get(args, "computer_id"));
}

/* args without the given keys (a new object). */
static json_t *mcp_without(const json_t *args, const char *const *drop)
{
	json_t *p = json_deep_copy(args ? args : json_object());
	for (size_t i = 0; p && drop[i]; i++)
		json_object_del(p, drop[i]);
	return p;
}

static int mcp_create_computer(const struct mcp_caller *c, const struct mcp_tool *t,
			       const json_t *args, json_t **result, struct err *e)
{
	(void)t;
	static const char *const ours[] = {"wait", "timeout_s", NULL};
	json_t *p = mcp_without(args, ours), *out = NULL;
	bool wait = true;
	long long timeout = 120;
	param_bool(args, "wait", &wait, NULL);
	param_int(args, "timeout_s", 1, 600, &timeout, NULL);
	int rc = core_create(c->core, c->ws, p, &out, e);
	json_decref(p);
	if (rc == 0 && wait) {
		char id[64];
		snprintf(id, sizeof id, "%s", json_string_value(json_object_get(out, "id")));
		json_decref(out);
		out = NULL;
		rc = core_wait(c->core, id, c->ws, COMPUTER_RUNNING, (int)timeout, &out, e);
	}
	*result = out;
	return rc;
}

static int mcp_list_computers(const struct mcp_caller *c, const struct mcp_tool *t,
			      const json_t *args, json_t **result, struct err *e)
{
	(void)t;
	return core_list(c->core, c->ws, json_string_value(json_object_get(args, "state")),
			 json_string_value(json_object_get(args, "kind")), result, e);
}

static int mcp_list_templates(const struct mcp_caller *c, const struct mcp_tool *t,
			      const json_t *args, json_t **result, struct err *e)
{
	(void)t, (void)args;
	return core_template_list(c->core, c->ws, NULL, result, e);
}

static int mcp_get_computer(const struct mcp_caller *c, const struct mcp_tool *t,
			    const json_t *args, json_t **result, struct err *e)
{
	(void)t;
	return core_get(c->core, mcp_id(args), c->ws, result, e);
}

static int mcp_stop_computer(const struct mcp_caller *c, const struct mcp_tool *t,
			     const json_t *args, json_t **result, struct err *e)
{
	(void)t;
	return core_stop(c->core, mcp_id(args), c->ws, result, e);
}

static int mcp_start_computer(const struct mcp_caller *c, const struct mcp_tool *t,
			      const json_t *args, json_t **result, struct err *e)
{
	(void)t;
	return core_start(c->core, mcp_id(args), c->ws, result, e);
}

static int mcp_delete_computer(const struct mcp_caller *c, const struct mcp_tool *t,
			       const json_t *args, json_t **result, struct err *e)
{
	(void)t;
	return core_delete(c->core, mcp_id(args), c->ws, result, e);
}

static int mcp_stream_url(const struct mcp_caller *c, const struct mcp_tool *t, const json_t *args,
			  json_t **result, struct err *e)
{
	(void)t;
	long long ttl = 60;
	bool view = false;
	param_int(args, "ttl_s", 1, 86400, &ttl, NULL);
	param_bool(args, "view_only", &view, NULL);
	return streams_grant(c->streams, mcp_id(args), c->ws, c->host, ttl, view, result, e);
}

/* POST .../previews and .../cdp (host/api/preview.h): their own checks. */
static int mcp_preview_url(const struct mcp_caller *c, const struct mcp_tool *t, const json_t *args,
			   json_t **result, struct err *e)
{
	(void)t;
	static const char *const ours[] = {"computer_id", NULL};
	if (!c->previews)
		return err_set(e, ERR_UNAVAILABLE, "previews are off on this server");
	json_t *p = mcp_without(args, ours);
	int rc = previews_grant(c->previews, mcp_id(args), c->ws, p, result, e);
	json_decref(p);
	return rc;
}

/* Recordings (docs/api.md, "Recordings"): the body is the tool's arguments
 * but the ids. */
static int mcp_start_recording(const struct mcp_caller *c, const struct mcp_tool *t,
			       const json_t *args, json_t **result, struct err *e)
{
	(void)t;
	static const char *const ours[] = {"computer_id", NULL};
	json_t *p = mcp_without(args, ours);
	int rc = core_recording_start(c->core, mcp_id(args), c->ws, p, result, e);
	json_decref(p);
	return rc;
}

static int mcp_cdp_url(const struct mcp_caller *c, const struct mcp_tool *t, const json_t *args,
		       json_t **result, struct err *e)
{
	(void)t;
	static const char *const ours[] = {"computer_id", NULL};
	if (!c->previews)
		return err_set(e, ERR_UNAVAILABLE, "CDP is off on this server");
	json_t *p = mcp_without(args, ours);
	int rc = previews_cdp(c->previews, mcp_id(args), c->ws, p, result, e);
	json_decref(p);
	return rc;
}

static int mcp_stop_recording(const struct mcp_caller *c, const struct mcp_tool *t,
			      const json_t *args, json_t **result, struct err *e)
{
	(void)t;
	static const char *const ours[] = {"computer_id", "recording_id", NULL};
	json_t *p = mcp_without(args, ours);
	const char *rid = json_string_value(json_object_get(args, "recording_id"));
	int rc = core_recording_stop(c->core, mcp_id(args), c->ws, rid ? rid : "", p, result, e);
	json_decref(p);
	return rc;
}

/* POST /v1/run: a snippet in a fresh sandbox (docs/code-runner.md). */
static const struct mcp_param p_run_code[] = {
    {"language", T_ENUM, 0, 0, "python|javascript", true,
     "python (3.11, standard library) or javascript (ES2023, QuickJS; console.log prints)."},
    {"code", T_STR, 0, 0, NULL, true, "The source, up to 10 KB."},
    {"stdin", T_STR, 0, 0, NULL, false, "Standard input (javascript: the global `stdin`)."},
    {0}};

static int mcp_run_code(const struct mcp_caller *c, const struct mcp_tool *t, const json_t *args,
			json_t **result, struct err *e)
{
	(void)t;
	return runner_run(c->runner, c->ws, args, result, e);
}

/* An image content item and a text item saying its size and scale; the
 * result is {"content": [...]} already (no structured copy of an image). */
static int mcp_screenshot(const struct mcp_caller *c, const struct mcp_tool *t, const json_t *args,
			  json_t **result, struct err *e)
{
	(void)t;
	static const char *const ours[] = {"computer_id", NULL};
	json_t *p = mcp_without(args, ours);
	struct envd_reply r;
	int rc = core_action_ok(c->core, mcp_id(args), c->ws, "screenshot", p, &r, e);
	json_decref(p);
	if (rc < 0)
		return -1;
	char *b64 = base64_encode(r.body, r.body_len);
	const char *mime =
	    strncmp(r.content_type, "image/jpeg", 10) == 0 ? "image/jpeg" : "image/png";
	int w = atoi(r.x_width), h = atoi(r.x_height);
	double scale = r.x_scale[0] ? atof(r.x_scale) : 1.0;
	char text[400];
	if (scale > 0 && fabs(scale - 1.0) > 1e-9)
		snprintf(text, sizeof text,
			 "%dx%d image of a %dx%d %s, scale %s (image pixels per screen pixel): "
			 "to act on image point (x, y), use screen point (x / %s, y / %s).",
			 w, h, (int)lround(w / scale), (int)lround(h / scale),
			 json_object_get(args, "width") ? "region" : "screen", r.x_scale, r.x_scale,
			 r.x_scale);
	else
		snprintf(text, sizeof text, "%dx%d %s, scale 1: image points are screen points.", w,
			 h, json_object_get(args, "width") ? "region" : "screen");
	envd_reply_free(&r);
	if (!b64)
		return err_set(e, ERR_INTERNAL, "out of memory encoding the screenshot");
	*result = json_pack("{s:[{s:s, s:s, s:s}, {s:s, s:s}]}", "content", "type", "image", "data",
			    b64, "mimeType", mime, "type", "text", "text", text);
	free(b64);
	return *result ? 0 : err_set(e, ERR_INTERNAL, "out of memory");
}

/* ---- computer-use ------------------------------------------------------------------ */

static const struct mcp_param p_computer_use[] = {
    {"call", T_OBJ, 0, 0, NULL, true,
     "What the model sent, as POST /v1/computers/{id}/computer-use takes it: an Anthropic "
     "tool_use block, assistant turn ({\"content\": [...]}) or computer input "
     "({\"action\", ...}), or an OpenAI computer_call item or action ({\"type\", ...})."},
    {"tool", T_ENUM, 0, 0,
     "computer_20241022|computer_20250124|computer_20251124|computer_toolset_20260801|"
     "computer_use_preview|computer",
     false, "The type of the tools[] entry the model was given (default: by the call's shape)."},
    {"display", T_OBJ, 0, 0, NULL, false,
     "{\"width\", \"height\"} the model sees: screenshots scaled to it, its coordinates "
     "scaled back (default: the screen's own size)."},
    {"screenshot_delay_ms", T_INT, 0, 10000, NULL, false,
     "Wait this long before a screenshot that follows an action (default 0)."},
    {0}};

/* The images of a computer-use answer (tool_result blocks, a turn's, or a
 * computer_call_output) as MCP image content, in order. */
static void mcp_cu_images(const json_t *v, json_t *content)
{
	const char *type = json_string_value(json_object_get(v, "type"));
	if (type && strcmp(type, "image") == 0) {
		json_t *src = json_object_get(v, "source");
		json_array_append_new(content, json_pack("{s:s, s:O, s:O}", "type", "image", "data",
							 json_object_get(src, "data"), "mimeType",
							 json_object_get(src, "media_type")));
		return;
	}
	const char *url =
	    json_string_value(json_object_get(json_object_get(v, "output"), "image_url"));
	static const char prefix[] = "data:image/png;base64,";
	if (url && strncmp(url, prefix, sizeof prefix - 1) == 0) {
		json_array_append_new(content,
				      json_pack("{s:s, s:s, s:s}", "type", "image", "data",
						url + sizeof prefix - 1, "mimeType", "image/png"));
		return;
	}
	size_t i;
	json_t *it;
	json_array_foreach(json_object_get(v, "content"), i, it) mcp_cu_images(it, content);
}

/* The vendor's answer as structured content, exactly; its screenshots as
 * image content and a line saying what ran. */
static int mcp_computer_use(const struct mcp_caller *c, const struct mcp_tool *t,
			    const json_t *args, json_t **result, struct err *e)
{
	(void)t;
	json_t *body = json_copy(json_object_get(args, "call"));
	static const char *const wrapper[] = {"tool", "display", "screenshot_delay_ms"};
	for (size_t i = 0; body && i < sizeof wrapper / sizeof wrapper[0]; i++)
		if (json_object_get(args, wrapper[i]))
			json_object_set(body, wrapper[i], json_object_get(args, wrapper[i]));
	if (!body)
		return err_set(e, ERR_INTERNAL, "out of memory");
	json_t *out = NULL;
	struct computeruse_outcome oc;
	int rc = computeruse_run(c->core, mcp_id(args), c->ws, body, NULL, &out, &oc, e);
	json_decref(body);
	if (rc < 0)
		return -1;
	char text[400];
	if (oc.failed >= 0)
		snprintf(text, sizeof text, "%d of %d calls done; %s; the rest not run.", oc.ran,
			 oc.calls, oc.error);
	else
		snprintf(text, sizeof text, "%d of %d calls done.", oc.ran, oc.calls);
	json_t *content = json_pack("[{s:s, s:s}]", "type", "text", "text", text);
	mcp_cu_images(out, content);
	*result = json_pack("{s:o, s:o}", "content", content, "structuredContent", out);
	return *result ? 0 : err_set(e, ERR_INTERNAL, "out of memory");
}

/* ---- the table ---------------------------------------------------------------------- */

/* The tools of envd's actions: mcp_action_tools[], generated from
 * spec/actions.json by spec/gen.py (spec/README.md). */
#include "mcp-actions.inc"

#define COMPUTER F_COMPUTER
#define RO	 (F_COMPUTER | F_READONLY)

static const struct mcp_tool mcp_tools[] = {
    /* Lifecycle. */
    {"create_computer",
     "Create a computer: a Linux desktop (Xfce, Firefox) or a headless sandbox, and wait until "
     "it runs. Returns its JSON; use its id as computer_id with the other tools.",
     p_create, 0, mcp_create_computer},
    {"list_computers", "List your computers with their id, kind, size, state.", p_list, F_READONLY,
     mcp_list_computers},
    {"list_templates",
     "The templates create_computer can start from (yours and the global ones): name, base, "
     "state, what their recipe installs.",
     p_none, F_READONLY, mcp_list_templates},
    {"get_computer", "A computer's JSON: state, kind, size, resolution, timestamps.", p_none, RO,
     mcp_get_computer},
    {"stop_computer", "Stop a computer, keeping its disk; start_computer resumes it.", p_none,
     COMPUTER, mcp_stop_computer},
    {"start_computer", "Start a stopped computer.", p_none, COMPUTER, mcp_start_computer},
    {"delete_computer", "Delete a computer and its disk, for good.", p_none, COMPUTER | F_DESTROYS,
     mcp_delete_computer},
    {"stream_url",
     "A URL to watch (or control) the desktop live in a browser, and its WebSocket URL.", p_stream,
     COMPUTER, mcp_stream_url},
    {"computer_use",
     "Run what a computer-use model sent (Anthropic's computer tool, any version, one call or "
     "a turn of them; OpenAI's computer_call or action) and get the answer its loop sends "
     "back, exactly: tool_result blocks or a computer_call_output item, as structuredContent "
     "(docs/computer-use.md).",
     p_computer_use, COMPUTER | F_RESULT, mcp_computer_use},
    {"preview_url",
     "A URL that opens a server running inside the computer (a dev server, an app) in a "
     "person's browser, HTTP and WebSocket, without exposing anything else of the computer.",
     p_preview, COMPUTER, mcp_preview_url},
    {"cdp_url",
     "The desktop browser's Chrome DevTools Protocol WebSocket URL (Chromium, started if "
     "needed), for Playwright's connectOverCDP: drives the browser the live view shows.",
     p_cdp, COMPUTER, mcp_cdp_url},
    {"start_recording",
     "Start recording the desktop's screen (a WebM video, and the track of every action run "
     "meanwhile) so a person can watch what was done. Returns the recording's id.",
     p_rec_start, COMPUTER, mcp_start_recording},
    {"stop_recording",
     "Stop a recording; the video and its action track can then be downloaded through the "
     "REST API (GET /v1/computers/{id}/recordings/{rid}).",
     p_rec_stop, COMPUTER, mcp_stop_recording},
    {"run_code",
     "Run a short Python or JavaScript snippet in a fresh isolated sandbox, no computer needed: "
     "its stdout, stderr, exit_code and error (exception, cpu_limit, memory_limit, timeout, "
     "output_limit). 128 MB, 100 ms CPU, no files, no network, nothing kept between runs.",
     p_run_code, 0, mcp_run_code},
};

#define MCP_NTOOLS                                                                                 \
	(sizeof mcp_tools / sizeof mcp_tools[0] +                                                  \
	 sizeof mcp_action_tools / sizeof mcp_action_tools[0])

/* Tool i of both tables: the lifecycle's, then the actions'. */
static const struct mcp_tool *mcp_tool_at(size_t i)
{
	size_t n = sizeof mcp_tools / sizeof mcp_tools[0];
	return i < n ? &mcp_tools[i] : &mcp_action_tools[i - n];
}

static const struct mcp_tool *mcp_tool_find(const char *name)
{
	for (size_t i = 0; i < MCP_NTOOLS; i++)
		if (strcmp(mcp_tool_at(i)->name, name) == 0)
			return mcp_tool_at(i);
	return NULL;
}

/* ---- schemas ------------------------------------------------------------------------ */

static json_t *mcp_num(double v)
{
	return v == floor(v) ? json_integer((json_int_t)v) : json_real(v);
}

static json_t *mcp_param_schema(const struct mcp_param *p)
{
	json_t *s = NULL;
	switch (p->type) {
	case T_INT:
	case T_NUM:
		s = json_pack("{s:s, s:o, s:o}", "type", p->type == T_INT ? "integer" : "number",
			      "minimum", mcp_num(p->lo), "maximum", mcp_num(p->hi));
		break;
	case T_STR:
		s = json_pack("{s:s}", "type", "string");
		break;
	case T_BOOL:
		s = json_pack("{s:s}", "type", "boolean");
		break;
	case T_ENUM: {
		json_t *choices = json_array();
		char buf[256];
		snprintf(buf, sizeof buf, "%s", mcp_choices(p));
		for (char *save = NULL, *c = strtok_r(buf, "|", &save); c;
		     c = strtok_r(NULL, "|", &save))
			json_array_append_new(choices, json_string(c));
		s = json_pack("{s:s, s:o}", "type", "string", "enum", choices);
		break;
	}
	case T_STRS:
		s = json_pack("{s:s, s:{s:s}, s:o, s:o}", "type", "array", "items", "type",
			      "string", "minItems", mcp_num(p->lo), "maxItems", mcp_num(p->hi));
		break;
	case T_POINTS:
		s = json_pack("{s:s, s:{s:s, s:{s:s}, s:i, s:i}, s:o}", "type", "array", "items",
			      "type", "array", "items", "type", "integer", "minItems", 2,
			      "maxItems", 2, "maxItems", mcp_num(p->hi));
		break;
	case T_STRMAP:
		s = json_pack("{s:s, s:{s:s}}", "type", "object", "additionalProperties", "type",
			      "string");
		break;
	case T_OBJ:
		s = json_pack("{s:s}", "type", "object");
		break;
	case T_ID:
		s = json_pack("{s:[s, s]}", "type", "integer", "string");
		break;
	case T_RESOLUTION:
		s = json_pack("{s:s, s:[{s:s, s:i, s:i}, {s:s, s:i, s:i}], s:b, s:i, s:i}", "type",
			      "array", "prefixItems", "type", "integer", "minimum", 320, "maximum",
			      3840, "type", "integer", "minimum", 240, "maximum", 2160, "items", 0,
			      "minItems", 2, "maxItems", 2);
		break;
	}
	if (s)
		json_object_set_new(s, "description", json_string(p->doc));
	return s;
}

/* The parameters of t, computer_id first when it takes one. */
static size_t mcp_params_of(const struct mcp_tool *t, const struct mcp_param **out, size_t max)
{
	size_t n = 0;
	if (t->flags & F_COMPUTER)
		out[n++] = &mcp_computer_id;
	for (const struct mcp_param *p = t->params; p->name && n < max; p++)
		out[n++] = p;
	return n;
}

static json_t *mcp_tool_schema(const struct mcp_tool *t)
{
	const struct mcp_param *ps[32];
	size_t n = mcp_params_of(t, ps, 32);
	json_t *props = json_object(), *req = json_array();
	for (size_t i = 0; i < n; i++) {
		json_object_set_new(props, ps[i]->name, mcp_param_schema(ps[i]));
		if (ps[i]->required)
			json_array_append_new(req, json_string(ps[i]->name));
	}
	json_t *s = json_pack("{s:s, s:o, s:o, s:b}", "type", "object", "properties", props,
			      "required", req, "additionalProperties", 0);
	if (s && (t->flags & F_XY))
		json_object_set_new(s, "dependentRequired",
				    json_pack("{s:[s], s:[s]}", "x", "y", "y", "x"));
	if (s && (t->flags & F_REGION))
		json_object_set_new(s, "dependentRequired",
				    json_pack("{s:[s,s,s], s:[s,s,s], s:[s,s,s], s:[s,s,s]}", "x",
					      "y", "width", "height", "y", "x", "width", "height",
					      "width", "x", "y", "height", "height", "x", "y",
					      "width"));
	return s;
}

json_t *mcp_tools_list(void)
{
	json_t *tools = json_array();
	for (size_t i = 0; i < MCP_NTOOLS; i++) {
		const struct mcp_tool *t = mcp_tool_at(i);
		json_t *ann =
		    json_pack("{s:b, s:b, s:b}", "readOnlyHint", !!(t->flags & F_READONLY),
			      "destructiveHint", !!(t->flags & F_DESTROYS), "openWorldHint", 0);
		json_array_append_new(tools, json_pack("{s:s, s:s, s:o, s:o}", "name", t->name,
						       "description", t->doc, "inputSchema",
						       mcp_tool_schema(t), "annotations", ann));
	}
	return json_pack("{s:o}", "tools", tools);
}

/* ---- argument checks ---------------------------------------------------------------- */

static int mcp_check_value(const struct mcp_param *p, const json_t *v, struct err *e)
{
	const char *n = p->name;
	switch (p->type) {
	case T_INT:
		if (!json_is_integer(v) || json_integer_value(v) < p->lo ||
		    json_integer_value(v) > p->hi)
			return err_param(e, n, "%s: expected an integer in [%.0f, %.0f]", n, p->lo,
					 p->hi);
		return 0;
	case T_NUM:
		if (!json_is_number(v) || json_number_value(v) < p->lo ||
		    json_number_value(v) > p->hi)
			return err_param(e, n, "%s: expected a number in [%g, %g]", n, p->lo,
					 p->hi);
		return 0;
	case T_STR:
		return json_is_string(v) ? 0 : err_param(e, n, "%s: expected a string", n);
	case T_BOOL:
		return json_is_boolean(v) ? 0 : err_param(e, n, "%s: expected true or false", n);
	case T_ENUM: {
		const char *s = json_string_value(v);
		size_t len = s ? strlen(s) : 0;
		for (const char *c = mcp_choices(p); s && *c;) {
			const char *bar = strchr(c, '|');
			size_t cl = bar ? (size_t)(bar - c) : strlen(c);
			if (cl == len && strncmp(c, s, len) == 0)
				return 0;
			c += cl + (bar ? 1 : 0);
		}
		return err_param(e, n, "%s: one of %s", n, mcp_choices(p));
	}
	case T_STRS: {
		size_t k = json_array_size(v);
		bool ok = json_is_array(v) && k >= p->lo && k <= p->hi;
		for (size_t i = 0; ok && i < k; i++)
			ok = json_is_string(json_array_get(v, i));
		return ok ? 0
			  : err_param(e, n, "%s: expected %.0f to %.0f strings", n, p->lo, p->hi);
	}
	case T_POINTS: {
		size_t k = json_array_size(v);
		bool ok = json_is_array(v) && k <= p->hi;
		for (size_t i = 0; ok && i < k; i++) {
			const json_t *it = json_array_get(v, i);
			ok = json_array_size(it) == 2 && json_is_integer(json_array_get(it, 0)) &&
			     json_is_integer(json_array_get(it, 1));
		}
		return ok ? 0
			  : err_param(e, n, "%s: expected at most %.0f [x, y] integer pairs", n,
				      p->hi);
	}
	case T_RESOLUTION: {
		const json_t *w = json_array_get(v, 0), *h = json_array_get(v, 1);
		if (json_array_size(v) != 2 || !json_is_integer(w) || !json_is_integer(h) ||
		    json_integer_value(w) < 320 || json_integer_value(w) > 3840 ||
		    json_integer_value(h) < 240 || json_integer_value(h) > 2160)
			return err_param(e, n, "%s: [width, height] within 320x240..3840x2160", n);
		return 0;
	}
	case T_STRMAP: {
		const char *k;
		json_t *it;
		if (!json_is_object(v))
			return err_param(e, n, "%s: expected an object of strings", n);
		json_object_foreach((json_t *)v, k, it)
		{
			if (!json_is_string(it))
				return err_param(e, n, "%s: %.60s is not a string", n, k);
		}
		return 0;
	}
	case T_OBJ:
		return json_is_object(v) ? 0 : err_param(e, n, "%s: expected an object", n);
	case T_ID:
		return json_is_integer(v) || json_is_string(v)
			   ? 0
			   : err_param(e, n, "%s: expected an integer or a string", n);
	}
	return 0;
}

/* Checks args against t's parameters: unknown names, types, ranges,
 * required ones, and the ones that go together. */
static int mcp_check_args(const struct mcp_tool *t, const json_t *args, struct err *e)
{
	const struct mcp_param *ps[32];
	size_t n = mcp_params_of(t, ps, 32);
	const char *k;
	json_t *v;
	json_object_foreach((json_t *)args, k, v)
	{
		const struct mcp_param *p = NULL;
		for (size_t i = 0; i < n && !p; i++)
			if (strcmp(ps[i]->name, k) == 0)
				p = ps[i];
		if (!p)
			return err_param(e, k, "%.60s: not a parameter of %s", k, t->name);
		if (mcp_check_value(p, v, e) < 0)
			return -1;
	}
	for (size_t i = 0; i < n; i++)
		if (ps[i]->required && !json_object_get(args, ps[i]->name))
			return err_param(e, ps[i]->name, "%s: required", ps[i]->name);
	const char *id = mcp_id(args);
	if (id && !ident_ok(id, 63)) /* as the REST routes: never a lookup */
		return err_set(e, ERR_NOT_FOUND, "no computer %.40s", id);
	if ((t->flags & F_XY) && !json_object_get(args, "x") != !json_object_get(args, "y"))
		return err_param(e, json_object_get(args, "x") ? "y" : "x",
				 "%s: x and y go together", json_object_get(args, "x") ? "y" : "x");
	return 0;
}

/* ---- calls ---------------------------------------------------------------------------- */

/* The envd action named like the tool: its answer as structured content. */
static int mcp_action(const struct mcp_caller *c, const struct mcp_tool *t, const json_t *args,
		      json_t **result, struct err *e)
{
	static const char *const ours[] = {"computer_id", NULL};
	json_t *p = mcp_without(args, ours);
	int rc = p ? core_action_json(c->core, mcp_id(args), c->ws, t->name, p, result, e)
		   : err_set(e, ERR_INTERNAL, "out of memory");
	json_decref(p);
	return rc;
}

static json_t *mcp_error_result(const struct err *e)
{
	char text[700];
	snprintf(text, sizeof text, "Error (%s): %s", err_code_name(e->code), e->message);
	return json_pack("{s:[{s:s, s:s}], s:b}", "content", "type", "text", "text", text,
			 "isError", 1);
}

json_t *mcp_tools_call(const struct mcp_caller *c, const char *name, const json_t *args)
{
	const struct mcp_tool *t = mcp_tool_find(name);
	if (!t)
		return NULL;
	struct err e = {0};
	json_t *out = NULL;
	json_t *empty = args ? NULL : json_object();
	const json_t *a = args ? args : empty;
	int rc = mcp_check_args(t, a, &e);
	if (rc == 0)
		rc = (t->call ? t->call : mcp_action)(c, t, a, &out, &e);
	json_decref(empty);
	if (rc < 0) {
		json_decref(out);
		return mcp_error_result(&e);
	}
	if (t->flags & F_RESULT)
		return out;
	/* JSON answers: as text (for every client) and structured. */
	char *text = json_dumps(out, JSON_COMPACT);
	json_t *res =
	    json_pack("{s:[{s:s}], s:o}", "content", "type", "text", "structuredContent", out);
	if (res && text)
		json_object_set_new(json_array_get(json_object_get(res, "content"), 0), "text",
				    json_string(text));
	free(text);
	return res;
}
