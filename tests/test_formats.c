/* test_formats.c: how figures read for people: the time left on a progress line, the line
 * on a narrow terminal, and FLOP rates with the SI prefix that keeps them below 1000. */
/* cmocka.h needs these four first. */
/* clang-format off */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
/* clang-format on */

#include <fcntl.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

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

static void test_progress_eta_beyond_10000_hours_reads_as_such(void **state) {
    (void)state;
    expect_eta(1e20, "> 10000 h"); /* what a rate near 0 gives at the start */
    expect_eta(35999940, "9999 h 59 min");
    expect_eta(36000000, "> 10000 h");
    expect_eta(INFINITY, "?");
}

/* What lb_progress_update draws on a terminal `cols` columns wide (a pseudo-terminal as
 * stderr), into out. */
static void draw_on_terminal(unsigned short cols, const char *text, char *out, size_t cap) {
    int master = posix_openpt(O_RDWR | O_NOCTTY);
    assert_true(master >= 0);
    assert_int_equal(grantpt(master), 0);
    assert_int_equal(unlockpt(master), 0);
    int slave = open(ptsname(master), O_RDWR | O_NOCTTY);
    assert_true(slave >= 0);
    assert_int_equal(ioctl(slave, TIOCSWINSZ, &(struct winsize){.ws_row = 24, .ws_col = cols}), 0);
    fflush(stderr);
    int saved = dup(STDERR_FILENO);
    dup2(slave, STDERR_FILENO);
    lb_progress p;
    lb_progress_init(&p, true);
    lb_progress_update(&p, true, "%s", text);
    fflush(stderr);
    dup2(saved, STDERR_FILENO);
    close(saved);
    close(slave);
    assert_true(p.tty);
    ssize_t n = read(master, out, cap - 1);
    close(master);
    out[n > 0 ? n : 0] = '\0';
}

static void test_progress_line_is_cut_short_of_the_terminal_width(void **state) {
    (void)state;
    char shown[512];
    draw_on_terminal(20, "load: 1200/5000 done, 3 failed, 12 in flight, ETA 3 min 02 s", shown,
                     sizeof shown);
    assert_string_equal(shown, "\rload: 1200/5000 don");
    /* a character is kept whole or dropped whole: \u00e9 is two bytes */
    draw_on_terminal(6, "abcd\u00e9f", shown, sizeof shown);
    assert_string_equal(shown, "\rabcd");
    draw_on_terminal(80, "step 3/10", shown, sizeof shown);
    assert_string_equal(shown, "\rstep 3/10");
}

static void expect_shown(double value, const char *unit, const char *want) {
    char buf[64];
    lb_output_format_value(buf, sizeof buf, value, unit);
    assert_string_equal(buf, want);
}

/* A value just below a unit's step is shown in the next unit, as it rounds: 1048575 bytes
 * read "1024.00 KiB" and 999.999 GFLOP/s "1000.00 GFLOP/s". */
static void test_output_values_that_round_up_take_the_next_unit(void **state) {
    (void)state;
    expect_shown(1048575, "bytes", "1.00 MiB");
    expect_shown(1023.7, "bytes", "1.00 KiB");
    expect_shown(1023.4, "bytes", "1023 B");
    expect_shown(1048064, "bytes", "1023.50 KiB");
    expect_shown(999.999, "GFLOP/s", "1.00 TFLOP/s");
    expect_shown(999.99, "GFLOP/s", "999.99 GFLOP/s");
    expect_shown(0.999, "GFLOP/s", "999.00 MFLOP/s");
    expect_shown(0.9999, "GFLOP/s", "999.90 MFLOP/s");
    expect_shown(0.999999, "GFLOP/s", "1.00 GFLOP/s");
    expect_shown(0.0, "bytes", "0 B");
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
        cmocka_unit_test(test_progress_eta_beyond_10000_hours_reads_as_such),
        cmocka_unit_test(test_progress_line_is_cut_short_of_the_terminal_width),
        cmocka_unit_test(test_output_values_that_round_up_take_the_next_unit),
        cmocka_unit_test(test_output_flop_rates_take_the_prefix_that_keeps_them_below_1000),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
