#!/usr/bin/env python3
"""Previews and CDP through cubicled vs the same client inside the guest,
in one run (docs/api.md, "Previews" and "CDP"; `make images` first).

  HTTP      GET /echo (a ~200-byte JSON answer) of tests/host/devserver.py
            in a sandbox, 300 times on one kept-alive connection: through
            the preview listener (cubicled's relay → envd's tunnel →
            127.0.0.1:5173 in the guest), and from a Python client inside
            the guest to 127.0.0.1:5173. Also a new connection per request
            through cubicled (each one a new relay and a new envd tunnel).
  WebSocket a 32-byte message echoed by the dev server's /echo WebSocket,
            500 round trips, through the preview vs inside the guest.
  CDP       Browser.getVersion on the desktop browser's DevTools WebSocket,
            300 round trips: through cubicled's CDP URL vs a client inside
            the desktop to 127.0.0.1:9222.

Medians and p99 in milliseconds. The clients are the same code on both
sides (the standard library's http.client; the WebSocket client below).
"""

import base64
import http.client
import json
import os
import socket
import sys
import time
import urllib.parse

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "host"))
from cubicled import Cubicled, IMAGES, wait_until  # noqa: E402
from common import stats, table  # noqa: E402

N_HTTP, N_WS, N_CDP = 300, 500, 300

# The client both sides run: a stdlib WebSocket client and the three loops.
# Inside a guest it is the `python` action's program, with the results
# printed as JSON.
CLIENT = r'''
import base64, http.client, json, os, socket, struct, time

class WS:
    def __init__(self, host, port, path, hostname=None):
        self.s = socket.create_connection((host, port), timeout=30)
        self.s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        key = base64.b64encode(os.urandom(16)).decode()
        self.s.sendall(("GET %s HTTP/1.1\r\nHost: %s\r\nUpgrade: websocket\r\n"
                        "Connection: Upgrade\r\nSec-WebSocket-Key: %s\r\n"
                        "Sec-WebSocket-Version: 13\r\n\r\n"
                        % (path, hostname or "%s:%d" % (host, port), key)).encode())
        head = b""
        while b"\r\n\r\n" not in head:
            c = self.s.recv(4096)
            if not c:
                raise ConnectionError(head)
            head += c
        if b" 101 " not in head.split(b"\r\n")[0]:
            raise ConnectionError(head[:300])
        self.buf = head.split(b"\r\n\r\n", 1)[1]

    def send(self, data, op=1):
        mask = os.urandom(4)
        n = len(data)
        hdr = bytes([0x80 | op]) + (bytes([0x80 | n]) if n < 126 else
                                     bytes([0x80 | 126]) + struct.pack(">H", n))
        self.s.sendall(hdr + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(data)))

    def _read(self, n):
        while len(self.buf) < n:
            c = self.s.recv(65536)
            if not c:
                raise ConnectionError("closed")
            self.buf += c
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def recv(self):
        b0, b1 = self._read(2)
        n = b1 & 0x7F
        if n == 126:
            n = struct.unpack(">H", self._read(2))[0]
        elif n == 127:
            n = struct.unpack(">Q", self._read(8))[0]
        return self._read(n)

def http_loop(host, port, hostname, cookie, n):
    c = http.client.HTTPConnection(host, port, timeout=30)
    h = {"Host": hostname}
    if cookie:
        h["Cookie"] = cookie
    out = []
    for i in range(n + 5):
        t = time.perf_counter()
        c.request("GET", "/echo", headers=h)
        r = c.getresponse()
        r.read()
        assert r.status == 200, r.status
        if i >= 5:
            out.append((time.perf_counter() - t) * 1e3)
    return out

def ws_loop(ws, n, msg=lambda i: b"x" * 32):
    out = []
    for i in range(n + 5):
        t = time.perf_counter()
        ws.send(msg(i))
        ws.recv()
        if i >= 5:
            out.append((time.perf_counter() - t) * 1e3)
    return out

def cdp_loop(ws, n):
    out = []
    for i in range(n + 5):
        t = time.perf_counter()
        ws.send(json.dumps({"id": i + 1, "method": "Browser.getVersion"}).encode())
        while json.loads(ws.recv()).get("id") != i + 1:
            pass
        if i >= 5:
            out.append((time.perf_counter() - t) * 1e3)
    return out
'''
exec(CLIENT)  # the same definitions on this side


def in_guest(srv, key, cid, code):
    r = srv.act(cid, "python", {"code": CLIENT + code, "timeout_s": 300}, key=key)
    if r["exit_code"] != 0:
        raise RuntimeError(r["stderr"][-2000:])
    return json.loads(r["stdout"].strip().splitlines()[-1])


def ms(samples):
    med, p99 = stats(samples)
    return "%.2f" % med, "%.2f" % p99


def main():
    if not os.path.isdir(os.path.join(IMAGES, "sandbox")):
        print("preview.py: no guest images (make images): skipped")
        return
    srv = Cubicled().start()
    try:
        _, key = srv.workspace("bench")
        sb = srv.computer(key, kind="sandbox")["id"]
        with open(os.path.join(HERE, "..", "tests", "host", "devserver.py")) as f:
            srv.act(sb, "write_file", {"path": "/tmp/devserver.py", "content": f.read()}, key=key)
        srv.act(sb, "write_file", {"path": "/tmp/app/index.html", "content": "hi"}, key=key)
        srv.act(sb, "bash", {"command": "(setsid python3 /tmp/devserver.py 5173 /tmp/app "
                                        ">/dev/null 2>&1 &)"}, key=key)
        wait_until(lambda: srv.act(sb, "bash", {
            "command": "curl -s -o /dev/null -w '%{http_code}' http://127.0.0.1:5173/echo"},
            key=key)["stdout"] == "200", 30, "the dev server")
        g = srv.ok("POST", "/v1/computers/%s/previews" % sb, {"port": 5173}, key=key,
                   status=201)
        host = urllib.parse.urlsplit(g["url"]).netloc
        cookie = srv.preview_get(g["url"]).headers["set-cookie"].split(";")[0]
        rows = []
        through = http_loop("127.0.0.1", srv.preview_port, host, cookie, N_HTTP)
        direct = in_guest(srv, key, sb, "print(json.dumps(http_loop('127.0.0.1', 5173, "
                                        "'127.0.0.1:5173', None, %d)))" % N_HTTP)
        rows.append(("HTTP GET, kept alive",) + ms(through) + ms(direct))
        fresh = []
        for i in range(60):
            t = time.perf_counter()
            r = srv.preview_get(host, "/echo", headers={"Cookie": cookie})
            assert r.status == 200
            fresh.append((time.perf_counter() - t) * 1e3)
        direct_fresh = in_guest(srv, key, sb, r'''
out = []
for i in range(60):
    t = time.perf_counter()
    c = http.client.HTTPConnection('127.0.0.1', 5173, timeout=30)
    c.request('GET', '/echo'); c.getresponse().read(); c.close()
    out.append((time.perf_counter() - t) * 1e3)
print(json.dumps(out))''')
        rows.append(("HTTP GET, a new connection each",) + ms(fresh) + ms(direct_fresh))
        sock_ws = WSWithCookie("127.0.0.1", srv.preview_port, "/echo", host, cookie)
        through_ws = ws_loop(sock_ws, N_WS)
        direct_ws = in_guest(srv, key, sb, "print(json.dumps(ws_loop(WS('127.0.0.1', 5173, "
                                           "'/echo'), %d)))" % N_WS)
        rows.append(("WebSocket echo, 32 B",) + ms(through_ws) + ms(direct_ws))
        if os.path.isdir(os.path.join(IMAGES, "desktop")):
            dk = srv.computer(key, kind="desktop")["id"]
            c = srv.ok("POST", "/v1/computers/%s/cdp" % dk, {}, key=key, status=201)
            u = urllib.parse.urlsplit(c["ws_url"])
            cdp = WS(u.hostname, u.port, u.path)
            through_cdp = cdp_loop(cdp, N_CDP)
            browser_path = "/devtools/browser/" + u.path.split("/devtools/browser/")[1]
            direct_cdp = in_guest(srv, key, dk, "print(json.dumps(cdp_loop(WS('127.0.0.1', 9222,"
                                                " %r), %d)))" % (browser_path, N_CDP))
            rows.append(("CDP Browser.getVersion",) + ms(through_cdp) + ms(direct_cdp))
        table("Previews and CDP: through cubicled vs inside the guest (ms; container "
              "computers)", rows, ("", "cubicled p50", "p99", "in the guest p50", "p99"))
    finally:
        srv.stop()


class WSWithCookie(WS):
    """The WebSocket client with the preview's cookie in its handshake."""

    def __init__(self, host, port, path, hostname, cookie):
        self.s = socket.create_connection((host, port), timeout=30)
        self.s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        key = base64.b64encode(os.urandom(16)).decode()
        self.s.sendall(("GET %s HTTP/1.1\r\nHost: %s\r\nCookie: %s\r\nUpgrade: websocket\r\n"
                        "Connection: Upgrade\r\nSec-WebSocket-Key: %s\r\n"
                        "Sec-WebSocket-Version: 13\r\n\r\n"
                        % (path, hostname, cookie, key)).encode())
        head = b""
        while b"\r\n\r\n" not in head:
            head += self.s.recv(4096)
        if b" 101 " not in head.split(b"\r\n")[0]:
            raise ConnectionError(head[:300])
        self.buf = head.split(b"\r\n\r\n", 1)[1]


if __name__ == "__main__":
    main()
