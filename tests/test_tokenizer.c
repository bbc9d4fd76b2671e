/* test_tokenizer.c: the BPE tokenizer (model/tokenizer.h) against real vocabularies and the
 * ids that other encoders give.
 *
 * Fixtures (tests/fixtures/tokenizer/, made by tools/make_tokenizer_fixtures.mjs): GPT-2's
 * whole ranks file, the part of Llama 3's that the fixture texts can reach (exact for these
 * texts: see the tool), and 420 texts with the ids of js-tiktoken (gpt2) and
 * llama3-tokenizer-js. With LB_TOKENIZER_LLAMA3 set to Llama 3's whole ranks file
 * (Meta's tokenizer.model, or the tool's third output), the Llama 3 parity test also runs
 * on it; otherwise that test is skipped. */
#include <jansson.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "core/clock.h"
#include "core/rng.h"
#include "model/hf_tokenizer.h"
#include "model/tokenizer.h"
#include "test_skip.h"
#include "test_util.h"

#define FIX LB_TEST_FIXTURES "/tokenizer/"

static json_t *texts; /* the fixture's "texts" array */

static int load_texts(void **state) {
    (void)state;
    json_error_t je;
    json_t *root = json_load_file(FIX "texts.json", 0, &je);
    if (root == NULL) {
        fprintf(stderr, "texts.json: %s (line %d)\n", je.text, je.line);
        return -1;
    }
    texts = json_incref(json_object_get(root, "texts"));
    json_decref(root);
    return json_is_array(texts) && json_array_size(texts) > 0 ? 0 : -1;
}

static int free_texts(void **state) {
    (void)state;
    json_decref(texts);
    return 0;
}

static lb_tokenizer *load(const char *path, lb_tok_pattern pattern, lb_tok_special special) {
    lb_tokenizer_params p = lb_tokenizer_default_params();
    p.pattern = pattern;
    p.special = special;
    lb_tokenizer *tok = NULL;
    lb_err err = {{0}};
    if (lb_tokenizer_load(&tok, path, &p, &err) != LB_OK) fail_msg("%s", err.msg);
    return tok;
}

static uint32_t *encode(const lb_tokenizer *tok, const char *s, size_t n, size_t *n_ids) {
    uint32_t *ids = NULL;
    lb_err err = {{0}};
    if (lb_tokenizer_encode(tok, s, n, &ids, n_ids, &err) != LB_OK) fail_msg("%s", err.msg);
    return ids;
}

static int64_t count(const lb_tokenizer *tok, const char *s, size_t n) {
    int64_t c = -1;
    lb_err err = {{0}};
    if (lb_tokenizer_count(tok, s, n, &c, &err) != LB_OK) fail_msg("%s", err.msg);
    return c;
}

/* decode(ids) must give s[0..n) back byte for byte. */
static void expect_round_trip(const lb_tokenizer *tok, const uint32_t *ids, size_t n_ids,
                              const char *s, size_t n) {
    char *back = NULL;
    size_t back_len = 0;
    lb_err err = {{0}};
    if (lb_tokenizer_decode(tok, ids, n_ids, &back, &back_len, &err) != LB_OK)
        fail_msg("%s", err.msg);
    if (back_len != n || memcmp(back, s, n) != 0)
        fail_msg("decode(encode(x)) != x for a text of %zu bytes (got %zu bytes)", n, back_len);
    assert_int_equal(back[back_len], '\0');
    free(back);
}

/* Every fixture text: ids equal to the field's, count equal to their number, round trip. */
static void expect_fixture_parity(const lb_tokenizer *tok, const char *field) {
    size_t i, mismatches = 0;
    json_t *rec;
    json_array_foreach(texts, i, rec) {
        const char *s = json_string_value(json_object_get(rec, "text"));
        size_t n = json_string_length(json_object_get(rec, "text"));
        json_t *want = json_object_get(rec, field);
        size_t n_ids = 0;
        uint32_t *ids = encode(tok, s, n, &n_ids);
        bool same = n_ids == json_array_size(want);
        for (size_t k = 0; same && k < n_ids; k++)
            same = (json_int_t)ids[k] == json_integer_value(json_array_get(want, k));
        if (!same && mismatches++ < 5) {
            fprintf(stderr, "%s text %zu (%zu bytes): %zu ids, expected %zu; \"%.60s\"\n", field, i,
                    n, n_ids, json_array_size(want), s);
            for (size_t k = 0; k < n_ids && k < json_array_size(want); k++) {
                if ((json_int_t)ids[k] != json_integer_value(json_array_get(want, k))) {
                    fprintf(stderr, "  first difference at id %zu: %u, expected %lld\n", k, ids[k],
                            (long long)json_integer_value(json_array_get(want, k)));
                    break;
                }
            }
        }
        assert_int_equal(count(tok, s, n), (int64_t)n_ids);
        expect_round_trip(tok, ids, n_ids, s, n);
        free(ids);
    }
    if (mismatches)
        fail_msg("%zu of %zu texts differ from the %s ids", mismatches, json_array_size(texts),
                 field);
}

static void test_tokenizer_gpt2_ids_match_js_tiktoken(void **state) {
    (void)state;
    lb_tokenizer *tok = load(FIX "gpt2.tiktoken", LB_TOK_PATTERN_AUTO, LB_TOK_SPECIAL_AUTO);
    const lb_tokenizer_info *info = lb_tokenizer_get_info(tok);
    assert_int_equal(info->pattern, LB_TOK_PATTERN_GPT2);
    assert_int_equal(info->special, LB_TOK_SPECIAL_GPT2);
    assert_int_equal(info->n_ranks, 50256);
    assert_int_equal(info->n_special, 1);
    assert_int_equal(info->max_id, 50256);
    expect_fixture_parity(tok, "gpt2");
    lb_tokenizer_free(tok);
}

static void test_tokenizer_llama3_subset_ids_match_llama3_tokenizer_js(void **state) {
    (void)state;
    lb_tokenizer *tok =
        load(FIX "llama3-subset.tiktoken", LB_TOK_PATTERN_AUTO, LB_TOK_SPECIAL_AUTO);
    const lb_tokenizer_info *info = lb_tokenizer_get_info(tok);
    assert_int_equal(info->pattern, LB_TOK_PATTERN_LLAMA3);
    assert_int_equal(info->special, LB_TOK_SPECIAL_LLAMA3);
    assert_int_equal(info->n_special, 256);
    assert_int_equal(info->max_id, 128255);
    expect_fixture_parity(tok, "llama3");
    lb_tokenizer_free(tok);
}

static void test_tokenizer_llama3_full_vocabulary_ids_match(void **state) {
    (void)state;
    const char *path = getenv("LB_TOKENIZER_LLAMA3");
    LB_TEST_SKIP_UNLESS(path != NULL && path[0] != '\0', "LB_TOKENIZER_LLAMA3 names no file");
    lb_tokenizer *tok = load(path, LB_TOK_PATTERN_AUTO, LB_TOK_SPECIAL_AUTO);
    assert_int_equal(lb_tokenizer_get_info(tok)->n_ranks, 128000);
    assert_int_equal(lb_tokenizer_get_info(tok)->pattern, LB_TOK_PATTERN_LLAMA3);
    expect_fixture_parity(tok, "llama3");
    lb_tokenizer_free(tok);
}

/* Concatenated encodings of the parts (each a whole pre-split piece or an invalid run). */
static void expect_ids_of_parts(const lb_tokenizer *tok, const char *whole, size_t n,
                                const char *const *parts, size_t n_parts) {
    size_t n_ids = 0, k = 0;
    uint32_t *ids = encode(tok, whole, n, &n_ids);
    for (size_t p = 0; p < n_parts; p++) {
        size_t np = 0;
        uint32_t *part = encode(tok, parts[p], strlen(parts[p]), &np);
        for (size_t j = 0; j < np; j++, k++) {
            assert_true(k < n_ids);
            assert_int_equal(ids[k], part[j]);
        }
        free(part);
    }
    assert_int_equal(k, n_ids);
    free(ids);
}

static void test_tokenizer_invalid_utf8_passes_bytes_through(void **state) {
    (void)state;
    lb_tokenizer *toks[2] = {
        load(FIX "gpt2.tiktoken", LB_TOK_PATTERN_AUTO, LB_TOK_SPECIAL_AUTO),
        load(FIX "llama3-subset.tiktoken", LB_TOK_PATTERN_AUTO, LB_TOK_SPECIAL_AUTO)};
#define CASE(lit)                                                                                  \
    { lit, sizeof lit - 1 }
    static const struct {
        const char *s;
        size_t n;
    } cases[] = {CASE("\xff"),
                 CASE("\x80\x80\x80"),
                 CASE("abc\xc3"),
                 CASE("\xe2\x82"),
                 CASE("\xc0\x80 overlong"),
                 CASE("\xed\xa0\x80 surrogate"),
                 CASE("\xf4\x90\x80\x80 above U+10FFFF"),
                 CASE("caf\xc3\xa9\xff\xfe"),
                 CASE("\xf0\x9f\x98"),
                 CASE("a\0b"),
                 CASE("<|endoftext\xff|>"),
                 CASE("\xff<|eot_id|>\xfe")};
#undef CASE
    lb_rng rng;
    lb_rng_seed(&rng, 7);
    for (int t = 0; t < 2; t++) {
        for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
            size_t n_ids = 0;
            uint32_t *ids = encode(toks[t], cases[c].s, cases[c].n, &n_ids);
            assert_true(n_ids > 0);
            assert_int_equal(count(toks[t], cases[c].s, cases[c].n), (int64_t)n_ids);
            expect_round_trip(toks[t], ids, n_ids, cases[c].s, cases[c].n);
            free(ids);
        }
        for (int r = 0; r < 200; r++) {
            char buf[300];
            size_t n = 1 + lb_rng_below(&rng, sizeof buf);
            for (size_t i = 0; i < n; i++)
                buf[i] = (char)lb_rng_below(&rng, 256);
            size_t n_ids = 0;
            uint32_t *ids = encode(toks[t], buf, n, &n_ids);
            assert_int_equal(count(toks[t], buf, n), (int64_t)n_ids);
            expect_round_trip(toks[t], ids, n_ids, buf, n);
            free(ids);
        }
        /* A bad byte splits the text: what surrounds it encodes as it would alone. */
        static const char *const parts[] = {"hello", "\xff", " world", "\xc3", "!"};
        expect_ids_of_parts(toks[t], "hello\xff world\xc3!", 14, parts, 5);
    }
    lb_tokenizer_free(toks[0]);
    lb_tokenizer_free(toks[1]);
}

static void expect_refused(const char *text, const char *needle) {
    lb_tokenizer *tok = (lb_tokenizer *)1;
    lb_err err = {{0}};
    lb_status st = lb_tokenizer_parse(&tok, text, strlen(text), "bad.tiktoken", NULL, &err);
    assert_int_equal(st, LB_ERR_FORMAT);
    assert_null(tok);
    if (strstr(err.msg, needle) == NULL) fail_msg("\"%s\" does not say \"%s\"", err.msg, needle);
}

/* A vocabulary of the 256 single bytes (ranks 0..255) followed by extra lines. */
static char *bytes_vocab(const char *extra) {
    static const char b64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    size_t cap = 256 * 16 + strlen(extra) + 1, n = 0;
    char *s = malloc(cap);
    for (int b = 0; b < 256; b++)
        n += (size_t)snprintf(s + n, cap - n, "%c%c== %d\n", b64[b >> 2], b64[(b & 3) << 4], b);
    snprintf(s + n, cap - n, "%s", extra);
    return s;
}

static void test_tokenizer_malformed_ranks_file_is_refused_with_file_and_line(void **state) {
    (void)state;
    expect_refused("IQ== 0\nIg==1\n", "bad.tiktoken:2: no space");
    expect_refused("IQ== 0\n\nI!== 1\n", "bad.tiktoken:3: \"I!==\" is not base64");
    expect_refused("IQ 0\n", "bad.tiktoken:1: \"IQ\" is not base64");
    expect_refused("IQ== 0\nIg== x1\n", "bad.tiktoken:2: rank \"x1\"");
    expect_refused("IQ== 0\nIg== \n", "bad.tiktoken:2: no rank");
    expect_refused("IQ== 99999999999999\n", "bad.tiktoken:1: rank");
    expect_refused("", "bad.tiktoken: no tokens");
    expect_refused("\n\n", "bad.tiktoken: no tokens");
    expect_refused("IQ== 0\nIg== 1\nIQ== 2\n", "bad.tiktoken:3: the token of line 1 again");
    expect_refused("IQ== 0\nIg== 1\nIw== 1\n", "bad.tiktoken:3: rank 1 was given on line 2");
    expect_refused("IQ== 0\n", "bad.tiktoken: byte 0x00 has no rank");

    char *ok = bytes_vocab("aGk= 256\r\n");
    lb_tokenizer *tok = NULL;
    lb_err err = {{0}};
    assert_int_equal(lb_tokenizer_parse(&tok, ok, strlen(ok), "ok.tiktoken", NULL, &err), LB_OK);
    assert_int_equal(lb_tokenizer_get_info(tok)->n_ranks, 257);
    assert_int_equal(count(tok, "hi", 2), 1);
    lb_tokenizer_free(tok);
    free(ok);

    char *dup = bytes_vocab("aGk= 3\n");
    assert_int_equal(lb_tokenizer_parse(&tok, dup, strlen(dup), "bad.tiktoken", NULL, &err),
                     LB_ERR_FORMAT);
    assert_non_null(strstr(err.msg, "bad.tiktoken:257: rank 3 was given on line 4"));
    free(dup);

    assert_int_equal(lb_tokenizer_load(&tok, "/nonexistent/x.tiktoken", NULL, &err), LB_ERR_USAGE);
    assert_null(tok);
    assert_non_null(strstr(err.msg, "/nonexistent/x.tiktoken"));
}

static void test_tokenizer_pattern_is_chosen_by_name_or_detected(void **state) {
    (void)state;
    lb_tok_pattern p;
    lb_err err = {{0}};
    assert_int_equal(lb_tokenizer_pattern_parse("llama3", &p, &err), LB_OK);
    assert_int_equal(p, LB_TOK_PATTERN_LLAMA3);
    assert_int_equal(lb_tokenizer_pattern_parse("r50k", &p, &err), LB_OK);
    assert_int_equal(p, LB_TOK_PATTERN_GPT2);
    assert_int_equal(lb_tokenizer_pattern_parse("bert", &p, &err), LB_ERR_USAGE);
    assert_non_null(strstr(err.msg, "\"bert\""));
    assert_non_null(strstr(err.msg, "llama3"));

    /* GPT-2's ranks with Llama 3's pattern: digits go in threes, and its special tokens
     * (which AUTO ties to the pattern's family) are gone. */
    lb_tokenizer *gpt2 = load(FIX "gpt2.tiktoken", LB_TOK_PATTERN_AUTO, LB_TOK_SPECIAL_AUTO);
    lb_tokenizer *forced = load(FIX "gpt2.tiktoken", LB_TOK_PATTERN_LLAMA3, LB_TOK_SPECIAL_AUTO);
    assert_int_equal(lb_tokenizer_get_info(forced)->pattern, LB_TOK_PATTERN_LLAMA3);
    assert_int_equal(lb_tokenizer_get_info(forced)->n_special, 0);
    static const char *const threes[] = {"123", "456", "7"};
    expect_ids_of_parts(forced, "1234567", 7, threes, 3);
    /* GPT-2's own pattern keeps the number whole, and merging cuts it elsewhere. */
    static const char *const merged[] = {"123", "45", "67"};
    expect_ids_of_parts(gpt2, "1234567", 7, merged, 3);
    lb_tokenizer_free(forced);
    lb_tokenizer_free(gpt2);
}

static void test_tokenizer_special_tokens_are_optional(void **state) {
    (void)state;
    lb_tokenizer *with = load(FIX "gpt2.tiktoken", LB_TOK_PATTERN_AUTO, LB_TOK_SPECIAL_AUTO);
    lb_tokenizer *without = load(FIX "gpt2.tiktoken", LB_TOK_PATTERN_AUTO, LB_TOK_SPECIAL_NONE);
    const char *s = "a<|endoftext|>b";
    size_t n_ids = 0;
    uint32_t *ids = encode(with, s, strlen(s), &n_ids);
    assert_int_equal(n_ids, 3);
    assert_int_equal(ids[1], 50256);
    free(ids);
    assert_true(count(without, s, strlen(s)) > 3);

    uint32_t eot = 50256;
    char *text = NULL;
    size_t len = 0;
    lb_err err = {{0}};
    assert_int_equal(lb_tokenizer_decode(with, &eot, 1, &text, &len, &err), LB_OK);
    assert_string_equal(text, "<|endoftext|>");
    free(text);
    assert_int_equal(lb_tokenizer_decode(without, &eot, 1, &text, &len, &err), LB_ERR_USAGE);
    assert_null(text);
    assert_non_null(strstr(err.msg, "token id 50256"));
    lb_tokenizer_free(with);
    lb_tokenizer_free(without);
}

typedef struct {
    const lb_tokenizer *tok;
    int64_t total; /* tokens counted over all texts */
} thread_arg;

static void *count_all(void *p) {
    thread_arg *a = p;
    size_t i;
    json_t *rec;
    for (int rep = 0; rep < 3; rep++) {
        json_array_foreach(texts, i, rec) {
            int64_t c = 0;
            lb_err err;
            json_t *t = json_object_get(rec, "text");
            if (lb_tokenizer_count(a->tok, json_string_value(t), json_string_length(t), &c, &err) !=
                LB_OK)
                return NULL;
            a->total += c;
        }
    }
    return p;
}

static void test_tokenizer_counts_from_many_threads_at_once(void **state) {
    (void)state;
    lb_tokenizer *tok = load(FIX "gpt2.tiktoken", LB_TOK_PATTERN_AUTO, LB_TOK_SPECIAL_AUTO);
    int64_t want = 0;
    size_t i;
    json_t *rec;
    json_array_foreach(texts, i, rec) want +=
        3 * (int64_t)json_array_size(json_object_get(rec, "gpt2"));
    pthread_t th[4];
    thread_arg args[4];
    for (int k = 0; k < 4; k++) {
        args[k] = (thread_arg){tok, 0};
        assert_int_equal(pthread_create(&th[k], NULL, count_all, &args[k]), 0);
    }
    for (int k = 0; k < 4; k++) {
        void *ret = NULL;
        pthread_join(th[k], &ret);
        assert_non_null(ret);
        assert_int_equal(args[k].total, want);
    }
    lb_tokenizer_free(tok);
}

static void test_tokenizer_cli_prints_ids_counts_and_refuses_a_bad_file(void **state) {
    (void)state;
    char dir[64], path[128], out[4096], errbuf[1024];
    lb_test_tmpdir(dir, sizeof dir);
    snprintf(path, sizeof path, "%s/t.txt", dir);
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    fputs("Hello world!<|endoftext|>", f);
    fclose(f);
    const char *ids[] = {"tokenize", "--tokenizer", FIX "gpt2.tiktoken", "--ids", path, NULL};
    assert_int_equal(lb_test_run(ids, out, sizeof out, errbuf, sizeof errbuf), 0);
    assert_string_equal(out, "15496 995 0 50256\n");
    const char *cnt[] = {"tokenize", "--tokenizer", FIX "gpt2.tiktoken", "--repeat", "3",
                         path,       NULL};
    assert_int_equal(lb_test_run(cnt, out, sizeof out, errbuf, sizeof errbuf), 0);
    assert_non_null(strstr(out, "pattern gpt2"));
    assert_non_null(strstr(out, ": 4 tokens, 25 bytes"));
    const char *bad[] = {"tokenize", "--tokenizer", path, path, NULL};
    assert_int_equal(lb_test_run(bad, out, sizeof out, errbuf, sizeof errbuf), 2);
    assert_non_null(strstr(errbuf, "t.txt:1: \"Hello\" is not base64"));
    /* a text file's path with a newline: the error stays one line */
    char missing[160];
    snprintf(missing, sizeof missing, "%s/no\nsuch.txt", dir);
    const char *gone[] = {"tokenize", "--tokenizer", FIX "gpt2.tiktoken", missing, NULL};
    assert_int_equal(lb_test_run(gone, out, sizeof out, errbuf, sizeof errbuf), 2);
    assert_non_null(strstr(errbuf, "no?such.txt"));
    assert_ptr_equal(strchr(errbuf, '\n'), errbuf + strlen(errbuf) - 1);
    lb_test_rmtree(dir);
}

/* The pre-split's whitespace class is the reference tokenizers' (Rust regex \s: Unicode
 * White_Space), code point by code point, in both expressions: with a vocabulary that has
 * a token for "!" + each tested code point, "!" + c is that one token exactly when c is not
 * whitespace (it joins the punctuation run), and two pieces when it is. U+180E is the
 * one PCRE2's own \s took for whitespace; U+200B, U+2060, U+FEFF and U+001C-U+001F
 * (Python's isspace) are not White_Space either. Llama 3's expression takes "\r" and "\n"
 * after punctuation into the piece ("[\r\n]*"), as the reference does. */
static void test_tokenizer_whitespace_class_is_unicode_white_space(void **state) {
    (void)state;
    static const uint32_t white[] = {0x09,   0x0A,   0x0B,   0x0C,   0x0D,   0x20,   0x85,
                                     0xA0,   0x1680, 0x2000, 0x2001, 0x2002, 0x2003, 0x2004,
                                     0x2005, 0x2006, 0x2007, 0x2008, 0x2009, 0x200A, 0x2028,
                                     0x2029, 0x202F, 0x205F, 0x3000};
    static const uint32_t not_white[] = {0x180E, 0x200B, 0x2060, 0xFEFF, 0x1C, 0x1F};
    enum { NW = sizeof white / sizeof white[0], NN = sizeof not_white / sizeof not_white[0] };
    char *ranks = NULL;
    size_t len = 0;
    for (unsigned b = 0; b < 256; b++) {
        unsigned char byte = (unsigned char)b;
        lb_test_add_rank(&ranks, &len, &byte, 1, b);
    }
    uint32_t cps[NW + NN];
    memcpy(cps, white, sizeof white);
    memcpy(cps + NW, not_white, sizeof not_white);
    for (unsigned i = 0; i < NW + NN; i++) {
        unsigned char t[8] = {'!'};
        size_t n = 1 + lb_test_utf8_of(cps[i], t + 1);
        lb_test_add_rank(&ranks, &len, t, n, 256 + i);
    }
    const lb_tok_pattern patterns[] = {LB_TOK_PATTERN_GPT2, LB_TOK_PATTERN_LLAMA3};
    for (int pi = 0; pi < 2; pi++) {
        lb_tokenizer_params p = {.pattern = patterns[pi], .special = LB_TOK_SPECIAL_NONE};
        lb_tokenizer *tok = NULL;
        lb_err err = {{0}};
        if (lb_tokenizer_parse(&tok, ranks, len, "ws.tiktoken", &p, &err) != LB_OK)
            fail_msg("%s", err.msg);
        for (unsigned i = 0; i < NW + NN; i++) {
            char text[8] = "!";
            size_t n = 1 + lb_test_utf8_of(cps[i], (unsigned char *)text + 1);
            size_t n_ids = 0;
            uint32_t *ids = encode(tok, text, n, &n_ids);
            bool joined = n_ids == 1 && ids[0] == 256 + i;
            /* Llama 3's expression also takes the line breaks after punctuation. */
            bool want_joined = i >= NW || (patterns[pi] == LB_TOK_PATTERN_LLAMA3 &&
                                           (cps[i] == 0x0A || cps[i] == 0x0D));
            if (joined != want_joined)
                fail_msg("%s: U+%04X is %s by the pre-split, expected %s",
                         lb_tokenizer_pattern_name(patterns[pi]), cps[i],
                         joined ? "not whitespace" : "whitespace",
                         want_joined ? "not whitespace" : "whitespace");
            free(ids);
        }
        lb_tokenizer_free(tok);
    }
    free(ranks);
}

/* Appends byte b as GPT-2's byte-level alphabet writes it (UTF-8): bytes 33-126, 161-172
 * and 174-255 stand for themselves, the other 68 in order for U+0100 onwards. */
static size_t byte_level(uint8_t b, char *out) {
    uint32_t cp = b, k = 0;
    bool self = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174;
    if (!self) {
        for (uint32_t x = 0; x < b; x++)
            k += !((x >= 33 && x <= 126) || (x >= 161 && x <= 172) || x >= 174);
        cp = 256 + k;
    }
    if (cp < 0x80) return out[0] = (char)cp, 1;
    out[0] = (char)(0xC0 | cp >> 6);
    out[1] = (char)(0x80 | (cp & 63));
    return 2;
}

/* A Hugging Face tokenizer.json of GPT-2's vocabulary (written here from the ranks file,
 * ids = ranks) encodes the fixture's texts exactly as the ranks file does; one whose
 * merges contradict the ids, or whose model is not BPE, is refused by name. */
static void test_tokenizer_reads_hugging_face_tokenizer_json(void **state) {
    (void)state;
    FILE *in = fopen(FIX "gpt2.tiktoken", "r");
    assert_non_null(in);
    json_t *vocab = json_object();
    char line[512];
    while (fgets(line, sizeof line, in) != NULL) {
        char b64[400];
        unsigned rank;
        assert_int_equal(sscanf(line, "%399s %u", b64, &rank), 2);
        uint8_t bytes[300];
        size_t nb = 0;
        uint32_t acc = 0;
        int bits = 0;
        for (const char *c = b64; *c && *c != '='; c++) {
            const char *pos = strchr("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
                                     "0123456789+/",
                                     *c);
            acc = acc << 6 | (uint32_t)(pos - "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
                                              "0123456789+/");
            if ((bits += 6) >= 8) {
                bits -= 8;
                bytes[nb++] = (uint8_t)(acc >> bits);
            }
        }
        char key[700];
        size_t k = 0;
        for (size_t i = 0; i < nb; i++)
            k += byte_level(bytes[i], key + k);
        key[k] = '\0';
        json_object_set_new(vocab, key, json_integer(rank));
    }
    fclose(in);
    /* GPT-2's own file: <|endoftext|> in the vocabulary and a special added token, the
     * pre-tokenizer ByteLevel */
    json_object_set_new(vocab, "<|endoftext|>", json_integer(50256));
    json_t *doc =
        json_pack("{s:{s:s, s:o, s:[]}, s:[{s:i, s:s, s:b}], s:{s:s, s:b}}", "model", "type", "BPE",
                  "vocab", vocab, "merges", "added_tokens", "id", 50256, "content", "<|endoftext|>",
                  "special", 1, "pre_tokenizer", "type", "ByteLevel", "use_regex", 1);
    char path[] = "/tmp/lb_tok_hf_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    assert_int_equal(json_dump_file(doc, path, JSON_COMPACT), 0);
    lb_tokenizer *hf = NULL, *tok = NULL;
    lb_err err = {{0}};
    if (lb_hf_tokenizer_load(&hf, path, NULL, &err) != LB_OK) fail_msg("%s", err.msg);
    const lb_tokenizer_info *info = lb_tokenizer_get_info(hf);
    assert_int_equal(info->pattern, LB_TOK_PATTERN_GPT2);
    assert_int_equal(info->n_ranks, 50256);
    expect_fixture_parity(hf, "gpt2");
    lb_tokenizer_free(hf);
    /* added tokens of any form match where they stand, the longest of those starting at one
     * place ("<s>x" over "<s>"), and nothing of them matches in part ("<s" is text) */
    json_t *added = json_object_get(doc, "added_tokens");
    const char *more[] = {"<fim_prefix>", "<s>", "<s>x"};
    for (int k = 0; k < 3; k++)
        json_array_append_new(
            added, json_pack("{s:i, s:s, s:b}", "id", 50257 + k, "content", more[k], "special", 1));
    char path_added[] = "/tmp/lb_tok_hf_XXXXXX";
    fd = mkstemp(path_added);
    assert_true(fd >= 0);
    close(fd);
    assert_int_equal(json_dump_file(doc, path_added, JSON_COMPACT), 0);
    if (lb_hf_tokenizer_load(&hf, path_added, NULL, &err) != LB_OK) fail_msg("%s", err.msg);
    const char *text = "a<fim_prefix>b<s>x<s>y<s<|endoftext|>";
    uint32_t *ids = NULL;
    size_t n_ids = 0;
    assert_int_equal(lb_tokenizer_encode(hf, text, strlen(text), &ids, &n_ids, &err), LB_OK);
    /* a, <fim_prefix>, b, <s>x, <s>, y, <, s, <|endoftext|> */
    const uint32_t want[] = {64, 50257, 65, 50259, 50258, 88, 27, 82, 50256};
    assert_int_equal(n_ids, sizeof want / sizeof want[0]);
    for (size_t k = 0; k < n_ids; k++)
        if (ids[k] != want[k]) fail_msg("id %zu is %u, expected %u", k, ids[k], want[k]);
    free(ids);
    /* the specials are told apart from the ranks, for decoders that skip them */
    assert_true(lb_tokenizer_is_special(hf, 50256));
    assert_true(lb_tokenizer_is_special(hf, 50259));
    assert_false(lb_tokenizer_is_special(hf, 64));
    assert_false(lb_tokenizer_is_special(hf, 60000));
    lb_tokenizer_free(hf);
    unlink(path_added);
    json_array_remove(added, 3);
    json_array_remove(added, 2);
    json_array_remove(added, 1);
    /* Merges out of id order ("Ġ t" makes id 256, "h e" id 258, "Ġ a" 257): refused. */
    json_t *merges = json_object_get(json_object_get(doc, "model"), "merges");
    json_array_append_new(merges, json_string("\xC4\xA0 t"));
    json_array_append_new(merges, json_string("h e"));
    json_array_append_new(merges, json_string("\xC4\xA0 a"));
    assert_int_equal(json_dump_file(doc, path, JSON_COMPACT), 0);
    assert_int_equal(lb_hf_tokenizer_load(&tok, path, NULL, &err), LB_ERR_USAGE);
    assert_non_null(strstr(err.msg, "model.merges[2] makes id 257 after id 258"));
    json_object_set_new(json_object_get(doc, "model"), "type", json_string("Unigram"));
    assert_int_equal(json_dump_file(doc, path, JSON_COMPACT), 0);
    assert_int_equal(lb_hf_tokenizer_load(&tok, path, NULL, &err), LB_ERR_USAGE);
    assert_non_null(strstr(err.msg, "model.type must be \"BPE\""));
    /* its pattern and special tokens are its own: a choice meant for a ranks file is refused */
    lb_tokenizer_params p = lb_tokenizer_default_params();
    p.pattern = LB_TOK_PATTERN_GPT2;
    assert_int_equal(lb_hf_tokenizer_load(&tok, path, &p, &err), LB_ERR_USAGE);
    assert_non_null(strstr(err.msg, "is a tokenizer.json, which names its own"));
    json_decref(doc);
    unlink(path);
}

/* A tokenizer.json of a tiny byte-level BPE (ids 0-255 the bytes, 256 "hi", 257 " hi"; GPT-2's
 * ByteLevel pre-tokenizer) with the added tokens given (a JSON array, taken) and the vocabulary
 * entries of extra (an object, taken; NULL: none), parsed. */
static lb_status tiny_hf(json_t *added, json_t *extra, lb_tokenizer **tok, lb_err *err) {
    json_t *vocab = json_object();
    for (unsigned b = 0; b < 256; b++) {
        char key[4];
        key[byte_level((uint8_t)b, key)] = '\0';
        json_object_set_new(vocab, key, json_integer(b));
    }
    json_object_set_new(vocab, "hi", json_integer(256));
    json_object_set_new(vocab, "\xC4\xA0hi", json_integer(257));
    if (extra != NULL) json_object_update(vocab, extra);
    json_decref(extra);
    json_t *doc = json_pack("{s:{s:s, s:o, s:[s, s]}, s:o, s:{s:s, s:b}}", "model", "type", "BPE",
                            "vocab", vocab, "merges", "h i", "\xC4\xA0 hi", "added_tokens", added,
                            "pre_tokenizer", "type", "ByteLevel", "use_regex", 1);
    char *text = json_dumps(doc, JSON_COMPACT);
    lb_status st = lb_hf_tokenizer_parse(tok, text, strlen(text), "tiny.json", err);
    free(text);
    json_decref(doc);
    return st;
}

/* encode(text) must be want[0..n_want). */
static void expect_ids(const lb_tokenizer *tok, const char *text, const uint32_t *want,
                       size_t n_want) {
    size_t n_ids = 0;
    uint32_t *ids = encode(tok, text, strlen(text), &n_ids);
    bool same = n_ids == n_want;
    for (size_t k = 0; same && k < n_ids; k++)
        same = ids[k] == want[k];
    if (!same) {
        char got[256] = "";
        for (size_t k = 0, o = 0; k < n_ids && o < sizeof got - 12; k++)
            o += (size_t)snprintf(got + o, sizeof got - o, " %u", ids[k]);
        fail_msg("\"%s\" encodes to%s (%zu ids), expected %zu ids", text, got, n_ids, n_want);
    }
    assert_int_equal(count(tok, text, strlen(text)), (int64_t)n_want);
    free(ids);
}

#define EXPECT_IDS(tok, text, ...)                                                                 \
    do {                                                                                           \
        const uint32_t want_[] = {__VA_ARGS__};                                                    \
        expect_ids(tok, text, want_, sizeof want_ / sizeof want_[0]);                              \
    } while (0)

/* Added tokens with lstrip, rstrip and single_word match as Hugging Face's tokenizers match
 * them. The ids are worked out by hand from its rules: the vocabulary has the 256 bytes (id =
 * byte), "hi" (256) and " hi" (257); the GPT-2 pre-split cuts "hi " into "hi" and " ".
 * "<l>" (258) takes the whitespace before it (lstrip), "<r>" (259) the whitespace after it
 * (rstrip), "xy" (260) matches only with no word character beside it (single_word). */
static void test_tokenizer_json_added_tokens_strip_whitespace_as_hugging_face(void **state) {
    (void)state;
    json_t *added =
        json_pack("[{s:i, s:s, s:b, s:b, s:b, s:b, s:b}, {s:i, s:s, s:b, s:b, s:b, s:b, s:b},"
                  " {s:i, s:s, s:b, s:b, s:b, s:b, s:b}]",
                  "id", 258, "content", "<l>", "special", 1, "lstrip", 1, "rstrip", 0,
                  "single_word", 0, "normalized", 0, "id", 259, "content", "<r>", "special", 1,
                  "lstrip", 0, "rstrip", 1, "single_word", 0, "normalized", 0, "id", 260, "content",
                  "xy", "special", 0, "lstrip", 0, "rstrip", 0, "single_word", 1, "normalized", 0);
    lb_tokenizer *tok = NULL;
    lb_err err = {{0}};
    if (tiny_hf(added, NULL, &tok, &err) != LB_OK) fail_msg("%s", err.msg);
    /* lstrip: the space before "<l>" goes with it, the one after stays: "hi", <l>, " hi" */
    EXPECT_IDS(tok, "hi <l> hi", 256, 258, 257);
    /* rstrip: the space after "<r>" goes with it, the one before stays: "hi", " ", <r>, "hi" */
    EXPECT_IDS(tok, "hi <r> hi", 256, 32, 259, 256);
    /* a run of whitespace of any kind, U+3000 (3 bytes) included, goes whole */
    EXPECT_IDS(tok, "hi \t\n<l>", 256, 258);
    EXPECT_IDS(tok, "<r>\t\xE3\x80\x80hi", 259, 256);
    /* no whitespace beside: nothing taken; "<r>" took the space, so "<l>" finds none */
    EXPECT_IDS(tok, "hi<l>hi", 256, 258, 256);
    EXPECT_IDS(tok, "<r> <l>", 259, 258);
    /* single_word: "xy" alone is the token; touching a letter ("z", "é": bytes 195 169),
     * a digit or "_" it is text */
    EXPECT_IDS(tok, "xy xyz", 260, 32, 120, 121, 122);
    EXPECT_IDS(tok, "\xC3\xA9xy", 195, 169, 120, 121);
    EXPECT_IDS(tok, "_xy", 95, 120, 121);
    EXPECT_IDS(tok, "(xy)", 40, 260, 41);
    lb_tokenizer_free(tok);
    /* a flag that is not true or false is refused naming the token and the flag */
    added = json_pack("[{s:i, s:s, s:s}]", "id", 258, "content", "<l>", "lstrip", "yes");
    assert_int_equal(tiny_hf(added, NULL, &tok, &err), LB_ERR_USAGE);
    assert_non_null(
        strstr(err.msg, "added_tokens[0] \"<l>\" has lstrip that is not true or false"));
    assert_null(tok);
}

/* Hugging Face matches the added tokens that are not "normalized" first, over the whole
 * text, and the "normalized" ones only in what is left between them, so a normalized token
 * that starts first loses to one of the first pass it overlaps. "<s>" (258, special,
 * normalized false) and "z<" (259, normalized true): in "z<s>", "<s>" is taken first and "z"
 * (122) is left; "z<" matches only where no "<s>" overlaps it: "z<x" is "z<", "x" (120). */
static void test_tokenizer_json_normalized_added_tokens_match_after_the_others(void **state) {
    (void)state;
    json_t *added = json_pack("[{s:i, s:s, s:b, s:b}, {s:i, s:s, s:b, s:b}]", "id", 258, "content",
                              "<s>", "special", 1, "normalized", 0, "id", 259, "content", "z<",
                              "special", 0, "normalized", 1);
    lb_tokenizer *tok = NULL;
    lb_err err = {{0}};
    if (tiny_hf(added, NULL, &tok, &err) != LB_OK) fail_msg("%s", err.msg);
    EXPECT_IDS(tok, "z<s>", 122, 258);
    EXPECT_IDS(tok, "z<x", 259, 120);
    EXPECT_IDS(tok, "z<s>z<x", 122, 258, 259, 120);
    lb_tokenizer_free(tok);
}

/* A tokenizer.json that gives two tokens one id is refused naming both (the ranks text made
 * from it once named its own lines, which the file has not), and an added token's id past
 * the largest id is refused (2^32 + 65 was cut to 65, clashing with "A"). */
static void test_tokenizer_json_duplicate_and_out_of_range_ids_are_named(void **state) {
    (void)state;
    lb_tokenizer *tok = NULL;
    lb_err err = {{0}};
    assert_int_equal(tiny_hf(json_array(), json_pack("{s:i}", "hj", 97), &tok, &err), LB_ERR_USAGE);
    assert_string_equal(err.msg, "tiny.json: model.vocab[\"a\"] and model.vocab[\"hj\"] both have "
                                 "id 97; each token has an id of its own");
    json_t *added = json_pack("[{s:I, s:s, s:b}]", "id", (json_int_t)4294967361LL, "content",
                              "<big>", "special", 1);
    assert_int_equal(tiny_hf(added, NULL, &tok, &err), LB_ERR_USAGE);
    assert_string_equal(err.msg, "tiny.json: added_tokens[0] needs an id (0 to 1073741823) and a "
                                 "content");
    assert_null(tok);
}

/* Ctrl-C during `tokenize --repeat` stops it with 130 and one line, printing nothing (the
 * first SIGINT only set the flag, and the counts went on). */
static void test_tokenizer_cli_stops_at_ctrl_c(void **state) {
    (void)state;
    char dir[64], path[128], out[4096] = "", errbuf[1024] = "";
    lb_test_tmpdir(dir, sizeof dir);
    snprintf(path, sizeof path, "%s/t.txt", dir);
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    for (int i = 0; i < 20000; i++)
        fputs("Hello world, once more. ", f);
    fclose(f);
    const char *argv[] = {LB_TEST_BIN, "tokenize", "--tokenizer", FIX "gpt2.tiktoken",
                          "--repeat",  "1000000",  path,          NULL};
    int out_fd = -1, err_fd = -1;
    pid_t pid = lb_test_spawn(LB_TEST_BIN, argv, &out_fd, &err_fd);
    assert_true(pid > 0);
    /* the handler is in place (SigCgt), then the counts are under way */
    char proc[64], line[256];
    snprintf(proc, sizeof proc, "/proc/%d/status", (int)pid);
    unsigned long long caught = 0;
    for (int tries = 0; tries < 1000 && !(caught & (1ull << (SIGINT - 1))); tries++) {
        FILE *st = fopen(proc, "r");
        while (st != NULL && fgets(line, sizeof line, st) != NULL)
            if (sscanf(line, "SigCgt: %llx", &caught) == 1) break;
        if (st != NULL) fclose(st);
        usleep(10 * 1000);
    }
    usleep(500 * 1000);
    int64_t t0 = lb_clock_now_ns();
    assert_int_equal(kill(pid, SIGINT), 0);
    int status = 0;
    pid_t ended = 0;
    while ((ended = waitpid(pid, &status, WNOHANG)) == 0 && lb_clock_now_ns() - t0 < 5000000000)
        usleep(10 * 1000);
    if (ended == 0) {
        kill(pid, SIGKILL);
        waitpid(pid, &status, 0);
    }
    lb_test_slurp(out_fd, out, sizeof out);
    lb_test_slurp(err_fd, errbuf, sizeof errbuf);
    close(out_fd);
    close(err_fd);
    if (ended == 0) fail_msg("tokenize went on 5 s after SIGINT; stderr: %s", errbuf);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 130);
    char want[256];
    snprintf(want, sizeof want,
             "llmbench tokenize: interrupted by a signal at %s; nothing is printed\n", path);
    assert_string_equal(errbuf, want);
    assert_string_equal(out, "");
    lb_test_rmtree(dir);
}

int main(int argc, char **argv) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tokenizer_gpt2_ids_match_js_tiktoken),
        cmocka_unit_test(test_tokenizer_llama3_subset_ids_match_llama3_tokenizer_js),
        cmocka_unit_test(test_tokenizer_llama3_full_vocabulary_ids_match),
        cmocka_unit_test(test_tokenizer_invalid_utf8_passes_bytes_through),
        cmocka_unit_test(test_tokenizer_whitespace_class_is_unicode_white_space),
        cmocka_unit_test(test_tokenizer_reads_hugging_face_tokenizer_json),
        cmocka_unit_test(test_tokenizer_json_added_tokens_strip_whitespace_as_hugging_face),
        cmocka_unit_test(test_tokenizer_json_normalized_added_tokens_match_after_the_others),
        cmocka_unit_test(test_tokenizer_malformed_ranks_file_is_refused_with_file_and_line),
        cmocka_unit_test(test_tokenizer_pattern_is_chosen_by_name_or_detected),
        cmocka_unit_test(test_tokenizer_special_tokens_are_optional),
        cmocka_unit_test(test_tokenizer_counts_from_many_threads_at_once),
        cmocka_unit_test(test_tokenizer_cli_prints_ids_counts_and_refuses_a_bad_file),
        cmocka_unit_test(test_tokenizer_json_duplicate_and_out_of_range_ids_are_named),
        cmocka_unit_test(test_tokenizer_cli_stops_at_ctrl_c),
    };
    return lb_test_main(tests, sizeof tests / sizeof tests[0], load_texts, free_texts, argc, argv);
}
