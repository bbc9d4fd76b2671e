/* engine_opt.c: opening the engine that engine_opt.h's options describe. */
#include "cli/engine_opt.h"

#include <stdio.h>
#include <string.h>

#include "core/log.h"
#include "model/hf_tokenizer.h"

static void read_hf(void *ctx, const lb_param_tensor *t, lb_gpu_dtype dt, void *dst) {
    lb_hf_model_read(ctx, t, dt, dst);
}

const char *lb_engine_opt_first_set(const lb_engine_opt *o) {
    const lb_engine_opt d = LB_ENGINE_OPT_DEFAULT;
    return o->random != NULL                   ? "--random"
           : strcmp(o->device, d.device) != 0  ? "--device"
           : o->gpu != d.gpu                   ? "--gpu"
           : o->max_seqs != d.max_seqs         ? "--max-seqs"
           : o->step_tokens != d.step_tokens   ? "--step-tokens"
           : o->block_size != d.block_size     ? "--block-size"
           : o->max_ctx != d.max_ctx           ? "--max-ctx"
           : o->kv_tokens != d.kv_tokens       ? "--kv-tokens"
           : o->mem_fraction != d.mem_fraction ? "--gpu-memory-fraction"
           : o->weight_seed != d.weight_seed   ? "--weight-seed"
                                               : NULL;
}

lb_status lb_engine_opt_open(const lb_engine_opt *o, const char *tokenizer_path, lb_engine_setup *s,
                             lb_err *err) {
    memset(s, 0, sizeof *s);
    s->bos_id = -1;
    if ((o->model_dir == NULL) == (o->random == NULL))
        return lb_fail(err, LB_ERR_USAGE, "give exactly one of --model DIR and --random PRESET");
    const lb_engine_opt d = LB_ENGINE_OPT_DEFAULT;
#ifndef LB_HAVE_CUDA
    if (strcmp(o->device, "gpu") == 0) /* a request this build cannot serve */
        return lb_fail(err, LB_ERR_USAGE,
                       "the GPU engine (--device gpu, the default) needs CUDA, and this llmbench "
                       "was built without it: use --device cpu");
#endif
    if (strcmp(o->device, "cpu") == 0 && (o->gpu != d.gpu || o->mem_fraction != d.mem_fraction))
        return lb_fail(err, LB_ERR_USAGE,
                       "%s is for the GPU, but --device cpu uses none: drop it or give --device "
                       "gpu",
                       o->gpu != d.gpu ? "--gpu" : "--gpu-memory-fraction");
    if (o->model_dir != NULL && o->weight_seed != d.weight_seed)
        return lb_fail(err, LB_ERR_USAGE,
                       "--weight-seed draws --random weights; --model %s brings its own: drop it",
                       o->model_dir);
    lb_weights w = {.seed = (uint64_t)o->weight_seed};
    if (o->model_dir != NULL) {
        LB_TRY(lb_hf_model_open(&s->hf, o->model_dir, err));
        w.cfg = s->hf.cfg;
        w.ctx = &s->hf;
        w.read = read_hf;
        s->bos_id = s->hf.bos_id;
        s->n_eos = s->hf.n_eos;
        memcpy(s->eos_ids, s->hf.eos_ids, sizeof s->eos_ids);
        snprintf(s->model_name, sizeof s->model_name, "%s", s->hf.cfg.name);
    } else {
        LB_TRY(lb_model_config_preset(o->random, &w.cfg, err));
        snprintf(s->model_name, sizeof s->model_name, "%s", o->random);
        /* a preset's weights name no special ids: its family's, where there is text (a
         * tokenizer) for a bos to start and an eos to end; random prompt ids get none */
        if (tokenizer_path != NULL) lb_engine_family_ids(&w.cfg, &s->bos_id, s->eos_ids, &s->n_eos);
    }
    const char *tp = tokenizer_path ? tokenizer_path : o->model_dir ? s->hf.tokenizer_path : NULL;
    lb_status st = LB_OK;
    if (tp != NULL && tp[0] == '\0')
        st = lb_fail(err, LB_ERR_USAGE,
                     "%s: no tokenizer.json or original/tokenizer.model; one is needed",
                     o->model_dir);
    else if (tp != NULL) {
        st = lb_hf_tokenizer_load(&s->tok, tp, NULL, err);
        if (st == LB_OK && lb_tokenizer_get_info(s->tok)->max_id >= (uint32_t)w.cfg.vocab_size)
            st = lb_fail(err, LB_ERR_USAGE, "%s: ids reach %u, beyond the model's vocabulary of %d",
                         tp, lb_tokenizer_get_info(s->tok)->max_id, w.cfg.vocab_size);
    }
    lb_engine_params p = lb_engine_default_params();
    p.device = strcmp(o->device, "cpu") == 0 ? LB_ENGINE_CPU : LB_ENGINE_GPU;
    p.device_index = (int)o->gpu;
    p.max_seqs = (int32_t)o->max_seqs;
    p.step_tokens = (int32_t)o->step_tokens;
    p.block_size = (int32_t)o->block_size;
    p.max_ctx = (int32_t)o->max_ctx;
    p.kv_tokens = o->kv_tokens;
    p.gpu_memory_fraction = o->mem_fraction;
    if (st == LB_OK && p.step_tokens < p.max_seqs)
        st = lb_fail(err, LB_ERR_USAGE,
                     "--step-tokens %d is below --max-seqs %d; a step must hold one token of "
                     "every sequence",
                     p.step_tokens, p.max_seqs);
    if (st == LB_OK) {
        LB_INFO("opening the %s engine for %s", o->device, s->model_name);
        st = lb_engine_open(&s->engine, &p, &w, err);
    }
    if (st != LB_OK) {
        lb_engine_opt_close(s);
        return st;
    }
    const lb_engine_info *info = lb_engine_get_info(s->engine);
    snprintf(s->name, sizeof s->name, "%s%s on %s engine (KV cache %lld tokens)", s->model_name,
             o->random ? " (random)" : "", info->backend, (long long)info->kv_tokens);
    return LB_OK;
}

void lb_engine_opt_close(lb_engine_setup *s) {
    if (s == NULL) return;
    lb_engine_close(s->engine);
    lb_tokenizer_free(s->tok);
    lb_hf_model_close(&s->hf);
    memset(s, 0, sizeof *s);
}
