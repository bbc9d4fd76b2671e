/* report.h: a report of stored runs: one self-contained HTML page and a Markdown file.
 *
 * Given a set of runs (history/select.h: ids, repeats, sweeps by cell, or a time window),
 * it writes to a folder (an out_dir that is a file is LB_ERR_USAGE, one where no file can
 * be made LB_ERR_IO; each naming it, nothing written):
 *   report.html   the page: an executive summary of findings computed from the data (each
 *                 sentence with its figure), a table of key metrics per configuration,
 *                 charts as inline SVG (report/svg.h; no scripts, fonts or network), and
 *                 each run's provenance;
 *   report.md     the same summary and tables, the charts as links to the SVG files;
 *   chart-N.svg   each chart on its own.
 * Charts: the first key metric per configuration with the spread of repeats (bars with
 * min-max whiskers); loss and step time per step for training; TTFT and latency CDFs and
 * p99 TTFT/TPOT against QPS for load runs; GPU utilisation, power and device memory where
 * the runs measured them; throughput per rank against the rank count (a train run's config
 * "ranks") where runs differ in it;
 * each benchmark's history over time with its change points (history/history.h) marked.
 * A CDF is drawn through at most 500 quantiles and a series longer than 5,000 values
 * through every k-th one, so a page stays small; what a chart or a table leaves out (lines,
 * bars, rates, points, rank counts, benchmarks' histories) is said in a line beside it. Every file
 * is written whole into a staging folder inside the output folder, then renamed into place, the
 * page last: a report that fails, is interrupted (SIGINT/SIGTERM: LB_ERR_INTERRUPTED), or finds a
 * folder where one of its files goes (refused before any file moves), leaves the folder's earlier
 * report as it was; a file replaced keeps its permissions. Runs that did not end ok are named with
 * their status in a finding and in the provenance table, and left out of every figure: a
 * configuration's medians are of its ok runs, one with none says so. A configuration
 * whose runs are different benchmarks (history/bench.h) is named in a finding. Not here: choosing
 * the runs (the CLI), the GPU. */
#ifndef LB_REPORT_REPORT_H
#define LB_REPORT_REPORT_H

#include <stddef.h>

#include "core/status.h"
#include "history/select.h"
#include "store/store.h"

typedef struct {
    const char *out_dir;         /* the folder (created when missing) */
    const char *title;           /* the page's title */
    double threshold_pct;        /* smallest history change called a regression (default 3) */
    const char *const *sweep_of; /* per group of the set: the sweep it is a cell of, shown
                                    before its label ("mon: batch=8"), or NULL; NULL: none */
} lb_report_params;

lb_report_params lb_report_default_params(void);

/* Writes the report of set. html_path receives the page's path. A set with no run is
 * LB_ERR_USAGE. */
lb_status lb_report_write(lb_store *s, const lb_run_set *set, const lb_report_params *p,
                          char *html_path, size_t html_path_bytes, lb_err *err);

#endif
