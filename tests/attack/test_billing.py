"""Issue 11, item 12: billing is continuous, whatever cubicled did.

The report, as a new user met it: `make run` (a warm pool of one small
desktop), a desktop claimed from the pool and a sandbox, Ctrl-C while the
pool's replacement was booting, cubicled started again later: both
computers were adopted as running, but their running time from the stop
on was billed as zero. Here the same with a real cubicled and real
containers: a clean stop (Ctrl-C: SIGINT to cubicled's process group) during the
replacement's boot, a restart after a gap, then kill -9 and another
restart. At every check, each computer's billed running time equals the
wall-clock time since it started running, within BOUND_S: the downtime is
billed and the adopted computers go on being billed.
"""

import os
import signal
import time
import unittest

import attack
from attack import wait_until

# A running computer's open segment is moved to now by the once-a-second
# tick, and recovery moves it to the restart's now: what the ledger shows
# trails the wall clock by at most a tick plus the time of a request.
BOUND_S = 2.0
GAP_S = 3.0  # cubicled down for at least this long


class GroupCubicled(attack.Cubicled):
    """cubicled leading a process group of its own, as a terminal's
    foreground job is, so that a Ctrl-C can be sent the way a terminal
    sends it: SIGINT to the whole group (cubicled and any child of its
    that did not leave the group)."""

    def start(self, port=0):
        sp = attack.cubicled.subprocess
        real = sp.Popen

        def popen(*a, **k):
            k["start_new_session"] = True
            return real(*a, **k)

        sp.Popen = popen
        try:
            return super().start(port)
        finally:
            sp.Popen = real


def ctrl_c(s):
    os.killpg(s.proc.pid, signal.SIGINT)
    s.proc.wait(timeout=90)
    s.proc.stdout.close()
    s.log.close()


class Billing(unittest.TestCase):
    def running_seconds(self, s, ws):
        tq = time.time()
        u = s.ok("GET", "/v1/usage?workspace=%s&to=%.3f" % (ws, tq))
        return tq, {c["id"]: c["running_seconds"] for c in u["computers"]}

    def check(self, s, ws, since, what):
        """since: {id: (t0, t1)}: it began running between t0 and t1."""
        tq, billed = self.running_seconds(s, ws)
        for cid, (t0, t1) in since.items():
            got = billed.get(cid, 0.0)
            self.assertGreaterEqual(got, tq - t1 - BOUND_S,
                                    "%s: %s billed %.1f s of %.1f-%.1f s running" %
                                    (what, cid, got, tq - t1, tq - t0))
            self.assertLessEqual(got, tq - t0 + 0.5, "%s: %s billed more than it ran" % (what, cid))

    def wait_down(self, t_stop):
        # The point is time passing while cubicled is down: wait for the
        # clock, not for a sleep.
        wait_until(lambda: time.time() >= t_stop + GAP_S, GAP_S + 5, "the gap to pass")

    def test_continuous_across_clean_stop_and_kill9(self):
        s = GroupCubicled(["--warm-pool", "small=1"]).start()
        try:
            pool = None

            def pool_ws():
                for w in s.ok("GET", "/v1/workspaces")["workspaces"]:
                    if w["name"] == "cubicle-warm-pool":
                        return w["id"]
                return None

            wait_until(lambda: pool_ws() is not None, 30, "the pool's workspace")
            pool = pool_ws()

            def pool_states():
                return [c["state"] for c in
                        s.ok("GET", "/v1/computers?workspace=" + pool)["computers"]]

            wait_until(lambda: "running" in pool_states(), 120, "a warm desktop")
            ws, key = s.workspace("billed")
            since = {}
            t0 = time.time()
            d = s.ok("POST", "/v1/computers?wait=running", {"kind": "desktop", "size": "small"},
                     key=key, status=201)
            since[d["id"]] = (t0, time.time())
            self.assertEqual(d["state"], "running")
            t0 = time.time()
            sb = s.computer(key, kind="sandbox", size="xs")
            since[sb["id"]] = (t0, time.time())
            # The replacement boots: stop now, as Ctrl-C did.
            wait_until(lambda: "provisioning" in pool_states(), 30, "the pool's replacement")
            self.check(s, ws, since, "before the stop")
            t_stop = time.time()
            ctrl_c(s)
            self.wait_down(t_stop)
            s.restart()
            for cid in since:
                self.assertEqual(s.ok("GET", "/v1/computers/" + cid, key=key)["state"],
                                 "running", cid)
            self.check(s, ws, since, "after a clean stop and a restart")
            # And on from there: the adopted computers go on being billed.
            t_mark = time.time()
            wait_until(lambda: time.time() >= t_mark + 2, 10, "two seconds")
            self.check(s, ws, since, "two seconds after the restart")

            t_stop = time.time()
            s.kill9()
            self.wait_down(t_stop)
            s.restart()
            self.check(s, ws, since, "after kill -9 and a restart")
            # A computer stopped while cubicled was up stops being billed at
            # the running rate from its stop.
            s.ok("POST", "/v1/computers/%s/stop?wait=stopped" % d["id"], key=key)
            tq1, b1 = self.running_seconds(s, ws)
            t_mark = time.time()
            wait_until(lambda: time.time() >= t_mark + 2, 10, "two seconds")
            tq2, b2 = self.running_seconds(s, ws)
            self.assertAlmostEqual(b1[d["id"]], b2[d["id"]], delta=0.01)
            self.assertGreater(b2[sb["id"]], b1[sb["id"]] + 1.0)
        finally:
            s.stop()

    def test_running_computer_with_its_segment_closed(self):
        """The ledger as the report found it after the restart: the
        computers' segments closed at the shutdown while they ran on. The
        harness's runs of the landed build (Ctrl-C during the replacement's
        boot, 3 s and 125 s gaps, make run's own script) kept them open, so
        the state is made here, in the database, while cubicled is down:
        recovery must bill the adopted computer from where its segment
        ended, and from then on."""
        import sqlite3
        s = GroupCubicled().start()
        try:
            ws, key = s.workspace("closed")
            t0 = time.time()
            sb = s.computer(key, kind="sandbox", size="xs")
            since = {sb["id"]: (t0, time.time())}
            t_stop = time.time()
            ctrl_c(s)
            db = sqlite3.connect(os.path.join(s.state, "cubicle.db"))
            with db:
                n = db.execute("UPDATE usage_segments SET open = 0 WHERE open = 1").rowcount
            db.close()
            self.assertEqual(n, 1)
            self.wait_down(t_stop)
            s.restart()
            self.assertEqual(s.ok("GET", "/v1/computers/" + sb["id"], key=key)["state"],
                             "running")
            self.check(s, ws, since, "after a restart that found its segment closed")
            t_mark = time.time()
            wait_until(lambda: time.time() >= t_mark + 2, 10, "two seconds")
            self.check(s, ws, since, "two seconds later")
        finally:
            s.stop()


if __name__ == "__main__":
    unittest.main()
