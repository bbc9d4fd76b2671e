/* config.c: model presets, parameter layout, parameter count and training FLOPs.
 *
 * Presets carry the published shapes of each model (GPT-2 from the OpenAI release, Llama
 * and Mistral from their HF config.json). The layout is computed in one walk
 * (layout_walk) that both lb_model_param_offsets and lb_model_param_layout use, so the two can
 * never disagree. Not here: weights, validation of user-written configs beyond ranges. */
#include "model/config.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#define GPT2(nm, L, NH, D)                                                                         \
    {                                                                                              \
        .name = nm, .family = LB_FAMILY_GPT2, .vocab_size = 50257, .max_seq = 1024, .n_layer = L,  \
        .n_head = NH, .n_kv_head = NH, .d_model = D, .d_ff = 4 * (D), .norm_eps = 1e-5f,           \
        .tied_embeddings = 1, .qkv_bias = 1, .linear_bias = 1                                      \
    }

static const lb_model_config presets[] = {
    GPT2("gpt2-124m", 12, 12, 768),
    GPT2("gpt2-350m", 24, 16, 1024),
    GPT2("gpt2-774m", 36, 20, 1280),
    GPT2("gpt2-1558m", 48, 25, 1600),
    {.name = "llama3.2-1b",
     .family = LB_FAMILY_LLAMA,
     .vocab_size = 128256,
     .max_seq = 131072,
     .n_layer = 16,
     .n_head = 32,
     .n_kv_head = 8,
     .d_model = 2048,
     .d_ff = 8192,
     .norm_eps = 1e-5f,
     .rope_theta = 500000.0f,
     .rope_scaling = {1, 32.0f, 1.0f, 4.0f, 8192},
     .tied_embeddings = 1},
    {.name = "llama3.1-8b",
     .family = LB_FAMILY_LLAMA,
     .vocab_size = 128256,
     .max_seq = 131072,
     .n_layer = 32,
     .n_head = 32,
     .n_kv_head = 8,
     .d_model = 4096,
     .d_ff = 14336,
     .norm_eps = 1e-5f,
     .rope_theta = 500000.0f,
     .rope_scaling = {1, 8.0f, 1.0f, 4.0f, 8192},
     .tied_embeddings = 0},
    {.name = "mistral-7b",
     .family = LB_FAMILY_LLAMA,
     .vocab_size = 32000,
     .max_seq = 32768,
     .n_layer = 32,
     .n_head = 32,
     .n_kv_head = 8,
     .d_model = 4096,
     .d_ff = 14336,
     .norm_eps = 1e-5f,
     .rope_theta = 1000000.0f,
     .tied_embeddings = 0},
    /* Test models: small enough for a PyTorch fixture under 1 MB each. */
    {.name = "gpt2-tiny",
     .family = LB_FAMILY_GPT2,
     .vocab_size = 128,
     .max_seq = 32,
     .n_layer = 2,
     .n_head = 4,
     .n_kv_head = 4,
     .d_model = 32,
     .d_ff = 128,
     .norm_eps = 1e-5f,
     .tied_embeddings = 1,
     .qkv_bias = 1,
     .linear_bias = 1},
    /* GQA (4 query heads share 2 kv heads), head_dim 16, llama3 scaling with
     * original_max_pos 32 so all three bands occur: wavelength 6.3 (< 8, unchanged), 19.9
     * (between 8 and 32, smoothed), >= 63 (divided by factor). d_ff 96 is not a multiple
     * of d_model, to catch transposed shapes. */
    {.name = "llama-tiny",
     .family = LB_FAMILY_LLAMA,
     .vocab_size = 128,
     .max_seq = 64,
     .n_layer = 2,
     .n_head = 4,
     .n_kv_head = 2,
     .d_model = 64,
     .d_ff = 96,
     .norm_eps = 1e-5f,
     .rope_theta = 10000.0f,
     .rope_scaling = {1, 8.0f, 1.0f, 4.0f, 32},
     .tied_embeddings = 0},
};

#define N_PRESETS (sizeof presets / sizeof presets[0])

const char *const *lb_model_preset_names(void) {
    static const char *names[N_PRESETS + 1];
    if (!names[0])
        for (size_t i = 0; i < N_PRESETS; i++)
            names[i] = presets[i].name;
    return names;
}

lb_status lb_model_config_preset(const char *name, lb_model_config *out, lb_err *err) {
    for (size_t i = 0; i < N_PRESETS; i++) {
        if (name && strcmp(name, presets[i].name) == 0) {
            *out = presets[i];
            return LB_OK;
        }
    }
    char list[256] = "";
    size_t used = 0;
    for (size_t i = 0; i < N_PRESETS; i++) {
        int n = snprintf(list + used, sizeof list - used, "%s%s", i ? ", " : "", presets[i].name);
        if (n < 0 || (size_t)n >= sizeof list - used) break;
        used += (size_t)n;
    }
    return lb_fail(err, LB_ERR_USAGE, "unknown model '%s': expected one of %s",
                   name ? name : "(null)", list);
}

/* Widest dimension a config may have: sums and small multiples of widths (the qkv width,
 * a matmul's column tiles) then still fit an int. */
#define MAX_WIDTH (1 << 30)
/* Most parameters: params, gradients and both AdamW moments in fp32 stay addressable. */
#define MAX_PARAMS (INT64_MAX / 16)

/* Calls visit for every tensor in storage order; returns the total element count. */
typedef void (*layout_visit)(void *ctx, const char *name, int layer, int64_t offset, int ndim,
                             int64_t rows, int64_t cols);

static int64_t layout_walk(const lb_model_config *c, layout_visit visit, void *ctx) {
    const int64_t V = c->vocab_size, d = c->d_model, Q = lb_model_qkv_dim(c);
    const int64_t F = lb_model_mlp_in_dim(c), H = c->d_ff;
    const int norm_bias = c->family == LB_FAMILY_GPT2;
    int64_t at = 0;
    char name[48];
#define EMIT(nm, layer, ndim, rows, cols)                                                          \
    do {                                                                                           \
        if (visit) visit(ctx, nm, layer, at, ndim, rows, cols);                                    \
        at += (int64_t)(rows) * (cols);                                                            \
    } while (0)
#define EMIT_L(suffix, ndim, rows, cols)                                                           \
    do {                                                                                           \
        snprintf(name, sizeof name, "h.%d.%s", l, suffix);                                         \
        EMIT(name, l, ndim, rows, cols);                                                           \
    } while (0)
    EMIT("wte", -1, 2, V, d);
    if (c->family == LB_FAMILY_GPT2) EMIT("wpe", -1, 2, c->max_seq, d);
    for (int l = 0; l < c->n_layer; l++) {
        EMIT_L("norm1.w", 1, d, 1);
        if (norm_bias) EMIT_L("norm1.b", 1, d, 1);
        EMIT_L("qkv.w", 2, Q, d);
        if (c->qkv_bias) EMIT_L("qkv.b", 1, Q, 1);
        EMIT_L("attn_out.w", 2, d, d);
        if (c->linear_bias) EMIT_L("attn_out.b", 1, d, 1);
        EMIT_L("norm2.w", 1, d, 1);
        if (norm_bias) EMIT_L("norm2.b", 1, d, 1);
        EMIT_L("mlp_in.w", 2, F, d);
        if (c->linear_bias) EMIT_L("mlp_in.b", 1, F, 1);
        EMIT_L("mlp_out.w", 2, d, H);
        if (c->linear_bias) EMIT_L("mlp_out.b", 1, d, 1);
    }
    EMIT("normf.w", -1, 1, d, 1);
    if (norm_bias) EMIT("normf.b", -1, 1, d, 1);
    if (!c->tied_embeddings) EMIT("lm_head", -1, 2, V, d);
#undef EMIT_L
#undef EMIT
    return at;
}

lb_status lb_model_config_check(const lb_model_config *c, lb_err *err) {
    const struct {
        const char *name;
        int value;
    } counts[] = {{"vocab_size", c->vocab_size},
                  {"max_seq", c->max_seq},
                  {"n_layer", c->n_layer},
                  {"n_head", c->n_head},
                  {"n_kv_head", c->n_kv_head},
                  {"d_model", c->d_model},
                  {"d_ff", c->d_ff}};
    for (size_t i = 0; i < sizeof counts / sizeof counts[0]; i++)
        if (counts[i].value < 1)
            return lb_fail(err, LB_ERR_USAGE, "model '%s': %s is %d; it must be at least 1",
                           c->name, counts[i].name, counts[i].value);
    if (c->family != LB_FAMILY_GPT2 && c->family != LB_FAMILY_LLAMA)
        return lb_fail(err, LB_ERR_USAGE, "model '%s': family %d is neither GPT-2 nor Llama",
                       c->name, (int)c->family);
    if (c->d_model % c->n_head != 0)
        return lb_fail(err, LB_ERR_USAGE, "model '%s': d_model %d is not a multiple of n_head %d",
                       c->name, c->d_model, c->n_head);
    if (c->n_head % c->n_kv_head != 0)
        return lb_fail(err, LB_ERR_USAGE, "model '%s': n_head %d is not a multiple of n_kv_head %d",
                       c->name, c->n_head, c->n_kv_head);
    const struct {
        const char *name;
        int64_t value;
    } widths[] = {
        {"vocab_size", c->vocab_size},
        {"max_seq", c->max_seq},
        {"d_model", c->d_model},
        {"d_ff", c->d_ff},
        {"the qkv width (n_head + 2 n_kv_head) x head_dim",
         ((int64_t)c->n_head + 2 * (int64_t)c->n_kv_head) * (c->d_model / c->n_head)},
        {"the mlp_in width", (c->family == LB_FAMILY_LLAMA ? 2 : 1) * (int64_t)c->d_ff},
    };
    for (size_t i = 0; i < sizeof widths / sizeof widths[0]; i++)
        if (widths[i].value > MAX_WIDTH)
            return lb_fail(err, LB_ERR_USAGE, "model '%s': %s is %lld; at most %d is supported",
                           c->name, widths[i].name, (long long)widths[i].value, MAX_WIDTH);
    /* the global tensors and one layer, so that a billion layers are not walked */
    lb_model_config part = *c;
    part.n_layer = 0;
    const int64_t global = layout_walk(&part, NULL, NULL);
    part.n_layer = 1;
    const int64_t layer = layout_walk(&part, NULL, NULL) - global;
    if (global > MAX_PARAMS || layer > (MAX_PARAMS - global) / c->n_layer)
        return lb_fail(err, LB_ERR_USAGE,
                       "model '%s': n_layer %d, d_model %d, d_ff %d and vocab_size %d make more "
                       "than %lld parameters, which this tool cannot address",
                       c->name, c->n_layer, c->d_model, c->d_ff, c->vocab_size,
                       (long long)MAX_PARAMS);
    if (c->family == LB_FAMILY_LLAMA && lb_model_head_dim(c) % 2 != 0)
        return lb_fail(err, LB_ERR_USAGE, "model '%s': RoPE needs an even head_dim, got %d",
                       c->name, lb_model_head_dim(c));
    if (!(c->norm_eps > 0.0f && isfinite(c->norm_eps)))
        return lb_fail(err, LB_ERR_USAGE,
                       "model '%s': norm_eps is %g; it must be a positive finite number", c->name,
                       (double)c->norm_eps);
    if (c->family == LB_FAMILY_LLAMA && !(c->rope_theta > 0.0f && isfinite(c->rope_theta)))
        return lb_fail(err, LB_ERR_USAGE,
                       "model '%s': rope_theta is %g; it must be a positive finite number", c->name,
                       (double)c->rope_theta);
    const lb_rope_scaling *s = &c->rope_scaling;
    if (c->family == LB_FAMILY_LLAMA && s->enabled &&
        (!(s->factor >= 1.0f && isfinite(s->factor)) ||
         !(s->high_freq_factor > s->low_freq_factor) || !(s->low_freq_factor > 0.0f) ||
         !isfinite(s->high_freq_factor) || s->original_max_pos < 1))
        return lb_fail(err, LB_ERR_USAGE,
                       "model '%s': rope scaling factor %g, low_freq_factor %g, high_freq_factor "
                       "%g, original_max_pos %d: it needs a finite factor >= 1, finite "
                       "high_freq_factor > low_freq_factor > 0 and original_max_pos >= 1",
                       c->name, (double)s->factor, (double)s->low_freq_factor,
                       (double)s->high_freq_factor, s->original_max_pos);
    return LB_OK;
}

typedef struct {
    lb_param_tensor *out;
    int max, n;
} table_ctx;

static void table_visit(void *vctx, const char *name, int layer, int64_t offset, int ndim,
                        int64_t rows, int64_t cols) {
    table_ctx *t = vctx;
    if (t->n < t->max) {
        lb_param_tensor *p = &t->out[t->n];
        memset(p, 0, sizeof *p);
        snprintf(p->name, sizeof p->name, "%s", name);
        p->offset = offset;
        p->ndim = ndim;
        p->shape[0] = rows;
        p->shape[1] = cols;
        p->numel = rows * cols;
        p->layer = layer;
        p->decay = ndim == 2;
    }
    t->n++;
}

int lb_model_param_layout(const lb_model_config *cfg, lb_param_tensor *out, int max) {
    table_ctx t = {out, out ? max : 0, 0};
    layout_walk(cfg, table_visit, &t);
    return t.n;
}

typedef struct {
    int count;
    int64_t numel;
} vector_ctx;

static void vector_visit(void *vctx, const char *name, int layer, int64_t offset, int ndim,
                         int64_t rows, int64_t cols) {
    vector_ctx *v = vctx;
    if (ndim == 1) v->count++, v->numel += rows * cols;
}

void lb_model_vector_params(const lb_model_config *cfg, int *count, int64_t *numel) {
    vector_ctx v = {0, 0};
    layout_walk(cfg, vector_visit, &v);
    *count = v.count;
    *numel = v.numel;
}

/* Records the offsets of layer 0 (relative to its start) and of the global tensors. */
static void offsets_visit(void *vctx, const char *name, int layer, int64_t offset, int ndim,
                          int64_t rows, int64_t cols) {
    lb_param_offsets *o = vctx;
    if (layer > 0) return;
    if (layer < 0) {
        if (strcmp(name, "wte") == 0)
            o->wte = offset;
        else if (strcmp(name, "wpe") == 0)
            o->wpe = offset;
        else if (strcmp(name, "normf.w") == 0)
            o->normf_w = offset;
        else if (strcmp(name, "normf.b") == 0)
            o->normf_b = offset;
        else if (strcmp(name, "lm_head") == 0)
            o->lm_head = offset;
        return;
    }
    if (o->layers < 0) o->layers = offset;
    const char *suffix = name + strlen("h.0.");
    int64_t rel = offset - o->layers;
    lb_layer_offsets *L = &o->layer;
    if (strcmp(suffix, "norm1.w") == 0)
        L->norm1_w = rel;
    else if (strcmp(suffix, "norm1.b") == 0)
        L->norm1_b = rel;
    else if (strcmp(suffix, "qkv.w") == 0)
        L->qkv_w = rel;
    else if (strcmp(suffix, "qkv.b") == 0)
        L->qkv_b = rel;
    else if (strcmp(suffix, "attn_out.w") == 0)
        L->attn_out_w = rel;
    else if (strcmp(suffix, "attn_out.b") == 0)
        L->attn_out_b = rel;
    else if (strcmp(suffix, "norm2.w") == 0)
        L->norm2_w = rel;
    else if (strcmp(suffix, "norm2.b") == 0)
        L->norm2_b = rel;
    else if (strcmp(suffix, "mlp_in.w") == 0)
        L->mlp_in_w = rel;
    else if (strcmp(suffix, "mlp_in.b") == 0)
        L->mlp_in_b = rel;
    else if (strcmp(suffix, "mlp_out.w") == 0)
        L->mlp_out_w = rel;
    else if (strcmp(suffix, "mlp_out.b") == 0)
        L->mlp_out_b = rel;
    o->layer_numel = offset + rows * cols - o->layers; /* grows to the end of layer 0 */
}

void lb_model_param_offsets(const lb_model_config *cfg, lb_param_offsets *o) {
    const lb_layer_offsets none = {-1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1};
    *o = (lb_param_offsets){.wte = -1,
                            .wpe = -1,
                            .layers = -1,
                            .layer = none,
                            .normf_w = -1,
                            .normf_b = -1,
                            .lm_head = -1};
    o->total = layout_walk(cfg, offsets_visit, o);
    if (cfg->tied_embeddings) o->lm_head = o->wte;
}

int64_t lb_model_param_count(const lb_model_config *cfg) {
    return layout_walk(cfg, NULL, NULL);
}

int64_t lb_model_matmul_param_count(const lb_model_config *cfg) {
    const int64_t d = cfg->d_model;
    int64_t lookups = cfg->family == LB_FAMILY_GPT2 ? cfg->max_seq * d : 0; /* wpe */
    if (!cfg->tied_embeddings) lookups += cfg->vocab_size * d;              /* wte */
    return lb_model_param_count(cfg) - lookups;
}

double lb_model_train_flops_per_token(const lb_model_config *cfg, int64_t seq_len) {
    return 6.0 * (double)lb_model_matmul_param_count(cfg) +
           6.0 * cfg->n_layer * (double)cfg->d_model * (double)seq_len;
}
