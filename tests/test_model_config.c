/* Model presets, parameter counts against published figures, the parameter layout and
 * the FLOPs-per-token formula. */
/* cmocka.h needs these four first. */
/* clang-format off */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
/* clang-format on */

#include <math.h>
#include <string.h>

#include "model/config.h"

static int64_t count_of(const char *name) {
    lb_model_config c;
    lb_err err;
    assert_int_equal(lb_model_config_preset(name, &c, &err), LB_OK);
    assert_int_equal(lb_model_config_check(&c, &err), LB_OK);
    return lb_model_param_count(&c);
}

static void test_model_param_counts_match_published_sizes(void **state) {
    (void)state;
    /* GPT-2 with the true 50257 vocabulary and tied head (HF model.num_parameters()). */
    assert_int_equal(count_of("gpt2-124m"), 124439808);
    assert_int_equal(count_of("gpt2-350m"), 354823168);
    assert_int_equal(count_of("gpt2-774m"), 774030080);
    assert_int_equal(count_of("gpt2-1558m"), 1557611200);
    /* Llama 3.2 1B ties its head; Llama 3.1 8B and Mistral 7B do not. */
    assert_int_equal(count_of("llama3.2-1b"), 1235814400);
    assert_int_equal(count_of("llama3.1-8b"), 8030261248);
    assert_int_equal(count_of("mistral-7b"), 7241732096);
}

static void test_model_unknown_preset_is_usage_error_listing_names(void **state) {
    (void)state;
    lb_model_config c;
    lb_err err;
    assert_int_equal(lb_model_config_preset("gpt5", &c, &err), LB_ERR_USAGE);
    assert_non_null(strstr(err.msg, "gpt5"));
    for (const char *const *n = lb_model_preset_names(); *n; n++)
        assert_non_null(strstr(err.msg, *n));
}

static void test_model_every_preset_is_valid_and_listed(void **state) {
    (void)state;
    int n = 0;
    for (const char *const *name = lb_model_preset_names(); *name; name++, n++) {
        lb_model_config c;
        lb_err err;
        assert_int_equal(lb_model_config_preset(*name, &c, &err), LB_OK);
        assert_string_equal(c.name, *name);
        assert_int_equal(lb_model_config_check(&c, &err), LB_OK);
    }
    assert_int_equal(n, 9);
}

static void test_model_bad_config_is_refused(void **state) {
    (void)state;
    lb_model_config c;
    lb_err err;
    assert_int_equal(lb_model_config_preset("llama-tiny", &c, &err), LB_OK);
    c.n_kv_head = 3;
    assert_int_equal(lb_model_config_check(&c, &err), LB_ERR_USAGE);
    assert_non_null(strstr(err.msg, "n_kv_head"));
    c.n_kv_head = 2;
    c.d_model = 66;
    assert_int_equal(lb_model_config_check(&c, &err), LB_ERR_USAGE);
}

/* The table tiles [0, total) without gaps, in order, and agrees with the offsets struct. */
static void check_layout(const char *preset_name) {
    lb_model_config c;
    lb_err err;
    assert_int_equal(lb_model_config_preset(preset_name, &c, &err), LB_OK);
    int n = lb_model_param_layout(&c, NULL, 0);
    lb_param_tensor t[64];
    assert_true(n <= 64);
    assert_int_equal(lb_model_param_layout(&c, t, 64), n);
    lb_param_offsets o;
    lb_model_param_offsets(&c, &o);
    int64_t at = 0;
    for (int i = 0; i < n; i++) {
        assert_int_equal(t[i].offset, at);
        assert_int_equal(t[i].numel, t[i].shape[0] * t[i].shape[1]);
        assert_int_equal(t[i].decay, t[i].ndim == 2);
        at += t[i].numel;
    }
    assert_int_equal(at, o.total);
    assert_int_equal(at, lb_model_param_count(&c));
    assert_int_equal(o.normf_w, o.layers + o.layer_numel * c.n_layer);
    /* Spot checks: layer 1's qkv weight and the final norm. */
    int64_t qkv1 = o.layers + o.layer_numel + o.layer.qkv_w;
    int found = 0;
    for (int i = 0; i < n; i++) {
        if (strcmp(t[i].name, "h.1.qkv.w") == 0) {
            assert_int_equal(t[i].offset, qkv1);
            assert_int_equal(t[i].shape[0], lb_model_qkv_dim(&c));
            assert_int_equal(t[i].shape[1], c.d_model);
            found++;
        }
        if (strcmp(t[i].name, "normf.w") == 0) {
            assert_int_equal(t[i].offset, o.normf_w);
            found++;
        }
    }
    assert_int_equal(found, 2);
}

static void test_model_layout_tiles_parameter_array(void **state) {
    (void)state;
    check_layout("gpt2-tiny");
    check_layout("llama-tiny");
}

static void test_model_layout_llama_has_no_biases_and_untied_head(void **state) {
    (void)state;
    lb_model_config c;
    lb_err err;
    assert_int_equal(lb_model_config_preset("llama-tiny", &c, &err), LB_OK);
    lb_param_offsets o;
    lb_model_param_offsets(&c, &o);
    assert_int_equal(o.wpe, -1);
    assert_int_equal(o.layer.norm1_b, -1);
    assert_int_equal(o.layer.qkv_b, -1);
    assert_int_equal(o.layer.mlp_in_b, -1);
    assert_int_equal(o.normf_b, -1);
    assert_true(o.lm_head > o.normf_w);
    /* qkv rows: 4 q heads + 2 k + 2 v, head_dim 16; mlp_in holds gate and up. */
    assert_int_equal(lb_model_qkv_dim(&c), 128);
    assert_int_equal(lb_model_mlp_in_dim(&c), 192);
    assert_int_equal(o.layer.attn_out_w - o.layer.qkv_w, 128 * 64);
}

static void test_model_train_flops_per_token_is_6n_plus_attention(void **state) {
    (void)state;
    lb_model_config c;
    lb_err err;
    assert_int_equal(lb_model_config_preset("gpt2-124m", &c, &err), LB_OK);
    /* 6 * (124439808 - 1024 * 768 wpe) + 6 * 12 * 768 * 1024 */
    assert_true(lb_model_train_flops_per_token(&c, 1024) == 741920256.0 + 56623104.0);
}

/* The input embedding of an untied model is a lookup: no token multiplies it, so it is not
 * in the 6 N of training FLOPs (only the lm_head is). llama3.1-8b: 8,030,261,248 less its
 * 128256 x 4096 wte. A tied wte is the output head and stays in. */
static void test_model_flops_leave_out_an_untied_input_embedding(void **state) {
    (void)state;
    lb_model_config c;
    lb_err err;
    assert_int_equal(lb_model_config_preset("llama3.1-8b", &c, &err), LB_OK);
    assert_int_equal(lb_model_matmul_param_count(&c), 7504924672LL);
    assert_true(lb_model_train_flops_per_token(&c, 8192) ==
                6.0 * 7504924672.0 + 6.0 * 32 * 4096 * 8192);
    assert_int_equal(lb_model_config_preset("llama3.2-1b", &c, &err), LB_OK);
    assert_int_equal(lb_model_matmul_param_count(&c), 1235814400LL);
}

static void expect_refused(const lb_model_config *c, const char *needle) {
    lb_err err = {{0}};
    assert_int_equal(lb_model_config_check(c, &err), LB_ERR_USAGE);
    if (!strstr(err.msg, needle)) fail_msg("'%s' lacks '%s'", err.msg, needle);
}

/* Widths whose products no longer fit the int the layout and the ops use (2 d_ff of a
 * SwiGLU, the qkv width) and parameter counts past int64 are refused, not wrapped. */
static void test_model_config_refuses_sizes_that_overflow(void **state) {
    (void)state;
    lb_model_config c;
    lb_err err;
    assert_int_equal(lb_model_config_preset("llama-tiny", &c, &err), LB_OK);
    c.d_ff = 1 << 30; /* 2 d_ff = 2^31 */
    expect_refused(&c, "model 'llama-tiny': the mlp_in width is 2147483648; at most 1073741824");
    assert_int_equal(lb_model_config_preset("llama-tiny", &c, &err), LB_OK);
    c.d_model = 1 << 30; /* head_dim 2^28, (4 + 2 * 2) x 2^28 = 2^31 */
    expect_refused(&c, "the qkv width (n_head + 2 n_kv_head) x head_dim is 2147483648");
    assert_int_equal(lb_model_config_preset("llama-tiny", &c, &err), LB_OK);
    c.d_model = 1 << 28; /* each layer 6 x 2^56 elements: two pass 2^59 */
    c.d_ff = 1 << 28;
    c.n_layer = 2;
    expect_refused(&c, "n_layer 2, d_model 268435456, d_ff 268435456 and vocab_size 128 make more "
                       "than");
    c.n_layer = 1;
    assert_int_equal(lb_model_config_check(&c, &err), LB_OK);
    /* a billion small layers are fine to check (and quick: the layout is not walked) */
    assert_int_equal(lb_model_config_preset("llama-tiny", &c, &err), LB_OK);
    c.n_layer = 1000000000;
    assert_int_equal(lb_model_config_check(&c, &err), LB_OK);
}

/* Each refusal names the field and the value it got. */
static void test_model_config_refusals_name_the_field_and_value(void **state) {
    (void)state;
    lb_model_config c;
    lb_err err;
    assert_int_equal(lb_model_config_preset("llama-tiny", &c, &err), LB_OK);
    c.n_kv_head = 0;
    expect_refused(&c, "model 'llama-tiny': n_kv_head is 0; it must be at least 1");
    c.n_kv_head = 2;
    c.vocab_size = -5;
    expect_refused(&c, "vocab_size is -5; it must be at least 1");
    c.vocab_size = 128;
    c.family = (lb_model_family)7;
    expect_refused(&c, "family 7 is neither GPT-2 nor Llama");
}

/* An infinite norm_eps (every norm output 0) or rope_theta (no rotation but on the first
 * pair), or a rope factor so small that inv_freq overflows to inf (angle 0 x inf = NaN),
 * is refused like a zero one. */
static void test_model_config_refuses_infinite_eps_theta_and_scaling(void **state) {
    (void)state;
    lb_model_config c;
    lb_err err;
    assert_int_equal(lb_model_config_preset("llama-tiny", &c, &err), LB_OK);
    c.norm_eps = INFINITY;
    expect_refused(&c, "norm_eps is inf; it must be a positive finite number");
    c.norm_eps = 1e-5f;
    c.rope_theta = INFINITY;
    expect_refused(&c, "rope_theta is inf");
    c.rope_theta = 10000.0f;
    c.rope_scaling.factor = INFINITY;
    expect_refused(&c, "rope scaling factor inf");
    c.rope_scaling.factor = 1e-45f; /* inv_freq / factor overflows float */
    expect_refused(&c, "rope scaling factor 1.4013e-45");
    c.rope_scaling.factor = 8.0f;
    c.rope_scaling.high_freq_factor = INFINITY;
    expect_refused(&c, "high_freq_factor inf");
    c.rope_scaling.high_freq_factor = 4.0f;
    assert_int_equal(lb_model_config_check(&c, &err), LB_OK);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_model_param_counts_match_published_sizes),
        cmocka_unit_test(test_model_unknown_preset_is_usage_error_listing_names),
        cmocka_unit_test(test_model_every_preset_is_valid_and_listed),
        cmocka_unit_test(test_model_bad_config_is_refused),
        cmocka_unit_test(test_model_layout_tiles_parameter_array),
        cmocka_unit_test(test_model_layout_llama_has_no_biases_and_untied_head),
        cmocka_unit_test(test_model_train_flops_per_token_is_6n_plus_attention),
        cmocka_unit_test(test_model_flops_leave_out_an_untied_input_embedding),
        cmocka_unit_test(test_model_config_refuses_sizes_that_overflow),
        cmocka_unit_test(test_model_config_refusals_name_the_field_and_value),
        cmocka_unit_test(test_model_config_refuses_infinite_eps_theta_and_scaling),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
