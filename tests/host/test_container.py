"""The container isolation driver (host/drivers/container*.c), end to end.

Each test boots real guest images (build/images/<name>, from `make images`)
through tests/host/drivertool, the driver's command-line front, one process
per driver call with the driver's state in a JSON file between calls, the
way cubicled's core calls it with the state in SQLite. envd in the guest is
reached over its unix socket like the core reaches it.

What is asserted: envd answers as the ordinary user inside a user namespace;
files survive stop/start; the size limits are enforced (memory hog killed by
the OOM killer, CPU quota held, fork bomb stopped by pids.max); there is no
way to the host's root (setuid, user namespaces, mounts, raw sockets,
/proc/sys, ptrace, the key ring); the network is outbound only; destroy
leaves no process, mount, cgroup or namespace behind, even when the driver's
state was lost; a desktop guest becomes ready.

This test process makes itself a child subreaper: a computer's init and its
slirp4netns outlive the drivertool call that started them and are
re-parented here, as they would be to systemd on a real host. The
development machine's pid 1 never reaps orphans, so without this every
stopped computer would leave two zombies in the process table.
"""

import ctypes
import errno
import fcntl
import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "images"))
from guest import UnixConnection, IMAGES, http_call  # noqa: E402
from harness import BUILD, Response, wait_until  # noqa: E402
import hostnet  # noqa: E402

DRIVERTOOL = os.path.join(BUILD, "tests", "drivertool")
UID_FIRST = 0x80000  # the driver's first uid range (systemd's container range)

libc = ctypes.CDLL(None, use_errno=True)
PR_SET_CHILD_SUBREAPER = 36
NS_GET_USERNS = 0xB701  # _IO(0xb7, 0x1): the user namespace owning a namespace


def image(name):
    d = os.path.join(IMAGES, name)
    if not os.path.exists(os.path.join(d, "rootfs", "usr", "local", "bin", "envd")):
        raise AssertionError("no %s image in %s: run `make images` (or rootfs/build-image %s "
                             "BUILD_DIR) first" % (name, IMAGES, name))
    return d


def read(path, default=None):
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        if default is not None:
            return default
        raise


def reap(pid):
    """Reaps pid if it is a zombie child of ours (see the module docstring)."""
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass


def processes():
    """{pid: (uid, state, net namespace inode or None)} of every process."""
    out = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            status = read("/proc/%s/status" % d)
            uid = int(next(l for l in status.splitlines() if l.startswith("Uid:")).split()[1])
            state = next(l for l in status.splitlines() if l.startswith("State:")).split()[1]
            try:
                net = os.stat("/proc/%s/ns/net" % d).st_ino
            except OSError:
                net = None
            out[int(d)] = (uid, state, net)
        except (OSError, StopIteration):
            pass
    return out


def loop_devices(under):
    """Loop devices whose backing file is below the directory `under`."""
    found = []
    for name in os.listdir("/sys/block"):
        back = read("/sys/block/%s/loop/backing_file" % name, "") if name.startswith("loop") else ""
        if back.startswith(os.path.realpath(under) + "/"):
            found.append((name, back.strip()))
    return found


def size(name):
    """(millicpus, memory_mb, disk_mb, pids) of a size in host/core/sizes.c."""
    src = read(os.path.join(HERE, "..", "..", "host", "core", "sizes.c"))
    m = re.search(r'\{"%s", "\w+", (\d+), (\d+), (\d+), (\d+), \d+\}' % re.escape(name), src)
    if not m:
        raise AssertionError("no size %s in host/core/sizes.c" % name)
    return tuple(int(x) for x in m.groups())


class Computer:
    """One computer of the container driver, driven through drivertool."""

    def __init__(self, kind="sandbox", image_name=None, millicpus=1000, memory_mb=1024,
                 pids=512, session=False, resolution=None, disk_mb=1024):
        self.root = tempfile.mkdtemp(prefix="cubicle-ct-")
        self.id = "c-" + secrets.token_hex(8)
        self.dir = os.path.join(self.root, self.id)
        os.mkdir(self.dir, 0o700)
        self.state_path = os.path.join(self.root, "state.json")
        self.token = secrets.token_hex(16)
        self.token_path = os.path.join(self.root, "token")
        with open(self.token_path, "w") as f:
            f.write(self.token + "\n")
        self.session = os.path.join(self.root, "session") if session else None
        self.args = ["--dir", self.dir, "--id", self.id,
                     "--image", image(image_name or kind), "--state", self.state_path,
                     "--kind", kind, "--millicpus", str(millicpus),
                     "--memory-mb", str(memory_mb), "--pids", str(pids),
                     "--disk-mb", str(disk_mb), "--token-file", self.token_path]
        if self.session:
            self.args += ["--session", self.session]
        if resolution:
            self.args += ["--resolution", "%dx%d" % resolution]
        self.sock = os.path.join(self.dir, "io", "envd.sock")
        self.seen_pids = set()

    # -- driver calls --------------------------------------------------------

    def call(self, cmd, check=True):
        p = subprocess.run([DRIVERTOOL, cmd] + self.args, capture_output=True, text=True,
                           timeout=120)
        if check and p.returncode != 0:
            raise AssertionError("drivertool %s failed (%d): %s%s" % (
                cmd, p.returncode, p.stderr, self.log_tail()))
        self._remember_pids()
        return p

    def create(self):
        self.call("create")
        return self

    def start(self):
        self.call("start")
        self._remember_pids()
        return self

    def stop(self):
        pids = self._recorded_pids()
        self.call("stop")
        for pid in pids:
            reap(pid)

    def destroy(self):
        pids = self._recorded_pids()
        self.call("destroy")
        for pid in pids | self.seen_pids:
            reap(pid)

    def alive(self):
        return self.call("alive").stdout.strip() == "true"

    def cleanup(self):
        """Best-effort teardown for tearDown: destroy, then remove the files."""
        try:
            self.destroy()
        except Exception:  # noqa: BLE001 - the test already failed or passed
            pass
        shutil.rmtree(self.root, ignore_errors=True)

    @property
    def state(self):
        try:
            with open(self.state_path) as f:
                return json.load(f)
        except (OSError, ValueError):
            return {}

    def _recorded_pids(self):
        s = self.state
        return {s[k] for k in ("init_pid", "slirp_pid") if s.get(k)}

    def _remember_pids(self):
        self.seen_pids |= self._recorded_pids()

    def log_tail(self):
        text = read(os.path.join(self.dir, "console.log"), "")
        return ("\nconsole.log:\n" + text[-3000:]) if text else ""

    @property
    def uid_base(self):
        return self.state["uid_base"]

    def cgroup_dir(self, controller):
        """The computer's group in a v1 hierarchy (cpu, cpuacct, memory, pids),
        or its v2 group, whatever the controller."""
        cg = self.state["cgroups"]
        if cg["version"] == 2:
            return cg["dirs"][0]
        for d in cg["dirs"]:  # .../<mount, e.g. cpu,cpuacct>/cubicle/<id>
            if controller in os.path.basename(os.path.dirname(os.path.dirname(d))).split(","):
                return d
        raise AssertionError("no %s hierarchy in %r" % (controller, cg))

    # -- envd ----------------------------------------------------------------

    def request(self, method, path, body=None, timeout=120):
        return http_call(UnixConnection(self.sock, timeout=timeout), method, path, body,
                         self.token)

    def health(self):
        return self.request("GET", "/health", timeout=10).json

    def bash(self, command, timeout_s=60, ok=True):
        r = self.request("POST", "/v1/actions/bash",
                         {"command": command, "timeout_s": timeout_s}, timeout=timeout_s + 30)
        if r.status not in (200, 504):
            raise AssertionError("bash -> %d %s" % (r.status, r.body[:500]))
        out = r.json
        if ok and out["exit_code"] != 0:
            raise AssertionError("%r exited %d: %s %s" % (command, out["exit_code"],
                                                         out["stdout"], out["stderr"]))
        return out


def setUpModule():
    if os.geteuid() != 0:
        raise AssertionError("the container driver tests need root")
    if not os.access(DRIVERTOOL, os.X_OK):
        raise AssertionError("%s is not built (cmake --build BUILD --target drivertool)"
                             % DRIVERTOOL)
    image("sandbox")
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        raise AssertionError("prctl(PR_SET_CHILD_SUBREAPER) failed")


class ContainerTest(unittest.TestCase):
    def computer(self, **kw):
        c = Computer(**kw)
        self.addCleanup(c.cleanup)
        return c


class Basics(ContainerTest):
    def test_envd_answers_as_user_in_a_user_namespace(self):
        c = self.computer().create().start()
        self.assertTrue(c.alive())
        h = c.health()
        self.assertTrue(h["ready"])
        self.assertFalse(h["display"])
        out = c.bash("id -u; id -un; cat /proc/self/uid_map; hostname; "
                     "grep -E '^(NoNewPrivs|Seccomp):' /proc/self/status; "
                     "cat /proc/self/cgroup | cut -d: -f3 | sort -u")["stdout"].split("\n")
        self.assertEqual(out[0], "1000")
        self.assertEqual(out[1], "user")
        self.assertEqual(out[2].split(), ["0", str(c.uid_base), "65536"])
        self.assertGreaterEqual(c.uid_base, UID_FIRST)
        self.assertEqual(out[3], "cubicle")
        self.assertEqual(out[4].split(), ["NoNewPrivs:", "1"])
        self.assertEqual(out[5].split(), ["Seccomp:", "2"])
        self.assertEqual(out[6], "/")  # its own cgroup namespace
        # The guest's processes run as the computer's unprivileged host uids.
        init = c.state["init_pid"]
        self.assertEqual(os.stat("/proc/%d" % init).st_uid, c.uid_base)
        # envd's token is the guest root's secret, not the user's.
        r = c.bash("cat /run/cubicle/token", ok=False)
        self.assertNotEqual(r["exit_code"], 0)
        st = os.stat(os.path.join(c.dir, "io", "token"))
        self.assertEqual((st.st_uid, st.st_mode & 0o777), (c.uid_base, 0o600))
        # Without the token, envd refuses.
        c.token, good = "x" * 32, c.token
        self.assertEqual(c.request("GET", "/v1/files?path=/etc/hostname").status, 401)
        c.token = good

    def test_two_computers_get_distinct_uid_ranges(self):
        a = self.computer().create()
        b = self.computer().create()
        self.assertNotEqual(a.uid_base, b.uid_base)
        self.assertEqual(abs(a.uid_base - b.uid_base) % 65536, 0)

    def test_a_range_with_a_left_over_process_is_never_handed_out(self):
        # A computer whose directory vanished (a crashed test, a wiped state
        # dir) can leave processes behind; its range must stay taken.
        b = self.computer().create()
        slot, base = b.state["uid_slot"], b.uid_base
        b.destroy()
        pid = os.fork()
        if pid == 0:
            try:
                os.setgid(base + 7)
                os.setuid(base + 7)
                time.sleep(60)
            finally:
                os._exit(0)
        try:
            wait_until(lambda: os.stat("/proc/%d" % pid).st_uid == base + 7, 10, "the setuid")
            c = self.computer().create()
            self.assertNotEqual(c.state["uid_slot"], slot)
            self.assertNotEqual(c.uid_base, base)
        finally:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)

    def test_files_survive_stop_and_start(self):
        c = self.computer(session=True).create().start()
        c.bash("echo kept > ~/note.txt && echo out > /session/output/r.txt")
        init = c.state["init_pid"]
        # On the computer's disk, which only its mount namespace has mounted.
        st = os.stat("/proc/%d/root/home/user/note.txt" % init)
        self.assertEqual(st.st_uid, c.uid_base + 1000)
        c.stop()
        self.assertFalse(c.alive())
        self.assertFalse(os.path.exists("/proc/%d" % init))
        self.assertNotIn("init_pid", c.state)
        c.start()
        self.assertNotEqual(c.state["init_pid"], init)
        out = c.bash("cat ~/note.txt /session/output/r.txt; stat -c %U /session/output")
        self.assertEqual(out["stdout"], "kept\nout\nuser\n")
        self.assertEqual(os.stat(os.path.join(c.session, "output", "r.txt")).st_uid,
                         c.uid_base + 1000)

    def test_session_moves_into_the_next_computers_range(self):
        a = self.computer(session=True).create().start()
        a.bash("echo one > /session/working/a.txt")
        a.stop()
        b = self.computer(session=False).create()
        b.session = a.session
        b.args += ["--session", a.session]
        a_base = a.uid_base
        a.destroy()
        b.start()
        self.assertNotEqual(a_base, b.uid_base)
        out = b.bash("stat -c %U /session/working/a.txt; echo two >> /session/working/a.txt; "
                     "cat /session/working/a.txt")
        self.assertEqual(out["stdout"], "user\none\ntwo\n")

    def test_start_is_idempotent_and_alive_checks_start_time(self):
        c = self.computer().create().start()
        init = c.state["init_pid"]
        c.start()
        self.assertEqual(c.state["init_pid"], init)
        # A recorded pid whose start time differs is some other process.
        s = c.state
        s["init_start"] += 1
        with open(c.state_path, "w") as f:
            json.dump(s, f)
        self.assertFalse(c.alive())
        s["init_start"] -= 1
        with open(c.state_path, "w") as f:
            json.dump(s, f)
        self.assertTrue(c.alive())

    def test_start_failure_names_the_cause(self):
        c = self.computer().create()
        c.args[c.args.index("--token-file") + 1] = os.path.join(c.root, "short")
        with open(os.path.join(c.root, "short"), "w") as f:
            f.write("short\n")
        p = c.call("start", check=False)
        self.assertEqual(p.returncode, 1)
        self.assertIn("token", p.stderr)
        self.assertFalse(c.alive())


class Limits(ContainerTest):
    def test_memory_hog_is_killed_and_the_host_unharmed(self):
        c = self.computer(memory_mb=256).create().start()
        hog = ("import sys\nchunks = []\nfor i in range(64):\n"
               "    chunks.append(bytearray(16 << 20))\n"
               "    print(i, flush=True)\n")
        r = c.request("POST", "/v1/actions/python", {"code": hog, "timeout_s": 60}).json
        self.assertEqual(r["exit_code"], 128 + 9, r)  # SIGKILL from the OOM killer
        allocated = int(r["stdout"].split()[-1]) * 16 if r["stdout"].split() else 0
        self.assertLess(allocated, 256)
        cg = c.cgroup_dir("memory")
        if c.state["cgroups"]["version"] == 2:
            events = dict(l.split() for l in read(cg + "/memory.events").splitlines())
            self.assertGreaterEqual(int(events["oom_kill"]), 1)
            self.assertLessEqual(int(read(cg + "/memory.peak")), 256 << 20)
        else:
            oom = dict(l.split() for l in read(cg + "/memory.oom_control").splitlines())
            self.assertGreaterEqual(int(oom["oom_kill"]), 1)
            self.assertLessEqual(int(read(cg + "/memory.max_usage_in_bytes")), 256 << 20)
        # The computer's agent and the host are fine.
        self.assertTrue(c.health()["ready"])
        self.assertEqual(c.bash("echo alive")["stdout"], "alive\n")
        self.assertTrue(c.alive())

    def test_the_xs_size_memory_limit_is_what_applies(self):
        # The size's own numbers (host/core/sizes.c), as cubicled passes them.
        millicpus, memory_mb, disk_mb, pids = size("xs")
        self.assertEqual(memory_mb, 512)
        c = self.computer(millicpus=millicpus, memory_mb=memory_mb, pids=pids,
                          disk_mb=disk_mb).create().start()
        # bytearray * n writes every byte, so the pages are really used.
        touch = "python3 -c 'b = bytearray(b\"\\x01\") * (%d << 20); print(len(b) >> 20)'"
        out = c.bash(touch % 400, timeout_s=120)
        self.assertEqual(out["stdout"], "400\n")
        out = c.bash(touch % 600 + "; echo rc=$?", ok=False, timeout_s=120)
        self.assertIn("rc=137", out["stdout"], out)  # SIGKILL from the OOM killer
        self.assertNotIn("600\n", out["stdout"])
        cg = c.cgroup_dir("memory")
        if c.state["cgroups"]["version"] == 2:
            self.assertEqual(int(read(cg + "/memory.max")), 512 << 20)
            self.assertLessEqual(int(read(cg + "/memory.peak")), 512 << 20)
        else:
            self.assertEqual(int(read(cg + "/memory.limit_in_bytes")), 512 << 20)
            self.assertLessEqual(int(read(cg + "/memory.max_usage_in_bytes")), 512 << 20)
        self.assertEqual(c.bash("echo alive")["stdout"], "alive\n")

    def _cpu_usage_ns(self, c):
        cg = c.state["cgroups"]
        if cg["version"] == 2:
            stat = dict(l.split() for l in read(cg["dirs"][0] + "/cpu.stat").splitlines())
            return int(stat["usage_usec"]) * 1000
        return int(read(c.cgroup_dir("cpuacct") + "/cpuacct.usage"))

    def test_cpu_quota_holds(self):
        c = self.computer(millicpus=500).create().start()
        before, t0 = self._cpu_usage_ns(c), time.monotonic()
        # Two busy loops: 2 CPUs' worth of demand (this machine has 2) for 2 s.
        c.bash("timeout 2 sh -c 'while :; do :; done' & "
               "timeout 2 sh -c 'while :; do :; done' & wait", ok=False)
        used, wall = (self._cpu_usage_ns(c) - before) / 1e9, time.monotonic() - t0
        ratio = used / wall
        print("\ncpu quota 0.5: used %.2f CPU-s in %.2f s = %.2f CPUs" % (used, wall, ratio),
              file=sys.stderr)
        self.assertLessEqual(ratio, 0.5 * 1.15)
        # The loops did run (at least a tenth of the quota: on a starved
        # host they get less than the quota, which is not what this tests).
        self.assertGreater(ratio, 0.05)
        if c.state["cgroups"]["version"] == 1:
            stat = dict(l.split() for l in read(c.cgroup_dir("cpu") + "/cpu.stat").splitlines())
            self.assertGreater(int(stat["nr_throttled"]), 0)

    def test_fork_bomb_is_contained_by_pids_max(self):
        c = self.computer(pids=64).create().start()
        bomb = ("import os, sys, time\nr, w = os.pipe()\nn = 0\n"
                "while True:\n"
                "    try:\n"
                "        pid = os.fork()\n"
                "    except OSError as e:\n"
                "        print(n, e.errno, flush=True)\n"
                "        break\n"
                "    if pid == 0:\n"
                "        os.close(w)\n"
                "        os.read(r, 1)\n"
                "        os._exit(0)\n"
                "    n += 1\n"
                "os.close(w)\n")
        r = c.request("POST", "/v1/actions/python", {"code": bomb, "timeout_s": 60}).json
        count, err = (int(x) for x in r["stdout"].split())
        self.assertEqual(err, errno.EAGAIN)
        self.assertLess(count, 64)
        self.assertGreater(count, 10)
        wait_until(lambda: c.bash("echo ok", ok=False)["stdout"] == "ok\n", 30,
                   "the computer to run commands again after the bomb")

    def test_real_fork_bomb_leaves_envd_answering_and_destroy_cleans_up(self):
        c = self.computer(pids=128).create().start()
        r = c.request("POST", "/v1/actions/bash",
                      {"command": "b() { b | b & }; b", "timeout_s": 3}, timeout=60)
        self.assertIn(r.status, (200, 504))
        pids_dir = c.cgroup_dir("pids")
        self.assertLessEqual(int(read(pids_dir + "/pids.current")), 128)
        self.assertTrue(c.health()["ready"])
        base = c.uid_base
        c.destroy()
        left = [p for p, (uid, st, _) in processes().items()
                if base <= uid < base + 65536 and st != "Z"]
        self.assertEqual(left, [])


class NoEscape(ContainerTest):
    @classmethod
    def setUpClass(cls):
        cls.c = Computer().create().start()

    @classmethod
    def tearDownClass(cls):
        cls.c.cleanup()

    def py(self, code):
        r = self.c.request("POST", "/v1/actions/python", {"code": code, "timeout_s": 30}).json
        self.assertEqual(r["exit_code"], 0, r)
        return r["stdout"].strip()

    def test_no_setuid_files_and_su_fails(self):
        out = self.c.bash("find / -xdev -perm /6000 -type f 2>/dev/null | wc -l; "
                          "su -c true root </dev/null 2>/dev/null; echo $?")["stdout"].split()
        self.assertEqual(out[0], "0")
        self.assertNotEqual(out[1], "0")

    def test_no_user_namespace_or_mount(self):
        r = self.c.bash("unshare -r true; echo $?; unshare -U true; echo $?; "
                        "mount -t tmpfs none /tmp; echo $?", ok=False)
        self.assertEqual(r["stdout"].split(), ["1", "1", "32"], r)
        self.assertIn("Operation not permitted", r["stderr"])
        out = self.py(
            "import ctypes, os\nlibc = ctypes.CDLL(None, use_errno=True)\n"
            "res = []\n"
            "res.append(libc.mount(b'none', b'/tmp', b'tmpfs', 0, None) == -1 and ctypes.get_errno())\n"
            "res.append(libc.unshare(0x10000000) == -1 and ctypes.get_errno())\n"  # CLONE_NEWUSER
            "print(res)\n")
        self.assertEqual(out, "[1, 1]")  # EPERM, EPERM

    def test_raw_socket_fails(self):
        out = self.py("import socket\ntry:\n"
                      "    socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)\n"
                      "    print('opened')\n"
                      "except PermissionError as e:\n"
                      "    print('denied', e.errno)\n")
        self.assertEqual(out, "denied 1")

    def test_proc_sys_is_read_only(self):
        r = self.c.bash("echo evil > /proc/sys/kernel/hostname; echo $?; "
                        "echo 1 > /proc/sysrq-trigger; echo $?; hostname", ok=False)
        self.assertEqual(r["stdout"].split(), ["1", "1", "cubicle"])
        self.assertEqual(socket.gethostname() != "evil", True)
        self.assertIn("Read-only file system", r["stderr"])

    def test_ptrace_of_pid_1_fails(self):
        out = self.py("import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\n"
                      "rc = libc.ptrace(16, 1, None, None)\n"  # PTRACE_ATTACH
                      "print(rc, ctypes.get_errno())\n")
        self.assertEqual(out, "-1 1")

    def test_seccomp_denies_what_an_ordinary_user_may_do(self):
        # keyctl, personality(ADDR_NO_RANDOMIZE) and clone(CLONE_NEWUSER)
        # work for an unprivileged user on the host: only the filter stops them.
        out = self.py(
            "import ctypes, os\nlibc = ctypes.CDLL(None, use_errno=True)\n"
            "res = []\n"
            "res.append(libc.syscall(250, 0, -3, 0) == -1 and ctypes.get_errno())\n"  # keyctl
            "res.append(libc.personality(0x0040000) == -1 and ctypes.get_errno())\n"
            "res.append(libc.personality(0xffffffff) != -1)\n"  # a query still works
            "res.append(libc.syscall(425, 2, 0, 0) == -1 and ctypes.get_errno())\n"  # io_uring_setup
            "res.append(libc.syscall(298, None, -1, 0, -1, 0) == -1 and ctypes.get_errno())\n"  # perf_event_open
            "print(res)\n")
        self.assertEqual(out, "[1, 1, True, 1, 1]")
        # Threads still work (clone without namespace flags, clone3 → ENOSYS → clone).
        out = self.py("import threading\nr = []\n"
                      "t = threading.Thread(target=lambda: r.append(1)); t.start(); t.join()\n"
                      "print(len(r))\n")
        self.assertEqual(out, "1")


    def test_seccomp_denies_what_dockers_default_profile_denies(self):
        # Each call with harmless arguments: without the filter the guest's
        # user would get EFAULT, EINVAL, EBADF or success for many of them
        # (mbind, get_mempolicy, add_key, settimeofday(NULL, NULL), a vsock
        # socket...); with it, every one is EPERM.
        out = self.py(
            "import ctypes, json, socket\n"
            "libc = ctypes.CDLL(None, use_errno=True)\n"
            "libc.syscall.restype = ctypes.c_long\n"
            "P = ctypes.c_void_p\n"
            "calls = {\n"
            "  'bpf': (321, 9999, None, 0),\n"
            "  'kexec_load': (246, 0, 100000, None, 0),\n"
            "  'kexec_file_load': (320, -1, -1, 0, None, 0),\n"
            "  'init_module': (175, None, 0, b''),\n"
            "  'finit_module': (313, -1, b'', 0),\n"
            "  'delete_module': (176, b'cubicle_none', 0o4000),\n"
            "  'add_key': (248, None, None, None, 0, 0),\n"
            "  'request_key': (249, None, None, None, 0),\n"
            "  'keyctl': (250, 9999, 0, 0, 0),\n"
            "  'perf_event_open': (298, None, 0, -1, -1, 0),\n"
            "  'open_by_handle_at': (304, -1, None, 0),\n"
            "  'name_to_handle_at': (303, -1, b'', None, None, 0),\n"
            "  'mbind': (237, None, 0, 0, None, 0, 0),\n"
            "  'get_mempolicy': (239, None, None, 0, None, 0),\n"
            "  'set_mempolicy': (238, 0, None, 0),\n"
            "  'move_pages': (279, 0, 0, None, None, None, 0),\n"
            "  'iopl': (172, 99),\n"
            "  'ioperm': (173, P(-1), 1, 1),\n"
            "  'swapon': (167, P(1), 0),\n"
            "  'reboot': (169, 0, 0, 0, None),\n"
            "  'settimeofday': (164, None, None),\n"
            "  'clock_settime': (227, 9999, None),\n"
            "  'acct': (163, P(1)),\n"
            "  'quotactl': (179, 0, None, 0, None),\n"
            "  'userfaultfd': (323, -1),\n"
            "  'syslog': (103, 9999, None, 0),\n"
            "  'sethostname': (170, P(1), 5),\n"
            "  'umount2': (166, P(1), 0),\n"
            "  'pivot_root': (155, P(1), P(1)),\n"
            "  'unshare(CLONE_NEWUSER)': (272, 0x10000000),\n"
            "}\n"
            "res = {}\n"
            "for name, (nr, *args) in calls.items():\n"
            "    ctypes.set_errno(0)\n"
            "    rc = libc.syscall(nr, *args)\n"
            "    res[name] = ctypes.get_errno() if rc == -1 else 0\n"
            "try:\n"
            "    socket.socket(40, socket.SOCK_STREAM).close(); res['socket(AF_VSOCK)'] = 0\n"
            "except OSError as e:\n"
            "    res['socket(AF_VSOCK)'] = e.errno\n"
            "print(json.dumps(res))\n")
        res = json.loads(out)
        self.assertEqual(len(res), 31)
        self.assertEqual({k: v for k, v in res.items() if v != errno.EPERM}, {})


    def test_a_symlink_at_a_mount_point_is_refused(self):
        """The guest's root owns its upper dir: a /tmp or /run it turned
        into a symlink (or a layer or image that had one) must not steer the
        start's mounts, which follow symlinks and, before pivot_root,
        resolve an absolute one against the host's root."""
        host_dir = tempfile.mkdtemp(prefix="cubicle-ct-target-")
        self.addCleanup(shutil.rmtree, host_dir, True)
        for point in ("tmp", "run"):
            c = self.computer(disk_mb=64)
            # No loop device: the upper dir is c.dir/upper, on the host.
            p = subprocess.run(["unshare", "-m", "sh", "-c",
                                'mount --bind /dev/null /dev/loop-control && exec "$@"', "sh",
                                DRIVERTOOL, "create"] + c.args,
                               capture_output=True, text=True, timeout=60)
            self.assertEqual(p.returncode, 0, p.stderr)
            upper = os.path.join(c.dir, "upper")
            os.makedirs(upper, exist_ok=True)
            link = os.path.join(upper, point)
            os.symlink(host_dir, link)
            os.lchown(link, c.uid_base, c.uid_base)
            p = c.call("start", check=False)
            self.assertEqual(p.returncode, 1, p.stderr)
            self.assertIn("mount point", p.stderr)
            self.assertIn(point, p.stderr)
            self.assertFalse(c.alive())
            self.assertEqual(os.listdir(host_dir), [])
            self.assertFalse([l for l in read("/proc/self/mountinfo").splitlines()
                              if host_dir in l])

class Network(ContainerTest):
    def test_inbound_connections_do_not_reach_a_server_inside(self):
        # A port nothing on the host listens on.
        probe = socket.socket()
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
        probe.close()
        c = self.computer().create().start()
        c.bash("setsid python3 -m http.server %d --bind 0.0.0.0 >/dev/null 2>&1 & "
               "for i in $(seq 100); do curl -s -o /dev/null localhost:%d && exit 0; "
               "sleep 0.1; done; exit 1" % (port, port))
        # Listening inside its own network namespace, not the host's.
        host_tcp = read("/proc/net/tcp") + read("/proc/net/tcp6")
        self.assertNotIn(":%04X 00000000:0000 0A" % port, host_tcp.upper())
        for addr in ("127.0.0.1", "::1"):
            s = socket.socket(socket.AF_INET6 if ":" in addr else socket.AF_INET)
            s.settimeout(3)
            with self.assertRaises(OSError):
                s.connect((addr, port))
            s.close()

    def test_host_loopback_is_unreachable_from_inside(self):
        srv = socket.socket()
        srv.bind(("127.0.0.1", 0))
        srv.listen(4)
        srv.settimeout(0.2)
        port = srv.getsockname()[1]
        self.addCleanup(srv.close)
        c = self.computer().create().start()
        out = c.request("POST", "/v1/actions/python", {"code": (
            "import socket\nres = []\n"
            "for host in ('10.0.2.2', '127.0.0.1'):\n"
            "    s = socket.socket(); s.settimeout(3)\n"
            "    try:\n"
            "        s.connect((host, %d)); res.append('connected')\n"
            "    except OSError as e:\n"
            "        res.append(type(e).__name__)\n"
            "print(res)\n") % port, "timeout_s": 30}).json
        self.assertNotIn("connected", out["stdout"], out)
        with self.assertRaises(socket.timeout):
            srv.accept()
        # The guest does have its slirp network: address and default route.
        out = c.bash("cat /sys/class/net/tap0/operstate; "
                     "awk '$2 == \"00000000\" {print $1}' /proc/net/route")["stdout"].split()
        self.assertEqual(out, ["unknown", "tap0"])


    def test_the_host_and_link_local_are_unreachable_and_outbound_works(self):
        with hostnet.HostTargets() as t:
            self.assertTrue(t.host_reaches_link_local())
            c = self.computer().create().start()
            remote = (t.remote, t.remote_port)
            ll = (t.link_local, t.remote_port)
            lo = ("10.0.2.2", t.host_port("127.0.0.1"))
            targets = t.host_targets() + [remote, ll, lo]
            out = c.request("POST", "/v1/actions/python", {
                "code": hostnet.probe_code(targets), "timeout_s": 60}, timeout=90).json
            res = json.loads(out["stdout"])
            key = "%s:%d"
            # Outbound: a machine that is not the host answers.
            self.assertEqual(res.pop(key % remote), "connected: remote", res)
            # The host's addresses and link-local: the guest's own routes say no.
            # 10.0.2.2 (the host's loopback): slirp4netns' own option says no.
            self.assertIn(res.pop(key % lo), ("ECONNREFUSED", "ENETUNREACH"))
            # 127.0.0.1 is the guest's own loopback, where nothing listens.
            self.assertEqual(res.pop(key % ("127.0.0.1", t.host_port("127.0.0.1"))),
                             "ECONNREFUSED")
            self.assertEqual(set(res.values()), {"EACCES"}, res)
            self.assertEqual(len(res), len(t.host_targets()))  # - 127.0.0.1 + link-local
            self.assertEqual(t.reached(), [])
            # The routes, which the user cannot remove: nobody in the guest
            # has CAP_NET_ADMIN over a network namespace the host's root owns.
            # (the egress policy's table, guest-net.h: looked up before main)
            out = c.bash("ip route show table 1000; ip route get 10.0.2.3; "
                         "ip route del 169.254.0.0/16 table 1000 2>&1; "
                         "ip rule del pref 200 2>&1; "
                         "ip route del prohibit %s table 1000 2>&1; echo rc=$?" % t.host_end,
                         ok=False)["stdout"]
            self.assertIn("169.254.0.0/16", out)
            self.assertIn("prohibit %s " % t.host_end, out)
            self.assertRegex(out, r"10\.0\.2\.3 via 10\.0\.2\.2 dev tap0|10\.0\.2\.3 dev tap0")
            self.assertIn("Operation not permitted", out)
            self.assertTrue(out.rstrip().endswith("rc=2"), out)
            self.assertEqual(out.count("Operation not permitted"), 3, out)
            self.assertIn("prohibit 169.254.0.0/16", c.bash("ip route show table 1000")[
                "stdout"])
            init = c.state["init_pid"]
            fd = os.open("/proc/%d/ns/net" % init, os.O_RDONLY)
            try:
                owner = fcntl.ioctl(fd, NS_GET_USERNS)
                self.assertEqual(os.fstat(owner).st_ino, os.stat("/proc/self/ns/user").st_ino)
                os.close(owner)
            finally:
                os.close(fd)

    def test_one_computer_cannot_reach_another(self):
        # A port nothing on the host listens on.
        probe = socket.socket()
        probe.bind(("0.0.0.0", 0))
        port = probe.getsockname()[1]
        probe.close()
        a = self.computer().create().start()
        b = self.computer().create().start()
        a.bash("setsid python3 -m http.server %d --bind 0.0.0.0 >/dev/null 2>&1 & "
               "for i in $(seq 100); do curl -s -o /dev/null localhost:%d && exit 0; "
               "sleep 0.1; done; exit 1" % (port, port))
        # Every address A has (its slirp address is the same in every
        # computer), the gateway and DNS of slirp, and every host address.
        a_addrs = a.bash("ip -o -4 addr show | awk '{print $4}' | cut -d/ -f1")["stdout"].split()
        host_addrs = [a.split("/")[0] for a in
                      (l.split()[3] for l in subprocess.run(
                          ["ip", "-o", "-4", "addr", "show"], capture_output=True, text=True,
                          check=True).stdout.splitlines())]
        targets = sorted(set(a_addrs + host_addrs + ["10.0.2.2", "10.0.2.3"]))
        self.assertIn("10.0.2.100", targets)
        # A's server answers on A's own addresses: the probe below can fail.
        a_self = a.bash("curl -s -o /dev/null -w '%%{http_code}' http://10.0.2.100:%d/" % port)
        self.assertEqual(a_self["stdout"], "200")
        out = b.request("POST", "/v1/actions/python", {"code": (
            "import json, socket\nres = {}\n"
            "for host in %r:\n"
            "    s = socket.socket(); s.settimeout(3)\n"
            "    try:\n"
            "        s.connect((host, %d)); res[host] = 'connected'\n"
            "    except OSError as e:\n"
            "        res[host] = type(e).__name__\n"
            "    s.close()\n"
            "print(json.dumps(res))\n") % (targets, port), "timeout_s": 60}, timeout=90).json
        res = json.loads(out["stdout"])
        self.assertEqual(sorted(res), targets)
        self.assertEqual([h for h, r in res.items() if r == "connected"], [], res)
        # Nor does the host reach A's server at any of its addresses.
        for addr in host_addrs:
            s = socket.socket()
            s.settimeout(3)
            with self.assertRaises(OSError):
                s.connect((addr, port))
            s.close()


class Disk(ContainerTest):
    def test_writing_past_the_disk_fails_and_the_data_survives(self):
        c = self.computer(disk_mb=64).create()
        self.assertEqual(c.state["disk"], "ext4 64 MiB")
        disk = os.path.join(c.dir, "disk.ext4")
        self.assertEqual(os.stat(disk).st_size, 64 << 20)
        c.start()
        # Mounted in the computer's mount namespace only, on a loop device.
        self.assertEqual([l for l in read("/proc/self/mountinfo").splitlines() if c.dir in l],
                         [])
        loops = loop_devices(c.dir)
        self.assertEqual(len(loops), 1)
        # Direct I/O: the host's page cache holds no second copy of the disk.
        self.assertEqual(read("/sys/block/%s/loop/dio" % loops[0][0]).strip(), "1")
        c.bash("echo kept > ~/kept.txt")
        out = c.bash("df -m / | tail -1; dd if=/dev/zero of=~/big bs=1M count=100; "
                     "echo dd=$?; stat -c %s ~/big", ok=False)
        self.assertIn("No space left on device", out["stderr"])
        lines = out["stdout"].split("\n")
        self.assertLessEqual(int(lines[0].split()[1]), 64)  # df: the size of the disk
        self.assertEqual(lines[1], "dd=1")
        self.assertLess(int(lines[2]), 64 << 20)
        # The host's file never holds more than the size.
        self.assertLessEqual(os.stat(disk).st_blocks * 512, 64 << 20)
        self.assertTrue(c.health()["ready"])
        # Space comes back, to the guest and (discard) to the host; files
        # survive stop and start.
        c.bash("rm ~/big && echo more > ~/more.txt && sync")
        wait_until(lambda: os.stat(disk).st_blocks * 512 < 32 << 20, 10,
                   "the deleted file's blocks to be given back to the host")
        c.stop()
        wait_until(lambda: loop_devices(c.dir) == [], 10,
                   "the stopped computer's loop device to clear itself")
        c.start()
        self.assertEqual(c.bash("cat ~/kept.txt ~/more.txt")["stdout"], "kept\nmore\n")

    def test_without_loop_devices_the_disk_is_unlimited_and_the_log_says_why(self):
        c = self.computer(disk_mb=64)
        # A host without loop devices: /dev/loop-control is /dev/null for create.
        p = subprocess.run(["unshare", "-m", "sh", "-c",
                            'mount --bind /dev/null /dev/loop-control && exec "$@"', "sh",
                            DRIVERTOOL, "create"] + c.args,
                           capture_output=True, text=True, timeout=60)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertTrue(c.state["disk"].startswith("unlimited: no free loop device"), c.state)
        p = c.call("start")
        self.assertIn("disk unlimited: no free loop device", p.stderr)
        self.assertIn("disk unlimited: no free loop device",
                      read(os.path.join(c.dir, "console.log")))
        self.assertFalse(os.path.exists(os.path.join(c.dir, "disk.ext4")))
        self.assertEqual(loop_devices(c.dir), [])
        c.bash("dd if=/dev/zero of=~/big bs=1M count=80 2>/dev/null")  # past 64 MiB
        self.assertEqual(os.path.getsize(os.path.join(c.dir, "upper", "home", "user", "big")),
                         80 << 20)

class Teardown(ContainerTest):
    def leftovers(self, c, base, netns, pids):
        for pid in pids:
            reap(pid)

        def left_now():
            return {p: v for p, v in processes().items()
                    if base <= v[0] < base + 65536 or (netns and v[2] == netns) or p in pids}
        # The pid namespace's other processes die with its init and are
        # reaped by the kernel as the namespace goes: a zombie of the
        # computer's may still show for a moment. Anything else is a leak.
        left = left_now()
        if left and all(v[1] == "Z" for v in left.values()):
            try:
                wait_until(lambda: not left_now() or
                           any(v[1] != "Z" for v in left_now().values()), 10,
                           "the computer's zombies to be reaped")
            except Exception:
                pass
            left = left_now()
        mounts = [l for l in read("/proc/self/mountinfo").splitlines() if c.dir in l]
        mounts += loop_devices(c.dir)
        return left, mounts

    def test_destroy_leaves_no_process_mount_cgroup_or_namespace(self):
        c = self.computer(session=True).create().start()
        s = c.state
        base, init, slirp = s["uid_base"], s["init_pid"], s["slirp_pid"]
        netns = os.stat("/proc/%d/ns/net" % init).st_ino
        self.assertNotEqual(netns, os.stat("/proc/self/ns/net").st_ino)
        cgroups = s["cgroups"]["dirs"]
        for d in cgroups:
            self.assertTrue(os.path.isdir(d))
        self.assertEqual(s["disk"], "ext4 1024 MiB")
        self.assertEqual(len(loop_devices(c.dir)), 1)  # the check below can fail
        c.bash("sleep 1000 >/dev/null 2>&1 & echo > ~/x")
        c.destroy()
        left, mounts = self.leftovers(c, base, netns, {init, slirp})
        self.assertEqual(left, {})
        self.assertEqual(mounts, [])
        for d in cgroups:
            self.assertFalse(os.path.exists(d), d)
        self.assertEqual(os.listdir(c.dir), [])
        self.assertTrue(os.path.isdir(os.path.join(c.session, "working")))  # the session stays
        self.assertFalse(any(k in c.state for k in ("init_pid", "slirp_pid", "cgroups",
                                                     "uid_slot", "disk")))
        # Idempotent.
        c.destroy()

    def test_destroy_cleans_up_a_computer_whose_state_was_lost(self):
        # As after a cubicled crash between booting and writing the state.
        c = self.computer().create().start()
        s = c.state
        base, init, slirp = s["uid_base"], s["init_pid"], s["slirp_pid"]
        netns = os.stat("/proc/%d/ns/net" % init).st_ino
        with open(c.state_path, "w") as f:
            json.dump({"uid_slot": s["uid_slot"], "uid_base": base}, f)
        self.assertFalse(c.alive())
        c.destroy()
        left, mounts = self.leftovers(c, base, netns, {init, slirp})
        self.assertEqual(left, {})
        self.assertEqual(mounts, [])
        self.assertEqual(os.listdir(c.dir), [])

    def test_stop_and_destroy_of_a_half_created_computer(self):
        c = self.computer()
        c.stop()
        c.destroy()
        c.create()
        c.stop()
        c.destroy()
        self.assertEqual(os.listdir(c.dir), [])

    def test_network_helper_ends_with_the_computer(self):
        # The computer dies on its own (no stop: as with cubicled down).
        c = self.computer().create().start()
        init, slirp = c.state["init_pid"], c.state["slirp_pid"]
        os.kill(init, 9)

        def gone(pid):
            reap(pid)
            return not os.path.exists("/proc/%d" % pid)
        wait_until(lambda: gone(init) and gone(slirp), 10, "init and slirp4netns to exit")
        self.assertFalse(c.alive())
        pids = c.cgroup_dir("pids")
        self.assertEqual(read(pids + "/cgroup.procs").split(), [])
        c.start()  # starts again from the same disk
        self.assertTrue(c.health()["ready"])

    def test_computer_outlives_the_caller(self):
        c = self.computer().create().start()
        init = c.state["init_pid"]
        # drivertool (the caller) has exited; the computer runs on in its own session.
        self.assertTrue(c.alive())
        self.assertNotEqual(os.getsid(init), os.getsid(0))
        self.assertTrue(c.health()["ready"])


class Desktop(ContainerTest):
    def test_desktop_becomes_ready(self):
        image("desktop")
        c = self.computer(kind="desktop", millicpus=2000, memory_mb=4096, pids=2048,
                          resolution=(1280, 800)).create()
        t0 = time.monotonic()
        c.start()
        t_sock = time.monotonic() - t0
        wait_until(lambda: c.health().get("ready"), 90, "the desktop to be ready")
        t_ready = time.monotonic() - t0
        self.assertEqual(c.request("POST", "/v1/actions/get_screen_size", {}).json,
                         {"width": 1280, "height": 800})
        shot = c.request("POST", "/v1/actions/screenshot", {})
        self.assertEqual(shot.status, 200)
        self.assertEqual(shot.body[:8], b"\x89PNG\r\n\x1a\n")
        # Idle memory: let the session settle, then the cgroup's figure and
        # the processes' proportional set size.
        time.sleep(5)
        cg = c.cgroup_dir("memory")
        if c.state["cgroups"]["version"] == 2:
            usage = int(read(cg + "/memory.current"))
            stat = dict(l.split() for l in read(cg + "/memory.stat").splitlines())
            cache = int(stat.get("file", 0))
        else:
            usage = int(read(cg + "/memory.usage_in_bytes"))
            stat = dict(l.split() for l in read(cg + "/memory.stat").splitlines())
            cache = int(stat.get("total_cache", stat.get("cache", 0)))
        pss = 0
        procs = [int(p) for p in read(cg + "/cgroup.procs").split()]
        for pid in procs:
            for line in read("/proc/%d/smaps_rollup" % pid, "").splitlines():
                if line.startswith("Pss:"):
                    pss += int(line.split()[1]) * 1024
        print("\ndesktop: envd socket %.2f s, ready %.2f s after start; idle: cgroup %d MiB "
              "(%d MiB page cache), PSS of %d processes %d MiB"
              % (t_sock, t_ready, usage >> 20, cache >> 20, len(procs), pss >> 20),
              file=sys.stderr)
        self.assertLess(usage, 4096 << 20)
        # Firefox, with its own sandbox and many threads and processes, runs
        # under the computer's seccomp filter (it falls back from the user
        # namespaces the filter denies).
        r = c.request("POST", "/v1/actions/launch",
                      {"app": "firefox-esr", "args": ["about:blank"], "wait_s": 60}, timeout=90)
        self.assertEqual(r.status, 200, r.body[:500])
        self.assertEqual(r.json["window"]["app_class"], "firefox-esr")
        c.stop()
        self.assertFalse(c.alive())


if __name__ == "__main__":
    unittest.main()
