/* adamw.cu: optimizer kernels (adamw.cuh). Every thread reads the step's global state
 * (norm, scale, step) from device memory, so the host never waits for the norm. */
#include "gpu/adamw.cuh"
#include "gpu/common.cuh"

__global__ void sumsq_kernel(double *acc, const float *g, int64_t n) {
    __shared__ float scratch[32];
    float s = 0.0f;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        s += g[i] * g[i];
    s = lb_block_sum(s, scratch);
    if (threadIdx.x == 0) atomicAdd(acc, (double)s);
}

/* Four consecutive parameters per step, 16-byte accesses (a partial last vector element
 * by element); the decay flag comes from the segment table: a binary search for a
 * thread's first vector, then a forward scan across segment starts (the grid-stride loop
 * only moves forward), so a vector's loads wait on no chain of table reads. */
template <typename T>
__global__ void adamw_kernel(float *__restrict__ master, T *__restrict__ lp,
                             const float *__restrict__ grads, float *__restrict__ m,
                             float *__restrict__ v, int64_t n, const int64_t *seg_start,
                             const int32_t *seg_decay, int n_seg, lb_gpu_adamw_params p,
                             const lb_gpu_optstate *st) {
    float scale = p.dynamic_scaling ? st->loss_scale : 1.0f;
    float norm = (float)sqrt(st->sumsq) / scale;
    if (p.dynamic_scaling && !isfinite(norm)) return;
    float clip = 1.0f;
    if (p.grad_clip > 0.0f) clip = fminf(1.0f, p.grad_clip / (norm + 1e-6f));
    float gscale = clip / scale;
    int t = st->step + 1;
    float bc1 = 1.0f - powf(p.beta1, (float)t), bc2 = 1.0f - powf(p.beta2, (float)t);
    float step_size = p.lr / bc1, sqrt_bc2 = sqrtf(bc2);
    int64_t nv = (n + 3) / 4;
    int lo = -1; /* the segment of the element last updated */
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < nv;
         i += (int64_t)gridDim.x * blockDim.x) {
        int64_t e0 = 4 * i;
        if (lo < 0) { /* last segment whose start <= e0 */
            int hi = n_seg - 1;
            lo = 0;
            while (lo < hi) {
                int mid = (lo + hi + 1) >> 1;
                if (seg_start[mid] <= e0) lo = mid;
                else hi = mid - 1;
            }
        }
        bool full = e0 + 4 <= n;
        float g[4], w[4], mi[4], vi[4];
        if (full) {
            float4 a = *(const float4 *)(grads + e0), b = *(const float4 *)(master + e0);
            float4 c = *(const float4 *)(m + e0), d = *(const float4 *)(v + e0);
            g[0] = a.x, g[1] = a.y, g[2] = a.z, g[3] = a.w;
            w[0] = b.x, w[1] = b.y, w[2] = b.z, w[3] = b.w;
            mi[0] = c.x, mi[1] = c.y, mi[2] = c.z, mi[3] = c.w;
            vi[0] = d.x, vi[1] = d.y, vi[2] = d.z, vi[3] = d.w;
        } else {
            for (int k = 0; k < 4; k++) {
                bool in = e0 + k < n;
                g[k] = in ? grads[e0 + k] : 0.0f;
                w[k] = in ? master[e0 + k] : 0.0f;
                mi[k] = in ? m[e0 + k] : 0.0f;
                vi[k] = in ? v[e0 + k] : 0.0f;
            }
        }
#pragma unroll
        for (int k = 0; k < 4; k++) {
            while (lo + 1 < n_seg && seg_start[lo + 1] <= e0 + k) lo++;
            float wd = seg_decay[lo] ? p.weight_decay : 0.0f;
            float gk = g[k] * gscale;
            float wk = w[k] * (1.0f - p.lr * wd);
            mi[k] = p.beta1 * mi[k] + (1.0f - p.beta1) * gk;
            vi[k] = p.beta2 * vi[k] + (1.0f - p.beta2) * gk * gk;
            w[k] = wk - step_size * mi[k] / (sqrtf(vi[k]) / sqrt_bc2 + p.eps);
        }
        if (full) {
            *(float4 *)(master + e0) = make_float4(w[0], w[1], w[2], w[3]);
            *(float4 *)(m + e0) = make_float4(mi[0], mi[1], mi[2], mi[3]);
            *(float4 *)(v + e0) = make_float4(vi[0], vi[1], vi[2], vi[3]);
            if (lp) {
                T o[4] __attribute__((aligned(16)));
#pragma unroll
                for (int k = 0; k < 4; k++) o[k] = lb_from_f<T>(w[k]);
                if (sizeof(T) == 2) *(uint2 *)(lp + e0) = *(const uint2 *)o;
                else *(float4 *)(lp + e0) = *(const float4 *)o;
            }
        } else {
            for (int k = 0; k < 4 && e0 + k < n; k++) {
                master[e0 + k] = w[k];
                m[e0 + k] = mi[k];
                v[e0 + k] = vi[k];
                if (lp) lp[e0 + k] = lb_from_f<T>(w[k]);
            }
        }
    }
}

__global__ void opt_finish_kernel(lb_gpu_optstate *st, lb_gpu_adamw_params p) {
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

extern "C" lb_status lb_gpu_grad_sumsq(lb_gpu_optstate *st, const float *grads, int64_t n,
                                       cudaStream_t s, lb_err *err) {
    sumsq_kernel<<<lb_grid_cap(n, 512), 512, 0, s>>>(&st->sumsq, grads, n);
    LB_CUDA_LAUNCH_TRY(err);
    return LB_OK;
}

extern "C" lb_status lb_gpu_adamw(float *master, void *params_lp, lb_gpu_dtype dt,
                                  const float *grads, float *m, float *v, int64_t n,
                                  const int64_t *seg_start, const int32_t *seg_decay, int n_seg,
                                  const lb_gpu_adamw_params *p, lb_gpu_optstate *st,
                                  cudaStream_t s, lb_err *err) {
    unsigned g = lb_grid_cap((n + 3) / 4, 256);
    LB_DISPATCH_DTYPE(dt, E,
        adamw_kernel<E><<<g, 256, 0, s>>>(master, (E *)params_lp, grads, m, v, n, seg_start,
                                          seg_decay, n_seg, *p, st));
    LB_CUDA_LAUNCH_TRY(err);
    return LB_OK;
}

extern "C" lb_status lb_gpu_opt_finish(lb_gpu_optstate *st, const lb_gpu_adamw_params *p,
                                       cudaStream_t s, lb_err *err) {
    opt_finish_kernel<<<1, 1, 0, s>>>(st, *p);
    LB_CUDA_LAUNCH_TRY(err);
    return LB_OK;
}
