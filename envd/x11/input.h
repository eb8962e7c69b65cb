/*
 * input: mouse and keyboard through XTest, which every client accepts
 * (Firefox ignores XSendEvent). Each call returns once the X server has
 * processed the events (XSync), so a screenshot right after sees the effect.
 */
#ifndef CUBICLE_DESK_INPUT_H
#define CUBICLE_DESK_INPUT_H

#include <stdbool.h>
#include <stddef.h>

#include "desk.h"

enum desk_button {
	DESK_BUTTON_LEFT = 1,
	DESK_BUTTON_MIDDLE = 2,
	DESK_BUTTON_RIGHT = 3,
	DESK_BUTTON_BACK = 8, /* the side buttons browsers map to history */
	DESK_BUTTON_FORWARD = 9,
};

enum desk_scroll_dir { DESK_SCROLL_UP, DESK_SCROLL_DOWN, DESK_SCROLL_LEFT, DESK_SCROLL_RIGHT };

struct desk_point {
	int x, y;
};

int desk_cursor_position(struct desk *d, int *x, int *y, struct err *e);
int desk_move(struct desk *d, int x, int y, struct err *e);

/* Clicks `count` times (1..3) at `at`, or where the cursor is if at is NULL. */
int desk_click(struct desk *d, const struct desk_point *at, enum desk_button button, int count,
	       struct err *e);
/* Presses (down) or releases a button, after moving to `at` if given. */
int desk_button(struct desk *d, const struct desk_point *at, enum desk_button button, bool down,
		struct err *e);
/* Presses at path[0], moves through every point, releases at path[n-1],
 * spreading the moves over duration_ms (0 = as fast as possible). n >= 2. */
int desk_drag(struct desk *d, const struct desk_point *path, size_t n, int duration_ms,
	      enum desk_button button, struct err *e);
/* Wheel clicks at `at` (or the cursor). */
int desk_scroll(struct desk *d, const struct desk_point *at, enum desk_scroll_dir dir, int clicks,
		struct err *e);

/*
 * Types UTF-8 text exactly: characters missing from the keymap are bound to
 * spare keycodes for the occasion. delay_ms is the pause between characters.
 */
int desk_type(struct desk *d, const char *utf8, int delay_ms, struct err *e);

enum desk_key_action { DESK_KEY_TAP, DESK_KEY_DOWN, DESK_KEY_UP };

/* A key or a combination "ctrl+shift+t" (see keys.h for names); param names
 * the request parameter for error messages. */
int desk_key(struct desk *d, const char *combo, enum desk_key_action act, const char *param,
	     struct err *e);
/* Presses keys[0..n) in order, releases them in reverse. */
int desk_hotkey(struct desk *d, const char *const *keys, size_t n, struct err *e);

#endif
