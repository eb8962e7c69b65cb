"""The computer-use tool versions of POST /v1/computers/{id}/computer-use on a
real desktop computer: Anthropic's computer_toolset_20260801 and its turns
of several tool_use blocks, computer_20241022..computer_20251124, OpenAI's
computer tool with its actions[] batches and computer_use_preview; the same
through MCP and the Python SDK.

The recorded exchanges in computer_use/*.json are replayed: each is a
request as the vendor's model sends it, the exact answer its loop must get
back ("$png WxH" stands for a base64 PNG of that size, "$text" for any
message), the headers, and every button and key press the X server must
deliver, in order, and nothing else: xev, an X client in the computer,
witnesses them (xevlog.py), up to a sentinel key sent afterwards through
the action API, so "nothing else" is read after everything has arrived."""

import base64
import glob
import json
import os
import subprocess
import sys
import unittest

from cubicled import Cubicled
from xevlog import Png, Xev, start_xev

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "sdk", "python"))
import cubicle  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
FIXTURES = sorted(glob.glob(os.path.join(HERE, "computer_use", "*.json")))
NOT_EXECUTED = "Not executed: an earlier computer action in this turn failed."

srv = None
key = cid = None


def setUpModule():
    global srv, key, cid
    srv = Cubicled().start()
    _, key = srv.workspace("cutools")
    cid = srv.computer(key, kind="desktop", isolation="container")["id"]
    start_xev(act, bash)


def tearDownModule():
    srv.stop()


def act(action, params=None):
    return srv.act(cid, action, params, key=key)


def bash(cmd):
    r = act("bash", {"command": cmd})
    assert r["exit_code"] == 0, r
    return r["stdout"]


def cursor():
    p = act("get_cursor_position")
    return p["x"], p["y"]


def post(body, query=""):
    return srv.req("POST", "/v1/computers/%s/computer-use%s" % (cid, query), body, key=key)


def cu(body, query="", status=200):
    r = post(body, query)
    if r.status != status:
        raise AssertionError("computer-use %s -> %d %s" % (json.dumps(body)[:300], r.status,
                                                           r.body[:400]))
    return r.json


def bad(test, body, param, query=""):
    """A 400 naming param, with a message."""
    e = cu(body, query, status=400)["error"]
    test.assertEqual(e.get("param"), param, e)
    test.assertTrue(e["message"])
    return e


def match(test, want, got, where="answer"):
    """got is want, but for its placeholders: "$png WxH" a base64 PNG of that
    size (after a data: URL's prefix too), "$text" any non-empty string."""
    if isinstance(want, str) and "$png " in want:
        prefix, size = want.split("$png ")
        test.assertIsInstance(got, str, where)
        test.assertTrue(got.startswith(prefix), where)
        png = Png(base64.b64decode(got[len(prefix):], validate=True))
        test.assertEqual("%dx%d" % (png.width, png.height), size, where)
    elif want == "$text":
        test.assertIsInstance(got, str, where)
        test.assertTrue(got, where)
    elif isinstance(want, dict):
        test.assertIsInstance(got, dict, where)
        test.assertEqual(sorted(got), sorted(want), where)
        for k in want:
            match(test, want[k], got[k], "%s.%s" % (where, k))
    elif isinstance(want, list):
        test.assertIsInstance(got, list, where)
        test.assertEqual(len(got), len(want), where)
        for i, (w, g) in enumerate(zip(want, got)):
            match(test, w, g, "%s[%d]" % (where, i))
    else:
        test.assertEqual(got, want, where)


def presses(evs, want):
    """The button and key presses xev saw, shaped like a fixture's events
    (a key's state only where the fixture gives one)."""
    out = []
    for i, e in enumerate(ev for ev in evs if ev["type"] in ("ButtonPress", "KeyPress")):
        if e["type"] == "ButtonPress":
            out.append(["button", e["button"], list(e["root"]), e["state"]])
        else:
            w = want[i] if i < len(want) else []
            out.append(["key", e["keysym"]] + ([e["state"]] if len(w) == 3 else []))
    return out


class Replay(unittest.TestCase):
    """Each recorded exchange, witnessed."""

    def replay(self, path):
        with open(path) as f:
            fx = json.load(f)
        xev = Xev(bash)
        xev.mark()
        r = post(fx["request"], fx.get("query", ""))
        self.assertEqual(r.status, 200, r.body[:400])
        match(self, fx["answer"], r.json)
        for h in ("X-Computer-Use-Ran", "X-Computer-Use-Failed", "X-Computer-Use-Error"):
            if h in fx.get("headers", {}):
                match(self, fx["headers"][h], r.headers.get(h.lower()), h)
            else:
                self.assertIsNone(r.headers.get(h.lower()), h)
        self.assertEqual(presses(xev.until_sentinel(act), fx["events"]), fx["events"])


class Shapes(unittest.TestCase):
    def test_fixtures_follow_the_published_schemas(self):
        """The recorded requests and answers are what docs/openapi.json's
        ComputerUseRequest and ComputerUseAnswer describe (what a generated
        client, the TypeScript SDK's included, is built from)."""
        p = subprocess.run(["node", os.path.join(HERE, "validate_computer_use.mjs")] + FIXTURES,
                           capture_output=True, text=True, timeout=60)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        self.assertEqual(p.stdout.count(": valid\n"), len(FIXTURES), p.stdout)


for _path in FIXTURES:
    def _test(self, path=_path):
        self.replay(path)
    _name = os.path.splitext(os.path.basename(_path))[0].replace("-", "_")
    setattr(Replay, "test_" + _name, _test)


class Versions(unittest.TestCase):
    """What each version has and has not; what the request must say."""

    def test_unknown_tool_is_400_naming_it(self):
        e = bad(self, {"tool": "computer_20270101", "action": "screenshot"}, "tool")
        self.assertIn("computer_toolset_20260801", e["message"])
        bad(self, {"action": "screenshot"}, "tool", "?tool=computer_use")
        bad(self, {"tool": 7, "action": "screenshot"}, "tool")
        bad(self, {"tool": "computer", "dialect": "anthropic", "action": "screenshot"}, "tool")

    def test_each_version_has_its_actions(self):
        zoom = {"action": "zoom", "region": [0, 0, 10, 10]}
        bad(self, dict(zoom, tool="computer_20250124"), "action")
        self.assertEqual(cu(dict(zoom, tool="computer_20251124"))["type"], "tool_result")
        self.assertEqual(cu(zoom)["type"], "tool_result")  # the default: computer_20251124
        e = bad(self, {"tool": "computer_20241022", "action": "triple_click"}, "action")
        self.assertIn("computer_20241022", e["message"])
        bad(self, {"tool": "computer_20241022", "action": "left_click", "coordinate": [5, 5]},
            "coordinate")
        bad(self, {"tool": "computer_20251124", "action": "key", "text": "a", "repeat": 2},
            "repeat")

    def test_toolset_calls_are_tool_use_blocks(self):
        bad(self, {"tool": "computer_toolset_20260801", "action": "screenshot"}, "action")
        bad(self, {"type": "tool_use", "id": "t", "name": "fly", "toolset_name": "computer",
                   "input": {}}, "name")
        bad(self, {"type": "tool_use", "id": "t", "name": "navigate", "toolset_name": "browser",
                   "input": {}}, "toolset_name")
        bad(self, {"type": "tool_use", "id": "t", "name": "left_click",
                   "toolset_name": "computer", "input": {"coordinate": [1, 1]}}, "tool",
            "?tool=computer_20251124")
        bad(self, {"type": "tool_use", "id": "t", "name": "computer",
                   "input": {"action": "screenshot"}}, "toolset_name",
            "?tool=computer_toolset_20260801")
        # A member's parameters are the member's: no `action`, start_coordinate required.
        bad(self, {"type": "tool_use", "id": "t", "name": "screenshot",
                   "toolset_name": "computer", "input": {"action": "screenshot"}}, "action")
        bad(self, {"type": "tool_use", "id": "t", "name": "left_click_drag",
                   "toolset_name": "computer", "input": {"coordinate": [9, 9]}},
            "start_coordinate")
        bad(self, {"type": "tool_use", "id": "t", "name": "left_mouse_down",
                   "toolset_name": "computer", "input": {"coordinate": [9, 9]}}, "coordinate")

    def test_turn_shapes(self):
        use = {"type": "tool_use", "id": "t", "name": "screenshot", "toolset_name": "computer",
               "input": {}}
        bad(self, {"content": [{"type": "text", "text": "nothing to do"}]}, "content")
        bad(self, {"content": [use] * 33}, "content")
        bad(self, {"content": [use, {"type": "tool_use", "id": "u", "name": "computer",
                                     "input": {"action": "screenshot"}}]}, "content")
        bad(self, {"content": [dict(use, id=None)]}, "content")
        bad(self, {"content": ["text"]}, "content")
        bad(self, {"role": "user", "content": [use]}, "role")
        bad(self, {"content": [use], "extra": 1}, "extra")
        bad(self, {"content": [use]}, "dialect", "?dialect=openai")
        # Other tools' blocks are the loop's: left out of the answer.
        out = cu({"type": "message", "model": "any", "content": [
            {"type": "tool_use", "id": "b", "name": "bash", "input": {"command": "ls"}},
            use, {"type": "tool_use", "id": "n", "name": "navigate", "toolset_name": "browser",
                  "input": {}}]})
        self.assertEqual([r["tool_use_id"] for r in out["content"]], ["t"])

    def test_openai_shapes(self):
        call = {"type": "computer_call", "call_id": "c"}
        bad(self, dict(call, actions=[]), "actions")
        bad(self, dict(call, actions=[{"type": "wait"}] * 33), "actions")
        bad(self, dict(call, actions=[{"type": "screenshot"}]), "actions",
            "?tool=computer_use_preview")
        bad(self, dict(call, action={"type": "screenshot"}, actions=[{"type": "screenshot"}]),
            "actions")
        bad(self, call, "action")

    def test_failure_of_the_input_midway(self):
        """A call the model got wrong (no coordinate, a bad key count) fails
        where it stands, as a refused call: what came before has run."""
        x0, y0 = cursor()
        xy = (x0 + 7, y0) if x0 < 700 else (x0 - 7, y0)
        r = post({"content": [
            {"type": "tool_use", "id": "a", "name": "mouse_move", "toolset_name": "computer",
             "input": {"coordinate": list(xy)}},
            {"type": "tool_use", "id": "b", "name": "mouse_move", "toolset_name": "computer",
             "input": {}},
            {"type": "tool_use", "id": "c", "name": "mouse_move", "toolset_name": "computer",
             "input": {"coordinate": [x0, y0]}}]})
        self.assertEqual(r.status, 200, r.body)
        a, b, c = r.json["content"]
        self.assertNotIn("is_error", a)
        self.assertTrue(b["is_error"])
        self.assertIn("coordinate", b["content"][0]["text"])
        self.assertEqual(c["content"][0]["text"], NOT_EXECUTED)
        self.assertEqual(cursor(), xy)  # the first ran, the third did not
        self.assertEqual(r.headers.get("x-computer-use-failed"), "1")
        r = post({"type": "computer_call", "call_id": "k", "actions": [
            {"type": "move", "x": x0, "y": y0}, {"type": "keypress", "keys": []},
            {"type": "move", "x": xy[0], "y": xy[1]}]})
        self.assertEqual((r.json["status"], r.headers.get("x-computer-use-ran")),
                         ("incomplete", "1"))
        self.assertIn("keys", r.headers.get("x-computer-use-error"))
        self.assertEqual(cursor(), (x0, y0))

    def test_waits_of_a_request_add_up_to_100_s(self):
        out = cu({"content": [
            {"type": "tool_use", "id": "a", "name": "wait", "toolset_name": "computer",
             "input": {"duration": 0.1}},
            {"type": "tool_use", "id": "b", "name": "wait", "toolset_name": "computer",
             "input": {"duration": 99.95}}]})
        self.assertEqual(out["content"][0]["content"], [{"type": "text", "text": "Waited 0.1s."}])
        self.assertTrue(out["content"][1]["is_error"])
        self.assertIn("100 s", out["content"][1]["content"][0]["text"])

    def test_key_repeat_and_hold(self):
        xev = Xev(bash)
        xev.mark()
        out = cu({"content": [
            {"type": "tool_use", "id": "a", "name": "key", "toolset_name": "computer",
             "input": {"text": "Tab", "repeat": 3}},
            {"type": "tool_use", "id": "b", "name": "hold_key", "toolset_name": "computer",
             "input": {"text": "shift", "duration": 0.2}},
            {"type": "tool_use", "id": "c", "name": "scroll", "toolset_name": "computer",
             "input": {"scroll_direction": "up", "scroll_amount": 2}}]})
        self.assertEqual([r["content"][0]["text"] for r in out["content"]],
                         ["Pressed Tab.", "Held shift for 0.2s.", "Scrolled up."])
        evs = [e for e in xev.until_sentinel(act) if e["type"] in ("ButtonPress", "KeyPress")]
        self.assertEqual([e.get("keysym", e.get("button")) for e in evs],
                         ["Tab", "Tab", "Tab", "Shift_L", 4, 4])


class Batches(unittest.TestCase):
    """Coordinate scaling is the same for every call of a batch, and exact."""

    def test_openai_batch_scaled(self):
        w, h = 1000, 625  # 1.28 both ways: no integer factor
        points = [(0, 0), (w - 1, h - 1), (517, 389), (123, 456), (w // 3, h // 7)]
        for ax, ay in points:
            cu({"type": "computer_call", "call_id": "s", "actions": [
                {"type": "move", "x": 1, "y": 1}, {"type": "move", "x": ax, "y": ay}]},
               "?display=%dx%d" % (w, h))
            self.assertEqual(cursor(), ((2 * ax + 1) * 1280 // (2 * w),
                                        (2 * ay + 1) * 800 // (2 * h)))
        out = cu({"content": [{"type": "tool_use", "id": str(i), "name": "mouse_move",
                               "toolset_name": "computer", "input": {"coordinate": [x, y]}}
                              for i, (x, y) in enumerate(points)] + [
            {"type": "tool_use", "id": "c", "name": "cursor_position", "toolset_name": "computer",
             "input": {}}], "display": {"width": w, "height": h}})
        self.assertEqual(out["content"][-1]["content"][0]["text"], "X=%d,Y=%d" % points[-1])
        r = post({"type": "computer_call", "call_id": "o", "actions": [
            {"type": "move", "x": 10, "y": 10}, {"type": "move", "x": w, "y": 5}]},
            "?display=%dx%d" % (w, h))
        self.assertEqual((r.json["status"], r.headers.get("x-computer-use-failed")),
                         ("incomplete", "1"))
        # The first move only: (2 * 10 + 1) * 1280 // 2000, (2 * 10 + 1) * 800 // 1250.
        self.assertEqual(cursor(), (13, 13))


class Clients(unittest.TestCase):
    """The same through MCP and the Python SDK."""

    TURN = {"content": [
        {"type": "tool_use", "id": "m1", "name": "cursor_position", "toolset_name": "computer",
         "input": {}},
        {"type": "tool_use", "id": "m2", "name": "screenshot", "toolset_name": "computer",
         "input": {}}]}

    def mcp(self, method, params, rid=1):
        r = srv.req("POST", "/mcp", {"jsonrpc": "2.0", "id": rid, "method": method,
                                     "params": params}, key=key,
                    headers={"Accept": "application/json, text/event-stream"})
        self.assertEqual(r.status, 200, r.body[:300])
        return r.json

    def test_mcp(self):
        tools = self.mcp("tools/list", {})["result"]["tools"]
        tool = next(t for t in tools if t["name"] == "computer_use")
        self.assertIn("computer_toolset_20260801",
                      tool["inputSchema"]["properties"]["tool"]["enum"])
        res = self.mcp("tools/call", {"name": "computer_use", "arguments": {
            "computer_id": cid, "call": self.TURN, "display": {"width": 1024, "height": 640}}})
        res = res["result"]
        self.assertNotIn("isError", res)
        x, y = cursor()
        want = {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "m1", "toolset_name": "computer", "content": [
                {"type": "text", "text": "X=%d,Y=%d" % ((2 * x + 1) * 1024 // 2560,
                                                         (2 * y + 1) * 640 // 1600)}]},
            {"type": "tool_result", "tool_use_id": "m2", "toolset_name": "computer", "content": [
                {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                             "data": "$png 1024x640"}}]}]}
        match(self, want, res["structuredContent"])
        self.assertEqual([c["type"] for c in res["content"]], ["text", "image"])
        self.assertEqual(res["content"][1]["data"],
                         res["structuredContent"]["content"][1]["content"][0]["source"]["data"])
        res = self.mcp("tools/call", {"name": "computer_use", "arguments": {
            "computer_id": cid, "call": {"action": "screenshot"}, "tool": "computer_20990101"}})
        self.assertTrue(res.get("result", {}).get("isError") or "error" in res, res)

    def test_another_workspace_is_refused(self):
        """A batch through another workspace's key reaches nothing: 404 on
        REST, a not_found tool error on MCP, and no press on the desktop."""
        _, other = srv.workspace("cutools-other")
        xev = Xev(bash)
        xev.mark()
        turn = {"content": [{"type": "tool_use", "id": "x", "name": "left_click",
                             "toolset_name": "computer", "input": {"coordinate": [550, 400]}}]}
        r = srv.req("POST", "/v1/computers/%s/computer-use" % cid, turn, key=other)
        self.assertEqual(r.status, 404, r.body)
        r = srv.req("POST", "/mcp", {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                                     "params": {"name": "computer_use", "arguments": {
                                         "computer_id": cid, "call": turn}}},
                    key=other, headers={"Accept": "application/json, text/event-stream"})
        self.assertTrue(r.json["result"]["isError"])
        self.assertIn("not_found", r.json["result"]["content"][0]["text"])
        self.assertEqual([e for e in xev.until_sentinel(act) if e["type"] == "ButtonPress"], [])

    def test_python_sdk(self):
        client = cubicle.Client("http://127.0.0.1:%d" % srv.port, key)
        c = cubicle.Computer.get(cid, client=client)
        out = c.computer_use(self.TURN, tool="computer_toolset_20260801", display=(640, 400))
        self.assertEqual((out.ran, out.failed), (2, None))
        self.assertEqual(out["content"][1]["content"][0]["type"], "image")
        out = c.computer_use({"type": "computer_call", "call_id": "p", "actions": [
            {"type": "keypress", "keys": ["NOSUCHKEY"]}]})
        self.assertEqual((out["status"], out.ran, out.failed), ("incomplete", 0, 0))
        self.assertIn("NOSUCHKEY", out.error)
        with self.assertRaises(cubicle.InvalidParameter) as cm:
            c.computer_use({"action": "screenshot"}, tool="computer_1999")
        self.assertEqual(cm.exception.param, "tool")
        client.close()


if __name__ == "__main__":
    unittest.main()
