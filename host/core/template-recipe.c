/*
 * template-recipe: a template's recipe, checked (docs/api.md, Templates:
 * every field's limits) and made canonical, the form its cache key
 * hashes. Tenant input: nothing of it reaches a shell unchecked (package
 * names are shaped so that they need no quoting; steps run in the build's
 * guest, never on the host) and no file path leaves the image.
 */
#include "template-internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <openssl/evp.h>

#include "ident.h"
#include "params.h"

#define TPL_MAX_PACKAGES 200
#define TPL_MAX_RUN	 100
#define TPL_MAX_STEP	 16384
#define TPL_MAX_FILES	 100
#define TPL_MAX_FILE_SUM (1 << 20)
#define TPL_MAX_PATH	 1024

void tpl_recipe_free(struct tpl_recipe *r)
{
	json_decref(r->spec);
	free(r->canonical);
	r->spec = NULL;
	r->canonical = NULL;
}

/* ---- checking a recipe ------------------------------------------------------------ */

static bool tpl_in(char c, const char *set)
{
	return c && strchr(set, c);
}

static bool tpl_alnum_lower(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
}

static bool tpl_alnum(char c)
{
	return tpl_alnum_lower(c) || (c >= 'A' && c <= 'Z');
}

/* n characters of s from [alnum + set] (alnum_lower when lower); the count. */
static size_t tpl_span(const char *s, bool lower, const char *set)
{
	size_t n = 0;
	while (s[n] && ((lower ? tpl_alnum_lower(s[n]) : tpl_alnum(s[n])) || tpl_in(s[n], set)))
		n++;
	return n;
}

/* A Debian package: name[=version] (Debian Policy 5.6.1, 5.6.12). */
static bool tpl_apt_ok(const char *s)
{
	size_t n = tpl_span(s, true, "+.-");
	if (n < 2 || n > 100 || !tpl_alnum_lower(s[0]))
		return false;
	if (!s[n])
		return true;
	if (s[n] != '=')
		return false;
	const char *v = s + n + 1;
	size_t m = tpl_span(v, false, ".+~:-");
	return m >= 1 && m <= 64 && !v[m] && tpl_alnum(v[0]);
}

/* A PyPI requirement: name[extras][op version] (PEP 508, no URLs, no
 * markers, no options). */
static bool tpl_pip_ok(const char *s)
{
	size_t n = tpl_span(s, false, "._-");
	if (n < 1 || n > 100 || !tpl_alnum(s[0]))
		return false;
	s += n;
	if (*s == '[') {
		size_t m = tpl_span(s + 1, false, "._,-");
		if (m < 1 || m > 100 || s[1 + m] != ']')
			return false;
		s += m + 2;
	}
	if (!*s)
		return true;
	static const char *const ops[] = {"===", "==", ">=", "<=", "~=", "!=", "<", ">", NULL};
	for (int i = 0; ops[i]; i++)
		if (strncmp(s, ops[i], strlen(ops[i])) == 0) {
			const char *v = s + strlen(ops[i]);
			size_t m = tpl_span(v, false, ".*+!_-");
			return m >= 1 && m <= 64 && !v[m];
		}
	return false;
}

/* An npm registry package: [@scope/]name[@version or range] (no tarballs,
 * URLs, git or paths: none of / : outside the scope). */
static bool tpl_npm_ok(const char *s)
{
	if (*s == '@') {
		size_t m = tpl_span(s + 1, true, "._-");
		if (m < 1 || m > 100 || s[1 + m] != '/')
			return false;
		s += m + 2;
	}
	size_t n = tpl_span(s, true, "._-");
	if (n < 1 || n > 100 || !tpl_alnum_lower(s[0]))
		return false;
	s += n;
	if (!*s)
		return true;
	if (*s != '@')
		return false;
	size_t m = tpl_span(s + 1, false, ".^~<>=*+_-");
	return m >= 1 && m <= 64 && !s[1 + m];
}

static int tpl_cmp_str(const void *a, const void *b)
{
	return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* A list of package names from params[name], each passing ok(), sorted (the
 * order does not change what is installed; sorted, it hashes alike). */
static int tpl_packages(const json_t *params, const char *name, bool (*ok)(const char *),
			const char *what, json_t *spec, struct err *e)
{
	json_t *arr = NULL;
	if (param_array(params, name, &arr, e) < 0)
		return -1;
	if (!arr || json_array_size(arr) == 0)
		return 0;
	if (json_array_size(arr) > TPL_MAX_PACKAGES)
		return err_param(e, name, "%s: at most %d packages", name, TPL_MAX_PACKAGES);
	size_t n = json_array_size(arr), i;
	const char **names = calloc(n, sizeof *names);
	if (!names)
		return err_set(e, ERR_INTERNAL, "out of memory");
	json_t *v;
	json_array_foreach(arr, i, v)
	{
		const char *s = json_string_value(v);
		if (!s || strlen(s) != json_string_length(v) || !ok(s)) {
			free(names);
			return err_param(e, name, "%s[%zu]: not %s", name, i, what);
		}
		names[i] = s;
	}
	qsort(names, n, sizeof *names, tpl_cmp_str);
	json_t *out = json_array();
	for (i = 0; i < n; i++)
		if (i == 0 || strcmp(names[i], names[i - 1]) != 0)
			json_array_append_new(out, json_string(names[i]));
	free(names);
	json_object_set_new(spec, name, out);
	return 0;
}

/* Paths a file may not be written to: mounted over at every start, so
 * nothing written there would be kept. */
static const char *const tpl_not_kept[] = {"/proc", "/sys",	"/dev", "/run",
					   "/tmp",  "/session", NULL};

static int tpl_file_path(const char *p, size_t len, struct err *e)
{
	if (len == 0 || len > TPL_MAX_PATH || strlen(p) != len || p[0] != '/')
		return err_param(e, "files", "files: %.80s: an absolute path of at most %d bytes",
				 p, TPL_MAX_PATH);
	for (const char *s = p; *s; s++)
		if ((unsigned char)*s < 0x20 || *s == 0x7f)
			return err_param(e, "files", "files: a path holds a control character");
	/* Every component a name: no "", ".", "..", no trailing slash. */
	for (const char *s = p; *s;) {
		const char *c = s + 1, *end = strchr(c, '/');
		size_t n = end ? (size_t)(end - c) : strlen(c);
		if (n == 0 || (n == 1 && c[0] == '.') || (n == 2 && c[0] == '.' && c[1] == '.'))
			return err_param(e, "files",
					 "files: %.80s: every part of the path must be a name (no "
					 "'.', '..' or '//', no trailing '/')",
					 p);
		if (n > 255)
			return err_param(e, "files", "files: %.80s: a name longer than 255 bytes",
					 p);
		s = c + n;
	}
	for (int i = 0; tpl_not_kept[i]; i++) {
		size_t n = strlen(tpl_not_kept[i]);
		if (strncmp(p, tpl_not_kept[i], n) == 0 && (p[n] == '/' || !p[n]))
			return err_param(e, "files",
					 "files: %.80s: %s is mounted over when a computer starts, "
					 "so nothing written there is kept",
					 p, tpl_not_kept[i]);
	}
	return 0;
}

static int tpl_files(const json_t *params, json_t *spec, struct err *e)
{
	json_t *files = NULL;
	if (param_object(params, "files", &files, e) < 0)
		return -1;
	if (!files || json_object_size(files) == 0)
		return 0;
	if (json_object_size(files) > TPL_MAX_FILES)
		return err_param(e, "files", "files: at most %d files", TPL_MAX_FILES);
	size_t sum = 0;
	const char *path;
	json_t *v;
	json_object_foreach(files, path, v)
	{
		if (tpl_file_path(path, strlen(path), e) < 0)
			return -1;
		if (!json_is_string(v))
			return err_param(e, "files", "files: %.80s: the content must be a string",
					 path);
		sum += json_string_length(v);
	}
	if (sum > TPL_MAX_FILE_SUM)
		return err_param(e, "files", "files: at most %d bytes of content in all",
				 TPL_MAX_FILE_SUM);
	json_object_set_new(spec, "files", json_deep_copy(files));
	return 0;
}

static int tpl_run(const json_t *params, json_t *spec, struct err *e)
{
	json_t *arr = NULL;
	if (param_array(params, "run", &arr, e) < 0)
		return -1;
	if (!arr || json_array_size(arr) == 0)
		return 0;
	if (json_array_size(arr) > TPL_MAX_RUN)
		return err_param(e, "run", "run: at most %d steps", TPL_MAX_RUN);
	size_t i;
	json_t *v;
	json_array_foreach(arr, i, v)
	{
		const char *s = json_string_value(v);
		if (!s || !*s || strlen(s) != json_string_length(v) || strlen(s) > TPL_MAX_STEP)
			return err_param(e, "run",
					 "run[%zu]: a shell command of 1 to %d bytes (no NUL)", i,
					 TPL_MAX_STEP);
	}
	json_object_set_new(spec, "run", json_deep_copy(arr));
	return 0;
}

void tpl_sha256_hex(const void *data, size_t len, char out[TPL_KEY_HEX])
{
	unsigned char h[32];
	unsigned int n = 0;
	EVP_Digest(data, len, h, &n, EVP_sha256(), NULL);
	for (unsigned i = 0; i < 32; i++)
		snprintf(out + 2 * i, 3, "%02x", h[i]);
}

/*
 * A built-in recipe's "copy": {"from": DIR (relative to the recipe's
 * directory), "to": PATH, "lock": FILE (what fixes DIR's content, whose
 * hash goes into the key: a package-lock.json)}.
 */
static int tpl_copy(const json_t *params, const char *dir, struct tpl_recipe *r, struct err *e)
{
	json_t *copy = NULL;
	if (param_object(params, "copy", &copy, e) < 0)
		return -1;
	if (!copy)
		return 0;
	const char *from = json_string_value(json_object_get(copy, "from"));
	const char *to = json_string_value(json_object_get(copy, "to"));
	const char *lock = json_string_value(json_object_get(copy, "lock"));
	if (!from || !to || !lock || strstr(from, "..") || strstr(lock, "..") || from[0] == '/' ||
	    tpl_file_path(to, strlen(to), e) < 0 || strchr(to, '\''))
		return err_param(e, "copy", "copy: {\"from\", \"to\", \"lock\"}, relative paths");
	char lockpath[PATH_MAX + 300];
	snprintf(r->copy_from, sizeof r->copy_from, "%s/%s", dir, from);
	snprintf(r->copy_to, sizeof r->copy_to, "%s", to);
	snprintf(lockpath, sizeof lockpath, "%s/%s", dir, lock);
	struct stat st;
	if (stat(r->copy_from, &st) < 0 || !S_ISDIR(st.st_mode))
		return err_set(e, ERR_UNAVAILABLE,
			       "%s is missing: `make images` installs it (npm ci in %s)",
			       r->copy_from, dir);
	FILE *f = fopen(lockpath, "re");
	char *buf = f ? malloc(1 << 22) : NULL;
	size_t n = buf ? fread(buf, 1, 1 << 22, f) : 0;
	if (f)
		fclose(f);
	if (!buf) {
		free(buf);
		return err_set(e, ERR_UNAVAILABLE, "cannot read %s", lockpath);
	}
	char hex[TPL_KEY_HEX];
	tpl_sha256_hex(buf, n, hex);
	free(buf);
	json_object_set_new(r->spec, "copy", json_pack("{s:s, s:s}", "to", to, "lock_sha256", hex));
	return 0;
}

/* Checks a recipe (the API's body, or a built-in's file when builtin_dir
 * is given) into r. */
int tpl_recipe_parse(const json_t *params, const char *builtin_dir, struct tpl_recipe *r,
		     struct err *e)
{
	static const char *const known_api[] = {"name", "base",	 "apt",	      "pip", "npm",
						"run",	"files", "workspace", NULL};
	static const char *const known_builtin[] = {"name", "base",  "apt",  "pip",   "npm",
						    "run",  "files", "copy", "about", NULL};
	static const char *const bases[] = {"sandbox", "desktop", NULL};
	memset(r, 0, sizeof *r);
	if (params_check_known(params, builtin_dir ? known_builtin : known_api, e) < 0)
		return -1;
	const char *name = NULL;
	if (param_need_str(params, "name", &name, e) < 0 ||
	    ident_param("name", name, 63, false, e) < 0)
		return -1;
	snprintf(r->name, sizeof r->name, "%s", name);
	int base = 0;
	if (param_enum(params, "base", bases, &base, e) < 0)
		return -1;
	snprintf(r->base, sizeof r->base, "%s", bases[base]);
	r->builtin = builtin_dir != NULL;
	r->spec = json_pack("{s:s}", "base", r->base);
	if (!r->spec)
		return err_set(e, ERR_INTERNAL, "out of memory");
	if (tpl_files(params, r->spec, e) < 0 ||
	    tpl_packages(params, "apt", tpl_apt_ok, "a Debian package name (name or name=version)",
			 r->spec, e) < 0 ||
	    tpl_packages(params, "pip", tpl_pip_ok,
			 "a PyPI requirement (name, name[extra], name==version; no URL or option)",
			 r->spec, e) < 0 ||
	    tpl_packages(params, "npm", tpl_npm_ok,
			 "an npm package (name, @scope/name, name@version; no URL, path or git)",
			 r->spec, e) < 0 ||
	    tpl_run(params, r->spec, e) < 0 ||
	    (builtin_dir && tpl_copy(params, builtin_dir, r, e) < 0))
		goto fail;
	if (json_object_size(r->spec) < 2) {
		err_param(e, "apt", "a template needs at least one of apt, pip, npm, run, files");
		goto fail;
	}
	r->canonical = json_dumps(r->spec, JSON_COMPACT | JSON_SORT_KEYS);
	if (!r->canonical) {
		err_set(e, ERR_INTERNAL, "out of memory");
		goto fail;
	}
	return 0;
fail:
	tpl_recipe_free(r);
	return -1;
}
