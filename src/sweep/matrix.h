/* matrix.h: an experiment matrix file, read and expanded into cells.
 *
 * The file is YAML (libyaml) or JSON (read by the same parser: a JSON document is a YAML
 * flow document, so both give every key its line number):
 *
 *   name: zero-x-precision          # the sweep's name (tags its runs; resume finds them)
 *   command: train                  # a command that stores a run: train, load or comm
 *   repeats: 3                      # runs of each cell (default 1)
 *   options: {model: gpt2-tiny, batch: 4, recompute: true, tag: [a, b]}
 *   axes: {zero: [0, 1], precision: [fp16, fp32]}   # crossed, the last one fastest
 *
 * Keys of options and axes are the command's own option names without their dashes (a
 * one-letter key is a short option: b is -b, as comm's sizes). A scalar becomes
 * "--key value"; true becomes the bare flag "--key" and false leaves it out; a
 * list under options repeats the option. The reader checks the file's shape (one document;
 * keys, types, a name of at most 127 characters, empty axes, a value twice in an axis,
 * written alike or as one number (1, 01, 1.0), an axis value with ',', '=' or a control
 * character, which its cell's label could not hold, a NUL ("\0") in a key or value, which
 * no argument can hold, the options the sweep sets (db, json) or that run nothing (help, h),
 * the command); whether the command
 * takes each option and value is for the command's own parser to say (sweep.h). Every error is
 * LB_ERR_USAGE with one sentence "FILE:LINE: key 'K': what is wrong". */
#ifndef LB_SWEEP_MATRIX_H
#define LB_SWEEP_MATRIX_H

#include <stddef.h>
#include <stdint.h>

#include "core/status.h"

typedef enum {
    LB_SWEEP_VALUE_TEXT,  /* "--key text" */
    LB_SWEEP_VALUE_TRUE,  /* "--key" */
    LB_SWEEP_VALUE_FALSE, /* nothing */
} lb_sweep_value_kind;

typedef struct {
    lb_sweep_value_kind kind;
    char *text; /* as written ("true"/"false" for the two flags) */
    int line;   /* 1-based line in the file */
} lb_sweep_value;

/* One key of options (values given together) or of axes (values crossed). */
typedef struct {
    char *key;  /* option name without "--" */
    char *flag; /* "--key", or "-k" for a one-letter key */
    int line;
    lb_sweep_value *values;
    size_t n_values;
} lb_sweep_key;

typedef struct {
    char *path; /* the file, for messages */
    char *name;
    char *command;
    int64_t repeats;
    lb_sweep_key *options;
    size_t n_options;
    lb_sweep_key *axes;
    size_t n_axes;
    size_t n_cells; /* product of the axes' lengths (1 without axes) */
} lb_sweep_matrix;

/* The most axes a file may have (a cell's index has one entry per axis). */
#define LB_SWEEP_MAX_AXES 64

/* The commands whose runs a sweep can make. */
#define LB_SWEEP_COMMANDS "train|load|comm"

/* Reads and checks the file at path into *m (lb_sweep_matrix_free frees it, also after a
 * failure). */
lb_status lb_sweep_matrix_read(const char *path, lb_sweep_matrix *m, lb_err *err);
/* Same, from text in memory; path only names it in messages. */
lb_status lb_sweep_matrix_parse(const char *text, size_t len, const char *path, lb_sweep_matrix *m,
                                lb_err *err);
void lb_sweep_matrix_free(lb_sweep_matrix *m);

/* Cell `cell` (0 .. n_cells-1): the value index of each axis in idx[0..n_axes-1]. */
void lb_sweep_cell_index(const lb_sweep_matrix *m, size_t cell, size_t *idx);

/* The cell's label, "zero=1,precision=fp16" ("all" without axes), into out as snprintf
 * writes (out may be NULL when out_bytes is 0): no axis value holds ',' or '=', so report
 * reads each value back from it. Returns its whole length, which may pass out_bytes - 1:
 * size out with it (a cut label names no cell). */
size_t lb_sweep_cell_label(const lb_sweep_matrix *m, size_t cell, char *out, size_t out_bytes);

/* The cell's option arguments ("--batch", "4", "--zero", "1", ...): the fixed options
 * first, then the axes, in file order. *argv is a malloc'd NULL-terminated array (the
 * caller frees it with free()) of strings that belong to m. */
lb_status lb_sweep_cell_args(const lb_sweep_matrix *m, size_t cell, char ***argv, size_t *argc,
                             lb_err *err);

/* FNV-1a 64 of the command and the cell's arguments: the identity resume matches on, so an
 * edited file does not reuse runs made with other options. */
uint64_t lb_sweep_cell_fingerprint(const lb_sweep_matrix *m, size_t cell);

#endif
