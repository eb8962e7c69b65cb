/*
 * libFuzzer harness for the computer-use dialects, their tool versions,
 * their batches and their coordinate mapping (host/api/computeruse*.c),
 * through the API's route POST /v1/computers/{id}/computer-use (apihost.h).
 *
 * Input (NUL-separated): ?display= (empty: none), the JSON body, then the
 * guest's answers (the first is get_screen_size's when a display is asked).
 * Checked, besides apihost.h's answer checks:
 * - when the guest answered a sane screen and the agent's display is scaled
 *   onto it, every x/y sent to envd lies on that screen, whatever point the
 *   agent named;
 * - the waits of one request (waits, held keys, screenshot delays) add up to
 *   at most CU_MAX_WAIT_MS (sleeping is pretend here: fakecore.c);
 * - a turn ({"content": [...]}) answered 200 has one tool_result per
 *   computer tool_use block, in order, with its id; after the first is_error
 *   every later one is "Not executed: ..."; X-Computer-Use-Ran counts the
 *   results before it and -Failed names its block;
 * - a computer_call with actions[] answered 200 is one computer_call_output
 *   with its call_id and a screenshot taken last, "incomplete" exactly when
 *   an action failed.
 */
#include "apihost.h"
#include "computeruse-internal.h"

#define NOT_EXECUTED "Not executed: an earlier computer action in this turn failed."

static const char *header(const struct httpd_response *r, const char *name)
{
	for (size_t i = 0; i < r->nheaders; i++)
		if (strcmp(r->headers[i].name, name) == 0)
			return r->headers[i].value;
	return NULL;
}

/* A block of the turn that is a call of the computer tool. */
static bool is_computer_call(const json_t *b)
{
	const char *type = json_string_value(json_object_get(b, "type"));
	const json_t *ts = json_object_get(b, "toolset_name");
	const char *name = json_string_value(json_object_get(b, "name"));
	if (!type || strcmp(type, "tool_use") != 0)
		return false;
	if (ts && !json_is_null(ts))
		return json_is_string(ts) && strcmp(json_string_value(ts), "computer") == 0;
	return name && strcmp(name, "computer") == 0;
}

static void check_turn(const json_t *req, const json_t *ans, const struct httpd_response *r)
{
	const json_t *blocks = json_object_get(req, "content");
	const json_t *results = json_object_get(ans, "content");
	CHECK(json_is_string(json_object_get(ans, "role")));
	CHECK(strcmp(json_string_value(json_object_get(ans, "role")), "user") == 0);
	size_t k = 0, i;
	int ran = 0, failed = -1;
	const json_t *b;
	json_array_foreach(blocks, i, b)
	{
		if (!is_computer_call(b))
			continue;
		const json_t *res = json_array_get(results, k++);
		CHECK(res);
		CHECK(json_equal(json_object_get(res, "tool_use_id"), json_object_get(b, "id")));
		bool err = json_is_true(json_object_get(res, "is_error"));
		if (failed >= 0) {
			CHECK(err);
			const char *text = json_string_value(json_object_get(
			    json_array_get(json_object_get(res, "content"), 0), "text"));
			CHECK(text && strcmp(text, NOT_EXECUTED) == 0);
		} else if (err) {
			failed = (int)i;
		} else {
			ran++;
		}
	}
	CHECK(k == json_array_size(results));
	const char *h = header(r, "x-computer-use-ran:");
	CHECK(h && atoi(h) == ran);
	h = header(r, "x-computer-use-failed:");
	CHECK(failed < 0 ? !h : h && atoi(h) == failed);
}

static void check_call(const json_t *req, const json_t *ans, const struct httpd_response *r)
{
	CHECK(strcmp(json_string_value(json_object_get(ans, "type")), "computer_call_output") == 0);
	const json_t *call_id = json_object_get(req, "call_id");
	if (json_is_string(call_id))
		CHECK(json_equal(json_object_get(ans, "call_id"), call_id));
	bool failed = header(r, "x-computer-use-failed:") != NULL;
	const char *status = json_string_value(json_object_get(ans, "status"));
	CHECK(failed ? status && strcmp(status, "incomplete") == 0 : !status);
	if (fake_actions() < FAKE_LOGMAX) /* all of them logged: the screenshot is last */
		CHECK(fake_actions() > 0 &&
		      strcmp(fake_action_name(fake_actions() - 1), "screenshot") == 0);
}

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
	CHECK(fake_slept_ms() <= CU_MAX_WAIT_MS);
	if (resp.status == 200) {
		json_t *req = json_loadb(body, blen, JSON_REJECT_DUPLICATES, NULL);
		json_t *ans = json_loadb((const char *)resp.body, resp.body_len, 0, NULL);
		CHECK(req && json_is_object(ans));
		const char *type = json_string_value(json_object_get(req, "type"));
		if (json_is_array(json_object_get(req, "content")))
			check_turn(req, ans, &resp);
		else if (type && strcmp(type, "computer_call") == 0 &&
			 json_is_array(json_object_get(req, "actions")))
			check_call(req, ans, &resp);
		json_decref(req);
		json_decref(ans);
	}
	host_response_free(&resp);
	free(display), free(body);
	fake_reset();
	return 0;
}
