/* keys: key names and combinations to keysyms (cmocka; no display needed). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>
#include <X11/keysym.h>

#include "keys.h"

static void test_aliases_and_case(void **state)
{
	(void)state;
	assert_int_equal(keys_lookup("enter"), XK_Return);
	assert_int_equal(keys_lookup("ENTER"), XK_Return);
	assert_int_equal(keys_lookup("Return"), XK_Return);
	assert_int_equal(keys_lookup("esc"), XK_Escape);
	assert_int_equal(keys_lookup("cmd"), XK_Super_L);
	assert_int_equal(keys_lookup("win"), XK_Super_L);
	assert_int_equal(keys_lookup("pagedown"), XK_Next);
	assert_int_equal(keys_lookup("PageUp"), XK_Prior);
	assert_int_equal(keys_lookup("page_up"), XK_Prior);
	assert_int_equal(keys_lookup("del"), XK_Delete);
	assert_int_equal(keys_lookup("backspace"), XK_BackSpace);
	assert_int_equal(keys_lookup("f1"), XK_F1);
	assert_int_equal(keys_lookup("F24"), XK_F24);
	assert_int_equal(keys_lookup("kp_enter"), XK_KP_Enter);
	assert_int_equal(keys_lookup("xf86audioplay"), 0x1008ff14);
	assert_int_equal(keys_lookup("nosuchkey"), NoSymbol);
	assert_int_equal(keys_lookup(""), NoSymbol);
}

static void test_single_characters(void **state)
{
	(void)state;
	assert_int_equal(keys_lookup("a"), XK_a);
	assert_int_equal(keys_lookup("A"), XK_A);
	assert_int_equal(keys_lookup("é"), XK_eacute);
	assert_int_equal(keys_lookup("世"), 0x1000000 + 0x4e16);
	assert_int_equal(keys_lookup("🙂"), 0x1000000 + 0x1f642);
	assert_int_equal(keys_from_codepoint('\n'), XK_Return);
	assert_int_equal(keys_from_codepoint('\t'), XK_Tab);
	assert_int_equal(keys_from_codepoint(0x7), NoSymbol);
}

static void test_combinations(void **state)
{
	(void)state;
	KeySym s[8];
	struct err e = {0};
	assert_int_equal(keys_parse_combo("ctrl+shift+t", s, 8, "key", &e), 3);
	assert_int_equal(s[0], XK_Control_L);
	assert_int_equal(s[1], XK_Shift_L);
	assert_int_equal(s[2], XK_t);
	assert_int_equal(keys_parse_combo(" Ctrl + C ", s, 8, "key", &e), 2);
	assert_int_equal(s[1], XK_C);
	assert_int_equal(keys_parse_combo("+", s, 8, "key", &e), 1);
	assert_int_equal(s[0], XK_plus);
	assert_int_equal(keys_parse_combo("ctrl++", s, 8, "key", &e), 2);
	assert_int_equal(s[1], XK_plus);
	assert_int_equal(keys_parse_combo("ctrl+plus", s, 8, "key", &e), 2);
	assert_int_equal(s[1], XK_plus);
}

static void test_bad_combinations_name_the_parameter(void **state)
{
	(void)state;
	KeySym s[2];
	struct err e = {0};
	assert_int_equal(keys_parse_combo("ctrl+bogus", s, 2, "key", &e), -1);
	assert_string_equal(e.param, "key");
	assert_non_null(strstr(e.message, "bogus"));
	assert_int_equal(keys_parse_combo("ctrl+", s, 2, "key", &e), -1);
	assert_int_equal(keys_parse_combo("", s, 2, "key", &e), -1);
	assert_int_equal(keys_parse_combo("a+b+c", s, 2, "keys[0]", &e), -1);
	assert_string_equal(e.param, "keys[0]");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_aliases_and_case),
	    cmocka_unit_test(test_single_characters),
	    cmocka_unit_test(test_combinations),
	    cmocka_unit_test(test_bad_combinations_name_the_parameter),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
