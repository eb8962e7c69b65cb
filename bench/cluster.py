#!/usr/bin/env python3
"""A cluster of cubicled on one machine (tests/cluster/lab.py): what failing
over, placing, forwarding and relaying cost (docs/cluster.md, "Figures").

  python3 bench/cluster.py [--kills 20] [--placements 24] [--calls 300]
                           [--seconds 8] [--ttl 2] [--patroni]
                           [--only placements,forwarding,stream,failover,database]

Three etcd members, PostgreSQL, three cubicled (container computers) in
network namespaces on a bridge. In turn:

  failover     --kills times: a host (the leader every other time) holding a
               sandbox is killed with -9; the seconds until another node
               says the sandbox is lost (the lease's TTL, then the leader's
               reaper): median and max. The host comes back each time.
  placements   --placements xs sandboxes created at once by 12 clients
               through all three nodes: placements per second (201 answers:
               each placed in one UPDATE and booted by its host), then how
               long until all run.
  forwarding   read_file of a small file, --calls times on one kept-alive
               connection: through the node that holds the computer, and
               through another one (signed, forwarded, answered back):
               median and p99, and the difference.
  stream       a desktop whose screen xanim scrolls at 60 fps: one viewer's
               updates/s through the node that holds it and through another
               (relayed WebSocket), --seconds each.
  database     with --patroni: PostgreSQL under Patroni behind HAProxy, the
               primary killed: seconds until a create succeeds again.
"""

import argparse
import base64
import concurrent.futures
import http.client
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))
from common import stats, table  # noqa: E402
from rfbclient import Client  # noqa: E402
from stream import XANIM, GuestAnim  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "cluster"))
import lab  # noqa: E402
from lab import wait_until  # noqa: E402


class Bench:
    def __init__(self, args):
        self.args = args
        self.l = lab.Lab(hosts=3, ttl=args.ttl, patroni=args.patroni,
                         node_args=["--idle-timeout", "3600"])

    def __enter__(self):
        self.l.__enter__()
        n1 = self.l.nodes[0]
        self.ws = n1.ok("POST", "/v1/workspaces", {"name": "bench", "max_running": 1000},
                        status=201)["id"]
        self.key = n1.ok("POST", "/v1/workspaces/%s/keys" % self.ws, status=201)["key"]
        wait_until(lambda: all(n.req("GET", "/v1/computers", key=self.key).status == 200
                               for n in self.l.nodes), timeout=10)
        return self

    def __exit__(self, *exc):
        self.l.close()

    def create(self, node, host=None, wait=True, **kw):
        body = dict(kw, workspace=self.ws)
        if host:
            body["host"] = host
        q = "?wait=running&timeout_s=120" if wait else ""
        return node.ok("POST", "/v1/computers" + q, body, status=201)

    def hosts(self, node):
        return {h["id"]: h for h in node.ok("GET", "/v1/hosts")["hosts"]}

    # ---- failover ---------------------------------------------------------------------------

    def failover(self):
        times = []
        for i in range(self.args.kills):
            live = [n for n in self.l.nodes if n.proc.alive()]
            leader = next(h["id"] for h in self.hosts(live[0]).values() if h["leader"])
            name = leader if i % 2 == 0 else next(n.name for n in live if n.name != leader)
            victim = self.l.node(name)
            survivor = next(n for n in live if n is not victim)
            cid = self.create(survivor, host=name, kind="sandbox", size="xs")["id"]
            t0 = time.monotonic()
            victim.kill9()
            wait_until(lambda: survivor.ok("GET", "/v1/computers/" + cid)["state"] == "lost",
                       timeout=10 * self.args.ttl, interval=0.02)
            times.append(time.monotonic() - t0)
            print("  kill %d (%s%s): lost after %.2f s" % (
                i + 1, name, ", the leader" if name == leader else "", times[-1]),
                file=sys.stderr)
            survivor.ok("DELETE", "/v1/computers/" + cid)
            victim.start()
            wait_until(lambda: self.hosts(survivor)[name]["state"] == "up", timeout=15)
        return times

    # ---- placement ----------------------------------------------------------------------------

    def placements(self):
        n = self.args.placements
        nodes = self.l.nodes

        def one(i):
            t = time.monotonic()
            r = nodes[i % 3].req("POST", "/v1/computers",
                                 {"kind": "sandbox", "size": "xs", "workspace": self.ws})
            return r, time.monotonic() - t

        t0 = time.monotonic()
        with concurrent.futures.ThreadPoolExecutor(max_workers=12) as ex:
            got = list(ex.map(one, range(n)))
        wall = time.monotonic() - t0
        made = [r.json["id"] for r, _ in got if r.status == 201]
        wait_until(lambda: all(nodes[0].ok("GET", "/v1/computers/" + c)["state"] == "running"
                               for c in made), timeout=300, interval=0.2)
        all_running = time.monotonic() - t0
        per_host = {}
        for c in made:
            h = nodes[0].ok("GET", "/v1/computers/" + c)["host"]
            per_host[h] = per_host.get(h, 0) + 1
        for c in made:
            nodes[0].req("DELETE", "/v1/computers/" + c)
        lat = [t * 1000 for _, t in got]
        return len(made), wall, all_running, stats(lat), per_host

    # ---- forwarding --------------------------------------------------------------------------

    def calls(self, node, cid, n):
        conn = http.client.HTTPConnection(node.addr, node.port, timeout=60)
        body = json.dumps({"path": "/tmp/small"}).encode()
        hdr = {"Authorization": "Bearer " + self.key, "Content-Type": "application/json"}
        out = []
        for _ in range(n + 20):
            t = time.perf_counter()
            conn.request("POST", "/v1/computers/%s/actions/read_file" % cid, body, hdr)
            r = conn.getresponse()
            r.read()
            if r.status != 200:
                raise RuntimeError("read_file: %d" % r.status)
            out.append((time.perf_counter() - t) * 1000)
        conn.close()
        return out[20:]

    def forwarding(self):
        n1, n2, _ = self.l.nodes
        cid = self.create(n1, host="n1", kind="sandbox", size="xs")["id"]
        n1.ok("POST", "/v1/computers/%s/actions/bash" % cid,
              {"command": "head -c 200 /dev/urandom > /tmp/small"})
        direct, forwarded = [], []
        for _ in range(3):  # interleaved, so a busy moment hits both
            direct += self.calls(n1, cid, self.args.calls // 3)
            forwarded += self.calls(n2, cid, self.args.calls // 3)
        n1.ok("DELETE", "/v1/computers/" + cid)
        return stats(direct), stats(forwarded)

    # ---- stream -------------------------------------------------------------------------------

    def watch(self, node, cid, seconds):
        t = node.ok("POST", "/v1/computers/%s/stream" % cid, {"ttl_s": 600},
                    key=self.key, status=201)["token"]
        c = Client(ws=(node.addr, node.port, "/v1/computers/%s/stream?token=%s" % (cid, t)))
        if c.next_update(30) is None:
            raise RuntimeError("no first frame through " + node.name)
        end = time.perf_counter() + 1
        while time.perf_counter() < end:
            c.next_update(1)
        frames, t0 = 0, time.perf_counter()
        while time.perf_counter() - t0 < seconds:
            u = c.next_update(1)
            if u is not None and u.rects:
                frames += 1
        wall = time.perf_counter() - t0
        c.close()
        return frames / wall

    def stream(self):
        n1, n2, _ = self.l.nodes
        cid = self.create(n1, host="n1", kind="desktop")["id"]
        with open(XANIM, "rb") as f:
            exe = n1.ok("POST", "/v1/computers/%s/actions/write_file" % cid,
                        {"path": "xanim", "mode": "0755",
                         "content_base64": base64.b64encode(f.read()).decode()})["path"]

        class Srv:  # GuestAnim's view of a cubicled
            def act(_, c, action, params, key=None):
                return n1.ok("POST", "/v1/computers/%s/actions/%s" % (c, action), params)

        anim = GuestAnim(Srv(), cid, None, exe)
        anim.start()
        try:
            direct = self.watch(n1, cid, self.args.seconds)
            relayed = self.watch(n2, cid, self.args.seconds)
        finally:
            drawn = anim.stop()
        n1.ok("DELETE", "/v1/computers/" + cid)
        return direct, relayed, drawn

    # ---- the database's failover -------------------------------------------------------------------

    def database(self):
        n1 = self.l.nodes[0]
        old = self.l.pg.kill_primary()
        t0 = time.monotonic()

        def writes():
            r = n1.req("POST", "/v1/workspaces", {"name": "after-failover"}, timeout=15)
            return r.status == 201
        wait_until(writes, timeout=60, interval=0.1)
        took = time.monotonic() - t0
        self.l.pg.start(old)
        return took


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kills", type=int, default=20)
    ap.add_argument("--placements", type=int, default=24)
    ap.add_argument("--calls", type=int, default=300)
    ap.add_argument("--seconds", type=float, default=8)
    ap.add_argument("--ttl", type=int, default=2)
    ap.add_argument("--patroni", action="store_true")
    ap.add_argument("--only", default="placements,forwarding,stream,failover,database")
    args = ap.parse_args()
    only = set(args.only.split(","))
    with Bench(args) as b:
        rows = []
        if "placements" in only:
            made, wall, running, (p50, p99), per_host = b.placements()
            rows.append(("placements", "%d in %.2f s: %.1f/s (create p50 %.0f ms, p99 %.0f ms); "
                         "all running after %.2f s; per host %s" % (
                             made, wall, made / wall, p50, p99, running,
                             " ".join("%s=%d" % kv for kv in sorted(per_host.items())))))
        if "forwarding" in only:
            (d50, d99), (f50, f99) = b.forwarding()
            rows.append(("read_file, ms p50 / p99", "direct %.2f / %.2f; through another node "
                         "%.2f / %.2f; forwarding adds %.2f ms at the median" % (
                             d50, d99, f50, f99, f50 - d50)))
        if "stream" in only:
            direct, relayed, drawn = b.stream()
            rows.append(("stream updates/s (60 fps scroll)", "direct %.1f; relayed through "
                         "another node %.1f (the animation drew %.1f)" % (direct, relayed,
                                                                          drawn)))
        if "failover" in only:
            times = b.failover()
            rows.append(("kill -9 a host -> its computers lost", "TTL %d s, %d kills: median "
                         "%.2f s, max %.2f s (min %.2f)" % (
                             args.ttl, len(times), statistics.median(times), max(times),
                             min(times))))
        load = os.getloadavg()[0]
        rows.append(("load average (1 min) at the end", "%.1f" % load))
        if args.patroni and "database" in only:
            rows.append(("PostgreSQL primary killed -> writes", "%.2f s (Patroni TTL %d s)" % (
                b.database(), lab.Patroni.TTL)))
        table("a cluster of 3 cubicled on one 2-core machine (namespaces, container computers)",
              rows, ("", ""))


if __name__ == "__main__":
    main()
