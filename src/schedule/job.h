/* job.h: what a scheduled entry runs: `llmbench schedule exec NAME -- <command>`.
 *
 * One scheduled run at a time: an exclusive flock on DB.schedule.lock (next to the results
 * database) is held for the whole job; when another job holds it this one does not start.
 * The command runs as its own process (this program again, with --db, its runs tagged
 * "schedule:NAME" through the tags variable), so it is exactly the command a person would
 * type. Each run it stored is then compared with its benchmark's history
 * (history/history.h): the job regressed when the newest change point of a run's history
 * is a regression. With a report folder the job writes a report of its runs (and their
 * histories) there. */
#ifndef LB_SCHEDULE_JOB_H
#define LB_SCHEDULE_JOB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "core/status.h"

typedef struct {
    const char *name;
    const char *exe;         /* this program */
    const char *db_path;     /* the results database (resolved) */
    const char *report_dir;  /* NULL: no report */
    double threshold_pct;    /* regression threshold in percent */
    const char *tags_env;    /* the variable whose lines become the runs' tags */
    const char *const *argv; /* the llmbench command and its options */
    size_t argc;
} lb_schedule_job;

typedef struct {
    int command_exit; /* the command's exit code */
    size_t n_runs;    /* runs it stored */
    bool regression;  /* some run's history regressed */
} lb_schedule_outcome;

/* Runs the job, printing one line per stored run (its history's verdict) to f. Returns
 * LB_OK when the job ran (the outcome says how it went), LB_ERR_USAGE (nothing run) for a
 * name `schedule add` refuses (lb_schedule_check_name), LB_ERR_RUNTIME when the lock is
 * held by another job, LB_ERR_INTERRUPTED when it was interrupted (the command exited 130;
 * no history checked, no report written), or the error that stopped it. */
lb_status lb_schedule_exec(const lb_schedule_job *j, FILE *f, lb_schedule_outcome *o, lb_err *err);

#endif
