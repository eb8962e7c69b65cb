/*
 * setup: the host's settings for the guest (see setup.h).
 */
#include "setup.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "clock.h"
#include "params.h"
#include "trust.h"

static const char *setup_root = "";

void setup_set_root(const char *root)
{
	setup_root = root && strcmp(root, "/") != 0 ? root : "";
	trust_set_root(root);
}

/* An http(s) URL of printable ASCII without spaces or quotes; NULL is fine. */
static int setup_url(const json_t *body, const char *name, const char **out, struct err *e)
{
	*out = NULL;
	json_t *v = json_object_get(body, name);
	if (!v || json_is_null(v))
		return 0;
	if (!json_is_string(v))
		return err_param(e, name, "%s: a URL (string) or null", name);
	const char *s = json_string_value(v);
	size_t n = strlen(s);
	if ((strncmp(s, "http://", 7) != 0 && strncmp(s, "https://", 8) != 0) || n > SETUP_URL_MAX)
		return err_param(e, name, "%s: an http:// or https:// URL of at most %d bytes",
				 name, SETUP_URL_MAX);
	for (const char *p = s; *p; p++)
		if (*p <= ' ' || *p >= 127 || *p == '"' || *p == '\'' || *p == '\\')
			return err_param(e, name, "%s: a character a URL does not hold", name);
	*out = s;
	return 0;
}

/* Replaces the file at path (under the root) with text if it differs. */
static int setup_file(const char *path, const char *text, bool *changed, struct err *e)
{
	char full[4200], tmp[4300], old[8192];
	snprintf(full, sizeof full, "%s%s", setup_root, path);
	int fd = open(full, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	if (fd >= 0) {
		ssize_t n = read(fd, old, sizeof old - 1);
		close(fd);
		if (n >= 0 && (size_t)n == strlen(text) && memcmp(old, text, (size_t)n) == 0)
			return 0;
	}
	snprintf(tmp, sizeof tmp, "%s.cubicle-new", full);
	unlink(tmp);
	fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
	if (fd < 0)
		return err_set(e, ERR_UNAVAILABLE, "setup: cannot write %s: %s", tmp,
			       strerror(errno));
	bool ok = write(fd, text, strlen(text)) == (ssize_t)strlen(text);
	ok = fchmod(fd, 0644) == 0 && ok;
	ok = close(fd) == 0 && ok;
	if (!ok || rename(tmp, full) < 0) {
		int saved = errno;
		unlink(tmp);
		return err_set(e, ERR_UNAVAILABLE, "setup: cannot replace %s: %s", full,
			       strerror(saved));
	}
	*changed = true;
	return 0;
}

int setup_apply(const json_t *body, json_t **answer, struct err *e)
{
	int64_t t0 = clock_now_ms();
	static const char *const known[] = {"ca_certs", "pip_index_url", "npm_registry", NULL};
	if (params_check_known(body, known, e) < 0)
		return -1;
	const char *pem = NULL, *pip = NULL, *npm = NULL;
	json_t *v = json_object_get(body, "ca_certs");
	if (v && !json_is_null(v)) {
		if (!json_is_string(v))
			return err_param(e, "ca_certs", "ca_certs: PEM text (string) or null");
		pem = json_string_value(v);
	}
	if (setup_url(body, "pip_index_url", &pip, e) < 0 ||
	    setup_url(body, "npm_registry", &npm, e) < 0)
		return -1;
	int count = 0;
	bool changed = false;
	if (trust_install(pem ? pem : "", pem ? strlen(pem) : 0, &count, &changed, e) < 0)
		return -1;

	/* pip: index-url, and trusted-host for a plain-http index (pip ignores
	 * one that is neither https nor trusted). */
	char text[SETUP_URL_MAX * 2 + 400];
	int n = snprintf(text, sizeof text,
			 "# cubicle: written by envd at each start (cubicled --pip-index-url)\n");
	if (pip) {
		n += snprintf(text + n, sizeof text - (size_t)n, "[global]\nindex-url = %s\n", pip);
		if (strncmp(pip, "http://", 7) == 0) {
			const char *h = pip + 7;
			size_t hl = strcspn(h, ":/?#");
			n += snprintf(text + n, sizeof text - (size_t)n, "trusted-host = %.*s\n",
				      (int)hl, h);
		}
	}
	if (setup_file("/etc/pip.conf", text, &changed, e) < 0)
		return -1;
	n = snprintf(text, sizeof text,
		     "# cubicle: written by envd at each start (cubicled --npm-registry)\n");
	if (npm)
		snprintf(text + n, sizeof text - (size_t)n, "registry=%s\n", npm);
	if (setup_file("/etc/npmrc", text, &changed, e) < 0)
		return -1;
	*answer = json_pack("{s:b, s:i, s:b, s:I}", "ok", 1, "ca_certs", count, "changed", changed,
			    "duration_ms", (json_int_t)(clock_now_ms() - t0));
	return 0;
}
