"""Shared by the code runner's tests (test_run.py) and attacks
(tests/attack/test_runner.py): a cubicled with two workspaces, and run()."""

import os
import sys

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
