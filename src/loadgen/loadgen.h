/* loadgen.h: the load generator: MLPerf-style scenarios against a system under test.
 *
 * lb_loadgen_run_sut() turns a dataset and a scenario into a schedule of queries, submits
 * each at its scheduled time to a system under test (lb_sut_ops below: the HTTP replica
 * pool of sut/pool.h, which lb_loadgen_run uses, or the engine in process, infer/), times
 * every query from its scheduled time (so a server or client that falls behind shows up
 * as queueing in TTFT and latency, with no coordinated omission), and fills an lb_result:
 * the config, one series per per-query quantity (timestamps, TTFT, TPOT, latency,
 * queueing, tokens, status) and the summary metrics of metrics.h. Whatever the SUT, the
 * verdict, failure rule, percentiles, summary and stored series are computed here, once.
 * It runs on the calling thread; the SUT's serve() is its clock. It never prints (except
 * through the progress callback the CLI gives it) and never touches the store.
 *
 * Scenarios: Offline (every query scheduled at t0, sent as fast as max_inflight allows),
 * Server (arrivals at qps from a seeded generator: Poisson, or gamma gaps with
 * `burstiness` as vLLM's bench does, optionally ramped up from 0; the last one scheduled
 * at or after min_duration),
 * SingleStream (one query at a time) and fixed concurrency N (closed loop: a query is
 * scheduled the moment a slot frees). Performance mode cycles through the dataset in a
 * seeded order until min_queries and min_duration are both met; accuracy mode sends
 * every sample exactly once and keeps the generated texts. */
#ifndef LB_LOADGEN_LOADGEN_H
#define LB_LOADGEN_LOADGEN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/result.h"
#include "core/status.h"
#include "loadgen/dataset.h"
#include "loadgen/metrics.h"
#include "sut/pool.h"

typedef struct {
    lb_scenario scenario;
    lb_mode mode;
    double qps;                         /* Server: mean arrival rate, queries/s */
    double burstiness;                  /* Server: gaps ~ Gamma(burstiness) of mean 1/qps; 1 =
                                           Poisson, < 1 burstier, > 1 more even; 0.001 to
                                           1000 */
    double ramp_up_s;                   /* Server: the rate rises linearly from 0 to qps over
                                           this many seconds; 0 = none */
    int64_t concurrency;                /* CONCURRENCY: queries in flight */
    double min_duration_s;              /* performance mode: run at least this long */
    int64_t min_queries;                /* performance mode: at least this many; 0 = dataset size */
    int64_t max_inflight;               /* Offline/Server cap on queries in flight; 0 = none */
    int64_t max_failed;                 /* queries that may fail (after retries) before the
                                           run counts as failed */
    int64_t warmup_queries;             /* sent before the run, not recorded */
    int64_t preconnect;                 /* connections opened before the first step;
                                           -1: as many as may be in flight, 0: none; at most
                                           lb_loadgen_connection_room() */
    uint64_t sample_seed;               /* sample order */
    uint64_t schedule_seed;             /* Poisson arrivals */
    uint64_t qsl_seed;                  /* which samples form the performance set
                                           (LoadGen's qsl_rng_seed) */
    int64_t performance_sample_count;   /* performance mode draws from this many samples
                                           (conversations), chosen with qsl_seed: LoadGen's
                                           performance_sample_count_override; 0 or at least
                                           the data set's: every sample */
    int32_t max_tokens;                 /* output tokens when the sample does not say */
    lb_constraints constraints;         /* Server latency bounds, SLO, early stopping */
    double user_pctl[LB_MAX_USER_PCTL]; /* percentiles reported beside the fixed ones */
    int n_user_pctl;
    double drain_s;                /* after SIGINT: wait this long for in-flight */
    lb_openai_request request;     /* body fields (api, model, stream, ...) */
    lb_pool_params pool;           /* endpoints, HTTP, retries, ejection */
    const char *model_key;         /* "llama3.1-8b", for the record */
    const char *api_key_env;       /* the variable's NAME only, for the record */
    const char *dataset_path;      /* for the record */
    const lb_tokenizer *tokenizer; /* counts the output of answers without usage
                                      (at completion); NULL: none */
    const char *tokenizer_path;    /* for the record */
    /* Called about twice a second while running (may be NULL). */
    void (*progress)(void *user, const lb_loadgen_progress *p);
    void *progress_user;
} lb_loadgen_params;

lb_loadgen_params lb_loadgen_default_params(void);

#define LB_LOADGEN_MAX_PRECONNECT 65536

/* The most queries one Offline or Server run plans: about 10 GB of query records and
 * stored series (query indices are 32-bit). A bigger plan is LB_ERR_USAGE. */
#define LB_LOADGEN_MAX_QUERIES 100000000

/* How many connections may be opened before a run: what the open-file limit leaves room
 * for (less 64 for everything else), at most LB_LOADGEN_MAX_PRECONNECT. */
int64_t lb_loadgen_connection_room(void);

/* What a run leaves besides the lb_result: its summary, and in accuracy mode the
 * generated text of every sample (NULL where it failed). */
typedef struct {
    lb_loadgen_summary summary;
    bool summarized; /* summary is filled (the run got as far as its end) */
    char **texts;    /* owned; n_texts == dataset size in accuracy mode, else 0 */
    size_t n_texts;
    /* accuracy mode, where the SUT gives its own token ids (the engine): each sample's
     * generated ids (owned; NULL where it failed or the SUT gives none) */
    uint32_t **ids;
    size_t *n_ids;
} lb_loadgen_report;

void lb_loadgen_report_free(lb_loadgen_report *r);

/* Every option that shapes the run, as JSON (new reference; NULL when out of memory). The
 * API key appears only as the name of its environment variable; the two seeds, unsigned
 * 64-bit, are decimal strings; a name or path that is not UTF-8 is written with '?' for
 * the bytes that are not. lb_loadgen_run stores it as the result's config. */
json_t *lb_loadgen_config_json(const lb_loadgen_params *p, const lb_dataset *ds);

/* A system under test as the scenario engine (lb_loadgen_run_sut) drives it: the HTTP
 * replica pool of p->pool (lb_loadgen_run), or the built-in engine in process (infer/).
 * Everything measured, judged, summarized and stored is the scenario engine's; a SUT only
 * answers queries and reports each one's events through the callbacks it was opened with
 * (sut/pool.h's: on_token at every generated piece, on_retry, and one on_done per query,
 * which may come from inside submit). Times are lb_clock_now_ns() values. */
typedef struct {
    /* Prepares to answer ds's samples (request bodies, prompt ids) before t0. */
    lb_status (*open)(void *self, const lb_loadgen_params *p, const lb_dataset *ds,
                      const lb_pool_callbacks *cb, void *user, lb_err *err);
    /* Starts query `tag` on sample `sample`. An error counts as the query's failure. */
    lb_status (*submit)(void *self, uint64_t tag, uint32_t sample, lb_err *err);
    /* Works (network, engine steps) until until_ns or an event, whichever comes first. */
    void (*serve)(void *self, int64_t until_ns);
    /* Ends every query in flight with `why` through on_done. */
    void (*abort_all)(void *self, lb_qerr why);
    /* Opens n connections before t0; NULL when there is nothing to open. */
    lb_status (*preconnect)(void *self, int64_t n, int64_t *opened, lb_err *err);
    /* Where queries went, with their counts. */
    const lb_replica *(*replicas)(void *self, size_t *n);
    /* Releases what open made (the SUT itself stays its owner's). */
    void (*close)(void *self);
} lb_sut_ops;

typedef struct {
    const lb_sut_ops *ops;
    void *self;
} lb_sut;

/* Runs the load against sut. Fills `out` (config, series, metrics; status ok, failed or
 * interrupted) and, when report is not NULL, *report (caller frees with lb_loadgen_report_free).
 * Returns LB_OK, LB_ERR_INTERRUPTED when SIGINT stopped it, or LB_ERR_RUNTIME when no
 * query completed or more than max_failed failed (the sentence says how many and why),
 * each with everything measured kept; another status when the run could not start. */
lb_status lb_loadgen_run_sut(const lb_loadgen_params *p, const lb_dataset *ds, const lb_sut *sut,
                             lb_result *out, lb_loadgen_report *report, lb_err *err);

/* lb_loadgen_run_sut against the HTTP replicas of p->pool. */
lb_status lb_loadgen_run(const lb_loadgen_params *p, const lb_dataset *ds, lb_result *out,
                         lb_loadgen_report *report, lb_err *err);

#endif
