"""set_screen_size: the screen's resolution changed through XRandR.

Xvfb never grows its framebuffer, so the desktop here starts at the largest
size (as `envd --session desktop` does) and the tests shrink and grow it
within that. Witnesses independent of envd: xdpyinfo for the screen's size,
a maximized xrecorder window (xfwm4 fits it to the new screen), and an RFB
viewer (rfbprobe) that must survive the change.
"""

import os
import re
import unittest

import harness
from pngread import Png
from recorder import Recorder
from test_vnc import Probe, read_ppm

MAX_W, MAX_H = 1600, 1000

desk = envd = None
SOCK = None


def setUpModule():
    global desk, envd, SOCK
    desk, envd = harness.start_desktop_and_envd(vnc=True, width=MAX_W, height=MAX_H)
    SOCK = desk.vnc_sock


def tearDownModule():
    harness.stop_desktop_and_envd(desk, envd)


def xdpyinfo_size():
    out = desk.run(["xdpyinfo"]).stdout
    m = re.search(r"dimensions:\s+(\d+)x(\d+) pixels", out)
    return int(m.group(1)), int(m.group(2))


class SetScreenSize(unittest.TestCase):
    def tearDown(self):
        envd.ok("set_screen_size", {"width": MAX_W, "height": MAX_H})

    def test_shrink_and_grow(self):
        self.assertEqual(envd.ok("get_screen_size"), {"width": MAX_W, "height": MAX_H})
        for w, h in ((1024, 768), (1280, 720), (800, 1000), (MAX_W, MAX_H), (640, 480)):
            r = envd.ok("set_screen_size", {"width": w, "height": h})
            self.assertEqual(r, {"ok": True, "width": w, "height": h})
            self.assertEqual(xdpyinfo_size(), (w, h))
            self.assertEqual(envd.ok("get_screen_size"), {"width": w, "height": h})
            png = Png(envd.ok("screenshot").body)
            self.assertEqual((png.width, png.height), (w, h))
            j = envd.ok("screenshot_base64", {"format": "jpeg"})
            self.assertEqual((j["width"], j["height"]), (w, h))

    def test_coordinates_follow_the_new_size(self):
        envd.ok("set_screen_size", {"width": 1024, "height": 768})
        r = envd.action("left_click", {"x": 1100, "y": 100})
        self.assertEqual(r.status, 400, r)
        self.assertEqual(r.json["error"]["param"], "x")
        r = envd.ok("move_cursor", {"x": 1023, "y": 767})
        self.assertEqual((r["x"], r["y"]), (1023, 767))
        j = envd.ok("get_cursor_position")
        self.assertEqual(j["normalized"], {"x": 1.0, "y": 1.0})

    def test_windows_adapt(self):
        """A maximized window fills the new screen (the window manager
        sees the change), and fills the old one again after."""
        rec = Recorder(desk, geometry="300x200+100+100", color="2288cc", title="res-max")
        try:
            envd.ok("maximize_window", {"id": rec.window})

            def fills(w, h):
                geo = rec._geometry()
                # The frame's title bar and borders take a little.
                return geo and geo[2] > w - 40 and geo[3] > h - 80 and \
                    geo[0] + geo[2] <= w and geo[1] + geo[3] <= h and geo
            harness.wait_until(lambda: fills(MAX_W, MAX_H), 10, "the maximized window")
            envd.ok("set_screen_size", {"width": 1024, "height": 768})
            harness.wait_until(lambda: fills(1024, 768), 10, "the window to fit 1024x768")
            envd.ok("set_screen_size", {"width": MAX_W, "height": MAX_H})
            harness.wait_until(lambda: fills(MAX_W, MAX_H), 10, "the window to grow back")
        finally:
            rec.stop()

    def test_bad_sizes_name_the_parameter(self):
        cases = (({"width": MAX_W + 1, "height": 600}, "width"),
                 ({"width": 800, "height": MAX_H + 1}, "height"),
                 ({"width": 63, "height": 600}, "width"),
                 ({"width": 800, "height": 0}, "height"),
                 ({"width": -5, "height": 600}, "width"),
                 ({"width": "800", "height": 600}, "width"),
                 ({"width": 800.5, "height": 600}, "width"),
                 ({"width": 800}, "height"),
                 ({"height": 600}, "width"),
                 ({"width": 800, "height": 600, "depth": 24}, "depth"))
        for params, param in cases:
            r = envd.action("set_screen_size", params)
            self.assertEqual(r.status, 400, (params, r))
            self.assertEqual(r.json["error"]["code"], "invalid_parameter", params)
            self.assertEqual(r.json["error"]["param"], param, (params, r.json))
        over = envd.action("set_screen_size", {"width": 4000, "height": 600}).json
        self.assertIn("%dx%d" % (MAX_W, MAX_H), over["error"]["message"])
        # Nothing changed.
        self.assertEqual(envd.ok("get_screen_size"), {"width": MAX_W, "height": MAX_H})

    def test_rfb_viewer_follows_a_size_change(self):
        """A connected viewer is told the new size (NewFBSize) and its frame
        equals a screenshot pixel for pixel at every size; a viewer that
        connects later starts at the current size."""
        rec = Recorder(desk, geometry="200x150+100+100", color="cc3311", title="res-vnc")
        path = os.path.join(desk.tmp, "frame.ppm")
        p = Probe(SOCK, "--encodings", "zrle")  # lossless
        try:
            self.assertEqual((p.init["width"], p.init["height"]), (MAX_W, MAX_H))
            self.assertEqual(p.cmd("first 10")["event"], "first")
            for w, h in ((1024, 768), (MAX_W, MAX_H), (800, 600)):
                envd.ok("set_screen_size", {"width": w, "height": h})
                self.assertEqual(p.cmd("size %d %d" % (w, h)),
                                 {"event": "size", "width": w, "height": h})
                points = [(w - 1, h - 1), rec.center()]
                points += [(x, y) for x in range(0, w, 97) for y in range(0, h, 89)]

                def same():
                    shot = Png(envd.ok("screenshot").body)
                    self.assertEqual(p.cmd("dump " + path)["event"], "dump")
                    fw, fh, pix = read_ppm(path)
                    self.assertEqual((fw, fh), (w, h))
                    return all(tuple(pix[(y * w + x) * 3:(y * w + x) * 3 + 3]) ==
                               tuple(shot.pixel(x, y)[:3]) for x, y in points)
                harness.wait_until(same, 20, "the viewer's frame to equal the screen at "
                                   "%dx%d" % (w, h))
        finally:
            p.close()
            rec.stop()
        q = Probe(SOCK)
        try:
            self.assertEqual((q.init["width"], q.init["height"]), (800, 600))
            self.assertEqual(q.cmd("first 10")["event"], "first")
        finally:
            q.close()

if __name__ == "__main__":
    unittest.main()
