/* test_compare_history.c: `llmbench compare` and `llmbench history` on stored runs whose
 * answer is known: a planted 10% slowdown is found (exit 1), two runs drawn from one
 * distribution show no change (exit 0), a history with one step finds that step and no
 * other, one bad night is not a change point, runs that do not exist, are not ok or share
 * no metric are refused with exit 2, and a metric whose raw samples a run lacks is compared
 * on the runs' values, said so. The runs are written through the store's own API with
 * seeded random step times, so the test does not depend on this machine's noise. */
#include <ctype.h>
#include <jansson.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "core/clock.h"
#include "core/rng.h"
#include "core/signals.h"
#include "core/stats.h"
#include "history/bench.h"
#include "history/history.h"
#include "history/select.h"
#include "store/store.h"
#include "test_util.h"

static char g_dir[64], g_db[128];
static char out[1 << 20], err[1 << 16];

static int run(const char *const *args) {
    return lb_test_run(args, out, sizeof out, err, sizeof err);
}

/* A configuration key (and its integer value) the runs stored next carry beside the others;
 * NULL: none. */
static const char *g_extra_key;
static int g_extra_value;

/* Stores an ok train run of batch `batch` with n step times around step_ms (1% noise),
 * tagged with tags[0..] (NULL-terminated; NULL: none). */
static int64_t store_tagged_run(const char *kind, int batch, double step_ms, size_t n,
                                uint64_t seed, double start_s, const char *const *tags) {
    lb_store *s = NULL;
    lb_err e = {{0}};
    assert_int_equal(lb_store_open(g_db, &s, &e), LB_OK);
    lb_result *r = lb_result_new(kind, "synthetic");
    json_object_set_new(r->config, "model", json_string("gpt2-tiny"));
    json_object_set_new(r->config, "batch", json_integer(batch));
    if (g_extra_key != NULL)
        json_object_set_new(r->config, g_extra_key, json_integer(g_extra_value));
    json_object_set_new(r->provenance, "hostname", json_string("testhost"));
    json_object_set_new(r->provenance, "gpus", json_array());
    for (size_t i = 0; tags && tags[i]; i++)
        json_array_append_new(r->tags, json_string(tags[i]));
    r->start_wall_s = start_s;
    int64_t id = -1;
    assert_int_equal(lb_store_run_begin(s, r, &id, &e), LB_OK);
    lb_rng rng;
    lb_rng_seed(&rng, seed);
    lb_series *ser = lb_result_series(r, strcmp(kind, "train") == 0 ? "step_ms" : "ttft_ms", "ms");
    double total = 0;
    for (size_t i = 0; i < n; i++) {
        double v = step_ms * (1.0 + 0.01 * lb_rng_normal(&rng));
        lb_result_series_push(ser, v);
        total += v;
    }
    if (strcmp(kind, "train") == 0) {
        lb_result_set_metric(r, "tokens_per_s", 1000.0 * n * batch / total, "tok/s");
        lb_result_set_metric(r, "step_ms_median", lb_stats_median(ser->values, n), "ms");
    } else {
        lb_result_set_metric(r, "output_tok_per_s", 1000.0 * n / total, "tok/s");
    }
    r->status = LB_RUN_OK;
    r->end_wall_s = start_s + 1;
    assert_int_equal(lb_store_run_finish(s, id, r, &e), LB_OK);
    lb_result_free(r);
    lb_store_close(s);
    return id;
}

static int64_t store_run(const char *kind, int batch, double step_ms, size_t n, uint64_t seed,
                         double start_s) {
    return store_tagged_run(kind, batch, step_ms, n, seed, start_s, NULL);
}

static size_t count_text(const char *text, const char *needle) {
    size_t n = 0;
    for (const char *p = text; (p = strstr(p, needle)) != NULL; p += strlen(needle))
        n++;
    return n;
}

static const char *id_text(int64_t id, char *buf) {
    sprintf(buf, "%lld", (long long)id);
    return buf;
}

static json_t *find_metric(json_t *doc, const char *name) {
    json_t *m;
    size_t i;
    json_array_foreach(
        json_object_get(json_array_get(json_object_get(doc, "groups"), 0), "metrics"), i,
        m) if (strcmp(json_string_value(json_object_get(m, "metric")), name) == 0) return m;
    return NULL;
}

/* A train run's benchmark is split by what shapes its work (ranks, accumulation), not by
 * its seed or step count. */
static void test_bench_identity_of_train_runs(void **state) {
    (void)state;
    char key[4][13];
    for (int i = 0; i < 4; i++) {
        lb_result *r = lb_result_new("train", "t");
        json_object_set_new(r->config, "model", json_string("gpt2-tiny"));
        json_object_set_new(r->config, "batch", json_integer(4));
        json_object_set_new(r->config, "ranks", json_integer(i == 1 ? 4 : 1));
        json_object_set_new(r->config, "grad_accum", json_integer(i == 2 ? 2 : 1));
        json_object_set_new(r->config, "seed", json_integer(i == 3 ? 7 : 1));
        json_object_set_new(r->config, "steps", json_integer(i == 3 ? 50 : 20));
        char id[LB_BENCH_ID_BYTES];
        lb_bench_identity(r, id, sizeof id);
        lb_bench_key(id, key[i]);
        lb_result_free(r);
    }
    assert_string_not_equal(key[0], key[1]); /* 1 rank against 4 */
    assert_string_not_equal(key[0], key[2]); /* accumulation */
    assert_string_equal(key[0], key[3]);     /* seed and steps do not split it */
}

static void test_compare_finds_planted_slowdown_and_none_between_equals(void **state) {
    (void)state;
    int64_t a = store_run("train", 4, 10.0, 200, 1, 1e9);
    int64_t b = store_run("train", 4, 11.0, 200, 2, 1e9 + 10); /* 10% slower steps */
    int64_t c = store_run("train", 4, 10.0, 200, 3, 1e9 + 20); /* same as a */
    char x[24], y[24];
    int rc = run(
        (const char *[]){"compare", id_text(a, x), id_text(b, y), "--json", "--db", g_db, NULL});
    if (rc != 1) fail_msg("exit %d: %s %s", rc, out, err);
    json_t *doc = json_loads(out, 0, NULL);
    assert_non_null(doc);
    assert_true(json_is_true(json_object_get(doc, "regression")));
    json_t *m = find_metric(doc, "step_ms");
    assert_non_null(m);
    assert_string_equal(json_string_value(json_object_get(m, "verdict")), "slower");
    double lo = json_number_value(json_object_get(m, "lo_pct"));
    double hi = json_number_value(json_object_get(m, "hi_pct"));
    assert_true(lo < 10.0 && hi > 10.0);
    json_decref(doc);

    rc = run(
        (const char *[]){"compare", id_text(a, x), id_text(c, y), "--json", "--db", g_db, NULL});
    if (rc != 0) fail_msg("exit %d: %s %s", rc, out, err);
    doc = json_loads(out, 0, NULL);
    assert_false(json_is_true(json_object_get(doc, "regression")));
    m = find_metric(doc, "step_ms");
    assert_string_equal(json_string_value(json_object_get(m, "verdict")), "no change");
    /* one benchmark: no differences */
    assert_int_equal(json_array_size(json_object_get(
                         json_array_get(json_object_get(doc, "groups"), 0), "differences")),
                     0);
    json_decref(doc);

    /* another batch is another benchmark: compared, and said so */
    int64_t d = store_run("train", 8, 10.0, 200, 4, 1e9 + 30);
    rc = run((const char *[]){"compare", id_text(a, x), id_text(d, y), "--db", g_db, NULL});
    assert_true(rc == 0 || rc == 1);
    assert_non_null(strstr(out, "  different benchmarks: batch 4 -> 8\n"));

    /* B faster than A: the same planted change the other way is an improvement, exit 0 */
    rc = run((const char *[]){"compare", id_text(b, x), id_text(a, y), "--db", g_db, NULL});
    assert_int_equal(rc, 0);
    assert_non_null(strstr(out, "faster"));
}

static void test_compare_refuses_missing_runs_and_no_common_metric(void **state) {
    (void)state;
    int64_t t = store_run("train", 8, 10.0, 20, 4, 2e9);
    int64_t l = store_run("load", 8, 10.0, 20, 5, 2e9);
    char x[24], y[24];
    assert_int_equal(run((const char *[]){"compare", id_text(t, x), "999999", "--db", g_db, NULL}),
                     2);
    assert_non_null(strstr(err, "run 999999 does not exist"));
    assert_int_equal(
        run((const char *[]){"compare", id_text(t, x), id_text(l, y), "--db", g_db, NULL}), 2);
    assert_non_null(strstr(err, "share no metric"));
    assert_int_equal(
        run((const char *[]){"compare", "nosuchsweep", id_text(t, x), "--db", g_db, NULL}), 2);
    assert_non_null(strstr(err, "'nosuchsweep' is neither a run id nor the name of a sweep"));
}

/* A side's runs are pooled as repeats of one benchmark: a run of another kind or another
 * configuration among them is refused naming the side, the runs and the difference, on
 * side A as on side B (A's extra load run was once dropped unsaid). */
static void test_compare_refuses_a_side_mixing_benchmarks(void **state) {
    (void)state;
    int64_t t = store_run("train", 60, 10.0, 40, 41, 2e9);
    int64_t l = store_run("load", 60, 10.0, 40, 42, 2e9 + 1);
    int64_t t61 = store_run("train", 61, 10.0, 40, 43, 2e9 + 2);
    int64_t u = store_run("train", 60, 10.0, 40, 44, 2e9 + 3);
    char ab[48], b[24];
    snprintf(ab, sizeof ab, "%lld,%lld", (long long)t, (long long)l);
    assert_int_equal(run((const char *[]){"compare", ab, id_text(u, b), "--db", g_db, NULL}), 2);
    assert_non_null(strstr(err, "A ("));
    assert_non_null(strstr(err, "a train run and a load run"));
    assert_int_equal(run((const char *[]){"compare", id_text(u, b), ab, "--db", g_db, NULL}), 2);
    assert_non_null(strstr(err, "B ("));
    snprintf(ab, sizeof ab, "%lld,%lld", (long long)t, (long long)t61);
    assert_int_equal(run((const char *[]){"compare", ab, id_text(u, b), "--db", g_db, NULL}), 2);
    assert_non_null(strstr(err, "are different benchmarks (batch 60 -> 61)"));
    /* a key only the later run has (adapters' options) is a difference too, either order */
    g_extra_key = "lora_rank", g_extra_value = 8;
    int64_t lora = store_run("train", 60, 10.0, 40, 45, 2e9 + 4);
    g_extra_key = NULL;
    snprintf(ab, sizeof ab, "%lld,%lld", (long long)t, (long long)lora);
    assert_int_equal(run((const char *[]){"compare", ab, id_text(u, b), "--db", g_db, NULL}), 2);
    assert_non_null(strstr(err, "are different benchmarks (lora_rank (none) -> 8)"));
    snprintf(ab, sizeof ab, "%lld,%lld", (long long)lora, (long long)t);
    assert_int_equal(run((const char *[]){"compare", ab, id_text(u, b), "--db", g_db, NULL}), 2);
    assert_non_null(strstr(err, "are different benchmarks (lora_rank 8 -> (none))"));
    snprintf(ab, sizeof ab, "%lld,%lld", (long long)t, (long long)u);
    assert_int_equal(run((const char *[]){"compare", ab, ab, "--db", g_db, NULL}), 0);
}

static void test_history_finds_the_one_step_and_marks_regression(void **state) {
    (void)state;
    enum { N = 30, STEP = 20 };
    int64_t ids[N];
    lb_rng rng;
    lb_rng_seed(&rng, 9);
    for (int i = 0; i < N; i++) /* nightly; from night 20 the steps are 8% slower */
        ids[i] =
            store_run("train", 16, (i >= STEP ? 10.8 : 10.0) * (1 + 0.005 * lb_rng_normal(&rng)),
                      50, 100 + (uint64_t)i, 3e9 + 86400.0 * i);
    char x[24];
    int rc = run((const char *[]){"history", id_text(ids[0], x), "--json", "--db", g_db, NULL});
    if (rc != 1) fail_msg("exit %d: %s %s", rc, out, err);
    json_t *doc = json_loads(out, 0, NULL);
    assert_non_null(doc);
    assert_int_equal(json_array_size(json_object_get(doc, "points")), N);
    json_t *cps = json_object_get(doc, "change_points");
    assert_int_equal(json_array_size(cps), 1);
    json_t *cp = json_array_get(cps, 0);
    assert_int_equal(json_integer_value(json_object_get(cp, "index")), STEP);
    assert_int_equal(json_integer_value(json_object_get(cp, "run")), ids[STEP]);
    assert_true(json_is_true(json_object_get(cp, "regression")));
    assert_string_equal(json_string_value(json_object_get(cp, "verdict")), "slower");
    json_decref(doc);

    /* a report of the newest run draws that history with the change point marked */
    char dir[160], md_path[200], svg_path[200];
    snprintf(dir, sizeof dir, "%s/hist", g_dir);
    rc = run((const char *[]){"report", id_text(ids[N - 1], x), "--out", dir, "--db", g_db, NULL});
    if (rc != 0) fail_msg("exit %d: %s", rc, err);
    snprintf(md_path, sizeof md_path, "%s/report.md", dir);
    char *md = lb_test_read_file(md_path, NULL);
    assert_non_null(md);
    assert_non_null(strstr(md, "Regression: tokens_per_s of benchmark"));
    const char *chart = strstr(md, "![history of tokens_per_s");
    assert_non_null(chart);
    int k = 0;
    assert_int_equal(sscanf(strstr(chart, "](chart-") + 8, "%d", &k), 1);
    snprintf(svg_path, sizeof svg_path, "%s/chart-%d.svg", dir, k);
    char *svg = lb_test_read_file(svg_path, NULL);
    assert_non_null(svg);
    assert_int_equal(count_text(svg, "class=\"marker\""), 1);
    assert_non_null(strstr(svg, "data-n=\"30\""));
    free(svg);
    free(md);
}

static void test_history_one_bad_night_is_not_a_change(void **state) {
    (void)state;
    enum { N = 25 };
    int64_t first = -1;
    lb_rng rng;
    lb_rng_seed(&rng, 19);
    for (int i = 0; i < N; i++) {
        double level = i == 12 || i == N - 1 ? 14.0 : 10.0; /* two bad nights, one the last */
        int64_t id = store_run("train", 32, level * (1 + 0.01 * lb_rng_normal(&rng)), 50,
                               300 + (uint64_t)i, 4e9 + 86400.0 * i);
        if (first < 0) first = id;
    }
    char x[24];
    int rc = run((const char *[]){"history", id_text(first, x), "--json", "--db", g_db, NULL});
    if (rc != 0) fail_msg("exit %d: %s %s", rc, out, err);
    json_t *doc = json_loads(out, 0, NULL);
    assert_int_equal(json_array_size(json_object_get(doc, "change_points")), 0);
    json_decref(doc);
    /* the list names every benchmark; an unknown key or metric is a usage error */
    assert_int_equal(run((const char *[]){"history", "--db", g_db, NULL}), 0);
    assert_non_null(strstr(out, "batch=32"));
    assert_int_equal(run((const char *[]){"history", "abcdefabcdef", "--db", g_db, NULL}), 2);
    assert_int_equal(
        run((const char *[]){"history", id_text(first, x), "--metric", "nope", "--db", g_db, NULL}),
        2);
    assert_non_null(strstr(err, "'nope' is not a key metric of train runs"));
}

/* A history follows the runs' starts, not their ids: runs imported from another database
 * get new ids with their old starts. Here the ten slow nights are stored first (lower ids)
 * but started last, so the benchmark got slower: a regression, and the newest run is the
 * last slow night. A report --since keeps the recent run stored before an old one. */
static void test_history_is_in_start_order_not_id_order(void **state) {
    (void)state;
    enum { N = 10 };
    int64_t slow[N];
    lb_rng rng;
    lb_rng_seed(&rng, 29);
    for (int i = 0; i < N; i++) /* nights 10..19, 20% slower */
        slow[i] = store_run("train", 48, 12.0 * (1 + 0.005 * lb_rng_normal(&rng)), 50,
                            500 + (uint64_t)i, 5e9 + 86400.0 * (N + i));
    for (int i = 0; i < N; i++) /* nights 0..9, stored after */
        store_run("train", 48, 10.0 * (1 + 0.005 * lb_rng_normal(&rng)), 50, 600 + (uint64_t)i,
                  5e9 + 86400.0 * i);
    char x[24];
    int rc = run((const char *[]){"history", id_text(slow[0], x), "--json", "--db", g_db, NULL});
    if (rc != 1) fail_msg("exit %d: %s %s", rc, out, err);
    json_t *doc = json_loads(out, 0, NULL);
    assert_non_null(doc);
    json_t *points = json_object_get(doc, "points");
    assert_int_equal(json_array_size(points), 2 * N);
    assert_int_equal(json_integer_value(json_object_get(json_array_get(points, N), "id")), slow[0]);
    json_t *cp = json_array_get(json_object_get(doc, "change_points"), 0);
    assert_int_equal(json_integer_value(json_object_get(cp, "run")), slow[0]);
    assert_string_equal(json_string_value(json_object_get(cp, "verdict")), "slower");
    json_decref(doc);
    assert_int_equal(run((const char *[]){"history", "--json", "--db", g_db, NULL}), 0);
    doc = json_loads(out, 0, NULL);
    json_t *b;
    size_t i;
    int64_t last = -1;
    json_array_foreach(doc, i, b) {
        if (strstr(json_string_value(json_object_get(b, "identity")), "batch=48"))
            last = json_integer_value(json_object_get(b, "last_id"));
    }
    assert_int_equal(last, slow[N - 1]);
    json_decref(doc);

    int64_t recent = store_run("train", 56, 10.0, 20, 700, lb_clock_wall_s() - 3600.0);
    store_run("train", 56, 10.0, 20, 701, 1e9); /* imported: a new id, an old start */
    lb_store *s = NULL;
    lb_err e = {{0}};
    lb_run_set set = {0};
    assert_int_equal(lb_store_open_read(g_db, &s, &e), LB_OK);
    assert_int_equal(lb_select_since(s, lb_clock_wall_s() - 86400.0, &set, &e), LB_OK);
    lb_store_close(s);
    size_t found = 0;
    for (size_t g = 0; g < set.n_groups; g++)
        for (size_t k = 0; k < set.groups[g].n; k++)
            found += set.groups[g].ids[k] == recent;
    lb_select_free(&set);
    assert_int_equal(found, 1);
}

/* Histories read runs without their samples: the summary load has metrics, no series. */
static void test_store_summary_load_skips_samples(void **state) {
    (void)state;
    int64_t id = store_run("train", 64, 10.0, 30, 77, 5e9);
    lb_store *s = NULL;
    lb_err e = {{0}};
    assert_int_equal(lb_store_open(g_db, &s, &e), LB_OK);
    lb_result *full = NULL, *summary = NULL;
    assert_int_equal(lb_store_run_load(s, id, &full, &e), LB_OK);
    assert_int_equal(lb_store_run_load_summary(s, id, &summary, &e), LB_OK);
    assert_int_equal(full->n_series, 1);
    assert_int_equal(summary->n_series, 0);
    assert_int_equal(summary->n_metrics, full->n_metrics);
    assert_float_equal(lb_result_metric(summary, "tokens_per_s"),
                       lb_result_metric(full, "tokens_per_s"), 0.0);
    assert_int_equal(json_integer_value(json_object_get(summary->config, "batch")), 64);
    lb_result *missing = NULL;
    assert_int_equal(lb_store_run_load_summary(s, 999999, &missing, &e), LB_ERR_DB);
    assert_null(missing);
    lb_result_free(full);
    lb_result_free(summary);
    lb_store_close(s);
}

/* Runs at 1, 2 and 4 GPUs (config "gpus"): the report charts throughput per GPU against
 * the count and says how each count scales. Throughput is 100 x batch here, so batches 10,
 * 19 and 36 give 95% and 90%. */
/* Train runs of 1, 2 and 4 ranks (the count train stores in its config): the scaling chart
 * and a finding for each larger count. */
static void test_report_scaling_efficiency_from_rank_counts(void **state) {
    (void)state;
    /* the fourth, of another batch, is another configuration: no scaling of its own */
    const int ranks[] = {1, 2, 4, 8}, batch[] = {10, 10, 10, 12};
    const double step_ms[] = {10.0, 100.0 / 19, 100.0 / 36, 1.0}; /* 95% and 90% per rank */
    char specs[4][24];
    for (int i = 0; i < 4; i++) {
        int64_t id = store_run("train", batch[i], step_ms[i], 50, 500 + (uint64_t)i, 6e9);
        lb_store *s = NULL;
        lb_err e = {{0}};
        assert_int_equal(lb_store_open(g_db, &s, &e), LB_OK);
        lb_result *r = NULL;
        assert_int_equal(lb_store_run_load(s, id, &r, &e), LB_OK);
        lb_store_close(s);
        /* the same run again with its rank count in config and GPU telemetry */
        json_object_set_new(r->config, "ranks", json_integer(ranks[i]));
        lb_result_set_metric(r, "gpu_util_mean_pct", 90.0 + i, "%");
        lb_result_set_metric(r, "gpu_power_mean_w", 600.0 + i, "W");
        assert_int_equal(lb_store_open(g_db, &s, &e), LB_OK);
        int64_t id2 = -1;
        r->status = LB_RUN_RUNNING;
        assert_int_equal(lb_store_run_begin(s, r, &id2, &e), LB_OK);
        r->status = LB_RUN_OK;
        assert_int_equal(lb_store_run_finish(s, id2, r, &e), LB_OK);
        lb_store_close(s);
        lb_result_free(r);
        snprintf(specs[i], sizeof specs[i], "%lld", (long long)id2);
    }
    char dir[160], md_path[200];
    snprintf(dir, sizeof dir, "%s/scaling", g_dir);
    snprintf(md_path, sizeof md_path, "%s/report.md", dir);
    int rc = run((const char *[]){"report", specs[0], specs[1], specs[2], specs[3], "--out", dir,
                                  "--db", g_db, NULL});
    if (rc != 0) fail_msg("exit %d: %s", rc, err);
    char *md = lb_test_read_file(md_path, NULL);
    assert_non_null(md);
    assert_non_null(strstr(md, "![scaling efficiency"));
    assert_non_null(strstr(md, "![GPU utilisation: gpu_util_mean_pct per configuration"));
    assert_non_null(strstr(md, "![GPU power: gpu_power_mean_w per configuration"));
    assert_null(strstr(md, "these runs measured none"));
    const char *two = strstr(md, "2 ranks scale at ");
    const char *four = strstr(md, "4 ranks scale at ");
    assert_non_null(two);
    assert_non_null(four);
    assert_non_null(strstr(two, "% of 1 rank's throughput per rank."));
    assert_null(strstr(md, "8 ranks scale"));
    double e2 = strtod(two + 17, NULL), e4 = strtod(four + 17, NULL);
    assert_float_equal(e2, 95.0, 1.5);
    assert_float_equal(e4, 90.0, 1.5);
    free(md);
}

/* The line holding p ends with suffix. */
static bool line_ends_with(const char *p, const char *suffix) {
    const char *nl = strchr(p, '\n');
    size_t n = strlen(suffix);
    return nl != NULL && (size_t)(nl - p) >= n && strncmp(nl - n, suffix, n) == 0;
}

/* The exposition has the shape OpenMetrics demands: each family's # TYPE once with all its
 * samples right after it, no sample's name and labels twice, and # EOF last. */
static void check_openmetrics_shape(const char *text) {
    char family[128] = "";
    for (const char *line = text; *line != '\0';) {
        const char *end = strchr(line, '\n');
        assert_non_null(end);
        int len = (int)(end - line);
        if (strncmp(line, "# TYPE ", 7) == 0) {
            snprintf(family, sizeof family, "%.*s", (int)strcspn(line + 7, " "), line + 7);
            char head[160];
            snprintf(head, sizeof head, "# TYPE %s ", family);
            if (count_text(text, head) != 1) fail_msg("%s has more than one # TYPE", family);
        } else if (strncmp(line, "# EOF", 5) == 0) {
            if (end[1] != '\0') fail_msg("lines after # EOF: %s", end + 1);
        } else if (line[0] != '#') {
            size_t name_len = strcspn(line, "{ ");
            if (name_len != strlen(family) || strncmp(line, family, name_len) != 0)
                fail_msg("a sample away from its family %s: %.*s", family, len, line);
            const char *labels_end = strstr(line, "} ");
            assert_true(labels_end != NULL && labels_end < end);
            char series[1024];
            snprintf(series, sizeof series, "\n%.*s ", (int)(labels_end + 1 - line), line);
            if (strstr(text, series) != line - 1) fail_msg("a series twice: %.*s", len, line);
        }
        line = end + 1;
    }
}

/* Runs after the history tests: batch 16's history regressed, batch 32's did not. A load
 * and an infer benchmark share the load generator's key metrics, so one family each. */
static void test_openmetrics_export_labels_newest_values_and_regressions(void **state) {
    (void)state;
    store_run("infer", 8, 10.0, 20, 11, 2e9 + 5);
    char path[160];
    snprintf(path, sizeof path, "%s/llmbench.prom", g_dir);
    int rc = run((const char *[]){"results", "export", "--format", "openmetrics", "--out", path,
                                  "--db", g_db, NULL});
    if (rc != 0) fail_msg("exit %d: %s", rc, err);
    char *text = lb_test_read_file(path, NULL);
    assert_non_null(text);
    const char *reg16 = strstr(text, "llmbench_regression{");
    assert_non_null(reg16);
    const char *line16 = strstr(reg16, "batch=\"16\"");
    assert_non_null(line16);
    assert_true(line_ends_with(line16, "} 1"));
    const char *line32 = strstr(reg16, "batch=\"32\"");
    assert_non_null(line32);
    assert_true(line_ends_with(line32, "} 0"));
    assert_non_null(strstr(text, "# TYPE llmbench_tokens_per_s gauge\n"));
    check_openmetrics_shape(text);
    const char *tok = strstr(text, "# TYPE llmbench_output_tok_per_s gauge\n");
    assert_non_null(tok);
    assert_non_null(strstr(tok, "\n# HELP llmbench_output_tok_per_s output_tok_per_s of the "
                                "newest ok load or infer run of each benchmark\n"));
    const char *next = strstr(tok + 1, "# TYPE ");
    assert_non_null(next);
    const char *load = strstr(tok, ",kind=\"load\""), *infer = strstr(tok, ",kind=\"infer\"");
    assert_true(load != NULL && load < next && infer != NULL && infer < next);
    size_t len = strlen(text);
    assert_true(len > 6 && strcmp(text + len - 6, "# EOF\n") == 0);
    free(text);
    assert_int_equal(run((const char *[]){"results", "export", "3", "--format", "openmetrics",
                                          "--db", g_db, NULL}),
                     2);
    /* an independent parser (Debian's python3-prometheus-client) reads it */
    if (system("/usr/bin/python3 -c 'import prometheus_client' 2>/dev/null") != 0) {
        fprintf(stderr, "python3-prometheus-client is not installed: format not parsed\n");
        return;
    }
    char cmd[512];
    snprintf(cmd, sizeof cmd,
             "/usr/bin/python3 -c \"import sys; from prometheus_client.openmetrics.parser import "
             "text_string_to_metric_families as p; f = list(p(open('%s').read())); "
             "sys.exit(0 if any(x.name == 'llmbench_regression' for x in f) else 1)\"",
             path);
    assert_int_equal(system(cmd), 0);
}

static void test_read_commands_never_create_a_database(void **state) {
    (void)state;
    char typo[160], missing[200], rep[200];
    snprintf(typo, sizeof typo, "%s/typo", g_dir);
    snprintf(missing, sizeof missing, "%s/x.db", typo);
    snprintf(rep, sizeof rep, "%s/rep-of-nothing", g_dir);
    const char *const cases[][8] = {
        {"compare", "1", "2", "--db", missing, NULL},
        {"history", "--db", missing, NULL},
        {"history", "1", "--db", missing, NULL},
        {"report", "1", "--out", rep, "--db", missing, NULL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int rc = run(cases[i]);
        if (rc != 1) fail_msg("%s: exit %d: %s", cases[i][0], rc, err);
        assert_non_null(strstr(err, "no results database at"));
        assert_non_null(strstr(err, missing));
    }
    assert_int_equal(access(typo, F_OK), -1);
    assert_int_equal(access(rep, F_OK), -1);
}

static void test_history_of_an_empty_store_says_so(void **state) {
    (void)state;
    char empty[160];
    snprintf(empty, sizeof empty, "%s/empty.db", g_dir);
    lb_store *s = NULL;
    lb_err e = {{0}};
    assert_int_equal(lb_store_open(empty, &s, &e), LB_OK);
    lb_store_close(s);
    assert_int_equal(run((const char *[]){"history", "--db", empty, NULL}), 0);
    assert_non_null(strstr(out, "no benchmark in"));
    assert_int_equal(run((const char *[]){"history", "--json", "--db", empty, NULL}), 0);
    json_t *doc = json_loads(out, 0, NULL);
    assert_true(json_is_array(doc));
    assert_int_equal(json_array_size(doc), 0);
    json_decref(doc);
}

static void test_history_unknown_metric_names_the_key_metrics(void **state) {
    (void)state;
    int64_t t = store_run("train", 16, 10.0, 5, 6, 3e9);
    char x[24];
    assert_int_equal(
        run((const char *[]){"history", id_text(t, x), "--metric", "nope", "--db", g_db, NULL}), 2);
    assert_non_null(strstr(err, "--metric 'nope' is not a key metric of train runs: expected "
                                "one of tokens_per_s, step_ms_median"));
}

static void test_a_sweep_table_run_is_refused_by_id_naming_the_sweep(void **state) {
    (void)state;
    int64_t t = store_run("train", 32, 10.0, 5, 8, 4e9);
    int64_t sw = store_run("sweep", 32, 10.0, 5, 9, 4e9 + 10);
    char x[24], y[24], rep[160];
    snprintf(rep, sizeof rep, "%s/rep-of-a-table", g_dir);
    assert_int_equal(run((const char *[]){"history", id_text(sw, x), "--db", g_db, NULL}), 2);
    assert_non_null(strstr(err, "is a sweep run, which has no history"));
    assert_int_equal(
        run((const char *[]){"compare", id_text(t, x), id_text(sw, y), "--db", g_db, NULL}), 2);
    assert_non_null(strstr(err, "is the table of sweep 'synthetic'"));
    assert_int_equal(
        run((const char *[]){"report", id_text(sw, x), "--out", rep, "--db", g_db, NULL}), 2);
    assert_non_null(strstr(err, "name the sweep ('synthetic')"));
    assert_int_equal(access(rep, F_OK), -1);
    /* a list of ids that ends with a comma is refused, not read as one id */
    char list[32];
    snprintf(list, sizeof list, "%lld,", (long long)t);
    assert_int_equal(run((const char *[]){"compare", list, id_text(t, y), "--db", g_db, NULL}), 2);
    assert_non_null(strstr(err, "ends with a comma"));
}

/* Load runs have key metrics of their own: their verdicts are words, in text and JSON. */
static void test_load_verdicts_are_named_in_compare_and_history(void **state) {
    (void)state;
    enum { N = 24, STEP = 16 };
    int64_t ids[N];
    lb_rng rng;
    lb_rng_seed(&rng, 29);
    for (int i = 0; i < N; i++) /* from night 16 TTFT is 10% longer */
        ids[i] = store_run("load", 1, (i >= STEP ? 11.0 : 10.0) * (1 + 0.005 * lb_rng_normal(&rng)),
                           200, 700 + (uint64_t)i, 7e9 + 86400.0 * i);
    char x[24], y[24];
    int rc = run((const char *[]){"compare", id_text(ids[0], x), id_text(ids[N - 1], y), "--json",
                                  "--db", g_db, NULL});
    if (rc != 1) fail_msg("exit %d: %s %s", rc, out, err);
    json_t *doc = json_loads(out, 0, NULL);
    assert_non_null(doc);
    json_t *m = find_metric(doc, "ttft_ms");
    assert_non_null(m);
    assert_string_equal(json_string_value(json_object_get(m, "verdict")), "slower");
    assert_true(json_is_true(json_object_get(m, "regression")));
    json_decref(doc);
    rc = run((const char *[]){"compare", id_text(ids[N - 1], x), id_text(ids[0], y), "--db", g_db,
                              NULL});
    assert_int_equal(rc, 0);
    assert_non_null(strstr(out, "  faster\n"));
    assert_null(strstr(out, "(null)"));

    rc = run((const char *[]){"history", id_text(ids[0], x), "--json", "--db", g_db, NULL});
    if (rc != 1) fail_msg("exit %d: %s %s", rc, out, err);
    doc = json_loads(out, 0, NULL);
    assert_non_null(doc);
    json_t *cps = json_object_get(doc, "change_points");
    assert_int_equal(json_array_size(cps), 1);
    json_t *cp = json_array_get(cps, 0);
    assert_int_equal(json_integer_value(json_object_get(cp, "run")), ids[STEP]);
    assert_string_equal(json_string_value(json_object_get(cp, "verdict")), "slower");
    json_decref(doc);
    rc = run((const char *[]){"history", id_text(ids[0], x), "--db", g_db, NULL});
    assert_int_equal(rc, 1);
    assert_non_null(strstr(out, "): slower (regression)\n"));
    assert_null(strstr(out, "(null)"));
}

/* A history whose level was 0 (a link that carried nothing, then 40 GB/s) has no
 * percentage for its change: `history` says "+40 from 0" (it said "+inf%"), its JSON has
 * a null change_pct, and the report's chart marks the change the same way. Own database. */
static void test_history_change_from_zero_is_not_an_infinite_percentage(void **state) {
    (void)state;
    enum { N = 16, STEP = 8 };
    char db[160], dir[160];
    snprintf(db, sizeof db, "%s/from-zero.db", g_dir);
    snprintf(dir, sizeof dir, "%s/from-zero", g_dir);
    lb_store *s = NULL;
    lb_err e = {{0}};
    assert_int_equal(lb_store_open(db, &s, &e), LB_OK);
    int64_t ids[N];
    for (int i = 0; i < N; i++) {
        lb_result *r = lb_result_new("comm", "collectives");
        json_object_set_new(r->config, "collectives", json_string("all_reduce"));
        json_object_set_new(r->config, "ranks", json_integer(2));
        json_object_set_new(r->provenance, "hostname", json_string("testhost"));
        json_object_set_new(r->provenance, "gpus", json_array());
        r->start_wall_s = 8e9 + 86400.0 * i;
        assert_int_equal(lb_store_run_begin(s, r, &ids[i], &e), LB_OK);
        lb_result_set_metric(r, "avg_busbw", i < STEP ? 0.0 : 40.0, "GB/s");
        lb_result_set_metric(r, "wrong_total", 0, "count");
        r->status = LB_RUN_OK;
        r->end_wall_s = r->start_wall_s + 1;
        assert_int_equal(lb_store_run_finish(s, ids[i], r, &e), LB_OK);
        lb_result_free(r);
    }
    lb_store_close(s);
    char x[24];
    int rc = run((const char *[]){"history", id_text(ids[0], x), "--db", db, NULL});
    if (rc != 0) fail_msg("exit %d: %s %s", rc, out, err);
    if (strstr(out, "(+40 from 0): faster\n") == NULL || strstr(out, "inf") != NULL)
        fail_msg("history: %s", out);
    rc = run((const char *[]){"history", id_text(ids[0], x), "--json", "--db", db, NULL});
    if (rc != 0) fail_msg("exit %d: %s %s", rc, out, err);
    json_t *doc = json_loads(out, 0, NULL);
    assert_non_null(doc);
    json_t *cps = json_object_get(doc, "change_points");
    assert_int_equal(json_array_size(cps), 1);
    assert_true(json_is_null(json_object_get(json_array_get(cps, 0), "change_pct")));
    json_decref(doc);
    rc = run((const char *[]){"report", id_text(ids[N - 1], x), "--out", dir, "--db", db, NULL});
    if (rc != 0) fail_msg("exit %d: %s", rc, err);
    char md_path[200], svg_path[200];
    snprintf(md_path, sizeof md_path, "%s/report.md", dir);
    char *md = lb_test_read_file(md_path, NULL);
    assert_non_null(md);
    const char *chart = strstr(md, "![history of avg_busbw");
    assert_non_null(chart);
    int k = 0;
    assert_int_equal(sscanf(strstr(chart, "](chart-") + 8, "%d", &k), 1);
    snprintf(svg_path, sizeof svg_path, "%s/chart-%d.svg", dir, k);
    char *svg = lb_test_read_file(svg_path, NULL);
    assert_non_null(svg);
    assert_int_equal(count_text(svg, "class=\"marker\""), 1);
    if (strstr(svg, "+40 from 0") == NULL || strstr(svg, "inf%") != NULL)
        fail_msg("chart: %s", svg);
    free(svg);
    free(md);
}

/* Two sweeps whose matrices differ in one axis value: the cell both have is compared, and
 * the cells only one has are named, in text and JSON, not silently left out. */
static void test_compare_of_sweeps_names_the_cells_only_one_side_has(void **state) {
    (void)state;
    const char *mon4[] = {"sweep:mon", "sweep-cell:batch=4", NULL};
    const char *mon8[] = {"sweep:mon", "sweep-cell:batch=8", NULL};
    const char *tue4[] = {"sweep:tue", "sweep-cell:batch=4", NULL};
    const char *tue16[] = {"sweep:tue", "sweep-cell:batch=16", NULL};
    store_tagged_run("train", 4, 10.0, 50, 41, 9e9, mon4);
    store_tagged_run("train", 8, 10.0, 50, 42, 9e9 + 1, mon8);
    store_tagged_run("train", 4, 10.0, 50, 43, 9e9 + 2, tue4);
    store_tagged_run("train", 16, 10.0, 50, 44, 9e9 + 3, tue16);
    int rc = run((const char *[]){"compare", "mon", "tue", "--db", g_db, NULL});
    if (rc != 0) fail_msg("exit %d: %s %s", rc, out, err);
    assert_int_equal(count_text(out, "cell batch=4 (A = sweep mon, B = sweep tue)\n"), 1);
    if (strstr(out, "\ncells only in A (sweep mon), not compared: batch=8\n") == NULL ||
        strstr(out, "\ncells only in B (sweep tue), not compared: batch=16\n") == NULL)
        fail_msg("stdout: %s", out);

    rc = run((const char *[]){"compare", "mon", "tue", "--json", "--db", g_db, NULL});
    if (rc != 0) fail_msg("exit %d: %s %s", rc, out, err);
    json_t *doc = json_loads(out, 0, NULL);
    assert_non_null(doc);
    assert_int_equal(json_array_size(json_object_get(doc, "groups")), 1);
    json_t *only_a = json_object_get(doc, "only_in_a"), *only_b = json_object_get(doc, "only_in_b");
    assert_int_equal(json_array_size(only_a), 1);
    assert_string_equal(json_string_value(json_array_get(only_a, 0)), "batch=8");
    assert_int_equal(json_array_size(only_b), 1);
    assert_string_equal(json_string_value(json_array_get(only_b, 0)), "batch=16");
    json_decref(doc);

    /* one sweep against itself: every cell compared, none named */
    rc = run((const char *[]){"compare", "mon", "mon", "--db", g_db, NULL});
    if (rc != 0) fail_msg("exit %d: %s %s", rc, out, err);
    assert_null(strstr(out, "cells only in"));
}

/* Three runs a side, B's throughput 33% lower in every run: the rank test on 3 values
 * against 3 cannot give p below 0.1 (the exact 2/20 of U = 0; the normal approximation's
 * 0.081 claimed more), so at alpha 0.01 tokens_per_s is untested, not "no change"; the
 * pooled step times (9 against 9) do reach it. Alpha 0.1 is still too strict for three
 * runs; with alpha 0.15 they are enough, at p = 0.1. */
static void test_compare_with_too_few_values_to_test_says_untested(void **state) {
    (void)state;
    char a[96] = "", b[96] = "";
    for (int i = 0; i < 3; i++) {
        char id[24];
        sprintf(id, "%s%lld", i ? "," : "",
                (long long)store_run("train", 3, 10.0, 3, 60 + (uint64_t)i, 1e10 + i));
        strcat(a, id);
        sprintf(id, "%s%lld", i ? "," : "",
                (long long)store_run("train", 3, 15.0, 3, 70 + (uint64_t)i, 1e10 + 10 + i));
        strcat(b, id);
    }
    int rc = run((const char *[]){"compare", a, b, "--json", "--db", g_db, NULL});
    if (rc != 1) fail_msg("exit %d: %s %s", rc, out, err);
    json_t *doc = json_loads(out, 0, NULL);
    assert_non_null(doc);
    json_t *tok = find_metric(doc, "tokens_per_s"), *step = find_metric(doc, "step_ms");
    assert_non_null(tok);
    assert_non_null(step);
    assert_string_equal(json_string_value(json_object_get(tok, "verdict")), "untested");
    assert_true(json_is_null(json_object_get(tok, "p")));
    assert_float_equal(json_number_value(json_object_get(tok, "change_pct")), -100.0 / 3, 2.0);
    assert_string_equal(json_string_value(json_object_get(step, "verdict")), "slower");
    json_decref(doc);

    rc = run((const char *[]){"compare", a, b, "--alpha", "0.1", "--json", "--db", g_db, NULL});
    if (rc != 1) fail_msg("exit %d: %s %s", rc, out, err);
    doc = json_loads(out, 0, NULL);
    assert_non_null(doc);
    tok = find_metric(doc, "tokens_per_s");
    assert_string_equal(json_string_value(json_object_get(tok, "verdict")), "untested");
    json_decref(doc);

    rc = run((const char *[]){"compare", a, b, "--alpha", "0.15", "--json", "--db", g_db, NULL});
    if (rc != 1) fail_msg("exit %d: %s %s", rc, out, err);
    doc = json_loads(out, 0, NULL);
    assert_non_null(doc);
    tok = find_metric(doc, "tokens_per_s");
    assert_string_equal(json_string_value(json_object_get(tok, "verdict")), "slower");
    assert_float_equal(json_number_value(json_object_get(tok, "p")), 0.1, 1e-12);
    json_decref(doc);
}

/* Five runs a side, B's throughput 10% lower in every run: the exact p of 5 values apart
 * from 5 is 2/252 = 0.0079, below alpha 0.01, so tokens_per_s is tested and slower (the
 * normal approximation's 0.012 left it untested until 5 against 6). */
static void test_compare_five_runs_a_side_reach_alpha_001(void **state) {
    (void)state;
    char a[128] = "", b[128] = "";
    for (int i = 0; i < 5; i++) {
        sprintf(a + strlen(a), "%s%lld", i ? "," : "",
                (long long)store_run("train", 7, 10.0, 3, 160 + (uint64_t)i, 6e10 + i));
        sprintf(b + strlen(b), "%s%lld", i ? "," : "",
                (long long)store_run("train", 7, 11.0, 3, 170 + (uint64_t)i, 6e10 + 10 + i));
    }
    int rc = run((const char *[]){"compare", a, b, "--json", "--db", g_db, NULL});
    if (rc != 1) fail_msg("exit %d: %s %s", rc, out, err);
    json_t *doc = json_loads(out, 0, NULL);
    assert_non_null(doc);
    json_t *tok = find_metric(doc, "tokens_per_s");
    assert_non_null(tok);
    assert_int_equal(json_integer_value(json_object_get(tok, "n_a")), 5);
    assert_string_equal(json_string_value(json_object_get(tok, "verdict")), "slower");
    assert_float_equal(json_number_value(json_object_get(tok, "p")), 2.0 / 252, 1e-12);
    json_decref(doc);
}

/* Six comm runs a side, wrong_total 0 in every run of A and about 5 in B's: no percentage
 * is of 0, so compare words the change as history does, "+5 from 0" (it said "+inf%"),
 * with a null change_pct and the change itself in JSON; a change from 0 counts whatever the
 * threshold (busbw's +10% does not pass 1000%), and one run a side shows it untested in the
 * same words. Own database. */
static void test_compare_change_from_zero_is_said_as_history_says_it(void **state) {
    (void)state;
    enum { N = 6 };
    static const int wrong_b[N] = {4, 5, 5, 6, 5, 5};
    char db[160], a[128] = "", b[128] = "";
    snprintf(db, sizeof db, "%s/compare-from-zero.db", g_dir);
    lb_store *s = NULL;
    lb_err e = {{0}};
    assert_int_equal(lb_store_open(db, &s, &e), LB_OK);
    for (int i = 0; i < 2 * N; i++) {
        lb_result *r = lb_result_new("comm", "collectives");
        json_object_set_new(r->config, "collectives", json_string("all_reduce"));
        json_object_set_new(r->provenance, "hostname", json_string("testhost"));
        r->start_wall_s = 9e9 + i;
        int64_t id = -1;
        assert_int_equal(lb_store_run_begin(s, r, &id, &e), LB_OK);
        lb_result_set_metric(r, "avg_busbw", (i < N ? 40.0 : 44.0) + 0.1 * (i % N), "GB/s");
        lb_result_set_metric(r, "wrong_total", i < N ? 0 : wrong_b[i - N], "count");
        r->status = LB_RUN_OK;
        r->end_wall_s = r->start_wall_s + 1;
        assert_int_equal(lb_store_run_finish(s, id, r, &e), LB_OK);
        lb_result_free(r);
        char *side = i < N ? a : b;
        sprintf(side + strlen(side), "%s%lld", side[0] ? "," : "", (long long)id);
    }
    lb_store_close(s);

    int rc = run((const char *[]){"compare", a, b, "--db", db, NULL});
    if (rc != 0) fail_msg("exit %d: %s %s", rc, out, err);
    const char *row = strstr(out, "  wrong_total ");
    if (row == NULL || strstr(row, " +5 from 0 ") == NULL || strstr(out, "inf") != NULL)
        fail_msg("compare: %s", out);
    rc = run((const char *[]){"compare", a, b, "--threshold", "1000", "--json", "--db", db, NULL});
    if (rc != 0) fail_msg("exit %d: %s %s", rc, out, err);
    json_t *doc = json_loads(out, 0, NULL);
    assert_non_null(doc);
    json_t *m = find_metric(doc, "wrong_total");
    assert_non_null(m);
    assert_true(json_is_null(json_object_get(m, "change_pct")));
    assert_true(json_is_null(json_object_get(m, "lo_pct")));
    assert_float_equal(json_number_value(json_object_get(m, "change")), 5.0, 1e-9);
    assert_string_equal(json_string_value(json_object_get(m, "verdict")), "more");
    assert_true(json_is_false(json_object_get(m, "regression")));
    /* the same threshold holds back busbw's change, which has a percentage (+10%) */
    m = find_metric(doc, "avg_busbw");
    assert_string_equal(json_string_value(json_object_get(m, "verdict")), "no change");
    json_decref(doc);

    /* one run a side: untested, in the same words */
    *strchr(a, ',') = '\0';
    *strchr(b, ',') = '\0';
    rc = run((const char *[]){"compare", a, b, "--db", db, NULL});
    if (rc != 0) fail_msg("exit %d: %s %s", rc, out, err);
    row = strstr(out, "  wrong_total ");
    if (row == NULL || strstr(row, " +4 from 0 ") == NULL || strstr(out, "inf") != NULL)
        fail_msg("compare: %s", out);
}

/* Stores a train run of batch 5 (store_run's benchmark) as a run imported without its raw
 * samples is: summary metrics (step_ms_median = step_ms) and no step_ms series, ended with
 * status (LB_RUN_RUNNING: begun only, as a crash leaves it). */
static int64_t store_summary_run(double step_ms, lb_run_status status, double start_s) {
    lb_store *s = NULL;
    lb_err e = {{0}};
    assert_int_equal(lb_store_open(g_db, &s, &e), LB_OK);
    lb_result *r = lb_result_new("train", "synthetic");
    json_object_set_new(r->config, "model", json_string("gpt2-tiny"));
    json_object_set_new(r->config, "batch", json_integer(5));
    json_object_set_new(r->provenance, "hostname", json_string("testhost"));
    json_object_set_new(r->provenance, "gpus", json_array());
    r->start_wall_s = start_s;
    int64_t id = -1;
    assert_int_equal(lb_store_run_begin(s, r, &id, &e), LB_OK);
    lb_result_set_metric(r, "tokens_per_s", 1000.0 * 5 / step_ms, "tok/s");
    lb_result_set_metric(r, "step_ms_median", step_ms, "ms");
    r->status = status;
    r->end_wall_s = start_s + 1;
    if (status != LB_RUN_RUNNING) assert_int_equal(lb_store_run_finish(s, id, r, &e), LB_OK);
    lb_result_free(r);
    lb_store_close(s);
    return id;
}

/* Six runs a side, B's imported without step_ms samples and 10% slower: step_ms is not
 * dropped (it was, unsaid) but compared on the runs' step_ms_median values, and the row
 * says so (missing_series in JSON, a note on the line). */
static void test_compare_without_raw_samples_uses_the_runs_values_and_says_so(void **state) {
    (void)state;
    enum { N = 6 };
    char a[128] = "", b[128] = "";
    for (int i = 0; i < N; i++) {
        sprintf(a + strlen(a), "%s%lld", i ? "," : "",
                (long long)store_run("train", 5, 10.0, 50, 80 + (uint64_t)i, 3e10 + i));
        sprintf(b + strlen(b), "%s%lld", i ? "," : "",
                (long long)store_summary_run(11.0 + 0.01 * i, LB_RUN_OK, 3e10 + 10 + i));
    }
    int rc = run((const char *[]){"compare", a, b, "--json", "--db", g_db, NULL});
    if (rc != 1) fail_msg("exit %d: %s %s", rc, out, err);
    json_t *doc = json_loads(out, 0, NULL);
    assert_non_null(doc);
    assert_null(find_metric(doc, "step_ms"));
    json_t *m = find_metric(doc, "step_ms_median");
    if (m == NULL) fail_msg("no step_ms_median row: %s", out);
    assert_string_equal(json_string_value(json_object_get(m, "missing_series")), "step_ms");
    assert_int_equal(json_integer_value(json_object_get(m, "n_a")), N);
    assert_int_equal(json_integer_value(json_object_get(m, "n_b")), N);
    assert_string_equal(json_string_value(json_object_get(m, "verdict")), "slower");
    assert_float_equal(json_number_value(json_object_get(m, "change_pct")), 10.0, 1.0);
    assert_true(json_is_null(json_object_get(find_metric(doc, "tokens_per_s"), "missing_series")));
    json_decref(doc);
    rc = run((const char *[]){"compare", a, b, "--db", g_db, NULL});
    if (rc != 1) fail_msg("exit %d: %s %s", rc, out, err);
    const char *row = strstr(out, "  step_ms_median ");
    if (row == NULL ||
        !line_ends_with(row,
                        "slower (regression) (the runs' values: a run has no step_ms samples)"))
        fail_msg("compare: %s", out);
}

/* A failed, interrupted or still running run named by id is refused (exit 2) with one line
 * naming it and its status, on either side and within a list: its figures are partial. */
static void test_compare_refuses_runs_that_are_not_ok(void **state) {
    (void)state;
    int64_t ok = store_run("train", 5, 10.0, 50, 90, 4e10);
    const struct {
        lb_run_status status;
        const char *name;
    } cases[] = {{LB_RUN_FAILED, "failed"},
                 {LB_RUN_INTERRUPTED, "interrupted"},
                 {LB_RUN_RUNNING, "running"}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int64_t bad = store_summary_run(10.0, cases[i].status, 4e10 + 1 + (double)i);
        char x[24], y[24], list[56], want[96];
        snprintf(list, sizeof list, "%lld,%lld", (long long)ok, (long long)bad);
        snprintf(want, sizeof want,
                 "llmbench compare: run %lld is %s, not ok: compare takes ok runs only\n",
                 (long long)bad, cases[i].name);
        const char *const sides[][2] = {
            {id_text(ok, x), id_text(bad, y)}, {id_text(bad, y), id_text(ok, x)}, {list, x}};
        for (size_t k = 0; k < 3; k++) {
            int rc = run((const char *[]){"compare", sides[k][0], sides[k][1], "--db", g_db, NULL});
            if (rc != 2 || strcmp(err, want) != 0)
                fail_msg("%s, case %zu: exit %d: %s", cases[i].name, k, rc, err);
        }
    }
}

/* A side's runs are pooled: a run named twice would count its samples twice and make a
 * change look more significant than it is. */
static void test_compare_refuses_a_run_named_twice_in_a_side(void **state) {
    (void)state;
    int64_t a = store_run("train", 21, 10.0, 40, 501, 5e9);
    int64_t b = store_run("train", 21, 10.0, 40, 502, 5e9 + 10);
    char list[64], y[24], want[300];
    snprintf(list, sizeof list, "%lld,%lld", (long long)a, (long long)a);
    snprintf(want, sizeof want,
             "llmbench compare: '%s' names run %lld twice: a side's runs are pooled, so a run "
             "named twice would count its samples twice; name each run once\n",
             list, (long long)a);
    int rc = run((const char *[]){"compare", list, id_text(b, y), "--db", g_db, NULL});
    if (rc != 2 || strcmp(err, want) != 0) fail_msg("exit %d: %s", rc, err);
}

/* Ctrl-C while runs load or histories are searched ends the work as interrupted (exit
 * 130), never with a result computed from part of the runs. */
static void test_loading_runs_stops_on_ctrl_c(void **state) {
    (void)state;
    int64_t a = store_run("train", 22, 10.0, 40, 503, 5e9 + 20);
    char x[24];
    lb_store *s = NULL;
    lb_err e = {{0}};
    assert_int_equal(lb_store_open_read(g_db, &s, &e), LB_OK);
    lb_signals_raise(SIGINT);
    lb_run_set set;
    lb_status st_ids = lb_select_runs(s, id_text(a, x), &set, &e);
    lb_select_free(&set);
    lb_history_bench *b = NULL;
    size_t n = 0;
    lb_status st_hist = lb_history_benchmarks(s, &b, &n, &e);
    if (st_hist == LB_OK) free(b);
    lb_signals_reset();
    lb_store_close(s);
    assert_int_equal(st_ids, LB_ERR_INTERRUPTED);
    assert_int_equal(st_hist, LB_ERR_INTERRUPTED);
    assert_int_equal(lb_status_exit_code(st_hist), 130);
}

/* A benchmark key is 12 hex digits: a longer argument is no key (it was cut to 12 and
 * showed that benchmark's history), and an upper-case key is the same key. */
static void test_history_takes_a_whole_key_only(void **state) {
    (void)state;
    int64_t a = store_run("train", 23, 10.0, 40, 504, 5e9 + 30);
    char x[24], key[13], longer[24], upper[13];
    int rc = run((const char *[]){"history", id_text(a, x), "--json", "--db", g_db, NULL});
    if (rc != 0) fail_msg("exit %d: %s", rc, err);
    json_t *doc = json_loads(out, 0, NULL);
    assert_non_null(doc);
    snprintf(key, sizeof key, "%s", json_string_value(json_object_get(doc, "key")));
    json_decref(doc);
    assert_int_equal(strlen(key), 12);
    snprintf(longer, sizeof longer, "%s0", key);
    char want[300];
    snprintf(want, sizeof want,
             "llmbench history: '%s' is neither a run id nor a benchmark key: give a run id (12) "
             "or a key of 12 hex digits as 'llmbench history' lists them\n",
             longer);
    rc = run((const char *[]){"history", longer, "--db", g_db, NULL});
    if (rc != 2 || strcmp(err, want) != 0) fail_msg("exit %d: %s %s", rc, out, err);
    for (size_t i = 0; i < sizeof upper; i++)
        upper[i] = (char)toupper((unsigned char)key[i]);
    rc = run((const char *[]){"history", upper, "--json", "--db", g_db, NULL});
    if (rc != 0) fail_msg("exit %d: %s", rc, err);
    doc = json_loads(out, 0, NULL);
    assert_non_null(doc);
    assert_string_equal(json_string_value(json_object_get(doc, "key")), key);
    json_decref(doc);
}

/* A long value with characters of several bytes is cut between characters, so the
 * identity stays UTF-8: history --json writes it (jansson writes no string that is not). */
static void test_bench_identity_is_cut_between_characters(void **state) {
    (void)state;
    char value[400] = "/x";
    for (int i = 0; i < 150; i++) /* 2 + 300 bytes: a cut at 255 falls inside an e-acute */
        strcat(value, "\xc3\xa9");
    lb_result *r = lb_result_new("train", "t");
    json_object_set_new(r->config, "data", json_string(value));
    lb_bench_field f[LB_BENCH_MAX_FIELDS];
    size_t n = lb_bench_fields(r, f);
    assert_true(n > 0);
    assert_string_equal(f[0].key, "data");
    assert_int_equal(strlen(f[0].value), 2 + 2 * 126);
    json_t *j = json_string(f[0].value);
    assert_non_null(j);
    json_decref(j);
    /* longer than the identity: cut between characters too */
    json_object_set_new(r->config, "model", json_string(value));
    json_object_set_new(r->config, "quant", json_string(value));
    json_object_set_new(r->config, "lora_targets", json_string(value));
    json_object_set_new(r->config, "attention", json_string(value + 1));
    char id[LB_BENCH_ID_BYTES];
    lb_bench_identity(r, id, sizeof id);
    assert_true(strlen(id) >= sizeof id - 2);
    j = json_string(id);
    assert_non_null(j);
    json_decref(j);
    lb_result_free(r);
}

/* A sweep cell's label longer than a label holds is cut between characters: compare
 * --json writes the cell (it was left out, its label no longer UTF-8). */
static void test_compare_of_sweeps_with_a_long_cell_label_is_json(void **state) {
    (void)state;
    char cell[400] = "sweep-cell:xy";
    for (int i = 0; i < 150; i++) /* 2 + 300 bytes: a cut at 255 falls inside an e-acute */
        strcat(cell, "\xc3\xa9");
    const char *tags_a[] = {"sweep:utf-a", cell, NULL}, *tags_b[] = {"sweep:utf-b", cell, NULL};
    store_tagged_run("train", 24, 10.0, 40, 505, 5e9 + 40, tags_a);
    store_tagged_run("train", 24, 10.0, 40, 506, 5e9 + 50, tags_b);
    int rc = run((const char *[]){"compare", "utf-a", "utf-b", "--json", "--db", g_db, NULL});
    if (rc != 0) fail_msg("exit %d: %s %s", rc, out, err);
    json_t *doc = json_loads(out, 0, NULL);
    assert_non_null(doc);
    json_t *groups = json_object_get(doc, "groups");
    assert_int_equal(json_array_size(groups), 1);
    const char *label = json_string_value(json_object_get(json_array_get(groups, 0), "label"));
    assert_non_null(label);
    assert_int_equal(strlen(label), 2 + 2 * 126);
    assert_memory_equal(label, cell + 11, strlen(label));
    json_decref(doc);
}

LB_TEST_DIR_DB_FIXTURE(g_dir, g_db)

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bench_identity_of_train_runs),
        cmocka_unit_test(test_compare_finds_planted_slowdown_and_none_between_equals),
        cmocka_unit_test(test_compare_refuses_missing_runs_and_no_common_metric),
        cmocka_unit_test(test_compare_refuses_a_side_mixing_benchmarks),
        cmocka_unit_test(test_history_finds_the_one_step_and_marks_regression),
        cmocka_unit_test(test_history_one_bad_night_is_not_a_change),
        cmocka_unit_test(test_history_is_in_start_order_not_id_order),
        cmocka_unit_test(test_openmetrics_export_labels_newest_values_and_regressions),
        cmocka_unit_test(test_store_summary_load_skips_samples),
        cmocka_unit_test(test_report_scaling_efficiency_from_rank_counts),
        cmocka_unit_test(test_read_commands_never_create_a_database),
        cmocka_unit_test(test_history_of_an_empty_store_says_so),
        cmocka_unit_test(test_history_unknown_metric_names_the_key_metrics),
        cmocka_unit_test(test_a_sweep_table_run_is_refused_by_id_naming_the_sweep),
        cmocka_unit_test(test_load_verdicts_are_named_in_compare_and_history),
        cmocka_unit_test(test_history_change_from_zero_is_not_an_infinite_percentage),
        cmocka_unit_test(test_compare_of_sweeps_names_the_cells_only_one_side_has),
        cmocka_unit_test(test_compare_with_too_few_values_to_test_says_untested),
        cmocka_unit_test(test_compare_five_runs_a_side_reach_alpha_001),
        cmocka_unit_test(test_compare_change_from_zero_is_said_as_history_says_it),
        cmocka_unit_test(test_compare_without_raw_samples_uses_the_runs_values_and_says_so),
        cmocka_unit_test(test_compare_refuses_runs_that_are_not_ok),
        cmocka_unit_test(test_compare_refuses_a_run_named_twice_in_a_side),
        cmocka_unit_test(test_loading_runs_stops_on_ctrl_c),
        cmocka_unit_test(test_history_takes_a_whole_key_only),
        cmocka_unit_test(test_bench_identity_is_cut_between_characters),
        cmocka_unit_test(test_compare_of_sweeps_with_a_long_cell_label_is_json),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
