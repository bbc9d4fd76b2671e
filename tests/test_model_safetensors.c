/* The safetensors reader on well-formed and malformed images: every malformed header is an
 * LB_ERR_FORMAT naming what is wrong, never an out-of-bounds read; a model's parameters
 * written and read back. */
/* cmocka.h needs these four first. */
/* clang-format off */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
/* clang-format on */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/safetensors.h"
#include "test_util.h"

/* Builds header length + JSON (space-padded to a multiple of 8 when pad) + data bytes into
 * buf, which must be 8-byte aligned; returns the image size. */
static size_t image_padded(unsigned char *buf, const char *json, const void *data,
                           size_t data_bytes, int pad) {
    uint64_t n = strlen(json);
    memcpy(buf + 8, json, n);
    while (pad && n % 8)
        buf[8 + n++] = ' ';
    for (int i = 0; i < 8; i++)
        buf[i] = (unsigned char)(n >> (8 * i));
    memcpy(buf + 8 + n, data, data_bytes);
    return 8 + n + data_bytes;
}

static size_t image(unsigned char *buf, const char *json, const void *data, size_t data_bytes) {
    return image_padded(buf, json, data, data_bytes, 1);
}

static lb_status parse(const unsigned char *buf, size_t n, lb_safetensors *st, lb_err *err) {
    memset(st, 0, sizeof *st);
    snprintf(st->path, sizeof st->path, "mem");
    return lb_safetensors_parse(st, buf, n, err);
}

static void test_model_safetensors_reads_tensors_and_metadata(void **state) {
    (void)state;
    _Alignas(8) unsigned char buf[512];
    const float x[3] = {1.5f, -2.0f, 0.25f};
    const int32_t k[2] = {7, -1};
    unsigned char data[20];
    memcpy(data, k, 8);
    memcpy(data + 8, x, 12);
    size_t n = image(buf,
                     "{\"__metadata__\":{\"model\":\"tiny\"},"
                     "\"x\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[8,20]},"
                     "\"k\":{\"dtype\":\"I32\",\"shape\":[1,2],\"data_offsets\":[0,8]}}",
                     data, sizeof data);
    lb_safetensors st;
    lb_err err;
    assert_int_equal(parse(buf, n, &st, &err), LB_OK);
    assert_int_equal(st.n_tensors, 2);
    const lb_st_tensor *t = lb_safetensors_find(&st, "x");
    assert_non_null(t);
    assert_int_equal(t->dtype, LB_ST_F32);
    assert_int_equal(t->ndim, 1);
    assert_int_equal(t->numel, 3);
    assert_memory_equal(t->data, x, sizeof x);
    t = lb_safetensors_find(&st, "k");
    assert_int_equal(t->shape[1], 2);
    assert_int_equal(((const int32_t *)t->data)[1], -1);
    assert_null(lb_safetensors_find(&st, "y"));
    assert_string_equal(lb_safetensors_meta(&st, "model"), "tiny");
    assert_null(lb_safetensors_meta(&st, "seed"));
    lb_safetensors_close(&st);
}

static void expect_format_error(const char *json, size_t data_bytes, const char *needle) {
    _Alignas(8) unsigned char buf[512];
    unsigned char data[64] = {0};
    size_t n = image(buf, json, data, data_bytes);
    lb_safetensors st;
    lb_err err;
    assert_int_equal(parse(buf, n, &st, &err), LB_ERR_FORMAT);
    if (!strstr(err.msg, needle)) fail_msg("message '%s' lacks '%s'", err.msg, needle);
    assert_int_equal(st.n_tensors, 0);
    assert_null(st.tensors);
}

static void test_model_safetensors_refuses_malformed_headers(void **state) {
    (void)state;
    expect_format_error("[1,2]", 0, "not a JSON object");
    expect_format_error("{\"x\":", 0, "not a JSON object");
    expect_format_error("{\"x\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}", 8,
                        "outside");
    expect_format_error("{\"x\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,16]}}", 16,
                        "shape needs 12");
    expect_format_error("{\"x\":{\"dtype\":\"Q4\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1,
                        "unknown dtype");
    expect_format_error("{\"x\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}}", 4,
                        "dimension 0");
    expect_format_error("{\"x\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,4]}}", 8,
                        "outside");
    expect_format_error("{\"x\":{\"dtype\":\"F32\",\"shape\":[1]}}", 4, "data_offsets");
    expect_format_error("{\"__metadata__\":{\"a\":1}}", 0, "not a string");
}

/* A name given twice (the last entry used to win without a word) and byte ranges that
 * overlap, leave a gap or stop short of the data (once accepted: two tensors could alias
 * the same bytes) are refused naming the tensors; ranges in any header order that cover the
 * data exactly are read. */
static void test_model_safetensors_refuses_twice_named_and_untiled_tensors(void **state) {
    (void)state;
    expect_format_error("{\"x\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
                        "\"x\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
                        8, "mem: header gives the key \"x\" twice (at byte 65)");
    expect_format_error("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                        "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
                        8, "tensor 'b' (data_offsets [4, 8]) overlaps tensor 'a' (ending at 8)");
    expect_format_error("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
                        "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,12]}}",
                        12, "data bytes [4, 8) before tensor 'b' belong to no tensor");
    expect_format_error("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 8,
                        "data bytes [4, 8) after the last tensor belong to no tensor");
    _Alignas(8) unsigned char buf[256];
    const unsigned char data[12] = {0};
    size_t n = image(buf,
                     "{\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]},"
                     "\"e\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[4,4]},"
                     "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}",
                     data, sizeof data);
    lb_safetensors st;
    lb_err err;
    if (parse(buf, n, &st, &err) != LB_OK) fail_msg("%s", err.msg);
    assert_int_equal(st.n_tensors, 3);
    lb_safetensors_close(&st);
}

/* The key given twice is named wherever it is (the message said "a tensor" for any key, and
 * named none longer than 20 bytes): a long tensor name, one with an escaped quote, a key of
 * __metadata__, a field of a tensor's entry. */
static void test_model_safetensors_twice_given_key_is_named(void **state) {
    (void)state;
    expect_format_error(
        "{\"model.layers.0.self_attn.q_proj.weight\":{\"dtype\":\"F32\",\"shape\":"
        "[1],\"data_offsets\":[0,4]},\"model.layers.0.self_attn.q_proj.weight\":{}}",
        4, "header gives the key \"model.layers.0.self_attn.q_proj.weight\" twice");
    expect_format_error("{\"a\\\\\\\"b\":{},\"a\\\\\\\"b\":{}}", 0,
                        "header gives the key \"a\\\\\\\"b\" twice (at byte 29)");
    expect_format_error("{\"__metadata__\":{\"model\":\"a\",\"model\":\"b\"}}", 0,
                        "header gives the key \"model\" twice");
    expect_format_error("{\"x\":{\"dtype\":\"F32\",\"dtype\":\"F16\",\"shape\":[1],"
                        "\"data_offsets\":[0,4]}}",
                        4, "header gives the key \"dtype\" twice");
}

/* A header length beyond the bound is refused before anything is read or allocated, naming
 * the file, the length and the bound: 2^40 in a small image, and a length one past the bound
 * in a (sparse) file long enough to hold it, which used to be parsed. */
static void test_model_safetensors_refuses_a_header_beyond_the_bound(void **state) {
    (void)state;
    unsigned char buf[64] = {0};
    buf[5] = 1; /* 2^40 */
    lb_safetensors st;
    lb_err err;
    assert_int_equal(parse(buf, sizeof buf, &st, &err), LB_ERR_FORMAT);
    assert_string_equal(err.msg, "mem: header length 1099511627776 is more than the 100000000 "
                                 "bytes a safetensors header may have; the file is damaged or not "
                                 "safetensors");
    char dir[64], path[128];
    lb_test_tmpdir(dir, sizeof dir);
    snprintf(path, sizeof path, "%s/big.safetensors", dir);
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    uint64_t hlen = LB_ST_MAX_HEADER_BYTES + 1;
    for (int i = 0; i < 8; i++)
        buf[i] = (unsigned char)(hlen >> (8 * i));
    assert_int_equal(fwrite(buf, 1, 8, f), 8);
    assert_int_equal(fwrite("{}", 1, 2, f), 2);
    assert_int_equal(fseek(f, (long)(8 + hlen + 7), SEEK_SET), 0);
    assert_int_equal(fputc(0, f), 0);
    assert_int_equal(fclose(f), 0);
    assert_int_equal(lb_safetensors_open(&st, path, &err), LB_ERR_FORMAT);
    char want[256];
    snprintf(want, sizeof want, "%s: header length 100000001 is more than the 100000000 bytes",
             path);
    if (strncmp(err.msg, want, strlen(want)) != 0) fail_msg("message '%s'", err.msg);
    assert_null(st.map);
    lb_test_rmtree(dir);
}

static void test_model_safetensors_refuses_misaligned_data(void **state) {
    (void)state;
    _Alignas(8) unsigned char buf[128];
    const float x = 1.0f;
    /* 61-byte header, unpadded: the F32 data would start at an odd address */
    size_t n = image_padded(buf, "{\"x\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}",
                            &x, sizeof x, 0);
    lb_safetensors st;
    lb_err err;
    assert_int_equal(parse(buf, n, &st, &err), LB_ERR_FORMAT);
    assert_non_null(strstr(err.msg, "aligned"));
}

static void test_model_safetensors_refuses_truncated_files(void **state) {
    (void)state;
    unsigned char buf[64] = {0};
    lb_safetensors st;
    lb_err err;
    assert_int_equal(parse(buf, 5, &st, &err), LB_ERR_FORMAT);
    assert_non_null(strstr(err.msg, "8-byte"));
    buf[0] = 200; /* header length 200 in a 64-byte file */
    assert_int_equal(parse(buf, sizeof buf, &st, &err), LB_ERR_FORMAT);
    assert_non_null(strstr(err.msg, "past the end"));
    assert_int_equal(lb_safetensors_open(&st, "/nonexistent/w.safetensors", &err), LB_ERR_IO);
    assert_non_null(strstr(err.msg, "/nonexistent/w.safetensors"));
}

/* every layout tensor comes back under its name with its shape and values; the model's name
 * is in the metadata; an unwritable path is an I/O error naming it */
static void test_model_safetensors_writes_parameters_it_reads_back(void **state) {
    (void)state;
    lb_model_config cfg;
    assert_int_equal(lb_model_config_preset("llama-tiny", &cfg, NULL), LB_OK);
    int64_t n = lb_model_param_count(&cfg);
    float *p = malloc((size_t)n * sizeof *p);
    assert_non_null(p);
    for (int64_t i = 0; i < n; i++)
        p[i] = (float)i * 0.5f - 3.0f;
    char dir[64], path[128];
    lb_test_tmpdir(dir, sizeof dir);
    snprintf(path, sizeof path, "%s/p.safetensors", dir);
    lb_err err;
    assert_int_equal(lb_safetensors_write_params(path, &cfg, p, &err), LB_OK);
    lb_safetensors st;
    assert_int_equal(lb_safetensors_open(&st, path, &err), LB_OK);
    assert_string_equal(lb_safetensors_meta(&st, "model"), "llama-tiny");
    int nt = lb_model_param_layout(&cfg, NULL, 0);
    lb_param_tensor *t = calloc((size_t)nt, sizeof *t);
    lb_model_param_layout(&cfg, t, nt);
    assert_int_equal(st.n_tensors, (size_t)nt);
    for (int i = 0; i < nt; i++) {
        const lb_st_tensor *x = lb_safetensors_find(&st, t[i].name);
        assert_non_null(x);
        assert_int_equal(x->dtype, LB_ST_F32);
        assert_int_equal(x->ndim, t[i].ndim);
        assert_int_equal(x->shape[0], t[i].shape[0]);
        assert_int_equal(x->numel, t[i].numel);
        assert_memory_equal(x->data, p + t[i].offset, (size_t)t[i].numel * 4);
    }
    lb_safetensors_close(&st);
    snprintf(path, sizeof path, "%s/no/such/dir/p.safetensors", dir);
    assert_int_equal(lb_safetensors_write_params(path, &cfg, p, &err), LB_ERR_IO);
    assert_non_null(strstr(err.msg, "no/such/dir"));
    free(t);
    free(p);
    lb_test_rmtree(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_model_safetensors_reads_tensors_and_metadata),
        cmocka_unit_test(test_model_safetensors_refuses_malformed_headers),
        cmocka_unit_test(test_model_safetensors_refuses_truncated_files),
        cmocka_unit_test(test_model_safetensors_refuses_misaligned_data),
        cmocka_unit_test(test_model_safetensors_refuses_twice_named_and_untiled_tensors),
        cmocka_unit_test(test_model_safetensors_writes_parameters_it_reads_back),
        cmocka_unit_test(test_model_safetensors_twice_given_key_is_named),
        cmocka_unit_test(test_model_safetensors_refuses_a_header_beyond_the_bound),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
