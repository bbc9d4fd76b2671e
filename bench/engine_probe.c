/* engine_probe.c: probe. Where a decode step of the engine goes on this GPU, at
 * Llama-3.1-8B's shapes (bf16), for each batch size asked:
 *   - each product of a layer and the head through cuBLASLt as the engine runs it (timed
 *     candidates, the engine's row counts), and at up to 8 rows through kernels/gemv.cuh
 *     at each split of K over warps, plain and (qkv, mlp_in) with the RMSNorm before it *     and
 * (qkv) RoPE and the KV store or (mlp_in) the SwiGLU after it inside, as the engine runs it where
 * it fits; the weights cycled over copies that outgrow L2: time, weight bytes per second, TFLOP/s;
 *   - decode attention over contexts of CTX tokens in 16-token blocks handed out in a
 *     random order, whole and split over blocks (lb_paged_splits): time, cache bytes per
 *     second;
 *   - the small kernels of a layer (RMSNorm, RoPE with the KV store, SwiGLU) at the
 *     batch's rows;
 *   - their sum for a step (32 layers, the head, its norm and argmax; each product the
 *     faster of cuBLASLt with the norm, KV store, SwiGLU and argmax kernels beside it and
 *     the fused gemv), against whole
 *     decode steps of the engine (lb_engine_step's wall clock: CUDA graphs, host work and
 *     all) on random weights, prompts of PROMPT tokens, and the steps that prefilled them.
 *   - a prefill step of PRE_T tokens: the products through cuBLASLt as the engine runs them
 *     at that size (the heuristic's choice: TFLOP/s), RMSNorm, SwiGLU and RoPE with the KV
 *     store at PRE_T rows, cuDNN's attention over one prompt of PROMPT tokens (padded as
 *     the engine pads it; PRE_T / PROMPT of them a step), the paged kernel over the rest
 *     of a prompt whose first PRE_SPLIT tokens an earlier step computed, and their sum;
 *     against the engine's own prefill (tokens a second, after lb_engine_warmup).
 * Kernels are timed one run at a time between CUDA events (median of REPS after WARM).
 *
 * build: make bench (build/bench/engine_probe)
 * usage: engine_probe [BATCH ...]   (default 1 8 32 64 128 256; CTX=840 PROMPT=778) */
#include <cuda_runtime.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/rng.h"
#include "engine/engine.h"
#include "gpu/blas/matmul.h"
#include "gpu/cudnn/attn.h"
#include "kernels/act.cuh"
#include "kernels/gemv.cuh"
#include "kernels/logits.cuh"
#include "kernels/norm.cuh"
#include "kernels/paged.cuh"
#include "kernels/rope.cuh"
#include "probe_check.h"

#define REPS      15
#define WARM      2
#define COPIES    4
#define BS        16
#define CTX       840
#define PROMPT    778
#define PRE_T     8192 /* tokens of a prefill step (the engine's default budget) */
#define PRE_SPLIT 400  /* prompt tokens an earlier step computed, for the paged prefill */
#define DNN_PAD   256  /* as engine/gpu.c pads cuDNN's prompts */

enum { P_QKV, P_OUT, P_IN, P_DOWN, P_HEAD, N_PROD };
static const char *PROD_NAME[N_PROD] = {"qkv", "attn_out", "mlp_in", "mlp_out", "lm_head"};

typedef struct {
    int C, F, V, NH, NKV, HD, Q, L, n_sm;
    lb_gemv_opts gemv; /* how K_GEMV runs (norm_w, kv set: fused as the engine does) */
    int64_t oc[N_PROD], k[N_PROD];
    void *w[N_PROD][COPIES];
    int copies[N_PROD];
    void *x, *y, *qkv, *att, *h, *a, *kc, *vc, *scr;
    float *yf, *rstd, *cs, *nw;
    int32_t *pos, *seq, *slot, *table, *amax;
    void *amax_ws;                /* the argmax's scratch */
    lb_gemv_kv kv;                /* the KV store inside the qkv gemv (its rows: the batch's) */
    int32_t *ppos, *pseq, *pslot; /* [PRE_T]: prefill rows */
    float *lse;
    lb_cudnn_attn *dnn; /* NULL: no cuDNN */
    void *dnn_ws;
    lb_blas *blas, *blas_big; /* tuned (decode rows), the heuristic's choice (prefill) */
    void *ws;
    cudaStream_t s;
    cudaEvent_t e0, e1;
} probe;

static lb_err err;
#define LB(x) CK((x) != LB_OK ? (fprintf(stderr, "%s\n", err.msg), 1) : 0)

static void *dmalloc(size_t bytes) {
    void *p = NULL;
    CK(cudaMalloc(&p, bytes));
    return p;
}

/* a bf16 device buffer of n normal(0, 0.02) values */
static void *drandom(int64_t n, uint64_t seed, float *tmp) {
    void *p = dmalloc((size_t)n * 2);
    LB(lb_act_fill_normal(tmp, n, 0.02f, seed, 0, 0, &err));
    LB(lb_act_convert(p, LB_DT_BF16, tmp, LB_DT_F32, n, 0, &err));
    return p;
}

static int64_t now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

enum { K_PROD, K_GEMV, K_ATTN, K_NORM, K_STORE, K_SWIGLU, K_ARGMAX, K_DNN, K_PAGED_PRE };

/* One run of kernel `kind` (product `arg`, or attention split `arg` ways) at B rows. */
static void run(probe *p, int kind, int arg, int B, int rep) {
    const bool head = arg == P_HEAD;
    const void *in = arg == P_DOWN ? p->a : arg == P_OUT ? p->att : p->x;
    void *out = head ? (void *)p->yf : arg == P_QKV ? p->qkv : arg == P_IN ? p->h : p->y;
    switch (kind) {
    case K_GEMV: {
        lb_gemv_opts o = p->gemv;
        o.swiglu = o.norm_w != NULL && arg == P_IN;
        if (arg == P_OUT || arg == P_DOWN) o.norm_w = NULL;
        LB(lb_gemv(o.swiglu ? p->a : out, head ? LB_DT_F32 : LB_DT_BF16, in,
                   p->w[arg][rep % p->copies[arg]], NULL, B, p->k[arg], p->oc[arg], &o, LB_DT_BF16,
                   p->s, &err));
        break;
    }
    case K_PROD: {
        lb_blas_gemm g = {.m = B,
                          .n = p->oc[arg],
                          .k = p->k[arg],
                          .a = in,
                          .lda = p->k[arg],
                          .b = p->w[arg][rep % p->copies[arg]],
                          .ldb = p->k[arg],
                          .trans_b = true,
                          .ab_type = LB_DT_BF16,
                          .d = out,
                          .ldd = p->oc[arg],
                          .d_type = head ? LB_DT_F32 : LB_DT_BF16,
                          .alpha = 1.0f};
        LB(lb_blas_gemm_run(B > 256 ? p->blas_big : p->blas, &g, p->s, &err));
        break;
    }
    case K_DNN:
        LB(lb_cudnn_attn_forward(p->dnn, p->att, p->lse, p->qkv, p->dnn_ws, p->s, &err));
        break;
    case K_PAGED_PRE: /* one sequence's tokens PRE_SPLIT.. of a prompt of PROMPT */
        LB(lb_paged_attention(p->att, NULL, 1, p->qkv, p->kc, p->vc, p->table, (CTX + BS - 1) / BS,
                              p->pseq, p->ppos, B, p->NH, p->NKV, p->HD, BS, LB_DT_BF16, p->s,
                              &err));
        break;
    case K_ATTN:
        LB(lb_paged_attention(p->att, p->scr, arg, p->qkv, p->kc, p->vc, p->table,
                              (CTX + BS - 1) / BS, p->seq, p->pos, B, p->NH, p->NKV, p->HD, BS,
                              LB_DT_BF16, p->s, &err));
        break;
    case K_NORM:
        LB(lb_norm_rmsnorm_forward(p->y, p->rstd, p->x, p->nw, B, p->C, 1e-5f, LB_DT_BF16, p->s,
                                   &err));
        break;
    case K_STORE:
        LB(lb_paged_kv_store(p->kc, p->vc, p->qkv, p->cs, B > 256 ? p->ppos : p->pos,
                             B > 256 ? p->pslot : p->slot, B, p->NH, p->NKV, p->HD, LB_DT_BF16,
                             p->s, &err));
        break;
    case K_SWIGLU: LB(lb_act_swiglu_forward(p->a, p->h, B, p->F, LB_DT_BF16, p->s, &err)); break;
    default: LB(lb_logits_argmax(p->amax, p->yf, B, p->V, p->amax_ws, p->s, &err));
    }
}

/* median microseconds of one run */
static double time_us(probe *p, int kind, int arg, int B) {
    float t[REPS];
    for (int r = 0; r < WARM; r++)
        run(p, kind, arg, B, r);
    for (int r = 0; r < REPS; r++) {
        CK(cudaEventRecord(p->e0, p->s));
        run(p, kind, arg, B, r);
        CK(cudaEventRecord(p->e1, p->s));
        CK(cudaEventSynchronize(p->e1));
        CK(cudaEventElapsedTime(&t[r], p->e0, p->e1));
    }
    return probe_median(t, REPS) * 1e3;
}

static void setup(probe *p, const lb_model_config *c, int max_b) {
    memset(p, 0, sizeof *p);
    p->C = c->d_model, p->F = c->d_ff, p->V = c->vocab_size, p->NH = c->n_head;
    p->NKV = c->n_kv_head, p->HD = lb_model_head_dim(c), p->Q = lb_model_qkv_dim(c);
    p->L = c->n_layer;
    CK(cudaDeviceGetAttribute(&p->n_sm, cudaDevAttrMultiProcessorCount, 0));
    const int64_t oc[N_PROD] = {p->Q, p->C, 2 * (int64_t)p->F, p->C, p->V};
    const int64_t k[N_PROD] = {p->C, p->C, p->C, p->F, p->C};
    float *tmp = dmalloc((size_t)p->V * p->C * 4);
    for (int i = 0; i < N_PROD; i++) {
        p->oc[i] = oc[i], p->k[i] = k[i];
        p->copies[i] = i == P_HEAD ? 1 : COPIES;
        for (int j = 0; j < p->copies[i]; j++)
            p->w[i][j] = drandom(oc[i] * k[i], (uint64_t)(10 * i + j), tmp);
    }
    const size_t B = (size_t)max_b, R = B > PRE_T ? B : PRE_T; /* rows of activations */
    p->x = drandom((int64_t)R * p->F, 100, tmp);
    p->a = drandom((int64_t)R * p->F, 101, tmp);
    p->att = drandom((int64_t)R * p->C, 102, tmp);
    p->qkv = drandom((int64_t)R * p->Q, 103, tmp);
    p->y = dmalloc(R * p->C * 2);
    p->h = drandom((int64_t)R * 2 * p->F, 104, tmp);
    p->lse = dmalloc(R * p->NH * 4);
    p->yf = dmalloc(B * p->V * 4);
    LB(lb_act_fill_normal(p->yf, (int64_t)B * p->V, 1.0f, 105, 0, 0, &err));
    p->nw = drandom(p->C, 108, tmp);
    p->rstd = dmalloc(R * 4);
    const int max_blocks = (CTX + BS - 1) / BS, n_blocks = (int)B * max_blocks;
    const size_t cache = (size_t)n_blocks * BS * p->NKV * p->HD;
    p->kc = drandom((int64_t)cache, 106, tmp);
    p->vc = drandom((int64_t)cache, 107, tmp);
    p->scr = dmalloc(lb_paged_scratch_bytes(max_b, p->NH, p->HD, LB_PAGED_MAX_SPLITS));
    CK(cudaFree(tmp));
    /* sequence i at position CTX - 1 over a random permutation of the blocks */
    int32_t *perm = malloc((size_t)n_blocks * 4), *h = malloc(B * 4 * 3);
    lb_rng rng;
    lb_rng_seed(&rng, 1);
    for (int i = 0; i < n_blocks; i++)
        perm[i] = i;
    for (int i = n_blocks - 1; i > 0; i--) {
        int j = (int)lb_rng_below(&rng, (uint64_t)i + 1), t = perm[i];
        perm[i] = perm[j], perm[j] = t;
    }
    for (size_t i = 0; i < B; i++) {
        h[i] = CTX - 1;
        h[B + i] = (int32_t)i;
        h[2 * B + i] = perm[i * max_blocks + (CTX - 1) / BS] * BS + (CTX - 1) % BS;
    }
    /* prefill rows: positions PRE_SPLIT.. of sequence 0 (the paged prefill), slots of the
     * cache in turn (the store) */
    int32_t *ph = malloc((size_t)PRE_T * 4 * 3);
    for (int i = 0; i < PRE_T; i++) {
        ph[i] = PRE_SPLIT + i % (PROMPT - PRE_SPLIT);
        ph[PRE_T + i] = 0;
        ph[2 * PRE_T + i] = i % (n_blocks * BS);
    }
    p->ppos = dmalloc(PRE_T * 4), p->pseq = dmalloc(PRE_T * 4), p->pslot = dmalloc(PRE_T * 4);
    CK(cudaMemcpy(p->ppos, ph, PRE_T * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(p->pseq, ph + PRE_T, PRE_T * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(p->pslot, ph + 2 * PRE_T, PRE_T * 4, cudaMemcpyHostToDevice));
    free(ph);
    p->table = dmalloc((size_t)n_blocks * 4);
    p->pos = dmalloc(B * 4), p->seq = dmalloc(B * 4), p->slot = dmalloc(B * 4);
    p->amax = dmalloc(B * 4);
    p->amax_ws = dmalloc(LB_ARGMAX_SCRATCH_BYTES);
    CK(cudaMemset(p->amax_ws, 0, LB_ARGMAX_SCRATCH_BYTES));
    CK(cudaMemcpy(p->table, perm, (size_t)n_blocks * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(p->pos, h, B * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(p->seq, h + B, B * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(p->slot, h + 2 * B, B * 4, cudaMemcpyHostToDevice));
    free(perm), free(h);
    p->cs = dmalloc((size_t)CTX * p->HD * 4);
    p->kv = (lb_gemv_kv){.k_cache = p->kc,
                         .v_cache = p->vc,
                         .cs = p->cs,
                         .pos = p->pos,
                         .slot = p->slot,
                         .n_head = p->NH,
                         .n_kv_head = p->NKV,
                         .head_dim = p->HD};
    float *inv = dmalloc((size_t)p->HD / 2 * 4);
    LB(lb_act_fill(inv, p->HD / 2, 0.01f, 0, &err));
    LB(lb_rope_table(p->cs, inv, CTX, p->HD, 0, &err));
    p->ws = dmalloc(LB_BLAS_WORKSPACE_BYTES);
    lb_blas_params bp = lb_blas_default_params();
    bp.workspace = p->ws, bp.workspace_bytes = LB_BLAS_WORKSPACE_BYTES, bp.tune = true;
    LB(lb_blas_init(&p->blas, &bp, &err));
    bp.tune = false; /* as the engine runs products of more than 256 rows */
    LB(lb_blas_init(&p->blas_big, &bp, &err));
    const int padded = (PROMPT + DNN_PAD - 1) / DNN_PAD * DNN_PAD;
    lb_err why;
    if (lb_cudnn_attn_init(&p->dnn, 1, padded, p->NH, p->NKV, p->HD, LB_DT_BF16, false, &why) ==
        LB_OK) {
        p->dnn_ws = dmalloc(lb_cudnn_attn_workspace_bytes(p->dnn));
    } else {
        printf("no cuDNN attention: %s\n", why.msg);
        p->dnn = NULL;
    }
    CK(cudaStreamCreate(&p->s));
    CK(cudaEventCreate(&p->e0));
    CK(cudaEventCreate(&p->e1));
    CK(cudaDeviceSynchronize());
}

/* The kernels at B rows; returns their sum for one decode step in microseconds. */
static double kernels(probe *p, int B) {
    double step = 0, layer = 0;
    const double norm = time_us(p, K_NORM, 0, B), swiglu = time_us(p, K_SWIGLU, 0, B);
    const double am = time_us(p, K_ARGMAX, 0, B), store = time_us(p, K_STORE, 0, B);
    for (int i = 0; i < N_PROD; i++) {
        double us = time_us(p, K_PROD, i, B);
        const double bytes = (double)p->oc[i] * p->k[i] * 2;
        const double tf = 2.0 * B * p->oc[i] * p->k[i] / (us * 1e6);
        printf("B%-4d %-22s %9.1f us  %7.0f GB/s  %6.1f TFLOP/s\n", B, PROD_NAME[i], us,
               bytes / (us * 1e3), tf);
        /* the neighbours cuBLASLt's product needs beside it */
        const bool normed = i == P_QKV || i == P_IN || i == P_HEAD;
        const double beside = (normed ? norm : 0) + (i == P_QKV ? store : 0) +
                              (i == P_IN ? swiglu : 0) + (i == P_HEAD ? am : 0);
        us += beside;
        if (B <= LB_GEMV_MAX_ROWS) { /* the engine takes the fastest way */
            int best = 1;
            double gv = INFINITY;
            for (int split = 1; split <= 8; split *= 2) {
                p->gemv = (lb_gemv_opts){.split = split};
                const double t = time_us(p, K_GEMV, i, B);
                printf("B%-4d %-10s gemv split %d %7.1f us  %7.0f GB/s\n", B, PROD_NAME[i], split,
                       t, bytes / (t * 1e3));
                if (t < gv) gv = t, best = split;
            }
            gv += beside;
            if (normed && i != P_HEAD) { /* the head's norm: a kernel before it */
                p->kv.rows = B;
                p->gemv = (lb_gemv_opts){
                    .split = best, .norm_w = p->nw, .eps = 1e-5f, .kv = i == P_QKV ? &p->kv : NULL};
                if (lb_gemv_fits(B, p->k[i], p->oc[i], p->x, p->w[i][0], NULL, LB_DT_BF16,
                                 &p->gemv)) {
                    const double t = time_us(p, K_GEMV, i, B);
                    printf("B%-4d %-10s gemv fused  %7.1f us  (split %d: norm, %s inside)\n", B,
                           PROD_NAME[i], t, best, i == P_IN ? "SwiGLU" : "RoPE and KV store");
                    if (t < gv) gv = t;
                }
            }
            if (gv < us) us = gv;
        }
        if (i == P_HEAD)
            step += us;
        else
            layer += us;
    }
    const int S = lb_paged_splits(B, p->NKV, p->n_sm);
    const double kv = (double)B * CTX * p->NKV * p->HD * 2 * 2;
    double whole = time_us(p, K_ATTN, 1, B), split = S > 1 ? time_us(p, K_ATTN, S, B) : whole;
    printf("B%-4d %-22s %9.1f us  %7.0f GB/s\n", B, "attention whole", whole, kv / (whole * 1e3));
    printf("B%-4d attention split %-3d    %9.1f us  %7.0f GB/s\n", B, S, split, kv / (split * 1e3));
    layer += split;
    printf("B%-4d %-22s %9.1f us\n", B, "rmsnorm", norm);
    printf("B%-4d %-22s %9.1f us\n", B, "rope + kv_store", store);
    printf("B%-4d %-22s %9.1f us\n", B, "swiglu", swiglu);
    printf("B%-4d %-22s %9.1f us\n", B, "argmax", am);
    step += layer * p->L;
    printf("B%-4d kernel sum: a layer %.1f us, a step %.3f ms\n", B, layer, step / 1e3);
    return step;
}

/* A prefill step of PRE_T tokens, kernel by kernel; returns its sum in milliseconds. */
static double prefill(probe *p) {
    const int T = PRE_T;
    double layer = 0;
    for (int i = 0; i < P_HEAD; i++) {
        const double us = time_us(p, K_PROD, i, T);
        printf("prefill %-17s %9.1f us  %6.1f TFLOP/s\n", PROD_NAME[i], us,
               2.0 * T * p->oc[i] * p->k[i] / (us * 1e6));
        layer += us;
    }
    const double norm = time_us(p, K_NORM, 0, T), swiglu = time_us(p, K_SWIGLU, 0, T);
    const double store = time_us(p, K_STORE, 0, T);
    const int runs = T / PROMPT, rest = PROMPT - PRE_SPLIT;
    const double dnn = p->dnn ? time_us(p, K_DNN, 0, 1) : 0;
    const double paged = time_us(p, K_PAGED_PRE, 0, rest);
    printf("prefill %-17s %9.1f us (x2 a layer)\n", "rmsnorm", norm);
    printf("prefill %-17s %9.1f us\n", "swiglu", swiglu);
    printf("prefill %-17s %9.1f us\n", "rope + kv_store", store);
    printf("prefill cuDNN attention, one prompt of %d: %.1f us (%d a step)\n", PROMPT, dnn, runs);
    printf("prefill paged attention, tokens %d..%d of a prompt: %.1f us\n", PRE_SPLIT, PROMPT - 1,
           paged);
    layer += 2 * norm + swiglu + store + runs * dnn + paged;
    const double step = layer * p->L / 1e3;
    printf("prefill kernel sum: a layer %.1f us, a step of %d tokens %.1f ms (%.0f tok/s)\n", layer,
           T, step, T / (step / 1e3));
    fflush(stdout);
    return step;
}

static void release(probe *p) {
    for (int i = 0; i < N_PROD; i++)
        for (int j = 0; j < p->copies[i]; j++)
            cudaFree(p->w[i][j]);
    void *bufs[] = {p->x,     p->y,    p->qkv,  p->att, p->h,    p->a,    p->kc,    p->vc,
                    p->scr,   p->yf,   p->rstd, p->cs,  p->nw,   p->pos,  p->seq,   p->slot,
                    p->table, p->amax, p->ws,   p->lse, p->ppos, p->pseq, p->pslot, p->dnn_ws};
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++)
        cudaFree(bufs[i]);
    lb_blas_free(p->blas);
    lb_blas_free(p->blas_big);
    lb_cudnn_attn_free(p->dnn);
    cudaStreamDestroy(p->s);
}

/* Whole engine steps at batch B: B prompts of PROMPT random ids prefilled, then decode
 * steps (the first DECODE_SKIP of them untimed: the bucket's products and graph). */
#define DECODES     48
#define DECODE_SKIP 4
static void engine_steps(lb_engine *e, int B, double kernel_ms) {
    const int V = lb_engine_config(e)->vocab_size;
    int32_t *ids = malloc((size_t)PROMPT * 4);
    int64_t *rid = malloc((size_t)B * sizeof *rid);
    lb_rng rng;
    lb_rng_seed(&rng, (uint64_t)B);
    lb_engine_request rq = {.sampling = lb_sample_default(), .max_tokens = 128, .ignore_eos = true};
    for (int b = 0; b < B; b++) {
        for (int i = 0; i < PROMPT; i++)
            ids[i] = (int32_t)lb_rng_below(&rng, (uint64_t)V);
        LB(lb_engine_submit(e, ids, PROMPT, &rq, &rid[b], &err));
    }
    const lb_engine_event *ev;
    int32_t n = 0;
    int first = 0, prefill_steps = 0;
    bool *seen = calloc((size_t)B, 1);
    int64_t t0 = now_ns();
    while (first < B) { /* until every prompt gave its first token (ids are consecutive) */
        LB(lb_engine_step(e, &ev, &n, &err));
        for (int32_t k = 0; k < n; k++)
            if (!seen[ev[k].id - rid[0]]) seen[ev[k].id - rid[0]] = true, first++;
        prefill_steps++;
    }
    free(seen);
    double prefill_ms = (double)(now_ns() - t0) / 1e6;
    double t[DECODES];
    int nt = 0;
    for (int s = 0; s < DECODES + DECODE_SKIP; s++) {
        int64_t a = now_ns();
        LB(lb_engine_step(e, &ev, &n, &err));
        if (s >= DECODE_SKIP && n == B) t[nt++] = (double)(now_ns() - a) / 1e6;
    }
    for (int b = 0; b < B; b++)
        lb_engine_cancel(e, rid[b]);
    float tf[DECODES];
    for (int i = 0; i < nt; i++)
        tf[i] = (float)t[i];
    double med = nt ? probe_median(tf, nt) : 0;
    printf("B%-4d engine: prefill %d x %d tokens in %d steps, %.1f ms (%.0f tok/s); decode step "
           "%.3f ms (median of %d), %.0f tok/s; kernel sum %.3f ms (%.0f%% of the step)\n",
           B, B, PROMPT, prefill_steps, prefill_ms, B * PROMPT / (prefill_ms / 1e3), med, nt,
           B / (med / 1e3), kernel_ms, med > 0 ? 100 * kernel_ms / med : 0);
    fflush(stdout);
    free(ids), free(rid);
}

int main(int argc, char **argv) {
    int batches[16] = {1, 8, 32, 64, 128, 256}, nb = 6;
    if (argc > 1) {
        nb = 0;
        for (int i = 1; i < argc && nb < 16; i++)
            batches[nb++] = atoi(argv[i]);
    }
    int max_b = 1;
    for (int i = 0; i < nb; i++) {
        if (batches[i] < 1 || batches[i] > 256) {
            fprintf(stderr, "engine_probe: batch %d: give 1 to 256\n", batches[i]);
            return 2;
        }
        if (batches[i] > max_b) max_b = batches[i];
    }
    lb_model_config cfg;
    LB(lb_model_config_preset("llama3.1-8b", &cfg, &err));
    struct cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    printf("%s, %d SMs; llama3.1-8b bf16, contexts of %d tokens, prompts of %d\n", prop.name,
           prop.multiProcessorCount, CTX, PROMPT);
    double sum_ms[16];
    probe p;
    setup(&p, &cfg, max_b);
    for (int i = 0; i < nb; i++) {
        sum_ms[i] = kernels(&p, batches[i]) / 1e3;
        fflush(stdout);
    }
    prefill(&p);
    release(&p);
    lb_engine_params ep = lb_engine_default_params();
    ep.max_seqs = max_b;
    lb_weights w = {.cfg = cfg, .seed = 1};
    lb_engine *e;
    LB(lb_engine_open(&e, &ep, &w, &err));
    LB(lb_engine_warmup(e, PROMPT, &err));
    for (int i = 0; i < nb; i++)
        engine_steps(e, batches[i], sum_ms[i]);
    lb_engine_close(e);
    return 0;
}
