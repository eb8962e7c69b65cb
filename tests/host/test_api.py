"""cubicled's REST API end to end: real cubicled, real SQLite, real container
computers booted from the built images, real envd inside them."""

import calendar
import json
import os
import re
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import threading
import time
import unittest

from cubicled import Cubicled, http_call, wait_until
import harness  # noqa: E402 (found through cubicled's path)
from leaks import Footprint, alive, driver_state, states
from wsclient import WebSocket

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "envd"))
from pngread import Png  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..", "..")

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


def size_table():
    """host/core/sizes.c's table: {name: (kind, millicpus, memory_mb, disk_mb, pids_max)}."""
    with open(os.path.join(ROOT, "host", "core", "sizes.c")) as f:
        rows = re.findall(r'\{"(\w+)", "(desktop|sandbox)", (\d+), (\d+), (\d+), (\d+), \d+\}',
                          f.read())
    table = {r[0]: (r[1],) + tuple(int(x) for x in r[2:]) for r in rows}
    assert len(table) == 8, table
    return table


def documented_codes():
    """docs/api.md's error table: {code: status}."""
    with open(os.path.join(ROOT, "docs", "api.md")) as f:
        rows = re.findall(r"^\| (\d{3}) \| `(\w+)` \|", f.read(), re.M)
    return {code: int(status) for status, code in rows}


def parse_utc(text):
    """An API time ("2026-11-22T08:00:00.123Z") as Unix seconds."""
    t = time.strptime(text[:19], "%Y-%m-%dT%H:%M:%S")
    return calendar.timegm(t) + float("0" + text[19:-1])


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

    def test_each_bad_input_gets_the_documented_code(self):
        docs = documented_codes()
        huge = socket.create_connection(("127.0.0.1", srv.port), timeout=10)
        huge.sendall(("POST /v1/computers HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n"
                      "Content-Length: %d\r\n\r\n" % (key, 65 << 20)).encode())
        answer = b""
        while b"}}" not in answer:
            chunk = huge.recv(4096)
            if not chunk:
                break
            answer += chunk
        huge.close()
        head, body = answer.split(b"\r\n\r\n", 1)
        cases = {
            "malformed JSON": (srv.req("POST", "/v1/computers", b'{"kind": ', key=key,
                                       headers={"Content-Type": "application/json"}),
                               "bad_request"),
            "huge body": (harness.Response(int(head.split()[1]), {}, body), "too_large"),
            "wrong type": (srv.req("POST", "/v1/computers",
                                   {"kind": "sandbox", "idle_timeout_s": "5"}, key=key),
                           "invalid_parameter"),
            "unknown id": (srv.req("GET", "/v1/computers/c-0000000000000000", key=key),
                           "not_found"),
            "missing key": (srv.req("GET", "/v1/computers", key=None), "unauthorized"),
        }
        for what, (r, code) in cases.items():
            err = json.loads(r.body)["error"]
            self.assertEqual(err["code"], code, what)
            self.assertEqual(r.status, docs[code], "%s: %s is %d in docs/api.md" %
                             (what, code, docs[code]))
            self.assertTrue(err["message"], what)

    def test_create_query_is_checked_before_anything_is_created(self):
        def ids():
            return {c["id"] for c in srv.ok("GET", "/v1/computers", key=key)["computers"]}
        before = ids()
        body = {"kind": "sandbox", "size": "xs"}
        for query, param in (("wait=runnin", "wait"), ("wait=running&timeout_s=abc", "timeout_s"),
                             ("wait=running&timeout_s=99999", "timeout_s"),
                             ("timeout_s=-1", "timeout_s"), ("colour=red", "colour")):
            self.expect("POST", "/v1/computers?" + query, body, 400, param)
        self.assertEqual(ids(), before)

    def test_create_wait_timeout_names_the_computer(self):
        # timeout_s=0: the wait runs out at once, while the computer boots.
        r = srv.req("POST", "/v1/computers?wait=running&timeout_s=0",
                    {"kind": "sandbox", "size": "xs"}, key=key)
        self.assertEqual(r.status, 504, r)
        err = r.json["error"]
        self.assertEqual(err["code"], "timeout")
        cid = err["computer_id"]
        st = srv.ok("GET", "/v1/computers/%s?wait=running&timeout_s=60" % cid, key=key)
        self.assertEqual(st["state"], "running")
        srv.ok("DELETE", "/v1/computers/" + cid, key=key)


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
        # While it runs, its image is marked in use in the image cache, so
        # build-image's pruning leaves it (rootfs/README.md, cache rules).
        marker = os.path.join(os.path.realpath(os.path.join(harness.BUILD, "images", "sandbox")),
                              "in-use", c["id"])
        with open(marker) as f:
            self.assertEqual(f.read(), os.path.join(srv.state, "computers", c["id"]))
        bash(c["id"], "echo persisted > /home/user/note")
        s = srv.ok("POST", "/v1/computers/%s/stop" % c["id"], key=key)
        self.assertEqual(s["state"], "stopped")
        self.assertFalse(os.path.exists(marker))
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

    def test_workspace_limit_holds_under_concurrent_creates(self):
        w, k = srv.workspace("racing", max_running=2)
        go = threading.Barrier(6)
        answers = []

        def create():
            go.wait()
            answers.append(srv.req("POST", "/v1/computers", {"kind": "sandbox", "size": "xs"},
                                   key=k))
        threads = [threading.Thread(target=create) for _ in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        made = [r.json["id"] for r in answers if r.status == 201]
        refused = [r for r in answers if r.status != 201]
        self.assertEqual(len(made), 2, [(r.status, r.body[:200]) for r in answers])
        self.assertEqual({(r.status, r.json["error"]["code"]) for r in refused},
                         {(429, "limit_reached")})
        for cid in made:
            srv.ok("DELETE", "/v1/computers/" + cid, key=k)

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
        # One computer runs across the crash: its ledger is checked. It has
        # a few seconds on the ledger (ticks) before the crash.
        t0 = time.time()
        ran = srv.computer(k, kind="sandbox", size="xs")
        t1 = time.time()
        wait_until(lambda: srv.ok("GET", "/v1/usage", key=k)["total"]["running_seconds"] >= 2.5,
                   20, "a few metered seconds")
        # Creates in flight: a desktop whose processes run but which is not
        # ready yet (it boots for a second or more), and two sandboxes
        # killed before or while their processes start.
        desk = srv.ok("POST", "/v1/computers", {"kind": "desktop", "size": "small"}, key=k,
                      status=201)["id"]
        wait_until(lambda: driver_state(srv.state, desk).get("init_pid") or
                   states(srv.state)[desk] != "provisioning", 30, "the desktop's processes")
        inflight = [desk] + [srv.ok("POST", "/v1/computers", {"kind": "sandbox", "size": size},
                                    key=k, status=201)["id"] for size in ("sm", "xs")]
        srv.kill9()
        t_kill = time.time()
        on_disk = states(srv.state)
        self.assertIn("provisioning", [on_disk[c] for c in inflight], on_disk)
        self.assertEqual(on_disk[ran["id"]], "running")
        # cubicled stays down for two seconds: they count, the computer ran.
        wait_until(lambda: time.time() - t_kill >= 2, 5, "two seconds of downtime")
        srv.restart()
        every = [ran["id"]] + inflight
        for cid in every:
            st = srv.ok("GET", "/v1/computers/%s?wait=running&timeout_s=60" % cid, key=k)
            if st["state"] == "running":
                self.assertEqual(bash(cid, "echo alive", k)["stdout"], "alive\n")
            else:  # cleaned up, and says why
                self.assertEqual(st["state"], "error", st)
                self.assertTrue(st["error"], st)
        self.assertEqual(srv.ok("GET", "/v1/computers/" + ran["id"], key=k)["state"], "running")
        feet = [Footprint(srv.state, cid) for cid in every]
        # And a second after the restart.
        wait_until(lambda: time.time() - t_kill >= 3, 5, "a second after the restart")
        t2 = time.time()
        srv.ok("DELETE", "/v1/computers/" + ran["id"], key=k)
        t3 = time.time()
        for cid in inflight:
            srv.ok("DELETE", "/v1/computers/" + cid, key=k)
        for f in feet:
            self.assertEqual(f.leftovers(), {}, f.cid)
        # It ran from within [t0, t1] to within [t2, t3]: the ledger may lose
        # or add no more than a second of that, crash and downtime included.
        u = srv.ok("GET", "/v1/usage", key=k)
        secs = [x for x in u["computers"] if x["id"] == ran["id"]][0]["running_seconds"]
        self.assertGreaterEqual(secs, (t2 - t1) - 1.0)
        self.assertLessEqual(secs, (t3 - t0) + 1.0)

    def test_computer_found_dead_is_marked_and_cleaned(self):
        w, k = srv.workspace("found-dead")
        c = srv.computer(k, kind="sandbox", size="xs")
        foot = Footprint(srv.state, c["id"])
        self.assertTrue(foot.pids)
        srv.kill9()
        # While cubicled is down, the computer dies.
        for pid in foot.pids:
            os.kill(pid, signal.SIGKILL)
        wait_until(lambda: not any(alive(p) for p in foot.pids), 10, "the computer to die")
        srv.restart()
        st = srv.ok("GET", "/v1/computers/" + c["id"], key=k)
        self.assertEqual(st["state"], "error", st)
        self.assertIn("gone when cubicled restarted", st["error"])
        self.assertEqual(srv.ok("DELETE", "/v1/computers/" + c["id"], key=k)["state"], "deleted")
        self.assertEqual(foot.leftovers(), {})


class Sizes(unittest.TestCase):
    """The size table of host/core/sizes.c, enforced on the computer: its
    cgroup's limits, and what the guest meets (the guest has no cgroupfs
    mounted, so it sees the limits by running into them)."""

    sizes = size_table()

    def check(self, kind, size, hog=True, forks=True):
        _, millicpus, memory_mb, _, pids = self.sizes[size]
        c = srv.computer(key, kind=kind, size=size)
        cid = c["id"]
        self.assertEqual(c["limits"], {"vcpus": millicpus / 1000, "memory_mb": memory_mb,
                                       "pids": pids})
        if c["isolation"] != "container":
            srv.ok("DELETE", "/v1/computers/" + cid, key=key)
            self.skipTest("the cgroup checks are the container driver's")
        foot = Footprint(srv.state, cid)
        dirs = {os.path.basename(os.path.dirname(os.path.dirname(d))): d for d in foot.cgroups}

        def group(controller):
            for mount, d in dirs.items():
                if controller in mount.split(","):
                    return d
            raise AssertionError("no %s cgroup in %r" % (controller, foot.cgroups))

        def read(path):
            with open(path) as f:
                return f.read().strip()
        v2 = len(foot.cgroups) == 1 and os.path.exists(os.path.join(foot.cgroups[0], "cpu.max"))
        if v2:
            quota, period = read(os.path.join(foot.cgroups[0], "cpu.max")).split()
            mem = read(os.path.join(foot.cgroups[0], "memory.max"))
            pmax = read(os.path.join(foot.cgroups[0], "pids.max"))
        else:
            quota = read(os.path.join(group("cpu"), "cpu.cfs_quota_us"))
            period = read(os.path.join(group("cpu"), "cpu.cfs_period_us"))
            mem = read(os.path.join(group("memory"), "memory.limit_in_bytes"))
            pmax = read(os.path.join(group("pids"), "pids.max"))
            for d in foot.cgroups:  # the guest's processes are in the group
                self.assertIn(str(foot.init), read(os.path.join(d, "cgroup.procs")).split())
        self.assertEqual(int(quota) / int(period), millicpus / 1000)
        self.assertEqual(int(mem), memory_mb << 20)
        self.assertEqual(int(pmax), pids)
        if hog:
            # Touching the limit plus 64 MiB is killed; half of it is fine.
            hog_cmd = "python3 -c 'b = bytearray(%d << 20); b[::4096] = b\"x\" * len(b[::4096])'"
            r = bash(cid, hog_cmd % (memory_mb // 2) + "; echo $?")
            self.assertEqual(r["stdout"].split()[-1], "0", r)
            r = bash(cid, hog_cmd % (memory_mb + 64) + "; echo $?")
            self.assertEqual(r["stdout"].split()[-1], "137", r)  # SIGKILL by the OOM killer
        if forks:
            # Processes until fork fails: fewer than pids.max (the guest's own
            # few included), close to it.
            py = ("import os\nr, w = os.pipe()\nn = 0\n"
                  "while True:\n"
                  "    try:\n        pid = os.fork()\n    except OSError:\n        break\n"
                  "    if pid == 0:\n        os.close(w)\n        os.read(r, 1)\n        os._exit(0)\n"
                  "    n += 1\n"
                  "os.close(w)\nprint(n)\n"
                  "for _ in range(n):\n    os.wait()\n")
            r = srv.act(cid, "python", {"code": py, "timeout_s": 120}, key=key)
            n = int(r["stdout"].split()[-1])
            self.assertLess(n, pids)
            self.assertGreater(n, pids - 32)
        srv.ok("DELETE", "/v1/computers/" + cid, key=key)
        self.assertEqual(foot.leftovers(), {})

    def test_sandbox_xs(self):
        self.check("sandbox", "xs")

    def test_sandbox_sm(self):
        self.check("sandbox", "sm")

    def test_desktop_small(self):
        self.check("desktop", "small", hog=False, forks=False)


def bare_cubicled(state, netns=False):
    """cubicled as an operator starts it: no $CUBICLE_ADMIN_KEY and, in a
    network namespace of its own, no --listen (the default port is then
    free whatever runs on the host). Returns the process once it listens."""
    env = dict(os.environ)
    env.pop("CUBICLE_ADMIN_KEY", None)
    cmd = [os.path.join(harness.BIN, "cubicled"), "--state-dir", state,
           "--images", os.path.join(harness.BUILD, "images")]
    if netns:
        cmd = ["unshare", "--net", "--", "sh", "-c", 'ip link set lo up && exec "$0" "$@"'] + cmd
    else:
        cmd += ["--listen", "127.0.0.1:0"]
    log = open(os.path.join(state, "cubicled.log"), "ab")
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=log, env=env)
    log.close()
    line = p.stdout.readline().decode()
    if "listening on" not in line:
        p.kill()
        p.wait()
        raise AssertionError("cubicled did not start: %r" % line)
    p.port = int(line.split("listening on ")[1].split()[0].rsplit(":", 1)[1])
    return p


def end(p):
    p.send_signal(signal.SIGTERM)
    p.wait(timeout=30)
    p.stdout.close()


class Service(unittest.TestCase):
    def test_admin_key_is_generated_0600_and_kept(self):
        state = tempfile.mkdtemp(prefix="cubicle-state-")
        try:
            p = bare_cubicled(state)
            path = os.path.join(state, "admin.key")
            self.assertEqual(stat.S_IMODE(os.stat(path).st_mode), 0o600)
            with open(path) as f:
                admin = f.read().strip()
            self.assertTrue(admin.startswith("ck_admin_"), admin)

            def call(port, method, url, body=None, k=admin):
                import http.client
                return http_call(http.client.HTTPConnection("127.0.0.1", port, timeout=30),
                                 method, url, body, k)
            self.assertEqual(call(p.port, "POST", "/v1/workspaces", {"name": "kept"}).status,
                             201)
            self.assertEqual(call(p.port, "GET", "/v1/workspaces", k=admin + "x").status, 401)
            end(p)
            p = bare_cubicled(state)  # the same key on restart
            with open(path) as f:
                self.assertEqual(f.read().strip(), admin)
            r = call(p.port, "GET", "/v1/workspaces")
            self.assertEqual(r.status, 200)
            self.assertEqual([x["name"] for x in r.json["workspaces"]], ["kept"])
            end(p)
        finally:
            subprocess.run(["rm", "-rf", state])

    def test_listens_on_loopback_by_default(self):
        state = tempfile.mkdtemp(prefix="cubicle-state-")
        try:
            p = bare_cubicled(state, netns=True)
            self.assertEqual(p.port, 8080)
            # Its listening sockets, as its network namespace's /proc/net shows them.
            listening = []
            for table in ("tcp", "tcp6"):
                with open("/proc/%d/net/%s" % (p.pid, table)) as f:
                    for line in f.read().splitlines()[1:]:
                        local, st = line.split()[1], line.split()[3]
                        if st == "0A":
                            listening.append(local)
            # 127.0.0.1:8080 (the API) and 127.0.0.1:8081 (previews) only.
            self.assertEqual(sorted(listening), ["0100007F:1F90", "0100007F:1F91"])
            end(p)
        finally:
            subprocess.run(["rm", "-rf", state])

    def test_one_log_line_per_request_with_latency(self):
        probe = "/v1/computers/c-%016x" % int(time.time() * 1000)
        self.assertEqual(srv.req("GET", probe, key=key).status, 404)
        srv.ok("GET", "/v1/usage", key=key)
        line = re.compile(r"^cubicled: GET %s 404 (\d+\.\d+)ms rid=[0-9a-f]{16} route=\S+ ws=\S+ id=\S+$"
                          % re.escape(probe), re.M)

        def log():
            with open(srv.log_path, errors="replace") as f:
                return f.read()
        found = wait_until(lambda: line.findall(log()), 10, "the request's log line")
        self.assertEqual(len(found), 1)
        self.assertGreater(float(found[0]), 0)


class Desktop(unittest.TestCase):
    """A desktop computer driven through cubicled, like an agent would."""

    @classmethod
    def setUpClass(cls):
        cls.c = srv.computer(key, kind="desktop", size="small", idle_timeout_s=600)

    def screenshot(self, cid):
        r = srv.req("POST", "/v1/computers/%s/actions/screenshot" % cid, {}, key=key)
        self.assertEqual(r.status, 200, r)
        self.assertEqual(r.headers["content-type"], "image/png")
        return Png(r.body), r

    def test_screenshot_shows_the_panel(self):
        cid = self.c["id"]
        # envd's windows action lists application windows only (no docks):
        # the panel's rectangle comes from the X server's window tree.
        tree = bash(cid, "xwininfo -root -tree")["stdout"]
        rects = [tuple(int(v) for v in m) for m in
                 re.findall(r'"xfce4-panel": \("xfce4-panel" "Xfce4-panel"\)\s+(\d+)x(\d+)'
                            r'[+-]\d+[+-]\d+\s+\+(-?\d+)\+(-?\d+)', tree)]
        self.assertTrue(rects, tree)
        w, h, x0, y0 = max(rects, key=lambda r: r[0] * r[1])
        self.assertGreaterEqual(w, 640)
        png, r = self.screenshot(cid)
        self.assertEqual((r.headers["x-width"], r.headers["x-height"]), ("1280", "800"))
        inside = [png.pixel(x, y) for y in range(y0 + 1, y0 + h - 1, 3)
                  for x in range(x0, x0 + w, 5)]
        below = [png.pixel(x, y) for y in range(y0 + h + 40, y0 + h + 200, 7)
                 for x in range(x0 + 200, x0 + w, 5)]
        # The panel is drawn there: mostly its own background colour, which
        # the wallpaper below hardly has, and with things on it.
        panel_bg = max(set(inside), key=inside.count)
        self.assertGreater(inside.count(panel_bg), len(inside) // 2, panel_bg)
        self.assertLess(below.count(panel_bg), len(below) // 20, panel_bg)
        self.assertGreater(len(set(inside)), 8, "nothing on the panel")

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
        colour = (200, 30, 40)
        # A one-colour PNG, written by python in the guest.
        bash(cid, "python3 -c \"import zlib,struct\n"
                  "def ch(t,d): return struct.pack('>I',len(d))+t+d+struct.pack('>I',zlib.crc32(t+d))\n"
                  "raw=b''.join(b'\\\\x00'+bytes([%d,%d,%d])*64 for _ in range(64))\n"
                  "open('/home/user/solid.png','wb').write(b'\\\\x89PNG\\\\r\\\\n\\\\x1a\\\\n'+"
                  "ch(b'IHDR',struct.pack('>IIBBBBB',64,64,8,2,0,0,0))+"
                  "ch(b'IDAT',zlib.compress(raw))+ch(b'IEND',b''))\"" % colour)
        r = srv.act(cid, "set_wallpaper", {"path": "/home/user/solid.png"}, key=key)
        self.assertEqual(r["method"], "xfconf")
        # A desktop pixel away from the icons (left) and the panel (top).
        spot = (900, 600)

        def wallpaper_shown():
            return self.screenshot(cid)[0].pixel(*spot) == colour
        wait_until(wallpaper_shown, 30, "the new wallpaper on the screen")
        bash(cid, "echo kept > /home/user/file.txt")
        # A resolution set through the API is the computer's from then on.
        self.assertEqual(srv.act(cid, "set_screen_size", {"width": 1024, "height": 768},
                                 key=key)["width"], 1024)
        self.assertEqual(srv.ok("GET", "/v1/computers/" + cid, key=key)["resolution"],
                         [1024, 768])
        srv.ok("POST", "/v1/computers/%s/stop" % cid, key=key)
        srv.ok("POST", "/v1/computers/%s/start" % cid, key=key)
        self.assertEqual(bash(cid, "cat /home/user/file.txt")["stdout"], "kept\n")
        self.assertEqual(srv.act(cid, "get_screen_size", {}, key=key),
                         {"width": 1024, "height": 768})
        wait_until(wallpaper_shown, 30, "the wallpaper after stop and start")
        srv.ok("DELETE", "/v1/computers/" + cid, key=key)

    def test_a_viewer_keeps_an_idle_desktop_running(self):
        c = srv.computer(key, kind="desktop", size="small", idle_timeout_s=10)
        cid = c["id"]
        tok = srv.ok("POST", "/v1/computers/%s/stream" % cid, {"ttl_s": 60}, key=key,
                     status=201)["token"]
        ws = WebSocket("127.0.0.1", srv.port, "/v1/computers/%s/stream?token=%s" % (cid, tok))
        self.assertTrue(ws.recv_exactly(12).startswith(b"RFB "))
        # Well past its idle timeout, watched: still running (the wait runs
        # out). The wait is longer than the HTTP server's own 30 s timeout: a
        # long wait is still answered, not cut off.
        r = srv.req("GET", "/v1/computers/%s?wait=stopped&timeout_s=32" % cid, key=key)
        self.assertEqual(r.status, 504, r)
        self.assertEqual(srv.ok("GET", "/v1/computers/" + cid, key=key)["state"], "running")
        ws.close()
        # The viewer gone, the timeout runs again.
        s = srv.ok("GET", "/v1/computers/%s?wait=stopped&timeout_s=40" % cid, key=key)
        self.assertEqual(s["state"], "stopped")
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
            # A clean shutdown deletes the pool's own desktops and nothing
            # else: the claimed one is the user's and keeps running.
            refill = wait_until(running, 60, "the pool's desktop to run")[0]
            foot = Footprint(pool.state, refill["id"])
            pool.own_state = False  # read after the stop, removed below
            pool.stop(clean=False)
            got = states(pool.state)
            self.assertEqual((got[refill["id"]], got[c["id"]]), ("deleted", "running"))
            self.assertEqual(foot.leftovers(), {})
            # The user's desktop is adopted by the next cubicled (without a
            # pool), which deletes it cleanly.
            mine = Footprint(pool.state, c["id"])
            pool.args = []
            pool.restart()
            pool.ok("DELETE", "/v1/computers/" + c["id"])
            self.assertEqual(mine.leftovers(), {})
        finally:
            pool.stop()
            shutil.rmtree(pool.state, ignore_errors=True)


if __name__ == "__main__":
    unittest.main()
