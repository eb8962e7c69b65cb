#!/usr/bin/env python3
"""Sandboxes that do real work (issue 13): what installing costs and what
showing a container its size costs. Real cubicled, real container
sandboxes, one run.

- `apt-get install -y jq` typed as the user in a fresh sandbox (the lists
  updated first: the image keeps none), through envd's package helper, vs
  what people do today: `apt-get update && apt-get install -y jq` as root
  in a throwaway root of the same image (a Dockerfile's RUN line, without
  Docker: overlayfs + chroot).
- container sandbox create → first bash with the size files, affinity and
  time namespace (`--guest-sizes on`, the default) vs without (`off`),
  interleaved; the computer's memory after that first bash (its cgroup's
  usage) and envd's own RSS, on and off; a read of /proc/meminfo in the
  guest (served by envd's FUSE thread) vs the kernel's own.
- the images' trees now, and before this change when `--before DIR` names
  another build's images directory (its manifest.json files).

CUBICLE_BENCH_RUNS (default 10) runs per side of the start comparison,
CUBICLE_BENCH_APT_RUNS (default 3) installs per side.
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "host"))
from common import table  # noqa: E402
from cubicled import IMAGES, Cubicled  # noqa: E402

RUNS = int(os.environ.get("CUBICLE_BENCH_RUNS", "10"))
APT_RUNS = int(os.environ.get("CUBICLE_BENCH_APT_RUNS", "3"))


def med(xs):
    return statistics.median(xs)


def spread(xs, unit="ms", fmt="%.0f"):
    s = sorted(xs)
    return ((fmt + " %s") % (med(s), unit), (fmt + "–" + fmt + " %s") % (s[0], s[-1], unit))


def apt_as_user(srv, key):
    """Fresh sandbox → `apt-get install -y jq` as the user, seconds."""
    c = srv.computer(key, kind="sandbox", size="sm", isolation="container")
    t = time.perf_counter()
    out = srv.act(c["id"], "bash", {"command": "apt-get install -y jq >/dev/null && jq --version",
                                    "timeout_s": 300}, key=key)
    s = time.perf_counter() - t
    if out["exit_code"] != 0:
        raise RuntimeError("apt-get install failed in the guest: %s" % out)
    srv.ok("DELETE", "/v1/computers/" + c["id"], key=key)
    return s


def apt_as_root_in_chroot():
    """`apt-get update && apt-get install -y jq` as root in a throwaway
    overlay of the sandbox image's tree (what a Dockerfile's RUN does)."""
    lower = os.path.realpath(os.path.join(IMAGES, "sandbox", "rootfs"))
    d = tempfile.mkdtemp(prefix="pkgs-bench-chroot-")
    script = r"""
set -e
d=$1 lower=$2
mkdir -p $d/up $d/work $d/root
mount -t overlay overlay -o lowerdir=$lower,upperdir=$d/up,workdir=$d/work $d/root
mount -t proc proc $d/root/proc
mount --bind /dev $d/root/dev
cp /etc/resolv.conf $d/root/etc/resolv.conf
chroot $d/root /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root \
    DEBIAN_FRONTEND=noninteractive sh -c \
    'apt-get update -q >/dev/null && apt-get install -y -q jq >/dev/null && jq --version'
"""
    try:
        t = time.perf_counter()
        subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c", script,
                        "sh", d, lower], check=True, capture_output=True)
        return time.perf_counter() - t
    finally:
        shutil.rmtree(d, ignore_errors=True)


def cgroup_memory(cid):
    for path in ("/sys/fs/cgroup/memory/cubicle/%s/memory.usage_in_bytes" % cid,
                 "/sys/fs/cgroup/cubicle/%s/memory.current" % cid):
        try:
            with open(path) as f:
                return int(f.read())
        except OSError:
            pass
    return 0


def start_first_bash(srv, key):
    """Create → first bash (ms), the computer's memory then (MiB), envd's RSS
    (KiB), and a /proc/meminfo read in the guest vs /proc/self/stat (µs)."""
    t = time.perf_counter()
    c = srv.ok("POST", "/v1/computers?wait=running&timeout_s=120",
               {"kind": "sandbox", "size": "sm", "isolation": "container"}, key=key,
               status=201)
    srv.act(c["id"], "bash", {"command": "true"}, key=key)
    ms = (time.perf_counter() - t) * 1000
    mem = cgroup_memory(c["id"]) / 1048576
    out = srv.act(c["id"], "python", {"code": r"""
import os, time
def per_read(path, n=2000):
    t = time.perf_counter()
    for _ in range(n):
        with open(path, "rb") as f:
            f.read()
    return (time.perf_counter() - t) / n * 1e6
rss = [l for l in open("/proc/%d/status" % int(os.popen("pgrep -x envd").read().split()[0]))
       if l.startswith("VmRSS")]
print(per_read("/proc/meminfo"), per_read("/proc/self/stat"), rss[0].split()[1] if rss else 0)
"""}, key=key)["stdout"].split()
    srv.ok("DELETE", "/v1/computers/" + c["id"], key=key)
    return ms, mem, int(out[2]), float(out[0]), float(out[1])


def image_rows(before):
    rows = []
    for name in ("sandbox", "desktop"):
        now = os.path.join(IMAGES, name, "manifest.json")
        if not os.path.exists(now):
            continue
        # (strict=False: manifests whose kernel field holds make's lines,
        # before build-image took only the release line)
        with open(now) as f:
            m = json.loads(f.read(), strict=False)
        was = "-"
        if before and os.path.exists(os.path.join(before, name, "manifest.json")):
            with open(os.path.join(before, name, "manifest.json")) as f:
                b = json.loads(f.read(), strict=False)["rootfs_bytes"]
            was = "%.0f MiB = %.2f GB" % (b / 1048576, b / 1e9)
        goal = "≤ 400 MB" if name == "sandbox" else "≤ 1.5 GB"
        rows.append((name + " tree (du -sx)", "%.0f MiB = %.2f GB" % (
            m["rootfs_bytes"] / 1048576, m["rootfs_bytes"] / 1e9), was, goal))
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--before", help="another build's images directory (before the change)")
    args = ap.parse_args()

    rows = image_rows(args.before)
    if rows:
        table("guest images", rows, ("image", "now", "before", "goal"))

    on = Cubicled([]).start()
    off = Cubicled(["--guest-sizes", "off"]).start()
    try:
        _, kon = on.workspace("bench-on")
        _, koff = off.workspace("bench-off")
        start_first_bash(on, kon)  # warm the image's pages
        res = {"on": [], "off": []}
        for _ in range(RUNS):
            res["on"].append(start_first_bash(on, kon))
            res["off"].append(start_first_bash(off, koff))
        col = lambda side, i: [r[i] for r in res[side]]
        rows = []
        for label, i, unit, fmt in (("create → first bash", 0, "ms", "%.0f"),
                                    ("the computer's memory after it (cgroup)", 1, "MiB", "%.1f"),
                                    ("envd's RSS", 2, "KiB", "%.0f"),
                                    ("a read of /proc/meminfo in the guest", 3, "µs", "%.1f"),
                                    ("a read of /proc/self/stat (the kernel's)", 4, "µs", "%.1f")):
            a, b = spread(col("on", i), unit, fmt), spread(col("off", i), unit, fmt)
            rows.append((label, a[0], a[1], b[0], b[1]))
        table("container sandbox (sm), size shown (--guest-sizes on) vs the host's (off), "
              "%d runs each, interleaved" % RUNS, rows,
              ("", "on: median", "on: range", "off: median", "off: range"))

        apt = [apt_as_user(on, kon) for _ in range(APT_RUNS)]
        root = [apt_as_root_in_chroot() for _ in range(APT_RUNS)]
        table("apt-get install -y jq in a fresh sandbox (lists updated first), %d runs each"
              % APT_RUNS,
              [("as the user, through envd's package helper", "%.1f s" % med(apt),
                "%.1f–%.1f s" % (min(apt), max(apt))),
               ("as root in a chroot of the image (a Dockerfile's RUN)", "%.1f s" % med(root),
                "%.1f–%.1f s" % (min(root), max(root)))],
              ("", "median", "range"))
    finally:
        on.stop()
        off.stop()


if __name__ == "__main__":
    main()
