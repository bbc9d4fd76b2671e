/* gemv.cu: products of a few rows against weights read once (gemv.cuh). */
#include "gpu/common.cuh"
#include "kernels/gemv.cuh"

#define GEMV_WARPS 8
#define GEMV_LOADS 8 /* 16-byte weight loads in flight a lane */

/* E = 16 / sizeof(T) consecutive elements as one 16-byte load / store. */
template <typename T, int E> static __device__ __forceinline__ void ld16(float f[E], const T *p) {
    const uint4 raw = *(const uint4 *)p;
    const T *e = (const T *)&raw;
#pragma unroll
    for (int j = 0; j < E; j++)
        f[j] = lb_to_f(e[j]);
}

template <typename T, int E> static __device__ __forceinline__ void st16(T *p, const float f[E]) {
    uint4 raw;
    T *e = (T *)&raw;
#pragma unroll
    for (int j = 0; j < E; j++)
        e[j] = lb_from_f<T>(f[j]);
    *(uint4 *)p = raw;
}

/* xn [M, K] = RMSNorm of x's rows with weights nw, rounded to T as the norm kernel's
 * output is (kernels/norm.cuh), by the whole block. */
template <typename T, int M>
static __device__ void norm_rows(T *xn, const T *x, const T *nw, float eps, int K,
                                 float (*red)[M]) {
    constexpr int E = 16 / sizeof(T);
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    float ss[M];
#pragma unroll
    for (int m = 0; m < M; m++)
        ss[m] = 0.0f;
    for (int c = threadIdx.x * E; c < K; c += GEMV_WARPS * 32 * E)
#pragma unroll
        for (int m = 0; m < M; m++) {
            float v[E];
            ld16<T, E>(v, x + (int64_t)m * K + c);
#pragma unroll
            for (int j = 0; j < E; j++)
                ss[m] += v[j] * v[j];
        }
#pragma unroll
    for (int m = 0; m < M; m++) {
        ss[m] = lb_warp_sum(ss[m]);
        if (lane == 0) red[warp][m] = ss[m];
    }
    __syncthreads();
    float rstd[M];
#pragma unroll
    for (int m = 0; m < M; m++) {
        float s = 0.0f;
#pragma unroll
        for (int w = 0; w < GEMV_WARPS; w++)
            s += red[w][m];
        rstd[m] = rsqrtf(s / K + eps);
    }
    for (int c = threadIdx.x * E; c < K; c += GEMV_WARPS * 32 * E) {
        float wv[E];
        ld16<T, E>(wv, nw + c);
#pragma unroll
        for (int m = 0; m < M; m++) {
            float v[E];
            ld16<T, E>(v, x + (int64_t)m * K + c);
#pragma unroll
            for (int j = 0; j < E; j++)
                v[j] = v[j] * rstd[m] * wv[j];
            st16<T, E>(xn + (int64_t)m * K + c, v);
        }
    }
}

/* The U stretches it0, it0 + split, ... (those under iters) of each of the R weight rows
 * wr (at this lane's elements) into wv. */
template <typename T, int R, int U>
static __device__ __forceinline__ void load_weights(uint4 (&wv)[R][U], const T *const *wr, int it0,
                                                    int split, int iters) {
    constexpr int E = 16 / sizeof(T);
#pragma unroll
    for (int u = 0; u < U; u++)
        if (it0 + u * split < iters)
#pragma unroll
            for (int r = 0; r < R; r++)
                wv[r][u] = __ldg((const uint4 *)(wr[r] + (int64_t)(it0 + u * split) * 32 * E));
}

/* acc[r][m] += the U stretches it0, it0 + split, ... (those under iters) of wv against
 * x's rows (xs, K wide) at this lane's elements. */
template <typename T, int M, int R, int U>
static __device__ __forceinline__ void fma_weights(float (&acc)[R][M], const uint4 (&wv)[R][U],
                                                   const T *xs, int K, int lane, int it0, int split,
                                                   int iters) {
    constexpr int E = 16 / sizeof(T);
#pragma unroll
    for (int u = 0; u < U; u++) {
        const int it = it0 + u * split;
        if (it >= iters) break;
        const int k = it * 32 * E + lane * E;
#pragma unroll
        for (int m = 0; m < M; m++) {
            const uint4 xv = *(const uint4 *)(xs + (int64_t)m * K + k);
            const T *xe = (const T *)&xv;
#pragma unroll
            for (int r = 0; r < R; r++) {
                const T *we = (const T *)&wv[r][u];
#pragma unroll
                for (int j = 0; j < E; j++)
                    acc[r][m] += lb_to_f(we[j]) * lb_to_f(xe[j]);
            }
        }
    }
}

/* The column of logical column ln: under the KV store (rot, the q and k columns, > 0)
 * logical columns 2i and 2i + 1 of a head are dimensions i and i + HD/2, a pair of the
 * rotation; the same column elsewhere. */
static __device__ __forceinline__ int64_t kv_column(int64_t ln, int rot, int HD) {
    if (ln >= rot) return ln;
    const int64_t h = ln / HD;
    const int r = (int)(ln - h * HD);
    return h * HD + r / 2 + (r & 1) * (HD / 2);
}

/* The block's columns (logical first..first + cols, their rows' values rounded to T in
 * kvv) rotated and stored as lb_paged_kv_store does: q and k rotated to each row's
 * position, y written, k and v put in the cache, for rows under kv.rows (the rest: y
 * unrotated). */
template <typename T, int M>
static __device__ void store_kv(T *y, const float (*kvv)[M], const lb_gemv_kv &kv, int64_t first,
                                int cols, int64_t n_out, int rot) {
    __syncthreads();
    const int HD = kv.head_dim, half = HD / 2, NH = kv.n_head;
    const int64_t row = (int64_t)kv.n_kv_head * HD;
    for (int e = threadIdx.x; e < cols * M; e += blockDim.x) {
        const int j = e % cols, m = e / cols;
        const int64_t ln = first + j;
        if (ln >= n_out) continue;
        const int64_t n = kv_column(ln, rot, HD);
        const bool store = m < kv.rows;
        float o = kvv[j][m];
        if (ln < rot) {
            const int64_t h = ln / HD;
            if (store) { /* as kernels/rope.cuh's rotation: (a, b) -> (a c - b s, b c + a s) */
                const float other = kvv[j ^ 1][m];
                const float *cs = kv.cs + 2 * ((int64_t)kv.pos[m] * half + (ln - h * HD) / 2);
                o = (j & 1) == 0 ? o * cs[0] - other * cs[1] : o * cs[0] + other * cs[1];
                if (h >= NH)
                    ((T *)kv.k_cache)[kv.slot[m] * row + (h - NH) * HD + (n - h * HD)] =
                        lb_from_f<T>(o);
            }
        } else if (store) {
            ((T *)kv.v_cache)[kv.slot[m] * row + (n - rot)] = lb_from_f<T>(o);
        }
        y[m * n_out + n] = lb_from_f<T>(o);
    }
}

/* R = 1: y[m, n] = x[m] . W[n] (+ res[m, n]); R = 2 (SwiGLU): y[m, n] = silu(g) u with
 * g = x[m] . W[n] and u = x[m] . W[n_out + n], each rounded to T first (as the product's
 * output would be). `split` warps of a block share a column, each taking every split-th
 * 32 E-element stretch of K; a block holds GEMV_WARPS / split columns. With KV (R = 1, Y
 * = T), the KV store after it (store_kv; a block's columns in pairs, kv_column). Launched
 * programmatically dependent (gpu/common.cuh): its first loads of weights run while the
 * kernel before it finishes. */
template <typename T, typename Y, int M, int R, bool KV>
static __global__ void __launch_bounds__(GEMV_WARPS * 32)
    gemv_kernel(Y *__restrict__ y, const T *__restrict__ x, const T *__restrict__ w,
                const T *__restrict__ res, const T *__restrict__ norm_w, float eps, int K,
                int64_t n_out, int split, lb_gemv_kv kv) {
    extern __shared__ __align__(16) unsigned char gemv_smem[];
    __shared__ float red[GEMV_WARPS][M], part[GEMV_WARPS][R * M];
    constexpr int E = 16 / sizeof(T); /* elements a 16-byte load */
    constexpr int U = GEMV_LOADS / R;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int sub = warp % split;
    const int64_t ln = (int64_t)blockIdx.x * (GEMV_WARPS / split) + warp / split;
    const int rot = KV ? (kv.n_head + kv.n_kv_head) * kv.head_dim : 0; /* rotated columns */
    const int64_t n = KV ? kv_column(ln, rot, kv.head_dim) : ln;
    const bool active = ln < n_out;
    const int iters = K / (32 * E);
    const T *wr[R];
#pragma unroll
    for (int r = 0; r < R; r++)
        wr[r] = w + (active ? n + r * n_out : 0) * K + lane * E;
    /* The stretches go in two halves, each refilled once it is summed, so that loads are
     * in flight while the other half is summed. The first half is read before the kernel
     * before this one ends (and the norm's weights asked into L1), the second right after
     * it, while x's rows come. */
    lb_pdl_trigger();
    constexpr int H = U / 2;
    uint4 wa[R][H], wb[R][H];
    if (active) load_weights<T, R, H>(wa, wr, sub, split, iters);
    if (norm_w != NULL)
        for (int c = threadIdx.x * (128 / (int)sizeof(T)); c < K;
             c += GEMV_WARPS * 32 * (128 / (int)sizeof(T)))
            asm volatile("prefetch.global.L1 [%0];" ::"l"(norm_w + c));
    lb_pdl_wait();
    if (active) load_weights<T, R, H>(wb, wr, sub + H * split, split, iters);
    const T *xs = x;
    if (norm_w != NULL) {
        T *xn = (T *)gemv_smem;
        norm_rows<T, M>(xn, x, norm_w, eps, K, red);
        __syncthreads();
        xs = xn;
    }
    float acc[R][M];
#pragma unroll
    for (int r = 0; r < R; r++)
#pragma unroll
        for (int m = 0; m < M; m++)
            acc[r][m] = 0.0f;
    if (active)
        for (int it0 = sub; it0 < iters; it0 += split * U) {
            fma_weights<T, M, R, H>(acc, wa, xs, K, lane, it0, split, iters);
            load_weights<T, R, H>(wa, wr, it0 + U * split, split, iters);
            fma_weights<T, M, R, H>(acc, wb, xs, K, lane, it0 + H * split, split, iters);
            load_weights<T, R, H>(wb, wr, it0 + (U + H) * split, split, iters);
        }
#pragma unroll
    for (int r = 0; r < R; r++)
#pragma unroll
        for (int m = 0; m < M; m++)
            acc[r][m] = lb_warp_sum(acc[r][m]);
    if (split > 1) {
        if (lane == 0)
#pragma unroll
            for (int r = 0; r < R; r++)
#pragma unroll
                for (int m = 0; m < M; m++)
                    part[warp][r * M + m] = acc[r][m];
        __syncthreads();
        if (sub == 0 && lane == 0)
            for (int s = 1; s < split; s++)
#pragma unroll
                for (int r = 0; r < R; r++)
#pragma unroll
                    for (int m = 0; m < M; m++)
                        acc[r][m] += part[warp + s][r * M + m];
    }
    if constexpr (KV) {
        __shared__ float kvv[GEMV_WARPS][M];
        if (sub == 0 && lane == 0 && active)
#pragma unroll
            for (int m = 0; m < M; m++)
                kvv[warp / split][m] = lb_to_f(lb_from_f<T>(acc[0][m]));
        store_kv<T, M>((T *)y, kvv, kv, (int64_t)blockIdx.x * (GEMV_WARPS / split),
                       GEMV_WARPS / split, n_out, rot);
        return;
    }
    if (sub != 0 || lane != 0 || n >= n_out) return;
#pragma unroll
    for (int m = 0; m < M; m++) {
        float v = acc[0][m];
        if constexpr (R == 2) {
            const float g = lb_to_f(lb_from_f<T>(v)), u = lb_to_f(lb_from_f<T>(acc[1][m]));
            v = g / (1.0f + expf(-g)) * u;
        } else if (res != NULL) {
            v += lb_to_f(res[m * n_out + n]);
        }
        y[m * n_out + n] = lb_from_f<Y>(v);
    }
}

static size_t norm_bytes(int M, int64_t K, lb_gpu_dtype dt, const lb_gemv_opts *o) {
    return o != NULL && o->norm_w != NULL ? (size_t)M * (size_t)K * lb_dtype_bytes(dt) : 0;
}

extern "C" bool lb_gemv_fits(int M, int64_t K, int64_t OC, const void *x, const void *w,
                             const void *res, lb_gpu_dtype dt, const lb_gemv_opts *o) {
    const int split = o != NULL ? o->split : 1;
    const bool swiglu = o != NULL && o->swiglu;
    const lb_gemv_kv *kv = o != NULL ? o->kv : NULL;
    return M >= 1 && M <= LB_GEMV_MAX_ROWS && K % 256 == 0 && K <= INT32_MAX &&
           (split == 1 || split == 2 || split == 4 || split == 8) && lb_aligned16(x) &&
           lb_aligned16(w) && (res == NULL || lb_aligned16(res)) &&
           (!swiglu || (OC % 2 == 0 && res == NULL)) &&
           (kv == NULL ||
            (!swiglu && res == NULL && split <= 4 && kv->k_cache && kv->v_cache && kv->cs &&
             kv->pos && kv->slot && kv->rows >= 0 && kv->rows <= M && kv->head_dim > 0 &&
             kv->head_dim % 8 == 0 && kv->n_head > 0 && kv->n_kv_head > 0 &&
             OC == (int64_t)(kv->n_head + 2 * kv->n_kv_head) * kv->head_dim)) &&
           (o == NULL || o->norm_w == NULL || lb_aligned16(o->norm_w)) &&
           norm_bytes(M, K, dt, o) <= LB_GEMV_NORM_BYTES;
}

template <typename T, typename Y, int R, bool KV>
static void launch(Y *y, const T *x, const T *w, const T *res, const T *nw, float eps, int M, int K,
                   int64_t n_out, int split, size_t smem, const lb_gemv_kv *kv, cudaStream_t s) {
    const unsigned grid = (unsigned)((n_out + GEMV_WARPS / split - 1) / (GEMV_WARPS / split));
    const lb_gemv_kv none = {0};
#define GEMV_ROWS(ROWS)                                                                            \
    case ROWS:                                                                                     \
        lb_launch_pdl(gemv_kernel<T, Y, ROWS, R, KV>, grid, GEMV_WARPS * 32, smem, s, y, x, w,     \
                      res, nw, eps, K, n_out, split, KV ? *kv : none);                             \
        break
    switch (M) {
        GEMV_ROWS(1);
        GEMV_ROWS(2);
        GEMV_ROWS(3);
        GEMV_ROWS(4);
        GEMV_ROWS(5);
        GEMV_ROWS(6);
        GEMV_ROWS(7);
        GEMV_ROWS(8);
    }
#undef GEMV_ROWS
}

extern "C" lb_status lb_gemv(void *y, lb_gpu_dtype y_type, const void *x, const void *w,
                             const void *res, int M, int64_t K, int64_t OC, const lb_gemv_opts *o,
                             lb_gpu_dtype dt, cudaStream_t s, lb_err *err) {
    if (!lb_gemv_fits(M, K, OC, x, w, res, dt, o))
        return lb_fail(err, LB_ERR_UNSUPPORTED,
                       "gemv runs 1 to %d rows, K a multiple of 256, 16-byte aligned operands, "
                       "a split of 1, 2, 4 or 8 warps, normalised rows of at most %d bytes, "
                       "SwiGLU over an even OC without a residual, the KV store without SwiGLU "
                       "or residual at a split of at most 4 over qkv columns (asked: %d rows, K "
                       "%lld, OC %lld)",
                       LB_GEMV_MAX_ROWS, LB_GEMV_NORM_BYTES, M, (long long)K, (long long)OC);
    const int split = o != NULL ? o->split : 1;
    const bool swiglu = o != NULL && o->swiglu;
    const void *nw = o != NULL ? o->norm_w : NULL;
    const float eps = o != NULL ? o->eps : 0.0f;
    const lb_gemv_kv *kv = o != NULL ? o->kv : NULL;
    const size_t smem = norm_bytes(M, K, dt, o);
    if (kv != NULL && y_type == dt)
        LB_DISPATCH_DTYPE(dt, T,
                          launch<T, T, 1, true>((T *)y, (const T *)x, (const T *)w, (const T *)NULL,
                                                (const T *)nw, eps, M, (int)K, OC, split, smem, kv,
                                                s));
    else if (kv == NULL && swiglu && y_type == dt)
        LB_DISPATCH_DTYPE(dt, T,
                          launch<T, T, 2, false>((T *)y, (const T *)x, (const T *)w,
                                                 (const T *)NULL, (const T *)nw, eps, M, (int)K,
                                                 OC / 2, split, smem, NULL, s));
    else if (kv == NULL && !swiglu && y_type == LB_DT_F32)
        LB_DISPATCH_DTYPE(dt, T,
                          launch<T, float, 1, false>((float *)y, (const T *)x, (const T *)w,
                                                     (const T *)res, (const T *)nw, eps, M, (int)K,
                                                     OC, split, smem, NULL, s));
    else if (kv == NULL && !swiglu && y_type == dt)
        LB_DISPATCH_DTYPE(dt, T,
                          launch<T, T, 1, false>((T *)y, (const T *)x, (const T *)w, (const T *)res,
                                                 (const T *)nw, eps, M, (int)K, OC, split, smem,
                                                 NULL, s));
    else
        return lb_fail(err, LB_ERR_UNSUPPORTED,
                       "gemv writes fp32 or the inputs' type (SwiGLU and the KV store: the "
                       "inputs' type)");
    LB_CUDA_LAUNCH_TRY(err);
    return LB_OK;
}
