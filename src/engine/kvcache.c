/* kvcache.c: the free list of kvcache.h. Blocks are handed out lowest id first on a
 * fresh pool, then last-freed first (a stack), which keeps recently used blocks warm. */
#include "engine/kvcache.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

lb_status lb_kvcache_init(lb_kv_blocks *kv, int32_t n_blocks, int32_t block_size, lb_err *err) {
    memset(kv, 0, sizeof *kv);
    if (n_blocks < 1 || block_size < 1)
        return lb_fail(err, LB_ERR_USAGE, "a KV cache needs at least one block of one token");
    kv->free_list = malloc((size_t)n_blocks * sizeof *kv->free_list);
    kv->used = calloc((size_t)n_blocks, 1);
    if (kv->free_list == NULL || kv->used == NULL) {
        lb_kvcache_free(kv);
        return lb_fail(err, LB_ERR_NOMEM, "out of memory for %d KV blocks", n_blocks);
    }
    kv->n_blocks = n_blocks;
    kv->block_size = block_size;
    for (int32_t i = 0; i < n_blocks; i++)
        kv->free_list[i] = n_blocks - 1 - i;
    kv->n_free = n_blocks;
    return LB_OK;
}

void lb_kvcache_free(lb_kv_blocks *kv) {
    if (kv == NULL) return;
    free(kv->free_list);
    free(kv->used);
    memset(kv, 0, sizeof *kv);
}

int32_t lb_kvcache_take(lb_kv_blocks *kv) {
    if (kv->n_free == 0) return -1;
    int32_t b = kv->free_list[--kv->n_free];
    kv->used[b] = 1;
    return b;
}

void lb_kvcache_give(lb_kv_blocks *kv, int32_t block) {
    assert(block >= 0 && block < kv->n_blocks && kv->used[block]);
    kv->used[block] = 0;
    kv->free_list[kv->n_free++] = block;
}
