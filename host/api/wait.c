/*
 * wait: ?wait=STATE on the lifecycle routes. A wait that is not over at once
 * is parked (httpd_park: no worker thread held) and answered by one waiter
 * thread when its computer reaches the state, its deadline passes or its
 * client leaves.
 */
#include "api-internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* A ?wait= request parked (httpd_park) until its computer reaches the
 * state, its deadline passes or its client leaves: api_waiter answers it. */
struct api_parked {
	struct api_parked *next;
	struct httpd_parked *hp;
	char id[40], ws[40];
	bool admin;  /* ws NULL: the admin sees every workspace */
	bool create; /* POST /v1/computers: 201, and an error names the computer */
	bool tpl;    /* GET /v1/templates/{name}?wait=ready: id is the template's */
	enum computer_state state, stored;
	int timeout_s;
	struct timespec deadline; /* CLOCK_MONOTONIC */
};

int api_wait_parse(struct httpd_request *req, struct api_wait *w, struct err *e)
{
	const char *q = httpd_query(req, "wait");
	w->wait = q != NULL;
	w->state = COMPUTER_RUNNING;
	if (q && (computer_state_parse(q, &w->state) < 0 ||
		  (w->state != COMPUTER_RUNNING && w->state != COMPUTER_STOPPED &&
		   w->state != COMPUTER_DELETED && w->state != COMPUTER_ERROR)))
		return err_param(e, "wait",
				 "wait: one of running, stopped, deleted, error, not '%.40s'", q);
	long long timeout = 60;
	if (api_query_int(req, "timeout_s", 0, 3600, 60, &timeout, e) < 0)
		return -1;
	w->timeout_s = (int)timeout;
	return 0;
}

/* An error after a create: the computer exists (and goes on booting), so
 * the error says which it is. */
static void api_respond_err_id(struct httpd_response *resp, const struct err *e, const char *id)
{
	json_t *ej = err_to_json(e);
	json_object_set_new(json_object_get(ej, "error"), "computer_id", json_string(id));
	httpd_respond_json(resp, err_http_status(e->code), ej);
}

/* Whether a parked wait is over, from memory. */
static bool api_wait_over(struct api *a, const struct api_parked *w, enum computer_state *now)
{
	if (w->tpl) {
		enum template_state t;
		*now = COMPUTER_ERROR;
		return core_template_wait_over(a->core, w->id, &t);
	}
	return core_wait_over(a->core, w->id, w->state, w->stored, now);
}

/* The answer of a template's wait that ended: its JSON, or 504. */
static void api_wait_answer_template(struct api *a, const struct api_parked *w, bool timed_out,
				     struct httpd_response *resp)
{
	struct err e = {0};
	json_t *out = NULL;
	int rc = timed_out ? err_set(&e, ERR_TIMEOUT, "template %s is still building after %d s",
				     w->id, w->timeout_s)
			   : core_template_json_by_id(a->core, w->id, &out, &e);
	if (rc == 0)
		httpd_respond_json(resp, 200, out);
	else
		httpd_respond_err(resp, &e);
}

/* The answer of a wait that ended: the computer's JSON, or why not. */
static void api_wait_answer(struct api *a, const struct api_parked *w, bool timed_out,
			    enum computer_state now, struct httpd_response *resp)
{
	struct err e = {0};
	json_t *out = NULL;
	int rc = timed_out ? err_set(&e, ERR_TIMEOUT, "computer %s is still %s after %d s", w->id,
				     computer_state_name(now), w->timeout_s)
			   : core_get(a->core, w->id, w->admin ? NULL : w->ws, &out, &e);
	if (rc == 0)
		httpd_respond_json(resp, w->create ? 201 : 200, out);
	else if (w->create)
		api_respond_err_id(resp, &e, w->id);
	else
		httpd_respond_err(resp, &e);
}

/*
 * The waiter: one thread answers every parked wait. It looks at them after
 * each state change of any computer (core_await_change) and at least every
 * 250 ms (deadlines, clients that left, waits parked meanwhile).
 */
void *api_waiter(void *arg)
{
	struct api *a = arg;
	for (;;) {
		struct timespec t;
		clock_gettime(CLOCK_MONOTONIC, &t);
		struct api_parked *ended = NULL;
		pthread_mutex_lock(&a->parked_lock);
		bool stop = a->waiter_stop;
		struct api_parked **pp = &a->parked;
		while (*pp) {
			struct api_parked *w = *pp;
			enum computer_state now;
			bool over =
			    stop || httpd_parked_gone(w->hp) || api_wait_over(a, w, &now) ||
			    t.tv_sec > w->deadline.tv_sec ||
			    (t.tv_sec == w->deadline.tv_sec && t.tv_nsec >= w->deadline.tv_nsec);
			if (over) {
				*pp = w->next;
				w->next = ended;
				ended = w;
			} else {
				pp = &w->next;
			}
		}
		pthread_mutex_unlock(&a->parked_lock);
		while (ended) {
			struct api_parked *w = ended;
			ended = w->next;
			enum computer_state now;
			struct httpd_response *resp = httpd_parked_response(w->hp);
			if (stop) {
				struct err e = {0};
				err_set(&e, ERR_UNAVAILABLE,
					"cubicled is stopping; wait again later");
				httpd_respond_err(resp, &e);
			} else if (!httpd_parked_gone(w->hp)) {
				bool reached = api_wait_over(a, w, &now);
				if (w->tpl)
					api_wait_answer_template(a, w, !reached, resp);
				else
					api_wait_answer(a, w, !reached, now, resp);
			}
			httpd_parked_done(w->hp);
			free(w);
		}
		if (stop)
			return NULL;
		core_await_change(a->core, 250);
	}
}

void api_answer_wait(struct api *a, struct httpd_request *req, struct httpd_response *resp,
		     const struct api_wait *wt, const char *id, const char *ws, bool create,
		     json_t *out)
{
	if (!wt->wait) {
		httpd_respond_json(resp, create ? 201 : 200, out);
		return;
	}
	json_decref(out);
	struct api_parked *w = calloc(1, sizeof *w);
	struct err e = {0};
	enum computer_state now;
	if (!w) {
		err_set(&e, ERR_INTERNAL, "out of memory");
		goto fail;
	}
	snprintf(w->id, sizeof w->id, "%s", id);
	snprintf(w->ws, sizeof w->ws, "%s", ws ? ws : "");
	w->admin = !ws;
	w->create = create;
	w->state = wt->state;
	w->timeout_s = wt->timeout_s;
	clock_gettime(CLOCK_MONOTONIC, &w->deadline);
	w->deadline.tv_sec += wt->timeout_s;
	if (core_wait_begin(a->core, id, ws, &w->stored, &e) < 0)
		goto fail;
	bool over = core_wait_over(a->core, id, w->state, w->stored, &now);
	if (over || wt->timeout_s == 0) {
		api_wait_answer(a, w, !over, now, resp);
		free(w);
		return;
	}
	pthread_mutex_lock(&a->parked_lock);
	if (!a->waiter_stop) {
		w->hp = httpd_park(req);
		w->next = a->parked;
		a->parked = w;
		pthread_mutex_unlock(&a->parked_lock);
		return;
	}
	pthread_mutex_unlock(&a->parked_lock);
	err_set(&e, ERR_UNAVAILABLE, "cubicled is stopping; wait again later");
fail:
	free(w);
	if (create)
		api_respond_err_id(resp, &e, id);
	else
		httpd_respond_err(resp, &e);
}

void api_answer_wait_template(struct api *a, struct httpd_request *req, struct httpd_response *resp,
			      int timeout_s, const char *id)
{
	struct api_parked *w = calloc(1, sizeof *w);
	struct err e = {0};
	enum template_state now;
	if (!w) {
		err_set(&e, ERR_INTERNAL, "out of memory");
		httpd_respond_err(resp, &e);
		return;
	}
	snprintf(w->id, sizeof w->id, "%s", id);
	w->tpl = true;
	w->timeout_s = timeout_s;
	clock_gettime(CLOCK_MONOTONIC, &w->deadline);
	w->deadline.tv_sec += timeout_s;
	bool over = core_template_wait_over(a->core, id, &now);
	if (over || timeout_s == 0) {
		api_wait_answer_template(a, w, !over, resp);
		free(w);
		return;
	}
	pthread_mutex_lock(&a->parked_lock);
	if (!a->waiter_stop) {
		w->hp = httpd_park(req);
		w->next = a->parked;
		a->parked = w;
		pthread_mutex_unlock(&a->parked_lock);
		return;
	}
	pthread_mutex_unlock(&a->parked_lock);
	free(w);
	err_set(&e, ERR_UNAVAILABLE, "cubicled is stopping; wait again later");
	httpd_respond_err(resp, &e);
}
