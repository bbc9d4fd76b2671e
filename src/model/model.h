/* model.h: the CPU reference transformer (GPT-2 and Llama families): forward, backward,
 * AdamW, weight loading.
 *
 * Built from the ops of ref.h, in plain fp32 with OpenMP loops: readable before fast,
 * because this is the oracle the GPU path is checked against. Parameters, gradients and
 * the AdamW moments are each one float array in the layout of config.h; activations are
 * one arena sized for the (B, T) given at init, with per-layer tensors stacked [L, ...].
 * Backward keeps only one layer's activation gradients at a time.
 *
 * Forward of one layer (x = residual stream [B,T,d]):
 *   GPT-2: n1 = LayerNorm(x); qkv = n1 Wqkv^T + b; a = attention(qkv);
 *          r2 = x + (a Wo^T + b); n2 = LayerNorm(r2); h = gelu(n2 Wfc^T + b);
 *          r3 = r2 + (h Wproj^T + b)
 *   Llama: RMSNorm instead of LayerNorm, rope on q and k after the qkv projection,
 *          h = swiglu(n2 Wgate_up^T) = silu(gate) * up, no biases.
 * Then normf, logits = normf(x) Whead^T (Whead = wte when tied), loss = mean cross-entropy.
 *
 * Weight file (lb_model_load_weights): safetensors (an 8-byte little-endian header length,
 * a JSON header mapping tensor names to dtype, shape and data_offsets, then the data). The
 * file must hold every tensor of lb_model_param_layout under the layout's name ("wte",
 * "h.0.qkv.w", ...) as F32 with the layout's shape ([n] for 1-D tensors); other tensors
 * are ignored. tools/make_fixture.py writes such files.
 *
 * Fine-tuning: with adapters attached (lb_model_attach_lora, model/lora.h) the base is
 * frozen: the forward adds each adapter's product to its projection's output, the backward
 * carries activation gradients through the base and computes adapter gradients only.
 *
 * A hook (lb_model_set_hook) hears when forward and backward enter and leave each unit of
 * train/zero.h (0 the embeddings, 1 + l layer l, L + 1 the final norm and output head), so
 * data-parallel training can gather a unit's parameters just before it runs and send its
 * gradient as soon as it is complete.
 *
 * Not here: mixed precision, GPU memory, collectives, data loading. */
#ifndef LB_MODEL_MODEL_H
#define LB_MODEL_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "core/status.h"
#include "model/config.h"

typedef struct lb_lora lb_lora; /* model/lora.h */

typedef struct {
    float lr;           /* learning rate */
    float beta1;        /* first-moment decay */
    float beta2;        /* second-moment decay */
    float eps;          /* added to sqrt(v_hat) */
    float weight_decay; /* decoupled decay, applied to 2-D tensors only (config.h) */
    float grad_clip;    /* max global L2 norm of the gradient; <= 0 disables clipping */
} lb_adamw_params;

/* lr 3e-4, betas (0.9, 0.95), eps 1e-8, weight_decay 0.1, grad_clip 1.0. */
lb_adamw_params lb_model_adamw_default_params(void);

/* Activations of one forward pass, pointers into one arena. Shapes: C = d_model,
 * Q = qkv dim, F = mlp_in dim (d_ff or 2 d_ff), H = d_ff, L = n_layer, NH = n_head.
 * mean fields exist for LayerNorm only (NULL for Llama). */
typedef struct {
    float *encoded;    /* [B,T,C] embedding output, input of layer 0 */
    float *norm1;      /* [L,B,T,C] */
    float *norm1_mean; /* [L,B,T] */
    float *norm1_rstd; /* [L,B,T] */
    float *qkv;        /* [L,B,T,Q] after rope (Llama) */
    float *att;        /* [L,B,NH,T,T] attention probabilities */
    float *atty;       /* [L,B,T,C] attention output before attn_out */
    float *residual2;  /* [L,B,T,C] x + attention branch */
    float *norm2;      /* [L,B,T,C] */
    float *norm2_mean; /* [L,B,T] */
    float *norm2_rstd; /* [L,B,T] */
    float *mlp_in;     /* [L,B,T,F] */
    float *mlp_act;    /* [L,B,T,H] gelu or swiglu output */
    float *residual3;  /* [L,B,T,C] layer output */
    float *branch;     /* [B,T,C] scratch: attn_out / mlp_out before the residual add */
    float *normf;      /* [B,T,C] */
    float *normf_mean; /* [B,T] */
    float *normf_rstd; /* [B,T] */
    float *logits;     /* [B,T,V] */
    float *probs;      /* [B,T,V] */
    float *losses;     /* [B,T] */
} lb_activations;

/* Activation gradients of one layer, reused for every layer during backward. */
typedef struct {
    float *dresidual; /* [B,T,C] gradient of the residual stream */
    float *dnorm;     /* [B,T,C] gradient of a norm output */
    float *dqkv;      /* [B,T,Q] */
    float *datty;     /* [B,T,C] */
    float *dmlp_in;   /* [B,T,F] */
    float *dmlp_act;  /* [B,T,H] */
    float *dlogits;   /* [B,T,V] */
} lb_activation_grads;

typedef enum {
    LB_MODEL_FORWARD_BEGIN = 0,
    LB_MODEL_FORWARD_END,
    LB_MODEL_BACKWARD_BEGIN,
    LB_MODEL_BACKWARD_END,
} lb_model_event;

/* Called with the unit a pass enters (BEGIN: before its parameters are read) or leaves
 * (END: after its last read of them; in backward, its gradients are complete unless a
 * later unit also writes them: a tied head's wte, completed by unit 0). */
typedef void (*lb_model_hook)(void *ctx, lb_model_event ev, int unit);

typedef struct {
    lb_model_config cfg;
    lb_param_offsets off;
    int64_t n_params; /* elements of params (== lb_model_param_count) */
    float *params;    /* [n_params], layout of config.h; owned */
    float *grads;     /* [n_params]; owned; NULL with adapters attached (frozen base) */
    float *m, *v;     /* [n_params] AdamW moments, zero until the first step; owned; NULL
                       * with adapters attached */
    lb_lora *lora;    /* attached adapters (borrowed), NULL: every parameter trains */
    float *inv_freq;  /* [head_dim/2] RoPE frequencies (Llama), NULL for GPT-2 */
    int B, T;         /* the largest batch and sequence the activations hold */
    lb_activations acts;
    lb_activation_grads dacts;
    float *act_arena;        /* owns every activation and activation gradient */
    size_t act_floats;       /* floats in act_arena */
    lb_param_tensor *layout; /* [n_tensors] lb_model_param_layout of cfg; owned */
    int n_tensors;
    int32_t *inputs;    /* [B*T] copy of the last forward's inputs; owned */
    int32_t *targets;   /* [B*T] copy of its targets; owned */
    int last_B, last_T; /* shape of the last forward */
    int have_targets;   /* 1 when the last forward computed losses */
    float mean_loss;    /* of the last forward with targets */
    lb_model_hook hook; /* NULL: none */
    void *hook_ctx;
} lb_model;

/* Allocates everything for batches of up to B x T tokens (T <= cfg->max_seq) and
 * initializes the weights GPT-2 style from seed: normal(0, 0.02) for every 2-D tensor,
 * attn_out.w and mlp_out.w normal(0, 0.02 / sqrt(2 L)), biases 0, norm weights 1.
 * On failure m is left freed. */
lb_status lb_model_init(lb_model *m, const lb_model_config *cfg, int B, int T, uint64_t seed,
                        lb_err *err);
/* Frees everything; m may be NULL or already freed. */
void lb_model_free(lb_model *m);
/* Replaces the parameters with those of a safetensors file (format above). */
lb_status lb_model_load_weights(lb_model *m, const char *path, lb_err *err);

/* Forward pass of inputs [B,T] (B <= m->B, T <= m->T, every token id in [0, vocab_size):
 * the caller checks these; they are asserted here). With targets [B,T] it also computes
 * the per-position losses and writes their mean to *loss_out (loss_out may be NULL);
 * targets may be NULL (inference: logits only, *loss_out untouched). Logits are in
 * m->acts.logits, laid out [B,T,V] for this call's B and T. LB_ERR_NOMEM when an op finds
 * no memory for its scratch (ref.h). */
lb_status lb_model_forward(lb_model *m, const int32_t *inputs, const int32_t *targets, int B, int T,
                           float *loss_out, lb_err *err);
/* Zeroes the gradients (the adapters' when attached). */
void lb_model_zero_grad(lb_model *m);
/* Accumulates d(mean loss)/d(params) of the last forward (which must have had targets)
 * into m->grads, or with adapters attached d(mean loss)/d(adapters) into lora->grads.
 * LB_ERR_NOMEM when an op finds no memory for its scratch (the gradients are then
 * partly accumulated). */
lb_status lb_model_backward(lb_model *m, lb_err *err);
/* Freezes the base and attaches adapters l (made for this config, holding at least B*T
 * tokens of intermediates; l outlives the attachment): m->grads, m->m and m->v are released.
 * LB_ERR_USAGE when l holds too few tokens or its layout is not this config's. */
lb_status lb_model_attach_lora(lb_model *m, lb_lora *l, lb_err *err);
/* Sets the hook that forward and backward call at each unit (NULL: none). */
void lb_model_set_hook(lb_model *m, lb_model_hook fn, void *ctx);
/* Clips the gradient to p->grad_clip by global norm, then one AdamW update (step counts
 * from 1) of every parameter, or with adapters attached of the adapters only. Writes the
 * global gradient norm before clipping to *grad_norm_out (may be NULL). */
void lb_model_adamw_step(lb_model *m, const lb_adamw_params *p, int step, float *grad_norm_out);

#endif
