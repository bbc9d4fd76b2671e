/* slices.cu: digit planes of fp32 operands and their recombination (gpu/blas/slices.cuh).
 *
 * Cutting a row whose values lie along memory (k_contig) is one block a row: the block's
 * largest magnitude, then four values a thread at a time into every plane. Cutting rows
 * that run down the columns takes two kernels: the columns' largest magnitudes (blocks
 * of 32 columns over a share of k, combined with atomicMax), then 64 x 32 tiles through
 * shared memory so that the reads run along the source rows and the writes along the
 * digit rows. Magnitudes are compared as the unsigned bit patterns of |x|, which order
 * finite values, infinity and NaN as the rule wants. */
#include "gpu/blas/slices.cuh"
#include "gpu/blas/slices.h"
#include "gpu/common.cuh"

__device__ __forceinline__ uint32_t abs_bits(float x) {
    return __float_as_uint(x) & 0x7fffffffu;
}

__device__ __forceinline__ uint32_t warp_max_u32(uint32_t v) {
    for (int o = 16; o > 0; o >>= 1)
        v = max(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

/* lb_slice_scaled as one multiplication where 2^(6-e) is a normal float */
struct scaler {
    int32_t e;
    float f;
    __device__ __forceinline__ explicit scaler(int32_t e_) : e(e_) {
        int x = 6 - e_;
        f = x >= -126 && x <= 127 ? __int_as_float((x + 127) << 23) : 0.0f;
    }
    __device__ __forceinline__ float operator()(float x) const {
        return f != 0.0f ? x * f : lb_slice_scaled(x, e);
    }
};

/* the digit count as a constant, so that digit and plane arrays stay in registers */
#define S LB_SLICES

/* four values' digits into each plane of one row, at column p (p % 4 == 0); y already
 * scaled */
__device__ __forceinline__ void put4(int8_t *row, const float y[4], int64_t kp, bool reversed,
                                     int64_t p) {
    int8_t d[4][S];
#pragma unroll
    for (int q = 0; q < 4; q++)
        lb_slice_digits(y[q], S, d[q]);
#pragma unroll
    for (int i = 0; i < S; i++) {
        int plane = reversed ? S - 1 - i : i;
        *(char4 *)(row + plane * kp + p) = make_char4(d[0][i], d[1][i], d[2][i], d[3][i]);
    }
}

/* rows along memory: one block a row; VEC: 16-byte loads (k, ld multiples of 4, aligned) */
template <bool VEC>
static __global__ void cut_rows_kernel(int8_t *dst, uint32_t *amax, const float *src, int64_t ld,
                                       int64_t k, int64_t kp, bool reversed) {
    __shared__ uint32_t scratch[32];
    const float *x = src + blockIdx.x * ld;
    uint32_t v = 0;
    if (VEC) {
        for (int64_t p = 4 * (int64_t)threadIdx.x; p < k; p += 4 * (int64_t)blockDim.x) {
            float4 f = *(const float4 *)(x + p);
            v = max(max(v, max(abs_bits(f.x), abs_bits(f.y))), max(abs_bits(f.z), abs_bits(f.w)));
        }
    } else {
        for (int64_t p = threadIdx.x; p < k; p += blockDim.x)
            v = max(v, abs_bits(x[p]));
    }
    v = warp_max_u32(v);
    int lane = threadIdx.x & 31, nw = (int)(blockDim.x >> 5);
    if (lane == 0) scratch[threadIdx.x >> 5] = v;
    __syncthreads();
    v = warp_max_u32(lane < nw ? scratch[lane] : 0u);
    if (threadIdx.x == 0) amax[blockIdx.x] = v;
    int32_t e = lb_slice_exponent(__uint_as_float(v));
    bool bad = e == LB_SLICE_NONFINITE; /* zero digits: the product writes NaN for the row */
    scaler sc(bad ? 0 : e);
    int8_t *row = dst + blockIdx.x * (int64_t)S * kp;
    for (int64_t p = 4 * (int64_t)threadIdx.x; p < kp; p += 4 * (int64_t)blockDim.x) {
        float f[4];
        if (VEC && p < k && !bad) {
            float4 g = *(const float4 *)(x + p);
            f[0] = g.x, f[1] = g.y, f[2] = g.z, f[3] = g.w;
        } else {
#pragma unroll
            for (int q = 0; q < 4; q++)
                f[q] = p + q < k && !bad ? x[p + q] : 0.0f;
        }
#pragma unroll
        for (int q = 0; q < 4; q++)
            f[q] = sc(f[q]);
        put4(row, f, kp, reversed, p);
    }
}

#define COL_TILE_R 32
#define COL_TILE_P 64

/* rows down the columns, pass 1: amax[r] = max over a share of k (atomicMax) */
static __global__ void col_amax_kernel(uint32_t *amax, const float *src, int64_t ld, int64_t rows,
                                       int64_t k) {
    __shared__ uint32_t part[8][COL_TILE_R + 1];
    int tx = threadIdx.x & 31, ty = threadIdx.x >> 5;
    int64_t r = (int64_t)blockIdx.x * COL_TILE_R + tx;
    uint32_t v = 0;
    if (r < rows)
        for (int64_t p = (int64_t)blockIdx.y * 8 + ty; p < k; p += 8 * (int64_t)gridDim.y)
            v = max(v, abs_bits(src[p * ld + r]));
    part[ty][tx] = v;
    __syncthreads();
    if (ty == 0 && r < rows) {
        for (int i = 1; i < 8; i++)
            v = max(v, part[i][tx]);
        atomicMax(&amax[r], v);
    }
}

/* rows down the columns, pass 2: a 64 (k) x 32 (rows) tile a block */
static __global__ void col_cut_kernel(int8_t *dst, const uint32_t *amax, const float *src,
                                      int64_t ld, int64_t rows, int64_t k, int64_t kp,
                                      bool reversed) {
    __shared__ float tile[COL_TILE_P][COL_TILE_R + 1];
    int tx = threadIdx.x & 31, ty = threadIdx.x >> 5;
    int64_t r0 = (int64_t)blockIdx.x * COL_TILE_R, p0 = (int64_t)blockIdx.y * COL_TILE_P;
    for (int j = ty; j < COL_TILE_P; j += 8) {
        int64_t p = p0 + j, r = r0 + tx;
        tile[j][tx] = p < k && r < rows ? src[p * ld + r] : 0.0f;
    }
    __syncthreads();
    for (int idx = threadIdx.x; idx < COL_TILE_R * (COL_TILE_P / 4); idx += blockDim.x) {
        int rr = idx / (COL_TILE_P / 4), g = idx % (COL_TILE_P / 4);
        int64_t r = r0 + rr, p = p0 + 4 * g;
        if (r >= rows || p >= kp) continue;
        int32_t e = lb_slice_exponent(__uint_as_float(amax[r]));
        bool bad = e == LB_SLICE_NONFINITE;
        scaler sc(bad ? 0 : e);
        float f[4];
#pragma unroll
        for (int q = 0; q < 4; q++)
            f[q] = bad ? 0.0f : sc(tile[4 * g + q][rr]);
        put4(dst + r * (int64_t)S * kp, f, kp, reversed, p);
    }
}

extern "C" lb_status lb_gpu_slices_cut(int8_t *dst, uint32_t *amax, const float *src, int64_t ld,
                                       bool k_contig, int64_t rows, int64_t k, int64_t kp,
                                       bool reversed, cudaStream_t st, lb_err *err) {
    if (kp < k || kp % 16 != 0)
        return lb_fail(err, LB_ERR_RUNTIME, "digit planes: %lld values padded to %lld",
                       (long long)k, (long long)kp);
    if (rows <= 0) return LB_OK;
    /* a row's block: one thread per four values up to 256 threads */
    int threads = (int)((kp / 4 + 31) / 32 * 32);
    if (threads > 256) threads = 256;
    if (k_contig && k % 4 == 0 && ld % 4 == 0 && lb_aligned16(src)) {
        cut_rows_kernel<true>
            <<<(unsigned)rows, threads, 0, st>>>(dst, amax, src, ld, k, kp, reversed);
    } else if (k_contig) {
        cut_rows_kernel<false>
            <<<(unsigned)rows, threads, 0, st>>>(dst, amax, src, ld, k, kp, reversed);
    } else {
        unsigned gx = (unsigned)((rows + COL_TILE_R - 1) / COL_TILE_R);
        int64_t share = (k + 255) / 256;
        dim3 g1(gx, (unsigned)(share < 1 ? 1 : share > 64 ? 64 : share));
        col_amax_kernel<<<g1, 256, 0, st>>>(amax, src, ld, rows, k);
        dim3 g2(gx, (unsigned)((kp + COL_TILE_P - 1) / COL_TILE_P));
        col_cut_kernel<<<g2, 256, 0, st>>>(dst, amax, src, ld, rows, k, kp, reversed);
    }
    LB_CUDA_LAUNCH_TRY(err);
    return LB_OK;
}

/* one output element from the planes' values at it (plane 1 first) */
__device__ __forceinline__ float combined(const int32_t *pv, int32_t ea, int32_t eb, float alpha) {
    if (ea == LB_SLICE_NONFINITE || eb == LB_SLICE_NONFINITE) return __int_as_float(0x7fc00000);
    long long v = 0;
#pragma unroll
    for (int t = 0; t < S; t++)
        v = v * 128 + pv[t];
    int x = ea + eb - 12 - 7 * (S - 1);
    float f = __ll2float_rn(v);
    return (x >= -126 && x <= 127 ? f * __int_as_float((x + 127) << 23) : ldexpf(f, x)) * alpha;
}

/* rows by blockIdx.y (striding), four columns a thread when VEC (n, ldd multiples of 4,
 * d and c 16-byte aligned), else one */
template <bool VEC>
static __global__ void combine_kernel(float *d, int64_t ldd, const int32_t *p,
                                      const uint32_t *amax_a, const uint32_t *amax_b, int64_t m,
                                      int64_t n, float alpha, const float *c, float beta,
                                      const float *bias) {
    const int W = VEC ? 4 : 1;
    int64_t plane = m * n, j = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) * W;
    if (j >= n) return;
    int32_t eb[4];
    float b[4];
#pragma unroll
    for (int q = 0; q < W; q++) {
        eb[q] = lb_slice_exponent(__uint_as_float(amax_b[j + q]));
        b[q] = bias ? bias[j + q] : 0.0f;
    }
    for (int64_t i = blockIdx.y; i < m; i += gridDim.y) {
        int32_t ea = lb_slice_exponent(__uint_as_float(amax_a[i]));
        int64_t at = i * n + j, o = i * ldd + j;
        int32_t pv[4][S];
#pragma unroll
        for (int t = 0; t < S; t++) {
            if (VEC) {
                int4 x = *(const int4 *)(p + at + t * plane);
                pv[0][t] = x.x, pv[1][t] = x.y, pv[2][t] = x.z, pv[3][t] = x.w;
            } else {
                pv[0][t] = p[at + t * plane];
            }
        }
        float out[4], cin[4];
        if (VEC && c) {
            float4 x = *(const float4 *)(c + o);
            cin[0] = x.x, cin[1] = x.y, cin[2] = x.z, cin[3] = x.w;
        } else if (c) {
            cin[0] = c[o];
        }
#pragma unroll
        for (int q = 0; q < W; q++) {
            out[q] = combined(pv[q], ea, eb[q], alpha);
            if (c) out[q] += beta * cin[q];
            if (bias) out[q] += b[q];
        }
        if (VEC)
            *(float4 *)(d + o) = make_float4(out[0], out[1], out[2], out[3]);
        else
            d[o] = out[0];
    }
}

extern "C" lb_status lb_gpu_slices_combine(float *d, int64_t ldd, const int32_t *p,
                                           const uint32_t *amax_a, const uint32_t *amax_b,
                                           int64_t m, int64_t n, float alpha, const float *c,
                                           float beta, const float *bias, cudaStream_t st,
                                           lb_err *err) {
    if (m <= 0 || n <= 0) return LB_OK;
    bool vec = n % 4 == 0 && ldd % 4 == 0 && lb_aligned16(d) && (c == NULL || lb_aligned16(c));
    int64_t cols = vec ? n / 4 : n;
    dim3 grid((unsigned)((cols + 63) / 64), (unsigned)(m < 65535 ? m : 65535));
    if (vec)
        combine_kernel<true>
            <<<grid, 64, 0, st>>>(d, ldd, p, amax_a, amax_b, m, n, alpha, c, beta, bias);
    else
        combine_kernel<false>
            <<<grid, 64, 0, st>>>(d, ldd, p, amax_a, amax_b, m, n, alpha, c, beta, bias);
    LB_CUDA_LAUNCH_TRY(err);
    return LB_OK;
}
