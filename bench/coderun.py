#!/usr/bin/env python3
"""The code runner (POST /v1/run) side by side with what people use today:
a trivial snippet end to end over HTTP (median, p99), runs per second with
both cores busy, against spawning `python3 -c` / `node -e` and a sandbox
computer's `python` action. Real cubicled, one run."""

import http.client
import json
import os
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "host"))
from common import stats, table, timed  # noqa: E402
from cubicled import IMAGES, Cubicled  # noqa: E402

N = int(os.environ.get("CUBICLE_BENCH_RUNS", "200"))


class Client:
    def __init__(self, srv, key):
        self.conn = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=60)
        self.h = {"Authorization": "Bearer " + key, "Content-Type": "application/json"}

    def post(self, path, body):
        self.conn.request("POST", path, body=json.dumps(body), headers=self.h)
        r = self.conn.getresponse()
        data = r.read()
        if r.status != 200:
            raise RuntimeError("%s -> %d %s" % (path, r.status, data[:300]))
        return json.loads(data)


def row(name, samples, goal=""):
    med, p99 = stats(samples)
    return (name, "%.2f ms" % med, "%.2f ms" % p99, goal)


def throughput(srv, key, lang, code, seconds=5, threads=8):
    done = [0]
    stop = time.perf_counter() + seconds

    def loop():
        c = Client(srv, key)
        while time.perf_counter() < stop:
            r = c.post("/v1/run", {"language": lang, "code": code})
            assert r["exit_code"] == 0, r
            done[0] += 1

    ts = [threading.Thread(target=loop) for _ in range(threads)]
    t0 = time.perf_counter()
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return done[0] / (time.perf_counter() - t0)


def main():
    rows, rates = [], []
    srv = Cubicled().start()
    try:
        ws, key = srv.workspace("bench")
        c = Client(srv, key)
        py = lambda i: c.post("/v1/run", {"language": "python", "code": "print(1)"})
        assert py(0)["stdout"] == "1\n"
        rows.append(row("cubicle POST /v1/run python `print(1)`", timed(py, N, 20), "≤ 10 ms (aim 3)"))
        # The same with the pool refilled between runs: the request path
        # alone, when a sandbox is ready (the line above is bounded by how
        # fast sandboxes are made: a fork and its copy-on-write faults).
        paced = []
        for i in range(min(N, 40)):
            time.sleep(0.5)
            t = time.perf_counter()
            py(i)
            paced.append((time.perf_counter() - t) * 1e3)
        rows.append(row("  the same, 0.5 s apart (a ready sandbox each time)", paced, ""))
        js_ok = False
        try:
            js = lambda i: c.post("/v1/run", {"language": "javascript", "code": "console.log(1)"})
            js_ok = js(0)["stdout"] == "1\n"
        except RuntimeError as e:
            rows.append(("cubicle POST /v1/run javascript", "n/a", "n/a", str(e)[:60]))
        if js_ok:
            rows.append(row("cubicle POST /v1/run javascript `console.log(1)`", timed(js, N, 20),
                            "≤ 10 ms (aim 3)"))
        rows.append(row("spawned /usr/bin/python3 -c 'print(1)'", timed(
            lambda i: subprocess.run(["/usr/bin/python3", "-c", "print(1)"], check=True,
                                     capture_output=True), min(N, 50), 3)))
        rows.append(row("spawned python3 -I -S -c 'print(1)' (no site)", timed(
            lambda i: subprocess.run(["/usr/bin/python3", "-I", "-S", "-c", "print(1)"],
                                     check=True, capture_output=True), min(N, 50), 3)))
        rows.append(row("spawned node -e 'console.log(1)'", timed(
            lambda i: subprocess.run(["node", "-e", "console.log(1)"], check=True,
                                     capture_output=True), min(N, 30), 3)))
        if os.path.isdir(os.path.join(IMAGES, "sandbox")):
            comp = srv.computer(key, kind="sandbox", size="xs")
            act = lambda i: c.post("/v1/computers/%s/actions/python" % comp["id"],
                                   {"code": "print(1)"})
            rows.append(row("a sandbox computer's `python` action `print(1)`", timed(act, min(N, 50), 3)))
        else:
            rows.append(("a sandbox computer's `python` action", "n/a", "n/a", "no images (make images)"))
        rates.append(("python, 8 clients", "%.0f runs/s" % throughput(srv, key, "python", "print(1)")))
        if js_ok:
            rates.append(("javascript, 8 clients", "%.0f runs/s" % throughput(
                srv, key, "javascript", "console.log(1)")))
    finally:
        srv.stop()
    table("code runner: a trivial snippet, end to end over HTTP (keep-alive), n=%d" % N, rows,
          ("what", "median", "p99", "goal / note"))
    table("code runner: runs per second on %d cores" % os.cpu_count(), rates, ("what", "rate"))


if __name__ == "__main__":
    main()
