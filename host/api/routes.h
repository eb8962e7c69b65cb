/*
 * routes: cubicled's route table and its OpenAPI document, both generated
 * by spec/gen.py from spec/api.json (every route but the actions) and
 * spec/actions.json (the actions), so the router, docs/openapi.json and
 * GET /openapi.json cannot disagree (spec/README.md).
 *
 * The router (api.c) still picks handlers itself; once it has picked one it
 * asks routes_has(): a request it would serve that the table lacks is a
 * bug (a route added to the router and not to spec/api.json) and answers
 * 500 naming it, so any test of the new route fails until the spec has it.
 * tests/host/test_openapi.py calls every route of the document the other
 * way round.
 */
#ifndef CUBICLE_ROUTES_H
#define CUBICLE_ROUTES_H

#include <stdbool.h>
#include <stddef.h>

#include "httpd.h"

/* Whether the table has method m on path (a decoded path, no query): a
 * {param} pattern segment matches any one non-empty segment, and a route
 * marked x-cubicle-rest matches further segments too (the embed page's
 * assets). Every action name matches .../actions/{action}. */
bool routes_has(enum httpd_method m, const char *path);

/* The index of the route that has method m on path (as routes_has), or -1;
 * the number of routes, and route i's pattern ("/v1/computers/{}/stop"),
 * for /metrics' route label. */
int routes_find(enum httpd_method m, const char *path);
int routes_count(void);
const char *routes_pattern(int i);

/* The OpenAPI 3.1 document (docs/openapi.json), static bytes. */
const unsigned char *routes_openapi(size_t *len);

#endif
