/* infer.h: `llmbench infer`: the load generator's scenarios with the built-in engine as an
 * in-process system under test.
 *
 * lb_infer_run is lb_loadgen_run_sut (loadgen/loadgen.h) with the engine behind
 * lb_sut_ops: the schedule, the records, summary, verdict, failure rule, series and
 * accuracy scoring are the load generator's, computed once for both. There is no HTTP:
 * each serve() call of the scenario loop runs one engine step when anything is pending
 * (every token a step produces is timed when the step ends, the moment a server could have
 * sent it) and otherwise sleeps until the scenario's next deadline. An answer carries the
 * engine's token ids (accuracy mode keeps them for mlperf_log_accuracy.json) and, in
 * accuracy mode, their text.
 *
 * Prompts are tokenized before t0 (the bos id prepended, Llama 3's chat format when
 * asked). Without a tokenizer (random weights), a sample's prompt is input_tokens random
 * ids, seeded: the shape of the work without its text. A request the engine refuses
 * (longer than its context or cache) fails at once as http_4xx with the engine's reason;
 * the others go on. After SIGINT no query is issued, those in flight run for up to
 * drain_s, and the run is marked interrupted with what it measured; a signal that came
 * before t0 stops the preparation (the prompts, the engine's warm-up) and the run is
 * marked interrupted with nothing measured. */
#ifndef LB_INFER_INFER_H
#define LB_INFER_INFER_H

#include <stdbool.h>
#include <stdint.h>

#include "core/result.h"
#include "core/status.h"
#include "engine/engine.h"
#include "loadgen/dataset.h"
#include "loadgen/loadgen.h"
#include "model/tokenizer.h"

typedef struct {
    /* scenario, mode, qps, concurrency, min_duration_s, min_queries, seeds, max_tokens,
     * constraints, drain_s, model_key, dataset_path, progress; request.ignore_eos and
     * request.temperature are recorded and applied; pool is unused */
    lb_loadgen_params lg;
    lb_engine *engine;       /* the system under test (caller's) */
    const lb_tokenizer *tok; /* NULL: random prompt ids (above) */
    int32_t bos_id;          /* prepended to tokenized prompts; -1: none */
    const int32_t *eos_ids;  /* [n_eos] */
    int n_eos;
    lb_sampling sampling; /* temperature from lg.request.temperature, top-k, top-p, seed */
    bool chat;            /* wrap each prompt in Llama 3's chat format as a user message */
    const char *sut_name; /* for the record: "gpu engine, llama3.1-8b (random)" */
} lb_infer_params;

/* Runs the scenario. Fills out and *report as lb_loadgen_run does, and adds the engine's
 * description to the config and its counters (KV capacity, weight bytes, preemptions,
 * steps: those of the timed queries, not the warm-up's) to the metrics. */
lb_status lb_infer_run(const lb_infer_params *p, const lb_dataset *ds, lb_result *out,
                       lb_loadgen_report *report, lb_err *err);

#endif
