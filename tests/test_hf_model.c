/* The Hugging Face directory loader and tokenizer.json on tiny directories written by
 * hf_fixture.h: the configuration and weights come back as written (single file and
 * shards, F32 and BF16, an index of more than 1024 shard files), every kind of bad
 * directory is refused with a sentence naming the file and tensor (a layer count the
 * weights disagree with, a bos id outside the vocabulary, an index that is not JSON with
 * its line and column included, a tensor in two shards or not where the index says, a
 * llama3 rope scaling without its fields, a field of the wrong type), the model is named in
 * whole UTF-8 characters, tokenizer.json encodes as the equivalent tiktoken ranks file (added
 * tokens verbatim with their special flag; steps it cannot follow refused), and the chat
 * format is Llama 3's. */
/* clang-format off */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
/* clang-format on */

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "hf_fixture.h"
#include "model/hf_model.h"
#include "model/hf_tokenizer.h"
#include "model/model.h"
#include "test_util.h"

typedef struct {
    char dir[64];
    lb_model_config cfg;
    lb_model m;
} fixture;

static void make(fixture *f, bool bf16, bool sharded) {
    lb_err err;
    f->cfg = lb_fixture_config();
    assert_int_equal(lb_model_init(&f->m, &f->cfg, 1, 8, 7, &err), LB_OK);
    lb_test_tmpdir(f->dir, sizeof f->dir);
    lb_fixture_write_dir(f->dir, &f->cfg, f->m.params, bf16, sharded);
}

static void unmake(fixture *f) {
    lb_model_free(&f->m);
    lb_test_rmtree(f->dir);
}

static void check_weights(fixture *f, bool bf16) {
    lb_hf_model hf;
    lb_err err;
    assert_int_equal(lb_hf_model_open(&hf, f->dir, &err), LB_OK);
    assert_int_equal(hf.cfg.vocab_size, 320);
    assert_int_equal(hf.cfg.n_kv_head, f->cfg.n_kv_head);
    assert_int_equal(hf.cfg.d_ff, f->cfg.d_ff);
    assert_true(hf.cfg.rope_scaling.enabled);
    assert_int_equal(hf.cfg.rope_scaling.original_max_pos, 32);
    assert_int_equal(hf.n_eos, 2);
    assert_int_equal(hf.eos_ids[1], 314);
    assert_int_equal(hf.bos_id, 310);
    assert_true(hf.tokenizer_json);
    assert_int_equal(hf.dtype, bf16 ? LB_ST_BF16 : LB_ST_F32);
    for (int i = 0; i < f->m.n_tensors; i++) {
        const lb_param_tensor *t = &f->m.layout[i];
        float *got = malloc((size_t)t->numel * sizeof *got);
        lb_hf_model_read(&hf, t, LB_DT_F32, got);
        for (int64_t k = 0; k < t->numel; k++) {
            float want = f->m.params[t->offset + k];
            if (bf16) want = lb_hf_model_bf16_to_f32(lb_hf_model_f32_to_bf16(want));
            if (got[k] != want) fail_msg("%s[%lld]: %g != %g", t->name, (long long)k, got[k], want);
        }
        free(got);
    }
    lb_hf_model_close(&hf);
}

static void test_hf_model_reads_a_single_file_in_fp32(void **state) {
    (void)state;
    fixture f;
    make(&f, false, false);
    check_weights(&f, false);
    unmake(&f);
}

static void test_hf_model_reads_bf16_shards_through_the_index(void **state) {
    (void)state;
    fixture f;
    make(&f, true, true);
    check_weights(&f, true);
    unmake(&f);
}

/* Opens f->dir after `spoil` wrote over one file; expects a usage error containing want. */
static void expect_refused(fixture *f, const char *file, const char *text, const char *want) {
    char path[256];
    snprintf(path, sizeof path, "%s/%s", f->dir, file);
    if (text)
        assert_true(lb_test_write_file(path, text));
    else
        assert_int_equal(remove(path), 0);
    lb_hf_model hf;
    lb_err err = {{0}};
    assert_int_equal(lb_hf_model_open(&hf, f->dir, &err), LB_ERR_USAGE);
    if (strstr(err.msg, want) == NULL) fail_msg("'%s' does not say '%s'", err.msg, want);
}

static void test_hf_model_refuses_bad_directories_naming_the_file(void **state) {
    (void)state;
    fixture f;
    make(&f, false, false);
    expect_refused(&f, "config.json",
                   "{\"architectures\":[\"GPT2LMHeadModel\"],\"vocab_size\":320}",
                   "GPT2LMHeadModel");
    lb_fixture_write_config(f.dir, &f.cfg, "MistralForCausalLM");
    lb_hf_model hf;
    lb_err err;
    assert_int_equal(lb_hf_model_open(&hf, f.dir, &err), LB_OK); /* Mistral reads the same */
    lb_hf_model_close(&hf);
    expect_refused(&f, "config.json", "{\"architectures\":[\"LlamaForCausalLM\"]}", "vocab_size");
    lb_fixture_write_config(f.dir, &f.cfg, "LlamaForCausalLM");
    /* no tokenizer: opened (training needs none), with an empty tokenizer path */
    char tpath[256];
    snprintf(tpath, sizeof tpath, "%s/tokenizer.json", f.dir);
    assert_int_equal(remove(tpath), 0);
    assert_int_equal(lb_hf_model_open(&hf, f.dir, &err), LB_OK);
    assert_string_equal(hf.tokenizer_path, "");
    lb_hf_model_close(&hf);
    lb_fixture_write_tokenizer_json(tpath);
    expect_refused(&f, "model.safetensors", NULL, "no model.safetensors");
    unmake(&f);
}

static void test_hf_model_refuses_wrong_tensors_naming_them(void **state) {
    (void)state;
    fixture f;
    make(&f, false, false);
    lb_fixture_tensor t[64];
    int n = lb_fixture_tensors(&f.cfg, f.m.params, t);
    char path[256];
    snprintf(path, sizeof path, "%s/model.safetensors", f.dir);
    lb_hf_model hf;
    lb_err err;
    /* a missing tensor */
    lb_fixture_write_safetensors(path, t, n - 1, false);
    assert_int_equal(lb_hf_model_open(&hf, f.dir, &err), LB_ERR_USAGE);
    assert_non_null(strstr(err.msg, "lm_head.weight"));
    /* a wrong shape */
    lb_fixture_tensor bad[64];
    memcpy(bad, t, sizeof bad);
    bad[2].rows = 8; /* layer 0's q_proj */
    lb_fixture_write_safetensors(path, bad, n, false);
    assert_int_equal(lb_hf_model_open(&hf, f.dir, &err), LB_ERR_USAGE);
    assert_non_null(strstr(err.msg, "model.layers.0.self_attn.q_proj.weight"));
    assert_non_null(strstr(err.msg, "shape [64, 64]"));
    /* mixed dtypes */
    lb_fixture_write_safetensors(path, t, n - 1, false);
    char path2[256];
    snprintf(path2, sizeof path2, "%s/model-b.safetensors", f.dir);
    lb_fixture_write_safetensors(path2, t + n - 1, 1, true);
    char idx[8192];
    int k = sprintf(idx, "{\"weight_map\":{");
    for (int i = 0; i < n; i++)
        k += sprintf(idx + k, "%s\"%s\":\"%s\"", i ? "," : "", t[i].name,
                     i < n - 1 ? "model.safetensors" : "model-b.safetensors");
    sprintf(idx + k, "}}");
    snprintf(path2, sizeof path2, "%s/model.safetensors.index.json", f.dir);
    assert_true(lb_test_write_file(path2, idx));
    assert_int_equal(lb_hf_model_open(&hf, f.dir, &err), LB_ERR_USAGE);
    assert_non_null(strstr(err.msg, "one dtype"));
    remove(path2);
    /* a truncated file */
    lb_fixture_write_safetensors(path, t, n, false);
    size_t bytes = 0;
    char *all = lb_test_read_file(path, &bytes);
    FILE *fp = fopen(path, "wb");
    fwrite(all, 1, bytes - 100, fp);
    fclose(fp);
    free(all);
    assert_int_equal(lb_hf_model_open(&hf, f.dir, &err), LB_ERR_USAGE);
    if (strstr(err.msg, "model.safetensors") == NULL) fail_msg("%s", err.msg);
    unmake(&f);
}

/* An index is read whatever number of shard files it names: 1100 files of one tensor
 * each before the file with the model's tensors (a fixed table once dropped every file
 * after the 1024th and then said a tensor was missing). */
static void test_hf_model_reads_an_index_of_more_than_1024_shard_files(void **state) {
    (void)state;
    fixture f;
    make(&f, false, false);
    enum { EXTRA = 1100 };
    lb_fixture_tensor t[64];
    int n = lb_fixture_tensors(&f.cfg, f.m.params, t);
    const float one = 1.0f;
    char path[256];
    snprintf(path, sizeof path, "%s/model.safetensors.index.json", f.dir);
    FILE *idx = fopen(path, "w");
    assert_non_null(idx);
    fprintf(idx, "{\"weight_map\":{");
    for (int i = 0; i < EXTRA; i++) {
        lb_fixture_tensor x = {.rows = 1, .cols = 0, .data = &one};
        snprintf(x.name, sizeof x.name, "extra.%d", i);
        char shard[256];
        snprintf(shard, sizeof shard, "%s/extra-%04d.safetensors", f.dir, i);
        lb_fixture_write_safetensors(shard, &x, 1, false);
        fprintf(idx, "\"extra.%d\":\"extra-%04d.safetensors\",", i, i);
    }
    for (int i = 0; i < n; i++)
        fprintf(idx, "%s\"%s\":\"model.safetensors\"", i ? "," : "", t[i].name);
    fprintf(idx, "}}");
    assert_int_equal(fclose(idx), 0);
    lb_hf_model hf;
    lb_err err = {{0}};
    if (lb_hf_model_open(&hf, f.dir, &err) != LB_OK) fail_msg("%s", err.msg);
    assert_int_equal(hf.n_shards, EXTRA + 1);
    lb_hf_model_close(&hf);
    unmake(&f);
}

/* A tensor that two shards hold, or that the index places in a shard without it, is
 * refused naming the files: the first shard's copy used to be read whatever the index
 * said. */
static void test_hf_model_refuses_a_tensor_in_two_shards_or_not_where_the_index_says(void **state) {
    (void)state;
    fixture f;
    make(&f, false, true);
    lb_fixture_tensor t[64];
    int n = lb_fixture_tensors(&f.cfg, f.m.params, t), half = n / 2;
    char path[256];
    /* shard 2 holds shard 1's last tensor as well */
    lb_fixture_tensor two[64];
    memcpy(two, t + half - 1, (size_t)(n - half + 1) * sizeof *two);
    snprintf(path, sizeof path, "%s/model-00002-of-00002.safetensors", f.dir);
    lb_fixture_write_safetensors(path, two, n - half + 1, false);
    lb_hf_model hf;
    lb_err err = {{0}};
    assert_int_equal(lb_hf_model_open(&hf, f.dir, &err), LB_ERR_USAGE);
    char want[256];
    snprintf(want, sizeof want, "tensor '%s' is in %s/model-0000", t[half - 1].name, f.dir);
    if (strstr(err.msg, want) == NULL || strstr(err.msg, "one shard") == NULL)
        fail_msg("%s", err.msg);
    lb_fixture_write_safetensors(path, t + half, n - half, false);
    assert_int_equal(lb_hf_model_open(&hf, f.dir, &err), LB_OK);
    lb_hf_model_close(&hf);
    /* the index places the embedding in shard 2, which lacks it */
    snprintf(path, sizeof path, "%s/model.safetensors.index.json", f.dir);
    size_t bytes = 0;
    char *idx = lb_test_read_file(path, &bytes);
    char *at = strstr(idx, "\"model.embed_tokens.weight\":\"model-00001");
    assert_non_null(at);
    at[strlen("\"model.embed_tokens.weight\":\"model-0000")] = '2';
    assert_true(lb_test_write_file(path, idx));
    free(idx);
    assert_int_equal(lb_hf_model_open(&hf, f.dir, &err), LB_ERR_USAGE);
    if (strstr(err.msg, "model.safetensors.index.json: weight_map puts 'model.embed_tokens.weight' "
                        "in model-00002-of-00002.safetensors, which does not hold it") == NULL)
        fail_msg("%s", err.msg);
    unmake(&f);
}

/* An index that is not JSON says so, with jansson's line and column, rather than that it
 * has no weight_map. */
static void test_hf_model_refuses_an_index_that_is_not_json(void **state) {
    (void)state;
    fixture f;
    make(&f, false, true);
    expect_refused(&f, "model.safetensors.index.json", "{\"weight_map\": {\n  \"a\": }\n",
                   "model.safetensors.index.json:2:8: not JSON: unexpected token near '}'");
    unmake(&f);
}

/* num_hidden_layers must be the layers the weights hold: fewer would cut the model short
 * without a word, and a count far beyond them is refused at once (at its first missing
 * layer, not after walking a layout of a billion layers). */
static void test_hf_model_refuses_a_layer_count_the_weights_disagree_with(void **state) {
    (void)state;
    fixture f;
    make(&f, false, false);
    lb_hf_model hf;
    lb_err err;
    lb_model_config c = f.cfg;
    c.n_layer = f.cfg.n_layer - 1;
    lb_fixture_write_config(f.dir, &c, "LlamaForCausalLM");
    assert_int_equal(lb_hf_model_open(&hf, f.dir, &err), LB_ERR_USAGE);
    char want[96];
    snprintf(want, sizeof want, "'model.layers.%d.input_layernorm.weight' is of a layer beyond",
             c.n_layer);
    if (strstr(err.msg, want) == NULL) fail_msg("%s", err.msg);
    c.n_layer = 1000000000;
    lb_fixture_write_config(f.dir, &c, "LlamaForCausalLM");
    assert_int_equal(lb_hf_model_open(&hf, f.dir, &err), LB_ERR_USAGE);
    snprintf(want, sizeof want, "no tensor 'model.layers.%d.input_layernorm.weight'",
             f.cfg.n_layer);
    if (strstr(err.msg, want) == NULL) fail_msg("%s", err.msg);
    lb_fixture_write_config(f.dir, &f.cfg, "LlamaForCausalLM");
    assert_int_equal(lb_hf_model_open(&hf, f.dir, &err), LB_OK);
    lb_hf_model_close(&hf);
    unmake(&f);
}

/* A bos id the model has no row for is refused when the directory is opened (every prompt
 * would fail at its turn otherwise), and so is a config.json that is JSON but no object. */
static void test_hf_model_refuses_a_bos_id_outside_the_vocabulary(void **state) {
    (void)state;
    fixture f;
    make(&f, false, false);
    expect_refused(&f, "generation_config.json", "{\"bos_token_id\":320,\"eos_token_id\":311}",
                   "generation_config.json: bos_token_id must be an id below vocab_size 320");
    expect_refused(&f, "generation_config.json", "{\"bos_token_id\":-2}", "bos_token_id");
    expect_refused(&f, "generation_config.json", "{\"bos_token_id\":\"1\"}", "bos_token_id");
    expect_refused(&f, "generation_config.json", "{\"bos_token_id\":[1, 2]}", "bos_token_id");
    /* a list of one, as eos_token_id may be written, is that id */
    char path[600];
    snprintf(path, sizeof path, "%s/generation_config.json", f.dir);
    assert_true(lb_test_write_file(path, "{\"bos_token_id\":[7]}"));
    lb_hf_model hf;
    lb_err err = {{0}};
    if (lb_hf_model_open(&hf, f.dir, &err) != LB_OK) fail_msg("%s", err.msg);
    assert_int_equal(hf.bos_id, 7);
    lb_hf_model_close(&hf);
    unlink(path);
    expect_refused(&f, "config.json", "[1]",
                   "config.json: not a JSON object; a config.json is one");
    unmake(&f);
}

/* The model's name is its directory's, cut to whole characters and made UTF-8: a cut
 * through a character, or a Latin-1 byte, left a name that no JSON result could hold. */
static void test_hf_model_names_the_model_in_whole_utf8_characters(void **state) {
    (void)state;
    fixture f;
    make(&f, false, false);
    static const char *const names[][2] = {
        {"llama-3.1-8b-instruct-abcd\xe4\xb8\xad\xe6\x96\x87", /* 26 bytes, then 3 + 3 */
         "llama-3.1-8b-instruct-abcd\xe4\xb8\xad"},
        {"caf\xe9", "caf?"},
    };
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        char sub[160];
        snprintf(sub, sizeof sub, "%s/%s", f.dir, names[i][0]);
        assert_int_equal(mkdir(sub, 0700), 0);
        lb_fixture_write_dir(sub, &f.cfg, f.m.params, false, false);
        lb_hf_model hf;
        lb_err err;
        assert_int_equal(lb_hf_model_open(&hf, sub, &err), LB_OK);
        assert_string_equal(hf.cfg.name, names[i][1]);
        lb_hf_model_close(&hf);
    }
    unmake(&f);
}

static void test_hf_config_reads_llama31_fields(void **state) {
    (void)state;
    const char *js =
        "{\"architectures\":[\"LlamaForCausalLM\"],\"hidden_size\":4096,\"intermediate_size\":"
        "14336,\"num_hidden_layers\":32,\"num_attention_heads\":32,\"num_key_value_heads\":8,"
        "\"vocab_size\":128256,\"max_position_embeddings\":131072,\"rms_norm_eps\":1e-05,"
        "\"rope_theta\":500000.0,\"rope_scaling\":{\"factor\":8.0,\"low_freq_factor\":1.0,"
        "\"high_freq_factor\":4.0,\"original_max_position_embeddings\":8192,\"rope_type\":"
        "\"llama3\"},\"tie_word_embeddings\":false}";
    lb_model_config got, want;
    lb_err err;
    assert_int_equal(lb_hf_model_config_parse(js, strlen(js), "config.json", &got, &err), LB_OK);
    assert_int_equal(lb_model_config_preset("llama3.1-8b", &want, &err), LB_OK);
    assert_int_equal(got.d_model, want.d_model);
    assert_int_equal(got.d_ff, want.d_ff);
    assert_int_equal(got.n_kv_head, want.n_kv_head);
    assert_int_equal(got.max_seq, want.max_seq);
    assert_true(got.rope_theta == want.rope_theta);
    assert_true(got.rope_scaling.factor == want.rope_scaling.factor);
    assert_int_equal(got.rope_scaling.original_max_pos, 8192);
    assert_int_equal(got.tied_embeddings, 0);
    /* transformers 5's form: rope_theta and the scaling in rope_parameters */
    const char *v5 =
        "{\"architectures\":[\"LlamaForCausalLM\"],\"hidden_size\":256,\"intermediate_size\":"
        "512,\"num_hidden_layers\":2,\"num_attention_heads\":4,\"num_key_value_heads\":2,"
        "\"vocab_size\":320,\"rope_parameters\":{\"rope_theta\":20000.0,\"rope_type\":"
        "\"llama3\",\"factor\":8.0,\"low_freq_factor\":1.0,\"high_freq_factor\":4.0,"
        "\"original_max_position_embeddings\":32}}";
    assert_int_equal(lb_hf_model_config_parse(v5, strlen(v5), "config.json", &got, &err), LB_OK);
    assert_true(got.rope_theta == 20000.0f);
    assert_true(got.rope_scaling.enabled);
    assert_int_equal(got.rope_scaling.original_max_pos, 32);
    const char *v5plain = "{\"architectures\":[\"LlamaForCausalLM\"],\"hidden_size\":256,"
                          "\"intermediate_size\":512,\"num_hidden_layers\":2,"
                          "\"num_attention_heads\":4,\"vocab_size\":320,\"rope_parameters\":"
                          "{\"rope_theta\":30000.0,\"rope_type\":\"default\"}}";
    assert_int_equal(lb_hf_model_config_parse(v5plain, strlen(v5plain), "config.json", &got, &err),
                     LB_OK);
    assert_true(got.rope_theta == 30000.0f);
    assert_false(got.rope_scaling.enabled);
    const char *bad = "{\"architectures\":[\"LlamaForCausalLM\"],\"hidden_size\":4096,"
                      "\"intermediate_size\":1,\"num_hidden_layers\":1,\"num_attention_heads\":"
                      "32,\"vocab_size\":10,\"head_dim\":64}";
    assert_int_equal(lb_hf_model_config_parse(bad, strlen(bad), "c.json", &got, &err),
                     LB_ERR_USAGE);
    assert_non_null(strstr(err.msg, "head_dim 64"));
}

/* config.json read as transformers reads it: a llama3 rope scaling without one of its four
 * fields is refused (factor 8, low 1 and high 4 used to stand in, so Llama 3.2's factor 32
 * left out gave wrong positions), a boolean written as anything else is refused rather than
 * read as false, an activation other than silu is refused, and a scaling of type "default"
 * is none. */
static void test_hf_config_refuses_llama3_scaling_without_its_fields_and_wrong_types(void **state) {
    (void)state;
    static const char head[] =
        "{\"architectures\":[\"LlamaForCausalLM\"],\"hidden_size\":256,\"intermediate_size\":"
        "512,\"num_hidden_layers\":2,\"num_attention_heads\":4,\"vocab_size\":320,";
    static const struct {
        const char *rest, *want; /* want NULL: read */
    } cases[] = {
        {"\"rope_scaling\":{\"rope_type\":\"llama3\",\"low_freq_factor\":1.0,\"high_freq_factor\""
         ":4.0,\"original_max_position_embeddings\":8192}}",
         "c.json: rope_scaling of type llama3 has no \"factor\""},
        {"\"rope_scaling\":{\"rope_type\":\"llama3\",\"factor\":32.0,\"high_freq_factor\":4.0,"
         "\"original_max_position_embeddings\":8192}}",
         "has no \"low_freq_factor\""},
        {"\"rope_parameters\":{\"rope_type\":\"llama3\",\"rope_theta\":5e5,\"factor\":32.0,"
         "\"low_freq_factor\":1.0,\"high_freq_factor\":null,"
         "\"original_max_position_embeddings\":8192}}",
         "rope_parameters of type llama3 has no \"high_freq_factor\""},
        {"\"tie_word_embeddings\":\"true\"}",
         "c.json: \"tie_word_embeddings\" must be true or false"},
        {"\"attention_bias\":1}", "\"attention_bias\" must be true or false"},
        {"\"hidden_act\":\"gelu\"}", "c.json: hidden_act gelu is not supported"},
        {"\"hidden_act\":\"silu\",\"tie_word_embeddings\":true,\"rope_scaling\":"
         "{\"rope_type\":\"default\"}}",
         NULL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char js[1024];
        snprintf(js, sizeof js, "%s%s", head, cases[i].rest);
        lb_model_config got;
        lb_err err = {{0}};
        lb_status st = lb_hf_model_config_parse(js, strlen(js), "c.json", &got, &err);
        if (cases[i].want == NULL) {
            if (st != LB_OK) fail_msg("case %zu: %s", i, err.msg);
            assert_false(got.rope_scaling.enabled);
            assert_int_equal(got.tied_embeddings, 1);
        } else if (st != LB_ERR_USAGE || strstr(err.msg, cases[i].want) == NULL) {
            fail_msg("case %zu: '%s' does not say '%s'", i, err.msg, cases[i].want);
        }
    }
}

/* Added tokens are matched where they stand even when model.vocab holds them too (GPT-2's
 * own file lists <|endoftext|> in both; it used to stay a rank, cut into "<|", "end"...
 * and not special), and only those marked special are special: a decoder that skips special
 * tokens keeps the others (they were all reported special). */
static void
test_hf_tokenizer_added_tokens_match_verbatim_and_keep_their_special_flag(void **state) {
    (void)state;
    char dir[64], path[256];
    lb_test_tmpdir(dir, sizeof dir);
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    lb_fixture_write_tokenizer_json(path);
    json_error_t je;
    json_t *doc = json_load_file(path, 0, &je);
    assert_non_null(doc);
    json_object_set_new(json_object_get(json_object_get(doc, "model"), "vocab"), "<|eot_id|>",
                        json_integer(314));
    json_array_append_new(
        json_object_get(doc, "added_tokens"),
        json_pack("{s:i, s:s, s:b}", "id", 315, "content", "<think>", "special", 0));
    char *text = json_dumps(doc, JSON_COMPACT);
    json_decref(doc);
    lb_tokenizer *tok = NULL;
    lb_err err = {{0}};
    if (lb_hf_tokenizer_parse(&tok, text, strlen(text), "t.json", &err) != LB_OK)
        fail_msg("%s", err.msg);
    free(text);
    const char *s = "hello<|eot_id|><think>hello";
    uint32_t *ids = NULL;
    size_t n = 0;
    assert_int_equal(lb_tokenizer_encode(tok, s, strlen(s), &ids, &n, &err), LB_OK);
    const uint32_t want[] = {259, 314, 315, 259};
    assert_int_equal(n, 4);
    for (size_t k = 0; k < n; k++)
        if (ids[k] != want[k]) fail_msg("id %zu is %u, expected %u", k, ids[k], want[k]);
    free(ids);
    assert_true(lb_tokenizer_is_special(tok, 314));
    assert_true(lb_tokenizer_is_special(tok, 310));
    assert_false(lb_tokenizer_is_special(tok, 315));
    assert_false(lb_tokenizer_is_special(tok, 259));
    lb_tokenizer_free(tok);
    lb_test_rmtree(dir);
}

/* An added token that absorbs the whitespace beside it (lstrip, rstrip) or matches whole
 * words only (single_word) loads (it was refused): with lstrip, "hello <think>" is hello's
 * ids and <think> alone, the space taken by the token as Hugging Face takes it; without it
 * the space stays a token of its own. test_tokenizer.c checks the rules id by id. */
static void test_hf_tokenizer_reads_added_tokens_with_strip_or_word_flags(void **state) {
    (void)state;
    char dir[64], path[256];
    lb_test_tmpdir(dir, sizeof dir);
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    lb_fixture_write_tokenizer_json(path);
    json_error_t je;
    json_t *doc = json_load_file(path, 0, &je);
    assert_non_null(doc);
    json_t *added = json_object_get(doc, "added_tokens");
    size_t k = json_array_size(added);
    static const char *const flags[] = {"lstrip", "rstrip", "single_word", NULL};
    size_t n_with[4] = {0};
    for (size_t f = 0; f < 4; f++) {
        json_t *t = json_pack("{s:i, s:s, s:b, s:b, s:b, s:b}", "id", 315, "content", "<think>",
                              "special", 0, "lstrip", 0, "rstrip", 0, "single_word", 0);
        if (flags[f] != NULL) json_object_set_new(t, flags[f], json_true());
        if (json_array_size(added) == k)
            json_array_append_new(added, t);
        else
            json_array_set_new(added, k, t);
        char *text = json_dumps(doc, JSON_COMPACT);
        lb_tokenizer *tok = NULL;
        lb_err err = {{0}};
        lb_status st = lb_hf_tokenizer_parse(&tok, text, strlen(text), "t.json", &err);
        free(text);
        if (st != LB_OK) fail_msg("%s: %s", flags[f] ? flags[f] : "no flag", err.msg);
        uint32_t *ids = NULL;
        assert_int_equal(lb_tokenizer_encode(tok, "hello <think>", 13, &ids, &n_with[f], &err),
                         LB_OK);
        assert_int_equal(ids[n_with[f] - 1], 315);
        free(ids);
        lb_tokenizer_free(tok);
    }
    assert_int_equal(n_with[0] + 1, n_with[3]); /* lstrip took the space */
    assert_int_equal(n_with[1], n_with[3]);
    assert_int_equal(n_with[2], n_with[3]); /* after a space: a word of its own */
    json_decref(doc);
    lb_test_rmtree(dir);
}

/* A pre-tokenizer step or normalizer that changes how the text is cut (StarCoder's Digits
 * beside ByteLevel, add_prefix_space, NFC, a second expression) is refused naming it: such
 * steps used to be skipped, so the ids differed from Hugging Face's without a word. A
 * ByteLevel that does not say use_regex uses it (tokenizers' default), and an empty
 * normalizer Sequence is none. */
static void test_hf_tokenizer_refuses_steps_it_cannot_follow(void **state) {
    (void)state;
    char dir[64], path[256];
    lb_test_tmpdir(dir, sizeof dir);
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    lb_fixture_write_tokenizer_json(path);
    json_error_t je;
    json_t *doc = json_load_file(path, 0, &je);
    assert_non_null(doc);
    json_t *split = json_deep_copy(
        json_array_get(json_object_get(json_object_get(doc, "pre_tokenizer"), "pretokenizers"), 0));
    static const struct {
        const char *pre, *norm, *want; /* pre "split": the fixture's Llama 3 Split */
    } cases[] = {
        {"{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":\"Digits\","
         "\"individual_digits\":true},{\"type\":\"ByteLevel\",\"add_prefix_space\":false,"
         "\"use_regex\":true}]}",
         "null", "t.json: pre_tokenizer step Digits is not supported"},
        {"{\"type\":\"ByteLevel\",\"add_prefix_space\":true,\"use_regex\":true}", "null",
         "step ByteLevel with add_prefix_space"},
        {"{\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"use_regex\":true}",
         "{\"type\":\"NFC\"}", "t.json: normalizer NFC is not supported"},
        {"split", "null", "splits with two expressions in turn"},
        {"{\"type\":\"ByteLevel\",\"add_prefix_space\":false}",
         "{\"type\":\"Sequence\",\"normalizers\":[]}", NULL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        json_t *pre;
        if (strcmp(cases[i].pre, "split") == 0)
            pre = json_pack("{s:s, s:[O, {s:s, s:b, s:b}]}", "type", "Sequence", "pretokenizers",
                            split, "type", "ByteLevel", "add_prefix_space", 0, "use_regex", 1);
        else
            pre = json_loads(cases[i].pre, 0, &je);
        json_object_set_new(doc, "pre_tokenizer", pre);
        json_object_set_new(doc, "normalizer", json_loads(cases[i].norm, JSON_DECODE_ANY, &je));
        char *text = json_dumps(doc, JSON_COMPACT);
        lb_tokenizer *tok = NULL;
        lb_err err = {{0}};
        lb_status st = lb_hf_tokenizer_parse(&tok, text, strlen(text), "t.json", &err);
        free(text);
        if (cases[i].want == NULL) {
            if (st != LB_OK) fail_msg("case %zu: %s", i, err.msg);
            assert_int_equal(lb_tokenizer_get_info(tok)->pattern, LB_TOK_PATTERN_GPT2);
            lb_tokenizer_free(tok);
        } else if (st != LB_ERR_USAGE || strstr(err.msg, cases[i].want) == NULL) {
            fail_msg("case %zu: '%s' does not say '%s'", i, err.msg, cases[i].want);
        }
    }
    json_decref(split);
    json_decref(doc);
    lb_test_rmtree(dir);
}

static void test_hf_tokenizer_json_encodes_as_the_ranks_file(void **state) {
    (void)state;
    char dir[64], path[256];
    lb_test_tmpdir(dir, sizeof dir);
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    lb_fixture_write_tokenizer_json(path);
    lb_tokenizer *tj = NULL, *tr = NULL;
    lb_err err;
    assert_int_equal(lb_hf_tokenizer_load(&tj, path, NULL, &err), LB_OK);
    /* the same vocabulary as a tiktoken ranks file */
    static const char b64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    char *ranks = malloc(65536);
    size_t o = 0;
    for (int id = 0; id < 256 + LB_FIXTURE_N_MERGES; id++) {
        uint8_t b[32];
        int n = 0;
        if (id < 256) {
            b[n++] = (uint8_t)id;
        } else {
            char s[64];
            snprintf(s, sizeof s, "%s%s", lb_fixture_merges[id - 256][0],
                     lb_fixture_merges[id - 256][1]);
            for (const char *p = s; *p; p++)
                if ((unsigned char)*p == 0xc4 && (unsigned char)p[1] == 0xa0) { /* Ġ */
                    b[n++] = ' ';
                    p++;
                } else {
                    b[n++] = (uint8_t)*p;
                }
        }
        for (int i = 0; i < n; i += 3) {
            uint32_t v = (uint32_t)b[i] << 16 | (i + 1 < n ? (uint32_t)b[i + 1] << 8 : 0) |
                         (i + 2 < n ? b[i + 2] : 0);
            ranks[o++] = b64[v >> 18];
            ranks[o++] = b64[(v >> 12) & 63];
            ranks[o++] = i + 1 < n ? b64[(v >> 6) & 63] : '=';
            ranks[o++] = i + 2 < n ? b64[v & 63] : '=';
        }
        o += (size_t)sprintf(ranks + o, " %d\n", id);
    }
    lb_tokenizer_params tp = lb_tokenizer_default_params();
    tp.pattern = LB_TOK_PATTERN_LLAMA3;
    tp.special = LB_TOK_SPECIAL_NONE;
    assert_int_equal(lb_tokenizer_parse(&tr, ranks, o, "ranks", &tp, &err), LB_OK);
    const char *texts[] = {"hello world", "Hello, World! 12345 hello\n\nworld  the", "héllo wörld",
                           "ll ll he"};
    for (size_t k = 0; k < sizeof texts / sizeof texts[0]; k++) {
        uint32_t *a = NULL, *b = NULL;
        size_t na = 0, nb = 0;
        assert_int_equal(lb_tokenizer_encode(tj, texts[k], strlen(texts[k]), &a, &na, &err), LB_OK);
        assert_int_equal(lb_tokenizer_encode(tr, texts[k], strlen(texts[k]), &b, &nb, &err), LB_OK);
        assert_int_equal(na, nb);
        for (size_t i = 0; i < na; i++)
            assert_int_equal(a[i], b[i]);
        free(a);
        free(b);
    }
    uint32_t *ids = NULL;
    size_t n = 0;
    const char *s = "<|begin_of_text|>hello world<|eot_id|>";
    assert_int_equal(lb_tokenizer_encode(tj, s, strlen(s), &ids, &n, &err), LB_OK);
    assert_int_equal(n, 4);
    assert_int_equal(ids[0], 310);
    assert_int_equal(ids[1], 259); /* hello */
    assert_int_equal(ids[2], 264); /* " world" */
    assert_int_equal(ids[3], 314);
    char *text = NULL;
    size_t len = 0;
    assert_int_equal(lb_tokenizer_decode(tj, ids, n, &text, &len, &err), LB_OK);
    assert_string_equal(text, s);
    free(text);
    free(ids);
    free(ranks);
    lb_tokenizer_free(tj);
    lb_tokenizer_free(tr);
    /* merges out of id order are refused */
    const char *bad = "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0,\"b\":1,\"ab\":3,\"ba\":2},"
                      "\"merges\":[\"a b\",\"b a\"]},\"pre_tokenizer\":{\"type\":\"ByteLevel\","
                      "\"use_regex\":true}}";
    assert_int_equal(lb_hf_tokenizer_parse(&tj, bad, strlen(bad), "t.json", &err), LB_ERR_USAGE);
    assert_non_null(strstr(err.msg, "merges[1]"));
    assert_int_equal(lb_hf_tokenizer_parse(&tj, "{", 1, "t.json", &err), LB_ERR_USAGE);
    assert_non_null(strstr(err.msg, "t.json"));
    lb_test_rmtree(dir);
}

static void test_chat_format_is_llama3s(void **state) {
    (void)state;
    lb_chat_message m[2] = {{"system", "Be brief.", 9}, {"user", "Hi", 2}};
    char *text = NULL;
    size_t len = 0;
    lb_err err;
    assert_int_equal(lb_hf_tokenizer_chat_llama3(m, 2, &text, &len, &err), LB_OK);
    assert_string_equal(text, "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n"
                              "Be brief.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\n"
                              "Hi<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n");
    assert_int_equal(len, strlen(text));
    free(text);
}

static void test_chat_format_trims_each_content_as_the_template_does(void **state) {
    (void)state;
    /* ASCII, U+00A0, U+3000, U+2028 and \x1c around the text, whitespace inside kept,
     * U+00E9 (a 2-byte character that is no whitespace) at the end kept, and a message
     * of whitespace only becomes empty */
    const char a[] = " \t\n\xc2\xa0\xe3\x80\x80"
                     "Be  brief.\r\n\xe2\x80\xa8\x1c";
    const char b[] = "caf\xc3\xa9 \n";
    lb_chat_message m[3] = {
        {"system", a, sizeof a - 1}, {"user", b, sizeof b - 1}, {"user", " \n\xc2\x85", 4}};
    char *text = NULL;
    size_t len = 0;
    lb_err err;
    assert_int_equal(lb_hf_tokenizer_chat_llama3(m, 3, &text, &len, &err), LB_OK);
    assert_string_equal(text, "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n"
                              "Be  brief.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\n"
                              "caf\xc3\xa9<|eot_id|><|start_header_id|>user<|end_header_id|>\n\n"
                              "<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n");
    assert_int_equal(len, strlen(text));
    free(text);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hf_model_reads_a_single_file_in_fp32),
        cmocka_unit_test(test_hf_model_reads_bf16_shards_through_the_index),
        cmocka_unit_test(test_hf_model_refuses_bad_directories_naming_the_file),
        cmocka_unit_test(test_hf_model_refuses_wrong_tensors_naming_them),
        cmocka_unit_test(test_hf_model_reads_an_index_of_more_than_1024_shard_files),
        cmocka_unit_test(test_hf_model_refuses_an_index_that_is_not_json),
        cmocka_unit_test(test_hf_model_refuses_a_tensor_in_two_shards_or_not_where_the_index_says),
        cmocka_unit_test(test_hf_model_refuses_a_layer_count_the_weights_disagree_with),
        cmocka_unit_test(test_hf_model_refuses_a_bos_id_outside_the_vocabulary),
        cmocka_unit_test(test_hf_model_names_the_model_in_whole_utf8_characters),
        cmocka_unit_test(test_hf_config_reads_llama31_fields),
        cmocka_unit_test(test_hf_config_refuses_llama3_scaling_without_its_fields_and_wrong_types),
        cmocka_unit_test(test_hf_tokenizer_added_tokens_match_verbatim_and_keep_their_special_flag),
        cmocka_unit_test(test_hf_tokenizer_refuses_steps_it_cannot_follow),
        cmocka_unit_test(test_hf_tokenizer_reads_added_tokens_with_strip_or_word_flags),
        cmocka_unit_test(test_hf_tokenizer_json_encodes_as_the_ranks_file),
        cmocka_unit_test(test_chat_format_is_llama3s),
        cmocka_unit_test(test_chat_format_trims_each_content_as_the_template_does),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
