/* engine_logits.c: the engine's logits and greedy tokens for a list of ids, as JSON, for
 * comparing with another implementation (tools/hf_engine_check.py runs transformers on
 * the same model directory). Built by `make bench` (build/bench/engine_logits).
 * usage: engine_logits DIR cpu|gpu N_GEN ID [ID ...]
 * prints {"logits": [[V floats] per prompt position], "greedy": [N_GEN ids]} */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"
#include "model/hf_model.h"

static void read_hf(void *ctx, const lb_param_tensor *t, lb_gpu_dtype dt, void *dst) {
    lb_hf_model_read(ctx, t, dt, dst);
}

int main(int argc, char **argv) {
    if (argc < 5) {
        fprintf(stderr, "usage: %s DIR cpu|gpu N_GEN ID [ID ...]\n", argv[0]);
        return 2;
    }
    lb_hf_model hf;
    lb_err err;
    if (lb_hf_model_open(&hf, argv[1], &err) != LB_OK) {
        fprintf(stderr, "%s\n", err.msg);
        return 2;
    }
    int n_gen = atoi(argv[3]), n = argc - 4;
    int32_t *ids = malloc((size_t)n * sizeof *ids);
    for (int i = 0; i < n; i++)
        ids[i] = atoi(argv[4 + i]);
    lb_weights w = {.cfg = hf.cfg, .ctx = &hf, .read = read_hf};
    lb_engine_params p = lb_engine_default_params();
    p.device = strcmp(argv[2], "cpu") == 0 ? LB_ENGINE_CPU : LB_ENGINE_GPU;
    p.max_seqs = 64;
    p.step_tokens = 256;
    p.max_ctx = hf.cfg.max_seq < 256 ? hf.cfg.max_seq : 256;
    p.kv_tokens = 4096;
    lb_engine *e;
    if (lb_engine_open(&e, &p, &w, &err) != LB_OK) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    const int V = hf.cfg.vocab_size;
    float *lg = malloc((size_t)n * V * sizeof *lg);
    if (lb_engine_logits(e, ids, n, lg, &err) != LB_OK) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    printf("{\"logits\":[");
    for (int i = 0; i < n; i++) {
        printf("%s[", i ? "," : "");
        for (int v = 0; v < V; v++)
            printf("%s%.7g", v ? "," : "", lg[(size_t)i * V + v]);
        printf("]");
    }
    printf("],\"greedy\":[");
    lb_engine_request rq = {
        .sampling = lb_sample_default(), .max_tokens = n_gen, .ignore_eos = true};
    int64_t id;
    if (lb_engine_submit(e, ids, n, &rq, &id, &err) != LB_OK) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    int got = 0;
    while (lb_engine_pending(e) > 0) {
        const lb_engine_event *ev;
        int32_t k;
        if (lb_engine_step(e, &ev, &k, &err) != LB_OK) {
            fprintf(stderr, "%s\n", err.msg);
            return 1;
        }
        for (int32_t j = 0; j < k; j++)
            printf("%s%d", got++ ? "," : "", ev[j].token);
    }
    printf("]}\n");
    lb_engine_close(e);
    lb_hf_model_close(&hf);
    free(ids);
    free(lg);
    return 0;
}
