#!/usr/bin/env python3
"""The guest images (issue #3): build time (cached; cold with
CUBICLE_BENCH_IMAGES_COLD=1), sizes against the goals, and start → ready in
the namespace + chroot harness (tests/images/run-guest). Runs as root, like
rootfs/build-image; needs `make images` first.

  CUBICLE_BENCH_IMAGES_RUNS     boots per image (default 10)
  CUBICLE_BENCH_IMAGES_COLD=1   also build both images from nothing into a
                                temporary cache (minutes; downloads every
                                package), removed afterwards
"""

import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "tests", "images"))
from common import table  # noqa: E402
from guest import IMAGES, Guest  # noqa: E402

BUILD = os.environ.get("CUBICLE_BUILD") or os.path.join(ROOT, "build")
BUILD_IMAGE = os.path.join(ROOT, "rootfs", "build-image")
RUNS = int(os.environ.get("CUBICLE_BENCH_IMAGES_RUNS", "10"))
# Issue #3's goals: the root filesystem tree (what `du` says the directory
# uses; the disk image and the kernel are reported beside it).
GOALS = {"desktop": 1.5e9, "sandbox": 400e6}
READY_GOAL_S = 1.5
MiB = 1048576


def build(name, build_dir, env=None):
    t = time.perf_counter()
    r = subprocess.run([BUILD_IMAGE, name, build_dir], env=env, capture_output=True, text=True)
    s = time.perf_counter() - t
    if r.returncode != 0:
        raise SystemExit("build-image %s failed:\n%s%s" % (name, r.stdout, r.stderr[-3000:]))
    return s, r.stdout.strip().splitlines()[-1]


def build_rows():
    rows = []
    for name in ("desktop", "sandbox"):
        s, last = build(name, BUILD)
        rows.append((name, "cached (unchanged: a hit)", "%.2f s" % s,
                     "cached" if "cached:" in last else "REBUILT: " + last))
    if os.environ.get("CUBICLE_BENCH_IMAGES_COLD") != "1":
        rows.append(("both", "cold", "(set CUBICLE_BENCH_IMAGES_COLD=1)", ""))
        return rows
    # Cold: an empty cache (no debs, no base tree, no kernel) and a build dir
    # of its own holding the same envd, so build/images keeps its links.
    tmp = tempfile.mkdtemp(prefix="cubicle-cold-", dir="/var/tmp")
    try:
        os.makedirs(os.path.join(tmp, "build", "bin"))
        shutil.copy2(os.path.join(BUILD, "bin", "envd"), os.path.join(tmp, "build", "bin"))
        env = dict(os.environ, CUBICLE_IMAGE_CACHE=os.path.join(tmp, "cache"))
        for name in ("desktop", "sandbox"):
            s, _ = build(name, os.path.join(tmp, "build"), env)
            rows.append((name, "cold (empty cache: downloads, kernel)" if name == "desktop"
                         else "cold after desktop (debs and kernel cached)",
                         "%.1f s" % s, ""))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return rows


def du_bytes(path):
    out = subprocess.run(["du", "-sx", "--block-size=1", path], capture_output=True,
                         text=True, check=True).stdout
    return int(out.split()[0])


def size_rows():
    rows = []
    for name in ("desktop", "sandbox"):
        d = os.path.realpath(os.path.join(IMAGES, name))
        with open(os.path.join(d, "manifest.json")) as f:
            m = json.load(f)
        tree = du_bytes(os.path.join(d, "rootfs"))
        kernel = os.path.getsize(os.path.join(d, "vmlinuz"))
        initrd = os.path.getsize(os.path.join(d, "initrd.img"))
        goal = GOALS[name]
        rows.append((name, "%d MiB (%.2f GB)" % (tree // MiB, tree / 1e9),
                     "%.2f GB: %s" % (goal / 1e9, "met" if tree <= goal else "MISSED"),
                     "%d / %d MiB" % (m["disk_allocated_bytes"] // MiB, m["disk_bytes"] // MiB),
                     "%.1f + %.1f MB" % (kernel / 1e6, initrd / 1e6), m["packages"]))
    return rows


def p95(samples):
    s = sorted(samples)
    return s[max(0, math.ceil(0.95 * len(s)) - 1)]


# What the desktop's start is made of, from the start times of the session's
# processes (/proc/PID/stat, 10 ms ticks) and envd's ready_ms, which counts
# from just before it spawns Xvfb.
STAGES = (("Xvfb spawned → answering (dbus-daemon spawned)", "Xvfb", "dbus-daemon"),
          ("→ D-Bus and AT-SPI up (xfce4-session spawned)", "dbus-daemon", "xfce4-session"),
          ("→ xfce4-session starts its clients (xfdesktop spawned)", "xfce4-session",
           "xfdesktop"),
          ("→ panel and desktop windows mapped (ready)", "xfdesktop", "ready"))


def session_stages(g, ready_ms):
    out = g.ok("bash", {"command": "for p in /proc/[0-9]*; do "
                                   "echo $(cut -d' ' -f22 $p/stat) $(cat $p/comm); "
                                   "done 2>/dev/null"})
    first = {}
    for line in out["stdout"].splitlines():
        if len(line.split(" ", 1)) != 2:
            continue  # a process that ended while being read
        tick, comm = line.split(" ", 1)
        first.setdefault(comm, int(tick))
        first[comm] = min(first[comm], int(tick))
    hz = os.sysconf("SC_CLK_TCK")
    at = {c: (t - first["Xvfb"]) / hz for c, t in first.items()}
    at["ready"] = ready_ms / 1000.0
    return [at[b] - at[a] for _, a, b in STAGES]


def boot(name, args):
    g = Guest(name, args)
    try:
        g.start()
        wall = g.wait_ready(90)
        ready_ms = g.health().get("ready_ms", 0)
        stages = session_stages(g, ready_ms) if "--session" in args else None
        return wall, ready_ms / 1000.0, stages
    finally:
        g.stop()


def ready_rows():
    rows, stage_rows = [], []
    for name, args in (("desktop", ["--user", "user", "--session", "desktop"]),
                       ("sandbox", ["--user", "user"])):
        boot(name, args)  # warm the page cache: every run then reads the same way
        walls, envds, stages = [], [], []
        for _ in range(RUNS):
            w, e, st = boot(name, args)
            walls.append(w)
            envds.append(e)
            if st:
                stages.append(st)
        for i, (what, _, _) in enumerate(STAGES if stages else ()):
            stage_rows.append((what, "%.2f s" % statistics.median(s[i] for s in stages)))
        goal = ""
        if name == "desktop":
            goal = "%.1f s: %s" % (READY_GOAL_S,
                                   "met" if statistics.median(walls) <= READY_GOAL_S
                                   else "MISSED")
        rows.append((name, "%.2f s" % statistics.median(walls), "%.2f s" % p95(walls),
                     "%.2f s" % min(walls), "%.2f s" % statistics.median(envds) if
                     name == "desktop" else "—", goal, len(walls)))
    return rows, stage_rows


def main():
    if os.geteuid() != 0:
        raise SystemExit("bench/images.py runs as root (build-image and run-guest need it)")
    table("image build time (rootfs/build-image NAME build)", build_rows(),
          ("image", "build", "time", "result"))
    table("image sizes: the goal is compared to the root filesystem tree (du -sx)",
          size_rows(), ("image", "rootfs tree", "goal (tree)",
                        "disk.ext4 used / nominal", "kernel + initrd", "packages"))
    rows, stage_rows = ready_rows()
    table("start → /health ready in the namespace + chroot harness (tests/images/run-guest); "
          "p95 of %d runs is the nearest rank; load average %.1f on %d CPUs" % (
              RUNS, os.getloadavg()[0], os.cpu_count()), rows,
          ("image", "median", "p95", "min", "envd's own ready_ms (median)", "goal (median)",
           "runs"))
    table("where the desktop's start goes (medians; process start times, 10 ms ticks)",
          stage_rows, ("stage", "time"))


if __name__ == "__main__":
    main()
