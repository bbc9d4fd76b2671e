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
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/runctl.h"
#include "cli/tokenizer_opt.h"
#include "core/clock.h"
#include "core/log.h"
#include "core/progress.h"
#include "core/result.h"
#include "loadgen/loadgen.h"
#include "loadgen/summary.h"

/* The loadgen calls this every progress tick; core/progress.h rate-limits and draws. */
static void print_progress(void *user, const lb_loadgen_progress *p) {
    char total[32] = "";
    if (p->planned >= 0) snprintf(total, sizeof total, "/%lld", (long long)p->planned);
    char eta[32] = "?";
    if (isfinite(p->eta_s)) snprintf(eta, sizeof eta, "%.0f s", p->eta_s);
    lb_progress_update(user, false,
                       "load: %lld%s done, %lld failed, %lld in flight, %.1f/s, %.0f s elapsed, "
                       "ETA %s",
                       (long long)(p->completed + p->failed), total, (long long)p->failed,
                       (long long)p->inflight, p->rate_per_s, p->elapsed_s, eta);
}

typedef struct {
    const lb_loadgen_params *p;
    const lb_dataset *ds;
    lb_loadgen_report rep;
} load_work;

static lb_status do_load(void *ctx, lb_result *r, lb_err *err) {
    load_work *w = ctx;
    return lb_loadgen_run(w->p, w->ds, r, &w->rep, err);
}

static lb_status parse_sweep(const char *text, lb_loadgen_params *p) {
    const char *s = text;
    p->n_sweep = 0;
    while (*s) {
        char *end;
        errno = 0;
        double v = strtod(s, &end);
        if (end == s || errno != 0 || !(v > 0) || (*end != ',' && *end != '\0') ||
            p->n_sweep == LB_LOADGEN_MAX_SWEEP)
            return lb_args_usage_error("load",
                                       "--sweep-qps expects up to %d positive rates separated "
                                       "by commas (\"1,2,4\"), got '%s'",
                                       LB_LOADGEN_MAX_SWEEP, text);
        p->sweep_qps[p->n_sweep++] = v;
        s = *end ? end + 1 : end;
    }
    return p->n_sweep ? LB_OK
                      : lb_args_usage_error("load", "--sweep-qps expects at least one rate");
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

static json_t *verdicts_json(const lb_loadgen_report *rep) {
    json_t *a = json_array();
    for (size_t i = 0; i < rep->n_steps; i++) {
        const lb_loadgen_summary *s = &rep->steps[i];
        json_array_append_new(
            a, json_pack("{s:s, s:f, s:b, s:s, s:s, s:b, s:b, s:b, s:b, s:b}", "scenario",
                         lb_loadgen_scenario_name(s->scenario), "target_qps", s->target_qps,
                         "valid", s->valid, "reasons", s->reasons, "token_source", s->token_source,
                         "performance_constraints", s->perf_ok, "min_duration", s->min_duration_ok,
                         "min_queries", s->min_queries_ok, "early_stopping", s->early_stop_ok,
                         "every_query_completed", s->no_failures));
    }
    return a;
}

static lb_status write_out(const char *dir, const lb_result *r, const lb_loadgen_report *rep,
                           const lb_dataset *ds, const char *sut) {
    if (mkdir(dir, 0777) != 0 && errno != EEXIST) {
        LB_ERROR("--out %s: cannot create the directory: %s", dir, strerror(errno));
        return LB_ERR_IO;
    }
    char path[4096];
    snprintf(path, sizeof path, "%s/summary.txt", dir);
    FILE *f = fopen(path, "w");
    if (f == NULL) goto fail;
    for (size_t i = 0; i < rep->n_steps; i++)
        lb_loadgen_summary_write(f, &rep->steps[i], sut);
    if (fclose(f) != 0) goto fail;
    snprintf(path, sizeof path, "%s/detail.json", dir);
    json_t *j = lb_result_to_json(r);
    json_object_set_new(j, "verdicts", verdicts_json(rep));
    int rc = json_dump_file(j, path, JSON_INDENT(1));
    json_decref(j);
    if (rc != 0) goto fail;
    if (rep->n_texts > 0) {
        snprintf(path, sizeof path, "%s/generated.jsonl", dir);
        f = fopen(path, "w");
        if (f == NULL) goto fail;
        for (size_t i = 0; i < rep->n_texts; i++) {
            json_t *line = json_pack("{s:I, s:s?, s:s?}", "sample", (json_int_t)i, "text",
                                     rep->texts[i], "reference", ds->samples[i].reference);
            json_dumpf(line, f, JSON_COMPACT);
            fputc('\n', f);
            json_decref(line);
        }
        if (fclose(f) != 0) goto fail;
    }
    return LB_OK;
fail:
    LB_ERROR("--out: cannot write %s: %s", path, strerror(errno));
    return LB_ERR_IO;
}

int lb_cmd_load(int argc, char **argv) {
    lb_loadgen_params p = lb_loadgen_default_params();
    lb_arg_list endpoints = {0};
    const char *scenario = NULL, *mode = "performance", *api = "completions", *model = NULL;
    const char *api_key_env = NULL, *dataset = NULL, *format = "auto", *sweep = NULL;
    const char *model_key = NULL, *slo = NULL, *out_dir = NULL, *in_len = "fixed:128";
    const char *out_len = NULL;
    int64_t synthetic = 0, min_queries = 0, max_inflight = 1024, seed = 1, retries = 2, warmup = 0;
    int64_t eject_after = 5, concurrency = 0, max_tokens = 128, preconnect = -1;
    double qps = 0, min_duration = 0, timeout_s = 600, drain_s = 10, temperature = 0;
    double ttft_limit = -1, tpot_limit = -1;
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
        {"--qps", LB_ARG_DOUBLE, &qps, "R", "Server: Poisson arrival rate, queries/s", 1e-6, 1e9,
         NULL},
        {"--sweep-qps", LB_ARG_STRING, &sweep, "R1,R2,..", "Server: run each rate in turn", 0, 0,
         NULL},
        {"--concurrency", LB_ARG_INT, &concurrency, "N", "closed loop with N queries in flight", 1,
         1e6, NULL},
        {"--dataset", LB_ARG_STRING, &dataset, "FILE",
         "cnn_eval.json, a .jsonl with prompt, or ShareGPT JSON", 0, 0, NULL},
        {"--dataset-format", LB_ARG_CHOICE, &format, NULL, "default auto", 0, 0,
         "auto|cnn|jsonl|sharegpt"},
        {"--synthetic", LB_ARG_INT, &synthetic, "N", "N synthetic prompts instead of --dataset", 1,
         1e8, NULL},
        {"--input-len", LB_ARG_STRING, &in_len, "DIST",
         "synthetic prompt words: fixed:N|uniform:A:B|normal:M:S (default fixed:128)", 0, 0, NULL},
        {"--output-len", LB_ARG_STRING, &out_len, "DIST",
         "synthetic max_tokens distribution (default fixed:--max-tokens)", 0, 0, NULL},
        {"--max-tokens", LB_ARG_INT, &max_tokens, "N",
         "output tokens when the dataset does not say (default 128)", 1, 1e7, NULL},
        {"--min-duration", LB_ARG_DOUBLE, &min_duration, "S", "run at least S seconds (default 0)",
         0, 1e7, NULL},
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
        {"--seed", LB_ARG_INT, &seed, "N", "sample order and arrival seed (default 1)", 0, 1e18,
         NULL},
        {"--model-key", LB_ARG_STRING, &model_key, "KEY",
         "MLPerf latency bounds: llama3.1-8b, llama3.1-8b-interactive, ...", 0, 0, NULL},
        {"--ttft-limit-ms", LB_ARG_DOUBLE, &ttft_limit, "MS", "Server p99 TTFT bound (overrides)",
         0, 1e9, NULL},
        {"--tpot-limit-ms", LB_ARG_DOUBLE, &tpot_limit, "MS", "Server p99 TPOT bound (overrides)",
         0, 1e9, NULL},
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
        {"--out", LB_ARG_STRING, &out_dir, "DIR",
         "write summary.txt, detail.json (and generated.jsonl) there", 0, 0, NULL},
        LB_TOKENIZER_ARG_SPECS(&topt),
    };
    const lb_cli_command cmd = {
        .command = "load",
        LB_ARG_SPECS(specs),
        .usage = "--endpoint URL [--endpoint URL ...] (--dataset FILE | --synthetic N) [options]",
        .summary =
            "MLPerf-style load (Offline, Server, SingleStream, fixed concurrency, QPS sweep) "
            "against OpenAI-compatible servers; every request to the replica with the "
            "fewest in flight; TTFT, TPOT, ITL, latency, throughput, goodput, VALID or "
            "INVALID with reasons.",
    };
    lb_args a;
    int rc = lb_args_parse(&cmd, argc, argv, &a);
    if (rc != LB_ARGS_GO_ON) return rc;
    lb_status st;

    if (endpoints.n == 0)
        return lb_status_exit_code(lb_args_usage_error("load", "give at least one --endpoint URL"));
    if ((dataset == NULL) == (synthetic == 0))
        return lb_status_exit_code(
            lb_args_usage_error("load", "give exactly one of --dataset FILE and --synthetic N"));
    if (scenario == NULL)
        scenario = (qps > 0 || sweep) ? "server" : concurrency > 0 ? "concurrency" : "offline";
    p.scenario = strcmp(scenario, "server") == 0         ? LB_SCENARIO_SERVER
                 : strcmp(scenario, "singlestream") == 0 ? LB_SCENARIO_SINGLE_STREAM
                 : strcmp(scenario, "concurrency") == 0  ? LB_SCENARIO_CONCURRENCY
                                                         : LB_SCENARIO_OFFLINE;
    if (p.scenario == LB_SCENARIO_SERVER && qps <= 0 && sweep == NULL)
        return lb_status_exit_code(
            lb_args_usage_error("load", "--scenario server needs --qps R or --sweep-qps"));
    if (p.scenario == LB_SCENARIO_CONCURRENCY && concurrency <= 0)
        return lb_status_exit_code(
            lb_args_usage_error("load", "--scenario concurrency needs --concurrency N"));
    if (sweep && (st = parse_sweep(sweep, &p)) != LB_OK) return lb_status_exit_code(st);
    p.mode = strcmp(mode, "accuracy") == 0 ? LB_MODE_ACCURACY : LB_MODE_PERFORMANCE;
    p.qps = qps;
    p.concurrency = concurrency;
    p.min_duration_s = min_duration;
    p.min_queries = min_queries;
    p.max_inflight = max_inflight;
    p.warmup_queries = warmup;
    p.preconnect = preconnect;
    p.sample_seed = (uint64_t)seed;
    p.schedule_seed = (uint64_t)seed + 1000003;
    p.max_tokens = (int32_t)max_tokens;
    p.drain_s = drain_s;
    lb_err err = {""};
    if (model_key && lb_loadgen_constraints_for_model(model_key, &p.constraints, &err) != LB_OK)
        return lb_status_exit_code(lb_args_usage_error("load", "%s", err.msg));
    if (ttft_limit >= 0) p.constraints.ttft_limit_ms = ttft_limit;
    if (tpot_limit >= 0) p.constraints.tpot_limit_ms = tpot_limit;
    if (slo && (st = parse_slo(slo, &p.constraints)) != LB_OK) return lb_status_exit_code(st);
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

    lb_dataset ds;
    if (synthetic > 0) {
        lb_dataset_synthetic_params sp = lb_dataset_synthetic_default_params();
        sp.n_samples = (size_t)synthetic;
        sp.seed = (uint64_t)seed;
        char fixed[32];
        snprintf(fixed, sizeof fixed, "fixed:%lld", (long long)max_tokens);
        if (out_len == NULL) out_len = fixed;
        if (lb_dataset_len_dist_parse(in_len, &sp.input, &err) != LB_OK ||
            lb_dataset_len_dist_parse(out_len, &sp.output, &err) != LB_OK)
            return lb_status_exit_code(lb_args_usage_error("load", "%s", err.msg));
        st = lb_dataset_synthetic(&sp, &ds, &err);
        p.dataset_path = "synthetic";
    } else {
        st = lb_dataset_load(dataset, format, &ds, &err);
        p.dataset_path = dataset;
    }
    if (st != LB_OK) {
        fprintf(stderr, "llmbench load: %s\n", err.msg);
        return lb_status_exit_code(st == LB_ERR_FORMAT ? LB_ERR_USAGE : st);
    }
    if (ds.skipped > 0)
        LB_WARN("dataset %s: %zu records without a prompt and a reply were skipped", p.dataset_path,
                ds.skipped);
    /* Answers without usage are counted with the tokenizer; so are the prompts, before t0. */
    lb_tokenizer *tok = NULL;
    if (topt.path != NULL) {
        st = lb_tokenizer_opt_open(&topt, &tok, &err);
        if (st == LB_OK) st = lb_dataset_count_tokens(&ds, tok, &err);
        if (st != LB_OK) {
            fprintf(stderr, "llmbench load: %s\n", err.msg);
            lb_tokenizer_free(tok);
            lb_dataset_free(&ds);
            return lb_status_exit_code(st == LB_ERR_FORMAT ? LB_ERR_USAGE : st);
        }
        p.tokenizer = tok;
        p.tokenizer_path = topt.path;
    }
    raise_fd_limit();
    lb_progress prog;
    lb_progress_init(&prog, a.common.verbosity >= 0);
    p.progress = print_progress;
    p.progress_user = &prog;

    lb_result *r = lb_result_new("load", model ? model : "load");
    load_work w = {.p = &p, .ds = &ds};
    lb_loadgen_report *rep = &w.rep;
    json_decref(r->config);
    r->config = lb_loadgen_config_json(&p, &ds);
    int64_t run_id = -1;
    /* runctl records main's command line: this argv starts one word after main's. */
    st = lb_runctl_run(&a.common, argc + 1, argv - 1, r, do_load, &w, &run_id, &err);
    lb_progress_done(&prog);
    char sut[600];
    snprintf(sut, sizeof sut, "%s%s%s%s", endpoints.items[0],
             endpoints.n > 1 ? " and other replicas" : "", model ? ", model " : "",
             model ? model : "");
    if (st != LB_OK && st != LB_ERR_INTERRUPTED) {
        fprintf(stderr, "llmbench load: %s\n", err.msg);
    } else {
        if (a.common.json) {
            json_t *j = lb_result_to_json(r);
            json_object_set_new(j, "verdicts", verdicts_json(rep));
            json_dumpf(j, stdout, JSON_INDENT(1));
            printf("\n");
            json_decref(j);
        } else {
            for (size_t i = 0; i < rep->n_steps; i++)
                lb_loadgen_summary_write(stdout, &rep->steps[i], sut);
        }
        if (out_dir && write_out(out_dir, r, rep, &ds, sut) != LB_OK && st == LB_OK) st = LB_ERR_IO;
        if (st == LB_ERR_INTERRUPTED) fprintf(stderr, "llmbench load: %s\n", err.msg);
    }
    lb_loadgen_report_free(rep);
    lb_result_free(r);
    lb_dataset_free(&ds);
    lb_tokenizer_free(tok);
    return lb_status_exit_code(st);
}
