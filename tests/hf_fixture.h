/* hf_fixture.h: writes tiny Hugging Face model directories for the tests: config.json,
 * generation_config.json, safetensors (one file or two shards with an index) under the
 * HF tensor names, and a byte-level BPE tokenizer.json, from a CPU reference model's
 * weights. Header-only, every function static. */
#ifndef LB_TEST_HF_FIXTURE_H
#define LB_TEST_HF_FIXTURE_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/config.h"
#include "model/hf_model.h"

/* The fixture model: Llama with GQA and llama3 RoPE scaling, vocabulary 320 (256 bytes,
 * the merges below, special tokens at 310..314). */
static inline lb_model_config lb_fixture_config(void) {
    lb_model_config c;
    lb_err err;
    lb_model_config_preset("llama-tiny", &c, &err);
    c.vocab_size = 320;
    snprintf(c.name, sizeof c.name, "hf-tiny");
    return c;
}

/* Merges in id order (256, 257, ...), in GPT-2's alphabet (Ġ = space). */
static const char *const lb_fixture_merges[][2] = {
    {"h", "e"}, {"l", "l"},   {"he", "ll"}, {"hell", "o"},  {"Ġ", "w"},
    {"o", "r"}, {"Ġw", "or"}, {"l", "d"},   {"Ġwor", "ld"}, {"Ġ", "t"},
};
#define LB_FIXTURE_N_MERGES ((int)(sizeof lb_fixture_merges / sizeof lb_fixture_merges[0]))
static const char *const lb_fixture_specials[] = {"<|begin_of_text|>", "<|end_of_text|>",
                                                  "<|start_header_id|>", "<|end_header_id|>",
                                                  "<|eot_id|>"};
#define LB_FIXTURE_FIRST_SPECIAL 310

/* GPT-2's byte-to-unicode alphabet: the code point that stands for byte b. */
static inline uint32_t lb_fixture_byte_cp(int b) {
    bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174);
    if (printable) return (uint32_t)b;
    int k = 0;
    for (int x = 0; x < b; x++)
        if (!((x >= 33 && x <= 126) || (x >= 161 && x <= 172) || (x >= 174))) k++;
    return 256u + (uint32_t)k;
}

static inline void lb_fixture_put_cp(FILE *f, uint32_t cp) {
    if (cp == '"' || cp == '\\')
        fprintf(f, "\\%c", (char)cp);
    else if (cp < 0x80)
        fputc((int)cp, f);
    else
        fprintf(f, "%c%c", (char)(0xc0 | (cp >> 6)), (char)(0x80 | (cp & 0x3f)));
}

/* tokenizer.json: byte b has id b; merge k makes id 256 + k. */
static inline void lb_fixture_write_tokenizer_json(const char *path) {
    FILE *f = fopen(path, "w");
    fprintf(f, "{\"version\":\"1.0\",\"added_tokens\":[");
    for (int i = 0; i < 5; i++)
        fprintf(f, "%s{\"id\":%d,\"content\":\"%s\",\"special\":true}", i ? "," : "",
                LB_FIXTURE_FIRST_SPECIAL + i, lb_fixture_specials[i]);
    fprintf(f, "],\"normalizer\":null,\"pre_tokenizer\":{\"type\":\"Sequence\",\"pretokenizers\":"
               "[{\"type\":\"Split\",\"pattern\":{\"Regex\":\"");
    const char *re = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
                     "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
    for (const char *p = re; *p; p++)
        lb_fixture_put_cp(f, (unsigned char)*p);
    fprintf(f, "\"},\"behavior\":\"Isolated\",\"invert\":false},{\"type\":\"ByteLevel\","
               "\"add_prefix_space\":false,\"trim_offsets\":true,\"use_regex\":false}]},"
               "\"decoder\":{\"type\":\"ByteLevel\"},\"model\":{\"type\":\"BPE\",\"byte_fallback\":"
               "false,\"vocab\":{");
    for (int b = 0; b < 256; b++) {
        fprintf(f, "%s\"", b ? "," : "");
        lb_fixture_put_cp(f, lb_fixture_byte_cp(b));
        fprintf(f, "\":%d", b);
    }
    for (int k = 0; k < LB_FIXTURE_N_MERGES; k++)
        fprintf(f, ",\"%s%s\":%d", lb_fixture_merges[k][0], lb_fixture_merges[k][1], 256 + k);
    fprintf(f, "},\"merges\":[");
    for (int k = 0; k < LB_FIXTURE_N_MERGES; k++)
        fprintf(f, "%s\"%s %s\"", k ? "," : "", lb_fixture_merges[k][0], lb_fixture_merges[k][1]);
    fprintf(f, "]}}");
    fclose(f);
}

static inline void lb_fixture_write_config(const char *dir, const lb_model_config *c,
                                           const char *arch) {
    char path[512];
    snprintf(path, sizeof path, "%s/config.json", dir);
    FILE *f = fopen(path, "w");
    fprintf(f,
            "{\"architectures\":[\"%s\"],\"vocab_size\":%d,\"hidden_size\":%d,"
            "\"intermediate_size\":%d,\"num_hidden_layers\":%d,\"num_attention_heads\":%d,"
            "\"num_key_value_heads\":%d,\"max_position_embeddings\":%d,\"rms_norm_eps\":%g,"
            "\"rope_theta\":%g,\"rope_scaling\":{\"rope_type\":\"llama3\",\"factor\":%g,"
            "\"low_freq_factor\":%g,\"high_freq_factor\":%g,"
            "\"original_max_position_embeddings\":%d},\"tie_word_embeddings\":%s,"
            "\"attention_bias\":false,\"mlp_bias\":false,\"bos_token_id\":310,"
            "\"eos_token_id\":311,\"torch_dtype\":\"float32\"}",
            arch, c->vocab_size, c->d_model, c->d_ff, c->n_layer, c->n_head, c->n_kv_head,
            c->max_seq, (double)c->norm_eps, (double)c->rope_theta, (double)c->rope_scaling.factor,
            (double)c->rope_scaling.low_freq_factor, (double)c->rope_scaling.high_freq_factor,
            c->rope_scaling.original_max_pos, c->tied_embeddings ? "true" : "false");
    fclose(f);
    snprintf(path, sizeof path, "%s/generation_config.json", dir);
    f = fopen(path, "w");
    fprintf(f, "{\"bos_token_id\":310,\"eos_token_id\":[311,314]}");
    fclose(f);
}

typedef struct {
    char name[96];
    int64_t rows, cols; /* cols 0: 1-D */
    const float *data;
} lb_fixture_tensor;

/* The HF tensors of params (config.h's layout), in file order. */
static inline int lb_fixture_tensors(const lb_model_config *c, const float *params,
                                     lb_fixture_tensor *out) {
    lb_param_offsets o;
    lb_model_param_offsets(c, &o);
    const int hd = lb_model_head_dim(c), C = c->d_model, F = c->d_ff;
    int n = 0;
    out[n++] = (lb_fixture_tensor){"model.embed_tokens.weight", c->vocab_size, C, params + o.wte};
    for (int l = 0; l < c->n_layer; l++) {
        const float *L = params + o.layers + (int64_t)l * o.layer_numel;
        const float *qkv = L + o.layer.qkv_w, *mi = L + o.layer.mlp_in_w;
        struct {
            const char *name;
            int64_t rows, cols;
            const float *d;
        } t[] = {
            {"input_layernorm", C, 0, L + o.layer.norm1_w},
            {"self_attn.q_proj", (int64_t)c->n_head * hd, C, qkv},
            {"self_attn.k_proj", (int64_t)c->n_kv_head * hd, C, qkv + (int64_t)c->n_head * hd * C},
            {"self_attn.v_proj", (int64_t)c->n_kv_head * hd, C,
             qkv + (int64_t)(c->n_head + c->n_kv_head) * hd * C},
            {"self_attn.o_proj", C, C, L + o.layer.attn_out_w},
            {"post_attention_layernorm", C, 0, L + o.layer.norm2_w},
            {"mlp.gate_proj", F, C, mi},
            {"mlp.up_proj", F, C, mi + (int64_t)F * C},
            {"mlp.down_proj", C, F, L + o.layer.mlp_out_w},
        };
        for (size_t k = 0; k < sizeof t / sizeof t[0]; k++) {
            snprintf(out[n].name, sizeof out[n].name, "model.layers.%d.%s.weight", l, t[k].name);
            out[n].rows = t[k].rows;
            out[n].cols = t[k].cols;
            out[n++].data = t[k].d;
        }
    }
    out[n++] = (lb_fixture_tensor){"model.norm.weight", C, 0, params + o.normf_w};
    if (!c->tied_embeddings)
        out[n++] = (lb_fixture_tensor){"lm_head.weight", c->vocab_size, C, params + o.lm_head};
    return n;
}

/* One safetensors file of tensors t[0..n) as F32 or BF16. */
static inline void lb_fixture_write_safetensors(const char *path, const lb_fixture_tensor *t, int n,
                                                bool bf16) {
    size_t es = bf16 ? 2 : 4;
    char *hdr = malloc(65536);
    size_t h = (size_t)sprintf(hdr, "{");
    int64_t off = 0;
    for (int i = 0; i < n; i++) {
        int64_t numel = t[i].rows * (t[i].cols ? t[i].cols : 1);
        char shape[64];
        if (t[i].cols)
            sprintf(shape, "[%lld,%lld]", (long long)t[i].rows, (long long)t[i].cols);
        else
            sprintf(shape, "[%lld]", (long long)t[i].rows);
        h += (size_t)sprintf(hdr + h,
                             "%s\"%s\":{\"dtype\":\"%s\",\"shape\":%s,\"data_offsets\":"
                             "[%lld,%lld]}",
                             i ? "," : "", t[i].name, bf16 ? "BF16" : "F32", shape, (long long)off,
                             (long long)(off + numel * (int64_t)es));
        off += numel * (int64_t)es;
    }
    hdr[h++] = '}';
    while (h % 8)
        hdr[h++] = ' ';
    FILE *f = fopen(path, "wb");
    uint64_t hl = h;
    fwrite(&hl, 8, 1, f);
    fwrite(hdr, 1, h, f);
    for (int i = 0; i < n; i++) {
        int64_t numel = t[i].rows * (t[i].cols ? t[i].cols : 1);
        for (int64_t k = 0; k < numel; k++) {
            if (bf16) {
                uint16_t v = lb_hf_model_f32_to_bf16(t[i].data[k]);
                fwrite(&v, 2, 1, f);
            } else {
                fwrite(&t[i].data[k], 4, 1, f);
            }
        }
    }
    fclose(f);
    free(hdr);
}

/* A whole directory: config, generation config, tokenizer.json, weights (two shards and
 * an index when sharded). */
static inline void lb_fixture_write_dir(const char *dir, const lb_model_config *c,
                                        const float *params, bool bf16, bool sharded) {
    char path[512];
    lb_fixture_write_config(dir, c, "LlamaForCausalLM");
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    lb_fixture_write_tokenizer_json(path);
    lb_fixture_tensor t[64];
    int n = lb_fixture_tensors(c, params, t);
    if (!sharded) {
        snprintf(path, sizeof path, "%s/model.safetensors", dir);
        lb_fixture_write_safetensors(path, t, n, bf16);
        return;
    }
    int half = n / 2;
    snprintf(path, sizeof path, "%s/model-00001-of-00002.safetensors", dir);
    lb_fixture_write_safetensors(path, t, half, bf16);
    snprintf(path, sizeof path, "%s/model-00002-of-00002.safetensors", dir);
    lb_fixture_write_safetensors(path, t + half, n - half, bf16);
    snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
    FILE *f = fopen(path, "w");
    fprintf(f, "{\"metadata\":{},\"weight_map\":{");
    for (int i = 0; i < n; i++)
        fprintf(f, "%s\"%s\":\"model-0000%d-of-00002.safetensors\"", i ? "," : "", t[i].name,
                i < half ? 1 : 2);
    fprintf(f, "}}");
    fclose(f);
}

#endif
