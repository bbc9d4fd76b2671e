/* provenance.h: where and how a run was made, attached to every stored result.
 *
 * lb_provenance_collect() gathers what the host says about itself (hostname, OS, kernel,
 * CPU, cores, memory), the llmbench version and commit, the command line, the versions of
 * the libraries linked in, and the environment variables that shape a run (CUDA_*, NCCL_*,
 * OMP_*, LLMBENCH_*, MASTER_*, RANK, WORLD_SIZE, LOCAL_RANK, SLURM_*). Any variable whose
 * name contains KEY, TOKEN, SECRET or PASSWORD is kept with the value "***": the value
 * never leaves this function. GPU facts are added by the gpu layer (gpu/devinfo.h), which
 * sits above core; this module does not know about GPUs. */
#ifndef LB_CORE_PROVENANCE_H
#define LB_CORE_PROVENANCE_H

#include <jansson.h>
#include <stdbool.h>

/* Returns a new JSON object (caller owns it: json_decref). argv may be NULL. */
json_t *lb_provenance_collect(int argc, char **argv);

/* True when an environment variable of this name is recorded in provenance. */
bool lb_provenance_env_is_recorded(const char *name);
/* True when the variable's value must be replaced by "***". */
bool lb_provenance_env_is_secret(const char *name);

/* Total host memory in bytes from /proc/meminfo (0 when unknown). */
long long lb_provenance_host_mem_bytes(void);
/* Peak resident set size of this process in bytes (getrusage). */
long long lb_provenance_peak_rss_bytes(void);

#endif
