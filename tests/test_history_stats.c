/* test_history_stats.c: the rank test and the change-point search on data whose answer is
 * known: hand-computed U and p, a planted shift found with its size inside the interval,
 * no shift found between samples of one distribution, one step in a series found at its
 * place and nowhere else, a level that changes and comes back found at both steps, a single
 * outlier not taken for a change, and a change from 0 told without a percentage. */
#include <math.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "core/rng.h"
#include "core/signals.h"
#include "core/stats.h"
#include "history/changepoint.h"
#include "history/history.h"
#include "history/stattest.h"

static void test_mwu_matches_hand_computed_values(void **state) {
    (void)state;
    const double a[] = {1, 2, 3, 4, 5}, b[] = {6, 7, 8, 9, 10};
    lb_mwu_result r;
    lb_err e = {{0}};
    assert_int_equal(lb_stattest_mwu(a, 5, b, 5, 0.95, &r, &e), LB_OK);
    /* every b above every a: U_b = 25; mean 12.5, var 5*5*11/12; z = 12 / sqrt(22.9167) */
    assert_float_equal(r.u, 25.0, 1e-12);
    assert_float_equal(r.z, 12.0 / sqrt(25.0 * 11.0 / 12.0), 1e-9);
    assert_float_equal(r.p, 2.0 / 252, 1e-12); /* exact: 2 of C(10, 5) orderings */
    assert_float_equal(r.shift, 5.0, 1e-12);
    /* ties: one value shared by both sides gets the average rank, and the p-value is the
     * tie-corrected normal one: var 3*3/12 * (7 - 6/30) = 5.1, z = (4 - 0.5) / sqrt(5.1) */
    const double c[] = {1, 2, 3}, d[] = {3, 4, 5};
    assert_int_equal(lb_stattest_mwu(c, 3, d, 3, 0.95, &r, &e), LB_OK);
    assert_float_equal(r.u, 8.5, 1e-12); /* ranks of d: 3.5 + 5 + 6 = 14.5; 14.5 - 6 */
    assert_float_equal(r.p, 2.0 * lb_stattest_normal_sf(3.5 / sqrt(5.1)), 1e-12);
    assert_float_equal(r.p, 0.1212, 1e-4);
    assert_int_equal(lb_stattest_mwu(c, 1, d, 3, 0.95, &r, &e), LB_ERR_USAGE);
    assert_float_equal(lb_stattest_normal_quantile(0.975), 1.959964, 1e-6);
}

/* Below LB_MWU_EXACT_MAX_MN without ties the p-value is the exact one, as the published
 * tables give it (the normal approximation gave 0.081 for 3 against 3 apart, where no
 * ordering can give less than 0.1), and lb_stattest_mwu_min_p is the p of samples apart. */
static void test_mwu_small_samples_give_the_exact_p_value(void **state) {
    (void)state;
    const double x[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11};
    lb_mwu_result r;
    lb_err e = {{0}};
    assert_int_equal(lb_stattest_mwu(x, 3, x + 3, 3, 0.95, &r, &e), LB_OK);
    assert_float_equal(r.p, 2.0 / 20, 1e-12);
    assert_int_equal(lb_stattest_mwu(x + 4, 4, x, 4, 0.95, &r, &e), LB_OK); /* B below */
    assert_float_equal(r.u, 0.0, 1e-12);
    assert_float_equal(r.p, 2.0 / 70, 1e-12);
    assert_int_equal(lb_stattest_mwu(x, 5, x + 5, 6, 0.95, &r, &e), LB_OK);
    assert_float_equal(r.p, 0.004329, 1e-6); /* 2 / 462 */
    /* not apart: U = 15 of 16 for 4 against 4, P(U >= 15) = 2/70 (R's wilcox.test: 0.05714) */
    const double a[] = {1, 2, 3, 5}, b[] = {4, 6, 7, 8};
    assert_int_equal(lb_stattest_mwu(a, 4, b, 4, 0.95, &r, &e), LB_OK);
    assert_float_equal(r.u, 15.0, 1e-12);
    assert_float_equal(r.p, 4.0 / 70, 1e-12);
    /* U at its mean: p = 1 */
    const double c[] = {1, 4, 5, 8}, d[] = {2, 3, 6, 7};
    assert_int_equal(lb_stattest_mwu(c, 4, d, 4, 0.95, &r, &e), LB_OK);
    assert_float_equal(r.u, 8.0, 1e-12);
    assert_float_equal(r.p, 1.0, 1e-12);
    /* the smallest p of each size is what samples apart give, exact or not */
    enum { BIG = 51 };
    static double big[2 * BIG];
    for (size_t i = 0; i < 2 * BIG; i++)
        big[i] = (double)i;
    const size_t sizes[][2] = {{2, 2}, {3, 3}, {4, 5}, {5, 5}, {2, 19}, {50, 50}, {BIG, BIG}};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        size_t m = sizes[i][0], n = sizes[i][1];
        assert_int_equal(lb_stattest_mwu(big, m, big + m, n, 0.95, &r, &e), LB_OK);
        assert_float_equal(lb_stattest_mwu_min_p(m, n), r.p, 1e-12 * r.p);
    }
    assert_float_equal(lb_stattest_mwu_min_p(2, 2), 2.0 / 6, 1e-12);
    /* at alpha 0.01: 5 against 5, 4 against 6, 3 against 9 and 2 against 19 are enough */
    assert_true(lb_stattest_mwu_min_p(5, 5) < 0.01 && lb_stattest_mwu_min_p(4, 5) > 0.01);
    assert_true(lb_stattest_mwu_min_p(4, 6) < 0.01 && lb_stattest_mwu_min_p(3, 8) > 0.01);
    assert_true(lb_stattest_mwu_min_p(3, 9) < 0.01 && lb_stattest_mwu_min_p(2, 18) > 0.01);
    assert_true(lb_stattest_mwu_min_p(2, 19) < 0.01);
    /* past the bound, the normal approximation: z = (51*51/2 - 0.5) / sqrt(51*51*103/12) */
    double z = (BIG * BIG / 2.0 - 0.5) / sqrt(BIG * BIG * (2.0 * BIG + 1.0) / 12.0);
    assert_float_equal(lb_stattest_mwu_min_p(BIG, BIG), 2.0 * lb_stattest_normal_sf(z), 1e-25);
}

static void noisy(double *x, size_t n, double level, double rel_sd, uint64_t seed) {
    lb_rng rng;
    lb_rng_seed(&rng, seed);
    for (size_t i = 0; i < n; i++)
        x[i] = level * (1.0 + rel_sd * lb_rng_normal(&rng));
}

static void test_mwu_finds_planted_10pct_slowdown_and_no_change_in_same_config(void **state) {
    (void)state;
    enum { N = 300 };
    double a[N], b[N], c[N];
    noisy(a, N, 100.0, 0.05, 1);
    noisy(b, N, 110.0, 0.05, 2);
    noisy(c, N, 100.0, 0.05, 3);
    lb_mwu_result r;
    lb_err e = {{0}};
    assert_int_equal(lb_stattest_mwu(a, N, b, N, 0.95, &r, &e), LB_OK);
    assert_true(r.p < 1e-10);
    assert_true(r.lo < 10.0 && r.hi > 10.0);
    assert_true(r.lo > 8.0 && r.hi < 12.0);
    assert_int_equal(lb_stattest_mwu(a, N, c, N, 0.95, &r, &e), LB_OK);
    assert_true(r.p > 0.05);
    assert_true(r.lo < 0.0 && r.hi > 0.0);
    /* thinned interval on long samples still covers the shift */
    enum { M = 5000 };
    static double la[M], lb[M];
    noisy(la, M, 100.0, 0.05, 4);
    noisy(lb, M, 103.0, 0.05, 5);
    assert_int_equal(lb_stattest_mwu(la, M, lb, M, 0.95, &r, &e), LB_OK);
    assert_true(r.lo < 3.0 && r.hi > 3.0);
}

static void test_changepoint_finds_the_one_step_and_no_other(void **state) {
    (void)state;
    enum { N = 40 };
    double x[N];
    noisy(x, N, 100.0, 0.01, 11);
    for (size_t i = 25; i < N; i++)
        x[i] *= 0.93; /* 7% slower throughput from night 25 on */
    lb_changepoint_params p = lb_changepoint_default_params();
    size_t cps[N], n = 0;
    lb_err e = {{0}};
    assert_int_equal(lb_changepoint_find(x, N, &p, cps, &n, N, &e), LB_OK);
    assert_int_equal(n, 1);
    assert_int_equal(cps[0], 25);
}

/* Ctrl-C during the permutation search ends it as interrupted, with no change point (a
 * long history's search took minutes and answered anyway). */
static void test_changepoint_search_stops_on_ctrl_c(void **state) {
    (void)state;
    enum { N = 40 };
    double x[N];
    noisy(x, N, 100.0, 0.01, 11);
    for (size_t i = 25; i < N; i++)
        x[i] *= 0.93;
    lb_changepoint_params p = lb_changepoint_default_params();
    size_t cps[N], n = 7;
    lb_err e = {{0}};
    lb_signals_raise(SIGINT);
    lb_status st = lb_changepoint_find(x, N, &p, cps, &n, N, &e);
    lb_signals_reset();
    assert_int_equal(st, LB_ERR_INTERRUPTED);
    assert_int_equal(n, 0);
    assert_int_equal(lb_changepoint_find(x, N, &p, cps, &n, N, &e), LB_OK);
    assert_int_equal(n, 1);
}

/* With segments of one value allowed, a split whose right side is one value is searched
 * too: the last value, far from the rest, is a change point of its own. */
static void test_changepoint_min_size_one_splits_off_the_last_value(void **state) {
    (void)state;
    enum { N = 9 };
    const double x[N] = {0, 0, 0, 0, 0, 0, 0, 0, 5};
    lb_changepoint_params p = lb_changepoint_default_params();
    p.min_size = 1, p.permutations = 9, p.significance = 1.0;
    size_t cps[N], n = 0;
    lb_err e = {{0}};
    assert_int_equal(lb_changepoint_find(x, N, &p, cps, &n, N, &e), LB_OK);
    bool found = false;
    for (size_t i = 0; i < n; i++)
        found = found || cps[i] == N - 1;
    assert_true(found);
}

static void test_changepoint_ignores_noise_and_one_outlier(void **state) {
    (void)state;
    enum { N = 40 };
    double x[N];
    noisy(x, N, 100.0, 0.02, 21);
    x[17] = 60.0;    /* one bad night */
    x[N - 1] = 60.0; /* and a bad last night */
    lb_changepoint_params p = lb_changepoint_default_params();
    size_t cps[N], n = 0;
    lb_err e = {{0}};
    assert_int_equal(lb_changepoint_find(x, N, &p, cps, &n, N, &e), LB_OK);
    assert_int_equal(n, 0);
}

/* A level that changes and comes back, 100 -> 200 -> 100 ten nights each: the search over
 * the right side's end finds both steps (a search over splits whose right side runs to the
 * end gave p = 0.055 and no change point), and the newest nights' halving is a regression. */
static void test_changepoint_finds_a_change_that_is_undone(void **state) {
    (void)state;
    enum { N = 30 };
    double x[N];
    lb_history_point pts[N];
    for (size_t i = 0; i < N; i++) {
        x[i] = i >= 10 && i < 20 ? 200.0 : 100.0;
        pts[i] = (lb_history_point){(int64_t)i + 1, 86400.0 * (double)i, x[i]};
    }
    lb_changepoint_params p = lb_changepoint_default_params();
    size_t cps[N], n = 0;
    lb_err e = {{0}};
    assert_int_equal(lb_changepoint_find(x, N, &p, cps, &n, N, &e), LB_OK);
    assert_int_equal(n, 2);
    assert_int_equal(cps[0], 10);
    assert_int_equal(cps[1], 20);
    lb_history_change ch[4];
    assert_int_equal(
        lb_history_changes(pts, N, lb_history_metric("train", NULL), 3.0, &p, ch, &n, 4, &e),
        LB_OK);
    assert_int_equal(n, 2);
    assert_int_equal(ch[1].index, 20);
    assert_float_equal(ch[1].change_pct, -50.0, 1e-12);
    assert_true(ch[1].regression);
    assert_string_equal(ch[1].word, "slower");
}

/* A change from 0 (no wrong results, then some) has no percentage: the change is NaN
 * (JSON null), not inf, and reads as the change itself; it is still a big change, "more". */
static void test_history_change_from_zero_reads_as_the_change_itself(void **state) {
    (void)state;
    enum { N = 20, STEP = 12 };
    lb_history_point pts[N];
    for (size_t i = 0; i < N; i++)
        pts[i] = (lb_history_point){(int64_t)i + 1, 86400.0 * (double)i, i < STEP ? 0.0 : 3.0};
    const lb_key_metric *k = lb_history_metric("comm", "wrong_total");
    assert_non_null(k);
    lb_changepoint_params cp = lb_changepoint_default_params();
    lb_history_change ch[4];
    size_t n = 0;
    lb_err e = {{0}};
    assert_int_equal(lb_history_changes(pts, N, k, 5.0, &cp, ch, &n, 4, &e), LB_OK);
    assert_int_equal(n, 1);
    assert_int_equal(ch[0].index, STEP);
    assert_true(isnan(ch[0].change_pct));
    assert_string_equal(ch[0].word, "more");
    char text[48];
    assert_string_equal(lb_history_change_text(&ch[0], text, sizeof text), "+3 from 0");
    /* and back down to 0: -100% */
    for (size_t i = 0; i < N; i++)
        pts[i].value = i < STEP ? 3.0 : 0.0;
    assert_int_equal(lb_history_changes(pts, N, k, 5.0, &cp, ch, &n, 4, &e), LB_OK);
    assert_int_equal(n, 1);
    assert_float_equal(ch[0].change_pct, -100.0, 1e-12);
    assert_string_equal(lb_history_change_text(&ch[0], text, sizeof text), "-100.0%");
    assert_string_equal(ch[0].word, "fewer");
}

/* With more change points than room, the newest are kept: the newest says whether the
 * benchmark regressed (history, the schedule's check, the OpenMetrics gauge). */
static void test_history_changes_beyond_room_keep_the_newest(void **state) {
    (void)state;
    enum { N = 30 };
    lb_history_point pts[N];
    lb_rng rng;
    lb_rng_seed(&rng, 5);
    for (size_t i = 0; i < N; i++) /* 200, then 150 from run 10, then 100 from run 20 */
        pts[i] = (lb_history_point){(int64_t)i + 1, 86400.0 * (double)i,
                                    (i < 10   ? 200.0
                                     : i < 20 ? 150.0
                                              : 100.0) *
                                        (1 + 0.005 * lb_rng_normal(&rng))};
    const lb_key_metric *k = lb_history_metric("train", NULL);
    lb_changepoint_params cp = lb_changepoint_default_params();
    lb_history_change ch[2];
    size_t n = 0;
    lb_err e = {{0}};
    assert_int_equal(lb_history_changes(pts, N, k, 3.0, &cp, ch, &n, 2, &e), LB_OK);
    assert_int_equal(n, 2);
    assert_int_equal(ch[1].index, 20);
    assert_int_equal(lb_history_changes(pts, N, k, 3.0, &cp, ch, &n, 1, &e), LB_OK);
    assert_int_equal(n, 1);
    assert_int_equal(ch[0].index, 20);
    assert_true(ch[0].regression);
    assert_float_equal(ch[0].before, 150.0, 3.0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_mwu_matches_hand_computed_values),
        cmocka_unit_test(test_mwu_small_samples_give_the_exact_p_value),
        cmocka_unit_test(test_mwu_finds_planted_10pct_slowdown_and_no_change_in_same_config),
        cmocka_unit_test(test_changepoint_finds_the_one_step_and_no_other),
        cmocka_unit_test(test_changepoint_search_stops_on_ctrl_c),
        cmocka_unit_test(test_changepoint_min_size_one_splits_off_the_last_value),
        cmocka_unit_test(test_changepoint_ignores_noise_and_one_outlier),
        cmocka_unit_test(test_changepoint_finds_a_change_that_is_undone),
        cmocka_unit_test(test_history_change_from_zero_reads_as_the_change_itself),
        cmocka_unit_test(test_history_changes_beyond_room_keep_the_newest),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
