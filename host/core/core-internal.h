/*
 * What core.c (lifecycle), proxy.c (actions, files, the spool, stream
 * targets), sessions.c (session directories and files), session-disk.c
 * (each workspace's session disk) and pool.c (the warm pool) share.
 */
#ifndef CUBICLE_CORE_INTERNAL_H
#define CUBICLE_CORE_INTERNAL_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "core.h"
#include "driver.h"
#include "template.h"
#include "metrics.h"

/* The in-memory side of a computer that is not deleted: what the hot path
 * (proxying an action) needs without touching the database. */
struct core_rt {
	struct core_rt *next;
	char id[40], ws[40], kind[16], size[16], isolation[16];
	enum computer_state state;
	char address[320]; /* envd, "" until started */
	char vnc[320];	   /* a desktop's RFB socket, "" if none */
	char token[80];
	int idle_s;
	int viewers;	    /* open live streams: they count as activity */
	int64_t revoked_ms; /* stream tokens issued before this are refused */
	/* Previews (previews.c): ports with a public span or a revocation,
	 * and the revocation of every port's tokens and CDP's (a stop). */
	struct core_preview {
		int port; /* 0: a free slot */
		int64_t public_since_ms, public_until_ms, revoked_ms;
		int64_t issued_ms;  /* its last token's issue time */
		int64_t expires_ms; /* the latest expiry of its tokens: kept until then */
	} previews[CORE_PREVIEW_PORTS];
	int64_t previews_revoked_ms;
	char cdp_path[100];	/* the browser's DevTools path, "" until core_cdp */
	char cdp_version[1024]; /* its /json/version (JSON text) */
	bool byo;		/* a machine you bring (byo.c) */
	char cred[65];		/* ... its credential's SHA-256, hex */
	int64_t last_activity_ms;
	bool activity_dirty;
	pthread_mutex_t op; /* one lifecycle operation at a time */
};

struct core {
	struct core_config cfg;
	/* Where sessions live: <state_dir>/sessions, or --sessions-dir (a path
	 * every host of a cluster mounts: then no session disks, the shared
	 * filesystem's own quota applies). */
	char sessions_root[512];
	char host_id[64]; /* core_host_id(): --host-id, or the hostname's */
	struct store *store;
	pthread_mutex_t lock;	/* rts and the counters */
	pthread_cond_t changed; /* broadcast on every state change */
	struct core_rt *rts;

	pthread_t ticker;
	int wake[2];
	int quiesced;	/* core_quiesce: 0 not yet, 1 done, -1 operations still ran */
	int background; /* boot / idle threads still running */

	struct core_stats *stats; /* /metrics (metrics.c): lock-free counters */

	char pool_ws[40];      /* the warm pool's own workspace, "" without a pool */
	int64_t pool_retry_ms; /* the pool starts nothing before this (a desktop failed) */

	/* Spooled bytes per workspace ("" = the admin), under lock. */
	struct core_spool {
		struct core_spool *next;
		char ws[40];
		uint64_t used;
	} * spools;
	uint64_t spool_used;

	struct byo *byo; /* connected machines (byo.c), NULL when off */

	struct core_templates *tpl;   /* templates (template.c) */
	struct core_cluster *cluster; /* a cluster's side (cluster.c), NULL on one host */

	/* Live recordings (recordings.c): rec_lock guards the list and each
	 * one's descriptors; innermost (never held with c->lock or a store
	 * call). nrecs is read without it on the hot path. */
	pthread_mutex_t rec_lock;
	pthread_cond_t rec_changed; /* broadcast when a recording ends */
	struct core_rec *recs;
	int nrecs;
	int64_t rec_swept_ms; /* the last retention sweep */

	/* Closes a computer's live streams when it stops or goes away (api). */
	void (*close_streams)(void *ctx, const char *id);
	void *close_streams_ctx;
	/* Closes its preview and CDP relays (api). */
	void (*close_previews)(void *ctx, const char *id, const char *sub);
	void *close_previews_ctx;
};

/* A create, parsed and checked once by core_create (the pool takes it as
 * it is: nothing re-reads the request's JSON). */
struct core_create_req {
	/* kind, size, isolation, workspace, width/height, idle_timeout_s,
	 * metadata (owned), external_workspace_id, session_id */
	struct store_computer sc;
	const struct driver_ops *ops; /* the isolation's driver */
	bool resolution_given;	      /* else the default 1280x800 */
	char host[64];		      /* a cluster: the admin's choice of host, "" = any */
};

/* metrics.c: what the core counts for /metrics, without a lock. */
enum core_life { CORE_BOOT, CORE_START, CORE_STOP, CORE_LIFE_N };
int core_stats_open(struct core *c, struct err *e);
void core_stats_close(struct core *c);
/* An action's round trip to envd (us), and its error code when it failed
 * (NULL: it answered 2xx). */
void core_stats_action(struct core *c, const char *action, int64_t us, const char *err_code);
/* A boot, start or stop of a computer of driver ops, that took us; ok or not. */
void core_stats_life(struct core *c, enum core_life op, const struct driver_ops *ops, int64_t us,
		     bool ok);
/* A create the warm pool could serve (a default desktop of a pooled size):
 * served from the pool (hit) or not. */
void core_stats_pool(struct core *c, const char *size, bool hit);

/* pool.c: keeps the warm pool filled (from the ticker) and hands a running
 * desktop out for a create that matches. */
void pool_tick(struct core *c);
/* Claims a pool desktop for the parsed create req (a desktop of the default
 * isolation); 1 and *out on success, 0 when none fits, -1 with e. */
int pool_claim(struct core *c, const struct core_create_req *req, json_t **out, struct err *e);
int pool_open(struct core *c, struct err *e);
void pool_drain(struct core *c);

/* The egress lists a computer (or a template's build) of workspace ws gets:
 * the server's --egress-allow/--egress-deny plus the workspace's (ws ""
 * or NULL: the server's alone). The lists were checked by the API; one
 * that no longer parses is left out, and said. */
struct guest_net_list;
void core_egress_lists(struct core *c, const char *ws, struct guest_net_list *allow,
		       struct guest_net_list *deny);

/* template.c: opened by core_open (after recovery: the templates still
 * building are built again, build directories of killed builds removed),
 * closed by core_quiesce (builds in flight stopped; they are built again
 * at the next start). */
int core_templates_open(struct core *c, const struct core_template_config *cfg, struct err *e);
void core_templates_close(struct core *c);
/* Frees them (core_close: after the API, whose waiter asks them, is gone). */
void core_templates_free(struct core *c);
/* A deleted workspace's templates go too (its computers are gone first). */
void core_templates_workspace_deleted(struct core *c, const char *ws);

/* How many computers workspace ws may run at once (its own limit, else the server's). */
int core_limit(struct core *c, const char *ws);
/* How many stopped computers workspace ws may keep (its own limit, else the server's). */
int core_stopped_limit(struct core *c, const char *ws);

/* The computer's public JSON. */
json_t *core_json_public(const struct store_computer *sc);
/* Loads computer id (of workspace ws, NULL = any) with its operation lock
 * held: unlock rt->op when done. */
int core_lock_computer(struct core *c, const char *id, const char *ws, struct store_computer *sc,
		       struct core_rt **rt, struct err *e);

/*
 * The computers of workspace ws (and of size `size`, unless NULL) whose
 * state is in the set `states` (COMPUTER_STATE_BIT()s), from the runtime records
 * (memory only; takes c->lock): how many there are, and the ids of the
 * first `max` copied into ids (which may be NULL when max is 0).
 */
int core_rt_select(struct core *c, const char *ws, const char *size, unsigned states,
		   char (*ids)[40], int max);

/* core.c, for byo.c: the runtime record of sc (added or refreshed), and a
 * state change with its usage switch (rate_state NULL: billing ends). */
struct core_rt *core_rt_add(struct core *c, const struct store_computer *sc);
int core_set_state_billed(struct core *c, struct store_computer *sc, enum computer_state state,
			  const char *error, const char *rate_state, int64_t at_ms, struct err *e);

/* byo.c: machines you bring. byo_open listens on <state>/byo.sock for the
 * links httpd's tunnel hands over; byo_disconnect sends machine id's link a
 * BYE with reason and waits (≤ 3 s) for it to end; byo_close stops
 * accepting. */
int byo_open(struct core *c, struct err *e);
void byo_disconnect(struct core *c, const char *id, const char *reason);
void byo_close(struct core *c);
static inline bool core_is_byo(const struct store_computer *sc)
{
	return strcmp(sc->isolation, "byo") == 0;
}

/* hosts.c: what a host offers and what a computer takes of it. */
struct core_capacity {
	int64_t millicpus, memory_mb, disk_mb;
};
void core_capacity(struct core *c, struct core_capacity *out);
void core_host_id_init(struct core *c);
void core_capacity_of(const char *kind, const char *size, struct core_capacity *out);
json_t *core_capacity_json(const struct core_capacity *cap);

/* ---- cluster.c: a cluster of hosts (docs/cluster.md); c->cluster NULL on one ---------- */

/* Joins (registers under an epoch, waiting up to a minute for etcd and
 * the database) when cfg.cluster.etcd is set; 0 and nothing otherwise. */
int core_cluster_open(struct core *c, struct err *e);
/* Stops membership, keeping the lease (a restart within its TTL adopts):
 * core_quiesce. core_cluster_free (core_close) frees the rest. */
void core_cluster_close(struct core *c);
void core_cluster_free(struct core *c);
/* The epoch while the lease is surely alive, else 0. */
int64_t core_cluster_epoch(struct core *c);
/* Fences this host (its tick touched no row): the member's thread stops
 * everything and registers anew. */
void core_cluster_fence(struct core *c, int64_t epoch, const char *why);
/* The fenced hook's work (core.c): every computer of this host stopped and
 * destroyed, the old epoch reaped in the database. */
void core_cluster_fenced(struct core *c, int64_t epoch, const char *why);
/* Refreshes the catalog from the database (the ticker, every second). */
void core_cluster_refresh(struct core *c);
/* The issue time for a new token of a computer held anywhere. */
int64_t core_cluster_issue_ms(struct core *c, const char *id);
/* A stream revocation, made here or (through the store) on any host:
 * remembered, and this host's streams of the computer closed when new. */
void core_cluster_revoked(struct core *c, const char *computer, int64_t revoked_ms);

/*
 * Where computer id is: 0 when this host serves it (it holds it, or nobody
 * does: the local path answers why), 1 with the holder's address, -1 with
 * e (ERR_NOT_FOUND for ws's caller, ERR_UNAVAILABLE when its host is down).
 */
int core_cluster_holder(struct core *c, const char *id, const char *ws, char *address, size_t alen,
			struct err *e);
void core_cluster_forget(struct core *c, const char *id);

/* A call to forward to the host that holds a computer: path and decoded
 * query fragments ("name=value"), signed as workspace ws (nodeauth.h). */
/* A download's reservations against the spool's quotas (core_spool_reserve),
 * for envd_download's and core_node_call's out_reserve: *reserved adds up
 * what was reserved, for core_spool_release once the file is gone. */
struct core_download {
	struct core *c;
	const char *ws;
	uint64_t *reserved;
};
int core_download_reserve(void *arg, uint64_t more, struct err *e);

struct core_node_call {
	const char *method;
	const char *path;
	const char *const *query;
	size_t nquery;
	const char *body; /* JSON, or NULL */
	size_t len;
	int body_fd; /* >= 0: upload body_fd_len bytes from here */
	uint64_t body_fd_len;
	int out_fd; /* >= 0: the answer's body (any status) goes here */
	int (*out_reserve)(void *arg, uint64_t more, struct err *e);
	void *out_reserve_arg;
	long timeout_ms;
};
/* 0 with the holder's answer in r (any status), 1 when this host serves
 * it, -1 with e. One retry after a 421 (it moved). */
int core_cluster_call(struct core *c, const char *id, const char *ws, struct core_node_call *q,
		      struct envd_reply *r, struct err *e);
/* core_cluster_call for a JSON answer: 0 and *out on ok_status, -1 with e
 * from any other answer, 1 when this host serves it. */
int core_cluster_json(struct core *c, const char *id, const char *ws, const char *method,
		      const char *path, const json_t *body, int ok_status, json_t **out,
		      struct err *e);

/* Boots sc where the database placed it (sc->host): here, or on the host
 * it names; when that host cannot, placed again elsewhere (a few hosts at
 * most). *out its JSON. */
int core_cluster_launch(struct core *c, struct store_computer *sc, json_t **out, struct err *e);
/* core_boot_placed's work (core.h). */
int core_cluster_boot(struct core *c, const char *id, json_t **out, struct err *e);

/* The cluster's side of GET /v1/hosts, drain and recreate. */
int core_cluster_hosts(struct core *c, json_t **out, struct err *e);
int core_cluster_drain(struct core *c, const char *host, const char *mode, json_t **out,
		       struct err *e);
int core_cluster_recreate(struct core *c, const char *id, const char *ws, json_t **out,
			  struct err *e);

/* core.c for cluster.c: a boot in the background; a computer of this host
 * stopped and its disk destroyed, marked lost in memory (the caller writes
 * the database); the computers of this host in memory. */
void core_boot_later(struct core *c, const char *id);
void core_lose_local(struct core *c, const char *id, const char *why);

/* previews.c: a stop, a delete or a death revokes every preview and CDP
 * token of the computer and closes their relays; core_open loads what the
 * store kept. */
void core_previews_down(struct core *c, const char *id);
int core_previews_load(struct core *c, struct err *e);
/* recordings.c: an action ran on computer id (its body, the answer's HTTP
 * status, its start and end on CLOCK_MONOTONIC in µs, envd's answer or
 * NULL): a line of the track of every recording of it, and, when the
 * answer says where the pointer is ("x", "y"), the recorder is told, to
 * draw the cursor there. Costs an atomic read when nothing records. */
void core_recordings_note(struct core *c, const char *id, const char *action, const char *body,
			  size_t len, int status, int64_t t_start_us, int64_t t_end_us,
			  const struct envd_reply *reply);
/* The computer stops or goes away: its recordings end (their files
 * finished); deleting also removes those not kept. */
void core_recordings_end(struct core *c, const char *id, bool deleting);
/* A deleted workspace's recordings' rows (its session disk, which held the
 * files, is gone). */
void core_recordings_forget_workspace(struct core *c, const char *ws);
/* core_open: the recordings a crash interrupted are marked stopped. */
int core_recordings_recover(struct core *c, struct err *e);
/* The ticker: kept recordings past --recording-keep-days (once a minute). */
void core_recordings_sweep(struct core *c);
/* core_quiesce: every recording ends, its file finished (≤ 15 s). */
void core_recordings_close(struct core *c);

/* The runtime record of id (lock held by the caller), or NULL. */
struct core_rt *core_rt_find(struct core *c, const char *id);

/*
 * The running computer `id` as the caller may see it, with its envd address
 * and token copied out; records activity. ERR_NOT_FOUND (other workspace or
 * missing), ERR_CONFLICT (not running).
 */
int core_rt_running(struct core *c, const char *id, const char *ws, char *address, size_t alen,
		    char *token, size_t tlen, char *kind, size_t klen, struct err *e);

/* session-disk.c: makes sure wsdir (sessions/<ws>) is workspace ws's session
 * disk, mounted (or leaves it a plain directory when the host cannot, and
 * says why in the log once). */
int core_session_disk(struct core *c, const char *ws, const char *wsdir, struct err *e);
/* Detaches every session disk's mount (a clean stop). */
void core_session_disks_release(struct core *c);
/* A deleted workspace's session disk: unmounted (detached: a computer still
 * holding it keeps it until it ends) and its image removed. ws is an
 * identifier (checked by the caller). */
void core_session_disk_remove(struct core *c, const char *ws);

/*
 * The host directory of session `session` of workspace ws, on its session disk, created with
 * input/, output/ and working/. ERR_INVALID (param "session") for a name
 * outside [A-Za-z0-9_-]{1,64}. e may be NULL.
 */
int core_session_dir_for(struct core *c, const char *ws, const char *session, char *out, size_t len,
			 struct err *e);

#endif
