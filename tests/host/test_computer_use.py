"""POST /v1/computers/{id}/computer-use on a real desktop computer: every
action of Anthropic's computer tool and of OpenAI's computer-use actions,
and the display scaling round trip at factors that are not integers.

The witnesses are independent of the endpoint: xev, an X client running in
the computer, logs each button, key, modifier state and where it happened;
cubicled's action API says where the cursor is and takes reference
screenshots."""

import unittest

from cubicled import Cubicled
from xevlog import BUTTON1, CONTROL, SHIFT, Png, Xev as XevLog, png_of, presses, start_xev, typed

srv = None
key = cid = None


def setUpModule():
    global srv, key, cid, XEV
    srv = Cubicled().start()
    _, key = srv.workspace("cu")
    cid = srv.computer(key, kind="desktop", isolation="container")["id"]
    XEV = start_xev(act, bash)


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


def inside(dx=0, dy=0):
    """A point in the xev window, dx, dy from its centre."""
    return XEV["x"] + XEV["width"] // 2 + dx, XEV["y"] + XEV["height"] // 2 + dy


def cu(body, query="", status=200):
    r = srv.req("POST", "/v1/computers/%s/computer-use%s" % (cid, query), body, key=key)
    if r.status != status:
        raise AssertionError("computer-use %s -> %d %s" % (body, r.status, r.body[:400]))
    return r.json


def Xev():
    return XevLog(bash)


class Base(unittest.TestCase):
    def setUp(self):
        self.xev = Xev()
        self.xev.mark()


class Anthropic(Base):
    def test_screenshot(self):
        out = cu({"action": "screenshot"})
        self.assertEqual(out["type"], "tool_result")
        self.assertEqual(len(out["content"]), 1)
        png = png_of(out)
        self.assertEqual((png.width, png.height), (1280, 800))

    def test_mouse_move_and_cursor_position(self):
        x, y = inside(-50, 20)
        out = cu({"action": "mouse_move", "coordinate": [x, y]})
        self.assertEqual(cursor(), (x, y))
        png_of(out)  # the reference answers with a screenshot
        self.xev.wait(lambda evs: any(e["type"] == "MotionNotify" and e["root"] == (x, y)
                                      for e in evs), "the motion")
        out = cu({"action": "cursor_position"})
        self.assertEqual(out["content"], [{"type": "text", "text": "X=%d,Y=%d" % (x, y)}])

    def test_clicks(self):
        for i, (action, button, n) in enumerate((
                ("left_click", 1, 1), ("right_click", 3, 1), ("middle_click", 2, 1),
                ("double_click", 1, 2), ("triple_click", 1, 3))):
            self.xev.mark()
            x, y = inside(10 * i, -10 * i)
            png_of(cu({"action": action, "coordinate": [x, y]}))
            self.assertEqual(presses(self.xev.buttons(n)), [(button, (x, y), 0)] * n, action)

    def test_click_where_the_cursor_is(self):
        x, y = inside(33, 44)
        act("move_cursor", {"x": x, "y": y})
        self.xev.mark()
        cu({"action": "left_click"})
        self.assertEqual(presses(self.xev.buttons(1)), [(1, (x, y), 0)])

    def test_click_with_modifiers_held(self):
        x, y = inside()
        cu({"action": "left_click", "coordinate": [x, y], "text": "shift"})
        self.assertEqual(presses(self.xev.buttons(1)), [(1, (x, y), SHIFT)])
        keys = self.xev.keys("Shift_L")
        self.assertEqual(keys[-1][:2], ("KeyRelease", "Shift_L"))
        self.xev.mark()
        cu({"action": "right_click", "coordinate": [x, y], "text": "ctrl+shift"})
        self.assertEqual(presses(self.xev.buttons(1)), [(3, (x, y), SHIFT | CONTROL)])

    def test_left_click_drag(self):
        (x0, y0), (x1, y1) = inside(-100, -80), inside(90, 70)
        cu({"action": "left_click_drag", "start_coordinate": [x0, y0], "coordinate": [x1, y1]})
        evs = self.xev.buttons(1)
        self.assertEqual([(t, b, r) for t, b, r, _ in evs],
                         [("ButtonPress", 1, (x0, y0)), ("ButtonRelease", 1, (x1, y1))])
        # Without start_coordinate it starts where the cursor is.
        act("move_cursor", {"x": x1, "y": y0})
        self.xev.mark()
        cu({"action": "left_click_drag", "coordinate": [x0, y1]})
        evs = self.xev.buttons(1)
        self.assertEqual([(t, r) for t, _, r, _ in evs],
                         [("ButtonPress", (x1, y0)), ("ButtonRelease", (x0, y1))])

    def test_mouse_down_and_up(self):
        x, y = inside(-20, -20)
        act("move_cursor", {"x": x, "y": y})
        cu({"action": "left_mouse_down"})
        self.xev.wait(lambda evs: any(e["type"] == "ButtonPress" for e in evs), "the press")
        x2, y2 = inside(40, 30)
        cu({"action": "mouse_move", "coordinate": [x2, y2]})
        cu({"action": "left_mouse_up"})
        evs = self.xev.buttons(1)
        self.assertEqual([(t, b, r) for t, b, r, _ in evs],
                         [("ButtonPress", 1, (x, y)), ("ButtonRelease", 1, (x2, y2))])
        self.assertEqual(evs[1][3] & BUTTON1, BUTTON1)  # still held when released

    def test_scroll(self):
        x, y = inside(5, 5)
        for direction, button, n in (("down", 5, 3), ("up", 4, 1), ("left", 6, 2),
                                     ("right", 7, 1)):
            self.xev.mark()
            png_of(cu({"action": "scroll", "coordinate": [x, y], "scroll_direction": direction,
                       "scroll_amount": n}))
            self.assertEqual(presses(self.xev.buttons(n)), [(button, (x, y), 0)] * n, direction)
        self.xev.mark()
        cu({"action": "scroll", "scroll_direction": "down", "scroll_amount": 1, "text": "ctrl"})
        self.assertEqual(presses(self.xev.buttons(1)), [(5, (x, y), CONTROL)])

    def test_key(self):
        cu({"action": "key", "text": "ctrl+a"})
        keys = self.xev.keys("Control_L")
        self.assertIn(("KeyPress", "a", CONTROL), keys)
        self.xev.mark()
        cu({"action": "key", "text": "Return"})
        self.assertEqual(typed(self.xev.keys("Return")), ["Return"])
        self.xev.mark()
        cu({"action": "key", "text": "shift+Tab BackSpace Page_Down"})  # xdotool: one by one
        self.assertEqual(typed(self.xev.keys("Next")), ["Shift_L", "ISO_Left_Tab", "BackSpace",
                                                        "Next"])

    def test_type(self):
        png_of(cu({"action": "type", "text": "Hi 5!"}))
        self.assertEqual([k for k in typed(self.xev.keys("exclam")) if k != "Shift_L"],
                         ["H", "i", "space", "5", "exclam"])

    def test_hold_key(self):
        cu({"action": "hold_key", "text": "shift", "duration": 0.2})
        keys = self.xev.keys("Shift_L")
        self.assertEqual([k[:2] for k in keys], [("KeyPress", "Shift_L"), ("KeyRelease", "Shift_L")])

    def test_wait(self):
        out = cu({"action": "wait", "duration": 0.1})
        self.assertEqual(png_of(out).width, 1280)

    def test_zoom(self):
        """A region at the screen's own resolution: the same pixels as a
        screenshot of that region."""
        x0, y0 = XEV["x"] - 40, XEV["y"] - 30
        out = cu({"action": "zoom", "region": [x0, y0, x0 + 120, y0 + 90]})
        png = png_of(out)
        self.assertEqual((png.width, png.height), (120, 90))
        ref = Png(srv.req("POST", "/v1/computers/%s/actions/screenshot" % cid,
                          {"x": x0, "y": y0, "width": 120, "height": 90}, key=key).body)
        self.assertEqual(png.rows, ref.rows)

    def test_screenshot_delay(self):
        """The screenshot after the action may wait for the screen to settle."""
        x, y = inside(-30, 30)
        png_of(cu({"action": "left_click", "coordinate": [x, y], "screenshot_delay_ms": 50}))
        self.assertEqual(presses(self.xev.buttons(1)), [(1, (x, y), 0)])
        self.xev.mark()
        png_of(cu({"type": "click", "x": x, "y": y}, "?screenshot_delay_ms=20"))
        self.assertEqual(presses(self.xev.buttons(1)), [(1, (x, y), 0)])
        for body, query in (({"screenshot_delay_ms": 20000}, ""), ({}, "?screenshot_delay_ms=x"),
                            ({"screenshot_delay_ms": -1}, "")):
            body.update({"action": "screenshot"})
            e = cu(body, query, status=400)["error"]
            self.assertEqual(e["param"], "screenshot_delay_ms", e)

    def test_tool_use_block(self):
        out = cu({"type": "tool_use", "id": "toolu_01", "name": "computer",
                  "input": {"action": "cursor_position"}})
        self.assertEqual(out["type"], "tool_result")
        self.assertEqual(out["tool_use_id"], "toolu_01")
        self.assertRegex(out["content"][0]["text"], r"^X=\d+,Y=\d+$")

    def test_bad_input(self):
        def bad(body, param, query=""):
            e = cu(body, query, status=400)["error"]
            self.assertEqual(e.get("param"), param, e)
            self.assertTrue(e["message"])
        bad({"action": "fly"}, "action")
        bad({"action": "mouse_move"}, "coordinate")
        bad({"action": "mouse_move", "coordinate": [1]}, "coordinate")
        bad({"action": "mouse_move", "coordinate": [1, 2], "text": "x"}, "text")
        bad({"action": "left_click", "coordinate": ["1", 2]}, "coordinate")
        bad({"action": "key"}, "text")
        bad({"action": "scroll", "scroll_amount": 2}, "scroll_direction")
        bad({"action": "scroll", "scroll_direction": "down"}, "scroll_amount")
        bad({"action": "hold_key", "text": "a", "duration": 500}, "duration")
        bad({"action": "zoom", "region": [10, 10, 5, 20]}, "region")
        bad({"action": "left_click", "colour": "red"}, "colour")
        bad({"action": "mouse_move", "coordinate": [1024, 5]}, "coordinate",
            "?display=1024x768")
        e = cu({"action": "left_click", "coordinate": [5000, 5]}, status=400)["error"]
        self.assertEqual(e["param"], "x")  # envd's own bounds check, passed through
        e = cu({"nothing": 1}, status=400)["error"]
        self.assertIn("dialect", e["message"])


class OpenAI(Base):
    def test_click_buttons(self):
        for i, (button, number) in enumerate((("left", 1), ("right", 3), ("wheel", 2),
                                              ("back", 8), ("forward", 9))):
            self.xev.mark()
            x, y = inside(-7 * i, 9 * i)
            out = cu({"type": "click", "button": button, "x": x, "y": y})
            self.assertEqual(out["type"], "computer_call_output")
            self.assertEqual(png_of(out).width, 1280)
            self.assertEqual(presses(self.xev.buttons(1)), [(number, (x, y), 0)], button)

    def test_click_with_keys_held(self):
        x, y = inside()
        cu({"type": "click", "button": "left", "x": x, "y": y, "keys": ["CTRL"]})
        self.assertEqual(presses(self.xev.buttons(1)), [(1, (x, y), CONTROL)])

    def test_double_click(self):
        x, y = inside(12, 12)
        cu({"type": "double_click", "x": x, "y": y})
        self.assertEqual(presses(self.xev.buttons(2)), [(1, (x, y), 0)] * 2)

    def test_drag_along_a_path(self):
        path = [inside(-100, -100), inside(0, 50), inside(120, -20)]
        cu({"type": "drag", "path": [{"x": x, "y": y} for x, y in path]})
        evs = self.xev.wait(lambda evs: any(e["type"] == "ButtonRelease" for e in evs),
                            "the release")
        press = next(e for e in evs if e["type"] == "ButtonPress")
        release = next(e for e in evs if e["type"] == "ButtonRelease")
        self.assertEqual((press["root"], release["root"]), (path[0], path[-1]))
        # envd moves in steps of at most 20 px. The X server may report a
        # step's position late (XTest input is queued), so count the steps:
        # through the waypoint there are more than straight to the end.
        steps = lambda a, b: max(abs(a[0] - b[0]), abs(a[1] - b[1])) // 20 + 1
        held = [e for e in evs if e["type"] == "MotionNotify" and e["state"] & BUTTON1]
        self.assertEqual(len(held), steps(path[0], path[1]) + steps(path[1], path[2]))
        self.assertGreater(len(held), steps(path[0], path[2]))

    def test_keypress(self):
        cu({"type": "keypress", "keys": ["CTRL", "A"]})
        keys = self.xev.keys("Control_L")
        self.assertIn(("KeyPress", "a", CONTROL), keys)  # ctrl+a, not ctrl+shift+a
        self.assertNotIn("Shift_L", typed(keys))
        for sent, keysym in ((["ENTER"], "Return"), (["ARROWLEFT"], "Left"),
                             (["ESC"], "Escape"), (["PAGEDOWN"], "Next")):
            self.xev.mark()
            cu({"type": "keypress", "keys": sent})
            self.assertEqual(typed(self.xev.keys(keysym)), [keysym])

    def test_move(self):
        x, y = inside(77, -66)
        cu({"type": "move", "x": x, "y": y})
        self.assertEqual(cursor(), (x, y))

    def test_scroll(self):
        x, y = inside(-15, 25)
        for sx, sy, button, n in ((0, 300, 5, 3), (0, -100, 4, 1), (200, 0, 7, 2),
                                  (-250, 0, 6, 3), (0, 10, 5, 1)):
            self.xev.mark()
            cu({"type": "scroll", "x": x, "y": y, "scroll_x": sx, "scroll_y": sy})
            self.assertEqual(presses(self.xev.buttons(n)), [(button, (x, y), 0)] * n,
                             (sx, sy))

    def test_type(self):
        cu({"type": "type", "text": "ok?"})
        self.assertEqual([k for k in typed(self.xev.keys("question")) if k != "Shift_L"],
                         ["o", "k", "question"])

    def test_wait_and_screenshot(self):
        for action in ("wait", "screenshot"):
            png = png_of(cu({"type": action}))
            self.assertEqual((png.width, png.height), (1280, 800))

    def test_computer_call_item(self):
        x, y = inside(3, 4)
        out = cu({"type": "computer_call", "call_id": "call_7", "id": "cu_1", "status":
                  "completed", "pending_safety_checks": [],
                  "action": {"type": "move", "x": x, "y": y}})
        self.assertEqual((out["type"], out["call_id"]), ("computer_call_output", "call_7"))
        self.assertEqual(cursor(), (x, y))

    def test_bad_input(self):
        def bad(body, param):
            e = cu(body, status=400)["error"]
            self.assertEqual(e.get("param"), param, e)
        bad({"type": "fly"}, "type")
        bad({"type": "click", "y": 5}, "x")
        bad({"type": "click", "x": 5, "y": 5, "button": "thumb"}, "button")
        bad({"type": "keypress", "keys": []}, "keys")
        bad({"type": "drag", "path": [{"x": 1, "y": 1}]}, "path")
        bad({"type": "move", "x": 1, "y": 1, "z": 3}, "z")
        bad({"type": "computer_call", "call_id": "c"}, "action")


class Display(Base):
    """{"display": {"width", "height"}}: the agent sees and acts on a scaled
    screen. 1280x800 as 1024x768 scales x by 1.25 and y by 25/24; as
    1000x625, both by 1.28: no integer factors."""

    DISPLAYS = ((1024, 768), (1000, 625))

    def test_screenshots_have_the_display_size(self):
        for w, h in self.DISPLAYS:
            png = png_of(cu({"action": "screenshot", "display": {"width": w, "height": h}}))
            self.assertEqual((png.width, png.height), (w, h))
            png = png_of(cu({"type": "screenshot"}, "?display=%dx%d" % (w, h)))
            self.assertEqual((png.width, png.height), (w, h))

    def test_round_trip(self):
        """An agent point lands on the screen pixel whose centre lies in what
        that scaled pixel shows, and cursor_position gives the point back."""
        for w, h in self.DISPLAYS:
            disp = {"width": w, "height": h}
            points = [(0, 0), (w - 1, h - 1), (1, h - 2), (w // 3, h // 7), (w // 2, h // 2),
                      (w - 2, 1), (517, 389), (123, 456)]
            for ax, ay in points:
                cu({"action": "mouse_move", "coordinate": [ax, ay], "display": disp})
                x, y = cursor()
                # (x + 1/2) * w / 1280 in [ax, ax + 1), in integers:
                self.assertTrue(2 * ax * 1280 <= (2 * x + 1) * w < 2 * (ax + 1) * 1280,
                                (w, h, ax, x))
                self.assertTrue(2 * ay * 800 <= (2 * y + 1) * h < 2 * (ay + 1) * 800,
                                (w, h, ay, y))
                out = cu({"action": "cursor_position", "display": disp})
                self.assertEqual(out["content"][0]["text"], "X=%d,Y=%d" % (ax, ay))
                # OpenAI's move lands on the same pixel.
                act("move_cursor", {"x": 0, "y": 0})
                cu({"type": "move", "x": ax, "y": ay}, "?display=%dx%d" % (w, h))
                self.assertEqual(cursor(), (x, y))

    def test_clicks_land_where_mapped(self):
        w, h = 1024, 768
        ax, ay = (XEV["x"] + 100) * w // 1280, (XEV["y"] + 100) * h // 800
        cu({"type": "click", "button": "left", "x": ax, "y": ay}, "?display=%dx%d" % (w, h))
        ((_, (x, y), _),) = presses(self.xev.buttons(1))
        self.assertEqual((x, y), ((2 * ax + 1) * 1280 // (2 * w), (2 * ay + 1) * 800 // (2 * h)))

    def test_zoom_fits_the_display(self):
        png = png_of(cu({"action": "zoom", "region": [0, 0, 512, 384],
                         "display": {"width": 1024, "height": 768}}))
        self.assertEqual((png.width, png.height), (640, 400))  # the screen pixels it covers

    def test_bad_displays(self):
        for body, query in (({"display": {"width": 1920, "height": 1080}}, ""),
                            ({"display": {"width": 1024}}, ""),
                            ({}, "?display=big"), ({}, "?display=0x10")):
            body.update({"action": "screenshot"})
            e = cu(body, query, status=400)["error"]
            self.assertEqual(e["param"], "display", e)


class Sandbox(unittest.TestCase):
    def test_display_actions_are_409(self):
        sb = srv.computer(key, kind="sandbox", isolation="container")["id"]
        r = srv.req("POST", "/v1/computers/%s/computer-use" % sb, {"action": "screenshot"},
                    key=key)
        self.assertEqual(r.status, 409, r.body)
        self.assertIn("display", r.json["error"]["message"])
        # A batch whose first call finds no display has nothing to tell the
        # agent: the same 409, nothing answered in the vendor's shape.
        for body in ({"content": [{"type": "tool_use", "id": "t", "name": "screenshot",
                                   "toolset_name": "computer", "input": {}}]},
                     {"type": "computer_call", "call_id": "c",
                      "actions": [{"type": "click", "button": "left", "x": 1, "y": 1}]}):
            r = srv.req("POST", "/v1/computers/%s/computer-use" % sb, body, key=key)
            self.assertEqual(r.status, 409, r.body)
        srv.ok("DELETE", "/v1/computers/" + sb, key=key)


if __name__ == "__main__":
    unittest.main()
