/*
 * zygote: the language-independent half of a code-runner supervisor that
 * makes the sandboxes.
 *
 * A supervisor (cubicle-pyrun) first splits in two (zygote_split): the
 * process cubicled started becomes the hub (hub.h), which serves the runs;
 * its child goes on to load the interpreter once and calls zygote_serve(),
 * which never returns. The zygote keeps `pool` sandboxes made ahead, each a
 * fork of it that dropped to the run uid, closed every descriptor but its
 * pipes, set no_new_privs, rlimits, a Landlock domain (read-only access to
 * the paths the language needs, no TCP, no signals or abstract sockets
 * outside itself) and a seccomp allowlist, warmed up, and now waits for
 * code. The zygote hands each one's pipes to the hub at once and makes
 * another when the hub says a run took one. One fork per sandbox; one
 * sandbox, one run: nothing of a run outlives it.
 *
 * The zygote itself runs no user code, never sees a run's bytes, holds no
 * secrets (cubicled starts the supervisor with a clean environment and no
 * inherited descriptors) and lives in a network namespace of its own with
 * nothing in it (lo down).
 */
#ifndef CUBICLE_ZYGOTE_H
#define CUBICLE_ZYGOTE_H

#include <stddef.h>
#include <sys/types.h>

struct zygote_lang {
	const char *name; /* "python": for log lines */
	/* Around the zygote's fork of a sandboxed child (the interpreter's
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
	 * closes it and exits. The hub answers as soon as all three are
	 * closed with a verdict, and kills the child (its teardown is not the
	 * run's time). Never returns.
	 */
	void (*run)(int code_fd, int status_fd);
};

struct zygote_opts {
	uid_t uid;
	gid_t gid;
	int pool;		     /* sandboxes kept made ahead */
	const char *const *readable; /* directories the code may read (NULL-terminated) */
};

/*
 * Leaves the host's network and IPC namespaces for empty ones of the
 * zygote's own (before the interpreter starts). -1 with a reason in why.
 */
int zygote_isolate(char *why, size_t len);

/*
 * Splits the supervisor before its interpreter starts: returns 0 in a new
 * child, the zygote, which loads the interpreter and calls zygote_serve();
 * this process becomes the hub and never returns (hub_serve). -1 with a
 * reason in why if the split failed.
 */
int zygote_split(const char *name, char *why, size_t len);

/* Makes sandboxes for the hub until it is gone; never returns. */
void zygote_serve(const struct zygote_lang *l, const struct zygote_opts *o);

#endif
