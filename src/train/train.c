/* train.c: the training benchmark: validation, the CPU path on the reference model,
 * dispatch to the CUDA path, and the summary shared by both (see train.h).
 *
 * The CPU path times each whole step (batch fetch excluded: forward, backward, AdamW)
 * with the monotonic clock. Warm-up steps are measured and stored in their own series so
 * the summary of the timed steps never includes them but nothing is thrown away. */
#include "train/train.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/clock.h"
#include "core/log.h"
#include "core/progress.h"
#include "core/provenance.h"
#include "core/signals.h"
#include "core/stats.h"
#include "gpu/devinfo.h"
#include "model/model.h"
#include "train/data.h"
#include "train/train_cuda.h"

lb_train_params lb_train_default_params(void) {
    return (lb_train_params){
        .model = "gpt2-124m",
        .device = LB_DEVICE_AUTO,
        .device_index = 0,
        .batch = 4,
        .seq = 64,
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
                         .alpha = (float)(p->lora_alpha > 0 ? p->lora_alpha : LORA_DEFAULT_ALPHA),
                         .quant = p->quant};
    LB_TRY(lb_lora_targets_parse(p->lora_targets ? p->lora_targets : "all", cfg->family,
                                 &out->targets, err));
    return lb_lora_config_check(out, cfg, err);
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
    if (p->lora_rank == 0 && (p->lora_alpha > 0 || p->lora_targets || p->quant != LB_QUANT_NONE))
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
    if (p->batch * p->seq > INT32_MAX)
        return lb_fail(err, LB_ERR_USAGE, "--batch x --seq = %lld tokens per step is too many",
                       (long long)(p->batch * p->seq));
    return LB_OK;
}

static const char *device_name(lb_device_kind d) {
    return d == LB_DEVICE_CUDA ? "cuda" : d == LB_DEVICE_CPU ? "cpu" : "auto";
}

static void record_config(const lb_train_params *p, const lb_model_config *cfg, lb_result *r) {
    json_t *c = r->config;
    json_object_set_new(c, "model", json_string(cfg->name));
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
}

/* With p->lora_rank > 0: adapters on m's frozen base (its projections through NF4 first
 * when asked), and the memory each part holds into r. */
static lb_status cpu_attach_lora(const lb_train_params *p, const lb_model_config *cfg, lb_model *m,
                                 lb_lora *lora, lb_result *r, lb_err *err) {
    lb_lora_config lc;
    LB_TRY(lb_train_lora_config(p, cfg, &lc, err));
    LB_TRY(lb_lora_init(lora, cfg, &lc, (int64_t)m->B * m->T, p->seed ^ LB_LORA_SEED_SALT, err));
    if (lc.quant == LB_QUANT_NF4) LB_TRY(lb_lora_quantize_base(cfg, m->params, err));
    LB_TRY(lb_model_attach_lora(m, lora, err));
    const double n = (double)lora->off.total;
    const double u = (double)cfg->n_layer * LB_LORA_N_TARGETS * (double)lora->max_tokens * lc.rank;
    LB_TRY(lb_result_set_metric(r, "base_bytes", (double)m->n_params * 4, "bytes"));
    LB_TRY(lb_result_set_metric(r, "adapter_bytes", 2 * 4 * n, "bytes"));
    LB_TRY(lb_result_set_metric(r, "optimizer_bytes", 2 * 4 * n, "bytes"));
    LB_TRY(lb_result_set_metric(
        r, "activation_bytes", 4 * ((double)m->act_floats + u + (double)lora->max_tokens * lc.rank),
        "bytes"));
    return LB_OK;
}

static lb_status train_cpu(const lb_train_params *p, const lb_model_config *cfg,
                           lb_data_loader *data, lb_result *r, lb_err *err) {
    int B = (int)p->batch, T = (int)p->seq;
    lb_model m;
    lb_lora lora = {0};
    LB_TRY(lb_model_init(&m, cfg, B, T, p->seed, err));
    if (p->lora_rank > 0) {
        lb_status st = cpu_attach_lora(p, cfg, &m, &lora, r, err);
        if (st != LB_OK) {
            lb_lora_free(&lora);
            lb_model_free(&m);
            return st;
        }
    }
    int32_t *inputs = malloc((size_t)B * T * sizeof *inputs);
    int32_t *targets = malloc((size_t)B * T * sizeof *targets);
    if (inputs == NULL || targets == NULL) {
        free(inputs);
        free(targets);
        lb_lora_free(&lora);
        lb_model_free(&m);
        return lb_fail(err, LB_ERR_NOMEM, "out of host memory for a batch of %d x %d tokens", B, T);
    }
    /* Create every series first: pointers stay valid once no more are created. */
    lb_result_series(r, "warmup_step_ms", "ms");
    lb_result_series(r, "warmup_loss", "nats");
    lb_result_series(r, "step_ms", "ms");
    lb_result_series(r, "loss", "nats");
    lb_series *warm_ms = lb_result_series(r, "warmup_step_ms", "ms");
    lb_series *warm_loss = lb_result_series(r, "warmup_loss", "nats");
    lb_series *step_ms = lb_result_series(r, "step_ms", "ms");
    lb_series *loss_s = lb_result_series(r, "loss", "nats");

    lb_adamw_params opt = {
        .lr = (float)p->lr,
        .beta1 = (float)p->beta1,
        .beta2 = (float)p->beta2,
        .eps = (float)p->eps,
        .weight_decay = (float)p->weight_decay,
        .grad_clip = (float)p->grad_clip,
    };
    lb_progress prog;
    lb_progress_init(&prog, p->progress);
    lb_status st = LB_OK;
    int64_t total = p->warmup + p->steps;
    for (int64_t step = 0; step < total; step++) {
        if (lb_signals_interrupted()) {
            st = lb_fail(err, LB_ERR_INTERRUPTED, "interrupted after %lld of %lld steps",
                         (long long)step, (long long)total);
            break;
        }
        lb_data_next(data, inputs, targets);
        int64_t t0 = lb_clock_now_ns();
        float loss = 0.0f;
        lb_model_forward(&m, inputs, targets, B, T, &loss);
        lb_model_zero_grad(&m);
        lb_model_backward(&m);
        lb_model_adamw_step(&m, &opt, (int)step + 1, NULL);
        double ms = (double)(lb_clock_now_ns() - t0) / 1e6;
        bool warm = step < p->warmup;
        if (lb_result_series_push(warm ? warm_ms : step_ms, ms) != LB_OK ||
            lb_result_series_push(warm ? warm_loss : loss_s, loss) != LB_OK) {
            st = lb_fail(err, LB_ERR_NOMEM, "out of host memory for the step samples");
            break;
        }
        if (!isfinite(loss)) {
            st = lb_fail(err, LB_ERR_RUNTIME, "loss is %f at step %lld: training diverged", loss,
                         (long long)step);
            break;
        }
        lb_progress_update(&prog, false, "train %s cpu: step %lld/%lld%s loss %.4f %.1f ms/step",
                           cfg->name, (long long)step + 1, (long long)total,
                           warm ? " (warm-up)" : "", loss, ms);
    }
    lb_progress_done(&prog);
    lb_result_set_metric(r, "peak_host_mem_bytes", (double)lb_provenance_peak_rss_bytes(), "bytes");
    free(inputs);
    free(targets);
    lb_model_free(&m);
    lb_lora_free(&lora);
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

lb_status lb_train_summarize(const lb_train_params *p, const lb_model_config *cfg, lb_result *r) {
    const lb_series *ms = lb_result_find_series(r, "step_ms");
    const lb_series *loss = lb_result_find_series(r, "loss");
    if (ms == NULL || ms->n == 0) return LB_OK;
    double total_s = 0.0;
    for (size_t i = 0; i < ms->n; i++)
        total_s += ms->values[i] / 1e3;
    double tokens = (double)p->batch * (double)p->seq * (double)ms->n;
    double tok_per_s = tokens / total_s;
    double flops_per_token = lb_train_flops_per_token(p, cfg);
    lb_stats_summary s = lb_stats_summarize(ms->values, ms->n);
    double lo, hi;
    lb_stats_median_ci(ms->values, ms->n, 1000, 0.95, 12345, &lo, &hi);
    LB_TRY(lb_result_set_metric(r, "tokens_per_s", tok_per_s, "tok/s"));
    double samples_per_s = (double)p->batch * (double)ms->n / total_s;
    LB_TRY(lb_result_set_metric(r, "samples_per_s", samples_per_s, "samples/s"));
    if (p->hour_cost > 0)
        LB_TRY(lb_result_set_metric(r, "cost_per_1k_samples",
                                    p->hour_cost / 3600.0 / samples_per_s * 1000.0, "cost"));
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
    LB_TRY(lb_result_set_metric(r, "flops_per_token", flops_per_token, "FLOP"));
    double trainable = (double)lb_train_trainable_params(p, cfg);
    LB_TRY(lb_result_set_metric(r, "trainable_params", trainable, "count"));
    LB_TRY(lb_result_set_metric(r, "grad_bytes_per_step", 4 * trainable, "bytes"));
    LB_TRY(
        lb_result_set_metric(r, "achieved_gflops", flops_per_token * tok_per_s / 1e9, "GFLOP/s"));
    return LB_OK;
}

lb_status lb_train_resolve(lb_train_params *p, lb_model_config *cfg, lb_err *err) {
    LB_TRY(lb_model_config_preset(p->model, cfg, err));
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
    if (p->device == LB_DEVICE_CPU && p->fp32_matmul == LB_BLAS_FP32_AUTO)
        p->fp32_matmul = LB_BLAS_FP32_IEEE; /* what the CPU reference computes */
    LB_TRY(lb_train_validate(p, cfg, err));
    if (p->device == LB_DEVICE_CUDA) {
#ifdef LB_HAVE_CUDA
        if (gpus == 0)
            return lb_fail(err, LB_ERR_UNSUPPORTED,
                           "--device cuda was asked but no CUDA GPU is visible (no driver, no "
                           "device, or CUDA_VISIBLE_DEVICES hides them); use --device cpu");
        if (p->device_index >= gpus)
            return lb_fail(err, LB_ERR_UNSUPPORTED,
                           "--device cuda:%d: no such GPU; %d visible, cuda:0 to cuda:%d",
                           p->device_index, gpus, gpus - 1);
#else
        return lb_fail(err, LB_ERR_UNSUPPORTED,
                       "--device cuda was asked but this llmbench was built without CUDA");
#endif
    }
    lb_data_loader *data = NULL;
    LB_TRY(lb_data_open(p->data, cfg->vocab_size, p->batch, p->seq, p->seed, &data, err));
    lb_data_close(data);
    return LB_OK;
}

lb_status lb_train_run(const lb_train_params *params, lb_result *r, lb_err *err) {
    lb_train_params p = *params;
    lb_model_config cfg;
    LB_TRY(lb_train_resolve(&p, &cfg, err));
    record_config(&p, &cfg, r);
    lb_data_loader *data = NULL;
    LB_TRY(lb_data_open(p.data, cfg.vocab_size, p.batch, p.seq, p.seed, &data, err));
    lb_status st = p.device == LB_DEVICE_CUDA ? lb_train_cuda_run(&p, &cfg, data, r, err)
                                              : train_cpu(&p, &cfg, data, r, err);
    lb_data_close(data);
    lb_status sum = lb_train_summarize(&p, &cfg, r);
    return st != LB_OK ? st : sum;
}
