/*
 * template-internal: what template.c (the API side: recipes, rows, jobs,
 * waits), template-build.c (a layer built in a container computer) and
 * template-cache.c (the cache: entries, locks, images, pruning) share.
 */
#ifndef CUBICLE_TEMPLATE_INTERNAL_H
#define CUBICLE_TEMPLATE_INTERNAL_H

#include <limits.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "guest-net.h"
#include "layer.h"
#include "template.h"

/* Bumped when a build's procedure changes what a layer holds (its steps,
 * the cleanup, layer_copy's rules): every layer's key changes with it. */
#define TPL_BUILDER_VERSION "1"
/* Bumped when an image is assembled differently from a layer. */
#define TPL_IMAGE_VERSION "1"

#define TPL_KEY_HEX 65 /* sha256 in hex, with its NUL */
#define TPL_DIR_MAX                                                                                \
	1024		/* the directories kept (cache, images, a base image): longer is refused   \
			 */
#define TPL_ENTRY    32 /* "tpl-layer-" / "tpl-image-" + 16 hex */
#define TPL_LOG_MAX  (4 << 20)	 /* bytes of a build's log kept */
#define TPL_LOG_READ (256 << 10) /* bytes a log request answers at most */

/* A checked recipe: the canonical object (sorted keys, only what is set),
 * which is what the cache key hashes. */
struct tpl_recipe {
	char name[64];
	char base[16];	 /* sandbox | desktop */
	json_t *spec;	 /* {"base", "apt"?, "pip"?, "npm"?, "run"?, "files"?} (owned) */
	char *canonical; /* spec as compact JSON with sorted keys (owned) */
	bool builtin;
	/* A built-in recipe may copy a host directory into the image (the
	 * `data` template's pinned npm packages): absolute paths, or "". */
	char copy_from[TPL_DIR_MAX], copy_to[256];
};

/* ---- template-recipe.c ------------------------------------------------------------ */

/*
 * Checks a recipe into r: the API's body (builtin_dir NULL: name, base,
 * apt, pip, npm, run, files, workspace), or a built-in recipe's file
 * (builtin_dir: its directory; "copy" and "about" too). ERR_INVALID naming
 * the field at fault; nothing allocated then.
 */
int tpl_recipe_parse(const json_t *params, const char *builtin_dir, struct tpl_recipe *r,
		     struct err *e);
void tpl_recipe_free(struct tpl_recipe *r);
/* sha256 of data, in hex. */
void tpl_sha256_hex(const void *data, size_t len, char out[TPL_KEY_HEX]);

/* The templates of one cubicled (or of `cubicled --build-templates`, with
 * no core and no store). */
struct core_templates {
	struct core_template_config cfg;
	struct core *core;	  /* NULL in --build-templates */
	struct store *store;	  /* NULL in --build-templates */
	char cache[TPL_DIR_MAX];  /* layers and images: the base images' cache by default */
	char images[TPL_DIR_MAX]; /* <images>/<base> are the base images */
	pthread_mutex_t lock;	  /* jobs and states */
	pthread_cond_t idle;	  /* broadcast when a job or a prune ends */
	struct tpl_job *jobs;
	struct tpl_state *states;
	int pruning; /* jobs out of the list still pruning the cache: closing waits */
	bool closing;
};

/* A template's state in memory, for ?wait=ready without the store. */
struct tpl_state {
	struct tpl_state *next;
	char id[40];
	enum template_state state;
};

/* One build in flight: a layer key and the templates waiting for it. */
struct tpl_job {
	struct tpl_job *next;
	struct core_templates *t;
	struct tpl_recipe recipe;
	char layer_key[TPL_KEY_HEX], image_key[TPL_KEY_HEX];
	char base_image[TPL_DIR_MAX]; /* the base image's resolved directory */
	char workspace[40];	      /* whose egress policy the build runs under ("" global) */
	struct guest_net_list allow, deny;
	int log_fd; /* the build's log, appended; -1 = none */
	char log_path[TPL_DIR_MAX];
	off_t log_size;	 /* bytes written so far (capped at TPL_LOG_MAX) */
	bool log_stderr; /* --build-templates: stage lines on stderr too */
	int64_t start_ms, deadline_ms;
	/* Under t->lock: */
	char (*rows)[40]; /* the templates this build makes ready */
	size_t nrows, caprows;
	bool cancel;
	/* The result, written by the job's thread before it ends. */
	int rc;
	struct err err;
	char image_entry[TPL_ENTRY];
	uint64_t layer_bytes;
	int64_t build_ms;
};

/* ---- template.c --------------------------------------------------------------------- */

/* Appends one "[  12.3s] line" to the job's log (and stderr when asked). */
void tpl_log(struct tpl_job *j, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Appends a guest's output to the log, made valid UTF-8 (bad bytes become
 * U+FFFD, control characters but tab and newline are dropped). */
void tpl_log_raw(struct tpl_job *j, const char *bytes, size_t len);
/* Whether the job should stop: canceled, or every template waiting for it
 * deleted, or cubicled closing. */
bool tpl_job_canceled(struct tpl_job *j);

/* ---- template-build.c --------------------------------------------------------------- */

/*
 * Builds the job's layer into dest (created): boots a container computer of
 * the base image under <cache>/.tpl-build-*, runs the recipe in it as the
 * guest's root through envd, stops it and copies out its overlay upper dir
 * (export_layer). The computer is destroyed whatever happens.
 */
int tpl_build_layer(struct tpl_job *j, const char *workdir, const char *dest,
		    struct layer_stats *st, struct err *e);
/* Destroys a build computer left in workdir by a build that was killed
 * (its workdir/computer.json), so its processes and uid range go. */
void tpl_build_cleanup(const char *workdir);

/* ---- template-cache.c --------------------------------------------------------------- */

/* "tpl-layer-<16>" and "tpl-image-<16>" of a key. */
void tpl_entry_name(const char *kind, const char *key, char out[TPL_ENTRY]);
/* Whether cache entry `entry` is complete (its manifest.json is there);
 * touches it (an entry's mtime is its last use, for pruning). */
bool tpl_cache_has(const struct core_templates *t, const char *entry);
/*
 * The whole build of a job: the layer (from the cache, else built under
 * the key's lock), then the image over the job's base (likewise). Fills
 * j->image_entry, j->layer_bytes, j->build_ms; -1 with e.
 */
int tpl_cache_build(struct tpl_job *j, struct err *e);
/* What the layer of image entry `image` adds, in bytes: the image's
 * manifest's layer_bytes (image NULL: not asked), else layer entry `layer`'s manifest's (0 when
 * neither says: an image made before layer_bytes whose layer was pruned). */
uint64_t tpl_layer_bytes(const struct core_templates *t, const char *image, const char *layer);
/* Makes image entry's disk.ext4 (a microVM's /dev/vda) if it has none. */
int tpl_image_disk(struct core_templates *t, const char *entry, struct err *e);
/* Removes unused layers and images past --template-cache-keep (the newest
 * are kept, and any a template of this cubicled or a running container
 * uses, and job j's, which was just built or hit). */
void tpl_cache_prune(struct core_templates *t, const struct tpl_job *j);
/* Build directories of builds killed outright (their key's lock is free):
 * their computers destroyed, their files removed; and the .tpl-trash-*
 * of removals cut short. */
void tpl_cache_sweep(struct core_templates *t);
/* The base image's identity: its manifest's "base" (the package tree, which
 * a new envd does not change) for the layer key, and its "hash" for the
 * image key; its resolved directory. */
int tpl_base_image(const struct core_templates *t, const char *base, char dir[TPL_DIR_MAX],
		   char tree[TPL_KEY_HEX], char hash[TPL_KEY_HEX], struct err *e);

#endif
