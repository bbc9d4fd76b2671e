/* `llmbench infer` as a program on the CPU engine and a tiny model directory: an Offline
 * run completes every query and is stored; accuracy mode scores ROUGE against the
 * references and writes LoadGen's accuracy log from the engine's ids and generated.jsonl
 * in UTF-8 whatever bytes the model made; paths that are not UTF-8 still give a --json
 * result; --search-qps runs
 * load's search with the engine answering; a request longer than the context fails alone;
 * samples whose queries are sure to fail more than --max-failed allows, or every query, are
 * refused before the run (the bos id counted where llmbench tokenizes, cnn_eval records
 * without tok_input too), and so are options that cannot work together; a bad directory is
 * refused with exit 2 naming the file; the sampling options are recorded as given; a signal before
 * t0 stops the preparation, and one during the warm-up stores none of its engine steps. */
/* clang-format off */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
/* clang-format on */

#include <fcntl.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli/engine_opt.h"
#include "core/signals.h"
#include "core/utf8text.h"
#include "hf_fixture.h"
#include "infer/infer.h"
#include "loadgen/dataset.h"
#include "model/hf_tokenizer.h"
#include "model/model.h"
#include "test_util.h"

static char dir[64], db[128];

static int setup(void **state) {
    (void)state;
    lb_test_tmpdir(dir, sizeof dir);
    snprintf(db, sizeof db, "%s/runs.db", dir);
    lb_model_config cfg = lb_fixture_config();
    lb_model m;
    lb_err err;
    if (lb_model_init(&m, &cfg, 1, 1, 3, &err) != LB_OK) return -1;
    lb_fixture_write_dir(dir, &cfg, m.params, false, true);
    lb_model_free(&m);
    return 0;
}

static int teardown(void **state) {
    (void)state;
    lb_test_rmtree(dir);
    return 0;
}

static double metric(json_t *j, const char *name) {
    size_t i;
    json_t *m;
    json_array_foreach(json_object_get(j, "metrics"), i, m) {
        if (strcmp(json_string_value(json_object_get(m, "name")), name) == 0)
            return json_number_value(json_object_get(m, "value"));
    }
    fail_msg("no metric %s", name);
    return 0;
}

static json_t *run_json(const char *const *args, int want_rc) {
    static char out[64 << 20], err[1 << 16]; /* an interrupted run may hold thousands of queries */
    int rc = lb_test_run(args, out, sizeof out, err, sizeof err);
    if (rc != want_rc) fail_msg("exit %d, wanted %d: %s", rc, want_rc, err);
    json_t *j = json_loads(out, 0, NULL);
    if (j == NULL) fail_msg("not JSON: %.200s", out);
    return j;
}

static void test_infer_cli_offline_completes_every_query(void **state) {
    (void)state;
    const char *const args[] = {"infer",        "--model",     dir,
                                "--device",     "cpu",         "--synthetic",
                                "12",           "--input-len", "uniform:2:12",
                                "--max-tokens", "5",           "--ignore-eos",
                                "--max-seqs",   "4",           "--step-tokens",
                                "16",           "--db",        db,
                                "--json",       NULL};
    json_t *j = run_json(args, 0);
    assert_string_equal(json_string_value(json_object_get(j, "kind")), "infer");
    assert_string_equal(json_string_value(json_object_get(j, "status")), "ok");
    assert_true(metric(j, "completed") == 12);
    assert_true(metric(j, "failed") == 0);
    assert_true(metric(j, "output_tokens") == 60);
    assert_true(metric(j, "engine_kv_tokens") == 4 * 64);
    json_decref(j);
}

static void test_infer_cli_accuracy_scores_rouge(void **state) {
    (void)state;
    char data[256];
    snprintf(data, sizeof data, "%s/data.jsonl", dir);
    assert_true(lb_test_write_file(data, "{\"prompt\":\"hello world\",\"reference\":\"hello\"}\n"
                                         "{\"prompt\":\"the world\",\"reference\":\"world\"}\n"));
    const char *const args[] = {"infer",     "--model", dir,      "--device", "cpu",
                                "--dataset", data,      "--mode", "accuracy", "--max-tokens",
                                "4",         "--db",    db,       "--json",   NULL};
    json_t *j = run_json(args, 0);
    assert_true(metric(j, "completed") == 2);
    double r1 = metric(j, "rouge1");
    assert_true(r1 >= 0 && r1 <= 100);
    json_decref(j);
}

/* Synthetic prompts are sized in tokens of the model's tokenizer: --input-len fixed:7 sends
 * 7 tokens and the bos id, every query. */
static void test_infer_cli_synthetic_prompts_are_sized_in_tokens(void **state) {
    (void)state;
    const char *const args[] = {
        "infer",   "--model",      dir, "--device", "cpu", "--synthetic", "3", "--input-len",
        "fixed:7", "--max-tokens", "2", "--db",     db,    "--json",      NULL};
    json_t *j = run_json(args, 0);
    json_t *in =
        json_object_get(json_object_get(json_object_get(j, "series"), "input_tokens"), "values");
    assert_int_equal(json_array_size(in), 3);
    size_t i;
    json_t *v;
    json_array_foreach(in, i, v) {
        assert_true(json_number_value(v) == 8);
    }
    json_decref(j);
}

/* The token ids of an entry of mlperf_log_accuracy.json (data: little-endian int32s in
 * hex) into ids[0..cap); returns their count. */
static size_t entry_ids(json_t *e, uint32_t *ids, size_t cap) {
    const char *hex = json_string_value(json_object_get(e, "data"));
    assert_non_null(hex);
    size_t n = strlen(hex) / 8;
    assert_int_equal(strlen(hex), n * 8);
    assert_true(n <= cap);
    for (size_t k = 0; k < n; k++) {
        ids[k] = 0;
        for (int b = 0; b < 4; b++) {
            unsigned byte;
            assert_int_equal(sscanf(hex + 8 * k + 2 * b, "%2X", &byte), 1);
            ids[k] |= (uint32_t)byte << (8 * b);
        }
    }
    return n;
}

/* Accuracy mode's --out holds LoadGen's mlperf_log_accuracy.json with the engine's own
 * token ids (no tokenizer needed): one entry per sample, its qsl_idx, token_count the
 * tokens generated and data their little-endian int32s in hex, each id in the vocabulary. */
static void test_infer_cli_accuracy_log_holds_the_engines_token_ids(void **state) {
    (void)state;
    char out_dir[160], path[220];
    snprintf(out_dir, sizeof out_dir, "%s/acc", dir);
    const char *const args[] = {"infer",    "--model",
                                dir,        "--device",
                                "cpu",      "--synthetic",
                                "3",        "--input-len",
                                "fixed:4",  "--mode",
                                "accuracy", "--max-tokens",
                                "4",        "--ignore-eos",
                                "--out",    out_dir,
                                "--db",     db,
                                "--json",   NULL};
    json_decref(run_json(args, 0));
    snprintf(path, sizeof path, "%s/mlperf_log_accuracy.json", out_dir);
    json_error_t je;
    json_t *log = json_load_file(path, 0, &je);
    if (log == NULL) fail_msg("%s: %s", path, je.text);
    assert_int_equal(json_array_size(log), 3);
    int32_t vocab = lb_fixture_config().vocab_size;
    bool seen[3] = {false, false, false};
    size_t i;
    json_t *e;
    json_array_foreach(log, i, e) {
        json_int_t q = json_integer_value(json_object_get(e, "qsl_idx"));
        assert_true(q >= 0 && q < 3 && !seen[q]);
        seen[q] = true;
        assert_int_equal(json_integer_value(json_object_get(e, "token_count")), 4);
        uint32_t ids[8];
        assert_int_equal(entry_ids(e, ids, 8), 4);
        for (int k = 0; k < 4; k++)
            assert_true(ids[k] < (uint32_t)vocab);
    }
    json_decref(log);
}

/* Accuracy mode's generated.jsonl: a line a sample, each JSON with its text, though the
 * random-weight fixture's answers are random bytes of its byte-level vocabulary (a
 * character cut by --max-tokens, bytes that start none). Each text is its ids' bytes
 * (mlperf_log_accuracy.json's, decoded with the model's tokenizer) made UTF-8: a character
 * the end cuts short dropped, every other ill-formed byte '?'. */
static void test_infer_cli_generated_text_is_utf8_on_every_line(void **state) {
    (void)state;
    enum { N = 8, TOKENS = 9 };
    char out_dir[160], path[220], n_text[8], tokens[8];
    snprintf(out_dir, sizeof out_dir, "%s/gen", dir);
    snprintf(n_text, sizeof n_text, "%d", N);
    snprintf(tokens, sizeof tokens, "%d", TOKENS);
    const char *const args[] = {"infer",    "--model",
                                dir,        "--device",
                                "cpu",      "--synthetic",
                                n_text,     "--input-len",
                                "fixed:4",  "--mode",
                                "accuracy", "--max-tokens",
                                tokens,     "--ignore-eos",
                                "--out",    out_dir,
                                "--db",     db,
                                "--json",   NULL};
    json_decref(run_json(args, 0));
    snprintf(path, sizeof path, "%s/mlperf_log_accuracy.json", out_dir);
    json_error_t je;
    json_t *log = json_load_file(path, 0, &je);
    if (log == NULL) fail_msg("%s: %s", path, je.text);
    uint32_t ids[N][TOKENS];
    size_t i;
    json_t *e;
    json_array_foreach(log, i, e) {
        json_int_t q = json_integer_value(json_object_get(e, "qsl_idx"));
        assert_true(q >= 0 && q < N);
        assert_int_equal(entry_ids(e, ids[q], TOKENS), TOKENS);
    }
    json_decref(log);
    lb_tokenizer *tok = NULL;
    lb_err err;
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    assert_int_equal(lb_hf_tokenizer_load(&tok, path, NULL, &err), LB_OK);
    snprintf(path, sizeof path, "%s/generated.jsonl", out_dir);
    size_t bytes = 0;
    char *all = lb_test_read_file(path, &bytes);
    assert_non_null(all);
    int lines = 0, repaired = 0;
    for (char *line = all, *end; *line; line = end + 1, lines++) {
        end = strchr(line, '\n');
        assert_non_null(end);
        *end = '\0';
        json_t *j = json_loads(line, 0, &je);
        if (j == NULL) fail_msg("line %d is not JSON: %s: '%s'", lines + 1, je.text, line);
        assert_int_equal(json_integer_value(json_object_get(j, "sample")), lines);
        const char *text = json_string_value(json_object_get(j, "text"));
        assert_non_null(text);
        /* the ids' bytes, token by token: an id the tokenizer lacks (the fixture's unused
         * rows) adds none */
        char raw[TOKENS * 64];
        size_t n_raw = 0;
        for (int k = 0; k < TOKENS; k++) {
            char *piece = NULL;
            size_t pl = 0;
            if (lb_tokenizer_decode(tok, &ids[lines][k], 1, &piece, &pl, &err) != LB_OK) continue;
            assert_true(n_raw + pl <= sizeof raw);
            memcpy(raw + n_raw, piece, pl);
            n_raw += pl;
            free(piece);
        }
        n_raw = strnlen(raw, n_raw); /* a C string from here: to a NUL byte */
        /* the beginning of a character that the end cuts short is dropped */
        size_t want = n_raw;
        for (size_t k = n_raw > 3 ? n_raw - 3 : 0; k < n_raw && want == n_raw; k++)
            if (lb_utf8text_char_len(raw + k, n_raw - k) < 0) want = k;
        assert_int_equal(strlen(text), want);
        repaired += want < n_raw;
        /* the same bytes but '?' for one that starts no character (in the whole output: a
         * character that bytes after it break is no cut one) */
        for (size_t k = 0; k < want; k++)
            if (text[k] != raw[k]) {
                assert_true(text[k] == '?' && lb_utf8text_char_len(raw + k, n_raw - k) == 0);
                repaired++;
            }
        json_decref(j);
    }
    assert_int_equal(lines, N);
    assert_true(repaired > 0); /* the fixture's random bytes do need repair */
    free(all);
    lb_tokenizer_free(tok);
}

/* A --model or --dataset path that is not UTF-8 (a Latin-1 file name) is in the --json
 * result's config with '?' for its byte: the result is printed, not an empty output with
 * exit 0. */
static void test_infer_cli_json_names_paths_that_are_not_utf8(void **state) {
    (void)state;
    char sub[160], data[160];
    snprintf(sub, sizeof sub, "%s/caf\xe9", dir);
    snprintf(data, sizeof data, "%s/donn\xe9.jsonl", dir);
    assert_int_equal(mkdir(sub, 0700), 0);
    lb_model_config cfg = lb_fixture_config();
    lb_model m;
    assert_int_equal(lb_model_init(&m, &cfg, 1, 1, 3, NULL), LB_OK);
    lb_fixture_write_dir(sub, &cfg, m.params, false, false);
    lb_model_free(&m);
    assert_true(lb_test_write_file(data, "{\"prompt\":\"hello world\"}\n"));
    const char *const args[] = {"infer", "--model",      sub, "--device", "cpu", "--dataset",
                                data,    "--max-tokens", "2", "--db",     db,    "--json",
                                NULL};
    json_t *j = run_json(args, 0);
    json_t *config = json_object_get(j, "config");
    char want[160];
    snprintf(want, sizeof want, "%s/caf?", dir);
    assert_string_equal(json_string_value(json_object_get(config, "model")), want);
    snprintf(want, sizeof want, "%s/donn?.jsonl", dir);
    assert_string_equal(
        json_string_value(json_object_get(json_object_get(config, "dataset"), "path")), want);
    assert_true(metric(j, "completed") == 1);
    json_decref(j);
}

/* The engine's counters are the timed queries' alone: an Offline run of 4 prompts of 5
 * tokens and 3 tokens each is one prefill step and two decode steps, with or without 3
 * warm-up queries before it (their 3 steps were counted too). */
static void test_infer_cli_engine_steps_leave_the_warmup_out(void **state) {
    (void)state;
    const char *const args[] = {"infer",    "--model",
                                dir,        "--device",
                                "cpu",      "--synthetic",
                                "4",        "--input-len",
                                "fixed:5",  "--max-tokens",
                                "3",        "--ignore-eos",
                                "--warmup", "3",
                                "--db",     db,
                                "--json",   NULL};
    json_t *j = run_json(args, 0);
    assert_true(metric(j, "completed") == 4);
    assert_true(metric(j, "engine_steps") == 3);
    assert_true(metric(j, "engine_prefill_steps") == 1);
    assert_true(metric(j, "engine_decode_steps") == 2);
    json_decref(j);
}

/* --search-qps is load's search (cli/loadrun.h) with the engine answering: every trial is
 * a stored Server run of one "search:" group, and the document names the answer. */
static void test_infer_cli_search_runs_trials_as_one_group(void **state) {
    (void)state;
    const char *const args[] = {"infer",
                                "--model",
                                dir,
                                "--device",
                                "cpu",
                                "--synthetic",
                                "4",
                                "--input-len",
                                "fixed:4",
                                "--max-tokens",
                                "2",
                                "--ignore-eos",
                                "--scenario",
                                "server",
                                "--search-qps",
                                "20",
                                "--search-trials",
                                "2",
                                "--min-duration",
                                "0.2",
                                "--ttft-limit-ms",
                                "60000",
                                "--tpot-limit-ms",
                                "60000",
                                "--db",
                                db,
                                "--json",
                                NULL};
    char out[1 << 16], err[4096];
    int rc = lb_test_run(args, out, sizeof out, err, sizeof err);
    assert_true(rc == 0 || rc == 3); /* 3: a trial too short for early stopping */
    /* 4 queries a trial under p99 bounds: the warning names the 459 early stopping needs */
    assert_non_null(strstr(err, "fewer than the 459 that early stopping needs"));
    json_t *j = json_loads(out, 0, NULL);
    if (j == NULL) fail_msg("not JSON: %.200s", out);
    const char *group = json_string_value(json_object_get(j, "search"));
    assert_non_null(group);
    assert_true(strncmp(group, "search:", 7) == 0);
    json_t *runs = json_object_get(j, "runs");
    assert_int_equal(json_array_size(runs), 2);
    size_t i;
    json_t *r;
    json_array_foreach(runs, i, r) {
        assert_string_equal(json_string_value(json_object_get(r, "kind")), "infer");
        json_t *tags = json_object_get(r, "tags");
        assert_string_equal(json_string_value(json_array_get(tags, 0)), group);
        double q = json_number_value(json_object_get(json_object_get(r, "verdict"), "target_qps"));
        assert_true(q == 20 || q == 40 || q == 10); /* doubled or halved from 20 */
        /* each trial counts its own steps, though one engine runs them all */
        assert_true(metric(r, "engine_steps") > 0);
        assert_true(metric(r, "engine_steps") ==
                    metric(r, "engine_prefill_steps") + metric(r, "engine_decode_steps"));
    }
    json_decref(j);
}

static void test_infer_cli_a_request_too_long_fails_alone(void **state) {
    (void)state;
    const char *const args[] = {"infer",
                                "--model",
                                dir,
                                "--device",
                                "cpu",
                                "--synthetic",
                                "6",
                                "--input-len",
                                "uniform:2:60",
                                "--max-tokens",
                                "30",
                                "--ignore-eos",
                                "--max-failed",
                                "6",
                                "--db",
                                db,
                                "--json",
                                NULL};
    json_t *j = run_json(args, 3); /* completed, INVALID: failed queries */
    double failed = metric(j, "failed"), done = metric(j, "completed");
    assert_true(failed >= 1);
    assert_true(done >= 1);
    assert_true(failed + done == 6);
    assert_true(metric(j, "valid") == 0);
    json_decref(j);
}

static void test_infer_cli_refuses_samples_that_cannot_fit_before_running(void **state) {
    (void)state;
    char fresh[128], out[4096], err[4096];
    snprintf(fresh, sizeof fresh, "%s/unfit.db", dir);
    const char *const args[] = {"infer",       "--model", dir,           "--device", "cpu",
                                "--synthetic", "3",       "--input-len", "fixed:4",  "--max-tokens",
                                "100",         "--db",    fresh,         NULL};
    assert_int_equal(lb_test_run(args, out, sizeof out, err, sizeof err), 2);
    assert_string_equal(out, "");
    if (!strstr(err, "3 of 3 samples cannot fit the engine's context of 64 tokens") ||
        !strstr(err, "--max-ctx") || strchr(err, '\n') != err + strlen(err) - 1)
        fail_msg("stderr: %s", err);
    struct stat st;
    assert_int_not_equal(stat(fresh, &st), 0); /* nothing ran, nothing was stored */
}

/* The engine puts the bos id before each tokenized prompt: 60 tokens and 4 to generate
 * cannot fit the context of 64 (every query failed at its turn, exit 1), 59 and 4 do. */
static void test_infer_cli_counts_the_bos_id_in_what_must_fit(void **state) {
    (void)state;
    char fresh[128], out[4096], err[4096];
    snprintf(fresh, sizeof fresh, "%s/bos.db", dir);
    const char *const over[] = {"infer",       "--model", dir,           "--device", "cpu",
                                "--synthetic", "3",       "--input-len", "fixed:60", "--max-tokens",
                                "4",           "--db",    fresh,         NULL};
    assert_int_equal(lb_test_run(over, out, sizeof out, err, sizeof err), 2);
    if (!strstr(err, "3 of 3 samples cannot fit the engine's context of 64 tokens (sample 0: a "
                     "prompt of 61 with the bos id and 4 to generate)"))
        fail_msg("stderr: %s", err);
    struct stat st;
    assert_int_not_equal(stat(fresh, &st), 0);
    const char *const fits[] = {"infer",    "--model",
                                dir,        "--device",
                                "cpu",      "--synthetic",
                                "3",        "--input-len",
                                "fixed:59", "--max-tokens",
                                "4",        "--ignore-eos",
                                "--db",     db,
                                "--json",   NULL};
    json_t *j = run_json(fits, 0);
    assert_true(metric(j, "completed") == 3);
    assert_true(metric(j, "failed") == 0);
    json_decref(j);
}

/* The cnn template around article, tokenized by tok: the bos id and the prompt's ids into
 * ids[0..cap), their count returned. */
static size_t cnn_prompt_ids(const lb_tokenizer *tok, const char *article, int32_t *ids,
                             size_t cap) {
    char prompt[1024];
    const char *t = LB_CNN_PROMPT_TEMPLATE, *at = strstr(t, "{input}");
    snprintf(prompt, sizeof prompt, "%.*s%s%s", (int)(at - t), t, article, at + 7);
    uint32_t *enc = NULL;
    size_t n = 0;
    lb_err err;
    assert_int_equal(lb_tokenizer_encode(tok, prompt, strlen(prompt), &enc, &n, &err), LB_OK);
    assert_true(n + 1 <= cap);
    ids[0] = LB_FIXTURE_FIRST_SPECIAL; /* <|begin_of_text|>, the fixture's bos id */
    for (size_t k = 0; k < n; k++)
        ids[k + 1] = (int32_t)enc[k];
    free(enc);
    return n + 1;
}

/* A cnn_eval record: the article and, when ids is not NULL, tok_input ids[0..n). */
static void cnn_record(FILE *f, const char *article, const int32_t *ids, size_t n) {
    fprintf(f, "{\"input\":\"%s\"", article);
    if (ids != NULL) {
        fprintf(f, ",\"tok_input\":[");
        for (size_t k = 0; k < n; k++)
            fprintf(f, "%s%d", k ? "," : "", ids[k]);
        fprintf(f, "]");
    }
    fprintf(f, ",\"output\":\"hello\"}");
}

/* A cnn_eval record without tok_input is tokenized by llmbench, which puts the bos id
 * before it; one with tok_input counts its ids, the bos id among them. With a model whose
 * context is the cnn template around "hello world" with the bos id and 128 to generate, a
 * record of that text fits beside one whose tok_input is as long, and one token more
 * (" worldx") is refused before the run, not failed at its turn (exit 1). */
static void test_infer_cli_counts_the_bos_id_of_cnn_records_without_tok_input(void **state) {
    (void)state;
    char path[256], ctx_dir[160], fresh[160], fit[160], over[160], err[4096];
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    lb_tokenizer *tok = NULL;
    lb_err lerr;
    assert_int_equal(lb_hf_tokenizer_load(&tok, path, NULL, &lerr), LB_OK);
    int32_t ids[512], longer[512];
    size_t n = cnn_prompt_ids(tok, "hello world", ids, 512);
    assert_int_equal(cnn_prompt_ids(tok, "hello worldx", longer, 512), n + 1);
    lb_tokenizer_free(tok);
    snprintf(ctx_dir, sizeof ctx_dir, "%s/cnn-ctx", dir);
    assert_int_equal(mkdir(ctx_dir, 0700), 0);
    lb_model_config cfg = lb_fixture_config();
    cfg.max_seq = (int32_t)n + LB_CNN_MAX_TOKENS; /* just the fitting record */
    lb_model m;
    assert_int_equal(lb_model_init(&m, &cfg, 1, 1, 3, NULL), LB_OK);
    lb_fixture_write_dir(ctx_dir, &cfg, m.params, false, false);
    lb_model_free(&m);
    snprintf(fit, sizeof fit, "%s/cnn-fit.json", dir);
    snprintf(over, sizeof over, "%s/cnn-over.json", dir);
    FILE *f = fopen(fit, "w");
    fprintf(f, "[");
    cnn_record(f, "hello world", ids, n);
    fprintf(f, ",");
    cnn_record(f, "hello world", NULL, 0);
    fprintf(f, "]");
    fclose(f);
    f = fopen(over, "w");
    fprintf(f, "[");
    cnn_record(f, "hello world", ids, n);
    fprintf(f, ",");
    cnn_record(f, "hello worldx", NULL, 0);
    fprintf(f, "]");
    fclose(f);
    snprintf(fresh, sizeof fresh, "%s/cnn-bos.db", dir);
    const char *const refused[] = {"infer",     "--model", ctx_dir, "--device", "cpu",
                                   "--dataset", over,      "--db",  fresh,      NULL};
    assert_int_equal(lb_test_run(refused, NULL, 0, err, sizeof err), 2);
    char want[256];
    snprintf(want, sizeof want,
             "1 of 2 samples cannot fit the engine's context of %d tokens (sample 1: a prompt of "
             "%zu with the bos id and %d to generate)",
             cfg.max_seq, n + 1, LB_CNN_MAX_TOKENS);
    if (strstr(err, want) == NULL) fail_msg("stderr: %s", err);
    struct stat st;
    assert_int_not_equal(stat(fresh, &st), 0);
    const char *const fits[] = {"infer", "--model",      ctx_dir, "--device", "cpu",    "--dataset",
                                fit,     "--ignore-eos", "--db",  db,         "--json", NULL};
    json_t *j = run_json(fits, 0);
    assert_true(metric(j, "completed") == 2);
    assert_true(metric(j, "failed") == 0);
    assert_true(metric(j, "output_tokens") == 2 * LB_CNN_MAX_TOKENS);
    json_decref(j);
}

/* Runs args with a fresh database; expects exit 2, one line on stderr containing want,
 * nothing on stdout and nothing stored (the database never made). */
static void expect_refused_before_running(const char *const *args, const char *fresh,
                                          const char *want) {
    char out[4096], err[4096];
    int rc = lb_test_run(args, out, sizeof out, err, sizeof err);
    if (rc != 2 || strstr(err, want) == NULL || strchr(err, '\n') != err + strlen(err) - 1)
        fail_msg("exit %d, stderr: %s", rc, err);
    assert_string_equal(out, "");
    struct stat st;
    assert_int_not_equal(stat(fresh, &st), 0);
}

/* --max-failed counts queries, and a sample that cannot fit fails every query made of it:
 * 1 of 4 samples too long, sent twice by --min-queries 8, fails 2 queries, more than
 * --max-failed 1, so the run is refused before it begins (it ran, and failed at the end:
 * the check compared the 1 sample with 1); --max-failed 2 lets it run, its 2 queries failed.
 * A run whose every sample is too long is refused whatever --max-failed allows (it ran and
 * completed none). */
static void test_infer_cli_max_failed_counts_the_queries_unfit_samples_become(void **state) {
    (void)state;
    char data[128], fresh[128];
    snprintf(data, sizeof data, "%s/one-unfit.jsonl", dir);
    snprintf(fresh, sizeof fresh, "%s/unfit-queries.db", dir);
    assert_true(lb_test_write_file(data, "{\"prompt\":\"hello world\"}\n"
                                         "{\"prompt\":\"the world\"}\n"
                                         "{\"prompt\":\"hello\"}\n"
                                         "{\"prompt\":\"world\",\"max_tokens\":100}\n"));
    const char *const twice[] = {
        "infer", "--model",      dir,    "--device",      "cpu", "--dataset",
        data,    "--max-tokens", "3",    "--min-queries", "8",   "--max-failed",
        "1",     "--ignore-eos", "--db", fresh,           NULL};
    expect_refused_before_running(twice, fresh,
                                  "1 of 4 samples cannot fit the engine's context of 64 tokens "
                                  "(sample 3: a prompt of 4 with the bos id and 100 to generate), "
                                  "so at least 2 of the run's queries would fail, more than "
                                  "--max-failed 1: give");
    const char *const allowed[] = {"infer",  "--model",
                                   dir,      "--device",
                                   "cpu",    "--dataset",
                                   data,     "--max-tokens",
                                   "3",      "--min-queries",
                                   "8",      "--max-failed",
                                   "2",      "--ignore-eos",
                                   "--db",   db,
                                   "--json", NULL};
    json_t *j = run_json(allowed, 3); /* completed, INVALID: failed queries */
    assert_true(metric(j, "completed") == 6);
    assert_true(metric(j, "failed") == 2);
    json_decref(j);
    const char *const none[] = {
        "infer",    "--model",      dir, "--device",     "cpu", "--synthetic", "3",   "--input-len",
        "fixed:60", "--max-tokens", "4", "--max-failed", "3",   "--db",        fresh, NULL};
    expect_refused_before_running(none, fresh,
                                  "3 of 3 samples cannot fit the engine's context of 64 tokens "
                                  "(sample 0: a prompt of 61 with the bos id and 4 to generate), "
                                  "so no query could complete");
}

/* Options that cannot work together are refused before anything runs: prompts longer
 * than a KV cache smaller than the context (every query would fail at its turn), --chat
 * or a data file without token counts when --random has no tokenizer, and --top-k or
 * --top-p without a temperature to sample at. */
static void test_infer_cli_refuses_options_that_cannot_work_together(void **state) {
    (void)state;
    char fresh[128], data[128];
    snprintf(fresh, sizeof fresh, "%s/contra.db", dir);
    snprintf(data, sizeof data, "%s/untokenized.jsonl", dir);
    assert_true(lb_test_write_file(data, "{\"prompt\":\"hello world\"}\n"));
    const char *const cache[] = {
        "infer",    "--model",      dir, "--device",    "cpu", "--synthetic", "3",   "--input-len",
        "fixed:20", "--max-tokens", "4", "--kv-tokens", "16",  "--db",        fresh, NULL};
    expect_refused_before_running(cache, fresh,
                                  "3 of 3 samples cannot fit the engine's whole KV cache of 16 "
                                  "tokens (sample 0: a prompt of 21 with the bos id and 4 to "
                                  "generate), so no query could complete: give a "
                                  "smaller --max-tokens or --output-len, shorter prompts, or a "
                                  "larger --kv-tokens");
    const char *const chat[] = {"infer", "--random", "llama-tiny", "--device", "cpu", "--synthetic",
                                "2",     "--chat",   "--db",       fresh,      NULL};
    expect_refused_before_running(chat, fresh, "--random has no tokenizer");
    const char *const untok[] = {"infer",     "--random", "llama-tiny", "--device", "cpu",
                                 "--dataset", data,       "--db",       fresh,      NULL};
    expect_refused_before_running(untok, fresh, "sample 0 has no token count");
    const char *const topk[] = {"infer", "--model", dir, "--device", "cpu", "--synthetic",
                                "2",     "--top-k", "5", "--db",     fresh, NULL};
    expect_refused_before_running(topk, fresh, "--top-k cuts what sampling draws from");
    const char *const topp[] = {"infer", "--model", dir,   "--device", "cpu", "--synthetic",
                                "2",     "--top-p", "0.9", "--db",     fresh, NULL};
    expect_refused_before_running(topp, fresh, "--temperature 0 (the default) decodes greedily");
    /* a temperature above 0 that is 0 as the sampler's float */
    const char *const tiny[] = {"infer",       "--model", dir,       "--device", "cpu",
                                "--synthetic", "2",       "--top-k", "5",        "--temperature",
                                "1e-50",       "--db",    fresh,     NULL};
    expect_refused_before_running(tiny, fresh, "--top-k cuts what sampling draws from");
}

/* --percentiles with a trailing comma or a level given twice is a usage error naming
 * the option and the text, before anything runs (it used to pass as "75"). */
static void test_infer_cli_refuses_percentiles_with_an_empty_or_repeated_level(void **state) {
    (void)state;
    char fresh[128];
    snprintf(fresh, sizeof fresh, "%s/pctl.db", dir);
    const char *const trailing[] = {"infer", "--model",     dir,   "--device",
                                    "cpu",   "--synthetic", "2",   "--percentiles",
                                    "75,",   "--db",        fresh, NULL};
    expect_refused_before_running(trailing, fresh,
                                  "--percentiles expects up to 8 different levels between 0 and "
                                  "100 separated by commas (\"75,99.5\"), got '75,'");
    const char *const twice[] = {"infer",      "--model",     dir,   "--device",
                                 "cpu",        "--synthetic", "2",   "--percentiles",
                                 "75,99.5,75", "--db",        fresh, NULL};
    expect_refused_before_running(twice, fresh, "got '75,99.5,75'");
}

/* --slo with a key given twice or an empty item is refused (the last value used to win
 * silently; "ttft_ms=1," passed); a long
 * --slo is read whole (it was cut at 127 bytes: ttft_ms=0..01.5 became 1). */
static void test_infer_cli_refuses_a_repeated_slo_key_and_reads_a_long_one_whole(void **state) {
    (void)state;
    char fresh[128];
    snprintf(fresh, sizeof fresh, "%s/slo.db", dir);
    const char *const twice[] = {"infer",
                                 "--model",
                                 dir,
                                 "--device",
                                 "cpu",
                                 "--synthetic",
                                 "2",
                                 "--input-len",
                                 "fixed:4",
                                 "--max-tokens",
                                 "2",
                                 "--slo",
                                 "ttft_ms=1,ttft_ms=3",
                                 "--db",
                                 fresh,
                                 NULL};
    expect_refused_before_running(twice, fresh, "--slo 'ttft_ms=1,ttft_ms=3' gives ttft_ms twice");
    const char *const empty[] = {"infer", "--model", dir,          "--device", "cpu", "--synthetic",
                                 "2",     "--slo",   "ttft_ms=1,", "--db",     fresh, NULL};
    expect_refused_before_running(empty, fresh, "without empty items, got 'ttft_ms=1,'");
    char slo[200] = "ttft_ms=";
    memset(slo + 8, '0', 118);
    snprintf(slo + 126, sizeof slo - 126, "1.5,tpot_ms=2");
    const char *const lng[] = {"infer",       "--model", dir,           "--device", "cpu",
                               "--synthetic", "2",       "--input-len", "fixed:4",  "--max-tokens",
                               "2",           "--slo",   slo,           "--db",     db,
                               "--json",      NULL};
    json_t *j = run_json(lng, 0);
    json_t *c = json_object_get(json_object_get(j, "config"), "constraints");
    assert_float_equal(json_number_value(json_object_get(c, "slo_ttft_ms")), 1.5, 0);
    assert_float_equal(json_number_value(json_object_get(c, "slo_tpot_ms")), 2, 0);
    json_decref(j);
}

/* A --percentiles level whose metric name is a fixed level's (99.0000001 is p99) or another
 * given level's is refused: its figures overwrote ttft_p99_ms and the like. */
static void test_infer_cli_refuses_percentiles_whose_name_is_taken(void **state) {
    (void)state;
    char fresh[128];
    snprintf(fresh, sizeof fresh, "%s/pname.db", dir);
    const char *const fixed[] = {"infer",      "--model",      dir,   "--device",
                                 "cpu",        "--synthetic",  "2",   "--input-len",
                                 "fixed:4",    "--max-tokens", "2",   "--percentiles",
                                 "99.0000001", "--db",         fresh, NULL};
    expect_refused_before_running(fixed, fresh,
                                  "--percentiles '99.0000001': 99.0000001 is reported as p99, the "
                                  "name of the fixed level 99");
    const char *const given[] = {"infer",         "--model",      dir,   "--device",
                                 "cpu",           "--synthetic",  "2",   "--input-len",
                                 "fixed:4",       "--max-tokens", "2",   "--percentiles",
                                 "75,75.0000001", "--db",         fresh, NULL};
    expect_refused_before_running(given, fresh,
                                  "is reported as p75, the name of the given level 75");
}

/* A plan of more queries than one run may hold is refused at once, naming the options
 * (it filled memory, then said "out of memory for the query schedule"). */
static void test_infer_cli_refuses_a_schedule_too_big_to_hold(void **state) {
    (void)state;
    char fresh[128];
    snprintf(fresh, sizeof fresh, "%s/plan.db", dir);
    const char *const timed[] = {
        "infer", "--model",        dir,       "--device",     "cpu", "--synthetic",
        "2",     "--input-len",    "fixed:4", "--max-tokens", "2",   "--qps",
        "1e6",   "--min-duration", "1e6",     "--db",         fresh, NULL};
    expect_refused_before_running(timed, fresh,
                                  "--qps 1e+06 x --min-duration 1e+06 s plans about 1e+12 "
                                  "queries, more than the 100000000 one run may hold in memory");
    const char *const counted[] = {"infer",     "--model",      dir,   "--device",
                                   "cpu",       "--synthetic",  "2",   "--input-len",
                                   "fixed:4",   "--max-tokens", "2",   "--min-queries",
                                   "200000000", "--db",         fresh, NULL};
    expect_refused_before_running(counted, fresh,
                                  "--min-queries 200000000 plans more queries than the 100000000");
}

/* The seeds of the config files are the ones mlperf_log_summary.txt's "Test Parameters
 * Used" shows (qsl_rng_seed was 0 whatever was used), as the detail log does. */
static void test_infer_cli_summary_carries_the_config_files_seeds(void **state) {
    (void)state;
    char conf[160], out_dir[160], path[220];
    snprintf(conf, sizeof conf, "%s/seeds.conf", dir);
    snprintf(out_dir, sizeof out_dir, "%s/seeds", dir);
    assert_true(lb_test_write_file(conf, "*.*.qsl_rng_seed = 42\n"
                                         "*.*.sample_index_rng_seed = 43\n"
                                         "*.*.schedule_rng_seed = 44\n"));
    const char *const args[] = {
        "infer",   "--model",      dir, "--device",    "cpu", "--synthetic", "2",     "--input-len",
        "fixed:4", "--max-tokens", "2", "--user-conf", conf,  "--out",       out_dir, "--db",
        db,        "--json",       NULL};
    json_decref(run_json(args, 0));
    snprintf(path, sizeof path, "%s/mlperf_log_summary.txt", out_dir);
    char *text = lb_test_read_file(path, NULL);
    assert_non_null(text);
    if (strstr(text, "\nqsl_rng_seed : 42\n") == NULL ||
        strstr(text, "\nsample_index_rng_seed : 43\n") == NULL ||
        strstr(text, "\nschedule_rng_seed : 44\n") == NULL)
        fail_msg("%s", text);
    free(text);
}

/* performance_sample_count_override is LoadGen's performance sample set: performance mode
 * draws from that many samples (chosen with the QSL seed), and the summary says so. */
static void test_infer_cli_performance_sample_count_override_sets_the_sample_set(void **state) {
    (void)state;
    char conf[160], out_dir[160], path[220];
    snprintf(conf, sizeof conf, "%s/count.conf", dir);
    snprintf(out_dir, sizeof out_dir, "%s/count", dir);
    assert_true(lb_test_write_file(conf, "*.*.performance_sample_count_override = 2\n"));
    const char *const args[] = {
        "infer", "--model",       dir,  "--device",    "cpu",     "--synthetic",
        "6",     "--min-queries", "8",  "--input-len", "fixed:4", "--max-tokens",
        "2",     "--user-conf",   conf, "--out",       out_dir,   "--db",
        db,      "--json",        NULL};
    json_t *j = run_json(args, 0);
    assert_int_equal(json_integer_value(
                         json_object_get(json_object_get(j, "config"), "performance_sample_count")),
                     2);
    assert_true(metric(j, "completed") == 8);
    json_decref(j);
    snprintf(path, sizeof path, "%s/requests.jsonl", out_dir);
    char *text = lb_test_read_file(path, NULL);
    assert_non_null(text);
    bool seen[6] = {false};
    int lines = 0, distinct = 0;
    for (char *line = text; *line; lines++) {
        json_t *q = json_loads(line, JSON_DISABLE_EOF_CHECK, NULL);
        assert_non_null(q);
        int k = (int)json_number_value(json_object_get(q, "sample"));
        assert_true(k >= 0 && k < 6);
        distinct += !seen[k];
        seen[k] = true;
        json_decref(q);
        line = strchr(line, '\n');
        assert_non_null(line);
        line++;
    }
    free(text);
    assert_int_equal(lines, 8);
    assert_int_equal(distinct, 2);
    snprintf(path, sizeof path, "%s/mlperf_log_summary.txt", out_dir);
    text = lb_test_read_file(path, NULL);
    assert_non_null(strstr(text, "\nperformance_sample_count : 2\n"));
    free(text);
}

#ifndef LB_HAVE_CUDA
/* The engine on a GPU, the default, in a build without CUDA: a usage error saying what to
 * use instead, before anything is read (a CUDA build has no such case). */
static void test_infer_cli_gpu_without_cuda_is_a_usage_error(void **state) {
    (void)state;
    char err[4096];
    const char *const dflt[] = {"infer", "--random", "llama-tiny", "--synthetic",
                                "1",     "--db",     db,           NULL};
    assert_int_equal(lb_test_run(dflt, NULL, 0, err, sizeof err), 2);
    if (strstr(err, "(--device gpu, the default) needs CUDA, and this llmbench was built without "
                    "it: use --device cpu") == NULL)
        fail_msg("stderr: %s", err);
    const char *const serve[] = {"serve", "--model", dir, "--device", "gpu", NULL};
    assert_int_equal(lb_test_run(serve, NULL, 0, err, sizeof err), 2);
    if (strstr(err, "llmbench serve: the GPU engine (--device gpu, the default) needs CUDA") ==
        NULL)
        fail_msg("stderr: %s", err);
}
#endif

static void test_infer_cli_refuses_a_bad_directory_with_exit_2(void **state) {
    (void)state;
    char bad[128], err[4096];
    snprintf(bad, sizeof bad, "%s/nothing", dir);
    const char *const args[] = {"infer",       "--model", bad,    "--device", "cpu",
                                "--synthetic", "1",       "--db", db,         NULL};
    assert_int_equal(lb_test_run(args, NULL, 0, err, sizeof err), 2);
    assert_non_null(strstr(err, "no config.json"));
    const char *const both[] = {"infer",       "--model", dir,    "--random", "llama-tiny",
                                "--synthetic", "1",       "--db", db,         NULL};
    assert_int_equal(lb_test_run(both, NULL, 0, err, sizeof err), 2);
    assert_non_null(strstr(err, "exactly one of --model"));
    /* a directory without a tokenizer: the engine needs one */
    char notok[128], tpath[160];
    snprintf(notok, sizeof notok, "%s/notok", dir);
    assert_int_equal(mkdir(notok, 0700), 0);
    lb_model_config cfg = lb_fixture_config();
    lb_model m;
    assert_int_equal(lb_model_init(&m, &cfg, 1, 1, 3, NULL), LB_OK);
    lb_fixture_write_dir(notok, &cfg, m.params, false, false);
    lb_model_free(&m);
    snprintf(tpath, sizeof tpath, "%s/tokenizer.json", notok);
    assert_int_equal(remove(tpath), 0);
    const char *const none[] = {"infer",       "--model", notok,  "--device", "cpu",
                                "--synthetic", "1",       "--db", db,         NULL};
    assert_int_equal(lb_test_run(none, NULL, 0, err, sizeof err), 2);
    assert_non_null(strstr(err, "no tokenizer.json or original/tokenizer.model"));
}

static void test_infer_cli_sigint_drains_and_stores_an_interrupted_run(void **state) {
    (void)state;
    char out_path[160];
    snprintf(out_path, sizeof out_path, "%s/stdout", dir);
    pid_t pid = fork();
    if (pid == 0) {
        int fd = open(out_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        dup2(fd, 1);
        dup2(fd, 2);
        execl(LB_TEST_BIN, LB_TEST_BIN, "infer", "--model", dir, "--device", "cpu", "--scenario",
              "singlestream", "--synthetic", "5000", "--input-len", "fixed:2", "--max-tokens", "16",
              "--ignore-eos", "--drain", "30", "--db", db, (char *)NULL);
        _exit(127);
    }
    usleep(2500 * 1000);
    assert_int_equal(kill(pid, SIGINT), 0);
    int status = 0;
    waitpid(pid, &status, 0);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 130);
    const char *const args[] = {"results", "export", "--format", "json", "--db", db, NULL};
    json_t *all = run_json(args, 0), *last = NULL, *r;
    size_t i;
    json_array_foreach(all, i, r) {
        if (strcmp(json_string_value(json_object_get(r, "status")), "interrupted") == 0) last = r;
    }
    assert_non_null(last);
    assert_string_equal(json_string_value(json_object_get(last, "kind")), "infer");
    /* the query in flight was drained: every issued query completed */
    assert_true(metric(last, "completed") >= 1);
    assert_true(metric(last, "failed") == 0);
    json_decref(all);
}

/* A signal during --warmup ends the run before any timed query: it is stored interrupted
 * with no engine step of its own (the warm-up queries' steps were stored as the run's). */
static void test_infer_cli_sigint_in_the_warmup_stores_no_warmup_steps(void **state) {
    (void)state;
    char out_path[160], fresh[160];
    snprintf(out_path, sizeof out_path, "%s/warmup-stdout", dir);
    snprintf(fresh, sizeof fresh, "%s/warmup-sigint.db", dir);
    pid_t pid = fork();
    if (pid == 0) {
        int fd = open(out_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        dup2(fd, 1);
        dup2(fd, 2);
        execl(LB_TEST_BIN, LB_TEST_BIN, "infer", "--model", dir, "--device", "cpu", "--scenario",
              "singlestream", "--synthetic", "4", "--input-len", "fixed:2", "--max-tokens", "16",
              "--ignore-eos", "--warmup", "1000000", "--drain", "30", "--db", fresh, (char *)NULL);
        _exit(127);
    }
    /* the run is begun once the engine and the prompts are ready; the warm-up follows */
    const char *const list[] = {"results", "list", "--db", fresh, "--json", NULL};
    static char listed[1 << 16];
    bool begun = false;
    for (int i = 0; i < 600 && !begun; i++) {
        usleep(100 * 1000);
        begun = access(fresh, F_OK) == 0 &&
                lb_test_run(list, listed, sizeof listed, NULL, 0) == 0 &&
                strstr(listed, "\"running\"") != NULL;
    }
    assert_true(begun);
    usleep(500 * 1000);
    assert_int_equal(kill(pid, SIGINT), 0);
    int status = 0;
    waitpid(pid, &status, 0);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 130);
    const char *const args[] = {"results", "export", "--format", "json", "--db", fresh, NULL};
    json_t *all = run_json(args, 0);
    assert_int_equal(json_array_size(all), 1);
    json_t *r = json_array_get(all, 0);
    assert_string_equal(json_string_value(json_object_get(r, "status")), "interrupted");
    assert_true(metric(r, "completed") == 0);
    assert_true(metric(r, "engine_steps") == 0);
    assert_true(metric(r, "engine_prefill_steps") == 0);
    assert_true(metric(r, "engine_decode_steps") == 0);
    assert_true(metric(r, "engine_decode_seconds") == 0);
    json_decref(all);
}

/* The engine's sampling options are recorded as given: --top-p 0.9 and --temperature 0.7
 * read 0.9 and 0.7 in the config, as the load generator's temperature does (they read
 * 0.8999999761581421 and 0.699999988079071, the sampler's floats widened). */
static void test_infer_cli_records_sampling_options_as_given(void **state) {
    (void)state;
    const char *const args[] = {
        "infer",   "--model",      dir, "--device",      "cpu", "--synthetic", "2",   "--input-len",
        "fixed:4", "--max-tokens", "2", "--temperature", "0.7", "--top-p",     "0.9", "--top-k",
        "5",       "--db",         db,  "--json",        NULL};
    json_t *j = run_json(args, 0);
    json_t *config = json_object_get(j, "config"), *engine = json_object_get(config, "engine");
    assert_true(json_number_value(json_object_get(engine, "top_p")) == 0.9);
    assert_true(json_number_value(json_object_get(engine, "temperature")) == 0.7);
    assert_true(json_number_value(json_object_get(config, "temperature")) == 0.7);
    assert_int_equal(json_integer_value(json_object_get(engine, "top_k")), 5);
    json_decref(j);
}

/* A signal that came before t0 (while the engine loaded, say) stops lb_infer_run before
 * it makes the prompts and warms the engine up: interrupted, with that reason and nothing
 * summarized (it prepared everything, then summarized a run of no query). */
static void test_infer_cli_signal_before_the_run_stops_the_preparation(void **state) {
    (void)state;
    lb_engine_opt eo = LB_ENGINE_OPT_DEFAULT;
    eo.model_dir = dir;
    eo.device = "cpu";
    lb_engine_setup es;
    lb_err err = {""};
    assert_int_equal(lb_engine_opt_open(&eo, NULL, &es, &err), LB_OK);
    const char data[] = "{\"prompt\":\"hello world\"}\n";
    lb_dataset ds;
    assert_int_equal(lb_dataset_parse_jsonl(data, sizeof data - 1, "data", &ds, &err), LB_OK);
    lb_infer_params ip = {.lg = lb_loadgen_default_params(),
                          .engine = es.engine,
                          .tok = es.tok,
                          .bos_id = es.bos_id,
                          .eos_ids = es.eos_ids,
                          .n_eos = es.n_eos,
                          .sampling = {.top_p = 1, .seed = 1}};
    ip.lg.max_tokens = 2;
    lb_result *r = lb_result_new("infer", "early");
    lb_loadgen_report rep;
    lb_signals_raise(SIGINT);
    lb_status st = lb_infer_run(&ip, &ds, r, &rep, &err);
    lb_signals_reset();
    assert_int_equal(st, LB_ERR_INTERRUPTED);
    assert_false(rep.summarized);
    assert_string_equal(err.msg, "interrupted before the run began");
    lb_loadgen_report_free(&rep);
    lb_result_free(r);
    lb_dataset_free(&ds);
    lb_engine_opt_close(&es);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_infer_cli_offline_completes_every_query),
        cmocka_unit_test(test_infer_cli_accuracy_scores_rouge),
        cmocka_unit_test(test_infer_cli_synthetic_prompts_are_sized_in_tokens),
        cmocka_unit_test(test_infer_cli_accuracy_log_holds_the_engines_token_ids),
        cmocka_unit_test(test_infer_cli_generated_text_is_utf8_on_every_line),
        cmocka_unit_test(test_infer_cli_json_names_paths_that_are_not_utf8),
        cmocka_unit_test(test_infer_cli_search_runs_trials_as_one_group),
        cmocka_unit_test(test_infer_cli_engine_steps_leave_the_warmup_out),
        cmocka_unit_test(test_infer_cli_a_request_too_long_fails_alone),
        cmocka_unit_test(test_infer_cli_refuses_samples_that_cannot_fit_before_running),
        cmocka_unit_test(test_infer_cli_max_failed_counts_the_queries_unfit_samples_become),
        cmocka_unit_test(test_infer_cli_counts_the_bos_id_in_what_must_fit),
        cmocka_unit_test(test_infer_cli_counts_the_bos_id_of_cnn_records_without_tok_input),
        cmocka_unit_test(test_infer_cli_refuses_options_that_cannot_work_together),
        cmocka_unit_test(test_infer_cli_refuses_percentiles_with_an_empty_or_repeated_level),
        cmocka_unit_test(test_infer_cli_refuses_a_repeated_slo_key_and_reads_a_long_one_whole),
        cmocka_unit_test(test_infer_cli_refuses_percentiles_whose_name_is_taken),
        cmocka_unit_test(test_infer_cli_refuses_a_schedule_too_big_to_hold),
        cmocka_unit_test(test_infer_cli_summary_carries_the_config_files_seeds),
        cmocka_unit_test(test_infer_cli_performance_sample_count_override_sets_the_sample_set),
#ifndef LB_HAVE_CUDA
        cmocka_unit_test(test_infer_cli_gpu_without_cuda_is_a_usage_error),
#endif
        cmocka_unit_test(test_infer_cli_refuses_a_bad_directory_with_exit_2),
        cmocka_unit_test(test_infer_cli_sigint_drains_and_stores_an_interrupted_run),
        cmocka_unit_test(test_infer_cli_sigint_in_the_warmup_stores_no_warmup_steps),
        cmocka_unit_test(test_infer_cli_records_sampling_options_as_given),
        cmocka_unit_test(test_infer_cli_signal_before_the_run_stops_the_preparation),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
