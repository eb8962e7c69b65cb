"""get_desktop_environment and set_wallpaper on real desktops.

The wallpaper is checked where a person sees it: envd's screenshot of
screen spots no window covers, plus the X root properties (root-window
method) or the xfconf settings xfdesktop reads (Xfce method, when xfdesktop
is installed). The environment's name and version are compared with what
the Xfce programs say of themselves.
"""

import base64
import os
import re
import shutil
import struct
import tempfile
import unittest
import zlib

import harness

# A 32x32 JPEG of one colour, rgb(40, 180, 90), made with libturbojpeg (q95, 4:4:4).
GREEN_JPEG = base64.b64decode(
    "/9j/4AAQSkZJRgABAQAAAQABAAD/2wBDAAIBAQEBAQIBAQECAgICAgQDAgICAgUEBAMEBgUGBgYF"
    "BgYGBwkIBgcJBwYGCAsICQoKCgoKBggLDAsKDAkKCgr/2wBDAQICAgICAgUDAwUKBwYHCgoKCgoK"
    "CgoKCgoKCgoKCgoKCgoKCgoKCgoKCgoKCgoKCgoKCgoKCgoKCgoKCgoKCgr/wAARCAAgACADAREA"
    "AhEBAxEB/8QAHwAAAQUBAQEBAQEAAAAAAAAAAAECAwQFBgcICQoL/8QAtRAAAgEDAwIEAwUFBAQA"
    "AAF9AQIDAAQRBRIhMUEGE1FhByJxFDKBkaEII0KxwRVS0fAkM2JyggkKFhcYGRolJicoKSo0NTY3"
    "ODk6Q0RFRkdISUpTVFVWV1hZWmNkZWZnaGlqc3R1dnd4eXqDhIWGh4iJipKTlJWWl5iZmqKjpKWm"
    "p6ipqrKztLW2t7i5usLDxMXGx8jJytLT1NXW19jZ2uHi4+Tl5ufo6erx8vP09fb3+Pn6/8QAHwEA"
    "AwEBAQEBAQEBAQAAAAAAAAECAwQFBgcICQoL/8QAtREAAgECBAQDBAcFBAQAAQJ3AAECAxEEBSEx"
    "BhJBUQdhcRMiMoEIFEKRobHBCSMzUvAVYnLRChYkNOEl8RcYGRomJygpKjU2Nzg5OkNERUZHSElK"
    "U1RVVldYWVpjZGVmZ2hpanN0dXZ3eHl6goOEhYaHiImKkpOUlZaXmJmaoqOkpaanqKmqsrO0tba3"
    "uLm6wsPExcbHyMnK0tPU1dbX2Nna4uPk5ebn6Onq8vP09fb3+Pn6/9oADAMBAAIRAxEAPwAr8rP4"
    "DCgAoAKACgAoAKACgAoAKACgAoAKACgAoAKAP//Z")
GREEN = (40, 180, 90)


def png_bytes(width, height, pixel):
    """A PNG whose pixel (x, y) is pixel(x, y) -> (r, g, b)."""
    raw = b"".join(b"\0" + b"".join(bytes(pixel(x, y)) for x in range(width))
                   for y in range(height))

    def chunk(kind, data):
        return (struct.pack(">I", len(data)) + kind + data +
                struct.pack(">I", zlib.crc32(kind + data) & 0xffffffff))
    return (b"\x89PNG\r\n\x1a\n" +
            chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)) +
            chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))


def png_decode(data):
    """(width, height, rows of (r, g, b) tuples) of an 8-bit RGB/RGBA PNG."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat = 8, b""
    while pos < len(data):
        n, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + n]
        if kind == b"IHDR":
            w, h, depth, ctype, _, _, interlace = struct.unpack(">IIBBBBB", body)
            assert depth == 8 and ctype in (2, 6) and interlace == 0
        elif kind == b"IDAT":
            idat += body
        pos += 12 + n
    bpp = 3 if ctype == 2 else 4
    raw, stride = zlib.decompress(idat), w * bpp
    rows, prev = [], bytearray(stride)
    for y in range(h):
        f = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b, c = prev[i], prev[i - bpp] if i >= bpp else 0
            if f == 1:
                line[i] = (line[i] + a) & 255
            elif f == 2:
                line[i] = (line[i] + b) & 255
            elif f == 3:
                line[i] = (line[i] + (a + b) // 2) & 255
            elif f == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                pred = a if pa <= pb and pa <= pc else (b if pb <= pc else c)
                line[i] = (line[i] + pred) & 255
        rows.append([tuple(line[x * bpp:x * bpp + 3]) for x in range(w)])
        prev = line
    return w, h, rows


def pixel(envd, x, y):
    """The colour at (x, y) in envd's screenshot."""
    r = envd.ok("screenshot_base64", {"x": x, "y": y, "width": 1, "height": 1})
    return png_decode(base64.b64decode(r["image"]))[2][0][0]


def near(a, b, tol=8):
    return all(abs(p - q) <= tol for p, q in zip(a, b))


def root_pixmaps(desk):
    out = desk.run(["xprop", "-root", "_XROOTPMAP_ID", "ESETROOT_PMAP_ID"]).stdout
    return re.findall(r"pixmap id # (0x[0-9a-f]+)", out)


def xfce_version():
    """What the Xfce programs say their version is (as envd should report)."""
    for prog in ("xfce4-session", "xfwm4"):
        if shutil.which(prog):
            out = desk.run([prog, "--version"]).stdout
            m = re.search(r"(?<![\w.])(\d+\.\d+(?:\.\d+)*)", out)
            if m:
                return m.group(1)
    return ""


desk = envd = None
tmp = None


def setUpModule():
    global desk, envd, tmp
    tmp = tempfile.mkdtemp(prefix="cubicle-wallpaper-")
    desk, envd = harness.start_desktop_and_envd()


def tearDownModule():
    try:
        harness.stop_desktop_and_envd(desk, envd)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def write(name, data):
    path = os.path.join(tmp, name)
    with open(path, "wb") as f:
        f.write(data)
    return path


RED, BLUE, LIME, YELLOW, WHITE = ((220, 20, 30), (20, 40, 210), (30, 170, 60),
                                  (230, 200, 20), (255, 255, 255))


def quadrants(x, y):
    """64x40 (the screen's 16:10): red, blue / lime, yellow."""
    return (RED if x < 32 else BLUE) if y < 20 else (LIME if x < 32 else YELLOW)


class Environment(unittest.TestCase):
    def test_xfwm4_desktop(self):
        r = envd.ok("get_desktop_environment")
        self.assertEqual(set(r), {"name", "version", "window_manager"})
        self.assertEqual(r["window_manager"], "Xfwm4")
        self.assertEqual(r["name"], "xfce")
        self.assertRegex(r["version"], r"^\d+\.\d+")
        self.assertEqual(r["version"], xfce_version())

    def test_bare_x_server_and_xdg_current_desktop(self):
        bare = harness.Desktop(wm=False, a11y=False).start()
        try:
            for xdg, name in (("", ""), ("X-Cubicle:XFCE", "xfce")):
                e = harness.Envd(bare, env={"XDG_CURRENT_DESKTOP": xdg}).start()
                try:
                    r = e.ok("get_desktop_environment")
                    self.assertEqual(r["window_manager"], "")
                    self.assertEqual(r["name"], name)
                finally:
                    e.stop()
        finally:
            bare.stop()


class RootWindowWallpaper(unittest.TestCase):
    def test_png_covers_the_screen_in_place(self):
        path = write("quadrants.png", png_bytes(64, 40, quadrants))
        r = envd.ok("set_wallpaper", {"path": path})
        self.assertEqual(r, {"ok": True, "path": path, "method": "root_window"})
        w, h = desk.width, desk.height
        for (x, y), want in (((w // 4, h // 4), RED), ((3 * w // 4, h // 4), BLUE),
                             ((w // 4, 3 * h // 4), LIME),
                             ((3 * w // 4, 3 * h // 4), YELLOW),
                             ((2, 2), RED), ((w - 3, h - 3), YELLOW)):
            got = pixel(envd, x, y)
            self.assertTrue(near(got, want), ((x, y), got, want))
        ids = root_pixmaps(desk)
        self.assertEqual(len(ids), 2)
        self.assertEqual(ids[0], ids[1])

    def test_jpeg_and_aspect_is_kept(self):
        path = write("green.jpg", GREEN_JPEG)
        r = envd.ok("set_wallpaper", {"path": path})
        self.assertEqual(r["method"], "root_window")
        for x, y in ((5, 5), (640, 400), (1270, 790)):
            got = pixel(envd, x, y)
            self.assertTrue(near(got, GREEN), ((x, y), got))
        before = root_pixmaps(desk)
        # 4:1, red | white | blue bands: zoomed to cover 16:10, only the
        # white middle shows; stretching would show red and blue at the edges.
        bands = write("bands.png", png_bytes(
            80, 20, lambda x, y: RED if x < 20 else (WHITE if x < 60 else BLUE)))
        envd.ok("set_wallpaper", {"path": bands})
        for x in (3, 640, 1276):
            got = pixel(envd, x, 400)
            self.assertTrue(near(got, WHITE), (x, got))
        self.assertNotEqual(root_pixmaps(desk), before)

    def test_visible_around_a_window(self):
        path = write("red.png", png_bytes(16, 10, lambda x, y: RED))
        envd.ok("set_wallpaper", {"path": path})
        xterm = desk.spawn(["xterm", "-geometry", "40x10+500+300"])
        try:
            harness.wait_until(
                lambda: any(w["pid"] == xterm.pid for w in envd.ok("windows")["windows"]),
                10, "the xterm")
            self.assertTrue(near(pixel(envd, 100, 700), RED))
        finally:
            xterm.kill()
            xterm.wait()

    def test_bad_paths(self):
        text = write("notes.png", b"just some text, not an image\n")
        cases = [
            ({"path": os.path.join(tmp, "missing.png")}, 404),
            ({"path": text}, 400),
            ({"path": tmp}, 400),
            ({"path": write("empty.jpg", b"")}, 400),
            ({"path": write("truncated.png", png_bytes(8, 8, lambda x, y: RED)[:40])}, 400),
            ({"path": ""}, 400),
            ({"path": 7}, 400),
            ({}, 400),
        ]
        for params, status in cases:
            r = envd.action("set_wallpaper", params)
            self.assertEqual(r.status, status, (params, r))
            self.assertEqual(r.json["error"]["param"], "path", params)


@unittest.skipUnless(shutil.which("xfdesktop") and shutil.which("xfconf-query"),
                     "xfdesktop4 and xfconf are not installed")
class XfceWallpaper(unittest.TestCase):
    """xfdesktop draws the desktop: the wallpaper must go through xfconf."""

    @classmethod
    def setUpClass(cls):
        cls.desk, cls.envd = harness.start_desktop_and_envd()
        try:
            cls.desk.spawn(["xfdesktop"])
            harness.wait_until(cls.xfdesktop_ready, 20, "xfdesktop to draw the desktop")
        except BaseException:
            cls.tearDownClass()
            raise

    @classmethod
    def tearDownClass(cls):
        try:
            cls.envd.stop()
        finally:
            cls.desk.stop()

    @classmethod
    def xfdesktop_ready(cls):
        out = cls.desk.run(["xprop", "-root", "_NET_CLIENT_LIST"]).stdout
        for wid in re.findall(r"0x[0-9a-f]+", out):
            if "Xfdesktop" in cls.desk.run(["xprop", "-id", wid, "WM_CLASS"]).stdout:
                return "last-image" in xfconf_list(cls.desk)
        return False

    def test_every_backdrop_is_set_and_drawn(self):
        path = write("xfce-blue.png", png_bytes(64, 40, lambda x, y: BLUE))
        r = self.envd.ok("set_wallpaper", {"path": path})
        self.assertEqual(r, {"ok": True, "path": path, "method": "xfconf"})
        props = backdrop_images(self.desk)
        self.assertGreaterEqual(len(props), 1)
        for prop, value in props.items():
            self.assertEqual(value, path, prop)
        harness.wait_until(lambda: near(pixel(self.envd, 900, 500), BLUE), 10,
                           "xfdesktop to draw the new wallpaper")
        # The xfdesktop window is the desktop, not an application window.
        classes = [w["app_class"] for w in self.envd.ok("windows")["windows"]]
        self.assertNotIn("Xfdesktop", classes)

    def test_other_monitors_and_workspaces_are_set_too(self):
        # A monitor that is not plugged in now still has its settings, and a
        # person switching to it expects the same wallpaper.
        other = "/backdrop/screen0/monitorHDMI-9/workspace7/last-image"
        self.desk.run(["xfconf-query", "-c", "xfce4-desktop", "-p", other, "-n", "-t",
                       "string", "-s", "/usr/share/pixmaps/none.png"])
        path = write("xfce-yellow.png", png_bytes(64, 40, lambda x, y: YELLOW))
        r = self.envd.ok("set_wallpaper", {"path": path})
        self.assertEqual(r["method"], "xfconf")
        props = backdrop_images(self.desk)
        self.assertIn(other, props)
        self.assertGreater(len(props), 1)
        self.assertEqual(set(props.values()), {path})
        style = self.desk.run(["xfconf-query", "-c", "xfce4-desktop", "-p",
                               other.replace("last-image", "image-style")]).stdout
        self.assertEqual(style.strip(), "5")  # zoomed, as the root-window method does
        harness.wait_until(lambda: near(pixel(self.envd, 900, 500), YELLOW), 10,
                           "xfdesktop to draw the new wallpaper")


def xfconf_list(d):
    return d.run(["xfconf-query", "-c", "xfce4-desktop", "-l"]).stdout


def backdrop_images(d):
    """{property: value} of every backdrop's last-image setting."""
    out = d.run(["xfconf-query", "-c", "xfce4-desktop", "-l", "-v"]).stdout
    props = {}
    for line in out.splitlines():
        parts = line.split(None, 1)
        if parts and re.fullmatch(r"/backdrop/screen\d+/monitor[^/]+/workspace\d+/last-image",
                                  parts[0]):
            props[parts[0]] = parts[1].strip() if len(parts) > 1 else ""
    return props


if __name__ == "__main__":
    unittest.main()
