/* model_gpu_impl.h: the GPU transformer's state and what its three files share.
 *
 * model_gpu.c lays the model out in its arena and enqueues a step (forward, backward,
 * optimizer); model_gpu_tune.c makes the run-time choices that are timed on the first
 * step's buffers (whose attention kernels each way, whose GELU product); model_gpu_graph.c
 * captures a training step as a CUDA graph and replays it. Private to those files. */
#ifndef LB_MODEL_MODEL_GPU_IMPL_H
#define LB_MODEL_MODEL_GPU_IMPL_H

#include <cuda_runtime.h>

#include "gpu/blas/matmul.h"
#include "gpu/cudnn/attn.h"
#include "gpu/cudnn/gelu.h"
#include "kernels/adamw.cuh"
#include "model/lora_gpu.h"
#include "model/model_gpu.h"

struct lb_model_gpu {
    lb_model_config cfg;
    lb_model_gpu_params p;
    lb_param_offsets off;
    int64_t n_params;
    int B, T, C, L, NH, NKV, HD, Q, F, H, V, Vp;
    int64_t BT;
    size_t es; /* bytes per activation element */
    lb_gpu_dtype dt;
    lb_gpu_dtype gdt; /* the gradients' type: the working type; fp32 with adapters */
    size_t gs;        /* its bytes */
    bool llama;
    lb_gpu_arena arena;
    lb_blas *blas;
    cudaStream_t stream;
    /* parameters and optimizer state */
    float *master, *m, *v;
    void *grads; /* [n_params] gdt: one dense array in the parameter layout */
    /* The 1-D tensors' (norms', biases') gradients are summed in fp32 here by kernels that
     * add into them from several places, then written into their slots in the gradient
     * type once their unit is done (small_runs, one launch a unit). */
    float *small;                  /* [n_small] */
    int64_t n_small;               /* elements of the 1-D tensors */
    int n_small_t;                 /* the 1-D tensors */
    int64_t *t_off;                /* host [n_seg]: each tensor's first element */
    int64_t *small_at;             /* host [n_seg]: its place in small, -1: not a 1-D tensor */
    lb_adamw_grad_run *small_runs; /* device table: small -> the unit's slots, unit by unit */
    int *unit_run;         /* host [L + 3]: unit u's runs are [unit_run[u], unit_run[u + 1]) */
    int64_t *unit_longest; /* host [L + 2]: its longest run */
    void *params;          /* working copy (== master in fp32) */
    void *lm_w;            /* the output head as its products read it: the head itself when V is a
                            * multiple of 64, else its working copy padded to [Vp, C], rows >= V zero,
                            * which the optimizer writes in place of the head's slot in params (and
                            * the embedding reads, when tied) */
    int64_t *seg_start;
    int32_t *seg_flags; /* LB_SEG_* bits a tensor */
    int n_seg;
    int64_t (*clear)[2]; /* host: [start, count] runs of gradients cleared before a step */
    int n_clear;
    lb_gpu_optstate *opt;
    float *inv_freq, *rope_cs;
    int32_t *tokens, *targets; /* [BT] each, then the ids sorted (keys) with their rows'
                                * indices (key_rows) for the embedding backward */
    int32_t *keys, *key_rows;
    int32_t *host_tok[2]; /* [4 BT] as tokens */
    int32_t *host_count;  /* [V + 1]: the host's counting sort */
    cudaEvent_t host_done[2];
    int host_idx;
    float *loss_slots;          /* max_loss_slots slots, then the graph's own (copied to a slot) */
    cudaGraphExec_t step_graph; /* one training step as a CUDA graph (NULL: none yet) */
    lb_gpu_adamw_params graph_ap; /* the optimizer settings step_graph was captured with */
    int64_t train_steps;          /* lb_model_gpu_train_step calls so far */
    bool graph_failed;            /* capture failed once: steps run kernel by kernel */
    lb_model_gpu_grad_hook
        grad_hook; /* data parallelism: told when a unit's gradients are queued */
    void *grad_hook_ctx;
    bool defer_embed;   /* backward leaves the embedding's weight gradients to the hook */
    void **unit_grads;  /* [L + 2]: where each unit's gradient slots start (train/zero.h's
                         * units; the model's array, or lb_model_gpu_bind_grads') */
    void **unit_params; /* [L + 2]: where each unit's working copy starts (params, or
                         * lb_model_gpu_bind_params') */
    lb_model_gpu_param_hook param_hook; /* told before a unit's parameters are read */
    void *param_hook_ctx;
    bool accumulate;       /* backward adds to the weight gradients (micro-batch > 0) */
    float loss_grad_scale; /* 1 / (BT x micro-batches a step) */
    /* attention: cuDNN's plans (NULL: built-in kernels only) and, per direction, whose
     * kernels run (AUTO: not yet timed, before the first step) */
    lb_cudnn_attn *dnn;
    void *dnn_ws;       /* cuDNN's workspace (attention and the GELU product) */
    float *trial_dbias; /* [Q]: where timing trials put the qkv bias gradient */
    lb_gpu_attn_choice attn_src[2];
    /* the MLP input product with its GELU: cuDNN's plans (NULL: cuBLASLt's epilogue only)
     * and whose runs (AUTO: not yet timed, before the first step). With
     * cuDNN's, the MLP's hidden activations and their gradients (fch, fact, dfch) are
     * stored feature-major, [F, BT] (hidden_cols): the weight-gradient products that read
     * them run faster with tokens along their rows by more than cuDNN's transposed writes
     * cost (docs/PERFORMANCE.md, "What was tried: products") */
    lb_cudnn_gelu *gelu_dnn;
    lb_gelu_product gelu_src;
    /* activations */
    void *encoded, *res2, *res3, *ln1, *ln2, *qkv, *atty, *fch, *fact, *lnf, *logits;
    /* ln2's row stride: C, or with a ones column at C and ONES_COLS - 1 zeros after it
     * (GPT-2), so that the MLP input weight-gradient product, run over C + ONES_COLS
     * columns into aug_grad [F, C + ONES_COLS] (fp32), also sums its bias gradient; then
     * rows are C + ONES_COLS rounded up to 64 elements apart (128-byte rows in 16 bits) */
    int64_t ld2;
    float *aug_grad;
    float *ln1_mean, *ln1_rstd, *ln2_mean, *ln2_rstd, *lnf_mean, *lnf_rstd, *lse, *losses;
    /* activation gradients (one layer) and scratch */
    void *dres, *dc, *dqkv, *dfch, *dact, *attn_scratch, *blas_ws;
    void *split_scratch; /* 3xTF32 operand copies or int8 planes (NULL in other modes) */
    size_t split_bytes;
    /* fine-tuning: adapters on a frozen base (NULL: every parameter trains) */
    lb_lora_gpu *lora;
};

/* GPT-2's MLP with biases: GELU and its derivative run in cuBLASLt's epilogues (the
 * tanh approximation, as the reference), saving two passes over [B,T,d_ff] each way. Not
 * in fp32: there cuBLASLt runs the epilogue as a separate pass, slower than ours (on the
 * H200 at 32x128: 40 and 100 us a layer), and the 3xTF32 mode could not split them. */
static inline bool fuse_gelu(const lb_model_gpu *m) {
    return !m->llama && m->cfg.linear_bias && !m->p.no_fused_gelu && m->dt != LB_DT_F32 &&
           !m->lora; /* adapters add to the product's output before the GELU */
}

/* device slots for per-step mean losses (the graph's own slot comes after them) */
static inline int n_slots(const lb_model_gpu *m) {
    return m->p.max_loss_slots > 0 ? m->p.max_loss_slots : 1;
}

/* m->dqkv from m->dc (the output's gradient); with bg, bg->dbias += the qkv bias
 * gradient. The built-in kernels sum all of dqkv's columns as they write them. After
 * cuDNN's, only the query part is summed: a key bias adds the same q.b to a whole row of
 * scores, which softmax ignores, so its gradient is 0; the value part comes from the output
 * projection's bias gradient dproj_b (complete by then: the norm backward below it summed
 * it) through its weights w_proj (lb_act_bias_grad_through). */
typedef struct {
    float *dbias;         /* [Q] */
    const float *dproj_b; /* [C] */
    const void *w_proj;   /* [C, C], working type */
} qkv_bias_grad;

/* model_gpu.c: one direction of attention on a layer's buffers, by cuDNN (dnn) or the
 * built-in kernels; forward writes out and lse from qkv, backward m->dqkv (see
 * qkv_bias_grad) */
lb_status lb_model_gpu_attn_forward(lb_model_gpu *m, bool dnn, void *out, float *lse,
                                    const void *qkv, lb_err *err);
lb_status lb_model_gpu_attn_backward(lb_model_gpu *m, bool dnn, const qkv_bias_grad *bg,
                                     const void *qkv, const void *out, const float *lse,
                                     lb_err *err);
/* model_gpu.c: the MLP input product with its GELU (g, an LB_EPI_GELU_AUX_BIAS product), by
 * cuDNN (dnn) or cuBLASLt */
lb_status lb_model_gpu_gelu_forward(lb_model_gpu *m, bool dnn, const lb_blas_gemm *g, lb_err *err);
/* model_gpu.c: a whole training step after the upload: gradients cleared, forward (mean
 * loss to *loss), backward, clipping and AdamW with p */
lb_status lb_model_gpu_step(lb_model_gpu *m, float *loss, const lb_gpu_adamw_params *p,
                            lb_err *err);

/* model_gpu_tune.c: AUTO's choice for one direction of attention on its first run (the
 * faster of the two on this layer's buffers, whose outputs it overwrites; the caller runs
 * the chosen one after) */
lb_status lb_model_gpu_attn_choose(lb_model_gpu *m, bool backward, const qkv_bias_grad *bg,
                                   void *qkv, void *out, float *lse, lb_err *err);
/* model_gpu_tune.c: the faster GELU product on the first layer's buffers */
lb_status lb_model_gpu_gelu_choose(lb_model_gpu *m, const lb_blas_gemm *g, lb_err *err);

#endif
