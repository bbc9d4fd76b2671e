/* nf4.h: QLoRA's 4-bit NormalFloat (NF4) format, quantisation and dequantisation on the
 * CPU: the reference the GPU dequantisation is checked against.
 *
 * A tensor of n weights (row-major, any shape) is cut into blocks of LB_NF4_BLOCK (64)
 * consecutive weights. Each block keeps absmax = max |w| and, per weight, the index of the
 * NF4 code value (lb_nf4_code, the 16 values published with QLoRA) nearest to w / absmax,
 * two indices a byte (the even element in the high nibble). The absmax values are
 * themselves quantised (double quantisation): their mean over the tensor is subtracted,
 * then each group of LB_NF4_GROUP (256) consecutive centred values is stored as signed
 * 8-bit integers under one fp32 scale, group max |centred| / 127. Dequantised:
 *   absmax_j = q8_j * scale_(j / 256) + mean;   w_i = lb_nf4_code[code_i] * absmax_(i / 64).
 * Weights are coded against their block's exact absmax; the stored absmax then differs
 * from it by at most scale / 2, so a weight comes back within
 *   absmax * (half the gap to the next code value) + |code| * scale / 2.
 * Storage: n / 2 bytes of codes + one byte per block + 4 bytes per group + 4 bytes:
 * about 4.127 bits a weight. The 8-bit code of the absmax values is linear (bitsandbytes
 * uses its dynamic 8-bit float map there; the storage is the same).
 * Not here: the GPU kernels (kernels/nf4.cuh), choosing which tensors are quantised
 * (model/lora.h). */
#ifndef LB_MODEL_NF4_H
#define LB_MODEL_NF4_H

#include <stddef.h>
#include <stdint.h>

#define LB_NF4_BLOCK 64  /* weights per absmax */
#define LB_NF4_GROUP 256 /* absmax values per 8-bit scale */

/* The 16 NF4 code values, ascending, exactly as published (QLoRA appendix E). */
extern const float lb_nf4_code[16];

/* An NF4 tensor's pieces. Pointers are host or device memory; the quantiser fills host
 * ones the caller allocated with the counts below. */
typedef struct {
    int64_t n;         /* weights */
    uint8_t *codes;    /* [lb_nf4_code_bytes(n)] */
    int8_t *absmax_q;  /* [lb_nf4_blocks(n)] centred absmax, 8-bit */
    float *scale;      /* [lb_nf4_groups(n)] per group of LB_NF4_GROUP absmax values */
    float absmax_mean; /* mean of the blocks' absmax values */
} lb_nf4_tensor;

static inline int64_t lb_nf4_code_bytes(int64_t n) {
    return (n + 1) / 2;
}
static inline int64_t lb_nf4_blocks(int64_t n) {
    return (n + LB_NF4_BLOCK - 1) / LB_NF4_BLOCK;
}
static inline int64_t lb_nf4_groups(int64_t n) {
    return (lb_nf4_blocks(n) + LB_NF4_GROUP - 1) / LB_NF4_GROUP;
}
/* Bytes of an NF4 tensor of n weights: codes, 8-bit absmax, fp32 scales and the mean. */
int64_t lb_nf4_bytes(int64_t n);

/* Index of the code value nearest x (ties to the larger); x is clamped to [-1, 1]. */
int lb_nf4_nearest(float x);

/* Quantises w[n] into q (q->n and its host arrays set by the caller). */
void lb_nf4_quantize(lb_nf4_tensor *q, const float *w);
/* The stored absmax of block j. */
float lb_nf4_absmax(const lb_nf4_tensor *q, int64_t j);
/* out[n] = dequantised weights of q (host arrays). */
void lb_nf4_dequantize(const lb_nf4_tensor *q, float *out);

/* Host storage for an NF4 tensor of n weights: one allocation (q->codes owns it), NULL
 * pointers when out of memory. lb_nf4_free releases it; q may be NULL or empty. */
void lb_nf4_alloc(lb_nf4_tensor *q, int64_t n);
void lb_nf4_free(lb_nf4_tensor *q);

#endif
