/* norm.cu: LayerNorm and RMSNorm kernels (norm.cuh).
 *
 * Widths that are a multiple of 8 up to 2048 (every model's d_model) take the vector
 * kernels: one warp per row, lane l owning the 8-element vectors l, l+32, ... of every
 * row it sees, loaded with 16-byte accesses. Forward keeps the row in registers (one read,
 * one write). Backward walks a grid-stride range of rows per warp (fetching x, dy and the
 * residual gradient of a row together; 16-bit rows up to 768 wide, and 16-bit RMSNorm rows
 * above 1024, stay in registers between its two passes), keeps its lanes' weight/bias
 * gradient partials in registers across those rows, and merges them once per
 * block (each warp's partials into its own shared slice, the slices summed per channel,
 * one global atomicAdd per block and channel). Other widths take the scalar kernels: same
 * structure, one element at a time, partials in shared memory per row, except RMSNorm's
 * forward at widths above 2048 up to WIDE_MAX (a multiple of 8, aligned: Llama-3.1-8B's
 * 4096), which runs a block a row, each thread holding up to four 8-element vectors: one
 * warp walking such a row took about 29 us whatever the row count (an inference step's
 * few rows, bench/engine_probe), a block about a tenth of that. RMSNorm's backward at those
 * widths runs a block a row too (rmsnorm_backward_wide_kernel). */
#include "gpu/common.cuh"
#include "kernels/norm.cuh"

#define NORM_WARPS 8

template <typename T, bool LAYER>
static __global__ void norm_forward_kernel(T *out, int64_t ldo, float *mean_out, float *rstd_out,
                                           const T *inp, const T *w, const T *b, int64_t N, int C,
                                           float eps) {
    int lane = threadIdx.x & 31;
    int64_t row = (int64_t)blockIdx.x * NORM_WARPS + (threadIdx.x >> 5);
    if (row >= N) return;
    const T *x = inp + row * C;
    float mean = 0.0f;
    if (LAYER) {
        float s = 0.0f;
        for (int c = lane; c < C; c += 32)
            s += lb_to_f(x[c]);
        mean = lb_warp_sum(s) / C;
    }
    float ss = 0.0f;
    for (int c = lane; c < C; c += 32) {
        float d = lb_to_f(x[c]) - mean;
        ss += d * d;
    }
    float rstd = rsqrtf(lb_warp_sum(ss) / C + eps);
    T *o = out + row * ldo;
    for (int c = lane; c < C; c += 32) {
        float v = (lb_to_f(x[c]) - mean) * rstd * lb_to_f(w[c]);
        if (LAYER && b) v += lb_to_f(b[c]);
        o[c] = lb_from_f<T>(v);
    }
    if (lane == 0) {
        if (LAYER) mean_out[row] = mean;
        rstd_out[row] = rstd;
    }
}

/* ---- vector kernels: C % 8 == 0, C <= 256 * VPL (VPL vectors per lane) ---- */

template <typename T, bool LAYER, int VPL>
static __global__ void __launch_bounds__(NORM_WARPS * 32)
    norm_forward_vec_kernel(T *out, int64_t ldo, float *mean_out, float *rstd_out, const T *inp,
                            const T *w, const T *b, int64_t N, int C, float eps) {
    int lane = threadIdx.x & 31;
    int64_t row = (int64_t)blockIdx.x * NORM_WARPS + (threadIdx.x >> 5);
    if (row >= N) return;
    const T *x = inp + row * C;
    float v[VPL][8];
    float s = 0.0f;
#pragma unroll
    for (int i = 0; i < VPL; i++) {
        int c = (lane + 32 * i) * 8;
        if (c < C) {
            lb_ld8(v[i], x + c);
#pragma unroll
            for (int k = 0; k < 8; k++)
                s += v[i][k];
        }
    }
    float mean = LAYER ? lb_warp_sum(s) / C : 0.0f;
    float ss = 0.0f;
#pragma unroll
    for (int i = 0; i < VPL; i++)
        if ((lane + 32 * i) * 8 < C)
#pragma unroll
            for (int k = 0; k < 8; k++)
                ss += (v[i][k] - mean) * (v[i][k] - mean);
    float rstd = rsqrtf(lb_warp_sum(ss) / C + eps), nmr = -mean * rstd;
#pragma unroll
    for (int i = 0; i < VPL; i++) {
        int c = (lane + 32 * i) * 8;
        if (c < C) {
            float wv[8], bv[8], o[8];
            lb_ld8(wv, w + c);
            if (LAYER && b) lb_ld8(bv, b + c);
#pragma unroll
            for (int k = 0; k < 8; k++)
                o[k] = fmaf(fmaf(v[i][k], rstd, nmr), wv[k], LAYER && b ? bv[k] : 0.0f);
            lb_st8(out + row * ldo + c, o);
        }
    }
    if (lane == 0) {
        if (LAYER) mean_out[row] = mean;
        rstd_out[row] = rstd;
    }
}

/* Eight elements of T kept packed in registers (loaded early, converted late). */
template <typename T> struct raw8 { uint4 u[sizeof(T) / 2]; };
template <typename T> __device__ __forceinline__ void ld_raw8(raw8<T> &r, const T *p) {
#pragma unroll
    for (int i = 0; i < (int)(sizeof(T) / 2); i++)
        r.u[i] = ((const uint4 *)p)[i];
}
template <typename T> __device__ __forceinline__ void unpack8(float f[8], const raw8<T> &r) {
    const T *e = (const T *)r.u;
#pragma unroll
    for (int k = 0; k < 8; k++)
        f[k] = lb_to_f(e[k]);
}

/* Backward blocks: 8 warps (2 blocks an SM) up to 1024 channels, 4 warps (3 an SM) above;
 * 4 warps (2 an SM) where a 16-bit RMSNorm row above 1024 stays in registers (no spills). */
template <typename T, bool LAYER, int VPL> struct bwd_shape {
    static constexpr bool KEEP = sizeof(T) == 2 && (VPL <= 3 || (!LAYER && VPL == 8));
    static constexpr int WARPS = VPL <= 4 ? 8 : 4, MIN_BLOCKS = !KEEP && VPL > 4 ? 3 : 2;
    /* shared slices a warp: the weight's partials, the bias's (LayerNorm), dinp's sums (SUM) */
    static constexpr int SLICES = 1 + (LAYER ? 1 : 0);
};

/* One warp per row. A row of 16-bit elements up to 768 wide stays in registers between
 * the two passes (x and dy loaded once, the weight once per thread); otherwise the second
 * pass reloads x, dy and the weight (from L1), which keeps wider or fp32 rows from
 * spilling (at 1024 the kept row spilled 188 bytes).
 * Keeping the row saved 11% at GPT-2 16x1024 on the H200 (1.41 -> 1.26 ms a step).
 * A 16-bit RMSNorm row above 1024 (no bias partials) stays too, at 8 warps an SM instead
 * of 12: all 24 loads of a row in flight at once, 8,192 rows in 8 rounds of 1,056 warps
 * instead of 6 of 1,584; 58.9 -> 36.5 us a launch at Llama 3.2 1B 8x1024 (H200; the
 * 134 MB it moves need ~35 us). Two warps a row (4 vectors a lane each, 16 warps an SM,
 * the row sums swapped through shared memory) took 41.3 us.
 * The weight and bias gradient partials and dinp's column sums build up in the warp's own
 * shared slices (lane l owns the float4s l, l + 32, ... of each: no atomics); kept in
 * registers they took 48 of them at 768 channels and the kernel ran 8% slower (38 against
 * 35 us a LayerNorm at 16384 x 768 bf16 alone, H200; spending the freed registers on a
 * third block an SM, or on loading the next row before the current one's work, was
 * slower again: 43 and 40 us). At the end the block sums the slices per channel: fp32
 * atomicAdd on shared memory is a compare-and-swap loop on sm_90, and 8 warps retrying ~50
 * of them a thread on the same addresses, every block at once, took half the kernel
 * (50 -> 26.5 us). */
template <typename T, bool LAYER, int VPL, bool SUM>
static __global__ void __launch_bounds__(bwd_shape<T, LAYER, VPL>::WARPS * 32,
                                         bwd_shape<T, LAYER, VPL>::MIN_BLOCKS)
    norm_backward_vec_kernel(T *dinp, float *dweight, float *dbias, float *dsum, const T *dout,
                             const T *inp, const T *w, const float *mean, const float *rstd,
                             int64_t N, int C) {
    using shape = bwd_shape<T, LAYER, VPL>;
    constexpr bool KEEP = shape::KEEP;
    constexpr int WARPS = shape::WARPS, SLICE = VPL * 256, NS = shape::SLICES + (SUM ? 1 : 0);
    extern __shared__ float4 part[]; /* [NS][WARPS][SLICE / 4]: one warp's partials each */
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    /* lane l's 8 channels of vector i lie at float4s 32 (2i) and 32 (2i + 1) of its slices */
    float4 *pw = part + (size_t)warp * SLICE / 4 + lane;
    float4 *pb = pw + (size_t)WARPS * SLICE / 4;            /* LAYER */
    float4 *ps = pw + (size_t)(NS - 1) * WARPS * SLICE / 4; /* SUM */
#pragma unroll
    for (int i = 0; i < 2 * VPL; i++)
        for (int k = 0; k < NS; k++)
            pw[(size_t)k * WARPS * SLICE / 4 + 32 * i] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    auto add8 = [&](float4 *slice, int i, const float v[8]) {
#pragma unroll
        for (int h = 0; h < 2; h++) {
            float4 a = slice[32 * (2 * i + h)];
            a.x += v[4 * h], a.y += v[4 * h + 1], a.z += v[4 * h + 2], a.w += v[4 * h + 3];
            slice[32 * (2 * i + h)] = a;
        }
    };
    /* the weight row, once (KEEP): as floats up to 768 channels, packed above (registers) */
    constexpr bool WF = KEEP && VPL <= 3;
    raw8<T> wr[KEEP && !WF ? VPL : 1];
    float wf[WF ? VPL : 1][8];
    if (KEEP)
#pragma unroll
        for (int i = 0; i < VPL; i++) {
            int c = (lane + 32 * i) * 8;
            if (c >= C) continue;
            if (WF)
                lb_ld8(wf[i], w + c);
            else
                ld_raw8(wr[i], w + c);
        }
    for (int64_t row = (int64_t)blockIdx.x * WARPS + warp; row < N;
         row += (int64_t)gridDim.x * WARPS) {
        const T *x = inp + row * C, *dy = dout + row * C;
        float rs = rstd[row], nmr = LAYER ? -mean[row] * rs : 0.0f; /* xhat = x rs + nmr */
        float s1 = 0.0f, s2 = 0.0f;                     /* sum dnorm, sum dnorm * xhat */
        raw8<T> dxr[VPL];                               /* the residual gradient */
        raw8<T> xr[KEEP ? VPL : 1], gr[KEEP ? VPL : 1]; /* x and dy (KEEP) */
#pragma unroll
        for (int i = 0; i < VPL; i++) {
            int c = (lane + 32 * i) * 8;
            if (c < C) {
                ld_raw8(dxr[i], dinp + row * C + c);
                if (KEEP) {
                    ld_raw8(xr[i], x + c);
                    ld_raw8(gr[i], dy + c);
                }
            }
        }
        /* x, dy and w of 8 columns as floats: from registers (KEEP) or memory */
        auto row8 = [&](int i, int c, float xv[8], float gv[8], float wv[8]) {
            if (KEEP) {
                unpack8(xv, xr[i]);
                unpack8(gv, gr[i]);
                if (WF)
#pragma unroll
                    for (int k = 0; k < 8; k++)
                        wv[k] = wf[i][k];
                else
                    unpack8(wv, wr[i]);
            } else {
                lb_ld8(xv, x + c);
                lb_ld8(gv, dy + c);
                lb_ld8(wv, w + c);
            }
        };
#pragma unroll
        for (int i = 0; i < VPL; i++) {
            int c = (lane + 32 * i) * 8;
            if (c < C) {
                float xv[8], gv[8], wv[8], gx[8];
                row8(i, c, xv, gv, wv);
#pragma unroll
                for (int k = 0; k < 8; k++) {
                    float xhat = fmaf(xv[k], rs, nmr), dn = gv[k] * wv[k];
                    s1 += dn;
                    s2 += dn * xhat;
                    gx[k] = gv[k] * xhat;
                }
                if (dweight) add8(pw, i, gx);
                if (LAYER && dbias) add8(pb, i, gv);
            }
        }
        /* dx += (dn - mean(dn) - xhat mean(dn xhat)) rs = dn rs + xhat c2 + c1 */
        float c1 = LAYER ? -lb_warp_sum(s1) / C * rs : 0.0f, c2 = -lb_warp_sum(s2) / C * rs;
#pragma unroll
        for (int i = 0; i < VPL; i++) {
            int c = (lane + 32 * i) * 8;
            if (c < C) {
                float xv[8], gv[8], wv[8], dx[8];
                row8(i, c, xv, gv, wv);
                unpack8(dx, dxr[i]);
#pragma unroll
                for (int k = 0; k < 8; k++) {
                    float xhat = fmaf(xv[k], rs, nmr), dn = gv[k] * wv[k];
                    dx[k] += fmaf(dn, rs, fmaf(xhat, c2, c1));
                }
                lb_st8(dinp + row * C + c, dx);
                if constexpr (SUM) add8(ps, i, dx);
            }
        }
    }
    /* four channels a thread: one vector reduction a thread where dst is 16-byte aligned */
    auto merge = [&](const float4 *slices, float *dst) {
        const float *p = (const float *)slices;
        bool vec = ((uintptr_t)dst & 15) == 0;
        for (int c = 4 * threadIdx.x; c < C; c += 4 * blockDim.x) {
            int v = c >> 3, j = ((2 * (v >> 5) + ((c >> 2) & 1)) * 32 + (v & 31)) << 2;
            float4 s = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll
            for (int u = 0; u < WARPS; u++) {
                float4 q = *(const float4 *)(p + u * SLICE + j);
                s.x += q.x, s.y += q.y, s.z += q.z, s.w += q.w;
            }
            if (vec) {
                red_add4(dst + c, s);
            } else {
                atomicAdd(&dst[c], s.x), atomicAdd(&dst[c + 1], s.y);
                atomicAdd(&dst[c + 2], s.z), atomicAdd(&dst[c + 3], s.w);
            }
        }
    };
    __syncthreads();
    if (dweight) merge(part, dweight);
    if (LAYER && dbias) merge(part + (size_t)WARPS * SLICE / 4, dbias);
    if constexpr (SUM) merge(part + (size_t)(NS - 1) * WARPS * SLICE / 4, dsum);
}

#define WIDE_THREADS 256
#define WIDE_MAX     (4 * 8 * WIDE_THREADS)

/* RMSNorm forward of rows wider than a warp's vectors: a block a row, thread t owning
 * the 8-element vectors t, t + WIDE_THREADS, ... (C a multiple of 8, at most WIDE_MAX). */
template <typename T>
static __global__ void __launch_bounds__(WIDE_THREADS)
    rmsnorm_forward_wide_kernel(T *out, float *rstd_out, const T *inp, const T *w, int C,
                                float eps) {
    constexpr int V = WIDE_MAX / (8 * WIDE_THREADS);
    __shared__ float part[WIDE_THREADS / 32];
    const int64_t row = blockIdx.x;
    const T *x = inp + row * C;
    float v[V][8], ss = 0.0f;
#pragma unroll
    for (int i = 0; i < V; i++) {
        const int c = (threadIdx.x + WIDE_THREADS * i) * 8;
        if (c < C) {
            lb_ld8(v[i], x + c);
#pragma unroll
            for (int k = 0; k < 8; k++)
                ss += v[i][k] * v[i][k];
        }
    }
    ss = lb_warp_sum(ss);
    if (threadIdx.x % 32 == 0) part[threadIdx.x / 32] = ss;
    __syncthreads();
    ss = 0.0f;
#pragma unroll
    for (int k = 0; k < WIDE_THREADS / 32; k++)
        ss += part[k];
    const float rstd = rsqrtf(ss / C + eps);
#pragma unroll
    for (int i = 0; i < V; i++) {
        const int c = (threadIdx.x + WIDE_THREADS * i) * 8;
        if (c < C) {
            float wv[8], o[8];
            lb_ld8(wv, w + c);
#pragma unroll
            for (int k = 0; k < 8; k++)
                o[k] = v[i][k] * rstd * wv[k];
            lb_st8(out + row * C + c, o);
        }
    }
    if (threadIdx.x == 0) rstd_out[row] = rstd;
}

/* RMSNorm backward of rows wider than the vector kernels take (C a multiple of 8 above
 * 2048, at most WIDE_MAX, aligned): a block a row, each block walking rows gridDim.x apart,
 * thread t owning the 8-element vectors t, t + WIDE_THREADS, ... of every row (V of them).
 * A thread's channels are the same in every row, so its weight-gradient and dsum partials
 * stay in its registers across rows and go out once per block (one vector reduction per
 * thread and vector); x, dy, the residual gradient and the weight are read once. The row's
 * sum crosses the warps through shared memory, a slot pair a row parity: one barrier a
 * row. One warp a row through the scalar kernel took 152 us at 4096 x 4096 bf16 (H100),
 * shared-memory atomics and 2-byte loads, where its ~100 MB need ~35 us. */
template <typename T, int V>
static __global__ void __launch_bounds__(WIDE_THREADS)
    rmsnorm_backward_wide_kernel(T *dinp, float *dweight, float *dsum, const T *dout, const T *inp,
                                 const T *w, const float *rstd, int64_t N, int C) {
    constexpr int WARPS = WIDE_THREADS / 32;
    __shared__ float part[2][WARPS];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    raw8<T> wr[V];
    float pw[V][8], ps[V][8];
#pragma unroll
    for (int i = 0; i < V; i++) {
        const int c = (threadIdx.x + WIDE_THREADS * i) * 8;
        if (c < C) ld_raw8(wr[i], w + c);
#pragma unroll
        for (int k = 0; k < 8; k++)
            pw[i][k] = ps[i][k] = 0.0f;
    }
    int par = 0;
    for (int64_t row = blockIdx.x; row < N; row += gridDim.x, par ^= 1) {
        raw8<T> xr[V], gr[V], dr[V];
#pragma unroll
        for (int i = 0; i < V; i++) {
            const int c = (threadIdx.x + WIDE_THREADS * i) * 8;
            if (c < C) {
                ld_raw8(xr[i], inp + row * C + c);
                ld_raw8(gr[i], dout + row * C + c);
                ld_raw8(dr[i], dinp + row * C + c);
            }
        }
        const float rs = rstd[row];
        float s2 = 0.0f; /* sum dnorm * xhat */
#pragma unroll
        for (int i = 0; i < V; i++) {
            if ((threadIdx.x + WIDE_THREADS * i) * 8 >= C) continue;
            float xv[8], gv[8], wv[8];
            unpack8(xv, xr[i]);
            unpack8(gv, gr[i]);
            unpack8(wv, wr[i]);
#pragma unroll
            for (int k = 0; k < 8; k++)
                s2 += gv[k] * wv[k] * xv[k] * rs;
        }
        s2 = lb_warp_sum(s2);
        if (lane == 0) part[par][warp] = s2;
        __syncthreads();
        s2 = 0.0f;
#pragma unroll
        for (int k = 0; k < WARPS; k++)
            s2 += part[par][k];
        const float c2 = -s2 / C * rs; /* dx += dn rs + xhat c2 */
#pragma unroll
        for (int i = 0; i < V; i++) {
            const int c = (threadIdx.x + WIDE_THREADS * i) * 8;
            if (c >= C) continue;
            float xv[8], gv[8], wv[8], dx[8];
            unpack8(xv, xr[i]);
            unpack8(gv, gr[i]);
            unpack8(wv, wr[i]);
            unpack8(dx, dr[i]);
#pragma unroll
            for (int k = 0; k < 8; k++) {
                const float xhat = xv[k] * rs;
                dx[k] += fmaf(gv[k] * wv[k], rs, xhat * c2);
                pw[i][k] = fmaf(gv[k], xhat, pw[i][k]);
            }
            lb_st8(dinp + row * C + c, dx);
            if (dsum)
#pragma unroll
                for (int k = 0; k < 8; k++)
                    ps[i][k] += dx[k];
        }
    }
    auto out = [&](float *dst, float p[V][8]) {
        const bool vec = ((uintptr_t)dst & 15) == 0;
#pragma unroll
        for (int i = 0; i < V; i++) {
            const int c = (threadIdx.x + WIDE_THREADS * i) * 8;
            if (c >= C) continue;
            if (vec) {
                red_add4(dst + c, make_float4(p[i][0], p[i][1], p[i][2], p[i][3]));
                red_add4(dst + c + 4, make_float4(p[i][4], p[i][5], p[i][6], p[i][7]));
            } else {
#pragma unroll
                for (int k = 0; k < 8; k++)
                    atomicAdd(dst + c + k, p[i][k]);
            }
        }
    };
    if (dweight) out(dweight, pw);
    if (dsum) out(dsum, ps);
}

/* Vectors per lane for width C, or 0 when the scalar kernels must run. */
static int norm_vpl(int C, const void *a, const void *b, const void *c) {
    bool aligned = ((uintptr_t)a | (uintptr_t)b | (uintptr_t)c) % 16 == 0;
    if (C % 8 != 0 || !aligned) return 0;
    int v = (C + 255) / 256;
    return v <= 4 ? v : v <= 8 ? 8 : 0;
}

#define VPL_DISPATCH(vpl, ...)                                                                     \
    switch (vpl) {                                                                                 \
    case 1: {                                                                                      \
        constexpr int VPL = 1;                                                                     \
        __VA_ARGS__;                                                                               \
    } break;                                                                                       \
    case 2: {                                                                                      \
        constexpr int VPL = 2;                                                                     \
        __VA_ARGS__;                                                                               \
    } break;                                                                                       \
    case 3: {                                                                                      \
        constexpr int VPL = 3;                                                                     \
        __VA_ARGS__;                                                                               \
    } break;                                                                                       \
    case 4: {                                                                                      \
        constexpr int VPL = 4;                                                                     \
        __VA_ARGS__;                                                                               \
    } break;                                                                                       \
    default: {                                                                                     \
        constexpr int VPL = 8;                                                                     \
        __VA_ARGS__;                                                                               \
    } break;                                                                                       \
    }

template <typename T, bool LAYER>
static __global__ void norm_recompute_kernel(T *out, int64_t ldo, const T *inp, const T *w,
                                             const T *b, const float *mean, const float *rstd,
                                             int64_t N, int C) {
    int64_t n = N * C;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        int64_t row = i / C;
        int c = (int)(i % C);
        float v = (lb_to_f(inp[i]) - (LAYER ? mean[row] : 0.0f)) * rstd[row] * lb_to_f(w[c]);
        if (LAYER && b) v += lb_to_f(b[c]);
        out[row * ldo + c] = lb_from_f<T>(v);
    }
}

template <typename T, bool LAYER>
static __global__ void norm_backward_kernel(T *dinp, float *dweight, float *dbias, float *dsum,
                                            const T *dout, const T *inp, const T *w,
                                            const float *mean, const float *rstd, int64_t N,
                                            int C) {
    /* partials: dweight [C], dbias [C] (LayerNorm), dinp's sums [C] (dsum) */
    extern __shared__ float sh[];
    float *sdw = sh, *sdb = sh + C, *sds = sh + (LAYER ? 2 : 1) * C;
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
        sdw[c] = 0.0f;
        if (LAYER) sdb[c] = 0.0f;
        if (dsum) sds[c] = 0.0f;
    }
    __syncthreads();
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    for (int64_t row = (int64_t)blockIdx.x * NORM_WARPS + warp; row < N;
         row += (int64_t)gridDim.x * NORM_WARPS) {
        const T *x = inp + row * C, *dy = dout + row * C;
        float mu = LAYER ? mean[row] : 0.0f, rs = rstd[row];
        float s1 = 0.0f, s2 = 0.0f; /* sum dnorm, sum dnorm * xhat */
        for (int c = lane; c < C; c += 32) {
            float xhat = (lb_to_f(x[c]) - mu) * rs;
            float dn = lb_to_f(dy[c]) * lb_to_f(w[c]);
            s1 += dn;
            s2 += dn * xhat;
        }
        s1 = lb_warp_sum(s1) / C;
        s2 = lb_warp_sum(s2) / C;
        T *dx = dinp + row * C;
        for (int c = lane; c < C; c += 32) {
            float xhat = (lb_to_f(x[c]) - mu) * rs;
            float g = lb_to_f(dy[c]);
            float dn = g * lb_to_f(w[c]);
            float d = LAYER ? (dn - s1 - xhat * s2) * rs : (dn - xhat * s2) * rs;
            float v = lb_to_f(dx[c]) + d;
            dx[c] = lb_from_f<T>(v);
            if (dweight) atomicAdd(&sdw[c], g * xhat);
            if (LAYER && dbias) atomicAdd(&sdb[c], g);
            if (dsum) atomicAdd(&sds[c], v);
        }
    }
    __syncthreads();
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
        if (dweight) atomicAdd(&dweight[c], sdw[c]);
        if (LAYER && dbias) atomicAdd(&dbias[c], sdb[c]);
        if (dsum) atomicAdd(&dsum[c], sds[c]);
    }
}

/* How many blocks of kernel (threads each, smem bytes of dynamic shared memory) the GPU
 * holds at once: the SMs times the blocks one SM takes (at least one). */
template <typename K>
static lb_status resident_blocks(K kernel, int threads, size_t smem, int64_t *out, lb_err *err) {
    int dev = 0, sms = 0, per_sm = 0;
    LB_CUDA_TRY(err, cudaGetDevice(&dev));
    LB_CUDA_TRY(err, cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    LB_CUDA_TRY(err, cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, smem));
    *out = (int64_t)sms * (per_sm > 0 ? per_sm : 1);
    return LB_OK;
}

/* A grid of as many blocks as fit on the GPU at once: each warp walks its rows. */
template <typename T, bool LAYER, int VPL, bool SUM>
static lb_status launch_backward_vec(void *dinp, float *dw, float *db, float *dsum,
                                     const void *dout, const void *inp, const void *w,
                                     const float *mean, const float *rstd, int64_t N, int C,
                                     cudaStream_t s, lb_err *err) {
    using shape = bwd_shape<T, LAYER, VPL>;
    constexpr int WARPS = shape::WARPS, NS = shape::SLICES + (SUM ? 1 : 0);
    auto kernel = norm_backward_vec_kernel<T, LAYER, VPL, SUM>;
    size_t vsmem = (size_t)NS * WARPS * VPL * 256 * sizeof(float); /* <= 96 KiB */
    int64_t fit = 0;
    LB_CUDA_TRY(
        err, cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)vsmem));
    LB_TRY(resident_blocks(kernel, WARPS * 32, vsmem, &fit, err));
    int64_t vblocks = (N + WARPS - 1) / WARPS;
    if (vblocks > fit) vblocks = fit;
    kernel<<<(unsigned)vblocks, WARPS * 32, vsmem, s>>>(
        (T *)dinp, dw, db, dsum, (const T *)dout, (const T *)inp, (const T *)w, mean, rstd, N, C);
    LB_CUDA_LAUNCH_TRY(err);
    return LB_OK;
}

/* As many blocks as fit on the GPU at once, at most one a row. */
template <typename T, int V>
static lb_status launch_backward_wide(void *dinp, float *dw, float *dsum, const void *dout,
                                      const void *inp, const void *w, const float *rstd, int64_t N,
                                      int C, cudaStream_t s, lb_err *err) {
    auto kernel = rmsnorm_backward_wide_kernel<T, V>;
    int64_t blocks = 0;
    LB_TRY(resident_blocks(kernel, WIDE_THREADS, 0, &blocks, err));
    if (blocks > N) blocks = N;
    kernel<<<(unsigned)blocks, WIDE_THREADS, 0, s>>>((T *)dinp, dw, dsum, (const T *)dout,
                                                     (const T *)inp, (const T *)w, rstd, N, C);
    LB_CUDA_LAUNCH_TRY(err);
    return LB_OK;
}

template <typename T, bool LAYER>
static lb_status launch_backward(void *dinp, float *dw, float *db, float *dsum, const void *dout,
                                 const void *inp, const void *w, const float *mean,
                                 const float *rstd, int64_t N, int C, cudaStream_t s, lb_err *err) {
    int vpl = norm_vpl(C, dinp, dout, inp) ? norm_vpl(C, w, w, w) : 0;
    if (!LAYER && !vpl && C % 8 == 0 && C <= WIDE_MAX && N > 0 &&
        ((uintptr_t)dinp | (uintptr_t)dout | (uintptr_t)inp | (uintptr_t)w) % 16 == 0) {
        if (C <= 2 * 8 * WIDE_THREADS)
            return launch_backward_wide<T, 2>(dinp, dw, dsum, dout, inp, w, rstd, N, C, s, err);
        return launch_backward_wide<T, 4>(dinp, dw, dsum, dout, inp, w, rstd, N, C, s, err);
    }
    if (vpl) {
        VPL_DISPATCH(vpl, if (dsum) return launch_backward_vec<T, LAYER, VPL, true>(
                              dinp, dw, db, dsum, dout, inp, w, mean, rstd, N, C, s, err);
                     return launch_backward_vec<T, LAYER, VPL, false>(dinp, dw, db, NULL, dout, inp,
                                                                      w, mean, rstd, N, C, s, err));
    }
    size_t smem = (size_t)((LAYER ? 2 : 1) + (dsum ? 1 : 0)) * C * sizeof(float);
    int64_t blocks = (N + NORM_WARPS - 1) / NORM_WARPS;
    if (smem > 48 * 1024)
        LB_CUDA_TRY(err,
                    cudaFuncSetAttribute(norm_backward_kernel<T, LAYER>,
                                         cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    if (blocks > 132 * 4) blocks = 132 * 4;
    norm_backward_kernel<T, LAYER><<<(unsigned)blocks, NORM_WARPS * 32, smem, s>>>(
        (T *)dinp, dw, db, dsum, (const T *)dout, (const T *)inp, (const T *)w, mean, rstd, N, C);
    LB_CUDA_LAUNCH_TRY(err);
    return LB_OK;
}

extern "C" lb_status lb_norm_layernorm_forward(void *out, int64_t ldo, float *mean, float *rstd,
                                               const void *inp, const void *weight,
                                               const void *bias, int64_t N, int C, float eps,
                                               lb_gpu_dtype dt, cudaStream_t s, lb_err *err) {
    unsigned blocks = lb_blocks(N, NORM_WARPS);
    int vpl = norm_vpl(C, out, inp, weight) && ldo % 8 == 0 ? norm_vpl(C, bias, bias, bias) : 0;
    if (vpl) {
        LB_DISPATCH_DTYPE(dt, E,
                          VPL_DISPATCH(vpl, norm_forward_vec_kernel<E, true, VPL>
                                       <<<blocks, NORM_WARPS * 32, 0, s>>>(
                                           (E *)out, ldo, mean, rstd, (const E *)inp,
                                           (const E *)weight, (const E *)bias, N, C, eps)));
    } else {
        LB_DISPATCH_DTYPE(dt, E,
                          norm_forward_kernel<E, true><<<blocks, NORM_WARPS * 32, 0, s>>>(
                              (E *)out, ldo, mean, rstd, (const E *)inp, (const E *)weight,
                              (const E *)bias, N, C, eps));
    }
    LB_CUDA_LAUNCH_TRY(err);
    return LB_OK;
}

extern "C" lb_status lb_norm_rmsnorm_forward(void *out, float *rstd, const void *inp,
                                             const void *weight, int64_t N, int C, float eps,
                                             lb_gpu_dtype dt, cudaStream_t s, lb_err *err) {
    unsigned blocks = lb_blocks(N, NORM_WARPS);
    int vpl = norm_vpl(C, out, inp, weight);
    if (!vpl && C % 8 == 0 && C <= WIDE_MAX && N > 0 &&
        ((uintptr_t)out | (uintptr_t)inp | (uintptr_t)weight) % 16 == 0) {
        LB_DISPATCH_DTYPE(dt, E,
                          rmsnorm_forward_wide_kernel<E><<<(unsigned)N, WIDE_THREADS, 0, s>>>(
                              (E *)out, rstd, (const E *)inp, (const E *)weight, C, eps));
    } else if (vpl) {
        LB_DISPATCH_DTYPE(dt, E,
                          VPL_DISPATCH(vpl, norm_forward_vec_kernel<E, false, VPL>
                                       <<<blocks, NORM_WARPS * 32, 0, s>>>(
                                           (E *)out, C, NULL, rstd, (const E *)inp,
                                           (const E *)weight, NULL, N, C, eps)));
    } else {
        LB_DISPATCH_DTYPE(
            dt, E,
            norm_forward_kernel<E, false><<<blocks, NORM_WARPS * 32, 0, s>>>(
                (E *)out, C, NULL, rstd, (const E *)inp, (const E *)weight, NULL, N, C, eps));
    }
    LB_CUDA_LAUNCH_TRY(err);
    return LB_OK;
}

extern "C" lb_status lb_norm_layernorm_backward(void *dinp, float *dweight, float *dbias,
                                                float *dsum, const void *dout, const void *inp,
                                                const void *weight, const float *mean,
                                                const float *rstd, int64_t N, int C,
                                                lb_gpu_dtype dt, cudaStream_t s, lb_err *err) {
    LB_DISPATCH_DTYPE(dt, E,
                      LB_TRY((launch_backward<E, true>(dinp, dweight, dbias, dsum, dout, inp,
                                                       weight, mean, rstd, N, C, s, err))));
    return LB_OK;
}

extern "C" lb_status lb_norm_rmsnorm_backward(void *dinp, float *dweight, float *dsum,
                                              const void *dout, const void *inp, const void *weight,
                                              const float *rstd, int64_t N, int C, lb_gpu_dtype dt,
                                              cudaStream_t s, lb_err *err) {
    LB_DISPATCH_DTYPE(dt, E,
                      LB_TRY((launch_backward<E, false>(dinp, dweight, NULL, dsum, dout, inp,
                                                        weight, NULL, rstd, N, C, s, err))));
    return LB_OK;
}

extern "C" lb_status lb_norm_recompute(void *out, int64_t ldo, const void *inp, const void *weight,
                                       const void *bias, const float *mean, const float *rstd,
                                       int64_t N, int C, lb_gpu_dtype dt, cudaStream_t s,
                                       lb_err *err) {
    unsigned blocks = lb_grid_cap(N * C, 256);
    if (mean != NULL) {
        LB_DISPATCH_DTYPE(dt, E,
                          norm_recompute_kernel<E, true>
                          <<<blocks, 256, 0, s>>>((E *)out, ldo, (const E *)inp, (const E *)weight,
                                                  (const E *)bias, mean, rstd, N, C));
    } else {
        LB_DISPATCH_DTYPE(dt, E,
                          norm_recompute_kernel<E, false>
                          <<<blocks, 256, 0, s>>>((E *)out, ldo, (const E *)inp, (const E *)weight,
                                                  NULL, NULL, rstd, N, C));
    }
    LB_CUDA_LAUNCH_TRY(err);
    return LB_OK;
}
