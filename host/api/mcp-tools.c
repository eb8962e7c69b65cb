/*
 * mcp-tools: the tool table, its JSON Schemas, argument checks and calls.
 *
 * A tool is a name, a description, a parameter list and how it is done:
 * an envd action (most of them: the action of the same name, its arguments
 * passed through) or one of the few functions below for the lifecycle,
 * screenshots and stream URLs.
 */
#include "mcp-tools.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base64.h"
#include "driver.h"
#include "ident.h"
#include "params.h"

#define COORD_MAX 1000000 /* envd's bound on x and y */

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

#define P_X(req)                                                                                   \
	{                                                                                          \
		"x", T_INT, 0, COORD_MAX, NULL, req, "Screen x in pixels (0 = left edge)."         \
	}
#define P_Y(req)                                                                                   \
	{                                                                                          \
		"y", T_INT, 0, COORD_MAX, NULL, req, "Screen y in pixels (0 = top edge)."          \
	}
#define P_BUTTON                                                                                   \
	{                                                                                          \
		"button", T_ENUM, 0, 0, "left|middle|right|back|forward", false,                   \
		    "Mouse button (default left)."                                                 \
	}
#define P_WINDOW                                                                                   \
	{                                                                                          \
		"id", T_ID, 0, 0, NULL, true, "Window id, from the windows tool."                  \
	}
#define P_KEY(doc)                                                                                 \
	{                                                                                          \
		"key", T_STR, 0, 0, NULL, true, doc                                                \
	}
#define P_SHELL(code, what)                                                                        \
	{code, T_STR, 0, 0, NULL, true, what},                                                     \
	    {"timeout_s", T_INT, 1, 86400, NULL, false, "Kill it after this long (default 60)."},  \
	    {"cwd", T_STR, 0, 0, NULL, false, "Working directory (default: home)."},               \
	    {"env", T_STRMAP, 0, 0, NULL, false, "More environment variables."},                   \
	{                                                                                          \
		"stdin", T_STR, 0, 0, NULL, false, "Text on its standard input."                   \
	}

static const struct mcp_param p_none[] = {{0}};
static const struct mcp_param p_xy_opt[] = {P_X(false), P_Y(false), {0}};
static const struct mcp_param p_xy[] = {P_X(true), P_Y(true), {0}};
static const struct mcp_param p_xyb[] = {P_X(false), P_Y(false), P_BUTTON, {0}};
static const struct mcp_param p_click[] = {
    P_X(false),
    P_Y(false),
    P_BUTTON,
    {"clicks", T_INT, 1, 3, NULL, false, "1 to 3 clicks (default 1)."},
    {0}};
static const struct mcp_param p_drag[] = {
    {"from_x", T_INT, 0, COORD_MAX, NULL, true, "Where the drag starts, x."},
    {"from_y", T_INT, 0, COORD_MAX, NULL, true, "Where the drag starts, y."},
    {"to_x", T_INT, 0, COORD_MAX, NULL, true, "Where it ends (the button is released), x."},
    {"to_y", T_INT, 0, COORD_MAX, NULL, true, "Where it ends, y."},
    {"path", T_POINTS, 0, 1000, NULL, false, "Waypoints [[x, y], ...] between start and end."},
    {"duration_ms", T_INT, 0, 60000, NULL, false, "How long the move takes (default 0)."},
    P_BUTTON,
    {0}};
static const struct mcp_param p_scroll[] = {
    {"direction", T_ENUM, 0, 0, "up|down|left|right", false, "Default down."},
    {"clicks", T_INT, 1, 1000, NULL, false, "Wheel notches (default 1)."},
    P_X(false),
    P_Y(false),
    {0}};
static const struct mcp_param p_type[] = {
    {"text", T_STR, 0, 0, NULL, true, "Any Unicode text; \\n is Return, \\t is Tab."},
    {"delay_ms", T_INT, 0, 1000, NULL, false, "Pause between characters (default 0)."},
    {0}};
static const struct mcp_param p_key[] = {
    P_KEY("A key or a combination: \"Return\", \"ctrl+shift+t\", \"super\", \"F5\", \"a\"."), {0}};
static const struct mcp_param p_key1[] = {P_KEY("One key: \"shift\", \"ctrl\", \"a\"."), {0}};
static const struct mcp_param p_hotkey[] = {
    {"keys", T_STRS, 1, 16, NULL, true,
     "Keys pressed in order and released in reverse: [\"ctrl\", \"c\"]."},
    {0}};
static const struct mcp_param p_clip_get[] = {
    {"timeout_ms", T_INT, 1, 60000, NULL, false, "How long to wait for the owner."}, {0}};
static const struct mcp_param p_clip_set[] = {
    {"text", T_STR, 0, 0, NULL, true, "The clipboard's new text."}, {0}};
static const struct mcp_param p_launch[] = {
    {"app", T_STR, 0, 0, NULL, true,
     "A .desktop id (\"firefox-esr\", \"xfce4-terminal\", \"mousepad\") or a command."},
    {"args", T_STRS, 0, 256, NULL, false, "Its arguments."},
    {"wait_s", T_NUM, 0, 60, NULL, false, "Wait this long for its window (default 0)."},
    {0}};
static const struct mcp_param p_window[] = {P_WINDOW, {0}};
static const struct mcp_param p_window_size[] = {
    P_WINDOW,
    {"width", T_INT, 1, 32767, NULL, true, "New width in pixels."},
    {"height", T_INT, 1, 32767, NULL, true, "New height in pixels."},
    {0}};
static const struct mcp_param p_window_pos[] = {
    P_WINDOW,
    {"x", T_INT, -32768, 32767, NULL, true, "New left edge."},
    {"y", T_INT, -32768, 32767, NULL, true, "New top edge."},
    {0}};
static const struct mcp_param p_screen_size[] = {
    {"width", T_INT, 1, 32767, NULL, true, "New screen width in pixels."},
    {"height", T_INT, 1, 32767, NULL, true, "New screen height in pixels."},
    {0}};
static const struct mcp_param p_wallpaper[] = {
    {"path", T_STR, 0, 0, NULL, true, "A PNG or JPEG inside the computer."}, {0}};
static const struct mcp_param p_a11y[] = {
    {"max_depth", T_INT, 1, 50, NULL, false, "Levels below each application (default 10)."},
    {"app", T_STR, 0, 0, NULL, false, "Only applications whose name contains this."},
    {"max_nodes", T_INT, 1, 100000, NULL, false, "Stop after this many nodes."},
    {0}};
static const struct mcp_param p_bash[] = {P_SHELL("command", "A bash command line."), {0}};
static const struct mcp_param p_python[] = {P_SHELL("code", "Python 3 source."), {0}};
static const struct mcp_param p_write_file[] = {
    {"path", T_STR, 0, 0, NULL, true, "Where (relative paths start at the user's home)."},
    {"content", T_STR, 0, 0, NULL, false, "The text (give this or content_base64)."},
    {"content_base64", T_STR, 0, 0, NULL, false, "The bytes, base64 (or content)."},
    {"mode", T_ID, 0, 0, NULL, false, "Permissions, 420 or \"0644\" (default: kept, or 0644)."},
    {0}};
static const struct mcp_param p_read_file[] = {
    {"path", T_STR, 0, 0, NULL, true, "The file (relative paths start at the user's home)."},
    {"encoding", T_ENUM, 0, 0, "auto|utf-8|base64", false,
     "auto (default): UTF-8 text if it is, else base64."},
    {0}};
static const struct mcp_param p_screenshot[] = {
    {"max_width", T_INT, 1, COORD_MAX, NULL, false,
     "Scale down (keeping the aspect ratio) to at most this wide."},
    {"max_height", T_INT, 1, COORD_MAX, NULL, false, "... and at most this high."},
    {"format", T_ENUM, 0, 0, "png|jpeg", false, "Default png."},
    {"quality", T_INT, 1, 100, NULL, false, "JPEG quality (default 80)."},
    {"x", T_INT, 0, COORD_MAX, NULL, false,
     "A region only: its left edge (with y, width, height)."},
    {"y", T_INT, 0, COORD_MAX, NULL, false, "Region top edge."},
    {"width", T_INT, 1, COORD_MAX, NULL, false, "Region width."},
    {"height", T_INT, 1, COORD_MAX, NULL, false, "Region height."},
    {0}};
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

/* ---- the table ---------------------------------------------------------------------- */

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
    {"run_code",
     "Run a short Python or JavaScript snippet in a fresh isolated sandbox, no computer needed: "
     "its stdout, stderr, exit_code and error (exception, cpu_limit, memory_limit, timeout, "
     "output_limit). 128 MB, 100 ms CPU, no files, no network, nothing kept between runs.",
     p_run_code, 0, mcp_run_code},
    /* Screen. */
    {"screenshot",
     "A PNG (or JPEG) of the screen or a region, optionally scaled down; a text item says the "
     "scale to map image points back to screen points.",
     p_screenshot, RO | F_REGION | F_RESULT, mcp_screenshot},
    {"get_screen_size", "The screen's width and height in pixels.", p_none, RO, NULL},
    {"set_screen_size",
     "Change the screen's resolution (up to the size the desktop started with, at least "
     "1920x1200); windows and the panel follow.",
     p_screen_size, COMPUTER, NULL},
    {"get_cursor_position", "Where the mouse cursor is.", p_none, RO, NULL},
    /* Mouse. */
    {"left_click", "Left-click at (x, y), or where the cursor is.", p_xy_opt, COMPUTER | F_XY,
     NULL},
    {"right_click", "Right-click at (x, y), or where the cursor is.", p_xy_opt, COMPUTER | F_XY,
     NULL},
    {"middle_click", "Middle-click at (x, y), or where the cursor is.", p_xy_opt, COMPUTER | F_XY,
     NULL},
    {"double_click", "Double-click at (x, y), or where the cursor is.", p_xyb, COMPUTER | F_XY,
     NULL},
    {"triple_click", "Triple-click (select a line) at (x, y), or where the cursor is.", p_xyb,
     COMPUTER | F_XY, NULL},
    {"click", "Click any button 1 to 3 times at (x, y), or where the cursor is.", p_click,
     COMPUTER | F_XY, NULL},
    {"move_cursor", "Move the mouse cursor to (x, y).", p_xy, COMPUTER, NULL},
    {"mouse_down", "Press a mouse button (at (x, y), or where the cursor is).", p_xyb,
     COMPUTER | F_XY, NULL},
    {"mouse_up", "Release a mouse button (at (x, y), or where the cursor is).", p_xyb,
     COMPUTER | F_XY, NULL},
    {"drag", "Press at (from_x, from_y), move (through path), release at (to_x, to_y).", p_drag,
     COMPUTER, NULL},
    {"scroll", "Turn the mouse wheel, at (x, y) or where the cursor is.", p_scroll, COMPUTER | F_XY,
     NULL},
    /* Keyboard. */
    {"type", "Type text into the focused window.", p_type, COMPUTER, NULL},
    {"key", "Press a key or a key combination.", p_key, COMPUTER, NULL},
    {"hotkey", "Press keys together: in order, released in reverse.", p_hotkey, COMPUTER, NULL},
    {"key_down", "Hold a key down (until key_up).", p_key1, COMPUTER, NULL},
    {"key_up", "Release a key held with key_down.", p_key1, COMPUTER, NULL},
    {"get_clipboard", "The clipboard's text.", p_clip_get, RO, NULL},
    {"set_clipboard", "Put text on the clipboard (paste it with ctrl+v).", p_clip_set, COMPUTER,
     NULL},
    /* Windows and apps. */
    {"windows", "The windows: id, title, app, pid, position, size, focused, minimized, maximized.",
     p_none, RO, NULL},
    {"launch", "Start an application, optionally waiting for its window.", p_launch, COMPUTER,
     NULL},
    {"focus_window", "Raise and focus a window.", p_window, COMPUTER, NULL},
    {"maximize_window", "Maximize a window.", p_window, COMPUTER, NULL},
    {"minimize_window", "Minimize a window.", p_window, COMPUTER, NULL},
    {"close_window", "Ask a window to close (the app may ask to save).", p_window, COMPUTER, NULL},
    {"get_window_size", "A window's size.", p_window, RO, NULL},
    {"set_window_size", "Resize a window.", p_window_size, COMPUTER, NULL},
    {"get_window_position", "A window's position.", p_window, RO, NULL},
    {"set_window_position", "Move a window.", p_window_pos, COMPUTER, NULL},
    /* Desktop. */
    {"get_desktop_environment", "The desktop environment's name and version.", p_none, RO, NULL},
    {"set_wallpaper", "Set the desktop wallpaper to an image file.", p_wallpaper, COMPUTER, NULL},
    {"get_accessibility_tree",
     "The applications' accessibility trees: roles, names, states, bounds, actions.", p_a11y, RO,
     NULL},
    /* Shell and files (sandboxes too). */
    {"bash", "Run a bash command as the computer's user: stdout, stderr, exit_code.", p_bash,
     COMPUTER, NULL},
    {"python", "Run Python 3 code as the computer's user: stdout, stderr, exit_code.", p_python,
     COMPUTER, NULL},
    {"write_file", "Write a file (atomically; parent directories are created).", p_write_file,
     COMPUTER, NULL},
    {"read_file", "Read a file, up to 16 MiB.", p_read_file, RO, NULL},
};

static const struct mcp_tool *mcp_tool_find(const char *name)
{
	for (size_t i = 0; i < sizeof mcp_tools / sizeof mcp_tools[0]; i++)
		if (strcmp(mcp_tools[i].name, name) == 0)
			return &mcp_tools[i];
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
	for (size_t i = 0; i < sizeof mcp_tools / sizeof mcp_tools[0]; i++) {
		const struct mcp_tool *t = &mcp_tools[i];
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
