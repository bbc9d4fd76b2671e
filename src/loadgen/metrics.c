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

/* Summary of x[0..n) ignoring NaNs, at the fixed levels and s's chosen ones; sorts x in
 * place. */
static lb_dist dist_of(const lb_loadgen_summary *s, double *x, size_t n) {
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (!isnan(x[i])) x[k++] = x[i];
    lb_dist d = {.n = k, .min = NAN, .max = NAN, .mean = NAN, .std = NAN};
    for (int i = 0; i < LB_N_PCTL; i++)
        d.p[i] = NAN;
    for (int i = 0; i < LB_MAX_USER_PCTL; i++)
        d.user_p[i] = NAN;
    if (k == 0) return d;
    qsort(x, k, sizeof *x, cmp_double);
    d.min = x[0];
    d.max = x[k - 1];
    d.mean = lb_stats_mean(x, k);
    d.std = lb_stats_std(x, k);
    for (int i = 0; i < LB_N_PCTL; i++)
        d.p[i] = lb_stats_percentile_rank_sorted(x, k, lb_loadgen_pctl_levels[i]);
    for (int i = 0; i < s->n_user_pctl; i++)
        d.user_p[i] = lb_stats_percentile_rank_sorted(x, k, s->user_pctl[i]);
    return d;
}

/* Appends a sentence to list (a buffer of cap bytes), after sep when not the first. */
static void append_to(char *list, size_t cap, const char *sep, const char *fmt, va_list ap) {
    size_t len = strlen(list), sl = strlen(sep);
    if (len + sl + 1 >= cap) return;
    if (len > 0) {
        memcpy(list + len, sep, sl + 1);
        len += sl;
    }
    vsnprintf(list + len, cap - len, fmt, ap);
}

static void add_reason(lb_loadgen_summary *s, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void add_reason(lb_loadgen_summary *s, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    append_to(s->reasons, sizeof s->reasons, "; ", fmt, ap);
    va_end(ap);
}

static void add_warning(lb_loadgen_summary *s, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void add_warning(lb_loadgen_summary *s, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    append_to(s->warnings, sizeof s->warnings, "\n", fmt, ap);
    va_end(ap);
    s->n_warnings++;
}

/* "drop 3, http_5xx 1": the non-zero counts of by[], by reason. */
static void reason_list(const int64_t *by, char *out, size_t cap) {
    out[0] = '\0';
    for (int e = 1; e < LB_QERR_COUNT; e++) {
        if (by[e] == 0) continue;
        size_t len = strlen(out);
        snprintf(out + len, cap - len, "%s%s %lld", len ? ", " : "", lb_http_qerr_name((lb_qerr)e),
                 (long long)by[e]);
    }
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
                                        const char *reasoning, size_t reasoning_len, lb_err *err) {
    int64_t n = -1;
    lb_token_count c = LB_TOKENS_UNKNOWN;
    if (usage_tokens >= 0) {
        n = usage_tokens;
        c = LB_TOKENS_USAGE;
    } else if (tok != NULL && text != NULL) {
        int64_t thinking = 0;
        LB_TRY(lb_tokenizer_count(tok, text, text_len, &n, err));
        if (reasoning != NULL)
            LB_TRY(lb_tokenizer_count(tok, reasoning, reasoning_len, &thinking, err));
        n += thinking;
        c = LB_TOKENS_TOKENIZER;
    } else if (streamed) {
        n = q->n_chunks;
        c = LB_TOKENS_CHUNKS;
    }
    q->output_tokens = n > INT32_MAX ? INT32_MAX : (int32_t)n;
    q->counted = (uint8_t)c;
    return LB_OK;
}

/* TTFT, TPOT of one completed query (ms); NaN when the answer was not streamed (not
 * measured), TPOT also below two tokens. */
static double query_ttft(const lb_query *q, bool streamed) {
    return streamed ? ms(q->first_ns - q->scheduled_ns) : NAN;
}
static double query_tpot(const lb_query *q, bool streamed) {
    if (!streamed || q->output_tokens < 2) return NAN;
    return ms(q->done_ns - q->first_ns) / (double)(q->output_tokens - 1);
}

static void verdict(const lb_query *q, size_t n, lb_loadgen_summary *s, double *a, double *b) {
    const lb_constraints *c = &s->constraints;
    double p = c->percentile / 100.0;
    s->no_failures = s->failed == 0 && s->completed == s->issued;
    if (!s->no_failures) {
        char list[256];
        reason_list(s->failures, list, sizeof list);
        add_reason(s, "%lld of %lld queries did not complete (%s)",
                   (long long)(s->issued - s->completed), (long long)s->issued,
                   list[0] ? list : "unfinished");
    }
    s->perf_ok = s->min_duration_ok = s->min_queries_ok = s->early_stop_ok = true;
    s->es_ttft = s->es_tpot = s->es_latency =
        (lb_early_stop){.ok = true, .n = s->issued, .estimate = NAN};
    s->target_latency_ms = s->target_ttft_ms = NAN;
    if (s->mode == LB_MODE_ACCURACY) {
        s->valid = s->no_failures;
        return;
    }
    /* Per issued query: TTFT and TPOT, a failed query counting as over every bound. */
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (!q[i].issued) continue;
        bool ok = q[i].finished && q[i].error == LB_QERR_NONE;
        a[k] = ok ? query_ttft(&q[i], s->streamed) : INFINITY;
        double tp = ok ? query_tpot(&q[i], s->streamed) : INFINITY;
        b[k] = isnan(tp) ? 0.0 : tp;
        k++;
    }
    if (s->scenario == LB_SCENARIO_SERVER && !s->streamed &&
        (c->ttft_limit_ms > 0 || c->tpot_limit_ms > 0)) {
        /* Not measured is not met: the bounds are on times a whole answer hides. */
        s->perf_ok = s->early_stop_ok = false;
        add_reason(s, "TTFT and TPOT are not measured with whole answers (--no-stream), so the "
                      "Server latency bounds cannot be checked: stream the answers");
    } else if (s->scenario == LB_SCENARIO_SERVER && s->streamed) {
        /* LoadGen's performance constraints: the percentile of every issued query */
        qsort(a, k, sizeof *a, cmp_double);
        qsort(b, k, sizeof *b, cmp_double);
        double pt = lb_stats_percentile_rank_sorted(a, k, c->percentile),
               pp = lb_stats_percentile_rank_sorted(b, k, c->percentile);
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
        /* Percentile estimates at the scenario's percentile (MLPerf SingleStream: 90):
         * latency, and TTFT and TPOT when they were measured. */
        if (s->streamed) {
            qsort(a, k, sizeof *a, cmp_double);
            s->target_ttft_ms = lb_stats_percentile_rank_sorted(a, k, c->percentile);
            s->es_ttft = lb_early_stop_estimate(a, k, p, c->confidence);
            qsort(b, k, sizeof *b, cmp_double);
            s->es_tpot = lb_early_stop_estimate(b, k, p, c->confidence);
        }
        size_t m = 0;
        for (size_t i = 0; i < n; i++) {
            if (!q[i].issued) continue;
            bool ok = q[i].finished && q[i].error == LB_QERR_NONE;
            a[m++] = ok ? ms(q[i].done_ns - q[i].scheduled_ns) : INFINITY;
        }
        qsort(a, m, sizeof *a, cmp_double);
        s->target_latency_ms = lb_stats_percentile_rank_sorted(a, m, c->percentile);
        s->es_latency = lb_early_stop_estimate(a, m, p, c->confidence);
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

/* What to distrust in the result, as warnings. */
static void warn(lb_loadgen_summary *s) {
    s->warnings[0] = '\0';
    s->n_warnings = 0;
    if (s->handover_lag_ms.n > 0 && s->handover_lag_ms.p[4] > LB_LAG_WARN_MS)
        add_warning(s,
                    "the load generator fell behind its schedule: queries were handed to the "
                    "HTTP client %.1f ms late at p99 (max %.1f ms), and TTFT and latency "
                    "include that delay; run fewer queries per second per load generator",
                    s->handover_lag_ms.p[4], s->handover_lag_ms.max);
    else if (s->send_lag_ms.n > 0 && s->send_lag_ms.p[4] > LB_LAG_WARN_MS)
        add_warning(s,
                    "requests went out %.1f ms after their scheduled time at p99 (max %.1f "
                    "ms: connection set-up or a busy client), and TTFT and latency include "
                    "that delay",
                    s->send_lag_ms.p[4], s->send_lag_ms.max);
    int64_t resent = 0;
    for (int e = 0; e < LB_QERR_COUNT; e++)
        resent += s->resent[e];
    if (resent > 0) {
        char list[256];
        reason_list(s->resent, list, sizeof list);
        add_warning(s,
                    "%lld attempts failed and were sent again (%s); those queries' latency "
                    "includes the failed attempt",
                    (long long)resent, list);
    }
    for (size_t i = 0; i < s->n_replicas; i++)
        if (s->replicas[i].ejected)
            add_warning(s, "replica %s was taken out of rotation: %s", s->replicas[i].url,
                        s->replicas[i].eject_reason);
    if (!s->streamed)
        add_warning(s, "TTFT, TPOT and inter-token latency are not measured with whole answers "
                       "(--no-stream)");
    if (s->counted[LB_TOKENS_UNKNOWN] > 0)
        add_warning(s,
                    "%lld answers came without usage: their token counts and every token rate "
                    "are unknown (give --tokenizer)",
                    (long long)s->counted[LB_TOKENS_UNKNOWN]);
}

lb_status lb_loadgen_summarize(const lb_query *q, size_t n, const float *gaps_ms,
                               const uint8_t *resent, size_t n_resent, lb_loadgen_summary *s) {
    size_t n_gaps = 0;
    for (size_t i = 0; i < n; i++)
        n_gaps += q[i].n_gaps;
    size_t cap = n > n_gaps ? n : n_gaps;
    double *a = malloc((cap ? cap : 1) * sizeof *a), *b = malloc((n ? n : 1) * sizeof *b);
    if (a == NULL || b == NULL) {
        free(a);
        free(b);
        return LB_ERR_NOMEM;
    }
    s->issued = s->completed = s->failed = s->retries = 0;
    memset(s->failures, 0, sizeof s->failures);
    memset(s->resent, 0, sizeof s->resent);
    for (size_t i = 0; i < n_resent; i++)
        s->resent[resent[i] < LB_QERR_COUNT ? resent[i] : LB_QERR_OTHER]++;
    s->new_connections = 0;
    s->output_tokens = s->input_tokens = 0;
    memset(s->counted, 0, sizeof s->counted);
    s->input_tokens_known = true;
    s->reasons[0] = '\0';
    int64_t last_done = 0, last_sched = 0, last_sent = 0;
    int64_t final_done = 0; /* the last-scheduled query's (LoadGen's final query) */
    for (size_t i = 0; i < n; i++) {
        const lb_query *x = &q[i];
        if (!x->issued) continue;
        s->issued++;
        s->new_connections += x->conns_opened;
        if (x->attempts > 1) s->retries += x->attempts - 1;
        if (x->scheduled_ns >= last_sched) {
            last_sched = x->scheduled_ns;
            final_done = x->finished ? x->done_ns : 0;
        }
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
    s->final_done_s = ms(final_done) / 1e3;
    double dur = s->duration_s > 0 ? s->duration_s : NAN;
    s->samples_per_s = (double)s->completed / dur;
    s->output_tok_per_s = out_known ? (double)s->output_tokens / dur : NAN;
    s->total_tok_per_s = s->input_tokens_known && out_known
                             ? (double)(s->output_tokens + s->input_tokens) / dur
                             : NAN;
    switch (s->scenario) {
    case LB_SCENARIO_SERVER: /* (completed - 1): none completed is none a second, not -1 */
        s->mlperf_samples_per_s =
            s->final_done_s > 0
                ? (double)(s->completed > 0 ? s->completed - 1 : 0) / s->final_done_s
                : NAN;
        break;
    case LB_SCENARIO_SINGLE_STREAM:
    case LB_SCENARIO_CONCURRENCY:
        s->mlperf_samples_per_s =
            s->final_issued_s > 0
                ? (double)(s->completed > 0 ? s->completed - 1 : 0) / s->final_issued_s
                : NAN;
        break;
    case LB_SCENARIO_OFFLINE: s->mlperf_samples_per_s = s->samples_per_s; break;
    }
    s->mlperf_tok_per_s = s->scenario == LB_SCENARIO_SERVER && out_known && s->final_done_s > 0
                              ? (double)s->output_tokens / s->final_done_s
                              : s->output_tok_per_s;
    s->scheduled_qps =
        s->final_scheduled_s > 0 ? (double)(s->issued - 1) / s->final_scheduled_s : NAN;

    /* Distributions over completed queries. */
    const lb_constraints *c = &s->constraints;
    size_t k = 0;
    s->good = 0;
    for (size_t i = 0; i < n; i++) {
        if (!q[i].finished || q[i].error != LB_QERR_NONE) continue;
        double ttft = query_ttft(&q[i], s->streamed), tpot = query_tpot(&q[i], s->streamed);
        bool good = (c->slo_ttft_ms <= 0 || ttft <= c->slo_ttft_ms) &&
                    (c->slo_tpot_ms <= 0 || isnan(tpot) || tpot <= c->slo_tpot_ms);
        s->good += good;
        a[k] = ttft;
        b[k] = tpot;
        k++;
    }
    /* A bound on a time that was not measured cannot be judged. */
    bool judged = s->streamed || (c->slo_ttft_ms <= 0 && c->slo_tpot_ms <= 0);
    s->goodput_per_s = judged ? (double)s->good / dur : NAN;
    s->ttft_ms = dist_of(s, a, k);
    s->tpot_ms = dist_of(s, b, k);
    k = 0;
    for (size_t i = 0; i < n; i++)
        if (q[i].finished && q[i].error == LB_QERR_NONE)
            a[k++] = ms(q[i].done_ns - q[i].scheduled_ns);
    s->latency_ms = dist_of(s, a, k);
    k = 0;
    for (size_t i = 0; i < n; i++)
        if (q[i].finished && q[i].error == LB_QERR_NONE)
            a[k++] = ms(q[i].sent_ns - q[i].scheduled_ns);
    s->queue_ms = dist_of(s, a, k);
    k = 0;
    for (size_t i = 0; i < n; i++)
        if (q[i].issued && q[i].scheduled_send && q[i].sent_ns > 0)
            a[k++] = ms(q[i].sent_ns - q[i].scheduled_ns);
    s->send_lag_ms = dist_of(s, a, k);
    k = 0;
    for (size_t i = 0; i < n; i++)
        if (q[i].issued && q[i].scheduled_send && q[i].handover_ns > 0)
            a[k++] = ms(q[i].handover_ns - q[i].scheduled_ns);
    s->handover_lag_ms = dist_of(s, a, k);
    k = 0;
    for (size_t i = 0; i < n; i++)
        for (uint32_t g = 0; g < q[i].n_gaps; g++)
            a[k++] = gaps_ms[q[i].gap0 + g];
    s->itl_ms = dist_of(s, a, k);
    k = 0;
    for (size_t i = 0; i < n; i++)
        if (q[i].n_gaps > 0) a[k++] = gaps_ms[q[i].gap0];
    s->ttst_ms = dist_of(s, a, k);
    k = 0;
    for (size_t i = 0; i < n; i++)
        if (s->streamed && q[i].finished && q[i].error == LB_QERR_NONE && q[i].output_tokens > 1 &&
            q[i].done_ns > q[i].first_ns)
            a[k++] =
                (double)(q[i].output_tokens - 1) / ((double)(q[i].done_ns - q[i].first_ns) / 1e9);
    s->user_tok_per_s = dist_of(s, a, k);
    k = 0;
    for (size_t i = 0; i < n; i++)
        if (q[i].finished && q[i].error == LB_QERR_NONE && q[i].input_tokens >= 0)
            a[k++] = q[i].input_tokens;
    s->input_len = dist_of(s, a, k);
    k = 0;
    for (size_t i = 0; i < n; i++)
        if (q[i].finished && q[i].error == LB_QERR_NONE && q[i].output_tokens >= 0)
            a[k++] = q[i].output_tokens;
    s->output_len = dist_of(s, a, k);

    verdict(q, n, s, a, b);
    warn(s);
    free(a);
    free(b);
    return LB_OK;
}

static lb_status put(lb_result *r, const char *name, double v, const char *unit) {
    return lb_result_set_metric(r, name, v, unit);
}

void lb_loadgen_pctl_tag(double level, char *out, size_t cap) {
    char num[16];
    snprintf(num, sizeof num, "%g", level);
    for (char *c = num; *c; c++)
        if (*c == '.') *c = '_';
    snprintf(out, cap, "p%s", num);
}

/* BASE_{mean,std,min,max,p50,...}SUFFIX ("_ms", or "" for counts and rates), then the
 * chosen levels. */
static lb_status put_dist(lb_result *r, const lb_loadgen_summary *s, const char *base,
                          const char *suffix, const lb_dist *d, const char *unit) {
    char name[LB_NAME_BYTES], tag[24];
    static const char *const stats[] = {"mean", "std", "min", "max"};
    const double vals[] = {d->mean, d->std, d->min, d->max};
    for (int i = 0; i < 4; i++) {
        snprintf(name, sizeof name, "%s_%s%s", base, stats[i], suffix);
        LB_TRY(put(r, name, vals[i], unit));
    }
    for (int i = 0; i < LB_N_PCTL; i++) {
        lb_loadgen_pctl_tag(lb_loadgen_pctl_levels[i], tag, sizeof tag);
        snprintf(name, sizeof name, "%s_%s%s", base, tag, suffix);
        LB_TRY(put(r, name, d->p[i], unit));
    }
    for (int i = 0; i < s->n_user_pctl; i++) {
        lb_loadgen_pctl_tag(s->user_pctl[i], tag, sizeof tag);
        snprintf(name, sizeof name, "%s_%s%s", base, tag, suffix);
        LB_TRY(put(r, name, d->user_p[i], unit));
    }
    return LB_OK;
}

lb_status lb_loadgen_summary_to_result(const lb_loadgen_summary *s, lb_result *r) {
    LB_TRY(put(r, "samples_per_s", s->samples_per_s, "samples/s"));
    LB_TRY(put(r, "output_tok_per_s", s->output_tok_per_s, "tok/s"));
    LB_TRY(put(r, "total_tok_per_s", s->total_tok_per_s, "tok/s"));
    LB_TRY(put(r, "goodput_per_s", s->goodput_per_s, "samples/s"));
    LB_TRY(put(r, "mlperf_samples_per_s", s->mlperf_samples_per_s, "samples/s"));
    LB_TRY(put(r, "mlperf_tok_per_s", s->mlperf_tok_per_s, "tok/s"));
    if (s->scenario == LB_SCENARIO_SERVER) {
        LB_TRY(put(r, "target_qps", s->target_qps, "queries/s"));
        LB_TRY(put(r, "scheduled_qps", s->scheduled_qps, "queries/s"));
    }
    LB_TRY(put(r, "issued", (double)s->issued, "queries"));
    LB_TRY(put(r, "completed", (double)s->completed, "queries"));
    LB_TRY(put(r, "failed", (double)s->failed, "queries"));
    LB_TRY(put(r, "retries", (double)s->retries, "attempts"));
    LB_TRY(put(r, "connections_preopened", (double)s->preconnected, "connections"));
    LB_TRY(put(r, "connections_opened", (double)s->new_connections, "attempts"));
    for (int e = 1; e < LB_QERR_COUNT; e++) {
        if (s->failures[e] == 0) continue;
        char name[LB_NAME_BYTES];
        snprintf(name, sizeof name, "failed_%s", lb_http_qerr_name((lb_qerr)e));
        LB_TRY(put(r, name, (double)s->failures[e], "queries"));
    }
    for (int e = 1; e < LB_QERR_COUNT; e++) {
        if (s->resent[e] == 0) continue;
        char name[LB_NAME_BYTES];
        snprintf(name, sizeof name, "resent_%s", lb_http_qerr_name((lb_qerr)e));
        LB_TRY(put(r, name, (double)s->resent[e], "attempts"));
    }
    LB_TRY(put(r, "output_tokens", (double)s->output_tokens, "tokens"));
    LB_TRY(put(r, "output_tokens_unknown", (double)s->counted[LB_TOKENS_UNKNOWN], "queries"));
    LB_TRY(put(r, "duration_s", s->duration_s, "s"));
    LB_TRY(put_dist(r, s, "ttft", "_ms", &s->ttft_ms, "ms"));
    LB_TRY(put_dist(r, s, "tpot", "_ms", &s->tpot_ms, "ms"));
    LB_TRY(put_dist(r, s, "itl", "_ms", &s->itl_ms, "ms"));
    LB_TRY(put_dist(r, s, "ttst", "_ms", &s->ttst_ms, "ms"));
    LB_TRY(put_dist(r, s, "latency", "_ms", &s->latency_ms, "ms"));
    LB_TRY(put_dist(r, s, "queue", "_ms", &s->queue_ms, "ms"));
    LB_TRY(put_dist(r, s, "send_lag", "_ms", &s->send_lag_ms, "ms"));
    LB_TRY(put_dist(r, s, "handover_lag", "_ms", &s->handover_lag_ms, "ms"));
    LB_TRY(put_dist(r, s, "user_output_tok_per_s", "", &s->user_tok_per_s, "tok/s"));
    LB_TRY(put_dist(r, s, "input_len", "", &s->input_len, "tokens"));
    LB_TRY(put_dist(r, s, "output_len", "", &s->output_len, "tokens"));
    LB_TRY(put(r, "valid", s->valid ? 1.0 : 0.0, "bool"));
    LB_TRY(put(r, "warnings", (double)s->n_warnings, "count"));
    /* what decided the verdict: Server's two bounds, the latency estimate elsewhere */
    int64_t need =
        s->scenario == LB_SCENARIO_SERVER
            ? (s->es_ttft.needed > s->es_tpot.needed ? s->es_ttft.needed : s->es_tpot.needed)
            : s->es_latency.needed;
    LB_TRY(put(r, "early_stop_needed_queries", (double)need, "queries"));
    for (size_t i = 0; i < s->n_replicas; i++) {
        char name[LB_NAME_BYTES];
        snprintf(name, sizeof name, "replica%zu_completed", i);
        LB_TRY(put(r, name, (double)s->replicas[i].completed, "attempts"));
        snprintf(name, sizeof name, "replica%zu_failed", i);
        LB_TRY(put(r, name, (double)s->replicas[i].failed, "attempts"));
    }
    return LB_OK;
}
