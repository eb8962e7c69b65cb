/*
 * drvutil: see drvutil.h.
 */
#include "drvutil.h"
#include "clock.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <linux/close_range.h>
#include <linux/loop.h>
#include <sys/ioctl.h>
#include <sys/mount.h>

long long drv_state_int(const json_t *state, const char *key, long long def)
{
	json_t *v = state ? json_object_get(state, key) : NULL;
	return json_is_integer(v) ? (long long)json_integer_value(v) : def;
}

void drv_state_set_int(json_t *state, const char *key, long long v)
{
	if (state)
		json_object_set_new(state, key, json_integer(v));
}

const char *drv_state_str(const json_t *state, const char *key, const char *def)
{
	const char *s = state ? json_string_value(json_object_get(state, key)) : NULL;
	return s ? s : def;
}

void drv_state_del(json_t *state, const char *key)
{
	if (state)
		json_object_del(state, key);
}

char *const drv_child_env[] = {"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
			       "LANG=C.UTF-8", NULL};

int drv_child_fds(int keep)
{
	if (keep < 3)
		return (int)syscall(SYS_close_range, 3U, ~0U, 0U);
	if (keep > 3 && syscall(SYS_close_range, 3U, (unsigned)keep - 1, 0U) < 0)
		return -1;
	if (fcntl(keep, F_SETFD, 0) < 0)
		return -1;
	return (int)syscall(SYS_close_range, (unsigned)keep + 1, ~0U, 0U);
}

int drv_run(char *const argv[], const char *errfile, const char *who, struct err *e)
{
	char exe[4096];
	if (strchr(argv[0], '/'))
		snprintf(exe, sizeof exe, "%s", argv[0]);
	else if (drv_find_exe(argv[0], exe, sizeof exe) < 0)
		return err_set(e, ERR_UNAVAILABLE, "%s: %s is not installed", who, argv[0]);
	pid_t pid = fork();
	if (pid < 0)
		return err_set(e, ERR_INTERNAL, "%s: fork: %s", who, strerror(errno));
	if (pid == 0) {
		/* errfile is replaced only when it is a file (or a symlink, never
		 * followed): a device or a FIFO named by mistake (/dev/null) is
		 * left alone and stderr goes nowhere. */
		struct stat st;
		int fd = -1;
		if (lstat(errfile, &st) < 0 || S_ISREG(st.st_mode) || S_ISLNK(st.st_mode)) {
			unlink(errfile);
			fd = open(errfile, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
				  0600);
		}
		int null = open("/dev/null", O_RDWR | O_CLOEXEC);
		if (fd >= 0)
			dup2(fd, 2);
		if (null >= 0) {
			dup2(null, 0);
			dup2(null, 1);
		}
		if (drv_child_fds(-1) < 0)
			_exit(126);
		execve(exe, argv, drv_child_env);
		_exit(127);
	}
	int status;
	while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
		;
	if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
		return 0;
	char tail[300];
	drv_log_tail(errfile, tail, sizeof tail);
	return err_set(e, ERR_UNAVAILABLE, "%s: %s failed: %s", who, argv[0],
		       tail[0] ? tail : "no message");
}

int drv_find_exe(const char *name, char *out, size_t len)
{
	const char *path = getenv("PATH");
	char buf[4096];
	snprintf(buf, sizeof(buf), "%s:/usr/bin:/usr/sbin:/bin:/sbin", path ? path : "");
	char *save = NULL;
	for (char *d = strtok_r(buf, ":", &save); d; d = strtok_r(NULL, ":", &save)) {
		if (!*d)
			continue;
		snprintf(out, len, "%s/%s", d, name);
		if (access(out, X_OK) == 0)
			return 0;
	}
	return -1;
}

void drv_log_tail(const char *path, char *out, size_t len)
{
	out[0] = '\0';
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return;
	char buf[2048];
	off_t size = lseek(fd, 0, SEEK_END);
	off_t from = size > (off_t)len - 1 ? size - (off_t)len + 1 : 0;
	ssize_t n = pread(fd, buf, len - 1 < sizeof(buf) - 1 ? len - 1 : sizeof(buf) - 1, from);
	close(fd);
	if (n <= 0)
		return;
	buf[n] = '\0';
	while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == ' ' || buf[n - 1] == '\r'))
		buf[--n] = '\0';
	for (ssize_t i = 0; i < n; i++)
		if (buf[i] == '\n')
			buf[i] = '|';
		else if ((unsigned char)buf[i] < 0x20)
			buf[i] = ' ';
	memcpy(out, buf, (size_t)n + 1); /* n < len: read at most len - 1 bytes */
}

/* Attaches file to a free loop device that detaches itself when its last
 * user (the mount) lets go, so no crash can leak it. Direct I/O: the
 * guest's page cache is the only cache of its disk (without it the host's
 * page cache keeps a second copy, and a guest writing 1 GiB under xs's
 * 512 MiB took 4 s instead of 0.8 s). The kernel falls back to buffered I/O
 * where the host filesystem cannot do direct I/O. */
static int drv_loop_attach(int file, char *dev, size_t len, char *why, size_t wlen)
{
	int ctl = open("/dev/loop-control", O_RDWR | O_CLOEXEC);
	if (ctl < 0) {
		snprintf(why, wlen, "open /dev/loop-control: %s", strerror(errno));
		return -1;
	}
	for (int attempt = 0; attempt < 16; attempt++) {
		int n = ioctl(ctl, LOOP_CTL_GET_FREE);
		if (n < 0) {
			snprintf(why, wlen, "find a free loop device: %s", strerror(errno));
			break;
		}
		snprintf(dev, len, "/dev/loop%d", n);
		int fd = open(dev, O_RDWR | O_CLOEXEC);
		if (fd < 0) {
			snprintf(why, wlen, "open %s: %s", dev, strerror(errno));
			break;
		}
		struct loop_config cfg;
		memset(&cfg, 0, sizeof(cfg));
		cfg.fd = (unsigned)file;
		cfg.info.lo_flags = LO_FLAGS_AUTOCLEAR | LO_FLAGS_DIRECT_IO;
		if (ioctl(fd, LOOP_CONFIGURE, &cfg) == 0) {
			close(ctl);
			return fd;
		}
		int saved = errno;
		close(fd);
		if (saved != EBUSY) { /* EBUSY: another process took it first */
			snprintf(why, wlen, "attach the disk to %s: %s", dev, strerror(saved));
			break;
		}
		snprintf(why, wlen, "no loop device stayed free long enough for the disk");
	}
	close(ctl);
	return -1;
}

int drv_disk_mount(const char *image, bool read_only, char *why, size_t len)
{
	int file = open(image, O_RDWR | O_CLOEXEC | O_NOFOLLOW);
	if (file < 0) {
		snprintf(why, len, "open the disk %s: %s", image, strerror(errno));
		return -1;
	}
	char dev[32];
	int loop = drv_loop_attach(file, dev, sizeof(dev), why, len);
	close(file);
	if (loop < 0)
		return -1;
	int fs = fsopen("ext4", FSOPEN_CLOEXEC);
	if (fs < 0) {
		snprintf(why, len, "fsopen ext4: %s", strerror(errno));
		close(loop);
		return -1;
	}
	/* noinit_itable: no background zeroing of the inode tables mkfs left
	 * unwritten (it would grow the host file by ~16 MiB per GiB);
	 * discard: files the guest deletes give their space back to the host. */
	if (fsconfig(fs, FSCONFIG_SET_STRING, "source", dev, 0) < 0 ||
	    fsconfig(fs, FSCONFIG_SET_FLAG, "noinit_itable", NULL, 0) < 0 ||
	    fsconfig(fs, FSCONFIG_SET_FLAG, "discard", NULL, 0) < 0 ||
	    (read_only && fsconfig(fs, FSCONFIG_SET_FLAG, "ro", NULL, 0) < 0) ||
	    fsconfig(fs, FSCONFIG_CMD_CREATE, NULL, NULL, 0) < 0) {
		int saved = errno;
		char log[256] = "";
		ssize_t n = read(fs, log, sizeof(log) - 1);
		log[n > 0 ? n : 0] = '\0';
		snprintf(why, len, "mount the disk %s (%s): %s%s%s", image, dev, strerror(saved),
			 log[0] ? ": " : "", log);
		close(fs);
		close(loop);
		return -1;
	}
	unsigned attrs = MOUNT_ATTR_NODEV | MOUNT_ATTR_NOSUID;
	if (read_only)
		attrs |= MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOEXEC;
	int m = fsmount(fs, FSMOUNT_CLOEXEC, attrs);
	int saved = errno;
	close(fs);
	close(loop); /* the mount holds it now */
	if (m < 0)
		snprintf(why, len, "fsmount the disk %s: %s", image, strerror(saved));
	return m;
}

static int drv_rm_one(const char *path, const struct stat *st, int flag, struct FTW *f)
{
	(void)st;
	if (f->level == 0)
		return 0; /* the directory itself stays */
	if (flag == FTW_DP)
		return rmdir(path) < 0 && errno != ENOENT ? -1 : 0;
	return unlink(path) < 0 && errno != ENOENT ? -1 : 0;
}

int drv_rm_contents(const char *dir)
{
	struct stat st;
	if (stat(dir, &st) < 0)
		return errno == ENOENT ? 0 : -1;
	return nftw(dir, drv_rm_one, 16, FTW_DEPTH | FTW_PHYS | FTW_MOUNT);
}

int drv_check_computer(const struct driver_computer *c, const char *who, struct err *e)
{
	if (!c->id || !c->id[0] || strchr(c->id, '/') || strcmp(c->id, ".") == 0 ||
	    strcmp(c->id, "..") == 0)
		return err_set(e, ERR_INVALID, "%s: the computer id must be a file name", who);
	if (!c->dir || c->dir[0] != '/')
		return err_set(e, ERR_INVALID, "%s: the computer directory must be absolute", who);
	if (!c->image_dir || !c->image_dir[0])
		return err_set(e, ERR_INVALID, "%s: no image directory given", who);
	if (!c->state || !json_is_object(c->state))
		return err_set(e, ERR_INTERNAL, "%s: the computer has no state object", who);
	return 0;
}

int drv_proc_stat(pid_t pid, unsigned long long *start, char *state)
{
	char path[64], buf[1024];
	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	ssize_t n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return -1;
	buf[n] = '\0';
	/* The command name may hold spaces and parentheses: fields restart
	 * after the last ')'. Field 3 is the state, field 22 the start time. */
	char *p = strrchr(buf, ')');
	if (!p || p[1] != ' ')
		return -1;
	p += 2;
	if (state)
		*state = *p;
	for (int field = 3; field < 22; field++) {
		p = strchr(p, ' ');
		if (!p)
			return -1;
		p++;
	}
	if (start)
		*start = strtoull(p, NULL, 10);
	return 0;
}

bool drv_proc_alive(pid_t pid, unsigned long long start)
{
	unsigned long long s;
	char st;
	if (pid <= 0 || drv_proc_stat(pid, &s, &st) < 0)
		return false;
	return s == start && st != 'Z' && st != 'X';
}

bool drv_wait_gone(pid_t pid, unsigned long long start, int timeout_ms)
{
	long long deadline = clock_now_ms() + timeout_ms;
	for (;;) {
		unsigned long long s;
		char st;
		if (drv_proc_stat(pid, &s, &st) < 0 || s != start)
			return true;
		if (st == 'Z' || st == 'X') {
			/* Only this very process: the pid is ours to reap only
			 * while it still has the recorded start time. */
			waitpid(pid, NULL, WNOHANG);
			return true;
		}
		if (clock_now_ms() >= deadline)
			return false;
		clock_sleep_ms(10);
	}
}
