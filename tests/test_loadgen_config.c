/* test_loadgen_config.c: the run's configuration as stored and printed with --json
 * (lb_loadgen_config_json): the seeds, unsigned 64-bit, read back exactly as the summary
 * prints them, MLPerf's official ones (above INT64_MAX) included; and a run refused before
 * it starts when the parameters are out of range. */
#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "loadgen/dataset.h"
#include "loadgen/loadgen.h"
#include "loadgen/mlperf_log.h"

static uint64_t seed_of(json_t *config, const char *key) {
    json_t *v = json_object_get(config, key);
    if (!json_is_string(v)) fail_msg("%s is not a decimal string", key);
    char *end = NULL;
    uint64_t u = strtoull(json_string_value(v), &end, 10);
    assert_true(end != NULL && *end == '\0');
    return u;
}

static void test_loadgen_config_keeps_mlperf_seeds_exact(void **state) {
    (void)state;
    lb_loadgen_params p = lb_loadgen_default_params();
    p.sample_seed = LB_MLPERF_SAMPLE_INDEX_SEED;
    p.schedule_seed = LB_MLPERF_SCHEDULE_SEED;
    lb_dataset ds;
    memset(&ds, 0, sizeof ds);
    snprintf(ds.format, sizeof ds.format, "synthetic");
    p.dataset_path = "synthetic";
    json_t *c = lb_loadgen_config_json(&p, &ds);
    assert_non_null(c);
    assert_true(seed_of(c, "sample_seed") == LB_MLPERF_SAMPLE_INDEX_SEED);
    assert_true(seed_of(c, "schedule_seed") == LB_MLPERF_SCHEDULE_SEED);
    assert_string_equal(json_string_value(json_object_get(c, "sample_seed")),
                        "14771362308971278857");
    /* through text and back, as --json prints it and the store keeps it */
    char *text = json_dumps(c, JSON_COMPACT);
    json_t *back = json_loads(text, 0, NULL);
    assert_true(seed_of(back, "schedule_seed") == UINT64_C(18209322760996052031));
    json_decref(back);
    free(text);
    json_decref(c);
    p.sample_seed = 7;
    c = lb_loadgen_config_json(&p, &ds);
    assert_string_equal(json_string_value(json_object_get(c, "sample_seed")), "7");
    json_decref(c);
}

static void test_loadgen_refuses_a_burstiness_outside_its_range_naming_it(void **state) {
    (void)state;
    lb_dataset_synthetic_params sp = lb_dataset_synthetic_default_params();
    sp.n_samples = 2;
    lb_dataset ds;
    lb_err err;
    assert_int_equal(lb_dataset_synthetic(&sp, &ds, &err), LB_OK);
    const char *urls[] = {"http://127.0.0.1:9"};
    lb_loadgen_params p = lb_loadgen_default_params();
    p.pool.endpoints = urls;
    p.pool.n_endpoints = 1;
    p.pool.retries = 0;
    p.scenario = LB_SCENARIO_SERVER;
    p.mode = LB_MODE_ACCURACY; /* a plan of one query per sample, whatever its gaps */
    p.qps = 10;
    const double bad[] = {0, -1, 0.0009, 1001, NAN, INFINITY};
    const char *shown[] = {"--burstiness 0 ",    "--burstiness -1 ",  "--burstiness 0.0009 ",
                           "--burstiness 1001 ", "--burstiness nan ", "--burstiness inf "};
    for (int i = 0; i < 6; i++) {
        p.burstiness = bad[i];
        lb_result *r = lb_result_new("load", "test");
        lb_loadgen_report rep;
        assert_int_equal(lb_loadgen_run(&p, &ds, r, &rep, &err), LB_ERR_USAGE);
        if (strstr(err.msg, shown[i]) == NULL || strstr(err.msg, "from 0.001 to 1000") == NULL)
            fail_msg("burstiness %g: %s", bad[i], err.msg);
        lb_loadgen_report_free(&rep);
        lb_result_free(r);
    }
    lb_dataset_free(&ds);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_loadgen_config_keeps_mlperf_seeds_exact),
        cmocka_unit_test(test_loadgen_refuses_a_burstiness_outside_its_range_naming_it),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
