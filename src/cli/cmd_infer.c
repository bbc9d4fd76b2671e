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
#include "cli/scenario_opt.h"
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

/* The fewest queries that n_unfit of the n samples become in the run p describes,
 * whatever order its seeds draw (loadgen.c): accuracy mode sends every sample once; a
 * performance run sends --min-queries queries or more (default: one per sample of its set),
 * each pass over its set of samples (performance_sample_count of them, drawn by qsl_seed,
 * else all) sending every one once and a pass cut short sending the unfit ones last at
 * best. *every: every sample the run may send is unfit, so no query can complete. */
static int64_t unfit_queries(const lb_loadgen_params *p, size_t n, size_t n_unfit, bool *every) {
    int64_t set = (int64_t)n;
    if (p->mode == LB_MODE_PERFORMANCE && p->performance_sample_count > 0 &&
        p->performance_sample_count < set)
        set = p->performance_sample_count;
    const int64_t in_set = (int64_t)n_unfit - ((int64_t)n - set); /* unfit for sure in the set */
    *every = in_set == set;
    if (in_set <= 0) return 0;
    if (p->mode == LB_MODE_ACCURACY) return in_set;
    const int64_t want = p->min_queries > 0 ? p->min_queries : set;
    const int64_t last = want % set - (set - in_set);
    return want / set * in_set + (last > 0 ? last : 0);
}

/* A sample whose prompt and output can never fit the engine's context, or its whole KV
 * cache when that is smaller, fails at its turn, after the run has begun, each query made
 * of it: when the queries they become are sure to be more than --max-failed allows, or
 * every query would fail, the run is a usage error before anything runs, naming the first
 * such sample. The prompt counts its known tokens (one when unknown) and, where the engine
 * puts it before them (bos: a tokenizer, a bos id and no --chat), the bos id, except in a
 * count that holds it already (in_file[i]: a cnn_eval record's tok_input; in_file NULL:
 * none); what --chat adds is the engine's to refuse. */
static lb_status check_fits(const lb_dataset *ds, const lb_loadgen_params *p,
                            const lb_engine_info *info, bool bos, const bool *in_file) {
    const bool by_cache = info->kv_tokens < info->max_ctx;
    const int64_t limit = by_cache ? info->kv_tokens : info->max_ctx;
    size_t n_unfit = 0, first = 0;
    int64_t first_in = 0, first_out = 0;
    bool first_bos = false;
    for (size_t i = 0; i < ds->n; i++) {
        const lb_sample *s = &ds->samples[i];
        const bool add_bos = bos && !(in_file != NULL && in_file[i]);
        int64_t out = s->max_tokens > 0 ? s->max_tokens : p->max_tokens;
        int64_t in = (s->input_tokens > 0 ? s->input_tokens : 1) + add_bos;
        if (in + out <= limit) continue;
        if (n_unfit++ == 0) first = i, first_in = in, first_out = out, first_bos = add_bos;
    }
    if (n_unfit == 0) return LB_OK;
    bool every = false;
    const int64_t failing = unfit_queries(p, ds->n, n_unfit, &every);
    if (!every && failing <= p->max_failed) return LB_OK;
    char why[160];
    if (every)
        snprintf(why, sizeof why, "so no query could complete");
    else
        snprintf(why, sizeof why,
                 "so at least %lld of the run's queries would fail, more than --max-failed %lld",
                 (long long)failing, (long long)p->max_failed);
    return lb_args_usage_error("infer",
                               "%zu of %zu samples cannot fit the engine's %s of %lld tokens "
                               "(sample %zu: a prompt of %lld%s and %lld to generate), %s: give "
                               "a smaller --max-tokens or --output-len, shorter prompts, or a "
                               "larger %s",
                               n_unfit, ds->n, by_cache ? "whole KV cache" : "context",
                               (long long)limit, first, (long long)first_in,
                               first_bos ? " with the bos id" : "", (long long)first_out, why,
                               by_cache ? "--kv-tokens" : "--max-ctx");
}

/* The samples whose token count is the data file's own ((*out)[i]), read before
 * lb_dataset_count_tokens counts the others: a cnn_eval record's tok_input, MLPerf's ids of
 * the whole prompt, the bos id first. *out (the caller frees it) is NULL for a format that
 * carries no counts. */
static lb_status counts_in_file(const lb_dataset *ds, bool **out, lb_err *err) {
    *out = NULL;
    if (strcmp(ds->format, "cnn") != 0) return LB_OK;
    bool *in_file = calloc(ds->n ? ds->n : 1, sizeof *in_file);
    if (in_file == NULL)
        return lb_fail(err, LB_ERR_NOMEM, "out of memory for the samples' token counts");
    for (size_t i = 0; i < ds->n; i++)
        in_file[i] = ds->samples[i].input_tokens >= 0;
    *out = in_file;
    return LB_OK;
}

/* Without a tokenizer (--random, no --tokenizer) a prompt is random ids of its sample's
 * token count: a data file's samples must carry one, and there is no text to wrap in a
 * chat format. Checked before the engine loads. */
static lb_status check_untokenized(const lb_dataset *ds, bool chat) {
    if (chat)
        return lb_args_usage_error("infer", "--chat wraps prompts in Llama 3's chat format, and "
                                            "--random has no tokenizer to encode them: give "
                                            "--tokenizer FILE or drop --chat");
    for (size_t i = 0; i < ds->n; i++)
        if (ds->samples[i].input_tokens < 1)
            return lb_args_usage_error(
                "infer",
                "--dataset: sample %zu has no token count; without a tokenizer the prompts are "
                "random ids of each sample's count (synthetic or cnn_eval data): give "
                "--tokenizer FILE",
                i);
    return LB_OK;
}

int lb_cmd_infer(int argc, char **argv) {
    lb_infer_params ip;
    memset(&ip, 0, sizeof ip);
    ip.lg = lb_loadgen_default_params();
    lb_loadgen_params *p = &ip.lg;
    lb_engine_opt eo = LB_ENGINE_OPT_DEFAULT;
    lb_scenario_opt so = LB_SCENARIO_OPT_DEFAULT;
    const char *tokenizer = NULL;
    int64_t top_k = 0;
    double top_p = 1;
    bool chat = false;
    const lb_arg_spec specs[] = {
        {"--model", LB_ARG_STRING, &eo.model_dir, "DIR",
         "a Hugging Face model directory (config.json, safetensors, tokenizer.json)", 0, 0, NULL},
        LB_ENGINE_ARG_SPECS(&eo),
        {"--tokenizer", LB_ARG_STRING, &tokenizer, "FILE",
         "tokenizer.json or a tiktoken ranks file (default: the model's; --random without it "
         "sends random prompt ids of each sample's length)",
         0, 0, NULL},
        {"--top-k", LB_ARG_INT, &top_k, "K",
         "sample among the K likeliest (default 0: all; with --temperature above 0)", 0, 1e9, NULL},
        {"--top-p", LB_ARG_DOUBLE, &top_p, "P",
         "nucleus sampling mass (default 1; with --temperature above 0)", 1e-6, 1, NULL},
        {"--chat", LB_ARG_FLAG, &chat, NULL,
         "wrap each prompt in Llama 3's chat format (needs a tokenizer)", 0, 0, NULL},
        LB_SCENARIO_ARG_SPECS(&so),
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
    lb_status st = lb_scenario_opt_apply("infer", &so, p);
    if (st != LB_OK) return lb_status_exit_code(st);
    if (strcmp(so.format, "sharegpt-turns") == 0)
        return lb_status_exit_code(lb_args_usage_error(
            "infer", "--dataset-format sharegpt-turns sends conversations with their history; "
                     "infer sends single prompts: use sharegpt"));
    if (so.run.out_dir && (st = lb_loadrun_check_out_dir("infer", so.run.out_dir)) != LB_OK)
        return lb_status_exit_code(st);
    if ((top_k > 0 || top_p < 1) && !((float)so.temperature > 0)) /* the sampler's type */
        return lb_status_exit_code(lb_args_usage_error(
            "infer",
            "%s cuts what sampling draws from, and --temperature 0 (the default) "
            "decodes greedily: give --temperature T or drop it",
            top_k > 0 ? "--top-k" : "--top-p"));
    p->max_inflight = 0;
    p->request.model = eo.model_dir ? eo.model_dir : eo.random;
    ip.sampling = (lb_sampling){.temperature = (float)so.temperature,
                                .top_k = (int32_t)top_k,
                                .top_p = (float)top_p,
                                .seed = so.seed >= 0 ? (uint64_t)so.seed : 1};
    ip.chat = chat;
    /* A data file is read before the engine loads (a bad one costs no loading); synthetic
     * prompts after, sized in tokens of the model's tokenizer when it has one. */
    lb_dataset ds;
    memset(&ds, 0, sizeof ds);
    if (so.synthetic == 0 &&
        (st = lb_scenario_opt_dataset("infer", &so, NULL, 0, 0, p, &ds)) != LB_OK)
        return lb_status_exit_code(st);
    if (eo.model_dir == NULL && eo.random != NULL && tokenizer == NULL &&
        (st = check_untokenized(&ds, chat)) != LB_OK) {
        lb_dataset_free(&ds);
        return lb_status_exit_code(st);
    }
    lb_err err = {""};
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
    bool *in_file = NULL;
    if (so.synthetic > 0)
        st = lb_scenario_opt_dataset("infer", &so, es.tok, 0, 0, p, &ds);
    else if (es.tok != NULL && ((st = counts_in_file(&ds, &in_file, &err)) != LB_OK ||
                                (st = lb_dataset_count_tokens(&ds, es.tok, &err)) != LB_OK))
        fprintf(stderr, "llmbench infer: %s\n", err.msg);
    if (st == LB_OK)
        st = check_fits(&ds, p, lb_engine_get_info(es.engine),
                        es.tok != NULL && es.bos_id >= 0 && !chat, in_file);
    free(in_file);
    if (st != LB_OK) {
        lb_engine_opt_close(&es);
        lb_dataset_free(&ds);
        return lb_status_exit_code(st);
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
                            .tok = NULL}; /* the engine gives its own ids */
    lb_loadrun_opts_apply(&so.run, run_name, &lp);
    int code = lb_loadrun(&lp);
    lb_engine_opt_close(&es);
    lb_dataset_free(&ds);
    return code;
}
