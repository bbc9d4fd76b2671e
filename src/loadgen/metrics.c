/* metrics.c: from per-query records to the summary and the MLPerf verdict (metrics.h). */
#include "loadgen/metrics.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/stats.h"

const double lb_loadgen_pctl_levels[LB_N_PCTL] = {50.0, 90.0, 95.0, 97.0, 99.0, 99.9};

const char *lb_loadgen_scenario_name(lb_scenario s) {
    switch (s) {
    case LB_SCENARIO_OFFLINE: return "Offline";
    case LB_SCENARIO_SERVER: return "Server";
    case LB_SCENARIO_SINGLE_STREAM: return "SingleStream";
    case LB_SCENARIO_CONCURRENCY: return "Concurrency";
    }
    return "unknown";
}

const char *lb_loadgen_mode_name(lb_mode m) {
    return m == LB_MODE_ACCURACY ? "AccuracyOnly" : "PerformanceOnly";
}

lb_constraints lb_loadgen_constraints_default(void) {
    return (lb_constraints){.ttft_limit_ms = 0,
                            .tpot_limit_ms = 0,
                            .percentile = 99.0,
                            .confidence = 0.99,
                            .slo_ttft_ms = 0,
                            .slo_tpot_ms = 0};
}

/* MLPerf Inference datacenter Server bounds (p99 TTFT, p99 TPOT) per benchmark. */
static const struct {
    const char *key;
    double ttft_ms, tpot_ms;
} model_bounds[] = {
    {"llama3.1-8b", 2000, 100},   {"llama3.1-8b-interactive", 500, 30},
    {"llama2-70b", 2000, 200},    {"llama2-70b-interactive", 450, 40},
    {"llama3.1-405b", 6000, 175}, {"llama3.1-405b-interactive", 4500, 80},
};

lb_status lb_loadgen_constraints_for_model(const char *key, lb_constraints *out, lb_err *err) {
    *out = lb_loadgen_constraints_default();
    char known[256] = "";
    for (size_t i = 0; i < sizeof model_bounds / sizeof model_bounds[0]; i++) {
        if (strcmp(key, model_bounds[i].key) == 0) {
            out->ttft_limit_ms = model_bounds[i].ttft_ms;
            out->tpot_limit_ms = model_bounds[i].tpot_ms;
            return LB_OK;
        }
        size_t len = strlen(known);
        snprintf(known + len, sizeof known - len, "%s%s", i ? ", " : "", model_bounds[i].key);
    }
    return lb_fail(err, LB_ERR_USAGE,
                   "model key '%s' is not one of %s (or give --ttft-limit-ms "
                   "and --tpot-limit-ms)",
                   key, known);
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Summary of x[0..n) ignoring NaNs; sorts x in place. */
static lb_dist dist_of(double *x, size_t n) {
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (!isnan(x[i])) x[k++] = x[i];
    lb_dist d = {.n = k, .min = NAN, .max = NAN, .mean = NAN};
    for (int i = 0; i < LB_N_PCTL; i++)
        d.p[i] = NAN;
    if (k == 0) return d;
    qsort(x, k, sizeof *x, cmp_double);
    d.min = x[0];
    d.max = x[k - 1];
    d.mean = lb_stats_mean(x, k);
    for (int i = 0; i < LB_N_PCTL; i++)
        d.p[i] = lb_stats_percentile_sorted(x, k, lb_loadgen_pctl_levels[i]);
    return d;
}

static double pctl_of(const lb_dist *d, double q) {
    for (int i = 0; i < LB_N_PCTL; i++)
        if (lb_loadgen_pctl_levels[i] == q) return d->p[i];
    return NAN;
}

static void add_reason(lb_loadgen_summary *s, const char *fmt, ...) {
    size_t len = strlen(s->reasons);
    if (len + 3 >= sizeof s->reasons) return;
    if (len > 0) {
        memcpy(s->reasons + len, "; ", 3);
        len += 2;
    }
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(s->reasons + len, sizeof s->reasons - len, fmt, ap);
    va_end(ap);
}

static double ms(int64_t ns) {
    return (double)ns / 1e6;
}

const char *lb_loadgen_token_count_name(lb_token_count c) {
    switch (c) {
    case LB_TOKENS_USAGE: return "usage";
    case LB_TOKENS_TOKENIZER: return "tokenizer";
    case LB_TOKENS_CHUNKS: return "chunks";
    case LB_TOKENS_UNKNOWN: return "unknown";
    case LB_TOKENS_COUNT: break;
    }
    return "?";
}

lb_status lb_loadgen_query_count_output(lb_query *q, int64_t usage_tokens, bool streamed,
                                        const lb_tokenizer *tok, const char *text, size_t text_len,
                                        lb_err *err) {
    int64_t n = -1;
    lb_token_count c = LB_TOKENS_UNKNOWN;
    if (usage_tokens >= 0) {
        n = usage_tokens;
        c = LB_TOKENS_USAGE;
    } else if (tok != NULL && text != NULL) {
        LB_TRY(lb_tokenizer_count(tok, text, text_len, &n, err));
        c = LB_TOKENS_TOKENIZER;
    } else if (streamed) {
        n = q->n_chunks;
        c = LB_TOKENS_CHUNKS;
    }
    q->output_tokens = n > INT32_MAX ? INT32_MAX : (int32_t)n;
    q->counted = (uint8_t)c;
    return LB_OK;
}

/* TTFT, TPOT of one completed query (ms); TPOT is NaN below two tokens. */
static double query_ttft(const lb_query *q) {
    return ms(q->first_ns - q->scheduled_ns);
}
static double query_tpot(const lb_query *q) {
    if (q->output_tokens < 2) return NAN;
    return ms(q->done_ns - q->first_ns) / (double)(q->output_tokens - 1);
}

static void verdict(const lb_query *q, size_t n, lb_loadgen_summary *s, double *a, double *b) {
    const lb_constraints *c = &s->constraints;
    double p = c->percentile / 100.0;
    s->no_failures = s->failed == 0 && s->completed == s->issued;
    if (!s->no_failures) {
        char list[256] = "";
        for (int e = 1; e < LB_QERR_COUNT; e++) {
            if (s->failures[e] == 0) continue;
            size_t len = strlen(list);
            snprintf(list + len, sizeof list - len, "%s%s %lld", len ? ", " : "",
                     lb_http_qerr_name((lb_qerr)e), (long long)s->failures[e]);
        }
        add_reason(s, "%lld of %lld queries did not complete (%s)",
                   (long long)(s->issued - s->completed), (long long)s->issued,
                   list[0] ? list : "unfinished");
    }
    s->perf_ok = s->min_duration_ok = s->min_queries_ok = s->early_stop_ok = true;
    s->es_ttft = s->es_tpot = s->es_latency =
        (lb_early_stop){.ok = true, .n = s->issued, .estimate = NAN};
    if (s->mode == LB_MODE_ACCURACY) {
        s->valid = s->no_failures;
        return;
    }
    /* Per issued query: TTFT and TPOT, a failed query counting as over every bound. */
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (!q[i].issued) continue;
        bool ok = q[i].finished && q[i].error == LB_QERR_NONE;
        a[k] = ok ? query_ttft(&q[i]) : INFINITY;
        double tp = ok ? query_tpot(&q[i]) : INFINITY;
        b[k] = isnan(tp) ? 0.0 : tp;
        k++;
    }
    if (s->scenario == LB_SCENARIO_SERVER) {
        double pt = pctl_of(&s->ttft_ms, c->percentile), pp = pctl_of(&s->tpot_ms, c->percentile);
        if (c->ttft_limit_ms > 0 && !(pt <= c->ttft_limit_ms)) {
            s->perf_ok = false;
            add_reason(s, "p%g TTFT %.1f ms exceeds the %.0f ms bound: reduce --qps", c->percentile,
                       pt, c->ttft_limit_ms);
        }
        if (c->tpot_limit_ms > 0 && !(pp <= c->tpot_limit_ms)) {
            s->perf_ok = false;
            add_reason(s, "p%g TPOT %.2f ms exceeds the %.0f ms bound: reduce --qps", c->percentile,
                       pp, c->tpot_limit_ms);
        }
        if (c->ttft_limit_ms > 0)
            s->es_ttft = lb_early_stop_check(a, k, c->ttft_limit_ms, p, c->confidence);
        if (c->tpot_limit_ms > 0)
            s->es_tpot = lb_early_stop_check(b, k, c->tpot_limit_ms, p, c->confidence);
        s->early_stop_ok = s->es_ttft.ok && s->es_tpot.ok;
        if (!s->early_stop_ok)
            add_reason(s,
                       "early stopping needs %lld queries for the TTFT bound and %lld for the "
                       "TPOT bound, %lld were issued",
                       (long long)s->es_ttft.needed, (long long)s->es_tpot.needed,
                       (long long)s->issued);
    } else if (s->scenario != LB_SCENARIO_OFFLINE) {
        /* Percentile estimates: latency at p90 (MLPerf SingleStream), TTFT and TPOT at p. */
        qsort(a, k, sizeof *a, cmp_double);
        s->es_ttft = lb_early_stop_estimate(a, k, p, c->confidence);
        qsort(b, k, sizeof *b, cmp_double);
        s->es_tpot = lb_early_stop_estimate(b, k, p, c->confidence);
        size_t m = 0;
        for (size_t i = 0; i < n; i++) {
            if (!q[i].issued) continue;
            bool ok = q[i].finished && q[i].error == LB_QERR_NONE;
            a[m++] = ok ? ms(q[i].done_ns - q[i].scheduled_ns) : INFINITY;
        }
        qsort(a, m, sizeof *a, cmp_double);
        s->es_latency = lb_early_stop_estimate(a, m, 0.90, c->confidence);
        s->early_stop_ok = s->es_latency.ok;
        if (!s->early_stop_ok)
            add_reason(s, "early stopping needs at least %lld queries, %lld were issued",
                       (long long)s->es_latency.needed, (long long)s->issued);
    }
    double reached = s->scenario == LB_SCENARIO_SERVER    ? s->final_scheduled_s
                     : s->scenario == LB_SCENARIO_OFFLINE ? s->duration_s
                                                          : s->final_issued_s;
    if (!(reached >= s->min_duration_s)) {
        s->min_duration_ok = false;
        add_reason(s, "ran %.1f s of the %.1f s minimum: %s", reached, s->min_duration_s,
                   s->scenario == LB_SCENARIO_OFFLINE ? "raise --min-queries"
                                                      : "raise --min-duration");
    }
    if (s->issued < s->min_queries) {
        s->min_queries_ok = false;
        add_reason(s, "issued %lld of the %lld minimum queries", (long long)s->issued,
                   (long long)s->min_queries);
    }
    s->valid =
        s->perf_ok && s->min_duration_ok && s->min_queries_ok && s->early_stop_ok && s->no_failures;
}

lb_status lb_loadgen_summarize(const lb_query *q, size_t n, const float *gaps_ms, size_t n_gaps,
                               lb_loadgen_summary *s) {
    size_t cap = n > n_gaps ? n : n_gaps;
    double *a = malloc((cap ? cap : 1) * sizeof *a), *b = malloc((n ? n : 1) * sizeof *b);
    if (a == NULL || b == NULL) {
        free(a);
        free(b);
        return LB_ERR_NOMEM;
    }
    s->issued = s->completed = s->failed = s->retries = 0;
    memset(s->failures, 0, sizeof s->failures);
    s->output_tokens = s->input_tokens = 0;
    memset(s->counted, 0, sizeof s->counted);
    s->input_tokens_known = true;
    s->reasons[0] = '\0';
    int64_t last_done = 0, last_sched = 0, last_sent = 0;
    for (size_t i = 0; i < n; i++) {
        const lb_query *x = &q[i];
        if (!x->issued) continue;
        s->issued++;
        if (x->attempts > 1) s->retries += x->attempts - 1;
        if (x->scheduled_ns > last_sched) last_sched = x->scheduled_ns;
        if (x->sent_ns > last_sent) last_sent = x->sent_ns;
        if (!x->finished) continue;
        if (x->done_ns > last_done) last_done = x->done_ns;
        if (x->error != LB_QERR_NONE) {
            s->failed++;
            s->failures[x->error < LB_QERR_COUNT ? x->error : LB_QERR_OTHER]++;
            continue;
        }
        s->completed++;
        s->counted[x->counted < LB_TOKENS_COUNT ? x->counted : LB_TOKENS_UNKNOWN]++;
        if (x->output_tokens >= 0) s->output_tokens += x->output_tokens;
        if (x->input_tokens >= 0)
            s->input_tokens += x->input_tokens;
        else
            s->input_tokens_known = false;
    }
    size_t used = 0;
    for (int k = 0; k < LB_TOKENS_COUNT; k++) {
        if (s->counted[k] == 0) continue;
        used += (size_t)snprintf(s->token_source + used, sizeof s->token_source - used, "%s%s",
                                 used ? "+" : "", lb_loadgen_token_count_name((lb_token_count)k));
    }
    if (used == 0) snprintf(s->token_source, sizeof s->token_source, "none");
    /* One answer of unknown length makes every token rate unknown, not low. */
    bool out_known = s->counted[LB_TOKENS_UNKNOWN] == 0;
    s->duration_s = ms(last_done) / 1e3;
    s->final_scheduled_s = ms(last_sched) / 1e3;
    s->final_issued_s = ms(last_sent) / 1e3;
    double dur = s->duration_s > 0 ? s->duration_s : NAN;
    s->samples_per_s = (double)s->completed / dur;
    s->output_tok_per_s = out_known ? (double)s->output_tokens / dur : NAN;
    s->total_tok_per_s = s->input_tokens_known && out_known
                             ? (double)(s->output_tokens + s->input_tokens) / dur
                             : NAN;
    switch (s->scenario) {
    case LB_SCENARIO_SERVER: s->mlperf_samples_per_s = (double)(s->completed - 1) / dur; break;
    case LB_SCENARIO_SINGLE_STREAM:
    case LB_SCENARIO_CONCURRENCY:
        s->mlperf_samples_per_s =
            s->final_issued_s > 0 ? (double)(s->completed - 1) / s->final_issued_s : NAN;
        break;
    case LB_SCENARIO_OFFLINE: s->mlperf_samples_per_s = s->samples_per_s; break;
    }
    s->scheduled_qps =
        s->final_scheduled_s > 0 ? (double)(s->issued - 1) / s->final_scheduled_s : NAN;

    /* Distributions over completed queries. */
    const lb_constraints *c = &s->constraints;
    size_t k = 0;
    s->good = 0;
    for (size_t i = 0; i < n; i++) {
        if (!q[i].finished || q[i].error != LB_QERR_NONE) continue;
        double ttft = query_ttft(&q[i]), tpot = query_tpot(&q[i]);
        bool good = (c->slo_ttft_ms <= 0 || ttft <= c->slo_ttft_ms) &&
                    (c->slo_tpot_ms <= 0 || isnan(tpot) || tpot <= c->slo_tpot_ms);
        s->good += good;
        a[k] = ttft;
        b[k] = tpot;
        k++;
    }
    s->goodput_per_s = (double)s->good / dur;
    s->ttft_ms = dist_of(a, k);
    s->tpot_ms = dist_of(b, k);
    k = 0;
    for (size_t i = 0; i < n; i++)
        if (q[i].finished && q[i].error == LB_QERR_NONE)
            a[k++] = ms(q[i].done_ns - q[i].scheduled_ns);
    s->latency_ms = dist_of(a, k);
    k = 0;
    for (size_t i = 0; i < n; i++)
        if (q[i].finished && q[i].error == LB_QERR_NONE)
            a[k++] = ms(q[i].sent_ns - q[i].scheduled_ns);
    s->queue_ms = dist_of(a, k);
    k = 0;
    for (size_t i = 0; i < n; i++)
        if (q[i].issued && q[i].scheduled_send && q[i].sent_ns > 0)
            a[k++] = ms(q[i].sent_ns - q[i].scheduled_ns);
    s->send_lag_ms = dist_of(a, k);
    k = 0;
    for (size_t i = 0; i < n; i++)
        if (q[i].issued && q[i].scheduled_send && q[i].handover_ns > 0)
            a[k++] = ms(q[i].handover_ns - q[i].scheduled_ns);
    s->handover_lag_ms = dist_of(a, k);
    for (size_t i = 0; i < n_gaps; i++)
        a[i] = gaps_ms[i];
    s->itl_ms = dist_of(a, n_gaps);

    verdict(q, n, s, a, b);
    free(a);
    free(b);
    return LB_OK;
}

static lb_status put(lb_result *r, const char *prefix, const char *name, double v,
                     const char *unit) {
    char full[LB_NAME_BYTES];
    snprintf(full, sizeof full, "%s%s", prefix, name);
    return lb_result_set_metric(r, full, v, unit);
}

static lb_status put_dist(lb_result *r, const char *prefix, const char *base, const lb_dist *d) {
    static const char *const tags[LB_N_PCTL] = {"p50", "p90", "p95", "p97", "p99", "p99_9"};
    char name[LB_NAME_BYTES];
    snprintf(name, sizeof name, "%s_mean_ms", base);
    LB_TRY(put(r, prefix, name, d->mean, "ms"));
    snprintf(name, sizeof name, "%s_min_ms", base);
    LB_TRY(put(r, prefix, name, d->min, "ms"));
    snprintf(name, sizeof name, "%s_max_ms", base);
    LB_TRY(put(r, prefix, name, d->max, "ms"));
    for (int i = 0; i < LB_N_PCTL; i++) {
        snprintf(name, sizeof name, "%s_%s_ms", base, tags[i]);
        LB_TRY(put(r, prefix, name, d->p[i], "ms"));
    }
    return LB_OK;
}

lb_status lb_loadgen_summary_to_result(const lb_loadgen_summary *s, const char *prefix,
                                       lb_result *r) {
    LB_TRY(put(r, prefix, "samples_per_s", s->samples_per_s, "samples/s"));
    LB_TRY(put(r, prefix, "output_tok_per_s", s->output_tok_per_s, "tok/s"));
    LB_TRY(put(r, prefix, "total_tok_per_s", s->total_tok_per_s, "tok/s"));
    LB_TRY(put(r, prefix, "goodput_per_s", s->goodput_per_s, "samples/s"));
    LB_TRY(put(r, prefix, "mlperf_samples_per_s", s->mlperf_samples_per_s, "samples/s"));
    if (s->scenario == LB_SCENARIO_SERVER) {
        LB_TRY(put(r, prefix, "target_qps", s->target_qps, "queries/s"));
        LB_TRY(put(r, prefix, "scheduled_qps", s->scheduled_qps, "queries/s"));
    }
    LB_TRY(put(r, prefix, "issued", (double)s->issued, "queries"));
    LB_TRY(put(r, prefix, "completed", (double)s->completed, "queries"));
    LB_TRY(put(r, prefix, "failed", (double)s->failed, "queries"));
    LB_TRY(put(r, prefix, "retries", (double)s->retries, "attempts"));
    LB_TRY(put(r, prefix, "connections_preopened", (double)s->preconnected, "connections"));
    LB_TRY(put(r, prefix, "connections_opened", (double)s->new_connections, "attempts"));
    for (int e = 1; e < LB_QERR_COUNT; e++) {
        if (s->failures[e] == 0) continue;
        char name[LB_NAME_BYTES];
        snprintf(name, sizeof name, "failed_%s", lb_http_qerr_name((lb_qerr)e));
        LB_TRY(put(r, prefix, name, (double)s->failures[e], "queries"));
    }
    LB_TRY(put(r, prefix, "output_tokens", (double)s->output_tokens, "tokens"));
    LB_TRY(
        put(r, prefix, "output_tokens_unknown", (double)s->counted[LB_TOKENS_UNKNOWN], "queries"));
    LB_TRY(put(r, prefix, "duration_s", s->duration_s, "s"));
    LB_TRY(put_dist(r, prefix, "ttft", &s->ttft_ms));
    LB_TRY(put_dist(r, prefix, "tpot", &s->tpot_ms));
    LB_TRY(put_dist(r, prefix, "itl", &s->itl_ms));
    LB_TRY(put_dist(r, prefix, "latency", &s->latency_ms));
    LB_TRY(put_dist(r, prefix, "queue", &s->queue_ms));
    LB_TRY(put_dist(r, prefix, "send_lag", &s->send_lag_ms));
    LB_TRY(put_dist(r, prefix, "handover_lag", &s->handover_lag_ms));
    LB_TRY(put(r, prefix, "valid", s->valid ? 1.0 : 0.0, "bool"));
    LB_TRY(
        put(r, prefix, "early_stop_needed_queries",
            (double)(s->es_ttft.needed > s->es_tpot.needed ? s->es_ttft.needed : s->es_tpot.needed),
            "queries"));
    for (size_t i = 0; i < s->n_replicas; i++) {
        char name[LB_NAME_BYTES];
        snprintf(name, sizeof name, "replica%zu_completed", i);
        LB_TRY(put(r, prefix, name, (double)s->replicas[i].completed, "attempts"));
        snprintf(name, sizeof name, "replica%zu_failed", i);
        LB_TRY(put(r, prefix, name, (double)s->replicas[i].failed, "attempts"));
    }
    return LB_OK;
}
