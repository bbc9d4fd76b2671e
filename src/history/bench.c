/* bench.c: benchmark identities and key metrics behind bench.h. */
#include "history/bench.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/utf8text.h"

static const lb_key_metric train_metrics[] = {
    {"tokens_per_s", NULL, true, true, "faster", "slower"},
    {"step_ms_median", "step_ms", false, true, "faster", "slower"},
    {"mfu", NULL, true, true, "faster", "slower"},
    {"peak_device_bytes", NULL, false, true, "smaller", "larger"},
    {"peak_host_mem_bytes", NULL, false, true, "smaller", "larger"},
    {"final_loss", NULL, false, false, "lower", "higher"},
};

static const lb_key_metric load_metrics[] = {
    {"output_tok_per_s", NULL, true, true, "faster", "slower"},
    {"samples_per_s", NULL, true, true, "faster", "slower"},
    {"ttft_p99_ms", "ttft_ms", false, true, "faster", "slower"},
    {"tpot_p99_ms", "tpot_ms", false, true, "faster", "slower"},
    {"latency_p50_ms", "latency_ms", false, true, "faster", "slower"},
    {"failed", NULL, false, false, "fewer", "more"},
};

static const lb_key_metric comm_metrics[] = {
    {"avg_busbw", NULL, true, true, "faster", "slower"},
    {"wrong_total", NULL, false, false, "fewer", "more"},
};

const char *const lb_bench_kinds[] = {"train", "load", "infer", "comm", NULL};

const lb_key_metric *lb_bench_key_metrics(const char *kind, size_t *n) {
    if (strcmp(kind, "comm") == 0) {
        *n = sizeof comm_metrics / sizeof comm_metrics[0];
        return comm_metrics;
    }
    if (strcmp(kind, "train") == 0) {
        *n = sizeof train_metrics / sizeof train_metrics[0];
        return train_metrics;
    }
    if (strcmp(kind, "load") == 0 || strcmp(kind, "infer") == 0) { /* one load generator */
        *n = sizeof load_metrics / sizeof load_metrics[0];
        return load_metrics;
    }
    *n = 0;
    return NULL;
}

static const char *const train_keys[] = {"model",     "batch",     "seq",          "precision",
                                         "device",    "data",      "fp32_matmul",  "attention",
                                         "recompute", "lora_rank", "lora_targets", "quant",
                                         "zero",      "ranks",     "grad_accum",   NULL};
static const char *const comm_keys[] = {"collectives", "min_bytes", "max_bytes", "factor", "dtype",
                                        "op",          "place",     "backend",   "ranks",  NULL};
static const char *const infer_keys[] = {
    "scenario", "mode", "qps", "concurrency", "max_tokens", "sut", "engine", "dataset", NULL};
static const char *const load_keys[] = {"scenario",    "mode",       "qps",   "sweep_qps",
                                        "concurrency", "max_tokens", "model", "api",
                                        "stream",      "dataset",    NULL};

static void field(lb_bench_field *f, const char *key, const json_t *v) {
    snprintf(f->key, sizeof f->key, "%s", key);
    if (json_is_object(v) && json_is_string(json_object_get(v, "path")))
        v = json_object_get(v, "path"); /* a dataset: its file */
    /* cut between characters: the identity is a JSON string in history --json */
    if (json_is_string(v)) {
        const char *text = json_string_value(v);
        snprintf(f->value, sizeof f->value, "%.*s",
                 (int)lb_utf8text_cut_len(text, sizeof f->value - 1), text);
        return;
    }
    char *text = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
    snprintf(f->value, sizeof f->value, "%.*s",
             (int)lb_utf8text_cut_len(text ? text : "?", sizeof f->value - 1), text ? text : "?");
    free(text);
}

size_t lb_bench_fields(const lb_result *r, lb_bench_field *out) {
    size_t n = 0;
    const char *const *keys = strcmp(r->kind, "train") == 0   ? train_keys
                              : strcmp(r->kind, "load") == 0  ? load_keys
                              : strcmp(r->kind, "infer") == 0 ? infer_keys
                              : strcmp(r->kind, "comm") == 0  ? comm_keys
                                                              : NULL;
    for (size_t i = 0; keys != NULL && keys[i] != NULL && n < LB_BENCH_MAX_FIELDS - 3; i++) {
        const json_t *v = r->config ? json_object_get(r->config, keys[i]) : NULL;
        if (v != NULL && !json_is_null(v)) field(&out[n++], keys[i], v);
    }
    const json_t *gpus = r->provenance ? json_object_get(r->provenance, "gpus") : NULL;
    const char *gpu = json_string_value(json_object_get(json_array_get(gpus, 0), "name"));
    const char *host =
        r->provenance ? json_string_value(json_object_get(r->provenance, "hostname")) : NULL;
    snprintf(out[n].key, sizeof out[n].key, "gpu");
    snprintf(out[n++].value, sizeof out[0].value, "%s", gpu ? gpu : "none");
    snprintf(out[n].key, sizeof out[n].key, "gpu_count");
    snprintf(out[n++].value, sizeof out[0].value, "%zu", json_array_size(gpus));
    snprintf(out[n].key, sizeof out[n].key, "host");
    snprintf(out[n++].value, sizeof out[0].value, "%s", host ? host : "?");
    return n;
}

/* One difference of lb_bench_differences: key's values on side a and b, NULL for none. */
static void differ(const char *key, const char *va, const char *vb, char *text, size_t cap,
                   size_t *len, json_t *json) {
    if (json != NULL)
        json_array_append_new(json, json_pack("{s:s, s:o, s:o}", "key", key, "a",
                                              va ? json_string(va) : json_null(), "b",
                                              vb ? json_string(vb) : json_null()));
    if (*len < cap)
        *len += (size_t)snprintf(text + *len, cap - *len, "%s%s %s -> %s", *len ? ", " : "", key,
                                 va ? va : "(none)", vb ? vb : "(none)");
}

size_t lb_bench_differences(const lb_result *a, const lb_result *b, char *text, size_t cap,
                            json_t *json) {
    lb_bench_field fa[LB_BENCH_MAX_FIELDS], fb[LB_BENCH_MAX_FIELDS];
    size_t na = lb_bench_fields(a, fa), nb = lb_bench_fields(b, fb), len = 0, n = 0;
    text[0] = '\0';
    for (size_t i = 0; i < na; i++) {
        const char *other = NULL;
        for (size_t j = 0; j < nb && other == NULL; j++)
            if (strcmp(fa[i].key, fb[j].key) == 0) other = fb[j].value;
        if (other != NULL && strcmp(other, fa[i].value) == 0) continue;
        differ(fa[i].key, fa[i].value, other, text, cap, &len, json);
        n++;
    }
    for (size_t j = 0; j < nb; j++) { /* keys b has and a has not */
        bool in_a = false;
        for (size_t i = 0; i < na && !in_a; i++)
            in_a = strcmp(fa[i].key, fb[j].key) == 0;
        if (in_a) continue;
        differ(fb[j].key, NULL, fb[j].value, text, cap, &len, json);
        n++;
    }
    return n;
}

void lb_bench_identity(const lb_result *r, char *out, size_t out_bytes) {
    lb_bench_field f[LB_BENCH_MAX_FIELDS];
    size_t n = lb_bench_fields(r, f);
    size_t len = (size_t)snprintf(out, out_bytes, "%s", r->kind);
    for (size_t i = 0; i < n && len + 1 < out_bytes; i++) { /* cut between characters */
        size_t head = (size_t)snprintf(out + len, out_bytes - len, " %s=", f[i].key);
        if (len + head >= out_bytes) {
            out[len] = '\0';
            break;
        }
        len += head;
        size_t take = lb_utf8text_cut_len(f[i].value, out_bytes - 1 - len);
        memcpy(out + len, f[i].value, take);
        out[len += take] = '\0';
        if (f[i].value[take] != '\0') break;
    }
}

uint64_t lb_bench_fnv(uint64_t h, const char *text) {
    for (const char *p = text;; p++) {
        h = (h ^ (unsigned char)*p) * 0x100000001b3ull;
        if (*p == '\0') return h;
    }
}

void lb_bench_key(const char *identity, char out[13]) {
    snprintf(out, 13, "%012llx",
             (unsigned long long)(lb_bench_fnv(LB_FNV_OFFSET, identity) & 0xffffffffffffull));
}
