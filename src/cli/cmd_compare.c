/* cmd_compare.c: `llmbench compare A B`: two runs, two sets of repeats or two sweeps
 * (cell by cell), metric by metric, with a rank test on the raw samples
 * (history/compare.h). Exit 1 when a performance metric got worse beyond the threshold,
 * so cron and CI can act on it; 2 when the runs do not exist, are not ok or share no
 * metric. The database is opened read-only: a mistyped --db is an error, never a new empty
 * file. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "cli/args.h"
#include "cli/commands.h"
#include "core/result.h"
#include "history/bench.h"
#include "history/compare.h"
#include "history/history.h"
#include "history/select.h"
#include "store/store.h"

#define MAX_ROWS 32

static json_t *ids_json(const lb_run_group *g) {
    json_t *a = json_array();
    for (size_t i = 0; i < g->n; i++)
        json_array_append_new(a, json_integer(g->ids[i]));
    return a;
}

/* The change of row r as history words it (lb_history_change_text): "+8.0%", or from a
 * median of 0 the change itself, "+5 from 0". Returns buf. */
static const char *change_text(const lb_compare_row *r, char *buf, size_t cap) {
    const lb_history_change h = {
        .before = r->a, .after = r->a + r->change, .change_pct = r->change_pct};
    return lb_history_change_text(&h, buf, cap);
}

static void print_rows(const lb_compare_row *rows, size_t n) {
    printf("  %-20s %-8s %6s %6s %12s %12s %12s %21s %9s  %s\n", "metric", "unit", "n A", "n B",
           "A median", "B median", "change", "interval", "p", "verdict");
    for (size_t i = 0; i < n; i++) {
        const lb_compare_row *r = &rows[i];
        char interval[48] = "-", p[16] = "-", change[32];
        if (isfinite(r->lo_pct))
            snprintf(interval, sizeof interval, "[%+.1f%%, %+.1f%%]", r->lo_pct, r->hi_pct);
        if (isfinite(r->p)) snprintf(p, sizeof p, "%.2g", r->p);
        printf("  %-20s %-8s %6zu %6zu %12.5g %12.5g %12s %21s %9s  %s%s", r->metric, r->unit,
               r->n_a, r->n_b, r->a, r->b, change_text(r, change, sizeof change), interval, p,
               r->word, r->regression ? " (regression)" : "");
        if (r->missing_series[0])
            printf(" (the runs' values: a run has no %s samples)", r->missing_series);
        printf("\n");
    }
}

/* LB_ERR_USAGE when the runs of group g (side A or B) are not all one benchmark: their
 * samples are pooled as repeats of one configuration, and runs of two would be compared as
 * one bimodal sample. */
static lb_status check_repeats(const lb_run_group *g, const char *side, lb_err *err) {
    for (size_t i = 1; i < g->n; i++) {
        char differ[512];
        lb_bench_differences(g->runs[0], g->runs[i], differ, sizeof differ, NULL);
        if (strcmp(g->runs[0]->kind, g->runs[i]->kind) != 0)
            snprintf(differ, sizeof differ, "a %s run and a %s run", g->runs[0]->kind,
                     g->runs[i]->kind);
        if (differ[0])
            return lb_fail(err, LB_ERR_USAGE,
                           "%s (%s): runs %lld and %lld are different benchmarks (%s), and a "
                           "side's runs are pooled as repeats of one: compare one configuration "
                           "at a time",
                           side, g->label, (long long)g->ids[0], (long long)g->ids[i], differ);
    }
    return LB_OK;
}

/* LB_ERR_USAGE when a list of ids names a run twice: a side's runs are pooled, and a run
 * named twice would count its samples twice, making a change look more significant. */
static lb_status check_once(const lb_run_set *set, lb_err *err) {
    for (size_t g = 0; g < set->n_groups; g++)
        for (size_t i = 0; i < set->groups[g].n; i++)
            for (size_t j = 0; j < i; j++)
                if (set->groups[g].ids[i] == set->groups[g].ids[j])
                    return lb_fail(err, LB_ERR_USAGE,
                                   "'%s' names run %lld twice: a side's runs are pooled, so a run "
                                   "named twice would count its samples twice; name each run once",
                                   set->name, (long long)set->groups[g].ids[i]);
    return LB_OK;
}

/* LB_ERR_USAGE naming the first run of set that is not ok (failed, interrupted or still
 * running): its figures are partial or none, so it is no side of a comparison. */
static lb_status check_ok(const lb_run_set *set, lb_err *err) {
    for (size_t g = 0; g < set->n_groups; g++)
        for (size_t i = 0; i < set->groups[g].n; i++) {
            lb_run_status status = set->groups[g].runs[i]->status;
            if (status != LB_RUN_OK)
                return lb_fail(err, LB_ERR_USAGE,
                               "run %lld is %s, not ok: compare takes ok runs only",
                               (long long)set->groups[g].ids[i], lb_result_status_name(status));
        }
    return LB_OK;
}

/* The group of set labelled label (a sweep's cell), NULL when it has none. */
static const lb_run_group *find_cell(const lb_run_set *set, const char *label) {
    for (size_t k = 0; k < set->n_groups; k++)
        if (strcmp(set->groups[k].label, label) == 0) return &set->groups[k];
    return NULL;
}

/* Two sweeps: the cells of set that other lacks, which are not compared, as a new JSON
 * array of labels, with a line naming them on stdout when print is true and there are any
 * ("cells only in A (sweep mon), not compared: x, y"). Runs against runs: an empty array. */
static json_t *cells_only_in(const lb_run_set *set, const char *side, const lb_run_set *other,
                             bool print) {
    json_t *labels = json_array();
    for (size_t g = 0; set->sweep && other->sweep && g < set->n_groups; g++) {
        const char *label = set->groups[g].label;
        if (find_cell(other, label) != NULL) continue;
        if (print && json_array_size(labels) == 0)
            printf("cells only in %s (sweep %s), not compared: %s", side, set->name, label);
        else if (print)
            printf(", %s", label);
        json_array_append_new(labels, json_string(label));
    }
    if (print && json_array_size(labels) > 0) printf("\n");
    return labels;
}

static json_t *rows_json(const lb_compare_row *rows, size_t n) {
    json_t *a = json_array();
    for (size_t i = 0; i < n; i++) {
        const lb_compare_row *r = &rows[i];
        json_array_append_new(
            a, json_pack("{s:s, s:s, s:o, s:I, s:I, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:s, s:b}",
                         "metric", r->metric, "unit", r->unit, "missing_series",
                         r->missing_series[0] ? json_string(r->missing_series) : json_null(), "n_a",
                         (json_int_t)r->n_a, "n_b", (json_int_t)r->n_b, "a",
                         lb_result_json_number(r->a), "b", lb_result_json_number(r->b), "change",
                         lb_result_json_number(r->change), "change_pct",
                         lb_result_json_number(r->change_pct), "lo_pct",
                         lb_result_json_number(r->lo_pct), "hi_pct",
                         lb_result_json_number(r->hi_pct), "p", lb_result_json_number(r->p),
                         "verdict", r->word, "regression", r->regression));
    }
    return a;
}

int lb_cmd_compare(int argc, char **argv) {
    lb_compare_params p = lb_compare_default_params();
    const lb_arg_spec specs[] = {
        {"--threshold", LB_ARG_DOUBLE, &p.threshold_pct, "PCT",
         "smallest change that counts, in percent (default 3)", 0, 1000},
        {"--alpha", LB_ARG_DOUBLE, &p.alpha, "X",
         "significance level of the rank test (default 0.01)", 1e-12, 0.5},
    };
    const lb_cli_command cmd = {
        .command = "compare",
        .uses_db = true,
        .usage = "A B [options]",
        .summary = "Compares runs B with runs A. A and B are each a run id (12), a list of ids of "
                   "repeats of one benchmark (12,13,14) or a sweep's name (two sweeps are "
                   "compared cell by cell). "
                   "Each key metric with raw samples (step times, latencies) is decided by a "
                   "Mann-Whitney U test on the pooled samples, its change given as the "
                   "Hodges-Lehmann shift with a 95% interval (when a run has no samples of it, "
                   "the runs' values are tested instead, and the line says so); other metrics "
                   "on the runs' values. A change counts when p < alpha and "
                   "it is at least --threshold percent (from A's median of 0, which no "
                   "percentage is of, any change counts, shown as '+5 from 0'). Exit 1 when a "
                   "performance metric got "
                   "worse (a regression), 0 otherwise, 2 when a run does not exist or is not ok "
                   "(failed, interrupted, still running), a side names a run twice or its runs "
                   "are different benchmarks, or the runs share no metric, 130 when interrupted "
                   "(Ctrl-C: nothing printed).",
        LB_ARG_SPECS(specs),
        .min_positional = 2,
        .max_positional = 2,
    };
    lb_args a;
    int rc = lb_args_parse(&cmd, argc, argv, &a);
    if (rc != LB_ARGS_GO_ON) return rc;
    lb_err err = {{0}};
    lb_store *s = NULL;
    lb_run_set A = {0}, B = {0};
    lb_status st = lb_store_open_read(a.common.db_path, &s, &err);
    if (st == LB_OK) st = lb_select_runs(s, a.pos[0], &A, &err);
    if (st == LB_OK) st = lb_select_runs(s, a.pos[1], &B, &err);
    if (st == LB_OK) st = check_once(&A, &err);
    if (st == LB_OK) st = check_once(&B, &err);
    if (st == LB_OK) st = check_ok(&A, &err);
    if (st == LB_OK) st = check_ok(&B, &err);
    if (st == LB_OK && A.sweep != B.sweep && (A.n_groups > 1 || B.n_groups > 1))
        st = lb_fail(&err, LB_ERR_USAGE,
                     "compare a sweep with a sweep (cell by cell) or runs with runs; '%s' is a "
                     "sweep of %zu cells",
                     A.sweep ? a.pos[0] : a.pos[1], A.sweep ? A.n_groups : B.n_groups);
    json_t *groups = json_array();
    bool regression = false;
    size_t compared = 0;
    for (size_t g = 0; st == LB_OK && g < A.n_groups; g++) {
        const lb_run_group *ga = &A.groups[g], *gb = NULL;
        if (A.sweep && B.sweep) {
            gb = find_cell(&B, ga->label);
            if (gb == NULL) continue;
        } else {
            gb = &B.groups[0];
        }
        lb_compare_row rows[MAX_ROWS];
        size_t n = 0;
        st = check_repeats(ga, "A", &err);
        if (st == LB_OK) st = check_repeats(gb, "B", &err);
        if (st == LB_OK)
            st = lb_compare_runs(ga->runs, ga->n, gb->runs, gb->n, &p, rows, &n, MAX_ROWS, &err);
        if (st != LB_OK) break;
        compared++;
        for (size_t i = 0; i < n; i++)
            regression |= rows[i].regression;
        char differ[512];
        json_t *diff_json = json_array(); /* where B's benchmark differs from A's */
        lb_bench_differences(ga->runs[0], gb->runs[0], differ, sizeof differ, diff_json);
        if (!a.common.json) {
            if (A.sweep && B.sweep)
                printf("cell %s (A = sweep %s, B = sweep %s)\n", ga->label, A.name, B.name);
            else
                printf("%s: A = %s, B = %s\n", ga->runs[0]->kind, ga->label, gb->label);
            if (differ[0]) printf("  different benchmarks: %s\n", differ);
            print_rows(rows, n);
        }
        json_array_append_new(groups,
                              json_pack("{s:s, s:o, s:o, s:o, s:o}", "label", ga->label, "a_runs",
                                        ids_json(ga), "b_runs", ids_json(gb), "differences",
                                        diff_json, "metrics", rows_json(rows, n)));
    }
    if (st == LB_OK && compared == 0)
        st = lb_fail(&err, LB_ERR_USAGE, "sweeps '%s' and '%s' share no cell", a.pos[0], a.pos[1]);
    if (st == LB_OK) {
        json_t *only_a = cells_only_in(&A, "A", &B, !a.common.json);
        json_t *only_b = cells_only_in(&B, "B", &A, !a.common.json);
        if (a.common.json) {
            json_t *doc =
                json_pack("{s:s, s:s, s:f, s:f, s:b, s:o, s:o, s:o}", "a", a.pos[0], "b", a.pos[1],
                          "alpha", p.alpha, "threshold_pct", p.threshold_pct, "regression",
                          regression, "groups", groups, "only_in_a", only_a, "only_in_b", only_b);
            json_dumpf(doc, stdout, JSON_INDENT(2));
            printf("\n");
            json_decref(doc);
            groups = NULL;
        } else {
            json_decref(only_a);
            json_decref(only_b);
            printf("%s\n", regression ? "regression: B is worse than A beyond the threshold"
                                      : "no regression");
        }
    }
    json_decref(groups);
    lb_select_free(&A);
    lb_select_free(&B);
    lb_store_close(s);
    if (st != LB_OK) {
        fprintf(stderr, "llmbench compare: %s\n", err.msg);
        return lb_status_exit_code(st);
    }
    return regression ? 1 : 0;
}
