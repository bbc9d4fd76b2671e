/* attention.cu: the attention kernels (attention.cuh).
 *
 * Tensor-core path, fragment conventions of mma.sync.m16n8k16 (row.col), lane = 4g + t:
 *   A (16x16): a0 = (g, 2t..2t+1), a1 = (g+8, 2t..), a2 = (g, 2t+8..), a3 = (g+8, 2t+8..)
 *   B (16x8, k x n): b0 = (k 2t..2t+1, n g), b1 = (k 2t+8.., n g)
 *   C (16x8): c0,c1 = (g, 2t..2t+1), c2,c3 = (g+8, 2t..2t+1)
 * so two adjacent C tiles of a score matrix are exactly the A fragment of the next
 * product (P V): probabilities never leave registers in the forward. A B operand stored
 * [n][k] (K for Q K^T) is read with 32-bit shared loads; one stored [k][n] (V for P V) with
 * ldmatrix.trans. Softmax runs in base 2 (scores pre-multiplied by log2 e / sqrt(HD)).
 * Tiles go global -> shared with 16-byte loads; rows are padded by 8 elements so the
 * fragment loads hit 32 distinct banks. Backward is two kernels (dK/dV per key tile, dQ
 * per query tile) so that no gradient needs atomics; each recomputes the probabilities. */
#include "gpu/attention.cuh"
#include "gpu/common.cuh"

#define LOG2E 1.4426950408889634f
#define LN2 0.6931471805599453f

/* ------------------------------------------------------------------------------------ */
/* tensor-core helpers                                                                   */

template <typename T> struct mma_op;
template <> struct mma_op<__nv_bfloat16> {
    static __device__ __forceinline__ void run(float c[4], const uint32_t a[4], uint32_t b0,
                                               uint32_t b1) {
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, "
                     "{%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                     : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    }
    static __device__ __forceinline__ uint32_t pack(float lo, float hi) {
        __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
        return *reinterpret_cast<uint32_t *>(&v);
    }
};
template <> struct mma_op<__half> {
    static __device__ __forceinline__ void run(float c[4], const uint32_t a[4], uint32_t b0,
                                               uint32_t b1) {
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, "
                     "{%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                     : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    }
    static __device__ __forceinline__ uint32_t pack(float lo, float hi) {
        __half2 v = __floats2half2_rn(lo, hi);
        return *reinterpret_cast<uint32_t *>(&v);
    }
};

/* Two adjacent 16x8 accumulator tiles (keys 0-7 and 8-15 of a 16-key step) as the A
 * fragment of the next product, rounded to T. */
template <typename T>
__device__ __forceinline__ void afrag_from_c(uint32_t a[4], const float c0[4], const float c1[4]) {
    a[0] = mma_op<T>::pack(c0[0], c0[1]);
    a[1] = mma_op<T>::pack(c0[2], c0[3]);
    a[2] = mma_op<T>::pack(c1[0], c1[1]);
    a[3] = mma_op<T>::pack(c1[2], c1[3]);
}

__device__ __forceinline__ void ldsm_x2_trans(uint32_t &r0, uint32_t &r1, const void *p) {
    uint32_t a = (uint32_t)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0,%1}, [%2];\n"
                 : "=r"(r0), "=r"(r1)
                 : "r"(a));
}
__device__ __forceinline__ void ldsm_x4_trans(uint32_t r[4], const void *p) {
    uint32_t a = (uint32_t)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a));
}
__device__ __forceinline__ uint32_t lds32(const void *p) { return *(const uint32_t *)p; }

#define TILE 64 /* queries and keys per tile */

/* rows [row0, row0+64) of a [*, ld] matrix (columns col0..col0+HD) into s[64][HD+8];
 * rows at or past n_rows are zero. */
template <typename T, int HD>
__device__ __forceinline__ void load_tile(T *s, const T *g, int64_t ld, int row0, int n_rows) {
    constexpr int VPR = HD / 8, LDS = HD + 8;
    for (int i = threadIdx.x; i < TILE * VPR; i += blockDim.x) {
        int r = i / VPR, c = (i % VPR) * 8;
        uint4 v = make_uint4(0u, 0u, 0u, 0u);
        if (row0 + r < n_rows) v = *(const uint4 *)(g + (int64_t)(row0 + r) * ld + c);
        *(uint4 *)(s + r * LDS + c) = v;
    }
}

/* A fragments of rows r0..r0+15 of a [*][LDS] shared tile, k = 16 ks .. 16 ks + 15. */
template <int LDS, typename T>
__device__ __forceinline__ void load_afrag(uint32_t a[4], const T *s, int r0, int ks, int g,
                                           int t) {
    const T *p = s + (r0 + g) * LDS + ks * 16 + 2 * t;
    a[0] = lds32(p);
    a[1] = lds32(p + 8 * LDS);
    a[2] = lds32(p + 8);
    a[3] = lds32(p + 8 * LDS + 8);
}

template <typename T, int HD>
__global__ void __launch_bounds__(128)
attn_fwd_mma_kernel(T *out, float *lse, const T *qkv, int T_, int NH, int NKV) {
    constexpr int LDS = HD + 8;
    extern __shared__ __align__(16) unsigned char smem[];
    T *sQ = (T *)smem, *sK = sQ + TILE * LDS, *sV = sK + TILE * LDS;
    int qt = gridDim.x - 1 - blockIdx.x; /* the longest tiles first */
    int h = blockIdx.y, b = blockIdx.z, kvh = h / (NH / NKV);
    int64_t W = (int64_t)(NH + 2 * NKV) * HD;
    const T *base = qkv + (int64_t)b * T_ * W;
    int q0 = qt * TILE;
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;

    load_tile<T, HD>(sQ, base + h * HD, W, q0, T_);
    __syncthreads();
    uint32_t qf[HD / 16][4];
#pragma unroll
    for (int ks = 0; ks < HD / 16; ks++) load_afrag<LDS>(qf[ks], sQ, warp * 16, ks, g, t);

    float o[HD / 8][4];
#pragma unroll
    for (int i = 0; i < HD / 8; i++) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.0f;
    float mrow[2] = {-INFINITY, -INFINITY}, lrow[2] = {0.0f, 0.0f};
    const float sl2 = rsqrtf((float)HD) * LOG2E;
    int qrow[2] = {q0 + warp * 16 + g, q0 + warp * 16 + g + 8};
    int kend = min(q0 + TILE, T_);
    for (int k0 = 0; k0 < kend; k0 += TILE) {
        __syncthreads();
        load_tile<T, HD>(sK, base + (NH + kvh) * HD, W, k0, T_);
        load_tile<T, HD>(sV, base + (NH + NKV + kvh) * HD, W, k0, T_);
        __syncthreads();
        float sc[TILE / 8][4];
#pragma unroll
        for (int nt = 0; nt < TILE / 8; nt++) {
            sc[nt][0] = sc[nt][1] = sc[nt][2] = sc[nt][3] = 0.0f;
#pragma unroll
            for (int ks = 0; ks < HD / 16; ks++) {
                const T *p = sK + (nt * 8 + g) * LDS + ks * 16 + 2 * t;
                mma_op<T>::run(sc[nt], qf[ks], lds32(p), lds32(p + 8));
            }
        }
        float mx[2] = {mrow[0], mrow[1]};
#pragma unroll
        for (int nt = 0; nt < TILE / 8; nt++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                int key = k0 + nt * 8 + 2 * t + (e & 1);
                float v = sc[nt][e] * sl2;
                if (key > qrow[e >> 1] || key >= T_) v = -INFINITY;
                sc[nt][e] = v;
                mx[e >> 1] = fmaxf(mx[e >> 1], v);
            }
        float corr[2], ms[2], ls[2] = {0.0f, 0.0f};
#pragma unroll
        for (int i = 0; i < 2; i++) {
            mx[i] = fmaxf(mx[i], __shfl_xor_sync(0xffffffffu, mx[i], 1));
            mx[i] = fmaxf(mx[i], __shfl_xor_sync(0xffffffffu, mx[i], 2));
            ms[i] = mx[i] == -INFINITY ? 0.0f : mx[i];
            corr[i] = exp2f(mrow[i] - ms[i]);
            mrow[i] = mx[i];
        }
#pragma unroll
        for (int nt = 0; nt < TILE / 8; nt++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                float p = exp2f(sc[nt][e] - ms[e >> 1]);
                sc[nt][e] = p;
                ls[e >> 1] += p;
            }
#pragma unroll
        for (int i = 0; i < 2; i++) lrow[i] = lrow[i] * corr[i] + ls[i];
#pragma unroll
        for (int d = 0; d < HD / 8; d++) {
            o[d][0] *= corr[0];
            o[d][1] *= corr[0];
            o[d][2] *= corr[1];
            o[d][3] *= corr[1];
        }
#pragma unroll
        for (int kk = 0; kk < TILE / 16; kk++) {
            uint32_t a[4];
                afrag_from_c<T>(a, sc[2 * kk], sc[2 * kk + 1]);
#pragma unroll
            for (int d = 0; d < HD / 8; d++) {
                uint32_t b0, b1;
                ldsm_x2_trans(b0, b1, sV + (kk * 16 + (lane & 15)) * LDS + d * 8);
                mma_op<T>::run(o[d], a, b0, b1);
            }
        }
    }
#pragma unroll
    for (int i = 0; i < 2; i++) {
        lrow[i] += __shfl_xor_sync(0xffffffffu, lrow[i], 1);
        lrow[i] += __shfl_xor_sync(0xffffffffu, lrow[i], 2);
    }
    int64_t ldo = (int64_t)NH * HD;
#pragma unroll
    for (int i = 0; i < 2; i++) {
        if (qrow[i] >= T_) continue;
        float inv = 1.0f / lrow[i];
        T *orow = out + ((int64_t)b * T_ + qrow[i]) * ldo + h * HD;
#pragma unroll
        for (int d = 0; d < HD / 8; d++)
            *(uint32_t *)(orow + d * 8 + 2 * t) =
                mma_op<T>::pack(o[d][2 * i] * inv, o[d][2 * i + 1] * inv);
        if (t == 0) lse[((int64_t)b * NH + h) * T_ + qrow[i]] = mrow[i] * LN2 + logf(lrow[i]);
    }
}

/* dK, dV per 64-key tile; warp w owns keys w*16..w*16+15, whose dK and dV stay in
 * registers over every query tile of every head of the group. It works on transposed
 * scores (S^T = K Q^T) so that P^T and dS^T are A operands straight from registers. */
template <typename T, int HD>
__global__ void __launch_bounds__(128)
attn_bwd_kv_mma_kernel(T *dqkv, const T *dout, const T *qkv, const float *lse,
                       const float *Dsum, int T_, int NH, int NKV) {
    constexpr int LDS = HD + 8;
    extern __shared__ __align__(16) unsigned char smem[];
    T *sK = (T *)smem, *sV = sK + TILE * LDS, *sQ = sV + TILE * LDS, *sdO = sQ + TILE * LDS;
    float *sL = (float *)(sdO + TILE * LDS), *sD = sL + TILE;
    int kt = blockIdx.x, kvh = blockIdx.y, b = blockIdx.z, G = NH / NKV;
    int64_t W = (int64_t)(NH + 2 * NKV) * HD, ldo = (int64_t)NH * HD;
    const T *base = qkv + (int64_t)b * T_ * W;
    int k0 = kt * TILE;
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const float scale = rsqrtf((float)HD), sl2 = scale * LOG2E;

    load_tile<T, HD>(sK, base + (NH + kvh) * HD, W, k0, T_);
    load_tile<T, HD>(sV, base + (NH + NKV + kvh) * HD, W, k0, T_);
    __syncthreads();
    uint32_t kf[HD / 16][4], vf[HD / 16][4];
#pragma unroll
    for (int ks = 0; ks < HD / 16; ks++) {
        load_afrag<LDS>(kf[ks], sK, warp * 16, ks, g, t);
        load_afrag<LDS>(vf[ks], sV, warp * 16, ks, g, t);
    }
    float dk[HD / 8][4], dv[HD / 8][4];
#pragma unroll
    for (int i = 0; i < HD / 8; i++)
#pragma unroll
        for (int e = 0; e < 4; e++) dk[i][e] = dv[i][e] = 0.0f;
    int key[2] = {k0 + warp * 16 + g, k0 + warp * 16 + g + 8};

    for (int hh = 0; hh < G; hh++) {
        int h = kvh * G + hh;
        for (int q0 = k0; q0 < T_; q0 += TILE) {
            __syncthreads();
            load_tile<T, HD>(sQ, base + h * HD, W, q0, T_);
            load_tile<T, HD>(sdO, dout + (int64_t)b * T_ * ldo + h * HD, ldo, q0, T_);
            for (int i = threadIdx.x; i < TILE; i += blockDim.x) {
                int q = q0 + i;
                int64_t idx = ((int64_t)b * NH + h) * T_ + q;
                sL[i] = q < T_ ? lse[idx] * LOG2E : INFINITY;
                sD[i] = q < T_ ? Dsum[idx] : 0.0f;
            }
            __syncthreads();
            /* S^T = K_w Q^T (16 keys x 64 queries), then P^T */
            float st[TILE / 8][4];
#pragma unroll
            for (int nt = 0; nt < TILE / 8; nt++) {
                st[nt][0] = st[nt][1] = st[nt][2] = st[nt][3] = 0.0f;
#pragma unroll
                for (int ks = 0; ks < HD / 16; ks++) {
                    const T *p = sQ + (nt * 8 + g) * LDS + ks * 16 + 2 * t;
                    mma_op<T>::run(st[nt], kf[ks], lds32(p), lds32(p + 8));
                }
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    int ql = nt * 8 + 2 * t + (e & 1);
                    int q = q0 + ql;
                    st[nt][e] = (q >= key[e >> 1]) ? exp2f(st[nt][e] * sl2 - sL[ql]) : 0.0f;
                }
            }
            /* dV_w += P^T dO */
#pragma unroll
            for (int kk = 0; kk < TILE / 16; kk++) {
                uint32_t a[4];
                afrag_from_c<T>(a, st[2 * kk], st[2 * kk + 1]);
#pragma unroll
                for (int d = 0; d < HD / 8; d++) {
                    uint32_t b0, b1;
                    ldsm_x2_trans(b0, b1, sdO + (kk * 16 + (lane & 15)) * LDS + d * 8);
                    mma_op<T>::run(dv[d], a, b0, b1);
                }
            }
            /* dP^T = V_w dO^T, then dS^T = P^T (dP^T - D) */
            float ds[TILE / 8][4];
#pragma unroll
            for (int nt = 0; nt < TILE / 8; nt++) {
                ds[nt][0] = ds[nt][1] = ds[nt][2] = ds[nt][3] = 0.0f;
#pragma unroll
                for (int ks = 0; ks < HD / 16; ks++) {
                    const T *p = sdO + (nt * 8 + g) * LDS + ks * 16 + 2 * t;
                    mma_op<T>::run(ds[nt], vf[ks], lds32(p), lds32(p + 8));
                }
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    int ql = nt * 8 + 2 * t + (e & 1);
                    ds[nt][e] = st[nt][e] * (ds[nt][e] - sD[ql]);
                }
            }
            /* dK_w += dS^T Q (scale applied at the end) */
#pragma unroll
            for (int kk = 0; kk < TILE / 16; kk++) {
                uint32_t a[4];
                afrag_from_c<T>(a, ds[2 * kk], ds[2 * kk + 1]);
#pragma unroll
                for (int d = 0; d < HD / 8; d++) {
                    uint32_t b0, b1;
                    ldsm_x2_trans(b0, b1, sQ + (kk * 16 + (lane & 15)) * LDS + d * 8);
                    mma_op<T>::run(dk[d], a, b0, b1);
                }
            }
        }
    }
#pragma unroll
    for (int i = 0; i < 2; i++) {
        if (key[i] >= T_) continue;
        T *row = dqkv + ((int64_t)b * T_ + key[i]) * W;
#pragma unroll
        for (int d = 0; d < HD / 8; d++) {
            *(uint32_t *)(row + (NH + kvh) * HD + d * 8 + 2 * t) =
                mma_op<T>::pack(dk[d][2 * i] * scale, dk[d][2 * i + 1] * scale);
            *(uint32_t *)(row + (NH + NKV + kvh) * HD + d * 8 + 2 * t) =
                mma_op<T>::pack(dv[d][2 * i], dv[d][2 * i + 1]);
        }
    }
}

/* dQ per 64-query tile (the forward's shape): warp w owns queries w*16..w*16+15 and walks
 * the key tiles up to the diagonal, recomputing P and dP; no atomics. */
template <typename T, int HD>
__global__ void __launch_bounds__(128)
attn_bwd_q_mma_kernel(T *dqkv, const T *dout, const T *qkv, const float *lse, const float *Dsum,
                      int T_, int NH, int NKV) {
    constexpr int LDS = HD + 8;
    extern __shared__ __align__(16) unsigned char smem[];
    T *sQ = (T *)smem, *sdO = sQ + TILE * LDS, *sK = sdO + TILE * LDS, *sV = sK + TILE * LDS;
    int qt = gridDim.x - 1 - blockIdx.x;
    int h = blockIdx.y, b = blockIdx.z, kvh = h / (NH / NKV);
    int64_t W = (int64_t)(NH + 2 * NKV) * HD, ldo = (int64_t)NH * HD;
    const T *base = qkv + (int64_t)b * T_ * W;
    int q0 = qt * TILE;
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const float scale = rsqrtf((float)HD), sl2 = scale * LOG2E;
    load_tile<T, HD>(sQ, base + h * HD, W, q0, T_);
    load_tile<T, HD>(sdO, dout + (int64_t)b * T_ * ldo + h * HD, ldo, q0, T_);
    __syncthreads();
    uint32_t qf[HD / 16][4], of[HD / 16][4];
#pragma unroll
    for (int ks = 0; ks < HD / 16; ks++) {
        load_afrag<LDS>(qf[ks], sQ, warp * 16, ks, g, t);
        load_afrag<LDS>(of[ks], sdO, warp * 16, ks, g, t);
    }
    int qrow[2] = {q0 + warp * 16 + g, q0 + warp * 16 + g + 8};
    float L2[2], Dq[2];
#pragma unroll
    for (int i = 0; i < 2; i++) {
        int64_t idx = ((int64_t)b * NH + h) * T_ + qrow[i];
        L2[i] = qrow[i] < T_ ? lse[idx] * LOG2E : INFINITY;
        Dq[i] = qrow[i] < T_ ? Dsum[idx] : 0.0f;
    }
    float dq[HD / 8][4];
#pragma unroll
    for (int i = 0; i < HD / 8; i++) dq[i][0] = dq[i][1] = dq[i][2] = dq[i][3] = 0.0f;
    int kend = min(q0 + TILE, T_);
    for (int k0 = 0; k0 < kend; k0 += TILE) {
        __syncthreads();
        load_tile<T, HD>(sK, base + (NH + kvh) * HD, W, k0, T_);
        load_tile<T, HD>(sV, base + (NH + NKV + kvh) * HD, W, k0, T_);
        __syncthreads();
        float ds[TILE / 8][4];
#pragma unroll
        for (int nt = 0; nt < TILE / 8; nt++) {
            float sc[4] = {0.0f, 0.0f, 0.0f, 0.0f}, dp[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
            for (int ks = 0; ks < HD / 16; ks++) {
                const T *pk = sK + (nt * 8 + g) * LDS + ks * 16 + 2 * t;
                const T *pv = sV + (nt * 8 + g) * LDS + ks * 16 + 2 * t;
                mma_op<T>::run(sc, qf[ks], lds32(pk), lds32(pk + 8));
                mma_op<T>::run(dp, of[ks], lds32(pv), lds32(pv + 8));
            }
#pragma unroll
            for (int e = 0; e < 4; e++) {
                int key = k0 + nt * 8 + 2 * t + (e & 1);
                float p = (key <= qrow[e >> 1]) ? exp2f(sc[e] * sl2 - L2[e >> 1]) : 0.0f;
                ds[nt][e] = p * (dp[e] - Dq[e >> 1]);
            }
        }
#pragma unroll
        for (int kk = 0; kk < TILE / 16; kk++) {
            uint32_t a[4];
                afrag_from_c<T>(a, ds[2 * kk], ds[2 * kk + 1]);
#pragma unroll
            for (int d = 0; d < HD / 8; d++) {
                uint32_t b0, b1;
                ldsm_x2_trans(b0, b1, sK + (kk * 16 + (lane & 15)) * LDS + d * 8);
                mma_op<T>::run(dq[d], a, b0, b1);
            }
        }
    }
#pragma unroll
    for (int i = 0; i < 2; i++) {
        if (qrow[i] >= T_) continue;
        T *row = dqkv + ((int64_t)b * T_ + qrow[i]) * W + h * HD;
#pragma unroll
        for (int d = 0; d < HD / 8; d++)
            *(uint32_t *)(row + d * 8 + 2 * t) =
                mma_op<T>::pack(dq[d][2 * i] * scale, dq[d][2 * i + 1] * scale);
    }
}

/* ------------------------------------------------------------------------------------ */
/* scalar path                                                                           */

#define SQ 64 /* queries (or keys) per block, one per thread */
#define SK 32 /* keys (or queries) staged in shared memory at a time */

template <typename T, int HD>
__global__ void attn_fwd_scalar_kernel(T *out, float *lse, const T *qkv, int T_, int NH, int NKV) {
    __shared__ float sK[SK][HD], sV[SK][HD];
    int h = blockIdx.y, b = blockIdx.z, kvh = h / (NH / NKV);
    int64_t W = (int64_t)(NH + 2 * NKV) * HD;
    const T *base = qkv + (int64_t)b * T_ * W;
    int q0 = (gridDim.x - 1 - blockIdx.x) * SQ, qi = q0 + threadIdx.x;
    const float scale = rsqrtf((float)HD);
    float q[HD], acc[HD];
    float m = -INFINITY, l = 0.0f;
#pragma unroll
    for (int d = 0; d < HD; d++) {
        q[d] = qi < T_ ? lb_to_f(base[(int64_t)qi * W + h * HD + d]) * scale : 0.0f;
        acc[d] = 0.0f;
    }
    int kend = min(q0 + SQ, T_);
    for (int k0 = 0; k0 < kend; k0 += SK) {
        __syncthreads();
        for (int i = threadIdx.x; i < SK * HD; i += blockDim.x) {
            int r = i / HD, d = i % HD, key = k0 + r;
            sK[r][d] = key < T_ ? lb_to_f(base[(int64_t)key * W + (NH + kvh) * HD + d]) : 0.0f;
            sV[r][d] = key < T_ ? lb_to_f(base[(int64_t)key * W + (NH + NKV + kvh) * HD + d]) : 0.0f;
        }
        __syncthreads();
        if (qi >= T_) continue;
        for (int j = 0; j < SK && k0 + j <= qi; j++) {
            float s = 0.0f;
#pragma unroll
            for (int d = 0; d < HD; d++) s += q[d] * sK[j][d];
            if (s > m) {
                float c = __expf(m - s);
                l *= c;
#pragma unroll
                for (int d = 0; d < HD; d++) acc[d] *= c;
                m = s;
            }
            float p = __expf(s - m);
            l += p;
#pragma unroll
            for (int d = 0; d < HD; d++) acc[d] += p * sV[j][d];
        }
    }
    if (qi >= T_) return;
    T *o = out + ((int64_t)b * T_ + qi) * NH * HD + h * HD;
#pragma unroll
    for (int d = 0; d < HD; d++) o[d] = lb_from_f<T>(acc[d] / l);
    lse[((int64_t)b * NH + h) * T_ + qi] = m + logf(l);
}

/* D[b,h,t] = sum_d dout * out, one warp per row. */
template <typename T>
__global__ void attn_dsum_kernel(float *Dsum, const T *dout, const T *out, int B,
                                 int T_, int NH, int HD) {
    int64_t row = (int64_t)blockIdx.x * 8 + (threadIdx.x >> 5); /* (b, t, h) */
    int lane = threadIdx.x & 31;
    if (row >= (int64_t)B * T_ * NH) return;
    int h = (int)(row % NH);
    int64_t bt = row / NH;
    const T *a = dout + row * HD, *o = out + row * HD;
    float s = 0.0f;
    for (int d = lane; d < HD; d += 32) {
        s += lb_to_f(a[d]) * lb_to_f(o[d]);
    }
    s = lb_warp_sum(s);
    if (lane == 0) Dsum[((bt / T_) * NH + h) * T_ + bt % T_] = s;
}

/* dK, dV: one thread per key; query rows of every head of the group staged in shared. */
template <typename T, int HD>
__global__ void attn_bwd_kv_scalar_kernel(T *dqkv, const T *dout, const T *qkv, const float *lse,
                                          const float *Dsum, int T_, int NH, int NKV) {
    extern __shared__ float sh[];
    float *sk = sh, *sv = sk + SQ * (HD + 1); /* own rows, padded */
    float *sq = sv + SQ * (HD + 1), *sdo = sq + SK * HD, *sl = sdo + SK * HD, *sd = sl + SK;
    int kvh = blockIdx.y, b = blockIdx.z, G = NH / NKV;
    int64_t W = (int64_t)(NH + 2 * NKV) * HD, ldo = (int64_t)NH * HD;
    const T *base = qkv + (int64_t)b * T_ * W;
    int k0 = blockIdx.x * SQ, kj = k0 + threadIdx.x;
    const float scale = rsqrtf((float)HD);
    for (int d = 0; d < HD; d++) {
        sk[threadIdx.x * (HD + 1) + d] = kj < T_ ? lb_to_f(base[(int64_t)kj * W + (NH + kvh) * HD + d]) : 0.0f;
        sv[threadIdx.x * (HD + 1) + d] = kj < T_ ? lb_to_f(base[(int64_t)kj * W + (NH + NKV + kvh) * HD + d]) : 0.0f;
    }
    float dk[HD], dv[HD];
#pragma unroll
    for (int d = 0; d < HD; d++) dk[d] = dv[d] = 0.0f;
    const float *myk = sk + threadIdx.x * (HD + 1), *myv = sv + threadIdx.x * (HD + 1);
    for (int hh = 0; hh < G; hh++) {
        int h = kvh * G + hh;
        for (int qs = k0; qs < T_; qs += SK) {
            __syncthreads();
            for (int i = threadIdx.x; i < SK * HD; i += blockDim.x) {
                int r = i / HD, d = i % HD, q = qs + r;
                sq[i] = q < T_ ? lb_to_f(base[(int64_t)q * W + h * HD + d]) : 0.0f;
                sdo[i] = q < T_ ? lb_to_f(dout[((int64_t)b * T_ + q) * ldo + h * HD + d]) : 0.0f;
            }
            for (int i = threadIdx.x; i < SK; i += blockDim.x) {
                int q = qs + i;
                sl[i] = q < T_ ? lse[((int64_t)b * NH + h) * T_ + q] : INFINITY;
                sd[i] = q < T_ ? Dsum[((int64_t)b * NH + h) * T_ + q] : 0.0f;
            }
            __syncthreads();
            if (kj >= T_) continue;
            for (int r = 0; r < SK; r++) {
                if (qs + r < kj) continue;
                const float *qr = sq + r * HD, *dor = sdo + r * HD;
                float s = 0.0f, dp = 0.0f;
#pragma unroll
                for (int d = 0; d < HD; d++) {
                    s += qr[d] * myk[d];
                    dp += dor[d] * myv[d];
                }
                float p = __expf(s * scale - sl[r]);
                float ds = p * (dp - sd[r]) * scale;
#pragma unroll
                for (int d = 0; d < HD; d++) {
                    dv[d] += p * dor[d];
                    dk[d] += ds * qr[d];
                }
            }
        }
    }
    if (kj >= T_) return;
    T *row = dqkv + ((int64_t)b * T_ + kj) * W;
#pragma unroll
    for (int d = 0; d < HD; d++) {
        row[(NH + kvh) * HD + d] = lb_from_f<T>(dk[d]);
        row[(NH + NKV + kvh) * HD + d] = lb_from_f<T>(dv[d]);
    }
}

/* dQ: one thread per query. */
template <typename T, int HD>
__global__ void attn_bwd_q_scalar_kernel(T *dqkv, const T *dout, const T *qkv, const float *lse,
                                         const float *Dsum, int T_, int NH, int NKV) {
    extern __shared__ float sh[];
    float *sdo = sh, *sk = sdo + SQ * (HD + 1), *sv = sk + SK * HD;
    int h = blockIdx.y, b = blockIdx.z, kvh = h / (NH / NKV);
    int64_t W = (int64_t)(NH + 2 * NKV) * HD, ldo = (int64_t)NH * HD;
    const T *base = qkv + (int64_t)b * T_ * W;
    int q0 = (gridDim.x - 1 - blockIdx.x) * SQ, qi = q0 + threadIdx.x;
    const float scale = rsqrtf((float)HD);
    float q[HD], dq[HD];
    float *mydo = sdo + threadIdx.x * (HD + 1);
#pragma unroll
    for (int d = 0; d < HD; d++) {
        q[d] = qi < T_ ? lb_to_f(base[(int64_t)qi * W + h * HD + d]) : 0.0f;
        mydo[d] = qi < T_ ? lb_to_f(dout[((int64_t)b * T_ + qi) * ldo + h * HD + d]) : 0.0f;
        dq[d] = 0.0f;
    }
    float L = qi < T_ ? lse[((int64_t)b * NH + h) * T_ + qi] : 0.0f;
    float Dq = qi < T_ ? Dsum[((int64_t)b * NH + h) * T_ + qi] : 0.0f;
    int kend = min(q0 + SQ, T_);
    for (int k0 = 0; k0 < kend; k0 += SK) {
        __syncthreads();
        for (int i = threadIdx.x; i < SK * HD; i += blockDim.x) {
            int r = i / HD, d = i % HD, key = k0 + r;
            sk[i] = key < T_ ? lb_to_f(base[(int64_t)key * W + (NH + kvh) * HD + d]) : 0.0f;
            sv[i] = key < T_ ? lb_to_f(base[(int64_t)key * W + (NH + NKV + kvh) * HD + d]) : 0.0f;
        }
        __syncthreads();
        if (qi >= T_) continue;
        for (int j = 0; j < SK && k0 + j <= qi; j++) {
            float s = 0.0f, dp = 0.0f;
#pragma unroll
            for (int d = 0; d < HD; d++) {
                s += q[d] * sk[j * HD + d];
                dp += mydo[d] * sv[j * HD + d];
            }
            float p = __expf(s * scale - L);
            float ds = p * (dp - Dq) * scale;
#pragma unroll
            for (int d = 0; d < HD; d++) dq[d] += ds * sk[j * HD + d];
        }
    }
    if (qi >= T_) return;
    T *row = dqkv + ((int64_t)b * T_ + qi) * W + h * HD;
#pragma unroll
    for (int d = 0; d < HD; d++) row[d] = lb_from_f<T>(dq[d]);
}

/* ------------------------------------------------------------------------------------ */
/* launchers                                                                             */

static bool use_mma(lb_gpu_dtype dt, int HD, lb_gpu_attn_impl impl) {
    return impl == LB_ATTN_AUTO && dt != LB_DT_F32 && HD == 64;
}

extern "C" size_t lb_gpu_attention_scratch_bytes(int B, int T, int NH, int HD) {
    (void)HD;
    return (size_t)B * NH * T * sizeof(float);
}

template <typename T, int HD>
static lb_status fwd_scalar(void *out, float *lse, const void *qkv, int B, int T_, int NH,
                            int NKV, cudaStream_t s, lb_err *err) {
    dim3 grid((unsigned)((T_ + SQ - 1) / SQ), (unsigned)NH, (unsigned)B);
    attn_fwd_scalar_kernel<T, HD><<<grid, SQ, 0, s>>>((T *)out, lse, (const T *)qkv, T_, NH, NKV);
    LB_CUDA_LAUNCH_TRY(err);
    return LB_OK;
}

template <typename T, int HD>
static lb_status bwd_scalar(void *dqkv, float *Dsum, const void *dout, const void *qkv,
                            const float *lse, int B, int T_, int NH, int NKV, cudaStream_t s,
                            lb_err *err) {
    size_t smem_kv = (2 * SQ * (HD + 1) + 2 * SK * HD + 2 * SK) * sizeof(float);
    size_t smem_q = (SQ * (HD + 1) + 2 * SK * HD) * sizeof(float);
    LB_CUDA_TRY(err, cudaFuncSetAttribute(attn_bwd_kv_scalar_kernel<T, HD>,
                                          cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem_kv));
    LB_CUDA_TRY(err, cudaFuncSetAttribute(attn_bwd_q_scalar_kernel<T, HD>,
                                          cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem_q));
    unsigned nt = (unsigned)((T_ + SQ - 1) / SQ);
    attn_bwd_kv_scalar_kernel<T, HD><<<dim3(nt, (unsigned)NKV, (unsigned)B), SQ, smem_kv, s>>>(
        (T *)dqkv, (const T *)dout, (const T *)qkv, lse, Dsum, T_, NH, NKV);
    LB_CUDA_LAUNCH_TRY(err);
    attn_bwd_q_scalar_kernel<T, HD><<<dim3(nt, (unsigned)NH, (unsigned)B), SQ, smem_q, s>>>(
        (T *)dqkv, (const T *)dout, (const T *)qkv, lse, Dsum, T_, NH, NKV);
    LB_CUDA_LAUNCH_TRY(err);
    return LB_OK;
}

template <typename T>
static lb_status fwd_mma(void *out, float *lse, const void *qkv, int B, int T_, int NH, int NKV,
                         cudaStream_t s, lb_err *err) {
    constexpr int HD = 64;
    size_t smem = 3 * TILE * (HD + 8) * sizeof(T);
    dim3 grid((unsigned)((T_ + TILE - 1) / TILE), (unsigned)NH, (unsigned)B);
    attn_fwd_mma_kernel<T, HD><<<grid, 128, smem, s>>>((T *)out, lse, (const T *)qkv, T_, NH, NKV);
    LB_CUDA_LAUNCH_TRY(err);
    return LB_OK;
}

template <typename T>
static lb_status bwd_mma(void *dqkv, float *Dsum, const void *dout, const void *qkv,
                         const float *lse, int B, int T_, int NH, int NKV, cudaStream_t s,
                         lb_err *err) {
    constexpr int HD = 64;
    size_t smem_kv = 4 * TILE * (HD + 8) * sizeof(T) + 2 * TILE * sizeof(float);
    size_t smem_q = 4 * TILE * (HD + 8) * sizeof(T);
    LB_CUDA_TRY(err, cudaFuncSetAttribute(attn_bwd_kv_mma_kernel<T, HD>,
                                          cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem_kv));
    LB_CUDA_TRY(err, cudaFuncSetAttribute(attn_bwd_q_mma_kernel<T, HD>,
                                          cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem_q));
    unsigned nt = (unsigned)((T_ + TILE - 1) / TILE);
    attn_bwd_kv_mma_kernel<T, HD><<<dim3(nt, (unsigned)NKV, (unsigned)B), 128, smem_kv, s>>>(
        (T *)dqkv, (const T *)dout, (const T *)qkv, lse, Dsum, T_, NH, NKV);
    LB_CUDA_LAUNCH_TRY(err);
    attn_bwd_q_mma_kernel<T, HD><<<dim3(nt, (unsigned)NH, (unsigned)B), 128, smem_q, s>>>(
        (T *)dqkv, (const T *)dout, (const T *)qkv, lse, Dsum, T_, NH, NKV);
    LB_CUDA_LAUNCH_TRY(err);
    return LB_OK;
}

#define HD_DISPATCH(HD, ...)                                                                \
    switch (HD) {                                                                          \
    case 8: { constexpr int HDC = 8; __VA_ARGS__; } break;                                 \
    case 16: { constexpr int HDC = 16; __VA_ARGS__; } break;                               \
    case 32: { constexpr int HDC = 32; __VA_ARGS__; } break;                               \
    case 64: { constexpr int HDC = 64; __VA_ARGS__; } break;                               \
    case 128: { constexpr int HDC = 128; __VA_ARGS__; } break;                             \
    default:                                                                               \
        return lb_fail(err, LB_ERR_UNSUPPORTED,                                            \
                       "attention supports head sizes 8, 16, 32, 64 and 128, not %d", HD);        \
    }

static lb_status check_heads(int NH, int NKV, lb_err *err) {
    if (NKV <= 0 || NH % NKV != 0)
        return lb_fail(err, LB_ERR_UNSUPPORTED, "attention needs n_head (%d) divisible by "
                       "n_kv_head (%d)", NH, NKV);
    return LB_OK;
}

extern "C" lb_status lb_gpu_attention_forward(void *out, float *lse, const void *qkv, int B, int T,
                                              int NH, int NKV, int HD, lb_gpu_dtype dt,
                                              lb_gpu_attn_impl impl, cudaStream_t s, lb_err *err) {
    LB_TRY(check_heads(NH, NKV, err));
    if (use_mma(dt, HD, impl)) {
        if (dt == LB_DT_BF16) return fwd_mma<__nv_bfloat16>(out, lse, qkv, B, T, NH, NKV, s, err);
        return fwd_mma<__half>(out, lse, qkv, B, T, NH, NKV, s, err);
    }
    HD_DISPATCH(HD, LB_DISPATCH_DTYPE(dt, E,
        return (fwd_scalar<E, HDC>(out, lse, qkv, B, T, NH, NKV, s, err))));
    return LB_OK;
}

extern "C" lb_status lb_gpu_attention_backward(void *dqkv, void *scratch, const void *dout,
                                               const void *qkv, const void *out,
                                               const float *lse, int B, int T, int NH, int NKV,
                                               int HD, lb_gpu_dtype dt, lb_gpu_attn_impl impl,
                                               cudaStream_t s, lb_err *err) {
    LB_TRY(check_heads(NH, NKV, err));
    float *Dsum = (float *)scratch;
    bool mma = use_mma(dt, HD, impl);
    int64_t rows = (int64_t)B * T * NH;
    LB_DISPATCH_DTYPE(dt, E,
        attn_dsum_kernel<E><<<lb_blocks(rows, 8), 256, 0, s>>>(Dsum,
                                                                (const E *)dout, (const E *)out,
                                                                B, T, NH, HD));
    LB_CUDA_LAUNCH_TRY(err);
    if (mma) {
        if (dt == LB_DT_BF16)
            return bwd_mma<__nv_bfloat16>(dqkv, Dsum, dout, qkv, lse, B, T, NH, NKV, s, err);
        return bwd_mma<__half>(dqkv, Dsum, dout, qkv, lse, B, T, NH, NKV, s, err);
    }
    HD_DISPATCH(HD, LB_DISPATCH_DTYPE(dt, E,
        return (bwd_scalar<E, HDC>(dqkv, Dsum, dout, qkv, lse, B, T, NH, NKV, s, err))));
    return LB_OK;
}
