/* metrics.h: per-query records and the numbers a load run is judged by.
 *
 * Every query keeps its timestamps (scheduled, sent, first token, done; ns since the
 * run's t0) and counts; lb_loadgen_summarize() turns them into the summary: TTFT (from
 * the scheduled time), TPOT = (latency - TTFT) / (output tokens - 1), inter-token
 * latency (every gap between streamed pieces, across all queries), latency, queueing
 * (sent - scheduled), send lag (sent - scheduled, for scheduled sends only), throughput,
 * goodput against an SLO, and the MLPerf verdict: VALID only when the latency bounds
 * (Server), min duration, min queries and early stopping all hold and no query failed,
 * with each reason spelled out otherwise. Whole (not streamed) answers have no TTFT,
 * TPOT or ITL: those are NaN ("not measured"), never the latency or 0, and a latency
 * bound on them is not met. Warnings name what to distrust in a result that may still
 * be VALID: the load generator behind its schedule, attempts resent after a failure,
 * replicas taken out, token counts unknown. The formulas are listed in docs/METRICS.md;
 * percentiles are LoadGen's (core/stats.h lb_stats_percentile_rank_sorted: the sample at
 * floor(n p), no interpolation), so they equal those of LoadGen's own logs. */
#ifndef LB_LOADGEN_METRICS_H
#define LB_LOADGEN_METRICS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/result.h"
#include "core/status.h"
#include "loadgen/early_stop.h"
#include "model/tokenizer.h"
#include "sut/pool.h"

typedef enum {
    LB_SCENARIO_OFFLINE = 0,
    LB_SCENARIO_SERVER,
    LB_SCENARIO_SINGLE_STREAM,
    LB_SCENARIO_CONCURRENCY,
} lb_scenario;

typedef enum {
    LB_MODE_PERFORMANCE = 0,
    LB_MODE_ACCURACY,
} lb_mode;

const char *
lb_loadgen_scenario_name(lb_scenario s); /* "Offline", "Server", "SingleStream", "Concurrency" */
const char *lb_loadgen_mode_name(lb_mode m); /* "PerformanceOnly", "AccuracyOnly" */

/* Where a completed query's output token count came from, in order of preference. */
typedef enum {
    LB_TOKENS_USAGE = 0, /* the server's usage field */
    LB_TOKENS_TOKENIZER, /* the load generator's tokenizer on the generated text */
    LB_TOKENS_CHUNKS,    /* streamed pieces with text (no usage in the stream) */
    LB_TOKENS_UNKNOWN,   /* a whole answer without usage, no tokenizer: not known */
    LB_TOKENS_COUNT
} lb_token_count;

const char *lb_loadgen_token_count_name(lb_token_count c); /* "usage", "tokenizer", "chunks", ... */

typedef struct {
    int64_t scheduled_ns;  /* when it was due (t0-relative) */
    int64_t handover_ns;   /* when the (last) attempt was handed to the HTTP client */
    int64_t sent_ns;       /* when the (last) attempt's request went out */
    int64_t first_ns;      /* first generated text of the last attempt (streamed) */
    int64_t last_ns;       /* latest generated text (for inter-token gaps) */
    int64_t done_ns;       /* answer complete, or failure known */
    uint32_t sample;       /* dataset index */
    int32_t input_tokens;  /* usage, else the dataset's count, else -1 */
    int32_t output_tokens; /* usage, else tokenizer, else streamed pieces, else -1 (unknown) */
    int32_t n_chunks;      /* streamed pieces with text */
    uint32_t gap0;         /* its first inter-token gap in the run's gap array */
    uint32_t n_gaps;       /* its gaps there (completed, streamed queries) */
    uint8_t error;         /* lb_qerr */
    uint8_t attempts;      /* 1 + retries */
    uint8_t conns_opened;  /* attempts that had to open a connection */
    int16_t http_status;
    int16_t replica;     /* replica of the last attempt, -1 when none */
    uint8_t counted;     /* lb_token_count: where output_tokens came from */
    bool scheduled_send; /* sent at its scheduled time (Offline/Server), not when a slot freed */
    bool issued;
    bool finished;
} lb_query;

/* Server latency bounds, goodput SLO, early stopping parameters. */
typedef struct {
    double ttft_limit_ms; /* Server: p-th percentile TTFT must not exceed this; 0 = none */
    double tpot_limit_ms; /* Server: p-th percentile TPOT must not exceed this; 0 = none */
    double percentile;    /* for the bounds and early stopping: MLPerf's target latency
                           * percentile, 99 (Server), 90 (closed loops) unless a config sets it */
    double confidence;    /* early stopping confidence (0.99) */
    double slo_ttft_ms;   /* goodput: a query counts when TTFT <= this; 0 = no bound */
    double slo_tpot_ms;   /* goodput: ... and TPOT <= this; 0 = no bound */
} lb_constraints;

/* The MLPerf latency bounds of a model key ("llama3.1-8b", "llama3.1-8b-interactive",
 * ...). LB_ERR_USAGE, naming the known keys, for an unknown one. */
lb_status lb_loadgen_constraints_for_model(const char *key, lb_constraints *out, lb_err *err);
lb_constraints lb_loadgen_constraints_default(void);

#define LB_N_PCTL 6
extern const double lb_loadgen_pctl_levels[LB_N_PCTL]; /* 50, 90, 95, 97, 99, 99.9 */

/* Send or hand-over lag p99 above this means the load generator fell behind its own
 * schedule: the summary warns (docs/PERFORMANCE.md gives the rates one core keeps). */
#define LB_LAG_WARN_MS 10.0

#define LB_MAX_USER_PCTL 8 /* --percentiles: levels beyond the fixed ones */

typedef struct {
    size_t n;
    double min, max, mean, std; /* std: sample standard deviation (n - 1) */
    double p[LB_N_PCTL];
    double user_p[LB_MAX_USER_PCTL]; /* at the summary's user_pctl levels */
} lb_dist;

/* The summary of one run. The caller fills the setup part, then lb_loadgen_summarize()
 * fills the measured part. */
typedef struct {
    /* setup */
    lb_scenario scenario;
    lb_mode mode;
    double target_qps;   /* Server */
    int64_t concurrency; /* SingleStream 1, Concurrency N, else 0 */
    lb_constraints constraints;
    double min_duration_s;
    int64_t min_queries;
    int64_t max_inflight;
    int64_t max_failed; /* queries that may fail after retries before the run fails */
    bool streamed;      /* answers were streamed: TTFT, TPOT and ITL are measured */
    double user_pctl[LB_MAX_USER_PCTL]; /* --percentiles levels (0 < level < 100) */
    int n_user_pctl;
    int64_t preconnected; /* connections opened (and answered) before the first step */
    uint64_t sample_seed, schedule_seed, qsl_seed;
    size_t n_samples;       /* samples performance mode draws from (MLPerf's
                               performance_sample_count): the data set's, or fewer */
    size_t n_total_samples; /* the data set's (MLPerf's qsl_reported_total_count); 0: as
                               n_samples */
    lb_replica replicas[LB_POOL_MAX_REPLICAS];
    size_t n_replicas;
    /* measured */
    int64_t issued, completed, failed, retries;
    int64_t new_connections;         /* attempts that had to open a connection (none was idle) */
    int64_t failures[LB_QERR_COUNT]; /* queries that failed, by their last attempt's reason */
    int64_t resent[LB_QERR_COUNT];   /* attempts that failed and were sent again, by reason */
    double duration_s;               /* t0 to the last completion */
    double final_scheduled_s;        /* the last query's scheduled time */
    double final_issued_s;           /* the last query's send time */
    double final_done_s;             /* the last-scheduled query's done time (LoadGen's final
                                        query), 0 when it did not finish */
    double samples_per_s;            /* completed / duration */
    double mlperf_samples_per_s;     /* MLPerf: (completed - 1) / final_done_s (Server),
                                        (completed - 1) / final_issued_s (closed loops),
                                        completed / duration (Offline) */
    double mlperf_tok_per_s;         /* MLPerf: output tokens / final_done_s (Server), else
                                        output_tok_per_s */
    double scheduled_qps;            /* (issued - 1) / final scheduled time (Server) */
    double output_tok_per_s;
    double total_tok_per_s;
    double goodput_per_s;                /* completed within the SLO per second */
    int64_t good;                        /* completed within the SLO */
    int64_t output_tokens, input_tokens; /* output: of the queries whose count is known */
    bool input_tokens_known;
    int64_t counted[LB_TOKENS_COUNT]; /* completed queries by where their count came from */
    char token_source[40];            /* the sources seen, '+'-joined in preference order:
                                         "usage", "tokenizer+chunks", "usage+unknown", ...;
                                         "none" without completions */
    lb_dist ttft_ms, tpot_ms, itl_ms, latency_ms, queue_ms, send_lag_ms;
    lb_dist handover_lag_ms;       /* handover - scheduled: the scheduler's own lateness */
    lb_dist ttst_ms;               /* time to second token: each query's first inter-token gap */
    lb_dist user_tok_per_s;        /* per query (output tokens - 1) / (done - first token) */
    lb_dist input_len, output_len; /* tokens of completed queries whose count is known */
    bool perf_ok, min_duration_ok, min_queries_ok, early_stop_ok, no_failures, valid;
    lb_early_stop es_ttft, es_tpot, es_latency;
    double target_latency_ms, target_ttft_ms; /* closed loops: latency and (streamed) TTFT at
                                                 constraints.percentile over issued queries,
                                                 a failed one as infinite; NaN elsewhere */
    char reasons[768];                        /* why INVALID, "; "-separated; "" when valid */
    char warnings[1024]; /* what to distrust in a result, one a line; "" when none */
    int n_warnings;
    bool run_failed;   /* no query completed, or more than max_failed failed */
    char failure[400]; /* why run_failed, one sentence */
    /* accuracy mode with references (accuracy/rouge.h) */
    bool has_rouge;
    double rouge[4];          /* rouge1, rouge2, rougeL, rougeLsum: mean F x 100 */
    int64_t gen_len, gen_num; /* characters and samples scored */
    bool rouge_checked;       /* the MLPerf llama3.1-8b targets applied (full data set) */
    bool rouge_pass;
} lb_loadgen_summary;

/* Sets q->output_tokens and q->counted for a completed query whose n_chunks is set: the
 * server's usage when it gave one (usage_tokens >= 0), else tok's count of the generated
 * text, the answer text[0..text_len) and the reasoning model's thinking
 * reasoning[0..reasoning_len) (NULL when none), when tok and text are not NULL, else the
 * streamed pieces (thinking included) when the answer was streamed, else unknown (-1).
 * Fails only when the tokenizer does (memory). */
lb_status lb_loadgen_query_count_output(lb_query *q, int64_t usage_tokens, bool streamed,
                                        const lb_tokenizer *tok, const char *text, size_t text_len,
                                        const char *reasoning, size_t reasoning_len, lb_err *err);

/* Fills the measured part of s from queries q[0..n), the run's inter-token gaps
 * gaps_ms (query i's are gaps_ms[q[i].gap0 ..][0 .. q[i].n_gaps)) and the reasons of the
 * attempts that failed and were sent again, resent[0..n_resent) (lb_qerr). LB_ERR_NOMEM
 * only. */
lb_status lb_loadgen_summarize(const lb_query *q, size_t n, const float *gaps_ms,
                               const uint8_t *resent, size_t n_resent, lb_loadgen_summary *s);

/* "p99_9" for 99.9: a percentile level as it appears in metric names. */
void lb_loadgen_pctl_tag(double level, char *out, size_t cap);

/* Adds s's numbers to r as metrics. */
lb_status lb_loadgen_summary_to_result(const lb_loadgen_summary *s, lb_result *r);

/* What the progress line shows. */
typedef struct {
    int64_t issued, completed, failed, inflight;
    int64_t planned; /* queries the run will issue; -1 when it depends on time */
    double elapsed_s;
    double rate_per_s; /* completions per second over the last interval */
    double eta_s;      /* NaN when unknown */
} lb_loadgen_progress;

#endif
