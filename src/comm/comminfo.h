/* comminfo.h: what this build and machine offer for moving data between processes, for
 * provenance and `llmbench env`: the MPI library's version string when llmbench was built
 * with MPI (null otherwise). NCCL's version comes from gpu/devinfo.h with the GPU facts. */
#ifndef LB_COMM_COMMINFO_H
#define LB_COMM_COMMINFO_H

#include <jansson.h>

/* Adds "mpi" to a provenance object. Safe before MPI_Init. */
void lb_comminfo_add(json_t *provenance);

#endif
