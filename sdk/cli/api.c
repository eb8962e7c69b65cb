/*
 * api: calls to cubicled's REST API (docs/api.md) on wire/httpc. One
 * connection cache for the run, so `cubicle rm A B C` reuses a connection.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"

int api_need_key(struct cli *cli)
{
	if (cli->api_key && *cli->api_key)
		return 0;
	fprintf(stderr, "cubicle: no API key: set CUBICLE_API_KEY or pass --api-key KEY\n");
	return EXIT_USAGE;
}

static void api_request(struct cli *cli, struct httpc_request *q, const char *method,
			const char *path, char *url, size_t url_len)
{
	/* A trailing slash in the base would double in every path. */
	size_t base = strlen(cli->url);
	while (base && cli->url[base - 1] == '/')
		base--;
	snprintf(url, url_len, "%.*s%s", (int)base, cli->url, path);
	q->method = method;
	q->url = url;
	q->bearer = cli->api_key;
	q->share = cli->share;
}

/* Says who did not answer: the message a person sees for a transport failure. */
static int api_unreachable(struct cli *cli, struct err *e)
{
	struct err t = *e;
	return err_set(e, t.code, "cannot reach cubicled at %s: %s", cli->url, t.message);
}

/* ---- progress lines ---- */

struct api_progress {
	struct cli *cli;
	const char *what;
	struct timespec start;
	double last;
};

static double api_elapsed(const struct timespec *start)
{
	struct timespec now;
	clock_gettime(CLOCK_MONOTONIC, &now);
	return (double)(now.tv_sec - start->tv_sec) + (double)(now.tv_nsec - start->tv_nsec) / 1e9;
}

static void api_on_progress(void *arg, uint64_t dt, uint64_t dn, uint64_t ut, uint64_t un)
{
	struct api_progress *p = arg;
	double t = api_elapsed(&p->start);
	if (t - p->last < 0.2)
		return;
	p->last = t;
	uint64_t total = ut ? ut : dt, now = ut ? un : dn;
	char done[32], all[32], rate[32];
	out_bytes(done, sizeof done, now);
	out_bytes(all, sizeof all, total);
	out_bytes(rate, sizeof rate, t > 0 ? (uint64_t)((double)now / t) : 0);
	if (total)
		progress_show(p->cli, "%s: %s of %s (%d%%), %s/s", p->what, done, all,
			      (int)(now * 100 / total), rate);
	else
		progress_show(p->cli, "%s: %s, %s/s", p->what, done, rate);
}

/* While a call waits for the server (create --wait): how long so far. */
static void api_on_wait(void *arg, uint64_t dt, uint64_t dn, uint64_t ut, uint64_t un)
{
	struct api_progress *p = arg;
	(void)dt, (void)dn, (void)ut, (void)un;
	double t = api_elapsed(&p->start);
	if (t - p->last < 0.5)
		return;
	p->last = t;
	progress_show(p->cli, "%s… %.0f s", p->what, t);
}

int api_call(struct cli *cli, const char *method, const char *path, const json_t *body,
	     struct httpc_reply *r, struct err *e)
{
	char url[8800];
	struct httpc_request q = HTTPC_REQUEST_INIT;
	api_request(cli, &q, method, path, url, sizeof url);
	char *text = body ? json_dumps(body, JSON_COMPACT) : NULL;
	if (body && !text)
		return err_set(e, ERR_INTERNAL, "out of memory");
	if (text) {
		q.body = text;
		q.body_len = strlen(text);
		q.body_type = "application/json";
	}
	struct api_progress p = {.cli = cli, .what = cli->waiting};
	clock_gettime(CLOCK_MONOTONIC, &p.start);
	if (cli->tty && cli->waiting) {
		q.progress = api_on_wait;
		q.progress_arg = &p;
	}
	int rc = httpc_perform(&q, r, e);
	if (q.progress)
		progress_clear(cli);
	free(text);
	return rc < 0 ? api_unreachable(cli, e) : 0;
}

json_t *api_reply_json(const struct httpc_reply *r)
{
	if (!r->body || strncmp(r->content_type, "application/json", 16) != 0)
		return NULL;
	return json_loadb(r->body, r->body_len, JSON_ALLOW_NUL, NULL);
}

int api_json(struct cli *cli, const char *method, const char *path, const json_t *body,
	     json_t **out, struct err *e)
{
	struct httpc_reply r;
	*out = NULL;
	if (api_call(cli, method, path, body, &r, e) < 0)
		return -1;
	json_t *j = api_reply_json(&r);
	int rc = 0;
	if (r.status < 200 || r.status >= 300)
		rc = err_from_json(e, j, r.status);
	else if (!j)
		rc = err_set(e, ERR_INTERNAL, "cubicled answered %d without JSON", r.status);
	httpc_reply_free(&r);
	if (rc < 0)
		json_decref(j);
	else
		*out = j;
	return rc;
}

int api_query(char *buf, size_t len, const char *name, const char *value)
{
	if (!value)
		return 0;
	char *esc = httpc_escape(value);
	if (!esc)
		return -1;
	size_t used = strlen(buf);
	int n =
	    snprintf(buf + used, len - used, "%c%s=%s", strchr(buf, '?') ? '&' : '?', name, esc);
	free(esc);
	return n < 0 || (size_t)n >= len - used ? -1 : 0;
}

static int api_transfer(struct cli *cli, struct httpc_request *q, const char *what, json_t **out,
			struct err *e)
{
	struct api_progress p = {.cli = cli, .what = what};
	clock_gettime(CLOCK_MONOTONIC, &p.start);
	if (cli->tty) {
		q->progress = api_on_progress;
		q->progress_arg = &p;
	}
	struct httpc_reply r;
	int rc = httpc_perform(q, &r, e);
	progress_clear(cli);
	if (rc < 0) {
		if (e->code != ERR_INTERNAL)
			api_unreachable(cli, e);
		return -1;
	}
	json_t *j = api_reply_json(&r);
	if (r.status < 200 || r.status >= 300)
		rc = err_from_json(e, j, r.status);
	httpc_reply_free(&r);
	if (out && rc == 0)
		*out = j;
	else
		json_decref(j);
	return rc;
}

int api_download(struct cli *cli, const char *path, int fd, const char *what, struct err *e)
{
	char url[8800];
	struct httpc_request q = HTTPC_REQUEST_INIT;
	api_request(cli, &q, "GET", path, url, sizeof url);
	q.out_fd = fd;
	return api_transfer(cli, &q, what, NULL, e);
}

int api_upload(struct cli *cli, const char *path, int fd, uint64_t len, const char *what,
	       json_t **out, struct err *e)
{
	char url[8800];
	struct httpc_request q = HTTPC_REQUEST_INIT;
	api_request(cli, &q, "PUT", path, url, sizeof url);
	q.body_fd = fd;
	q.body_fd_len = len;
	return api_transfer(cli, &q, what, out, e);
}
