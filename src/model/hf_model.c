/* hf_model.c: config.json, the shards and their checks (hf_model.h).
 *
 * Every layout tensor is made of one to three HF tensors stacked by rows (qkv: q, k, v;
 * mlp_in: gate, up), so one table walk (parts_of) serves both the check at open and the
 * copy at read. The index file's weight_map must tell where each tensor lives: the shard it
 * names must hold it, and no tensor may be in two shards, so a lookup by name across the
 * shards finds the one copy; its shape and dtype are then checked against the configuration. */
#include "model/hf_model.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/file.h"
#include "core/utf8text.h"

#define MAX_PARTS 3

typedef struct {
    char name[96];
    int64_t rows;
} part;

/* The HF tensors that make layout tensor t, in row order. */
static int parts_of(const lb_model_config *cfg, const lb_param_tensor *t, part *p) {
    const int hd = lb_model_head_dim(cfg);
    const char *s = t->name;
    if (t->layer < 0) {
        if (strcmp(s, "wte") == 0)
            snprintf(p[0].name, sizeof p[0].name, "model.embed_tokens.weight");
        else if (strcmp(s, "normf.w") == 0)
            snprintf(p[0].name, sizeof p[0].name, "model.norm.weight");
        else
            snprintf(p[0].name, sizeof p[0].name, "lm_head.weight");
        p[0].rows = t->shape[0];
        return 1;
    }
    const char *suffix = strchr(s + 2, '.') + 1;
    char pre[48];
    snprintf(pre, sizeof pre, "model.layers.%d.", t->layer);
    static const struct {
        const char *ours, *hf[MAX_PARTS];
    } map[] = {
        {"norm1.w", {"input_layernorm"}},
        {"qkv.w", {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"}},
        {"attn_out.w", {"self_attn.o_proj"}},
        {"norm2.w", {"post_attention_layernorm"}},
        {"mlp_in.w", {"mlp.gate_proj", "mlp.up_proj"}},
        {"mlp_out.w", {"mlp.down_proj"}},
    };
    for (size_t i = 0; i < sizeof map / sizeof map[0]; i++) {
        if (strcmp(suffix, map[i].ours) != 0) continue;
        int n = 0;
        for (; n < MAX_PARTS && map[i].hf[n] != NULL; n++)
            snprintf(p[n].name, sizeof p[n].name, "%s%s.weight", pre, map[i].hf[n]);
        if (n == 3) {
            p[0].rows = (int64_t)cfg->n_head * hd;
            p[1].rows = p[2].rows = (int64_t)cfg->n_kv_head * hd;
        } else if (n == 2) {
            p[0].rows = p[1].rows = cfg->d_ff;
        } else {
            p[0].rows = t->shape[0];
        }
        return n;
    }
    return 0; /* a tensor this loader does not know (biases): refused by the config check */
}

/* ---- conversions ---- */

float lb_hf_model_bf16_to_f32(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

uint16_t lb_hf_model_f32_to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if (isnan(f)) return (uint16_t)((u >> 16) | 0x40);
    u += 0x7fff + ((u >> 16) & 1);
    return (uint16_t)(u >> 16);
}

float lb_hf_model_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16, e = (h >> 10) & 0x1f, man = h & 0x3ff;
    float v;
    if (e == 0)
        v = ldexpf((float)man, -24);
    else if (e == 31)
        v = man ? NAN : INFINITY;
    else
        v = ldexpf((float)(man | 0x400), (int)e - 25);
    uint32_t u;
    memcpy(&u, &v, 4);
    u |= sign;
    memcpy(&v, &u, 4);
    return v;
}

uint16_t lb_hf_model_f32_to_f16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000);
    float a = fabsf(f);
    if (isnan(f)) return sign | 0x7e00;
    if (a >= 65520.0f) return sign | 0x7c00;
    if (a < 6.103515625e-05f) /* subnormal: multiples of 2^-24, rounded to nearest even */
        return sign | (uint16_t)nearbyintf(a * 16777216.0f);
    int e;
    float m = frexpf(a, &e);                          /* a = m 2^e, m in [0.5, 1) */
    uint32_t man = (uint32_t)nearbyintf(m * 2048.0f); /* 11 significant bits */
    if (man == 2048) {
        man = 1024;
        e++;
    }
    return sign | (uint16_t)((uint32_t)(e + 14) << 10 | (man & 0x3ff));
}

/* ---- config.json ---- */

static lb_status get_int(json_t *root, const char *key, const char *name, bool required, int dflt,
                         int *out, lb_err *err) {
    json_t *v = json_object_get(root, key);
    if (v == NULL || json_is_null(v)) {
        if (required)
            return lb_fail(err, LB_ERR_USAGE, "%s: no \"%s\"; a Llama config.json has one", name,
                           key);
        *out = dflt;
        return LB_OK;
    }
    if (!json_is_integer(v) || json_integer_value(v) < 1 || json_integer_value(v) > (1 << 30))
        return lb_fail(err, LB_ERR_USAGE, "%s: \"%s\" must be a positive integer", name, key);
    *out = (int)json_integer_value(v);
    return LB_OK;
}

static lb_status get_num(json_t *root, const char *key, const char *name, double dflt, double *out,
                         lb_err *err) {
    json_t *v = json_object_get(root, key);
    if (v == NULL || json_is_null(v)) {
        *out = dflt;
        return LB_OK;
    }
    if (!json_is_number(v) || !(json_number_value(v) > 0))
        return lb_fail(err, LB_ERR_USAGE, "%s: \"%s\" must be a positive number", name, key);
    *out = json_number_value(v);
    return LB_OK;
}

/* A true/false field, false when absent or null; any other value is refused, not read as
 * false. */
static lb_status get_bool(json_t *root, const char *key, const char *name, bool *out, lb_err *err) {
    json_t *v = json_object_get(root, key);
    if (v != NULL && !json_is_null(v) && !json_is_boolean(v))
        return lb_fail(err, LB_ERR_USAGE, "%s: \"%s\" must be true or false", name, key);
    *out = json_is_true(v);
    return LB_OK;
}

lb_status lb_hf_model_config_parse(const char *text, size_t len, const char *name,
                                   lb_model_config *cfg, lb_err *err) {
    json_error_t je;
    json_t *root = json_loadb(text, len, 0, &je);
    if (root == NULL)
        return lb_fail(err, LB_ERR_USAGE, "%s:%d: not JSON: %s", name, je.line, je.text);
    if (!json_is_object(root)) {
        json_decref(root);
        return lb_fail(err, LB_ERR_USAGE, "%s: not a JSON object; a config.json is one", name);
    }
    memset(cfg, 0, sizeof *cfg);
    cfg->family = LB_FAMILY_LLAMA;
    lb_status st = LB_OK;
    json_t *arch = json_array_get(json_object_get(root, "architectures"), 0);
    const char *a = json_string_value(arch);
    if (a == NULL || (strcmp(a, "LlamaForCausalLM") != 0 && strcmp(a, "MistralForCausalLM") != 0))
        st = lb_fail(err, LB_ERR_USAGE,
                     "%s: architecture \"%s\" is not supported; LlamaForCausalLM or "
                     "MistralForCausalLM is",
                     name, a ? a : "(none)");
    int hd = 0;
    double eps = 0, theta = 0;
    if (st == LB_OK) st = get_int(root, "vocab_size", name, true, 0, &cfg->vocab_size, err);
    if (st == LB_OK) st = get_int(root, "hidden_size", name, true, 0, &cfg->d_model, err);
    if (st == LB_OK) st = get_int(root, "intermediate_size", name, true, 0, &cfg->d_ff, err);
    if (st == LB_OK) st = get_int(root, "num_hidden_layers", name, true, 0, &cfg->n_layer, err);
    if (st == LB_OK) st = get_int(root, "num_attention_heads", name, true, 0, &cfg->n_head, err);
    if (st == LB_OK)
        st = get_int(root, "num_key_value_heads", name, false, cfg->n_head, &cfg->n_kv_head, err);
    if (st == LB_OK)
        st = get_int(root, "max_position_embeddings", name, false, 8192, &cfg->max_seq, err);
    if (st == LB_OK && cfg->n_head > 0)
        st = get_int(root, "head_dim", name, false, cfg->d_model / cfg->n_head, &hd, err);
    if (st == LB_OK) st = get_num(root, "rms_norm_eps", name, 1e-6, &eps, err);
    /* transformers 5 writes rope_theta and the scaling as one rope_parameters object */
    json_t *rp = json_object_get(root, "rope_parameters");
    if (!json_is_object(rp)) rp = NULL;
    if (st == LB_OK) st = get_num(rp ? rp : root, "rope_theta", name, 10000.0, &theta, err);
    if (st == LB_OK && hd * cfg->n_head != cfg->d_model)
        st = lb_fail(err, LB_ERR_USAGE,
                     "%s: head_dim %d times %d heads is not hidden_size %d; only models whose "
                     "attention width is hidden_size are supported",
                     name, hd, cfg->n_head, cfg->d_model);
    bool attn_bias = false, mlp_bias = false, tied = false;
    if (st == LB_OK) st = get_bool(root, "attention_bias", name, &attn_bias, err);
    if (st == LB_OK) st = get_bool(root, "mlp_bias", name, &mlp_bias, err);
    if (st == LB_OK) st = get_bool(root, "tie_word_embeddings", name, &tied, err);
    if (st == LB_OK && (attn_bias || mlp_bias))
        st = lb_fail(err, LB_ERR_USAGE,
                     "%s: attention_bias and mlp_bias must be false (Llama has no biases)", name);
    /* LlamaConfig's and MistralConfig's default activation is silu (SwiGLU) */
    json_t *act = json_object_get(root, "hidden_act");
    if (st == LB_OK && act != NULL && !json_is_null(act) &&
        (!json_is_string(act) || strcmp(json_string_value(act), "silu") != 0))
        st = lb_fail(err, LB_ERR_USAGE, "%s: hidden_act %s is not supported; \"silu\" (SwiGLU) is",
                     name, json_is_string(act) ? json_string_value(act) : "(not a string)");
    json_t *sw = json_object_get(root, "sliding_window");
    if (st == LB_OK && sw != NULL && !json_is_null(sw) && json_integer_value(sw) < cfg->max_seq)
        st = lb_fail(err, LB_ERR_USAGE,
                     "%s: sliding_window %lld is not supported; null or at least "
                     "max_position_embeddings is",
                     name, (long long)json_integer_value(sw));
    json_t *rs = rp ? rp : json_object_get(root, "rope_scaling");
    const char *type = json_string_value(json_object_get(rs, "rope_type"));
    if (type == NULL) type = json_string_value(json_object_get(rs, "type"));
    if ((rp != NULL && type == NULL) || (type != NULL && strcmp(type, "default") == 0)) rs = NULL;
    if (st == LB_OK && rs != NULL && !json_is_null(rs)) {
        /* transformers refuses a llama3 scaling without one of these: no default stands in */
        static const char *const need[] = {"factor", "low_freq_factor", "high_freq_factor",
                                           "original_max_position_embeddings"};
        double f = 0, lo = 0, hi = 0;
        int orig = 0;
        if (type == NULL || strcmp(type, "llama3") != 0)
            st = lb_fail(err, LB_ERR_USAGE,
                         "%s: rope_scaling type \"%s\" is not supported; \"llama3\" or null is",
                         name, type ? type : "(none)");
        for (size_t k = 0; k < sizeof need / sizeof need[0] && st == LB_OK; k++) {
            json_t *v = json_object_get(rs, need[k]);
            if (v == NULL || json_is_null(v))
                st = lb_fail(err, LB_ERR_USAGE,
                             "%s: %s of type llama3 has no \"%s\"; it needs factor, "
                             "low_freq_factor, high_freq_factor and "
                             "original_max_position_embeddings",
                             name, rp ? "rope_parameters" : "rope_scaling", need[k]);
        }
        if (st == LB_OK) st = get_num(rs, "factor", name, 0, &f, err);
        if (st == LB_OK) st = get_num(rs, "low_freq_factor", name, 0, &lo, err);
        if (st == LB_OK) st = get_num(rs, "high_freq_factor", name, 0, &hi, err);
        if (st == LB_OK)
            st = get_int(rs, "original_max_position_embeddings", name, true, 0, &orig, err);
        if (st == LB_OK && !(hi > lo))
            st = lb_fail(err, LB_ERR_USAGE,
                         "%s: rope_scaling high_freq_factor must exceed low_freq_factor", name);
        cfg->rope_scaling = (lb_rope_scaling){1, (float)f, (float)lo, (float)hi, orig};
    }
    cfg->norm_eps = (float)eps;
    cfg->rope_theta = (float)theta;
    cfg->tied_embeddings = tied;
    json_decref(root);
    lb_err why;
    if (st == LB_OK && lb_model_config_check(cfg, &why) != LB_OK)
        st = lb_fail(err, LB_ERR_USAGE, "%s: %s", name, why.msg);
    return st;
}

/* ---- the directory ---- */

static bool exists(const char *path) {
    return access(path, R_OK) == 0;
}

typedef struct {
    const char *name;
    size_t shard;
} held_tensor;

static int cmp_held(const void *a, const void *b) {
    return strcmp(((const held_tensor *)a)->name, ((const held_tensor *)b)->name);
}

/* No tensor in two shards: which copy a read would take is not for the file order to say. */
static lb_status check_unique(const lb_hf_model *m, lb_err *err) {
    size_t n = 0;
    for (size_t i = 0; i < m->n_shards; i++)
        n += m->shards[i].n_tensors;
    held_tensor *h = malloc((n + 1) * sizeof *h);
    if (h == NULL) return lb_fail(err, LB_ERR_NOMEM, "out of memory");
    n = 0;
    for (size_t i = 0; i < m->n_shards; i++)
        for (size_t k = 0; k < m->shards[i].n_tensors; k++)
            h[n++] = (held_tensor){m->shards[i].tensors[k].name, i};
    qsort(h, n, sizeof *h, cmp_held);
    lb_status st = LB_OK;
    for (size_t i = 1; i < n && st == LB_OK; i++)
        if (strcmp(h[i - 1].name, h[i].name) == 0)
            st = lb_fail(err, LB_ERR_USAGE,
                         "%s: tensor '%s' is in %s too; a tensor belongs to one shard",
                         m->shards[h[i].shard].path, h[i].name, m->shards[h[i - 1].shard].path);
    free(h);
    return st;
}

/* Shard files: the index's weight_map values, each once, or model.safetensors. */
static lb_status open_shards(lb_hf_model *m, lb_err *err) {
    char path[1024];
    snprintf(path, sizeof path, "%s/model.safetensors.index.json", m->dir);
    if (!exists(path)) {
        snprintf(path, sizeof path, "%s/model.safetensors", m->dir);
        if (!exists(path))
            return lb_fail(err, LB_ERR_USAGE,
                           "%s: no model.safetensors or model.safetensors.index.json; a Hugging "
                           "Face model directory has one",
                           m->dir);
        m->shards = calloc(1, sizeof *m->shards);
        if (m->shards == NULL) return lb_fail(err, LB_ERR_NOMEM, "out of memory");
        lb_status st = lb_safetensors_open(&m->shards[0], path, err);
        if (st == LB_OK) m->n_shards = 1;
        return st == LB_OK ? LB_OK : LB_ERR_USAGE;
    }
    json_error_t je;
    json_t *root = json_load_file(path, 0, &je);
    if (root == NULL)
        return lb_fail(err, LB_ERR_USAGE, "%s:%d:%d: not JSON: %s", path, je.line, je.column,
                       je.text);
    json_t *wm = json_object_get(root, "weight_map");
    if (!json_is_object(wm)) {
        json_decref(root);
        return lb_fail(err, LB_ERR_USAGE, "%s: no \"weight_map\" object", path);
    }
    /* no more files than tensors; files[k] points into root */
    const char **files = malloc((json_object_size(wm) + 1) * sizeof *files);
    if (files == NULL) {
        json_decref(root);
        return lb_fail(err, LB_ERR_NOMEM, "out of memory");
    }
    size_t n = 0;
    const char *key;
    json_t *val;
    lb_status st = LB_OK;
    json_object_foreach(wm, key, val) {
        const char *f = json_string_value(val);
        if (f == NULL || strchr(f, '/') != NULL) {
            st =
                lb_fail(err, LB_ERR_USAGE, "%s: weight_map[\"%s\"] must be a file name", path, key);
            break;
        }
        size_t i = 0;
        while (i < n && strcmp(files[i], f) != 0)
            i++;
        if (i == n) files[n++] = f;
    }
    if (st == LB_OK && n == 0) st = lb_fail(err, LB_ERR_USAGE, "%s: weight_map is empty", path);
    if (st == LB_OK && (m->shards = calloc(n, sizeof *m->shards)) == NULL)
        st = lb_fail(err, LB_ERR_NOMEM, "out of memory");
    for (size_t i = 0; i < n && st == LB_OK; i++) {
        char sp[1024];
        snprintf(sp, sizeof sp, "%s/%s", m->dir, files[i]);
        st = lb_safetensors_open(&m->shards[i], sp, err);
        if (st == LB_OK)
            m->n_shards++;
        else
            st = LB_ERR_USAGE;
    }
    /* the shard weight_map names holds the tensor (m->shards[k] is files[k]) */
    json_object_foreach(wm, key, val) {
        if (st != LB_OK) break;
        size_t k = 0;
        while (strcmp(files[k], json_string_value(val)) != 0)
            k++;
        if (lb_safetensors_find(&m->shards[k], key) == NULL)
            st =
                lb_fail(err, LB_ERR_USAGE, "%s: weight_map puts '%s' in %s, which does not hold it",
                        path, key, files[k]);
    }
    free(files);
    if (st == LB_OK) st = check_unique(m, err);
    json_decref(root);
    return st;
}

static const lb_st_tensor *find(const lb_hf_model *m, const char *name, const char **file) {
    for (size_t i = 0; i < m->n_shards; i++) {
        const lb_st_tensor *t = lb_safetensors_find(&m->shards[i], name);
        if (t != NULL) {
            *file = m->shards[i].path;
            return t;
        }
    }
    return NULL;
}

static const char *st_dtype_name(lb_st_dtype d) {
    return d == LB_ST_BF16 ? "BF16" : d == LB_ST_F16 ? "F16" : d == LB_ST_F32 ? "F32" : "other";
}

/* The layers the weights hold, told by their input norms, against num_hidden_layers: first,
 * so that a count far beyond the weights is refused at its first missing layer rather
 * than after walking a layout of that many layers, and so that weights of more layers
 * than config.json says are refused, not cut short. */
static lb_status check_layers(const lb_hf_model *m, lb_err *err) {
    for (int l = 0; l <= m->cfg.n_layer; l++) {
        char name[96];
        const char *file = m->dir;
        snprintf(name, sizeof name, "model.layers.%d.input_layernorm.weight", l);
        bool held = find(m, name, &file) != NULL;
        if (l < m->cfg.n_layer && !held)
            return lb_fail(err, LB_ERR_USAGE, "%s: no tensor '%s', which the config.json needs",
                           m->dir, name);
        if (l == m->cfg.n_layer && held)
            return lb_fail(err, LB_ERR_USAGE,
                           "%s: tensor '%s' is of a layer beyond config.json's "
                           "num_hidden_layers %d; the weights and the config.json disagree",
                           file, name, m->cfg.n_layer);
    }
    return LB_OK;
}

static lb_status check_tensors(lb_hf_model *m, lb_err *err) {
    LB_TRY(check_layers(m, err));
    int n = lb_model_param_layout(&m->cfg, NULL, 0);
    lb_param_tensor *lay = malloc((size_t)n * sizeof *lay);
    if (lay == NULL) return lb_fail(err, LB_ERR_NOMEM, "out of memory");
    lb_model_param_layout(&m->cfg, lay, n);
    lb_status st = LB_OK;
    m->dtype = LB_ST_OTHER;
    for (int i = 0; i < n && st == LB_OK; i++) {
        part p[MAX_PARTS];
        int np = parts_of(&m->cfg, &lay[i], p);
        for (int k = 0; k < np && st == LB_OK; k++) {
            const char *file = m->dir;
            const lb_st_tensor *t = find(m, p[k].name, &file);
            int64_t cols = lay[i].ndim == 2 ? lay[i].shape[1] : 0;
            bool shape_ok = t != NULL && t->ndim == lay[i].ndim && t->shape[0] == p[k].rows &&
                            (lay[i].ndim == 1 || t->shape[1] == cols);
            if (t == NULL)
                st = lb_fail(err, LB_ERR_USAGE, "%s: no tensor '%s', which the config.json needs",
                             m->dir, p[k].name);
            else if (t->dtype != LB_ST_BF16 && t->dtype != LB_ST_F16 && t->dtype != LB_ST_F32)
                st = lb_fail(err, LB_ERR_USAGE,
                             "%s: tensor '%s' has dtype %s; BF16, F16 or F32 is supported", file,
                             p[k].name, st_dtype_name(t->dtype));
            else if (m->dtype != LB_ST_OTHER && t->dtype != m->dtype)
                st = lb_fail(err, LB_ERR_USAGE,
                             "%s: tensor '%s' is %s but the others are %s; one dtype is "
                             "supported",
                             file, p[k].name, st_dtype_name(t->dtype), st_dtype_name(m->dtype));
            else if (!shape_ok)
                st = lb_fail(err, LB_ERR_USAGE,
                             "%s: tensor '%s' must have shape [%lld%s%lld] for this config.json",
                             file, p[k].name, (long long)p[k].rows, cols ? ", " : "",
                             cols ? (long long)cols : 0LL);
            else
                m->dtype = t->dtype;
        }
    }
    free(lay);
    return st;
}

/* generation_config.json (optional): eos_token_id (a number or a list) and bos_token_id;
 * config.json's when the file is absent. */
static lb_status read_ids(lb_hf_model *m, const char *path, bool required, lb_err *err) {
    json_error_t je;
    json_t *root = json_load_file(path, 0, &je);
    if (root == NULL) {
        if (!required && !exists(path)) return LB_OK;
        return lb_fail(err, LB_ERR_USAGE, "%s:%d: %s", path, je.line, je.text);
    }
    json_t *eos = json_object_get(root, "eos_token_id"),
           *bos = json_object_get(root, "bos_token_id");
    lb_status st = LB_OK;
    if (eos != NULL && !json_is_null(eos)) {
        m->n_eos = 0;
        size_t n = json_is_array(eos) ? json_array_size(eos) : 1;
        for (size_t i = 0; i < n && st == LB_OK; i++) {
            json_t *v = json_is_array(eos) ? json_array_get(eos, i) : eos;
            if (!json_is_integer(v) || json_integer_value(v) < 0 ||
                json_integer_value(v) >= m->cfg.vocab_size || m->n_eos == LB_HF_MAX_EOS)
                st = lb_fail(err, LB_ERR_USAGE,
                             "%s: eos_token_id must be up to %d ids below vocab_size %d", path,
                             LB_HF_MAX_EOS, m->cfg.vocab_size);
            else
                m->eos_ids[m->n_eos++] = (int32_t)json_integer_value(v);
        }
    }
    if (st == LB_OK && json_is_array(bos) && json_array_size(bos) == 1)
        bos = json_array_get(bos, 0); /* a list of one, as eos_token_id may be */
    if (st == LB_OK && bos != NULL && !json_is_null(bos)) {
        if (!json_is_integer(bos) || json_integer_value(bos) < 0 ||
            json_integer_value(bos) >= m->cfg.vocab_size)
            st = lb_fail(err, LB_ERR_USAGE, "%s: bos_token_id must be an id below vocab_size %d",
                         path, m->cfg.vocab_size);
        else
            m->bos_id = (int32_t)json_integer_value(bos);
    }
    json_decref(root);
    return st;
}

lb_status lb_hf_model_open(lb_hf_model *m, const char *dir, lb_err *err) {
    memset(m, 0, sizeof *m);
    m->bos_id = -1;
    size_t dl = strlen(dir);
    while (dl > 1 && dir[dl - 1] == '/')
        dl--;
    if (dl >= sizeof m->dir) return lb_fail(err, LB_ERR_USAGE, "%s: the path is too long", dir);
    memcpy(m->dir, dir, dl);
    char path[1024];
    snprintf(path, sizeof path, "%s/config.json", m->dir);
    char *text = NULL;
    size_t n = 0;
    if (!exists(path))
        return lb_fail(err, LB_ERR_USAGE,
                       "%s: no config.json; --model takes a Hugging Face model directory", m->dir);
    LB_TRY(lb_file_read(path, &text, &n, err));
    lb_status st = lb_hf_model_config_parse(text, n, path, &m->cfg, err);
    free(text);
    /* the directory's name, whole characters only and UTF-8, as results are JSON */
    const char *base = strrchr(m->dir, '/');
    base = base ? base + 1 : m->dir;
    snprintf(m->cfg.name, sizeof m->cfg.name, "%.*s",
             (int)lb_utf8text_cut_len(base, sizeof m->cfg.name - 1), base);
    lb_utf8text_repair(m->cfg.name);
    if (st == LB_OK) st = read_ids(m, path, true, err);
    snprintf(path, sizeof path, "%s/generation_config.json", m->dir);
    if (st == LB_OK) st = read_ids(m, path, false, err);
    if (st == LB_OK) {
        snprintf(m->tokenizer_path, sizeof m->tokenizer_path, "%s/tokenizer.json", m->dir);
        m->tokenizer_json = true;
        if (!exists(m->tokenizer_path)) {
            snprintf(m->tokenizer_path, sizeof m->tokenizer_path, "%s/original/tokenizer.model",
                     m->dir);
            m->tokenizer_json = false;
            if (!exists(m->tokenizer_path)) m->tokenizer_path[0] = '\0'; /* training needs none */
        }
    }
    if (st == LB_OK) st = open_shards(m, err);
    if (st == LB_OK) st = check_tensors(m, err);
    if (st != LB_OK) lb_hf_model_close(m);
    return st;
}

void lb_hf_model_close(lb_hf_model *m) {
    if (m == NULL) return;
    for (size_t i = 0; i < m->n_shards; i++)
        lb_safetensors_close(&m->shards[i]);
    free(m->shards);
    m->shards = NULL;
    m->n_shards = 0;
}

static void convert(const lb_st_tensor *s, lb_gpu_dtype dt, void *dst, int64_t n) {
    const uint16_t *h = s->data;
    const float *f = s->data;
    float *of = dst;
    uint16_t *oh = dst;
    if ((s->dtype == LB_ST_F32 && dt == LB_DT_F32) ||
        (s->dtype == LB_ST_BF16 && dt == LB_DT_BF16) ||
        (s->dtype == LB_ST_F16 && dt == LB_DT_F16)) {
        memcpy(dst, s->data, (size_t)n * lb_dtype_bytes(dt));
        return;
    }
    for (int64_t i = 0; i < n; i++) {
        float v = s->dtype == LB_ST_F32    ? f[i]
                  : s->dtype == LB_ST_BF16 ? lb_hf_model_bf16_to_f32(h[i])
                                           : lb_hf_model_f16_to_f32(h[i]);
        if (dt == LB_DT_F32)
            of[i] = v;
        else
            oh[i] = dt == LB_DT_BF16 ? lb_hf_model_f32_to_bf16(v) : lb_hf_model_f32_to_f16(v);
    }
}

void lb_hf_model_read(const lb_hf_model *m, const lb_param_tensor *t, lb_gpu_dtype dt, void *dst) {
    part p[MAX_PARTS];
    int np = parts_of(&m->cfg, t, p);
    char *out = dst;
    for (int k = 0; k < np; k++) {
        const char *file;
        const lb_st_tensor *s = find(m, p[k].name, &file); /* checked at open */
        convert(s, dt, out, s->numel);
        out += (size_t)s->numel * lb_dtype_bytes(dt);
    }
}
