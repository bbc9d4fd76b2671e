/* selftest.h: every GPU kernel and the whole training step against the CPU reference.
 *
 * Each kernel runs forward and backward on fresh random inputs (a new seed each run
 * unless one is given) at several shapes and in every precision, next to the function of
 * the same name in model/ref.h. Inputs are rounded to the precision under test before
 * the reference sees them, so only the kernel's own arithmetic and output rounding are
 * measured. An element passes when |gpu - ref| <= atol + rtol * |ref| (per precision);
 * a row reports the largest |gpu - ref| / (atol + rtol * |ref|) ("err/tol", pass <= 1)
 * and the largest absolute error. Whole-model rows (one step's loss and every parameter
 * gradient, then the losses of 10 AdamW steps, against model/model.h) use the relative L2
 * error ||gpu - ref|| / ||ref|| over all values against a per-precision bound. fp32 matrix
 * products and the model also run with the 3xTF32 split (precision "3xtf32", fp32's
 * tolerances), and matmul.accuracy rows hold plain and split fp32 products to one tight
 * bound on the error scaled by sum |a b| against fp64 (one TF32 pass would fail it). A failed
 * CUDA call stops the run with LB_ERR_DEVICE; failed comparisons are rows, not errors. */
#ifndef LB_SELFTEST_SELFTEST_H
#define LB_SELFTEST_SELFTEST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/status.h"

typedef struct {
    char op[40];
    char shape[56];
    char precision[8];
    double err_ratio; /* kernels: max |d| / (atol + rtol |ref|); model: rel L2 / bound */
    double max_abs;   /* kernels: max |d|; model: rel L2 error */
    bool pass;
} lb_selftest_row;

typedef struct {
    lb_selftest_row *rows; /* owned */
    size_t n, cap;
    uint64_t seed;
    int n_failed;
} lb_selftest_report;

typedef struct {
    int device;       /* CUDA ordinal */
    uint64_t seed;    /* 0: derive one from the clock */
    bool kernels;     /* per-kernel checks */
    bool model;       /* whole-step and 10-step checks */
    const char *only; /* run only ops whose name starts with this (NULL: all) */
    bool progress;    /* a progress line on stderr (core/progress.h): checks so far, the op */
} lb_selftest_params;

lb_selftest_params lb_selftest_default_params(void);
/* Fills rep (caller frees with lb_selftest_report_free). LB_ERR_UNSUPPORTED without a
 * CUDA build or device. */
lb_status lb_selftest_run(const lb_selftest_params *p, lb_selftest_report *rep, lb_err *err);
void lb_selftest_report_free(lb_selftest_report *rep);

#endif
