"""/metrics and the request log, against a real cubicled with a real
desktop: a mixed workload (actions that succeed and fail, lookups of
missing computers, a refused key, code runs, a stop and a start, a live
stream), then promtool checks the live /metrics and the histograms' counts
are exactly the requests made; the JSON log has one object per line, and
the request id a caller sent is in cubicled's line and in envd's line for
that action (the container's console.log). /metrics wants the admin key
unless --metrics-open."""

import json
import os
import re
import subprocess
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cubicled import Cubicled, wait_until  # noqa: E402
from wsclient import WebSocket  # noqa: E402


def parse(text):
    """{(name, frozenset(labels)): value} of a Prometheus text exposition."""
    out = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = re.match(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})? (\S+)$', line)
        assert m, "not a sample line: %r" % line
        labels = frozenset(re.findall(r'([a-zA-Z_]\w*)="((?:[^"\\]|\\.)*)"', m.group(3) or ""))
        out[(m.group(1), labels)] = float(m.group(4))
    return out


def get(samples, name, **labels):
    want = set(labels.items())
    hits = [v for (n, ls), v in samples.items() if n == name and want <= set(ls)]
    return sum(hits) if hits else None


ACTIONS = "/v1/computers/{}/actions/{}"


class Metrics(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.srv = Cubicled(["--log-format", "json"]).start()
        cls.ws, cls.key = cls.srv.workspace("metrics")
        cls.c = cls.srv.computer(cls.key, kind="desktop", idle_timeout_s=600)

    @classmethod
    def tearDownClass(cls):
        cls.srv.stop()

    def scrape(self):
        r = self.srv.req("GET", "/metrics")
        self.assertEqual(r.status, 200, r)
        self.assertTrue(r.headers["content-type"].startswith("text/plain; version=0.0.4"))
        return r.body.decode()

    def test_a_mixed_workload_counted_exactly(self):
        srv, cid, key = self.srv, self.c["id"], self.key
        before = parse(self.scrape())
        base = {k: get(before, "cubicle_http_request_duration_seconds_count", route=k[0],
                       method=k[1]) or 0
                for k in ((ACTIONS, "POST"), ("/v1/computers/{}", "GET"), ("/v1/run", "POST"),
                          ("/v1/computers", "GET"))}
        # 6 clicks and 2 bash that answer 200, 3 clicks envd refuses (400).
        for i in range(6):
            srv.act(cid, "left_click", {"x": 10 + i, "y": 20}, key=key)
        for i in range(2):
            srv.act(cid, "bash", {"command": "true"}, key=key)
        for i in range(3):
            r = srv.req("POST", "/v1/computers/%s/actions/left_click" % cid, {"x": "ten"},
                        key=key)
            self.assertEqual(r.status, 400, r)
        for i in range(4):
            self.assertEqual(srv.req("GET", "/v1/computers/c-missing%d" % i, key=key).status,
                             404)
        self.assertEqual(srv.req("GET", "/v1/computers", key="ck_wrong").status, 401)
        for code in ("print(1)", "1/0"):
            srv.ok("POST", "/v1/run", {"language": "python", "code": code}, key=key)
        # A stop and a start, and a live stream watched for a moment.
        srv.ok("POST", "/v1/computers/%s/stop?wait=stopped" % cid, key=key)
        srv.ok("POST", "/v1/computers/%s/start?wait=running" % cid, key=key)
        tok = srv.ok("POST", "/v1/computers/%s/stream" % cid, {"ttl_s": 60}, key=key,
                     status=201)["token"]
        ws = WebSocket("127.0.0.1", srv.port, "/v1/computers/%s/stream?token=%s" % (cid, tok))
        try:
            self.assertTrue(ws.recv_exactly(12).startswith(b"RFB "))
            live = parse(self.scrape())
            self.assertEqual(get(live, "cubicle_stream_viewers"), 1)
            self.assertGreaterEqual(
                get(live, "cubicle_stream_bytes_total", tunnel="stream", direction="out"), 12)
        finally:
            ws.close()

        text = self.scrape()
        p = subprocess.run(["promtool", "check", "metrics"], input=text.encode(),
                           capture_output=True)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        m = parse(text)

        def http(route, method):
            return get(m, "cubicle_http_request_duration_seconds_count", route=route,
                       method=method) - base.get((route, method), 0)

        # The histograms count exactly the requests made.
        self.assertEqual(http(ACTIONS, "POST"), 11)
        self.assertEqual(http("/v1/computers/{}", "GET"), 4)
        self.assertEqual(http("/v1/run", "POST"), 2)
        self.assertEqual(http("/v1/computers", "GET"), 1)
        self.assertEqual(get(m, "cubicle_http_errors_total", route="/v1/computers/{}",
                             code="not_found"), 4)
        self.assertEqual(get(m, "cubicle_http_errors_total", route="/v1/computers",
                             code="unauthorized"), 1)
        self.assertEqual(get(m, "cubicle_http_errors_total", route=ACTIONS,
                             code="invalid_parameter"), 3)
        self.assertEqual(get(m, "cubicle_action_duration_seconds_count", action="left_click"),
                         9)
        self.assertEqual(get(m, "cubicle_action_duration_seconds_count", action="bash"), 2)
        self.assertEqual(get(m, "cubicle_action_errors_total", action="left_click",
                             code="invalid_parameter"), 3)
        self.assertIsNone(get(m, "cubicle_action_errors_total", action="bash"))
        self.assertEqual(get(m, "cubicle_actions_total"), 11)
        self.assertEqual(get(m, "cubicle_runs_total", language="python"), 2)
        self.assertEqual(get(m, "cubicle_run_duration_seconds_count", language="python"), 2)
        self.assertEqual(get(m, "cubicle_run_errors_total", language="python",
                             type="exception"), 1)
        for op in ("boot", "stop", "start"):
            self.assertEqual(get(m, "cubicle_lifecycle_duration_seconds_count", op=op,
                                 driver="container"), 1, op)
        self.assertGreater(get(m, "cubicle_lifecycle_duration_seconds_sum", op="boot",
                               driver="container"), 0)
        self.assertEqual(get(m, "cubicle_computers", state="running", kind="desktop",
                             size="small", isolation="container"), 1)
        self.assertEqual(get(m, "cubicle_stream_viewers"), 0)
        self.assertGreater(get(m, "cubicle_usage_seconds_total", workspace=self.ws,
                               state="running"), 0)
        self.assertGreater(get(m, "process_resident_memory_bytes"), 1 << 20)
        self.assertGreater(get(m, "process_open_fds"), 3)
        self.assertGreater(get(m, "process_threads"), 1)
        # Every histogram: buckets never decrease, +Inf is the count.
        for (name, labels), v in m.items():
            if not name.endswith("_count"):
                continue
            base_name = name[:-6]
            buckets = sorted(((float("inf") if dict(ls)["le"] == "+Inf" else float(dict(ls)["le"])),
                              bv) for (n, ls), bv in m.items()
                             if n == base_name + "_bucket" and set(labels) <= set(ls))
            if not buckets:
                continue
            counts = [c for _, c in buckets]
            self.assertEqual(counts, sorted(counts), name)
            self.assertEqual(buckets[-1], (float("inf"), v), (name, labels))

    def test_the_dashboard_queries_metrics_that_exist(self):
        # docs/grafana-dashboard.json: every metric its queries name is served.
        with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "docs",
                               "grafana-dashboard.json")) as f:
            dash = json.load(f)
        exprs = [t["expr"] for p in dash["panels"] for t in p.get("targets", [])]
        self.assertGreater(len(exprs), 20)
        served = {n for (n, _) in parse(self.scrape())}
        used = set()
        for e in exprs:
            used |= set(re.findall(r"\b((?:cubicle|process)_[a-z_]+)", e))
        self.assertGreater(len(used), 15)
        self.assertEqual(used - served, set())

    def test_request_ids_reach_envd_and_the_json_log(self):
        srv, cid, key = self.srv, self.c["id"], self.key
        rid = "t-metrics-%d" % int(time.time() * 1000)
        r = srv.req("POST", "/v1/computers/%s/actions/bash" % cid, {"command": "echo hi"},
                    key=key, headers={"X-Request-Id": rid})
        self.assertEqual(r.status, 200, r)
        self.assertEqual(r.headers["x-request-id"], rid)
        # A request id that is not sane is replaced by one of cubicled's own.
        for bad in ("has space", "x" * 65, "semi;colon"):
            r = srv.req("GET", "/healthz", key=None, headers={"X-Request-Id": bad})
            self.assertRegex(r.headers["x-request-id"], r"^[0-9a-f]{16}$")
        r2 = srv.req("GET", "/healthz", key=None)
        self.assertNotEqual(r2.headers["x-request-id"], r.headers["x-request-id"])

        def line():
            for ln in srv.read_log().splitlines():
                if rid in ln:
                    return json.loads(ln)
        entry = wait_until(line, 10, "cubicled's log line")
        self.assertEqual((entry["rid"], entry["method"], entry["status"], entry["action"],
                          entry["ws"], entry["id"], entry["route"], entry["prog"]),
                         (rid, "POST", 200, "bash", self.ws, cid, ACTIONS, "cubicled"))
        self.assertGreater(entry["ms"], 0)
        # Every line of the log is one JSON object (the state's other lines too).
        with open(srv.log_path, errors="replace") as f:
            lines = [ln for ln in f.read().splitlines() if ln.strip()]
        self.assertGreater(len(lines), 10)
        for ln in lines:
            self.assertIsInstance(json.loads(ln), dict, ln)
        console = os.path.join(srv.state, "computers", cid, "console.log")

        def envd_line():
            with open(console, errors="replace") as f:
                return [ln for ln in f.read().splitlines()
                        if "rid=%s" % rid in ln and "/v1/actions/bash" in ln]
        found = wait_until(envd_line, 10, "envd's log line for the action")
        self.assertEqual(len(found), 1, found)
        self.assertRegex(found[0], r"^envd: POST /v1/actions/bash 200 ")

    def test_metrics_want_the_admin_key(self):
        self.assertEqual(self.srv.req("GET", "/metrics", key=None).status, 401)
        r = self.srv.req("GET", "/metrics", key=self.key)
        self.assertEqual(r.status, 403, r)
        self.assertIn("--metrics-open", r.json["error"]["message"])
        opened = Cubicled(["--metrics-open"]).start()
        try:
            r = opened.req("GET", "/metrics", key=None)
            self.assertEqual(r.status, 200, r)
            self.assertIn("cubicle_computers", r.body.decode())
        finally:
            opened.stop()


if __name__ == "__main__":
    unittest.main()
