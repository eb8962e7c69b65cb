/*
 * store-recordings: the rows of screen recordings (host/core/recordings.c
 * owns their files and their recorder processes). A row outlives its
 * computer when the recording is kept; its workspace and computer are the
 * access check. Same locking as store.h.
 */
#ifndef CUBICLE_STORE_RECORDINGS_H
#define CUBICLE_STORE_RECORDINGS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "store.h"

struct store_recording {
	char id[40], computer[40], workspace[40];
	char state[16];			/* "recording", "stopped" or "failed" */
	bool keep;			/* outlives its computer (until the retention rule) */
	int64_t started_ms, stopped_ms; /* Unix ms; stopped 0 while recording */
	int64_t duration_ms;
	uint64_t bytes, frames, actions;
	int width, height;
	char reason[32]; /* why it ended: stopped, max_duration, ... */
	char error[300]; /* what went wrong, "" when nothing did */
};

int store_recording_insert(struct store *s, const struct store_recording *r, struct err *e);
/* Writes every field but id, computer, workspace and started_ms. */
int store_recording_update(struct store *s, const struct store_recording *r, struct err *e);
int store_recording_delete(struct store *s, const char *id, struct err *e);

/*
 * The recordings that match, oldest first, into *out (malloc'd, *n of
 * them; free()): of computer (NULL = any) in workspace ws (NULL = any),
 * in state (NULL = any); kept ones that stopped before kept_before_ms only
 * when that is > 0.
 */
int store_recordings_find(struct store *s, const char *computer, const char *ws, const char *state,
			  int64_t kept_before_ms, struct store_recording **out, size_t *n,
			  struct err *e);

/* One by id, of computer and workspace ws (NULL = any): ERR_NOT_FOUND else. */
int store_recording_get(struct store *s, const char *id, const char *computer, const char *ws,
			struct store_recording *out, struct err *e);

/* The public JSON of a recording. */
json_t *store_recording_json(const struct store_recording *r);

#endif
