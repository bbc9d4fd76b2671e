/* compare.c: metric-by-metric comparison of two sets of runs (compare.h). */
#include "history/compare.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/stats.h"
#include "history/bench.h"
#include "history/stattest.h"

lb_compare_params lb_compare_default_params(void) {
    return (lb_compare_params){.alpha = 0.01, .threshold_pct = 3.0, .conf = 0.95};
}

/* Whether every run of runs[0..n-1] holds raw samples of k's series. */
static bool all_have_series(lb_result *const *runs, size_t n, const lb_key_metric *k) {
    for (size_t i = 0; i < n; i++) {
        const lb_series *s = lb_result_find_series(runs[i], k->series);
        if (s == NULL || s->n == 0) return false;
    }
    return true;
}

/* The pooled values of one side: the series' samples (every run has them: all_have_series),
 * or one metric value per run. */
static double *pool(lb_result *const *runs, size_t n, const lb_key_metric *k, bool series,
                    size_t *out_n, const char **unit) {
    size_t total = 0;
    for (size_t i = 0; i < n; i++)
        total += series ? lb_result_find_series(runs[i], k->series)->n : 1;
    double *v = malloc((total ? total : 1) * sizeof *v);
    if (v == NULL) return NULL;
    size_t m = 0;
    for (size_t i = 0; i < n; i++) {
        if (series) {
            const lb_series *s = lb_result_find_series(runs[i], k->series);
            for (size_t j = 0; j < s->n; j++)
                if (isfinite(s->values[j])) v[m++] = s->values[j];
            *unit = s->unit;
        } else {
            double x = lb_result_metric(runs[i], k->metric);
            if (isfinite(x)) v[m++] = x;
            for (size_t j = 0; j < runs[i]->n_metrics; j++)
                if (strcmp(runs[i]->metrics[j].name, k->metric) == 0)
                    *unit = runs[i]->metrics[j].unit;
        }
    }
    *out_n = m;
    return v;
}

static lb_status compare_one(lb_result *const *a, size_t na, lb_result *const *b, size_t nb,
                             const lb_key_metric *k, const lb_compare_params *p,
                             lb_compare_row *row, bool *found, lb_err *err) {
    /* a run without the series' samples (imported without them): every run's value instead */
    bool series = k->series != NULL && all_have_series(a, na, k) && all_have_series(b, nb, k);
    size_t n_a = 0, n_b = 0;
    const char *unit = "";
    double *va = pool(a, na, k, series, &n_a, &unit), *vb = pool(b, nb, k, series, &n_b, &unit);
    if (va == NULL || vb == NULL) {
        free(va), free(vb);
        return lb_fail(err, LB_ERR_NOMEM, "no memory to compare");
    }
    *found = n_a > 0 && n_b > 0;
    memset(row, 0, sizeof *row);
    snprintf(row->metric, sizeof row->metric, "%s", series ? k->series : k->metric);
    snprintf(row->unit, sizeof row->unit, "%s", unit);
    if (k->series != NULL && !series)
        snprintf(row->missing_series, sizeof row->missing_series, "%s", k->series);
    row->n_a = n_a;
    row->n_b = n_b;
    row->a = lb_stats_median(va, n_a);
    row->b = lb_stats_median(vb, n_b);
    row->change = row->b - row->a;
    /* from a median of 0 no percentage exists (NaN, not inf): the change speaks for itself */
    row->change_pct = row->a != 0 ? 100.0 * row->change / row->a : NAN;
    row->lo_pct = row->hi_pct = row->p = NAN;
    row->verdict = LB_VERDICT_UNTESTED;
    row->word = "untested";
    /* too few values to reach alpha is untested, not "no change" */
    bool testable = (series ? n_a >= 2 && n_b >= 2 : n_a >= 3 && n_b >= 3) &&
                    lb_stattest_mwu_min_p(n_a, n_b) < p->alpha;
    if (*found && testable) {
        lb_mwu_result r;
        lb_status st = lb_stattest_mwu(va, n_a, vb, n_b, p->conf, &r, err);
        if (st != LB_OK) {
            free(va), free(vb);
            return st;
        }
        bool from_zero = r.median_a == 0;
        row->change = r.shift;
        row->change_pct = from_zero ? NAN : 100.0 * r.shift / fabs(r.median_a);
        row->lo_pct = from_zero ? NAN : 100.0 * r.lo / fabs(r.median_a);
        row->hi_pct = from_zero ? NAN : 100.0 * r.hi / fabs(r.median_a);
        row->p = r.p;
        bool big = from_zero ? r.shift != 0 : fabs(row->change_pct) >= p->threshold_pct;
        bool changed = r.p < p->alpha && big;
        bool up = row->change > 0;
        row->verdict = !changed                    ? LB_VERDICT_NONE
                       : up == k->higher_is_better ? LB_VERDICT_BETTER
                                                   : LB_VERDICT_WORSE;
        row->word = row->verdict == LB_VERDICT_NONE     ? "no change"
                    : row->verdict == LB_VERDICT_BETTER ? k->better
                                                        : k->worse;
        row->regression = row->verdict == LB_VERDICT_WORSE && k->performance;
    }
    free(va), free(vb);
    return LB_OK;
}

lb_status lb_compare_runs(lb_result *const *a, size_t na, lb_result *const *b, size_t nb,
                          const lb_compare_params *p, lb_compare_row *rows, size_t *n_rows,
                          size_t cap, lb_err *err) {
    *n_rows = 0;
    if (na == 0 || nb == 0)
        return lb_fail(err, LB_ERR_USAGE, "nothing to compare: a side has no run");
    for (size_t i = 0; i < na + nb; i++) {
        const lb_result *r = i < na ? a[i] : b[i - na];
        if (strcmp(a[0]->kind, r->kind) != 0)
            return lb_fail(err, LB_ERR_USAGE, "runs of different kinds (%s and %s) share no metric",
                           a[0]->kind, r->kind);
    }
    size_t n_keys = 0;
    const lb_key_metric *keys = lb_bench_key_metrics(a[0]->kind, &n_keys);
    for (size_t k = 0; k < n_keys && *n_rows < cap; k++) {
        bool found = false;
        LB_TRY(compare_one(a, na, b, nb, &keys[k], p, &rows[*n_rows], &found, err));
        if (found) (*n_rows)++;
    }
    if (*n_rows == 0)
        return lb_fail(err, LB_ERR_USAGE, "the runs share no key metric of kind %s", a[0]->kind);
    return LB_OK;
}
