#!/usr/bin/env python3
"""Viewers against the API: /healthz latency while people watch a desktop,
and the frame rate they get through cubicled's gateway (issue 11).

  python3 bench/viewers.py [--viewers 4] [--seconds 10] [--requests 400] [--view-only]

A real cubicled (CUBICLE_BUILD, default build/) and a desktop computer (a
container) whose screen xanim (bench/xanim.c) scrolls at 60 fps, as in
bench/stream.py. In turn:

  0 viewers   /healthz on one kept-alive connection, --requests times: p50/p99.
  N viewers   N noVNC-like clients (rfbclient.py) read the stream through
              GET /v1/computers/{id}/stream (every stream's bytes pass the
              RFB filter) while the same /healthz loop runs: p50/p99, and
              each viewer's updates/s.
  1 viewer    the stream alone: updates/s through the gateway.

Run it against two builds to compare the filter's cost (before/after):
CUBICLE_BUILD=/path/to/other/build python3 bench/viewers.py (that build's
images: its build/images, or CUBICLE_IMAGES).
"""

import argparse
import base64
import http.client
import os
import sys
import threading
import time

from common import stats, table
from rfbclient import Client
from stream import XANIM, GuestAnim

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "host"))
from cubicled import Cubicled  # noqa: E402


def healthz(port, n):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    out = []
    for i in range(n + 10):
        t = time.perf_counter()
        conn.request("GET", "/healthz")
        r = conn.getresponse()
        r.read()
        if r.status != 200:
            raise RuntimeError("/healthz -> %d" % r.status)
        if i >= 10:  # warm-up
            out.append((time.perf_counter() - t) * 1e3)
    conn.close()
    return out


class Viewer(threading.Thread):
    """Reads the stream until told to stop; counts updates with pixels."""

    def __init__(self, connect):
        super().__init__(daemon=True)
        self.c = connect()
        if self.c.next_update(30) is None:
            raise RuntimeError("no first frame")
        self.stop_at = None
        self.counting = False
        self.frames = 0
        self.error = None

    def run(self):
        try:
            while self.stop_at is None or time.perf_counter() < self.stop_at:
                u = self.c.next_update(1)
                if u is not None and u.rects and self.counting:
                    self.frames += 1
        except (ConnectionError, OSError) as e:
            self.error = e
        finally:
            self.c.close()


def watch(connect, n, seconds, requests, port):
    """n viewers during an animation: their updates/s and /healthz meanwhile."""
    viewers = [Viewer(connect) for _ in range(n)]
    for v in viewers:
        v.start()
    time.sleep(1)  # the animation is running: let the streams settle
    for v in viewers:
        v.counting = True
    t = time.perf_counter()
    lat = healthz(port, requests) if requests else []
    left = seconds - (time.perf_counter() - t)
    if left > 0:
        time.sleep(left)
    wall = time.perf_counter() - t
    for v in viewers:
        v.counting = False
        v.stop_at = time.perf_counter()
    for v in viewers:
        v.join(30)
        if v.error:
            raise RuntimeError("a viewer failed: %s" % v.error)
    return lat, [v.frames / wall for v in viewers]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--viewers", type=int, default=4)
    ap.add_argument("--seconds", type=float, default=10)
    ap.add_argument("--requests", type=int, default=400)
    ap.add_argument("--view-only", action="store_true")
    args = ap.parse_args()
    srv = Cubicled().start()
    try:
        _, key = srv.workspace("viewers-bench")
        cid = srv.computer(key, kind="desktop", isolation="container")["id"]
        with open(XANIM, "rb") as f:
            exe = srv.act(cid, "write_file", {"path": "xanim", "mode": "0755",
                                              "content_base64": base64.b64encode(
                                                  f.read()).decode()}, key=key)["path"]
        anim = GuestAnim(srv, cid, key, exe)

        def connect():
            t = srv.ok("POST", "/v1/computers/%s/stream" % cid, {"view_only": args.view_only},
                       key=key, status=201)["token"]
            return Client(ws=("127.0.0.1", srv.port,
                              "/v1/computers/%s/stream?token=%s" % (cid, t)))

        idle = healthz(srv.port, args.requests)
        anim.start()
        try:
            watched, fps = watch(connect, args.viewers, args.seconds, args.requests, srv.port)
            _, alone = watch(connect, 1, args.seconds, 0, srv.port)
        finally:
            anim_fps = anim.stop()
        p50a, p99a = stats(idle)
        p50b, p99b = stats(watched)
        rows = [
            ("/healthz ms, p50 / p99", "%.2f / %.2f" % (p50a, p99a),
             "%.2f / %.2f" % (p50b, p99b), ""),
            ("stream updates/s per viewer", "", " ".join("%.1f" % f for f in fps),
             "%.1f" % alone[0]),
            ("frames/s the animation drew", "", "%.1f" % anim_fps, ""),
        ]
        table("cubicled %s, a container desktop animated at 60 fps; %s streams; %d /healthz "
              "requests on one connection" % (os.environ.get("CUBICLE_BUILD", "build/"),
                                              "view-only" if args.view_only else "control",
                                              args.requests),
              rows, ("", "0 viewers", "%d viewers" % args.viewers, "1 viewer"))
    finally:
        srv.stop()


if __name__ == "__main__":
    main()
