/*
 * fakecore: core.h's functions without computers, for the harnesses that
 * drive cubicled's API (fuzz_api, fuzz_mcp, fuzz_computeruse) in process.
 *
 * One computer exists: FAKE_ID, running, a desktop of workspace FAKE_WS
 * (the workspace the harness made in its store)
 * (any other id is 404). Every action goes nowhere: its answer is the next
 * of the fuzzed envd answers queued with fake_envd_push (a compromised guest
 * writes them), or a plain 200 {} when none is left. Every action asked is
 * logged with its parameters, for the harnesses' checks. Sleeping is
 * pretend (clock_sleep_ms is wrapped at link time, fuzz.cmake): a wait of
 * the API's is counted, never slept.
 */
#ifndef CUBICLE_FUZZ_FAKECORE_H
#define CUBICLE_FUZZ_FAKECORE_H

#include <stdint.h>

#include <jansson.h>

#include "core.h"

#define FAKE_ID "c0ffee"
/* The workspace the host made (its generated id). */
extern char fake_ws[40];
#define FAKE_WS fake_ws

/* Queues an envd answer (copied). */
void fake_envd_push(int status, const char *content_type, const char *xw, const char *xh,
		    const char *xs, const void *body, size_t len);
/* Queues answers read from fuzz bytes (status byte, then a body up to NUL),
 * at most `max`. */
void fake_envd_push_fuzz(const uint8_t *p, size_t n, int max);
void fake_reset(void);

/* The actions asked since fake_reset: names and parameters (borrowed), the
 * first FAKE_LOGMAX of them. */
#define FAKE_LOGMAX 256
size_t fake_actions(void);
const char *fake_action_name(size_t i);
const json_t *fake_action_params(size_t i);

/* What the API has slept (pretend) since fake_reset, in milliseconds. */
int64_t fake_slept_ms(void);

struct core *fake_core(void);

#endif
