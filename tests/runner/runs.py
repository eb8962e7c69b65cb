"""Shared by the code runner's tests (test_run.py) and attacks
(tests/attack/test_runner.py): a cubicled with two workspaces, and run()."""

import os
import sys
import threading

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "attack"))
import attack  # noqa: E402
from attack import wait_until  # noqa: E402,F401


class RunnerCase:
    """Mixin for unittest.TestCase: one cubicled for the class."""

    ARGS = ()

    @classmethod
    def setUpClass(cls):
        cls.cd = attack.Cubicled(list(cls.ARGS)).start()
        cls.ws, cls.key = cls.cd.workspace("runs-a")
        cls.ws2, cls.key2 = cls.cd.workspace("runs-b")

    @classmethod
    def tearDownClass(cls):
        cls.cd.stop()

    def post(self, body, key=None, status=200):
        return self.cd.ok("POST", "/v1/run", body, key=key or self.key, status=status)

    def py(self, code, stdin=None, key=None):
        body = {"language": "python", "code": code}
        if stdin is not None:
            body["stdin"] = stdin
        return self.post(body, key=key)

    def js(self, code, stdin=None, key=None):
        body = {"language": "javascript", "code": code}
        if stdin is not None:
            body["stdin"] = stdin
        return self.post(body, key=key)

    def assertOk(self, r, stdout=None):
        self.assertNotIn("error", r, r)
        self.assertEqual(r["exit_code"], 0, r)
        if stdout is not None:
            self.assertEqual(r["stdout"], stdout, r)

    def assertError(self, r, kind):
        self.assertIn("error", r, r)
        self.assertEqual(r["error"]["type"], kind, r)

    def supervisors(self):
        """pids of cubicled's children that are code-runner supervisors."""
        out = []
        for pid in os.listdir("/proc"):
            if not pid.isdigit():
                continue
            try:
                with open("/proc/%s/stat" % pid) as f:
                    st = f.read()
                with open("/proc/%s/cmdline" % pid, "rb") as f:
                    cmd = f.read().split(b"\0")[0]
            except OSError:
                continue
            ppid = int(st.rsplit(")", 1)[1].split()[1])
            if ppid == self.cd.proc.pid and (cmd.startswith(b"cubicle-") or cmd == b"node"):
                out.append(int(pid))
        return out

    def supervisor(self, lang):
        """The live (not zombie) supervisor of lang, a pid, or None."""
        mark = b"cubicle-pyrun" if lang == "python" else b"jsrun.mjs"
        for pid in self.supervisors():
            try:
                with open("/proc/%d/stat" % pid) as f:
                    state = f.read().rsplit(")", 1)[1].split()[0]
                with open("/proc/%d/cmdline" % pid, "rb") as f:
                    cmd = f.read()
            except OSError:
                continue
            if state != "Z" and mark in cmd:
                return pid
        return None

    def assert_restarted_supervisor_lives(self, lang, code):
        """A supervisor that a run started again (from that request's
        thread, which ends with it) outlives the thread: the next run finds
        it, the same process, alive (a PR_SET_PDEATHSIG would kill it as the
        thread exits)."""
        tasks = "/proc/%d/task" % self.cd.proc.pid
        run = lambda: self.post({"language": lang, "code": code})
        self.assertOk(run())
        old = self.supervisor(lang)
        self.assertIsNotNone(old)
        os.kill(old, 9)
        wait_until(lambda: self.supervisor(lang) is None, what="the supervisor dead")
        before = set(os.listdir(tasks))
        answer = []
        t = threading.Thread(target=lambda: answer.append(run()))
        t.start()
        new = wait_until(lambda: self.supervisor(lang), what="a supervisor started by the run")
        # The request's thread is among these while its run is in flight.
        during = set(os.listdir(tasks)) - before
        in_flight = t.is_alive()
        t.join()
        self.assertTrue(in_flight, "the run answered before its thread was seen")
        self.assertNotEqual(new, old)
        self.assertOk(answer[0])
        wait_until(lambda: len(during & set(os.listdir(tasks))) < len(during),
                   what="the request's thread gone")
        for _ in range(3):
            self.assertOk(run())
            self.assertEqual(self.supervisor(lang), new, "the supervisor was started again")
