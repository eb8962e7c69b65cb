/*
 * container: the container isolation driver (struct driver_ops).
 *
 * A computer is an overlay of its image (read-only, idmapped) and its own
 * upper/ directory, run by tini + envd as pid 1 of fresh user, pid, mount,
 * uts, ipc, net and cgroup namespaces, inside cgroups that enforce its size,
 * under no_new_privs and a seccomp filter, with outbound-only networking
 * from slirp4netns in a network namespace the guest cannot administer,
 * whose routes keep it from the host's addresses and the link-local range
 * (guest-net.h). envd listens on <dir>/io/envd.sock.
 *
 * Layout of c->dir (all of it the driver's):
 *   disk.ext4      the computer's disk of the size's disk_mb (sparse): an
 *                  ext4 image holding upper/ and work/, the overlay's
 *                  writable layer (kept by stop) and scratch. Loop-mounted
 *                  by the launcher at each start, in the computer's mount
 *                  namespace only (at disk/), so the guest gets ENOSPC past
 *                  its size and the mount and loop device go with the
 *                  computer's last process, whatever cubicled does
 *   upper/ work/   the writable layer when the disk is unlimited (no loop
 *                  devices, no mkfs.ext4, no disk_mb); upper/ always exists:
 *                  it marks the uid range as in use (uidrange.c)
 *   lower/ merged/ mount points, used inside the computer's mount namespace
 *   io/            bound at /run/cubicle: envd's token and socket
 *   console.log    the guest's stdout and stderr (truncated at each start)
 *
 * Guest uids 0..65535 map to host uids uid_base..uid_base+65535, one range
 * per computer for its whole life (uidrange.c), so files in upper/ keep
 * their owners across stop and start; the state records it as uid_slot and
 * uid_base.
 *
 * State keys: uid_slot, uid_base, init_pid + init_start and slirp_pid +
 * slirp_start (pid and /proc/<pid>/stat start time), cgroups
 * ({"version","dirs"}), disk ("ext4 <N> MiB" or "unlimited: <why>",
 * decided once by create). Only the uid range and disk survive stop.
 *
 * Nothing here is a child of the caller once start returns (container-boot.c),
 * and everything is found again from c->state (pids with their start times,
 * cgroup paths), or from the computer's id alone (its cgroups), so stop and
 * destroy work after a cubicled crash, and destroy works on a computer whose
 * state was never written.
 */
#include "driver.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <linux/loop.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cgroup.h"
#include "container-boot.h"
#include "drvutil.h"
#include "guest-net.h"
#include "guest-seccomp.h"
#include "layer.h"
#include "uidrange.h"
#include "clock.h"

#define CT_GUEST_USER	   UIDRANGE_GUEST_USER
#define CT_GUEST_USER_NAME "user"
#define CT_START_TIMEOUT   30000 /* ms until envd must accept */
#define CT_STOP_GRACE	   5000	 /* ms between SIGTERM and SIGKILL */
#define CT_SLIRP	   "slirp4netns"
#define CT_MKFS		   "mkfs.ext4"
#define CT_DISK		   "disk.ext4"
#define CT_DISK_MIN_MB	   16	/* smaller than this, ext4 has no room for files */
#define CT_DISK_FREE_MS	   5000 /* for a stopped computer's loop device to go */

/* ---- small helpers ---------------------------------------------------------- */

/* c->dir + "/" + name, or an error when it does not fit. */
static int ct_path(const struct driver_computer *c, const char *name, char *out, size_t len,
		   struct err *e)
{
	int n = snprintf(out, len, "%s/%s", c->dir, name);
	if (n < 0 || (size_t)n >= len)
		return err_set(e, ERR_INVALID,
			       "container: the computer directory path %s is too long", c->dir);
	return 0;
}

static int ct_check_computer(const struct driver_computer *c, struct err *e)
{
	return drv_check_computer(c, "container", e);
}

/* ---- uid ranges ------------------------------------------------------------------ */

/* The computer's uid range: the one its state records, or a new one. */
static int ct_range_claim(struct driver_computer *c, struct err *e)
{
	long long slot = uidrange_claim(c->dir, drv_state_int(c->state, "uid_slot", -1), e);
	if (slot < 0)
		return -1;
	drv_state_set_int(c->state, "uid_slot", slot);
	drv_state_set_int(c->state, "uid_base", uidrange_base(slot));
	return 0;
}

static void ct_range_release(struct driver_computer *c)
{
	uidrange_release(c->dir, drv_state_int(c->state, "uid_slot", -1));
	drv_state_del(c->state, "uid_slot");
	drv_state_del(c->state, "uid_base");
}

/* ---- the disk ---------------------------------------------------------------------- */

/*
 * Why a loop-mounted ext4 image rather than project quotas: project quotas
 * need the state directory's filesystem to be XFS mounted with prjquota or
 * ext4 made with the project feature and mounted with prjquota, which the
 * host's administrator must have chosen beforehand (this project's
 * development machines have neither); a loop device works on any host
 * filesystem. Both keep the overlay's upper dir on a real local filesystem.
 */

/* Why the disk cannot be limited here, or NULL when it can. */
static const char *ct_disk_unsupported(const struct driver_computer *c, char *buf, size_t len)
{
	char path[4096];
	if (c->disk_mb <= 0)
		return "the size has no disk limit";
	if (c->disk_mb < CT_DISK_MIN_MB) {
		snprintf(buf, len, "%lld MiB is below the %d MiB an ext4 disk needs", c->disk_mb,
			 CT_DISK_MIN_MB);
		return buf;
	}
	int fd = open("/dev/loop-control", O_RDWR | O_CLOEXEC);
	if (fd < 0) {
		snprintf(buf, len, "no loop devices (/dev/loop-control: %s)", strerror(errno));
		return buf;
	}
	/* A bind-mounted stand-in (a container host) opens but is no loop-control. */
	int free_dev = ioctl(fd, LOOP_CTL_GET_FREE);
	int saved = errno;
	close(fd);
	if (free_dev < 0) {
		snprintf(buf, len, "no free loop device (LOOP_CTL_GET_FREE: %s)", strerror(saved));
		return buf;
	}
	if (drv_find_exe(CT_MKFS, path, sizeof(path)) < 0)
		return CT_MKFS " is not installed (apt-get install e2fsprogs)";
	return NULL;
}

/*
 * Decides once whether the computer gets a disk of its own, and makes it:
 * a sparse file of disk_mb with an ext4 filesystem whose inode tables and
 * journal are left unwritten (lazy init, ~0.1 s for 5 GiB; the host file
 * grows only with what the guest writes). A computer that already has files
 * in the host's upper/ (made before disks existed) keeps them there.
 */
static int ct_disk_create(struct driver_computer *c, unsigned base, struct err *e)
{
	if (json_object_get(c->state, "disk"))
		return 0;
	char why_buf[200], disk[4096], upper[4096], log[4096];
	const char *why = ct_disk_unsupported(c, why_buf, sizeof(why_buf));
	if (ct_path(c, CT_DISK, disk, sizeof(disk), e) < 0 ||
	    ct_path(c, "upper", upper, sizeof(upper), e) < 0 ||
	    ct_path(c, "mkfs.log", log, sizeof(log), e) < 0)
		return -1;
	struct stat st;
	if (!why && lstat(disk, &st) == 0 && S_ISREG(st.st_mode)) {
		/* Made by a create whose state was lost: keep it. */
		char v[64];
		snprintf(v, sizeof(v), "ext4 %lld MiB", (long long)(st.st_size >> 20));
		json_object_set_new(c->state, "disk", json_string(v));
		return 0;
	}
	if (!why) {
		DIR *d = opendir(upper);
		struct dirent *de;
		while (d && (de = readdir(d)))
			if (strcmp(de->d_name, ".") != 0 && strcmp(de->d_name, "..") != 0)
				why = "the computer's files predate its disk (host upper/)";
		if (d)
			closedir(d);
	}
	if (why) {
		char v[256];
		snprintf(v, sizeof(v), "unlimited: %s", why);
		json_object_set_new(c->state, "disk", json_string(v));
		return 0;
	}
	int fd = open(disk, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0 || ftruncate(fd, (off_t)c->disk_mb << 20) < 0) {
		int saved = errno;
		if (fd >= 0)
			close(fd);
		return err_set(e, ERR_UNAVAILABLE, "container: cannot create %s: %s", disk,
			       strerror(saved));
	}
	close(fd);
	char owner[160];
	snprintf(owner, sizeof(owner),
		 "lazy_itable_init=1,lazy_journal_init=1,nodiscard,root_owner=%u:%u", base, base);
	/* -m 0: the guest gets the whole size (no blocks kept for root). */
	char *argv[] = {CT_MKFS, "-q", "-F", "-m", "0", "-E", owner, "-L", "cubicle", disk, NULL};
	if (drv_run(argv, log, "container", e) < 0) {
		unlink(disk);
		return -1;
	}
	unlink(log);
	char v[64];
	snprintf(v, sizeof(v), "ext4 %lld MiB", c->disk_mb);
	json_object_set_new(c->state, "disk", json_string(v));
	return 0;
}

/* Whether the computer has a disk of its own (else: host upper/, unlimited). */
static bool ct_disk_limited(const struct driver_computer *c)
{
	return strncmp(drv_state_str(c->state, "disk", ""), "ext4", 4) == 0;
}

/* The loop device backing the computer's disk, if any is left: "loopN", or "". */
static void ct_disk_loop(const struct driver_computer *c, char *out, size_t len)
{
	char disk[4200], real[4096], path[300], back[4200];
	out[0] = '\0';
	if (!realpath(c->dir, real))
		return;
	snprintf(disk, sizeof(disk), "%s/" CT_DISK, real);
	DIR *d = opendir("/sys/block");
	if (!d)
		return;
	struct dirent *de;
	while ((de = readdir(d))) {
		if (strncmp(de->d_name, "loop", 4) != 0)
			continue;
		snprintf(path, sizeof(path), "/sys/block/%s/loop/backing_file", de->d_name);
		FILE *f = fopen(path, "re");
		if (!f)
			continue;
		bool same = fgets(back, sizeof(back), f) &&
			    strncmp(back, disk, strlen(disk)) == 0 &&
			    (back[strlen(disk)] == '\n' || back[strlen(disk)] == ' ' ||
			     !back[strlen(disk)]);
		fclose(f);
		if (same) {
			snprintf(out, len, "%s", de->d_name);
			break;
		}
	}
	closedir(d);
}

/*
 * Waits until no loop device backs the disk. A stopped computer's mount
 * goes with its mount namespace and the loop device clears itself after
 * (LO_FLAGS_AUTOCLEAR), a moment after the last process; mounting the
 * image a second time while the first mount lives would corrupt it.
 */
static int ct_disk_wait_free(const struct driver_computer *c, struct err *e)
{
	char loop[300];
	for (long long end = clock_now_ms() + CT_DISK_FREE_MS;; clock_sleep_ms(10)) {
		ct_disk_loop(c, loop, sizeof(loop));
		if (!loop[0])
			return 0;
		if (clock_now_ms() >= end)
			return err_set(e, ERR_UNAVAILABLE,
				       "container: the disk %s/" CT_DISK
				       " is still attached to /dev/%s after %d s",
				       c->dir, loop, CT_DISK_FREE_MS / 1000);
	}
}

/* ---- create ---------------------------------------------------------------------- */

static int ct_mkdir_owned(const struct driver_computer *c, const char *name, mode_t mode,
			  unsigned owner, struct err *e)
{
	char path[4096];
	if (ct_path(c, name, path, sizeof(path), e) < 0)
		return -1;
	if (mkdir(path, mode) < 0 && errno != EEXIST)
		return err_set(e, ERR_UNAVAILABLE, "container: cannot create %s: %s", path,
			       strerror(errno));
	if (lchown(path, owner, owner) < 0 || chmod(path, mode) < 0)
		return err_set(e, ERR_UNAVAILABLE, "container: cannot set up %s: %s", path,
			       strerror(errno));
	return 0;
}

static int ct_image_rootfs(const struct driver_computer *c, char *out, size_t len, struct err *e)
{
	snprintf(out, len, "%s/rootfs", c->image_dir);
	char tini[4200];
	snprintf(tini, sizeof(tini), "%s/usr/bin/tini", out);
	if (access(tini, F_OK) < 0)
		return err_set(e, ERR_UNAVAILABLE,
			       "container: the image at %s is not built (no rootfs/usr/bin/tini); "
			       "run `make images`",
			       c->image_dir);
	return 0;
}

static int ct_create(struct driver_computer *c, struct err *e)
{
	char rootfs[4096];
	if (ct_check_computer(c, e) < 0 || ct_image_rootfs(c, rootfs, sizeof(rootfs), e) < 0)
		return -1;
	struct stat st;
	if (stat(c->dir, &st) < 0 || !S_ISDIR(st.st_mode))
		return err_set(e, ERR_UNAVAILABLE,
			       "container: the computer directory %s is missing", c->dir);
	/* upper/ first: it is what marks the slot as in use. */
	char upper[4096];
	if (ct_path(c, "upper", upper, sizeof(upper), e) < 0)
		return -1;
	if (mkdir(upper, 0755) < 0 && errno != EEXIST)
		return err_set(e, ERR_UNAVAILABLE, "container: cannot create %s: %s", upper,
			       strerror(errno));
	if (ct_range_claim(c, e) < 0)
		return -1;
	unsigned base = (unsigned)drv_state_int(c->state, "uid_base", 0);
	/* The upper dir's root is the guest's "/": owned by the guest's root. */
	if (ct_mkdir_owned(c, "upper", 0755, base, e) < 0 ||
	    ct_mkdir_owned(c, "work", 0700, base, e) < 0 ||
	    ct_mkdir_owned(c, "lower", 0755, base, e) < 0 ||
	    ct_mkdir_owned(c, "merged", 0755, base, e) < 0 ||
	    ct_mkdir_owned(c, "io", 0700, base, e) < 0 || ct_mkdir_owned(c, "disk", 0700, 0, e) < 0)
		return -1;
	return ct_disk_create(c, base, e);
}

/* ---- the size the guest sees ------------------------------------------------------ */

/*
 * The CPUs a computer runs on: ceil(vCPUs) of the host's (the whole host
 * when it asks for as many or more), the ones the fewest running computers
 * use (ties broken from a point its id picks), so nproc and
 * sched_getaffinity show the size. The quota (cgroup) still limits the
 * time; the affinity only says where. Counts live in memory: after a
 * restart of cubicled the adopted computers are not counted until their
 * next start. The choice is in the state ("cpus") and released by halt.
 */
static pthread_mutex_t ct_cpu_lock = PTHREAD_MUTEX_INITIALIZER;
static int ct_cpu_load[CPU_SETSIZE];

static void ct_cpus_pick(struct driver_computer *c, cpu_set_t *out)
{
	CPU_ZERO(out);
	cpu_set_t host;
	CPU_ZERO(&host);
	if (sched_getaffinity(0, sizeof(host), &host) < 0)
		return;
	int hcpus[CPU_SETSIZE], nh = 0;
	for (int i = 0; i < CPU_SETSIZE; i++)
		if (CPU_ISSET(i, &host))
			hcpus[nh++] = i;
	int want = c->millicpus > 0 ? (c->millicpus + 999) / 1000 : nh;
	if (nh == 0 || want >= nh)
		return;		  /* all of them: leave the affinity alone */
	unsigned h = 2166136261u; /* FNV-1a of the id */
	for (const char *p = c->id; *p; p++)
		h = (h ^ (unsigned char)*p) * 16777619u;
	json_t *list = json_array();
	pthread_mutex_lock(&ct_cpu_lock);
	for (int k = 0; k < want; k++) {
		int best = -1;
		for (int j = 0; j < nh; j++) {
			int cpu = hcpus[((int)(h % (unsigned)nh) + j) % nh];
			if (!CPU_ISSET(cpu, out) &&
			    (best < 0 || ct_cpu_load[cpu] < ct_cpu_load[best]))
				best = cpu;
		}
		CPU_SET(best, out);
		ct_cpu_load[best]++;
		json_array_append_new(list, json_integer(best));
	}
	pthread_mutex_unlock(&ct_cpu_lock);
	json_object_set_new(c->state, "cpus", list);
}

static void ct_cpus_release(struct driver_computer *c)
{
	json_t *list = c->state ? json_object_get(c->state, "cpus") : NULL;
	size_t i;
	json_t *v;
	pthread_mutex_lock(&ct_cpu_lock);
	json_array_foreach(list, i, v)
	{
		long long cpu = json_integer_value(v);
		if (cpu >= 0 && cpu < CPU_SETSIZE && ct_cpu_load[cpu] > 0)
			ct_cpu_load[cpu]--;
	}
	pthread_mutex_unlock(&ct_cpu_lock);
	if (c->state)
		json_object_del(c->state, "cpus");
}

/* Whether this host can mount the size files: /dev/fuse and the fuse file
 * system. Without them the guest sees the host's memory and CPUs in /proc
 * (nproc and the uptime are still the computer's), and the log says so. */
static bool ct_sizes_fuse(const char *id, int log_fd)
{
	bool ok = access("/dev/fuse", R_OK | W_OK) == 0;
	if (ok) {
		FILE *f = fopen("/proc/filesystems", "re");
		char line[128];
		ok = false;
		while (f && fgets(line, sizeof(line), f))
			if (strcmp(line, "nodev\tfuse\n") == 0)
				ok = true;
		if (f)
			fclose(f);
	}
	if (!ok) {
		char line[300];
		int n =
		    snprintf(line, sizeof(line),
			     "cubicled: %s: container: no FUSE on this host (/dev/fuse, the fuse "
			     "file system): /proc shows the host's memory and CPUs\n",
			     id);
		fputs(line, stderr);
		if (n > 0)
			(void)!write(log_fd, line, strlen(line));
	}
	return ok;
}

/* ---- processes ------------------------------------------------------------------- */

static bool ct_init_alive(const struct driver_computer *c)
{
	long long pid = drv_state_int(c->state, "init_pid", 0);
	long long start = drv_state_int(c->state, "init_start", -1);
	return pid > 0 && drv_proc_alive((pid_t)pid, (unsigned long long)start);
}

/* Sends sig to a recorded process if it is still the same one. */
static void ct_signal(const struct driver_computer *c, const char *pid_key, const char *start_key,
		      int sig)
{
	long long pid = drv_state_int(c->state, pid_key, 0);
	long long start = drv_state_int(c->state, start_key, -1);
	if (pid > 0 && drv_proc_alive((pid_t)pid, (unsigned long long)start))
		kill((pid_t)pid, sig);
}

/* The computer's cgroups: as recorded, else where they would be for its id. */
static int ct_cgroups(const struct driver_computer *c, struct cgroup_set *s, struct err *e)
{
	json_t *j = c->state ? json_object_get(c->state, "cgroups") : NULL;
	if (j && cgroup_from_json(j, s) == 0)
		return 0;
	return cgroup_locate(c->id, s, e);
}

/*
 * Ends every process of the computer: SIGTERM to init (tini passes it to
 * envd, which ends the session), SIGKILL after the grace period, then
 * whatever is left in its cgroups (slirp4netns, stragglers); removes the
 * cgroups. Mounts need nothing: they live in the computer's mount
 * namespace, which goes with its last process.
 */
/*
 * A running computer's image tree is its overlay's lower layer, so the
 * image cache must not prune it (rootfs/build-image): while it runs, a
 * marker in-use/<id> in the image's cache entry names the computer's
 * directory. A stopped computer starts on whatever image is current, so
 * halting removes the marker; a marker whose directory is gone (a crash
 * followed by a delete) counts for nothing.
 */
static void ct_image_mark(struct driver_computer *c)
{
	char *real = realpath(c->image_dir, NULL);
	char marker[4096];
	if (!real)
		return;
	int n = snprintf(marker, sizeof(marker), "%s/in-use", real);
	free(real);
	if (n < 0 || (size_t)n >= sizeof(marker) || (mkdir(marker, 0755) < 0 && errno != EEXIST))
		return;
	size_t len = strlen(marker);
	if (snprintf(marker + len, sizeof(marker) - len, "/%s", c->id) >=
	    (int)(sizeof(marker) - len))
		return;
	int fd = open(marker, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0644);
	if (fd < 0)
		return;
	bool ok = write(fd, c->dir, strlen(c->dir)) == (ssize_t)strlen(c->dir);
	ok = close(fd) == 0 && ok;
	if (ok)
		json_object_set_new(c->state, "image_marker", json_string(marker));
	else
		unlink(marker);
}

static void ct_image_unmark(struct driver_computer *c)
{
	const char *marker = drv_state_str(c->state, "image_marker", NULL);
	if (marker) {
		unlink(marker);
	} else {
		/* A start whose state was lost in a crash: the current image's. */
		char *real = realpath(c->image_dir, NULL);
		char path[4096];
		if (real &&
		    snprintf(path, sizeof(path), "%s/in-use/%s", real, c->id) < (int)sizeof(path))
			unlink(path);
		free(real);
	}
	drv_state_del(c->state, "image_marker");
}

static int ct_halt(struct driver_computer *c, int grace_ms, struct err *e)
{
	pid_t init = (pid_t)drv_state_int(c->state, "init_pid", 0);
	unsigned long long init_start =
	    (unsigned long long)drv_state_int(c->state, "init_start", -1);
	if (init > 0 && drv_proc_alive(init, init_start)) {
		if (grace_ms > 0) {
			kill(init, SIGTERM);
			drv_wait_gone(init, init_start, grace_ms);
		}
		if (drv_proc_alive(init, init_start)) {
			kill(init, SIGKILL);
			if (!drv_wait_gone(init, init_start, 5000))
				return err_set(e, ERR_INTERNAL,
					       "container: the computer's init (pid %d) survived "
					       "SIGKILL",
					       (int)init);
		}
	}
	ct_cpus_release(c);
	ct_signal(c, "slirp_pid", "slirp_start", SIGKILL);
	pid_t slirp = (pid_t)drv_state_int(c->state, "slirp_pid", 0);
	if (slirp > 0)
		drv_wait_gone(slirp, (unsigned long long)drv_state_int(c->state, "slirp_start", -1),
			      5000);

	struct cgroup_set cg;
	struct err ce;
	if (ct_cgroups(c, &cg, &ce) == 0 && cgroup_remove(&cg, e) < 0)
		return -1;
	char sock[4096];
	if (ct_path(c, "io/envd.sock", sock, sizeof(sock), NULL) == 0)
		unlink(sock);
	drv_state_del(c->state, "init_pid");
	drv_state_del(c->state, "init_start");
	drv_state_del(c->state, "slirp_pid");
	drv_state_del(c->state, "slirp_start");
	drv_state_del(c->state, "cgroups");
	ct_image_unmark(c);
	return 0;
}

/* ---- start ------------------------------------------------------------------------- */

static int ct_write_token(const struct driver_computer *c, unsigned base, struct err *e)
{
	if (!c->envd_token || strlen(c->envd_token) < 16 || strchr(c->envd_token, '\n'))
		return err_set(
		    e, ERR_INVALID,
		    "container: the envd token must be one line of at least 16 characters");
	char path[4096];
	if (ct_path(c, "io/token", path, sizeof(path), e) < 0)
		return -1;
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0)
		return err_set(e, ERR_UNAVAILABLE, "container: cannot write %s: %s", path,
			       strerror(errno));
	size_t len = strlen(c->envd_token);
	bool ok = fchown(fd, base, base) == 0 && fchmod(fd, 0600) == 0 &&
		  write(fd, c->envd_token, len) == (ssize_t)len && write(fd, "\n", 1) == 1;
	int saved = errno;
	close(fd);
	if (!ok)
		return err_set(e, ERR_UNAVAILABLE, "container: cannot write %s: %s", path,
			       strerror(saved));
	return 0;
}

/* /session: input/ output/ working/ owned by the guest's user. */
static int ct_prepare_session(const struct driver_computer *c, unsigned base, struct err *e)
{
	return c->session_dir ? uidrange_session_prepare(c->session_dir, base, e) : 0;
}

/* The last lines of console.log, on one line, for an error message. */
static void ct_log_tail(const struct driver_computer *c, char *out, size_t len)
{
	char path[4096];
	out[0] = '\0';
	if (ct_path(c, "console.log", path, sizeof(path), NULL) == 0)
		drv_log_tail(path, out, len);
}

/* Polls until envd accepts on its socket, the computer dies or time runs out. */
static int ct_wait_envd(struct driver_computer *c, long long deadline, struct err *e)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	if (ct_path(c, "io/envd.sock", sa.sun_path, sizeof(sa.sun_path), NULL) < 0)
		return err_set(
		    e, ERR_INVALID,
		    "container: %s/io/envd.sock is longer than a unix socket path may be "
		    "(%zu bytes): use a shorter state directory",
		    c->dir, sizeof(sa.sun_path) - 1);
	char tail[300];
	for (;;) {
		int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (s < 0)
			return err_set(e, ERR_INTERNAL, "container: socket: %s", strerror(errno));
		int rc = connect(s, (struct sockaddr *)&sa, sizeof(sa));
		close(s);
		if (rc == 0)
			return 0;
		if (!ct_init_alive(c)) {
			ct_log_tail(c, tail, sizeof(tail));
			return err_set(e, ERR_UNAVAILABLE,
				       "container: the computer exited while starting; console.log "
				       "ends with: %s",
				       tail);
		}
		if (clock_now_ms() >= deadline) {
			ct_log_tail(c, tail, sizeof(tail));
			return err_set(e, ERR_UNAVAILABLE,
				       "container: envd did not accept connections within %d s; "
				       "console.log ends with: %s",
				       CT_START_TIMEOUT / 1000, tail);
		}
		clock_sleep_ms(20);
	}
}

static int ct_start(struct driver_computer *c, struct err *e)
{
	if (ct_check_computer(c, e) < 0)
		return -1;
	if (ct_init_alive(c))
		return 0; /* already running */
	long long deadline = clock_now_ms() + CT_START_TIMEOUT;
	struct sockaddr_un sa;
	if (strlen(c->dir) + strlen("/io/envd.sock") >= sizeof(sa.sun_path))
		return err_set(
		    e, ERR_INVALID,
		    "container: %s/io/envd.sock is longer than a unix socket path may be "
		    "(%zu bytes): use a shorter state directory",
		    c->dir, sizeof(sa.sun_path) - 1);
	/* Leftovers of an earlier run that died or was never stopped. */
	if (ct_halt(c, 0, e) < 0 || ct_create(c, e) < 0)
		return -1;
	unsigned base = (unsigned)drv_state_int(c->state, "uid_base", 0);
	char rootfs[4096], slirp[4096], log[4096], res[32];
	if (ct_image_rootfs(c, rootfs, sizeof(rootfs), e) < 0)
		return -1;
	ct_image_mark(c);
	if (drv_find_exe(CT_SLIRP, slirp, sizeof(slirp)) < 0)
		return err_set(
		    e, ERR_UNAVAILABLE,
		    "container: slirp4netns is not installed (apt-get install slirp4netns)");
	if (ct_write_token(c, base, e) < 0 || ct_prepare_session(c, base, e) < 0)
		return -1;
	struct guest_net_policy egress;
	if (guest_net_policy_build(&egress, c->egress_allow, c->egress_deny, e) < 0)
		return -1;
	char disk[4096];
	bool limited = ct_disk_limited(c);
	if (limited &&
	    (ct_path(c, CT_DISK, disk, sizeof(disk), e) < 0 || ct_disk_wait_free(c, e) < 0))
		return -1;
	struct cgroup_set cg;
	struct cgroup_limits lim = {c->millicpus, c->memory_mb, c->pids_max};
	if (cgroup_locate(c->id, &cg, e) < 0 || cgroup_create(&cg, &lim, e) < 0)
		return -1;
	json_object_set_new(c->state, "cgroups", cgroup_to_json(&cg));

	if (ct_path(c, "console.log", log, sizeof(log), e) < 0)
		return -1;
	int log_fd =
	    open(log, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC | O_NOFOLLOW, 0640);
	if (log_fd < 0)
		return err_set(e, ERR_UNAVAILABLE, "container: cannot open %s: %s", log,
			       strerror(errno));
	if (!limited) {
		/* In cubicled's log and the computer's. */
		char line[400];
		int n = snprintf(line, sizeof(line), "cubicled: %s: container: disk %s\n", c->id,
				 drv_state_str(c->state, "disk", "unlimited"));
		fputs(line, stderr);
		if (n > 0)
			(void)!write(log_fd, line, strlen(line));
	}
	struct sock_fprog filter;
	if (guest_seccomp_build(&filter, e) < 0) {
		close(log_fd);
		return -1;
	}
	bool desktop = c->kind && strcmp(c->kind, "desktop") == 0;
	snprintf(res, sizeof(res), "%dx%d", c->width > 0 ? c->width : 1280,
		 c->height > 0 ? c->height : 800);
	/* The size the guest sees (container-boot.h, envd/guest/procview.h). */
	struct boot_sizes sizes;
	CPU_ZERO(&sizes.cpus);
	if (!c->host_sizes)
		ct_cpus_pick(c, &sizes.cpus);
	sizes.fuse = !c->host_sizes && c->memory_mb > 0 && ct_sizes_fuse(c->id, log_fd);
	char sizes_arg[400];
	snprintf(sizes_arg, sizeof(sizes_arg),
		 "memory=%lld,cgroup=%d,meminfo=%d,cpuinfo=%d,stat=%d,online=%d,proc-stat=%d,"
		 "proc-cpuinfo=%d,memory-usage=%d,memory-stat=%d",
		 c->memory_mb << 20, cg.version, BOOT_SIZES_FD_MEMINFO, BOOT_SIZES_FD_CPUINFO,
		 BOOT_SIZES_FD_STAT, BOOT_SIZES_FD_ONLINE, BOOT_SIZES_FD_PROC_STAT,
		 BOOT_SIZES_FD_PROC_CPUINFO, BOOT_SIZES_FD_MEM_USAGE, BOOT_SIZES_FD_MEM_STAT);
	/* The optional tail is packed at the end: a sandbox's argv ends at the
	 * NULL in place of "--session", and without the size files the
	 * session's arguments move up over --sizes. */
	char *argv[24] = {"/usr/bin/tini", "-s", "--", "/usr/local/bin/envd", "--listen",
			  "unix:/run/cubicle/envd.sock", "--token-file", "/run/cubicle/token",
			  "--user", (char *)(c->envd_user ? c->envd_user : CT_GUEST_USER_NAME),
			  /* The guest's root agent: the package helper, the host's
			   * setup (envd/guest/). */
			  "--guest",
			  /* The live view: cubicled's gateway pipes WebSocket streams
			   * to this socket (envd's RFB server), next to envd.sock. */
			  "--vnc", "unix:/run/cubicle/vnc.sock"};
	int argc = 13;
	if (sizes.fuse) {
		argv[argc++] = "--sizes";
		argv[argc++] = sizes_arg;
	}
	if (desktop) {
		argv[argc++] = "--session";
		argv[argc++] = "desktop";
		argv[argc++] = "--resolution";
		argv[argc++] = res;
	}
	argv[argc] = NULL;
	char *envp[] = {"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
			"HOME=/root", "LANG=C.UTF-8", "container=cubicle", NULL};
	struct boot_plan plan = {
	    .dir = c->dir,
	    .image_rootfs = rootfs,
	    .disk_image = limited ? disk : NULL,
	    .session_dir = c->session_dir,
	    .uid_base = base,
	    .cgroups = &cg,
	    .filter = &filter,
	    .log_fd = log_fd,
	    .argv = argv,
	    .envp = envp,
	    .slirp_path = slirp,
	    .egress = &egress,
	    .timeout_ms = CT_START_TIMEOUT,
	    .sizes = c->host_sizes ? NULL : &sizes,
	};
	struct boot_result r;
	int rc = container_boot(&plan, &r, e);
	guest_seccomp_free(&filter);
	close(log_fd);
	if (rc < 0) {
		ct_halt(c, 0, NULL);
		return -1;
	}
	drv_state_set_int(c->state, "init_pid", r.init_pid);
	drv_state_set_int(c->state, "init_start", (long long)r.init_start);
	drv_state_set_int(c->state, "slirp_pid", r.slirp_pid);
	drv_state_set_int(c->state, "slirp_start", (long long)r.slirp_start);
	if (ct_wait_envd(c, deadline, e) < 0) {
		ct_halt(c, 0, NULL);
		return -1;
	}
	return 0;
}

/* ---- stop, destroy ---------------------------------------------------------------- */

static int ct_stop(struct driver_computer *c, struct err *e)
{
	if (ct_check_computer(c, e) < 0)
		return -1;
	return ct_halt(c, CT_STOP_GRACE, e);
}

/* Unmounts whatever the host's mount table has under c->dir (nothing, unless
 * something went wrong: the computer's own mounts are in its namespace). */
static int ct_unmount_below(const struct driver_computer *c, struct err *e)
{
	size_t dlen = strlen(c->dir);
	for (int round = 0; round < 64; round++) {
		FILE *f = fopen("/proc/self/mountinfo", "re");
		if (!f)
			return err_set(e, ERR_INTERNAL, "container: cannot read mountinfo: %s",
				       strerror(errno));
		char *line = NULL, deepest[4096] = "";
		size_t cap = 0;
		while (getline(&line, &cap, f) > 0) {
			char mnt[4096];
			if (sscanf(line, "%*s %*s %*s %*s %4095s", mnt) != 1)
				continue;
			if (strncmp(mnt, c->dir, dlen) == 0 && (mnt[dlen] == '/' || !mnt[dlen]) &&
			    strlen(mnt) > strlen(deepest))
				snprintf(deepest, sizeof(deepest), "%s", mnt);
		}
		free(line);
		fclose(f);
		if (!deepest[0])
			return 0;
		if (umount2(deepest, MNT_DETACH) < 0)
			return err_set(e, ERR_INTERNAL, "container: cannot unmount %s: %s", deepest,
				       strerror(errno));
	}
	return err_set(e, ERR_INTERNAL, "container: mounts under %s keep coming back", c->dir);
}

static int ct_destroy(struct driver_computer *c, struct err *e)
{
	if (ct_check_computer(c, e) < 0)
		return -1;
	if (ct_halt(c, CT_STOP_GRACE, e) < 0)
		return -1;
	/* Groups left by a start that crashed before recording them. */
	struct cgroup_set cg;
	if (cgroup_locate(c->id, &cg, NULL) == 0 && cgroup_remove(&cg, e) < 0)
		return -1;
	if (ct_unmount_below(c, e) < 0)
		return -1;
	/* The loop device clears itself once the computer's mount namespace
	 * is gone; wait for it so nothing is left when destroy returns (if it
	 * lingers, it still clears itself when its last user lets go). */
	struct err de;
	if (ct_disk_wait_free(c, &de) < 0)
		fprintf(stderr, "cubicled: %s: %s\n", c->id, de.message);
	/* The overlay's work dir holds a mode-000 directory: root gets through,
	 * and drv_rm_contents never follows a symlink the guest made. */
	if (drv_rm_contents(c->dir) < 0)
		return err_set(e, ERR_INTERNAL, "container: cannot remove the files in %s: %s",
			       c->dir, strerror(errno));
	ct_range_release(c);
	drv_state_del(c->state, "disk");
	return 0;
}

/* ---- a template's layer ------------------------------------------------------------ */

/*
 * The computer's writable layer, copied out (layer.h) while it is stopped:
 * its upper/ is on its disk, mounted here read-only and detached (in no
 * mount table, gone when its descriptor closes, so nothing is left mounted
 * whatever happens), or in c->dir without a disk. The tree is the guest's
 * and hostile; layer_copy never follows a name out of it.
 */
static int ct_export_layer(struct driver_computer *c, const char *dest, uint64_t max_bytes,
			   struct layer_stats *st, struct err *e)
{
	if (ct_check_computer(c, e) < 0)
		return -1;
	if (ct_init_alive(c))
		return err_set(e, ERR_CONFLICT, "container: %s runs; stop it first", c->id);
	unsigned base = (unsigned)drv_state_int(c->state, "uid_base", 0);
	char path[4096];
	int mnt = -1, upper;
	if (ct_disk_limited(c)) {
		char why[400];
		if (ct_path(c, CT_DISK, path, sizeof(path), e) < 0 || ct_disk_wait_free(c, e) < 0)
			return -1;
		mnt = drv_disk_mount(path, true, why, sizeof(why));
		if (mnt < 0)
			return err_set(e, ERR_UNAVAILABLE, "container: %s", why);
		upper = openat(mnt, "upper", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	} else {
		if (ct_path(c, "upper", path, sizeof(path), e) < 0)
			return -1;
		upper = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	}
	int rc = upper < 0 ? err_set(e, ERR_UNAVAILABLE, "container: cannot open %s's upper/: %s",
				     c->id, strerror(errno))
			   : layer_copy(upper, dest, base, max_bytes, st, e);
	if (upper >= 0)
		close(upper);
	if (mnt >= 0)
		close(mnt);
	return rc;
}

/* ---- the rest of the table ------------------------------------------------------- */

static bool ct_alive(struct driver_computer *c)
{
	return c->state && ct_init_alive(c);
}

static int ct_envd_address(const struct driver_computer *c, char *out, size_t len, struct err *e)
{
	int n = snprintf(out, len, "unix:%s/io/envd.sock", c->dir);
	if (n < 0 || (size_t)n >= len)
		return err_set(e, ERR_INTERNAL, "container: the envd address does not fit");
	return 0;
}

static int ct_vnc_path(const struct driver_computer *c, char *out, size_t len, struct err *e)
{
	int n = snprintf(out, len, "%s/io/vnc.sock", c->dir);
	if (n < 0 || (size_t)n >= len)
		return err_set(e, ERR_INTERNAL, "container: the VNC socket path does not fit");
	return 0;
}

static bool ct_available(char *why, size_t len)
{
	char path[4096];
	struct utsname u;
	int major = 0, minor = 0;
	FILE *f;
	long userns = 0;
	if (geteuid() != 0) {
		snprintf(why, len, "cubicled must run as root to create containers");
		return false;
	}
	if (uname(&u) == 0)
		sscanf(u.release, "%d.%d", &major, &minor);
	if (major < 5 || (major == 5 && minor < 19)) {
		snprintf(why, len,
			 "Linux %s is too old: an overlay over an idmapped image needs 5.19 or "
			 "later",
			 u.release);
		return false;
	}
	f = fopen("/proc/sys/user/max_user_namespaces", "re");
	if (f) {
		if (fscanf(f, "%ld", &userns) != 1)
			userns = 0;
		fclose(f);
	}
	if (userns <= 0) {
		snprintf(why, len, "user namespaces are disabled (user.max_user_namespaces = 0)");
		return false;
	}
	if (drv_find_exe(CT_SLIRP, path, sizeof(path)) < 0) {
		snprintf(why, len, "slirp4netns is not installed (apt-get install slirp4netns)");
		return false;
	}
	return cgroup_usable(why, len);
}

const struct driver_ops driver_container = {
    .name = "container",
    .processes = "processes",
    .guest_setup = true,
    .available = ct_available,
    .create = ct_create,
    .start = ct_start,
    .stop = ct_stop,
    .destroy = ct_destroy,
    .alive = ct_alive,
    .envd_address = ct_envd_address,
    .vnc_path = ct_vnc_path,
    .export_layer = ct_export_layer,
};
