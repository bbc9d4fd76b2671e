/* nf4.c: NF4 quantisation with double-quantised absmax values (nf4.h).
 *
 * The nearest code value is found by comparing with the midpoints between neighbours, so
 * a value exactly on a code value maps to it and the search is 4 comparisons deep in a
 * sorted table. Absmax values and their mean are computed in double. Not here: any
 * parallelism (a 7B base quantises once, before the run). */
#include "model/nf4.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

const float lb_nf4_code[16] = {
    -1.0f,
    -0.6961928009986877f,
    -0.5250730514526367f,
    -0.39491748809814453f,
    -0.28444138169288635f,
    -0.18477343022823334f,
    -0.09105003625154495f,
    0.0f,
    0.07958029955625534f,
    0.16093020141124725f,
    0.24611230194568634f,
    0.33791524171829224f,
    0.44070982933044434f,
    0.5626170039176941f,
    0.7229568362236023f,
    1.0f,
};

int64_t lb_nf4_bytes(int64_t n) {
    return lb_nf4_code_bytes(n) + lb_nf4_blocks(n) + 4 * lb_nf4_groups(n) + 4;
}

int lb_nf4_nearest(float x) {
    int lo = 0, hi = 15; /* the answer lies in [lo, hi] */
    while (lo < hi) {
        int mid = (lo + hi) / 2; /* decide between mid and mid + 1 */
        float split = 0.5f * (lb_nf4_code[mid] + lb_nf4_code[mid + 1]);
        if (x >= split)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* max |w| over block j of w[n]. */
static float block_absmax(const float *w, int64_t n, int64_t j) {
    int64_t i0 = j * LB_NF4_BLOCK, i1 = i0 + LB_NF4_BLOCK < n ? i0 + LB_NF4_BLOCK : n;
    float a = 0.0f;
    for (int64_t i = i0; i < i1; i++)
        a = fmaxf(a, fabsf(w[i]));
    return a;
}

void lb_nf4_quantize(lb_nf4_tensor *q, const float *w) {
    const int64_t n = q->n, nb = lb_nf4_blocks(n), ng = lb_nf4_groups(n);
    double sum = 0.0;
    for (int64_t j = 0; j < nb; j++) {
        int64_t i0 = j * LB_NF4_BLOCK, i1 = i0 + LB_NF4_BLOCK < n ? i0 + LB_NF4_BLOCK : n;
        /* times 1 / a, as the GPU quantiser does, so the codes agree bit for bit; below
         * 2^-128 that reciprocal is infinite (0 x inf = NaN), so there divide instead */
        const float a = block_absmax(w, n, j), inv = a > 0.0f ? 1.0f / a : 0.0f;
        for (int64_t i = i0; i < i1; i++) {
            uint8_t c = (uint8_t)lb_nf4_nearest(isinf(inv) ? w[i] / a : w[i] * inv);
            uint8_t *byte = &q->codes[i / 2];
            *byte = i % 2 == 0 ? (uint8_t)(c << 4) : (uint8_t)(*byte | c);
        }
        sum += a;
    }
    const float mean = nb > 0 ? (float)(sum / (double)nb) : 0.0f;
    q->absmax_mean = mean;
    for (int64_t g = 0; g < ng; g++) {
        int64_t j0 = g * LB_NF4_GROUP, j1 = j0 + LB_NF4_GROUP < nb ? j0 + LB_NF4_GROUP : nb;
        float span = 0.0f;
        for (int64_t j = j0; j < j1; j++)
            span = fmaxf(span, fabsf(block_absmax(w, n, j) - mean));
        float scale = span / 127.0f;
        q->scale[g] = scale;
        for (int64_t j = j0; j < j1; j++) {
            float r = scale > 0.0f ? rintf((block_absmax(w, n, j) - mean) / scale) : 0.0f;
            q->absmax_q[j] = (int8_t)fmaxf(-127.0f, fminf(127.0f, r));
        }
    }
}

float lb_nf4_absmax(const lb_nf4_tensor *q, int64_t j) {
    return (float)q->absmax_q[j] * q->scale[j / LB_NF4_GROUP] + q->absmax_mean;
}

void lb_nf4_dequantize(const lb_nf4_tensor *q, float *out) {
    for (int64_t i = 0; i < q->n; i++) {
        uint8_t byte = q->codes[i / 2];
        int c = i % 2 == 0 ? byte >> 4 : byte & 15;
        out[i] = lb_nf4_code[c] * lb_nf4_absmax(q, i / LB_NF4_BLOCK);
    }
}

void lb_nf4_alloc(lb_nf4_tensor *q, int64_t n) {
    const size_t code = (size_t)lb_nf4_code_bytes(n), nb = (size_t)lb_nf4_blocks(n);
    const size_t scale_at = (code + nb + 3) / 4 * 4; /* fp32 scales 4-byte aligned */
    memset(q, 0, sizeof *q);
    q->n = n;
    uint8_t *mem = calloc(scale_at + 4 * (size_t)lb_nf4_groups(n) + 1, 1);
    if (!mem) return;
    q->codes = mem;
    q->absmax_q = (int8_t *)(mem + code);
    q->scale = (float *)(void *)(mem + scale_at);
}

void lb_nf4_free(lb_nf4_tensor *q) {
    if (!q) return;
    free(q->codes);
    memset(q, 0, sizeof *q);
}
