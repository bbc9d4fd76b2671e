/* test_skip.h: tests that cannot run on this machine are counted as skipped, not passed.
 *
 * A test that needs something absent here (a GPU, CUDA in this build, a file named by an
 * environment variable) starts with LB_TEST_SKIP_UNLESS(condition, why). Its program's
 * main ends with lb_test_main, which runs the one test named by argv[1] (or all of them)
 * and exits 77 when every test it ran was skipped. tests/CMakeLists.txt registers each
 * test of such a program as its own CTest test with SKIP_RETURN_CODE 77, so CTest's
 * summary counts exactly the tests that did not run ("Not Run ... Skipped"). Include after
 * cmocka.h. */
#ifndef LB_TEST_SKIP_H
#define LB_TEST_SKIP_H

#include <stdio.h>
#include <string.h>

static int lb_test_n_skipped;

#define LB_TEST_SKIP_UNLESS(cond, why)                                                             \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            lb_test_n_skipped++;                                                                   \
            print_message("skipped: %s\n", why);                                                   \
            skip();                                                                                \
        }                                                                                          \
    } while (0)

#define LB_TEST_SKIPPED 77

/* Runs tests[0..n) (only the one named argv[1] when given) between the group's setup and
 * teardown (either may be NULL); returns the number failed, or LB_TEST_SKIPPED when every
 * test that ran was skipped. */
static inline int lb_test_main(const struct CMUnitTest *tests, size_t n, CMFixtureFunction setup,
                               CMFixtureFunction teardown, int argc, char **argv) {
    struct CMUnitTest chosen[64];
    size_t k = 0;
    for (size_t i = 0; i < n && k < sizeof chosen / sizeof chosen[0]; i++)
        if (argc < 2 || strcmp(tests[i].name, argv[1]) == 0) chosen[k++] = tests[i];
    if (k == 0) {
        fprintf(stderr, "no test named %s\n", argc > 1 ? argv[1] : "(none)");
        return 1;
    }
    int failed = _cmocka_run_group_tests(argc > 1 ? argv[1] : "tests", chosen, k, setup, teardown);
    if (failed == 0 && lb_test_n_skipped == (int)k) return LB_TEST_SKIPPED;
    return failed;
}

#endif
