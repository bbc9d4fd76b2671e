/* history.h: a benchmark's runs over time, and where they changed.
 *
 * The store's ok runs are grouped by their benchmark identity (bench.h); a history is one
 * identity's runs, oldest first, with one key metric's value each. lb_history_changes
 * finds its change points (changepoint.h) and says, for each, the mean before and after
 * (over the neighbouring segments) and whether the change is a regression: worse by at
 * least threshold_pct on a performance metric. Every ok run's row and metrics (not its
 * raw samples) are read to compute its identity, so a call reads the store's runs once.
 * A Ctrl-C while the runs are read or the change points searched is LB_ERR_INTERRUPTED. */
#ifndef LB_HISTORY_HISTORY_H
#define LB_HISTORY_HISTORY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "core/status.h"
#include "history/bench.h"
#include "history/changepoint.h"
#include "store/store.h"

typedef struct {
    char key[13];
    char kind[16];
    char identity[LB_BENCH_ID_BYTES];
    size_t n_runs;
    int64_t last_id;
    double last_wall_s;
} lb_history_bench;

/* Every benchmark with at least one ok run, most recently run first. *out: malloc'd. */
lb_status lb_history_benchmarks(lb_store *s, lb_history_bench **out, size_t *n, lb_err *err);

/* The benchmark of stored run id (its key into key_out). A run that does not exist, or of
 * a kind without key metrics (a sweep's table), is LB_ERR_USAGE naming it. */
lb_status lb_history_key_of_run(lb_store *s, int64_t id, char key_out[13], lb_err *err);

typedef struct {
    int64_t id;
    double start_wall_s;
    double value;
} lb_history_point;

/* The ok runs of benchmark key with a value of metric (NULL: the kind's first key
 * metric), oldest first; the benchmark's
 * description into *bench. *out: malloc'd. An unknown key is LB_ERR_USAGE. */
lb_status lb_history_points(lb_store *s, const char *key, const char *metric,
                            lb_history_bench *bench, lb_history_point **out, size_t *n,
                            lb_err *err);

typedef struct {
    size_t index;      /* first point of the new segment */
    int64_t run_id;    /* its run */
    double before;     /* mean of the segment before */
    double after;      /* mean of the segment after */
    double change_pct; /* (after - before) / |before|, percent; NaN when before is 0 */
    bool regression;   /* worse by threshold_pct or more, on a performance metric */
    const char *word;  /* the key metric's better/worse word, or "small change" */
} lb_history_change;

/* The change points of pts[0..n-1] on metric k, oldest first, into out: the newest cap of
 * them when there are more (the newest decides whether the benchmark regressed). */
lb_status lb_history_changes(const lb_history_point *pts, size_t n, const lb_key_metric *k,
                             double threshold_pct, const lb_changepoint_params *cp,
                             lb_history_change *out, size_t *n_out, size_t cap, lb_err *err);

/* The size of change h as people read it, into buf: "+8.0%", or from a before of 0, which
 * no percentage is of, the change itself: "+3 from 0". Returns buf. */
const char *lb_history_change_text(const lb_history_change *h, char *buf, size_t cap);

/* Compares stored run id with its benchmark's history: one line to f ("run 12, benchmark
 * KEY: no change point in 9 runs of tokens_per_s", or the newest change point with its
 * verdict); *regressed when that change point is a regression. */
lb_status lb_history_check_run(lb_store *s, int64_t id, double threshold_pct, FILE *f,
                               bool *regressed, lb_err *err);

/* The key metric named metric of kind (NULL: the kind's first), or NULL. */
const lb_key_metric *lb_history_metric(const char *kind, const char *metric);

#endif
