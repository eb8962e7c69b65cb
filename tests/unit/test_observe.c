/* wire/metrics.h and wire/log.h: histograms in their exposition, label and
 * JSON escaping, request ids; err.h's static codes for counters. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "err.h"
#include "log.h"
#include "metrics.h"

static char *hist_text(const struct metrics_hist *h, const char *labels)
{
	char *out = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&out, &len);
	metrics_write_hist(f, "t_seconds", labels, h);
	fclose(f);
	return out;
}

static void test_hist_buckets_and_count(void **state)
{
	(void)state;
	static struct metrics_hist h = {.b = &metrics_latency};
	metrics_observe(&h, 400);      /* 0.4 ms: the first bucket */
	metrics_observe(&h, 500);      /* exactly 0.5 ms: still the first (le is inclusive) */
	metrics_observe(&h, 3000);     /* 3 ms: le 0.005 */
	metrics_observe(&h, 90000000); /* 90 s: +Inf only */
	metrics_observe(&h, -7);       /* a clock step back counts as 0 */
	assert_int_equal(metrics_count(&h), 5);
	char *t = hist_text(&h, "route=\"/x\"");
	assert_non_null(strstr(t, "t_seconds_bucket{route=\"/x\",le=\"0.0005\"} 3\n"));
	assert_non_null(strstr(t, "t_seconds_bucket{route=\"/x\",le=\"0.0025\"} 3\n"));
	assert_non_null(strstr(t, "t_seconds_bucket{route=\"/x\",le=\"0.005\"} 4\n"));
	assert_non_null(strstr(t, "t_seconds_bucket{route=\"/x\",le=\"60\"} 4\n"));
	assert_non_null(strstr(t, "t_seconds_bucket{route=\"/x\",le=\"+Inf\"} 5\n"));
	assert_non_null(strstr(t, "t_seconds_count{route=\"/x\"} 5\n"));
	assert_non_null(strstr(t, "t_seconds_sum{route=\"/x\"} 90.003900\n"));
	free(t);
	static struct metrics_hist bare; /* no buckets set: the latency ones, no labels */
	metrics_observe(&bare, 1000000);
	t = hist_text(&bare, "");
	assert_non_null(strstr(t, "t_seconds_bucket{le=\"1\"} 1\n"));
	assert_non_null(strstr(t, "t_seconds_count 1\n"));
	free(t);
}

static void test_label_escaping(void **state)
{
	(void)state;
	char out[32];
	metrics_label(out, sizeof out, "a\"b\\c\nd");
	assert_string_equal(out, "a\\\"b\\\\c\\nd");
	metrics_label(out, 8, "0123456789");
	assert_true(strlen(out) < 8);
}

static void test_request_ids(void **state)
{
	(void)state;
	assert_true(log_request_id_ok("abc-123_x.y:z"));
	assert_false(log_request_id_ok(""));
	assert_false(log_request_id_ok(NULL));
	assert_false(log_request_id_ok("has space"));
	assert_false(log_request_id_ok("semi;colon"));
	assert_false(log_request_id_ok("new\nline"));
	char longest[66];
	memset(longest, 'a', 64);
	longest[64] = 0;
	assert_true(log_request_id_ok(longest));
	longest[64] = 'a';
	longest[65] = 0;
	assert_false(log_request_id_ok(longest));
	char a[17], b[17];
	log_request_id_new(a, sizeof a);
	log_request_id_new(b, sizeof b);
	assert_int_equal(strlen(a), 16);
	assert_true(log_request_id_ok(a));
	assert_string_not_equal(a, b);
	log_request_id_set("rid-1");
	assert_string_equal(log_request_id(), "rid-1");
	log_request_id_set("not ok"); /* refused: cleared, never sent on */
	assert_string_equal(log_request_id(), "");
	log_request_id_set(NULL);
	assert_string_equal(log_request_id(), "");
}

static void test_json_escape(void **state)
{
	(void)state;
	char out[64];
	size_t k = 0;
	log_json_escape(out, sizeof out, &k, "a\"\\\x01\n\xc3\xa9\xff");
	assert_string_equal(out, "a\\\"\\\\\\u0001\\u000a\xc3\xa9\\ufffd");
	assert_int_equal(k, strlen(out));
	char small[10];
	k = 0;
	log_json_escape(small, sizeof small, &k, "0123456789abcdef");
	assert_true(k < sizeof small);
	assert_int_equal(strlen(small), k);
}

static void test_static_codes(void **state)
{
	(void)state;
	assert_string_equal(err_code_static("not_found", 200), "not_found");
	assert_string_equal(err_code_static("bogus", 404), "not_found");
	assert_string_equal(err_code_static(NULL, 408), "request_timeout");
	assert_string_equal(err_code_static(NULL, 418), "other");
	for (int i = 0; i < ERR_CODE_NAMES; i++)
		assert_int_equal(err_code_index(err_code_at(i)), i);
	assert_string_equal(err_code_at(err_code_index("made_up")), "other");
	assert_int_equal(err_code_index(err_code_name(ERR_NO_SPACE)),
			 err_code_index("insufficient_storage"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_hist_buckets_and_count),
	    cmocka_unit_test(test_label_escaping),
	    cmocka_unit_test(test_request_ids),
	    cmocka_unit_test(test_json_escape),
	    cmocka_unit_test(test_static_codes),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
