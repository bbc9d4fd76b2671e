/* test_rouge_sentsplit.c: the rule-based stand-in for nltk.sent_tokenize that MLPerf's
 * postprocessing uses before ROUGE-Lsum (accuracy/sentsplit.h): one case per rule. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "accuracy/sentsplit.h"

static void expect_lines(const char *text, const char *want) {
    size_t n = 0;
    char *got = lb_sentsplit_lines(text, strlen(text), &n);
    assert_non_null(got);
    if (strcmp(got, want) != 0)
        fail_msg("split(\"%s\") = \"%s\", expected \"%s\"", text, got, want);
    assert_int_equal(n, strlen(want));
    free(got);
}

static void test_sentsplit_strips_and_ends_at_periods(void **state) {
    (void)state;
    expect_lines("  Hello world. This is it.  ", "Hello world.\nThis is it.");
    expect_lines("One.   \n  Two.", "One.\nTwo.");
    expect_lines("\u00a0Hi.\u3000", "Hi."); /* Python's str.strip() whitespace */
    expect_lines("", "");
    expect_lines(" \n\t ", "");
    expect_lines("June . Israel", "June .\nIsrael"); /* CNN/DM highlights: " . " */
    expect_lines("it was fine. and then", "it was fine.\nand then");
}

static void test_sentsplit_question_and_exclamation_always_end(void **state) {
    (void)state;
    expect_lines("Really?! Yes. Why? because", "Really?!\nYes.\nWhy?\nbecause");
}

static void test_sentsplit_keeps_closing_quotes_with_the_sentence(void **state) {
    (void)state;
    expect_lines("He said \"go.\" Then he left.", "He said \"go.\"\nThen he left.");
    expect_lines("(It ended.) Next", "(It ended.)\nNext");
    expect_lines("He said \u201cgo.\u201d Then", "He said \u201cgo.\u201d\nThen");
}

static void test_sentsplit_abbreviations_and_initials_do_not_end(void **state) {
    (void)state;
    expect_lines("Mr. Smith went to Washington. He left.",
                 "Mr. Smith went to Washington.\nHe left.");
    expect_lines("in the U.S. economy", "in the U.S. economy");
    expect_lines("in the U.S. The company", "in the U.S.\nThe company"); /* a sentence starter */
    expect_lines("J. K. Rowling wrote it.", "J. K. Rowling wrote it.");
    expect_lines("Dr. Who, e.g. this one", "Dr. Who, e.g. this one");
    expect_lines("No. 10 Downing Street", "No. 10 Downing Street");
    expect_lines("I said no. Then", "I said no.\nThen");
}

static void test_sentsplit_numbers_and_ellipses_look_at_the_next_word(void **state) {
    (void)state;
    expect_lines("It rose 3.5 percent. Then", "It rose 3.5 percent.\nThen");
    expect_lines("in 2015. the", "in 2015. the");
    expect_lines("in 2015. The", "in 2015.\nThe");
    expect_lines("Wait... what", "Wait... what");
    expect_lines("Wait... What", "Wait...\nWhat");
}

static void test_sentsplit_keeps_line_breaks_inside_sentences(void **state) {
    (void)state;
    expect_lines("Summary:\nThe man went home", "Summary:\nThe man went home");
    expect_lines("a.b.c x", "a.b.c x"); /* no whitespace after the periods */
}

/* Words separated by no-break spaces make one ASCII word as long as the text: the look-back
 * before each '.' is bounded, so 300 KB split at once (reading back to the start at every
 * period took seconds, hours for a few MB), and every period still ends its sentence. */
static void test_sentsplit_text_without_ascii_spaces_is_split_in_linear_time(void **state) {
    (void)state;
    static const char unit[] = "ab.\u00a0";
    const size_t reps = 60000, len = sizeof unit - 1;
    char *text = malloc(reps * len + 1);
    assert_non_null(text);
    for (size_t i = 0; i < reps; i++)
        memcpy(text + i * len, unit, len);
    text[reps * len] = '\0';
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    size_t n = 0;
    char *got = lb_sentsplit_lines(text, reps * len, &n);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    assert_non_null(got);
    double s = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9;
    if (s > 2.0) fail_msg("splitting %zu bytes took %.1f s", reps * len, s);
    assert_int_equal(n, reps * 4 - 1); /* "ab.\n" each, the last without its "\n" */
    for (size_t i = 0; i < reps; i++)
        assert_memory_equal(got + i * 4, i + 1 < reps ? "ab.\n" : "ab.", i + 1 < reps ? 4 : 3);
    free(got);
    free(text);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sentsplit_strips_and_ends_at_periods),
        cmocka_unit_test(test_sentsplit_question_and_exclamation_always_end),
        cmocka_unit_test(test_sentsplit_keeps_closing_quotes_with_the_sentence),
        cmocka_unit_test(test_sentsplit_abbreviations_and_initials_do_not_end),
        cmocka_unit_test(test_sentsplit_numbers_and_ellipses_look_at_the_next_word),
        cmocka_unit_test(test_sentsplit_keeps_line_breaks_inside_sentences),
        cmocka_unit_test(test_sentsplit_text_without_ascii_spaces_is_split_in_linear_time),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
