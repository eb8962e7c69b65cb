/*
 * template-cache: layers and images of templates in the image cache.
 *
 *   <cache>/tpl-layer-<16>/  layer/ (layer.h), manifest.json, build.log
 *   <cache>/tpl-image-<16>/  rootfs/, vmlinuz, initrd.img, manifest.json
 *                            and, once a microVM needs it, disk.ext4: what
 *                            rootfs/build-image makes, so both drivers boot
 *                            it as they boot a base
 *   <cache>/.tpl-<16>.lock   flock: one build of a key at a time, across
 *                            every cubicled and `--build-templates` sharing
 *                            the cache
 *   <cache>/.tpl-build-<16>-XXXXXX/  a build in progress (its computer,
 *                            computer.json, the layer or image being made);
 *                            renamed into place only when complete
 *   <cache>/.tpl-trash-XXXXXX/  an entry being removed: renamed here first,
 *                            so a removal cut short never leaves half an
 *                            entry; what is left is swept at the next start
 *
 * A layer's key hashes the base image's package tree (its manifest's
 * "base": a new envd alone does not change it), the canonical recipe and
 * the egress policy it was built under; an image's key hashes the layer's
 * key and the base image's full hash, so a new envd costs a new image
 * (a hard-linked copy and mkfs, seconds) but not a new build. The names
 * never match rootfs/build-image's pruning patterns (NAME-<16>, base-*,
 * small-kernel-*, kernel-*), and this file never takes its build lock.
 */
#include "core-internal.h"
#include "template-internal.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "drvutil.h"
#include "store-templates.h"

#define TPL_LOCK_POLL_MS 500
#define TPL_BUILTIN_KEEP 3 /* builds of one built-in template kept, unused or not */

void tpl_entry_name(const char *kind, const char *key, char out[TPL_ENTRY])
{
	snprintf(out, TPL_ENTRY, "tpl-%s-%.16s", kind, key);
}

/* <cache>/<name> into out; -1 with e when it does not fit. */
static int tpl_path(const struct core_templates *t, const char *name, char *out, size_t len,
		    struct err *e)
{
	int n = snprintf(out, len, "%s/%s", t->cache, name);
	if (n < 0 || (size_t)n >= len)
		return err_set(e, ERR_INTERNAL, "template cache: the path %s/%s is too long",
			       t->cache, name);
	return 0;
}

bool tpl_cache_has(const struct core_templates *t, const char *entry)
{
	char dir[TPL_DIR_MAX + 100], manifest[TPL_DIR_MAX + 120];
	if (tpl_path(t, entry, dir, sizeof dir, NULL) < 0)
		return false;
	snprintf(manifest, sizeof manifest, "%s/manifest.json", dir);
	if (access(manifest, F_OK) < 0)
		return false;
	utimensat(AT_FDCWD, dir, NULL, 0); /* used now: kept by pruning */
	return true;
}

uint64_t tpl_layer_bytes(const struct core_templates *t, const char *image, const char *layer)
{
	/* The image's manifest says (images made before it did: the layer's,
	 * which may have been pruned since: an image needs no layer). */
	char path[TPL_DIR_MAX + 128];
	json_int_t bytes = -1;
	for (int i = image ? 0 : 1; i < 2 && bytes < 0; i++) {
		snprintf(path, sizeof path, "%s/%s/manifest.json", t->cache, i ? layer : image);
		json_t *m = json_load_file(path, 0, NULL);
		json_t *v = json_object_get(m, i ? "bytes" : "layer_bytes");
		if (json_is_integer(v))
			bytes = json_integer_value(v);
		json_decref(m);
	}
	return bytes > 0 ? (uint64_t)bytes : 0;
}

/* Removes dir and everything in it (never following a symlink or crossing a
 * mount); fine when it is gone. */
static void tpl_rm_tree(const char *dir)
{
	if (drv_rm_contents(dir) == 0)
		rmdir(dir);
}

/*
 * Removes the cache's entry (or build directory) at path atomically: it is
 * first renamed over a fresh empty <cache>/.tpl-trash-XXXXXX, then that is
 * removed. A process killed while removing leaves only trash (swept at the
 * next start), never half an entry whose manifest.json still says it is
 * there. Falls back to removing in place if the rename cannot be made.
 */
static void tpl_rm_entry(const struct core_templates *t, const char *path)
{
	char trash[TPL_DIR_MAX + 32];
	if (tpl_path(t, ".tpl-trash-XXXXXX", trash, sizeof trash, NULL) == 0 && mkdtemp(trash)) {
		if (rename(path, trash) == 0) {
			tpl_rm_tree(trash);
			return;
		}
		int saved = errno;
		rmdir(trash);
		if (saved == ENOENT)
			return;
		fprintf(stderr, "cubicled: templates: cannot move %s to the trash (%s)\n", path,
			strerror(saved));
	}
	tpl_rm_tree(path);
}

/* The "hash" and "base" of a base image's manifest that is not quite JSON
 * (images built before build-image's kernel_release: a control character in
 * "kernel"): read as "key": "hex" lines. */
static json_t *tpl_manifest_lenient(const char *path)
{
	FILE *f = fopen(path, "re");
	json_t *m = json_object();
	char line[512];
	while (f && m && fgets(line, sizeof line, f)) {
		char key[16], val[80];
		if (sscanf(line, " \"%15[a-z]\": \"%79[0-9a-f]\"", key, val) == 2 &&
		    (strcmp(key, "hash") == 0 || strcmp(key, "base") == 0))
			json_object_set_new(m, key, json_string(val));
	}
	if (f)
		fclose(f);
	return m;
}

int tpl_base_image(const struct core_templates *t, const char *base, char dir[TPL_DIR_MAX],
		   char tree[TPL_KEY_HEX], char hash[TPL_KEY_HEX], struct err *e)
{
	char link[TPL_DIR_MAX + 32], manifest[TPL_DIR_MAX + 32];
	snprintf(link, sizeof link, "%s/%s", t->images, base);
	if (!realpath(link, dir))
		return err_set(e, ERR_UNAVAILABLE,
			       "the %s image is not built (%s: %s); run `make images`", base, link,
			       strerror(errno));
	snprintf(manifest, sizeof manifest, "%s/manifest.json", dir);
	json_t *m = json_load_file(manifest, 0, NULL);
	if (!m)
		m = tpl_manifest_lenient(manifest);
	const char *h = json_string_value(json_object_get(m, "hash"));
	const char *b = json_string_value(json_object_get(m, "base"));
	int rc = 0;
	if (!h || strlen(h) >= TPL_KEY_HEX)
		rc = err_set(e, ERR_UNAVAILABLE,
			     "the %s image at %s has no manifest.json with a hash; run `make "
			     "images`",
			     base, dir);
	else {
		snprintf(hash, TPL_KEY_HEX, "%s", h);
		/* Images from before the manifest named their package tree:
		 * their own hash (every new envd is then a new layer). */
		snprintf(tree, TPL_KEY_HEX, "%s", b && strlen(b) < TPL_KEY_HEX ? b : h);
	}
	json_decref(m);
	return rc;
}

/* ---- locks --------------------------------------------------------------------------- */

/*
 * Takes the cache's lock of a key (.tpl-<16>.lock), waiting while another
 * cubicled or build holds it (they build the same thing: the entry is then
 * there). Gives up when the job is canceled or past its deadline. The fd
 * (close it to unlock), or -1 with e.
 */
static int tpl_lock(struct tpl_job *j, const char *key, struct err *e)
{
	char name[64], path[PATH_MAX];
	snprintf(name, sizeof name, ".tpl-%.16s.lock", key);
	if (tpl_path(j->t, name, path, sizeof path, e) < 0)
		return -1;
	int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (fd < 0)
		return err_set(e, ERR_UNAVAILABLE, "template cache: cannot open %s: %s", path,
			       strerror(errno));
	bool said = false;
	while (flock(fd, LOCK_EX | LOCK_NB) < 0) {
		if (errno != EWOULDBLOCK && errno != EINTR) {
			int saved = errno;
			close(fd);
			return err_set(e, ERR_UNAVAILABLE, "template cache: flock %s: %s", path,
				       strerror(saved));
		}
		if (!said)
			tpl_log(j, "waiting for another build of the same thing (%s)", name);
		said = true;
		if (tpl_job_canceled(j) || clock_wall_ms() > j->deadline_ms) {
			close(fd);
			return err_set(e, ERR_TIMEOUT,
				       "another build of the same recipe held the cache for "
				       "longer than this build may take");
		}
		clock_sleep_ms(TPL_LOCK_POLL_MS);
	}
	return fd;
}

/* A fresh build directory <cache>/.tpl-build-<16>-XXXXXX. */
static int tpl_workdir(struct core_templates *t, const char *key, char out[TPL_DIR_MAX + 64],
		       struct err *e)
{
	char name[64];
	snprintf(name, sizeof name, ".tpl-build-%.16s-XXXXXX", key);
	if (tpl_path(t, name, out, TPL_DIR_MAX + 64, e) < 0)
		return -1;
	if (!mkdtemp(out))
		return err_set(e, ERR_UNAVAILABLE, "template cache: cannot create %s: %s", out,
			       strerror(errno));
	return 0;
}

/* Build directories of key (or of every key: key NULL) whose key's lock
 * is free, that is whose build was killed: computers destroyed, removed.
 * held: the caller holds that key's lock already. With every key, also the
 * trash of removals cut short (tpl_rm_entry), that no one renames again. */
static void tpl_sweep(struct core_templates *t, const char *key, bool held)
{
	DIR *d = opendir(t->cache);
	if (!d)
		return;
	struct dirent *de;
	char prefix[40];
	snprintf(prefix, sizeof prefix, ".tpl-build-%.16s-", key ? key : "");
	while ((de = readdir(d))) {
		if (!key && strncmp(de->d_name, ".tpl-trash-", strlen(".tpl-trash-")) == 0 &&
		    strlen(de->d_name) == strlen(".tpl-trash-") + 6) {
			char trash[TPL_DIR_MAX + 300];
			snprintf(trash, sizeof trash, "%s/%s", t->cache, de->d_name);
			fprintf(stderr,
				"cubicled: templates: removing %s, left by a removal cut "
				"short\n",
				trash);
			tpl_rm_tree(trash);
			continue;
		}
		if (strncmp(de->d_name, prefix, strlen(prefix)) != 0 ||
		    strlen(de->d_name) != strlen(".tpl-build-") + 16 + 7)
			continue;
		char dir[TPL_DIR_MAX + 300], lock[TPL_DIR_MAX + 64];
		char k[17];
		snprintf(k, sizeof k, "%.16s", de->d_name + strlen(".tpl-build-"));
		snprintf(dir, sizeof dir, "%s/%s", t->cache, de->d_name);
		snprintf(lock, sizeof lock, "%s/.tpl-%s.lock", t->cache, k);
		int fd = -1;
		if (!held) {
			fd = open(lock, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
			if (fd < 0 || flock(fd, LOCK_EX | LOCK_NB) < 0) {
				if (fd >= 0)
					close(fd);
				continue; /* a build is running there */
			}
		}
		fprintf(stderr,
			"cubicled: templates: removing %s, left by a build that was killed\n", dir);
		tpl_build_cleanup(dir);
		tpl_rm_entry(t, dir);
		if (fd >= 0)
			close(fd);
	}
	closedir(d);
}

void tpl_cache_sweep(struct core_templates *t)
{
	tpl_sweep(t, NULL, false);
}

/* ---- manifests -------------------------------------------------------------------- */

static int tpl_write_json(const char *path, json_t *j, struct err *e)
{
	int rc = j && json_dump_file(j, path, JSON_INDENT(2) | JSON_SORT_KEYS) == 0
		     ? 0
		     : err_set(e, ERR_UNAVAILABLE, "template cache: cannot write %s", path);
	json_decref(j);
	return rc;
}

static void tpl_iso_now(char out[32])
{
	time_t now = time(NULL);
	struct tm tm;
	gmtime_r(&now, &tm);
	strftime(out, 32, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

/* Copies the job's log so far into path (a layer's build.log). */
static void tpl_copy_log(const struct tpl_job *j, const char *path)
{
	if (j->log_path[0] == 0)
		return;
	int in = open(j->log_path, O_RDONLY | O_CLOEXEC);
	int out = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
	char buf[65536];
	ssize_t n;
	while (in >= 0 && out >= 0 && (n = read(in, buf, sizeof buf)) > 0)
		if (write(out, buf, (size_t)n) != n)
			break;
	if (in >= 0)
		close(in);
	if (out >= 0)
		close(out);
}

/* ---- the layer ------------------------------------------------------------------------ */

static int tpl_layer(struct tpl_job *j, const char *entry, struct err *e)
{
	struct core_templates *t = j->t;
	char final[TPL_DIR_MAX + 100];
	if (tpl_path(t, entry, final, sizeof final, e) < 0)
		return -1;
	if (tpl_cache_has(t, entry)) {
		tpl_log(j, "layer %s is in the cache", entry);
		return 0;
	}
	int lock = tpl_lock(j, j->layer_key, e);
	if (lock < 0)
		return -1;
	int rc = 0;
	if (tpl_cache_has(t, entry)) {
		tpl_log(j, "layer %s was built meanwhile", entry);
		close(lock);
		return 0;
	}
	tpl_sweep(t, j->layer_key, true);
	char work[TPL_DIR_MAX + 64], dir[TPL_DIR_MAX + 80], layer[TPL_DIR_MAX + 96],
	    path[TPL_DIR_MAX + 128];
	if (tpl_workdir(t, j->layer_key, work, e) < 0) {
		close(lock);
		return -1;
	}
	snprintf(dir, sizeof dir, "%s/entry", work);
	snprintf(layer, sizeof layer, "%s/layer", dir);
	struct layer_stats st = {0};
	int64_t t0 = clock_wall_ms();
	if (mkdir(dir, 0755) < 0)
		rc = err_set(e, ERR_UNAVAILABLE, "template cache: cannot create %s: %s", dir,
			     strerror(errno));
	if (rc == 0)
		rc = tpl_build_layer(j, work, layer, &st, e);
	if (rc == 0) {
		char when[32];
		tpl_iso_now(when);
		json_t *spec = json_deep_copy(j->recipe.spec);
		snprintf(path, sizeof path, "%s/manifest.json", dir);
		rc = tpl_write_json(
		    path,
		    json_pack("{s:s, s:s, s:s, s:s?, s:o, s:I, s:I, s:I, s:f, s:s, s:s}", "kind",
			      "template-layer", "key", j->layer_key, "base_image", j->base_image,
			      "builtin", j->recipe.builtin ? j->recipe.name : NULL, "recipe",
			      spec ? spec : json_object(), "bytes", (json_int_t)st.bytes, "entries",
			      (json_int_t)st.entries, "whiteouts", (json_int_t)st.whiteouts,
			      "build_seconds", (double)(clock_wall_ms() - t0) / 1000.0, "builder",
			      TPL_BUILDER_VERSION, "built_at", when),
		    e);
	}
	if (rc == 0) {
		tpl_log(j, "layer: %.1f MiB in %llu files and directories, %llu removed paths",
			(double)st.bytes / 1048576.0, (unsigned long long)st.entries,
			(unsigned long long)st.whiteouts);
		snprintf(path, sizeof path, "%s/build.log", dir);
		tpl_copy_log(j, path);
		if (rename(dir, final) < 0)
			rc = err_set(e, ERR_UNAVAILABLE, "template cache: cannot rename %s: %s",
				     dir, strerror(errno));
	}
	tpl_rm_entry(t, work);
	close(lock);
	return rc;
}

/* ---- the image ------------------------------------------------------------------------ */

/* What mkfs.ext4 needs to know of a tree: its bytes (a file with several
 * links once: the tree shares most of its inodes with the base image, so
 * st_nlink says nothing about the tree itself) and its entries. nftw has
 * no context pointer. */
static _Thread_local uint64_t tpl_tree_bytes, tpl_tree_files;
static _Thread_local ino_t *tpl_tree_seen;
static _Thread_local size_t tpl_tree_nseen, tpl_tree_capseen;

/* Whether ino was seen in this walk (and remembers it). */
static bool tpl_tree_seen_before(ino_t ino)
{
	if (tpl_tree_nseen * 2 >= tpl_tree_capseen) {
		size_t cap = tpl_tree_capseen ? tpl_tree_capseen * 2 : 65536;
		ino_t *more = calloc(cap, sizeof *more), *old = tpl_tree_seen;
		if (!more)
			return false; /* counted twice: a larger disk, no harm */
		for (size_t i = 0; i < tpl_tree_capseen; i++)
			for (size_t k = (size_t)(old[i] * 0x9E3779B97F4A7C15ull) & (cap - 1);
			     old[i]; k = (k + 1) & (cap - 1))
				if (!more[k]) {
					more[k] = old[i];
					break;
				}
		free(old);
		tpl_tree_seen = more;
		tpl_tree_capseen = cap;
	}
	size_t k = (size_t)(ino * 0x9E3779B97F4A7C15ull) & (tpl_tree_capseen - 1);
	for (; tpl_tree_seen[k]; k = (k + 1) & (tpl_tree_capseen - 1))
		if (tpl_tree_seen[k] == ino)
			return true;
	tpl_tree_seen[k] = ino;
	tpl_tree_nseen++;
	return false;
}

static int tpl_tree_count(const char *path, const struct stat *st, int flag, struct FTW *f)
{
	(void)path, (void)flag, (void)f;
	tpl_tree_files++;
	if (st->st_nlink > 1 && !S_ISDIR(st->st_mode) && st->st_ino &&
	    tpl_tree_seen_before(st->st_ino))
		return 0;
	tpl_tree_bytes += (uint64_t)st->st_blocks * 512;
	return 0;
}

/* The tree's bytes and entries (tpl_tree_bytes, tpl_tree_files). */
static void tpl_tree_measure(const char *rootfs)
{
	tpl_tree_bytes = tpl_tree_files = 0;
	nftw(rootfs, tpl_tree_count, 64, FTW_PHYS | FTW_MOUNT);
	free(tpl_tree_seen);
	tpl_tree_seen = NULL;
	tpl_tree_nseen = tpl_tree_capseen = 0;
}

/* <dir>/<name> as a hard link of <from>/<name> (a copy across filesystems). */
static int tpl_link_file(const char *from, const char *dir, const char *name, struct err *e)
{
	char src[PATH_MAX + 32], dst[PATH_MAX + 32], log[PATH_MAX + 32];
	snprintf(src, sizeof src, "%s/%s", from, name);
	snprintf(dst, sizeof dst, "%s/%s", dir, name);
	if (link(src, dst) == 0)
		return 0;
	snprintf(log, sizeof log, "%s/cp.log", dir);
	char *argv[] = {"cp", "--", src, dst, NULL};
	int rc = drv_run(argv, log, "template image", e);
	unlink(log);
	return rc;
}

/* /etc/cubicle/image of the template's tree: replaced, never written in
 * place (the base's is a hard link into the base image), through a
 * descriptor (tpl_image_trusted says why). */
static int tpl_image_stamp(const struct tpl_job *j, const char *rootfs, struct err *e)
{
	int dir = layer_open_dir(rootfs, "etc/cubicle", e);
	if (dir < 0)
		return -1;
	unlinkat(dir, "image", 0);
	int fd = openat(dir, "image", O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
	close(dir);
	if (fd < 0)
		return err_set(e, ERR_UNAVAILABLE,
			       "template image: cannot write /etc/cubicle/image: %s",
			       strerror(errno));
	int rc =
	    dprintf(fd, "name=%s\nhash=%s\ntemplate=%s\nlayer=%s\n", j->recipe.base, j->image_key,
		    j->recipe.name, j->layer_key) > 0
		? 0
		: err_set(e, ERR_UNAVAILABLE, "template image: cannot write /etc/cubicle/image");
	close(fd);
	return rc;
}

/* cubicle's own files in the image are the base's whatever the layer did:
 * envd and cubicle-init (a template is no way to ship another agent).
 * Changed through descriptors: the tree is the tenant's, and a symlink
 * there must never send a change to the host's files. */
static int tpl_image_trusted(const struct tpl_job *j, const char *rootfs, struct err *e)
{
	static const char *const files[][2] = {{"usr/local/bin", "envd"}, {"sbin", "cubicle-init"}};
	char from_dir[PATH_MAX + 64];
	for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
		/* The base's file, resolved in the base's tree (/sbin is a link). */
		snprintf(from_dir, sizeof from_dir, "%s/rootfs", j->base_image);
		int src = layer_open_dir(from_dir, files[i][0], NULL);
		if (src < 0 || faccessat(src, files[i][1], F_OK, AT_SYMLINK_NOFOLLOW) < 0) {
			if (src >= 0)
				close(src);
			continue;
		}
		int dir = layer_open_dir(rootfs, files[i][0], e);
		if (dir < 0) {
			close(src);
			return -1;
		}
		struct stat st;
		int rc = 0;
		if (fstatat(dir, files[i][1], &st, AT_SYMLINK_NOFOLLOW) == 0 &&
		    unlinkat(dir, files[i][1], S_ISDIR(st.st_mode) ? AT_REMOVEDIR : 0) < 0)
			rc = err_set(e, ERR_INVALID, "template image: /%s/%s: %s", files[i][0],
				     files[i][1], strerror(errno));
		if (rc == 0 && linkat(src, files[i][1], dir, files[i][1], 0) < 0)
			rc = err_set(e, ERR_UNAVAILABLE,
				     "template image: cannot restore /%s/%s from the base (%s)",
				     files[i][0], files[i][1], strerror(errno));
		close(dir);
		close(src);
		if (rc < 0)
			return -1;
	}
	return 0;
}

/* The image: a hard-linked copy of the base tree with the layer applied,
 * the base's kernel and initrd, and an ext4 disk of the tree for VMs. */
static int tpl_image_assemble(struct tpl_job *j, const char *layer_entry, const char *dir,
			      struct err *e)
{
	char rootfs[PATH_MAX], src[PATH_MAX], layer[PATH_MAX], log[PATH_MAX];
	snprintf(rootfs, sizeof rootfs, "%s/rootfs", dir);
	snprintf(src, sizeof src, "%s/rootfs", j->base_image);
	snprintf(log, sizeof log, "%s/run.log", dir);
	if (tpl_path(j->t, layer_entry, layer, sizeof layer - 8, e) < 0)
		return -1;
	strcat(layer, "/layer");
	int64_t t0 = clock_wall_ms();
	char *cp[] = {"cp", "-a", "-l", "--", src, rootfs, NULL};
	if (drv_run(cp, log, "template image: copying the base tree", e) < 0)
		return -1;
	if (layer_apply(layer, rootfs, e) < 0 || tpl_image_trusted(j, rootfs, e) < 0 ||
	    tpl_image_stamp(j, rootfs, e) < 0 ||
	    tpl_link_file(j->base_image, dir, "vmlinuz", e) < 0 ||
	    tpl_link_file(j->base_image, dir, "initrd.img", e) < 0)
		return -1;
	tpl_tree_measure(rootfs);
	tpl_log(j, "image: tree ready in %.1f s (its microVM disk is made on first use)",
		(double)(clock_wall_ms() - t0) / 1000.0);
	char when[32], path[PATH_MAX + 32], base_name[PATH_MAX];
	tpl_iso_now(when);
	const char *slash = strrchr(j->base_image, '/');
	snprintf(base_name, sizeof base_name, "%s", slash ? slash + 1 : j->base_image);
	char entry[TPL_ENTRY];
	tpl_entry_name("image", j->image_key, entry);
	/* The layer's size, kept here: a layer may be pruned before its image. */
	json_int_t layer_bytes = (json_int_t)tpl_layer_bytes(j->t, NULL, layer_entry);
	snprintf(path, sizeof path, "%s/manifest.json", dir);
	return tpl_write_json(
	    path,
	    json_pack("{s:s, s:s, s:s, s:s, s:s?, s:s, s:I, s:s, s:I, s:I, s:f, s:s}", "name",
		      entry, "kind", "template-image", "hash", j->image_key, "template",
		      j->recipe.name, "builtin", j->recipe.builtin ? j->recipe.name : NULL, "layer",
		      layer_entry, "layer_bytes", layer_bytes, "base_image", base_name,
		      "rootfs_bytes", (json_int_t)tpl_tree_bytes, "rootfs_entries",
		      (json_int_t)tpl_tree_files, "build_seconds",
		      (double)(clock_wall_ms() - t0) / 1000.0, "built_at", when),
	    e);
}

/*
 * An image's disk.ext4 (what a microVM boots; a container needs none), made
 * the first time a microVM needs it: mkfs.ext4 -d of the tree, as
 * rootfs/build-image makes its images' (the tree plus 20% and 256 MiB,
 * sparse), into a temporary file renamed into place, under the image's
 * lock so two microVMs never make it twice.
 */
int tpl_image_disk(struct core_templates *t, const char *entry, struct err *e)
{
	char dir[TPL_DIR_MAX + 100], disk[TPL_DIR_MAX + 128], tmp[TPL_DIR_MAX + 160],
	    rootfs[TPL_DIR_MAX + 128], log[TPL_DIR_MAX + 128];
	if (tpl_path(t, entry, dir, sizeof dir, e) < 0)
		return -1;
	snprintf(disk, sizeof disk, "%s/disk.ext4", dir);
	if (access(disk, F_OK) == 0)
		return 0;
	char lockname[64], lockpath[TPL_DIR_MAX + 64];
	snprintf(lockname, sizeof lockname, ".tpl-%.16s.lock", entry + strlen("tpl-image-"));
	if (tpl_path(t, lockname, lockpath, sizeof lockpath, e) < 0)
		return -1;
	int lock = open(lockpath, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (lock < 0 || flock(lock, LOCK_EX) < 0) {
		if (lock >= 0)
			close(lock);
		return err_set(e, ERR_UNAVAILABLE, "template image: cannot lock %s: %s", lockpath,
			       strerror(errno));
	}
	int rc = 0;
	if (access(disk, F_OK) < 0) {
		snprintf(rootfs, sizeof rootfs, "%s/rootfs", dir);
		snprintf(tmp, sizeof tmp, "%s/.disk.ext4.new", dir);
		snprintf(log, sizeof log, "%s/.mkfs.log", dir);
		int64_t t0 = clock_wall_ms();
		tpl_tree_measure(rootfs);
		uint64_t size_mib = tpl_tree_bytes * 12 / 10 / 1048576 + 256;
		char size[32], inodes[32];
		snprintf(size, sizeof size, "%lluM", (unsigned long long)size_mib);
		snprintf(inodes, sizeof inodes, "%llu",
			 (unsigned long long)(tpl_tree_files * 3 / 2 + 16384));
		char *trunc[] = {"truncate", "-s", size, "--", tmp, NULL};
		char *mkfs[] = {"mkfs.ext4",
				"-q",
				"-F",
				"-L",
				"cubicle-root",
				"-m",
				"0",
				"-N",
				inodes,
				"-E",
				"lazy_itable_init=0,lazy_journal_init=0,root_owner=0:0",
				"-d",
				rootfs,
				tmp,
				NULL};
		unlink(tmp);
		rc = drv_run(trunc, log, "template image", e) < 0 ||
			     drv_run(mkfs, log, "template image: mkfs.ext4 -d", e) < 0
			 ? -1
			 : 0;
		if (rc == 0 && rename(tmp, disk) < 0)
			rc = err_set(e, ERR_UNAVAILABLE, "template image: cannot rename %s: %s",
				     tmp, strerror(errno));
		unlink(tmp);
		unlink(log);
		if (rc == 0)
			fprintf(stderr,
				"cubicled: templates: %s: the microVM disk made in %.1f s\n", entry,
				(double)(clock_wall_ms() - t0) / 1000.0);
	}
	close(lock);
	return rc;
}

static int tpl_image(struct tpl_job *j, const char *layer_entry, const char *entry, struct err *e)
{
	struct core_templates *t = j->t;
	if (tpl_cache_has(t, entry)) {
		tpl_log(j, "image %s is in the cache", entry);
		return 0;
	}
	int lock = tpl_lock(j, j->image_key, e);
	if (lock < 0)
		return -1;
	int rc = 0;
	char final[TPL_DIR_MAX + 100], work[TPL_DIR_MAX + 64], dir[TPL_DIR_MAX + 80];
	if (tpl_cache_has(t, entry)) {
		tpl_log(j, "image %s was made meanwhile", entry);
		close(lock);
		return 0;
	}
	if (tpl_path(t, entry, final, sizeof final, e) < 0) {
		close(lock);
		return -1;
	}
	tpl_sweep(t, j->image_key, true);
	if (tpl_workdir(t, j->image_key, work, e) < 0) {
		close(lock);
		return -1;
	}
	snprintf(dir, sizeof dir, "%s/entry", work);
	tpl_log(j, "image %s: the base tree hard-linked, the layer applied", entry);
	if (mkdir(dir, 0755) < 0)
		rc = err_set(e, ERR_UNAVAILABLE, "template cache: cannot create %s: %s", dir,
			     strerror(errno));
	if (rc == 0)
		rc = tpl_image_assemble(j, layer_entry, dir, e);
	if (rc == 0 && rename(dir, final) < 0)
		rc = err_set(e, ERR_UNAVAILABLE, "template cache: cannot rename %s: %s", dir,
			     strerror(errno));
	tpl_rm_entry(t, work);
	close(lock);
	return rc;
}

int tpl_cache_build(struct tpl_job *j, struct err *e)
{
	char layer[TPL_ENTRY], image[TPL_ENTRY];
	tpl_entry_name("layer", j->layer_key, layer);
	tpl_entry_name("image", j->image_key, image);
	int64_t t0 = clock_wall_ms();
	bool hit = tpl_cache_has(j->t, image);
	if (!hit && (tpl_layer(j, layer, e) < 0 || tpl_image(j, layer, image, e) < 0))
		return -1;
	j->layer_bytes = tpl_layer_bytes(j->t, image, layer); /* what the layer adds */
	snprintf(j->image_entry, sizeof j->image_entry, "%s", image);
	j->build_ms = hit ? 0 : clock_wall_ms() - t0;
	if (hit)
		tpl_log(j, "cache hit: image %s (the same recipe over the same base)", image);
	return 0;
}

/* ---- pruning ------------------------------------------------------------------------- */

struct tpl_entry_info {
	char name[TPL_ENTRY];
	time_t mtime;
	char builtin[64]; /* the built-in template it is of, or "" */
};

static int tpl_entry_newer(const void *a, const void *b)
{
	const struct tpl_entry_info *x = a, *y = b;
	return x->mtime < y->mtime ? 1 : x->mtime > y->mtime ? -1 : 0;
}

/* Whether a running container computer uses the entry (its in-use/ID
 * marker names a directory that still exists; container.c writes them). */
static bool tpl_entry_in_use(const char *dir)
{
	char markers[PATH_MAX + 16];
	snprintf(markers, sizeof markers, "%s/in-use", dir);
	DIR *d = opendir(markers);
	if (!d)
		return false;
	struct dirent *de;
	bool used = false;
	while (!used && (de = readdir(d))) {
		if (de->d_name[0] == '.')
			continue;
		char path[PATH_MAX + 300], target[PATH_MAX];
		snprintf(path, sizeof path, "%s/%s", markers, de->d_name);
		FILE *f = fopen(path, "re");
		if (f && fgets(target, sizeof target, f)) {
			struct stat st;
			used = stat(target, &st) == 0 && S_ISDIR(st.st_mode);
		}
		if (f)
			fclose(f);
	}
	closedir(d);
	return used;
}

/* Whether a template of this cubicled names the entry. */
static bool tpl_entry_referenced(struct core_templates *t, const char *name)
{
	if (!t->store)
		return false;
	struct store_template *all = NULL;
	size_t n = 0;
	bool used = false;
	if (store_template_list(t->store, NULL, &all, &n, NULL) < 0)
		return true; /* cannot tell: keep it */
	for (size_t i = 0; i < n; i++) {
		char layer[TPL_ENTRY];
		tpl_entry_name("layer", all[i].layer_key, layer);
		used = used || strcmp(all[i].image, name) == 0 || strcmp(layer, name) == 0;
		store_template_clear(&all[i]);
	}
	free(all);
	return used;
}

/* Whether cubicled is stopping: a prune stops between entries. */
static bool tpl_closing(struct core_templates *t)
{
	pthread_mutex_lock(&t->lock);
	bool closing = t->closing;
	pthread_mutex_unlock(&t->lock);
	return closing;
}

static void tpl_prune_kind(struct core_templates *t, const char *prefix, const char *keep)
{
	DIR *d = opendir(t->cache);
	if (!d)
		return;
	struct tpl_entry_info *list = NULL;
	size_t n = 0, cap = 0;
	struct dirent *de;
	while ((de = readdir(d))) {
		if (strncmp(de->d_name, prefix, strlen(prefix)) != 0 ||
		    strlen(de->d_name) != strlen(prefix) + 16)
			continue;
		struct stat st;
		char path[TPL_DIR_MAX + 300];
		snprintf(path, sizeof path, "%s/%s", t->cache, de->d_name);
		if (stat(path, &st) < 0 || !S_ISDIR(st.st_mode))
			continue;
		if (n == cap) {
			cap = cap ? cap * 2 : 32;
			struct tpl_entry_info *more = realloc(list, cap * sizeof *list);
			if (!more)
				break;
			list = more;
		}
		snprintf(list[n].name, sizeof list[n].name, "%.*s", (int)sizeof list[n].name - 1,
			 de->d_name);
		list[n].mtime = st.st_mtime;
		list[n].builtin[0] = 0;
		char manifest[TPL_DIR_MAX + 320];
		snprintf(manifest, sizeof manifest, "%s/manifest.json", path);
		json_t *m = json_load_file(manifest, 0, NULL);
		const char *b = json_string_value(json_object_get(m, "builtin"));
		if (b)
			snprintf(list[n].builtin, sizeof list[n].builtin, "%s", b);
		json_decref(m);
		n++;
	}
	closedir(d);
	qsort(list, n, sizeof *list, tpl_entry_newer);
	int kept = 0;
	for (size_t i = 0; i < n && !tpl_closing(t); i++) {
		char path[TPL_DIR_MAX + 100];
		snprintf(path, sizeof path, "%s/%s", t->cache, list[i].name);
		if ((keep && strcmp(list[i].name, keep) == 0) || tpl_entry_in_use(path) ||
		    tpl_entry_referenced(t, list[i].name))
			continue;
		/* A built-in template's older builds (over earlier base images,
		 * of an earlier recipe) go once three newer ones are there, as
		 * build-image keeps three images of a name: they are the large
		 * ones (data's layer is 1.7 GB), and the count rule alone would
		 * keep --template-cache-keep of them. */
		int newer = 0;
		for (size_t k = 0; k < i && list[i].builtin[0]; k++)
			newer += strcmp(list[k].builtin, list[i].builtin) == 0;
		bool superseded = newer >= TPL_BUILTIN_KEEP;
		if (!superseded && kept++ < t->cfg.cache_keep)
			continue;
		fprintf(stderr, "cubicled: templates: pruning %s (%s)\n", path,
			superseded ? "a built-in template's older build" : "unused");
		tpl_rm_entry(t, path);
	}
	free(list);
}

void tpl_cache_prune(struct core_templates *t, const struct tpl_job *j)
{
	/* build-image's .prune.lock: its hits take it shared, so an image is
	 * never removed between the check and the use. */
	char path[PATH_MAX];
	if (tpl_path(t, ".prune.lock", path, sizeof path, NULL) < 0)
		return;
	int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
	if (fd < 0 || flock(fd, LOCK_EX) < 0) {
		if (fd >= 0)
			close(fd);
		return;
	}
	char image[TPL_ENTRY] = "", layer[TPL_ENTRY] = "";
	if (j) {
		tpl_entry_name("image", j->image_key, image);
		tpl_entry_name("layer", j->layer_key, layer);
	}
	tpl_prune_kind(t, "tpl-image-", image);
	tpl_prune_kind(t, "tpl-layer-", layer);
	close(fd);
}
