/*
 * cgroup: one control group per computer, on cgroup v1 or v2, whichever the
 * host runs.
 *
 * A computer's group is `cubicle/<id>` at the root of each hierarchy it
 * needs: on v2 one directory under the unified mount (cpu, memory and pids
 * enabled for it); on v1 one per hierarchy among cpu, cpuacct, memory, pids
 * and name=systemd (a process left in the service's name=systemd group would
 * be killed with the service). Groups sit at the hierarchy root, not under
 * cubicled's own group, so a restarted or moved cubicled finds them at the
 * same place and a service manager stopping cubicled does not take the
 * computers with it. Everything the computer runs, its network helper
 * included, is in the group, so "kill what is in the group until it is
 * empty" ends a computer whatever state cubicled lost.
 */
#ifndef CUBICLE_CGROUP_H
#define CUBICLE_CGROUP_H

#include <stdbool.h>
#include <sys/types.h>
#include <jansson.h>

#include "err.h"

#define CGROUP_MAX_DIRS 8

struct cgroup_set {
	int version;			  /* 1 or 2; 0 = not located */
	int n;				  /* directories used */
	char dirs[CGROUP_MAX_DIRS][256];  /* one per hierarchy (v2: one) */
	char procs[CGROUP_MAX_DIRS][272]; /* dirs[i] + "/cgroup.procs" */
};

struct cgroup_limits {
	int millicpus;	     /* CPU quota: 1000 = one CPU; <= 0 = none */
	long long memory_mb; /* memory (and memory+swap) limit; <= 0 = none */
	int pids_max;	     /* process limit; <= 0 = none */
};

/*
 * Where the group of computer `id` is (or would be) on this host. Fails
 * with ERR_UNAVAILABLE when the host lacks a needed controller (cpu,
 * memory, pids), naming it.
 */
int cgroup_locate(const char *id, struct cgroup_set *out, struct err *e);

/* The end of a driver's available(): whether this host can make a
 * computer's group (cgroup_locate of a probe); true with why "" (when given),
 * else false with why cgroup_locate said. */
bool cgroup_usable(char *why, size_t len);

/* The same from another mount table than /proc/self/mountinfo (tests point
 * it at a fake hierarchy). */
int cgroup_locate_in(const char *mountinfo, const char *id, struct cgroup_set *out, struct err *e);

/* Creates the directories of a located set (existing ones are reused) and
 * writes the limits. */
int cgroup_create(const struct cgroup_set *s, const struct cgroup_limits *lim, struct err *e);

/* Moves process pid into every directory of the set. */
int cgroup_attach(const struct cgroup_set *s, pid_t pid, struct err *e);

/*
 * Opens the group's memory usage (v1 memory.usage_in_bytes, v2
 * memory.current) and memory.stat read-only, close-on-exec: what a
 * container's /proc/meminfo is made from (envd/guest/sizes.h). -1 with e
 * naming the file when one cannot be opened.
 */
int cgroup_open_memory(const struct cgroup_set *s, int *usage_fd, int *stat_fd, struct err *e);

/* Whether any process is left in the set (a missing directory is empty). */
bool cgroup_populated(const struct cgroup_set *s);

/*
 * SIGKILLs everything in the set until it is empty, for up to timeout_ms;
 * ERR_TIMEOUT with the pids left otherwise.
 */
int cgroup_kill(const struct cgroup_set *s, int timeout_ms, struct err *e);

/* Kills what is left (cgroup_kill) and removes the directories. Idempotent. */
int cgroup_remove(const struct cgroup_set *s, struct err *e);

/* {"version":1,"dirs":[...]} and back; from_json returns -1 on a malformed object. */
json_t *cgroup_to_json(const struct cgroup_set *s);
int cgroup_from_json(const json_t *j, struct cgroup_set *out);

#endif
