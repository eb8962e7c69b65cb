/*
 * session-disk: each workspace's sessions live on a disk of their own, so
 * that no tenant (through the API) and no computer (writing into its
 * mounted /session) fills the host's disk.
 *
 * sessions/<ws>.ext4 is a sparse file holding an ext4 filesystem of
 * --session-quota-mb, made on first use like a container's disk.ext4
 * (host/README.md, "disk"), attached to a loop device and mounted on
 * sessions/<ws> (nodev, nosuid, discard). Everything under it — the API's
 * session files, a container's bind mount of sessions/<ws>/<session>, a
 * microVM's 9p export of it — is the same filesystem, so a write past the
 * quota fails with ENOSPC wherever it comes from, and the host file never
 * holds more than the quota.
 *
 * Why not project quotas: the state directory's filesystem would have to be
 * XFS with prjquota or ext4 made with the project feature (a choice made
 * when the host's disk is made; plain ext4 here). Why not counting in
 * cubicled: a computer writes into its session without asking cubicled.
 *
 * The mount is in the host's mount table and outlives cubicled, like the
 * computers do: a restarted cubicled finds it mounted and uses it. A clean
 * stop detaches every session mount (core_session_disks_release); the
 * computers still running keep their own mounts (a container's bind mount,
 * QEMU's open directory), so the loop device stays until the last goes
 * (LO_FLAGS_AUTOCLEAR). Mounting the image again while a loop device still
 * backs it reuses that device, so the kernel gives back the same
 * filesystem: two filesystems on one image would corrupt it.
 */
#include "core-internal.h"
#include "drvutil.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/loop.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

static pthread_mutex_t session_disk_lock = PTHREAD_MUTEX_INITIALIZER;

/* Whether dir is the root of a mount other than its parent's. */
static bool session_is_mount(const char *dir)
{
	char parent[700];
	snprintf(parent, sizeof parent, "%s/..", dir);
	struct stat a, b;
	return stat(dir, &a) == 0 && stat(parent, &b) == 0 && a.st_dev != b.st_dev;
}

static bool session_dir_empty(const char *dir)
{
	DIR *d = opendir(dir);
	if (!d)
		return true;
	struct dirent *de;
	bool empty = true;
	while (empty && (de = readdir(d)))
		if (strcmp(de->d_name, ".") != 0 && strcmp(de->d_name, "..") != 0)
			empty = false;
	closedir(d);
	return empty;
}

/* The loop device already backing image (a restart while computers still
 * use the filesystem): an open fd of it, or -1. */
static int session_loop_existing(const char *image, char *dev, size_t len)
{
	char real[4096];
	if (!realpath(image, real))
		return -1;
	DIR *d = opendir("/sys/block");
	if (!d)
		return -1;
	struct dirent *de;
	int fd = -1;
	while (fd < 0 && (de = readdir(d))) {
		if (strncmp(de->d_name, "loop", 4) != 0)
			continue;
		char path[600], back[4200] = "";
		snprintf(path, sizeof path, "/sys/block/%s/loop/backing_file", de->d_name);
		FILE *f = fopen(path, "re");
		if (!f)
			continue;
		bool same = fgets(back, sizeof back, f) != NULL;
		fclose(f);
		back[strcspn(back, "\n")] = 0;
		if (same && strcmp(back, real) == 0) {
			snprintf(dev, len, "/dev/%s", de->d_name);
			fd = open(dev, O_RDWR | O_CLOEXEC);
		}
	}
	closedir(d);
	return fd;
}

/* Attaches image to a free loop device that detaches itself when its last
 * user lets go; an open fd of it, or -1 with e filled. */
static int session_loop_attach(const char *image, char *dev, size_t len, struct err *e)
{
	int file = open(image, O_RDWR | O_CLOEXEC | O_NOFOLLOW);
	if (file < 0)
		return err_set(e, ERR_INTERNAL, "cannot open %s: %s", image, strerror(errno));
	int ctl = open("/dev/loop-control", O_RDWR | O_CLOEXEC);
	if (ctl < 0) {
		close(file);
		return err_set(e, ERR_INTERNAL, "no loop devices: %s", strerror(errno));
	}
	int fd = -1;
	for (int attempt = 0; attempt < 16 && fd < 0; attempt++) {
		int n = ioctl(ctl, LOOP_CTL_GET_FREE);
		if (n < 0)
			break;
		snprintf(dev, len, "/dev/loop%d", n);
		int lfd = open(dev, O_RDWR | O_CLOEXEC);
		if (lfd < 0)
			break;
		struct loop_config cfg;
		memset(&cfg, 0, sizeof cfg);
		cfg.fd = (unsigned)file;
		cfg.info.lo_flags = LO_FLAGS_AUTOCLEAR | LO_FLAGS_DIRECT_IO;
		if (ioctl(lfd, LOOP_CONFIGURE, &cfg) == 0)
			fd = lfd;
		else
			close(lfd);
	}
	int saved = errno;
	close(ctl);
	close(file);
	if (fd < 0)
		return err_set(e, ERR_INTERNAL, "cannot attach %s to a loop device: %s", image,
			       strerror(saved));
	return fd;
}

/* Makes the sparse image with an ext4 filesystem (lazy init: ~0.1 s). */
static int session_mkfs(struct core *c, const char *image, struct err *e)
{
	int fd = open(image, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0 || ftruncate(fd, (off_t)c->cfg.session_quota) < 0) {
		int saved = errno;
		if (fd >= 0) {
			close(fd);
			unlink(image);
		}
		return err_set(e, saved == ENOSPC ? ERR_NO_SPACE : ERR_INTERNAL,
			       "cannot create the session disk %s: %s", image, strerror(saved));
	}
	close(fd);
	char log[800];
	snprintf(log, sizeof log, "%s.mkfs.log", image);
	char *argv[] = {"mkfs.ext4",
			"-q",
			"-F",
			"-m",
			"0",
			"-E",
			"lazy_itable_init=1,lazy_journal_init=1,nodiscard,root_owner=0:0",
			"-L",
			"cubicle-sessions",
			(char *)image,
			NULL};
	if (drv_run(argv, log, "sessions", e) < 0) {
		unlink(image);
		return -1;
	}
	unlink(log);
	return 0;
}

/* Mounts image on dir through a loop device (an existing one first). */
static int session_mount(const char *image, const char *dir, struct err *e)
{
	char dev[300];
	int loop = session_loop_existing(image, dev, sizeof dev);
	if (loop < 0 && (loop = session_loop_attach(image, dev, sizeof dev, e)) < 0)
		return -1;
	int fs = fsopen("ext4", FSOPEN_CLOEXEC);
	int rc = -1;
	if (fs < 0) {
		err_set(e, ERR_INTERNAL, "fsopen ext4: %s", strerror(errno));
		goto out;
	}
	if (fsconfig(fs, FSCONFIG_SET_STRING, "source", dev, 0) < 0 ||
	    fsconfig(fs, FSCONFIG_SET_FLAG, "noinit_itable", NULL, 0) < 0 ||
	    fsconfig(fs, FSCONFIG_SET_FLAG, "discard", NULL, 0) < 0 ||
	    fsconfig(fs, FSCONFIG_CMD_CREATE, NULL, NULL, 0) < 0) {
		err_set(e, ERR_INTERNAL, "cannot mount %s (%s): %s", image, dev, strerror(errno));
		goto out;
	}
	int m = fsmount(fs, FSMOUNT_CLOEXEC, MOUNT_ATTR_NODEV | MOUNT_ATTR_NOSUID);
	if (m < 0) {
		err_set(e, ERR_INTERNAL, "fsmount %s: %s", image, strerror(errno));
		goto out;
	}
	if (move_mount(m, "", AT_FDCWD, dir, MOVE_MOUNT_F_EMPTY_PATH) < 0 || chmod(dir, 0711) < 0)
		err_set(e, ERR_INTERNAL, "cannot mount the session disk on %s: %s", dir,
			strerror(errno));
	else
		rc = 0;
	close(m);
out:
	if (fs >= 0)
		close(fs);
	close(loop); /* the mount holds it now */
	return rc;
}

int core_session_disk(struct core *c, const char *ws, const char *wsdir, struct err *e)
{
	if (mkdir(wsdir, 0711) < 0 && errno != EEXIST)
		return err_set(e, ERR_INTERNAL, "cannot create %s: %s", wsdir, strerror(errno));
	/* A shared sessions directory (--sessions-dir) is mounted on every host
	 * of a cluster: an ext4 image there would be mounted by two hosts at
	 * once, which corrupts it. Its own filesystem's quota applies. */
	if (!c->cfg.session_quota || c->cfg.sessions_dir)
		return 0;
	pthread_mutex_lock(&session_disk_lock);
	int rc = 0;
	char image[700], why[200] = "";
	snprintf(image, sizeof image, "%s/%s.ext4", c->sessions_root, ws);
	if (session_is_mount(wsdir))
		goto out;
	struct stat st;
	bool have_image = lstat(image, &st) == 0 && S_ISREG(st.st_mode);
	if (!have_image && !session_dir_empty(wsdir)) {
		snprintf(why, sizeof why, "its sessions predate session disks");
		goto unlimited;
	}
	if (!have_image) {
		char exe[4096];
		if (access("/dev/loop-control", R_OK | W_OK) < 0) {
			snprintf(why, sizeof why, "no loop devices (/dev/loop-control: %s)",
				 strerror(errno));
			goto unlimited;
		}
		if (drv_find_exe("mkfs.ext4", exe, sizeof exe) < 0) {
			snprintf(why, sizeof why, "mkfs.ext4 is not installed");
			goto unlimited;
		}
		if (session_mkfs(c, image, e) < 0) {
			rc = -1;
			goto out;
		}
	}
	rc = session_mount(image, wsdir, e);
	if (rc == 0)
		fprintf(stderr, "cubicled: sessions of %s: disk %s (%llu MiB)\n", ws, image,
			(unsigned long long)(c->cfg.session_quota >> 20));
	goto out;
unlimited:
	/* Said once per workspace and run: the directory stays as it is. */
	{
		static char said[64][40];
		static int nsaid;
		bool known = false;
		for (int i = 0; i < nsaid; i++)
			known = known || strcmp(said[i], ws) == 0;
		if (!known) {
			fprintf(stderr, "cubicled: sessions of %s: no quota: %s\n", ws, why);
			if (nsaid < 64)
				snprintf(said[nsaid++], sizeof said[0], "%s", ws);
		}
	}
out:
	pthread_mutex_unlock(&session_disk_lock);
	return rc;
}

void core_session_disks_release(struct core *c)
{
	char dir[600];
	snprintf(dir, sizeof dir, "%s", c->sessions_root);
	DIR *d = opendir(dir);
	if (!d)
		return;
	struct dirent *de;
	pthread_mutex_lock(&session_disk_lock);
	while ((de = readdir(d))) {
		if (de->d_name[0] == '.')
			continue;
		char sub[900];
		snprintf(sub, sizeof sub, "%s/%s", dir, de->d_name);
		if (session_is_mount(sub) && umount2(sub, MNT_DETACH | UMOUNT_NOFOLLOW) < 0)
			fprintf(stderr, "cubicled: cannot unmount %s: %s\n", sub, strerror(errno));
	}
	pthread_mutex_unlock(&session_disk_lock);
	closedir(d);
}

void core_session_disk_remove(struct core *c, const char *ws)
{
	char dir[600], image[700];
	snprintf(dir, sizeof dir, "%s/%s", c->sessions_root, ws);
	snprintf(image, sizeof image, "%s/%s.ext4", c->sessions_root, ws);
	pthread_mutex_lock(&session_disk_lock);
	if (session_is_mount(dir) && umount2(dir, MNT_DETACH | UMOUNT_NOFOLLOW) < 0)
		fprintf(stderr, "cubicled: cannot unmount %s: %s\n", dir, strerror(errno));
	if (unlink(image) < 0 && errno != ENOENT)
		fprintf(stderr, "cubicled: cannot remove %s: %s\n", image, strerror(errno));
	pthread_mutex_unlock(&session_disk_lock);
}
