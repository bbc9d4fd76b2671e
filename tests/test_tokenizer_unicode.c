/* test_tokenizer_unicode.c: the pre-split expression's character classes against the
 * Unicode Character Database, every code point.
 *
 * The reference is Debian's unicode-data package (/usr/share/unicode, or $LB_UCD_DIR):
 * UnicodeData.txt's general categories give letters (L*) and numbers (N*), PropList.txt's
 * White_Space property gives \s, CaseFolding.txt's simple folding gives what the
 * case-insensitive contractions accept (the regex crate and Oniguruma fold that way).
 * The tokenizer's classes (model/ucd_classes.h, made by tests/gen_ucd_classes.sh from the
 * same files) are compiled with the flags the tokenizer uses and asked about each code
 * point; then the tokenizer itself is checked on code points where PCRE2's own tables and
 * the reference differ. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "model/tokenizer.h"
#include "model/ucd_classes.h"
#include "test_util.h"

#define N_CP       0x110000u
#define CLS_LETTER 1u
#define CLS_NUMBER 2u
#define CLS_WHITE  4u

static const char *ucd_dir(void) {
    const char *d = getenv("LB_UCD_DIR");
    return d && *d ? d : "/usr/share/unicode";
}

static FILE *open_ucd(const char *name) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s", ucd_dir(), name);
    FILE *f = fopen(path, "r");
    if (f == NULL)
        fail_msg("%s cannot be read: the reference is Debian's unicode-data package "
                 "(deps/apt-packages.txt), or set LB_UCD_DIR",
                 path);
    return f;
}

/* The class bits of every code point from UnicodeData.txt and PropList.txt. */
static uint8_t *reference_classes(void) {
    uint8_t *cls = calloc(N_CP, 1);
    assert_non_null(cls);
    FILE *f = open_ucd("UnicodeData.txt");
    char line[512];
    uint32_t first = 0;
    while (fgets(line, sizeof line, f)) {
        char *name = strchr(line, ';');
        char *gc = name ? strchr(name + 1, ';') : NULL;
        assert_non_null(gc);
        uint32_t cp = (uint32_t)strtoul(line, NULL, 16);
        uint8_t bit = gc[1] == 'L' ? CLS_LETTER : gc[1] == 'N' ? CLS_NUMBER : 0;
        if (strncmp(gc - 8, ", First>", 8) == 0) {
            first = cp;
            continue;
        }
        uint32_t lo = strncmp(gc - 7, ", Last>", 7) == 0 ? first : cp;
        for (uint32_t c = lo; c <= cp; c++)
            cls[c] |= bit;
    }
    fclose(f);
    f = open_ucd("PropList.txt");
    char version[64] = "";
    while (fgets(line, sizeof line, f)) {
        if (version[0] == '\0') sscanf(line, "# PropList-%63[0-9.]", version);
        if (strstr(line, "; White_Space") == NULL || line[0] == '#') continue;
        char *end;
        uint32_t lo = (uint32_t)strtoul(line, &end, 16), hi = lo;
        if (end[0] == '.' && end[1] == '.') hi = (uint32_t)strtoul(end + 2, NULL, 16);
        for (uint32_t c = lo; c <= hi; c++)
            cls[c] |= CLS_WHITE;
    }
    fclose(f);
    /* The classes were generated from one version; another database is another reference. */
    if (strcmp(version, LB_UCD_VERSION ".") != 0 && strcmp(version, LB_UCD_VERSION) != 0)
        fail_msg("the database in %s is Unicode %s, the tokenizer's classes Unicode %s: "
                 "regenerate src/model/ucd_classes.h with tests/gen_ucd_classes.sh",
                 ucd_dir(), version, LB_UCD_VERSION);
    return cls;
}

/* Simple case folding (statuses C and S) of every code point: itself where none. */
static uint32_t *reference_folding(void) {
    uint32_t *fold = malloc(N_CP * sizeof *fold);
    assert_non_null(fold);
    for (uint32_t c = 0; c < N_CP; c++)
        fold[c] = c;
    FILE *f = open_ucd("CaseFolding.txt");
    char line[512];
    while (fgets(line, sizeof line, f)) {
        unsigned from, to;
        char status;
        if (sscanf(line, "%x; %c; %x;", &from, &status, &to) == 3 &&
            (status == 'C' || status == 'S'))
            fold[from] = to;
    }
    fclose(f);
    return fold;
}

/* Compiled as the tokenizer compiles its expression, anchored. */
static pcre2_code *compile(const char *pattern) {
    int code;
    PCRE2_SIZE at;
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)pattern, PCRE2_ZERO_TERMINATED,
                                   PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF | PCRE2_ANCHORED,
                                   &code, &at, NULL);
    if (re == NULL) fail_msg("pattern does not compile at offset %zu (error %d)", (size_t)at, code);
    pcre2_jit_compile(re, PCRE2_JIT_COMPLETE);
    return re;
}

/* Length of the anchored match of re at the start of s[0..n), or -1. */
static long match_len(pcre2_code *re, pcre2_match_data *md, const unsigned char *s, size_t n) {
    if (pcre2_match(re, s, n, 0, 0, md, NULL) < 0) return -1;
    const PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
    return (long)(ov[1] - ov[0]);
}

static bool is_surrogate(uint32_t c) {
    return c >= 0xD800 && c <= 0xDFFF;
}

/* Letters, numbers and white space: each class of ucd_classes.h holds exactly the code
 * points the database gives it, and its complement (the expression's [^...]) the rest. */
static void test_tokenizer_classes_equal_the_unicode_database(void **state) {
    (void)state;
    uint8_t *ref = reference_classes();
    static const struct {
        const char *name;
        const char *pattern, *negated;
        uint8_t bit;
    } classes[] = {
        {"letter", "[" LB_UCD_LETTER "]", "[^" LB_UCD_LETTER "]", CLS_LETTER},
        {"number", "[" LB_UCD_NUMBER "]", "[^" LB_UCD_NUMBER "]", CLS_NUMBER},
        {"white space", "[" LB_UCD_WHITE_SPACE "]", "[^" LB_UCD_WHITE_SPACE "]", CLS_WHITE},
    };
    pcre2_match_data *md = pcre2_match_data_create(1, NULL);
    int wrong = 0;
    for (size_t k = 0; k < sizeof classes / sizeof classes[0]; k++) {
        pcre2_code *in = compile(classes[k].pattern), *out = compile(classes[k].negated);
        size_t members = 0;
        for (uint32_t c = 0; c < N_CP; c++) {
            if (is_surrogate(c)) continue;
            unsigned char u[4];
            size_t n = lb_test_utf8_of(c, u);
            bool want = (ref[c] & classes[k].bit) != 0;
            bool got = match_len(in, md, u, n) == (long)n;
            bool got_not = match_len(out, md, u, n) == (long)n;
            members += want;
            if ((got != want || got_not == want) && wrong++ < 10)
                print_error("U+%04X: the tokenizer's %s class says %s, Unicode %s says %s\n", c,
                            classes[k].name, got ? "in" : "out", LB_UCD_VERSION,
                            want ? "in" : "out");
        }
        /* the database was read at all: Unicode 15 has 136k letters, 1.7k numbers, 25 spaces */
        assert_true(members >= (k == 0 ? 130000u : k == 1 ? 1500u : 25u));
        pcre2_code_free(in);
        pcre2_code_free(out);
    }
    pcre2_match_data_free(md);
    free(ref);
    assert_int_equal(wrong, 0);
}

/* Llama 3's contractions are case-insensitive: "'" followed by c is a contraction exactly
 * when c folds to s, t, m or d (so U+017F LATIN SMALL LETTER LONG S is one, as in the
 * regex crate), and "'" c "e", "'" c "l" exactly when c folds to r or v, and l. */
static void test_tokenizer_contractions_fold_case_as_unicode_does(void **state) {
    (void)state;
    uint32_t *fold = reference_folding();
    pcre2_code *re = compile("(?i:'s|'t|'re|'ve|'m|'ll|'d)");
    pcre2_match_data *md = pcre2_match_data_create(1, NULL);
    int wrong = 0;
    for (uint32_t c = 0; c < N_CP; c++) {
        if (is_surrogate(c)) continue;
        unsigned char u[8] = {'\''};
        size_t n = 1 + lb_test_utf8_of(c, u + 1);
        uint32_t f = fold[c];
        bool one = f == 's' || f == 't' || f == 'm' || f == 'd';
        u[n] = 'e';
        bool re_ve = f == 'r' || f == 'v';
        bool got_one = match_len(re, md, u, n) == (long)n;
        bool got_two = match_len(re, md, u, n + 1) == (long)n + 1;
        u[n] = 'l';
        bool got_ll = match_len(re, md, u, n + 1) == (long)n + 1;
        if ((got_one != one || got_two != re_ve || got_ll != (f == 'l')) && wrong++ < 10)
            print_error("U+%04X (folds to U+%04X): contraction matched %d/%d/%d\n", c, f, got_one,
                        got_two, got_ll);
    }
    pcre2_match_data_free(md);
    pcre2_code_free(re);
    free(fold);
    assert_int_equal(wrong, 0);
}

/* The tokenizer itself on letters and numbers Unicode 15 added (which PCRE2 10.42's
 * Unicode 14 tables lack): with a vocabulary that has a token for "a" c and for "1" c,
 * each is one token exactly when c is of the class that joins the run (GPT-2's " ?\p{L}+",
 * " ?\p{N}+"); a symbol and a space stay out. */
static void test_tokenizer_joins_letters_and_numbers_of_the_newest_unicode(void **state) {
    (void)state;
    static const struct {
        uint32_t cp;
        char lead;
        bool joins;
    } cases[] = {
        {0x11F04, 'a', true},  /* KAWI LETTER A (Unicode 15) */
        {0x1E4D0, 'a', true},  /* NAG MUNDARI LETTER O (Unicode 15) */
        {0x31350, 'a', true},  /* CJK Extension H's first (Unicode 15) */
        {0x1D2C0, '1', true},  /* KAKTOVIK NUMERAL ZERO (Unicode 15) */
        {0x4E00, 'a', true},   /* CJK: a letter in every version */
        {0x2603, 'a', false},  /* SNOWMAN: a symbol */
        {0x3000, 'a', false},  /* IDEOGRAPHIC SPACE */
        {0x11F04, '1', false}, /* a letter after a digit: two pieces */
    };
    enum { NC = sizeof cases / sizeof cases[0] };
    char *ranks = NULL;
    size_t len = 0;
    for (unsigned b = 0; b < 256; b++) {
        unsigned char byte = (unsigned char)b;
        lb_test_add_rank(&ranks, &len, &byte, 1, b);
    }
    for (unsigned i = 0; i < NC; i++) {
        unsigned char t[8] = {(unsigned char)cases[i].lead};
        lb_test_add_rank(&ranks, &len, t, 1 + lb_test_utf8_of(cases[i].cp, t + 1), 256 + i);
    }
    lb_tokenizer_params p = {.pattern = LB_TOK_PATTERN_GPT2, .special = LB_TOK_SPECIAL_NONE};
    lb_tokenizer *tok = NULL;
    lb_err err = {{0}};
    if (lb_tokenizer_parse(&tok, ranks, len, "new.tiktoken", &p, &err) != LB_OK)
        fail_msg("%s", err.msg);
    int wrong = 0;
    for (unsigned i = 0; i < NC; i++) {
        unsigned char t[8] = {(unsigned char)cases[i].lead};
        size_t n = 1 + lb_test_utf8_of(cases[i].cp, t + 1);
        uint32_t *ids = NULL;
        size_t n_ids = 0;
        if (lb_tokenizer_encode(tok, (const char *)t, n, &ids, &n_ids, &err) != LB_OK)
            fail_msg("%s", err.msg);
        bool joined = n_ids == 1 && ids[0] == 256 + i;
        if (joined != cases[i].joins && wrong++ < 10)
            print_error("'%c' U+%04X: %s, expected %s\n", cases[i].lead, cases[i].cp,
                        joined ? "one piece" : "two pieces", cases[i].joins ? "one" : "two");
        free(ids);
    }
    lb_tokenizer_free(tok);
    free(ranks);
    assert_int_equal(wrong, 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tokenizer_classes_equal_the_unicode_database),
        cmocka_unit_test(test_tokenizer_contractions_fold_case_as_unicode_does),
        cmocka_unit_test(test_tokenizer_joins_letters_and_numbers_of_the_newest_unicode),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
