/* cmd_serve.c: `llmbench serve`: an OpenAI-compatible HTTP server (serve/server.h).
 *
 * With --synthetic the tokens come from the synthetic source (serve/synthetic.h) with the
 * given timing; with --model DIR or --random PRESET from the built-in engine
 * (serve/engine_source.h, opened by cli/engine_opt.h). The first line on stdout (on stderr
 * with --json) is "listening on http://HOST:PORT" (flushed), so scripts and tests can start
 * it on port 0 and read the port. It serves until SIGINT or SIGTERM, then drains and exits
 * 0; the counters go to stderr, or with --json as the one JSON document on stdout. A
 * signal that comes while the engine loads ends it before the port opens: exit 130. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/engine_opt.h"
#include "core/clock.h"
#include "core/log.h"
#include "core/signals.h"
#include "engine/engine.h"
#include "serve/engine_source.h"
#include "serve/server.h"
#include "serve/synthetic.h"

/* Descriptors the server needs besides its connections: standard streams, the listening
 * socket, each worker's wake-up channel, the timer's and the guard's, with room to spare. */
#define RESERVED_FDS 64
/* Seconds the engine's requests failed at the end of the drain get to send their error. */
#define FAILED_REPLY_S 2.0

/* Each connection is a descriptor: allow as many as the hard limit does. Returns how many
 * connections the limit leaves room for. */
static int64_t raise_fd_limit(int64_t threads) {
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0) return 65536;
    if (rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        if (setrlimit(RLIMIT_NOFILE, &rl) != 0) {
            LB_WARN("serve: could not raise the open-file limit: %s", strerror(errno));
            getrlimit(RLIMIT_NOFILE, &rl);
        }
    }
    int64_t room = (int64_t)rl.rlim_cur - RESERVED_FDS - 2 * threads;
    return room < 1 ? 1 : room > 65536 ? 65536 : room;
}

static void print_stats(const lb_server_stats *st, const char *url, double uptime_s, bool json) {
    if (json) {
        printf("{\"url\":\"%s\",\"requests\":%llu,\"streamed\":%llu,\"completed\":%llu,"
               "\"faults\":%llu,\"client_errors\":%llu,\"aborted\":%llu,\"tokens\":%llu,"
               "\"idle_closed\":%llu,\"slow_closed\":%llu,\"busy\":%llu,\"malformed\":%llu,"
               "\"over_limit\":%llu,\"uptime_s\":%.3f}\n",
               url, (unsigned long long)st->requests, (unsigned long long)st->streamed,
               (unsigned long long)st->completed, (unsigned long long)st->faults,
               (unsigned long long)st->client_errors, (unsigned long long)st->aborted,
               (unsigned long long)st->tokens, (unsigned long long)st->idle_closed,
               (unsigned long long)st->slow_closed, (unsigned long long)st->busy,
               (unsigned long long)st->malformed, (unsigned long long)st->over_limit, uptime_s);
        fflush(stdout);
        return;
    }
    fprintf(stderr,
            "serve: %llu completion requests (%llu streamed): %llu completed, %llu faults, "
            "%llu aborted; %llu client errors (4xx, any path); %llu tokens sent in %.1f s; "
            "connections closed "
            "idle %llu, slow %llu; %llu refused for the body memory budget, %llu for a malformed "
            "request head, %llu at the connection limit\n",
            (unsigned long long)st->requests, (unsigned long long)st->streamed,
            (unsigned long long)st->completed, (unsigned long long)st->faults,
            (unsigned long long)st->aborted, (unsigned long long)st->client_errors,
            (unsigned long long)st->tokens, uptime_s, (unsigned long long)st->idle_closed,
            (unsigned long long)st->slow_closed, (unsigned long long)st->busy,
            (unsigned long long)st->malformed, (unsigned long long)st->over_limit);
}

/* The options of the engine given with --synthetic, or of the synthetic source given
 * with the engine: the first one, as spelt on the command line, or NULL. Such an option
 * would change nothing, so it is refused rather than ignored. */
static const char *other_source_option(bool synthetic, const lb_engine_opt *eo,
                                       const char *tokenizer, const char *served_name,
                                       double temperature, int64_t top_k, double top_p,
                                       bool ignore_eos, const lb_synthetic_params *syn) {
    if (synthetic) {
        const char *e = lb_engine_opt_first_set(eo);
        return e                  ? e
               : tokenizer        ? "--tokenizer"
               : served_name      ? "--served-name"
               : temperature != 0 ? "--temperature"
               : top_k != 0       ? "--top-k"
               : top_p != 1       ? "--top-p"
               : ignore_eos       ? "--ignore-eos"
                                  : NULL;
    }
    const lb_synthetic_params d = lb_synthetic_default_params();
    return syn->ttft_ms != d.ttft_ms   ? "--ttft-ms"
           : syn->tpot_ms != d.tpot_ms ? "--tpot-ms"
           : syn->slots != d.slots     ? "--slots"
                                       : NULL;
}

int lb_cmd_serve(int argc, char **argv) {
    lb_server_params sp = lb_server_default_params();
    lb_synthetic_params syn = lb_synthetic_default_params();
    bool synthetic = false, ignore_eos = false;
    lb_engine_opt eo = LB_ENGINE_OPT_DEFAULT;
    const char *tokenizer = NULL, *served_name = NULL;
    double temperature = 0, top_p = 1;
    int64_t top_k = 0;
    const char *fault = "none";
    int64_t port = sp.port, threads = 0, max_tokens = 0, seed = 1; /* max_tokens 0: not given */
    double drain_s = 5.0;
    int64_t max_connections = 0, body_mib = (int64_t)(sp.body_memory_bytes >> 20);
    const lb_arg_spec specs[] = {
        {"--synthetic", LB_ARG_FLAG, &synthetic, NULL,
         "serve synthetic tokens with the timing below instead of the engine", 0, 0, NULL},
        {"--model", LB_ARG_STRING, &eo.model_dir, "DIR",
         "the engine: a Hugging Face model directory (with --synthetic: the model id to "
         "report, default synthetic)",
         0, 0, NULL},
        LB_ENGINE_ARG_SPECS(&eo),
        {"--tokenizer", LB_ARG_STRING, &tokenizer, "FILE",
         "tokenizer.json or a tiktoken ranks file (default: the model's; --random needs one)", 0, 0,
         NULL},
        {"--served-name", LB_ARG_STRING, &served_name, "NAME",
         "engine: the model id for /v1/models (default: the directory's or preset's name)", 0, 0,
         NULL},
        {"--temperature", LB_ARG_DOUBLE, &temperature, "T",
         "engine: sampling temperature of a request that names none (default 0, greedy)", 0, 100,
         NULL},
        {"--top-k", LB_ARG_INT, &top_k, "K",
         "engine: sample among the K likeliest, for a request without top_k (default all)", 0, 1e9,
         NULL},
        {"--top-p", LB_ARG_DOUBLE, &top_p, "P",
         "engine: nucleus mass, for a request without top_p (default 1)", 1e-6, 1, NULL},
        {"--ignore-eos", LB_ARG_FLAG, &ignore_eos, NULL,
         "engine: generate max_tokens for a request without ignore_eos", 0, 0, NULL},
        {"--host", LB_ARG_STRING, &sp.host, "ADDR", "address to listen on (default 127.0.0.1)", 0,
         0, NULL},
        {"--port", LB_ARG_INT, &port, "P", "TCP port; 0 picks a free one (default 8000)", 0, 65535,
         NULL},
        {"--ttft-ms", LB_ARG_DOUBLE, &syn.ttft_ms, "MS",
         "synthetic: first token this long after the request arrives (default 0)", 0, 3.6e6, NULL},
        {"--tpot-ms", LB_ARG_DOUBLE, &syn.tpot_ms, "MS",
         "synthetic: each further token this long after the previous one (default 0)", 0, 3.6e6,
         NULL},
        {"--slots", LB_ARG_INT, &syn.slots, "N",
         "synthetic: generate for at most N requests at once, the rest wait their turn (default "
         "0: no limit)",
         0, 1e6, NULL},
        {"--max-tokens", LB_ARG_INT, &max_tokens, "N",
         "most output tokens a request may ask for, more is refused (400); a request without "
         "max_tokens gets 16, or N when N is less (default: the engine's context, which refuses "
         "a prompt and max_tokens past it; --synthetic 4096)",
         1, 1e7, NULL},
        {"--threads", LB_ARG_INT, &threads, "N", "worker threads (default: online cores)", 0, 4096,
         NULL},
        {"--fault", LB_ARG_CHOICE, &fault, "MODE",
         "make requests fail: drop, stall, bad-json, 500, truncate (default none)", 0, 0,
         "none|drop|stall|bad-json|500|truncate"},
        {"--fault-rate", LB_ARG_DOUBLE, &sp.fault_rate, "R",
         "fraction of completion requests that get the fault (default 1)", 0, 1, NULL},
        {"--seed", LB_ARG_INT, &seed, "S",
         "seed of the synthetic text, of the fault draw and (engine) of the sampling of a "
         "request without a seed: the k-th gets S + k (default 1)",
         0, 0, NULL},
        {"--drain", LB_ARG_DOUBLE, &drain_s, "S",
         "on SIGINT/SIGTERM, seconds in-flight requests get to finish; the engine's unfinished "
         "ones then fail (default 5)",
         0, 3600, NULL},
        {"--idle-timeout", LB_ARG_DOUBLE, &sp.idle_timeout_s, "S",
         "close a connection that sends no request for S seconds; 0 = never (default 30)", 0, 86400,
         NULL},
        {"--read-timeout", LB_ARG_DOUBLE, &sp.read_timeout_s, "S",
         "close a connection whose request head and body take more than S seconds to arrive; "
         "0 = never (default 30)",
         0, 86400, NULL},
        {"--max-connections", LB_ARG_INT, &max_connections, "N",
         "open connections at most; one more is answered 503 and closed (connections that "
         "arrive together may pass it by those not yet taken up; default: what the open-file "
         "limit leaves room for, at most 65536)",
         1, 65536, NULL},
        {"--max-body-memory", LB_ARG_INT, &body_mib, "MIB",
         "request bodies held at once, over all connections, in MiB; a request that would pass "
         "it gets 503 (default 256)",
         1, 1048576, NULL},
    };
    static const char summary[] =
        "Serves an OpenAI-compatible HTTP API (POST /v1/completions, POST "
        "/v1/chat/completions, GET /v1/models, GET /health, GET /metrics for Prometheus), streamed "
        "(SSE) or not. With "
        "--model DIR or --random PRESET the built-in engine generates (continuous batching "
        "over a paged KV cache, on the GPU or with --device cpu the CPU reference; on the "
        "GPU its decode graphs and prefill plans are made before the port opens). With "
        "--synthetic the tokens are pseudo-words timed by --ttft-ms and --tpot-ms: the peer "
        "for testing 'llmbench load' and measuring its capacity. Prints 'listening on "
        "http://HOST:PORT' first (on stderr with --json: stdout then holds one JSON document, "
        "the counters and URL at exit); runs until SIGINT or SIGTERM (one that comes while the "
        "engine loads ends it before the port opens: exit 130); prints its counters on exit.";
    const lb_cli_command cmd = {
        .command = "serve",
        .usage = "(--model DIR | --random PRESET | --synthetic) [options]",
        .summary = summary,
        LB_ARG_SPECS(specs),
    };
    lb_args a;
    int rc = lb_args_parse(&cmd, argc, argv, &a);
    if (rc != LB_ARGS_GO_ON) return rc;
    if (synthetic && eo.random != NULL)
        return lb_status_exit_code(
            lb_args_usage_error("serve", "--synthetic and --random exclude each other"));
    if (!synthetic && eo.model_dir == NULL && eo.random == NULL)
        return lb_status_exit_code(lb_args_usage_error(
            "serve", "give --model DIR or --random PRESET (the engine) or --synthetic"));
    const char *other = other_source_option(synthetic, &eo, tokenizer, served_name, temperature,
                                            top_k, top_p, ignore_eos, &syn);
    if (other != NULL && synthetic)
        return lb_status_exit_code(lb_args_usage_error(
            "serve",
            "%s is an option of the engine, and --synthetic serves without it: drop %s, or "
            "give --model DIR or --random PRESET instead of --synthetic",
            other, other));
    if (other != NULL)
        return lb_status_exit_code(lb_args_usage_error(
            "serve",
            "%s shapes the synthetic tokens, and the engine generates its own: drop %s, or "
            "give --synthetic",
            other, other));
    /* Checked before the engine is opened, which may take a while. */
    const char *id_opt = synthetic ? "--model" : "--served-name";
    const char *id = synthetic ? eo.model_dir : served_name;
    if (id != NULL && strlen(id) > LB_SERVER_MODEL_MAX_BYTES)
        return lb_status_exit_code(lb_args_usage_error(
            "serve", "%s is %zu bytes long, and a model id is at most %d: give a shorter %s",
            id_opt, strlen(id), LB_SERVER_MODEL_MAX_BYTES, id_opt));
    if (eo.random != NULL && tokenizer == NULL)
        return lb_status_exit_code(lb_args_usage_error(
            "serve",
            "--random %s has no tokenizer and serving turns text into ids: give "
            "--tokenizer FILE (tokenizer.json or a tiktoken ranks file)",
            eo.random));
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    int64_t room = raise_fd_limit(threads > 0 ? threads : cores > 0 ? cores : 1);
    if (max_connections > room)
        return lb_status_exit_code(lb_args_usage_error(
            "serve",
            "--max-connections %lld is more than the open-file limit leaves room for: at most "
            "%lld here (raise it with ulimit -n)",
            (long long)max_connections, (long long)room));
    sp.connection_limit = (unsigned)(max_connections > 0 ? max_connections : room);
    sp.body_memory_bytes = (size_t)body_mib << 20;
    sp.port = (int)port;
    sp.threads = (int)threads;
    /* the engine's own limit is its context: it refuses a prompt and max_tokens past it
     * (400 saying what fits, as vLLM), so it needs no cap of the server's below that */
    if (max_tokens > 0 || !synthetic) sp.max_tokens = max_tokens > 0 ? max_tokens : INT32_MAX;
    sp.fault = (lb_fault_mode)lb_server_fault_mode_parse(fault);
    sp.seed = (uint64_t)seed;
    syn.seed = (uint64_t)seed;

    lb_err err = {{0}};
    lb_token_source src = {0};
    lb_server *srv = NULL;
    lb_engine_setup es = {0};
    lb_status st;
    if (synthetic) {
        if (eo.model_dir != NULL) sp.model = eo.model_dir;
        st = lb_synthetic_init(&syn, &src, &err);
    } else {
        st = lb_engine_opt_open(&eo, tokenizer, &es, &err);
        /* what the first requests would prepare, before the port opens */
        if (st == LB_OK) st = lb_engine_warmup(es.engine, INT32_MAX, &err);
        lb_engine_source_params ep = {.engine = es.engine,
                                      .tok = es.tok,
                                      .bos_id = es.bos_id,
                                      .eos_ids = es.eos_ids,
                                      .n_eos = es.n_eos,
                                      .sampling = {.temperature = (float)temperature,
                                                   .top_k = (int32_t)top_k,
                                                   .top_p = (float)top_p,
                                                   .seed = (uint64_t)seed},
                                      .ignore_eos = ignore_eos};
        if (st == LB_OK) st = lb_engine_source_init(&ep, &src, &err);
        sp.model = served_name ? served_name : es.model_name;
    }
    /* a Ctrl-C while the engine loaded or warmed up (minutes on a GPU) stops here, before
     * the port opens and "listening" is printed */
    if (st == LB_OK && lb_signals_interrupted())
        st = lb_fail(&err, LB_ERR_INTERRUPTED, "interrupted before the server started");
    if (st == LB_OK) st = lb_server_start(&sp, &src, &srv, &err);
    if (st != LB_OK) {
        fprintf(stderr, "llmbench serve: %s\n", err.msg);
        if (synthetic)
            lb_synthetic_free(&src);
        else
            lb_engine_source_free(&src);
        lb_engine_opt_close(&es);
        return lb_status_exit_code(st);
    }
    if (!synthetic) LB_INFO("serve: %s", es.name);
    int64_t t0 = lb_clock_now_ns();
    bool v6 = strchr(sp.host, ':') != NULL;
    char url[320];
    snprintf(url, sizeof url, "http://%s%s%s:%d", v6 ? "[" : "", sp.host, v6 ? "]" : "",
             lb_server_port(srv));
    /* With --json stdout holds one document (the counters at exit, with the URL); the
     * line a script reads the port from goes to stderr then. */
    FILE *where = a.common.json ? stderr : stdout;
    fprintf(where, "listening on %s\n", url);
    fflush(where);

    while (!lb_signals_interrupted())
        nanosleep(&(struct timespec){.tv_nsec = 20000000}, NULL);
    LB_INFO("serve: signal %d: draining", lb_signals_received());
    /* what the engine has not finished by the end of the drain fails then, rather than
     * keeping the server's threads until it is done; its error replies get a moment more
     * (the engine ends them after the step it is in) */
    if (!synthetic) lb_engine_source_drain(&src, lb_clock_now_ns() + (int64_t)(drain_s * 1e9));
    lb_server_shutdown(srv, synthetic ? drain_s : drain_s + FAILED_REPLY_S);
    lb_server_stats stats;
    lb_server_get_stats(srv, &stats);
    print_stats(&stats, url, (double)(lb_clock_now_ns() - t0) / 1e9, a.common.json);
    lb_server_free(srv);
    if (synthetic)
        lb_synthetic_free(&src);
    else
        lb_engine_source_free(&src);
    lb_engine_opt_close(&es);
    return 0;
}
