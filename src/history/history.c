/* history.c: benchmarks over time (history.h). */
#include "history/history.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/signals.h"
#include "core/stats.h"

/* Calls fn for every ok run with key metrics, oldest first, with its identity and key. */
typedef lb_status (*visit_fn)(void *ctx, const lb_store_run_info *info, const lb_result *r,
                              const char *identity, const char *key, lb_err *err);

/* Newest start first, the higher id first among runs that started together. */
static int started_later_first(const void *x, const void *y) {
    const lb_store_run_info *a = x, *b = y;
    if (a->start_wall_s != b->start_wall_s) return a->start_wall_s < b->start_wall_s ? 1 : -1;
    return (a->id < b->id) - (a->id > b->id);
}

static lb_status visit_runs(lb_store *s, visit_fn fn, void *ctx, lb_err *err) {
    lb_store_filter f = lb_store_default_filter();
    f.status = LB_RUN_OK;
    lb_store_run_info *list = NULL;
    size_t n = 0;
    LB_TRY(lb_store_list(s, &f, &list, &n, err));
    /* the store lists by id; an imported run has a new id and its old start */
    if (n > 1) qsort(list, n, sizeof *list, started_later_first);
    lb_status st = LB_OK;
    static char identity[LB_BENCH_ID_BYTES];
    for (size_t i = n; i-- > 0 && st == LB_OK;) {
        size_t n_keys = 0;
        lb_bench_key_metrics(list[i].kind, &n_keys);
        if (n_keys == 0) continue;
        if (lb_signals_interrupted()) {
            st = lb_fail(err, LB_ERR_INTERRUPTED, "interrupted while reading the store's runs");
            break;
        }
        lb_result *r = NULL;
        if ((st = lb_store_run_load_summary(s, list[i].id, &r, err)) != LB_OK) break;
        char key[13];
        lb_bench_identity(r, identity, sizeof identity);
        lb_bench_key(identity, key);
        st = fn(ctx, &list[i], r, identity, key, err);
        lb_result_free(r);
    }
    free(list);
    return st;
}

typedef struct {
    lb_history_bench *b;
    size_t n;
} bench_list;

/* Counts run r into b (described by it when it is b's first). */
static void bench_count(lb_history_bench *b, const lb_store_run_info *info, const lb_result *r,
                        const char *identity, const char *key) {
    if (b->n_runs == 0) {
        snprintf(b->key, sizeof b->key, "%s", key);
        snprintf(b->kind, sizeof b->kind, "%s", r->kind);
        snprintf(b->identity, sizeof b->identity, "%s", identity);
    }
    b->n_runs++;
    b->last_id = info->id;
    b->last_wall_s = info->start_wall_s;
}

static lb_status add_bench(void *ctx, const lb_store_run_info *info, const lb_result *r,
                           const char *identity, const char *key, lb_err *err) {
    bench_list *L = ctx;
    lb_history_bench *b = NULL;
    for (size_t i = 0; i < L->n; i++)
        if (strcmp(L->b[i].key, key) == 0) b = &L->b[i];
    if (b == NULL) {
        lb_history_bench *grown = realloc(L->b, (L->n + 1) * sizeof *grown);
        if (grown == NULL) return lb_fail(err, LB_ERR_NOMEM, "no memory for the history");
        L->b = grown;
        b = &L->b[L->n++];
        memset(b, 0, sizeof *b);
    }
    bench_count(b, info, r, identity, key);
    return LB_OK;
}

static int newest_first(const void *x, const void *y) {
    double a = ((const lb_history_bench *)x)->last_wall_s;
    double b = ((const lb_history_bench *)y)->last_wall_s;
    return (a < b) - (a > b);
}

lb_status lb_history_benchmarks(lb_store *s, lb_history_bench **out, size_t *n, lb_err *err) {
    bench_list L = {0};
    lb_status st = visit_runs(s, add_bench, &L, err);
    if (st != LB_OK) {
        free(L.b);
        return st;
    }
    if (L.n > 1) qsort(L.b, L.n, sizeof *L.b, newest_first);
    *out = L.b;
    *n = L.n;
    return LB_OK;
}

lb_status lb_history_key_of_run(lb_store *s, int64_t id, char key_out[13], lb_err *err) {
    bool exists = false;
    LB_TRY(lb_store_run_exists(s, id, &exists, err));
    if (!exists)
        return lb_fail(err, LB_ERR_USAGE, "run %lld does not exist in %s", (long long)id,
                       lb_store_path(s));
    lb_result *r = NULL;
    LB_TRY(lb_store_run_load_summary(s, id, &r, err));
    size_t n_keys = 0;
    lb_bench_key_metrics(r->kind, &n_keys);
    if (n_keys == 0) {
        lb_status st = lb_fail(err, LB_ERR_USAGE,
                               "run %lld is a %s run, which has no history: a history follows "
                               "the runs of train, load, infer or comm%s",
                               (long long)id, r->kind,
                               strcmp(r->kind, "sweep") == 0
                                   ? " (a sweep's cells are; 'llmbench history' lists them)"
                                   : "");
        lb_result_free(r);
        return st;
    }
    static char identity[LB_BENCH_ID_BYTES];
    lb_bench_identity(r, identity, sizeof identity);
    lb_bench_key(identity, key_out);
    lb_result_free(r);
    return LB_OK;
}

typedef struct {
    const char *key, *metric;
    lb_history_bench *bench;
    lb_history_point *p;
    size_t n;
} point_list;

static lb_status add_point(void *ctx, const lb_store_run_info *info, const lb_result *r,
                           const char *identity, const char *key, lb_err *err) {
    point_list *L = ctx;
    if (strcmp(key, L->key) != 0) return LB_OK;
    bench_count(L->bench, info, r, identity, key);
    const lb_key_metric *first = lb_history_metric(r->kind, NULL);
    double v = lb_result_metric(r, L->metric ? L->metric : first->metric);
    if (!isfinite(v)) return LB_OK;
    lb_history_point *grown = realloc(L->p, (L->n + 1) * sizeof *grown);
    if (grown == NULL) return lb_fail(err, LB_ERR_NOMEM, "no memory for the history");
    L->p = grown;
    L->p[L->n++] = (lb_history_point){info->id, info->start_wall_s, v};
    return LB_OK;
}

lb_status lb_history_points(lb_store *s, const char *key, const char *metric,
                            lb_history_bench *bench, lb_history_point **out, size_t *n,
                            lb_err *err) {
    memset(bench, 0, sizeof *bench);
    point_list L = {.key = key, .metric = metric, .bench = bench};
    lb_status st = visit_runs(s, add_point, &L, err);
    if (st == LB_OK && bench->n_runs == 0)
        st = lb_fail(err, LB_ERR_USAGE,
                     "no benchmark '%s' in %s (see 'llmbench history' for the list)", key,
                     lb_store_path(s));
    if (st != LB_OK) {
        free(L.p);
        return st;
    }
    *out = L.p;
    *n = L.n;
    return LB_OK;
}

const lb_key_metric *lb_history_metric(const char *kind, const char *metric) {
    size_t n = 0;
    const lb_key_metric *keys = lb_bench_key_metrics(kind, &n);
    for (size_t i = 0; i < n; i++)
        if (metric == NULL || strcmp(keys[i].metric, metric) == 0) return &keys[i];
    return NULL;
}

lb_status lb_history_changes(const lb_history_point *pts, size_t n, const lb_key_metric *k,
                             double threshold_pct, const lb_changepoint_params *cp,
                             lb_history_change *out, size_t *n_out, size_t cap, lb_err *err) {
    *n_out = 0;
    double *x = malloc((n ? n : 1) * sizeof *x);
    size_t *cps = malloc((n ? n : 1) * sizeof *cps);
    if (x == NULL || cps == NULL) {
        free(x), free(cps);
        return lb_fail(err, LB_ERR_NOMEM, "no memory for the history");
    }
    for (size_t i = 0; i < n; i++)
        x[i] = pts[i].value;
    size_t n_cps = 0;
    lb_status st = lb_changepoint_find(x, n, cp, cps, &n_cps, n ? n : 1, err);
    /* the newest cap of them: the newest decides whether the benchmark regressed */
    for (size_t c = n_cps > cap ? n_cps - cap : 0; st == LB_OK && c < n_cps; c++) {
        size_t from = c == 0 ? 0 : cps[c - 1], at = cps[c], to = c + 1 < n_cps ? cps[c + 1] : n;
        lb_history_change *h = &out[(*n_out)++];
        h->index = at;
        h->run_id = pts[at].id;
        h->before = lb_stats_mean(x + from, at - from);
        h->after = lb_stats_mean(x + at, to - at);
        double delta = h->after - h->before;
        /* from 0 there is no percentage (NaN, not inf), and any change is a big one */
        h->change_pct = h->before != 0 ? 100.0 * delta / fabs(h->before) : NAN;
        bool worse = (delta > 0) != k->higher_is_better;
        bool big = h->before != 0 ? fabs(h->change_pct) >= threshold_pct : delta != 0;
        h->regression = big && worse && k->performance;
        h->word = !big ? "small change" : worse ? k->worse : k->better;
    }
    free(x), free(cps);
    return st;
}

const char *lb_history_change_text(const lb_history_change *h, char *buf, size_t cap) {
    if (h->before != 0)
        snprintf(buf, cap, "%+.1f%%", h->change_pct);
    else
        snprintf(buf, cap, "%+.4g from 0", h->after - h->before);
    return buf;
}

lb_status lb_history_check_run(lb_store *s, int64_t id, double threshold_pct, FILE *f,
                               bool *regressed, lb_err *err) {
    char key[13];
    LB_TRY(lb_history_key_of_run(s, id, key, err));
    lb_history_bench bench;
    lb_history_point *pts = NULL;
    size_t n = 0;
    LB_TRY(lb_history_points(s, key, NULL, &bench, &pts, &n, err));
    const lb_key_metric *k = lb_history_metric(bench.kind, NULL);
    lb_history_change ch[64];
    size_t n_ch = 0;
    lb_changepoint_params cp = lb_changepoint_default_params();
    lb_status st = lb_history_changes(pts, n, k, threshold_pct, &cp, ch, &n_ch, 64, err);
    free(pts);
    LB_TRY(st);
    *regressed = n_ch > 0 && ch[n_ch - 1].regression;
    if (n_ch == 0)
        fprintf(f, "run %lld, benchmark %s: no change point in %zu runs of %s\n", (long long)id,
                key, n, k->metric);
    else {
        char size[48];
        fprintf(f,
                "run %lld, benchmark %s: newest change point at run %lld, %s %.4g -> %.4g "
                "(%s): %s%s\n",
                (long long)id, key, (long long)ch[n_ch - 1].run_id, k->metric, ch[n_ch - 1].before,
                ch[n_ch - 1].after, lb_history_change_text(&ch[n_ch - 1], size, sizeof size),
                ch[n_ch - 1].word, *regressed ? " (regression)" : "");
    }
    return LB_OK;
}
