/*
 * etcd: the v3 JSON gateway over libcurl (etcd.h).
 */
#include "etcd.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "base64.h"
#include "httpc.h"

struct etcd {
	char *urls[ETCD_MAX_ENDPOINTS];
	int n;
	long timeout_ms;
	pthread_mutex_t lock;
	int cur; /* under lock: the member that answered last */
	struct httpc_share *share;
};

struct etcd *etcd_open(const char *endpoints, long timeout_ms, struct err *e)
{
	struct etcd *c = calloc(1, sizeof *c);
	if (!c) {
		err_set(e, ERR_INTERNAL, "out of memory");
		return NULL;
	}
	pthread_mutex_init(&c->lock, NULL);
	c->timeout_ms = timeout_ms > 0 ? timeout_ms : 1000;
	const char *p = endpoints ? endpoints : "";
	while (*p) {
		size_t len = strcspn(p, ",");
		if (len == 0 || len > 200 || strncmp(p, "http://", 7) != 0 || len == 7) {
			err_param(e, "endpoints",
				  "endpoints: expected http://HOST:PORT[,http://HOST:PORT...], not "
				  "'%.*s'",
				  (int)(len > 200 ? 200 : len), p);
			goto fail;
		}
		if (c->n == ETCD_MAX_ENDPOINTS) {
			err_param(e, "endpoints", "endpoints: at most %d", ETCD_MAX_ENDPOINTS);
			goto fail;
		}
		/* Without a trailing slash: paths are appended. */
		size_t l = len;
		while (l > 7 && p[l - 1] == '/')
			l--;
		c->urls[c->n] = strndup(p, l);
		if (!c->urls[c->n]) {
			err_set(e, ERR_INTERNAL, "out of memory");
			goto fail;
		}
		c->n++;
		p += len;
		if (*p == ',')
			p++;
	}
	if (c->n == 0) {
		err_param(e, "endpoints", "endpoints: at least one http://HOST:PORT");
		goto fail;
	}
	c->share = httpc_share_new();
	if (!c->share) {
		err_set(e, ERR_INTERNAL, "cannot create a connection cache");
		goto fail;
	}
	return c;
fail:
	etcd_close(c);
	return NULL;
}

void etcd_close(struct etcd *c)
{
	if (!c)
		return;
	for (int i = 0; i < c->n; i++)
		free(c->urls[i]);
	if (c->share)
		httpc_share_free(c->share);
	pthread_mutex_destroy(&c->lock);
	free(c);
}

/* Whether an answer of the gateway means "this member cannot serve now, ask
 * another": no leader, stopping, not reachable from its peers (gRPC
 * Unavailable and DeadlineExceeded are 503 and 504 through the gateway). */
static bool etcd_member_unable(int status)
{
	return status == 503 || status == 504 || status == 502 || status == 500;
}

/*
 * POSTs body (a JSON object, stolen) to path on the first member that can
 * serve it; *out is the answer's JSON object (the caller frees it).
 */
static int etcd_call(struct etcd *c, const char *path, json_t *body, json_t **out, struct err *e)
{
	*out = NULL;
	char *text = json_dumps(body, JSON_COMPACT);
	json_decref(body);
	if (!text)
		return err_set(e, ERR_INTERNAL, "out of memory");
	pthread_mutex_lock(&c->lock);
	int first = c->cur;
	pthread_mutex_unlock(&c->lock);
	struct err last = {0};
	int rc = -1;
	for (int k = 0; k < c->n && rc < 0; k++) {
		int i = (first + k) % c->n;
		char url[300];
		snprintf(url, sizeof url, "%s%s", c->urls[i], path);
		struct httpc_request q = HTTPC_REQUEST_INIT;
		q.method = "POST";
		q.url = url;
		q.body = text;
		q.body_len = strlen(text);
		q.body_type = "application/json";
		q.timeout_ms = c->timeout_ms;
		q.connect_timeout_ms = c->timeout_ms;
		q.max_body = 4u << 20;
		q.max_headers = 64u << 10;
		q.share = c->share;
		struct httpc_reply r;
		if (httpc_perform(&q, &r, &last) < 0) {
			httpc_reply_free(&r);
			continue;
		}
		json_t *j = r.body ? json_loadb(r.body, r.body_len, 0, NULL) : NULL;
		/* A streaming call (keepalive) wraps its one message in "result". */
		if (json_is_object(json_object_get(j, "result"))) {
			json_t *res = json_incref(json_object_get(j, "result"));
			json_decref(j);
			j = res;
		}
		const char *msg = json_string_value(json_object_get(j, "message"));
		if (!msg)
			msg = json_string_value(json_object_get(j, "error"));
		if (r.status == 200 && json_is_object(j)) {
			*out = j;
			rc = 0;
			pthread_mutex_lock(&c->lock);
			c->cur = i;
			pthread_mutex_unlock(&c->lock);
		} else if (etcd_member_unable(r.status) || (r.status == 200 && !j)) {
			err_set(&last, ERR_UNAVAILABLE, "etcd %s: %s", c->urls[i],
				msg ? msg : "no answer it could give");
			json_decref(j);
		} else {
			/* The request itself was refused: another member would too. */
			err_set(&last, r.status == 404 ? ERR_NOT_FOUND : ERR_BAD_GATEWAY,
				"etcd %s%s: HTTP %d: %s", c->urls[i], path, r.status,
				msg ? msg : "(no message)");
			json_decref(j);
			httpc_reply_free(&r);
			break;
		}
		httpc_reply_free(&r);
	}
	free(text);
	if (rc < 0 && e)
		*e = last;
	return rc;
}

/* A 64-bit number the gateway sends as a decimal string (or, rarely, as a
 * number); 0 when absent (proto3 leaves zero values out). */
static int64_t etcd_int(const json_t *o, const char *name)
{
	const json_t *v = json_object_get(o, name);
	if (json_is_integer(v))
		return (int64_t)json_integer_value(v);
	const char *s = json_string_value(v);
	return s ? strtoll(s, NULL, 10) : 0;
}

static json_t *etcd_id(int64_t id)
{
	char s[24];
	snprintf(s, sizeof s, "%" PRId64, id);
	return json_string(s);
}

/* base64 of a key or value, as a JSON string. */
static json_t *etcd_b64(const char *s)
{
	char *b = base64_encode(s, strlen(s));
	json_t *j = b ? json_string(b) : NULL;
	free(b);
	return j;
}

int etcd_lease_grant(struct etcd *c, int ttl_s, int64_t *lease, struct err *e)
{
	json_t *out;
	if (etcd_call(c, "/v3/lease/grant", json_pack("{s:i}", "TTL", ttl_s), &out, e) < 0)
		return -1;
	*lease = etcd_int(out, "ID");
	const char *why = json_string_value(json_object_get(out, "error"));
	json_decref(out);
	if (*lease <= 0)
		return err_set(e, ERR_BAD_GATEWAY, "etcd granted no lease: %s",
			       why ? why : "no ID in its answer");
	return 0;
}

int etcd_lease_keepalive(struct etcd *c, int64_t lease, int *ttl_s, struct err *e)
{
	json_t *out;
	if (etcd_call(c, "/v3/lease/keepalive", json_pack("{s:o}", "ID", etcd_id(lease)), &out, e) <
	    0)
		return -1;
	/* A lease that is gone answers with its ID and no TTL. */
	*ttl_s = (int)etcd_int(out, "TTL");
	json_decref(out);
	return 0;
}

int etcd_lease_ttl(struct etcd *c, int64_t lease, int *ttl_s, struct err *e)
{
	json_t *out;
	if (etcd_call(c, "/v3/lease/timetolive", json_pack("{s:o}", "ID", etcd_id(lease)), &out,
		      e) < 0)
		return -1;
	json_t *t = json_object_get(out, "TTL");
	/* -1 is the gone lease's answer; a live lease at 0 seconds left says 0
	 * (left out of the JSON), so only an explicit -1 counts as gone. */
	*ttl_s = t ? (int)etcd_int(out, "TTL") : 0;
	json_decref(out);
	return 0;
}

int etcd_lease_revoke(struct etcd *c, int64_t lease, struct err *e)
{
	json_t *out;
	if (etcd_call(c, "/v3/lease/revoke", json_pack("{s:o}", "ID", etcd_id(lease)), &out, e) < 0)
		return -1;
	json_decref(out);
	return 0;
}

int etcd_lease_list(struct etcd *c, int64_t **ids, size_t *n, struct err *e)
{
	*ids = NULL;
	*n = 0;
	json_t *out;
	if (etcd_call(c, "/v3/lease/leases", json_object(), &out, e) < 0)
		return -1;
	json_t *arr = json_object_get(out, "leases");
	size_t cnt = json_array_size(arr);
	*ids = calloc(cnt ? cnt : 1, sizeof **ids);
	if (!*ids) {
		json_decref(out);
		return err_set(e, ERR_INTERNAL, "out of memory");
	}
	for (size_t i = 0; i < cnt; i++)
		(*ids)[(*n)++] = etcd_int(json_array_get(arr, i), "ID");
	json_decref(out);
	return 0;
}

/* Fills kv from one of the gateway's KeyValue objects (NULL: not found). */
static void etcd_kv_fill(const json_t *o, struct etcd_kv *kv)
{
	memset(kv, 0, sizeof *kv);
	if (!o)
		return;
	kv->found = true;
	kv->lease = etcd_int(o, "lease");
	kv->create_revision = etcd_int(o, "create_revision");
	kv->mod_revision = etcd_int(o, "mod_revision");
	const char *v = json_string_value(json_object_get(o, "value"));
	size_t len = 0;
	unsigned char *d = v ? base64_decode(v, strlen(v), &len) : NULL;
	if (d) {
		if (len >= sizeof kv->value)
			len = sizeof kv->value - 1;
		memcpy(kv->value, d, len);
		kv->value[len] = 0;
	}
	free(d);
}

int etcd_put(struct etcd *c, const char *key, const char *value, int64_t lease, struct err *e)
{
	json_t *body = json_pack("{s:o, s:o}", "key", etcd_b64(key), "value", etcd_b64(value));
	if (lease)
		json_object_set_new(body, "lease", etcd_id(lease));
	json_t *out;
	if (etcd_call(c, "/v3/kv/put", body, &out, e) < 0)
		return -1;
	json_decref(out);
	return 0;
}

int etcd_get(struct etcd *c, const char *key, struct etcd_kv *kv, struct err *e)
{
	json_t *out;
	if (etcd_call(c, "/v3/kv/range", json_pack("{s:o}", "key", etcd_b64(key)), &out, e) < 0)
		return -1;
	etcd_kv_fill(json_array_get(json_object_get(out, "kvs"), 0), kv);
	json_decref(out);
	return 0;
}

int etcd_create(struct etcd *c, const char *key, const char *value, int64_t lease, bool *created,
		struct etcd_kv *kv, struct err *e)
{
	json_t *put = json_pack("{s:o, s:o}", "key", etcd_b64(key), "value", etcd_b64(value));
	if (lease)
		json_object_set_new(put, "lease", etcd_id(lease));
	json_t *body =
	    json_pack("{s:[{s:o, s:s, s:s}], s:[{s:o}], s:[{s:{s:o}}]}", "compare", "key",
		      etcd_b64(key), "target", "CREATE", "create_revision", "0", "success",
		      "request_put", put, "failure", "request_range", "key", etcd_b64(key));
	json_t *out;
	if (etcd_call(c, "/v3/kv/txn", body, &out, e) < 0)
		return -1;
	*created = json_is_true(json_object_get(out, "succeeded"));
	if (kv && *created) {
		/* Ours, as we wrote it. */
		memset(kv, 0, sizeof *kv);
		kv->found = true;
		snprintf(kv->value, sizeof kv->value, "%s", value);
		kv->lease = lease;
		kv->create_revision = kv->mod_revision =
		    etcd_int(json_object_get(out, "header"), "revision");
	} else if (kv) {
		/* The failure branch read the key in the same transaction:
		 * whoever holds it. */
		json_t *range = json_object_get(
		    json_array_get(json_object_get(out, "responses"), 0), "response_range");
		etcd_kv_fill(json_array_get(json_object_get(range, "kvs"), 0), kv);
	}
	json_decref(out);
	return 0;
}

int etcd_delete_if_lease(struct etcd *c, const char *key, int64_t lease, struct err *e)
{
	json_t *body = json_pack("{s:[{s:o, s:s, s:o}], s:[{s:{s:o}}]}", "compare", "key",
				 etcd_b64(key), "target", "LEASE", "lease", etcd_id(lease),
				 "success", "request_delete_range", "key", etcd_b64(key));
	json_t *out;
	if (etcd_call(c, "/v3/kv/txn", body, &out, e) < 0)
		return -1;
	json_decref(out);
	return 0;
}
