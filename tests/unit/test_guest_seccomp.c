/*
 * guest-seccomp: the container's filter answers EPERM to every call it
 * denies, whatever the caller's privileges (cmocka).
 *
 * Each probe is a harmless call (bad arguments, a child's own state) that
 * the host's root, without the filter, gets something else than EPERM for:
 * the probes run twice in forked children, once bare and once under
 * no_new_privs + the filter, so the test shows the filter is what denies.
 * Run as root (the tests are): as an ordinary user the kernel's own
 * permission checks would answer EPERM first for most of them.
 */
#include <errno.h>
#include <linux/filter.h>
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>

#include "guest-seccomp.h"

struct probe {
	const char *name;
	long (*call)(void);
	bool bare_allowed; /* the bare root gets something else than EPERM here */
};

/* Probes: each returns the call's result; errno says why it failed. */
/* clang-format off */
static long p_bpf(void) { return syscall(SYS_bpf, 9999, NULL, 0); }
static long p_kexec_load(void) { return syscall(SYS_kexec_load, 0, 100000, NULL, 0); }
static long p_kexec_file_load(void) { return syscall(SYS_kexec_file_load, -1, -1, 0, NULL, 0); }
static long p_init_module(void) { return syscall(SYS_init_module, NULL, 0, ""); }
static long p_finit_module(void) { return syscall(SYS_finit_module, -1, "", 0); }
static long p_delete_module(void) { return syscall(SYS_delete_module, "cubicle_none", 04000); }
static long p_add_key(void) { return syscall(SYS_add_key, NULL, NULL, NULL, 0, 0); }
static long p_request_key(void) { return syscall(SYS_request_key, NULL, NULL, NULL, 0); }
static long p_keyctl(void) { return syscall(SYS_keyctl, 9999, 0, 0, 0, 0); }
static long p_perf_event_open(void) { return syscall(SYS_perf_event_open, NULL, 0, -1, -1, 0); }
static long p_open_by_handle_at(void) { return syscall(SYS_open_by_handle_at, -1, NULL, 0); }
static long p_name_to_handle_at(void)
{
	return syscall(SYS_name_to_handle_at, -1, "", NULL, NULL, 0);
}
static long p_mbind(void) { return syscall(SYS_mbind, NULL, 0, 0, NULL, 0, 0); }
static long p_get_mempolicy(void) { return syscall(SYS_get_mempolicy, NULL, NULL, 0, NULL, 0); }
static long p_set_mempolicy(void) { return syscall(SYS_set_mempolicy, 0, NULL, 0); }
static long p_move_pages(void) { return syscall(SYS_move_pages, 0, 0, NULL, NULL, NULL, 0); }
static long p_migrate_pages(void) { return syscall(SYS_migrate_pages, 0, 0, NULL, NULL); }
static long p_vsock(void) { return socket(40 /* AF_VSOCK */, SOCK_STREAM, 0); }
static long p_iopl(void) { return syscall(SYS_iopl, 99); }
static long p_ioperm(void) { return syscall(SYS_ioperm, ~0UL, 1, 1); }
static long p_swapon(void) { return syscall(SYS_swapon, (char *)1, 0); }
static long p_swapoff(void) { return syscall(SYS_swapoff, (char *)1); }
static long p_reboot(void) { return syscall(SYS_reboot, 0, 0, 0, NULL); }
static long p_settimeofday(void) { return syscall(SYS_settimeofday, NULL, NULL); }
static long p_clock_settime(void) { return syscall(SYS_clock_settime, 9999, NULL); }
static long p_adjtimex(void) { return syscall(SYS_adjtimex, NULL); }
static long p_acct(void) { return syscall(SYS_acct, (char *)1); }
static long p_quotactl(void) { return syscall(SYS_quotactl, 0, NULL, 0, NULL); }
static long p_userfaultfd(void) { return syscall(SYS_userfaultfd, ~0); }
static long p_unshare_user(void) { return syscall(SYS_unshare, CLONE_NEWUSER); }
static long p_setns(void) { return syscall(SYS_setns, -1, 0); }
static long p_mount(void) { return syscall(SYS_mount, NULL, (char *)1, NULL, 0, NULL); }
static long p_umount2(void) { return syscall(SYS_umount2, (char *)1, 0); }
static long p_pivot_root(void) { return syscall(SYS_pivot_root, (char *)1, (char *)1); }
static long p_fsopen(void) { return syscall(SYS_fsopen, "cubicle_none", 0); }
static long p_syslog(void) { return syscall(SYS_syslog, 9999, NULL, 0); }
static long p_uselib(void) { return syscall(SYS_uselib, (char *)1); }
static long p_sysfs(void) { return syscall(SYS_sysfs, 99); }
static long p_fanotify_init(void) { return syscall(SYS_fanotify_init, ~0U, 0); }
static long p_sethostname(void) { return syscall(SYS_sethostname, (char *)1, 5); }
static long p_kcmp(void) { return syscall(SYS_kcmp, 0, 0, 9999, 0, 0); }
static long p_ptrace(void) { return syscall(SYS_ptrace, 9999, 0, NULL, NULL); }
static long p_io_uring_setup(void) { return syscall(SYS_io_uring_setup, 0, NULL); }
/* clang-format on */

static const struct probe probes[] = {
    {"bpf", p_bpf, true},
    {"kexec_load", p_kexec_load, false},
    {"kexec_file_load", p_kexec_file_load, false},
    {"init_module", p_init_module, false},
    {"finit_module", p_finit_module, false},
    {"delete_module", p_delete_module, false},
    {"add_key", p_add_key, true},
    {"request_key", p_request_key, true},
    {"keyctl", p_keyctl, true},
    {"perf_event_open", p_perf_event_open, true},
    {"open_by_handle_at", p_open_by_handle_at, true},
    {"name_to_handle_at", p_name_to_handle_at, true},
    {"mbind", p_mbind, true},
    {"get_mempolicy", p_get_mempolicy, true},
    {"set_mempolicy", p_set_mempolicy, true},
    {"move_pages", p_move_pages, true},
    {"migrate_pages", p_migrate_pages, true},
    {"socket(AF_VSOCK)", p_vsock, true},
    {"iopl", p_iopl, true},
    {"ioperm", p_ioperm, true},
    {"swapon", p_swapon, true},
    {"swapoff", p_swapoff, true},
    {"reboot", p_reboot, true},
    {"settimeofday", p_settimeofday, true},
    {"clock_settime", p_clock_settime, true},
    {"adjtimex", p_adjtimex, true},
    {"acct", p_acct, true},
    {"quotactl", p_quotactl, true},
    {"userfaultfd", p_userfaultfd, true},
    {"setns", p_setns, true},
    {"mount", p_mount, true},
    {"umount2", p_umount2, true},
    {"pivot_root", p_pivot_root, true},
    {"fsopen", p_fsopen, true},
    {"syslog", p_syslog, true},
    {"uselib", p_uselib, false},
    {"sysfs", p_sysfs, false},
    {"fanotify_init", p_fanotify_init, true},
    {"sethostname", p_sethostname, true},
    {"kcmp", p_kcmp, true},
    {"ptrace", p_ptrace, true},
    {"io_uring_setup", p_io_uring_setup, false},
    /* Last: in the bare run it succeeds, and the probes after it would run
       without the host's capabilities. */
    {"unshare(CLONE_NEWUSER)", p_unshare_user, true},
};
#define NPROBES (sizeof(probes) / sizeof(probes[0]))

/*
 * Runs every probe in a child (under the filter when one is given) and
 * fills errs[] with each call's errno (0 when it succeeded).
 */
static void run_probes(const struct sock_fprog *filter, int errs[NPROBES])
{
	int fds[2];
	assert_int_equal(pipe(fds), 0);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		close(fds[0]);
		setsid(); /* no controlling terminal for anything to act on */
		if (filter && (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0 ||
			       prctl(PR_SET_SECCOMP, 2 /* SECCOMP_MODE_FILTER */, filter) < 0))
			_exit(2);
		int out[NPROBES];
		for (size_t i = 0; i < NPROBES; i++) {
			errno = 0;
			long rc = probes[i].call();
			out[i] = rc < 0 ? errno : 0;
		}
		_exit(write(fds[1], out, sizeof(out)) == (ssize_t)sizeof(out) ? 0 : 3);
	}
	close(fds[1]);
	assert_int_equal(read(fds[0], errs, NPROBES * sizeof(int)),
			 (ssize_t)(NPROBES * sizeof(int)));
	close(fds[0]);
	int status;
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

static void test_denied_calls_get_eperm(void **state)
{
	(void)state;
	if (geteuid() != 0)
		skip();
	struct sock_fprog filter;
	struct err e = {0};
	assert_int_equal(guest_seccomp_build(&filter, &e), 0);
	int bare[NPROBES], filtered[NPROBES];
	run_probes(NULL, bare);
	run_probes(&filter, filtered);
	guest_seccomp_free(&filter);
	int failures = 0;
	for (size_t i = 0; i < NPROBES; i++) {
		bool bad = filtered[i] != EPERM || (probes[i].bare_allowed && bare[i] == EPERM);
		if (bad) {
			print_error("%s: bare root gets %s, under the filter %s\n", probes[i].name,
				    strerror(bare[i]), strerror(filtered[i]));
			failures++;
		}
	}
	assert_int_equal(failures, 0);
}

static void test_allowed_calls_still_work(void **state)
{
	(void)state;
	struct sock_fprog filter;
	struct err e = {0};
	assert_int_equal(guest_seccomp_build(&filter, &e), 0);
	int fds[2];
	assert_int_equal(pipe(fds), 0);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0 ||
		    prctl(PR_SET_SECCOMP, 2, &filter) < 0)
			_exit(2);
		/* Ordinary sockets, a query of the persona, getpid. */
		int ok = socket(AF_UNIX, SOCK_STREAM, 0) >= 0 &&
			 socket(AF_INET, SOCK_DGRAM, 0) >= 0 &&
			 syscall(SYS_personality, 0xffffffffUL) >= 0 && getpid() > 0;
		_exit(ok ? 0 : 1);
	}
	close(fds[0]);
	close(fds[1]);
	int status;
	assert_int_equal(waitpid(pid, &status, 0), pid);
	guest_seccomp_free(&filter);
	assert_true(WIFEXITED(status));
	assert_int_equal(WEXITSTATUS(status), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_denied_calls_get_eperm),
	    cmocka_unit_test(test_allowed_calls_still_work),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
