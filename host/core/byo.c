/*
 * byo: machines you bring (docs/byo.md). A machine's envd dials
 * /v1/connect; the API's tunnel router (on the loop, memory only) checks
 * its credential's form and digest, parks what the upgrade said under a
 * nonce, and hands the WebSocket to httpd's tunnel, which relays it to
 * <state>/byo.sock with "byo <nonce>" as its first line. Here a thread per
 * link reads that line, redeems a connect token (SQLite: never on the
 * loop) or takes the machine the credential named, presents the machine's
 * envd as UNIX sockets in computers/<id>/io/ (envd.sock, vnc.sock) and runs
 * the multiplexer (wire/mux.h) between them and the link. So envd_client,
 * the file spool and the stream gateway reach a connected machine exactly
 * as they reach a container, through a UNIX socket, unchanged.
 */

#include "core-internal.h"
#include "clock.h"
#include "ident.h"
#include "mux.h"
#include "params.h"

#include <errno.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#define BYO_PENDING    64    /* upgrades admitted, waiting for their link thread */
#define BYO_PENDING_MS 30000 /* ... for at most this long */
#define BYO_MAX_LINKS  256   /* connected machines at once */

struct byo_pending {
	char nonce[40];
	int64_t at_ms; /* 0 = free */
	bool is_token;
	char token_id[40], digest[65];
	char machine[40];
	char hostname[64];
	bool display;
	int width, height;
};

struct byo_link {
	struct byo_link *next;
	char id[40];
	struct mux *m;
	bool ended; /* its multiplexer returned (under byo.lock) */
};

struct byo {
	struct core *c;
	char path[600];
	int lfd;
	int wake[2];
	pthread_t acceptor;
	pthread_mutex_t lock; /* pending, links, nlinks */
	pthread_cond_t gone;  /* a link left `links` */
	struct byo_pending pending[BYO_PENDING];
	struct byo_link *links;
	int nlinks;
	int threads; /* link threads alive (they use b) */
};

static void byo_sha256_hex(const char *s, char out[65])
{
	unsigned char h[32];
	unsigned int len = 0;
	EVP_Digest(s, strlen(s), h, &len, EVP_sha256(), NULL);
	for (int i = 0; i < 32; i++)
		snprintf(out + 2 * i, 3, "%02x", h[i]);
}

/* Whether s is n lowercase hex digits. */
static bool byo_hex(const char *s, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
			return false;
	return s[n] == 0;
}

/* ---- tokens and credentials ----------------------------------------------------- */

/* "cbt_<16 hex>_<32 hex>": the token's id into id ("t-<16 hex>"). */
static bool byo_parse_token(const char *tok, char id[40])
{
	if (strncmp(tok, "cbt_", 4) != 0 || strlen(tok) != 4 + 16 + 1 + 32 || tok[20] != '_')
		return false;
	char a[17];
	memcpy(a, tok + 4, 16);
	a[16] = 0;
	if (!byo_hex(a, 16) || !byo_hex(tok + 21, 32))
		return false;
	snprintf(id, 40, "t-%s", a);
	return true;
}

/* "cbm_<16 hex>_<32 hex>": the machine's id into id ("c-<16 hex>"). */
static bool byo_parse_credential(const char *cred, char id[40])
{
	if (strncmp(cred, "cbm_", 4) != 0 || strlen(cred) != 4 + 16 + 1 + 32 || cred[20] != '_')
		return false;
	char a[17];
	memcpy(a, cred + 4, 16);
	a[16] = 0;
	if (!byo_hex(a, 16) || !byo_hex(cred + 21, 32))
		return false;
	snprintf(id, 40, "c-%s", a);
	return true;
}

int core_connect_token(struct core *c, const char *ws, const json_t *params, const char *base_url,
		       json_t **out, struct err *e)
{
	static const char *const known[] = {"kind", "name", "ttl_s", "metadata", "workspace", NULL};
	static const char *const kinds[] = {"desktop", "sandbox", NULL};
	if (params_check_known(params, known, e) < 0)
		return -1;
	struct store_connect_token t = {0};
	int kind = 0;
	if (param_enum(params, "kind", kinds, &kind, e) < 0)
		return -1;
	snprintf(t.kind, sizeof t.kind, "%s", kinds[kind]);
	const char *name = NULL, *wsp = NULL;
	if (param_str(params, "name", &name, e) < 0 || param_str(params, "workspace", &wsp, e) < 0)
		return -1;
	if (name && strlen(name) >= sizeof t.name)
		return err_param(e, "name", "name: at most %zu bytes", sizeof t.name - 1);
	snprintf(t.name, sizeof t.name, "%s", name ? name : "");
	if (ws && wsp && strcmp(ws, wsp) != 0)
		return err_param(e, "workspace", "workspace: your key belongs to %s, not %s", ws,
				 wsp);
	if (!ws && !wsp)
		return err_param(e, "workspace", "workspace: required with the admin key");
	struct store_workspace w;
	if (store_workspace_get(c->store, ws ? ws : wsp, &w, NULL) < 0)
		return err_param(e, "workspace", "workspace: no workspace %s", ws ? ws : wsp);
	if (c->pool_ws[0] && strcmp(w.id, c->pool_ws) == 0)
		return err_param(e, "workspace", "workspace: the warm pool's takes no machines");
	snprintf(t.workspace, sizeof t.workspace, "%s", w.id);
	long long ttl = 600;
	if (param_int(params, "ttl_s", 10, 86400, &ttl, e) < 0)
		return -1;
	json_t *meta = NULL;
	if (param_object(params, "metadata", &meta, e) < 0)
		return -1;
	char hex[17], secret[33], token[64];
	if (ident_random_hex(hex, 8, e) < 0 || ident_random_hex(secret, 16, e) < 0)
		return -1;
	snprintf(token, sizeof token, "cbt_%s_%s", hex, secret);
	snprintf(t.id, sizeof t.id, "t-%s", hex);
	byo_sha256_hex(token, t.digest);
	t.created_ms = clock_wall_ms();
	t.expires_ms = t.created_ms + ttl * 1000;
	t.metadata = meta;
	if (store_connect_token_insert(c->store, &t, e) < 0)
		return -1;
	char expires[40];
	time_t sec = (time_t)(t.expires_ms / 1000);
	struct tm tm;
	gmtime_r(&sec, &tm);
	strftime(expires, sizeof expires, "%Y-%m-%dT%H:%M:%SZ", &tm);
	/* A here-document: the token reaches envd's stdin, never an argv
	 * (another user's `ps` shows the command line only). */
	char *command = NULL;
	if (asprintf(&command, "envd --connect %s --token-file - <<'EOF'\n%s\nEOF", base_url,
		     token) < 0)
		return err_set(e, ERR_INTERNAL, "out of memory");
	*out = json_pack("{s:s, s:s, s:s, s:s, s:s}", "id", t.id, "token", token, "expires_at",
			 expires, "kind", t.kind, "command", command);
	free(command);
	return 0;
}

int core_byo_admit(struct core *c, const char *authorization, const char *hostname, bool display,
		   int width, int height, char *path, size_t plen, char *preamble, size_t prelen,
		   struct err *e)
{
	struct byo *b = c->byo;
	if (!b)
		return err_set(e, ERR_UNAVAILABLE, "machines cannot connect to this server");
	if (strncmp(authorization, "Bearer ", 7) != 0)
		return err_set(e, ERR_UNAUTHORIZED,
			       "connect with Authorization: Bearer <connect token or credential>");
	const char *tok = authorization + 7;
	struct byo_pending p = {0};
	if (byo_parse_token(tok, p.token_id)) {
		p.is_token = true;
		byo_sha256_hex(tok, p.digest);
	} else if (byo_parse_credential(tok, p.machine)) {
		char digest[65];
		byo_sha256_hex(tok, digest);
		pthread_mutex_lock(&c->lock);
		struct core_rt *r = core_rt_find(c, p.machine);
		bool ok = r && r->byo && r->state != COMPUTER_DELETING &&
			  r->state != COMPUTER_DELETED && CRYPTO_memcmp(r->cred, digest, 64) == 0;
		pthread_mutex_unlock(&c->lock);
		if (!ok)
			return err_set(
			    e, ERR_UNAUTHORIZED,
			    "this machine's credential is not valid (revoked: the machine "
			    "was deleted)");
	} else {
		return err_set(e, ERR_UNAUTHORIZED, "not a connect token or a machine credential");
	}
	snprintf(p.hostname, sizeof p.hostname, "%s", hostname && *hostname ? hostname : "machine");
	for (char *q = p.hostname; *q; q++)
		if ((unsigned char)*q < 0x21 || (unsigned char)*q > 0x7e || *q == '"' || *q == '\\')
			*q = '_';
	p.display = display;
	p.width = width >= 64 && width <= 16384 ? width : 0;
	p.height = height >= 64 && height <= 16384 ? height : 0;
	if (ident_random_hex(p.nonce, 16, e) < 0)
		return -1;
	int64_t now = clock_now_ms();
	pthread_mutex_lock(&b->lock);
	int slot = -1;
	for (int i = 0; i < BYO_PENDING && slot < 0; i++)
		if (!b->pending[i].at_ms || now - b->pending[i].at_ms > BYO_PENDING_MS)
			slot = i;
	if (slot >= 0 && b->nlinks < BYO_MAX_LINKS) {
		p.at_ms = now;
		b->pending[slot] = p;
	}
	int nlinks = b->nlinks;
	pthread_mutex_unlock(&b->lock);
	if (slot < 0 || nlinks >= BYO_MAX_LINKS)
		return err_set(e, ERR_UNAVAILABLE, "too many machines connecting at once; retry");
	snprintf(path, plen, "%s", b->path);
	snprintf(preamble, prelen, "byo %s\n", p.nonce);
	return 0;
}

/* ---- a link ---------------------------------------------------------------------- */

/* The first line of the link: "byo <nonce>\n", within 5 s. */
static int byo_read_preamble(int fd, char nonce[40])
{
	char line[64];
	size_t n = 0;
	int64_t until = clock_now_ms() + 5000;
	while (n < sizeof line - 1) {
		int left = (int)(until - clock_now_ms());
		struct pollfd p = {.fd = fd, .events = POLLIN};
		if (left <= 0 || poll(&p, 1, left) <= 0)
			return -1;
		ssize_t r = read(fd, line + n, 1);
		if (r <= 0)
			return -1;
		if (line[n] == '\n') {
			line[n] = 0;
			if (strncmp(line, "byo ", 4) != 0 || strlen(line + 4) >= 40)
				return -1;
			snprintf(nonce, 40, "%s", line + 4);
			return 0;
		}
		n++;
	}
	return -1;
}

/* A BYE on a link that runs no multiplexer. */
static void byo_refuse(int fd, const char *why)
{
	unsigned char h[MUX_HEADER];
	size_t n = strlen(why);
	h[0] = MUX_BYE;
	memset(h + 1, 0, 4);
	h[5] = (unsigned char)(n >> 24);
	h[6] = (unsigned char)(n >> 16);
	h[7] = (unsigned char)(n >> 8);
	h[8] = (unsigned char)n;
	if (send(fd, h, sizeof h, MSG_NOSIGNAL) == (ssize_t)sizeof h)
		send(fd, why, n, MSG_NOSIGNAL);
	fprintf(stderr, "cubicled: a machine's link refused: %s\n", why);
}

/* A new machine from a redeemed token: running, billed at size "byo" (no
 * cost). Its credential into cred. */
static int byo_create(struct core *c, const struct store_connect_token *t,
		      const struct byo_pending *p, char id[40], char cred[64], struct err *e)
{
	struct store_computer sc = {0};
	snprintf(sc.workspace, sizeof sc.workspace, "%s", t->workspace);
	snprintf(sc.kind, sizeof sc.kind, "%s",
		 strcmp(t->kind, "desktop") == 0 && p->display ? "desktop" : "sandbox");
	snprintf(sc.size, sizeof sc.size, "byo");
	snprintf(sc.isolation, sizeof sc.isolation, "byo");
	sc.width = p->width;
	sc.height = p->height;
	sc.idle_timeout_s = 0; /* yours: never stopped for idling */
	sc.metadata = t->metadata ? json_deep_copy(t->metadata) : json_object();
	if (ident_random_hex(sc.envd_token, 24, e) < 0)
		goto fail;
	sc.state = COMPUTER_OFFLINE;
	char secret[33];
	if (ident_random_hex(secret, 16, e) < 0)
		goto fail;
	sc.driver_state = json_pack("{s:s, s:s}", "hostname", p->hostname, "name", t->name);
	sc.last_activity_ms = clock_wall_ms();
	/* In a cluster it is the host's it dialled (it takes none of its
	 * capacity): calls for it are forwarded there. */
	struct store_place here = {.host = c->host_id};
	struct store_commit how = {.insert = true, .place = c->cluster ? &here : NULL};
	if (store_computer_commit(c->store, &sc, &how, e) < 0)
		goto fail;
	snprintf(cred, 64, "cbm_%.16s_%.32s", sc.id + 2, secret);
	char digest[65];
	byo_sha256_hex(cred, digest);
	json_object_set_new(sc.driver_state, "credential_sha256", json_string(digest));
	if (store_computer_update(c->store, &sc, e) < 0 || !core_rt_add(c, &sc))
		goto fail;
	store_connect_token_set_computer(c->store, t->id, sc.id, NULL);
	snprintf(id, 40, "%s", sc.id);
	fprintf(stderr, "cubicled: %s: a machine connected (%s, %s)\n", sc.id, p->hostname,
		sc.kind);
	store_computer_clear(&sc);
	return 0;
fail:
	store_computer_clear(&sc);
	return -1;
}

static int byo_listen(const char *path)
{
	unlink(path);
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	if (strlen(path) >= sizeof sa.sun_path)
		return -1;
	snprintf(sa.sun_path, sizeof sa.sun_path, "%s", path);
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0)
		return -1;
	if (bind(fd, (struct sockaddr *)&sa, sizeof sa) < 0 || chmod(path, 0600) < 0 ||
	    listen(fd, 64) < 0) {
		close(fd);
		unlink(path);
		return -1;
	}
	return fd;
}

/* Moves machine id to state (running: billed at no cost; offline: billing
 * ends), unless it is being deleted. rt->op taken here. */
static int byo_set_state(struct core *c, const char *id, enum computer_state state,
			 const char *addr, const char *vnc)
{
	struct store_computer sc = {0};
	struct core_rt *rt;
	if (core_lock_computer(c, id, NULL, &sc, &rt, NULL) < 0)
		return -1;
	int rc = -1;
	if (sc.state == COMPUTER_RUNNING || sc.state == COMPUTER_OFFLINE) {
		pthread_mutex_lock(&c->lock);
		snprintf(rt->address, sizeof rt->address, "%s", addr ? addr : "");
		snprintf(rt->vnc, sizeof rt->vnc, "%s", vnc ? vnc : "");
		pthread_mutex_unlock(&c->lock);
		if (sc.state == state)
			rc = 0;
		else
			rc = core_set_state_billed(c, &sc, state, NULL,
						   state == COMPUTER_RUNNING ? "running" : NULL,
						   clock_wall_ms(), NULL);
	}
	if (rc == 0 && state == COMPUTER_OFFLINE && c->close_streams)
		c->close_streams(c->close_streams_ctx, id);
	pthread_mutex_unlock(&rt->op);
	store_computer_clear(&sc);
	return rc;
}

struct byo_run {
	struct mux *m;
	pthread_t th;
	char why[256];
	struct byo *b;
	struct byo_link *me;
};

static void *byo_mux_main(void *arg)
{
	struct byo_run *r = arg;
	mux_run(r->m, r->why, sizeof r->why);
	pthread_mutex_lock(&r->b->lock);
	r->me->ended = true;
	pthread_cond_broadcast(&r->b->gone);
	pthread_mutex_unlock(&r->b->lock);
	return NULL;
}

struct byo_job {
	struct byo *b;
	int fd;
};

static void *byo_link_main(void *arg)
{
	struct byo_job *j = arg;
	struct byo *b = j->b;
	struct core *c = b->c;
	int fd = j->fd;
	free(j);
	char nonce[40];
	struct byo_pending p = {0};
	bool found = false;
	if (byo_read_preamble(fd, nonce) == 0) {
		pthread_mutex_lock(&b->lock);
		for (int i = 0; i < BYO_PENDING && !found; i++)
			if (b->pending[i].at_ms && strcmp(b->pending[i].nonce, nonce) == 0) {
				p = b->pending[i];
				b->pending[i].at_ms = 0;
				found = true;
			}
		pthread_mutex_unlock(&b->lock);
	}
	char id[40] = "", cred[64] = "";
	struct err e = {0};
	if (!found) {
		close(fd);
		goto out;
	}
	if (p.is_token) {
		struct store_connect_token t;
		if (store_connect_token_redeem(c->store, p.token_id, p.digest, clock_wall_ms(), &t,
					       &e) < 0 ||
		    byo_create(c, &t, &p, id, cred, &e) < 0) {
			json_decref(t.metadata);
			byo_refuse(fd, e.message);
			close(fd);
			goto out;
		}
		json_decref(t.metadata);
	} else {
		snprintf(id, sizeof id, "%s", p.machine);
	}
	/* One link per machine: a newer one replaces the old (a machine that
	 * reconnects before the old link was seen dead). */
	struct byo_link *me = calloc(1, sizeof *me);
	struct mux_opts mo = {.link = fd, .host = true};
	char dir[600], hpath[700], vpath[700];
	snprintf(dir, sizeof dir, "%s/computers/%s/io", c->cfg.state_dir, id);
	snprintf(hpath, sizeof hpath, "%s/envd.sock", dir);
	snprintf(vpath, sizeof vpath, "%s/vnc.sock", dir);
	pthread_mutex_lock(&b->lock);
	for (struct byo_link *l = b->links; l; l = l->next)
		if (strcmp(l->id, id) == 0)
			mux_stop(l->m);
	for (int waited = 0; waited < 50; waited++) {
		bool old = false;
		for (struct byo_link *l = b->links; l; l = l->next)
			old |= strcmp(l->id, id) == 0;
		if (!old)
			break;
		struct timespec ts = clock_deadline(CLOCK_REALTIME, 100);
		pthread_cond_timedwait(&b->gone, &b->lock, &ts);
	}
	pthread_mutex_unlock(&b->lock);
	char kind[16] = "";
	pthread_mutex_lock(&c->lock);
	struct core_rt *r = core_rt_find(c, id);
	if (r)
		snprintf(kind, sizeof kind, "%s", r->kind);
	pthread_mutex_unlock(&c->lock);
	char sdir[600];
	snprintf(sdir, sizeof sdir, "%s/computers/%s", c->cfg.state_dir, id);
	mkdir(sdir, 0700);
	mkdir(dir, 0700);
	int hfd = byo_listen(hpath);
	int vfd = strcmp(kind, "desktop") == 0 ? byo_listen(vpath) : -1;
	if (!me || hfd < 0) {
		byo_refuse(fd, "cubicled cannot serve this machine now (out of resources)");
		goto end;
	}
	mo.listeners[mo.nlisteners++] = (struct mux_listener){hfd, "http"};
	if (vfd >= 0)
		mo.listeners[mo.nlisteners++] = (struct mux_listener){vfd, "vnc"};
	me->m = mux_new(&mo);
	if (!me->m) {
		byo_refuse(fd, "cubicled is out of memory");
		goto end;
	}
	snprintf(me->id, sizeof me->id, "%s", id);
	char token[80] = "";
	pthread_mutex_lock(&c->lock);
	if ((r = core_rt_find(c, id)))
		snprintf(token, sizeof token, "%s", r->token);
	pthread_mutex_unlock(&c->lock);
	json_t *hello = json_pack("{s:s, s:s}", "id", id, "token", token);
	if (cred[0])
		json_object_set_new(hello, "credential", json_string(cred));
	char *hs = json_dumps(hello, JSON_COMPACT);
	json_decref(hello);
	mux_send(me->m, MUX_HELLO, hs, strlen(hs));
	free(hs);
	pthread_mutex_lock(&b->lock);
	me->next = b->links;
	b->links = me;
	b->nlinks++;
	pthread_mutex_unlock(&b->lock);
	/* The multiplexer runs on a thread of its own while this one waits for
	 * envd's /health through it (envd starts its API once HELLO gave it its
	 * token): only then is the machine running. */
	struct byo_run run = {.m = me->m, .b = b, .me = me};
	if (pthread_create(&run.th, NULL, byo_mux_main, &run) != 0) {
		byo_refuse(fd, "cubicled cannot serve this machine now (out of threads)");
		goto end;
	}
	char addr[720];
	snprintf(addr, sizeof addr, "unix:%s", hpath);
	bool ready = false;
	for (int64_t until = clock_now_ms() + 10000; !ready && clock_now_ms() < until;) {
		struct envd_reply er;
		ready = envd_health(addr, token, 2000, &er, NULL) == 0 && er.status == 200;
		envd_reply_free(&er);
		pthread_mutex_lock(&b->lock);
		bool over = me->ended;
		pthread_mutex_unlock(&b->lock);
		if (over)
			break;
		if (!ready)
			clock_sleep_ms(20);
	}
	if (!ready)
		mux_stop(me->m);
	else if (byo_set_state(c, id, COMPUTER_RUNNING, addr, vfd >= 0 ? vpath : NULL) < 0)
		mux_bye(me->m, "this machine was deleted");
	else
		fprintf(stderr, "cubicled: %s: online\n", id);
	pthread_join(run.th, NULL);
	const char *why = run.why;
	byo_set_state(c, id, COMPUTER_OFFLINE, NULL, NULL);
	fprintf(stderr, "cubicled: %s: offline (%s)\n", id, why);
end:
	/* Leaves the list last: a newer link of the same machine waits for
	 * this one to be gone, sockets included, before it binds its own. */
	if (hfd >= 0) {
		close(hfd);
		unlink(hpath);
	}
	if (vfd >= 0) {
		close(vfd);
		unlink(vpath);
	}
	close(fd);
	pthread_mutex_lock(&b->lock);
	for (struct byo_link **pp = &b->links; *pp; pp = &(*pp)->next)
		if (*pp == me) {
			*pp = me->next;
			b->nlinks--;
			break;
		}
	pthread_cond_broadcast(&b->gone);
	pthread_mutex_unlock(&b->lock);
	if (me && me->m)
		mux_free(me->m);
	free(me);
out:
	pthread_mutex_lock(&b->lock);
	b->threads--;
	pthread_cond_broadcast(&b->gone);
	pthread_mutex_unlock(&b->lock);
	return NULL;
}

/* ---- the listener ---------------------------------------------------------------- */

static void *byo_accept_main(void *arg)
{
	struct byo *b = arg;
	for (;;) {
		struct pollfd p[2] = {{.fd = b->wake[0], .events = POLLIN},
				      {.fd = b->lfd, .events = POLLIN}};
		if (poll(p, 2, -1) < 0 && errno != EINTR)
			break;
		if (p[0].revents)
			break;
		if (!(p[1].revents & POLLIN))
			continue;
		int fd = accept4(b->lfd, NULL, NULL, SOCK_CLOEXEC);
		if (fd < 0)
			continue;
		struct byo_job *j = malloc(sizeof *j);
		pthread_t t;
		pthread_attr_t attr;
		pthread_attr_init(&attr);
		pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
		if (!j) {
			close(fd);
		} else {
			j->b = b;
			j->fd = fd;
			pthread_mutex_lock(&b->lock);
			b->threads++;
			pthread_mutex_unlock(&b->lock);
			if (pthread_create(&t, &attr, byo_link_main, j) != 0) {
				close(fd);
				free(j);
				pthread_mutex_lock(&b->lock);
				b->threads--;
				pthread_mutex_unlock(&b->lock);
			}
		}
		pthread_attr_destroy(&attr);
	}
	return NULL;
}

int byo_open(struct core *c, struct err *e)
{
	struct byo *b = calloc(1, sizeof *b);
	if (!b)
		return err_set(e, ERR_INTERNAL, "out of memory");
	b->c = c;
	snprintf(b->path, sizeof b->path, "%s/byo.sock", c->cfg.state_dir);
	pthread_mutex_init(&b->lock, NULL);
	pthread_cond_init(&b->gone, NULL);
	b->lfd = byo_listen(b->path);
	if (b->lfd < 0 || pipe2(b->wake, O_CLOEXEC) < 0) {
		err_set(e, ERR_INTERNAL, "cannot listen on %s: %s", b->path, strerror(errno));
		if (b->lfd >= 0)
			close(b->lfd);
		free(b);
		return -1;
	}
	int fl = fcntl(b->lfd, F_GETFL);
	fcntl(b->lfd, F_SETFL, fl & ~O_NONBLOCK);
	fcntl(b->lfd, F_SETFL, fl | O_NONBLOCK);
	pthread_create(&b->acceptor, NULL, byo_accept_main, b);
	c->byo = b;
	return 0;
}

void byo_disconnect(struct core *c, const char *id, const char *reason)
{
	struct byo *b = c->byo;
	if (!b)
		return;
	pthread_mutex_lock(&b->lock);
	bool any = false;
	for (struct byo_link *l = b->links; l; l = l->next)
		if (strcmp(l->id, id) == 0 && l->m) {
			mux_bye(l->m, reason);
			any = true;
		}
	int64_t until = clock_now_ms() + 3000;
	while (any && clock_now_ms() < until) {
		any = false;
		for (struct byo_link *l = b->links; l; l = l->next)
			any |= strcmp(l->id, id) == 0 && !l->ended;
		if (!any)
			break;
		struct timespec ts = clock_deadline(CLOCK_REALTIME, 50);
		pthread_cond_timedwait(&b->gone, &b->lock, &ts);
	}
	pthread_mutex_unlock(&b->lock);
}

void byo_close(struct core *c)
{
	struct byo *b = c->byo;
	if (!b)
		return;
	char x = 1;
	if (write(b->wake[1], &x, 1) < 0) {
		/* the acceptor ends at exit anyway */
	}
	pthread_join(b->acceptor, NULL);
	close(b->lfd);
	unlink(b->path);
	/* The links end (machines see them close and reconnect to the next
	 * cubicled); b is freed once none uses it, else left (as core_close
	 * leaves the core when operations still run). */
	pthread_mutex_lock(&b->lock);
	for (struct byo_link *l = b->links; l; l = l->next)
		if (l->m)
			mux_stop(l->m);
	int64_t until = clock_now_ms() + 3000;
	while (b->threads && clock_now_ms() < until) {
		struct timespec ts = clock_deadline(CLOCK_REALTIME, 50);
		pthread_cond_timedwait(&b->gone, &b->lock, &ts);
	}
	bool idle = !b->threads;
	pthread_mutex_unlock(&b->lock);
	c->byo = NULL;
	if (idle) {
		close(b->wake[0]);
		close(b->wake[1]);
		free(b);
	}
}
