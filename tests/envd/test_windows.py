"""Window actions (EWMH) and launch, against xfwm4 and real apps.

Every change envd makes is checked with independent X clients (xprop,
xwininfo) reading the window manager's state, never with envd's own view.
Apps are started through envd's launch action: by command (xterm, zenity)
and by .desktop id (a file in a temporary $XDG_DATA_HOME).
"""

import os
import re
import shutil
import signal
import tempfile
import unittest

import harness

desk = envd = None
data_home = None
launched = []  # pids of apps started by the tests, killed at the end

DESKTOP_ENTRY = """[Desktop Entry]
Type=Application
Name=Cubicle test terminal
Exec=xterm -T "cubicle desk entry" -geometry 60x12 %U
"""


def setUpModule():
    global desk, envd, data_home
    data_home = tempfile.mkdtemp(prefix="cubicle-xdg-")
    os.makedirs(os.path.join(data_home, "applications"))
    with open(os.path.join(data_home, "applications",
                           "cubicle-test-term.desktop"), "w") as f:
        f.write(DESKTOP_ENTRY)
    desk = harness.Desktop().start()
    try:
        envd = harness.Envd(desk, env={"XDG_DATA_HOME": data_home}).start()
    except BaseException:
        desk.stop()
        raise


def tearDownModule():
    for pid in launched:
        try:
            os.killpg(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    try:
        harness.stop_desktop_and_envd(desk, envd)
    finally:
        shutil.rmtree(data_home, ignore_errors=True)


def xprop(args):
    return desk.run(["xprop"] + args).stdout


def active_window():
    out = xprop(["-root", "_NET_ACTIVE_WINDOW"])
    m = re.search(r"window id # (0x[0-9a-f]+)", out)
    return int(m.group(1), 16) if m else 0


def client_list():
    out = xprop(["-root", "_NET_CLIENT_LIST"])
    return [int(x, 16) for x in re.findall(r"0x[0-9a-f]+", out)]


def wm_state(wid):
    out = xprop(["-id", str(wid), "_NET_WM_STATE"])
    return set(re.findall(r"_NET_WM_STATE_[A-Z_]+", out))


def xwininfo(wid):
    out = desk.run(["xwininfo", "-id", str(wid)]).stdout
    get = lambda k: int(re.search(k + r":\s+(-?\d+)", out).group(1))
    return {"x": get("Absolute upper-left X"), "y": get("Absolute upper-left Y"),
            "width": get("Width"), "height": get("Height"),
            "viewable": "IsViewable" in out}


def process_gone(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def launch(app, args=(), wait_s=10):
    r = envd.ok("launch", {"app": app, "args": list(args), "wait_s": wait_s})
    launched.append(r["pid"])
    return r


def xterm(title):
    """An xterm launched through envd; returns its window (dict)."""
    r = launch("xterm", ["-T", title, "-geometry", "70x16"])
    w = r["window"]
    if w is None:
        raise AssertionError("launch did not report the xterm's window")
    return w


class Listing(unittest.TestCase):
    def test_launched_window_is_listed_with_title_class_pid(self):
        r = launch("xterm", ["-T", "cubicle listing", "-geometry", "50x10+120+140"])
        w = r["window"]
        self.assertIsNotNone(w)
        self.assertEqual(w["title"], "cubicle listing")
        self.assertEqual(w["app_class"], "XTerm")
        self.assertEqual(w["pid"], r["pid"])
        self.assertIn(w["id"], client_list())
        listed = [x for x in envd.ok("windows")["windows"] if x["id"] == w["id"]]
        self.assertEqual(len(listed), 1)
        x = listed[0]
        self.assertEqual((x["title"], x["app_class"], x["pid"]),
                         ("cubicle listing", "XTerm", r["pid"]))
        # The pid is the one X knows, and the geometry is the client area's.
        self.assertIn("= %d" % r["pid"], xprop(["-id", str(w["id"]), "_NET_WM_PID"]))
        info = xwininfo(w["id"])
        for k in ("x", "y", "width", "height"):
            self.assertEqual(x[k], info[k], k)
        self.assertEqual(set(x), {"id", "title", "app_class", "pid", "x", "y", "width",
                                  "height", "focused", "minimized", "maximized"})

    def test_unicode_title_and_gtk_app(self):
        title = "héllo — 世界"
        w = xterm(title)
        self.assertEqual(w["title"], title)
        r = launch("zenity", ["--info", "--text", "cubicle zenity", "--title",
                              "cubicle zenity"])
        z = r["window"]
        self.assertIsNotNone(z)
        self.assertEqual(z["title"], "cubicle zenity")
        self.assertEqual(z["app_class"], "Zenity")
        self.assertEqual(z["pid"], r["pid"])

    def test_focused_flag_follows_active_window(self):
        w = xterm("cubicle focused flag")
        envd.ok("focus_window", {"id": w["id"]})
        listing = envd.ok("windows")["windows"]
        focused = [x["id"] for x in listing if x["focused"]]
        self.assertEqual(focused, [active_window()])
        self.assertEqual(focused, [w["id"]])


class Launch(unittest.TestCase):
    def test_launch_by_desktop_id(self):
        for app in ("cubicle-test-term", "cubicle-test-term.desktop"):
            r = launch(app)
            self.assertTrue(r["ok"])
            self.assertIsNotNone(r["window"], app)
            # The Exec line's quoted title arrived as one argument.
            self.assertEqual(r["window"]["title"], "cubicle desk entry")
            self.assertEqual(r["window"]["app_class"], "XTerm")

    def test_launch_without_wait_answers_at_once(self):
        r = envd.ok("launch", {"app": "xterm", "args": ["-T", "cubicle no wait"]})
        launched.append(r["pid"])
        self.assertTrue(r["ok"])
        self.assertGreater(r["pid"], 0)
        self.assertIsNone(r["window"])
        harness.wait_until(
            lambda: [x for x in envd.ok("windows")["windows"]
                     if x["pid"] == r["pid"] and x["title"] == "cubicle no wait"],
            10, "the xterm's window")

    def test_unknown_app_is_404_naming_app(self):
        r = envd.action("launch", {"app": "no-such-app-cubicle"})
        self.assertEqual(r.status, 404)
        err = r.json["error"]
        self.assertEqual(err["param"], "app")
        self.assertIn("no-such-app-cubicle", err["message"])

    def test_bad_launch_parameters(self):
        cases = [
            ({}, "app"),
            ({"app": 5}, "app"),
            ({"app": "xterm", "args": "-T x"}, "args"),
            ({"app": "xterm", "args": ["-T", 3]}, "args"),
            ({"app": "xterm", "wait_s": 61}, "wait_s"),
            ({"app": "xterm", "wait_s": -1}, "wait_s"),
            ({"app": "xterm", "wiat_s": 1}, None),
        ]
        for params, param in cases:
            r = envd.action("launch", params)
            self.assertEqual(r.status, 400, params)
            if param:
                self.assertEqual(r.json["error"]["param"], param, params)


class Requests(unittest.TestCase):
    def test_focus_changes_active_window(self):
        a = xterm("cubicle focus a")
        b = xterm("cubicle focus b")
        for w in (a, b, a):
            r = envd.ok("focus_window", {"id": w["id"]})
            self.assertTrue(r["ok"])
            self.assertTrue(r["window"]["focused"])
            self.assertEqual(active_window(), w["id"])

    def test_move(self):
        w = xterm("cubicle move")
        for x, y in ((100, 150), (333, 222)):
            r = envd.ok("set_window_position", {"id": w["id"], "x": x, "y": y})
            self.assertEqual((r["window"]["x"], r["window"]["y"]), (x, y))
            info = xwininfo(w["id"])
            self.assertEqual((info["x"], info["y"]), (x, y))
            g = envd.ok("get_window_position", {"id": w["id"]})
            self.assertEqual(g, {"id": w["id"], "x": x, "y": y})

    def test_resize(self):
        w = xterm("cubicle resize")
        r = envd.ok("set_window_size", {"id": w["id"], "width": 600, "height": 400})
        info = xwininfo(w["id"])
        self.assertEqual((r["window"]["width"], r["window"]["height"]),
                         (info["width"], info["height"]))
        # xterm sizes in character cells; it must be within one cell.
        self.assertLess(abs(info["width"] - 600), 10)
        self.assertLess(abs(info["height"] - 400), 20)
        self.assertNotEqual((info["width"], info["height"]), (w["width"], w["height"]))
        g = envd.ok("get_window_size", {"id": w["id"]})
        self.assertEqual(g, {"id": w["id"], "width": info["width"],
                             "height": info["height"]})

    def test_maximize_then_move_unmaximizes(self):
        w = xterm("cubicle maximize")
        r = envd.ok("maximize_window", {"id": w["id"]})
        self.assertTrue(r["window"]["maximized"])
        self.assertTrue({"_NET_WM_STATE_MAXIMIZED_VERT",
                         "_NET_WM_STATE_MAXIMIZED_HORZ"} <= wm_state(w["id"]))
        self.assertEqual(xwininfo(w["id"])["width"], desk.width)
        r = envd.ok("set_window_position", {"id": w["id"], "x": 200, "y": 180})
        self.assertFalse(r["window"]["maximized"])
        self.assertFalse({"_NET_WM_STATE_MAXIMIZED_VERT",
                          "_NET_WM_STATE_MAXIMIZED_HORZ"} & wm_state(w["id"]))
        info = xwininfo(w["id"])
        self.assertEqual((info["x"], info["y"]), (200, 180))
        self.assertLess(info["width"], desk.width)

    def test_minimize_then_focus_restores(self):
        w = xterm("cubicle minimize")
        r = envd.ok("minimize_window", {"id": w["id"]})
        self.assertTrue(r["window"]["minimized"])
        self.assertIn("_NET_WM_STATE_HIDDEN", wm_state(w["id"]))
        self.assertFalse(xwininfo(w["id"])["viewable"])
        r = envd.ok("focus_window", {"id": w["id"]})
        self.assertFalse(r["window"]["minimized"])
        self.assertNotIn("_NET_WM_STATE_HIDDEN", wm_state(w["id"]))
        self.assertTrue(xwininfo(w["id"])["viewable"])
        self.assertEqual(active_window(), w["id"])

    def test_close(self):
        r = launch("xterm", ["-T", "cubicle close"])
        wid, pid = r["window"]["id"], r["pid"]
        c = envd.ok("close_window", {"id": wid})
        self.assertEqual((c["ok"], c["id"], c["closed"], c["window"]),
                         (True, wid, True, None))
        self.assertNotIn(wid, client_list())
        # xterm honours the close request by exiting.
        harness.wait_until(lambda: process_gone(pid), 10, "the closed xterm to exit")
        r = envd.action("get_window_size", {"id": wid})
        self.assertEqual(r.status, 404)

    def test_id_as_hex_or_decimal_string(self):
        w = xterm("cubicle string ids")
        for id_param in (hex(w["id"]), str(w["id"]), "0X%X" % w["id"]):
            g = envd.ok("get_window_size", {"id": id_param})
            self.assertEqual(g["id"], w["id"])


class BadInput(unittest.TestCase):
    def test_bad_ids_are_400(self):
        for bad in ("zz", "", "0x", "12abc", -1, 0, 1.5, True, [], {}, 2 ** 40):
            for action in ("focus_window", "get_window_size", "close_window"):
                r = envd.action(action, {"id": bad})
                self.assertEqual(r.status, 400, (action, bad, r))
                self.assertEqual(r.json["error"]["param"], "id")
        r = envd.action("focus_window", {})
        self.assertEqual((r.status, r.json["error"]["param"]), (400, "id"))

    def test_unknown_ids_are_404(self):
        root = int(re.search(r"0x[0-9a-f]+",
                             desk.run(["xwininfo", "-root"]).stdout).group(0), 16)
        for wid in (0x1fffffff, root, "0x7ffffff"):
            for action in ("focus_window", "get_window_position", "set_window_size",
                           "maximize_window", "minimize_window", "close_window"):
                params = {"id": wid}
                if action == "set_window_size":
                    params.update(width=300, height=200)
                r = envd.action(action, params)
                self.assertEqual(r.status, 404, (action, wid, r))
                self.assertEqual(r.json["error"]["param"], "id")

    def test_bad_geometry_parameters(self):
        w = xterm("cubicle bad geometry")
        cases = [
            ("set_window_size", {"width": 0, "height": 100}, "width"),
            ("set_window_size", {"width": 100}, "height"),
            ("set_window_size", {"width": "wide", "height": 100}, "width"),
            ("set_window_position", {"x": 10}, "y"),
            ("set_window_position", {"x": 1e9, "y": 0}, "x"),
            ("set_window_position", {"x": 1, "y": 2, "z": 3}, None),
        ]
        for action, params, param in cases:
            params = dict(params, id=w["id"])
            r = envd.action(action, params)
            self.assertEqual(r.status, 400, (action, params, r))
            if param:
                self.assertEqual(r.json["error"]["param"], param)

    def test_window_that_vanished_is_404_and_envd_survives(self):
        r = launch("xterm", ["-T", "cubicle vanish"])
        wid, pid = r["window"]["id"], r["pid"]
        os.killpg(pid, signal.SIGKILL)
        harness.wait_until(lambda: wid not in client_list(), 10,
                           "the killed xterm's window to go")
        for action in ("focus_window", "maximize_window", "get_window_size"):
            r = envd.action(action, {"id": wid})
            self.assertEqual(r.status, 404, (action, r))
        self.assertIn("windows", envd.ok("windows"))


if __name__ == "__main__":
    unittest.main()
