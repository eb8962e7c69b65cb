#!/usr/bin/env python3
"""cubicled: create → first screenshot (cold and from the warm pool), the
overhead of a proxied left_click over envd's own, and memory per idle
desktop. Real cubicled, real container computers, one run."""

import json
import os
import sqlite3
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "host"))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "images"))
from common import stats, table, timed  # noqa: E402
from cubicled import Cubicled, wait_until  # noqa: E402
from guest import UnixConnection  # noqa: E402


def mem_available_kib():
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1])
    return 0


def main():
    rows = []
    srv = Cubicled(["--warm-pool", "small=1"]).start()
    try:
        ws, key = srv.workspace("bench")
        # Cold: a sandbox and a desktop from nothing to their first answer.
        for kind, first in (("sandbox", ("bash", {"command": "true"})),
                            ("desktop", ("screenshot", {}))):
            t = time.perf_counter()
            c = srv.ok("POST", "/v1/computers?wait=running&timeout_s=120",
                       {"kind": kind, "size": "xs" if kind == "sandbox" else "medium"},
                       key=key, status=201)
            srv.act(c["id"], first[0], first[1], key=key)
            rows.append(("create → first %s, %s, cold" % (first[0], kind),
                         "%.0f ms" % ((time.perf_counter() - t) * 1000)))
            if kind == "desktop":
                cold_desktop = c
        # Warm: the pool's small desktop.
        wait_until(lambda: [c for c in srv.ok("GET", "/v1/computers?state=running")
                            ["computers"] if c["workspace"] != ws], 120, "a warm desktop")
        t = time.perf_counter()
        c = srv.ok("POST", "/v1/computers", {"kind": "desktop"}, key=key, status=201)
        srv.act(c["id"], "screenshot", {}, key=key)
        rows.append(("create → first screenshot, desktop, warm pool",
                     "%.0f ms" % ((time.perf_counter() - t) * 1000)))
        table("cubicled: time to a usable computer", rows, ("what", "time"))

        # left_click: through cubicled vs straight to the computer's envd.
        cid = cold_desktop["id"]
        db = sqlite3.connect(os.path.join(srv.state, "cubicle.db"))
        token = db.execute("SELECT envd_token FROM computers WHERE id=?", (cid,)).fetchone()[0]
        db.close()
        sock = os.path.join(srv.state, "computers", cid, "io", "envd.sock")
        direct = UnixConnection(sock)
        import http.client
        proxied = http.client.HTTPConnection("127.0.0.1", srv.port)
        target = lambda i: (200 + (i * 37) % 800, 200 + (i * 53) % 400)

        def via(conn, path, auth):
            def go(i):
                x, y = target(i)
                conn.request("POST", path, body=json.dumps({"x": x, "y": y}),
                             headers={"Authorization": "Bearer " + auth,
                                      "Content-Type": "application/json"})
                r = conn.getresponse()
                r.read()
                assert r.status == 200, r.status
            return go
        n = 300
        d = stats(timed(via(direct, "/v1/actions/left_click", token), n))
        p = stats(timed(via(proxied, "/v1/computers/%s/actions/left_click" % cid, key), n))
        table("left_click, %d samples (ms)" % n,
              [("envd directly (unix socket)", "%.3f" % d[0], "%.3f" % d[1]),
               ("through cubicled (HTTP → libcurl → envd)", "%.3f" % p[0], "%.3f" % p[1]),
               ("overhead of the proxy", "%.3f" % (p[0] - d[0]), "")],
              ("path", "median", "p99"))

        # Memory: idle desktops, started one after another.
        for c in srv.ok("GET", "/v1/computers", key=key)["computers"]:
            srv.ok("DELETE", "/v1/computers/" + c["id"], key=key)
        time.sleep(1)
        before = mem_available_kib()
        n_desk = 4
        ids = []
        for _ in range(n_desk):
            ids.append(srv.computer(key, kind="desktop", size="small")["id"])
        time.sleep(5)  # let the desktops settle into idle before measuring
        per = (before - mem_available_kib()) / n_desk / 1024
        total_gib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2 ** 30
        table("memory per idle desktop (%d desktops)" % n_desk,
              [("MemAvailable drop per desktop", "%.0f MiB" % per),
               ("idle desktops that fit in %.0f GiB" % total_gib,
                "%d" % (total_gib * 1024 / per if per > 0 else 0))], ("what", "figure"))
        for i in ids:
            srv.ok("DELETE", "/v1/computers/" + i, key=key)
    finally:
        srv.stop()


if __name__ == "__main__":
    main()
