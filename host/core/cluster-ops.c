/*
 * cluster-ops: what a host of a cluster does for computers another host
 * holds (docs/cluster.md): forwarding a call to the holder (signed with
 * this node's credential, capped like an envd's answer, looked up again
 * once when the other host answers 421 or does not answer), booting what
 * the database placed on another host and placing it again when that
 * host cannot, GET /v1/hosts, drain, and re-creating a lost computer.
 */
#include "cluster-internal.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "clock.h"
#include "ident.h"
#include "member.h"
#include "nodeauth.h"

/* ---- forwarding ---------------------------------------------------------------------------------
 */

/* Signs and sends q to the host at address, as workspace ws. */
static int cl_send(struct core *c, const char *address, const char *ws, struct core_node_call *q,
		   struct envd_reply *r, struct err *e)
{
	struct core_cluster *cl = c->cluster;
	char canon[CL_MAX_FORWARD], url[CL_MAX_FORWARD], cred[NODEAUTH_MAX],
	    header[NODEAUTH_MAX + 32];
	if (nodeauth_canonical(q->path, q->query, q->nquery, canon, sizeof canon) < 0 ||
	    nodeauth_url(q->path, q->query, q->nquery, url, sizeof url) < 0)
		return err_set(e, ERR_INVALID, "the request is too long to forward");
	if (nodeauth_sign(cl->nodeauth, c->host_id, ws, q->method, canon, clock_wall_ms(), cred,
			  e) < 0)
		return -1;
	snprintf(header, sizeof header, "X-Cubicle-Node: %s", cred);
	struct envd_node_call nc = {.method = q->method,
				    .path = url,
				    .header = header,
				    .body = q->body,
				    .len = q->len,
				    .body_fd = q->body_fd,
				    .body_fd_len = q->body_fd_len,
				    .out_fd = q->out_fd,
				    .out_reserve = q->out_reserve,
				    .out_reserve_arg = q->out_reserve_arg,
				    .timeout_ms = q->timeout_ms};
	if (q->body_fd >= 0 && lseek(q->body_fd, 0, SEEK_SET) < 0)
		return err_set(e, ERR_INTERNAL, "cannot read the spooled body: %s",
			       strerror(errno));
	if (q->out_fd >= 0 && (ftruncate(q->out_fd, 0) < 0 || lseek(q->out_fd, 0, SEEK_SET) < 0))
		return err_set(e, ERR_INTERNAL, "cannot reuse the spool file: %s", strerror(errno));
	return envd_node(address, &nc, r, e);
}

int core_cluster_call(struct core *c, const char *id, const char *ws, struct core_node_call *q,
		      struct envd_reply *r, struct err *e)
{
	char tried[256] = "";
	for (int attempt = 0;; attempt++) {
		char address[256];
		int where = core_cluster_holder(c, id, ws, address, sizeof address, e);
		if (where <= 0)
			return where < 0 ? -1 : 1; /* 1: not held elsewhere: serve it here */
		if (attempt > 0 && strcmp(address, tried) == 0)
			return -1; /* the same host, still not answering: its error stands */
		snprintf(tried, sizeof tried, "%s", address);
		if (cl_send(c, address, ws, q, r, e) < 0) {
			/* Its host may have just died (the catalog lags a second):
			 * the database says whether it is lost (served here) or
			 * elsewhere now; only then is it tried once more. */
			core_cluster_forget(c, id);
			if (attempt == 0) {
				core_cluster_refresh(c);
				continue;
			}
			return -1;
		}
		/* Its host changed since we looked: once more, from the database. */
		if (r->status == 421 && attempt == 0) {
			envd_reply_free(r);
			core_cluster_forget(c, id);
			continue;
		}
		return 0;
	}
}

/* An answer's JSON: *out on ok_status, else e from its error. */
static int cl_answer_json(const char *id, struct envd_reply *r, int ok_status, json_t **out,
			  struct err *e)
{
	json_t *j = json_loadb(r->body ? r->body : "", r->body_len, 0, NULL);
	int status = r->status;
	envd_reply_free(r);
	if (status != ok_status) {
		err_from_json(e, j, status);
		json_decref(j);
		return -1;
	}
	if (!json_is_object(j)) {
		json_decref(j);
		return err_set(e, ERR_BAD_GATEWAY,
			       "the host that holds computer %s answered no JSON object", id);
	}
	*out = j;
	return 0;
}

int core_cluster_json(struct core *c, const char *id, const char *ws, const char *method,
		      const char *path, const json_t *body, int ok_status, json_t **out,
		      struct err *e)
{
	char *text = body ? json_dumps(body, JSON_COMPACT) : NULL;
	if (body && !text)
		return err_set(e, ERR_INTERNAL, "out of memory");
	struct core_node_call q = {.method = method,
				   .path = path,
				   .body = text,
				   .len = text ? strlen(text) : 0,
				   .body_fd = -1,
				   .out_fd = -1,
				   .timeout_ms = 0};
	struct envd_reply r;
	int rc = core_cluster_call(c, id, ws, &q, &r, e);
	free(text);
	if (rc != 0)
		return rc;
	return cl_answer_json(id, &r, ok_status, out, e) < 0 ? -1 : 0;
}

bool core_in_cluster(const struct core *c)
{
	return c->cluster != NULL;
}

int core_forward_json(struct core *c, const char *id, const char *ws, const char *method,
		      const char *path, const json_t *body, int ok_status, json_t **out,
		      struct err *e)
{
	if (!c->cluster)
		return 1;
	return core_cluster_json(c, id, ws, method, path, body, ok_status, out, e);
}

int core_forward_get(struct core *c, const char *id, const char *ws, const char *path, int fd,
		     char spool_ws[40], uint64_t *spooled, int *status, struct err *e)
{
	*spooled = 0;
	if (!c->cluster)
		return 1;
	snprintf(spool_ws, 40, "%s", ws ? ws : "");
	struct core_download d = {c, spool_ws, spooled};
	struct core_node_call q = {.method = "GET",
				   .path = path,
				   .body_fd = -1,
				   .out_fd = fd,
				   .out_reserve = core_download_reserve,
				   .out_reserve_arg = &d,
				   .timeout_ms = envd_get_limits().file_s * 1000};
	struct envd_reply r;
	int rc = core_cluster_call(c, id, ws, &q, &r, e);
	if (rc != 0)
		return rc;
	*status = r.status;
	envd_reply_free(&r);
	return 0;
}

/* ---- placement's second half --------------------------------------------------------------------
 */

/* Asks host (at address) to boot computer id, which the database placed
 * there: POST /v1/computers/{id}/boot, a node's call only. */
static int cl_boot_on(struct core *c, const char *host, const char *id, json_t **out, struct err *e)
{
	char address[256], path[128];
	if (core_host_address(c, host, address, sizeof address) < 0) {
		core_cluster_refresh(c);
		if (core_host_address(c, host, address, sizeof address) < 0)
			return err_set(e, ERR_UNAVAILABLE, "host %s is down", host);
	}
	snprintf(path, sizeof path, "/v1/computers/%s/boot", id);
	struct core_node_call q = {
	    .method = "POST", .path = path, .body_fd = -1, .out_fd = -1, .timeout_ms = 10000};
	struct envd_reply r;
	if (cl_send(c, address, NULL, &q, &r, e) < 0)
		return -1;
	return cl_answer_json(id, &r, 200, out, e);
}

int core_cluster_launch(struct core *c, struct store_computer *sc, json_t **out, struct err *e)
{
	char tried[CL_PLACE_TRIES * 66] = ",";
	for (int n = 0;; n++) {
		if (strcmp(sc->host, c->host_id) == 0) {
			if (!core_rt_add(c, sc))
				return err_set(e, ERR_INTERNAL, "out of memory");
			core_boot_later(c, sc->id);
			*out = core_json_public(sc);
			return 0;
		}
		struct err be = {0};
		if (cl_boot_on(c, sc->host, sc->id, out, &be) == 0) {
			cl_where_put(c, sc->id, sc->host);
			return 0;
		}
		fprintf(stderr, "cubicled: cluster: %s: host %s did not take it: %s\n", sc->id,
			sc->host, be.message);
		/* Elsewhere, never on a host that failed it already. */
		size_t at = strlen(tried);
		snprintf(tried + at, sizeof tried - at, "%s,", sc->host);
		struct store_capacity need = sc->reserved;
		struct store_place p = {.need = need, .exclude = tried};
		struct store_placed placed;
		if (n + 1 >= CL_PLACE_TRIES || store_place(c->store, sc->id, &p, &placed, e) < 0) {
			if (n + 1 >= CL_PLACE_TRIES)
				err_set(e, be.code ? be.code : ERR_UNAVAILABLE,
					"no host could start computer %s (the last, %s: %s)",
					sc->id, sc->host, be.message);
			/* It never started: an error, holding nothing. */
			store_computer_set_state(c->store, sc->id, "error", e->message, NULL);
			return -1;
		}
		snprintf(sc->host, sizeof sc->host, "%s", placed.host);
		sc->epoch = placed.epoch;
	}
}

int core_cluster_boot(struct core *c, const char *id, json_t **out, struct err *e)
{
	struct store_computer sc = {0};
	if (store_computer_get(c->store, id, NULL, &sc, e) < 0)
		return -1;
	int rc = 0;
	int64_t epoch = core_cluster_epoch(c);
	if (strcmp(sc.host, c->host_id) != 0 || sc.epoch != epoch || !epoch)
		rc = err_set(e, ERR_MISDIRECTED,
			     "computer %s is not placed on host %s (epoch %" PRId64 ")", id,
			     c->host_id, epoch);
	else if (sc.state != COMPUTER_PROVISIONING)
		rc = err_set(e, ERR_CONFLICT, "computer %s is %s, not provisioning", id,
			     computer_state_name(sc.state));
	else if (!core_rt_add(c, &sc))
		rc = err_set(e, ERR_INTERNAL, "out of memory");
	if (rc == 0) {
		core_boot_later(c, id);
		*out = core_json_public(&sc);
	}
	store_computer_clear(&sc);
	return rc;
}

/* ---- hosts, drain, recreate -------------------------------------------------------------------
 */

int core_cluster_hosts(struct core *c, json_t **out, struct err *e)
{
	struct core_cluster *cl = c->cluster;
	struct store_host *hosts = NULL;
	size_t n = 0;
	if (store_host_list(c->store, &hosts, &n, e) < 0)
		return -1;
	char leader[64];
	member_leader_id(cl->member, leader);
	int64_t now = clock_wall_ms();
	json_t *arr = json_array();
	for (size_t i = 0; i < n; i++) {
		const struct store_host *h = &hosts[i];
		bool me = strcmp(h->id, c->host_id) == 0;
		struct core_capacity cap = {h->capacity.cpu_milli, h->capacity.mem_mb,
					    h->capacity.disk_mb},
				     used = {h->used.cpu_milli, h->used.mem_mb, h->used.disk_mb};
		json_t *capj = core_capacity_json(&cap);
		json_object_set_new(capj, "cpu_overcommit_pct",
				    json_integer(h->cpu_overcommit_pct));
		/* The warm pool's desktops there (counted in computers too). */
		int warm = 0;
		if (c->pool_ws[0]) {
			struct store_filter f = {.workspace = c->pool_ws, .host = h->id};
			struct store_computer *all = NULL;
			size_t na = 0;
			if (store_computer_list(c->store, &f, &all, &na, NULL) == 0)
				for (size_t k = 0; k < na; k++) {
					if (all[k].state != COMPUTER_LOST)
						warm++;
					store_computer_clear(&all[k]);
				}
			free(all);
		}
		char epoch[24];
		snprintf(epoch, sizeof epoch, "%" PRId64, h->epoch);
		int64_t age = me ? member_lease_age_ms(cl->member) : now - h->seen_ms;
		json_t *j = json_pack(
		    "{s:s, s:s, s:s, s:s, s:b, s:o, s:o, s:o, s:i, s:i, s:I, s:I}", "id", h->id,
		    "address", h->address, "state", h->epoch > 0 ? h->state : "down", "epoch",
		    epoch, "leader", h->epoch > 0 && strcmp(leader, h->id) == 0, "lease_age_ms",
		    h->epoch > 0 && age >= 0 ? json_integer(age) : json_null(), "capacity", capj,
		    "allocated", core_capacity_json(&used), "computers", h->computers, "warm", warm,
		    "registered_at", (json_int_t)h->registered_ms, "seen_at",
		    (json_int_t)h->seen_ms);
		json_array_append_new(arr, j);
	}
	free(hosts);
	*out = json_pack("{s:o}", "hosts", arr);
	return 0;
}

int core_cluster_recreate(struct core *c, const char *id, const char *ws, json_t **out,
			  struct err *e)
{
	struct store_computer sc = {0};
	if (store_computer_get(c->store, id, ws, &sc, e) < 0)
		return -1;
	if (sc.state != COMPUTER_LOST) {
		int rc = err_set(e, ERR_CONFLICT,
				 "computer %s is %s: only a lost computer (its host died) is "
				 "re-created",
				 id, computer_state_name(sc.state));
		store_computer_clear(&sc);
		return rc;
	}
	/* The same id, workspace, kind, size, metadata and session; a fresh
	 * disk from the image, a new agent token. */
	char old[sizeof sc.host];
	snprintf(old, sizeof old, "%s", sc.host);
	if (ident_random_hex(sc.envd_token, 24, e) < 0) {
		store_computer_clear(&sc);
		return -1;
	}
	json_decref(sc.driver_state);
	sc.driver_state = json_object();
	sc.state = COMPUTER_PROVISIONING;
	sc.error[0] = 0;
	sc.accel[0] = 0;
	sc.last_activity_ms = clock_wall_ms();
	struct core_capacity need;
	core_capacity_of(sc.kind, sc.size, &need);
	struct store_place p = {.need = {need.millicpus, need.memory_mb, need.disk_mb}};
	struct store_commit how = {.place = &p, .limit = core_limit(c, sc.workspace)};
	int rc = store_computer_commit(c->store, &sc, &how, e);
	if (rc == 0) {
		fprintf(stderr, "cubicled: cluster: %s re-created: was on %s, placed on %s\n", id,
			old, sc.host);
		core_cluster_forget(c, id);
		rc = core_cluster_launch(c, &sc, out, e);
	}
	store_computer_clear(&sc);
	return rc;
}

int core_cluster_drain(struct core *c, const char *host, const char *mode, json_t **out,
		       struct err *e)
{
	bool move = strcmp(mode, "move") == 0;
	if (move && strcmp(host, c->host_id) != 0) {
		/* Its computers move from where they run: the host does it. */
		char address[256], path[160];
		if (core_host_address(c, host, address, sizeof address) < 0)
			return err_set(e, ERR_CONFLICT, "host %s is down or unknown", host);
		snprintf(path, sizeof path, "/v1/hosts/%s/drain", host);
		struct core_node_call q = {.method = "POST",
					   .path = path,
					   .body = "{\"mode\":\"move\"}",
					   .len = 15,
					   .body_fd = -1,
					   .out_fd = -1,
					   .timeout_ms = 600000};
		struct envd_reply r;
		if (cl_send(c, address, NULL, &q, &r, e) < 0)
			return -1;
		return cl_answer_json(host, &r, 200, out, e);
	}
	if (store_host_set_state(c->store, host, strcmp(mode, "off") == 0 ? "up" : "draining", e) <
	    0)
		return -1;
	json_t *moved = json_array();
	if (move) {
		/* Each of ours, stopped and destroyed here, made again elsewhere
		 * (as a recreate: its session stays, its disk does not). */
		struct store_filter f = {.host = c->host_id};
		struct store_computer *all = NULL;
		size_t n = 0;
		if (store_computer_list(c->store, &f, &all, &n, e) < 0) {
			json_decref(moved);
			return -1;
		}
		for (size_t i = 0; i < n; i++) {
			const char *id = all[i].id;
			if (all[i].state == COMPUTER_LOST ||
			    (c->pool_ws[0] && strcmp(all[i].workspace, c->pool_ws) == 0))
				continue;
			core_lose_local(c, id, "moved off its draining host");
			/* Lost here, billed until now; then made again elsewhere. */
			struct err me = {0};
			json_t *one = NULL;
			struct store_computer sc = {0};
			int rc = store_computer_get(c->store, id, NULL, &sc, &me);
			if (rc == 0) {
				sc.state = COMPUTER_LOST;
				snprintf(sc.error, sizeof sc.error,
					 "moved off its draining host %s", c->host_id);
				struct store_commit how = {
				    .bill = true, .rate_state = NULL, .at_ms = clock_wall_ms()};
				rc = store_computer_commit(c->store, &sc, &how, &me);
			}
			store_computer_clear(&sc);
			if (rc == 0 && core_cluster_recreate(c, id, NULL, &one, &me) == 0)
				json_array_append_new(moved, json_string(id));
			else
				fprintf(stderr, "cubicled: cluster: drain: %s not moved: %s\n", id,
					me.message);
			json_decref(one);
		}
		for (size_t i = 0; i < n; i++)
			store_computer_clear(&all[i]);
		free(all);
	}
	struct store_host h;
	if (store_host_get(c->store, host, &h, e) < 0) {
		json_decref(moved);
		return -1;
	}
	json_t *hosts = NULL;
	json_t *hj = NULL;
	if (core_cluster_hosts(c, &hosts, NULL) == 0) {
		size_t i;
		json_t *one;
		json_array_foreach(json_object_get(hosts, "hosts"), i, one)
		{
			if (strcmp(json_string_value(json_object_get(one, "id")), host) == 0)
				hj = json_incref(one);
		}
	}
	json_decref(hosts);
	*out = json_pack("{s:o, s:o}", "host", hj ? hj : store_host_json(&h), "moved", moved);
	return 0;
}
