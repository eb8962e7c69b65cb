/*
 * store-schema: the tables, per back end. The only SQL the store spells
 * twice: SQLite's migrations are the history of one host's database since
 * the first release (never edit one that shipped: append), PostgreSQL's
 * start at the schema of the first release that had it. The tables have
 * the same names, columns and constraints in both; the types are each
 * back end's own (INTEGER / BIGINT, BLOB / BYTEA), and in PostgreSQL a
 * `rowid` identity column stands for SQLite's implicit one where the store
 * orders by it.
 *
 * SQLite: PRAGMA user_version counts the migrations that ran. PostgreSQL:
 * cubicle_schema.version, migrated under an advisory lock so hosts that
 * start together migrate once (store.c).
 */
#include "store-internal.h"

/* Hosts of a cluster (store.h, "hosts"): capacity, what computers hold of
 * it, and CHECKs that keep the latter within the former, whatever runs
 * concurrently. The same text in both back ends. */
#define STORE_SCHEMA_HOSTS                                                                         \
	"CREATE TABLE hosts ("                                                                     \
	" id TEXT PRIMARY KEY,"                                                                    \
	" address TEXT NOT NULL DEFAULT '',"                                                       \
	" epoch BIGINT NOT NULL DEFAULT 0,"                                                        \
	" state TEXT NOT NULL DEFAULT 'down' CHECK (state IN ('up', 'draining', 'down')),"         \
	" cpu_milli BIGINT NOT NULL DEFAULT 0,"                                                    \
	" cpu_overcommit_pct BIGINT NOT NULL DEFAULT 100 CHECK (cpu_overcommit_pct >= 100),"       \
	" mem_mb BIGINT NOT NULL DEFAULT 0,"                                                       \
	" disk_mb BIGINT NOT NULL DEFAULT 0,"                                                      \
	" cpu_milli_used BIGINT NOT NULL DEFAULT 0,"                                               \
	" mem_mb_used BIGINT NOT NULL DEFAULT 0,"                                                  \
	" disk_mb_used BIGINT NOT NULL DEFAULT 0,"                                                 \
	" registered_ms BIGINT NOT NULL DEFAULT 0,"                                                \
	" seen_ms BIGINT NOT NULL DEFAULT 0,"                                                      \
	" CONSTRAINT hosts_used_not_negative CHECK"                                                \
	"  (cpu_milli_used >= 0 AND mem_mb_used >= 0 AND disk_mb_used >= 0),"                      \
	" CONSTRAINT hosts_within_capacity CHECK"                                                  \
	"  (cpu_milli_used * 100 <= cpu_milli * cpu_overcommit_pct"                                \
	"   AND mem_mb_used <= mem_mb AND disk_mb_used <= disk_mb));"

/* Stream-token signing keys, shared by the hosts (store.h). */
#define STORE_SCHEMA_STREAM_KEYS(blob)                                                             \
	"CREATE TABLE stream_keys ("                                                               \
	" id TEXT PRIMARY KEY,"                                                                    \
	" secret " blob " NOT NULL,"                                                               \
	" created_ms BIGINT NOT NULL);"                                                            \
	"CREATE INDEX stream_keys_created ON stream_keys(created_ms);"

const char *const store_lite_migrations[] = {
    /* 1: workspaces, keys, computers, usage ledger. */
    "CREATE TABLE workspaces ("
    " id TEXT PRIMARY KEY,"
    " name TEXT NOT NULL,"
    " max_running INTEGER NOT NULL DEFAULT 0,"
    " created_ms INTEGER NOT NULL);"

    /* The key itself is never stored: hash = SHA-256(key). workspace NULL =
     * admin key. revoked_ms 0 = valid. */
    "CREATE TABLE api_keys ("
    " id INTEGER PRIMARY KEY,"
    " hash BLOB NOT NULL,"
    " workspace TEXT REFERENCES workspaces(id),"
    " created_ms INTEGER NOT NULL,"
    " revoked_ms INTEGER NOT NULL DEFAULT 0);"
    "CREATE UNIQUE INDEX api_keys_hash ON api_keys(hash);"

    /* Rows are never removed: a deleted computer keeps its row (state
     * 'deleted', deleted_ms) so usage stays attributable. */
    "CREATE TABLE computers ("
    " id TEXT PRIMARY KEY,"
    " workspace TEXT NOT NULL REFERENCES workspaces(id),"
    " kind TEXT NOT NULL,"
    " size TEXT NOT NULL,"
    " isolation TEXT NOT NULL,"
    " state TEXT NOT NULL,"
    " error TEXT NOT NULL DEFAULT '',"
    " width INTEGER NOT NULL DEFAULT 0,"
    " height INTEGER NOT NULL DEFAULT 0,"
    " idle_timeout_s INTEGER NOT NULL DEFAULT 0,"
    " external_workspace_id TEXT NOT NULL DEFAULT '',"
    " session_id TEXT NOT NULL DEFAULT '',"
    " envd_token TEXT NOT NULL DEFAULT '',"
    " accel TEXT NOT NULL DEFAULT '',"
    " metadata TEXT NOT NULL DEFAULT '{}',"
    " driver_state TEXT NOT NULL DEFAULT '{}',"
    " created_ms INTEGER NOT NULL,"
    " updated_ms INTEGER NOT NULL,"
    " last_activity_ms INTEGER NOT NULL DEFAULT 0,"
    " deleted_ms INTEGER NOT NULL DEFAULT 0);"
    "CREATE INDEX computers_workspace_state ON computers(workspace, state);"
    "CREATE INDEX computers_created ON computers(created_ms);"

    /* One row per (computer, billable state, size) stretch of time; at
     * most one open row per computer. */
    "CREATE TABLE usage_segments ("
    " id INTEGER PRIMARY KEY,"
    " computer TEXT NOT NULL REFERENCES computers(id),"
    " workspace TEXT NOT NULL,"
    " size TEXT NOT NULL,"
    " rate_state TEXT NOT NULL CHECK (rate_state IN ('running', 'stopped')),"
    " start_ms INTEGER NOT NULL,"
    " end_ms INTEGER NOT NULL CHECK (end_ms >= start_ms),"
    " open INTEGER NOT NULL DEFAULT 1 CHECK (open IN (0, 1)));"
    "CREATE UNIQUE INDEX usage_segments_open ON usage_segments(computer) WHERE open = 1;"
    "CREATE INDEX usage_segments_workspace_start ON usage_segments(workspace, start_ms);"
    "CREATE INDEX usage_segments_start ON usage_segments(start_ms);",

    /* 2: the admin API (keys listed by id and prefix, last use, deleted
     * workspaces) and stream revocations that survive a restart. */
    "ALTER TABLE api_keys ADD COLUMN prefix TEXT NOT NULL DEFAULT '';"
    "ALTER TABLE api_keys ADD COLUMN last_used_ms INTEGER NOT NULL DEFAULT 0;"
    "CREATE INDEX api_keys_workspace ON api_keys(workspace);"
    /* A deleted workspace keeps its row (its computers' rows and its
     * ledger refer to it); deleted_ms 0 = live. */
    "ALTER TABLE workspaces ADD COLUMN deleted_ms INTEGER NOT NULL DEFAULT 0;"
    /* Stream tokens of `computer` issued at or before revoked_ms are
     * refused; the row goes once every such token has expired. */
    "CREATE TABLE stream_revocations ("
    " computer TEXT PRIMARY KEY,"
    " revoked_ms INTEGER NOT NULL,"
    " expires_ms INTEGER NOT NULL);",
    /* 3: code runs (POST /v1/run), counted per workspace, language and
     * hour; not billed. */
    "CREATE TABLE code_runs ("
    " workspace TEXT NOT NULL,"
    " language TEXT NOT NULL,"
    " hour_ms INTEGER NOT NULL,"
    " runs INTEGER NOT NULL DEFAULT 0,"
    " errors INTEGER NOT NULL DEFAULT 0,"
    " PRIMARY KEY (workspace, language, hour_ms));",
    /* 4: stopped computers allowed per workspace (0 = the server's
     * --max-stopped-per-workspace). */
    "ALTER TABLE workspaces ADD COLUMN max_stopped INTEGER NOT NULL DEFAULT 0;",
    /* 5: a workspace's egress policy override, each a list of IPv4
     * prefixes "a.b.c.d/len,..." ('' = none), checked by the API. */
    "ALTER TABLE workspaces ADD COLUMN egress_allow TEXT NOT NULL DEFAULT '';"
    "ALTER TABLE workspaces ADD COLUMN egress_deny TEXT NOT NULL DEFAULT '';",
    /* 6: connect tokens (machines you bring, docs/byo.md): single-use,
     * short-lived; only the SHA-256 of the token is kept. used_ms 0 =
     * unused; computer = the machine it made. */
    "CREATE TABLE connect_tokens ("
    " id TEXT PRIMARY KEY,"
    " workspace TEXT NOT NULL,"
    " kind TEXT NOT NULL,"
    " name TEXT NOT NULL DEFAULT '',"
    " metadata TEXT NOT NULL DEFAULT '{}',"
    " digest TEXT NOT NULL,"
    " created_ms INTEGER NOT NULL,"
    " expires_ms INTEGER NOT NULL,"
    " used_ms INTEGER NOT NULL DEFAULT 0,"
    " computer TEXT NOT NULL DEFAULT '');",
    /* 7: previews of a computer's ports (host/api/preview.h), kept across
     * a restart: a port made public (public_since_ms..public_until_ms, 0 =
     * not public), the revocation of its tokens (issued at or before
     * revoked_ms) and its last token's issue time. Port 0 is every port
     * and CDP (a stop, a delete). The row goes at expires_ms, when no
     * token it knows of can still work. */
    "CREATE TABLE previews ("
    " computer TEXT NOT NULL,"
    " port INTEGER NOT NULL,"
    " public_since_ms INTEGER NOT NULL DEFAULT 0,"
    " public_until_ms INTEGER NOT NULL DEFAULT 0,"
    " revoked_ms INTEGER NOT NULL DEFAULT 0,"
    " issued_ms INTEGER NOT NULL DEFAULT 0,"
    " expires_ms INTEGER NOT NULL,"
    " PRIMARY KEY (computer, port));",
    /* 8: screen recordings (store-recordings.h); the files are on the
     * workspace's session disk, sessions/<ws>/.recordings/<id>.*. */
    "CREATE TABLE recordings ("
    " id TEXT PRIMARY KEY,"
    " computer TEXT NOT NULL,"
    " workspace TEXT NOT NULL,"
    " state TEXT NOT NULL,"
    " keep INTEGER NOT NULL DEFAULT 0,"
    " started_ms INTEGER NOT NULL,"
    " stopped_ms INTEGER NOT NULL DEFAULT 0,"
    " duration_ms INTEGER NOT NULL DEFAULT 0,"
    " bytes INTEGER NOT NULL DEFAULT 0,"
    " frames INTEGER NOT NULL DEFAULT 0,"
    " actions INTEGER NOT NULL DEFAULT 0,"
    " width INTEGER NOT NULL DEFAULT 0,"
    " height INTEGER NOT NULL DEFAULT 0,"
    " reason TEXT NOT NULL DEFAULT '',"
    " error TEXT NOT NULL DEFAULT '');"
    "CREATE INDEX recordings_computer ON recordings (computer);",
    /* 9: a cluster's state, shared with the PostgreSQL schema (its
     * migration 1): where each computer lives and what it holds there,
     * the hosts, stream-token keys. */
    "ALTER TABLE computers ADD COLUMN host TEXT NOT NULL DEFAULT '';"
    "ALTER TABLE computers ADD COLUMN epoch INTEGER NOT NULL DEFAULT 0;"
    "ALTER TABLE computers ADD COLUMN cpu_milli INTEGER NOT NULL DEFAULT 0 CHECK (cpu_milli >= 0);"
    "ALTER TABLE computers ADD COLUMN mem_mb INTEGER NOT NULL DEFAULT 0 CHECK (mem_mb >= 0);"
    "ALTER TABLE computers ADD COLUMN disk_mb INTEGER NOT NULL DEFAULT 0 CHECK (disk_mb >= 0);"
    /* Partial: one host's computers (host '') cost its inserts nothing. */
    "CREATE INDEX computers_host ON computers(host, epoch) WHERE host <> '';" STORE_SCHEMA_HOSTS
	STORE_SCHEMA_STREAM_KEYS("BLOB"),
    /* 10: templates (store-templates.h): a recipe built into an image.
     * workspace '' = a global template (the admin's, or built in). A row
     * goes when its template is deleted; computers name the one they were
     * made from (template = its id), and a template is not deleted while
     * a computer that is not deleted names it. */
    "CREATE TABLE templates ("
    " id TEXT PRIMARY KEY,"
    " workspace TEXT NOT NULL,"
    " name TEXT NOT NULL,"
    " base TEXT NOT NULL,"
    " recipe TEXT NOT NULL,"
    " layer_key TEXT NOT NULL DEFAULT '',"
    " image TEXT NOT NULL DEFAULT '',"
    " state TEXT NOT NULL CHECK (state IN ('building', 'ready', 'error')),"
    " error TEXT NOT NULL DEFAULT '',"
    " size_bytes INTEGER NOT NULL DEFAULT 0,"
    " build_ms INTEGER NOT NULL DEFAULT 0,"
    " builtin INTEGER NOT NULL DEFAULT 0,"
    " build TEXT NOT NULL DEFAULT '{}',"
    " created_ms INTEGER NOT NULL,"
    " updated_ms INTEGER NOT NULL,"
    " UNIQUE (workspace, name));"
    "ALTER TABLE computers ADD COLUMN template TEXT NOT NULL DEFAULT '';"
    "CREATE INDEX computers_template ON computers(template) WHERE template <> '';",
};

const int store_lite_schema_version =
    (int)(sizeof store_lite_migrations / sizeof store_lite_migrations[0]);

const char *const store_pg_migrations[] = {
    /* 1: everything of SQLite's migrations 1 to 10 (same tables, same
     * columns), and the NOTIFY triggers that keep every host's key table
     * and stream revocations current. */
    "CREATE TABLE workspaces ("
    " rowid BIGINT GENERATED ALWAYS AS IDENTITY UNIQUE,"
    " id TEXT PRIMARY KEY,"
    " name TEXT NOT NULL,"
    " max_running BIGINT NOT NULL DEFAULT 0,"
    " created_ms BIGINT NOT NULL,"
    " deleted_ms BIGINT NOT NULL DEFAULT 0,"
    " max_stopped BIGINT NOT NULL DEFAULT 0,"
    " egress_allow TEXT NOT NULL DEFAULT '',"
    " egress_deny TEXT NOT NULL DEFAULT '');"

    "CREATE TABLE api_keys ("
    " id BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,"
    " hash BYTEA NOT NULL,"
    " workspace TEXT REFERENCES workspaces(id),"
    " created_ms BIGINT NOT NULL,"
    " revoked_ms BIGINT NOT NULL DEFAULT 0,"
    " prefix TEXT NOT NULL DEFAULT '',"
    " last_used_ms BIGINT NOT NULL DEFAULT 0);"
    "CREATE UNIQUE INDEX api_keys_hash ON api_keys(hash);"
    "CREATE INDEX api_keys_workspace ON api_keys(workspace);"

    "CREATE TABLE computers ("
    " rowid BIGINT GENERATED ALWAYS AS IDENTITY UNIQUE,"
    " id TEXT PRIMARY KEY,"
    " workspace TEXT NOT NULL REFERENCES workspaces(id),"
    " kind TEXT NOT NULL,"
    " size TEXT NOT NULL,"
    " isolation TEXT NOT NULL,"
    " state TEXT NOT NULL,"
    " error TEXT NOT NULL DEFAULT '',"
    " width BIGINT NOT NULL DEFAULT 0,"
    " height BIGINT NOT NULL DEFAULT 0,"
    " idle_timeout_s BIGINT NOT NULL DEFAULT 0,"
    " external_workspace_id TEXT NOT NULL DEFAULT '',"
    " session_id TEXT NOT NULL DEFAULT '',"
    " envd_token TEXT NOT NULL DEFAULT '',"
    " accel TEXT NOT NULL DEFAULT '',"
    " metadata TEXT NOT NULL DEFAULT '{}',"
    " driver_state TEXT NOT NULL DEFAULT '{}',"
    " created_ms BIGINT NOT NULL,"
    " updated_ms BIGINT NOT NULL,"
    " last_activity_ms BIGINT NOT NULL DEFAULT 0,"
    " deleted_ms BIGINT NOT NULL DEFAULT 0,"
    " host TEXT NOT NULL DEFAULT '',"
    " epoch BIGINT NOT NULL DEFAULT 0,"
    " cpu_milli BIGINT NOT NULL DEFAULT 0 CHECK (cpu_milli >= 0),"
    " mem_mb BIGINT NOT NULL DEFAULT 0 CHECK (mem_mb >= 0),"
    " disk_mb BIGINT NOT NULL DEFAULT 0 CHECK (disk_mb >= 0),"
    " template TEXT NOT NULL DEFAULT '');"
    "CREATE INDEX computers_workspace_state ON computers(workspace, state);"
    "CREATE INDEX computers_created ON computers(created_ms);"
    "CREATE INDEX computers_host ON computers(host, epoch);"
    "CREATE INDEX computers_template ON computers(template) WHERE template <> '';"

    "CREATE TABLE usage_segments ("
    " id BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,"
    " computer TEXT NOT NULL REFERENCES computers(id),"
    " workspace TEXT NOT NULL,"
    " size TEXT NOT NULL,"
    " rate_state TEXT NOT NULL CHECK (rate_state IN ('running', 'stopped')),"
    " start_ms BIGINT NOT NULL,"
    " end_ms BIGINT NOT NULL CHECK (end_ms >= start_ms),"
    " open BIGINT NOT NULL DEFAULT 1 CHECK (open IN (0, 1)));"
    "CREATE UNIQUE INDEX usage_segments_open ON usage_segments(computer) WHERE open = 1;"
    "CREATE INDEX usage_segments_workspace_start ON usage_segments(workspace, start_ms);"
    "CREATE INDEX usage_segments_start ON usage_segments(start_ms);"

    "CREATE TABLE stream_revocations ("
    " computer TEXT PRIMARY KEY,"
    " revoked_ms BIGINT NOT NULL,"
    " expires_ms BIGINT NOT NULL);"

    "CREATE TABLE code_runs ("
    " workspace TEXT NOT NULL,"
    " language TEXT NOT NULL,"
    " hour_ms BIGINT NOT NULL,"
    " runs BIGINT NOT NULL DEFAULT 0,"
    " errors BIGINT NOT NULL DEFAULT 0,"
    " PRIMARY KEY (workspace, language, hour_ms));"

    "CREATE TABLE connect_tokens ("
    " id TEXT PRIMARY KEY,"
    " workspace TEXT NOT NULL,"
    " kind TEXT NOT NULL,"
    " name TEXT NOT NULL DEFAULT '',"
    " metadata TEXT NOT NULL DEFAULT '{}',"
    " digest TEXT NOT NULL,"
    " created_ms BIGINT NOT NULL,"
    " expires_ms BIGINT NOT NULL,"
    " used_ms BIGINT NOT NULL DEFAULT 0,"
    " computer TEXT NOT NULL DEFAULT '');"

    "CREATE TABLE previews ("
    " computer TEXT NOT NULL,"
    " port BIGINT NOT NULL,"
    " public_since_ms BIGINT NOT NULL DEFAULT 0,"
    " public_until_ms BIGINT NOT NULL DEFAULT 0,"
    " revoked_ms BIGINT NOT NULL DEFAULT 0,"
    " issued_ms BIGINT NOT NULL DEFAULT 0,"
    " expires_ms BIGINT NOT NULL,"
    " PRIMARY KEY (computer, port));"

    "CREATE TABLE recordings ("
    " id TEXT PRIMARY KEY,"
    " computer TEXT NOT NULL,"
    " workspace TEXT NOT NULL,"
    " state TEXT NOT NULL,"
    " keep BIGINT NOT NULL DEFAULT 0,"
    " started_ms BIGINT NOT NULL,"
    " stopped_ms BIGINT NOT NULL DEFAULT 0,"
    " duration_ms BIGINT NOT NULL DEFAULT 0,"
    " bytes BIGINT NOT NULL DEFAULT 0,"
    " frames BIGINT NOT NULL DEFAULT 0,"
    " actions BIGINT NOT NULL DEFAULT 0,"
    " width BIGINT NOT NULL DEFAULT 0,"
    " height BIGINT NOT NULL DEFAULT 0,"
    " reason TEXT NOT NULL DEFAULT '',"
    " error TEXT NOT NULL DEFAULT '');"
    "CREATE INDEX recordings_computer ON recordings (computer);"

    "CREATE TABLE templates ("
    " rowid BIGINT GENERATED ALWAYS AS IDENTITY UNIQUE,"
    " id TEXT PRIMARY KEY,"
    " workspace TEXT NOT NULL,"
    " name TEXT NOT NULL,"
    " base TEXT NOT NULL,"
    " recipe TEXT NOT NULL,"
    " layer_key TEXT NOT NULL DEFAULT '',"
    " image TEXT NOT NULL DEFAULT '',"
    " state TEXT NOT NULL CHECK (state IN ('building', 'ready', 'error')),"
    " error TEXT NOT NULL DEFAULT '',"
    " size_bytes BIGINT NOT NULL DEFAULT 0,"
    " build_ms BIGINT NOT NULL DEFAULT 0,"
    " builtin BIGINT NOT NULL DEFAULT 0,"
    " build TEXT NOT NULL DEFAULT '{}',"
    " created_ms BIGINT NOT NULL,"
    " updated_ms BIGINT NOT NULL,"
    " UNIQUE (workspace, name));" STORE_SCHEMA_HOSTS STORE_SCHEMA_STREAM_KEYS("BYTEA")

    /* Who may authenticate changed (a key made, revoked, removed; not a
     * last use): every host's listener rebuilds its key table. */
    "CREATE FUNCTION cubicle_keys_changed() RETURNS trigger LANGUAGE plpgsql AS"
    " $$ BEGIN PERFORM pg_notify('cubicle_keys', ''); RETURN NULL; END $$;"
    "CREATE TRIGGER api_keys_changed AFTER INSERT OR DELETE OR UPDATE OF hash, workspace,"
    " revoked_ms ON api_keys FOR EACH STATEMENT EXECUTE FUNCTION cubicle_keys_changed();"
    /* A stream revocation: "<computer> <revoked_ms>" to every host. */
    "CREATE FUNCTION cubicle_stream_revoked() RETURNS trigger LANGUAGE plpgsql AS"
    " $$ BEGIN PERFORM pg_notify('cubicle_revoked', NEW.computer || ' ' || NEW.revoked_ms);"
    " RETURN NULL; END $$;"
    "CREATE TRIGGER stream_revocations_changed AFTER INSERT OR UPDATE ON stream_revocations"
    " FOR EACH ROW EXECUTE FUNCTION cubicle_stream_revoked();",
};

const int store_pg_schema_version =
    (int)(sizeof store_pg_migrations / sizeof store_pg_migrations[0]);
