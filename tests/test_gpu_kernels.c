/* test_gpu_kernels.c: the GPU selftest as a CTest test. On a machine with a CUDA GPU every
 * kernel (fp32, fp16, bf16) and the whole-model checks must pass; without one (CI) the
 * GPU test is skipped (CTest counts it so) and the selftest must refuse with a clear
 * reason. */
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "core/signals.h"
#include "gpu/devinfo.h"
#include "selftest/selftest.h"
#include "test_skip.h"

static void test_selftest_passes_on_this_gpu(void **state) {
    (void)state;
    LB_TEST_SKIP_UNLESS(lb_devinfo_cuda_device_count() > 0, "no CUDA GPU here");
    lb_selftest_params p = lb_selftest_default_params();
    lb_selftest_report rep;
    lb_err err = {{0}};
    lb_status st = lb_selftest_run(&p, &rep, &err);
    if (st != LB_OK) fail_msg("selftest: %s", err.msg);
    for (size_t i = 0; i < rep.n; i++)
        if (!rep.rows[i].pass)
            print_error("FAIL %s %s %s err/tol %g\n", rep.rows[i].op, rep.rows[i].shape,
                        rep.rows[i].precision, rep.rows[i].err_ratio);
    assert_true(rep.n > 100);
    assert_int_equal(rep.n_failed, 0);
    lb_selftest_report_free(&rep);
}

/* --only takes a row's name as the table prints it: the rows of rope.fwd alone, of
 * nf4_dequantize alone (their groups run; the other rows are left out). */
static void test_selftest_only_takes_a_row_name(void **state) {
    (void)state;
    LB_TEST_SKIP_UNLESS(lb_devinfo_cuda_device_count() > 0, "no CUDA GPU here");
    const char *names[] = {"rope.fwd", "nf4_dequantize"};
    for (size_t k = 0; k < sizeof names / sizeof names[0]; k++) {
        lb_selftest_params p = lb_selftest_default_params();
        p.only = names[k];
        p.model = false;
        p.progress = false;
        lb_selftest_report rep;
        lb_err err = {{0}};
        lb_status st = lb_selftest_run(&p, &rep, &err);
        if (st != LB_OK) fail_msg("selftest --only %s: %s", names[k], err.msg);
        assert_true(rep.n > 0);
        for (size_t i = 0; i < rep.n; i++)
            if (strncmp(rep.rows[i].op, names[k], strlen(names[k])) != 0)
                fail_msg("--only %s kept a row of %s", names[k], rep.rows[i].op);
        assert_int_equal(rep.n_failed, 0);
        lb_selftest_report_free(&rep);
    }
}

/* A signal that reached the process ends the selftest as interrupted, no check recorded. */
static void test_selftest_stops_at_a_signal(void **state) {
    (void)state;
    LB_TEST_SKIP_UNLESS(lb_devinfo_cuda_device_count() > 0, "no CUDA GPU here");
    lb_signals_install();
    raise(SIGINT);
    lb_selftest_params p = lb_selftest_default_params();
    p.progress = false;
    lb_selftest_report rep;
    lb_err err = {{0}};
    lb_status st = lb_selftest_run(&p, &rep, &err);
    lb_signals_reset();
    assert_int_equal(st, LB_ERR_INTERRUPTED);
    assert_int_equal(rep.n, 0);
    assert_non_null(strstr(err.msg, "interrupted"));
    lb_selftest_report_free(&rep);
}

static void test_selftest_without_gpu_says_why(void **state) {
    (void)state;
    LB_TEST_SKIP_UNLESS(lb_devinfo_cuda_device_count() == 0, "a CUDA GPU is here");
    lb_selftest_params p = lb_selftest_default_params();
    lb_selftest_report rep;
    lb_err err = {{0}};
    lb_status st = lb_selftest_run(&p, &rep, &err);
    assert_int_equal(st, LB_ERR_UNSUPPORTED);
    assert_true(strstr(err.msg, "GPU") != NULL || strstr(err.msg, "CUDA") != NULL);
    assert_int_equal(rep.n, 0);
    lb_selftest_report_free(&rep);
}

int main(int argc, char **argv) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_selftest_passes_on_this_gpu),
        cmocka_unit_test(test_selftest_only_takes_a_row_name),
        cmocka_unit_test(test_selftest_stops_at_a_signal),
        cmocka_unit_test(test_selftest_without_gpu_says_why),
    };
    return lb_test_main(tests, sizeof tests / sizeof tests[0], NULL, NULL, argc, argv);
}
