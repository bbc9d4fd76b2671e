/* cpu.c: the engine's CPU backend: the forward of model.h's Llama in fp32, built from
 * model/ref.h, over a paged cache of fp32 keys and values.
 *
 * It is the reference the GPU backend is checked against and the engine of machines
 * without a GPU: readable before fast. Every token of a step runs through the layers
 * together; only the rows whose logits are wanted pass through the final norm and the
 * head. Weights are one fp32 array in config.h's layout. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine_impl.h"
#include "model/ref.h"

typedef struct {
    lb_backend base;
    lb_model_config cfg;
    lb_param_offsets off;
    lb_param_tensor *layout;
    int n_tensors;
    float *params;
    float *k_cache, *v_cache; /* [L, n_blocks, block_size, NKV, HD] */
    int32_t block_size;
    float *inv_freq;
    /* step scratch, [step_tokens, ...] */
    float *x, *n, *qkv, *att, *br, *h, *a, *rstd, *row, *nrow;
    int32_t *slot;
    int32_t step_tokens;
} cpu_backend;

static void cpu_close(lb_backend *b) {
    cpu_backend *c = (cpu_backend *)b;
    if (c == NULL) return;
    free(c->layout);
    free(c->params);
    free(c->k_cache);
    free(c->v_cache);
    free(c->inv_freq);
    free(c->x);
    free(c->n);
    free(c->qkv);
    free(c->att);
    free(c->br);
    free(c->h);
    free(c->a);
    free(c->rstd);
    free(c->row);
    free(c->nrow);
    free(c->slot);
    free(c);
}

static void cpu_read(lb_backend *b, const lb_param_tensor *t, lb_gpu_dtype dt, void *dst) {
    cpu_backend *c = (cpu_backend *)b;
    const float *src = c->params + t->offset;
    if (dt == LB_DT_F32) {
        memcpy(dst, src, (size_t)t->numel * sizeof(float));
        return;
    }
    uint16_t *o = dst;
    for (int64_t i = 0; i < t->numel; i++) {
        uint32_t u;
        memcpy(&u, &src[i], 4);
        u += 0x7fff + ((u >> 16) & 1); /* bf16, round to nearest even (no NaNs here) */
        o[i] = (uint16_t)(u >> 16);
    }
}

static lb_status cpu_forward(lb_backend *b, const lb_engine_batch *bt, int32_t *argmax,
                             float *logits, lb_err *err) {
    cpu_backend *c = (cpu_backend *)b;
    const lb_model_config *cfg = &c->cfg;
    const int N = bt->n_tokens, C = cfg->d_model, NH = cfg->n_head, NKV = cfg->n_kv_head;
    const int HD = lb_model_head_dim(cfg), Q = lb_model_qkv_dim(cfg), H = cfg->d_ff;
    const int64_t V = cfg->vocab_size, kv_row = (int64_t)NKV * HD;
    const int64_t layer_cache = (int64_t)c->base.n_blocks * c->block_size * kv_row;
    const float *P = c->params;
    for (int i = 0; i < N; i++) {
        const int32_t *row = bt->block_table + (int64_t)bt->seq_of[i] * bt->max_blocks;
        c->slot[i] = row[bt->pos[i] / c->block_size] * c->block_size + bt->pos[i] % c->block_size;
    }
    lb_ref_embedding_forward(c->x, bt->tokens, P + c->off.wte, 1, N, C);
    for (int l = 0; l < cfg->n_layer; l++) {
        const float *L = P + c->off.layers + (int64_t)l * c->off.layer_numel;
        float *kc = c->k_cache + l * layer_cache, *vc = c->v_cache + l * layer_cache;
        lb_ref_rmsnorm_forward(c->n, c->rstd, c->x, L + c->off.layer.norm1_w, 1, N, C,
                               cfg->norm_eps);
        lb_ref_matmul_forward(c->qkv, c->n, L + c->off.layer.qkv_w, NULL, 1, N, C, Q);
        lb_ref_rope_positions(c->qkv, bt->pos, c->inv_freq, N, NH, NKV, HD);
        for (int i = 0; i < N; i++) {
            const float *r = c->qkv + (int64_t)i * Q;
            memcpy(kc + c->slot[i] * kv_row, r + NH * HD, (size_t)kv_row * sizeof(float));
            memcpy(vc + c->slot[i] * kv_row, r + (NH + NKV) * HD, (size_t)kv_row * sizeof(float));
        }
        LB_TRY(lb_ref_paged_attention(c->att, c->qkv, kc, vc, bt->block_table, bt->max_blocks,
                                      bt->seq_of, bt->pos, N, NH, NKV, HD, c->block_size, err));
        lb_ref_matmul_forward(c->br, c->att, L + c->off.layer.attn_out_w, NULL, 1, N, C, C);
        lb_ref_residual_forward(c->x, c->x, c->br, (int64_t)N * C);
        lb_ref_rmsnorm_forward(c->n, c->rstd, c->x, L + c->off.layer.norm2_w, 1, N, C,
                               cfg->norm_eps);
        lb_ref_matmul_forward(c->h, c->n, L + c->off.layer.mlp_in_w, NULL, 1, N, C, 2 * H);
        lb_ref_swiglu_forward(c->a, c->h, 1, N, H);
        lb_ref_matmul_forward(c->br, c->a, L + c->off.layer.mlp_out_w, NULL, 1, N, H, C);
        lb_ref_residual_forward(c->x, c->x, c->br, (int64_t)N * C);
    }
    for (int o = 0; o < bt->n_out; o++) {
        float rstd;
        lb_ref_rmsnorm_forward(c->nrow, &rstd, c->x + (int64_t)bt->out_token[o] * C,
                               P + c->off.normf_w, 1, 1, C, cfg->norm_eps);
        float *dst = bt->out_full[o] ? logits + (int64_t)o * V : c->row;
        lb_ref_matmul_forward(dst, c->nrow, P + c->off.lm_head, NULL, 1, 1, C, (int)V);
        argmax[o] = lb_sample_argmax(dst, (int32_t)V); /* as sampling's greedy: NaN last */
    }
    return LB_OK;
}

lb_status lb_engine_cpu_open(lb_backend **out, const lb_weights *w, const lb_engine_params *p,
                             lb_err *err) {
    *out = NULL;
    const lb_model_config *cfg = &w->cfg;
    LB_TRY(lb_model_config_check(cfg, err));
    if (cfg->family != LB_FAMILY_LLAMA || cfg->qkv_bias || cfg->linear_bias)
        return lb_fail(err, LB_ERR_UNSUPPORTED,
                       "the engine runs Llama-family models without biases");
    cpu_backend *c = calloc(1, sizeof *c);
    if (c == NULL) return lb_fail(err, LB_ERR_NOMEM, "out of memory");
    c->base =
        (lb_backend){.name = "cpu", .forward = cpu_forward, .read = cpu_read, .close = cpu_close};
    c->cfg = *cfg;
    lb_model_param_offsets(cfg, &c->off);
    c->n_tensors = lb_model_param_layout(cfg, NULL, 0);
    c->layout = malloc((size_t)c->n_tensors * sizeof *c->layout);
    c->params = malloc((size_t)c->off.total * sizeof(float));
    c->block_size = p->block_size;
    c->base.n_blocks = (int32_t)((p->kv_tokens + p->block_size - 1) / p->block_size);
    const int64_t kv_row = (int64_t)cfg->n_kv_head * lb_model_head_dim(cfg);
    const size_t cache = (size_t)cfg->n_layer * c->base.n_blocks * p->block_size * kv_row;
    c->k_cache = malloc(cache * sizeof(float));
    c->v_cache = malloc(cache * sizeof(float));
    const size_t T = (size_t)p->step_tokens, C = (size_t)cfg->d_model;
    c->x = malloc(T * C * sizeof(float));
    c->n = malloc(T * C * sizeof(float));
    c->qkv = malloc(T * (size_t)lb_model_qkv_dim(cfg) * sizeof(float));
    c->att = malloc(T * C * sizeof(float));
    c->br = malloc(T * C * sizeof(float));
    c->h = malloc(T * 2 * (size_t)cfg->d_ff * sizeof(float));
    c->a = malloc(T * (size_t)cfg->d_ff * sizeof(float));
    c->rstd = malloc(T * sizeof(float));
    c->row = malloc((size_t)cfg->vocab_size * sizeof(float));
    c->nrow = malloc(C * sizeof(float));
    c->slot = malloc(T * sizeof(int32_t));
    c->inv_freq = malloc((size_t)lb_model_head_dim(cfg) / 2 * sizeof(float));
    c->step_tokens = p->step_tokens;
    if (!c->layout || !c->params || !c->k_cache || !c->v_cache || !c->x || !c->n || !c->qkv ||
        !c->att || !c->br || !c->h || !c->a || !c->rstd || !c->row || !c->nrow || !c->slot ||
        !c->inv_freq) {
        const double weight_gib = (double)c->off.total * 4 / (1 << 30);
        cpu_close(&c->base);
        return lb_fail(err, LB_ERR_NOMEM,
                       "out of memory for the CPU engine (%.1f GiB of weights, %.1f GiB of cache "
                       "for %lld tokens): give a smaller --kv-tokens",
                       weight_gib, 2.0 * cache * 4 / (1 << 30), (long long)p->kv_tokens);
    }
    lb_model_param_layout(cfg, c->layout, c->n_tensors);
    for (int i = 0; i < c->n_tensors; i++) {
        const lb_param_tensor *t = &c->layout[i];
        if (w->read)
            w->read(w->ctx, t, LB_DT_F32, c->params + t->offset);
        else
            lb_engine_random_tensor(cfg, t, w->seed, c->params + t->offset);
    }
    lb_ref_rope_freqs(cfg, c->inv_freq);
    c->base.weight_bytes = c->off.total * (int64_t)sizeof(float);
    c->base.kv_bytes = (int64_t)(2 * cache * sizeof(float));
    *out = &c->base;
    return LB_OK;
}
