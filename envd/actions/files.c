/*
 * The files family: `write_file` and `read_file`, whole files in a JSON body,
 * thin handlers over proc/files (which acts with the run_as identity).
 *
 * Content travels as UTF-8 text ("content") or as base64 ("content_base64")
 * so any bytes round-trip. read_file's default encoding "auto" answers text
 * when the file is valid UTF-8 without NUL bytes, base64 otherwise, and says
 * which in "encoding". Files over env->max_read_file are refused with a 413
 * pointing to GET /v1/files, which streams any size.
 *
 * Relative paths are relative to the run_as home (else envd's $HOME); the
 * answers carry the absolute path that was used.
 */
#include "action.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base64.h"
#include "files.h"
#include "params.h"

/* read_file's limit when envd was not given one. */
#define FILES_READ_DEFAULT_MAX (16u << 20)

static struct run_as files_action_as(const struct envd *env)
{
	struct run_as as = {env->run_as_uid, env->run_as_gid, env->run_as_home};
	return as;
}

/* The absolute path `path` names for this client; malloc'd or NULL with e. */
static char *files_action_path(const struct envd *env, const json_t *params, struct err *e)
{
	const char *path;
	if (param_need_str(params, "path", &path, e) < 0)
		return NULL;
	if (!path[0] || strlen(path) != json_string_length(json_object_get(params, "path"))) {
		err_param(e, "path", "path: must be a non-empty path without NUL characters");
		return NULL;
	}
	char *abs = NULL;
	if (path[0] == '/') {
		abs = strdup(path);
	} else {
		const char *home = env->run_as_home ? env->run_as_home : getenv("HOME");
		if (!home || home[0] != '/')
			home = "/";
		size_t hl = strlen(home);
		if (asprintf(&abs, "%s%s%s", home, home[hl - 1] == '/' ? "" : "/", path) < 0)
			abs = NULL;
	}
	if (!abs)
		err_set(e, ERR_INTERNAL, "out of memory");
	return abs;
}

/* mode: an integer 0..07777 or an octal string ("0644", "755", "0o600"). */
static int files_action_mode(const json_t *params, int *mode, struct err *e)
{
	*mode = -1;
	json_t *v = json_object_get(params, "mode");
	if (!v || json_is_null(v))
		return 0;
	if (json_is_string(v)) {
		const char *s = json_string_value(v);
		if (s[0] == '0' && (s[1] == 'o' || s[1] == 'O'))
			s += 2;
		if (!*s || strlen(s) > 5 || strspn(s, "01234567") != strlen(s))
			return err_param(e, "mode",
					 "mode: '%.20s' is not an octal mode such as \"0644\"",
					 json_string_value(v));
		long m = strtol(s, NULL, 8);
		if (m > 07777)
			return err_param(e, "mode", "mode: %lo is out of range [0, 7777]", m);
		*mode = (int)m;
		return 0;
	}
	long long m;
	if (param_int(params, "mode", 0, 07777, &m, e) < 0) {
		if (e)
			snprintf(e->message, sizeof e->message,
				 "mode: expected an integer 0..4095 (0o7777) or an octal string "
				 "such as \"0644\"");
		return -1;
	}
	*mode = (int)m;
	return 0;
}

int act_write_file(struct envd *env, const json_t *params, struct action_reply *reply,
		   struct err *e)
{
	char *path = files_action_path(env, params, e);
	if (!path)
		return -1;
	const char *text = NULL, *b64 = NULL;
	int has_text = param_str(params, "content", &text, e);
	if (has_text < 0)
		goto fail;
	int has_b64 = param_str(params, "content_base64", &b64, e);
	if (has_b64 < 0)
		goto fail;
	if (has_text && has_b64) {
		err_param(e, "content_base64",
			  "content_base64: give either content (text) or content_base64, not both");
		goto fail;
	}
	if (!has_text && !has_b64) {
		err_param(e, "content",
			  "content: required (UTF-8 text), or content_base64 for binary data");
		goto fail;
	}
	int mode;
	if (files_action_mode(params, &mode, e) < 0)
		goto fail;

	const void *data;
	size_t len;
	unsigned char *decoded = NULL;
	if (has_text) {
		data = text;
		len = json_string_length(json_object_get(params, "content"));
	} else {
		decoded = base64_decode(b64, strlen(b64), &len);
		if (!decoded) {
			err_param(e, "content_base64",
				  "content_base64: not valid base64 (standard alphabet with "
				  "padding, no whitespace)");
			goto fail;
		}
		data = decoded;
	}
	struct run_as as = files_action_as(env);
	int rc = files_write(&as, path, data, len, mode, e);
	free(decoded);
	if (rc < 0)
		goto fail;
	reply->json = json_pack("{s:b, s:s, s:I}", "ok", 1, "path", path, "size", (json_int_t)len);
	free(path);
	if (!reply->json)
		return err_set(e, ERR_INTERNAL, "out of memory");
	return 0;
fail:
	free(path);
	return -1;
}

static const char *const files_encodings[] = {"auto", "utf-8", "base64", "utf8", NULL};

int act_read_file(struct envd *env, const json_t *params, struct action_reply *reply, struct err *e)
{
	int enc = 0;
	if (param_enum(params, "encoding", files_encodings, &enc, e) < 0)
		return -1;
	if (enc == 3)
		enc = 1;
	char *path = files_action_path(env, params, e);
	if (!path)
		return -1;
	struct run_as as = files_action_as(env);
	char *data;
	size_t len;
	size_t limit = env->max_read_file ? env->max_read_file : FILES_READ_DEFAULT_MAX;
	if (files_read(&as, path, limit, &data, &len, e) < 0) {
		free(path);
		return -1;
	}
	json_t *content = NULL;
	const char *used = "base64";
	if (enc != 2) {
		/* jansson refuses invalid UTF-8, which is exactly the test we need. */
		bool has_nul = memchr(data, '\0', len) != NULL;
		if (enc == 1 || !has_nul)
			content = json_stringn(data, len);
		if (content)
			used = "utf-8";
		else if (enc == 1) {
			free(data);
			free(path);
			return err_param(e, "encoding",
					 "encoding: the file is not valid UTF-8 text; use "
					 "encoding \"base64\" (or \"auto\")");
		}
	}
	if (!content) {
		char *b64 = base64_encode(data, len);
		content = b64 ? json_string(b64) : NULL;
		free(b64);
	}
	free(data);
	if (!content) {
		free(path);
		return err_set(e, ERR_INTERNAL, "out of memory");
	}
	reply->json = json_pack("{s:s, s:I, s:s, s:o}", "path", path, "size", (json_int_t)len,
				"encoding", used, "content", content);
	free(path);
	if (!reply->json)
		return err_set(e, ERR_INTERNAL, "out of memory");
	return 0;
}
