#!/usr/bin/env python3
"""Another tenant's click latency while one workspace floods cubicled.

Workspace B clicks on its desktop over one keep-alive connection (what an
agent does), first with the server idle, then while workspace A floods:
300 `GET …?wait=deleted` held open and re-sent as soon as they are answered
(a refused one at once, ignoring Retry-After), plus 64 clients looping on
slow requests (`bash sleep 0.5`) and lists, from other loopback addresses
than B's. Side by side in one run: B's left_click p50/p99 idle and under the
flood, B's failures, and what A's flood got back (by status).

Real cubicled, real container computers. CUBICLE_BENCH_CLICKS sets the
number of clicks per column (default 300).
"""

import http.client
import json
import multiprocessing
import os
import select
import socket
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "host"))
from common import stats, table  # noqa: E402
from cubicled import Cubicled  # noqa: E402

CLICKS = int(os.environ.get("CUBICLE_BENCH_CLICKS", "300"))
WAITS = 300
BUSY_CLIENTS = 64


def request_bytes(method, path, key, body=b""):
    h = "%s %s HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n" % (method, path, key)
    if body:
        h += "Content-Type: application/json\r\nContent-Length: %d\r\n" % len(body)
    return (h + "\r\n").encode() + body


def connect(src, port):
    s = socket.socket()
    s.settimeout(30)
    s.bind((src, 0))
    s.connect(("127.0.0.1", port))
    return s


class Flood:
    def __init__(self, srv, key, cid):
        self.srv, self.key, self.cid = srv, key, cid
        self.stop = threading.Event()
        self.counts = {}
        self.lock = threading.Lock()
        self.threads = []

    def count(self, what):
        with self.lock:
            self.counts[what] = self.counts.get(what, 0) + 1

    def waits(self):
        """WAITS waits held open; each answered one is sent again at once."""
        payload = request_bytes("GET", "/v1/computers/%s?wait=deleted&timeout_s=600" % self.cid,
                                self.key)
        socks = {}

        def fresh(i):
            try:
                s = connect("127.0.0.%d" % (30 + i // 40), self.srv.port)
                s.sendall(payload)
                socks[s] = i
            except OSError:
                self.count("connect failed")

        for i in range(WAITS):
            fresh(i)
        while not self.stop.is_set():
            ready, _, _ = select.select(list(socks), [], [], 0.2)
            for s in ready:
                i = socks.pop(s)
                try:
                    head = s.recv(4096)
                    self.count("wait " + (head.split(b" ")[1].decode() if head else "closed"))
                except OSError:
                    self.count("wait reset")
                s.close()
                fresh(i)
        for s in socks:
            s.close()

    def busy(self, i):
        body = json.dumps({"command": "sleep 0.5"}).encode()
        src = "127.0.0.%d" % (50 + i // 32)
        while not self.stop.is_set():
            for method, path, b in (("POST", "/v1/computers/%s/actions/bash" % self.cid, body),
                                    ("GET", "/v1/computers", b"")):
                try:
                    s = connect(src, self.srv.port)
                    s.sendall(request_bytes(method, path, self.key, b))
                    head = s.recv(4096)
                    s.close()
                    self.count("request " + (head.split(b" ")[1].decode() if head else "closed"))
                except OSError:
                    self.count("request reset")

    def run(self, stop, out):
        """In its own process (so that B's timing shares no interpreter lock
        with the flood): floods until stop is set, then puts the counts."""
        self.threads = [threading.Thread(target=self.waits)]
        self.threads += [threading.Thread(target=self.busy, args=(i,))
                         for i in range(BUSY_CLIENTS)]
        for t in self.threads:
            t.start()
        stop.wait()
        self.stop.set()
        for t in self.threads:
            t.join()
        out.put(self.counts)


def healthz(srv, n):
    """n GET /healthz over one keep-alive connection (no guest on the path)."""
    conn = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=120)
    out = []
    for _ in range(n):
        t = time.perf_counter()
        conn.request("GET", "/healthz")
        r = conn.getresponse()
        r.read()
        if r.status == 200:
            out.append((time.perf_counter() - t) * 1e3)
    conn.close()
    return out


def clicks(srv, key, cid, n):
    """n left_clicks over one keep-alive connection: (ms samples, failures)."""
    conn = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=120)
    headers = {"Authorization": "Bearer " + key, "Content-Type": "application/json"}
    samples, failures = [], {}
    for i in range(n):
        body = json.dumps({"x": 100 + (i * 37) % 800, "y": 100 + (i * 53) % 500})
        t = time.perf_counter()
        try:
            conn.request("POST", "/v1/computers/%s/actions/left_click" % cid, body, headers)
            r = conn.getresponse()
            r.read()
            status = r.status
        except (OSError, http.client.HTTPException) as exc:
            status = type(exc).__name__
            conn.close()
            conn = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=120)
        ms = (time.perf_counter() - t) * 1e3
        if status == 200:
            samples.append(ms)
        else:
            failures[status] = failures.get(status, 0) + 1
    conn.close()
    return samples, failures


def cpu_s(pid):
    """CPU seconds (user + system) a process has used."""
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def measured(srv, key, cid, n):
    """clicks(), plus cubicled's CPU use meanwhile (% of one core)."""
    c0, t0 = cpu_s(srv.proc.pid), time.monotonic()
    samples, failures = clicks(srv, key, cid, n)
    cpu = 100 * (cpu_s(srv.proc.pid) - c0) / (time.monotonic() - t0)
    return samples, failures, cpu


def main():
    srv = Cubicled().start()
    try:
        ws_a, key_a = srv.workspace("flooder")
        ws_b, key_b = srv.workspace("victim")
        target = srv.computer(key_a, kind="desktop")["id"]
        desktop = srv.computer(key_b, kind="desktop")["id"]
        clicks(srv, key_b, desktop, 20)  # warm up
        idle, idle_fail, idle_cpu = measured(srv, key_b, desktop, CLICKS)
        idle_h = healthz(srv, 100)
        stop, out = multiprocessing.Event(), multiprocessing.Queue()
        flood = multiprocessing.Process(target=Flood(srv, key_a, target).run,
                                        args=(stop, out))
        flood.start()
        try:
            time.sleep(3)  # let the flood fill A's budgets
            loaded, loaded_fail, loaded_cpu = measured(srv, key_b, desktop, CLICKS)
            loaded_h = healthz(srv, 100)
        finally:
            stop.set()
            counts = out.get(timeout=120)
            flood.join()
        i50, i99 = stats(idle) if idle else (float("nan"),) * 2
        l50, l99 = stats(loaded) if loaded else (float("nan"),) * 2
        fails = lambda f: ", ".join("%s×%d" % (k, v) for k, v in sorted(f.items())) or "none"
        table("B's left_click through cubicled while workspace A floods (%d clicks each)" % CLICKS,
              [("p50 (ms)", "%.2f" % i50, "%.2f" % l50),
               ("p99 (ms)", "%.2f" % i99, "%.2f" % l99),
               ("B's failures", fails(idle_fail), fails(loaded_fail)),
               ("/healthz p50 / p99 (ms), 100 each", "%.2f / %.2f" % stats(idle_h),
                "%.2f / %.2f" % stats(loaded_h) if loaded_h else "all failed"),
               ("cubicled CPU (% of a core)", "%.0f" % idle_cpu, "%.0f" % loaded_cpu),
               ("load average (1 min) after", "", "%.1f" % os.getloadavg()[0])],
              ["", "idle", "under A's flood"])
        print("A's flood got: " + ", ".join("%s: %d" % kv for kv in sorted(counts.items())))
    finally:
        srv.stop()


if __name__ == "__main__":
    main()
