/* safetensors.c: map a safetensors file and validate its header (safetensors.h).
 *
 * The JSON header is parsed with jansson (a name given twice refused); each entry is checked
 * (dtype known, non-negative shape whose product times the dtype size equals end - begin,
 * begin <= end <= data size, data aligned to the element size so it can be read through a
 * typed pointer), and then the entries together must cover the data exactly, before any
 * tensor pointer is handed out; and the one writer, a model's fp32 parameters. */
#include "model/safetensors.h"

#include <fcntl.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/file.h"

static const struct {
    const char *name;
    lb_st_dtype dtype;
    size_t bytes;
} dtypes[] = {
    {"F32", LB_ST_F32, 4},   {"F64", LB_ST_F64, 8},       {"I32", LB_ST_I32, 4},
    {"I64", LB_ST_I64, 8},   {"F16", LB_ST_F16, 2},       {"BF16", LB_ST_BF16, 2},
    {"I8", LB_ST_OTHER, 1},  {"U8", LB_ST_OTHER, 1},      {"BOOL", LB_ST_OTHER, 1},
    {"I16", LB_ST_OTHER, 2}, {"U16", LB_ST_OTHER, 2},     {"U32", LB_ST_OTHER, 4},
    {"U64", LB_ST_OTHER, 8}, {"F8_E4M3", LB_ST_OTHER, 1}, {"F8_E5M2", LB_ST_OTHER, 1},
};

static lb_status parse_entry(lb_safetensors *st, const char *key, json_t *val,
                             const unsigned char *data, size_t data_bytes, lb_st_tensor *t,
                             lb_err *err) {
    const char *p = st->path;
    json_t *dt = json_object_get(val, "dtype"), *shape = json_object_get(val, "shape");
    json_t *offs = json_object_get(val, "data_offsets");
    if (!json_is_string(dt) || !json_is_array(shape) || !json_is_array(offs) ||
        json_array_size(offs) != 2)
        return lb_fail(err, LB_ERR_FORMAT,
                       "%s: tensor '%s' needs a dtype string, a shape array and two "
                       "data_offsets",
                       p, key);
    size_t esize = 0;
    for (size_t i = 0; i < sizeof dtypes / sizeof dtypes[0]; i++)
        if (strcmp(json_string_value(dt), dtypes[i].name) == 0) {
            t->dtype = dtypes[i].dtype;
            esize = dtypes[i].bytes;
        }
    if (!esize)
        return lb_fail(err, LB_ERR_FORMAT, "%s: tensor '%s' has unknown dtype '%s'", p, key,
                       json_string_value(dt));
    if (json_array_size(shape) > LB_ST_MAX_DIMS)
        return lb_fail(err, LB_ERR_FORMAT, "%s: tensor '%s' has more than %d dimensions", p, key,
                       LB_ST_MAX_DIMS);
    t->ndim = (int)json_array_size(shape);
    int64_t numel = 1;
    for (int i = 0; i < t->ndim; i++) {
        json_t *d = json_array_get(shape, (size_t)i);
        if (!json_is_integer(d) || json_integer_value(d) < 0 ||
            json_integer_value(d) > ((int64_t)1 << 40))
            return lb_fail(err, LB_ERR_FORMAT,
                           "%s: tensor '%s' dimension %d is not an integer in [0, 2^40]", p, key,
                           i);
        t->shape[i] = json_integer_value(d);
        if (t->shape[i] && numel > ((int64_t)1 << 40) / t->shape[i])
            return lb_fail(err, LB_ERR_FORMAT, "%s: tensor '%s' has too many elements", p, key);
        numel *= t->shape[i];
    }
    json_t *b = json_array_get(offs, 0), *e = json_array_get(offs, 1);
    if (!json_is_integer(b) || !json_is_integer(e) || json_integer_value(b) < 0 ||
        json_integer_value(e) < json_integer_value(b) ||
        (uint64_t)json_integer_value(e) > data_bytes)
        return lb_fail(err, LB_ERR_FORMAT,
                       "%s: tensor '%s' data_offsets lie outside the %zu data bytes", p, key,
                       data_bytes);
    size_t begin = (size_t)json_integer_value(b), end = (size_t)json_integer_value(e);
    if ((uint64_t)numel * esize != end - begin)
        return lb_fail(err, LB_ERR_FORMAT, "%s: tensor '%s' holds %zu bytes, its shape needs %llu",
                       p, key, end - begin, (unsigned long long)numel * esize);
    if ((uintptr_t)(data + begin) % esize != 0)
        return lb_fail(err, LB_ERR_FORMAT,
                       "%s: tensor '%s' data is not aligned to its %zu-byte elements (pad the "
                       "header to a multiple of 8 bytes)",
                       p, key, esize);
    t->numel = numel;
    t->bytes = end - begin;
    t->data = data + begin;
    t->name = strdup(key);
    if (!t->name) return lb_fail(err, LB_ERR_NOMEM, "%s: out of memory", p);
    return LB_OK;
}

static void free_parsed(lb_safetensors *st) {
    for (size_t i = 0; i < st->n_tensors; i++)
        free(st->tensors[i].name);
    free(st->tensors);
    json_decref(st->metadata);
    st->tensors = NULL;
    st->metadata = NULL;
    st->n_tensors = 0;
}

static int cmp_by_data(const void *a, const void *b) {
    const lb_st_tensor *x = *(const lb_st_tensor *const *)a, *y = *(const lb_st_tensor *const *)b;
    if (x->data != y->data)
        return (const unsigned char *)x->data < (const unsigned char *)y->data ? -1 : 1;
    return (x->bytes > y->bytes) - (x->bytes < y->bytes);
}

/* The tensors' byte ranges, in offset order, must cover data[0..data_bytes) exactly, each
 * byte once, as the safetensors library requires: an overlap would alias two tensors and a
 * gap or a tail is bytes no tensor accounts for. */
static lb_status check_tiling(const lb_safetensors *st, const unsigned char *data,
                              size_t data_bytes, lb_err *err) {
    const lb_st_tensor **by = malloc((st->n_tensors + 1) * sizeof *by);
    if (!by) return lb_fail(err, LB_ERR_NOMEM, "%s: out of memory", st->path);
    for (size_t i = 0; i < st->n_tensors; i++)
        by[i] = &st->tensors[i];
    qsort(by, st->n_tensors, sizeof *by, cmp_by_data);
    lb_status rc = LB_OK;
    size_t at = 0; /* the end of the bytes covered so far */
    for (size_t i = 0; i < st->n_tensors && rc == LB_OK; i++) {
        size_t begin = (size_t)((const unsigned char *)by[i]->data - data);
        if (begin < at)
            rc = lb_fail(err, LB_ERR_FORMAT,
                         "%s: tensor '%s' (data_offsets [%zu, %zu]) overlaps tensor '%s' (ending "
                         "at %zu); each tensor has bytes of its own",
                         st->path, by[i]->name, begin, begin + by[i]->bytes, by[i - 1]->name, at);
        else if (begin > at)
            rc = lb_fail(err, LB_ERR_FORMAT,
                         "%s: data bytes [%zu, %zu) before tensor '%s' belong to no tensor; the "
                         "tensors must cover the data exactly",
                         st->path, at, begin, by[i]->name);
        at = begin + by[i]->bytes;
    }
    if (rc == LB_OK && at != data_bytes)
        rc = lb_fail(err, LB_ERR_FORMAT,
                     "%s: data bytes [%zu, %zu) after the last tensor belong to no tensor; the "
                     "tensors must cover the data exactly",
                     st->path, at, data_bytes);
    free(by);
    return rc;
}

/* The length of the quoted key, as written, that ends at header[end - 1] when jansson
 * refuses it as a duplicate (its error's position is just past the key; its own text names
 * only keys of up to 20 bytes), or 0 when no key ends there. Inside a JSON string each quote
 * follows an odd run of backslashes; the opening quote follows none. */
static int duplicate_key_length(const char *header, int end) {
    if (end < 2 || header[end - 1] != '"') return 0;
    for (int i = end - 2; i >= 0; i--) {
        if (header[i] != '"') continue;
        int slashes = 0;
        while (i - 1 - slashes >= 0 && header[i - 1 - slashes] == '\\')
            slashes++;
        if (slashes % 2 == 0) return end - i;
    }
    return 0;
}

lb_status lb_safetensors_parse(lb_safetensors *st, const void *bytes, size_t n, lb_err *err) {
    const unsigned char *u = bytes;
    st->tensors = NULL;
    st->metadata = NULL;
    st->n_tensors = 0;
    const char *p = st->path;
    if (n < 8)
        return lb_fail(err, LB_ERR_FORMAT, "%s: %zu bytes, shorter than the 8-byte header length",
                       p, n);
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--)
        hlen = (hlen << 8) | u[i];
    if (hlen > LB_ST_MAX_HEADER_BYTES)
        return lb_fail(err, LB_ERR_FORMAT,
                       "%s: header length %llu is more than the %d bytes a safetensors header may "
                       "have; the file is damaged or not safetensors",
                       p, (unsigned long long)hlen, LB_ST_MAX_HEADER_BYTES);
    if (hlen > n - 8)
        return lb_fail(err, LB_ERR_FORMAT,
                       "%s: header length %llu runs past the end of the file (%zu bytes)", p,
                       (unsigned long long)hlen, n);
    json_error_t jerr;
    json_t *root = json_loadb((const char *)u + 8, (size_t)hlen, JSON_REJECT_DUPLICATES, &jerr);
    if (!root && json_error_code(&jerr) == json_error_duplicate_key) {
        int len = duplicate_key_length((const char *)u + 8, jerr.position);
        const char *key = len > 0 ? (const char *)u + 8 + jerr.position - len : jerr.text;
        if (len <= 0) len = (int)strlen(jerr.text);
        return lb_fail(err, LB_ERR_FORMAT,
                       "%s: header gives the key %.*s twice (at byte %d); each key of a JSON "
                       "object comes once",
                       p, len < 200 ? len : 200, key, jerr.position + 8);
    }
    if (!root || !json_is_object(root)) {
        json_decref(root);
        return lb_fail(err, LB_ERR_FORMAT, "%s: header is not a JSON object (%s at byte %d)", p,
                       root ? "not an object" : jerr.text, root ? 0 : jerr.position + 8);
    }
    const unsigned char *data = u + 8 + hlen;
    const size_t data_bytes = n - 8 - (size_t)hlen;
    st->tensors = calloc(json_object_size(root) + 1, sizeof *st->tensors);
    if (!st->tensors) {
        json_decref(root);
        return lb_fail(err, LB_ERR_NOMEM, "%s: out of memory", p);
    }
    const char *key;
    json_t *val;
    lb_status rc = LB_OK;
    json_object_foreach(root, key, val) {
        if (strcmp(key, "__metadata__") == 0) {
            const char *mk;
            json_t *mv;
            if (!json_is_object(val)) {
                rc = lb_fail(err, LB_ERR_FORMAT, "%s: __metadata__ is not an object", p);
                break;
            }
            json_object_foreach(val, mk, mv) {
                if (!json_is_string(mv)) {
                    rc = lb_fail(err, LB_ERR_FORMAT,
                                 "%s: __metadata__ value of '%s' is not a string", p, mk);
                    break;
                }
            }
            if (rc != LB_OK) break;
            st->metadata = json_incref(val);
            continue;
        }
        if (!json_is_object(val)) {
            rc = lb_fail(err, LB_ERR_FORMAT, "%s: entry '%s' is not an object", p, key);
            break;
        }
        rc = parse_entry(st, key, val, data, data_bytes, &st->tensors[st->n_tensors], err);
        if (rc != LB_OK) break;
        st->n_tensors++;
    }
    json_decref(root);
    if (rc == LB_OK) rc = check_tiling(st, data, data_bytes, err);
    if (rc != LB_OK) free_parsed(st);
    return rc;
}

lb_status lb_safetensors_open(lb_safetensors *st, const char *path, lb_err *err) {
    memset(st, 0, sizeof *st);
    snprintf(st->path, sizeof st->path, "%s", path);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return lb_fail(err, LB_ERR_IO, "%s: cannot open: %m", path);
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        close(fd);
        return lb_fail(err, LB_ERR_IO, "%s: cannot stat: %m", path);
    }
    st->map_bytes = (size_t)sb.st_size;
    if (st->map_bytes > 0) {
        st->map = mmap(NULL, st->map_bytes, PROT_READ, MAP_PRIVATE, fd, 0);
        if (st->map == MAP_FAILED) {
            st->map = NULL;
            close(fd);
            return lb_fail(err, LB_ERR_IO, "%s: cannot map: %m", path);
        }
    }
    close(fd);
    lb_status rc = lb_safetensors_parse(st, st->map, st->map_bytes, err);
    if (rc != LB_OK) lb_safetensors_close(st);
    return rc;
}

void lb_safetensors_close(lb_safetensors *st) {
    if (!st) return;
    free_parsed(st);
    if (st->map) munmap(st->map, st->map_bytes);
    st->map = NULL;
}

const lb_st_tensor *lb_safetensors_find(const lb_safetensors *st, const char *name) {
    for (size_t i = 0; i < st->n_tensors; i++)
        if (strcmp(st->tensors[i].name, name) == 0) return &st->tensors[i];
    return NULL;
}

const char *lb_safetensors_meta(const lb_safetensors *st, const char *key) {
    return st->metadata ? json_string_value(json_object_get(st->metadata, key)) : NULL;
}

typedef struct {
    const char *header;
    size_t header_len; /* padded with spaces to a multiple of 8 */
    const float *params;
    int64_t n;
} params_file;

static lb_status write_params_file(FILE *out, void *ctx, lb_err *err) {
    const params_file *f = ctx;
    uint64_t len = f->header_len;
    unsigned char le[8];
    for (int i = 0; i < 8; i++)
        le[i] = (unsigned char)(len >> (8 * i));
    size_t text = strlen(f->header);
    if (fwrite(le, 1, 8, out) != 8 || fwrite(f->header, 1, text, out) != text)
        return lb_fail(err, LB_ERR_IO, "writing the safetensors header failed");
    for (size_t i = text; i < f->header_len; i++)
        if (fputc(' ', out) == EOF) return lb_fail(err, LB_ERR_IO, "writing the header failed");
    if (fwrite(f->params, sizeof(float), (size_t)f->n, out) != (size_t)f->n)
        return lb_fail(err, LB_ERR_IO, "writing %lld parameters failed", (long long)f->n);
    return LB_OK;
}

lb_status lb_safetensors_write_params(const char *path, const lb_model_config *cfg,
                                      const float *params, lb_err *err) {
    int n = lb_model_param_layout(cfg, NULL, 0);
    lb_param_tensor *t = calloc((size_t)n, sizeof *t);
    json_t *root = json_object();
    if (t == NULL || root == NULL) {
        free(t);
        json_decref(root);
        return lb_fail(err, LB_ERR_NOMEM, "out of host memory for the safetensors header");
    }
    lb_model_param_layout(cfg, t, n);
    json_object_set_new(root, "__metadata__", json_pack("{s:s}", "model", cfg->name));
    int64_t total = 0;
    for (int i = 0; i < n; i++) {
        json_t *shape = json_array();
        for (int d = 0; d < t[i].ndim; d++)
            json_array_append_new(shape, json_integer((json_int_t)t[i].shape[d]));
        json_object_set_new(root, t[i].name,
                            json_pack("{s:s,s:o,s:[I,I]}", "dtype", "F32", "shape", shape,
                                      "data_offsets", (json_int_t)(t[i].offset * 4),
                                      (json_int_t)((t[i].offset + t[i].numel) * 4)));
        if (t[i].offset + t[i].numel > total) total = t[i].offset + t[i].numel;
    }
    free(t);
    char *header = json_dumps(root, JSON_COMPACT | JSON_SORT_KEYS);
    json_decref(root);
    if (header == NULL) return lb_fail(err, LB_ERR_NOMEM, "out of host memory for the header");
    params_file f = {header, (strlen(header) + 7) / 8 * 8, params, total};
    lb_status st = lb_file_write_atomic_with(path, write_params_file, &f, err);
    free(header);
    return st;
}
