/*
 * qmp: a blocking client for QEMU's machine protocol on a UNIX socket, just
 * enough for the microVM driver: commands with JSON arguments, one passed
 * file descriptor (getfd), events skipped.
 */
#ifndef CUBICLE_QMP_H
#define CUBICLE_QMP_H

#include <jansson.h>

#include "err.h"

struct qmp {
	int fd;
	char buf[8192];
	size_t len;
	int timeout_ms; /* per reply */
};

/* Connects to path and negotiates capabilities; waits up to timeout_ms for
 * the socket to appear (QEMU creates it while starting). */
int qmp_open(struct qmp *q, const char *path, int timeout_ms, struct err *e);

/*
 * Runs `name` with `args` (stolen; NULL for none), passing `pass_fd` along
 * (SCM_RIGHTS) unless it is -1. On success *ret (if not NULL) holds the
 * "return" value (the caller decrefs); a QMP error becomes ERR_UNAVAILABLE
 * with QEMU's description.
 */
int qmp_cmd(struct qmp *q, const char *name, json_t *args, int pass_fd, json_t **ret,
	    struct err *e);

void qmp_close(struct qmp *q);

#endif
