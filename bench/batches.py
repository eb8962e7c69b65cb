#!/usr/bin/env python3
"""Computer-use batches (issue 19): N actions of a model's turn in one
request to POST .../computer-use vs the same N actions as N requests, in
each dialect, and against what the older tools make a loop do (a
screenshot after every action). Real cubicled, a real container desktop,
one keep-alive connection, one run; mouse moves, so nothing on the desktop
changes between samples.

Rows, for N = 1, 4, 8, 16 (the last call of every batch is the screenshot
the model looks at next):
- Anthropic computer_toolset_20260801: one turn of N tool_use blocks
  (N-1 mouse_move + screenshot) vs N requests of one tool_use each;
- Anthropic computer_20251124: the same N-1 moves as N-1 requests, each
  answered with the screenshot that version expects, + a screenshot;
- OpenAI computer: one computer_call of N-1 moves (its output is the
  screenshot) vs N-1 computer_use_preview calls of one move, each answered
  with a screenshot;
- plain REST: N-1 move_cursor actions + a screenshot (N requests), the
  floor under all of them."""

import http.client
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "host"))
from common import stats, table, timed  # noqa: E402
from cubicled import Cubicled  # noqa: E402

SAMPLES = int(os.environ.get("CUBICLE_BENCH_RUNS", "30"))


def main():
    srv = Cubicled().start()
    try:
        _, key = srv.workspace("bench")
        cid = srv.computer(key, kind="desktop", isolation="container")["id"]
        conn = http.client.HTTPConnection("127.0.0.1", srv.port)
        auth = {"Authorization": "Bearer " + key, "Content-Type": "application/json"}
        base = "/v1/computers/%s" % cid

        def post(path, body):
            conn.request("POST", path, body=json.dumps(body), headers=auth)
            r = conn.getresponse()
            data = r.read()
            assert r.status == 200, (r.status, data[:200])
            return data

        point = lambda i, k: (100 + (i * 37 + k * 61) % 1000, 100 + (i * 53 + k * 29) % 600)

        def use(k, name, inp):
            return {"type": "tool_use", "id": "toolu_%d" % k, "name": name,
                    "toolset_name": "computer", "input": inp}

        def moves(i, n):
            return [use(k, "mouse_move", {"coordinate": list(point(i, k))}) for k in range(n - 1)]

        def toolset_turn(n):
            return lambda i: post(base + "/computer-use",
                                  {"content": moves(i, n) + [use(n, "screenshot", {})]})

        def toolset_each(n):
            def go(i):
                for b in moves(i, n) + [use(n, "screenshot", {})]:
                    post(base + "/computer-use", b)
            return go

        def legacy_each(n):
            def go(i):
                for k in range(n - 1):
                    post(base + "/computer-use?tool=computer_20251124",
                         {"action": "mouse_move", "coordinate": list(point(i, k))})
                post(base + "/computer-use?tool=computer_20251124", {"action": "screenshot"})
            return go

        def openai_batch(n):
            def go(i):
                acts = [dict(zip("xy", point(i, k)), type="move") for k in range(n - 1)]
                post(base + "/computer-use", {"type": "computer_call", "call_id": "c",
                                              "actions": acts or [{"type": "screenshot"}]})
            return go

        def openai_each(n):
            def go(i):
                for k in range(max(n - 1, 1)):
                    act = dict(zip("xy", point(i, k)), type="move") if n > 1 else \
                        {"type": "screenshot"}
                    post(base + "/computer-use?tool=computer_use_preview",
                         {"type": "computer_call", "call_id": "c", "action": act})
            return go

        def rest(n):
            def go(i):
                for k in range(n - 1):
                    post(base + "/actions/move_cursor", dict(zip("xy", point(i, k))))
                post(base + "/actions/screenshot", {})
            return go

        rows = []
        for n in (1, 4, 8, 16):
            ways = (("toolset: 1 turn of N tool_use", toolset_turn(n)),
                    ("toolset: N requests of 1 tool_use", toolset_each(n)),
                    ("computer_20251124: a screenshot per action", legacy_each(n)),
                    ("OpenAI computer: 1 computer_call, N-1 actions", openai_batch(n)),
                    ("computer_use_preview: N-1 calls, a screenshot each", openai_each(n)),
                    ("REST: N-1 move_cursor + screenshot", rest(n)))
            # Taken in turns, sample by sample: a change in the machine's load
            # (it is shared) falls on every way alike.
            samples = {label: [] for label, _ in ways}
            for i in range(SAMPLES + 2):
                for label, fn in ways:
                    ms = timed(fn, 1, warmup=0)[0]
                    if i >= 2:
                        samples[label].append(ms)
            for label, _ in ways:
                med, p99 = stats(samples[label])
                rows.append((n, label, "%.1f" % med, "%.1f" % p99))
        table("computer-use batches: N calls of a turn, %d samples each (ms per turn)" % SAMPLES,
              rows, ("N", "how", "median", "p99"))
    finally:
        srv.stop()


if __name__ == "__main__":
    main()
