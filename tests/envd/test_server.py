"""envd's HTTP server itself: streaming files of any size, health, routing,
keep-alive and robustness against clients that misbehave."""

import hashlib
import http.client
import json
import os
import socket
import sys
import tempfile
import threading
import unittest

import harness

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "host"))
import wsclient  # noqa: E402

envd = None
tmp = None


def setUpModule():
    global envd, tmp
    envd = harness.Envd(None).start()
    tmp = tempfile.mkdtemp(prefix="cubicle-files-")


def tearDownModule():
    envd.stop()


def put_stream(path, chunks, total):
    """PUT /v1/files with a body produced chunk by chunk (never all in memory)."""
    conn = http.client.HTTPConnection("127.0.0.1", envd.port, timeout=120)
    conn.putrequest("PUT", "/v1/files?path=" + path)
    conn.putheader("Authorization", "Bearer " + envd.token)
    conn.putheader("Content-Length", str(total))
    conn.endheaders()
    for c in chunks:
        conn.send(c)
    r = conn.getresponse()
    body = r.read()
    conn.close()
    return r.status, body


class Files(unittest.TestCase):
    def test_large_file_round_trip_streams(self):
        path = os.path.join(tmp, "big.bin")
        size = 200 * 1024 * 1024 + 12345  # larger than any action body limit
        block = hashlib.sha256(b"cubicle").digest() * 32768  # 1 MiB
        def chunks():
            left = size
            while left:
                n = min(left, len(block))
                yield block[:n]
                left -= n
        want = hashlib.sha256()
        for c in chunks():
            want.update(c)
        status, body = put_stream(path, chunks(), size)
        self.assertEqual(status, 200, body)
        self.assertEqual(json.loads(body)["size"], size)
        self.assertEqual(os.path.getsize(path), size)
        # GET streams it back; hash it as it arrives.
        conn = http.client.HTTPConnection("127.0.0.1", envd.port, timeout=120)
        conn.request("GET", "/v1/files?path=" + path,
                     headers={"Authorization": "Bearer " + envd.token})
        r = conn.getresponse()
        self.assertEqual(r.status, 200)
        self.assertEqual(int(r.headers["Content-Length"]), size)
        got = hashlib.sha256()
        n = 0
        while True:
            c = r.read(1 << 20)
            if not c:
                break
            got.update(c)
            n += len(c)
        conn.close()
        self.assertEqual(n, size)
        self.assertEqual(got.hexdigest(), want.hexdigest())
        os.unlink(path)

    def test_binary_bytes_and_empty_file(self):
        path = os.path.join(tmp, "bytes.bin")
        data = bytes(range(256)) * 3
        r = envd.request("PUT", "/v1/files?path=" + path, body=data)
        self.assertEqual(r.status, 200, r)
        r = envd.request("GET", "/v1/files?path=" + path)
        self.assertEqual(r.body, data)
        r = envd.request("PUT", "/v1/files?path=" + path, body=b"")
        self.assertEqual(r.status, 200, r)
        self.assertEqual(os.path.getsize(path), 0)

    def test_interrupted_upload_keeps_old_file(self):
        path = os.path.join(tmp, "keep.txt")
        with open(path, "wb") as f:
            f.write(b"original")
        s = socket.create_connection(("127.0.0.1", envd.port))
        s.sendall(("PUT /v1/files?path=%s HTTP/1.1\r\nHost: x\r\n"
                   "Authorization: Bearer %s\r\nContent-Length: 1000000\r\n\r\n"
                   % (path, envd.token)).encode() + b"partial" * 100)
        s.close()
        # The server notices the drop; the old content is intact and no
        # temporary file is left behind.
        harness.wait_until(
            lambda: not [n for n in os.listdir(tmp) if "envd-upload" in n],
            10, "the partial upload's temporary file to go")
        with open(path, "rb") as f:
            self.assertEqual(f.read(), b"original")
        self.assertEqual(envd.request("GET", "/health").status, 200)

    def test_parent_directories_are_created(self):
        path = os.path.join(tmp, "a", "b", "c.txt")
        r = envd.request("PUT", "/v1/files?path=" + path, body=b"deep")
        self.assertEqual(r.status, 200, r)
        with open(path, "rb") as f:
            self.assertEqual(f.read(), b"deep")

    def test_errors(self):
        r = envd.request("GET", "/v1/files?path=" + os.path.join(tmp, "nope"))
        self.assertEqual(r.status, 404)
        self.assertEqual(r.json["error"]["code"], "not_found")
        r = envd.request("GET", "/v1/files?path=" + tmp)
        self.assertEqual(r.status, 400)
        self.assertEqual(r.json["error"]["param"], "path")
        r = envd.request("GET", "/v1/files")
        self.assertEqual(r.status, 400)
        r = envd.request("PUT", "/v1/files?path=" + tmp + "/", body=b"x")
        self.assertEqual(r.status, 400)
        r = envd.request("DELETE", "/v1/files?path=" + tmp)
        self.assertEqual(r.status, 400)
        r = envd.request("GET", "/v1/files?path=" + os.path.join(tmp, "x"), token=None)
        self.assertEqual(r.status, 401)


class Server(unittest.TestCase):
    def test_health(self):
        h = envd.request("GET", "/health").json
        self.assertTrue(h["ok"])
        self.assertIn("version", h)
        self.assertFalse(h["display"])
        self.assertIn("bash", h["capabilities"])

    def test_unknown_endpoint_and_method(self):
        r = envd.request("GET", "/v2/whatever")
        self.assertEqual(r.status, 404)
        r = envd.request("GET", "/v1/actions/bash")
        self.assertEqual(r.status, 400)
        self.assertIn("POST", r.json["error"]["message"])

    def test_clock_checks_its_parameter(self):
        # Only bad input here: a good one would set this host's clock (the
        # microVM test sets a guest's).
        for q in ("", "?unix_ms=", "?unix_ms=12", "?unix_ms=1e12", "?unix_ms=99999999999999"):
            r = envd.request("POST", "/v1/clock" + q)
            self.assertEqual(r.status, 400, q)
            self.assertEqual(r.json["error"]["param"], "unix_ms")
        self.assertEqual(envd.request("GET", "/v1/clock").status, 400)

    def test_guest_side_needs_guest(self):
        # Without --guest (a development desktop, a machine you bring) envd
        # neither takes the host's setup nor runs apt; names are checked
        # first all the same.
        r = envd.request("POST", "/v1/setup", {"ca_certs": None})
        self.assertEqual(r.status, 409, r.body)
        self.assertEqual(envd.request("GET", "/v1/setup").status, 400)
        r = envd.request("POST", "/v1/actions/install_packages", {"apt": ["jq"]})
        self.assertEqual((r.status, r.json["error"]["param"]), (409, "apt"), r.body)
        for body, param in (({"apt": ["jq;id"]}, "apt"), ({"pip": ["-r"]}, "pip"),
                            ({"npm": ["../x"]}, "npm"), ({}, "apt"),
                            ({"apt": ["jq"], "timeout_s": 3601}, "timeout_s")):
            r = envd.request("POST", "/v1/actions/install_packages", body)
            self.assertEqual((r.status, r.json["error"]["param"]), (400, param), body)

    def test_keep_alive_serves_many_requests_on_one_connection(self):
        conn = http.client.HTTPConnection("127.0.0.1", envd.port, timeout=30)
        for i in range(50):
            conn.request("GET", "/health",
                         headers={"Authorization": "Bearer " + envd.token})
            r = conn.getresponse()
            self.assertEqual(r.status, 200)
            r.read()
        conn.close()

    def test_garbage_and_half_requests_do_not_hurt(self):
        for junk in (b"\x00\x01\x02garbage\r\n\r\n", b"GET / HTTP/1.1\r\n",
                     b"POST /v1/actions/bash HTTP/1.1\r\nContent-Length: 99\r\n\r\n{"):
            s = socket.create_connection(("127.0.0.1", envd.port))
            s.sendall(junk)
            s.close()
        self.assertEqual(envd.request("GET", "/health").status, 200)

    def test_client_gone_mid_action_is_harmless(self):
        s = socket.create_connection(("127.0.0.1", envd.port))
        body = json.dumps({"command": "sleep 1; echo done"}).encode()
        s.sendall(("POST /v1/actions/bash HTTP/1.1\r\nHost: x\r\n"
                   "Authorization: Bearer %s\r\nContent-Length: %d\r\n\r\n"
                   % (envd.token, len(body))).encode() + body)
        s.close()
        r = envd.action("bash", {"command": "echo still-here"})
        self.assertEqual(r.status, 200, r)
        self.assertEqual(r.json["stdout"], "still-here\n")

    def test_concurrent_requests(self):
        results = []
        def call(i):
            r = envd.action("bash", {"command": "echo %d" % i})
            results.append((i, r.status, r.json.get("stdout")))
        threads = [threading.Thread(target=call, args=(i,)) for i in range(20)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.assertEqual(sorted(results), [(i, 200, "%d\n" % i) for i in range(20)])


if __name__ == "__main__":
    unittest.main()


class Tunnel(unittest.TestCase):
    """GET /v1/tunnel?port=N as a WebSocket: a byte tunnel to a loopback TCP
    port, what cubicled's previews and CDP ride on."""

    def ws(self, path, token=None):
        return wsclient.WebSocket("127.0.0.1", envd.port, path, headers=(
            "Authorization: Bearer %s\r\n" % (token or envd.token)))

    def server(self, handle):
        """A one-connection TCP server on a free port running handle(conn)."""
        lsock = socket.socket()
        lsock.bind(("127.0.0.1", 0))
        lsock.listen(1)

        def run():
            conn, _ = lsock.accept()
            try:
                handle(conn)
            finally:
                conn.close()
                lsock.close()
        t = threading.Thread(target=run, daemon=True)
        t.start()
        return lsock.getsockname()[1], t

    def test_bytes_both_ways_then_all_of_the_last_burst(self):
        def echo_then_burst(conn):
            got = b""
            while not got.endswith(b"END"):
                got += conn.recv(65536)
            conn.sendall(got.upper())
            conn.sendall(b"x" * (3 << 20))  # more than the tunnel buffers
        port, t = self.server(echo_then_burst)
        w = self.ws("/v1/tunnel?port=%d" % port)
        w.send(b"hello ")
        w.send(b"END")
        self.assertEqual(w.recv_exactly(9), b"HELLO END")
        self.assertEqual(w.recv_exactly(3 << 20), b"x" * (3 << 20))
        with self.assertRaises(ConnectionError):
            w.recv_frame()
        self.assertEqual(w.close_code, 1000)
        w.close()
        t.join(10)

    def test_nothing_listening_closes_with_4502(self):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        s.close()
        w = self.ws("/v1/tunnel?port=%d" % port)
        with self.assertRaises(ConnectionError):
            w.recv_frame()
        self.assertEqual(w.close_code, 4502)

    def test_bytes_sent_before_the_refusal_still_get_4502(self):
        # A client (cubicled's preview relay) sends its request the moment
        # the upgrade is done; it can arrive after the refused connect and
        # before the close frame: still 4502, not a bare close.
        for _ in range(20):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
            s.close()
            w = self.ws("/v1/tunnel?port=%d" % port)
            try:
                for _ in range(50):
                    w.send(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
            except OSError:
                pass  # the close came first: also fine
            with self.assertRaises(ConnectionError):
                while True:
                    w.recv_frame()
            self.assertEqual(w.close_code, 4502)
            w.close()
        self.assertIn(str(port), w.close_reason)
        w.close()

    def test_refusals_before_the_upgrade(self):
        for path, token, status in (
                ("/v1/tunnel?port=80", "wrong-token-0123456789", 401),
                ("/v1/tunnel", None, 400),
                ("/v1/tunnel?port=0", None, 400),
                ("/v1/tunnel?port=65536", None, 400),
                ("/v1/tunnel?port=8x", None, 400),
                ("/v1/tunnel?port=%d" % envd.port, None, 403),
                ("/v1/elsewhere?port=80", None, 404)):
            with self.assertRaises(wsclient.Refused) as cm:
                self.ws(path, token)
            self.assertEqual(cm.exception.status, status, path)
        # A plain GET says what the endpoint is.
        r = envd.request("GET", "/v1/tunnel?port=80")
        self.assertEqual(r.status, 400)
