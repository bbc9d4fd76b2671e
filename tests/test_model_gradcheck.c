/* The reference model's backward against central finite differences of its own forward,
 * for both tiny models, independent of the PyTorch fixture; the llama3 RoPE frequency
 * bands against hand-computed values; the embedding backward's order of rows. */
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
#include "model/model.h"
#include "model/ref.h"
#include "test_util.h"

enum { B = 2, T = 12 };

static double loss_at(lb_model *m, const int32_t *in, const int32_t *tg) {
    float loss;
    assert_int_equal(lb_model_forward(m, in, tg, B, T, &loss, NULL), LB_OK);
    return loss;
}

/* For every tensor, the element with the largest gradient: (L(p+h) - L(p-h)) / 2h with
 * h = 3e-3 must match the analytic gradient within 2% + 2e-4 (the fp32 loss carries about
 * 1e-7 relative noise, and a larger h meets the curvature of RMSNorm on small inputs). */
static void gradcheck(const char *preset) {
    lb_model_config cfg;
    lb_err err;
    lb_model m;
    assert_int_equal(lb_model_config_preset(preset, &cfg, &err), LB_OK);
    assert_int_equal(lb_model_init(&m, &cfg, B, T, 7, &err), LB_OK);
    lb_test_randomize_params(&m, 99);
    int32_t in[B * T], tg[B * T];
    lb_rng rng;
    lb_rng_seed(&rng, 5);
    for (int i = 0; i < B * T; i++) {
        in[i] = (int32_t)lb_rng_below(&rng, (uint64_t)cfg.vocab_size);
        tg[i] = (int32_t)lb_rng_below(&rng, (uint64_t)cfg.vocab_size);
    }
    lb_model_zero_grad(&m);
    loss_at(&m, in, tg);
    assert_int_equal(lb_model_backward(&m, NULL), LB_OK);
    const float h = 3e-3f;
    double worst = 0.0;
    for (int i = 0; i < m.n_tensors; i++) {
        const lb_param_tensor *t = &m.layout[i];
        int64_t best = t->offset;
        for (int64_t j = t->offset; j < t->offset + t->numel; j++)
            if (fabsf(m.grads[j]) > fabsf(m.grads[best])) best = j;
        float saved = m.params[best];
        m.params[best] = saved + h;
        double lp = loss_at(&m, in, tg);
        m.params[best] = saved - h;
        double lm = loss_at(&m, in, tg);
        m.params[best] = saved;
        double fd = (lp - lm) / (2.0 * h), an = m.grads[best];
        double excess = fabs(fd - an) / (2e-4 + 2e-2 * fabs(an));
        if (excess > worst) worst = excess;
        if (excess > 1.0)
            fail_msg("%s %s[%lld]: finite difference %.6g, backward %.6g", preset, t->name,
                     (long long)(best - t->offset), fd, an);
    }
    print_message("%s: worst |fd - backward| / tolerance = %.3f over %d tensors\n", preset, worst,
                  m.n_tensors);
    lb_model_free(&m);
}

static void test_model_gpt2_backward_matches_finite_differences(void **state) {
    (void)state;
    gradcheck("gpt2-tiny");
}

static void test_model_llama_backward_matches_finite_differences(void **state) {
    (void)state;
    gradcheck("llama-tiny");
}

/* llama-tiny: theta 10000, head_dim 16, factor 8, low 1, high 4, original 32. */
static void test_model_rope_llama3_scaling_bands(void **state) {
    (void)state;
    lb_model_config cfg;
    lb_err err;
    assert_int_equal(lb_model_config_preset("llama-tiny", &cfg, &err), LB_OK);
    float f[8];
    lb_ref_rope_freqs(&cfg, f);
    /* i = 0: wavelength 2 pi < 8: unchanged */
    assert_float_equal(f[0], 1.0f, 1e-7f);
    /* i = 1: base 10^-0.5, wavelength 19.87 in [8, 32]: smoothed */
    double base = pow(10000.0, -2.0 / 16), s = (32.0 / (2 * M_PI / base) - 1.0) / 3.0;
    assert_float_equal(f[1], (float)((1 - s) * base / 8 + s * base), 1e-7f);
    /* i >= 2: wavelength >= 62.8 > 32: divided by 8 */
    for (int i = 2; i < 8; i++)
        assert_float_equal(f[i], (float)(pow(10000.0, -2.0 * i / 16) / 8), 1e-9f);
    cfg.rope_scaling.enabled = 0;
    lb_ref_rope_freqs(&cfg, f);
    assert_float_equal(f[1], (float)base, 1e-7f);
}

/* Rotation then its backward is the identity; v heads pass unchanged. */
static void test_model_rope_backward_inverts_forward(void **state) {
    (void)state;
    lb_model_config cfg;
    lb_err err;
    assert_int_equal(lb_model_config_preset("llama-tiny", &cfg, &err), LB_OK);
    const int NH = 4, NKV = 2, HD = 16, QW = (NH + 2 * NKV) * HD, n = B * T * QW;
    float inv[8], *x = malloc(n * sizeof(float)), *y = malloc(n * sizeof(float));
    lb_ref_rope_freqs(&cfg, inv);
    lb_rng rng;
    lb_rng_seed(&rng, 3);
    for (int i = 0; i < n; i++)
        x[i] = (float)lb_rng_normal(&rng);
    lb_ref_rope_forward(y, x, inv, B, T, NH, NKV, HD);
    /* position 0 is not rotated, a later one is */
    assert_memory_equal(y, x, QW * sizeof(float));
    assert_true(fabsf(y[3 * QW] - x[3 * QW]) > 1e-4f);
    assert_memory_equal(y + 5 * QW + (NH + NKV) * HD, x + 5 * QW + (NH + NKV) * HD,
                        NKV * HD * sizeof(float));
    lb_ref_rope_backward(y, y, inv, B, T, NH, NKV, HD);
    for (int i = 0; i < n; i++)
        assert_float_equal(y[i], x[i], 1e-5f);
    free(x);
    free(y);
}

/* The embedding backward's order: ids sorted, equal ids in their positions' order, every
 * position once; and summing rows in that order gives the reference's gradient. */
static void test_model_embedding_order_is_a_stable_sort(void **state) {
    (void)state;
    const int32_t ids[10] = {3, 0, 3, 7, 0, 3, 9, 7, 0, 3};
    const int32_t want_keys[10] = {0, 0, 0, 3, 3, 3, 3, 7, 7, 9};
    const int32_t want_rows[10] = {1, 4, 8, 0, 2, 5, 9, 3, 7, 6};
    int32_t count[11], keys[10], rows[10];
    lb_ref_embedding_order(ids, 10, 10, count, keys, rows);
    assert_memory_equal(keys, want_keys, sizeof keys);
    assert_memory_equal(rows, want_rows, sizeof rows);
    /* rows summed in that order are the gradient, C = 2 */
    float dout[20], ref[20] = {0}, got[20] = {0};
    for (int i = 0; i < 20; i++)
        dout[i] = (float)(i + 1) / 8.0f;
    lb_ref_embedding_backward(ref, dout, ids, 1, 10, 2);
    for (int i = 0; i < 10; i++)
        for (int c = 0; c < 2; c++)
            got[keys[i] * 2 + c] += dout[rows[i] * 2 + c];
    assert_memory_equal(got, ref, sizeof got);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_model_gpt2_backward_matches_finite_differences),
        cmocka_unit_test(test_model_llama_backward_matches_finite_differences),
        cmocka_unit_test(test_model_rope_llama3_scaling_bands),
        cmocka_unit_test(test_model_rope_backward_inverts_forward),
        cmocka_unit_test(test_model_embedding_order_is_a_stable_sort),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
