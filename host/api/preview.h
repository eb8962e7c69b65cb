/*
 * preview: previews of servers inside computers, and CDP for the desktop's
 * browser (docs/api.md "Previews" and "CDP"), both served by httpd's relay
 * listener (wire/httpd.h, "Relays"): each connection is relayed, bytes as
 * they are, to a port on the computer's loopback through its envd's tunnel.
 *
 * A preview of port P of computer C lives at its own host,
 * <P>-<C>.<domain> (the domain of --preview-url: "localhost" by default,
 * which Chromium resolves to the loopback), so an app that uses absolute
 * paths works. POST .../previews answers a URL with a token (wire/token.h,
 * scope "p<P>"); the first request that carries it in ?cubicle_token= is
 * answered with a redirect to the same URL without it and a cookie holding
 * it (cubicle_preview: HttpOnly, SameSite=Lax, Path=/, no Domain, so only
 * that host gets it). Later requests, WebSockets included, carry the
 * cookie; it is removed from every request before the computer sees it. A
 * public preview (--public-previews) needs no token until it expires.
 *
 * CDP: POST .../cdp starts (or reuses) the desktop's Chromium with its
 * DevTools endpoint on the guest's loopback (envd/cdp.h) and answers
 * ws_url = ws://<relay host>/cdp/<token>/devtools/browser/<id>: the token
 * (scope "cdp") is the path's prefix, removed from every request with the
 * Host (Chromium only answers a loopback Host) and the Origin (Chromium
 * refuses WebSockets from web origins). GET /cdp/<token>/json/version is
 * answered here, with ws URLs through the relay.
 *
 * Everything the relay router does runs on httpd's event loop: a token's
 * MAC, the computer's runtime record (core_preview_target: memory only).
 * Pages for refusals are HTML for browsers and JSON for API clients. A
 * stop, a delete or a DELETE .../previews/{port} revokes tokens (kept
 * across a restart) and closes open connections.
 */
#ifndef CUBICLE_API_PREVIEW_H
#define CUBICLE_API_PREVIEW_H

#include <stdbool.h>
#include <jansson.h>

#include "core.h"
#include "err.h"
#include "httpd.h"
#include "httpreq.h"

#define PREVIEW_COOKIE "cubicle_preview"
#define PREVIEW_QUERY  "cubicle_token"

struct previews;

struct previews_opts {
	const unsigned char *key; /* TOKEN_KEY_BYTES: signs preview and CDP tokens */
	/* Where browsers reach the relay listener: "SCHEME://DOMAIN[:PORT]"
	 * ("http://localhost:8081"): previews are SCHEME://P-C.DOMAIN[:PORT]/. */
	const char *url;
	int ttl_max_s;	     /* longest token lifetime a caller may ask for (0 = 86400) */
	int per_computer;    /* relays one computer may have open at once (0 = 32) */
	int idle_s;	     /* a relay without a byte either way ends after this (0 = 300) */
	bool public_allowed; /* public previews may be made (--public-previews) */
};

/* Registers with core (relays close when previews are revoked). NULL with e
 * when the URL does not parse. */
struct previews *previews_create(struct core *core, struct httpd *h, const struct previews_opts *o,
				 struct err *e);
void previews_destroy(struct previews *p);

/* POST /v1/computers/{id}/previews {"port","ttl_s"?,"public"?} →
 * {"url","expires_at","port","public"}. ws NULL: the admin. */
int previews_grant(struct previews *p, const char *id, const char *ws, const json_t *body,
		   json_t **out, struct err *e);
/* DELETE /v1/computers/{id}/previews/{port}. */
int previews_revoke(struct previews *p, const char *id, const char *ws, const char *port,
		    struct err *e);
/* GET /v1/computers/{id}/previews. */
int previews_list(struct previews *p, const char *id, const char *ws, json_t **out, struct err *e);
/* POST /v1/computers/{id}/cdp {"ttl_s"?} → {"ws_url","http_url","expires_at","browser"}. */
int previews_cdp(struct previews *p, const char *id, const char *ws, const json_t *body,
		 json_t **out, struct err *e);

/* The relay router (httpd_opts.relay). */
int previews_relay(struct previews *p, const struct httpreq_head *head, struct httpd_relay *r,
		   struct httpd_relay_answer *a);

#endif
