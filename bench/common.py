"""Shared bits of the benchmarks: a desktop with envd, timing and tables."""

import http.client
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "envd"))
import harness  # noqa: E402


def stats(samples_ms):
    s = sorted(samples_ms)
    p99 = s[min(len(s) - 1, int(round(0.99 * (len(s) - 1))))]
    return statistics.median(s), p99


class KeepAlive:
    """One persistent HTTP connection to envd, as a real client would hold."""

    def __init__(self, envd):
        self.envd = envd
        self.conn = http.client.HTTPConnection("127.0.0.1", envd.port, timeout=60)
        self.auth = {"Authorization": "Bearer " + envd.token,
                     "Content-Type": "application/json"}

    def post(self, action, params):
        self.conn.request("POST", "/v1/actions/" + action, body=json.dumps(params),
                          headers=self.auth)
        r = self.conn.getresponse()
        body = r.read()
        if r.status != 200:
            raise RuntimeError("%s -> %d %s" % (action, r.status, body[:200]))
        return body


def timed(fn, n, warmup=5):
    for i in range(warmup):
        fn(i)
    out = []
    for i in range(n):
        t = time.perf_counter()
        fn(i)
        out.append((time.perf_counter() - t) * 1e3)
    return out


def table(title, rows, cols):
    print("\n" + title)
    widths = [max(len(str(c)), *(len(str(r[i])) for r in rows)) for i, c in enumerate(cols)]
    line = "  ".join(str(c).ljust(w) for c, w in zip(cols, widths))
    print(line)
    print("-" * len(line))
    for r in rows:
        print("  ".join(str(v).ljust(w) for v, w in zip(r, widths)))
