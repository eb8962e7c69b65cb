#!/usr/bin/env python3
"""The clients: a left_click through the Python SDK vs raw HTTP on one
kept-alive connection, and the `cubicle` CLI spawned per action vs `curl`
spawned per action. Real cubicled, a real desktop computer, one run."""

import http.client
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "host"))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "sdk", "python"))
from common import stats, table, timed  # noqa: E402
from cubicled import Cubicled, harness  # noqa: E402
import cubicle  # noqa: E402


def main():
    srv = Cubicled().start()
    try:
        _, key = srv.workspace("bench")
        url = "http://127.0.0.1:%d" % srv.port
        client = cubicle.Client(url, key)
        desk = cubicle.Computer.create(kind="desktop", client=client)
        path = "/v1/computers/%s/actions/left_click" % desk.id
        target = lambda i: (200 + (i * 37) % 800, 200 + (i * 53) % 400)
        conn = http.client.HTTPConnection("127.0.0.1", srv.port)
        hdrs = {"Authorization": "Bearer " + key, "Content-Type": "application/json"}

        def raw(i):
            x, y = target(i)
            conn.request("POST", path, body=json.dumps({"x": x, "y": y}), headers=hdrs)
            r = conn.getresponse()
            json.loads(r.read())
            assert r.status == 200, r.status

        def sdk(i):
            desk.left_click(*target(i))

        env = dict(os.environ, CUBICLE_URL=url, CUBICLE_API_KEY=key)
        cli = os.path.join(harness.BIN, "cubicle")

        def spawn(argv):
            def go(i):
                x, y = target(i)
                subprocess.run([a.format(x=x, y=y) for a in argv], env=env, check=True,
                               stdout=subprocess.DEVNULL)
            return go

        # Interleaved, so that the machine's load drifts alike for both.
        def pairs(a, b, k):
            sa, sb = [], []
            for i in range(k):
                sa += timed(a, 1, warmup=0 if i else 5)
                sb += timed(b, 1, warmup=0 if i else 5)
            return sa, sb

        rows = []
        for (what_a, a, what_b, b, k) in (
                ("raw HTTP, one kept-alive connection (http.client)", raw,
                 "Python SDK: computer.left_click(x, y)", sdk, 1000),
                ("`curl` spawned each time", spawn(
                    ["curl", "-sf", "-H", "Authorization: Bearer " + key, "-d",
                     '{{"x":{x},"y":{y}}}', url + path]),
                 "`cubicle left_click ID X Y`, spawned each time", spawn(
                    [cli, "left_click", desk.id, "{x}", "{y}"]), 150)):
            for what, samples in zip((what_a, what_b), pairs(a, b, k)):
                med, p99 = stats(samples)
                rows.append((what, "%.3f" % med, "%.3f" % p99, k))
        table("left_click through cubicled, end to end (ms)", rows,
              ("client", "median", "p99", "samples"))
        desk.delete()
    finally:
        srv.stop()


if __name__ == "__main__":
    main()
