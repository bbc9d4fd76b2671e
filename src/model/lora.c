/* lora.c: adapter configuration, layout, counts, initialisation, merging, the adapters'
 * AdamW step and the CPU's NF4 base (lora.h).
 *
 * Everything that depends on where a target sits in the fused base tensors goes through
 * lb_lora_projection, so the CPU reference, the GPU path and the counts agree by
 * construction. Not here: the adapters' forward and backward inside the model (model.c,
 * with the ops of ref.h). */
#include "model/lora.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/rng.h"
#include "model/nf4.h"
#include "model/ref.h"

static const char *const target_names[LB_LORA_N_TARGETS] = {"q",    "k",  "v",   "o",
                                                            "gate", "up", "down"};

const char *lb_lora_target_name(lb_lora_target t) {
    return t >= 0 && t < LB_LORA_N_TARGETS ? target_names[t] : "?";
}

const char *lb_lora_quant_name(lb_quant_kind q) {
    return q == LB_QUANT_NF4 ? "nf4" : "none";
}

lb_status lb_lora_quant_parse(const char *s, lb_quant_kind *out, lb_err *err) {
    if (s && strcmp(s, "none") == 0)
        *out = LB_QUANT_NONE;
    else if (s && strcmp(s, "nf4") == 0)
        *out = LB_QUANT_NF4;
    else
        return lb_fail(err, LB_ERR_USAGE, "--quant expects none or nf4, got '%s'",
                       s ? s : "(null)");
    return LB_OK;
}

unsigned lb_lora_all_targets(lb_model_family family) {
    unsigned all = (1u << LB_LORA_N_TARGETS) - 1;
    return family == LB_FAMILY_GPT2 ? all & ~(1u << LB_LORA_GATE) : all;
}

lb_status lb_lora_targets_parse(const char *s, lb_model_family family, unsigned *out, lb_err *err) {
    if (strcmp(s, "all") == 0) {
        *out = lb_lora_all_targets(family);
        return LB_OK;
    }
    unsigned mask = 0;
    const char *p = s;
    for (;;) {
        size_t len = strcspn(p, ",");
        int found = -1;
        for (int t = 0; t < LB_LORA_N_TARGETS; t++)
            if (strlen(target_names[t]) == len && strncmp(p, target_names[t], len) == 0) found = t;
        if (found < 0 && (len == 0 || (len == 3 && strncmp(p, "all", 3) == 0)))
            return lb_fail(err, LB_ERR_USAGE,
                           "--lora-targets '%s': %s; give all alone or a comma-separated list of "
                           "q, k, v, o, gate, up, down",
                           s, len == 0 ? "an empty item" : "all stands alone, not in a list");
        if (found < 0)
            return lb_fail(err, LB_ERR_USAGE,
                           "--lora-targets: unknown projection '%.*s' in '%s': expected a "
                           "comma-separated list of q, k, v, o, gate, up, down, or all",
                           (int)len, p, s);
        if (mask & (1u << found))
            return lb_fail(err, LB_ERR_USAGE, "--lora-targets: '%s' is named twice in '%s'",
                           target_names[found], s);
        if (!(lb_lora_all_targets(family) & (1u << found)))
            return lb_fail(err, LB_ERR_USAGE,
                           "--lora-targets '%s': GPT-2 models have no gate projection (their MLP "
                           "is up and down); name q, k, v, o, up or down",
                           s);
        mask |= 1u << found;
        if (p[len] == '\0') break;
        p += len + 1;
    }
    *out = mask;
    return LB_OK;
}

void lb_lora_targets_format(unsigned mask, char *buf, int cap) {
    int used = 0;
    buf[0] = '\0';
    for (int t = 0; t < LB_LORA_N_TARGETS && used < cap; t++)
        if (mask & (1u << t))
            used += snprintf(buf + used, (size_t)(cap - used), "%s%s", used ? "," : "",
                             target_names[t]);
}

lb_lora_proj lb_lora_projection(const lb_model_config *c, lb_lora_target t) {
    const int d = c->d_model, hd = lb_model_head_dim(c), q = c->n_head * hd;
    const int kv = c->n_kv_head * hd, qkv = lb_model_qkv_dim(c), F = lb_model_mlp_in_dim(c);
    const int gpt2 = c->family == LB_FAMILY_GPT2;
    switch (t) {
    case LB_LORA_Q: return (lb_lora_proj){LB_LORA_IN_QKV, d, q, 0, qkv};
    case LB_LORA_K: return (lb_lora_proj){LB_LORA_IN_QKV, d, kv, q, qkv};
    case LB_LORA_V: return (lb_lora_proj){LB_LORA_IN_QKV, d, kv, q + kv, qkv};
    case LB_LORA_O: return (lb_lora_proj){LB_LORA_IN_ATTN_OUT, q, d, 0, d};
    case LB_LORA_GATE: return (lb_lora_proj){LB_LORA_IN_MLP_IN, d, c->d_ff, 0, F};
    case LB_LORA_UP: return (lb_lora_proj){LB_LORA_IN_MLP_IN, d, c->d_ff, gpt2 ? 0 : c->d_ff, F};
    case LB_LORA_DOWN:
    default: return (lb_lora_proj){LB_LORA_IN_MLP_OUT, c->d_ff, d, 0, d};
    }
}

int64_t lb_lora_base_offset(const lb_param_offsets *o, const lb_lora_proj *p) {
    const lb_layer_offsets *L = &o->layer;
    int64_t start = p->tensor == LB_LORA_IN_QKV        ? L->qkv_w
                    : p->tensor == LB_LORA_IN_ATTN_OUT ? L->attn_out_w
                    : p->tensor == LB_LORA_IN_MLP_IN   ? L->mlp_in_w
                                                       : L->mlp_out_w;
    return start + (int64_t)p->row0 * p->in;
}

lb_status lb_lora_config_check(const lb_lora_config *lc, const lb_model_config *cfg, lb_err *err) {
    if (lc->rank < 1)
        return lb_fail(err, LB_ERR_USAGE, "--lora-rank must be at least 1, got %d", lc->rank);
    if (!(lc->alpha > 0.0f && isfinite(lc->alpha)))
        return lb_fail(err, LB_ERR_USAGE, "--lora-alpha must be a positive number, got %g",
                       (double)lc->alpha);
    if ((lc->targets & lb_lora_all_targets(cfg->family)) == 0 ||
        (lc->targets & ~lb_lora_all_targets(cfg->family)))
        return lb_fail(err, LB_ERR_USAGE, "--lora-targets names no projection model %s has",
                       cfg->name);
    /* the narrowest target bounds the rank: name it, so the bound said is the one that holds */
    int least = -1, lim = 0;
    lb_lora_proj at = {0};
    for (int t = 0; t < LB_LORA_N_TARGETS; t++) {
        if (!(lc->targets & (1u << t))) continue;
        lb_lora_proj p = lb_lora_projection(cfg, (lb_lora_target)t);
        int l = p.in < p.out ? p.in : p.out;
        if (least < 0 || l < lim) least = t, lim = l, at = p;
    }
    if (lc->rank > lim)
        return lb_fail(err, LB_ERR_USAGE,
                       "--lora-rank %d is larger than projection %s of model %s (%d x %d): "
                       "the rank must be at most %d",
                       lc->rank, target_names[least], cfg->name, at.out, at.in, lim);
    return LB_OK;
}

void lb_lora_offsets_compute(const lb_model_config *cfg, const lb_lora_config *lc,
                             lb_lora_offsets *o) {
    int64_t at = 0;
    for (int t = 0; t < LB_LORA_N_TARGETS; t++) { /* every A, then every B */
        o->a[t] = o->b[t] = -1;
        if (!(lc->targets & (1u << t))) continue;
        o->a[t] = at;
        at += (int64_t)lc->rank * lb_lora_projection(cfg, (lb_lora_target)t).in;
    }
    for (int t = 0; t < LB_LORA_N_TARGETS; t++) {
        if (!(lc->targets & (1u << t))) continue;
        o->b[t] = at;
        at += (int64_t)lb_lora_projection(cfg, (lb_lora_target)t).out * lc->rank;
    }
    o->layer_numel = at;
    o->total = at * cfg->n_layer;
}

int64_t lb_lora_param_count(const lb_model_config *cfg, const lb_lora_config *lc) {
    lb_lora_offsets o;
    lb_lora_offsets_compute(cfg, lc, &o);
    return o.total;
}

int64_t lb_lora_base_bytes(const lb_model_config *cfg, lb_quant_kind quant, int elt_bytes) {
    int64_t total = lb_model_param_count(cfg) * elt_bytes;
    if (quant != LB_QUANT_NF4) return total;
    for (int t = 0; t < LB_LORA_N_TARGETS; t++) {
        if (!(lb_lora_all_targets(cfg->family) & (1u << t))) continue;
        lb_lora_proj p = lb_lora_projection(cfg, (lb_lora_target)t);
        int64_t n = (int64_t)p.in * p.out;
        total += (lb_nf4_bytes(n) - n * elt_bytes) * cfg->n_layer;
    }
    return total;
}

double lb_lora_train_flops_per_token(const lb_model_config *cfg, const lb_lora_config *lc,
                                     int64_t seq_len) {
    return 4.0 * (double)lb_model_matmul_param_count(cfg) +
           6.0 * (double)lb_lora_param_count(cfg, lc) +
           6.0 * cfg->n_layer * (double)cfg->d_model * (double)seq_len;
}

lb_status lb_lora_init(lb_lora *l, const lb_model_config *cfg, const lb_lora_config *lc,
                       int64_t max_tokens, uint64_t seed, lb_err *err) {
    memset(l, 0, sizeof *l);
    LB_TRY(lb_lora_config_check(lc, cfg, err));
    l->lc = *lc;
    l->scale = lc->alpha / (float)lc->rank;
    l->max_tokens = max_tokens;
    lb_lora_offsets_compute(cfg, lc, &l->off);
    const size_t n = (size_t)l->off.total;
    const size_t nu = (size_t)cfg->n_layer * LB_LORA_N_TARGETS * (size_t)max_tokens * lc->rank;
    l->params = malloc(n * sizeof(float));
    l->grads = calloc(n, sizeof(float));
    l->m = calloc(n, sizeof(float));
    l->v = calloc(n, sizeof(float));
    l->u = calloc(nu, sizeof(float));
    l->du = calloc((size_t)max_tokens * lc->rank, sizeof(float));
    if (!l->params || !l->grads || !l->m || !l->v || !l->u || !l->du) {
        lb_lora_free(l);
        return lb_fail(err, LB_ERR_NOMEM, "cannot allocate %.2f GB of host memory for adapters",
                       (4.0 * n + nu + (double)max_tokens * lc->rank) * 4 / 1e9);
    }
    lb_rng rng;
    lb_rng_seed(&rng, seed);
    for (int layer = 0; layer < cfg->n_layer; layer++)
        for (int t = 0; t < LB_LORA_N_TARGETS; t++) {
            if (l->off.a[t] < 0) continue;
            lb_lora_proj p = lb_lora_projection(cfg, (lb_lora_target)t);
            float *a = l->params + layer * l->off.layer_numel + l->off.a[t];
            float *b = l->params + layer * l->off.layer_numel + l->off.b[t];
            const double bound = 1.0 / sqrt((double)p.in);
            for (int64_t i = 0; i < (int64_t)lc->rank * p.in; i++)
                a[i] = (float)(bound * (2.0 * lb_rng_uniform(&rng) - 1.0));
            memset(b, 0, (size_t)p.out * lc->rank * sizeof(float));
        }
    return LB_OK;
}

void lb_lora_free(lb_lora *l) {
    if (!l) return;
    free(l->params);
    free(l->grads);
    free(l->m);
    free(l->v);
    free(l->u);
    free(l->du);
    memset(l, 0, sizeof *l);
}

float *lb_lora_u(const lb_lora *l, int layer, lb_lora_target t) {
    return l->u + ((size_t)layer * LB_LORA_N_TARGETS + t) * (size_t)l->max_tokens * l->lc.rank;
}

void lb_lora_merge(const lb_lora *l, const lb_model_config *cfg, float *params) {
    lb_param_offsets po;
    lb_model_param_offsets(cfg, &po);
    const int r = l->lc.rank;
    for (int layer = 0; layer < cfg->n_layer; layer++)
        for (int t = 0; t < LB_LORA_N_TARGETS; t++) {
            if (l->off.a[t] < 0) continue;
            lb_lora_proj p = lb_lora_projection(cfg, (lb_lora_target)t);
            const float *a = l->params + layer * l->off.layer_numel + l->off.a[t];
            const float *b = l->params + layer * l->off.layer_numel + l->off.b[t];
            float *w = params + po.layers + layer * po.layer_numel + lb_lora_base_offset(&po, &p);
            for (int j = 0; j < p.out; j++)
                for (int c = 0; c < p.in; c++) {
                    double acc = 0.0;
                    for (int k = 0; k < r; k++)
                        acc += (double)b[(int64_t)j * r + k] * a[(int64_t)k * p.in + c];
                    w[(int64_t)j * p.in + c] += (float)(l->scale * acc);
                }
        }
}

void lb_lora_adamw_step(lb_lora *l, const lb_adamw_params *p, int step, float *grad_norm_out) {
    double norm = sqrt(lb_ref_sum_squares(l->grads, l->off.total));
    float clip = lb_ref_clip_scale(norm, p->grad_clip);
    lb_ref_adamw_update(l->params, l->grads, l->m, l->v, l->off.total, p->lr, p->beta1, p->beta2,
                        p->eps, p->weight_decay, clip, step);
    if (grad_norm_out) *grad_norm_out = (float)norm;
}

lb_status lb_lora_quantize_base(const lb_model_config *cfg, float *params, lb_err *err) {
    lb_param_offsets po;
    lb_model_param_offsets(cfg, &po);
    for (int t = 0; t < LB_LORA_N_TARGETS; t++) {
        if (!(lb_lora_all_targets(cfg->family) & (1u << t))) continue;
        lb_lora_proj p = lb_lora_projection(cfg, (lb_lora_target)t);
        const int64_t n = (int64_t)p.in * p.out;
        lb_nf4_tensor q;
        lb_nf4_alloc(&q, n);
        if (!q.codes)
            return lb_fail(err, LB_ERR_NOMEM, "cannot allocate %.2f MB to quantise projection %s",
                           lb_nf4_bytes(n) / 1e6, target_names[t]);
        for (int layer = 0; layer < cfg->n_layer; layer++) {
            float *w = params + po.layers + layer * po.layer_numel + lb_lora_base_offset(&po, &p);
            lb_nf4_quantize(&q, w);
            lb_nf4_dequantize(&q, w);
        }
        lb_nf4_free(&q);
    }
    return LB_OK;
}
