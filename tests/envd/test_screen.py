"""Screen actions over HTTP: screenshot, screenshot_base64, get_screen_size,
get_cursor_position.

The witness is xrecorder, a window of a known colour placed by the window
manager; where it really is comes from xwininfo, not from envd. PNGs are
decoded by pngread.py (stdlib zlib), JPEGs by libturbojpeg
through ctypes; the pointer is placed by xdotool.
"""

import base64
import ctypes
import ctypes.util
import json
import os
import shutil
import struct
import tempfile
import threading
import unittest

import harness
from pngread import Png
from recorder import Recorder

desk = envd = None
COLOR = (0x33, 0x66, 0xCC)
OTHER = (0xE0, 0x40, 0x10)


def setUpModule():
    global desk, envd
    desk, envd = harness.start_desktop_and_envd()


def tearDownModule():
    harness.stop_desktop_and_envd(desk, envd)


class Jpeg:
    """Size from the SOF marker; pixels through libturbojpeg (ctypes)."""

    def __init__(self, data):
        if data[:2] != b"\xff\xd8":
            raise ValueError("not a JPEG")
        pos = 2
        self.width = self.height = None
        while pos < len(data):
            marker = data[pos + 1]
            n, = struct.unpack(">H", data[pos + 2:pos + 4])
            if marker in (0xC0, 0xC1, 0xC2):
                self.height, self.width = struct.unpack(">HH", data[pos + 5:pos + 9])
                break
            pos += 2 + n
        self.data = data

    def pixels(self):
        name = ctypes.util.find_library("turbojpeg") or "libturbojpeg.so.0"
        tj = ctypes.CDLL(name)
        tj.tjInitDecompress.restype = ctypes.c_void_p
        tj.tjDecompress2.argtypes = [
            ctypes.c_void_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p,
            ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_int]
        tj.tjDestroy.argtypes = [ctypes.c_void_p]
        h = tj.tjInitDecompress()
        out = ctypes.create_string_buffer(self.width * self.height * 3)
        rc = tj.tjDecompress2(h, self.data, len(self.data), out, self.width, 0,
                              self.height, 0, 0)  # TJPF_RGB, no flags
        tj.tjDestroy(h)
        if rc != 0:
            raise ValueError("libturbojpeg could not decode the JPEG")
        raw = out.raw
        w = self.width
        return lambda x, y: tuple(raw[(y * w + x) * 3:(y * w + x) * 3 + 3])


def shot(params=None):
    r = envd.action("screenshot", params or {})
    if r.status != 200:
        raise AssertionError("screenshot(%r) -> %d %s" % (params, r.status, r.body[:300]))
    return r


def near(a, b, tol):
    return all(abs(x - y) <= tol for x, y in zip(a, b))


class Screenshot(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.rec = Recorder(desk, geometry="320x200+260+180", color="%02x%02x%02x" % COLOR,
                           title="screen-colour")
        cls.other = Recorder(desk, geometry="200x150+800+400",
                             color="%02x%02x%02x" % OTHER, title="screen-other")
        r = cls.rec
        # Painted (the map and the expose may lag the ready line).
        harness.wait_until(
            lambda: Png(shot().body).pixel(*r.center()) == COLOR
            and Png(shot().body).pixel(*cls.other.center()) == OTHER,
            10, "both windows painted")

    @classmethod
    def tearDownClass(cls):
        cls.rec.stop()
        cls.other.stop()

    def inside(self, rec, margin=4):
        """Sample points inside rec's client area (corners and centre)."""
        x0, y0 = rec.x + margin, rec.y + margin
        x1, y1 = rec.x + rec.width - 1 - margin, rec.y + rec.height - 1 - margin
        return [(x0, y0), (x1, y0), (x0, y1), (x1, y1), rec.center()]

    def test_png_full_screen_has_the_window_colour(self):
        r = shot()
        self.assertEqual(r.headers["content-type"], "image/png")
        self.assertEqual(r.headers["x-width"], "1280")
        self.assertEqual(r.headers["x-height"], "800")
        self.assertEqual(float(r.headers["x-scale"]), 1.0)
        png = Png(r.body)
        self.assertEqual((png.width, png.height), (1280, 800))
        for x, y in self.inside(self.rec, 0):
            self.assertEqual(png.pixel(x, y), COLOR, (x, y))
        for x, y in self.inside(self.other, 0):
            self.assertEqual(png.pixel(x, y), OTHER, (x, y))
        # just outside the client area is not the window's colour
        self.assertNotEqual(png.pixel(self.rec.x + self.rec.width, self.rec.center()[1]),
                            COLOR)

    def test_jpeg_is_approximately_the_colour(self):
        for q in (80, 30, 95):
            r = shot({"format": "jpeg", "quality": q})
            self.assertEqual(r.headers["content-type"], "image/jpeg")
            self.assertEqual(r.headers["x-width"], "1280")
            self.assertEqual(r.headers["x-height"], "800")
            jpg = Jpeg(r.body)
            self.assertEqual((jpg.width, jpg.height), (1280, 800))
            px = jpg.pixels()
            for x, y in self.inside(self.rec, 16):
                self.assertTrue(near(px(x, y), COLOR, 12), (q, x, y, px(x, y)))
        default = shot({"format": "jpeg"})
        self.assertEqual(default.headers["content-type"], "image/jpeg")
        self.assertLess(len(shot({"format": "jpeg", "quality": 10}).body), len(default.body))

    def test_region_is_exactly_that_region(self):
        full = Png(shot().body)
        # straddles the window's top-left corner: window, frame and desktop
        x, y, w, h = self.rec.x - 13, self.rec.y - 7, 61, 33
        r = shot({"x": x, "y": y, "width": w, "height": h})
        self.assertEqual((r.headers["x-width"], r.headers["x-height"]), (str(w), str(h)))
        part = Png(r.body)
        self.assertEqual((part.width, part.height), (w, h))
        for j in range(h):
            for i in range(w):
                self.assertEqual(part.pixel(i, j), full.pixel(x + i, y + j), (i, j))
        self.assertEqual(part.pixel(w - 1, h - 1), COLOR)
        # region at the screen's edges
        r = shot({"x": 1279, "y": 799, "width": 1, "height": 1})
        self.assertEqual(Png(r.body).pixel(0, 0), full.pixel(1279, 799))
        r = shot({"x": 0, "y": 0, "width": 1280, "height": 800})
        self.assertEqual(Png(r.body).rows, full.rows)

    def test_region_jpeg(self):
        r = shot({"format": "jpeg", "x": self.rec.x, "y": self.rec.y, "width": 64,
                  "height": 48})
        jpg = Jpeg(r.body)
        self.assertEqual((jpg.width, jpg.height), (64, 48))
        self.assertTrue(near(jpg.pixels()(32, 24), COLOR, 12))

    def test_max_width_scales_and_reports_scale(self):
        r = shot({"max_width": 640})
        png = Png(r.body)
        self.assertEqual((png.width, png.height), (640, 400))
        self.assertEqual((r.headers["x-width"], r.headers["x-height"]), ("640", "400"))
        self.assertAlmostEqual(float(r.headers["x-scale"]), 0.5)
        cx, cy = self.rec.center()
        self.assertEqual(png.pixel(cx // 2, cy // 2), COLOR)

        r = shot({"max_width": 1000, "max_height": 200})  # height is the bound
        png = Png(r.body)
        self.assertEqual((png.width, png.height), (320, 200))
        self.assertAlmostEqual(float(r.headers["x-scale"]), 0.25)

        r = shot({"max_width": 5000, "max_height": 5000})  # never upscales
        self.assertEqual((Png(r.body).width, float(r.headers["x-scale"])), (1280, 1.0))

        r = shot({"x": self.rec.x, "y": self.rec.y, "width": 300, "height": 200,
                  "max_width": 100, "format": "jpeg"})
        jpg = Jpeg(r.body)
        self.assertEqual((jpg.width, jpg.height), (100, 67))
        self.assertAlmostEqual(float(r.headers["x-scale"]), 100 / 300, places=5)
        self.assertTrue(near(jpg.pixels()(50, 33), COLOR, 12))

    def test_exact_size_scales_x_and_y_apart(self):
        """out_width x out_height: 1280x800 into 1024x768 (x 0.8, y 0.96)."""
        r = shot({"out_width": 1024, "out_height": 768})
        png = Png(r.body)
        self.assertEqual((png.width, png.height), (1024, 768))
        self.assertEqual((r.headers["x-width"], r.headers["x-height"]), ("1024", "768"))
        self.assertAlmostEqual(float(r.headers["x-scale"]), 0.8)
        # Output pixel i covers captured pixels [i*W/w, (i+1)*W/w): the
        # recorder's centre lands at floor(c*w/W).
        cx, cy = self.rec.center()
        self.assertEqual(png.pixel(cx * 1024 // 1280, cy * 768 // 800), COLOR)
        # Its edges too: the first output pixel wholly inside it is its colour.
        x0 = -(-self.rec.x * 1024 // 1280)
        y0 = -(-self.rec.y * 768 // 800)
        self.assertEqual(png.pixel(x0, y0), COLOR)
        r = shot({"out_width": 1280, "out_height": 800})  # the same size: unscaled
        self.assertEqual(Png(r.body).rows, Png(shot().body).rows)

    def test_base64_matches_the_png(self):
        j = envd.ok("screenshot_base64")
        self.assertEqual((j["mime_type"], j["format"]), ("image/png", "png"))
        png = Png(base64.b64decode(j["image"], validate=True))
        self.assertEqual((png.width, png.height), (j["width"], j["height"]))
        self.assertEqual((j["width"], j["height"], j["scale"]), (1280, 800, 1.0))
        self.assertEqual(png.pixel(*self.rec.center()), COLOR)

        j = envd.ok("screenshot_base64", {"format": "jpeg", "quality": 70,
                                          "max_width": 320})
        self.assertEqual((j["mime_type"], j["format"]), ("image/jpeg", "jpeg"))
        jpg = Jpeg(base64.b64decode(j["image"], validate=True))
        self.assertEqual((jpg.width, jpg.height), (j["width"], j["height"]))
        self.assertEqual((j["width"], j["height"]), (320, 200))
        self.assertAlmostEqual(j["scale"], 0.25)

        j = envd.ok("screenshot_base64", {"x": 10, "y": 20, "width": 30, "height": 40})
        self.assertEqual((j["width"], j["height"]), (30, 40))

    def test_screenshot_follows_the_screen(self):
        """A window moved by someone else shows up at its new place."""
        desk.run(["xdotool", "windowmove", "--sync", str(self.other.window), "900", "500"])
        try:
            def moved():
                geo = self.other._geometry()
                if not geo or geo[:2] == (self.other.x, self.other.y):
                    return None
                return geo
            x, y, w, h = harness.wait_until(moved, 10, "the window to move")
            png = harness.wait_until(
                lambda: (lambda p: p if p.pixel(x + w // 2, y + h // 2) == OTHER else None)(
                    Png(shot().body)), 10, "the moved window in a screenshot")
            self.assertEqual(png.pixel(x + 2, y + 2), OTHER)
        finally:
            desk.run(["xdotool", "windowmove", "--sync", str(self.other.window),
                      str(self.other.x), str(self.other.y)])

    def test_concurrent_screenshots_do_not_mix(self):
        """Workers share one shared-memory image: each answer must be whole."""
        cx, cy = self.rec.center()
        ox, oy = self.other.center()
        jobs = [{}, {"x": cx - 5, "y": cy - 5, "width": 10, "height": 10},
                {"x": ox - 40, "y": oy - 30, "width": 80, "height": 60},
                {"max_width": 640}] * 4
        errors = []

        def run(params):
            try:
                png = Png(shot(params).body)
                if params.get("max_width"):
                    self.assertEqual(png.pixel(cx // 2, cy // 2), COLOR)
                elif params:
                    colour = COLOR if params["width"] == 10 else OTHER
                    self.assertEqual((png.width, png.height),
                                     (params["width"], params["height"]))
                    self.assertEqual(png.pixel(png.width // 2, png.height // 2), colour)
                else:
                    self.assertEqual((png.pixel(cx, cy), png.pixel(ox, oy)), (COLOR, OTHER))
            except Exception as exc:  # noqa: BLE001 - collected for the main thread
                errors.append((params, exc))
        threads = [threading.Thread(target=run, args=(p,)) for p in jobs]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        self.assertEqual(errors, [])


class BadInput(unittest.TestCase):
    def assertBad(self, action, params, param):
        r = envd.action(action, params)
        self.assertEqual(r.status, 400, (params, r))
        err = r.json["error"]
        self.assertEqual(err["code"], "invalid_parameter", (params, err))
        self.assertEqual(err.get("param"), param, (params, err))
        self.assertIn(param, err["message"])
        return err["message"]

    def test_bad_format_and_quality(self):
        for action in ("screenshot", "screenshot_base64"):
            msg = self.assertBad(action, {"format": "gif"}, "format")
            self.assertIn("png", msg)
            self.assertBad(action, {"format": "jpeg", "quality": 0}, "quality")
            self.assertBad(action, {"format": "jpeg", "quality": 101}, "quality")
            self.assertBad(action, {"quality": -5}, "quality")

    def test_region_off_screen(self):
        full = {"x": 0, "y": 0, "width": 10, "height": 10}
        for change, param in ((dict(x=1280), "x"), (dict(x=-1), "x"), (dict(y=800), "y"),
                              (dict(y=-20), "y"), (dict(x=1275), "width"),
                              (dict(y=795), "height"), (dict(width=0), "width"),
                              (dict(height=-4), "height"), (dict(width=1281), "width"),
                              (dict(x=10**12), "x")):
            params = dict(full, **change)
            self.assertBad("screenshot", params, param)

    def test_partial_region_names_the_missing_one(self):
        self.assertBad("screenshot", {"x": 1, "y": 2}, "width")
        self.assertBad("screenshot", {"x": 1, "width": 5, "height": 5}, "y")
        self.assertBad("screenshot", {"y": 1, "width": 5, "height": 5}, "x")
        self.assertBad("screenshot_base64", {"x": 1, "y": 1, "width": 5}, "height")

    def test_exact_size_errors(self):
        self.assertBad("screenshot", {"out_width": 1024}, "out_height")
        self.assertBad("screenshot", {"out_height": 768}, "out_width")
        self.assertBad("screenshot", {"out_width": 1281, "out_height": 800}, "out_width")
        self.assertBad("screenshot", {"out_width": 640, "out_height": 801}, "out_height")
        self.assertBad("screenshot", {"out_width": 0, "out_height": 10}, "out_width")
        self.assertBad("screenshot", {"out_width": 640, "out_height": 400, "max_width": 320},
                       "out_width")
        self.assertBad("screenshot", {"x": 0, "y": 0, "width": 100, "height": 100,
                                      "out_width": 200, "out_height": 50}, "out_width")

    def test_bad_limits_and_types(self):
        self.assertBad("screenshot", {"max_width": -1}, "max_width")
        self.assertBad("screenshot", {"max_height": -100}, "max_height")
        self.assertBad("screenshot", {"max_width": "640"}, "max_width")
        self.assertBad("screenshot", {"x": "10", "y": 0, "width": 5, "height": 5}, "x")
        self.assertBad("screenshot", {"x": 1.5, "y": 0, "width": 5, "height": 5}, "x")
        self.assertBad("screenshot", {"quality": "high", "format": "jpeg"}, "quality")
        self.assertBad("screenshot", {"format": 5}, "format")
        self.assertBad("screenshot", {"format": None, "widht": 5}, "widht")
        self.assertBad("get_screen_size", {"display": ":0"}, "display")

    def test_service_survives_bad_input(self):
        self.assertEqual(envd.ok("get_screen_size"), {"width": 1280, "height": 800})


class ScreenInfo(unittest.TestCase):
    def test_screen_size(self):
        self.assertEqual(envd.ok("get_screen_size"), {"width": 1280, "height": 800})

    def test_cursor_position(self):
        for x, y in ((100, 200), (0, 0), (1279, 799), (640, 1)):
            desk.run(["xdotool", "mousemove", "--sync", str(x), str(y)])
            j = harness.wait_until(
                lambda: (lambda c: c if (c["x"], c["y"]) == (x, y) else None)(
                    envd.ok("get_cursor_position")), 10, "cursor at %d,%d" % (x, y))
            self.assertAlmostEqual(j["normalized"]["x"], x / 1279)
            self.assertAlmostEqual(j["normalized"]["y"], y / 799)
            self.assertTrue(0.0 <= j["normalized"]["x"] <= 1.0)


class Health(unittest.TestCase):
    DISPLAY_ACTIONS = ("screenshot", "screenshot_base64", "get_screen_size",
                       "set_screen_size", "get_cursor_position", "left_click", "type",
                       "key", "scroll_down", "drag", "windows", "launch", "focus_window",
                       "get_clipboard", "set_clipboard", "get_accessibility_tree",
                       "set_wallpaper", "get_desktop_environment")

    def test_health_on_a_display(self):
        h = envd.request("GET", "/health").json
        self.assertTrue(h["ok"])
        self.assertIs(h["display"], True)
        self.assertEqual(h["display_name"], desk.display)
        for name in self.DISPLAY_ACTIONS + ("bash", "python", "read_file", "write_file"):
            self.assertIn(name, h["capabilities"])
        # Not supervising a session: ready as soon as it answers, and no
        # session start-up time to report.
        self.assertIs(h["ready"], True)
        self.assertNotIn("ready_ms", h)

    def test_health_without_a_display_lists_no_display_action(self):
        headless = harness.Envd(None).start()
        try:
            h = headless.request("GET", "/health").json
            self.assertIs(h["display"], False)
            self.assertIn("bash", h["capabilities"])
            for name in self.DISPLAY_ACTIONS:
                self.assertNotIn(name, h["capabilities"])
        finally:
            headless.stop()


class SlowShell(unittest.TestCase):
    def test_slow_bash_does_not_block_a_screenshot(self):
        """A bash call that cannot end before the screenshot has (it waits
        for a file the test creates only after the screenshot's answer)
        must not hold the screenshot up: the answers arrive in that order,
        with the bash still running in between."""
        tmp = tempfile.mkdtemp(prefix="cubicle-slow-")
        started, release, finished = (os.path.join(tmp, n)
                                      for n in ("started", "release", "finished"))
        done = []  # completion order
        lock = threading.Lock()
        bash_result = {}

        def slow():
            r = envd.action("bash", {
                "command": "touch %s; while [ ! -e %s ]; do sleep 0.02; done; touch %s; "
                           "echo out" % (started, release, finished), "timeout_s": 120})
            bash_result["r"] = r
            with lock:
                done.append("bash")

        t = threading.Thread(target=slow)
        t.start()
        try:
            harness.wait_until(lambda: os.path.exists(started), 30, "bash to start")
            r = shot()
            with lock:
                done.append("screenshot")
                # The bash is still running: it has not answered...
                self.assertEqual(done, ["screenshot"])
            self.assertEqual(r.status, 200)
            self.assertEqual(Png(r.body).width, 1280)
            # ...and its command has not reached its end.
            self.assertFalse(os.path.exists(finished))
        finally:
            open(release, "w").close()
            t.join(130)
        self.assertEqual(done, ["screenshot", "bash"])
        self.assertEqual(bash_result["r"].status, 200, bash_result["r"])
        self.assertEqual(bash_result["r"].json["stdout"], "out\n")
        shutil.rmtree(tmp, ignore_errors=True)


class Headless(unittest.TestCase):
    def test_no_display_is_409(self):
        headless = harness.Envd(None).start()
        try:
            for action in ("screenshot", "screenshot_base64", "get_screen_size",
                           "get_cursor_position"):
                r = headless.action(action, {})
                self.assertEqual(r.status, 409, (action, r))
                self.assertIn("display", r.json["error"]["message"])
        finally:
            headless.stop()


if __name__ == "__main__":
    unittest.main()
