/*
 * cubicle-jsrun: the JavaScript supervisor of the code runner.
 *
 *   cubicle-jsrun --node PATH --script PATH [--uid N] [--gid N] [--workers N]
 *
 * fd 3 is a listening unix socket cubicled made (runproto.h framing, one
 * connection per run). This launcher leaves the host's network and IPC
 * namespaces for empty ones, drops to the run uid, sets no_new_privs, a
 * Landlock domain (read-only: the node binary's tree, the script's tree,
 * /usr, /lib, /etc; nothing writable; no TCP; signals and abstract sockets
 * scoped) and a seccomp filter (no exec, no new processes, only unix
 * sockets, no ptrace), then execs Node on js/jsrun.mjs, which runs each
 * snippet in a new QuickJS WebAssembly instance (docs/code-runner.md). So
 * the guest's boundary is WebAssembly, and a way out of it lands in an
 * unprivileged process with no network, no files to write and no secrets.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <grp.h>
#include <limits.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>

#include <seccomp.h>

#include "landlock.h"

static void die(const char *what)
{
	fprintf(stderr, "cubicle-jsrun: %s: %s\n", what, strerror(errno));
	exit(1);
}

/* Node needs threads, its JIT and epoll; it does not need to start
 * programs, make processes, use the network or trace anything. */
static void seccomp(void)
{
	scmp_filter_ctx f = seccomp_init(SCMP_ACT_ALLOW);
	if (!f)
		die("seccomp_init");
	static const char *const deny[] = {
	    "execveat",
	    "fork",
	    "vfork",
	    "ptrace",
	    "process_vm_readv",
	    "process_vm_writev",
	    "kexec_load",
	    "init_module",
	    "finit_module",
	    "delete_module",
	    "mount",
	    "umount2",
	    "pivot_root",
	    "chroot",
	    "unshare",
	    "setns",
	    "bpf",
	    "perf_event_open",
	    "userfaultfd",
	    "keyctl",
	    "add_key",
	    "request_key",
	    "io_uring_setup",
	    "kcmp",
	    "pidfd_getfd",
	    "open_by_handle_at",
	    "name_to_handle_at",
	    "reboot",
	    "swapon",
	    "swapoff",
	};
	int rc = 0;
	for (size_t i = 0; i < sizeof deny / sizeof deny[0] && rc == 0; i++) {
		int nr = seccomp_syscall_resolve_name(deny[i]);
		if (nr != __NR_SCMP_ERROR)
			rc = seccomp_rule_add(f, SCMP_ACT_ERRNO(EPERM), nr, 0);
	}
	/* clone: threads only; clone3 gets ENOSYS so libc uses clone */
	if (rc == 0)
		rc = seccomp_rule_add(f, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(clone), 1,
				      SCMP_A0(SCMP_CMP_MASKED_EQ, CLONE_THREAD, 0));
	if (rc == 0)
		rc = seccomp_rule_add(f, SCMP_ACT_ERRNO(ENOSYS), SCMP_SYS(clone3), 0);
	/* sockets: unix only (Node's own plumbing); the namespace is empty anyway */
	if (rc == 0)
		rc = seccomp_rule_add(f, SCMP_ACT_ERRNO(EACCES), SCMP_SYS(socket), 1,
				      SCMP_A0(SCMP_CMP_NE, AF_UNIX));
	if (rc == 0)
		rc = seccomp_load(f);
	seccomp_release(f);
	if (rc < 0) {
		errno = -rc;
		die("seccomp");
	}
}

int main(int argc, char **argv)
{
	const char *node = NULL, *script = NULL;
	uid_t uid = 65534;
	gid_t gid = 65534;
	int workers = 2;
	static const struct option longopts[] = {
	    {"node", required_argument, NULL, 'n'},    {"script", required_argument, NULL, 's'},
	    {"uid", required_argument, NULL, 'u'},     {"gid", required_argument, NULL, 'g'},
	    {"workers", required_argument, NULL, 'w'}, {NULL, 0, NULL, 0},
	};
	int ch;
	while ((ch = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
		if (ch == 'n')
			node = optarg;
		else if (ch == 's')
			script = optarg;
		else if (ch == 'u')
			uid = (uid_t)strtoul(optarg, NULL, 10);
		else if (ch == 'g')
			gid = (gid_t)strtoul(optarg, NULL, 10);
		else if (ch == 'w')
			workers = atoi(optarg);
		else
			return 2;
	}
	if (!node || !script || workers < 1 || workers > 64) {
		fprintf(stderr, "usage: cubicle-jsrun --node PATH --script PATH [--uid N] "
				"[--gid N] [--workers N]\n");
		return 2;
	}
	/* No PR_SET_PDEATHSIG: its "parent" is the thread that forked, and
	 * cubicled restarts a supervisor from a request's thread, which ends
	 * with the request. Node exits when cubicled's end of fd 3 closes. */
	if (unshare(CLONE_NEWNET | CLONE_NEWIPC) < 0)
		die("cannot make an empty network namespace");
	char node_real[PATH_MAX], script_dir[PATH_MAX];
	if (!realpath(node, node_real) || !realpath(script, script_dir))
		die("node or script");
	*strrchr(script_dir, '/') = 0;
	/* (no RLIMIT_FSIZE: stderr is cubicled's log file; Landlock keeps
	 * every other file read-only) */
	static const struct rlimit core0 = {0, 0};
	setrlimit(RLIMIT_CORE, &core0);
	if (setgroups(0, NULL) < 0 || setresgid(gid, gid, gid) < 0 || setresuid(uid, uid, uid) < 0)
		die("cannot drop to the run uid");
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
		die("prctl");
	char ldso[PATH_MAX];
	if (!realpath("/lib64/ld-linux-x86-64.so.2", ldso))
		snprintf(ldso, sizeof ldso, "/lib64/ld-linux-x86-64.so.2");
	/* Read the files and directories Node needs; execute (execve) only
	 * node itself and its ELF interpreter (mapping libraries needs no
	 * execute right); read and write the devices Node opens. */
	const struct landlock_rule rules[] = {
	    {node_real, LANDLOCK_EXECUTE | LANDLOCK_READ_FILE},
	    {ldso, LANDLOCK_EXECUTE | LANDLOCK_READ_FILE},
	    {script_dir, LANDLOCK_READ},
	    {"/usr", LANDLOCK_READ},
	    {"/lib", LANDLOCK_READ},
	    {"/lib64", LANDLOCK_READ},
	    {"/etc/ld.so.cache", LANDLOCK_READ},
	    {"/etc/localtime", LANDLOCK_READ},
	    {"/usr/share/zoneinfo", LANDLOCK_READ},
	    {"/proc/self", LANDLOCK_READ},
	    {"/dev/null", LANDLOCK_READ_FILE | LANDLOCK_WRITE_FILE},
	    {"/dev/urandom", LANDLOCK_READ_FILE | LANDLOCK_WRITE_FILE},
	    {"/dev/random", LANDLOCK_READ_FILE | LANDLOCK_WRITE_FILE},
	};
	char why[256];
	int abi = landlock_restrict(rules, sizeof rules / sizeof rules[0], why, sizeof why);
	if (abi == 0) {
		errno = ENOSYS;
		die("Landlock is not available in this kernel");
	}
	if (abi < 0) {
		fprintf(stderr, "cubicle-jsrun: %s\n", why);
		exit(1);
	}
	seccomp();
	char nw[16];
	snprintf(nw, sizeof nw, "%d", workers);
	char *const nargv[] = {"node",
			       "--max-old-space-size=256",
			       "--disallow-code-generation-from-strings",
			       (char *)script,
			       nw,
			       NULL};
	char *const envp[] = {"PATH=/usr/bin:/bin", "LANG=C.UTF-8",	      "TZ=UTC",
			      "HOME=/nonexistent",  "OPENSSL_CONF=/dev/null", NULL};
	execve(node_real, nargv, envp);
	die("execve node");
}
