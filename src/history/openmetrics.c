/* openmetrics.c: benchmarks as OpenMetrics gauges (openmetrics.h). */
#include "history/openmetrics.h"

#include <math.h>
#include <stdlib.h>

#include "core/metrics_text.h"
#include "history/bench.h"
#include "history/history.h"

static void labels(FILE *f, const lb_history_bench *b, const lb_result *r) {
    lb_bench_field fields[LB_BENCH_MAX_FIELDS];
    size_t n = lb_bench_fields(r, fields);
    fprintf(f, "{benchmark=\"%s\",kind=\"%s\"", b->key, b->kind);
    for (size_t i = 0; i < n; i++) {
        fprintf(f, ",%s=\"", fields[i].key);
        lb_metrics_text_label_value(f, fields[i].value);
        fputc('"', f);
    }
    fprintf(f, ",run=\"%lld\"}", (long long)b->last_id);
}

/* One family per key metric name, written when the first kind that has it comes up: kinds
 * that share a metric (load and infer share all theirs) share its family, and every
 * benchmark of any of them is one sample, its labels (benchmark first) telling them apart. */
static void key_metric_families(FILE *out, const lb_history_bench *b, lb_result *const *last,
                                size_t n) {
    const char *const *kinds = lb_bench_kinds;
    for (size_t k = 0; kinds[k] != NULL; k++) {
        size_t n_keys = 0;
        const lb_key_metric *keys = lb_bench_key_metrics(kinds[k], &n_keys);
        for (size_t m = 0; m < n_keys; m++) {
            const char *metric = keys[m].metric;
            size_t first = 0;
            while (lb_history_metric(kinds[first], metric) == NULL)
                first++;
            if (first != k) continue;      /* written with an earlier kind */
            char with[64] = "", help[160]; /* with: "load or infer", all four kinds fit */
            for (size_t j = k, len = 0; kinds[j] != NULL; j++)
                if (lb_history_metric(kinds[j], metric) != NULL)
                    len += (size_t)snprintf(with + len, sizeof with - len, "%s%s",
                                            len ? " or " : "", kinds[j]);
            snprintf(help, sizeof help, "%s of the newest ok %s run of each benchmark", metric,
                     with);
            bool header = false;
            for (size_t i = 0; i < n; i++) {
                if (lb_history_metric(b[i].kind, metric) == NULL) continue;
                double v = lb_result_metric(last[i], metric);
                if (!isfinite(v)) continue;
                if (!header)
                    lb_metrics_text_family(out, LB_METRICS_TEXT_OPENMETRICS, metric, "gauge", NULL,
                                           help);
                header = true;
                lb_metrics_text_name(out, metric);
                labels(out, &b[i], last[i]);
                fprintf(out, " %.17g %.3f\n", v, last[i]->start_wall_s);
            }
        }
    }
}

lb_status lb_openmetrics_write(lb_store *s, double threshold_pct, FILE *out, lb_err *err) {
    lb_history_bench *b = NULL;
    size_t n = 0;
    LB_TRY(lb_history_benchmarks(s, &b, &n, err));
    lb_result **last = calloc(n ? n : 1, sizeof *last);
    bool *regressed = calloc(n ? n : 1, sizeof *regressed);
    lb_status st = last && regressed ? LB_OK : lb_fail(err, LB_ERR_NOMEM, "no memory for metrics");
    for (size_t i = 0; st == LB_OK && i < n; i++) {
        st = lb_store_run_load_summary(s, b[i].last_id, &last[i], err);
        lb_history_point *pts = NULL;
        size_t np = 0;
        lb_history_bench same;
        if (st == LB_OK) st = lb_history_points(s, b[i].key, NULL, &same, &pts, &np, err);
        lb_history_change ch[64];
        size_t nc = 0;
        lb_changepoint_params cp = lb_changepoint_default_params();
        if (st == LB_OK)
            st = lb_history_changes(pts, np, lb_history_metric(b[i].kind, NULL), threshold_pct, &cp,
                                    ch, &nc, 64, err);
        regressed[i] = st == LB_OK && nc > 0 && ch[nc - 1].regression;
        free(pts);
    }
    if (st == LB_OK) key_metric_families(out, b, last, n);
    if (st == LB_OK && n > 0) {
        lb_metrics_text_family(out, LB_METRICS_TEXT_OPENMETRICS, "run_start_seconds", "gauge",
                               "seconds", "when the newest ok run of each benchmark started");
        for (size_t i = 0; i < n; i++) {
            fputs("llmbench_run_start_seconds", out);
            labels(out, &b[i], last[i]);
            fprintf(out, " %.3f\n", last[i]->start_wall_s);
        }
        lb_metrics_text_family(
            out, LB_METRICS_TEXT_OPENMETRICS, "regression", "gauge", NULL,
            "1 when the newest change point of the benchmark's history is a regression");
        for (size_t i = 0; i < n; i++) {
            fputs("llmbench_regression", out);
            labels(out, &b[i], last[i]);
            fprintf(out, " %d\n", regressed[i] ? 1 : 0);
        }
    }
    if (st == LB_OK) lb_metrics_text_end(out, LB_METRICS_TEXT_OPENMETRICS);
    for (size_t i = 0; last && i < n; i++)
        lb_result_free(last[i]);
    free(last), free(regressed), free(b);
    return st;
}
