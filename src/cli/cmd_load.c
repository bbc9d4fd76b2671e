/* cmd_load.c: `llmbench load`: MLPerf-style load against OpenAI-compatible servers.
 *
 * Turns options into lb_loadgen_params and a dataset, runs lb_loadgen_run, prints the
 * MLPerf-style summary (or JSON with --json), and with --out DIR writes summary.txt,
 * detail.json and, in accuracy mode, generated.jsonl. The progress line is drawn here
 * through core/progress.h. The API key is read from the environment variable named by
 * --api-key-env and handed to the HTTP client only; the recorded config holds the
 * variable's name. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/loadrun.h"
#include "cli/output.h"
#include "cli/runctl.h"
#include "cli/tokenizer_opt.h"
#include "core/clock.h"
#include "core/file.h"
#include "core/log.h"
#include "core/progress.h"
#include "core/provenance.h"
#include "core/result.h"
#include "core/version.h"
#include "loadgen/loadgen.h"
#include "loadgen/mlperf_log.h"
#include "loadgen/summary.h"

typedef struct {
    const lb_loadgen_params *p;
    const lb_dataset *ds;
} load_work;

static lb_status do_load(void *ctx, lb_result *r, lb_loadgen_report *rep, lb_err *err) {
    load_work *w = ctx;
    return lb_loadgen_run(w->p, w->ds, r, rep, err);
}

/* --percentiles 75,99.5: levels strictly between 0 and 100, at most LB_MAX_USER_PCTL. */
static lb_status parse_percentiles(const char *text, lb_loadgen_params *p) {
    const char *s = text;
    p->n_user_pctl = 0;
    while (*s) {
        char *end;
        errno = 0;
        double v = strtod(s, &end);
        if (end == s || errno != 0 || !(v > 0 && v < 100) || (*end != ',' && *end != '\0') ||
            p->n_user_pctl == LB_MAX_USER_PCTL)
            return lb_args_usage_error("load",
                                       "--percentiles expects up to %d levels between 0 and 100 "
                                       "separated by commas (\"75,99.5\"), got '%s'",
                                       LB_MAX_USER_PCTL, text);
        p->user_pctl[p->n_user_pctl++] = v;
        s = *end ? end + 1 : end;
    }
    return LB_OK;
}

static lb_status parse_slo(const char *text, lb_constraints *c) {
    char buf[128];
    snprintf(buf, sizeof buf, "%s", text);
    for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok;
         tok = strtok_r(NULL, ",", &save)) {
        double v;
        char key[16], tail;
        if (sscanf(tok, "%15[a-z_]=%lf%c", key, &v, &tail) != 2 || !(v > 0) ||
            (strcmp(key, "ttft_ms") != 0 && strcmp(key, "tpot_ms") != 0))
            return lb_args_usage_error("load",
                                       "--slo expects ttft_ms=X,tpot_ms=Y with positive "
                                       "milliseconds, got '%s'",
                                       text);
        if (strcmp(key, "ttft_ms") == 0)
            c->slo_ttft_ms = v;
        else
            c->slo_tpot_ms = v;
    }
    return LB_OK;
}

static void raise_fd_limit(void) {
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
}

/* Reads --mlperf-conf then --user-conf (either may be NULL) for the model key (LoadGen's
 * spelling: llama3.1-8b is llama3_1-8b) and the scenario. */
static lb_status read_conf_files(const char *mlperf_conf, const char *user_conf,
                                 const char *model_key, lb_scenario scenario,
                                 lb_mlperf_settings *out) {
    char model[64] = "";
    for (size_t i = 0; model_key != NULL && model_key[i] && i + 1 < sizeof model; i++)
        model[i] = model_key[i] == '.' ? '_' : model_key[i];
    const char *sc =
        scenario == LB_SCENARIO_CONCURRENCY ? NULL : lb_loadgen_scenario_name(scenario);
    const char *paths[2] = {mlperf_conf, user_conf};
    for (int i = 0; i < 2; i++) {
        if (paths[i] == NULL) continue;
        char *text = NULL;
        size_t len = 0;
        lb_err err;
        lb_status st = lb_file_read(paths[i], &text, &len, &err);
        if (st == LB_OK)
            st = lb_mlperf_log_conf_apply(text, paths[i], model_key ? model : NULL, sc, out, &err);
        free(text);
        if (st != LB_OK) return lb_args_usage_error("load", "%s", err.msg);
    }
    return LB_OK;
}

int lb_cmd_load(int argc, char **argv) {
    lb_loadgen_params p = lb_loadgen_default_params();
    lb_arg_list endpoints = {0};
    const char *scenario = NULL, *mode = "performance", *api = "completions", *model = NULL;
    const char *api_key_env = NULL, *dataset = NULL, *format = "auto";
    const char *model_key = NULL, *slo = NULL, *in_len = "fixed:128", *out_len = NULL;
    lb_loadrun_opts lo = LB_LOADRUN_OPTS_DEFAULT;
    int64_t synthetic = 0, min_queries = 0, max_inflight = 1024, seed = -1, retries = 2, warmup = 0;
    int64_t prefix_len = 0, prefix_count = 0;
    int64_t eject_after = 5, concurrency = 0, max_tokens = 128, preconnect = -1;
    double qps = 0, min_duration = -1, timeout_s = 600, drain_s = 10, temperature = 0;
    const char *mlperf_conf = NULL, *user_conf = NULL, *percentiles = NULL;
    double ttft_limit = -1, tpot_limit = -1, burstiness = 1, ramp_up = 0;
    bool no_stream = false, ignore_eos = false;
    lb_tokenizer_opt topt = LB_TOKENIZER_OPT_DEFAULT;
    const lb_arg_spec specs[] = {
        {"--endpoint", LB_ARG_LIST, &endpoints, "URL",
         "server base URL (http://host:8000); repeat for replicas", 0, 0, NULL},
        {"--api", LB_ARG_CHOICE, &api, NULL, "OpenAI API (default completions)", 0, 0,
         "completions|chat"},
        {"--model", LB_ARG_STRING, &model, "NAME", "model name sent in each request", 0, 0, NULL},
        {"--api-key-env", LB_ARG_STRING, &api_key_env, "VAR",
         "environment variable holding the API key (sent as Bearer; never stored)", 0, 0, NULL},
        {"--scenario", LB_ARG_CHOICE, &scenario, NULL,
         "default: server with --qps/--sweep-qps, concurrency with --concurrency, else offline", 0,
         0, "offline|server|singlestream|concurrency"},
        {"--mode", LB_ARG_CHOICE, &mode, NULL, "default performance", 0, 0, "performance|accuracy"},
        {"--qps", LB_ARG_DOUBLE, &qps, "R",
         "Server: arrival rate, queries/s (Poisson unless --burstiness)", 1e-6, 1e9, NULL},
        {"--burstiness", LB_ARG_DOUBLE, &burstiness, "B",
         "Server: gaps between arrivals from a gamma distribution of shape B and mean 1/qps "
         "(1 = Poisson, the default; below 1 burstier, above 1 more even)",
         0.001, 1000, NULL},
        {"--ramp-up", LB_ARG_DOUBLE, &ramp_up, "S",
         "Server: the arrival rate rises linearly from 0 to --qps over the first S seconds", 0, 1e7,
         NULL},
        {"--concurrency", LB_ARG_INT, &concurrency, "N", "closed loop with N queries in flight", 1,
         1e6, NULL},
        {"--dataset", LB_ARG_STRING, &dataset, "FILE",
         "cnn_eval.json, a .jsonl with prompt, or ShareGPT JSON (its conversations: "
         "--dataset-format sharegpt-turns)",
         0, 0, NULL},
        {"--dataset-format", LB_ARG_CHOICE, &format, NULL,
         "default auto; sharegpt-turns: every turn of each conversation, sent as successive "
         "chat requests with the conversation so far (needs --api chat)",
         0, 0, "auto|cnn|jsonl|sharegpt|sharegpt-turns"},
        {"--synthetic", LB_ARG_INT, &synthetic, "N", "N synthetic prompts instead of --dataset", 1,
         1e8, NULL},
        {"--input-len", LB_ARG_STRING, &in_len, "DIST",
         "synthetic prompt length, in words or with --tokenizer in tokens: "
         "fixed:N|uniform:A:B|normal:M:S (default fixed:128)",
         0, 0, NULL},
        {"--prefix-len", LB_ARG_INT, &prefix_len, "N",
         "synthetic: a shared prefix of N words (tokens with --tokenizer) before each prompt, "
         "for prefix caches (default 0)",
         0, 1e7, NULL},
        {"--prefix-count", LB_ARG_INT, &prefix_count, "K",
         "synthetic: K distinct prefixes, used in turn (default 1)", 0, 1e6, NULL},
        {"--output-len", LB_ARG_STRING, &out_len, "DIST",
         "synthetic max_tokens distribution (default fixed:--max-tokens)", 0, 0, NULL},
        {"--max-tokens", LB_ARG_INT, &max_tokens, "N",
         "output tokens when the dataset does not say (default 128)", 1, 1e7, NULL},
        {"--min-duration", LB_ARG_DOUBLE, &min_duration, "S",
         "run at least S seconds (default: the config files' min_duration, else 0)", 0, 1e7, NULL},
        {"--min-queries", LB_ARG_INT, &min_queries, "N",
         "issue at least N queries (default: the dataset size)", 1, 1e9, NULL},
        {"--max-inflight", LB_ARG_INT, &max_inflight, "N",
         "Offline/Server: at most N queries in flight (default 1024)", 1, 1e7, NULL},
        {"--preconnect", LB_ARG_INT, &preconnect, "N",
         "open N connections before the run (GET /v1/models) so sends on schedule need no TCP "
         "set-up; 0 = none (default: as many as may be in flight, for Server at most one "
         "second of arrivals but 64)",
         0, 1e6, NULL},
        {"--warmup", LB_ARG_INT, &warmup, "N",
         "send N unrecorded queries first to warm the server up (default 0)", 0, 1e9, NULL},
        {"--seed", LB_ARG_INT, &seed, "N",
         "sample order and arrival seed (default: MLPerf's official sample_index_rng_seed and "
         "schedule_rng_seed, or the config files'); also the synthetic prompts' (default 1)",
         0, 1e18, NULL},
        {"--model-key", LB_ARG_STRING, &model_key, "KEY",
         "MLPerf latency bounds: llama3.1-8b, llama3.1-8b-interactive, ...", 0, 0, NULL},
        {"--ttft-limit-ms", LB_ARG_DOUBLE, &ttft_limit, "MS", "Server p99 TTFT bound (overrides)",
         0, 1e9, NULL},
        {"--tpot-limit-ms", LB_ARG_DOUBLE, &tpot_limit, "MS", "Server p99 TPOT bound (overrides)",
         0, 1e9, NULL},
        {"--mlperf-conf", LB_ARG_STRING, &mlperf_conf, "FILE",
         "LoadGen's mlperf.conf: min_duration, min_query_count, target_qps, ttft_latency, "
         "tpot_latency, target_latency_percentile and the seeds for --model-key and the "
         "scenario (options given here override)",
         0, 0, NULL},
        {"--user-conf", LB_ARG_STRING, &user_conf, "FILE",
         "LoadGen's user.conf, read after --mlperf-conf (its values win)", 0, 0, NULL},
        {"--percentiles", LB_ARG_STRING, &percentiles, "P1,P2,..",
         "report these percentiles too (\"75,99.5\"; always: 50, 90, 95, 97, 99, 99.9)", 0, 0,
         NULL},
        {"--slo", LB_ARG_STRING, &slo, "ttft_ms=X,tpot_ms=Y", "goodput objective", 0, 0, NULL},
        {"--timeout", LB_ARG_DOUBLE, &timeout_s, "S", "per request (default 600)", 0.001, 1e6,
         NULL},
        {"--retries", LB_ARG_INT, &retries, "N",
         "resend a failed request up to N times (default 2)", 0, 100, NULL},
        {"--eject-after", LB_ARG_INT, &eject_after, "N",
         "take a replica out after N failures in a row; 0 never (default 5)", 0, 1e9, NULL},
        {"--drain", LB_ARG_DOUBLE, &drain_s, "S",
         "after Ctrl-C wait S s for in-flight (default 10)", 0, 1e6, NULL},
        {"--no-stream", LB_ARG_FLAG, &no_stream, NULL, "ask for whole answers instead of SSE", 0, 0,
         NULL},
        {"--ignore-eos", LB_ARG_FLAG, &ignore_eos, NULL, "ask for exactly max_tokens (vLLM)", 0, 0,
         NULL},
        {"--temperature", LB_ARG_DOUBLE, &temperature, "T", "sampling temperature (default 0)", 0,
         100, NULL},
        LB_TOKENIZER_ARG_SPECS(&topt),
        LB_LOADRUN_ARG_SPECS(&lo),
    };
    const lb_cli_command cmd = {
        .command = "load",
        .uses_db = true,
        LB_ARG_SPECS(specs),
        .usage = "--endpoint URL [--endpoint URL ...] (--dataset FILE | --synthetic N) [options]",
        .summary =
            "MLPerf-style load (Offline, Server, SingleStream, fixed concurrency, QPS sweep) "
            "against OpenAI-compatible servers; every request to the replica with the "
            "fewest in flight; TTFT, TPOT, ITL, latency, throughput, goodput, VALID or "
            "INVALID with reasons. Exit status: 0 VALID, 3 completed but INVALID (stored ok), "
            "1 failed (no query completed, or more than --max-failed failed; stored failed), "
            "2 bad usage, 130 interrupted.",
    };
    lb_args a;
    int rc = lb_args_parse(&cmd, argc, argv, &a);
    if (rc != LB_ARGS_GO_ON) return rc;
    lb_status st;

    if (endpoints.n == 0)
        return lb_status_exit_code(lb_args_usage_error("load", "give at least one --endpoint URL"));
    for (int i = 0; i < endpoints.n; i++) {
        const char *e = endpoints.items[i];
        if (strncasecmp(e, "http://", 7) != 0 && strncasecmp(e, "https://", 8) != 0) {
            char shown[1024];
            lb_provenance_mask_url(e, shown, sizeof shown);
            return lb_status_exit_code(lb_args_usage_error(
                "load",
                "--endpoint '%s' is not an http:// or https:// URL (such as http://host:8000)",
                shown));
        }
    }
    if ((dataset == NULL) == (synthetic == 0))
        return lb_status_exit_code(
            lb_args_usage_error("load", "give exactly one of --dataset FILE and --synthetic N"));
    bool rated = lb_loadrun_opts_rated(&lo); /* rates come from a list or a search */
    if ((qps > 0 || rated) && concurrency > 0)
        return lb_status_exit_code(lb_args_usage_error(
            "load",
            "--qps, --sweep-qps and --search-qps set the Server scenario's arrival rate and "
            "--concurrency a closed loop: give one of them"));
    if (scenario == NULL)
        scenario = (qps > 0 || rated) ? "server" : concurrency > 0 ? "concurrency" : "offline";
    if ((st = lb_loadrun_opts_check("load", &lo, qps, scenario)) != LB_OK)
        return lb_status_exit_code(st);
    if ((burstiness != 1 || ramp_up > 0) && strcmp(scenario, "server") != 0)
        return lb_status_exit_code(lb_args_usage_error(
            "load", "--burstiness and --ramp-up shape the Server scenario's arrivals, not %s",
            scenario));
    if (concurrency > 0 && strcmp(scenario, "concurrency") != 0)
        return lb_status_exit_code(lb_args_usage_error(
            "load", "--concurrency applies to --scenario concurrency only, not %s", scenario));
    p.scenario = strcmp(scenario, "server") == 0         ? LB_SCENARIO_SERVER
                 : strcmp(scenario, "singlestream") == 0 ? LB_SCENARIO_SINGLE_STREAM
                 : strcmp(scenario, "concurrency") == 0  ? LB_SCENARIO_CONCURRENCY
                                                         : LB_SCENARIO_OFFLINE;
    lb_mlperf_settings conf = {0};
    if ((st = read_conf_files(mlperf_conf, user_conf, model_key, p.scenario, &conf)) != LB_OK)
        return lb_status_exit_code(st);
    if (p.scenario == LB_SCENARIO_SERVER && qps <= 0 && !rated && conf.has_target_qps)
        qps = conf.target_qps;
    if (p.scenario == LB_SCENARIO_SERVER && !(qps > 0) && !rated)
        return lb_status_exit_code(lb_args_usage_error(
            "load", "--scenario server needs --qps R, --sweep-qps or a target_qps in --user-conf"));
    if (min_duration < 0) min_duration = conf.has_min_duration ? conf.min_duration_ms / 1e3 : 0;
    if (min_queries == 0 && conf.has_min_query_count) min_queries = conf.min_query_count;
    if (p.scenario == LB_SCENARIO_CONCURRENCY && concurrency <= 0)
        return lb_status_exit_code(
            lb_args_usage_error("load", "--scenario concurrency needs --concurrency N"));
    p.mode = strcmp(mode, "accuracy") == 0 ? LB_MODE_ACCURACY : LB_MODE_PERFORMANCE;
    p.qps = qps;
    p.burstiness = burstiness;
    p.ramp_up_s = ramp_up;
    p.concurrency = concurrency;
    p.min_duration_s = min_duration;
    p.min_queries = min_queries;
    p.max_inflight = max_inflight;
    p.max_failed = lo.max_failed;
    p.warmup_queries = warmup;
    p.preconnect = preconnect;
    if (seed >= 0) {
        p.sample_seed = (uint64_t)seed;
        p.schedule_seed = (uint64_t)seed + 1000003;
    } else {
        p.sample_seed = conf.has_sample_seed ? conf.sample_seed : LB_MLPERF_SAMPLE_INDEX_SEED;
        p.schedule_seed = conf.has_schedule_seed ? conf.schedule_seed : LB_MLPERF_SCHEDULE_SEED;
    }
    uint64_t qsl_seed = conf.has_qsl_seed ? conf.qsl_seed : LB_MLPERF_QSL_SEED;
    p.max_tokens = (int32_t)max_tokens;
    p.drain_s = drain_s;
    lb_err err = {""};
    if (model_key && lb_loadgen_constraints_for_model(model_key, &p.constraints, &err) != LB_OK)
        return lb_status_exit_code(lb_args_usage_error("load", "%s", err.msg));
    if (conf.has_ttft) p.constraints.ttft_limit_ms = conf.ttft_latency_ms;
    if (conf.has_tpot) p.constraints.tpot_limit_ms = conf.tpot_latency_ms;
    if (conf.has_percentile) p.constraints.percentile = conf.percentile;
    if (ttft_limit >= 0) p.constraints.ttft_limit_ms = ttft_limit;
    if (tpot_limit >= 0) p.constraints.tpot_limit_ms = tpot_limit;
    if (slo && (st = parse_slo(slo, &p.constraints)) != LB_OK) return lb_status_exit_code(st);
    if (percentiles && (st = parse_percentiles(percentiles, &p)) != LB_OK)
        return lb_status_exit_code(st);
    p.model_key = model_key;
    p.request.api = (lb_api)lb_openai_api_parse(api);
    p.request.model = model;
    p.request.stream = !no_stream;
    p.request.ignore_eos = ignore_eos;
    p.request.temperature = temperature;
    p.pool.endpoints = endpoints.items;
    p.pool.n_endpoints = (size_t)endpoints.n;
    p.pool.retries = retries;
    p.pool.eject_after = eject_after;
    p.pool.http.timeout_ms = (int64_t)(timeout_s * 1000.0);
    if (api_key_env != NULL) {
        const char *key = getenv(api_key_env);
        if (key == NULL || key[0] == '\0')
            return lb_status_exit_code(lb_args_usage_error(
                "load", "--api-key-env %s: that environment variable is not set", api_key_env));
        p.pool.http.api_key = key;
        p.api_key_env = api_key_env;
    }

    /* The tokenizer first: synthetic prompts are sized with it, answers without usage and
     * the other datasets' prompts (before t0) are counted with it. */
    lb_tokenizer *tok = NULL;
    if (topt.path != NULL) {
        if ((st = lb_tokenizer_opt_open(&topt, &tok, &err)) != LB_OK) {
            fprintf(stderr, "llmbench load: %s\n", err.msg);
            return lb_status_exit_code(st == LB_ERR_FORMAT ? LB_ERR_USAGE : st);
        }
        p.tokenizer = tok;
        p.tokenizer_path = topt.path;
    }
    if (synthetic == 0 && (prefix_len > 0 || prefix_count > 0)) {
        lb_tokenizer_free(tok);
        return lb_status_exit_code(lb_args_usage_error(
            "load", "--prefix-len and --prefix-count shape --synthetic prompts only"));
    }
    if (strcmp(format, "sharegpt-turns") == 0 && p.request.api != LB_API_CHAT) {
        lb_tokenizer_free(tok);
        return lb_status_exit_code(lb_args_usage_error(
            "load", "--dataset-format sharegpt-turns sends conversations: give --api chat"));
    }
    lb_dataset ds;
    if (synthetic > 0) {
        lb_dataset_synthetic_params sp = lb_dataset_synthetic_default_params();
        sp.n_samples = (size_t)synthetic;
        sp.seed = seed >= 0 ? (uint64_t)seed : 1;
        sp.tok = tok;
        sp.prefix_len = (int32_t)prefix_len;
        sp.n_prefixes = (size_t)prefix_count;
        char fixed[32];
        snprintf(fixed, sizeof fixed, "fixed:%lld", (long long)max_tokens);
        if (out_len == NULL) out_len = fixed;
        if (lb_dataset_len_dist_parse(in_len, &sp.input, &err) != LB_OK ||
            lb_dataset_len_dist_parse(out_len, &sp.output, &err) != LB_OK) {
            lb_tokenizer_free(tok);
            return lb_status_exit_code(lb_args_usage_error("load", "%s", err.msg));
        }
        st = lb_dataset_synthetic(&sp, &ds, &err);
        p.dataset_path = "synthetic";
    } else {
        st = lb_dataset_load(dataset, format, &ds, &err);
        p.dataset_path = dataset;
        if (st == LB_OK && tok != NULL) st = lb_dataset_count_tokens(&ds, tok, &err);
    }
    if (st != LB_OK) {
        fprintf(stderr, "llmbench load: %s\n", err.msg);
        lb_tokenizer_free(tok);
        return lb_status_exit_code(st == LB_ERR_FORMAT ? LB_ERR_USAGE : st);
    }
    if (ds.skipped > 0)
        LB_WARN("dataset %s: %zu records without a prompt and a reply were skipped", p.dataset_path,
                ds.skipped);
    if (lo.out_dir != NULL && (st = lb_loadrun_check_out_dir("load", lo.out_dir)) != LB_OK) {
        lb_tokenizer_free(tok);
        lb_dataset_free(&ds);
        return lb_status_exit_code(st);
    }
    raise_fd_limit();
    if (preconnect > lb_loadgen_connection_room()) {
        lb_tokenizer_free(tok);
        lb_dataset_free(&ds);
        return lb_status_exit_code(lb_args_usage_error(
            "load",
            "--preconnect %lld is more than the open-file limit leaves room for: 0 to %lld here "
            "(raise it with ulimit -n)",
            (long long)preconnect, (long long)lb_loadgen_connection_room()));
    }
    char sut[1200], first[1024];
    lb_provenance_mask_url(endpoints.items[0], first, sizeof first);
    snprintf(sut, sizeof sut, "%s%s%s%s", first, endpoints.n > 1 ? " and other replicas" : "",
             model ? ", model " : "", model ? model : "");
    load_work w = {.p = &p, .ds = &ds};
    lb_loadrun_params lp = {.command = "load",
                            .common = &a.common,
                            .argc = argc + 1, /* runctl records main's command line */
                            .argv = argv - 1,
                            .p = &p,
                            .ds = &ds,
                            .run = do_load,
                            .run_user = &w,
                            .sut_name = sut,
                            .qsl_seed = qsl_seed,
                            .tok = tok};
    lb_loadrun_opts_apply(&lo, model ? model : "load", &lp);
    int code = lb_loadrun(&lp);
    lb_dataset_free(&ds);
    lb_tokenizer_free(tok);
    return code;
}
