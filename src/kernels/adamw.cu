/* adamw.cu: optimizer kernels (adamw.cuh). Every thread reads the step's global state
 * (norm, scale, step) from device memory, so the host never waits for the norm. Both
 * passes walk the parameters four at a time with the segment table beside them (weight
 * decay). The gradient runs' pack gives each run a row of blocks (blockIdx.y), so a block
 * never looks its run up. */
#include "gpu/common.cuh"
#include "kernels/adamw.cuh"

/* A thread's place in the segment table. Grid-stride loops only move forward, so one
 * binary search finds a thread's first element and later lookups scan forward a little:
 * no element's loads wait on a chain of table reads. */
struct seg_walk {
    const int64_t *start;
    const int32_t *flags;
    int n_seg;
    int64_t n;
    bool dense16; /* lb_gpu_segments.dense16 */
    int lo;       /* segment of the element last looked up, -1 before the first */

    __device__ void seek(int64_t e) {
        if (lo < 0) { /* last segment whose start <= e */
            int hi = n_seg - 1;
            lo = 0;
            while (lo < hi) {
                int mid = (lo + hi + 1) >> 1;
                if (start[mid] <= e)
                    lo = mid;
                else
                    hi = mid - 1;
            }
        }
        while (lo + 1 < n_seg && start[lo + 1] <= e)
            lo++;
    }
    __device__ int64_t end() const { return lo + 1 < n_seg ? start[lo + 1] : n; }
    /* whether the gradients are 16-bit */
    template <typename T> __device__ bool packed() const { return sizeof(T) == 2 && dense16; }
};

/* Gradient of element e: fp32, or a T of a 16-bit array. */
template <typename T>
__device__ __forceinline__ float grad_at(const void *grads, const seg_walk &w, int64_t e) {
    if (w.packed<T>()) return lb_to_f(((const T *)grads)[e]);
    return ((const float *)grads)[e];
}

/* The gradients and segment flags of the four parameters from e0 (none past n: gradient
 * and flags 0): one 16- or 8-byte load when the four share a segment, else one by one. */
template <typename T>
__device__ __forceinline__ void grad4(float g[4], int fl[4], const void *grads, seg_walk &w,
                                      int64_t e0) {
    w.seek(e0);
    int f = w.flags[w.lo];
    bool packed = w.packed<T>();
    if (e0 + 4 <= w.end()) {
        if (packed) {
            uint2 raw = *(const uint2 *)((const T *)grads + e0);
            const T *h = (const T *)&raw;
#pragma unroll
            for (int k = 0; k < 4; k++)
                g[k] = lb_to_f(h[k]);
        } else {
            float4 a = *(const float4 *)((const float *)grads + e0);
            g[0] = a.x, g[1] = a.y, g[2] = a.z, g[3] = a.w;
        }
#pragma unroll
        for (int k = 0; k < 4; k++)
            fl[k] = f;
        return;
    }
    for (int k = 0; k < 4; k++) {
        g[k] = 0.0f, fl[k] = 0;
        if (e0 + k >= w.n) continue;
        w.seek(e0 + k);
        g[k] = grad_at<T>(grads, w, e0 + k);
        fl[k] = w.flags[w.lo];
    }
}

/* Sum of squares of len values of type V from p, by the block's threads: 16-byte loads
 * over the aligned middle, element by element at either end. */
template <typename V> __device__ __forceinline__ float range_sumsq(const V *p, int64_t len) {
    constexpr int NV = 16 / sizeof(V);
    int64_t head = min(len, (int64_t)((16 - ((uintptr_t)p & 15)) & 15) / (int64_t)sizeof(V));
    int64_t nvec = (len - head) / NV;
    const uint4 *q = (const uint4 *)(p + head);
    float s = 0.0f;
#pragma unroll 4
    for (int64_t i = threadIdx.x; i < nvec; i += blockDim.x) {
        uint4 raw = q[i];
        const V *e = (const V *)&raw;
#pragma unroll
        for (int k = 0; k < NV; k++)
            s += lb_to_f(e[k]) * lb_to_f(e[k]);
    }
    for (int64_t i = threadIdx.x; i < len - nvec * NV; i += blockDim.x) {
        float x = lb_to_f(p[i < head ? i : i + nvec * NV]);
        s += x * x;
    }
    return s;
}

#define SUMSQ_CHUNK 16384 /* elements a block takes at a time */

/* A block sums chunks of the parameters, each chunk as its pieces in one segment each:
 * the table is read once a piece, not once an element. Each chunk finds its first segment
 * by binary search: a chunk lies gridDim.x chunks past the block's last one, tens of
 * segments on, too far for seek's forward scan (a dependent table read a segment). */
template <typename T>
static __global__ void sumsq_kernel(double *acc, const void *grads, seg_walk w) {
    __shared__ float scratch[32];
    float s = 0.0f;
    for (int64_t c0 = (int64_t)blockIdx.x * SUMSQ_CHUNK; c0 < w.n;
         c0 += (int64_t)gridDim.x * SUMSQ_CHUNK) {
        int64_t c1 = min(w.n, c0 + SUMSQ_CHUNK);
        w.lo = -1;
        for (int64_t a = c0; a < c1;) {
            w.seek(a);
            int64_t b = min(c1, w.end());
            bool pad = w.flags[w.lo] & LB_SEG_PAD;
            if (!pad && w.packed<T>()) s += range_sumsq((const T *)grads + a, b - a);
            if (!pad && !w.packed<T>()) s += range_sumsq((const float *)grads + a, b - a);
            a = b;
        }
    }
    s = lb_block_sum(s, scratch);
    if (threadIdx.x == 0) atomicAdd(acc, (double)s);
}

/* Four consecutive parameters per step, 16-byte accesses (a partial last vector element
 * by element). */
template <typename T>
static __global__ void adamw_kernel(float *__restrict__ master, T *__restrict__ lp,
                                    T *__restrict__ apart, int64_t a0, int64_t a1,
                                    const void *__restrict__ grads, float *__restrict__ m,
                                    float *__restrict__ v, seg_walk w, int64_t lo, int64_t hi,
                                    lb_gpu_adamw_params p, const lb_gpu_optstate *st) {
    float scale = p.dynamic_scaling ? st->loss_scale : 1.0f;
    float norm = (float)sqrt(st->sumsq) / scale;
    if (p.dynamic_scaling && !isfinite(norm)) return;
    float clip = 1.0f;
    if (p.grad_clip > 0.0f) clip = fminf(1.0f, p.grad_clip / (norm + 1e-6f));
    float gscale = clip / scale;
    int t = st->step + 1;
    float bc1 = 1.0f - powf(p.beta1, (float)t), bc2 = 1.0f - powf(p.beta2, (float)t);
    float step_size = p.lr / bc1, inv_sqrt_bc2 = rsqrtf(bc2);
    float decay = 1.0f - p.lr * p.weight_decay, b1c = 1.0f - p.beta1, b2c = 1.0f - p.beta2;
    int64_t n = w.n, nv = (hi + 3) / 4;
    for (int64_t i = lo / 4 + blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < nv;
         i += (int64_t)gridDim.x * blockDim.x) {
        int64_t e0 = 4 * i;
        /* a group of four goes by vectors when it is whole and either outside the range
         * kept apart or inside it at a 4-aligned place there */
        bool in_apart = apart && e0 >= a0 && e0 + 4 <= a1;
        bool full =
            e0 + 4 <= n && (!apart || e0 + 4 <= a0 || e0 >= a1 || (in_apart && a0 % 4 == 0));
        float g[4], wt[4], mi[4], vi[4];
        int fl[4];
        grad4<T>(g, fl, grads, w, e0);
        if (full) {
            float4 b = *(const float4 *)(master + e0);
            float4 c = *(const float4 *)(m + e0), d = *(const float4 *)(v + e0);
            wt[0] = b.x, wt[1] = b.y, wt[2] = b.z, wt[3] = b.w;
            mi[0] = c.x, mi[1] = c.y, mi[2] = c.z, mi[3] = c.w;
            vi[0] = d.x, vi[1] = d.y, vi[2] = d.z, vi[3] = d.w;
        } else {
            for (int k = 0; k < 4; k++) {
                bool in = e0 + k < n;
                wt[k] = in ? master[e0 + k] : 0.0f;
                mi[k] = in ? m[e0 + k] : 0.0f;
                vi[k] = in ? v[e0 + k] : 0.0f;
            }
        }
        /* the square root and the division by the special-function unit (~1-2 ulp): the
         * optimizer is memory-bound, and under a power limit its arithmetic still costs */
#pragma unroll
        for (int k = 0; k < 4; k++) {
            float gk = (fl[k] & LB_SEG_PAD) ? 0.0f : g[k] * gscale;
            float wk = (fl[k] & LB_SEG_DECAY) ? wt[k] * decay : wt[k];
            mi[k] = fmaf(p.beta1, mi[k], b1c * gk);
            vi[k] = fmaf(p.beta2, vi[k], b2c * gk * gk);
            float denom = fmaf(lb_sqrt_approx(vi[k]), inv_sqrt_bc2, p.eps);
            wt[k] = wk - __fdividef(step_size * mi[k], denom);
        }
        if (full) {
            *(float4 *)(master + e0) = make_float4(wt[0], wt[1], wt[2], wt[3]);
            *(float4 *)(m + e0) = make_float4(mi[0], mi[1], mi[2], mi[3]);
            *(float4 *)(v + e0) = make_float4(vi[0], vi[1], vi[2], vi[3]);
            T *dst = in_apart ? apart + (e0 - a0) : lp ? lp + e0 : NULL;
            if (dst) {
                T o[4] __attribute__((aligned(16)));
#pragma unroll
                for (int k = 0; k < 4; k++)
                    o[k] = lb_from_f<T>(wt[k]);
                if (sizeof(T) == 2)
                    *(uint2 *)dst = *(const uint2 *)o;
                else
                    *(float4 *)dst = *(const float4 *)o;
            }
        } else {
            for (int k = 0; k < 4 && e0 + k < n; k++) {
                master[e0 + k] = wt[k];
                m[e0 + k] = mi[k];
                v[e0 + k] = vi[k];
                int64_t e = e0 + k;
                if (apart && e >= a0 && e < a1)
                    apart[e - a0] = lb_from_f<T>(wt[k]);
                else if (lp)
                    lp[e] = lb_from_f<T>(wt[k]);
            }
        }
    }
}

static __global__ void opt_finish_kernel(lb_gpu_optstate *st, lb_gpu_adamw_params p) {
    float scale = p.dynamic_scaling ? st->loss_scale : 1.0f;
    float norm = (float)sqrt(st->sumsq) / scale;
    st->last_norm = norm;
    st->sumsq = 0.0;
    if (p.dynamic_scaling) {
        if (!isfinite(norm)) {
            st->loss_scale = scale * 0.5f;
            st->good_steps = 0;
            st->skipped++;
            return;
        }
        if (++st->good_steps >= p.growth_interval) {
            st->loss_scale = scale * 2.0f;
            st->good_steps = 0;
        }
    }
    st->step++;
}

static seg_walk walk_of(const lb_gpu_segments *sg) {
    return {sg->start, sg->flags, sg->n_seg, sg->n, sg->dense16, -1};
}

extern "C" lb_status lb_adamw_grad_sumsq(lb_gpu_optstate *st, const void *grads, lb_gpu_dtype dt,
                                         const lb_gpu_segments *sg, cudaStream_t s, lb_err *err) {
    unsigned g = lb_grid_cap((sg->n + SUMSQ_CHUNK - 1) / SUMSQ_CHUNK, 1);
    LB_DISPATCH_DTYPE(dt, E, sumsq_kernel<E><<<g, 512, 0, s>>>(&st->sumsq, grads, walk_of(sg)));
    LB_CUDA_LAUNCH_TRY(err);
    return LB_OK;
}

extern "C" lb_status lb_adamw(float *master, void *params_lp, const lb_gpu_lp_apart *apart,
                              lb_gpu_dtype dt, const void *grads, float *m, float *v,
                              const lb_gpu_segments *sg, int64_t lo, int64_t hi,
                              const lb_gpu_adamw_params *p, lb_gpu_optstate *st, cudaStream_t s,
                              lb_err *err) {
    if (hi <= lo) return LB_OK;
    unsigned g = lb_grid_cap((hi - lo + 3) / 4, 256);
    void *ap = apart ? apart->dst : NULL;
    int64_t a0 = apart ? apart->start : 0, a1 = apart ? apart->end : 0;
    LB_DISPATCH_DTYPE(dt, E,
                      adamw_kernel<E><<<g, 256, 0, s>>>(master, (E *)params_lp, (E *)ap, a0, a1,
                                                        grads, m, v, walk_of(sg), lo, hi, *p, st));
    LB_CUDA_LAUNCH_TRY(err);
    return LB_OK;
}

extern "C" bool lb_adamw_params_same(const lb_gpu_adamw_params *a, const lb_gpu_adamw_params *b) {
    return a->lr == b->lr && a->beta1 == b->beta1 && a->beta2 == b->beta2 && a->eps == b->eps &&
           a->weight_decay == b->weight_decay && a->grad_clip == b->grad_clip &&
           a->dynamic_scaling == b->dynamic_scaling && a->growth_interval == b->growth_interval;
}

extern "C" lb_status lb_adamw_finish(lb_gpu_optstate *st, const lb_gpu_adamw_params *p,
                                     cudaStream_t s, lb_err *err) {
    opt_finish_kernel<<<1, 1, 0, s>>>(st, *p);
    LB_CUDA_LAUNCH_TRY(err);
    return LB_OK;
}

/* Run blockIdx.y's fp32 gradients into the dense buffer, grid-stride along the run. */
template <typename T>
static __global__ void grad_runs_kernel(const float *__restrict__ src, T *__restrict__ dense,
                                        const lb_adamw_grad_run *runs) {
    lb_adamw_grad_run r = runs[blockIdx.y];
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < r.n;
         i += (int64_t)gridDim.x * blockDim.x)
        dense[r.dense + i] = lb_from_f<T>(src[r.slot + i]);
}

/* One launch over every run; blocks a run: enough for the longest, about 4,224 in all (a
 * row of a run much shorter than the longest mostly returns at once). */
extern "C" lb_status lb_adamw_pack_grads(void *dst, const float *src, const lb_adamw_grad_run *runs,
                                         int n_runs, int64_t longest, lb_gpu_dtype dt,
                                         cudaStream_t s, lb_err *err) {
    if (n_runs <= 0 || longest <= 0) return LB_OK;
    unsigned width = lb_grid_cap(longest, 256), most = 4224u / (unsigned)n_runs;
    if (most < 132) most = 132;
    dim3 grid(width < most ? width : most, (unsigned)n_runs);
    LB_DISPATCH_DTYPE(dt, E, grad_runs_kernel<E><<<grid, 256, 0, s>>>(src, (E *)dst, runs));
    LB_CUDA_LAUNCH_TRY(err);
    return LB_OK;
}
