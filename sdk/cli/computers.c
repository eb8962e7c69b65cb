/*
 * computers: the lifecycle commands — create, ls, get, stop, start, rm —
 * and stream and usage.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "params.h"

/* Prints a computer: its JSON, or `field` alone, or every field. */
static void computers_print(struct cli *cli, const json_t *c, const char *field)
{
	if (cli->json) {
		out_json(c);
	} else if (field) {
		char *s = out_scalar(json_object_get(c, field));
		puts(s ? s : "");
		free(s);
	} else {
		out_kv(c);
	}
}

/* Adds --metadata K=V (repeatable) to body. */
static int computers_metadata(const struct args *a, json_t *body)
{
	json_t *m = NULL;
	for (int i = 0; i < a->nopt; i++) {
		if (!args_same_name(a->opt[i].name, "metadata"))
			continue;
		const char *kv = a->opt[i].value, *eq = strchr(kv, '=');
		if (!eq || eq == kv)
			return cli_usage(a->cmd, "--metadata: expected KEY=VALUE, got '%s'", kv);
		if (!m)
			json_object_set_new(body, "metadata", m = json_object());
		char key[256];
		snprintf(key, sizeof key, "%.*s", (int)(eq - kv), kv);
		json_object_set_new(m, key, json_string(eq + 1));
	}
	return 0;
}

/* The create request's body from the options; EXIT_USAGE (said) or 0. */
static int computers_create_body(const struct args *a, json_t *body)
{
	static const char *const strings[][2] = {
	    {"kind", "kind"},		{"size", "size"},
	    {"isolation", "isolation"}, {"workspace", "workspace"},
	    {"session", "session"},	{"external-workspace-id", "external_workspace_id"},
	    {"template", "template"}};
	for (size_t i = 0; i < sizeof strings / sizeof strings[0]; i++) {
		const char *v = args_get(a, strings[i][0]);
		if (v)
			json_object_set_new(body, strings[i][1], json_string(v));
	}
	const char *v = args_get(a, "resolution");
	if (v) {
		unsigned w, h;
		char end;
		if (sscanf(v, "%ux%u%c", &w, &h, &end) != 2)
			return cli_usage(a->cmd, "--resolution: expected WIDTHxHEIGHT, got '%s'",
					 v);
		json_object_set_new(body, "resolution", json_pack("[i,i]", (int)w, (int)h));
	}
	long long n;
	if ((v = args_get(a, "idle-timeout"))) {
		if (args_int(v, 0, 1LL << 40, &n) < 0)
			return cli_usage(a->cmd, "--idle-timeout: expected seconds, got '%s'", v);
		json_object_set_new(body, "idle_timeout_s", json_integer(n));
	}
	return computers_metadata(a, body);
}

/* Waits until the computer runs, showing how long it has been waiting. */
static int computers_wait(struct cli *cli, const char *id, long long timeout, json_t **out,
			  struct err *e)
{
	char path[200];
	snprintf(path, sizeof path, "/v1/computers/%s?wait=running&timeout_s=%lld", id, timeout);
	char what[120];
	snprintf(what, sizeof what, "%s: booting", id);
	cli->waiting = what;
	int rc = api_json(cli, "GET", path, NULL, out, e);
	cli->waiting = NULL;
	if (rc < 0)
		return -1;
	const char *state = json_string_value(json_object_get(*out, "state"));
	if (state && strcmp(state, "running") != 0) {
		const char *why = json_string_value(json_object_get(*out, "error"));
		return err_set(e, ERR_CONFLICT, "computer %s is %s%s%s", id, state, why ? ": " : "",
			       why ? why : "");
	}
	return 0;
}

int cmd_create(struct cli *cli, struct args *a)
{
	int rc = cli_need(a, 0, 0);
	json_t *body = json_object(), *out = NULL;
	if (rc == 0)
		rc = computers_create_body(a, body);
	long long timeout = 120;
	const char *t = args_get(a, "timeout");
	if (rc == 0 && t && args_int(t, 0, 3600, &timeout) < 0)
		rc = cli_usage(a->cmd, "--timeout: expected seconds (0..3600), got '%s'", t);
	struct err e = {0};
	if (rc == 0 && api_json(cli, "POST", "/v1/computers", body, &out, &e) < 0)
		rc = cli_fail(&e);
	json_decref(body);
	if (rc == 0 && args_has(a, "wait")) {
		char id[64];
		snprintf(id, sizeof id, "%s", json_string_value(json_object_get(out, "id")));
		json_decref(out);
		out = NULL;
		if (computers_wait(cli, id, timeout, &out, &e) < 0)
			rc = cli_fail(&e);
	}
	if (rc == 0)
		computers_print(cli, out, "id");
	json_decref(out);
	return rc;
}

/* GET base with the options named in opts as its query; prints the answer
 * with --json. Returns the exit code, and in *out the answer when a table is
 * still to be printed (NULL otherwise). */
static int computers_query(struct cli *cli, struct args *a, const char *base,
			   const char *const *opts, json_t **out)
{
	*out = NULL;
	int rc = cli_need(a, 0, 0);
	char path[1024];
	snprintf(path, sizeof path, "%s", base);
	for (size_t i = 0; rc == 0 && opts[i]; i++)
		if (api_query(path, sizeof path, opts[i], args_get(a, opts[i])) < 0)
			rc = cli_usage(a->cmd, "options too long");
	json_t *got = NULL;
	struct err e = {0};
	if (rc == 0 && api_json(cli, "GET", path, NULL, &got, &e) < 0)
		rc = cli_fail(&e);
	if (rc == 0 && !cli->json) {
		*out = got;
		return 0;
	}
	if (rc == 0)
		out_json(got);
	json_decref(got);
	return rc;
}

int cmd_ls(struct cli *cli, struct args *a)
{
	static const char *const opts[] = {"state", "kind", "workspace", NULL};
	json_t *out;
	int rc = computers_query(cli, a, "/v1/computers", opts, &out);
	if (!out)
		return rc;
	static const char *const head[] = {"ID",	"KIND",	   "SIZE",    "STATE",
					   "ISOLATION", "CREATED", "METADATA"};
	static const char *const fields[] = {"id",	  "kind",	"size",	   "state",
					     "isolation", "created_at", "metadata"};
	struct table *t = table_new(7, head);
	size_t i;
	json_t *c;
	json_array_foreach(json_object_get(out, "computers"), i, c)
	{
		char *cells[7];
		for (int k = 0; k < 7; k++)
			cells[k] = out_scalar(json_object_get(c, fields[k]));
		table_add(t, (const char *const *)cells);
		for (int k = 0; k < 7; k++)
			free(cells[k]);
	}
	table_print(t);
	json_decref(out);
	return 0;
}

int cmd_get(struct cli *cli, struct args *a)
{
	int rc = cli_need(a, 1, 1);
	if (rc)
		return rc;
	char path[300];
	snprintf(path, sizeof path, "/v1/computers/%s", a->pos[0]);
	json_t *out;
	struct err e = {0};
	if (api_json(cli, "GET", path, NULL, &out, &e) < 0)
		return cli_fail(&e);
	computers_print(cli, out, NULL);
	json_decref(out);
	return 0;
}

/* One call per id; the exit status is the worst. Prints "ID STATE" each. */
static int computers_each(struct cli *cli, struct args *a, const char *method, const char *op)
{
	int rc = cli_need(a, 1, -1);
	if (rc)
		return rc;
	for (int i = 0; i < a->npos; i++) {
		char path[300];
		snprintf(path, sizeof path, "/v1/computers/%s%s", a->pos[i], op);
		json_t *out;
		struct err e = {0};
		if (api_json(cli, method, path, NULL, &out, &e) < 0) {
			rc = cli_fail(&e);
			continue;
		}
		if (cli->json)
			out_json(out);
		else
			printf("%s %s\n", a->pos[i],
			       json_string_value(json_object_get(out, "state")));
		json_decref(out);
	}
	return rc;
}

int cmd_stop(struct cli *cli, struct args *a)
{
	return computers_each(cli, a, "POST", "/stop");
}

int cmd_start(struct cli *cli, struct args *a)
{
	return computers_each(cli, a, "POST", "/start");
}

int cmd_rm(struct cli *cli, struct args *a)
{
	return computers_each(cli, a, "DELETE", "");
}

int cmd_stream(struct cli *cli, struct args *a)
{
	int rc = cli_need(a, 1, 1);
	if (rc)
		return rc;
	json_t *body = json_pack("{s:b}", "view_only", args_has(a, "view-only"));
	const char *ttl = args_get(a, "ttl");
	long long n;
	if (ttl) {
		if (args_int(ttl, 1, 1LL << 31, &n) < 0) {
			json_decref(body);
			return cli_usage(a->cmd, "--ttl: expected seconds, got '%s'", ttl);
		}
		json_object_set_new(body, "ttl_s", json_integer(n));
	}
	char path[300];
	snprintf(path, sizeof path, "/v1/computers/%s/stream", a->pos[0]);
	json_t *out;
	struct err e = {0};
	rc = api_json(cli, "POST", path, body, &out, &e) < 0 ? cli_fail(&e) : 0;
	json_decref(body);
	if (rc == 0) {
		if (cli->json)
			out_json(out);
		else
			puts(json_string_value(json_object_get(out, "embed_url")));
		json_decref(out);
	}
	return rc;
}

/* --ttl SECONDS into body's ttl_s; 0, or the usage's status. */
static int computers_ttl(struct args *a, json_t *body)
{
	const char *ttl = args_get(a, "ttl");
	long long n;
	if (!ttl)
		return 0;
	if (args_int(ttl, 1, 1LL << 31, &n) < 0)
		return cli_usage(a->cmd, "--ttl: expected seconds, got '%s'", ttl);
	json_object_set_new(body, "ttl_s", json_integer(n));
	return 0;
}

/* Sends body (stolen) and prints the answer's `field` (or, --json, all of it). */
static int computers_send(struct cli *cli, const char *method, const char *path, json_t *body,
			  const char *field)
{
	json_t *out = NULL;
	struct err e = {0};
	int rc = api_json(cli, method, path, body, &out, &e) < 0 ? cli_fail(&e) : 0;
	json_decref(body);
	if (rc == 0) {
		if (cli->json || !field)
			out_json(out);
		else
			puts(json_string_value(json_object_get(out, field)));
		json_decref(out);
	}
	return rc;
}

int cmd_preview(struct cli *cli, struct args *a)
{
	int rc = cli_need(a, 1, 2);
	if (rc)
		return rc;
	char path[300];
	snprintf(path, sizeof path, "/v1/computers/%s/previews", a->pos[0]);
	if (a->npos == 1) {
		json_t *out = NULL;
		struct err e = {0};
		if (api_json(cli, "GET", path, NULL, &out, &e) < 0)
			return cli_fail(&e);
		if (cli->json) {
			out_json(out);
		} else {
			size_t i;
			json_t *p;
			json_array_foreach(json_object_get(out, "previews"), i, p)
			    printf("%lld\t%s\t%s\n",
				   (long long)json_integer_value(json_object_get(p, "port")),
				   json_is_true(json_object_get(p, "public")) ? "public" : "token",
				   json_string_value(json_object_get(p, "expires_at")));
		}
		json_decref(out);
		return 0;
	}
	long long port;
	if (args_int(a->pos[1], 1, 65535, &port) < 0)
		return cli_usage(a->cmd, "PORT: expected 1..65535, got '%s'", a->pos[1]);
	if (args_has(a, "revoke")) {
		snprintf(path + strlen(path), sizeof path - strlen(path), "/%lld", port);
		return computers_send(cli, "DELETE", path, NULL, NULL);
	}
	json_t *body = json_pack("{s:I}", "port", (json_int_t)port);
	if (args_has(a, "public"))
		json_object_set_new(body, "public", json_true());
	if ((rc = computers_ttl(a, body))) {
		json_decref(body);
		return rc;
	}
	return computers_send(cli, "POST", path, body, "url");
}

int cmd_cdp(struct cli *cli, struct args *a)
{
	int rc = cli_need(a, 1, 1);
	if (rc)
		return rc;
	json_t *body = json_object();
	if ((rc = computers_ttl(a, body))) {
		json_decref(body);
		return rc;
	}
	char path[300];
	snprintf(path, sizeof path, "/v1/computers/%s/cdp", a->pos[0]);
	return computers_send(cli, "POST", path, body, "ws_url");
}

/* One usage row: id, kind, size, running s, stopped s, cost in USD. */
static void computers_usage_row(struct table *t, const json_t *u, const char *id)
{
	struct err e;
	double run = 0, stop = 0;
	long long nano = 0;
	param_double(u, "running_seconds", 0, 1e18, &run, &e);
	param_double(u, "stopped_seconds", 0, 1e18, &stop, &e);
	param_int(u, "cost_nanodollars", 0, (long long)(~0ULL >> 1), &nano, &e);
	char r[32], s[32], c[32];
	snprintf(r, sizeof r, "%.1f", run);
	snprintf(s, sizeof s, "%.1f", stop);
	snprintf(c, sizeof c, "%.6f", (double)nano / 1e9);
	const char *cells[] = {id ? id : json_string_value(json_object_get(u, "id")),
			       json_string_value(json_object_get(u, "kind")),
			       json_string_value(json_object_get(u, "size")),
			       r,
			       s,
			       c};
	table_add(t, cells);
}

int cmd_usage(struct cli *cli, struct args *a)
{
	static const char *const opts[] = {"workspace", "from", "to", NULL};
	json_t *out;
	int rc = computers_query(cli, a, "/v1/usage", opts, &out);
	if (!out)
		return rc;
	static const char *const head[] = {"ID",	"KIND",	     "SIZE",
					   "RUNNING_S", "STOPPED_S", "COST_USD"};
	struct table *t = table_new(6, head);
	size_t i;
	json_t *u;
	json_array_foreach(json_object_get(out, "computers"), i, u)
	{
		computers_usage_row(t, u, NULL);
	}
	computers_usage_row(t, json_object_get(out, "total"), "total");
	table_print(t);
	json_decref(out);
	return 0;
}
