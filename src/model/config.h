/* config.h: one transformer configuration for the GPT-2 and Llama families, and the
 * parameter layout every implementation (CPU reference, GPU kernels, optimizer state,
 * weight files) shares.
 *
 * The family decides the building blocks: GPT-2 = LayerNorm (weight and bias), GELU-tanh
 * MLP, learned position embeddings, multi-head attention; Llama = RMSNorm (weight only),
 * SwiGLU MLP, RoPE (optionally with llama3 frequency scaling), grouped-query attention.
 * Biases and tied embeddings are separate flags so mixed models can be described.
 * head_dim is always d_model / n_head; the attention width n_head * head_dim is d_model.
 *
 * Parameter layout: all parameters live in ONE float array (llm.c's
 * malloc_and_point_parameters idea), carved in this fixed order (absent tensors take no
 * space). Weights are stored [out, in] row-major (PyTorch nn.Linear), so y = x W^T + b.
 *
 *   wte        [V, d]                  token embedding (also the output head when tied)
 *   wpe        [max_seq, d]            GPT-2 only (learned positions)
 *   then, for each layer l = 0..L-1, contiguously (layer-major, stride layer_numel):
 *   h.l.norm1.w   [d]
 *   h.l.norm1.b   [d]                  LayerNorm (GPT-2) only
 *   h.l.qkv.w     [(nh + 2*nkv)*hd, d] rows: q heads, then k heads, then v heads;
 *                                      head h of q is rows h*hd .. h*hd+hd-1
 *   h.l.qkv.b     [(nh + 2*nkv)*hd]    when qkv_bias
 *   h.l.attn_out.w [d, d]
 *   h.l.attn_out.b [d]                 when linear_bias
 *   h.l.norm2.w   [d]
 *   h.l.norm2.b   [d]                  LayerNorm only
 *   h.l.mlp_in.w  GPT-2: [d_ff, d] (fc); Llama: [2*d_ff, d] = gate rows then up rows
 *   h.l.mlp_in.b  [d_ff] or [2*d_ff]   when linear_bias
 *   h.l.mlp_out.w [d, d_ff]            (GPT-2 c_proj, Llama down_proj)
 *   h.l.mlp_out.b [d]                  when linear_bias
 *   normf.w    [d]
 *   normf.b    [d]                     LayerNorm only
 *   lm_head    [V, d]                  only when !tied_embeddings
 *
 * The same layout indexes gradients and the AdamW m and v buffers. Weight decay applies to
 * every tensor with two dimensions (embeddings, wpe, every matrix, lm_head), never to
 * biases or norm weights.
 *
 * GPT-2 presets use the true vocabulary (50257); padding the vocabulary for GPU matmul
 * efficiency is a GPU-side concern and does not change the reference. mistral-7b uses the
 * v0.2 shapes (rope_theta 1e6, no sliding window). Not here: weight files, tokenizers. */
#ifndef LB_MODEL_CONFIG_H
#define LB_MODEL_CONFIG_H

#include <stdint.h>

#include "core/status.h"

typedef enum { LB_FAMILY_GPT2, LB_FAMILY_LLAMA } lb_model_family;

/* llama3 RoPE frequency scaling (HF rope_type "llama3"). With wavelen = 2*pi / inv_freq:
 * wavelen < original_max_pos / high_freq_factor: unchanged; wavelen > original_max_pos /
 * low_freq_factor: divided by factor; in between: smooth interpolation with
 * s = (original_max_pos / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor),
 * inv_freq' = (1 - s) * inv_freq / factor + s * inv_freq. */
typedef struct {
    int enabled;            /* 0: plain RoPE */
    float factor;           /* e.g. 32 for llama3.2-1b, 8 for llama3.1-8b */
    float low_freq_factor;  /* e.g. 1 */
    float high_freq_factor; /* e.g. 4 */
    int original_max_pos;   /* context length the base model was trained with, tokens */
} lb_rope_scaling;

typedef struct {
    char name[32];
    lb_model_family family;
    int vocab_size; /* tokens (true vocabulary, not padded) */
    int max_seq;    /* longest context, tokens */
    int n_layer;
    int n_head;    /* query heads */
    int n_kv_head; /* key/value heads; == n_head for multi-head attention */
    int d_model;   /* residual width */
    int d_ff;      /* MLP hidden width (per branch for SwiGLU) */
    float norm_eps;
    float rope_theta; /* RoPE base; unused by GPT-2 */
    lb_rope_scaling rope_scaling;
    int tied_embeddings; /* 1: the output head is wte */
    int qkv_bias;        /* 1: h.l.qkv.b exists */
    int linear_bias;     /* 1: attn_out.b, mlp_in.b, mlp_out.b exist */
} lb_model_config;

/* Fills out with the preset of this name. Unknown name: LB_ERR_USAGE naming the valid
 * presets. */
lb_status lb_model_config_preset(const char *name, lb_model_config *out, lb_err *err);
/* NULL-terminated list of preset names (static storage). */
const char *const *lb_model_preset_names(void);
/* LB_ERR_USAGE naming the field and its value when one is out of range (d_model not
 * divisible by n_head, n_head not divisible by n_kv_head, odd head_dim for RoPE, an eps,
 * theta or rope factor that is not finite, a rope factor below 1, ...), when a width (the
 * qkv width, 2 d_ff of SwiGLU, ...) passes 2^30 or the parameter count 2^59: past those the
 * int widths and int64 element counts used everywhere would overflow. */
lb_status lb_model_config_check(const lb_model_config *cfg, lb_err *err);

static inline int lb_model_head_dim(const lb_model_config *cfg) {
    return cfg->d_model / cfg->n_head;
}
/* Width of one token's qkv projection output: (n_head + 2 * n_kv_head) * head_dim. */
static inline int lb_model_qkv_dim(const lb_model_config *cfg) {
    return (cfg->n_head + 2 * cfg->n_kv_head) * lb_model_head_dim(cfg);
}
/* Width of one token's mlp_in output: d_ff (GPT-2) or 2 * d_ff (SwiGLU). */
static inline int lb_model_mlp_in_dim(const lb_model_config *cfg) {
    return cfg->family == LB_FAMILY_LLAMA ? 2 * cfg->d_ff : cfg->d_ff;
}

/* Total trainable parameters (a tied head counted once). */
int64_t lb_model_param_count(const lb_model_config *cfg);
/* The parameters a token multiplies: lb_model_param_count less the lookup tables, which
 * take no FLOPs (wpe, and wte when the output head is a separate lm_head; a tied wte is
 * the head's matmul and counts). */
int64_t lb_model_matmul_param_count(const lb_model_config *cfg);
/* Training FLOPs per token at sequence length seq_len: 6 N + 6 L d T
 * (N = lb_model_matmul_param_count, L = n_layer, d = d_model, T = seq_len).
 * docs/METRICS.md. */
double lb_model_train_flops_per_token(const lb_model_config *cfg, int64_t seq_len);

/* Element offsets of every tensor in the flat parameter array. A per-layer offset is
 * relative to that layer's start: layer l's tensor X lives at
 * layers + l * layer_numel + layer.X. Absent tensors have offset -1. */
typedef struct {
    int64_t norm1_w, norm1_b, qkv_w, qkv_b, attn_out_w, attn_out_b;
    int64_t norm2_w, norm2_b, mlp_in_w, mlp_in_b, mlp_out_w, mlp_out_b;
} lb_layer_offsets;

typedef struct {
    int64_t wte, wpe;       /* wpe -1 for Llama */
    int64_t layers;         /* start of layer 0 */
    int64_t layer_numel;    /* elements per layer */
    lb_layer_offsets layer; /* relative to a layer's start */
    int64_t normf_w, normf_b;
    int64_t lm_head; /* == wte when tied */
    int64_t total;   /* elements in the whole array */
} lb_param_offsets;

void lb_model_param_offsets(const lb_model_config *cfg, lb_param_offsets *out);

/* One named tensor of the layout. */
typedef struct {
    char name[48];    /* "wte", "h.3.qkv.w", "normf.b", ... */
    int64_t offset;   /* elements from the start of the array */
    int ndim;         /* 1 or 2 */
    int64_t shape[2]; /* [out, in] for matrices; shape[1] = 1 when ndim == 1 */
    int64_t numel;
    int layer; /* -1 for wte, wpe, normf, lm_head */
    int decay; /* 1: AdamW weight decay applies (ndim == 2) */
} lb_param_tensor;

/* Writes up to max entries of the layout, in storage order, into out (out may be NULL
 * with max 0) and returns the number of tensors the layout has. */
int lb_model_param_layout(const lb_model_config *cfg, lb_param_tensor *out, int max);

/* The layout's 1-D tensors (norm weights and biases, linear biases): how many into *count,
 * their elements into *numel. */
void lb_model_vector_params(const lb_model_config *cfg, int *count, int64_t *numel);

#endif
