/* bench.c: benchmark identities and key metrics behind bench.h. */
#include "history/bench.h"

#include <stdio.h>
#include <string.h>

static const lb_key_metric train_metrics[] = {
    {"tokens_per_s", NULL, true, true, "faster", "slower"},
    {"step_ms_median", "step_ms", false, true, "faster", "slower"},
    {"mfu", NULL, true, true, "faster", "slower"},
    {"peak_device_bytes", NULL, false, true, "smaller", "larger"},
    {"peak_host_mem_bytes", NULL, false, true, "smaller", "larger"},
    {"final_loss", NULL, false, false, "lower", "higher"},
};

static const lb_key_metric load_metrics[] = {
    {"output_tok_per_s", NULL, true, true},        {"samples_per_s", NULL, true, true},
    {"ttft_p99_ms", "ttft_ms", false, true},       {"tpot_p99_ms", "tpot_ms", false, true},
    {"latency_p50_ms", "latency_ms", false, true}, {"failed", NULL, false, false},
};

const lb_key_metric *lb_bench_key_metrics(const char *kind, size_t *n) {
    if (strcmp(kind, "train") == 0) {
        *n = sizeof train_metrics / sizeof train_metrics[0];
        return train_metrics;
    }
    if (strcmp(kind, "load") == 0) {
        *n = sizeof load_metrics / sizeof load_metrics[0];
        return load_metrics;
    }
    *n = 0;
    return NULL;
}

static const char *const train_keys[] = {"model",     "batch", "seq",         "precision",
                                         "device",    "data",  "fp32_matmul", "attention",
                                         "recompute", "zero",  "gpus",        NULL};
static const char *const load_keys[] = {"scenario",    "mode",       "qps",   "sweep_qps",
                                        "concurrency", "max_tokens", "model", "api",
                                        "stream",      "dataset",    NULL};

static size_t put(char *out, size_t cap, size_t len, const char *key, const json_t *v) {
    if (len >= cap) return len;
    char *text = json_is_string(v) ? NULL : json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
    const char *shown = json_is_string(v) ? json_string_value(v) : text ? text : "?";
    if (json_is_object(v) && json_object_get(v, "path") != NULL)
        shown = json_string_value(json_object_get(v, "path")); /* a dataset: its file */
    len += (size_t)snprintf(out + len, cap - len, " %s=%s", key, shown ? shown : "?");
    free(text);
    return len;
}

void lb_bench_identity(const lb_result *r, char *out, size_t out_bytes) {
    size_t len = (size_t)snprintf(out, out_bytes, "%s", r->kind);
    const char *const *keys = strcmp(r->kind, "train") == 0  ? train_keys
                              : strcmp(r->kind, "load") == 0 ? load_keys
                                                             : NULL;
    for (size_t i = 0; keys != NULL && keys[i] != NULL; i++) {
        const json_t *v = r->config ? json_object_get(r->config, keys[i]) : NULL;
        if (v != NULL && !json_is_null(v)) len = put(out, out_bytes, len, keys[i], v);
    }
    const json_t *gpus = r->provenance ? json_object_get(r->provenance, "gpus") : NULL;
    const json_t *first = json_array_get(gpus, 0);
    const char *gpu = json_string_value(json_object_get(first, "name"));
    const char *host =
        r->provenance ? json_string_value(json_object_get(r->provenance, "hostname")) : NULL;
    if (len < out_bytes)
        snprintf(out + len, out_bytes - len, " gpu=%s x%zu host=%s", gpu ? gpu : "none",
                 json_array_size(gpus), host ? host : "?");
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
