/*
 * layer: a template's layer, the files a build changed over its image, and
 * how it becomes an image again.
 *
 * A layer is a directory tree in overlayfs's own format, as a container's
 * upper dir holds it: changed and added files, directories and symlinks;
 * a removed path is a whiteout (a character device 0/0); a directory that
 * hides the image's directory of the same name is opaque (the xattr
 * user.overlay.opaque = "y", the userxattr form the container driver's
 * overlays use). Only that, sanitized on the way in (layer_copy):
 *
 *   - owners as the guest sees them (guest uid N is stored as N, so the
 *     layer is idmapped like the image it belongs to); an owner outside
 *     the guest's range (there should be none) becomes root;
 *   - no setuid or setgid bit, no file capability, no other xattr (the
 *     images promise "no file gives root": rootfs/README.md);
 *   - no device, FIFO or socket (the guest could make none that matter,
 *     but a layer is tenant input and is checked, not trusted);
 *   - nothing at /proc, /sys, /dev, /run, /tmp or /session: a computer
 *     mounts over them at every start, and a symlink there would send
 *     those mounts elsewhere;
 *   - mtimes kept (Python compares a .pyc with its source's mtime).
 *
 * Everything works relative to directory descriptors opened with
 * O_NOFOLLOW: a symlink the tenant left in the tree is copied as a
 * symlink, never followed, wherever it points.
 */
#ifndef CUBICLE_LAYER_H
#define CUBICLE_LAYER_H

#include <stdint.h>

#include "err.h"

struct layer_stats {
	uint64_t bytes;	    /* file data copied */
	uint64_t entries;   /* files, directories, symlinks and whiteouts */
	uint64_t whiteouts; /* removed paths */
	uint64_t dropped;   /* devices, FIFOs, sockets left out */
};

/* What a layer may hold at most, whatever its size in bytes. */
#define LAYER_MAX_ENTRIES 2000000
#define LAYER_MAX_DEPTH	  256

/*
 * Copies the overlay upper dir open at `upper` (a directory descriptor)
 * into dest (created here with the mode of upper's root; it must not
 * exist), sanitized as above. uid_base is the host uid of the guest's uid
 * 0 (the container's range): host uid uid_base + N is stored as N. Stops
 * with ERR_TOO_LARGE past max_bytes of file data (0 = no limit) or
 * LAYER_MAX_ENTRIES entries. dest is left for the caller to remove on
 * failure.
 */
int layer_copy(int upper, const char *dest, unsigned uid_base, uint64_t max_bytes,
	       struct layer_stats *st, struct err *e);

/*
 * Applies the layer at `layer` onto the tree at `rootfs` (a hard-linked
 * copy of an image tree, on the same filesystem): whiteouts remove paths,
 * opaque directories are emptied first, every other entry replaces what
 * is there. Files are hard-linked from the layer (copied when they cannot
 * be), so the image costs the layer's files once; nothing of rootfs is
 * ever written in place (its files are links to the image cache's).
 */
int layer_apply(const char *layer, const char *rootfs, struct err *e);

/*
 * The directory root/rel opened as the tree itself would resolve it, with
 * root as "/" (openat2 RESOLVE_IN_ROOT: /sbin -> usr/sbin is followed, and
 * no symlink, absolute or "..", can lead out of root): what changes a file
 * of an image tree a layer went into must never be sent out of it by a
 * symlink the tenant put there. An fd, or -1 with e.
 */
int layer_open_dir(const char *root, const char *rel, struct err *e);

#endif
