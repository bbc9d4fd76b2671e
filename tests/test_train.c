/* test_train.c: the CPU training workload: loss falls on a repeated batch for both
 * families, a Hugging Face model directory's weights are the ones trained (CPU, and the
 * GPU where there is one), impossible configurations are refused before anything runs, and
 * the summary is the one the raw series give. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "core/signals.h"
#include "gpu/devinfo.h"
#include "hf_fixture.h"
#include "model/model.h"
#include "model/safetensors.h"
#include "test_util.h"
#include "train/data.h"
#include "train/memory.h"
#include "train/train.h"

static lb_train_params tiny_params(const char *model) {
    lb_train_params p = lb_train_default_params();
    p.model = model;
    p.device = LB_DEVICE_CPU;
    p.batch = 4;
    p.seq = 16;
    p.steps = 20;
    p.warmup = 0;
    p.lr = 1e-2;
    p.weight_decay = 0.0;
    p.data = "repeat";
    p.progress = false;
    return p;
}

static void expect_loss_falls(const char *model) {
    lb_train_params p = tiny_params(model);
    lb_result *r = lb_result_new("train", model);
    lb_err err = {{0}};
    assert_int_equal(lb_train_run(&p, r, &err), LB_OK);
    const lb_series *loss = lb_result_find_series(r, "loss");
    assert_non_null(loss);
    assert_int_equal(loss->n, 20);
    /* Untrained, the loss is near ln(128) = 4.85; 20 steps on one batch memorise it. */
    assert_float_equal(loss->values[0], log(128.0), 0.5);
    if (!(loss->values[19] < 0.5 * loss->values[0]))
        fail_msg("%s: loss went from %f to %f", model, loss->values[0], loss->values[19]);
    for (size_t i = 0; i < loss->n; i++)
        assert_true(isfinite(loss->values[i]));
    lb_result_free(r);
}

static void test_train_gpt2_loss_falls_on_repeated_batch(void **state) {
    (void)state;
    expect_loss_falls("gpt2-tiny");
}

static void test_train_llama_loss_falls_on_repeated_batch(void **state) {
    (void)state;
    expect_loss_falls("llama-tiny");
}

/* LoRA (and QLoRA) on a frozen base: 20 AdamW steps on one batch move the loss down by
 * at least 0.3 nats (rank 8 on every projection; loss 4.84 -> 3.87 when written), the
 * stored config and figures name the adapters. */
static void expect_lora_loss_falls(const char *model, lb_quant_kind quant) {
    lb_train_params p = tiny_params(model);
    p.lora_rank = 8;
    p.quant = quant;
    p.hour_cost = 3.6; /* 0.001 a second */
    lb_result *r = lb_result_new("train", model);
    lb_err err = {{0}};
    assert_int_equal(lb_train_run(&p, r, &err), LB_OK);
    const lb_series *loss = lb_result_find_series(r, "loss");
    assert_non_null(loss);
    if (!(loss->values[19] < loss->values[0] - 0.3))
        fail_msg("%s LoRA: loss went from %f to %f", model, loss->values[0], loss->values[19]);
    assert_int_equal(json_integer_value(json_object_get(r->config, "lora_rank")), 8);
    assert_string_equal(json_string_value(json_object_get(r->config, "quant")),
                        lb_lora_quant_name(quant));
    lb_model_config cfg;
    assert_int_equal(lb_model_config_preset(model, &cfg, &err), LB_OK);
    lb_lora_config lc = {8, 16.0f, lb_lora_all_targets(cfg.family), quant};
    const double n = (double)lb_lora_param_count(&cfg, &lc);
    assert_float_equal(lb_result_metric(r, "trainable_params"), n, 0.0);
    assert_float_equal(lb_result_metric(r, "cost_per_1k_samples"),
                       1000.0 * 0.001 / lb_result_metric(r, "samples_per_s"), 1e-9);
    assert_float_equal(lb_result_metric(r, "grad_bytes_per_step"), 4 * n, 0.0);
    assert_float_equal(lb_result_metric(r, "optimizer_bytes"), 8 * n, 0.0);
    assert_float_equal(lb_result_metric(r, "flops_per_token"),
                       lb_lora_train_flops_per_token(&cfg, &lc, p.seq), 0.0);
    lb_result_free(r);
}

static void test_train_lora_loss_falls_on_repeated_batch(void **state) {
    (void)state;
    expect_lora_loss_falls("llama-tiny", LB_QUANT_NONE);
    expect_lora_loss_falls("llama-tiny", LB_QUANT_NF4);
    expect_lora_loss_falls("gpt2-tiny", LB_QUANT_NF4);
}

/* The first step's loss of lb_train_run on model directory dir at ZeRO stage zero; the
 * second step's into *second. */
static double first_loss(const char *dir, lb_device_kind device, int64_t lora_rank, int zero,
                         double *second) {
    lb_train_params p = tiny_params(dir);
    p.device = device, p.lora_rank = lora_rank, p.data = "synthetic", p.zero = zero;
    p.batch = 2, p.steps = 2;
    lb_result *r = lb_result_new("train", "dir");
    lb_err err = {{0}};
    if (lb_train_run(&p, r, &err) != LB_OK) fail_msg("%s", err.msg);
    assert_string_equal(json_string_value(json_object_get(r->config, "model_dir")), dir);
    double loss = lb_result_find_series(r, "loss")->values[0];
    *second = lb_result_find_series(r, "loss")->values[1];
    lb_result_free(r);
    return loss;
}

/* --model DIR: the base is the directory's weights (written from seed 3; a preset's random
 * weights come from the run's seed, 1337), checked by the first step's loss against the
 * reference model's on the same batch: at step 0 the adapters (B = 0) change nothing. The
 * directory has no tokenizer, which training does not need. */
static void test_train_model_dir_trains_its_weights(void **state) {
    (void)state;
    char dir[64];
    lb_test_tmpdir(dir, sizeof dir);
    lb_model_config cfg = lb_fixture_config();
    lb_model m;
    assert_int_equal(lb_model_init(&m, &cfg, 2, 16, 3, NULL), LB_OK);
    lb_fixture_write_dir(dir, &cfg, m.params, false, true);
    char tpath[128]; /* training reads token ids: no tokenizer needed */
    snprintf(tpath, sizeof tpath, "%s/tokenizer.json", dir);
    assert_int_equal(remove(tpath), 0);
    lb_data_loader *data = NULL;
    int32_t in[32], tg[32];
    assert_int_equal(lb_data_open("synthetic", cfg.vocab_size, 2, 16,
                                  lb_train_default_params().seed, &data, NULL),
                     LB_OK);
    lb_data_next(data, in, tg);
    lb_data_close(data);
    float want = 0;
    assert_int_equal(lb_model_forward(&m, in, tg, 2, 16, &want, NULL), LB_OK);
    for (int64_t rank = 0; rank <= 4; rank += 4) {
        double second0 = 0, second = 0;
        double got = first_loss(dir, LB_DEVICE_CPU, rank, 0, &second);
        if (!(fabs(got - want) <= 1e-5 * want))
            fail_msg("cpu, rank %lld: first loss %.7f, the directory's model gives %.7f",
                     (long long)rank, got, want);
        if (lb_devinfo_cuda_device_count() == 0) continue; /* CI: no GPU */
        /* stages 1-3 read their shard from it too: the second step (after the shard's
         * optimizer) as stage 0's */
        for (int zero = 0; zero <= 3; zero++) {
            got = first_loss(dir, LB_DEVICE_CUDA, rank, zero, zero == 0 ? &second0 : &second);
            if (!(fabs(got - want) <= 1e-3 * want))
                fail_msg("cuda, rank %lld, zero %d: first loss %.7f, the directory's model gives "
                         "%.7f",
                         (long long)rank, zero, got, want);
            if (zero > 0 && !(fabs(second - second0) <= 1e-3 * second0))
                fail_msg("cuda, rank %lld, zero %d: second loss %.7f, at zero 0 %.7f",
                         (long long)rank, zero, second, second0);
        }
    }
    /* a directory's config.json whose weights do not match it, and a path that is none */
    lb_model_config wide = cfg;
    wide.d_ff *= 2;
    lb_fixture_write_config(dir, &wide, "LlamaForCausalLM");
    lb_train_params p = tiny_params(dir);
    lb_err err = {{0}};
    assert_int_equal(lb_train_resolve(&p, &cfg, &err), LB_ERR_USAGE);
    assert_non_null(strstr(err.msg, "mlp.gate_proj"));
    p = tiny_params(dir);
    p.model = "/no/such/model";
    assert_int_equal(lb_train_resolve(&p, &cfg, &err), LB_ERR_USAGE);
    assert_non_null(strstr(err.msg, "--model /no/such/model: no such directory"));
    lb_model_free(&m);
    lb_test_rmtree(dir);
}

static void expect_refused(lb_train_params p, const char *needle) {
    lb_model_config cfg;
    lb_err err = {{0}};
    assert_int_equal(lb_train_resolve(&p, &cfg, &err), LB_ERR_USAGE);
    if (strstr(err.msg, needle) == NULL) fail_msg("'%s' lacks '%s'", err.msg, needle);
}

static void test_train_impossible_configs_are_refused(void **state) {
    (void)state;
    lb_train_params p = tiny_params("gpt2-tiny");
    p.seq = 33; /* gpt2-tiny's context is 32 */
    expect_refused(p, "--seq 33");
    p = tiny_params("gpt2-tiny");
    p.batch = 0;
    expect_refused(p, "--batch");
    p = tiny_params("no-such-model");
    expect_refused(p, "no-such-model");
    p = tiny_params("gpt2-tiny");
    p.precision = LB_PREC_BF16;
    expect_refused(p, "--precision bf16 needs --device cuda");
    p = tiny_params("gpt2-tiny");
    p.attention = LB_GPU_ATTN_BUILTIN;
    expect_refused(p, "--attention builtin applies to --device cuda only");
    /* cuDNN's attention in fp32: refused before any device is asked for */
    lb_model_config cfg;
    lb_err err = {{0}};
    assert_int_equal(lb_model_config_preset("gpt2-tiny", &cfg, &err), LB_OK);
    p = tiny_params("gpt2-tiny");
    p.device = LB_DEVICE_CUDA, p.attention = LB_GPU_ATTN_CUDNN;
    assert_int_equal(lb_train_validate(&p, &cfg, &err), LB_ERR_USAGE);
    assert_non_null(strstr(err.msg, "--attention cudnn needs --precision bf16 or fp16"));
    p.precision = LB_PREC_BF16;
    assert_int_equal(lb_train_validate(&p, &cfg, &err), LB_OK);
    /* LoRA: options without a rank, ranks and targets the model cannot take, NF4 in fp32 */
    p = tiny_params("llama-tiny");
    p.quant = LB_QUANT_NF4;
    expect_refused(p, "--quant nf4 needs --lora-rank R");
    p = tiny_params("llama-tiny");
    p.lora_targets = "q,v";
    expect_refused(p, "--lora-targets needs --lora-rank R");
    p = tiny_params("llama-tiny");
    p.lora_alpha = 8;
    expect_refused(p, "--lora-alpha needs --lora-rank R");
    p = tiny_params("llama-tiny");
    p.lora_rank = 33;
    expect_refused(p, "larger than projection k of model llama-tiny (32 x 64)");
    p.lora_rank = 4, p.lora_targets = "q,x";
    expect_refused(p, "unknown projection 'x'");
    p = tiny_params("gpt2-tiny");
    p.lora_rank = 4, p.lora_targets = "gate,up";
    expect_refused(p, "no gate projection");
    assert_int_equal(lb_model_config_preset("llama-tiny", &cfg, &err), LB_OK);
    p = tiny_params("llama-tiny");
    p.device = LB_DEVICE_CUDA, p.lora_rank = 4, p.quant = LB_QUANT_NF4;
    assert_int_equal(lb_train_validate(&p, &cfg, &err), LB_ERR_USAGE);
    assert_non_null(strstr(err.msg, "--quant nf4 needs --precision bf16 or fp16"));
    p.precision = LB_PREC_BF16;
    assert_int_equal(lb_train_validate(&p, &cfg, &err), LB_OK);
    /* the adapters' state is what ZeRO shards: every stage accepted with adapters */
    p = tiny_params("llama-tiny");
    p.lora_rank = 4;
    for (int z = 0; z <= 3; z++) {
        p.zero = z;
        assert_int_equal(lb_train_validate(&p, &cfg, &err), LB_OK);
    }
}

/* A command line's inputs are checked for the ranks it will start: N ranks read N x one
 * rank's micro-batch (--batch / --grad-accum) of a token shard, so a shard that feeds one
 * rank and not N is refused naming N, before any of them starts. */
static void test_train_check_inputs_holds_the_shard_to_every_rank(void **state) {
    (void)state;
    char dir[64], path[128];
    lb_test_tmpdir(dir, sizeof dir);
    snprintf(path, sizeof path, "%s/tokens.bin", dir);
    assert_int_equal(lb_test_write_shard(path, 33, 128, 0, 5), 0); /* 2 ranks x 2 x 8 + 1 */
    lb_train_params p = tiny_params("gpt2-tiny");
    p.batch = 4, p.grad_accum = 2, p.seq = 8, p.data = path;
    lb_err err = {{0}};
    assert_int_equal(lb_train_check_inputs(&p, 1, &err), LB_OK);
    assert_int_equal(lb_train_check_inputs(&p, 2, &err), LB_OK);
    assert_int_equal(lb_train_check_inputs(&p, 3, &err), LB_ERR_USAGE);
    const char *want = "has 33 tokens, fewer than one batch reads: 6 sequences (3 ranks x 2, a "
                       "rank's micro-batch) x 8 tokens + 1 = 49";
    if (strstr(err.msg, want) == NULL) fail_msg("'%s' lacks '%s'", err.msg, want);
    p.data = "synthetic"; /* generated, never short */
    assert_int_equal(lb_train_check_inputs(&p, 3, &err), LB_OK);
}

/* Two --scaling invocations started in the same second get different group tags (their runs
 * would be mixed in reports otherwise): the tag carries the process id after the time. */
static void test_train_scaling_groups_of_two_processes_differ(void **state) {
    (void)state;
    int fds[2];
    assert_int_equal(pipe(fds), 0);
    pid_t child = fork();
    assert_true(child >= 0);
    if (child == 0) {
        char group[64];
        lb_train_scaling_group(group, sizeof group);
        _exit(write(fds[1], group, strlen(group) + 1) > 0 ? 0 : 1);
    }
    int64_t before = (int64_t)time(NULL);
    char mine[64], theirs[64] = "";
    lb_train_scaling_group(mine, sizeof mine);
    close(fds[1]);
    assert_true(read(fds[0], theirs, sizeof theirs - 1) > 0);
    close(fds[0]);
    int status = 0;
    assert_int_equal(waitpid(child, &status, 0), child);
    long long when = 0;
    long pid = 0;
    int used = 0;
    assert_int_equal(sscanf(mine, "scaling-%lld-%ld%n", &when, &pid, &used), 2);
    assert_int_equal(used, (int)strlen(mine));
    assert_int_equal(pid, (long)getpid());
    assert_true(when >= before && when <= before + 1);
    assert_int_equal(sscanf(theirs, "scaling-%lld-%ld", &when, &pid), 2);
    assert_int_equal(pid, (long)child);
    assert_string_not_equal(mine, theirs);
}

/* GPUs run ZeRO 0-3 and gradient accumulation, with adapters too; what does not split is
 * refused before anything runs, naming the option */
static void test_train_gpu_zero_stages_and_accumulation_are_validated(void **state) {
    (void)state;
    lb_model_config cfg;
    lb_err err = {{0}};
    assert_int_equal(lb_model_config_preset("gpt2-tiny", &cfg, &err), LB_OK);
    lb_train_params p = tiny_params("gpt2-tiny");
    p.device = LB_DEVICE_CUDA, p.precision = LB_PREC_BF16, p.batch = 8;
    for (int z = 0; z <= 3; z++) {
        p.zero = z, p.grad_accum = 4;
        assert_int_equal(lb_train_validate(&p, &cfg, &err), LB_OK);
    }
    p.grad_accum = 3;
    assert_int_equal(lb_train_validate(&p, &cfg, &err), LB_ERR_USAGE);
    assert_non_null(strstr(err.msg, "--batch 8 does not split into --grad-accum 3"));
    p.grad_accum = 1, p.zero = 4;
    assert_int_equal(lb_train_validate(&p, &cfg, &err), LB_ERR_USAGE);
    assert_non_null(strstr(err.msg, "--zero 4: expected a ZeRO stage from 0 to 3"));
    assert_int_equal(lb_model_config_preset("llama-tiny", &cfg, &err), LB_OK);
    p = tiny_params("llama-tiny");
    p.device = LB_DEVICE_CUDA, p.precision = LB_PREC_BF16, p.lora_rank = 4, p.batch = 4;
    for (int z = 0; z <= 3; z++) {
        p.zero = z, p.grad_accum = 2;
        assert_int_equal(lb_train_validate(&p, &cfg, &err), LB_OK);
    }
    p.grad_accum = 3;
    assert_int_equal(lb_train_validate(&p, &cfg, &err), LB_ERR_USAGE);
    assert_non_null(strstr(err.msg, "--batch 4 does not split into --grad-accum 3"));
}

/* --save-params: the trained parameters come back under the layout's names, moved from
 * their initial values; adapters on a frozen base are refused */
static void test_train_save_params_writes_the_trained_model(void **state) {
    (void)state;
    char dir[64], path[128];
    lb_test_tmpdir(dir, sizeof dir);
    snprintf(path, sizeof path, "%s/trained.safetensors", dir);
    lb_train_params p = tiny_params("gpt2-tiny");
    p.steps = 3;
    p.save_params = path;
    lb_result *r = lb_result_new("train", p.model);
    lb_err err = {{0}};
    assert_int_equal(lb_train_run(&p, r, &err), LB_OK);
    lb_result_free(r);
    lb_model_config cfg;
    assert_int_equal(lb_model_config_preset("gpt2-tiny", &cfg, &err), LB_OK);
    lb_safetensors st;
    assert_int_equal(lb_safetensors_open(&st, path, &err), LB_OK);
    assert_int_equal(st.n_tensors, (size_t)lb_model_param_layout(&cfg, NULL, 0));
    const lb_st_tensor *w = lb_safetensors_find(&st, "normf.w");
    assert_non_null(w);
    int moved = 0; /* norm weights start at 1 */
    for (int64_t i = 0; i < w->numel; i++)
        moved += ((const float *)w->data)[i] != 1.0f;
    assert_true(moved > w->numel / 2);
    lb_safetensors_close(&st);
    p = tiny_params("llama-tiny");
    p.lora_rank = 4, p.save_params = path;
    expect_refused(p, "--save-params");
    lb_test_rmtree(dir);
}

/* The memory formula's total for p at stage z on n ranks, bytes. */
static double formula_total(const lb_train_params *p, const lb_model_config *cfg, int z, int n) {
    lb_train_params q = *p;
    q.zero = z;
    lb_train_memory m;
    lb_err err;
    assert_int_equal(lb_train_memory_formula(&q, cfg, n, &m, &err), LB_OK);
    return m.total;
}

/* A model that does not fit: one usage sentence with needed (the memory formula's total)
 * against free, ZeRO's formula within it, and what would fit: the fewest GPUs, then the
 * lowest stage there; a model that fits: LB_OK */
static void test_train_out_of_memory_names_what_would_fit(void **state) {
    (void)state;
    lb_model_config cfg;
    lb_err err = {{0}};
    assert_int_equal(lb_model_config_preset("llama3.1-8b", &cfg, &err), LB_OK);
    lb_train_params p = tiny_params("llama3.1-8b");
    p.device = LB_DEVICE_CUDA, p.precision = LB_PREC_BF16, p.batch = 1, p.seq = 1024;
    /* an H100's free memory: ZeRO 2 on 2 GPUs holds 2P + 14P/N = 72 GB of ZeRO's state,
     * but the working copies, the bucket buffers and the activations take it past 85 */
    const double h100 = 84.5e9;
    p.zero = 2;
    assert_true(formula_total(&p, &cfg, 2, 2) > h100);
    assert_int_equal(lb_train_check_fit(&p, &cfg, 2, h100, &err), LB_ERR_USAGE);
    char want[96];
    snprintf(want, sizeof want, "needs %.1f GB a GPU", formula_total(&p, &cfg, 2, 2) / 1e9);
    const char *parts[] = {"--model llama3.1-8b at --zero 2 on 2 GPUs ", want,
                           "ZeRO's 2P + 14P/N for 8.03 B parameters in bf16 (72.",
                           "cuda:0 has 84.5 GB free: --zero "};
    for (int i = 0; i < 4; i++)
        if (strstr(err.msg, parts[i]) == NULL) fail_msg("'%s' lacks '%s'", err.msg, parts[i]);
    assert_null(strchr(err.msg, '\n'));
    /* what it advises fits, and nothing with fewer GPUs or a lower stage there does */
    int z = -1, n = 0;
    double gb = 0;
    const char *a = strstr(err.msg, "free: --zero ");
    assert_int_equal(sscanf(a, "free: --zero %d on %d GPUs would fit (%lf GB", &z, &n, &gb), 3);
    assert_true(formula_total(&p, &cfg, z, n) <= h100);
    assert_float_equal(gb, formula_total(&p, &cfg, z, n) / 1e9, 0.05);
    for (int m = 2; m <= n; m++)
        for (int s = 0; s < (m < n ? 4 : z); s++)
            assert_true(formula_total(&p, &cfg, s, m) > h100);
    /* with no memory nothing fits anywhere */
    assert_int_equal(lb_train_check_fit(&p, &cfg, 2, 1e9, &err), LB_ERR_USAGE);
    assert_non_null(strstr(err.msg, "no stage fits"));
    /* enough memory: nothing to say */
    assert_int_equal(lb_train_check_fit(&p, &cfg, 2, formula_total(&p, &cfg, 2, 2), &err), LB_OK);
}

/* Mistral-7B with rank-16 adapters on all projections, 8 x 512 (docs/PERFORMANCE.md's
 * "LoRA and QLoRA fine-tuning") on a 24 GB GPU: the bf16 base does not fit, an NF4 base
 * with --recompute does. The refusal is one usage sentence naming needed (the formula's
 * total) against free and the base's part, and advises what would fit and was not given:
 * an NF4 base, --recompute, alone or together, else a smaller batch. */
static void test_train_lora_out_of_memory_advises_nf4(void **state) {
    (void)state;
    lb_model_config cfg;
    lb_err err = {{0}};
    assert_int_equal(lb_model_config_preset("mistral-7b", &cfg, &err), LB_OK);
    lb_train_params p = tiny_params("mistral-7b");
    p.device = LB_DEVICE_CUDA, p.precision = LB_PREC_BF16, p.batch = 8, p.seq = 512;
    p.lora_rank = 16, p.warmup = 3, p.steps = 10;
    const double gpu24 = 24e9;
    const double bf16 = formula_total(&p, &cfg, 0, 1);
    lb_train_params q = p;
    q.quant = LB_QUANT_NF4;
    const double nf4 = formula_total(&q, &cfg, 0, 1);
    q.recompute = true;
    const double nf4_recompute = formula_total(&q, &cfg, 0, 1);
    assert_true(bf16 > gpu24 && nf4 > gpu24 && nf4_recompute < gpu24);
    assert_int_equal(lb_train_check_fit(&p, &cfg, 1, gpu24, &err), LB_ERR_USAGE);
    char needed[64], advice[96];
    snprintf(needed, sizeof needed, "needs %.1f GB a GPU: the base 14.5 GB", bf16 / 1e9);
    snprintf(advice, sizeof advice, "free: --quant nf4 with --recompute (%.1f GB a GPU) would fit",
             nf4_recompute / 1e9);
    const char *parts[] = {"--model mistral-7b with rank-16 adapters on a frozen bf16 base at "
                           "--zero 0 on 1 GPU ",
                           needed, "cuda:0 has 24.0 GB free", advice};
    for (int i = 0; i < 4; i++)
        if (strstr(err.msg, parts[i]) == NULL) fail_msg("'%s' lacks '%s'", err.msg, parts[i]);
    assert_null(strchr(err.msg, '\n'));
    /* room for either alone: both named */
    assert_int_equal(lb_train_check_fit(&p, &cfg, 1, 30e9, &err), LB_ERR_USAGE);
    assert_non_null(strstr(err.msg, "free: --quant nf4 ("));
    assert_non_null(strstr(err.msg, ") or --recompute ("));
    /* --quant nf4 given: only --recompute is advised */
    p.quant = LB_QUANT_NF4;
    assert_int_equal(lb_train_check_fit(&p, &cfg, 1, gpu24, &err), LB_ERR_USAGE);
    assert_non_null(strstr(err.msg, "frozen NF4 base"));
    assert_non_null(strstr(err.msg, "free: --recompute ("));
    assert_null(strstr(err.msg, "--quant"));
    /* both given and too little memory: a smaller batch, naming neither */
    p.recompute = true;
    assert_int_equal(lb_train_check_fit(&p, &cfg, 1, 10e9, &err), LB_ERR_USAGE);
    assert_non_null(strstr(err.msg, "no stage fits on up to 4096 GPUs: try a smaller --batch"));
    assert_null(strstr(err.msg, "--recompute"));
    assert_null(strstr(err.msg, "--quant"));
    /* enough memory: nothing to say */
    assert_int_equal(lb_train_check_fit(&p, &cfg, 1, gpu24, &err), LB_OK);
}

/* --device cuda names what is visible: no GPU at all (CI), or the valid indices */
static void test_train_missing_gpu_is_named(void **state) {
    (void)state;
    int gpus = lb_devinfo_cuda_device_count();
    lb_train_params p = tiny_params("gpt2-tiny");
    p.device = LB_DEVICE_CUDA;
    p.device_index = gpus; /* one past the last, or 0 where there is none */
    lb_model_config cfg;
    lb_err err = {{0}};
    assert_int_equal(lb_train_resolve(&p, &cfg, &err), LB_ERR_UNSUPPORTED);
#ifdef LB_HAVE_CUDA
    const char *want = gpus == 0 ? "no CUDA GPU is visible" : "no such GPU";
#else
    const char *want = "built without CUDA";
#endif
    if (strstr(err.msg, want) == NULL) fail_msg("'%s' lacks '%s'", err.msg, want);
}

/* Two ranks whose delays alternate (10 then 20 ms, and 20 then 10): each step's slowest
 * rank took 20 ms, but each rank's steps took 30 ms in all, and so did the run: S is 0.03 s,
 * where the sum of the per-step maxima said 0.04. One rank, or no per-rank series: the sum
 * of step_ms. */
static void test_train_timed_seconds_are_the_slowest_ranks_own(void **state) {
    (void)state;
    lb_result *r = lb_result_new("train", "ranks");
    const double r0[] = {10, 20}, r1[] = {20, 10};
    for (int i = 0; i < 2; i++) {
        lb_result_series_push(lb_result_series(r, "step_ms", "ms"), 20);
        lb_result_series_push(lb_result_series(r, "step_ms.r0", "ms"), r0[i]);
        lb_result_series_push(lb_result_series(r, "step_ms.r1", "ms"), r1[i]);
    }
    assert_float_equal(lb_train_timed_seconds(r, 2), 0.030, 1e-12);
    assert_float_equal(lb_train_timed_seconds(r, 1), 0.040, 1e-12);
    assert_float_equal(lb_train_timed_seconds(r, 3), 0.040, 1e-12); /* no step_ms.r2 */
    lb_result_free(r);
}

static void test_train_summary_is_computed_from_the_series(void **state) {
    (void)state;
    lb_train_params p = tiny_params("gpt2-tiny");
    p.data = "synthetic";
    p.steps = 6;
    p.warmup = 2;
    lb_result *r = lb_result_new("train", "summary");
    assert_int_equal(lb_train_run(&p, r, NULL), LB_OK);
    const lb_series *ms = lb_result_find_series(r, "step_ms");
    assert_int_equal(ms->n, 6);
    assert_int_equal(lb_result_find_series(r, "warmup_step_ms")->n, 2);
    assert_int_equal(lb_result_find_series(r, "warmup_loss")->n, 2);
    double total_s = 0;
    for (size_t i = 0; i < ms->n; i++)
        total_s += ms->values[i] / 1e3;
    assert_float_equal(lb_result_metric(r, "tokens_per_s"), 4.0 * 16 * 6 / total_s, 1e-6);
    assert_float_equal(lb_result_metric(r, "samples_per_s"), 4.0 * 6 / total_s, 1e-9);
    const lb_series *loss = lb_result_find_series(r, "loss");
    assert_float_equal(lb_result_metric(r, "final_loss"), loss->values[5], 0);
    lb_model_config cfg;
    lb_model_config_preset("gpt2-tiny", &cfg, NULL);
    double fpt = lb_model_train_flops_per_token(&cfg, 16);
    assert_float_equal(lb_result_metric(r, "flops_per_token"), fpt, 0);
    /* a figure per token carries its per-token unit */
    for (size_t i = 0; i < r->n_metrics; i++)
        if (strcmp(r->metrics[i].name, "flops_per_token") == 0)
            assert_string_equal(r->metrics[i].unit, "FLOP/token");
    assert_float_equal(lb_result_metric(r, "achieved_gflops"),
                       fpt * lb_result_metric(r, "tokens_per_s") / 1e9, 1e-9);
    assert_true(lb_result_metric(r, "peak_host_mem_bytes") > 1e6);
    assert_string_equal(json_string_value(json_object_get(r->config, "model")), "gpt2-tiny");
    lb_result_free(r);
}

/* --gpu-hour-price: refused beside --hour-cost and on the CPU; on a GPU run it prices the
 * run's GPUs (one rank here: two steps of 0.5 s, 4 samples each, at 2.0 an hour). */
static void test_train_gpu_hour_price_prices_the_gpus(void **state) {
    (void)state;
    lb_train_params p = tiny_params("gpt2-tiny");
    lb_model_config cfg;
    lb_err err = {{0}};
    assert_int_equal(lb_model_config_preset("gpt2-tiny", &cfg, &err), LB_OK);
    p.gpu_hour_price = 2.0;
    assert_int_equal(lb_train_validate(&p, &cfg, &err), LB_ERR_USAGE);
    assert_non_null(strstr(err.msg, "give --hour-cost"));
    p.device = LB_DEVICE_CUDA;
    p.hour_cost = 1.0;
    assert_int_equal(lb_train_validate(&p, &cfg, &err), LB_ERR_USAGE);
    assert_non_null(strstr(err.msg, "give one of them"));
    p.hour_cost = 0;
    assert_float_equal(lb_train_hour_cost(&p), 2.0, 0);
    lb_result *r = lb_result_new("train", "price");
    lb_series *ms = lb_result_series(r, "step_ms", "ms");
    assert_int_equal(lb_result_series_push(ms, 500.0), LB_OK);
    assert_int_equal(lb_result_series_push(ms, 500.0), LB_OK);
    assert_int_equal(lb_train_summarize(&p, &cfg, r), LB_OK);
    assert_float_equal(lb_result_metric(r, "samples_per_s"), 8.0, 1e-12);
    assert_float_equal(lb_result_metric(r, "cost_per_1k_samples"), 2.0 / 3600 / 8 * 1000, 1e-12);
    lb_result_free(r);
}

static void test_train_summary_reports_step_time_drift(void **state) {
    (void)state;
    lb_train_params p = tiny_params("gpt2-tiny");
    lb_model_config cfg;
    lb_model_config_preset("gpt2-tiny", &cfg, NULL);
    /* 10 steps: 10 ms, then the last five 11.5 ms but one (a median ignores it) */
    const double steps[10] = {10, 10, 10.2, 10, 9.9, 11.5, 11.5, 30, 11.5, 11.4};
    lb_result *r = lb_result_new("train", "drift");
    lb_series *ms = lb_result_series(r, "step_ms", "ms");
    for (int i = 0; i < 10; i++)
        assert_int_equal(lb_result_series_push(ms, steps[i]), LB_OK);
    assert_int_equal(lb_train_summarize(&p, &cfg, r), LB_OK);
    assert_float_equal(lb_result_metric(r, "step_ms_drift_pct"), 15.0, 1e-9);
    lb_result_free(r);
    /* an odd count leaves the middle step out of both halves */
    const double odd[9] = {10, 10, 20, 20, 50, 12, 12, 30, 30}; /* medians 15 and 21 */
    r = lb_result_new("train", "odd");
    ms = lb_result_series(r, "step_ms", "ms");
    for (int i = 0; i < 9; i++)
        assert_int_equal(lb_result_series_push(ms, odd[i]), LB_OK);
    assert_int_equal(lb_train_summarize(&p, &cfg, r), LB_OK);
    assert_float_equal(lb_result_metric(r, "step_ms_drift_pct"), 40.0, 1e-9);
    lb_result_free(r);
    /* too few steps to halve: no drift figure */
    r = lb_result_new("train", "short");
    ms = lb_result_series(r, "step_ms", "ms");
    for (int i = 0; i < 7; i++)
        assert_int_equal(lb_result_series_push(ms, steps[i]), LB_OK);
    assert_int_equal(lb_train_summarize(&p, &cfg, r), LB_OK);
    assert_true(isnan(lb_result_metric(r, "step_ms_drift_pct")));
    assert_float_equal(lb_result_metric(r, "timed_steps"), 7.0, 0);
    lb_result_free(r);
}

static void test_train_interrupt_keeps_steps_measured(void **state) {
    (void)state;
    lb_train_params p = tiny_params("gpt2-tiny");
    lb_signals_raise(2);
    lb_result *r = lb_result_new("train", "interrupted");
    lb_err err = {{0}};
    assert_int_equal(lb_train_run(&p, r, &err), LB_ERR_INTERRUPTED);
    assert_non_null(strstr(err.msg, "interrupted after 0 of 20 steps"));
    lb_signals_reset();
    lb_result_free(r);
}

/* The CPU path holds the records of the steps it ran, grown as they go: a run past the first
 * block of records keeps every step, and a run of more steps than memory could hold records
 * for (one meant to run until Ctrl-C) starts and is interrupted, not refused for memory. */
static void test_train_records_grow_with_the_steps_run(void **state) {
    (void)state;
    lb_train_params p = tiny_params("gpt2-tiny");
    p.batch = 1, p.seq = 4, p.steps = 1100, p.warmup = 2, p.data = "synthetic";
    lb_result *r = lb_result_new("train", "records");
    lb_err err = {{0}};
    assert_int_equal(lb_train_run(&p, r, &err), LB_OK);
    const lb_series *ms = lb_result_find_series(r, "step_ms");
    const lb_series *loss = lb_result_find_series(r, "loss");
    assert_int_equal(ms->n, 1100);
    assert_int_equal(loss->n, 1100);
    assert_int_equal(lb_result_find_series(r, "warmup_step_ms")->n, 2);
    for (size_t i = 0; i < ms->n; i++) {
        assert_true(ms->values[i] > 0);
        assert_true(isfinite(loss->values[i]) && loss->values[i] > 0);
    }
    lb_result_free(r);
    p.steps = 1000000000000000; /* 48 PB of records at once */
    lb_signals_raise(2);
    r = lb_result_new("train", "endless");
    assert_int_equal(lb_train_run(&p, r, &err), LB_ERR_INTERRUPTED);
    assert_non_null(strstr(err.msg, "interrupted after 0 of 1000000000000002 steps"));
    lb_signals_reset();
    lb_result_free(r);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_train_gpt2_loss_falls_on_repeated_batch),
        cmocka_unit_test(test_train_llama_loss_falls_on_repeated_batch),
        cmocka_unit_test(test_train_lora_loss_falls_on_repeated_batch),
        cmocka_unit_test(test_train_model_dir_trains_its_weights),
        cmocka_unit_test(test_train_impossible_configs_are_refused),
        cmocka_unit_test(test_train_check_inputs_holds_the_shard_to_every_rank),
        cmocka_unit_test(test_train_scaling_groups_of_two_processes_differ),
        cmocka_unit_test(test_train_gpu_zero_stages_and_accumulation_are_validated),
        cmocka_unit_test(test_train_save_params_writes_the_trained_model),
        cmocka_unit_test(test_train_out_of_memory_names_what_would_fit),
        cmocka_unit_test(test_train_lora_out_of_memory_advises_nf4),
        cmocka_unit_test(test_train_missing_gpu_is_named),
        cmocka_unit_test(test_train_timed_seconds_are_the_slowest_ranks_own),
        cmocka_unit_test(test_train_summary_is_computed_from_the_series),
        cmocka_unit_test(test_train_gpu_hour_price_prices_the_gpus),
        cmocka_unit_test(test_train_summary_reports_step_time_drift),
        cmocka_unit_test(test_train_interrupt_keeps_steps_measured),
        cmocka_unit_test(test_train_records_grow_with_the_steps_run),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
