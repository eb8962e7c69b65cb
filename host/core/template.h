/*
 * template: templates, images made from a recipe over a base image
 * (docs/api.md, Templates; the design is docs/templates.md).
 *
 *   POST /v1/templates {"name", "base", "apt", "pip", "npm", "run", "files"}
 *     → building → ready | error
 *
 * A recipe is tenant input and hostile: it runs in a container computer of
 * its base (the container driver's isolation: a user namespace whose root
 * is an unprivileged host uid, seccomp, cgroups, the egress policy),
 * never on the host. What the build changed (the container's overlay
 * upper dir) is copied out sanitized as the template's layer (layer.h),
 * and the layer applied onto a hard-linked copy of the base image's tree
 * is the template's image: a tree and an ext4 disk like the ones
 * rootfs/build-image makes, so both drivers boot it as they boot their
 * base, as fast. Layers and images are cached by content hash in the image
 * cache, beside the base images: the same recipe over the same base (and
 * egress policy) is built once.
 *
 * A template belongs to a workspace, or is global (the admin's, and the
 * built-in ones of --templates: rootfs/templates/). Callers are API worker
 * threads; `ws` is the caller's workspace, NULL for the admin.
 */
#ifndef CUBICLE_TEMPLATE_H
#define CUBICLE_TEMPLATE_H

#include <stdbool.h>
#include <jansson.h>

#include "err.h"
#include "store-templates.h"

struct core;

struct core_template_config {
	const char *cache_dir;	 /* where layers and images go; NULL = the base images' cache */
	const char *builtin_dir; /* the built-in recipes (NAME.json), or NULL for none */
	int max_builds;		 /* builds at once; another one is a 429: 2 */
	int max_per_workspace;	 /* templates per workspace: 20 */
	long long max_mb;	 /* a layer's files: 4096 MiB */
	int timeout_s;		 /* a build's whole time: 1800 s */
	int cache_keep; /* unused layers and images kept in the cache: 16 (-1: the default) */
	/* What every computer is told at its start (guest-setup.h: the
	 * operator's CA certificates, pip index, npm registry), the builds
	 * too; NULL = nothing. */
	const char *guest_setup;
};

/* POST /v1/templates: checks the recipe, records the template and builds it
 * in the background (or finds it in the cache: ready at once). *out is its
 * JSON; ERR_LIMIT past --max-template-builds or the workspace's count. */
int core_template_create(struct core *c, const char *ws, const json_t *params, json_t **out,
			 struct err *e);
/* GET /v1/templates/{name}: as ws sees it (the admin: `workspace`'s, or a
 * global one when NULL). */
int core_template_get(struct core *c, const char *ws, const char *workspace, const char *name,
		      json_t **out, struct err *e);
/* {"templates": [...]}: ws's own and the global ones (admin: every one, or
 * `workspace`'s and the global ones). */
int core_template_list(struct core *c, const char *ws, const char *workspace, json_t **out,
		       struct err *e);
/* DELETE: ERR_CONFLICT while a computer made from it is not deleted; a
 * build in flight is stopped. A workspace cannot delete a global one. */
int core_template_delete(struct core *c, const char *ws, const char *workspace, const char *name,
			 json_t **out, struct err *e);
/* GET .../log?offset=N: {"name","state","offset","next_offset","log"}, at
 * most max bytes of the build's log from byte offset N (the log is UTF-8;
 * next_offset is where the next poll starts). */
int core_template_log(struct core *c, const char *ws, const char *workspace, const char *name,
		      long long offset, long long max, json_t **out, struct err *e);

/* ?wait=ready: core_template_wait_begin finds the template (its id out);
 * core_template_wait_over says from memory whether it is no longer
 * building (ready, error, or gone) and fills its state. */
int core_template_wait_begin(struct core *c, const char *ws, const char *workspace,
			     const char *name, char id[40], struct err *e);
bool core_template_wait_over(struct core *c, const char *id, enum template_state *now);
/* The template's JSON by id, for the answer of a wait. */
int core_template_json_by_id(struct core *c, const char *id, json_t **out, struct err *e);

/*
 * For a create that names a template: the ready template `name` as
 * workspace ws sees it: its id, base (the computer's kind) and whether it
 * is global (the admin's or built in). ERR_CONFLICT when it is not ready (a
 * build in flight; an image gone from the cache is rebuilt), ERR_INVALID
 * (param "template") when there is none.
 */
int core_template_resolve(struct core *c, const char *ws, const char *name, char id[40],
			  char base[16], bool *global, struct err *e);
/* The image directory of template id (for a boot; vm: a microVM's, whose
 * disk.ext4 is made now if the image has none yet); ERR_CONFLICT when its
 * image is gone from the cache (a rebuild is started). */
int core_template_image(struct core *c, const char *id, bool vm, char *dir, size_t len,
			struct err *e);

/*
 * cubicled --build-templates: builds the built-in templates (or finds them
 * in the cache) and returns, printing progress on stderr; 0 when all are
 * ready. No API, no store; the egress lists are --egress-allow/--egress-deny
 * (NULL = none), which the layer's key includes.
 */
struct guest_net_list;
int core_templates_build_builtin(const struct core_template_config *cfg, const char *images_dir,
				 const struct guest_net_list *allow,
				 const struct guest_net_list *deny, struct err *e);

#endif
