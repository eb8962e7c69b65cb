"""cubicled's REST API end to end: real cubicled, real SQLite, real container
computers booted from the built images, real envd inside them."""

import json
import os
import socket
import sys
import time
import unittest

from cubicled import Cubicled, wait_until

srv = None
ws = key = ws2 = key2 = None


def setUpModule():
    global srv, ws, key, ws2, key2
    srv = Cubicled(["--idle-timeout", "600"]).start()
    ws, key = srv.workspace("alpha")
    ws2, key2 = srv.workspace("beta")


def tearDownModule():
    srv.stop()


def bash(cid, cmd, k=None):
    return srv.act(cid, "bash", {"command": cmd}, key=k or key)


class Auth(unittest.TestCase):
    def test_healthz_needs_no_key(self):
        r = srv.req("GET", "/healthz", key=None)
        self.assertEqual(r.status, 200)
        self.assertTrue(r.json["ok"])

    def test_missing_and_wrong_keys(self):
        for k in (None, "ck_" + "0" * 48, srv.admin + "x"):
            r = srv.req("GET", "/v1/computers", key=k)
            self.assertEqual(r.status, 401, k)
            self.assertEqual(r.json["error"]["code"], "unauthorized")

    def test_workspace_key_is_not_admin(self):
        r = srv.req("POST", "/v1/workspaces", {"name": "x"}, key=key)
        self.assertEqual(r.status, 403)
        r = srv.req("POST", "/v1/workspaces/%s/keys" % ws, key=key)
        self.assertEqual(r.status, 403)

    def test_keys_are_stored_hashed(self):
        with open(os.path.join(srv.state, "cubicle.db"), "rb") as f:
            db = f.read()
        for name in os.listdir(srv.state):
            if name.startswith("cubicle.db-"):
                with open(os.path.join(srv.state, name), "rb") as f:
                    db += f.read()
        self.assertNotIn(key.encode(), db)
        self.assertNotIn(srv.admin.encode(), db)


class BadInput(unittest.TestCase):
    def expect(self, method, path, body, status, param=None, k=None):
        r = srv.req(method, path, body, key=k or key)
        self.assertEqual(r.status, status, r)
        self.assertTrue(r.json["error"]["message"])
        if param:
            self.assertEqual(r.json["error"].get("param"), param, r.json)
        return r.json["error"]

    def test_create_validation(self):
        e = self.expect("POST", "/v1/computers", {"kind": "sandbox", "size": "huge"}, 400,
                        "size")
        self.assertIn("xs, sm, md, lg, xl", e["message"])
        e = self.expect("POST", "/v1/computers", {"kind": "desktop", "size": "xs"}, 400, "size")
        self.assertIn("small, medium, large", e["message"])
        self.expect("POST", "/v1/computers", {"kind": "phone"}, 400, "kind")
        self.expect("POST", "/v1/computers", {"kind": "sandbox", "colour": "red"}, 400,
                    "colour")
        self.expect("POST", "/v1/computers", {"kind": "sandbox", "idle_timeout_s": "5"}, 400,
                    "idle_timeout_s")
        self.expect("POST", "/v1/computers", {"kind": "desktop", "resolution": [10, 10]}, 400,
                    "resolution")
        self.expect("POST", "/v1/computers", {"kind": "sandbox", "session": "../etc"}, 400,
                    "session")
        self.expect("POST", "/v1/computers", {"kind": "sandbox", "workspace": ws2}, 400,
                    "workspace")

    def test_malformed_and_huge_bodies(self):
        r = srv.req("POST", "/v1/computers", b'{"kind": ', key=key,
                    headers={"Content-Type": "application/json"})
        self.assertEqual(r.status, 400)
        self.assertIn("JSON", r.json["error"]["message"])
        # Announce 65 MiB and send none of it: the answer must come at once,
        # without cubicled reading (or buffering) the body.
        s = socket.create_connection(("127.0.0.1", srv.port), timeout=10)
        s.sendall(("POST /v1/computers HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n"
                   "Content-Length: %d\r\n\r\n" % (key, 65 << 20)).encode())
        head = s.recv(4096).decode()
        s.close()
        self.assertTrue(head.startswith("HTTP/1.1 413"), head[:100])

    def test_unknown_ids_and_endpoints(self):
        self.expect("GET", "/v1/computers/c-0000000000000000", None, 404)
        self.expect("POST", "/v1/computers/c-0000000000000000/actions/bash", {}, 404)
        self.expect("GET", "/v1/computers/..%2f..", None, 404)
        self.expect("GET", "/v2/nothing", None, 404)

    def test_usage_params(self):
        self.expect("GET", "/v1/usage?from=yesterday", None, 400, "from")


class Sandbox(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.c = srv.computer(key, kind="sandbox", size="sm", metadata={"task": "t1"},
                             external_workspace_id="tenant-7", session="s1")

    def test_runs_as_user_with_limits(self):
        c = self.c
        self.assertEqual(c["state"], "running")
        self.assertEqual(c["metadata"], {"task": "t1"})
        self.assertEqual(c["external_workspace_id"], "tenant-7")
        self.assertEqual(c["limits"]["memory_mb"], 1024)
        out = bash(c["id"], "id -u; nproc; cat /sys/fs/cgroup/memory.max "
                   "/sys/fs/cgroup/memory/memory.limit_in_bytes 2>/dev/null | head -1")
        lines = out["stdout"].split()
        self.assertEqual(lines[0], "1000")

    def test_display_action_is_409(self):
        r = srv.req("POST", "/v1/computers/%s/actions/screenshot" % self.c["id"], {}, key=key)
        self.assertEqual(r.status, 409)
        self.assertIn("display", r.json["error"]["message"])

    def test_other_workspace_sees_nothing(self):
        cid = self.c["id"]
        for method, path, body in (("GET", "/v1/computers/" + cid, None),
                                   ("POST", "/v1/computers/%s/actions/bash" % cid,
                                    {"command": "id"}),
                                   ("POST", "/v1/computers/%s/stop" % cid, None),
                                   ("DELETE", "/v1/computers/" + cid, None),
                                   ("GET", "/v1/computers/%s/files?path=/etc/hostname" % cid,
                                    None)):
            r = srv.req(method, path, body, key=key2)
            self.assertEqual(r.status, 404, (method, path, r))
        listed = srv.ok("GET", "/v1/computers", key=key2)["computers"]
        self.assertNotIn(cid, [x["id"] for x in listed])
        self.assertIn(cid, [x["id"] for x in srv.ok("GET", "/v1/computers", key=key)["computers"]])

    def test_files_round_trip_binary(self):
        data = bytes(range(256)) * 1000
        path = "/v1/computers/%s/files?path=/home/user/blob.bin" % self.c["id"]
        srv.ok("PUT", path, data, key=key)
        r = srv.req("GET", path, key=key)
        self.assertEqual(r.status, 200)
        self.assertEqual(r.body, data)
        r = srv.req("GET", "/v1/computers/%s/files?path=/nope" % self.c["id"], key=key)
        self.assertEqual(r.status, 404)

    def test_session_outlives_computer(self):
        c = srv.computer(key, kind="sandbox", size="xs", session="keep")
        bash(c["id"], "echo kept > /session/output/result.txt")
        srv.ok("DELETE", "/v1/computers/" + c["id"], key=key)
        r = srv.req("GET", "/v1/sessions/keep/files?path=output/result.txt", key=key)
        self.assertEqual((r.status, r.body), (200, b"kept\n"))
        r = srv.req("GET", "/v1/sessions/keep/files?path=../../admin.key", key=key)
        self.assertIn(r.status, (400, 404))
        srv.ok("PUT", "/v1/sessions/keep/files?path=input/in.txt", b"given", key=key)
        c2 = srv.computer(key, kind="sandbox", size="xs", session="keep")
        self.assertEqual(bash(c2["id"], "cat /session/input/in.txt")["stdout"], "given")
        srv.ok("DELETE", "/v1/computers/" + c2["id"], key=key)

    def test_stop_start_keeps_files(self):
        c = srv.computer(key, kind="sandbox", size="xs")
        bash(c["id"], "echo persisted > /home/user/note")
        s = srv.ok("POST", "/v1/computers/%s/stop" % c["id"], key=key)
        self.assertEqual(s["state"], "stopped")
        r = srv.req("POST", "/v1/computers/%s/actions/bash" % c["id"], {"command": "true"},
                    key=key)
        self.assertEqual(r.status, 409)
        s = srv.ok("POST", "/v1/computers/%s/start" % c["id"], key=key)
        self.assertEqual(s["state"], "running")
        self.assertEqual(bash(c["id"], "cat /home/user/note")["stdout"], "persisted\n")
        d = srv.ok("DELETE", "/v1/computers/" + c["id"], key=key)
        self.assertEqual(d["state"], "deleted")
        self.assertFalse(os.path.exists(os.path.join(srv.state, "computers", c["id"])))


class Lifecycle(unittest.TestCase):
    def test_idle_sandbox_is_deleted(self):
        c = srv.ok("POST", "/v1/computers?wait=running", {"kind": "sandbox", "size": "xs",
                                                           "idle_timeout_s": 10},
                   key=key, status=201)
        d = srv.ok("GET", "/v1/computers/%s?wait=deleted&timeout_s=40" % c["id"], key=key)
        self.assertEqual(d["state"], "deleted")

    def test_workspace_limit(self):
        w, k = srv.workspace("limited", max_running=1)
        c = srv.computer(k, kind="sandbox", size="xs")
        r = srv.req("POST", "/v1/computers", {"kind": "sandbox", "size": "xs"}, key=k)
        self.assertEqual(r.status, 429)
        self.assertEqual(r.json["error"]["code"], "limit_reached")
        srv.ok("DELETE", "/v1/computers/" + c["id"], key=k)

    def test_usage_is_metered_per_second(self):
        w, k = srv.workspace("metered")
        t0 = time.time()
        c = srv.computer(k, kind="sandbox", size="md")
        wait_until(lambda: srv.ok("GET", "/v1/usage", key=k)["total"]["running_seconds"] >= 2,
                   20, "two metered seconds")
        srv.ok("DELETE", "/v1/computers/" + c["id"], key=k)
        wall = time.time() - t0
        u = srv.ok("GET", "/v1/usage", key=k)
        comp = [x for x in u["computers"] if x["id"] == c["id"]][0]
        self.assertLessEqual(comp["running_seconds"], wall)
        ms = round(comp["running_seconds"] * 1000)
        # md = 4x the 15000 nano-dollar unit rate.
        self.assertAlmostEqual(comp["cost_nanodollars"], ms * 15000 * 4 // 1000, delta=60)
        other = srv.ok("GET", "/v1/usage", key=key)
        self.assertNotIn(c["id"], [x["id"] for x in other["computers"]])


class Restart(unittest.TestCase):
    def test_kill9_mid_create_then_restart(self):
        w, k = srv.workspace("crashy")
        c = srv.ok("POST", "/v1/computers", {"kind": "sandbox", "size": "xs"}, key=k,
                   status=201)
        running = srv.computer(k, kind="sandbox", size="xs")
        time.sleep(0)  # no wait: the kill lands while the first one boots
        srv.kill9()
        srv.restart()
        for cid in (c["id"], running["id"]):
            st = srv.ok("GET", "/v1/computers/%s?wait=running&timeout_s=60" % cid, key=k)
            self.assertIn(st["state"], ("running", "error"), st)
        st = srv.ok("GET", "/v1/computers/" + running["id"], key=k)
        self.assertEqual(st["state"], "running")
        self.assertEqual(bash(running["id"], "echo alive", k)["stdout"], "alive\n")
        t_end = time.time()
        for cid in (c["id"], running["id"]):
            srv.ok("DELETE", "/v1/computers/" + cid, key=k)
        u = srv.ok("GET", "/v1/usage", key=k)
        comp = [x for x in u["computers"] if x["id"] == running["id"]][0]
        created = time.mktime(time.strptime(running["created_at"][:19], "%Y-%m-%dT%H:%M:%S"))
        created -= time.timezone
        self.assertLessEqual(comp["running_seconds"], t_end - created + 2)
        self.assertGreater(comp["running_seconds"], 0)


if __name__ == "__main__":
    unittest.main()


class Desktop(unittest.TestCase):
    """A desktop computer driven through cubicled, like an agent would."""

    @classmethod
    def setUpClass(cls):
        cls.c = srv.computer(key, kind="desktop", size="small", idle_timeout_s=600)

    def test_screenshot_shows_the_panel(self):
        sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "envd"))
        from pngread import Png
        r = srv.req("POST", "/v1/computers/%s/actions/screenshot" % self.c["id"], {}, key=key)
        self.assertEqual(r.status, 200, r)
        self.assertEqual(r.headers["content-type"], "image/png")
        self.assertEqual((r.headers["x-width"], r.headers["x-height"]), ("1280", "800"))
        png = Png(r.body)
        strip = {png.pixel(x, y) for y in range(0, 24, 2) for x in range(0, 1280, 4)}
        self.assertGreater(len(strip), 8, "the panel strip looks blank")

    def test_typing_into_a_terminal(self):
        cid = self.c["id"]
        w = srv.act(cid, "launch", {"app": "xfce4-terminal", "wait_s": 30}, key=key)["window"]
        self.assertIsNotNone(w)
        srv.act(cid, "focus_window", {"id": w["id"]}, key=key)
        srv.act(cid, "type", {"text": "echo typed-through-cubicle > /tmp/typed.txt\n"}, key=key)
        wait_until(lambda: bash(cid, "cat /tmp/typed.txt 2>/dev/null")["stdout"] ==
                   "typed-through-cubicle\n", 20, "the typed command to run")
        srv.act(cid, "close_window", {"id": w["id"]}, key=key)

    def test_stop_start_keeps_file_and_wallpaper(self):
        c = srv.computer(key, kind="desktop", size="small")
        cid = c["id"]
        # A one-colour wallpaper, written as a PPM and converted by python.
        bash(cid, "python3 -c \"import zlib,struct\n"
                  "def ch(t,d): return struct.pack('>I',len(d))+t+d+struct.pack('>I',zlib.crc32(t+d))\n"
                  "raw=b''.join(b'\\\\x00'+b'\\\\x20\\\\xc0\\\\x40'*64 for _ in range(64))\n"
                  "open('/home/user/green.png','wb').write(b'\\\\x89PNG\\\\r\\\\n\\\\x1a\\\\n'+"
                  "ch(b'IHDR',struct.pack('>IIBBBBB',64,64,8,2,0,0,0))+"
                  "ch(b'IDAT',zlib.compress(raw))+ch(b'IEND',b''))\"")
        r = srv.act(cid, "set_wallpaper", {"path": "/home/user/green.png"}, key=key)
        self.assertEqual(r["method"], "xfconf")
        bash(cid, "echo kept > /home/user/file.txt")
        srv.ok("POST", "/v1/computers/%s/stop" % cid, key=key)
        srv.ok("POST", "/v1/computers/%s/start" % cid, key=key)
        self.assertEqual(bash(cid, "cat /home/user/file.txt")["stdout"], "kept\n")
        prop = bash(cid, "xfconf-query -c xfce4-desktop -l | grep last-image | head -1 | "
                         "xargs -r xfconf-query -c xfce4-desktop -p")["stdout"].strip()
        self.assertEqual(prop, "/home/user/green.png")
        srv.ok("DELETE", "/v1/computers/" + cid, key=key)

    def test_idle_desktop_stops(self):
        c = srv.computer(key, kind="desktop", size="small", idle_timeout_s=10)
        s = srv.ok("GET", "/v1/computers/%s?wait=stopped&timeout_s=40" % c["id"], key=key)
        self.assertEqual(s["state"], "stopped")
        srv.ok("DELETE", "/v1/computers/" + c["id"], key=key)


class WarmPool(unittest.TestCase):
    def test_create_takes_a_running_desktop_and_the_pool_refills(self):
        pool = Cubicled(["--warm-pool", "small=1"]).start()
        try:
            w, k = pool.workspace("fast")
            running = lambda: [c for c in pool.ok("GET", "/v1/computers?state=running")
                               ["computers"] if c["workspace"] != w]
            first = wait_until(running, 60, "the pool's desktop to run")[0]
            c = pool.ok("POST", "/v1/computers", {"kind": "desktop", "metadata": {"n": 1}},
                        key=k, status=201)
            # No ?wait: it is running in the answer itself.
            self.assertEqual((c["id"], c["state"], c["workspace"]), (first["id"], "running", w))
            self.assertEqual(c["metadata"], {"n": 1})
            self.assertEqual(pool.act(c["id"], "bash", {"command": "id -u"}, key=k)["stdout"],
                             "1000\n")
            refill = wait_until(running, 60, "the pool to refill")[0]
            self.assertNotEqual(refill["id"], c["id"])
            # The claimed computer bills the workspace from the claim on.
            u = pool.ok("GET", "/v1/usage", key=k)
            self.assertEqual([x["id"] for x in u["computers"]], [c["id"]])
        finally:
            pool.stop()
