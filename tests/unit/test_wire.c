/* wire: errors, typed parameters, base64 and the clock (cmocka). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "base64.h"
#include "clock.h"
#include "err.h"
#include "ident.h"
#include "params.h"
#include "utf8.h"

static void test_err_json_shape(void **state)
{
	(void)state;
	struct err e = {0};
	assert_int_equal(err_param(&e, "x", "x: %d is off-screen", 5000), -1);
	assert_int_equal(err_http_status(e.code), 400);
	json_t *j = err_to_json(&e);
	json_t *inner = json_object_get(j, "error");
	assert_string_equal(json_string_value(json_object_get(inner, "code")), "invalid_parameter");
	assert_string_equal(json_string_value(json_object_get(inner, "param")), "x");
	assert_string_equal(json_string_value(json_object_get(inner, "message")),
			    "x: 5000 is off-screen");
	json_decref(j);

	assert_int_equal(err_http_status(ERR_NOT_FOUND), 404);
	assert_int_equal(err_http_status(ERR_CONFLICT), 409);
	assert_int_equal(err_http_status(ERR_TOO_LARGE), 413);
	assert_int_equal(err_http_status(ERR_TIMEOUT), 504);
	assert_int_equal(err_http_status(ERR_BAD_GATEWAY), 502);
	assert_string_equal(err_code_name(ERR_BAD_GATEWAY), "bad_gateway");
	assert_int_equal(err_http_status(ERR_NO_SPACE), 507);
	assert_string_equal(err_code_name(ERR_NO_SPACE), "insufficient_storage");

	/* Another code naming a parameter (a window id that names no window). */
	assert_int_equal(err_set_param(&e, ERR_NOT_FOUND, "id", "id: no window %d", 7), -1);
	assert_int_equal(e.code, ERR_NOT_FOUND);
	assert_string_equal(e.param, "id");
	assert_string_equal(e.message, "id: no window 7");
	assert_int_equal(err_set_param(NULL, ERR_TOO_LARGE, "path", "too large"), -1);
}

static void test_err_from_json_round_trip(void **state)
{
	(void)state;
	struct err in = {0}, out = {0};
	err_param(&in, "size", "size: one of xs, sm");
	json_t *j = err_to_json(&in);
	assert_int_equal(err_from_json(&out, j, 400), -1);
	assert_int_equal(out.code, ERR_INVALID);
	assert_string_equal(out.param, "size");
	assert_string_equal(out.message, "size: one of xs, sm");
	json_decref(j);

	/* Not an error object: the status decides, the message says it. */
	j = json_pack("{s:s}", "stdout", "");
	err_from_json(&out, j, 404);
	assert_int_equal(out.code, ERR_NOT_FOUND);
	assert_string_equal(out.param, "");
	assert_non_null(strstr(out.message, "404"));
	json_decref(j);
	err_from_json(&out, NULL, 502);
	assert_int_equal(out.code, ERR_BAD_GATEWAY);
	err_from_json(&out, NULL, 507);
	assert_int_equal(out.code, ERR_NO_SPACE);
	err_from_json(&out, NULL, 501);
	assert_int_equal(out.code, ERR_INTERNAL);
	err_from_json(&out, NULL, 429);
	assert_int_equal(out.code, ERR_LIMIT);
	/* An empty message from a guest still gives a message (found by fuzz_params). */
	j = json_pack("{s:{s:s, s:s}}", "error", "code", "conflict", "message", "");
	err_from_json(&out, j, 409);
	assert_int_equal(out.code, ERR_CONFLICT);
	assert_non_null(strstr(out.message, "409"));
	json_decref(j);
}

static void test_err_message_with_broken_utf8_still_encodes(void **state)
{
	(void)state;
	struct err e = {0};
	err_set(&e, ERR_INVALID, "bad \xc3");
	json_t *j = err_to_json(&e);
	assert_non_null(j);
	const char *m = json_string_value(json_object_get(json_object_get(j, "error"), "message"));
	assert_string_equal(m, "bad ?");
	json_decref(j);
}

static void test_params_types_and_ranges(void **state)
{
	(void)state;
	struct err e = {0};
	json_t *p = json_loads("{\"x\": 10, \"f\": 2.0, \"s\": \"hi\", \"b\": true, \"n\": null,"
			       "\"big\": 99999, \"str_x\": \"10\"}",
			       0, NULL);
	long long v = -1;
	assert_int_equal(param_int(p, "x", 0, 100, &v, &e), 1);
	assert_int_equal(v, 10);
	assert_int_equal(param_int(p, "f", 0, 100, &v, &e), 1); /* 2.0 is an integer */
	assert_int_equal(v, 2);
	v = 7;
	assert_int_equal(param_int(p, "missing", 0, 100, &v, &e), 0);
	assert_int_equal(param_int(p, "n", 0, 100, &v, &e), 0); /* null = absent */
	assert_int_equal(v, 7);
	assert_int_equal(param_int(p, "big", 0, 100, &v, &e), -1);
	assert_string_equal(e.param, "big");
	assert_non_null(strstr(e.message, "out of range"));
	assert_int_equal(param_int(p, "str_x", 0, 100, &v, &e), -1);
	assert_non_null(strstr(e.message, "expected an integer, got a string"));

	const char *s;
	assert_int_equal(param_str(p, "s", &s, &e), 1);
	assert_string_equal(s, "hi");
	assert_int_equal(param_need_str(p, "nope", &s, &e), -1);
	assert_string_equal(e.param, "nope");

	bool b = false;
	assert_int_equal(param_bool(p, "b", &b, &e), 1);
	assert_true(b);
	assert_int_equal(param_bool(p, "x", &b, &e), -1);

	static const char *const fmts[] = {"png", "jpeg", NULL};
	int idx;
	json_t *q = json_pack("{s:s}", "format", "JPEG");
	assert_int_equal(param_enum(q, "format", fmts, &idx, &e), 1);
	assert_int_equal(idx, 1);
	json_object_set_new(q, "format", json_string("gif"));
	assert_int_equal(param_enum(q, "format", fmts, &idx, &e), -1);
	assert_non_null(strstr(e.message, "png, jpeg"));
	json_decref(q);
	json_decref(p);
}

static void test_params_unknown_names(void **state)
{
	(void)state;
	struct err e = {0};
	static const char *const known[] = {"x", "y", NULL};
	json_t *p = json_pack("{s:i, s:i}", "x", 1, "y", 2);
	assert_int_equal(params_check_known(p, known, &e), 0);
	json_object_set_new(p, "widht", json_integer(3));
	assert_int_equal(params_check_known(p, known, &e), -1);
	assert_string_equal(e.param, "widht");
	assert_non_null(strstr(e.message, "accepted: x, y"));
	json_decref(p);
	json_t *arr = json_array();
	assert_int_equal(params_check_known(arr, known, &e), -1);
	assert_int_equal(e.code, ERR_BAD_REQUEST);
	json_decref(arr);
}

static void test_base64_round_trip_all_bytes(void **state)
{
	(void)state;
	unsigned char data[256 * 3 + 2];
	for (size_t i = 0; i < sizeof data; i++)
		data[i] = (unsigned char)(i * 7);
	for (size_t len = 0; len <= sizeof data; len += (len < 10 ? 1 : 97)) {
		char *t = base64_encode(data, len);
		assert_non_null(t);
		assert_int_equal(strlen(t), 4 * ((len + 2) / 3));
		size_t n = 12345;
		unsigned char *back = base64_decode(t, strlen(t), &n);
		assert_non_null(back);
		assert_int_equal(n, len);
		assert_memory_equal(back, data, len);
		free(back);
		free(t);
	}
}

static void test_base64_rejects_garbage(void **state)
{
	(void)state;
	size_t n;
	assert_null(base64_decode("abc", 3, &n));   /* not a multiple of 4 */
	assert_null(base64_decode("ab!d", 4, &n));  /* bad character */
	assert_null(base64_decode("a=bc", 4, &n));  /* padding in the middle */
	assert_null(base64_decode("ab c", 4, &n));  /* whitespace */
	assert_null(base64_decode(" aGk", 4, &n));  /* leading whitespace (OpenSSL skips it) */
	assert_null(base64_decode("aGk\n", 4, &n)); /* trailing whitespace */
	/* Non-zero bits under the padding (found by fuzz_codec: "a8bVGsG=" was
	 * taken for the same bytes as "a8bVGsE="): one text per byte string. */
	assert_null(base64_decode("aGl=", 4, &n));
	assert_null(base64_decode("aR==", 4, &n));
	unsigned char *ok = base64_decode("aGk=", 4, &n);
	assert_non_null(ok);
	assert_int_equal(n, 2);
	assert_memory_equal(ok, "hi", 2);
	free(ok);
}

/* The one check for names that become paths: nothing that walks. */
static void test_ident_param_refuses_what_walks(void **state)
{
	(void)state;
	static const char *const bad[] = {"",	 ".",	     "..",  "../..", "a/b", "/", "%2e%2e",
					  "a.b", "\xc3\xa9", "a b", "a\\b",  "~",   NULL};
	struct err e = {0};
	for (int i = 0; bad[i]; i++) {
		err_clear(&e);
		assert_int_equal(ident_param("workspace", bad[i], 63, false, &e), -1);
		assert_int_equal(e.code, ERR_INVALID);
		assert_string_equal(e.param, "workspace");
	}
	char longer[70];
	memset(longer, 'a', 64);
	longer[64] = 0;
	assert_int_equal(ident_param("workspace", longer, 63, false, &e), -1);
	longer[63] = 0;
	assert_int_equal(ident_param("workspace", longer, 63, false, &e), 0);
	assert_int_equal(ident_param("workspace", "ws-0123abcd_X", 63, false, &e), 0);
	assert_int_equal(ident_param("workspace", NULL, 63, true, &e), 0);
	assert_int_equal(ident_param("workspace", NULL, 63, false, &e), -1);
}

static void test_clock_sleep_lasts_and_clocks_move(void **state)
{
	(void)state;
	int64_t t0 = clock_now_ms(), u0 = clock_now_us();
	clock_sleep_ms(20);
	assert_true(clock_now_ms() - t0 >= 20);
	assert_true(clock_now_us() - u0 >= 20000);
	clock_sleep_ms(-5); /* nothing, and no hang */
	assert_true(clock_wall_ms() > 1600000000000LL);
}

static void test_utf8_refuses_what_rfc3629_refuses(void **state)
{
	(void)state;
	unsigned long cp = 0;
	/* Well-formed: one to four bytes, the highest code point. */
	assert_int_equal(utf8_decode("A", 1, &cp), 1);
	assert_int_equal(cp, 0x41);
	assert_int_equal(utf8_decode("\xc3\xa9", 2, &cp), 2);
	assert_int_equal(cp, 0xe9);
	assert_int_equal(utf8_decode("\xe2\x82\xac", 3, &cp), 3);
	assert_int_equal(cp, 0x20ac);
	assert_int_equal(utf8_decode("\xf4\x8f\xbf\xbf", 4, &cp), 4);
	assert_int_equal(cp, 0x10ffff);
	/* Past U+10FFFF (found by fuzz_codec: f4 af af af decoded to 0x11bfef),
	 * overlong forms, surrogates, truncated and stray bytes: not UTF-8,
	 * which json_string refuses later (a 500 where the caller meant U+FFFD). */
	static const char *const bad[] = {"\xf4\xaf\xaf\xaf",
					  "\xf4\x90\x80\x80",
					  "\xf5\x80\x80\x80",
					  "\xc0\x80",
					  "\xc1\xbf",
					  "\xe0\x80\x80",
					  "\xe0\x9f\xbf",
					  "\xf0\x80\x80\x80",
					  "\xf0\x8f\xbf\xbf",
					  "\xed\xa0\x80",
					  "\xed\xbf\xbf",
					  "\xe2\x82",
					  "\x80",
					  "\xff"};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
		assert_int_equal(utf8_decode(bad[i], strlen(bad[i]), &cp), 0);
}

static void test_utf8_json_replaces_what_is_not_utf8(void **state)
{
	(void)state;
	/* Well-formed text, NUL included, passes as it is. */
	json_t *j = utf8_json("a\0\xc3\xa9\xe2\x82\xac", 7);
	assert_non_null(j);
	assert_int_equal(json_string_length(j), 7);
	assert_memory_equal(json_string_value(j), "a\0\xc3\xa9\xe2\x82\xac", 7);
	json_decref(j);
	/* Each byte of a bad sequence becomes U+FFFD; the rest stays. */
	j = utf8_json("x\xed\xa0\x80y\xff", 6);
	assert_non_null(j);
	assert_string_equal(json_string_value(j),
			    "x\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbdy\xef\xbf\xbd");
	json_decref(j);
	j = utf8_json("", 0);
	assert_string_equal(json_string_value(j), "");
	json_decref(j);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_err_json_shape),
	    cmocka_unit_test(test_ident_param_refuses_what_walks),
	    cmocka_unit_test(test_err_from_json_round_trip),
	    cmocka_unit_test(test_err_message_with_broken_utf8_still_encodes),
	    cmocka_unit_test(test_params_types_and_ranges),
	    cmocka_unit_test(test_params_unknown_names),
	    cmocka_unit_test(test_base64_round_trip_all_bytes),
	    cmocka_unit_test(test_base64_rejects_garbage),
	    cmocka_unit_test(test_clock_sleep_lasts_and_clocks_move),
	    cmocka_unit_test(test_utf8_refuses_what_rfc3629_refuses),
	    cmocka_unit_test(test_utf8_json_replaces_what_is_not_utf8),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
