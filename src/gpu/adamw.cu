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

template <typename T>
__global__ void adamw_kernel(float *master, T *lp, const float *grads, float *m, float *v,
                             int64_t n, const int64_t *seg_start, const int32_t *seg_decay,
                             int n_seg, lb_gpu_adamw_params p, const lb_gpu_optstate *st) {
    float scale = p.dynamic_scaling ? st->loss_scale : 1.0f;
    float norm = (float)sqrt(st->sumsq) / scale;
    if (p.dynamic_scaling && !isfinite(norm)) return;
    float clip = 1.0f;
    if (p.grad_clip > 0.0f) clip = fminf(1.0f, p.grad_clip / (norm + 1e-6f));
    float gscale = clip / scale;
    int t = st->step + 1;
    float bc1 = 1.0f - powf(p.beta1, (float)t), bc2 = 1.0f - powf(p.beta2, (float)t);
    float step_size = p.lr / bc1, sqrt_bc2 = sqrtf(bc2);
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        int lo = 0, hi = n_seg - 1; /* last segment whose start <= i */
        while (lo < hi) {
            int mid = (lo + hi + 1) >> 1;
            if (seg_start[mid] <= i) lo = mid;
            else hi = mid - 1;
        }
        float wd = seg_decay[lo] ? p.weight_decay : 0.0f;
        float g = grads[i] * gscale;
        float w = master[i] * (1.0f - p.lr * wd);
        float mi = p.beta1 * m[i] + (1.0f - p.beta1) * g;
        float vi = p.beta2 * v[i] + (1.0f - p.beta2) * g * g;
        m[i] = mi;
        v[i] = vi;
        w -= step_size * mi / (sqrtf(vi) / sqrt_bc2 + p.eps);
        master[i] = w;
        if (lp) lp[i] = lb_from_f<T>(w);
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
    unsigned g = lb_grid_cap(n, 256);
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
