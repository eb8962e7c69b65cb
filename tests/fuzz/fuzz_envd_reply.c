/*
 * libFuzzer harness for cubicled's reading of envd's answers: a guest is
 * untrusted (a compromised one writes whatever it likes), and every answer
 * crosses wire/httpc.c's header and body callbacks (limits, the image
 * headers) before cubicled parses it (host/core: /health's "ready", an
 * error answer through err_from_json, an action's JSON).
 *
 * Input: header lines (each up to '\n'), then after an empty line the body,
 * cut into chunks by the bytes' own values. Checked: the body kept never
 * exceeds max_body (past it the transfer stops with ERR_BAD_GATEWAY naming
 * the limit), is NUL-terminated at body_len; the headers kept never exceed
 * max_headers; the image headers are NUL-terminated within their arrays;
 * the memory budget given back equals what was taken; and whatever the
 * body, the parses cubicled makes of it give a well-formed error or value.
 */
#include "fuzz.h"

#include "../../wire/httpc.c"

static uint64_t budget_taken, budget_left;
static int mem_reserve(uint64_t more, struct err *e)
{
	if (more > budget_left)
		return err_set(e, ERR_BAD_GATEWAY, "over the answers' memory budget");
	budget_left -= more;
	budget_taken += more;
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static CURL *h;
	if (!h)
		h = curl_easy_init();
	struct httpc_request q = HTTPC_REQUEST_INIT;
	q.max_body = 1024;
	q.max_headers = 512;
	q.mem_reserve = mem_reserve;
	budget_left = size & 1 ? 2048 : 1u << 20;
	budget_taken = 0;
	struct httpc_reply r = {0};
	struct httpc_xfer x = {.q = &q, .r = &r, .h = h};
	size_t i = 0;
	bool stopped = false;
	/* Header lines, as libcurl hands them over (with their CRLF). */
	while (i < size && !stopped) {
		const uint8_t *nl = memchr(data + i, '\n', size - i);
		size_t len = nl ? (size_t)(nl - (data + i)) + 1 : size - i;
		char *line = malloc(len);
		CHECK(line);
		memcpy(line, data + i, len);
		size_t got = httpc_on_header(line, 1, len, &x);
		free(line);
		CHECK(got == len || got == 0);
		if (got == 0) {
			CHECK(x.over && x.e_over.code == ERR_BAD_GATEWAY);
			stopped = true;
		}
		i += len;
		if (len <= 2)
			break; /* the empty line: the body follows */
	}
	CHECK(!q.max_headers || stopped || x.header_bytes <= q.max_headers);
	CHECK(memchr(r.content_type, 0, sizeof r.content_type));
	CHECK(memchr(r.x_width, 0, sizeof r.x_width) && memchr(r.x_height, 0, sizeof r.x_height) &&
	      memchr(r.x_scale, 0, sizeof r.x_scale));
	/* The body in chunks. */
	while (i < size && !stopped) {
		size_t len = 1 + data[i] % 300;
		if (len > size - i)
			len = size - i;
		size_t got = httpc_on_body((char *)data + i, 1, len, &x);
		CHECK(got == len || got == 0);
		if (got == 0)
			stopped = true;
		i += len;
		CHECK(r.body_len <= q.max_body);
		CHECK(r.body[r.body_len] == 0);
	}
	CHECK(budget_taken + budget_left == (size & 1 ? 2048 : 1u << 20));
	CHECK(budget_taken == x.cap);

	/* cubicled's parses of it. */
	json_t *j = json_loadb(r.body ? r.body : "", r.body_len, 0, NULL);
	(void)json_is_true(json_object_get(j, "ready"));
	struct err e = {0};
	err_from_json(&e, j, 400 + (size % 200));
	CHECK(e.code != ERR_OK && e.message[0]);
	json_t *back = err_to_json(&e);
	CHECK(back);
	json_decref(back);
	json_decref(j);
	httpc_reply_free(&r);
	return 0;
}
