/*
 * api: cubicled's REST API (docs/api.md) on wire/httpd.
 *
 * The router authenticates every request but /healthz, /openapi.json (and
 * /metrics with metrics_open): the
 * admin key (compared by digest in constant time) or a workspace key looked
 * up in the store (from memory: the router runs on the event loop and never
 * waits on SQLite). Workspace keys see only their workspace: another
 * workspace's computer answers 404, exactly like a missing one.
 *
 * One tenant cannot take every worker: a workspace has at most
 * max_requests_per_workspace requests and max_waits_per_workspace ?wait=
 * requests in flight (429 limit_reached + Retry-After past them), and the
 * requests without a key (/healthz, /openapi.json, /embed, CORS preflights)
 * share one such budget, so their sum stays below max_requests.
 */
#ifndef CUBICLE_API_H
#define CUBICLE_API_H

#include "core.h"
#include "runner.h"
#include "err.h"
#include "store.h"

struct api;

struct nodeauth;

struct api_opts {
	const char *listen;		 /* HOST:PORT */
	const char *admin_key;		 /* plaintext; only its digest is kept */
	const char *spool_dir;		 /* uploads are spooled here on their way to a computer */
	const unsigned char *stream_key; /* TOKEN_KEY_BYTES: signs stream tokens */
	const char *web_dir;		 /* the built embed page (webclient/build) */
	const char *frame_ancestors;	 /* CSP frame-ancestors of the embed page */
	int stream_ttl_max_s;		 /* longest token lifetime a caller may ask for */
	int stream_max_s;		 /* longest an open stream lives */
	int streams_per_computer;	 /* open streams one computer may have (0 = 8) */
	/* Previews and CDP (host/api/preview.h): where their relay listener
	 * listens (NULL: none), the URL browsers reach it at, and its limits. */
	const char *preview_listen;
	const char *preview_url;   /* NULL: http://localhost:<the listener's port> */
	int preview_ttl_max_s;	   /* longest preview or CDP token (0 = 86400) */
	int previews_per_computer; /* relays open at once per computer (0 = 32) */
	int preview_idle_s;	   /* a relay idle this long ends (0 = 300) */
	bool public_previews;	   /* public previews may be made */
	const char *mcp_origins;   /* Origins allowed on /mcp besides ours, comma-separated */
	struct runner *runner;	   /* the code runner (POST /v1/run); NULL = none */
	/* Request limits (docs/api.md, "Limits"); 0 = the default in brackets. */
	int max_requests;		/* handlers running at once, all callers [256] */
	int max_requests_per_workspace; /* requests in flight per workspace [32] */
	int max_waits_per_workspace;	/* ?wait= requests in flight per workspace [16] */
	int max_conns_per_addr;		/* open connections per client address [64] */
	size_t max_body;		/* JSON bodies of authenticated routes [1 MiB] */
	size_t max_body_anonymous;	/* bodies of routes without a key [4 KiB] */
	int header_timeout_s;		/* headers complete within [10] */
	int body_timeout_s;		/* a body arrives within this [30] ... */
	int body_min_rate;		/* ... + 1 s per this many bytes [16384] */
	/* A cluster (docs/cluster.md): calls another node forwards carry its
	 * credential (nodeauth.h) instead of a key; NULL on one host. */
	struct nodeauth *nodeauth;
	bool metrics_open; /* GET /metrics without a key (else: the admin key's) */
};

struct api *api_create(struct core *core, struct store *store, const struct api_opts *o,
		       struct err *e);
const char *api_address(const struct api *a);
/* Where previews and CDP are relayed from ("tcp:HOST:PORT"), "" if nowhere. */
const char *api_preview_address(const struct api *a);
int api_run(struct api *a);
void api_stop(struct api *a); /* async-signal-safe */
void api_destroy(struct api *a);

#endif
