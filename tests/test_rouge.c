/* test_rouge.c: ROUGE-1/2/L/Lsum on hand-computed pairs, rouge_score's own published test
 * cases, the MLPerf aggregate and verdict, and exact agreement with the Python oracle
 * (tools/rouge_oracle.py, NLTK's stemmer) on a random corpus of 300 pairs. */
#include <jansson.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "accuracy/rouge.h"
#include "core/rng.h"

/* rouge_score's scorer on the texts as given (no MLPerf sentence splitting). */
static lb_rouge_scores score_raw(const char *pred, const char *ref, bool stem) {
    lb_rouge_params p = lb_rouge_default_params();
    p.mlperf_postprocess = false;
    p.use_stemmer = stem;
    lb_rouge_scores s;
    lb_err err;
    assert_int_equal(lb_rouge_score_pair(&p, pred, ref, &s, &err), LB_OK);
    return s;
}

static void expect_prf(lb_rouge_prf got, double p, double r, double f) {
    if (fabs(got.precision - p) > 1e-12 || fabs(got.recall - r) > 1e-12 || fabs(got.f - f) > 1e-12)
        fail_msg("got P %.15g R %.15g F %.15g, expected P %.15g R %.15g F %.15g", got.precision,
                 got.recall, got.f, p, r, f);
}

/* ref "the cat sat on the mat", pred "the cat was on the mat": 6 tokens each, none longer
 * than 3 characters (nothing to stem).
 *   rouge1: ref {the:2 cat sat on mat}, pred {the:2 cat was on mat}: overlap 2+1+1+1 = 5,
 *           P = R = F = 5/6.
 *   rouge2: ref pairs the-cat cat-sat sat-on on-the the-mat, pred the-cat cat-was was-on
 *           on-the the-mat: overlap 3 of 5 each, P = R = F = 3/5.
 *   rougeL: LCS "the cat on the mat" = 5, P = R = F = 5/6.
 *   rougeLsum: one sentence each, so the union LCS is that LCS: 5 hits, 5/6. */
static void test_rouge_hand_computed_word_overlap(void **state) {
    (void)state;
    lb_rouge_scores s = score_raw("the cat was on the mat", "the cat sat on the mat", true);
    expect_prf(s.s[LB_ROUGE_1], 5.0 / 6, 5.0 / 6, 5.0 / 6);
    expect_prf(s.s[LB_ROUGE_2], 3.0 / 5, 3.0 / 5, 3.0 / 5);
    expect_prf(s.s[LB_ROUGE_L], 5.0 / 6, 5.0 / 6, 5.0 / 6);
    expect_prf(s.s[LB_ROUGE_LSUM], 5.0 / 6, 5.0 / 6, 5.0 / 6);
}

/* ref "Police were investigating the shootings" -> polic were investig the shoot (5)
 * pred "police investigated a shooting"          -> polic investig a shoot (4)
 *   rouge1: overlap polic investig shoot = 3: P = 3/4, R = 3/5,
 *           F = 2 (3/4)(3/5) / (3/4 + 3/5) = 0.9 / 1.35 = 2/3.
 *   rouge2: ref pairs polic-were were-investig investig-the the-shoot, pred polic-investig
 *           investig-a a-shoot: no overlap, 0.
 *   rougeL: LCS polic investig shoot = 3, same P, R, F as rouge1.
 * Without the stemmer only "police" matches: P = 1/4, R = 1/5, F = (2/20) / (9/20) = 2/9. */
static void test_rouge_hand_computed_stemming(void **state) {
    (void)state;
    const char *ref = "Police were investigating the shootings";
    const char *pred = "police investigated a shooting";
    lb_rouge_scores s = score_raw(pred, ref, true);
    expect_prf(s.s[LB_ROUGE_1], 3.0 / 4, 3.0 / 5, 2.0 / 3);
    expect_prf(s.s[LB_ROUGE_2], 0, 0, 0);
    expect_prf(s.s[LB_ROUGE_L], 3.0 / 4, 3.0 / 5, 2.0 / 3);
    expect_prf(s.s[LB_ROUGE_LSUM], 3.0 / 4, 3.0 / 5, 2.0 / 3);
    s = score_raw(pred, ref, false);
    expect_prf(s.s[LB_ROUGE_1], 1.0 / 4, 1.0 / 5, 2.0 / 9);
}

/* The summary-level example of Lin (2004), section 3.2, as in rouge_score's tests:
 * ref "w1 w2 w3 w4 w5", pred "w1 w2 w6 w7 w8\nw1 w3 w8 w9 w5".
 *   rougeLsum: LCS with line 1 = w1 w2 (positions 0,1), with line 2 = w1 w3 w5 (0,2,4);
 *              union {0,1,2,4} = w1 w2 w3 w5, all with unused occurrences: 4 hits;
 *              R = 4/5, P = 4/10, F = 2 (0.4)(0.8) / 1.2 = 8/15.
 *   rougeL:    the whole prediction's LCS is also w1 w2 w3 w5: the same 4/10, 4/5, 8/15.
 *   rouge1:    overlap w1 w2 w3 w5 = 4: the same.
 *   rouge2:    ref pairs 4, pred pairs 9, overlap w1-w2 only: P = 1/9, R = 1/4,
 *              F = 2 (1/36) / (13/36) = 2/13. */
static void test_rouge_hand_computed_summary_level_lcs(void **state) {
    (void)state;
    lb_rouge_scores s = score_raw("w1 w2 w6 w7 w8\nw1 w3 w8 w9 w5", "w1 w2 w3 w4 w5", true);
    expect_prf(s.s[LB_ROUGE_LSUM], 0.4, 0.8, 8.0 / 15);
    expect_prf(s.s[LB_ROUGE_L], 0.4, 0.8, 8.0 / 15);
    expect_prf(s.s[LB_ROUGE_1], 0.4, 0.8, 8.0 / 15);
    expect_prf(s.s[LB_ROUGE_2], 1.0 / 9, 1.0 / 4, 2.0 / 13);
}

/* ref "a b\na b", pred "a b": the union LCS of each reference line is {a, b}, but the
 * prediction has one a and one b: line 1 takes both (2 hits), line 2 finds none left.
 *   rougeLsum: m = 4, n = 2, hits 2: P = 1, R = 1/2, F = 1 / 1.5 = 2/3 (counting every
 *              union token would give 4 hits and P = 2).
 *   rougeL:    LCS of "a b a b" and "a b" = 2: the same 1, 1/2, 2/3. */
static void test_rouge_lsum_counts_each_token_once(void **state) {
    (void)state;
    lb_rouge_scores s = score_raw("a b", "a b\na b", true);
    expect_prf(s.s[LB_ROUGE_LSUM], 1, 0.5, 2.0 / 3);
    expect_prf(s.s[LB_ROUGE_L], 1, 0.5, 2.0 / 3);
}

/* ref "a b", pred "b a\nb". Line "b a" has two LCSs of length 1 (a or b). rouge_score's
 * backtrack starts at the corner: b != a, left (1) is not larger than up (1), so it goes
 * up and takes a (position 0). Line "b" gives position 1. Union {0,1}: 2 hits,
 *   P = 2/3, R = 2/2 = 1, F = 2 (2/3) / (5/3) = 4/5.
 * Had the tie gone the other way, the union would be {1}: F = 0.4. */
static void test_rouge_lsum_breaks_lcs_ties_like_rouge_score(void **state) {
    (void)state;
    lb_rouge_scores s = score_raw("b a\nb", "a b", true);
    expect_prf(s.s[LB_ROUGE_LSUM], 2.0 / 3, 1, 0.8);
}

/* rouge_score's own tests (rouge_scorer_test.py). */
static void test_rouge_matches_rouge_score_unit_tests(void **state) {
    (void)state;
    lb_rouge_scores s = score_raw("testing", "testing one two", false);
    expect_prf(s.s[LB_ROUGE_1], 1, 1.0 / 3, 0.5);
    s = score_raw("testing one", "testing one two", false);
    expect_prf(s.s[LB_ROUGE_2], 1, 0.5, 2.0 / 3);
    expect_prf(s.s[LB_ROUGE_L], 1, 2.0 / 3, 0.8);
    s = score_raw("testing two", "testing one two", false);
    expect_prf(s.s[LB_ROUGE_L], 1, 2.0 / 3, 0.8);
    /* empty or all-punctuation predictions and empty references score 0 */
    const char *cases[][2] = {{"", "testing one two"}, {"/", "w1 w2 w3 w4 w5"}, {"w1", ""}};
    for (size_t i = 0; i < 3; i++) {
        s = score_raw(cases[i][0], cases[i][1], true);
        for (int t = 0; t < LB_ROUGE_N_TYPES; t++)
            expect_prf(s.s[t], 0, 0, 0);
    }
}

/* Python's lower() maps U+212A KELVIN SIGN to "k" and U+0130 to "i" plus a combining dot
 * (a separator); every other non-ASCII character separates tokens. */
static void test_rouge_tokenizer_follows_python_lower(void **state) {
    (void)state;
    lb_rouge_scores s =
        score_raw("\u212Aelvin \u0130stanbul caf\u00e9", "kelvin i stanbul caf", true);
    expect_prf(s.s[LB_ROUGE_1], 1, 1, 1);
    expect_prf(s.s[LB_ROUGE_2], 1, 1, 1);
    s = score_raw("na\u00efve", "na ve", true);
    expect_prf(s.s[LB_ROUGE_1], 1, 1, 1);
}

/* With MLPerf's postprocessing the prediction is stripped and split into lines; gen_len
 * counts characters of that text: "Hi there.\nBye \u00e9." is 9 + 1 + 6 = 16. */
static void test_rouge_pred_chars_count_postprocessed_code_points(void **state) {
    (void)state;
    lb_rouge_params p = lb_rouge_default_params();
    lb_rouge_scores s;
    assert_int_equal(lb_rouge_score_pair(&p, "  Hi there.  Bye \u00e9. \n", "Hi.", &s, NULL),
                     LB_OK);
    assert_int_equal(s.pred_chars, 16);
    p.mlperf_postprocess = false;
    assert_int_equal(lb_rouge_score_pair(&p, "  Hi there.  Bye \u00e9. \n", "Hi.", &s, NULL),
                     LB_OK);
    assert_int_equal(s.pred_chars, 21);
}

/* Aggregate: two samples with rouge1 F 1 and 1/2 average to 75 (x 100). */
static void test_rouge_acc_means_f_measures_times_100(void **state) {
    (void)state;
    lb_rouge_params p = lb_rouge_default_params();
    lb_rouge_acc acc;
    lb_rouge_acc_init(&acc, &p);
    lb_err err;
    lb_rouge_scores one;
    assert_int_equal(lb_rouge_acc_add(&acc, "a b c", "a b c", &one, &err), LB_OK);
    assert_true(one.s[LB_ROUGE_1].f == 1.0);
    assert_int_equal(lb_rouge_acc_add(&acc, "testing", "testing one two", NULL, &err), LB_OK);
    lb_rouge_summary sum = lb_rouge_acc_finish(&acc);
    assert_int_equal(sum.gen_num, 2);
    assert_int_equal(sum.gen_len, 5 + 7);
    assert_true(fabs(sum.score[LB_ROUGE_1] - 75.0) < 1e-12);
    lb_result *r = lb_result_new("load", "t");
    assert_int_equal(lb_rouge_add_to_result(&acc, NULL, true, r), LB_OK);
    assert_true(fabs(lb_result_metric(r, "rouge1") - 75.0) < 1e-12);
    assert_true(lb_result_metric(r, "gen_num") == 2.0);
    const lb_series *series = lb_result_find_series(r, "rouge1_f");
    assert_non_null(series);
    assert_int_equal(series->n, 2);
    assert_true(series->values[1] == 0.5);
    lb_result_free(r);
    lb_rouge_acc_free(&acc);
    lb_rouge_acc_free(NULL);
}

/* The mean is np.mean's: 13,368 F-measures (MLPerf's sample count) of 1, 2/3, 2/5 and 1/3
 * summed pairwise in 8192-value blocks give 56.666666666666664 x 100 as numpy does; a
 * running sum gives a different last bit, and so does one pairwise sum over all values. */
static void test_rouge_acc_mean_is_numpy_mean(void **state) {
    (void)state;
    /* "a" against "a" and m more words: rouge1 F = 2 / (m + 2), m = i * i % 6 in {0, 1, 3, 4} */
    static const char *const refs[] = {"a", "a b", "a b c", "a b c d", "a b c d e", "a b c d e f"};
    lb_rouge_params p = lb_rouge_default_params();
    lb_rouge_acc acc;
    lb_rouge_acc_init(&acc, &p);
    for (int i = 0; i < 13368; i++)
        assert_int_equal(lb_rouge_acc_add(&acc, "a", refs[i * i % 6], NULL, NULL), LB_OK);
    lb_rouge_summary sum = lb_rouge_acc_finish(&acc);
    if (sum.score[LB_ROUGE_1] != 56.666666666666664)
        fail_msg("rouge1 %.17g, np.mean gives 56.666666666666664", sum.score[LB_ROUGE_1]);
    lb_rouge_acc_free(&acc);
}

/* MLPerf rounds with round() on a numpy float64: numpy's scale, round half to even, scale
 * back. 15.74845 * 10^4 is 157484.5 in doubles, so it rounds down to 15.7484, below rouge2's
 * limit 15.748425, although its exact binary value lies above the half (Python's round of a
 * float, and printf, give 15.7485). */
static void test_rouge_check_rounds_like_numpy(void **state) {
    (void)state;
    assert_true(lb_rouge_round(59.68535) == 59.6854);
    assert_true(lb_rouge_round(15.74845) == 15.7484);
    assert_true(lb_rouge_round(0.78125) == 0.7812); /* an exact half goes to even */
    assert_true(lb_rouge_round(38.39145000001) == 38.3915);
    lb_rouge_targets t = lb_rouge_targets_mlperf_llama31_8b();
    lb_rouge_summary s = {.gen_num = 13368,
                          .gen_len = 8167644,
                          .score[LB_ROUGE_1] = 38.8,
                          .score[LB_ROUGE_2] = 15.74845,
                          .score[LB_ROUGE_L] = 24.5,
                          .score[LB_ROUGE_LSUM] = 35.8};
    lb_rouge_verdict v = lb_rouge_check(&s, &t);
    assert_false(v.score_ok[LB_ROUGE_2]);
    assert_false(v.pass);
}

/* MLPerf's limits: 99% of each reference score (compared after rounding to 4 decimals),
 * gen_len in [0.9, 1.1] x 8,167,644. */
static void test_rouge_check_applies_mlperf_targets(void **state) {
    (void)state;
    lb_rouge_targets t = lb_rouge_targets_mlperf_llama31_8b();
    assert_true(fabs(t.score_min[LB_ROUGE_1] - 38.391408) < 1e-9);
    assert_true(fabs(t.score_min[LB_ROUGE_LSUM] - 35.43507) < 1e-9);
    lb_rouge_summary s = {.gen_num = 13368,
                          .gen_len = 8167644,
                          .score[LB_ROUGE_1] = 38.8,
                          .score[LB_ROUGE_2] = 15.95,
                          .score[LB_ROUGE_L] = 24.5,
                          .score[LB_ROUGE_LSUM] = 35.8};
    lb_rouge_verdict v = lb_rouge_check(&s, &t);
    assert_true(v.pass);
    s.score[LB_ROUGE_2] = 15.7; /* below 15.748425 */
    s.gen_len = 9000000;        /* above 8,984,408.4 */
    v = lb_rouge_check(&s, &t);
    assert_false(v.pass);
    assert_false(v.score_ok[LB_ROUGE_2]);
    assert_true(v.score_ok[LB_ROUGE_1]);
    assert_false(v.gen_len_ok);
    s.gen_len = 7350880;            /* just above 7,350,879.6 */
    s.score[LB_ROUGE_2] = 15.74839; /* rounds to 15.7484, below the limit */
    v = lb_rouge_check(&s, &t);
    assert_true(v.gen_len_ok);
    assert_false(v.score_ok[LB_ROUGE_2]);
}

static void expect_oracle_prf(json_t *rec, const char *key, lb_rouge_prf got, int line) {
    json_t *a = json_object_get(rec, key);
    assert_non_null(a);
    double p = json_number_value(json_array_get(a, 0)), r = json_number_value(json_array_get(a, 1)),
           f = json_number_value(json_array_get(a, 2));
    if (got.precision != p || got.recall != r || got.f != f)
        fail_msg("oracle line %d %s: got P %.17g R %.17g F %.17g, oracle P %.17g R %.17g F %.17g",
                 line, key, got.precision, got.recall, got.f, p, r, f);
}

/* Every pair of the oracle corpus, bit for bit, and the corpus mean. */
static void test_rouge_matches_oracle_exactly(void **state) {
    (void)state;
    const char *path = LB_TEST_FIXTURES "/rouge/oracle.jsonl";
    FILE *f = fopen(path, "r");
    if (f == NULL) fail_msg("cannot open %s", path);
    lb_rouge_params p = lb_rouge_default_params();
    p.mlperf_postprocess = false;
    lb_rouge_acc acc;
    lb_rouge_acc_init(&acc, &p);
    double sum_f[LB_ROUGE_N_TYPES] = {0};
    char line[1 << 16];
    int n = 0;
    while (fgets(line, sizeof line, f)) {
        n++;
        json_error_t je;
        json_t *rec = json_loads(line, 0, &je);
        if (rec == NULL) fail_msg("%s:%d: %s", path, n, je.text);
        const char *pred = json_string_value(json_object_get(rec, "prediction"));
        const char *ref = json_string_value(json_object_get(rec, "reference"));
        lb_rouge_scores s;
        lb_err err;
        assert_int_equal(lb_rouge_acc_add(&acc, pred, ref, &s, &err), LB_OK);
        for (int t = 0; t < LB_ROUGE_N_TYPES; t++) {
            expect_oracle_prf(rec, lb_rouge_type_name((lb_rouge_type)t), s.s[t], n);
            sum_f[t] += json_number_value(
                json_array_get(json_object_get(rec, lb_rouge_type_name((lb_rouge_type)t)), 2));
        }
        json_decref(rec);
    }
    fclose(f);
    assert_int_equal(n, 300);
    lb_rouge_summary sum = lb_rouge_acc_finish(&acc);
    for (int t = 0; t < LB_ROUGE_N_TYPES; t++)
        assert_true(fabs(sum.score[t] - sum_f[t] / n * 100) < 1e-9);
    /* the corpus is not degenerate: sentences split differently from whole texts */
    assert_true(sum.score[LB_ROUGE_LSUM] != sum.score[LB_ROUGE_L]);
    lb_rouge_acc_free(&acc);
}

/* Random bytes (malformed UTF-8, punctuation, line breaks, long y-runs) never break the
 * scorer: every score stays in [0, 1], identical texts score 1 unless they have no token,
 * and a prediction has at most as many characters as bytes. */
static void test_rouge_random_bytes_stay_in_range(void **state) {
    (void)state;
    static const char alphabet[] =
        "aeiouyYbcdlst .!?\n\t\"'(),0123456789\xc4\xb0\xe2\x84\xaa\xff\x80";
    lb_rng rng;
    lb_rng_seed(&rng, 42);
    char pred[300], ref[300];
    for (int iter = 0; iter < 2000; iter++) {
        size_t np = lb_rng_below(&rng, sizeof pred), nr = lb_rng_below(&rng, sizeof ref);
        for (size_t i = 0; i < np; i++)
            pred[i] = alphabet[lb_rng_below(&rng, sizeof alphabet - 1)];
        for (size_t i = 0; i < nr; i++)
            ref[i] = alphabet[lb_rng_below(&rng, sizeof alphabet - 1)];
        pred[np] = ref[nr] = '\0';
        lb_rouge_params p = lb_rouge_default_params();
        p.mlperf_postprocess = iter % 2 == 0;
        lb_rouge_scores s;
        assert_int_equal(lb_rouge_score_pair(&p, pred, ref, &s, NULL), LB_OK);
        assert_true(s.pred_chars >= 0 && s.pred_chars <= (int64_t)np);
        for (int t = 0; t < LB_ROUGE_N_TYPES; t++) {
            assert_true(s.s[t].precision >= 0 && s.s[t].precision <= 1);
            assert_true(s.s[t].recall >= 0 && s.s[t].recall <= 1);
            assert_true(s.s[t].f >= 0 && s.s[t].f <= 1);
        }
        assert_int_equal(lb_rouge_score_pair(&p, pred, pred, &s, NULL), LB_OK);
        assert_true(s.s[LB_ROUGE_1].f == 1.0 || s.s[LB_ROUGE_1].f == 0.0);
        assert_true(s.s[LB_ROUGE_LSUM].f == s.s[LB_ROUGE_1].f);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rouge_hand_computed_word_overlap),
        cmocka_unit_test(test_rouge_hand_computed_stemming),
        cmocka_unit_test(test_rouge_hand_computed_summary_level_lcs),
        cmocka_unit_test(test_rouge_lsum_counts_each_token_once),
        cmocka_unit_test(test_rouge_lsum_breaks_lcs_ties_like_rouge_score),
        cmocka_unit_test(test_rouge_matches_rouge_score_unit_tests),
        cmocka_unit_test(test_rouge_tokenizer_follows_python_lower),
        cmocka_unit_test(test_rouge_pred_chars_count_postprocessed_code_points),
        cmocka_unit_test(test_rouge_acc_means_f_measures_times_100),
        cmocka_unit_test(test_rouge_acc_mean_is_numpy_mean),
        cmocka_unit_test(test_rouge_check_applies_mlperf_targets),
        cmocka_unit_test(test_rouge_check_rounds_like_numpy),
        cmocka_unit_test(test_rouge_matches_oracle_exactly),
        cmocka_unit_test(test_rouge_random_bytes_stay_in_range),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
