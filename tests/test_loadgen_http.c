/* test_loadgen_http.c: the load generator over real HTTP on 127.0.0.1 against
 * `llmbench serve --synthetic` children: every scenario, timing against the configured
 * synthetic TTFT/TPOT, a replica killed mid-run, each fault mode, SIGINT with drain, and
 * the CLI (files written, API key never recorded). */
#include <math.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

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
    if (o.st != LB_OK && o.st != LB_ERR_INTERRUPTED) fail_msg("run failed: %s", o.err.msg);
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
    const lb_loadgen_summary *sm = &o.rep.steps[0];
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

static void test_loadgen_offline_singlestream_concurrency_and_sweep(void **state) {
    (void)state;
    const char *args[] = {"--ttft-ms", "10", "--tpot-ms", "1", NULL};
    server s = start_server(args);
    const char *urls[] = {s.url};
    lb_dataset ds = small_dataset(12, 4);
    lb_loadgen_params p = params_for(urls, 1);

    p.scenario = LB_SCENARIO_OFFLINE;
    outcome o = run(&p, &ds);
    assert_int_equal(o.rep.steps[0].completed, 12);
    const lb_series *sched = lb_result_find_series(o.r, "scheduled_s");
    for (size_t i = 0; i < sched->n; i++)
        assert_float_equal(sched->values[i], 0.0, 0.0);
    outcome_free(&o);

    /* SingleStream: a query is sent only after the previous one is done. */
    p.scenario = LB_SCENARIO_SINGLE_STREAM;
    p.min_queries = 8;
    o = run(&p, &ds);
    assert_int_equal(o.rep.steps[0].completed, 8);
    const lb_series *sent = lb_result_find_series(o.r, "sent_s");
    const lb_series *done = lb_result_find_series(o.r, "done_s");
    for (size_t i = 1; i < sent->n; i++)
        assert_true(sent->values[i] >= done->values[i - 1]);
    assert_false(o.rep.steps[0].early_stop_ok); /* 8 < 64 queries */
    outcome_free(&o);

    /* Concurrency 4: queries overlap. */
    p.scenario = LB_SCENARIO_CONCURRENCY;
    p.concurrency = 4;
    p.min_queries = 16;
    o = run(&p, &ds);
    assert_int_equal(o.rep.steps[0].completed, 16);
    sent = lb_result_find_series(o.r, "sent_s");
    done = lb_result_find_series(o.r, "done_s");
    assert_true(sent->values[3] < done->values[0]);
    outcome_free(&o);

    /* Sweep: one step per rate, metrics prefixed by the rate. */
    p.scenario = LB_SCENARIO_SERVER;
    p.n_sweep = 2;
    p.sweep_qps[0] = 50;
    p.sweep_qps[1] = 100;
    p.min_queries = 10;
    o = run(&p, &ds);
    assert_int_equal(o.rep.n_steps, 2);
    assert_float_equal(o.rep.steps[1].target_qps, 100, 0);
    assert_int_equal(o.rep.steps[1].completed, 10);
    assert_false(isnan(lb_result_metric(o.r, "qps50/samples_per_s")));
    assert_false(isnan(lb_result_metric(o.r, "qps100/ttft_p99_ms")));
    assert_int_equal(lb_result_find_series(o.r, "target_qps")->n, 20);
    outcome_free(&o);

    /* Accuracy: every sample once, its text kept. */
    p.scenario = LB_SCENARIO_OFFLINE;
    p.mode = LB_MODE_ACCURACY;
    p.request.api = LB_API_CHAT;
    o = run(&p, &ds);
    assert_int_equal(o.rep.steps[0].issued, 12);
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
    assert_int_equal(o.rep.steps[0].completed, 64);
    assert_int_equal(o.rep.steps[0].preconnected, 8);
    assert_int_equal(o.rep.steps[0].new_connections, 0);
    assert_float_equal(lb_result_metric(o.r, "connections_opened"), 0.0, 0.0);
    outcome_free(&o);

    p.preconnect = 0;
    o = run(&p, &ds);
    assert_int_equal(o.rep.steps[0].preconnected, 0);
    assert_true(o.rep.steps[0].new_connections >= 8);
    outcome_free(&o);

    p.preconnect = -1;
    p.concurrency = 150; /* three multi handles */
    p.min_queries = 600;
    o = run(&p, &ds);
    assert_int_equal(o.rep.steps[0].completed, 600);
    assert_int_equal(o.rep.steps[0].preconnected, 150);
    assert_int_equal(o.rep.steps[0].new_connections, 0);
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
    const lb_loadgen_summary *sm = &o.rep.steps[0];
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
        const lb_loadgen_summary *sm = &o.rep.steps[0];
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
    assert_int_equal(o.rep.steps[0].failures[LB_QERR_CONNECT], 4);
    assert_int_equal(o.rep.steps[0].retries, 4);
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
    const lb_loadgen_summary *sm = &o.rep.steps[0];
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
    const lb_loadgen_summary *sm = &o.rep.steps[0];
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
    assert_int_equal(o.rep.steps[0].counted[LB_TOKENS_TOKENIZER], 4);
    assert_int_equal(o.rep.steps[0].output_tokens, want);
    outcome_free(&o);
    lb_dataset_free(&ds);
    stop_server(&s);
    lb_tokenizer_free(tok);
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
    pid_t parent = getpid(), killer = fork();
    if (killer == 0) {
        struct timespec ts = {0, 300000000};
        nanosleep(&ts, NULL);
        kill(parent, SIGINT);
        _exit(0);
    }
    outcome o = run(&p, &ds);
    waitpid(killer, NULL, 0);
    assert_int_equal(o.st, LB_ERR_INTERRUPTED);
    assert_int_equal(o.r->status, LB_RUN_INTERRUPTED);
    const lb_loadgen_summary *sm = &o.rep.steps[0];
    assert_int_equal(sm->preconnected, 64);
    assert_true(sm->issued > 0 && sm->issued < 1000);
    assert_int_equal(sm->failures[LB_QERR_INTERRUPTED], sm->issued);
    assert_int_equal(lb_result_find_series(o.r, "status")->n, (size_t)sm->issued);
    lb_signals_reset();
    outcome_free(&o);
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
    assert_int_equal(system(cmd), 0);
    char path[512];
    snprintf(path, sizeof path, "%s/out/summary.txt", dir);
    char *summary = slurp(path);
    assert_non_null(summary);
    assert_non_null(strstr(summary, "MLPerf Results Summary"));
    assert_non_null(strstr(summary, "Scenario : Concurrency"));
    snprintf(path, sizeof path, "%s/out/detail.json", dir);
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
    assert_int_equal(system(cmd), 0);
    snprintf(path, sizeof path, "%s/out/summary.txt", dir);
    char *summary = slurp(path);
    assert_non_null(strstr(summary, "(counted from usage: usage 6, tokenizer 0,"));
    snprintf(path, sizeof path, "%s/out/detail.json", dir);
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

int main(void) {
    signal(SIGPIPE, SIG_IGN);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_loadgen_server_scenario_matches_synthetic_timing),
        cmocka_unit_test(test_loadgen_offline_singlestream_concurrency_and_sweep),
        cmocka_unit_test(test_loadgen_preconnected_connections_are_reused),
        cmocka_unit_test(test_loadgen_replica_killed_mid_run_loses_no_sample),
        cmocka_unit_test(test_loadgen_fault_modes_become_failure_reasons),
        cmocka_unit_test(test_loadgen_answers_without_usage_count_tokens_as_unknown),
        cmocka_unit_test(test_loadgen_answers_without_usage_are_counted_with_the_tokenizer),
        cmocka_unit_test(test_loadgen_sigint_drains_then_marks_the_rest_interrupted),
        cmocka_unit_test(test_load_cli_writes_out_dir_and_never_records_the_key),
        cmocka_unit_test(test_load_cli_with_tokenizer_prefers_usage_and_refuses_bad_ranks),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
