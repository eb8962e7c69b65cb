"""PostgreSQL's primary dies under a cluster of cubicled (docs/cluster.md,
"Failure modes"): two PostgreSQL 15 under Patroni on the lab's etcd, with
synchronous replication, behind HAProxy; two cubicled hosts with a running
sandbox. The primary's machine is killed (-9: Patroni and PostgreSQL):
writes resume once the replica is promoted, every write acknowledged
before or during the failover is there after it, and the ledger goes on
from where it was (nothing billed is lost, nothing billed twice).
"""

import os
import sys
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(__file__))
import lab  # noqa: E402
from lab import wait_until  # noqa: E402

L = None


def setUpModule():
    global L
    if os.geteuid() != 0:
        raise unittest.SkipTest("needs root (network namespaces, containers)")
    for exe in ("etcd", "patroni", "haproxy", "/usr/lib/postgresql/15/bin/postgres"):
        if not any(os.access(os.path.join(d, exe), os.X_OK)
                   for d in ["/"] + os.environ.get("PATH", "").split(":")):
            raise unittest.SkipTest("%s is not installed (.ci/debian-packages)" % exe)
    L = lab.Lab(hosts=2, ttl=3, patroni=True, node_args=["--idle-timeout", "3600"])
    L.__enter__()


def tearDownModule():
    if L:
        L.close()


class Failover(unittest.TestCase):
    def test_primary_killed(self):
        n1, n2 = L.nodes
        ws = n1.ok("POST", "/v1/workspaces", {"name": "failover", "max_running": 50},
                   status=201)["id"]
        c = n1.ok("POST", "/v1/computers?wait=running&timeout_s=90",
                  {"kind": "sandbox", "size": "xs", "workspace": ws}, status=201)
        cid = c["id"]
        wait_until(lambda: self.billed(n2, cid) > 1.0, timeout=10, what="a second billed")

        # Writers on both hosts all along: what was acknowledged (201) must
        # be there after the failover.
        acked, stop = [], threading.Event()

        def writer(node, tag):
            i = 0
            while not stop.is_set():
                i += 1
                try:
                    r = node.req("POST", "/v1/workspaces", {"name": "%s-%d" % (tag, i)},
                                 timeout=20)
                except OSError:
                    continue
                if r.status == 201:
                    acked.append(r.json["id"])
                else:
                    self.assertIn(r.status, (503, 504), r.body)
                time.sleep(0.05)

        threads = [threading.Thread(target=writer, args=(n, n.name)) for n in L.nodes]
        for t in threads:
            t.start()
        try:
            wait_until(lambda: len(acked) >= 4, timeout=10)
            billed_before = self.billed(n1, cid)
            before = len(acked)
            old = L.pg.kill_primary()
            t0 = time.monotonic()
            wait_until(lambda: len(acked) > before + 2, timeout=60, interval=0.05,
                       what="writes to resume")
            took = time.monotonic() - t0
            print("PostgreSQL primary %s killed: writes again after %.2f s" % (old["name"],
                                                                                took),
                  file=sys.stderr)
            self.assertNotEqual(L.pg.primary()["name"], old["name"])
            # The bound: Patroni's TTL (6 s), a loop, HAProxy's checks.
            self.assertLessEqual(took, 12.0)
        finally:
            stop.set()
            for t in threads:
                t.join()
        listed = {w["id"] for w in n2.ok("GET", "/v1/workspaces")["workspaces"]}
        lost = [w for w in acked if w not in listed]
        self.assertEqual(lost, [], "acknowledged writes lost in the failover")
        # The ledger kept what it had and goes on (the hosts were never
        # fenced: etcd was fine; the ticks that failed are billed by the next).
        wait_until(lambda: self.billed(n2, cid) > billed_before + 1, timeout=15,
                   what="the ledger to move again")
        self.assertEqual(n2.ok("GET", "/v1/computers/" + cid)["state"], "running")
        n1.ok("DELETE", "/v1/computers/" + cid)

    def billed(self, node, cid):
        u = node.ok("GET", "/v1/usage")
        return next((c["running_seconds"] for c in u["computers"] if c["id"] == cid), 0.0)


if __name__ == "__main__":
    unittest.main()
