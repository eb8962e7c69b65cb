/*
 * landlock: the one Landlock domain of cubicled's sandboxed helpers
 * (cubicle-pyrun's zygote, cubicle-jsrun, cubicle-record).
 *
 * landlock_restrict() handles every right the running kernel's Landlock ABI
 * knows: every filesystem access, binding and connecting TCP (ABI 4), abstract
 * unix sockets and signals out of the domain (ABI 6). What the rules grant is
 * all that stays allowed, so a helper with no rule can open no file, use no
 * TCP port and signal no process outside itself. The kernel's headers on the
 * build machine may predate the kernel the helper runs on: the ABI is
 * spelled out here, not taken from <linux/landlock.h>.
 */
#ifndef CUBICLE_LANDLOCK_H
#define CUBICLE_LANDLOCK_H

#include <stddef.h>
#include <stdint.h>

#define LANDLOCK_EXECUTE    (1ULL << 0)
#define LANDLOCK_WRITE_FILE (1ULL << 1)
#define LANDLOCK_READ_FILE  (1ULL << 2)
#define LANDLOCK_READ_DIR   (1ULL << 3)
/* Read what is beneath a directory (on a file: read the file). */
#define LANDLOCK_READ (LANDLOCK_READ_FILE | LANDLOCK_READ_DIR)

struct landlock_rule {
	const char *path; /* a directory (the rule covers what is beneath) or a file */
	uint64_t access;  /* LANDLOCK_*; on a file, only the file rights count */
};

/* Restricts the calling thread (and what it execs; no_new_privs must be set)
 * to what the n rules grant. A rule's path that does not exist grants
 * nothing and is skipped. Returns the Landlock ABI applied (1 or more), 0
 * when this kernel has no Landlock (nothing applied: the caller decides
 * whether that is fatal), or -1 with why. */
int landlock_restrict(const struct landlock_rule *rules, size_t n, char *why, size_t len);

#endif
