/*
 * stream: live views of a desktop (docs/api.md "Live view").
 *
 * Stream tokens are minted here (POST /v1/computers/{id}/stream, and MCP's
 * stream tool), checked on the WebSocket upgrade of GET
 * /v1/computers/{id}/stream?token=, and the upgraded connection becomes a
 * tunnel (wire/httpd.h) to the computer's VNC socket. The embed page
 * (/embed/{id}) is served from the built web client. Revoking a computer's
 * streams, or stopping it, closes its open tunnels.
 *
 * Everything the tunnel router does runs on httpd's event loop: it only
 * verifies a signature and looks the computer up in core's memory (no
 * store, no guest); the connect to the VNC socket is non-blocking.
 *
 * The first line on the VNC socket is the gateway's, not the viewer's:
 * "cubicle-viewer view\n" or "cubicle-viewer control\n" (STREAM_PREAMBLE_*).
 * envd reads it before RFB starts and never sends a view connection the
 * clipboard nor takes its input: defense in depth behind rfbfilter, which
 * drops a view stream's input here already. Only the gateway reaches the
 * socket (containers: a host-side unix socket; microVMs: the host end of
 * the virtio-serial port cubicle.vnc), so only the gateway says the mode.
 */
#ifndef CUBICLE_API_STREAM_H
#define CUBICLE_API_STREAM_H

#include <stdbool.h>
#include <jansson.h>

#include "core.h"
#include "err.h"
#include "httpd.h"

struct streams;

#define STREAM_PREAMBLE_VIEW	"cubicle-viewer view\n"
#define STREAM_PREAMBLE_CONTROL "cubicle-viewer control\n"

struct streams_opts {
	const unsigned char *stream_key; /* TOKEN_KEY_BYTES: signs stream tokens */
	const char *web_dir;		 /* the built embed page (webclient/build) */
	const char *frame_ancestors;	 /* CSP frame-ancestors of the embed page */
	int stream_ttl_max_s;		 /* longest token lifetime a caller may ask for */
	int stream_max_s;		 /* longest an open stream lives */
	int per_computer; /* open streams one computer may have (0 = 8); 429 past it */
	/* A cluster (docs/cluster.md): node credentials sign relays to the host
	 * that holds a computer, and mark a relayed stream; NULL on one host. */
	struct nodeauth *nodeauth;
};

/* Registers with core (its streams close when a computer stops) and with h
 * (tunnels are closed through it). NULL when out of memory. */
struct streams *streams_create(struct core *core, struct httpd *h, const struct streams_opts *o);
void streams_destroy(struct streams *s);

/* The longest token lifetime a caller may ask for (seconds). */
int streams_ttl_max(const struct streams *s);

/*
 * A stream token for a running desktop and its URLs, as POST .../stream
 * answers: {"token","expires_at","ws_url","embed_url","view_only"}. `ws` is
 * the caller's workspace (NULL: the admin); `host` the Host the caller used.
 */
int streams_grant(struct streams *s, const char *id, const char *ws, const char *host,
		  long long ttl_s, bool view_only, json_t **out, struct err *e);

/* Refuses every token of computer id issued until now and closes its open
 * streams (the caller checked that it may see the computer). */
void streams_revoke(struct streams *s, const char *id);

/* Checks a stream URL's token (loop thread): 0 when a WebSocket upgrade of
 * this request would be accepted, else -1 with e saying why (401/403/404/409). */
int streams_check(struct streams *s, struct httpd_request *req, struct err *e);

/* The tunnel router (httpd_opts.tunnel) of GET /v1/computers/{id}/stream.
 * In a cluster a v2 token names the host that holds the computer: another
 * host's stream is relayed there (wire/httpd.h), which checks it all again;
 * a relayed stream (X-Cubicle-Node, req->extra[node_header]) is never
 * relayed further. */
int streams_tunnel(struct streams *s, struct httpd_request *req, struct httpd_tunnel *t,
		   struct err *e);
/* Which of req->extra[] holds X-Cubicle-Node (the api's header list). */
void streams_node_header(struct streams *s, int index);

/* GET /embed/{id} (the page) and /embed/assets/... (its files). */
void streams_embed(struct streams *s, struct httpd_request *req, struct httpd_response *resp);

#endif
