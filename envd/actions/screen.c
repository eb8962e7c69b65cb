/*
 * Screen actions: screenshot (raw image bytes), screenshot_base64 (JSON),
 * get_screen_size, set_screen_size and get_cursor_position. Thin: parameters
 * in, desk calls (x11/screen.h, x11/input.h, x11/randr.h) out.
 *
 * Normalized cursor coordinates are x / (width - 1) and y / (height - 1), so
 * 0.0 is the first pixel, 1.0 the last one, and round(n * (width - 1)) gives
 * the pixel back exactly.
 */
#include <limits.h>
#include <stdlib.h>

#include "action.h"
#include "base64.h"
#include "input.h"
#include "params.h"
#include "screen.h"
#include "session.h"

static const char *const screen_formats[] = {"png", "jpeg", NULL};

/* Far outside any screen, small enough that x + width cannot overflow. */
#define SCREEN_COORD_LIMIT (1 << 24)

/* Reads the parameters shared by screenshot and screenshot_base64. */
static int screen_params(const json_t *params, struct screen_opts *o, struct err *e)
{
	*o = (struct screen_opts){.format = SCREEN_PNG, .quality = 80};
	int fmt = 0;
	if (param_enum(params, "format", screen_formats, &fmt, e) < 0)
		return -1;
	o->format = fmt == 1 ? SCREEN_JPEG : SCREEN_PNG;

	long long v;
	int r = param_int(params, "quality", 1, 100, &v, e);
	if (r < 0)
		return -1;
	if (r > 0)
		o->quality = (int)v;

	/* A region is all of x, y, width, height or none of them. */
	static const char *const region[] = {"x", "y", "width", "height"};
	int *dest[] = {&o->x, &o->y, &o->width, &o->height};
	int present = 0;
	const char *missing = NULL;
	for (int i = 0; i < 4; i++) {
		long long lo = i < 2 ? -SCREEN_COORD_LIMIT : 1;
		r = param_int(params, region[i], lo, SCREEN_COORD_LIMIT, &v, e);
		if (r < 0)
			return -1;
		if (r > 0) {
			*dest[i] = (int)v;
			present++;
		} else if (!missing) {
			missing = region[i];
		}
	}
	if (present > 0 && present < 4)
		return err_param(e, missing,
				 "%s: a region needs all of x, y, width and height; %s is missing",
				 missing, missing);
	o->region = present == 4;

	/* 0 means no limit, as in struct screen_opts. */
	r = param_int(params, "max_width", 0, SCREEN_COORD_LIMIT, &v, e);
	if (r < 0)
		return -1;
	if (r > 0)
		o->max_width = (int)v;
	r = param_int(params, "max_height", 0, SCREEN_COORD_LIMIT, &v, e);
	if (r < 0)
		return -1;
	if (r > 0)
		o->max_height = (int)v;

	/* An exact size: both or neither, and not with a maximum. */
	static const char *const out[] = {"out_width", "out_height"};
	int *odest[] = {&o->out_width, &o->out_height};
	for (int i = 0; i < 2; i++) {
		r = param_int(params, out[i], 1, SCREEN_COORD_LIMIT, &v, e);
		if (r < 0)
			return -1;
		if (r > 0)
			*odest[i] = (int)v;
	}
	if ((o->out_width > 0) != (o->out_height > 0))
		return err_param(e, out[o->out_width > 0],
				 "%s: out_width and out_height go together", out[o->out_width > 0]);
	if (o->out_width > 0 && (o->max_width > 0 || o->max_height > 0))
		return err_param(e, "out_width",
				 "out_width: an exact size (out_width, out_height) or a limit "
				 "(max_width, max_height), not both");
	return 0;
}

int act_screenshot(struct envd *env, const json_t *params, struct action_reply *reply,
		   struct err *e)
{
	struct screen_opts o;
	struct screen_image img;
	if (screen_params(params, &o, e) < 0 || screen_capture(env->desk, &o, &img, e) < 0)
		return -1;
	reply->body = img.data;
	reply->body_len = img.len;
	reply->content_type = img.mime;
	reply->width = img.width;
	reply->height = img.height;
	reply->scale = img.scale;
	return 0;
}

int act_screenshot_base64(struct envd *env, const json_t *params, struct action_reply *reply,
			  struct err *e)
{
	struct screen_opts o;
	struct screen_image img;
	if (screen_params(params, &o, e) < 0 || screen_capture(env->desk, &o, &img, e) < 0)
		return -1;
	char *b64 = base64_encode(img.data, img.len);
	free(img.data);
	if (!b64)
		return err_set(e, ERR_INTERNAL, "out of memory encoding the screenshot as base64");
	reply->json = json_pack("{s:s, s:s, s:s, s:i, s:i, s:f}", "image", b64, "mime_type",
				img.mime, "format", o.format == SCREEN_JPEG ? "jpeg" : "png",
				"width", img.width, "height", img.height, "scale", img.scale);
	free(b64);
	if (!reply->json)
		return err_set(e, ERR_INTERNAL, "out of memory building the screenshot answer");
	return 0;
}

int act_get_screen_size(struct envd *env, const json_t *params, struct action_reply *reply,
			struct err *e)
{
	int w, h;
	if (desk_screen_size(env->desk, &w, &h, e) < 0)
		return -1;
	reply->json = json_pack("{s:i, s:i}", "width", w, "height", h);
	return reply->json ? 0 : err_set(e, ERR_INTERNAL, "out of memory");
}

int act_set_screen_size(struct envd *env, const json_t *params, struct action_reply *reply,
			struct err *e)
{
	long long w, h;
	int sw, sh;
	if (param_need_int(params, "width", 1, SCREEN_COORD_LIMIT, &w, e) < 0 ||
	    param_need_int(params, "height", 1, SCREEN_COORD_LIMIT, &h, e) < 0 ||
	    desk_set_screen_size(env->desk, (int)w, (int)h, e) < 0 ||
	    desk_screen_size(env->desk, &sw, &sh, e) < 0)
		return -1;
	/* A supervised session restarts its X server at this size. */
	if (env->session)
		session_set_screen_size(env->session, sw, sh);
	reply->json = json_pack("{s:b, s:i, s:i}", "ok", 1, "width", sw, "height", sh);
	return reply->json ? 0 : err_set(e, ERR_INTERNAL, "out of memory");
}

int act_get_cursor_position(struct envd *env, const json_t *params, struct action_reply *reply,
			    struct err *e)
{
	int x, y, w, h;
	if (desk_cursor_position(env->desk, &x, &y, e) < 0 ||
	    desk_screen_size(env->desk, &w, &h, e) < 0)
		return -1;
	double nx = w > 1 ? (double)x / (w - 1) : 0.0;
	double ny = h > 1 ? (double)y / (h - 1) : 0.0;
	reply->json =
	    json_pack("{s:i, s:i, s:{s:f, s:f}}", "x", x, "y", y, "normalized", "x", nx, "y", ny);
	return reply->json ? 0 : err_set(e, ERR_INTERNAL, "out of memory");
}
