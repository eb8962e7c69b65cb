"""The desktop image, booted in namespaces with envd supervising the session.

Checks what a user of the image relies on: the desktop comes up by itself
(Xfce panel and desktop drawn), apps start through the action API, the
accessibility tree is there with no manual step, everything runs as the
ordinary user 1000 with no way to root, and the supervisor brings the
session back when a part of it dies.
"""

import os
import sys
import unittest

from guest import Guest, wait_until

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "envd"))
from pngread import Png  # noqa: E402

g = None
ready_s = None


def setUpModule():
    global g, ready_s
    g = Guest("desktop", ["--user", "user", "--session", "desktop"])
    try:
        g.start()
        ready_s = g.wait_ready(90)
    except BaseException:
        g.stop()
        raise
    print("\ndesktop image: ready %.2f s after start (envd: %.0f ms)" % (
        ready_s, g.health().get("ready_ms", 0)), file=sys.stderr)


def tearDownModule():
    g.stop()


def bash(cmd, timeout_s=60):
    return g.ok("bash", {"command": cmd, "timeout_s": timeout_s})


def tree_names(node, out):
    out.append((node.get("role"), node.get("name")))
    for c in node.get("children", []):
        tree_names(c, out)
    return out


class Desktop(unittest.TestCase):
    def test_panel_is_drawn(self):
        r = g.action("screenshot", {})
        self.assertEqual(r.status, 200, r)
        png = Png(r.body)
        self.assertEqual((png.width, png.height), (1280, 800))
        # Xfce's default panel is a strip at the top: many colours there
        # (icons, text, clock), unlike a blank screen.
        strip = {png.pixel(x, y) for y in range(0, 24, 2) for x in range(0, 1280, 4)}
        self.assertGreater(len(strip), 8, "the top strip looks blank")
        middle = {png.pixel(x, 400) for x in range(0, 1280, 8)}
        self.assertNotEqual(strip, middle)

    def test_desktop_environment(self):
        env = g.ok("get_desktop_environment")
        self.assertEqual(env["name"].lower(), "xfce")
        self.assertTrue(env["version"].startswith("4."), env)
        self.assertEqual(env["window_manager"].lower(), "xfwm4")

    def test_session_runs_as_user(self):
        out = bash("id -u; ps -o user= -C xfce4-session -C Xvfb -C xfwm4 | sort -u")["stdout"]
        lines = out.split()
        self.assertEqual(lines[0], "1000")
        self.assertEqual(set(lines[1:]), {"user"})

    def test_no_way_to_root(self):
        r = bash("command -v sudo; echo sudo=$?; su -c 'id -u' root </dev/null; echo su=$?; "
                 "find / -xdev -perm /6000 -type f 2>/dev/null | head -5; id -u")
        out = r["stdout"]
        self.assertIn("sudo=1", out)
        self.assertRegex(out, r"su=[1-9]")
        self.assertEqual(out.split()[-1], "1000")
        self.assertNotIn("/", out.split("su=")[1].split("\n", 1)[1].rsplit("\n", 2)[0])

    def test_firefox_starts(self):
        r = g.ok("launch", {"app": "firefox-esr", "wait_s": 60}, timeout=90)
        self.assertIsNotNone(r["window"], r)
        self.assertIn("firefox", r["window"]["app_class"].lower())
        g.ok("close_window", {"id": r["window"]["id"]})

    def test_gtk_accessibility_tree(self):
        r = g.ok("launch", {"app": "xfce4-terminal", "wait_s": 30})
        self.assertIsNotNone(r["window"], r)
        try:
            def terminal_in_tree():
                t = g.ok("get_accessibility_tree", {"app": "terminal", "max_depth": 12})
                names = []
                for app in t["applications"]:
                    tree_names(app, names)
                return names if any(role == "terminal" for role, _ in names) else None
            names = wait_until(terminal_in_tree, 30, "a terminal in the a11y tree")
            self.assertTrue(any(role == "menu item" or role == "menu" for role, _ in names)
                            or len(names) > 5, names[:20])
            panel = g.ok("get_accessibility_tree", {"app": "panel", "max_depth": 6})
            self.assertTrue(panel["applications"], "xfce4-panel has no accessible tree")
        finally:
            g.action("close_window", {"id": r["window"]["id"]})

    def test_fonts_for_latin_cjk_emoji(self):
        out = bash("fc-list :lang=zh family | head -1; fc-list | grep -ci emoji; "
                   "fc-list :lang=en family | head -1")["stdout"].split("\n")
        self.assertTrue(out[0].strip(), "no CJK font")
        self.assertGreater(int(out[1]), 0, "no emoji font")
        self.assertTrue(out[2].strip(), "no Latin font")

    def test_session_dirs_and_locale(self):
        out = bash("stat -c '%U %a' /session/input /session/output /session/working; "
                   "echo $LANG; date +%Z")["stdout"].split("\n")
        self.assertEqual(out[:3], ["user 755"] * 3)
        self.assertEqual(out[3], "C.UTF-8")
        self.assertEqual(out[4], "UTC")


class Supervisor(unittest.TestCase):
    """Runs last (alphabetically after Desktop): it kills parts of the session."""

    def test_restarts_what_dies(self):
        for victim in ("xfce4-session", "Xvfb"):
            before = bash("pgrep -x %s" % victim)["stdout"].split()
            self.assertTrue(before, "%s is not running" % victim)
            bash("kill -9 %s" % " ".join(before))
            wait_until(lambda: not g.health()["ready"] or
                       bash("pgrep -x %s" % victim)["stdout"].split() != before,
                       20, "envd to notice %s died" % victim)
            wait_until(lambda: g.health()["ready"], 60, "the desktop to come back")
            after = bash("pgrep -x %s" % victim)["stdout"].split()
            self.assertTrue(after and after != before)
            # The display is usable again, through envd's reconnected desk.
            png = Png(g.ok("screenshot", {}).body)
            self.assertEqual(png.width, 1280)


if __name__ == "__main__":
    unittest.main()
