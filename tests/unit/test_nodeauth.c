/*
 * nodeauth: node-to-node call credentials sign, verify, and refuse what
 * they must: another secret, an altered method, path or claim, a time
 * outside the window, a replay, malformed values (cmocka).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#include "nodeauth.h"

#define SECRET "0123456789abcdef0123456789abcdef-cluster"
#define NOW    1800000000000LL

static void test_round_trip(void **state)
{
	(void)state;
	struct err e = {0};
	struct nodeauth *a = nodeauth_create(SECRET, &e), *b = nodeauth_create(SECRET, &e);
	assert_non_null(a);
	char v[NODEAUTH_MAX], host[64], ws[40];
	bool admin = true;
	assert_int_equal(
	    nodeauth_sign(a, "h1", "ws-0011", "POST", "/v1/computers/c-1/stop", NOW, v, &e), 0);
	/* Another node with the same secret accepts it, once. */
	assert_int_equal(
	    nodeauth_verify(b, v, "POST", "/v1/computers/c-1/stop", NOW + 5, host, ws, &admin, &e),
	    0);
	assert_string_equal(host, "h1");
	assert_string_equal(ws, "ws-0011");
	assert_false(admin);
	assert_int_equal(
	    nodeauth_verify(b, v, "POST", "/v1/computers/c-1/stop", NOW + 6, host, ws, &admin, &e),
	    -1);
	assert_int_equal(e.code, ERR_UNAUTHORIZED);
	assert_non_null(strstr(e.message, "replayed"));
	/* The admin. */
	assert_int_equal(nodeauth_sign(a, "h1", NULL, "GET", "/v1/hosts", NOW, v, &e), 0);
	assert_int_equal(nodeauth_verify(b, v, "GET", "/v1/hosts", NOW, host, ws, &admin, &e), 0);
	assert_true(admin);
	assert_string_equal(ws, "");
	nodeauth_destroy(a);
	nodeauth_destroy(b);
}

static void test_refusals(void **state)
{
	(void)state;
	struct err e = {0};
	struct nodeauth *a = nodeauth_create(SECRET, &e);
	struct nodeauth *other = nodeauth_create(SECRET "-other", &e);
	char v[NODEAUTH_MAX], host[64], ws[40];
	bool admin;
	assert_int_equal(
	    nodeauth_sign(a, "h1", "ws-1", "POST", "/v1/computers/c-1/stop", NOW, v, &e), 0);
	/* Another cluster's secret. */
	assert_int_equal(
	    nodeauth_verify(other, v, "POST", "/v1/computers/c-1/stop", NOW, host, ws, &admin, &e),
	    -1);
	assert_non_null(strstr(e.message, "forged"));
	/* Another method or path than was signed. */
	assert_int_equal(
	    nodeauth_verify(a, v, "DELETE", "/v1/computers/c-1/stop", NOW, host, ws, &admin, &e),
	    -1);
	assert_int_equal(
	    nodeauth_verify(a, v, "POST", "/v1/computers/c-2/stop", NOW, host, ws, &admin, &e), -1);
	/* Another workspace written into the claims. */
	char forged[NODEAUTH_MAX];
	snprintf(forged, sizeof forged, "%s", v);
	char *w = strstr(forged, ".ws-1.");
	assert_non_null(w);
	w[4] = '2';
	assert_int_equal(
	    nodeauth_verify(a, forged, "POST", "/v1/computers/c-1/stop", NOW, host, ws, &admin, &e),
	    -1);
	/* Outside the window, either way. */
	assert_int_equal(nodeauth_verify(a, v, "POST", "/v1/computers/c-1/stop",
					 NOW + NODEAUTH_WINDOW_MS + 1, host, ws, &admin, &e),
			 -1);
	assert_non_null(strstr(e.message, "window"));
	assert_int_equal(nodeauth_verify(a, v, "POST", "/v1/computers/c-1/stop",
					 NOW - NODEAUTH_WINDOW_MS - 1, host, ws, &admin, &e),
			 -1);
	/* Malformed. */
	const char *bad[] = {
	    "", "n1", "n1.", "x1.h1.1.*.0011223344556677.AAAA", "n1.h1.1.*.0011223344556677", NULL};
	for (int i = 0; bad[i]; i++)
		assert_int_equal(nodeauth_verify(a, bad[i], "GET", "/", NOW, host, ws, &admin, &e),
				 -1);
	assert_int_equal(nodeauth_verify(a, NULL, "GET", "/", NOW, host, ws, &admin, &e), -1);
	/* A short secret is refused. */
	assert_null(nodeauth_create("short", &e));
	assert_string_equal(e.param, "cluster_secret");
	/* Ids that are not ids are not signed; a workspace cannot be named like
	 * the admin's mark (no identifier is "*"), and one named "-" is no admin. */
	assert_int_equal(nodeauth_sign(a, "h.1", NULL, "GET", "/", NOW, v, &e), -1);
	assert_int_equal(nodeauth_sign(a, "h1", "*", "GET", "/", NOW, v, &e), -1);
	assert_int_equal(nodeauth_sign(a, "h1", "-", "GET", "/", NOW, v, &e), 0);
	assert_int_equal(nodeauth_verify(a, v, "GET", "/", NOW, host, ws, &admin, &e), 0);
	assert_false(admin);
	assert_string_equal(ws, "-");
	nodeauth_destroy(a);
	nodeauth_destroy(other);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_round_trip),
	    cmocka_unit_test(test_refusals),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
