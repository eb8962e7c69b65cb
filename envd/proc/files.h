/*
 * files: whole-file reads and writes for the read_file/write_file actions,
 * performed with the client's identity (run_as) so envd's own privileges
 * never leak. Streaming of any size is the HTTP front's job (/v1/files);
 * files_open_as() gives it a descriptor opened with the same identity.
 */
#ifndef CUBICLE_PROC_FILES_H
#define CUBICLE_PROC_FILES_H

#include <stddef.h>
#include <sys/types.h>

#include "shell.h"

/*
 * Reads all of `path` (absolute, or relative to run_as home) into a malloc'd
 * NUL-terminated buffer. ERR_NOT_FOUND, ERR_FORBIDDEN, ERR_INVALID (a
 * directory), ERR_TOO_LARGE (over max_len, the message pointing to
 * GET /v1/files?path=...).
 */
int files_read(const struct run_as *as, const char *path, size_t max_len, char **out, size_t *len,
	       struct err *e);

/*
 * Writes `len` bytes to `path` atomically (a temporary file in the same
 * directory renamed over it), creating missing parent directories; mode < 0
 * keeps an existing file's mode (0644 for new files).
 */
int files_write(const struct run_as *as, const char *path, const void *data, size_t len, int mode,
		struct err *e);

/* `path` made absolute against the user's home (a relative path names a file
 * there); malloc'd, or NULL with e filled (ERR_INVALID naming "path"). */
char *files_resolve(const struct run_as *as, const char *path, struct err *e);

/*
 * open(2) with the client's identity, for streaming. For O_WRONLY|O_CREAT
 * it creates missing parent directories. Opening never blocks (O_NONBLOCK,
 * cleared afterwards unless asked for); a read (O_RDONLY) opens only a
 * regular file: a directory, FIFO, device or socket is ERR_INVALID (param
 * "path") naming what it is. Returns an fd or -1 with e filled.
 */
int files_open_as(const struct run_as *as, const char *path, int flags, mode_t mode, struct err *e);

#endif
