/* bench.h: what a benchmark is across runs: its identity and its key metrics.
 *
 * A benchmark's identity is what decides the work and where it ran: the command, the
 * options that shape the work (for train: model, batch, seq, precision, device, data,
 * matrix-product and attention choices, recompute, LoRA rank, targets and quantisation
 * when fine-tuning, ZeRO stage, ranks and gradient accumulation; for load: scenario, rates,
 * concurrency, model, API, streaming, dataset, max tokens; for comm: collectives, sizes, dtype, op,
 * placement, backend, ranks), the GPU model and count, and the host. Runs with the same identity
 * form one history; seeds, step counts, names and tags do not split it. Key metrics are the few
 * figures per command that the sweep table, compare, history, reports and the OpenMetrics export
 * speak about, each with the raw series it comes from (when there is one) and which way is better.
 */
#ifndef LB_HISTORY_BENCH_H
#define LB_HISTORY_BENCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/result.h"

typedef struct {
    const char *metric;    /* summary metric name */
    const char *series;    /* raw series it summarises (compare tests it), or NULL */
    bool higher_is_better; /* tokens/s: true; milliseconds: false */
    bool performance;      /* false for a correctness signal (loss): never a regression */
    const char *better;    /* the word for a change the good way: "faster", "smaller" */
    const char *worse;     /* and the other way: "slower", "larger" */
} lb_key_metric;

/* The kinds that have key metrics, NULL-terminated: "train", "load", "infer", "comm". */
extern const char *const lb_bench_kinds[];

/* The key metrics of a run kind ("train", "load", "infer", "comm"); *n is 0 for a kind
 * without any. */
const lb_key_metric *lb_bench_key_metrics(const char *kind, size_t *n);

#define LB_BENCH_ID_BYTES 1024

/* One part of an identity: "model" = "gpt2-tiny", "gpu" = "NVIDIA H100 80GB HBM3". */
typedef struct {
    char key[32];
    char value[256];
} lb_bench_field;

#define LB_BENCH_MAX_FIELDS 20

/* The parts of r's identity after its kind, in a fixed order; returns how many. */
size_t lb_bench_fields(const lb_result *r, lb_bench_field *out);

/* Where b's identity differs from a's (kinds aside), a's keys first, then the keys only b has
 * (adapters' options): "batch 4 -> 8, lora_rank (none) -> 8" into text (empty when they are
 * one benchmark, cut to cap), and when json is not NULL an object {"key", "a", "b"} per
 * difference appended to that array (null for the side without the key). Returns how many
 * differ. */
size_t lb_bench_differences(const lb_result *a, const lb_result *b, char *text, size_t cap,
                            json_t *json);

/* The identity of r as canonical text, "train model=gpt2-tiny batch=4 ... gpu=none gpu_count=0
 * host=node1", into out; a value longer than a field (or text longer than out) is cut
 * between UTF-8 characters. */
void lb_bench_identity(const lb_result *r, char *out, size_t out_bytes);

/* A short stable key for an identity: 12 hex digits of its FNV-1a 64 hash. */
void lb_bench_key(const char *identity, char out[13]);

/* FNV-1a 64 of a NUL-terminated text, continued from h (start with LB_FNV_OFFSET). */
#define LB_FNV_OFFSET 0xcbf29ce484222325ull
uint64_t lb_bench_fnv(uint64_t h, const char *text);

#endif
