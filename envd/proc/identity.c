#include "identity.h"

#include <errno.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

int identity_enter(uid_t uid, gid_t gid, struct identity_saved *saved, struct err *e)
{
	saved->switched = false;
	if (uid == (uid_t)-1 || uid == geteuid())
		return 0;
	saved->ruid = getuid();
	saved->euid = geteuid();
	saved->rgid = getgid();
	saved->egid = getegid();
	/* Group first, while still privileged; the saved ids stay as they are. */
	if (syscall(SYS_setresgid, gid, gid, (gid_t)-1) != 0)
		return err_set(e, ERR_INTERNAL, "cannot switch this thread to gid %u: %s",
			       (unsigned)gid, strerror(errno));
	if (syscall(SYS_setresuid, uid, uid, (uid_t)-1) != 0) {
		int saved_errno = errno;
		syscall(SYS_setresgid, saved->rgid, saved->egid, (gid_t)-1);
		return err_set(e, ERR_INTERNAL, "cannot switch this thread to uid %u: %s",
			       (unsigned)uid, strerror(saved_errno));
	}
	saved->switched = true;
	return 0;
}

void identity_leave(const struct identity_saved *saved)
{
	if (!saved->switched)
		return;
	/* The saved uid is still root, so both calls are allowed; the uid goes
	 * back first so that the gid change is privileged again. */
	syscall(SYS_setresuid, saved->ruid, saved->euid, (uid_t)-1);
	syscall(SYS_setresgid, saved->rgid, saved->egid, (gid_t)-1);
}
