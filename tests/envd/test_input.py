"""Mouse and keyboard actions, checked by independent X clients.

Clicks and keys are verified by xrecorder (our own event-logging window),
typed Unicode by a real xterm writing to a file, cursor positions by
xdotool. envd's own view of the display is never the witness.
"""

import os
import tempfile
import time
import unittest

import harness
from recorder import Recorder, focus

desk = envd = None


def setUpModule():
    global desk, envd
    desk, envd = harness.start_desktop_and_envd()


def tearDownModule():
    harness.stop_desktop_and_envd(desk, envd)


def cursor():
    out = desk.run(["xdotool", "getmouselocation", "--shell"]).stdout
    vals = dict(line.split("=", 1) for line in out.split())
    return int(vals["X"]), int(vals["Y"])


class Mouse(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.rec = Recorder(desk, geometry="400x300+300+200")

    @classmethod
    def tearDownClass(cls):
        cls.rec.stop()

    def setUp(self):
        self.rec.clear()

    def presses(self, n, types=("press", "release")):
        return self.rec.wait_for(
            lambda evs: len([e for e in evs if e["type"] in types]) >= n,
            what="%d button events" % n)

    def test_click_arrives_at_point_with_button(self):
        cx, cy = self.rec.center()
        for action, button in (("left_click", 1), ("right_click", 3),
                               ("middle_click", 2)):
            self.rec.clear()
            x, y = cx - 17 + button, cy + 9 - button
            r = envd.ok(action, {"x": x, "y": y})
            self.assertEqual((r["x"], r["y"]), (x, y))
            evs = self.presses(2)
            bev = [e for e in evs if e["type"] in ("press", "release")]
            self.assertEqual([e["type"] for e in bev], ["press", "release"])
            for e in bev:
                self.assertEqual((e["x_root"], e["y_root"]), (x, y))
                self.assertEqual(e["button"], button)

    def test_click_with_button_param(self):
        cx, cy = self.rec.center()
        envd.ok("click", {"x": cx, "y": cy, "button": "right"})
        evs = self.presses(2)
        self.assertEqual({e["button"] for e in evs if e["type"] == "press"}, {3})

    def test_side_buttons(self):
        """back and forward are X buttons 8 and 9 (browsers' history buttons)."""
        cx, cy = self.rec.center()
        for name, button in (("back", 8), ("forward", 9)):
            self.rec.clear()
            envd.ok("click", {"x": cx, "y": cy, "button": name})
            evs = self.presses(2)
            self.assertEqual([(e["type"], e["button"]) for e in evs
                              if e["type"] in ("press", "release")],
                             [("press", button), ("release", button)])

    def test_double_and_triple_click(self):
        cx, cy = self.rec.center()
        for action, n, (x, y) in (("double_click", 2, (cx - 31, cy + 17)),
                                  ("triple_click", 3, (cx + 43, cy - 29))):
            self.rec.clear()
            envd.ok(action, {"x": x, "y": y})
            evs = self.presses(2 * n)
            presses = [e for e in evs if e["type"] == "press"]
            self.assertEqual(len(presses), n)
            # Every press and release lands where asked, with the left button.
            for e in evs:
                if e["type"] in ("press", "release"):
                    self.assertEqual((e["x_root"], e["y_root"], e["button"]), (x, y, 1))
            # Within the double-click interval of every toolkit (<= 400 ms).
            self.assertLess(presses[-1]["time"] - presses[0]["time"], 400)

    def test_click_without_coordinates_uses_cursor(self):
        cx, cy = self.rec.center()
        envd.ok("move_cursor", {"x": cx + 5, "y": cy + 6})
        self.assertEqual(cursor(), (cx + 5, cy + 6))
        envd.ok("left_click", {})
        evs = self.presses(2)
        self.assertEqual((evs[-1]["x_root"], evs[-1]["y_root"]), (cx + 5, cy + 6))

    def test_zero_is_a_real_coordinate(self):
        envd.ok("move_cursor", {"x": 0, "y": 0})
        self.assertEqual(cursor(), (0, 0))
        envd.ok("move_cursor", {"x": 17, "y": 0})
        self.assertEqual(cursor(), (17, 0))
        r = envd.ok("move_cursor", {"x": 0, "y": 23})
        self.assertEqual((r["x"], r["y"]), (0, 23))
        self.assertEqual(cursor(), (0, 23))

    def test_mouse_down_and_up(self):
        cx, cy = self.rec.center()
        envd.ok("mouse_down", {"x": cx, "y": cy})
        evs = self.presses(1)
        self.assertEqual([e["type"] for e in evs if e["type"] in ("press", "release")],
                         ["press"])
        envd.ok("mouse_up", {"x": cx + 10, "y": cy + 10})
        evs = self.presses(2)
        rel = [e for e in evs if e["type"] == "release"][0]
        self.assertEqual((rel["x_root"], rel["y_root"]), (cx + 10, cy + 10))

    def test_mouse_down_and_up_with_button(self):
        cx, cy = self.rec.center()
        for name, button in (("right", 3), ("middle", 2)):
            self.rec.clear()
            envd.ok("mouse_down", {"x": cx, "y": cy, "button": name})
            evs = self.presses(1)
            self.assertEqual([(e["type"], e["button"]) for e in evs
                              if e["type"] in ("press", "release")], [("press", button)])
            envd.ok("mouse_up", {"x": cx + 3, "y": cy + 4, "button": name})
            evs = self.presses(2)
            self.assertEqual([(e["type"], e["button"]) for e in evs
                              if e["type"] in ("press", "release")],
                             [("press", button), ("release", button)])
            rel = [e for e in evs if e["type"] == "release"][0]
            self.assertEqual((rel["x_root"], rel["y_root"]), (cx + 3, cy + 4))

    def test_drag_through_path(self):
        x0, y0 = self.rec.x + 20, self.rec.y + 20
        x1, y1 = self.rec.x + 300, self.rec.y + 200
        mid = [self.rec.x + 200, self.rec.y + 40]
        envd.ok("drag", {"from_x": x0, "from_y": y0, "to_x": x1, "to_y": y1,
                         "path": [mid], "duration_ms": 100})
        evs = self.presses(2)
        press = [e for e in evs if e["type"] == "press"][0]
        rel = [e for e in evs if e["type"] == "release"][0]
        self.assertEqual((press["x_root"], press["y_root"]), (x0, y0))
        self.assertEqual((rel["x_root"], rel["y_root"]), (x1, y1))
        motion = [(e["x_root"], e["y_root"]) for e in evs if e["type"] == "motion"
                  and e["state"] & 0x100]  # Button1Mask: moved while held
        self.assertIn(tuple(mid), motion)
        self.assertGreater(len(motion), 5)

    def test_scroll_directions_and_clicks(self):
        cx, cy = self.rec.center()
        for params, button, n in (({"direction": "up", "clicks": 3}, 4, 3),
                                  ({"direction": "down"}, 5, 1),
                                  ({"direction": "left", "clicks": 2}, 6, 2),
                                  ({"direction": "right", "clicks": 2}, 7, 2)):
            self.rec.clear()
            params.update({"x": cx, "y": cy})
            envd.ok("scroll", params)
            evs = self.presses(2 * n)
            self.assertEqual([e["button"] for e in evs if e["type"] == "press"],
                             [button] * n)
        self.rec.clear()
        envd.ok("scroll_up", {"clicks": 2, "x": cx, "y": cy})
        evs = self.presses(4)
        self.assertEqual([e["button"] for e in evs if e["type"] == "press"], [4, 4])

    def test_scroll_shortcuts(self):
        cx, cy = self.rec.center()
        for action, button, n in (("scroll_down", 5, 2), ("scroll_left", 6, 1),
                                  ("scroll_right", 7, 3)):
            self.rec.clear()
            x, y = cx + button, cy - button
            r = envd.ok(action, {"clicks": n, "x": x, "y": y})
            self.assertEqual((r["x"], r["y"]), (x, y))
            evs = self.presses(2 * n)
            bev = [e for e in evs if e["type"] in ("press", "release")]
            self.assertEqual([(e["type"], e["button"]) for e in bev],
                             [("press", button), ("release", button)] * n)
            for e in bev:
                self.assertEqual((e["x_root"], e["y_root"]), (x, y))


class Edges(unittest.TestCase):
    """x = 0 and y = 0 are real coordinates: a frameless window at the
    screen's corner (override-redirect, so the window manager puts no frame
    there) witnesses clicks on the first row and column."""

    @classmethod
    def setUpClass(cls):
        cls.rec = Recorder(desk, geometry="200x150+0+0", color="aa3366",
                           title="edges", override_redirect=True)

    @classmethod
    def tearDownClass(cls):
        cls.rec.stop()

    def test_window_is_at_the_corner(self):
        self.assertEqual((self.rec.x, self.rec.y), (0, 0))

    def test_clicks_at_zero_arrive_at_zero(self):
        for x, y, button in ((0, 40, 1), (60, 0, 3), (0, 0, 2)):
            self.rec.clear()
            envd.ok("click", {"x": x, "y": y, "button": {1: "left", 2: "middle",
                                                         3: "right"}[button]})
            evs = self.rec.wait_for(
                lambda evs: len([e for e in evs if e["type"] in ("press", "release")]) >= 2,
                what="a click at %d,%d" % (x, y))
            bev = [e for e in evs if e["type"] in ("press", "release")]
            self.assertEqual([(e["type"], e["x_root"], e["y_root"], e["button"]) for e in bev],
                             [("press", x, y, button), ("release", x, y, button)])
            # The window's own coordinates too: its origin is the screen's.
            self.assertEqual((bev[0]["x"], bev[0]["y"]), (x, y))


class Keyboard(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.rec = Recorder(desk, geometry="300x200+700+450", title="keys")

    @classmethod
    def tearDownClass(cls):
        cls.rec.stop()

    def setUp(self):
        focus(desk, self.rec.window)
        self.rec.clear()

    def keys(self, n):
        evs = self.rec.wait_for(
            lambda evs: len([e for e in evs if e["type"] == "key_press"]) >= n,
            what="%d key presses" % n)
        return [e for e in evs if e["type"] == "key_press"]

    def test_combination_has_its_modifiers(self):
        envd.ok("key", {"key": "ctrl+shift+t"})
        presses = self.keys(3)
        self.assertEqual([p["name"] for p in presses[:2]], ["Control_L", "Shift_L"])
        self.assertEqual(presses[2]["name"], "T")
        self.assertEqual(presses[2]["state"] & 0x5, 0x5)  # ShiftMask | ControlMask
        rel = self.rec.wait_for(lambda evs: len(
            [e for e in evs if e["type"] == "key_release"]) >= 3, what="releases")
        self.assertEqual(len([e for e in rel if e["type"] == "key_release"]), 3)

    def test_hotkey_and_aliases(self):
        envd.ok("hotkey", {"keys": ["CTRL", "alt", "Delete"]})
        presses = self.keys(3)
        self.assertEqual([p["name"] for p in presses],
                         ["Control_L", "Alt_L", "Delete"])
        self.assertEqual(presses[2]["state"] & 0xC, 0xC)  # ControlMask | Mod1Mask

    def test_key_names_case_insensitive(self):
        names = {"enter": "Return", "ESC": "Escape", "pagedown": "Next",
                 "Page_Up": "Prior", "page_up": "Prior", "BackSpace": "BackSpace",
                 "tab": "Tab", "space": "space", "left": "Left", "F5": "F5",
                 "f13": "F13", "home": "Home", "del": "Delete"}
        for name, expect in names.items():
            self.rec.clear()
            envd.ok("key", {"key": name})
            self.assertEqual(self.keys(1)[0]["name"], expect, name)

    def test_key_down_holds_until_key_up(self):
        envd.ok("key_down", {"key": "shift"})
        envd.ok("type", {"text": "a"})
        presses = self.keys(2)
        self.assertEqual(presses[-1]["name"], "A")
        envd.ok("key_up", {"key": "shift"})
        self.rec.clear()
        envd.ok("type", {"text": "a"})
        self.assertEqual(self.keys(1)[0]["name"], "a")

    def test_plus_key(self):
        # "plus" is Shift+equal on a US map, so Shift may come between: wait
        # for the plus itself, then check Control was held for it.
        envd.ok("key", {"key": "ctrl++"})
        evs = self.rec.wait_for(lambda evs: any(
            e["type"] == "key_press" and e["name"] == "plus" for e in evs),
            what="a plus key press")
        presses = [e for e in evs if e["type"] == "key_press"]
        self.assertEqual(presses[0]["name"], "Control_L")
        self.assertEqual(presses[-1]["name"], "plus")
        self.assertTrue(presses[-1]["state"] & 0x4)  # ControlMask


class Typing(unittest.TestCase):
    def type_into_xterm(self, text, delay_ms=0):
        with tempfile.TemporaryDirectory() as tmp:
            out = os.path.join(tmp, "typed")
            title = "typing-%d" % os.getpid()
            p = desk.spawn(["xterm", "-T", title, "-geometry", "80x10+50+50",
                            "-e", "sh", "-c", "stty -icanon -echo; exec cat > '%s'" % out])
            try:
                wid = harness.wait_until(
                    lambda: desk.run(["xdotool", "search", "--name", title]).stdout.split(),
                    15, "xterm window")[0]
                # Wait until cat runs (the file exists), then focus it.
                harness.wait_until(lambda: os.path.exists(out), 15, "cat to start")
                focus(desk, int(wid))
                envd.ok("type", {"text": text, "delay_ms": delay_ms})
                want = text.replace("\r\n", "\n").replace("\r", "\n").encode()
                def typed():
                    with open(out, "rb") as f:
                        data = f.read()
                    return data if len(data) >= len(want) else None
                got = harness.wait_until(typed, 15, "typed text in the file")
                return got, want
            finally:
                p.kill()
                p.wait()

    def test_unicode_text_arrives_exactly(self):
        got, want = self.type_into_xterm("-n héllo — 世界 🙂 ÀÉÎõü ß €\n")
        self.assertEqual(got.decode(), want.decode())

    def test_many_distinct_characters_and_delay(self):
        # More distinct characters than spare keycodes: forces rebinding.
        text = "".join(chr(c) for c in range(0x4e00, 0x4e00 + 90)) + "\n"
        got, want = self.type_into_xterm(text)
        self.assertEqual(got.decode(), want.decode())
        got, want = self.type_into_xterm("Ab-é!\n", delay_ms=5)
        self.assertEqual(got.decode(), want.decode())


class BadInput(unittest.TestCase):
    def expect(self, name, params, status, param=None):
        r = envd.action(name, params)
        self.assertEqual(r.status, status, r)
        err = r.json["error"]
        self.assertTrue(err["message"])
        if param:
            self.assertEqual(err.get("param"), param, err)
        return err

    def test_off_screen(self):
        self.expect("left_click", {"x": 5000, "y": 10}, 400, "x")
        self.expect("left_click", {"x": 10, "y": -1}, 400, "y")
        self.expect("drag", {"from_x": 0, "from_y": 0, "to_x": 1280, "to_y": 0}, 400, "to_x")

    def test_half_a_point(self):
        self.expect("left_click", {"x": 10}, 400, "y")
        self.expect("move_cursor", {}, 400, "x")

    def test_wrong_types(self):
        self.expect("left_click", {"x": "10", "y": 10}, 400, "x")
        self.expect("type", {"text": 5}, 400, "text")
        self.expect("hotkey", {"keys": "ctrl+c"}, 400, "keys")
        self.expect("scroll", {"direction": "sideways"}, 400, "direction")
        self.expect("click", {"button": "fourth"}, 400, "button")

    def test_unknown_key_and_parameter(self):
        err = self.expect("key", {"key": "ctrl+nosuchkey"}, 400, "key")
        self.assertIn("nosuchkey", err["message"])
        self.expect("key", {"key": "ctrl+"}, 400, "key")
        self.expect("left_click", {"x": 1, "y": 1, "buton": "left"}, 400, "buton")
        self.expect("type", {}, 400, "text")

    def test_unknown_action_is_404(self):
        self.expect("teleport", {}, 404)

    def test_malformed_json(self):
        r = envd.request("POST", "/v1/actions/left_click", body=b'{"x": 1,',
                         headers={"Content-Type": "application/json"})
        self.assertEqual(r.status, 400)
        self.assertIn("JSON", r.json["error"]["message"])
        r = envd.request("POST", "/v1/actions/left_click", body=b'[1, 2]')
        self.assertEqual(r.status, 400)

    def test_token_required(self):
        r = envd.action("left_click", {"x": 1, "y": 1}, token=None)
        self.assertEqual(r.status, 401)
        r = envd.action("left_click", {"x": 1, "y": 1}, token="x" * 32)
        self.assertEqual(r.status, 401)
        r = envd.request("GET", "/health", token=envd.token[:-1])
        self.assertEqual(r.status, 401)
        self.assertEqual(envd.request("GET", "/health").status, 200)

    def test_oversized_body(self):
        small = harness.Envd(desk, args=["--max-body", "1000"]).start()
        try:
            r = small.action("type", {"text": "x" * 5000})
            self.assertEqual(r.status, 413)
            self.assertEqual(r.json["error"]["code"], "too_large")
            # The server is still fine afterwards.
            self.assertEqual(small.request("GET", "/health").status, 200)
        finally:
            small.stop()


class Headless(unittest.TestCase):
    def test_display_actions_are_409_without_display(self):
        h = harness.Envd(None).start()
        try:
            r = h.action("left_click", {"x": 1, "y": 1})
            self.assertEqual(r.status, 409)
            self.assertIn("display", r.json["error"]["message"])
            health = h.request("GET", "/health").json
            self.assertFalse(health["display"])
            self.assertNotIn("left_click", health["capabilities"])
        finally:
            h.stop()


if __name__ == "__main__":
    unittest.main()
