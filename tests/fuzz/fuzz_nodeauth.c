/*
 * libFuzzer harness for node credentials (host/cluster/nodeauth.c): the
 * X-Cubicle-Node header of a forwarded call reaches nodeauth_verify on the
 * router before anything else looks at it.
 *
 * Input: a header value, a method, a path (NUL-separated), then a host, a
 * workspace and a time for a signature. Checked:
 *   - a presented value is accepted only when its MAC is the secret's over
 *     exactly the claims and the call, so the fuzzer (without the secret)
 *     never gets one accepted;
 *   - what nodeauth_sign makes for any ids it takes, nodeauth_verify takes
 *     once, for that call only, within the window, with the same claims;
 *     a second time, another path or any one-byte change is refused;
 *   - the canonical form and the URL of any path and query fit or fail,
 *     never overflow.
 */
#include "fuzz.h"
#include "nodeauth.h"

#define SECRET "cubicle fuzz cluster secret, 32 bytes and more"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static struct nodeauth *a;
	struct err e = {0};
	if (!a && !(a = nodeauth_create(SECRET, &e)))
		abort();
	struct fz f = {data, size};
	char *value = fz_str(&f, NULL), *method = fz_str(&f, NULL), *path = fz_str(&f, NULL);
	char host[64], ws[40];
	bool admin;
	/* Time moves on between inputs (past the window: the nonces this
	 * process remembers expire, as they do in a server). */
	static int64_t runs;
	int64_t now = 1800000000000LL + runs++ * (2 * NODEAUTH_WINDOW_MS + 1);
	CHECK(nodeauth_verify(a, value, method, path, now, host, ws, &admin, &e) == -1);
	CHECK(e.code == ERR_UNAUTHORIZED);

	char *h = fz_str(&f, NULL), *w = fz_str(&f, NULL);
	int64_t at = now + (int64_t)(int32_t)fz_u32(&f);
	const char *query[] = {method, path};
	char canon[512], url[512];
	if (nodeauth_canonical(path, query, 2, canon, sizeof canon) == 0)
		CHECK(strlen(canon) < sizeof canon);
	if (nodeauth_url(path, query, 2, url, sizeof url) == 0)
		CHECK(strlen(url) < sizeof url);
	char v[NODEAUTH_MAX];
	if (nodeauth_sign(a, h, w[0] ? w : NULL, "POST", path, at, v, &e) == 0) {
		CHECK(strlen(v) < NODEAUTH_MAX);
		bool in_window = at >= now - NODEAUTH_WINDOW_MS && at <= now + NODEAUTH_WINDOW_MS;
		/* Another path first: refused, and it does not use up the nonce. */
		char *other = malloc(strlen(path) + 3);
		if (!other)
			abort();
		sprintf(other, "%s/x", path);
		CHECK(nodeauth_verify(a, v, "POST", other, now, host, ws, &admin, &e) == -1);
		free(other);
		size_t n = strlen(v), pos = size ? data[size - 1] % n : 0;
		char flip = v[pos];
		v[pos] = v[pos] == 'A' ? 'B' : 'A';
		CHECK(nodeauth_verify(a, v, "POST", path, now, host, ws, &admin, &e) == -1);
		v[pos] = flip;
		int rc = nodeauth_verify(a, v, "POST", path, now, host, ws, &admin, &e);
		CHECK((rc == 0) == in_window);
		if (rc == 0) {
			CHECK(strcmp(host, h) == 0);
			CHECK(admin == !w[0] && (admin || strcmp(ws, w) == 0));
			CHECK(nodeauth_verify(a, v, "POST", path, now, host, ws, &admin, &e) == -1);
		}
	}
	free(value), free(method), free(path), free(h), free(w);
	return 0;
}
