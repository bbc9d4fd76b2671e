/* attention.cu: the attention kernels (attention.cuh).
 *
 * Tensor-core path, fragment conventions of mma.sync.m16n8k16 (row.col), lane = 4g + t:
 *   A (16x16): a0 = (g, 2t..2t+1), a1 = (g+8, 2t..), a2 = (g, 2t+8..), a3 = (g+8, 2t+8..)
 *   B (16x8, k x n): b0 = (k 2t..2t+1, n g), b1 = (k 2t+8.., n g)
 *   C (16x8): c0,c1 = (g, 2t..2t+1), c2,c3 = (g+8, 2t..2t+1)
 * so two adjacent C tiles of a score matrix are exactly the A fragment of the next
 * product (P V): probabilities never leave registers. Every shared operand is read with
 * ldmatrix.x4 (.trans where it is stored [k][n]); rows are padded by 8 elements so the
 * eight rows of each 8x8 matrix hit distinct banks. Tiles go global -> shared through
 * cp.async in a two-stage pipeline. Softmax runs in base 2 (scores times log2 e /
 * sqrt(HD)); only tiles that cross the diagonal or the sequence end are masked. Backward
 * is one kernel per key block (dK, dV in registers) whose dQ contributions are added with
 * fp32 atomics (16-byte vector reductions on sm_90), so dQ's summation order, and its last
 * bits, can vary between runs. On sm_90 (binaries with sm_90a code) the backward runs on
 * warpgroup MMAs instead (attn_bwd_wgmma_kernel, same accumulator and passes); the
 * mma.sync backward serves other GPUs and LB_ATTN_MMA_SYNC.
 *
 * CUDA-core tiled path (HD 64 without tensor cores, fp32 arithmetic): the same blocks,
 * grids and dQ accumulator, with each 64 x 64 product an SGEMM-style register tiling: 256
 * threads, a 4 x 4 block of outputs each, operands as fp32 in shared memory with padded
 * rows (float4 reads without bank conflicts). Probabilities and dS pass through shared
 * memory between the products. It does not use TF32 or any tensor-core instruction. */
#include "gpu/common.cuh"
#include "kernels/act.cuh"
#include "kernels/attention.cuh"

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

/* Two adjacent 16x8 accumulator tiles (columns 0-7 and 8-15 of a 16-wide step) as the A
 * fragment of the next product, rounded to T. */
template <typename T>
__device__ __forceinline__ void afrag_from_c(uint32_t a[4], const float c0[4], const float c1[4]) {
    a[0] = mma_op<T>::pack(c0[0], c0[1]);
    a[1] = mma_op<T>::pack(c0[2], c0[3]);
    a[2] = mma_op<T>::pack(c1[0], c1[1]);
    a[3] = mma_op<T>::pack(c1[2], c1[3]);
}

__device__ __forceinline__ void ldsm_x4(uint32_t r[4], const void *p) {
    uint32_t a = (uint32_t)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a));
}
__device__ __forceinline__ void ldsm_x4_trans(uint32_t r[4], const void *p) {
    uint32_t a = (uint32_t)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a));
}

/* Asynchronous global -> shared copies; an invalid source copies nothing and zero-fills. */
__device__ __forceinline__ void cp_async16(void *dst, const void *src, bool valid) {
    uint32_t d = (uint32_t)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(d), "l"(src),
                 "r"(valid ? 16 : 0));
}
__device__ __forceinline__ void cp_async4(void *dst, const void *src, bool valid) {
    uint32_t d = (uint32_t)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(d), "l"(src),
                 "r"(valid ? 4 : 0));
}
__device__ __forceinline__ void cp_async_commit() {
    asm volatile("cp.async.commit_group;\n");
}
template <int N> __device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

#define HDM 64  /* the head size of the tensor-core and CUDA-core tiled paths */
#define LDS 72  /* shared row stride in elements: HDM + 8 */
#define KT  64  /* forward: keys per tile */
#define FQ  128 /* forward: queries per block */
#define FW  4   /* forward: warps per block, 32 queries each */
#define BK  64  /* backward: keys per block, 16 per warp */
#define BW  4   /* backward: warps per block (3 blocks an SM: 168 registers a thread) */
#define BQ  64  /* backward: queries per tile */

/* Starts copying rows [row0, row0+ROWS) of a [*, ld] matrix (HDM columns from g) into
 * s[ROWS][LDS]; rows at or past n_rows become zero. */
template <typename T, int ROWS>
__device__ __forceinline__ void tile_async(T *s, const T *g, int64_t ld, int row0, int n_rows) {
    constexpr int VPR = HDM / 8;
    for (int i = threadIdx.x; i < ROWS * VPR; i += blockDim.x) {
        int r = i / VPR, c = (i % VPR) * 8;
        bool ok = row0 + r < n_rows;
        cp_async16(s + r * LDS + c, g + (int64_t)(ok ? row0 + r : 0) * ld + c, ok);
    }
}

/* Starts copying the lse and Dsum of NQ queries from q0 (one head's rows of both, from
 * row0) into sL[NQ] and sD[NQ] by the block's first 2 NQ threads; queries at or past T_
 * copy nothing (zero). */
template <int NQ>
__device__ __forceinline__ void rowstats_async(float *sL, float *sD, const float *lse,
                                               const float *Dsum, int64_t row0, int q0, int T_) {
    int i = threadIdx.x;
    if (i < 2 * NQ) {
        int r = i & (NQ - 1), q = q0 + r;
        const float *src = (i < NQ ? lse : Dsum) + row0;
        cp_async4((i < NQ ? sL : sD) + r, src + (q < T_ ? q : 0), q < T_);
    }
}

/* A fragments (16 rows from r0, all HDM columns) of a [*][LDS] shared tile. */
template <typename T>
__device__ __forceinline__ void afrags(uint32_t a[HDM / 16][4], const T *s, int r0, int lane) {
#pragma unroll
    for (int ks = 0; ks < HDM / 16; ks++)
        ldsm_x4(a[ks], s + (r0 + (lane & 15)) * LDS + ks * 16 + (lane >> 4) * 8);
}

/* acc[nt] += A (16 x HDM) * S^T for the 8 rows nt*8.. of a [rows][LDS] shared tile S: the
 * product of A with 64 rows of S (keys for Q K^T, queries for K Q^T). */
template <typename T>
__device__ __forceinline__ void mma_abt(float acc[8][4], const uint32_t a[HDM / 16][4], const T *s,
                                        int lane) {
#pragma unroll
    for (int nt = 0; nt < 8; nt++) {
        uint32_t b[8];
        const T *p = s + (nt * 8 + (lane & 7)) * LDS + (lane >> 3) * 8;
        ldsm_x4(b, p);
        ldsm_x4(b + 4, p + 32);
        mma_op<T>::run(acc[nt], a[0], b[0], b[1]);
        mma_op<T>::run(acc[nt], a[1], b[2], b[3]);
        mma_op<T>::run(acc[nt], a[2], b[4], b[5]);
        mma_op<T>::run(acc[nt], a[3], b[6], b[7]);
    }
}

/* acc[d] += P (16 x 64, accumulator layout) * S (64 rows x HDM) for a [64][LDS] shared
 * tile S (V for P V, dO for P^T dO, Q for dS^T Q): P is the A operand straight from
 * registers, S's fragments come through ldmatrix.trans. */
template <typename T>
__device__ __forceinline__ void mma_pv(float acc[8][4], const float p[8][4], const T *s, int lane) {
#pragma unroll
    for (int kk = 0; kk < 4; kk++) {
        uint32_t a[4];
        afrag_from_c<T>(a, p[2 * kk], p[2 * kk + 1]);
#pragma unroll
        for (int dp = 0; dp < 4; dp++) {
            uint32_t b[4];
            ldsm_x4_trans(b, s + (kk * 16 + (lane & 15)) * LDS + (2 * dp + (lane >> 4)) * 8);
            mma_op<T>::run(acc[2 * dp], a, b[0], b[1]);
            mma_op<T>::run(acc[2 * dp + 1], a, b[2], b[3]);
        }
    }
}

/* dS = P o (dP - D) in place, for the 8 column tiles of a transposed (key-major) score
 * fragment: d holds dP^T, p the probabilities P^T, cD the query rows' D = rowsum(dO o O)
 * (thread t of a quad owns query columns 2t and 2t + 1 of each tile). */
static __device__ __forceinline__ void softmax_grad8(float d[8][4], const float p[8][4],
                                                     const float *cD, int t) {
#pragma unroll
    for (int nt = 0; nt < 8; nt++) {
        float2 D = *(const float2 *)(cD + nt * 8 + 2 * t);
        d[nt][0] = p[nt][0] * (d[nt][0] - D.x);
        d[nt][1] = p[nt][1] * (d[nt][1] - D.y);
        d[nt][2] = p[nt][2] * (d[nt][2] - D.x);
        d[nt][3] = p[nt][3] * (d[nt][3] - D.y);
    }
}
static __device__ __forceinline__ void zero8x4(float x[8][4]) {
#pragma unroll
    for (int i = 0; i < 8; i++)
        x[i][0] = x[i][1] = x[i][2] = x[i][3] = 0.0f;
}
static __device__ __forceinline__ void zero4x4(float x[4][4]) {
#pragma unroll
    for (int i = 0; i < 4; i++)
        x[i][0] = x[i][1] = x[i][2] = x[i][3] = 0.0f;
}

/* Where a forward block of `rows` queries works, in a 1-D grid in order of decreasing
 * work (every head's last query tile first): its first query, head and batch, batch b's
 * qkv rows and the key and value columns of the head's kv head there. */
template <typename T> struct fwd_tile {
    int q0, h, b;
    const T *base, *gK, *gV;
};
template <typename T>
__device__ __forceinline__ fwd_tile<T> fwd_tile_of(const T *qkv, int rows, int B, int T_, int NH,
                                                   int NKV) {
    int rest = blockIdx.x % (NH * B), h = rest % NH, b = rest / NH, kvh = h / (NH / NKV);
    int qt = (T_ + rows - 1) / rows - 1 - (int)(blockIdx.x / (NH * B));
    const T *base = qkv + (int64_t)b * T_ * (NH + 2 * NKV) * HDM;
    return {qt * rows, h, b, base, base + (NH + kvh) * HDM, base + (NH + NKV + kvh) * HDM};
}

/* Masks one 16-row m-tile's 64 scores (keys from k0; rows qrow[0], qrow[1] for lane
 * quad t): keys after the query or at or past the sequence end get -inf. */
__device__ __forceinline__ void mask_scores(float sc[8][4], int k0, const int qrow[2], int t,
                                            int T_) {
#pragma unroll
    for (int nt = 0; nt < 8; nt++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
            int key = k0 + nt * 8 + 2 * t + (e & 1);
            if (key > qrow[e >> 1] || key >= T_) sc[nt][e] = -INFINITY;
        }
}

/* One online-softmax step of a 16-row m-tile in base 2: the raw scores sc become
 * probabilities against the rows' new running maxima (scores times sl2 = log2 e /
 * sqrt(HD)), o is rescaled, mrow and lrow (this lane's partial sums) updated. Row maxima
 * and sums as trees, not 16-long dependent chains. */
__device__ __forceinline__ void online_softmax(float sc[8][4], float mrow[2], float lrow[2],
                                               float o[8][4], float sl2) {
    float mx[2], corr[2], ms[2], ls[2];
#pragma unroll
    for (int i = 0; i < 2; i++) {
        float m4[4];
#pragma unroll
        for (int j = 0; j < 4; j++)
            m4[j] = fmaxf(fmaxf(sc[2 * j][2 * i], sc[2 * j][2 * i + 1]),
                          fmaxf(sc[2 * j + 1][2 * i], sc[2 * j + 1][2 * i + 1]));
        mx[i] = fmaxf(fmaxf(m4[0], m4[1]), fmaxf(m4[2], m4[3]));
    }
#pragma unroll
    for (int i = 0; i < 2; i++) {
        mx[i] = fmaxf(mx[i], __shfl_xor_sync(0xffffffffu, mx[i], 1));
        mx[i] = fmaxf(mx[i], __shfl_xor_sync(0xffffffffu, mx[i], 2));
        float mnew = fmaxf(mrow[i], mx[i] * sl2);
        ms[i] = mnew == -INFINITY ? 0.0f : mnew;
        corr[i] = lb_exp2(mrow[i] - ms[i]);
        mrow[i] = mnew;
    }
#pragma unroll
    for (int nt = 0; nt < 8; nt++)
#pragma unroll
        for (int e = 0; e < 4; e++)
            sc[nt][e] = lb_exp2(fmaf(sc[nt][e], sl2, -ms[e >> 1]));
#pragma unroll
    for (int i = 0; i < 2; i++) {
        float s4[4];
#pragma unroll
        for (int j = 0; j < 4; j++)
            s4[j] = (sc[2 * j][2 * i] + sc[2 * j][2 * i + 1]) +
                    (sc[2 * j + 1][2 * i] + sc[2 * j + 1][2 * i + 1]);
        ls[i] = (s4[0] + s4[1]) + (s4[2] + s4[3]);
    }
#pragma unroll
    for (int i = 0; i < 2; i++)
        lrow[i] = lrow[i] * corr[i] + ls[i];
#pragma unroll
    for (int d = 0; d < 8; d++) {
        o[d][0] *= corr[0];
        o[d][1] *= corr[0];
        o[d][2] *= corr[1];
        o[d][3] *= corr[1];
    }
}

/* Writes a 16-row m-tile of the output, o / l rounded to T, and the rows' lse (natural
 * log); rows at or past the sequence end are skipped. */
template <typename T>
__device__ __forceinline__ void store_rows(T *out, float *lse, const float o[8][4],
                                           const float mrow[2], const float lrow[2],
                                           const int qrow[2], int t, int b, int h, int T_, int NH) {
    int64_t ldo = (int64_t)NH * HDM;
#pragma unroll
    for (int i = 0; i < 2; i++) {
        float l = lrow[i];
        l += __shfl_xor_sync(0xffffffffu, l, 1);
        l += __shfl_xor_sync(0xffffffffu, l, 2);
        int q = qrow[i];
        if (q >= T_) continue;
        float inv = 1.0f / l;
        T *orow = out + ((int64_t)b * T_ + q) * ldo + h * HDM;
#pragma unroll
        for (int d = 0; d < 8; d++)
            *(uint32_t *)(orow + d * 8 + 2 * t) =
                mma_op<T>::pack(o[d][2 * i] * inv, o[d][2 * i + 1] * inv);
        if (t == 0) lse[((int64_t)b * NH + h) * T_ + q] = mrow[i] * LN2 + logf(l);
    }
}

/* Forward: one block per 128 queries of one head, 4 warps, warp w owning queries
 * w*32..w*32+31 as two 16-row m-tiles, so that every K and V fragment read from shared
 * memory feeds two products. K/V tiles of 64 keys stream through a two-stage cp.async
 * pipeline; only tiles that cross the diagonal or the sequence end are masked, and a warp
 * skips tiles wholly above its diagonal. */
template <typename T>
__global__ void __launch_bounds__(FW * 32, 2)
    attn_fwd_mma_kernel(T *out, float *lse, const T *qkv, int B, int T_, int NH, int NKV) {
    extern __shared__ __align__(16) unsigned char smem[];
    T *sQ = (T *)smem, *sK = sQ + FQ * LDS, *sV = sK + 2 * KT * LDS;
    fwd_tile<T> ft = fwd_tile_of(qkv, FQ, B, T_, NH, NKV);
    int q0 = ft.q0, h = ft.h, b = ft.b;
    const T *base = ft.base, *gK = ft.gK, *gV = ft.gV;
    int64_t W = (int64_t)(NH + 2 * NKV) * HDM;
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    int n_kt = (min(q0 + FQ, T_) + KT - 1) / KT;
    int wq0 = q0 + warp * 32;
    int qrow[2][2] = {{wq0 + g, wq0 + g + 8}, {wq0 + 16 + g, wq0 + 24 + g}};
    const float sl2 = rsqrtf((float)HDM) * LB_LOG2E;

    tile_async<T, FQ>(sQ, base + h * HDM, W, q0, T_);
    tile_async<T, KT>(sK, gK, W, 0, T_);
    tile_async<T, KT>(sV, gV, W, 0, T_);
    cp_async_commit();

    uint32_t qf[2][HDM / 16][4];
    float o[2][8][4];
    zero8x4(o[0]);
    zero8x4(o[1]);
    float mrow[2][2] = {{-INFINITY, -INFINITY}, {-INFINITY, -INFINITY}};
    float lrow[2][2] = {{0.0f, 0.0f}, {0.0f, 0.0f}};
    for (int j = 0; j < n_kt; j++) {
        if (j + 1 < n_kt) {
            int nb = (j + 1) & 1;
            tile_async<T, KT>(sK + nb * KT * LDS, gK, W, (j + 1) * KT, T_);
            tile_async<T, KT>(sV + nb * KT * LDS, gV, W, (j + 1) * KT, T_);
            cp_async_commit();
            cp_async_wait<1>();
        } else {
            cp_async_wait<0>();
        }
        __syncthreads();
        if (j == 0) {
            afrags(qf[0], sQ, warp * 32, lane);
            afrags(qf[1], sQ, warp * 32 + 16, lane);
        }
        int k0 = j * KT;
        if (k0 <= wq0 + 31 && wq0 < T_) {
            const T *cK = sK + (j & 1) * KT * LDS, *cV = sV + (j & 1) * KT * LDS;
            float sc[2][8][4];
            zero8x4(sc[0]);
            zero8x4(sc[1]);
#pragma unroll
            for (int nt = 0; nt < 8; nt++) {
                uint32_t kb[8];
                const T *p = cK + (nt * 8 + (lane & 7)) * LDS + (lane >> 3) * 8;
                ldsm_x4(kb, p);
                ldsm_x4(kb + 4, p + 32);
#pragma unroll
                for (int ks = 0; ks < 4; ks++)
#pragma unroll
                    for (int mt = 0; mt < 2; mt++) /* two independent chains interleaved */
                        mma_op<T>::run(sc[mt][nt], qf[mt][ks], kb[2 * ks], kb[2 * ks + 1]);
            }
            if (k0 + KT - 1 > wq0 || k0 + KT > T_) {
                mask_scores(sc[0], k0, qrow[0], t, T_);
                mask_scores(sc[1], k0, qrow[1], t, T_);
            }
            online_softmax(sc[0], mrow[0], lrow[0], o[0], sl2);
            online_softmax(sc[1], mrow[1], lrow[1], o[1], sl2);
#pragma unroll
            for (int kk = 0; kk < 4; kk++) {
                uint32_t a[2][4];
                afrag_from_c<T>(a[0], sc[0][2 * kk], sc[0][2 * kk + 1]);
                afrag_from_c<T>(a[1], sc[1][2 * kk], sc[1][2 * kk + 1]);
#pragma unroll
                for (int dp = 0; dp < 4; dp++) {
                    uint32_t vb[4];
                    ldsm_x4_trans(vb,
                                  cV + (kk * 16 + (lane & 15)) * LDS + (2 * dp + (lane >> 4)) * 8);
#pragma unroll
                    for (int mt = 0; mt < 2; mt++) {
                        mma_op<T>::run(o[mt][2 * dp], a[mt], vb[0], vb[1]);
                        mma_op<T>::run(o[mt][2 * dp + 1], a[mt], vb[2], vb[3]);
                    }
                }
            }
        }
        __syncthreads();
    }
    store_rows(out, lse, o[0], mrow[0], lrow[0], qrow[0], t, b, h, T_, NH);
    store_rows(out, lse, o[1], mrow[1], lrow[1], qrow[1], t, b, h, T_, NH);
}

/* ------------------------------------------------------------------------------------ */
/* warpgroup MMA backward (sm_90a)                                                       */
/* wgmma.mma_async: one warpgroup (4 warps) multiplies a 64-row A by B into an fp32
 * accumulator laid out per warp as mma.sync's C (warp w: rows 16w..16w+15), so scores
 * become the next product's A fragments in registers as in the mma.sync kernels
 * (afrag_from_c) and dQ leaves in their permuted accumulator layout. Operands in shared memory
 * are described, not loaded: tiles are kept in the core-matrix layout without swizzle
 * (8 rows x 16 bytes per 128-byte core matrix, cores along a row 128 bytes apart, 8-row
 * blocks 1024 bytes apart); bench/wgmma_probe.cu checked the descriptors on an H200.
 * Compiled only for sm_90a (__CUDA_ARCH_FEAT_SM90_ALL); elsewhere the kernel is empty
 * and lb_gpu_attention_wgmma() keeps the launcher away from it. */
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define LB_WGMMA 1
#endif

#define CM_TILE 4096 /* elements of a 64 x 64 core-matrix tile */

/* descriptor of a core-matrix operand at smem: leading byte offset (between cores
 * adjacent along k), stride byte offset (along m or n); no swizzle, base offset 0 */
__device__ __forceinline__ uint64_t wg_desc(const void *smem, int lbo, int sbo) {
    uint32_t a = (uint32_t)__cvta_generic_to_shared(smem);
    return (uint64_t)((a & 0x3FFFF) >> 4) | ((uint64_t)(lbo >> 4) << 16) |
           ((uint64_t)(sbo >> 4) << 32);
}

#define WG_ACC(d)                                                                                  \
    "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]), "+f"(d[1][1]),      \
        "+f"(d[1][2]), "+f"(d[1][3]), "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]),  \
        "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]), "+f"(d[3][3]), "+f"(d[4][0]), "+f"(d[4][1]),  \
        "+f"(d[4][2]), "+f"(d[4][3]), "+f"(d[5][0]), "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3]),  \
        "+f"(d[6][0]), "+f"(d[6][1]), "+f"(d[6][2]), "+f"(d[6][3]), "+f"(d[7][0]), "+f"(d[7][1]),  \
        "+f"(d[7][2]), "+f"(d[7][3])
#define WG_D                                                                                       \
    "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,"      \
    "%24,%25,%26,%27,%28,%29,%30,%31}"
/* the PTX of one m64n64k16 product for the element type E ("bf16" or "f16"):
 * SS: d (+)= A B^T, both K-major in shared memory, scale_d 0 overwrites d;
 * RS: d += A B, A from registers (mma.sync's A fragment per warp), B N-major in shared */
#define WG_SS(E)                                                                                   \
    "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\nwgmma.mma_async.sync.aligned.m64n64k16.f32." E      \
    "." E " " WG_D ", %32, %33, p, 1, 1, 0, 0;\n}\n"
#define WG_RS(E)                                                                                   \
    "wgmma.mma_async.sync.aligned.m64n64k16.f32." E "." E " " WG_D                                 \
    ", {%32,%33,%34,%35}, %36, 1, 1, 1, 1;\n"
#define WG_ACC16(d)                                                                                \
    "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]), "+f"(d[1][1]),      \
        "+f"(d[1][2]), "+f"(d[1][3]), "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]),  \
        "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]), "+f"(d[3][3])
/* SS m64n32k16 with both operands MN-major in shared memory (A transposed, B N-major):
 * d (+)= A B for A stored [k][m] and B stored [k][n] */
#define WG_SS_TT(E)                                                                                \
    "{\n.reg .pred p;\nsetp.ne.b32 p, %18, 0;\nwgmma.mma_async.sync.aligned.m64n32k16.f32." E      \
    "." E                                                                                          \
    " {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15}, %16, %17, p, 1, 1, 1, 1;\n}\n"

/* wg_op<T>: the products above for T's PTX type name E */
template <typename T> struct wg_op;
#ifdef LB_WGMMA
#define WG_ASM(...) asm volatile(__VA_ARGS__)
#else
#define WG_ASM(...)
#endif
#define WG_OP(T, E)                                                                                \
    template <> struct wg_op<T> {                                                                  \
        static __device__ __forceinline__ void ss(float d[8][4], uint64_t da, uint64_t db,         \
                                                  int scale_d) {                                   \
            WG_ASM(WG_SS(E) : WG_ACC(d) : "l"(da), "l"(db), "r"(scale_d));                         \
        }                                                                                          \
        static __device__ __forceinline__ void rs_tb(float d[8][4], const uint32_t a[4],           \
                                                     uint64_t db) {                                \
            WG_ASM(WG_RS(E) : WG_ACC(d) : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db));    \
        }                                                                                          \
        static __device__ __forceinline__ void ss_tt(float d[4][4], uint64_t da, uint64_t db,      \
                                                     int scale_d) {                                \
            WG_ASM(WG_SS_TT(E) : WG_ACC16(d) : "l"(da), "l"(db), "r"(scale_d));                    \
        }                                                                                          \
    };
WG_OP(__nv_bfloat16, "bf16")
WG_OP(__half, "f16")

__device__ __forceinline__ void wg_fence() {
#ifdef LB_WGMMA
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void wg_commit() {
#ifdef LB_WGMMA
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
#endif
}
/* waits until at most N of this warpgroup's committed groups are still running */
template <int N> __device__ __forceinline__ void wg_wait() {
#ifdef LB_WGMMA
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
#endif
}
/* shared-memory writes of the generic proxy (cp.async) made visible to wgmma's reads */
__device__ __forceinline__ void fence_async_shared() {
#ifdef LB_WGMMA
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
#endif
}
/* keeps the compiler from moving accumulator registers inside a wgmma pipeline stage
 * (ptxas serialises the wgmmas otherwise) */
template <int N> __device__ __forceinline__ void wg_pin(float (&d)[N][4]) {
#pragma unroll
    for (int i = 0; i < N; i++)
#pragma unroll
        for (int e = 0; e < 4; e++)
            asm volatile("" : "+f"(d[i][e])::"memory");
}
/* the same for A fragments a register-sourced wgmma may still be reading */
__device__ __forceinline__ void wg_pin_a(uint32_t a[4][4]) {
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
        for (int e = 0; e < 4; e++)
            asm volatile("" : "+r"(a[i][e])::"memory");
}

/* Starts copying rows [row0, row0+64) x HDM columns of a [*, ld] matrix into a 64 x 64
 * core-matrix tile with the block's NT threads: thread i takes 16-byte chunk c = i % 8 of
 * row r = i / 8 (and of the rows NT / 8, 2 NT / 8, ... below it), which lands at byte
 * (r / 8) 1024 + 128 c + 16 (r % 8). A warp reads four whole 128-byte rows, four L2 lines
 * (eight rows of half a line each, conflict-free in shared memory, take twice the L2
 * requests, and L2 request throughput bounds the attention kernels), at the price of
 * 8-way bank conflicts on the shared-memory writes. Rows at or past n_rows become zero. */
template <int NT, typename T>
__device__ __forceinline__ void tile_async_cm(T *s, const T *g, int64_t ld, int row0, int n_rows) {
    static_assert(NT % 64 == 0 && NT <= 512, "whole 8-row blocks a pass");
    int i = threadIdx.x, c = i % 8, r = row0 + i / 8;
    const T *p = g + (int64_t)r * ld + 8 * c;
    char *d = (char *)s + (i / 64) * 1024 + 128 * c + 16 * (i / 8 % 8);
    int64_t step = (int64_t)(NT / 8) * ld;
#pragma unroll
    for (int k = 0; k < 512 / NT; k++, r += NT / 8, p += step)
        cp_async16(d + k * (NT / 64) * 1024, r < n_rows ? p : g, r < n_rows);
}

/* Writes 1 where this binary's code for the device has the wgmma kernel, else 0. */
__global__ void wgmma_present_kernel(int *flag) {
#ifdef LB_WGMMA
    *flag = 1;
#else
    *flag = 0;
#endif
}

/* The bias gradient's key and value columns from a backward block of NW warps whose
 * lanes hold dK and dV rows key[0], key[1] in accumulator layout: the block's column sums
 * (fp32, keys past T_ left out, dK times scale) over the lane's two rows, the warp's
 * eight row groups (shuffles) and the warps (shared memory, whose tiles the block is done
 * with), then one atomic a column. */
template <int NW>
__device__ __forceinline__ void
bias_kv_sums(float *dbias, unsigned char *smem, const float dk[8][4], const float dv[8][4],
             const int key[2], int T_, int NH, int NKV, int kvh, float scale) {
    static_assert(NW * 32 >= 2 * HDM, "one thread a key or value column");
    float *part = (float *)smem; /* [NW][2 * HDM] */
    int warp = threadIdx.x >> 5, g = (threadIdx.x & 31) >> 2, t = threadIdx.x & 3;
    __syncthreads();
#pragma unroll
    for (int d = 0; d < 8; d++) {
#pragma unroll
        for (int e = 0; e < 2; e++) {
            float sk = 0.0f, sv = 0.0f;
#pragma unroll
            for (int i = 0; i < 2; i++)
                if (key[i] < T_) sk += dk[d][2 * i + e], sv += dv[d][2 * i + e];
#pragma unroll
            for (int o = 4; o < 32; o <<= 1) {
                sk += __shfl_xor_sync(0xffffffffu, sk, o);
                sv += __shfl_xor_sync(0xffffffffu, sv, o);
            }
            if (g == 0) {
                part[warp * 2 * HDM + d * 8 + 2 * t + e] = sk * scale;
                part[warp * 2 * HDM + HDM + d * 8 + 2 * t + e] = sv;
            }
        }
    }
    __syncthreads();
    int c = threadIdx.x;
    if (c >= 2 * HDM) return;
    float sum = 0.0f;
#pragma unroll
    for (int w = 0; w < NW; w++)
        sum += part[w * 2 * HDM + c];
    atomicAdd(dbias + (c < HDM ? (NH + kvh) * HDM + c : (NH + NKV + kvh) * HDM + c - HDM), sum);
}

/* dq_acc += a lane's dQ rows q, q + 8 (accumulator layout, NT 8-column tiles from column
 * c0; rows at or past T_ left out). dq_acc keeps each row's 16-column groups permuted
 * (attn_dq_store_kernel) so that the lane's four values of a row and group (columns 2t,
 * 2t+1, 8+2t, 9+2t) are adjacent: one 16-byte vector reduction each on sm_90. */
template <int NT>
__device__ __forceinline__ void dq_red_rows(float *dq_acc, const float (&dq)[NT][4], int b, int q,
                                            int T_, int NH, int h, int c0) {
    int t = threadIdx.x & 3;
#pragma unroll
    for (int i = 0; i < 2; i++) {
        if (q + 8 * i >= T_) continue;
        float *row = dq_acc + (((int64_t)b * T_ + q + 8 * i) * NH + h) * HDM + c0 + 4 * t;
#pragma unroll
        for (int dp = 0; dp < NT / 2; dp++)
            red_add4(row + dp * 16, make_float4(dq[2 * dp][2 * i], dq[2 * dp][2 * i + 1],
                                                dq[2 * dp + 1][2 * i], dq[2 * dp + 1][2 * i + 1]));
    }
}

/* A backward block's end: the lane's dK (times scale) and dV rows key[0], key[1] into
 * dqkv (keys past T_ left out), then, with dbias, their column sums into it. */
template <int NW, typename T>
__device__ __forceinline__ void
store_dkv(T *dqkv, float *dbias, unsigned char *smem, const float dk[8][4], const float dv[8][4],
          const int key[2], int b, int T_, int NH, int NKV, int kvh, float scale) {
    int64_t W = (int64_t)(NH + 2 * NKV) * HDM;
    int t = threadIdx.x & 3;
#pragma unroll
    for (int i = 0; i < 2; i++) {
        if (key[i] >= T_) continue;
        T *row = dqkv + ((int64_t)b * T_ + key[i]) * W;
#pragma unroll
        for (int d = 0; d < 8; d++) {
            *(uint32_t *)(row + (NH + kvh) * HDM + d * 8 + 2 * t) =
                mma_op<T>::pack(dk[d][2 * i] * scale, dk[d][2 * i + 1] * scale);
            *(uint32_t *)(row + (NH + NKV + kvh) * HDM + d * 8 + 2 * t) =
                mma_op<T>::pack(dv[d][2 * i], dv[d][2 * i + 1]);
        }
    }
    if (dbias != NULL) bias_kv_sums<NW>(dbias, smem, dk, dv, key, T_, NH, NKV, kvh, scale);
}

/* Backward: one block per 64 keys of one kv head, warp w owning keys w*16..w*16+15, whose
 * dK and dV stay in registers over every 64-query tile of every query head of the group
 * (Q, dO, lse and D tiles stream through a two-stage cp.async pipeline). The block works
 * on transposed scores (S^T = K Q^T), so P^T and dS^T are A operands straight from
 * registers; dS^T also goes to shared memory, from which the block forms the tile's dQ
 * contribution (dS K) and adds it into an fp32 accumulator [B,T,NH,HD] (columns permuted
 * within groups of 16) with 16-byte vector reductions. A later pass scales, rounds and
 * un-permutes dQ into dqkv. Four warps and three blocks an SM
 * (168 registers a thread) beat eight warps and one block (255 registers): 4.53 against
 * 4.72 ms at GPT-2 16x1024 on the H200, since a block's barriers no longer stall the whole
 * SM, though the dQ atomics double. */
template <typename T>
__global__ void __launch_bounds__(BW * 32, 3)
    attn_bwd_mma_kernel(T *dqkv, float *dbias, float *dq_acc, const T *dout, const T *qkv,
                        const float *lse, const float *Dsum, int B, int T_, int NH, int NKV) {
    extern __shared__ __align__(16) unsigned char smem[];
    T *sK = (T *)smem, *sV = sK + BK * LDS, *sQ = sV + BK * LDS, *sdO = sQ + 2 * BQ * LDS;
    T *sdS = sdO + 2 * BQ * LDS; /* dS^T [BK][LDS] (query columns) */
    float *sL = (float *)(sdS + BK * LDS), *sD = sL + 2 * BQ;
    /* a 1-D grid in order of decreasing work: every head's first key block first */
    int rest = blockIdx.x % (NKV * B);
    int kvh = rest % NKV, b = rest / NKV, G = NH / NKV;
    int64_t W = (int64_t)(NH + 2 * NKV) * HDM, ldo = (int64_t)NH * HDM;
    const T *base = qkv + (int64_t)b * T_ * W;
    int k0 = (int)(blockIdx.x / (NKV * B)) * BK;
    int nq = (T_ - k0 + BQ - 1) / BQ, n_it = G * nq;
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    int kw0 = k0 + warp * 16;
    int key[2] = {kw0 + g, kw0 + g + 8};
    const float scale = rsqrtf((float)HDM), sl2 = scale * LB_LOG2E;

    tile_async<T, BK>(sK, base + (NH + kvh) * HDM, W, k0, T_);
    tile_async<T, BK>(sV, base + (NH + NKV + kvh) * HDM, W, k0, T_);
    /* stage `it` of the query stream into buffer it & 1 */
    auto issue = [&](int it) {
        int h = kvh * G + it / nq, q0 = k0 + (it % nq) * BQ, buf = it & 1;
        tile_async<T, BQ>(sQ + buf * BQ * LDS, base + h * HDM, W, q0, T_);
        tile_async<T, BQ>(sdO + buf * BQ * LDS, dout + (int64_t)b * T_ * ldo + h * HDM, ldo, q0,
                          T_);
        rowstats_async<BQ>(sL + buf * BQ, sD + buf * BQ, lse, Dsum, ((int64_t)b * NH + h) * T_, q0,
                           T_);
        cp_async_commit();
    };
    issue(0);

    uint32_t kf[HDM / 16][4], vf[HDM / 16][4];
    float dk[8][4], dv[8][4];
    zero8x4(dk);
    zero8x4(dv);
    for (int it = 0; it < n_it; it++) {
        if (it + 1 < n_it) {
            issue(it + 1);
            cp_async_wait<1>();
        } else {
            cp_async_wait<0>();
        }
        __syncthreads();
        if (it == 0) {
            afrags(kf, sK, warp * 16, lane);
            afrags(vf, sV, warp * 16, lane);
        }
        int h = kvh * G + it / nq, q0 = k0 + (it % nq) * BQ, buf = it & 1;
        const T *cQ = sQ + buf * BQ * LDS, *cdO = sdO + buf * BQ * LDS;
        const float *cL = sL + buf * BQ, *cD = sD + buf * BQ;
        int n_kk = min(BK / 16, (q0 + BQ - k0) / 16); /* 16-key groups below the diagonal */
        if (warp < n_kk) {
            float st[8][4];
            zero8x4(st);
            mma_abt<T>(st, kf, cQ, lane);
            bool diag = q0 < kw0 + 15;
#pragma unroll
            for (int nt = 0; nt < 8; nt++) {
                float2 L = *(const float2 *)(cL + nt * 8 + 2 * t);
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    int q = q0 + nt * 8 + 2 * t + (e & 1);
                    float p = lb_exp2(fmaf(st[nt][e], sl2, -((e & 1) ? L.y : L.x) * LB_LOG2E));
                    st[nt][e] = (diag && q < key[e >> 1]) ? 0.0f : p;
                }
            }
            mma_pv<T>(dv, st, cdO, lane); /* dV += P^T dO */
            float ds[8][4];
            zero8x4(ds);
            mma_abt<T>(ds, vf, cdO, lane); /* dP^T = V dO^T */
            softmax_grad8(ds, st, cD, t);
            mma_pv<T>(dk, ds, cQ, lane); /* dK += dS^T Q (scale applied at the end) */
            T *srow = sdS + (warp * 16 + g) * LDS + 2 * t;
#pragma unroll
            for (int nt = 0; nt < 8; nt++) {
                *(uint32_t *)(srow + nt * 8) = mma_op<T>::pack(ds[nt][0], ds[nt][1]);
                *(uint32_t *)(srow + 8 * LDS + nt * 8) = mma_op<T>::pack(ds[nt][2], ds[nt][3]);
            }
        }
        __syncthreads();
        /* dQ tile (64 queries x 64) += dS (queries x keys) K: warp w takes queries
         * w * 16.. and every head column */
        {
            int mq = warp * 16;
            float dq[HDM / 8][4];
            zero8x4(dq);
#pragma unroll
            for (int kk = 0; kk < BK / 16; kk++) {
                if (kk < n_kk) {
                    uint32_t a[4], bk[4];
                    ldsm_x4_trans(a, sdS + (kk * 16 + (lane & 7) + ((lane >> 4) << 3)) * LDS + mq +
                                         ((lane >> 3) & 1) * 8);
#pragma unroll
                    for (int dp = 0; dp < HDM / 16; dp++) {
                        ldsm_x4_trans(bk, sK + (kk * 16 + (lane & 15)) * LDS +
                                              (2 * dp + (lane >> 4)) * 8);
                        mma_op<T>::run(dq[2 * dp], a, bk[0], bk[1]);
                        mma_op<T>::run(dq[2 * dp + 1], a, bk[2], bk[3]);
                    }
                }
            }
            dq_red_rows(dq_acc, dq, b, q0 + mq + g, T_, NH, h, 0);
        }
    }
    store_dkv<BW>(dqkv, dbias, smem, dk, dv, key, b, T_, NH, NKV, kvh, scale);
}

#define WK      128 /* wgmma backward: keys per block, 64 per warpgroup */
#define WBQ     64  /* wgmma backward: queries per tile */
#define WSTAGES 3   /* wgmma backward: Q / dO / lse / D stages in flight */

/* Backward with warpgroup MMAs (sm_90a): one block per 128 keys of one kv head, two
 * warpgroups of 64 keys each, dK and dV in registers over every 64-query tile of every
 * query head of the group. Tiles are in the core-matrix layout of the wgmma forward; Q,
 * dO, lse and D stream through a two-stage cp.async pipeline. Per tile a warpgroup issues
 * S^T = K Q^T and dP^T = V dO^T (shared operands), turns S^T into P^T while dP^T is still
 * running, issues dV += P^T dO, forms dS^T while that runs, issues dK += dS^T Q, and
 * stores dS^T to shared memory; after a block barrier each warpgroup forms half of the
 * tile's dQ (dS K over the block's 128 keys, 32 of the 64 columns) and adds it into the
 * fp32 accumulator of attn_bwd_mma_kernel (same permuted layout) while the next tile's
 * products run. dS^T is double-buffered, so the reads of one tile's dQ overlap the
 * writes of the next. A warpgroup whose keys all lie after the tile's queries skips the
 * tile's products. */
template <typename T>
__global__ void __launch_bounds__(256, 1)
    attn_bwd_wgmma_kernel(T *dqkv, float *dbias, float *dq_acc, const T *dout, const T *qkv,
                          const float *lse, const float *Dsum, int B, int T_, int NH, int NKV) {
#ifdef LB_WGMMA
    extern __shared__ __align__(128) unsigned char smem[];
    T *sK = (T *)smem, *sV = sK + 2 * CM_TILE, *sQ = sV + 2 * CM_TILE;
    T *sdO = sQ + WSTAGES * CM_TILE, *sdS = sdO + WSTAGES * CM_TILE; /* two dS^T buffers */
    float *sL = (float *)(sdS + 4 * CM_TILE), *sD = sL + WSTAGES * WBQ;
    int rest = blockIdx.x % (NKV * B);
    int kvh = rest % NKV, b = rest / NKV, G = NH / NKV;
    int64_t W = (int64_t)(NH + 2 * NKV) * HDM, ldo = (int64_t)NH * HDM;
    const T *base = qkv + (int64_t)b * T_ * W;
    int k0 = (int)(blockIdx.x / (NKV * B)) * WK;
    int nq = (T_ - k0 + WBQ - 1) / WBQ, n_it = G * nq;
    int wg = threadIdx.x >> 7, warp = (threadIdx.x >> 5) & 3, lane = threadIdx.x & 31;
    int g = lane >> 2, t = lane & 3;
    int kw0 = k0 + 64 * wg;
    int key[2] = {kw0 + 16 * warp + g, kw0 + 16 * warp + g + 8};
    const float scale = rsqrtf((float)HDM), sl2 = scale * LB_LOG2E;
    /* descriptors of the shared operands: K-major (k steps 256 bytes apart) for the
     * products over the head dimension, MN-major (k steps 2048 bytes apart) for the
     * products over queries or keys; a stage of Q or dO is 8 KiB on, a dS^T buffer 16 KiB */
    const uint64_t dKw = wg_desc(sK + wg * CM_TILE, 128, 1024),
                   dVw = wg_desc(sV + wg * CM_TILE, 128, 1024);
    const uint64_t dQk = wg_desc(sQ, 128, 1024), dOk = wg_desc(sdO, 128, 1024);
    const uint64_t dQn = wg_desc(sQ, 1024, 128), dOn = wg_desc(sdO, 1024, 128);
    const uint64_t dSt = wg_desc(sdS, 1024, 128), dKn = wg_desc(sK, 1024, 128) + 32 * wg;
    constexpr int STAGE = CM_TILE * sizeof(T) >> 4, K16 = 256 >> 4, R16 = 2048 >> 4;

    for (int half = 0; half < 2; half++) {
        tile_async_cm<256>(sK + half * CM_TILE, base + (NH + kvh) * HDM, W, k0 + 64 * half, T_);
        tile_async_cm<256>(sV + half * CM_TILE, base + (NH + NKV + kvh) * HDM, W, k0 + 64 * half,
                           T_);
    }
    /* the query stream: tile `it` is query head kvh G + it / nq, queries from
     * k0 + (it % nq) WBQ, tracked as counters (a division by nq costs ~25 instructions) */
    struct qtile {
        int h, q0;
    };
    auto next = [&](qtile p) {
        p.q0 += WBQ;
        if (p.q0 >= T_) p.q0 = k0, p.h++;
        return p;
    };
    /* a tile of the stream into stage buffer buf; past the end (h past the group) an empty
     * group, so that waiting for all but the newest group always means tile it is in */
    auto issue = [&](qtile p, int buf) {
        if (p.h >= (kvh + 1) * G) {
            cp_async_commit();
            return;
        }
        int h = p.h, q0 = p.q0;
        tile_async_cm<256>(sQ + buf * CM_TILE, base + h * HDM, W, q0, T_);
        tile_async_cm<256>(sdO + buf * CM_TILE, dout + (int64_t)b * T_ * ldo + h * HDM, ldo, q0,
                           T_);
        rowstats_async<WBQ>(sL + buf * WBQ, sD + buf * WBQ, lse, Dsum, ((int64_t)b * NH + h) * T_,
                            q0, T_);
        cp_async_commit();
    };
    qtile cur = {kvh * G, k0}, prev = cur, ahead = next(cur);
    issue(cur, 0);
    issue(ahead, 1);

    float dk[8][4], dv[8][4], dq[4][4];
    zero8x4(dk);
    zero8x4(dv);
    /* dQ of tile `it` (64 queries x the 32 columns from 32 wg) = dS K over the 16-key groups
     * that have a query at or after them: 4 (the tile on the block's diagonal) or 8 */
    auto dq_issue = [&](int q0, int parity) {
        uint64_t a = dSt + parity * 2 * STAGE;
        wg_fence();
        /* one of two fixed-length chains, each committed on its own path (a commit after
         * the paths join costs ptxas an extra empty wgmma) */
        if (q0 - k0 >= WBQ) {
#pragma unroll
            for (int ks = 0; ks < WK / 16; ks++)
                wg_op<T>::ss_tt(dq, a + R16 * ks, dKn + R16 * ks, ks > 0);
            wg_commit();
        } else {
#pragma unroll
            for (int ks = 0; ks < WK / 32; ks++)
                wg_op<T>::ss_tt(dq, a + R16 * ks, dKn + R16 * ks, ks > 0);
            wg_commit();
        }
    };
    /* adds that dQ into dq_acc (permuted columns, as attn_bwd_mma_kernel) */
    auto dq_add = [&](int h, int q0) {
        dq_red_rows(dq_acc, dq, b, q0 + 16 * warp + g, T_, NH, h, 32 * wg);
    };
    for (int it = 0, buf = 0; it < n_it; it++, buf = buf == WSTAGES - 1 ? 0 : buf + 1) {
        cp_async_wait<1>();
        fence_async_shared();
        /* tile it is in; both warpgroups are done with tile it-1's Q and dO and have stored
         * tile it-1's dS^T */
        __syncthreads();
        int q0 = cur.q0;
        const float *cL = sL + buf * WBQ, *cD = sD + buf * WBQ;
        /* groups, oldest first: S^T, dP^T, dQ of tile it-1, dV, dK. A warpgroup whose keys
         * all follow the tile's queries computes zeros here: a branch around wgmma on the
         * warpgroup index would make ptxas serialise every wgmma of the kernel */
        float st[8][4], dp[8][4];
        uint32_t pa[4][4], sa[4][4];
        wg_pin(st);
        wg_pin(dp);
        wg_fence();
#pragma unroll
        for (int ks = 0; ks < HDM / 16; ks++)
            wg_op<T>::ss(st, dKw + K16 * ks, dQk + buf * STAGE + K16 * ks, ks > 0);
        wg_commit();
#pragma unroll
        for (int ks = 0; ks < HDM / 16; ks++)
            wg_op<T>::ss(dp, dVw + K16 * ks, dOk + buf * STAGE + K16 * ks, ks > 0);
        wg_commit();
        if (it > 0)
            dq_issue(prev.q0, (it - 1) & 1);
        else
            wg_commit();
        /* tile it + 2 into the stage tile it - 1 used, while the products run */
        ahead = next(ahead);
        issue(ahead, buf == 0 ? WSTAGES - 1 : buf - 1);
        wg_wait<2>(); /* S^T */
        wg_pin(st);
        if (q0 < kw0 + 63) { /* keys after queries: masked */
#pragma unroll
            for (int nt = 0; nt < 8; nt++) {
                float2 L = *(const float2 *)(cL + nt * 8 + 2 * t);
                float nl[2] = {-L.x * LB_LOG2E, -L.y * LB_LOG2E};
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    int q = q0 + nt * 8 + 2 * t + (e & 1);
                    float p = lb_exp2(fmaf(st[nt][e], sl2, nl[e & 1]));
                    st[nt][e] = q < key[e >> 1] ? 0.0f : p;
                }
            }
        } else {
#pragma unroll
            for (int nt = 0; nt < 8; nt++) {
                float2 L = *(const float2 *)(cL + nt * 8 + 2 * t);
                float nl[2] = {-L.x * LB_LOG2E, -L.y * LB_LOG2E};
#pragma unroll
                for (int e = 0; e < 4; e++)
                    st[nt][e] = lb_exp2(fmaf(st[nt][e], sl2, nl[e & 1]));
            }
        }
#pragma unroll
        for (int kk = 0; kk < 4; kk++)
            afrag_from_c<T>(pa[kk], st[2 * kk], st[2 * kk + 1]);
        wg_pin(dv);
        wg_fence();
#pragma unroll
        for (int kk = 0; kk < 4; kk++) /* dV += P^T dO */
            wg_op<T>::rs_tb(dv, pa[kk], dOn + buf * STAGE + R16 * kk);
        wg_commit();
        wg_wait<2>(); /* dP^T */
        wg_pin(dp);
        softmax_grad8(dp, st, cD, t);
#pragma unroll
        for (int kk = 0; kk < 4; kk++)
            afrag_from_c<T>(sa[kk], dp[2 * kk], dp[2 * kk + 1]);
        wg_pin(dk);
        wg_fence();
#pragma unroll
        for (int kk = 0; kk < 4; kk++) /* dK += dS^T Q (scale applied at the end) */
            wg_op<T>::rs_tb(dk, sa[kk], dQn + buf * STAGE + R16 * kk);
        wg_commit();
        { /* dS^T rows of this warp into the tile's buffer (lane: row g, columns 2t..) */
            char *p = (char *)(sdS + (it & 1) * 2 * CM_TILE) + (8 * wg + 2 * warp) * 1024 + g * 16 +
                      4 * t;
#pragma unroll
            for (int kk = 0; kk < 4; kk++) {
                *(uint32_t *)(p + 256 * kk) = sa[kk][0];
                *(uint32_t *)(p + 1024 + 256 * kk) = sa[kk][1];
                *(uint32_t *)(p + 128 + 256 * kk) = sa[kk][2];
                *(uint32_t *)(p + 1152 + 256 * kk) = sa[kk][3];
            }
        }
        wg_wait<2>(); /* dQ of tile it-1 */
        wg_pin(dq);
        if (it > 0) dq_add(prev.h, prev.q0);
        prev = cur;
        cur = next(cur);
        wg_wait<0>(); /* dV, dK: this tile's Q and dO are free for the next prefetch */
        wg_pin(dv);
        wg_pin(dk);
        wg_pin_a(pa);
        wg_pin_a(sa);
    }
    fence_async_shared();
    __syncthreads(); /* the last tile's dS^T from both warpgroups */
    dq_issue(prev.q0, (n_it - 1) & 1);
    wg_wait<0>();
    wg_pin(dq);
    dq_add(prev.h, prev.q0);
    store_dkv<8>(dqkv, dbias, smem, dk, dv, key, b, T_, NH, NKV, kvh, scale);
#endif
}

#define DQ_ROWS 128 /* dQ store: rows a block */

/* dqkv's query part = scale * dq_acc: dq_acc holds column c (c < 8) of a 16-column group at
 * 4 (c / 2) + c % 2 and column 8 + c at 4 (c / 2) + 2 + c % 2, the order in which the
 * tensor-core backward's lane t holds columns 2t, 2t+1, 8+2t, 9+2t (the tiled backward
 * follows it). Any storage type. Block (16, 16): x over 16
 * column groups (grid.y picks which), y over the block's DQ_ROWS rows (grid.x). With
 * dbias, the block also adds its column sums of that part (fp32, before rounding) into
 * dbias[0, NH*HDM): per thread in registers, then over y in shared memory, one atomic a
 * column. */
template <typename T>
__global__ void attn_dq_store_kernel(T *dqkv, float *dbias, const float *dq_acc, int64_t BT, int NH,
                                     int NKV, float scale) {
    __shared__ float part[16][16][17]; /* [y][column in group][x] */
    int ng = NH * HDM / 16, cg = blockIdx.y * 16 + threadIdx.x;
    int64_t W = (int64_t)(NH + 2 * NKV) * HDM;
    float sum[16];
#pragma unroll
    for (int k = 0; k < 16; k++)
        sum[k] = 0.0f;
    if (cg < ng) {
        int64_t r1 = min(BT, (int64_t)(blockIdx.x + 1) * DQ_ROWS);
#pragma unroll 2
        for (int64_t r = (int64_t)blockIdx.x * DQ_ROWS + threadIdx.y; r < r1; r += 16) {
            const float4 *src = (const float4 *)(dq_acc + (r * ng + cg) * 16);
            float f[16];
#pragma unroll
            for (int t = 0; t < 4; t++) {
                float4 v = src[t];
                sum[2 * t] += v.x, sum[2 * t + 1] += v.y;
                sum[8 + 2 * t] += v.z, sum[9 + 2 * t] += v.w;
                f[2 * t] = v.x * scale, f[2 * t + 1] = v.y * scale;
                f[8 + 2 * t] = v.z * scale, f[9 + 2 * t] = v.w * scale;
            }
            lb_st8(dqkv + r * W + cg * 16, f);
            lb_st8(dqkv + r * W + cg * 16 + 8, f + 8);
        }
    }
    if (dbias == NULL) return;
#pragma unroll
    for (int k = 0; k < 16; k++)
        part[threadIdx.y][k][threadIdx.x] = sum[k];
    __syncthreads();
    int tid = threadIdx.y * 16 + threadIdx.x, col = blockIdx.y * 256 + tid;
    if (col >= NH * HDM) return;
    float s = 0.0f;
#pragma unroll
    for (int y = 0; y < 16; y++)
        s += part[y][tid % 16][tid / 16];
    atomicAdd(dbias + col, s * scale);
}

/* ------------------------------------------------------------------------------------ */
/* CUDA-core tiled path (HD 64, any storage type; fp32 arithmetic, no tensor cores)      */

#define TB  64  /* rows (queries or keys) of a tile */
#define TLD 68  /* row stride of Q, K, V, dO tiles in floats: rows 8 apart share banks */
#define PLD 80  /* row stride of P and dS tiles: rows 1 apart land 16 banks apart */
#define TT  256 /* threads a block, a 16 x 16 grid (ty = tid / 16, tx = tid % 16) */

/* Rows [row0, row0+TB) of a [*, ld] matrix (HDM columns from g) as fp32 into s[TB][TLD];
 * rows at or past n_rows become zero. */
template <typename T>
__device__ __forceinline__ void tile_f32(float *s, const T *g, int64_t ld, int row0, int n_rows) {
    constexpr int VPR = HDM / 8;
    for (int i = threadIdx.x; i < TB * VPR; i += TT) {
        int r = i / VPR, c = (i % VPR) * 8;
        float f[8] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
        if (row0 + r < n_rows) lb_ld8(f, g + (int64_t)(row0 + r) * ld + c);
        lb_st8(s + r * TLD + c, f);
    }
}

/* acc[i][j] += dot(A row ra + 16 i, B row rb + 16 j) over HDM for [TB][TLD] tiles A, B:
 * a 4 x 4 block of A B^T whose A rows are shared by a half-warp (broadcast) and whose B
 * rows, 16 apart, fall in distinct 16-byte bank groups. */
__device__ __forceinline__ void tile_abt(float acc[4][4], const float *A, int ra, const float *B,
                                         int rb) {
#pragma unroll
    for (int d = 0; d < HDM; d += 4) {
        float4 b[4];
#pragma unroll
        for (int j = 0; j < 4; j++)
            b[j] = *(const float4 *)(B + (rb + 16 * j) * TLD + d);
#pragma unroll
        for (int i = 0; i < 4; i++) {
            float4 a = *(const float4 *)(A + (ra + 16 * i) * TLD + d);
#pragma unroll
            for (int j = 0; j < 4; j++) {
                acc[i][j] = fmaf(a.x, b[j].x, acc[i][j]);
                acc[i][j] = fmaf(a.y, b[j].y, acc[i][j]);
                acc[i][j] = fmaf(a.z, b[j].z, acc[i][j]);
                acc[i][j] = fmaf(a.w, b[j].w, acc[i][j]);
            }
        }
    }
}

/* acc[i][c] += sum_k P[ra + 16 i][k] S[k][4 tx + c] over TB keys for P [TB][PLD] and
 * S [TB][TLD]: the product of a probability (or dS) tile with a value-like tile, each
 * thread four rows of P (broadcast in a half-warp) and four adjacent columns of S. */
__device__ __forceinline__ void tile_ps(float acc[4][4], const float *P, int ra, const float *S,
                                        int tx) {
#pragma unroll 4
    for (int k = 0; k < TB; k += 4) {
        float4 p[4], v[4];
#pragma unroll
        for (int i = 0; i < 4; i++) {
            p[i] = *(const float4 *)(P + (ra + 16 * i) * PLD + k);
            v[i] = *(const float4 *)(S + (k + i) * TLD + 4 * tx);
        }
#pragma unroll
        for (int i = 0; i < 4; i++) {
            float pk[4] = {p[i].x, p[i].y, p[i].z, p[i].w};
#pragma unroll
            for (int kk = 0; kk < 4; kk++) {
                acc[i][0] = fmaf(pk[kk], v[kk].x, acc[i][0]);
                acc[i][1] = fmaf(pk[kk], v[kk].y, acc[i][1]);
                acc[i][2] = fmaf(pk[kk], v[kk].z, acc[i][2]);
                acc[i][3] = fmaf(pk[kk], v[kk].w, acc[i][3]);
            }
        }
    }
}

/* Forward: one block per 64 queries of one head, thread (ty, tx) owning the scores of
 * queries ty + 16 i and keys tx + 16 j of each 64-key tile, so a query row's maximum and
 * sum are shuffles among 16 lanes; the probabilities go through shared memory into
 * O += P V, where the thread owns the same four queries and columns 4 tx..4 tx+3. */
template <typename T>
__global__ void __launch_bounds__(TT, 3)
    attn_fwd_simt_kernel(T *out, float *lse, const T *qkv, int B, int T_, int NH, int NKV) {
    extern __shared__ __align__(16) float fsm[];
    float *sQ = fsm, *sK = sQ + TB * TLD, *sV = sK + TB * TLD, *sP = sV + TB * TLD;
    fwd_tile<T> ft = fwd_tile_of(qkv, TB, B, T_, NH, NKV);
    int q0 = ft.q0, h = ft.h, b = ft.b;
    const T *base = ft.base, *gK = ft.gK, *gV = ft.gV;
    int64_t W = (int64_t)(NH + 2 * NKV) * HDM;
    int tx = threadIdx.x & 15, ty = threadIdx.x >> 4;
    const float sl2 = rsqrtf((float)HDM) * LB_LOG2E;

    tile_f32(sQ, base + h * HDM, W, q0, T_);
    float o[4][4], m[4], l[4];
    zero4x4(o);
#pragma unroll
    for (int i = 0; i < 4; i++)
        m[i] = -INFINITY, l[i] = 0.0f;
    for (int k0 = 0; k0 <= q0; k0 += TB) {
        __syncthreads(); /* the last tile's K, V and P are read */
        tile_f32(sK, gK, W, k0, T_);
        tile_f32(sV, gV, W, k0, T_);
        __syncthreads();
        float s[4][4];
        zero4x4(s);
        tile_abt(s, sQ, ty, sK, tx);
        bool edge = k0 == q0 || k0 + TB > T_; /* the diagonal or the sequence end */
#pragma unroll
        for (int i = 0; i < 4; i++) {
            float mx = -INFINITY;
#pragma unroll
            for (int j = 0; j < 4; j++) {
                int key = k0 + tx + 16 * j;
                s[i][j] *= sl2;
                if (edge && (key > q0 + ty + 16 * i || key >= T_)) s[i][j] = -INFINITY;
                mx = fmaxf(mx, s[i][j]);
            }
#pragma unroll
            for (int o2 = 1; o2 < 16; o2 <<= 1)
                mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o2));
            float mnew = fmaxf(m[i], mx), ms = mnew == -INFINITY ? 0.0f : mnew;
            float corr = lb_exp2(m[i] - ms), sum = 0.0f;
            m[i] = mnew;
#pragma unroll
            for (int j = 0; j < 4; j++) {
                float p = lb_exp2(s[i][j] - ms);
                sum += p;
                sP[(ty + 16 * i) * PLD + tx + 16 * j] = p;
            }
            l[i] = l[i] * corr + sum;
#pragma unroll
            for (int c = 0; c < 4; c++)
                o[i][c] *= corr;
        }
        __syncthreads();
        tile_ps(o, sP, ty, sV, tx);
    }
    int64_t ldo = (int64_t)NH * HDM;
#pragma unroll
    for (int i = 0; i < 4; i++) {
        float li = l[i];
#pragma unroll
        for (int o2 = 1; o2 < 16; o2 <<= 1)
            li += __shfl_xor_sync(0xffffffffu, li, o2);
        int q = q0 + ty + 16 * i;
        if (q >= T_) continue;
        float inv = 1.0f / li, f[4] = {o[i][0] * inv, o[i][1] * inv, o[i][2] * inv, o[i][3] * inv};
        lb_st4(out + ((int64_t)b * T_ + q) * ldo + h * HDM + 4 * tx, f);
        if (tx == 0) lse[((int64_t)b * NH + h) * T_ + q] = m[i] * LN2 + logf(li);
    }
}

/* Backward: one block per 64 keys of one kv head, over every 64-query tile at or past the
 * diagonal of every query head of the group. Thread (ty, tx) forms the transposed scores
 * S^T and dP^T = V dO^T for keys ty + 16 i and queries tx + 16 j, recomputes P^T from
 * lse, and writes P^T to shared memory; then, owning keys ty + 16 i and columns 4 tx..,
 * it adds P^T dO to dV, replaces P^T by dS^T (one buffer: 88.5 KB of shared memory a
 * block fits the 99 KB limit of sm_86/89), adds dS^T Q to dK (dK, dV stay in registers
 * until the end), and,
 * owning queries 4 ty..4 ty+3 and the columns {2t, 2t+1, 8+2t, 9+2t} of 16-column group
 * g (tx = 4g + t), forms the tile's dS K and adds it into dq_acc in attn_dq_store_kernel's
 * permuted order with four-float reductions. */
template <typename T>
__global__ void __launch_bounds__(TT, 2)
    attn_bwd_simt_kernel(T *dqkv, float *dbias, float *dq_acc, const T *dout, const T *qkv,
                         const float *lse, const float *Dsum, int B, int T_, int NH, int NKV) {
    extern __shared__ __align__(16) float fsm[];
    float *sK = fsm, *sV = sK + TB * TLD, *sQ = sV + TB * TLD, *sdO = sQ + TB * TLD;
    float *sS = sdO + TB * TLD, *sL = sS + TB * PLD, *sD = sL + TB; /* sS: P^T, then dS^T */
    /* a 1-D grid in order of decreasing work: every head's first key block first */
    int rest = blockIdx.x % (NKV * B);
    int kvh = rest % NKV, b = rest / NKV, G = NH / NKV;
    int64_t W = (int64_t)(NH + 2 * NKV) * HDM, ldo = (int64_t)NH * HDM;
    const T *base = qkv + (int64_t)b * T_ * W;
    int k0 = (int)(blockIdx.x / (NKV * B)) * TB;
    int tx = threadIdx.x & 15, ty = threadIdx.x >> 4;
    const float scale = rsqrtf((float)HDM), sl2 = scale * LB_LOG2E;
    const int dcol = 16 * (tx >> 2) + 2 * (tx & 3); /* dQ columns dcol, +1, +8, +9 */

    tile_f32(sK, base + (NH + kvh) * HDM, W, k0, T_);
    tile_f32(sV, base + (NH + NKV + kvh) * HDM, W, k0, T_);
    float dk[4][4], dv[4][4];
    zero4x4(dk);
    zero4x4(dv);
    for (int hh = 0; hh < G; hh++) {
        int h = kvh * G + hh;
        for (int q0 = k0; q0 < T_; q0 += TB) {
            __syncthreads(); /* the last tile's Q, dO and dS^T are read */
            tile_f32(sQ, base + h * HDM, W, q0, T_);
            tile_f32(sdO, dout + (int64_t)b * T_ * ldo + h * HDM, ldo, q0, T_);
            if (threadIdx.x < TB) {
                int q = q0 + threadIdx.x;
                int64_t r = ((int64_t)b * NH + h) * T_ + q;
                sL[threadIdx.x] = q < T_ ? lse[r] * LB_LOG2E : INFINITY; /* P = 0 past T */
                sD[threadIdx.x] = q < T_ ? Dsum[r] : 0.0f;
            }
            __syncthreads();
            /* S^T, then P^T into shared memory (re-read there by this thread for dS^T,
             * which keeps registers for dP^T) */
            float acc[4][4];
            zero4x4(acc);
            tile_abt(acc, sK, ty, sQ, tx);
            bool diag = q0 == k0;
#pragma unroll
            for (int j = 0; j < 4; j++) {
                int qj = tx + 16 * j;
                float L = sL[qj];
#pragma unroll
                for (int i = 0; i < 4; i++) {
                    float pij = lb_exp2(fmaf(acc[i][j], sl2, -L));
                    sS[(ty + 16 * i) * PLD + qj] = diag && qj < ty + 16 * i ? 0.0f : pij;
                }
            }
            zero4x4(acc);
            tile_abt(acc, sV, ty, sdO, tx); /* dP^T */
            __syncthreads();
            tile_ps(dv, sS, ty, sdO, tx); /* dV += P^T dO */
            __syncthreads();              /* P^T is read: dS^T takes its place */
#pragma unroll
            for (int j = 0; j < 4; j++) {
                int qj = tx + 16 * j;
                float D = sD[qj];
#pragma unroll
                for (int i = 0; i < 4; i++) {
                    int e = (ty + 16 * i) * PLD + qj;
                    sS[e] = sS[e] * (acc[i][j] - D);
                }
            }
            __syncthreads();
            tile_ps(dk, sS, ty, sQ, tx); /* dK += dS^T Q (scaled at the end) */
            float dq[4][4];
            zero4x4(dq);
#pragma unroll 4
            for (int k = 0; k < TB; k++) {
                float4 a = *(const float4 *)(sS + k * PLD + 4 * ty);
                float2 k01 = *(const float2 *)(sK + k * TLD + dcol);
                float2 k89 = *(const float2 *)(sK + k * TLD + dcol + 8);
                float av[4] = {a.x, a.y, a.z, a.w};
#pragma unroll
                for (int i = 0; i < 4; i++) {
                    dq[i][0] = fmaf(av[i], k01.x, dq[i][0]);
                    dq[i][1] = fmaf(av[i], k01.y, dq[i][1]);
                    dq[i][2] = fmaf(av[i], k89.x, dq[i][2]);
                    dq[i][3] = fmaf(av[i], k89.y, dq[i][3]);
                }
            }
#pragma unroll
            for (int i = 0; i < 4; i++) {
                int q = q0 + 4 * ty + i;
                if (q < T_)
                    red_add4(dq_acc + (((int64_t)b * T_ + q) * NH + h) * HDM + 4 * tx,
                             make_float4(dq[i][0], dq[i][1], dq[i][2], dq[i][3]));
            }
        }
    }
#pragma unroll
    for (int i = 0; i < 4; i++) {
        int key = k0 + ty + 16 * i;
        if (key >= T_) continue;
        T *row = dqkv + ((int64_t)b * T_ + key) * W + 4 * tx;
        float fk[4] = {dk[i][0] * scale, dk[i][1] * scale, dk[i][2] * scale, dk[i][3] * scale};
        lb_st4(row + (NH + kvh) * HDM, fk);
        lb_st4(row + (NH + NKV + kvh) * HDM, dv[i]);
    }
    if (dbias == NULL) return;
    /* the bias gradient's key and value columns: this block's column sums of dK and dV
     * (fp32, keys past T_ left out), over the thread's four keys, the two rows of a warp
     * (a shuffle) and the eight warps (shared memory), then one atomic a column */
    float *part = fsm; /* [8][2 * HDM]: the tiles are done with */
    __syncthreads();
#pragma unroll
    for (int c = 0; c < 4; c++) {
        float sk = 0.0f, sv = 0.0f;
#pragma unroll
        for (int i = 0; i < 4; i++)
            if (k0 + ty + 16 * i < T_) sk += dk[i][c], sv += dv[i][c];
        sk += __shfl_xor_sync(0xffffffffu, sk, 16);
        sv += __shfl_xor_sync(0xffffffffu, sv, 16);
        if ((ty & 1) == 0) {
            part[(ty >> 1) * 2 * HDM + 4 * tx + c] = sk * scale;
            part[(ty >> 1) * 2 * HDM + HDM + 4 * tx + c] = sv;
        }
    }
    __syncthreads();
    int c = threadIdx.x;
    if (c >= 2 * HDM) return;
    float sum = 0.0f;
#pragma unroll
    for (int w = 0; w < TT / 32; w++)
        sum += part[w * 2 * HDM + c];
    atomicAdd(dbias + (c < HDM ? (NH + kvh) * HDM + c : (NH + NKV + kvh) * HDM + c - HDM), sum);
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
            sV[r][d] =
                key < T_ ? lb_to_f(base[(int64_t)key * W + (NH + NKV + kvh) * HD + d]) : 0.0f;
        }
        __syncthreads();
        if (qi >= T_) continue;
        for (int j = 0; j < SK && k0 + j <= qi; j++) {
            float s = 0.0f;
#pragma unroll
            for (int d = 0; d < HD; d++)
                s += q[d] * sK[j][d];
            if (s > m) {
                float c = __expf(m - s);
                l *= c;
#pragma unroll
                for (int d = 0; d < HD; d++)
                    acc[d] *= c;
                m = s;
            }
            float p = __expf(s - m);
            l += p;
#pragma unroll
            for (int d = 0; d < HD; d++)
                acc[d] += p * sV[j][d];
        }
    }
    if (qi >= T_) return;
    T *o = out + ((int64_t)b * T_ + qi) * NH * HD + h * HD;
#pragma unroll
    for (int d = 0; d < HD; d++)
        o[d] = lb_from_f<T>(acc[d] / l);
    lse[((int64_t)b * NH + h) * T_ + qi] = m + logf(l);
}

/* D[b,h,t] = sum_d dout * out: one thread per 8 elements, HD/8 adjacent lanes per row
 * (HD a multiple of 8, at most 256); also clears those elements of the HD-64
 * backward's dQ accumulator [B,T,NH,HD] when there is one. */
template <typename T>
__global__ void attn_dsum_kernel(float *Dsum, float *dq_acc, const T *dout, const T *out,
                                 int64_t rows, int T_, int NH, int HD) {
    int cpr = HD / 8; /* a power of two dividing 32 */
    int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x, row = i / cpr;
    float s = 0.0f;
    if (row < rows) {
        float a[8], o[8];
        lb_ld8(a, dout + i * 8);
        lb_ld8(o, out + i * 8);
#pragma unroll
        for (int k = 0; k < 8; k++)
            s += a[k] * o[k];
        if (dq_acc) {
            float4 z = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            ((float4 *)(dq_acc + i * 8))[0] = z;
            ((float4 *)(dq_acc + i * 8))[1] = z;
        }
    }
    for (int o = cpr / 2; o > 0; o >>= 1)
        s += __shfl_xor_sync(0xffffffffu, s, o);
    if (row < rows && i % cpr == 0) {
        int h = (int)(row % NH);
        int64_t bt = row / NH;
        Dsum[((bt / T_) * NH + h) * T_ + bt % T_] = s;
    }
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
        sk[threadIdx.x * (HD + 1) + d] =
            kj < T_ ? lb_to_f(base[(int64_t)kj * W + (NH + kvh) * HD + d]) : 0.0f;
        sv[threadIdx.x * (HD + 1) + d] =
            kj < T_ ? lb_to_f(base[(int64_t)kj * W + (NH + NKV + kvh) * HD + d]) : 0.0f;
    }
    float dk[HD], dv[HD];
#pragma unroll
    for (int d = 0; d < HD; d++)
        dk[d] = dv[d] = 0.0f;
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
            for (int d = 0; d < HD; d++)
                dq[d] += ds * sk[j * HD + d];
        }
    }
    if (qi >= T_) return;
    T *row = dqkv + ((int64_t)b * T_ + qi) * W + h * HD;
#pragma unroll
    for (int d = 0; d < HD; d++)
        row[d] = lb_from_f<T>(dq[d]);
}

/* ------------------------------------------------------------------------------------ */
/* launchers                                                                             */

static bool use_mma(lb_gpu_dtype dt, int HD, lb_gpu_attn_impl impl) {
    return impl != LB_ATTN_SCALAR && dt != LB_DT_F32 && HD == HDM;
}

/* Scratch: D [B,NH,T] fp32, rounded up to 256 bytes, then the dQ accumulator [B,T,NH,HD]. */
static size_t dsum_bytes(int B, int T, int NH) {
    return ((size_t)B * NH * T * sizeof(float) + 255) / 256 * 256;
}

extern "C" size_t lb_gpu_attention_scratch_bytes(int B, int T, int NH, int HD) {
    return dsum_bytes(B, T, NH) + (size_t)B * T * NH * HD * sizeof(float);
}

template <typename T, int HD>
static lb_status fwd_scalar(void *out, float *lse, const void *qkv, int B, int T_, int NH, int NKV,
                            cudaStream_t s, lb_err *err) {
    dim3 grid((unsigned)((T_ + SQ - 1) / SQ), (unsigned)NH, (unsigned)B);
    attn_fwd_scalar_kernel<T, HD><<<grid, SQ, 0, s>>>((T *)out, lse, (const T *)qkv, T_, NH, NKV);
    LB_CUDA_LAUNCH_TRY(err);
    return LB_OK;
}

template <typename T, int HD>
static lb_status bwd_scalar(void *dqkv, float *dbias, float *Dsum, const void *dout,
                            const void *qkv, const float *lse, int B, int T_, int NH, int NKV,
                            lb_gpu_dtype dt, cudaStream_t s, lb_err *err) {
    size_t smem_kv = (2 * SQ * (HD + 1) + 2 * SK * HD + 2 * SK) * sizeof(float);
    size_t smem_q = (SQ * (HD + 1) + 2 * SK * HD) * sizeof(float);
    LB_CUDA_TRY(err,
                cudaFuncSetAttribute(attn_bwd_kv_scalar_kernel<T, HD>,
                                     cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem_kv));
    LB_CUDA_TRY(err,
                cudaFuncSetAttribute(attn_bwd_q_scalar_kernel<T, HD>,
                                     cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem_q));
    unsigned nt = (unsigned)((T_ + SQ - 1) / SQ);
    attn_bwd_kv_scalar_kernel<T, HD><<<dim3(nt, (unsigned)NKV, (unsigned)B), SQ, smem_kv, s>>>(
        (T *)dqkv, (const T *)dout, (const T *)qkv, lse, Dsum, T_, NH, NKV);
    LB_CUDA_LAUNCH_TRY(err);
    attn_bwd_q_scalar_kernel<T, HD><<<dim3(nt, (unsigned)NH, (unsigned)B), SQ, smem_q, s>>>(
        (T *)dqkv, (const T *)dout, (const T *)qkv, lse, Dsum, T_, NH, NKV);
    LB_CUDA_LAUNCH_TRY(err);
    if (dbias == NULL) return LB_OK;
    int64_t W = (int64_t)(NH + 2 * NKV) * HD; /* a separate reduction over dqkv */
    return lb_gpu_bias_backward(dbias, dqkv, (int64_t)B * T_, (int)W, W, dt, s, err);
}

/* dqkv's query part (and dbias's) from the dQ accumulator the HD-64 backward kernels fill */
template <typename T>
static lb_status dq_store(void *dqkv, float *dbias, const float *dq_acc, int B, int T_, int NH,
                          int NKV, cudaStream_t s, lb_err *err) {
    int64_t BT = (int64_t)B * T_;
    dim3 grid((unsigned)((BT + DQ_ROWS - 1) / DQ_ROWS), (unsigned)((NH * HDM / 16 + 15) / 16));
    attn_dq_store_kernel<T>
        <<<grid, dim3(16, 16), 0, s>>>((T *)dqkv, dbias, dq_acc, BT, NH, NKV, rsqrtf((float)HDM));
    LB_CUDA_LAUNCH_TRY(err);
    return LB_OK;
}

template <typename T>
static lb_status fwd_mma(void *out, float *lse, const void *qkv, int B, int T_, int NH, int NKV,
                         cudaStream_t s, lb_err *err) {
    size_t smem = (size_t)(FQ + 4 * KT) * LDS * sizeof(T);
    LB_CUDA_TRY(err, cudaFuncSetAttribute(attn_fwd_mma_kernel<T>,
                                          cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    unsigned blocks = (unsigned)((T_ + FQ - 1) / FQ) * (unsigned)NH * (unsigned)B;
    attn_fwd_mma_kernel<T>
        <<<blocks, FW * 32, smem, s>>>((T *)out, lse, (const T *)qkv, B, T_, NH, NKV);
    LB_CUDA_LAUNCH_TRY(err);
    return LB_OK;
}

/* Asked once per process: a probe kernel reports whether its code here is sm_90a's. */
extern "C" bool lb_gpu_attention_wgmma(void) {
    static int ready = -1;
    if (ready >= 0) return ready == 1;
    int *d = NULL, flag = 0;
    ready = cudaMalloc(&d, sizeof flag) == cudaSuccess;
    if (ready) {
        wgmma_present_kernel<<<1, 1>>>(d);
        ready =
            cudaMemcpy(&flag, d, sizeof flag, cudaMemcpyDeviceToHost) == cudaSuccess && flag == 1;
    }
    if (d) cudaFree(d);
    cudaGetLastError();
    return ready == 1;
}

template <typename T>
static lb_status bwd_mma(void *dqkv, float *dbias, float *Dsum, float *dq_acc, const void *dout,
                         const void *qkv, const float *lse, int B, int T_, int NH, int NKV,
                         cudaStream_t s, lb_err *err) {
    size_t smem = (size_t)(3 * BK + 4 * BQ) * LDS * sizeof(T) + 4 * BQ * sizeof(float);
    LB_CUDA_TRY(err, cudaFuncSetAttribute(attn_bwd_mma_kernel<T>,
                                          cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    unsigned blocks = (unsigned)((T_ + BK - 1) / BK) * (unsigned)NKV * (unsigned)B;
    attn_bwd_mma_kernel<T><<<blocks, BW * 32, smem, s>>>((T *)dqkv, dbias, dq_acc, (const T *)dout,
                                                         (const T *)qkv, lse, Dsum, B, T_, NH, NKV);
    LB_CUDA_LAUNCH_TRY(err);
    return dq_store<T>(dqkv, dbias, dq_acc, B, T_, NH, NKV, s, err);
}

template <typename T>
static lb_status bwd_wgmma(void *dqkv, float *dbias, float *Dsum, float *dq_acc, const void *dout,
                           const void *qkv, const float *lse, int B, int T_, int NH, int NKV,
                           cudaStream_t s, lb_err *err) {
    /* K, V (128 rows), the Q and dO stages, two dS^T buffers; lse and D stages */
    size_t smem = (8 + 2 * WSTAGES) * CM_TILE * sizeof(T) + 2 * WSTAGES * WBQ * sizeof(float);
    LB_CUDA_TRY(err, cudaFuncSetAttribute(attn_bwd_wgmma_kernel<T>,
                                          cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    unsigned blocks = (unsigned)((T_ + WK - 1) / WK) * (unsigned)NKV * (unsigned)B;
    attn_bwd_wgmma_kernel<T><<<blocks, 256, smem, s>>>((T *)dqkv, dbias, dq_acc, (const T *)dout,
                                                       (const T *)qkv, lse, Dsum, B, T_, NH, NKV);
    LB_CUDA_LAUNCH_TRY(err);
    return dq_store<T>(dqkv, dbias, dq_acc, B, T_, NH, NKV, s, err);
}

template <typename T>
static lb_status fwd_simt(void *out, float *lse, const void *qkv, int B, int T_, int NH, int NKV,
                          cudaStream_t s, lb_err *err) {
    size_t smem = (size_t)(3 * TB * TLD + TB * PLD) * sizeof(float);
    LB_CUDA_TRY(err, cudaFuncSetAttribute(attn_fwd_simt_kernel<T>,
                                          cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    unsigned blocks = (unsigned)((T_ + TB - 1) / TB) * (unsigned)NH * (unsigned)B;
    attn_fwd_simt_kernel<T><<<blocks, TT, smem, s>>>((T *)out, lse, (const T *)qkv, B, T_, NH, NKV);
    LB_CUDA_LAUNCH_TRY(err);
    return LB_OK;
}

template <typename T>
static lb_status bwd_simt(void *dqkv, float *dbias, float *Dsum, float *dq_acc, const void *dout,
                          const void *qkv, const float *lse, int B, int T_, int NH, int NKV,
                          cudaStream_t s, lb_err *err) {
    size_t smem = (size_t)(4 * TB * TLD + TB * PLD + 2 * TB) * sizeof(float); /* 88.5 KB */
    LB_CUDA_TRY(err, cudaFuncSetAttribute(attn_bwd_simt_kernel<T>,
                                          cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    unsigned blocks = (unsigned)((T_ + TB - 1) / TB) * (unsigned)NKV * (unsigned)B;
    attn_bwd_simt_kernel<T><<<blocks, TT, smem, s>>>((T *)dqkv, dbias, dq_acc, (const T *)dout,
                                                     (const T *)qkv, lse, Dsum, B, T_, NH, NKV);
    LB_CUDA_LAUNCH_TRY(err);
    return dq_store<T>(dqkv, dbias, dq_acc, B, T_, NH, NKV, s, err);
}

#define HD_DISPATCH(HD, ...)                                                                       \
    switch (HD) {                                                                                  \
    case 8: {                                                                                      \
        constexpr int HDC = 8;                                                                     \
        __VA_ARGS__;                                                                               \
    } break;                                                                                       \
    case 16: {                                                                                     \
        constexpr int HDC = 16;                                                                    \
        __VA_ARGS__;                                                                               \
    } break;                                                                                       \
    case 32: {                                                                                     \
        constexpr int HDC = 32;                                                                    \
        __VA_ARGS__;                                                                               \
    } break;                                                                                       \
    case 128: {                                                                                    \
        constexpr int HDC = 128;                                                                   \
        __VA_ARGS__;                                                                               \
    } break;                                                                                       \
    default:                                                                                       \
        return lb_fail(err, LB_ERR_UNSUPPORTED,                                                    \
                       "scalar attention supports head sizes 8, 16, 32 and 128, not %d", HD);      \
    }

static lb_status check_heads(int NH, int NKV, int HD, lb_err *err) {
    if (NKV <= 0 || NH % NKV != 0)
        return lb_fail(err, LB_ERR_UNSUPPORTED,
                       "attention needs n_head (%d) divisible by "
                       "n_kv_head (%d)",
                       NH, NKV);
    if (HD != 8 && HD != 16 && HD != 32 && HD != 64 && HD != 128)
        return lb_fail(err, LB_ERR_UNSUPPORTED,
                       "attention supports head sizes 8, 16, 32, 64 and 128, not %d", HD);
    return LB_OK;
}

extern "C" lb_status lb_gpu_attention_forward(void *out, float *lse, const void *qkv, int B, int T,
                                              int NH, int NKV, int HD, lb_gpu_dtype dt,
                                              lb_gpu_attn_impl impl, cudaStream_t s, lb_err *err) {
    LB_TRY(check_heads(NH, NKV, HD, err));
    if (use_mma(dt, HD, impl)) {
        if (dt == LB_DT_BF16) return fwd_mma<__nv_bfloat16>(out, lse, qkv, B, T, NH, NKV, s, err);
        return fwd_mma<__half>(out, lse, qkv, B, T, NH, NKV, s, err);
    }
    if (HD == HDM) {
        LB_DISPATCH_DTYPE(dt, E, return (fwd_simt<E>(out, lse, qkv, B, T, NH, NKV, s, err)));
        return LB_OK;
    }
    HD_DISPATCH(HD, LB_DISPATCH_DTYPE(
                        dt, E, return (fwd_scalar<E, HDC>(out, lse, qkv, B, T, NH, NKV, s, err))));
    return LB_OK;
}

extern "C" lb_status lb_gpu_attention_backward(void *dqkv, float *dbias, void *scratch,
                                               const void *dout, const void *qkv, const void *out,
                                               const float *lse, int B, int T, int NH, int NKV,
                                               int HD, lb_gpu_dtype dt, lb_gpu_attn_impl impl,
                                               cudaStream_t s, lb_err *err) {
    LB_TRY(check_heads(NH, NKV, HD, err));
    float *Dsum = (float *)scratch;
    bool mma = use_mma(dt, HD, impl);
    float *dq_acc = HD == HDM ? (float *)((char *)scratch + dsum_bytes(B, T, NH)) : NULL;
    int64_t rows = (int64_t)B * T * NH;
    LB_DISPATCH_DTYPE(dt, E,
                      attn_dsum_kernel<E><<<lb_blocks(rows * (HD / 8), 256), 256, 0, s>>>(
                          Dsum, dq_acc, (const E *)dout, (const E *)out, rows, T, NH, HD));
    LB_CUDA_LAUNCH_TRY(err);
    if (mma && impl == LB_ATTN_AUTO && lb_gpu_attention_wgmma()) {
        if (dt == LB_DT_BF16)
            return bwd_wgmma<__nv_bfloat16>(dqkv, dbias, Dsum, dq_acc, dout, qkv, lse, B, T, NH,
                                            NKV, s, err);
        return bwd_wgmma<__half>(dqkv, dbias, Dsum, dq_acc, dout, qkv, lse, B, T, NH, NKV, s, err);
    }
    if (mma) {
        if (dt == LB_DT_BF16)
            return bwd_mma<__nv_bfloat16>(dqkv, dbias, Dsum, dq_acc, dout, qkv, lse, B, T, NH, NKV,
                                          s, err);
        return bwd_mma<__half>(dqkv, dbias, Dsum, dq_acc, dout, qkv, lse, B, T, NH, NKV, s, err);
    }
    if (HD == HDM) {
        LB_DISPATCH_DTYPE(
            dt, E,
            return (bwd_simt<E>(dqkv, dbias, Dsum, dq_acc, dout, qkv, lse, B, T, NH, NKV, s, err)));
        return LB_OK;
    }
    HD_DISPATCH(HD, LB_DISPATCH_DTYPE(dt, E,
                                      return (bwd_scalar<E, HDC>(dqkv, dbias, Dsum, dout, qkv, lse,
                                                                 B, T, NH, NKV, dt, s, err))));
    return LB_OK;
}
