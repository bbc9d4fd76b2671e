/* sweep.h: run an experiment matrix (matrix.h) as stored runs, resume it, aggregate it.
 *
 * Each cell x repeat runs as its own process: this program started again with the
 * command, the cell's options and --db, and in the environment (params.tags_env) the tags
 * that name the sweep, the cell and the repeat ("sweep:NAME", "sweep-cell:LABEL",
 * "sweep-run:NAME/FINGERPRINT/rK"), followed by the lines of that variable in the sweep's
 * own environment (a scheduled sweep's "schedule:NAME" reaches its cells). So a cell
 * takes exactly the path the command takes when typed (same option parser, same checks,
 * same stored run, same Ctrl-C handling), and a cell that crashes takes only itself down.
 * Before anything runs, every option value of the file is offered to the command's own
 * parser in check-only mode (the environment variable params.check_env), so an unknown
 * option or a bad value is refused with the file's line and nothing runs; then each cell's
 * whole command line, so that a value the parser cannot judge alone (a model's name, a
 * data file, options that contradict each other) is refused naming the cell.
 *
 * One sweep of a name on a database at a time (lb_sweep_lock): a second one started while
 * the first runs would run the same cells again and mix its runs into the first's table.
 *
 * Resume: a cell x repeat whose sweep-run tag is already on a stored `ok` run is not run
 * again; the fingerprint covers the command and every option of the cell, so an edited
 * file does not reuse runs of other options. A cell x repeat is credited only with a run
 * begun after its process started (a larger run id than the store's newest then), so a
 * process that stores nothing is failed with its own last line or exit code. A failed cell x
 * repeat (one whose process cannot start too) is recorded and the sweep goes on. An
 * interrupt stops after the running child has stored its run.
 *
 * The aggregate fills an lb_result of kind "sweep" (the CLI stores it as a run): config holds the
 * matrix and, per cell, its label, axis values, fingerprint, the ok run ids and the failures;
 * metrics hold median, std, min, max and n over the repeats of each key metric (history/bench.h) as
 * "c<K>/<metric>/<stat>"; its status is ok only when every cell x repeat has an ok run. Not here:
 * option parsing of the commands (theirs), printing, and the GPU. */
#ifndef LB_SWEEP_SWEEP_H
#define LB_SWEEP_SWEEP_H

#include <stdbool.h>

#include "core/result.h"
#include "core/status.h"
#include "store/store.h"
#include "sweep/matrix.h"

typedef struct {
    const char *exe;              /* this program's path (core/proc.h's lb_proc_self_exe) */
    const char *db_path;          /* the results database every cell writes to (a resolved path) */
    const char *check_env;        /* "NAME=1" that puts a command in check-only mode */
    const char *check_inputs_env; /* "NAME=inputs": a command checks its inputs too; NULL:
                                   * cells are not checked */
    const char *tags_env;         /* the variable whose lines a command adds to its run's tags */
    const char *log_path;         /* each child's stderr goes here (overwritten per child) */
    bool progress;                /* a line on stderr per cell x repeat */
    bool again;                   /* run every cell x repeat, those stored as ok before too */
} lb_sweep_params;

lb_sweep_params lb_sweep_default_params(void);

/* Takes the lock of sweep m on the database db_path (resolved): an exclusive flock on
 * "DB.sweep-NAME.lock" beside it (the database's folders are made, as lb_store_open would),
 * held until lb_sweep_unlock or the end of the process, a crash included. *fd is the lock's
 * descriptor; the cells inherit it, so a cell still ending after its sweep was killed holds
 * the lock until it has stored its run. LB_ERR_RUNTIME when another process
 * holds it: "sweep 'NAME' is already running on DB ...", nothing taken; LB_ERR_IO when the
 * file cannot be made. */
lb_status lb_sweep_lock(const lb_sweep_matrix *m, const char *db_path, int *fd, lb_err *err);
/* Releases a lock of lb_sweep_lock (fd < 0: nothing); the lock file stays for the next. */
void lb_sweep_unlock(int fd);

/* Offers each option value of m to the command's parser in check-only mode, then each
 * cell's whole command line to the command in input-checking mode (params.check_inputs_env:
 * cli/args.h's LB_ARGS_CHECK_INPUTS; a model name, a data file, options that contradict
 * each other). The first one refused is LB_ERR_USAGE: "FILE:LINE: key 'options.batch':
 * <the command's sentence>" or "FILE: cell LABEL: <the command's sentence>". */
lb_status lb_sweep_check(const lb_sweep_matrix *m, const lb_sweep_params *p, lb_err *err);

/* What lb_sweep_run would do, doing nothing: a new JSON array (caller decrefs) of
 * {"cell", "label", "repeat", "run": the ok run's id or null, "args": the cell's option
 * arguments}, in run order. store may be NULL (no database yet): nothing is stored. */
lb_status lb_sweep_plan(const lb_sweep_matrix *m, lb_store *store, json_t **out, lb_err *err);

/* Runs every cell x repeat not yet stored as ok, then aggregates into agg (a result of
 * kind "sweep" the caller made). Returns LB_OK when every cell x repeat is ok,
 * LB_ERR_RUNTIME when some failed (agg lists them; err says how many), LB_ERR_INTERRUPTED
 * after an interrupt (nothing aggregated), or the store's error. */
lb_status lb_sweep_run(const lb_sweep_matrix *m, const lb_sweep_params *p, lb_store *store,
                       lb_result *agg, lb_err *err);

/* Aggregates the ok runs of m already stored (the newest of each cell x repeat, begun after
 * run after_id, an id being larger the later its run began: 0 takes any) into agg, without
 * running anything (the end of lb_sweep_run; with --again only its round's runs count).
 * failures is a JSON array of {"cell": K, "repeat": R, "run": id or null, "reason": text},
 * copied into the cells' "failed" lists. */
lb_status lb_sweep_aggregate(const lb_sweep_matrix *m, lb_store *store, int64_t after_id,
                             json_t *failures, lb_result *agg, lb_err *err);

#endif
