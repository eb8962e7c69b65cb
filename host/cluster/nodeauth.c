/*
 * nodeauth: signed node-to-node calls (nodeauth.h).
 */
#include "nodeauth.h"
#include "base64.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/crypto.h>
#include <openssl/hmac.h>
#include <openssl/sha.h>

#include "ident.h"

/* The nonces seen, by value, with when they stop mattering (open
 * addressing; an entry past its expiry is free). */
#define SEEN_SLOTS NODEAUTH_SEEN_MAX
#define SEEN_PROBE 128

struct nodeauth {
	unsigned char key[SHA256_DIGEST_LENGTH];
	pthread_mutex_t lock;
	struct seen {
		uint64_t nonce;
		int64_t expires_ms;
	} * seen; /* SEEN_SLOTS, under lock */
};

struct nodeauth *nodeauth_create(const char *secret, struct err *e)
{
	if (!secret || strlen(secret) < 32) {
		err_param(e, "cluster_secret",
			  "the cluster secret must be at least 32 characters (every node holds "
			  "the same one)");
		return NULL;
	}
	struct nodeauth *a = calloc(1, sizeof *a);
	if (a)
		a->seen = calloc(SEEN_SLOTS, sizeof *a->seen);
	if (!a || !a->seen) {
		free(a);
		err_set(e, ERR_INTERNAL, "out of memory");
		return NULL;
	}
	SHA256((const unsigned char *)secret, strlen(secret), a->key);
	pthread_mutex_init(&a->lock, NULL);
	return a;
}

void nodeauth_destroy(struct nodeauth *a)
{
	if (!a)
		return;
	OPENSSL_cleanse(a->key, sizeof a->key);
	pthread_mutex_destroy(&a->lock);
	free(a->seen);
	free(a);
}

/* mac of "<claims>\n<method>\n<path_query>" into out (44 bytes). */
static void nodeauth_mac(const struct nodeauth *a, const char *claims, size_t clen,
			 const char *method, const char *path_query, char out[48])
{
	unsigned char mac[32];
	unsigned int maclen = sizeof mac;
	char *msg = NULL;
	int n = asprintf(&msg, "%.*s\n%s\n%s", (int)clen, claims, method, path_query);
	if (n < 0 || !HMAC(EVP_sha256(), a->key, sizeof a->key, (const unsigned char *)msg,
			   (size_t)n, mac, &maclen))
		memset(mac, 0, sizeof mac); /* never matches a real one */
	free(n < 0 ? NULL : msg);
	base64url_encode(mac, sizeof mac, out);
}

int nodeauth_sign(struct nodeauth *a, const char *host, const char *ws, const char *method,
		  const char *path_query, int64_t now_ms, char out[NODEAUTH_MAX], struct err *e)
{
	char nonce[17];
	if (!ident_ok(host, 63) || (ws && !ident_ok(ws, 39)))
		return err_set(e, ERR_INTERNAL, "cannot sign a node call for these ids");
	if (ident_random_hex(nonce, 8, e) < 0)
		return -1;
	char claims[NODEAUTH_MAX];
	/* The admin is "*", which no identifier can be. */
	int n = snprintf(claims, sizeof claims, "n1.%s.%" PRId64 ".%s.%s", host, now_ms,
			 ws ? ws : "*", nonce);
	if (n < 0 || (size_t)n + 46 >= NODEAUTH_MAX)
		return err_set(e, ERR_INTERNAL, "node call claims too long");
	char mac[48];
	nodeauth_mac(a, claims, (size_t)n, method, path_query, mac);
	snprintf(out, NODEAUTH_MAX, "%.200s.%.44s", claims, mac);
	return 0;
}

int nodeauth_canonical(const char *path, const char *const *query, size_t n, char *out, size_t len)
{
	int w = snprintf(out, len, "%s", path);
	if (w < 0 || (size_t)w >= len)
		return -1;
	size_t at = (size_t)w;
	for (size_t i = 0; i < n; i++) {
		w = snprintf(out + at, len - at, "\x1f%zu:%s", strlen(query[i]), query[i]);
		if (w < 0 || (size_t)w >= len - at)
			return -1;
		at += (size_t)w;
	}
	return 0;
}

/* Appends s percent-encoded (all but A-Z a-z 0-9 - . _ ~) at *at; -1 when
 * it does not fit. */
static int nodeauth_escape(const char *s, size_t slen, char *out, size_t len, size_t *at)
{
	static const char hex[] = "0123456789ABCDEF";
	for (size_t i = 0; i < slen; i++) {
		unsigned char ch = (unsigned char)s[i];
		bool plain = (ch >= 'A' && ch <= 'Z') || (ch >= 'a' && ch <= 'z') ||
			     (ch >= '0' && ch <= '9') || ch == '-' || ch == '.' || ch == '_' ||
			     ch == '~';
		if (*at + (plain ? 1 : 3) >= len)
			return -1;
		if (plain) {
			out[(*at)++] = (char)ch;
		} else {
			out[(*at)++] = '%';
			out[(*at)++] = hex[ch >> 4];
			out[(*at)++] = hex[ch & 15];
		}
	}
	out[*at] = 0;
	return 0;
}

int nodeauth_url(const char *path, const char *const *query, size_t n, char *out, size_t len)
{
	int w = snprintf(out, len, "%s", path);
	if (w < 0 || (size_t)w >= len)
		return -1;
	size_t at = (size_t)w;
	for (size_t i = 0; i < n; i++) {
		const char *eq = strchr(query[i], '=');
		size_t nl = eq ? (size_t)(eq - query[i]) : strlen(query[i]);
		if (at + 2 >= len)
			return -1;
		out[at++] = i ? '&' : '?';
		if (nodeauth_escape(query[i], nl, out, len, &at) < 0)
			return -1;
		if (eq) {
			if (at + 2 >= len)
				return -1;
			out[at++] = '=';
			if (nodeauth_escape(eq + 1, strlen(eq + 1), out, len, &at) < 0)
				return -1;
		}
	}
	out[at] = 0;
	return 0;
}

/* Records nonce until expires_ms; -1 when it was seen (or the table is too
 * full to remember it: refused rather than forgotten). Lock held. */
static int nodeauth_seen(struct nodeauth *a, uint64_t nonce, int64_t now_ms, int64_t expires_ms)
{
	uint64_t h = nonce * 0x9E3779B97F4A7C15ull;
	int free_slot = -1;
	for (unsigned i = 0; i < SEEN_PROBE; i++) {
		unsigned s = (unsigned)((h >> 40) + i) & (SEEN_SLOTS - 1);
		struct seen *x = &a->seen[s];
		bool live = x->expires_ms > now_ms;
		if (live && x->nonce == nonce)
			return -1;
		if (!live && free_slot < 0)
			free_slot = (int)s;
	}
	if (free_slot < 0)
		return -1;
	a->seen[free_slot].nonce = nonce;
	a->seen[free_slot].expires_ms = expires_ms;
	return 0;
}

int nodeauth_verify(struct nodeauth *a, const char *value, const char *method,
		    const char *path_query, int64_t now_ms, char host_out[64], char ws_out[40],
		    bool *admin, struct err *e)
{
	host_out[0] = ws_out[0] = 0;
	*admin = false;
	size_t len = value ? strlen(value) : 0;
	const char *dot = value ? strrchr(value, '.') : NULL;
	if (!len || len >= NODEAUTH_MAX || !dot || strncmp(value, "n1.", 3) != 0)
		return err_set(e, ERR_UNAUTHORIZED, "malformed node credential");
	/* The mac first: nothing of a forged header is looked at before. */
	char want[48];
	nodeauth_mac(a, value, (size_t)(dot - value), method, path_query, want);
	if (strlen(dot + 1) != strlen(want) || CRYPTO_memcmp(dot + 1, want, strlen(want)) != 0)
		return err_set(e, ERR_UNAUTHORIZED, "invalid node credential (forged or altered)");
	char claims[NODEAUTH_MAX];
	memcpy(claims, value, (size_t)(dot - value));
	claims[dot - value] = 0;
	char *f[5], *save = NULL, *p = claims + 3;
	int k = 0;
	for (char *t = strtok_r(p, ".", &save); t && k < 5; t = strtok_r(NULL, ".", &save))
		f[k++] = t;
	if (k != 4 || !ident_ok(f[0], 63) || strlen(f[3]) != 16 ||
	    (strcmp(f[2], "*") != 0 && !ident_ok(f[2], 39)))
		return err_set(e, ERR_UNAUTHORIZED, "malformed node credential");
	char *end;
	long long ms = strtoll(f[1], &end, 10);
	if (*end || end == f[1])
		return err_set(e, ERR_UNAUTHORIZED, "malformed node credential");
	if (ms < now_ms - NODEAUTH_WINDOW_MS || ms > now_ms + NODEAUTH_WINDOW_MS)
		return err_set(
		    e, ERR_UNAUTHORIZED,
		    "node credential outside the %d s window (clocks apart, or replayed)",
		    NODEAUTH_WINDOW_MS / 1000);
	uint64_t nonce = strtoull(f[3], &end, 16);
	if (*end)
		return err_set(e, ERR_UNAUTHORIZED, "malformed node credential");
	pthread_mutex_lock(&a->lock);
	int seen = nodeauth_seen(a, nonce, now_ms, ms + NODEAUTH_WINDOW_MS + 1);
	pthread_mutex_unlock(&a->lock);
	if (seen < 0)
		return err_set(e, ERR_UNAUTHORIZED, "node credential already used (replayed)");
	snprintf(host_out, 64, "%s", f[0]);
	if (strcmp(f[2], "*") == 0)
		*admin = true;
	else
		snprintf(ws_out, 40, "%s", f[2]);
	return 0;
}
