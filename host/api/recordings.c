/*
 * recordings: the handlers of a computer's screen recordings (docs/api.md,
 * "Recordings"); the core does the work (host/core/recordings.c).
 *
 *   POST   /v1/computers/{id}/recordings              start    → 201
 *   GET    /v1/computers/{id}/recordings              list
 *   GET    /v1/computers/{id}/recordings/{rid}        the WebM file
 *   DELETE /v1/computers/{id}/recordings/{rid}        delete
 *   POST   /v1/computers/{id}/recordings/{rid}/stop   stop
 *   GET    /v1/computers/{id}/recordings/{rid}/actions  the action track
 *
 * The router checked {id} and {rid} for shape and put the rid in c->sub.
 */
#include "api-internal.h"

#include <string.h>
#include <unistd.h>

/* The file of a recording another host of a cluster holds, from that
 * host through the spool (like a file's download): 1 when this host serves
 * it, else its answer is in resp. */
static int api_recording_elsewhere(struct api *a, struct api_caller *c, const char *ws,
				   const char *rid, struct httpd_response *resp)
{
	if (!core_in_cluster(a->core))
		return 1; /* one host: the file is here, no spool file needed */
	struct err e = {0};
	char path[200];
	snprintf(path, sizeof path, "/v1/computers/%s/recordings/%.40s", c->id, rid);
	int fd = api_tmpfile(a, &e), status = 0;
	int where = fd < 0 ? -1
			   : core_forward_get(a->core, c->id, ws, path, fd, c->spool_ws,
					      &c->spooled, &status, &e);
	if (where == 1) {
		close(fd);
		return 1;
	}
	if (where < 0) {
		if (fd >= 0)
			close(fd);
		httpd_respond_err(resp, &e);
		return -1;
	}
	api_answer_spooled(resp, fd, status, "video/webm");
	return 0;
}

void api_recordings(void *ctx, struct httpd_request *req, struct httpd_response *resp)
{
	struct api *a = ctx;
	struct api_caller *c = req->user;
	struct err e = {0};
	json_t *out = NULL, *body = NULL;
	const char *ws = api_ws(c), *rid = c->sub;
	size_t plen = strlen(req->path);
	bool stop = plen > 5 && strcmp(req->path + plen - 5, "/stop") == 0;
	bool actions = plen > 8 && strcmp(req->path + plen - 8, "/actions") == 0;
	int rc, status = 200;
	if (!rid[0] && req->method == HTTPD_POST) {
		body = api_body_json(req, &e);
		rc = body ? core_recording_start(a->core, c->id, ws, body, &out, &e) : -1;
		status = 201;
	} else if (!rid[0]) {
		rc = core_recording_list(a->core, c->id, ws, &out, &e);
	} else if (stop) {
		body = api_body_json(req, &e);
		rc = body ? core_recording_stop(a->core, c->id, ws, rid, body, &out, &e) : -1;
	} else if (actions) {
		rc = core_recording_actions(a->core, c->id, ws, rid, &out, &e);
	} else if (req->method == HTTPD_DELETE) {
		rc = core_recording_delete(a->core, c->id, ws, rid, &out, &e);
	} else {
		int fd, where = api_recording_elsewhere(a, c, ws, rid, resp);
		if (where <= 0)
			return; /* the holder's answer, or the error, is out */
		uint64_t size;
		if (core_recording_open(a->core, c->id, ws, rid, &fd, &size, &e) < 0) {
			httpd_respond_err(resp, &e);
			return;
		}
		resp->status = 200;
		resp->content_type = "video/webm";
		resp->file_fd = fd;
		resp->file_len = size;
		return;
	}
	json_decref(body);
	api_answer(resp, rc, status, out, &e);
}
