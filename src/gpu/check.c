/* check.c: the sentence behind every failed GPU library call (gpu/check.h). Kept out of
 * the macros so each check site costs one compare and one call. */
#include "gpu/check.h"

#include <string.h>

lb_status lb_gpu_fail_at(lb_err *err, const char *lib, int code, const char *what, const char *expr,
                         const char *func, const char *file, int line) {
    const char *slash = strstr(file, "src/");
    lb_status st = LB_ERR_DEVICE;
    /* cudaErrorMemoryAllocation is 2 and CUBLAS_STATUS_ALLOC_FAILED is 3 */
    if ((strcmp(lib, "CUDA") == 0 && code == 2) || (strcmp(lib, "cuBLASLt") == 0 && code == 3))
        st = LB_ERR_NOMEM;
    return lb_fail(err, st, "%s error '%s' (%d) in %s, in %s (%s:%d)", lib, what ? what : "?", code,
                   expr, func, slash ? slash : file, line);
}
