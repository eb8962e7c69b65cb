"""What a container computer of a running cubicled holds on the host, and
what of it is left once the computer is deleted: the leak checks shared by
cubicled's end-to-end tests.

A Footprint is taken while the computer exists: its driver state as
cubicled stored it in SQLite (init and slirp4netns pids, uid range,
cgroup directories) and the network namespace of its init. leftovers()
then looks for anything of it on the host without trusting that state:
processes in its uid range, in its cgroup (by the computer's id, so a
process cubicled never recorded is found too), in its network namespace,
with a recorded pid, or a slirp4netns serving any of those; mounts under its directory or of its namespace;
cgroup directories named after it; the directory itself.

Zombies do not count: a computer's init and slirp4netns outlive a killed
cubicled and are re-parented to pid 1, which on the development machine
never reaps them. A zombie holds a pid and nothing else.
"""

import glob
import json
import os
import sqlite3

UID_RANGE = 65536


def driver_state(state_dir, cid):
    """The computer's driver state as cubicled last stored it ({} if none)."""
    db = sqlite3.connect(os.path.join(state_dir, "cubicle.db"), timeout=10)
    try:
        row = db.execute("SELECT driver_state FROM computers WHERE id = ?", (cid,)).fetchone()
    finally:
        db.close()
    return json.loads(row[0]) if row and row[0] else {}


def states(state_dir):
    """{computer id: state} straight from the database."""
    db = sqlite3.connect(os.path.join(state_dir, "cubicle.db"), timeout=10)
    try:
        return dict(db.execute("SELECT id, state FROM computers").fetchall())
    finally:
        db.close()


def _read(path):
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return ""


def _status(pid):
    """(uid, state letter) of a process, or None when it is gone."""
    uid = state = None
    for line in _read("/proc/%d/status" % pid).splitlines():
        if line.startswith("Uid:"):
            uid = int(line.split()[1])
        elif line.startswith("State:"):
            state = line.split()[1]
    return None if uid is None else (uid, state)


def _netns(pid):
    try:
        return os.stat("/proc/%d/ns/net" % pid).st_ino
    except OSError:
        return None


def alive(pid):
    """Whether pid runs (a zombie does not)."""
    s = _status(pid)
    return s is not None and s[1] != "Z"


class Footprint:
    def __init__(self, state_dir, cid):
        self.cid = cid
        self.dir = os.path.join(state_dir, "computers", cid)
        st = driver_state(state_dir, cid)
        self.uid_base = st.get("uid_base")
        self.pids = {st[k] for k in ("init_pid", "slirp_pid") if st.get(k)}
        self.cgroups = list(st.get("cgroups", {}).get("dirs", []))
        self.init = init = st.get("init_pid")
        self.netns = _netns(init) if init and alive(init) else None

    def processes(self):
        """Live processes of the computer: {pid: why}."""
        left = {}
        mark = "/cubicle/%s" % self.cid
        for d in os.listdir("/proc"):
            if not d.isdigit():
                continue
            pid = int(d)
            s = _status(pid)
            if s is None or s[1] == "Z":
                continue
            if pid in self.pids:
                left[pid] = "recorded pid"
            elif self.uid_base is not None and \
                    self.uid_base <= s[0] < self.uid_base + UID_RANGE:
                left[pid] = "uid %d in the computer's range" % s[0]
            elif mark in _read("/proc/%d/cgroup" % pid):
                left[pid] = "in the computer's cgroup"
            elif self.netns and _netns(pid) == self.netns and \
                    not self._of_another_computer(pid):
                left[pid] = "in the computer's network namespace"
            elif self._slirp_of_mine(pid, mark):
                left[pid] = "slirp4netns of the computer"
        return left

    def _of_another_computer(self, pid):
        """A process in another computer's cgroup. The kernel reuses a freed
        namespace's inode number at once, so after this computer's network
        namespace is gone, a computer started meanwhile (by a test running
        beside this one) may have one with the same number."""
        cg = _read("/proc/%d/cgroup" % pid)
        return "/cubicle/c-" in cg and "/cubicle/%s" % self.cid not in cg

    def _slirp_of_mine(self, pid, mark):
        """A slirp4netns serving one of the computer's processes
        (`slirp4netns [options] PID TAPNAME`)."""
        args = _read("/proc/%d/cmdline" % pid).split("\0")
        if not args[0].endswith("slirp4netns"):
            return False
        target = [a for a in args[1:] if a.isdigit()]
        if not target:
            return False
        t = int(target[0])
        return t in self.pids or mark in _read("/proc/%d/cgroup" % t)

    def leftovers(self):
        """Everything of the computer still on the host; {} when nothing."""
        out = {}
        procs = self.processes()
        if procs:
            out["processes"] = procs
        # A mount of the computer's network namespace by number alone, at a
        # name that is not the computer's (a test beside this one holding
        # its own namespace at /run/netns/NAME), is that test's: the kernel
        # reuses a freed namespace's inode number at once.
        mounts = [l for l in _read("/proc/self/mountinfo").splitlines()
                  if self.dir in l or (self.netns and "net:[%d]" % self.netns in l
                                       and self.cid in l.split(" ")[4])]
        if mounts:
            out["mounts"] = mounts
        cgroups = {d for d in self.cgroups if os.path.exists(d)}
        cgroups |= set(glob.glob("/sys/fs/cgroup/*/cubicle/" + self.cid))
        cgroups |= set(glob.glob("/sys/fs/cgroup/cubicle/" + self.cid))
        if cgroups:
            out["cgroups"] = sorted(cgroups)
        if os.path.exists(self.dir):
            out["dir"] = os.listdir(self.dir)
        return out
