/*
 * mcp: the Streamable HTTP transport and the JSON-RPC methods of /mcp (see
 * mcp.h); the tools themselves are in mcp-tools.c.
 */
#include "mcp.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "mcp-tools.h"

/* Newest first: initialize answers the client's revision if it is here,
 * else the newest. */
static const char *const mcp_versions[] = {"2025-11-25", "2025-06-18", "2025-03-26", NULL};

/* JSON-RPC error codes. */
enum {
	RPC_PARSE_ERROR = -32700,
	RPC_INVALID_REQUEST = -32600,
	RPC_METHOD_NOT_FOUND = -32601,
	RPC_INVALID_PARAMS = -32602,
};

const char *const mcp_extra_headers[] = {"mcp-protocol-version", NULL};

struct mcp {
	struct core *core;
	struct streams *streams;
	struct previews *previews;
	struct runner *runner;
	char **origins; /* allowed besides our own, NULL-terminated */
};

struct mcp *mcp_create(struct core *core, struct streams *streams, struct previews *previews,
		       struct runner *runner, const char *origins, struct err *e)
{
	struct mcp *m = calloc(1, sizeof *m);
	size_t n = 1;
	for (const char *p = origins; p && *p; p++)
		n += *p == ',';
	if (m)
		m->origins = calloc(n + 1, sizeof *m->origins);
	if (!m || !m->origins) {
		free(m);
		err_set(e, ERR_INTERNAL, "out of memory");
		return NULL;
	}
	m->core = core;
	m->streams = streams;
	m->previews = previews;
	m->runner = runner;
	char *copy = strdup(origins ? origins : ""), *save = NULL;
	size_t k = 0;
	for (char *o = strtok_r(copy, ",", &save); o && k < n; o = strtok_r(NULL, ",", &save))
		if (*o)
			m->origins[k++] = strdup(o);
	free(copy);
	return m;
}

void mcp_destroy(struct mcp *m)
{
	if (!m)
		return;
	for (char **o = m->origins; *o; o++)
		free(*o);
	free(m->origins);
	free(m);
}

/* ---- transport checks --------------------------------------------------------------- */

/* "http://HOST" or "https://HOST" where HOST is the Host header. */
static bool mcp_same_origin(const struct httpd_request *req)
{
	const char *o = req->origin;
	if (strncmp(o, "http://", 7) == 0)
		o += 7;
	else if (strncmp(o, "https://", 8) == 0)
		o += 8;
	else
		return false;
	return req->host[0] && strcasecmp(o, req->host) == 0;
}

int mcp_check_origin(const struct mcp *m, const struct httpd_request *req, struct err *e)
{
	if (!req->origin[0] || mcp_same_origin(req))
		return 0;
	for (char **o = m->origins; *o; o++)
		if (strcmp(*o, req->origin) == 0)
			return 0;
	return err_set(e, ERR_FORBIDDEN,
		       "Origin %.100s may not use this MCP endpoint (cubicled --mcp-origins lists "
		       "the ones that may)",
		       req->origin);
}

/* A configured cross-origin caller (a browser page) may read the answer. */
static void mcp_cors(const struct httpd_request *req, struct httpd_response *resp)
{
	if (!req->origin[0])
		return;
	httpd_add_header(resp, "access-control-allow-origin:", req->origin);
	httpd_add_header(resp, "vary:", "Origin");
}

void mcp_preflight(void *ctx, struct httpd_request *req, struct httpd_response *resp)
{
	(void)ctx;
	mcp_cors(req, resp);
	httpd_add_header(resp, "access-control-allow-methods:", "POST");
	httpd_add_header(resp, "access-control-allow-headers:",
			 "authorization, content-type, accept, mcp-protocol-version");
	httpd_add_header(resp, "access-control-max-age:", "600");
	resp->status = 204;
	resp->content_type = "text/plain";
}

/* Whether an Accept header admits application/json (absent: yes). */
static bool mcp_accepts_json(const char *accept)
{
	return !accept[0] || strstr(accept, "application/json") || strstr(accept, "*/*") ||
	       strstr(accept, "application/*");
}

static bool mcp_version_known(const char *v)
{
	for (size_t i = 0; mcp_versions[i]; i++)
		if (strcmp(mcp_versions[i], v) == 0)
			return true;
	return false;
}

/* ---- JSON-RPC --------------------------------------------------------------------------- */

static json_t *rpc_error(const json_t *id, int code, const char *message)
{
	return json_pack("{s:s, s:O, s:{s:i, s:s}}", "jsonrpc", "2.0", "id", id ? id : json_null(),
			 "error", "code", code, "message", message);
}

static json_t *rpc_result(const json_t *id, json_t *result)
{
	return json_pack("{s:s, s:O, s:o}", "jsonrpc", "2.0", "id", id, "result", result);
}

static json_t *mcp_initialize(const json_t *params)
{
	const char *asked = json_string_value(json_object_get(params, "protocolVersion"));
	const char *v = asked && mcp_version_known(asked) ? asked : mcp_versions[0];
	return json_pack(
	    "{s:s, s:{s:{s:b}}, s:{s:s, s:s, s:s}, s:s}", "protocolVersion", v, "capabilities",
	    "tools", "listChanged", 0, "serverInfo", "name", "cubicle", "title",
	    "cubicle computers", "version", CUBICLE_VERSION, "instructions",
	    "cubicle gives you Linux computers: create_computer (a desktop, or a headless "
	    "sandbox), then pass its id as computer_id. Look with screenshot, act with "
	    "left_click, type, key, scroll and the other actions (screen pixel coordinates), "
	    "run commands with bash or python, and delete_computer when done.");
}

/* One message in, its response out (NULL for notifications and responses). */
static json_t *mcp_message(struct mcp *m, const struct mcp_caller *c, const json_t *msg)
{
	if (!json_is_object(msg))
		return rpc_error(NULL, RPC_INVALID_REQUEST, "a JSON-RPC message is an object");
	const json_t *id = json_object_get(msg, "id");
	const json_t *method = json_object_get(msg, "method");
	const char *jsonrpc = json_string_value(json_object_get(msg, "jsonrpc"));
	bool id_ok = json_is_string(id) || json_is_integer(id);
	if (!jsonrpc || strcmp(jsonrpc, "2.0") != 0 || (id && !id_ok) ||
	    (method && !json_is_string(method)))
		return rpc_error(id_ok ? id : NULL, RPC_INVALID_REQUEST,
				 "not a JSON-RPC 2.0 request: needs \"jsonrpc\": \"2.0\", a string "
				 "method, and a string or integer id");
	if (!method) { /* a response to a request of ours: we send none */
		if (id && (json_object_get(msg, "result") || json_object_get(msg, "error")))
			return NULL;
		return rpc_error(id, RPC_INVALID_REQUEST, "a message needs a method");
	}
	if (!id) /* notifications: initialized, cancelled, ... nothing to do */
		return NULL;
	(void)m;
	const char *name = json_string_value(method);
	const json_t *params = json_object_get(msg, "params");
	if (params && !json_is_object(params))
		return rpc_error(id, RPC_INVALID_PARAMS, "params must be an object");
	if (strcmp(name, "initialize") == 0)
		return rpc_result(id, mcp_initialize(params));
	if (strcmp(name, "ping") == 0)
		return rpc_result(id, json_object());
	if (strcmp(name, "tools/list") == 0)
		return rpc_result(id, mcp_tools_list());
	if (strcmp(name, "tools/call") == 0) {
		const char *tool = json_string_value(json_object_get(params, "name"));
		const json_t *args = json_object_get(params, "arguments");
		if (!tool)
			return rpc_error(id, RPC_INVALID_PARAMS, "tools/call needs params.name");
		if (args && !json_is_object(args))
			return rpc_error(id, RPC_INVALID_PARAMS,
					 "params.arguments must be an object");
		json_t *res = mcp_tools_call(c, tool, args);
		if (!res) {
			char text[160];
			snprintf(text, sizeof text, "Unknown tool: %.100s (tools/list names them)",
				 tool);
			return rpc_error(id, RPC_INVALID_PARAMS, text);
		}
		return rpc_result(id, res);
	}
	char text[160];
	snprintf(text, sizeof text, "Method not found: %.100s", name);
	return rpc_error(id, RPC_METHOD_NOT_FOUND, text);
}

/* ---- HTTP --------------------------------------------------------------------------------- */

static void mcp_respond(struct httpd_response *resp, int status, json_t *body)
{
	if (body) {
		httpd_respond_json(resp, status, body);
		return;
	}
	resp->status = status;
	resp->content_type = "application/json";
}

void mcp_handle(struct mcp *m, const char *ws, struct httpd_request *req,
		struct httpd_response *resp)
{
	mcp_cors(req, resp);
	if (req->method != HTTPD_POST) {
		/* No server-initiated stream (GET), no session to end (DELETE). */
		httpd_add_header(resp, "allow:", "POST");
		mcp_respond(resp, 405,
			    rpc_error(NULL, RPC_INVALID_REQUEST,
				      req->method == HTTPD_GET
					  ? "this server sends no messages of its own: POST to /mcp"
					  : "/mcp answers POST (there are no sessions to end)"));
		return;
	}
	if (!mcp_accepts_json(req->accept)) {
		mcp_respond(resp, 406,
			    rpc_error(NULL, RPC_INVALID_REQUEST,
				      "this server answers application/json: Accept it"));
		return;
	}
	if (req->content_type[0] && strncasecmp(req->content_type, "application/json", 16) != 0) {
		mcp_respond(resp, 415,
			    rpc_error(NULL, RPC_INVALID_REQUEST,
				      "POST a JSON-RPC message as Content-Type: application/json"));
		return;
	}
	const char *version = req->extra[0];
	if (version[0] && !mcp_version_known(version)) {
		char text[200];
		snprintf(text, sizeof text,
			 "unsupported MCP-Protocol-Version %.40s (this server speaks %s, %s, %s)",
			 version, mcp_versions[0], mcp_versions[1], mcp_versions[2]);
		mcp_respond(resp, 400, rpc_error(NULL, RPC_INVALID_REQUEST, text));
		return;
	}
	json_error_t je;
	json_t *msg = json_loadb(req->body ? req->body : "", req->body_len, 0, &je);
	if (!msg) {
		char text[300];
		snprintf(text, sizeof text, "parse error: %s (line %d, column %d)", je.text,
			 je.line, je.column);
		mcp_respond(resp, 400, rpc_error(NULL, RPC_PARSE_ERROR, text));
		return;
	}
	struct mcp_caller c = {m->core, m->streams, m->previews, m->runner, ws, req->host};
	json_t *out;
	if (json_is_array(msg)) { /* a batch (2025-03-26) */
		out = json_array();
		for (size_t i = 0; i < json_array_size(msg); i++) {
			json_t *r = mcp_message(m, &c, json_array_get(msg, i));
			if (r)
				json_array_append_new(out, r);
		}
		if (json_array_size(msg) == 0)
			json_array_append_new(
			    out, rpc_error(NULL, RPC_INVALID_REQUEST, "an empty batch"));
		if (json_array_size(out) == 0) {
			json_decref(out);
			out = NULL;
		}
	} else {
		out = mcp_message(m, &c, msg);
	}
	/* A message that is no JSON-RPC at all is the HTTP request's fault. */
	bool bad = out && !json_is_array(out) && json_object_get(out, "error") &&
		   json_is_null(json_object_get(out, "id"));
	json_decref(msg);
	mcp_respond(resp, out ? (bad ? 400 : 200) : 202, out);
}
