/*
 * procview: the computer's size as its programs see it, in a container
 * (`envd --sizes SPEC`). A microVM needs none of this: its kernel knows
 * its CPUs, memory and uptime.
 *
 * The container driver (host/drivers/container-boot.h) mounts one FUSE
 * file over each of /proc/meminfo, /proc/cpuinfo, /proc/stat and
 * /sys/devices/system/cpu/online in the computer's mount namespace, before
 * envd starts, and hands envd the four /dev/fuse connections; this module
 * serves them from one thread, with the text of procview-text.h made from the
 * real /proc/stat and /proc/cpuinfo (descriptors opened before the files
 * were covered) and the computer's cgroup (its memory usage and
 * memory.stat, opened by the host). The rest of the size is kernel work
 * the driver sets up: the CPU affinity (nproc, sched_getaffinity), a time
 * namespace whose boot time is the computer's start (/proc/uptime, process
 * start times) and the computer's own disk (df /).
 *
 * Why a server inside the computer rather than Debian's lxcfs (one FUSE
 * daemon on the host for every container): it lives and dies with the
 * computer (no host daemon whose restart leaves every guest's /proc
 * unreadable), its memory and CPU are the computer's own (its cgroup), and
 * one guest cannot slow another's /proc. Costs: host/README.md, "Sizes the
 * guest sees".
 *
 * The server thread never reads the files it serves (it would wait for
 * itself); it reads only the descriptors it was given.
 */
#ifndef CUBICLE_PROCVIEW_H
#define CUBICLE_PROCVIEW_H

#include "err.h"

struct procview_opts {
	long long memory_bytes; /* the size's memory: MemTotal */
	int cgroup_version;	/* 1 or 2: the format of the memory files */
	/* The four FUSE connections (each the root of one mounted file). */
	int fuse_meminfo, fuse_cpuinfo, fuse_stat, fuse_online;
	/* Where the text comes from. */
	int proc_stat, proc_cpuinfo;   /* the real /proc files */
	int memory_usage, memory_stat; /* the cgroup's memory.usage_in_bytes
					  (v2: memory.current) and memory.stat */
};

/*
 * Parses `envd --sizes`: comma-separated key=value, every key required:
 * memory=BYTES,cgroup=1|2,meminfo=FD,cpuinfo=FD,stat=FD,online=FD,
 * proc-stat=FD,proc-cpuinfo=FD,memory-usage=FD,memory-stat=FD. The
 * descriptors must be open; they are made close-on-exec.
 */
int procview_parse(const char *spec, struct procview_opts *o, struct err *e);

/*
 * Starts serving (one thread, for the life of the process). The CPUs shown
 * are the process's affinity at this call. Call it first thing: anything
 * in envd that reads a covered file before would wait for it.
 */
int procview_start(const struct procview_opts *o, struct err *e);

#endif
