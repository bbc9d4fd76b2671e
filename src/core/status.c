/* status.c: status names, exit codes and the error sentence writer. */
#include "core/status.h"

#include <stdarg.h>
#include <stdio.h>

lb_status lb_fail(lb_err *err, lb_status status, const char *fmt, ...) {
    if (err != NULL) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
        va_end(ap);
    }
    return status;
}

const char *lb_status_name(lb_status status) {
    switch (status) {
    case LB_OK: return "ok";
    case LB_ERR_USAGE: return "usage";
    case LB_ERR_IO: return "io";
    case LB_ERR_FORMAT: return "format";
    case LB_ERR_NOMEM: return "out-of-memory";
    case LB_ERR_UNSUPPORTED: return "unsupported";
    case LB_ERR_DEVICE: return "device";
    case LB_ERR_COMM: return "comm";
    case LB_ERR_DB: return "database";
    case LB_ERR_INTERRUPTED: return "interrupted";
    case LB_ERR_RUNTIME: return "runtime";
    }
    return "unknown";
}

int lb_status_exit_code(lb_status status) {
    switch (status) {
    case LB_OK: return 0;
    case LB_ERR_USAGE: return 2;
    case LB_ERR_INTERRUPTED: return 130;
    default: return 1;
    }
}

char *lb_status_printable(char *text) {
    for (char *c = text; *c; c++)
        if ((unsigned char)*c < 0x20 || *c == 0x7f) *c = '?';
    return text;
}
