/*
 * The shell family: `bash` and `python`, thin handlers over proc/shell.
 *
 * bash runs `bash -c command`; python runs `python3 -c code` when the code is
 * under 64 KiB (one argument may hold 128 KiB on Linux). Larger code is
 * written to a private temporary file (0600, owned by the run_as user) and
 * run as `python3 FILE` (so sys.argv[0] is that file and sys.path[0] is /tmp),
 * which keeps the caller's stdin free; the file is removed afterwards.
 * Everything runs as env->run_as_*.
 *
 * The answer is {"stdout","stderr","exit_code","duration_ms","timed_out"}
 * plus "signal" when a signal ended the program and "stdout_truncated" /
 * "stderr_truncated" when output went past the limit. Output is text: bytes
 * that are not UTF-8 become U+FFFD. A timeout is an ERR_TIMEOUT (504) whose
 * body carries the same object, with "exit_code":null and the partial output.
 */
#include "action.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "files.h"
#include "params.h"
#include "shell.h"
#include "utf8.h"

#define SHELL_PYTHON_INLINE_MAX (64 * 1024)
#define SHELL_TIMEOUT_DEFAULT_S 60
#define SHELL_TIMEOUT_MAX_S	86400

/* The options common to bash and python: timeout_s, cwd, env, stdin. */
struct shell_action {
	struct shell_opts opts;
	char **env; /* owned "KEY=VALUE" strings, NULL-terminated */
	long long timeout_s;
};

static void shell_action_free(struct shell_action *sa)
{
	for (size_t i = 0; sa->env && sa->env[i]; i++)
		free(sa->env[i]);
	free(sa->env);
}

static int shell_action_parse(struct envd *env, const json_t *params, struct shell_action *sa,
			      struct err *e)
{
	memset(sa, 0, sizeof *sa);
	sa->timeout_s = SHELL_TIMEOUT_DEFAULT_S;
	if (param_int(params, "timeout_s", 1, SHELL_TIMEOUT_MAX_S, &sa->timeout_s, e) < 0)
		return -1;
	const char *cwd = NULL;
	if (param_str(params, "cwd", &cwd, e) < 0)
		return -1;
	if (cwd && !cwd[0])
		return err_param(e, "cwd", "cwd: empty path");
	json_t *envobj = NULL;
	if (param_object(params, "env", &envobj, e) < 0)
		return -1;
	json_t *in = json_object_get(params, "stdin");
	if (in && !json_is_null(in) && !json_is_string(in))
		return err_param(e, "stdin", "stdin: expected a string");

	if (envobj) {
		sa->env = calloc(json_object_size(envobj) + 1, sizeof *sa->env);
		if (!sa->env)
			return err_set(e, ERR_INTERNAL, "out of memory");
		const char *key;
		json_t *v;
		size_t n = 0;
		json_object_foreach(envobj, key, v)
		{
			if (!key[0] || strchr(key, '='))
				return err_param(e, "env",
						 "env: '%.80s' is not a valid variable name (empty "
						 "or containing '=')",
						 key);
			if (!json_is_string(v))
				return err_param(e, "env",
						 "env: the value of %.80s must be a string", key);
			if (strlen(json_string_value(v)) != json_string_length(v))
				return err_param(e, "env",
						 "env: the value of %.80s contains a NUL character",
						 key);
			if (asprintf(&sa->env[n], "%s=%s", key, json_string_value(v)) < 0) {
				sa->env[n] = NULL;
				return err_set(e, ERR_INTERNAL, "out of memory");
			}
			n++;
		}
	}
	sa->opts.cwd = cwd;
	sa->opts.env = (const char *const *)sa->env;
	if (in && json_is_string(in)) {
		sa->opts.stdin_data = json_string_value(in);
		sa->opts.stdin_len = json_string_length(in);
	}
	sa->opts.timeout_ms = (int)(sa->timeout_s * 1000);
	sa->opts.as.uid = env->run_as_uid;
	sa->opts.as.gid = env->run_as_gid;
	sa->opts.as.home = env->run_as_home;
	return 0;
}

/* Runs sa->opts and turns the result into the reply (see the top comment). */
static int shell_action_run(struct shell_action *sa, struct action_reply *reply, struct err *e)
{
	struct shell_result r;
	if (shell_run(&sa->opts, &r, e) < 0)
		return -1;
	json_t *j = json_object();
	json_t *out = utf8_json(r.out, r.out_len);
	json_t *errs = utf8_json(r.err, r.err_len);
	if (!j || !out || !errs) {
		json_decref(j);
		json_decref(out);
		json_decref(errs);
		shell_result_free(&r);
		return err_set(e, ERR_INTERNAL, "out of memory");
	}
	json_object_set_new(j, "stdout", out);
	json_object_set_new(j, "stderr", errs);
	json_object_set_new(j, "exit_code", r.timed_out ? json_null() : json_integer(r.exit_code));
	if (r.signal)
		json_object_set_new(j, "signal", json_integer(r.signal));
	json_object_set_new(j, "duration_ms", json_integer(r.duration_ms));
	json_object_set_new(j, "timed_out", json_boolean(r.timed_out));
	if (r.out_truncated)
		json_object_set_new(j, "stdout_truncated", json_true());
	if (r.err_truncated)
		json_object_set_new(j, "stderr_truncated", json_true());
	reply->json = j;
	bool timed_out = r.timed_out;
	shell_result_free(&r);
	if (timed_out)
		return err_set(e, ERR_TIMEOUT,
			       "command timed out after %lld s; its process group was killed",
			       sa->timeout_s);
	return 0;
}

int act_bash(struct envd *env, const json_t *params, struct action_reply *reply, struct err *e)
{
	const char *command;
	if (param_need_str(params, "command", &command, e) < 0)
		return -1;
	if (strlen(command) != json_string_length(json_object_get(params, "command")))
		return err_param(e, "command", "command: contains a NUL character");
	struct shell_action sa;
	if (shell_action_parse(env, params, &sa, e) < 0) {
		shell_action_free(&sa);
		return -1;
	}
	const char *argv[] = {"bash", "-c", command, NULL};
	sa.opts.argv = argv;
	int rc = shell_action_run(&sa, reply, e);
	shell_action_free(&sa);
	return rc;
}

/*
 * Writes large python code to /tmp/cubicle-python-RANDOM.py as the run_as
 * user (O_EXCL, 0600: a 128-bit random name nobody can pre-create or read)
 * and stores the path in `path`.
 */
static int shell_python_file(struct envd *env, const char *code, size_t len, char *path,
			     size_t size, struct err *e)
{
	struct run_as as = {env->run_as_uid, env->run_as_gid, env->run_as_home};
	unsigned long long rnd[2] = {0, 0};
	if (getrandom(rnd, sizeof rnd, 0) != sizeof rnd)
		return err_set(e, ERR_INTERNAL, "getrandom: %s", strerror(errno));
	snprintf(path, size, "/tmp/cubicle-python-%016llx%016llx.py", rnd[0], rnd[1]);
	struct err fe = {0};
	int fd = files_open_as(&as, path, O_WRONLY | O_CREAT | O_EXCL, 0600, &fe);
	if (fd < 0)
		return err_set(e, fe.code, "cannot store the python code: %s", fe.message);
	const char *p = code;
	size_t left = len;
	while (left) {
		ssize_t w = write(fd, p, left);
		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0) {
			int err = errno;
			close(fd);
			unlink(path);
			return err_set(e, ERR_INTERNAL, "cannot store the python code: %s",
				       strerror(err));
		}
		p += w;
		left -= (size_t)w;
	}
	close(fd);
	return 0;
}

int act_python(struct envd *env, const json_t *params, struct action_reply *reply, struct err *e)
{
	const char *code;
	if (param_need_str(params, "code", &code, e) < 0)
		return -1;
	size_t len = json_string_length(json_object_get(params, "code"));
	if (strlen(code) != len)
		return err_param(e, "code", "code: contains a NUL character");
	struct shell_action sa;
	if (shell_action_parse(env, params, &sa, e) < 0) {
		shell_action_free(&sa);
		return -1;
	}
	char file[80] = "";
	if (len >= SHELL_PYTHON_INLINE_MAX &&
	    shell_python_file(env, code, len, file, sizeof file, e) < 0) {
		shell_action_free(&sa);
		return -1;
	}
	const char *inline_argv[] = {"python3", "-c", code, NULL};
	const char *file_argv[] = {"python3", file, NULL};
	sa.opts.argv = file[0] ? file_argv : inline_argv;
	int rc = shell_action_run(&sa, reply, e);
	if (file[0])
		unlink(file);
	shell_action_free(&sa);
	return rc;
}
