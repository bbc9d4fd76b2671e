/* train.h: the training benchmark workload.
 *
 * Data parallel: with a job of several ranks (params.boot, comm/boot.h) every rank calls
 * lb_train_run with the same parameters; each trains on its part of every global batch
 * (--batch sequences per rank, split into grad_accum micro-batches; train/data.h gives
 * rank r of N rows [r B/N, (r + 1) B/N) of the batch one rank would read, so N ranks with
 * batch B read what one rank with batch N x B reads) under ZeRO stage `zero`
 * (train/dp.h on the CPU reference, train/dp_cuda.h on GPUs, stages 0-3 on both), and
 * rank 0's result receives every rank's per-step series.
 *
 * lb_train_run() resolves the model (a preset, or a Hugging Face directory whose weights
 * it loads through model/hf_model.h), refuses configurations that cannot work
 * before anything runs, opens the data, runs W warm-up steps (measured and kept apart)
 * and N timed steps on the CPU reference or on a CUDA device, and fills an lb_result:
 * the configuration, raw series (warmup_step_ms, warmup_loss, step_ms, loss: one value
 * per step) and the summary metrics of docs/METRICS.md. Interrupted (core/signals.h), it
 * returns LB_ERR_INTERRUPTED with every step measured so far in the result. It does not
 * touch the results store and prints nothing but progress on stderr. */
#ifndef LB_TRAIN_TRAIN_H
#define LB_TRAIN_TRAIN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "comm/boot.h"
#include "core/precision.h"
#include "core/result.h"
#include "core/status.h"
#include "gpu/blas/matmul.h"
#include "model/attn_choice.h"
#include "model/config.h"
#include "model/lora.h"

typedef enum {
    LB_DEVICE_AUTO = 0, /* CUDA when a GPU is present, else the CPU (said on stderr) */
    LB_DEVICE_CPU,
    LB_DEVICE_CUDA,
} lb_device_kind;

typedef struct {
    const char *model; /* preset name (model/config.h: random weights of its shape), or a
                        * Hugging Face model directory (model/hf_model.h: its configuration
                        * and weights) */
    lb_device_kind device;
    int device_index; /* CUDA device ordinal for LB_DEVICE_CUDA */
    int64_t batch;    /* sequences per step */
    int64_t seq;      /* tokens per sequence; 0: 64, or the context when shorter */
    int64_t steps;    /* timed steps */
    int64_t warmup;   /* untimed steps before them */
    lb_precision precision;
    double lr; /* AdamW learning rate */
    double beta1, beta2, eps;
    double weight_decay; /* applied to 2-D weight matrices only */
    double grad_clip;    /* global-norm clip; 0 disables */
    const char *data;    /* "synthetic", "repeat" or a .bin token shard path */
    uint64_t seed;
    lb_blas_fp32_mode fp32_matmul; /* CUDA fp32: how matrix products run (--tf32: TF32) */
    bool recompute;                /* CUDA: recompute activations in backward to save memory */
    bool gemm_heuristic_only;      /* CUDA: cuBLASLt's first heuristic algorithm, no timing */
    bool no_graph;                 /* CUDA: every step kernel by kernel, never a graph (tests) */
    lb_gpu_attn_choice attention;  /* CUDA fp16/bf16: whose attention kernels */
    double peak_tflops;            /* dense peak for MFU; 0 = look the GPU up in the table */
    double hour_cost;              /* price of the machine per hour (any currency); 0: no cost */
    double gpu_hour_price;         /* price of one GPU per hour: x the run's GPUs; 0: none */
    int64_t lora_rank;             /* 0: every parameter trains; else LoRA adapters of this rank
                                    * on a frozen base (model/lora.h) */
    double lora_alpha;             /* adapter scale alpha / rank; 0: 16 */
    const char *lora_targets;      /* comma-separated projections or "all"; NULL: all */
    lb_quant_kind quant;           /* the frozen base's projections: none or nf4 (QLoRA) */
    bool progress;                 /* a progress line on stderr */
    int zero;                      /* ZeRO stage 0-3 (train/zero.h) */
    int64_t grad_accum;            /* micro-batches each step's batch is split into */
    double bucket_mib;             /* most gradient bytes a communication bucket holds, MiB */
    double base_tok_per_s;         /* one rank's tokens/s in this configuration; 0: unknown */
    const char *save_params;       /* NULL, or where rank 0 writes the final fp32 parameters
                                    * (safetensors) */
    lb_boot *boot;                 /* the job (comm/boot.h), kept; NULL: this process alone */
    double comm_timeout_s;         /* deadline of each collective, s */
} lb_train_params;

lb_train_params lb_train_default_params(void);

/* The adapter configuration of p for model cfg (p->lora_rank > 0), checked against it;
 * LB_ERR_USAGE naming the option otherwise. */
lb_status lb_train_lora_config(const lb_train_params *p, const lb_model_config *cfg,
                               lb_lora_config *out, lb_err *err);

/* Checks the parameters against the model; LB_ERR_USAGE with a sentence naming the
 * option when a configuration cannot work. */
lb_status lb_train_validate(const lb_train_params *p, const lb_model_config *cfg, lb_err *err);

/* Whether p->model names a directory (a Hugging Face model) rather than a preset. */
bool lb_train_model_is_dir(const lb_train_params *p);

/* Everything that can be refused before a run starts: looks the model up (into *cfg: the
 * preset, or the directory's config.json with every weight checked by name, shape and
 * type),
 * turns LB_DEVICE_AUTO into CPU or CUDA (saying so on stderr when it falls back to the
 * CPU), validates the parameters and opens the data once to validate it. Updates *p.
 * LB_ERR_USAGE, LB_ERR_FORMAT or LB_ERR_IO for bad input; LB_ERR_UNSUPPORTED when CUDA
 * was asked for and is not there. */
lb_status lb_train_resolve(lb_train_params *p, lb_model_config *cfg, lb_err *err);

/* The part of lb_train_resolve that does not depend on the machine's GPUs: the model, the
 * parameters as given (LB_DEVICE_AUTO left undecided, so no device's own rules apply) and
 * the data, which must hold a micro-batch of every one of `ranks` ranks (the job the command
 * line will start; p->boot is not asked). p is not changed. For checking a command line
 * before it runs elsewhere or later (a sweep's cells). */
lb_status lb_train_check_inputs(const lb_train_params *p, int ranks, lb_err *err);

/* Writes the run's configuration (options, model shape) into r->config; p and cfg as
 * lb_train_resolve left them. Called before the run is stored as begun, so a run that
 * crashes keeps its configuration. */
void lb_train_record_config(const lb_train_params *p, const lb_model_config *cfg, lb_result *r);

/* Runs the benchmark into r (created by the caller with kind "train"); resolves p first. */
lb_status lb_train_run(const lb_train_params *p, lb_result *r, lb_err *err);

/* Parameters that train: the adapters' with p->lora_rank > 0, else every one. */
int64_t lb_train_trainable_params(const lb_train_params *p, const lb_model_config *cfg);
/* Training FLOPs per token (docs/METRICS.md): lb_lora_train_flops_per_token with adapters,
 * else lb_model_train_flops_per_token. */
double lb_train_flops_per_token(const lb_train_params *p, const lb_model_config *cfg);

/* Collective over p->boot's ranks, after each resolved its parameters (local: its
 * lb_train_resolve status, with err holding the sentence when it failed): LB_OK when every
 * rank resolved and all hold the same configuration; otherwise on every rank the first
 * failing rank's sentence, or LB_ERR_USAGE naming the first option in which a rank differs
 * from rank 0. Nothing has run yet, so ranks that disagree stop before any work. */
lb_status lb_train_agree(const lb_train_params *p, const lb_model_config *cfg, lb_status local,
                         lb_err *err);

/* Ranks in the job (1 without one) and this process's rank. */
int lb_train_ranks(const lb_train_params *p);
int lb_train_rank(const lb_train_params *p);

/* Before anything is allocated on a GPU: LB_ERR_USAGE when the device bytes a rank of p
 * holds on `ranks` GPUs (train/memory.h's formula: ZeRO's state for the stage and
 * precision, what this code keeps beyond it, activations and workspace) exceed free_bytes
 * (one GPU's free memory), in one sentence naming needed against free, ZeRO's part of it,
 * and the fewest GPUs, with the lowest stage there, that would fit; LB_OK when it fits.
 * With adapters (--lora-rank) the sentence names the frozen base's part and the adapters'
 * instead of ZeRO's, and advises the options not given that would fit (--quant nf4 in
 * 16-bit runs, --recompute, alone or together) before more GPUs. */
lb_status lb_train_check_fit(const lb_train_params *p, const lb_model_config *cfg, int ranks,
                             double free_bytes, lb_err *err);

/* Metrics of data-parallel runs (docs/METRICS.md). Scaling efficiency: tokens/s on n ranks
 * over n times one rank's, tok_n / (n tok_1). */
double lb_train_scaling_efficiency(double tok_per_s, int ranks, double base_tok_per_s);
/* The tag that groups the runs of one `--scaling` invocation, into out (cap bytes):
 * "scaling-<unix time>-<process id>", so that invocations started in the same second into
 * one database stay apart. */
void lb_train_scaling_group(char *out, size_t cap);
/* The run's price per hour: hour_cost, else gpu_hour_price x its ranks (one GPU each);
 * 0 when neither is given. */
double lb_train_hour_cost(const lb_train_params *p);
/* Cost of 1,000 samples (1,000,000 tokens) at hour_cost for the hardware per hour:
 * hour_cost / 3600 / rate x 1e3 (x 1e6). */
double lb_train_cost_per_1k_samples(double hour_cost, double samples_per_s);
double lb_train_cost_per_1m_tokens(double hour_cost, double tok_per_s);
/* The rank whose median step time is the largest, and how much above the fastest rank's
 * median it is, in percent: 100 (slowest - fastest) / fastest. */
int lb_train_slowest_rank(const double *median_ms, int ranks, double *pct_over_fastest);
/* S, the seconds of r's timed steps that its rates divide by: with ranks > 1 the largest
 * of the ranks' own sums (series step_ms.rQ), as the slowest rank saw the run; else, or
 * without those series, the sum of step_ms. The sum of the per-step maxima would count a
 * delay twice where it moves from one rank's step to another's (a rank late at the end of
 * step i holds the others inside step i + 1). */
double lb_train_timed_seconds(const lb_result *r, int ranks);

/* Computes the summary metrics from r's series (shared by the CPU and CUDA paths). */
lb_status lb_train_summarize(const lb_train_params *p, const lb_model_config *cfg, lb_result *r);

#endif
