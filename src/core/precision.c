/* precision.c: names of the precisions. */
#include "core/precision.h"

#include <string.h>

static const char *const names[] = {"fp32", "fp16", "bf16"};

const char *lb_precision_name(lb_precision p) {
    return (unsigned)p < sizeof names / sizeof names[0] ? names[p] : "unknown";
}

int lb_precision_parse(const char *name, lb_precision *out) {
    for (unsigned i = 0; i < sizeof names / sizeof names[0]; i++) {
        if (strcmp(name, names[i]) == 0) {
            *out = (lb_precision)i;
            return 0;
        }
    }
    return -1;
}
