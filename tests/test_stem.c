/* test_stem.c: the Porter stemmer against the paper's examples, NLTK's extensions, and
 * every pair of tests/fixtures/rouge/stem_nltk.tsv (written by NLTK's own PorterStemmer,
 * tools/make_stem_fixture.py). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "accuracy/stem.h"

static void expect_stem(const char *word, const char *stem) {
    char out[64];
    size_t n = lb_stem_word(word, strlen(word), out);
    if (strcmp(out, stem) != 0) fail_msg("stem(%s) = %s, expected %s", word, out, stem);
    assert_int_equal(n, strlen(stem));
}

/* Examples printed in Porter (1980) that NLTK's extended mode keeps. */
static void test_stem_paper_examples(void **state) {
    (void)state;
    expect_stem("caresses", "caress");
    expect_stem("ponies", "poni");
    expect_stem("caress", "caress");
    expect_stem("cats", "cat");
    expect_stem("feed", "feed");
    expect_stem("agreed", "agre"); /* agree, then step 5a drops the e (m = 1, not *o) */
    expect_stem("plastered", "plaster");
    expect_stem("motoring", "motor");
    expect_stem("sing", "sing");
    expect_stem("conflated", "conflat");
    expect_stem("hopping", "hop");
    expect_stem("falling", "fall");
    expect_stem("hissing", "hiss");
    expect_stem("failing", "fail");
    expect_stem("filing", "file");
    expect_stem("happy", "happi");
    expect_stem("relational", "relat");
    expect_stem("generalizations", "gener");
    expect_stem("controll", "control");
    expect_stem("roll", "roll");
}

/* Where NLTK_EXTENSIONS departs from the paper. */
static void test_stem_nltk_extensions(void **state) {
    (void)state;
    expect_stem("skies", "sky"); /* pool of irregular forms */
    expect_stem("dying", "die");
    expect_stem("news", "news");
    expect_stem("innings", "inning");
    expect_stem("ties", "tie"); /* four-letter -ies */
    expect_stem("died", "die"); /* four-letter -ied */
    expect_stem("spied", "spi");
    expect_stem("enjoy", "enjoy"); /* y -> i only after a consonant */
    expect_stem("spy", "spi");     /* ... and without needing a vowel before it */
    expect_stem("by", "by");       /* two letters: untouched */
    expect_stem("generously", "gener");
    expect_stem("geology", "geolog"); /* the l of -logi belongs to the stem */
}

static void test_stem_matches_nltk(void **state) {
    (void)state;
    const char *path = LB_TEST_FIXTURES "/rouge/stem_nltk.tsv";
    FILE *f = fopen(path, "r");
    if (f == NULL) fail_msg("cannot open %s", path);
    char line[256], out[256];
    long pairs = 0, mismatches = 0;
    while (fgets(line, sizeof line, f)) {
        if (line[0] == '#') continue;
        char *tab = strchr(line, '\t');
        char *nl = strchr(line, '\n');
        assert_non_null(tab);
        assert_non_null(nl);
        *tab = '\0';
        *nl = '\0';
        const char *word = line, *want = tab + 1;
        lb_stem_word(word, strlen(word), out);
        pairs++;
        if (strcmp(out, want) != 0 && ++mismatches <= 20)
            printf("mismatch: %s -> %s, NLTK %s\n", word, out, want);
    }
    fclose(f);
    printf("%ld pairs, %ld mismatches\n", pairs, mismatches);
    assert_true(pairs > 50000);
    assert_int_equal(mismatches, 0);
}

static void test_stem_in_place_and_empty(void **state) {
    (void)state;
    char buf[16] = "running";
    assert_int_equal(lb_stem_word(buf, strlen(buf), buf), 3);
    assert_string_equal(buf, "run");
    assert_int_equal(lb_stem_word("", 0, buf), 0);
    assert_string_equal(buf, "");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_stem_paper_examples),
        cmocka_unit_test(test_stem_nltk_extensions),
        cmocka_unit_test(test_stem_matches_nltk),
        cmocka_unit_test(test_stem_in_place_and_empty),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
