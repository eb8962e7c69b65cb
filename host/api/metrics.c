/*
 * metrics: GET /metrics (Prometheus text, version 0.0.4) and what the api
 * counts for it.
 *
 * Every request ends in api_done (httpd's on_done, on the loop or on its
 * worker): its latency into a histogram per route (the route table's
 * pattern, spec/api.json) and method, and an error answer by route and
 * code. Relaxed atomics only (wire/metrics.h): no lock on any request's
 * path. Live streams and machines' links count their bytes into the
 * counters httpd's tunnels are given (api_stream_bytes). The rest is read
 * at scrape time: the core's part (host/core/metrics.c), the runner's, and
 * cubicled's own resident memory, descriptors and threads from /proc.
 *
 * It names workspaces (the ledger's seconds per workspace), so it wants
 * the admin key unless cubicled runs with --metrics-open (api.c's router).
 */
#include "api-internal.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "metrics.h"
#include "routes.h"

#define API_METHODS 7 /* enum httpd_method */

static const char *const api_method_names[API_METHODS] = {"GET",   "POST",    "PUT",  "DELETE",
							  "PATCH", "OPTIONS", "OTHER"};

struct api_stats {
	int routes;		   /* routes_count(); index `routes` is "other" (no route) */
	struct metrics_hist *http; /* [(routes + 1) * API_METHODS] */
	_Atomic uint64_t *errors;  /* [(routes + 1) * ERR_CODE_NAMES] */
	_Atomic uint64_t stream_bytes[2], link_bytes[2]; /* [0] in, [1] out (httpd.h) */
};

int api_stats_open(struct api *a, struct err *e)
{
	struct api_stats *s = calloc(1, sizeof *s);
	if (!s)
		return err_set(e, ERR_INTERNAL, "out of memory");
	s->routes = routes_count();
	s->http = calloc((size_t)(s->routes + 1) * API_METHODS, sizeof *s->http);
	s->errors = calloc((size_t)(s->routes + 1) * ERR_CODE_NAMES, sizeof *s->errors);
	if (!s->http || !s->errors) {
		free(s->http);
		free(s->errors);
		free(s);
		return err_set(e, ERR_INTERNAL, "out of memory");
	}
	for (int i = 0; i < (s->routes + 1) * API_METHODS; i++)
		s->http[i].b = &metrics_latency;
	a->stats = s;
	return 0;
}

void api_stats_close(struct api *a)
{
	if (!a->stats)
		return;
	free(a->stats->http);
	free((void *)a->stats->errors);
	free(a->stats);
	a->stats = NULL;
}

_Atomic uint64_t *api_stream_bytes(struct api *a, bool link)
{
	return link ? a->stats->link_bytes : a->stats->stream_bytes;
}

void api_done(void *ctx, const struct httpd_request *req, const struct httpd_done *d)
{
	struct api *a = ctx;
	struct api_stats *s = a->stats;
	const struct api_caller *c = req->user;
	int r = c && c->route >= 0 && c->route < s->routes ? c->route : s->routes;
	int m = req->method >= 0 && req->method < API_METHODS ? (int)req->method : API_METHODS - 1;
	metrics_observe(&s->http[r * API_METHODS + m], d->us);
	if (d->err_code)
		metrics_add(&s->errors[r * ERR_CODE_NAMES + err_code_index(d->err_code)], 1);
}

/* ---- cubicled's own process ----------------------------------------------------- */

static void api_process(FILE *f)
{
	char buf[1024];
	FILE *st = fopen("/proc/self/stat", "r");
	size_t n = st ? fread(buf, 1, sizeof buf - 1, st) : 0;
	if (st)
		fclose(st);
	buf[n] = 0;
	/* Fields after the command's closing parenthesis (it may hold spaces). */
	char *p = strrchr(buf, ')');
	unsigned long long field[52] = {0};
	int k = 3;
	for (char *tok = p ? strtok(p + 2, " ") : NULL; tok && k < 52; tok = strtok(NULL, " "))
		field[k++] = strtoull(tok, NULL, 10);
	long tick = sysconf(_SC_CLK_TCK), page = sysconf(_SC_PAGESIZE);
	int fds = 0;
	DIR *d = opendir("/proc/self/fd");
	for (struct dirent *de; d && (de = readdir(d));)
		if (de->d_name[0] != '.')
			fds++;
	if (d) {
		closedir(d);
		fds--; /* the one opendir held */
	}
	struct rlimit rl = {0};
	getrlimit(RLIMIT_NOFILE, &rl);
	metrics_head(f, "process_resident_memory_bytes", "gauge", "cubicled's resident memory.");
	fprintf(f, "process_resident_memory_bytes %llu\n", field[24] * (unsigned long long)page);
	metrics_head(f, "process_virtual_memory_bytes", "gauge", "cubicled's virtual memory.");
	fprintf(f, "process_virtual_memory_bytes %llu\n", field[23]);
	metrics_head(f, "process_open_fds", "gauge", "cubicled's open file descriptors.");
	fprintf(f, "process_open_fds %d\n", fds);
	metrics_head(f, "process_max_fds", "gauge", "cubicled's descriptor limit.");
	fprintf(f, "process_max_fds %llu\n", (unsigned long long)rl.rlim_cur);
	metrics_head(f, "process_threads", "gauge", "cubicled's threads.");
	fprintf(f, "process_threads %llu\n", field[20]);
	metrics_head(f, "process_cpu_seconds_total", "counter", "cubicled's user and system CPU.");
	fprintf(f, "process_cpu_seconds_total %.2f\n",
		tick > 0 ? (double)(field[14] + field[15]) / (double)tick : 0.0);
}

/* ---- GET /metrics ------------------------------------------------------------------ */

static void api_metrics_http(struct api *a, FILE *f)
{
	struct api_stats *s = a->stats;
	metrics_head(f, "cubicle_http_request_duration_seconds", "histogram",
		     "Requests from their headers to their answer's last byte, by route (the "
		     "route table's pattern; other: none matched) and method.");
	for (int r = 0; r <= s->routes; r++)
		for (int m = 0; m < API_METHODS; m++) {
			const struct metrics_hist *h = &s->http[r * API_METHODS + m];
			if (metrics_count(h) == 0)
				continue;
			char labels[300], route[200];
			metrics_label(route, sizeof route, routes_pattern(r));
			snprintf(labels, sizeof labels, "route=\"%s\",method=\"%s\"", route,
				 api_method_names[m]);
			metrics_write_hist(f, "cubicle_http_request_duration_seconds", labels, h);
		}
	metrics_head(f, "cubicle_http_errors_total", "counter",
		     "Error answers by route and error code (docs/api.md, Errors).");
	for (int r = 0; r <= s->routes; r++)
		for (int k = 0; k < ERR_CODE_NAMES; k++) {
			uint64_t n = metrics_get(&s->errors[r * ERR_CODE_NAMES + k]);
			if (!n)
				continue;
			char route[200];
			metrics_label(route, sizeof route, routes_pattern(r));
			fprintf(f, "cubicle_http_errors_total{route=\"%s\",code=\"%s\"} %llu\n",
				route, err_code_at(k), (unsigned long long)n);
		}
	metrics_head(f, "cubicle_stream_bytes_total", "counter",
		     "Bytes through the WebSocket tunnels: live streams (stream) and machines' "
		     "links (link), from the client (in) and to it (out).");
	static const char *const dir[2] = {"in", "out"};
	for (int i = 0; i < 2; i++)
		fprintf(f, "cubicle_stream_bytes_total{tunnel=\"stream\",direction=\"%s\"} %llu\n",
			dir[i], (unsigned long long)metrics_get(&s->stream_bytes[i]));
	for (int i = 0; i < 2; i++)
		fprintf(f, "cubicle_stream_bytes_total{tunnel=\"link\",direction=\"%s\"} %llu\n",
			dir[i], (unsigned long long)metrics_get(&s->link_bytes[i]));
}

void api_metrics(void *ctx, struct httpd_request *req, struct httpd_response *resp)
{
	struct api *a = ctx;
	(void)req;
	char *out = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&out, &len);
	if (!f) {
		struct err e = {0};
		err_set(&e, ERR_INTERNAL, "out of memory");
		httpd_respond_err(resp, &e);
		return;
	}
	api_metrics_http(a, f);
	char *core = core_metrics(a->core), *runs = a->runner ? runner_metrics(a->runner) : NULL;
	fputs(core ? core : "", f);
	fputs(runs ? runs : "", f);
	free(core);
	free(runs);
	api_process(f);
	fclose(f);
	resp->status = 200;
	resp->content_type = "text/plain; version=0.0.4; charset=utf-8";
	resp->body = (unsigned char *)out;
	resp->body_len = len;
}
