/*
 * template-build: a template's layer, built in a container computer of its
 * base image.
 *
 * The recipe is tenant input and hostile. It never runs on the host: the
 * build boots a container computer (driver_find("container")) of the base
 * image with envd as the guest's root (--user root: root of the
 * computer's user namespace, an unprivileged uid range on the host, under
 * the guest seccomp filter, the cgroups of the build's size and the egress
 * policy of the workspace), and runs each step through envd:
 *
 *   1. files   written as root (write_file)
 *   2. apt     apt-get update && apt-get install --no-install-recommends
 *   3. copy    (built-in recipes only) a host directory, as a tar
 *   4. pip     pip install: the user's default virtual environment
 *   5. npm     npm install -g: the user's npm prefix
 *   6. run     each shell step
 *
 * Every step runs as root with the user's home (HOME, the working
 * directory) and environment (/etc/cubicle/user.env: the virtual
 * environment and the npm prefix first on PATH), and everything under
 * /home/user is the user's at the end: what a recipe installs for the
 * user's tools lands where they look. The build is told the operator's
 * setup (CA certificates, pip index, npm registry) as every computer is.
 *
 * A step runs detached in the guest (setsid) writing its output to a file
 * under /tmp; the build reads the new bytes of that file every half second
 * (the log a person follows) and its exit code when it ends. The build's
 * deadline and a cancel (a delete, cubicled stopping) end the step by
 * stopping the computer. Then the computer is stopped and its writable
 * layer copied out (export_layer: layer.h's rules), and destroyed.
 *
 * The build computer lives in the build's directory in the cache
 * (<work>/computer), its driver state in <work>/computer.json, so whoever
 * finds the directory of a killed build (tpl_build_cleanup) can destroy it.
 */
#include "core-internal.h"
#include "template-internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base64.h"
#include "clock.h"
#include "drvutil.h"
#include "ident.h"

#define TPL_BUILD_MEMORY_MB 2048
#define TPL_BUILD_MILLICPUS 2000
#define TPL_BUILD_PIDS	    4096
#define TPL_POLL_MS	    500
#define TPL_CHUNK	    (192 << 10) /* bytes of output read per poll */
#define TPL_GUEST_DIR	    "/tmp/.cubicle-build"
#define TPL_TAIL	    600 /* bytes of a failed step's output quoted in its error */
/* Steps run as root with the user's home and environment (envd gives a
 * command the image's /etc/cubicle/user.env: the default virtual
 * environment and the npm prefix first on PATH), so what pip and npm
 * install lands where the user's tools find it; the home is the user's
 * again at the end. */
#define TPL_HOME "/home/user"

/* The build computer and the talk with its envd. */
struct tpl_guest {
	struct tpl_job *j;
	const struct driver_ops *ops;
	struct driver_computer dc;
	char id[40], dir[TPL_DIR_MAX + 96], state_path[TPL_DIR_MAX + 96], image[TPL_DIR_MAX];
	char token[64], address[320];
	int step, nsteps;
	char tail[TPL_TAIL + 1]; /* the end of the last step's output */
	size_t tail_len;
};

/* ---- the computer ----------------------------------------------------------------- */

/* computer.json: what tpl_build_cleanup needs to destroy the computer. */
static void tpl_guest_save(struct tpl_guest *g)
{
	json_t *j = json_pack("{s:s, s:s, s:s, s:O}", "id", g->id, "dir", g->dir, "image", g->image,
			      "state", g->dc.state);
	if (j) {
		char tmp[PATH_MAX + 48];
		snprintf(tmp, sizeof tmp, "%s.new", g->state_path);
		if (json_dump_file(j, tmp, JSON_COMPACT) == 0)
			rename(tmp, g->state_path);
	}
	json_decref(j);
}

static void tpl_guest_destroy(struct tpl_guest *g)
{
	struct err e = {0};
	if (g->ops->destroy(&g->dc, &e) < 0)
		tpl_log(g->j, "could not remove the build's computer %s: %s", g->id, e.message);
	rmdir(g->dir);
	unlink(g->state_path);
}

void tpl_build_cleanup(const char *workdir)
{
	char path[PATH_MAX + 32];
	snprintf(path, sizeof path, "%s/computer.json", workdir);
	json_t *j = json_load_file(path, 0, NULL);
	const char *id = json_string_value(json_object_get(j, "id"));
	const char *dir = json_string_value(json_object_get(j, "dir"));
	const char *image = json_string_value(json_object_get(j, "image"));
	json_t *state = json_object_get(j, "state");
	const struct driver_ops *ops = driver_find("container");
	if (ops && id && dir && image && json_is_object(state)) {
		struct driver_computer dc = {
		    .id = id, .kind = "sandbox", .image_dir = image, .dir = dir, .state = state};
		struct err e = {0};
		if (ops->destroy(&dc, &e) < 0)
			fprintf(stderr,
				"cubicled: templates: cannot remove build computer %s: %s\n", id,
				e.message);
	}
	json_decref(j);
}

/* Boots the build computer: a sandbox of the base image (a desktop's image
 * too: no session is started), envd as the guest's root. */
static int tpl_guest_boot(struct tpl_guest *g, const char *work, struct err *e)
{
	struct tpl_job *j = g->j;
	g->ops = driver_find("container");
	if (!g->ops || !g->ops->export_layer)
		return err_set(e, ERR_UNAVAILABLE,
			       "templates are built by the container driver, "
			       "which this cubicled does not have");
	if (driver_why(g->ops)[0])
		return err_set(e, ERR_UNAVAILABLE,
			       "templates are built in containers, and they cannot run here: %s",
			       driver_why(g->ops));
	char hex[24];
	if (ident_random_hex(hex, 8, e) < 0 || ident_random_hex(g->token, 24, e) < 0)
		return -1;
	snprintf(g->id, sizeof g->id, "tb-%s", hex);
	tpl_log(j, "build computer %s: a container of the %s image (envd as the guest's root)",
		g->id, j->recipe.base);
	snprintf(g->dir, sizeof g->dir, "%s/computer", work);
	snprintf(g->state_path, sizeof g->state_path, "%s/computer.json", work);
	snprintf(g->image, sizeof g->image, "%s", j->base_image);
	if (mkdir(g->dir, 0700) < 0)
		return err_set(e, ERR_UNAVAILABLE, "template build: cannot create %s: %s", g->dir,
			       strerror(errno));
	g->dc = (struct driver_computer){
	    .id = g->id,
	    .kind = "sandbox",
	    .image_dir = g->image,
	    .dir = g->dir,
	    .envd_token = g->token,
	    .envd_user = "root",
	    .width = 1280,
	    .height = 800,
	    .millicpus = TPL_BUILD_MILLICPUS,
	    .memory_mb = TPL_BUILD_MEMORY_MB,
	    /* Twice the layer's cap: apt keeps the packages it downloads
	     * until they are installed. Sparse: it costs what is written. */
	    .disk_mb = 2 * j->t->cfg.max_mb + 512,
	    .pids_max = TPL_BUILD_PIDS,
	    .state = json_object(),
	    .egress_allow = &j->allow,
	    .egress_deny = &j->deny,
	};
	tpl_guest_save(g);
	if (g->ops->create(&g->dc, e) < 0)
		return -1;
	tpl_guest_save(g);
	int rc = g->ops->start(&g->dc, e);
	tpl_guest_save(g);
	if (rc < 0 || g->ops->envd_address(&g->dc, g->address, sizeof g->address, e) < 0)
		return -1;
	/* envd answers once it listens; a sandbox is ready at once. */
	for (int64_t until = clock_wall_ms() + 30000;; clock_sleep_ms(20)) {
		struct envd_reply r;
		struct err he = {0};
		int ok = envd_health(g->address, g->token, 2000, &r, &he) == 0 && r.status == 200;
		envd_reply_free(&r);
		if (ok)
			break;
		if (clock_wall_ms() > until)
			return err_set(e, ERR_UNAVAILABLE,
				       "the build's computer did not answer within 30 s: %s",
				       he.message);
	}
	/* What every computer is told at its start (guest-setup.h): the
	 * operator's CA certificates, pip index and npm registry, so a build
	 * fetches what a computer could. */
	const char *setup = j->t->cfg.guest_setup;
	if (!setup || !g->ops->guest_setup)
		return 0;
	struct envd_reply r;
	struct err se = {0};
	int src = envd_setup(g->address, g->token, setup, strlen(setup), 30000, &r, &se);
	if (src == 0 && r.status != 200)
		src = err_set(&se, ERR_UNAVAILABLE, "its agent answered %d", r.status);
	envd_reply_free(&r);
	return src < 0 ? err_set(e, ERR_UNAVAILABLE,
				 "setting up the build's computer (CA certificates, package "
				 "index) failed: %s",
				 se.message)
		       : 0;
}

/* ---- envd -------------------------------------------------------------------------- */

/* One action; *out its JSON answer (200 only). */
static int tpl_guest_call(struct tpl_guest *g, const char *action, json_t *body, long timeout_s,
			  json_t **out, struct err *e)
{
	char *text = json_dumps(body, JSON_COMPACT);
	json_decref(body);
	if (!text)
		return err_set(e, ERR_INTERNAL, "out of memory");
	struct envd_reply r;
	int rc = envd_action(g->address, g->token, action, text, strlen(text), timeout_s, &r, e);
	free(text);
	if (rc < 0) {
		envd_reply_free(&r);
		return err_set(e, e->code, "the build's computer stopped answering (%s)",
			       e->message);
	}
	json_t *j = json_loadb(r.body ? r.body : "", r.body_len, 0, NULL);
	if (r.status != 200) {
		const char *msg =
		    json_string_value(json_object_get(json_object_get(j, "error"), "message"));
		rc = err_set(e, ERR_UNAVAILABLE, "the build's computer refused %s (%d): %.300s",
			     action, r.status, msg ? msg : "no message");
		json_decref(j);
	} else if (!json_is_object(j)) {
		rc = err_set(e, ERR_BAD_GATEWAY, "the build's computer answered %s with no JSON",
			     action);
		json_decref(j);
	} else {
		*out = j;
	}
	envd_reply_free(&r);
	return rc;
}

/* A bash command as root; its exit code in *code, stdout in *out (owned). */
static int tpl_guest_bash(struct tpl_guest *g, const char *cmd, long timeout_s, int *code,
			  char **out, struct err *e)
{
	json_t *a = NULL;
	if (tpl_guest_call(g, "bash",
			   json_pack("{s:s, s:i, s:s, s:{s:s}}", "command", cmd, "timeout_s",
				     (int)timeout_s, "cwd", TPL_HOME, "env", "HOME", TPL_HOME),
			   timeout_s + 30, &a, e) < 0)
		return -1;
	json_t *ec = json_object_get(a, "exit_code");
	*code = json_is_integer(ec) ? (int)json_integer_value(ec) : -1;
	if (out)
		*out = strdup(json_string_value(json_object_get(a, "stdout")) ?: "");
	json_decref(a);
	return out && !*out ? err_set(e, ERR_INTERNAL, "out of memory") : 0;
}

static int tpl_guest_write(struct tpl_guest *g, const char *path, const char *content, size_t len,
			   const char *mode, struct err *e)
{
	json_t *a = NULL;
	int rc = tpl_guest_call(
	    g, "write_file",
	    json_pack("{s:s, s:s%, s:s}", "path", path, "content", content, len, "mode", mode), 60,
	    &a, e);
	json_decref(a);
	return rc;
}

/* ---- steps ------------------------------------------------------------------------- */

static void tpl_tail_add(struct tpl_guest *g, const char *bytes, size_t len)
{
	if (len >= TPL_TAIL) {
		memcpy(g->tail, bytes + len - TPL_TAIL, TPL_TAIL);
		g->tail_len = TPL_TAIL;
	} else {
		size_t keep = g->tail_len + len > TPL_TAIL ? TPL_TAIL - len : g->tail_len;
		memmove(g->tail, g->tail + g->tail_len - keep, keep);
		memcpy(g->tail + keep, bytes, len);
		g->tail_len = keep + len;
	}
	g->tail[g->tail_len] = 0;
}

/* The last lines of the step's output on one line, for its error. */
static void tpl_tail_line(const struct tpl_guest *g, char *out, size_t len)
{
	size_t n = 0;
	const char *s = g->tail;
	while (*s == '\n' || (*s & 0xc0) == 0x80) /* a cut character or line */
		s++;
	for (; *s && n + 1 < len; s++)
		out[n++] = *s == '\n' ? '|' : ((unsigned char)*s < 0x20 ? ' ' : *s);
	while (n > 0 && (out[n - 1] == '|' || out[n - 1] == ' '))
		n--;
	out[n] = 0;
}

/* Stops the computer when the build is over its time or canceled, so the
 * step's processes end; the error says which. */
static int tpl_step_over(struct tpl_guest *g, struct err *e)
{
	struct tpl_job *j = g->j;
	if (tpl_job_canceled(j))
		return err_set(e, ERR_CONFLICT,
			       "the build was stopped (its template was deleted, "
			       "or cubicled is stopping)");
	if (clock_wall_ms() > j->deadline_ms)
		return err_set(e, ERR_TIMEOUT,
			       "the build took longer than --template-build-timeout (%d s), in "
			       "step %d",
			       j->t->cfg.timeout_s, g->step);
	return 0;
}

/*
 * Runs `script` (bash, as root) as the next step, detached in the guest,
 * its output streamed into the log; 0 when it exits 0.
 */
static int tpl_step(struct tpl_guest *g, const char *title, const char *script, struct err *e)
{
	struct tpl_job *j = g->j;
	g->step++;
	g->tail_len = 0;
	g->tail[0] = 0;
	tpl_log(j, "step %d of %d: %s", g->step, g->nsteps, title);
	char path[96], cmd[1024];
	snprintf(path, sizeof path, TPL_GUEST_DIR "/%d.sh", g->step);
	if (tpl_guest_write(g, path, script, strlen(script), "0700", e) < 0)
		return -1;
	snprintf(cmd, sizeof cmd,
		 "setsid -f bash -c 'bash " TPL_GUEST_DIR "/%d.sh >" TPL_GUEST_DIR
		 "/%d.log 2>&1 </dev/null; echo $? >" TPL_GUEST_DIR
		 "/%d.rc.new && mv " TPL_GUEST_DIR "/%d.rc.new " TPL_GUEST_DIR
		 "/%d.rc' </dev/null >/dev/null 2>&1",
		 g->step, g->step, g->step, g->step, g->step);
	int code;
	if (tpl_guest_bash(g, cmd, 30, &code, NULL, e) < 0)
		return -1;
	if (code != 0)
		return err_set(e, ERR_UNAVAILABLE, "step %d could not start (exit %d)", g->step,
			       code);
	long long off = 0;
	int rc_step = -1;
	for (;;) {
		if (tpl_step_over(g, e) < 0)
			return -1;
		snprintf(cmd, sizeof cmd,
			 "f=" TPL_GUEST_DIR "/%d; r=$(cat $f.rc 2>/dev/null); tail -c +%lld $f.log "
			 "2>/dev/null | head -c %d | base64 -w0; echo; echo \"$r\"",
			 g->step, off + 1, TPL_CHUNK);
		char *out = NULL;
		if (tpl_guest_bash(g, cmd, 30, &code, &out, e) < 0)
			return -1;
		char *nl = strchr(out, '\n');
		size_t blen = nl ? (size_t)(nl - out) : strlen(out), n = 0;
		unsigned char *bytes = blen ? base64_decode(out, blen, &n) : NULL;
		if (bytes && n) {
			tpl_log_raw(j, (const char *)bytes, n);
			tpl_tail_add(g, (const char *)bytes, n);
			off += (long long)n;
		}
		free(bytes);
		/* The exit code was read before the output: once it is there
		 * and the output read is short, all of it is in. */
		bool done = nl && nl[1] >= '0' && nl[1] <= '9' && n < TPL_CHUNK;
		if (done)
			rc_step = atoi(nl + 1);
		free(out);
		if (done)
			break;
		if (n < TPL_CHUNK)
			clock_sleep_ms(TPL_POLL_MS);
	}
	if (rc_step == 0)
		return 0;
	/* The message ends with as much of the output's end as fits in it. */
	char tail[TPL_TAIL + 1], head[sizeof e->message];
	tpl_tail_line(g, tail, sizeof tail);
	int n = snprintf(head, sizeof head, "step %d of %d (%.120s) failed with exit code %d%s",
			 g->step, g->nsteps, title, rc_step, tail[0] ? ": " : "");
	size_t room = n > 0 && (size_t)n < sizeof head ? sizeof head - 1 - (size_t)n : 0;
	const char *t = tail;
	if (strlen(t) > room) {
		t += strlen(t) - room;
		while (*t && (*t & 0xc0) == 0x80) /* not in the middle of a character */
			t++;
	}
	return err_set(e, ERR_INVALID, "%s%s", head, t);
}

/* The words of a list as one shell-quoted string (the API checked that
 * they hold no quote). */
static char *tpl_words(const json_t *list)
{
	size_t len = 1, i;
	json_t *v;
	json_array_foreach(list, i, v) len += json_string_length(v) + 3;
	char *s = calloc(1, len);
	if (!s)
		return NULL;
	json_array_foreach(list, i, v)
	{
		strcat(s, i ? " '" : "'");
		strcat(s, json_string_value(v));
		strcat(s, "'");
	}
	return s;
}

/* "apt-get install jq curl" (cut) for a step's title. */
static void tpl_title(char *out, size_t len, const char *what, const json_t *list)
{
	size_t n = (size_t)snprintf(out, len, "%s", what), i;
	json_t *v;
	json_array_foreach(list, i, v)
	{
		if (n + 2 >= len)
			break;
		n += (size_t)snprintf(out + n, len - n, " %s", json_string_value(v));
	}
	if (n >= len && len > 4)
		memcpy(out + len - 4, "...", 4);
}

/* Writes the recipe's files; those under /home/user become the user's. */
static int tpl_step_files(struct tpl_guest *g, const json_t *files, struct err *e)
{
	const char *path;
	json_t *content;
	g->step++;
	tpl_log(g->j, "step %d of %d: %zu files", g->step, g->nsteps, json_object_size(files));
	json_object_foreach((json_t *)files, path, content)
	{
		tpl_log(g->j, "  %s (%zu bytes)", path, json_string_length(content));
		if (tpl_guest_write(g, path, json_string_value(content),
				    json_string_length(content), "0644", e) < 0)
			return err_set(e, e->code, "file %s: %s", path, e->message);
	}
	return 0; /* those under /home/user become the user's at the end */
}

/* The built-in recipe's host directory, as a tar the guest unpacks. */
static int tpl_step_copy(struct tpl_guest *g, const char *work, struct err *e)
{
	struct tpl_job *j = g->j;
	char tar[PATH_MAX + 16], log[PATH_MAX + 16], script[1024];
	snprintf(tar, sizeof tar, "%s/copy.tar", work);
	snprintf(log, sizeof log, "%s/tar.log", work);
	char *argv[] = {"tar", "-C", j->recipe.copy_from, "-cf", tar, ".", NULL};
	if (drv_run(argv, log, "template build: packing the built-in files", e) < 0)
		return -1;
	int fd = open(tar, O_RDONLY | O_CLOEXEC);
	struct stat st;
	if (fd < 0 || fstat(fd, &st) < 0) {
		if (fd >= 0)
			close(fd);
		return err_set(e, ERR_UNAVAILABLE, "template build: %s: %s", tar, strerror(errno));
	}
	tpl_log(j, "copying %s (%.1f MiB) to %s", j->recipe.copy_from,
		(double)st.st_size / 1048576.0, j->recipe.copy_to);
	struct envd_reply r;
	int rc = envd_upload(g->address, g->token, TPL_GUEST_DIR "/copy.tar", fd,
			     (uint64_t)st.st_size, &r, e);
	close(fd);
	unlink(tar);
	if (rc == 0 && r.status != 200)
		rc = err_set(e, ERR_UNAVAILABLE, "the build's computer refused the upload (%d)",
			     r.status);
	envd_reply_free(&r);
	if (rc < 0)
		return -1;
	snprintf(script, sizeof script,
		 "set -e\nmkdir -p '%s'\ntar -xf " TPL_GUEST_DIR "/copy.tar -C '%s' "
		 "--no-same-owner\nrm " TPL_GUEST_DIR "/copy.tar\n",
		 j->recipe.copy_to, j->recipe.copy_to);
	char title[300];
	snprintf(title, sizeof title, "unpack into %s", j->recipe.copy_to);
	return tpl_step(g, title, script, e);
}

/* Every step of the recipe, in order. */
static int tpl_steps(struct tpl_guest *g, const char *work, struct err *e)
{
	const json_t *spec = g->j->recipe.spec;
	json_t *files = json_object_get(spec, "files"), *apt = json_object_get(spec, "apt"),
	       *pip = json_object_get(spec, "pip"), *npm = json_object_get(spec, "npm"),
	       *run = json_object_get(spec, "run");
	g->nsteps = (files ? 1 : 0) + (apt ? 1 : 0) + (g->j->recipe.copy_from[0] ? 1 : 0) +
		    (pip ? 1 : 0) + (npm ? 1 : 0) + (int)json_array_size(run) + 1;
	int code;
	if (tpl_guest_bash(g, "mkdir -p -m 0700 " TPL_GUEST_DIR, 30, &code, NULL, e) < 0)
		return -1;
	if (files && tpl_step_files(g, files, e) < 0)
		return -1;
	char title[300];
	char *words = NULL, *script = NULL;
	int rc = 0;
	if (apt) {
		words = tpl_words(apt);
		tpl_title(title, sizeof title, "apt-get install", apt);
		if (words && asprintf(&script,
				      /* Debian's apt-get, not the user's helper
				       * (/usr/local/bin/apt-get): the build is root. */
				      "export DEBIAN_FRONTEND=noninteractive\n"
				      "/usr/bin/apt-get update -q || exit\n"
				      "/usr/bin/apt-get install -y -q --no-install-recommends "
				      "-o Dpkg::Use-Pty=0 %s\n",
				      words) < 0)
			script = NULL;
		rc = script ? tpl_step(g, title, script, e) : err_set(e, ERR_INTERNAL, "oom");
		free(words), free(script), words = script = NULL;
	}
	if (rc == 0 && g->j->recipe.copy_from[0])
		rc = tpl_step_copy(g, work, e);
	if (rc == 0 && pip) {
		words = tpl_words(pip);
		tpl_title(title, sizeof title, "pip install", pip);
		/* The user's pip: its default virtual environment (user.env). */
		if (words && asprintf(&script,
				      "exec pip install --no-input --no-cache-dir "
				      "--root-user-action=ignore %s\n",
				      words) < 0)
			script = NULL;
		rc = script ? tpl_step(g, title, script, e) : err_set(e, ERR_INTERNAL, "oom");
		free(words), free(script), words = script = NULL;
	}
	if (rc == 0 && npm) {
		words = tpl_words(npm);
		tpl_title(title, sizeof title, "npm install -g", npm);
		/* Into the user's npm prefix (~/.npm-global, on its PATH). */
		if (words && asprintf(&script,
				      "exec npm install -g --no-audit --no-fund "
				      "--no-update-notifier %s\n",
				      words) < 0)
			script = NULL;
		rc = script ? tpl_step(g, title, script, e) : err_set(e, ERR_INTERNAL, "oom");
		free(words), free(script), words = script = NULL;
	}
	size_t i;
	json_t *v;
	json_array_foreach(run, i, v)
	{
		if (rc < 0)
			break;
		snprintf(title, sizeof title, "run: %.200s", json_string_value(v));
		for (char *p = title; *p; p++)
			if (*p == '\n' || *p == '\t')
				*p = ' ';
		rc = tpl_step(g, title, json_string_value(v), e);
	}
	/* What a build leaves that no computer needs. */
	if (rc == 0)
		rc = tpl_step(g,
			      "clean up (apt lists and downloads, caches); the home is the user's",
			      "rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin "
			      "/var/cache/apt/archives/*.deb /root/.cache /root/.npm " TPL_HOME
			      "/.cache/pip " TPL_HOME "/.npm/_cacache /var/tmp/*\n"
			      "chown -R -h user:user " TPL_HOME "\n",
			      e);
	return rc;
}

int tpl_build_layer(struct tpl_job *j, const char *workdir, const char *dest,
		    struct layer_stats *st, struct err *e)
{
	struct tpl_guest g;
	memset(&g, 0, sizeof g);
	g.j = j;
	int rc = tpl_guest_boot(&g, workdir, e);
	if (rc == 0)
		rc = tpl_steps(&g, workdir, e);
	if (rc < 0 && e->code == ERR_INVALID) {
		/* A step that failed because the disk was full: say so. */
		int code;
		char *out = NULL;
		if (tpl_guest_bash(&g, "df -P -m / | awk 'NR==2 {print $4}'", 10, &code, &out,
				   NULL) == 0 &&
		    atoll(out) < 64)
			err_set(
			    e, ERR_TOO_LARGE,
			    "the build filled its disk (%lld MiB): the template would be larger "
			    "than --template-max-mb (%lld MiB) allows; %s",
			    2 * j->t->cfg.max_mb + 512, j->t->cfg.max_mb, e->message);
		free(out);
	}
	if (g.ops && g.dc.state) {
		struct err se = {0};
		if (g.ops->stop(&g.dc, &se) < 0 && rc == 0)
			rc = err_set(e, se.code, "stopping the build's computer: %s", se.message);
		tpl_guest_save(&g);
	}
	if (rc == 0) {
		tpl_log(j, "copying the layer out of the build's disk");
		rc = g.ops->export_layer(&g.dc, dest, (uint64_t)j->t->cfg.max_mb << 20, st, e);
		if (rc < 0 && e->code == ERR_TOO_LARGE)
			err_set(e, ERR_TOO_LARGE,
				"%s: the template is over --template-max-mb (%lld "
				"MiB)",
				e->message, j->t->cfg.max_mb);
	}
	if (g.ops && g.dc.state) {
		tpl_guest_destroy(&g);
		json_decref(g.dc.state);
	}
	return rc;
}
