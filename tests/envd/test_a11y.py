"""get_accessibility_tree against real applications on the AT-SPI bus.

A GTK dialog (zenity) shows its button by name, with screen bounds and a
"click" action; the app, max_depth and max_nodes filters cut the tree; Firefox
publishes the button of a local page; and an envd without an accessibility bus
answers 503 with a message that says how to get one.
"""

import os
import shutil
import signal
import tempfile
import unittest

import harness

BUTTON = "CubicleApprove"
FIREFOX_BUTTON = "CubicleFirefoxButton"


def nodes(tree):
    """Every node of a get_accessibility_tree answer, with its depth below its app."""
    stack = [(app, 0) for app in tree["applications"]]
    while stack:
        n, depth = stack.pop()
        yield n, depth
        stack.extend((c, depth + 1) for c in n["children"])


def find(tree, role=None, name=None):
    return [n for n, _ in nodes(tree)
            if (role is None or n["role"] in role) and (name is None or n["name"] == name)]


class A11yTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.desk = harness.Desktop().start()
        cls.envd = harness.Envd(cls.desk).start()
        cls.zenity = cls.desk.spawn(["zenity", "--question", "--title=Cubicle question",
                                     "--text=Approve the test?", "--ok-label=" + BUTTON])
        cls.tmp = tempfile.mkdtemp(prefix="cubicle-a11y-test-")

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)
        try:
            cls.envd.stop()
        finally:
            cls.desk.stop()

    def tree(self, **params):
        return self.envd.ok("get_accessibility_tree", params)

    def wait_for_button(self, **params):
        """The tree once zenity's button is in it (zenity starts asynchronously)."""
        last = {}

        def check():
            last["tree"] = self.tree(**params)
            return find(last["tree"], ("push button",), BUTTON)
        harness.wait_until(check, 30, "zenity's %s button in the tree" % BUTTON, 0.2)
        return last["tree"]

    def assertError(self, r, status, param=None):
        self.assertEqual(r.status, status, r)
        err = r.json["error"]
        if param is not None:
            self.assertEqual(err.get("param"), param, r)
            self.assertIn(param, err["message"])
        return err

    def test_gtk_button_with_bounds_and_click(self):
        tree = self.wait_for_button()
        self.assertIs(tree["truncated"], False)
        (button,) = find(tree, ("push button",), BUTTON)
        b = button["bounds"]
        self.assertGreater(b["width"], 0)
        self.assertGreater(b["height"], 0)
        self.assertGreaterEqual(b["x"], 0)
        self.assertGreaterEqual(b["y"], 0)
        self.assertLessEqual(b["x"] + b["width"], self.desk.width)
        self.assertLessEqual(b["y"] + b["height"], self.desk.height)
        self.assertIn("click", button["actions"])
        for state in ("enabled", "visible", "showing", "focusable"):
            self.assertIn(state, button["states"])
        for n, _ in nodes(tree):
            for key in ("role", "name", "description", "states", "actions", "children"):
                self.assertIn(key, n)
        apps = [a for a in tree["applications"] if a["name"] == "zenity"]
        self.assertEqual(len(apps), 1)
        self.assertEqual(apps[0]["role"], "application")
        dialogs = find(tree, ("dialog",), "Cubicle question")
        self.assertEqual(len(dialogs), 1, [n["name"] for n in find(tree, ("dialog",))])

    def test_app_filter(self):
        self.wait_for_button()
        everything = self.tree()
        names = {a["name"] for a in everything["applications"]}
        self.assertIn("zenity", names)
        self.assertGreater(len(names), 1, names)  # xfwm4 publishes itself too
        only = self.tree(app="ZENITY")  # case-insensitive substring
        self.assertEqual([a["name"] for a in only["applications"]], ["zenity"])
        self.assertTrue(find(only, ("push button",), BUTTON))
        none = self.tree(app="no-such-application-here")
        self.assertEqual(none, {"applications": [], "truncated": False})

    def test_max_depth(self):
        full = self.wait_for_button(app="zenity")
        deepest = max(d for _, d in nodes(full))
        button_depth = [d for n, d in nodes(full) if n["name"] == BUTTON][0]
        self.assertGreater(button_depth, 2)
        cut = self.tree(app="zenity", max_depth=2)
        self.assertEqual(max(d for _, d in nodes(cut)), 2)
        self.assertFalse(find(cut, ("push button",), BUTTON))
        self.assertLess(sum(1 for _ in nodes(cut)), sum(1 for _ in nodes(full)))
        one = self.tree(app="zenity", max_depth=1)
        self.assertEqual(max(d for _, d in nodes(one)), 1)
        self.assertGreaterEqual(deepest, button_depth)

    def test_max_nodes_truncates(self):
        self.wait_for_button(app="zenity")
        t = self.tree(app="zenity", max_nodes=3)
        self.assertIs(t["truncated"], True)
        self.assertEqual(sum(1 for _ in nodes(t)), 3)

    def test_bad_parameters_are_400(self):
        for bad in (0, 51, -3, "deep", 2.5):
            self.assertError(self.envd.action("get_accessibility_tree", {"max_depth": bad}),
                             400, "max_depth")
        for bad in (0, 100001, "many"):
            self.assertError(self.envd.action("get_accessibility_tree", {"max_nodes": bad}),
                             400, "max_nodes")
        self.assertError(self.envd.action("get_accessibility_tree", {"app": 5}), 400, "app")
        self.assertError(self.envd.action("get_accessibility_tree", {"depth": 3}), 400, "depth")

    def test_firefox_page_button(self):
        page = os.path.join(self.tmp, "page.html")
        with open(page, "w") as f:
            f.write("<!doctype html><html><head><title>Cubicle a11y page</title></head>"
                    "<body><p>Accessibility test page</p>"
                    "<button type=button>%s</button></body></html>" % FIREFOX_BUTTON)
        profile = os.path.join(self.tmp, "profile")
        os.mkdir(profile)
        ff = self.desk.spawn(["firefox-esr", "--new-instance", "--profile", profile,
                              "file://" + page])
        try:
            def button():
                # The document takes the page's title as its name a moment
                # after the page's content shows up in the tree: wait for both.
                t = self.tree(app="firefox", max_depth=30)
                found = [n for n in find(t, ("push button", "button"), FIREFOX_BUTTON)
                         if "bounds" in n]
                return found and find(t, ("document web",), "Cubicle a11y page") and \
                    (t, found[0])
            tree, b = harness.wait_until(button, 90,
                                         "Firefox's page and its button in the tree", 1.0)
            self.assertTrue(all("firefox" in a["name"].lower() for a in tree["applications"]))
            self.assertIn(b["role"], ("push button", "button"))
            self.assertGreater(b["bounds"]["width"], 0)
            self.assertTrue(find(tree, ("document web",), "Cubicle a11y page"))
        finally:
            try:
                os.killpg(ff.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            ff.wait(timeout=30)


class NoA11yBusTest(unittest.TestCase):
    def test_no_accessibility_bus_is_503(self):
        # No bus launcher and no GTK window manager (which would start one
        # through D-Bus activation); envd's session bus address leads nowhere.
        desk = harness.Desktop(a11y=False, wm=False).start()
        try:
            envd = harness.Envd(desk, env={
                "DBUS_SESSION_BUS_ADDRESS": "unix:path=/nonexistent"}).start()
            try:
                for _ in range(2):  # a failed attempt does not poison the next one
                    r = envd.action("get_accessibility_tree", {})
                    self.assertEqual(r.status, 503, r)
                    err = r.json["error"]
                    self.assertEqual(err["code"], "unavailable", r)
                    self.assertIn("accessibility bus", err["message"])
                    self.assertIn("at-spi-bus-launcher", err["message"])
                    self.assertIn("GNOME_ACCESSIBILITY=1", err["message"])
            finally:
                envd.stop()
        finally:
            desk.stop()


class HeadlessA11yTest(unittest.TestCase):
    def test_no_display_is_409(self):
        envd = harness.Envd(None).start()
        try:
            r = envd.action("get_accessibility_tree", {})
            self.assertEqual(r.status, 409, r)
        finally:
            envd.stop()


if __name__ == "__main__":
    unittest.main()
