/*
 * mcp-tools: the tools /mcp offers, from one table: each tool's JSON Schema
 * (tools/list) and the checks of its arguments (tools/call) come from the
 * same parameter list, so the schema an agent reads is the one enforced.
 * Desktop actions are envd's, called through core_action_ok() like the REST
 * proxy; the rest call the core (the live streams for stream URLs, the
 * runner for run_code).
 */
#ifndef CUBICLE_MCP_TOOLS_H
#define CUBICLE_MCP_TOOLS_H

#include <jansson.h>

#include "core.h"
#include "preview.h"
#include "runner.h"
#include "stream.h"

/* Who calls, and with what. */
struct mcp_caller {
	struct core *core;
	struct streams *streams;
	struct previews *previews; /* NULL: no preview listener */
	struct runner *runner;	   /* NULL: this cubicled runs no code */
	const char *ws;		   /* NULL for the admin */
	const char *host;	   /* the Host header, for stream URLs */
};

/* {"tools":[...]} for tools/list (new reference). */
json_t *mcp_tools_list(void);

/*
 * Calls tool `name` with `args` (an object, or NULL for none) and returns
 * the CallToolResult: content (and structuredContent), with isError when
 * the call failed. NULL when there is no such tool.
 */
json_t *mcp_tools_call(const struct mcp_caller *c, const char *name, const json_t *args);

#endif
