/*
 * store: everything cubicled must remember, behind one interface with two
 * back ends (host/store/README.md):
 *
 *   - SQLite, the default: one database file (WAL) in the state directory.
 *     One host, no other service; what `make run` uses.
 *   - PostgreSQL 15 through libpq (`cubicled --database postgresql://...`):
 *     the state a cluster of hosts shares (workspaces, keys, computers and
 *     the host that holds each, the ledger, hosts and their capacity,
 *     stream-token keys and revocations, connect tokens, code-run counts).
 *
 * Both run the same store code and the same SQL (one dialect layer,
 * store-db.h); tests/unit/test_store.c runs every case against both.
 *
 * The core writes a computer's new state here before it acts on it, so a
 * cubicled killed at any point finds, on restart, every computer and every
 * billed second again: a write that returned 0 is committed (SQLite: in the
 * WAL; PostgreSQL: synchronous_commit on). All functions are thread-safe
 * (one connection behind a mutex). Times are Unix milliseconds.
 *
 * PostgreSQL may go away (a restart, a failover): a call made while it is
 * unreachable fails at once with ERR_UNAVAILABLE (503) and a message that
 * says so, never blocks past a bounded deadline, and a later call
 * reconnects (with backoff). Nothing half-written stays: every multi-row
 * change is one transaction.
 */
#ifndef CUBICLE_STORE_H
#define CUBICLE_STORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <jansson.h>

#include "err.h"

struct store;

/*
 * Opens (creating and migrating) the database: `where` is a file path
 * (SQLite) or a "postgresql://" / "postgres://" URI (libpq's, e.g.
 * postgresql://cubicle@db.example/cubicle?host=/run/postgresql). Several
 * cubicleds may open one PostgreSQL database at once; the first migrates
 * it (under an advisory lock).
 */
struct store *store_open(const char *where, struct err *e);
void store_close(struct store *s);

/* Whether `where` names a PostgreSQL database (a postgresql:// or
 * postgres:// URI) rather than an SQLite file. */
bool store_where_is_postgres(const char *where);
/* "sqlite" or "postgresql". */
const char *store_backend(const struct store *s);
/* One round trip to the database: 0 when it answers (for /health). */
int store_ping(struct store *s, struct err *e);

/* ---- workspaces and keys ----------------------------------------------- */

/* A workspace's egress list in text: 32 prefixes of at most 18 bytes and commas. */
#define STORE_EGRESS_LEN 640

struct store_workspace {
	char id[40]; /* "ws-" + 16 hex */
	char name[128];
	int max_running; /* running computers allowed at once; 0 = the server default */
	int max_stopped; /* stopped computers allowed at once; 0 = the server default */
	int64_t created_ms;
	/* The egress policy's override (guest-net.h): IPv4 prefixes
	 * "a.b.c.d/len,..." added to cubicled's --egress-allow/--egress-deny;
	 * "" = none. The store keeps what it is given: the API checks them. */
	char egress_allow[STORE_EGRESS_LEN], egress_deny[STORE_EGRESS_LEN];
};

/* Creates a workspace; fills out (id generated). ERR_INVALID for an empty name. */
int store_workspace_create(struct store *s, const char *name, int max_running,
			   struct store_workspace *out, struct err *e);
/* The same with its egress lists (NULL = none); ERR_INVALID (param) for a
 * list longer than STORE_EGRESS_LEN - 1. */
int store_workspace_create_egress(struct store *s, const char *name, int max_running,
				  const char *egress_allow, const char *egress_deny,
				  struct store_workspace *out, struct err *e);
/* Replaces a workspace's egress lists; NULL keeps one as it is. ERR_NOT_FOUND
 * for an unknown workspace. Computers get the new policy at their next start. */
int store_workspace_set_egress(struct store *s, const char *id, const char *egress_allow,
			       const char *egress_deny, struct err *e);
/* ERR_NOT_FOUND when there is no such workspace. */
int store_workspace_get(struct store *s, const char *id, struct store_workspace *out,
			struct err *e);
/* All workspaces, oldest first, as a JSON array of store_workspace_json's. */
int store_workspace_list(struct store *s, json_t **out, struct err *e);
/* {"id","name","max_running","max_stopped","created_at" (Unix ms),
 *  "egress_allow":[...],"egress_deny":[...]} */
json_t *store_workspace_json(const struct store_workspace *w);
/* Sets a workspace's max_stopped (>= 0; 0 = the server default). */
int store_workspace_set_max_stopped(struct store *s, const char *id, int max_stopped,
				    struct err *e);

/*
 * Creates an API key for a workspace (workspace_id NULL = an admin key).
 * The plaintext key ("ck_" + 48 hex) goes to key_out once and is never
 * stored: the database keeps its SHA-256. ERR_NOT_FOUND for an unknown
 * workspace.
 */
int store_key_create(struct store *s, const char *workspace_id, char key_out[64], struct err *e);

/*
 * Looks a presented key up (constant time in the key's content). Fills the
 * workspace it belongs to ("" for an admin key) and *admin. ERR_UNAUTHORIZED
 * for an unknown or revoked key. Answers from memory, never waiting for
 * the database or another store call (safe on an event loop): the table of
 * valid keys is rebuilt by the very call that changes api_keys or
 * workspaces (revoking, deleting, creating), before that call returns. With
 * PostgreSQL, a change another host made is in the table within a second:
 * a trigger NOTIFYs, a listener connection rebuilds it (and a rebuild each
 * second while the listener is down). ERR_UNAVAILABLE when the table could
 * not be loaded (no key is trusted then).
 */
int store_key_lookup(struct store *s, const char *key, char workspace_out[40], bool *admin,
		     struct err *e);

/* Revokes a key (given in plaintext; revoking twice is fine): lookups of it
 * fail from now on. ERR_NOT_FOUND for a key that was never created. */
int store_key_revoke(struct store *s, const char *key, struct err *e);

/* What the admin sees of a key: never the key itself. */
#define STORE_KEY_PREFIX_SHOWN 11 /* "ck_" + 8 hex digits (32 of its 192 random bits) */
struct store_key_info {
	char id[32];	 /* "key-N" */
	char prefix[16]; /* the key's first STORE_KEY_PREFIX_SHOWN characters */
	int64_t created_ms;
};

/* store_key_create that also fills *info (NULL = not wanted). */
int store_key_issue(struct store *s, const char *workspace_id, char key_out[64],
		    struct store_key_info *info, struct err *e);

/* A workspace's valid keys, oldest first, as a JSON array of
 * {"id","prefix","created_at","last_used_at"} (Unix ms; last_used_at null
 * when never used). Lookups record the last use at most once a minute per
 * key, so it is exact to a minute. ERR_NOT_FOUND for no such (or a
 * deleted) workspace. */
int store_key_list(struct store *s, const char *workspace_id, json_t **out, struct err *e);

/* Revokes key key_id ("key-N") of the workspace: its lookups fail from the
 * moment this returns. ERR_NOT_FOUND for an unknown id, one of another
 * workspace, or one already revoked. */
int store_key_revoke_id(struct store *s, const char *workspace_id, const char *key_id,
			struct err *e);

/*
 * Marks a workspace deleted and revokes its keys, in one transaction: it is
 * gone from store_workspace_get/list (and so from creates and key issues),
 * while its row, its computers' rows and its usage ledger stay (usage stays
 * queryable by the admin). Its computers are the caller's to delete.
 * ERR_NOT_FOUND for no such (or an already deleted) workspace.
 */
int store_workspace_delete(struct store *s, const char *id, struct err *e);

/* Rebuilds the in-memory key table before returning. Store calls that
 * change api_keys or workspaces do this by themselves; this is for
 * anything that changes who may authenticate some other way. */
void store_keys_invalidate(struct store *s);

/* ---- computers ---------------------------------------------------------- */

/* A computer's state. The database and the API's JSON spell it as
 * computer_state_name() does ("running"); code compares the enum, so the
 * compiler checks that a switch handles every state. */
enum computer_state {
	COMPUTER_PROVISIONING,
	COMPUTER_RUNNING,
	COMPUTER_STOPPING,
	COMPUTER_STOPPED,
	COMPUTER_STARTING,
	COMPUTER_DELETING,
	COMPUTER_DELETED,
	COMPUTER_ERROR,
	COMPUTER_OFFLINE, /* a machine you bring whose link is down (docs/byo.md) */
	/* Its host died (its lease expired: a cluster's reaper, store_host_reap)
	 * or re-registered without adopting it: nothing of it runs, billing
	 * ended at the host's last tick, its reservation is freed. Left by a
	 * delete, or by re-creating it on another host (store_place). */
	COMPUTER_LOST,
};
#define COMPUTER_STATES	      10	  /* how many there are */
#define COMPUTER_STATE_BIT(s) (1u << (s)) /* for sets of states */

/* "provisioning", "running", ...; "?" for a value that is not a state. */
const char *computer_state_name(enum computer_state s);
/* The state spelled `name` (exactly); 0, or -1 when it names none. */
int computer_state_parse(const char *name, enum computer_state *out);

/* What a computer takes on a host, for placement: CPU in thousandths of a
 * vCPU, memory and disk in MiB. */
struct store_capacity {
	int64_t cpu_milli, mem_mb, disk_mb;
};

#define STORE_HOST_ID_LEN 64

struct store_computer {
	char id[40]; /* "c-" + 16 hex, generated by store_computer_insert */
	char workspace[40];
	char kind[16];	    /* desktop | sandbox */
	char size[16];	    /* xs sm md lg xl | small medium large */
	char isolation[16]; /* container | vm */
	enum computer_state state;
	char error[512]; /* why, when state is error */
	int width, height;
	int idle_timeout_s;
	char external_workspace_id[128];
	char session_id[64]; /* "" when none */
	char envd_token[80];
	char accel[8];	      /* "" | kvm | tcg */
	char template_id[40]; /* the template it was made from ("tpl-..."), or "" */
	json_t *metadata;     /* object, owned by the struct */
	json_t *driver_state; /* object, owned by the struct */
	int64_t created_ms, updated_ms, last_activity_ms, deleted_ms;
	/* Where it lives (a cluster; "" and 0 on one host): the host that holds
	 * it and that host's epoch (its lease) when it took it, and what it
	 * holds there now. Read-only for callers: only placement
	 * (store_place, store_commit.place), the release that follows a state
	 * change, a host's re-registration and the reaper write them; an
	 * update ignores what the struct says. */
	char host[STORE_HOST_ID_LEN];
	int64_t epoch;
	struct store_capacity reserved;
};

/* Frees the JSON members (not the struct). */
void store_computer_clear(struct store_computer *c);

/* Inserts c (c->id is generated and written back; created/updated set;
 * NULL metadata/driver_state are stored as {} and set to fresh {} objects).
 * c is unchanged on failure. ERR_INVALID (param "workspace") when the
 * workspace does not exist. */
int store_computer_insert(struct store *s, struct store_computer *c, struct err *e);

/* Writes every column of c (by c->id); updated_ms is set to now; c is
 * unchanged on failure. */
int store_computer_update(struct store *s, struct store_computer *c, struct err *e);

/* How to choose a host and what to reserve on it (store_place). */
struct store_place {
	struct store_capacity need;
	/* NULL: any host that is up (the one with the most free memory that
	 * has room for all of `need`). Else only this host, which may also be
	 * draining (a stopped computer starts again where its disk is). */
	const char *host;
	/* NULL, or host ids this placement must not choose, comma-separated
	 * (the hosts that already failed to start it). */
	const char *exclude;
};

/*
 * How store_computer_commit writes a computer: everything in one
 * transaction, so a crash (or a concurrent writer) sees all of it or none.
 */
struct store_commit {
	bool insert; /* insert c (its id generated) instead of updating it */
	/* > 0: refuse with ERR_LIMIT when c's workspace already holds this many
	 * computers (c itself not counted) in a state that holds resources
	 * (see store_computer_count_running). */
	int limit;
	/* > 0: refuse with ERR_LIMIT when c's workspace already holds this many
	 * stopped (or stopping) computers, c itself not counted. */
	int stopped_limit;
	/* Also switch c's usage: store_usage_switch(c->id, c->workspace,
	 * c->size, rate_state, at_ms). */
	bool bill;
	const char *rate_state; /* "running", "stopped" or NULL (billing ends) */
	int64_t at_ms;
	/* Non-NULL: also place c (store_place) in the same transaction, before
	 * it is written; c->host, c->epoch and c->reserved say where. */
	const struct store_place *place;
};

/*
 * Inserts or updates c as store_computer_insert / store_computer_update do,
 * with the limit check, the placement and the usage switch of `how` (NULL =
 * a plain update) in the same transaction. c is unchanged on failure.
 *
 * Every write of a state (here and store_computer_set_state) also gives
 * back, in the same transaction, what the new state no longer holds on c's
 * host: CPU and memory unless it is provisioning, starting, running or
 * stopping; the disk too once it is deleted or lost.
 *
 * Fencing: once this store registered its host (store_host_register),
 * every write of a computer or of the ledger first checks, in its
 * transaction and holding the host's row, that the host still holds its
 * epoch: a host that was reaped (or re-registered elsewhere) gets
 * ERR_CONFLICT and changes nothing, so it can never bill or revive a
 * computer that was declared lost.
 */
int store_computer_commit(struct store *s, struct store_computer *c, const struct store_commit *how,
			  struct err *e);

/* Only the state and error columns (and updated_ms; deleted_ms too when
 * state is "deleted" and it was unset), atomically, with the release and
 * the fencing of store_computer_commit. error may be NULL. */
int store_computer_set_state(struct store *s, const char *id, const char *state, const char *error,
			     struct err *e);

/* Records API activity (for the idle timeout), cheap enough for every call. */
int store_computer_touch(struct store *s, const char *id, int64_t now_ms, struct err *e);

/*
 * One computer. workspace NULL = any (admin); otherwise a computer of
 * another workspace is ERR_NOT_FOUND, exactly like a missing one.
 */
int store_computer_get(struct store *s, const char *id, const char *workspace,
		       struct store_computer *out, struct err *e);

struct store_filter {
	const char *workspace; /* NULL = all */
	const char *state;     /* NULL = all but deleted */
	const char *kind;      /* NULL = all */
	const char *host;      /* NULL = all; a host's id: the computers it holds */
	bool include_deleted;
};

/* Matching computers, oldest first; *out is a malloc'd array (free each with
 * store_computer_clear, then free the array; NULL when *n is 0). f NULL =
 * every computer that is not deleted. */
int store_computer_list(struct store *s, const struct store_filter *f, struct store_computer **out,
			size_t *n, struct err *e);

/* Computers of a workspace (NULL = all) that hold resources: provisioning,
 * starting, running or stopping (for the per-workspace limit). */
int store_computer_count_running(struct store *s, const char *workspace, int *n, struct err *e);

/* ---- stream revocations ------------------------------------------------ */

/*
 * Stream tokens of `computer` issued at or before revoked_ms are refused,
 * also after a restart: the row is kept until expires_ms (when every token
 * issued before it has expired), then pruned. A later revocation replaces
 * an earlier one.
 */
int store_stream_revoke(struct store *s, const char *computer, int64_t revoked_ms,
			int64_t expires_ms, struct err *e);

/* Prunes revocations expired at now_ms and calls fn for every other one. */
int store_stream_revocations(struct store *s, int64_t now_ms,
			     void (*fn)(void *ctx, const char *computer, int64_t revoked_ms),
			     void *ctx, struct err *e);

/*
 * Revocations written by any process on this database, this one included,
 * as they commit (PostgreSQL: NOTIFY, on the store's listener thread,
 * within a second of the commit; after the listener reconnects, fn is
 * called again for every revocation in the table, as nothing tells what
 * was missed). SQLite: fn is called by store_stream_revoke itself, on the
 * caller's thread, after the commit. fn must not call the store. One
 * callback per store; NULL removes it.
 */
void store_on_stream_revoke(struct store *s,
			    void (*fn)(void *ctx, const char *computer, int64_t revoked_ms),
			    void *ctx);

/* ---- stream-token keys --------------------------------------------------- */

/* A stream-token signing key: an id a token carries, and 32 secret bytes,
 * the same on every host of the database. */
#define STORE_STREAM_KEY_BYTES 32
struct store_stream_key {
	char id[24]; /* "sk-" + 16 hex */
	unsigned char secret[STORE_STREAM_KEY_BYTES];
	int64_t created_ms;
};

/* The newest key; the first call on a database makes one (from the CSPRNG,
 * or from `seed` when it is non-NULL: a host that had a key of its own
 * keeps its tokens valid). Two hosts racing get the same key. */
int store_stream_key_current(struct store *s, const unsigned char *seed,
			     struct store_stream_key *out, struct err *e);
/* The key of that id (a token's); ERR_NOT_FOUND for an unknown id. */
int store_stream_key_get(struct store *s, const char *id, struct store_stream_key *out,
			 struct err *e);
/* Makes a new current key (rotation); older ones still verify until
 * removed with store_stream_key_retire. */
int store_stream_key_rotate(struct store *s, struct store_stream_key *out, struct err *e);
/* Removes keys created before before_ms, never the newest. */
int store_stream_key_retire(struct store *s, int64_t before_ms, struct err *e);

/* ---- previews ------------------------------------------------------------- */

/* A preview of one port of a computer (port 0: all of them, and CDP). */
struct store_preview {
	char computer[40];
	int port;
	int64_t public_since_ms, public_until_ms; /* public between these (0: not public) */
	int64_t revoked_ms;			  /* tokens issued at or before are refused */
	int64_t issued_ms;			  /* its last token's issue time */
	int64_t expires_ms;			  /* the row goes then */
};

/*
 * Records p: a public span replaces the stored one when p has one (or
 * clears it when p->revoked_ms is later than its start), revoked_ms,
 * issued_ms and expires_ms only grow.
 */
int store_preview_put(struct store *s, const struct store_preview *p, struct err *e);
/* Prunes the rows expired at now_ms and calls fn for every other one. */
int store_previews(struct store *s, int64_t now_ms,
		   void (*fn)(void *ctx, const struct store_preview *p), void *ctx, struct err *e);

/* ---- usage ledger --------------------------------------------------------- */

/*
 * The ledger is a list of segments: one computer in one billable state
 * (running or stopped) at one size from start_ms to end_ms. A segment is
 * open while the computer is in that state; store_usage_tick() moves every
 * open segment's end to now, once a second, so a crash loses at most one
 * tick. Closing sets the final end.
 */

/* Closes the computer's open segment (if any) at at_ms and opens a new one
 * for `rate_state` ("running" | "stopped"), or none when rate_state is NULL. */
int store_usage_switch(struct store *s, const char *computer, const char *workspace,
		       const char *size, const char *rate_state, int64_t at_ms, struct err *e);

/*
 * Moves open segments' end to now_ms and returns how many rows it changed
 * (or -1). One host (no store_host_register): every open segment. A
 * registered host: in one transaction, its own row in hosts (seen_ms) and
 * the open segments of the computers it holds under its epoch, and nothing
 * when its row no longer has that epoch: 0 then means it was fenced (reaped,
 * or another process registered the host since) and must stop its
 * computers and register again; a live host always changes at least its
 * own row.
 */
int store_usage_tick(struct store *s, int64_t now_ms, struct err *e);

/*
 * After a restart: the open segments, so the core can extend the ones of
 * computers that kept running to now (store_usage_tick) and close the others
 * at their last tick (store_usage_switch with rate_state NULL, at_ms = their
 * recorded end).
 */
struct store_open_segment {
	char computer[40];
	int64_t start_ms, end_ms;
	char rate_state[16];
};
int store_usage_open_segments(struct store *s, struct store_open_segment **out, size_t *n,
			      struct err *e);

/* The end of the computer's latest segment (0 when it has none). */
int store_usage_last_end(struct store *s, const char *computer, int64_t *end_ms, struct err *e);

struct store_rates {
	int64_t unit_nanodollars_per_s;	   /* xs running rate: default 15000 (0.000015 USD) */
	int64_t stopped_nanodollars_per_s; /* per second while stopped, any size: default 0 */
};

/* Size multiplier: xs 1, sm 2, md 4, lg 8, xl 16, small 4, medium 8, large 16; 0 if unknown
 * and for "byo" (a machine you bring: its connected seconds are counted, not charged). */
int store_size_multiplier(const char *size);

/*
 * Usage of a workspace (NULL = all) between from_ms and to_ms (segments
 * clipped to the window):
 * {"workspace","from","to","computers":[{"id","workspace","external_workspace_id",
 *  "kind","size","running_seconds","stopped_seconds","cost_nanodollars"}],
 *  "total":{"running_seconds","stopped_seconds","cost_nanodollars","cost_usd"}}
 * Seconds are numbers with millisecond precision; cost is an integer:
 * running ms * unit * multiplier / 1000 + stopped ms * stopped / 1000,
 * rounded down per segment, then summed with integer arithmetic (the
 * multiplier is that of the segment's size; "size" is the computer's size
 * now). cost_usd = cost_nanodollars / 1e9. Computers are in creation order;
 * deleted ones are included. rates NULL = the defaults.
 */
int store_usage_query(struct store *s, const char *workspace, int64_t from_ms, int64_t to_ms,
		      const struct store_rates *rates, json_t **out, struct err *e);

/*
 * The ledger's seconds per workspace and rate state, all time (deleted
 * computers included), for /metrics: fn(ctx, workspace, "running" or
 * "stopped", seconds) for each, with the store's lock held (fn must not
 * call the store).
 */
int store_usage_totals(struct store *s,
		       void (*fn)(void *ctx, const char *ws, const char *rate_state,
				  double seconds),
		       void *ctx, struct err *e);

/* ---- hosts: a cluster's members, capacity, placement, fencing ------------------- */

/*
 * One row per host of a cluster (none on one host). Its epoch is the id of
 * the lease it holds in etcd while it lives (0: none, it is down); every
 * computer it takes is stamped with that epoch, and its ledger tick
 * (store_usage_tick) touches only those. Capacity is what placement may
 * hand out; used is what computers hold now. A CHECK in the database keeps
 * used within capacity (and never negative) whatever runs concurrently.
 */
struct store_host {
	char id[STORE_HOST_ID_LEN]; /* A-Z a-z 0-9 . - _, 1 to 63 of them */
	char address[256];	    /* where the other hosts reach its API */
	int64_t epoch;		    /* > 0 while registered; 0 = down */
	char state[16];		    /* "up" | "draining" (no new placements) | "down" */
	/* CPU: physical vCPUs * 1000; placement may hand out
	 * cpu_milli * cpu_overcommit_pct / 100 of it (100 = no overcommit). */
	struct store_capacity capacity;
	int cpu_overcommit_pct;
	struct store_capacity used;
	int64_t registered_ms, seen_ms; /* seen_ms: its last tick */
	int computers; /* store_host_get/list: computers it holds, neither deleted nor lost */
};

/*
 * Registers this process as host h->id under lease h->epoch (> 0), with its
 * address and capacity (h->used, state, times and computers are ignored):
 * from now on this store fences its writes with that identity (see
 * store_commit) and ticks as that host. The computers the host held under
 * its previous epoch, if that epoch was not reaped meanwhile, are adopted
 * (re-stamped with the new epoch) when `adopt` (their processes survived,
 * cubicled restarted), else declared lost as the reaper would; *moved (may
 * be NULL) says how many. A draining host stays draining. A declared
 * capacity below what is held is raised to what is held (nothing more is
 * placed there until it frees up).
 */
int store_host_register(struct store *s, const struct store_host *h, bool adopt, int *moved,
			struct err *e);
/* ERR_NOT_FOUND when there is no such host. */
int store_host_get(struct store *s, const char *id, struct store_host *out, struct err *e);
/* Every host, by id; *out malloc'd (NULL when *n is 0). */
int store_host_list(struct store *s, struct store_host **out, size_t *n, struct err *e);
/* "up" or "draining" (drain: no new placements; computers there stay).
 * ERR_NOT_FOUND for no such host, ERR_CONFLICT for a host that is down. */
int store_host_set_state(struct store *s, const char *id, const char *state, struct err *e);
/* {"id","address","epoch","state","capacity":{"cpu_milli","mem_mb","disk_mb",
 *  "cpu_overcommit_pct"},"used":{...},"registered_at","seen_at","computers"} */
json_t *store_host_json(const struct store_host *h);

/*
 * The reaper's step, for a host whose lease the caller has seen expire:
 * if host `id` still has epoch `epoch` (it did not re-register meanwhile),
 * in one transaction its computers of that epoch become lost (a deleting
 * one: deleted) with why, their open segments close at their last tick, their
 * reservations are freed and the host is down (epoch 0). Returns 1 and
 * *lost (may be NULL) when it reaped, 0 when the host's row no longer had
 * that epoch (nothing changed), -1 on error.
 */
int store_host_reap(struct store *s, const char *id, int64_t epoch, const char *why, int *lost,
		    struct err *e);

/* Where store_place put a computer. */
struct store_placed {
	char host[STORE_HOST_ID_LEN];
	int64_t epoch;
	char address[256];
};

/*
 * Places computer `id` (an existing row: a stopped computer starting
 * again, a lost one re-created): one UPDATE chooses the host (up, or
 * p->host; the most free memory first) and reserves p->need there
 * atomically, checked against the capacity in its WHERE clause (the
 * CHECK constraint backs it), then the computer row records host, epoch
 * and what it holds (moving it off another host frees what it held
 * there). ERR_UNAVAILABLE (param "size") when no host has room; under
 * contention a lost race is retried a few times on the next best host.
 * New computers are placed by store_computer_commit with how->place, in
 * the transaction that inserts them.
 */
int store_place(struct store *s, const char *id, const struct store_place *p,
		struct store_placed *out, struct err *e);

/* ---- connect tokens (machines you bring, docs/byo.md) ---------------------------- */

struct store_connect_token {
	char id[40]; /* "t-" + 16 hex */
	char workspace[40];
	char kind[16]; /* desktop | sandbox */
	char name[64];
	json_t *metadata; /* object, owned */
	char digest[65];  /* SHA-256 of the whole token, hex */
	int64_t created_ms, expires_ms, used_ms;
	char computer[40];
};

/* Inserts t (id and digest filled by the caller). */
int store_connect_token_insert(struct store *s, const struct store_connect_token *t, struct err *e);
/* Marks token id used at now_ms if its digest matches, it is unused and not
 * expired, all in one statement (two redemptions cannot both win); fills
 * *t. ERR_UNAUTHORIZED otherwise (one message for every case). */
int store_connect_token_redeem(struct store *s, const char *id, const char *digest, int64_t now_ms,
			       struct store_connect_token *t, struct err *e);
/* Records the machine token id made. */
int store_connect_token_set_computer(struct store *s, const char *id, const char *computer,
				     struct err *e);
/* Deletes tokens expired before now_ms - keep_ms. */
int store_connect_tokens_prune(struct store *s, int64_t before_ms, struct err *e);

#endif
