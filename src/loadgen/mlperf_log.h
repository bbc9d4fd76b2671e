/* mlperf_log.h: MLPerf LoadGen's files, read and written: mlperf.conf / user.conf, and
 * mlperf_log_detail.txt and mlperf_log_accuracy.json beside the summary (summary.h).
 *
 * Config files are LoadGen's format: one `model.scenario.key = value` a line, `#` starts
 * a comment, `*` matches every model or scenario; a key is looked up as LoadGen does:
 * model.scenario, then *.scenario, then model.*, then *.*; a later file (user.conf after
 * mlperf.conf) overrides an earlier one. Only the keys that shape an llmbench run are
 * read (below); the others are accepted and ignored. Model names are LoadGen's
 * (`llama3_1-8b`): `--model-key llama3.1-8b` looks up `llama3_1-8b`.
 *
 * The detail log is one `:::MLLOG {json}` line per key with LoadGen's key names (the
 * ones MLPerf's submission checker and log parser read: effective_* settings, result_*
 * figures in ns and per second, the verdict); the accuracy log is LoadGen's JSON array of
 * {seq_id, qsl_idx, data, token_count} with data the answer's token ids as little-endian
 * int32 in upper-case hex, which MLPerf's LLM evaluation scripts decode. llmbench draws
 * its own arrivals and sample order from the seeds (xoshiro256**, core/stats.h), so the
 * same seed values do not give LoadGen's exact draws. */
#ifndef LB_LOADGEN_MLPERF_LOG_H
#define LB_LOADGEN_MLPERF_LOG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "core/status.h"
#include "loadgen/metrics.h"

/* The official seeds of loadgen/mlperf.conf (MLCommons inference, the v6.x rounds). */
#define LB_MLPERF_QSL_SEED          UINT64_C(1780908523862526354)
#define LB_MLPERF_SAMPLE_INDEX_SEED UINT64_C(14771362308971278857)
#define LB_MLPERF_SCHEDULE_SEED     UINT64_C(18209322760996052031)

/* What the config files set; has_* says which. Times as LoadGen gives them (ms). */
typedef struct {
    bool has_target_qps, has_min_duration, has_min_query_count, has_ttft, has_tpot;
    bool has_percentile, has_qsl_seed, has_sample_seed, has_schedule_seed, has_sample_count;
    double target_qps;       /* Server: target_qps */
    double min_duration_ms;  /* min_duration */
    int64_t min_query_count; /* min_query_count */
    double ttft_latency_ms;  /* ttft_latency */
    double tpot_latency_ms;  /* tpot_latency */
    double percentile;       /* target_latency_percentile (99, 90 ...) */
    uint64_t qsl_seed;       /* qsl_rng_seed */
    uint64_t sample_seed;    /* sample_index_rng_seed */
    uint64_t schedule_seed;  /* schedule_rng_seed */
    int64_t sample_count;    /* performance_sample_count_override */
} lb_mlperf_settings;

/* Applies config text[0..) (NUL-terminated; `path` names it in errors) for model and
 * scenario ("Server", "Offline", "SingleStream"; NULL: wildcard entries only) over *s.
 * A malformed line is LB_ERR_USAGE naming path:line and what was expected. */
lb_status lb_mlperf_log_conf_apply(const char *text, const char *path, const char *model,
                                   const char *scenario, lb_mlperf_settings *s, lb_err *err);

/* What the detail log says beyond the summary. */
typedef struct {
    const char *sut_name;
    const char *version; /* llmbench's version, as loadgen_version */
    double start_wall_s; /* test_datetime */
} lb_mlperf_detail_info;

/* Writes mlperf_log_detail.txt's lines for summary s to f. */
void lb_mlperf_log_detail_write(FILE *f, const lb_loadgen_summary *s,
                                const lb_mlperf_detail_info *in);

/* One answer of the accuracy log. */
typedef struct {
    int64_t seq_id;      /* the query's index in the run */
    int64_t qsl_idx;     /* the sample's index in the data set */
    const uint32_t *ids; /* the answer's token ids */
    size_t n_ids;
} lb_mlperf_answer;

/* Writes mlperf_log_accuracy.json (a JSON array, one answer an element) to f. */
void lb_mlperf_log_accuracy_write(FILE *f, const lb_mlperf_answer *a, size_t n);

#endif
