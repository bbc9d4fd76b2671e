/* tf32.h: the split of an fp32 value into a TF32 head and an fp32 tail, x = hi + lo
 * exactly, shared by the host (tests, references) and the device (gpu/blas/tf32.cuh).
 *
 * hi is x rounded to the nearest TF32 value (sign, 8 exponent bits, 10 explicit mantissa
 * bits; ties away from zero): adding half a unit of the 11th mantissa bit to the bit
 * pattern and clearing the 13 bits below carries into the exponent when the mantissa
 * overflows, which is the correct rounding up into the next binade. A finite value that
 * would round up to infinity (the top of the largest binade) is truncated instead, so hi
 * stays finite. lo = x - hi is exact in fp32 (|lo| is at most half a TF32 unit of x, a
 * multiple of x's own fp32 unit), so hi is unchanged by any TF32 conversion and lo carries
 * the 13 bits TF32 drops. Infinity and NaN give hi = x, lo = 0. Used by the 3xTF32 matrix
 * products of gpu/blas/matmul.h; not a general TF32 type. */
#ifndef LB_GPU_BLAS_TF32_H
#define LB_GPU_BLAS_TF32_H

#include <stdint.h>
#include <string.h>

#ifdef __CUDACC__
#define LB_TF32_FN __host__ __device__ __forceinline__
#else
#define LB_TF32_FN static inline
#endif

LB_TF32_FN void lb_tf32_split(float x, float *hi, float *lo) {
    uint32_t u, r;
    memcpy(&u, &x, 4);
    if ((u & 0x7f800000u) == 0x7f800000u) { /* Inf, NaN */
        *hi = x;
        *lo = 0.0f;
        return;
    }
    r = (u + 0x1000u) & 0xffffe000u;
    if ((r & 0x7f800000u) == 0x7f800000u) r = u & 0xffffe000u; /* would round to Inf */
    memcpy(hi, &r, 4);
    *lo = x - *hi;
}

#endif
