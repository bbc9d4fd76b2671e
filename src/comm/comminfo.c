/* comminfo.c: the MPI library version (MPI_Get_library_version may be called before
 * MPI_Init, so describing the machine never starts MPI). */
#include "comm/comminfo.h"

#include <string.h>

#ifdef LB_HAVE_MPI
#include <mpi.h>
#endif

void lb_comminfo_add(json_t *p) {
#ifdef LB_HAVE_MPI
    char version[MPI_MAX_LIBRARY_VERSION_STRING];
    int len = 0;
    if (MPI_Get_library_version(version, &len) == MPI_SUCCESS) {
        /* the first line names the library and version; the rest is build detail */
        version[strcspn(version, "\n,")] = '\0';
        json_object_set_new(p, "mpi", json_string(version));
        return;
    }
#endif
    json_object_set_new(p, "mpi", json_null());
}
