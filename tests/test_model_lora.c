/* LoRA on the CPU reference (model/lora.h): trainable-parameter figures of the 7-8B
 * presets, target parsing and the checks on rank, the adapted model equal to the base at
 * step 0 and to the merged weights later, adapter gradients against finite differences
 * with no base gradient, AdamW leaving the base untouched, and the NF4 base. */
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
#include "model/lora.h"
#include "model/model.h"
#include "test_util.h"

enum { B = 2, T = 12 };

static lb_model_config preset(const char *name) {
    lb_model_config cfg;
    lb_err err;
    assert_int_equal(lb_model_config_preset(name, &cfg, &err), LB_OK);
    return cfg;
}

static unsigned targets(const char *list, lb_model_family f) {
    unsigned mask = 0;
    lb_err err;
    if (lb_lora_targets_parse(list, f, &mask, &err) != LB_OK) fail_msg("%s", err.msg);
    return mask;
}

/* Mistral-7B and Llama-3.1-8B share d 4096, 8 kv heads of 128 (k, v: 1024 x 4096), d_ff
 * 14336, 32 layers. Rank 16: q 16 (4096 + 4096) = 131,072; k = v = 16 (4096 + 1024) =
 * 81,920; o 131,072; gate = up = down = 16 (4096 + 14336) = 294,912; per layer 425,984 on
 * q,k,v,o (x 32 = 13,631,488) and 1,310,720 on all seven (x 32 = 41,943,040). The 16.8M
 * often quoted for "rank 16 on q,k,v,o of a 7B model" is 4 x 131,072 x 32 = 16,777,216:
 * full-width k and v, i.e. multi-head attention (Llama-2-7B), not GQA. */
static void test_lora_trainable_parameters_of_7b_presets(void **state) {
    (void)state;
    const char *names[] = {"mistral-7b", "llama3.1-8b"};
    for (int i = 0; i < 2; i++) {
        lb_model_config cfg = preset(names[i]);
        lb_lora_config lc = {16, 32.0f, targets("q,k,v,o", cfg.family), LB_QUANT_NONE};
        assert_int_equal(lb_lora_param_count(&cfg, &lc), 13631488);
        lc.targets = targets("all", cfg.family);
        assert_int_equal(lb_lora_param_count(&cfg, &lc), 41943040);
        lc.targets = targets("q,v", cfg.family);
        assert_int_equal(lb_lora_param_count(&cfg, &lc), 6815744);
        cfg.n_kv_head = cfg.n_head; /* multi-head attention */
        lc.targets = targets("q,k,v,o", cfg.family);
        assert_int_equal(lb_lora_param_count(&cfg, &lc), 16777216);
    }
}

/* With a frozen base, 4 N covers the base's matmuls only: llama3.1-8b's untied wte is a
 * lookup, left out as in full training (7,504,924,672 of 8,030,261,248). */
static void test_lora_flops_leave_out_the_input_embedding(void **state) {
    (void)state;
    lb_model_config cfg = preset("llama3.1-8b");
    lb_lora_config lc = {16, 32.0f, targets("all", cfg.family), LB_QUANT_NONE};
    assert_true(lb_lora_train_flops_per_token(&cfg, &lc, 8192) ==
                4.0 * 7504924672.0 + 6.0 * 41943040 + 6.0 * 32 * 4096 * 8192);
}

/* NF4 base of mistral-7b: every projection in NF4, embeddings, norms and head in 2 bytes. */
static void test_lora_nf4_base_bytes_of_mistral(void **state) {
    (void)state;
    lb_model_config cfg = preset("mistral-7b");
    const int64_t proj = 4096LL * 4096 * 2 + 1024LL * 4096 * 2 + 14336LL * 4096 * 3;
    const int64_t rest = lb_model_param_count(&cfg) - 32 * proj;
    assert_int_equal(lb_lora_base_bytes(&cfg, LB_QUANT_NONE, 2), 2 * lb_model_param_count(&cfg));
    int64_t nf4 = lb_lora_base_bytes(&cfg, LB_QUANT_NF4, 2);
    int64_t want = rest * 2 + 32 * (2 * 8654852LL + 2 * (2097152 + 65536 + 4 * 256 + 4) +
                                    3 * (29360128 + 917504 + 4 * 3584 + 4));
    assert_int_equal(nf4, want);
    print_message("mistral-7b base: bf16 %.2f GB, NF4 %.2f GB\n",
                  lb_lora_base_bytes(&cfg, LB_QUANT_NONE, 2) / 1e9, nf4 / 1e9);
}

static void expect_target_error(const char *list, lb_model_family f, const char *needle) {
    unsigned mask = 0;
    lb_err err = {{0}};
    assert_int_equal(lb_lora_targets_parse(list, f, &mask, &err), LB_ERR_USAGE);
    if (!strstr(err.msg, needle)) fail_msg("'%s' lacks '%s'", err.msg, needle);
}

static void test_lora_targets_parse_and_refuse(void **state) {
    (void)state;
    assert_int_equal(targets("q,v", LB_FAMILY_LLAMA), (1u << LB_LORA_Q) | (1u << LB_LORA_V));
    assert_int_equal(targets("all", LB_FAMILY_LLAMA), 0x7f);
    assert_int_equal(targets("all", LB_FAMILY_GPT2), 0x7f & ~(1u << LB_LORA_GATE));
    expect_target_error("q,qq", LB_FAMILY_LLAMA, "unknown projection 'qq'");
    expect_target_error("q,,v", LB_FAMILY_LLAMA, "--lora-targets 'q,,v': an empty item");
    expect_target_error(",", LB_FAMILY_LLAMA, "an empty item");
    expect_target_error("all,q", LB_FAMILY_LLAMA, "all stands alone, not in a list");
    expect_target_error("v,k,v", LB_FAMILY_LLAMA, "'v' is named twice");
    expect_target_error("q,gate", LB_FAMILY_GPT2,
                        "--lora-targets 'q,gate': GPT-2 models have no gate projection");
    char buf[64];
    lb_lora_targets_format(targets("down,q,up", LB_FAMILY_LLAMA), buf, sizeof buf);
    assert_string_equal(buf, "q,up,down");
}

static void expect_check_error(lb_lora_config lc, const char *needle) {
    lb_model_config cfg = preset("llama-tiny");
    lb_err err = {{0}};
    assert_int_equal(lb_lora_config_check(&lc, &cfg, &err), LB_ERR_USAGE);
    if (!strstr(err.msg, needle)) fail_msg("'%s' lacks '%s'", err.msg, needle);
}

/* llama-tiny: d 64, k and v 32 x 64, d_ff 96. */
static void test_lora_rank_is_checked_against_projections(void **state) {
    (void)state;
    lb_model_config cfg = preset("llama-tiny");
    lb_err err;
    lb_lora_config ok = {32, 16.0f, 0x7f, LB_QUANT_NONE};
    assert_int_equal(lb_lora_config_check(&ok, &cfg, &err), LB_OK);
    expect_check_error((lb_lora_config){0, 16.0f, 0x7f, LB_QUANT_NONE}, "--lora-rank must be");
    expect_check_error((lb_lora_config){33, 16.0f, 0x7f, LB_QUANT_NONE},
                       "--lora-rank 33 is larger than projection k of model llama-tiny (32 x 64)");
    expect_check_error((lb_lora_config){65, 16.0f, 1u << LB_LORA_Q, LB_QUANT_NONE}, "projection q");
    /* the bound said is the narrowest target's, even where a wider one comes first */
    expect_check_error((lb_lora_config){100000, 16.0f, 0x7f, LB_QUANT_NONE},
                       "projection k of model llama-tiny (32 x 64): the rank must be at most 32");
    expect_check_error((lb_lora_config){4, 0.0f, 0x7f, LB_QUANT_NONE}, "--lora-alpha");
    expect_check_error((lb_lora_config){4, INFINITY, 0x7f, LB_QUANT_NONE},
                       "--lora-alpha must be a positive number, got inf");
}

static void tokens(const lb_model_config *cfg, int32_t *in, int32_t *tg) {
    lb_rng rng;
    lb_rng_seed(&rng, 5);
    for (int i = 0; i < B * T; i++) {
        in[i] = (int32_t)lb_rng_below(&rng, (uint64_t)cfg->vocab_size);
        tg[i] = (int32_t)lb_rng_below(&rng, (uint64_t)cfg->vocab_size);
    }
}

/* A model and adapters on every target of the family (rank 4, alpha 8). */
static void setup(const char *name, lb_model *m, lb_lora *l, unsigned mask) {
    lb_model_config cfg = preset(name);
    lb_err err;
    assert_int_equal(lb_model_init(m, &cfg, B, T, 7, &err), LB_OK);
    lb_test_randomize_params(m, 99);
    lb_lora_config lc = {4, 8.0f, mask ? mask : lb_lora_all_targets(cfg.family), LB_QUANT_NONE};
    assert_int_equal(lb_lora_init(l, &cfg, &lc, B * T, 3, &err), LB_OK);
}

/* B random too, so every adapter carries signal. */
static void randomize_b(lb_lora *l, const lb_model_config *cfg) {
    lb_rng rng;
    lb_rng_seed(&rng, 17);
    for (int layer = 0; layer < cfg->n_layer; layer++)
        for (int t = 0; t < LB_LORA_N_TARGETS; t++) {
            if (l->off.b[t] < 0) continue;
            lb_lora_proj p = lb_lora_projection(cfg, (lb_lora_target)t);
            float *b = l->params + layer * l->off.layer_numel + l->off.b[t];
            for (int64_t i = 0; i < (int64_t)p.out * l->lc.rank; i++)
                b[i] = (float)(0.3 * lb_rng_normal(&rng));
        }
}

static void step0_equals_base(const char *name) {
    lb_model m;
    lb_lora l;
    setup(name, &m, &l, 0);
    int32_t in[B * T], tg[B * T];
    tokens(&m.cfg, in, tg);
    const size_t nl = (size_t)B * T * m.cfg.vocab_size;
    float *base = malloc(nl * sizeof(float)), base_loss, lora_loss;
    assert_int_equal(lb_model_forward(&m, in, tg, B, T, &base_loss, NULL), LB_OK);
    memcpy(base, m.acts.logits, nl * sizeof(float));
    lb_err err;
    assert_int_equal(lb_model_attach_lora(&m, &l, &err), LB_OK);
    assert_null(m.grads);
    assert_null(m.m);
    assert_int_equal(lb_model_forward(&m, in, tg, B, T, &lora_loss, NULL), LB_OK);
    assert_memory_equal(m.acts.logits, base, nl * sizeof(float));
    assert_float_equal(lora_loss, base_loss, 0.0f);
    free(base);
    lb_model_free(&m);
    lb_lora_free(&l);
}

static void test_lora_step0_outputs_equal_the_base_model(void **state) {
    (void)state;
    step0_equals_base("llama-tiny");
    step0_equals_base("gpt2-tiny");
}

static void merged_equals_adapted(const char *name) {
    lb_model m, merged;
    lb_lora l;
    lb_err err;
    setup(name, &m, &l, 0);
    randomize_b(&l, &m.cfg);
    assert_int_equal(lb_model_init(&merged, &m.cfg, B, T, 7, &err), LB_OK);
    memcpy(merged.params, m.params, (size_t)m.n_params * sizeof(float));
    lb_lora_merge(&l, &m.cfg, merged.params);
    int32_t in[B * T], tg[B * T];
    tokens(&m.cfg, in, tg);
    float la, lm, lbase;
    assert_int_equal(lb_model_forward(&m, in, tg, B, T, &lbase, NULL), LB_OK);
    assert_int_equal(lb_model_attach_lora(&m, &l, &err), LB_OK);
    assert_int_equal(lb_model_forward(&m, in, tg, B, T, &la, NULL), LB_OK);
    assert_int_equal(lb_model_forward(&merged, in, tg, B, T, &lm, NULL), LB_OK);
    const int64_t nl = (int64_t)B * T * m.cfg.vocab_size;
    double worst = 0.0;
    for (int64_t i = 0; i < nl; i++)
        worst = fmax(worst, fabs(m.acts.logits[i] - merged.acts.logits[i]) /
                                (1e-4 + 1e-4 * fabs(merged.acts.logits[i])));
    if (worst > 1.0)
        fail_msg("%s: adapted and merged logits differ (%.2f x tolerance)", name, worst);
    assert_float_equal(la, lm, 1e-4f);
    assert_true(fabsf(la - lbase) > 1e-2f); /* the adapters do change the model */
    lb_model_free(&merged);
    lb_model_free(&m);
    lb_lora_free(&l);
}

static void test_lora_merged_weights_give_the_adapter_path_outputs(void **state) {
    (void)state;
    merged_equals_adapted("llama-tiny");
    merged_equals_adapted("gpt2-tiny");
}

/* For every adapter tensor, the element with the largest gradient against central
 * differences (h = 3e-3, within 2% + 2e-4, as test_model_gradcheck), with B random so A's
 * gradient is not zero. */
static void gradcheck(const char *name) {
    lb_model m;
    lb_lora l;
    lb_err err;
    setup(name, &m, &l, 0);
    randomize_b(&l, &m.cfg);
    assert_int_equal(lb_model_attach_lora(&m, &l, &err), LB_OK);
    int32_t in[B * T], tg[B * T];
    tokens(&m.cfg, in, tg);
    float loss;
    lb_model_zero_grad(&m);
    assert_int_equal(lb_model_forward(&m, in, tg, B, T, &loss, NULL), LB_OK);
    assert_int_equal(lb_model_backward(&m, NULL), LB_OK);
    const float h = 3e-3f;
    double worst = 0.0;
    int checked = 0;
    for (int layer = 0; layer < m.cfg.n_layer; layer++)
        for (int t = 0; t < LB_LORA_N_TARGETS; t++)
            for (int ab = 0; ab < 2; ab++) {
                if (l.off.a[t] < 0) continue;
                lb_lora_proj p = lb_lora_projection(&m.cfg, (lb_lora_target)t);
                int64_t start = layer * l.off.layer_numel + (ab ? l.off.b[t] : l.off.a[t]);
                int64_t n = (int64_t)l.lc.rank * (ab ? p.out : p.in), best = start;
                for (int64_t j = start; j < start + n; j++)
                    if (fabsf(l.grads[j]) > fabsf(l.grads[best])) best = j;
                float saved = l.params[best];
                float lp, lm;
                l.params[best] = saved + h;
                assert_int_equal(lb_model_forward(&m, in, tg, B, T, &lp, NULL), LB_OK);
                l.params[best] = saved - h;
                assert_int_equal(lb_model_forward(&m, in, tg, B, T, &lm, NULL), LB_OK);
                l.params[best] = saved;
                double fd = ((double)lp - lm) / (2.0 * h), an = l.grads[best];
                double excess = fabs(fd - an) / (2e-4 + 2e-2 * fabs(an));
                worst = fmax(worst, excess);
                if (excess > 1.0 || an == 0.0)
                    fail_msg("%s layer %d %s.%s: finite difference %.6g, backward %.6g", name,
                             layer, lb_lora_target_name((lb_lora_target)t), ab ? "B" : "A", fd, an);
                checked++;
            }
    print_message("%s: worst |fd - backward| / tolerance = %.3f over %d adapter tensors\n", name,
                  worst, checked);
    lb_model_free(&m);
    lb_lora_free(&l);
}

static void test_lora_llama_adapter_gradients_match_finite_differences(void **state) {
    (void)state;
    gradcheck("llama-tiny");
}

static void test_lora_gpt2_adapter_gradients_match_finite_differences(void **state) {
    (void)state;
    gradcheck("gpt2-tiny");
}

/* Adapters made for another model (llama-tiny's on gpt2-tiny: d 64 against 32, another
 * layout) are refused at attach, before a forward reads past them; the model keeps its
 * gradients and moments. */
static void test_lora_attach_refuses_adapters_of_another_model(void **state) {
    (void)state;
    lb_model m, other;
    lb_lora l;
    lb_err err = {{0}};
    setup("llama-tiny", &m, &l, 0);
    lb_model_config gpt2 = preset("gpt2-tiny");
    assert_int_equal(lb_model_init(&other, &gpt2, B, T, 7, &err), LB_OK);
    assert_int_equal(lb_model_attach_lora(&other, &l, &err), LB_ERR_USAGE);
    if (!strstr(err.msg, "were made for another model: model 'gpt2-tiny' needs"))
        fail_msg("%s", err.msg);
    assert_null(other.lora);
    assert_non_null(other.grads);
    assert_int_equal(lb_model_attach_lora(&m, &l, &err), LB_OK);
    lb_model_free(&other);
    lb_model_free(&m);
    lb_lora_free(&l);
}

/* At step 0 only B moves (A's gradient is zero while B is); the base stays bit-equal. */
static void test_lora_adamw_moves_adapters_only(void **state) {
    (void)state;
    lb_model m;
    lb_lora l;
    lb_err err;
    setup("llama-tiny", &m, &l, (1u << LB_LORA_Q) | (1u << LB_LORA_DOWN));
    float *base = malloc((size_t)m.n_params * sizeof(float));
    float *adapters = malloc((size_t)l.off.total * sizeof(float));
    memcpy(base, m.params, (size_t)m.n_params * sizeof(float));
    memcpy(adapters, l.params, (size_t)l.off.total * sizeof(float));
    assert_int_equal(lb_model_attach_lora(&m, &l, &err), LB_OK);
    int32_t in[B * T], tg[B * T];
    tokens(&m.cfg, in, tg);
    float loss, norm = 0.0f;
    assert_int_equal(lb_model_forward(&m, in, tg, B, T, &loss, NULL), LB_OK);
    lb_model_zero_grad(&m);
    assert_int_equal(lb_model_backward(&m, NULL), LB_OK);
    lb_adamw_params p = lb_model_adamw_default_params();
    p.weight_decay = 0.0f;
    lb_model_adamw_step(&m, &p, 1, &norm);
    assert_true(norm > 0.0f);
    assert_memory_equal(m.params, base, (size_t)m.n_params * sizeof(float));
    for (int t = LB_LORA_Q; t <= LB_LORA_DOWN; t += LB_LORA_DOWN - LB_LORA_Q) {
        lb_lora_proj pr = lb_lora_projection(&m.cfg, (lb_lora_target)t);
        const int64_t a = l.off.a[t], b = l.off.b[t], nb = (int64_t)pr.out * l.lc.rank;
        assert_memory_equal(l.params + a, adapters + a, (size_t)l.lc.rank * pr.in * sizeof(float));
        int moved = 0;
        for (int64_t i = b; i < b + nb; i++)
            moved += l.params[i] != adapters[i];
        if (moved == 0)
            fail_msg("target %s: B did not move", lb_lora_target_name((lb_lora_target)t));
    }
    free(base);
    free(adapters);
    lb_model_free(&m);
    lb_lora_free(&l);
}

/* QLoRA's CPU base: projections replaced by their NF4 round trip (changed, within NF4's
 * ~16% worst case of the block maximum), embeddings and norms untouched. */
static void test_lora_nf4_base_replaces_projections_only(void **state) {
    (void)state;
    lb_model m;
    lb_err err;
    lb_model_config cfg = preset("llama-tiny");
    assert_int_equal(lb_model_init(&m, &cfg, B, T, 7, &err), LB_OK);
    float *before = malloc((size_t)m.n_params * sizeof(float));
    memcpy(before, m.params, (size_t)m.n_params * sizeof(float));
    assert_int_equal(lb_lora_quantize_base(&cfg, m.params, &err), LB_OK);
    for (int i = 0; i < m.n_tensors; i++) {
        const lb_param_tensor *t = &m.layout[i];
        int proj = strstr(t->name, "qkv.w") || strstr(t->name, "attn_out.w") ||
                   strstr(t->name, "mlp_in.w") || strstr(t->name, "mlp_out.w");
        int changed = 0;
        float top = 0.0f;
        double worst = 0.0;
        for (int64_t j = t->offset; j < t->offset + t->numel; j++) {
            changed += m.params[j] != before[j];
            top = fmaxf(top, fabsf(before[j]));
            worst = fmax(worst, fabs(m.params[j] - before[j]));
        }
        if (proj) {
            assert_true(changed > t->numel / 2);
            assert_true(worst < 0.17 * top);
        } else {
            assert_int_equal(changed, 0);
        }
    }
    free(before);
    lb_model_free(&m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_lora_trainable_parameters_of_7b_presets),
        cmocka_unit_test(test_lora_flops_leave_out_the_input_embedding),
        cmocka_unit_test(test_lora_nf4_base_bytes_of_mistral),
        cmocka_unit_test(test_lora_targets_parse_and_refuse),
        cmocka_unit_test(test_lora_rank_is_checked_against_projections),
        cmocka_unit_test(test_lora_step0_outputs_equal_the_base_model),
        cmocka_unit_test(test_lora_merged_weights_give_the_adapter_path_outputs),
        cmocka_unit_test(test_lora_llama_adapter_gradients_match_finite_differences),
        cmocka_unit_test(test_lora_gpt2_adapter_gradients_match_finite_differences),
        cmocka_unit_test(test_lora_attach_refuses_adapters_of_another_model),
        cmocka_unit_test(test_lora_adamw_moves_adapters_only),
        cmocka_unit_test(test_lora_nf4_base_replaces_projections_only),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
