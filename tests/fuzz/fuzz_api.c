/*
 * libFuzzer harness for cubicled's REST API (host/api/api.c and everything
 * it routes to): the path, the query, the key and the JSON body of every
 * route family — workspaces and keys, computers and ?wait=, actions,
 * computer-use, MCP, files and sessions, usage, stream tokens, run — go
 * through the real router and handlers (apihost.h), with fuzzed envd
 * answers behind them.
 *
 * Input (NUL-separated): byte 0 picks the method (low 3 bits) and the key
 * (admin, the workspace's, a wrong one, none); then the path, up to eight
 * query fragments (one field, '&'-separated), the body, and what the guest
 * answers. Checked (apihost.h): no crash, no sanitizer report, no 500 from a
 * client's bytes alone, every error in the one error shape.
 */
#include "apihost.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	host_init();
	fake_reset();
	struct fz f = {data, size};
	uint8_t sel = fz_u8(&f);
	enum httpd_method m = (enum httpd_method)((sel & 7) % 7);
	char auth[128];
	switch ((sel >> 3) & 3) {
	case 0:
		snprintf(auth, sizeof auth, "Bearer %s", ADMIN_KEY);
		break;
	case 1:
		snprintf(auth, sizeof auth, "Bearer %s", host_ws_key);
		break;
	case 2:
		snprintf(auth, sizeof auth, "Bearer not-a-key");
		break;
	default:
		auth[0] = 0;
	}
	char *path = fz_str(&f, NULL);
	char *qs = fz_str(&f, NULL);
	size_t blen;
	char *body = fz_str(&f, &blen);
	char *query[9] = {0};
	int nq = 0;
	for (char *save = NULL, *t = strtok_r(qs, "&", &save); t && nq < 8;
	     t = strtok_r(NULL, "&", &save))
		query[nq++] = t;
	bool guest = f.n > 0;
	fake_envd_push_fuzz(f.p, f.n, 8);
	struct httpd_response resp;
	host_request(m, path, query, auth, (sel & 0x20) ? "https://evil.example" : NULL, body, blen,
		     &resp, guest);
	host_response_free(&resp);
	free(path), free(qs), free(body);
	fake_reset();
	return 0;
}
