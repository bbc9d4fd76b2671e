/* loadrun.h: the runs of `llmbench load` and `llmbench infer`, whatever answers them.
 *
 * One rate (or the closed-loop scenarios), a list of Server rates (--sweep-qps), or a
 * search for the highest Server rate whose run is VALID (--search-qps: loadgen/search.h,
 * each trial a whole run at the configured minimum duration). Every run is stored on its
 * own; the runs of a sweep or a search carry one tag that groups them ("sweep:..." or
 * "search:..."). Prints the MLPerf summary of a single run, or the table of rate against
 * the figures with the highest VALID rate named; with --json one document. Writes the
 * --out files of each run. The commands parse their own options and build the SUT; this
 * module owns what follows, so both behave the same. */
#ifndef LB_CLI_LOADRUN_H
#define LB_CLI_LOADRUN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cli/args.h"
#include "core/result.h"
#include "loadgen/loadgen.h"
#include "loadgen/search.h"
#include "model/tokenizer.h"

#define LB_LOADRUN_MAX_RATES 32

typedef struct {
    const char *command; /* "load" or "infer": the result's kind and the messages' prefix */
    const lb_cli_common *common;
    int argc; /* main's, for the stored command line */
    char **argv;
    lb_loadgen_params *p; /* the runs' parameters; qps is set per rate */
    const lb_dataset *ds;
    /* Runs one measurement with *p (set per rate) into r and rep. */
    lb_status (*run)(void *user, lb_result *r, lb_loadgen_report *rep, lb_err *err);
    void *run_user;
    const char *name; /* the stored run's name */
    const char *const *tags;
    int n_tags;
    const char *sut_name;    /* for the summary and mlperf_log_detail.txt */
    const char *out_dir;     /* --out, checked before (lb_loadrun_check_out_dir); NULL: none */
    uint64_t qsl_seed;       /* for mlperf_log_detail.txt */
    const lb_tokenizer *tok; /* the accuracy log's ids where the SUT gives none; NULL: none */
    const double *rates;     /* --sweep-qps: [n_rates]; NULL: one run at p->qps */
    size_t n_rates;
    lb_search_params search; /* --search-qps: start_qps > 0 */
} lb_loadrun_params;

/* Parses "R1,R2,.." (positive, at most LB_LOADRUN_MAX_RATES) for --sweep-qps. */
lb_status lb_loadrun_parse_rates(const char *command, const char *text, double *rates, size_t *n);

/* --out DIR before the run: the folder exists (made now when missing) and can be written
 * into, so a bad --out costs no run. */
lb_status lb_loadrun_check_out_dir(const char *command, const char *dir);

/* Runs, stores, prints and writes as above; returns the exit status (README): 130
 * interrupted, 1 failed, 3 INVALID (a search: no VALID rate found), else 0. */
int lb_loadrun(const lb_loadrun_params *lp);

#endif
