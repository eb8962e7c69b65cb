/*
 * token: short-lived stream tokens, minted and checked by cubicled only.
 *
 *   v1.<computer>.<workspace>.<scope>.<issued>.<expires>.<nonce>.<mac>
 *
 * mac = base64url(HMAC-SHA256(key, everything before ".<mac>")), compared in
 * constant time. scope is "view" or "control"; issued is Unix milliseconds
 * (a revocation refuses every token minted before it), expires Unix seconds; the
 * nonce (16 random hex digits) makes every token unique. The key lives in
 * cubicled's state directory and never reaches a guest.
 */
#ifndef CUBICLE_WIRE_TOKEN_H
#define CUBICLE_WIRE_TOKEN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "err.h"

#define TOKEN_MAX	256
#define TOKEN_KEY_BYTES 32

struct token_claims {
	char computer[40];
	char workspace[40];
	bool view_only;
	int64_t issued;	 /* Unix milliseconds */
	int64_t expires; /* Unix seconds */
	char nonce[17];
};

/* Fills out (NUL-terminated, < TOKEN_MAX). ERR_INVALID for ids that do not fit. */
int token_mint(const unsigned char key[TOKEN_KEY_BYTES], const struct token_claims *c,
	       char out[TOKEN_MAX], struct err *e);

/*
 * Checks a presented token against the computer it is used for, at `now`.
 * ERR_UNAUTHORIZED (missing, malformed, forged or expired, the message says
 * which) or ERR_FORBIDDEN (a valid token of another computer). Fills *c.
 */
int token_verify(const unsigned char key[TOKEN_KEY_BYTES], const char *token, const char *computer,
		 int64_t now, struct token_claims *c, struct err *e);

#endif
