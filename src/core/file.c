/* file.c: lb_file_read. */
#include "core/file.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

lb_status lb_file_read(const char *path, char **buf, size_t *n, lb_err *err) {
    *buf = NULL;
    *n = 0;
    FILE *f = fopen(path, "rb");
    if (f == NULL) return lb_fail(err, LB_ERR_USAGE, "cannot read %s: %s", path, strerror(errno));
    size_t cap = 1 << 16, len = 0;
    char *b = malloc(cap);
    while (b != NULL) {
        len += fread(b + len, 1, cap - 1 - len, f);
        if (len < cap - 1) break;
        char *bigger = realloc(b, cap * 2);
        if (bigger == NULL) free(b);
        b = bigger;
        cap *= 2;
    }
    int read_errno = ferror(f) ? errno : 0;
    fclose(f);
    if (b == NULL) return lb_fail(err, LB_ERR_NOMEM, "out of memory reading %s", path);
    if (read_errno != 0) {
        free(b);
        return lb_fail(err, LB_ERR_USAGE, "cannot read %s: %s", path, strerror(read_errno));
    }
    b[len] = '\0';
    *buf = b;
    *n = len;
    return LB_OK;
}
