/* token: stream tokens mint, verify, and refuse what they must (cmocka). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "token.h"

static const unsigned char key[TOKEN_KEY_BYTES] = "0123456789abcdef0123456789abcde";

static void mint(char out[TOKEN_MAX], const char *computer, bool view, int64_t expires)
{
	struct token_claims c = {.view_only = view, .issued = 1, .expires = expires};
	snprintf(c.computer, sizeof c.computer, "%s", computer);
	snprintf(c.workspace, sizeof c.workspace, "ws-1234");
	snprintf(c.nonce, sizeof c.nonce, "00aa11bb22cc33dd");
	struct err e = {0};
	assert_int_equal(token_mint(key, &c, out, &e), 0);
}

static void test_round_trip(void **state)
{
	(void)state;
	char t[TOKEN_MAX];
	mint(t, "c-abc", true, 1000);
	struct token_claims c;
	struct err e = {0};
	assert_int_equal(token_verify(key, t, "c-abc", TOKEN_SCOPE_STREAM, 999, &c, &e), 0);
	assert_true(c.view_only);
	assert_string_equal(c.workspace, "ws-1234");
	mint(t, "c-abc", false, 1000);
	assert_int_equal(token_verify(key, t, "c-abc", TOKEN_SCOPE_STREAM, 999, &c, &e), 0);
	assert_false(c.view_only);
}

static void test_expired_forged_wrong_computer(void **state)
{
	(void)state;
	char t[TOKEN_MAX];
	struct token_claims c;
	struct err e = {0};
	mint(t, "c-abc", false, 1000);
	assert_int_equal(token_verify(key, t, "c-abc", TOKEN_SCOPE_STREAM, 1000, &c, &e), -1);
	assert_int_equal(e.code, ERR_UNAUTHORIZED);
	assert_non_null(strstr(e.message, "expired"));
	assert_int_equal(token_verify(key, t, "c-other", TOKEN_SCOPE_STREAM, 10, &c, &e), -1);
	assert_int_equal(e.code, ERR_FORBIDDEN);
	/* Altering any claim breaks the MAC: view → control, a later expiry. */
	char forged[TOKEN_MAX];
	mint(t, "c-abc", true, 1000);
	snprintf(forged, sizeof forged, "%s", t);
	char *p = strstr(forged, ".view.");
	memcpy(p, ".ctrl.", 6);
	assert_int_equal(token_verify(key, forged, "c-abc", TOKEN_SCOPE_STREAM, 10, &c, &e), -1);
	assert_int_equal(e.code, ERR_UNAUTHORIZED);
	snprintf(forged, sizeof forged, "%s", t);
	p = strstr(forged, ".1000.");
	memcpy(p, ".9000.", 6);
	assert_int_equal(token_verify(key, forged, "c-abc", TOKEN_SCOPE_STREAM, 10, &c, &e), -1);
	/* Another key's token. */
	unsigned char other[TOKEN_KEY_BYTES] = {1};
	assert_int_equal(token_verify(other, t, "c-abc", TOKEN_SCOPE_STREAM, 10, &c, &e), -1);
	/* Garbage. */
	const char *bad[] = {"", "v1", "v1.a.b.c.d.e.f.g", "x.y", "v1........", NULL};
	for (int i = 0; bad[i]; i++)
		assert_int_equal(token_verify(key, bad[i], "c-abc", TOKEN_SCOPE_STREAM, 10, &c, &e),
				 -1);
}

static void test_scopes(void **state)
{
	(void)state;
	struct token_claims c = {.issued = 1, .expires = 1000};
	snprintf(c.computer, sizeof c.computer, "c-abc");
	snprintf(c.workspace, sizeof c.workspace, "ws-1234");
	snprintf(c.nonce, sizeof c.nonce, "00aa11bb22cc33dd");
	snprintf(c.scope, sizeof c.scope, "p3000");
	char t[TOKEN_MAX];
	struct err e = {0};
	assert_int_equal(token_mint(key, &c, t, &e), 0);
	struct token_claims got;
	assert_int_equal(token_verify(key, t, "c-abc", "p3000", 10, &got, &e), 0);
	assert_string_equal(got.scope, "p3000");
	/* Any computer: the token names its own. */
	assert_int_equal(token_verify(key, t, NULL, "p3000", 10, &got, &e), 0);
	assert_string_equal(got.computer, "c-abc");
	/* Not a stream token, nor another port's, nor CDP's. */
	const char *wrong[] = {TOKEN_SCOPE_STREAM, "p3001", "p300", "cdp", NULL};
	for (int i = 0; wrong[i]; i++) {
		assert_int_equal(token_verify(key, t, "c-abc", wrong[i], 10, &got, &e), -1);
		assert_int_equal(e.code, ERR_FORBIDDEN);
	}
	/* A stream token opens no preview. */
	mint(t, "c-abc", false, 1000);
	assert_int_equal(token_verify(key, t, "c-abc", "p3000", 10, &got, &e), -1);
	assert_int_equal(e.code, ERR_FORBIDDEN);
	/* Scopes outside [a-z0-9]{1,15} are not minted. */
	snprintf(c.scope, sizeof c.scope, "P.1");
	assert_int_equal(token_mint(key, &c, t, &e), -1);
}

/* A cluster's key ring: k1 and k2 known, anything else not. */
static const unsigned char key2[TOKEN_KEY_BYTES] = "another key, for the kid k2....";
static int ring(void *ctx, const char *kid, unsigned char out[TOKEN_KEY_BYTES])
{
	(void)ctx;
	if (strcmp(kid, "k1") == 0)
		memcpy(out, key, TOKEN_KEY_BYTES);
	else if (strcmp(kid, "k2") == 0)
		memcpy(out, key2, TOKEN_KEY_BYTES);
	else
		return -1;
	return 0;
}

static void test_v2_key_ids(void **state)
{
	(void)state;
	struct token_claims c = {.issued = 5, .expires = 1000}, got;
	snprintf(c.computer, sizeof c.computer, "c-abc");
	snprintf(c.workspace, sizeof c.workspace, "ws-1234");
	snprintf(c.nonce, sizeof c.nonce, "00aa11bb22cc33dd");
	snprintf(c.kid, sizeof c.kid, "k2");
	snprintf(c.host, sizeof c.host, "host-7");
	char t[TOKEN_MAX];
	struct err e = {0};
	assert_int_equal(token_mint(key2, &c, t, &e), 0);
	assert_int_equal(strncmp(t, "v2.k2.host-7.c-abc.ws-1234.control.5.1000.", 42), 0);
	assert_int_equal(
	    token_verify_ring(ring, NULL, t, "c-abc", TOKEN_SCOPE_STREAM, 999, &got, &e), 0);
	assert_string_equal(got.kid, "k2");
	assert_string_equal(got.host, "host-7");
	assert_string_equal(got.workspace, "ws-1234");
	assert_int_equal(got.issued, 5);
	/* Relabelled to another known key, to an unknown one, or the host
	 * hint changed: all refused as forged. */
	char forged[TOKEN_MAX];
	snprintf(forged, sizeof forged, "%s", t);
	forged[4] = '1';
	assert_int_equal(
	    token_verify_ring(ring, NULL, forged, "c-abc", TOKEN_SCOPE_STREAM, 999, &got, &e), -1);
	assert_int_equal(e.code, ERR_UNAUTHORIZED);
	forged[4] = '9';
	assert_int_equal(
	    token_verify_ring(ring, NULL, forged, "c-abc", TOKEN_SCOPE_STREAM, 999, &got, &e), -1);
	assert_int_equal(e.code, ERR_UNAUTHORIZED);
	snprintf(forged, sizeof forged, "%s", t);
	forged[11] = '8';
	assert_int_equal(
	    token_verify_ring(ring, NULL, forged, "c-abc", TOKEN_SCOPE_STREAM, 999, &got, &e), -1);
	/* A v1 token asks the ring for "" (no such key here). */
	mint(t, "c-abc", false, 1000);
	assert_int_equal(
	    token_verify_ring(ring, NULL, t, "c-abc", TOKEN_SCOPE_STREAM, 999, &got, &e), -1);
	/* A v2 token carries a scope like v1: a preview's opens no stream. */
	snprintf(c.scope, sizeof c.scope, "p3000");
	assert_int_equal(token_mint(key2, &c, t, &e), 0);
	assert_int_equal(token_verify_ring(ring, NULL, t, "c-abc", "p3000", 999, &got, &e), 0);
	assert_string_equal(got.host, "host-7");
	assert_int_equal(
	    token_verify_ring(ring, NULL, t, "c-abc", TOKEN_SCOPE_STREAM, 999, &got, &e), -1);
	assert_int_equal(e.code, ERR_FORBIDDEN);
	c.scope[0] = 0;
	/* Ids that are not ids are not minted. */
	snprintf(c.host, sizeof c.host, "a.b");
	assert_int_equal(token_mint(key2, &c, t, &e), -1);
	const char *bad[] = {"v2", "v2.", "v2..h.c.w.view.1.2.n.m", "v2.k2", "v2.k2.........",
			     NULL};
	for (int i = 0; bad[i]; i++)
		assert_int_equal(token_verify_ring(ring, NULL, bad[i], "c-abc", TOKEN_SCOPE_STREAM,
						   10, &got, &e),
				 -1);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_round_trip),
	    cmocka_unit_test(test_expired_forged_wrong_computer),
	    cmocka_unit_test(test_v2_key_ids),
	    cmocka_unit_test(test_scopes),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
