/* cmd_load.c: `llmbench load`: MLPerf-style load against OpenAI-compatible servers.
 *
 * Turns options into lb_loadgen_params and a dataset (endpoints checked with
 * lb_pool_check_endpoint before anything runs) and hands them to cli/loadrun.h, which runs
 * lb_loadgen_run, stores, prints and writes --out. The API key is read from the environment
 * variable named by --api-key-env and handed to the HTTP client only; the recorded config
 * holds the variable's name. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/loadrun.h"
#include "cli/output.h"
#include "cli/runctl.h"
#include "cli/scenario_opt.h"
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
#include "sut/pool.h"

/* --max-inflight's default: queries in flight at most, Offline and Server. */
#define DEFAULT_MAX_INFLIGHT 1024

typedef struct {
    const lb_loadgen_params *p;
    const lb_dataset *ds;
} load_work;

static lb_status do_load(void *ctx, lb_result *r, lb_loadgen_report *rep, lb_err *err) {
    load_work *w = ctx;
    return lb_loadgen_run(w->p, w->ds, r, rep, err);
}

static void raise_fd_limit(void) {
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
}

int lb_cmd_load(int argc, char **argv) {
    lb_loadgen_params p = lb_loadgen_default_params();
    lb_scenario_opt so = LB_SCENARIO_OPT_DEFAULT;
    lb_arg_list endpoints = {0};
    const char *api = "completions", *model = NULL, *api_key_env = NULL;
    int64_t max_inflight = DEFAULT_MAX_INFLIGHT, retries = 2, prefix_len = 0, prefix_count = 0;
    int64_t eject_after = 5, preconnect = -1;
    double timeout_s = 600;
    bool no_stream = false;
    lb_tokenizer_opt topt = LB_TOKENIZER_OPT_DEFAULT;
    const lb_arg_spec specs[] = {
        {"--endpoint", LB_ARG_LIST, &endpoints, "URL",
         "server base URL (http://host:8000, https://[::1]:8443) or an API's full URL "
         "(.../v1/completions); repeat for replicas",
         0, 0, NULL},
        {"--api", LB_ARG_CHOICE, &api, NULL, "OpenAI API (default completions)", 0, 0,
         "completions|chat"},
        {"--model", LB_ARG_STRING, &model, "NAME", "model name sent in each request", 0, 0, NULL},
        {"--api-key-env", LB_ARG_STRING, &api_key_env, "VAR",
         "environment variable holding the API key (sent as Bearer; never stored)", 0, 0, NULL},
        {"--prefix-len", LB_ARG_INT, &prefix_len, "N",
         "synthetic: a shared prefix of N words (tokens with --tokenizer) before each prompt, "
         "for prefix caches (default 0)",
         0, 1e7, NULL},
        {"--prefix-count", LB_ARG_INT, &prefix_count, "K",
         "synthetic: K distinct prefixes, used in turn (default 1)", 0, 1e6, NULL},
        {"--max-inflight", LB_ARG_INT, &max_inflight, "N",
         "Offline/Server: at most N queries in flight (default 1024)", 1, 1e7, NULL},
        {"--preconnect", LB_ARG_INT, &preconnect, "N",
         "open N connections before the run (GET /v1/models) so sends on schedule need no TCP "
         "set-up; 0 = none (default: as many as may be in flight, for Server at most one "
         "second of arrivals but 64)",
         0, 1e6, NULL},
        {"--timeout", LB_ARG_DOUBLE, &timeout_s, "S", "per request (default 600)", 0.001, 1e6,
         NULL},
        {"--retries", LB_ARG_INT, &retries, "N",
         "resend a failed request up to N times (default 2; one refused as such, HTTP 400, "
         "413 or 422, is not resent)",
         0, 100, NULL},
        {"--eject-after", LB_ARG_INT, &eject_after, "N",
         "take a replica out after N failures in a row; 0 never (default 5)", 0, 1e9, NULL},
        {"--no-stream", LB_ARG_FLAG, &no_stream, NULL, "ask for whole answers instead of SSE", 0, 0,
         NULL},
        LB_TOKENIZER_ARG_SPECS(&topt),
        LB_SCENARIO_ARG_SPECS(&so),
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
        lb_err why;
        if ((st = lb_pool_check_endpoint(endpoints.items[i], &why)) != LB_OK) {
            char shown[1024];
            lb_provenance_mask_url(endpoints.items[i], shown, sizeof shown);
            bool cut = strlen(shown) > 200; /* the reason must fit on the line */
            return lb_status_exit_code(lb_args_usage_error("load", "--endpoint '%.200s%s' %s",
                                                           shown, cut ? "..." : "", why.msg));
        }
    }
    if (topt.path == NULL &&
        (strcmp(topt.pattern, "auto") != 0 || strcmp(topt.special, "auto") != 0))
        return lb_status_exit_code(lb_args_usage_error(
            "load", "%s shapes the tokenizer: give --tokenizer FILE with it",
            strcmp(topt.pattern, "auto") != 0 ? "--tokenizer-pattern" : "--tokenizer-special"));
    if (so.synthetic > 0 && prefix_count > 0 && prefix_len == 0)
        return lb_status_exit_code(lb_args_usage_error(
            "load", "--prefix-count %lld counts shared prefixes: give --prefix-len N with it",
            (long long)prefix_count));
    if ((st = lb_scenario_opt_apply("load", &so, &p)) != LB_OK) return lb_status_exit_code(st);
    if (max_inflight != DEFAULT_MAX_INFLIGHT && p.scenario != LB_SCENARIO_OFFLINE &&
        p.scenario != LB_SCENARIO_SERVER)
        return lb_status_exit_code(lb_args_usage_error(
            "load",
            "--max-inflight bounds Offline and Server; %s keeps its own number in flight (%s)",
            lb_loadgen_scenario_name(p.scenario),
            p.scenario == LB_SCENARIO_CONCURRENCY ? "--concurrency N" : "one"));
    p.max_inflight = max_inflight;
    p.preconnect = preconnect;
    lb_err err = {""};
    p.request.api = (lb_api)lb_openai_api_parse(api);
    p.request.model = model;
    p.request.stream = !no_stream;
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
    if (so.synthetic == 0 && (prefix_len > 0 || prefix_count > 0)) {
        lb_tokenizer_free(tok);
        return lb_status_exit_code(lb_args_usage_error(
            "load", "--prefix-len and --prefix-count shape --synthetic prompts only"));
    }
    if (strcmp(so.format, "sharegpt-turns") == 0 && p.request.api != LB_API_CHAT) {
        lb_tokenizer_free(tok);
        return lb_status_exit_code(lb_args_usage_error(
            "load", "--dataset-format sharegpt-turns sends conversations: give --api chat"));
    }
    lb_dataset ds;
    if ((st = lb_scenario_opt_dataset("load", &so, tok, (int32_t)prefix_len, (size_t)prefix_count,
                                      &p, &ds)) != LB_OK) {
        lb_tokenizer_free(tok);
        return lb_status_exit_code(st);
    }
    if (so.run.out_dir != NULL &&
        (st = lb_loadrun_check_out_dir("load", so.run.out_dir)) != LB_OK) {
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
                            .tok = tok};
    lb_loadrun_opts_apply(&so.run, model ? model : "load", &lp);
    int code = lb_loadrun(&lp);
    lb_dataset_free(&ds);
    lb_tokenizer_free(tok);
    return code;
}
