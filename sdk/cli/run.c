/*
 * run: `cubicle run LANGUAGE (-c CODE | FILE | -)`: POST /v1/run, a snippet
 * in a fresh sandbox (docs/code-runner.md). Prints the snippet's stdout and
 * stderr where they belong and exits with its exit code; a limit it hit is
 * said on stderr (exit 1 if the code's own status was 0).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

static char *run_read(const char *path, struct err *e)
{
	FILE *f = strcmp(path, "-") == 0 ? stdin : fopen(path, "rb");
	if (!f) {
		err_set(e, ERR_INVALID, "%s: %s", path, strerror(errno));
		return NULL;
	}
	size_t cap = 16384, n = 0;
	char *buf = malloc(cap + 1);
	size_t k;
	while (buf && (k = fread(buf + n, 1, cap - n, f)) > 0) {
		n += k;
		if (n == cap) {
			char *nb = realloc(buf, 2 * cap + 1);
			if (!nb)
				free(buf);
			buf = nb, cap *= 2;
		}
	}
	if (f != stdin)
		fclose(f);
	if (!buf) {
		err_set(e, ERR_INTERNAL, "out of memory");
		return NULL;
	}
	buf[n] = 0;
	return buf;
}

int cmd_run(struct cli *cli, struct args *a)
{
	const char *code = args_get(a, "c");
	int rc = cli_need(a, code ? 1 : 2, code ? 1 : 2);
	if (rc)
		return rc;
	const char *lang = a->pos[0];
	if (strcmp(lang, "js") == 0 || strcmp(lang, "node") == 0)
		lang = "javascript";
	else if (strcmp(lang, "py") == 0 || strcmp(lang, "python3") == 0)
		lang = "python";
	struct err e = {0};
	char *file = code ? NULL : run_read(a->pos[1], &e);
	if (!code && !file)
		return cli_fail(&e);
	json_t *body = json_pack("{s:s, s:s}", "language", lang, "code", code ? code : file);
	free(file);
	const char *in = args_get(a, "stdin");
	if (body && in)
		json_object_set_new(body, "stdin", json_string(in));
	json_t *out = NULL;
	rc = body ? api_json(cli, "POST", "/v1/run", body, &out, &e) : -1;
	json_decref(body);
	if (rc < 0)
		return cli_fail(&e);
	if (cli->json) {
		out_json(out);
		json_decref(out);
		return 0;
	}
	const char *so = json_string_value(json_object_get(out, "stdout"));
	const char *se = json_string_value(json_object_get(out, "stderr"));
	fwrite(so ? so : "", 1, json_string_length(json_object_get(out, "stdout")), stdout);
	fflush(stdout);
	fwrite(se ? se : "", 1, json_string_length(json_object_get(out, "stderr")), stderr);
	int status = (int)json_integer_value(json_object_get(out, "exit_code"));
	json_t *err = json_object_get(out, "error");
	const char *type = json_string_value(json_object_get(err, "type"));
	if (type && strcmp(type, "exception") != 0) {
		fprintf(stderr, "cubicle: %s: %s\n", type,
			json_string_value(json_object_get(err, "message")));
		if (status == 0)
			status = 1;
	}
	json_decref(out);
	return status & 255;
}
