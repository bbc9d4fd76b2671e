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
    const lb_tokenizer *tok; /* the accuracy log's ids where the SUT gives none; NULL: none */
    const double *rates;     /* --sweep-qps: [n_rates]; NULL: one run at p->qps */
    size_t n_rates;
    lb_search_params search; /* --search-qps: start_qps > 0 */
} lb_loadrun_params;

/* The options load and infer share for what follows a run: parsed by args.h into this
 * struct (LB_LOADRUN_ARG_SPECS), checked by lb_loadrun_opts_check. */
typedef struct {
    const char *sweep;                  /* --sweep-qps text; NULL: none */
    double search_qps;                  /* --search-qps start; 0: none */
    double search_tol;                  /* --search-tolerance */
    int64_t search_trials;              /* --search-trials */
    int64_t max_failed;                 /* --max-failed */
    const char *out_dir;                /* --out */
    const char *name;                   /* --name; NULL: the command's default */
    lb_arg_list tags;                   /* --tag */
    double rates[LB_LOADRUN_MAX_RATES]; /* --sweep-qps parsed */
    size_t n_rates;
} lb_loadrun_opts;

#define LB_LOADRUN_OPTS_DEFAULT                                                                    \
    { .search_tol = 0.05, .search_trials = 16 }

/* clang-format off */
#define LB_LOADRUN_ARG_SPECS(o)                                                                  \
    {"--sweep-qps", LB_ARG_STRING, &(o)->sweep, "R1,R2,..",                                  \
     "Server: one stored run per rate, in turn, then a table of rate against the figures", 0, \
     0, NULL},                                                                                \
    {"--search-qps", LB_ARG_DOUBLE, &(o)->search_qps, "R",                                   \
     "Server: find the highest rate whose run is VALID, starting at R q/s: double or halve "   \
     "until a VALID rate lies below one that is not, then bisect; each trial a whole run "    \
     "(set --min-duration and --model-key), stored as one group", 1e-6, 1e9, NULL},          \
    {"--search-tolerance", LB_ARG_DOUBLE, &(o)->search_tol, "F",                             \
     "--search-qps stops when the VALID and not-VALID rates are within F of each other "      \
     "(default 0.05)", 1e-4, 1, NULL},                                                        \
    {"--search-trials", LB_ARG_INT, &(o)->search_trials, "N",                                \
     "--search-qps runs at most N trials (default 16)", 1, 1000, NULL},                       \
    {"--max-failed", LB_ARG_INT, &(o)->max_failed, "N",                                      \
     "queries that may fail (after their retries) before the run is stored as failed "        \
     "(default 0)", 0, 1e12, NULL},                                                           \
    {"--out", LB_ARG_STRING, &(o)->out_dir, "DIR",                                           \
     "write LoadGen's mlperf_log_summary.txt, mlperf_log_detail.txt (accuracy mode: "         \
     "mlperf_log_accuracy.json, the answers' token ids: infer's engine gives them, load "      \
     "needs --tokenizer), requests.jsonl (a line per query, token times included), "          \
     "summary.csv, llmbench_result.json (accuracy mode: generated.jsonl) there; a sweep or "  \
     "search writes one folder per rate (qps<R>)", 0, 0, NULL},                               \
    {"--name", LB_ARG_STRING, &(o)->name, "NAME",                                            \
     "name of the stored run (load: the model name, else \"load\"; infer: model-scenario)",  \
     0, 0, NULL},                                                                             \
    {"--tag", LB_ARG_LIST, &(o)->tags, "TAG", "a tag for the stored run (repeatable)", 0, 0, \
     NULL}
/* clang-format on */

/* After parsing: --qps (qps > 0), --sweep-qps and --search-qps exclude each other and are
 * the Server scenario's only (scenario: its name, "server", "offline", ...);
 * --search-tolerance and --search-trials need --search-qps; parses the rates. A usage error
 * names the options. */
lb_status lb_loadrun_opts_check(const char *command, lb_loadrun_opts *o, double qps,
                                const char *scenario);

/* Whether the rates come from --sweep-qps or --search-qps. */
bool lb_loadrun_opts_rated(const lb_loadrun_opts *o);

/* Copies what the options say into lp: name (o's, else default_name), tags, out_dir,
 * rates and the search. */
void lb_loadrun_opts_apply(const lb_loadrun_opts *o, const char *default_name,
                           lb_loadrun_params *lp);

/* --out DIR before the run: the folder exists (made now when missing) and can be written
 * into, so a bad --out costs no run. */
lb_status lb_loadrun_check_out_dir(const char *command, const char *dir);

/* Runs, stores, prints and writes as above; returns the exit status (README): 130
 * interrupted, 1 failed (a search: every trial failed), 3 INVALID (a search: no VALID
 * rate found), else 0. */
int lb_loadrun(const lb_loadrun_params *lp);

#endif
