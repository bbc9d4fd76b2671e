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

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_stats_percentile_interpolates_linearly),
        cmocka_unit_test(test_stats_median_of_odd_and_even_counts),
        cmocka_unit_test(test_stats_summary_matches_hand_values),
        cmocka_unit_test(test_stats_median_ci_is_reproducible_and_brackets_median),
        cmocka_unit_test(test_rng_is_seeded_and_uniform),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
