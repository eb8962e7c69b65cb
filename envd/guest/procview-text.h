/*
 * procview-text: the text of the /proc and /sys files a container computer
 * reads for its size (procview.h serves them), made from the host's files and
 * the computer's cgroup. Pure functions over strings, unit-tested alone
 * (tests/unit/test_procview.c), so the formats of cgroup v1 and v2 are
 * both exercised on a host that runs one of them.
 *
 *   /proc/meminfo                  MemTotal = the size's memory, the rest from
 *                                  the cgroup's usage and memory.stat
 *   /proc/stat, /proc/cpuinfo      the host's, with only the CPUs the computer
 *                                  runs on (its affinity), numbered from 0
 *   /sys/devices/system/cpu/online "0-N" for those CPUs
 *
 * Every function writes at most cap bytes (NUL included) and returns the
 * length written, or -1 when the text did not fit (out is then truncated
 * and NUL-terminated).
 */
#ifndef CUBICLE_PROCVIEW_TEXT_H
#define CUBICLE_PROCVIEW_TEXT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* What the cgroup says about the computer's memory, in bytes. */
struct procview_mem {
	uint64_t limit; /* the size's memory (MemTotal) */
	uint64_t usage; /* v1 memory.usage_in_bytes, v2 memory.current */
	uint64_t file;	/* page cache, shmem included (v1 total_cache, v2 file) */
	uint64_t anon;	/* v1 total_rss, v2 anon */
	uint64_t shmem, mapped, dirty, writeback;
	uint64_t active_anon, inactive_anon, active_file, inactive_file, unevictable;
	uint64_t slab_reclaimable, slab_unreclaimable; /* v2 only (0 on v1) */
};

/*
 * Reads a cgroup's memory.stat (version 1: the hierarchical total_* keys;
 * version 2: anon, file, ...) into m, leaving limit and usage alone. Keys it
 * does not know are skipped; a missing key stays 0.
 */
void procview_memstat_parse(int cgroup_version, const char *text, struct procview_mem *m);

/* /proc/meminfo for m (kB, the kernel's layout; no swap, no huge pages). */
int procview_meminfo(const struct procview_mem *m, char *out, size_t cap);

/*
 * cpus[0..n) are host CPU numbers in ascending order (the computer's
 * affinity). /proc/stat: the "cpuN" lines of those CPUs renumbered 0..n-1,
 * the "cpu" line their sum, every other line as the host has it.
 */
int procview_stat(const char *host_stat, const int *cpus, int n, char *out, size_t cap);

/* /proc/cpuinfo: the host's blocks of those CPUs, "processor" renumbered. */
int procview_cpuinfo(const char *host_cpuinfo, const int *cpus, int n, char *out, size_t cap);

/* /sys/devices/system/cpu/online for n CPUs: "0\n" or "0-<n-1>\n". */
int procview_online(int n, char *out, size_t cap);

#endif
