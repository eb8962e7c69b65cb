/*
 * landlock: the Landlock domain of cubicled's sandboxed helpers (landlock.h).
 */
#include "landlock.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>
#include <sys/syscall.h>

#define LL_CREATE_VERSION    (1U << 0)
#define LL_RULE_PATH_BENEATH 1

struct ll_ruleset_attr {
	uint64_t handled_access_fs;
	uint64_t handled_access_net; /* ABI 4 */
	uint64_t scoped;	     /* ABI 6 */
};

struct ll_path_beneath {
	uint64_t allowed_access;
	int32_t parent_fd;
} __attribute__((packed));

/* The rights that apply to a file itself (the rest are a directory's):
 * execute, write, read, truncate (ABI 3), ioctl on a device (ABI 5). */
#define LL_FS_FILE_RIGHTS                                                                          \
	(LANDLOCK_EXECUTE | LANDLOCK_WRITE_FILE | LANDLOCK_READ_FILE | (1ULL << 14) | (1ULL << 15))

/* Every filesystem right an ABI knows. */
static uint64_t fs_rights(long abi)
{
	uint64_t fs = (1ULL << 13) - 1; /* ABI 1: execute .. make_sym */
	if (abi >= 2)
		fs |= 1ULL << 13; /* refer */
	if (abi >= 3)
		fs |= 1ULL << 14; /* truncate */
	if (abi >= 5)
		fs |= 1ULL << 15; /* ioctl_dev */
	return fs;
}

int landlock_restrict(const struct landlock_rule *rules, size_t n, char *why, size_t len)
{
	long abi = syscall(SYS_landlock_create_ruleset, NULL, 0, LL_CREATE_VERSION);
	if (abi < 1)
		return 0;
	struct ll_ruleset_attr ra = {.handled_access_fs = fs_rights(abi)};
	size_t size = sizeof ra.handled_access_fs;
	if (abi >= 4) {
		ra.handled_access_net = (1ULL << 0) | (1ULL << 1); /* bind, connect TCP */
		size = offsetof(struct ll_ruleset_attr, scoped);
	}
	if (abi >= 6) {
		ra.scoped = (1ULL << 0) | (1ULL << 1); /* abstract unix sockets, signals */
		size = sizeof ra;
	}
	int rfd = (int)syscall(SYS_landlock_create_ruleset, &ra, size, 0);
	if (rfd < 0) {
		snprintf(why, len, "landlock_create_ruleset: %s", strerror(errno));
		return -1;
	}
	for (size_t i = 0; i < n; i++) {
		int pfd = open(rules[i].path, O_PATH | O_CLOEXEC);
		if (pfd < 0)
			continue; /* not on this machine: nothing to grant */
		struct stat st;
		uint64_t access = rules[i].access & ra.handled_access_fs;
		if (fstat(pfd, &st) == 0 && !S_ISDIR(st.st_mode))
			access &= LL_FS_FILE_RIGHTS; /* a file takes file rights only */
		struct ll_path_beneath pb = {.allowed_access = access, .parent_fd = pfd};
		long rc =
		    access ? syscall(SYS_landlock_add_rule, rfd, LL_RULE_PATH_BENEATH, &pb, 0) : 0;
		int saved = errno;
		close(pfd);
		if (rc < 0) {
			snprintf(why, len, "landlock_add_rule %s: %s", rules[i].path,
				 strerror(saved));
			close(rfd);
			return -1;
		}
	}
	long rc = syscall(SYS_landlock_restrict_self, rfd, 0);
	int saved = errno;
	close(rfd);
	if (rc < 0) {
		snprintf(why, len, "landlock_restrict_self: %s", strerror(saved));
		return -1;
	}
	return (int)abi;
}
