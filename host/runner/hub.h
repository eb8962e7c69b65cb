/*
 * hub: the trusted half of a code-runner supervisor (cubicle-pyrun): one
 * small C process, no interpreter in it, that watches every sandbox and
 * serves every run.
 *
 * cubicle-pyrun splits in two before its interpreter starts
 * (zygote_split()): this process stays on the control socket (fd 3,
 * runproto.h) as the hub, and its child, the zygote, loads the interpreter
 * and forks the sandboxes (zygote.h). Each sandboxed child is forked once,
 * by the zygote, which hands the hub the child's pipes and a pidfd
 * (HUB_NEW) and never sees a run's bytes. The hub's one event loop waits
 * for a child to say it is ready, gives it one run (the connection that
 * came over fd 3), writes it the code and stdin, collects its stdout,
 * stderr and verdict with the limits enforced from outside (CPU time read
 * off the child's CPU clock, wall time, output bytes), answers, kills the
 * child and tells the zygote to make another (HUB_DONE).
 *
 * The hub never forks after the split and runs no user code; a run's code
 * and output live only in the hub and in that run's own child, so nothing
 * of one run can reach another's sandbox.
 */
#ifndef CUBICLE_HUB_H
#define CUBICLE_HUB_H

#include <stdint.h>
#include <sys/types.h>

/*
 * The wire between the zygote and the hub: a SOCK_SEQPACKET socketpair,
 * one struct hub_msg per message.
 *   HUB_NEW  zygote → hub: a sandbox was forked; SCM_RIGHTS carries
 *            HUB_NEW_FDS descriptors in this order: its pidfd, the write
 *            end of its stdin, the read ends of its stdout, stderr and
 *            verdict pipes, the write end of its code pipe.
 *   HUB_EXIT zygote → hub: a sandbox was reaped (the zygote is its
 *            parent): its wait status, CPU time and peak RSS.
 *   HUB_DONE hub → zygote: the hub let go of a sandbox: `taken` 1 if a
 *            run took it (the zygote makes another), 0 if it never got
 *            ready (a failure: the zygote backs off after a few).
 */
enum hub_msg_type { HUB_NEW = 'N', HUB_EXIT = 'X', HUB_DONE = 'D' };

#define HUB_NEW_FDS 6

struct hub_msg {
	uint32_t type; /* enum hub_msg_type */
	int32_t pid;
	int32_t status;	   /* HUB_EXIT: the wait status */
	uint32_t taken;	   /* HUB_DONE */
	int64_t cpu_us;	   /* HUB_EXIT: user + system time */
	int64_t maxrss_kb; /* HUB_EXIT */
};

/* Serves runs on fd 3 with the sandboxes the zygote sends on zfd; never
 * returns (exits when cubicled closes fd 3 or the zygote is gone). */
void hub_serve(const char *name, int zfd);

#ifdef ZYGOTE_TRACE
/* Stage tracing (a build with -DZYGOTE_TRACE): one line to fd 9 per stage,
 * with the wall time since t0_us, this process's CPU time and minor faults
 * (docs/code-runner.md). */
void hub_trace(pid_t who, const char *what, int64_t t0_us);
#endif

#endif
