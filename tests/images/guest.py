"""Boots a built guest image (build/images/<name>/rootfs) with run-guest and
talks to its envd over the unix socket, like the host will.

Only the Python standard library is used.
"""

import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "envd"))
import harness  # noqa: E402
from harness import Response, UnixConnection, http_call, wait_until  # noqa: E402,F401

IMAGES = os.environ.get("CUBICLE_IMAGES") or os.path.join(harness.BUILD, "images")
RUN_GUEST = os.path.join(os.path.dirname(os.path.abspath(__file__)), "run-guest")


def image_rootfs(name):
    return os.path.join(IMAGES, name, "rootfs")


class Guest:
    """One image booted in namespaces, with envd as its agent."""

    def __init__(self, image, args=()):
        self.image = image
        self.args = list(args)
        self.token = secrets.token_hex(16)
        self.state = tempfile.mkdtemp(prefix="cubicle-guest-")
        self.sock = os.path.join(self.state, "io", "envd.sock")
        self.proc = None
        self.started_at = None

    def start(self):
        os.makedirs(os.path.join(self.state, "io"))
        with open(os.path.join(self.state, "io", "token"), "w") as f:
            f.write(self.token + "\n")
        self.log_path = os.path.join(self.state, "guest.log")
        self.log = open(self.log_path, "wb")
        self.started_at = time.monotonic()
        self.proc = subprocess.Popen(
            [RUN_GUEST, image_rootfs(self.image), self.state] + self.args,
            stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True)
        wait_until(lambda: self._alive() and os.path.exists(self.sock), 30,
                   "envd's socket in the guest")
        return self

    def _alive(self):
        if self.proc.poll() is not None:
            raise AssertionError("the guest exited (%s):\n%s" % (
                self.proc.returncode, self.read_log()))
        return True

    def read_log(self):
        try:
            with open(self.log_path, "rb") as f:
                return f.read().decode(errors="replace")[-6000:]
        except OSError:
            return ""

    def request(self, method, path, body=None, token=True, timeout=120):
        return http_call(UnixConnection(self.sock, timeout=timeout), method, path, body,
                         self.token if token is True else token)

    def action(self, name, params=None, **kw):
        return self.request("POST", "/v1/actions/" + name,
                            body=params if params is not None else {}, **kw)

    def ok(self, name, params=None, **kw):
        r = self.action(name, params, **kw)
        if r.status != 200:
            raise AssertionError("%s(%r) -> %d %s" % (name, params, r.status, r.body[:500]))
        if r.headers.get("content-type", "").startswith("application/json"):
            return r.json
        return r

    def health(self):
        return self.request("GET", "/health").json

    def wait_ready(self, timeout=60):
        """Waits until /health says ready; returns seconds since start()."""
        wait_until(lambda: self._alive() and self.health().get("ready"), timeout,
                   "the guest desktop to be ready")
        return time.monotonic() - self.started_at

    def stop(self):
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=30)
        if getattr(self, "log", None):
            self.log.close()
        # The upper dir holds files owned by the guest's users: remove as root.
        shutil.rmtree(self.state, ignore_errors=True)


# ---- checks both images share -------------------------------------------

def processes(g):
    """Every process in the guest as dicts pid, ppid, pgid, uid, comm (ps
    through the bash action; the command and its ps are among them)."""
    out = g.ok("bash", {"command": "ps -e -o pid=,ppid=,pgid=,uid=,comm="})["stdout"]
    procs = []
    for line in out.splitlines():
        pid, ppid, pgid, uid, comm = line.split(None, 4)
        procs.append({"pid": int(pid), "ppid": int(ppid), "pgid": int(pgid),
                      "uid": int(uid), "comm": comm.strip()})
    return procs


def descendants(procs, root):
    """Pids of root's descendants (by parent pid)."""
    kids, out, todo = {}, set(), [root]
    for p in procs:
        kids.setdefault(p["ppid"], []).append(p["pid"])
    while todo:
        for k in kids.get(todo.pop(), []):
            if k not in out:
                out.add(k)
                todo.append(k)
    return out


def check_only_envd(tc, procs, session_parts, allowed):
    """No services but envd: PID 1 is tini with envd as its child, and every
    other process descends from envd or stays in the process group of one of
    envd's session children (daemons they spawned through D-Bus activation
    are reparented to PID 1 but keep that group). Returns (envd, procs, the
    pids of the session: the session_parts children of envd and what they
    started, whose names must all match the regular expression allowed).
    procs: processes()."""
    by_pid = {p["pid"]: p for p in procs}
    tc.assertEqual(by_pid[1]["comm"], "tini", procs)
    envds = [p for p in procs if p["comm"] == "envd"]
    tc.assertEqual(len(envds), 1, procs)
    envd = envds[0]
    tc.assertEqual(envd["ppid"], 1)
    under_envd = descendants(procs, envd["pid"])
    parts = [p for p in procs if p["ppid"] == envd["pid"] and p["comm"] in session_parts]
    tc.assertEqual(sorted(p["comm"] for p in parts), sorted(session_parts), procs)
    groups = {p["pgid"] for p in parts}
    session = set()
    for p in parts:
        session |= {p["pid"]} | descendants(procs, p["pid"])
    for p in procs:
        if p["pid"] in (1, envd["pid"]):
            continue
        tc.assertTrue(p["pid"] in under_envd or p["pgid"] in groups,
                      "%r was not started by envd:\n%s" % (p, procs))
        if p["pid"] not in under_envd:
            session.add(p["pid"])
    for pid in session:
        tc.assertRegex(by_pid[pid]["comm"], r"\A(?:%s)\Z" % allowed, by_pid[pid])
    return envd, procs, session


def check_user_basics(tc, g):
    """The user's environment: /session dirs owned by user, C.UTF-8, UTC,
    and the CA bundle curl and python use."""
    out = g.ok("bash", {"command": "stat -c '%U %a' /session/input /session/output "
                                   "/session/working; echo $LANG; date +%Z; "
                                   "cat /etc/timezone; locale charmap; "
                                   "grep -c 'BEGIN CERTIFICATE' /etc/ssl/certs/ca-certificates.crt"
                        })["stdout"].split("\n")
    tc.assertEqual(out[:3], ["user 755"] * 3)
    tc.assertEqual(out[3], "C.UTF-8")
    tc.assertEqual(out[4], "UTC")
    tc.assertEqual(out[5], "Etc/UTC")
    tc.assertEqual(out[6], "UTF-8")
    # curl's CA bundle (Debian builds curl with this path), not empty.
    tc.assertGreater(int(out[7]), 100, "too few certificates in the CA bundle")
