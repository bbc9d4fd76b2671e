/* The CPU reference model against the PyTorch fixture (tools/make_fixture.py, float64
 * math): logits and every parameter gradient after one step within
 * |got - ref| <= 1e-4 (|ref| + rms(ref)) (relative, with the tensor's RMS as the absolute
 * floor so near-zero entries are held to the precision of the tensor as a whole), and the
 * losses of 10 AdamW steps (with clipping and weight decay) within 1e-5. Prints the
 * largest errors seen. */
/* cmocka.h needs these four first. */
/* clang-format off */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
/* clang-format on */

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "model/model.h"
#include "model/ref.h"
#include "model/safetensors.h"

#if defined(__SANITIZE_ADDRESS__)
/* Under AddressSanitizer an allocation that cannot be served returns NULL, as glibc's does,
 * instead of ending the program: test_ref_scratch_out_of_memory_is_reported makes one. */
const char *__asan_default_options(void);
const char *__asan_default_options(void) {
    return "allocator_may_return_null=1";
}
#endif

#define RTOL      1e-4
#define LOSS_ATOL 1e-5

typedef struct {
    lb_safetensors st;
    lb_model m;
    int B, T;
    const int32_t *inputs, *targets;
} fixture;

static const lb_st_tensor *need(const fixture *f, const char *name, lb_st_dtype dtype,
                                int64_t numel) {
    const lb_st_tensor *t = lb_safetensors_find(&f->st, name);
    if (!t) fail_msg("fixture has no tensor '%s'", name);
    assert_int_equal(t->dtype, dtype);
    assert_int_equal(t->numel, numel);
    return t;
}

static double meta_num(const fixture *f, const char *key) {
    const char *s = lb_safetensors_meta(&f->st, key);
    if (!s) fail_msg("fixture metadata has no '%s'", key);
    return strtod(s, NULL);
}

static void open_fixture(fixture *f, const char *preset) {
    char path[512];
    lb_err err;
    lb_model_config cfg;
    snprintf(path, sizeof path, "%s/%s.safetensors", LB_TEST_FIXTURES, preset);
    assert_int_equal(lb_safetensors_open(&f->st, path, &err), LB_OK);
    assert_string_equal(lb_safetensors_meta(&f->st, "model"), preset);
    f->B = (int)meta_num(f, "B");
    f->T = (int)meta_num(f, "T");
    assert_int_equal(lb_model_config_preset(preset, &cfg, &err), LB_OK);
    assert_int_equal(lb_model_init(&f->m, &cfg, f->B, f->T, 1, &err), LB_OK);
    if (lb_model_load_weights(&f->m, path, &err) != LB_OK) fail_msg("%s", err.msg);
    f->inputs = need(f, "inputs", LB_ST_I32, (int64_t)f->B * f->T)->data;
    f->targets = need(f, "targets", LB_ST_I32, (int64_t)f->B * f->T)->data;
}

static void close_fixture(fixture *f) {
    lb_model_free(&f->m);
    lb_safetensors_close(&f->st);
}

/* Asserts |got - ref| <= RTOL (|ref| + rms(ref)) elementwise and returns the largest
 * |got - ref| / (|ref| + rms(ref)), the scaled error. */
static double compare(const char *what, const float *got, const float *ref, int64_t n) {
    double ss = 0.0;
    for (int64_t i = 0; i < n; i++)
        ss += (double)ref[i] * ref[i];
    const double rms = sqrt(ss / (double)n);
    double worst = 0.0;
    for (int64_t i = 0; i < n; i++) {
        double e = fabs((double)got[i] - ref[i]) / (fabs(ref[i]) + rms);
        if (e > worst) worst = e;
        if (e > RTOL)
            fail_msg("%s[%lld]: got %.8g, PyTorch %.8g (scaled error %.3g > %g)", what,
                     (long long)i, got[i], ref[i], e, RTOL);
    }
    return worst;
}

static void check_step1(const char *preset) {
    fixture f;
    open_fixture(&f, preset);
    const lb_model_config *c = &f.m.cfg;
    float loss;
    lb_model_zero_grad(&f.m);
    assert_int_equal(lb_model_forward(&f.m, f.inputs, f.targets, f.B, f.T, &loss, NULL), LB_OK);
    assert_int_equal(lb_model_backward(&f.m, NULL), LB_OK);

    const double ref_loss = *(const double *)need(&f, "loss", LB_ST_F64, 1)->data;
    assert_true(fabs(loss - ref_loss) <= LOSS_ATOL);
    const lb_st_tensor *lg = need(&f, "logits", LB_ST_F32, (int64_t)f.B * f.T * c->vocab_size);
    double worst_logits = compare("logits", f.m.acts.logits, lg->data, lg->numel);
    double worst_grads = 0.0;
    const char *worst_name = "";
    for (int i = 0; i < f.m.n_tensors; i++) {
        const lb_param_tensor *t = &f.m.layout[i];
        char name[64];
        snprintf(name, sizeof name, "grad.%s", t->name);
        const lb_st_tensor *g = need(&f, name, LB_ST_F32, t->numel);
        double w = compare(name, f.m.grads + t->offset, g->data, t->numel);
        if (w > worst_grads) {
            worst_grads = w;
            worst_name = t->name;
        }
    }
    print_message("%s: |loss diff| %.2e; max scaled error: logits %.2e, gradients %.2e (%s)\n",
                  preset, fabs(loss - ref_loss), worst_logits, worst_grads, worst_name);
    close_fixture(&f);
}

static void check_adamw(const char *preset) {
    fixture f;
    open_fixture(&f, preset);
    const int steps = (int)meta_num(&f, "steps");
    lb_adamw_params p = {
        .lr = (float)meta_num(&f, "lr"),
        .beta1 = (float)meta_num(&f, "beta1"),
        .beta2 = (float)meta_num(&f, "beta2"),
        .eps = (float)meta_num(&f, "eps"),
        .weight_decay = (float)meta_num(&f, "weight_decay"),
        .grad_clip = (float)meta_num(&f, "grad_clip"),
    };
    const double *ref_loss = need(&f, "adamw.losses", LB_ST_F64, steps)->data;
    const double *ref_norm = need(&f, "adamw.grad_norms", LB_ST_F64, steps)->data;
    double worst_loss = 0.0, worst_norm = 0.0;
    int clipped = 0;
    for (int s = 1; s <= steps; s++) {
        float loss, norm;
        lb_model_zero_grad(&f.m);
        assert_int_equal(lb_model_forward(&f.m, f.inputs, f.targets, f.B, f.T, &loss, NULL), LB_OK);
        assert_int_equal(lb_model_backward(&f.m, NULL), LB_OK);
        lb_model_adamw_step(&f.m, &p, s, &norm);
        double dl = fabs(loss - ref_loss[s - 1]), dn = fabs(norm - ref_norm[s - 1]);
        if (dl > worst_loss) worst_loss = dl;
        if (dn / ref_norm[s - 1] > worst_norm) worst_norm = dn / ref_norm[s - 1];
        if (dl > LOSS_ATOL)
            fail_msg("%s step %d: loss %.8f, PyTorch %.8f", preset, s, loss, ref_loss[s - 1]);
        if (dn > RTOL * ref_norm[s - 1])
            fail_msg("%s step %d: grad norm %.8f, PyTorch %.8f", preset, s, norm, ref_norm[s - 1]);
        clipped += ref_norm[s - 1] > p.grad_clip;
    }
    /* The fixture must exercise clipping, and training must have moved the loss. */
    assert_true(clipped > 0);
    assert_true(ref_loss[steps - 1] < ref_loss[0] - 1.0);
    print_message("%s: %d AdamW steps, loss %.6f -> %.6f, max |loss diff| %.2e, max grad "
                  "norm rel err %.2e, %d steps clipped\n",
                  preset, steps, ref_loss[0], ref_loss[steps - 1], worst_loss, worst_norm, clipped);
    close_fixture(&f);
}

static void test_model_gpt2_logits_and_grads_match_pytorch(void **state) {
    (void)state;
    check_step1("gpt2-tiny");
}

static void test_model_llama_logits_and_grads_match_pytorch(void **state) {
    (void)state;
    check_step1("llama-tiny");
}

static void test_model_gpt2_adamw_losses_match_pytorch(void **state) {
    (void)state;
    check_adamw("gpt2-tiny");
}

static void test_model_llama_adamw_losses_match_pytorch(void **state) {
    (void)state;
    check_adamw("llama-tiny");
}

/* The loader refuses a file whose tensors do not fit the model, naming the tensor and the
 * shape it needs. */
static void test_model_load_weights_refuses_wrong_model(void **state) {
    (void)state;
    lb_model_config cfg;
    lb_model m;
    lb_err err;
    char path[512];
    assert_int_equal(lb_model_config_preset("gpt2-tiny", &cfg, &err), LB_OK);
    assert_int_equal(lb_model_init(&m, &cfg, 1, 4, 1, &err), LB_OK);
    snprintf(path, sizeof path, "%s/llama-tiny.safetensors", LB_TEST_FIXTURES);
    assert_int_equal(lb_model_load_weights(&m, path, &err), LB_ERR_FORMAT);
    assert_non_null(strstr(err.msg, "'wte'"));
    assert_non_null(strstr(err.msg, "[128, 32]"));
    lb_model_free(&m);
}

/* A matmul backward whose scratch (8 rows of C doubles, 4 GiB) cannot be had under an
 * address-space limit 256 MiB above what the process maps with its (untouched, 768 MiB)
 * operands: LB_ERR_NOMEM naming the op comes back, the process lives on, and dinp is not
 * written. */
static void test_ref_scratch_out_of_memory_is_reported(void **state) {
    (void)state;
    const int C = 1 << 26;
    float *dinp = calloc((size_t)C, sizeof *dinp), *inp = calloc((size_t)C, sizeof *inp);
    float *weight = calloc((size_t)C, sizeof *weight), dout = 1.0f;
    assert_true(dinp && inp && weight);
    weight[0] = weight[C - 1] = 1.0f; /* a backward that ran would write dinp's ends */
    long pages = 0;
    FILE *statm = fopen("/proc/self/statm", "r");
    assert_non_null(statm);
    assert_int_equal(fscanf(statm, "%ld", &pages), 1);
    fclose(statm);
    struct rlimit was, low;
    assert_int_equal(getrlimit(RLIMIT_AS, &was), 0);
    low = was;
    low.rlim_cur = (rlim_t)pages * (rlim_t)sysconf(_SC_PAGESIZE) + ((rlim_t)256 << 20);
    if (was.rlim_cur != RLIM_INFINITY && was.rlim_cur < low.rlim_cur) low.rlim_cur = was.rlim_cur;
    assert_int_equal(setrlimit(RLIMIT_AS, &low), 0);
    lb_err err = {{0}};
    lb_status st = lb_ref_matmul_backward(dinp, NULL, NULL, &dout, inp, weight, 1, 1, C, 1, &err);
    assert_int_equal(setrlimit(RLIMIT_AS, &was), 0);
    assert_int_equal(st, LB_ERR_NOMEM);
    assert_non_null(strstr(err.msg, "matmul backward"));
    assert_true(dinp[0] == 0.0f && dinp[C - 1] == 0.0f);
    free(dinp);
    free(inp);
    free(weight);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_model_gpt2_logits_and_grads_match_pytorch),
        cmocka_unit_test(test_model_llama_logits_and_grads_match_pytorch),
        cmocka_unit_test(test_model_gpt2_adamw_losses_match_pytorch),
        cmocka_unit_test(test_model_llama_adamw_losses_match_pytorch),
        cmocka_unit_test(test_model_load_weights_refuses_wrong_model),
        cmocka_unit_test(test_ref_scratch_out_of_memory_is_reported),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
