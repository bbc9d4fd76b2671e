/* kvcache.h: the blocks of a paged key/value cache: a fixed number of blocks of
 * block_size tokens each, handed out from a free list.
 *
 * Only the bookkeeping lives here: which blocks are free. Where a block's keys and values
 * are (a CPU array or a device allocation) is the backend's business; a sequence's block
 * table (its blocks in position order) lives in the scheduler (sched.h). Freeing a block
 * twice, or one that was never handed out, is a bug the pool catches with an assertion.
 * Not here: sharing blocks between sequences (prefix caching), swapping to the host. */
#ifndef LB_ENGINE_KVCACHE_H
#define LB_ENGINE_KVCACHE_H

#include <stdbool.h>
#include <stdint.h>

#include "core/status.h"

typedef struct {
    int32_t n_blocks;
    int32_t block_size; /* tokens per block */
    int32_t *free_list; /* [n_blocks] stack of free block ids; owned */
    int32_t n_free;
    uint8_t *used; /* [n_blocks] 1 while handed out; owned */
} lb_kv_blocks;

/* All n_blocks blocks free. */
lb_status lb_kvcache_init(lb_kv_blocks *kv, int32_t n_blocks, int32_t block_size, lb_err *err);
void lb_kvcache_free(lb_kv_blocks *kv); /* accepts zeroed */
/* A free block's id, or -1 when none is left. */
int32_t lb_kvcache_take(lb_kv_blocks *kv);
/* Returns a block taken before. */
void lb_kvcache_give(lb_kv_blocks *kv, int32_t block);
/* Blocks needed to hold n_tokens tokens. */
static inline int32_t lb_kvcache_blocks_for(const lb_kv_blocks *kv, int64_t n_tokens) {
    return (int32_t)((n_tokens + kv->block_size - 1) / kv->block_size);
}

#endif
