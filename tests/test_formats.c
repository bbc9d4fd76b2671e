/* test_formats.c: how figures read for people: the time left on a progress line and FLOP
 * rates with the SI prefix that keeps them below 1000. */
/* cmocka.h needs these four first. */
/* clang-format off */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
/* clang-format on */

#include <math.h>
#include <string.h>

#include "cli/output.h"
#include "core/progress.h"

static void test_progress_eta_is_what_is_left_over_the_rate(void **state) {
    (void)state;
    assert_float_equal(lb_progress_eta_s(90, 3), 30.0, 1e-12);
    assert_float_equal(lb_progress_eta_s(1, 4), 0.25, 1e-12);
    assert_float_equal(lb_progress_eta_s(0, 3), 0.0, 0);
    assert_float_equal(lb_progress_eta_s(-5, 3), 0.0, 0);
    assert_true(isnan(lb_progress_eta_s(10, 0)));
    assert_true(isnan(lb_progress_eta_s(10, -1)));
    assert_true(isnan(lb_progress_eta_s(10, NAN)));
    assert_true(isnan(lb_progress_eta_s(10, INFINITY)));
}

static void expect_eta(double s, const char *want) {
    char buf[32];
    lb_progress_format_eta(buf, sizeof buf, s);
    assert_string_equal(buf, want);
}

static void test_progress_eta_reads_in_hours_minutes_and_seconds(void **state) {
    (void)state;
    expect_eta(0, "0 s");
    expect_eta(42.4, "42 s");
    expect_eta(59.6, "1 min 00 s");
    expect_eta(725, "12 min 05 s");
    expect_eta(3599.4, "59 min 59 s");
    expect_eta(11220, "3 h 07 min");
    expect_eta(200000, "55 h 33 min");
    expect_eta(NAN, "?");
    expect_eta(-1, "?");
}

static void expect_shown(double value, const char *unit, const char *want) {
    char buf[64];
    lb_output_format_value(buf, sizeof buf, value, unit);
    assert_string_equal(buf, want);
}

static void test_output_flop_rates_take_the_prefix_that_keeps_them_below_1000(void **state) {
    (void)state;
    expect_shown(482964.79, "GFLOP/s", "482.96 TFLOP/s");
    expect_shown(2.31, "GFLOP/s", "2.31 GFLOP/s");
    expect_shown(0.04887, "GFLOP/s", "48.87 MFLOP/s");
    expect_shown(989.5, "TFLOP/s", "989.50 TFLOP/s");
    expect_shown(1979.0, "TFLOP/s", "1.98 PFLOP/s");
    expect_shown(1.5e15, "FLOP/s", "1.50 PFLOP/s");
    expect_shown(12, "FLOP/s", "12.00 FLOP/s");
    expect_shown(0, "GFLOP/s", "0.00 GFLOP/s");
    expect_shown(NAN, "GFLOP/s", "n/a");
    /* other units keep their own forms */
    expect_shown(173175000, "bytes", "165.15 MiB");
    expect_shown(12.5, "ms", "12.5 ms");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_progress_eta_is_what_is_left_over_the_rate),
        cmocka_unit_test(test_progress_eta_reads_in_hours_minutes_and_seconds),
        cmocka_unit_test(test_output_flop_rates_take_the_prefix_that_keeps_them_below_1000),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
