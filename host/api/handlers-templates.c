/*
 * handlers-templates: the REST handlers of /v1/templates (docs/api.md,
 * Templates). Thin: parse, call the core (host/core/template.h), shape the
 * answer. The router checked the name's shape (c->id).
 */
#include "api-internal.h"

#include <string.h>

#include "template.h"

/* GET /v1/templates (?workspace= for the admin); POST: create → 202. */
void api_templates(void *ctx, struct httpd_request *req, struct httpd_response *resp)
{
	struct api *a = ctx;
	struct api_caller *c = req->user;
	struct err e = {0};
	json_t *out = NULL;
	if (req->method == HTTPD_GET) {
		static const char *const known[] = {"workspace", NULL};
		int rc = api_query_known(req, known, &e);
		if (rc == 0)
			rc = core_template_list(a->core, api_ws(c), httpd_query(req, "workspace"),
						&out, &e);
		api_answer(resp, rc, 200, out, &e);
		return;
	}
	static const char *const none[] = {NULL};
	json_t *body = NULL;
	int rc = api_query_known(req, none, &e);
	if (rc == 0 && !(body = api_body_json(req, &e)))
		rc = -1;
	if (rc == 0)
		rc = core_template_create(a->core, api_ws(c), body, &out, &e);
	json_decref(body);
	api_answer(resp, rc, 202, out, &e);
}

/* GET /v1/templates/{name}[?wait=ready&timeout_s=N]; DELETE. */
void api_template(void *ctx, struct httpd_request *req, struct httpd_response *resp)
{
	struct api *a = ctx;
	struct api_caller *c = req->user;
	struct err e = {0};
	json_t *out = NULL;
	const char *workspace = httpd_query(req, "workspace");
	if (req->method == HTTPD_DELETE) {
		static const char *const known[] = {"workspace", NULL};
		int rc = api_query_known(req, known, &e);
		if (rc == 0)
			rc = core_template_delete(a->core, api_ws(c), workspace, c->id, &out, &e);
		api_answer(resp, rc, 200, out, &e);
		return;
	}
	static const char *const known[] = {"wait", "timeout_s", "workspace", NULL};
	const char *wait = httpd_query(req, "wait");
	long long timeout = 60;
	char id[40];
	int rc = api_query_known(req, known, &e);
	if (rc == 0 && wait && strcmp(wait, "ready") != 0)
		rc = err_param(&e, "wait",
			       "wait: ready (answers once the build is over), not '%.40s'", wait);
	if (rc == 0)
		rc = api_query_int(req, "timeout_s", 0, 3600, 60, &timeout, &e);
	if (rc == 0 && wait &&
	    (rc = core_template_wait_begin(a->core, api_ws(c), workspace, c->id, id, &e)) == 0) {
		api_answer_wait_template(a, req, resp, (int)timeout, id);
		return;
	}
	if (rc == 0)
		rc = core_template_get(a->core, api_ws(c), workspace, c->id, &out, &e);
	api_answer(resp, rc, 200, out, &e);
}

/* GET /v1/templates/{name}/log?offset=N&max_bytes=M */
void api_template_log(void *ctx, struct httpd_request *req, struct httpd_response *resp)
{
	struct api *a = ctx;
	struct api_caller *c = req->user;
	struct err e = {0};
	json_t *out = NULL;
	static const char *const known[] = {"offset", "max_bytes", "workspace", NULL};
	long long offset = 0, max = 262144;
	int rc = api_query_known(req, known, &e);
	if (rc == 0)
		rc = api_query_int(req, "offset", 0, 1LL << 40, 0, &offset, &e);
	if (rc == 0)
		rc = api_query_int(req, "max_bytes", 1, 262144, 262144, &max, &e);
	if (rc == 0)
		rc = core_template_log(a->core, api_ws(c), httpd_query(req, "workspace"), c->id,
				       offset, max, &out, &e);
	api_answer(resp, rc, 200, out, &e);
}
