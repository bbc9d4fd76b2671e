/* memory.h: the device bytes one rank of `llmbench train` on GPUs holds, as closed formulas
 * of the configuration, to set beside what the arenas really hold (peak_device_bytes).
 *
 * The parts follow what model/model_gpu.c, model/lora_gpu.c and train/dp_cuda.c carve,
 * written from the model's widths rather than by running their layout: ZeRO's formula for
 * the model state (train/zero.h) and, apart from it, what this code keeps beyond it (the
 * 1-D tensors' fp32 gradient sums, the shard's own working copy and gradient, the padded
 * output head), the communication buffers of ZeRO 1-3, the activations kept from forward
 * for backward with one layer's activation gradients and the logits, and the work buffers.
 * With adapters on a frozen base (--lora-rank) the base (in the working type or NF4) is a
 * part of its own, the adapters' state and ZeRO's shard and buffers of them take the place
 * of the model's, and the activations hold the adapters' intermediates. docs/METRICS.md
 * lists every term. Left out: cuDNN's workspace (sized by cuDNN at run time), the arena's
 * 256-byte alignment of each piece, tables of a few KB, and memory outside the arenas
 * (CUDA's context, NCCL's buffers). */
#ifndef LB_TRAIN_MEMORY_H
#define LB_TRAIN_MEMORY_H

#include "core/status.h"
#include "model/config.h"
#include "train/train.h"

typedef struct {
    double zero_state;  /* ZeRO's formula for the stage and precision (lb_zero_state_bytes);
                         * 0 with adapters */
    double base;        /* adapters: the frozen base, its projections' NF4 codes, absmax,
                         * scales and means with --quant nf4, and the padded head; else 0 */
    double model_state; /* the model's arena: fp32 master, working copy, gradients (working
                         * type) and moments as the stage leaves them there, the padded head
                         * copy, the 1-D tensors' fp32 gradient sums; with adapters theirs:
                         * fp32 master, gradients and moments and the working copy as the
                         * stage leaves them */
    double shard_state; /* ZeRO 1-3: this rank's shard: fp32 master and moments, gradients
                         * (the working type where one reduce-scatter a step writes them,
                         * else fp32), and its working copy in 16-bit runs (one rank: the
                         * whole model's moments and a 16-bit run's fp32 master only; with
                         * adapters their shard, gradients in fp32, on one rank too) */
    double buffers;     /* several ranks: at ZeRO 1 the buckets' copies for the collectives,
                         * at 1-2 the last bucket's gather where its padding runs past the
                         * end, where micro-batches add at 2-3 a piece, at 2-3 the gradients
                         * of up to three buckets (working type, adapters' fp32, padded), at
                         * 3 the three
                         * gathers; where an untied embedding travels as rows, every rank's
                         * gradient rows and token ids with the ids' sort */
    double activations; /* kept from forward for backward, one layer's activation gradients,
                         * the final norm's output, the logits and per-token losses, the
                         * adapters' intermediates u and du */
    double workspace;   /* attention's backward scratch, cuBLASLt's workspace, the split
                         * scratch of fp32 products, GPT-2's MLP bias-gradient product, RoPE's
                         * table, token ids (and their sorted order) and loss slots, the NF4
                         * base's dequantisation scratch */
    double total;       /* base + model_state + shard_state + buffers + activations +
                         * workspace */
} lb_train_memory;

/* The formula's parts for p (per-GPU --batch over --grad-accum micro-batches, --seq,
 * --precision, --recompute, --zero, --fp32-matmul, --bucket-mib, steps for the loss
 * slots; --lora-rank, --lora-targets and --quant) on `ranks` GPUs and cfg. LB_ERR_USAGE
 * with ranks < 1 or adapters that do not fit cfg (lb_train_lora_config's sentence),
 * LB_ERR_NOMEM. */
lb_status lb_train_memory_formula(const lb_train_params *p, const lb_model_config *cfg, int ranks,
                                  lb_train_memory *out, lb_err *err);

#endif
