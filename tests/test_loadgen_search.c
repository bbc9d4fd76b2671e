/* test_loadgen_search.c: the Server rate search (loadgen/search.h) against verdicts with a
 * known edge: the trials it asks for, in order, and the answer. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "loadgen/search.h"

/* Runs a search whose runs are VALID exactly up to edge; returns the trials' count. */
static int search_edge(double start, double edge, double *rates, int cap, double *answer) {
    lb_search_params p = lb_search_default_params(start);
    lb_search s;
    lb_search_init(&s, &p);
    double q;
    int n = 0;
    while (lb_search_next(&s, &q)) {
        assert_true(n < cap);
        rates[n++] = q;
        lb_search_report(&s, q, q <= edge);
    }
    *answer = lb_search_result(&s);
    return n;
}

static void test_search_doubles_then_bisects_to_the_edge(void **state) {
    (void)state;
    double r[32], answer;
    int n = search_edge(1.0, 5.0, r, 32, &answer);
    /* 1, 2, 4 VALID, 8 not: bisect between 4 and 8 */
    assert_true(n >= 5);
    assert_true(r[0] == 1 && r[1] == 2 && r[2] == 4 && r[3] == 8 && r[4] == 6);
    assert_true(answer <= 5.0);
    assert_true((5.0 - answer) / 5.0 <= 0.05 + 1e-12);
}

static void test_search_halves_when_the_start_is_invalid(void **state) {
    (void)state;
    double r[32], answer;
    int n = search_edge(100.0, 30.0, r, 32, &answer);
    assert_true(r[0] == 100 && r[1] == 50 && r[2] == 25 && r[3] == 37.5);
    assert_true(n <= 16);
    assert_true(answer <= 30.0 && answer >= 30.0 * 0.95);
}

static void test_search_without_a_valid_rate_answers_none(void **state) {
    (void)state;
    double r[32], answer;
    int n = search_edge(8.0, 0.0, r, 32, &answer);
    assert_true(isnan(answer));
    assert_int_equal(n, 11); /* 8, 4, ... down to the floor 8/1024 */
    assert_true(r[n - 1] == 8.0 / 1024);
}

static void test_search_stops_after_max_trials(void **state) {
    (void)state;
    lb_search_params p = lb_search_default_params(1.0);
    p.max_trials = 3;
    lb_search s;
    lb_search_init(&s, &p);
    double q;
    int n = 0;
    while (lb_search_next(&s, &q)) {
        lb_search_report(&s, q, true);
        n++;
    }
    assert_int_equal(n, 3);
    assert_true(lb_search_result(&s) == 4.0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_search_doubles_then_bisects_to_the_edge),
        cmocka_unit_test(test_search_halves_when_the_start_is_invalid),
        cmocka_unit_test(test_search_without_a_valid_rate_answers_none),
        cmocka_unit_test(test_search_stops_after_max_trials),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
