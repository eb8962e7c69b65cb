"""envd's RFB (VNC) server (--vnc unix:PATH), checked with a real RFB client.

rfbprobe (tests/envd/rfbprobe.c) is built on Debian's libvncclient, so the
protocol is checked by an independent implementation: frames must match a
screenshot from the action API, updates must follow changes and stop when
the screen is still, input from a viewer must reach an xrecorder window
(which logs what X delivers), and the clipboard must go both ways through
xclip. envd is stopped with viewers connected; Envd.stop() fails the test
unless it exits cleanly (sanitizer reports included).
"""

import json
import os
import queue
import re
import signal
import stat
import subprocess
import threading
import unittest

import harness
from pngread import Png
from recorder import Recorder, focus

RFBPROBE = os.path.join(harness.TEST_BIN, "rfbprobe")

desk = envd = None
SOCK = None


def setUpModule():
    global desk, envd, SOCK
    desk, envd = harness.start_desktop_and_envd(vnc=True)
    SOCK = desk.vnc_sock


def tearDownModule():
    try:
        if envd:
            # A viewer still connected must not keep envd from exiting cleanly.
            viewer = Probe(SOCK)
            envd.stop()
            viewer.wait_closed()
    finally:
        if desk:
            desk.stop()


class Probe:
    """One rfbprobe viewer, driven a command at a time (see rfbprobe.c)."""

    def __init__(self, sock, *args):
        env = dict(os.environ)
        # A test tool: leaks inside libvncclient are not what is tested.
        env["ASAN_OPTIONS"] = "detect_leaks=0"
        self.proc = subprocess.Popen(
            [RFBPROBE, sock, "--stdin"] + list(args), stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, text=True, env=env)
        self.lines = queue.Queue()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()
        self.init = self.next(30)
        if self.init.get("event") != "init":
            raise AssertionError("rfbprobe did not connect: %r" % self.init)

    def _read(self):
        for line in self.proc.stdout:
            self.lines.put(line)
        self.lines.put(None)

    def next(self, timeout=30):
        line = self.lines.get(timeout=timeout)
        if line is None:
            return {"event": "eof"}
        return json.loads(line)

    def cmd(self, line, timeout=60):
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()
        return self.next(timeout)

    def wait_closed(self, timeout=30):
        ev = self.next(timeout)
        while ev.get("event") not in ("closed", "eof"):
            ev = self.next(timeout)
        self.proc.wait(timeout)
        self.proc.stdin.close()
        self.proc.stdout.close()
        return ev

    def close(self):
        if self.proc.poll() is None:
            try:
                self.proc.stdin.write("quit\n")
                self.proc.stdin.close()
            except BrokenPipeError:
                pass
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc.stdout.close()

    def kill(self):
        self.proc.kill()
        self.proc.wait()
        self.proc.stdin.close()
        self.proc.stdout.close()


def read_ppm(path):
    with open(path, "rb") as f:
        data = f.read()
    m = re.match(rb"P6\s+(\d+)\s+(\d+)\s+255\s", data)
    w, h = int(m.group(1)), int(m.group(2))
    return w, h, data[m.end():]


def screenshot():
    r = envd.ok("screenshot", {"format": "png"})
    return Png(r.body)


def wait_quiet(probe, what="the screen to be still"):
    """Waits until half a second passes without a frame with pixels."""
    harness.wait_until(lambda: probe.cmd("count 0.5")["pixel_updates"] == 0, 20, what)


class Serving(unittest.TestCase):
    def test_init_names_the_desktop_and_its_size(self):
        p = Probe(SOCK)
        try:
            self.assertEqual((p.init["width"], p.init["height"]), (desk.width, desk.height))
            self.assertEqual(p.init["name"], "cubicle")
            # Latency from connect() to ServerInit, measured, not asserted.
            # With one viewer watching, the framebuffer is current, so a
            # second one measures the handshake alone.
            q = Probe(SOCK)
            print("\nconnect-to-ServerInit: first viewer %.2f ms, second %.2f ms" % (
                p.init["init_ms"], q.init["init_ms"]))
            q.close()
        finally:
            p.close()

    def test_socket_is_private_and_nothing_listens_on_tcp(self):
        st = os.stat(SOCK)
        self.assertTrue(stat.S_ISSOCK(st.st_mode))
        self.assertEqual(stat.S_IMODE(st.st_mode) & 0o077, 0, oct(st.st_mode))
        p = Probe(SOCK)  # with a viewer connected, too
        try:
            inodes = set()
            fd_dir = "/proc/%d/fd" % envd.proc.pid
            for fd in os.listdir(fd_dir):
                try:
                    target = os.readlink(os.path.join(fd_dir, fd))
                except OSError:
                    continue
                m = re.match(r"socket:\[(\d+)\]", target)
                if m:
                    inodes.add(m.group(1))
            listening = []
            for table in ("/proc/net/tcp", "/proc/net/tcp6"):
                with open(table) as f:
                    for line in f.readlines()[1:]:
                        cols = line.split()
                        if cols[3] == "0A" and cols[9] in inodes:  # LISTEN
                            listening.append(int(cols[1].split(":")[1], 16))
            # Only the HTTP API (the harness's loopback port).
            self.assertEqual(listening, [envd.port])
        finally:
            p.close()


class Frames(unittest.TestCase):
    def test_first_frame_equals_a_screenshot(self):
        rec = Recorder(desk, geometry="320x200+150+120", color="3366cc", title="vnc-frame")
        try:
            # Both sides must look at the same still screen.
            def still():
                a = screenshot()
                b = screenshot()
                return a.rows == b.rows and a
            shot = harness.wait_until(still, 20, "a still screen")
            path = os.path.join(desk.tmp, "frame.ppm")
            p = Probe(SOCK, "--encodings", "zrle")  # lossless
            try:
                out = p.cmd("dump " + path)
                self.assertEqual(out["event"], "dump")
            finally:
                p.close()
            w, h, pix = read_ppm(path)
            self.assertEqual((w, h), (shot.width, shot.height))
            cx, cy = rec.center()
            points = [(cx, cy), (rec.x + 1, rec.y + 1), (0, 0), (w - 1, h - 1)]
            points += [(x, y) for x in range(0, w, 97) for y in range(0, h, 89)]
            for x, y in points:
                i = (y * w + x) * 3
                self.assertEqual(tuple(pix[i:i + 3]), tuple(shot.pixel(x, y)[:3]),
                                 "pixel (%d, %d)" % (x, y))
            i = (cy * w + cx) * 3
            self.assertEqual(bytes(pix[i:i + 3]).hex(), "3366cc")
        finally:
            rec.stop()

    def test_updates_follow_changes_and_stop_when_still(self):
        p = Probe(SOCK, "--encodings", "zrle")
        try:
            self.assertEqual(p.cmd("first 10")["event"], "first")
            wait_quiet(p)
            idle = p.cmd("count 2")
            self.assertEqual(idle["pixel_updates"], 0, idle)

            # A new window: an update covering it, with its colour.
            p.cmd("watch 600 300 200 150")
            rec = Recorder(desk, geometry="200x150+600+300", color="cc3311", title="vnc-new")
            try:
                ev = p.cmd("frame 10")
                self.assertEqual(ev["event"], "frame", ev)
                cx, cy = rec.center()
                harness.wait_until(
                    lambda: p.cmd("pixel %d %d" % (cx, cy))["rgb"] == "cc3311", 10,
                    "the new window in the viewer's framebuffer")

                # Moved: an update at the new place, and the colour there.
                envd.ok("set_window_position", {"id": rec.window, "x": 200, "y": 450})
                harness.wait_until(
                    lambda: re.search(r"Absolute upper-left Y:\s+(\d+)",
                                      desk.run(["xwininfo", "-id", str(rec.window)]).stdout)
                    and rec._geometry()[1] >= 440, 10, "the window to move")
                x, y, w, h = rec._geometry()
                harness.wait_until(
                    lambda: p.cmd("pixel %d %d" % (x + w // 2, y + h // 2))["rgb"] == "cc3311",
                    10, "the moved window in the viewer's framebuffer")
            finally:
                rec.stop()
            # Once things settle: quiet again.
            wait_quiet(p, "the screen to be still again")
        finally:
            p.close()

    def test_tight_jpeg_frames_are_close_to_the_screen(self):
        rec = Recorder(desk, geometry="300x200+700+100", color="22aa44", title="vnc-tight")
        try:
            p = Probe(SOCK, "--encodings", "tight", "--quality", "6")
            try:
                cx, cy = rec.center()
                harness.wait_until(
                    lambda: self._close(p.cmd("pixel %d %d" % (cx, cy))["rgb"], "22aa44"),
                    10, "the window's colour through Tight/JPEG")
            finally:
                p.close()
        finally:
            rec.stop()

    @staticmethod
    def _close(rgb, want, tolerance=12):
        a, b = bytes.fromhex(rgb), bytes.fromhex(want)
        return all(abs(x - y) <= tolerance for x, y in zip(a, b))

    def test_cursor_shape_is_sent_and_follows_the_pointer(self):
        p = Probe(SOCK)
        try:
            first = p.cmd("cursor 10")
            self.assertEqual(first["event"], "cursor", first)
            self.assertGreater(first["width"], 0)
            # Over an xterm the pointer becomes an I-beam: a new shape.
            term = desk.spawn(["xterm", "-geometry", "60x10+400+400", "-title", "vnc-cursor"])
            try:
                harness.wait_until(
                    lambda: desk.run(["xdotool", "search", "--onlyvisible", "--name",
                                      "vnc-cursor"]).stdout.split(), 15, "the xterm window")
                p.cmd("pointer 480 460 0")
                shape = (first["width"], first["height"], first["xhot"], first["yhot"])

                def new_shape():
                    ev = p.cmd("cursor 1")
                    return ev["event"] == "cursor" and \
                        (ev["width"], ev["height"], ev["xhot"], ev["yhot"]) != shape
                harness.wait_until(new_shape, 15, "the xterm's cursor shape")
            finally:
                os.killpg(term.pid, signal.SIGKILL)
                term.wait()
        finally:
            p.close()


class Viewers(unittest.TestCase):
    def test_two_viewers_and_one_leaving(self):
        a, b = Probe(SOCK), Probe(SOCK, "--encodings", "zrle")
        try:
            for p in (a, b):
                self.assertEqual(p.cmd("first 10")["event"], "first")
            for p in (a, b):
                p.cmd("watch 900 500 160 120")
            rec = Recorder(desk, geometry="160x120+900+500", color="aa22aa", title="vnc-two")
            try:
                for p in (a, b):
                    self.assertEqual(p.cmd("frame 10")["event"], "frame")
                # One viewer vanishes mid-stream; the other keeps getting
                # updates, and the API keeps answering.
                a.kill()
                envd.ok("set_window_position", {"id": rec.window, "x": 850, "y": 200})
                harness.wait_until(lambda: rec._geometry()[1] < 400, 10, "the window to move")
                x, y, w, h = rec._geometry()
                harness.wait_until(
                    lambda: b.cmd("pixel %d %d" % (x + w // 2, y + h // 2))["rgb"] == "aa22aa",
                    10, "the moved window in the remaining viewer")
                self.assertEqual(screenshot().width, desk.width)
                self.assertEqual(envd.ok("get_screen_size"),
                                 {"width": desk.width, "height": desk.height})
            finally:
                rec.stop()
        finally:
            if a.proc.poll() is None:
                a.close()
            b.close()


    def test_busy_screen_streams_while_the_api_answers(self):
        # An xterm printing without pause changes the screen all the time.
        term = desk.spawn(["xterm", "-geometry", "100x30+0+0", "-title", "vnc-busy", "-e",
                           "sh", "-c", "while :; do echo $$ busy; done"])
        a, b = Probe(SOCK), Probe(SOCK, "--encodings", "zrle")
        try:
            harness.wait_until(lambda: a.cmd("count 0.5")["pixel_updates"] >= 3, 15,
                               "a stream of updates")
            self.assertEqual(b.cmd("frame 10")["event"], "frame")
            # One viewer stops reading: the other keeps streaming and the
            # actions keep answering. Then it vanishes mid-update.
            b.proc.send_signal(signal.SIGSTOP)
            self.assertGreaterEqual(a.cmd("count 1")["pixel_updates"], 3)
            for _ in range(3):
                self.assertEqual(screenshot().width, desk.width)
            b.kill()
            self.assertGreaterEqual(a.cmd("count 1")["pixel_updates"], 3)
            self.assertEqual(envd.ok("get_screen_size")["width"], desk.width)
        finally:
            os.killpg(term.pid, signal.SIGKILL)
            term.wait()
            if b.proc.poll() is None:
                b.close()
            a.close()


class Input(unittest.TestCase):
    def setUp(self):
        self.rec = Recorder(desk, geometry="400x300+250+200", color="3366cc", title="vnc-input")
        self.probe = Probe(SOCK)

    def tearDown(self):
        self.probe.close()
        self.rec.stop()

    def test_pointer_reaches_the_window(self):
        cx, cy = self.rec.center()
        self.rec.clear()
        for line in ("pointer %d %d 0" % (cx, cy), "pointer %d %d 1" % (cx, cy),
                     "pointer %d %d 0" % (cx, cy), "pointer %d %d 8" % (cx, cy),
                     "pointer %d %d 0" % (cx, cy)):
            self.probe.cmd(line)
        evs = self.rec.wait_for(
            lambda e: len([x for x in e if x["type"] == "release"]) >= 2, 10,
            "a click and a wheel step")
        presses = [e for e in evs if e["type"] == "press"]
        self.assertEqual([e["button"] for e in presses], [1, 4])
        self.assertEqual((presses[0]["x_root"], presses[0]["y_root"]), (cx, cy))

    def test_keys_reach_the_window(self):
        focus(desk, self.rec.window)
        self.rec.clear()
        # 'a'; 'A' sent without Shift (envd adds it); Return.
        for sym in (0x61, 0x41, 0xff0d):
            self.probe.cmd("key 0x%x" % sym)
        evs = self.rec.wait_for(
            lambda e: any(x["type"] == "key_release" and x["name"] == "Return" for x in e),
            10, "three keys")
        names = [e["name"] for e in evs if e["type"] == "key_press" and
                 not e["name"].startswith("Shift")]
        self.assertEqual(names, ["a", "A", "Return"])

    def test_keys_the_keymap_lacks_are_typed(self):
        # é and € are not on a US keymap: envd binds spare keycodes for them.
        # xterm (which re-reads the keymap) writes what it gets to a file.
        out = os.path.join(desk.tmp, "vnc-typed")
        term = desk.spawn(["xterm", "-T", "vnc-typing", "-geometry", "60x5+50+50", "-e", "sh",
                           "-c", "stty -icanon -echo; exec cat > '%s'" % out])
        try:
            wid = harness.wait_until(
                lambda: desk.run(["xdotool", "search", "--name", "vnc-typing"]).stdout.split(),
                15, "the xterm window")[0]
            harness.wait_until(lambda: os.path.exists(out), 15, "cat to start")
            focus(desk, int(wid))
            for sym in (0x68, 0xe9, 0x6c, 0x6c, 0x6f, 0x20, 0x20ac, 0xff0d):  # héllo €⏎
                self.probe.cmd("key 0x%x" % sym)

            def typed():
                with open(out, "rb") as f:
                    data = f.read()
                return data if data.endswith(b"\n") else None
            self.assertEqual(harness.wait_until(typed, 15, "the typed line").decode(),
                             "héllo €\n")
        finally:
            os.killpg(term.pid, signal.SIGKILL)
            term.wait()

    def test_viewer_leaving_releases_what_it_held(self):
        focus(desk, self.rec.window)
        cx, cy = self.rec.center()
        self.rec.clear()
        self.probe.cmd("keydown 0xffe1")  # Shift_L
        self.probe.cmd("pointer %d %d 1" % (cx, cy))
        self.rec.wait_for(lambda e: any(x["type"] == "press" for x in e), 10,
                          "the press")
        self.probe.kill()
        evs = self.rec.wait_for(
            lambda e: any(x["type"] == "release" for x in e) and
            any(x["type"] == "key_release" and x["name"].startswith("Shift") for x in e),
            10, "the button and Shift released when the viewer left")
        self.assertTrue(evs)
        self.probe = Probe(SOCK)  # for tearDown


class Clipboard(unittest.TestCase):
    def setUp(self):
        self.probe = Probe(SOCK)

    def tearDown(self):
        self.probe.close()

    def xclip_out(self):
        r = desk.run(["xclip", "-o", "-selection", "clipboard"], text=False)
        return r.stdout.decode("utf-8") if r.returncode == 0 else None

    def test_viewer_cut_text_becomes_the_clipboard(self):
        self.probe.cmd("cut from a viewer: café")
        harness.wait_until(lambda: self.xclip_out() == "from a viewer: café", 10,
                           "the viewer's text in CLIPBOARD")
        self.assertEqual(envd.ok("get_clipboard")["text"], "from a viewer: café")

    def test_clipboard_changes_reach_the_viewer(self):
        p = desk.spawn(["xclip", "-quiet", "-i", "-selection", "clipboard"],
                       stdin=subprocess.PIPE)
        p.stdin.write("from xclip: naïve".encode())
        p.stdin.close()
        ev = self.probe.cmd("cutwait 10")
        self.assertEqual(ev, {"event": "cut", "text": "from xclip: naïve"})
        # Through the action API too; plain RFB cut text is ISO-8859-1, so
        # what it cannot hold arrives as '?'.
        envd.ok("set_clipboard", {"text": "from the API: 5 €"})
        ev = self.probe.cmd("cutwait 10")
        self.assertEqual(ev, {"event": "cut", "text": "from the API: 5 ?"})
        p.kill()
        p.wait()


class ViewOnly(unittest.TestCase):
    """The gateway's first line says a connection's mode: a view connection's
    input is ignored and it never gets the clipboard (defense in depth behind
    the gateway's filter, which drops a view viewer's input already)."""

    def setUp(self):
        self.rec = Recorder(desk, geometry="300x200+300+250", color="cc6633", title="vnc-view")
        self.view = Probe(SOCK, "--mode", "view")
        self.control = Probe(SOCK)
        # The answer to the first (full) request is in: a later full update
        # answers a later request.
        self.assertEqual(self.view.cmd("first 20"), {"event": "first"})

    def tearDown(self):
        self.view.close()
        self.control.close()
        self.rec.stop()

    def test_view_input_is_ignored(self):
        focus(desk, self.rec.window)
        cx, cy = self.rec.center()
        self.rec.clear()
        self.view.cmd("pointer %d %d 0" % (cx, cy))
        self.view.cmd("pointer %d %d 1" % (cx, cy))
        self.view.cmd("pointer %d %d 0" % (cx, cy))
        self.view.cmd("key 0x61")
        self.view.cmd("cut from a view viewer")
        # envd has handled all of it once it answers a later update request
        self.assertEqual(self.view.cmd("roundtrip 20"), {"event": "roundtrip"})
        self.control.cmd("key 0x62")
        evs = self.rec.wait_for(
            lambda e: any(x["type"] == "key_release" and x["name"] == "b" for x in e), 10,
            "the control viewer's key")
        self.assertEqual([e["name"] for e in evs if e["type"] == "key_press"], ["b"])
        self.assertFalse([e for e in evs if e["type"] in ("press", "release")])
        self.assertNotEqual(envd.ok("get_clipboard").get("text"), "from a view viewer")

    def test_view_never_gets_the_clipboard(self):
        envd.ok("set_clipboard", {"text": "secret the agent copied"})
        self.assertEqual(self.control.cmd("cutwait 10"),
                         {"event": "cut", "text": "secret the agent copied"})
        # The text goes to every viewer in one pass: a view viewer would have
        # had it before a full update it asks for afterwards.
        self.assertEqual(self.view.cmd("roundtrip 20"), {"event": "roundtrip"})
        self.assertEqual(self.view.cmd("cutwait 0")["event"], "timeout")

    def test_no_mode_line_no_viewer(self):
        p = subprocess.run([RFBPROBE, SOCK, "--mode", "none"], capture_output=True, text=True,
                           timeout=60, env=dict(os.environ, ASAN_OPTIONS="detect_leaks=0"))
        self.assertIn("RFB handshake failed", p.stdout)
        bad = subprocess.run([RFBPROBE, SOCK, "--mode", "viewer"], capture_output=True,
                             text=True, timeout=60,
                             env=dict(os.environ, ASAN_OPTIONS="detect_leaks=0"))
        self.assertIn("RFB handshake failed", bad.stdout)


class Headless(unittest.TestCase):
    def test_no_display_no_server(self):
        path = os.path.join(desk.tmp, "headless-vnc.sock")
        e = harness.Envd(None, args=["--vnc", "unix:" + path]).start()
        try:
            self.assertEqual(e.request("GET", "/health").status, 200)
            self.assertFalse(os.path.exists(path))
            self.assertIn("no X display to serve, so no RFB server", e.log())
        finally:
            e.stop()


if __name__ == "__main__":
    unittest.main()
