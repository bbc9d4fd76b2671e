/* cmd_history.c: `llmbench history [RUN|KEY]`: the benchmarks of the store, or one
 * benchmark's runs over time with its change points (history/history.h). Exit 1 when the
 * newest change point is a regression (the benchmark is worse now than before it). */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/args.h"
#include "cli/commands.h"
#include "core/clock.h"
#include "core/result.h"
#include "history/bench.h"
#include "history/history.h"

#define MAX_CHANGES 64

static int list_benchmarks(lb_store *s, bool json) {
    lb_history_bench *b = NULL;
    size_t n = 0;
    lb_err err = {{0}};
    lb_status st = lb_history_benchmarks(s, &b, &n, &err);
    if (st != LB_OK) {
        fprintf(stderr, "llmbench history: %s\n", err.msg);
        return lb_status_exit_code(st);
    }
    json_t *arr = json_array();
    if (!json && n == 0)
        printf("no benchmark in %s: it holds no ok run of train, infer, load or comm\n",
               lb_store_path(s));
    else if (!json)
        printf("%-12s %5s %-20s %s\n", "benchmark", "runs", "last run", "identity");
    for (size_t i = 0; i < n; i++) {
        char when[40];
        lb_clock_format_iso(b[i].last_wall_s, when, sizeof when);
        if (json)
            json_array_append_new(arr, json_pack("{s:s, s:s, s:s, s:I, s:I, s:f}", "key", b[i].key,
                                                 "kind", b[i].kind, "identity", b[i].identity,
                                                 "runs", (json_int_t)b[i].n_runs, "last_id",
                                                 (json_int_t)b[i].last_id, "last_wall_s",
                                                 b[i].last_wall_s));
        else
            printf("%-12s %5zu %-20.19s %s\n", b[i].key, b[i].n_runs, when, b[i].identity);
    }
    if (json) {
        json_dumpf(arr, stdout, JSON_INDENT(2));
        printf("\n");
    }
    json_decref(arr);
    free(b);
    return 0;
}

/* --metric names no key metric of kind: the sentence lists the ones it has. */
static lb_status unknown_metric(const char *metric, const char *kind, lb_err *err) {
    size_t n = 0;
    const lb_key_metric *keys = lb_bench_key_metrics(kind, &n);
    char list[256] = "";
    size_t len = 0;
    for (size_t i = 0; i < n && len < sizeof list; i++)
        len +=
            (size_t)snprintf(list + len, sizeof list - len, "%s%s", i ? ", " : "", keys[i].metric);
    return lb_fail(err, LB_ERR_USAGE,
                   "--metric '%s' is not a key metric of %s runs: expected one of %s", metric, kind,
                   list);
}

int lb_cmd_history(int argc, char **argv) {
    const char *metric = NULL;
    double threshold = 3.0;
    const lb_arg_spec specs[] = {
        {"--metric", LB_ARG_STRING, &metric, "NAME",
         "key metric to follow (default the kind's first: tokens_per_s for train, "
         "output_tok_per_s for load and infer, avg_busbw for comm)"},
        {"--threshold", LB_ARG_DOUBLE, &threshold, "PCT",
         "smallest change that counts as a regression, in percent (default 3)", 0, 1000},
    };
    const lb_cli_command cmd = {
        .command = "history",
        .uses_db = true,
        .usage = "[RUN|KEY] [options]",
        .summary =
            "Without an argument: the benchmarks of the store (a benchmark is the command, the "
            "options that shape the work, the GPU model and count, and the host), each with its "
            "key. With a run id or a key: that benchmark's ok runs, oldest first, and the change "
            "points of one metric found by E-divisive means (a level that moved for 3 runs or "
            "more, also one that came back later, not one noisy night), each with the means "
            "before and after. Exit 1 when the newest change point is a regression of at least "
            "--threshold percent, 0 otherwise, 2 for an unknown run, key or metric, 130 when "
            "interrupted (Ctrl-C: nothing printed).",
        LB_ARG_SPECS(specs),
        .max_positional = 1,
    };
    lb_args a;
    int rc = lb_args_parse(&cmd, argc, argv, &a);
    if (rc != LB_ARGS_GO_ON) return rc;
    lb_err err = {{0}};
    lb_store *s = NULL;
    if (lb_store_open_read(a.common.db_path, &s, &err) != LB_OK) {
        fprintf(stderr, "llmbench history: %s\n", err.msg);
        return 1;
    }
    if (a.n_pos == 0) {
        rc = list_benchmarks(s, a.common.json);
        lb_store_close(s);
        return rc;
    }
    char key[13];
    const char *arg = a.pos[0];
    size_t len = strlen(arg);
    bool is_id = len > 0 && strspn(arg, "0123456789") == len && len < 12;
    bool is_key = len == 12 && strspn(arg, "0123456789abcdefABCDEF") == len;
    lb_status st = LB_OK;
    if (is_id) {
        st = lb_history_key_of_run(s, strtoll(arg, NULL, 10), key, &err);
    } else if (is_key) {
        for (size_t i = 0; i <= len; i++)
            key[i] = (char)tolower((unsigned char)arg[i]);
    } else {
        char shown[LB_ERR_MSG_BYTES];
        snprintf(shown, sizeof shown, "%s", arg);
        st = lb_fail(&err, LB_ERR_USAGE,
                     "'%s' is neither a run id nor a benchmark key: give a run id (12) or a key "
                     "of 12 hex digits as 'llmbench history' lists them",
                     lb_status_printable(shown));
    }
    lb_history_bench bench;
    lb_history_point *pts = NULL;
    size_t n = 0;
    const lb_key_metric *k = NULL;
    if (st == LB_OK) st = lb_history_points(s, key, metric, &bench, &pts, &n, &err);
    if (st == LB_OK && (k = lb_history_metric(bench.kind, metric)) == NULL)
        st = unknown_metric(metric, bench.kind, &err);
    lb_history_change changes[MAX_CHANGES];
    size_t n_changes = 0;
    lb_changepoint_params cp = lb_changepoint_default_params();
    if (st == LB_OK)
        st = lb_history_changes(pts, n, k, threshold, &cp, changes, &n_changes, MAX_CHANGES, &err);
    lb_store_close(s);
    if (st != LB_OK) {
        free(pts);
        fprintf(stderr, "llmbench history: %s\n", err.msg);
        return lb_status_exit_code(st);
    }
    bool regressed = n_changes > 0 && changes[n_changes - 1].regression;
    if (a.common.json) {
        json_t *points = json_array(), *cps = json_array();
        for (size_t i = 0; i < n; i++)
            json_array_append_new(points, json_pack("{s:I, s:f, s:o}", "id", (json_int_t)pts[i].id,
                                                    "start_wall_s", pts[i].start_wall_s, "value",
                                                    lb_result_json_number(pts[i].value)));
        for (size_t c = 0; c < n_changes; c++)
            json_array_append_new(
                cps, json_pack("{s:I, s:I, s:o, s:o, s:o, s:s, s:b}", "index",
                               (json_int_t)changes[c].index, "run", (json_int_t)changes[c].run_id,
                               "before", lb_result_json_number(changes[c].before), "after",
                               lb_result_json_number(changes[c].after), "change_pct",
                               lb_result_json_number(changes[c].change_pct), "verdict",
                               changes[c].word, "regression", changes[c].regression));
        json_t *doc = json_pack("{s:s, s:s, s:s, s:s, s:o, s:o, s:b}", "key", bench.key, "kind",
                                bench.kind, "identity", bench.identity, "metric", k->metric,
                                "points", points, "change_points", cps, "regression", regressed);
        json_dumpf(doc, stdout, JSON_INDENT(2));
        printf("\n");
        json_decref(doc);
    } else {
        printf("benchmark %s: %s\nmetric %s, %zu runs\n", bench.key, bench.identity, k->metric, n);
        size_t c = 0;
        for (size_t i = 0; i < n; i++) {
            char when[40];
            lb_clock_format_iso(pts[i].start_wall_s, when, sizeof when);
            bool at = c < n_changes && changes[c].index == i;
            printf("  %-20.19s run %-6lld %14.6g%s\n", when, (long long)pts[i].id, pts[i].value,
                   at ? "  <- change point" : "");
            if (at) c++;
        }
        for (c = 0; c < n_changes; c++) {
            char size[48];
            printf("change at run %lld: %.6g -> %.6g (%s): %s%s\n", (long long)changes[c].run_id,
                   changes[c].before, changes[c].after,
                   lb_history_change_text(&changes[c], size, sizeof size), changes[c].word,
                   changes[c].regression ? " (regression)" : "");
        }
        if (n_changes == 0) printf("no change point\n");
    }
    free(pts);
    return regressed ? 1 : 0;
}
