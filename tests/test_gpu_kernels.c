/* test_gpu_kernels.c: the GPU selftest as a CTest test. On a machine with a CUDA GPU every
 * kernel (fp32, fp16, bf16) and the whole-model checks must pass; without one (CI) the
 * GPU test is skipped (CTest counts it so) and the selftest must refuse with a clear
 * reason. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

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
        cmocka_unit_test(test_selftest_without_gpu_says_why),
    };
    return lb_test_main(tests, sizeof tests / sizeof tests[0], NULL, NULL, argc, argv);
}
