/* summary.h: a load run's summary as text, in the layout of MLPerf's
 * mlperf_log_summary.txt ("MLPerf Results Summary", "Additional Stats", "Test Parameters
 * Used": same field names, latencies in integer nanoseconds), with one extra section
 * ("llmbench Stats") for what MLPerf does not report: failures by reason, retries,
 * replicas, token source, inter-token latency, queueing, send lag and goodput. Writing
 * text is the only job here; the numbers come from metrics.h. */
#ifndef LB_LOADGEN_SUMMARY_H
#define LB_LOADGEN_SUMMARY_H

#include <stdio.h>

#include "loadgen/metrics.h"

/* sut_name: what was measured ("http://a:8000 +1 replica, model m"). */
void lb_loadgen_summary_write(FILE *f, const lb_loadgen_summary *s, const char *sut_name);

#endif
