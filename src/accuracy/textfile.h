/* textfile.h: reads the predictions or references that `llmbench rouge` scores.
 *
 * One file holds one text per record, in one of three layouts, picked by the first
 * non-space byte (after a UTF-8 byte order mark, which is skipped: Windows editors write
 * one, and it is no part of the first text):
 *   '{' or '"'  JSON Lines: each non-blank line is a JSON string, or an object whose text
 *               is the first string field found of: "prediction", "text", "output" for
 *               predictions; "reference", "text", "output" for references (so one file of
 *               {"prediction": ..., "reference": ...} can serve as both);
 *   '['         one JSON array of such records (MLPerf's cnn_eval.json: its "output" is
 *               the reference summary);
 *   otherwise   plain text: every line is one text (an empty line is an empty text), a
 *               final newline ends the last text, a trailing "\r" is dropped.
 * The design idea: refuse anything doubtful before scoring, with one sentence that names
 * the file, the line (or array record) and what is wrong: invalid JSON or UTF-8, a NUL
 * byte, a record of the wrong type, an object without a text field.
 *
 * What it does not do: stream (files are read whole; MLPerf's 13,368 summaries are
 * ~10 MB), or guess among several text fields beyond the order above. */
#ifndef LB_ACCURACY_TEXTFILE_H
#define LB_ACCURACY_TEXTFILE_H

#include <stddef.h>

#include "core/status.h"

typedef enum {
    LB_TEXTFILE_PREDICTIONS = 0,
    LB_TEXTFILE_REFERENCES,
} lb_textfile_role;

typedef struct {
    char **texts; /* n NUL-terminated UTF-8 texts, owned by this struct */
    size_t n;
    const char *format; /* "jsonl", "json" or "lines" (static strings) */
} lb_textfile;

/* Reads path. Fails with LB_ERR_USAGE (the file cannot be read, or is malformed: the
 * message names the file and line) or LB_ERR_NOMEM; *out is then empty. */
lb_status lb_textfile_read(const char *path, lb_textfile_role role, lb_textfile *out, lb_err *err);
/* The same for a file already in memory, buf[0..n) (need not be NUL-terminated); name
 * labels messages in place of the path. */
lb_status lb_textfile_parse(const char *buf, size_t n, const char *name, lb_textfile_role role,
                            lb_textfile *out, lb_err *err);
void lb_textfile_free(lb_textfile *f);

#endif
