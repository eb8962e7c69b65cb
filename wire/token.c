#include "token.h"
#include "base64.h"
#include "ident.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/crypto.h>
#include <openssl/hmac.h>

static void token_mac(const unsigned char key[TOKEN_KEY_BYTES], const char *msg, size_t len,
		      char out[48])
{
	unsigned char mac[32];
	unsigned int maclen = sizeof mac;
	HMAC(EVP_sha256(), key, TOKEN_KEY_BYTES, (const unsigned char *)msg, len, mac, &maclen);
	base64url_encode(mac, sizeof mac, out);
}

/* A scope is 1..15 of [a-z0-9]. */
static bool token_scope_ok(const char *s)
{
	size_t n = strlen(s);
	if (n == 0 || n > 15)
		return false;
	for (; *s; s++)
		if (!((*s >= 'a' && *s <= 'z') || (*s >= '0' && *s <= '9')))
			return false;
	return true;
}

int token_mint(const unsigned char key[TOKEN_KEY_BYTES], const struct token_claims *c,
	       char out[TOKEN_MAX], struct err *e)
{
	const char *scope = c->scope[0] ? c->scope : c->view_only ? "view" : "control";
	if (!ident_ok(c->computer, 39) || !ident_ok(c->workspace, 39) || !ident_ok(c->nonce, 16) ||
	    !token_scope_ok(scope) ||
	    (c->kid[0] && (!ident_ok(c->kid, 23) || !ident_ok(c->host, 63))))
		return err_set(e, ERR_INVALID, "cannot mint a token for these ids");
	char body[TOKEN_MAX], prefix[96] = "v1";
	if (c->kid[0])
		snprintf(prefix, sizeof prefix, "v2.%s.%s", c->kid, c->host);
	int n =
	    snprintf(body, sizeof body, "%s.%s.%s.%s.%lld.%lld.%s", prefix, c->computer,
		     c->workspace, scope, (long long)c->issued, (long long)c->expires, c->nonce);
	if (n < 0 || (size_t)n + 48 >= TOKEN_MAX)
		return err_set(e, ERR_INVALID, "token too long");
	char mac[48];
	token_mac(key, body, (size_t)n, mac);
	memcpy(out, body, (size_t)n);
	out[n] = '.';
	memcpy(out + n + 1, mac, strlen(mac) + 1);
	return 0;
}

static int token_one_key(void *ctx, const char *kid, unsigned char key[TOKEN_KEY_BYTES])
{
	(void)kid;
	memcpy(key, ctx, TOKEN_KEY_BYTES);
	return 0;
}

int token_verify(const unsigned char key[TOKEN_KEY_BYTES], const char *token, const char *computer,
		 const char *want, int64_t now, struct token_claims *c, struct err *e)
{
	return token_verify_ring(token_one_key, (void *)key, token, computer, want, now, c, e);
}

int token_verify_ring(token_key_fn key_for, void *ctx, const char *token, const char *computer,
		      const char *want, int64_t now, struct token_claims *c, struct err *e)
{
	memset(c, 0, sizeof *c);
	bool stream = strcmp(want, TOKEN_SCOPE_STREAM) == 0;
	const char *what = stream ? "stream token" : "token";
	if (!token || !*token)
		return err_set(e, ERR_UNAUTHORIZED, "missing %s%s", what,
			       stream ? " (?token=...)" : "");
	size_t len = strlen(token);
	const char *dot = strrchr(token, '.');
	bool v2 = strncmp(token, "v2.", 3) == 0;
	if (len >= TOKEN_MAX || !dot || (strncmp(token, "v1.", 3) != 0 && !v2))
		return err_set(e, ERR_UNAUTHORIZED, "malformed %s", what);
	/* Which key: v2 names it (the only field read before the MAC, and
	 * only to pick the key: an unknown one fails like a forgery). */
	char kid[24] = "";
	if (v2) {
		const char *end = strchr(token + 3, '.');
		size_t kl = end ? (size_t)(end - token - 3) : 0;
		if (kl == 0 || kl >= sizeof kid)
			return err_set(e, ERR_UNAUTHORIZED, "malformed %s", what);
		memcpy(kid, token + 3, kl);
		kid[kl] = 0;
	}
	unsigned char key[TOKEN_KEY_BYTES];
	char mac[48];
	if (key_for(ctx, kid, key) < 0)
		return err_set(e, ERR_UNAUTHORIZED, "invalid %s (forged or altered)", what);
	/* The MAC first, over exactly the bytes presented: nothing else in a
	 * forged token is looked at before it is proven genuine. */
	token_mac(key, token, (size_t)(dot - token), mac);
	OPENSSL_cleanse(key, sizeof key);
	if (strlen(dot + 1) != strlen(mac) || CRYPTO_memcmp(dot + 1, mac, strlen(mac)) != 0)
		return err_set(e, ERR_UNAUTHORIZED, "invalid %s (forged or altered)", what);
	char body[TOKEN_MAX];
	memcpy(body, token, (size_t)(dot - token));
	body[dot - token] = 0;
	long long issued, expires;
	char *f[10];
	int nf = 0, want_nf = v2 ? 9 : 7;
	for (char *save = NULL, *p = strtok_r(body, ".", &save); p && nf < 10;
	     p = strtok_r(NULL, ".", &save))
		f[nf++] = p;
	if (nf != want_nf)
		return err_set(e, ERR_UNAUTHORIZED, "malformed %s", what);
	char **g = f + (v2 ? 2 : 0); /* the fields v1 and v2 share, from computer on */
	if (v2 && (strlen(f[1]) >= sizeof c->kid || strlen(f[2]) >= sizeof c->host))
		return err_set(e, ERR_UNAUTHORIZED, "malformed %s", what);
	if (strlen(g[1]) >= sizeof c->computer || strlen(g[2]) >= sizeof c->workspace ||
	    !token_scope_ok(g[3]) || strlen(g[6]) >= sizeof c->nonce ||
	    sscanf(g[4], "%lld", &issued) != 1 || sscanf(g[5], "%lld", &expires) != 1)
		return err_set(e, ERR_UNAUTHORIZED, "malformed %s", what);
	if (v2) {
		snprintf(c->kid, sizeof c->kid, "%s", f[1]);
		snprintf(c->host, sizeof c->host, "%s", f[2]);
	}
	snprintf(c->computer, sizeof c->computer, "%s", g[1]);
	snprintf(c->workspace, sizeof c->workspace, "%s", g[2]);
	snprintf(c->scope, sizeof c->scope, "%s", g[3]);
	snprintf(c->nonce, sizeof c->nonce, "%s", g[6]);
	c->view_only = strcmp(c->scope, "view") == 0;
	c->issued = issued;
	c->expires = expires;
	if (now >= expires)
		return err_set(e, ERR_UNAUTHORIZED, "%s expired %lld s ago", what,
			       (long long)(now - expires));
	if (computer && strcmp(c->computer, computer) != 0)
		return err_set(e, ERR_FORBIDDEN, "this %s is for another computer", what);
	bool fits =
	    stream ? c->view_only || strcmp(c->scope, "control") == 0 : strcmp(c->scope, want) == 0;
	if (!fits)
		return err_set(e, ERR_FORBIDDEN, "this token opens something else (%s), not this",
			       c->scope);
	return 0;
}
