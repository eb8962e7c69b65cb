/*
 * webm: screen frames into a WebM file, VP8 through Debian's libvpx, muxed
 * by libavformat (FFmpeg's "webm" muxer), converted to YUV by libswscale.
 *
 * Frames carry their own time (milliseconds from the recording's start), so
 * a still screen is one frame held, not the same picture sent again: the
 * caller hands a frame only when the screen changed. The output descriptor
 * must be seekable (a regular file): the trailer writes the duration and
 * the cues (the index Chromium seeks with) back into the header.
 *
 * The encoder is tuned for a screen, not a film: realtime deadline, screen
 * content mode, constant quality capped by a bitrate, no frame ever dropped
 * (a dropped frame would lose a change for good: nothing sends it again),
 * a key frame at the start and then at most every WEBM_KEY_EVERY_MS of
 * frames, so a player can seek.
 *
 * Not thread-safe: one recording, one thread (cubicle-record's).
 */
#ifndef CUBICLE_RECORD_WEBM_H
#define CUBICLE_RECORD_WEBM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define WEBM_KEY_EVERY_MS 10000

struct webm;

struct webm_opts {
	int fd;		   /* the output, seekable, written from offset 0 */
	int width, height; /* the picture's size (1..4096 each) */
	int kbps;	   /* the bitrate cap, kbit/s (0: 4000) */
	int cq;		   /* the quality level, 0..63, lower is better (0: 10) */
	int cpu_used;	   /* libvpx's speed, 0..16, higher is faster (0: 10) */
};

/* Opens the encoder and writes the header. NULL with why[len] filled. */
struct webm *webm_open(const struct webm_opts *o, char *why, size_t len);

/*
 * Encodes one picture shown from time pts_ms on (strictly more than the
 * previous frame's): `bgrx` is width x height 32-bit pixels, bytes B, G, R,
 * X (the X server's 0x00RRGGBB little-endian), rows `stride` bytes apart.
 * `last`: the recording's last frame, never a key frame (it must fit the
 * room kept for the trailer). 0, or -1 with why filled (the output failed:
 * a full disk, the file size limit).
 */
int webm_frame(struct webm *w, const uint8_t *bgrx, size_t stride, int64_t pts_ms, bool last,
	       char *why, size_t len);

/* The bytes written so far and the frames encoded. */
uint64_t webm_bytes(const struct webm *w);
uint64_t webm_frames(const struct webm *w);

/* Writes the trailer (duration, cues) and frees w. 0, or -1 with why. */
int webm_close(struct webm *w, char *why, size_t len);

#endif
