/* NF4 (model/nf4.h): the code table is the published one, the nearest code is found at the
 * midpoints, the nibble layout, an exact round trip where the format can be exact, the
 * round-trip bound on Gaussian weights with a partial last block and group, and the
 * storage figure. */
/* cmocka.h needs these four first. */
/* clang-format off */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
/* clang-format on */

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/rng.h"
#include "model/nf4.h"

/* QLoRA, appendix E (and bitsandbytes' NF4 map), as decimal literals. */
static const float published[16] = {-1.0f,
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
                                    1.0f};

static void test_nf4_code_table_is_the_published_one(void **state) {
    (void)state;
    assert_memory_equal(lb_nf4_code, published, sizeof published);
    for (int i = 0; i < 15; i++)
        assert_true(lb_nf4_code[i] < lb_nf4_code[i + 1]);
}

static void test_nf4_nearest_splits_at_midpoints(void **state) {
    (void)state;
    for (int i = 0; i < 16; i++)
        assert_int_equal(lb_nf4_nearest(lb_nf4_code[i]), i);
    for (int i = 0; i < 15; i++) {
        float mid = 0.5f * (lb_nf4_code[i] + lb_nf4_code[i + 1]);
        assert_int_equal(lb_nf4_nearest(nextafterf(mid, -2.0f)), i);
        assert_int_equal(lb_nf4_nearest(mid), i + 1); /* ties to the larger */
    }
    assert_int_equal(lb_nf4_nearest(-3.0f), 0);
    assert_int_equal(lb_nf4_nearest(3.0f), 15);
    assert_int_equal(lb_nf4_nearest(0.03f), 7);
    assert_int_equal(lb_nf4_nearest(-0.6f), 2); /* above -0.6106, midpoint of codes 1 and 2 */
}

/* Every block holds the code values times 2.5 (so every absmax is 2.5 and the centred
 * absmax values are all zero): codes and weights come back exactly. */
static void test_nf4_round_trip_is_exact_on_code_values(void **state) {
    (void)state;
    const int64_t n = 3 * LB_NF4_BLOCK;
    float w[3 * LB_NF4_BLOCK], back[3 * LB_NF4_BLOCK];
    for (int64_t i = 0; i < n; i++)
        w[i] = 2.5f * lb_nf4_code[(i * 7 + i / 16) % 16];
    for (int b = 0; b < 3; b++)
        w[b * LB_NF4_BLOCK + 5] = -2.5f; /* each block reaches the absmax */
    lb_nf4_tensor q;
    lb_nf4_alloc(&q, n);
    assert_non_null(q.codes);
    lb_nf4_quantize(&q, w);
    assert_float_equal(q.absmax_mean, 2.5f, 0.0f);
    assert_float_equal(q.scale[0], 0.0f, 0.0f);
    /* element 0 (code 0 = -1.0 * 2.5) in the high nibble, element 1 (code 7) in the low */
    assert_int_equal(q.codes[0], 0x07);
    lb_nf4_dequantize(&q, back);
    assert_memory_equal(back, w, sizeof w);
    lb_nf4_free(&q);
}

static double half_gap(int c) {
    double lo = c > 0 ? lb_nf4_code[c] - lb_nf4_code[c - 1] : 0.0;
    double hi = c < 15 ? lb_nf4_code[c + 1] - lb_nf4_code[c] : 0.0;
    return 0.5 * fmax(lo, hi);
}

/* Gaussian weights with block scales varying by 10x; n leaves a partial last block and a
 * partial last group. Each weight within absmax * half-gap + |code| * scale / 2, each
 * stored absmax within scale / 2 of the true one, and the error is not trivially zero. */
static void test_nf4_round_trip_stays_within_its_bound(void **state) {
    (void)state;
    const int64_t n = 2 * LB_NF4_GROUP * LB_NF4_BLOCK + 5 * LB_NF4_BLOCK + 17;
    float *w = malloc((size_t)n * sizeof(float)), *back = malloc((size_t)n * sizeof(float));
    lb_rng rng;
    lb_rng_seed(&rng, 11);
    for (int64_t i = 0; i < n; i++)
        w[i] = (float)(lb_rng_normal(&rng) * 0.02 * (1.0 + 9.0 * ((i / 640) % 2)));
    lb_nf4_tensor q;
    lb_nf4_alloc(&q, n);
    assert_non_null(q.codes);
    lb_nf4_quantize(&q, w);
    lb_nf4_dequantize(&q, back);
    assert_int_equal(lb_nf4_groups(n), 3);
    double worst = 0.0, err2 = 0.0, sig2 = 0.0;
    for (int64_t j = 0; j < lb_nf4_blocks(n); j++) {
        int64_t i0 = j * LB_NF4_BLOCK, i1 = i0 + LB_NF4_BLOCK < n ? i0 + LB_NF4_BLOCK : n;
        float a = 0.0f;
        for (int64_t i = i0; i < i1; i++)
            a = fmaxf(a, fabsf(w[i]));
        const double scale = q.scale[j / LB_NF4_GROUP];
        assert_true(fabs(lb_nf4_absmax(&q, j) - a) <= 0.5 * scale * (1 + 1e-5) + 1e-9);
        for (int64_t i = i0; i < i1; i++) {
            int c = (i % 2 == 0) ? q.codes[i / 2] >> 4 : q.codes[i / 2] & 15;
            double bound = a * half_gap(c) + fabs(lb_nf4_code[c]) * 0.5 * scale + 1e-6 * a;
            double e = fabs((double)back[i] - w[i]);
            if (e > bound)
                fail_msg("weight %lld: %g back as %g, error %g over bound %g", (long long)i, w[i],
                         back[i], e, bound);
            worst = fmax(worst, e / bound);
            err2 += e * e;
            sig2 += (double)w[i] * w[i];
        }
    }
    /* NF4 on Gaussian data: about 10% relative RMS error, never near 0 or 1 */
    double rel = sqrt(err2 / sig2);
    print_message("relative RMS error %.4f, worst error / bound %.3f\n", rel, worst);
    assert_true(rel > 0.05 && rel < 0.15);
    lb_nf4_free(&q);
    free(w);
    free(back);
}

/* A block whose absmax is below 2^-128 (its reciprocal is infinite in float): its zeros
 * come back as zeros and its other weights as themselves, not as -absmax and +-absmax. */
static void test_nf4_tiny_block_keeps_its_zeros_and_signs(void **state) {
    (void)state;
    float w[LB_NF4_BLOCK], back[LB_NF4_BLOCK];
    for (int i = 0; i < LB_NF4_BLOCK; i++)
        w[i] = i % 4 == 0 ? 0.0f : 1e-39f * lb_nf4_code[i % 16];
    w[1] = 1e-39f; /* the absmax */
    lb_nf4_tensor q;
    lb_nf4_alloc(&q, LB_NF4_BLOCK);
    assert_non_null(q.codes);
    lb_nf4_quantize(&q, w);
    lb_nf4_dequantize(&q, back);
    for (int i = 0; i < LB_NF4_BLOCK; i++) {
        int c = (i % 2 == 0) ? q.codes[i / 2] >> 4 : q.codes[i / 2] & 15;
        int want = i % 4 == 0 ? 7 : i == 1 ? 15 : i % 16;
        if (c != want || back[i] != 1e-39f * lb_nf4_code[want])
            fail_msg("weight %d: %g coded %d (want %d), back as %g", i, w[i], c, want, back[i]);
    }
    lb_nf4_free(&q);
}

/* A 4096 x 4096 projection: 8,388,608 code bytes + 262,144 absmax bytes + 1,024 scales of
 * 4 bytes + the mean: 8,654,852 bytes, 4.127 bits a weight. */
static void test_nf4_storage_bytes(void **state) {
    (void)state;
    assert_int_equal(lb_nf4_bytes(4096LL * 4096), 8654852);
    assert_int_equal(lb_nf4_bytes(1), 1 + 1 + 4 + 4);
    assert_int_equal(lb_nf4_groups(LB_NF4_GROUP * LB_NF4_BLOCK + 1), 2);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_nf4_code_table_is_the_published_one),
        cmocka_unit_test(test_nf4_nearest_splits_at_midpoints),
        cmocka_unit_test(test_nf4_round_trip_is_exact_on_code_values),
        cmocka_unit_test(test_nf4_round_trip_stays_within_its_bound),
        cmocka_unit_test(test_nf4_tiny_block_keeps_its_zeros_and_signs),
        cmocka_unit_test(test_nf4_storage_bytes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
