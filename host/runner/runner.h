/*
 * runner: cubicled's side of the code runner (POST /v1/run, the MCP tool
 * run_code; docs/code-runner.md).
 *
 * One supervisor process per language, started by runner_open() with a
 * clean environment and no descriptor of ours but its control socket
 * (fd 3): cubicle-pyrun for Python, cubicle-jsrun for JavaScript. A run is a
 * socketpair whose far end goes to the supervisor (runproto.h); the calling
 * thread (an httpd worker, never the event loop) blocks on its own end
 * until the answer. A supervisor that died is started again by the next
 * run. Runs are limited to `max_concurrent` at once; more wait for a slot.
 */
#ifndef CUBICLE_RUNNER_H
#define CUBICLE_RUNNER_H

#include <stddef.h>
#include <sys/types.h>
#include <jansson.h>

#include "err.h"
#include "store.h"

struct runner_config {
	const char *bin_dir; /* where cubicle-pyrun and cubicle-jsrun are (and ../runner-js) */
	struct store *store; /* counts runs per workspace (store-runs.h); may be NULL */
	uid_t uid;	     /* the runs' uid and gid (default 65534) */
	gid_t gid;
	int pool;	    /* ready sandboxes per language (default 8) */
	int cpu_ms;	    /* default 100 */
	int wall_ms;	    /* default 30000 */
	int mem_mb;	    /* default 128 */
	size_t out_max;	    /* stdout + stderr bytes, default 1 MiB */
	size_t code_max;    /* default 10 KiB (at most RUN_CODE_MAX) */
	int max_concurrent; /* default 32 */
};

struct runner;

/* Starts the supervisors (one that cannot start is logged and retried by
 * the next run of its language). NULL only when out of memory. */
struct runner *runner_open(const struct runner_config *c, struct err *e);
/* Ends the supervisors (their runs die with them). */
void runner_close(struct runner *r);

/*
 * Runs {"language", "code", "stdin"?} for workspace `ws` (counted in its
 * usage) and gives {"language", "stdout", "stderr", "exit_code", "error"?:
 * {"type", "message"}, "truncated"?, "cpu_ms", "wall_ms", "memory_kb"}.
 * -1 with e: 400 an unknown field or language, a missing or non-string
 * code; 413 code (or stdin) too large; 503 the language's sandbox cannot be
 * made, or r is NULL (a cubicled without a runner). A snippet that fails
 * is not an error here: it is in "error".
 */
int runner_run(struct runner *r, const char *ws, const json_t *body, json_t **out, struct err *e);

/* Prometheus text: runs and errors by language and type, a latency
 * histogram (malloc'd). */
char *runner_metrics(struct runner *r);

#endif
