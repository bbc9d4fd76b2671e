/* paged.cu: the paged KV cache kernels (paged.cuh). */
#include <math.h>

#include "gpu/common.cuh"
#include "kernels/paged.cuh"
#include "kernels/ptx.cuh"

#define PA_WARPS 4

/* Asks the 128-byte line at p into L2; returns nothing. */
static __device__ __forceinline__ void prefetch_l2(const void *p) {
    asm volatile("prefetch.global.L2 [%0];" ::"l"(p));
}

/* A thread per 8 pairs of a rotated head (q then k; k stored too) or per 8 values of v. */
template <typename T>
static __global__ void kv_store_kernel(T *kc, T *vc, T *qkv, const float *cs, const int32_t *pos,
                                       const int32_t *slot, int N, int NH, int NKV, int HD) {
    const int half = HD / 2, per_head = half / 8, rot = (NH + NKV) * per_head;
    const int per_tok = rot + NKV * HD / 8;
    const int64_t row = (int64_t)NKV * HD, QW = (int64_t)(NH + 2 * NKV) * HD;
    const int64_t n = (int64_t)N * per_tok;
    lb_pdl_trigger();
    lb_pdl_wait();
    for (int64_t x = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; x < n;
         x += (int64_t)gridDim.x * blockDim.x) {
        const int64_t i = x / per_tok;
        const int r = (int)(x % per_tok);
        T *src = qkv + i * QW;
        if (r >= rot) { /* v */
            const int c = (r - rot) * 8;
            float v[8];
            lb_ld8(v, src + (NH + NKV) * HD + c);
            lb_st8(vc + (int64_t)slot[i] * row + c, v);
            continue;
        }
        const int h = r / per_head, j = (r % per_head) * 8;
        if (cs == NULL && h < NH) continue;
        T *hx = src + (int64_t)h * HD;
        float a[8], b[8];
        lb_ld8(a, hx + j);
        lb_ld8(b, hx + j + half);
        if (cs != NULL) { /* as kernels/rope.cuh's rotation */
            const float4 *e = (const float4 *)(cs + 2 * ((int64_t)pos[i] * half + j));
            float oa[8], ob[8];
#pragma unroll
            for (int k = 0; k < 4; k++) {
                const float4 v = e[k]; /* cos, sin of pair 2k, then of pair 2k + 1 */
                oa[2 * k] = a[2 * k] * v.x - b[2 * k] * v.y;
                ob[2 * k] = b[2 * k] * v.x + a[2 * k] * v.y;
                oa[2 * k + 1] = a[2 * k + 1] * v.z - b[2 * k + 1] * v.w;
                ob[2 * k + 1] = b[2 * k + 1] * v.z + a[2 * k + 1] * v.w;
            }
            lb_st8(hx + j, oa);
            lb_st8(hx + j + half, ob);
#pragma unroll
            for (int k = 0; k < 8; k++)
                a[k] = lb_to_f(lb_from_f<T>(oa[k])), b[k] = lb_to_f(lb_from_f<T>(ob[k]));
        }
        if (h >= NH) {
            T *dst = kc + (int64_t)slot[i] * row + (int64_t)(h - NH) * HD;
            lb_st8(dst + j, a);
            lb_st8(dst + j + half, b);
        }
    }
}

static __device__ __forceinline__ float warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1)
        v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

static __device__ __forceinline__ float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

/* D consecutive elements (D * sizeof(T) bytes, aligned to that) as one load. */
template <typename T, int D> static __device__ __forceinline__ void load_d(float f[D], const T *p) {
    constexpr int B = D * (int)sizeof(T);
    if constexpr (B == 16) {
        const uint4 r = *(const uint4 *)p;
        const T *e = (const T *)&r;
#pragma unroll
        for (int d = 0; d < D; d++)
            f[d] = lb_to_f(e[d]);
    } else if constexpr (B == 8) {
        const uint2 r = *(const uint2 *)p;
        const T *e = (const T *)&r;
#pragma unroll
        for (int d = 0; d < D; d++)
            f[d] = lb_to_f(e[d]);
    } else {
#pragma unroll
        for (int d = 0; d < D; d++)
            f[d] = lb_to_f(p[d]);
    }
}

/* Warp `warp`'s keys [k0, k1) of a context of len: the block's share (split blockIdx.z of
 * gridDim.z), then a quarter of that per warp, each share a multiple of A keys long. */
template <int A>
static __device__ __forceinline__ void warp_keys(int len, int warp, int &k0, int &k1) {
    const int per = ((len + (int)gridDim.z - 1) / (int)gridDim.z + A - 1) & ~(A - 1);
    const int b0 = min(len, (int)blockIdx.z * per), b1 = min(len, b0 + per);
    const int chunk = ((b1 - b0 + PA_WARPS - 1) / PA_WARPS + A - 1) & ~(A - 1);
    k0 = b0 + warp * chunk;
    k1 = min(b1, k0 + chunk);
}

/* The warps' partial results of a block (running max m_s, sum l_s and unnormalised
 * output o_s of each query head) merged: token i's output for kv head kvh's G heads, or
 * with S splits this split's normalised output and log-sum-exp. */
template <typename T, int HD, int G>
static __device__ void merge_warps(T *out, float *po, float *plse, const float (*m_s)[8],
                                   const float (*l_s)[8], const float (*o_s)[G][HD], int i, int kvh,
                                   int NH, int S) {
    for (int x = threadIdx.x; x < G * HD; x += blockDim.x) {
        const int g = x / HD, c = x % HD, h = kvh * G + g;
        float M = -INFINITY;
        for (int w = 0; w < PA_WARPS; w++)
            M = fmaxf(M, m_s[w][g]);
        float L = 0.0f, O = 0.0f;
        for (int w = 0; w < PA_WARPS; w++)
            if (m_s[w][g] != -INFINITY) {
                const float f = __expf(m_s[w][g] - M);
                L += l_s[w][g] * f;
                O += o_s[w][g][c] * f;
            }
        if (S == 1) {
            out[(int64_t)i * NH * HD + (int64_t)h * HD + c] = lb_from_f<T>(O / L);
        } else { /* this split's normalised output and log-sum-exp (-inf: no keys) */
            const int64_t r = ((int64_t)i * NH + h) * S + blockIdx.z;
            po[r * HD + c] = L > 0.0f ? O / L : 0.0f;
            if (c == 0) plse[r] = L > 0.0f ? M + __logf(L) : -INFINITY;
        }
    }
}

/* G query heads a kv head, a compile-time count: every per-head array stays in registers. */
template <typename T, int HD, int G>
static __global__ void __launch_bounds__(PA_WARPS * 32)
    paged_attention_kernel(T *out, float *po, float *plse, const T *qkv, const T *kc, const T *vc,
                           const int32_t *bt, int max_blocks, const int32_t *seq_of,
                           const int32_t *pos, int NKV, int bs, float scale) {
    constexpr int D = HD / 32; /* dims of the output each lane accumulates */
    const int NH = NKV * G, i = blockIdx.x, kvh = blockIdx.y;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    __shared__ float q_s[G][HD];
    __shared__ float m_s[PA_WARPS][8], l_s[PA_WARPS][8];
    __shared__ float o_s[PA_WARPS][G][HD];
    const int64_t QW = (int64_t)(NH + 2 * NKV) * HD;
    lb_pdl_trigger();
    lb_pdl_wait();
    for (int x = threadIdx.x; x < G * HD; x += blockDim.x)
        q_s[x / HD][x % HD] =
            lb_to_f(qkv[i * QW + (int64_t)(kvh * G + x / HD) * HD + x % HD]) * scale;
    __syncthreads();
    const int len = pos[i] + 1, S = gridDim.z;
    const int32_t *table = bt + (int64_t)seq_of[i] * max_blocks;
    int k0, k1;
    warp_keys<32>(len, warp, k0, k1);
    float m[G], l[G], acc[G][D];
#pragma unroll
    for (int g = 0; g < G; g++) {
        m[g] = -INFINITY;
        l[g] = 0.0f;
#pragma unroll
        for (int d = 0; d < D; d++)
            acc[g][d] = 0.0f;
    }
    for (int t0 = k0; t0 < k1; t0 += 32) {
        const int t = t0 + lane;
        const bool valid = t < k1;
        /* each lane's key slot, read once: the value loop below takes it by shuffle */
        const int64_t slot = valid ? (int64_t)table[t / bs] * bs + t % bs : 0;
        float s[G];
#pragma unroll
        for (int g = 0; g < G; g++)
            s[g] = 0.0f;
        if (valid) {
            const T *k = kc + (slot * NKV + kvh) * HD;
#pragma unroll
            for (int c = 0; c < HD; c += 8) {
                float kf[8];
                lb_ld8(kf, k + c);
#pragma unroll
                for (int g = 0; g < G; g++)
#pragma unroll
                    for (int j = 0; j < 8; j++)
                        s[g] += q_s[g][c + j] * kf[j];
            }
        }
#pragma unroll
        for (int g = 0; g < G; g++) {
            const float mt = warp_max(valid ? s[g] : -INFINITY);
            const float mn = fmaxf(m[g], mt);
            const float corr = __expf(m[g] - mn);
            const float p = valid ? __expf(s[g] - mn) : 0.0f;
            l[g] = l[g] * corr + warp_sum(p);
#pragma unroll
            for (int d = 0; d < D; d++)
                acc[g][d] *= corr;
            m[g] = mn;
            s[g] = p;
        }
        const int nt = min(32, k1 - t0);
#pragma unroll 8
        for (int j = 0; j < nt; j++) {
            const int64_t sj = __shfl_sync(0xffffffffu, slot, j);
            float vf[D];
            load_d<T, D>(vf, vc + (sj * NKV + kvh) * HD + lane * D);
#pragma unroll
            for (int g = 0; g < G; g++) {
                const float p = __shfl_sync(0xffffffffu, s[g], j);
#pragma unroll
                for (int d = 0; d < D; d++)
                    acc[g][d] += p * vf[d];
            }
        }
    }
#pragma unroll
    for (int g = 0; g < G; g++) {
        if (lane == 0) {
            m_s[warp][g] = m[g];
            l_s[warp][g] = l[g];
        }
#pragma unroll
        for (int d = 0; d < D; d++)
            o_s[warp][g][lane * D + d] = acc[g][d];
    }
    __syncthreads();
    merge_warps<T, HD, G>(out, po, plse, m_s, l_s, o_s, i, kvh, NH, S);
}

/* The same attention on tensor cores, for 16-bit types and blocks of a multiple of 16
 * tokens: a warp takes 16 keys a tile (all in one cache block), scores them against the
 * kv head's G query heads as S^T = K Q^T (m16n8k16: keys as rows, heads as columns, G <= 8
 * of the 8 used) and adds P V as O^T = V^T P^T (value dimensions as rows), both from
 * registers loaded straight from the cache: the dimensions of K and Q are permuted alike
 * (a dot product does not care), so that a lane reads 16 contiguous bytes of a key for two
 * k-steps; a lane reads HD/8 contiguous dimensions of four values, and its output rows are
 * those dimensions (dimension HD/8 r + 2 m for row r of m-tile m, + 1 for row r + 8). P
 * goes through shared memory between the two products (the scores' layout has the heads
 * as columns, the second product wants them as columns of its B operand by lane). P is
 * rounded to T for the second product, the softmax sums are fp32. Keys and values of a
 * tile are loaded together, and the next tile's cache block is looked up meanwhile. */
template <typename T, int HD, int G>
static __global__ void __launch_bounds__(PA_WARPS * 32, 4)
    paged_attention_mma_kernel(T *out, float *po, float *plse, const T *qkv, const T *kc,
                               const T *vc, const int32_t *bt, int max_blocks,
                               const int32_t *seq_of, const int32_t *pos, int NKV, int bs,
                               float scale) {
    constexpr int KC = HD / 32; /* 16-byte pieces of a key a lane reads (two k-steps each) */
    constexpr int VU = HD / 64; /* 16-byte pieces of a value a lane reads */
    constexpr int MT = HD / 16; /* m-tiles of the output (value dimensions) */
    const int NH = NKV * G, i = blockIdx.x, kvh = blockIdx.y;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, r = lane / 4, t = lane % 4;
    __shared__ float m_s[PA_WARPS][8], l_s[PA_WARPS][8];
    __shared__ float o_s[PA_WARPS][G][HD];
    __shared__ __align__(16) uint16_t p_s[PA_WARPS][8][16]; /* P^T of a tile: [head][key] */
    const int64_t QW = (int64_t)(NH + 2 * NKV) * HD, SW = (int64_t)NKV * HD;
    lb_pdl_trigger();
    /* Before the wait, what the step's inputs (copied before its first kernel) say: the
     * warp's keys and its first tile's slot; the first tile's keys and values are asked
     * into L2 (a prefetch returns nothing, so a slot the kernel before writes is read
     * after the wait as that kernel left it). */
    const int len = pos[i] + 1, S = gridDim.z;
    const int32_t *table = bt + (int64_t)seq_of[i] * max_blocks;
    int k0, k1;
    warp_keys<16>(len, warp, k0, k1);
    int64_t base = k0 < k1 ? (int64_t)table[k0 / bs] * bs + k0 % bs : 0; /* the tile's slot */
    if (k0 + lane / 2 < k1) {
        const int64_t at = (base + lane / 2) * SW + (int64_t)kvh * HD + (lane & 1) * (HD / 2);
        prefetch_l2(kc + at);
        prefetch_l2(vc + at);
    }
    lb_pdl_wait();
    /* Q as the scores' B operand: head r, dimensions 32 c + 8 t .. + 8 (zero past G) */
    uint4 qb[KC];
#pragma unroll
    for (int c = 0; c < KC; c++)
        qb[c] = r < G
                    ? *(const uint4 *)(qkv + i * QW + (int64_t)(kvh * G + r) * HD + 32 * c + 8 * t)
                    : make_uint4(0, 0, 0, 0);
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f}; /* heads 2t, 2t + 1 */
    float acc[MT][4];
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
        acc[mt][0] = acc[mt][1] = acc[mt][2] = acc[mt][3] = 0.0f;
    for (int t0 = k0; t0 < k1; t0 += 16) {
        const int64_t next =
            t0 + 16 < k1 ? (int64_t)table[(t0 + 16) / bs] * bs + (t0 + 16) % bs : 0;
        /* keys r and r + 8 of the tile; values 2t, 2t + 1, 2t + 8, 2t + 9 (zero past k1:
         * a slot nothing wrote may hold any bits, and 0 * NaN is not 0) */
        uint4 ka[KC], kb[KC], v[4][VU];
        const T *kr = kc + (base + r) * SW + (int64_t)kvh * HD + 8 * t;
#pragma unroll
        for (int c = 0; c < KC; c++) {
            ka[c] = *(const uint4 *)(kr + 32 * c);
            kb[c] = *(const uint4 *)(kr + 8 * SW + 32 * c);
        }
#pragma unroll
        for (int j = 0; j < 4; j++) {
            const int key = 2 * t + (j & 1) + 8 * (j >> 1);
            const bool ok = t0 + key < k1;
            const T *vr = vc + (base + key) * SW + (int64_t)kvh * HD + (HD / 8) * r;
#pragma unroll
            for (int u = 0; u < VU; u++)
                v[j][u] = ok ? *(const uint4 *)(vr + 8 * u) : make_uint4(0, 0, 0, 0);
        }
        base = next;
        float sc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
        for (int c = 0; c < KC; c++) {
            const uint32_t *a0 = (const uint32_t *)&ka[c], *a1 = (const uint32_t *)&kb[c];
            const uint32_t *b = (const uint32_t *)&qb[c];
#pragma unroll
            for (int h = 0; h < 2; h++) {
                const uint32_t a[4] = {a0[2 * h], a1[2 * h], a0[2 * h + 1], a1[2 * h + 1]};
                mma_op<T>::run(sc, a, b[2 * h], b[2 * h + 1]);
            }
        }
        /* sc: keys r (0, 1) and r + 8 (2, 3) of heads 2t, 2t + 1 */
        const bool ok0 = t0 + r < k1, ok1 = t0 + r + 8 < k1;
        float p[4];
#pragma unroll
        for (int e = 0; e < 2; e++) {
            const float s0 = ok0 ? sc[e] * scale : -INFINITY;
            const float s1 = ok1 ? sc[e + 2] * scale : -INFINITY;
            float mx = fmaxf(s0, s1);
            for (int o = 4; o < 32; o <<= 1)
                mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
            const float mn = fmaxf(m[e], mx); /* finite: key t0 is valid */
            const float corr = __expf(m[e] - mn);
            p[e] = __expf(s0 - mn);
            p[e + 2] = __expf(s1 - mn);
            float sum = p[e] + p[e + 2];
            for (int o = 4; o < 32; o <<= 1)
                sum += __shfl_xor_sync(0xffffffffu, sum, o);
            l[e] = l[e] * corr + sum;
            m[e] = mn;
#pragma unroll
            for (int mt = 0; mt < MT; mt++)
                acc[mt][e] *= corr, acc[mt][e + 2] *= corr;
        }
        uint16_t(*ps)[16] = p_s[warp];
        __syncwarp();
#pragma unroll
        for (int e = 0; e < 4; e++) {
            const T pe = lb_from_f<T>(p[e]);
            ps[2 * t + (e & 1)][r + 8 * (e >> 1)] = *(const uint16_t *)&pe;
        }
        __syncwarp();
        /* P^T as the B operand: keys 2t, 2t + 1 (and + 8) of head r */
        const uint32_t pb0 = *(const uint32_t *)&ps[r][2 * t];
        const uint32_t pb1 = *(const uint32_t *)&ps[r][2 * t + 8];
#pragma unroll
        for (int mt = 0; mt < MT; mt++) {
            /* m-tile mt: this lane's word mt of each value (dimensions HD/8 r + 2 mt, + 1) */
            const int u = mt / 4, w = mt % 4;
            const uint32_t x0 = ((const uint32_t *)&v[0][u])[w],
                           x1 = ((const uint32_t *)&v[1][u])[w];
            const uint32_t x2 = ((const uint32_t *)&v[2][u])[w],
                           x3 = ((const uint32_t *)&v[3][u])[w];
            const uint32_t a[4] = {__byte_perm(x0, x1, 0x5410), __byte_perm(x0, x1, 0x7632),
                                   __byte_perm(x2, x3, 0x5410), __byte_perm(x2, x3, 0x7632)};
            mma_op<T>::run(acc[mt], a, pb0, pb1);
        }
    }
    /* acc: value dimension HD/8 r + 2 mt (0, 1) and + 1 (2, 3) of heads 2t, 2t + 1 */
    if (r == 0)
#pragma unroll
        for (int e = 0; e < 2; e++)
            m_s[warp][2 * t + e] = m[e], l_s[warp][2 * t + e] = l[e];
#pragma unroll
    for (int e = 0; e < 2; e++)
        if (2 * t + e < G)
#pragma unroll
            for (int mt = 0; mt < MT; mt++) {
                o_s[warp][2 * t + e][(HD / 8) * r + 2 * mt] = acc[mt][e];
                o_s[warp][2 * t + e][(HD / 8) * r + 2 * mt + 1] = acc[mt][e + 2];
            }
    __syncthreads();
    merge_warps<T, HD, G>(out, po, plse, m_s, l_s, o_s, i, kvh, NH, S);
}

/* out [N, NH*HD] from the S splits' outputs, weighted by exp(lse_z - lse) where lse is
 * the log of the splits' summed exp(lse_z). One block of HD threads a (token, head); every
 * split's log-sum-exp and output are loaded at once (a split without keys has output 0 and
 * weight 0), so the merge waits on about one trip to L2 rather than one a split. */
template <typename T>
static __global__ void paged_merge_kernel(T *out, const float *po, const float *plse, int NH,
                                          int HD, int S) {
    const int64_t r = (int64_t)blockIdx.x * NH + blockIdx.y;
    lb_pdl_trigger();
    lb_pdl_wait();
    float lse[LB_PAGED_MAX_SPLITS], M = -INFINITY;
#pragma unroll
    for (int z = 0; z < LB_PAGED_MAX_SPLITS; z++) {
        lse[z] = z < S ? plse[r * S + z] : -INFINITY;
        M = fmaxf(M, lse[z]);
    }
    for (int c = threadIdx.x; c < HD; c += blockDim.x) {
        float o[LB_PAGED_MAX_SPLITS];
#pragma unroll
        for (int z = 0; z < LB_PAGED_MAX_SPLITS; z++)
            o[z] = z < S ? po[(r * S + z) * HD + c] : 0.0f;
        float L = 0.0f, O = 0.0f;
#pragma unroll
        for (int z = 0; z < LB_PAGED_MAX_SPLITS; z++) {
            const float f = lse[z] != -INFINITY ? __expf(lse[z] - M) : 0.0f;
            L += f;
            O += f * o[z];
        }
        out[r * HD + c] = lb_from_f<T>(O / L);
    }
}

/* The attention kernel for E: on tensor cores where E is 16-bit and `mma` allows. */
template <typename E, int HD, int G> static auto pa_kernel(bool mma) {
    if constexpr (sizeof(E) == 2)
        if (mma) return &paged_attention_mma_kernel<E, HD, G>;
    return &paged_attention_kernel<E, HD, G>;
}

extern "C" lb_status lb_paged_kv_store(void *k_cache, void *v_cache, void *qkv, const float *cs,
                                       const int32_t *pos, const int32_t *slot, int N, int NH,
                                       int NKV, int HD, lb_gpu_dtype dt, cudaStream_t s,
                                       lb_err *err) {
    if (HD % 16 != 0) return lb_fail(err, LB_ERR_UNSUPPORTED, "kv_store needs HD a multiple of 16");
    const int64_t n = (int64_t)N * ((NH + NKV) * HD / 16 + NKV * HD / 8);
    LB_DISPATCH_DTYPE(dt, E,
                      lb_launch_pdl(kv_store_kernel<E>, lb_grid_cap(n, 256), 256, 0, s,
                                    (E *)k_cache, (E *)v_cache, (E *)qkv, cs, pos, slot, N, NH, NKV,
                                    HD));
    LB_CUDA_LAUNCH_TRY(err);
    return LB_OK;
}

extern "C" int lb_paged_splits(int N, int NKV, int n_sm) {
    const int blocks = N * NKV;
    if (N < 1 || blocks >= n_sm) return 1;
    const int S = (2 * n_sm + blocks - 1) / blocks;
    return S < LB_PAGED_MAX_SPLITS ? S : LB_PAGED_MAX_SPLITS;
}

extern "C" size_t lb_paged_scratch_bytes(int N, int NH, int HD, int n_split) {
    return n_split <= 1 ? 0 : (size_t)N * NH * n_split * (HD + 1) * sizeof(float);
}

extern "C" lb_status lb_paged_attention(void *out, void *scratch, int n_split, const void *qkv,
                                        const void *k_cache, const void *v_cache,
                                        const int32_t *block_table, int max_blocks,
                                        const int32_t *seq_of, const int32_t *pos, int N, int NH,
                                        int NKV, int HD, int block_size, lb_gpu_dtype dt,
                                        cudaStream_t s, lb_err *err) {
    const int G = NKV > 0 && NH % NKV == 0 ? NH / NKV : 0;
    if ((G != 1 && G != 2 && G != 4 && G != 8) || (HD != 64 && HD != 128))
        return lb_fail(err, LB_ERR_UNSUPPORTED,
                       "paged attention runs head size 64 or 128 with 1, 2, 4 or 8 query heads "
                       "per kv head (asked: %d, %d of %d)",
                       HD, NH, NKV);
    if (n_split < 1 || n_split > LB_PAGED_MAX_SPLITS || (n_split > 1 && scratch == NULL))
        return lb_fail(err, LB_ERR_USAGE,
                       "paged attention splits a context 1 to %d ways, with scratch when more "
                       "than 1 (asked: %d)",
                       LB_PAGED_MAX_SPLITS, n_split);
    if (N == 0) return LB_OK;
    dim3 grid((unsigned)N, (unsigned)NKV, (unsigned)n_split);
    const float scale = 1.0f / sqrtf((float)HD);
    float *po = (float *)scratch, *plse = po ? po + (size_t)N * NH * n_split * HD : NULL;
    /* tensor cores for 16-bit types over blocks of whole 16-key tiles */
    const bool mma = block_size % 16 == 0;
#define PA_KERNEL(E, HDV, GV) pa_kernel<E, HDV, GV>(mma)
#define PA_LAUNCH(E, HDV, GV)                                                                      \
    lb_launch_pdl(PA_KERNEL(E, HDV, GV), grid, PA_WARPS * 32, 0, s, (E *)out, po, plse,            \
                  (const E *)qkv, (const E *)k_cache, (const E *)v_cache, block_table, max_blocks, \
                  seq_of, pos, NKV, block_size, scale)
#define PA_GROUPS(E, HDV)                                                                          \
    switch (NH / NKV) {                                                                            \
    case 1: PA_LAUNCH(E, HDV, 1); break;                                                           \
    case 2: PA_LAUNCH(E, HDV, 2); break;                                                           \
    case 4: PA_LAUNCH(E, HDV, 4); break;                                                           \
    default: PA_LAUNCH(E, HDV, 8); break;                                                          \
    }
    if (HD == 64)
        LB_DISPATCH_DTYPE(dt, E, PA_GROUPS(E, 64));
    else
        LB_DISPATCH_DTYPE(dt, E, PA_GROUPS(E, 128));
#undef PA_GROUPS
#undef PA_LAUNCH
#undef PA_KERNEL
    LB_CUDA_LAUNCH_TRY(err);
    if (n_split > 1) {
        LB_DISPATCH_DTYPE(dt, E,
                          lb_launch_pdl(paged_merge_kernel<E>, dim3((unsigned)N, (unsigned)NH), HD,
                                        0, s, (E *)out, po, plse, NH, HD, n_split));
        LB_CUDA_LAUNCH_TRY(err);
    }
    return LB_OK;
}
