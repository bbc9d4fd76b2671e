/* job.c: a scheduled run (job.h). */
#include "schedule/job.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <unistd.h>

#include "core/clock.h"
#include "core/proc.h"
#include "core/signals.h"
#include "history/bench.h"
#include "history/history.h"
#include "history/select.h"
#include "report/report.h"
#include "schedule/schedule.h"
#include "store/store.h"

static lb_status after_runs(const lb_schedule_job *j, double t0, FILE *f, lb_schedule_outcome *o,
                            lb_err *err) {
    lb_store *s = NULL;
    LB_TRY(lb_store_open(j->db_path, &s, err));
    char tag[160];
    snprintf(tag, sizeof tag, "schedule:%s", j->name);
    lb_store_filter filt = lb_store_default_filter();
    filt.tag = tag;
    lb_store_run_info *list = NULL;
    size_t n = 0;
    lb_status st = lb_store_list(s, &filt, &list, &n, err);
    lb_run_set set = {0};
    for (size_t i = n; st == LB_OK && i-- > 0;) { /* oldest first */
        if (list[i].start_wall_s < t0) continue;
        o->n_runs++;
        size_t n_keys = 0;
        lb_bench_key_metrics(list[i].kind, &n_keys);
        /* a run without a benchmark (a sweep's table: its cells are runs of their own) has
         * no history to check and nothing of its own to report */
        if (list[i].status != LB_RUN_OK || n_keys == 0) continue;
        bool regressed = false;
        st = lb_history_check_run(s, list[i].id, j->threshold_pct, f, &regressed, err);
        o->regression |= regressed;
        if (st != LB_OK || j->report_dir == NULL) continue;
        /* one group a run: the runs of one job (a sweep's cells, a --scaling series) are
         * different configurations, not repeats of one */
        char id[24];
        snprintf(id, sizeof id, "%lld", (long long)list[i].id);
        lb_run_set one = {0};
        st = lb_select_runs(s, id, &one, err);
        if (st == LB_OK) st = lb_select_take(&set, &one, err);
        lb_select_free(&one);
    }
    free(list);
    if (st == LB_OK && j->report_dir && set.n_groups > 0) {
        lb_report_params p = lb_report_default_params();
        p.out_dir = j->report_dir;
        p.threshold_pct = j->threshold_pct;
        char title[200], html[4200];
        snprintf(title, sizeof title, "llmbench scheduled run %s", j->name);
        p.title = title;
        st = lb_report_write(s, &set, &p, html, sizeof html, err);
        if (st == LB_OK) fprintf(f, "schedule: report %s\n", html);
    }
    lb_select_free(&set);
    lb_store_close(s);
    return st;
}

lb_status lb_schedule_exec(const lb_schedule_job *j, FILE *f, lb_schedule_outcome *o, lb_err *err) {
    memset(o, 0, sizeof *o);
    /* the name schedule add takes: a longer one's tag would be cut short in after_runs and
     * find none of the job's runs (any backend's name: cron's rule is the widest) */
    LB_TRY(lb_schedule_check_name(j->name, LB_SCHEDULE_CRON, err));
    char lock_path[4200];
    snprintf(lock_path, sizeof lock_path, "%s.schedule.lock", j->db_path);
    int lock = open(lock_path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (lock < 0)
        return lb_fail(err, LB_ERR_IO, "cannot open the lock %s: %s", lock_path, strerror(errno));
    if (flock(lock, LOCK_EX | LOCK_NB) != 0) {
        close(lock);
        return lb_fail(err, LB_ERR_RUNTIME,
                       "another scheduled run holds %s: '%s' is not started (never two at once)",
                       lock_path, j->name);
    }
    const char **argv = calloc(j->argc + 4, sizeof *argv);
    if (argv == NULL) {
        close(lock);
        return lb_fail(err, LB_ERR_NOMEM, "no memory to start the command");
    }
    size_t n = 0;
    argv[n++] = j->exe;
    for (size_t i = 0; i < j->argc; i++)
        argv[n++] = j->argv[i];
    argv[n++] = "--db";
    argv[n++] = j->db_path;
    char tags[256];
    snprintf(tags, sizeof tags, "%s=schedule:%s", j->tags_env, j->name);
    const char *env[] = {tags, NULL};
    lb_proc_spec spec = {.argv = argv, .env = env};
    double t0 = lb_clock_wall_s(); /* the command's runs start after this */
    lb_status st = lb_proc_run(&spec, &o->command_exit, err);
    free(argv);
    /* Ctrl-C (passed on to the command, which stored its run as interrupted): the job ends
     * there, as the sweep does, without checking histories or writing a report */
    if (st == LB_OK && (o->command_exit == 130 || lb_signals_interrupted()))
        st = lb_fail(err, LB_ERR_INTERRUPTED,
                     "interrupted: '%s' stopped its command and checked no history", j->name);
    if (st == LB_OK) st = after_runs(j, t0, f, o, err);
    close(lock);
    return st;
}
