/* data.c: synthetic batches and validated llm.c token shards (see data.h). A shard's
 * tokens stay in the file's width (uint16 or uint32) and are widened as batches are cut. */
#include "train/data.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/rng.h"

typedef enum { SRC_SYNTHETIC, SRC_REPEAT, SRC_SHARD } source_kind;

struct lb_data_loader {
    source_kind kind;
    int32_t vocab_size;
    int64_t batch, seq;
    int ranks; /* the data-parallel ranks the batch is cut for, named when a shard is short */
    lb_rng rng;
    int32_t *fixed;     /* SRC_REPEAT: the one batch of batch*seq+1 tokens */
    int32_t *drawn;     /* SRC_SYNTHETIC: 2 batch*seq, the whole batch a part is cut from */
    void *tokens;       /* SRC_SHARD: the shard's tokens, read into memory */
    size_t token_bytes; /* SRC_SHARD: 2 (uint16 tokens) or 4 (uint32) */
    int64_t n_tokens, pos;
};

/* The shard layouts llm.c writes (its dev/data/data_common.py). */
static const struct {
    int32_t magic, version;
    size_t token_bytes;
    const char *name;
} layouts[] = {
    {LB_SHARD_MAGIC, LB_SHARD_VERSION, 2, "GPT-2"},
    {LB_SHARD_MAGIC_LLAMA3, LB_SHARD_VERSION_LLAMA3, 4, "Llama 3"},
};

static uint32_t token_at(const lb_data_loader *d, int64_t i) {
    return d->token_bytes == 2 ? ((const uint16_t *)d->tokens)[i]
                               : ((const uint32_t *)d->tokens)[i];
}

static void fill_uniform(lb_data_loader *d, int32_t *out, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        out[i] = (int32_t)lb_rng_below(&d->rng, (uint64_t)d->vocab_size);
}

/* Reads n bytes at the file's position; a file that ends early (it shrank since it was
 * measured) is an error naming it. */
static lb_status read_exactly(int fd, void *buf, size_t n, const char *path, lb_err *err) {
    for (size_t got = 0; got < n;) {
        ssize_t r = read(fd, (char *)buf + got, n - got);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0)
            return lb_fail(err, LB_ERR_IO, "cannot read token shard %s: %s", path, strerror(errno));
        if (r == 0)
            return lb_fail(err, LB_ERR_FORMAT,
                           "token shard %s ended at byte %zu while it was read: it changed after "
                           "it was opened",
                           path, got);
        got += (size_t)r;
    }
    return LB_OK;
}

static lb_status open_shard(lb_data_loader *d, const char *path, lb_err *err) {
    int fd = open(path, O_RDONLY);
    if (fd < 0)
        return lb_fail(err, LB_ERR_IO, "cannot open token shard %s: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        close(fd);
        return lb_fail(err, LB_ERR_IO, "cannot stat token shard %s: %s", path, strerror(errno));
    }
    size_t header_bytes = LB_SHARD_HEADER_INTS * sizeof(int32_t);
    if ((size_t)st.st_size < header_bytes) {
        close(fd);
        return lb_fail(err, LB_ERR_FORMAT,
                       "token shard %s is truncated: %lld bytes, shorter than the %zu-byte header",
                       path, (long long)st.st_size, header_bytes);
    }
    int32_t header[LB_SHARD_HEADER_INTS];
    lb_status rs = read_exactly(fd, header, header_bytes, path, err);
    if (rs != LB_OK) {
        close(fd);
        return rs;
    }
    size_t k = 0;
    while (k < sizeof layouts / sizeof layouts[0] && header[0] != layouts[k].magic)
        k++;
    if (k == sizeof layouts / sizeof layouts[0]) {
        close(fd);
        return lb_fail(err, LB_ERR_FORMAT,
                       "%s is not a token shard: magic at offset 0 is %d, expected %d (GPT-2, "
                       "uint16 tokens) or %d (Llama 3, uint32 tokens)",
                       path, header[0], LB_SHARD_MAGIC, LB_SHARD_MAGIC_LLAMA3);
    }
    if (header[1] != layouts[k].version) {
        close(fd);
        return lb_fail(err, LB_ERR_FORMAT,
                       "token shard %s has version %d at offset 4, expected %d (the %s layout, "
                       "uint%zu tokens)",
                       path, header[1], layouts[k].version, layouts[k].name,
                       8 * layouts[k].token_bytes);
    }
    int64_t n = header[2];
    if (n < 0) {
        close(fd);
        return lb_fail(err, LB_ERR_FORMAT,
                       "token shard %s: the token count at offset 8 is %lld, below zero", path,
                       (long long)n);
    }
    d->token_bytes = layouts[k].token_bytes;
    size_t want = header_bytes + (size_t)n * d->token_bytes;
    if ((size_t)st.st_size != want) {
        close(fd);
        return lb_fail(err, LB_ERR_FORMAT,
                       "token shard %s is truncated or oversized: the count at offset 8 says "
                       "%lld tokens of %zu bytes (%zu bytes in all), the file has %lld bytes",
                       path, (long long)n, d->token_bytes, want, (long long)st.st_size);
    }
    d->tokens = malloc(n > 0 ? (size_t)n * d->token_bytes : 1);
    if (d->tokens == NULL) {
        close(fd);
        return lb_fail(err, LB_ERR_NOMEM, "out of host memory for the %lld tokens of %s",
                       (long long)n, path);
    }
    rs = read_exactly(fd, d->tokens, (size_t)n * d->token_bytes, path, err);
    close(fd);
    if (rs != LB_OK) return rs;
    d->n_tokens = n;
    for (int64_t i = 0; i < n; i++) {
        uint32_t t = token_at(d, i);
        if (t >= (uint32_t)d->vocab_size)
            return lb_fail(err, LB_ERR_FORMAT,
                           "token shard %s: token %u at offset %zu is outside the vocabulary "
                           "(size %d)",
                           path, t, header_bytes + (size_t)i * d->token_bytes, d->vocab_size);
    }
    int64_t need = d->batch * d->seq + 1, spare = n > 0 ? n - 1 : 0;
    if (n >= need) return LB_OK;
    char parts[80] = "every rank's micro-batch together"; /* lb_data_open: maybe several ranks. */
    if (d->ranks > 1)
        snprintf(parts, sizeof parts, "%d ranks x %lld, a rank's micro-batch", d->ranks,
                 (long long)(d->batch / d->ranks));
    return lb_fail(err, LB_ERR_USAGE,
                   "token shard %s has %lld tokens, fewer than one batch reads: %lld sequences "
                   "(%s) x %lld tokens + 1 = %lld; it holds %lld sequences of %lld tokens (+ 1): "
                   "give a longer shard, %sor a smaller --batch or --seq",
                   path, (long long)n, (long long)d->batch, parts, (long long)d->seq,
                   (long long)need, (long long)(spare / d->seq), (long long)d->seq,
                   d->ranks > 1 ? "fewer ranks, " : "");
}

lb_status lb_data_open(const char *spec, int32_t vocab_size, int64_t batch, int64_t seq,
                       uint64_t seed, lb_data_loader **out, lb_err *err) {
    return lb_data_open_ranks(spec, vocab_size, batch, 1, seq, seed, out, err);
}

lb_status lb_data_open_ranks(const char *spec, int32_t vocab_size, int64_t rank_batch, int ranks,
                             int64_t seq, uint64_t seed, lb_data_loader **out, lb_err *err) {
    *out = NULL;
    int64_t batch = rank_batch * ranks;
    lb_data_loader *d = calloc(1, sizeof *d);
    if (d == NULL) return lb_fail(err, LB_ERR_NOMEM, "out of host memory for the data loader");
    d->vocab_size = vocab_size;
    d->batch = batch;
    d->ranks = ranks;
    d->seq = seq;
    lb_rng_seed(&d->rng, seed);
    lb_status st = LB_OK;
    if (strcmp(spec, "synthetic") == 0) {
        d->kind = SRC_SYNTHETIC;
        d->drawn = malloc((size_t)(2 * batch * seq) * sizeof *d->drawn);
        if (d->drawn == NULL)
            st = lb_fail(err, LB_ERR_NOMEM, "out of host memory for a synthetic batch");
    } else if (strcmp(spec, "repeat") == 0) {
        d->kind = SRC_REPEAT;
        d->fixed = malloc((size_t)(batch * seq + 1) * sizeof *d->fixed);
        if (d->fixed == NULL)
            st = lb_fail(err, LB_ERR_NOMEM, "out of host memory for the repeated batch");
        else
            fill_uniform(d, d->fixed, batch * seq + 1);
    } else {
        d->kind = SRC_SHARD;
        st = open_shard(d, spec, err);
    }
    if (st != LB_OK) {
        lb_data_close(d);
        return st;
    }
    *out = d;
    return LB_OK;
}

void lb_data_next_part(lb_data_loader *d, int part, int parts, int32_t *inputs, int32_t *targets) {
    int64_t n = d->batch * d->seq, mine = n / parts, first = mine * part;
    size_t bytes = (size_t)mine * sizeof *inputs;
    switch (d->kind) {
    case SRC_SYNTHETIC:
        fill_uniform(d, d->drawn, 2 * n); /* every input of the batch, then every target */
        memcpy(inputs, d->drawn + first, bytes);
        memcpy(targets, d->drawn + n + first, bytes);
        break;
    case SRC_REPEAT:
        memcpy(inputs, d->fixed + first, bytes);
        memcpy(targets, d->fixed + first + 1, bytes);
        break;
    case SRC_SHARD:
        if (d->pos + n + 1 > d->n_tokens) d->pos = 0;
        for (int64_t i = 0; i < mine; i++) {
            inputs[i] = (int32_t)token_at(d, d->pos + first + i);
            targets[i] = (int32_t)token_at(d, d->pos + first + i + 1);
        }
        d->pos += n;
        break;
    }
}

void lb_data_next(lb_data_loader *d, int32_t *inputs, int32_t *targets) {
    lb_data_next_part(d, 0, 1, inputs, targets);
}

int64_t lb_data_shard_tokens(const lb_data_loader *d) {
    return d->kind == SRC_SHARD ? d->n_tokens : 0;
}

void lb_data_close(lb_data_loader *d) {
    if (d == NULL) return;
    free(d->tokens);
    free(d->fixed);
    free(d->drawn);
    free(d);
}
