/* ref.h: the fp32 CPU reference of every transformer operation, forward and backward.
 *
 * These are the oracle for the GPU kernels (`llmbench selftest` compares each kernel with
 * the function of the same name here) and the building blocks of model.c. Signatures
 * follow llm.c: plain float pointers, B batch, T sequence, C channels. All tensors are
 * row-major and contiguous; [B,T,C] means index (b*T + t)*C + c.
 *
 * Conventions:
 * - Backward functions ACCUMULATE (+=) into every gradient they write (dinp, dweight,
 *   dbias, ...); the caller zeroes them first. Exception: rope, which overwrites and may
 *   run in place.
 * - Optional pointers (bias, dbias, dinp) may be NULL where the comment says so.
 * - Reductions accumulate in double so the reference sits close to a float64 result.
 * - Weights are [out, in] (PyTorch nn.Linear): out = inp W^T + bias.
 * - Only the ops that need scratch memory (matmul backward, attention forward and
 *   backward, paged attention) can fail: they return LB_ERR_NOMEM with a sentence in err
 *   when there is none, their outputs then partly written. The others return nothing.
 * Not here: mixed precision, fused kernels, anything model-level (model.h). */
#ifndef LB_MODEL_REF_H
#define LB_MODEL_REF_H

#include <stdint.h>

#include "core/status.h"
#include "model/config.h"

/* --- embeddings --------------------------------------------------------------------- */
/* GPT-2 encoder: out[B,T,C] = wte[inp[b,t], :] + wpe[t, :]. inp [B,T] in [0,V). */
void lb_ref_encoder_forward(float *out, const int32_t *inp, const float *wte, const float *wpe,
                            int B, int T, int C);
/* dwte[V,C] += rows of dout by token; dwpe[maxT,C] += dout summed over b. */
void lb_ref_encoder_backward(float *dwte, float *dwpe, const float *dout, const int32_t *inp, int B,
                             int T, int C);
/* Llama embedding: out[B,T,C] = wte[inp[b,t], :]. */
void lb_ref_embedding_forward(float *out, const int32_t *inp, const float *wte, int B, int T,
                              int C);
/* dwte[V,C] += rows of dout[B,T,C] by token. */
void lb_ref_embedding_backward(float *dwte, const float *dout, const int32_t *inp, int B, int T,
                               int C);
/* The order the GPU's sorted embedding backward sums rows in (kernels/embed.cuh): the n ids
 * (in [0,V)) sorted stably into keys, each one's position among the ids into rows (a
 * counting sort; count: V + 1 ints of scratch). */
void lb_ref_embedding_order(const int32_t *ids, int64_t n, int V, int32_t *count, int32_t *keys,
                            int32_t *rows);

/* --- norms -------------------------------------------------------------------------- */
/* LayerNorm over C: out[B,T,C], mean[B,T], rstd[B,T] (1/sqrt(var + eps), biased var).
 * bias may be NULL. */
void lb_ref_layernorm_forward(float *out, float *mean, float *rstd, const float *inp,
                              const float *weight, const float *bias, int B, int T, int C,
                              float eps);
/* dinp[B,T,C] +=, dweight[C] +=, dbias[C] += (dweight and dbias may be NULL: frozen). inp
 * is the forward input, mean and rstd the forward's statistics. */
void lb_ref_layernorm_backward(float *dinp, float *dweight, float *dbias, const float *dout,
                               const float *inp, const float *weight, const float *mean,
                               const float *rstd, int B, int T, int C);
/* RMSNorm over C: out = inp * rstd * weight, rstd[B,T] = 1/sqrt(mean(inp^2) + eps). */
void lb_ref_rmsnorm_forward(float *out, float *rstd, const float *inp, const float *weight, int B,
                            int T, int C, float eps);
/* dinp[B,T,C] +=, dweight[C] += (dweight may be NULL: frozen). */
void lb_ref_rmsnorm_backward(float *dinp, float *dweight, const float *dout, const float *inp,
                             const float *weight, const float *rstd, int B, int T, int C);

/* --- matmul ------------------------------------------------------------------------- */
/* out[B,T,OC] = inp[B,T,C] weight[OC,C]^T + bias[OC]; bias may be NULL. */
void lb_ref_matmul_forward(float *out, const float *inp, const float *weight, const float *bias,
                           int B, int T, int C, int OC);
/* dinp[B,T,C] += dout W; dweight[OC,C] += dout^T inp; dbias[OC] += sum of dout rows.
 * dinp, dweight and dbias may be NULL (dweight NULL: a frozen weight). */
lb_status lb_ref_matmul_backward(float *dinp, float *dweight, float *dbias, const float *dout,
                                 const float *inp, const float *weight, int B, int T, int C, int OC,
                                 lb_err *err);

/* --- LoRA adapter (model/lora.h) --------------------------------------------------- */
/* u[N,r] = x[N,in] A[r,in]^T, then y[i, 0..out-1] += s u[i,:] Bm[out,r]^T, where row i of
 * y starts at y + i * ldy (an adapter's outputs are a column block of a fused product). */
void lb_ref_lora_forward(float *y, int64_t ldy, float *u, const float *x, const float *A,
                         const float *Bm, int64_t N, int in, int out, int r, float s);
/* Backward of lb_ref_lora_forward given dy (rows ldy apart): dBm[out,r] += s dy^T u;
 * du[N,r] = s dy Bm (overwritten: scratch); dA[r,in] += du^T x; dx[N,in] += du A (dx may
 * be NULL). */
void lb_ref_lora_backward(float *dx, float *dA, float *dBm, float *du, const float *dy, int64_t ldy,
                          const float *x, const float *u, const float *A, const float *Bm,
                          int64_t N, int in, int out, int r, float s);

/* --- attention ---------------------------------------------------------------------- */
/* Causal scaled-dot-product attention with grouped-query heads.
 * qkv [B,T,(NH + 2*NKV)*HD]: per token, NH query heads, then NKV key heads, then NKV value
 * heads, HD floats each (the qkv projection output, after rope for Llama). Query head h
 * reads kv head h / (NH / NKV). Scores are scaled by 1/sqrt(HD).
 * out [B,T,NH*HD]: head h at columns h*HD .. h*HD+HD-1.
 * att [B,NH,T,T]: softmax probabilities; att[b,h,t,t2] = 0 for t2 > t. Kept for backward. */
lb_status lb_ref_attention_forward(float *out, float *att, const float *qkv, int B, int T, int NH,
                                   int NKV, int HD, lb_err *err);
/* dqkv [B,T,(NH+2*NKV)*HD] += gradient of q, k and v given dout [B,T,NH*HD], the forward
 * qkv and att. */
lb_status lb_ref_attention_backward(float *dqkv, const float *dout, const float *qkv,
                                    const float *att, int B, int T, int NH, int NKV, int HD,
                                    lb_err *err);

/* --- rope --------------------------------------------------------------------------- */
/* inv_freq[HD/2]: theta^(-2i/HD), i = 0..HD/2-1, then llama3 scaling when
 * cfg->rope_scaling.enabled (formula in config.h). Computed in double, stored as float. */
void lb_ref_rope_freqs(const lb_model_config *cfg, float *inv_freq);
/* Rotates the q and k heads of qkv [B,T,(NH+2*NKV)*HD] (v heads are copied unchanged) by
 * the angle t * inv_freq[i] for token position t, in the "rotate half" convention of HF
 * Llama: pairs (x[i], x[i + HD/2]), i < HD/2:
 *   out[i] = x[i] cos - x[i+HD/2] sin;  out[i+HD/2] = x[i+HD/2] cos + x[i] sin.
 * Overwrites out; out == inp is allowed (in place). */
void lb_ref_rope_forward(float *out, const float *inp, const float *inv_freq, int B, int T, int NH,
                         int NKV, int HD);
/* The transpose (rotation by -angle): dinp = R^T dout. Overwrites dinp; in place allowed. */
void lb_ref_rope_backward(float *dinp, const float *dout, const float *inv_freq, int B, int T,
                          int NH, int NKV, int HD);

/* Rotates the q and k heads of qkv [N,(NH+2*NKV)*HD] in place, token i by the angle
 * pos[i] * inv_freq (a batch of tokens from many sequences at their own positions). */
void lb_ref_rope_positions(float *qkv, const int32_t *pos, const float *inv_freq, int N, int NH,
                           int NKV, int HD);

/* --- paged attention (inference) ----------------------------------------------------- */
/* Causal attention of N query tokens over a paged key/value cache. k_cache and v_cache are
 * [n_blocks, block_size, NKV, HD]; a sequence's position t lives in block
 * block_table[seq * max_blocks + t / block_size] at row t % block_size. Token i belongs to
 * sequence seq_of[i], sits at position pos[i] and attends to positions 0..pos[i] of its
 * sequence (which the cache must hold, its own included). q is read from qkv [N, (NH +
 * 2*NKV)*HD] (the first NH*HD columns of each row); query head h reads kv head h / (NH /
 * NKV); scores scaled by 1/sqrt(HD). out [N, NH*HD]. */
lb_status lb_ref_paged_attention(float *out, const float *qkv, const float *k_cache,
                                 const float *v_cache, const int32_t *block_table, int max_blocks,
                                 const int32_t *seq_of, const int32_t *pos, int N, int NH, int NKV,
                                 int HD, int block_size, lb_err *err);

/* --- activations -------------------------------------------------------------------- */
/* GELU, tanh approximation: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))). N elements. */
void lb_ref_gelu_forward(float *out, const float *inp, int64_t N);
/* dinp[N] += gelu'(inp) * dout. */
void lb_ref_gelu_backward(float *dinp, const float *inp, const float *dout, int64_t N);
/* SwiGLU: inp [B,T,2F] holds per token gate (first F) then up (next F);
 * out[B,T,F] = silu(gate) * up, silu(x) = x / (1 + exp(-x)). */
void lb_ref_swiglu_forward(float *out, const float *inp, int B, int T, int F);
/* dinp [B,T,2F] += (d gate, d up) given dout [B,T,F]. */
void lb_ref_swiglu_backward(float *dinp, const float *dout, const float *inp, int B, int T, int F);

/* --- residual ----------------------------------------------------------------------- */
/* out[N] = a + b (out may alias a or b). */
void lb_ref_residual_forward(float *out, const float *a, const float *b, int64_t N);
/* da[N] += dout; db[N] += dout. */
void lb_ref_residual_backward(float *da, float *db, const float *dout, int64_t N);

/* --- loss --------------------------------------------------------------------------- */
/* Softmax over V and cross-entropy: probs[B,T,V], losses[B,T] = -log probs[target].
 * targets [B,T] in [0,V). The mean loss is the mean of losses. */
void lb_ref_softmax_crossentropy_forward(float *losses, float *probs, const float *logits,
                                         const int32_t *targets, int B, int T, int V);
/* dlogits[B,T,V] += (probs - onehot(target)) * dloss, where dloss is d(total loss) /
 * d(losses[b,t]) (1/(B*T) for the mean). */
void lb_ref_softmax_crossentropy_backward(float *dlogits, const float *probs,
                                          const int32_t *targets, float dloss, int B, int T, int V);

/* --- optimizer ---------------------------------------------------------------------- */
/* Sum of squares of n gradients, in double (sum these over tensors, then sqrt, for the
 * global norm). */
double lb_ref_sum_squares(const float *x, int64_t n);
/* Clipping multiplier of torch.nn.utils.clip_grad_norm_:
 * min(1, max_norm / (norm + 1e-6)); 1 when max_norm <= 0 (no clipping). */
float lb_ref_clip_scale(double norm, float max_norm);
/* One AdamW step over n parameters (torch.optim.AdamW semantics), step counted from 1:
 *   g = grad * grad_scale
 *   param *= 1 - lr * weight_decay
 *   m = beta1 m + (1 - beta1) g;   v = beta2 v + (1 - beta2) g^2
 *   param -= lr / (1 - beta1^step) * m / (sqrt(v) / sqrt(1 - beta2^step) + eps)
 * Pass weight_decay 0 for tensors that take no decay. */
void lb_ref_adamw_update(float *param, const float *grad, float *m, float *v, int64_t n, float lr,
                         float beta1, float beta2, float eps, float weight_decay, float grad_scale,
                         int step);

#endif
