/*
 * screen: capture the display (or a region), optionally downscale it, and
 * encode it as PNG or JPEG. Reads through MIT-SHM when the server offers it.
 */
#ifndef CUBICLE_DESK_SCREEN_H
#define CUBICLE_DESK_SCREEN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "desk.h"

enum screen_format { SCREEN_PNG, SCREEN_JPEG };

struct screen_opts {
	enum screen_format format;
	int quality; /* JPEG 1..100 (default 80); ignored for PNG */
	bool region; /* capture x, y, width, height instead of the whole screen */
	int x, y, width, height;
	int max_width, max_height; /* 0 = no limit; keeps the aspect ratio */
	/* Both > 0: exactly this size instead (x and y scaled separately, each
	 * at most the captured size); max_width/max_height are then ignored. */
	int out_width, out_height;
};

struct screen_image {
	unsigned char *data; /* encoded bytes, malloc'd: the caller frees */
	size_t len;
	int width, height; /* of the encoded image */
	double scale;	   /* encoded / captured width, 1.0 when not downscaled */
	const char *mime;  /* "image/png" or "image/jpeg" */
};

/* The region must lie inside the screen (ERR_INVALID naming the field). */
int screen_capture(struct desk *d, const struct screen_opts *o, struct screen_image *out,
		   struct err *e);

/*
 * Raw pixels, for tests and the VNC server: 0x00RRGGBB per pixel, row-major,
 * width*height entries, malloc'd (caller frees).
 */
int screen_grab_rgb(struct desk *d, int x, int y, int width, int height, uint32_t **pixels,
		    struct err *e);

#endif
