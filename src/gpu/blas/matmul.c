/* matmul.c: the cuBLASLt wrapper (gpu/blas/matmul.h).
 *
 * Row-major D[m,n] is column-major D^T[n,m] = B'^T A'^T, so every problem becomes a
 * column-major product with the operands swapped: cuBLASLt's "A" is our B (rows n), its
 * "B" is our A. A prepared problem keeps its descriptors and algorithm in a small table
 * searched linearly (a training step has a few dozen distinct shapes).
 *
 * Algorithm choice: the heuristic's first answer is often not the fastest (on the H200 it
 * picked an older kernel for the GELU-backward epilogue and for fp32), so with tuning on,
 * the first run of a problem asks for up to TUNE_CANDIDATES algorithms (the heuristic's
 * list, then its list without split-k for those not in the first) and times each on
 * the problem's own buffers (one untimed run, then TUNE_REPS runs between two events),
 * keeping the fastest. The winner can differ between processes, so results may differ
 * in rounding between runs; tuning off takes the heuristic's first answer every time.
 * A problem whose C is D itself with beta != 0 is not tuned: repeated runs would
 * accumulate into D.
 *
 * 3xTF32: each operand is split into a scratch copy that holds its two parts side by side
 * along k (rows padded to 16 bytes): A as [A_hi | A_lo], B as [B_lo ; B_hi]. The first
 * TF32 product, A_hi B_hi, carries the caller's beta, C and bias; the second, over 2k,
 * is [A_hi | A_lo] [B_lo ; B_hi] = A_hi B_lo + A_lo B_hi added into D (beta 1, C = D):
 * the three terms in two products, so D is read and written once more, not twice. The
 * second is tuned before the first runs (with beta 0: D is free then) unless the caller
 * accumulates into D, when it keeps the heuristic's choice.
 *
 * int8: both operands are cut into LB_SLICES digit planes (gpu/blas/slices.h), A's
 * side by side along k in ascending order, B's in descending order, so that diagonal t
 * (the digit pairs u + v = t + 1) is one int8 product over the first t planes of A and
 * the last t of B: s products over k, 2k, ... s k into int32 planes, then one kernel sums
 * them exactly, rounds once and applies alpha, beta, C and the bias. When the planes of
 * all of D's rows would pass INT8_PLANES_MAX_BYTES, D is done in rounds of rows. */
#include "gpu/blas/matmul.h"

#include <string.h>

static const char *const MODE_NAMES[] = {"ieee", "tf32", "3xtf32", "int8", "auto"};
#define N_MODES (int)(sizeof MODE_NAMES / sizeof MODE_NAMES[0])

const char *lb_blas_fp32_mode_name(lb_blas_fp32_mode m) {
    return (unsigned)m < (unsigned)N_MODES ? MODE_NAMES[m] : "?";
}

bool lb_blas_fp32_mode_parse(const char *s, lb_blas_fp32_mode *out) {
    for (int i = 0; s != NULL && i < N_MODES; i++)
        if (strcmp(s, MODE_NAMES[i]) == 0) {
            *out = (lb_blas_fp32_mode)i;
            return true;
        }
    return false;
}

lb_blas_params lb_blas_default_params(void) {
    return (lb_blas_params){.workspace = NULL,
                            .workspace_bytes = 0,
                            .fp32_mode = LB_BLAS_FP32_IEEE,
                            .tune = true,
                            .split_scratch = NULL,
                            .split_scratch_bytes = 0};
}

#ifdef LB_HAVE_CUDA

#include <cublasLt.h>
#include <cuda_runtime.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "gpu/blas/slices.cuh"
#include "gpu/blas/slices.h"
#include "gpu/blas/tf32.cuh"
#include "gpu/check.h"
#include "gpu/timing.h"

#define MAX_CACHED            128
#define TUNE_CANDIDATES       16
#define TUNE_REPS             5
#define INT8_PLANES_MAX_BYTES ((size_t)1 << 30)

/* how a problem's products run: its own types, TF32 tensor cores, or int8 digit planes */
enum { COMPUTE_PLAIN = 0, COMPUTE_TF32, COMPUTE_INT8 };

typedef struct {
    int64_t m, n, k, lda, ldb, ldd;
    int trans_a, trans_b, ab_type, d_type, epilogue, has_c, align;
    int compute; /* COMPUTE_*; COMPUTE_INT8 ignores ab_type and d_type (int8 -> int32) */
} key;

typedef struct {
    key k;
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t la, lb, lc, ld;
    cublasLtMatmulAlgo_t algo;
    cublasLtMatmulAlgo_t cand[TUNE_CANDIDATES]; /* heuristic order; cand[0] is its choice */
    int n_cand;
    bool tuned; /* algo is final */
} prepared;

/* AUTO's decision for one fp32 problem (keyed as its IEEE product) */
typedef struct {
    key k;
    bool int8;
} fp32_choice;

struct lb_blas {
    cublasLtHandle_t lt;
    lb_blas_params p;
    prepared cache[MAX_CACHED];
    int n_cached;
    fp32_choice choices[MAX_CACHED];
    int n_choices;
};

static cudaDataType_t cuda_type(lb_gpu_dtype t) {
    return t == LB_DT_F32 ? CUDA_R_32F : t == LB_DT_F16 ? CUDA_R_16F : CUDA_R_16BF;
}

static int alignment_of(const void *p) {
    uintptr_t v = (uintptr_t)p;
    int a = 256;
    while (a > 1 && (v % (uintptr_t)a) != 0)
        a /= 2;
    return a;
}

lb_status lb_blas_init(lb_blas **out, const lb_blas_params *p, lb_err *err) {
    *out = NULL;
    lb_blas *h = calloc(1, sizeof *h);
    if (h == NULL) return lb_fail(err, LB_ERR_NOMEM, "no host memory for the cuBLASLt handle");
    cublasStatus_t s = cublasLtCreate(&h->lt);
    if (s != CUBLAS_STATUS_SUCCESS) {
        free(h);
        return lb_gpu_fail_at(err, "cuBLASLt", (int)s, cublasLtGetStatusString(s), "cublasLtCreate",
                              __func__, __FILE__, __LINE__);
    }
    h->p = *p;
    *out = h;
    return LB_OK;
}

static void release(prepared *p) {
    if (p->op) cublasLtMatmulDescDestroy(p->op);
    if (p->la) cublasLtMatrixLayoutDestroy(p->la);
    if (p->lb) cublasLtMatrixLayoutDestroy(p->lb);
    if (p->lc) cublasLtMatrixLayoutDestroy(p->lc);
    if (p->ld) cublasLtMatrixLayoutDestroy(p->ld);
    memset(p, 0, sizeof *p);
}

void lb_blas_free(lb_blas *h) {
    if (h == NULL) return;
    for (int i = 0; i < h->n_cached; i++)
        release(&h->cache[i]);
    cublasLtDestroy(h->lt);
    free(h);
}

int lb_blas_cached(const lb_blas *h) {
    return h ? h->n_cached : 0;
}

static cublasLtEpilogue_t lt_epilogue(lb_gpu_epilogue e) {
    switch (e) {
    case LB_EPI_NONE: return CUBLASLT_EPILOGUE_DEFAULT;
    case LB_EPI_BIAS: return CUBLASLT_EPILOGUE_BIAS;
    case LB_EPI_GELU_AUX_BIAS: return CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
    case LB_EPI_DGELU: return CUBLASLT_EPILOGUE_DGELU;
    }
    return CUBLASLT_EPILOGUE_DEFAULT;
}

/* Builds descriptors and asks the heuristic for its best algorithms (one without tuning). */
static lb_status prepare(lb_blas *h, const key *k, prepared *p, lb_err *err) {
    memset(p, 0, sizeof *p);
    p->k = *k;
    bool int8 = k->compute == COMPUTE_INT8;
    cublasComputeType_t ct = int8                         ? CUBLAS_COMPUTE_32I
                             : k->compute == COMPUTE_TF32 ? CUBLAS_COMPUTE_32F_FAST_TF32
                                                          : CUBLAS_COMPUTE_32F;
    LB_CUBLAS_TRY(err, cublasLtMatmulDescCreate(&p->op, ct, int8 ? CUDA_R_32I : CUDA_R_32F));
    /* column-major: op "A" = our B, op "B" = our A */
    cublasOperation_t ta = k->trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasOperation_t tb = k->trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
    LB_CUBLAS_TRY(
        err, cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
    LB_CUBLAS_TRY(
        err, cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
    cublasLtEpilogue_t epi = lt_epilogue((lb_gpu_epilogue)k->epilogue);
    LB_CUBLAS_TRY(err, cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi,
                                                      sizeof epi));
    if (k->epilogue == LB_EPI_GELU_AUX_BIAS || k->epilogue == LB_EPI_DGELU) {
        int64_t ld_aux = k->ldd;
        LB_CUBLAS_TRY(err,
                      cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD,
                                                     &ld_aux, sizeof ld_aux));
    }
    cudaDataType_t abt = int8 ? CUDA_R_8I : cuda_type((lb_gpu_dtype)k->ab_type);
    cudaDataType_t dt = int8 ? CUDA_R_32I : cuda_type((lb_gpu_dtype)k->d_type);
    /* our B' as stored: [k,n] row-major = col-major n x k (ld n) when !trans_b;
     * [n,k] row-major = col-major k x n (ld k) when trans_b */
    LB_CUBLAS_TRY(err, cublasLtMatrixLayoutCreate(&p->la, abt, k->trans_b ? k->k : k->n,
                                                  k->trans_b ? k->n : k->k, k->ldb));
    LB_CUBLAS_TRY(err, cublasLtMatrixLayoutCreate(&p->lb, abt, k->trans_a ? k->m : k->k,
                                                  k->trans_a ? k->k : k->m, k->lda));
    LB_CUBLAS_TRY(err, cublasLtMatrixLayoutCreate(&p->lc, dt, k->n, k->m, k->ldd));
    LB_CUBLAS_TRY(err, cublasLtMatrixLayoutCreate(&p->ld, dt, k->n, k->m, k->ldd));

    cublasLtMatmulPreference_t pref;
    LB_CUBLAS_TRY(err, cublasLtMatmulPreferenceCreate(&pref));
    uint64_t ws = h->p.workspace_bytes;
    uint32_t al = (uint32_t)k->align;
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws,
                                         sizeof ws);
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al,
                                         sizeof al);
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al,
                                         sizeof al);
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al,
                                         sizeof al);
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al,
                                         sizeof al);
    cublasLtMatmulHeuristicResult_t res[TUNE_CANDIDATES];
    int found = 0;
    cublasStatus_t s =
        cublasLtMatmulAlgoGetHeuristic(h->lt, p->op, p->la, p->lb, p->lc, p->ld, pref,
                                       h->p.tune ? TUNE_CANDIDATES : 1, res, &found);
    if (s == CUBLAS_STATUS_SUCCESS && h->p.tune && found < TUNE_CANDIDATES) {
        /* the heuristic answers at most 8 here, often with split-k variants among them:
         * ask again without split-k and time the new ones too */
        uint32_t none = CUBLASLT_REDUCTION_SCHEME_NONE;
        cublasLtMatmulHeuristicResult_t more[TUNE_CANDIDATES];
        int n_more = 0;
        if (cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK,
                                                 &none, sizeof none) == CUBLAS_STATUS_SUCCESS &&
            cublasLtMatmulAlgoGetHeuristic(h->lt, p->op, p->la, p->lb, p->lc, p->ld, pref,
                                           TUNE_CANDIDATES, more, &n_more) == CUBLAS_STATUS_SUCCESS)
            for (int i = 0; i < n_more && found < TUNE_CANDIDATES; i++) {
                bool seen = false;
                for (int j = 0; j < found && !seen; j++)
                    seen = memcmp(&res[j].algo, &more[i].algo, sizeof more[i].algo) == 0;
                if (!seen) res[found++] = more[i];
            }
    }
    cublasLtMatmulPreferenceDestroy(pref);
    if (s != CUBLAS_STATUS_SUCCESS || found == 0) {
        lb_status st =
            lb_fail(err, LB_ERR_UNSUPPORTED,
                    "cuBLASLt has no algorithm for %s x %s -> %s, m=%lld n=%lld k=%lld, "
                    "epilogue %d (status %s)",
                    int8 ? "int8" : lb_dtype_name((lb_gpu_dtype)k->ab_type),
                    int8 ? "int8" : lb_dtype_name((lb_gpu_dtype)k->ab_type),
                    int8 ? "int32" : lb_dtype_name((lb_gpu_dtype)k->d_type), (long long)k->m,
                    (long long)k->n, (long long)k->k, k->epilogue, cublasLtGetStatusString(s));
        release(p);
        return st;
    }
    for (int i = 0; i < found; i++)
        p->cand[i] = res[i].algo;
    p->n_cand = found;
    p->algo = res[0].algo;
    p->tuned = found == 1;
    return LB_OK;
}

/* Times every candidate of p on g's buffers and keeps the fastest in p->algo. A candidate
 * that fails to run is skipped; the heuristic's choice stays if none beats it. */
static lb_status tune(lb_blas *h, prepared *p, const lb_blas_gemm *g, const void *alpha,
                      const void *beta, const void *c, cudaStream_t stream, lb_err *err) {
    cudaEvent_t ev[2] = {NULL, NULL};
    lb_status st = LB_OK;
    if (cudaEventCreate(&ev[0]) != cudaSuccess || cudaEventCreate(&ev[1]) != cudaSuccess)
        st =
            lb_fail(err, LB_ERR_DEVICE, "could not create CUDA events to time cuBLASLt algorithms");
    float best_ms = 0.0f, first_ms = 0.0f;
    int best = -1;
    for (int i = 0; st == LB_OK && i < p->n_cand; i++) {
        bool ok = true;
        for (int r = 0; ok && r <= TUNE_REPS; r++) {
            if (r == 1) ok = cudaEventRecord(ev[0], stream) == cudaSuccess;
            ok = ok && cublasLtMatmul(h->lt, p->op, alpha, g->b, p->la, g->a, p->lb, beta, c, p->lc,
                                      g->d, p->ld, &p->cand[i], h->p.workspace,
                                      h->p.workspace_bytes, stream) == CUBLAS_STATUS_SUCCESS;
        }
        float ms = 0.0f;
        ok = ok && cudaEventRecord(ev[1], stream) == cudaSuccess &&
             cudaEventSynchronize(ev[1]) == cudaSuccess &&
             cudaEventElapsedTime(&ms, ev[0], ev[1]) == cudaSuccess;
        if (!ok) {
            /* a candidate that cannot run here is skipped; a sticky fault is not */
            cudaError_t e = cudaStreamSynchronize(stream);
            if (e != cudaSuccess)
                st = lb_gpu_fail_at(err, "CUDA", (int)e, cudaGetErrorString(e),
                                    "timing cuBLASLt candidates", __func__, __FILE__, __LINE__);
            continue;
        }
        if (i == 0) first_ms = ms;
        if (best < 0 || ms < best_ms) best = i, best_ms = ms;
    }
    if (ev[0]) cudaEventDestroy(ev[0]);
    if (ev[1]) cudaEventDestroy(ev[1]);
    if (st != LB_OK) return st;
    if (best >= 0) p->algo = p->cand[best];
    p->tuned = true;
    LB_DEBUG("cuBLASLt m=%lld n=%lld k=%lld %s epilogue %d: candidate %d of %d, %.1f us "
             "(heuristic's first %.1f us)",
             (long long)g->m, (long long)g->n, (long long)g->k,
             p->k.compute == COMPUTE_INT8 ? "int8" : lb_dtype_name(g->ab_type), (int)g->epilogue,
             best, p->n_cand, 1e3 * best_ms / TUNE_REPS, 1e3 * first_ms / TUNE_REPS);
    return LB_OK;
}

/* g's cache key with the given compute type */
static key key_of(const lb_blas_gemm *g, int compute) {
    key k;
    memset(&k, 0, sizeof k);
    k.m = g->m, k.n = g->n, k.k = g->k;
    k.lda = g->lda, k.ldb = g->ldb, k.ldd = g->ldd;
    k.trans_a = g->trans_a, k.trans_b = g->trans_b;
    k.ab_type = g->ab_type, k.d_type = g->d_type, k.epilogue = g->epilogue;
    k.has_c = g->c != NULL;
    k.compute = compute;
    int al = alignment_of(g->a);
    int al2 = alignment_of(g->b), al3 = alignment_of(g->d);
    if (al2 < al) al = al2;
    if (al3 < al) al = al3;
    if (g->c != NULL && alignment_of(g->c) < al) al = alignment_of(g->c);
    k.align = al;
    return k;
}

/* The prepared problem for g with the given compute type (found or made). */
static lb_status lookup(lb_blas *h, const lb_blas_gemm *g, int compute, prepared **out,
                        lb_err *err) {
    key k = key_of(g, compute);
    for (int i = 0; i < h->n_cached; i++)
        if (memcmp(&h->cache[i].k, &k, sizeof k) == 0) {
            *out = &h->cache[i];
            return LB_OK;
        }
    if (h->n_cached == MAX_CACHED) {
        release(&h->cache[MAX_CACHED - 1]);
        h->n_cached--;
    }
    LB_TRY(prepare(h, &k, &h->cache[h->n_cached], err));
    *out = &h->cache[h->n_cached++];
    return LB_OK;
}

/* One cuBLASLt product: g exactly as given, with the given compute type (COMPUTE_INT8:
 * alpha 1, no C). */
static lb_status run_one(lb_blas *h, const lb_blas_gemm *g, int compute, cudaStream_t stream,
                         lb_err *err) {
    static const int32_t one = 1, zero = 0;
    prepared *p = NULL;
    LB_TRY(lookup(h, g, compute, &p, err));
    if (g->epilogue == LB_EPI_BIAS || g->epilogue == LB_EPI_GELU_AUX_BIAS)
        LB_CUBLAS_TRY(err, cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                                                          &g->bias, sizeof g->bias));
    if (g->epilogue == LB_EPI_GELU_AUX_BIAS || g->epilogue == LB_EPI_DGELU)
        LB_CUBLAS_TRY(err, cublasLtMatmulDescSetAttribute(p->op,
                                                          CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER,
                                                          &g->aux, sizeof g->aux));
    float beta = g->c != NULL ? g->beta : 0.0f;
    const void *c = g->c != NULL ? g->c : g->d;
    bool int8 = compute == COMPUTE_INT8;
    const void *alpha_p = int8 ? (const void *)&one : (const void *)&g->alpha;
    const void *beta_p = int8 ? (const void *)&zero : (const void *)&beta;
    if (!p->tuned) {
        if (c == g->d && beta != 0.0f)
            p->tuned = true; /* in place: keep the heuristic's */
        else
            LB_TRY(tune(h, p, g, alpha_p, beta_p, c, stream, err));
    }
    LB_CUBLAS_TRY(err, cublasLtMatmul(h->lt, p->op, alpha_p, g->b, p->la, g->a, p->lb, beta_p, c,
                                      p->lc, g->d, p->ld, &p->algo, h->p.workspace,
                                      h->p.workspace_bytes, stream));
    return LB_OK;
}

static int64_t pad4(int64_t n) {
    return (n + 3) / 4 * 4;
}
static int64_t pad16(int64_t n) {
    return (n + 15) / 16 * 16;
}
static size_t round256(size_t bytes) {
    return (bytes + 255) / 256 * 256;
}
static size_t piece(int64_t rows, int64_t ld) {
    return round256((size_t)rows * (size_t)ld * 4);
}

/* Bytes of one operand's split: `other` is its dimension besides k. Along k the pair sits
 * side by side ([other, 2k], rows padded) or stacked ([2k, other]); the larger bounds both. */
static size_t pair_bytes(int64_t other, int64_t k) {
    size_t side = piece(other, pad4(2 * k)), stacked = piece(2 * k, pad4(other));
    return side > stacked ? side : stacked;
}

/* Rows of D one round of int8 products covers: all of them unless their planes would pass
 * INT8_PLANES_MAX_BYTES, else equal rounds of a multiple of 16 rows. */
static int64_t int8_rows(int64_t m, int64_t n) {
    size_t row = (size_t)LB_SLICES * (size_t)n * 4;
    int64_t rounds =
        (int64_t)(((size_t)m * row + INT8_PLANES_MAX_BYTES - 1) / INT8_PLANES_MAX_BYTES);
    return rounds <= 1 ? m : pad16((m + rounds - 1) / rounds);
}

/* the int8 scratch, in order: A's planes, B's planes, the rows' amax, D's int32 planes */
static size_t int8_bytes(int64_t m, int64_t n, int64_t k, size_t *off_b, size_t *off_amax,
                         size_t *off_planes) {
    size_t s = LB_SLICES, kp = (size_t)pad16(k);
    *off_b = round256((size_t)m * s * kp);
    *off_amax = *off_b + round256((size_t)n * s * kp);
    *off_planes = *off_amax + round256((size_t)(m + n) * 4);
    return *off_planes + s * (size_t)int8_rows(m, n) * (size_t)n * 4;
}

size_t lb_blas_gemm_scratch_bytes(lb_blas_fp32_mode mode, int64_t m, int64_t n, int64_t k) {
    size_t ob, oa, op;
    if (mode == LB_BLAS_FP32_3XTF32) return pair_bytes(m, k) + pair_bytes(n, k);
    if (mode == LB_BLAS_FP32_INT8 || mode == LB_BLAS_FP32_AUTO)
        return int8_bytes(m, n, k, &ob, &oa, &op);
    return 0;
}

static lb_status scratch_short(const lb_blas *h, const lb_blas_gemm *g, size_t need, lb_err *err) {
    return lb_fail(err, LB_ERR_NOMEM,
                   "the %s form of an fp32 product m=%lld n=%lld k=%lld needs %.1f MiB of "
                   "scratch; the cuBLASLt handle was given %.1f MiB",
                   lb_blas_fp32_mode_name(h->p.fp32_mode), (long long)g->m, (long long)g->n,
                   (long long)g->k, (double)need / 1048576.0,
                   (double)h->p.split_scratch_bytes / 1048576.0);
}

/* Splits operand src (k x other values; k_in_cols: stored [other, k], else [k, other]) into
 * dst as the pair (first, second) concatenated along k: side by side in each row when k
 * runs along the columns, one block of k rows after the other when it runs along the
 * rows. first is hi when hi_first, else lo. Sets the pair's row stride and its halves. */
static lb_status split_pair(float *dst, const float *src, int64_t ld_src, bool k_in_cols,
                            int64_t other, int64_t k, bool hi_first, int64_t *ld, float **first,
                            float **second, cudaStream_t stream, lb_err *err) {
    *ld = k_in_cols ? pad4(2 * k) : pad4(other);
    *first = dst;
    *second = dst + (k_in_cols ? k : k * *ld);
    float *hi = hi_first ? *first : *second, *lo = hi_first ? *second : *first;
    return lb_gpu_tf32_split(hi, lo, *ld, src, ld_src, k_in_cols ? other : k, k_in_cols ? k : other,
                             stream, err);
}

/* g as D = A_hi B_hi (caller's beta, C, bias), then D += [A_hi | A_lo] [B_lo ; B_hi]: the
 * two correction terms as one TF32 product over 2k (see the file comment). */
static lb_status run_split(lb_blas *h, const lb_blas_gemm *g, cudaStream_t stream, lb_err *err) {
    size_t sa = pair_bytes(g->m, g->k), need = sa + pair_bytes(g->n, g->k);
    if (need > h->p.split_scratch_bytes) return scratch_short(h, g, need, err);
    char *base = h->p.split_scratch;
    int64_t lda, ldb;
    float *a_hi, *a_lo, *b_lo, *b_hi;
    LB_TRY(split_pair((float *)base, g->a, g->lda, !g->trans_a, g->m, g->k, true, &lda, &a_hi,
                      &a_lo, stream, err));
    LB_TRY(split_pair((float *)(base + sa), g->b, g->ldb, g->trans_b, g->n, g->k, false, &ldb,
                      &b_lo, &b_hi, stream, err));
    lb_blas_gemm big = *g, corr = *g;
    big.a = a_hi, big.lda = lda, big.b = b_hi, big.ldb = ldb;
    corr.a = a_hi, corr.lda = lda, corr.b = b_lo, corr.ldb = ldb, corr.k = 2 * g->k;
    corr.c = g->d, corr.beta = 1.0f;
    corr.epilogue = LB_EPI_NONE, corr.bias = NULL, corr.aux = NULL;
    /* The correction runs in place: tune it now, while D holds nothing needed, unless the
     * caller accumulates into D. */
    prepared *p = NULL;
    LB_TRY(lookup(h, &corr, COMPUTE_TF32, &p, err));
    if (!p->tuned) {
        static const float zero = 0.0f;
        if (g->c == g->d && g->beta != 0.0f)
            p->tuned = true;
        else
            LB_TRY(tune(h, p, &corr, &corr.alpha, &zero, g->d, stream, err));
    }
    LB_TRY(run_one(h, &big, COMPUTE_TF32, stream, err));
    return run_one(h, &corr, COMPUTE_TF32, stream, err);
}

/* g through int8 digit planes (see the file comment). */
static lb_status run_int8(lb_blas *h, const lb_blas_gemm *g, cudaStream_t stream, lb_err *err) {
    size_t off_b, off_amax, off_planes;
    size_t need = int8_bytes(g->m, g->n, g->k, &off_b, &off_amax, &off_planes);
    if (need > h->p.split_scratch_bytes) return scratch_short(h, g, need, err);
    const int s = LB_SLICES;
    const int64_t kp = pad16(g->k), ld = s * kp, mc = int8_rows(g->m, g->n);
    char *base = h->p.split_scratch;
    int8_t *sa = (int8_t *)base, *sb = (int8_t *)(base + off_b);
    uint32_t *amax_a = (uint32_t *)(base + off_amax), *amax_b = amax_a + g->m;
    int32_t *planes = (int32_t *)(base + off_planes);
    LB_CUDA_TRY(err, cudaMemsetAsync(amax_a, 0, (size_t)(g->m + g->n) * 4, stream));
    LB_TRY(lb_gpu_slices_cut(sa, amax_a, g->a, g->lda, !g->trans_a, g->m, g->k, kp, false, stream,
                             err));
    LB_TRY(
        lb_gpu_slices_cut(sb, amax_b, g->b, g->ldb, g->trans_b, g->n, g->k, kp, true, stream, err));
    const float *bias = g->epilogue == LB_EPI_BIAS ? (const float *)g->bias : NULL;
    for (int64_t i0 = 0; i0 < g->m; i0 += mc) {
        int64_t rows = g->m - i0 < mc ? g->m - i0 : mc;
        for (int t = 1; t <= s; t++) {
            lb_blas_gemm p = {.m = rows,
                              .n = g->n,
                              .k = t * kp,
                              .a = sa + i0 * ld,
                              .lda = ld,
                              .b = sb + (s - t) * kp,
                              .ldb = ld,
                              .trans_b = true,
                              .d = planes + (size_t)(t - 1) * (size_t)rows * (size_t)g->n,
                              .ldd = g->n,
                              .alpha = 1.0f};
            LB_TRY(run_one(h, &p, COMPUTE_INT8, stream, err));
        }
        float *d = (float *)g->d + i0 * g->ldd;
        const float *c = g->c != NULL ? (const float *)g->c + i0 * g->ldd : NULL;
        LB_TRY(lb_gpu_slices_combine(d, g->ldd, planes, amax_a + i0, amax_b, rows, g->n, g->alpha,
                                     c, g->beta, bias, stream, err));
    }
    return LB_OK;
}

/* one run of g one way, IEEE or INT8 (time_fp32's lb_gpu_timed_run) */
typedef struct {
    lb_blas *h;
    const lb_blas_gemm *g;
    bool int8;
    cudaStream_t stream;
} fp32_run;

static lb_status run_fp32(void *ctx, lb_err *err) {
    fp32_run *r = ctx;
    return r->int8 ? run_int8(r->h, r->g, r->stream, err)
                   : run_one(r->h, r->g, COMPUTE_PLAIN, r->stream, err);
}

/* Milliseconds a run of g takes one way (gpu/timing.h: the first run prepares and tunes).
 * D is written each time. */
static lb_status time_fp32(lb_blas *h, const lb_blas_gemm *g, bool int8, cudaStream_t stream,
                           float *ms, lb_err *err) {
    fp32_run r = {h, g, int8, stream};
    return lb_gpu_time_runs(stream, TUNE_REPS, run_fp32, &r, ms, err);
}

/* AUTO: g the way its first run found faster (see matmul.h). */
static lb_status run_auto(lb_blas *h, const lb_blas_gemm *g, cudaStream_t stream, lb_err *err) {
    key k = key_of(g, COMPUTE_PLAIN);
    fp32_choice *c = NULL;
    for (int i = 0; i < h->n_choices && c == NULL; i++)
        if (memcmp(&h->choices[i].k, &k, sizeof k) == 0) c = &h->choices[i];
    if (c == NULL) {
        size_t ob, oa, op;
        bool in_place = g->c != NULL && g->c == g->d && g->beta != 0.0f;
        bool fits = int8_bytes(g->m, g->n, g->k, &ob, &oa, &op) <= h->p.split_scratch_bytes;
        bool int8 = false;
        if (h->p.tune && !in_place && fits) {
            float ieee_ms, int8_ms;
            LB_TRY(time_fp32(h, g, false, stream, &ieee_ms, err));
            LB_TRY(time_fp32(h, g, true, stream, &int8_ms, err));
            int8 = int8_ms < ieee_ms;
            LB_DEBUG("fp32 product m=%lld n=%lld k=%lld: IEEE %.1f us, int8 planes %.1f us: %s",
                     (long long)g->m, (long long)g->n, (long long)g->k, 1e3 * ieee_ms,
                     1e3 * int8_ms, int8 ? "int8" : "IEEE");
        }
        if (h->n_choices == MAX_CACHED) h->n_choices--;
        c = &h->choices[h->n_choices++];
        c->k = k, c->int8 = int8;
    }
    return c->int8 ? run_int8(h, g, stream, err) : run_one(h, g, COMPUTE_PLAIN, stream, err);
}

lb_status lb_blas_gemm_run(lb_blas *h, const lb_blas_gemm *g, void *stream, lb_err *err) {
    cudaStream_t s = (cudaStream_t)stream;
    if (g->ab_type != LB_DT_F32 || h->p.fp32_mode == LB_BLAS_FP32_IEEE)
        return run_one(h, g, COMPUTE_PLAIN, s, err);
    if (h->p.fp32_mode == LB_BLAS_FP32_TF32) return run_one(h, g, COMPUTE_TF32, s, err);
    if (g->epilogue == LB_EPI_GELU_AUX_BIAS || g->epilogue == LB_EPI_DGELU)
        return run_one(h, g, COMPUTE_PLAIN, s, err); /* not split: plain fp32 */
    if (h->p.fp32_mode == LB_BLAS_FP32_INT8) return run_int8(h, g, s, err);
    if (h->p.fp32_mode == LB_BLAS_FP32_AUTO) return run_auto(h, g, s, err);
    return run_split(h, g, s, err);
}

#else /* no CUDA */

lb_status lb_blas_init(lb_blas **out, const lb_blas_params *p, lb_err *err) {
    (void)p;
    *out = NULL;
    return lb_fail(err, LB_ERR_UNSUPPORTED, "this llmbench was built without CUDA");
}
void lb_blas_free(lb_blas *h) {
    (void)h;
}
lb_status lb_blas_gemm_run(lb_blas *h, const lb_blas_gemm *g, void *stream, lb_err *err) {
    (void)h, (void)g, (void)stream;
    return lb_fail(err, LB_ERR_UNSUPPORTED, "this llmbench was built without CUDA");
}
int lb_blas_cached(const lb_blas *h) {
    (void)h;
    return 0;
}
size_t lb_blas_gemm_scratch_bytes(lb_blas_fp32_mode mode, int64_t m, int64_t n, int64_t k) {
    (void)mode, (void)m, (void)n, (void)k;
    return 0;
}

#endif
