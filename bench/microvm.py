#!/usr/bin/env python3
"""microVM computers (isolation "vm"): create → envd ready (a cold boot),
stop (snapshot) and start (restore), and QEMU's own memory per VM. Real
cubicled, real QEMU; TCG where KVM is not usable (the computer's "accel"
says which). CUBICLE_BENCH_VM_DESKTOP=1 also boots a desktop (minutes under
TCG)."""

import os
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "host"))
from common import stats, table  # noqa: E402
from cubicled import Cubicled  # noqa: E402

RUNS = int(os.environ.get("CUBICLE_BENCH_VM_RUNS", "2"))


def qemu_pid(srv, cid):
    want = os.path.realpath(os.path.join(srv.state, "computers", cid, "vm"))
    for p in os.listdir("/proc"):
        if p.isdigit():
            try:
                if os.readlink("/proc/%s/cwd" % p) == want:
                    return int(p)
            except OSError:
                pass
    return None


def status_kib(pid, field):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def main():
    slots = tempfile.mkdtemp(prefix="cubicle-slots-")
    os.environ["CUBICLE_UID_SLOTS"] = slots
    srv = Cubicled(["--idle-timeout", "3600"]).start()
    rows, mem_rows = [], []
    accel = "?"
    try:
        _, key = srv.workspace("bench")
        kinds = [("sandbox", "xs"), ("sandbox", "sm")]
        if os.environ.get("CUBICLE_BENCH_VM_DESKTOP"):
            kinds.append(("desktop", "small"))
        for kind, size in kinds:
            boots, stops, starts = [], [], []
            for _ in range(RUNS if kind == "sandbox" else 1):
                t = time.perf_counter()
                c = srv.ok("POST", "/v1/computers?wait=running&timeout_s=900",
                           {"kind": kind, "size": size, "isolation": "vm"}, key=key,
                           status=201, timeout=960)
                boots.append((time.perf_counter() - t) * 1000)
                accel = c.get("accel", "?")
                cid = c["id"]
                srv.act(cid, "bash", {"command": "true"}, key=key)
                pid = qemu_pid(srv, cid)
                if pid:
                    mem_rows.append(("%s %s (%d MiB guest)" % (kind, size,
                                                               c["limits"]["memory_mb"]),
                                     "%d MiB" % (status_kib(pid, "RssAnon") // 1024),
                                     "%d MiB" % ((status_kib(pid, "RssFile") +
                                                  status_kib(pid, "RssShmem")) // 1024)))
                for _ in range(3):
                    t = time.perf_counter()
                    srv.ok("POST", "/v1/computers/%s/stop" % cid, key=key)
                    stops.append((time.perf_counter() - t) * 1000)
                    t = time.perf_counter()
                    srv.ok("POST", "/v1/computers/%s/start" % cid, key=key)
                    srv.act(cid, "bash", {"command": "true"}, key=key)
                    starts.append((time.perf_counter() - t) * 1000)
                srv.ok("DELETE", "/v1/computers/" + cid, key=key)
            label = "%s %s" % (kind, size)
            rows.append((label, "create → envd ready (cold boot)", "%.0f ms" % stats(boots)[0],
                         len(boots)))
            rows.append((label, "stop (pause + snapshot + quit)", "%.0f ms" % stats(stops)[0],
                         len(stops)))
            rows.append((label, "start (restore) → first bash", "%.0f ms" % stats(starts)[0],
                         len(starts)))
        table("microVM computers (accel %s): medians" % accel, rows,
              ("computer", "what", "median", "runs"))
        table("QEMU memory per VM after boot + one bash (guest RAM is file-backed: "
              "RssFile+Shmem is the guest's touched RAM, RssAnon is QEMU's own)", mem_rows,
              ("computer", "QEMU's own (RssAnon)", "guest RAM touched"))
    finally:
        srv.stop()
        shutil.rmtree(slots, ignore_errors=True)


if __name__ == "__main__":
    main()
