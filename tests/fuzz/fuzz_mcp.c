/*
 * libFuzzer harness for MCP's JSON-RPC (host/api/mcp.c, mcp-tools.c):
 * POST /mcp with any body (one message or a batch), any Origin and
 * MCP-Protocol-Version, for the admin or a workspace's key, through the
 * API's router (apihost.h), with fuzzed guest answers behind the tools.
 *
 * Input: byte 0 (bit 0 the key, bit 1 a foreign Origin), then the body up
 * to a NUL, then the guest's answers. Checked: apihost.h's answer checks
 * (no 500 from a client's bytes, one error shape for the REST errors,
 * JSON-RPC's for protocol faults), and an answer with a body is JSON.
 */
#include "apihost.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	host_init();
	fake_reset();
	struct fz f = {data, size};
	uint8_t sel = fz_u8(&f);
	size_t blen;
	char *body = fz_str(&f, &blen);
	bool guest = f.n > 0;
	fake_envd_push_fuzz(f.p, f.n, 8);
	char auth[128];
	snprintf(auth, sizeof auth, "Bearer %s", sel & 1 ? ADMIN_KEY : host_ws_key);
	struct httpd_response resp;
	int status =
	    host_request(HTTPD_POST, "/mcp", NULL, auth, sel & 2 ? "https://evil.example" : NULL,
			 body, blen, &resp, guest);
	if (status && resp.body_len) {
		json_t *j = json_loadb((const char *)resp.body, resp.body_len, 0, NULL);
		CHECK(j);
		json_decref(j);
	}
	host_response_free(&resp);
	free(body);
	fake_reset();
	return 0;
}
