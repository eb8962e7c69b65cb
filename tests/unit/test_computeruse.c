/*
 * The computer-use display scaling, exhaustively: for screen sizes people
 * use and every smaller display, every agent pixel maps to a screen pixel
 * whose centre lies inside what the agent's pixel shows, and back to itself.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "computeruse-internal.h"

static void test_round_trip_every_pixel(void **state)
{
	(void)state;
	static const int screens[] = {320,  768,  800,	1023, 1080, 1280,
				      1366, 1440, 1920, 2160, 3840};
	long long checked = 0;
	for (size_t i = 0; i < sizeof screens / sizeof screens[0]; i++) {
		int s = screens[i];
		for (int d = 1; d <= s; d++) {
			for (int a = 0; a < d; a++) {
				int v = cu_to_screen(a, d, s);
				/* On the screen, and its centre v + 1/2 within [a*s/d, (a+1)*s/d).
				 */
				assert_true(v >= 0 && v < s);
				assert_true(2LL * a * s <= (2LL * v + 1) * d);
				assert_true((2LL * v + 1) * d < 2LL * (a + 1) * s);
				assert_int_equal(cu_to_agent(v, d, s), a);
				checked++;
			}
		}
	}
	assert_true(checked > 10000000);
}

static void test_identity_when_not_scaled(void **state)
{
	(void)state;
	for (int v = 0; v < 1280; v++) {
		assert_int_equal(cu_to_screen(v, 1280, 1280), v);
		assert_int_equal(cu_to_agent(v, 1280, 1280), v);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_round_trip_every_pixel),
	    cmocka_unit_test(test_identity_when_not_scaled),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
