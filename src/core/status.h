/* status.h: how every llmbench function reports failure.
 *
 * Library code returns an lb_status and, on failure, writes one human sentence into an
 * lb_err the caller owns. Only main() turns a status into an exit code. LB_TRY passes a
 * failure up unchanged, so the sentence written closest to the cause is the one the user
 * reads. This header deliberately knows nothing about CUDA or MPI: their check macros live
 * next to the code that calls them and end in lb_fail(). */
#ifndef LB_CORE_STATUS_H
#define LB_CORE_STATUS_H

#include <stddef.h>

typedef enum {
    LB_OK = 0,
    LB_ERR_USAGE,       /* bad input from the user: exit code 2 */
    LB_ERR_IO,          /* a file or socket could not be read or written */
    LB_ERR_FORMAT,      /* input read but malformed (dataset, shard, JSON, database) */
    LB_ERR_NOMEM,       /* host or device memory exhausted */
    LB_ERR_UNSUPPORTED, /* a valid request this build or machine cannot serve */
    LB_ERR_DEVICE,      /* a CUDA, cuBLAS or NCCL call failed */
    LB_ERR_COMM,        /* a collective or MPI call failed */
    LB_ERR_DB,          /* the results store refused an operation */
    LB_ERR_INTERRUPTED, /* SIGINT or SIGTERM arrived: exit code 130 */
    LB_ERR_RUNTIME,     /* anything else that made a run fail */
} lb_status;

#define LB_ERR_MSG_BYTES 512

typedef struct {
    char msg[LB_ERR_MSG_BYTES]; /* one sentence, no trailing newline */
} lb_err;

/* Writes the formatted sentence into err (may be NULL) and returns status. */
lb_status lb_fail(lb_err *err, lb_status status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* text with its control bytes replaced by '?', in place, so that it can go into a one-line
 * message (a name from a file may hold a newline); returns text. */
char *lb_status_printable(char *text);

/* Short stable name of a status ("usage", "io", ...), for logs and the store. */
const char *lb_status_name(lb_status status);

/* Process exit code for a status: 0 ok, 2 usage, 130 interrupted, 1 otherwise. */
/* A run that completed and was stored ok, but whose result is INVALID (an MLPerf-mode
 * verdict that failed): the one exit code that is not a status's (README, "Exit status"). */
#define LB_EXIT_INVALID 3

int lb_status_exit_code(lb_status status);

#define LB_TRY(expr)                                                                               \
    do {                                                                                           \
        lb_status lb_try_status_ = (expr);                                                         \
        if (lb_try_status_ != LB_OK) return lb_try_status_;                                        \
    } while (0)

#endif
