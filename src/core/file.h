/* file.h: whole files in and out: reading a file of outside input (texts, datasets,
 * vocabularies) into memory, and writing a file that appears whole or not at all.
 *
 * The file is read with stdio into one growing buffer, so pipes and /dev/stdin work too.
 * A file that cannot be opened, or a folder, is the user's input at fault: LB_ERR_USAGE,
 * with the path and the system's reason; a read that fails once the file is open is
 * LB_ERR_IO; one stopped by a signal is read on, or ends as LB_ERR_INTERRUPTED where the
 * signal was an interrupt (core/signals.h). Writing goes to a temporary file beside the
 * target, flushed to disk, then renamed over it: a full disk, a failed write or Ctrl-C
 * leaves the old file (or none), never a truncated one. A symbolic link at the path is
 * replaced, not written through (a link planted in a shared folder cannot aim a write at
 * another file). Not here: mapping, streaming. */
#ifndef LB_CORE_FILE_H
#define LB_CORE_FILE_H

#include <stddef.h>
#include <stdio.h>

#include "core/status.h"

/* Reads all of path: *buf is malloc'd, NUL-terminated (the bytes may hold other NULs; *n
 * counts them, not the terminator), the caller frees it. On failure *buf is NULL. */
lb_status lb_file_read(const char *path, char **buf, size_t *n, lb_err *err);

/* Writes path through write(out, ctx, err) into a temporary file beside it, then fsync and
 * rename: on any failure (the callback's, a write error, a full disk) path is untouched
 * and the temporary file removed. A file replaced keeps its
 * permissions; a new one gets those a new file would (0666 less the umask). A failure of
 * the file itself is LB_ERR_IO naming the path. */
typedef lb_status (*lb_file_writer)(FILE *out, void *ctx, lb_err *err);
lb_status lb_file_write_atomic_with(const char *path, lb_file_writer write, void *ctx, lb_err *err);

/* Creates or replaces path with data[0..len-1], as lb_file_write_atomic_with does. */
lb_status lb_file_write_atomic(const char *path, const char *data, size_t len, lb_err *err);

/* The last non-empty line of the file at path into out (cut to cap - 1 bytes); empty where
 * the file holds none or cannot be read. What a child process said last on its stderr. */
void lb_file_last_line(const char *path, char *out, size_t cap);

/* Before a long job whose end writes path (as lb_file_write_atomic does: a new file beside
 * it, renamed over it): path is not a folder, and its folder exists and takes new files.
 * LB_ERR_USAGE naming `option` (such as "--save-params") and path otherwise. */
lb_status lb_file_check_writable(const char *option, const char *path, lb_err *err);

/* Before a long job that writes files into dir: dir made where missing (its parent must
 * exist: a mistyped path is not built), and it takes new files. LB_ERR_USAGE naming
 * `option` and dir otherwise. */
lb_status lb_file_check_folder(const char *option, const char *dir, lb_err *err);

/* mkdir -p: dir and every missing parent, with mode. LB_ERR_IO naming the folder that
 * could not be made; LB_ERR_USAGE when dir exists and is not a folder. */
lb_status lb_file_mkdirs(const char *dir, unsigned mode, lb_err *err);

#endif
