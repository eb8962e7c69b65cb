/*
 * mux: many byte streams over one byte stream (the "link"), for a machine
 * that dials cubicled (bring your own machine, docs/byo.md).
 *
 * The link is a byte stream of frames; whatever carries it (a WebSocket in
 * practice, relayed to a socket by httpd's tunnel on cubicled's side and by
 * envd's connect thread on the machine's) may cut it anywhere:
 *
 *   type (1 byte) | stream id (4, big-endian) | length (4, big-endian) | payload
 *
 *   HELLO  1  host → machine, stream 0: JSON {"id","token","credential"?}
 *   OPEN   2  host → machine: a new stream to target (payload "http"|"vnc")
 *   DATA   3  either way: bytes of a stream, at most the credit the peer gave
 *   WINDOW 4  either way: 4-byte credit increment (bytes the sender of
 *             WINDOW has passed on to its local end)
 *   CLOSE  5  either way: the stream is over (after its DATA)
 *   PING   6, PONG 7: keepalive (stream 0, payload ≤ 8 bytes, echoed)
 *   BYE    8  host → machine: disconnected on purpose; payload the reason
 *
 * Only the host opens streams; ids are never reused. Each stream starts
 * with `window` bytes of credit each way, so a big file or a viewer has at
 * most that much in flight and the others' frames pass between its chunks
 * (streams are read in turn, a chunk each). The peer is untrusted: a frame
 * over max_frame, DATA past the credit, a stream id it may not use, a frame
 * type it may not send, a credit past 1 GiB, or silence for dead_ms ends
 * the link with the reason. Output waiting for the link is bounded: past
 * `out_high` bytes the link is not read (the peer's pings wait) and no
 * stream is read.
 *
 * One thread runs mux_run(); mux_bye() and mux_stop() may be called from
 * any thread.
 */
#ifndef CUBICLE_WIRE_MUX_H
#define CUBICLE_WIRE_MUX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum mux_type {
	MUX_HELLO = 1,
	MUX_OPEN = 2,
	MUX_DATA = 3,
	MUX_WINDOW = 4,
	MUX_CLOSE = 5,
	MUX_PING = 6,
	MUX_PONG = 7,
	MUX_BYE = 8,
};

#define MUX_HEADER    9
#define MUX_MAX_FRAME 65536 /* the largest payload either side sends */

/* Where a host stream's bytes come from: connections accepted on fd are
 * opened as streams to `target`. */
struct mux_listener {
	int fd; /* a listening socket, non-blocking */
	const char *target;
};

struct mux_opts {
	int link;  /* the link's socket (made non-blocking) */
	bool host; /* cubicled's side: opens streams from `listeners` */
	struct mux_listener listeners[4];
	int nlisteners;
	/* The machine's side: a new stream to `target` is a connected socket
	 * (non-blocking) or -1 (the stream is closed at once). */
	int (*dial)(void *ctx, const char *target);
	/* HELLO (machine) and BYE (machine): payload as received. */
	void (*on_control)(void *ctx, enum mux_type type, const unsigned char *p, size_t n);
	void *ctx;
	size_t window;	  /* credit per stream each way (0 = 256 KiB) */
	size_t max_frame; /* largest payload accepted (0 = MUX_MAX_FRAME) */
	int max_streams;  /* streams open at once (0 = 64); more are refused */
	int ping_ms;	  /* a PING after this much quiet (0 = 1000) */
	int dead_ms;	  /* the link is dead after this much silence (0 = 5000) */
	size_t out_high;  /* output waiting for the link (0 = 1 MiB) */
};

struct mux;

struct mux *mux_new(const struct mux_opts *o);
/* Queues a control frame (HELLO) before or while mux_run runs. 0 / -1 (too long). */
int mux_send(struct mux *m, enum mux_type type, const void *p, size_t n);
/* Runs until the link ends: 0 when mux_stop/mux_bye ended it, -1 else; why
 * (≤ len) says what ended it. Closes every stream; never closes the link. */
int mux_run(struct mux *m, char *why, size_t len);
/* Sends BYE with reason (flushed for at most a second), then ends mux_run. */
void mux_bye(struct mux *m, const char *reason);
void mux_stop(struct mux *m);
/* Streams open now, and frames refused so far (for tests and metrics). */
int mux_streams(struct mux *m);
void mux_free(struct mux *m);

#endif
