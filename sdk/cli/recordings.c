/*
 * recordings: `cubicle record start|stop|ls|get|actions|rm`, a desktop's
 * screen recordings (docs/api.md, "Recordings").
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"

static int rec_call(struct cli *cli, const char *method, const char *path, json_t *body,
		    json_t **out)
{
	struct err e = {0};
	int rc = api_json(cli, method, path, body, out, &e) < 0 ? cli_fail(&e) : 0;
	json_decref(body);
	return rc;
}

/* One recording's row: ID STATE SECONDS SIZE FRAMES ACTIONS KEEP. */
static void rec_row(struct table *t, const json_t *r)
{
	char secs[32], size[32], frames[32], actions[32];
	snprintf(secs, sizeof secs, "%.1f",
		 (double)json_integer_value(json_object_get(r, "duration_ms")) / 1000);
	out_bytes(size, sizeof size, (uint64_t)json_integer_value(json_object_get(r, "bytes")));
	snprintf(frames, sizeof frames, "%lld",
		 (long long)json_integer_value(json_object_get(r, "frames")));
	snprintf(actions, sizeof actions, "%lld",
		 (long long)json_integer_value(json_object_get(r, "actions")));
	const char *cells[] = {json_string_value(json_object_get(r, "id")),
			       json_string_value(json_object_get(r, "state")),
			       secs,
			       size,
			       frames,
			       actions,
			       json_is_true(json_object_get(r, "keep")) ? "yes" : "no"};
	table_add(t, cells);
}

static int rec_show(struct cli *cli, json_t *out)
{
	if (cli->json)
		out_json(out);
	else
		out_kv(out);
	json_decref(out);
	return 0;
}

int cmd_record(struct cli *cli, struct args *a)
{
	if (a->npos < 2)
		return cli_usage(a->cmd, "expected start|stop|ls|get|actions|rm and a computer id");
	const char *sub = a->pos[0], *id = a->pos[1];
	const char *rid = a->npos >= 3 ? a->pos[2] : NULL;
	bool one = strcmp(sub, "start") != 0 && strcmp(sub, "ls") != 0;
	if ((one && a->npos != 3) || (!one && a->npos != 2))
		return cli_usage(a->cmd,
				 one ? "%s takes a computer id and a recording id"
				     : "%s takes a computer id",
				 sub);
	char path[400];
	snprintf(path, sizeof path, "/v1/computers/%s/recordings%s%s", id, rid ? "/" : "",
		 rid ? rid : "");
	json_t *out = NULL;
	int rc;
	if (strcmp(sub, "start") == 0 || strcmp(sub, "stop") == 0) {
		json_t *body = json_object();
		if (args_has(a, "keep"))
			json_object_set_new(body, "keep", json_true());
		if (strcmp(sub, "stop") == 0)
			strncat(path, "/stop", sizeof path - strlen(path) - 1);
		if ((rc = rec_call(cli, "POST", path, body, &out)))
			return rc;
		if (strcmp(sub, "start") == 0 && !cli->json) {
			puts(json_string_value(json_object_get(out, "id")));
			json_decref(out);
			return 0;
		}
		return rec_show(cli, out);
	}
	if (strcmp(sub, "ls") == 0) {
		if ((rc = rec_call(cli, "GET", path, NULL, &out)))
			return rc;
		if (cli->json)
			return rec_show(cli, out);
		static const char *const head[] = {"ID",     "STATE",	"SECONDS", "SIZE",
						   "FRAMES", "ACTIONS", "KEEP"};
		struct table *t = table_new(7, head);
		size_t i;
		json_t *r;
		json_array_foreach(json_object_get(out, "recordings"), i, r) rec_row(t, r);
		table_print(t);
		json_decref(out);
		return 0;
	}
	if (strcmp(sub, "actions") == 0) {
		strncat(path, "/actions", sizeof path - strlen(path) - 1);
		if ((rc = rec_call(cli, "GET", path, NULL, &out)))
			return rc;
		if (cli->json)
			return rec_show(cli, out);
		static const char *const head[] = {"T_MS", "ACTION", "STATUS", "PARAMS"};
		struct table *t = table_new(4, head);
		size_t i;
		json_t *x;
		json_array_foreach(json_object_get(out, "actions"), i, x)
		{
			char tms[32], st[16];
			snprintf(tms, sizeof tms, "%lld",
				 (long long)json_integer_value(json_object_get(x, "t_ms")));
			snprintf(st, sizeof st, "%lld",
				 (long long)json_integer_value(json_object_get(x, "status")));
			char *params = json_dumps(json_object_get(x, "params"), JSON_COMPACT);
			const char *cells[] = {tms, json_string_value(json_object_get(x, "action")),
					       st, params ? params : "{}"};
			table_add(t, cells);
			free(params);
		}
		table_print(t);
		json_decref(out);
		return 0;
	}
	if (strcmp(sub, "rm") == 0) {
		if ((rc = rec_call(cli, "DELETE", path, NULL, &out)))
			return rc;
		json_decref(out);
		return 0;
	}
	if (strcmp(sub, "get") == 0) {
		char file[300];
		const char *to = args_get(a, "output");
		snprintf(file, sizeof file, "%s", to ? to : rid);
		if (!to)
			strncat(file, ".webm", sizeof file - strlen(file) - 1);
		bool out_stdout = strcmp(file, "-") == 0;
		int fd =
		    out_stdout ? 1 : open(file, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
		if (fd < 0) {
			fprintf(stderr, "cubicle: cannot write %s\n", file);
			return EXIT_API;
		}
		struct err e = {0};
		rc = api_download(cli, path, fd, rid, &e) < 0 ? cli_fail(&e) : 0;
		if (!out_stdout)
			close(fd);
		if (rc == 0 && !out_stdout && !cli->json)
			puts(file);
		return rc;
	}
	return cli_usage(a->cmd, "unknown subcommand '%s' (start|stop|ls|get|actions|rm)", sub);
}
