/* mlperf_log.c: LoadGen's config files in, its detail and accuracy logs out
 * (mlperf_log.h). */
#include "loadgen/mlperf_log.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define KEY_BYTES 160

/* The keys read, in the order of lb_mlperf_settings. */
typedef enum {
    K_TARGET_QPS,
    K_MIN_DURATION,
    K_MIN_QUERY_COUNT,
    K_TTFT,
    K_TPOT,
    K_PERCENTILE,
    K_QSL_SEED,
    K_SAMPLE_SEED,
    K_SCHEDULE_SEED,
    K_SAMPLE_COUNT,
    K_COUNT
} conf_key;

static const char *const key_names[K_COUNT] = {
    "target_qps",        "min_duration",
    "min_query_count",   "ttft_latency",
    "tpot_latency",      "target_latency_percentile",
    "qsl_rng_seed",      "sample_index_rng_seed",
    "schedule_rng_seed", "performance_sample_count_override",
};

/* How well a line's model and scenario fit: 3 exact, 2 *.scenario, 1 model.*, 0 *.*,
 * -1 not at all (LoadGen's order of lookup). */
static int fit(const char *m, const char *sc, const char *model, const char *scenario) {
    bool m_exact = model != NULL && strcmp(m, model) == 0, m_any = strcmp(m, "*") == 0;
    bool s_exact = scenario != NULL && strcmp(sc, scenario) == 0, s_any = strcmp(sc, "*") == 0;
    if (m_exact && s_exact) return 3;
    if (m_any && s_exact) return 2;
    if (m_exact && s_any) return 1;
    if (m_any && s_any) return 0;
    return -1;
}

static char *trim(char *s) {
    while (*s == ' ' || *s == '\t')
        s++;
    size_t n = strlen(s);
    while (n > 0 && (s[n - 1] == ' ' || s[n - 1] == '\t' || s[n - 1] == '\r'))
        s[--n] = '\0';
    return s;
}

lb_status lb_mlperf_log_conf_apply(const char *text, const char *path, const char *model,
                                   const char *scenario, lb_mlperf_settings *s, lb_err *err) {
    int best[K_COUNT];
    char value[K_COUNT][64];
    int value_line[K_COUNT];
    for (int k = 0; k < K_COUNT; k++)
        best[k] = -1;
    int line_no = 0;
    for (const char *p = text; *p;) {
        size_t len = strcspn(p, "\n");
        line_no++;
        char line[512];
        if (len >= sizeof line)
            return lb_fail(err, LB_ERR_USAGE, "%s:%d: line longer than %zu bytes", path, line_no,
                           sizeof line - 1);
        memcpy(line, p, len);
        line[len] = '\0';
        p += len + (p[len] == '\n');
        char *hash = strchr(line, '#');
        if (hash != NULL) *hash = '\0';
        char *t = trim(line);
        if (*t == '\0') continue;
        char *eq = strchr(t, '=');
        char *d1 = strchr(t, '.'), *d2 = d1 ? strchr(d1 + 1, '.') : NULL;
        if (eq == NULL || d1 == NULL || d2 == NULL || d2 > eq)
            return lb_fail(err, LB_ERR_USAGE,
                           "%s:%d: expected 'model.scenario.key = value' (LoadGen's config "
                           "format), got '%s'",
                           path, line_no, t);
        *eq = *d1 = *d2 = '\0';
        char *m = trim(t), *sc = trim(d1 + 1), *key = trim(d2 + 1), *val = trim(eq + 1);
        if (*val == '\0')
            return lb_fail(err, LB_ERR_USAGE, "%s:%d: '%s' has no value", path, line_no, key);
        int f = fit(m, sc, model, scenario);
        for (int k = 0; k < K_COUNT && f >= 0; k++)
            if (strcmp(key, key_names[k]) == 0 && f >= best[k]) {
                if (strlen(val) >= sizeof value[k]) /* kept whole, or a cut one would read */
                    return lb_fail(err, LB_ERR_USAGE, "%s:%d: %s = '%.20s...': over %zu characters",
                                   path, line_no, key, val, sizeof value[k] - 1);
                best[k] = f;
                snprintf(value[k], sizeof value[k], "%s", val);
                value_line[k] = line_no;
            }
    }
    for (int k = 0; k < K_COUNT; k++) {
        if (best[k] < 0) continue;
        char *end;
        errno = 0;
        bool seed = k == K_QSL_SEED || k == K_SAMPLE_SEED || k == K_SCHEDULE_SEED;
        bool count = k == K_MIN_QUERY_COUNT || k == K_SAMPLE_COUNT; /* int64_t: below 2^63 */
        bool pct = k == K_PERCENTILE; /* a percentage (99): LoadGen multiplies it by 0.01 */
        uint64_t u = seed ? strtoull(value[k], &end, 10) : 0;
        double v = seed ? 0.0 : strtod(value[k], &end);
        /* strtoull and strtod skip blanks that trim() keeps ('\v', '\f'): the sign after them */
        bool minus = value[k][strspn(value[k], " \t\n\v\f\r")] == '-';
        if (end == value[k] || *end != '\0' || errno != 0 || !(v >= 0) || isinf(v) || minus ||
            (count && !(v < 0x1p63 && v == floor(v))) || (pct && !(v > 0 && v < 100)))
            return lb_fail(err, LB_ERR_USAGE, "%s:%d: %s = '%s' is not %s", path, value_line[k],
                           key_names[k], value[k],
                           seed    ? "a non-negative integer"
                           : count ? "a non-negative integer below 2^63"
                           : pct   ? "a number above 0 and below 100"
                                   : "a non-negative number");
        switch ((conf_key)k) {
        case K_TARGET_QPS: s->has_target_qps = true, s->target_qps = v; break;
        case K_MIN_DURATION: s->has_min_duration = true, s->min_duration_ms = v; break;
        case K_MIN_QUERY_COUNT:
            s->has_min_query_count = true, s->min_query_count = (int64_t)v;
            break;
        case K_TTFT: s->has_ttft = true, s->ttft_latency_ms = v; break;
        case K_TPOT: s->has_tpot = true, s->tpot_latency_ms = v; break;
        case K_PERCENTILE: s->has_percentile = true, s->percentile = v; break;
        case K_QSL_SEED: s->has_qsl_seed = true, s->qsl_seed = u; break;
        case K_SAMPLE_SEED: s->has_sample_seed = true, s->sample_seed = u; break;
        case K_SCHEDULE_SEED: s->has_schedule_seed = true, s->schedule_seed = u; break;
        case K_SAMPLE_COUNT: s->has_sample_count = true, s->sample_count = (int64_t)v; break;
        case K_COUNT: break;
        }
    }
    return LB_OK;
}

/* ---- the detail log ---- */

typedef struct {
    FILE *f;
    double time_ms;
} mllog;

/* One line: `:::MLLOG {"key": K, "value": V, ...}`; value is already JSON text. */
static void put(mllog *l, const char *key, const char *value) {
    fprintf(l->f,
            ":::MLLOG {\"key\": \"%s\", \"value\": %s, \"time_ms\": %.6f, \"namespace\": "
            "\"mlperf::logging\", \"event_type\": \"POINT_IN_TIME\", \"metadata\": {\"is_error\": "
            "false, \"is_warning\": false, \"file\": \"loadgen/mlperf_log.c\", \"line_no\": 0, "
            "\"pid\": 0, \"tid\": 0}}\n",
            key, value, l->time_ms);
}

static void put_str(mllog *l, const char *key, const char *v) {
    json_t *j = json_string(v);
    char *text = j != NULL ? json_dumps(j, JSON_ENCODE_ANY) : NULL;
    put(l, key, text != NULL ? text : "\"\"");
    free(text);
    json_decref(j);
}

static void put_int(mllog *l, const char *key, long long v) {
    char buf[32];
    snprintf(buf, sizeof buf, "%lld", v);
    put(l, key, buf);
}

static void put_u64(mllog *l, const char *key, uint64_t v) {
    char buf[32];
    snprintf(buf, sizeof buf, "%llu", (unsigned long long)v);
    put(l, key, buf);
}

/* A number; NaN (not measured) as null. */
static void put_num(mllog *l, const char *key, double v) {
    char buf[48];
    if (isfinite(v))
        snprintf(buf, sizeof buf, "%.17g", v);
    else
        snprintf(buf, sizeof buf, "null");
    put(l, key, buf);
}

static void put_bool(mllog *l, const char *key, bool v) {
    put(l, key, v ? "true" : "false");
}

/* A latency in integer ns from ms; null when not measured. */
static void put_ns(mllog *l, const char *key, double ms) {
    if (isfinite(ms))
        put_int(l, key, llround(ms * 1e6));
    else
        put(l, key, "null");
}

/* prefix + min/max/mean + percentiles, LoadGen's names: pct_fmt has one %s for "99.00". */
static void put_dist(mllog *l, const lb_dist *d, const char *min_key, const char *max_key,
                     const char *mean_key, const char *pct_fmt) {
    put_ns(l, min_key, d->min);
    put_ns(l, max_key, d->max);
    put_ns(l, mean_key, d->mean);
    for (int i = 0; i < LB_N_PCTL; i++) {
        char level[16], key[96];
        snprintf(level, sizeof level, "%.2f", lb_loadgen_pctl_levels[i]);
        snprintf(key, sizeof key, pct_fmt, level);
        put_ns(l, key, d->p[i]);
    }
}

void lb_mlperf_log_detail_write(FILE *f, const lb_loadgen_summary *s,
                                const lb_mlperf_detail_info *in) {
    mllog l = {.f = f, .time_ms = 0};
    const lb_constraints *c = &s->constraints;
    char when[64] = "";
    time_t t = (time_t)in->start_wall_s;
    struct tm tm;
    if (gmtime_r(&t, &tm) != NULL) strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", &tm);
    put_str(&l, "loadgen_version", in->version);
    put_str(&l, "test_datetime", when);
    put_str(&l, "sut_name", in->sut_name);
    put_int(&l, "qsl_reported_total_count",
            (long long)(s->n_total_samples ? s->n_total_samples : s->n_samples));
    put_int(&l, "qsl_reported_performance_count", (long long)s->n_samples);
    const char *scenario = lb_loadgen_scenario_name(s->scenario);
    for (int pass = 0; pass < 2; pass++) {
        char key[64];
#define KEY(name) (snprintf(key, sizeof key, "%s_" name, pass ? "effective" : "requested"), key)
        put_str(&l, KEY("scenario"), scenario);
        put_str(&l, KEY("test_mode"), lb_loadgen_mode_name(s->mode));
        if (s->scenario == LB_SCENARIO_SERVER) put_num(&l, KEY("target_qps"), s->target_qps);
        put_int(&l, KEY("min_duration_ms"), llround(s->min_duration_s * 1e3));
        put_int(&l, KEY("min_query_count"), (long long)s->min_queries);
        put_int(&l, KEY("max_async_queries"),
                (long long)(s->concurrency ? s->concurrency : s->max_inflight));
        /* a fraction, as LoadGen's settings hold it (0.99), not a percentage */
        put_num(&l, KEY("target_latency_percentile"), c->percentile / 100.0);
        put_ns(&l, KEY("ttft_latency"), c->ttft_limit_ms);
        put_ns(&l, KEY("tpot_latency"), c->tpot_limit_ms);
        put_u64(&l, KEY("qsl_rng_seed"), s->qsl_seed);
        put_u64(&l, KEY("sample_index_rng_seed"), s->sample_seed);
        put_u64(&l, KEY("schedule_rng_seed"), s->schedule_seed);
        put_int(&l, KEY("performance_sample_count"), (long long)s->n_samples);
        put_bool(&l, KEY("use_token_latencies"), true);
#undef KEY
    }
    l.time_ms = s->duration_s * 1e3;
    for (const char *w = s->warnings; *w;) {
        size_t len = strcspn(w, "\n");
        char msg[1024];
        snprintf(msg, sizeof msg, "%.*s", (int)len, w);
        put_str(&l, "generic_message", msg);
        w += len + (w[len] == '\n');
    }
    put_str(&l, "result_validity", s->valid ? "VALID" : "INVALID");
    if (!s->valid) put_str(&l, "result_invalid_reason", s->reasons);
    put_bool(&l, "result_perf_constraints_met", s->perf_ok);
    put_bool(&l, "result_min_duration_met", s->min_duration_ok);
    put_bool(&l, "result_min_queries_met", s->min_queries_ok);
    put_bool(&l, "early_stopping_met", s->early_stop_ok);
    put_int(&l, "result_query_count", (long long)s->issued);
    put_int(&l, "num_errors", (long long)s->failed);
    switch (s->scenario) {
    case LB_SCENARIO_SERVER:
        put_num(&l, "result_scheduled_samples_per_sec", s->scheduled_qps);
        put_num(&l, "result_completed_samples_per_sec", s->mlperf_samples_per_s);
        put_num(&l, "result_completed_tokens_per_second", s->mlperf_tok_per_s);
        break;
    case LB_SCENARIO_OFFLINE:
        put_num(&l, "result_samples_per_second", s->samples_per_s);
        put_num(&l, "result_tokens_per_second", s->output_tok_per_s);
        break;
    case LB_SCENARIO_SINGLE_STREAM:
    case LB_SCENARIO_CONCURRENCY:
        put_num(&l, "result_qps_with_loadgen_overhead", s->mlperf_samples_per_s);
        put_ns(&l, "early_stopping_latency_ss", s->es_latency.ok ? s->es_latency.estimate : NAN);
        put_num(&l, "result_token_throughput", s->output_tok_per_s);
        break;
    }
    put_dist(&l, &s->latency_ms, "result_min_latency_ns", "result_max_latency_ns",
             "result_mean_latency_ns", "result_%s_percentile_latency_ns");
    put_dist(&l, &s->ttft_ms, "result_first_token_min_latency_ns",
             "result_first_token_max_latency_ns", "result_first_token_mean_latency_ns",
             "result_first_token_%s_percentile_latency_ns");
    put_dist(&l, &s->tpot_ms, "result_time_to_output_token_min", "result_time_to_output_token_max",
             "result_time_to_output_token_mean", "result_time_per_output_token_%s_percentile_ns");
}

/* ---- the accuracy log ---- */

void lb_mlperf_log_accuracy_write(FILE *f, const lb_mlperf_answer *a, size_t n) {
    static const char hex[] = "0123456789ABCDEF";
    fputs("[\n", f);
    for (size_t i = 0; i < n; i++) {
        fprintf(f, "{ \"seq_id\" : %lld, \"qsl_idx\" : %lld, \"data\" : \"", (long long)a[i].seq_id,
                (long long)a[i].qsl_idx);
        for (size_t k = 0; k < a[i].n_ids; k++)
            for (int b = 0; b < 4; b++) { /* little-endian int32 */
                unsigned byte = (a[i].ids[k] >> (8 * b)) & 0xFFu;
                fputc(hex[byte >> 4], f);
                fputc(hex[byte & 15], f);
            }
        fprintf(f, "\", \"token_count\" : %zu }%s\n", a[i].n_ids, i + 1 < n ? "," : "");
    }
    fputs("]\n", f);
}
