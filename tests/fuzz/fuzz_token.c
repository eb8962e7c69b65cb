/*
 * libFuzzer harness for stream tokens (wire/token.c): what a viewer puts in
 * ?token= reaches token_verify before anything else looks at it.
 *
 * Input: a token string (up to a NUL), then claims for a mint. Checked:
 *   - a presented token is accepted only when its MAC is the key's over
 *     exactly what precedes it, so the fuzzer (without the key) never gets
 *     one accepted unless it is byte for byte a token minted here;
 *   - whatever token_mint makes from any claims, token_verify accepts for
 *     the same computer before expiry, gives the same claims back, refuses
 *     for another computer (403) and once expired (401), and refuses every
 *     one-byte change (401);
 *   - a preview token (scope p<port>) opens that port only: refused as a
 *     stream token, as another port's and as CDP's (403).
 */
#include "fuzz.h"
#include "token.h"

static const unsigned char key[TOKEN_KEY_BYTES] = "cubicle fuzz key, 32 bytes long";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct fz f = {data, size};
	char *tok = fz_str(&f, NULL);
	char *computer = fz_str(&f, NULL);
	struct token_claims c = {0}, got;
	struct err e = {0};
	/* The presented token, for its computer or for another. */
	int rc = token_verify(key, tok, computer, TOKEN_SCOPE_STREAM, 1000, &got, &e);
	CHECK(rc == 0 || rc == -1);
	if (rc < 0)
		CHECK(e.code == ERR_UNAUTHORIZED || e.code == ERR_FORBIDDEN);
	else
		CHECK(strcmp(got.computer, computer) == 0 && got.expires > 1000);

	/* Mint from fuzzed claims. */
	char *ws = fz_str(&f, NULL), *nonce = fz_str(&f, NULL);
	snprintf(c.computer, sizeof c.computer, "%s", computer);
	snprintf(c.workspace, sizeof c.workspace, "%s", ws);
	snprintf(c.nonce, sizeof c.nonce, "%s", nonce);
	uint8_t flags = fz_u8(&f);
	c.view_only = flags & 1;
	if (flags & 2) { /* a cluster's v2 token: a key id and a host */
		char *kid = fz_str(&f, NULL), *host = fz_str(&f, NULL);
		snprintf(c.kid, sizeof c.kid, "%s", kid);
		snprintf(c.host, sizeof c.host, "%s", host);
		free(kid), free(host);
	}
	c.issued = (int64_t)fz_u32(&f) << 8;
	c.expires = (int64_t)(int32_t)fz_u32(&f);
	char t[TOKEN_MAX];
	if (token_mint(key, &c, t, &e) == 0) {
		CHECK(strlen(t) < TOKEN_MAX);
		int64_t now = c.expires - 1;
		CHECK(token_verify(key, t, c.computer, TOKEN_SCOPE_STREAM, now, &got, &e) == 0);
		CHECK(strcmp(got.computer, c.computer) == 0);
		CHECK(strcmp(got.workspace, c.workspace) == 0);
		CHECK(strcmp(got.nonce, c.nonce) == 0);
		/* v1 (no key id) carries no host. */
		CHECK(strcmp(got.kid, c.kid) == 0 && strcmp(got.host, c.kid[0] ? c.host : "") == 0);
		CHECK(got.view_only == c.view_only && got.issued == c.issued &&
		      got.expires == c.expires);
		if (strcmp(c.computer, "another-computer-x") != 0)
			CHECK(token_verify(key, t, "another-computer-x", TOKEN_SCOPE_STREAM, now,
					   &got, &e) < 0 &&
			      e.code == ERR_FORBIDDEN);
		CHECK(token_verify(key, t, c.computer, TOKEN_SCOPE_STREAM, c.expires, &got, &e) <
			  0 &&
		      e.code == ERR_UNAUTHORIZED);
		size_t n = strlen(t), at = size ? data[0] % n : 0;
		char flip = t[at];
		t[at] = t[at] == 'A' ? 'B' : 'A';
		CHECK(token_verify(key, t, c.computer, TOKEN_SCOPE_STREAM, now, &got, &e) < 0 &&
		      e.code == ERR_UNAUTHORIZED);
		t[at] = flip;
		/* The same claims as a preview of one port. */
		unsigned port = 1 + fz_u32(&f) % 65535;
		char want[16], other[16];
		snprintf(c.scope, sizeof c.scope, "p%u", port);
		snprintf(want, sizeof want, "p%u", port);
		snprintf(other, sizeof other, "p%u", port % 65535 + 1);
		CHECK(token_mint(key, &c, t, &e) == 0);
		CHECK(token_verify(key, t, c.computer, want, now, &got, &e) == 0 &&
		      strcmp(got.scope, want) == 0 && !got.view_only);
		CHECK(token_verify(key, t, NULL, want, now, &got, &e) == 0);
		const char *wrong[] = {TOKEN_SCOPE_STREAM, other, "cdp"};
		for (int i = 0; i < 3; i++)
			CHECK(token_verify(key, t, c.computer, wrong[i], now, &got, &e) < 0 &&
			      e.code == ERR_FORBIDDEN);
	}
	free(tok), free(computer), free(ws), free(nonce);
	return 0;
}
