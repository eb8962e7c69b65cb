#!/usr/bin/env python3
"""An action's latency from each client, same machine, same run, same
desktop: left_click through cubicled from the TypeScript SDK (sdk/js, its
tsc build), raw fetch in the same Node process, the Python SDK, and raw
HTTP from Python (http.client), each on one kept-alive connection. Rounds
of 100 interleave the Node and the Python side so that the machine's load
drifts alike for all four."""

import http.client
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "host"))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "sdk", "python"))
from common import stats, table  # noqa: E402
from cubicled import Cubicled  # noqa: E402
import cubicle  # noqa: E402
import time  # noqa: E402

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
ROUNDS, PER = int(os.environ.get("CUBICLE_BENCH_ROUNDS", "10")), 100


def main():
    js = os.path.join(ROOT, "sdk", "js")
    subprocess.run(["npm", "run", "--silent", "build"], cwd=js, check=True)
    srv = Cubicled().start()
    node = None
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

        node = subprocess.Popen(["node", os.path.join(ROOT, "bench", "sdk_node.mjs"), url, key,
                                 desk.id, os.path.join(js, "dist")],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        for i in range(20):
            raw(i)
            sdk(i)
        samples = {"raw": [], "py": [], "fetch": [], "ts": []}
        k = 0
        for _ in range(ROUNDS):
            node.stdin.write("%d\n" % PER)
            node.stdin.flush()
            got = json.loads(node.stdout.readline())
            samples["fetch"] += got["fetch"]
            samples["ts"] += got["sdk"]
            for _ in range(PER):
                for name, fn in (("raw", raw), ("py", sdk)):
                    t = time.perf_counter()
                    fn(k)
                    samples[name].append((time.perf_counter() - t) * 1e3)
                k += 1
        rows = []
        for name, what in (("raw", "raw HTTP, Python http.client (one kept-alive connection)"),
                           ("py", "Python SDK: computer.left_click(x, y)"),
                           ("fetch", "raw fetch, Node %s (undici, kept alive)" %
                            subprocess.run(["node", "--version"], capture_output=True,
                                           text=True).stdout.strip()),
                           ("ts", "TypeScript SDK: await computer.left_click(x, y)")):
            med, p99 = stats(samples[name])
            rows.append((what, "%.3f" % med, "%.3f" % p99, len(samples[name])))
        table("left_click through cubicled, end to end, per client (ms)", rows,
              ("client", "median", "p99", "samples"))
        desk.delete()
    finally:
        if node:
            node.stdin.close()
            node.wait()
        srv.stop()


if __name__ == "__main__":
    main()
