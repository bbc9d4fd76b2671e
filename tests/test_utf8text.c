/* test_utf8text.c: core/utf8text.h against RFC 3629's well-formed sequences: UTF-8 of one
 * to four bytes passes unchanged, each byte of an overlong form, a surrogate, a code point
 * above U+10FFFF or a character cut short becomes '?', and a cut by bytes never splits a
 * character. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "core/utf8text.h"

static void expect_repaired(const char *in, const char *want) {
    char buf[64];
    snprintf(buf, sizeof buf, "%s", in);
    assert_ptr_equal(lb_utf8text_repair(buf), buf);
    if (strcmp(buf, want) != 0) fail_msg("'%s' repaired to '%s', expected '%s'", in, buf, want);
}

static void test_utf8text_well_formed_text_is_unchanged(void **state) {
    (void)state;
    /* U+007F, U+0080, U+07FF, U+0800, U+D7FF, U+E000, U+FFFD, U+10000, U+10FFFF */
    const char *ok = "a\x7f \xc2\x80 \xdf\xbf \xe0\xa0\x80 \xed\x9f\xbf \xee\x80\x80 "
                     "\xef\xbf\xbd \xf0\x90\x80\x80 \xf4\x8f\xbf\xbf caf\xc3\xa9 \xf0\x9f\x98\x80";
    expect_repaired(ok, ok);
    expect_repaired("", "");
    assert_int_equal(lb_utf8text_char_len("a", 1), 1);
    assert_int_equal(lb_utf8text_char_len("\xc3\xa9", 2), 2);
    assert_int_equal(lb_utf8text_char_len("\xe2\x82\xac", 3), 3);
    assert_int_equal(lb_utf8text_char_len("\xf0\x9f\x98\x80", 4), 4);
}

static void test_utf8text_overlong_forms_become_question_marks(void **state) {
    (void)state;
    expect_repaired("\xc0\xaf", "??");                        /* '/' in two bytes */
    expect_repaired("\xc1\xbf", "??");                        /* U+007F in two bytes */
    expect_repaired("\xe0\x80\xaf", "???");                   /* '/' in three */
    expect_repaired("\xe0\x9f\xbf", "???");                   /* U+07FF in three */
    expect_repaired("\xf0\x80\x80\xaf", "????");              /* '/' in four */
    expect_repaired("\xf0\x8f\xbf\xbf", "????");              /* U+FFFF in four */
    expect_repaired("x\xc0\x80y", "x??y");                    /* NUL in two bytes */
    assert_int_equal(lb_utf8text_char_len("\xe0\x80", 2), 0); /* known bad before the end */
}

static void test_utf8text_surrogates_become_question_marks(void **state) {
    (void)state;
    expect_repaired("\xed\xa0\x80", "???");                /* U+D800 */
    expect_repaired("\xed\xbf\xbf", "???");                /* U+DFFF */
    expect_repaired("\xed\xa0\xbd\xed\xb8\x80", "??????"); /* a CESU-8 pair */
}

static void test_utf8text_code_points_above_10ffff_become_question_marks(void **state) {
    (void)state;
    expect_repaired("\xf4\x90\x80\x80", "????"); /* U+110000 */
    expect_repaired("\xf5\x80\x80\x80", "????");
    expect_repaired("\xf7\xbf\xbf\xbf", "????");
    expect_repaired("a\xfe\xff", "a??");
}

static void test_utf8text_truncated_sequences_become_question_marks(void **state) {
    (void)state;
    expect_repaired("\xe2\x82", "??");      /* a euro sign cut short by the end */
    expect_repaired("\xe2\x82x", "??x");    /* and by an ASCII byte */
    expect_repaired("\xf0\x9f\x98", "???"); /* three bytes of four */
    expect_repaired("\xc3", "?");
    expect_repaired("\x80\xbf", "??");        /* continuation bytes alone */
    expect_repaired("caf\xe9 ok", "caf? ok"); /* Latin-1 */
    assert_int_equal(lb_utf8text_char_len("\xe2\x82", 2), -1);
    assert_int_equal(lb_utf8text_char_len("\xf0\x9f\x98", 3), -1);
    assert_int_equal(lb_utf8text_char_len("\xf0\x9f\x98", 2), -1);
}

static void test_utf8text_cut_never_splits_a_character(void **state) {
    (void)state;
    const char *s = "ab\xf0\x9f\x98\x80"
                    "c"; /* 'a' 'b', a 4-byte character, 'c' */
    assert_int_equal(lb_utf8text_cut_len(s, 0), 0);
    assert_int_equal(lb_utf8text_cut_len(s, 2), 2);
    assert_int_equal(lb_utf8text_cut_len(s, 3), 2); /* inside the 4-byte character */
    assert_int_equal(lb_utf8text_cut_len(s, 4), 2);
    assert_int_equal(lb_utf8text_cut_len(s, 5), 2);
    assert_int_equal(lb_utf8text_cut_len(s, 6), 6);
    assert_int_equal(lb_utf8text_cut_len(s, 7), 7);
    assert_int_equal(lb_utf8text_cut_len(s, 100), 7);
    assert_int_equal(lb_utf8text_cut_len("\xc3\xa9\xc3\xa9", 3), 2);
    assert_int_equal(lb_utf8text_cut_len("\xe2\x82\xac", 2), 0);
    /* a byte that starts no character is one unit: a cut may fall after it */
    assert_int_equal(lb_utf8text_cut_len("\xff\xff\xc3\xa9", 2), 2);
    assert_int_equal(lb_utf8text_cut_len("\xff\xff\xc3\xa9", 3), 2);
    assert_int_equal(lb_utf8text_cut_len("ab\xe2\x82", 3), 3);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_utf8text_well_formed_text_is_unchanged),
        cmocka_unit_test(test_utf8text_overlong_forms_become_question_marks),
        cmocka_unit_test(test_utf8text_surrogates_become_question_marks),
        cmocka_unit_test(test_utf8text_code_points_above_10ffff_become_question_marks),
        cmocka_unit_test(test_utf8text_truncated_sequences_become_question_marks),
        cmocka_unit_test(test_utf8text_cut_never_splits_a_character),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
