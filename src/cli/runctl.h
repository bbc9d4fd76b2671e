/* runctl.h: the life of one stored run, shared by every workload command.
 *
 * A workload command (train, infer, load, comm ...) parses its options, makes an
 * lb_result with its kind, name, tags and config, and hands it here with a callback that
 * does the work. lb_runctl_run opens the store (--db, else the default place), fills the
 * provenance, records the run as `running` before any work starts, runs the callback,
 * and records how it ended:
 *   - ok          the callback returned LB_OK and no signal arrived;
 *   - interrupted SIGINT/SIGTERM arrived (core/signals.h) or the callback returned
 *                 LB_ERR_INTERRUPTED: the samples measured so far are kept;
 *   - failed      any other status; the callback's error sentence is the failure reason.
 * It then prints "llmbench: stored run ID (STATUS) in PATH" on stderr (not under -q).
 * If the store cannot be opened or the run cannot be begun, nothing runs: a benchmark
 * whose result could not be kept is not started.
 *
 * Tags: besides those the command put in r, each line of the environment variable
 * LB_RUNCTL_TAGS_ENV becomes a tag of the stored run. `llmbench sweep` and scheduled runs
 * tag the runs they start this way, so every command that stores a run can be swept or
 * scheduled without an option of its own for it.
 *
 * It does not print the result (the command does, from r, after this returns) and does
 * not decide the exit code (lb_status_exit_code of the returned status does). */
#ifndef LB_CLI_RUNCTL_H
#define LB_CLI_RUNCTL_H

#include <stdint.h>

#include "cli/args.h"
#include "core/result.h"
#include "core/status.h"

/* The workload: fills r's series and metrics (and may add config). On failure it writes
 * err and returns the failure; on a signal it returns LB_ERR_INTERRUPTED with what it
 * measured so far already in r. */
#define LB_RUNCTL_TAGS_ENV "LLMBENCH_RUN_TAGS"

typedef lb_status (*lb_runctl_work_fn)(void *ctx, lb_result *r, lb_err *err);

/* Runs work(ctx, r, err) as one stored run. argc/argv are the program's own (main's), for
 * the provenance's command line. r stays owned by the caller; on return it holds the
 * final status, failure, times and provenance. *run_id receives the stored id (-1 when
 * nothing was stored). Returns the workload's status (LB_OK, LB_ERR_INTERRUPTED, or its
 * failure, with err set), or the store's error when the run could not be kept; in the
 * latter case after a finished workload, err says so and the result is still in r. */
lb_status lb_runctl_run(const lb_cli_common *common, int argc, char **argv, lb_result *r,
                        lb_runctl_work_fn work, void *ctx, int64_t *run_id, lb_err *err);

#endif
