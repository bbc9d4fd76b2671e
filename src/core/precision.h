/* precision.h: the numeric formats a run can compute in, shared by train, infer and the
 * GPU kernels. fp32 is the reference; fp16 needs loss scaling in training; bf16 does not. */
#ifndef LB_CORE_PRECISION_H
#define LB_CORE_PRECISION_H

typedef enum {
    LB_PREC_FP32 = 0,
    LB_PREC_FP16,
    LB_PREC_BF16,
} lb_precision;

#define LB_PRECISION_CHOICES "fp32|fp16|bf16"

const char *lb_precision_name(lb_precision p);
/* Returns 0 and sets *out for "fp32", "fp16", "bf16"; -1 otherwise. */
int lb_precision_parse(const char *name, lb_precision *out);

#endif
