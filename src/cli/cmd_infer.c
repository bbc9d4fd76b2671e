/* cmd_infer.c: `llmbench infer`: MLPerf-style scenarios on the built-in engine, in
 * process (infer/infer.h). The options of the scenario and the data are `load`'s; the
 * system under test is opened from cli/engine_opt.h's options. Prints the MLPerf-style
 * summary (or the result as JSON with --json) and stores the run. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/engine_opt.h"
#include "cli/loadrun.h"
#include "core/result.h"
#include "infer/infer.h"

typedef struct {
    const lb_infer_params *p;
    const lb_dataset *ds;
} infer_work;

static lb_status do_infer(void *ctx, lb_result *r, lb_loadgen_report *rep, lb_err *err) {
    infer_work *w = ctx;
    return lb_infer_run(w->p, w->ds, r, rep, err);
}

int lb_cmd_infer(int argc, char **argv) {
    lb_infer_params ip;
    memset(&ip, 0, sizeof ip);
    ip.lg = lb_loadgen_default_params();
    lb_loadgen_params *p = &ip.lg;
    lb_engine_opt eo = LB_ENGINE_OPT_DEFAULT;
    const char *scenario = "offline", *mode = "performance", *dataset = NULL, *format = "auto";
    const char *model_key = NULL, *in_len = "fixed:128", *out_len = NULL, *tokenizer = NULL;
    int64_t synthetic = 0, min_queries = 0, seed = 1, concurrency = 1, max_tokens = 128, top_k = 0;
    double qps = 0, min_duration = 0, drain_s = 10, temperature = 0, top_p = 1;
    double ttft_limit = -1, tpot_limit = -1;
    lb_loadrun_opts lo = LB_LOADRUN_OPTS_DEFAULT;
    bool ignore_eos = false, chat = false;
    const lb_arg_spec specs[] = {
        {"--model", LB_ARG_STRING, &eo.model_dir, "DIR",
         "a Hugging Face model directory (config.json, safetensors, tokenizer.json)", 0, 0, NULL},
        LB_ENGINE_ARG_SPECS(&eo),
        {"--tokenizer", LB_ARG_STRING, &tokenizer, "FILE",
         "tokenizer.json or a tiktoken ranks file (default: the model's; --random without it "
         "sends random prompt ids of each sample's length)",
         0, 0, NULL},
        {"--scenario", LB_ARG_CHOICE, &scenario, NULL, "default offline", 0, 0,
         "offline|server|singlestream|concurrency"},
        {"--mode", LB_ARG_CHOICE, &mode, NULL, "default performance", 0, 0, "performance|accuracy"},
        {"--qps", LB_ARG_DOUBLE, &qps, "R", "Server: Poisson arrival rate, queries/s", 1e-6, 1e9,
         NULL},
        {"--concurrency", LB_ARG_INT, &concurrency, "N",
         "Concurrency: N queries in flight (default 1)", 1, 1e6, NULL},
        {"--dataset", LB_ARG_STRING, &dataset, "FILE",
         "cnn_eval.json, a .jsonl with prompt, or ShareGPT JSON", 0, 0, NULL},
        {"--dataset-format", LB_ARG_CHOICE, &format, NULL, "default auto", 0, 0,
         "auto|cnn|jsonl|sharegpt"},
        {"--synthetic", LB_ARG_INT, &synthetic, "N", "N synthetic prompts instead of --dataset", 1,
         1e8, NULL},
        {"--input-len", LB_ARG_STRING, &in_len, "DIST",
         "synthetic prompt length: fixed:N|uniform:A:B|normal:M:S (default fixed:128)", 0, 0, NULL},
        {"--output-len", LB_ARG_STRING, &out_len, "DIST",
         "synthetic max_tokens distribution (default fixed:--max-tokens)", 0, 0, NULL},
        {"--max-tokens", LB_ARG_INT, &max_tokens, "N",
         "output tokens when the dataset does not say (default 128)", 1, 1e7, NULL},
        {"--min-duration", LB_ARG_DOUBLE, &min_duration, "S", "run at least S seconds (default 0)",
         0, 1e7, NULL},
        {"--min-queries", LB_ARG_INT, &min_queries, "N",
         "issue at least N queries (default: the dataset size)", 1, 1e9, NULL},
        {"--seed", LB_ARG_INT, &seed, "N", "sample order, arrival and sampling seed (default 1)", 0,
         1e18, NULL},
        {"--model-key", LB_ARG_STRING, &model_key, "KEY",
         "MLPerf latency bounds: llama3.1-8b, llama3.1-8b-interactive, ...", 0, 0, NULL},
        {"--ttft-limit-ms", LB_ARG_DOUBLE, &ttft_limit, "MS", "Server p99 TTFT bound (overrides)",
         0, 1e9, NULL},
        {"--tpot-limit-ms", LB_ARG_DOUBLE, &tpot_limit, "MS", "Server p99 TPOT bound (overrides)",
         0, 1e9, NULL},
        {"--drain", LB_ARG_DOUBLE, &drain_s, "S",
         "after Ctrl-C run the in-flight queries for up to S s (default 10)", 0, 1e6, NULL},
        {"--ignore-eos", LB_ARG_FLAG, &ignore_eos, NULL, "generate exactly max_tokens", 0, 0, NULL},
        {"--temperature", LB_ARG_DOUBLE, &temperature, "T", "sampling temperature (default 0)", 0,
         100, NULL},
        {"--top-k", LB_ARG_INT, &top_k, "K", "sample among the K likeliest (default 0: all)", 0,
         1e9, NULL},
        {"--top-p", LB_ARG_DOUBLE, &top_p, "P", "nucleus sampling mass (default 1)", 1e-6, 1, NULL},
        {"--chat", LB_ARG_FLAG, &chat, NULL, "wrap each prompt in Llama 3's chat format", 0, 0,
         NULL},
        LB_LOADRUN_ARG_SPECS(&lo),
    };
    const lb_cli_command cmd = {
        .command = "infer",
        .uses_db = true,
        LB_ARG_SPECS(specs),
        .usage = "(--model DIR | --random PRESET) (--dataset FILE | --synthetic N) [options]",
        .summary = "MLPerf-style inference benchmark on the built-in engine (paged KV cache, "
                   "continuous batching), in process: Offline, Server, SingleStream or fixed "
                   "concurrency, performance or accuracy mode; the load generator's metrics and "
                   "verdict. Exit status: 0 VALID, 3 completed but INVALID (stored ok; a search: "
                   "no VALID rate), 1 failed (no query completed, or more than --max-failed "
                   "failed; stored failed), 2 bad usage, 130 interrupted.",
    };
    lb_args a;
    int rc = lb_args_parse(&cmd, argc, argv, &a);
    if (rc != LB_ARGS_GO_ON) return rc;
    if ((dataset == NULL) == (synthetic == 0))
        return lb_status_exit_code(
            lb_args_usage_error("infer", "give exactly one of --dataset FILE and --synthetic N"));
    p->scenario = strcmp(scenario, "server") == 0         ? LB_SCENARIO_SERVER
                  : strcmp(scenario, "singlestream") == 0 ? LB_SCENARIO_SINGLE_STREAM
                  : strcmp(scenario, "concurrency") == 0  ? LB_SCENARIO_CONCURRENCY
                                                          : LB_SCENARIO_OFFLINE;
    lb_status rst = lb_loadrun_opts_check("infer", &lo, qps, scenario);
    if (rst != LB_OK) return lb_status_exit_code(rst);
    if (p->scenario == LB_SCENARIO_SERVER && qps <= 0 && !lb_loadrun_opts_rated(&lo))
        return lb_status_exit_code(lb_args_usage_error(
            "infer", "--scenario server needs --qps R, --sweep-qps or --search-qps"));
    if (lo.out_dir && (rst = lb_loadrun_check_out_dir("infer", lo.out_dir)) != LB_OK)
        return lb_status_exit_code(rst);
    p->mode = strcmp(mode, "accuracy") == 0 ? LB_MODE_ACCURACY : LB_MODE_PERFORMANCE;
    p->qps = qps;
    p->concurrency = concurrency;
    p->min_duration_s = min_duration;
    p->min_queries = min_queries;
    p->max_inflight = 0;
    p->max_failed = lo.max_failed;
    p->sample_seed = (uint64_t)seed;
    p->schedule_seed = (uint64_t)seed + 1000003;
    p->max_tokens = (int32_t)max_tokens;
    p->drain_s = drain_s;
    p->request.ignore_eos = ignore_eos;
    p->request.temperature = temperature;
    p->request.model = eo.model_dir ? eo.model_dir : eo.random;
    p->model_key = model_key;
    lb_err err = {""};
    if (model_key && lb_loadgen_constraints_for_model(model_key, &p->constraints, &err) != LB_OK)
        return lb_status_exit_code(lb_args_usage_error("infer", "%s", err.msg));
    if (ttft_limit >= 0) p->constraints.ttft_limit_ms = ttft_limit;
    if (tpot_limit >= 0) p->constraints.tpot_limit_ms = tpot_limit;
    ip.sampling = (lb_sampling){.temperature = (float)temperature,
                                .top_k = (int32_t)top_k,
                                .top_p = (float)top_p,
                                .seed = (uint64_t)seed};
    ip.chat = chat;

    lb_dataset ds;
    lb_status st;
    if (synthetic > 0) {
        lb_dataset_synthetic_params sp = lb_dataset_synthetic_default_params();
        sp.n_samples = (size_t)synthetic;
        sp.seed = (uint64_t)seed;
        char fixed[32];
        snprintf(fixed, sizeof fixed, "fixed:%lld", (long long)max_tokens);
        if (out_len == NULL) out_len = fixed;
        if (lb_dataset_len_dist_parse(in_len, &sp.input, &err) != LB_OK ||
            lb_dataset_len_dist_parse(out_len, &sp.output, &err) != LB_OK)
            return lb_status_exit_code(lb_args_usage_error("infer", "%s", err.msg));
        st = lb_dataset_synthetic(&sp, &ds, &err);
        p->dataset_path = "synthetic";
    } else {
        st = lb_dataset_load(dataset, format, &ds, &err);
        p->dataset_path = dataset;
    }
    if (st != LB_OK) {
        fprintf(stderr, "llmbench infer: %s\n", err.msg);
        return lb_status_exit_code(st == LB_ERR_FORMAT ? LB_ERR_USAGE : st);
    }
    lb_engine_setup es;
    st = lb_engine_opt_open(&eo, tokenizer, &es, &err);
    if (st != LB_OK) {
        fprintf(stderr, "llmbench infer: %s\n", err.msg);
        lb_dataset_free(&ds);
        return lb_status_exit_code(st == LB_ERR_FORMAT ? LB_ERR_USAGE : st);
    }
    ip.engine = es.engine;
    ip.tok = es.tok;
    ip.bos_id = es.bos_id;
    ip.eos_ids = es.eos_ids;
    ip.n_eos = es.n_eos;
    ip.sut_name = es.name;
    if (es.tok != NULL && lb_dataset_count_tokens(&ds, es.tok, &err) != LB_OK) {
        fprintf(stderr, "llmbench infer: %s\n", err.msg);
        lb_engine_opt_close(&es);
        lb_dataset_free(&ds);
        return 1;
    }
    char run_name[128];
    snprintf(run_name, sizeof run_name, "%s-%s", es.model_name,
             lb_loadgen_scenario_name(p->scenario));
    infer_work w = {.p = &ip, .ds = &ds};
    lb_loadrun_params lp = {.command = "infer",
                            .common = &a.common,
                            .argc = argc + 1, /* runctl records main's command line */
                            .argv = argv - 1,
                            .p = p,
                            .ds = &ds,
                            .run = do_infer,
                            .run_user = &w,
                            .sut_name = es.name,
                            .qsl_seed = p->sample_seed,
                            .tok = NULL}; /* the engine gives its own ids */
    lb_loadrun_opts_apply(&lo, run_name, &lp);
    int code = lb_loadrun(&lp);
    lb_engine_opt_close(&es);
    lb_dataset_free(&ds);
    return code;
}
