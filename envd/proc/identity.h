/*
 * identity: act as the session user on the calling thread only.
 *
 * envd runs as root in the guest, but the desktop's D-Bus peers only accept
 * their own user: the session bus refuses root, and AT-SPI's per-application
 * peer-to-peer sockets accept only the application's uid. D-Bus checks the
 * credentials of the connecting thread (SO_PEERCRED), so envd switches the
 * real and effective ids of one thread with raw syscalls (glibc's wrappers
 * would switch every thread) for the span of a call, keeping the saved id
 * root so it can switch back. A program spawned meanwhile starts with the
 * user's ids only (exec copies the effective id over the saved one).
 */
#ifndef CUBICLE_PROC_IDENTITY_H
#define CUBICLE_PROC_IDENTITY_H

#include <stdbool.h>
#include <sys/types.h>

#include "err.h"

struct identity_saved {
	bool switched;
	uid_t ruid, euid;
	gid_t rgid, egid;
};

/*
 * Becomes uid/gid on this thread. A no-op (saved->switched false) when uid
 * is (uid_t)-1 or already the effective uid. Fails with ERR_INTERNAL when
 * the switch is refused (envd is not root).
 */
int identity_enter(uid_t uid, gid_t gid, struct identity_saved *saved, struct err *e);

/* Undoes identity_enter() on the same thread. */
void identity_leave(const struct identity_saved *saved);

#endif
