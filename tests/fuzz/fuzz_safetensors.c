/* fuzz_safetensors.c: lb_safetensors_parse (model/safetensors.h) on arbitrary bytes.
 *
 * The input is a whole file image. A refused image must leave nothing allocated and a
 * message naming the file; an accepted one must hand out only tensors whose shape,
 * element count, byte size and alignment agree and whose data lie inside the data section
 * after the header. Every tensor byte is read, so a pointer past the input is a
 * sanitizer report, not a silent success. The image is copied into a malloc'd block (at
 * least 8-byte aligned, like lb_safetensors_open's mapping) so that the alignment checks
 * see what a real file gives, whatever the driver's buffer. */
#include <string.h>

#include "fuzz.h"
#include "model/safetensors.h"

static size_t dtype_bytes(lb_st_dtype dtype) {
    switch (dtype) {
    case LB_ST_F32:
    case LB_ST_I32: return 4;
    case LB_ST_F64:
    case LB_ST_I64: return 8;
    case LB_ST_F16:
    case LB_ST_BF16: return 2;
    case LB_ST_OTHER: return 0;
    }
    return 0;
}

static void check_image(const uint8_t *data, size_t size) {
    lb_safetensors st;
    memset(&st, 0, sizeof st);
    snprintf(st.path, sizeof st.path, "fuzz.safetensors");
    lb_err err = {{0}};
    if (lb_safetensors_parse(&st, data, size, &err) != LB_OK) {
        FUZZ_CHECK(st.tensors == NULL && st.n_tensors == 0 && st.metadata == NULL);
        FUZZ_CHECK(strstr(err.msg, "fuzz.safetensors") != NULL);
        return;
    }
    FUZZ_CHECK(size >= 8);
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--)
        hlen = (hlen << 8) | data[i];
    FUZZ_CHECK(hlen <= size - 8);
    const uint8_t *data_begin = data + 8 + hlen, *data_end = data + size;
    for (size_t i = 0; i < st.n_tensors; i++) {
        const lb_st_tensor *t = &st.tensors[i];
        FUZZ_CHECK(t->name != NULL);
        FUZZ_CHECK(lb_safetensors_find(&st, t->name) == t);
        FUZZ_CHECK(t->ndim >= 0 && t->ndim <= LB_ST_MAX_DIMS);
        int64_t numel = 1;
        for (int d = 0; d < t->ndim; d++) {
            FUZZ_CHECK(t->shape[d] >= 0);
            numel *= t->shape[d];
        }
        FUZZ_CHECK(numel == t->numel);
        size_t esize = dtype_bytes(t->dtype);
        if (esize) {
            FUZZ_CHECK((uint64_t)numel * esize == t->bytes);
            FUZZ_CHECK((uintptr_t)t->data % esize == 0);
        }
        const uint8_t *p = t->data;
        FUZZ_CHECK(p >= data_begin && t->bytes <= (size_t)(data_end - p));
        fuzz_touch(p, t->bytes);
    }
    /* Metadata values are strings (or the key is absent). */
    const char *fmt = lb_safetensors_meta(&st, "format");
    if (fmt) fuzz_touch(fmt, strlen(fmt) + 1);
    lb_safetensors_close(&st);
    FUZZ_CHECK(st.tensors == NULL && st.metadata == NULL);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    uint8_t *copy = malloc(size ? size : 1);
    FUZZ_CHECK(copy != NULL);
    if (size) memcpy(copy, data, size);
    check_image(copy, size);
    free(copy);
    return 0;
}
