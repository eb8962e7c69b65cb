/*
 * libFuzzer harness for Code Runner requests (host/runner/runner.c): the
 * body of POST /v1/run and MCP's run_code reaches runner_run as JSON.
 *
 * The runner has no supervisors here (their binaries are not found), so a
 * request that passes the checks ends in 503 without running anything:
 * the harness fuzzes what is checked before a sandbox is asked. Checked:
 * every body gets 400 (unknown field, language, code or stdin not
 * strings), 413 (code or stdin too large) or 503, never a crash or 500.
 * The answer's text (the sandbox's stdout and stderr as JSON strings) goes
 * through utf8_decode, which fuzz_codec holds to RFC 3629.
 */
#include "fuzz.h"
#include "runner.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static struct runner *r;
	if (!r) {
		struct runner_config c = {.bin_dir = "/nonexistent", .code_max = 512};
		struct err e = {0};
		r = runner_open(&c, &e);
		CHECK(r);
	}
	json_t *body = json_loadb((const char *)data, size, 0, NULL);
	if (!json_is_object(body)) {
		json_decref(body);
		return 0;
	}
	json_t *out = NULL;
	struct err e = {0};
	int rc = runner_run(r, "ws-fuzz", body, &out, &e);
	CHECK(rc == -1 && !out);
	CHECK(e.code == ERR_INVALID || e.code == ERR_BAD_REQUEST || e.code == ERR_TOO_LARGE ||
	      e.code == ERR_UNAVAILABLE);
	CHECK(e.message[0]);
	json_decref(body);
	return 0;
}
