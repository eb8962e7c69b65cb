#!/usr/bin/env python3
"""Live desktop streaming: envd's RFB server vs x11vnc, on the same 1280x800
desktop in one run, each behind websockify, read by one noVNC-like client.

  A. envd --vnc unix:PATH, with `websockify --unix-target=PATH` in front.
  B. x11vnc -localhost -forever -shared -nopw (otherwise its defaults), with
     `websockify PORT 127.0.0.1:RFBPORT` in front: the common setup.

The client (rfbclient.py) speaks RFB over WebSocket as noVNC does (same pixel
format, encodings, Tight quality 6, one incremental request after each
update) and counts without decoding. For each server, in turn:

  idle     client connected, nothing changing, 5 s: CPU and updates sent.
  latency  the pointer moves over the witness window (xanim witness), the
           screen settles, then a button press goes through RFB; the time to
           the first complete update that covers the witness's 24x24 square
           at that point. Targets vary; median and p95.
  refresh  a non-incremental full-screen request on the still screen → the
           update's last byte (20 samples): encoding plus every hop.
  busy     xanim scroll repaints the whole screen at 60 fps with the desktop
           picture scrolled 8 rows a frame; updates/s, bytes and CPU.

CPU is utime+stime from /proc/PID/stat, in % of one core: envd (all its
threads); x11vnc and any child; websockify and its per-connection fork; Xvfb
apart (x11vnc's polling makes the X server work too).

Then cubicled's gateway on its own (`make images` first; --only local skips
it): a desktop computer (its own Xvfb in its container, so not the desktop
above) with xanim copied in through write_file, read three ways by the same
client: plain RFB straight from the computer's envd socket
(<state>/computers/<id>/io/vnc.sock), through GET
/v1/computers/{id}/stream?token= (the WebSocket gateway), and through
websockify --unix-target on the same socket. cubicled's CPU is its own
process only (the computer's processes are its descendants).
"""

import argparse
import base64
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import time

from common import KeepAlive, harness, table
from rfbclient import PREAMBLE, Client
from screenshot import populate, wait_drawn

HZ = os.sysconf("SC_CLK_TCK")
XANIM = os.path.join(harness.BUILD, "bench", "xanim")
WITNESS = (840, 60, 400, 300)  # x, y, w, h: on top of the desktop's windows
SQUARE = 24                    # the witness's square (xanim.c)


# ---- processes -------------------------------------------------------------

def children_of():
    kids = {}
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % pid) as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        kids.setdefault(ppid, []).append(int(pid))
    return kids


def tree(pid):
    kids, out, todo = children_of(), [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo += kids.get(p, [])
    return out


def ticks(pids):
    total = 0
    for p in pids:
        try:
            with open("/proc/%d/stat" % p) as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])  # utime, stime
        except (OSError, IndexError, ValueError):
            pass
    return total


class Cpu:
    """CPU% of groups of processes over a window: Cpu({"name": [pid, ...]}).
    A group may be a function giving the list (websockify forks for each
    connection: its tree is read once connected) or None (no such process)."""

    def __init__(self, groups):
        self.groups = {k: v() if callable(v) else v for k, v in groups.items()}
        self.t0 = time.perf_counter()
        self.start = {k: ticks(v or []) for k, v in self.groups.items()}

    def stop(self):
        wall = time.perf_counter() - self.t0
        return {k: 100.0 * (ticks(v) - self.start[k]) / HZ / wall if v is not None else None
                for k, v in self.groups.items()}


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def wait_port(port, proc, what):
    def up():
        if proc.poll() is not None:
            raise RuntimeError("%s exited with %s" % (what, proc.returncode))
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    harness.wait_until(up, 20, what + " to listen")


def websockify(desk, port, target):
    p = desk.spawn(["websockify", "127.0.0.1:%d" % port] + target)
    wait_port(port, p, "websockify")
    return p


def stop(proc):
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


# ---- measurements ----------------------------------------------------------

def pump(c, seconds):
    """Reads updates for `seconds`; returns them."""
    out, end = [], time.perf_counter() + seconds
    while True:
        left = end - time.perf_counter()
        if left <= 0:
            return out
        u = c.next_update(left)
        if u:
            out.append(u)


def settle(c, quiet=0.5, limit=15):
    """Reads until `quiet` seconds pass without an update with pixels."""
    end = time.perf_counter() + limit
    while time.perf_counter() < end:
        u = c.next_update(quiet)
        if u is None:
            return
        if not u.rects:
            continue
    raise RuntimeError("the screen never went quiet")


def pct(samples, q):
    s = sorted(samples)
    return s[min(len(s) - 1, int(round(q * (len(s) - 1))))]


def latency(c, samples):
    """Input-to-pixel: button press sent → update covering the square."""
    x0, y0, w, h = WITNESS
    m = SQUARE
    cols, rows = (w - 2 * m) // (2 * m), (h - 2 * m) // (2 * m)
    out, missed = [], 0
    for i in range(samples):
        k = (i * 7) % (cols * rows)  # a new place every time
        x, y = x0 + m + (k % cols) * 2 * m + m // 2, y0 + m + (k // cols) * 2 * m + m // 2
        c.pointer(x, y, 0)
        settle(c, quiet=0.15)
        t = time.perf_counter()
        c.pointer(x, y, 1)
        hit = None
        while hit is None:
            u = c.next_update(max(0.0, t + 2 - time.perf_counter()))
            if u is None:
                break
            if u.covers(x - m // 2, y - m // 2, m, m):
                hit = u
        c.pointer(x, y, 0)
        if hit:
            out.append((hit.t - t) * 1e3)
        else:
            missed += 1
    return out, missed


class LocalAnim:
    """xanim scroll on the bench's own desktop."""

    def __init__(self, desk):
        self.desk = desk

    def start(self):
        self.p = self.desk.spawn([XANIM, "scroll", "--fps", "60", "--step", "8"],
                                 stdout=subprocess.PIPE, text=True)
        if self.p.stdout.readline().strip() != "ready":
            raise RuntimeError("xanim scroll did not start")

    def stop(self):
        """Stops it; returns the frames a second it drew."""
        os.kill(self.p.pid, signal.SIGTERM)
        drawn = self.p.stdout.read().split()
        self.p.wait(10)
        return int(drawn[1]) / float(drawn[3]) if len(drawn) == 4 else 0.0


def refresh(c, samples):
    """A full, non-incremental update of the still screen: request → the
    last byte of the screen's pixels (encoding plus every hop, in ms). A
    server may answer in several updates: their pixels are added up."""
    out = []
    for _ in range(samples):
        t = time.perf_counter()
        c.request(incremental=False)
        got = 0
        while got < c.width * c.height:
            u = c.next_update(10)
            if u is None:
                raise RuntimeError("no answer to a full update request")
            got += u.pixels
        out.append((u.t - t) * 1e3)
    return out


def cover_once(anim):
    """Runs the animation once before measuring: windows redraw a little
    differently once uncovered, so every path then scrolls the same picture."""
    anim.start()
    time.sleep(0.5)
    anim.stop()
    time.sleep(0.5)


def measure(name, connect, groups, anim, seconds, samples):
    """Every figure of one path: connect() gives a Client, groups names the
    processes whose CPU counts, anim starts and stops the animation."""
    r = {"name": name}
    c = connect()
    r["size"] = "%dx%d" % (c.width, c.height)
    try:
        if c.next_update(10) is None:
            raise RuntimeError("%s sent no first frame" % name)
        settle(c)

        cpu = Cpu(groups)
        idle = pump(c, 5)
        r["idle_cpu"] = cpu.stop()
        r["idle_updates"] = sum(1 for u in idle if u.rects)

        r["lat"], r["lat_missed"] = latency(c, samples)
        settle(c)
        r["refresh"] = refresh(c, 20)

        anim.start()
        try:
            pump(c, 2)  # warm up
            cpu = Cpu(groups)
            t = time.perf_counter()
            ups = pump(c, seconds)
            wall = time.perf_counter() - t
            r["busy_cpu"] = cpu.stop()
        finally:
            r["anim_fps"] = anim.stop()
        ups = [u for u in ups if u.rects]
        n = max(1, len(ups))
        screen = c.width * c.height
        total = sum(u.nbytes for u in ups)
        screens = sum(u.pixels for u in ups) / screen
        r["fps"] = len(ups) / wall
        r["screens"] = screens / wall
        r["bytes"] = total / n
        r["mbps"] = total / wall / 1e6
        r["bytes_screen"] = total / max(1e-9, screens)
        settle(c)
    finally:
        c.close()
    return r


def run_envd(desk, sock, envd, args):
    port = free_port()
    ws = websockify(desk, port, ["--unix-target=" + sock])
    try:
        return measure("envd + websockify --unix-target",
                       lambda: Client(ws=("127.0.0.1", port, "/"), preamble=PREAMBLE),
                       {"server": [envd.proc.pid], "proxy": lambda: tree(ws.pid),
                        "xvfb": [desk.procs[0].pid]},
                       LocalAnim(desk), args.seconds, args.samples)
    finally:
        stop(ws)


X11VNC_FLAGS = ["-localhost", "-forever", "-shared", "-nopw"]


def run_x11vnc(desk, args):
    rfb, port = free_port(), free_port()
    log = open(os.path.join(desk.tmp, "x11vnc.log"), "wb")
    vnc = desk.spawn(["x11vnc", "-display", desk.display, "-rfbport", str(rfb)] + X11VNC_FLAGS,
                     stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_port(rfb, vnc, "x11vnc")
        ws = websockify(desk, port, ["127.0.0.1:%d" % rfb])
        try:
            return measure("x11vnc + websockify",
                           lambda: Client(ws=("127.0.0.1", port, "/")),
                           {"server": lambda: tree(vnc.pid), "proxy": lambda: tree(ws.pid),
                            "xvfb": [desk.procs[0].pid]},
                           LocalAnim(desk), args.seconds, args.samples)
        finally:
            stop(ws)
    finally:
        stop(vnc)
        log.close()


# ---- cubicled's gateway ----------------------------------------------------

class GuestAnim:
    """xanim scroll inside a computer, started and stopped with its bash action."""

    def __init__(self, srv, cid, key, exe):
        self.bash = lambda cmd: srv.act(cid, "bash", {"command": cmd, "timeout_s": 30},
                                        key=key)["stdout"]
        self.exe = exe

    def start(self):
        self.pid = self.bash(
            "setsid %s scroll --fps 60 --step 8 >/tmp/xanim.out 2>&1 </dev/null & echo $!; "
            "until grep -q ready /tmp/xanim.out; do sleep 0.05; done" % self.exe).split()[0]

    def stop(self):
        out = self.bash("kill -TERM %s; until grep -q frames /tmp/xanim.out; do sleep 0.05; "
                        "done; cat /tmp/xanim.out" % self.pid).split()
        i = out.index("frames")
        return int(out[i + 1]) / float(out[i + 3])


class ComputerActions:
    """KeepAlive's post() for a computer's actions through cubicled."""

    def __init__(self, srv, cid, key):
        self.srv, self.cid, self.key = srv, cid, key

    def post(self, action, params):
        return self.srv.ok("POST", "/v1/computers/%s/actions/%s" % (self.cid, action), params,
                           key=self.key).body


def guest_pid(cid, comm, arg=""):
    """The host's pid of a computer's process (its cgroup names the computer)
    called comm, with arg on its command line."""
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open("/proc/%s/comm" % pid) as f:
                if f.read().strip() != comm:
                    continue
            with open("/proc/%s/cmdline" % pid, "rb") as f:
                if arg.encode() not in f.read():
                    continue
            with open("/proc/%s/cgroup" % pid) as f:
                if cid in f.read():
                    return int(pid)
        except OSError:
            continue
    raise RuntimeError("no %s in computer %s" % (comm, cid))


def run_gateway(args):
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "host"))
    from cubicled import Cubicled
    srv = Cubicled().start()
    ws = None
    try:
        _, key = srv.workspace("stream-bench")
        cid = srv.computer(key, kind="desktop")["id"]
        sock = os.path.join(srv.state, "computers", cid, "io", "vnc.sock")
        envd_pid, xvfb_pid = guest_pid(cid, "envd", "--vnc"), guest_pid(cid, "Xvfb")
        with open(XANIM, "rb") as f:
            exe = srv.act(cid, "write_file", {"path": "xanim", "mode": "0755",
                                              "content_base64": base64.b64encode(
                                                  f.read()).decode()}, key=key)["path"]
        srv.act(cid, "bash", {"command": (
            "setsid %s witness %dx%d+%d+%d >/tmp/witness.out 2>&1 </dev/null & "
            "until grep -q ready /tmp/witness.out; do sleep 0.05; done")
            % ((exe, ) + WITNESS[2:] + WITNESS[:2]), "timeout_s": 30}, key=key)
        anim = GuestAnim(srv, cid, key, exe)
        wait_drawn(ComputerActions(srv, cid, key))  # a desktop that just booted
        cover_once(anim)

        def gateway():
            t = srv.ok("POST", "/v1/computers/%s/stream" % cid, {}, key=key, status=201)
            return Client(ws=("127.0.0.1", srv.port, "/v1/computers/%s/stream?token=%s"
                              % (cid, t["token"])))
        port = free_port()
        ws = subprocess.Popen(["websockify", "127.0.0.1:%d" % port, "--unix-target=" + sock],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              start_new_session=True)
        wait_port(port, ws, "websockify")
        # cubicled alone: the computer's processes are its descendants.
        groups = {"server": [envd_pid], "xvfb": [xvfb_pid]}
        res = [measure("its socket, plain RFB", lambda: Client(unix=sock),
                       dict(groups, proxy=None), anim, args.seconds, args.samples),
               measure("cubicled's gateway", gateway, dict(groups, proxy=[srv.proc.pid]), anim,
                       args.seconds, args.samples),
               measure("websockify --unix-target",
                       lambda: Client(ws=("127.0.0.1", port, "/"), preamble=PREAMBLE),
                       dict(groups, proxy=lambda: tree(ws.pid)), anim, args.seconds, args.samples)]
        res[1]["proxy_name"], res[2]["proxy_name"] = "cubicled", "websockify"
        report("a desktop computer's envd (%s, in its container) read three ways"
               % res[0]["size"], res, args, bytes_goal="")
    finally:
        if ws:
            stop(ws)
        srv.stop()


# ---- report ----------------------------------------------------------------

def report(title, res, args, bytes_goal="≤ x11vnc"):
    def lat(r):
        s = r["lat"]
        if not s:
            return "no sample"
        miss = (", %d missed" % r["lat_missed"]) if r["lat_missed"] else ""
        return "%.1f / %.1f%s" % (statistics.median(s), pct(s, 0.95), miss)

    def cpu(r, key):
        d = r[key]
        proxy = " + %.1f %s" % (d["proxy"], r.get("proxy_name", "websockify")) \
            if d.get("proxy") is not None else ""
        return "%.1f%s (Xvfb %.1f)" % (d["server"], proxy, d["xvfb"])

    def row(label, fn, goal=""):
        return (label,) + tuple(fn(r) for r in res) + (goal,)

    rows = [
        row("updates/s during the animation", lambda r: "%.1f" % r["fps"], "≥ 30"),
        row("  full screens/s (pixels sent ÷ screen)", lambda r: "%.1f" % r["screens"]),
        row("  frames/s the animation drew", lambda r: "%.1f" % r["anim_fps"]),
        row("KiB per full screen", lambda r: "%.1f" % (r["bytes_screen"] / 1024), bytes_goal),
        row("KiB per update", lambda r: "%.1f" % (r["bytes"] / 1024)),
        row("MB/s of RFB", lambda r: "%.1f" % r["mbps"]),
        row("input-to-pixel ms, median / p95", lat, "≤ 30"),
        row("full-screen refresh ms, median / p95",
            lambda r: "%.1f / %.1f" % (statistics.median(r["refresh"]), pct(r["refresh"], 0.95))),
        row("CPU % idle, 5 s", lambda r: cpu(r, "idle_cpu"), "< 1"),
        row("  updates sent while idle", lambda r: "%d" % r["idle_updates"], "0"),
        row("CPU % busy (animation)", lambda r: cpu(r, "busy_cpu")),
        row("  server CPU ms per full screen sent",
            lambda r: "%.1f" % (10 * r["busy_cpu"]["server"] / max(1e-9, r["screens"]))),
    ]
    table("%s; %d s of animation, %d input samples; CPU in %% of one core"
          % (title, args.seconds, args.samples), rows,
          ("figure",) + tuple(r["name"] for r in res) + ("goal",))


def run_local(args):
    desk = harness.Desktop().start()
    envd = None
    try:
        sock = os.path.join(desk.tmp, "vnc.sock")
        envd = harness.Envd(desk, args=["--vnc", "unix:" + sock]).start()
        populate(desk)
        wait_drawn(KeepAlive(envd))
        wit = desk.spawn([XANIM, "witness", "%dx%d+%d+%d" % (WITNESS[2], WITNESS[3],
                                                            WITNESS[0], WITNESS[1])],
                         stdout=subprocess.PIPE, text=True)
        if wit.stdout.readline().strip() != "ready":
            raise RuntimeError("xanim witness did not start")
        cover_once(LocalAnim(desk))
        a = run_envd(desk, sock, envd, args)
        b = run_x11vnc(desk, args)
        report("the same 1280x800 desktop over WebSocket, noVNC's encodings (Tight q6)",
               [a, b], args)
    finally:
        try:
            if envd:
                envd.stop()
        finally:
            desk.stop()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=int, default=10, help="animation seconds measured")
    ap.add_argument("--samples", type=int, default=40, help="input-to-pixel samples")
    ap.add_argument("--only", choices=("local", "gateway"),
                    help="only envd vs x11vnc, or only cubicled's gateway")
    args = ap.parse_args()
    if not os.path.exists(XANIM):
        sys.exit("stream: %s is missing (make build)" % XANIM)
    for tool in ("x11vnc", "websockify"):
        if not shutil.which(tool):
            sys.exit("stream: %s is missing (make deps installs it)" % tool)
    if args.only != "gateway":
        run_local(args)
    if args.only != "local":
        if os.path.isdir(os.path.join(harness.BUILD, "images", "desktop")):
            run_gateway(args)
        else:
            print("\n(cubicled's gateway skipped: no desktop image; `make images` builds it)")


if __name__ == "__main__":
    main()
