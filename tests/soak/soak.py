#!/usr/bin/env python3
"""Soak and chaos: cubicled under time and faults (tests/soak/README.md).

Cycles of create -> actions -> stop -> start -> actions -> delete over the
container and microVM drivers, for --minutes, with --kill-every seconds
between random kill -9s of cubicled, a computer's envd, QEMU or slirp4netns
at random points of those cycles. After each kill the computer must come to
running and answer, or to `error` with a reason (never stay in between);
cubicled killed is restarted on the same state directory and must adopt
every computer. Every --check-every seconds, and at the end once every
computer is deleted, the host is checked for leaks against the baseline
taken before cubicled started: cubicled's descriptors, RSS and threads;
processes in cubicle uid ranges; mounts, cgroups and loop devices of the
state directory; QEMU and slirp4netns processes of it; network namespaces;
the database's size; and the usage ledger (per computer: at most one open
segment, none after delete, no overlap, gaps within a second per kill of
cubicled). --disk-full runs the state directory on a small loop-mounted
filesystem and fills it: the API must answer clearly (503/507, never a 500
or a hang), reads keep working, and everything works again once space
returns.

Prints figures (cycles, kills by target, leak checks) as JSON at the end and
exits non-zero on any failed promise. Run as root, on loopback only.
  python3 tests/soak/soak.py --build build --minutes 2 --kill-every 10
"""

import argparse
import glob
import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "host"))


def log(*a):
    print("[soak %s]" % time.strftime("%H:%M:%S"), *a, flush=True)


def read(path):
    try:
        with open(path, "rb") as f:
            return f.read().decode(errors="replace")
    except OSError:
        return ""


def proc_figures(pid):
    """cubicled's descriptors, RSS (KiB) and threads."""
    try:
        fds = len(os.listdir("/proc/%d/fd" % pid))
    except OSError:
        return None
    st = dict(l.split(":", 1) for l in read("/proc/%d/status" % pid).splitlines() if ":" in l)
    return {"fds": fds, "rss_kib": int(st.get("VmRSS", "0 kB").split()[0]),
            "threads": int(st.get("Threads", "0").strip())}


def computer_ids(state):
    """Every computer this cubicled ever had (ids are random: nobody else's)."""
    try:
        db = sqlite3.connect(os.path.join(state, "cubicle.db"), timeout=30)
        try:
            return {r[0] for r in db.execute("SELECT id FROM computers").fetchall()}
        finally:
            db.close()
    except sqlite3.Error:
        return set()


def host_snapshot(state):
    """What the host holds of this state directory's computers (other
    engineers' cubicleds run beside it: only ours count). Processes: in a
    computer's cgroup, or naming the state directory (QEMU, slirp4netns,
    virtiofsd...); their network namespaces; mounts under the state
    directory; the computers' cgroup directories; loop devices of files in
    it."""
    ids = computer_ids(state)
    in_cgroup, qemu, slirp, other, netns = 0, 0, 0, 0, set()
    for d in os.listdir("/proc"):
        if not d.isdigit() or d == str(os.getpid()):
            continue
        s = read("/proc/%s/status" % d)
        if not s or "\nState:\tZ" in s:
            continue
        cmd = read("/proc/%s/cmdline" % d)
        cg = read("/proc/%s/cgroup" % d)
        ours_cg = "/cubicle/c-" in cg and any("/cubicle/" + i in cg for i in ids)
        ours_cmd = state in cmd and "cubicled" not in cmd.split("\0")[0] and \
            "soak.py" not in cmd
        if not (ours_cg or ours_cmd):
            continue
        exe = cmd.split("\0")[0]
        if exe.startswith("qemu-system") or "/qemu-system" in exe:
            qemu += 1
        elif exe.endswith("slirp4netns"):
            slirp += 1
        elif ours_cg:
            in_cgroup += 1
        else:
            other += 1
        try:
            netns.add(os.readlink("/proc/%s/ns/net" % d))
        except OSError:
            pass
    mounts = [l for l in read("/proc/self/mountinfo").splitlines()
              if state + "/" in l]
    loops = subprocess.run(["losetup", "-a"], capture_output=True, text=True).stdout
    cgroups = [g for i in ids for g in glob.glob("/sys/fs/cgroup/cubicle/" + i) +
               glob.glob("/sys/fs/cgroup/*/cubicle/" + i)]
    return {
        "computer_processes": in_cgroup,
        "other_processes": other,
        "qemu": qemu,
        "slirp4netns": slirp,
        "netns": len(netns),
        "mounts": len(mounts),
        "cgroups": len(cgroups),
        "loop_devices": sum(1 for l in loops.splitlines() if state + "/" in l),
    }


def ledger_problems(state, cubicled_kills):
    """The usage ledger's consistency, straight from the database."""
    db = sqlite3.connect(os.path.join(state, "cubicle.db"), timeout=30)
    try:
        segs = db.execute("SELECT computer, start_ms, end_ms, open FROM usage_segments "
                          "ORDER BY computer, start_ms, id").fetchall()
        deleted = {r[0] for r in db.execute(
            "SELECT id FROM computers WHERE state = 'deleted'").fetchall()}
    finally:
        db.close()
    out, by = [], {}
    for cid, s, e, o in segs:
        by.setdefault(cid, []).append((s, e, o))
    allowed_gap = 1000 * (cubicled_kills + 1)
    for cid, ss in by.items():
        opens = sum(o for _, _, o in ss)
        if opens > 1:
            out.append("%s: %d open segments" % (cid, opens))
        if cid in deleted and opens:
            out.append("%s: deleted with an open segment" % cid)
        gaps = 0
        for (s0, e0, _), (s1, e1, _) in zip(ss, ss[1:]):
            if s1 < e0:
                out.append("%s: segments overlap (%d < %d)" % (cid, s1, e0))
            gaps += max(0, s1 - e0)
        if gaps > allowed_gap:
            out.append("%s: %d ms missing from its ledger (%d cubicled kills)" %
                       (cid, gaps, cubicled_kills))
    return out


class Soak:
    def __init__(self, a):
        self.a = a
        self.rng = random.Random(a.seed)
        self.kills = {"cubicled": 0, "envd": 0, "qemu": 0, "slirp4netns": 0}
        self.cycles = {"container": 0, "vm": 0}
        self.failures = []
        self.errors = []  # computers that went to error with a reason
        self.checks = []
        self.disk = {}
        self.next_kill = time.monotonic() + a.kill_every if a.kill_every else None

    # ---- cubicled --------------------------------------------------------------

    def start(self):
        from cubicled import Cubicled
        self.state = tempfile.mkdtemp(prefix="cubicle-soak-")
        self.loop_mount = None
        if self.a.disk_full:
            img = self.state + ".img"
            subprocess.run(["truncate", "-s", "%dM" % self.a.disk_mb, img], check=True)
            subprocess.run(["mkfs.ext4", "-q", "-F", img], check=True)
            subprocess.run(["mount", "-o", "loop", img, self.state], check=True)
            self.loop_mount = img
        self.baseline = host_snapshot(self.state)
        self.cd = Cubicled([], state_dir=self.state).start()
        self.ws, self.key = self.cd.workspace("soak")
        self.proc_base = proc_figures(self.cd.proc.pid)
        log("cubicled on port", self.cd.port, "state", self.state, "baseline", self.baseline,
            self.proc_base)

    def req(self, *a, **kw):
        kw.setdefault("timeout", 300)
        return self.cd.req(*a, **kw)

    def restart_cubicled(self):
        self.cd.kill9()
        self.kills["cubicled"] += 1
        self.cd.restart()

    # ---- chaos -----------------------------------------------------------------

    def pids_of(self, cid):
        from leaks import driver_state
        st = driver_state(self.state, cid)
        out = {}
        if st.get("qemu_pid"):
            out["qemu"] = st["qemu_pid"]
        if st.get("slirp_pid"):
            out["slirp4netns"] = st["slirp_pid"]
        mark = "/cubicle/%s" % cid
        for d in os.listdir("/proc"):
            if d.isdigit() and read("/proc/%s/comm" % d).strip() == "envd" and \
                    mark in read("/proc/%s/cgroup" % d):
                out["envd"] = int(d)
        return out

    def maybe_kill(self, cid, where):
        """A kill -9 if one is due: of cubicled or of one of cid's processes."""
        if self.next_kill is None or time.monotonic() < self.next_kill:
            return None
        self.next_kill = time.monotonic() + self.rng.uniform(0.5, 1.5) * self.a.kill_every
        targets = self.pids_of(cid) if cid else {}
        choice = self.rng.choice(["cubicled"] + sorted(targets))
        log("kill -9", choice, "of", cid, "at", where)
        if choice == "cubicled":
            self.restart_cubicled()
        else:
            try:
                os.kill(targets[choice], signal.SIGKILL)
                self.kills[choice] += 1
            except ProcessLookupError:
                return None
        return choice

    def settle(self, cid, want):
        """After a kill: the computer comes to `want` (and answers) or to
        error with a reason; a computer left in between is a failure."""
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            r = self.req("GET", "/v1/computers/" + cid, key=self.key)
            if r.status == 404:
                return "gone"
            st = r.json.get("state")
            if st == "error":
                if not r.json.get("error"):
                    self.fail("%s in error without a reason: %s" % (cid, r.json))
                else:
                    self.errors.append("%s after a kill: %s" % (cid, str(r.json["error"])[:200]))
                return "error"
            if st == want:
                if want != "running":
                    return st
                b = self.req("POST", "/v1/computers/%s/actions/bash" % cid,
                             {"command": "echo ok"}, key=self.key)
                if b.status == 200 and b.json.get("stdout") == "ok\n":
                    return st
            elif st in ("running", "stopped") and st != want:
                return st
            time.sleep(0.5)
        self.fail("%s stuck in %s after a kill" % (cid, st))
        return st

    def fail(self, what):
        log("FAIL", what)
        self.failures.append(what)

    # ---- the cycle ---------------------------------------------------------------

    def cycle(self, iso):
        r = self.req("POST", "/v1/computers?wait=running&timeout_s=240",
                     {"kind": "sandbox", "isolation": iso}, key=self.key)
        if r.status not in (200, 201):
            self.fail("create %s: %d %s" % (iso, r.status, r.body[:300]))
            return
        cid = r.json["id"]
        if r.json.get("state") != "running":
            # In error with its reason is the promise kept (a VM that does
            # not boot within --ready-timeout on a starved machine); counted.
            if r.json.get("state") == "error" and r.json.get("error"):
                self.errors.append("%s create: %s" % (iso, str(r.json["error"])[:200]))
            else:
                self.fail("create %s: %s %s" % (iso, r.json.get("state"), r.json.get("error")))
            self.req("DELETE", "/v1/computers/" + cid, key=self.key)
            return
        killed = False
        for phase in ("running", "stop", "stopped", "start", "running2", "delete"):
            k = self.maybe_kill(cid, phase)
            killed |= k is not None
            if k:
                st = self.settle(cid, "running" if phase in ("running", "start", "running2")
                                 else "stopped" if phase == "stopped" else "running")
                if st in ("error", "gone"):
                    break
            if phase in ("running", "running2"):
                b = self.req("POST", "/v1/computers/%s/actions/bash" % cid,
                             {"command": "echo $((6*7))"}, key=self.key)
                if b.status != 200 or b.json.get("stdout") != "42\n":
                    st = self.settle(cid, "running") if killed else None
                    if st != "error" and not killed:
                        self.fail("%s bash: %d %s" % (cid, b.status, b.body[:200]))
                    if st == "error":
                        break
                w = self.req("POST", "/v1/computers/%s/actions/write_file" % cid,
                             {"path": "/tmp/soak", "content": "x" * 1000}, key=self.key)
                if w.status != 200 and not killed:
                    self.fail("%s write_file: %d %s" % (cid, w.status, w.body[:200]))
            elif phase == "stop":
                s = self.req("POST", "/v1/computers/%s/stop" % cid, key=self.key)
                if s.status != 200 and not killed:
                    self.fail("%s stop: %d %s" % (cid, s.status, s.body[:200]))
            elif phase == "start":
                s = self.req("POST", "/v1/computers/%s/start?wait=running&timeout_s=240" % cid,
                             key=self.key)
                if s.status != 200 and not killed:
                    self.fail("%s start: %d %s" % (cid, s.status, s.body[:200]))
        d = self.req("DELETE", "/v1/computers/" + cid, key=self.key)
        if d.status not in (200, 404):
            self.fail("%s delete: %d %s" % (cid, d.status, d.body[:200]))
        self.cycles[iso] += 1

    # ---- leaks -------------------------------------------------------------------

    def check(self, final=False):
        snap = host_snapshot(self.state)
        pf = proc_figures(self.cd.proc.pid)
        db = sum(os.path.getsize(p) for p in glob.glob(os.path.join(self.state, "cubicle.db*")))
        ledger = ledger_problems(self.state, self.kills["cubicled"])
        rec = {"t": round(time.monotonic() - self.t0), "host": snap, "cubicled": pf,
               "db_bytes": db, "ledger_problems": len(ledger)}
        self.checks.append(rec)
        log("check", json.dumps(rec))
        for p in ledger:
            self.fail("ledger: " + p)
        if final:
            for k, v in snap.items():
                if v != self.baseline[k]:
                    self.fail("leak: %s %d after, %d before" % (k, v, self.baseline[k]))
            # cubicled back near its own baseline (a restarted one is new).
            if self.kills["cubicled"] == 0 and pf and self.proc_base:
                if pf["fds"] > self.proc_base["fds"] + 4:
                    self.fail("cubicled descriptors %d, %d at start" %
                              (pf["fds"], self.proc_base["fds"]))
                if pf["threads"] > self.proc_base["threads"] + 4:
                    self.fail("cubicled threads %d, %d at start" %
                              (pf["threads"], self.proc_base["threads"]))

    # ---- a full disk -----------------------------------------------------------

    def disk_full(self):
        """Fills the state filesystem; the API says what it cannot do, clearly."""
        # A computer that runs while the disk fills.
        r = self.req("POST", "/v1/computers?wait=running&timeout_s=240", {"kind": "sandbox"},
                     key=self.key)
        before = r.json["id"] if r.status == 201 and r.json.get("state") == "running" else None
        if not before:
            self.fail("create before the disk fills: %d %s" % (r.status, r.body[:300]))
        filler = os.path.join(self.state, "filler")
        subprocess.run(["fallocate", "-l", "%dM" % (self.a.disk_mb * 2), filler],
                       capture_output=True)
        # fallocate fails past the free space: write until ENOSPC.
        with open(filler, "ab") as f:
            try:
                while True:
                    f.write(b"\0" * (1 << 20))
                    f.flush()
            except OSError:
                pass
        st = os.statvfs(self.state)
        log("disk full: %d blocks free" % st.f_bavail)
        got = {}
        r = self.req("POST", "/v1/computers?wait=running&timeout_s=120", {"kind": "sandbox"},
                     key=self.key)
        got["create"] = r.status
        if r.status in (200, 201):
            cid = r.json["id"]
            b = self.req("POST", "/v1/computers/%s/actions/bash" % cid,
                         {"command": "echo ok"}, key=self.key)
            got["bash"] = b.status
            self.req("DELETE", "/v1/computers/" + cid, key=self.key)
        elif r.status >= 500 and r.status not in (503, 507):
            self.fail("create on a full disk: %d %s" % (r.status, r.body[:300]))
        elif r.status in (503, 507):
            msg = r.json.get("error", {}).get("message", "")
            got["create_message"] = msg
            if not msg:
                self.fail("create on a full disk: no message")
        if before:
            # Its guest writes into the full disk: a clear error, never a 500.
            w = self.req("POST", "/v1/computers/%s/actions/bash" % before,
                         {"command": "head -c 4000000 /dev/zero > /tmp/big; echo $?"},
                         key=self.key)
            got["guest_write"] = [w.status, str((w.json or {}).get("stdout") or w.body[:200])]
            s = self.req("POST", "/v1/computers/%s/stop" % before, key=self.key)
            got["stop"] = [s.status, str((s.json or {}).get("state") or s.body[:300])]
            for what, rr in (("guest write", w), ("stop", s)):
                if rr.status == 500 or (rr.status >= 500 and rr.status not in (502, 503, 504, 507)):
                    self.fail("%s on a full disk: %d %s" % (what, rr.status, rr.body[:300]))
        l = self.req("GET", "/v1/computers", key=self.key)
        got["list"] = l.status
        if l.status != 200:
            self.fail("list on a full disk: %d %s" % (l.status, l.body[:200]))
        h = self.req("GET", "/healthz", key=False)
        got["healthz"] = h.status
        os.unlink(filler)
        if before:
            # Space is back: the computer is stopped or running and starts,
            # or in error with its reason.
            g = self.req("GET", "/v1/computers/" + before, key=self.key).json
            st = g.get("state")
            if st == "stopped":
                s = self.req("POST", "/v1/computers/%s/start?wait=running&timeout_s=240" % before,
                             key=self.key)
                st = (s.json or {}).get("state") if s.status == 200 else "start %d" % s.status
            elif st == "running":
                st = self.settle(before, "running")
            elif st == "error" and not g.get("error"):
                self.fail("%s in error without a reason after the disk filled" % before)
            got["after"] = st
            if st not in ("running", "error"):
                self.fail("%s after the disk filled: %s" % (before, st))
            self.req("DELETE", "/v1/computers/" + before, key=self.key)
        r = self.req("POST", "/v1/computers?wait=running&timeout_s=240", {"kind": "sandbox"},
                     key=self.key)
        got["create_after"] = r.status
        if r.status not in (200, 201) or r.json.get("state") != "running":
            self.fail("create once space returned: %d %s" % (r.status, r.body[:300]))
        else:
            self.req("DELETE", "/v1/computers/" + r.json["id"], key=self.key)
        self.disk = got
        log("disk full:", json.dumps(got))

    # ---- the run -----------------------------------------------------------------

    def run(self):
        self.start()
        self.t0 = time.monotonic()
        end = self.t0 + self.a.minutes * 60
        next_check = self.t0 + self.a.check_every
        isos = self.a.drivers.split(",")
        i = 0
        try:
            if self.a.disk_full:
                self.disk_full()
            while time.monotonic() < end:
                self.cycle(isos[i % len(isos)])
                i += 1
                if time.monotonic() >= next_check:
                    self.check()
                    next_check = time.monotonic() + self.a.check_every
            # Everything deleted: the host is back at its baseline.
            for c in self.req("GET", "/v1/computers", key=self.key).json.get("computers", []):
                self.req("DELETE", "/v1/computers/" + c["id"], key=self.key)
            from cubicled import wait_until
            try:
                wait_until(lambda: host_snapshot(self.state) == self.baseline, timeout=60)
            except Exception:
                pass
            self.check(final=True)
        finally:
            self.cd.stop()
            if self.loop_mount:
                subprocess.run(["umount", "-l", self.state])
                os.unlink(self.loop_mount)
            subprocess.run(["rm", "-rf", self.state])
        return {"minutes": self.a.minutes, "cycles": self.cycles, "kills": self.kills,
                "checks": len(self.checks), "failures": self.failures,
                "computers_in_error": self.errors,
                "disk_full": self.disk, "last_check": self.checks[-1] if self.checks else None}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--build", default=os.path.join(HERE, "..", "..", "build"))
    p.add_argument("--minutes", type=float, default=60)
    p.add_argument("--drivers", default="container,vm")
    p.add_argument("--kill-every", type=float, default=15,
                   help="mean seconds between kills (0: no chaos)")
    p.add_argument("--check-every", type=float, default=60)
    p.add_argument("--disk-full", action="store_true")
    p.add_argument("--disk-mb", type=int, default=256)
    p.add_argument("--seed", type=int, default=int(time.time()))
    a = p.parse_args()
    os.environ["CUBICLE_BUILD"] = os.path.abspath(a.build)
    log("seed", a.seed)
    out = Soak(a).run()
    print(json.dumps(out, indent=1))
    sys.exit(1 if out["failures"] else 0)


if __name__ == "__main__":
    main()
