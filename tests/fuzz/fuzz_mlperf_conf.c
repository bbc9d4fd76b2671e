/* fuzz_mlperf_conf.c: LoadGen's config reader (loadgen/mlperf_log.h,
 * lb_mlperf_log_conf_apply) on arbitrary text, as user.conf for llama3_1-8b in Server.
 *
 * Refused: the message is one line naming path:line with a line the text has. Accepted:
 * every number applied is finite and non-negative (a count too: no double wrapped into
 * int64_t), and
 * some line of the text sets that key to that value, read whole; what the text does not
 * set is left as it was; applying it twice gives what once does; the keys set for the
 * wildcard entries alone (model and scenario NULL) are among those set for the exact
 * pair; and a line for the exact pair appended at the end overrides every earlier one,
 * leaving the other keys alone. Not checked: which of several fitting lines wins, which
 * would need a second implementation of LoadGen's lookup. */
#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <string.h>

#include "fuzz.h"
#include "loadgen/mlperf_log.h"

#define PATH     "fuzz/user.conf"
#define MODEL    "llama3_1-8b"
#define SCENARIO "Server"

static bool same(const lb_mlperf_settings *a, const lb_mlperf_settings *b) {
    return a->has_target_qps == b->has_target_qps && a->has_min_duration == b->has_min_duration &&
           a->has_min_query_count == b->has_min_query_count && a->has_ttft == b->has_ttft &&
           a->has_tpot == b->has_tpot && a->has_percentile == b->has_percentile &&
           a->has_qsl_seed == b->has_qsl_seed && a->has_sample_seed == b->has_sample_seed &&
           a->has_schedule_seed == b->has_schedule_seed &&
           a->has_sample_count == b->has_sample_count && a->target_qps == b->target_qps &&
           a->min_duration_ms == b->min_duration_ms && a->min_query_count == b->min_query_count &&
           a->ttft_latency_ms == b->ttft_latency_ms && a->tpot_latency_ms == b->tpot_latency_ms &&
           a->percentile == b->percentile && a->qsl_seed == b->qsl_seed &&
           a->sample_seed == b->sample_seed && a->schedule_seed == b->schedule_seed &&
           a->sample_count == b->sample_count;
}

typedef enum { AS_NUMBER, AS_COUNT, AS_SEED } value_kind;

/* Whether a line of text gives `key` a value that reads whole, non-negative, as the one
 * applied: the number d, the count c or the seed u. Lenient on the rest of the line. */
static bool text_says(const char *text, const char *key, value_kind kind, double d, int64_t c,
                      uint64_t u) {
    size_t key_len = strlen(key);
    for (const char *p = text; *p;) {
        size_t len = strcspn(p, "\n");
        char line[600];
        snprintf(line, sizeof line, "%.*s", (int)(len < sizeof line ? len : sizeof line - 1), p);
        p += len + (p[len] == '\n');
        line[strcspn(line, "#")] = '\0';
        char *eq = strchr(line, '=');
        if (eq == NULL) continue;
        char *k = eq; /* the key ends the part before '=', after a '.' and blanks */
        while (k > line && strchr(" \t\r", k[-1]) != NULL)
            k--;
        if ((size_t)(k - line) < key_len || strncmp(k - key_len, key, key_len) != 0) continue;
        k -= key_len;
        while (k > line && (k[-1] == ' ' || k[-1] == '\t'))
            k--;
        if (k == line || k[-1] != '.') continue;
        char *v = eq + 1 + strspn(eq + 1, " \t");
        size_t n = strlen(v);
        while (n > 0 && (v[n - 1] == ' ' || v[n - 1] == '\t' || v[n - 1] == '\r'))
            v[--n] = '\0';
        if (v[strspn(v, " \t\n\v\f\r")] == '-' || n == 0) continue;
        char *end;
        errno = 0;
        if (kind == AS_SEED) {
            uint64_t x = strtoull(v, &end, 10);
            if (*end == '\0' && errno == 0 && x == u) return true;
        } else {
            double x = strtod(v, &end);
            if (*end != '\0' || errno != 0 || !(x >= 0)) continue;
            if (kind == AS_NUMBER && x == d) return true;
            if (kind == AS_COUNT && x < 0x1p63 && (int64_t)x == c) return true;
        }
    }
    return false;
}

static void check_values(const char *text, const lb_mlperf_settings *s) {
    const struct {
        bool has;
        const char *key;
        value_kind kind;
        double d;
        int64_t c;
        uint64_t u;
    } f[] = {
        {s->has_target_qps, "target_qps", AS_NUMBER, s->target_qps, 0, 0},
        {s->has_min_duration, "min_duration", AS_NUMBER, s->min_duration_ms, 0, 0},
        {s->has_min_query_count, "min_query_count", AS_COUNT, 0, s->min_query_count, 0},
        {s->has_ttft, "ttft_latency", AS_NUMBER, s->ttft_latency_ms, 0, 0},
        {s->has_tpot, "tpot_latency", AS_NUMBER, s->tpot_latency_ms, 0, 0},
        {s->has_percentile, "target_latency_percentile", AS_NUMBER, s->percentile, 0, 0},
        {s->has_qsl_seed, "qsl_rng_seed", AS_SEED, 0, 0, s->qsl_seed},
        {s->has_sample_seed, "sample_index_rng_seed", AS_SEED, 0, 0, s->sample_seed},
        {s->has_schedule_seed, "schedule_rng_seed", AS_SEED, 0, 0, s->schedule_seed},
        {s->has_sample_count, "performance_sample_count_override", AS_COUNT, 0, s->sample_count, 0},
    };
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++) {
        if (!f[i].has) continue;
        FUZZ_CHECK(f[i].d >= 0 && f[i].d < INFINITY && f[i].c >= 0);
        FUZZ_CHECK(text_says(text, f[i].key, f[i].kind, f[i].d, f[i].c, f[i].u));
    }
}

/* Every field of a struct the text has not touched: has_* false, values a sentinel. */
static lb_mlperf_settings sentinel(void) {
    return (lb_mlperf_settings){.target_qps = -1,
                                .min_duration_ms = -2,
                                .min_query_count = -3,
                                .ttft_latency_ms = -4,
                                .tpot_latency_ms = -5,
                                .percentile = -6,
                                .qsl_seed = 7,
                                .sample_seed = 8,
                                .schedule_seed = 9,
                                .sample_count = -10};
}

/* Where `from` set a key, `to` must hold that key's value; elsewhere, `base`'s. */
static void check_overlay(const lb_mlperf_settings *from, const lb_mlperf_settings *base,
                          const lb_mlperf_settings *to) {
#define PICK(has, field) (from->has ? from->field : base->field)
    lb_mlperf_settings want = *base;
    want.has_target_qps |= from->has_target_qps;
    want.has_min_duration |= from->has_min_duration;
    want.has_min_query_count |= from->has_min_query_count;
    want.has_ttft |= from->has_ttft;
    want.has_tpot |= from->has_tpot;
    want.has_percentile |= from->has_percentile;
    want.has_qsl_seed |= from->has_qsl_seed;
    want.has_sample_seed |= from->has_sample_seed;
    want.has_schedule_seed |= from->has_schedule_seed;
    want.has_sample_count |= from->has_sample_count;
    want.target_qps = PICK(has_target_qps, target_qps);
    want.min_duration_ms = PICK(has_min_duration, min_duration_ms);
    want.min_query_count = PICK(has_min_query_count, min_query_count);
    want.ttft_latency_ms = PICK(has_ttft, ttft_latency_ms);
    want.tpot_latency_ms = PICK(has_tpot, tpot_latency_ms);
    want.percentile = PICK(has_percentile, percentile);
    want.qsl_seed = PICK(has_qsl_seed, qsl_seed);
    want.sample_seed = PICK(has_sample_seed, sample_seed);
    want.schedule_seed = PICK(has_schedule_seed, schedule_seed);
    want.sample_count = PICK(has_sample_count, sample_count);
#undef PICK
    FUZZ_CHECK(same(&want, to));
}

static void check_refusal(const char *text, const lb_err *err) {
    FUZZ_CHECK(strncmp(err->msg, PATH ":", strlen(PATH ":")) == 0);
    FUZZ_CHECK(strchr(err->msg, '\n') == NULL);
    long line = strtol(err->msg + strlen(PATH ":"), NULL, 10);
    long lines = 1;
    for (const char *p = text; *p; p++)
        lines += *p == '\n';
    FUZZ_CHECK(line >= 1 && line <= lines);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *text = malloc(size + 64);
    FUZZ_CHECK(text != NULL);
    memcpy(text, data, size);
    text[size] = '\0'; /* the reader stops at the first NUL */
    lb_err err = {{0}};
    lb_mlperf_settings once = {0};
    if (lb_mlperf_log_conf_apply(text, PATH, MODEL, SCENARIO, &once, &err) != LB_OK) {
        check_refusal(text, &err);
        free(text);
        return 0;
    }
    check_values(text, &once);

    lb_mlperf_settings twice = once, over = sentinel(), base = sentinel(), wild = {0};
    FUZZ_CHECK(lb_mlperf_log_conf_apply(text, PATH, MODEL, SCENARIO, &twice, &err) == LB_OK);
    FUZZ_CHECK(same(&once, &twice));
    FUZZ_CHECK(lb_mlperf_log_conf_apply(text, PATH, MODEL, SCENARIO, &over, &err) == LB_OK);
    check_overlay(&once, &base, &over);

    if (lb_mlperf_log_conf_apply(text, PATH, NULL, NULL, &wild, &err) == LB_OK) {
        check_values(text, &wild);
        FUZZ_CHECK(!wild.has_target_qps || once.has_target_qps);
        FUZZ_CHECK(!wild.has_min_duration || once.has_min_duration);
        FUZZ_CHECK(!wild.has_min_query_count || once.has_min_query_count);
        FUZZ_CHECK(!wild.has_ttft || once.has_ttft);
        FUZZ_CHECK(!wild.has_tpot || once.has_tpot);
        FUZZ_CHECK(!wild.has_percentile || once.has_percentile);
        FUZZ_CHECK(!wild.has_qsl_seed || once.has_qsl_seed);
        FUZZ_CHECK(!wild.has_sample_seed || once.has_sample_seed);
        FUZZ_CHECK(!wild.has_schedule_seed || once.has_schedule_seed);
        FUZZ_CHECK(!wild.has_sample_count || once.has_sample_count);
    } else {
        check_refusal(text, &err);
    }

    /* A later exact line wins: text + one line for MODEL.SCENARIO. */
    strcpy(text + strlen(text), "\n" MODEL "." SCENARIO ".min_query_count = 7\n");
    lb_mlperf_settings last = {0}, seven = {.has_min_query_count = true, .min_query_count = 7};
    FUZZ_CHECK(lb_mlperf_log_conf_apply(text, PATH, MODEL, SCENARIO, &last, &err) == LB_OK);
    check_overlay(&seven, &once, &last);
    free(text);
    return 0;
}
