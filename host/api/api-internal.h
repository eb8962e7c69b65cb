/*
 * api-internal: what the router (api.c), the handlers (handlers.c) and the
 * ?wait= waiter (wait.c) share: the api's state, the caller a request
 * carries, the small request helpers and the handlers the router picks.
 *
 * Layers: the router is the only file that knows paths; handlers parse,
 * call the core (or streams, the runner, MCP, computer-use) and shape the
 * answer; nothing below host/api/ includes this.
 */
#ifndef CUBICLE_API_INTERNAL_H
#define CUBICLE_API_INTERNAL_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include <openssl/sha.h>

#include "api.h"
#include "httpd.h"
#include "mcp.h"
#include "preview.h"
#include "stream.h"

struct api_parked; /* wait.c */

/* Requests in flight of one workspace ("" = the callers without a key). */
struct api_tenant {
	struct api_tenant *next;
	char ws[40];
	int requests, waits;
};

#define API_TENANT_BUCKETS 64

struct api {
	struct core *core;
	struct store *store;
	struct httpd *httpd;
	struct mcp *mcp;
	unsigned char admin_hash[SHA256_DIGEST_LENGTH];
	char spool_dir[512];
	struct streams *streams;
	struct previews *previews; /* NULL without a relay listener */
	struct runner *runner;
	struct nodeauth *nodeauth; /* a cluster's node credentials, NULL on one host */
	int max_requests_ws, max_waits_ws;
	size_t max_body;
	pthread_mutex_t tenants_lock;
	struct api_tenant *tenants[API_TENANT_BUCKETS]; /* under tenants_lock */
	/* Parked waits; lock order: parked_lock, then the core's or httpd's. */
	pthread_mutex_t parked_lock;
	struct api_parked *parked; /* under parked_lock */
	bool waiter_stop;	   /* under parked_lock */
	bool waiter_started;
	pthread_t waiter;
	struct api_stats *stats; /* metrics.c */
	bool metrics_open;	 /* GET /metrics without a key (--metrics-open) */
};

/* Who is calling, decided by the router. */
struct api_caller {
	struct api *a;
	bool admin;
	char ws[40];  /* "" for the admin */
	char id[64];  /* the path's computer/workspace/session id */
	char sub[64]; /* the action name, or stop/start */
	int spool_fd;
	char spool_path[600];
	/* Spool bytes reserved for this request's transfer, released when the
	 * request is done (its spool file closed). */
	struct core *core;
	char spool_ws[40];
	uint64_t spooled;
	int counted; /* 0, or what api_tenant_enter counted: API_COUNT_* */
	char counted_ws[40];
	/* Forwarded by another node of the cluster (its credential, not a key,
	 * says who the caller is): never forwarded again. */
	bool forwarded;
	char from_host[64];
	int route; /* the route table's index (routes.h), -1 when none */
};

enum { API_COUNT_REQUEST = 1, API_COUNT_WAIT = 2 };

/* ---- request helpers (handlers.c) ------------------------------------------------ */

/* NULL for the admin (sees every workspace), else the caller's workspace. */
const char *api_ws(const struct api_caller *c);
/* The body as a JSON object ({} when empty); NULL with e (400) otherwise. */
json_t *api_body_json(struct httpd_request *req, struct err *e);
/* An unnamed file in the spool directory (O_TMPFILE), for a download. */
int api_tmpfile(struct api *a, struct err *e);
/* Answers status with the small JSON error a download wrote into fd. */
void api_error_from_fd(struct httpd_response *resp, int fd, int status);
/* Answers a download spooled into fd: 200 with the file (type), which the
 * response then owns, or the error status with the JSON it wrote (fd
 * closed). */
void api_answer_spooled(struct httpd_response *resp, int fd, int status, const char *type);
/* rc < 0: e's error; else `status` with out (stolen). */
void api_answer(struct httpd_response *resp, int rc, int status, json_t *out, const struct err *e);
/* A query integer in [lo, hi], or def; -1 with e naming it when malformed. */
int api_query_int(struct httpd_request *req, const char *name, long long lo, long long hi,
		  long long def, long long *out, struct err *e);
/* A query time (Unix seconds or UTC RFC 3339) in ms, or def. */
int api_query_time(struct httpd_request *req, const char *name, int64_t def, int64_t *out,
		   struct err *e);
/* Refuses a query parameter that is not in known (NULL-terminated). */
int api_query_known(struct httpd_request *req, const char *const *known, struct err *e);

/* ---- ?wait= (wait.c) ------------------------------------------------------------- */

/* ?wait=STATE&timeout_s=N, read and checked before the operation runs, so
 * a bad value changes nothing. */
struct api_wait {
	bool wait;		   /* false: answer at once */
	enum computer_state state; /* the one waited for (with error and deleted) */
	int timeout_s;
};

/* Reads ?wait= and ?timeout_s= (checked before the operation runs). */
int api_wait_parse(struct httpd_request *req, struct api_wait *w, struct err *e);
/*
 * After an operation that answered `out` (stolen): answers now, or, with
 * ?wait=, when the computer reaches the state. A wait that is not over at
 * once is parked: it holds no worker thread while it waits.
 */
void api_answer_wait(struct api *a, struct httpd_request *req, struct httpd_response *resp,
		     const struct api_wait *wt, const char *id, const char *ws, bool create,
		     json_t *out);
/* ?wait=ready on GET /v1/templates/{name}: answers now when template id
 * (of ws) is no longer building, else parks the request until it is or
 * timeout_s passes (504). */
void api_answer_wait_template(struct api *a, struct httpd_request *req, struct httpd_response *resp,
			      int timeout_s, const char *id);
/* The waiter thread (started by api_create, ended by api_destroy through
 * waiter_stop): answers every parked wait. */
void *api_waiter(void *arg);

/* ---- /metrics (metrics.c) ---------------------------------------------------------- */

int api_stats_open(struct api *a, struct err *e);
void api_stats_close(struct api *a);
/* httpd's on_done: a request's latency and error code, by route. */
void api_done(void *ctx, const struct httpd_request *req, const struct httpd_done *d);
/* The byte counters of live streams' tunnels (link false) or of machines'
 * links (true), for httpd_tunnel.bytes. */
_Atomic uint64_t *api_stream_bytes(struct api *a, bool link);

/* ---- handlers (handlers.c), picked by the router -------------------------------- */

void api_healthz(void *ctx, struct httpd_request *req,
		 struct httpd_response *resp); /* GET /healthz (no key) */
void api_metrics(void *ctx, struct httpd_request *req,
		 struct httpd_response *resp); /* GET /metrics (metrics.c): Prometheus text */
void api_openapi(void *ctx, struct httpd_request *req,
		 struct httpd_response *resp); /* GET /openapi.json (no key): docs/openapi.json */
void api_workspace(void *ctx, struct httpd_request *req,
		   struct httpd_response *resp); /* GET, PATCH /v1/workspaces/{id} */
void api_workspaces(void *ctx, struct httpd_request *req,
		    struct httpd_response *resp); /* GET, POST /v1/workspaces */
void api_keys(void *ctx, struct httpd_request *req,
	      struct httpd_response *resp); /* POST /v1/workspaces/{id}/keys */
void api_keys_list(void *ctx, struct httpd_request *req,
		   struct httpd_response *resp); /* GET /v1/workspaces/{id}/keys */
void api_key_delete(void *ctx, struct httpd_request *req,
		    struct httpd_response *resp); /* DELETE /v1/workspaces/{id}/keys/{key_id} */
void api_workspace_delete(
    void *ctx, struct httpd_request *req,
    struct httpd_response *resp); /* DELETE /v1/workspaces/{id}?confirm={id} */
void api_computers(void *ctx, struct httpd_request *req,
		   struct httpd_response *resp); /* GET, POST /v1/computers */
void api_computer(
    void *ctx, struct httpd_request *req,
    struct httpd_response *resp); /* GET, DELETE /v1/computers/{id}, POST .../stop, .../start,
				     .../recreate */
void api_action(void *ctx, struct httpd_request *req,
		struct httpd_response *resp); /* POST /v1/computers/{id}/actions/{name}: envd's
						 answer passed through */
void api_computer_use(void *ctx, struct httpd_request *req,
		      struct httpd_response *resp); /* POST /v1/computers/{id}/computer-use */
void api_mcp(void *ctx, struct httpd_request *req, struct httpd_response *resp); /* /mcp (keyed) */
void api_files(void *ctx, struct httpd_request *req,
	       struct httpd_response *resp); /* GET, PUT /v1/computers/{id}/files and
						/v1/sessions/{id}/files (?path=) */
void api_usage(void *ctx, struct httpd_request *req,
	       struct httpd_response *resp); /* GET /v1/usage */
void api_hosts(void *ctx, struct httpd_request *req,
	       struct httpd_response *resp); /* GET /v1/hosts (admin) */
void api_host_drain(void *ctx, struct httpd_request *req,
		    struct httpd_response *resp); /* POST /v1/hosts/{id}/drain (admin) */
void api_connect_tokens(void *ctx, struct httpd_request *req,
			struct httpd_response *resp); /* POST /v1/connect-tokens */
void api_run_handler(void *ctx, struct httpd_request *req,
		     struct httpd_response *resp); /* POST /v1/run */
void api_stream(void *ctx, struct httpd_request *req,
		struct httpd_response *resp); /* POST /v1/computers/{id}/stream */
void api_stream_revoke(void *ctx, struct httpd_request *req,
		       struct httpd_response *resp); /* POST /v1/computers/{id}/stream/revoke */
void api_previews(void *ctx, struct httpd_request *req,
		  struct httpd_response *resp); /* POST, GET /v1/computers/{id}/previews */
void api_preview_delete(
    void *ctx, struct httpd_request *req,
    struct httpd_response *resp); /* DELETE /v1/computers/{id}/previews/{port} */
void api_cdp(void *ctx, struct httpd_request *req,
	     struct httpd_response *resp); /* POST /v1/computers/{id}/cdp */
void api_recordings(void *ctx, struct httpd_request *req,
		    struct httpd_response *resp); /* /v1/computers/{id}/recordings[/{rid}[/stop|
						     /actions]] (recordings.c) */
void api_embed(void *ctx, struct httpd_request *req,
	       struct httpd_response *resp); /* GET /embed/... (no key: the token is in the URL) */
/* handlers-templates.c */
void api_templates(void *ctx, struct httpd_request *req,
		   struct httpd_response *resp); /* GET, POST /v1/templates */
void api_template(void *ctx, struct httpd_request *req,
		  struct httpd_response *resp); /* GET (?wait=ready), DELETE /v1/templates/{name} */
void api_template_log(void *ctx, struct httpd_request *req,
		      struct httpd_response *resp); /* GET /v1/templates/{name}/log?offset= */

#endif
