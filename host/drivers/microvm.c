/*
 * microvm: the microVM isolation driver (struct driver_ops).
 *
 * A computer is a QEMU `-M microvm` guest booting the image's kernel and
 * initrd with a qcow2 overlay of the image's disk.ext4 as /dev/vda. PID 1 is
 * the image's /sbin/cubicle-init, which takes envd's token from the kernel
 * command line and runs envd on tcp:0.0.0.0:7777. QEMU's user networking
 * gives the guest outbound access only; the one way in is a forward from
 * 127.0.0.1:<port> on the host to envd, and envd wants the token.
 *
 * QEMU's configuration, command line and detached spawn are microvm-qemu.c
 * (microvm-internal.h); this file is the driver's lifecycle.
 *
 * QEMU runs:
 *  - as the guest user's id (base + 1000) of a uid range of its own
 *    (uidrange.c; no groups, but kvm when it uses /dev/kvm), from the
 *    computer's vm/ directory with
 *    relative paths (it cannot reach anything else under the state dir);
 *  - in the computer's cgroup: the size's CPU quota and pids, and its memory
 *    plus VM_MEM_HEADROOM_MB for QEMU itself;
 *  - under its own seccomp sandbox (no exec, no fork, no set*id);
 *  - detached (double fork, own session), so it outlives cubicled.
 * The kernel command line, with the token, is in vm/qemu.conf (0600, read
 * by -readconfig), never in QEMU's argv, which every host user can read.
 *
 * Guest RAM is the file vm/mem (shared mapping). stop = QMP stop, migrate
 * with x-ignore-shared (the RAM stays in vm/mem; the stream holds only the
 * device state) into vm/snapshot through a passed fd, quit. start with a
 * snapshot = -incoming defer + migrate-incoming from it, then cont; the
 * snapshot is deleted once the guest runs again (the disk moves on), and
 * envd sets the guest's clock, which stood still, to the host's. No
 * snapshot, or one that does not restore: a cold boot with the disk kept,
 * said in the log and in the state ("boot").
 *
 * A desktop's live view: a virtio-serial port named cubicle.vnc on which
 * envd serves RFB; its host end is the UNIX socket vm/vnc.sock (vnc_path),
 * which only root (the gateway) can reach.
 *
 * /session: the session directory over virtio-9p (see vm_session_open).
 *
 * Layout of c->dir: vm/ (owned by QEMU's uid): disk.qcow2, mem, qemu.conf,
 * qmp.sock, vnc.sock, console.log (the guest's serial console), qemu.log
 * (QEMU's stderr), snapshot.
 *
 * State keys: uid_slot, uid_base, qemu_uid, image (the resolved image
 * directory the overlay is based on), qemu_pid + qemu_start, port, accel,
 * boot, cgroups.
 */
#include "driver.h"

#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <grp.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <sys/xattr.h>
#include <time.h>
#include <unistd.h>

#include "cgroup.h"
#include "drvutil.h"
#include "guest-net.h"
#include "kvmprobe.h"
#include "microvm-internal.h"
#include "qmp.h"
#include "uidrange.h"
#include "clock.h"

#define VM_QEMU		   "qemu-system-x86_64"
#define VM_QEMU_IMG	   "qemu-img"
#define VM_BOOT_TIMEOUT	   120000 /* ms until envd answers after a cold boot */
#define VM_QMP_TIMEOUT	   15000  /* ms for QEMU to answer a command */
#define VM_SAVE_TIMEOUT	   60000  /* ms for a snapshot to be written or read */
#define VM_QUIT_TIMEOUT	   5000	  /* ms between quit and SIGKILL */
#define VM_MEM_HEADROOM_MB 384	  /* QEMU's own memory: TCG's code cache, slirp, I/O */

/* ---- paths and state -------------------------------------------------------------- */

/* c->dir/vm/name (name "" for vm/ itself), or an error when it does not fit. */
int vm_path(const struct driver_computer *c, const char *name, char *out, size_t len, struct err *e)
{
	int n = snprintf(out, len, "%s/vm%s%s", c->dir, name[0] ? "/" : "", name);
	if (n < 0 || (size_t)n >= len)
		return err_set(e, ERR_INVALID, "vm: the computer directory path %s is too long",
			       c->dir);
	return 0;
}

static int vm_check_computer(const struct driver_computer *c, struct err *e)
{
	return drv_check_computer(c, "vm", e);
}

static bool vm_qemu_alive(const struct driver_computer *c)
{
	long long pid = drv_state_int(c->state, "qemu_pid", 0);
	long long start = drv_state_int(c->state, "qemu_start", -1);
	return pid > 0 && drv_proc_alive((pid_t)pid, (unsigned long long)start);
}

/*
 * The host uid QEMU runs as: the range's guest user (base + 1000), which is
 * also who owns a container's user files, so that the files QEMU creates in
 * a session are the user's for whichever computer uses the session next.
 * Computers created before that ran QEMU as the range's base.
 */
static unsigned vm_qemu_uid(const struct driver_computer *c)
{
	long long base = drv_state_int(c->state, "uid_base", 0);
	return (unsigned)drv_state_int(c->state, "qemu_uid", base);
}

/* ---- the accelerator ------------------------------------------------------------- */

static pthread_once_t vm_accel_once = PTHREAD_ONCE_INIT;
static bool vm_kvm_ok;
static char vm_kvm_why[256];

static void vm_accel_probe(void)
{
	const char *force = getenv("CUBICLE_VM_ACCEL");
	if (force && (strcmp(force, "kvm") == 0 || strcmp(force, "tcg") == 0)) {
		vm_kvm_ok = strcmp(force, "kvm") == 0;
		snprintf(vm_kvm_why, sizeof vm_kvm_why, "forced by CUBICLE_VM_ACCEL=%s", force);
	} else {
		vm_kvm_ok = kvmprobe_run(vm_kvm_why, sizeof vm_kvm_why);
	}
	fprintf(stderr, "cubicled: vm: accelerator %s (%s)\n", vm_kvm_ok ? "kvm" : "tcg",
		vm_kvm_why);
}

/* Whether microVMs use KVM here (probed once per process). */
static bool vm_use_kvm(void)
{
	pthread_once(&vm_accel_once, vm_accel_probe);
	return vm_kvm_ok;
}

/* A create that names no isolation gets a microVM where KVM runs it at
 * hardware speed (an explicit "vm" still works without, on TCG). */
static bool vm_preferred(void)
{
	return vm_use_kvm();
}

/* ---- create ----------------------------------------------------------------------- */

/* The image the computer was created from (resolved, so a rebuilt image does
 * not change a computer's base under it), checked for the VM's files. */
static int vm_image(struct driver_computer *c, char *out, size_t len, struct err *e)
{
	const char *rec = drv_state_str(c->state, "image", NULL);
	if (rec) {
		snprintf(out, len, "%s", rec);
	} else {
		char *real = realpath(c->image_dir, NULL);
		if (!real)
			return err_set(e, ERR_UNAVAILABLE,
				       "vm: the image at %s is not built; run `make images`",
				       c->image_dir);
		snprintf(out, len, "%s", real);
		free(real);
	}
	static const char *const files[] = {"vmlinuz", "initrd.img", "disk.ext4"};
	for (size_t i = 0; i < 3; i++) {
		char p[4300];
		snprintf(p, sizeof p, "%s/%s", out, files[i]);
		if (access(p, R_OK) < 0)
			return err_set(e, ERR_UNAVAILABLE,
				       "vm: the image at %s has no %s (run `make images`)", out,
				       files[i]);
	}
	if (!rec)
		json_object_set_new(c->state, "image", json_string(out));
	return 0;
}

/*
 * Hard-links the image's files into vm/image/ (root's, read-only to QEMU)
 * and records that in the state, so that the image cache may prune the
 * build while the computer still uses it as its base. QEMU, which runs in
 * vm/ and cannot reach the state directory, names them by relative paths
 * (image/vmlinuz; the overlay's backing file image/disk.ext4 is relative to
 * the overlay). Fails across file systems: the caller keeps the cache's
 * path.
 */
static int vm_pin_image(struct driver_computer *c, const char *image, const char *dir)
{
	static const char *const files[] = {"vmlinuz", "initrd.img", "disk.ext4"};
	char pinned[4200], from[8400], to[8400];
	snprintf(pinned, sizeof pinned, "%s/image", dir);
	if (mkdir(pinned, 0755) < 0 && errno != EEXIST)
		return -1;
	for (size_t i = 0; i < 3; i++) {
		snprintf(from, sizeof from, "%s/%s", image, files[i]);
		snprintf(to, sizeof to, "%s/%s", pinned, files[i]);
		if (link(from, to) < 0 && errno != EEXIST) {
			drv_rm_contents(pinned);
			rmdir(pinned);
			return -1;
		}
	}
	json_object_set_new(c->state, "image", json_string(pinned));
	json_object_set_new(c->state, "image_pinned", json_true());
	return 0;
}

/* How QEMU names the image directory: relative to vm/ when pinned. */
const char *vm_qemu_image(const struct driver_computer *c, const char *image)
{
	return json_is_true(json_object_get(c->state, "image_pinned")) ? "image" : image;
}

/*
 * The overlay's virtual size in bytes: the size's disk_mb, never less than
 * the image's disk.ext4 (a qcow2 smaller than its backing file would cut the
 * file system off). cubicle-init grows the ext4 to fill it at boot, so the
 * guest gets ENOSPC at about its size; the host file grows only with what
 * the guest writes.
 */
static int vm_disk_size(const struct driver_computer *c, const char *image, char *out, size_t len,
			struct err *e)
{
	char path[4200];
	struct stat st;
	snprintf(path, sizeof path, "%s/disk.ext4", image);
	if (stat(path, &st) < 0)
		return err_set(e, ERR_UNAVAILABLE, "vm: cannot stat %s: %s", path, strerror(errno));
	long long bytes = c->disk_mb > 0 ? c->disk_mb * 1048576 : 0;
	if (bytes < (long long)st.st_size)
		bytes = (long long)st.st_size;
	snprintf(out, len, "%lld", bytes);
	return 0;
}

static int vm_create(struct driver_computer *c, struct err *e)
{
	char image[4096], dir[4096], disk[4200], base[4200], log[4200];
	if (vm_check_computer(c, e) < 0 || vm_image(c, image, sizeof image, e) < 0 ||
	    vm_path(c, "", dir, sizeof dir, e) < 0)
		return -1;
	/* vm/ first: it is what marks the uid range as in use. */
	if (mkdir(dir, 0700) < 0 && errno != EEXIST)
		return err_set(e, ERR_UNAVAILABLE, "vm: cannot create %s: %s", dir,
			       strerror(errno));
	long long slot = uidrange_claim(c->dir, drv_state_int(c->state, "uid_slot", -1), e);
	if (slot < 0)
		return -1;
	unsigned first = uidrange_base(slot);
	drv_state_set_int(c->state, "uid_slot", slot);
	drv_state_set_int(c->state, "uid_base", first);
	snprintf(disk, sizeof disk, "%s/disk.qcow2", dir);
	struct stat st;
	bool made = lstat(disk, &st) == 0;
	if (!made && !json_object_get(c->state, "qemu_uid"))
		drv_state_set_int(c->state, "qemu_uid", first + UIDRANGE_GUEST_USER);
	unsigned uid = vm_qemu_uid(c);
	if (chown(dir, uid, uid) < 0 || chmod(dir, 0700) < 0)
		return err_set(e, ERR_UNAVAILABLE, "vm: cannot set up %s: %s", dir,
			       strerror(errno));
	if (made) {
		if (!S_ISREG(st.st_mode))
			return err_set(e, ERR_UNAVAILABLE, "vm: %s is not a file", disk);
		return 0;
	}
	if (vm_pin_image(c, image, dir) == 0)
		snprintf(base, sizeof base, "image/disk.ext4");
	else
		snprintf(base, sizeof base, "%s/disk.ext4", image);
	snprintf(log, sizeof log, "%s/qemu-img.log", dir);
	char size[32];
	if (vm_disk_size(c, image, size, sizeof size, e) < 0)
		return -1;
	char *argv[] = {VM_QEMU_IMG, "create", "-q", "-f", "qcow2", "-F",
			"raw",	     "-b",     base, disk, size,    NULL};
	if (drv_run(argv, log, "vm", e) < 0)
		return -1;
	unlink(log);
	if (lchown(disk, uid, uid) < 0)
		return err_set(e, ERR_UNAVAILABLE, "vm: cannot chown %s: %s", disk,
			       strerror(errno));
	return 0;
}

/* ---- stopping QEMU ---------------------------------------------------------------- */

static int vm_cgroups(const struct driver_computer *c, struct cgroup_set *s, struct err *e)
{
	json_t *j = json_object_get(c->state, "cgroups");
	if (j && cgroup_from_json(j, s) == 0)
		return 0;
	return cgroup_locate(c->id, s, e);
}

/* Ends QEMU (SIGKILL; the caller quits it nicely first if it wants) and
 * removes its cgroup. The files stay. */
static int vm_halt(struct driver_computer *c, struct err *e)
{
	pid_t pid = (pid_t)drv_state_int(c->state, "qemu_pid", 0);
	unsigned long long start = (unsigned long long)drv_state_int(c->state, "qemu_start", -1);
	if (pid > 0 && drv_proc_alive(pid, start)) {
		kill(pid, SIGKILL);
		if (!drv_wait_gone(pid, start, 5000))
			return err_set(e, ERR_INTERNAL, "vm: QEMU (pid %d) survived SIGKILL",
				       (int)pid);
	} else if (pid > 0) {
		drv_wait_gone(pid, start, 0); /* reap a zombie */
	}
	struct cgroup_set cg;
	if (vm_cgroups(c, &cg, NULL) == 0 && cgroup_remove(&cg, e) < 0)
		return -1;
	char sock[4200];
	if (vm_path(c, "qmp.sock", sock, sizeof sock, NULL) == 0)
		unlink(sock);
	drv_state_del(c->state, "qemu_pid");
	drv_state_del(c->state, "qemu_start");
	drv_state_del(c->state, "cgroups");
	drv_state_del(c->state, "port");
	return 0;
}

/* ---- start ------------------------------------------------------------------------- */

/* The egress policy for cubicle-init: "cubicle.deny=... cubicle.allow=..."
 * (guest-net.h; compact: the kernel command line has VM_CMDLINE_MAX bytes). */
static int vm_egress(const struct driver_computer *c, char *out, size_t len, struct err *e)
{
	struct guest_net_policy p;
	char deny[VM_CMDLINE_MAX], allow[VM_CMDLINE_MAX];
	if (guest_net_policy_build(&p, c->egress_allow, c->egress_deny, e) < 0)
		return -1;
	if (guest_net_policy_format(&p, deny, sizeof deny, allow, sizeof allow) < 0 ||
	    snprintf(out, len, "cubicle.deny=%s%s%s", deny, allow[0] ? " cubicle.allow=" : "",
		     allow) >= (int)len)
		return err_set(
		    e, ERR_INVALID,
		    "vm: the egress policy (%d prefixes) does not fit the kernel command "
		    "line: fewer --egress-allow/--egress-deny or workspace prefixes",
		    p.n);
	return 0;
}

/* Creates an empty file owned by uid (QEMU's logs: it could not truncate
 * a file root left). */
static int vm_touch(const struct driver_computer *c, const char *name, unsigned uid, struct err *e)
{
	char path[4200];
	if (vm_path(c, name, path, sizeof path, e) < 0)
		return -1;
	unlink(path); /* never open what QEMU's uid may have linked there */
	int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0 || fchown(fd, uid, uid) < 0) {
		int saved = errno;
		if (fd >= 0)
			close(fd);
		return err_set(e, ERR_UNAVAILABLE, "vm: cannot create %s: %s", path,
			       strerror(saved));
	}
	close(fd);
	return 0;
}

/*
 * /session: the host's session directory, shared with the guest over
 * virtio-9p (security_model=mapped-xattr: QEMU creates files as its own uid
 * and keeps the guest's owner and mode in user.virtfs.* xattrs, so the guest
 * cannot make host symlinks, devices or setuid files; the guest kernel
 * resolves symlinks, so none leads out). QEMU, which cannot search the
 * state directory, opens it through an fd cubicled passes
 * (/proc/self/fd/VM_SESSION_FD).
 */
static _Thread_local unsigned vm_tag_uid; /* nftw has no context pointer */

static void vm_tag_id(const char *path, const char *name)
{
	uint32_t id = htole32(UIDRANGE_GUEST_USER);
	if (lgetxattr(path, name, NULL, 0) < 0 && errno == ENODATA)
		(void)!lsetxattr(path, name, &id, sizeof id, 0);
}

/* Files the user of another computer left (QEMU's uid after the adoption,
 * no xattrs): shown to the guest as its user's. */
static int vm_tag_one(const char *path, const struct stat *st, int flag, struct FTW *f)
{
	(void)f;
	if ((flag == FTW_F || flag == FTW_D || flag == FTW_DP) && st->st_uid == vm_tag_uid) {
		vm_tag_id(path, "user.virtfs.uid");
		vm_tag_id(path, "user.virtfs.gid");
	}
	return 0;
}

/* Readies the session directory and opens it for QEMU (-1 without one). */
static int vm_session_open(const struct driver_computer *c, unsigned uid, int *out, struct err *e)
{
	*out = -1;
	if (!c->session_dir)
		return 0;
	unsigned first = (unsigned)drv_state_int(c->state, "uid_base", 0);
	if (uidrange_session_prepare(c->session_dir, first, e) < 0)
		return -1;
	vm_tag_uid = uid;
	nftw(c->session_dir, vm_tag_one, 16, FTW_PHYS | FTW_MOUNT);
	*out = open(c->session_dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (*out < 0)
		return err_set(e, ERR_UNAVAILABLE, "vm: cannot open the session directory %s: %s",
			       c->session_dir, strerror(errno));
	return 0;
}

/* Polls a QMP query until `done` says so, up to timeout_ms. */
static int vm_wait_status(struct qmp *q, const char *query, const char *key, const char *const ok[],
			  const char *const bad[], int timeout_ms, char *last, size_t lastlen,
			  struct err *e)
{
	long long deadline = clock_now_ms() + timeout_ms;
	for (;;) {
		json_t *r = NULL;
		if (qmp_cmd(q, query, NULL, -1, &r, e) < 0)
			return -1;
		snprintf(last, lastlen, "%s", json_string_value(json_object_get(r, key)) ?: "");
		json_t *desc = json_object_get(r, "error-desc");
		char why[256];
		snprintf(why, sizeof why, "%s", json_string_value(desc) ?: "");
		json_decref(r);
		for (int i = 0; ok[i]; i++)
			if (strcmp(last, ok[i]) == 0)
				return 0;
		for (int i = 0; bad[i]; i++)
			if (strcmp(last, bad[i]) == 0)
				return err_set(e, ERR_UNAVAILABLE, "vm: %s says %s%s%s", query,
					       last, why[0] ? ": " : "", why);
		if (clock_now_ms() >= deadline)
			return err_set(e, ERR_TIMEOUT, "vm: %s still says %s after %d s", query,
				       last, timeout_ms / 1000);
		clock_sleep_ms(10);
	}
}

static json_t *vm_ignore_shared(void)
{
	return json_pack("{s:[{s:s, s:b}]}", "capabilities", "capability", "x-ignore-shared",
			 "state", 1);
}

/* Loads vm/snapshot into a QEMU started with -incoming defer, then runs it. */
static int vm_restore(struct driver_computer *c, struct err *e)
{
	char sock[4200], snap[4200], status[32];
	if (vm_path(c, "qmp.sock", sock, sizeof sock, e) < 0 ||
	    vm_path(c, "snapshot", snap, sizeof snap, e) < 0)
		return -1;
	struct qmp q;
	if (qmp_open(&q, sock, VM_QMP_TIMEOUT, e) < 0)
		return -1;
	int fd = open(snap, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	static const char *const ok[] = {"paused", "running", "postmigrate", NULL};
	static const char *const bad[] = {"internal-error", "shutdown", "guest-panicked", NULL};
	struct stat st;
	int rc = fd < 0
		     ? err_set(e, ERR_UNAVAILABLE, "vm: cannot open %s: %s", snap, strerror(errno))
		     : 0;
	/* Only what vm_save wrote (root's, one link, a file): QEMU's uid owns
	 * vm/ and could have put a hard link to a host file there. */
	if (rc == 0 &&
	    (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_uid != 0 || st.st_nlink != 1))
		rc = err_set(e, ERR_UNAVAILABLE, "vm: %s is not the snapshot cubicled wrote", snap);
	if (rc == 0)
		rc = qmp_cmd(&q, "migrate-set-capabilities", vm_ignore_shared(), -1, NULL, e);
	if (rc == 0)
		rc = qmp_cmd(&q, "getfd", json_pack("{s:s}", "fdname", "snap"), fd, NULL, e);
	if (rc == 0)
		rc = qmp_cmd(&q, "migrate-incoming", json_pack("{s:s}", "uri", "fd:snap"), -1, NULL,
			     e);
	if (rc == 0)
		rc = vm_wait_status(&q, "query-status", "status", ok, bad, VM_SAVE_TIMEOUT, status,
				    sizeof status, e);
	if (rc == 0) {
		/* A failed load leaves "inmigrate" → ends in bad states or times out;
		 * a good one leaves it paused (-incoming defer) until cont. */
		json_t *m = NULL;
		if (qmp_cmd(&q, "query-migrate", NULL, -1, &m, e) < 0)
			rc = -1;
		else if (strcmp(json_string_value(json_object_get(m, "status")) ?: "",
				"completed") != 0)
			rc = err_set(e, ERR_UNAVAILABLE, "vm: the snapshot did not load (%s)",
				     json_string_value(json_object_get(m, "status")) ?: "?");
		json_decref(m);
	}
	if (rc == 0)
		rc = qmp_cmd(&q, "cont", NULL, -1, NULL, e);
	if (fd >= 0)
		close(fd);
	qmp_close(&q);
	return rc;
}

/*
 * Sends one HTTP/1.0 request to envd at 127.0.0.1:port and returns the
 * status of the answer, or -1 when none came within a second.
 */
static int vm_http(int port, const char *req)
{
	int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (s < 0)
		return -1;
	struct timeval tv = {1, 0};
	setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
	setsockopt(s, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
	struct sockaddr_in a = {.sin_family = AF_INET,
				.sin_port = htons((uint16_t)port),
				.sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	char buf[16] = "";
	size_t len = strlen(req);
	int status = -1;
	if (connect(s, (struct sockaddr *)&a, sizeof a) == 0 &&
	    send(s, req, len, MSG_NOSIGNAL) == (ssize_t)len &&
	    recv(s, buf, 12, MSG_WAITALL) == 12 && memcmp(buf, "HTTP/1.", 7) == 0)
		status = atoi(buf + 9);
	close(s);
	return status;
}

/* Whether envd answers. User networking accepts on the host side before
 * the guest listens (and then resets), so a connect alone proves nothing:
 * any HTTP status line does (401 included). */
static bool vm_envd_answers(int port)
{
	return vm_http(port, "GET /health HTTP/1.0\r\n\r\n") > 0;
}

/* Sets the guest's wall clock to the host's: it stood still while the
 * computer was stopped (Linux does not read the RTC again on resume). */
static int vm_set_clock(const struct driver_computer *c, int port, struct err *e)
{
	struct timespec now;
	clock_gettime(CLOCK_REALTIME, &now);
	char req[512];
	snprintf(req, sizeof req,
		 "POST /v1/clock?unix_ms=%lld HTTP/1.0\r\nAuthorization: Bearer %s\r\n"
		 "Content-Length: 0\r\n\r\n",
		 (long long)now.tv_sec * 1000 + now.tv_nsec / 1000000, c->envd_token);
	int status = vm_http(port, req);
	if (status != 200)
		return err_set(e, ERR_UNAVAILABLE, "vm: envd did not set the clock (HTTP %d)",
			       status);
	return 0;
}

static int vm_wait_envd(struct driver_computer *c, int port, long long deadline, struct err *e)
{
	char con[4200], qlog[4200], tail[300];
	vm_path(c, "console.log", con, sizeof con, NULL);
	vm_path(c, "qemu.log", qlog, sizeof qlog, NULL);
	for (;;) {
		if (vm_envd_answers(port))
			return 0;
		if (!vm_qemu_alive(c)) {
			drv_log_tail(qlog, tail, sizeof tail);
			if (!tail[0])
				drv_log_tail(con, tail, sizeof tail);
			return err_set(e, ERR_UNAVAILABLE,
				       "vm: QEMU exited while the computer started: %s", tail);
		}
		if (clock_now_ms() >= deadline) {
			drv_log_tail(con, tail, sizeof tail);
			return err_set(e, ERR_UNAVAILABLE,
				       "vm: envd did not answer within %d s; the console ends "
				       "with: %s",
				       VM_BOOT_TIMEOUT / 1000, tail);
		}
		clock_sleep_ms(50);
	}
}

/* One QEMU run: a restore when `restore`, else a cold boot. QEMU is halted
 * again on failure. */
static int vm_boot(struct driver_computer *c, const char *image, const char *egress, bool restore,
		   struct err *e)
{
	unsigned uid = vm_qemu_uid(c);
	bool kvm = vm_use_kvm();
	char qemu[4096];
	if (drv_find_exe(VM_QEMU, qemu, sizeof qemu) < 0)
		return err_set(e, ERR_UNAVAILABLE,
			       "vm: %s is not installed (apt-get install qemu-system-x86)",
			       VM_QEMU);
	int port = vm_free_port(e);
	if (port < 0 || vm_write_conf(c, image, uid, egress, e) < 0 ||
	    vm_touch(c, "qemu.log", uid, e) < 0 || vm_touch(c, "console.log", uid, e) < 0)
		return -1;
	if (!restore) {
		char mem[4200];
		if (vm_path(c, "mem", mem, sizeof mem, e) < 0)
			return -1;
		unlink(mem); /* a cold boot starts from zeroed RAM */
	}
	struct cgroup_set cg;
	struct cgroup_limits lim = {c->millicpus, c->memory_mb + VM_MEM_HEADROOM_MB, c->pids_max};
	if (cgroup_locate(c->id, &cg, e) < 0 || cgroup_create(&cg, &lim, e) < 0)
		return -1;
	json_object_set_new(c->state, "cgroups", cgroup_to_json(&cg));
	drv_state_set_int(c->state, "port", port);
	json_object_set_new(c->state, "accel", json_string(kvm ? "kvm" : "tcg"));
	snprintf(c->accel, sizeof c->accel, "%s", kvm ? "kvm" : "tcg");
	struct vm_args a;
	vm_build_argv(c, &a, qemu, kvm, port, restore);
	pid_t pid;
	long long deadline = clock_now_ms() + VM_BOOT_TIMEOUT;
	int session_fd;
	int rc = vm_session_open(c, uid, &session_fd, e);
	if (rc == 0)
		rc = vm_spawn(c, &cg, a.v, uid, kvm, session_fd, &pid, e);
	if (session_fd >= 0)
		close(session_fd);
	if (rc == 0 && restore)
		rc = vm_restore(c, e);
	if (rc == 0)
		rc = vm_wait_envd(c, port, deadline, e);
	if (rc == 0 && restore) {
		struct err ce = {0};
		if (vm_set_clock(c, port, &ce) < 0)
			fprintf(stderr, "cubicled: %s: %s; its clock is behind\n", c->id,
				ce.message);
	}
	if (rc < 0)
		vm_halt(c, NULL);
	return rc;
}

/* Whether the last QEMU run failed because its host forwarding could not
 * bind the port vm_free_port chose (taken by another process meanwhile). */
static bool vm_port_taken(struct driver_computer *c)
{
	char qlog[4200], tail[200];
	if (vm_path(c, "qemu.log", qlog, sizeof qlog, NULL) < 0)
		return false;
	drv_log_tail(qlog, tail, sizeof tail);
	return strstr(tail, "host forwarding") != NULL;
}

static int vm_start(struct driver_computer *c, struct err *e)
{
	if (vm_check_computer(c, e) < 0)
		return -1;
	if (vm_qemu_alive(c))
		return 0; /* already running */
	char image[4096], snap[4200];
	if (vm_halt(c, e) < 0 || vm_create(c, e) < 0 || vm_image(c, image, sizeof image, e) < 0 ||
	    vm_path(c, "snapshot", snap, sizeof snap, e) < 0)
		return -1;
	/* The egress policy now; a snapshot restores the one of its cold boot
	 * (cubicle-init applied it), so a changed policy means a cold boot. */
	char egress[VM_CMDLINE_MAX];
	if (vm_egress(c, egress, sizeof egress, e) < 0)
		return -1;
	const char *booted = drv_state_str(c->state, "egress", "");
	long long t0 = clock_now_ms();
	char boot[400] = "cold: no snapshot";
	if (access(snap, F_OK) == 0 && strcmp(booted, egress) != 0) {
		unlink(snap);
		snprintf(boot, sizeof boot, "cold: the egress policy changed");
	} else if (access(snap, F_OK) == 0) {
		struct err re = {0};
		int rc = vm_boot(c, image, egress, true, &re);
		if (rc < 0 && vm_port_taken(c)) {
			/* Another process took the free port first: a restore lost
			 * to that would cost the guest its processes. */
			re = (struct err){0};
			rc = vm_boot(c, image, egress, true, &re);
		}
		if (rc == 0) {
			/* The guest runs on: the snapshot no longer matches the disk. */
			unlink(snap);
			json_object_set_new(c->state, "boot", json_string("restored"));
			fprintf(stderr, "cubicled: %s: vm: restored from its snapshot in %lld ms\n",
				c->id, clock_now_ms() - t0);
			return 0;
		}
		unlink(snap);
		snprintf(boot, sizeof boot, "cold: the snapshot did not restore: %.300s",
			 re.message);
		t0 = clock_now_ms();
	}
	fprintf(stderr, "cubicled: %s: vm: %s boot (%s)\n", c->id, vm_use_kvm() ? "kvm" : "tcg",
		boot);
	/* One retry: another process may take the free port before QEMU binds it. */
	struct err first = {0};
	if (vm_boot(c, image, egress, false, &first) < 0) {
		if (!vm_port_taken(c) || vm_boot(c, image, egress, false, e) < 0) {
			if (e && !e->code)
				*e = first;
			return -1;
		}
	}
	json_object_set_new(c->state, "boot", json_string(boot));
	json_object_set_new(c->state, "egress", json_string(egress));
	fprintf(stderr, "cubicled: %s: vm: envd answers %lld ms after QEMU started\n", c->id,
		clock_now_ms() - t0);
	return 0;
}

/* ---- stop, destroy ---------------------------------------------------------------- */

/* Pauses the guest and writes its device state to vm/snapshot (RAM stays in
 * vm/mem); QEMU is left paused. */
static int vm_save(struct driver_computer *c, struct qmp *q, struct err *e)
{
	char tmp[4200], snap[4200], status[32];
	if (vm_path(c, "snapshot.tmp", tmp, sizeof tmp, e) < 0 ||
	    vm_path(c, "snapshot", snap, sizeof snap, e) < 0)
		return -1;
	if (qmp_cmd(q, "stop", NULL, -1, NULL, e) < 0 ||
	    qmp_cmd(q, "migrate-set-capabilities", vm_ignore_shared(), -1, NULL, e) < 0)
		return -1;
	/* vm/ belongs to QEMU's uid: never open what it may have put there
	 * (a link to a host file) for writing. */
	unlink(tmp);
	int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0)
		return err_set(e, ERR_UNAVAILABLE, "vm: cannot create %s: %s", tmp,
			       strerror(errno));
	static const char *const ok[] = {"completed", NULL};
	static const char *const bad[] = {"failed", "cancelled", NULL};
	int rc = qmp_cmd(q, "getfd", json_pack("{s:s}", "fdname", "snap"), fd, NULL, e);
	if (rc == 0)
		rc = qmp_cmd(q, "migrate", json_pack("{s:s}", "uri", "fd:snap"), -1, NULL, e);
	if (rc == 0)
		rc = vm_wait_status(q, "query-migrate", "status", ok, bad, VM_SAVE_TIMEOUT, status,
				    sizeof status, e);
	if (rc == 0 && fsync(fd) < 0)
		rc = err_set(e, ERR_UNAVAILABLE, "vm: cannot write %s: %s", tmp, strerror(errno));
	close(fd);
	if (rc == 0 && rename(tmp, snap) < 0)
		rc = err_set(e, ERR_UNAVAILABLE, "vm: cannot rename %s: %s", tmp, strerror(errno));
	if (rc < 0)
		unlink(tmp);
	return rc;
}

static int vm_stop(struct driver_computer *c, struct err *e)
{
	if (vm_check_computer(c, e) < 0)
		return -1;
	if (vm_qemu_alive(c)) {
		char sock[4200];
		struct qmp q;
		struct err se = {0};
		long long t0 = clock_now_ms();
		if (vm_path(c, "qmp.sock", sock, sizeof sock, &se) == 0 &&
		    qmp_open(&q, sock, VM_QMP_TIMEOUT, &se) == 0) {
			if (vm_save(c, &q, &se) == 0)
				fprintf(stderr, "cubicled: %s: vm: snapshot saved in %lld ms\n",
					c->id, clock_now_ms() - t0);
			qmp_cmd(&q, "quit", NULL, -1, NULL, NULL);
			qmp_close(&q);
			drv_wait_gone((pid_t)drv_state_int(c->state, "qemu_pid", 0),
				      (unsigned long long)drv_state_int(c->state, "qemu_start", -1),
				      VM_QUIT_TIMEOUT);
		}
		if (se.code)
			fprintf(stderr,
				"cubicled: %s: vm: no snapshot (%s); the next start boots cold\n",
				c->id, se.message);
	}
	return vm_halt(c, e);
}

static int vm_destroy(struct driver_computer *c, struct err *e)
{
	if (vm_check_computer(c, e) < 0)
		return -1;
	if (vm_halt(c, e) < 0)
		return -1;
	/* A group left by a start that crashed before recording it. */
	struct cgroup_set cg;
	if (cgroup_locate(c->id, &cg, NULL) == 0 && cgroup_remove(&cg, e) < 0)
		return -1;
	if (drv_rm_contents(c->dir) < 0)
		return err_set(e, ERR_INTERNAL, "vm: cannot remove the files in %s: %s", c->dir,
			       strerror(errno));
	uidrange_release(c->dir, drv_state_int(c->state, "uid_slot", -1));
	drv_state_del(c->state, "uid_slot");
	drv_state_del(c->state, "uid_base");
	drv_state_del(c->state, "qemu_uid");
	drv_state_del(c->state, "image");
	drv_state_del(c->state, "image_pinned");
	drv_state_del(c->state, "boot");
	return 0;
}

/* ---- the rest of the table ------------------------------------------------------- */

static bool vm_alive(struct driver_computer *c)
{
	return c->state && vm_qemu_alive(c);
}

static int vm_envd_address(const struct driver_computer *c, char *out, size_t len, struct err *e)
{
	long long port = drv_state_int(c->state, "port", 0);
	if (port <= 0)
		return err_set(e, ERR_CONFLICT, "vm: the computer is not running");
	int n = snprintf(out, len, "tcp:127.0.0.1:%lld", port);
	if (n < 0 || (size_t)n >= len)
		return err_set(e, ERR_INTERNAL, "vm: the envd address does not fit");
	return 0;
}

/* The host end of the guest's "cubicle.vnc" virtio-serial port: envd serves
 * RFB there, one viewer at a time (see host/README.md). */
static int vm_vnc_path(const struct driver_computer *c, char *out, size_t len, struct err *e)
{
	if (!c->kind || strcmp(c->kind, "desktop") != 0)
		return err_set(e, ERR_CONFLICT, "vm: a sandbox has no display to view");
	return vm_path(c, "vnc.sock", out, len, e);
}

static bool vm_available(char *why, size_t len)
{
	char path[4096];
	if (geteuid() != 0) {
		snprintf(why, len, "cubicled must run as root to run QEMU as a uid of its own");
		return false;
	}
	if (drv_find_exe(VM_QEMU, path, sizeof path) < 0 ||
	    drv_find_exe(VM_QEMU_IMG, path, sizeof path) < 0) {
		snprintf(why, len,
			 "QEMU is not installed (apt-get install qemu-system-x86 "
			 "qemu-utils)");
		return false;
	}
	return cgroup_usable(why, len);
}

const struct driver_ops driver_vm = {
    .name = "vm",
    .processes = "QEMU process",
    .guest_setup = true,
    .sync_before_stop = true,
    .available = vm_available,
    .preferred = vm_preferred,
    .create = vm_create,
    .start = vm_start,
    .stop = vm_stop,
    .destroy = vm_destroy,
    .alive = vm_alive,
    .envd_address = vm_envd_address,
    .vnc_path = vm_vnc_path,
};
