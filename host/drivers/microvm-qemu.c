/*
 * microvm-qemu: QEMU's configuration, command line and spawn for the
 * microVM driver (microvm.c; the contract is microvm-internal.h).
 */
#include "microvm-internal.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "drvutil.h"

/* A free TCP port on 127.0.0.1 (QEMU binds it a moment later; a start that
 * loses the race fails and is retried by the caller). */
int vm_free_port(struct err *e)
{
	int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t len = sizeof a;
	if (s < 0 || bind(s, (struct sockaddr *)&a, sizeof a) < 0 ||
	    getsockname(s, (struct sockaddr *)&a, &len) < 0) {
		int saved = errno;
		if (s >= 0)
			close(s);
		return err_set(e, ERR_UNAVAILABLE, "vm: no free loopback port: %s",
			       strerror(saved));
	}
	close(s);
	return ntohs(a.sin_port);
}

/* The host's TSC frequency in kHz, for tsc_early_khz= (0 if unknown). Under
 * TCG the guest kernel otherwise calibrates against the PIT, which hangs
 * about one boot in ten on microvm (no HPET or ACPI PM timer to fall back on). */
static long vm_tsc_khz(void)
{
	FILE *f = fopen("/proc/cpuinfo", "re");
	if (!f)
		return 0;
	char line[512];
	double mhz = 0;
	while (fgets(line, sizeof line, f))
		if (sscanf(line, "cpu MHz : %lf", &mhz) == 1)
			break;
	fclose(f);
	return (long)(mhz * 1000);
}

/* vm/qemu.conf: the machine, kernel and command line (with the token and
 * the egress policy cubicle-init applies: guest-net.h). */
int vm_write_conf(struct driver_computer *c, const char *image, unsigned uid, const char *egress,
		  struct err *e)
{
	if (!c->envd_token || strlen(c->envd_token) < 16 ||
	    strspn(c->envd_token, "0123456789abcdefABCDEF_-") != strlen(c->envd_token))
		return err_set(e, ERR_INVALID,
			       "vm: the envd token must be at least 16 characters of [0-9a-f_-]");
	char path[4200];
	if (vm_path(c, "qemu.conf", path, sizeof path, e) < 0)
		return -1;
	bool desktop = c->kind && strcmp(c->kind, "desktop") == 0;
	long khz = vm_tsc_khz();
	char tsc[48] = "", append[VM_CMDLINE_MAX + 1];
	if (khz > 0)
		snprintf(tsc, sizeof tsc, " tsc_early_khz=%ld", khz);
	int n = snprintf(append, sizeof append,
			 "console=ttyS0 root=/dev/vda rw panic=-1 quiet%s "
			 "init=/sbin/cubicle-init cubicle.session=%s cubicle.resolution=%dx%d "
			 "%s cubicle.token=%s",
			 tsc, desktop ? "desktop" : "none", c->width > 0 ? c->width : 1280,
			 c->height > 0 ? c->height : 800, egress, c->envd_token);
	if (n < 0 || n > VM_APPEND_MAX)
		return err_set(e, ERR_INVALID,
			       "vm: the kernel command line would be %d bytes, more than the %d "
			       "QEMU's -readconfig takes: fewer --egress-allow/--egress-deny or "
			       "workspace prefixes",
			       n, VM_APPEND_MAX);
	unlink(path);
	int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	FILE *f = fd < 0 ? NULL : fdopen(fd, "w");
	if (!f) {
		if (fd >= 0)
			close(fd);
		return err_set(e, ERR_UNAVAILABLE, "vm: cannot write %s: %s", path,
			       strerror(errno));
	}
	fprintf(f,
		"[machine]\n"
		"  type = \"microvm\"\n"
		"  x-option-roms = \"off\"\n"
		"  pit = \"off\"\n"
		"  pic = \"off\"\n"
		"  rtc = \"on\"\n" /* the wall clock at boot: TCG has no kvmclock */
		"  isa-serial = \"on\"\n"
		"  memory-backend = \"mem\"\n"
		"  kernel = \"%s/vmlinuz\"\n"
		"  initrd = \"%s/initrd.img\"\n"
		"  append = \"%s\"\n",
		vm_qemu_image(c, image), vm_qemu_image(c, image), append);
	bool ok = fchown(fd, uid, uid) == 0;
	ok = fclose(f) == 0 && ok;
	if (!ok)
		return err_set(e, ERR_UNAVAILABLE, "vm: cannot write %s", path);
	return 0;
}

static void vm_arg(struct vm_args *a, char *s)
{
	if (a->n < 47)
		a->v[a->n++] = s;
	a->v[a->n] = NULL;
}

void vm_build_argv(const struct driver_computer *c, struct vm_args *a, const char *qemu, bool kvm,
		   int port, bool incoming)
{
	int vcpus = c->millicpus > 1000 ? (c->millicpus + 999) / 1000 : 1;
	long long mem = c->memory_mb > 0 ? c->memory_mb : 512;
	a->n = 0;
	vm_arg(a, (char *)qemu);
	static char *const fixed[] = {
	    "-nodefaults", "-no-user-config", "-readconfig", "qemu.conf", "-display",
	    "none",	   "-no-reboot",      NULL};
	for (int i = 0; fixed[i]; i++)
		vm_arg(a, fixed[i]);
	vm_arg(a, "-accel");
	snprintf(a->bufs[0], sizeof a->bufs[0], "tcg,thread=multi,tb-size=%d", VM_TCG_TB_MB);
	vm_arg(a, kvm ? "kvm" : a->bufs[0]);
	vm_arg(a, "-cpu");
	vm_arg(a, kvm ? "host" : "max");
	vm_arg(a, "-smp");
	snprintf(a->bufs[1], sizeof a->bufs[1], "%d", vcpus);
	vm_arg(a, a->bufs[1]);
	vm_arg(a, "-m");
	snprintf(a->bufs[2], sizeof a->bufs[2], "%lld", mem);
	vm_arg(a, a->bufs[2]);
	vm_arg(a, "-object");
	snprintf(a->bufs[3], sizeof a->bufs[3],
		 "memory-backend-file,id=mem,share=on,mem-path=mem,size=%lldM", mem);
	vm_arg(a, a->bufs[3]);
	vm_arg(a, "-drive");
	vm_arg(a, "id=root,file=disk.qcow2,format=qcow2,if=none,discard=unmap");
	vm_arg(a, "-device");
	vm_arg(a, "virtio-blk-device,drive=root");
	vm_arg(a, "-netdev");
	snprintf(a->bufs[4], sizeof a->bufs[4], "user,id=n0,ipv6=off,hostfwd=tcp:127.0.0.1:%d-:%d",
		 port, VM_ENVD_PORT);
	vm_arg(a, a->bufs[4]);
	vm_arg(a, "-device");
	vm_arg(a, "virtio-net-device,netdev=n0");
	vm_arg(a, "-serial");
	vm_arg(a, "file:console.log");
	vm_arg(a, "-qmp");
	vm_arg(a, "unix:qmp.sock,server=on,wait=off");
	vm_arg(a, "-sandbox");
	vm_arg(a, "on,obsolete=deny,elevateprivileges=deny,spawn=deny,resourcecontrol=deny");
	if (c->kind && strcmp(c->kind, "desktop") == 0) {
		/* The live view: envd serves RFB on this port, whose host end is
		 * vm/vnc.sock (see vm_vnc_path). */
		static char *const vnc[] = {
		    "-device",	"virtio-serial-device,max_ports=2",
		    "-chardev", "socket,id=vnc,path=vnc.sock,server=on,wait=off",
		    "-device",	"virtserialport,chardev=vnc,name=cubicle.vnc",
		    NULL};
		for (int i = 0; vnc[i]; i++)
			vm_arg(a, vnc[i]);
	}
	if (c->session_dir) {
		vm_arg(a, "-fsdev");
		snprintf(a->bufs[5], sizeof a->bufs[5],
			 "local,id=session,path=/proc/self/fd/%d,security_model=mapped-xattr",
			 VM_SESSION_FD);
		vm_arg(a, a->bufs[5]);
		vm_arg(a, "-device");
		vm_arg(a, "virtio-9p-device,fsdev=session,mount_tag=session");
	}
	if (incoming) {
		vm_arg(a, "-incoming");
		vm_arg(a, "defer");
	}
}

/* Makes fd QEMU's fd `to`, kept across exec. */
static int vm_pass_fd(int fd, int to)
{
	if (fd == to)
		return fcntl(fd, F_SETFD, 0);
	return dup2(fd, to) < 0 ? -1 : 0;
}

/*
 * Starts QEMU detached: a middle child makes a new session and forks QEMU's
 * process, which waits until the caller has put it in the cgroup, then
 * drops to uid (plus the kvm group when it uses /dev/kvm) and execs.
 */
int vm_spawn(struct driver_computer *c, const struct cgroup_set *cg, char *const argv[],
	     unsigned uid, bool kvm, int session_fd, pid_t *out_pid, struct err *e)
{
	char dir[4096], log[4200];
	if (vm_path(c, "", dir, sizeof dir, e) < 0 ||
	    vm_path(c, "qemu.log", log, sizeof log, e) < 0)
		return -1;
	gid_t groups[1];
	int ngroups = 0;
	struct group *g = kvm ? getgrnam("kvm") : NULL;
	if (g)
		groups[ngroups++] = g->gr_gid;
	int pids[2], go[2];
	if (pipe2(pids, O_CLOEXEC) < 0)
		return err_set(e, ERR_INTERNAL, "vm: pipe: %s", strerror(errno));
	if (pipe2(go, O_CLOEXEC) < 0) {
		close(pids[0]);
		close(pids[1]);
		return err_set(e, ERR_INTERNAL, "vm: pipe: %s", strerror(errno));
	}
	pid_t mid = fork();
	if (mid == 0) {
		setsid();
		pid_t q = fork();
		if (q == 0) {
			char x;
			if (read(go[0], &x, 1) != 1)
				_exit(126);
			int null = open("/dev/null", O_RDWR | O_CLOEXEC);
			int lfd = open(log, O_WRONLY | O_APPEND | O_NOFOLLOW | O_CLOEXEC);
			if (null < 0 || lfd < 0 || dup2(null, 0) < 0 || dup2(lfd, 1) < 0 ||
			    dup2(lfd, 2) < 0 || chdir(dir) < 0 ||
			    (session_fd >= 0 && vm_pass_fd(session_fd, VM_SESSION_FD) < 0) ||
			    setgroups((size_t)ngroups, groups) < 0 || setgid(uid) < 0 ||
			    setuid(uid) < 0 ||
			    drv_child_fds(session_fd >= 0 ? VM_SESSION_FD : -1) < 0)
				_exit(126);
			execve(argv[0], argv, drv_child_env);
			_exit(127);
		}
		_exit(write(pids[1], &q, sizeof q) == sizeof q && q > 0 ? 0 : 1);
	}
	close(pids[1]);
	close(go[0]);
	pid_t q = -1;
	if (mid < 0 || read(pids[0], &q, sizeof q) != sizeof q)
		q = -1;
	close(pids[0]);
	if (mid > 0)
		while (waitpid(mid, NULL, 0) < 0 && errno == EINTR)
			;
	unsigned long long start;
	char st;
	if (q <= 0 || drv_proc_stat(q, &start, &st) < 0) {
		close(go[1]);
		return err_set(e, ERR_INTERNAL, "vm: cannot start QEMU: %s",
			       mid < 0 ? strerror(errno) : "the child died");
	}
	drv_state_set_int(c->state, "qemu_pid", q);
	drv_state_set_int(c->state, "qemu_start", (long long)start);
	if (cgroup_attach(cg, q, e) < 0) {
		close(go[1]); /* it exits without running QEMU */
		return -1;
	}
	bool ok = write(go[1], "g", 1) == 1;
	close(go[1]);
	if (!ok)
		return err_set(e, ERR_INTERNAL, "vm: cannot release QEMU: %s", strerror(errno));
	*out_pid = q;
	return 0;
}
