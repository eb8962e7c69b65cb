#!/usr/bin/env python3
"""Two cubicle-pyrun binaries side by side in one run: each on its own
control socket (runproto.h, no cubicled), a trivial `print(1)` taken in
turns, blocks back to back (the order flipped each round) and then paced
0.3 s apart alternately, so the machine's load falls on both alike.
Compare a change to the Python supervisor with the build before it:

  python3 bench/pyrun_ab.py OLD/bin/cubicle-pyrun NEW/bin/cubicle-pyrun
  (CUBICLE_BENCH_RUNS=300 back to back per binary, 60 paced; run as root:
  the supervisor drops its sandboxes to uid 65534)
"""

import array
import os
import socket
import struct
import subprocess
import sys
import time

from common import stats, table

N = int(os.environ.get("CUBICLE_BENCH_RUNS", "300"))
PACED = 60
CODE = b"print(1)"
REQ = struct.pack("=7I", 0x31514552, len(CODE), 0, 100, 30000, 128, 1 << 20)


def start(binary):
    ctl, far = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    p = subprocess.Popen(["/bin/sh", "-c", 'exec "$0" 3<&%d' % far.fileno(), binary],
                         pass_fds=[far.fileno()], stdin=subprocess.DEVNULL,
                         env={"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"})
    far.close()
    return ctl, p


def run(ctl):
    """One run; its time in ms, from handing the connection over to the
    whole answer."""
    a, b = socket.socketpair()
    t = time.perf_counter()
    ctl.sendmsg([b"r"], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [b.fileno()]))])
    b.close()
    a.sendall(REQ + CODE)
    resp = b""
    while True:
        d = a.recv(65536)
        if not d:
            break
        resp += d
        if len(resp) >= 40:
            lo, le, lm = struct.unpack("=III", resp[28:40])
            if len(resp) >= 40 + lo + le + lm:
                break
    ms = (time.perf_counter() - t) * 1e3
    a.close()
    if resp[40:42] != b"1\n":
        raise RuntimeError("run failed: %r" % resp[:200])
    return ms


def ready(ctl):
    """The first run answers once the zygote made a sandbox."""
    deadline = time.monotonic() + 30
    while True:
        try:
            return run(ctl)
        except (RuntimeError, OSError):
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def main():
    bins = sys.argv[1:3]
    if len(bins) != 2:
        sys.exit(__doc__)
    sups = [start(b) for b in bins]
    try:
        for ctl, _ in sups:
            ready(ctl)
        back = [[], []]
        paced = [[], []]
        for rnd in range(4):
            order = (0, 1) if rnd % 2 == 0 else (1, 0)
            for k in order:
                time.sleep(0.5)  # both pools full again
                back[k] += [run(sups[k][0]) for _ in range(N // 4)]
        for i in range(PACED):
            for k in ((0, 1) if i % 2 == 0 else (1, 0)):
                time.sleep(0.3)
                paced[k].append(run(sups[k][0]))
    finally:
        for ctl, p in sups:
            ctl.close()
            p.kill()
            p.wait()
    rows = []
    for k, b in enumerate(bins):
        for what, xs in (("back to back", back[k]), ("0.3 s apart", paced[k])):
            med, p99 = stats(xs)
            rows.append(("%s, %s" % (b, what), "%.2f ms" % med, "%.2f ms" % p99))
    table("cubicle-pyrun A/B: `print(1)` on the control socket, n=%d back to back, %d paced, "
          "load %.1f" % (N, PACED, os.getloadavg()[0]), rows, ("what", "median", "p99"))


if __name__ == "__main__":
    main()
