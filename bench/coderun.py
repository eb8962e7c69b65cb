#!/usr/bin/env python3
"""The code runner (POST /v1/run) side by side with what people use today:
a trivial snippet per language end to end over HTTP (median, p99), back to
back and with a ready sandbox, runs per second with both cores busy, against
spawning `python3 -c` / `node -e` and a sandbox computer's `python` action.
Real cubicled, one run. Also the floor under a run (the same request
refused with 400 after HTTP, key and JSON: everything but the run) and the
Python supervisor alone (runproto.h on its control socket, no cubicled).

  CUBICLE_BUILD=build python3 bench/coderun.py    (CUBICLE_BENCH_RUNS=200)
"""

import array
import http.client
import json
import os
import socket
import struct
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "host"))
from common import stats, table, timed  # noqa: E402
from cubicled import IMAGES, Cubicled  # noqa: E402
import harness  # noqa: E402

N = int(os.environ.get("CUBICLE_BENCH_RUNS", "200"))
PACED = min(N, 40)
GAP = 0.3  # seconds between paced runs: the pool is refilled by then


class Client:
    def __init__(self, srv, key):
        self.conn = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=60)
        self.h = {"Authorization": "Bearer " + key, "Content-Type": "application/json"}

    def post(self, path, body, want=200):
        self.conn.request("POST", path, body=json.dumps(body), headers=self.h)
        r = self.conn.getresponse()
        data = r.read()
        if r.status != want:
            raise RuntimeError("%s -> %d %s" % (path, r.status, data[:300]))
        return json.loads(data)


def row(name, samples, goal=""):
    print("..", name, file=sys.stderr, flush=True)
    med, p99 = stats(samples)
    return (name, "%.2f ms" % med, "%.2f ms" % p99, goal)


def paced(fn):
    out = []
    for i in range(PACED):
        time.sleep(GAP)
        t = time.perf_counter()
        fn(i)
        out.append((time.perf_counter() - t) * 1e3)
    return out


def throughput(srv, key, lang, code, seconds=5, threads=8):
    done, failed = [0], [0]
    stop = time.perf_counter() + seconds

    def loop():
        c = Client(srv, key)
        while time.perf_counter() < stop:
            r = c.post("/v1/run", {"language": lang, "code": code})
            if r["exit_code"] == 0:
                done[0] += 1
            else:  # a starved machine can stop a run at its limit: counted, not fatal
                failed[0] += 1
                print("   run failed:", r, file=sys.stderr)

    ts = [threading.Thread(target=loop) for _ in range(threads)]
    t0 = time.perf_counter()
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    rate = done[0] / (time.perf_counter() - t0)
    return "%.0f runs/s" % rate + (" (%d stopped at a limit)" % failed[0] if failed[0] else "")


def supervisor_alone():
    """cubicle-pyrun on a socketpair, as runner.c starts it: one run is a
    socketpair whose far end goes over the control socket (runproto.h)."""
    ctl, far = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    p = subprocess.Popen(["/bin/sh", "-c", 'exec "$0" 3<&%d' % far.fileno(),
                          os.path.join(harness.BIN, "cubicle-pyrun")], pass_fds=[far.fileno()],
                         stdin=subprocess.DEVNULL, env={"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"})
    far.close()
    code = b"print(1)"
    req = struct.pack("=7I", 0x31514552, len(code), 0, 100, 30000, 128, 1 << 20)

    def run(i):
        a, b = socket.socketpair()
        ctl.sendmsg([b"r"], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [b.fileno()]))])
        b.close()
        a.sendall(req + code)
        resp = b""
        while len(resp) < 40:
            d = a.recv(4096)
            if not d:
                raise RuntimeError("the supervisor closed the run")
            resp += d
        magic, ec, err, cpu, wall, mem, tr, lo, le, lm = struct.unpack("=IiIIIIIIII", resp[:40])
        while len(resp) < 40 + lo + le + lm:
            d = a.recv(4096)
            if not d:
                break
            resp += d
        a.close()
        if err or resp[40:40 + lo] != b"1\n":
            raise RuntimeError("run failed: %r" % resp)

    try:
        time.sleep(1)
        back = timed(run, N, 20)
        ready = paced(run)
        return back, ready
    finally:
        ctl.close()
        p.kill()
        p.wait()


def main():
    rows, rates = [], []
    srv = Cubicled().start()
    try:
        ws, key = srv.workspace("bench")
        c = Client(srv, key)
        floor = lambda i: c.post("/v1/run", {"language": "cobol", "code": "x"}, want=400)
        rows.append(row("POST /v1/run refused (400 after HTTP, key, JSON: the floor)",
                        timed(floor, N, 20)))
        inside = []

        def py(i):
            r = c.post("/v1/run", {"language": "python", "code": "print(1)"})
            assert r["stdout"] == "1\n", r
            inside.append(r["wall_ms"])
        py(0)
        rows.append(row("cubicle POST /v1/run python `print(1)`, back to back",
                        timed(py, N, 20), "≤ 10 ms (aim 3)"))
        rows.append(row("  the same, %.1f s apart (a ready sandbox each time)" % GAP, paced(py),
                        "≤ 10 ms (aim 3)"))
        js_ok = False
        try:
            js = lambda i: c.post("/v1/run", {"language": "javascript", "code": "console.log(1)"})
            js_ok = js(0)["stdout"] == "1\n"
        except RuntimeError as e:
            rows.append(("cubicle POST /v1/run javascript", "n/a", "n/a", str(e)[:60]))
        if js_ok:
            rows.append(row("cubicle POST /v1/run javascript `console.log(1)`, back to back",
                            timed(js, N, 20), "≤ 10 ms (aim 3)"))
            rows.append(row("  the same, %.1f s apart" % GAP, paced(js), "≤ 10 ms (aim 3)"))
        rates.append(("python `print(1)`, 8 clients", throughput(srv, key, "python", "print(1)")))
        if js_ok:
            rates.append(("javascript `console.log(1)`, 8 clients",
                          throughput(srv, key, "javascript", "console.log(1)")))
        if os.path.isdir(os.path.join(IMAGES, "sandbox")):
            comp = srv.computer(key, kind="sandbox", size="xs")
            act = lambda i: c.post("/v1/computers/%s/actions/python" % comp["id"],
                                   {"code": "print(1)"})
            rows.append(row("a sandbox computer's `python` action `print(1)`",
                            timed(act, min(N, 50), 3)))
        else:
            rows.append(("a sandbox computer's `python` action", "n/a", "n/a",
                         "no images (make images)"))
    finally:
        srv.stop()
    back, ready = supervisor_alone()
    rows.append(row("cubicle-pyrun alone (runproto.h, no cubicled), back to back", back))
    rows.append(row("  the same, %.1f s apart" % GAP, ready))
    rows.append(row("  inside the sandbox (wall_ms: code handed over -> answer)", inside))
    rows.append(row("spawned /usr/bin/python3 -c 'print(1)'", timed(
        lambda i: subprocess.run(["/usr/bin/python3", "-c", "print(1)"], check=True,
                                 capture_output=True), min(N, 50), 3)))
    rows.append(row("spawned python3 -I -S -c 'print(1)' (no site)", timed(
        lambda i: subprocess.run(["/usr/bin/python3", "-I", "-S", "-c", "print(1)"],
                                 check=True, capture_output=True), min(N, 50), 3)))
    rows.append(row("spawned node -e 'console.log(1)'", timed(
        lambda i: subprocess.run(["node", "-e", "console.log(1)"], check=True,
                                 capture_output=True), min(N, 30), 3)))
    table("code runner: a trivial snippet, end to end over HTTP (keep-alive), n=%d (paced n=%d), "
          "load %.1f" % (N, PACED, os.getloadavg()[0]), rows, ("what", "median", "p99", "goal / note"))
    table("code runner: runs per second on %d cores" % os.cpu_count(), rates, ("what", "rate"))


if __name__ == "__main__":
    main()
