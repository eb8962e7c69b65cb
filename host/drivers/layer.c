/*
 * layer: see layer.h. Two walks over directory descriptors: layer_copy
 * (an overlay upper dir → a sanitized layer) and layer_apply (a layer →
 * onto a hard-linked image tree). Neither follows a symlink or leaves the
 * tree it was given: every path below the roots is one name at a time,
 * opened with O_NOFOLLOW relative to its parent's descriptor.
 */
#include "layer.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/openat2.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>
#include <unistd.h>

#define LAYER_OPAQUE	"user.overlay.opaque"
#define LAYER_UID_RANGE 65536u
#define LAYER_CHUNK	(1u << 20)

/* A regular file seen with more than one link: where its first copy went,
 * so the others become links to it again (git's helpers are ~150 links to
 * one binary). Open addressing on the inode number. */
struct layer_link {
	ino_t ino;
	char *rel; /* path below the destination's root */
};

struct layer_walk {
	int root;      /* the destination's root */
	unsigned base; /* layer_copy: host uid of the guest's root */
	uint64_t max;  /* layer_copy: bytes allowed, 0 = any */
	struct layer_stats *st;
	struct err *e;
	char rel[PATH_MAX]; /* the directory being walked, below the roots ("" at the top) */
	struct layer_link *links;
	size_t nlinks, caplinks;
	char *buf; /* LAYER_CHUNK bytes for copying */
};

/* Fills e with what failed, on which path, and returns -1. */
static int layer_fail(struct layer_walk *w, const char *what, const char *name, int err)
{
	return err_set(w->e, err == ENOSPC ? ERR_NO_SPACE : ERR_INTERNAL, "layer: %s %s%s%s: %s",
		       what, w->rel, w->rel[0] ? "/" : "", name, strerror(err));
}

/* Appends name to w->rel; restored by layer_leave. -1 when too long. */
static int layer_enter(struct layer_walk *w, const char *name, size_t *saved)
{
	*saved = strlen(w->rel);
	int n = snprintf(w->rel + *saved, sizeof w->rel - *saved, "%s%s", *saved ? "/" : "", name);
	if (n < 0 || (size_t)n >= sizeof w->rel - *saved) {
		w->rel[*saved] = 0;
		return err_set(w->e, ERR_TOO_LARGE, "layer: a path is longer than %d bytes",
			       PATH_MAX - 1);
	}
	return 0;
}

static void layer_leave(struct layer_walk *w, size_t saved)
{
	w->rel[saved] = 0;
}

static int layer_count(struct layer_walk *w)
{
	if (++w->st->entries > LAYER_MAX_ENTRIES)
		return err_set(w->e, ERR_TOO_LARGE, "layer: more than %d files and directories",
			       LAYER_MAX_ENTRIES);
	return 0;
}

static bool layer_is_whiteout(const struct stat *st)
{
	return S_ISCHR(st->st_mode) && st->st_rdev == makedev(0, 0);
}

/* What a layer keeps of a mode: permissions and the sticky bit, never
 * setuid or setgid. */
static mode_t layer_mode(mode_t m)
{
	return m & 01777;
}

/* ---- hard links ------------------------------------------------------------------ */

static struct layer_link *layer_link_slot(struct layer_walk *w, ino_t ino)
{
	size_t i = (size_t)(ino * 0x9E3779B97F4A7C15ull) & (w->caplinks - 1);
	while (w->links[i].rel && w->links[i].ino != ino)
		i = (i + 1) & (w->caplinks - 1);
	return &w->links[i];
}

/* The path of ino's first copy, or NULL (and remembers rel as it). */
static const char *layer_link_seen(struct layer_walk *w, ino_t ino, const char *rel)
{
	if (w->nlinks * 2 >= w->caplinks) {
		size_t cap = w->caplinks ? w->caplinks * 2 : 256;
		struct layer_link *old = w->links;
		size_t oldcap = w->caplinks;
		w->links = calloc(cap, sizeof *w->links);
		if (!w->links) {
			w->links = old;
			return NULL; /* out of memory: it is copied again */
		}
		w->caplinks = cap;
		for (size_t i = 0; i < oldcap; i++)
			if (old[i].rel)
				*layer_link_slot(w, old[i].ino) = old[i];
		free(old);
	}
	struct layer_link *l = layer_link_slot(w, ino);
	if (l->rel)
		return l->rel;
	l->rel = strdup(rel);
	if (l->rel) {
		l->ino = ino;
		w->nlinks++;
	}
	return NULL;
}

static void layer_links_free(struct layer_walk *w)
{
	for (size_t i = 0; i < w->caplinks; i++)
		free(w->links[i].rel);
	free(w->links);
}

/* ---- removing and copying one entry ----------------------------------------------- */

static int layer_rm_contents(int dir, int depth);

/* Removes name in dir, whatever it is (a directory with everything in it);
 * a missing name is fine. */
static int layer_rm_at(int dir, const char *name, int depth)
{
	struct stat st;
	if (fstatat(dir, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
		return errno == ENOENT ? 0 : -1;
	if (!S_ISDIR(st.st_mode))
		return unlinkat(dir, name, 0) < 0 && errno != ENOENT ? -1 : 0;
	if (depth > LAYER_MAX_DEPTH) {
		errno = ELOOP;
		return -1;
	}
	int sub = openat(dir, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (sub < 0)
		return -1;
	int rc = layer_rm_contents(sub, depth + 1);
	close(sub);
	if (rc < 0)
		return -1;
	return unlinkat(dir, name, AT_REMOVEDIR) < 0 && errno != ENOENT ? -1 : 0;
}

static int layer_rm_contents(int dir, int depth)
{
	int fd = dup(dir);
	DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
	if (!d) {
		if (fd >= 0)
			close(fd);
		return -1;
	}
	struct dirent *de;
	int rc = 0;
	while (rc == 0 && (errno = 0, de = readdir(d)))
		if (strcmp(de->d_name, ".") != 0 && strcmp(de->d_name, "..") != 0)
			rc = layer_rm_at(dir, de->d_name, depth);
	if (rc == 0 && errno)
		rc = -1;
	closedir(d);
	return rc;
}

/* Owner, permissions and times of a copied entry, from st (uid/gid already
 * as they are to be stored). */
static int layer_meta(int dir, const char *name, int fd, const struct stat *st, uid_t uid,
		      gid_t gid)
{
	struct timespec t[2] = {st->st_atim, st->st_mtim};
	if (fd >= 0)
		return fchown(fd, uid, gid) < 0 || fchmod(fd, layer_mode(st->st_mode)) < 0 ||
			       futimens(fd, t) < 0
			   ? -1
			   : 0;
	/* A symlink: no mode of its own. */
	return fchownat(dir, name, uid, gid, AT_SYMLINK_NOFOLLOW) < 0 ||
		       utimensat(dir, name, t, AT_SYMLINK_NOFOLLOW) < 0
		   ? -1
		   : 0;
}

/* Copies the bytes of src into dst, counting them against the budget. */
static int layer_copy_bytes(struct layer_walk *w, int src, int dst, const char *name)
{
	for (;;) {
		ssize_t n = copy_file_range(src, NULL, dst, NULL, LAYER_CHUNK, 0);
		if (n < 0 &&
		    (errno == EXDEV || errno == EINVAL || errno == ENOSYS || errno == EOPNOTSUPP))
			break; /* across filesystems: read and write */
		if (n < 0)
			return layer_fail(w, "copy", name, errno);
		if (n == 0)
			return 0;
		w->st->bytes += (uint64_t)n;
		if (w->max && w->st->bytes > w->max)
			goto too_large;
	}
	for (;;) {
		ssize_t n = read(src, w->buf, LAYER_CHUNK);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return layer_fail(w, "read", name, errno);
		if (n == 0)
			return 0;
		w->st->bytes += (uint64_t)n;
		if (w->max && w->st->bytes > w->max)
			goto too_large;
		for (ssize_t off = 0; off < n;) {
			ssize_t k = write(dst, w->buf + off, (size_t)(n - off));
			if (k < 0 && errno == EINTR)
				continue;
			if (k < 0)
				return layer_fail(w, "write", name, errno);
			off += k;
		}
	}
too_large:
	return err_set(w->e, ERR_TOO_LARGE,
		       "the layer holds more than %llu MiB of files (at %s/%s)",
		       (unsigned long long)(w->max >> 20), w->rel, name);
}

/* A regular file of src_dir into dst_dir: hard-linked to an earlier copy of
 * the same inode, else copied. */
static int layer_copy_file(struct layer_walk *w, int src_dir, int dst_dir, const char *name,
			   const struct stat *st, uid_t uid, gid_t gid)
{
	if (st->st_nlink > 1) {
		size_t saved;
		if (layer_enter(w, name, &saved) < 0)
			return -1;
		const char *first = layer_link_seen(w, st->st_ino, w->rel);
		layer_leave(w, saved);
		if (first && linkat(w->root, first, dst_dir, name, 0) == 0)
			return 0;
	}
	int src = openat(src_dir, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
	if (src < 0)
		return layer_fail(w, "open", name, errno);
	struct stat now;
	if (fstat(src, &now) < 0 || !S_ISREG(now.st_mode)) {
		close(src);
		return err_set(w->e, ERR_CONFLICT, "layer: %s/%s changed while it was copied",
			       w->rel, name);
	}
	int dst = openat(dst_dir, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (dst < 0) {
		close(src);
		return layer_fail(w, "create", name, errno);
	}
	int rc = layer_copy_bytes(w, src, dst, name);
	if (rc == 0 && layer_meta(dst_dir, name, dst, st, uid, gid) < 0)
		rc = layer_fail(w, "set the owner of", name, errno);
	close(src);
	if (close(dst) < 0 && rc == 0)
		rc = layer_fail(w, "write", name, errno);
	return rc;
}

static int layer_copy_symlink(struct layer_walk *w, int src_dir, int dst_dir, const char *name,
			      const struct stat *st, uid_t uid, gid_t gid)
{
	char target[PATH_MAX];
	ssize_t n = readlinkat(src_dir, name, target, sizeof target - 1);
	if (n < 0)
		return layer_fail(w, "read the link", name, errno);
	target[n] = 0;
	if (symlinkat(target, dst_dir, name) < 0)
		return layer_fail(w, "create the link", name, errno);
	if (layer_meta(dst_dir, name, -1, st, uid, gid) < 0)
		return layer_fail(w, "set the owner of", name, errno);
	return 0;
}

/* ---- layer_copy ------------------------------------------------------------------- */

static uid_t layer_guest_id(const struct layer_walk *w, unsigned host)
{
	return host >= w->base && host - w->base < LAYER_UID_RANGE ? host - w->base : 0;
}

static int layer_copy_dir(struct layer_walk *w, int src, int dst, int depth);

/* What a computer mounts over at every start (container-boot.c and
 * cubicle-init): nothing a layer holds there would be seen, and a symlink
 * there would send the start's mounts elsewhere. Left out of a layer. */
static const char *const layer_mounted[] = {"proc", "sys", "dev", "run", "tmp", "session", NULL};

static bool layer_is_mounted(const char *name)
{
	for (int i = 0; layer_mounted[i]; i++)
		if (strcmp(name, layer_mounted[i]) == 0)
			return true;
	return false;
}

static int layer_copy_entry(struct layer_walk *w, int src, int dst, const char *name, int depth)
{
	struct stat st;
	if (depth == 0 && layer_is_mounted(name)) {
		w->st->dropped++;
		return 0;
	}
	if (fstatat(src, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
		return layer_fail(w, "stat", name, errno);
	if (layer_count(w) < 0)
		return -1;
	uid_t uid = layer_guest_id(w, st.st_uid);
	gid_t gid = layer_guest_id(w, st.st_gid);
	if (S_ISREG(st.st_mode))
		return layer_copy_file(w, src, dst, name, &st, uid, gid);
	if (S_ISLNK(st.st_mode))
		return layer_copy_symlink(w, src, dst, name, &st, uid, gid);
	if (layer_is_whiteout(&st)) {
		w->st->whiteouts++;
		if (mknodat(dst, name, S_IFCHR, makedev(0, 0)) < 0)
			return layer_fail(w, "create the whiteout", name, errno);
		return 0;
	}
	if (!S_ISDIR(st.st_mode)) {
		w->st->dropped++;
		return 0;
	}
	if (depth >= LAYER_MAX_DEPTH)
		return err_set(w->e, ERR_TOO_LARGE, "layer: directories nest deeper than %d at %s",
			       LAYER_MAX_DEPTH, w->rel);
	if (mkdirat(dst, name, 0700) < 0)
		return layer_fail(w, "create", name, errno);
	int s = openat(src, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	int d = openat(dst, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	size_t saved = 0;
	int rc = s < 0 || d < 0 ? layer_fail(w, "open", name, errno) : layer_enter(w, name, &saved);
	if (rc == 0) {
		char v[8];
		ssize_t n = fgetxattr(s, LAYER_OPAQUE, v, sizeof v);
		if (n == 1 && v[0] == 'y' && fsetxattr(d, LAYER_OPAQUE, "y", 1, 0) < 0)
			rc = layer_fail(w, "mark opaque", "", errno);
	}
	if (rc == 0)
		rc = layer_copy_dir(w, s, d, depth + 1);
	if (rc == 0)
		layer_leave(w, saved);
	/* Times last: copying into it changed its mtime. */
	if (rc == 0 && layer_meta(dst, name, d, &st, uid, gid) < 0)
		rc = layer_fail(w, "set the owner of", name, errno);
	if (s >= 0)
		close(s);
	if (d >= 0)
		close(d);
	return rc;
}

static int layer_copy_dir(struct layer_walk *w, int src, int dst, int depth)
{
	int fd = dup(src);
	DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
	if (!d) {
		if (fd >= 0)
			close(fd);
		return layer_fail(w, "read", "", errno);
	}
	struct dirent *de;
	int rc = 0;
	while (rc == 0 && (errno = 0, de = readdir(d)))
		if (strcmp(de->d_name, ".") != 0 && strcmp(de->d_name, "..") != 0)
			rc = layer_copy_entry(w, src, dst, de->d_name, depth);
	if (rc == 0 && errno)
		rc = layer_fail(w, "read", "", errno);
	closedir(d);
	return rc;
}

int layer_copy(int upper, const char *dest, unsigned uid_base, uint64_t max_bytes,
	       struct layer_stats *st, struct err *e)
{
	memset(st, 0, sizeof *st);
	struct layer_walk w = {.base = uid_base, .max = max_bytes, .st = st, .e = e};
	struct stat top;
	if (fstat(upper, &top) < 0 || !S_ISDIR(top.st_mode))
		return err_set(e, ERR_INTERNAL, "layer: the upper dir is not a directory");
	if (mkdir(dest, 0700) < 0)
		return err_set(e, ERR_INTERNAL, "layer: cannot create %s: %s", dest,
			       strerror(errno));
	w.root = open(dest, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	w.buf = malloc(LAYER_CHUNK);
	int rc;
	if (w.root < 0 || !w.buf)
		rc = err_set(e, ERR_INTERNAL, "layer: cannot open %s: %s", dest,
			     w.buf ? strerror(errno) : "out of memory");
	else
		rc = layer_copy_dir(&w, upper, w.root, 0);
	if (rc == 0 && layer_meta(AT_FDCWD, dest, w.root, &top, layer_guest_id(&w, top.st_uid),
				  layer_guest_id(&w, top.st_gid)) < 0)
		rc = err_set(e, ERR_INTERNAL, "layer: cannot set up %s: %s", dest, strerror(errno));
	if (w.root >= 0)
		close(w.root);
	free(w.buf);
	layer_links_free(&w);
	return rc;
}

/* ---- layer_apply ------------------------------------------------------------------ */

static int layer_apply_dir(struct layer_walk *w, int layer, int root, int depth);

static int layer_apply_entry(struct layer_walk *w, int layer, int root, const char *name, int depth)
{
	struct stat st, there;
	/* A layer holds nothing there (layer_copy leaves it out); one that
	 * did would change what every start mounts over, so it is skipped
	 * here too rather than trusted. */
	if (depth == 0 && layer_is_mounted(name)) {
		w->st->dropped++;
		return 0;
	}
	if (fstatat(layer, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
		return layer_fail(w, "stat", name, errno);
	if (layer_count(w) < 0)
		return -1;
	bool exists = fstatat(root, name, &there, AT_SYMLINK_NOFOLLOW) == 0;
	if (layer_is_whiteout(&st)) {
		w->st->whiteouts++;
		return exists && layer_rm_at(root, name, 0) < 0
			   ? layer_fail(w, "remove", name, errno)
			   : 0;
	}
	if (!S_ISDIR(st.st_mode)) {
		if (exists && layer_rm_at(root, name, 0) < 0)
			return layer_fail(w, "replace", name, errno);
		if (S_ISLNK(st.st_mode))
			return layer_copy_symlink(w, layer, root, name, &st, st.st_uid, st.st_gid);
		if (!S_ISREG(st.st_mode)) {
			w->st->dropped++;
			return 0;
		}
		w->st->bytes += (uint64_t)st.st_size;
		if (linkat(layer, name, root, name, 0) == 0)
			return 0;
		/* Another filesystem, or too many links: a copy. */
		w->st->bytes -= (uint64_t)st.st_size;
		return layer_copy_file(w, layer, root, name, &st, st.st_uid, st.st_gid);
	}
	if (depth >= LAYER_MAX_DEPTH)
		return err_set(w->e, ERR_TOO_LARGE, "layer: directories nest deeper than %d at %s",
			       LAYER_MAX_DEPTH, w->rel);
	int l = openat(layer, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (l < 0)
		return layer_fail(w, "open", name, errno);
	char v[8];
	bool opaque = fgetxattr(l, LAYER_OPAQUE, v, sizeof v) == 1 && v[0] == 'y';
	int rc = 0;
	if (exists && !S_ISDIR(there.st_mode) && layer_rm_at(root, name, 0) < 0)
		rc = layer_fail(w, "replace", name, errno);
	if (rc == 0 && (!exists || !S_ISDIR(there.st_mode)) && mkdirat(root, name, 0700) < 0)
		rc = layer_fail(w, "create", name, errno);
	int r = rc == 0 ? openat(root, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC) : -1;
	if (rc == 0 && r < 0)
		rc = layer_fail(w, "open", name, errno);
	if (rc == 0 && opaque && exists && S_ISDIR(there.st_mode) && layer_rm_contents(r, 0) < 0)
		rc = layer_fail(w, "empty", name, errno);
	size_t saved = 0;
	if (rc == 0 && (rc = layer_enter(w, name, &saved)) == 0) {
		rc = layer_apply_dir(w, l, r, depth + 1);
		if (rc == 0)
			layer_leave(w, saved);
	}
	if (rc == 0 && layer_meta(root, name, r, &st, st.st_uid, st.st_gid) < 0)
		rc = layer_fail(w, "set the owner of", name, errno);
	close(l);
	if (r >= 0)
		close(r);
	return rc;
}

static int layer_apply_dir(struct layer_walk *w, int layer, int root, int depth)
{
	int fd = dup(layer);
	DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
	if (!d) {
		if (fd >= 0)
			close(fd);
		return layer_fail(w, "read", "", errno);
	}
	struct dirent *de;
	int rc = 0;
	while (rc == 0 && (errno = 0, de = readdir(d)))
		if (strcmp(de->d_name, ".") != 0 && strcmp(de->d_name, "..") != 0)
			rc = layer_apply_entry(w, layer, root, de->d_name, depth);
	if (rc == 0 && errno)
		rc = layer_fail(w, "read", "", errno);
	closedir(d);
	return rc;
}

int layer_apply(const char *layer, const char *rootfs, struct err *e)
{
	struct layer_stats st = {0};
	struct layer_walk w = {.st = &st, .e = e};
	int l = open(layer, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	w.root = open(rootfs, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	w.buf = malloc(LAYER_CHUNK);
	int rc;
	if (l < 0 || w.root < 0 || !w.buf)
		rc = err_set(e, ERR_INTERNAL, "layer: cannot open %s or %s: %s", layer, rootfs,
			     w.buf ? strerror(errno) : "out of memory");
	else
		rc = layer_apply_dir(&w, l, w.root, 0);
	if (l >= 0)
		close(l);
	if (w.root >= 0)
		close(w.root);
	free(w.buf);
	layer_links_free(&w);
	return rc;
}

int layer_open_dir(const char *root, const char *rel, struct err *e)
{
	int r = open(root, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (r < 0)
		return err_set(e, ERR_INTERNAL, "layer: cannot open %s: %s", root, strerror(errno));
	struct open_how how = {.flags = O_RDONLY | O_DIRECTORY | O_CLOEXEC,
			       .resolve = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS};
	int fd = (int)syscall(SYS_openat2, r, rel, &how, sizeof how);
	int saved = errno;
	close(r);
	if (fd < 0)
		return err_set(e, ERR_INVALID, "the image's /%s is not a directory (%s)", rel,
			       strerror(saved));
	return fd;
}
