#!/usr/bin/env python3
"""Agent interfaces: one computer-use step (an action and the screenshot
the tool expects after it) in each dialect, with and without display
scaling, against the same two REST calls; and MCP tool calls (screenshot,
left_click) over /mcp. Real cubicled, a real container desktop, one
keep-alive connection, one run."""

import http.client
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "host"))
from common import stats, table, timed  # noqa: E402
from cubicled import Cubicled  # noqa: E402


def main():
    srv = Cubicled().start()
    try:
        _, key = srv.workspace("bench")
        cid = srv.computer(key, kind="desktop", isolation="container")["id"]
        conn = http.client.HTTPConnection("127.0.0.1", srv.port)
        auth = {"Authorization": "Bearer " + key, "Content-Type": "application/json",
                "Accept": "application/json, text/event-stream"}

        def post(path, body):
            conn.request("POST", path, body=json.dumps(body), headers=auth)
            r = conn.getresponse()
            data = r.read()
            assert r.status == 200, (r.status, data[:200])
            return data

        point = lambda i: (300 + (i * 37) % 600, 200 + (i * 53) % 300)
        base = "/v1/computers/%s" % cid

        def rest(i):
            x, y = point(i)
            post(base + "/actions/left_click", {"x": x, "y": y})
            post(base + "/actions/screenshot", {})

        def anthropic(query):
            def go(i):
                x, y = point(i)
                post(base + "/computer-use" + query,
                     {"action": "left_click", "coordinate": [x * 4 // 5, y * 4 // 5]})
            return go

        def openai(i):
            x, y = point(i)
            post(base + "/computer-use?display=1024x768",
                 {"type": "click", "button": "left", "x": x * 4 // 5, "y": y * 4 // 5})

        rpc_id = iter(range(1, 1 << 30))

        def mcp(name, args):
            def go(i):
                a = dict(args(i)) if callable(args) else dict(args)
                a["computer_id"] = cid
                out = json.loads(post("/mcp", {"jsonrpc": "2.0", "id": next(rpc_id),
                                               "method": "tools/call",
                                               "params": {"name": name, "arguments": a}}))
                assert not out["result"].get("isError"), out
            return go

        n = 100
        rows = []
        for label, fn in (
                ("REST: left_click + screenshot (2 requests)", rest),
                ("computer-use, Anthropic left_click (+ screenshot)", anthropic("")),
                ("computer-use, Anthropic, display 1024x768", anthropic("?display=1024x768")),
                ("computer-use, OpenAI click, display 1024x768", openai),
                ("MCP tools/call screenshot (1280x800 PNG)", mcp("screenshot", {})),
                ("MCP tools/call screenshot, max_width 1024", mcp("screenshot",
                                                                  {"max_width": 1024})),
                ("MCP tools/call left_click",
                 mcp("left_click", lambda i: dict(zip("xy", point(i)))))):
            med, p99 = stats(timed(fn, n))
            rows.append((label, "%.1f" % med, "%.1f" % p99))
        table("agent interfaces, %d samples each (ms)" % n, rows, ("call", "median", "p99"))
    finally:
        srv.stop()


if __name__ == "__main__":
    main()
