/*
 * cdp: the desktop's Chromium with its DevTools endpoint, for clients of the
 * Chrome DevTools Protocol (Playwright's connectOverCDP) that cubicled lets
 * in through its tunnel (POST /v1/computers/{id}/cdp, docs/api.md).
 *
 * cdp_ensure reuses the browser whose endpoint answers on
 * 127.0.0.1:CDP_PORT, or starts Chromium as the user on the desktop's
 * display (its own profile in ~/.config/cubicle-cdp, no first-run, no
 * sandbox: a container's seccomp filter refuses the user namespaces
 * Chromium's sandbox needs, and the computer is the boundary) and waits up
 * to CDP_START_S for the endpoint to answer. The endpoint listens on the
 * guest's loopback only: the host reaches it through envd's tunnel
 * (GET /v1/tunnel?port=CDP_PORT), nothing else outside the computer can.
 */
#ifndef CUBICLE_ENVD_CDP_H
#define CUBICLE_ENVD_CDP_H

#include <jansson.h>

#include "envd.h"
#include "err.h"

#define CDP_PORT    9222
#define CDP_START_S 30

/*
 * {"port", "browser_path": "/devtools/browser/<id>", "version": {Chromium's
 * /json/version without its URLs}, "started": bool}. ERR_CONFLICT without a
 * display, ERR_NOT_FOUND without Chromium, ERR_TIMEOUT when its endpoint
 * does not answer in time. Thread-safe (one start at a time).
 */
int cdp_ensure(struct envd *env, json_t **out, struct err *e);

#endif
