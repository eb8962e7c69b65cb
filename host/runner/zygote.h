/*
 * zygote: the language-independent half of a code-runner supervisor.
 *
 * A supervisor (cubicle-pyrun) loads its interpreter once, then calls
 * zygote_serve(), which never returns. It keeps `pool` monitors ready,
 * each a fork of the zygote that has already forked its sandbox: a child
 * that dropped to the run uid, closed every descriptor but its pipes, set
 * no_new_privs, rlimits, a Landlock domain (read-only access to the paths
 * the language needs, no TCP, no signals or abstract sockets outside
 * itself) and a seccomp allowlist, and now waits for code. A ready monitor
 * takes one connection from the control socket (fd 3, runproto.h), tells
 * the zygote to fork its replacement, hands the code and stdin to its
 * child, collects stdout, stderr and the child's verdict with the limits
 * enforced from outside (CPU time read off the child's CPU clock, wall
 * time, output bytes), answers and exits. One monitor, one child, one run:
 * nothing of a run outlives it.
 *
 * The zygote itself runs no user code, holds no secrets (cubicled starts it
 * with a clean environment and no inherited descriptors) and lives in a
 * network namespace of its own with nothing in it (lo down).
 */
#ifndef CUBICLE_ZYGOTE_H
#define CUBICLE_ZYGOTE_H

#include <stddef.h>
#include <sys/types.h>

struct zygote_lang {
	const char *name; /* "python": for log lines */
	/* Around the monitor's fork of its sandboxed child (the interpreter's
	 * own bookkeeping; after_fork_child runs in the child); may be NULL.
	 * The zygote is single-threaded, so a child's copy of the interpreter
	 * is consistent without them; they are for what must differ per run
	 * (Python: random's seed). */
	void (*before_fork)(void);
	void (*after_fork_parent)(void);
	void (*after_fork_child)(void);
	/* In the sandboxed child, before it is offered a run (e.g. warm-up
	 * work whose copy-on-write faults should not be on the request
	 * path); may be NULL. */
	void (*prepare)(void);
	/*
	 * In the sandboxed child: reads the code (up to RUN_CODE_MAX bytes,
	 * until EOF) from code_fd, runs it with stdin/stdout/stderr on fds
	 * 0/1/2, closes 1 and 2, writes its verdict to status_fd as one
	 * record, a kind ('0' ended, 'E' raised, 'M' out of memory), the exit
	 * status in three digits and a message ("E001ValueError: 42"),
	 * closes it and exits. The monitor answers as soon as all three are
	 * closed with a verdict, and kills the child (its teardown is not the
	 * run's time). Never returns.
	 */
	void (*run)(int code_fd, int status_fd);
};

struct zygote_opts {
	uid_t uid;
	gid_t gid;
	int pool;		     /* ready monitors kept */
	const char *const *readable; /* directories the code may read (NULL-terminated) */
};

/*
 * Leaves the host's network and IPC namespaces for empty ones of the
 * zygote's own (before the interpreter starts). -1 with a reason in why.
 */
int zygote_isolate(char *why, size_t len);

/* Serves runs on fd 3 until cubicled closes it; never returns. */
void zygote_serve(const struct zygote_lang *l, const struct zygote_opts *o);

#endif
