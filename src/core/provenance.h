/* provenance.h: where and how a run was made, attached to every stored result.
 *
 * lb_provenance_collect() gathers what the host says about itself (hostname, OS, kernel,
 * CPU, cores, memory), the llmbench version and commit, the command line, the versions of
 * the libraries linked in, and the environment variables that shape a run (CUDA_*, NCCL_*,
 * OMP_*, LLMBENCH_*, MASTER_*, RANK, WORLD_SIZE, LOCAL_RANK, SLURM_*). A variable or
 * option whose name carries a secret (a word KEY, or a word ending in KEY, TOKEN, SECRET,
 * PASSWORD, PASSWD, PASS, AUTH, CREDENTIAL(S); words split at anything but letters and
 * digits) is kept with the value "***": the value never leaves this function. Names that
 * merely contain such letters (MAX_TOKENS, --tokenizer) keep their values, and so do
 * llmbench's own --model-key and --api-key-env. The user and password of a URL
 * (scheme://user:password@host) are masked in every recorded value. GPU facts are added
 * by the gpu layer (gpu/devinfo.h), which sits above core; this module does not know
 * about GPUs. */
#ifndef LB_CORE_PROVENANCE_H
#define LB_CORE_PROVENANCE_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

/* Returns a new JSON object (caller owns it: json_decref). argv may be NULL. */
json_t *lb_provenance_collect(int argc, char **argv);

/* True when an environment variable of this name is recorded in provenance. */
bool lb_provenance_env_is_recorded(const char *name);
/* True when the variable's value must be replaced by "***". */
bool lb_provenance_env_is_secret(const char *name);

/* text with the userinfo of every URL in it replaced by three stars: in
 * "http://u:p@h:8000/x" the "u:p" becomes "***". Writes at most cap bytes into out,
 * NUL-terminated. Every URL that is stored or printed goes through it. */
void lb_provenance_mask_url(const char *text, char *out, size_t cap);

/* Total host memory in bytes from /proc/meminfo (0 when unknown). */
long long lb_provenance_host_mem_bytes(void);
/* Peak resident set size of this process in bytes (getrusage). */
long long lb_provenance_peak_rss_bytes(void);

#endif
