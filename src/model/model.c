/* model.c: the CPU reference transformer (model.h), assembled from ref.
 *
 * The forward keeps every activation the backward needs, per layer, in one arena; the
 * backward walks the layers in reverse with one layer's worth of activation gradients,
 * accumulating into the flat gradient array in the layout of config.h. The family only
 * changes which op runs at four places (embedding, norm, rope, MLP activation), so both
 * families share one code path. Not here: mixed precision, recomputation, data. */
#include "model/model.h"

#include <assert.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/rng.h"
#include "model/lora.h"
#include "model/ref.h"
#include "model/safetensors.h"

lb_adamw_params lb_model_adamw_default_params(void) {
    return (lb_adamw_params){.lr = 3e-4f,
                             .beta1 = 0.9f,
                             .beta2 = 0.95f,
                             .eps = 1e-8f,
                             .weight_decay = 0.1f,
                             .grad_clip = 1.0f};
}

/* base + off, or NULL for an absent tensor (offset -1). */
static float *at(float *base, int64_t off) {
    return off < 0 ? NULL : base + off;
}

/* Carves the activation arena; with arena NULL only counts. Returns floats needed. */
static size_t carve_activations(lb_model *m, float *arena) {
    const lb_model_config *c = &m->cfg;
    const size_t BT = (size_t)m->B * m->T, C = (size_t)c->d_model, L = (size_t)c->n_layer;
    const size_t Q = (size_t)lb_model_qkv_dim(c), F = (size_t)lb_model_mlp_in_dim(c);
    const size_t H = (size_t)c->d_ff, V = (size_t)c->vocab_size;
    const size_t att = (size_t)m->B * c->n_head * m->T * m->T;
    const size_t mean = c->family == LB_FAMILY_GPT2 ? 1 : 0;
    size_t used = 0;
#define TAKE(field, n)                                                                             \
    do {                                                                                           \
        if (arena) field = ((n) > 0) ? arena + used : NULL;                                        \
        used += (n);                                                                               \
    } while (0)
    lb_activations *a = &m->acts;
    TAKE(a->encoded, BT * C);
    TAKE(a->norm1, L * BT * C);
    TAKE(a->norm1_mean, mean * L * BT);
    TAKE(a->norm1_rstd, L * BT);
    TAKE(a->qkv, L * BT * Q);
    TAKE(a->att, L * att);
    TAKE(a->atty, L * BT * C);
    TAKE(a->residual2, L * BT * C);
    TAKE(a->norm2, L * BT * C);
    TAKE(a->norm2_mean, mean * L * BT);
    TAKE(a->norm2_rstd, L * BT);
    TAKE(a->mlp_in, L * BT * F);
    TAKE(a->mlp_act, L * BT * H);
    TAKE(a->residual3, L * BT * C);
    TAKE(a->branch, BT * C);
    TAKE(a->normf, BT * C);
    TAKE(a->normf_mean, mean * BT);
    TAKE(a->normf_rstd, BT);
    TAKE(a->logits, BT * V);
    TAKE(a->probs, BT * V);
    TAKE(a->losses, BT);
    lb_activation_grads *d = &m->dacts;
    TAKE(d->dresidual, BT * C);
    TAKE(d->dnorm, BT * C);
    TAKE(d->dqkv, BT * Q);
    TAKE(d->datty, BT * C);
    TAKE(d->dmlp_in, BT * F);
    TAKE(d->dmlp_act, BT * H);
    TAKE(d->dlogits, BT * V);
#undef TAKE
    return used;
}

static void init_weights(lb_model *m, uint64_t seed) {
    lb_rng rng;
    lb_rng_seed(&rng, seed);
    const double std = 0.02, std_resid = 0.02 / sqrt(2.0 * m->cfg.n_layer);
    for (int i = 0; i < m->n_tensors; i++) {
        const lb_param_tensor *t = &m->layout[i];
        float *p = m->params + t->offset;
        const char *dot = strrchr(t->name, '.');
        if (t->ndim == 2) {
            int resid = strstr(t->name, "attn_out.w") || strstr(t->name, "mlp_out.w");
            double s = resid ? std_resid : std;
            for (int64_t j = 0; j < t->numel; j++)
                p[j] = (float)(s * lb_rng_normal(&rng));
        } else {
            float fill = strstr(t->name, "norm") && dot && strcmp(dot, ".w") == 0 ? 1.0f : 0.0f;
            for (int64_t j = 0; j < t->numel; j++)
                p[j] = fill;
        }
    }
}

lb_status lb_model_init(lb_model *m, const lb_model_config *cfg, int B, int T, uint64_t seed,
                        lb_err *err) {
    memset(m, 0, sizeof *m);
    LB_TRY(lb_model_config_check(cfg, err));
    if (B < 1 || T < 1 || T > cfg->max_seq)
        return lb_fail(err, LB_ERR_USAGE,
                       "model '%s': batch %d x sequence %d: need batch >= 1 and 1 <= sequence "
                       "<= %d (the model's context)",
                       cfg->name, B, T, cfg->max_seq);
    m->cfg = *cfg;
    m->B = B;
    m->T = T;
    lb_model_param_offsets(cfg, &m->off);
    m->n_params = m->off.total;
    m->n_tensors = lb_model_param_layout(cfg, NULL, 0);
    m->layout = calloc((size_t)m->n_tensors, sizeof *m->layout);
    m->params = malloc((size_t)m->n_params * sizeof(float));
    m->grads = calloc((size_t)m->n_params, sizeof(float));
    m->m = calloc((size_t)m->n_params, sizeof(float));
    m->v = calloc((size_t)m->n_params, sizeof(float));
    m->inputs = calloc((size_t)B * T, sizeof(int32_t));
    m->targets = calloc((size_t)B * T, sizeof(int32_t));
    m->act_floats = carve_activations(m, NULL);
    m->act_arena = calloc(m->act_floats, sizeof(float));
    if (cfg->family == LB_FAMILY_LLAMA)
        m->inv_freq = malloc((size_t)lb_model_head_dim(cfg) / 2 * sizeof(float));
    if (!m->layout || !m->params || !m->grads || !m->m || !m->v || !m->inputs || !m->targets ||
        !m->act_arena || (cfg->family == LB_FAMILY_LLAMA && !m->inv_freq)) {
        size_t bytes = ((size_t)m->n_params * 4 + m->act_floats) * sizeof(float);
        lb_model_free(m);
        return lb_fail(err, LB_ERR_NOMEM,
                       "model '%s': cannot allocate %.2f GB of host memory for batch %d x %d",
                       cfg->name, bytes / 1e9, B, T);
    }
    lb_model_param_layout(cfg, m->layout, m->n_tensors);
    carve_activations(m, m->act_arena);
    if (m->inv_freq) lb_ref_rope_freqs(cfg, m->inv_freq);
    init_weights(m, seed);
    return LB_OK;
}

void lb_model_free(lb_model *m) {
    if (!m) return;
    free(m->layout);
    free(m->params);
    free(m->grads);
    free(m->m);
    free(m->v);
    free(m->inputs);
    free(m->targets);
    free(m->act_arena);
    free(m->inv_freq);
    memset(m, 0, sizeof *m);
}

lb_status lb_model_load_weights(lb_model *m, const char *path, lb_err *err) {
    lb_safetensors st;
    LB_TRY(lb_safetensors_open(&st, path, err));
    lb_status rc = LB_OK;
    for (int i = 0; i < m->n_tensors && rc == LB_OK; i++) {
        const lb_param_tensor *t = &m->layout[i];
        const lb_st_tensor *s = lb_safetensors_find(&st, t->name);
        if (!s) {
            rc = lb_fail(err, LB_ERR_FORMAT, "%s: no tensor '%s', which model '%s' needs", path,
                         t->name, m->cfg.name);
            break;
        }
        int shape_ok = s->ndim == t->ndim && s->shape[0] == t->shape[0] &&
                       (t->ndim == 1 || s->shape[1] == t->shape[1]);
        if (s->dtype != LB_ST_F32 || !shape_ok)
            rc = lb_fail(err, LB_ERR_FORMAT,
                         "%s: tensor '%s' must be F32 of shape [%lld%s%lld] for model '%s'", path,
                         t->name, (long long)t->shape[0], t->ndim == 2 ? ", " : "",
                         t->ndim == 2 ? (long long)t->shape[1] : 0LL, m->cfg.name);
        else
            memcpy(m->params + t->offset, s->data, s->bytes);
    }
    lb_safetensors_close(&st);
    return rc;
}

lb_status lb_model_attach_lora(lb_model *m, lb_lora *l, lb_err *err) {
    lb_lora_offsets want;
    lb_lora_offsets_compute(&m->cfg, &l->lc, &want);
    if (memcmp(&want, &l->off, sizeof want) != 0)
        return lb_fail(err, LB_ERR_USAGE,
                       "adapters of %lld elements were made for another model: model '%s' needs "
                       "%lld at rank %d",
                       (long long)l->off.total, m->cfg.name, (long long)want.total, l->lc.rank);
    if (l->max_tokens < (int64_t)m->B * m->T)
        return lb_fail(err, LB_ERR_USAGE,
                       "adapters hold %lld tokens of intermediates, model '%s' runs %d x %d",
                       (long long)l->max_tokens, m->cfg.name, m->B, m->T);
    free(m->grads);
    free(m->m);
    free(m->v);
    m->grads = m->m = m->v = NULL;
    m->lora = l;
    return LB_OK;
}

/* Adds the adapters on base tensor `which` of layer l to its product's output y
 * (rows ld_out wide) for the input x of N tokens. */
static void lora_forward(lb_model *m, int l, lb_lora_tensor which, float *y, const float *x,
                         int64_t N) {
    const lb_lora *a = m->lora;
    if (!a) return;
    for (int t = 0; t < LB_LORA_N_TARGETS; t++) {
        lb_lora_proj p = lb_lora_projection(&m->cfg, (lb_lora_target)t);
        if (a->off.a[t] < 0 || p.tensor != which) continue;
        const float *lp = a->params + l * a->off.layer_numel;
        lb_ref_lora_forward(y + p.row0, p.ld_out, lb_lora_u(a, l, (lb_lora_target)t), x,
                            lp + a->off.a[t], lp + a->off.b[t], N, p.in, p.out, a->lc.rank,
                            a->scale);
    }
}

/* The adapters' backward on base tensor `which` of layer l: dy is the gradient of the
 * product's output (rows ld_out wide), x its input; accumulates into dx and the adapters'
 * gradients. */
static void lora_backward(lb_model *m, int l, lb_lora_tensor which, float *dx, const float *dy,
                          const float *x, int64_t N) {
    lb_lora *a = m->lora;
    if (!a) return;
    for (int t = 0; t < LB_LORA_N_TARGETS; t++) {
        lb_lora_proj p = lb_lora_projection(&m->cfg, (lb_lora_target)t);
        if (a->off.a[t] < 0 || p.tensor != which) continue;
        const float *lp = a->params + l * a->off.layer_numel;
        float *lg = a->grads + l * a->off.layer_numel;
        lb_ref_lora_backward(dx, lg + a->off.a[t], lg + a->off.b[t], a->du, dy + p.row0, p.ld_out,
                             x, lb_lora_u(a, l, (lb_lora_target)t), lp + a->off.a[t],
                             lp + a->off.b[t], N, p.in, p.out, a->lc.rank, a->scale);
    }
}

/* Gradient of the tensor at offset off (of layer l, or global with l < 0); NULL when the
 * tensor is absent or the base is frozen. */
static float *grad_at(const lb_model *m, int l, int64_t off) {
    if (!m->grads || off < 0) return NULL;
    return m->grads + (l >= 0 ? m->off.layers + l * m->off.layer_numel : 0) + off;
}

/* LayerNorm (GPT-2) or RMSNorm (Llama). mean is unused by RMSNorm. */
static void norm_forward(const lb_model *m, float *out, float *mean, float *rstd, const float *inp,
                         const float *w, const float *b, int B, int T) {
    const int C = m->cfg.d_model;
    if (m->cfg.family == LB_FAMILY_GPT2)
        lb_ref_layernorm_forward(out, mean, rstd, inp, w, b, B, T, C, m->cfg.norm_eps);
    else
        lb_ref_rmsnorm_forward(out, rstd, inp, w, B, T, C, m->cfg.norm_eps);
}

static void norm_backward(const lb_model *m, float *dinp, float *dw, float *db, const float *dout,
                          const float *inp, const float *w, const float *mean, const float *rstd,
                          int B, int T) {
    const int C = m->cfg.d_model;
    if (m->cfg.family == LB_FAMILY_GPT2)
        lb_ref_layernorm_backward(dinp, dw, db, dout, inp, w, mean, rstd, B, T, C);
    else
        lb_ref_rmsnorm_backward(dinp, dw, dout, inp, w, rstd, B, T, C);
}

void lb_model_set_hook(lb_model *m, lb_model_hook fn, void *ctx) {
    m->hook = fn;
    m->hook_ctx = ctx;
}

static void hook(const lb_model *m, lb_model_event ev, int unit) {
    if (m->hook != NULL) m->hook(m->hook_ctx, ev, unit);
}

/* Pointers to layer l's activations (strides use the allocated B x T). */
typedef struct {
    float *norm1, *norm1_mean, *norm1_rstd, *qkv, *att, *atty, *residual2;
    float *norm2, *norm2_mean, *norm2_rstd, *mlp_in, *mlp_act, *residual3;
    float *input; /* the layer's input: encoded or the previous residual3 */
} layer_acts;

static layer_acts layer_at(const lb_model *m, int l) {
    const lb_model_config *c = &m->cfg;
    const lb_activations *a = &m->acts;
    const size_t BT = (size_t)m->B * m->T, C = (size_t)c->d_model;
    const size_t Q = (size_t)lb_model_qkv_dim(c), F = (size_t)lb_model_mlp_in_dim(c);
    const size_t H = (size_t)c->d_ff, att = (size_t)m->B * c->n_head * m->T * m->T;
    layer_acts r = {
        .norm1 = a->norm1 + l * BT * C,
        .norm1_mean = a->norm1_mean ? a->norm1_mean + l * BT : NULL,
        .norm1_rstd = a->norm1_rstd + l * BT,
        .qkv = a->qkv + l * BT * Q,
        .att = a->att + l * att,
        .atty = a->atty + l * BT * C,
        .residual2 = a->residual2 + l * BT * C,
        .norm2 = a->norm2 + l * BT * C,
        .norm2_mean = a->norm2_mean ? a->norm2_mean + l * BT : NULL,
        .norm2_rstd = a->norm2_rstd + l * BT,
        .mlp_in = a->mlp_in + l * BT * F,
        .mlp_act = a->mlp_act + l * BT * H,
        .residual3 = a->residual3 + l * BT * C,
        .input = l == 0 ? a->encoded : a->residual3 + (l - 1) * BT * C,
    };
    return r;
}

lb_status lb_model_forward(lb_model *m, const int32_t *inputs, const int32_t *targets, int B, int T,
                           float *loss_out, lb_err *err) {
    const lb_model_config *c = &m->cfg;
    const lb_param_offsets *o = &m->off;
    const int C = c->d_model, Q = lb_model_qkv_dim(c), F = lb_model_mlp_in_dim(c);
    const int H = c->d_ff, V = c->vocab_size, NH = c->n_head, NKV = c->n_kv_head;
    const int HD = lb_model_head_dim(c);
    const int64_t BT = (int64_t)B * T;
    assert(B >= 1 && B <= m->B && T >= 1 && T <= m->T);
    for (int64_t i = 0; i < BT; i++) {
        assert(inputs[i] >= 0 && inputs[i] < V);
        assert(!targets || (targets[i] >= 0 && targets[i] < V));
    }
    float *p = m->params;
    lb_activations *a = &m->acts;
    memcpy(m->inputs, inputs, (size_t)BT * sizeof(int32_t));
    m->last_B = B;
    m->last_T = T;

    hook(m, LB_MODEL_FORWARD_BEGIN, 0);
    if (c->family == LB_FAMILY_GPT2)
        lb_ref_encoder_forward(a->encoded, inputs, p + o->wte, p + o->wpe, B, T, C);
    else
        lb_ref_embedding_forward(a->encoded, inputs, p + o->wte, B, T, C);
    hook(m, LB_MODEL_FORWARD_END, 0);

    for (int l = 0; l < c->n_layer; l++) {
        hook(m, LB_MODEL_FORWARD_BEGIN, 1 + l);
        layer_acts x = layer_at(m, l);
        float *lp = p + o->layers + l * o->layer_numel;
        const lb_layer_offsets *lo = &o->layer;
        norm_forward(m, x.norm1, x.norm1_mean, x.norm1_rstd, x.input, lp + lo->norm1_w,
                     at(lp, lo->norm1_b), B, T);
        lb_ref_matmul_forward(x.qkv, x.norm1, lp + lo->qkv_w, at(lp, lo->qkv_b), B, T, C, Q);
        lora_forward(m, l, LB_LORA_IN_QKV, x.qkv, x.norm1, BT);
        if (c->family == LB_FAMILY_LLAMA)
            lb_ref_rope_forward(x.qkv, x.qkv, m->inv_freq, B, T, NH, NKV, HD);
        LB_TRY(lb_ref_attention_forward(x.atty, x.att, x.qkv, B, T, NH, NKV, HD, err));
        lb_ref_matmul_forward(a->branch, x.atty, lp + lo->attn_out_w, at(lp, lo->attn_out_b), B, T,
                              C, C);
        lora_forward(m, l, LB_LORA_IN_ATTN_OUT, a->branch, x.atty, BT);
        lb_ref_residual_forward(x.residual2, x.input, a->branch, BT * C);
        norm_forward(m, x.norm2, x.norm2_mean, x.norm2_rstd, x.residual2, lp + lo->norm2_w,
                     at(lp, lo->norm2_b), B, T);
        lb_ref_matmul_forward(x.mlp_in, x.norm2, lp + lo->mlp_in_w, at(lp, lo->mlp_in_b), B, T, C,
                              F);
        lora_forward(m, l, LB_LORA_IN_MLP_IN, x.mlp_in, x.norm2, BT);
        if (c->family == LB_FAMILY_GPT2)
            lb_ref_gelu_forward(x.mlp_act, x.mlp_in, BT * H);
        else
            lb_ref_swiglu_forward(x.mlp_act, x.mlp_in, B, T, H);
        lb_ref_matmul_forward(a->branch, x.mlp_act, lp + lo->mlp_out_w, at(lp, lo->mlp_out_b), B, T,
                              H, C);
        lora_forward(m, l, LB_LORA_IN_MLP_OUT, a->branch, x.mlp_act, BT);
        lb_ref_residual_forward(x.residual3, x.residual2, a->branch, BT * C);
        hook(m, LB_MODEL_FORWARD_END, 1 + l);
    }
    hook(m, LB_MODEL_FORWARD_BEGIN, c->n_layer + 1);
    const float *last = layer_at(m, c->n_layer - 1).residual3;
    norm_forward(m, a->normf, a->normf_mean, a->normf_rstd, last, p + o->normf_w, at(p, o->normf_b),
                 B, T);
    lb_ref_matmul_forward(a->logits, a->normf, p + o->lm_head, NULL, B, T, C, V);

    m->have_targets = targets != NULL;
    hook(m, LB_MODEL_FORWARD_END, c->n_layer + 1);
    if (!targets) return LB_OK;
    memcpy(m->targets, targets, (size_t)BT * sizeof(int32_t));
    lb_ref_softmax_crossentropy_forward(a->losses, a->probs, a->logits, targets, B, T, V);
    double sum = 0.0;
    for (int64_t i = 0; i < BT; i++)
        sum += a->losses[i];
    m->mean_loss = (float)(sum / (double)BT);
    if (loss_out) *loss_out = m->mean_loss;
    return LB_OK;
}

void lb_model_zero_grad(lb_model *m) {
    if (m->grads) memset(m->grads, 0, (size_t)m->n_params * sizeof(float));
    if (m->lora) memset(m->lora->grads, 0, (size_t)m->lora->off.total * sizeof(float));
}

lb_status lb_model_backward(lb_model *m, lb_err *err) {
    assert(m->have_targets);
    const lb_model_config *c = &m->cfg;
    const lb_param_offsets *o = &m->off;
    const int B = m->last_B, T = m->last_T;
    const int C = c->d_model, Q = lb_model_qkv_dim(c), F = lb_model_mlp_in_dim(c);
    const int H = c->d_ff, V = c->vocab_size, NH = c->n_head, NKV = c->n_kv_head;
    const int HD = lb_model_head_dim(c);
    const int64_t BT = (int64_t)B * T;
    const float *p = m->params;
    const lb_activations *a = &m->acts;
    const lb_activation_grads *d = &m->dacts;
#define ZERO(buf, n) memset(buf, 0, (size_t)(n) * sizeof(float))

    hook(m, LB_MODEL_BACKWARD_BEGIN, c->n_layer + 1);
    ZERO(d->dlogits, BT * V);
    lb_ref_softmax_crossentropy_backward(d->dlogits, a->probs, m->targets,
                                         (float)(1.0 / (double)BT), B, T, V);
    ZERO(d->dnorm, BT * C);
    LB_TRY(lb_ref_matmul_backward(d->dnorm, grad_at(m, -1, o->lm_head), NULL, d->dlogits, a->normf,
                                  p + o->lm_head, B, T, C, V, err));
    ZERO(d->dresidual, BT * C);
    norm_backward(m, d->dresidual, grad_at(m, -1, o->normf_w), grad_at(m, -1, o->normf_b), d->dnorm,
                  layer_at(m, c->n_layer - 1).residual3, p + o->normf_w, a->normf_mean,
                  a->normf_rstd, B, T);
    hook(m, LB_MODEL_BACKWARD_END, c->n_layer + 1);

    for (int l = c->n_layer - 1; l >= 0; l--) {
        hook(m, LB_MODEL_BACKWARD_BEGIN, 1 + l);
        layer_acts x = layer_at(m, l);
        const float *lp = p + o->layers + l * o->layer_numel;
        const lb_layer_offsets *lo = &o->layer;
        /* MLP branch: d(branch) = dresidual, which also flows straight to residual2. */
        ZERO(d->dmlp_act, BT * H);
        LB_TRY(lb_ref_matmul_backward(d->dmlp_act, grad_at(m, l, lo->mlp_out_w),
                                      grad_at(m, l, lo->mlp_out_b), d->dresidual, x.mlp_act,
                                      lp + lo->mlp_out_w, B, T, H, C, err));
        lora_backward(m, l, LB_LORA_IN_MLP_OUT, d->dmlp_act, d->dresidual, x.mlp_act, BT);
        ZERO(d->dmlp_in, BT * F);
        if (c->family == LB_FAMILY_GPT2)
            lb_ref_gelu_backward(d->dmlp_in, x.mlp_in, d->dmlp_act, BT * H);
        else
            lb_ref_swiglu_backward(d->dmlp_in, d->dmlp_act, x.mlp_in, B, T, H);
        ZERO(d->dnorm, BT * C);
        LB_TRY(lb_ref_matmul_backward(d->dnorm, grad_at(m, l, lo->mlp_in_w),
                                      grad_at(m, l, lo->mlp_in_b), d->dmlp_in, x.norm2,
                                      lp + lo->mlp_in_w, B, T, C, F, err));
        lora_backward(m, l, LB_LORA_IN_MLP_IN, d->dnorm, d->dmlp_in, x.norm2, BT);
        norm_backward(m, d->dresidual, grad_at(m, l, lo->norm2_w), grad_at(m, l, lo->norm2_b),
                      d->dnorm, x.residual2, lp + lo->norm2_w, x.norm2_mean, x.norm2_rstd, B, T);
        /* Attention branch, likewise from residual2 back to the layer input. */
        ZERO(d->datty, BT * C);
        LB_TRY(lb_ref_matmul_backward(d->datty, grad_at(m, l, lo->attn_out_w),
                                      grad_at(m, l, lo->attn_out_b), d->dresidual, x.atty,
                                      lp + lo->attn_out_w, B, T, C, C, err));
        lora_backward(m, l, LB_LORA_IN_ATTN_OUT, d->datty, d->dresidual, x.atty, BT);
        ZERO(d->dqkv, BT * Q);
        LB_TRY(lb_ref_attention_backward(d->dqkv, d->datty, x.qkv, x.att, B, T, NH, NKV, HD, err));
        if (c->family == LB_FAMILY_LLAMA)
            lb_ref_rope_backward(d->dqkv, d->dqkv, m->inv_freq, B, T, NH, NKV, HD);
        ZERO(d->dnorm, BT * C);
        LB_TRY(lb_ref_matmul_backward(d->dnorm, grad_at(m, l, lo->qkv_w), grad_at(m, l, lo->qkv_b),
                                      d->dqkv, x.norm1, lp + lo->qkv_w, B, T, C, Q, err));
        lora_backward(m, l, LB_LORA_IN_QKV, d->dnorm, d->dqkv, x.norm1, BT);
        norm_backward(m, d->dresidual, grad_at(m, l, lo->norm1_w), grad_at(m, l, lo->norm1_b),
                      d->dnorm, x.input, lp + lo->norm1_w, x.norm1_mean, x.norm1_rstd, B, T);
        hook(m, LB_MODEL_BACKWARD_END, 1 + l);
    }
    if (!m->grads) return LB_OK; /* frozen base: no embedding gradient */
    hook(m, LB_MODEL_BACKWARD_BEGIN, 0);
    if (c->family == LB_FAMILY_GPT2)
        lb_ref_encoder_backward(m->grads + o->wte, m->grads + o->wpe, d->dresidual, m->inputs, B, T,
                                C);
    else
        lb_ref_embedding_backward(m->grads + o->wte, d->dresidual, m->inputs, B, T, C);
    hook(m, LB_MODEL_BACKWARD_END, 0);
#undef ZERO
    return LB_OK;
}

void lb_model_adamw_step(lb_model *m, const lb_adamw_params *p, int step, float *grad_norm_out) {
    if (m->lora) {
        lb_lora_adamw_step(m->lora, p, step, grad_norm_out);
        return;
    }
    double norm = sqrt(lb_ref_sum_squares(m->grads, m->n_params));
    float scale = lb_ref_clip_scale(norm, p->grad_clip);
    for (int i = 0; i < m->n_tensors; i++) {
        const lb_param_tensor *t = &m->layout[i];
        lb_ref_adamw_update(m->params + t->offset, m->grads + t->offset, m->m + t->offset,
                            m->v + t->offset, t->numel, p->lr, p->beta1, p->beta2, p->eps,
                            t->decay ? p->weight_decay : 0.0f, scale, step);
    }
    if (grad_norm_out) *grad_norm_out = (float)norm;
}
