/*
 * guest-seccomp: builds the container's system call filter with libseccomp
 * (see guest-seccomp.h for what it denies and why).
 *
 * A deny list over an allow-by-default filter, unlike Docker's allow list:
 * the guest runs a whole desktop (Xvfb, Xfce, Firefox, Python, anything the
 * user installs), and a new system call it needs should work rather than
 * fail mysteriously, while everything that reaches past the container is
 * named here. The filter is exported to BPF in memory so the child that
 * installs it does no allocation between fork and exec.
 */
#include "guest-seccomp.h"

#include <errno.h>
#include <sched.h>
#include <seccomp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* Denied outright with EPERM. Names unknown on this architecture are skipped. */
static const char *const guest_seccomp_denied[] = {
    /* kernel modules and kexec */
    "init_module",
    "finit_module",
    "delete_module",
    "create_module",
    "query_module",
    "get_kernel_syms",
    "kexec_load",
    "kexec_file_load",
    /* tracing, bpf, kernel introspection */
    "bpf",
    "perf_event_open",
    "lookup_dcookie",
    "syslog",
    "kcmp",
    /* key ring */
    "keyctl",
    "add_key",
    "request_key",
    /* mounts and namespaces: set up before the filter, never again inside */
    "mount",
    "umount",
    "umount2",
    "pivot_root",
    "unshare",
    "setns",
    "open_tree",
    "move_mount",
    "fsopen",
    "fsconfig",
    "fsmount",
    "fspick",
    "mount_setattr",
    /* other processes' memory */
    "ptrace",
    "process_vm_readv",
    "process_vm_writev",
    "pidfd_getfd",
    "process_madvise",
    /* the machine */
    "reboot",
    "swapon",
    "swapoff",
    "acct",
    "settimeofday",
    "stime",
    "clock_settime",
    "clock_adjtime",
    "adjtimex",
    "quotactl",
    "quotactl_fd",
    "nfsservctl",
    "vhangup",
    "uselib",
    "ustat",
    "_sysctl",
    "sysfs",
    "iopl",
    "ioperm",
    "vm86",
    "vm86old",
    "fanotify_init",
    /* file handles bypass path permissions (the "shocker" escape) */
    "open_by_handle_at",
    "name_to_handle_at",
    /* NUMA memory policy and page migration (CAP_SYS_NICE in Docker): they
       reach other processes' pages and the host's node layout */
    "mbind",
    "get_mempolicy",
    "set_mempolicy",
    "set_mempolicy_home_node",
    "move_pages",
    "migrate_pages",
    /* the host name lives in the computer's own UTS namespace, set up
       before the filter (CAP_SYS_ADMIN in Docker) */
    "sethostname",
    "setdomainname",
    /* kernel attack surface Docker also closes */
    "userfaultfd",
    "io_uring_setup",
    "io_uring_enter",
    "io_uring_register",
};

/* Address families socket() may not create: AF_VSOCK reaches the
 * hypervisor and other guests of the host's VM (Docker denies it too). */
static const int guest_seccomp_families[] = {40 /* AF_VSOCK */};

/* Namespace flags clone() may not carry. */
static const unsigned long guest_seccomp_clone_ns[] = {
    CLONE_NEWNS,  CLONE_NEWUTS, CLONE_NEWIPC,	 CLONE_NEWUSER,
    CLONE_NEWPID, CLONE_NEWNET, CLONE_NEWCGROUP,
};

/* personality() bits that weaken the process (ASLR off, executable data). */
static const unsigned long guest_seccomp_persona_bits[] = {
    0x0040000, /* ADDR_NO_RANDOMIZE */
    0x0100000, /* MMAP_PAGE_ZERO */
    0x0200000, /* ADDR_COMPAT_LAYOUT */
    0x0400000, /* READ_IMPLIES_EXEC */
};

static int guest_seccomp_rules(scmp_filter_ctx ctx, struct err *e)
{
	int rc;
	for (size_t i = 0; i < sizeof(guest_seccomp_denied) / sizeof(guest_seccomp_denied[0]);
	     i++) {
		int nr = seccomp_syscall_resolve_name(guest_seccomp_denied[i]);
		if (nr == __NR_SCMP_ERROR)
			continue;
		rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), nr, 0);
		/* -EDOM/-EFAULT: a pseudo number for a call this arch lacks. */
		if (rc < 0 && rc != -EDOM && rc != -EFAULT)
			return err_set(e, ERR_INTERNAL, "seccomp: cannot deny %s: %s",
				       guest_seccomp_denied[i], strerror(-rc));
	}
	for (size_t i = 0; i < sizeof(guest_seccomp_clone_ns) / sizeof(guest_seccomp_clone_ns[0]);
	     i++) {
		unsigned long f = guest_seccomp_clone_ns[i];
		rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(clone), 1,
				      SCMP_A0(SCMP_CMP_MASKED_EQ, f, f));
		if (rc < 0)
			return err_set(e, ERR_INTERNAL, "seccomp: cannot filter clone flags: %s",
				       strerror(-rc));
	}
	for (size_t i = 0; i < sizeof(guest_seccomp_families) / sizeof(guest_seccomp_families[0]);
	     i++) {
		rc =
		    seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(socket), 1,
				     SCMP_A0(SCMP_CMP_EQ, (scmp_datum_t)guest_seccomp_families[i]));
		if (rc < 0)
			return err_set(e, ERR_INTERNAL, "seccomp: cannot filter socket: %s",
				       strerror(-rc));
	}
	rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(ENOSYS), SCMP_SYS(clone3), 0);
	if (rc < 0)
		return err_set(e, ERR_INTERNAL, "seccomp: cannot filter clone3: %s", strerror(-rc));
	for (size_t i = 0;
	     i < sizeof(guest_seccomp_persona_bits) / sizeof(guest_seccomp_persona_bits[0]); i++) {
		unsigned long b = guest_seccomp_persona_bits[i];
		/* The bit set and bit 31 clear: 0xffffffff only queries the
		 * persona and must keep working (one comparison per argument is
		 * all libseccomp takes, hence the combined mask). */
		rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(personality), 1,
				      SCMP_A0(SCMP_CMP_MASKED_EQ, b | 0x80000000UL, b));
		if (rc < 0)
			return err_set(e, ERR_INTERNAL, "seccomp: cannot filter personality: %s",
				       strerror(-rc));
	}
	return 0;
}

int guest_seccomp_build(struct sock_fprog *out, struct err *e)
{
	memset(out, 0, sizeof(*out));
	scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ALLOW);
	if (!ctx)
		return err_set(e, ERR_INTERNAL, "seccomp: cannot create a filter (out of memory)");
	int rc = seccomp_attr_set(ctx, SCMP_FLTATR_ACT_BADARCH, SCMP_ACT_KILL_PROCESS);
	if (rc < 0) {
		seccomp_release(ctx);
		return err_set(e, ERR_INTERNAL, "seccomp: cannot set the bad-arch action: %s",
			       strerror(-rc));
	}
	if (guest_seccomp_rules(ctx, e) < 0) {
		seccomp_release(ctx);
		return -1;
	}
	int fd = memfd_create("cubicle-seccomp", MFD_CLOEXEC);
	if (fd < 0) {
		seccomp_release(ctx);
		return err_set(e, ERR_INTERNAL, "seccomp: memfd_create: %s", strerror(errno));
	}
	rc = seccomp_export_bpf(ctx, fd);
	seccomp_release(ctx);
	struct stat st;
	if (rc < 0 || fstat(fd, &st) < 0 || st.st_size <= 0 ||
	    st.st_size % (off_t)sizeof(struct sock_filter) != 0 ||
	    st.st_size / (off_t)sizeof(struct sock_filter) > BPF_MAXINSNS) {
		close(fd);
		return err_set(e, ERR_INTERNAL, "seccomp: cannot export the filter: %s",
			       rc < 0 ? strerror(-rc) : "unexpected size");
	}
	struct sock_filter *insns = malloc((size_t)st.st_size);
	if (!insns || pread(fd, insns, (size_t)st.st_size, 0) != st.st_size) {
		free(insns);
		close(fd);
		return err_set(e, ERR_INTERNAL, "seccomp: cannot read the exported filter");
	}
	close(fd);
	out->filter = insns;
	out->len = (unsigned short)(st.st_size / (off_t)sizeof(struct sock_filter));
	return 0;
}

void guest_seccomp_free(struct sock_fprog *prog)
{
	free(prog->filter);
	prog->filter = NULL;
	prog->len = 0;
}
