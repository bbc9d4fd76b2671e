/* fuzz_safetensors.c: libFuzzer target for the safetensors header parser.
 *
 * Feeds arbitrary bytes to lb_safetensors_parse (the function lb_safetensors_open runs on
 * the mapped file) and, when they parse, reads every tensor's bytes, so an offset or size
 * check that lets a tensor reach past the image shows up as an ASan error. The copy into
 * an 8-byte-aligned buffer mirrors mmap's page alignment. */
#include "model/safetensors.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    void *copy = malloc(size ? size : 1); /* malloc is at least 8-byte aligned */
    if (!copy) return 0;
    memcpy(copy, data, size);
    lb_safetensors st;
    memset(&st, 0, sizeof st);
    lb_err err;
    if (lb_safetensors_parse(&st, copy, size, &err) == LB_OK) {
        volatile unsigned char sink = 0;
        for (size_t i = 0; i < st.n_tensors; i++) {
            const unsigned char *p = st.tensors[i].data;
            for (size_t j = 0; j < st.tensors[i].bytes; j++)
                sink ^= p[j];
        }
        (void)sink;
        lb_safetensors_close(&st);
    }
    free(copy);
    return 0;
}
