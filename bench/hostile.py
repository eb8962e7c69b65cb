#!/usr/bin/env python3
"""cubicled under a hostile envd (issue 11): resident memory, open
descriptors and another tenant's bash latency, idle vs while a compromised
guest answers every call with gigabytes, an endless chunked body, a slow
drip and endless headers. Real cubicled with its default limits
(--max-envd-answer-mb 64), real container computers; the hostile envd is
tests/attack/test_hostile_envd.py's, in place of the attacker's envd socket.

  CUBICLE_BENCH_HOSTILE_S   how long the attack runs (default 30 s)
  CUBICLE_BENCH_FLOODS      concurrent hostile calls (default 8)
"""

import os
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "host"))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "attack"))
from common import stats, table  # noqa: E402
from cubicled import Cubicled  # noqa: E402
from attack import rss_kb, open_fds  # noqa: E402
import test_hostile_envd as hostile_test  # noqa: E402

ATTACK_S = float(os.environ.get("CUBICLE_BENCH_HOSTILE_S", "30"))
FLOODS = int(os.environ.get("CUBICLE_BENCH_FLOODS", "8"))
KINDS = ("gigabytes", "screenshot", "forever", "drip", "headers")


def sample(pid, seconds, victim):
    """RSS and descriptors of pid (peak and median) and the victim's bash
    latency, for `seconds`."""
    rss, fds, lat = [], [], []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        rss.append(rss_kb(pid))
        fds.append(open_fds(pid))
        t = time.perf_counter()
        victim()
        lat.append((time.perf_counter() - t) * 1e3)
    return rss, fds, lat


def main():
    hostile_test.HOSTILE_BYTES = 4 << 30
    srv = Cubicled().start()
    hostile = None
    try:
        _, key_bad = srv.workspace("attacker")
        _, key_good = srv.workspace("victim")
        bad = srv.computer(key_bad, kind="sandbox", size="xs", isolation="container")["id"]
        good = srv.computer(key_good, kind="sandbox", size="xs", isolation="container")["id"]
        pid = srv.proc.pid

        def victim():
            r = srv.req("POST", "/v1/computers/%s/actions/bash" % good, {"command": "true"},
                        key=key_good)
            if r.status != 200:
                raise RuntimeError("the victim's bash answered %d %s" % (r.status, r.body[:200]))

        idle = sample(pid, min(10.0, ATTACK_S), victim)

        hostile = hostile_test.take_over(srv, bad, key_bad)
        stop = threading.Event()
        counts = {"502": 0, "504": 0, "other": 0}

        def flood(i):
            kind = KINDS[i % len(KINDS)]
            while not stop.is_set():
                r = srv.req("POST", "/v1/computers/%s/actions/%s" % (bad, kind), {},
                            key=key_bad, timeout=300)
                k = str(r.status) if str(r.status) in counts else "other"
                counts[k] += 1
        floods = [threading.Thread(target=flood, args=(i,), daemon=True)
                  for i in range(FLOODS)]
        for t in floods:
            t.start()
        under = sample(pid, ATTACK_S, victim)
        stop.set()
        hostile.close()  # the calls in flight end now (502)
        for t in floods:
            t.join(120)

        def row(name, f):
            return [name, f(idle), f(under)]
        mib = lambda v: "%.1f MiB" % (v / 1024)
        rows = [
            row("cubicled RSS, median", lambda s: mib(stats(s[0])[0])),
            row("cubicled RSS, peak", lambda s: mib(max(s[0]))),
            row("open descriptors, median", lambda s: "%d" % stats(s[1])[0]),
            row("open descriptors, peak", lambda s: "%d" % max(s[1])),
            row("victim's bash p50", lambda s: "%.1f ms" % stats(s[2])[0]),
            row("victim's bash p99", lambda s: "%.1f ms" % stats(s[2])[1]),
            row("victim's calls", lambda s: "%d" % len(s[2])),
        ]
        table("cubicled under a hostile envd (%d concurrent calls for %.0f s: %s; "
              "answers 502 %d, 504 %d, other %d)" % (
                  FLOODS, ATTACK_S, ", ".join(KINDS), counts["502"], counts["504"],
                  counts["other"]),
              rows, ["", "idle", "under the hostile envd"])
    finally:
        if hostile:
            hostile_test.give_back(hostile)
        srv.stop()


if __name__ == "__main__":
    main()
