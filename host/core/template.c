/*
 * template: the API side of templates (template.h): recipes checked and
 * made canonical, the rows, the builds in flight and the templates
 * waiting for them, ?wait=ready, the build's log, and recovery.
 *
 * One build per layer key at a time: a second template with the same
 * recipe (same base, same egress policy) joins the build in flight, and
 * one that the cache already holds is ready at once. Builds run on
 * threads of their own (at most --max-template-builds; past it a create is
 * a 429) and end by writing every waiting template's row.
 *
 * Locks: t->lock (jobs, states; taken alone, or before the store's lock,
 * never across a driver call), then c->lock only to broadcast a change to
 * the API's waiter.
 */
#include "core-internal.h"
#include "template-internal.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "ident.h"
#include "params.h"
#include "utf8.h"

#define TPL_CLOSE_WAIT_S 60

/* ---- keys ------------------------------------------------------------------------- */

/* The layer's and the image's keys of a recipe built for workspace ws. */
static int tpl_keys(struct core_templates *t, struct tpl_job *j, struct err *e)
{
	char tree[TPL_KEY_HEX], hash[TPL_KEY_HEX], allow[1024], deny[1024];
	if (tpl_base_image(t, j->recipe.base, j->base_image, tree, hash, e) < 0)
		return -1;
	guest_net_list_format(&j->allow, allow, sizeof allow);
	guest_net_list_format(&j->deny, deny, sizeof deny);
	/* What the build is told (the pip index, the npm registry and the CA
	 * certificates to reach them) decides what pip and npm fetch, as egress
	 * decides what anything may reach. */
	char setup[TPL_KEY_HEX] = "";
	if (t->cfg.guest_setup &&
	    (json_object_get(j->recipe.spec, "pip") || json_object_get(j->recipe.spec, "npm")))
		tpl_sha256_hex(t->cfg.guest_setup, strlen(t->cfg.guest_setup), setup);
	char *text = NULL;
	if (asprintf(&text,
		     "cubicle template layer %s\nbase %s\negress allow %s deny %s\nsetup %s\n%s",
		     TPL_BUILDER_VERSION, tree, allow, deny, setup, j->recipe.canonical) < 0)
		return err_set(e, ERR_INTERNAL, "out of memory");
	tpl_sha256_hex(text, strlen(text), j->layer_key);
	free(text);
	if (asprintf(&text, "cubicle template image %s\nlayer %s\nbase %s\n", TPL_IMAGE_VERSION,
		     j->layer_key, hash) < 0)
		return err_set(e, ERR_INTERNAL, "out of memory");
	tpl_sha256_hex(text, strlen(text), j->image_key);
	free(text);
	return 0;
}

/* ---- the log ----------------------------------------------------------------------- */

static void tpl_log_write(struct tpl_job *j, const char *s, size_t len, bool stage)
{
	if (j->log_fd < 0)
		return;
	/* Past the cap only stage lines are kept (a little over it). */
	if (j->log_size + (off_t)len > TPL_LOG_MAX + (stage ? 65536 : 0))
		return;
	if (!stage && j->log_size + (off_t)len > TPL_LOG_MAX - 64) {
		static const char cut[] = "\n[... the log is cut here: 4 MiB ...]\n";
		if (write(j->log_fd, cut, sizeof cut - 1) > 0)
			j->log_size += (off_t)sizeof cut - 1;
		j->log_size = TPL_LOG_MAX;
		return;
	}
	ssize_t n = write(j->log_fd, s, len);
	if (n > 0)
		j->log_size += n;
}

void tpl_log(struct tpl_job *j, const char *fmt, ...)
{
	char msg[1200];
	int64_t ms = clock_wall_ms() - j->start_ms;
	int n = snprintf(msg, sizeof msg, "[%5lld.%llds] ", (long long)(ms / 1000),
			 (long long)(ms % 1000 / 100));
	va_list ap;
	va_start(ap, fmt);
	int m = vsnprintf(msg + n, sizeof msg - (size_t)n - 1, fmt, ap);
	va_end(ap);
	size_t len = (size_t)n + (m < 0 ? 0 : (size_t)m);
	if (len > sizeof msg - 2)
		len = sizeof msg - 2;
	msg[len++] = '\n';
	tpl_log_write(j, msg, len, true);
	if (j->log_stderr)
		fprintf(stderr, "[%s %.*s", j->recipe.name, (int)len - 1, msg + 1);
}

void tpl_log_raw(struct tpl_job *j, const char *bytes, size_t len)
{
	char out[4096];
	size_t n = 0;
	for (size_t i = 0; i < len;) {
		if (n > sizeof out - 8) {
			tpl_log_write(j, out, n, false);
			n = 0;
		}
		unsigned long cp;
		size_t k = utf8_decode(bytes + i, len - i, &cp);
		if (k == 0) {
			memcpy(out + n, "\xef\xbf\xbd", 3); /* U+FFFD */
			n += 3;
			i++;
			continue;
		}
		if (cp == '\r')
			cp = i + 1 < len && bytes[i + 1] == '\n' ? 0 : '\n';
		if (cp == '\n' || cp == '\t')
			out[n++] = (char)cp;
		else if (cp >= 0x20 && cp != 0x7f) {
			memcpy(out + n, bytes + i, k);
			n += k;
		}
		i += k;
	}
	tpl_log_write(j, out, n, false);
}

/* ---- states in memory -------------------------------------------------------------- */

/* Records id's state (lock held); NULL `id` state removal when gone. */
static void tpl_state_set_locked(struct core_templates *t, const char *id,
				 enum template_state state, bool gone)
{
	struct tpl_state **pp = &t->states;
	while (*pp && strcmp((*pp)->id, id) != 0)
		pp = &(*pp)->next;
	if (gone) {
		if (*pp) {
			struct tpl_state *s = *pp;
			*pp = s->next;
			free(s);
		}
		return;
	}
	if (!*pp && (*pp = calloc(1, sizeof **pp)))
		snprintf((*pp)->id, sizeof(*pp)->id, "%s", id);
	if (*pp)
		(*pp)->state = state;
}

/* Wakes the API's waiter (it sleeps on the core's change broadcast). */
static void tpl_changed(struct core_templates *t)
{
	if (!t->core)
		return;
	pthread_mutex_lock(&t->core->lock);
	pthread_cond_broadcast(&t->core->changed);
	pthread_mutex_unlock(&t->core->lock);
}

static void tpl_state_set(struct core_templates *t, const char *id, enum template_state state,
			  bool gone)
{
	pthread_mutex_lock(&t->lock);
	tpl_state_set_locked(t, id, state, gone);
	pthread_mutex_unlock(&t->lock);
	tpl_changed(t);
}

/* ---- jobs ------------------------------------------------------------------------- */

bool tpl_job_canceled(struct tpl_job *j)
{
	struct core_templates *t = j->t;
	pthread_mutex_lock(&t->lock);
	bool c = j->cancel || t->closing || (t->store && j->nrows == 0);
	pthread_mutex_unlock(&t->lock);
	return c;
}

static int tpl_job_attach_locked(struct tpl_job *j, const char *id)
{
	if (j->nrows == j->caprows) {
		size_t cap = j->caprows ? j->caprows * 2 : 4;
		char(*more)[40] = realloc(j->rows, cap * sizeof *j->rows);
		if (!more)
			return -1;
		j->rows = more;
		j->caprows = cap;
	}
	snprintf(j->rows[j->nrows++], sizeof j->rows[0], "%s", id);
	return 0;
}

static void tpl_job_free(struct tpl_job *j)
{
	if (j->log_fd >= 0)
		close(j->log_fd);
	tpl_recipe_free(&j->recipe);
	free(j->rows);
	free(j);
}

/* <state>/templates/<id>.log */
static void tpl_log_path(const struct core_templates *t, const char *id, char *out, size_t len)
{
	snprintf(out, len, "%s/templates/%s.log", t->core ? t->core->cfg.state_dir : "/tmp", id);
}

/* The row's new state after its build. */
static void tpl_row_finish(struct core_templates *t, const struct tpl_job *j, const char *id)
{
	struct store_template row;
	if (store_template_get(t->store, id, &row, NULL) < 0)
		return; /* deleted meanwhile */
	row.state = j->rc == 0 ? TEMPLATE_READY : TEMPLATE_ERROR;
	snprintf(row.error, sizeof row.error, "%s", j->rc == 0 ? "" : j->err.message);
	snprintf(row.layer_key, sizeof row.layer_key, "%s", j->layer_key);
	snprintf(row.image, sizeof row.image, "%s", j->rc == 0 ? j->image_entry : "");
	row.size_bytes = (int64_t)j->layer_bytes;
	row.build_ms = j->build_ms;
	json_decref(row.build);
	row.build = json_object();
	struct err e = {0};
	if (store_template_update(t->store, &row, &e) < 0)
		fprintf(stderr, "cubicled: template %s: %s\n", id, e.message);
	else
		tpl_state_set(t, id, row.state, false);
	store_template_clear(&row);
}

static void *tpl_job_main(void *arg)
{
	struct tpl_job *j = arg;
	struct core_templates *t = j->t;
	tpl_log(j, "template %s: %s over the %s image (%s)", j->recipe.name,
		j->recipe.builtin ? "built-in recipe" : "recipe", j->recipe.base, j->base_image);
	tpl_log(j, "layer key %.16s, image key %.16s", j->layer_key, j->image_key);
	j->rc = tpl_cache_build(j, &j->err);
	if (j->rc == 0)
		tpl_log(j, "ready: %s (its layer %.1f MiB)", j->image_entry,
			(double)j->layer_bytes / 1048576.0);
	else
		tpl_log(j, "failed: %s", j->err.message);
	/* The prune is counted before the job leaves the list, so closing
	 * waits for it: a process that exits mid-removal leaves half an
	 * entry (the safety net: tpl_cache_prune removes through a rename). */
	pthread_mutex_lock(&t->lock);
	bool closing = t->closing;
	bool prune = j->rc == 0 && !closing;
	if (prune)
		t->pruning++;
	for (struct tpl_job **pp = &t->jobs; *pp; pp = &(*pp)->next)
		if (*pp == j) {
			*pp = j->next;
			break;
		}
	pthread_mutex_unlock(&t->lock);
	/* Stopped because cubicled is stopping: the rows stay building and
	 * the next start builds them again. */
	if (!(closing && j->rc < 0))
		for (size_t i = 0; i < j->nrows; i++)
			tpl_row_finish(t, j, j->rows[i]);
	if (prune)
		tpl_cache_prune(t, j);
	pthread_mutex_lock(&t->lock);
	if (prune)
		t->pruning--;
	pthread_cond_broadcast(&t->idle);
	pthread_mutex_unlock(&t->lock);
	tpl_job_free(j);
	return NULL;
}

/*
 * The build of row `id` (recipe r, moved into the job, for workspace ws):
 * joins the build of the same keys in flight, or starts one (at most
 * max_builds; force: past it, for recovery). t->lock held.
 */
static int tpl_job_start_locked(struct core_templates *t, struct tpl_job *proto, const char *id,
				bool force, struct err *e)
{
	int running = 0;
	for (struct tpl_job *j = t->jobs; j; j = j->next, running++)
		if (strcmp(j->layer_key, proto->layer_key) == 0 &&
		    strcmp(j->image_key, proto->image_key) == 0) {
			char from[PATH_MAX], to[PATH_MAX];
			if (tpl_job_attach_locked(j, id) < 0)
				return err_set(e, ERR_INTERNAL, "out of memory");
			/* Its log is the build's: the same file under its name. */
			tpl_log_path(t, id, to, sizeof to);
			snprintf(from, sizeof from, "%s", j->log_path);
			unlink(to);
			if (link(from, to) < 0)
				fprintf(stderr, "cubicled: template %s: log: %s\n", id,
					strerror(errno));
			tpl_recipe_free(&proto->recipe);
			return 0;
		}
	if (!force && running >= t->cfg.max_builds)
		return err_set(e, ERR_LIMIT,
			       "%d template builds are running, the most --max-template-builds "
			       "allows; retry when one ends",
			       running);
	struct tpl_job *j = calloc(1, sizeof *j);
	if (!j)
		return err_set(e, ERR_INTERNAL, "out of memory");
	*j = *proto;
	memset(&proto->recipe, 0, sizeof proto->recipe);
	j->t = t;
	j->start_ms = clock_wall_ms();
	j->deadline_ms = j->start_ms + (int64_t)t->cfg.timeout_s * 1000;
	tpl_log_path(t, id, j->log_path, sizeof j->log_path);
	j->log_fd = open(j->log_path, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0600);
	if (tpl_job_attach_locked(j, id) < 0) {
		tpl_job_free(j);
		return err_set(e, ERR_INTERNAL, "out of memory");
	}
	pthread_attr_t attr;
	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	pthread_t th;
	j->next = t->jobs;
	t->jobs = j;
	if (pthread_create(&th, &attr, tpl_job_main, j) != 0) {
		t->jobs = j->next;
		tpl_job_free(j);
		pthread_attr_destroy(&attr);
		return err_set(e, ERR_INTERNAL, "cannot start a build thread");
	}
	pthread_attr_destroy(&attr);
	return 0;
}

/* A job's recipe, keys and egress policy for workspace ws (not started). */
static int tpl_job_prepare(struct core_templates *t, struct tpl_recipe *r, const char *ws,
			   struct tpl_job *out, struct err *e)
{
	memset(out, 0, sizeof *out);
	out->log_fd = -1;
	out->recipe = *r;
	memset(r, 0, sizeof *r);
	snprintf(out->workspace, sizeof out->workspace, "%s", ws ? ws : "");
	if (t->core)
		core_egress_lists(t->core, out->workspace, &out->allow, &out->deny);
	if (tpl_keys(t, out, e) < 0) {
		tpl_recipe_free(&out->recipe);
		return -1;
	}
	return 0;
}

/* Whether the cache already holds the image of these keys; fills the
 * row's result as a finished build would. */
static bool tpl_hit(struct core_templates *t, const struct tpl_job *p, struct store_template *row)
{
	char image[TPL_ENTRY], layer[TPL_ENTRY];
	tpl_entry_name("image", p->image_key, image);
	tpl_entry_name("layer", p->layer_key, layer);
	if (!tpl_cache_has(t, image))
		return false;
	row->size_bytes = (int64_t)tpl_layer_bytes(t, image, layer);
	row->state = TEMPLATE_READY;
	row->build_ms = 0;
	snprintf(row->image, sizeof row->image, "%s", image);
	snprintf(row->layer_key, sizeof row->layer_key, "%s", p->layer_key);
	return true;
}

/* The log of a template found in the cache: where the build's is. */
static void tpl_hit_log(struct core_templates *t, const struct store_template *row)
{
	char path[PATH_MAX], layer[TPL_ENTRY], from[PATH_MAX + 64];
	tpl_log_path(t, row->id, path, sizeof path);
	tpl_entry_name("layer", row->layer_key, layer);
	snprintf(from, sizeof from, "%s/%s/build.log", t->cache, layer);
	FILE *f = fopen(path, "we");
	if (!f)
		return;
	fprintf(f,
		"[    0.0s] cache hit: %s (the same recipe over the same base image, built "
		"before); the log of that build:\n",
		row->image);
	FILE *in = fopen(from, "re");
	char buf[8192];
	size_t n;
	while (in && (n = fread(buf, 1, sizeof buf, in)) > 0)
		fwrite(buf, 1, n, f);
	if (in)
		fclose(in);
	fclose(f);
}

/* ---- JSON ------------------------------------------------------------------------- */

static void tpl_iso(int64_t ms, char out[40])
{
	time_t s = (time_t)(ms / 1000);
	struct tm tm;
	gmtime_r(&s, &tm);
	size_t n = strftime(out, 40, "%Y-%m-%dT%H:%M:%S", &tm);
	snprintf(out + n, 40 - n, ".%03dZ", (int)(ms % 1000));
}

static json_t *tpl_json(const struct store_template *row)
{
	char created[40], updated[40];
	tpl_iso(row->created_ms, created);
	tpl_iso(row->updated_ms, updated);
	json_t *recipe = json_loads(row->recipe ? row->recipe : "{}", 0, NULL);
	/* Whole MiB and seconds, rounded up (a real number would print as
	 * 2.2999999999999998); build_ms for the exact time. */
	json_t *j = json_pack(
	    "{s:s, s:s, s:s?, s:b, s:s, s:s, s:I, s:I, s:I, s:b, s:o, s:s, s:s}", "id", row->id,
	    "name", row->name, "workspace", row->workspace[0] ? row->workspace : NULL, "global",
	    row->workspace[0] == 0, "base", row->base, "state", template_state_name(row->state),
	    "size_mb", (json_int_t)((row->size_bytes + 1048575) / 1048576), "build_s",
	    (json_int_t)((row->build_ms + 999) / 1000), "build_ms", (json_int_t)row->build_ms,
	    "builtin", row->builtin, "recipe", recipe ? recipe : json_object(), "created_at",
	    created, "updated_at", updated);
	if (j && row->state == TEMPLATE_ERROR)
		json_object_set_new(j, "error", json_string(row->error));
	return j ? j : json_object();
}

/* ---- finding one -------------------------------------------------------------------- */

/* Whose templates the caller means: its own workspace, or (the admin) the
 * `workspace` it names, or the global ones (""). */
static int tpl_scope(struct core *c, const char *ws, const char *workspace, char out[40],
		     struct err *e)
{
	if (ws && workspace && strcmp(ws, workspace) != 0)
		return err_param(e, "workspace", "workspace: your key belongs to %s", ws);
	const char *w = ws ? ws : workspace ? workspace : "";
	if (*w && store_workspace_get(c->store, w, NULL, NULL) < 0)
		return err_param(e, "workspace", "workspace: no workspace %.40s", w);
	snprintf(out, 40, "%s", w);
	return 0;
}

/* Starts the build of a built-in template that was never built (a built-in
 * one is built on first use, or by `make images`), or of one whose image
 * left the cache. */
static void tpl_kick(struct core_templates *t, struct store_template *row)
{
	struct err e = {0};
	struct tpl_recipe r;
	json_t *spec = json_loads(row->recipe ? row->recipe : "{}", 0, NULL);
	if (spec)
		json_object_set_new(spec, "name", json_string(row->name));
	pthread_mutex_lock(&t->lock);
	bool running = false;
	for (struct tpl_job *j = t->jobs; j && !running; j = j->next)
		for (size_t i = 0; i < j->nrows && !running; i++)
			running = strcmp(j->rows[i], row->id) == 0;
	pthread_mutex_unlock(&t->lock);
	if (running || !spec) {
		json_decref(spec);
		return;
	}
	/* A built-in's recipe is its file's; any other is the stored one. */
	int rc;
	if (row->builtin && t->cfg.builtin_dir) {
		char path[PATH_MAX + 80];
		snprintf(path, sizeof path, "%s/%s.json", t->cfg.builtin_dir, row->name);
		json_t *file = json_load_file(path, 0, NULL);
		rc = tpl_recipe_parse(file, t->cfg.builtin_dir, &r, &e);
		json_decref(file);
	} else {
		json_object_del(spec, "copy");
		rc = tpl_recipe_parse(spec, NULL, &r, &e);
	}
	json_decref(spec);
	struct tpl_job p;
	if (rc == 0 && tpl_job_prepare(t, &r, row->workspace, &p, &e) == 0) {
		pthread_mutex_lock(&t->lock);
		rc = tpl_job_start_locked(t, &p, row->id, true, &e);
		pthread_mutex_unlock(&t->lock);
		if (rc < 0)
			tpl_recipe_free(&p.recipe);
	} else {
		rc = -1;
	}
	row->state = rc == 0 ? TEMPLATE_BUILDING : TEMPLATE_ERROR;
	snprintf(row->error, sizeof row->error, "%s", rc == 0 ? "" : e.message);
	row->image[0] = 0;
	store_template_update(t->store, row, NULL);
	tpl_state_set(t, row->id, row->state, false);
}

/* The template `name` as the caller sees it (a never-built built-in one's
 * build starts here: first use). */
static int tpl_find(struct core *c, const char *ws, const char *workspace, const char *name,
		    struct store_template *out, struct err *e)
{
	char scope[40];
	if (tpl_scope(c, ws, workspace, scope, e) < 0)
		return -1;
	if (!ident_ok(name, 63))
		return err_set(e, ERR_NOT_FOUND, "no template %.63s", name);
	if (store_template_find(c->store, scope, name, out, e) < 0)
		return -1;
	if (out->builtin && out->state == TEMPLATE_BUILDING)
		tpl_kick(c->tpl, out);
	return 0;
}

/* ---- the API ------------------------------------------------------------------------ */

int core_template_create(struct core *c, const char *ws, const json_t *params, json_t **out,
			 struct err *e)
{
	struct core_templates *t = c->tpl;
	const char *workspace = NULL;
	char scope[40];
	if (param_str(params, "workspace", &workspace, e) < 0 ||
	    tpl_scope(c, ws, workspace, scope, e) < 0)
		return -1;
	struct tpl_recipe r;
	if (tpl_recipe_parse(params, NULL, &r, e) < 0)
		return -1;
	struct store_template row = {0};
	snprintf(row.workspace, sizeof row.workspace, "%s", scope);
	snprintf(row.name, sizeof row.name, "%s", r.name);
	snprintf(row.base, sizeof row.base, "%s", r.base);
	row.recipe = strdup(r.canonical);
	row.build = json_object();
	row.state = TEMPLATE_BUILDING;
	row.builtin = false;
	struct tpl_job p;
	if (!row.recipe) {
		tpl_recipe_free(&r);
		store_template_clear(&row);
		return err_set(e, ERR_INTERNAL, "out of memory");
	}
	if (tpl_job_prepare(t, &r, scope, &p, e) < 0) {
		store_template_clear(&row);
		return -1;
	}
	snprintf(row.layer_key, sizeof row.layer_key, "%s", p.layer_key);
	bool hit = tpl_hit(t, &p, &row);
	/* The row and the build together: a build refused (429) leaves no row,
	 * a row refused (a name taken, too many) starts no build. */
	pthread_mutex_lock(&t->lock);
	int rc = store_template_insert(c->store, &row, t->cfg.max_per_workspace, e);
	if (rc == 0 && !hit && (rc = tpl_job_start_locked(t, &p, row.id, false, e)) < 0)
		store_template_delete(c->store, row.id, NULL);
	if (rc == 0)
		tpl_state_set_locked(t, row.id, row.state, false);
	pthread_mutex_unlock(&t->lock);
	if (hit || rc < 0)
		tpl_recipe_free(&p.recipe);
	if (rc == 0 && hit)
		tpl_hit_log(t, &row);
	if (rc == 0)
		*out = tpl_json(&row);
	store_template_clear(&row);
	return rc;
}

int core_template_get(struct core *c, const char *ws, const char *workspace, const char *name,
		      json_t **out, struct err *e)
{
	struct store_template row;
	if (tpl_find(c, ws, workspace, name, &row, e) < 0)
		return -1;
	*out = tpl_json(&row);
	store_template_clear(&row);
	return 0;
}

int core_template_json_by_id(struct core *c, const char *id, json_t **out, struct err *e)
{
	struct store_template row;
	if (store_template_get(c->store, id, &row, e) < 0)
		return -1;
	*out = tpl_json(&row);
	store_template_clear(&row);
	return 0;
}

int core_template_list(struct core *c, const char *ws, const char *workspace, json_t **out,
		       struct err *e)
{
	char scope[40];
	if ((ws || workspace) && tpl_scope(c, ws, workspace, scope, e) < 0)
		return -1;
	struct store_template *all = NULL;
	size_t n = 0;
	if (store_template_list(c->store, ws || workspace ? scope : NULL, &all, &n, e) < 0)
		return -1;
	json_t *arr = json_array();
	for (size_t i = 0; i < n; i++) {
		json_array_append_new(arr, tpl_json(&all[i]));
		store_template_clear(&all[i]);
	}
	free(all);
	*out = json_pack("{s:o}", "templates", arr);
	return 0;
}

/* Deletes row (its build, if only it waited for it, stops). */
static int tpl_delete_row(struct core_templates *t, const struct store_template *row, struct err *e)
{
	pthread_mutex_lock(&t->lock);
	int rc = store_template_delete(t->store, row->id, e);
	if (rc == 0) {
		/* A build it waited for goes on only for the others. */
		for (struct tpl_job *j = t->jobs; j; j = j->next)
			for (size_t i = 0; i < j->nrows; i++)
				if (strcmp(j->rows[i], row->id) == 0) {
					memmove(&j->rows[i], &j->rows[i + 1],
						(j->nrows - i - 1) * sizeof j->rows[0]);
					j->nrows--;
					break;
				}
		tpl_state_set_locked(t, row->id, row->state, true);
	}
	pthread_mutex_unlock(&t->lock);
	if (rc == 0) {
		char path[PATH_MAX];
		tpl_log_path(t, row->id, path, sizeof path);
		unlink(path);
		tpl_changed(t);
	}
	return rc;
}

int core_template_delete(struct core *c, const char *ws, const char *workspace, const char *name,
			 json_t **out, struct err *e)
{
	struct store_template row;
	if (tpl_find(c, ws, workspace, name, &row, e) < 0)
		return -1;
	int rc = 0;
	if (ws && !row.workspace[0])
		rc = err_set(e, ERR_FORBIDDEN, "template %s is global: only the admin deletes it",
			     name);
	else if (row.builtin)
		rc = err_set(e, ERR_FORBIDDEN,
			     "template %s is built in (--templates): it cannot be deleted", name);
	if (rc == 0 && (rc = tpl_delete_row(c->tpl, &row, e)) == 0)
		*out = json_pack("{s:s, s:s, s:b}", "id", row.id, "name", row.name, "deleted", 1);
	store_template_clear(&row);
	return rc;
}

void core_templates_workspace_deleted(struct core *c, const char *ws)
{
	struct store_template *all = NULL;
	size_t n = 0;
	if (store_template_list(c->store, ws, &all, &n, NULL) < 0)
		return;
	for (size_t i = 0; i < n; i++) {
		struct err e = {0};
		if (strcmp(all[i].workspace, ws) == 0 && tpl_delete_row(c->tpl, &all[i], &e) < 0)
			fprintf(stderr,
				"cubicled: workspace %s deleted, but not its template %s: %s\n", ws,
				all[i].name, e.message);
		store_template_clear(&all[i]);
	}
	free(all);
}

int core_template_log(struct core *c, const char *ws, const char *workspace, const char *name,
		      long long offset, long long max, json_t **out, struct err *e)
{
	struct store_template row;
	if (tpl_find(c, ws, workspace, name, &row, e) < 0)
		return -1;
	if (max <= 0 || max > TPL_LOG_READ)
		max = TPL_LOG_READ;
	char path[PATH_MAX];
	tpl_log_path(c->tpl, row.id, path, sizeof path);
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	struct stat st;
	long long size = fd >= 0 && fstat(fd, &st) == 0 ? (long long)st.st_size : 0;
	if (offset > size)
		offset = size;
	char *buf = malloc((size_t)max + 1);
	ssize_t n = fd >= 0 && buf ? pread(fd, buf, (size_t)max, (off_t)offset) : 0;
	if (fd >= 0)
		close(fd);
	if (!buf) {
		store_template_clear(&row);
		return err_set(e, ERR_INTERNAL, "out of memory");
	}
	size_t len = n > 0 ? (size_t)n : 0, from = 0;
	/* Whole characters only (the log is UTF-8): skip a cut one at the
	 * start, leave a cut one at the end for the next read. */
	while (from < len && ((unsigned char)buf[from] & 0xc0) == 0x80)
		from++;
	if (from > len)
		from = len;
	size_t end = len;
	for (size_t back = 1; back <= 3 && back <= len - from; back++) {
		unsigned char b = (unsigned char)buf[len - back];
		if ((b & 0xc0) == 0xc0) { /* a lead byte: is its sequence whole? */
			size_t need = b >= 0xf0 ? 4 : b >= 0xe0 ? 3 : 2;
			if (need > back)
				end = len - back;
			break;
		}
		if (b < 0x80)
			break;
	}
	if (end < from)
		end = from;
	json_t *text = json_stringn(buf + from, end - from);
	free(buf);
	*out = json_pack("{s:s, s:s, s:I, s:I, s:I, s:o}", "name", row.name, "state",
			 template_state_name(row.state), "offset", (json_int_t)offset,
			 "next_offset", (json_int_t)(offset + (long long)end), "size",
			 (json_int_t)size, "log", text ? text : json_string(""));
	store_template_clear(&row);
	return *out ? 0 : err_set(e, ERR_INTERNAL, "out of memory");
}

int core_template_wait_begin(struct core *c, const char *ws, const char *workspace,
			     const char *name, char id[40], struct err *e)
{
	struct store_template row;
	if (tpl_find(c, ws, workspace, name, &row, e) < 0)
		return -1;
	snprintf(id, 40, "%s", row.id);
	tpl_state_set(c->tpl, row.id, row.state, false);
	store_template_clear(&row);
	return 0;
}

bool core_template_wait_over(struct core *c, const char *id, enum template_state *now)
{
	struct core_templates *t = c->tpl;
	pthread_mutex_lock(&t->lock);
	struct tpl_state *s = t->states;
	while (s && strcmp(s->id, id) != 0)
		s = s->next;
	*now = s ? s->state : TEMPLATE_ERROR;
	bool over = !s || s->state != TEMPLATE_BUILDING;
	pthread_mutex_unlock(&t->lock);
	return over;
}

int core_template_resolve(struct core *c, const char *ws, const char *name, char id[40],
			  char base[16], bool *global, struct err *e)
{
	struct store_template row;
	if (tpl_find(c, ws, NULL, name, &row, e) < 0)
		return e->code == ERR_NOT_FOUND
			   ? err_param(e, "template", "template: no template %.63s", name)
			   : -1;
	int rc = 0;
	if (row.state == TEMPLATE_BUILDING)
		rc = err_set(e, ERR_CONFLICT,
			     "template %s is still building: wait for it with GET "
			     "/v1/templates/%s?wait=ready",
			     name, name);
	else if (row.state == TEMPLATE_ERROR)
		rc = err_set(e, ERR_CONFLICT, "template %s failed to build: %.600s", name,
			     row.error);
	else if (!tpl_cache_has(c->tpl, row.image)) {
		tpl_kick(c->tpl, &row);
		rc = err_set(e, ERR_CONFLICT,
			     "template %s's image is no longer in the cache: it is being built "
			     "again; wait for it with GET /v1/templates/%s?wait=ready",
			     name, name);
	}
	if (rc == 0) {
		snprintf(id, 40, "%s", row.id);
		snprintf(base, 16, "%s", row.base);
		*global = row.workspace[0] == 0;
	}
	store_template_clear(&row);
	return rc;
}

int core_template_image(struct core *c, const char *id, bool vm, char *dir, size_t len,
			struct err *e)
{
	struct store_template row;
	if (store_template_get(c->store, id, &row, e) < 0)
		return err_set(e, ERR_CONFLICT, "its template is gone");
	int rc = 0;
	if (row.state != TEMPLATE_READY)
		rc = err_set(e, ERR_CONFLICT, "its template %s is %s", row.name,
			     template_state_name(row.state));
	else if (!tpl_cache_has(c->tpl, row.image)) {
		tpl_kick(c->tpl, &row);
		rc = err_set(e, ERR_CONFLICT,
			     "its template %s's image is no longer in the cache: it is being built "
			     "again; start it once GET /v1/templates/%s?wait=ready says ready",
			     row.name, row.name);
	} else if (snprintf(dir, len, "%s/%s", c->tpl->cache, row.image) >= (int)len) {
		rc = err_set(e, ERR_INTERNAL, "the template's image path is too long");
	} else if (vm) {
		rc = tpl_image_disk(c->tpl, row.image, e);
	}
	store_template_clear(&row);
	return rc;
}

/* ---- opening, recovery, closing --------------------------------------------------- */

/* The cache: the flag's, else where the base images are. */
static int tpl_cache_dir(struct core_templates *t, struct err *e)
{
	if (t->cfg.cache_dir && *t->cfg.cache_dir) {
		if (mkdir(t->cfg.cache_dir, 0755) < 0 && errno != EEXIST)
			return err_set(e, ERR_UNAVAILABLE, "--template-cache %s: %s",
				       t->cfg.cache_dir, strerror(errno));
		if (!realpath(t->cfg.cache_dir, t->cache))
			return err_set(e, ERR_UNAVAILABLE, "--template-cache %s: %s",
				       t->cfg.cache_dir, strerror(errno));
		return 0;
	}
	static const char *const bases[] = {"sandbox", "desktop"};
	for (int i = 0; i < 2; i++) {
		char link[PATH_MAX + 16];
		snprintf(link, sizeof link, "%s/%s", t->images, bases[i]);
		if (realpath(link, t->cache)) {
			char *slash = strrchr(t->cache, '/');
			if (slash && slash != t->cache)
				*slash = 0;
			return 0;
		}
	}
	return err_set(e, ERR_UNAVAILABLE, "no image in %s to put templates beside (make images)",
		       t->images);
}

static void tpl_config_defaults(struct core_template_config *cfg)
{
	if (cfg->max_builds <= 0)
		cfg->max_builds = 2;
	if (cfg->max_per_workspace <= 0)
		cfg->max_per_workspace = 20;
	if (cfg->max_mb <= 0)
		cfg->max_mb = 4096;
	if (cfg->timeout_s <= 0)
		cfg->timeout_s = 1800;
	if (cfg->cache_keep < 0) /* unset; 0 keeps none but the ones in use */
		cfg->cache_keep = 16;
}

/* The built-in templates of --templates (NAME.json): a global row each,
 * ready when the cache has its image, else built on first use. */
static void tpl_builtin_rows(struct core_templates *t)
{
	DIR *d = t->cfg.builtin_dir ? opendir(t->cfg.builtin_dir) : NULL;
	struct dirent *de;
	while (d && (de = readdir(d))) {
		size_t n = strlen(de->d_name);
		if (n < 6 || strcmp(de->d_name + n - 5, ".json") != 0 || de->d_name[0] == '.')
			continue;
		char path[PATH_MAX + 300];
		snprintf(path, sizeof path, "%s/%s", t->cfg.builtin_dir, de->d_name);
		json_t *file = json_load_file(path, 0, NULL);
		struct tpl_recipe r;
		struct tpl_job p;
		struct err e = {0};
		if (!file || tpl_recipe_parse(file, t->cfg.builtin_dir, &r, &e) < 0 ||
		    tpl_job_prepare(t, &r, "", &p, &e) < 0) {
			fprintf(stderr, "cubicled: built-in template %s: %s\n", de->d_name,
				file ? e.message : "not valid JSON");
			json_decref(file);
			continue;
		}
		json_decref(file);
		struct store_template row = {0};
		bool exists = store_template_find(t->store, "", p.recipe.name, &row, NULL) == 0;
		if (exists && !row.builtin) {
			fprintf(stderr,
				"cubicled: built-in template %s: a global template of that name "
				"exists; it stays\n",
				p.recipe.name);
		} else {
			snprintf(row.name, sizeof row.name, "%s", p.recipe.name);
			snprintf(row.base, sizeof row.base, "%s", p.recipe.base);
			free(row.recipe);
			row.recipe = strdup(p.recipe.canonical);
			if (!row.build)
				row.build = json_object();
			row.builtin = true;
			row.error[0] = 0;
			if (!tpl_hit(t, &p, &row)) {
				row.state = TEMPLATE_BUILDING; /* on first use */
				row.image[0] = 0;
			}
			struct err we = {0};
			if ((exists ? store_template_update(t->store, &row, &we)
				    : store_template_insert(t->store, &row, 0, &we)) < 0)
				fprintf(stderr, "cubicled: built-in template %s: %s\n",
					p.recipe.name, we.message);
			else
				tpl_state_set(t, row.id, row.state, false);
			if (row.state == TEMPLATE_READY)
				tpl_hit_log(t, &row);
		}
		store_template_clear(&row);
		tpl_recipe_free(&p.recipe);
	}
	if (d)
		closedir(d);
}

int core_templates_open(struct core *c, const struct core_template_config *cfg, struct err *e)
{
	struct core_templates *t = calloc(1, sizeof *t);
	if (!t)
		return err_set(e, ERR_INTERNAL, "out of memory");
	t->cfg = *cfg;
	tpl_config_defaults(&t->cfg);
	t->core = c;
	t->store = c->store;
	snprintf(t->images, sizeof t->images, "%s", c->cfg.images_dir);
	pthread_mutex_init(&t->lock, NULL);
	pthread_cond_init(&t->idle, NULL);
	c->tpl = t;
	char dir[PATH_MAX];
	snprintf(dir, sizeof dir, "%s/templates", c->cfg.state_dir);
	mkdir(dir, 0700);
	struct err ce = {0};
	if (tpl_cache_dir(t, &ce) < 0) {
		fprintf(stderr, "cubicled: templates: %s\n", ce.message);
		snprintf(t->cache, sizeof t->cache, "%s", c->cfg.images_dir);
	} else {
		tpl_cache_sweep(t);
	}
	tpl_builtin_rows(t);
	/* Templates that were building when cubicled stopped: again. */
	struct store_template *all = NULL;
	size_t n = 0;
	if (store_template_list(c->store, NULL, &all, &n, e) < 0)
		return -1;
	for (size_t i = 0; i < n; i++) {
		tpl_state_set(t, all[i].id, all[i].state, false);
		if (all[i].state == TEMPLATE_BUILDING && !all[i].builtin) {
			fprintf(stderr, "cubicled: template %s (%s): building it again\n",
				all[i].name, all[i].id);
			tpl_kick(t, &all[i]);
		}
		store_template_clear(&all[i]);
	}
	free(all);
	return 0;
}

void core_templates_close(struct core *c)
{
	struct core_templates *t = c->tpl;
	if (!t)
		return;
	struct timespec until = clock_deadline(CLOCK_REALTIME, TPL_CLOSE_WAIT_S * 1000);
	pthread_mutex_lock(&t->lock);
	t->closing = true;
	while (t->jobs || t->pruning)
		if (pthread_cond_timedwait(&t->idle, &t->lock, &until) == ETIMEDOUT)
			break;
	bool left = t->jobs != NULL || t->pruning;
	pthread_mutex_unlock(&t->lock);
	if (left)
		fprintf(stderr, "cubicled: templates: builds still stopping after %d s\n",
			TPL_CLOSE_WAIT_S);
}

void core_templates_free(struct core *c)
{
	struct core_templates *t = c->tpl;
	if (!t)
		return;
	pthread_mutex_lock(&t->lock);
	bool left = t->jobs != NULL || t->pruning;
	pthread_mutex_unlock(&t->lock);
	if (left)
		return; /* builds or prunes still use t: the process is exiting anyway */
	while (t->states) {
		struct tpl_state *s = t->states;
		t->states = s->next;
		free(s);
	}
	pthread_cond_destroy(&t->idle);
	pthread_mutex_destroy(&t->lock);
	free(t);
	c->tpl = NULL;
}

/* ---- cubicled --build-templates ---------------------------------------------------- */

int core_templates_build_builtin(const struct core_template_config *cfg, const char *images_dir,
				 const struct guest_net_list *allow,
				 const struct guest_net_list *deny, struct err *e)
{
	struct core_templates t = {.cfg = *cfg};
	tpl_config_defaults(&t.cfg);
	snprintf(t.images, sizeof t.images, "%s", images_dir);
	pthread_mutex_init(&t.lock, NULL);
	pthread_cond_init(&t.idle, NULL);
	drivers_probe();
	int rc = tpl_cache_dir(&t, e);
	DIR *d = rc == 0 && t.cfg.builtin_dir ? opendir(t.cfg.builtin_dir) : NULL;
	if (rc == 0 && !d)
		rc = err_set(e, ERR_UNAVAILABLE, "--templates %s: %s",
			     t.cfg.builtin_dir ? t.cfg.builtin_dir : "(none)", strerror(errno));
	if (rc == 0)
		tpl_cache_sweep(&t);
	struct dirent *de;
	while (rc == 0 && (de = readdir(d))) {
		size_t n = strlen(de->d_name);
		if (n < 6 || strcmp(de->d_name + n - 5, ".json") != 0 || de->d_name[0] == '.')
			continue;
		char path[PATH_MAX + 300];
		snprintf(path, sizeof path, "%s/%s", t.cfg.builtin_dir, de->d_name);
		json_t *file = json_load_file(path, 0, NULL);
		struct tpl_recipe r;
		struct tpl_job *j = calloc(1, sizeof *j);
		if (!j || !file || tpl_recipe_parse(file, t.cfg.builtin_dir, &r, e) < 0) {
			if (file && j)
				err_set(e, e->code, "%s: %s", path, e->message);
			else
				err_set(e, ERR_INVALID, "%s: not a JSON recipe", path);
			json_decref(file);
			free(j);
			rc = -1;
			break;
		}
		json_decref(file);
		if (tpl_job_prepare(&t, &r, "", j, e) < 0) {
			free(j);
			rc = -1;
			break;
		}
		if (allow)
			guest_net_list_merge(&j->allow, allow, NULL);
		if (deny)
			guest_net_list_merge(&j->deny, deny, NULL);
		if (tpl_keys(&t, j, e) < 0) {
			tpl_job_free(j);
			rc = -1;
			break;
		}
		j->t = &t;
		j->log_stderr = true;
		j->start_ms = clock_wall_ms();
		j->deadline_ms = j->start_ms + (int64_t)t.cfg.timeout_s * 1000;
		snprintf(j->log_path, sizeof j->log_path, "/tmp/cubicle-template-XXXXXX");
		j->log_fd = mkostemp(j->log_path, O_CLOEXEC);
		tpl_log(j, "built-in template %s over the %s image", j->recipe.name,
			j->recipe.base);
		rc = tpl_cache_build(j, e);
		if (rc == 0)
			tpl_log(j, "ready: %s (its layer %.1f MiB, %.1f s)", j->image_entry,
				(double)j->layer_bytes / 1048576.0, (double)j->build_ms / 1000.0);
		else
			err_set(e, e->code, "built-in template %s: %s", j->recipe.name, e->message);
		if (j->log_fd >= 0)
			unlink(j->log_path);
		if (rc == 0)
			tpl_cache_prune(&t, j);
		tpl_job_free(j);
	}
	if (d)
		closedir(d);
	pthread_cond_destroy(&t.idle);
	pthread_mutex_destroy(&t.lock);
	return rc;
}
