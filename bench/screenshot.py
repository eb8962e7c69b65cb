#!/usr/bin/env python3
"""screenshot through envd's HTTP API (one keep-alive connection) vs spawning
`scrot` to write a file and reading it back (what people do today), on the
same 1280x800 desktop in one run: PNG, JPEG q=80 and downscaled images.

The screen is given realistic content first (the Xfce wallpaper when
xfdesktop is installed, xterms full of text, a coloured window) so the
images are not trivially compressible.
"""

import os
import shutil
import subprocess
import tempfile

from common import KeepAlive, harness, stats, table, timed

N = 100         # envd samples per row
N_SPAWN = 30    # scrot samples per row (each one spawns a process)

TEXT = ("ls -la /usr/bin | head -200; cat /etc/services | head -100; "
        "printf '\\033[1;32mgreen \\033[1;31mred \\033[1;34mblue\\033[0m\\n'; "
        "seq 1 50 | paste -sd' '; exec sleep 100000")


def populate(desk):
    if shutil.which("xfdesktop"):
        desk.spawn(["xfdesktop"])
    for geo, fg, bg in (("100x32+10+10", "black", "white"),
                        ("90x26+420+260", "gray90", "gray15"),
                        ("80x40+720+60", "black", "lightyellow")):
        desk.spawn(["xterm", "-geometry", geo, "-fg", fg, "-bg", bg, "-e", "bash", "-c",
                    TEXT])
    desk.spawn([os.path.join(harness.TEST_BIN, "xrecorder"), "--geometry",
                "260x160+980+600", "--color", "3366cc", "--title", "colour"])


def wait_drawn(ka):
    """Waits until every window has drawn: envd's PNG stops changing size."""
    last = [0]

    def settled():
        n = len(ka.post("screenshot", {}))
        same = n == last[0] and n > 100_000
        last[0] = n
        return same
    harness.wait_until(settled, 30, "the desktop to finish drawing", interval=0.5)


def main():
    desk, envd = harness.start_desktop_and_envd()
    tmp = tempfile.mkdtemp(prefix="cubicle-bench-")
    try:
        populate(desk)
        ka = KeepAlive(envd)
        wait_drawn(ka)

        sizes = {}

        def envd_shot(name, params):
            def run(i):
                sizes[name] = len(ka.post("screenshot", params))
            return stats(timed(run, N))

        def scrot(name, fname, args=()):
            path = os.path.join(tmp, fname)

            def run(i):
                subprocess.run(["scrot", "-o", *args, path], env=desk.env, check=True)
                with open(path, "rb") as f:
                    sizes[name] = len(f.read())
            return stats(timed(run, N_SPAWN, warmup=2))

        results = [
            ("envd screenshot PNG", envd_shot("envd screenshot PNG", {})),
            ("scrot PNG + read (spawned)", scrot("scrot PNG + read (spawned)", "s.png")),
            ("envd screenshot JPEG q=80",
             envd_shot("envd screenshot JPEG q=80", {"format": "jpeg", "quality": 80})),
            ("scrot JPEG q=80 + read (spawned)",
             scrot("scrot JPEG q=80 + read (spawned)", "s.jpg", ("-q", "80"))),
            ("envd PNG max_width=640",
             envd_shot("envd PNG max_width=640", {"max_width": 640})),
            ("envd JPEG q=80 max_width=640",
             envd_shot("envd JPEG q=80 max_width=640",
                       {"format": "jpeg", "max_width": 640})),
            ("envd PNG region 400x300",
             envd_shot("envd PNG region 400x300",
                       {"x": 100, "y": 100, "width": 400, "height": 300})),
        ]
        base = {"PNG": results[1][1][0], "JPEG": results[3][1][0]}
        rows = []
        for name, (med, p99) in results:
            if name.startswith("envd") and "max_width" not in name and "region" not in name:
                kind = "JPEG" if "JPEG" in name else "PNG"
                vs = "%.1fx faster" % (base[kind] / med)
            else:
                vs = ""
            rows.append((name, "%.2f" % med, "%.2f" % p99, "%d" % sizes[name], vs))
        table("screenshot of a 1280x800 desktop; envd %d samples, scrot %d (ms)"
              % (N, N_SPAWN), rows, ("method", "median", "p99", "bytes", "vs scrot"))
    finally:
        try:
            envd.stop()
        finally:
            desk.stop()
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
