/* data.h: token batches for training.
 *
 * Three sources behind one loader:
 *   "synthetic"  a fresh batch every step, tokens uniform over the vocabulary (seeded);
 *   "repeat"     one synthetic batch returned every step: an overfitting check whose
 *                loss must fall;
 *   FILE.bin     an llm.c token shard: a header of 256 little-endian int32 (magic,
 *                version, token count, rest zero) then that many tokens, uint16 in the
 *                GPT-2 layout (magic 20240520, version 1) or uint32 in the Llama 3 one
 *                (magic 20240801, version 7: ids past 65535). Batches are read as
 *                consecutive windows of B*T+1 tokens (targets are inputs shifted by one),
 *                wrapping at the end.
 * A shard is read whole into memory with read(2) and validated completely when opened
 * (magic, version, size, every token id below the vocabulary), so a bad file fails before
 * anything runs, with the file and the byte offset of the problem in the message, and a
 * file changed or truncated during the run cannot affect it (a memory map would end the
 * process with SIGBUS). It costs the file's 2 or 4 bytes of host memory a token. The loader
 * does not shuffle.
 *
 * Data parallelism: `batch` is the global batch; rank r of N reads its part with
 * lb_data_next_part, rows [r B/N, (r + 1) B/N) of the batch every rank draws alike, so N
 * ranks read together exactly what one rank reading the whole batch reads. */
#ifndef LB_TRAIN_DATA_H
#define LB_TRAIN_DATA_H

#include <stdint.h>

#include "core/status.h"

#define LB_SHARD_MAGIC          20240520 /* GPT-2 layout: uint16 tokens */
#define LB_SHARD_VERSION        1
#define LB_SHARD_MAGIC_LLAMA3   20240801 /* Llama 3 layout: uint32 tokens */
#define LB_SHARD_VERSION_LLAMA3 7
#define LB_SHARD_HEADER_INTS    256

typedef struct lb_data_loader lb_data_loader;

/* spec: "synthetic", "repeat" or a path to a .bin shard. Caller frees with lb_data_close. A
 * shard shorter than batch * seq + 1 tokens is LB_ERR_USAGE. */
lb_status lb_data_open(const char *spec, int32_t vocab_size, int64_t batch, int64_t seq,
                       uint64_t seed, lb_data_loader **out, lb_err *err);
/* lb_data_open for `ranks` data-parallel ranks of rank_batch sequences each: the batch is
 * ranks x rank_batch, and a shard too short for it is refused naming the rank count. */
lb_status lb_data_open_ranks(const char *spec, int32_t vocab_size, int64_t rank_batch, int ranks,
                             int64_t seq, uint64_t seed, lb_data_loader **out, lb_err *err);
/* Fills inputs and targets, each batch*seq token ids. */
void lb_data_next(lb_data_loader *d, int32_t *inputs, int32_t *targets);
/* Advances by one batch and fills inputs and targets with its sequences [part * batch /
 * parts, (part + 1) * batch / parts), (batch / parts) * seq token ids each; batch must be
 * a multiple of parts (the caller checks). */
void lb_data_next_part(lb_data_loader *d, int part, int parts, int32_t *inputs, int32_t *targets);
/* Number of tokens in the shard (0 for synthetic sources). */
int64_t lb_data_shard_tokens(const lb_data_loader *d);
void lb_data_close(lb_data_loader *d);

#endif
