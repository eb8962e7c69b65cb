/*
 * setup: what cubicled tells a computer's envd at each start (POST
 * /v1/setup, host/core/guest-setup.h), applied as the guest's root:
 *
 *   {"ca_certs": "PEM...",        the operator's CA certificates (trust.h)
 *    "pip_index_url": "URL",      /etc/pip.conf's index-url (and trusted-host
 *                                 for plain http), or null: pip's default
 *    "npm_registry": "URL"}       /etc/npmrc's registry, or null
 *
 * Every key is optional; an absent or null one removes what an earlier
 * start set. Idempotent: a restart with the same settings writes nothing.
 * Answers {"ok": true, "ca_certs": N, "changed": bool, "duration_ms"}.
 */
#ifndef CUBICLE_GUEST_SETUP_H
#define CUBICLE_GUEST_SETUP_H

#include <jansson.h>

#include "err.h"

#define SETUP_URL_MAX 2048

/* Where the files live; tests point it at a scratch tree (NULL: "/"). */
void setup_set_root(const char *root);

/* Applies body; *answer is the answer (owned by the caller). */
int setup_apply(const json_t *body, json_t **answer, struct err *e);

#endif
