/*
 * libFuzzer harness for envd's request parameters (envd/action.c,
 * envd/actions/): the JSON body of every POST /v1/actions/{name}, as
 * cubicled or a compromised host side sends it, through the same
 * action_find + action_run the server calls, with the X and process layers
 * faked (a 1280x800 screen, one window, commands that do nothing).
 *
 * Input: the action's name up to a NUL, then its JSON parameters. Checked:
 * every action answers 0 with a reply (JSON or bytes) or -1 with an error
 * whose code has a 4xx/5xx status and a message; a parameter error names
 * a parameter; points reaching the desk layer's input calls passed its
 * bounds check (desk_check_point) or are the cursor's; drag paths have at
 * least two points; text to type is valid UTF-8 (jansson's promise kept);
 * install_packages hands the package helper only names its policy passes
 * (envd/guest/pkg-policy.h, the real one) and never an empty list.
 */
#include "action.h"
#include "fuzz.h"

#include "a11y.h"
#include "clipboard.h"
#include "desk.h"
#include "desktop.h"
#include "files.h"
#include "input.h"
#include "launch.h"
#include "pkg.h"
#include "screen.h"
#include "session.h"
#include "shell.h"
#include "windows.h"

struct desk {
	int unused;
};
struct clipboard {
	int unused;
};
static struct desk the_desk;
static struct clipboard the_clipboard;

#define SW 1280
#define SH 800

static void check_at(const struct desk_point *at)
{
	if (at)
		CHECK(at->x >= 0 && at->x < SW && at->y >= 0 && at->y < SH);
}

int desk_check_point(struct desk *d, int x, int y, const char *xname, const char *yname,
		     struct err *e)
{
	if (x < 0 || x >= SW)
		return err_param(e, xname, "%s: off the screen", xname);
	if (y < 0 || y >= SH)
		return err_param(e, yname, "%s: off the screen", yname);
	return 0;
}
int desk_button(struct desk *d, const struct desk_point *at, enum desk_button button, bool down,
		struct err *e)
{
	check_at(at);
	return 0;
}
int desk_click(struct desk *d, const struct desk_point *at, enum desk_button button, int count,
	       struct err *e)
{
	check_at(at);
	CHECK(count >= 1 && count <= 3);
	return 0;
}
int desk_cursor_position(struct desk *d, int *x, int *y, struct err *e)
{
	*x = 10, *y = 20;
	return 0;
}
int desk_move(struct desk *d, int x, int y, struct err *e)
{
	CHECK(x >= 0 && x < SW && y >= 0 && y < SH);
	return 0;
}
const char *desk_display_name(const struct desk *d)
{
	return ":99";
}
int desk_screen_size(struct desk *d, int *width, int *height, struct err *e)
{
	*width = SW, *height = SH;
	return 0;
}
int desk_drag(struct desk *d, const struct desk_point *path, size_t n, int duration_ms,
	      enum desk_button button, struct err *e)
{
	CHECK(n >= 2);
	for (size_t i = 0; i < n; i++)
		check_at(&path[i]);
	CHECK(duration_ms >= 0);
	return 0;
}
int desk_environment(struct desk *d, struct desk_environment *out, struct err *e)
{
	memset(out, 0, sizeof *out);
	snprintf(out->name, sizeof out->name, "xfce");
	return 0;
}
int desk_hotkey(struct desk *d, const char *const *keys, size_t n, struct err *e)
{
	CHECK(n >= 1);
	return 0;
}
int desk_key(struct desk *d, const char *combo, enum desk_key_action act, const char *param,
	     struct err *e)
{
	CHECK(combo);
	return 0;
}
int desk_scroll(struct desk *d, const struct desk_point *at, enum desk_scroll_dir dir, int clicks,
		struct err *e)
{
	check_at(at);
	return 0;
}
int desk_set_screen_size(struct desk *d, int width, int height, struct err *e)
{
	return width > 0 && height > 0 ? 0 : err_param(e, "width", "width: bad");
}
int desk_set_wallpaper(struct desk *d, const char *path, const char **method, struct err *e)
{
	*method = "fake";
	return 0;
}
int desk_type(struct desk *d, const char *utf8, int delay_ms, struct err *e)
{
	json_t *s = json_string(utf8);
	CHECK(s);
	json_decref(s);
	return 0;
}
static void fake_window(struct desk_window *w)
{
	memset(w, 0, sizeof *w);
	w->id = 0x1200003;
	w->title = strdup("Terminal");
	w->app_class = strdup("Xfce4-terminal");
	w->width = 600, w->height = 400;
}
void desk_window_clear(struct desk_window *w)
{
	free(w->title);
	free(w->app_class);
	memset(w, 0, sizeof *w);
}
static int fake_id(unsigned long id, struct err *e)
{
	return id == 0x1200003 ? 0 : err_param(e, "id", "id: no such window");
}
int desk_window_close(struct desk *d, unsigned long id, struct err *e)
{
	return fake_id(id, e);
}
int desk_window_focus(struct desk *d, unsigned long id, struct err *e)
{
	return fake_id(id, e);
}
int desk_window_get(struct desk *d, unsigned long id, struct desk_window *out, struct err *e)
{
	if (fake_id(id, e) < 0)
		return -1;
	fake_window(out);
	return 0;
}
int desk_window_maximize(struct desk *d, unsigned long id, struct err *e)
{
	return fake_id(id, e);
}
int desk_window_minimize(struct desk *d, unsigned long id, struct err *e)
{
	return fake_id(id, e);
}
int desk_window_move(struct desk *d, unsigned long id, int x, int y, struct err *e)
{
	return fake_id(id, e);
}
int desk_window_resize(struct desk *d, unsigned long id, int width, int height, struct err *e)
{
	CHECK(width > 0 && height > 0);
	return fake_id(id, e);
}
int desk_window_wait_new(struct desk *d, const unsigned long *before, size_t n_before, int pid,
			 int timeout_ms, unsigned long *id, struct err *e)
{
	*id = 0;
	return 0;
}
int desk_windows(struct desk *d, struct desk_window **out, size_t *n, struct err *e)
{
	*out = calloc(1, sizeof **out);
	CHECK(*out);
	fake_window(*out);
	*n = 1;
	return 0;
}
void desk_windows_free(struct desk_window *w, size_t n)
{
	for (size_t i = 0; i < n; i++)
		desk_window_clear(&w[i]);
	free(w);
}
int a11y_tree(const struct a11y_opts *o, json_t **out, struct err *e)
{
	*out = json_pack("{s:s, s:[]}", "role", "desktop frame", "children");
	return 0;
}
int clipboard_get(struct clipboard *c, int timeout_ms, char **out, size_t *len, struct err *e)
{
	*out = strdup("clip");
	*len = 4;
	return 0;
}
int clipboard_set(struct clipboard *c, const char *utf8, size_t len, struct err *e)
{
	return 0;
}
int files_open_as(const struct run_as *as, const char *path, int flags, mode_t mode, struct err *e)
{
	return err_set(e, ERR_NOT_FOUND, "no file here");
}
int files_read(const struct run_as *as, const char *path, size_t max_len, char **out, size_t *len,
	       struct err *e)
{
	CHECK(path);
	*out = strdup("content");
	*len = 7;
	return 0;
}
int files_write(const struct run_as *as, const char *path, const void *data, size_t len, int mode,
		struct err *e)
{
	CHECK(path);
	return 0;
}
int launch_app(const struct launch_opts *o, pid_t *pid, struct err *e)
{
	CHECK(o->app);
	*pid = 4242;
	return 0;
}
int screen_capture(struct desk *d, const struct screen_opts *o, struct screen_image *out,
		   struct err *e)
{
	memset(out, 0, sizeof *out);
	out->data = (unsigned char *)strdup("\x89PNG");
	out->len = 4;
	out->width = 1, out->height = 1;
	out->scale = 1.0;
	out->mime = "image/png";
	return 0;
}
void session_set_screen_size(struct session *s, int width, int height)
{
}
int shell_run(const struct shell_opts *o, struct shell_result *r, struct err *e)
{
	memset(r, 0, sizeof *r);
	r->out = strdup("");
	r->err = strdup("");
	return 0;
}
void shell_result_free(struct shell_result *r)
{
	free(r->out);
	free(r->err);
	memset(r, 0, sizeof *r);
}

int pkg_apt(const struct pkg_apt_plan *plan, int out_fd, int err_fd, const struct pkg_who *who,
	    int64_t deadline_ms, struct pkg_run *r, struct err *e)
{
	CHECK(plan->nnames > 0 && strcmp(plan->command, "install") == 0);
	for (int i = 0; i < plan->nnames; i++)
		CHECK(pkg_debian_name_ok(plan->names[i]));
	memset(r, 0, sizeof *r);
	return 0;
}
int pkg_user_tool(const char *tool, const char *const *specs, size_t n, const struct run_as *as,
		  const struct pkg_who *who, int64_t deadline_ms, struct pkg_run *r, struct err *e)
{
	CHECK(n > 0);
	for (size_t i = 0; i < n; i++)
		CHECK(strcmp(tool, "pip") == 0 ? pkg_pip_spec_ok(specs[i])
					       : pkg_npm_spec_ok(specs[i]));
	memset(r, 0, sizeof *r);
	return 0;
}
void pkg_run_free(struct pkg_run *r)
{
	free(r->output);
	memset(r, 0, sizeof *r);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct fz f = {data, size};
	char *name = fz_str(&f, NULL);
	const struct action *a = action_find(name);
	free(name);
	if (!a)
		return 0;
	json_t *params = json_loadb((const char *)f.p, f.n, JSON_REJECT_DUPLICATES, NULL);
	if (!params)
		return 0;
	struct envd env = {.display = ":99",
			   .desk = &the_desk,
			   .clipboard = &the_clipboard,
			   .run_as_uid = (uid_t)-1,
			   .run_as_gid = (gid_t)-1,
			   .guest = true,
			   .max_body = 1u << 20,
			   .max_read_file = 1u << 20};
	struct action_reply reply = {0};
	struct err e = {0};
	int rc = action_run(&env, a, params, &reply, &e);
	CHECK(rc == 0 || rc == -1);
	if (rc < 0) {
		CHECK(e.code != ERR_OK && e.message[0]);
		CHECK(err_http_status(e.code) >= 400);
		json_t *j = err_to_json(&e);
		CHECK(j);
		json_decref(j);
	} else {
		CHECK(reply.json || reply.body || reply.body_len == 0);
	}
	action_reply_free(&reply);
	json_decref(params);
	return 0;
}
