/*
 * drvutil: small helpers the isolation drivers share (processes, their JSON
 * state, finding programs, log tails, emptying a computer's directory).
 */
#ifndef CUBICLE_DRVUTIL_H
#define CUBICLE_DRVUTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>
#include <jansson.h>

#include "driver.h"

/* An integer of the state object, or def. */
long long drv_state_int(const json_t *state, const char *key, long long def);
void drv_state_set_int(json_t *state, const char *key, long long v);
/* A string of the state object, or def. */
const char *drv_state_str(const json_t *state, const char *key, const char *def);
void drv_state_del(json_t *state, const char *key);

/* Searches $PATH, then the usual places, for an executable. */
int drv_find_exe(const char *name, char *out, size_t len);

/*
 * What every program cubicled starts gets instead of cubicled's own
 * environment (which may hold CUBICLE_ADMIN_KEY): PATH and LANG only.
 */
extern char *const drv_child_env[];

/*
 * In a child between fork and exec: every descriptor from 3 up is closed
 * but `keep` (-1 for none), which stays open across the exec. Descriptors
 * another thread opened without O_CLOEXEC (a tenant's upload, a socket)
 * never reach the program. 0, or -1 with errno.
 */
int drv_child_fds(int keep);

/* Runs argv (argv[0] searched in $PATH) as a child and waits, with
 * drv_child_env and only stdin/stdout/stderr; 0 when it
 * exits 0, else an error prefixed with `who` that quotes the end of its
 * stderr, which goes to errfile (replaced when it is a regular file or a
 * symlink, never followed; anything else there, such as a device, is left
 * alone and the stderr is dropped). */
int drv_run(char *const argv[], const char *errfile, const char *who, struct err *e);

/* The last len - 1 bytes of a log file on one line ('|' for newlines), for
 * an error message; "" when there is none. */
void drv_log_tail(const char *path, char *out, size_t len);

/*
 * Mounts the ext4 image file `image` (a computer's disk) through a free
 * loop device and returns the mount, detached (an fd from fsmount, in no
 * mount table: openat() into it; it goes when the last descriptor on it
 * closes, and the loop device with it: LO_FLAGS_AUTOCLEAR). Direct I/O (the
 * guest's page cache is the only cache of its disk); nodev, nosuid;
 * noinit_itable and discard. read_only: mounted MS_RDONLY, noexec too (the
 * journal is still replayed if it must be). Safe between fork and exec (no
 * allocation). -1 with why filled.
 */
int drv_disk_mount(const char *image, bool read_only, char *why, size_t len);

/* Removes everything inside dir (not dir itself), never following a
 * symlink or crossing a mount; 0, or -1 with errno. */
int drv_rm_contents(const char *dir);

/* The checks every driver call starts with: a file-name id, an absolute
 * directory, an image, a state object. `who` prefixes the message. */
int drv_check_computer(const struct driver_computer *c, const char *who, struct err *e);

/*
 * Reads /proc/<pid>/stat: its start time and state letter ('Z' for a zombie).
 * Returns -1 when there is no such process. Safe between fork and exec.
 */
int drv_proc_stat(pid_t pid, unsigned long long *start, char *state);

/* Whether pid is the process that started at `start` and has not exited
 * (pids get reused: the start time tells). */
bool drv_proc_alive(pid_t pid, unsigned long long start);

/* Waits until the process pid that started at `start` is gone; reaps it
 * when it is our child (cubicled is a subreaper, so it inherits detached
 * computers when their middle child exits). */
bool drv_wait_gone(pid_t pid, unsigned long long start, int timeout_ms);

#endif
