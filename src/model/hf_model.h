/* hf_model.h: a Hugging Face model directory (Llama and Mistral architectures) read into
 * model/config.h's terms.
 *
 * A directory holds config.json, the weights as one model.safetensors or as shards listed
 * by model.safetensors.index.json ("weight_map": tensor name -> shard file), optionally
 * generation_config.json (eos and bos ids), and optionally a tokenizer: tokenizer.json,
 * else the tiktoken ranks file original/tokenizer.model (what generating text needs;
 * training on token ids does not). Opening reads config.json into an
 * lb_model_config (fields of the wrong type refused, not defaulted; a llama3 rope scaling
 * needs all four of its fields, as transformers does), maps every shard
 * (model/safetensors.h; each tensor in the shard the index names and in no other) and
 * checks every tensor the configuration needs, by name, shape and dtype (bf16, fp16 or
 * fp32, one dtype for all),
 * and that the weights hold no layer beyond num_hidden_layers, before any weight is
 * copied, so a bad directory is refused with one sentence naming the file and the tensor.
 * The eos and bos ids must lie below vocab_size. Weights stay in the mappings until read.
 *
 * HF names map onto the layout of config.h: model.embed_tokens.weight -> wte;
 * model.layers.L.input_layernorm.weight -> h.L.norm1.w; q_proj, k_proj, v_proj stacked
 * row-wise -> h.L.qkv.w; o_proj -> h.L.attn_out.w; post_attention_layernorm -> h.L.norm2.w;
 * gate_proj then up_proj -> h.L.mlp_in.w; down_proj -> h.L.mlp_out.w; model.norm.weight ->
 * normf.w; lm_head.weight -> lm_head (absent when tie_word_embeddings). HF checkpoints
 * store q and k in the "rotate half" order that model/ref.h's RoPE uses.
 *
 * Not here: other architectures, biases (attention_bias and mlp_bias must be false),
 * sliding windows, quantized weights, head_dim other than hidden_size / heads. */
#ifndef LB_MODEL_HF_MODEL_H
#define LB_MODEL_HF_MODEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/status.h"
#include "gpu/dtype.h"
#include "model/config.h"
#include "model/safetensors.h"

#define LB_HF_MAX_EOS 8

typedef struct {
    lb_model_config cfg; /* from config.json; name = the directory's last component */
    char dir[512];
    lb_safetensors *shards; /* [n_shards], owned */
    size_t n_shards;
    lb_st_dtype dtype; /* of every weight: LB_ST_BF16, LB_ST_F16 or LB_ST_F32 */
    int32_t eos_ids[LB_HF_MAX_EOS];
    int n_eos;
    int32_t bos_id;           /* -1 when none is given */
    char tokenizer_path[600]; /* tokenizer.json or original/tokenizer.model; "" when none */
    bool tokenizer_json;      /* true: tokenizer_path is a tokenizer.json */
} lb_hf_model;

/* Reads and checks the directory (above). On failure m is left closed and err names the
 * file (and the tensor or field). Bad input is LB_ERR_USAGE. */
lb_status lb_hf_model_open(lb_hf_model *m, const char *dir, lb_err *err);
/* Unmaps everything; m may be zeroed or already closed. */
void lb_hf_model_close(lb_hf_model *m);

/* Copies the layout tensor t (lb_model_param_layout of m->cfg) into dst as dt (fp32, fp16 or
 * bf16; converted with round-to-nearest-even where it narrows), t->numel elements. */
void lb_hf_model_read(const lb_hf_model *m, const lb_param_tensor *t, lb_gpu_dtype dt, void *dst);

/* Parses config.json's text (name labels errors) into cfg. Exposed for tests. */
lb_status lb_hf_model_config_parse(const char *json, size_t len, const char *name,
                                   lb_model_config *cfg, lb_err *err);

/* Element conversions shared with the engine. */
float lb_hf_model_bf16_to_f32(uint16_t h);
uint16_t lb_hf_model_f32_to_bf16(float f);
float lb_hf_model_f16_to_f32(uint16_t h);
uint16_t lb_hf_model_f32_to_f16(float f);

#endif
