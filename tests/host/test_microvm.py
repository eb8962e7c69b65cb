"""The microVM isolation driver end to end: real cubicled, real QEMU (TCG on
hosts where KVM is not usable, as on the development machines), the built
sandbox image.

CUBICLE_TEST_VM_DESKTOP=1 also boots the desktop image in a microVM (slow
under TCG; CI does not set it)."""

import glob
import http.client
import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
import unittest

from cubicled import Cubicled, http_call, wait_until
import harness  # noqa: E402 (on the path once cubicled is imported)
import hostnet

srv = None
key = None


CA = {}
PIP_INDEX = "http://198.51.100.1:9/simple"  # written into pip.conf, never fetched


def make_ca():
    """A CA of the test's own for --guest-ca-certs, and a leaf it signed."""
    d = CA["dir"] = tempfile.mkdtemp(prefix="cubicle-vm-ca-")
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"]
    run = lambda *a: subprocess.run(["openssl"] + list(a), check=True, capture_output=True)
    os.mkdir(d + "/operator")
    run("req", "-x509", *ec, "-keyout", d + "/ca.key", "-out", d + "/operator/vm-test-ca.crt",
        "-days", "2", "-subj", "/CN=cubicle vm test CA", "-addext",
        "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign")
    run("req", *ec, "-keyout", d + "/leaf.key", "-out", d + "/leaf.csr", "-subj", "/CN=vm.test")
    run("x509", "-req", "-in", d + "/leaf.csr", "-CA", d + "/operator/vm-test-ca.crt", "-CAkey",
        d + "/ca.key", "-CAcreateserial", "-out", d + "/leaf.crt", "-days", "2")
    with open(d + "/leaf.crt") as f:
        CA["leaf"] = f.read()


def setUpModule():
    global srv, key
    make_ca()
    # The host's one uid-range registry, shared with every other cubicled
    # and test running beside this one: a private registry would hand out
    # ranges that a concurrent container test also holds.
    srv = Cubicled(["--idle-timeout", "600", "--guest-ca-certs", CA["dir"] + "/operator",
                    "--pip-index-url", PIP_INDEX]).start()
    _, key = srv.workspace("vm")


def tearDownModule():
    srv.stop()
    shutil.rmtree(CA["dir"], ignore_errors=True)


def uid_claims(cid):
    """The uid-range registry's entries that name this computer."""
    reg = os.environ.get("CUBICLE_UID_SLOTS") or "/var/lib/cubicle/uid-slots"
    return [n for n in os.listdir(reg)
            if os.path.islink(os.path.join(reg, n)) and cid in os.readlink(os.path.join(reg, n))]


def bash(cid, cmd):
    return srv.act(cid, "bash", {"command": cmd}, key=key)


def vm_dir(cid):
    return os.path.join(srv.state, "computers", cid, "vm")


def qemu_pids(cid):
    """Processes whose working directory is the computer's vm/: its QEMU."""
    want = os.path.realpath(vm_dir(cid))
    pids = []
    for p in glob.glob("/proc/[0-9]*"):
        try:
            if os.readlink(p + "/cwd") == want:
                pids.append(int(p[6:]))
        except OSError:
            pass
    return pids


def rfb_greeting(cid):
    """The first bytes of the desktop's live view through cubicled's gateway."""
    from wsclient import WebSocket
    token = srv.ok("POST", "/v1/computers/%s/stream" % cid, {}, key=key, status=201)["token"]
    ws = WebSocket("127.0.0.1", srv.port, "/v1/computers/%s/stream?token=%s" % (cid, token))
    try:
        return ws.recv_exactly(12)
    finally:
        ws.close()


def envd_of(cid):
    """The forwarded port and the token of a VM's envd (from the store)."""
    db = sqlite3.connect(os.path.join(srv.state, "cubicle.db"))
    token, state = db.execute("SELECT envd_token, driver_state FROM computers WHERE id=?",
                              (cid,)).fetchone()
    db.close()
    return json.loads(state)["port"], token


def read(path):
    with open(path) as f:
        return f.read()


def cgroup_dirs(cid):
    return glob.glob("/sys/fs/cgroup/cubicle/" + cid) + \
        glob.glob("/sys/fs/cgroup/*/cubicle/" + cid)


class Sandbox(unittest.TestCase):
    """One sandbox VM through its whole life (a boot under TCG costs ~10-30 s)."""

    def test_sandbox_life(self):
        # Before the VM starts: the driver takes the host's addresses then.
        net = hostnet.HostTargets().__enter__()
        self.addCleanup(net.close)
        t = time.monotonic()
        c = srv.computer(key, kind="sandbox", size="xs", isolation="vm", timeout_s=170)
        print("\nsandbox vm: running after %.1f s" % (time.monotonic() - t), file=sys.stderr)
        cid = c["id"]
        self.assertEqual((c["state"], c["isolation"]), ("running", "vm"))
        self.assertEqual(c["accel"], "tcg" if os.environ.get("CUBICLE_VM_ACCEL") != "kvm"
                         else "kvm")

        with self.subTest("the image is pinned: a pruned cache cannot take the base away"):
            pinned = os.path.join(srv.state, "computers", cid, "vm", "image", "disk.ext4")
            self.assertGreater(os.stat(pinned).st_nlink, 1)
            self.assertEqual(os.stat(pinned).st_uid, 0)

        with self.subTest("bash, files, user"):
            out = bash(cid, "id -u; uname -r; cat /proc/1/cmdline | tr '\\0' ' '")
            uid, kernel = out["stdout"].split("\n")[:2]
            self.assertEqual(uid, "1000")
            with open(os.path.join(harness.BUILD, "images", "sandbox", "manifest.json")) as f:
                self.assertEqual(kernel, json.load(f)["kernel"])  # the image's, not the host's
            data = bytes(range(256)) * 200
            path = "/v1/computers/%s/files?path=/home/user/blob.bin" % cid
            srv.ok("PUT", path, data, key=key)
            self.assertEqual(srv.req("GET", path, key=key).body, data)

        with self.subTest("a preview reaches a port of the VM through envd's forward"):
            srv.act(cid, "write_file", {"path": "/tmp/www/hello.txt", "content": "from the vm"},
                    key=key)
            bash(cid, "(setsid python3 -m http.server 8127 --bind 127.0.0.1 --directory "
                      "/tmp/www >/dev/null 2>&1 &)")
            g = srv.ok("POST", "/v1/computers/%s/previews" % cid, {"port": 8127}, key=key,
                       status=201)
            cookie = srv.preview_get(g["url"]).headers["set-cookie"].split(";")[0]
            host = g["url"].split("/")[2]
            wait_until(lambda: srv.preview_get(host, "/hello.txt", headers={
                "Cookie": cookie}).body == b"from the vm", 60, "the VM's server")

        with self.subTest("outbound only: not the host, not link-local, not 10.0.2.2"):
            self.assertTrue(net.host_reaches_link_local())
            remote = (net.remote, net.remote_port)
            lo = ("10.0.2.2", net.host_port("127.0.0.1"))
            targets = net.host_targets() + [remote, (net.link_local, net.remote_port), lo]
            out = srv.act(cid, "python", {"code": hostnet.probe_code(targets),
                                          "timeout_s": 90}, key=key)
            res = json.loads(out["stdout"])
            key_of = "%s:%d"
            # Outbound: a machine that is not the host answers.
            self.assertEqual(res.pop(key_of % remote), "connected: remote", res)
            # 127.0.0.1 is the guest's own loopback, where nothing listens.
            self.assertEqual(res.pop(key_of % ("127.0.0.1", lo[1])), "ECONNREFUSED")
            # QEMU maps 10.0.2.2 to the host's loopback: cubicle-init's rule
            # says no, like the routes to the host's addresses and link-local.
            self.assertEqual(set(res.values()), {"EACCES"}, res)
            self.assertEqual(len(res), len(net.host_targets()) + 1)
            self.assertEqual(net.reached(), [])
            # (the egress policy's table, guest-net.h: looked up before main)
            out = bash(cid, "ip rule; ip route show table 1000; ip route get 10.0.2.3; "
                       "ip rule del pref 101 2>&1; ip route del 169.254.0.0/16 table 1000 2>&1; "
                       "ip route del prohibit %s table 1000 2>&1; echo rc=$?"
                       % net.host_end)["stdout"]
            # (no /etc/protocols in the image: TCP shows as ipproto-6)
            self.assertRegex(out, r"100:\s+from all to 10\.0\.2\.2 "
                                  r"ipproto (tcp|ipproto-6) sport 7777 lookup main")
            self.assertRegex(out, r"101:\s+from all to 10\.0\.2\.2 prohibit")
            self.assertRegex(out, r"200:\s+from all lookup 1000")
            self.assertIn("169.254.0.0/16", out)
            self.assertIn("prohibit %s " % net.host_end, out)
            self.assertIn("10.0.2.3 dev eth0", out)
            self.assertEqual(out.count("Operation not permitted"), 3, out)
            self.assertTrue(out.rstrip().endswith("rc=2"), out)
            # Nor can envd (root): tini and envd lack CAP_NET_ADMIN (12),
            # CAP_NET_RAW (13), CAP_SYS_MODULE (16), CAP_SYS_RAWIO (17) and
            # CAP_SYS_BOOT (22) for good; CAP_SYS_TIME (25) stays, for the clock.
            caps = bash(cid, "for p in 1 $(pgrep -x envd); do "
                        "awk '/^CapBnd/ {print $2}' /proc/$p/status; done")["stdout"].split()
            self.assertEqual(len(caps), 2, caps)
            for mask in caps:
                bits = int(mask, 16)
                self.assertEqual([b for b in (12, 13, 16, 17, 22) if bits >> b & 1], [], mask)
                self.assertTrue(bits >> 25 & 1, mask)

        with self.subTest("the guest's clock is the host's"):
            guest = int(bash(cid, "date +%s")["stdout"])
            self.assertLess(abs(guest - time.time()), 120)

        with self.subTest("the token is not on QEMU's command line nor in the guest's"):
            token_free = bash(cid, "cat /proc/cmdline")["stdout"]
            self.assertIn("cubicle.token=-", token_free)
            for pid in qemu_pids(cid):
                with open("/proc/%d/cmdline" % pid, "rb") as f:
                    self.assertNotIn(b"cubicle.token", f.read())

        with self.subTest("size limits inside the VM and on QEMU's cgroup"):
            nproc, mem = bash(cid, "nproc; awk '/MemTotal/{print $2}' /proc/meminfo")[
                "stdout"].split()
            self.assertEqual(nproc, "1")  # xs: one vCPU at a 50% quota
            self.assertTrue(0.8 * 512 * 1024 < int(mem) <= 512 * 1024, mem)
            quota = None
            for d in cgroup_dirs(cid):
                if os.path.exists(d + "/cpu.max"):
                    quota = read(d + "/cpu.max").split()[:2]
                    quota = int(quota[0]) / int(quota[1])
                elif os.path.exists(d + "/cpu.cfs_quota_us"):
                    quota = int(read(d + "/cpu.cfs_quota_us")) / \
                        int(read(d + "/cpu.cfs_period_us"))
            self.assertEqual(quota, 0.5)
            pids = qemu_pids(cid)
            self.assertEqual(len(pids), 1, pids)
            self.assertNotEqual(os.stat("/proc/%d" % pids[0]).st_uid, 0)  # QEMU is not root

        with self.subTest("the kernel's sizes: os.cpu_count, cpuinfo, stat, uptime"):
            out = bash(cid, "python3 -c 'import os; print(os.cpu_count())'; "
                       "grep -c ^processor /proc/cpuinfo; grep -c '^cpu[0-9]' /proc/stat; "
                       "cut -d' ' -f1 /proc/uptime")["stdout"].split()
            self.assertEqual(out[:3], ["1", "1", "1"], out)
            self.assertLess(float(out[3]), 600, out)

        with self.subTest("the start's setup: the operator's CA, the pip index (issue 13)"):
            srv.act(cid, "write_file", {"path": "/home/user/leaf.crt", "content": CA["leaf"]},
                    key=key)
            out = bash(cid, "openssl verify /home/user/leaf.crt; cat /etc/pip.conf; "
                       "grep -c BEGIN /etc/ssl/cubicle-operator.pem")["stdout"]
            self.assertIn("/home/user/leaf.crt: OK", out)
            self.assertIn("index-url = " + PIP_INDEX, out)
            self.assertIn("trusted-host = 198.51.100.1", out)
            self.assertTrue(out.endswith("\n1\n"), out)

        with self.subTest("the package helper answers in a VM (a refusal: no download)"):
            out = bash(cid, "apt-get install -y 'jq;id'; echo rc=$?; ls -l /run/envd/pkg.sock")
            self.assertIn("not a Debian package name", out["stderr"], out)
            self.assertIn("rc=100", out["stdout"])
            self.assertIn("srw-rw-rw- 1 root root", out["stdout"])

        with self.subTest("the disk is the size's (xs: 5120 MB), and full means ENOSPC"):
            size_mb, avail_kb = bash(cid, "df -BM --output=size / | tail -1; "
                                     "df -k --output=avail / | tail -1")["stdout"].split()
            self.assertTrue(0.9 * 5120 < int(size_mb.rstrip("M")) <= 5120, size_mb)
            # fallocate takes the space without writing it (fast under TCG, and
            # the host's qcow2 stays small); dd then writes into the last 32 MiB.
            out = bash(cid, "fallocate -l 6G /home/user/huge; echo rc=$?; "
                       "fallocate -l %dK /home/user/fill && "
                       "dd if=/dev/zero of=/home/user/more bs=1M count=128; echo rc=$?"
                       % (int(avail_kb) - 32768))
            self.assertEqual(out["stdout"].split(), ["rc=1", "rc=1"], out)
            self.assertEqual(out["stderr"].count("No space left on device"), 2, out)
            self.assertEqual(bash(cid, "rm -f /home/user/huge /home/user/fill /home/user/more; echo fine")[
                "stdout"], "fine\n")

        with self.subTest("envd's clock endpoint: the host's token only"):
            port, token = envd_of(cid)
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
            r = http_call(conn, "POST", "/v1/clock?unix_ms=1609459200000", None, "x" * 48)
            self.assertEqual(r.status, 401)
            r = http_call(conn, "POST", "/v1/clock?unix_ms=1609459200000", None, token)
            self.assertEqual(r.status, 200, r.body)
            self.assertEqual(bash(cid, "date -u +%Y")["stdout"], "2021\n")

        with self.subTest("stop saves a snapshot; start restores files and processes"):
            # The egress policy includes the host's own addresses (denied to
            # the guest), so a test beside this one that adds a veth address
            # changes it between stop and start: then the start boots cold
            # (a restored guest would keep the old policy), with the files
            # kept, and the round is tried again.
            for attempt in range(3):
                bash(cid, "echo kept%d > /home/user/note; "
                     "setsid sleep 4242 </dev/null >/dev/null 2>&1 & echo $! > /tmp/sleep.pid"
                     % attempt)
                before = bash(cid, "cat /tmp/sleep.pid")["stdout"].strip()
                log_at = os.path.getsize(srv.log_path)
                s = srv.ok("POST", "/v1/computers/%s/stop" % cid, key=key)
                self.assertEqual(s["state"], "stopped")
                self.assertEqual(qemu_pids(cid), [])
                self.assertTrue(os.path.exists(os.path.join(vm_dir(cid), "snapshot")))
                s = srv.ok("POST", "/v1/computers/%s/start" % cid, key=key)
                self.assertEqual(s["state"], "running")
                out = bash(cid, "cat /home/user/note; pgrep -x sleep; cat /tmp/sleep.pid")
                with open(srv.log_path, "rb") as f:
                    f.seek(log_at)
                    log = f.read().decode(errors="replace")
                vm_lines = [ln for ln in log.splitlines() if cid in ln and " vm: " in ln]
                if "cold: the egress policy changed" in log and attempt < 2:
                    # Synced before stop: the file is there after a cold boot.
                    self.assertEqual(out["stdout"].split()[:1], ["kept%d" % attempt], out)
                    continue
                self.assertEqual(out["stdout"].split(), ["kept%d" % attempt, before, before],
                                 (out, vm_lines[-6:]))
                self.assertIn("restored from its snapshot", log)
                break
            # The restore set the clock (set back to 2021 above) to the host's.
            self.assertLess(abs(int(bash(cid, "date +%s")["stdout"]) - time.time()), 60)
            self.assertFalse(os.path.exists(os.path.join(vm_dir(cid), "snapshot")))

        with self.subTest("cubicled killed and restarted: the VM is adopted"):
            pids = qemu_pids(cid)
            srv.kill9()
            srv.restart()
            self.assertEqual(qemu_pids(cid), pids)
            self.assertRegex(bash(cid, "cat /home/user/note")["stdout"], r"^kept[0-2]\n$")
            self.assertIn("adopted " + cid, srv.read_log())

        with self.subTest("QEMU killed from outside: error with a reason"):
            pids = qemu_pids(cid)
            self.assertEqual(len(pids), 1)
            os.kill(pids[0], signal.SIGKILL)
            got = wait_until(lambda: (lambda j: j if j["state"] == "error" else None)(
                srv.ok("GET", "/v1/computers/" + cid, key=key)), 30, "the error state")
            self.assertIn("QEMU", got["error"])
            r = srv.req("POST", "/v1/computers/%s/actions/bash" % cid, {"command": "true"},
                        key=key)
            self.assertEqual(r.status, 409)

        with self.subTest("delete cleans up"):
            d = srv.ok("DELETE", "/v1/computers/" + cid, key=key)
            self.assertEqual(d["state"], "deleted")
            self.assertEqual(qemu_pids(cid), [])
            self.assertFalse(os.path.exists(os.path.join(srv.state, "computers", cid)))
            self.assertEqual(cgroup_dirs(cid), [])
            self.assertEqual(uid_claims(cid), [])

    def test_cold_boot_when_the_snapshot_is_bad(self):
        c = srv.computer(key, kind="sandbox", size="sm", isolation="vm", timeout_s=170)
        cid = c["id"]
        self.assertEqual(bash(cid, "nproc")["stdout"], "1\n")
        bash(cid, "echo on-disk > /home/user/f; sync")
        srv.ok("POST", "/v1/computers/%s/stop" % cid, key=key)
        with open(os.path.join(vm_dir(cid), "snapshot"), "r+b") as f:
            f.write(b"garbage!" * 64)
        s = srv.ok("POST", "/v1/computers/%s/start" % cid, key=key, timeout=200)
        self.assertEqual(s["state"], "running")
        self.assertEqual(bash(cid, "cat /home/user/f")["stdout"], "on-disk\n")
        self.assertIn("the snapshot did not restore", srv.read_log())
        srv.ok("DELETE", "/v1/computers/" + cid, key=key)


class Session(unittest.TestCase):
    """/session in a VM: the host's session directory over virtio-9p."""

    def test_session_in_vm(self):
        srv.ok("PUT", "/v1/sessions/vs/files?path=input/given.txt", b"given", key=key)
        host_dir = glob.glob(os.path.join(srv.state, "sessions", "*", "vs"))[0]
        # A symlink to the host's state directory: the guest resolves it in
        # its own tree, so it leads nowhere on the host.
        os.symlink(srv.state, os.path.join(host_dir, "input", "esc"))
        c = srv.computer(key, kind="sandbox", size="xs", isolation="vm", session="vs",
                         timeout_s=170)
        cid = c["id"]
        out = bash(cid, "stat -c '%U %a' /session/output; cat /session/input/given.txt; echo; "
                   "echo made > /session/output/result.txt && echo wrote; "
                   "ln -s / /session/output/root; "
                   "ls /session/input/esc/cubicle.db; cat /session/input/esc/admin.key")
        self.assertEqual(out["stdout"].split("\n")[:3], ["user 755", "given", "wrote"], out)
        # Both fail (QEMU does not follow a host symlink: ELOOP).
        self.assertEqual(out["stderr"].count("/session/input/esc/"), 2, out)
        self.assertEqual(out["exit_code"], 1, out)
        r = srv.req("GET", "/v1/sessions/vs/files?path=output/result.txt", key=key)
        self.assertEqual((r.status, r.body), (200, b"made\n"))
        # The guest's symlink is a file holding its target on the host.
        self.assertFalse(os.path.islink(os.path.join(host_dir, "output", "root")))
        srv.ok("DELETE", "/v1/computers/" + cid, key=key)
        r = srv.req("GET", "/v1/sessions/vs/files?path=output/result.txt", key=key)
        self.assertEqual((r.status, r.body), (200, b"made\n"))
        # A container computer on the same session takes over the VM's files.
        c2 = srv.computer(key, kind="sandbox", size="xs", isolation="container", session="vs")
        out = bash(c2["id"], "cat /session/output/result.txt && echo more >> "
                   "/session/output/result.txt && echo appended")
        self.assertEqual(out["stdout"], "made\nappended\n", out)
        srv.ok("DELETE", "/v1/computers/" + c2["id"], key=key)


class BadInput(unittest.TestCase):
    def test_default_isolation_is_container_without_kvm(self):
        if os.environ.get("CUBICLE_VM_ACCEL") == "kvm":
            self.skipTest("KVM forced")
        self.assertIn("default isolation: container", srv.read_log())


@unittest.skipUnless(os.environ.get("CUBICLE_TEST_VM_DESKTOP"),
                     "set CUBICLE_TEST_VM_DESKTOP=1 to boot the desktop image in a VM (slow)")
class Desktop(unittest.TestCase):
    def test_desktop_screenshot_shows_the_panel(self):
        sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "envd"))
        from pngread import Png
        t = time.monotonic()
        # Not the default size: the kernel command line carries it to envd.
        c = srv.computer(key, kind="desktop", size="small", isolation="vm", timeout_s=600,
                         resolution=[1024, 768])
        print("\ndesktop vm: ready after %.1f s" % (time.monotonic() - t), file=sys.stderr)
        self.assertEqual(srv.act(c["id"], "get_screen_size", {}, key=key),
                         {"width": 1024, "height": 768})
        r = srv.req("POST", "/v1/computers/%s/actions/screenshot" % c["id"], {}, key=key)
        self.assertEqual(r.status, 200, r)
        png = Png(r.body)
        self.assertEqual((png.width, png.height), (1024, 768))
        strip = {png.pixel(x, y) for y in range(0, 24, 2) for x in range(0, 1024, 4)}
        self.assertGreater(len(strip), 8, "the panel strip looks blank")
        cid = c["id"]
        self.assertEqual(rfb_greeting(cid), b"RFB 003.008\n")
        # A window and the clipboard survive stop/start (the snapshot).
        w = srv.act(cid, "launch", {"app": "xfce4-terminal", "wait_s": 60}, key=key)["window"]
        self.assertIsNotNone(w)
        srv.act(cid, "set_clipboard", {"text": "kept across stop"}, key=key)
        srv.ok("POST", "/v1/computers/%s/stop" % cid, key=key)
        t = time.monotonic()
        srv.ok("POST", "/v1/computers/%s/start" % cid, key=key)
        print("desktop vm: restored in %.1f s" % (time.monotonic() - t), file=sys.stderr)
        ids = [x["id"] for x in srv.act(cid, "windows", {}, key=key)["windows"]]
        self.assertIn(w["id"], ids)
        self.assertEqual(srv.act(cid, "get_clipboard", {}, key=key)["text"], "kept across stop")
        self.assertEqual(rfb_greeting(cid), b"RFB 003.008\n")  # the live view, restored
        srv.ok("DELETE", "/v1/computers/" + cid, key=key)


if __name__ == "__main__":
    unittest.main()
