/* fuzz_shard.c: llm.c token shards through lb_data_open (train/data.h) on arbitrary bytes.
 *
 * The loader only takes a path (it reads the file), so the bytes go into a memfd that is
 * opened through /proc/self/fd. Input layout: 4 bytes of loader settings (vocabulary
 * 1..65536 from bytes 0-1, batch 1..4 from byte 2, seq 1..16 from byte 3), then the shard
 * file. A refused shard must name the file; an accepted one must hold exactly the count its
 * header gives (uint16 tokens, or uint32 in the Llama 3 layout), and three batches drawn
 * from it must be the file's consecutive windows, every token id below the vocabulary. */
#include <stdbool.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "fuzz.h"
#include "train/data.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static int fd = -1;
    static char path[64];
    if (fd < 0) {
        fd = memfd_create("fuzz-shard", 0);
        FUZZ_CHECK(fd >= 0);
        snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    }
    if (size < 4) return 0;
    int32_t vocab = 1 + (int32_t)(data[0] | (unsigned)data[1] << 8);
    int64_t batch = 1 + data[2] % 4, seq = 1 + data[3] % 16;
    const uint8_t *file = data + 4;
    size_t n = size - 4;
    FUZZ_CHECK(ftruncate(fd, 0) == 0);
    FUZZ_CHECK(pwrite(fd, file, n, 0) == (ssize_t)n);

    lb_data_loader *d = NULL;
    lb_err err = {{0}};
    if (lb_data_open(path, vocab, batch, seq, 7, &d, &err) != LB_OK) {
        FUZZ_CHECK(d == NULL);
        FUZZ_CHECK(strstr(err.msg, path) != NULL);
        return 0;
    }
    const size_t header_bytes = LB_SHARD_HEADER_INTS * sizeof(int32_t);
    FUZZ_CHECK(n >= header_bytes);
    int32_t header[3];
    memcpy(header, file, sizeof header);
    const bool wide = header[0] == LB_SHARD_MAGIC_LLAMA3; /* uint32 tokens */
    FUZZ_CHECK((header[0] == LB_SHARD_MAGIC && header[1] == LB_SHARD_VERSION) ||
               (wide && header[1] == LB_SHARD_VERSION_LLAMA3));
    const size_t width = wide ? 4 : 2;
    int64_t n_tokens = lb_data_shard_tokens(d);
    FUZZ_CHECK(n_tokens == header[2]);
    FUZZ_CHECK(n == header_bytes + (size_t)n_tokens * width);
    FUZZ_CHECK(n_tokens >= batch * seq + 1);

    /* Batches are windows of batch*seq+1 tokens from the start, wrapping to the start
     * when the next window would run past the end. */
    int32_t inputs[4 * 16], targets[4 * 16];
    const int64_t bt = batch * seq;
    int64_t pos = 0;
    for (int step = 0; step < 3; step++) {
        lb_data_next(d, inputs, targets);
        if (pos + bt + 1 > n_tokens) pos = 0;
        for (int64_t i = 0; i < bt; i++) {
            uint32_t in = 0, target = 0; /* little-endian: the low bytes first */
            memcpy(&in, file + header_bytes + (size_t)(pos + i) * width, width);
            memcpy(&target, file + header_bytes + (size_t)(pos + i + 1) * width, width);
            FUZZ_CHECK(inputs[i] == (int32_t)in && targets[i] == (int32_t)target);
            FUZZ_CHECK(inputs[i] < vocab && targets[i] < vocab);
        }
        pos += bt;
    }
    lb_data_close(d);
    return 0;
}
