/* train.c: the training benchmark: validation, the CPU path on the reference model,
 * dispatch to the CUDA path, and the summary shared by both (see train.h).
 *
 * The CPU path times each whole step (batch fetch excluded: forward, backward, AdamW and
 * the collectives of train/dp.h) with the monotonic clock. Warm-up steps are measured and
 * stored in their own series so the summary of the timed steps never includes them but
 * nothing is thrown away. With several ranks, rank 0 says before every step whether to go
 * on (a signal ends every rank at the same step), each rank keeps its own step and
 * communication times, and at the end rank 0 gathers them: a step's time is the slowest
 * rank's. When a collective failed the control plane is not trusted either, and rank 0
 * keeps its own series only. */
#include "train/train.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "core/clock.h"
#include "core/file.h"
#include "core/log.h"
#include "core/progress.h"
#include "core/provenance.h"
#include "core/signals.h"
#include "core/stats.h"
#include "gpu/devinfo.h"
#include "model/hf_model.h"
#include "model/model.h"
#include "model/safetensors.h"
#include "train/data.h"
#include "train/dp.h"
#include "train/memory.h"
#include "train/train_cuda.h"
#include "train/train_impl.h"
#include "train/zero.h"

lb_train_params lb_train_default_params(void) {
    return (lb_train_params){
        .model = "gpt2-124m",
        .device = LB_DEVICE_AUTO,
        .device_index = 0,
        .batch = 4,
        .seq = 0,
        .steps = 20,
        .warmup = 3,
        .precision = LB_PREC_FP32,
        .lr = 3e-4,
        .beta1 = 0.9,
        .beta2 = 0.95,
        .eps = 1e-8,
        .weight_decay = 0.1,
        .grad_clip = 1.0,
        .data = "synthetic",
        .seed = 1337,
        .fp32_matmul = LB_BLAS_FP32_AUTO,
        .recompute = false,
        .gemm_heuristic_only = false,
        .attention = LB_GPU_ATTN_AUTO,
        .peak_tflops = 0.0,
        .hour_cost = 0.0,
        .lora_rank = 0,
        .lora_alpha = 0.0,
        .lora_targets = NULL,
        .quant = LB_QUANT_NONE,
        .progress = true,
        .zero = 0,
        .grad_accum = 1,
        .bucket_mib = 50.0,
        .base_tok_per_s = 0.0,
        .boot = NULL,
        .comm_timeout_s = 300.0,
    };
}

#define LORA_DEFAULT_ALPHA 16.0

lb_status lb_train_lora_config(const lb_train_params *p, const lb_model_config *cfg,
                               lb_lora_config *out, lb_err *err) {
    if (p->lora_rank < 1 || p->lora_rank > INT32_MAX)
        return lb_fail(err, LB_ERR_USAGE, "--lora-rank must be at least 1, got %lld",
                       (long long)p->lora_rank);
    *out =
        (lb_lora_config){.rank = (int)p->lora_rank,
                         .alpha = (float)(p->lora_alpha == 0 ? LORA_DEFAULT_ALPHA : p->lora_alpha),
                         .quant = p->quant};
    LB_TRY(lb_lora_targets_parse(p->lora_targets ? p->lora_targets : "all", cfg->family,
                                 &out->targets, err));
    return lb_lora_config_check(out, cfg, err);
}

int lb_train_ranks(const lb_train_params *p) {
    return p->boot != NULL ? lb_boot_size(p->boot) : 1;
}

int lb_train_rank(const lb_train_params *p) {
    return p->boot != NULL ? lb_boot_rank(p->boot) : 0;
}

lb_status lb_train_validate(const lb_train_params *p, const lb_model_config *cfg, lb_err *err) {
    if (p->batch < 1)
        return lb_fail(err, LB_ERR_USAGE, "--batch must be at least 1, got %lld",
                       (long long)p->batch);
    if (p->seq < 1 || p->seq > cfg->max_seq)
        return lb_fail(err, LB_ERR_USAGE,
                       "--seq %lld does not fit model %s: it must be between 1 and its context "
                       "length %d",
                       (long long)p->seq, cfg->name, cfg->max_seq);
    if (p->steps < 1)
        return lb_fail(err, LB_ERR_USAGE, "--steps must be at least 1, got %lld",
                       (long long)p->steps);
    if (p->hour_cost > 0 && p->gpu_hour_price > 0)
        return lb_fail(err, LB_ERR_USAGE,
                       "--hour-cost prices the whole hardware and --gpu-hour-price each GPU: "
                       "give one of them");
    if (p->gpu_hour_price > 0 && p->device == LB_DEVICE_CPU)
        return lb_fail(err, LB_ERR_USAGE,
                       "--gpu-hour-price prices the run's GPUs, but --device cpu uses none: "
                       "give --hour-cost, the machine's price per hour");
    if (p->warmup < 0)
        return lb_fail(err, LB_ERR_USAGE, "--warmup must be 0 or more, got %lld",
                       (long long)p->warmup);
    if (!(p->lr > 0.0)) return lb_fail(err, LB_ERR_USAGE, "--lr must be positive, got %g", p->lr);
    if (p->device == LB_DEVICE_CPU && p->precision != LB_PREC_FP32)
        return lb_fail(err, LB_ERR_USAGE,
                       "--precision %s needs --device cuda: the CPU reference computes in fp32",
                       lb_precision_name(p->precision));
    if (p->device == LB_DEVICE_CPU && p->fp32_matmul != LB_BLAS_FP32_IEEE &&
        p->fp32_matmul != LB_BLAS_FP32_AUTO)
        return lb_fail(err, LB_ERR_USAGE,
                       "--fp32-matmul %s (or --tf32) applies to --device cuda only",
                       lb_blas_fp32_mode_name(p->fp32_matmul));
    if (p->device == LB_DEVICE_CPU && (p->recompute || p->gemm_heuristic_only))
        return lb_fail(err, LB_ERR_USAGE, "%s applies to --device cuda only",
                       p->recompute ? "--recompute" : "--gemm-heuristic-only");
    if (p->device == LB_DEVICE_CPU && p->peak_tflops > 0)
        return lb_fail(err, LB_ERR_USAGE,
                       "--peak-tflops applies to --device cuda only: it is the GPU's peak that "
                       "MFU divides by, and a CPU run reports no MFU");
    if (p->device == LB_DEVICE_CPU && p->attention != LB_GPU_ATTN_AUTO)
        return lb_fail(err, LB_ERR_USAGE, "--attention %s applies to --device cuda only",
                       lb_gpu_attn_choice_name(p->attention));
    if (p->precision == LB_PREC_FP32 && p->attention == LB_GPU_ATTN_CUDNN)
        return lb_fail(err, LB_ERR_USAGE,
                       "--attention cudnn needs --precision bf16 or fp16: "
                       "cuDNN's fused attention has no fp32 kernels");
    if (p->precision != LB_PREC_FP32 &&
        (p->fp32_matmul == LB_BLAS_FP32_3XTF32 || p->fp32_matmul == LB_BLAS_FP32_INT8))
        return lb_fail(err, LB_ERR_USAGE,
                       "--fp32-matmul %s applies to --precision fp32 only: %s products "
                       "already run on tensor cores",
                       lb_blas_fp32_mode_name(p->fp32_matmul), lb_precision_name(p->precision));
    if (p->lora_rank == 0 && (p->lora_alpha != 0 || p->lora_targets || p->quant != LB_QUANT_NONE))
        return lb_fail(err, LB_ERR_USAGE,
                       "%s needs --lora-rank R: it applies to fine-tuning with adapters only",
                       p->quant != LB_QUANT_NONE ? "--quant nf4"
                       : p->lora_targets         ? "--lora-targets"
                                                 : "--lora-alpha");
    if (p->lora_rank != 0) {
        lb_lora_config lc;
        LB_TRY(lb_train_lora_config(p, cfg, &lc, err));
    }
    if (p->quant == LB_QUANT_NF4 && p->device == LB_DEVICE_CUDA && p->precision == LB_PREC_FP32)
        return lb_fail(err, LB_ERR_USAGE,
                       "--quant nf4 needs --precision bf16 or fp16 on --device cuda: the NF4 base "
                       "is dequantised into the 16-bit compute type");
    if (p->zero < 0 || p->zero > 3)
        return lb_fail(err, LB_ERR_USAGE, "--zero %d: expected a ZeRO stage from 0 to 3", p->zero);
    if (p->grad_accum < 1)
        return lb_fail(err, LB_ERR_USAGE, "--grad-accum must be at least 1, got %lld",
                       (long long)p->grad_accum);
    if (p->batch % p->grad_accum != 0)
        return lb_fail(err, LB_ERR_USAGE,
                       "--batch %lld does not split into --grad-accum %lld micro-batches: give a "
                       "batch that is a multiple of %lld",
                       (long long)p->batch, (long long)p->grad_accum, (long long)p->grad_accum);
    if (p->lora_rank > 0 && p->save_params != NULL)
        return lb_fail(err, LB_ERR_USAGE,
                       "--save-params writes a whole model's trained parameters, but with "
                       "--lora-rank only adapters train on a frozen base: drop one of them");
    if (p->save_params != NULL && lb_train_rank(p) == 0)
        LB_TRY(lb_file_check_writable("--save-params", p->save_params, err));
    if (p->batch * p->seq > INT32_MAX)
        return lb_fail(err, LB_ERR_USAGE, "--batch x --seq = %lld tokens per step is too many",
                       (long long)(p->batch * p->seq));
    return LB_OK;
}

static const char *device_name(lb_device_kind d) {
    return d == LB_DEVICE_CUDA ? "cuda" : d == LB_DEVICE_CPU ? "cpu" : "auto";
}

static void record_config(const lb_train_params *p, const lb_model_config *cfg, json_t *c) {
    json_object_set_new(c, "model", json_string(cfg->name));
    if (lb_train_model_is_dir(p)) json_object_set_new(c, "model_dir", json_string(p->model));
    json_object_set_new(c, "family", json_string(cfg->family == LB_FAMILY_GPT2 ? "gpt2" : "llama"));
    json_object_set_new(c, "device", json_string(device_name(p->device)));
    if (p->device == LB_DEVICE_CUDA)
        json_object_set_new(c, "device_index", json_integer(p->device_index));
    json_object_set_new(c, "batch", json_integer(p->batch));
    json_object_set_new(c, "seq", json_integer(p->seq));
    json_object_set_new(c, "steps", json_integer(p->steps));
    json_object_set_new(c, "warmup", json_integer(p->warmup));
    json_object_set_new(c, "precision", json_string(lb_precision_name(p->precision)));
    json_object_set_new(c, "lr", json_real(p->lr));
    json_object_set_new(c, "beta1", json_real(p->beta1));
    json_object_set_new(c, "beta2", json_real(p->beta2));
    json_object_set_new(c, "eps", json_real(p->eps));
    json_object_set_new(c, "weight_decay", json_real(p->weight_decay));
    json_object_set_new(c, "grad_clip", json_real(p->grad_clip));
    json_object_set_new(c, "data", json_string(p->data));
    json_object_set_new(c, "seed", json_integer((json_int_t)p->seed));
    json_object_set_new(c, "tf32", json_boolean(p->fp32_matmul == LB_BLAS_FP32_TF32));
    json_object_set_new(c, "fp32_matmul", json_string(lb_blas_fp32_mode_name(p->fp32_matmul)));
    json_object_set_new(c, "recompute", json_boolean(p->recompute));
    json_object_set_new(c, "gemm_heuristic_only", json_boolean(p->gemm_heuristic_only));
    json_object_set_new(c, "attention", json_string(lb_gpu_attn_choice_name(p->attention)));
    json_object_set_new(c, "params", json_integer(lb_model_param_count(cfg)));
    if (p->hour_cost > 0) json_object_set_new(c, "hour_cost", json_real(p->hour_cost));
    if (p->gpu_hour_price > 0)
        json_object_set_new(c, "gpu_hour_price", json_real(p->gpu_hour_price));
    lb_lora_config lc;
    if (p->lora_rank > 0 && lb_train_lora_config(p, cfg, &lc, NULL) == LB_OK) {
        char targets[64];
        lb_lora_targets_format(lc.targets, targets, sizeof targets);
        json_object_set_new(c, "lora_rank", json_integer(lc.rank));
        json_object_set_new(c, "lora_alpha", json_real(lc.alpha));
        json_object_set_new(c, "lora_targets", json_string(targets));
        json_object_set_new(c, "quant", json_string(lb_lora_quant_name(lc.quant)));
    }
    json_object_set_new(c, "n_layer", json_integer(cfg->n_layer));
    json_object_set_new(c, "d_model", json_integer(cfg->d_model));
    json_object_set_new(c, "n_head", json_integer(cfg->n_head));
    json_object_set_new(c, "n_kv_head", json_integer(cfg->n_kv_head));
    json_object_set_new(c, "vocab_size", json_integer(cfg->vocab_size));
    json_object_set_new(c, "zero", json_integer(p->zero));
    json_object_set_new(c, "grad_accum", json_integer(p->grad_accum));
    json_object_set_new(c, "bucket_mib", json_real(p->bucket_mib));
    json_object_set_new(c, "ranks", json_integer(lb_train_ranks(p)));
    json_object_set_new(c, "global_batch", json_integer(p->batch * lb_train_ranks(p)));
    json_object_set_new(
        c, "launcher",
        json_string(p->boot != NULL ? lb_boot_source_name(lb_boot_source_of(p->boot)) : "single"));
    if (p->base_tok_per_s > 0)
        json_object_set_new(c, "base_tok_per_s", json_real(p->base_tok_per_s));
}

void lb_train_record_config(const lb_train_params *p, const lb_model_config *cfg, lb_result *r) {
    record_config(p, cfg, r->config);
}

/* Config keys that may differ between ranks: how a rank was started and which local GPU
 * it drives. */
static bool rank_local_key(const char *key) {
    return strcmp(key, "launcher") == 0 || strcmp(key, "device_index") == 0;
}

/* The option (without its dashes) that sets config key `key`: the key's own name but for
 * those whose option is spelt otherwise. */
static const char *option_of(const char *key) {
    static const char *const renamed[][2] = {{"bucket_mib", "bucket-mb"}, {"model_dir", "model"}};
    for (size_t i = 0; i < sizeof renamed / sizeof renamed[0]; i++)
        if (strcmp(key, renamed[i][0]) == 0) return renamed[i][1];
    return key;
}

/* Two values of an option that differ between ranks as a user would type them: numbers
 * with 15 digits (3e-4 is "0.0003", not its binary value's 17), all 17 where that is what
 * tells them apart. *a and *b are malloc'd (NULL: no value, or out of memory). */
static void show_values(const json_t *v, const json_t *w, char **a, char **b) {
    for (int digits = 15; digits <= 17; digits += 2) {
        free(*a);
        free(*b);
        *a = json_dumps(v, JSON_ENCODE_ANY | JSON_REAL_PRECISION(digits));
        *b = w ? json_dumps(w, JSON_ENCODE_ANY | JSON_REAL_PRECISION(digits)) : NULL;
        if (*a == NULL || *b == NULL || strcmp(*a, *b) != 0) return;
    }
}

/* Rank q's configuration key `key` against rank 0's: LB_OK when they agree, else the
 * sentence naming the option (a key one of them lacks, such as --lora-rank given on one
 * rank only, shows as "(none)" there). */
static lb_status compare_key(const char *key, const json_t *mine, const json_t *theirs, int q,
                             lb_err *err) {
    const json_t *v = json_object_get(mine, key), *w = json_object_get(theirs, key);
    if (rank_local_key(key) || (v != NULL && w != NULL && json_equal(v, w))) return LB_OK;
    char *a = NULL, *b = NULL;
    if (v != NULL)
        show_values(v, w, &a, &b);
    else
        show_values(w, NULL, &b, &a);
    char opt[64];
    snprintf(opt, sizeof opt, "--%s", option_of(key));
    for (char *c = opt; *c; c++)
        if (*c == '_') *c = '-';
    lb_status st = lb_fail(err, LB_ERR_USAGE,
                           "rank %d was started with %s %s where rank 0 has %s: every rank needs "
                           "the same options",
                           q, opt, b ? b : "(none)", a ? a : "(none)");
    free(a);
    free(b);
    return st;
}

/* lb_boot_judge on rank 0: the verdict on every rank's "STATUS\nTEXT" (TEXT: the error
 * sentence, or the configuration as JSON). Every key of either side is compared: rank 0's,
 * then those only rank q has. */
static lb_status judge(char *const *all, int ranks, void *ctx, lb_err *err) {
    (void)ctx;
    json_t *mine = json_loads(strchr(all[0], '\n') + 1, 0, NULL);
    lb_status st = LB_OK;
    for (int q = 0; q < ranks && st == LB_OK; q++) {
        char *text = strchr(all[q], '\n') + 1;
        int code = atoi(all[q]);
        if (code != LB_OK) {
            st = lb_fail(err, (lb_status)code, "rank %d: %s", q, text);
            break;
        }
        if (q == 0) continue;
        json_t *theirs = json_loads(text, 0, NULL);
        const char *key;
        json_t *v;
        json_object_foreach(mine, key, v) {
            if ((st = compare_key(key, mine, theirs, q, err)) != LB_OK) break;
        }
        if (st == LB_OK && json_is_object(theirs)) {
            json_object_foreach(theirs, key, v) {
                if (json_object_get(mine, key) == NULL &&
                    (st = compare_key(key, mine, theirs, q, err)) != LB_OK)
                    break;
            }
        }
        json_decref(theirs);
    }
    json_decref(mine);
    return st;
}

lb_status lb_train_agree(const lb_train_params *p, const lb_model_config *cfg, lb_status local,
                         lb_err *err) {
    const int ranks = lb_train_ranks(p);
    if (ranks <= 1) return local;
    char *cfg_text = NULL;
    if (local == LB_OK) {
        json_t *c = json_object();
        record_config(p, cfg, c);
        cfg_text = json_dumps(c, JSON_COMPACT);
        json_decref(c);
    }
    size_t cap = (cfg_text ? strlen(cfg_text) : 0) + sizeof err->msg + 16;
    char *text = malloc(cap);
    if (text == NULL) {
        free(cfg_text);
        return lb_fail(err, LB_ERR_NOMEM, "out of memory");
    }
    snprintf(text, cap, "%d\n%s", (int)local,
             local == LB_OK ? (cfg_text ? cfg_text : "{}") : err->msg);
    free(cfg_text);
    lb_status st = lb_boot_agree(p->boot, text, judge, NULL, err);
    free(text);
    return st;
}

/* Rank 0: the series of `ranks` ranks' records rec[q][step][LB_REC_N]. */
static lb_status store_series(const lb_train_params *p, lb_result *r, const double *rec, int ranks,
                              int64_t done) {
    static const char *const base[LB_REC_N] = {"step_ms",    "comm_ms", "comm_exposed_ms",
                                               "sent_bytes", "loss",    "grad_norm"};
    static const char *const unit[LB_REC_N] = {"ms", "ms", "ms", "bytes", "nats", "norm"};
    for (int64_t i = 0; i < done; i++) {
        bool warm = i < p->warmup;
        double slowest[LB_REC_N] = {0}, loss = 0;
        for (int q = 0; q < ranks; q++)
            for (int k = 0; k < LB_REC_N; k++) {
                double v = rec[((size_t)q * (size_t)done + (size_t)i) * LB_REC_N + k];
                if (v > slowest[k] || q == 0) slowest[k] = v;
                if (k == LB_REC_LOSS) loss += v / ranks;
                if (k == LB_REC_LOSS || k == LB_REC_NORM || ranks == 1) continue;
                char name[LB_NAME_BYTES];
                snprintf(name, sizeof name, "%s%s.r%d", warm ? "warmup_" : "", base[k], q);
                LB_TRY(lb_result_series_push(lb_result_series(r, name, unit[k]), v));
            }
        const char *ms = warm ? "warmup_step_ms" : "step_ms";
        LB_TRY(lb_result_series_push(lb_result_series(r, ms, "ms"), slowest[LB_REC_MS]));
        LB_TRY(lb_result_series_push(lb_result_series(r, warm ? "warmup_loss" : "loss", "nats"),
                                     loss));
        if (warm) continue;
        if (!isnan(slowest[LB_REC_NORM]))
            LB_TRY(lb_result_series_push(lb_result_series(r, "grad_norm", "norm"),
                                         slowest[LB_REC_NORM]));
        for (int k = LB_REC_COMM_MS; k <= LB_REC_SENT && lb_train_ranks(p) > 1; k++)
            LB_TRY(lb_result_series_push(lb_result_series(r, base[k], unit[k]), slowest[k]));
    }
    return LB_OK;
}

lb_status lb_train_store_steps(const lb_train_params *p, lb_result *r, const double *rec,
                               int64_t done, lb_status st, lb_err *err) {
    const int ranks = lb_train_ranks(p), rank = lb_train_rank(p);
    double *all = NULL;
    int gathered = 1;
    if (ranks > 1 && (st == LB_OK || st == LB_ERR_INTERRUPTED || st == LB_ERR_RUNTIME)) {
        all = rank == 0 ? calloc((size_t)ranks * (size_t)done * LB_REC_N + 1, sizeof *all) : NULL;
        lb_err gerr;
        lb_status g = lb_boot_gather(p->boot, rec, (size_t)done * LB_REC_N * sizeof *rec, all,
                                     st == LB_OK ? err : &gerr);
        if (g == LB_OK && all != NULL)
            gathered = ranks;
        else if (st == LB_OK)
            st = g;
    }
    if (rank == 0 && store_series(p, r, gathered > 1 ? all : rec, gathered, done) != LB_OK &&
        st == LB_OK)
        st = lb_fail(err, LB_ERR_NOMEM, "out of host memory for the step samples");
    free(all);
    return st;
}

lb_status lb_train_check_replicas(const lb_train_params *p, const float *params, int64_t n,
                                  lb_result *r, lb_err *err) {
    const int ranks = lb_train_ranks(p);
    if (ranks <= 1) return LB_OK;
    uint64_t h = 1469598103934665603ull; /* FNV-1a, 64 bits */
    const unsigned char *b = (const unsigned char *)params;
    for (size_t i = 0; i < (size_t)n * sizeof *params; i++)
        h = (h ^ b[i]) * 1099511628211ull;
    uint64_t *all = lb_train_rank(p) == 0 ? calloc((size_t)ranks, sizeof *all) : NULL;
    if (lb_train_rank(p) == 0 && all == NULL) return lb_fail(err, LB_ERR_NOMEM, "out of memory");
    lb_status st = lb_boot_gather(p->boot, &h, sizeof h, all, err);
    int32_t differs = -1;
    for (int q = 1; st == LB_OK && all != NULL && q < ranks && differs < 0; q++)
        if (all[q] != all[0]) differs = q;
    free(all);
    if (st == LB_OK) st = lb_boot_bcast(p->boot, &differs, sizeof differs, err);
    if (st != LB_OK) return st;
    if (r != NULL && lb_train_rank(p) == 0)
        lb_result_set_metric(r, "replicas_identical", differs < 0 ? 1 : 0, "bool");
    if (differs >= 0)
        return lb_fail(err, LB_ERR_RUNTIME,
                       "rank %d ended with other parameters than rank 0: the data-parallel steps "
                       "diverged",
                       differs);
    return LB_OK;
}

lb_status lb_train_check_interrupt(const lb_train_params *p, int64_t step, int64_t total,
                                   lb_err *err) {
    int who = lb_signals_interrupted() ? 0 : -1;
    if (lb_train_ranks(p) > 1) LB_TRY(lb_boot_agree_stop(p->boot, who == 0, &who, err));
    if (who < 0) return LB_OK;
    if (lb_train_ranks(p) == 1)
        return lb_fail(err, LB_ERR_INTERRUPTED, "interrupted after %lld of %lld steps",
                       (long long)step, (long long)total);
    return lb_fail(err, LB_ERR_INTERRUPTED,
                   "interrupted (a signal reached rank %d) after %lld of %lld steps", who,
                   (long long)step, (long long)total);
}

#define FIT_MAX_GPUS 4096 /* the most GPUs an out-of-memory message suggests */

/* The memory formula's parts for p at stage z on n ranks. */
static lb_status formula_at(const lb_train_params *p, const lb_model_config *cfg, int z, int n,
                            lb_train_memory *m, lb_err *err) {
    lb_train_params q = *p;
    q.zero = z;
    return lb_train_memory_formula(&q, cfg, n, m, err);
}

/* The fewest GPUs from `ranks` up to FIT_MAX_GPUS, with the lowest stage there, on which p
 * fits free_bytes, as advice (cap bytes); *found false (advice untouched) where none does. */
static lb_status fewest_gpus(const lb_train_params *p, const lb_model_config *cfg, int ranks,
                             double free_bytes, char *advice, size_t cap, bool *found,
                             lb_err *err) {
    lb_train_memory f;
    *found = false;
    for (int n = ranks; n <= FIT_MAX_GPUS; n++)
        for (int s = LB_ZERO_0; s <= LB_ZERO_3; s++) {
            LB_TRY(formula_at(p, cfg, s, n, &f, err));
            if (f.total > free_bytes) continue;
            *found = true;
            snprintf(advice, cap, "--zero %d on %d GPU%s would fit (%.1f GB a GPU)", s, n,
                     n == 1 ? "" : "s", f.total / 1e9);
            return LB_OK;
        }
    return LB_OK;
}

/* Adapters that do not fit free_bytes on `ranks` GPUs: as advice (cap bytes) the options not
 * given that would fit, --quant nf4 (a 16-bit run's NF4 base) and --recompute, each alone,
 * else the two together; else the fewest GPUs with the lowest stage there (ZeRO shards the
 * adapters, not the base or the activations); else a smaller batch. */
static lb_status adapter_advice(const lb_train_params *p, const lb_model_config *cfg, int ranks,
                                double free_bytes, char *advice, size_t cap, lb_err *err) {
    const bool nf4 = p->quant != LB_QUANT_NF4 && p->precision != LB_PREC_FP32;
    static const struct {
        bool nf4, recompute;
        const char *name;
    } options[] = {{true, false, "--quant nf4"},
                   {false, true, "--recompute"},
                   {true, true, "--quant nf4 with --recompute"}};
    size_t len = 0;
    for (int i = 0; i < 3; i++) {
        if ((options[i].nf4 && !nf4) || (options[i].recompute && p->recompute) ||
            (i == 2 && len > 0))
            continue;
        lb_train_params q = *p;
        if (options[i].nf4) q.quant = LB_QUANT_NF4;
        q.recompute = q.recompute || options[i].recompute;
        lb_train_memory f;
        LB_TRY(lb_train_memory_formula(&q, cfg, ranks, &f, err));
        if (f.total <= free_bytes)
            len += (size_t)snprintf(advice + len, cap - len, "%s%s (%.1f GB a GPU)",
                                    len > 0 ? " or " : "", options[i].name, f.total / 1e9);
    }
    if (len > 0) {
        snprintf(advice + len, cap - len, " would fit");
        return LB_OK;
    }
    bool found;
    LB_TRY(fewest_gpus(p, cfg, ranks, free_bytes, advice, cap, &found, err));
    if (!found)
        snprintf(advice, cap, "no stage fits on up to %d GPUs: try a smaller --batch%s%s",
                 FIT_MAX_GPUS, p->recompute ? "" : " or --recompute", nf4 ? " or --quant nf4" : "");
    return LB_OK;
}

lb_status lb_train_check_fit(const lb_train_params *p, const lb_model_config *cfg, int ranks,
                             double free_bytes, lb_err *err) {
    const double P = (double)lb_model_param_count(cfg), GB = 1e9;
    const int z = (int)p->zero;
    lb_train_memory m;
    LB_TRY(formula_at(p, cfg, z, ranks, &m, err));
    if (m.total <= free_bytes) return LB_OK;
    char advice[200];
    if (p->lora_rank > 0) {
        LB_TRY(adapter_advice(p, cfg, ranks, free_bytes, advice, sizeof advice, err));
        return lb_fail(err, LB_ERR_USAGE,
                       "--model %s with rank-%lld adapters on a frozen %s base at --zero %d on %d "
                       "GPU%s needs %.1f GB a GPU: the base %.1f GB, %.2f GB of the adapters' "
                       "weights, gradients, optimizer state and communication buffers, and %.1f "
                       "GB of activations and workspace, but cuda:%d has %.1f GB free: %s",
                       cfg->name, (long long)p->lora_rank,
                       p->quant == LB_QUANT_NF4 ? "NF4" : lb_precision_name(p->precision), z, ranks,
                       ranks == 1 ? "" : "s", m.total / GB, m.base / GB,
                       (m.model_state + m.shard_state + m.buffers) / GB,
                       (m.activations + m.workspace) / GB, p->device_index, free_bytes / GB,
                       advice);
    }
    static const char *formula[2][4] = {{"16P", "4P + 12P/N", "2P + 14P/N", "16P/N"},
                                        {"16P", "8P + 8P/N", "4P + 12P/N", "16P/N"}};
    bool found;
    LB_TRY(fewest_gpus(p, cfg, ranks, free_bytes, advice, sizeof advice, &found, err));
    if (!found)
        snprintf(advice, sizeof advice, "no stage fits on up to %d GPUs: try a smaller --batch%s",
                 FIT_MAX_GPUS, p->recompute ? "" : " or --recompute");
    const double kept = m.model_state + m.shard_state + m.buffers - m.zero_state;
    return lb_fail(err, LB_ERR_USAGE,
                   "--model %s at --zero %d on %d GPU%s needs %.1f GB a GPU: ZeRO's %s for %.2f B "
                   "parameters in %s (%.1f GB), %.1f GB more of state and communication buffers "
                   "as llmbench keeps them, and %.1f GB of activations and workspace, but cuda:%d "
                   "has %.1f GB free: %s",
                   cfg->name, z, ranks, ranks == 1 ? "" : "s", m.total / GB,
                   formula[p->precision == LB_PREC_FP32][z], P / 1e9,
                   lb_precision_name(p->precision), m.zero_state / GB, kept / GB,
                   (m.activations + m.workspace) / GB, p->device_index, free_bytes / GB, advice);
}

lb_status lb_train_save_params(const lb_train_params *p, const lb_model_config *cfg,
                               const float *params, lb_err *err) {
    if (p->save_params == NULL || lb_train_rank(p) != 0) return LB_OK;
    return lb_safetensors_write_params(p->save_params, cfg, params, err);
}

/* With p->lora_rank > 0: adapters on m's frozen base (its projections through NF4 first
 * when asked). */
static lb_status cpu_attach_lora(const lb_train_params *p, const lb_model_config *cfg, lb_model *m,
                                 lb_lora *lora, lb_err *err) {
    lb_lora_config lc;
    LB_TRY(lb_train_lora_config(p, cfg, &lc, err));
    LB_TRY(lb_lora_init(lora, cfg, &lc, (int64_t)m->B * m->T, p->seed ^ LB_LORA_SEED_SALT, err));
    if (lc.quant == LB_QUANT_NF4) LB_TRY(lb_lora_quantize_base(cfg, m->params, err));
    return lb_model_attach_lora(m, lora, err);
}

/* The memory each part of fine-tuning holds into r, once dp's shard is laid out: the
 * adapters' weights and whole gradient (the reference writes it), and at ZeRO 1-3 the
 * gradient shard beside it; the optimizer state: AdamW's m and v of every adapter at stage
 * 0, the shard's fp32 master, m and v at 1-3, whose unused whole moments are freed here. */
static lb_status cpu_lora_memory(const lb_train_params *p, const lb_model *m, lb_lora *lora,
                                 const lb_dp *dp, lb_result *r) {
    const double n = (double)lora->off.total, shard = (double)lb_dp_shard_elems(dp);
    const double u = (double)m->cfg.n_layer * LB_LORA_N_TARGETS * (double)lora->max_tokens *
                     (double)lora->lc.rank;
    const bool sharded = p->zero > 0;
    if (sharded) {
        free(lora->m);
        free(lora->v);
        lora->m = lora->v = NULL;
    }
    LB_TRY(lb_result_set_metric(r, "base_bytes", (double)m->n_params * 4, "bytes"));
    LB_TRY(
        lb_result_set_metric(r, "adapter_bytes", 2 * 4 * n + (sharded ? 4 * shard : 0), "bytes"));
    LB_TRY(
        lb_result_set_metric(r, "optimizer_bytes", sharded ? 3 * 4 * shard : 2 * 4 * n, "bytes"));
    return lb_result_set_metric(
        r, "activation_bytes",
        4 * ((double)m->act_floats + u + (double)lora->max_tokens * lora->lc.rank), "bytes");
}

#define RECORDS_FIRST 1024 /* steps whose records the CPU path holds before it grows them */

/* The step records rec (*held steps of them) grown to hold the next steps: doubled, up to
 * the run's total. Held as the steps go, so a run of very many steps (one meant to end at
 * Ctrl-C) costs the memory of the steps it measured, not of all it could. */
static lb_status grow_records(double **rec, int64_t *held, int64_t total, lb_err *err) {
    int64_t want = *held == 0 ? RECORDS_FIRST : 2 * *held;
    if (want > total) want = total;
    double *more = realloc(*rec, (size_t)want * LB_REC_N * sizeof *more);
    if (more == NULL)
        return lb_fail(err, LB_ERR_NOMEM, "out of host memory for the records of %lld steps",
                       (long long)want);
    *rec = more;
    *held = want;
    return LB_OK;
}

static lb_status train_cpu(const lb_train_params *p, const lb_model_config *cfg,
                           const lb_hf_model *hf, lb_data_loader *data, lb_result *r, lb_err *err) {
    const int ranks = lb_train_ranks(p), rank = lb_train_rank(p);
    const int K = (int)p->grad_accum, B = (int)(p->batch / p->grad_accum), T = (int)p->seq;
    const int64_t total = p->warmup + p->steps;
    const size_t tokens = (size_t)K * (size_t)B * (size_t)T;
    lb_comm *comm = NULL;
    if (ranks > 1) {
        lb_comm_params cp = lb_comm_default_params();
        cp.backend = LB_COMM_BACKEND_MPI;
        cp.op_timeout_s = p->comm_timeout_s;
        cp.setup_timeout_s = lb_boot_timeout_s(p->boot);
        LB_TRY(lb_comm_init(p->boot, &cp, true, &comm, err));
    }
    lb_model m;
    lb_lora lora = {0};
    lb_status st = lb_model_init(&m, cfg, B, T, p->seed, err);
    for (int i = 0; st == LB_OK && hf != NULL && i < m.n_tensors; i++)
        lb_hf_model_read(hf, &m.layout[i], LB_DT_F32, m.params + m.layout[i].offset);
    if (st == LB_OK && p->lora_rank > 0) st = cpu_attach_lora(p, cfg, &m, &lora, err);
    if (st != LB_OK) {
        lb_lora_free(&lora);
        lb_model_free(&m);
        lb_comm_free(comm);
        return st;
    }
    lb_dp_params dpp = {.stage = (lb_zero_stage)p->zero,
                        .bucket_elems = (int64_t)(p->bucket_mib * 1024 * 1024 / sizeof(float)),
                        .grad_accum = K};
    lb_dp *dp = NULL;
    st = lb_dp_init(&dp, &m, comm, &dpp, err);
    if (st == LB_OK && p->lora_rank > 0 && rank == 0) st = cpu_lora_memory(p, &m, &lora, dp, r);
    int32_t *inputs = malloc(tokens * sizeof *inputs);
    int32_t *targets = malloc(tokens * sizeof *targets);
    double *rec = NULL;
    int64_t rec_steps = 0;
    if (st == LB_OK && (!inputs || !targets))
        st = lb_fail(err, LB_ERR_NOMEM, "out of host memory for a batch of %d x %d x %d tokens", K,
                     B, T);
    if (st == LB_OK) st = grow_records(&rec, &rec_steps, total, err);
    lb_adamw_params opt = {
        .lr = (float)p->lr,
        .beta1 = (float)p->beta1,
        .beta2 = (float)p->beta2,
        .eps = (float)p->eps,
        .weight_decay = (float)p->weight_decay,
        .grad_clip = (float)p->grad_clip,
    };
    lb_progress prog;
    lb_progress_init(&prog, p->progress && rank == 0);
    int64_t done = 0;
    double steps_ms = 0; /* the steps' times so far: their mean rate gives the ETA */
    for (int64_t step = 0; st == LB_OK && step < total; step++) {
        if ((st = lb_train_check_interrupt(p, step, total, err)) != LB_OK) break;
        if (step == rec_steps && (st = grow_records(&rec, &rec_steps, total, err)) != LB_OK) break;
        for (int k = 0; k < K; k++)
            lb_data_next_part(data, rank, ranks, inputs + (size_t)k * B * T,
                              targets + (size_t)k * B * T);
        int64_t t0 = lb_clock_now_ns();
        lb_dp_step_info info;
        st = lb_dp_step(dp, inputs, targets, B, T, &opt, (int)step + 1, &info, err);
        if (st != LB_OK) break;
        double *mine = rec + (size_t)step * LB_REC_N;
        mine[LB_REC_MS] = (double)(lb_clock_now_ns() - t0) / 1e6;
        mine[LB_REC_COMM_MS] = info.comm_ms;
        mine[LB_REC_EXPOSED_MS] = info.comm_ms; /* collectives block: none hidden */
        mine[LB_REC_SENT] = info.sent_bytes;
        mine[LB_REC_LOSS] = info.loss;
        mine[LB_REC_NORM] = info.grad_norm;
        done = step + 1;
        if (!isfinite(info.loss))
            st = lb_fail(err, LB_ERR_RUNTIME, "loss is %f at step %lld: training diverged",
                         info.loss, (long long)step);
        bool warm = step < p->warmup;
        char eta[32];
        steps_ms += mine[LB_REC_MS];
        lb_progress_format_eta(
            eta, sizeof eta,
            lb_progress_eta_s((double)(total - done), 1e3 * (double)done / steps_ms));
        lb_progress_update(&prog, false,
                           "train %s cpu x%d zero %d: step %lld/%lld%s loss %.4f %.1f ms/step, "
                           "ETA %s",
                           cfg->name, ranks, p->zero, (long long)done, (long long)total,
                           warm ? " (warm-up)" : "", info.loss, mine[LB_REC_MS], eta);
    }
    lb_progress_done(&prog);
    if (st == LB_OK && (ranks > 1 || p->save_params != NULL)) st = lb_dp_gather_params(dp, err);
    if (st == LB_OK)
        st = p->lora_rank > 0 ? lb_train_check_replicas(p, lora.params, lora.off.total, r, err)
                              : lb_train_check_replicas(p, m.params, m.n_params, r, err);
    if (st == LB_OK) st = lb_train_save_params(p, cfg, m.params, err);
    st = lb_train_store_steps(p, r, rec, done, st, err);
    if (rank == 0) {
        lb_result_set_metric(r, "peak_host_mem_bytes", (double)lb_provenance_peak_rss_bytes(),
                             "bytes");
        if (dp != NULL)
            lb_result_set_metric(r, "shard_elems", (double)lb_dp_shard_elems(dp), "elements");
    }
    free(rec);
    free(inputs);
    free(targets);
    lb_dp_free(dp);
    lb_model_free(&m);
    lb_lora_free(&lora);
    lb_comm_free(comm);
    return st;
}

int64_t lb_train_trainable_params(const lb_train_params *p, const lb_model_config *cfg) {
    lb_lora_config lc;
    if (p->lora_rank > 0 && lb_train_lora_config(p, cfg, &lc, NULL) == LB_OK)
        return lb_lora_param_count(cfg, &lc);
    return lb_model_param_count(cfg);
}

double lb_train_flops_per_token(const lb_train_params *p, const lb_model_config *cfg) {
    lb_lora_config lc;
    if (p->lora_rank > 0 && lb_train_lora_config(p, cfg, &lc, NULL) == LB_OK)
        return lb_lora_train_flops_per_token(cfg, &lc, p->seq);
    return lb_model_train_flops_per_token(cfg, p->seq);
}

/* Step-time drift: the medians of the first and the last half of the timed steps, from
 * this many steps on; beyond DRIFT_WARN_PCT percent the summary says so. */
#define DRIFT_MIN_STEPS 8
#define DRIFT_WARN_PCT  3.0

double lb_train_scaling_efficiency(double tok_per_s, int ranks, double base_tok_per_s) {
    return tok_per_s / ((double)ranks * base_tok_per_s);
}

void lb_train_scaling_group(char *out, size_t cap) {
    snprintf(out, cap, "scaling-%lld-%ld", (long long)time(NULL), (long)getpid());
}

double lb_train_hour_cost(const lb_train_params *p) {
    return p->hour_cost > 0 ? p->hour_cost : p->gpu_hour_price * lb_train_ranks(p);
}

double lb_train_cost_per_1k_samples(double hour_cost, double samples_per_s) {
    return hour_cost / 3600.0 / samples_per_s * 1e3;
}

double lb_train_cost_per_1m_tokens(double hour_cost, double tok_per_s) {
    return hour_cost / 3600.0 / tok_per_s * 1e6;
}

int lb_train_slowest_rank(const double *median_ms, int ranks, double *pct_over_fastest) {
    int slow = 0, fast = 0;
    for (int q = 1; q < ranks; q++) {
        if (median_ms[q] > median_ms[slow]) slow = q;
        if (median_ms[q] < median_ms[fast]) fast = q;
    }
    *pct_over_fastest = 100.0 * (median_ms[slow] - median_ms[fast]) / median_ms[fast];
    return slow;
}

lb_status lb_train_memory_metrics(const lb_train_params *p, const lb_model_config *cfg,
                                  lb_result *r, lb_err *err) {
    /* adapters: no ZeRO formula of their state (adapter_bytes, optimizer_bytes hold it), and
     * the CPU reference's memory is the host's */
    const bool lora = p->lora_rank > 0;
    if (lora && p->device != LB_DEVICE_CUDA) return LB_OK;
    lb_train_memory m;
    LB_TRY(lb_train_memory_formula(p, cfg, lb_train_ranks(p), &m, err));
    if (!lora) LB_TRY(lb_result_set_metric(r, "zero_state_bytes_formula", m.zero_state, "bytes"));
    if (p->device != LB_DEVICE_CUDA) return LB_OK;
    if (lora) {
        LB_TRY(lb_result_set_metric(r, "base_bytes_formula", m.base, "bytes"));
        LB_TRY(lb_result_set_metric(r, "adapter_state_bytes_formula",
                                    m.model_state + m.shard_state + m.buffers, "bytes"));
    } else {
        LB_TRY(lb_result_set_metric(r, "zero_extra_bytes_formula",
                                    m.model_state + m.shard_state + m.buffers - m.zero_state,
                                    "bytes"));
    }
    LB_TRY(
        lb_result_set_metric(r, "activation_bytes_formula", m.activations + m.workspace, "bytes"));
    LB_TRY(lb_result_set_metric(r, "memory_formula_bytes", m.total, "bytes"));
    double peak = lb_result_metric(r, "peak_device_bytes");
    if (isfinite(peak))
        LB_TRY(lb_result_set_metric(r, "peak_over_memory_formula", peak / m.total, "ratio"));
    return LB_OK;
}

/* The metrics of several ranks: communication, traffic and memory beside ZeRO's formulas,
 * the slowest rank, scaling efficiency and cost. */
static lb_status summarize_ranks(const lb_train_params *p, const lb_model_config *cfg, lb_result *r,
                                 double tok_per_s, double samples_per_s) {
    const int ranks = lb_train_ranks(p);
    const double P = (double)lb_model_param_count(cfg);
    const lb_zero_stage z = (lb_zero_stage)p->zero;
    /* adapters: their traffic by zero.h's formula, their state in adapter/optimizer_bytes */
    const bool lora = p->lora_rank > 0;
    /* GPU runs store them beside their peak (train_cuda.c) */
    if (p->device != LB_DEVICE_CUDA) LB_TRY(lb_train_memory_metrics(p, cfg, r, NULL));
    if (ranks > 1) {
        double n = (double)lb_train_trainable_params(p, cfg);
        LB_TRY(lb_result_set_metric(r, "tokens_per_s_per_gpu", tok_per_s / ranks, "tok/s"));
        LB_TRY(lb_result_set_metric(r, "sent_bytes_formula",
                                    lora ? lb_zero_adapter_traffic_bytes(z, p->precision, n, ranks)
                                         : lb_zero_traffic_bytes(z, p->precision, P, ranks),
                                    "bytes"));
    }
    const lb_series *comm = lb_result_find_series(r, "comm_ms");
    const lb_series *sent = lb_result_find_series(r, "sent_bytes");
    const lb_series *ms = lb_result_find_series(r, "step_ms");
    if (comm != NULL && comm->n > 0) {
        double c = lb_stats_median(comm->values, comm->n);
        LB_TRY(lb_result_set_metric(r, "comm_ms_median", c, "ms"));
    }
    const lb_series *exposed = lb_result_find_series(r, "comm_exposed_ms");
    if (exposed != NULL && exposed->n > 0) {
        double e = lb_stats_median(exposed->values, exposed->n);
        LB_TRY(lb_result_set_metric(r, "comm_exposed_ms_median", e, "ms"));
        LB_TRY(lb_result_set_metric(r, "comm_exposed_pct",
                                    100.0 * e / lb_stats_median(ms->values, ms->n), "%"));
    }
    if (sent != NULL && sent->n > 0)
        LB_TRY(lb_result_set_metric(r, "sent_bytes_per_step",
                                    lb_stats_median(sent->values, sent->n), "bytes"));
    if (ranks > 1) {
        double *med = calloc((size_t)ranks, sizeof *med);
        if (med == NULL) return LB_ERR_NOMEM;
        int have = 0;
        for (int q = 0; q < ranks; q++) {
            char name[LB_NAME_BYTES];
            snprintf(name, sizeof name, "step_ms.r%d", q);
            const lb_series *s = lb_result_find_series(r, name);
            if (s != NULL && s->n > 0) med[q] = lb_stats_median(s->values, s->n), have++;
        }
        if (have == ranks) {
            double pct = 0;
            int slow = lb_train_slowest_rank(med, ranks, &pct);
            lb_status st = lb_result_set_metric(r, "slowest_rank", slow, "rank");
            if (st == LB_OK) st = lb_result_set_metric(r, "slowest_rank_pct", pct, "%");
            if (st != LB_OK) {
                free(med);
                return st;
            }
        }
        free(med);
    }
    if (p->base_tok_per_s > 0)
        LB_TRY(lb_result_set_metric(
            r, "scaling_efficiency",
            lb_train_scaling_efficiency(tok_per_s, ranks, p->base_tok_per_s), "ratio"));
    return LB_OK;
}

double lb_train_timed_seconds(const lb_result *r, int ranks) {
    const lb_series *ms = lb_result_find_series(r, "step_ms");
    double total = 0.0, slowest = 0.0;
    for (size_t i = 0; ms != NULL && i < ms->n; i++)
        total += ms->values[i];
    for (int q = 0; q < ranks && ranks > 1; q++) {
        char name[LB_NAME_BYTES];
        snprintf(name, sizeof name, "step_ms.r%d", q);
        const lb_series *own = lb_result_find_series(r, name);
        if (own == NULL || ms == NULL || own->n != ms->n) return total / 1e3;
        double sum = 0.0;
        for (size_t i = 0; i < own->n; i++)
            sum += own->values[i];
        if (sum > slowest) slowest = sum;
    }
    return (ranks > 1 ? slowest : total) / 1e3;
}

lb_status lb_train_summarize(const lb_train_params *p, const lb_model_config *cfg, lb_result *r) {
    const lb_series *ms = lb_result_find_series(r, "step_ms");
    const lb_series *loss = lb_result_find_series(r, "loss");
    if (ms == NULL || ms->n == 0) return LB_OK;
    const double ranks = lb_train_ranks(p);
    const double total_s = lb_train_timed_seconds(r, (int)ranks);
    double tokens = (double)p->batch * ranks * (double)p->seq * (double)ms->n;
    double tok_per_s = tokens / total_s;
    double samples_per_s = (double)p->batch * ranks * (double)ms->n / total_s;
    double flops_per_token = lb_train_flops_per_token(p, cfg);
    lb_stats_summary s = lb_stats_summarize(ms->values, ms->n);
    double lo, hi;
    lb_stats_median_ci(ms->values, ms->n, 1000, 0.95, 12345, &lo, &hi);
    LB_TRY(lb_result_set_metric(r, "tokens_per_s", tok_per_s, "tok/s"));
    LB_TRY(lb_result_set_metric(r, "samples_per_s", samples_per_s, "samples/s"));
    const double hour_cost = lb_train_hour_cost(p);
    if (hour_cost > 0) {
        LB_TRY(lb_result_set_metric(r, "cost_per_1k_samples",
                                    lb_train_cost_per_1k_samples(hour_cost, samples_per_s),
                                    "cost"));
        LB_TRY(lb_result_set_metric(r, "cost_per_1m_tokens",
                                    lb_train_cost_per_1m_tokens(hour_cost, tok_per_s), "cost"));
    }
    LB_TRY(lb_result_set_metric(r, "step_ms_median", s.median, "ms"));
    LB_TRY(lb_result_set_metric(r, "step_ms_mean", s.mean, "ms"));
    LB_TRY(lb_result_set_metric(r, "step_ms_std", s.std, "ms"));
    LB_TRY(lb_result_set_metric(r, "step_ms_min", s.min, "ms"));
    LB_TRY(lb_result_set_metric(r, "step_ms_max", s.max, "ms"));
    LB_TRY(lb_result_set_metric(r, "step_ms_median_ci_lo", lo, "ms"));
    LB_TRY(lb_result_set_metric(r, "step_ms_median_ci_hi", hi, "ms"));
    LB_TRY(lb_result_set_metric(r, "timed_steps", (double)ms->n, "steps"));
    if (ms->n >= DRIFT_MIN_STEPS) {
        size_t half = ms->n / 2;
        double first = lb_stats_median(ms->values, half);
        double second = lb_stats_median(ms->values + ms->n - half, half);
        double drift = 100.0 * (second - first) / first;
        LB_TRY(lb_result_set_metric(r, "step_ms_drift_pct", drift, "%"));
        if (fabs(drift) > DRIFT_WARN_PCT)
            LB_WARN("step times are not steady: the median of the second half of the timed "
                    "steps is %+.1f%% off the first half's (%.2f vs %.2f ms; clocks settling "
                    "under a power limit, or other work on the machine); more --steps or "
                    "--warmup give a steadier figure",
                    drift, second, first);
    }
    if (loss != NULL && loss->n > 0)
        LB_TRY(lb_result_set_metric(r, "final_loss", loss->values[loss->n - 1], "nats"));
    LB_TRY(lb_result_set_metric(r, "flops_per_token", flops_per_token, "FLOP/token"));
    double trainable = (double)lb_train_trainable_params(p, cfg);
    LB_TRY(lb_result_set_metric(r, "trainable_params", trainable, "count"));
    LB_TRY(lb_result_set_metric(r, "grad_bytes_per_step", 4 * trainable, "bytes"));
    LB_TRY(
        lb_result_set_metric(r, "achieved_gflops", flops_per_token * tok_per_s / 1e9, "GFLOP/s"));
    return summarize_ranks(p, cfg, r, tok_per_s, samples_per_s);
}

bool lb_train_model_is_dir(const lb_train_params *p) {
    struct stat st;
    return p->model != NULL && stat(p->model, &st) == 0 && S_ISDIR(st.st_mode);
}

/* The model's configuration: a preset's, or a Hugging Face directory's (opened and checked
 * whole, then closed). */
static lb_status resolve_model(const lb_train_params *p, lb_model_config *cfg, lb_err *err) {
    if (!lb_train_model_is_dir(p)) {
        if (p->model != NULL && strchr(p->model, '/') != NULL)
            return lb_fail(err, LB_ERR_USAGE,
                           "--model %s: no such directory; give a Hugging Face model directory "
                           "(config.json and safetensors) or a preset name",
                           p->model);
        return lb_model_config_preset(p->model, cfg, err);
    }
    lb_hf_model hf;
    LB_TRY(lb_hf_model_open(&hf, p->model, err));
    *cfg = hf.cfg;
    lb_hf_model_close(&hf);
    return LB_OK;
}

/* The model, and the sequence length it gives when --seq was not. */
static lb_status resolve_model_and_seq(lb_train_params *p, lb_model_config *cfg, lb_err *err) {
    LB_TRY(resolve_model(p, cfg, err));
    if (p->seq == 0) p->seq = cfg->max_seq < 64 ? cfg->max_seq : 64;
    return LB_OK;
}

/* The data loader for `ranks` ranks: every rank's micro-batch together is what it cuts parts
 * of. */
static lb_status open_data(const lb_train_params *p, const lb_model_config *cfg, int ranks,
                           lb_data_loader **data, lb_err *err) {
    return lb_data_open_ranks(p->data, cfg->vocab_size, p->batch / p->grad_accum, ranks, p->seq,
                              p->seed, data, err);
}

/* Opens the data once, to refuse a file that cannot feed this model and batch on `ranks`
 * ranks. */
static lb_status check_data(const lb_train_params *p, const lb_model_config *cfg, int ranks,
                            lb_err *err) {
    lb_data_loader *data = NULL;
    LB_TRY(open_data(p, cfg, ranks, &data, err));
    lb_data_close(data);
    return LB_OK;
}

lb_status lb_train_check_inputs(const lb_train_params *params, int ranks, lb_err *err) {
    lb_train_params p = *params;
    lb_model_config cfg;
    LB_TRY(resolve_model_and_seq(&p, &cfg, err));
    LB_TRY(lb_train_validate(&p, &cfg, err));
    return check_data(&p, &cfg, ranks, err);
}

lb_status lb_train_resolve(lb_train_params *p, lb_model_config *cfg, lb_err *err) {
    LB_TRY(resolve_model_and_seq(p, cfg, err));
    int gpus = lb_devinfo_cuda_device_count();
    if (p->device == LB_DEVICE_AUTO) {
        p->device = gpus > 0 ? LB_DEVICE_CUDA : LB_DEVICE_CPU;
        if (p->device == LB_DEVICE_CPU) {
            LB_WARN("no CUDA GPU found (or this build has no CUDA): training on the CPU");
            if (p->precision != LB_PREC_FP32) {
                LB_WARN("the CPU computes in fp32: --precision %s is ignored",
                        lb_precision_name(p->precision));
                p->precision = LB_PREC_FP32;
            }
        }
    }
    if (p->device == LB_DEVICE_CPU && lb_train_ranks(p) > 1 &&
        lb_boot_source_of(p->boot) != LB_BOOT_MPI) /* the CPU ranks' collectives are MPI's */
        return lb_fail(err, LB_ERR_USAGE,
                       "%d ranks on the CPU train over MPI, but this job was started as '%s': "
                       "start it with mpirun or srun --mpi=pmix, or train on GPUs (--device cuda)",
                       lb_train_ranks(p), lb_boot_source_name(lb_boot_source_of(p->boot)));
    if (p->device == LB_DEVICE_CPU && p->fp32_matmul == LB_BLAS_FP32_AUTO)
        p->fp32_matmul = LB_BLAS_FP32_IEEE; /* what the CPU reference computes */
    LB_TRY(lb_train_validate(p, cfg, err));
    if (p->device == LB_DEVICE_CUDA) {
#ifdef LB_HAVE_CUDA
        if (gpus == 0)
            return lb_fail(err, LB_ERR_UNSUPPORTED,
                           "--device cuda was asked but no CUDA GPU is visible (no driver, no "
                           "device, or CUDA_VISIBLE_DEVICES hides them); use --device cpu");
        if (lb_train_ranks(p) > 1 && p->device_index >= gpus)
            return lb_fail(err, LB_ERR_USAGE,
                           "%d ranks on host %s but %d GPU(s) there: start at most one rank per "
                           "GPU",
                           lb_boot_local_size(p->boot), lb_boot_host(p->boot), gpus);
        if (p->device_index >= gpus)
            return lb_fail(err, LB_ERR_UNSUPPORTED,
                           "--device cuda:%d: no such GPU; %d visible, cuda:0 to cuda:%d",
                           p->device_index, gpus, gpus - 1);
        LB_TRY(lb_train_cuda_check_fit(p, cfg, err));
#else
        return lb_fail(err, LB_ERR_UNSUPPORTED,
                       "--device cuda was asked but this llmbench was built without CUDA");
#endif
    }
    return check_data(p, cfg, lb_train_ranks(p), err);
}

lb_status lb_train_run(const lb_train_params *params, lb_result *r, lb_err *err) {
    lb_train_params p = *params;
    lb_model_config cfg;
    LB_TRY(lb_train_resolve(&p, &cfg, err));
    lb_train_record_config(&p, &cfg, r);
    lb_hf_model hf = {0};
    bool dir = lb_train_model_is_dir(&p);
    if (dir) LB_TRY(lb_hf_model_open(&hf, p.model, err));
    lb_data_loader *data = NULL;
    lb_status st = open_data(&p, &cfg, lb_train_ranks(&p), &data, err);
    if (st != LB_OK) {
        lb_hf_model_close(&hf);
        return st;
    }
    const lb_hf_model *weights = dir ? &hf : NULL; /* NULL: random weights */
    st = p.device == LB_DEVICE_CUDA ? lb_train_cuda_run(&p, &cfg, weights, data, r, err)
                                    : train_cpu(&p, &cfg, weights, data, r, err);
    lb_data_close(data);
    lb_hf_model_close(&hf);
    lb_status sum = lb_train_summarize(&p, &cfg, r);
    return st != LB_OK ? st : sum;
}
