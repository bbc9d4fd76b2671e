/* ladder.h: doctor's ladder of NCCL settings, and the climb up it.
 *
 * A rung is a change to the environment as found: variables to set and variables to
 * remove. The ladder, from a node's facts (doctor/facts.h): the environment as found; the
 * same without settings that name nothing here (the base of every later rung); each of
 * P2P_DISABLE, SHM_DISABLE, NET_GDR_LEVEL and IB_DISABLE found set (a *_DISABLE to other
 * than 0), removed in turn (cumulatively); on RoCE ports
 * NCCL_IB_GID_INDEX from the GID table; NCCL_CROSS_NIC=0; InfiniBand off with each
 * candidate socket interface; P2P off; shared memory off; NCCL_NET_GDR_LEVEL=0.
 *
 * The climb tries each rung through a probe (in llmbench: fresh workers running one small
 * all_reduce in a fresh communicator with a deadline; in tests: a fake transport) and stops
 * at the first whose bus bandwidth reaches good_gbps. None reaching it, the fastest rung
 * that worked is chosen. */
#ifndef LB_DOCTOR_LADDER_H
#define LB_DOCTOR_LADDER_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "core/status.h"

#define LB_RUNG_MAX_CHANGES 8
#define LB_LADDER_MAX       24

typedef struct {
    char name[128];
    char set[LB_RUNG_MAX_CHANGES][160]; /* "NAME=value" */
    int n_set;
    char unset[LB_RUNG_MAX_CHANGES][64];
    int n_unset;
} lb_doctor_rung;

typedef struct {
    bool ran, ok;
    double busbw_gbps;
    double seconds;
    char error[LB_ERR_MSG_BYTES];
} lb_doctor_probe;

typedef enum {
    LB_DOCTOR_WORKS_AS_FOUND = 0, /* exit 0 */
    LB_DOCTOR_FIXED,              /* a changed setting reaches good_gbps: exit 1 */
    LB_DOCTOR_SLOW,               /* something works, nothing reaches good_gbps: exit 1 */
    LB_DOCTOR_BROKEN,             /* nothing works: exit 1 */
} lb_doctor_verdict;

/* Fills rungs (at most max) from facts' "env", "env_problems", "net" and "ib"; returns how
 * many. multi_node leaves the loopback out of the socket candidates. */
int lb_doctor_ladder(const json_t *facts, bool multi_node, lb_doctor_rung *rungs, int max);

typedef lb_status (*lb_doctor_probe_fn)(void *ctx, const lb_doctor_rung *rung, lb_doctor_probe *out,
                                        lb_err *err);

/* Probes rungs in order as described above; results[i] says what rung i gave (ran false
 * for rungs not tried); *chosen is the rung to use (-1 when none worked). A probe that
 * returns an error stops the climb with it (the transport itself failed); a signal
 * (core/signals.h) before or during a probe stops it with LB_ERR_INTERRUPTED, that probe
 * not counted as ran. */
lb_status lb_doctor_climb(const lb_doctor_rung *rungs, int n, double good_gbps,
                          lb_doctor_probe_fn probe, void *ctx, lb_doctor_probe *results,
                          int *chosen, lb_doctor_verdict *verdict, lb_err *err);

/* The shell line that makes a rung's environment from the one found:
 * "export A=1 B=2; unset C" (or "" for the environment as found). */
void lb_doctor_export_line(const lb_doctor_rung *rung, char *buf, size_t cap);

#endif
