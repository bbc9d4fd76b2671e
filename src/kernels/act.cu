/* act.cu: element-wise kernels (act.cuh). Grid-stride loops, one element per step (SwiGLU:
 * eight columns per step, with 16-byte accesses, when d_ff is a multiple of 8); the
 * arithmetic is fp32 whatever the storage type. */
#include "gpu/common.cuh"
#include "kernels/act.cuh"

#define GELU_K 0.7978845608028654f /* sqrt(2/pi) */

#define GRID_LOOP(i, n)                                                                            \
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < (n);                      \
         i += (int64_t)gridDim.x * blockDim.x)

template <typename T> static __global__ void gelu_forward_kernel(T *out, const T *inp, int64_t n) {
    GRID_LOOP(i, n) {
        float x = lb_to_f(inp[i]);
        float u = GELU_K * (x + 0.044715f * x * x * x);
        out[i] = lb_from_f<T>(0.5f * x * (1.0f + tanhf(u)));
    }
}

template <typename T>
static __global__ void gelu_backward_kernel(T *dinp, const T *inp, const T *dout, int64_t n) {
    GRID_LOOP(i, n) {
        float x = lb_to_f(inp[i]);
        float u = GELU_K * (x + 0.044715f * x * x * x);
        float th = tanhf(u);
        float sech2 = 1.0f - th * th;
        float g =
            0.5f * (1.0f + th) + 0.5f * x * sech2 * GELU_K * (1.0f + 3.0f * 0.044715f * x * x);
        dinp[i] = lb_from_f<T>(g * lb_to_f(dout[i]));
    }
}

template <typename T>
static __global__ void swiglu_forward_kernel(T *out, const T *inp, int64_t N, int F) {
    GRID_LOOP(i, N * F) {
        int64_t r = i / F;
        int f = (int)(i % F);
        float g = lb_to_f(inp[r * 2 * F + f]), u = lb_to_f(inp[r * 2 * F + F + f]);
        out[i] = lb_from_f<T>(g / (1.0f + expf(-g)) * u);
    }
}

template <typename T>
static __global__ void swiglu_backward_kernel(T *dinp, const T *dout, const T *inp, int64_t N,
                                              int F) {
    GRID_LOOP(i, N * F) {
        int64_t r = i / F;
        int f = (int)(i % F);
        float g = lb_to_f(inp[r * 2 * F + f]), u = lb_to_f(inp[r * 2 * F + F + f]);
        float sg = 1.0f / (1.0f + expf(-g));
        float d = lb_to_f(dout[i]);
        dinp[r * 2 * F + f] = lb_from_f<T>(d * u * sg * (1.0f + g * (1.0f - sg)));
        dinp[r * 2 * F + F + f] = lb_from_f<T>(d * g * sg);
    }
}

template <typename T>
static __global__ void swiglu_forward_vec_kernel(T *out, const T *inp, int64_t N, int F) {
    int F8 = F / 8;
    GRID_LOOP(i, N * F8) {
        int64_t r = i / F8;
        int f = (int)(i % F8) * 8;
        float g[8], u[8], o[8];
        lb_ld8(g, inp + r * 2 * F + f);
        lb_ld8(u, inp + r * 2 * F + F + f);
#pragma unroll
        for (int k = 0; k < 8; k++)
            o[k] = g[k] / (1.0f + expf(-g[k])) * u[k];
        lb_st8(out + r * F + f, o);
    }
}

template <typename T>
static __global__ void swiglu_backward_vec_kernel(T *dinp, const T *dout, const T *inp, int64_t N,
                                                  int F) {
    int F8 = F / 8;
    GRID_LOOP(i, N * F8) {
        int64_t r = i / F8;
        int f = (int)(i % F8) * 8;
        float g[8], u[8], d[8], dg[8], du[8];
        lb_ld8(g, inp + r * 2 * F + f);
        lb_ld8(u, inp + r * 2 * F + F + f);
        lb_ld8(d, dout + r * F + f);
#pragma unroll
        for (int k = 0; k < 8; k++) {
            float sg = 1.0f / (1.0f + expf(-g[k]));
            dg[k] = d[k] * u[k] * sg * (1.0f + g[k] * (1.0f - sg));
            du[k] = d[k] * g[k] * sg;
        }
        lb_st8(dinp + r * 2 * F + f, dg);
        lb_st8(dinp + r * 2 * F + F + f, du);
    }
}

static bool swiglu_vec(int F, const void *a, const void *b) {
    return F % 8 == 0 && ((uintptr_t)a | (uintptr_t)b) % 16 == 0;
}

/* Block (32, 8): 32 columns, 8 row lanes over a chunk of rows; grid.y splits the rows. */
template <typename T>
static __global__ void bias_backward_kernel(float *dbias, const T *dout, int64_t N, int OC,
                                            int64_t ld, int64_t rows_per_chunk) {
    __shared__ float part[8][33];
    int c = blockIdx.x * 32 + threadIdx.x;
    int64_t r0 = blockIdx.y * rows_per_chunk, r1 = r0 + rows_per_chunk;
    if (r1 > N) r1 = N;
    float acc = 0.0f;
    if (c < OC)
        for (int64_t r = r0 + threadIdx.y; r < r1; r += 8)
            acc += lb_to_f(dout[r * ld + c]);
    part[threadIdx.y][threadIdx.x] = acc;
    __syncthreads();
    if (threadIdx.y == 0 && c < OC) {
        for (int j = 1; j < 8; j++)
            acc += part[j][threadIdx.x];
        atomicAdd(&dbias[c], acc);
    }
}

/* Block (32, 8) over 256 columns, eight per thread with 16-byte loads (OC and ld multiples
 * of 8, dout 16-byte aligned); 8 row lanes over a chunk of rows; grid.y splits the rows. */
template <typename T>
static __global__ void bias_backward_vec_kernel(float *dbias, const T *dout, int64_t N, int OC,
                                                int64_t ld, int64_t rows_per_chunk) {
    __shared__ float part[8][32 * 8 + 1];
    int c = (blockIdx.x * 32 + threadIdx.x) * 8;
    int64_t r0 = blockIdx.y * rows_per_chunk, r1 = r0 + rows_per_chunk;
    if (r1 > N) r1 = N;
    float acc[8] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
    if (c < OC) {
#pragma unroll 4
        for (int64_t r = r0 + threadIdx.y; r < r1; r += 8) {
            float v[8];
            lb_ld8(v, dout + r * ld + c);
#pragma unroll
            for (int k = 0; k < 8; k++)
                acc[k] += v[k];
        }
    }
#pragma unroll
    for (int k = 0; k < 8; k++)
        part[threadIdx.y][threadIdx.x * 8 + k] = acc[k];
    __syncthreads();
    int t = threadIdx.y * 32 + threadIdx.x, col = blockIdx.x * 256 + t;
    if (col < OC) {
        float sum = 0.0f;
#pragma unroll
        for (int j = 0; j < 8; j++)
            sum += part[j][t];
        atomicAdd(&dbias[col], sum);
    }
}

/* Block (32, 8): 32 input columns, 8 lanes over the output rows, grid.y splits the rows.
 * The sum over output row o of dsum[o] W[o, j] lands on bias entry ((j / hd) / group) hd +
 * j % hd (see act.cuh). */
template <typename T>
static __global__ void bias_grad_through_kernel(float *dbias, const float *dsum, const T *W, int OC,
                                                int IC, int hd, int group, int rows_per_chunk) {
    __shared__ float part[8][33];
    int j = blockIdx.x * 32 + threadIdx.x;
    int o0 = blockIdx.y * rows_per_chunk, o1 = min(o0 + rows_per_chunk, OC);
    float acc = 0.0f;
    if (j < IC)
        for (int o = o0 + threadIdx.y; o < o1; o += 8)
            acc += dsum[o] * lb_to_f(W[(int64_t)o * IC + j]);
    part[threadIdx.y][threadIdx.x] = acc;
    __syncthreads();
    if (threadIdx.y == 0 && j < IC) {
        for (int r = 1; r < 8; r++)
            acc += part[r][threadIdx.x];
        atomicAdd(&dbias[(j / hd) / group * hd + j % hd], acc);
    }
}

/* x[r, col] = 1 and x[r, col + 1 .. col + width - 1] = 0 for each of the rows (ld apart) */
template <typename T>
static __global__ void ones_column_kernel(T *x, int64_t rows, int64_t ld, int col, int width) {
    GRID_LOOP(i, rows * width) {
        int64_t r = i / width;
        int c = (int)(i % width);
        x[r * ld + col + c] = lb_from_f<T>(c == 0 ? 1.0f : 0.0f);
    }
}

/* dw[r, c] = src[r, c] (as TW) for c < cols; dbias[r] += src[r, cols]. One thread per
 * (row, 8 columns), the bias column by the row's last thread. */
template <typename TW>
static __global__ void split_bias_column_kernel(TW *dw, float *dbias, const float *src, int rows,
                                                int cols, int64_t ld, bool add) {
    int per = cols / 8 + 1;
    GRID_LOOP(i, (int64_t)rows * per) {
        int64_t r = i / per;
        int c = (int)(i % per) * 8;
        if (c < cols) {
            float v[8];
            lb_ld8(v, src + r * ld + c);
            if (add) {
                float o[8];
                lb_ld8(o, dw + r * cols + c);
                for (int k = 0; k < 8; k++)
                    v[k] += o[k];
            }
            lb_st8(dw + r * cols + c, v);
        } else {
            dbias[r] += src[r * ld + cols];
        }
    }
}

template <typename TI>
static __global__ void accumulate_kernel(float *acc, const TI *in, int64_t n) {
    GRID_LOOP(i, n) acc[i] += lb_to_f(in[i]);
}

template <typename TO, typename TI>
static __global__ void convert_kernel(TO *out, const TI *in, int64_t n) {
    GRID_LOOP(i, n) out[i] = lb_from_f<TO>(lb_to_f(in[i]));
}

extern "C" lb_status lb_act_gelu_forward(void *out, const void *inp, int64_t n, lb_gpu_dtype dt,
                                         cudaStream_t s, lb_err *err) {
    LB_DISPATCH_DTYPE(dt, E,
                      gelu_forward_kernel<E>
                      <<<lb_grid_cap(n, 256), 256, 0, s>>>((E *)out, (const E *)inp, n));
    LB_CUDA_LAUNCH_TRY(err);
    return LB_OK;
}

extern "C" lb_status lb_act_gelu_backward(void *dinp, const void *inp, const void *dout, int64_t n,
                                          lb_gpu_dtype dt, cudaStream_t s, lb_err *err) {
    LB_DISPATCH_DTYPE(dt, E,
                      gelu_backward_kernel<E><<<lb_grid_cap(n, 256), 256, 0, s>>>(
                          (E *)dinp, (const E *)inp, (const E *)dout, n));
    LB_CUDA_LAUNCH_TRY(err);
    return LB_OK;
}

extern "C" lb_status lb_act_swiglu_forward(void *out, const void *inp, int64_t N, int F,
                                           lb_gpu_dtype dt, cudaStream_t s, lb_err *err) {
    if (swiglu_vec(F, out, inp)) {
        LB_DISPATCH_DTYPE(dt, E,
                          swiglu_forward_vec_kernel<E><<<lb_grid_cap(N * F / 8, 256), 256, 0, s>>>(
                              (E *)out, (const E *)inp, N, F));
    } else {
        LB_DISPATCH_DTYPE(dt, E,
                          swiglu_forward_kernel<E>
                          <<<lb_grid_cap(N * F, 256), 256, 0, s>>>((E *)out, (const E *)inp, N, F));
    }
    LB_CUDA_LAUNCH_TRY(err);
    return LB_OK;
}

extern "C" lb_status lb_act_swiglu_backward(void *dinp, const void *dout, const void *inp,
                                            int64_t N, int F, lb_gpu_dtype dt, cudaStream_t s,
                                            lb_err *err) {
    if (swiglu_vec(F, dinp, dout) && swiglu_vec(F, inp, inp)) {
        LB_DISPATCH_DTYPE(dt, E,
                          swiglu_backward_vec_kernel<E><<<lb_grid_cap(N * F / 8, 256), 256, 0, s>>>(
                              (E *)dinp, (const E *)dout, (const E *)inp, N, F));
    } else {
        LB_DISPATCH_DTYPE(dt, E,
                          swiglu_backward_kernel<E><<<lb_grid_cap(N * F, 256), 256, 0, s>>>(
                              (E *)dinp, (const E *)dout, (const E *)inp, N, F));
    }
    LB_CUDA_LAUNCH_TRY(err);
    return LB_OK;
}

extern "C" lb_status lb_act_bias_backward(float *dbias, const void *dout, int64_t N, int OC,
                                          int64_t ld, lb_gpu_dtype dt, cudaStream_t s,
                                          lb_err *err) {
    if (OC % 8 == 0 && ld % 8 == 0 && (uintptr_t)dout % 16 == 0) {
        /* 128 rows a chunk: enough blocks to keep loads in flight, few atomics a column */
        int64_t chunks = (N + 127) / 128;
        dim3 grid((unsigned)((OC + 255) / 256), (unsigned)chunks), block(32, 8);
        LB_DISPATCH_DTYPE(dt, E,
                          bias_backward_vec_kernel<E>
                          <<<grid, block, 0, s>>>(dbias, (const E *)dout, N, OC, ld, 128));
        LB_CUDA_LAUNCH_TRY(err);
        return LB_OK;
    }
    int64_t chunks = (N + 255) / 256;
    if (chunks > 64) chunks = 64;
    int64_t rows = (N + chunks - 1) / chunks;
    dim3 grid((unsigned)((OC + 31) / 32), (unsigned)chunks), block(32, 8);
    LB_DISPATCH_DTYPE(dt, E,
                      bias_backward_kernel<E>
                      <<<grid, block, 0, s>>>(dbias, (const E *)dout, N, OC, ld, rows));
    LB_CUDA_LAUNCH_TRY(err);
    return LB_OK;
}

extern "C" lb_status lb_act_bias_grad_through(float *dbias, const float *dsum, const void *W,
                                              int OC, int IC, int hd, int group, lb_gpu_dtype dt,
                                              cudaStream_t s, lb_err *err) {
    int chunks = (OC + 63) / 64;
    dim3 grid((unsigned)((IC + 31) / 32), (unsigned)chunks), block(32, 8);
    LB_DISPATCH_DTYPE(dt, E,
                      bias_grad_through_kernel<E>
                      <<<grid, block, 0, s>>>(dbias, dsum, (const E *)W, OC, IC, hd, group, 64));
    LB_CUDA_LAUNCH_TRY(err);
    return LB_OK;
}

extern "C" lb_status lb_act_ones_column(void *x, int64_t rows, int64_t ld, int col, int width,
                                        lb_gpu_dtype dt, cudaStream_t s, lb_err *err) {
    LB_DISPATCH_DTYPE(dt, E,
                      ones_column_kernel<E><<<lb_grid_cap(rows * width, 256), 256, 0, s>>>(
                          (E *)x, rows, ld, col, width));
    LB_CUDA_LAUNCH_TRY(err);
    return LB_OK;
}

extern "C" lb_status lb_act_split_bias_column(void *dw, lb_gpu_dtype dw_type, float *dbias,
                                              const float *src, int rows, int cols, int64_t ld,
                                              bool add, cudaStream_t s, lb_err *err) {
    if (cols % 8 != 0 || ld % 4 != 0 || ld <= cols || (uintptr_t)src % 16 != 0 ||
        (uintptr_t)dw % 16 != 0)
        return lb_fail(err, LB_ERR_UNSUPPORTED,
                       "splitting a bias column needs 8-column multiples (got %d columns, row "
                       "stride %lld) and 16-byte aligned buffers",
                       cols, (long long)ld);
    int64_t n = (int64_t)rows * (cols / 8 + 1);
    LB_DISPATCH_DTYPE(dw_type, E,
                      split_bias_column_kernel<E><<<lb_grid_cap(n, 256), 256, 0, s>>>(
                          (E *)dw, dbias, src, rows, cols, ld, add));
    LB_CUDA_LAUNCH_TRY(err);
    return LB_OK;
}

extern "C" lb_status lb_act_accumulate(float *acc, const void *in, lb_gpu_dtype dt_in, int64_t n,
                                       cudaStream_t s, lb_err *err) {
    LB_DISPATCH_DTYPE(dt_in, EI,
                      accumulate_kernel<EI>
                      <<<lb_grid_cap(n, 256), 256, 0, s>>>(acc, (const EI *)in, n));
    LB_CUDA_LAUNCH_TRY(err);
    return LB_OK;
}

extern "C" lb_status lb_act_convert(void *out, lb_gpu_dtype dt_out, const void *in,
                                    lb_gpu_dtype dt_in, int64_t n, cudaStream_t s, lb_err *err) {
    unsigned g = lb_grid_cap(n, 256);
    LB_DISPATCH_DTYPE(dt_out, EO,
                      LB_DISPATCH_DTYPE(dt_in, EI,
                                        convert_kernel<EO, EI>
                                        <<<g, 256, 0, s>>>((EO *)out, (const EI *)in, n)));
    LB_CUDA_LAUNCH_TRY(err);
    return LB_OK;
}

static __global__ void fill_kernel(float *x, int64_t n, float value) {
    GRID_LOOP(i, n) x[i] = value;
}

__device__ __forceinline__ uint64_t splitmix64(uint64_t z) {
    z += 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static __global__ void fill_normal_kernel(float *x, int64_t n, float std, uint64_t seed,
                                          int64_t first) {
    GRID_LOOP(i, n) {
        uint64_t r = splitmix64(seed ^ splitmix64((uint64_t)(first + i)));
        float u1 = ((float)(r >> 40) + 1.0f) * (1.0f / 16777216.0f); /* (0, 1] */
        float u2 = (float)((r >> 16) & 0xffffffu) * (1.0f / 16777216.0f);
        x[i] = std * sqrtf(-2.0f * logf(u1)) * cospif(2.0f * u2);
    }
}

extern "C" lb_status lb_act_fill(float *x, int64_t n, float value, cudaStream_t s, lb_err *err) {
    fill_kernel<<<lb_grid_cap(n, 256), 256, 0, s>>>(x, n, value);
    LB_CUDA_LAUNCH_TRY(err);
    return LB_OK;
}

extern "C" lb_status lb_act_fill_normal(float *x, int64_t n, float std, uint64_t seed,
                                        int64_t first_index, cudaStream_t s, lb_err *err) {
    fill_normal_kernel<<<lb_grid_cap(n, 256), 256, 0, s>>>(x, n, std, seed, first_index);
    LB_CUDA_LAUNCH_TRY(err);
    return LB_OK;
}
