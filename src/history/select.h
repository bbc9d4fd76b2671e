/* select.h: the runs a command line names, loaded from the store.
 *
 * A spec is a run id ("12"), a comma-separated list of ids ("12,13,14": repeats of one
 * configuration), or a sweep's name (its ok runs, one group per cell, in the order the
 * cells were first run). Runs of kind "sweep" (a sweep's own table) are never selected.
 * A missing id or a name that matches no sweep is LB_ERR_USAGE naming it; a Ctrl-C while
 * the runs load is LB_ERR_INTERRUPTED. */
#ifndef LB_HISTORY_SELECT_H
#define LB_HISTORY_SELECT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/result.h"
#include "core/status.h"
#include "store/store.h"

typedef struct {
    char label[256]; /* the cell's label for a sweep, "12,13" for ids */
    bool by_ids;     /* named by its ids (the label is the spec "12,13") */
    lb_result **runs;
    int64_t *ids;
    size_t n;
} lb_run_group;

typedef struct {
    lb_run_group *groups;
    size_t n_groups;
    bool sweep;     /* named by a sweep's name */
    char name[128]; /* the spec as given */
} lb_run_set;

lb_status lb_select_runs(lb_store *s, const char *spec, lb_run_set *out, lb_err *err);
/* The ok runs (not sweeps) that started at or after since_wall_s, one group per benchmark
 * (history/bench.h), labelled "NAME [KEY]": repeats of a configuration form one group. */
lb_status lb_select_since(lb_store *s, double since_wall_s, lb_run_set *out, lb_err *err);
/* Moves from's groups to the end of into (from is left empty); into is a sweep set only
 * when both were. */
lb_status lb_select_take(lb_run_set *into, lb_run_set *from, lb_err *err);
void lb_select_free(lb_run_set *set); /* accepts a zeroed set */

#endif
