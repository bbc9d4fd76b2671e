/* lora.h: LoRA adapters on a frozen base (and QLoRA: the base's projections in NF4), the
 * CPU reference of fine-tuning.
 *
 * An adapter on a projection y = x W^T (W [out, in]) adds s (x A^T) B^T with A [r, in],
 * B [out, r] and s = alpha / r. A starts uniform in +-1/sqrt(in) (PyTorch's
 * kaiming_uniform(a = sqrt(5)) bound, as PEFT does), B at zero, so at step 0 the adapted
 * model computes exactly the base model. Targets are the projections of one layer:
 *   q, k, v   row blocks of h.l.qkv.w ([nh hd, d], [nkv hd, d], [nkv hd, d])
 *   o         h.l.attn_out.w [d, d]
 *   gate, up  Llama: row blocks of h.l.mlp_in.w ([d_ff, d] each); GPT-2 has no gate and
 *             its up is the whole c_fc [d_ff, d]
 *   down      h.l.mlp_out.w [d, d_ff]
 * Adapter layout: one float array; per layer (layer-major, stride layer_numel), the A of
 * every chosen target in the order above, then their B in the same order. The chosen
 * targets of one base tensor (q, k, v; gate, up) thus have their A stacked as one
 * [n r, in] matrix, which the GPU multiplies in one product. Gradients and AdamW moments
 * use the same layout.
 *
 * The base is frozen: with an adapter attached (lb_model_attach_lora) the model computes
 * activation gradients through every base product but no base weight, norm or embedding
 * gradient, and keeps no base gradient or optimizer memory. AdamW (fp32 moments) updates
 * the adapters only, weight decay on A and B (2-D), clipping over the adapters' global norm.
 *
 * QLoRA: with LB_QUANT_NF4 every projection of every layer (q, k, v, o, gate, up, down,
 * adapted or not) is quantised to NF4 (model/nf4.h), one NF4 tensor per projection;
 * embeddings, norms, biases and the output head stay as they are. The CPU reference
 * replaces those weights by their dequantised values once, which is what a product with
 * weights dequantised just before it computes.
 * Not here: data parallelism over adapters, loading adapter or base weights from files. */
#ifndef LB_MODEL_LORA_H
#define LB_MODEL_LORA_H

#include <stdint.h>

#include "core/status.h"
#include "model/config.h"
#include "model/model.h"

typedef enum {
    LB_LORA_Q = 0,
    LB_LORA_K,
    LB_LORA_V,
    LB_LORA_O,
    LB_LORA_GATE,
    LB_LORA_UP,
    LB_LORA_DOWN,
    LB_LORA_N_TARGETS,
} lb_lora_target;

typedef enum {
    LB_QUANT_NONE = 0, /* frozen base in the compute type */
    LB_QUANT_NF4,      /* frozen projections in NF4 (QLoRA) */
} lb_quant_kind;

#define LB_QUANT_CHOICES "none|nf4"

typedef struct {
    int rank;         /* r; 0 = no adapters */
    float alpha;      /* scale = alpha / rank */
    unsigned targets; /* bit (1u << lb_lora_target) per adapted projection */
    lb_quant_kind quant;
} lb_lora_config;

const char *lb_lora_target_name(lb_lora_target t);
const char *lb_lora_quant_name(lb_quant_kind q);
/* "none" or "nf4"; LB_ERR_USAGE naming the valid choices otherwise. */
lb_status lb_lora_quant_parse(const char *s, lb_quant_kind *out, lb_err *err);
/* Comma-separated target names, or "all" (every projection the family has). LB_ERR_USAGE
 * for an unknown, repeated or (GPT-2's gate) absent name. */
lb_status lb_lora_targets_parse(const char *s, lb_model_family family, unsigned *out, lb_err *err);
/* Every projection the family has. */
unsigned lb_lora_all_targets(lb_model_family family);
/* Writes the target names of mask, comma-separated, into buf. */
void lb_lora_targets_format(unsigned mask, char *buf, int cap);
/* LB_ERR_USAGE when rank < 1, alpha <= 0, no target, or rank > min(in, out) of a target. */
lb_status lb_lora_config_check(const lb_lora_config *lc, const lb_model_config *cfg, lb_err *err);

/* Where a target sits: its base weight is rows row0 .. row0+out-1 of the layer tensor
 * `tensor` ([ld_out, in], ld_out = the tensor's rows), so in a product over the whole
 * tensor its outputs are columns row0 .. row0+out-1 of rows ld_out wide. */
typedef enum {
    LB_LORA_IN_QKV,
    LB_LORA_IN_ATTN_OUT,
    LB_LORA_IN_MLP_IN,
    LB_LORA_IN_MLP_OUT
} lb_lora_tensor;
typedef struct {
    lb_lora_tensor tensor;
    int in, out, row0, ld_out;
} lb_lora_proj;
lb_lora_proj lb_lora_projection(const lb_model_config *cfg, lb_lora_target t);
/* Offset of a target's base weight within a layer (lb_param_offsets.layer). */
int64_t lb_lora_base_offset(const lb_param_offsets *o, const lb_lora_proj *p);

/* Adapter layout: offsets relative to a layer's start; -1 for targets not chosen. */
typedef struct {
    int64_t a[LB_LORA_N_TARGETS], b[LB_LORA_N_TARGETS];
    int64_t layer_numel; /* adapter elements per layer */
    int64_t total;       /* adapter elements in all layers (trainable parameters) */
} lb_lora_offsets;
void lb_lora_offsets_compute(const lb_model_config *cfg, const lb_lora_config *lc,
                             lb_lora_offsets *out);
/* Trainable parameters: sum over layers and targets of r (in + out). */
int64_t lb_lora_param_count(const lb_model_config *cfg, const lb_lora_config *lc);
/* Bytes of the frozen base at elt_bytes per element, its projections in NF4 when quant
 * says so. */
int64_t lb_lora_base_bytes(const lb_model_config *cfg, lb_quant_kind quant, int elt_bytes);
/* Training FLOPs per token of a frozen base with adapters (docs/METRICS.md):
 * 4 N + 6 N_adapters + 6 L d T, N = lb_model_matmul_param_count (no base weight gradients:
 * 2 N forward, 2 N backward). */
double lb_lora_train_flops_per_token(const lb_model_config *cfg, const lb_lora_config *lc,
                                     int64_t seq_len);

/* The seed of a run's adapters: its base's seed with these bits flipped, so the two draws
 * are apart and the CPU and GPU paths draw the same adapters. */
#define LB_LORA_SEED_SALT 0x9e3779b97f4a7c15ull

/* Adapters of the CPU reference: parameters, gradients, moments and the rank-r
 * intermediates u = x A^T the backward needs ([L, targets, B*T, r]). */
struct lb_lora {
    lb_lora_config lc;
    lb_lora_offsets off;
    float scale;           /* alpha / rank */
    float *params, *grads; /* [off.total]; owned */
    float *m, *v;          /* [off.total] AdamW moments; owned */
    float *u;              /* [L, LB_LORA_N_TARGETS, B*T, r]; owned */
    float *du;             /* [B*T, r] scratch of the backward; owned */
    int64_t max_tokens;    /* B*T the intermediates hold */
};

/* Allocates adapters for batches of up to max_tokens tokens: A uniform in +-1/sqrt(in)
 * from seed, B zero. lc must pass lb_lora_config_check. On failure l is left freed. */
lb_status lb_lora_init(lb_lora *l, const lb_model_config *cfg, const lb_lora_config *lc,
                       int64_t max_tokens, uint64_t seed, lb_err *err);
void lb_lora_free(lb_lora *l);
/* The intermediate u of layer `layer`, target t. */
float *lb_lora_u(const lb_lora *l, int layer, lb_lora_target t);
/* params (base layout) += s B A for every adapter: the merged weights, whose base-only
 * forward equals the adapted forward. */
void lb_lora_merge(const lb_lora *l, const lb_model_config *cfg, float *params);
/* Clips the adapters' gradient by global norm, then one AdamW step (model.h's semantics)
 * over the adapters; the norm before clipping to *grad_norm_out (may be NULL). */
void lb_lora_adamw_step(lb_lora *l, const lb_adamw_params *p, int step, float *grad_norm_out);
/* QLoRA's base on the CPU: every projection of params (base layout) replaced by its NF4
 * round trip. LB_ERR_NOMEM when the scratch cannot be allocated. */
lb_status lb_lora_quantize_base(const lb_model_config *cfg, float *params, lb_err *err);

#endif
