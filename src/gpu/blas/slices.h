/* slices.h: an fp32 value as a few signed 7-bit integer digits under a shared power of
 * two, the rule behind the int8 products of gpu/blas/matmul.h, shared by the host (tests,
 * references) and the device (gpu/blas/slices.cuh).
 *
 * A row of an operand (the values one output element's sum runs over) gets the exponent
 * e of its largest magnitude amax: the least e with amax < 2^e (frexp's), 0 for a zero
 * row. Each value x of the row is then y = x 2^-e, |y| < 1, written as
 *     y = d_1 2^-6 + d_2 2^-13 + d_3 2^-20 + ... + d_S 2^-(6 + 7 (S-1)) + r_S
 * with d_1 = rint(64 y) and each further digit the rounded next 7 bits of what is left:
 * every digit lies in [-64, 64], every step is exact in fp32, and |r_S| <= 2^-(7 S) (half
 * the last digit's unit). A value with |x| >= 2^(e + 24 - 7 S), so any within a factor
 * 2^(7 S - 25) of its row's largest, is held exactly (all 24 bits of its significand);
 * smaller ones lose at most 2^-(7 S) 2^e.
 * A row holding an infinity or NaN gets LB_SLICE_NONFINITE and zero digits (the product
 * then writes NaN for it).
 *
 * Two such rows multiply as sum over digit pairs d_u d'_v 2^(e + e' - 12 - 7 (u + v - 2)).
 * Digit products are at most 2^12, so a sum of them over up to 2^19 pairs is exact in
 * int32 (gpu/blas/matmul.c keeps the pairs whose positions add to at most S + 1), and the S
 * sums, each shifted by its 7-bit position, add up within int64 for S <= 5. */
#ifndef LB_GPU_BLAS_SLICES_H
#define LB_GPU_BLAS_SLICES_H

#include <float.h>
#include <math.h>
#include <stdint.h>

#ifdef __CUDACC__
#define LB_SLICE_FN __host__ __device__ __forceinline__
#else
#define LB_SLICE_FN static inline
#endif

/* digits the int8 products cut each value into (gpu/blas/matmul.h); at most 5, so that the
 * shifted sums stay within int64 */
#define LB_SLICES          5
#define LB_SLICE_NONFINITE 0x7fffffff /* exponent of a row holding Inf or NaN */

/* the exponent of a row whose largest magnitude is amax (see above) */
LB_SLICE_FN int32_t lb_slice_exponent(float amax) {
    if (!(amax <= FLT_MAX)) return LB_SLICE_NONFINITE;
    if (amax == 0.0f) return 0;
    int e;
    frexpf(amax, &e);
    return e;
}

/* x of a row of exponent e (not LB_SLICE_NONFINITE) as 64 y = 2^(6-e) x, |64 y| < 64:
 * exact unless it falls below the normal range (a multiplication by the power of two
 * gives the same bits wherever that power is a normal float) */
LB_SLICE_FN float lb_slice_scaled(float x, int32_t e) {
    return ldexpf(x, 6 - e);
}

/* the first s digits of a value scaled by lb_slice_scaled */
LB_SLICE_FN void lb_slice_digits(float y, int s, int8_t *d) {
    for (int i = 0; i < s; i++) {
        float q = rintf(y);
        d[i] = (int8_t)q;
        y = (y - q) * 128.0f;
    }
}

#endif
