/*
 * container-boot: starts a container computer's processes, detached from
 * the caller, and tells who they are.
 *
 *   caller (cubicled, any thread)
 *     └─ fork: launcher (setsid; exits when the boot is done)
 *          ├─ unshare(NEWNET): the guest's network namespace, owned by
 *          │    the host's root, lo up and the egress policy's routes in it
 *          ├─ clone3(NEWUSER|NEWPID|NEWNS|NEWUTS|NEWIPC): init, in that
 *          │    network namespace; waits for the launcher, mounts the root,
 *          │    pivots, applies no_new_privs + seccomp, execs tini → envd
 *          ├─ setns back to the host's network namespace
 *          └─ fork: slirp4netns, attached to init's network namespace
 *
 * The launcher, running as the host's root, writes init's uid/gid maps,
 * puts init into the computer's cgroups before init runs anything, and
 * makes the idmapped mount of the image (only the host's root may idmap a
 * host filesystem) and the mount of the computer's disk (only the host's
 * root may mount a block device) that it hands to init over a socket. When the launcher
 * exits, init and slirp4netns are re-parented to the host's init (or the
 * nearest subreaper): nothing of the computer depends on the caller staying
 * alive. Everything the children do between fork and exec is plain system
 * calls on memory prepared by the caller.
 */
#ifndef CUBICLE_CONTAINER_BOOT_H
#define CUBICLE_CONTAINER_BOOT_H

#include <linux/filter.h>
#include <sched.h>
#include <stdbool.h>
#include <sys/types.h>

#include "cgroup.h"
#include "err.h"
#include "guest-net.h"

/*
 * The size as the guest sees it (envd/guest/procview.h has the guest's side):
 *   - cpus: init's CPU affinity, inherited by everything in the computer
 *     (nproc, sched_getaffinity);
 *   - a time namespace whose boot time is the launch (/proc/uptime and the
 *     processes' start times count from it), when the kernel has them
 *     (CONFIG_TIME_NS; without it the guest sees the host's uptime and the
 *     console log says so);
 *   - fuse: one FUSE file mounted over each of /proc/meminfo,
 *     /proc/cpuinfo, /proc/stat and /sys/devices/system/cpu/online, whose
 *     connections init hands envd at fixed descriptors, with the real
 *     /proc/stat and /proc/cpuinfo and the cgroup's memory files:
 */
#define BOOT_SIZES_FD_MEMINFO	   4 /* the four FUSE connections */
#define BOOT_SIZES_FD_CPUINFO	   5
#define BOOT_SIZES_FD_STAT	   6
#define BOOT_SIZES_FD_ONLINE	   7
#define BOOT_SIZES_FD_PROC_STAT	   8  /* the real /proc/stat */
#define BOOT_SIZES_FD_PROC_CPUINFO 9  /* the real /proc/cpuinfo */
#define BOOT_SIZES_FD_MEM_USAGE	   10 /* memory.usage_in_bytes (v2: memory.current) */
#define BOOT_SIZES_FD_MEM_STAT	   11 /* memory.stat */

struct boot_sizes {
	cpu_set_t cpus; /* an empty set leaves the affinity alone */
	bool fuse;	/* mount the size files (the guest's envd must serve them) */
};

struct boot_plan {
	const char *dir;	  /* the computer's host directory: holds lower/ upper/
				     work/ merged/ io/ (owned by uid_base) */
	const char *image_rootfs; /* the image's directory tree (read-only lower layer) */
	const char *disk_image;	  /* an ext4 image holding upper/ and work/ (the
				     launcher loop-mounts it in the guest's mount
				     namespace), or NULL: upper/ and work/ in dir */
	const char *session_dir;  /* bound at /session, or NULL */
	unsigned int uid_base;	  /* guest uid/gid 0..65535 = host uid_base.. */
	const struct cgroup_set *cgroups;
	const struct sock_fprog *filter;
	int log_fd;	   /* the guest's stdout and stderr */
	char *const *argv; /* the guest's init, a path inside the image */
	char *const *envp;
	const char *slirp_path;		       /* slirp4netns executable */
	const struct guest_net_policy *egress; /* the routes of the guest's network */
	int timeout_ms;			       /* for the whole boot (until the init has exec'd) */
	const struct boot_sizes *sizes;	       /* NULL: the guest sees the host's sizes */
};

struct boot_result {
	pid_t init_pid;		       /* host pid of the guest's pid 1 */
	unsigned long long init_start; /* its start time (/proc/<pid>/stat field 22) */
	pid_t slirp_pid;
	unsigned long long slirp_start;
};

/*
 * Boots the plan. Returns once the guest's init has exec'd and slirp4netns
 * has configured the network (envd may not listen yet). On failure nothing
 * it started is left running and e says which step failed and why.
 */
int container_boot(const struct boot_plan *p, struct boot_result *r, struct err *e);

#endif
