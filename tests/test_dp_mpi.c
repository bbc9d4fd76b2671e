/* test_dp_mpi.c: data-parallel training with ZeRO stages 0-3 (train/dp.h) under
 * `mpirun -np 4 --oversubscribe`, against one rank training on the whole batch.
 *
 * The program is its own worker: CTest runs it plainly; a test starts it again under
 * mpirun (argv[1] = "--dp-worker MODEL DIR all|lora"), each rank trains every stage with
 * and without gradient accumulation on its part of each batch (every parameter, or LoRA
 * adapters on a frozen base) and writes its losses, norms and final parameters to DIR; the test
 * then trains one rank on the whole batch in this process and compares. Then `llmbench train` end
 * to end under mpirun: the stored run with every rank's series, a token shard read by 4 ranks as by
 * one, ranks started with different options, LoRA adapters on 4 ranks as on one, and bad input. */
#include <jansson.h>
#include <math.h>
#include <setjmp.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "comm/boot.h"
#include "comm/comm.h"
#include "core/clock.h"
#include "core/rng.h"
#include "gpu/devinfo.h"
#include "model/lora.h"
#include "store/store.h"
#include "test_util.h"
#include "train/data.h"
#include "train/dp.h"
#include "train/train.h"

#define NP    4
#define STEPS 3
#define SEQ   16
#define MICRO 2 /* sequences per rank per micro-batch */

static char self_path[4096];

/* What a run leaves: per step loss and norm, then the final parameters. */
typedef struct {
    float loss[STEPS], norm[STEPS];
    int64_t n_params;
    float *params;
} outcome;

/* Adapters of rank LORA_RANK on every projection, on a frozen base (model/lora.h). */
#define LORA_RANK 4

/* With lora, adapters on m's frozen base into *l; the array that trains into *out:
 * the adapters', else the whole model's. */
static lb_status attach(lb_model *m, bool lora, lb_lora *l, float **params, int64_t *n) {
    *params = m->params;
    *n = m->n_params;
    if (!lora) return LB_OK;
    lb_lora_config lc = {LORA_RANK, 16.0f, lb_lora_all_targets(m->cfg.family), LB_QUANT_NONE};
    lb_status st = lb_lora_init(l, &m->cfg, &lc, (int64_t)m->B * m->T, 9, NULL);
    if (st == LB_OK) st = lb_model_attach_lora(m, l, NULL);
    *params = l->params;
    *n = l->off.total;
    return st;
}

/* This rank trains STEPS steps of `stage` with K micro-batches of MICRO sequences: every
 * parameter, or with lora the adapters alone. */
static int train(const char *model, bool lora, lb_comm *comm, lb_zero_stage stage, int K,
                 outcome *out) {
    lb_model_config cfg;
    lb_err err = {{0}};
    if (lb_model_config_preset(model, &cfg, &err) != LB_OK) return 1;
    int ranks = lb_comm_size(comm), rank = lb_comm_rank(comm), B = MICRO;
    lb_model m;
    if (lb_model_init(&m, &cfg, B, SEQ, 5, &err) != LB_OK) return 1;
    lb_lora ad = {0};
    float *params = NULL;
    int64_t n_params = 0;
    if (attach(&m, lora, &ad, &params, &n_params) != LB_OK) return 1;
    lb_data_loader *data = NULL;
    lb_dp *dp = NULL;
    /* buckets of about 20,000 elements: gpt2-tiny puts the embeddings and layer 0 in one */
    lb_dp_params dpp = {.stage = stage, .bucket_elems = 20000, .grad_accum = K};
    if (lb_data_open("synthetic", cfg.vocab_size, MICRO * ranks, SEQ, 11, &data, &err) != LB_OK ||
        lb_dp_init(&dp, &m, comm, &dpp, &err) != LB_OK) {
        fprintf(stderr, "set-up: %s\n", err.msg);
        return 1;
    }
    size_t n = (size_t)B * SEQ;
    int32_t *in = malloc(n * K * sizeof *in), *tg = malloc(n * K * sizeof *tg);
    lb_adamw_params opt = lb_model_adamw_default_params();
    opt.lr = 1e-3f;
    int rc = 0;
    for (int s = 0; s < STEPS && rc == 0; s++) {
        for (int k = 0; k < K; k++)
            lb_data_next_part(data, rank, ranks, in + k * n, tg + k * n);
        lb_dp_step_info info;
        if (lb_dp_step(dp, in, tg, B, SEQ, &opt, s + 1, &info, &err) != LB_OK) {
            fprintf(stderr, "step: %s\n", err.msg);
            rc = 1;
        }
        out->loss[s] = info.loss;
        out->norm[s] = info.grad_norm;
    }
    if (rc == 0 && lb_dp_gather_params(dp, &err) != LB_OK) rc = 1;
    out->n_params = n_params;
    out->params = malloc((size_t)n_params * sizeof(float));
    memcpy(out->params, params, (size_t)n_params * sizeof(float));
    free(in);
    free(tg);
    lb_dp_free(dp);
    lb_data_close(data);
    lb_model_free(&m);
    lb_lora_free(&ad);
    return rc;
}

/* The oracle: the reference model alone on the whole batch, gradients of the K
 * micro-batches added up and divided by K, lb_model_adamw_step; no train/dp.h. */
static void train_alone(const char *model, bool lora, int K, outcome *out) {
    lb_model_config cfg;
    lb_model_config_preset(model, &cfg, NULL);
    const int B = MICRO * NP;
    lb_model m;
    assert_int_equal(lb_model_init(&m, &cfg, B, SEQ, 5, NULL), LB_OK);
    lb_lora ad = {0};
    float *params = NULL, *grads = lora ? NULL : m.grads;
    int64_t n_params = 0;
    assert_int_equal(attach(&m, lora, &ad, &params, &n_params), LB_OK);
    if (lora) grads = ad.grads;
    lb_data_loader *data = NULL;
    assert_int_equal(lb_data_open("synthetic", cfg.vocab_size, B, SEQ, 11, &data, NULL), LB_OK);
    int32_t *in = malloc((size_t)B * SEQ * sizeof *in), *tg = malloc((size_t)B * SEQ * sizeof *tg);
    lb_adamw_params opt = lb_model_adamw_default_params();
    opt.lr = 1e-3f;
    for (int s = 0; s < STEPS; s++) {
        lb_model_zero_grad(&m);
        double loss = 0;
        for (int k = 0; k < K; k++) {
            float l = 0;
            lb_data_next(data, in, tg);
            assert_int_equal(lb_model_forward(&m, in, tg, B, SEQ, &l, NULL), LB_OK);
            assert_int_equal(lb_model_backward(&m, NULL), LB_OK);
            loss += l;
        }
        for (int64_t i = 0; i < n_params; i++)
            grads[i] /= (float)K;
        out->loss[s] = (float)(loss / K);
        lb_model_adamw_step(&m, &opt, s + 1, &out->norm[s]);
    }
    out->n_params = n_params;
    out->params = malloc((size_t)n_params * sizeof(float));
    memcpy(out->params, params, (size_t)n_params * sizeof(float));
    free(in);
    free(tg);
    lb_data_close(data);
    lb_model_free(&m);
    lb_lora_free(&ad);
}

static void path_of(char *buf, size_t cap, const char *dir, int stage, int K, int rank) {
    snprintf(buf, cap, "%s/z%d-k%d-r%d.bin", dir, stage, K, rank);
}

static int dp_worker(const char *model, bool lora, const char *dir) {
    lb_boot *boot = NULL;
    lb_err err = {{0}};
    if (lb_boot_init(30, &boot, &err) != LB_OK) {
        fprintf(stderr, "boot: %s\n", err.msg);
        return 1;
    }
    lb_comm_params cp = lb_comm_default_params();
    cp.backend = LB_COMM_BACKEND_MPI;
    cp.op_timeout_s = 60;
    lb_comm *c = NULL;
    int rc = 1;
    if (lb_boot_size(boot) != NP || lb_comm_init(boot, &cp, true, &c, &err) != LB_OK) {
        fprintf(stderr, "not %d MPI ranks: %s\n", NP, err.msg);
    } else {
        rc = 0;
        for (int stage = 0; stage <= 3 && rc == 0; stage++)
            for (int K = 1; K <= 2 && rc == 0; K++) {
                outcome o;
                rc = train(model, lora, c, (lb_zero_stage)stage, K, &o);
                char path[512];
                path_of(path, sizeof path, dir, stage, K, lb_comm_rank(c));
                FILE *f = fopen(path, "wb");
                if (f == NULL)
                    rc = 1;
                else {
                    fwrite(o.loss, sizeof o.loss, 1, f);
                    fwrite(o.norm, sizeof o.norm, 1, f);
                    fwrite(o.params, sizeof(float), (size_t)o.n_params, f);
                    fclose(f);
                }
                free(o.params);
            }
    }
    lb_comm_free(c);
    lb_boot_free(boot);
    return rc;
}

/* ---- running things ---- */

static bool as_root(void) {
    return getuid() == 0;
}

/* mpirun --oversubscribe [--allow-run-as-root] with args appended; stdout and stderr into
 * out. */
static int mpirun(const char *const *args, char *out, size_t cap) {
    const char *argv[64] = {"mpirun", "--oversubscribe"};
    int n = 2;
    if (as_root()) argv[n++] = "--allow-run-as-root";
    for (int i = 0; args[i] != NULL && n < 63; i++)
        argv[n++] = args[i];
    argv[n] = NULL;
    return lb_test_run_argv(argv, out, cap, NULL);
}

/* ||a - b||_2 / ||b - start||_2: the difference against the size of the whole update. */
static double rel_update_err(const float *a, const float *b, const float *start, int64_t n) {
    double d = 0, u = 0;
    for (int64_t i = 0; i < n; i++) {
        d += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
        u += ((double)b[i] - start[i]) * ((double)b[i] - start[i]);
    }
    return sqrt(d / u);
}

/* Rank 0's outcome of run a (loss, norm and parameters, as the worker wrote them) against
 * b's, in fp32 on the CPU: losses within 2e-6 and norms within 2e-5 relative, the
 * parameters within 1e-4 of the size of b's whole update from start. */
static void expect_close(const float *a, const outcome *b, const float *start, const char *what) {
    for (int s = 0; s < STEPS; s++) {
        double dl = fabs(a[s] - b->loss[s]) / b->loss[s];
        double dn = fabs(a[STEPS + s] - b->norm[s]) / b->norm[s];
        if (dl > 2e-6 || dn > 2e-5)
            fail_msg("%s step %d: loss %.8f vs %.8f, norm %.8f vs %.8f", what, s, a[s], b->loss[s],
                     a[STEPS + s], b->norm[s]);
    }
    double e = rel_update_err(a + 2 * STEPS, b->params, start, b->n_params);
    if (!(e < 1e-4)) fail_msg("%s: parameters off by %.3g of the update", what, e);
}

/* Every stage with one and two micro-batches on NP ranks against one rank on the whole
 * batch, and stages 1-3 against stage 0 on the same ranks; with lora the adapters alone
 * train (the frozen base whole on every rank). */
static void expect_ranks_match_one_rank(const char *model, bool lora) {
    char dir[64];
    lb_test_tmpdir(dir, sizeof dir);
    static char out[1 << 16];
    const char *args[] = {"-np",         "4",   "-x", "OMP_NUM_THREADS=1",   self_path,
                          "--dp-worker", model, dir,  lora ? "lora" : "all", NULL};
    int rc = mpirun(args, out, sizeof out);
    if (rc != 0) fprintf(stderr, "%s\n", out);
    assert_int_equal(rc, 0);
    lb_model_config cfg;
    lb_model_config_preset(model, &cfg, NULL);
    lb_model m0;
    assert_int_equal(lb_model_init(&m0, &cfg, 1, SEQ, 5, NULL), LB_OK);
    lb_lora l0 = {0};
    float *start = NULL;
    int64_t n0 = 0;
    assert_int_equal(attach(&m0, lora, &l0, &start, &n0), LB_OK);
    outcome refs[2];
    train_alone(model, lora, 1, &refs[0]);
    train_alone(model, lora, 2, &refs[1]);
    size_t bytes = 2 * STEPS * sizeof(float) + (size_t)n0 * sizeof(float);
    float *stage0[2] = {malloc(bytes), malloc(bytes)};
    for (int stage = 0; stage <= 3; stage++)
        for (int K = 1; K <= 2; K++) {
            const outcome *ref = &refs[K - 1];
            assert_int_equal(ref->n_params, n0);
            float *rank0 = stage == 0 ? stage0[K - 1] : malloc(bytes), *mine = malloc(bytes);
            for (int r = 0; r < NP; r++) {
                char path[512];
                path_of(path, sizeof path, dir, stage, K, r);
                FILE *f = fopen(path, "rb");
                assert_non_null(f);
                assert_int_equal(fread(r == 0 ? rank0 : mine, 1, bytes, f), bytes);
                fclose(f);
                /* loss, norm and parameters: the same bits on every rank */
                if (r > 0 && memcmp(rank0, mine, bytes) != 0)
                    fail_msg("%s%s zero %d K %d: rank %d differs from rank 0", model,
                             lora ? " lora" : "", stage, K, r);
            }
            char what[96];
            snprintf(what, sizeof what, "%s%s zero %d K %d", model, lora ? " lora" : "", stage, K);
            expect_close(rank0, ref, start, what);
            if (stage > 0) {
                /* stage 0's run on the same ranks as the reference */
                outcome z0 = {.n_params = n0, .params = stage0[K - 1] + 2 * STEPS};
                memcpy(z0.loss, stage0[K - 1], sizeof z0.loss);
                memcpy(z0.norm, stage0[K - 1] + STEPS, sizeof z0.norm);
                snprintf(what, sizeof what, "%s%s zero %d K %d against zero 0", model,
                         lora ? " lora" : "", stage, K);
                expect_close(rank0, &z0, start, what);
                free(rank0);
            }
            free(mine);
        }
    free(stage0[0]);
    free(stage0[1]);
    free(refs[0].params);
    free(refs[1].params);
    lb_model_free(&m0);
    lb_lora_free(&l0);
    lb_test_rmtree(dir);
}

static void test_dp_gpt2_every_stage_on_4_ranks_equals_one_rank_with_4x_batch(void **state) {
    (void)state;
    expect_ranks_match_one_rank("gpt2-tiny", false);
}

static void test_dp_llama_every_stage_on_4_ranks_equals_one_rank_with_4x_batch(void **state) {
    (void)state;
    expect_ranks_match_one_rank("llama-tiny", false);
}

/* The adapters' state is what ZeRO shards: every stage trains them as one rank would. */
static void test_dp_lora_every_stage_on_4_ranks_equals_zero_0_and_one_rank(void **state) {
    (void)state;
    expect_ranks_match_one_rank("llama-tiny", true);
    expect_ranks_match_one_rank("gpt2-tiny", true);
}

/* ---- llmbench train end to end ---- */

/* The JSON document of a `--json` run's output (the text before it is progress or
 * warnings); NULL when there is none. */
static json_t *json_of(const char *out) {
    const char *start = strstr(out, "{\n");
    json_t *j = start ? json_loads(start, JSON_DISABLE_EOF_CHECK, NULL) : NULL;
    if (j == NULL) fprintf(stderr, "no JSON document in the output:\n%s\n", out);
    return j;
}

static const json_t *series_values(const json_t *run, const char *name) {
    return json_object_get(json_object_get(json_object_get(run, "series"), name), "values");
}

/* A metric's value in a result's JSON document; NAN when absent. */
static double metric_of(const json_t *run, const char *name) {
    size_t i;
    const json_t *m;
    json_array_foreach(json_object_get(run, "metrics"), i, m) {
        if (strcmp(json_string_value(json_object_get(m, "name")), name) == 0)
            return json_real_value(json_object_get(m, "value"));
    }
    return NAN;
}

/* Run a (4 ranks) and run b (one rank) both have n losses, equal within rel. */
static void expect_same_losses(const json_t *a, const json_t *b, size_t n, double rel) {
    const json_t *la = series_values(a, "loss"), *lb = series_values(b, "loss");
    assert_int_equal(json_array_size(la), n);
    assert_int_equal(json_array_size(lb), n);
    for (size_t i = 0; i < n; i++) {
        double x = json_real_value(json_array_get(la, i)),
               y = json_real_value(json_array_get(lb, i));
        if (!(fabs(x - y) <= rel * y))
            fail_msg("step %zu: loss %.8f on 4 ranks, %.8f on one", i, x, y);
    }
}

static void test_train_cli_4_ranks_store_one_run_with_every_rank(void **state) {
    (void)state;
    char dir[64], db[96];
    lb_test_tmpdir(dir, sizeof dir);
    snprintf(db, sizeof db, "%s/r.db", dir);
    static char out[1 << 17];
    const char *args[] = {"-np",
                          "4",
                          "-x",
                          "OMP_NUM_THREADS=1",
                          LB_TEST_BIN,
                          "train",
                          "--device",
                          "cpu",
                          "--model",
                          "gpt2-tiny",
                          "--batch",
                          "4",
                          "--grad-accum",
                          "2",
                          "--seq",
                          "16",
                          "--steps",
                          "3",
                          "--warmup",
                          "1",
                          "--zero",
                          "2",
                          "--hour-cost",
                          "2",
                          "--base-tok-per-s",
                          "1000",
                          "--no-progress",
                          "--db",
                          db,
                          NULL};
    int rc = mpirun(args, out, sizeof out);
    if (rc != 0) fprintf(stderr, "%s\n", out);
    assert_int_equal(rc, 0);
    assert_non_null(strstr(out, "gpt2-tiny-cpu-fp32-x4-zero2"));
    const char *export[] = {"results", "export", "--db", db, NULL};
    static char doc[1 << 18];
    assert_int_equal(lb_test_run(export, doc, sizeof doc, NULL, 0), 0);
    json_t *runs = json_loads(doc, 0, NULL);
    /* one run: the other ranks stored nothing */
    assert_int_equal(json_array_size(runs), 1);
    json_t *run = json_array_get(runs, 0);
    const json_t *cfg = json_object_get(run, "config");
    assert_int_equal(json_integer_value(json_object_get(cfg, "ranks")), 4);
    assert_int_equal(json_integer_value(json_object_get(cfg, "global_batch")), 16);
    assert_string_equal(json_string_value(json_object_get(cfg, "launcher")), "mpi");
    const char *per_rank[] = {"step_ms.r0", "step_ms.r3", "comm_ms.r2", "sent_bytes.r1",
                              "warmup_step_ms.r3"};
    for (size_t i = 0; i < sizeof per_rank / sizeof per_rank[0]; i++)
        if (series_values(run, per_rank[i]) == NULL) fail_msg("no series %s", per_rank[i]);
    assert_int_equal(json_array_size(series_values(run, "step_ms.r3")), 3);
    /* a step's time is the slowest rank's */
    for (size_t s = 0; s < 3; s++) {
        double slowest = 0;
        for (int q = 0; q < NP; q++) {
            char name[32];
            snprintf(name, sizeof name, "step_ms.r%d", q);
            slowest = fmax(slowest, json_real_value(json_array_get(series_values(run, name), s)));
        }
        assert_true(json_real_value(json_array_get(series_values(run, "step_ms"), s)) == slowest);
    }
    const char *metrics[] = {"slowest_rank",           "slowest_rank_pct",
                             "cost_per_1k_samples",    "cost_per_1m_tokens",
                             "scaling_efficiency",     "sent_bytes_per_step",
                             "sent_bytes_formula",     "zero_state_bytes_formula",
                             "comm_exposed_ms_median", "tokens_per_s_per_gpu"};
    for (size_t i = 0; i < sizeof metrics / sizeof metrics[0]; i++)
        if (isnan(metric_of(run, metrics[i]))) fail_msg("no metric %s", metrics[i]);
    /* the figures from the slowest rank's own time: 4 ranks x 4 sequences x 16 tokens a step
     * over the largest of the ranks' sums of their 3 timed steps */
    double s = 0;
    for (int q = 0; q < NP; q++) {
        char name[32];
        snprintf(name, sizeof name, "step_ms.r%d", q);
        double own = 0;
        for (size_t i = 0; i < 3; i++)
            own += json_real_value(json_array_get(series_values(run, name), i)) / 1e3;
        s = own > s ? own : s;
    }
    double tok = metric_of(run, "tokens_per_s"), samples = metric_of(run, "samples_per_s");
    assert_float_equal(tok, NP * 4.0 * 16 * 3 / s, 1e-9 * tok);
    assert_float_equal(metric_of(run, "tokens_per_s_per_gpu"), tok / NP, 1e-9 * tok);
    assert_float_equal(samples, tok / 16, 1e-9 * samples);
    assert_float_equal(metric_of(run, "scaling_efficiency"), tok / (NP * 1000.0), 1e-12);
    assert_float_equal(metric_of(run, "cost_per_1k_samples"), 2.0 / 3600 / samples * 1e3, 1e-12);
    assert_float_equal(metric_of(run, "cost_per_1m_tokens"), 2.0 / 3600 / tok * 1e6, 1e-12);
    /* stage 2, 2 micro-batches: the gradients reduce-scattered twice, the parameters
     * gathered once (one bucket of P fp32 values, no padding on 4 ranks), and the loss and
     * the norm all-reduced, 8 bytes each */
    double P = json_integer_value(json_object_get(cfg, "params")), f = (NP - 1.0) / NP;
    assert_float_equal(metric_of(run, "sent_bytes_per_step"), 3 * f * 4 * P + 2 * 2 * f * 8, 1e-6);
    assert_float_equal(metric_of(run, "sent_bytes_formula"), 2 * f * 4 * P, 1e-6);
    /* every rank ended with the same parameters */
    assert_true(metric_of(run, "replicas_identical") == 1);
    json_decref(runs);
    lb_test_rmtree(dir);
}

/* A fresh directory dir[64] holding a token shard of 3,000 random tokens below 128 from
 * seed (shard[96]) and the path of a database (db[96]). */
static void shard_dir(char *dir, char *shard, char *db, uint64_t seed) {
    lb_test_tmpdir(dir, 64);
    snprintf(shard, 96, "%s/tokens.bin", dir);
    snprintf(db, 96, "%s/r.db", dir);
    assert_int_equal(lb_test_write_shard(shard, 3000, 128, 0, seed), 0);
}

static void test_train_cli_token_shard_4_ranks_read_what_one_rank_reads(void **state) {
    (void)state;
    char dir[64], shard[96], db[96];
    shard_dir(dir, shard, db, 3);
    static char out4[1 << 16], out1[1 << 16];
    const char *four[] = {"-np",           "4",          "-x",       "OMP_NUM_THREADS=1",
                          LB_TEST_BIN,     "train",      "--device", "cpu",
                          "--model",       "llama-tiny", "--batch",  "2",
                          "--seq",         "32",         "--steps",  "6",
                          "--warmup",      "0",          "--data",   shard,
                          "--zero",        "3",          "--json",   "-q",
                          "--no-progress", "--db",       db,         NULL};
    int rc = mpirun(four, out4, sizeof out4);
    if (rc != 0) fprintf(stderr, "%s\n", out4);
    assert_int_equal(rc, 0);
    const char *one[] = {
        "train", "--device", "cpu",           "--model", "llama-tiny", "--batch", "8",
        "--seq", "32",       "--steps",       "6",       "--warmup",   "0",       "--data",
        shard,   "--json",   "--no-progress", "--db",    db,           NULL};
    assert_int_equal(lb_test_run(one, out1, sizeof out1, NULL, 0), 0);
    json_t *a = json_of(out4), *b = json_of(out1);
    assert_non_null(a);
    assert_non_null(b);
    expect_same_losses(a, b, 6, 2e-6);
    json_decref(a);
    json_decref(b);
    lb_test_rmtree(dir);
}

/* LoRA adapters on a frozen base, 4 ranks with 2 micro-batches of one sequence each
 * against one rank with 2 micro-batches of 4 (the same sequences): the same loss curve
 * (the adapters' gradient averaged over ranks and micro-batches) and the same adapters on
 * every rank. One repeated batch, so that the loss falls. */
static void test_train_cli_lora_4_ranks_equal_one_rank_with_4x_batch(void **state) {
    (void)state;
    char dir[64], db[96];
    lb_test_tmpdir(dir, sizeof dir);
    snprintf(db, sizeof db, "%s/r.db", dir);
    static char out4[1 << 16], out1[1 << 16];
    /* every option but --batch, which comes last */
#define LORA_RUN                                                                                   \
    "train", "--device", "cpu", "--model", "llama-tiny", "--lora-rank", "4", "--grad-accum", "2",  \
        "--seq", "16", "--steps", "5", "--warmup", "0", "--data", "repeat", "--lr", "2e-2",        \
        "--json", "--no-progress", "--db", db, "--batch"
    const char *four[] = {"-np", "4", "-x", "OMP_NUM_THREADS=1", LB_TEST_BIN, LORA_RUN, "2", NULL};
    int rc = mpirun(four, out4, sizeof out4);
    if (rc != 0) fprintf(stderr, "%s\n", out4);
    assert_int_equal(rc, 0);
    const char *one[] = {LORA_RUN, "8", NULL};
#undef LORA_RUN
    assert_int_equal(lb_test_run(one, out1, sizeof out1, NULL, 0), 0);
    json_t *a = json_of(out4), *b = json_of(out1);
    assert_non_null(a);
    assert_non_null(b);
    assert_true(metric_of(a, "replicas_identical") == 1);
    /* the adapters' fp32 gradients all-reduced, then the loss and the squared norm (fp64),
     * ring-counted */
    lb_model_config cfg;
    lb_model_config_preset("llama-tiny", &cfg, NULL);
    lb_lora_config lc = {4, 16.0f, lb_lora_all_targets(cfg.family), LB_QUANT_NONE};
    double grads = 4.0 * (double)lb_lora_param_count(&cfg, &lc);
    assert_float_equal(metric_of(a, "sent_bytes_formula"), 1.5 * grads, 1e-6 * grads);
    assert_float_equal(metric_of(a, "sent_bytes_per_step"), 1.5 * (grads + 16), 1e-6 * grads);
    assert_true(isnan(metric_of(a, "zero_state_bytes_formula")));
    expect_same_losses(a, b, 5, 1e-5);
    const json_t *lb = series_values(b, "loss");
    double first = json_real_value(json_array_get(lb, 0)),
           last = json_real_value(json_array_get(lb, 4));
    if (!(last < first - 1e-3))
        fail_msg("the adapters did not train: loss %.6f -> %.6f", first, last);
    json_decref(a);
    json_decref(b);
    lb_test_rmtree(dir);
}

/* LoRA at ZeRO 1 and 3 on 4 ranks, 2 micro-batches of one sequence each, against one rank
 * with one batch of 8 (the same sequences of a token shard): the same loss curve, the same
 * adapters on every rank, the optimizer state cut into 4 shards (fp32 master, m and v of a
 * quarter each) and the traffic beside zero.h's formula. */
static void test_train_cli_lora_zero_stages_on_4_ranks_equal_one_batch_on_one_rank(void **state) {
    (void)state;
    char dir[64], shard[96], db[96];
    shard_dir(dir, shard, db, 5);
    static char out4[1 << 16], out1[1 << 16];
    /* every option but the last two, which say the layout of the batch */
#define LORA_RUN                                                                                   \
    "train", "--device", "cpu", "--model", "llama-tiny", "--lora-rank", "4", "--seq", "16",        \
        "--steps", "4", "--warmup", "0", "--data", shard, "--lr", "2e-2", "--json",                \
        "--no-progress", "--db", db
    const char *one[] = {LORA_RUN, "--batch", "8", NULL};
    assert_int_equal(lb_test_run(one, out1, sizeof out1, NULL, 0), 0);
    json_t *b = json_of(out1);
    assert_non_null(b);
    lb_model_config cfg;
    lb_model_config_preset("llama-tiny", &cfg, NULL);
    lb_lora_config lc = {4, 16.0f, lb_lora_all_targets(cfg.family), LB_QUANT_NONE};
    const double n = (double)lb_lora_param_count(&cfg, &lc);
    assert_float_equal(metric_of(b, "optimizer_bytes"), 8 * n, 0.5);
    const char *stages[] = {"1", "3"};
    for (int i = 0; i < 2; i++) {
        const char *four[] = {"-np",    "4",       "-x", "OMP_NUM_THREADS=1", LB_TEST_BIN,
                              LORA_RUN, "--batch", "2",  "--grad-accum",      "2",
                              "--zero", stages[i], NULL};
        int rc = mpirun(four, out4, sizeof out4);
        if (rc != 0) fprintf(stderr, "%s\n", out4);
        assert_int_equal(rc, 0);
        json_t *a = json_of(out4);
        assert_non_null(a);
        assert_true(metric_of(a, "replicas_identical") == 1);
        expect_same_losses(a, b, 4, 1e-5);
        double shard_elems = metric_of(a, "shard_elems");
        if (!(shard_elems >= n / 4 && shard_elems <= n / 4 + cfg.n_layer * 4))
            fail_msg("zero %s: a shard of %.0f adapter elements of %.0f", stages[i], shard_elems,
                     n);
        assert_float_equal(metric_of(a, "optimizer_bytes"), 12 * shard_elems, 0.5);
        lb_zero_stage z = (lb_zero_stage)atoi(stages[i]);
        double formula = lb_zero_adapter_traffic_bytes(z, LB_PREC_FP32, n, 4);
        assert_float_equal(metric_of(a, "sent_bytes_formula"), formula, 1e-6 * n);
        /* stage 1 sends once a step whatever the micro-batches: the formula, the padding of
         * the pieces and the fp64 loss and squared norm (1.5 x 16 bytes) */
        double sent = metric_of(a, "sent_bytes_per_step") - 24;
        if (z == LB_ZERO_1 && !(sent >= formula && sent <= formula + 0.75 * 8 * 4 * cfg.n_layer))
            fail_msg("zero 1: %.0f bytes sent a step beside the formula's %.0f", sent + 24,
                     formula);
        json_decref(a);
    }
#undef LORA_RUN
    json_decref(b);
    lb_test_rmtree(dir);
}

static void test_train_cli_ranks_with_different_options_stop_before_running(void **state) {
    (void)state;
    char dir[64], db[96];
    lb_test_tmpdir(dir, sizeof dir);
    snprintf(db, sizeof db, "%s/r.db", dir);
    static char out[1 << 16];
    const char *args[] = {"-np",     "3",         LB_TEST_BIN, "train",   "--device",  "cpu",
                          "--model", "gpt2-tiny", "--seq",     "16",      "--batch",   "2",
                          "--db",    db,          ":",         "-np",     "1",         LB_TEST_BIN,
                          "train",   "--device",  "cpu",       "--model", "gpt2-tiny", "--seq",
                          "16",      "--batch",   "4",         "--db",    db,          NULL};
    int rc = mpirun(args, out, sizeof out);
    assert_int_equal(rc, 2);
    assert_non_null(strstr(out, "rank 3 was started with --batch 4 where rank 0 has 2"));
    /* numbers as typed, not their binary values' 17 digits (0.00029999999999999997) */
    const char *lr[] = {"-np",     "3",         LB_TEST_BIN, "train",   "--device",  "cpu",
                        "--model", "gpt2-tiny", "--seq",     "16",      "--lr",      "3e-4",
                        "--db",    db,          ":",         "-np",     "1",         LB_TEST_BIN,
                        "train",   "--device",  "cpu",       "--model", "gpt2-tiny", "--seq",
                        "16",      "--lr",      "1e-3",      "--db",    db,          NULL};
    rc = mpirun(lr, out, sizeof out);
    assert_int_equal(rc, 2);
    if (strstr(out, "rank 3 was started with --lr 0.001 where rank 0 has 0.0003:") == NULL)
        fail_msg("output: %.2000s", out);
    const char *show[] = {"results", "show", "1", "--db", db, NULL};
    assert_int_not_equal(lb_test_run(show, NULL, 0, NULL, 0), 0);
    lb_test_rmtree(dir);
}

static void test_train_cli_bad_input_exits_2(void **state) {
    (void)state;
    char err[2048];
    const char *a1[] = {"train", "--zero", "4", NULL};
    assert_int_equal(lb_test_run(a1, NULL, 0, err, sizeof err), 2);
    assert_non_null(strstr(err, "--zero must be between 0 and 3, got 4"));
    const char *a2[] = {"train", "--device", "cpu", "--model",      "gpt2-tiny", "--seq",
                        "16",    "--batch",  "6",   "--grad-accum", "4",         NULL};
    assert_int_equal(lb_test_run(a2, NULL, 0, err, sizeof err), 2);
    assert_non_null(strstr(err, "--batch 6 does not split into --grad-accum 4 micro-batches"));
    const char *a3[] = {"train", "--gpus", "4096", NULL};
    assert_int_equal(lb_test_run(a3, NULL, 0, err, sizeof err), 2);
    assert_non_null(strstr(err, "--gpus 4096"));
    if (lb_devinfo_cuda_device_count() == 0) { /* CI: no GPU */
        const char *a4[] = {"train", "--scaling", "1,2", NULL};
        assert_int_equal(lb_test_run(a4, NULL, 0, err, sizeof err), 2);
        assert_non_null(strstr(err, "--scaling 1,2 runs on GPUs"));
    }
    const char *a5[] = {"train", "--scaling", "1,2", "--gpus", "2", NULL};
    assert_int_equal(lb_test_run(a5, NULL, 0, err, sizeof err), 2);
    assert_non_null(strstr(err, "give it without --gpus"));
}

/* Rank 0 cannot open the results database (its folder would be under a file): every rank
 * stops before the run with rank 0's error (exit 2), where rank 0 alone used to stop and
 * wait forever for the others, gone on to train. */
static void test_train_cli_rank_0_failing_alone_ends_the_job(void **state) {
    (void)state;
    char dir[64], file[96], db[128];
    lb_test_tmpdir(dir, sizeof dir);
    snprintf(file, sizeof file, "%s/a-file", dir);
    assert_true(lb_test_write_file(file, "not a folder\n"));
    snprintf(db, sizeof db, "%s/sub/r.db", file);
    static char out[1 << 16];
    const char *args[] = {
        "-np",           "3",     "--timeout",       "100", "-x",      "OMP_NUM_THREADS=1",
        LB_TEST_BIN,     "train", "--device",        "cpu", "--model", "gpt2-tiny",
        "--steps",       "20",    "--setup-timeout", "5",   "--db",    db,
        "--no-progress", NULL};
    double t0 = lb_clock_wall_s();
    int rc = mpirun(args, out, sizeof out);
    double took = lb_clock_wall_s() - t0;
    if (rc != 2 || took > 60 || strstr(out, "cannot create folder") == NULL)
        fail_msg("exit %d after %.0f s:\n%s", rc, took, out);
}

/* Another writer holds the results database's lock for longer than the ranks' start-up
 * deadline: rank 0's check of the database takes no lock, so the ranks start, and rank 0
 * stores the run once the lock is free (the store waits for it). */
static void test_train_cli_database_locked_for_a_while_still_runs(void **state) {
    (void)state;
    char dir[64], db[96];
    lb_test_tmpdir(dir, sizeof dir);
    snprintf(db, sizeof db, "%s/r.db", dir);
    lb_store *made = NULL; /* a database as llmbench leaves one: its schema, in WAL mode */
    lb_err err = {{0}};
    assert_int_equal(lb_store_open(db, &made, &err), LB_OK);
    lb_store_close(made);
    int ready[2];
    assert_int_equal(pipe(ready), 0);
    pid_t holder = fork();
    if (holder == 0) { /* holds the write lock for 6 s */
        sqlite3 *h = NULL;
        if (sqlite3_open(db, &h) != SQLITE_OK ||
            sqlite3_exec(h, "BEGIN IMMEDIATE", NULL, NULL, NULL) != SQLITE_OK)
            _exit(1);
        if (write(ready[1], "x", 1) != 1) _exit(1);
        sleep(6);
        sqlite3_exec(h, "COMMIT", NULL, NULL, NULL);
        sqlite3_close(h);
        _exit(0);
    }
    char c;
    assert_int_equal(read(ready[0], &c, 1), 1);
    static char out[1 << 16];
    const char *args[] = {"-np",
                          "2",
                          "-x",
                          "OMP_NUM_THREADS=1",
                          LB_TEST_BIN,
                          "train",
                          "--device",
                          "cpu",
                          "--model",
                          "gpt2-tiny",
                          "--steps",
                          "2",
                          "--warmup",
                          "0",
                          "--setup-timeout",
                          "3",
                          "--db",
                          db,
                          "--no-progress",
                          "-q",
                          NULL};
    int rc = mpirun(args, out, sizeof out);
    int status = 0;
    waitpid(holder, &status, 0);
    close(ready[0]);
    close(ready[1]);
    if (rc != 0) fail_msg("exit %d:\n%s", rc, out);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    lb_test_rmtree(dir);
}

/* A Ctrl-C that reaches one rank only (not rank 0) ends every rank at the same step, and
 * the run is stored as interrupted, naming that rank, with the steps measured so far. */
static void test_train_cli_signal_to_one_rank_interrupts_every_rank(void **state) {
    (void)state;
    char dir[64], db[96];
    lb_test_tmpdir(dir, sizeof dir);
    snprintf(db, sizeof db, "%s/r.db", dir);
    static char out[1 << 16];
    const char *args[] = {"-np",
                          "4",
                          "-x",
                          "OMP_NUM_THREADS=1",
                          self_path,
                          "--interrupt-rank",
                          "2",
                          "6",
                          LB_TEST_BIN,
                          "train",
                          "--device",
                          "cpu",
                          "--model",
                          "gpt2-tiny",
                          "--batch",
                          "2",
                          "--seq",
                          "16",
                          "--steps",
                          "200000",
                          "--warmup",
                          "0",
                          "--no-progress",
                          "--db",
                          db,
                          NULL};
    /* the signal comes 6 s after the ranks start, long after their first step even under
     * load (at 3 s one came before it once), long before their last */
    int rc = mpirun(args, out, sizeof out);
    assert_int_equal(rc, 130);
    const char *export[] = {"results", "export", "--db", db, NULL};
    static char doc[1 << 20];
    assert_int_equal(lb_test_run(export, doc, sizeof doc, NULL, 0), 0);
    json_t *runs = json_loads(doc, 0, NULL);
    assert_int_equal(json_array_size(runs), 1);
    json_t *run = json_array_get(runs, 0);
    const char *failure = json_string_value(json_object_get(run, "failure"));
    if (failure == NULL || strstr(failure, "interrupted (a signal reached rank 2) after ") == NULL)
        fail_msg("failure: %s\noutput: %.2000s", failure ? failure : "(none)", out);
    assert_string_equal(json_string_value(json_object_get(run, "status")), "interrupted");
    size_t steps = json_array_size(series_values(run, "step_ms"));
    assert_true(steps > 0 && steps < 200000);
    /* every rank's series holds the same steps */
    assert_int_equal(json_array_size(series_values(run, "step_ms.r3")), steps);
    json_decref(runs);
    lb_test_rmtree(dir);
}

/* ---- a rank that stops answering ---- */

static void hang(int sig) {
    (void)sig;
    for (;;)
        pause();
}

/* One rank of the job of test_train_cli_hung_rank_fails_the_run_naming_it, with the
 * options its llmbench ranks were given: trains with them, and after 15 seconds stops in the
 * middle of whatever step it is in, as a rank whose node hangs. */
static int hang_worker(void) {
    lb_boot *boot = NULL;
    lb_err err = {{0}};
    if (lb_boot_init(30, &boot, &err) != LB_OK) return 1;
    lb_train_params p = lb_train_default_params();
    p.model = "gpt2-tiny";
    p.device = LB_DEVICE_CPU;
    p.batch = 2;
    p.seq = 16;
    p.steps = 100000000;
    p.warmup = 0;
    p.comm_timeout_s = 2;
    p.progress = false;
    p.boot = boot;
    lb_model_config cfg;
    if (lb_train_agree(&p, &cfg, lb_train_resolve(&p, &cfg, &err), &err) != LB_OK) {
        fprintf(stderr, "hang worker: %s\n", err.msg);
        return 1;
    }
    signal(SIGALRM, hang);
    alarm(15); /* steps first, even under AddressSanitizer on two busy cores */
    lb_result *r = lb_result_new("train", "hang");
    lb_train_run(&p, r, &err);
    return 1; /* not reached: the others' deadline ends the job */
}

static void test_train_cli_hung_rank_fails_the_run_naming_it(void **state) {
    (void)state;
    char dir[64], db[96];
    lb_test_tmpdir(dir, sizeof dir);
    snprintf(db, sizeof db, "%s/r.db", dir);
    static char out[1 << 16];
    const char *args[] = {"-np",
                          "3",
                          "-x",
                          "OMP_NUM_THREADS=1",
                          LB_TEST_BIN,
                          "train",
                          "--device",
                          "cpu",
                          "--model",
                          "gpt2-tiny",
                          "--batch",
                          "2",
                          "--seq",
                          "16",
                          "--steps",
                          "100000000",
                          "--warmup",
                          "0",
                          "--comm-timeout",
                          "2",
                          "--no-progress",
                          "--db",
                          db,
                          ":",
                          "-np",
                          "1",
                          "-x",
                          "OMP_NUM_THREADS=1",
                          self_path,
                          "--hang-worker",
                          NULL};
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    int rc = mpirun(args, out, sizeof out);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    assert_int_not_equal(rc, 0);
    assert_true(t1.tv_sec - t0.tv_sec < 60);
    const char *export[] = {"results", "export", "--db", db, NULL};
    static char doc[1 << 20];
    assert_int_equal(lb_test_run(export, doc, sizeof doc, NULL, 0), 0);
    json_t *runs = json_loads(doc, 0, NULL);
    assert_int_equal(json_array_size(runs), 1);
    json_t *run = json_array_get(runs, 0);
    /* "... rank(s) 3 never arrived" (under load a slow rank may be named beside it) */
    const char *failure = json_string_value(json_object_get(run, "failure"));
    const char *list = failure ? strstr(failure, "rank(s) ") : NULL;
    const char *end = list ? strstr(list, " never arrived") : NULL;
    bool named = false;
    for (const char *c = list ? list + 8 : NULL; c != NULL && c < end; c++)
        named |= *c == '3' && (c[1] == ',' || c + 1 == end);
    if (!named) fail_msg("failure: %s\noutput: %.2000s", failure ? failure : "(none)", out);
    assert_string_equal(json_string_value(json_object_get(run, "status")), "failed");
    /* the steps measured before the hang are kept */
    assert_true(json_array_size(series_values(run, "step_ms")) > 0);
    json_decref(runs);
    lb_test_rmtree(dir);
}

int main(int argc, char **argv) {
    ssize_t len = readlink("/proc/self/exe", self_path, sizeof self_path - 1);
    self_path[len > 0 ? len : 0] = '\0';
    if (argc >= 5 && strcmp(argv[1], "--dp-worker") == 0)
        return dp_worker(argv[2], strcmp(argv[4], "lora") == 0, argv[3]);
    if (argc >= 2 && strcmp(argv[1], "--hang-worker") == 0) return hang_worker();
    if (argc >= 5 && strcmp(argv[1], "--interrupt-rank") == 0)
        return lb_test_exec_interrupting_rank(atoi(argv[2]), atof(argv[3]), argv + 4);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dp_gpt2_every_stage_on_4_ranks_equals_one_rank_with_4x_batch),
        cmocka_unit_test(test_dp_llama_every_stage_on_4_ranks_equals_one_rank_with_4x_batch),
        cmocka_unit_test(test_dp_lora_every_stage_on_4_ranks_equals_zero_0_and_one_rank),
        cmocka_unit_test(test_train_cli_4_ranks_store_one_run_with_every_rank),
        cmocka_unit_test(test_train_cli_token_shard_4_ranks_read_what_one_rank_reads),
        cmocka_unit_test(test_train_cli_lora_4_ranks_equal_one_rank_with_4x_batch),
        cmocka_unit_test(test_train_cli_lora_zero_stages_on_4_ranks_equal_one_batch_on_one_rank),
        cmocka_unit_test(test_train_cli_ranks_with_different_options_stop_before_running),
        cmocka_unit_test(test_train_cli_bad_input_exits_2),
        cmocka_unit_test(test_train_cli_rank_0_failing_alone_ends_the_job),
        cmocka_unit_test(test_train_cli_database_locked_for_a_while_still_runs),
        cmocka_unit_test(test_train_cli_signal_to_one_rank_interrupts_every_rank),
        cmocka_unit_test(test_train_cli_hung_rank_fails_the_run_naming_it),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
