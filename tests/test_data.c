/* test_data.c: token shards are validated when opened, and batches come out right. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "test_util.h"
#include "train/data.h"

static char g_dir[64];

/* Writes a shard with the given header fields and n_tokens tokens of token_bytes each. */
static void write_shard_of(const char *path, int32_t magic, int32_t version, int32_t count,
                           const void *tokens, size_t token_bytes, int n_tokens) {
    int32_t header[LB_SHARD_HEADER_INTS] = {0};
    header[0] = magic;
    header[1] = version;
    header[2] = count;
    FILE *f = fopen(path, "wb");
    fwrite(header, sizeof header, 1, f);
    fwrite(tokens, token_bytes, (size_t)n_tokens, f);
    fclose(f);
}

static void write_shard(const char *path, int32_t magic, int32_t version, int32_t count,
                        const uint16_t *tokens, int n_tokens) {
    write_shard_of(path, magic, version, count, tokens, sizeof *tokens, n_tokens);
}

static void shard_path(char *buf, size_t cap, const char *name) {
    snprintf(buf, cap, "%s/%s", g_dir, name);
}

static void test_data_shard_batches_are_consecutive_windows(void **state) {
    (void)state;
    uint16_t tokens[20];
    for (int i = 0; i < 20; i++)
        tokens[i] = (uint16_t)(i * 3);
    char path[128];
    shard_path(path, sizeof path, "good.bin");
    write_shard(path, LB_SHARD_MAGIC, LB_SHARD_VERSION, 20, tokens, 20);
    lb_data_loader *d = NULL;
    lb_err err = {{0}};
    assert_int_equal(lb_data_open(path, 100, 2, 4, 1, &d, &err), LB_OK);
    assert_int_equal(lb_data_shard_tokens(d), 20);
    int32_t in[8], tg[8];
    lb_data_next(d, in, tg);
    for (int i = 0; i < 8; i++) {
        assert_int_equal(in[i], i * 3);
        assert_int_equal(tg[i], (i + 1) * 3);
    }
    lb_data_next(d, in, tg); /* tokens 8..16 */
    assert_int_equal(in[0], 24);
    assert_int_equal(tg[7], 48);
    lb_data_next(d, in, tg); /* 16 + 9 > 20: wraps to the start */
    assert_int_equal(in[0], 0);
    lb_data_close(d);
}

/* A shard cut short while a run reads it (another job rewriting it, a full disk) does not
 * end the process with SIGBUS: the batches come from what was read at open. */
static void test_data_shard_that_shrinks_during_the_run_is_harmless(void **state) {
    (void)state;
    enum { N = 40000 };
    static uint16_t tokens[N];
    for (int i = 0; i < N; i++)
        tokens[i] = (uint16_t)(i % 97);
    char path[128];
    shard_path(path, sizeof path, "shrinks.bin");
    write_shard(path, LB_SHARD_MAGIC, LB_SHARD_VERSION, N, tokens, N);
    lb_data_loader *d = NULL;
    lb_err err = {{0}};
    assert_int_equal(lb_data_open(path, 100, 4, 1000, 1, &d, &err), LB_OK);
    assert_int_equal(truncate(path, 1024), 0);
    int32_t in[4000], tg[4000];
    for (int step = 0; step < 9; step++) {
        lb_data_next(d, in, tg);
        assert_int_equal(in[3999], (step * 4000 + 3999) % 97);
    }
    lb_data_close(d);
    /* Opened after it shrank: refused, naming the file. */
    assert_int_equal(lb_data_open(path, 100, 4, 1000, 1, &d, &err), LB_ERR_FORMAT);
    assert_non_null(strstr(err.msg, "shrinks.bin"));
}

static void expect_refused(const char *name, int32_t magic, int32_t version, int32_t count,
                           int n_written, uint16_t bad_token, const char *needle) {
    uint16_t tokens[16];
    for (int i = 0; i < 16; i++)
        tokens[i] = (uint16_t)i;
    tokens[5] = bad_token;
    char path[128];
    shard_path(path, sizeof path, name);
    write_shard(path, magic, version, count, tokens, n_written);
    lb_data_loader *d = (lb_data_loader *)1;
    lb_err err = {{0}};
    assert_int_equal(lb_data_open(path, 50, 1, 4, 1, &d, &err), LB_ERR_FORMAT);
    assert_null(d);
    assert_non_null(strstr(err.msg, path));
    if (strstr(err.msg, needle) == NULL) fail_msg("'%s' lacks '%s'", err.msg, needle);
}

static void test_data_shard_with_wrong_magic_is_refused(void **state) {
    (void)state;
    expect_refused("magic.bin", 12345, 1, 16, 16, 5, "magic at offset 0 is 12345");
}

static void test_data_shard_with_wrong_version_is_refused(void **state) {
    (void)state;
    expect_refused("version.bin", LB_SHARD_MAGIC, 2, 16, 16, 5, "version 2 at offset 4");
}

static void test_data_truncated_shard_is_refused(void **state) {
    (void)state;
    expect_refused("short.bin", LB_SHARD_MAGIC, 1, 16, 10, 5, "says 16 tokens");
}

/* A negative count is named as such, not as a size computed from it. */
static void test_data_shard_with_negative_count_is_refused(void **state) {
    (void)state;
    expect_refused("negative.bin", LB_SHARD_MAGIC, 1, -1, 16, 5,
                   "the token count at offset 8 is -1, below zero");
}

static void test_data_token_outside_vocabulary_names_offset(void **state) {
    (void)state;
    /* token 5 sits at byte 1024 + 5*2 = 1034 */
    expect_refused("vocab.bin", LB_SHARD_MAGIC, 1, 16, 16, 50, "token 50 at offset 1034");
}

/* A shard shorter than one batch names the sequences and tokens a batch reads and what
 * would fit: N ranks' batches are one batch of N times the sequences, which --batch (per
 * rank) alone does not show. */
static void test_data_shard_shorter_than_a_batch_says_what_a_batch_reads(void **state) {
    (void)state;
    uint16_t tokens[16] = {0};
    char path[128];
    shard_path(path, sizeof path, "few.bin");
    write_shard(path, LB_SHARD_MAGIC, LB_SHARD_VERSION, 16, tokens, 16);
    lb_data_loader *d = NULL;
    lb_err err = {{0}};
    assert_int_equal(lb_data_open(path, 50, 4, 8, 1, &d, &err), LB_ERR_USAGE);
    assert_null(d);
    const char *want = "has 16 tokens, fewer than one batch reads: 4 sequences (every rank's "
                       "micro-batch together) x 8 tokens + 1 = 33; it holds 1 sequences of 8 "
                       "tokens (+ 1): give a longer shard, or a smaller --batch or --seq";
    if (strstr(err.msg, want) == NULL) fail_msg("'%s' lacks '%s'", err.msg, want);
    /* What it says fits does fit. */
    assert_int_equal(lb_data_open(path, 50, 1, 8, 1, &d, &err), LB_OK);
    lb_data_close(d);
}

/* Opened for N ranks, a shard must hold every rank's micro-batch together (N x B x T + 1
 * tokens): one token short is refused naming the rank count, not just one rank's batch. */
static void test_data_shard_too_short_for_the_ranks_names_their_count(void **state) {
    (void)state;
    uint16_t tokens[40] = {0};
    char path[128];
    shard_path(path, sizeof path, "ranks.bin");
    write_shard(path, LB_SHARD_MAGIC, LB_SHARD_VERSION, 33, tokens, 33);
    lb_data_loader *d = NULL;
    lb_err err = {{0}};
    assert_int_equal(lb_data_open_ranks(path, 50, 2, 2, 8, 1, &d, &err), LB_OK); /* 2x2x8+1 */
    lb_data_close(d);
    write_shard(path, LB_SHARD_MAGIC, LB_SHARD_VERSION, 32, tokens, 32);
    assert_int_equal(lb_data_open_ranks(path, 50, 2, 1, 8, 1, &d, &err), LB_OK);
    lb_data_close(d);
    d = NULL;
    assert_int_equal(lb_data_open_ranks(path, 50, 2, 2, 8, 1, &d, &err), LB_ERR_USAGE);
    assert_null(d);
    const char *want = "has 32 tokens, fewer than one batch reads: 4 sequences (2 ranks x 2, a "
                       "rank's micro-batch) x 8 tokens + 1 = 33; it holds 3 sequences of 8 tokens "
                       "(+ 1): give a longer shard, fewer ranks, or a smaller --batch or --seq";
    if (strstr(err.msg, want) == NULL) fail_msg("'%s' lacks '%s'", err.msg, want);
}

/* llm.c's Llama 3 shards hold uint32 ids (a Llama 3 vocabulary has 128256): read whole,
 * batches as from a GPT-2 shard, an id outside the vocabulary named at its byte offset. */
static void test_data_llama3_shard_reads_ids_past_65535(void **state) {
    (void)state;
    uint32_t tokens[20];
    for (int i = 0; i < 20; i++)
        tokens[i] = 70000u + (uint32_t)i * 3000u;
    char path[128];
    shard_path(path, sizeof path, "llama3.bin");
    write_shard_of(path, LB_SHARD_MAGIC_LLAMA3, LB_SHARD_VERSION_LLAMA3, 20, tokens, sizeof *tokens,
                   20);
    lb_data_loader *d = NULL;
    lb_err err = {{0}};
    assert_int_equal(lb_data_open(path, 128256, 2, 4, 1, &d, &err), LB_OK);
    assert_int_equal(lb_data_shard_tokens(d), 20);
    int32_t in[8], tg[8];
    lb_data_next(d, in, tg);
    lb_data_next(d, in, tg); /* tokens 8..16 */
    for (int i = 0; i < 8; i++) {
        assert_int_equal(in[i], 70000 + (8 + i) * 3000);
        assert_int_equal(tg[i], 70000 + (9 + i) * 3000);
    }
    lb_data_close(d);
    /* token 19 = 127000 sits at byte 1024 + 19 * 4 = 1100 */
    assert_int_equal(lb_data_open(path, 127000, 2, 4, 1, &d, &err), LB_ERR_FORMAT);
    if (strstr(err.msg, "token 127000 at offset 1100") == NULL) fail_msg("'%s'", err.msg);
    /* its size is counted in 4-byte tokens, and its version is the Llama 3 layout's */
    write_shard_of(path, LB_SHARD_MAGIC_LLAMA3, LB_SHARD_VERSION_LLAMA3, 20, tokens, sizeof *tokens,
                   10);
    assert_int_equal(lb_data_open(path, 128256, 2, 4, 1, &d, &err), LB_ERR_FORMAT);
    assert_non_null(strstr(err.msg, "says 20 tokens of 4 bytes (1104 bytes in all)"));
    write_shard_of(path, LB_SHARD_MAGIC_LLAMA3, LB_SHARD_VERSION, 20, tokens, sizeof *tokens, 20);
    assert_int_equal(lb_data_open(path, 128256, 2, 4, 1, &d, &err), LB_ERR_FORMAT);
    assert_non_null(strstr(err.msg, "version 1 at offset 4, expected 7"));
}

static void test_data_missing_file_is_an_io_error(void **state) {
    (void)state;
    lb_data_loader *d = NULL;
    lb_err err = {{0}};
    assert_int_equal(lb_data_open("/nonexistent/x.bin", 50, 1, 4, 1, &d, &err), LB_ERR_IO);
    assert_non_null(strstr(err.msg, "/nonexistent/x.bin"));
}

static void test_data_repeat_returns_the_same_batch(void **state) {
    (void)state;
    lb_data_loader *d = NULL;
    assert_int_equal(lb_data_open("repeat", 1000, 2, 8, 3, &d, NULL), LB_OK);
    int32_t a[16], b[16], ta[16], tb[16];
    lb_data_next(d, a, ta);
    lb_data_next(d, b, tb);
    assert_memory_equal(a, b, sizeof a);
    assert_memory_equal(ta, tb, sizeof ta);
    for (int i = 0; i < 15; i++)
        assert_int_equal(ta[i], a[i + 1]);
    lb_data_close(d);
}

static void test_data_synthetic_is_seeded_and_in_vocabulary(void **state) {
    (void)state;
    lb_data_loader *d1 = NULL, *d2 = NULL;
    assert_int_equal(lb_data_open("synthetic", 37, 4, 16, 9, &d1, NULL), LB_OK);
    assert_int_equal(lb_data_open("synthetic", 37, 4, 16, 9, &d2, NULL), LB_OK);
    int32_t a[64], b[64], t[64];
    lb_data_next(d1, a, t);
    lb_data_next(d2, b, t);
    assert_memory_equal(a, b, sizeof a);
    int distinct = 0;
    int seen[37] = {0};
    for (int i = 0; i < 64; i++) {
        assert_in_range(a[i], 0, 36);
        if (!seen[a[i]]++) distinct++;
    }
    assert_true(distinct > 20);
    lb_data_next(d1, b, t);
    assert_memory_not_equal(a, b, sizeof a);
    lb_data_close(d1);
    lb_data_close(d2);
}

static int setup(void **state) {
    (void)state;
    lb_test_tmpdir(g_dir, sizeof g_dir);
    return g_dir[0] ? 0 : -1;
}

/* Four ranks' parts of each batch, side by side, are the whole batch one loader gives. */
static void expect_parts_tile_the_batch(const char *spec) {
    const int B = 8, T = 5, parts = 4, n = B * T, mine = n / parts;
    lb_data_loader *whole = NULL, *part[4] = {NULL};
    assert_int_equal(lb_data_open(spec, 60, B, T, 21, &whole, NULL), LB_OK);
    for (int r = 0; r < parts; r++)
        assert_int_equal(lb_data_open(spec, 60, B, T, 21, &part[r], NULL), LB_OK);
    int32_t in[40], tg[40], pin[10], ptg[10];
    for (int step = 0; step < 3; step++) {
        lb_data_next(whole, in, tg);
        for (int r = 0; r < parts; r++) {
            lb_data_next_part(part[r], r, parts, pin, ptg);
            assert_memory_equal(pin, in + r * mine, sizeof pin);
            assert_memory_equal(ptg, tg + r * mine, sizeof ptg);
        }
    }
    lb_data_close(whole);
    for (int r = 0; r < parts; r++)
        lb_data_close(part[r]);
}

static void test_data_rank_parts_tile_the_global_batch(void **state) {
    (void)state;
    uint16_t tokens[100];
    for (int i = 0; i < 100; i++)
        tokens[i] = (uint16_t)((i * 7) % 60);
    char path[128];
    shard_path(path, sizeof path, "parts.bin");
    write_shard(path, LB_SHARD_MAGIC, LB_SHARD_VERSION, 100, tokens, 100);
    expect_parts_tile_the_batch(path); /* 3 x 41 > 100: the third batch wraps */
    uint32_t wide[100];
    for (int i = 0; i < 100; i++)
        wide[i] = tokens[i];
    write_shard_of(path, LB_SHARD_MAGIC_LLAMA3, LB_SHARD_VERSION_LLAMA3, 100, wide, sizeof *wide,
                   100);
    expect_parts_tile_the_batch(path);
    expect_parts_tile_the_batch("synthetic");
    expect_parts_tile_the_batch("repeat");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_data_shard_batches_are_consecutive_windows),
        cmocka_unit_test(test_data_shard_that_shrinks_during_the_run_is_harmless),
        cmocka_unit_test(test_data_shard_with_wrong_magic_is_refused),
        cmocka_unit_test(test_data_shard_with_wrong_version_is_refused),
        cmocka_unit_test(test_data_truncated_shard_is_refused),
        cmocka_unit_test(test_data_shard_with_negative_count_is_refused),
        cmocka_unit_test(test_data_token_outside_vocabulary_names_offset),
        cmocka_unit_test(test_data_shard_shorter_than_a_batch_says_what_a_batch_reads),
        cmocka_unit_test(test_data_shard_too_short_for_the_ranks_names_their_count),
        cmocka_unit_test(test_data_llama3_shard_reads_ids_past_65535),
        cmocka_unit_test(test_data_missing_file_is_an_io_error),
        cmocka_unit_test(test_data_repeat_returns_the_same_batch),
        cmocka_unit_test(test_data_synthetic_is_seeded_and_in_vocabulary),
        cmocka_unit_test(test_data_rank_parts_tile_the_global_batch),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
