/* attn_choice.h: whose attention kernels a CUDA training run uses.
 *
 * Plain C (no CUDA headers), so the command line and the training parameters name the
 * choice in every build. AUTO takes, for each direction separately, the faster of
 * llmbench's own kernels (kernels/attention.cuh) and cuDNN's (gpu/cudnn/attn.h), timed on the
 * first step's data; without cuDNN, or in fp32, it is the built-in kernels. */
#ifndef LB_MODEL_ATTN_CHOICE_H
#define LB_MODEL_ATTN_CHOICE_H

#include <stdbool.h>
#include <string.h>

typedef enum {
    LB_GPU_ATTN_AUTO = 0, /* the faster of the two per direction */
    LB_GPU_ATTN_BUILTIN,  /* llmbench's kernels only */
    LB_GPU_ATTN_CUDNN,    /* cuDNN's fused kernels both ways; an error where cuDNN cannot */
} lb_gpu_attn_choice;

#define LB_GPU_ATTN_CHOICES "auto|builtin|cudnn"

static inline const char *lb_gpu_attn_choice_name(lb_gpu_attn_choice c) {
    return c == LB_GPU_ATTN_BUILTIN ? "builtin" : c == LB_GPU_ATTN_CUDNN ? "cudnn" : "auto";
}

/* false when s names none of them */
static inline bool lb_gpu_attn_choice_parse(const char *s, lb_gpu_attn_choice *out) {
    for (int c = LB_GPU_ATTN_AUTO; s != NULL && c <= LB_GPU_ATTN_CUDNN; c++)
        if (strcmp(s, lb_gpu_attn_choice_name((lb_gpu_attn_choice)c)) == 0) {
            *out = (lb_gpu_attn_choice)c;
            return true;
        }
    return false;
}

#endif
