/* gpu.c: the engine's GPU backend (engine_impl.h): bf16 weights and KV cache in one
 * arena, cuBLASLt products, kernels/ for the rest. A build without CUDA refuses.
 *
 * What keeps a step's GPU busy (figures: docs/PERFORMANCE.md, bench/engine_probe):
 * - A step of decodes only (every sequence computes one token and samples) runs as a CUDA
 *   graph, one per batch-size bucket (rows_for: powers of two up to max_seqs): the batch
 *   is padded to its bucket with rows that write a spare KV block nobody owns and read one
 *   key of it. The first step of a bucket runs kernel by kernel (it prepares and times
 *   its products), then it is captured; later ones launch the graph. The warm-up
 *   (gpu_warmup) runs that first step, of padding rows only, for every bucket before a
 *   run, and makes the cuDNN plans of the prompt lengths it is told. A capture the driver
 *   refuses is not an error: those steps run kernel by kernel.
 * - Decode attention splits each context over blocks (kernels/paged.cuh) so that small
 *   batches fill the GPU.
 * - At buckets of up to LB_GEMV_MAX_ROWS rows each product runs through kernels/gemv.cuh
 *   (at the split of K over warps that suits it, the RMSNorm before qkv and mlp_in, RoPE
 *   and the KV store after qkv and the SwiGLU after mlp_in inside it) or cuBLASLt (with
 *   the norm, KV store and SwiGLU kernels), whichever the bucket's first step timed
 *   faster (choose_products). The head's rows are normalised before it by the norm kernel
 *   (inside lb_gemv each of its many blocks would do it again).
 * - The argmax of a few rows spreads each row over many blocks (kernels/logits.cuh).
 * - RoPE and the KV store run inside the qkv product where that is lb_gemv (its kv
 *   option), else as one kernel after it (lb_paged_kv_store with the RoPE table).
 * - The gemv, KV store, paged attention, row gather and argmax kernels are launched
 *   programmatically dependent (gpu/common.cuh): each starts while the one before it
 *   finishes, the gemv reading its first weights then, so a decode step of a few rows has
 *   no gap between its kernels but around cuBLASLt's and the head's norm.
 * - Prompt chunks that start at position 0 (a whole prompt, or its first chunk) attend
 *   through cuDNN's fused flash attention, one sequence a call, its length padded up to a
 *   multiple of DNN_PAD with one plan per padded length; such chunks are the tail of a
 *   batch (the scheduler admits new sequences last), so the paged kernel runs over the
 *   tokens before them. Without cuDNN every token takes the paged kernel.
 * The step's inputs travel in one pinned host buffer. Not here: overlapping the host's
 * planning of step n+1 with step n (each step waits for its argmax), norms fused into
 * cuBLASLt's products (batches over LB_GEMV_MAX_ROWS rows, and prefill). */
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
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/clock.h"
#include "core/log.h"
#include "gpu/arena.h"
#include "gpu/blas/matmul.h"
#include "gpu/check.h"
#include "gpu/cudnn/attn.h"
#include "gpu/graph.cuh"
#include "kernels/act.cuh"
#include "kernels/embed.cuh"
#include "kernels/gemv.cuh"
#include "kernels/logits.cuh"
#include "kernels/norm.cuh"
#include "kernels/paged.cuh"
#include "kernels/rope.cuh"
#include "model/ref.h"

#define BF                      LB_DT_BF16
#define SMALL_M                 256
#define DNN_PAD                 256 /* cuDNN prefill lengths: multiples of this */
#define MAX_GRAPHS              16

/* the products of a step, and how each runs at a decode bucket's rows */
enum { PROD_QKV, PROD_OUT, PROD_IN, PROD_DOWN, PROD_HEAD, N_PROD };
static const char *const PROD_NAMES[N_PROD] = {"qkv", "attn_out", "mlp_in", "mlp_out", "lm_head"};
typedef enum {
    IMPL_UNKNOWN = 0,
    IMPL_BLAS,
    IMPL_GEMV1, /* lb_gemv, 1 << (impl - IMPL_GEMV1) warps a column */
    IMPL_GEMV2,
    IMPL_GEMV4,
    IMPL_GEMV8,
    N_IMPL
} prod_impl;

typedef struct {
    int32_t rows; /* the bucket */
    cudaGraphExec_t exec;
} decode_graph;

typedef struct {
    lb_backend base;
    lb_model_config cfg;
    lb_param_offsets off;
    int32_t block_size, step_tokens, max_seqs, max_blocks, n_blocks;
    int device; /* made current on the calling thread by every forward and read */
    int n_sm;
    cudaStream_t stream;
    lb_blas *blas;       /* products of more than SMALL_M rows: the heuristic's choice */
    lb_blas *blas_small; /* up to SMALL_M rows (decode): timed once per row bucket */
    lb_gpu_arena arena;
    /* device pieces */
    uint16_t *params;                          /* bf16, config.h's layout */
    uint16_t *k_cache, *v_cache;               /* [L, n_blocks, block_size, NKV, HD] bf16 */
    float *cs;                                 /* RoPE (cos, sin) [max_ctx, HD/2, 2] */
    void *x, *x2, *n, *qkv, *att, *h, *a, *xo; /* bf16 activations; x, x2: the
                                                * residual stream, ping-pong */
    float *rstd, *logits, *lse;
    void *split_ws; /* decode attention's splits */
    int32_t *in;    /* the step's inputs, IN_PARTS parts (in_at) */
    int32_t *argmax;
    void *argmax_ws; /* the argmax's scratch (a few rows over many blocks) */
    void *blas_ws;
    int32_t *h_in;   /* pinned host copy of in */
    int32_t *run_at; /* [max_seqs] host: where each cuDNN run of a step starts */
    prod_impl impl[LB_GEMV_MAX_ROWS + 1][N_PROD]; /* by rows (decode buckets) */
    /* decode steps as graphs */
    decode_graph graphs[MAX_GRAPHS];
    int n_graphs;
    bool graph_failed;
    /* prefill attention through cuDNN: a plan per padded length / DNN_PAD - 1 */
    lb_cudnn_attn **dnn;
    int n_dnn;
    bool dnn_off;
    void *dnn_ws;
    size_t dnn_ws_bytes;
} gpu_backend;

/* The step's inputs, each part at a fixed place in g->in (and g->h_in). */
enum { IN_TOKENS, IN_POS, IN_SEQ, IN_SLOT, IN_OUT, IN_TABLE, IN_PARTS };

static size_t in_offset(const gpu_backend *g, int part) {
    const size_t T = (size_t)g->step_tokens, S = (size_t)g->max_seqs;
    const size_t off[IN_PARTS + 1] = {
        0, T, 2 * T, 3 * T, 4 * T, 4 * T + S, 4 * T + S + S * (size_t)g->max_blocks};
    return off[part];
}

static int32_t *in_at(const gpu_backend *g, int32_t *base, int part) {
    return base + in_offset(g, part);
}

/* Bytes of split scratch the largest decode batch that splits its contexts needs. */
static size_t split_bytes(const gpu_backend *g) {
    const lb_model_config *c = &g->cfg;
    size_t most = 0;
    for (int n = 1; n <= g->max_seqs; n++) {
        const int S = lb_paged_splits(n, c->n_kv_head, g->n_sm);
        if (S == 1) break;
        size_t b = lb_paged_scratch_bytes(n, c->n_head, lb_model_head_dim(c), S);
        if (b > most) most = b;
    }
    return most;
}

/* Carves every device piece; a sizing arena only counts. */
static lb_status carve(gpu_backend *g, lb_gpu_arena *a, int64_t n_blocks, int max_ctx,
                       lb_err *err) {
    const lb_model_config *c = &g->cfg;
    const size_t T = (size_t)g->step_tokens, S = (size_t)g->max_seqs, C = (size_t)c->d_model;
    const size_t HD = (size_t)lb_model_head_dim(c);
    /* the cache has a spare block after the n_blocks the scheduler hands out */
    const size_t kv =
        (size_t)c->n_layer * (size_t)(n_blocks + 1) * g->block_size * c->n_kv_head * HD;
#define PIECE(name, bytes, ptr) LB_TRY(lb_gpu_arena_alloc(a, name, (bytes), (void **)(ptr), err))
    PIECE("params", (size_t)g->off.total * 2, &g->params);
    PIECE("blas_workspace", LB_BLAS_WORKSPACE_BYTES, &g->blas_ws);
    PIECE("rope_table", (size_t)max_ctx * HD * sizeof(float), &g->cs);
    /* qkv and att have DNN_PAD rows more: a padded cuDNN prefill reads and writes past
     * its sequence (masked rows) */
    PIECE("x", T * C * 2, &g->x);
    PIECE("x2", T * C * 2, &g->x2);
    PIECE("n", T * C * 2, &g->n);
    PIECE("qkv", (T + DNN_PAD) * (size_t)lb_model_qkv_dim(c) * 2, &g->qkv);
    PIECE("att", (T + DNN_PAD) * C * 2, &g->att);
    PIECE("h", T * 2 * (size_t)c->d_ff * 2, &g->h);
    PIECE("a", T * (size_t)c->d_ff * 2, &g->a);
    PIECE("xo", S * C * 2, &g->xo);
    PIECE("rstd", T * sizeof(float), &g->rstd);
    PIECE("lse", (T + DNN_PAD) * (size_t)c->n_head * sizeof(float), &g->lse);
    PIECE("logits", S * (size_t)c->vocab_size * sizeof(float), &g->logits);
    PIECE("split_scratch", split_bytes(g), &g->split_ws);
    PIECE("inputs", in_offset(g, IN_PARTS) * 4, &g->in);
    PIECE("argmax", S * 4, &g->argmax);
    PIECE("argmax_scratch", LB_ARGMAX_SCRATCH_BYTES, &g->argmax_ws);
    PIECE("k_cache", kv * 2, &g->k_cache);
    PIECE("v_cache", kv * 2, &g->v_cache);
#undef PIECE
    return LB_OK;
}

static void gpu_close(lb_backend *b) {
    gpu_backend *g = (gpu_backend *)b;
    if (g == NULL) return;
    for (int i = 0; i < g->n_graphs; i++)
        cudaGraphExecDestroy(g->graphs[i].exec);
    for (int i = 0; i < g->n_dnn; i++)
        lb_cudnn_attn_free(g->dnn[i]);
    free(g->dnn);
    cudaFree(g->dnn_ws);
    lb_blas_free(g->blas);
    lb_blas_free(g->blas_small);
    lb_gpu_arena_free(&g->arena);
    if (g->stream) cudaStreamDestroy(g->stream);
    cudaFreeHost(g->h_in);
    free(g->run_at);
    free(g);
}

static void gpu_read(lb_backend *b, const lb_param_tensor *t, lb_gpu_dtype dt, void *dst) {
    gpu_backend *g = (gpu_backend *)b;
    uint16_t *tmp = dt == BF ? dst : malloc((size_t)t->numel * 2);
    if (tmp == NULL) return;
    cudaSetDevice(g->device);
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
 * out of type dt; with norm_w, x's rows RMS-normalised with those weights first; with
 * swiglu, y [N, OC/2] = silu(gate) * up of W's two halves; with kv (y = g->qkv), RoPE and
 * the KV store of the N tokens after it. N rows rounded by rows_for under cap; through
 * lb_gemv (norm, SwiGLU and KV store inside it) where this product at these rows was timed
 * faster that way (choose_products), else the norm kernel into g->n, cuBLASLt (into g->h
 * under SwiGLU) and the SwiGLU or KV store kernel. */
static lb_status linear(gpu_backend *g, int prod, void *y, lb_gpu_dtype dt, const void *x,
                        const void *w, int64_t N, int64_t cap, int64_t K, int64_t OC,
                        const void *res, const void *norm_w, bool swiglu, const lb_gemv_kv *kv,
                        lb_err *err) {
    const int64_t M = rows_for(N, cap);
    const prod_impl im = M <= LB_GEMV_MAX_ROWS ? g->impl[M][prod] : IMPL_BLAS;
    if (im >= IMPL_GEMV1) {
        const lb_gemv_opts o = {.split = 1 << (im - IMPL_GEMV1),
                                .norm_w = norm_w,
                                .eps = g->cfg.norm_eps,
                                .swiglu = swiglu,
                                .kv = kv};
        return lb_gemv(y, dt, x, w, res, (int)M, K, OC, &o, BF, g->stream, err);
    }
    if (norm_w != NULL) {
        LB_TRY(lb_norm_rmsnorm_forward(g->n, g->rstd, x, norm_w, N, (int)K, g->cfg.norm_eps, BF,
                                       g->stream, err));
        x = g->n;
    }
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
                       .d = swiglu ? g->h : y,
                       .ldd = OC,
                       .d_type = dt,
                       .alpha = 1.0f,
                       .beta = res ? 1.0f : 0.0f};
    LB_TRY(lb_blas_gemm_run(M <= SMALL_M ? g->blas_small : g->blas, &mm, g->stream, err));
    if (kv != NULL)
        return lb_paged_kv_store(kv->k_cache, kv->v_cache, y, kv->cs, kv->pos, kv->slot, (int)N,
                                 kv->n_head, kv->n_kv_head, kv->head_dim, BF, g->stream, err);
    return swiglu ? lb_act_swiglu_forward(y, g->h, N, (int)(OC / 2), BF, g->stream, err) : LB_OK;
}

/* Elements of a layer's K (or V) cache: the blocks handed out and the spare one. */
static int64_t layer_cache(const gpu_backend *g) {
    return (int64_t)(g->n_blocks + 1) * g->block_size * g->cfg.n_kv_head *
           lb_model_head_dim(&g->cfg);
}

/* Product `prod` of a step's N tokens with layer l's weights (the head's for PROD_HEAD),
 * between the backend's buffers and the residual stream x: qkv (its q and k rotated, k
 * and v into layer l's cache) and mlp_in (with SwiGLU, into g->a) read RMSNorm(x);
 * attn_out and mlp_out write y = ... + x; the head reads x (its rows normalised before)
 * and writes the logits. */
static lb_status product(gpu_backend *g, int prod, int l, int N, void *y, const void *x,
                         lb_err *err) {
    const lb_model_config *c = &g->cfg;
    const int64_t C = c->d_model, F = c->d_ff, T = g->step_tokens;
    const lb_layer_offsets *lo = &g->off.layer;
    const uint16_t *L = g->params + g->off.layers + (int64_t)l * g->off.layer_numel;
    switch (prod) {
    case PROD_QKV: {
        const lb_gemv_kv kv = {.k_cache = g->k_cache + l * layer_cache(g),
                               .v_cache = g->v_cache + l * layer_cache(g),
                               .cs = g->cs,
                               .pos = in_at(g, g->in, IN_POS),
                               .slot = in_at(g, g->in, IN_SLOT),
                               .rows = N,
                               .n_head = c->n_head,
                               .n_kv_head = c->n_kv_head,
                               .head_dim = lb_model_head_dim(c)};
        return linear(g, prod, g->qkv, BF, x, L + lo->qkv_w, N, T, C, lb_model_qkv_dim(c), NULL,
                      L + lo->norm1_w, false, &kv, err);
    }
    case PROD_OUT:
        return linear(g, prod, y, BF, g->att, L + lo->attn_out_w, N, T, C, C, x, NULL, false, NULL,
                      err);
    case PROD_IN:
        return linear(g, prod, g->a, BF, x, L + lo->mlp_in_w, N, T, C, 2 * F, NULL, L + lo->norm2_w,
                      true, NULL, err);
    case PROD_DOWN:
        return linear(g, prod, y, BF, g->a, L + lo->mlp_out_w, N, T, F, C, x, NULL, false, NULL,
                      err);
    default:
        return linear(g, prod, g->logits, LB_DT_F32, x, g->params + g->off.lm_head, N, g->max_seqs,
                      C, c->vocab_size, NULL, NULL, false, NULL, err);
    }
}

static lb_status event_ok(cudaError_t e, lb_err *err) {
    return e == cudaSuccess ? LB_OK
                            : lb_fail(err, LB_ERR_DEVICE, "timing the decode products: %s",
                                      cudaGetErrorString(e));
}

/* For a decode bucket of at most LB_GEMV_MAX_ROWS rows, times each product every way
 * (cuBLASLt with the norm, SwiGLU and KV store kernels beside it, lb_gemv at each
 * split with them inside; one run each untimed, then TIME_REPS, each on the next layer's
 * weights so that none comes from L2) and keeps the fastest. The outputs are scratch: the
 * step computes them again (the KV store writes the step's own slots, which the step
 * writes again). */
#define TIME_REPS 3
static lb_status choose_products(gpu_backend *g, int rows, lb_err *err) {
    if (rows > LB_GEMV_MAX_ROWS || g->impl[rows][0] != IMPL_UNKNOWN) return LB_OK;
    cudaEvent_t e0 = NULL, e1 = NULL;
    lb_status st = LB_OK;
    if (cudaEventCreate(&e0) != cudaSuccess || cudaEventCreate(&e1) != cudaSuccess)
        st = lb_fail(err, LB_ERR_DEVICE, "cannot create CUDA events");
    for (int prod = 0; prod < N_PROD && st == LB_OK; prod++) {
        float ms[N_IMPL] = {0};
        prod_impl best = IMPL_BLAS;
        for (int im = IMPL_BLAS; im < N_IMPL && st == LB_OK; im++) {
            g->impl[rows][prod] = (prod_impl)im;
            for (int r = 0; r <= TIME_REPS && st == LB_OK; r++) {
                if (r == 1) st = event_ok(cudaEventRecord(e0, g->stream), err);
                if (st == LB_OK)
                    st = product(g, prod, r % g->cfg.n_layer, rows, g->x2,
                                 prod == PROD_HEAD ? g->xo : g->x, err);
            }
            if (st == LB_OK) st = event_ok(cudaEventRecord(e1, g->stream), err);
            if (st == LB_OK) st = event_ok(cudaEventSynchronize(e1), err);
            if (st == LB_OK) st = event_ok(cudaEventElapsedTime(&ms[im], e0, e1), err);
            if (st == LB_ERR_UNSUPPORTED) { /* lb_gemv cannot run it */
                st = LB_OK;
                ms[im] = INFINITY;
            }
            if (ms[im] < ms[best]) best = (prod_impl)im;
        }
        g->impl[rows][prod] = best;
        LB_DEBUG("decode products, %d rows: %s %.1f us through cuBLASLt, gemv %.1f / %.1f / "
                 "%.1f / %.1f us at 1 / 2 / 4 / 8 warps a column",
                 rows, PROD_NAMES[prod], ms[IMPL_BLAS] * 1e3 / TIME_REPS,
                 ms[IMPL_GEMV1] * 1e3 / TIME_REPS, ms[IMPL_GEMV2] * 1e3 / TIME_REPS,
                 ms[IMPL_GEMV4] * 1e3 / TIME_REPS, ms[IMPL_GEMV8] * 1e3 / TIME_REPS);
    }
    if (e0) cudaEventDestroy(e0);
    if (e1) cudaEventDestroy(e1);
    return st;
}

/* Attention of a step's tokens [0, N): the tokens before n_paged through the paged
 * kernel, then each run of the cuDNN tail (its own sequence from position 0) through the
 * plan of its padded length. Runs in order: a run's padded rows spill into the next
 * run's, which that run then writes. */
static lb_status attention(gpu_backend *g, const uint16_t *kc, const uint16_t *vc, int N,
                           int n_paged, const int32_t *run_at, int n_runs, lb_err *err) {
    const lb_model_config *c = &g->cfg;
    const int NH = c->n_head, NKV = c->n_kv_head, HD = lb_model_head_dim(c);
    const int Q = lb_model_qkv_dim(c), C = c->d_model;
    const int S = lb_paged_splits(n_paged, NKV, g->n_sm);
    LB_TRY(lb_paged_attention(g->att, g->split_ws, S, g->qkv, kc, vc, in_at(g, g->in, IN_TABLE),
                              g->max_blocks, in_at(g, g->in, IN_SEQ), in_at(g, g->in, IN_POS),
                              n_paged, NH, NKV, HD, g->block_size, BF, g->stream, err));
    for (int r = 0; r < n_runs; r++) {
        const int at = run_at[r], len = (r + 1 < n_runs ? run_at[r + 1] : N) - at;
        lb_cudnn_attn *a = g->dnn[(len + DNN_PAD - 1) / DNN_PAD - 1];
        LB_TRY(lb_cudnn_attn_forward(a, (uint16_t *)g->att + (size_t)at * C, g->lse,
                                     (const uint16_t *)g->qkv + (size_t)at * Q, g->dnn_ws,
                                     g->stream, err));
    }
    return LB_OK;
}

/* The model over the step's N tokens (inputs in g->in), logits and argmax of n_out of
 * them. Nothing here waits on the device, so a decode step can be captured. */
static lb_status layers(gpu_backend *g, int N, int n_paged, const int32_t *run_at, int n_runs,
                        int n_out, lb_err *err) {
    const lb_model_config *c = &g->cfg;
    const int C = c->d_model;
    const int64_t lc = layer_cache(g);
    cudaStream_t s = g->stream;
    const int32_t *tokens = in_at(g, g->in, IN_TOKENS), *out_token = in_at(g, g->in, IN_OUT);
    const uint16_t *P = g->params;
    void *x = g->x, *x2 = g->x2, *t;
    LB_TRY(lb_embed_forward(x, tokens, P + g->off.wte, NULL, 1, N, C, BF, s, err));
    for (int l = 0; l < c->n_layer; l++) {
        /* qkv, RoPE and the KV store */
        LB_TRY(product(g, PROD_QKV, l, N, NULL, x, err));
        LB_TRY(attention(g, g->k_cache + l * lc, g->v_cache + l * lc, N, n_paged, run_at, n_runs,
                         err));
        LB_TRY(product(g, PROD_OUT, l, N, x2, x, err));
        t = x, x = x2, x2 = t;
        LB_TRY(product(g, PROD_IN, l, N, NULL, x, err));
        LB_TRY(product(g, PROD_DOWN, l, N, x2, x, err));
        t = x, x = x2, x2 = t;
    }
    LB_TRY(lb_logits_gather_rows(g->xo, x, out_token, n_out, C, BF, s, err));
    LB_TRY(lb_norm_rmsnorm_forward(g->n, g->rstd, g->xo, P + g->off.normf_w, n_out, C, c->norm_eps,
                                   BF, s, err));
    LB_TRY(product(g, PROD_HEAD, 0, n_out, NULL, g->n, err));
    return lb_logits_argmax(g->argmax, g->logits, n_out, c->vocab_size, g->argmax_ws, s, err);
}

typedef struct {
    gpu_backend *g;
    int rows;
} decode_body;

static lb_status enqueue_decode(void *ctx, cudaStream_t s, lb_err *err) {
    const decode_body *d = ctx;
    (void)s; /* the backend's stream */
    return layers(d->g, d->rows, d->rows, NULL, 0, d->rows, err);
}

/* Records a decode step of `rows` rows (inputs already in place) as the bucket's graph
 * (gpu/graph.cuh). A step that cannot be captured is not an error: nothing of it ran, and
 * decode steps run kernel by kernel from then on. */
static void capture(gpu_backend *g, int rows) {
    char why[LB_ERR_MSG_BYTES] = "too many batch buckets";
    decode_body d = {g, rows};
    cudaGraphExec_t exec = NULL;
    if (g->n_graphs < MAX_GRAPHS &&
        lb_gpu_graph_capture(g->stream, enqueue_decode, &d, NULL, &exec, why, sizeof why)) {
        g->graphs[g->n_graphs++] = (decode_graph){.rows = rows, .exec = exec};
        return;
    }
    g->graph_failed = true;
    LB_INFO("decode steps run kernel by kernel: capturing one as a CUDA graph failed (%s)", why);
}

/* Plans (and workspace) for the cuDNN runs of a step; false: cuDNN is not used (absent,
 * or a plan could not be made), and never again. */
static bool dnn_ready(gpu_backend *g, const int32_t *run_at, int n_runs, int N) {
    const lb_model_config *c = &g->cfg;
    const int64_t t0 = lb_clock_now_ns();
    size_t ws = 0;
    for (int r = 0; r < n_runs && !g->dnn_off; r++) {
        const int len = (r + 1 < n_runs ? run_at[r + 1] : N) - run_at[r];
        const int k = (len + DNN_PAD - 1) / DNN_PAD - 1;
        lb_err why;
        if (g->dnn[k] == NULL &&
            lb_cudnn_attn_init(&g->dnn[k], 1, (k + 1) * DNN_PAD, c->n_head, c->n_kv_head,
                               lb_model_head_dim(c), BF, false, &why) != LB_OK) {
            LB_INFO("prefill attention: the paged kernel (cuDNN: %s)", why.msg);
            g->dnn_off = true;
            break;
        }
        size_t b = lb_cudnn_attn_workspace_bytes(g->dnn[k]);
        if (b > ws) ws = b;
    }
    if (!g->dnn_off && ws > g->dnn_ws_bytes) {
        cudaFree(g->dnn_ws);
        g->dnn_ws_bytes = 0;
        if (cudaMalloc(&g->dnn_ws, ws) != cudaSuccess) {
            cudaGetLastError();
            g->dnn_ws = NULL;
            g->dnn_off = true;
            LB_INFO("prefill attention: the paged kernel (no memory for cuDNN's workspace)");
        } else {
            g->dnn_ws_bytes = ws;
        }
    }
    g->base.prepare_ns += lb_clock_now_ns() - t0;
    return !g->dnn_off;
}

/* Rows [from, rows) of the step's host inputs as padding: token 0 at position 0 of a
 * sequence of its own whose one block is the spare one, logits and argmax of its own. */
static void pad_rows(gpu_backend *g, int from, int rows) {
    int32_t *tok = in_at(g, g->h_in, IN_TOKENS), *pos = in_at(g, g->h_in, IN_POS);
    int32_t *seq = in_at(g, g->h_in, IN_SEQ), *slot = in_at(g, g->h_in, IN_SLOT);
    int32_t *out = in_at(g, g->h_in, IN_OUT), *table = in_at(g, g->h_in, IN_TABLE);
    const int32_t spare = g->n_blocks; /* the block padded rows write */
    for (int i = from; i < rows; i++) {
        tok[i] = pos[i] = 0;
        seq[i] = out[i] = i;
        slot[i] = spare * g->block_size;
        table[(size_t)i * g->max_blocks] = spare;
    }
}

/* The step's host inputs to the device: rows tokens, n_out output rows, n_seqs rows of
 * the block table. */
static lb_status upload(gpu_backend *g, int rows, int n_out, int n_seqs, lb_err *err) {
    const enum cudaMemcpyKind h2d = cudaMemcpyHostToDevice;
    for (int part = IN_TOKENS; part < IN_TABLE; part++)
        LB_CUDA_TRY(err,
                    cudaMemcpyAsync(in_at(g, g->in, part), in_at(g, g->h_in, part),
                                    (size_t)(part == IN_OUT ? n_out : rows) * 4, h2d, g->stream));
    LB_CUDA_TRY(err, cudaMemcpyAsync(in_at(g, g->in, IN_TABLE), in_at(g, g->h_in, IN_TABLE),
                                     (size_t)n_seqs * g->max_blocks * 4, h2d, g->stream));
    return LB_OK;
}

/* A decode step of `rows` rows (a bucket; inputs in place): the bucket's graph, or on its
 * first step the products chosen, the step run kernel by kernel and captured (counted in
 * prepare_ns). */
static lb_status decode_step(gpu_backend *g, int rows, lb_err *err) {
    for (int i = 0; i < g->n_graphs; i++)
        if (g->graphs[i].rows == rows) {
            LB_CUDA_TRY(err, cudaGraphLaunch(g->graphs[i].exec, g->stream));
            return LB_OK;
        }
    const int64_t t0 = lb_clock_now_ns();
    /* the bucket's first step prepares its products (and waits on timing them) */
    LB_TRY(choose_products(g, rows, err));
    LB_TRY(layers(g, rows, rows, NULL, 0, rows, err));
    if (!g->graph_failed) capture(g, rows);
    g->base.prepare_ns += lb_clock_now_ns() - t0;
    return LB_OK;
}

static lb_status gpu_forward(lb_backend *b, const lb_engine_batch *bt, int32_t *argmax,
                             float *logits, lb_err *err) {
    gpu_backend *g = (gpu_backend *)b;
    const int64_t V = g->cfg.vocab_size;
    const int N = bt->n_tokens, n_out = bt->n_out;
    cudaStream_t s = g->stream;
    /* The current device is a thread's: the thread that steps the engine (serve's engine
     * thread) need not be the one that opened it on this device. */
    LB_CUDA_TRY(err, cudaSetDevice(g->device));
    /* decodes only: every sequence computes one token, which samples (token k is sequence
     * k's, out_token k); padded to its bucket */
    const bool decode = N == bt->n_seqs && n_out == N;
    const int rows = decode ? (int)rows_for(N, g->max_seqs) : N;
    int32_t *tok = in_at(g, g->h_in, IN_TOKENS), *pos = in_at(g, g->h_in, IN_POS);
    int32_t *seq = in_at(g, g->h_in, IN_SEQ), *slot = in_at(g, g->h_in, IN_SLOT);
    int32_t *out = in_at(g, g->h_in, IN_OUT), *table = in_at(g, g->h_in, IN_TABLE);
    memcpy(tok, bt->tokens, (size_t)N * 4);
    memcpy(pos, bt->pos, (size_t)N * 4);
    memcpy(seq, bt->seq_of, (size_t)N * 4);
    memcpy(out, bt->out_token, (size_t)n_out * 4);
    memcpy(table, bt->block_table, (size_t)bt->n_seqs * bt->max_blocks * 4);
    for (int i = 0; i < N; i++) {
        const int32_t *row = bt->block_table + (int64_t)bt->seq_of[i] * bt->max_blocks;
        slot[i] = row[bt->pos[i] / g->block_size] * g->block_size + bt->pos[i] % g->block_size;
    }
    pad_rows(g, N, rows);
    LB_TRY(upload(g, rows, decode ? rows : n_out, decode ? rows : bt->n_seqs, err));
    if (decode) {
        LB_TRY(decode_step(g, rows, err));
    } else {
        /* the tail of sequences whose chunk starts at position 0, one run each */
        int n_paged = N, n_runs = 0;
        while (n_paged > 0) {
            int k = n_paged - 1;
            while (k > 0 && bt->seq_of[k - 1] == bt->seq_of[n_paged - 1])
                k--;
            if (bt->pos[k] != 0) break;
            n_paged = k;
            n_runs++;
        }
        int32_t *run_at = g->run_at;
        for (int i = n_paged, r = 0; i < N; i++)
            if (i == n_paged || bt->seq_of[i] != bt->seq_of[i - 1]) run_at[r++] = i;
        if (n_runs > 0 && !dnn_ready(g, run_at, n_runs, N)) n_runs = 0, n_paged = N;
        LB_TRY(layers(g, N, n_paged, run_at, n_runs, n_out, err));
    }
    LB_CUDA_TRY(err,
                cudaMemcpyAsync(argmax, g->argmax, (size_t)n_out * 4, cudaMemcpyDeviceToHost, s));
    for (int o = 0; o < n_out; o++)
        if (bt->out_full[o])
            LB_CUDA_TRY(err, cudaMemcpyAsync(logits + o * V, g->logits + o * V, (size_t)V * 4,
                                             cudaMemcpyDeviceToHost, s));
    LB_CUDA_TRY(err, cudaStreamSynchronize(s));
    return LB_OK;
}

/* Every decode bucket up to max_seqs through its first (padding-only) step, and the
 * cuDNN plans of prompt chunks up to max_prompt tokens. */
static lb_status gpu_warmup(lb_backend *b, int32_t max_prompt, lb_err *err) {
    gpu_backend *g = (gpu_backend *)b;
    LB_CUDA_TRY(err, cudaSetDevice(g->device));
    for (int n = 1;; n *= 2) {
        const int rows = (int)rows_for(n < g->max_seqs ? n : g->max_seqs, g->max_seqs);
        pad_rows(g, 0, rows);
        LB_TRY(upload(g, rows, rows, rows, err));
        LB_TRY(decode_step(g, rows, err));
        if (n >= g->max_seqs) break;
    }
    const int most = max_prompt < g->step_tokens ? max_prompt : g->step_tokens;
    g->run_at[0] = 0;
    for (int len = DNN_PAD; len - DNN_PAD < most && !g->dnn_off; len += DNN_PAD)
        dnn_ready(g, g->run_at, 1, len < g->step_tokens ? len : g->step_tokens);
    LB_CUDA_TRY(err, cudaStreamSynchronize(g->stream));
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
            cudaError_t ce =
                cudaMemcpyAsync(dst, buf, (size_t)t->numel * 2, cudaMemcpyHostToDevice, g->stream);
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
    g->base = (lb_backend){.name = "gpu",
                           .forward = gpu_forward,
                           .warmup = gpu_warmup,
                           .read = gpu_read,
                           .close = gpu_close};
    g->cfg = *c;
    g->device = p->device_index;
    lb_model_param_offsets(c, &g->off);
    g->block_size = p->block_size;
    g->step_tokens = p->step_tokens;
    g->max_seqs = p->max_seqs;
    g->max_blocks = (p->max_ctx + p->block_size - 1) / p->block_size;
    g->n_dnn = (p->step_tokens + DNN_PAD - 1) / DNN_PAD;
    g->dnn = calloc((size_t)g->n_dnn, sizeof *g->dnn);
    g->run_at = malloc((size_t)p->max_seqs * sizeof *g->run_at);
    lb_status st = g->dnn && g->run_at ? LB_OK : lb_fail(err, LB_ERR_NOMEM, "out of memory");
    if (st == LB_OK && cudaDeviceGetAttribute(&g->n_sm, cudaDevAttrMultiProcessorCount,
                                              p->device_index) != cudaSuccess)
        st = lb_fail(err, LB_ERR_DEVICE, "cannot read the GPU's multiprocessor count");
    if (st == LB_OK &&
        cudaMallocHost((void **)&g->h_in, in_offset(g, IN_PARTS) * sizeof *g->h_in) != cudaSuccess)
        st = lb_fail(err, LB_ERR_NOMEM, "no pinned host memory for the step's inputs");
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
            n_blocks =
                p->kv_tokens > 0
                    ? (p->kv_tokens + p->block_size - 1) / p->block_size
                    : (int64_t)((allowed - (double)(fixed + reserve)) / (double)block_bytes) - 1;
            /* blocks count in int32_t (engine.c refuses a --kv-tokens of more) */
            if (n_blocks > INT32_MAX - 1) n_blocks = INT32_MAX - 1;
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
            cudaMemcpyAsync(d_inv, inv, (size_t)lb_model_head_dim(c) / 2 * 4,
                            cudaMemcpyHostToDevice, g->stream);
            st = lb_rope_table(g->cs, d_inv, p->max_ctx, lb_model_head_dim(c), g->stream, err);
            cudaStreamSynchronize(g->stream);
        }
        cudaFree(d_inv);
        free(inv);
    }
    g->n_blocks = (int32_t)n_blocks;
    /* rows past a step's tokens are read by padded cuDNN prefills: finite from the start;
     * the argmax's scratch starts at zero (each argmax leaves it so) */
    if (st == LB_OK &&
        (cudaMemsetAsync(g->qkv, 0,
                         ((size_t)p->step_tokens + DNN_PAD) * (size_t)lb_model_qkv_dim(c) * 2,
                         g->stream) != cudaSuccess ||
         cudaMemsetAsync(g->argmax_ws, 0, LB_ARGMAX_SCRATCH_BYTES, g->stream) != cudaSuccess))
        st = lb_fail(err, LB_ERR_DEVICE, "cannot clear the engine's buffers");
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
