/*
 * mcp: the Model Context Protocol at /mcp, so MCP clients (agents, IDEs)
 * drive computers without writing HTTP.
 *
 * Transport: Streamable HTTP (revisions 2025-03-26, 2025-06-18, 2025-11-25),
 * JSON-RPC 2.0. Every POST carries one message (or, for 2025-03-26
 * clients, a batch) and is answered with application/json; notifications
 * and responses get 202 with no body. There is no server-initiated stream
 * (GET: 405) and no session (no Mcp-Session-Id is issued, so DELETE: 405):
 * every request carries the caller's API key and stands alone. A present
 * but unsupported MCP-Protocol-Version is a 400.
 *
 * Security: the API key authorizes as on the REST API (a workspace key sees
 * its workspace only). An Origin header, when present, must be this
 * server's own origin or one of the configured ones, else 403, before the
 * key is even looked at (DNS rebinding).
 *
 * Methods: initialize, ping, tools/list, tools/call, and notifications.
 * Tools: the computers' lifecycle, screenshot (image content), every envd
 * action, stream_url. Their input schemas and the argument checks come from
 * one table. A failing tool call is a result with isError (the API's
 * message), never a JSON-RPC error: those are for protocol faults.
 */
#ifndef CUBICLE_MCP_H
#define CUBICLE_MCP_H

#include "core.h"
#include "httpd.h"
#include "preview.h"
#include "runner.h"
#include "stream.h"

struct mcp;

/* origins: comma-separated Origins allowed besides the server's own, or
 * NULL. streams mints the stream tool's tokens, previews the preview and
 * CDP tools' (NULL: those answer 503); runner runs run_code (NULL: no
 * runner, the tool answers 503). */
struct mcp *mcp_create(struct core *core, struct streams *streams, struct previews *previews,
		       struct runner *runner, const char *origins, struct err *e);
void mcp_destroy(struct mcp *m);

/* The request headers mcp_handle() reads, for httpd_opts.extra_headers
 * (NULL-terminated; mcp_handle() expects them at the start of req->extra). */
extern const char *const mcp_extra_headers[];

/* Origin check (router, before authentication): -1 with ERR_FORBIDDEN. */
int mcp_check_origin(const struct mcp *m, const struct httpd_request *req, struct err *e);

/* A browser's CORS preflight (OPTIONS, no key) from an Origin that passed
 * mcp_check_origin(): 204 with what a POST may carry. */
void mcp_preflight(void *ctx, struct httpd_request *req, struct httpd_response *resp);

/* One request to /mcp by an authenticated caller (ws NULL for the admin).
 * Worker thread: tool calls block. */
void mcp_handle(struct mcp *m, const char *ws, struct httpd_request *req,
		struct httpd_response *resp);

#endif
