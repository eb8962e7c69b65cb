/*
 * store-runs: the code runner's counts (POST /v1/run), per workspace,
 * language and hour, for usage. Not billed. Same locking as store.h.
 */
#ifndef CUBICLE_STORE_RUNS_H
#define CUBICLE_STORE_RUNS_H

#include <stdint.h>

#include "store.h"

/* Adds one run (and one error when `error`) to the hour of at_ms. */
int store_runs_add(struct store *s, const char *workspace, const char *language, int64_t at_ms,
		   bool error, struct err *e);

/*
 * The runs of a workspace (NULL = all) in the hours that start in
 * [from_ms, to_ms): {"total", "errors", "by_language": {"python": n, ...}}.
 */
int store_runs_query(struct store *s, const char *workspace, int64_t from_ms, int64_t to_ms,
		     json_t **out, struct err *e);

#endif
