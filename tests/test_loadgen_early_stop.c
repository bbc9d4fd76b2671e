/* test_loadgen_early_stop.c: MLPerf early stopping against values computed exactly from
 * the binomial formula (rational arithmetic), e.g. h(0) = 459 and h(1) = 661 for p99. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include <cmocka.h>

#include "loadgen/early_stop.h"

static void test_binomial_cdf_matches_exact_sum(void **state) {
    (void)state;
    /* sum_{x<=3} C(100,x) 0.1^x 0.9^(100-x) = 0.0078364871... */
    assert_float_equal(lb_early_stop_binomial_cdf(3, 100, 0.1), 0.007836487121184399, 1e-12);
    assert_float_equal(lb_early_stop_binomial_cdf(0, 10, 0.5), 1.0 / 1024.0, 1e-15);
    assert_float_equal(lb_early_stop_binomial_cdf(10, 10, 0.5), 1.0, 0.0);
    assert_float_equal(lb_early_stop_binomial_cdf(-1, 10, 0.5), 0.0, 0.0);
}

static void test_early_stop_min_passing_p99_matches_formula(void **state) {
    (void)state;
    /* Smallest h with P(Binomial(h + t, 0.01) <= t) < 0.01. */
    assert_int_equal(lb_early_stop_min_passing(0, 0.99, 0.99), 459);
    assert_int_equal(lb_early_stop_min_passing(1, 0.99, 0.99), 661);
    assert_int_equal(lb_early_stop_min_passing(2, 0.99, 0.99), 836);
    assert_int_equal(lb_early_stop_min_passing(5, 0.99, 0.99), 1302);
    assert_int_equal(lb_early_stop_min_passing(10, 0.99, 0.99), 2000);
}

static void test_early_stop_min_passing_p90_matches_formula(void **state) {
    (void)state;
    assert_int_equal(lb_early_stop_min_passing(1, 0.90, 0.99), 63);
    assert_int_equal(lb_early_stop_min_passing(2, 0.90, 0.99), 79);
    assert_int_equal(lb_early_stop_min_passing(3, 0.90, 0.99), 94);
}

static void test_early_stop_server_needs_662_queries_with_one_miss(void **state) {
    (void)state;
    double *lat = calloc(700, sizeof *lat);
    for (int i = 0; i < 700; i++)
        lat[i] = 100.0;
    lat[5] = 5000.0; /* one query over the 2000 ms bound */
    lb_early_stop ok = lb_early_stop_check(lat, 662, 2000.0, 0.99, 0.99);
    assert_true(ok.ok);
    assert_int_equal(ok.t, 1);
    assert_int_equal(ok.needed, 662);
    lb_early_stop short_run = lb_early_stop_check(lat, 661, 2000.0, 0.99, 0.99);
    assert_false(short_run.ok);
    assert_int_equal(short_run.needed, 662);
    /* A failed query counts as over the bound. */
    lat[6] = INFINITY;
    lb_early_stop two = lb_early_stop_check(lat, 700, 2000.0, 0.99, 0.99);
    assert_int_equal(two.t, 2);
    assert_int_equal(two.needed, 838);
    assert_false(two.ok);
    free(lat);
}

static void test_early_stop_estimate_discards_the_allowed_tail(void **state) {
    (void)state;
    double sorted[100];
    for (int i = 0; i < 100; i++)
        sorted[i] = i + 1;
    /* p90: h(t)+t = 64, 81, 97, 113: with 100 queries t = 3, estimate sorted[97] = 98; any
     * estimate needs h(1)+1 = 64 queries (LoadGen's "Processed at least 64 queries"). */
    lb_early_stop e = lb_early_stop_estimate(sorted, 100, 0.90, 0.99);
    assert_true(e.ok);
    assert_int_equal(e.t, 3);
    assert_int_equal(e.needed, 64);
    assert_float_equal(e.estimate, 98.0, 0.0);
    lb_early_stop few = lb_early_stop_estimate(sorted, 63, 0.90, 0.99);
    assert_false(few.ok);
    assert_int_equal(few.needed, 64);
    assert_true(isnan(few.estimate));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_binomial_cdf_matches_exact_sum),
        cmocka_unit_test(test_early_stop_min_passing_p99_matches_formula),
        cmocka_unit_test(test_early_stop_min_passing_p90_matches_formula),
        cmocka_unit_test(test_early_stop_server_needs_662_queries_with_one_miss),
        cmocka_unit_test(test_early_stop_estimate_discards_the_allowed_tail),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
