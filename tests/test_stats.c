/* test_stats.c: summary statistics against values computed by hand (and by numpy's
 * default linear percentile, worked out below). */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "core/rng.h"
#include "core/stats.h"

static const double one_to_ten[] = {10, 3, 7, 1, 5, 2, 9, 4, 8, 6}; /* 1..10 shuffled */

/* LoadGen's percentile is the sample at floor(n p): 1..10 at p90 is x[9] = 10, at p50 x[5] =
 * 6, at p99 x[9]; 1..100 at p99 x[99] = 100, at p90 x[90] = 91. */
static void test_stats_percentile_rank_is_loadgens_sample(void **state) {
    (void)state;
    double x[100];
    for (int i = 0; i < 100; i++)
        x[i] = i + 1;
    assert_float_equal(lb_stats_percentile_rank_sorted(x, 10, 90), 10.0, 0);
    assert_float_equal(lb_stats_percentile_rank_sorted(x, 10, 50), 6.0, 0);
    assert_float_equal(lb_stats_percentile_rank_sorted(x, 10, 99), 10.0, 0);
    assert_float_equal(lb_stats_percentile_rank_sorted(x, 100, 99), 100.0, 0);
    assert_float_equal(lb_stats_percentile_rank_sorted(x, 100, 90), 91.0, 0);
    assert_float_equal(lb_stats_percentile_rank_sorted(x, 100, 0), 1.0, 0);
    assert_float_equal(lb_stats_percentile_rank_sorted(x, 100, 100), 100.0, 0);
    assert_true(isnan(lb_stats_percentile_rank_sorted(NULL, 0, 50)));
}

static void test_stats_percentile_interpolates_linearly(void **state) {
    (void)state;
    /* sorted 1..10, h = 9q/100: q=90 -> h=8.1 -> 9 + 0.1*(10-9) = 9.1 */
    assert_float_equal(lb_stats_percentile(one_to_ten, 10, 90), 9.1, 1e-12);
    /* q=25 -> h=2.25 -> 3 + 0.25 = 3.25 */
    assert_float_equal(lb_stats_percentile(one_to_ten, 10, 25), 3.25, 1e-12);
    /* q=99.9 -> h=8.991 -> 9.991 */
    assert_float_equal(lb_stats_percentile(one_to_ten, 10, 99.9), 9.991, 1e-12);
    assert_float_equal(lb_stats_percentile(one_to_ten, 10, 0), 1.0, 0);
    assert_float_equal(lb_stats_percentile(one_to_ten, 10, 100), 10.0, 0);
    double single = 42.0;
    assert_float_equal(lb_stats_percentile(&single, 1, 99), 42.0, 0);
    assert_true(isnan(lb_stats_percentile(NULL, 0, 50)));
}

static void test_stats_median_of_odd_and_even_counts(void **state) {
    (void)state;
    const double odd[] = {3, 1, 2}, even[] = {4, 1, 3, 2};
    assert_float_equal(lb_stats_median(odd, 3), 2.0, 0);
    assert_float_equal(lb_stats_median(even, 4), 2.5, 0);
}

static void test_stats_summary_matches_hand_values(void **state) {
    (void)state;
    lb_stats_summary s = lb_stats_summarize(one_to_ten, 10);
    assert_int_equal(s.n, 10);
    assert_float_equal(s.mean, 5.5, 1e-12);
    assert_float_equal(s.median, 5.5, 1e-12);
    /* sum of squared deviations = 82.5; / 9 = 9.1666...; sqrt = 3.0276503540974917 */
    assert_float_equal(s.std, 3.0276503540974917, 1e-12);
    assert_float_equal(s.min, 1.0, 0);
    assert_float_equal(s.max, 10.0, 0);
    lb_stats_summary one = lb_stats_summarize(one_to_ten, 1);
    assert_float_equal(one.std, 0.0, 0);
}

static void test_stats_median_ci_is_reproducible_and_brackets_median(void **state) {
    (void)state;
    double x[200];
    lb_rng rng;
    lb_rng_seed(&rng, 7);
    for (int i = 0; i < 200; i++)
        x[i] = 100.0 + 10.0 * lb_rng_normal(&rng);
    double lo1, hi1, lo2, hi2;
    lb_stats_median_ci(x, 200, 1000, 0.95, 1234, &lo1, &hi1);
    lb_stats_median_ci(x, 200, 1000, 0.95, 1234, &lo2, &hi2);
    assert_float_equal(lo1, lo2, 0);
    assert_float_equal(hi1, hi2, 0);
    double med = lb_stats_median(x, 200);
    assert_true(lo1 < med && med < hi1);
    /* The CI of a median of 200 normal samples with sd 10 is about +-1.8 wide. */
    assert_true(hi1 - lo1 > 0.5 && hi1 - lo1 < 8.0);
    const double same[] = {5, 5, 5, 5};
    lb_stats_median_ci(same, 4, 100, 0.95, 1, &lo1, &hi1);
    assert_float_equal(lo1, 5.0, 0);
    assert_float_equal(hi1, 5.0, 0);
}

/* The interval's level and the resampling range, against values worked out by hand. A
 * resample of {1, 2, 3} has median 1 with probability 7/27 (two or three draws of 1),
 * 3 with 7/27 and 2 with 13/27. Sorted bootstrap medians: about 26% ones, 48% twos, 26%
 * threes; so the 95% interval's ends (2.5% and 97.5%) are exactly 1 and 3, the 20%
 * interval's (40% and 60%) exactly 2 and 2, the 60% interval's (20% and 80%) 1 and 3. A
 * draw that never reached the last index would put 3 out of every resample (upper end
 * 2); a level applied the wrong way round would swap the 20% and 60% answers. */
static void test_stats_median_ci_level_and_resampling_range_by_hand(void **state) {
    (void)state;
    const double x[] = {3, 1, 2};
    double lo, hi;
    lb_stats_median_ci(x, 3, 20000, 0.95, 9, &lo, &hi);
    assert_float_equal(lo, 1.0, 0);
    assert_float_equal(hi, 3.0, 0);
    lb_stats_median_ci(x, 3, 20000, 0.20, 9, &lo, &hi);
    assert_float_equal(lo, 2.0, 0);
    assert_float_equal(hi, 2.0, 0);
    lb_stats_median_ci(x, 3, 20000, 0.60, 9, &lo, &hi);
    assert_float_equal(lo, 1.0, 0);
    assert_float_equal(hi, 3.0, 0);
    /* Two values: a resample's median is 10 (1/4), 15 (1/2) or 20 (1/4); at 40% the ends
     * are the 30% and 70% points: 15 and 15. */
    const double y[] = {10, 20};
    lb_stats_median_ci(y, 2, 20000, 0.40, 3, &lo, &hi);
    assert_float_equal(lo, 15.0, 0);
    assert_float_equal(hi, 15.0, 0);
}

static void test_rng_is_seeded_and_uniform(void **state) {
    (void)state;
    lb_rng a, b;
    lb_rng_seed(&a, 99);
    lb_rng_seed(&b, 99);
    for (int i = 0; i < 100; i++)
        assert_int_equal(lb_rng_next(&a), lb_rng_next(&b));
    int counts[10] = {0};
    for (int i = 0; i < 100000; i++)
        counts[lb_rng_below(&a, 10)]++;
    for (int k = 0; k < 10; k++)
        assert_in_range(counts[k], 9500, 10500);
    double s = 0, ss = 0;
    for (int i = 0; i < 100000; i++) {
        double z = lb_rng_normal(&a);
        s += z;
        ss += z * z;
    }
    assert_float_equal(s / 100000, 0.0, 0.02);
    assert_float_equal(ss / 100000, 1.0, 0.02);
}

/* Gamma(k, 1) has mean k and variance k, for shapes below and above 1. */
static void test_stats_gamma_has_mean_and_variance_of_its_shape(void **state) {
    (void)state;
    const double shapes[] = {0.25, 1.0, 4.0};
    for (int c = 0; c < 3; c++) {
        lb_rng rng;
        lb_rng_seed(&rng, 11 + (uint64_t)c);
        double s = 0, ss = 0;
        enum { N = 200000 };
        for (int i = 0; i < N; i++) {
            double g = lb_rng_gamma(&rng, shapes[c]);
            assert_true(g >= 0);
            s += g;
            ss += g * g;
        }
        double mean = s / N, var = ss / N - mean * mean;
        assert_float_equal(mean, shapes[c], 0.02 * shapes[c] + 0.005);
        assert_float_equal(var, shapes[c], 0.05 * shapes[c] + 0.01);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_stats_percentile_interpolates_linearly),
        cmocka_unit_test(test_stats_percentile_rank_is_loadgens_sample),
        cmocka_unit_test(test_stats_gamma_has_mean_and_variance_of_its_shape),
        cmocka_unit_test(test_stats_median_ci_level_and_resampling_range_by_hand),
        cmocka_unit_test(test_stats_median_of_odd_and_even_counts),
        cmocka_unit_test(test_stats_summary_matches_hand_values),
        cmocka_unit_test(test_stats_median_ci_is_reproducible_and_brackets_median),
        cmocka_unit_test(test_rng_is_seeded_and_uniform),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
