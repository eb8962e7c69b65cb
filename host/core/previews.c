/*
 * previews: which ports of a computer are public, which preview and CDP
 * tokens are revoked, and the desktop browser's DevTools endpoint (core.h,
 * "previews and CDP"). Tokens themselves are the api's (host/api/preview.c):
 * here is only what a token cannot say by itself, in each computer's
 * runtime record (the relay's check runs on the event loop: memory only)
 * and in the store (a restart forgets no revocation and no public port).
 */
#include "core-internal.h"
#include "clock.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

void core_on_close_previews(struct core *c, void (*fn)(void *ctx, const char *id, const char *sub),
			    void *ctx)
{
	c->close_previews = fn;
	c->close_previews_ctx = ctx;
}

/* The slot of port in r (lock held); with `make`, a free or stale one if
 * none (NULL when all CORE_PREVIEW_PORTS are in use). */
static struct core_preview *core_preview_slot(struct core_rt *r, int port, bool make, int64_t now)
{
	struct core_preview *free_slot = NULL;
	for (int i = 0; i < CORE_PREVIEW_PORTS; i++) {
		struct core_preview *p = &r->previews[i];
		if (p->port == port)
			return p;
		/* A slot whose tokens have all expired (and that is not public)
		 * can be reused: nothing can present them any more. */
		bool stale = p->port && p->expires_ms < now && p->public_until_ms < now;
		if (!free_slot && (!p->port || stale))
			free_slot = p;
	}
	if (!make || !free_slot)
		return NULL;
	memset(free_slot, 0, sizeof *free_slot);
	free_slot->port = port;
	return free_slot;
}

/* The latest revocation that covers port's tokens (lock held). */
static int64_t core_preview_revoked(struct core_rt *r, const struct core_preview *p)
{
	return p && p->revoked_ms > r->previews_revoked_ms ? p->revoked_ms : r->previews_revoked_ms;
}

static bool core_preview_public(struct core_rt *r, const struct core_preview *p, int64_t now)
{
	return p && p->public_since_ms > core_preview_revoked(r, p) && p->public_until_ms > now;
}

/* A token's issue time: now, but after every revocation of port (lock held). */
static int64_t core_preview_issue(struct core_rt *r, const struct core_preview *p, int64_t now)
{
	int64_t revoked = core_preview_revoked(r, p);
	return now > revoked ? now : revoked + 1;
}

static void core_preview_save(struct core *c, const struct store_preview *sp)
{
	struct err e = {0};
	if (store_preview_put(c->store, sp, &e) < 0)
		fprintf(stderr,
			"cubicled: %s: a preview of port %d is not kept across a restart: %s\n",
			sp->computer, sp->port, e.message);
}

int core_preview_open(struct core *c, const char *id, const char *ws, int port, bool public_,
		      int64_t expires_ms, int64_t *issued, char workspace[40], struct err *e)
{
	int64_t now = clock_wall_ms();
	struct store_preview sp = {.port = port};
	pthread_mutex_lock(&c->lock);
	struct core_rt *r = core_rt_find(c, id);
	int rc = 0;
	struct core_preview *p = NULL;
	if (!r || (ws && strcmp(r->ws, ws) != 0))
		rc = err_set(e, ERR_NOT_FOUND, "no computer %.40s", id);
	else if (r->state != COMPUTER_RUNNING || !r->address[0])
		rc = err_set(e, ERR_CONFLICT, "computer %s is %s, not running%s", id,
			     computer_state_name(r->state),
			     r->state == COMPUTER_STOPPED ? "; POST .../start first" : "");
	else if (!(p = core_preview_slot(r, port, true, now)))
		rc = err_set(e, ERR_LIMIT,
			     "computer %s already has previews of %d ports; revoke one "
			     "(DELETE .../previews/{port}) or let it expire",
			     id, CORE_PREVIEW_PORTS);
	if (rc == 0) {
		*issued = core_preview_issue(r, p, now);
		if (public_) {
			p->public_since_ms = *issued;
			p->public_until_ms = expires_ms;
		}
		p->issued_ms = *issued;
		if (expires_ms > p->expires_ms)
			p->expires_ms = expires_ms;
		snprintf(workspace, 40, "%s", r->ws);
		snprintf(sp.computer, sizeof sp.computer, "%s", id);
		sp.public_since_ms = public_ ? p->public_since_ms : 0;
		sp.public_until_ms = public_ ? p->public_until_ms : 0;
		sp.issued_ms = p->issued_ms;
		sp.expires_ms = p->expires_ms;
	}
	pthread_mutex_unlock(&c->lock);
	if (rc == 0)
		core_preview_save(c, &sp);
	return rc;
}

/* Revokes port (0: all) of id, whose record the caller found (no lock held). */
static void core_preview_revoke_now(struct core *c, const char *id, int port)
{
	int64_t now = clock_wall_ms();
	pthread_mutex_lock(&c->lock);
	struct core_rt *r = core_rt_find(c, id);
	if (r && port == 0) {
		r->previews_revoked_ms = now;
	} else if (r) {
		struct core_preview *p = core_preview_slot(r, port, true, now);
		if (p) {
			p->revoked_ms = now;
			p->public_since_ms = p->public_until_ms = 0;
			if (p->expires_ms < now)
				p->expires_ms = now;
		}
	}
	pthread_mutex_unlock(&c->lock);
	struct store_preview sp = {
	    .port = port, .revoked_ms = now, .expires_ms = now + CORE_PREVIEW_TOKEN_MAX_S * 1000LL};
	snprintf(sp.computer, sizeof sp.computer, "%s", id);
	core_preview_save(c, &sp);
	if (c->close_previews) {
		char sub[16];
		snprintf(sub, sizeof sub, "p%d", port);
		c->close_previews(c->close_previews_ctx, id, port ? sub : NULL);
	}
}

int core_preview_revoke(struct core *c, const char *id, const char *ws, int port, struct err *e)
{
	pthread_mutex_lock(&c->lock);
	struct core_rt *r = core_rt_find(c, id);
	bool found = r && (!ws || strcmp(r->ws, ws) == 0);
	pthread_mutex_unlock(&c->lock);
	if (!found)
		return err_set(e, ERR_NOT_FOUND, "no computer %.40s", id);
	core_preview_revoke_now(c, id, port);
	return 0;
}

void core_previews_down(struct core *c, const char *id)
{
	core_preview_revoke_now(c, id, 0);
}

static void core_preview_when(int64_t ms, char out[32])
{
	time_t t = (time_t)(ms / 1000);
	struct tm tm;
	gmtime_r(&t, &tm);
	strftime(out, 32, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

int core_previews_list(struct core *c, const char *id, const char *ws, json_t **out, struct err *e)
{
	int64_t now = clock_wall_ms();
	json_t *list = json_array();
	pthread_mutex_lock(&c->lock);
	struct core_rt *r = core_rt_find(c, id);
	bool found = r && (!ws || strcmp(r->ws, ws) == 0);
	for (int i = 0; found && list && i < CORE_PREVIEW_PORTS; i++) {
		struct core_preview *p = &r->previews[i];
		bool pub = core_preview_public(r, p, now);
		/* Tokens issued before a revocation are dead: a port whose last
		 * token predates it has no preview left. */
		if (!p->port ||
		    (!pub && (p->expires_ms <= now || p->issued_ms <= core_preview_revoked(r, p))))
			continue;
		char when[32];
		core_preview_when(pub && p->public_until_ms > p->expires_ms ? p->public_until_ms
									    : p->expires_ms,
				  when);
		json_array_append_new(list, json_pack("{s:i, s:b, s:s}", "port", p->port, "public",
						      pub, "expires_at", when));
	}
	pthread_mutex_unlock(&c->lock);
	if (!found) {
		json_decref(list);
		return err_set(e, ERR_NOT_FOUND, "no computer %.40s", id);
	}
	*out = json_pack("{s:o}", "previews", list);
	return *out ? 0 : err_set(e, ERR_INTERNAL, "out of memory");
}

int core_preview_target(struct core *c, const char *id, int port, const char *ws, int64_t issued,
			char *address, size_t alen, char *token, size_t tlen,
			int64_t *public_until_ms, struct err *e)
{
	int64_t now = clock_wall_ms();
	pthread_mutex_lock(&c->lock);
	struct core_rt *r = core_rt_find(c, id);
	struct core_preview *p = r ? core_preview_slot(r, port, false, now) : NULL;
	int rc = 0;
	if (issued < 0 && !(p && p->public_since_ms))
		rc = err_set(e, ERR_UNAUTHORIZED,
			     "this preview needs its token: open the url that POST "
			     "/v1/computers/{id}/previews answered");
	else if (!r || (ws && strcmp(r->ws, ws) != 0) || r->state == COMPUTER_DELETED ||
		 r->state == COMPUTER_DELETING)
		rc = err_set(e, ERR_NOT_FOUND, "computer %s is gone (deleted)", id);
	else if (port == CORE_CDP_PORT && strcmp(r->kind, "desktop") != 0)
		rc = err_set(e, ERR_CONFLICT, "computer %s is a sandbox: it has no desktop browser",
			     id);
	else if (r->state != COMPUTER_RUNNING || !r->address[0])
		rc = err_set(e, ERR_CONFLICT,
			     "computer %s is %s, not running: start it, then open a new %s", id,
			     computer_state_name(r->state),
			     port == CORE_CDP_PORT ? "CDP URL (POST /v1/computers/{id}/cdp)"
						   : "preview (POST /v1/computers/{id}/previews)");
	else if (issued >= 0 && issued <= core_preview_revoked(r, p))
		rc = err_set(e, ERR_FORBIDDEN,
			     "this %s was revoked (DELETE, or the computer stopped since)",
			     port == CORE_CDP_PORT ? "CDP URL" : "preview");
	else if (issued < 0 && !core_preview_public(r, p, now))
		rc = err_set(e, ERR_FORBIDDEN, "this preview is no longer public");
	if (rc == 0) {
		snprintf(address, alen, "%s", r->address);
		snprintf(token, tlen, "%s", r->token);
		if (issued < 0)
			*public_until_ms = p->public_until_ms;
		r->last_activity_ms = now;
		r->activity_dirty = true;
	}
	pthread_mutex_unlock(&c->lock);
	return rc;
}

/* A browser path as Chromium says it: /devtools/browser/<uuid>. */
static bool core_cdp_path_ok(const char *p)
{
	if (!p || strncmp(p, "/devtools/browser/", 18) != 0 || strlen(p) > 96 || !p[18])
		return false;
	for (p += 18; *p; p++)
		if (!((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'z') ||
		      (*p >= 'A' && *p <= 'Z') || *p == '-'))
			return false;
	return true;
}

int core_cdp(struct core *c, const char *id, const char *ws, json_t **out, int64_t *issued,
	     char workspace[40], struct err *e)
{
	char address[320], token[80], kind[16];
	if (core_rt_running(c, id, ws, address, sizeof address, token, sizeof token, kind,
			    sizeof kind, e) < 0)
		return -1;
	if (strcmp(kind, "desktop") != 0)
		return err_set(e, ERR_CONFLICT,
			       "computer %s is a sandbox: CDP drives the desktop's browser", id);
	struct envd_reply rep;
	if (envd_cdp(address, token, 60, &rep, e) < 0)
		return -1;
	json_t *j = json_loadb(rep.body ? rep.body : "", rep.body_len, 0, NULL);
	int status = rep.status;
	envd_reply_free(&rep);
	if (status != 200) {
		int rc = err_from_json(e, j, status);
		json_decref(j);
		return rc;
	}
	/* envd is the guest's: its answer is checked before it is kept. */
	const char *path = json_string_value(json_object_get(j, "browser_path"));
	json_t *version = json_object_get(j, "version");
	char *vtext = json_is_object(version) ? json_dumps(version, JSON_COMPACT) : NULL;
	if (!core_cdp_path_ok(path) || !vtext ||
	    strlen(vtext) >= sizeof((struct core_rt *)0)->cdp_version) {
		free(vtext);
		json_decref(j);
		return err_set(e, ERR_BAD_GATEWAY,
			       "the computer's agent answered POST /v1/cdp with no usable browser "
			       "path or version");
	}
	int64_t now = clock_wall_ms();
	pthread_mutex_lock(&c->lock);
	struct core_rt *r = core_rt_find(c, id);
	if (r) {
		snprintf(r->cdp_path, sizeof r->cdp_path, "%s", path);
		snprintf(r->cdp_version, sizeof r->cdp_version, "%s", vtext);
		*issued =
		    core_preview_issue(r, core_preview_slot(r, CORE_CDP_PORT, false, now), now);
		snprintf(workspace, 40, "%s", r->ws);
	}
	pthread_mutex_unlock(&c->lock);
	free(vtext);
	if (!r) {
		json_decref(j);
		return err_set(e, ERR_NOT_FOUND, "no computer %.40s", id);
	}
	*out = j;
	return 0;
}

int core_cdp_info(struct core *c, const char *id, char *path, size_t plen, char **version)
{
	*version = NULL;
	pthread_mutex_lock(&c->lock);
	struct core_rt *r = core_rt_find(c, id);
	if (r && r->cdp_path[0]) {
		snprintf(path, plen, "%s", r->cdp_path);
		*version = strdup(r->cdp_version);
	}
	pthread_mutex_unlock(&c->lock);
	return *version ? 0 : -1;
}

/* A row the store kept: back on the computer's record. */
static void core_preview_load(void *ctx, const struct store_preview *sp)
{
	struct core *c = ctx;
	int64_t now = clock_wall_ms();
	pthread_mutex_lock(&c->lock);
	struct core_rt *r = core_rt_find(c, sp->computer);
	if (r && sp->port == 0) {
		if (sp->revoked_ms > r->previews_revoked_ms)
			r->previews_revoked_ms = sp->revoked_ms;
	} else if (r) {
		struct core_preview *p = core_preview_slot(r, sp->port, true, now);
		if (p) {
			p->public_since_ms = sp->public_since_ms;
			p->public_until_ms = sp->public_until_ms;
			p->revoked_ms = sp->revoked_ms;
			p->expires_ms = sp->expires_ms;
			p->issued_ms = sp->issued_ms;
		}
	}
	pthread_mutex_unlock(&c->lock);
}

int core_previews_load(struct core *c, struct err *e)
{
	return store_previews(c->store, clock_wall_ms(), core_preview_load, c, e);
}
