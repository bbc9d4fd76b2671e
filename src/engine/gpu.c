/* gpu.c: the engine's GPU backend (engine_impl.h): bf16 weights and KV cache in one
 * arena, cuBLASLt products, kernels/ for the rest. A build without CUDA refuses. */
#include "engine/engine_impl.h"

#ifndef LB_HAVE_CUDA

lb_status lb_engine_gpu_open(lb_backend **out, const lb_weights *w, const lb_engine_params *p,
                             lb_err *err) {
    (void)w, (void)p;
    *out = NULL;
    return lb_fail(err, LB_ERR_UNSUPPORTED,
                   "the GPU engine was asked but this llmbench was built without CUDA; use "
                   "--device cpu");
}

#else

#include <cuda_runtime.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "gpu/arena.h"
#include "gpu/blas/matmul.h"
#include "gpu/check.h"
#include "kernels/act.cuh"
#include "kernels/embed.cuh"
#include "kernels/logits.cuh"
#include "kernels/norm.cuh"
#include "kernels/paged.cuh"
#include "kernels/rope.cuh"
#include "model/ref.h"

#define BF                      LB_DT_BF16

typedef struct {
    lb_backend base;
    lb_model_config cfg;
    lb_param_offsets off;
    int32_t block_size, step_tokens, max_seqs, max_blocks;
    cudaStream_t stream;
    lb_blas *blas;       /* products of more than SMALL_M rows: the heuristic's choice */
    lb_blas *blas_small; /* up to SMALL_M rows (decode): timed once per row bucket */
    lb_gpu_arena arena;
    /* device pieces */
    uint16_t *params;                               /* bf16, config.h's layout */
    uint16_t *k_cache, *v_cache;                    /* [L, n_blocks, block_size, NKV, HD] bf16 */
    float *cs;                                      /* RoPE (cos, sin) [max_ctx, HD/2, 2] */
    void *x, *x2, *n, *qkv, *att, *h, *a, *xo, *no; /* bf16 activations; x, x2: the
                                                     * residual stream, ping-pong */
    float *rstd, *logits;
    int32_t *tokens, *pos, *seq_of, *slot, *block_table, *out_token, *argmax;
    void *blas_ws;
    /* host staging */
    int32_t *h_slot;
} gpu_backend;

/* Carves every device piece; a sizing arena only counts. */
static lb_status carve(gpu_backend *g, lb_gpu_arena *a, int64_t n_blocks, int max_ctx,
                       lb_err *err) {
    const lb_model_config *c = &g->cfg;
    const size_t T = (size_t)g->step_tokens, S = (size_t)g->max_seqs, C = (size_t)c->d_model;
    const size_t HD = (size_t)lb_model_head_dim(c);
    const size_t kv = (size_t)c->n_layer * (size_t)n_blocks * g->block_size * c->n_kv_head * HD;
#define PIECE(name, bytes, ptr) LB_TRY(lb_gpu_arena_alloc(a, name, (bytes), (void **)(ptr), err))
    PIECE("params", (size_t)g->off.total * 2, &g->params);
    PIECE("blas_workspace", LB_BLAS_WORKSPACE_BYTES, &g->blas_ws);
    PIECE("rope_table", (size_t)max_ctx * HD * sizeof(float), &g->cs);
    PIECE("x", T * C * 2, &g->x);
    PIECE("x2", T * C * 2, &g->x2);
    PIECE("n", T * C * 2, &g->n);
    PIECE("qkv", T * (size_t)lb_model_qkv_dim(c) * 2, &g->qkv);
    PIECE("att", T * C * 2, &g->att);
    PIECE("h", T * 2 * (size_t)c->d_ff * 2, &g->h);
    PIECE("a", T * (size_t)c->d_ff * 2, &g->a);
    PIECE("xo", S * C * 2, &g->xo);
    PIECE("no", S * C * 2, &g->no);
    PIECE("rstd", T * sizeof(float), &g->rstd);
    PIECE("logits", S * (size_t)c->vocab_size * sizeof(float), &g->logits);
    PIECE("tokens", T * 4, &g->tokens);
    PIECE("pos", T * 4, &g->pos);
    PIECE("seq_of", T * 4, &g->seq_of);
    PIECE("slot", T * 4, &g->slot);
    PIECE("block_table", S * (size_t)g->max_blocks * 4, &g->block_table);
    PIECE("out_token", S * 4, &g->out_token);
    PIECE("argmax", S * 4, &g->argmax);
    PIECE("k_cache", kv * 2, &g->k_cache);
    PIECE("v_cache", kv * 2, &g->v_cache);
#undef PIECE
    return LB_OK;
}

static void gpu_close(lb_backend *b) {
    gpu_backend *g = (gpu_backend *)b;
    if (g == NULL) return;
    lb_blas_free(g->blas);
    lb_blas_free(g->blas_small);
    lb_gpu_arena_free(&g->arena);
    if (g->stream) cudaStreamDestroy(g->stream);
    free(g->h_slot);
    free(g);
}

static void gpu_read(lb_backend *b, const lb_param_tensor *t, lb_gpu_dtype dt, void *dst) {
    gpu_backend *g = (gpu_backend *)b;
    uint16_t *tmp = dt == BF ? dst : malloc((size_t)t->numel * 2);
    if (tmp == NULL) return;
    cudaMemcpy(tmp, g->params + t->offset, (size_t)t->numel * 2, cudaMemcpyDeviceToHost);
    if (dt == LB_DT_F32) {
        float *o = dst;
        for (int64_t i = 0; i < t->numel; i++) {
            uint32_t u = (uint32_t)tmp[i] << 16;
            memcpy(&o[i], &u, 4);
        }
    }
    if (tmp != dst) free(tmp);
}

#define SMALL_M 256

/* The rows a product runs over for n rows of work: n rounded up to a power of two up to
 * SMALL_M, above it to a multiple of 512, never past the buffers' cap. A handful of
 * distinct problems then cover every step size: each is prepared (and for small ones
 * timed) once, and the extra rows (stale data, never read back) cost little next to
 * reading the weights. */
static int64_t rows_for(int64_t n, int64_t cap) {
    int64_t b = 1;
    while (b < n && b < SMALL_M)
        b *= 2;
    if (n > SMALL_M) b = (n + 511) / 512 * 512;
    return b < cap ? b : cap;
}

/* y[N, OC] = x[N, K] W[OC, K]^T (+ res[N, OC] when res is not NULL; res != y), bf16 in,
 * out of type dt; N rows rounded by rows_for under cap. */
static lb_status linear(gpu_backend *g, void *y, lb_gpu_dtype dt, const void *x, const void *w,
                        int64_t N, int64_t cap, int64_t K, int64_t OC, const void *res,
                        lb_err *err) {
    const int64_t M = rows_for(N, cap);
    lb_blas_gemm mm = {.m = M,
                       .n = OC,
                       .k = K,
                       .a = x,
                       .lda = K,
                       .b = w,
                       .ldb = K,
                       .trans_b = true,
                       .ab_type = BF,
                       .c = res,
                       .d = y,
                       .ldd = OC,
                       .d_type = dt,
                       .alpha = 1.0f,
                       .beta = res ? 1.0f : 0.0f};
    return lb_blas_gemm_run(M <= SMALL_M ? g->blas_small : g->blas, &mm, g->stream, err);
}

static lb_status gpu_forward(lb_backend *b, const lb_engine_batch *bt, int32_t *argmax,
                             float *logits, lb_err *err) {
    gpu_backend *g = (gpu_backend *)b;
    const lb_model_config *c = &g->cfg;
    const int N = bt->n_tokens, C = c->d_model, NH = c->n_head, NKV = c->n_kv_head;
    const int HD = lb_model_head_dim(c), Q = lb_model_qkv_dim(c), F = c->d_ff;
    const int64_t V = c->vocab_size;
    const int64_t layer_cache = (int64_t)b->n_blocks * g->block_size * NKV * HD;
    cudaStream_t s = g->stream;
    for (int i = 0; i < N; i++) {
        const int32_t *row = bt->block_table + (int64_t)bt->seq_of[i] * bt->max_blocks;
        g->h_slot[i] = row[bt->pos[i] / g->block_size] * g->block_size + bt->pos[i] % g->block_size;
    }
    const enum cudaMemcpyKind h2d = cudaMemcpyHostToDevice;
    LB_CUDA_TRY(err, cudaMemcpyAsync(g->tokens, bt->tokens, (size_t)N * 4, h2d, s));
    LB_CUDA_TRY(err, cudaMemcpyAsync(g->pos, bt->pos, (size_t)N * 4, h2d, s));
    LB_CUDA_TRY(err, cudaMemcpyAsync(g->seq_of, bt->seq_of, (size_t)N * 4, h2d, s));
    LB_CUDA_TRY(err, cudaMemcpyAsync(g->slot, g->h_slot, (size_t)N * 4, h2d, s));
    LB_CUDA_TRY(err, cudaMemcpyAsync(g->block_table, bt->block_table,
                                     (size_t)bt->n_seqs * bt->max_blocks * 4, h2d, s));
    LB_CUDA_TRY(err, cudaMemcpyAsync(g->out_token, bt->out_token, (size_t)bt->n_out * 4, h2d, s));
    const uint16_t *P = g->params;
    const int64_t T = g->step_tokens;
    void *x = g->x, *x2 = g->x2, *t;
    LB_TRY(lb_embed_forward(x, g->tokens, P + g->off.wte, NULL, 1, N, C, BF, s, err));
    for (int l = 0; l < c->n_layer; l++) {
        const uint16_t *L = P + g->off.layers + (int64_t)l * g->off.layer_numel;
        uint16_t *kc = g->k_cache + l * layer_cache, *vc = g->v_cache + l * layer_cache;
        LB_TRY(lb_norm_rmsnorm_forward(g->n, g->rstd, x, L + g->off.layer.norm1_w, N, C,
                                       c->norm_eps, BF, s, err));
        LB_TRY(linear(g, g->qkv, BF, g->n, L + g->off.layer.qkv_w, N, T, C, Q, NULL, err));
        LB_TRY(lb_rope_positions(g->qkv, g->cs, g->pos, N, NH, NKV, HD, BF, s, err));
        LB_TRY(lb_paged_kv_store(kc, vc, g->qkv, g->slot, N, NH, NKV, HD, BF, s, err));
        LB_TRY(lb_paged_attention(g->att, g->qkv, kc, vc, g->block_table, bt->max_blocks, g->seq_of,
                                  g->pos, N, NH, NKV, HD, g->block_size, BF, s, err));
        LB_TRY(linear(g, x2, BF, g->att, L + g->off.layer.attn_out_w, N, T, C, C, x, err));
        t = x, x = x2, x2 = t;
        LB_TRY(lb_norm_rmsnorm_forward(g->n, g->rstd, x, L + g->off.layer.norm2_w, N, C,
                                       c->norm_eps, BF, s, err));
        LB_TRY(linear(g, g->h, BF, g->n, L + g->off.layer.mlp_in_w, N, T, C, 2 * F, NULL, err));
        LB_TRY(lb_act_swiglu_forward(g->a, g->h, N, F, BF, s, err));
        LB_TRY(linear(g, x2, BF, g->a, L + g->off.layer.mlp_out_w, N, T, F, C, x, err));
        t = x, x = x2, x2 = t;
    }
    const int n_out = bt->n_out;
    LB_TRY(lb_logits_gather_rows(g->xo, x, g->out_token, n_out, C, BF, s, err));
    LB_TRY(lb_norm_rmsnorm_forward(g->no, g->rstd, g->xo, P + g->off.normf_w, n_out, C, c->norm_eps,
                                   BF, s, err));
    LB_TRY(linear(g, g->logits, LB_DT_F32, g->no, P + g->off.lm_head, n_out, g->max_seqs, C, V,
                  NULL, err));
    LB_TRY(lb_logits_argmax(g->argmax, g->logits, n_out, (int)V, s, err));
    LB_CUDA_TRY(err,
                cudaMemcpyAsync(argmax, g->argmax, (size_t)n_out * 4, cudaMemcpyDeviceToHost, s));
    for (int o = 0; o < n_out; o++)
        if (bt->out_full[o])
            LB_CUDA_TRY(err, cudaMemcpyAsync(logits + o * V, g->logits + o * V, (size_t)V * 4,
                                             cudaMemcpyDeviceToHost, s));
    LB_CUDA_TRY(err, cudaStreamSynchronize(s));
    return LB_OK;
}

/* The weights: read from the source through a host bf16 buffer, or drawn on the device. */
static lb_status load_weights(gpu_backend *g, const lb_weights *w, lb_err *err) {
    const lb_model_config *c = &g->cfg;
    int n = lb_model_param_layout(c, NULL, 0);
    lb_param_tensor *lay = malloc((size_t)n * sizeof *lay);
    if (lay == NULL) return lb_fail(err, LB_ERR_NOMEM, "out of memory");
    lb_model_param_layout(c, lay, n);
    int64_t most = 0;
    for (int i = 0; i < n; i++)
        if (lay[i].numel > most) most = lay[i].numel;
    lb_status st = LB_OK;
    void *buf = NULL;
    if (w->read != NULL) {
        buf = malloc((size_t)most * 2);
        if (buf == NULL) st = lb_fail(err, LB_ERR_NOMEM, "out of memory staging the weights");
    } else if (cudaMalloc(&buf, (size_t)most * 4) != cudaSuccess) {
        st = lb_fail(err, LB_ERR_NOMEM, "no device memory to draw random weights (%.1f GiB)",
                     (double)most * 4 / (1 << 30));
    }
    for (int i = 0; i < n && st == LB_OK; i++) {
        const lb_param_tensor *t = &lay[i];
        void *dst = g->params + t->offset;
        if (w->read != NULL) {
            w->read(w->ctx, t, BF, buf);
            cudaError_t ce = cudaMemcpy(dst, buf, (size_t)t->numel * 2, cudaMemcpyHostToDevice);
            if (ce != cudaSuccess)
                st = lb_fail(err, LB_ERR_DEVICE, "copying %s to the GPU: %s", t->name,
                             cudaGetErrorString(ce));
        } else if (t->ndim == 1) {
            st = lb_act_fill(buf, t->numel, 1.0f, g->stream, err);
            if (st == LB_OK) st = lb_act_convert(dst, BF, buf, LB_DT_F32, t->numel, g->stream, err);
        } else {
            st = lb_act_fill_normal(buf, t->numel, 0.02f, w->seed, t->offset, g->stream, err);
            if (st == LB_OK) st = lb_act_convert(dst, BF, buf, LB_DT_F32, t->numel, g->stream, err);
        }
    }
    if (w->read == NULL) {
        cudaStreamSynchronize(g->stream);
        cudaFree(buf);
    } else {
        free(buf);
    }
    free(lay);
    return st;
}

lb_status lb_engine_gpu_open(lb_backend **out, const lb_weights *w, const lb_engine_params *p,
                             lb_err *err) {
    *out = NULL;
    const lb_model_config *c = &w->cfg;
    LB_TRY(lb_model_config_check(c, err));
    if (c->family != LB_FAMILY_LLAMA || c->qkv_bias || c->linear_bias)
        return lb_fail(err, LB_ERR_UNSUPPORTED,
                       "the engine runs Llama-family models without biases");
    int n_dev = 0;
    if (cudaGetDeviceCount(&n_dev) != cudaSuccess || n_dev == 0)
        return lb_fail(err, LB_ERR_UNSUPPORTED, "no CUDA GPU is visible; use --device cpu");
    if (p->device_index >= n_dev)
        return lb_fail(err, LB_ERR_USAGE, "--gpu %d: this machine has %d GPUs", p->device_index,
                       n_dev);
    LB_CUDA_TRY(err, cudaSetDevice(p->device_index));
    gpu_backend *g = calloc(1, sizeof *g);
    if (g == NULL) return lb_fail(err, LB_ERR_NOMEM, "out of memory");
    g->base =
        (lb_backend){.name = "gpu", .forward = gpu_forward, .read = gpu_read, .close = gpu_close};
    g->cfg = *c;
    lb_model_param_offsets(c, &g->off);
    g->block_size = p->block_size;
    g->step_tokens = p->step_tokens;
    g->max_seqs = p->max_seqs;
    g->max_blocks = (p->max_ctx + p->block_size - 1) / p->block_size;
    g->h_slot = malloc((size_t)p->step_tokens * sizeof *g->h_slot);
    lb_status st = g->h_slot ? LB_OK : lb_fail(err, LB_ERR_NOMEM, "out of memory");
    if (st == LB_OK && cudaStreamCreateWithFlags(&g->stream, cudaStreamNonBlocking) != cudaSuccess)
        st = lb_fail(err, LB_ERR_DEVICE, "cannot create a CUDA stream");
    /* size everything but the cache, then give the cache what the fraction leaves */
    size_t free_b = 0, total_b = 0;
    if (st == LB_OK && cudaMemGetInfo(&free_b, &total_b) != cudaSuccess)
        st = lb_fail(err, LB_ERR_DEVICE, "cannot read the GPU's memory");
    const size_t block_bytes =
        2 * 2 * (size_t)c->n_layer * p->block_size * c->n_kv_head * (size_t)lb_model_head_dim(c);
    int64_t n_blocks = 0;
    if (st == LB_OK) {
        lb_gpu_arena sz;
        lb_gpu_arena_init_sizing(&sz);
        st = carve(g, &sz, 0, p->max_ctx, err);
        size_t fixed = sz.used_bytes, reserve = (size_t)512 << 20; /* context, cuBLASLt */
        lb_gpu_arena_free(&sz);
        double allowed = p->gpu_memory_fraction * (double)total_b - (double)(total_b - free_b);
        if (st == LB_OK && allowed < (double)(fixed + reserve))
            st = lb_fail(err, LB_ERR_NOMEM,
                         "the weights and buffers need %.1f GiB, %.1f GiB of the GPU may be used "
                         "(%.1f GiB free, --gpu-memory-fraction %.2f)",
                         (double)(fixed + reserve) / (1 << 30), allowed / (1 << 30),
                         (double)free_b / (1 << 30), p->gpu_memory_fraction);
        if (st == LB_OK) {
            n_blocks = p->kv_tokens > 0
                           ? (p->kv_tokens + p->block_size - 1) / p->block_size
                           : (int64_t)((allowed - (double)(fixed + reserve)) / (double)block_bytes);
            if (n_blocks < g->max_blocks)
                st = lb_fail(err, LB_ERR_NOMEM,
                             "after the weights, the KV cache holds %lld tokens, fewer than one "
                             "request of --max-ctx %d; lower --max-ctx or raise "
                             "--gpu-memory-fraction",
                             (long long)(n_blocks * p->block_size), p->max_ctx);
        }
        if (st == LB_OK) {
            lb_gpu_arena_init_sizing(&sz);
            st = carve(g, &sz, n_blocks, p->max_ctx, err);
            size_t need = sz.used_bytes;
            lb_gpu_arena_free(&sz);
            if (st == LB_OK)
                st = lb_gpu_arena_init(&g->arena, need, "lower --gpu-memory-fraction", err);
            if (st == LB_OK) st = carve(g, &g->arena, n_blocks, p->max_ctx, err);
        }
    }
    if (st == LB_OK) {
        lb_blas_params bp = lb_blas_default_params();
        bp.workspace = g->blas_ws;
        bp.workspace_bytes = LB_BLAS_WORKSPACE_BYTES;
        bp.tune = false; /* large products: the heuristic's choice, no timing in a run */
        st = lb_blas_init(&g->blas, &bp, err);
        bp.tune = true; /* decode-sized products: the heuristic's first pick is often slow */
        if (st == LB_OK) st = lb_blas_init(&g->blas_small, &bp, err);
    }
    if (st == LB_OK) {
        float *inv = malloc((size_t)lb_model_head_dim(c) / 2 * sizeof *inv);
        float *d_inv = NULL;
        if (inv == NULL ||
            cudaMalloc((void **)&d_inv, (size_t)lb_model_head_dim(c) / 2 * 4) != cudaSuccess) {
            st = lb_fail(err, LB_ERR_NOMEM, "out of memory for the RoPE table");
        } else {
            lb_ref_rope_freqs(c, inv);
            cudaMemcpy(d_inv, inv, (size_t)lb_model_head_dim(c) / 2 * 4, cudaMemcpyHostToDevice);
            st = lb_rope_table(g->cs, d_inv, p->max_ctx, lb_model_head_dim(c), g->stream, err);
            cudaStreamSynchronize(g->stream);
        }
        cudaFree(d_inv);
        free(inv);
    }
    if (st == LB_OK) st = load_weights(g, w, err);
    if (st == LB_OK && cudaStreamSynchronize(g->stream) != cudaSuccess)
        st = lb_fail(err, LB_ERR_DEVICE, "loading the weights failed on the GPU");
    if (st != LB_OK) {
        gpu_close(&g->base);
        return st;
    }
    g->base.n_blocks = (int32_t)n_blocks;
    g->base.weight_bytes = g->off.total * 2;
    g->base.kv_bytes = (int64_t)(n_blocks * (int64_t)block_bytes);
    LB_INFO("GPU engine: %.2f GiB of weights, a KV cache of %lld tokens (%.2f GiB)",
            (double)g->base.weight_bytes / (1 << 30), (long long)(n_blocks * p->block_size),
            (double)g->base.kv_bytes / (1 << 30));
    *out = &g->base;
    return LB_OK;
}

#endif
