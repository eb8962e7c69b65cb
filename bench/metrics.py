#!/usr/bin/env python3
"""What /metrics and the request log cost on the click path: left_click
through cubicled (raw HTTP, one kept-alive connection) against a cubicled
built before them (CUBICLE_BASELINE=path/to/old/bin/cubicled) and against
this build's, each with its own desktop, in rounds of 100 that alternate
between the two so that the machine's load drifts alike; then the same
clicks while a scraper reads /metrics every 100 ms (the price of a scrape
to a click). Without CUBICLE_BASELINE only this build's rows are printed."""

import http.client
import json
import os
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "host"))
from common import stats, table  # noqa: E402
import cubicled  # noqa: E402
from cubicled import Cubicled  # noqa: E402

ROUNDS, PER = int(os.environ.get("CUBICLE_BENCH_ROUNDS", "10")), 100


class Side:
    def __init__(self, binary_dir=None):
        saved = cubicled.harness.BIN
        if binary_dir:
            cubicled.harness.BIN = binary_dir
        try:
            self.srv = Cubicled().start()
        finally:
            cubicled.harness.BIN = saved
        _, self.key = self.srv.workspace("bench")
        c = self.srv.computer(self.key, kind="desktop")
        self.path = "/v1/computers/%s/actions/left_click" % c["id"]
        self.conn = http.client.HTTPConnection("127.0.0.1", self.srv.port)
        self.hdrs = {"Authorization": "Bearer " + self.key, "Content-Type": "application/json"}
        self.samples = []

    def click(self, i):
        x, y = 200 + (i * 37) % 800, 200 + (i * 53) % 400
        t = time.perf_counter()
        self.conn.request("POST", self.path, body=json.dumps({"x": x, "y": y}), headers=self.hdrs)
        r = self.conn.getresponse()
        r.read()
        assert r.status == 200, r.status
        return (time.perf_counter() - t) * 1e3


def main():
    base = os.environ.get("CUBICLE_BASELINE")
    sides = {"after": Side()}
    if base:
        sides["before"] = Side(os.path.dirname(os.path.abspath(base)))
    try:
        for s in sides.values():
            for i in range(30):
                s.click(i)
        k = 0
        for _ in range(ROUNDS):
            for s in sides.values():
                s.samples += [s.click(k + i) for i in range(PER)]
            k += PER
        # This build again, with /metrics scraped every 100 ms meanwhile.
        after = sides["after"]
        stop = threading.Event()
        scrapes = []

        def scraper():
            conn = http.client.HTTPConnection("127.0.0.1", after.srv.port)
            auth = {"Authorization": "Bearer " + after.srv.admin}
            while not stop.wait(0.1):
                t = time.perf_counter()
                conn.request("GET", "/metrics", headers=auth)
                body = conn.getresponse().read()
                scrapes.append(((time.perf_counter() - t) * 1e3, len(body)))
        th = threading.Thread(target=scraper)
        th.start()
        scraped = [after.click(i) for i in range(ROUNDS * PER // 2)]
        stop.set()
        th.join()
        rows = []
        if base:
            med, p99 = stats(sides["before"].samples)
            rows.append(("before: %s" % base, "%.3f" % med, "%.3f" % p99,
                         len(sides["before"].samples)))
        med, p99 = stats(after.samples)
        rows.append(("after: this build (histograms, request ids, log line)", "%.3f" % med,
                     "%.3f" % p99, len(after.samples)))
        med, p99 = stats(scraped)
        rows.append(("after, /metrics scraped every 100 ms meanwhile", "%.3f" % med,
                     "%.3f" % p99, len(scraped)))
        table("left_click through cubicled, raw HTTP kept alive (ms)", rows,
              ("cubicled", "median", "p99", "samples"))
        sm, sp = stats([t for t, _ in scrapes])
        print("\n/metrics: %d scrapes, median %.2f ms, p99 %.2f ms, %d bytes"
              % (len(scrapes), sm, sp, scrapes[-1][1] if scrapes else 0))
    finally:
        for s in sides.values():
            s.srv.stop()


if __name__ == "__main__":
    main()
