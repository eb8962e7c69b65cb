/*
 * procview: the FUSE server of the size files (see procview.h), on libfuse's
 * low-level API: one session per mounted file, all four polled by one
 * thread. Each open takes a snapshot of the file's text (so a reader that
 * reads in pieces sees one consistent file), served with direct I/O (the
 * size stat reports is 0, like /proc's) and freed at release.
 */
#define FUSE_USE_VERSION 34
#include "procview.h"

#include <errno.h>
#include <fcntl.h>
#include <fuse_lowlevel.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "procview-text.h"

#define PROCVIEW_FILES	     4
#define PROCVIEW_SOURCE_MAX  (4u << 20) /* a host file we read: 4 MiB at most */
#define PROCVIEW_OPEN_MAX    1024	/* snapshots alive at once */
#define PROCVIEW_MEMINFO_CAP 4096

enum procview_kind { PROCVIEW_MEMINFO, PROCVIEW_CPUINFO, PROCVIEW_STAT, PROCVIEW_ONLINE };

struct procview {
	struct procview_opts o;
	int cpus[CPU_SETSIZE]; /* host CPU numbers, ascending */
	int ncpus;
	uid_t owner; /* the host uid of the guest's root: the files' owner */
	char *cpuinfo, *online;
	size_t cpuinfo_len, online_len;
	int open; /* snapshots alive (the server thread only) */
	struct fuse_session *se[PROCVIEW_FILES];
};

/* What one session serves. */
struct procview_file {
	struct procview *s;
	enum procview_kind kind;
};

struct procview_snapshot {
	size_t len;
	char data[];
};

static struct procview procview_the;
static struct procview_file procview_files[PROCVIEW_FILES];

/* ---- sources ----------------------------------------------------------------------- */

/* The whole of fd from offset 0 (proc and cgroup files make their text anew
 * at each read from 0), NUL-terminated, malloc'd; NULL on failure. */
static char *procview_slurp(int fd, size_t *len_out)
{
	size_t cap = 16384, len = 0;
	char *buf = malloc(cap);
	if (!buf)
		return NULL;
	for (;;) {
		if (len + 1 >= cap) {
			if (cap >= PROCVIEW_SOURCE_MAX) {
				free(buf);
				return NULL;
			}
			char *nb = realloc(buf, cap * 2);
			if (!nb) {
				free(buf);
				return NULL;
			}
			buf = nb;
			cap *= 2;
		}
		ssize_t n = pread(fd, buf + len, cap - len - 1, (off_t)len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			free(buf);
			return NULL;
		}
		if (n == 0)
			break;
		len += (size_t)n;
	}
	buf[len] = '\0';
	if (len_out)
		*len_out = len;
	return buf;
}

/* Text of a fixed-size generator into a new snapshot. */
static struct procview_snapshot *procview_snapshot_new(size_t cap)
{
	struct procview_snapshot *sn = malloc(sizeof *sn + cap);
	if (sn)
		sn->len = 0;
	return sn;
}

/* A snapshot of the file's text now; NULL and *err when it cannot be made. */
static struct procview_snapshot *procview_make(struct procview *s, enum procview_kind kind,
					       int *err)
{
	struct procview_snapshot *sn = NULL;
	*err = EIO;
	switch (kind) {
	case PROCVIEW_MEMINFO: {
		char *usage = procview_slurp(s->o.memory_usage, NULL);
		char *stat = procview_slurp(s->o.memory_stat, NULL);
		struct procview_mem m = {0};
		m.limit = (uint64_t)s->o.memory_bytes;
		if (usage && stat) {
			m.usage = strtoull(usage, NULL, 10);
			procview_memstat_parse(s->o.cgroup_version, stat, &m);
			sn = procview_snapshot_new(PROCVIEW_MEMINFO_CAP);
			int n = sn ? procview_meminfo(&m, sn->data, PROCVIEW_MEMINFO_CAP) : -1;
			if (sn && n >= 0)
				sn->len = (size_t)n;
			else if (sn) {
				free(sn);
				sn = NULL;
			}
		}
		free(usage);
		free(stat);
		break;
	}
	case PROCVIEW_STAT: {
		size_t len;
		char *host = procview_slurp(s->o.proc_stat, &len);
		if (host) {
			sn = procview_snapshot_new(len + 64);
			int n =
			    sn ? procview_stat(host, s->cpus, s->ncpus, sn->data, len + 64) : -1;
			if (sn && n >= 0)
				sn->len = (size_t)n;
			else if (sn) {
				free(sn);
				sn = NULL;
			}
		}
		free(host);
		break;
	}
	case PROCVIEW_CPUINFO:
	case PROCVIEW_ONLINE: {
		const char *text = kind == PROCVIEW_CPUINFO ? s->cpuinfo : s->online;
		size_t len = kind == PROCVIEW_CPUINFO ? s->cpuinfo_len : s->online_len;
		sn = procview_snapshot_new(len);
		if (sn) {
			memcpy(sn->data, text, len);
			sn->len = len;
		}
		break;
	}
	}
	if (!sn && *err == EIO && errno == ENOMEM)
		*err = ENOMEM;
	return sn;
}

/* ---- the file system ------------------------------------------------------------- */

static void procview_init(void *userdata, struct fuse_conn_info *conn)
{
	(void)userdata;
	/* Plain reads and writes on the connection: no pipes, no splicing. */
	conn->want &= ~(FUSE_CAP_SPLICE_READ | FUSE_CAP_SPLICE_WRITE | FUSE_CAP_SPLICE_MOVE);
}

static void procview_getattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct procview_file *f = fuse_req_userdata(req);
	(void)fi;
	if (ino != FUSE_ROOT_ID) {
		fuse_reply_err(req, ENOENT);
		return;
	}
	struct stat st;
	memset(&st, 0, sizeof st);
	st.st_ino = FUSE_ROOT_ID;
	st.st_mode = S_IFREG | 0444;
	st.st_nlink = 1;
	st.st_uid = f->s->owner;
	st.st_gid = f->s->owner;
	st.st_blksize = 4096;
	fuse_reply_attr(req, &st, 1.0);
}

static void procview_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct procview_file *f = fuse_req_userdata(req);
	if (ino != FUSE_ROOT_ID) {
		fuse_reply_err(req, ENOENT);
		return;
	}
	if ((fi->flags & O_ACCMODE) != O_RDONLY) {
		fuse_reply_err(req, EACCES);
		return;
	}
	if (f->s->open >= PROCVIEW_OPEN_MAX) {
		fuse_reply_err(req, ENFILE);
		return;
	}
	int err;
	struct procview_snapshot *sn = procview_make(f->s, f->kind, &err);
	if (!sn) {
		fuse_reply_err(req, err);
		return;
	}
	fi->fh = (uint64_t)(uintptr_t)sn;
	fi->direct_io = 1;
	fi->keep_cache = 0;
	if (fuse_reply_open(req, fi) == -ENOENT) {
		free(sn); /* the opener was interrupted: no release will come */
		return;
	}
	f->s->open++;
}

static void procview_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
			  struct fuse_file_info *fi)
{
	(void)ino;
	const struct procview_snapshot *sn = (const struct procview_snapshot *)(uintptr_t)fi->fh;
	if (off < 0 || (uint64_t)off >= sn->len) {
		fuse_reply_buf(req, NULL, 0);
		return;
	}
	size_t n = sn->len - (size_t)off;
	fuse_reply_buf(req, sn->data + off, n < size ? n : size);
}

static void procview_release(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct procview_file *f = fuse_req_userdata(req);
	(void)ino;
	free((void *)(uintptr_t)fi->fh);
	f->s->open--;
	fuse_reply_err(req, 0);
}

static void procview_statfs(fuse_req_t req, fuse_ino_t ino)
{
	(void)ino;
	struct statvfs sv;
	memset(&sv, 0, sizeof sv);
	sv.f_bsize = 4096;
	sv.f_namemax = 255;
	fuse_reply_statfs(req, &sv);
}

static const struct fuse_lowlevel_ops procview_ops = {
    .init = procview_init,
    .getattr = procview_getattr,
    .open = procview_open,
    .read = procview_read,
    .release = procview_release,
    .statfs = procview_statfs,
};

/* ---- the thread --------------------------------------------------------------------- */

static void *procview_main(void *arg)
{
	struct procview *s = arg;
	struct pollfd pfd[PROCVIEW_FILES];
	struct fuse_buf buf[PROCVIEW_FILES];
	memset(buf, 0, sizeof buf);
	int live = PROCVIEW_FILES;
	for (int i = 0; i < PROCVIEW_FILES; i++)
		pfd[i] = (struct pollfd){fuse_session_fd(s->se[i]), POLLIN, 0};
	while (live > 0) {
		if (poll(pfd, PROCVIEW_FILES, -1) < 0) {
			if (errno == EINTR)
				continue;
			fprintf(stderr, "envd: procview: poll: %s\n", strerror(errno));
			break;
		}
		for (int i = 0; i < PROCVIEW_FILES; i++) {
			if (pfd[i].fd < 0 || !pfd[i].revents)
				continue;
			int r = fuse_session_receive_buf(s->se[i], &buf[i]);
			if (r == -EINTR || r == -EAGAIN)
				continue;
			if (r <= 0 || fuse_session_exited(s->se[i])) {
				/* Unmounted: the computer is ending. */
				pfd[i].fd = -1;
				live--;
				continue;
			}
			fuse_session_process_buf(s->se[i], &buf[i]);
		}
	}
	return NULL;
}

/* ---- setup --------------------------------------------------------------------------- */

static int procview_fd(const char *v, int *out)
{
	char *end;
	errno = 0;
	long fd = strtol(v, &end, 10);
	if (errno || *end || fd < 3 || fd > 1023 || fcntl((int)fd, F_GETFD) < 0)
		return -1;
	*out = (int)fd;
	return 0;
}

int procview_parse(const char *spec, struct procview_opts *o, struct err *e)
{
	memset(o, 0, sizeof *o);
	struct {
		const char *key;
		int *fd;
	} fds[] = {
	    {"meminfo", &o->fuse_meminfo},
	    {"cpuinfo", &o->fuse_cpuinfo},
	    {"stat", &o->fuse_stat},
	    {"online", &o->fuse_online},
	    {"proc-stat", &o->proc_stat},
	    {"proc-cpuinfo", &o->proc_cpuinfo},
	    {"memory-usage", &o->memory_usage},
	    {"memory-stat", &o->memory_stat},
	};
	const size_t nfds = sizeof fds / sizeof fds[0];
	unsigned seen = 0;
	char *copy = strdup(spec), *save = NULL;
	if (!copy)
		return err_set(e, ERR_INTERNAL, "out of memory");
	for (char *kv = strtok_r(copy, ",", &save); kv; kv = strtok_r(NULL, ",", &save)) {
		char *eq = strchr(kv, '=');
		if (!eq) {
			err_set(e, ERR_INVALID, "--sizes: '%s' is not key=value", kv);
			goto fail;
		}
		*eq = '\0';
		const char *v = eq + 1;
		if (strcmp(kv, "memory") == 0) {
			char *end;
			errno = 0;
			o->memory_bytes = strtoll(v, &end, 10);
			if (errno || *end || o->memory_bytes < (1LL << 20)) {
				err_set(e, ERR_INVALID, "--sizes: memory=%s is not a size in bytes",
					v);
				goto fail;
			}
			seen |= 1u << nfds;
			continue;
		}
		if (strcmp(kv, "cgroup") == 0) {
			if (strcmp(v, "1") != 0 && strcmp(v, "2") != 0) {
				err_set(e, ERR_INVALID, "--sizes: cgroup=%s: 1 or 2", v);
				goto fail;
			}
			o->cgroup_version = v[0] - '0';
			seen |= 1u << (nfds + 1);
			continue;
		}
		size_t i = 0;
		while (i < nfds && strcmp(kv, fds[i].key) != 0)
			i++;
		if (i == nfds) {
			err_set(e, ERR_INVALID, "--sizes: unknown key '%s'", kv);
			goto fail;
		}
		if (procview_fd(v, fds[i].fd) < 0) {
			err_set(e, ERR_INVALID, "--sizes: %s=%s is not an open descriptor", kv, v);
			goto fail;
		}
		seen |= 1u << i;
	}
	free(copy);
	if (seen != (1u << (nfds + 2)) - 1)
		return err_set(e, ERR_INVALID,
			       "--sizes needs memory, cgroup, meminfo, cpuinfo, stat, online, "
			       "proc-stat, proc-cpuinfo, memory-usage and memory-stat");
	for (size_t i = 0; i < nfds; i++)
		fcntl(*fds[i].fd, F_SETFD, FD_CLOEXEC);
	return 0;
fail:
	free(copy);
	return -1;
}

/* The host uid of this user namespace's root (its uid_map's first line), so
 * the files look like root's in the guest; 0 when not in one. */
static uid_t procview_owner(void)
{
	unsigned inside = 1, outside = 0;
	FILE *f = fopen("/proc/self/uid_map", "re");
	if (f) {
		if (fscanf(f, "%u %u", &inside, &outside) != 2 || inside != 0)
			outside = 0;
		fclose(f);
	}
	return (uid_t)outside;
}

int procview_start(const struct procview_opts *o, struct err *e)
{
	struct procview *s = &procview_the;
	s->o = *o;
	s->owner = procview_owner();
	cpu_set_t set;
	CPU_ZERO(&set);
	if (sched_getaffinity(0, sizeof set, &set) < 0)
		return err_set(e, ERR_INTERNAL, "procview: sched_getaffinity: %s", strerror(errno));
	for (int c = 0; c < CPU_SETSIZE; c++)
		if (CPU_ISSET(c, &set))
			s->cpus[s->ncpus++] = c;
	char *host = procview_slurp(o->proc_cpuinfo, NULL);
	size_t cap = host ? strlen(host) + 64 : 0;
	s->cpuinfo = host ? malloc(cap) : NULL;
	int n = s->cpuinfo ? procview_cpuinfo(host, s->cpus, s->ncpus, s->cpuinfo, cap) : -1;
	free(host);
	if (n < 0)
		return err_set(e, ERR_INTERNAL, "procview: cannot read the host's /proc/cpuinfo");
	s->cpuinfo_len = (size_t)n;
	s->online = malloc(32);
	n = s->online ? procview_online(s->ncpus, s->online, 32) : -1;
	if (n < 0)
		return err_set(e, ERR_INTERNAL, "out of memory");
	s->online_len = (size_t)n;

	const int fds[PROCVIEW_FILES] = {o->fuse_meminfo, o->fuse_cpuinfo, o->fuse_stat,
					 o->fuse_online};
	for (int i = 0; i < PROCVIEW_FILES; i++) {
		procview_files[i] = (struct procview_file){s, (enum procview_kind)i};
		char *argv[] = {"envd-procview", NULL};
		struct fuse_args args = FUSE_ARGS_INIT(1, argv);
		s->se[i] =
		    fuse_session_new(&args, &procview_ops, sizeof procview_ops, &procview_files[i]);
		char mnt[32];
		snprintf(mnt, sizeof mnt, "/dev/fd/%d", fds[i]);
		if (!s->se[i] || fuse_session_mount(s->se[i], mnt) != 0)
			return err_set(e, ERR_INTERNAL,
				       "procview: cannot serve the FUSE connection %s", mnt);
	}
	pthread_t t;
	int rc = pthread_create(&t, NULL, procview_main, s);
	if (rc)
		return err_set(e, ERR_INTERNAL, "procview: thread: %s", strerror(rc));
	pthread_detach(t);
	return 0;
}
