/* file.h: reading a whole file into memory, the way every command that takes a file of
 * outside input (texts, datasets, vocabularies) starts.
 *
 * The file is read with stdio into one growing buffer, so pipes and /dev/stdin work too.
 * A file that cannot be opened or read is the user's input at fault: LB_ERR_USAGE, with
 * the path and the system's reason. Not here: mapping, streaming, writing. */
#ifndef LB_CORE_FILE_H
#define LB_CORE_FILE_H

#include <stddef.h>

#include "core/status.h"

/* Reads all of path: *buf is malloc'd, NUL-terminated (the bytes may hold other NULs; *n
 * counts them, not the terminator), the caller frees it. On failure *buf is NULL. */
lb_status lb_file_read(const char *path, char **buf, size_t *n, lb_err *err);

#endif
