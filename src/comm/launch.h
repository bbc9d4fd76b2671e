/* launch.h: `--gpus N`: llmbench starts N local workers of itself, one per GPU.
 *
 * Each worker is this program (/proc/self/exe) with the given command line and the torchrun
 * variables RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR=127.0.0.1 and a free
 * MASTER_PORT, so it joins through comm/boot.h's TCP rendezvous like any torchrun worker.
 * The launcher only waits: rank 0 prints and stores. When a worker fails, the launcher names
 * it and how it ended in one line on stderr (for one that ended interrupted, exit 130, only
 * if the others outlive their grace: it said so itself, and they stop at its step), and the
 * others get
 * grace_s to end on their own (their deadlines name the failure), then SIGTERM, a second
 * SIGTERM 2 s later (a worker stuck outside its step loop then runs its last words, which
 * mark its stored run: core/signals.h), then SIGKILL 2 s after that. Workers die with the
 * launcher. A SIGINT/SIGTERM that reaches the launcher is passed on to the workers once
 * (lb_signals_pass_on: a worker that a Ctrl-C reached too takes it as one signal). An
 * optional overall deadline (deadline_s, from the start of the workers) bounds a launch whose
 * workers hang where no deadline of their own reaches (CUDA start-up on a wedged GPU, before
 * the rendezvous): when it passes with no worker failed, the workers still running are ended
 * as after a failure but at once (SIGTERM, SIGTERM 2 s later, SIGKILL 2 s after that) and the
 * launch returns LB_LAUNCH_DEADLINE_PASSED, err naming the deadline and those workers; once a
 * worker has failed, the deadline changes nothing (that failure's grace and ending are
 * bounded already). Not a cluster launcher: across nodes use mpirun, srun or torchrun
 * (docs/LAUNCHING.md). */
#ifndef LB_COMM_LAUNCH_H
#define LB_COMM_LAUNCH_H

#include "core/status.h"

typedef struct {
    int n;                    /* workers */
    char *const *argv;        /* their command line; argv[0] is replaced by this program */
    const char *const *env;   /* extra "NAME=value" for every worker, NULL-terminated; or NULL */
    const char *const *unset; /* variables removed from every worker's environment; or NULL */
    int rank0_stdout;         /* fd that the first worker's stdout goes to; -1: the launcher's */
    double grace_s;           /* after one worker failed, the others' time to end, s */
    double deadline_s;        /* the whole launch, from the workers' start, s; 0: none */
    /* a part of a larger job (doctor's probes on every node): the first worker's rank, the
     * job's size and rank 0's address and port; 0 / NULL: a job of these n workers alone,
     * on 127.0.0.1 and a free port */
    int first_rank, world;
    const char *master_addr;
    int master_port;
} lb_launch_params;

/* What lb_launch_local returns when p->deadline_s passed with workers still running. */
enum { LB_LAUNCH_DEADLINE_PASSED = -2 };

/* Runs the workers to the end (SIGCHLD, when the caller ignores it, is the default meanwhile,
 * so that their statuses are there to wait for). Returns their exit code: 0 when all succeeded,
 * else the code of the first to fail (a worker killed by signal S counts as 128 + S); -1 with err
 * set when they could not be started (one that cannot exec included: those started are ended at
 * once as after a failure, SIGTERM, SIGTERM 2 s later, SIGKILL 2 s after that);
 * LB_LAUNCH_DEADLINE_PASSED with err set when p->deadline_s passed first (the workers then
 * ended: it returns at most 4 s and a moment after the deadline). */
int lb_launch_local(const lb_launch_params *p, lb_err *err);
/* A TCP port free on 127.0.0.1 now (-1 when none), for a rendezvous about to start: below
 * the kernel's ephemeral range where there is room, so no outgoing connection takes it first. */
int lb_launch_free_port(void);

#endif
