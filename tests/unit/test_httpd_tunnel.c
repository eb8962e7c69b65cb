/*
 * httpd's WebSocket tunnels against unix sockets this test controls: the
 * preamble goes first, a listener that never accepts holds nothing (the
 * connect is non-blocking: past its backlog the upgrade is 503 at once, and
 * a tunnel it took closes with 4504 when the socket stays silent), and
 * plain requests keep being answered meanwhile. And a relay: a second
 * server whose tunnels go to the first one's WebSocket (how a node of a
 * cluster hands a stream on), with its header, both directions, and the
 * first one's refusal arriving as close code 4403.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <pthread.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <unistd.h>
#include <cmocka.h>

#include "httpd.h"

static char sock_path[108];
static struct httpd *H, *R;
static pthread_t loop, rloop;
static int port, rport;
static char seen_node[128];

static void handler_ok(void *ctx, struct httpd_request *req, struct httpd_response *resp)
{
	(void)ctx;
	(void)req;
	httpd_respond_json(resp, 200, json_pack("{s:b}", "ok", 1));
}

static int router(void *ctx, struct httpd_request *req, struct httpd_route *route, struct err *e)
{
	(void)ctx;
	(void)req;
	(void)e;
	route->handler = handler_ok;
	return 0;
}

static int tunnel(void *ctx, struct httpd_request *req, struct httpd_tunnel *t, struct err *e)
{
	(void)ctx;
	snprintf(seen_node, sizeof seen_node, "%s", req->extra[0]);
	if (strcmp(req->path, "/refuse") == 0)
		return err_set(e, ERR_FORBIDDEN, "refused");
	snprintf(t->unix_path, sizeof t->unix_path, "%s", sock_path);
	snprintf(t->tag, sizeof t->tag, "t");
	snprintf(t->preamble, sizeof t->preamble, "hello line\n");
	t->answer_seconds = 1;
	return 0;
}

/* The relay's router: every stream goes to H's WebSocket at the same path. */
static int relay_tunnel(void *ctx, struct httpd_request *req, struct httpd_tunnel *t, struct err *e)
{
	(void)ctx;
	(void)e;
	snprintf(t->relay_host, sizeof t->relay_host, "127.0.0.1");
	t->relay_port = port;
	snprintf(t->relay_path, sizeof t->relay_path, "%.500s", req->path);
	snprintf(t->relay_header, sizeof t->relay_header, "X-Cubicle-Node: n1.proof");
	snprintf(t->tag, sizeof t->tag, "r");
	return 0;
}

static void *loop_main(void *arg)
{
	httpd_run(arg);
	return NULL;
}

static int setup(void **state)
{
	(void)state;
	snprintf(sock_path, sizeof sock_path, "/tmp/cubicle-tunnel-test-%d.sock", (int)getpid());
	static const char *const extra[] = {"x-cubicle-node", NULL};
	struct httpd_opts o = {.listen = "tcp:127.0.0.1:0",
			       .router = router,
			       .tunnel = tunnel,
			       .log_prefix = "test",
			       .extra_headers = extra};
	struct err e = {0};
	H = httpd_create(&o, &e);
	assert_non_null(H);
	port = atoi(strrchr(httpd_address(H), ':') + 1);
	assert_int_equal(pthread_create(&loop, NULL, loop_main, H), 0);
	struct httpd_opts ro = {.listen = "tcp:127.0.0.1:0",
				.router = router,
				.tunnel = relay_tunnel,
				.log_prefix = "relay"};
	R = httpd_create(&ro, &e);
	assert_non_null(R);
	rport = atoi(strrchr(httpd_address(R), ':') + 1);
	assert_int_equal(pthread_create(&rloop, NULL, loop_main, R), 0);
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	httpd_stop(H);
	pthread_join(loop, NULL);
	httpd_destroy(H);
	httpd_stop(R);
	pthread_join(rloop, NULL);
	httpd_destroy(R);
	unlink(sock_path);
	return 0;
}

static int tcp_connect_to(int p)
{
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)p)};
	inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
	assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof sa), 0);
	return fd;
}

static int tcp_connect(void)
{
	return tcp_connect_to(port);
}

/* Reads until n bytes or `until` appears or 20 s pass; returns the count. */
static size_t read_some(int fd, char *buf, size_t n, const char *until)
{
	size_t have = 0;
	while (have < n - 1) {
		struct pollfd p = {fd, POLLIN, 0};
		if (poll(&p, 1, 20000) <= 0)
			break;
		ssize_t r = read(fd, buf + have, n - 1 - have);
		if (r <= 0)
			break;
		have += (size_t)r;
		buf[have] = 0;
		if (until && strstr(buf, until))
			break;
	}
	buf[have] = 0;
	return have;
}

/* Sends an upgrade of path to port p and returns the answer's status (the
 * fd stays open). */
static int upgrade_to(int p, const char *path, int *fd_out)
{
	int fd = tcp_connect_to(p);
	char req[512];
	snprintf(req, sizeof req,
		 "GET %s HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\n"
		 "Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
		 "Sec-WebSocket-Version: 13\r\nSec-WebSocket-Protocol: binary\r\n\r\n",
		 path);
	assert_int_equal(write(fd, req, strlen(req)), (ssize_t)strlen(req));
	/* The head alone, a byte at a time: a close frame that follows the 101
	 * at once (a refusal relayed under load) stays for the caller. */
	char buf[2048];
	size_t have = 0;
	while (have < sizeof buf - 1 && (have < 4 || memcmp(buf + have - 4, "\r\n\r\n", 4))) {
		struct pollfd pf = {fd, POLLIN, 0};
		if (poll(&pf, 1, 20000) <= 0 || read(fd, buf + have, 1) != 1)
			break;
		have++;
	}
	buf[have] = 0;
	int status = 0;
	sscanf(buf, "HTTP/1.%*d %d", &status);
	*fd_out = fd;
	return status;
}

static int upgrade(int *fd_out)
{
	return upgrade_to(port, "/t", fd_out);
}

static int plain_get(void)
{
	int fd = tcp_connect();
	const char *req = "GET /x HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";
	assert_int_equal(write(fd, req, strlen(req)), (ssize_t)strlen(req));
	char buf[2048];
	read_some(fd, buf, sizeof buf, "}");
	close(fd);
	int status = 0;
	sscanf(buf, "HTTP/1.%*d %d", &status);
	return status;
}

static int listen_unix(int backlog)
{
	unlink(sock_path);
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	snprintf(sa.sun_path, sizeof sa.sun_path, "%s", sock_path);
	assert_int_equal(bind(fd, (struct sockaddr *)&sa, sizeof sa), 0);
	assert_int_equal(listen(fd, backlog), 0);
	return fd;
}

/* The preamble reaches the socket before any byte of the client's. */
static void test_preamble_comes_first(void **state)
{
	(void)state;
	int l = listen_unix(4);
	int ws;
	assert_int_equal(upgrade(&ws), 101);
	int s = accept(l, NULL, NULL);
	assert_true(s >= 0);
	/* a masked binary frame "AB" */
	const unsigned char frame[] = {0x82, 0x82, 1, 2, 3, 4, 'A' ^ 1, 'B' ^ 2};
	assert_int_equal(write(ws, frame, sizeof frame), (ssize_t)sizeof frame);
	char buf[64];
	read_some(s, buf, sizeof buf, "AB");
	assert_string_equal(buf, "hello line\nAB");
	assert_int_equal(httpd_tunnels_tagged(H, "t"), 1);
	assert_int_equal(httpd_tunnels_tagged(H, "other"), 0);
	close(s);
	close(ws);
	close(l);
}

/* A listener that never accepts: the tunnels its backlog takes close with
 * 4504 once it stays silent, the rest are 503 at once, and plain requests
 * are answered all along. */
static void test_silent_listener_blocks_nothing(void **state)
{
	(void)state;
	int l = listen_unix(0);
	int fds[6], got101 = 0, got503 = 0;
	for (int i = 0; i < 6; i++) {
		int status = upgrade(&fds[i]);
		if (status == 101)
			got101++;
		else if (status == 503)
			got503++;
		assert_int_equal(plain_get(), 200);
	}
	assert_true(got101 >= 1);
	assert_true(got503 >= 1);
	assert_int_equal(got101 + got503, 6);
	/* A taken one hears 4504 within its second (and lws's timer tick). */
	for (int i = 0; i < 6; i++) {
		unsigned char buf[256];
		size_t n = read_some(fds[i], (char *)buf, sizeof buf, NULL);
		if (n >= 4 && buf[0] == 0x88) {
			assert_int_equal((buf[2] << 8) | buf[3], 4504);
			got101--;
		}
		close(fds[i]);
	}
	assert_int_equal(got101, 0);
	close(l);
}

static void *flood(void *arg)
{
	int fd = *(int *)arg;
	const unsigned char frame[] = {0x82, 0x82, 1, 2, 3, 4, 'A' ^ 1, 'B' ^ 2};
	for (int i = 0; i < 200000; i++)
		if (send(fd, frame, sizeof frame, MSG_NOSIGNAL) < 0)
			break;
	return NULL;
}

/* A client that sends a flood of tiny frames (a viewer's pointer events):
 * every byte reaches the socket however many frames carry them (a queue of
 * lws segments gave up past 1024 and dropped the connection), and when the
 * socket's side ends without a word while more are coming, the close frame
 * still says why (4504). */
static void test_tiny_frames_flow_and_the_close_says_why(void **state)
{
	(void)state;
	int l = listen_unix(4);
	for (int round = 0; round < 20; round++) {
		int ws;
		assert_int_equal(upgrade(&ws), 101);
		pthread_t t;
		assert_int_equal(pthread_create(&t, NULL, flood, &ws), 0);
		int s = accept(l, NULL, NULL);
		assert_true(s >= 0);
		/* The socket takes 64 KiB of the client's bytes (so nothing is
		 * held back) and ends while more are on their way. */
		char buf[4096];
		size_t took = 0;
		while (took < 65536) {
			ssize_t r = read(s, buf, sizeof buf);
			assert_true(r > 0);
			took += (size_t)r;
		}
		close(s);
		/* The server sends no data frame, only the close. */
		unsigned char got[256];
		size_t n = read_some(ws, (char *)got, sizeof got, "answer");
		assert_true(n >= 4);
		assert_int_equal(got[0], 0x88);
		assert_int_equal((got[2] << 8) | got[3], 4504);
		shutdown(ws, SHUT_RDWR);
		pthread_join(t, NULL);
		close(ws);
	}
	close(l);
}

/* Through the relay: R's client → H's tunnel → the socket and back, H sees
 * R's header; H's refusal (after R accepted) closes R's client with 4403. */
static void test_relay(void **state)
{
	(void)state;
	int l = listen_unix(4);
	int ws;
	assert_int_equal(upgrade_to(rport, "/t", &ws), 101);
	const unsigned char frame[] = {0x82, 0x82, 1, 2, 3, 4, 'A' ^ 1, 'B' ^ 2};
	assert_int_equal(write(ws, frame, sizeof frame), (ssize_t)sizeof frame);
	int s = accept(l, NULL, NULL);
	assert_true(s >= 0);
	char buf[64];
	read_some(s, buf, sizeof buf, "AB");
	assert_string_equal(buf, "hello line\nAB");
	assert_string_equal(seen_node, "n1.proof");
	assert_int_equal(httpd_tunnels_tagged(R, "r"), 1);
	assert_int_equal(write(s, "XYZ", 3), 3);
	unsigned char got[64];
	size_t n = read_some(ws, (char *)got, sizeof got, "XYZ");
	assert_true(n >= 5);
	assert_int_equal(got[0], 0x82);
	assert_int_equal(got[1], 3);
	assert_memory_equal(got + 2, "XYZ", 3);
	/* The socket goes: so do both WebSockets. */
	close(s);
	n = read_some(ws, (char *)got, sizeof got, NULL);
	close(ws);
	int64_t until = 0;
	while (httpd_tunnels_tagged(R, "r") > 0 && until++ < 200)
		usleep(10000);
	assert_int_equal(httpd_tunnels_tagged(R, "r"), 0);

	assert_int_equal(upgrade_to(rport, "/refuse", &ws), 101);
	n = read_some(ws, (char *)got, sizeof got, NULL);
	assert_true(n >= 4);
	assert_int_equal(got[0], 0x88);
	assert_int_equal((got[2] << 8) | got[3], 4403);
	close(ws);
	close(l);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_preamble_comes_first),
	    cmocka_unit_test(test_silent_listener_blocks_nothing),
	    cmocka_unit_test(test_tiny_frames_flow_and_the_close_says_why),
	    cmocka_unit_test(test_relay),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
