#!/usr/bin/env python3
"""Load: many API clients at once, and many viewers of one desktop, against
one cubicled on loopback (issue 16).

  python3 bench/load.py [--connections 1000] [--workspaces 10] [--computers 10]
                        [--kind desktop] [--seconds 30] [--viewers 50]

A real cubicled (CUBICLE_BUILD, default build/) with --computers running
computers (containers) spread over --workspaces workspaces, each with its
key. Then:

  API        --connections keep-alive HTTP/1.1 connections (asyncio, spread
             over the workspaces and over 16 loopback source addresses, as
             that many clients would be) each send, one after another for
             --seconds, a request drawn from a realistic mix of an agent's
             calls: left_click 40 %, screenshot 20 %, get 15 %, list 10 %,
             bash 15 % (a sandbox has no screen: its clicks and screenshots
             become get and bash). Reported: requests/s, p50/p99 per route,
             answers by status (429 is the per-workspace limit doing its
             job, the only non-2xx expected), cubicled's CPU seconds per
             1000 requests (its cost per core), and its RSS, descriptors and
             threads before, at the peak, and after the clients left.
  viewers    --viewers noVNC-like clients (bench/rfbclient.py) watch one
             desktop through the gateway while bench/xanim.c scrolls its
             screen at 60 fps: each viewer's updates/s, cubicled's CPU.

cubicled runs with --max-conns-per-addr and --streams-per-computer raised
to what the run needs (their defaults protect a shared server from one
address); every other limit is the default. Loopback only.
"""

import argparse
import asyncio
import base64
import json
import os
import random
import resource
import sys
import time

from common import stats, table

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "host"))
from cubicled import Cubicled  # noqa: E402

MIX = [("left_click", 40), ("screenshot", 20), ("get", 15), ("list", 10), ("bash", 15)]


def proc(pid):
    """cubicled's CPU seconds, RSS (MiB), descriptors and threads."""
    with open("/proc/%d/stat" % pid) as f:
        st = f.read().rsplit(")", 1)[1].split()
    hz = os.sysconf("SC_CLK_TCK")
    status = {}
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            k, _, v = line.partition(":")
            status[k] = v.strip()
    return {"cpu_s": (int(st[11]) + int(st[12])) / hz,
            "rss_mib": int(status["VmRSS"].split()[0]) / 1024,
            "fds": len(os.listdir("/proc/%d/fd" % pid)),
            "threads": int(status["Threads"])}


class Results:
    def __init__(self):
        self.lat = {}
        self.status = {}
        self.errors = {}

    def add(self, route, status, ms):
        self.status[status] = self.status.get(status, 0) + 1
        if 200 <= status < 300:
            self.lat.setdefault(route, []).append(ms)


async def client(i, port, keys, computers, deadline, res, kinds):
    ws = i % len(keys)
    key = keys[ws]
    mine = computers[ws]
    src = "127.0.0.%d" % (2 + i % 16)
    rng = random.Random(i)
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port,
                                                       local_addr=(src, 0))
    except OSError as e:
        res.errors[str(e)] = res.errors.get(str(e), 0) + 1
        return
    routes = [r for r, w in MIX for _ in range(w)]
    try:
        while time.monotonic() < deadline:
            route = rng.choice(routes)
            cid = rng.choice(mine) if mine else None
            if cid and kinds[cid] != "desktop" and route in ("left_click", "screenshot"):
                route = "get" if route == "screenshot" else "bash"
            if route in ("left_click", "screenshot", "bash") and not cid:
                route = "list"
            if route == "left_click":
                m, p, b = "POST", "/v1/computers/%s/actions/left_click" % cid, \
                    {"x": rng.randrange(10, 600), "y": rng.randrange(10, 400)}
            elif route == "screenshot":
                m, p, b = "POST", "/v1/computers/%s/actions/screenshot" % cid, {}
            elif route == "bash":
                m, p, b = "POST", "/v1/computers/%s/actions/bash" % cid, {"command": "echo hi"}
            elif route == "get":
                m, p, b = "GET", "/v1/computers/%s" % (cid or "none"), None
            else:
                m, p, b = "GET", "/v1/computers", None
            body = json.dumps(b).encode() if b is not None else b""
            head = ("%s %s HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer %s\r\n"
                    "Content-Type: application/json\r\nContent-Length: %d\r\n\r\n"
                    % (m, p, key, len(body))).encode()
            t = time.perf_counter()
            writer.write(head + body)
            await writer.drain()
            line = await reader.readline()
            if not line:
                res.errors["closed by cubicled"] = res.errors.get("closed by cubicled", 0) + 1
                return
            status = int(line.split()[1])
            length, close = 0, False
            while True:
                h = await reader.readline()
                if h in (b"\r\n", b"\n", b""):
                    break
                k, _, v = h.decode("latin-1").partition(":")
                if k.lower() == "content-length":
                    length = int(v)
                elif k.lower() == "connection" and "close" in v.lower():
                    close = True
            if length:
                await reader.readexactly(length)
            res.add(route, status, (time.perf_counter() - t) * 1000)
            if status == 429:
                await asyncio.sleep(rng.uniform(0.05, 0.2))  # as a client honouring 429 would
            if close:
                return
    except (OSError, asyncio.IncompleteReadError, ValueError) as e:
        res.errors[type(e).__name__] = res.errors.get(type(e).__name__, 0) + 1
    finally:
        writer.close()


async def api_load(port, keys, computers, kinds, n, seconds, pid, samples):
    res = Results()
    deadline = time.monotonic() + seconds
    tasks = [asyncio.create_task(client(i, port, keys, computers, deadline, res, kinds))
             for i in range(n)]

    async def sample():
        while time.monotonic() < deadline:
            samples.append(proc(pid))
            await asyncio.sleep(1)
    s = asyncio.create_task(sample())
    await asyncio.gather(*tasks)
    await s
    return res


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--connections", type=int, default=1000)
    ap.add_argument("--workspaces", type=int, default=10)
    ap.add_argument("--computers", type=int, default=10)
    ap.add_argument("--kind", default="desktop", choices=("desktop", "sandbox"))
    ap.add_argument("--seconds", type=float, default=30)
    ap.add_argument("--viewers", type=int, default=50)
    ap.add_argument("--viewer-seconds", type=float, default=10)
    args = ap.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, 65536)), hard))
    srv = Cubicled(["--max-conns-per-addr", str(args.connections + 64),
                    "--streams-per-computer", str(max(8, args.viewers + 2))]).start()
    pid = srv.proc.pid
    try:
        keys, computers, kinds = [], [], {}
        for w in range(args.workspaces):
            _, key = srv.workspace("load-%d" % w)
            keys.append(key)
            computers.append([])
        t = time.monotonic()
        for c in range(args.computers):
            w = c % args.workspaces
            cid = srv.computer(keys[w], kind=args.kind, isolation="container",
                               timeout_s=300)["id"]
            computers[w].append(cid)
            kinds[cid] = args.kind
        print("%d %s computers running in %.1f s" % (args.computers, args.kind,
                                                     time.monotonic() - t), flush=True)
        before = proc(pid)
        samples = []
        t0 = time.monotonic()
        res = asyncio.run(api_load(srv.port, keys, computers, kinds, args.connections,
                                   args.seconds, pid, samples))
        wall = time.monotonic() - t0
        during = proc(pid)
        time.sleep(3)
        after = proc(pid)
        total = sum(res.status.values())
        ok = sum(v for k, v in res.status.items() if 200 <= k < 300)
        rows = []
        for route, _ in MIX:
            if route in res.lat:
                p50, p99 = stats(res.lat[route])
                rows.append((route, len(res.lat[route]), "%.1f" % p50, "%.1f" % p99))
        table("%d connections over %d workspaces, %d %s computers, %.0f s: %.0f requests/s "
              "(%.0f answered 2xx/s)" % (args.connections, args.workspaces, args.computers,
                                         args.kind, wall, total / wall, ok / wall),
              rows, ("route", "2xx answers", "p50 ms", "p99 ms"))
        cpu = during["cpu_s"] - before["cpu_s"]
        peak = {k: max(s[k] for s in samples) for k in ("rss_mib", "fds", "threads")} \
            if samples else {}
        print("answers by status: %s" % json.dumps(dict(sorted(res.status.items()))))
        print("client-side errors: %s" % json.dumps(res.errors))
        print("cubicled CPU: %.1f s over %.0f s (%.0f %% of a core), %.2f CPU-s per 1000 "
              "requests" % (cpu, wall, 100 * cpu / wall, 1000 * cpu / max(total, 1)))
        for name, p in (("before", before), ("peak", peak), ("after", after)):
            print("cubicled %-6s RSS %.1f MiB, %d descriptors, %d threads" %
                  (name, p["rss_mib"], p["fds"], p["threads"]))
        # Viewers of one desktop during an animation.
        if args.viewers and args.kind == "desktop":
            from rfbclient import Client
            from stream import XANIM, GuestAnim
            from viewers import watch
            cid, key = computers[0][0], keys[0]
            with open(XANIM, "rb") as f:
                exe = srv.act(cid, "write_file", {"path": "xanim", "mode": "0755",
                                                  "content_base64": base64.b64encode(
                                                      f.read()).decode()}, key=key)["path"]
            anim = GuestAnim(srv, cid, key, exe)

            def connect():
                tok = srv.ok("POST", "/v1/computers/%s/stream" % cid, {"view_only": True},
                             key=key, status=201)["token"]
                return Client(ws=("127.0.0.1", srv.port,
                                  "/v1/computers/%s/stream?token=%s" % (cid, tok)))
            anim.start()
            try:
                c0 = proc(pid)["cpu_s"]
                t = time.monotonic()
                _, fps = watch(connect, args.viewers, args.viewer_seconds, 0, srv.port)
                vcpu = (proc(pid)["cpu_s"] - c0) / (time.monotonic() - t)
            finally:
                drawn = anim.stop()
            fps.sort()
            print("%d viewers of one desktop (animation drew %.1f frames/s): updates/s per "
                  "viewer min %.1f, median %.1f, max %.1f; cubicled %.0f %% of a core" %
                  (args.viewers, drawn, fps[0], fps[len(fps) // 2], fps[-1], 100 * vcpu))
            time.sleep(3)
            a = proc(pid)
            print("cubicled after the viewers: RSS %.1f MiB, %d descriptors, %d threads" %
                  (a["rss_mib"], a["fds"], a["threads"]))
    finally:
        srv.stop()


if __name__ == "__main__":
    main()
