"""Bring your own machine (docs/byo.md): a second "machine" on this host —
envd on its own Xvfb desktop, in its own network namespace whose only
route is a veth to the test's cubicled — started with the `command` the
API gives, driven through cubicled."""

import base64
import hashlib
import http.client
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(__file__))
from cubicled import Cubicled, wait_until  # noqa: E402
import harness  # noqa: E402
from harness import http_call  # noqa: E402
from wsclient import WebSocket  # noqa: E402
from pngread import Png  # noqa: E402  (tests/envd, on the path through cubicled)
from recorder import Recorder, focus  # noqa: E402
from xevlog import png_of  # noqa: E402

REPO = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
# The window the desktop test draws on the machine's display, and its colour.
COLOR = (0xcc, 0x33, 0x66)
BUTTON = "CubicleByoApprove"

HOST_IP, MACHINE_IP = "10.213.%d.1" % (os.getpid() % 200), "10.213.%d.2" % (os.getpid() % 200)


def sh(*argv, check=True):
    return subprocess.run(argv, check=check, capture_output=True, text=True)


class VethCubicled(Cubicled):
    """cubicled listening on the veth's host address only."""

    def start(self, port=0):
        self.args = ["--listen", "%s:%d" % (HOST_IP, port)]
        return super().start(port)

    def req(self, method, path, body=None, key=True, headers=None, timeout=180):
        conn = http.client.HTTPConnection(HOST_IP, self.port, timeout=timeout)
        return http_call(conn, method, path, body, self.admin if key is True else key, headers)


class Machine:
    """envd --connect in the namespace, on the desktop's display."""

    def __init__(self, ns, command, display=None, home=None):
        self.home = home or tempfile.mkdtemp(prefix="cubicle-byo-home-")
        env = {"PATH": harness.BIN + ":/usr/bin:/bin", "HOME": self.home}
        if display:
            env["DISPLAY"] = display
        self.err = open(os.path.join(self.home, "envd.log"), "ab")
        self.proc = subprocess.Popen(["nsenter", "-t", ns, "-n", "sh", "-c", command], env=env,
                                     stdout=subprocess.DEVNULL, stderr=self.err,
                                     stdin=subprocess.DEVNULL, start_new_session=True)

    def log(self):
        with open(os.path.join(self.home, "envd.log"), "rb") as f:
            return f.read().decode(errors="replace")

    def stop(self):
        # The shell forks envd (the here-document): end its whole session.
        try:
            os.killpg(self.proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        wait_until(lambda: not subprocess.run(["pgrep", "-s", str(self.proc.pid)],
                                              capture_output=True).stdout, 10, "envd gone")
        self.err.close()


@unittest.skipUnless(os.geteuid() == 0, "needs root (network namespaces)")
class TestByo(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        # The namespace is held by a process of the test (not a name under
        # /run/netns, which other tests' cleanups on this shared host may
        # unmount): it goes when the holder does, the veth with it.
        cls.holder = subprocess.Popen(["unshare", "--net", "sleep", "infinity"],
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        cls.desk = cls.d = None
        cls.machines = []
        cls.veth = "zbyo" + secrets.token_hex(2)
        try:
            cls._set_up()
        except BaseException:
            cls.tearDownClass()
            raise

    @classmethod
    def _set_up(cls):
        own = os.readlink("/proc/self/ns/net")
        wait_until(lambda: os.readlink("/proc/%d/ns/net" % cls.holder.pid) != own, 5,
                   "the namespace")
        cls.ns = str(cls.holder.pid)
        sh("ip", "link", "add", cls.veth, "type", "veth", "peer", "name", "byo0", "netns",
           cls.ns)
        sh("ip", "addr", "add", HOST_IP + "/30", "dev", cls.veth)
        sh("ip", "link", "set", cls.veth, "up")
        inside = ["nsenter", "-t", cls.ns, "-n", "ip"]
        sh(*inside, "addr", "add", MACHINE_IP + "/30", "dev", "byo0")
        sh(*inside, "link", "set", "byo0", "up")
        sh(*inside, "link", "set", "lo", "up")
        # A workstation's session: a window manager (the windows action reads
        # its client list) and the AT-SPI bus, which advertises itself on the
        # display's root window; its daemon listens on a path socket, so envd
        # in the namespace reaches it as it reaches the X server.
        cls.desk = harness.Desktop(wm=True, a11y=True)
        cls.desk.start()
        cls.d = VethCubicled().start()
        cls.ws, cls.key = cls.d.workspace("byo")

    @classmethod
    def tearDownClass(cls):
        for m in cls.machines:
            m.stop()
        if cls.d:
            cls.d.stop()
        if cls.desk:
            cls.desk.stop()
        sh("ip", "link", "del", cls.veth, check=False)
        cls.holder.kill()
        cls.holder.wait()
        for m in cls.machines:
            shutil.rmtree(m.home, ignore_errors=True)

    def connect(self, kind="desktop", display=True, **kw):
        self.seen = {c["id"] for c in
                     self.d.ok("GET", "/v1/computers", key=self.key)["computers"]}
        t = self.d.ok("POST", "/v1/connect-tokens", dict(kind=kind, **kw), key=self.key,
                      status=201)
        self.assertIn("--token-file -", t["command"])
        self.assertNotIn(t["token"], t["command"].splitlines()[0])  # never in an argv
        m = Machine(self.ns, t["command"], self.desk.display if display else None)
        self.machines.append(m)
        return t, m

    def machine_state(self, cid):
        return self.d.ok("GET", "/v1/computers/" + cid, key=self.key)["state"]

    def wait_machine(self, m, state="running", timeout=30):
        def found():
            for c in self.d.ok("GET", "/v1/computers", key=self.key)["computers"]:
                if c["isolation"] == "byo" and c["state"] == state and \
                        c["id"] not in self.seen:
                    return c
            return None
        return wait_until(found, timeout, "a machine " + state + "; envd: " + m.log())

    def setUp(self):
        self.seen = set()

    def test_desktop_through_the_tunnel(self):
        t, m = self.connect()
        c = self.wait_machine(m)
        cid = c["id"]
        self.assertEqual(c["kind"], "desktop")
        self.assertEqual(c["resolution"], [1280, 800])
        self.assertTrue(c["hostname"])
        # Screenshot, a click witnessed on that display, bash.
        r = self.d.req("POST", "/v1/computers/%s/actions/screenshot" % cid, {}, key=self.key)
        self.assertEqual(r.status, 200)
        self.assertEqual(r.body[:8], b"\x89PNG\r\n\x1a\n")
        self.d.act(cid, "move_cursor", {"x": 321, "y": 234}, key=self.key)
        out = self.desk.run(["xdotool", "getmouselocation", "--shell"]).stdout
        self.assertIn("X=321", out)
        self.assertIn("Y=234", out)
        res = self.d.act(cid, "bash", {"command": "echo $((6*7))"}, key=self.key)
        self.assertEqual(res["stdout"], "42\n")
        # A preview of a server on the machine: one more stream of its link.
        with open(os.path.join(m.home, "hello.txt"), "w") as f:
            f.write("from the machine")
        server = subprocess.Popen(["nsenter", "-t", self.ns, "-n", "python3", "-m", "http.server",
                                   "8126", "--bind", "127.0.0.1", "--directory", m.home],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.addCleanup(server.wait)
        self.addCleanup(server.kill)
        g = self.d.ok("POST", "/v1/computers/%s/previews" % cid, {"port": 8126}, key=self.key,
                      status=201)
        cookie = self.d.preview_get(g["url"]).headers["set-cookie"].split(";")[0]
        wait_until(lambda: self.d.preview_get(g["url"].split("/")[2], "/hello.txt", headers={
            "Cookie": cookie}).body == b"from the machine", 30, "the machine's server")
        # 100 MB both ways.
        blob = os.urandom(1 << 20) * 100
        path = os.path.join(m.home, "big.bin")
        r = self.d.req("PUT", "/v1/computers/%s/files?path=%s" % (cid, path), blob,
                       key=self.key, headers={"Content-Type": "application/octet-stream"})
        self.assertEqual(r.status, 200, r.body[:300])
        with open(path, "rb") as f:
            self.assertEqual(hashlib.sha256(f.read()).hexdigest(),
                             hashlib.sha256(blob).hexdigest())
        r = self.d.req("GET", "/v1/computers/%s/files?path=%s" % (cid, path), key=self.key)
        self.assertEqual(r.status, 200)
        self.assertEqual(hashlib.sha256(r.body).digest(), hashlib.sha256(blob).digest())
        # The live view through the gateway: the RFB greeting of envd's server.
        tok = self.d.ok("POST", "/v1/computers/%s/stream" % cid, {"ttl_s": 60},
                        key=self.key, status=201)["token"]
        ws = WebSocket(HOST_IP, self.d.port, "/v1/computers/%s/stream?token=%s" % (cid, tok))
        self.assertEqual(ws.recv_exactly(12), b"RFB 003.008\n")
        ws.close()
        # stop/start are 409: the machine is yours to power.
        for op in ("stop", "start"):
            r = self.d.req("POST", "/v1/computers/%s/%s" % (cid, op), {}, key=self.key)
            self.assertEqual(r.status, 409, r.body)
        # Another workspace sees nothing.
        _, other = self.d.workspace("other")
        self.assertEqual(self.d.req("GET", "/v1/computers/" + cid, key=other).status, 404)
        r = self.d.req("POST", "/v1/computers/%s/actions/bash" % cid, {"command": "id"},
                       key=other)
        self.assertEqual(r.status, 404)
        # The link drops: offline, actions 409; back: running, same machine.
        sh("ip", "link", "set", self.veth, "down")
        wait_until(lambda: self.machine_state(cid) == "offline", 15, "offline")
        r = self.d.req("POST", "/v1/computers/%s/actions/bash" % cid, {"command": "id"},
                       key=self.key)
        self.assertEqual(r.status, 409)
        self.assertIn("not connected", r.json["error"]["message"])
        sh("ip", "link", "set", self.veth, "up")
        wait_until(lambda: self.machine_state(cid) == "running", 60,
                   "running again; envd: " + m.log()[-1500:])
        self.assertEqual(self.d.act(cid, "bash", {"command": "echo back"},
                                    key=self.key)["stdout"], "back\n")
        # cubicled dies and comes back: the machine reconnects by itself.
        self.d.kill9()
        self.d.restart()
        wait_until(lambda: self.machine_state(cid) == "running", 40,
                   "running after a restart; envd: " + m.log()[-2000:])
        # Its connected seconds show in usage, at no cost.
        u = self.d.ok("GET", "/v1/usage", key=self.key)
        mine = [x for x in u["computers"] if x["id"] == cid][0]
        self.assertGreater(mine["running_seconds"], 0)
        self.assertEqual(mine["cost_nanodollars"], 0)
        # DELETE while connected: envd exits and says why; its credential is dead.
        self.d.ok("DELETE", "/v1/computers/" + cid, key=self.key)
        self.assertEqual(m.proc.wait(15), 3)
        self.assertIn("deleted through the API", m.log())
        again = Machine(self.ns, "envd --connect http://%s:%d" % (HOST_IP, self.d.port),
                        home=m.home)
        self.machines.append(again)
        self.assertEqual(again.proc.wait(30), 3)
        self.assertIn("refused this machine's credential", again.log())

    def test_desktop_drives_like_any_computer(self):
        # What the test draws on the machine's display: a window of a known
        # colour that logs the events X delivers to it (the witness), and a
        # GTK dialog on the accessibility bus.
        rec = Recorder(self.desk, geometry="360x240+60+60", color="%02x%02x%02x" % COLOR,
                       title="byo-recorder")
        self.addCleanup(rec.stop)
        zenity = self.desk.spawn(["zenity", "--question", "--title=Byo question", "--text=Approve?",
                         "--ok-label=" + BUTTON])
        self.addCleanup(zenity.kill)
        _, m = self.connect()
        cid = self.wait_machine(m)["id"]

        def act(name, params=None):
            return self.d.act(cid, name, params, key=self.key)

        def pressed_at(x, y, what):
            rec.wait_for(lambda evs: any(e["type"] == "press" and e["button"] == 1 and
                                         (e["x_root"], e["y_root"]) == (x, y) for e in evs),
                         15, what + " at %d,%d witnessed on the display" % (x, y))

        # A point of the window away from every point the test clicks (a
        # screenshot may draw the cursor).
        spot = (rec.x + 8, rec.y + 8)

        def shows_window(png):
            self.assertEqual((png.width, png.height), (1280, 800))
            self.assertEqual(tuple(png.pixel(*spot)[:3]), COLOR)

        # The windows action lists the window the test opened.
        listed = [w for w in act("windows")["windows"] if w["title"] == "byo-recorder"]
        self.assertEqual([w["id"] for w in listed], [rec.window])
        # The accessibility tree: envd found the AT-SPI bus through the root
        # window (its environment has no session bus) and sees zenity's button.
        def button():
            tree = act("get_accessibility_tree", {"app": "zenity"})
            stack = list(tree["applications"])
            while stack:
                n = stack.pop()
                if n["role"] == "push button" and n["name"] == BUTTON:
                    return n
                stack.extend(n["children"])
            return None
        self.assertIn("click", wait_until(button, 30, "zenity's button in the tree")["actions"])
        # A click and typing, witnessed by the window they went to.
        focus(self.desk, rec.window)
        x, y = rec.center()
        act("left_click", {"x": x, "y": y})
        pressed_at(x, y, "the left_click action")
        rec.clear()
        act("type", {"text": "byo!"})
        keys = rec.wait_for(lambda evs: [e["name"] for e in evs if e["type"] == "key_press"
                                         and e["name"] != "Shift_L"][-1:] == ["exclam"],
                            15, "the typed text's last key")
        self.assertEqual([e["name"] for e in keys if e["type"] == "key_press"
                          and e["name"] != "Shift_L"], ["b", "y", "o", "exclam"])

        # MCP: a screenshot showing the window, a click witnessed.
        def mcp(tool, **args):
            r = self.d.req("POST", "/mcp", {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                                            "params": {"name": tool, "arguments": dict(
                                                args, computer_id=cid)}},
                           key=self.key, headers={"Accept": "application/json, text/event-stream"})
            self.assertEqual(r.status, 200, r.body[:300])
            res = r.json["result"]
            self.assertNotIn("isError", res, res)
            return res
        image = mcp("screenshot")["content"][0]
        self.assertEqual(image["mimeType"], "image/png")
        shows_window(Png(base64.b64decode(image["data"])))
        rec.clear()
        mcp("left_click", x=x - 40, y=y - 30)
        pressed_at(x - 40, y - 30, "MCP's left_click")

        # Both computer-use dialects: a screenshot and a click each.
        def cu(body):
            r = self.d.req("POST", "/v1/computers/%s/computer-use" % cid, body, key=self.key)
            self.assertEqual(r.status, 200, r.body[:300])
            return r.json
        shows_window(png_of(cu({"action": "screenshot"})))
        rec.clear()
        cu({"action": "left_click", "coordinate": [x + 50, y + 20]})
        pressed_at(x + 50, y + 20, "Anthropic's left_click")
        shows_window(png_of(cu({"type": "screenshot"})))
        rec.clear()
        out = cu({"type": "click", "button": "left", "x": x - 60, "y": y + 40})
        self.assertEqual(out["type"], "computer_call_output")
        pressed_at(x - 60, y + 40, "OpenAI's click")

        # The embed page in Chromium shows the machine's screen: the window's
        # colour where it is on the display, through the gateway and the link.
        t = self.d.ok("POST", "/v1/computers/%s/stream" % cid, {"ttl_s": 120}, key=self.key,
                      status=201)
        self.assertIn(HOST_IP, t["embed_url"])
        r = subprocess.run(["node", os.path.join(REPO, "tests", "browser", "embed_pixel.mjs"),
                            t["embed_url"], str(spot[0]), str(spot[1]),
                            "%02x%02x%02x" % COLOR],
                           capture_output=True, text=True, timeout=120)
        self.assertEqual(r.returncode, 0, r.stderr[-2000:])
        self.assertEqual(json.loads(r.stdout), {"width": 1280, "height": 800})
        self.d.ok("DELETE", "/v1/computers/" + cid, key=self.key)
        self.assertEqual(m.proc.wait(15), 3)

    def test_tokens_refused(self):
        # A used token: the second machine is turned away with the reason.
        t, m = self.connect(kind="sandbox", display=False)
        c = self.wait_machine(m)
        self.assertEqual(c["kind"], "sandbox")
        second = Machine(self.ns, t["command"])
        self.machines.append(second)
        self.assertEqual(second.proc.wait(30), 3)
        self.assertIn("not valid", second.log())
        # A forged one: refused at the upgrade.
        forged = t["command"].replace(t["token"], "cbt_%s_%s" % (secrets.token_hex(8),
                                                                 secrets.token_hex(16)))
        f = Machine(self.ns, forged)
        self.machines.append(f)
        self.assertEqual(f.proc.wait(30), 3)
        self.assertIn("not valid", f.log())
        self.d.ok("DELETE", "/v1/computers/" + c["id"], key=self.key)
        self.assertEqual(m.proc.wait(15), 3)


if __name__ == "__main__":
    unittest.main()
