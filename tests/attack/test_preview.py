"""Previews (docs/api.md, "Previews") under attack: forged, expired, revoked
and other ports' tokens; another workspace's key; a stopped computer; bad
ports; a guest that closes, floods or never answers; a client that smuggles
requests; more connections than a computer may have. The relay's pages are
HTML for browsers and JSON for API clients, never a hang.

One sandbox runs tests/host/devserver.py on port 8000 (and nothing on
8002); its preview is reached through cubicled's preview listener with the
Host header a browser would send.
"""

import json
import os
import re
import socket
import time
import unittest
import urllib.parse

import attack
from attack import wait_until

HERE = os.path.dirname(os.path.abspath(__file__))
DEVSERVER = os.path.join(HERE, "..", "host", "devserver.py")

srv = key = other_key = cid = None


def setUpModule():
    global srv, key, other_key, cid
    srv = attack.Cubicled(["--public-previews", "--previews-per-computer", "6",
                           "--preview-idle", "3"]).start()
    try:
        _, key = srv.workspace("previews")
        _, other_key = srv.workspace("others")
        cid = srv.computer(key, kind="sandbox")["id"]
        start_devserver(srv, key, cid, 8000)
    except BaseException:
        srv.stop()  # tearDownModule does not run when this fails
        raise


def tearDownModule():
    srv.stop()


def start_devserver(s, k, computer, port):
    with open(DEVSERVER) as f:
        s.act(computer, "write_file", {"path": "/tmp/devserver.py", "content": f.read()}, key=k)
    s.act(computer, "write_file", {"path": "/tmp/app/index.html",
                                   "content": "<!doctype html><p id=msg>index</p>"}, key=k)
    s.act(computer, "bash", {"command": "cd /tmp && (setsid python3 devserver.py %d /tmp/app "
                                        ">/tmp/devserver.log 2>&1 &)" % port}, key=k)
    wait_until(lambda: s.act(computer, "bash", {
        "command": "curl -s -o /dev/null -w '%%{http_code}' http://127.0.0.1:%d/echo" % port},
        key=k)["stdout"] == "200", timeout=30, what="the dev server to answer")


def grant(port=8000, k=None, **kw):
    return srv.ok("POST", "/v1/computers/%s/previews" % cid, dict(port=port, **kw),
                  key=k or key, status=201)


def cookie_of(url):
    """Opens a preview URL as a browser's first request: the cookie it sets."""
    r = srv.preview_get(url)
    assert r.status == 302, (r.status, r.body)
    return r.headers["set-cookie"].split(";")[0]


def host_of(url):
    return urllib.parse.urlsplit(url).netloc


def read_response(s):
    """One whole HTTP response (with a Content-Length) from socket s."""
    got = b""
    while b"\r\n\r\n" not in got:
        chunk = s.recv(65536)
        if not chunk:
            return got
        got += chunk
    head, body = got.split(b"\r\n\r\n", 1)
    n = int(re.search(rb"(?i)content-length: *(\d+)", head).group(1))
    while len(body) < n:
        chunk = s.recv(65536)
        if not chunk:
            break
        body += chunk
    return head + b"\r\n\r\n" + body


class Tokens(unittest.TestCase):
    def test_the_token_becomes_a_cookie_of_that_host_only(self):
        g = grant()
        self.assertRegex(g["url"], r"^http://8000-%s\.localhost:%d/\?cubicle_token=v1\."
                         % (cid, srv.preview_port))
        self.assertFalse(g["public"])
        r = srv.preview_get(g["url"] .replace("/?", "/echo?a=1&") + "&b=2")
        self.assertEqual(r.status, 302)
        # The redirect drops the token and keeps the rest of the URL.
        self.assertEqual(r.headers["location"], "/echo?a=1&b=2")
        attrs = [a.strip() for a in r.headers["set-cookie"].split(";")]
        self.assertTrue(attrs[0].startswith("cubicle_preview=v1."))
        self.assertEqual(set(attrs[1:]) - {a for a in attrs[1:] if a.startswith("Max-Age=")},
                         {"Path=/", "HttpOnly", "SameSite=Lax"})
        self.assertFalse(any(a.lower().startswith("domain") for a in attrs))
        # The redirect never leaves the host: not "//elsewhere", not a URL.
        for target in ("//evil.example/x", "/\\evil.example", "http://evil.example/"):
            r = srv.preview_get(host_of(g["url"]), target + "?cubicle_token=" +
                                g["url"].split("cubicle_token=")[1])
            self.assertEqual((r.status, r.headers["location"]), (302, "/"), target)
        # With the cookie the server answers; it never sees the cookie.
        r = srv.preview_get(host_of(g["url"]), "/echo?x=1", headers={
            "Cookie": "mine=1; %s; theirs=2" % attrs[0]})
        self.assertEqual(r.status, 200, r.body)
        seen = dict((k.lower(), v) for k, v in r.json["headers"])
        self.assertEqual(seen["cookie"], "mine=1; theirs=2")
        self.assertNotIn(attrs[0].split("=", 1)[1], r.body.decode())
        self.assertEqual(r.json["target"], "/echo?x=1")
        self.assertEqual(seen["host"], host_of(g["url"]))
        # A request with the token that is not a navigation (a POST, a
        # WebSocket) goes straight through, the token taken out of its URL.
        token = re.search(r"cubicle_token=([^&]+)", g["url"]).group(1)
        r = srv.preview_get(host_of(g["url"]), "/echo?cubicle_token=%s&x=2" % token,
                            method="POST", body=b"abc")
        self.assertEqual(r.status, 200, r.body)
        self.assertEqual((r.json["target"], r.json["got"]), ("/echo?x=2", 3))

    def test_forged_and_expired_tokens_are_refused(self):
        g = grant()
        token = re.search(r"cubicle_token=([^&]+)", g["url"]).group(1)
        forged = token[:-4] + ("AAAA" if not token.endswith("AAAA") else "BBBB")
        host = host_of(g["url"])
        for how in ({"target": "/?cubicle_token=" + forged},
                    {"headers": {"Cookie": "cubicle_preview=" + forged}},
                    {}):
            r = srv.preview_get(host, how.get("target", "/"), headers=dict(
                how.get("headers", {}), Accept="text/html,application/xhtml+xml"))
            self.assertEqual(r.status, 401, (how, r.body))
            self.assertTrue(r.headers["content-type"].startswith("text/html"))
            self.assertIn(b"<h1>401", r.body)
            r = srv.preview_get(host, how.get("target", "/"), headers=how.get("headers"))
            self.assertEqual(r.status, 401)
            self.assertEqual(r.json["error"]["code"], "unauthorized")
        short = grant(ttl_s=3)  # its first use must come before it ends, even under load
        c = cookie_of(short["url"])
        wait_until(lambda: srv.preview_get(host, "/echo", headers={"Cookie": c}).status == 401,
                   timeout=15, what="the 3 s token to expire")
        r = srv.preview_get(host, "/echo", headers={"Cookie": c})
        self.assertIn("expired", r.json["error"]["message"])

    def test_another_port_is_not_reachable_with_that_token(self):
        g = grant()
        token = re.search(r"cubicle_token=([^&]+)", g["url"]).group(1)
        c = cookie_of(g["url"])
        other = host_of(g["url"]).replace("8000-", "8001-", 1)
        self.assertEqual(srv.preview_get(other, "/?cubicle_token=" + token).status, 403)
        self.assertEqual(srv.preview_get(other, "/echo", headers={"Cookie": c}).status, 403)
        # Nor another computer's, with the same port.
        third = host_of(g["url"]).replace(cid, "c-0123456789abcdef", 1)
        self.assertEqual(srv.preview_get(third, "/?cubicle_token=" + token).status, 403)
        # Nor a stream token, nor a token in the path of the CDP route.
        self.assertEqual(srv.preview_get("127.0.0.1:%d" % srv.preview_port,
                                         "/cdp/%s/json/version" % token).status, 403)

    def test_another_workspaces_key_is_404(self):
        for method, path, body in (("POST", "previews", {"port": 8000}),
                                   ("GET", "previews", None),
                                   ("DELETE", "previews/8000", None),
                                   ("POST", "cdp", {})):
            r = srv.req(method, "/v1/computers/%s/%s" % (cid, path), body, key=other_key)
            self.assertEqual(r.status, 404, (method, path, r.body))
            self.assertEqual(r.json["error"]["code"], "not_found")

    def test_bad_ports_and_parameters_are_400(self):
        for body in ({"port": 0}, {"port": 65536}, {"port": -1}, {"port": "80"}, {},
                     {"port": 7777}, {"port": 9222}, {"port": 80, "ttl_s": 0},
                     {"port": 80, "ttl_s": 86401}, {"port": 80, "public": "yes"},
                     {"port": 80, "tll_s": 5}):
            r = srv.req("POST", "/v1/computers/%s/previews" % cid, body, key=key)
            self.assertEqual(r.status, 400, (body, r.body))
        r = srv.req("DELETE", "/v1/computers/%s/previews/0" % cid, key=key)
        self.assertEqual(r.status, 400)
        self.assertEqual(r.json["error"]["param"], "port")


class Relay(unittest.TestCase):
    def test_public_previews_need_no_token_until_revoked(self):
        g = grant(port=8000, public=True)
        self.assertNotIn("cubicle_token", g["url"])
        r = srv.preview_get(g["url"] + "echo")
        self.assertEqual(r.status, 200)
        listed = srv.ok("GET", "/v1/computers/%s/previews" % cid, key=key)["previews"]
        self.assertIn(8000, [p["port"] for p in listed if p["public"]])
        srv.ok("DELETE", "/v1/computers/%s/previews/8000" % cid, key=key)
        r = srv.preview_get(g["url"] + "echo")
        self.assertIn(r.status, (401, 403))

    def test_revocation_closes_open_connections_and_refuses_the_cookie(self):
        g = grant()
        c = cookie_of(g["url"])
        s = socket.create_connection(("127.0.0.1", srv.preview_port), timeout=10)
        req = ("GET /echo HTTP/1.1\r\nHost: %s\r\nCookie: %s\r\n\r\n"
               % (host_of(g["url"]), c)).encode()
        s.sendall(req)
        self.assertIn(b"200 OK", read_response(s))
        srv.ok("DELETE", "/v1/computers/%s/previews/8000" % cid, key=key)
        s.settimeout(10)
        self.assertEqual(s.recv(65536), b"")  # closed by cubicled
        s.close()
        r = srv.preview_get(host_of(g["url"]), "/echo", headers={"Cookie": c})
        self.assertEqual(r.status, 403)
        self.assertIn("revoked", r.json["error"]["message"])

    def test_nothing_listening_is_a_clear_502(self):
        g = grant(port=8002)
        c = cookie_of(g["url"])
        r = srv.preview_get(host_of(g["url"]), "/", headers={"Cookie": c, "Accept": "text/html"})
        self.assertEqual(r.status, 502)
        self.assertIn(b"nothing answers on port 8002", r.body)

    def test_guest_that_closes_or_floods_or_stalls(self):
        g = grant()
        c = cookie_of(g["url"])
        host = host_of(g["url"])
        r = srv.preview_get(host, "/close", headers={"Cookie": c})
        self.assertEqual(r.status, 502)
        r = srv.preview_get(host, "/big?n=%d" % (48 << 20), headers={"Cookie": c}, timeout=120)
        self.assertEqual((r.status, len(r.body)), (200, 48 << 20))
        # A WebSocket to a guest that never answers on it ends after the
        # idle timeout (--preview-idle 3), not never.
        s = socket.create_connection(("127.0.0.1", srv.preview_port), timeout=30)
        s.sendall(("GET /__hmr HTTP/1.1\r\nHost: %s\r\nCookie: %s\r\nUpgrade: websocket\r\n"
                   "Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
                   "Sec-WebSocket-Version: 13\r\n\r\n" % (host, c)).encode())
        self.assertIn(b"101", s.recv(4096))
        t0 = time.monotonic()
        while s.recv(4096):
            pass
        self.assertLess(time.monotonic() - t0, 25)
        s.close()

    def test_smuggled_requests_close_the_connection(self):
        g = grant()
        c = cookie_of(g["url"])
        s = socket.create_connection(("127.0.0.1", srv.preview_port), timeout=10)
        s.sendall(("POST /echo HTTP/1.1\r\nHost: %s\r\nCookie: %s\r\nContent-Length: 4\r\n"
                   "Transfer-Encoding: chunked\r\n\r\n0\r\n\r\nGET /echo HTTP/1.1\r\n\r\n"
                   % (host_of(g["url"]), c)).encode())
        got = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            got += chunk
        s.close()
        self.assertNotIn(b"200 OK", got)

    def test_other_hosts_and_no_host(self):
        r = srv.preview_get("localhost:%d" % srv.preview_port, "/")
        self.assertEqual(r.status, 404)
        self.assertIn("PORT-COMPUTER", r.json["error"]["message"])
        s = socket.create_connection(("127.0.0.1", srv.preview_port), timeout=10)
        s.sendall(b"GET / HTTP/1.0\r\n\r\n")
        self.assertIn(b" 400 ", s.recv(4096))
        s.close()
        s = socket.create_connection(("127.0.0.1", srv.preview_port), timeout=10)
        s.sendall(b"\x16\x03\x01\x02\x00garbage\r\n\r\n")
        self.assertIn(b" 400 ", s.recv(4096))
        s.close()

    def test_connections_per_computer_are_bounded(self):
        g = grant()
        c = cookie_of(g["url"])
        socks = []
        try:
            for _ in range(6):
                s = socket.create_connection(("127.0.0.1", srv.preview_port), timeout=10)
                s.sendall(("GET /echo HTTP/1.1\r\nHost: %s\r\nCookie: %s\r\n\r\n"
                           % (host_of(g["url"]), c)).encode())
                self.assertIn(b"200 OK", read_response(s))
                socks.append(s)
            r = srv.preview_get(host_of(g["url"]), "/echo", headers={"Cookie": c})
            self.assertEqual(r.status, 429)
        finally:
            for s in socks:
                s.close()
        wait_until(lambda: srv.preview_get(host_of(g["url"]), "/echo",
                                           headers={"Cookie": c}).status == 200,
                   timeout=10, what="the closed connections to free their places")


class Restart(unittest.TestCase):
    def test_revocations_and_public_ports_survive_kill9(self):
        revoked = grant()
        c = cookie_of(revoked["url"])
        srv.ok("DELETE", "/v1/computers/%s/previews/8000" % cid, key=key)
        public = grant(port=8000, public=True)
        srv.kill9()
        srv.restart()
        wait_until(lambda: srv.req("GET", "/v1/computers/" + cid, key=key).json["state"] ==
                   "running", 30, "the sandbox adopted")
        r = srv.preview_get(host_of(revoked["url"]), "/echo", headers={"Cookie": c})
        self.assertEqual(r.status, 403)
        r = srv.preview_get(host_of(public["url"]), "/echo")
        self.assertEqual(r.status, 200, r.body)
        srv.ok("DELETE", "/v1/computers/%s/previews/8000" % cid, key=key)


class Stopped(unittest.TestCase):
    def test_a_stopped_computers_preview_says_so_and_stays_revoked(self):
        other = srv.computer(key, kind="sandbox")["id"]
        start_devserver(srv, key, other, 8000)
        g = srv.ok("POST", "/v1/computers/%s/previews" % other, {"port": 8000}, key=key,
                   status=201)
        c = cookie_of(g["url"])
        host = host_of(g["url"])
        self.assertEqual(srv.preview_get(host, "/echo", headers={"Cookie": c}).status, 200)
        srv.ok("POST", "/v1/computers/%s/stop?wait=stopped" % other, key=key)
        r = srv.preview_get(host, "/", headers={"Cookie": c, "Accept": "text/html"})
        self.assertEqual(r.status, 409)
        self.assertIn(b"is stopped", r.body)
        self.assertTrue(r.headers["content-type"].startswith("text/html"))
        r = srv.preview_get(host, "/", headers={"Cookie": c})
        self.assertEqual(r.status, 409)
        self.assertEqual(r.json["error"]["code"], "conflict")
        srv.ok("POST", "/v1/computers/%s/start?wait=running" % other, key=key)
        r = srv.preview_get(host, "/", headers={"Cookie": c})
        self.assertEqual(r.status, 403)
        srv.ok("DELETE", "/v1/computers/%s" % other, key=key)
        r = srv.preview_get(host, "/", headers={"Cookie": c})
        self.assertEqual(r.status, 404)


if __name__ == "__main__":
    unittest.main()
