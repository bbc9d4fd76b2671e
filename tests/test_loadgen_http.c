/* test_loadgen_http.c: the load generator over real HTTP on 127.0.0.1 against
 * `llmbench serve --synthetic` children: every scenario, timing against the configured
 * synthetic TTFT/TPOT, a replica killed mid-run, each fault mode, SIGINT with drain, and
 * the CLI (files written, API key never recorded). */
#include <arpa/inet.h>
#include <jansson.h>
#include <math.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "core/clock.h"
#include "core/signals.h"
#include "loadgen/loadgen.h"
#include "loadgen/summary.h"
#include "test_util.h"

typedef struct {
    pid_t pid;
    char url[64];
} server;

/* Starts `llmbench serve --synthetic --port 0 ARGS...` and reads its first stdout line,
 * "listening on http://HOST:PORT". */
static server start_server(const char *const *args) {
    int fds[2];
    assert_int_equal(pipe(fds), 0);
    const char *argv[32] = {LB_TEST_BIN, "serve", "--synthetic", "--port", "0", "--threads", "2"};
    int n = 7;
    for (int i = 0; args && args[i]; i++)
        argv[n++] = args[i];
    argv[n] = NULL;
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        lb_test_die_with_parent();
        dup2(fds[1], STDOUT_FILENO);
        close(fds[0]);
        close(fds[1]);
        execv(LB_TEST_BIN, (char *const *)argv);
        _exit(127);
    }
    close(fds[1]);
    FILE *f = fdopen(fds[0], "r");
    char line[256] = "";
    assert_non_null(fgets(line, sizeof line, f));
    fclose(f);
    server s = {.pid = pid};
    const char *at = strstr(line, "http://");
    assert_non_null(at);
    snprintf(s.url, sizeof s.url, "%.*s", (int)strcspn(at, "\r\n"), at);
    return s;
}

static void stop_server(server *s) {
    if (s->pid <= 0) return;
    kill(s->pid, SIGKILL);
    waitpid(s->pid, NULL, 0);
    s->pid = 0;
}

static lb_dataset small_dataset(size_t n, int32_t max_tokens) {
    lb_dataset_synthetic_params sp = lb_dataset_synthetic_default_params();
    sp.n_samples = n;
    sp.input = (lb_len_dist){LB_LEN_FIXED, 8, 0};
    sp.output = (lb_len_dist){LB_LEN_FIXED, max_tokens, 0};
    lb_dataset ds;
    lb_err err;
    assert_int_equal(lb_dataset_synthetic(&sp, &ds, &err), LB_OK);
    return ds;
}

static lb_loadgen_params params_for(const char **urls, size_t n_urls) {
    lb_loadgen_params p = lb_loadgen_default_params();
    p.pool.endpoints = urls;
    p.pool.n_endpoints = n_urls;
    p.pool.http.timeout_ms = 5000;
    return p;
}

typedef struct {
    lb_result *r;
    lb_loadgen_report rep;
    lb_status st;
    lb_err err;
} outcome;

static outcome run(const lb_loadgen_params *p, const lb_dataset *ds) {
    outcome o = {.r = lb_result_new("load", "test")};
    o.st = lb_loadgen_run(p, ds, o.r, &o.rep, &o.err);
    /* A run whose queries failed is measured all the same (LB_ERR_RUNTIME, summarized). */
    if (!o.rep.summarized) fail_msg("run failed: %s", o.err.msg);
    return o;
}

static void outcome_free(outcome *o) {
    lb_loadgen_report_free(&o->rep);
    lb_result_free(o->r);
}

static void test_loadgen_server_scenario_matches_synthetic_timing(void **state) {
    (void)state;
    const char *args[] = {"--ttft-ms", "40", "--tpot-ms", "5", NULL};
    server s = start_server(args);
    const char *urls[] = {s.url};
    lb_loadgen_params p = params_for(urls, 1);
    p.scenario = LB_SCENARIO_SERVER;
    p.qps = 40;
    p.min_queries = 40;
    lb_dataset ds = small_dataset(10, 9);
    outcome o = run(&p, &ds);
    const lb_loadgen_summary *sm = &o.rep.summary;
    assert_int_equal(sm->issued, 40);
    assert_int_equal(sm->completed, 40);
    assert_int_equal(sm->preconnected, 40); /* the planned queries bound the default */
    assert_int_equal(sm->output_tokens, 40 * 9);
    assert_string_equal(sm->token_source, "usage");
    /* TTFT from the scheduled time: the server's 40 ms plus little. */
    assert_true(sm->ttft_ms.p[0] >= 39.0 && sm->ttft_ms.p[0] < 55.0);
    /* TPOT: 8 gaps of 5 ms over 8 tokens after the first. */
    assert_true(sm->tpot_ms.p[0] >= 4.9 && sm->tpot_ms.p[0] < 6.5);
    assert_true(sm->itl_ms.p[0] >= 4.5 && sm->itl_ms.p[0] < 7.0);
    assert_int_equal(sm->itl_ms.n, 40 * 8);
    assert_true(sm->scheduled_qps > 20 && sm->scheduled_qps < 80);
    const lb_series *ttft = lb_result_find_series(o.r, "ttft_ms");
    assert_non_null(ttft);
    assert_int_equal(ttft->n, 40);
    /* Sample order is seeded: the same run draws the same samples in the same order. */
    const lb_series *sample = lb_result_find_series(o.r, "sample");
    outcome o2 = run(&p, &ds);
    const lb_series *sample2 = lb_result_find_series(o2.r, "sample");
    assert_memory_equal(sample->values, sample2->values, 40 * sizeof(double));
    const lb_series *sched = lb_result_find_series(o.r, "scheduled_s");
    const lb_series *sched2 = lb_result_find_series(o2.r, "scheduled_s");
    assert_memory_equal(sched->values, sched2->values, 40 * sizeof(double));
    outcome_free(&o2);
    outcome_free(&o);
    lb_dataset_free(&ds);
    stop_server(&s);
}

static void test_loadgen_offline_singlestream_concurrency_and_accuracy(void **state) {
    (void)state;
    const char *args[] = {"--ttft-ms", "10", "--tpot-ms", "1", NULL};
    server s = start_server(args);
    const char *urls[] = {s.url};
    lb_dataset ds = small_dataset(12, 4);
    lb_loadgen_params p = params_for(urls, 1);

    p.scenario = LB_SCENARIO_OFFLINE;
    outcome o = run(&p, &ds);
    assert_int_equal(o.rep.summary.completed, 12);
    const lb_series *sched = lb_result_find_series(o.r, "scheduled_s");
    for (size_t i = 0; i < sched->n; i++)
        assert_float_equal(sched->values[i], 0.0, 0.0);
    outcome_free(&o);

    /* SingleStream: a query is sent only after the previous one is done. */
    p.scenario = LB_SCENARIO_SINGLE_STREAM;
    p.min_queries = 8;
    o = run(&p, &ds);
    assert_int_equal(o.rep.summary.completed, 8);
    const lb_series *sent = lb_result_find_series(o.r, "sent_s");
    const lb_series *done = lb_result_find_series(o.r, "done_s");
    for (size_t i = 1; i < sent->n; i++)
        assert_true(sent->values[i] >= done->values[i - 1]);
    assert_false(o.rep.summary.early_stop_ok); /* 8 < 64 queries */
    outcome_free(&o);

    /* Concurrency 4: queries overlap. */
    p.scenario = LB_SCENARIO_CONCURRENCY;
    p.concurrency = 4;
    p.min_queries = 16;
    o = run(&p, &ds);
    assert_int_equal(o.rep.summary.completed, 16);
    sent = lb_result_find_series(o.r, "sent_s");
    done = lb_result_find_series(o.r, "done_s");
    assert_true(sent->values[3] < done->values[0]);
    outcome_free(&o);

    /* Accuracy: every sample once, its text kept. */
    p.scenario = LB_SCENARIO_OFFLINE;
    p.mode = LB_MODE_ACCURACY;
    p.request.api = LB_API_CHAT;
    o = run(&p, &ds);
    assert_int_equal(o.rep.summary.issued, 12);
    assert_int_equal(o.rep.n_texts, 12);
    for (size_t i = 0; i < 12; i++) {
        assert_non_null(o.rep.texts[i]);
        assert_true(strlen(o.rep.texts[i]) > 0);
    }
    outcome_free(&o);
    lb_dataset_free(&ds);
    stop_server(&s);
}

/* Connections opened before t0 are the ones the queries use: none is opened during the
 * run, also when the client spreads them over several libcurl multi handles (more than
 * 64 connections); without them every slot opens its own. */
static void test_loadgen_preconnected_connections_are_reused(void **state) {
    (void)state;
    const char *args[] = {"--ttft-ms", "5", "--tpot-ms", "1", NULL};
    server s = start_server(args);
    const char *urls[] = {s.url};
    lb_dataset ds = small_dataset(16, 4);
    lb_loadgen_params p = params_for(urls, 1);
    p.scenario = LB_SCENARIO_CONCURRENCY;
    p.concurrency = 8;
    p.min_queries = 64;
    outcome o = run(&p, &ds);
    assert_int_equal(o.rep.summary.completed, 64);
    assert_int_equal(o.rep.summary.preconnected, 8);
    assert_int_equal(o.rep.summary.new_connections, 0);
    assert_float_equal(lb_result_metric(o.r, "connections_opened"), 0.0, 0.0);
    outcome_free(&o);

    p.preconnect = 0;
    o = run(&p, &ds);
    assert_int_equal(o.rep.summary.preconnected, 0);
    assert_true(o.rep.summary.new_connections >= 8);
    outcome_free(&o);

    p.preconnect = -1;
    p.concurrency = 150; /* three multi handles */
    p.min_queries = 600;
    o = run(&p, &ds);
    assert_int_equal(o.rep.summary.completed, 600);
    assert_int_equal(o.rep.summary.preconnected, 150);
    assert_int_equal(o.rep.summary.new_connections, 0);
    outcome_free(&o);
    lb_dataset_free(&ds);
    stop_server(&s);
}

static void test_loadgen_replica_killed_mid_run_loses_no_sample(void **state) {
    (void)state;
    const char *args[] = {"--ttft-ms", "20", "--tpot-ms", "20", NULL};
    server a = start_server(args), b = start_server(args);
    const char *urls[] = {a.url, b.url};
    lb_loadgen_params p = params_for(urls, 2);
    p.scenario = LB_SCENARIO_SERVER;
    p.qps = 100;
    p.min_queries = 100;
    p.pool.retries = 2;
    p.pool.eject_after = 3;
    lb_dataset ds = small_dataset(20, 10);
    pid_t killer = fork();
    if (killer == 0) {
        struct timespec ts = {0, 400000000};
        nanosleep(&ts, NULL);
        kill(a.pid, SIGKILL);
        _exit(0);
    }
    outcome o = run(&p, &ds);
    waitpid(killer, NULL, 0);
    waitpid(a.pid, NULL, 0);
    a.pid = 0;
    const lb_loadgen_summary *sm = &o.rep.summary;
    assert_int_equal(sm->issued, 100);
    assert_int_equal(sm->completed, 100);
    assert_int_equal(sm->failed, 0);
    assert_true(sm->retries > 0);
    assert_true(sm->replicas[0].failed > 0);
    assert_true(sm->replicas[0].ejected);
    assert_false(sm->replicas[1].ejected);
    assert_true(sm->replicas[1].completed > sm->replicas[0].completed);
    assert_int_equal(sm->replicas[0].completed + sm->replicas[1].completed, 100);
    outcome_free(&o);
    lb_dataset_free(&ds);
    stop_server(&b);
}

static void test_loadgen_fault_modes_become_failure_reasons(void **state) {
    (void)state;
    static const struct {
        const char *fault;
        bool stream;
        lb_qerr want;
    } cases[] = {
        {"drop", true, LB_QERR_DROPPED},      {"stall", true, LB_QERR_TIMEOUT},
        {"bad-json", true, LB_QERR_BAD_JSON}, {"bad-json", false, LB_QERR_BAD_JSON},
        {"500", true, LB_QERR_HTTP_5XX},      {"truncate", true, LB_QERR_TRUNCATED},
    };
    lb_dataset ds = small_dataset(4, 6);
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const char *args[] = {"--fault", cases[c].fault, NULL};
        server s = start_server(args);
        const char *urls[] = {s.url};
        lb_loadgen_params p = params_for(urls, 1);
        p.scenario = LB_SCENARIO_OFFLINE;
        p.pool.retries = 0;
        p.pool.http.timeout_ms = 500;
        p.request.stream = cases[c].stream;
        outcome o = run(&p, &ds);
        const lb_loadgen_summary *sm = &o.rep.summary;
        if (sm->failures[cases[c].want] != 4)
            fail_msg("fault %s (stream %d): %lld of 4 failed as %s", cases[c].fault,
                     cases[c].stream, (long long)sm->failures[cases[c].want],
                     lb_http_qerr_name(cases[c].want));
        assert_int_equal(sm->failed, 4);
        assert_false(sm->valid);
        assert_non_null(strstr(sm->reasons, lb_http_qerr_name(cases[c].want)));
        const lb_series *status = lb_result_find_series(o.r, "status");
        for (size_t i = 0; i < status->n; i++)
            assert_float_equal(status->values[i], cases[c].want, 0);
        outcome_free(&o);
        stop_server(&s);
    }
    /* Nothing listening: refused connections. */
    server gone = start_server(NULL);
    const char *urls[] = {gone.url};
    stop_server(&gone);
    lb_loadgen_params p = params_for(urls, 1);
    p.scenario = LB_SCENARIO_OFFLINE;
    p.pool.retries = 1;
    outcome o = run(&p, &ds);
    assert_int_equal(o.rep.summary.failures[LB_QERR_CONNECT], 4);
    assert_int_equal(o.rep.summary.retries, 4);
    outcome_free(&o);
    lb_dataset_free(&ds);
}

/* A whole answer without a usage field (the truncate fault drops it from the body):
 * completed, but its token count is unknown, not 0, and so are the token rates. */
static void test_loadgen_answers_without_usage_count_tokens_as_unknown(void **state) {
    (void)state;
    const char *args[] = {"--fault", "truncate", NULL};
    server s = start_server(args);
    const char *urls[] = {s.url};
    lb_loadgen_params p = params_for(urls, 1);
    p.scenario = LB_SCENARIO_OFFLINE;
    p.pool.retries = 0;
    p.request.stream = false;
    lb_dataset ds = small_dataset(4, 6);
    outcome o = run(&p, &ds);
    const lb_loadgen_summary *sm = &o.rep.summary;
    assert_int_equal(sm->completed, 4);
    assert_int_equal(sm->counted[LB_TOKENS_UNKNOWN], 4);
    assert_int_equal(sm->output_tokens, 0);
    assert_string_equal(sm->token_source, "unknown");
    assert_true(isnan(sm->output_tok_per_s));
    assert_true(isnan(sm->total_tok_per_s));
    assert_int_equal(sm->tpot_ms.n, 0);
    const lb_series *tokens = lb_result_find_series(o.r, "output_tokens");
    assert_int_equal(tokens->n, 4);
    for (size_t i = 0; i < tokens->n; i++)
        assert_true(isnan(tokens->values[i]));
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    lb_loadgen_summary_write(f, sm, "test");
    fclose(f);
    assert_non_null(
        strstr(text, "counted from unknown: usage 0, tokenizer 0, streamed chunks 0, unknown 4"));
    assert_non_null(strstr(text, "Output tokens per second : unknown (4 whole answers without"));
    free(text);
    outcome_free(&o);
    lb_dataset_free(&ds);
    stop_server(&s);
}

/* The same answers without usage, with a tokenizer: each answer's tokens are the
 * tokenizer's count of its text, and the token rates are known again. */
static void test_loadgen_answers_without_usage_are_counted_with_the_tokenizer(void **state) {
    (void)state;
    lb_tokenizer *tok = lb_test_gpt2_tokenizer();
    assert_non_null(tok);
    lb_err err = {{0}};
    const char *args[] = {"--fault", "truncate", NULL};
    server s = start_server(args);
    const char *urls[] = {s.url};
    lb_loadgen_params p = params_for(urls, 1);
    p.scenario = LB_SCENARIO_OFFLINE;
    p.mode = LB_MODE_ACCURACY; /* keeps the texts, to count them here */
    p.pool.retries = 0;
    p.request.stream = false;
    p.tokenizer = tok;
    lb_dataset ds = small_dataset(4, 6);
    outcome o = run(&p, &ds);
    const lb_loadgen_summary *sm = &o.rep.summary;
    assert_int_equal(sm->completed, 4);
    assert_int_equal(sm->counted[LB_TOKENS_TOKENIZER], 4);
    assert_string_equal(sm->token_source, "tokenizer");
    int64_t want = 0;
    for (size_t i = 0; i < o.rep.n_texts; i++) {
        int64_t n = 0;
        assert_non_null(o.rep.texts[i]);
        assert_int_equal(lb_tokenizer_count(tok, o.rep.texts[i], strlen(o.rep.texts[i]), &n, &err),
                         LB_OK);
        assert_true(n > 0);
        want += n;
    }
    assert_int_equal(sm->output_tokens, want);
    assert_true(isfinite(sm->output_tok_per_s) && sm->output_tok_per_s > 0);
    outcome_free(&o);
    /* Performance mode keeps no texts for the report, yet counts them all the same. */
    p.mode = LB_MODE_PERFORMANCE;
    o = run(&p, &ds);
    assert_int_equal(o.rep.summary.counted[LB_TOKENS_TOKENIZER], 4);
    assert_int_equal(o.rep.summary.output_tokens, want);
    outcome_free(&o);
    lb_dataset_free(&ds);
    stop_server(&s);
    lb_tokenizer_free(tok);
}

/* A child that sends SIGINT to this process 300 ms from now (the caller reaps it). */
static pid_t sigint_after_300_ms(void) {
    pid_t parent = getpid(), killer = fork();
    if (killer == 0) {
        struct timespec ts = {0, 300000000};
        nanosleep(&ts, NULL);
        kill(parent, SIGINT);
        _exit(0);
    }
    return killer;
}

static void test_loadgen_sigint_drains_then_marks_the_rest_interrupted(void **state) {
    (void)state;
    const char *args[] = {"--fault", "stall", NULL};
    server s = start_server(args);
    const char *urls[] = {s.url};
    lb_loadgen_params p = params_for(urls, 1);
    p.scenario = LB_SCENARIO_SERVER;
    p.qps = 20;
    p.min_queries = 1000;
    p.drain_s = 0.2;
    /* the default opens 64 connections (one second of arrivals, at least 64), not 1000 */
    lb_dataset ds = small_dataset(4, 6);
    lb_signals_reset();
    lb_signals_install();
    pid_t killer = sigint_after_300_ms();
    outcome o = run(&p, &ds);
    waitpid(killer, NULL, 0);
    assert_int_equal(o.st, LB_ERR_INTERRUPTED);
    assert_int_equal(o.r->status, LB_RUN_INTERRUPTED);
    const lb_loadgen_summary *sm = &o.rep.summary;
    assert_int_equal(sm->preconnected, 64);
    assert_true(sm->issued > 0 && sm->issued < 1000);
    assert_int_equal(sm->failures[LB_QERR_INTERRUPTED], sm->issued);
    assert_int_equal(lb_result_find_series(o.r, "status")->n, (size_t)sm->issued);
    lb_signals_reset();
    outcome_free(&o);
    lb_dataset_free(&ds);
    stop_server(&s);
}

/* Ctrl-C during --warmup stops it as it stops a run: the warm-up requests get the drain,
 * then are ended, and the run ends interrupted at once (it waited for each stalled
 * warm-up request's HTTP timeout, 600 s by default). */
static void test_loadgen_sigint_during_warmup_drains_then_stops(void **state) {
    (void)state;
    const char *args[] = {"--fault", "stall", NULL};
    server s = start_server(args);
    const char *urls[] = {s.url};
    lb_loadgen_params p = params_for(urls, 1);
    p.scenario = LB_SCENARIO_SERVER;
    p.qps = 20;
    p.min_queries = 10;
    p.warmup_queries = 4;
    p.drain_s = 0.2;
    lb_dataset ds = small_dataset(4, 6);
    lb_signals_reset();
    lb_signals_install();
    pid_t killer = sigint_after_300_ms();
    int64_t t0 = lb_clock_now_ns();
    outcome o = run(&p, &ds);
    double took_s = (double)(lb_clock_now_ns() - t0) / 1e9;
    waitpid(killer, NULL, 0);
    lb_signals_reset();
    print_message("the run ended %.2f s after its start\n", took_s);
    assert_int_equal(o.st, LB_ERR_INTERRUPTED);
    assert_true(took_s < 2.0); /* 0.3 s to the signal, 0.2 s of drain; the timeout is 5 s */
    assert_int_equal(o.rep.summary.issued, 0);
    outcome_free(&o);
    lb_dataset_free(&ds);
    stop_server(&s);
}

/* SingleStream and concurrency with --min-duration: the loop issues until a query goes out
 * at or after it, as LoadGen's does, so the duration the verdict checks (the last query's
 * issue time) reaches it. The loop stopped issuing just before, and every such run was
 * INVALID ("ran 0.3 s of the 0.3 s minimum"). */
static void test_loadgen_closed_loops_issue_past_min_duration(void **state) {
    (void)state;
    const char *args[] = {"--ttft-ms", "5", "--tpot-ms", "1", NULL};
    server s = start_server(args);
    const char *urls[] = {s.url};
    lb_dataset ds = small_dataset(4, 3);
    for (int k = 0; k < 2; k++) {
        lb_loadgen_params p = params_for(urls, 1);
        p.scenario = k == 0 ? LB_SCENARIO_SINGLE_STREAM : LB_SCENARIO_CONCURRENCY;
        p.concurrency = 3;
        p.min_queries = 1;
        p.min_duration_s = 0.3;
        outcome o = run(&p, &ds);
        const lb_loadgen_summary *sm = &o.rep.summary;
        assert_int_equal(o.st, LB_OK);
        assert_true(sm->final_issued_s >= 0.3);
        assert_true(sm->final_issued_s < 0.6);
        assert_true(sm->min_duration_ok);
        assert_null(strstr(sm->reasons, "minimum"));
        outcome_free(&o);
    }
    lb_dataset_free(&ds);
    stop_server(&s);
}

static char *slurp(const char *path) {
    FILE *f = fopen(path, "rb");
    if (f == NULL) return NULL;
    char *buf = calloc(1, 1 << 22);
    size_t n = fread(buf, 1, (1 << 22) - 1, f);
    buf[n] = '\0';
    fclose(f);
    return buf;
}

static void write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

/* Runs cmd, whose stderr goes to dir/err.txt, and asserts it was refused as a usage
 * error (exit 2) with a message containing needle. */
static void assert_refused(const char *cmd, const char *dir, const char *needle) {
    int rc = system(cmd);
    assert_true(WIFEXITED(rc) && WEXITSTATUS(rc) == 2);
    char path[512];
    snprintf(path, sizeof path, "%s/err.txt", dir);
    char *errtext = slurp(path);
    assert_non_null(errtext);
    assert_non_null(strstr(errtext, needle));
    free(errtext);
}

static void test_load_cli_writes_out_dir_and_never_records_the_key(void **state) {
    (void)state;
    server s = start_server(NULL);
    char dir[] = "/tmp/lb_load_cli_XXXXXX";
    assert_non_null(mkdtemp(dir));
    char cmd[1024];
    snprintf(cmd, sizeof cmd,
             "LB_TEST_LOAD_KEY=sekret-value-42 %s load --endpoint %s --synthetic 6 --concurrency 2 "
             "--api-key-env LB_TEST_LOAD_KEY --model-key llama3.1-8b --out %s/out --db %s/r.db "
             "-q > %s/stdout.txt 2> %s/stderr.txt",
             LB_TEST_BIN, s.url, dir, dir, dir, dir);
    /* Six queries complete, too few for early stopping: INVALID, exit 3. */
    int rc = system(cmd);
    assert_true(WIFEXITED(rc) && WEXITSTATUS(rc) == 3);
    char path[512];
    snprintf(path, sizeof path, "%s/out/mlperf_log_summary.txt", dir);
    char *summary = slurp(path);
    assert_non_null(summary);
    assert_non_null(strstr(summary, "MLPerf Results Summary"));
    assert_non_null(strstr(summary, "Scenario : Concurrency"));
    /* requests.jsonl: a line per query, with every token's time; summary.csv. */
    snprintf(path, sizeof path, "%s/out/requests.jsonl", dir);
    FILE *rf = fopen(path, "r");
    assert_non_null(rf);
    char line[65536];
    int lines = 0;
    while (fgets(line, sizeof line, rf) != NULL) {
        json_t *q = json_loads(line, 0, NULL);
        assert_non_null(q);
        assert_string_equal(json_string_value(json_object_get(q, "error")), "none");
        json_t *times = json_object_get(q, "token_times_s");
        assert_int_equal(json_array_size(times),
                         (size_t)json_number_value(json_object_get(q, "output_tokens")));
        assert_float_equal(json_number_value(json_array_get(times, 0)),
                           json_number_value(json_object_get(q, "first_token_s")), 0);
        json_decref(q);
        lines++;
    }
    fclose(rf);
    assert_int_equal(lines, 6);
    snprintf(path, sizeof path, "%s/out/summary.csv", dir);
    char *csv = slurp(path);
    assert_non_null(csv);
    assert_true(strncmp(csv, "metric,value,unit\nsamples_per_s,", 32) == 0);
    assert_non_null(strstr(csv, "\ncompleted,6,queries\n"));
    free(csv);
    snprintf(path, sizeof path, "%s/out/llmbench_result.json", dir);
    char *detail = slurp(path);
    assert_non_null(detail);
    assert_non_null(strstr(detail, "\"api_key_env\": \"LB_TEST_LOAD_KEY\""));
    assert_null(strstr(detail, "sekret-value-42"));
    snprintf(path, sizeof path, "%s/stdout.txt", dir);
    char *out = slurp(path);
    assert_null(strstr(out, "sekret-value-42"));
    assert_non_null(strstr(out, "Result is : "));
    free(summary);
    free(detail);
    free(out);
    /* The stored run holds the name only. */
    snprintf(cmd, sizeof cmd, "grep -c sekret-value-42 %s/r.db > /dev/null", dir);
    assert_int_not_equal(system(cmd), 0);
    /* A malformed dataset is refused before anything is sent: exit 2, file and line named. */
    snprintf(path, sizeof path, "%s/bad.jsonl", dir);
    write_text(path, "{\"prompt\": \"ok\"}\n{\"prompt\": 5}\n");
    snprintf(cmd, sizeof cmd, "%s load --endpoint %s --dataset %s --db %s/r.db 2> %s/err.txt",
             LB_TEST_BIN, s.url, path, dir, dir);
    assert_refused(cmd, dir, "bad.jsonl: line 2: field \"prompt\"");
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    assert_int_equal(system(cmd), 0);
    stop_server(&s);
}

/* A user and password in an endpoint reach the server, never an output: not stdout, the
 * --out files, the database or its export. Other protocols than http(s) are refused. */
static void test_load_cli_masks_url_userinfo_everywhere_and_refuses_other_protocols(void **state) {
    (void)state;
    server s = start_server(NULL);
    char dir[] = "/tmp/lb_load_url_XXXXXX";
    assert_non_null(mkdtemp(dir));
    char endpoint[128], cmd[2048], path[512];
    snprintf(endpoint, sizeof endpoint, "http://bob:hunter2pw@%s", s.url + strlen("http://"));
    snprintf(cmd, sizeof cmd,
             "%s load --endpoint %s --synthetic 4 --concurrency 2 --out %s/out --db %s/r.db "
             "-q > %s/stdout.txt 2> %s/stderr.txt; r=$?; test $r -eq 0 -o $r -eq 3 && "
             "%s results export --db %s/r.db > %s/export.json && cat %s/r.db* > %s/db.bytes",
             LB_TEST_BIN, endpoint, dir, dir, dir, dir, LB_TEST_BIN, dir, dir, dir, dir);
    assert_int_equal(system(cmd), 0); /* a measured run: VALID (0) or INVALID (3) */
    const char *files[] = {"stdout.txt",
                           "stderr.txt",
                           "out/mlperf_log_summary.txt",
                           "out/mlperf_log_detail.txt",
                           "out/llmbench_result.json",
                           "out/requests.jsonl",
                           "export.json",
                           "db.bytes"};
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, files[i]);
        size_t n = 0;
        char *text = lb_test_read_file(path, &n);
        assert_non_null(text);
        if (memmem(text, n, "hunter2pw", 9) != NULL) fail_msg("%s holds the password", files[i]);
        if (memmem(text, n, "bob:", 4) != NULL) fail_msg("%s holds the user", files[i]);
        free(text);
    }
    snprintf(path, sizeof path, "%s/out/llmbench_result.json", dir);
    char *detail = slurp(path);
    assert_non_null(strstr(detail, "\"http://***@127.0.0.1:"));
    free(detail);
    snprintf(cmd, sizeof cmd,
             "%s load --endpoint 'file:///etc/passwd#' --synthetic 1 --db %s/r.db 2> %s/err.txt",
             LB_TEST_BIN, dir, dir);
    assert_refused(cmd, dir, "'file:///etc/passwd#' is not an http:// or https:// URL");
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    assert_int_equal(system(cmd), 0);
    stop_server(&s);
}

/* An endpoint that is not a usable URL is refused before the run, exit 2, with one line
 * that names it; nothing listens on the ports, so a run would fail instead. A valid IPv6
 * literal is taken. */
static void test_load_cli_refuses_malformed_endpoints_naming_them(void **state) {
    (void)state;
    char dir[] = "/tmp/lb_load_badurl_XXXXXX";
    assert_non_null(mkdtemp(dir));
    char long_url[700];
    int n = snprintf(long_url, sizeof long_url, "http://127.0.0.1:9/");
    memset(long_url + n, 'p', 600);
    long_url[n + 600] = '\0';
    const struct {
        const char *url, *why;
    } bad[] = {
        {"http://", "is not a valid URL"},
        {"http://127.0.0.1:99999", "is not a valid URL"},
        {"http://127.0.0.1:port", "is not a valid URL"},
        {"http://[::1", "is not a valid URL"},
        {"http://127.0.0.1:0", "has port 0"},
        {"http://127.0.0.1:9?model=x", "has a query or fragment"},
        {"http://127.0.0.1:9/v1#frag", "has a query or fragment"},
        {"localhost:8000", "is not an http:// or https:// URL"},
        {long_url, "is too long"},
    };
    char cmd[2048], path[512];
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        snprintf(cmd, sizeof cmd,
                 "%s load --endpoint http://127.0.0.1:9 --endpoint '%s' --synthetic 1 "
                 "--retries 0 --preconnect 0 --timeout 2 --db %s/r.db 2> %s/err.txt",
                 LB_TEST_BIN, bad[i].url, dir, dir);
        assert_refused(cmd, dir, bad[i].why);
        snprintf(path, sizeof path, "%s/err.txt", dir);
        char *errtext = slurp(path), named[64];
        snprintf(named, sizeof named, "--endpoint '%.40s", bad[i].url);
        assert_non_null(strstr(errtext, named));
        char *nl = strchr(errtext, '\n');
        assert_true(nl != NULL && nl[1] == '\0'); /* one line */
        free(errtext);
    }
    /* an IPv6 literal passes the check: the run fails on the connection (exit 1) */
    snprintf(cmd, sizeof cmd,
             "%s load --endpoint 'http://[::1]:9' --synthetic 1 --retries 0 --preconnect 0 "
             "--timeout 2 --db %s/r.db -q 2> %s/err.txt",
             LB_TEST_BIN, dir, dir);
    int rc = system(cmd);
    assert_true(WIFEXITED(rc) && WEXITSTATUS(rc) == 1);
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    assert_int_equal(system(cmd), 0);
}

/* A bad --out is refused before the run: nothing is sent (the endpoint is a closed port,
 * so a run would fail, and slowly). */
static void test_load_cli_checks_out_before_the_run(void **state) {
    (void)state;
    char dir[] = "/tmp/lb_load_out_XXXXXX";
    assert_non_null(mkdtemp(dir));
    char cmd[1024], file[300];
    snprintf(file, sizeof file, "%s/a-file", dir);
    write_text(file, "x");
    snprintf(cmd, sizeof cmd,
             "%s load --endpoint http://127.0.0.1:1 --synthetic 1 --timeout 30 --out %s "
             "--db %s/r.db 2> %s/err.txt",
             LB_TEST_BIN, file, dir, dir);
    int64_t t0 = lb_clock_now_ns();
    assert_refused(cmd, dir, "--out");
    assert_true(lb_clock_now_ns() - t0 < 2000000000LL);
    snprintf(cmd, sizeof cmd,
             "%s load --endpoint http://127.0.0.1:1 --synthetic 1 --out %s/no/such/dir "
             "--db %s/r.db 2> %s/err.txt",
             LB_TEST_BIN, dir, dir, dir);
    assert_refused(cmd, dir, "cannot create the folder");
    snprintf(file, sizeof file, "%s/r.db", dir);
    assert_int_equal(access(file, F_OK), -1); /* no run was stored */
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    assert_int_equal(system(cmd), 0);
}

/* Connections opened before the run are capped by what the open-file limit leaves room
 * for (so they open, rather than all failing), and Ctrl-C during the opening ends the run
 * as interrupted at once. */
static void test_load_cli_preconnect_is_capped_and_interruptible(void **state) {
    (void)state;
    server s = start_server(NULL);
    char dir[] = "/tmp/lb_load_pre_XXXXXX";
    assert_non_null(mkdtemp(dir));
    char cmd[1024], path[512];
    snprintf(cmd, sizeof cmd,
             "ulimit -n 4096 && %s load --endpoint %s --synthetic 4 --concurrency 100000 "
             "--db %s/r.db -v > /dev/null 2> %s/err.txt; r=$?; test $r -eq 0 -o $r -eq 3",
             LB_TEST_BIN, s.url, dir, dir);
    assert_int_equal(system(cmd), 0); /* a measured run: VALID (0) or INVALID (3) */
    snprintf(path, sizeof path, "%s/err.txt", dir);
    char *errtext = slurp(path);
    assert_non_null(strstr(errtext, "leaves room for: opening "));
    long long capped = 0, opened = 0;
    assert_int_equal(
        sscanf(strstr(errtext, "room for: opening "), "room for: opening %lld", &capped), 1);
    assert_int_equal(sscanf(strstr(errtext, "info: opened "), "info: opened %lld", &opened), 1);
    assert_true(capped > 0 && capped < 4096);
    assert_int_equal(opened, capped);
    free(errtext);
    stop_server(&s);

    /* A server that never answers: every connection waits, so SIGINT comes mid-opening. */
    int lfd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(bind(lfd, (struct sockaddr *)&a, sizeof a), 0);
    assert_int_equal(listen(lfd, 4096), 0);
    socklen_t len = sizeof a;
    getsockname(lfd, (struct sockaddr *)&a, &len);
    snprintf(cmd, sizeof cmd,
             "ulimit -n 8192 && exec %s load --endpoint http://127.0.0.1:%d --synthetic 4 "
             "--concurrency 4000 --db %s/r.db -q",
             LB_TEST_BIN, ntohs(a.sin_port), dir);
    pid_t pid = fork();
    if (pid == 0) {
        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        _exit(127);
    }
    usleep(1000 * 1000);
    int64_t t0 = lb_clock_now_ns();
    kill(pid, SIGINT);
    int status = 0;
    waitpid(pid, &status, 0);
    double took_s = (double)(lb_clock_now_ns() - t0) / 1e9;
    close(lfd);
    print_message("exited %.2f s after SIGINT\n", took_s);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 130);
    assert_true(took_s < 2.0);
    snprintf(cmd, sizeof cmd, "%s results list --db %s/r.db --status interrupted | grep -q load",
             LB_TEST_BIN, dir);
    assert_int_equal(system(cmd), 0);
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    assert_int_equal(system(cmd), 0);
}

/* --tokenizer: the synthetic server reports usage, so usage stays the count's source; the
 * tokenizer is recorded; a malformed ranks file is refused before anything is sent. */
static void test_load_cli_with_tokenizer_prefers_usage_and_refuses_bad_ranks(void **state) {
    (void)state;
    server s = start_server(NULL);
    char dir[] = "/tmp/lb_load_tok_XXXXXX";
    assert_non_null(mkdtemp(dir));
    char cmd[1024], path[512];
    snprintf(cmd, sizeof cmd,
             "%s load --endpoint %s --synthetic 6 --no-stream --tokenizer %s --out %s/out "
             "--db %s/r.db -q > /dev/null 2> %s/stderr.txt",
             LB_TEST_BIN, s.url, LB_TEST_FIXTURES "/tokenizer/gpt2.tiktoken", dir, dir, dir);
    assert_int_equal(system(cmd), 0); /* Offline: VALID without early stopping */
    snprintf(path, sizeof path, "%s/out/mlperf_log_summary.txt", dir);
    char *summary = slurp(path);
    assert_non_null(strstr(summary, "(counted from usage: usage 6, tokenizer 0,"));
    snprintf(path, sizeof path, "%s/out/llmbench_result.json", dir);
    char *detail = slurp(path);
    assert_non_null(
        strstr(detail, "\"tokenizer\": \"" LB_TEST_FIXTURES "/tokenizer/gpt2.tiktoken\""));
    free(summary);
    free(detail);
    snprintf(path, sizeof path, "%s/bad.tiktoken", dir);
    write_text(path, "IQ== 0\nIg==\n");
    snprintf(cmd, sizeof cmd,
             "%s load --endpoint %s --synthetic 2 --tokenizer %s --db %s/r.db "
             "2> %s/err.txt",
             LB_TEST_BIN, s.url, path, dir, dir);
    assert_refused(cmd, dir, "bad.tiktoken:2: no space before the rank");
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    assert_int_equal(system(cmd), 0);
    stop_server(&s);
}

/* ---- every summary figure recomputed from `results export` ---- */

typedef struct {
    double *v;
    size_t n;
} column;

/* The export's series `name` (null values as NaN); the caller frees v. */
static column export_column(json_t *run, const char *name) {
    json_t *vals = json_object_get(json_object_get(json_object_get(run, "series"), name), "values");
    if (vals == NULL) fail_msg("series %s is not in the export", name);
    column c = {.n = json_array_size(vals)};
    c.v = calloc(c.n + 1, sizeof *c.v);
    for (size_t i = 0; i < c.n; i++) {
        json_t *x = json_array_get(vals, i);
        c.v[i] = json_is_number(x) ? json_number_value(x) : NAN;
    }
    return c;
}

typedef struct {
    json_t *run;
    char checked[160][LB_NAME_BYTES];
    size_t n_checked;
} recompute;

static double export_metric(recompute *rc, const char *name) {
    json_t *ms = json_object_get(rc->run, "metrics");
    for (size_t i = 0; i < json_array_size(ms); i++) {
        json_t *m = json_array_get(ms, i);
        if (strcmp(json_string_value(json_object_get(m, "name")), name) == 0) {
            json_t *v = json_object_get(m, "value");
            return json_is_number(v) ? json_number_value(v) : NAN;
        }
    }
    fail_msg("metric %s is not in the export", name);
    return NAN;
}

/* The stored metric `name` equals want (both NaN counts as equal), within tol relative to
 * max(1, |want|). */
static void check_metric(recompute *rc, const char *name, double want, double tol) {
    double got = export_metric(rc, name);
    bool same =
        (isnan(want) && isnan(got)) || fabs(want - got) <= tol * (fabs(want) > 1 ? fabs(want) : 1);
    if (!same) fail_msg("metric %s: stored %.17g, recomputed %.17g", name, got, want);
    snprintf(rc->checked[rc->n_checked++], LB_NAME_BYTES, "%s", name);
}

static int cmp_dbl(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Linear interpolation between the closest ranks, rank = q/100 * (n - 1). */
/* LoadGen's percentile: the sorted sample at index floor(n q), no interpolation. */
static double percentile_of(const double *sorted, size_t n, double q) {
    size_t at = (size_t)((double)n * (q / 100.0));
    return sorted[at < n ? at : n - 1];
}

/* BASE_{mean,std,min,max,p50..p99_9,p75}SUFFIX against x[0..n) without NaNs (sorted
 * here); the runs ask for p75 with --percentiles. */
static void check_dist_as(recompute *rc, const char *base, const char *suffix, double *x, size_t n,
                          double tol) {
    static const double q[] = {50, 90, 95, 97, 99, 99.9, 75};
    static const char *const tag[] = {"p50", "p90", "p95", "p97", "p99", "p99_9", "p75"};
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (!isnan(x[i])) x[k++] = x[i];
    qsort(x, k, sizeof *x, cmp_dbl);
    double sum = 0, ss = 0;
    for (size_t i = 0; i < k; i++)
        sum += x[i];
    for (size_t i = 0; i < k; i++)
        ss += (x[i] - sum / (double)k) * (x[i] - sum / (double)k);
    char name[LB_NAME_BYTES];
    snprintf(name, sizeof name, "%s_mean%s", base, suffix);
    check_metric(rc, name, k ? sum / (double)k : NAN, tol);
    snprintf(name, sizeof name, "%s_std%s", base, suffix);
    check_metric(rc, name, k > 1 ? sqrt(ss / (double)(k - 1)) : k ? 0 : NAN, 1e-6);
    snprintf(name, sizeof name, "%s_min%s", base, suffix);
    check_metric(rc, name, k ? x[0] : NAN, tol);
    snprintf(name, sizeof name, "%s_max%s", base, suffix);
    check_metric(rc, name, k ? x[k - 1] : NAN, tol);
    for (int i = 0; i < 7; i++) {
        snprintf(name, sizeof name, "%s_%s%s", base, tag[i], suffix);
        check_metric(rc, name, k ? percentile_of(x, k, q[i]) : NAN, tol);
    }
}

static void check_dist(recompute *rc, const char *base, double *x, size_t n, double tol) {
    check_dist_as(rc, base, "_ms", x, n, tol);
}

static double config_number(json_t *cfg, const char *a, const char *b) {
    json_t *x = json_object_get(cfg, a);
    if (b != NULL) x = json_object_get(x, b);
    return json_number_value(x);
}

/* Recomputes every metric of one exported load run from its series and config, and
 * fails on a stored metric that was not recomputed. */
static void recompute_every_figure(json_t *run) {
    recompute rc = {.run = run};
    json_t *cfg = json_object_get(run, "config");
    const char *scen = json_string_value(json_object_get(cfg, "scenario"));
    bool is_server = strcmp(scen, "Server") == 0, offline = strcmp(scen, "Offline") == 0;
    bool open_loop = is_server || offline;
    bool stream = json_is_true(json_object_get(cfg, "stream"));
    double slo_ttft = config_number(cfg, "constraints", "slo_ttft_ms");
    double slo_tpot = config_number(cfg, "constraints", "slo_tpot_ms");
    column st = export_column(run, "status"), att = export_column(run, "attempts");
    column conn = export_column(run, "connections_opened");
    column sched = export_column(run, "scheduled_s"), hand = export_column(run, "handover_s");
    column sent = export_column(run, "sent_s"), first = export_column(run, "first_token_s");
    column done = export_column(run, "done_s"), ttft = export_column(run, "ttft_ms");
    column tpot = export_column(run, "tpot_ms"), lat = export_column(run, "latency_ms");
    column queue = export_column(run, "queue_ms"), itlmax = export_column(run, "itl_max_ms");
    column out = export_column(run, "output_tokens"), in = export_column(run, "input_tokens");
    column rep = export_column(run, "replica"), ngaps = export_column(run, "token_gaps");
    column gaps = export_column(run, "token_gap_ms");
    column rse = export_column(run, "resent_error"), rsr = export_column(run, "resent_replica");
    size_t n = st.n;
    assert_true(n > 0);
    int64_t completed = 0, failed = 0, retries = 0, conns = 0, out_tokens = 0, in_tokens = 0;
    int64_t unknown = 0, good = 0, by_status[LB_QERR_COUNT] = {0}, by_resent[LB_QERR_COUNT] = {0};
    int64_t rep_done[LB_POOL_MAX_REPLICAS] = {0}, rep_failed[LB_POOL_MAX_REPLICAS] = {0};
    bool in_known = true;
    double last_done = 0, last_sched = 0, last_sent = 0;
    double final_done = 0; /* the last-scheduled query's done time: LoadGen's final query */
    size_t g = 0;
    double *a = calloc(n + gaps.n + 1, sizeof *a), *b = calloc(n + 1, sizeof *b);
    for (size_t i = 0; i < n; i++) {
        bool ok = st.v[i] == 0;
        retries += (int64_t)att.v[i] - 1;
        conns += (int64_t)conn.v[i];
        if (sched.v[i] >= last_sched) {
            last_sched = sched.v[i];
            final_done = isnan(done.v[i]) ? 0 : done.v[i];
        }
        if (sent.v[i] > last_sent) last_sent = sent.v[i];
        if (done.v[i] > last_done) last_done = done.v[i];
        /* Each query's figures from its timestamps. */
        if (ok) {
            assert_float_equal(lat.v[i], (done.v[i] - sched.v[i]) * 1e3, 1e-6);
            if (stream) assert_float_equal(ttft.v[i], (first.v[i] - sched.v[i]) * 1e3, 1e-6);
            if (stream && out.v[i] > 1)
                assert_float_equal(tpot.v[i], (done.v[i] - first.v[i]) * 1e3 / (out.v[i] - 1),
                                   1e-6);
            else
                assert_true(isnan(tpot.v[i]));
        }
        if (!stream) assert_true(isnan(ttft.v[i]) && isnan(first.v[i]));
        assert_float_equal(queue.v[i], (sent.v[i] - sched.v[i]) * 1e3, 1e-6);
        /* Its token times: the first, then one a gap; none after the answer ended. */
        double t = first.v[i], mx = NAN;
        for (size_t k = 0; k < (size_t)ngaps.v[i]; k++, g++) {
            t += gaps.v[g] / 1e3;
            if (!(gaps.v[g] <= mx)) mx = gaps.v[g];
        }
        if (ngaps.v[i] > 0) assert_true(t <= done.v[i] + 1e-6);
        if (isnan(mx))
            assert_true(isnan(itlmax.v[i])); /* no gap: no ITL, not 0 */
        else
            assert_float_equal(itlmax.v[i], mx, 0);
        if (!ok) {
            failed++;
            by_status[(int)st.v[i]]++;
            if (rep.v[i] >= 0) rep_failed[(int)rep.v[i]]++;
            continue;
        }
        completed++;
        if (rep.v[i] >= 0) rep_done[(int)rep.v[i]]++;
        if (isnan(out.v[i]))
            unknown++;
        else
            out_tokens += (int64_t)out.v[i];
        if (isnan(in.v[i]))
            in_known = false;
        else
            in_tokens += (int64_t)in.v[i];
        good += (slo_ttft <= 0 || ttft.v[i] <= slo_ttft) &&
                (slo_tpot <= 0 || isnan(tpot.v[i]) || tpot.v[i] <= slo_tpot);
    }
    assert_int_equal(g, gaps.n);
    for (size_t i = 0; i < rse.n; i++) {
        by_resent[(int)rse.v[i]]++;
        rep_failed[(int)rsr.v[i]]++;
    }
    double dur = last_done;
    check_metric(&rc, "issued", (double)n, 0);
    check_metric(&rc, "completed", (double)completed, 0);
    check_metric(&rc, "failed", (double)failed, 0);
    check_metric(&rc, "retries", (double)retries, 0);
    check_metric(&rc, "connections_opened", (double)conns, 0);
    for (int e = 1; e < LB_QERR_COUNT; e++) {
        char name[LB_NAME_BYTES];
        if (by_status[e] > 0) {
            snprintf(name, sizeof name, "failed_%s", lb_http_qerr_name((lb_qerr)e));
            check_metric(&rc, name, (double)by_status[e], 0);
        }
        if (by_resent[e] > 0) {
            snprintf(name, sizeof name, "resent_%s", lb_http_qerr_name((lb_qerr)e));
            check_metric(&rc, name, (double)by_resent[e], 0);
        }
    }
    for (size_t i = 0; i < json_array_size(json_object_get(cfg, "endpoints")); i++) {
        char name[LB_NAME_BYTES];
        snprintf(name, sizeof name, "replica%zu_completed", i);
        check_metric(&rc, name, (double)rep_done[i], 0);
        snprintf(name, sizeof name, "replica%zu_failed", i);
        check_metric(&rc, name, (double)rep_failed[i], 0);
    }
    check_metric(&rc, "output_tokens", (double)out_tokens, 0);
    check_metric(&rc, "output_tokens_unknown", (double)unknown, 0);
    check_metric(&rc, "duration_s", dur, 1e-12);
    check_metric(&rc, "samples_per_s", (double)completed / dur, 1e-12);
    check_metric(&rc, "output_tok_per_s", unknown ? NAN : (double)out_tokens / dur, 1e-12);
    check_metric(&rc, "total_tok_per_s",
                 unknown || !in_known ? NAN : (double)(out_tokens + in_tokens) / dur, 1e-12);
    bool judged = stream || (slo_ttft <= 0 && slo_tpot <= 0);
    check_metric(&rc, "goodput_per_s", judged ? (double)good / dur : NAN, 1e-12);
    check_metric(&rc, "mlperf_samples_per_s",
                 is_server ? (double)(completed - 1) / final_done
                 : offline ? (double)completed / dur
                           : (double)(completed - 1) / last_sent,
                 1e-12);
    check_metric(&rc, "mlperf_tok_per_s",
                 unknown ? NAN : (double)out_tokens / (is_server ? final_done : dur), 1e-12);
    if (is_server) {
        check_metric(&rc, "target_qps", config_number(cfg, "qps", NULL), 0);
        check_metric(&rc, "scheduled_qps", (double)(n - 1) / last_sched, 1e-12);
    }
    /* Distributions: over completed queries; the lags over scheduled sends. */
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        a[k++] = st.v[i] == 0 ? ttft.v[i] : NAN;
    check_dist(&rc, "ttft", a, k, 1e-12);
    k = 0;
    for (size_t i = 0; i < n; i++)
        a[k++] = st.v[i] == 0 ? tpot.v[i] : NAN;
    check_dist(&rc, "tpot", a, k, 1e-12);
    memcpy(a, gaps.v, gaps.n * sizeof *a);
    check_dist(&rc, "itl", a, gaps.n, 1e-7); /* gaps are kept as float */
    k = 0;
    for (size_t i = 0; i < n; i++)
        a[k++] = st.v[i] == 0 ? lat.v[i] : NAN;
    check_dist(&rc, "latency", a, k, 1e-12);
    k = 0;
    for (size_t i = 0; i < n; i++)
        a[k++] = st.v[i] == 0 ? queue.v[i] : NAN;
    check_dist(&rc, "queue", a, k, 1e-12);
    k = 0;
    for (size_t i = 0; i < n; i++)
        if (open_loop && sent.v[i] > 0) a[k++] = queue.v[i];
    check_dist(&rc, "send_lag", a, k, 1e-9);
    double lag99 = k ? percentile_of(a, k, 99) : 0, send99 = lag99;
    k = 0;
    for (size_t i = 0; i < n; i++)
        if (open_loop && hand.v[i] > 0) a[k++] = (hand.v[i] - sched.v[i]) * 1e3;
    check_dist(&rc, "handover_lag", a, k, 1e-6);
    lag99 = k ? percentile_of(a, k, 99) : 0;
    /* Time to second token: each query's first gap; per-user rate; prompt and answer
     * lengths. */
    k = 0;
    for (size_t i = 0, g0 = 0; i < n; g0 += (size_t)ngaps.v[i], i++)
        if (ngaps.v[i] > 0) a[k++] = gaps.v[g0];
    check_dist(&rc, "ttst", a, k, 1e-7);
    k = 0;
    for (size_t i = 0; i < n; i++)
        if (stream && st.v[i] == 0 && out.v[i] > 1 && done.v[i] > first.v[i])
            a[k++] = (out.v[i] - 1) / (done.v[i] - first.v[i]);
    check_dist_as(&rc, "user_output_tok_per_s", "", a, k, 1e-6);
    k = 0;
    for (size_t i = 0; i < n; i++)
        if (st.v[i] == 0 && !isnan(in.v[i])) a[k++] = in.v[i];
    check_dist_as(&rc, "input_len", "", a, k, 1e-12);
    k = 0;
    for (size_t i = 0; i < n; i++)
        if (st.v[i] == 0 && !isnan(out.v[i])) a[k++] = out.v[i];
    check_dist_as(&rc, "output_len", "", a, k, 1e-12);
    /* The verdict and the warnings from the same series. */
    double c = config_number(cfg, "constraints", "confidence") / 100.0 * 100.0;
    double pct = config_number(cfg, "constraints", "percentile") / 100.0;
    double ttft_bound = config_number(cfg, "constraints", "ttft_limit_ms");
    double tpot_bound = config_number(cfg, "constraints", "tpot_limit_ms");
    for (size_t i = 0; i < n; i++) {
        bool ok = st.v[i] == 0;
        a[i] = ok ? ttft.v[i] : INFINITY;
        b[i] = ok ? (isnan(tpot.v[i]) ? 0 : tpot.v[i]) : INFINITY;
    }
    lb_early_stop es_a = {.ok = true}, es_b = {.ok = true}, es_l = {.ok = true};
    if (is_server && stream) {
        if (ttft_bound > 0) es_a = lb_early_stop_check(a, n, ttft_bound, pct, c);
        if (tpot_bound > 0) es_b = lb_early_stop_check(b, n, tpot_bound, pct, c);
    } else if (!open_loop) {
        if (stream) {
            qsort(a, n, sizeof *a, cmp_dbl);
            es_a = lb_early_stop_estimate(a, n, pct, c);
            qsort(b, n, sizeof *b, cmp_dbl);
            es_b = lb_early_stop_estimate(b, n, pct, c);
        }
        for (size_t i = 0; i < n; i++)
            a[i] = st.v[i] == 0 ? lat.v[i] : INFINITY;
        qsort(a, n, sizeof *a, cmp_dbl);
        es_l = lb_early_stop_estimate(a, n, pct, c);
    }
    check_metric(&rc, "early_stop_needed_queries",
                 is_server ? (double)(es_a.needed > es_b.needed ? es_a.needed : es_b.needed)
                           : (double)es_l.needed,
                 0);
    double want_q = config_number(cfg, "min_queries", NULL);
    if (want_q <= 0) want_q = config_number(cfg, "dataset", "samples");
    double reached = is_server ? last_sched : offline ? dur : last_sent;
    bool bounds_ok = true;
    if (is_server && (ttft_bound > 0 || tpot_bound > 0)) {
        /* every issued query, a failed one over every bound, a TPOT not defined as 0 */
        double *x = calloc(n + 1, sizeof *x);
        for (size_t i = 0; i < n; i++)
            x[i] = st.v[i] == 0 ? ttft.v[i] : INFINITY;
        qsort(x, n, sizeof *x, cmp_dbl);
        bounds_ok = stream && (ttft_bound <= 0 || percentile_of(x, n, pct * 100) <= ttft_bound);
        for (size_t i = 0; i < n; i++)
            x[i] = st.v[i] != 0 ? INFINITY : isnan(tpot.v[i]) ? 0 : tpot.v[i];
        qsort(x, n, sizeof *x, cmp_dbl);
        bounds_ok = bounds_ok && (tpot_bound <= 0 || percentile_of(x, n, pct * 100) <= tpot_bound);
        free(x);
    }
    bool valid = failed == 0 && (double)n >= want_q &&
                 reached >= config_number(cfg, "min_duration_s", NULL) && bounds_ok &&
                 (is_server ? es_a.ok && es_b.ok : es_l.ok);
    check_metric(&rc, "valid", valid, 0);
    int warnings =
        (lag99 > LB_LAG_WARN_MS || send99 > LB_LAG_WARN_MS) + (rse.n > 0) + !stream + (unknown > 0);
    check_metric(&rc, "warnings", warnings, 0);
    /* Every stored metric was recomputed, but one: the connections opened before t0 are
     * a count of events that have no query of their own. */
    json_t *ms = json_object_get(run, "metrics");
    for (size_t i = 0; i < json_array_size(ms); i++) {
        const char *name = json_string_value(json_object_get(json_array_get(ms, i), "name"));
        bool seen = strcmp(name, "connections_preopened") == 0;
        for (size_t j = 0; j < rc.n_checked && !seen; j++)
            seen = strcmp(rc.checked[j], name) == 0;
        if (!seen) fail_msg("metric %s (%s) was not recomputed from the export", name, scen);
    }
    column cols[] = {st,  att,   conn,   sched, hand, sent, first, done, ttft, tpot,
                     lat, queue, itlmax, out,   in,   rep,  ngaps, gaps, rse,  rsr};
    for (size_t i = 0; i < sizeof cols / sizeof cols[0]; i++)
        free(cols[i].v);
    free(a);
    free(b);
}

/* Runs `llmbench load ARGS --db DB --json -q`, returns the run id it printed. */
static int64_t load_run_id(const char *db, const char *url, const char *args, int want_rc) {
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "%s load --endpoint %s %s --percentiles 75 --db %s --json -q",
             LB_TEST_BIN, url, args, db);
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    char *text = calloc(1, 1 << 24);
    size_t len = fread(text, 1, (1 << 24) - 1, p);
    text[len] = '\0';
    int rc = pclose(p);
    if (!WIFEXITED(rc) || WEXITSTATUS(rc) != want_rc)
        fail_msg("'%s' exited %d, expected %d", args, WEXITSTATUS(rc), want_rc);
    json_error_t je;
    json_t *j = json_loads(text, 0, &je);
    if (j == NULL) fail_msg("load --json is not one JSON document: %s", je.text);
    int64_t id = json_integer_value(json_object_get(j, "id"));
    assert_true(id > 0);
    json_decref(j);
    free(text);
    return id;
}

static json_t *export_run(const char *db, int64_t id) {
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "%s results export %lld --db %s", LB_TEST_BIN, (long long)id, db);
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    json_error_t je;
    json_t *all = json_loadf(p, 0, &je);
    assert_int_equal(pclose(p), 0);
    if (all == NULL) fail_msg("export: %s", je.text);
    json_t *run = json_incref(json_array_get(all, 0));
    json_decref(all);
    return run;
}

/* Server, Offline, SingleStream, concurrency and whole-answer runs, one with failed and
 * resent attempts: every metric `results export` holds is recomputed from its series. */
static void test_load_every_summary_figure_is_recomputed_from_the_export(void **state) {
    (void)state;
    const char *args[] = {"--ttft-ms", "3", "--tpot-ms", "1", NULL};
    server s = start_server(args);
    const char *fargs[] = {"--fault", "drop", "--fault-rate", "0.3", NULL};
    server f = start_server(fargs);
    char dir[] = "/tmp/lb_load_export_XXXXXX";
    assert_non_null(mkdtemp(dir));
    char db[256];
    snprintf(db, sizeof db, "%s/r.db", dir);
    static const struct {
        bool faulty;
        const char *args;
        int rc;
    } runs[] = {
        {false,
         "--synthetic 20 --max-tokens 6 --qps 400 --min-queries 600 --ttft-limit-ms 2000 "
         "--tpot-limit-ms 200",
         0},
        {false, "--synthetic 40 --max-tokens 5 --slo ttft_ms=20,tpot_ms=2", 0},
        {false, "--synthetic 10 --max-tokens 1 --scenario singlestream --min-queries 70", 0},
        {false, "--synthetic 10 --max-tokens 4 --concurrency 4 --min-queries 80", 0},
        {false, "--synthetic 30 --max-tokens 4 --no-stream --slo ttft_ms=20", 0},
        {true, "--synthetic 40 --max-tokens 6 --retries 1 --max-failed 40", 3},
    };
    for (size_t i = 0; i < sizeof runs / sizeof runs[0]; i++) {
        int64_t id = load_run_id(db, runs[i].faulty ? f.url : s.url, runs[i].args, runs[i].rc);
        json_t *run = export_run(db, id);
        recompute_every_figure(run);
        json_decref(run);
    }
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    assert_int_equal(system(cmd), 0);
    stop_server(&f);
    stop_server(&s);
}

static char *read_file_in(const char *dir, const char *name) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    char *text = slurp(path);
    if (text == NULL) fail_msg("%s was not written", path);
    return text;
}

/* `results list --json` of db: its "runs" array (new reference). */
static json_t *list_runs(const char *dir) {
    assert_int_equal(
        lb_test_shell("%s results list --db %s/r.db --json > %s/list.json", LB_TEST_BIN, dir, dir),
        0);
    char path[512];
    snprintf(path, sizeof path, "%s/list.json", dir);
    json_t *doc = json_load_file(path, 0, NULL);
    assert_non_null(doc);
    json_t *runs = json_incref(json_object_get(doc, "runs"));
    json_decref(doc);
    return runs;
}

/* The README's Server example, shortened: the schedule reaches --min-duration, so the run
 * is VALID (the last arrival used to be planned before it: "ran 4.9 s of the 5.0 s
 * minimum"), exit 0, and `results list` shows it ok and VALID. */
static void test_load_cli_server_run_at_min_duration_5_is_valid(void **state) {
    (void)state;
    server s = start_server(NULL);
    char dir[] = "/tmp/lb_load_dur_XXXXXX";
    assert_non_null(mkdtemp(dir));
    assert_int_equal(
        lb_test_shell("%s load --endpoint %s --synthetic 20 --qps 10 --min-duration 5 --db "
                      "%s/r.db -q > %s/out.txt",
                      LB_TEST_BIN, s.url, dir, dir),
        0);
    char *out = read_file_in(dir, "out.txt");
    assert_non_null(strstr(out, "Result is : VALID\n"));
    assert_non_null(strstr(out, "  Min duration satisfied : Yes\n"));
    free(out);
    json_t *runs = list_runs(dir);
    json_t *run = json_array_get(runs, 0);
    assert_string_equal(json_string_value(json_object_get(run, "status")), "ok");
    assert_true(json_is_true(json_object_get(run, "valid")));
    json_decref(runs);
    lb_test_shell("rm -rf %s", dir);
    stop_server(&s);
}

/* The schedule's length: the last arrival is the first one at or after min_duration, and
 * at least min_queries are planned. */
static void test_loadgen_server_schedule_ends_at_the_first_arrival_past_min_duration(void **st) {
    (void)st;
    server s = start_server(NULL);
    const char *urls[] = {s.url};
    lb_loadgen_params p = params_for(urls, 1);
    p.scenario = LB_SCENARIO_SERVER;
    p.qps = 200;
    p.min_duration_s = 0.5;
    p.min_queries = 10;
    lb_dataset ds = small_dataset(10, 2);
    outcome o = run(&p, &ds);
    const lb_series *sched = lb_result_find_series(o.r, "scheduled_s");
    size_t n = sched->n;
    assert_true(n > 10);
    assert_true(sched->values[n - 1] >= 0.5);
    assert_true(sched->values[n - 2] < 0.5);
    assert_true(o.rep.summary.min_duration_ok);
    outcome_free(&o);
    p.min_queries = 400; /* more queries than the duration needs: the count rules */
    o = run(&p, &ds);
    assert_int_equal(lb_result_find_series(o.r, "scheduled_s")->n, 400);
    outcome_free(&o);
    lb_dataset_free(&ds);
    stop_server(&s);
}

/* Nothing listens on the port: no query completes, so the run is failed (exit 1), stored
 * failed with the reason, and still summarized. */
static void test_load_cli_nothing_listening_exits_1_and_is_stored_failed(void **state) {
    (void)state;
    server gone = start_server(NULL);
    char url[64];
    snprintf(url, sizeof url, "%s", gone.url);
    stop_server(&gone);
    char dir[] = "/tmp/lb_load_gone_XXXXXX";
    assert_non_null(mkdtemp(dir));
    assert_int_equal(
        lb_test_shell("%s load --endpoint %s --synthetic 4 --retries 0 --db %s/r.db -q > "
                      "%s/out.txt 2> %s/err.txt",
                      LB_TEST_BIN, url, dir, dir, dir),
        1);
    char *out = read_file_in(dir, "out.txt"), *err = read_file_in(dir, "err.txt");
    assert_non_null(strstr(out, "Failed queries : 4\n"));
    /* one line that names the server and what went wrong */
    char line[160];
    snprintf(line, sizeof line, "llmbench load: %s: none of the 4 queries completed (connect 4)\n",
             url);
    if (strstr(err, line) == NULL) fail_msg("no '%s' in: %s", line, err);
    free(out);
    free(err);
    json_t *runs = list_runs(dir);
    json_t *run = json_array_get(runs, 0);
    assert_string_equal(json_string_value(json_object_get(run, "status")), "failed");
    assert_non_null(strstr(json_string_value(json_object_get(run, "failure")),
                           "none of the 4 queries completed"));
    json_decref(runs);
    /* One failure allowed, four happened: failed too. */
    assert_int_equal(
        lb_test_shell("%s load --endpoint %s --synthetic 4 --retries 0 --max-failed 1 --db "
                      "%s/r.db -q > /dev/null 2>&1",
                      LB_TEST_BIN, url, dir),
        1);
    /* A search whose every trial failed found nothing to judge: failed, not INVALID. */
    assert_int_equal(lb_test_shell("%s load --endpoint %s --synthetic 2 --retries 0 --search-qps 4 "
                                   "--search-trials 2 --db %s/r.db -q > /dev/null 2>&1",
                                   LB_TEST_BIN, url, dir),
                     1);
    lb_test_shell("rm -rf %s", dir);
}

/* A proxy that answers every request, a connection each, with 307 to the same path with a
 * trailing slash. Runs until killed. */
static void serve_redirects(int lfd) {
    for (;;) {
        int fd = accept(lfd, NULL, NULL);
        if (fd < 0) continue;
        char buf[8192], path[256] = "";
        size_t len = 0, want = sizeof buf - 1;
        char *end = NULL;
        while (len < want) {
            ssize_t r = read(fd, buf + len, sizeof buf - 1 - len);
            if (r <= 0) break;
            len += (size_t)r;
            buf[len] = '\0';
            if (end == NULL && (end = strstr(buf, "\r\n\r\n")) != NULL) {
                char *cl = strcasestr(buf, "content-length:");
                want = (size_t)(end + 4 - buf) + (cl && cl < end ? strtoul(cl + 15, NULL, 10) : 0);
            }
        }
        sscanf(buf, "%*s %255s", path);
        char out[512];
        int n = snprintf(out, sizeof out,
                         "HTTP/1.1 307 Temporary Redirect\r\nLocation: %s/\r\n"
                         "Content-Length: 0\r\nConnection: close\r\n\r\n",
                         path);
        if (write(fd, out, (size_t)n) != n) _exit(1);
        close(fd);
    }
}

/* A server that redirects is not followed: every query fails as a redirect, the run's one
 * line of failure says so, and the log names where to point --endpoint. */
static void test_load_cli_redirected_queries_fail_naming_the_location(void **state) {
    (void)state;
    int lfd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(bind(lfd, (struct sockaddr *)&a, sizeof a), 0);
    assert_int_equal(listen(lfd, 64), 0);
    socklen_t alen = sizeof a;
    getsockname(lfd, (struct sockaddr *)&a, &alen);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        lb_test_die_with_parent();
        serve_redirects(lfd);
        _exit(0);
    }
    close(lfd);
    char url[64], dir[] = "/tmp/lb_load_redirect_XXXXXX";
    snprintf(url, sizeof url, "http://127.0.0.1:%d", ntohs(a.sin_port));
    assert_non_null(mkdtemp(dir));
    assert_int_equal(lb_test_shell("%s load --endpoint %s --synthetic 4 --retries 0 --db %s/r.db "
                                   "> %s/out.txt 2> %s/err.txt",
                                   LB_TEST_BIN, url, dir, dir, dir),
                     1);
    char *out = read_file_in(dir, "out.txt"), *err = read_file_in(dir, "err.txt");
    assert_non_null(strstr(out, "Failed queries : 4\n"));
    char line[256];
    snprintf(line, sizeof line, "llmbench load: %s: none of the 4 queries completed (redirect 4)\n",
             url);
    if (strstr(err, line) == NULL) fail_msg("no '%s' in: %s", line, err);
    snprintf(line, sizeof line,
             "redirect: redirected (307) to %s/v1/completions/: give --endpoint that URL", url);
    if (strstr(err, line) == NULL) fail_msg("no '%s' in: %s", line, err);
    free(out);
    free(err);
    lb_test_shell("rm -rf %s", dir);
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
}

/* Dropped answers that a retry recovered are not hidden: the summary counts the resent
 * attempts by reason and warns. */
static void test_load_cli_resent_attempts_are_reported(void **state) {
    (void)state;
    const char *args[] = {"--fault", "drop", "--fault-rate", "0.3", NULL};
    server s = start_server(args);
    char dir[] = "/tmp/lb_load_resent_XXXXXX";
    assert_non_null(mkdtemp(dir));
    int rc = lb_test_shell(
        "%s load --endpoint %s --synthetic 20 --retries 5 --max-failed 20 --db %s/r.db "
        "-q > %s/out.txt",
        LB_TEST_BIN, s.url, dir, dir);
    assert_true(rc == 0 || rc == 3);
    char *out = read_file_in(dir, "out.txt");
    assert_non_null(strstr(out, "  resent after dropped : "));
    assert_non_null(strstr(out, "attempts failed and were sent again (dropped "));
    assert_null(strstr(out, "No warnings encountered"));
    free(out);
    lb_test_shell("rm -rf %s", dir);
    stop_server(&s);
}

/* --sweep-qps: one stored run per rate, named and tagged, grouped by one sweep tag; a
 * table of rate against the figures names the highest VALID rate. */
static void test_load_cli_sweep_stores_one_run_per_rate_and_prints_a_table(void **state) {
    (void)state;
    server s = start_server(NULL);
    char dir[] = "/tmp/lb_load_sweep_XXXXXX";
    assert_non_null(mkdtemp(dir));
    assert_int_equal(
        lb_test_shell("%s load --endpoint %s --synthetic 10 --sweep-qps 40,80 --min-queries "
                      "20 --name sw --tag nightly --out %s/o --db %s/r.db -q > %s/out.txt",
                      LB_TEST_BIN, s.url, dir, dir, dir),
        0);
    char *out = read_file_in(dir, "out.txt");
    assert_non_null(strstr(out, "target q/s"));
    assert_non_null(strstr(out, "        40 "));
    assert_non_null(strstr(out, "        80 "));
    const char *last = "Highest VALID rate: 80 queries/s\n"; /* the table ends the output */
    assert_true(strlen(out) >= strlen(last));
    assert_string_equal(out + strlen(out) - strlen(last), last);
    assert_null(strstr(out, "MLPerf Results Summary")); /* the summaries go to --out */
    free(out);
    char *sum = read_file_in(dir, "o/qps40/mlperf_log_summary.txt");
    assert_non_null(strstr(sum, "target_qps : 40\n"));
    free(sum);
    json_t *runs = list_runs(dir);
    assert_int_equal(json_array_size(runs), 2);
    const char *group = NULL;
    for (size_t i = 0; i < 2; i++) {
        json_t *run = json_array_get(runs, i);
        assert_string_equal(json_string_value(json_object_get(run, "name")), "sw");
        json_t *tags = json_object_get(run, "tags");
        assert_int_equal(json_array_size(tags), 2);
        assert_string_equal(json_string_value(json_array_get(tags, 0)), "nightly");
        const char *t = json_string_value(json_array_get(tags, 1));
        assert_true(strncmp(t, "sweep:", 6) == 0);
        if (group == NULL) group = t;
        assert_string_equal(t, group);
    }
    json_decref(runs);
    lb_test_shell("rm -rf %s", dir);
    stop_server(&s);
}

/* --search-qps against a server of known capacity: one generation slot, 10 tokens 5 ms
 * apart (45 ms a request: 22 requests/s at most). Far below that a run is VALID (p90
 * TTFT under 200 ms); past it the queue grows through the run and TTFT with it, so it is
 * not. The search doubles from 4 q/s, then bisects: its answer lies between the two, and
 * every trial is a stored run of one "search:" group. */
static void test_load_cli_search_finds_the_highest_valid_rate(void **state) {
    (void)state;
    const char *const sargs[] = {"--slots", "1", "--tpot-ms", "5", NULL};
    server s = start_server(sargs);
    char dir[] = "/tmp/lb_load_search_XXXXXX";
    assert_non_null(mkdtemp(dir));
    char conf[600];
    snprintf(conf, sizeof conf, "%s/user.conf", dir);
    write_text(conf, "*.Server.target_latency_percentile = 90\n");
    int rc =
        lb_test_shell("%s load --endpoint %s --synthetic 20 --max-tokens 10 --search-qps 4 "
                      "--search-tolerance 0.1 --min-duration 1.5 --min-queries 60 "
                      "--ttft-limit-ms 200 --tpot-limit-ms 100 --user-conf %s --json --db %s/r.db "
                      "-q > %s/out.json",
                      LB_TEST_BIN, s.url, conf, dir, dir);
    assert_int_equal(rc, 0);
    char *out = read_file_in(dir, "out.json");
    json_t *doc = json_loads(out, 0, NULL);
    if (doc == NULL) fail_msg("not JSON: %.300s", out);
    free(out);
    char group[64];
    const char *g = json_string_value(json_object_get(doc, "search"));
    assert_non_null(g);
    assert_true(strncmp(g, "search:", 7) == 0);
    snprintf(group, sizeof group, "%s", g);
    double best = json_real_value(json_object_get(doc, "highest_valid_qps"));
    json_t *runs = json_object_get(doc, "runs");
    size_t n = json_array_size(runs);
    if (!(best >= 8 && best <= 26)) fail_msg("highest VALID rate %g, expected 8 to 26", best);
    /* 4 and 8 VALID; a rate above the answer was tried and was not VALID */
    bool over = false;
    for (size_t i = 0; i < n; i++) {
        json_t *v = json_object_get(json_array_get(runs, i), "verdict");
        double q = json_real_value(json_object_get(v, "target_qps"));
        bool valid = json_is_true(json_object_get(v, "valid"));
        if (q > best && q <= 32) over = over || !valid;
        if (q <= 8 && !valid) fail_msg("%g q/s was not VALID", q);
    }
    assert_true(over);
    assert_true(n >= 5 && n <= 16);
    json_decref(doc);
    json_t *stored = list_runs(dir);
    assert_int_equal(json_array_size(stored), n);
    for (size_t i = 0; i < n; i++) {
        json_t *tags = json_object_get(json_array_get(stored, i), "tags");
        assert_string_equal(json_string_value(json_array_get(tags, 0)), group);
    }
    json_decref(stored);
    lb_test_shell("rm -rf %s", dir);
    stop_server(&s);
}

/* Options that contradict each other are refused, not ignored. */
static void test_load_cli_conflicting_options_are_refused(void **state) {
    (void)state;
    char dir[] = "/tmp/lb_load_conf_XXXXXX";
    assert_non_null(mkdtemp(dir));
    static const struct {
        const char *args, *needle;
    } cases[] = {
        {"--qps 5 --concurrency 2", "give one of them"},
        {"--qps 5 --scenario offline", "apply to --scenario server only, not offline"},
        {"--concurrency 2 --scenario singlestream", "--concurrency applies to --scenario"},
        {"--qps 5 --sweep-qps 1,2", "give one of --qps R, --sweep-qps R1,R2,.. and --search-qps R"},
        {"--sweep-qps 1,2 --search-qps 3", "give one of --qps R, --sweep-qps"},
        {"--search-qps 3 --scenario offline", "apply to --scenario server only, not offline"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char cmd[1024];
        snprintf(cmd, sizeof cmd,
                 "%s load --endpoint http://127.0.0.1:9 --synthetic 2 %s --db %s/r.db 2> "
                 "%s/err.txt",
                 LB_TEST_BIN, cases[i].args, dir, dir);
        assert_refused(cmd, dir, cases[i].needle);
    }
    lb_test_shell("rm -rf %s", dir);
}

/* A --sweep-qps rate outside --qps's range is refused before anything runs: "inf" ran and
 * was reported as the highest VALID rate, and a tiny rate scheduled its first query
 * centuries away, so the run never ended. */
static void test_load_cli_sweep_rates_outside_the_qps_range_are_refused(void **state) {
    (void)state;
    char dir[] = "/tmp/lb_load_rates_XXXXXX";
    assert_non_null(mkdtemp(dir));
    static const char *const rates[] = {"1,inf", "1e-300", "2,2e9", "nan", "-1"};
    for (size_t i = 0; i < sizeof rates / sizeof rates[0]; i++) {
        char cmd[1024];
        snprintf(cmd, sizeof cmd,
                 "%s load --endpoint http://127.0.0.1:9 --synthetic 2 --sweep-qps %s --db "
                 "%s/r.db 2> %s/err.txt",
                 LB_TEST_BIN, rates[i], dir, dir);
        assert_refused(cmd, dir, "--sweep-qps expects up to 32 rates from 1e-06 to 1e+09");
    }
    /* A rate given twice (or twice within %g's six digits) wrote its --out folder twice,
     * the first run's files lost; a trailing comma was dropped unsaid. */
    static const struct {
        const char *rates, *needle;
    } twice[] = {
        {"1,2,1", "gives the rate 1 twice (its runs would share one --out folder, qps1)"},
        {"0.1,0.1000001", "gives the rate 0.1 twice"},
        {"1,2,", "--sweep-qps expects up to 32 rates"},
    };
    for (size_t i = 0; i < sizeof twice / sizeof twice[0]; i++) {
        char cmd[1024];
        snprintf(cmd, sizeof cmd,
                 "%s load --endpoint http://127.0.0.1:9 --synthetic 2 --sweep-qps %s --out "
                 "%s/out --db %s/r.db 2> %s/err.txt",
                 LB_TEST_BIN, twice[i].rates, dir, dir, dir);
        assert_refused(cmd, dir, twice[i].needle);
    }
    lb_test_shell("rm -rf %s", dir);
}

/* --mlperf-conf and --user-conf shape the run (user.conf wins; an option given wins over
 * both); the official seeds by default; --out writes LoadGen's three files, the accuracy
 * log with the answers' token ids; a malformed config line is refused with its place. */
static void test_load_cli_reads_loadgen_conf_files_and_writes_its_logs(void **state) {
    (void)state;
    server s = start_server(NULL);
    char dir[] = "/tmp/lb_load_conf_files_XXXXXX";
    assert_non_null(mkdtemp(dir));
    char path[512];
    snprintf(path, sizeof path, "%s/mlperf.conf", dir);
    write_text(path, "*.*.min_duration = 600000\n*.Server.target_qps = 1\n"
                     "llama3_1-8b.Server.ttft_latency = 2000\n");
    snprintf(path, sizeof path, "%s/user.conf", dir);
    write_text(path, "*.*.min_duration = 300\n*.Server.target_qps = 40\n");
    assert_int_equal(
        lb_test_shell("%s load --endpoint %s --synthetic 10 --scenario server --model-key "
                      "llama3.1-8b --mlperf-conf %s/mlperf.conf --user-conf %s/user.conf "
                      "--max-tokens 3 --out %s/o --db %s/r.db -q > /dev/null",
                      LB_TEST_BIN, s.url, dir, dir, dir, dir),
        3); /* too few queries for early stopping on the TTFT bound */
    char *sum = read_file_in(dir, "o/mlperf_log_summary.txt");
    assert_non_null(strstr(sum, "target_qps : 40\n"));
    assert_non_null(strstr(sum, "min_duration (ms): 300\n"));
    assert_non_null(strstr(sum, "ttft_latency (ns): 2000000000\n"));
    assert_non_null(strstr(sum, "sample_index_rng_seed : 14771362308971278857\n"));
    assert_non_null(strstr(sum, "schedule_rng_seed : 18209322760996052031\n"));
    free(sum);
    char *detail = read_file_in(dir, "o/mlperf_log_detail.txt");
    assert_non_null(
        strstr(detail, ":::MLLOG {\"key\": \"result_validity\", \"value\": \"INVALID\""));
    assert_non_null(strstr(detail, "\"key\": \"effective_qsl_rng_seed\", \"value\": "
                                   "1780908523862526354,"));
    free(detail);
    /* An option given on the command line wins over the files. */
    assert_int_equal(
        lb_test_shell("%s load --endpoint %s --synthetic 10 --qps 80 --min-duration 0.1 "
                      "--user-conf %s/user.conf --seed 5 --out %s/o2 --db %s/r.db -q > "
                      "/dev/null",
                      LB_TEST_BIN, s.url, dir, dir, dir),
        0);
    sum = read_file_in(dir, "o2/mlperf_log_summary.txt");
    assert_non_null(strstr(sum, "target_qps : 80\n"));
    assert_non_null(strstr(sum, "min_duration (ms): 100\n"));
    assert_non_null(strstr(sum, "sample_index_rng_seed : 5\n"));
    free(sum);
    /* Accuracy mode with a tokenizer: the accuracy log, one answer a sample. */
    assert_int_equal(
        lb_test_shell("%s load --endpoint %s --synthetic 4 --mode accuracy --tokenizer %s "
                      "--out %s/o3 --db %s/r.db -q > /dev/null",
                      LB_TEST_BIN, s.url, LB_TEST_FIXTURES "/tokenizer/gpt2.tiktoken", dir, dir),
        0);
    snprintf(path, sizeof path, "%s/o3/mlperf_log_accuracy.json", dir);
    json_t *acc = json_load_file(path, 0, NULL);
    assert_non_null(acc);
    assert_int_equal(json_array_size(acc), 4);
    json_t *e = json_array_get(acc, 2);
    assert_int_equal(json_integer_value(json_object_get(e, "qsl_idx")), 2);
    assert_int_equal(strlen(json_string_value(json_object_get(e, "data"))),
                     8 * json_integer_value(json_object_get(e, "token_count")));
    json_decref(acc);
    /* A malformed line: exit 2, the file and line named. */
    snprintf(path, sizeof path, "%s/bad.conf", dir);
    write_text(path, "*.*.min_duration = 10\ntarget_qps 5\n");
    char cmd[1024];
    snprintf(cmd, sizeof cmd,
             "%s load --endpoint %s --synthetic 2 --user-conf %s --db %s/r.db 2> %s/err.txt",
             LB_TEST_BIN, s.url, path, dir, dir);
    assert_refused(cmd, dir, "bad.conf:2: expected 'model.scenario.key = value'");
    lb_test_shell("rm -rf %s", dir);
    stop_server(&s);
}

/* Arrivals: a ramp-up schedules a quarter of the ramp's arrivals in its first half (the
 * rate rises linearly), then the full rate; burstiness b gives gaps with a coefficient of
 * variation 1/sqrt(b) and the same mean. */
static void test_loadgen_ramp_up_and_burstiness_shape_the_arrivals(void **state) {
    (void)state;
    server s = start_server(NULL);
    const char *urls[] = {s.url};
    lb_loadgen_params p = params_for(urls, 1);
    p.scenario = LB_SCENARIO_SERVER;
    p.qps = 400;
    p.ramp_up_s = 1.0;
    p.min_duration_s = 2.0;
    p.min_queries = 1;
    lb_dataset ds = small_dataset(10, 1);
    outcome o = run(&p, &ds);
    const lb_series *sched = lb_result_find_series(o.r, "scheduled_s");
    int bins[3] = {0};
    for (size_t i = 0; i < sched->n; i++) {
        double t = sched->values[i];
        bins[t < 0.5 ? 0 : t < 1.0 ? 1 : 2] += t < 2.0;
    }
    /* expected 50, 150, 400 */
    if (!(bins[0] >= 25 && bins[0] <= 80 && bins[1] >= 110 && bins[1] <= 190 && bins[2] >= 340 &&
          bins[2] <= 460))
        fail_msg("arrivals per interval %d %d %d, expected about 50 150 400", bins[0], bins[1],
                 bins[2]);
    outcome_free(&o);
    const double shapes[] = {1.0, 0.25};
    for (int c = 0; c < 2; c++) {
        p.ramp_up_s = 0;
        p.min_duration_s = 0;
        p.qps = 2000;
        p.min_queries = 1500;
        p.burstiness = shapes[c];
        o = run(&p, &ds);
        sched = lb_result_find_series(o.r, "scheduled_s");
        size_t n = sched->n;
        double sum = 0, ss = 0;
        for (size_t i = 1; i < n; i++) {
            double g = sched->values[i] - sched->values[i - 1];
            sum += g;
            ss += g * g;
        }
        double mean = sum / (double)(n - 1), cv = sqrt(ss / (double)(n - 1) - mean * mean) / mean;
        assert_float_equal(mean, 1.0 / 2000, 0.15 / 2000);
        assert_float_equal(cv, 1.0 / sqrt(shapes[c]), 0.2 / sqrt(shapes[c]));
        outcome_free(&o);
    }
    lb_dataset_free(&ds);
    stop_server(&s);
}

/* ---- the replica pool, pinned ---- */

typedef struct {
    int replica[64];
    lb_qerr error[64];
    bool done[64];
} pool_log;

static void pool_on_done(void *user, const lb_http_outcome *o) {
    pool_log *l = user;
    l->replica[o->req.tag] = o->req.replica;
    l->error[o->req.tag] = o->error;
    l->done[o->req.tag] = true;
}

static lb_pool *pool_of(const char **urls, size_t n, int64_t retries, int64_t eject_after,
                        pool_log *log) {
    lb_pool_params pp = lb_pool_default_params();
    pp.endpoints = urls;
    pp.n_endpoints = n;
    pp.retries = retries;
    pp.eject_after = eject_after;
    pp.http.timeout_ms = 5000;
    pp.http.stream = false; /* pool_body asks for a whole answer */
    lb_pool_callbacks cb = {.on_done = pool_on_done};
    lb_pool *pool = NULL;
    lb_err err;
    if (lb_pool_init(&pool, &pp, &cb, log, &err) != LB_OK) fail_msg("%s", err.msg);
    return pool;
}

static const char pool_body[] = "{\"prompt\":\"a b\",\"max_tokens\":2}";

/* Submits request `tag` and serves the network until it is done. */
static void pool_send_and_wait(lb_pool *pool, pool_log *log, uint64_t tag) {
    lb_err err;
    assert_int_equal(lb_pool_submit(pool, tag, pool_body, sizeof pool_body - 1, &err), LB_OK);
    int64_t give_up = lb_clock_now_ns() + 10000000000LL;
    while (!log->done[tag] && lb_clock_now_ns() < give_up)
        lb_pool_run(pool, lb_clock_now_ns() + 50000000);
    assert_true(log->done[tag]);
}

/* Each request goes to the replica with the fewest in flight: with one slow request on
 * replica 0, every later one goes to the idle replica 1 (not the busier 0, and not in
 * turn). */
static void test_pool_picks_the_least_loaded_replica(void **state) {
    (void)state;
    const char *slow_args[] = {"--ttft-ms", "3000", NULL};
    server slow = start_server(slow_args), fast = start_server(NULL);
    const char *urls[] = {slow.url, fast.url};
    pool_log log = {0};
    lb_pool *pool = pool_of(urls, 2, 0, 0, &log);
    lb_err err;
    assert_int_equal(lb_pool_submit(pool, 0, pool_body, sizeof pool_body - 1, &err), LB_OK);
    for (uint64_t t = 1; t <= 4; t++)
        pool_send_and_wait(pool, &log, t);
    assert_false(log.done[0]); /* still on the slow replica */
    while (!log.done[0])
        lb_pool_run(pool, lb_clock_now_ns() + 50000000);
    assert_int_equal(log.replica[0], 0);
    for (int t = 0; t <= 4; t++)
        assert_int_equal(log.error[t], LB_QERR_NONE);
    for (int t = 1; t <= 4; t++)
        assert_int_equal(log.replica[t], 1);
    lb_pool_free(pool);
    stop_server(&slow);
    stop_server(&fast);
}

/* Only failures in a row take a replica out: a success resets the count. A replica that
 * fails 3 of 8 requests, never 3 in a row, stays in with eject_after 3; one that fails
 * every request is out after exactly 3. The failing server's pattern (seeded) is read
 * first through a one-replica pool, which never ejects. */
static void test_pool_ejects_only_after_failures_in_a_row(void **state) {
    (void)state;
    server fine = start_server(NULL);
    bool found = false;
    for (int seed = 1; seed < 200 && !found; seed++) {
        char seed_s[16];
        snprintf(seed_s, sizeof seed_s, "%d", seed);
        const char *args[] = {"--fault", "500", "--fault-rate", "0.5", "--seed", seed_s, NULL};
        server probe = start_server(args);
        const char *one[] = {probe.url};
        pool_log log = {0};
        lb_pool *pool = pool_of(one, 1, 0, 3, &log);
        int failed = 0, run = 0, longest = 0;
        for (uint64_t t = 0; t < 8; t++) {
            pool_send_and_wait(pool, &log, t);
            bool f = log.error[t] != LB_QERR_NONE;
            failed += f;
            run = f ? run + 1 : 0;
            if (run > longest) longest = run;
        }
        lb_pool_free(pool);
        stop_server(&probe);
        if (failed < 3 || longest >= 3) continue;
        found = true;
        /* The same seed again (a fresh server counts from 0), beside a working replica:
         * requests alternate, so the faulty one sees the same 8. */
        server faulty = start_server(args);
        const char *urls[] = {faulty.url, fine.url};
        pool_log log2 = {0};
        pool = pool_of(urls, 2, 0, 3, &log2);
        for (uint64_t t = 0; t < 16; t++)
            pool_send_and_wait(pool, &log2, t);
        size_t n;
        const lb_replica *reps = lb_pool_replicas(pool, &n);
        assert_int_equal(reps[0].sent, 8);
        assert_int_equal(reps[0].failed, failed);
        assert_false(reps[0].ejected);
        lb_pool_free(pool);
        stop_server(&faulty);
    }
    assert_true(found);
    const char *always[] = {"--fault", "500", NULL};
    server broken = start_server(always);
    const char *urls[] = {broken.url, fine.url};
    pool_log log = {0};
    lb_pool *pool = pool_of(urls, 2, 0, 3, &log);
    for (uint64_t t = 0; t < 12; t++)
        pool_send_and_wait(pool, &log, t);
    size_t n;
    const lb_replica *reps = lb_pool_replicas(pool, &n);
    assert_true(reps[0].ejected);
    assert_int_equal(reps[0].failed, 3);
    assert_int_equal(reps[1].sent, 12 - 3);
    lb_pool_free(pool);
    stop_server(&broken);
    stop_server(&fine);
}

/* Attempts ended by the run stopping (SIGINT's drain ran out) are no failure of their
 * replica: six in flight on two replicas, all aborted, take neither out of rotation (with
 * eject_after 2, three in a row would) and are not sent again. */
static void test_pool_interrupted_attempts_eject_no_replica(void **state) {
    (void)state;
    const char *slow[] = {"--ttft-ms", "60000", NULL};
    server a = start_server(slow), b = start_server(slow);
    const char *urls[] = {a.url, b.url};
    pool_log log = {0};
    lb_pool *pool = pool_of(urls, 2, 2, 2, &log);
    lb_err err;
    for (uint64_t t = 0; t < 6; t++)
        assert_int_equal(lb_pool_submit(pool, t, pool_body, sizeof pool_body - 1, &err), LB_OK);
    lb_pool_run(pool, lb_clock_now_ns() + 100000000);
    lb_pool_abort_all(pool, LB_QERR_INTERRUPTED);
    assert_int_equal(lb_pool_inflight(pool), 0);
    for (int t = 0; t < 6; t++) {
        assert_true(log.done[t]);
        assert_int_equal(log.error[t], LB_QERR_INTERRUPTED);
    }
    size_t n;
    const lb_replica *reps = lb_pool_replicas(pool, &n);
    for (size_t i = 0; i < n; i++) {
        assert_int_equal(reps[i].sent, 3);
        if (reps[i].ejected) fail_msg("replica %zu taken out: %s", i, reps[i].eject_reason);
    }
    lb_pool_free(pool);
    stop_server(&a);
    stop_server(&b);
}

/* A request the server refuses as such (400: a field out of range) is final at once and no
 * failure of its replica: with two retries and eject_after 2, six refused requests are
 * each sent once and take no replica out. A replica that answers 404 (a path it does not
 * serve) is the replica's failure: it is taken out after 2, its requests sent again. */
static void test_pool_refused_requests_are_neither_retried_nor_counted(void **state) {
    (void)state;
    server a = start_server(NULL), b = start_server(NULL);
    const char *urls[] = {a.url, b.url};
    pool_log log = {0};
    lb_pool *pool = pool_of(urls, 2, 2, 2, &log);
    static const char refused[] = "{\"prompt\":\"a b\",\"max_tokens\":0}";
    lb_err err;
    for (uint64_t t = 0; t < 6; t++) {
        assert_int_equal(lb_pool_submit(pool, t, refused, sizeof refused - 1, &err), LB_OK);
        int64_t give_up = lb_clock_now_ns() + 10000000000LL;
        while (!log.done[t] && lb_clock_now_ns() < give_up)
            lb_pool_run(pool, lb_clock_now_ns() + 50000000);
        assert_true(log.done[t]);
        assert_int_equal(log.error[t], LB_QERR_HTTP_4XX);
    }
    size_t n;
    const lb_replica *reps = lb_pool_replicas(pool, &n);
    assert_int_equal(reps[0].sent + reps[1].sent, 6);
    for (size_t i = 0; i < n; i++)
        if (reps[i].ejected) fail_msg("replica %zu taken out: %s", i, reps[i].eject_reason);
    lb_pool_free(pool);

    char wrong[96];
    snprintf(wrong, sizeof wrong, "%s/elsewhere/v1/", a.url);
    const char *urls2[] = {wrong, b.url};
    pool_log log2 = {0};
    pool = pool_of(urls2, 2, 2, 2, &log2);
    for (uint64_t t = 0; t < 6; t++) {
        pool_send_and_wait(pool, &log2, t);
        assert_int_equal(log2.error[t], LB_QERR_NONE);
    }
    reps = lb_pool_replicas(pool, &n);
    assert_true(reps[0].ejected);
    assert_int_equal(reps[0].failed, 2);
    assert_int_equal(reps[1].completed, 6);
    lb_pool_free(pool);
    stop_server(&a);
    stop_server(&b);
}

/* A base URL with "/v1/" at its end ("http://host:8000/v1/", as OpenAI clients write
 * theirs) gets the API path like "/v1" does; it used to be taken for a full URL and every
 * request posted to "/v1/". A URL that names the API's path is kept. */
static void test_pool_endpoint_url_appends_the_api_path_to_a_base(void **state) {
    (void)state;
    static const struct {
        const char *endpoint;
        lb_api api;
        const char *url;
    } cases[] = {
        {"http://h:8000", LB_API_COMPLETIONS, "http://h:8000/v1/completions"},
        {"http://h:8000/", LB_API_COMPLETIONS, "http://h:8000/v1/completions"},
        {"http://h:8000/v1", LB_API_CHAT, "http://h:8000/v1/chat/completions"},
        {"http://h:8000/v1/", LB_API_COMPLETIONS, "http://h:8000/v1/completions"},
        {"http://h:8000/v1//", LB_API_CHAT, "http://h:8000/v1/chat/completions"},
        {"https://[::1]:8443/proxy/v1/", LB_API_CHAT,
         "https://[::1]:8443/proxy/v1/chat/completions"},
        {"http://h:8000/v1/completions", LB_API_CHAT, "http://h:8000/v1/completions"},
        {"http://h/p/v1/chat/completions/", LB_API_COMPLETIONS, "http://h/p/v1/chat/completions/"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char url[128];
        size_t n = lb_pool_endpoint_url(cases[i].endpoint, cases[i].api, url, sizeof url);
        assert_int_equal(n, strlen(cases[i].url));
        assert_string_equal(url, cases[i].url);
    }
    /* and a run against one answers: requests reach the server's API */
    server a = start_server(NULL);
    char base[96];
    snprintf(base, sizeof base, "%s/v1/", a.url);
    const char *urls[] = {base};
    pool_log log = {0};
    lb_pool *pool = pool_of(urls, 1, 0, 0, &log);
    pool_send_and_wait(pool, &log, 0);
    assert_int_equal(log.error[0], LB_QERR_NONE);
    lb_pool_free(pool);
    stop_server(&a);
}

/* --max-inflight N: at no moment are N + 1 queries between hand-over and done. */
static void test_loadgen_max_inflight_is_never_exceeded(void **state) {
    (void)state;
    const char *args[] = {"--ttft-ms", "5", "--tpot-ms", "1", NULL};
    server s = start_server(args);
    const char *urls[] = {s.url};
    lb_loadgen_params p = params_for(urls, 1);
    p.scenario = LB_SCENARIO_OFFLINE;
    p.max_inflight = 3;
    p.min_queries = 60;
    lb_dataset ds = small_dataset(10, 4);
    outcome o = run(&p, &ds);
    const lb_series *h = lb_result_find_series(o.r, "handover_s");
    const lb_series *d = lb_result_find_series(o.r, "done_s");
    assert_int_equal(h->n, 60);
    int most = 0;
    for (size_t i = 0; i < h->n; i++) { /* in flight just after query i was handed over */
        int k = 0;
        for (size_t j = 0; j < h->n; j++)
            k += h->values[j] <= h->values[i] && d->values[j] > h->values[i];
        if (k > most) most = k;
    }
    assert_int_equal(most, 3);
    outcome_free(&o);
    lb_dataset_free(&ds);
    stop_server(&s);
}

/* A query whose first attempt broke after some tokens and was resent keeps only the
 * gaps of the attempt that completed: its gaps are its tokens - 1, and the ITL count
 * is the sum over queries. */
static void test_loadgen_retried_attempt_gaps_stay_out_of_itl(void **state) {
    (void)state;
    const char *args[] = {"--fault", "drop", "--fault-rate", "0.5", "--seed", "4", NULL};
    server s = start_server(args);
    const char *urls[] = {s.url};
    lb_loadgen_params p = params_for(urls, 1);
    p.scenario = LB_SCENARIO_OFFLINE;
    p.pool.retries = 6;
    lb_dataset ds = small_dataset(20, 10);
    outcome o = run(&p, &ds);
    const lb_loadgen_summary *sm = &o.rep.summary;
    assert_true(sm->resent[LB_QERR_DROPPED] > 0);
    const lb_series *gaps = lb_result_find_series(o.r, "token_gaps");
    const lb_series *tokens = lb_result_find_series(o.r, "output_tokens");
    const lb_series *status = lb_result_find_series(o.r, "status");
    size_t total = 0;
    for (size_t i = 0; i < gaps->n; i++) {
        if (status->values[i] != 0) continue;
        assert_float_equal(gaps->values[i], tokens->values[i] - 1, 0);
        total += (size_t)gaps->values[i];
    }
    assert_int_equal(sm->itl_ms.n, total);
    outcome_free(&o);
    lb_dataset_free(&ds);
    stop_server(&s);
}

/* Conversations: each turn after the first is sent only when the turn before it ended,
 * with the conversation so far (the server counts the words of every message), in the
 * open loop and in the closed loop alike. */
static void test_loadgen_conversation_turns_follow_each_other(void **state) {
    (void)state;
    const char *args[] = {"--ttft-ms", "20", "--tpot-ms", "2", NULL};
    server s = start_server(args);
    const char *urls[] = {s.url};
    const char *text =
        "[{\"conversations\": [{\"from\": \"human\", \"value\": \"one two\"},"
        " {\"from\": \"gpt\", \"value\": \"three\"}, {\"from\": \"human\", \"value\": \"four\"},"
        " {\"from\": \"gpt\", \"value\": \"five six\"}, {\"from\": \"human\", \"value\": \"x\"},"
        " {\"from\": \"gpt\", \"value\": \"y\"}]},"
        " {\"conversations\": [{\"from\": \"human\", \"value\": \"a\"},"
        " {\"from\": \"gpt\", \"value\": \"b\"}, {\"from\": \"human\", \"value\": \"c d\"},"
        " {\"from\": \"gpt\", \"value\": \"e\"}]}]";
    lb_dataset ds;
    lb_err err;
    assert_int_equal(lb_dataset_parse_sharegpt_turns(text, strlen(text), "t.json", &ds, &err),
                     LB_OK);
    assert_int_equal(ds.n, 5);
    const int want_words[5] = {2, 2 + 1 + 1, 2 + 1 + 1 + 2 + 1, 1, 1 + 1 + 2};
    for (int c = 0; c < 2; c++) {
        lb_loadgen_params p = params_for(urls, 1);
        p.request.api = LB_API_CHAT;
        p.max_tokens = 3;
        p.scenario = c == 0 ? LB_SCENARIO_OFFLINE : LB_SCENARIO_CONCURRENCY;
        p.concurrency = 1;
        outcome o = run(&p, &ds);
        assert_int_equal(o.rep.summary.completed, 5);
        const lb_series *smp = lb_result_find_series(o.r, "sample");
        const lb_series *sent = lb_result_find_series(o.r, "sent_s");
        const lb_series *done = lb_result_find_series(o.r, "done_s");
        const lb_series *in = lb_result_find_series(o.r, "input_tokens");
        assert_int_equal(smp->n, 5);
        for (size_t i = 0; i < smp->n; i++) {
            int k = (int)smp->values[i];
            assert_float_equal(in->values[i], want_words[k], 0);
            int32_t nt = ds.samples[k].next_turn;
            if (nt < 0) continue;
            for (size_t j = 0; j < smp->n; j++)
                if ((int)smp->values[j] == nt) assert_true(sent->values[j] >= done->values[i]);
        }
        outcome_free(&o);
    }
    lb_dataset_free(&ds);
    stop_server(&s);
}

int main(void) {
    signal(SIGPIPE, SIG_IGN);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_loadgen_server_scenario_matches_synthetic_timing),
        cmocka_unit_test(test_loadgen_offline_singlestream_concurrency_and_accuracy),
        cmocka_unit_test(test_loadgen_preconnected_connections_are_reused),
        cmocka_unit_test(test_loadgen_replica_killed_mid_run_loses_no_sample),
        cmocka_unit_test(test_loadgen_fault_modes_become_failure_reasons),
        cmocka_unit_test(test_loadgen_answers_without_usage_count_tokens_as_unknown),
        cmocka_unit_test(test_loadgen_answers_without_usage_are_counted_with_the_tokenizer),
        cmocka_unit_test(test_loadgen_sigint_drains_then_marks_the_rest_interrupted),
        cmocka_unit_test(test_loadgen_sigint_during_warmup_drains_then_stops),
        cmocka_unit_test(test_loadgen_closed_loops_issue_past_min_duration),
        cmocka_unit_test(test_load_cli_writes_out_dir_and_never_records_the_key),
        cmocka_unit_test(test_load_cli_masks_url_userinfo_everywhere_and_refuses_other_protocols),
        cmocka_unit_test(test_load_cli_refuses_malformed_endpoints_naming_them),
        cmocka_unit_test(test_load_cli_checks_out_before_the_run),
        cmocka_unit_test(test_load_cli_preconnect_is_capped_and_interruptible),
        cmocka_unit_test(test_load_cli_with_tokenizer_prefers_usage_and_refuses_bad_ranks),
        cmocka_unit_test(test_load_every_summary_figure_is_recomputed_from_the_export),
        cmocka_unit_test(test_load_cli_server_run_at_min_duration_5_is_valid),
        cmocka_unit_test(test_loadgen_server_schedule_ends_at_the_first_arrival_past_min_duration),
        cmocka_unit_test(test_load_cli_nothing_listening_exits_1_and_is_stored_failed),
        cmocka_unit_test(test_load_cli_redirected_queries_fail_naming_the_location),
        cmocka_unit_test(test_load_cli_resent_attempts_are_reported),
        cmocka_unit_test(test_load_cli_sweep_stores_one_run_per_rate_and_prints_a_table),
        cmocka_unit_test(test_load_cli_search_finds_the_highest_valid_rate),
        cmocka_unit_test(test_load_cli_conflicting_options_are_refused),
        cmocka_unit_test(test_load_cli_sweep_rates_outside_the_qps_range_are_refused),
        cmocka_unit_test(test_load_cli_reads_loadgen_conf_files_and_writes_its_logs),
        cmocka_unit_test(test_loadgen_ramp_up_and_burstiness_shape_the_arrivals),
        cmocka_unit_test(test_pool_picks_the_least_loaded_replica),
        cmocka_unit_test(test_pool_ejects_only_after_failures_in_a_row),
        cmocka_unit_test(test_pool_interrupted_attempts_eject_no_replica),
        cmocka_unit_test(test_pool_refused_requests_are_neither_retried_nor_counted),
        cmocka_unit_test(test_pool_endpoint_url_appends_the_api_path_to_a_base),
        cmocka_unit_test(test_loadgen_max_inflight_is_never_exceeded),
        cmocka_unit_test(test_loadgen_retried_attempt_gaps_stay_out_of_itl),
        cmocka_unit_test(test_loadgen_conversation_turns_follow_each_other),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
