/* test_gpu_infra.c: the GPU infrastructure logic that runs without a GPU: arena sizing
 * and accounting, the dense peak table and MFU, telemetry summaries, check messages, and
 * the engine kernels' own checks of what they run (split counts, gemv's shapes). */
#include <float.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "gpu/arena.h"
#include "gpu/blas/matmul.h"
#include "gpu/blas/slices.h"
#include "gpu/blas/tf32.h"
#include "gpu/check.h"
#include "gpu/nvml/peak.h"
#include "gpu/nvml/telemetry.h"
#include "model/attn_choice.h"
#include "test_skip.h"
#ifdef LB_HAVE_CUDA
#include "gpu/cudnn/attn.h"
#include "gpu/cudnn/gelu.h"
#include "kernels/gemv.cuh"
#include "kernels/paged.cuh"
#endif

static void test_arena_sizing_adds_aligned_pieces(void **state) {
    (void)state;
    lb_gpu_arena a;
    lb_gpu_arena_init_sizing(&a);
    void *p = (void *)1;
    lb_err err;
    assert_int_equal(lb_gpu_arena_alloc(&a, "params", 1000, &p, &err), LB_OK);
    assert_null(p);
    assert_int_equal(lb_gpu_arena_alloc(&a, "grads", 256, &p, &err), LB_OK);
    assert_int_equal(lb_gpu_arena_alloc(&a, "act.qkv", 1, &p, &err), LB_OK);
    assert_int_equal(a.used_bytes, 1024 + 256 + 256);
    assert_int_equal(a.n_pieces, 3);
    assert_int_equal(a.pieces[1].offset, 1024);
    assert_string_equal(a.pieces[2].name, "act.qkv");
    assert_int_equal(lb_gpu_arena_bytes_with_prefix(&a, "act."), 1);
    assert_int_equal(lb_gpu_arena_bytes_with_prefix(&a, ""), 1257);
    lb_gpu_arena_free(&a);
    lb_gpu_arena_free(NULL);
}

static void test_arena_overflow_names_the_piece(void **state) {
    (void)state;
    unsigned char fake[1024];
    lb_gpu_arena a;
    memset(&a, 0, sizeof a);
    a.base = fake; /* a real arena of 512 bytes, without touching a device */
    a.capacity_bytes = 512;
    void *p;
    lb_err err;
    assert_int_equal(lb_gpu_arena_alloc(&a, "first", 300, &p, &err), LB_OK);
    assert_ptr_equal(p, fake);
    assert_int_equal(lb_gpu_arena_alloc(&a, "second", 300, &p, &err), LB_ERR_NOMEM);
    assert_non_null(strstr(err.msg, "'second'"));
    free(a.pieces);
}

static void test_peak_table_matches_specific_names_first(void **state) {
    (void)state;
    assert_string_equal(lb_peak_lookup("NVIDIA H100 80GB HBM3")->model, "H100 SXM");
    assert_string_equal(lb_peak_lookup("NVIDIA H100 NVL")->model, "H100 NVL");
    assert_string_equal(lb_peak_lookup("NVIDIA H100 PCIe")->model, "H100 PCIe");
    assert_string_equal(lb_peak_lookup("NVIDIA H200")->model, "H200 SXM");
    assert_string_equal(lb_peak_lookup("NVIDIA A100-SXM4-80GB")->model, "A100");
    assert_string_equal(lb_peak_lookup("NVIDIA A10")->model, "A10");
    assert_string_equal(lb_peak_lookup("NVIDIA L4")->model, "L4");
    assert_string_equal(lb_peak_lookup("NVIDIA L40S")->model, "L40S");
    assert_string_equal(lb_peak_lookup("NVIDIA A30")->model, "A30");
    assert_null(lb_peak_lookup("NVIDIA L40"));
    assert_null(lb_peak_lookup("Tesla V100-SXM2-16GB"));
    assert_null(lb_peak_lookup(NULL));
    const lb_peak_entry *h = lb_peak_lookup("NVIDIA H100 80GB HBM3");
    assert_true(fabs(lb_peak_flops(h, LB_PEAK_BF16) - 989.4e12) < 1e6);
    assert_true(fabs(lb_peak_flops(h, LB_PEAK_TF32) - 494.7e12) < 1e6);
    assert_true(fabs(lb_peak_flops(h, LB_PEAK_FP32) - 67e12) < 1e6);
    assert_true(fabs(lb_peak_flops(h, LB_PEAK_3XTF32) - 494.7e12 / 3) < 1e6);
    /* five digits: 15 int8 multiply-adds a product term; the default takes the larger */
    assert_true(fabs(lb_peak_flops(h, LB_PEAK_INT8_FP32) - 1979e12 / 15) < 1e6);
    assert_true(fabs(lb_peak_flops(h, LB_PEAK_FP32_AUTO) - 1979e12 / 15) < 1e6);
    const lb_peak_entry *l4 = lb_peak_lookup("NVIDIA L4");
    assert_true(fabs(lb_peak_flops(l4, LB_PEAK_FP32_AUTO) - 30.3e12) < 1e6);
    assert_true(lb_peak_flops(NULL, LB_PEAK_BF16) == 0.0);
    assert_true(fabs(lb_peak_mfu(494.7e12, 989.4e12) - 0.5) < 1e-12);
    assert_true(isnan(lb_peak_mfu(1e12, 0.0)));
}

static uint32_t bits(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    return u;
}

static void test_tf32_split_rounds_to_nearest_and_is_exact(void **state) {
    (void)state;
    float hi, lo;
    /* 1 + 2^-11 is a tie between 1 and 1 + 2^-10: away from zero */
    lb_tf32_split(1.0f + 0x1p-11f, &hi, &lo);
    assert_true(hi == 1.0f + 0x1p-10f && lo == -0x1p-11f);
    lb_tf32_split(-(1.0f + 0x1p-11f), &hi, &lo);
    assert_true(hi == -(1.0f + 0x1p-10f) && lo == 0x1p-11f);
    /* just below a tie rounds down; a TF32 value is its own head */
    lb_tf32_split(1.0f + 0x1p-11f - 0x1p-23f, &hi, &lo);
    assert_true(hi == 1.0f && lo == 0x1p-11f - 0x1p-23f);
    lb_tf32_split(1.5f, &hi, &lo);
    assert_true(hi == 1.5f && lo == 0.0f);
    /* mantissa all ones rounds up into the next binade */
    lb_tf32_split(2.0f - 0x1p-23f, &hi, &lo);
    assert_true(hi == 2.0f && lo == -0x1p-23f);
    /* the largest finite value would round to infinity: truncated instead */
    lb_tf32_split(FLT_MAX, &hi, &lo);
    assert_true(isfinite(hi) && (bits(hi) & 0x1fffu) == 0 && (double)hi + lo == (double)FLT_MAX);
    /* non-finite values are their own head with a zero tail */
    lb_tf32_split(INFINITY, &hi, &lo);
    assert_true(isinf(hi) && hi > 0 && lo == 0.0f);
    lb_tf32_split(NAN, &hi, &lo);
    assert_true(isnan(hi) && lo == 0.0f);
    /* every other value: hi has 13 clear low bits, |lo| <= half its unit, hi + lo == x */
    uint64_t s = 7;
    for (int i = 0; i < 200000; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        uint32_t u = (uint32_t)(s >> 32);
        float x;
        memcpy(&x, &u, 4);
        if (!isfinite(x)) continue;
        lb_tf32_split(x, &hi, &lo);
        assert_true(isfinite(hi) && isfinite(lo));
        assert_int_equal(bits(hi) & 0x1fffu, 0);
        assert_true(hi + lo == x);
        if (fabsf(hi) < 3.0e38f)
            assert_true(fabs((double)lo) <= fabs((double)x) * 0x1p-11 * 1.0000001 + 0x1p-137);
    }
}

static void test_slice_exponent_bounds_the_row(void **state) {
    (void)state;
    assert_int_equal(lb_slice_exponent(0.0f), 0);
    assert_int_equal(lb_slice_exponent(1.0f), 1); /* 1 < 2^1, not < 2^0 */
    assert_int_equal(lb_slice_exponent(0.75f), 0);
    assert_int_equal(lb_slice_exponent(FLT_MAX), 128);
    assert_int_equal(lb_slice_exponent(1e-45f), -148);
    assert_int_equal(lb_slice_exponent(INFINITY), LB_SLICE_NONFINITE);
    assert_int_equal(lb_slice_exponent(NAN), LB_SLICE_NONFINITE);
}

/* digits in [-64, 64]; the value they spell is within 2^-(7S) 2^e of x, and equal to it
 * when |x| >= 2^(e + 24 - 7S) (its last significand bit at or above the last digit's) */
static void test_slice_digits_spell_the_value(void **state) {
    (void)state;
    uint64_t s = 11;
    for (int i = 0; i < 200000; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        int e = (int)((s >> 40) % 200) - 100, shift = (int)((s >> 20) % 40);
        float x = ldexpf((float)((int32_t)(s >> 32)) / 2147483648.0f, e - shift);
        int n = 1 + (int)((s >> 8) % LB_SLICES);
        int8_t d[LB_SLICES];
        lb_slice_digits(lb_slice_scaled(x, e), n, d);
        double v = 0.0;
        for (int k = 0; k < n; k++) {
            assert_true(d[k] >= -64 && d[k] <= 64);
            v += ldexp((double)d[k], e - 6 - 7 * k);
        }
        double err = fabs(v - (double)x);
        assert_true(err <= ldexp(1.0, e - 7 * n));
        if (fabs((double)x) >= ldexp(1.0, e + 24 - 7 * n)) assert_true(err == 0.0);
    }
}

static void test_fp32_mode_names_round_trip(void **state) {
    (void)state;
    lb_blas_fp32_mode m = LB_BLAS_FP32_IEEE;
    assert_true(lb_blas_fp32_mode_parse("3xtf32", &m));
    assert_int_equal(m, LB_BLAS_FP32_3XTF32);
    assert_string_equal(lb_blas_fp32_mode_name(m), "3xtf32");
    assert_true(lb_blas_fp32_mode_parse("tf32", &m) && m == LB_BLAS_FP32_TF32);
    assert_true(lb_blas_fp32_mode_parse("ieee", &m) && m == LB_BLAS_FP32_IEEE);
    assert_true(lb_blas_fp32_mode_parse("int8", &m) && m == LB_BLAS_FP32_INT8);
    assert_string_equal(lb_blas_fp32_mode_name(m), "int8");
    assert_true(lb_blas_fp32_mode_parse("auto", &m) && m == LB_BLAS_FP32_AUTO);
    assert_false(lb_blas_fp32_mode_parse("TF32", &m));
    assert_false(lb_blas_fp32_mode_parse(NULL, &m));
}

static void test_attention_choice_names_round_trip(void **state) {
    (void)state;
    lb_gpu_attn_choice c = LB_GPU_ATTN_AUTO;
    assert_true(lb_gpu_attn_choice_parse("cudnn", &c) && c == LB_GPU_ATTN_CUDNN);
    assert_string_equal(lb_gpu_attn_choice_name(c), "cudnn");
    assert_true(lb_gpu_attn_choice_parse("builtin", &c) && c == LB_GPU_ATTN_BUILTIN);
    assert_true(lb_gpu_attn_choice_parse("auto", &c) && c == LB_GPU_ATTN_AUTO);
    assert_false(lb_gpu_attn_choice_parse("flash", &c));
    assert_false(lb_gpu_attn_choice_parse(NULL, &c));
}

/* cuDNN's attention refuses what it cannot run with a reason and no plans, whether or
 * not the library (or a GPU) is on this machine: fp32, and heads that do not group. */
static void test_cudnn_attention_refuses_with_a_reason(void **state) {
    (void)state;
#ifdef LB_HAVE_CUDA
    lb_cudnn_attn *a = (lb_cudnn_attn *)1;
    lb_err err = {{0}};
    assert_int_equal(lb_cudnn_attn_init(&a, 2, 64, 4, 4, 64, LB_DT_F32, true, &err),
                     LB_ERR_UNSUPPORTED);
    assert_null(a);
    assert_true(strlen(err.msg) > 0);
    err.msg[0] = '\0';
    assert_int_equal(lb_cudnn_attn_init(&a, 2, 64, 6, 4, 64, LB_DT_BF16, true, &err),
                     LB_ERR_UNSUPPORTED);
    assert_null(a);
    assert_true(strlen(err.msg) > 0);
    lb_cudnn_attn_free(NULL);
#else
    LB_TEST_SKIP_UNLESS(false, "this build has no CUDA");
#endif
}

/* Decode attention's split count gives about two blocks an SM, at most
 * LB_PAGED_MAX_SPLITS, and 1 once a batch's kv heads fill the GPU; scratch is for splits
 * only; a split count out of range, splits without scratch and head groups the kernel has
 * no instance for are refused before anything is launched (so no GPU is needed here). */
static void test_paged_splits_fill_the_gpu_and_are_checked(void **state) {
    (void)state;
#ifdef LB_HAVE_CUDA
    assert_int_equal(lb_paged_splits(1, 8, 132), LB_PAGED_MAX_SPLITS);
    assert_int_equal(lb_paged_splits(8, 8, 132), 5);
    assert_int_equal(lb_paged_splits(16, 8, 132), 3);
    assert_int_equal(lb_paged_splits(17, 8, 132), 1);
    assert_int_equal(lb_paged_splits(0, 8, 132), 1);
    assert_int_equal(lb_paged_scratch_bytes(8, 32, 128, 1), 0);
    assert_int_equal(lb_paged_scratch_bytes(2, 32, 128, 3), (size_t)2 * 32 * 3 * 129 * 4);
    int32_t fake[4];
    void *p = fake;
    lb_err err = {{0}};
    assert_int_equal(lb_paged_attention(p, NULL, 2, p, p, p, fake, 1, fake, fake, 1, 32, 8, 128, 16,
                                        LB_DT_BF16, NULL, &err),
                     LB_ERR_USAGE);
    assert_non_null(strstr(err.msg, "scratch"));
    assert_int_equal(lb_paged_attention(p, p, LB_PAGED_MAX_SPLITS + 1, p, p, p, fake, 1, fake, fake,
                                        1, 32, 8, 128, 16, LB_DT_BF16, NULL, &err),
                     LB_ERR_USAGE);
    assert_int_equal(lb_paged_attention(p, NULL, 1, p, p, p, fake, 1, fake, fake, 1, 12, 4, 128, 16,
                                        LB_DT_BF16, NULL, &err),
                     LB_ERR_UNSUPPORTED);
#else
    LB_TEST_SKIP_UNLESS(false, "this build has no CUDA");
#endif
}

/* gemv takes 1 to LB_GEMV_MAX_ROWS rows, K a multiple of 256, 16-byte aligned operands,
 * splits of 1, 2, 4 or 8 warps, normalised rows that fit its shared memory and SwiGLU
 * over an even OC without a residual, and writes fp32 or the inputs' type; anything else
 * is refused unlaunched. */
static void test_gemv_says_what_it_runs(void **state) {
    (void)state;
#ifdef LB_HAVE_CUDA
    void *a = (void *)(uintptr_t)4096, *b = (void *)(uintptr_t)8192, *odd = (void *)(uintptr_t)4098;
    const lb_gpu_dtype bf = LB_DT_BF16;
    assert_true(lb_gemv_fits(1, 4096, 64, a, b, NULL, bf, NULL));
    assert_true(lb_gemv_fits(LB_GEMV_MAX_ROWS, 14336, 64, a, b, a, bf, NULL));
    assert_false(lb_gemv_fits(LB_GEMV_MAX_ROWS + 1, 4096, 64, a, b, NULL, bf, NULL));
    assert_false(lb_gemv_fits(0, 4096, 64, a, b, NULL, bf, NULL));
    assert_false(lb_gemv_fits(1, 4000, 64, a, b, NULL, bf, NULL));
    assert_false(lb_gemv_fits(1, 4096, 64, odd, b, NULL, bf, NULL));
    assert_false(lb_gemv_fits(1, 4096, 64, a, b, odd, bf, NULL));
    lb_err err = {{0}};
    lb_gemv_opts o = {.split = 4, .norm_w = a, .eps = 1e-5f, .swiglu = true};
    assert_true(lb_gemv_fits(4, 4096, 64, a, b, NULL, bf, &o));
    assert_false(lb_gemv_fits(8, 4096, 64, a, b, NULL, bf, &o)); /* 64 KiB of rows */
    assert_false(lb_gemv_fits(4, 4096, 64, a, b, NULL, LB_DT_F32, &o));
    assert_false(lb_gemv_fits(4, 4096, 63, a, b, NULL, bf, &o)); /* SwiGLU: OC odd */
    assert_false(lb_gemv_fits(4, 4096, 64, a, b, a, bf, &o));    /* SwiGLU: a residual */
    o.norm_w = odd;
    assert_false(lb_gemv_fits(4, 4096, 64, a, b, NULL, bf, &o));
    o = (lb_gemv_opts){.split = 3};
    assert_false(lb_gemv_fits(1, 4096, 64, a, b, NULL, bf, &o));
    /* the KV store: qkv columns of its heads, pairs of columns in a block, y bf16 */
    const lb_gemv_kv kv = {.k_cache = a,
                           .v_cache = a,
                           .cs = (const float *)a,
                           .pos = (const int32_t *)a,
                           .slot = (const int32_t *)a,
                           .rows = 1,
                           .n_head = 4,
                           .n_kv_head = 2,
                           .head_dim = 64};
    o = (lb_gemv_opts){.split = 4, .norm_w = a, .kv = &kv};
    assert_true(lb_gemv_fits(1, 4096, 512, a, b, NULL, bf, &o));
    assert_false(lb_gemv_fits(1, 4096, 448, a, b, NULL, bf, &o)); /* not 4 + 2 x 2 heads */
    assert_false(lb_gemv_fits(1, 4096, 512, a, b, a, bf, &o));    /* a residual */
    o.split = 8;                                                  /* one column a block */
    assert_false(lb_gemv_fits(1, 4096, 512, a, b, NULL, bf, &o));
    o.split = 1;
    assert_int_equal(lb_gemv(a, LB_DT_F32, a, b, NULL, 1, 4096, 512, &o, bf, NULL, &err),
                     LB_ERR_UNSUPPORTED);
    assert_int_equal(lb_gemv(a, bf, a, b, NULL, 9, 4096, 64, NULL, bf, NULL, &err),
                     LB_ERR_UNSUPPORTED);
    assert_non_null(strstr(err.msg, "9 rows"));
    assert_int_equal(lb_gemv(a, LB_DT_F16, a, b, NULL, 1, 4096, 64, NULL, bf, NULL, &err),
                     LB_ERR_UNSUPPORTED);
#else
    LB_TEST_SKIP_UNLESS(false, "this build has no CUDA");
#endif
}

/* So does cuDNN's GELU product: fp32, with or without the library here. */
static void test_cudnn_gelu_refuses_with_a_reason(void **state) {
    (void)state;
#ifdef LB_HAVE_CUDA
    lb_cudnn_gelu *g = (lb_cudnn_gelu *)1;
    lb_err err = {{0}};
    assert_int_equal(lb_cudnn_gelu_init(&g, 64, 96, 32, 32, false, LB_DT_F32, &err),
                     LB_ERR_UNSUPPORTED);
    assert_null(g);
    assert_true(strlen(err.msg) > 0);
    lb_cudnn_gelu_free(NULL);
#else
    LB_TEST_SKIP_UNLESS(false, "this build has no CUDA");
#endif
}

static void test_telemetry_summary_uses_energy_counter_or_power(void **state) {
    (void)state;
    lb_gpu_tsample s[3];
    memset(s, 0, sizeof s);
    for (int i = 0; i < 3; i++) {
        s[i].t_s = i * 0.1;
        s[i].s.has_util = s[i].s.has_power = s[i].s.has_mem = s[i].s.has_energy = true;
        s[i].s.gpu_util_pct = 90 + 5 * i; /* 90, 95, 100 */
        s[i].s.power_w = 100.0 * (i + 1); /* 100, 200, 300 */
        s[i].s.mem_used_bytes = (uint64_t)(1000 + (i == 1 ? 500 : 0));
        s[i].s.energy_mj = (uint64_t)(5000 + 20000 * i); /* 40 J over the window */
    }
    lb_gpu_telemetry_summary sum;
    lb_gpu_telemetry_data d = {.samples = s, .n_samples = 3};
    lb_gpu_telemetry_summarize(&d, &sum);
    assert_int_equal(sum.n_samples, 3);
    assert_false(sum.util_from_readings);
    assert_true(fabs(sum.mean_util_pct - 95.0) < 1e-9);
    assert_true(fabs(sum.mean_power_w - 200.0) < 1e-9);
    assert_true(fabs(sum.peak_mem_bytes - 1500.0) < 1e-9);
    assert_true(fabs(sum.energy_j - 40.0) < 1e-9);
    assert_true(fabs(sum.duration_s - 0.2) < 1e-12);
    for (int i = 0; i < 3; i++)
        s[i].s.has_energy = false;
    lb_gpu_telemetry_summarize(&d, &sum);
    /* trapezoids: 0.1*(100+200)/2 + 0.1*(200+300)/2 = 40 J */
    assert_true(sum.has_energy);
    assert_true(fabs(sum.energy_j - 40.0) < 1e-9);
    d.n_samples = 0;
    lb_gpu_telemetry_summarize(&d, &sum);
    assert_false(sum.has_util);
    assert_false(sum.has_energy);
}

/* The driver's buffered readings inside the window replace the polled (lagging) power and
 * utilisation; energy becomes their mean power times the window. Polls at 1.0 and 2.0 s
 * say 100 W and 40% (averages reaching back before the window). */
static void test_telemetry_summary_prefers_the_drivers_readings(void **state) {
    (void)state;
    lb_gpu_tsample s[2];
    memset(s, 0, sizeof s);
    for (int i = 0; i < 2; i++) {
        s[i].t_s = 1.0 + i;
        s[i].s.has_util = s[i].s.has_power = s[i].s.has_energy = true;
        s[i].s.gpu_util_pct = 40;
        s[i].s.power_w = 100;
        s[i].s.energy_mj = (uint64_t)(1000 * i * 650);
    }
    /* power every 0.1 s from 0.5 to 2.5 s: 50 W outside [1, 2], 600 and 700 inside */
    lb_gpu_treading pw[21];
    for (int i = 0; i < 21; i++) {
        double t = 0.5 + 0.1 * i;
        pw[i] = (lb_gpu_treading){t, t < 0.999 || t > 2.001 ? 50.0 : (i % 2 ? 600.0 : 700.0)};
    }
    /* utilisation every 0.25 s: 0% while idle before 1.25 s, then 100, 90, 100, 90 */
    const double ut[8] = {0.5, 0.75, 1.0, 1.25, 1.5, 1.75, 2.0, 2.25};
    const double uv[8] = {0, 0, 0, 10, 100, 90, 100, 0};
    lb_gpu_treading u[8];
    for (int i = 0; i < 8; i++)
        u[i] = (lb_gpu_treading){ut[i], uv[i]};
    lb_gpu_telemetry_data d = {s, 2, pw, 21, u, 8};
    lb_gpu_telemetry_summary sum;
    lb_gpu_telemetry_summarize(&d, &sum);
    assert_int_equal(sum.n_power_readings, 11); /* 1.0, 1.1, ..., 2.0 */
    /* six at 600 (odd i: 1.0, 1.2, ..., 2.0), five at 700 */
    assert_true(fabs(sum.mean_power_w - (6 * 600.0 + 5 * 700.0) / 11.0) < 1e-9);
    assert_true(fabs(sum.energy_j - sum.mean_power_w * 1.0) < 1e-9);
    /* readings wholly inside [1, 2]: those at 1.25, 1.5, 1.75, 2.0 */
    assert_true(sum.util_from_readings);
    assert_true(fabs(sum.mean_util_pct - 75.0) < 1e-9);

    /* a window shorter than a reading's period: overlap-weighted. Window [1.1, 1.2] lies in
     * the reading at 1.25 (covering 1.0-1.25, 10%) */
    s[0].t_s = 1.1, s[1].t_s = 1.2;
    lb_gpu_telemetry_summarize(&d, &sum);
    assert_true(fabs(sum.mean_util_pct - 10.0) < 1e-9);
    /* [1.2, 1.3]: half in the 1.25 reading (10%), half in the 1.5 one (100%) */
    s[0].t_s = 1.2, s[1].t_s = 1.3;
    lb_gpu_telemetry_summarize(&d, &sum);
    assert_true(fabs(sum.mean_util_pct - 55.0) < 1e-9);

    /* after an idle gap the driver's next reading covers one period, not the whole gap:
     * readings at 0, 0.25 (0%), then 5.0 (100%, covering 4.75-5.0) and 5.25 (50%) */
    const double gt[4] = {0.0, 0.25, 5.0, 5.25}, gv[4] = {0, 0, 100, 50};
    for (int i = 0; i < 4; i++)
        u[i] = (lb_gpu_treading){gt[i], gv[i]};
    d.n_util = 4;
    s[0].t_s = 4.7, s[1].t_s = 5.3;
    lb_gpu_telemetry_summarize(&d, &sum);
    assert_true(fabs(sum.mean_util_pct - 75.0) < 1e-9);
    /* no reading touching the window: the polled mean stands */
    s[0].t_s = 2.0, s[1].t_s = 3.0;
    lb_gpu_telemetry_summarize(&d, &sum);
    assert_false(sum.util_from_readings);
    assert_true(fabs(sum.mean_util_pct - 40.0) < 1e-9);
    assert_int_equal(sum.n_power_readings, 6); /* 2.0 (600 W), then 2.1-2.5 (50 W) */
    assert_true(fabs(sum.mean_power_w - (600.0 + 5 * 50.0) / 6.0) < 1e-9);
}

/* The share of samples whose clocks the power limit or temperature held down, the hottest
 * sample and the last enforced limit; samples without the reasons are not counted. */
static void test_telemetry_summary_says_why_clocks_dropped(void **state) {
    (void)state;
    lb_gpu_tsample s[5];
    memset(s, 0, sizeof s);
    const uint64_t why[4] = {0, LB_NVML_CLOCKS_SW_POWER_CAP,
                             LB_NVML_CLOCKS_HW_POWER_BRAKE | LB_NVML_CLOCKS_SW_THERMAL,
                             LB_NVML_CLOCKS_IDLE};
    for (int i = 0; i < 4; i++) {
        s[i].t_s = i * 0.1;
        s[i].s.has_reasons = s[i].s.has_temp = s[i].s.has_power_limit = true;
        s[i].s.clock_reasons = why[i];
        s[i].s.temp_c = (uint32_t)(60 + 7 * (i % 3)); /* 60, 67, 74, 60 */
        s[i].s.power_limit_w = 700.0 - 50.0 * i;
    }
    s[4].t_s = 0.4; /* a sample with nothing but its time */
    lb_gpu_telemetry_summary sum;
    lb_gpu_telemetry_data d = {.samples = s, .n_samples = 5};
    lb_gpu_telemetry_summarize(&d, &sum);
    assert_true(sum.has_reasons && sum.has_temp && sum.has_power_limit);
    assert_true(fabs(sum.power_capped_pct - 50.0) < 1e-9);
    assert_true(fabs(sum.thermal_pct - 25.0) < 1e-9);
    assert_true(fabs(sum.max_temp_c - 74.0) < 1e-9);
    assert_true(fabs(sum.power_limit_w - 550.0) < 1e-9);
    d.samples = s + 4, d.n_samples = 1;
    lb_gpu_telemetry_summarize(&d, &sum);
    assert_false(sum.has_reasons);
    assert_false(sum.has_temp);
    assert_false(sum.has_power_limit);
}

static void test_telemetry_without_gpu_stops_cleanly(void **state) {
    (void)state;
    lb_gpu_telemetry *t = lb_gpu_telemetry_start("0000:00:00.0", 50);
    assert_non_null(t);
    lb_gpu_telemetry_summary sum;
    lb_gpu_tsample *samples = NULL;
    size_t n = 99;
    lb_gpu_telemetry_stop(t, &sum, &samples, &n);
    /* no GPU sits at the host bridge's address: no samples, with a driver or without */
    assert_int_equal(n, 0);
    assert_int_equal(sum.n_samples, 0);
    free(samples);
    lb_gpu_telemetry_stop(NULL, &sum, NULL, NULL);
    assert_int_equal(sum.n_samples, 0);
}

static void test_check_message_names_expression_and_place(void **state) {
    (void)state;
    lb_err err;
    lb_status st = lb_gpu_fail_at(&err, "CUDA", 2, "out of memory", "cudaMalloc(&p, n)", "f",
                                  "/x/src/gpu/arena.c", 42);
    assert_int_equal(st, LB_ERR_NOMEM);
    assert_non_null(strstr(err.msg, "cudaMalloc(&p, n)"));
    assert_non_null(strstr(err.msg, "src/gpu/arena.c:42"));
    assert_non_null(strstr(err.msg, "out of memory"));
    st = lb_gpu_fail_at(&err, "NCCL", 3, "internal error", "ncclAllReduce(...)", "g", "c.c", 1);
    assert_int_equal(st, LB_ERR_DEVICE);
}

int main(int argc, char **argv) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_arena_sizing_adds_aligned_pieces),
        cmocka_unit_test(test_arena_overflow_names_the_piece),
        cmocka_unit_test(test_attention_choice_names_round_trip),
        cmocka_unit_test(test_cudnn_attention_refuses_with_a_reason),
        cmocka_unit_test(test_cudnn_gelu_refuses_with_a_reason),
        cmocka_unit_test(test_peak_table_matches_specific_names_first),
        cmocka_unit_test(test_tf32_split_rounds_to_nearest_and_is_exact),
        cmocka_unit_test(test_slice_exponent_bounds_the_row),
        cmocka_unit_test(test_slice_digits_spell_the_value),
        cmocka_unit_test(test_fp32_mode_names_round_trip),
        cmocka_unit_test(test_telemetry_summary_uses_energy_counter_or_power),
        cmocka_unit_test(test_telemetry_summary_prefers_the_drivers_readings),
        cmocka_unit_test(test_telemetry_summary_says_why_clocks_dropped),
        cmocka_unit_test(test_telemetry_without_gpu_stops_cleanly),
        cmocka_unit_test(test_check_message_names_expression_and_place),
        cmocka_unit_test(test_paged_splits_fill_the_gpu_and_are_checked),
        cmocka_unit_test(test_gemv_says_what_it_runs),
    };
    return lb_test_main(tests, sizeof tests / sizeof tests[0], NULL, NULL, argc, argv);
}
