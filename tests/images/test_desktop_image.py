"""The desktop image, booted in namespaces with envd supervising the session.

Checks what a user of the image relies on: the desktop comes up by itself
(Xfce panel and desktop drawn), apps start through the action API, the
accessibility tree is there with no manual step, everything runs as the
ordinary user 1000 with no way to root, and the supervisor brings the
session back when a part of it dies.
"""

import os
import re
import sys
from collections import Counter
import unittest

from guest import Guest, check_only_envd, check_user_basics, processes, wait_until

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "envd"))
from pngread import Png  # noqa: E402

g = None
ready_s = None
ready_procs = None  # the process list once ready, before any test launches apps


def setUpModule():
    global g, ready_s, ready_procs
    g = Guest("desktop", ["--user", "user", "--session", "desktop"])
    try:
        g.start()
        ready_s = g.wait_ready(90)
        ready_procs = processes(g)
    except BaseException:
        g.stop()
        raise
    print("\ndesktop image: ready %.2f s after start (envd: %.0f ms)" % (
        ready_s, g.health().get("ready_ms", 0)), file=sys.stderr)


def tearDownModule():
    g.stop()


def bash(cmd, timeout_s=60):
    return g.ok("bash", {"command": cmd, "timeout_s": timeout_s})


def panel_width():
    """The widest xfce4-panel window, as an X client other than envd sees it."""
    out = bash("xwininfo -root -tree | grep Xfce4-panel")["stdout"]
    return max([int(m.group(1)) for m in re.finditer(r"\)\s+(\d+)x\d+\+", out)] or [0])


def panel_in_a11y_tree():
    r = g.action("get_accessibility_tree", {"app": "panel", "max_depth": 3})
    return r.status == 200 and r.json["applications"]


def tree_names(node, out):
    out.append((node.get("role"), node.get("name")))
    for c in node.get("children", []):
        tree_names(c, out)
    return out


class Desktop(unittest.TestCase):
    def test_health(self):
        h = g.health()
        self.assertIs(h["display"], True)
        self.assertIs(h["ready"], True)
        for name in ("screenshot", "set_screen_size", "left_click", "get_accessibility_tree",
                     "bash", "read_file"):
            self.assertIn(name, h["capabilities"])
        # How long the session took to become ready, in ms.
        self.assertGreater(h["ready_ms"], 0)

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
        check_user_basics(self, g)

    def test_panel_window(self):
        # The xfce4-panel window (a dock: envd's windows action lists only
        # managed windows) and its geometry: one strip across the top.
        out = bash("for w in $(xprop -root _NET_CLIENT_LIST | sed 's/.*# //; s/,//g'); do "
                   "xprop -id $w WM_CLASS | grep -q '\"xfce4-panel\"' && xwininfo -id $w; "
                   "done")["stdout"]
        geo = {k: int(v) for k, v in re.findall(
            r"(Absolute upper-left X|Absolute upper-left Y|Width|Height):\s+(-?\d+)", out)}
        self.assertEqual(len(geo), 4, "no xfce4-panel window:\n" + out)
        self.assertEqual((geo["Absolute upper-left X"], geo["Absolute upper-left Y"],
                          geo["Width"]), (0, 0, 1280), out)
        h = geo["Height"]
        self.assertTrue(16 <= h <= 64, out)
        # The screenshot shows it: a solid background fills the panel's
        # rectangle down to its last rows, and that colour is not the
        # wallpaper's in a band of the same height below it.
        png = Png(g.ok("screenshot", {}).body)
        self.assertEqual((png.width, png.height), (1280, 800))
        xs = range(0, 1280, 2)
        inside = Counter(png.pixel(x, y)[:3] for y in range(1, h - 1) for x in xs)
        bg, n = inside.most_common(1)[0]
        self.assertGreater(n, 0.6 * sum(inside.values()), "no solid panel background")
        self.assertGreater(sum(png.pixel(x, h - 2)[:3] == bg for x in xs), 0.8 * len(xs),
                           "the panel's colour does not reach its bottom rows")
        below = Counter(png.pixel(x, y)[:3] for y in range(h + 4, 2 * h + 4) for x in xs)
        self.assertLess(below[bg], 0.05 * sum(below.values()),
                        "the wallpaper below the panel has the panel's colour")

    def test_no_services_but_envd(self):
        session = ("Xvfb", "dbus-daemon", "at-spi-bus-laun", "xfce4-session")
        # (comm is cut at 15 characters; a panel plugin's wrapper names itself
        # panel-ID-PLUGIN; Thunar's daemon is D-Bus activated by xfdesktop)
        allowed = "|".join(list(session) + [
            "xfwm4", "xfsettingsd", "xfce4-panel", "panel-[0-9]+-.*", "wrapper-2.0",
            "xfdesktop", "xfconfd", "at-spi2-registr", "Thunar"])
        envd, procs, parts = check_only_envd(self, ready_procs, session, allowed)
        self.assertEqual(envd["uid"], 0)
        names = {p["comm"] for p in procs if p["pid"] in parts}
        self.assertTrue({"xfwm4", "xfce4-panel", "xfdesktop"} <= names, names)
        self.assertEqual({p["uid"] for p in procs if p["pid"] in parts}, {1000})

    def test_firefox_accessibility_tree(self):
        # (one Firefox at a time: a second start while one exits hands over
        # to the dying one)
        wait_until(lambda: bash("pgrep -x firefox-esr; true")["stdout"] == "", 60,
                   "an earlier Firefox to exit")
        r = g.ok("launch", {"app": "firefox-esr", "wait_s": 60}, timeout=90)
        self.assertIsNotNone(r["window"], r)
        try:
            def firefox_tree():
                t = g.ok("get_accessibility_tree", {"app": "Firefox", "max_depth": 20,
                                                    "max_nodes": 3000})
                names = []
                for app in t["applications"]:
                    tree_names(app, names)
                return names if ("push button", "Reload") in names and \
                    any(role == "document web" for role, _ in names) else None
            names = wait_until(firefox_tree, 60, "Firefox's page and toolbar in the a11y tree")
            self.assertTrue(any(role == "frame" and "Firefox" in (name or "")
                                for role, name in names), names[:20])
            self.assertIn(("combo box", "Search or enter address"), names)
        finally:
            g.action("close_window", {"id": r["window"]["id"]})
            wait_until(lambda: bash("pgrep -x firefox-esr; true")["stdout"] == "", 60,
                       "Firefox to exit")


class Resolution(unittest.TestCase):
    """Runs after Desktop (alphabetically): it changes the screen's size."""

    def test_set_screen_size_and_the_panel_follows(self):
        # Xvfb started large enough for later changes.
        out = bash("xrandr | head -1")["stdout"]
        self.assertIn("current 1280 x 800, maximum 1920 x 1200", out)
        try:
            for w, h in ((1024, 768), (1920, 1200)):
                self.assertEqual(g.ok("set_screen_size", {"width": w, "height": h}),
                                 {"ok": True, "width": w, "height": h})
                self.assertEqual(g.ok("get_screen_size"), {"width": w, "height": h})
                png = Png(g.ok("screenshot", {}).body)
                self.assertEqual((png.width, png.height), (w, h))
                wait_until(lambda: panel_width() == w, 20, "the panel to span %d px" % w)
            r = g.action("set_screen_size", {"width": 1921, "height": 1200})
            self.assertEqual(r.status, 400, r)
            self.assertEqual(r.json["error"]["param"], "width")

            # An X server that dies comes back at the size set last.
            g.ok("set_screen_size", {"width": 1024, "height": 768})
            before = bash("pgrep -x Xvfb")["stdout"].split()
            bash("kill -9 %s" % " ".join(before))
            wait_until(lambda: bash("pgrep -x Xvfb")["stdout"].split() not in ([], before),
                       20, "a new Xvfb")
            wait_until(lambda: g.health()["ready"], 60, "the desktop to come back")
            self.assertEqual(g.ok("get_screen_size"), {"width": 1024, "height": 768})
            wait_until(lambda: panel_width() == 1024, 20, "the panel to span 1024 px")
        finally:
            g.ok("set_screen_size", {"width": 1280, "height": 800})
        self.assertEqual(g.ok("get_screen_size"), {"width": 1280, "height": 800})


class Supervisor(unittest.TestCase):
    """Runs last (alphabetically after Desktop): it kills parts of the session."""

    def test_buses_restart_and_the_tree_comes_back(self):
        wait_until(panel_in_a11y_tree, 30, "the panel in the accessibility tree")
        for victim in ("dbus-daemon --session", "at-spi-bus-launcher"):
            before = bash("pgrep -f '^[^ ]*%s'" % victim)["stdout"].split()
            self.assertEqual(len(before), 1, (victim, before))
            bash("kill -9 %s" % before[0])
            wait_until(lambda: bash("pgrep -f '^[^ ]*%s'" % victim)["stdout"].split()
                       not in ([], before), 30, "a new %s" % victim)
            wait_until(lambda: g.health()["ready"], 60, "the desktop to come back")
            # envd reads the tree through the new buses.
            wait_until(panel_in_a11y_tree, 30,
                       "the panel in the accessibility tree after %s died" % victim)

    def test_ready_follows_the_panel(self):
        """A panel that dies makes the desktop not ready until it is back.
        xfce4-session, which would restart it, is held stopped: the desktop
        stays not ready until envd gives up waiting and restarts the session
        (SESSION_UNREADY_RESTART_MS), which brings the panel back."""
        # A desktop at rest first: an earlier test may have restarted the
        # session, and its panel may still be starting.
        wait_until(lambda: g.health()["ready"] and
                   len(bash("pgrep -x xfce4-panel")["stdout"].split()) == 1, 30,
                   "one panel on a ready desktop")
        session = bash("pgrep -x xfce4-session")["stdout"].split()
        panel = bash("pgrep -x xfce4-panel")["stdout"].split()
        self.assertTrue(session and panel)
        bash("kill -STOP %s" % " ".join(session))
        try:
            # Every panel process, including one that was being exec'd.
            bash("for i in 1 2 3 4 5; do pkill -9 -x xfce4-panel || break; sleep 0.2; done; true")
            wait_until(lambda: not g.health()["ready"], 30, "ready to go false")
            wait_until(lambda: g.health()["ready"], 60, "ready to come back")
        finally:
            bash("kill -CONT %s 2>/dev/null; true" % " ".join(session))
        self.assertNotEqual(bash("pgrep -x xfce4-session")["stdout"].split(), session)
        after = bash("pgrep -x xfce4-panel")["stdout"].split()
        self.assertTrue(after and after != panel, (panel, after))

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
