/* openmetrics.h: the store's benchmarks as OpenMetrics text, for Prometheus' node
 * exporter textfile collector (or any scraper of the format).
 *
 * One gauge family per key metric name (history/bench.h), llmbench_<metric>, with one sample
 * per benchmark: the value of its newest ok run, labelled by the benchmark's identity
 * (benchmark key, kind, the options that shape the work, gpu, gpu_count, host) and the run id,
 * stamped with the run's start time. Kinds that share a key metric (load and infer) share its
 * family: each family's TYPE and HELP are written once, with all its samples after them, and
 * no two samples of a family have the same labels (each benchmark key is one benchmark). Two
 * more families: llmbench_run_start_seconds (when each benchmark's newest run started) and
 * llmbench_regression (1 when the newest change point of its history, on its first key
 * metric, is a regression beyond threshold_pct). Ends with "# EOF". */
#ifndef LB_HISTORY_OPENMETRICS_H
#define LB_HISTORY_OPENMETRICS_H

#include <stdio.h>

#include "core/status.h"
#include "store/store.h"

lb_status lb_openmetrics_write(lb_store *s, double threshold_pct, FILE *out, lb_err *err);

#endif
