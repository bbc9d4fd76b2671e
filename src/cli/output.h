/* output.h: how commands print a result: a metrics table for people, or one JSON
 * document (the stored run id added) for machines. */
#ifndef LB_CLI_OUTPUT_H
#define LB_CLI_OUTPUT_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "core/progress.h"
#include "core/result.h"
#include "loadgen/metrics.h"

/* Prints r as a table of its summary metrics, headed by id, kind, name and status. */
void lb_output_result_table(FILE *f, const lb_result *r, int64_t run_id);
/* Prints lb_result_to_json(r) plus "id" as one indented JSON document and a newline. */
void lb_output_result_json(FILE *f, const lb_result *r, int64_t run_id);
/* Formats a value with its unit for people: 1234567 bytes -> "1.18 MiB", 482964.79 GFLOP/s
 * -> "482.96 TFLOP/s". */
void lb_output_format_value(char *buf, size_t cap, double value, const char *unit);

/* The progress line of a load run (`load`, `infer`): "LABEL: done/planned, failed, in
 * flight, rate, elapsed, ETA", drawn on prog. */
void lb_output_loadgen_progress(lb_progress *prog, const char *label, const lb_loadgen_progress *p);

#endif
