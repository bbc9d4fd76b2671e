/* arena.c: the device memory arena (gpu/arena.h). */
#include "gpu/arena.h"

#include <stdlib.h>
#include <string.h>

#ifdef LB_HAVE_CUDA
#include <cuda_runtime.h>

#include "gpu/check.h"

static double gib(size_t bytes) {
    return (double)bytes / (1024.0 * 1024.0 * 1024.0);
}
#endif

static size_t align_up(size_t n) {
    return (n + LB_GPU_ARENA_ALIGN - 1) / LB_GPU_ARENA_ALIGN * LB_GPU_ARENA_ALIGN;
}

void lb_gpu_arena_init_sizing(lb_gpu_arena *a) {
    memset(a, 0, sizeof *a);
    a->sizing = true;
}

lb_status lb_gpu_arena_init(lb_gpu_arena *a, size_t capacity_bytes, const char *hint, lb_err *err) {
    memset(a, 0, sizeof *a);
#ifdef LB_HAVE_CUDA
    void *p = NULL;
    cudaError_t e = cudaMalloc(&p, capacity_bytes > 0 ? capacity_bytes : 1);
    if (e != cudaSuccess) {
        cudaGetLastError();
        size_t free_b = 0, total_b = 0;
        cudaMemGetInfo(&free_b, &total_b);
        cudaGetLastError();
        if (e == cudaErrorMemoryAllocation)
            return lb_fail(err, LB_ERR_NOMEM,
                           "out of device memory: needed %.2f GiB, %.2f GiB free of %.2f GiB%s%s",
                           gib(capacity_bytes), gib(free_b), gib(total_b), hint ? "; " : "",
                           hint ? hint : "");
        return lb_gpu_fail_at(err, "CUDA", (int)e, cudaGetErrorString(e), "cudaMalloc", __func__,
                              __FILE__, __LINE__);
    }
    a->base = p;
    a->capacity_bytes = capacity_bytes;
    lb_gpu_arena_sample_driver(a);
    return LB_OK;
#else
    (void)capacity_bytes;
    (void)hint;
    return lb_fail(err, LB_ERR_UNSUPPORTED, "this llmbench was built without CUDA");
#endif
}

void lb_gpu_arena_free(lb_gpu_arena *a) {
    if (a == NULL) return;
#ifdef LB_HAVE_CUDA
    if (a->base != NULL) cudaFree(a->base);
#endif
    free(a->pieces);
    memset(a, 0, sizeof *a);
}

lb_status lb_gpu_arena_alloc(lb_gpu_arena *a, const char *name, size_t bytes, void **out,
                             lb_err *err) {
    size_t need = align_up(bytes);
    if (!a->sizing && a->used_bytes + need > a->capacity_bytes)
        return lb_fail(err, LB_ERR_NOMEM,
                       "device arena overflow: piece '%s' of %zu bytes does not fit (%zu of %zu "
                       "used)",
                       name, bytes, a->used_bytes, a->capacity_bytes);
    if (a->n_pieces == a->cap_pieces) {
        size_t cap = a->cap_pieces ? 2 * a->cap_pieces : 64;
        lb_gpu_piece *np = realloc(a->pieces, cap * sizeof *np);
        if (np == NULL) return lb_fail(err, LB_ERR_NOMEM, "no host memory for the arena table");
        a->pieces = np;
        a->cap_pieces = cap;
    }
    lb_gpu_piece *pc = &a->pieces[a->n_pieces++];
    memset(pc, 0, sizeof *pc);
    strncpy(pc->name, name, sizeof pc->name - 1);
    pc->offset = a->used_bytes;
    pc->bytes = bytes;
    *out = a->sizing ? NULL : (void *)(a->base + a->used_bytes);
    a->used_bytes += need;
    return LB_OK;
}

void lb_gpu_arena_sample_driver(lb_gpu_arena *a) {
#ifdef LB_HAVE_CUDA
    size_t free_b = 0, total_b = 0;
    if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess) {
        cudaGetLastError();
        return;
    }
    a->driver_total_bytes = total_b;
    if (total_b - free_b > a->driver_used_peak_bytes) a->driver_used_peak_bytes = total_b - free_b;
#else
    (void)a;
#endif
}

size_t lb_gpu_arena_bytes_with_prefix(const lb_gpu_arena *a, const char *prefix) {
    size_t n = strlen(prefix), sum = 0;
    for (size_t i = 0; i < a->n_pieces; i++)
        if (strncmp(a->pieces[i].name, prefix, n) == 0) sum += a->pieces[i].bytes;
    return sum;
}
