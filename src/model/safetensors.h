/* safetensors.h: read-only access to a safetensors file.
 *
 * Format (huggingface/safetensors): an 8-byte little-endian header length N, N bytes of
 * JSON mapping each tensor name to {"dtype", "shape", "data_offsets": [begin, end]} (byte
 * offsets into the data that follows the header; an optional "__metadata__" object maps
 * strings to strings), then the data. A header longer than LB_ST_MAX_HEADER_BYTES is
 * refused before it is read, as the safetensors library does. The file is mapped
 * read-only; tensors point into the mapping, so they stay valid until lb_safetensors_close.
 * Every offset, shape and dtype is checked against the file size on open, so a truncated
 * or malformed file is an error, never an out-of-bounds read; as the safetensors library
 * requires, no tensor name comes twice and the tensors' byte ranges cover the data exactly, none
 * overlapping another, no byte left over; tensor data must be aligned to its element size (writers
 * pad the header to a multiple of 8 bytes), so it can be read through a typed pointer. Data are
 * little-endian as written (this build assumes a little-endian host). Writing is one case
 * only: a model's fp32 parameter array, one tensor per entry of its layout
 * (lb_safetensors_write_params). Not here: dtype conversion, big-endian hosts. */
#ifndef LB_MODEL_SAFETENSORS_H
#define LB_MODEL_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "core/status.h"
#include "model/config.h"

typedef enum {
    LB_ST_F32,
    LB_ST_F64,
    LB_ST_I32,
    LB_ST_I64,
    LB_ST_F16,
    LB_ST_BF16,
    LB_ST_OTHER, /* any other dtype: listed, its bytes checked, never interpreted */
} lb_st_dtype;

#define LB_ST_MAX_DIMS         8
#define LB_ST_MAX_HEADER_BYTES 100000000 /* the safetensors library's bound on N */

typedef struct {
    char *name; /* owned by the lb_safetensors */
    lb_st_dtype dtype;
    int ndim;
    int64_t shape[LB_ST_MAX_DIMS];
    int64_t numel;
    const void *data; /* into the mapping, aligned to the element size */
    size_t bytes;
} lb_st_tensor;

typedef struct {
    void *map;
    size_t map_bytes;
    lb_st_tensor *tensors;
    size_t n_tensors;
    void *metadata; /* json_t object or NULL, owned */
    char path[256]; /* for messages */
} lb_safetensors;

/* Maps and validates the file. On failure st is left closed and err names the file and
 * what is wrong. */
lb_status lb_safetensors_open(lb_safetensors *st, const char *path, lb_err *err);
/* Parses an in-memory image with the same checks as open; st->path names it in messages
 * and its tensors point into bytes, which must outlive st. On failure nothing is left
 * allocated. Used by open and by tests. */
lb_status lb_safetensors_parse(lb_safetensors *st, const void *bytes, size_t n, lb_err *err);
void lb_safetensors_close(lb_safetensors *st);

/* The tensor of this name or NULL. */
const lb_st_tensor *lb_safetensors_find(const lb_safetensors *st, const char *name);
/* The metadata string of this key or NULL (valid until close). */
const char *lb_safetensors_meta(const lb_safetensors *st, const char *key);

/* Writes the n_params fp32 values of params (the flat array of cfg's layout) to path as
 * safetensors, one F32 tensor per layout entry under its layout name ("wte", "h.3.qkv.w"),
 * the model's name in the metadata ("model"); atomically (core/file.h). LB_ERR_IO naming
 * the path when it cannot be written. */
lb_status lb_safetensors_write_params(const char *path, const lb_model_config *cfg,
                                      const float *params, lb_err *err);

#endif
