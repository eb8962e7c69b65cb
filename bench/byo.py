#!/usr/bin/env python3
"""A machine you bring (docs/byo.md) vs a container computer, through
cubicled, in one run: the same actions, the same client.

  byo        envd --connect on a bare Xvfb desktop of this host, dialling
             cubicled on loopback: every action crosses cubicled →
             computers/<id>/io/envd.sock → the multiplexer → the WebSocket
             → envd's multiplexer → envd's UNIX socket.
  container  a desktop computer (`make images` first; skipped without
             them): cubicled → the container's envd socket.

For each: move_cursor (an XTest action and its answer) and a 1280x800 PNG
screenshot, median and p99 over 200 / 50 calls on one kept-alive
connection; a 100 MB file up and down; and the live view through the
gateway: updates a second while xanim scrolls the whole screen at 60 fps
(byo only: the container's is measured by stream.py).
"""

import hashlib
import http.client
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "host"))
from cubicled import Cubicled, IMAGES, wait_until  # noqa: E402
import harness  # noqa: E402
from common import stats, table, timed  # noqa: E402
from rfbclient import Client  # noqa: E402
from stream import LocalAnim  # noqa: E402


class Api:
    def __init__(self, d, key):
        self.conn = http.client.HTTPConnection("127.0.0.1", d.port, timeout=120)
        self.auth = {"Authorization": "Bearer " + key, "Content-Type": "application/json"}

    def post(self, cid, action, params):
        self.conn.request("POST", "/v1/computers/%s/actions/%s" % (cid, action),
                          body=json.dumps(params), headers=self.auth)
        r = self.conn.getresponse()
        body = r.read()
        if r.status != 200:
            raise RuntimeError("%s -> %d %s" % (action, r.status, body[:200]))
        return body

    def file(self, method, cid, path, body=None):
        h = dict(self.auth, **{"Content-Type": "application/octet-stream"})
        self.conn.request(method, "/v1/computers/%s/files?path=%s" % (cid, path), body=body,
                          headers=h)
        r = self.conn.getresponse()
        data = r.read()
        if r.status != 200:
            raise RuntimeError("%s file -> %d %s" % (method, r.status, data[:200]))
        return data


def measure(api, cid, path):
    row = {}
    move = timed(lambda i: api.post(cid, "move_cursor", {"x": 100 + i % 500, "y": 200}), 200)
    row["move_cursor ms (median / p99)"] = "%.2f / %.2f" % stats(move)
    shot = timed(lambda i: api.post(cid, "screenshot", {}), 50)
    row["screenshot PNG ms"] = "%.1f / %.1f" % stats(shot)
    blob = os.urandom(1 << 20) * 100
    t = time.perf_counter()
    api.file("PUT", cid, path, blob)
    up = time.perf_counter() - t
    t = time.perf_counter()
    back = api.file("GET", cid, path)
    down = time.perf_counter() - t
    assert hashlib.sha256(back).digest() == hashlib.sha256(blob).digest()
    row["100 MB up / down s"] = "%.2f / %.2f" % (up, down)
    return row


def main():
    desk = harness.Desktop(a11y=False)
    desk.start()
    d = Cubicled().start()
    home = tempfile.mkdtemp(prefix="cubicle-bench-byo-")
    envd = None
    rows = []
    try:
        ws, key = d.workspace("bench")
        api = Api(d, key)
        t = d.ok("POST", "/v1/connect-tokens", {"kind": "desktop"}, key=key, status=201)
        env = {"PATH": harness.BIN + ":/usr/bin:/bin", "HOME": home, "DISPLAY": desk.display}
        envd = subprocess.Popen(["sh", "-c", t["command"]], env=env, start_new_session=True,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

        def machine():
            for c in d.ok("GET", "/v1/computers", key=key)["computers"]:
                if c["isolation"] == "byo" and c["state"] == "running":
                    return c["id"]
        cid = wait_until(machine, 30, "the machine")
        row = measure(api, cid, os.path.join(home, "big.bin"))
        tok = d.ok("POST", "/v1/computers/%s/stream" % cid, {"ttl_s": 120}, key=key,
                   status=201)["token"]
        anim = LocalAnim(desk)
        anim.start()
        c = Client(ws=("127.0.0.1", d.port, "/v1/computers/%s/stream?token=%s" % (cid, tok)))
        c.request(incremental=False)
        n, nbytes, t0 = 0, 0, time.perf_counter()
        while time.perf_counter() - t0 < 5:
            u = c.next_update(2)
            if u:
                n += 1
                nbytes += u.nbytes
        el = time.perf_counter() - t0
        c.close()
        drawn = anim.stop()
        row["stream updates/s (xanim drew)"] = "%.1f (%.1f)" % (n / el, drawn)
        row["stream KiB/update"] = "%.0f" % (nbytes / max(n, 1) / 1024)
        rows.append(("byo (envd --connect)", row))
        if os.path.isdir(os.path.join(IMAGES, "desktop")):
            c2 = d.computer(key, kind="desktop", isolation="container")["id"]
            rows.append(("container computer", measure(api, c2, "/tmp/big.bin")))
        else:
            rows.append(("container computer", {"move_cursor ms (median / p99)":
                                                "skipped: no images (make images)"}))
    finally:
        if envd:
            os.killpg(envd.pid, 15)
            envd.wait(10)
        d.stop()
        desk.stop()
        subprocess.run(["rm", "-rf", home])
    cols = []
    for _, r in rows:
        cols += [k for k in r if k not in cols]
    table("A machine you bring vs a container computer, through cubicled",
          [[name] + [r.get(k, "") for k in cols] for name, r in rows], [""] + cols)


if __name__ == "__main__":
    main()
