"""The Python SDK (sdk/python) against a real cubicled with real container
computers: lifecycle, every family of actions with an effect we can
observe, streamed files, typed exceptions, stream URLs."""

import http.client
import inspect
import io
import os
import re
import struct
import sys
import unittest
import urllib.parse

from cubicled import Cubicled, wait_until

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "sdk", "python"))
import cubicle  # noqa: E402
from cubicle import Computer  # noqa: E402

srv = None
client = None
ws = None
sandbox = desktop = None


def setUpModule():
    global srv, client, ws, sandbox, desktop
    srv = Cubicled().start()
    ws, key = srv.workspace("sdk")
    client = cubicle.Client("http://127.0.0.1:%d" % srv.port, key)
    sandbox = Computer.create(kind="sandbox", size="xs", metadata={"by": "sdk"},
                              client=client).__enter__()
    desktop = Computer.create(kind="desktop", resolution=(1024, 768), client=client).__enter__()


def tearDownModule():
    for c in (sandbox, desktop):
        if c:
            c.__exit__(None, None, None)
    client.close()
    srv.stop()


def png_size(data):
    assert data[:8] == b"\x89PNG\r\n\x1a\n", data[:16]
    return struct.unpack(">II", data[16:24])


class Lifecycle(unittest.TestCase):
    def test_created_running_and_listed(self):
        self.assertEqual((sandbox.state, sandbox.kind, sandbox.size), ("running", "sandbox", "xs"))
        self.assertEqual(sandbox.metadata, {"by": "sdk"})
        self.assertEqual(desktop.data["resolution"], [1024, 768])
        ids = [c.id for c in Computer.list(client=client)]
        self.assertIn(sandbox.id, ids)
        self.assertEqual({c.kind for c in Computer.list(kind="desktop", client=client)},
                         {"desktop"})
        self.assertEqual(Computer.get(sandbox.id, client=client).id, sandbox.id)

    def test_context_manager_deletes(self):
        with Computer.create(kind="sandbox", size="xs", client=client) as c:
            self.assertEqual(c.bash("echo inside").stdout, "inside\n")
            cid = c.id
        self.assertEqual(srv.ok("GET", "/v1/computers/" + cid)["state"], "deleted")
        # An exception in the block still deletes it, and propagates.
        with self.assertRaises(ZeroDivisionError):
            with Computer.create(kind="sandbox", size="xs", client=client) as c:
                cid = c.id
                1 / 0
        self.assertEqual(srv.ok("GET", "/v1/computers/" + cid)["state"], "deleted")

    def test_stop_start_refresh(self):
        with Computer.create(kind="sandbox", size="xs", wait=False, client=client) as c:
            self.assertIn(c.state, ("provisioning", "running"))
            self.assertEqual(c.wait("running").state, "running")
            c.write_file("/home/user/kept", "still here")
            self.assertEqual(c.stop().state, "stopped")
            with self.assertRaises(cubicle.Conflict) as cm:
                c.bash("true")
            self.assertEqual(cm.exception.code, "conflict")
            self.assertEqual(c.start().state, "running")
            self.assertEqual(c.read_file("/home/user/kept"), b"still here")
            c.data["state"] = "stale"
            self.assertEqual(c.refresh().state, "running")

    def test_usage(self):
        u = client.usage()
        self.assertIn(sandbox.id, [c["id"] for c in u["computers"]])


class Shell(unittest.TestCase):
    def test_bash_result(self):
        r = sandbox.bash("echo out; echo err >&2; exit 7")
        self.assertEqual((r.exit_code, r.stdout, r.stderr, r.ok), (7, "out\n", "err\n", False))
        self.assertTrue(sandbox.bash("true").ok)
        self.assertEqual(sandbox.bash("pwd", cwd="/tmp").stdout, "/tmp\n")
        self.assertEqual(sandbox.bash("echo $X", env={"X": "y"}).stdout, "y\n")

    def test_bash_timeout_raises_with_the_partial_output(self):
        with self.assertRaises(cubicle.Timeout) as cm:
            sandbox.bash("echo partial; sleep 30", timeout_s=1)
        self.assertEqual(cm.exception.code, "timeout")
        self.assertEqual(cm.exception.status, 504)
        self.assertEqual(cm.exception.result.stdout, "partial\n")

    def test_python(self):
        self.assertEqual(sandbox.python("print(sum(range(10)))").stdout, "45\n")


class Files(unittest.TestCase):
    def test_write_and_read_bytes_str_and_streams(self):
        sandbox.write_file("/tmp/s.txt", "héllo ✓")
        self.assertEqual(sandbox.read_file("/tmp/s.txt").decode(), "héllo ✓")
        data = os.urandom(5 << 20)
        self.assertEqual(sandbox.write_file("/tmp/big.bin", data)["size"], len(data))
        self.assertEqual(sandbox.read_file("/tmp/big.bin"), data)
        # Streamed from and to files.
        src = io.BytesIO(b"prefix" + data)
        src.read(6)
        sandbox.write_file("/tmp/from-stream.bin", src)
        sink = io.BytesIO()
        self.assertEqual(sandbox.read_file("/tmp/from-stream.bin", to=sink), len(data))
        self.assertEqual(sink.getvalue(), data)
        path = os.path.join(srv.state, "sdk-download.bin")
        with open(path, "wb") as f:
            f.write(data[:1000])
        with open(path, "rb") as f:
            sandbox.write_file("/tmp/from-file.bin", f)
        sandbox.read_file("/tmp/from-file.bin", to=path + ".2")
        with open(path + ".2", "rb") as f:
            self.assertEqual(f.read(), data[:1000])

    def test_missing_file(self):
        with self.assertRaises(cubicle.NotFound) as cm:
            sandbox.read_file("/tmp/nope")
        self.assertEqual(cm.exception.status, 404)


class Desktop(unittest.TestCase):
    def test_recording(self):
        r = desktop.start_recording()
        self.assertEqual((r["state"], r["width"], r["height"]), ("recording", 1024, 768))
        desktop.move_cursor(7, 8)
        self.assertEqual([x["id"] for x in desktop.recordings()], [r["id"]])
        done = desktop.stop_recording(r["id"], keep=True)
        self.assertEqual((done["state"], done["keep"], done["actions"]), ("stopped", True, 1))
        track = desktop.recording_actions(r["id"])["actions"]
        self.assertEqual([(a["action"], a["params"], a["status"]) for a in track],
                         [("move_cursor", {"x": 7, "y": 8}, 200)])
        webm = desktop.download_recording(r["id"])
        self.assertEqual(webm[:4], b"\x1a\x45\xdf\xa3")  # EBML: a WebM
        self.assertEqual(len(webm), done["bytes"])
        self.assertTrue(desktop.delete_recording(r["id"])["deleted"])
        with self.assertRaises(cubicle.NotFound):
            desktop.recording_actions(r["id"])

    def test_mouse(self):
        desktop.left_click(100, 200)
        self.assertEqual(desktop.get_cursor_position()["x"], 100)
        desktop.click(300, 400, button="right")
        desktop.key("Escape")
        pos = desktop.get_cursor_position()
        self.assertEqual((pos["x"], pos["y"]), (300, 400))
        self.assertEqual(desktop.move_cursor(5, 6)["x"], 5)
        # Away from the panel, whose menu button would grab the pointer.
        self.assertEqual(desktop.drag(200, 300, 400, 500)["y"], 500)
        desktop.double_click(600, 600)
        self.assertTrue(desktop.scroll("down", 2, x=500, y=500)["ok"])
        self.assertTrue(desktop.scroll_up(1)["ok"])
        self.assertEqual(desktop.get_screen_size(), {"width": 1024, "height": 768})

    def test_keyboard_into_a_terminal(self):
        win = desktop.launch("xfce4-terminal", wait_s=20)["window"]
        self.assertTrue(win)
        self.assertIn(win["id"], [w["id"] for w in desktop.windows()])
        desktop.set_window_size(win["id"], 600, 400)
        size = desktop.get_window_size(win["id"])
        # A terminal rounds its size to whole character cells.
        self.assertLess(abs(size["width"] - 600) + abs(size["height"] - 400), 30, size)
        desktop.set_window_position(win["id"], 50, 60)
        pos = desktop.get_window_position(win["id"])
        self.assertEqual((pos["x"], pos["y"]), (50, 60))
        desktop.focus_window(win["id"])
        desktop.type("echo typed-by-sdk > /tmp/typed")
        desktop.key("Return")
        wait_until(lambda: desktop.bash("cat /tmp/typed 2>/dev/null").stdout == "typed-by-sdk\n",
                   20, "the typed command to run")
        desktop.hotkey("ctrl", "shift", "q")
        wait_until(lambda: win["id"] not in [w["id"] for w in desktop.windows()], 20,
                   "the terminal to close")

    def test_clipboard(self):
        desktop.set_clipboard("from the sdk ✓")
        self.assertEqual(desktop.get_clipboard(), "from the sdk ✓")

    def test_screenshots(self):
        self.assertEqual(png_size(desktop.screenshot()), (1024, 768))
        self.assertEqual(png_size(desktop.screenshot(max_width=512)), (512, 384))
        self.assertEqual(png_size(desktop.screenshot(region=(10, 20, 300, 100))), (300, 100))
        self.assertEqual(desktop.screenshot(format="jpeg", quality=50)[:3], b"\xff\xd8\xff")
        b64 = desktop.screenshot_base64(max_width=256)
        self.assertEqual((b64["width"], b64["mime_type"]), (256, "image/png"))

    def test_desktop_and_accessibility(self):
        self.assertEqual(desktop.get_desktop_environment()["name"], "xfce")
        tree = desktop.get_accessibility_tree(max_depth=2)
        self.assertIn("xfce4-panel", [a["name"] for a in tree["applications"]])

    def test_stream_url(self):
        url = desktop.stream_url(ttl_s=30)
        u = urllib.parse.urlsplit(url)
        self.assertEqual(u.path, "/embed/" + desktop.id)
        conn = http.client.HTTPConnection(u.hostname, u.port, timeout=30)
        conn.request("GET", u.path + "?" + u.query)
        status = conn.getresponse().status
        conn.close()
        self.assertEqual(status, 200)
        self.assertIn("view_only=1", desktop.stream_url(view_only=True))
        self.assertEqual(desktop.revoke_streams()["ok"], True)

    def test_computer_use_and_connect_tokens(self):
        # The same surface as the TypeScript SDK (sdk/js).
        out = desktop.computer_use({"type": "tool_use", "id": "toolu_9", "name": "computer",
                                    "input": {"action": "cursor_position"}})
        self.assertEqual((out["type"], out["tool_use_id"]), ("tool_result", "toolu_9"))
        out = desktop.computer_use({"type": "move", "x": 5, "y": 6}, dialect="openai")
        self.assertEqual(out["type"], "computer_call_output")
        tok = client.connect_token(kind="sandbox", ttl_s=60)
        self.assertEqual(tok["kind"], "sandbox")
        self.assertIn("--connect", tok["command"])


class Templates(unittest.TestCase):
    def test_create_follow_start_delete(self):
        seen = []
        t = client.templates.create("sdk-tpl", apt=["jq"], run=["echo from-the-sdk"],
                                    files={"/etc/sdk-motd": "made by the sdk\n"},
                                    on_log=seen.append)
        self.assertEqual((t["state"], t["name"]), ("ready", "sdk-tpl"))
        # The build's steps, a cache hit, or a layer hit whose image is made
        # again over this checkout's base (a new envd: every CI clone's).
        self.assertTrue(any(re.search(r"step|cache hit|layer tpl-layer-\w+ is in the cache", x)
                            for x in seen), seen)
        self.assertIn("sdk-tpl", [x["name"] for x in client.templates.list()])
        with Computer.create(template="sdk-tpl", client=client) as c:
            self.assertEqual(c.kind, "sandbox")
            self.assertEqual(c.bash("cat /etc/sdk-motd; jq -n 7").stdout,
                             "made by the sdk\n7\n")
            with self.assertRaises(cubicle.Conflict):
                client.templates.delete("sdk-tpl")
        client.templates.delete("sdk-tpl")
        with self.assertRaises(cubicle.NotFound):
            client.templates.get("sdk-tpl")

    def test_failed_build_raises(self):
        with self.assertRaises(cubicle.TemplateFailed) as cm:
            client.templates.create("sdk-bad", run=["exit 4"])
        self.assertIn("exit code 4", str(cm.exception))
        client.templates.delete("sdk-bad")
        with self.assertRaises(cubicle.InvalidParameter) as cm:
            client.templates.create("bad name", run=["true"])
        self.assertEqual(cm.exception.param, "name")


class Errors(unittest.TestCase):
    def test_preview_and_cdp(self):
        p = sandbox.preview(8124, ttl_s=60)
        self.assertTrue(p["url"].startswith("http://8124-%s.localhost:" % sandbox.id))
        self.assertEqual(sandbox.preview_url(8125).split("/")[2].split(".")[0],
                         "8125-" + sandbox.id)
        self.assertEqual({x["port"] for x in sandbox.previews()}, {8124, 8125})
        sandbox.revoke_preview(8125)
        self.assertEqual([x["port"] for x in sandbox.previews()], [8124])
        with self.assertRaises(cubicle.InvalidParameter) as cm:
            sandbox.preview(0)
        self.assertEqual(cm.exception.param, "port")
        with self.assertRaises(cubicle.Conflict):
            sandbox.cdp()
        c = desktop.cdp(ttl_s=60)
        self.assertIn("/devtools/browser/", c["ws_url"])
        self.assertTrue(c["http_url"].startswith("http://127.0.0.1:"))

    def test_unknown_computer(self):
        with self.assertRaises(cubicle.NotFound) as cm:
            Computer.get("c-0000000000000000", client=client)
        e = cm.exception
        self.assertEqual((e.code, e.status), ("not_found", 404))
        self.assertRegex(e.request_id, r"^[0-9a-f]{16}$")
        self.assertIn("c-0000000000000000", e.message)
        self.assertIsInstance(e, cubicle.CubicleError)

    def test_bad_parameters_name_the_parameter(self):
        with self.assertRaises(cubicle.InvalidParameter) as cm:
            Computer.create(kind="sandbox", size="huge", client=client)
        self.assertEqual((cm.exception.code, cm.exception.param), ("invalid_parameter", "size"))
        with self.assertRaises(cubicle.InvalidParameter) as cm:
            desktop.left_click(1, 99999)
        self.assertEqual(cm.exception.param, "y")
        with self.assertRaises(cubicle.InvalidParameter) as cm:
            desktop.left_click(1, 2, colour="red")
        self.assertEqual(cm.exception.param, "colour")
        with self.assertRaises(TypeError):
            desktop.move_cursor(1)

    def test_display_action_on_a_sandbox(self):
        with self.assertRaises(cubicle.Conflict) as cm:
            sandbox.screenshot()
        self.assertIn("display", cm.exception.message)

    def test_keys_and_reachability(self):
        with self.assertRaises(cubicle.Unauthorized) as cm, \
                cubicle.Client(client.url, "ck_wrong") as wrong:
            Computer.list(client=wrong)
        self.assertEqual(cm.exception.status, 401)
        with self.assertRaises(cubicle.ConnectionFailed):
            Computer.list(client=cubicle.Client("http://127.0.0.1:1", "k"))

    def test_methods_are_the_action_names(self):
        for name in ("screenshot", "left_click", "type", "key", "hotkey", "scroll", "windows",
                     "get_accessibility_tree", "bash", "python", "read_file", "write_file",
                     "set_window_position", "get_desktop_environment", "set_wallpaper"):
            self.assertTrue(callable(getattr(Computer, name)), name)
        self.assertEqual(str(inspect.signature(Computer.hotkey)), "(self, *keys, **params)")


if __name__ == "__main__":
    unittest.main()
