/* attention_mma.cu: attention on tensor cores through mma.sync (fp16/bf16, HD 64).
 *
 * A flash-attention style forward per 128-query block with an online softmax in
 * registers, and a backward as one kernel per 64-key block (dK, dV in registers, dQ added
 * into attention.cu's fp32 accumulator). Fragment conventions are ptx.cuh's: two adjacent
 * C tiles of a score matrix are the A fragment of the next product (P V), so
 * probabilities never leave registers. Every shared operand is read with ldmatrix.x4
 * (.trans where it is stored [k][n]); rows are padded by 8 elements so the eight rows of
 * each 8x8 matrix hit distinct banks. Tiles go global -> shared through cp.async in a
 * two-stage pipeline. Softmax runs in base 2 (scores times log2 e / sqrt(HD)); only tiles
 * that cross the diagonal or the sequence end are masked. The backward's dQ
 * contributions are added with fp32 atomics (16-byte vector reductions on sm_90), so dQ's
 * summation order, and its last bits, can vary between runs. On sm_90 with sm_90a code
 * the backward is attention_wgmma.cu's; this one serves other GPUs and LB_ATTN_MMA_SYNC. */
#include "kernels/attention_impl.cuh"

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
static __global__ void __launch_bounds__(FW * 32, 2)
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
static __global__ void __launch_bounds__(BW * 32, 3)
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

lb_status lb_attention_mma_forward(void *out, float *lse, const void *qkv, int B, int T, int NH,
                                   int NKV, lb_gpu_dtype dt, cudaStream_t s, lb_err *err) {
    if (dt == LB_DT_BF16) return fwd_mma<__nv_bfloat16>(out, lse, qkv, B, T, NH, NKV, s, err);
    return fwd_mma<__half>(out, lse, qkv, B, T, NH, NKV, s, err);
}

template <typename T>
static lb_status bwd_mma(void *dqkv, float *dbias, const float *Dsum, float *dq_acc,
                         const void *dout, const void *qkv, const float *lse, int B, int T_, int NH,
                         int NKV, cudaStream_t s, lb_err *err) {
    size_t smem = (size_t)(3 * BK + 4 * BQ) * LDS * sizeof(T) + 4 * BQ * sizeof(float);
    LB_CUDA_TRY(err, cudaFuncSetAttribute(attn_bwd_mma_kernel<T>,
                                          cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    unsigned blocks = (unsigned)((T_ + BK - 1) / BK) * (unsigned)NKV * (unsigned)B;
    attn_bwd_mma_kernel<T><<<blocks, BW * 32, smem, s>>>((T *)dqkv, dbias, dq_acc, (const T *)dout,
                                                         (const T *)qkv, lse, Dsum, B, T_, NH, NKV);
    LB_CUDA_LAUNCH_TRY(err);
    return LB_OK;
}

lb_status lb_attention_mma_backward(void *dqkv, float *dbias, const float *Dsum, float *dq_acc,
                                    const void *dout, const void *qkv, const float *lse, int B,
                                    int T, int NH, int NKV, lb_gpu_dtype dt, cudaStream_t s,
                                    lb_err *err) {
    if (dt == LB_DT_BF16)
        return bwd_mma<__nv_bfloat16>(dqkv, dbias, Dsum, dq_acc, dout, qkv, lse, B, T, NH, NKV, s,
                                      err);
    return bwd_mma<__half>(dqkv, dbias, Dsum, dq_acc, dout, qkv, lse, B, T, NH, NKV, s, err);
}
