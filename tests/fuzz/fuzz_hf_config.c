/* fuzz_hf_config.c: lb_hf_model_config_parse (model/hf_model.h) on arbitrary bytes.
 *
 * A refused config.json must name the file; an accepted one must be a configuration the
 * rest of llmbench can size buffers from: lb_model_config_check passes, the attention
 * width is the hidden size, and the parameter layout walks without overflow. */
#include <string.h>

#include "fuzz.h"
#include "model/hf_model.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    lb_model_config cfg;
    lb_err err = {{0}};
    if (lb_hf_model_config_parse((const char *)data, size, "fuzz/config.json", &cfg, &err) !=
        LB_OK) {
        FUZZ_CHECK(strstr(err.msg, "fuzz/config.json") != NULL);
        return 0;
    }
    FUZZ_CHECK(lb_model_config_check(&cfg, &err) == LB_OK);
    FUZZ_CHECK(cfg.family == LB_FAMILY_LLAMA && !cfg.qkv_bias && !cfg.linear_bias);
    FUZZ_CHECK(lb_model_head_dim(&cfg) * cfg.n_head == cfg.d_model);
    FUZZ_CHECK(cfg.n_head % cfg.n_kv_head == 0);
    FUZZ_CHECK(lb_model_param_layout(&cfg, NULL, 0) > 0);
    return 0;
}
