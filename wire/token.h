/*
 * token: short-lived tokens for what a browser opens without an API key
 * (live streams, previews, CDP), minted and checked by cubicled only.
 *
 *   v1.<computer>.<workspace>.<scope>.<issued>.<expires>.<nonce>.<mac>
 *   v2.<kid>.<host>.<computer>.<workspace>.<scope>.<issued>.<expires>.<nonce>.<mac>
 *
 * mac = base64url(HMAC-SHA256(key, everything before ".<mac>")), compared in
 * constant time. scope says what the token opens: "view" or "control" (a
 * live stream), "p<port>" (a preview of that port), "cdp" (the desktop
 * browser's DevTools); a token opens only what its scope names, so a
 * stream token is no preview token and a preview of one port opens no
 * other. issued is Unix milliseconds
 * (a revocation refuses every token minted before it), expires Unix seconds; the
 * nonce (16 random hex digits) makes every token unique. One host signs v1
 * with the key of its state directory. A cluster signs v2: <kid> names the
 * key (every node has the cluster's keys, from the database: a token
 * verifies on any node) and <host> is the host that held the computer when
 * the token was minted, signed with the rest, so a node that does not hold
 * the computer knows where to relay the stream without asking anyone. Keys
 * never reach a guest.
 */
#ifndef CUBICLE_WIRE_TOKEN_H
#define CUBICLE_WIRE_TOKEN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "err.h"

#define TOKEN_MAX	384
#define TOKEN_KEY_BYTES 32

struct token_claims {
	char computer[40];
	char workspace[40];
	char scope[16];	 /* [a-z0-9]{1,15}; "" when minting: view_only's stream scope */
	bool view_only;	 /* scope "view" */
	int64_t issued;	 /* Unix milliseconds */
	int64_t expires; /* Unix seconds */
	char nonce[17];
	/* v2 only ("" in a v1 token; a v2 token is minted when kid is set): */
	char kid[24];  /* the signing key's id (1 to 23 of A-Z a-z 0-9 - _) */
	char host[64]; /* the host that held the computer (an id of 1 to 63) */
};

/* A key ring: fills key for kid ("" = a v1 token's), or -1 when unknown. */
typedef int (*token_key_fn)(void *ctx, const char *kid, unsigned char key[TOKEN_KEY_BYTES]);

/* Fills out (NUL-terminated, < TOKEN_MAX): v2 when c->kid is set (signed
 * with that key), else v1. ERR_INVALID for ids that do not fit. */
int token_mint(const unsigned char key[TOKEN_KEY_BYTES], const struct token_claims *c,
	       char out[TOKEN_MAX], struct err *e);

/* What token_verify accepts as a live stream's scope: "view" or "control". */
#define TOKEN_SCOPE_STREAM "stream"

/*
 * Checks a presented token against the computer it is used for and the
 * scope it must have (TOKEN_SCOPE_STREAM, or an exact scope), at `now`.
 * ERR_UNAUTHORIZED (missing, malformed, forged or expired, the message says
 * which) or ERR_FORBIDDEN (a valid token of another computer or another
 * scope). Fills *c. computer NULL: any computer (the caller then uses
 * c->computer, which the MAC vouches for).
 */
int token_verify(const unsigned char key[TOKEN_KEY_BYTES], const char *token, const char *computer,
		 const char *scope, int64_t now, struct token_claims *c, struct err *e);

/* token_verify with the key the token names (v2's kid; "" for v1) from a
 * ring: a token of an unknown key is ERR_UNAUTHORIZED like a forged one. */
int token_verify_ring(token_key_fn key_for, void *ctx, const char *token, const char *computer,
		      const char *scope, int64_t now, struct token_claims *c, struct err *e);

#endif
