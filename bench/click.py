#!/usr/bin/env python3
"""left_click through envd's HTTP API vs spawning `xdotool mousemove --sync X Y
click 1` per action (what E2B Desktop and Anthropic's computer-use demo do).

Targets vary on every iteration: xdotool --sync waits forever when the
cursor is already at the target. xdotool's `click` itself sleeps about
100 ms; the mousemove-only row shows the cost of spawning it at all.
"""

import subprocess

from common import KeepAlive, harness, stats, table, timed

N = 300


def main():
    desk, envd = harness.start_desktop_and_envd()
    try:
        # Something to click on that does not react (an xrecorder window).
        rec = desk.spawn([harness.os.path.join(harness.TEST_BIN, "xrecorder"),
                          "--geometry", "1000x600+100+100"])
        ka = KeepAlive(envd)
        target = lambda i: (200 + (i * 37) % 800, 200 + (i * 53) % 400)

        def envd_click(i):
            x, y = target(i)
            ka.post("left_click", {"x": x, "y": y})

        def xdotool_click(i):
            x, y = target(i + 1)
            subprocess.run(["xdotool", "mousemove", "--sync", str(x), str(y), "click", "1"],
                           env=desk.env, check=True)

        def xdotool_nosync(i):
            x, y = target(i + 2)
            subprocess.run(["xdotool", "mousemove", str(x), str(y), "click", "1"],
                           env=desk.env, check=True)

        def xdotool_move_only(i):
            x, y = target(i + 3)
            subprocess.run(["xdotool", "mousemove", str(x), str(y)], env=desk.env, check=True)

        def envd_move(i):
            x, y = target(i + 4)
            ka.post("move_cursor", {"x": x, "y": y})

        e = stats(timed(envd_click, N))
        em = stats(timed(envd_move, N))
        xm = stats(timed(xdotool_move_only, N // 3))
        x = stats(timed(xdotool_click, N // 3))
        xn = stats(timed(xdotool_nosync, N // 3))
        rows = [("envd left_click (HTTP, keep-alive)", "%.3f" % e[0], "%.3f" % e[1], "1.0x"),
                ("xdotool mousemove --sync + click (spawned)", "%.3f" % x[0], "%.3f" % x[1],
                 "%.1fx slower" % (x[0] / e[0])),
                ("xdotool mousemove + click, no --sync (spawned)", "%.3f" % xn[0],
                 "%.3f" % xn[1], "%.1fx slower" % (xn[0] / e[0])),
                ("envd move_cursor (HTTP, keep-alive)", "%.3f" % em[0], "%.3f" % em[1], ""),
                ("xdotool mousemove only (spawned: the process floor)", "%.3f" % xm[0],
                 "%.3f" % xm[1], "%.1fx slower than envd move" % (xm[0] / em[0]))]
        table("left_click, %d samples (ms)" % N, rows, ("method", "median", "p99", "vs envd"))
        rec.kill()
    finally:
        envd.stop()
        desk.stop()


if __name__ == "__main__":
    main()
