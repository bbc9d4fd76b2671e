/* scenario_opt.h: the options of the scenario and the data that `load` and `infer` share,
 * with one help text and one way of turning them into lb_loadgen_params and a data set:
 * --scenario (default: server with --qps, --sweep-qps or --search-qps, concurrency with
 * --concurrency, else offline), --mode, the Server arrivals, the minimums, seeds (default
 * MLPerf's official ones, or the config files'), the model key's bounds, LoadGen's
 * mlperf.conf and user.conf, --slo, --percentiles, the data (--dataset or --synthetic),
 * and cli/loadrun.h's run options. What only one command has (load's HTTP options, infer's
 * engine) stays with that command. */
#ifndef LB_CLI_SCENARIO_OPT_H
#define LB_CLI_SCENARIO_OPT_H

#include <stdbool.h>
#include <stdint.h>

#include "cli/args.h"
#include "cli/loadrun.h"
#include "loadgen/dataset.h"
#include "loadgen/loadgen.h"
#include "model/tokenizer.h"

typedef struct {
    const char *scenario; /* NULL: chosen from the other options (above) */
    const char *mode, *dataset, *format, *in_len, *out_len, *model_key, *slo, *percentiles;
    const char *mlperf_conf, *user_conf;
    int64_t synthetic, min_queries, seed, concurrency, max_tokens, warmup;
    double qps, min_duration, drain_s, temperature, ttft_limit, tpot_limit, burstiness, ramp_up;
    bool ignore_eos;
    lb_loadrun_opts run;
} lb_scenario_opt;

#define LB_SCENARIO_OPT_DEFAULT                                                                    \
    {                                                                                              \
        .mode = "performance", .format = "auto", .in_len = "fixed:128", .seed = -1,                \
        .max_tokens = 128, .min_duration = -1, .drain_s = 10, .ttft_limit = -1, .tpot_limit = -1,  \
        .burstiness = 1, .run = LB_LOADRUN_OPTS_DEFAULT                                            \
    }

/* The lb_arg_spec rows filling *o (an lb_scenario_opt). */
/* clang-format off */
#define LB_SCENARIO_ARG_SPECS(o)                                                                 \
    {"--scenario", LB_ARG_CHOICE, &(o)->scenario, NULL,                                      \
     "default: server with --qps, --sweep-qps or --search-qps, concurrency with "            \
     "--concurrency, else offline", 0, 0, "offline|server|singlestream|concurrency"},         \
    {"--mode", LB_ARG_CHOICE, &(o)->mode, NULL, "default performance", 0, 0,                  \
     "performance|accuracy"},                                                                 \
    {"--qps", LB_ARG_DOUBLE, &(o)->qps, "R",                                                 \
     "Server: arrival rate, queries/s (Poisson unless --burstiness)", 1e-6, 1e9, NULL},      \
    {"--burstiness", LB_ARG_DOUBLE, &(o)->burstiness, "B",                                   \
     "Server: gaps between arrivals from a gamma distribution of shape B and mean 1/qps "     \
     "(1 = Poisson, the default; below 1 burstier, above 1 more even)", 0.001, 1000, NULL},   \
    {"--ramp-up", LB_ARG_DOUBLE, &(o)->ramp_up, "S",                                         \
     "Server: the arrival rate rises linearly from 0 to --qps over the first S seconds", 0,  \
     1e7, NULL},                                                                              \
    {"--concurrency", LB_ARG_INT, &(o)->concurrency, "N",                                    \
     "closed loop with N queries in flight", 1, 1e6, NULL},                                   \
    {"--dataset", LB_ARG_STRING, &(o)->dataset, "FILE",                                      \
     "cnn_eval.json, a .jsonl with prompt, or ShareGPT JSON (its conversations: "            \
     "--dataset-format sharegpt-turns)", 0, 0, NULL},                                        \
    {"--dataset-format", LB_ARG_CHOICE, &(o)->format, NULL,                                  \
     "default auto; sharegpt-turns: every turn of each conversation, sent as successive "     \
     "chat requests with the conversation so far (load with --api chat)", 0, 0,               \
     "auto|cnn|jsonl|sharegpt|sharegpt-turns"},                                               \
    {"--synthetic", LB_ARG_INT, &(o)->synthetic, "N",                                        \
     "N synthetic prompts instead of --dataset", 1, 1e8, NULL},                               \
    {"--input-len", LB_ARG_STRING, &(o)->in_len, "DIST",                                     \
     "synthetic prompt length, in tokens (load: with --tokenizer, else words; infer: the "     \
     "model's tokenizer): "                                                                   \
     "fixed:N|uniform:A:B|normal:M:S (default fixed:128)", 0, 0, NULL},                       \
    {"--output-len", LB_ARG_STRING, &(o)->out_len, "DIST",                                   \
     "synthetic max_tokens distribution (default fixed:--max-tokens)", 0, 0, NULL},           \
    {"--max-tokens", LB_ARG_INT, &(o)->max_tokens, "N",                                      \
     "output tokens when the dataset does not say (default 128)", 1, 1e7, NULL},              \
    {"--min-duration", LB_ARG_DOUBLE, &(o)->min_duration, "S",                               \
     "run at least S seconds (default: the config files' min_duration, else 0)", 0, 1e7,     \
     NULL},                                                                                   \
    {"--min-queries", LB_ARG_INT, &(o)->min_queries, "N",                                    \
     "issue at least N queries (default: the dataset size)", 1, 1e9, NULL},                   \
    {"--warmup", LB_ARG_INT, &(o)->warmup, "N",                                              \
     "send N unrecorded queries first to warm the system up (default 0)", 0, 1e9, NULL},      \
    {"--seed", LB_ARG_INT, &(o)->seed, "N",                                                  \
     "sample order and arrival seed (default: MLPerf's official sample_index_rng_seed and "   \
     "schedule_rng_seed, or the config files'); also the synthetic prompts' and infer's "     \
     "sampling seed (default 1)", 0, 1e18, NULL},                                             \
    {"--model-key", LB_ARG_STRING, &(o)->model_key, "KEY",                                   \
     "MLPerf latency bounds: llama3.1-8b, llama3.1-8b-interactive, ...", 0, 0, NULL},         \
    {"--ttft-limit-ms", LB_ARG_DOUBLE, &(o)->ttft_limit, "MS",                               \
     "Server p99 TTFT bound (overrides)", 0, 1e9, NULL},                                      \
    {"--tpot-limit-ms", LB_ARG_DOUBLE, &(o)->tpot_limit, "MS",                               \
     "Server p99 TPOT bound (overrides)", 0, 1e9, NULL},                                      \
    {"--mlperf-conf", LB_ARG_STRING, &(o)->mlperf_conf, "FILE",                              \
     "LoadGen's mlperf.conf: min_duration, min_query_count, target_qps, ttft_latency, "       \
     "tpot_latency, target_latency_percentile, performance_sample_count_override and the "   \
     "seeds for --model-key and the scenario (options given here override)", 0, 0, NULL},      \
    {"--user-conf", LB_ARG_STRING, &(o)->user_conf, "FILE",                                  \
     "LoadGen's user.conf, read after --mlperf-conf (its values win)", 0, 0, NULL},           \
    {"--percentiles", LB_ARG_STRING, &(o)->percentiles, "P1,P2,..",                          \
     "report these percentiles too (\"75,99.5\"; always: 50, 90, 95, 97, 99, 99.9)", 0, 0,   \
     NULL},                                                                                   \
    {"--slo", LB_ARG_STRING, &(o)->slo, "ttft_ms=X,tpot_ms=Y", "goodput objective", 0, 0,    \
     NULL},                                                                                   \
    {"--drain", LB_ARG_DOUBLE, &(o)->drain_s, "S",                                           \
     "after Ctrl-C wait S s for the queries in flight (default 10)", 0, 1e6, NULL},           \
    {"--ignore-eos", LB_ARG_FLAG, &(o)->ignore_eos, NULL,                                    \
     "generate exactly max_tokens (sent as vLLM's ignore_eos by load)", 0, 0, NULL},          \
    {"--temperature", LB_ARG_DOUBLE, &(o)->temperature, "T",                                 \
     "sampling temperature (default 0)", 0, 100, NULL},                                       \
    LB_LOADRUN_ARG_SPECS(&(o)->run)
/* clang-format on */

/* Checks the options against each other and fills p's scenario, mode, rates, minimums,
 * seeds (qsl_seed too), performance_sample_count
 * (the config files' performance_sample_count_override), constraints, percentiles,
 * request.ignore_eos and request.temperature, reading the config files. Refused (a usage
 * error, printed, LB_ERR_USAGE, naming the options): a repeated --slo key, a --percentiles
 * level whose name (p99_5) is a fixed or another given level's, a plan of more than
 * LB_LOADGEN_MAX_QUERIES queries. */
lb_status lb_scenario_opt_apply(const char *command, lb_scenario_opt *o, lb_loadgen_params *p);

/* The data: --synthetic (its lengths in tokens of tok when given; a shared prefix of
 * prefix_len words or tokens, n_prefixes of them) or --dataset, prompts counted with tok
 * when given. Sets p->dataset_path. Errors are printed with the command's name; returns
 * the status (a malformed file is LB_ERR_USAGE). */
lb_status lb_scenario_opt_dataset(const char *command, const lb_scenario_opt *o,
                                  const lb_tokenizer *tok, int32_t prefix_len, size_t n_prefixes,
                                  lb_loadgen_params *p, lb_dataset *ds);

#endif
