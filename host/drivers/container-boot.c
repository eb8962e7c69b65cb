/*
 * container-boot: the launcher, the guest's init before its exec, and the
 * network helper (see container-boot.h for the process tree).
 *
 * Why it is done this way:
 * - The caller is a multi-threaded service. Its forked children only make
 *   system calls on memory the caller prepared; every descriptor the
 *   launcher does not need is closed, and descriptors it creates are
 *   close-on-exec, so neither the guest nor slirp4netns inherits a socket or
 *   database of cubicled's.
 * - The image belongs to the host's root. Shifting ownership is done with an
 *   idmapped mount of the image (host uid 0 → the computer's uid_base) that
 *   the launcher makes with init's user namespace and hands to init; the
 *   overlay's upper layer then stores the guest's files under the
 *   computer's own unprivileged range, so a file the guest's root owns is
 *   owned by nobody in particular on the host.
 * - init resolves its host paths while it is still the host's uid 0 (it
 *   is, until it switches to the mapped root): the owner bits of root's
 *   0700 state directories let it through, where the mapped root could not
 *   even look. It resolves them relative to the working directory the
 *   launcher sets (the computer's dir), in its own mount namespace: the
 *   overlay only accepts layers from the namespace that mounts it.
 * - The overlay is made with the new mount API so init keeps a descriptor
 *   on the merged root and can mount proc, /dev, /run... relative to it
 *   before pivot_root.
 * - Every step names itself in the error the caller gets back.
 */
#include "container-boot.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <linux/close_range.h>
#include <linux/seccomp.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "drvutil.h"
#include "clock.h"

#ifndef CLONE_NEWTIME
#define CLONE_NEWTIME 0x00000080
#endif

/* What the launcher tells the caller, in one atomic pipe write. */
struct boot_report {
	int ok;
	int init_pid;
	int slirp_pid;
	unsigned long long init_start;
	unsigned long long slirp_start;
	char message[480];
};

/* Mounts the launcher hands init: the image tree, sysfs, the disk. */
#define BOOT_MOUNTS 3

/* What the launcher hands init for the size files (boot_sizes.fuse), in
 * order: the four FUSE mounts, their four connections, the cgroup's memory
 * usage and memory.stat. */
#define BOOT_SIZES_FILES 4
#define BOOT_SIZES_FDS	 (2 * BOOT_SIZES_FILES + 2)

/* Where init mounts each size file, relative to the new root, in the order
 * of BOOT_SIZES_FD_MEMINFO.. (container-boot.h). */
static const char *const boot_sizes_targets[BOOT_SIZES_FILES] = {
    "proc/meminfo", "proc/cpuinfo", "proc/stat", "sys/devices/system/cpu/online"};

/* clone3's arguments, version 0 (64 bytes): the fields up to tls. */
struct boot_clone_args {
	uint64_t flags, pidfd, child_tid, parent_tid, exit_signal, stack, stack_size, tls;
};

/* ---- /proc/<pid>/stat ----------------------------------------------------- */

/* ---- small system-call helpers for the forked children ------------------- */

/* Writes "step: strerror(err)[: detail]" to fd (the way back to the launcher
 * or the caller) and exits. */
static void boot_die(int fd, const char *step, int err, const char *detail)
{
	char msg[480];
	int n = snprintf(msg, sizeof(msg), "%s: %s%s%s", step, strerror(err), detail ? ": " : "",
			 detail ? detail : "");
	if (n > 0)
		(void)!write(fd, msg, (size_t)n < sizeof(msg) ? (size_t)n : sizeof(msg) - 1);
	_exit(1);
}

static int boot_write_file(const char *path, const char *data)
{
	int fd = open(path, O_WRONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	ssize_t n = write(fd, data, strlen(data));
	int saved = errno;
	close(fd);
	errno = saved;
	return n == (ssize_t)strlen(data) ? 0 : -1;
}

static int boot_poll_in(int fd, int timeout_ms)
{
	struct pollfd pfd = {fd, POLLIN, 0};
	for (;;) {
		int r = poll(&pfd, 1, timeout_ms);
		if (r < 0 && errno == EINTR)
			continue;
		return r;
	}
}

/* ---- the guest's init, from clone to exec -------------------------------- */

/* Receives descriptors the launcher sends (at most max): how many, or -1
 * when it gave up. */
static int boot_recv_fds(int sock, int *fds, int max)
{
	char byte;
	struct iovec iov = {&byte, 1};
	union {
		struct cmsghdr hdr;
		char buf[CMSG_SPACE(BOOT_SIZES_FDS * sizeof(int))];
	} u;
	struct msghdr msg = {.msg_iov = &iov,
			     .msg_iovlen = 1,
			     .msg_control = u.buf,
			     .msg_controllen = sizeof(u.buf)};
	ssize_t n;
	do
		n = recvmsg(sock, &msg, MSG_CMSG_CLOEXEC);
	while (n < 0 && errno == EINTR);
	if (n <= 0)
		return -1;
	struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
	if (!c || c->cmsg_type != SCM_RIGHTS || c->cmsg_len < CMSG_LEN(sizeof(int)) ||
	    c->cmsg_len > CMSG_LEN((size_t)max * sizeof(int)))
		return -1;
	int count = (int)((c->cmsg_len - CMSG_LEN(0)) / sizeof(int));
	memcpy(fds, CMSG_DATA(c), (size_t)count * sizeof(int));
	return count;
}

static int boot_open_dir(int sock, const char *path)
{
	int fd = open(path, O_PATH | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0)
		boot_die(sock, "open host directory", errno, path);
	return fd;
}

static void boot_fdpath(char out[32], int fd)
{
	snprintf(out, 32, "/proc/self/fd/%d", fd);
}

static void boot_mount(int sock, const char *src, const char *target, const char *type,
		       unsigned long flags, const char *data)
{
	if (mount(src, target, type, flags, data) < 0)
		boot_die(sock, "mount", errno, target);
}

/* A bind mount, then the same mount made read-only/nosuid/... as asked. */
static void boot_bind(int sock, const char *src, const char *target, unsigned long extra)
{
	boot_mount(sock, src, target, NULL, MS_BIND | MS_REC, NULL);
	if (extra)
		boot_mount(sock, NULL, target, NULL, MS_REMOUNT | MS_BIND | extra, NULL);
}

/*
 * The guest root's own mount points (relative to it, the working
 * directory): each must be a real directory. mount(2) follows a symlink in
 * its target, and before pivot_root an absolute one resolves against the
 * host's root: a symlink planted at /tmp or /run (by an image, a layer or
 * a guest's root in its upper dir) would send the start's mounts out of
 * the guest. `optional`: one that may be missing (made later).
 */
static void boot_mount_point(int sock, const char *name, bool optional)
{
	struct stat st;
	if (fstatat(AT_FDCWD, name, &st, AT_SYMLINK_NOFOLLOW) < 0) {
		if (optional && errno == ENOENT)
			return;
		boot_die(sock, "the guest's mount point", errno, name);
	}
	if (!S_ISDIR(st.st_mode))
		boot_die(sock, "the guest's mount point", S_ISLNK(st.st_mode) ? ELOOP : ENOTDIR,
			 name);
}

/* Creates an empty file to bind a device node or a mask onto. */
static void boot_touch(int sock, const char *path)
{
	int fd = open(path, O_CREAT | O_WRONLY | O_CLOEXEC | O_NOFOLLOW, 0644);
	if (fd < 0)
		boot_die(sock, "create mount point", errno, path);
	close(fd);
}

static void boot_mkdir(int sock, const char *path, mode_t mode)
{
	if (mkdir(path, mode) < 0 && errno != EEXIST)
		boot_die(sock, "mkdir", errno, path);
	if (chmod(path, mode) < 0)
		boot_die(sock, "chmod", errno, path);
}

/* The overlay: image (idmapped) below, the computer's upper/ above. */
static int boot_overlay(int sock, int tree, int upper, int work)
{
	char lower_s[32], upper_s[32], work_s[32];
	boot_fdpath(lower_s, tree);
	boot_fdpath(upper_s, upper);
	boot_fdpath(work_s, work);
	int fs = fsopen("overlay", FSOPEN_CLOEXEC);
	if (fs < 0)
		boot_die(sock, "fsopen overlay", errno, NULL);
	if (fsconfig(fs, FSCONFIG_SET_STRING, "lowerdir", lower_s, 0) < 0 ||
	    fsconfig(fs, FSCONFIG_SET_STRING, "upperdir", upper_s, 0) < 0 ||
	    fsconfig(fs, FSCONFIG_SET_STRING, "workdir", work_s, 0) < 0 ||
	    fsconfig(fs, FSCONFIG_SET_FLAG, "userxattr", NULL, 0) < 0 ||
	    fsconfig(fs, FSCONFIG_CMD_CREATE, NULL, NULL, 0) < 0) {
		int saved = errno;
		char log[256] = "";
		ssize_t n = read(fs, log, sizeof(log) - 1); /* the kernel's reason, if any */
		if (n > 0)
			log[n] = '\0';
		else
			log[0] = '\0';
		boot_die(sock, "mount the overlay", saved, log[0] ? log : NULL);
	}
	int m = fsmount(fs, FSMOUNT_CLOEXEC, MOUNT_ATTR_NODEV);
	if (m < 0)
		boot_die(sock, "fsmount overlay", errno, NULL);
	close(fs);
	return m;
}

/* /dev: a tmpfs with the host's harmless device nodes bound in, a private
 * devpts and a tmpfs for POSIX shared memory. Relative to the new root. */
static void boot_dev(int sock)
{
	boot_mount(sock, "tmpfs", "dev", "tmpfs", MS_NOSUID | MS_NOEXEC, "mode=755,size=65536k");
	static const char *const nodes[] = {"null", "zero", "full", "random", "urandom", "tty"};
	for (size_t i = 0; i < sizeof(nodes) / sizeof(nodes[0]); i++) {
		char src[32], dst[32];
		snprintf(src, sizeof(src), "/dev/%s", nodes[i]);
		snprintf(dst, sizeof(dst), "dev/%s", nodes[i]);
		boot_touch(sock, dst);
		boot_bind(sock, src, dst, 0);
	}
	boot_mkdir(sock, "dev/pts", 0755);
	boot_mkdir(sock, "dev/shm", 01777);
	boot_mount(sock, "devpts", "dev/pts", "devpts", MS_NOSUID | MS_NOEXEC,
		   "newinstance,ptmxmode=0666,mode=0620,gid=5");
	boot_mount(sock, "shm", "dev/shm", "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777");
	static const char *const links[][2] = {{"pts/ptmx", "dev/ptmx"},
					       {"/proc/self/fd", "dev/fd"},
					       {"/proc/self/fd/0", "dev/stdin"},
					       {"/proc/self/fd/1", "dev/stdout"},
					       {"/proc/self/fd/2", "dev/stderr"}};
	for (size_t i = 0; i < sizeof(links) / sizeof(links[0]); i++)
		if (symlink(links[i][0], links[i][1]) < 0)
			boot_die(sock, "symlink", errno, links[i][1]);
}

/* Docker's read-only and masked /proc paths: what a guest could use to poke
 * the host kernel or read its secrets. */
static void boot_proc_mask(int sock)
{
	static const char *const ro[] = {"proc/sys", "proc/sysrq-trigger", "proc/irq", "proc/bus",
					 "proc/fs"};
	for (size_t i = 0; i < sizeof(ro) / sizeof(ro[0]); i++)
		if (access(ro[i], F_OK) == 0)
			boot_bind(sock, ro[i], ro[i], MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC);
	static const char *const files[] = {"proc/kcore", "proc/keys", "proc/timer_list",
					    "proc/sched_debug", "proc/latency_stats"};
	for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++)
		if (access(files[i], F_OK) == 0)
			boot_bind(sock, "dev/null", files[i], 0);
	static const char *const dirs[] = {"proc/acpi", "proc/scsi", "sys/firmware"};
	for (size_t i = 0; i < sizeof(dirs) / sizeof(dirs[0]); i++)
		if (access(dirs[i], F_OK) == 0)
			boot_mount(sock, "tmpfs", dirs[i], "tmpfs",
				   MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, "size=4k");
}

/*
 * The guest's pid 1 until exec. Never returns. `lifeline` is the write end
 * of a pipe whose read end is slirp4netns' exit fd: init and its first
 * child (envd) keep it open as fd 3, so the network helper exits by itself
 * when the computer's last process does, even with no cubicled to stop it.
 */
static void boot_init(const struct boot_plan *p, int sock, int lifeline)
{
	/* Until the boot is done, a dying launcher takes init with it. */
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	int mounts[BOOT_MOUNTS] = {-1, -1, -1};
	if (boot_recv_fds(sock, mounts, BOOT_MOUNTS) < 2)
		_exit(1); /* the launcher gave up and says why itself */
	int tree = mounts[0], sysfs = mounts[1], disk = mounts[2];
	bool sizes = p->sizes && p->sizes->fuse;
	int sz[BOOT_SIZES_FDS];
	if (sizes && boot_recv_fds(sock, sz, BOOT_SIZES_FDS) != BOOT_SIZES_FDS)
		_exit(1);

	if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0)
		boot_die(sock, "make mounts private", errno, NULL);
	/* Host paths, while still the host's uid 0 (see the top of the file). */
	int lower = boot_open_dir(sock, "lower");
	int upper, work;
	if (disk >= 0) {
		/* The disk joins this namespace (the overlay only takes layers
		 * from it) and leaves with it: no host mount to clean up. */
		int at = boot_open_dir(sock, "disk");
		if (move_mount(disk, "", at, "",
			       MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH) < 0)
			boot_die(sock, "attach the disk", errno, NULL);
		upper = openat(disk, "upper", O_PATH | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
		work = openat(disk, "work", O_PATH | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
		if (upper < 0 || work < 0)
			boot_die(sock, "open the disk's upper/ and work/", errno, NULL);
	} else {
		upper = boot_open_dir(sock, "upper");
		work = boot_open_dir(sock, "work");
	}
	int merged = boot_open_dir(sock, "merged");
	int io = boot_open_dir(sock, "io");
	int session = p->session_dir ? boot_open_dir(sock, p->session_dir) : -1;

	if (setresgid(0, 0, 0) < 0 || setgroups(0, NULL) < 0 || setresuid(0, 0, 0) < 0)
		boot_die(sock, "become the guest's root", errno, NULL);
	if (sethostname("cubicle", 7) < 0)
		boot_die(sock, "sethostname", errno, NULL);
	if (unshare(CLONE_NEWCGROUP) < 0)
		boot_die(sock, "cgroup namespace", errno, NULL);

	if (move_mount(tree, "", lower, "", MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH) < 0)
		boot_die(sock, "attach the image", errno, NULL);
	int root = boot_overlay(sock, tree, upper, work);
	if (move_mount(root, "", merged, "", MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH) < 0)
		boot_die(sock, "attach the overlay", errno, NULL);
	if (fchdir(root) < 0)
		boot_die(sock, "enter the overlay", errno, NULL);
	static const char *const points[] = {"proc", "sys", "dev", "tmp", "run"};
	for (size_t i = 0; i < sizeof points / sizeof points[0]; i++)
		boot_mount_point(sock, points[i], false);
	if (session >= 0)
		boot_mount_point(sock, "session", true);

	boot_mount(sock, "proc", "proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL);
	if (move_mount(sysfs, "", AT_FDCWD, "sys", MOVE_MOUNT_F_EMPTY_PATH) < 0)
		boot_die(sock, "attach sysfs", errno, NULL);
	boot_dev(sock);
	/* envd's sources, before the size files cover them, then the files. */
	int proc_stat = -1, proc_cpuinfo = -1;
	if (sizes) {
		proc_stat = open("proc/stat", O_RDONLY | O_CLOEXEC);
		proc_cpuinfo = open("proc/cpuinfo", O_RDONLY | O_CLOEXEC);
		if (proc_stat < 0 || proc_cpuinfo < 0)
			boot_die(sock, "open /proc/stat and /proc/cpuinfo", errno, NULL);
		for (int i = 0; i < BOOT_SIZES_FILES; i++)
			if (move_mount(sz[i], "", AT_FDCWD, boot_sizes_targets[i],
				       MOVE_MOUNT_F_EMPTY_PATH) < 0)
				boot_die(sock, "mount the size file", errno, boot_sizes_targets[i]);
	}
	boot_proc_mask(sock);
	boot_mount(sock, "tmpfs", "tmp", "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777");
	boot_mount(sock, "tmpfs", "run", "tmpfs", MS_NOSUID | MS_NODEV, "mode=755");
	boot_mkdir(sock, "run/lock", 01777);
	boot_mkdir(sock, "run/cubicle", 0755);
	char path[32];
	boot_fdpath(path, io);
	boot_bind(sock, path, "run/cubicle", MS_NOSUID | MS_NODEV | MS_NOEXEC);
	if (session >= 0) {
		boot_mkdir(sock, "session", 0755);
		boot_fdpath(path, session);
		boot_bind(sock, path, "session", MS_NOSUID | MS_NODEV);
	}

	if (syscall(SYS_pivot_root, ".", ".") < 0)
		boot_die(sock, "pivot_root", errno, NULL);
	if (umount2(".", MNT_DETACH) < 0)
		boot_die(sock, "detach the host's root", errno, NULL);
	if (chdir("/") < 0)
		boot_die(sock, "chdir /", errno, NULL);

	setsid();
	umask(022);
	int null = open("/dev/null", O_RDWR | O_CLOEXEC);
	if (null < 0 || dup2(null, 0) < 0 || dup2(p->log_fd, 1) < 0 || dup2(p->log_fd, 2) < 0)
		boot_die(sock, "set up stdin/stdout", errno, NULL);
	/* From here the guest lives on its own: the launcher will exit. */
	prctl(PR_SET_PDEATHSIG, 0);
	/* Every other descriptor closes at exec; sock's closing tells the
	 * launcher the exec happened. envd's size descriptors go to their fixed
	 * numbers (container-boot.h) by way of high ones, so no dup2 overwrites
	 * a descriptor still to be moved. */
	int keep[1 + BOOT_SIZES_FDS], nkeep = 0;
	keep[nkeep++] = lifeline;
	if (sizes) {
		for (int i = BOOT_SIZES_FILES; i < BOOT_SIZES_FDS - 2; i++)
			keep[nkeep++] = sz[i]; /* the FUSE connections */
		keep[nkeep++] = proc_stat;
		keep[nkeep++] = proc_cpuinfo;
		keep[nkeep++] = sz[BOOT_SIZES_FDS - 2];
		keep[nkeep++] = sz[BOOT_SIZES_FDS - 1];
	}
	for (int i = 0; i < nkeep; i++)
		if ((keep[i] = fcntl(keep[i], F_DUPFD_CLOEXEC, 64)) < 0)
			boot_die(sock, "move descriptors", errno, NULL);
	for (int i = 0; i < nkeep; i++)
		if (dup2(keep[i], 3 + i) < 0)
			boot_die(sock, "place descriptors", errno, NULL);
	if (syscall(SYS_close_range, 3U, ~0U, CLOSE_RANGE_CLOEXEC) < 0)
		boot_die(sock, "close_range", errno, NULL);
	for (int i = 0; i < nkeep; i++)
		if (fcntl(3 + i, F_SETFD, 0) < 0)
			boot_die(sock, "keep descriptors", errno, NULL);
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
		boot_die(sock, "no_new_privs", errno, NULL);
	if (prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, p->filter) < 0)
		boot_die(sock, "install the seccomp filter", errno, NULL);
	execve(p->argv[0], p->argv, p->envp);
	boot_die(sock, "exec", errno, p->argv[0]);
}

/* ---- the launcher --------------------------------------------------------- */

struct boot_launch {
	const struct boot_plan *p;
	int report;   /* pipe to the caller */
	pid_t init;   /* 0 until cloned */
	pid_t slirp;  /* 0 until forked */
	int deadline; /* ms left */
};

/* Reports a failure to the caller, kills what was started and exits. */
static void boot_launch_fail(struct boot_launch *l, const char *fmt, ...)
    __attribute__((format(printf, 2, 3), noreturn));

static void boot_launch_fail(struct boot_launch *l, const char *fmt, ...)
{
	struct boot_report r;
	memset(&r, 0, sizeof(r));
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(r.message, sizeof(r.message), fmt, ap);
	va_end(ap);
	if (l->init > 0) {
		kill(l->init, SIGKILL);
		waitpid(l->init, NULL, 0);
	}
	if (l->slirp > 0) {
		kill(l->slirp, SIGKILL);
		waitpid(l->slirp, NULL, 0);
	}
	(void)!write(l->report, &r, sizeof(r));
	_exit(1);
}

/* Hands init n descriptors in one message. */
static void boot_send_fds(struct boot_launch *l, int sock, const int *fds, size_t n,
			  const char *what)
{
	char byte = 'T';
	struct iovec iov = {&byte, 1};
	union {
		struct cmsghdr hdr;
		char buf[CMSG_SPACE(BOOT_SIZES_FDS * sizeof(int))];
	} u;
	memset(&u, 0, sizeof(u));
	struct msghdr msg = {.msg_iov = &iov,
			     .msg_iovlen = 1,
			     .msg_control = u.buf,
			     .msg_controllen = CMSG_SPACE(n * sizeof(int))};
	struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
	c->cmsg_level = SOL_SOCKET;
	c->cmsg_type = SCM_RIGHTS;
	c->cmsg_len = CMSG_LEN(n * sizeof(int));
	memcpy(CMSG_DATA(c), fds, n * sizeof(int));
	if (sendmsg(sock, &msg, MSG_NOSIGNAL) < 0)
		boot_launch_fail(l, "hand %s to the guest: %s", what, strerror(errno));
}

/* Hands init its mounts: the image tree, sysfs, and the disk when there is
 * one. */
static void boot_send_mounts(struct boot_launch *l, int sock, int tree, int sysfs, int disk)
{
	int fds[BOOT_MOUNTS] = {tree, sysfs, disk};
	boot_send_fds(l, sock, fds, disk >= 0 ? 3 : 2, "the image");
}

/*
 * The guest's time namespace (boot_sizes): the launcher enters a new one
 * for its children, whose boot time is now, so the guest's uptime starts
 * at 0. Needs CONFIG_TIME_NS (Linux 5.6); without it the guest keeps the
 * host's uptime, and console.log says so.
 */
static void boot_timens(struct boot_launch *l)
{
	if (unshare(CLONE_NEWTIME) < 0) {
		char line[200];
		int n = snprintf(line, sizeof(line),
				 "cubicled: container: no time namespace (%s): the guest sees the "
				 "host's uptime\n",
				 strerror(errno));
		if (n > 0)
			(void)!write(l->p->log_fd, line, (size_t)n);
		return;
	}
	/* offset = -now: seconds rounded down, nanoseconds made positive. */
	struct timespec bt;
	clock_gettime(CLOCK_BOOTTIME, &bt);
	long long sec = -(long long)bt.tv_sec;
	long nsec = 0;
	if (bt.tv_nsec) {
		sec -= 1;
		nsec = 1000000000L - bt.tv_nsec;
	}
	char line[80];
	snprintf(line, sizeof(line), "boottime %lld %ld\n", sec, nsec);
	if (boot_write_file("/proc/self/timens_offsets", line) < 0)
		boot_launch_fail(l, "set the guest's boot time: %s", strerror(errno));
}

/*
 * The size files (boot_sizes.fuse): four FUSE mounts, each a read-only
 * file as its root (rootmode S_IFREG), in the host's user namespace with
 * allow_other so the guest may read them, their four connections for the
 * guest's envd to serve, and the cgroup's memory files. In the order of
 * BOOT_SIZES_FDS.
 */
static void boot_sizes_make(struct boot_launch *l, int fds[BOOT_SIZES_FDS])
{
	for (int i = 0; i < BOOT_SIZES_FILES; i++) {
		int dev = open("/dev/fuse", O_RDWR | O_CLOEXEC);
		if (dev < 0)
			boot_launch_fail(l, "open /dev/fuse: %s (the size files need FUSE)",
					 strerror(errno));
		char v[16];
		snprintf(v, sizeof(v), "%d", dev);
		int fs = fsopen("fuse", FSOPEN_CLOEXEC);
		if (fs < 0 || fsconfig(fs, FSCONFIG_SET_STRING, "source", "cubicle-sizes", 0) < 0 ||
		    fsconfig(fs, FSCONFIG_SET_STRING, "subtype", "cubicle", 0) < 0 ||
		    fsconfig(fs, FSCONFIG_SET_STRING, "fd", v, 0) < 0 ||
		    fsconfig(fs, FSCONFIG_SET_STRING, "rootmode", "100444", 0) < 0 ||
		    fsconfig(fs, FSCONFIG_SET_STRING, "user_id", "0", 0) < 0 ||
		    fsconfig(fs, FSCONFIG_SET_STRING, "group_id", "0", 0) < 0 ||
		    fsconfig(fs, FSCONFIG_SET_FLAG, "allow_other", NULL, 0) < 0 ||
		    fsconfig(fs, FSCONFIG_CMD_CREATE, NULL, NULL, 0) < 0)
			boot_launch_fail(l, "make the size file %s (FUSE): %s",
					 boot_sizes_targets[i], strerror(errno));
		int m = fsmount(fs, FSMOUNT_CLOEXEC,
				MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV |
				    MOUNT_ATTR_NOEXEC);
		if (m < 0)
			boot_launch_fail(l, "mount the size file %s: %s", boot_sizes_targets[i],
					 strerror(errno));
		close(fs);
		fds[i] = m;
		fds[BOOT_SIZES_FILES + i] = dev;
	}
	struct err e;
	if (cgroup_open_memory(l->p->cgroups, &fds[BOOT_SIZES_FDS - 2], &fds[BOOT_SIZES_FDS - 1],
			       &e) < 0)
		boot_launch_fail(l, "%s", e.message);
}

/* Creates a directory of the disk's root for the guest's root, if missing. */
static void boot_disk_dir(struct boot_launch *l, int root, const char *name, mode_t mode)
{
	if (mkdirat(root, name, mode) < 0) {
		if (errno == EEXIST)
			return;
		boot_launch_fail(l, "create %s on the disk: %s", name, strerror(errno));
	}
	if (fchownat(root, name, l->p->uid_base, l->p->uid_base, AT_SYMLINK_NOFOLLOW) < 0 ||
	    fchmodat(root, name, mode, 0) < 0)
		boot_launch_fail(l, "set up %s on the disk: %s", name, strerror(errno));
}

/* The computer's disk: its ext4 image on a loop device (drv_disk_mount:
 * autoclear, direct I/O), mounted detached (nodev, nosuid) for init to
 * attach in its namespace; -1 without one. */
static int boot_disk_mount(struct boot_launch *l)
{
	if (!l->p->disk_image)
		return -1;
	char why[400];
	int m = drv_disk_mount(l->p->disk_image, false, why, sizeof why);
	if (m < 0)
		boot_launch_fail(l, "%s", why);
	boot_disk_dir(l, m, "upper", 0755);
	boot_disk_dir(l, m, "work", 0700);
	return m;
}

/* The idmapped, read-only view of the image for init's user namespace. */
static int boot_image_tree(struct boot_launch *l)
{
	char path[64];
	snprintf(path, sizeof(path), "/proc/%d/ns/user", (int)l->init);
	int userns = open(path, O_RDONLY | O_CLOEXEC);
	if (userns < 0)
		boot_launch_fail(l, "open the guest's user namespace: %s", strerror(errno));
	int tree = open_tree(AT_FDCWD, l->p->image_rootfs,
			     OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_RECURSIVE);
	if (tree < 0)
		boot_launch_fail(l, "open the image %s: %s", l->p->image_rootfs, strerror(errno));
	struct mount_attr attr;
	memset(&attr, 0, sizeof(attr));
	attr.attr_set = MOUNT_ATTR_IDMAP | MOUNT_ATTR_RDONLY | MOUNT_ATTR_NODEV;
	attr.userns_fd = (uint64_t)userns;
	if (mount_setattr(tree, "", AT_EMPTY_PATH | AT_RECURSIVE, &attr, sizeof(attr)) < 0)
		boot_launch_fail(l,
				 "idmap the image %s: %s (the container driver needs idmapped "
				 "mounts: Linux 5.12+ and a filesystem that supports them, "
				 "such as ext4, xfs or btrfs)",
				 l->p->image_rootfs, strerror(errno));
	close(userns);
	return tree;
}

/* Waits for init's exec: EOF on the socket, or its error message. */
static void boot_wait_exec(struct boot_launch *l, int sock)
{
	int r = boot_poll_in(sock, l->deadline);
	if (r == 0)
		boot_launch_fail(l, "the guest did not finish setting up within %d ms",
				 l->p->timeout_ms);
	char msg[480];
	ssize_t n = read(sock, msg, sizeof(msg) - 1);
	if (n > 0) {
		msg[n] = '\0';
		boot_launch_fail(l, "setting up the guest: %s", msg);
	}
	if (n < 0)
		boot_launch_fail(l, "waiting for the guest: %s", strerror(errno));
}

/*
 * Moves the launcher into a new network namespace for init to inherit,
 * with lo up and the routes and rule of the plan's egress policy
 * (guest-net.h). The namespace belongs to the host's user
 * namespace, not the guest's: nobody in the guest, its root included, has
 * CAP_NET_ADMIN over it, so the routes stay (and no raw socket opens).
 * For the same reason the guest may not mount its sysfs (sysfs belongs to
 * the network namespace's owner): *sysfs is a detached read-only sysfs
 * made here for init to attach, as Docker's runtime does for its
 * containers. Returns a descriptor on the host's network namespace to go
 * back to.
 */
static int boot_guest_netns(struct boot_launch *l, int *sysfs)
{
	int hostnet = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
	if (hostnet < 0)
		boot_launch_fail(l, "open the host's network namespace: %s", strerror(errno));
	if (unshare(CLONE_NEWNET) < 0)
		boot_launch_fail(l, "create the guest's network namespace: %s", strerror(errno));
	const char *step;
	if (guest_net_apply(l->p->egress, &step) < 0)
		boot_launch_fail(l, "guest network: %s: %s", step, strerror(errno));
	int fs = fsopen("sysfs", FSOPEN_CLOEXEC);
	if (fs < 0 || fsconfig(fs, FSCONFIG_CMD_CREATE, NULL, NULL, 0) < 0)
		boot_launch_fail(l, "create the guest's sysfs: %s", strerror(errno));
	*sysfs =
	    fsmount(fs, FSMOUNT_CLOEXEC,
		    MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC);
	if (*sysfs < 0)
		boot_launch_fail(l, "mount the guest's sysfs: %s", strerror(errno));
	close(fs);
	return hostnet;
}

/* slirp4netns, in the computer's cgroups, attached to init's network
 * namespace; waits until it has configured the guest's interface. */
static void boot_slirp(struct boot_launch *l, int lifeline)
{
	int ready[2];
	if (pipe2(ready, O_CLOEXEC) < 0)
		boot_launch_fail(l, "pipe: %s", strerror(errno));
	char netns[48];
	snprintf(netns, sizeof(netns), "/proc/%d/ns/net", (int)l->init);
	pid_t s = fork();
	if (s < 0)
		boot_launch_fail(l, "fork slirp4netns: %s", strerror(errno));
	if (s == 0) {
		cgroup_attach(l->p->cgroups, getpid(), NULL);
		int null = open("/dev/null", O_RDONLY | O_CLOEXEC);
		if (null < 0 || dup2(null, 0) < 0 || dup2(l->p->log_fd, 1) < 0 ||
		    dup2(l->p->log_fd, 2) < 0 || dup2(ready[1], 3) < 0 || dup2(lifeline, 4) < 0)
			_exit(127);
		char *const argv[] = {(char *)l->p->slirp_path,
				      "--configure",
				      "--mtu=65520",
				      "--disable-host-loopback",
				      "--enable-sandbox",
				      "--enable-seccomp",
				      "--ready-fd=3",
				      "--exit-fd=4",
				      "--netns-type=path",
				      netns,
				      "tap0",
				      NULL};
		char *const envp[] = {"PATH=/usr/sbin:/usr/bin:/sbin:/bin", NULL};
		execve(argv[0], argv, envp);
		_exit(127);
	}
	l->slirp = s;
	close(ready[1]);
	int r = boot_poll_in(ready[0], l->deadline < 10000 ? 10000 : l->deadline);
	char c;
	if (r <= 0 || read(ready[0], &c, 1) != 1)
		boot_launch_fail(l,
				 "slirp4netns (%s) did not configure the guest's network%s; see "
				 "console.log",
				 l->p->slirp_path, r == 0 ? " in time" : "");
	close(ready[0]);
}

/* The launcher process. Never returns. */
static void boot_launcher(const struct boot_plan *p, int report)
{
	struct boot_launch l = {.p = p, .report = report, .deadline = p->timeout_ms};
	setsid();
	sigset_t none;
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
	for (int sig = 1; sig < NSIG; sig++)
		if (sig != SIGKILL && sig != SIGSTOP)
			signal(sig, SIG_DFL);
	/* Keep only the report pipe and the log; cubicled's sockets and
	 * database stay out of the guest and its helpers. */
	int hi_report = fcntl(report, F_DUPFD_CLOEXEC, 10);
	int hi_log = fcntl(p->log_fd, F_DUPFD_CLOEXEC, 10);
	if (hi_report < 0 || hi_log < 0 || dup3(hi_report, 3, O_CLOEXEC) < 0 ||
	    dup3(hi_log, 4, O_CLOEXEC) < 0)
		_exit(1);
	int null = open("/dev/null", O_RDONLY | O_CLOEXEC);
	if (null < 0 || dup2(null, 0) < 0 || dup2(4, 1) < 0 || dup2(4, 2) < 0)
		_exit(1);
	l.report = 3;
	syscall(SYS_close_range, 5U, ~0U, 0U);
	struct boot_plan plan = *p;
	plan.log_fd = 4;
	l.p = &plan;
	if (chdir(p->dir) < 0)
		boot_launch_fail(&l, "chdir %s: %s", p->dir, strerror(errno));

	int sv[2];
	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0)
		boot_launch_fail(&l, "socketpair: %s", strerror(errno));
	int lifeline[2];
	if (pipe2(lifeline, O_CLOEXEC) < 0)
		boot_launch_fail(&l, "pipe: %s", strerror(errno));
	int sysfs;
	int hostnet = boot_guest_netns(&l, &sysfs);
	if (p->sizes)
		boot_timens(&l);
	struct boot_clone_args ca;
	memset(&ca, 0, sizeof(ca));
	ca.flags = CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNS | CLONE_NEWUTS | CLONE_NEWIPC;
	ca.exit_signal = SIGCHLD;
	long pid = syscall(SYS_clone3, &ca, sizeof(ca));
	if (pid < 0)
		boot_launch_fail(&l,
				 "create the guest's namespaces: %s (user namespaces must be "
				 "enabled: user.max_user_namespaces > 0)",
				 strerror(errno));
	if (pid == 0) {
		close(sv[0]);
		boot_init(&plan, sv[1], lifeline[1]);
	}
	l.init = (pid_t)pid;
	close(sv[1]);
	close(lifeline[1]);
	/* Back to the host's network: slirp4netns makes its connections there. */
	if (setns(hostnet, CLONE_NEWNET) < 0)
		boot_launch_fail(&l, "return to the host's network namespace: %s", strerror(errno));
	close(hostnet);

	char map[64], path[64];
	snprintf(map, sizeof(map), "0 %u 65536\n", p->uid_base);
	snprintf(path, sizeof(path), "/proc/%d/uid_map", (int)pid);
	if (boot_write_file(path, map) < 0)
		boot_launch_fail(&l, "write the guest's uid_map: %s", strerror(errno));
	snprintf(path, sizeof(path), "/proc/%d/gid_map", (int)pid);
	if (boot_write_file(path, map) < 0)
		boot_launch_fail(&l, "write the guest's gid_map: %s", strerror(errno));
	struct err e;
	if (cgroup_attach(p->cgroups, (pid_t)pid, &e) < 0)
		boot_launch_fail(&l, "%s", e.message);
	if (p->sizes && CPU_COUNT(&p->sizes->cpus) > 0 &&
	    sched_setaffinity((pid_t)pid, sizeof(cpu_set_t), &p->sizes->cpus) < 0)
		boot_launch_fail(&l, "set the guest's CPUs: %s", strerror(errno));
	int tree = boot_image_tree(&l);
	int disk = boot_disk_mount(&l);
	int sz[BOOT_SIZES_FDS];
	bool sizes = p->sizes && p->sizes->fuse;
	if (sizes)
		boot_sizes_make(&l, sz);
	int64_t t0 = clock_now_ms();
	boot_send_mounts(&l, sv[0], tree, sysfs, disk);
	close(tree);
	close(sysfs);
	if (disk >= 0)
		close(disk);
	if (sizes) {
		boot_send_fds(&l, sv[0], sz, BOOT_SIZES_FDS, "the size files");
		for (int i = 0; i < BOOT_SIZES_FDS; i++)
			close(sz[i]);
	}
	boot_wait_exec(&l, sv[0]);
	l.deadline -= (int)(clock_now_ms() - t0);
	boot_slirp(&l, lifeline[0]);
	close(lifeline[0]);

	struct boot_report r;
	memset(&r, 0, sizeof(r));
	r.ok = 1;
	r.init_pid = l.init;
	r.slirp_pid = l.slirp;
	char st;
	if (drv_proc_stat(l.init, &r.init_start, &st) < 0 || st == 'Z')
		boot_launch_fail(&l,
				 "the guest's init exited right after starting; see console.log");
	if (drv_proc_stat(l.slirp, &r.slirp_start, &st) < 0 || st == 'Z')
		boot_launch_fail(&l, "slirp4netns exited right after starting; see console.log");
	if (write(l.report, &r, sizeof(r)) != (ssize_t)sizeof(r))
		boot_launch_fail(&l, "report to the caller: %s", strerror(errno));
	_exit(0);
}

/* ---- the caller ------------------------------------------------------------ */

int container_boot(const struct boot_plan *p, struct boot_result *r, struct err *e)
{
	memset(r, 0, sizeof(*r));
	int pipefd[2];
	if (pipe2(pipefd, O_CLOEXEC) < 0)
		return err_set(e, ERR_INTERNAL, "container: pipe: %s", strerror(errno));
	pid_t launcher = fork();
	if (launcher < 0) {
		int saved = errno;
		close(pipefd[0]);
		close(pipefd[1]);
		return err_set(e, ERR_UNAVAILABLE, "container: fork: %s", strerror(saved));
	}
	if (launcher == 0) {
		close(pipefd[0]);
		boot_launcher(p, pipefd[1]);
	}
	close(pipefd[1]);
	struct boot_report rep;
	memset(&rep, 0, sizeof(rep));
	/* The launcher has its own deadlines; this one only guards against a
	 * launcher stuck in the kernel. */
	int pr = boot_poll_in(pipefd[0], p->timeout_ms + 15000);
	ssize_t n = pr > 0 ? read(pipefd[0], &rep, sizeof(rep)) : -1;
	close(pipefd[0]);
	if (pr <= 0)
		kill(launcher, SIGKILL);
	while (waitpid(launcher, NULL, 0) < 0 && errno == EINTR)
		;
	if (n != (ssize_t)sizeof(rep))
		return err_set(e, ERR_UNAVAILABLE, "container: the launcher %s",
			       pr <= 0 ? "did not answer in time" : "died without a report");
	rep.message[sizeof(rep.message) - 1] = '\0';
	if (!rep.ok)
		return err_set(e, ERR_UNAVAILABLE, "container: %s", rep.message);
	r->init_pid = rep.init_pid;
	r->init_start = rep.init_start;
	r->slirp_pid = rep.slirp_pid;
	r->slirp_start = rep.slirp_start;
	return 0;
}
