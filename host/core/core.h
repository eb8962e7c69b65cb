/*
 * core: the computers — their lifecycle, limits, idle timeouts and billing.
 *
 *   provisioning → running ⇄ stopped → deleted, and error (with a reason)
 *   (transient: starting, stopping, deleting)
 *
 * Every transition is written to the store before the driver acts, so a
 * restarted cubicled finds each computer where it was: core_open() adopts
 * the ones still running, finishes interrupted stops and deletes, and marks
 * the ones that died (error, with the reason) after cleaning them up. A
 * ticker thread moves the usage ledger forward every second and stops idle
 * desktops or deletes idle sandboxes. Callers are API worker threads;
 * `ws` is the caller's workspace, NULL for the admin (sees everything).
 */
#ifndef CUBICLE_CORE_H
#define CUBICLE_CORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <jansson.h>

#include "envd_client.h"
#include "err.h"
#include "store.h"
#include "template.h"

struct guest_net_list;
struct nodeauth;

/* A cluster of hosts behind one API (docs/cluster.md); etcd NULL = one host. */
struct core_cluster_config {
	const char *etcd;	   /* etcd's client URLs, "http://HOST:PORT,..." */
	const char *host_id;	   /* this host's id */
	const char *address;	   /* where the other hosts call this one: "IP:PORT" */
	int ttl_s;		   /* the membership lease (member.h) */
	struct nodeauth *nodeauth; /* signs this node's calls to the others */
	/* What this host offers to placement (0 = the machine's: its CPUs,
	 * memory, and the state directory's disk). */
	int vcpus;
	int64_t memory_mb, disk_mb;
	int cpu_overcommit_pct; /* vCPUs placed per 100 physical ones (0 = 400) */
};

struct core_config {
	const char *state_dir;	/* computers/<id>/, sessions/<id>/ live here */
	const char *images_dir; /* <images>/<desktop|sandbox>/ */
	struct store_rates rates;
	int default_idle_s;			 /* 600 */
	int default_max_running;		 /* per workspace, when the workspace sets none */
	int ready_timeout_s;			 /* boot → envd ready, then error (default 120) */
	int warm_small, warm_medium, warm_large; /* desktops kept started per size */
	/* What a guest or a tenant may make cubicled store (0 = the default). */
	int default_max_stopped;      /* stopped computers per workspace: 20 */
	uint64_t spool_max_workspace; /* spooled file transfers of one workspace: 4 GiB */
	uint64_t spool_max;	      /* spooled file transfers of everyone: 16 GiB */
	uint64_t spool_min_free;      /* free space the spool leaves on its disk: 1 GiB */
	uint64_t session_quota;	      /* a workspace's session disk: 10 GiB; 0 = none */
	/* --egress-allow, --egress-deny (guest-net.h): every computer's, with
	 * its workspace's egress_allow/egress_deny added at each start. */
	const struct guest_net_list *egress_allow, *egress_deny; /* NULL = none */
	/* Templates (template.h): where they are cached, their limits. */
	struct core_template_config templates;
	/* Sessions on a path every host of a cluster mounts (docs/cluster.md,
	 * "Sessions"); NULL = <state_dir>/sessions, this host's own. */
	const char *sessions_dir;
	struct core_cluster_config cluster;
	/* The body of every start's POST /v1/setup (guest-setup.h: the
	 * operator's CA certificates, pip index, npm registry); NULL = none. */
	const char *guest_setup;
	/* --guest-sizes off: containers show the host's sizes (driver.h). */
	bool host_sizes;
	/* Screen recordings (recordings.c; 0 = the default). */
	const char *recorder;	   /* the cubicle-record executable ("" = none: 503) */
	int record_fps;		   /* frames a second at most: 10 */
	int record_max_s;	   /* the longest recording: 3600 */
	uint64_t record_max_bytes; /* the largest file: 1 GiB */
	int record_per_computer;   /* recordings of one computer at once: 1 */
	int record_per_host;	   /* recordings at once, all computers: 4 */
	int record_keep_days;	   /* a kept recording is deleted this long after it stopped: 30 */
	unsigned record_uid;	   /* the recorder's uid and gid: 65534 */
};

struct core;

/* Opens the core over an open store and recovers every computer. */
struct core *core_open(const struct core_config *cfg, struct store *store, struct err *e);
/*
 * Ends the core's own activity before the API goes: the ticker, the boots
 * and idle operations in flight (they may still tell the API to close
 * streams), and the warm pool's unclaimed desktops. -1 if operations are
 * still running after 30 s. core_close does it too if it was not done.
 */
int core_quiesce(struct core *c);
/* core_quiesce if not done, then frees the core (left allocated when
 * operations still run). Computers keep running: a restarted cubicled
 * adopts them. */
void core_close(struct core *c);

/* POST /v1/computers: validates params, records the computer (provisioning)
 * and boots it in the background. *out is its JSON. */
int core_create(struct core *c, const char *ws, const json_t *params, json_t **out, struct err *e);
int core_get(struct core *c, const char *id, const char *ws, json_t **out, struct err *e);
/* {"computers":[...]} filtered by state and kind (NULL = any). */
int core_list(struct core *c, const char *ws, const char *state, const char *kind, json_t **out,
	      struct err *e);
/* These return once done (the computer's JSON in *out). */
int core_stop(struct core *c, const char *id, const char *ws, json_t **out, struct err *e);
int core_start(struct core *c, const char *id, const char *ws, json_t **out, struct err *e);
int core_delete(struct core *c, const char *id, const char *ws, json_t **out, struct err *e);

/* Waits until the computer is in `state` (or error/deleted, which end the
 * wait too) for up to timeout_s; *out is its JSON then. ERR_TIMEOUT else. */
int core_wait(struct core *c, const char *id, const char *ws, enum computer_state state,
	      int timeout_s, json_t **out, struct err *e);

/*
 * core_wait in pieces, for a caller that waits without a thread per wait
 * (the API parks ?wait= requests): core_wait_begin checks the computer
 * exists for ws (store) and fills the state the store has; core_wait_over
 * says, from memory only, whether the wait is over (the computer is in
 * `state`, error or deleted; `stored` is what core_wait_begin filled);
 * core_await_change blocks until the next state change of any computer or
 * timeout_ms, whichever first (it may return early).
 */
int core_wait_begin(struct core *c, const char *id, const char *ws, enum computer_state *stored,
		    struct err *e);
bool core_wait_over(struct core *c, const char *id, enum computer_state state,
		    enum computer_state stored, enum computer_state *now);
void core_await_change(struct core *c, int timeout_ms);

/* Whether this host holds computer id (runs it or keeps it stopped here),
 * from memory only (the API's router asks on its loop). On one host, every
 * computer is its own: always true. */
bool core_holds(struct core *c, const char *id);

/* Proxies an action to the computer's envd; counts as activity. A display
 * action on a sandbox is ERR_CONFLICT; a computer not running likewise. */
int core_action(struct core *c, const char *id, const char *ws, const char *action,
		const char *body, size_t len, struct envd_reply *r, struct err *e);
/* core_action for callers inside cubicled (MCP, computer-use): an error
 * answer from envd is -1 with e filled from it, so *r is always a success
 * (freed by the caller). */
int core_action_ok(struct core *c, const char *id, const char *ws, const char *action,
		   const json_t *params, struct envd_reply *r, struct err *e);
/* The same for actions that answer JSON: *out is the parsed answer. */
int core_action_json(struct core *c, const char *id, const char *ws, const char *action,
		     const json_t *params, json_t **out, struct err *e);
/*
 * The spool (file transfers on their way between a client and a guest) is
 * disk the tenants and guests make cubicled use: every byte spooled is
 * reserved first against the workspace's and the server's quotas and the
 * spool disk's free space. ERR_NO_SPACE (507) naming the quota; released
 * when the transfer's file is gone. `ws` is the workspace charged (NULL:
 * the admin's own).
 */
int core_spool_reserve(struct core *c, const char *ws, uint64_t bytes, struct err *e);
void core_spool_release(struct core *c, const char *ws, uint64_t bytes);

/* Calls a host of a cluster serves whole for the computers it holds
 * (previews, CDP, recordings: their tokens, URLs and files are the
 * holder's). With one host, or when this host holds computer id (or no host
 * does), both return 1: serve it here. Otherwise the call goes to the holder
 * (signed, as workspace ws) and its answer is the caller's:
 *  - core_forward_json: 0 with *out when it answered ok_status, -1 with e
 *    from any other answer (its error code and message) or from no answer;
 *  - core_forward_get: GET path into fd, whatever the status (0 and
 *    *status), spooled like core_file_get (release *spooled against
 *    spool_ws once fd is gone). */
/* Whether this host is one of a cluster (core_forward_* can go elsewhere). */
bool core_in_cluster(const struct core *c);
int core_forward_json(struct core *c, const char *id, const char *ws, const char *method,
		      const char *path, const json_t *body, int ok_status, json_t **out,
		      struct err *e);
int core_forward_get(struct core *c, const char *id, const char *ws, const char *path, int fd,
		     char spool_ws[40], uint64_t *spooled, int *status, struct err *e);

/* Files: GET into fd (spooled against the computer's workspace's quota:
 * *spooled says how many bytes were reserved, to release with
 * core_spool_release(c, spool_ws, *spooled) once fd is gone) / PUT from fd
 * (len bytes). */
int core_file_get(struct core *c, const char *id, const char *ws, const char *path, int fd,
		  char spool_ws[40], uint64_t *spooled, struct envd_reply *r, struct err *e);
int core_file_put(struct core *c, const char *id, const char *ws, const char *path, int fd,
		  uint64_t len, struct envd_reply *r, struct err *e);

/*
 * Session files without a computer: path is relative to the session
 * ("output/report.txt") and cannot leave it. GET opens for reading (fd and
 * size out), PUT writes fd's len bytes atomically. Sessions belong to a
 * workspace: ws NULL (admin) needs `workspace`.
 */
int core_session_open(struct core *c, const char *ws, const char *session, const char *path,
		      int *fd, uint64_t *size, struct err *e);
int core_session_write(struct core *c, const char *ws, const char *session, const char *path,
		       int from_fd, struct err *e);

int core_usage(struct core *c, const char *ws, int64_t from_ms, int64_t to_ms, json_t **out,
	       struct err *e);

/*
 * Deletes workspace ws: marked deleted and its keys revoked (one store
 * transaction: they answer 401 from then on), then each of its computers
 * deleted as DELETE /v1/computers/{id} does, then its templates. Its usage ledger stays,
 * queryable by the admin. *out: {"id","deleted":true,"computers":[ids]}.
 * ERR_NOT_FOUND for no such workspace; ERR_CONFLICT for the warm pool's.
 */
int core_workspace_delete(struct core *c, const char *ws, json_t **out, struct err *e);

/* ---- live streams -------------------------------------------------------------- */

/* Who closes a computer's streams when it stops or is deleted (the api). */
void core_on_close_streams(struct core *c, void (*fn)(void *ctx, const char *id), void *ctx);

/*
 * Whether a stream may open now: the computer exists in `ws`, runs, has a
 * display, and no revocation came after `issued` (Unix ms). Fills the
 * unix socket of its VNC server. ERR_FORBIDDEN / ERR_CONFLICT otherwise.
 */
int core_stream_target(struct core *c, const char *id, const char *ws, int64_t issued, char *path,
		       size_t len, struct err *e);

/* The issue time for a new token: now, but always after the last revocation
 * (a token minted in the revocation's millisecond must still work). */
int64_t core_stream_issue_ms(struct core *c, const char *id);

/* Refuses every token of the computer issued until now (streams close too),
 * also after a restart: the revocation is kept in the store until every
 * token it refuses has expired (CORE_STREAM_TOKEN_MAX_S). */
#define CORE_STREAM_TOKEN_MAX_S 86400 /* --stream-ttl-max's highest value */
void core_stream_revoke(struct core *c, const char *id);

/* A viewer opened (+1) or closed (-1) a stream: viewers keep it from idling. */
void core_viewer(struct core *c, const char *id, int delta);

/* ---- previews and CDP (host/api/preview.h) ---------------------------------------- */

#define CORE_PREVIEW_PORTS	 16    /* ports of one computer with a preview at once */
#define CORE_CDP_PORT		 9222  /* the desktop browser's DevTools (envd/cdp.h) */
#define CORE_ENVD_PORT		 7777  /* envd's own port in a microVM */
#define CORE_PREVIEW_TOKEN_MAX_S 86400 /* --preview-ttl-max's highest value */

/* Who closes a computer's relays when previews end (the api): sub is
 * "p<port>", "cdp", or NULL for all of them. */
void core_on_close_previews(struct core *c, void (*fn)(void *ctx, const char *id, const char *sub),
			    void *ctx);

/*
 * A preview of `port` of the running computer id (workspace ws, NULL = the
 * admin) until expires_ms, public (no token needed until then) or not.
 * *issued is the issue time for its token (after every revocation so far),
 * workspace the computer's. ERR_NOT_FOUND, ERR_CONFLICT (not running),
 * ERR_LIMIT (CORE_PREVIEW_PORTS ports already).
 */
int core_preview_open(struct core *c, const char *id, const char *ws, int port, bool public_,
		      int64_t expires_ms, int64_t *issued, char workspace[40], struct err *e);

/* Refuses every token of port (0: of every port, and CDP's) issued until
 * now, ends its public span and closes its relays; kept across a restart. */
int core_preview_revoke(struct core *c, const char *id, const char *ws, int port, struct err *e);

/* {"previews":[{"port","public","expires_at"}]}: the computer's previews
 * whose tokens may still work. */
int core_previews_list(struct core *c, const char *id, const char *ws, json_t **out, struct err *e);

/*
 * Whether a relay to port of computer id may open now (the event loop:
 * memory only). With a token (issued >= 0, its workspace ws): the computer
 * is ws's, runs, and no revocation came after issued. Without one (issued
 * < 0, ws NULL): the port is public now. A desktop's only for CDP_PORT.
 * Fills envd's address and token (and, public, when that ends).
 * ERR_UNAUTHORIZED (not public),
 * ERR_NOT_FOUND (gone), ERR_CONFLICT (not running, or no desktop),
 * ERR_FORBIDDEN (revoked); a token holder hears the state before the
 * revocation, a visitor without a token only what public ports say.
 */
int core_preview_target(struct core *c, const char *id, int port, const char *ws, int64_t issued,
			char *address, size_t alen, char *token, size_t tlen,
			int64_t *public_until_ms, struct err *e);

/*
 * POST .../cdp: the desktop's browser with its DevTools endpoint, started
 * or reused through envd (waits up to a minute). *out is envd's answer
 * {"port","browser_path","version","started"}; *issued and workspace as
 * for core_preview_open. The path and version are kept for core_cdp_info.
 */
int core_cdp(struct core *c, const char *id, const char *ws, json_t **out, int64_t *issued,
	     char workspace[40], struct err *e);
/* The loop's copy of the last core_cdp: the browser's path, and its version
 * as JSON text (malloc'd; the caller frees). -1 when there is none. */
int core_cdp_info(struct core *c, const char *id, char *path, size_t plen, char **version);

/* ---- machines you bring (docs/byo.md) -------------------------------------------- */

/*
 * POST /v1/connect-tokens: {"kind","name"?,"ttl_s"?,"metadata"?,"workspace"?}
 * → {"id","token","expires_at","kind","command"}; command dials base_url
 * ("http://HOST:PORT") with the token on envd's stdin.
 */
int core_connect_token(struct core *c, const char *ws, const json_t *params, const char *base_url,
		       json_t **out, struct err *e);

/*
 * The WebSocket upgrade of /v1/connect (the API's loop: memory only, never
 * SQLite). authorization is "Bearer <connect token | machine credential>":
 * a credential is checked here (ERR_UNAUTHORIZED when revoked), a connect
 * token's form only (it is redeemed on the link's thread, which refuses it
 * with a BYE). Fills the UNIX socket the tunnel goes to and the preamble
 * that names this upgrade. ERR_UNAVAILABLE when too many connect at once.
 */
int core_byo_admit(struct core *c, const char *authorization, const char *hostname, bool display,
		   int width, int height, char *path, size_t plen, char *preamble, size_t prelen,
		   struct err *e);

/* ---- hosts (GET /v1/hosts, drain, recreate: docs/cluster.md) ------------------------ */

/* This host's id: --host-id in a cluster, else its hostname's. */
const char *core_host_id(struct core *c);

/* {"hosts":[{"id","address","state","epoch","leader","lease_age_ms","capacity",
 * "allocated","computers","warm"}]}: a cluster's hosts from its database,
 * or this one host alone. */
int core_hosts(struct core *c, json_t **out, struct err *e);
/* Drains host (mode "wait", "move" or "off"): *out {"host":{...},
 * "moved":[ids]}. ERR_CONFLICT on one host. */
int core_host_drain(struct core *c, const char *host, const char *mode, json_t **out,
		    struct err *e);
/* Makes lost computer id again on another host (same id, metadata,
 * session; its disk is gone): *out its JSON, provisioning. ERR_CONFLICT
 * unless it is lost. */
int core_recreate(struct core *c, const char *id, const char *ws, json_t **out, struct err *e);

/* ---- a cluster's catalog, for the API's loop (memory only) ---------------------------- */

/* The address ("IP:PORT") of a host that is up; -1 when unknown or down. */
int core_host_address(struct core *c, const char *host, char *out, size_t len);
/* A stream-token key by id; the current one (which signs) with its id.
 * -1 when there is none (one host: the API's own key signs). */
int core_stream_key(struct core *c, const char *kid, unsigned char key[32]);
int core_stream_key_now(struct core *c, char kid[24], unsigned char key[32]);
/* Whether a stream token of computer id issued at `issued` was revoked,
 * on any host of the cluster (or this one). */
bool core_stream_revoked(struct core *c, const char *id, int64_t issued);
/* POST /v1/computers/{id}/boot: a node's call only (docs/cluster.md): boots
 * what the database placed on this host. */
int core_boot_placed(struct core *c, const char *id, json_t **out, struct err *e);

/* ---- recordings (recordings.c) ----------------------------------------------------- */

/*
 * A running desktop's screen into a WebM file, with the track of the actions
 * run meanwhile. params: {"keep"?: bool}. *out: the recording's JSON, once
 * its first picture is in. ERR_LIMIT past --recordings-per-computer or
 * --max-recordings; ERR_NO_SPACE when the workspace's storage cannot take
 * one; ERR_CONFLICT for a sandbox or a computer not running.
 */
int core_recording_start(struct core *c, const char *id, const char *ws, const json_t *params,
			 json_t **out, struct err *e);
/* Ends it (the file finished) and answers its JSON; params {"keep"?}. A
 * stopped one answers as it is (keep may still change). */
int core_recording_stop(struct core *c, const char *id, const char *ws, const char *rid,
			const json_t *params, json_t **out, struct err *e);
/* {"recordings": [...]} of computer id (also a deleted one's kept ones). */
int core_recording_list(struct core *c, const char *id, const char *ws, json_t **out,
			struct err *e);
/* The WebM file, opened for reading (ERR_CONFLICT while it records). */
int core_recording_open(struct core *c, const char *id, const char *ws, const char *rid, int *fd,
			uint64_t *size, struct err *e);
/* {"recording": {...}, "actions": [{"t_ms", "duration_ms", "action",
 * "params", "status"}, ...]} */
int core_recording_actions(struct core *c, const char *id, const char *ws, const char *rid,
			   json_t **out, struct err *e);
/* Stops it if it records, removes its files and its row. */
int core_recording_delete(struct core *c, const char *id, const char *ws, const char *rid,
			  json_t **out, struct err *e);

/* Prometheus text (malloc'd). */
char *core_metrics(struct core *c);

#endif
