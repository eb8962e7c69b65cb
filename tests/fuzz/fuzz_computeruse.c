/*
 * libFuzzer harness for the two computer-use dialects and their coordinate
 * mapping (host/api/computeruse*.c), through the API's route
 * POST /v1/computers/{id}/computer-use (apihost.h).
 *
 * Input (NUL-separated): ?display= (empty: none), the JSON body, then the
 * guest's answers (the first is get_screen_size's when a display is asked).
 * Checked, besides apihost.h's answer checks: when the guest answered a
 * sane screen and the agent's display is scaled onto it, every x/y sent to
 * envd lies on that screen, whatever point the agent named.
 */
#include "apihost.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	host_init();
	fake_reset();
	struct fz f = {data, size};
	char *display = fz_str(&f, NULL);
	size_t blen;
	char *body = fz_str(&f, &blen);
	/* The screen, as a well-behaved envd says it (the first answer), then
	 * fuzzed answers: a hostile envd. */
	int sw = 64 + fz_u8(&f) * 8, sh = 64 + fz_u8(&f) * 8;
	bool hostile = f.n > 0;
	char screen[64];
	snprintf(screen, sizeof screen, "{\"width\":%d,\"height\":%d}", sw, sh);
	fake_envd_push(200, "application/json", "", "", "", screen, strlen(screen));
	fake_envd_push_fuzz(f.p, f.n, 8);
	char qd[64], *query[2] = {NULL, NULL};
	if (display[0]) {
		snprintf(qd, sizeof qd, "display=%.50s", display);
		query[0] = qd;
	}
	char auth[128];
	snprintf(auth, sizeof auth, "Bearer %s", host_ws_key);
	struct httpd_response resp;
	host_request(HTTPD_POST, "/v1/computers/" FAKE_ID "/computer-use", query, auth, NULL, body,
		     blen, &resp, true);
	/* Scaled onto the screen: every point sent lies on it. */
	bool scaled = fake_actions() > 0 && strcmp(fake_action_name(0), "get_screen_size") == 0;
	for (size_t i = 1; scaled && !hostile && i < fake_actions(); i++) {
		const json_t *p = fake_action_params(i);
		json_t *x = json_object_get(p, "x"), *y = json_object_get(p, "y");
		if (json_is_integer(x) && strcmp(fake_action_name(i), "screenshot") != 0)
			CHECK(json_integer_value(x) >= 0 && json_integer_value(x) < sw);
		if (json_is_integer(y) && strcmp(fake_action_name(i), "screenshot") != 0)
			CHECK(json_integer_value(y) >= 0 && json_integer_value(y) < sh);
	}
	host_response_free(&resp);
	free(display), free(body);
	fake_reset();
	return 0;
}
