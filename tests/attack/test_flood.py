"""Issue 11, items 4 and 5: one tenant or one client must not starve the others.

Workspace A floods long waits and slow requests, a client floods connections
or sends bodies too large or too slowly, unauthenticated clients hammer the
API; workspace B's requests must keep answering 200 all along, and the
flooder gets the documented 429/413/408 answers (docs/api.md, "Limits").

The flooders come from other loopback addresses (127.0.0.2, ...) than B's
client (127.0.0.1), as they would from other hosts: connections are limited
per client address. No timing is asserted: bench/flood.py measures B's
latency under the same flood.
"""

import json
import os
import select
import socket
import threading
import unittest

import attack
from attack import Cubicled, wait_until

srv = None
ws_a = key_a = ws_b = key_b = None
computer_a = desktop_b = None


def setUpModule():
    global srv, ws_a, key_a, ws_b, key_b, computer_a, desktop_b
    # Default limits, so that the same test shows the holes in a build
    # without them; only the slow-client deadlines are shortened (below).
    srv = Cubicled().start()
    try:
        ws_a, key_a = srv.workspace("flooder")
        ws_b, key_b = srv.workspace("victim")
        computer_a = srv.computer(key_a, kind="desktop")["id"]
        desktop_b = srv.computer(key_b, kind="desktop")["id"]
    except Exception:
        srv.stop()
        raise


def tearDownModule():
    srv.stop()


def connect(src, port, timeout=30):
    """A TCP connection to cubicled from loopback address src."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.settimeout(timeout)
    s.bind((src, 0))
    s.connect(("127.0.0.1", port))
    return s


def request_bytes(method, path, key=None, body=b"", headers=None):
    h = ["%s %s HTTP/1.1" % (method, path), "Host: 127.0.0.1"]
    if key:
        h.append("Authorization: Bearer " + key)
    for k, v in (headers or {}).items():
        h.append("%s: %s" % (k, v))
    if body and not any(k.lower() in ("content-length", "transfer-encoding")
                        for k in (headers or {})):
        h.append("Content-Length: %d" % len(body))
    return ("\r\n".join(h) + "\r\n\r\n").encode() + body


def read_answer(s):
    """(status, headers, body) of one answer on s, or None if s closed first."""
    data = b""
    while b"\r\n\r\n" not in data:
        try:
            chunk = s.recv(65536)
        except (ConnectionResetError, socket.timeout):
            return None
        if not chunk:
            return None
        data += chunk
    head, body = data.split(b"\r\n\r\n", 1)
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = {}
    for line in lines[1:]:
        k, _, v = line.partition(":")
        headers[k.strip().lower()] = v.strip()
    n = int(headers.get("content-length", "0"))
    while len(body) < n:
        try:
            chunk = s.recv(65536)
        except (ConnectionResetError, socket.timeout):
            break
        if not chunk:
            break
        body += chunk
    return status, headers, body


def victim_ok(test):
    """Workspace B's list, get and click: each must answer 200."""
    for method, path, body in (
            ("GET", "/v1/computers", None),
            ("GET", "/v1/computers/" + desktop_b, None),
            ("POST", "/v1/computers/%s/actions/left_click" % desktop_b, {"x": 20, "y": 30})):
        r = srv.req(method, path, body, key=key_b, timeout=60)
        test.assertEqual(r.status, 200, "%s %s under the flood: %d %s" % (
            method, path, r.status, r.body[:300]))


class Flood:
    """Many sockets held open against cubicled, from several addresses."""

    def __init__(self):
        self.socks = []
        self.answered = {}

    def open(self, n, payload, per_addr=40, first=30):
        for i in range(n):
            s = connect("127.0.0.%d" % (first + i // per_addr), srv.port)
            s.sendall(payload)
            self.socks.append(s)

    def answers(self, timeout=0.5):
        """Reads the answers that came: {socket: (status, headers, body) or None},
        all of them so far."""
        pending = [s for s in self.socks if s not in self.answered]
        while pending:
            ready, _, _ = select.select(pending, [], [], timeout)
            if not ready:
                break
            for s in ready:
                pending.remove(s)
                s.settimeout(10)
                self.answered[s] = read_answer(s)
        return self.answered

    def close(self):
        for s in self.socks:
            s.close()
        self.socks = []


class LongWaits(unittest.TestCase):
    def test_300_waits_from_one_workspace_leave_the_others_alone(self):
        flood = Flood()
        try:
            path = "/v1/computers/%s?wait=deleted&timeout_s=600" % computer_a
            flood.open(300, request_bytes("GET", path, key_a))
            # The waits past A's budget are refused at once with 429 and
            # Retry-After; the ones within it stay open.
            wait_until(lambda: len(flood.answers()) >= 300 - 16,
                       timeout=60, what="A's waits past its limit to be refused")
            refused = flood.answers(timeout=1)
            for s, a in refused.items():
                self.assertIsNotNone(a, "a wait's connection closed without an answer")
                status, headers, body = a
                self.assertEqual(status, 429, body[:300])
                self.assertGreaterEqual(int(headers["retry-after"]), 1)
                err = json.loads(body)["error"]
                self.assertEqual(err["code"], "limit_reached")
                self.assertEqual(err["limit"], "max_waits_per_workspace")
            self.assertEqual(len(refused), 300 - 16)
            victim_ok(self)
            # A's normal requests still have their own budget.
            r = srv.req("GET", "/v1/computers/" + computer_a, key=key_a)
            self.assertEqual(r.status, 200, r.body[:300])
        finally:
            flood.close()

    def test_slow_requests_from_one_workspace_leave_the_others_alone(self):
        flood = Flood()
        try:
            # Each holds a worker for as long as its command runs.
            body = json.dumps({"command": "sleep 120", "timeout_s": 150}).encode()
            flood.open(100, request_bytes(
                "POST", "/v1/computers/%s/actions/bash" % computer_a, key_a, body,
                {"Content-Type": "application/json"}))
            wait_until(lambda: len(flood.answers()) >= 100 - 32,
                       timeout=60, what="A's requests past its limit to be refused")
            refused = flood.answers(timeout=1)
            for s, a in refused.items():
                self.assertIsNotNone(a)
                status, headers, body = a
                self.assertEqual(status, 429, body[:300])
                self.assertIn("retry-after", headers)
                self.assertEqual(json.loads(body)["error"]["limit"],
                                 "max_requests_per_workspace")
            self.assertEqual(len(refused), 100 - 32)
            victim_ok(self)
        finally:
            flood.close()
            # The commands go on in the guest: end them (as the admin, whom
            # no budget limits), so that A has its budget back (the
            # handlers return when bash does).
            srv.req("POST", "/v1/computers/%s/actions/bash" % computer_a,
                    {"command": "pkill -f 'sleep 12[0]'; true"})
            wait_until(lambda: srv.req("POST", "/v1/computers/%s/actions/bash" % computer_a,
                                       {"command": "true"}, key=key_a).status == 200,
                       timeout=60, what="A's budget back")


class Connections(unittest.TestCase):
    def test_connection_flood_from_one_address(self):
        socks = []
        try:
            # 64 connections from 127.0.0.9 are accepted (each answers a
            # request); the next one is refused, with a 429 when it can be
            # written, and never served.
            for i in range(64):
                s = connect("127.0.0.9", srv.port)
                s.sendall(request_bytes("GET", "/healthz"))
                a = read_answer(s)
                self.assertIsNotNone(a, "connection %d closed" % i)
                self.assertEqual(a[0], 200)
                socks.append(s)
            extra = connect("127.0.0.9", srv.port)
            try:
                extra.sendall(request_bytes("GET", "/healthz"))
                a = read_answer(extra)
            except (BrokenPipeError, ConnectionResetError):
                a = None
            extra.close()
            if a is not None:
                self.assertEqual(a[0], 429, a[2][:300])
                self.assertEqual(json.loads(a[2])["error"]["limit"], "connections_per_address")
                self.assertIn("retry-after", a[1])
            # Other addresses are served meanwhile.
            victim_ok(self)
            other = connect("127.0.0.10", srv.port)
            other.sendall(request_bytes("GET", "/healthz"))
            self.assertEqual(read_answer(other)[0], 200)
            other.close()
        finally:
            for s in socks:
                s.close()
        # Closed connections no longer count.
        def again():
            s = connect("127.0.0.9", srv.port)
            try:
                s.sendall(request_bytes("GET", "/healthz"))
                a = read_answer(s)
                return a is not None and a[0] == 200
            finally:
                s.close()
        wait_until(again, timeout=30, what="127.0.0.9 to be served again")


class Bodies(unittest.TestCase):
    def big(self, method, path, key, size, chunked=False):
        """Announces (or streams, chunked) a body of size bytes; the answer."""
        s = connect("127.0.0.11", srv.port, timeout=10)
        try:
            if chunked:
                s.sendall(request_bytes(method, path, key, headers={
                    "Content-Type": "application/json", "Transfer-Encoding": "chunked"}))
                chunk = b"x" * 65536
                sent = 0
                try:
                    while sent < size:
                        s.sendall(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                        sent += len(chunk)
                    s.sendall(b"0\r\n\r\n")
                except (BrokenPipeError, ConnectionResetError):
                    pass
            else:
                s.sendall(request_bytes(method, path, key, headers={
                    "Content-Type": "application/json", "Content-Length": str(size)}))
            return read_answer(s)
        finally:
            s.close()

    def assert_too_large(self, a, what):
        self.assertIsNotNone(a, "%s: closed without an answer" % what)
        status, headers, body = a
        self.assertEqual(status, 413, "%s: %d %s" % (what, status, body[:300]))
        self.assertEqual(headers.get("content-type"), "application/json", what)
        self.assertEqual(json.loads(body)["error"]["code"], "too_large", what)

    def test_oversized_bodies_on_every_route_family(self):
        two_mib = 2 << 20
        routes = [
            # with a key: JSON routes take 1 MiB
            ("POST", "/v1/computers", key_b),
            ("POST", "/v1/computers/%s/actions/left_click" % desktop_b, key_b),
            ("POST", "/v1/computers/%s/computer-use" % desktop_b, key_b),
            ("POST", "/v1/computers/%s/stream" % desktop_b, key_b),
            ("POST", "/v1/computers/%s/stop" % desktop_b, key_b),
            ("DELETE", "/v1/computers/%s" % desktop_b, key_b),
            ("GET", "/v1/computers", key_b),
            ("GET", "/v1/usage", key_b),
            ("POST", "/mcp", key_b),
            ("POST", "/v1/workspaces", srv.admin),
            ("POST", "/v1/workspaces/%s/keys" % ws_b, srv.admin),
            ("GET", "/metrics", srv.admin),
        ]
        for method, path, key in routes:
            self.assert_too_large(self.big(method, path, key, two_mib), "%s %s" % (method, path))
        self.assert_too_large(self.big("POST", "/v1/computers", key_b, two_mib, chunked=True),
                              "chunked POST /v1/computers")
        # Without a key: 4 KiB.
        for method, path in (("POST", "/healthz"), ("GET", "/openapi.json"),
                             ("GET", "/embed/" + desktop_b), ("OPTIONS", "/mcp")):
            self.assert_too_large(self.big(method, path, None, 8192), "%s %s" % (method, path))
        self.assert_too_large(self.big("POST", "/healthz", None, 1 << 20, chunked=True),
                              "chunked POST /healthz")
        # The computer was neither stopped nor deleted by any of them.
        self.assertEqual(srv.ok("GET", "/v1/computers/" + desktop_b, key=key_b)["state"],
                         "running")
        victim_ok(self)


class SlowClients(unittest.TestCase):
    """Headers or a body sent a byte at a time are cut off at their deadline."""

    @classmethod
    def setUpClass(cls):
        cls.srv = Cubicled(["--header-timeout", "2", "--body-timeout", "2",
                            "--body-min-rate", "1024"]).start()
        cls.ws, cls.key = cls.srv.workspace("slow")

    @classmethod
    def tearDownClass(cls):
        cls.srv.stop()

    def trickle(self, prefix, trickled):
        """Sends prefix, then trickled a byte at a time (forever, if it were
        long enough); returns (bytes of trickled sent before the server
        closed, the answer it sent, if any)."""
        s = socket.create_connection(("127.0.0.1", self.srv.port), timeout=30)
        s.sendall(prefix)
        sent = 0
        got = b""
        try:
            for b in trickled:
                r, _, _ = select.select([s], [], [], 0.2)
                if r:
                    chunk = s.recv(65536)
                    got += chunk
                    if not chunk:
                        break
                s.sendall(bytes([b]))
                sent += 1
        except (BrokenPipeError, ConnectionResetError):
            pass
        s.close()
        return sent, got

    def test_slow_headers_are_cut(self):
        trickled = b"X-Slow: " + b"a" * 400 + b"\r\n\r\n"  # 80 s at 5 bytes/s
        sent, _ = self.trickle(b"GET /healthz HTTP/1.1\r\nHost: x\r\n", trickled)
        self.assertLess(sent, len(trickled), "the server waited for every header byte")

    def test_slow_body_is_cut(self):
        body = b'{"kind": "sandbox", "metadata": {"x": "' + b"a" * 400 + b'"}}'
        head = request_bytes("POST", "/v1/computers", self.key, headers={
            "Content-Type": "application/json", "Content-Length": str(len(body))})
        sent, got = self.trickle(head, body)
        self.assertLess(sent, len(body), "the server waited for every body byte")
        if got:
            self.assertIn(b" 408 ", got.split(b"\r\n")[0])
            self.assertIn(b"request_timeout", got)
        # Nothing was created from the partial body.
        self.assertEqual(self.srv.ok("GET", "/v1/computers", key=self.key)["computers"], [])


class Sessions(unittest.TestCase):
    def test_a_fifo_in_a_session_does_not_hold_a_worker(self):
        # A guest can leave a FIFO in its session's files; downloading it
        # must not wait for a writer (a worker held forever).
        srv.ok("PUT", "/v1/sessions/fifo/files?path=input/a.txt", b"hello", key=key_a)
        fifo = os.path.join(srv.state, "sessions", ws_a, "fifo", "input", "pipe")
        os.mkfifo(fifo)
        r = srv.req("GET", "/v1/sessions/fifo/files?path=input/pipe", key=key_a, timeout=30)
        self.assertEqual(r.status, 400, r.body[:300])
        self.assertEqual(r.json["error"]["param"], "path")


class Unauthenticated(unittest.TestCase):
    def test_unauthenticated_flood_does_not_starve_tenants(self):
        stop = threading.Event()
        seen = {}
        lock = threading.Lock()

        def hammer(src):
            while not stop.is_set():
                for method, path, key in (("GET", "/v1/computers", "ck_" + "0" * 48),
                                          ("GET", "/v1/computers", None),
                                          ("GET", "/healthz", None),
                                          ("GET", "/embed/" + desktop_b, None)):
                    try:
                        s = connect(src, srv.port, timeout=10)
                        s.sendall(request_bytes(method, path, key))
                        a = read_answer(s)
                        s.close()
                    except OSError:
                        a = None
                    with lock:
                        k = a[0] if a else "closed"
                        seen[k] = seen.get(k, 0) + 1

        threads = [threading.Thread(target=hammer, args=("127.0.0.%d" % (20 + i % 4),))
                   for i in range(16)]
        for t in threads:
            t.start()
        try:
            wait_until(lambda: seen.get(401, 0) >= 50, timeout=60, what="the flood to run")
            for _ in range(20):
                victim_ok(self)
        finally:
            stop.set()
            for t in threads:
                t.join()
        self.assertGreater(seen.get(401, 0), 0)


if __name__ == "__main__":
    unittest.main()
