/* workers.h: `--gpus N` of the collective commands (comm, train): N local workers of a
 * command line, one per GPU, started through comm/launch.h once the GPUs are known to be
 * there. Workers see LLMBENCH_WORKER=1 in their environment and so do not start workers of
 * their own. */
#ifndef LB_CLI_WORKERS_H
#define LB_CLI_WORKERS_H

#include <stdbool.h>
#include <stdint.h>

/* Whether this process is such a worker. */
bool lb_cli_is_worker(void);

/* Runs argv (the whole command line, argv[0] included) on `gpus` local workers; rank 0's
 * stdout goes to rank0_stdout (-1: this process's). Returns the exit code for main: 2 (the
 * message said) when this machine has fewer GPUs, 1 when the workers could not be started,
 * else the workers' code (comm/launch.h). */
int lb_cli_run_workers(const char *command, int64_t gpus, char *const *argv, int rank0_stdout,
                       double grace_s);

#endif
