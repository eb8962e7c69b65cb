"""bash and python through envd's HTTP API on a headless envd (no display).

Covers exit codes, stderr, signals, timeouts (504 with the partial output and
the whole process group dead), concurrency (a slow call does not hold up a
fast one), stdin/env/cwd, bad parameters, and running as another user.
"""

import os
import pwd
import secrets
import shutil
import subprocess
import tempfile
import threading
import unittest

import harness


def pid_dead(pid):
    """True when pid is gone or a zombie (dead, waiting for its reaper)."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            stat = f.read()
    except FileNotFoundError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] in ("Z", "X")


class ShellTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.envd = harness.Envd(None).start()
        cls.tmp = tempfile.mkdtemp(prefix="cubicle-shell-test-")

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)
        cls.envd.stop()

    def bash(self, command, **params):
        params["command"] = command
        return self.envd.ok("bash", params)

    def assertError(self, r, status, param=None, code=None):
        self.assertEqual(r.status, status, r)
        err = r.json["error"]
        if param is not None:
            self.assertEqual(err.get("param"), param, r)
        if code is not None:
            self.assertEqual(err["code"], code, r)
        return err

    # --- results -------------------------------------------------------
    def test_exit_code_stdout_stderr(self):
        out = self.bash("echo out; echo err >&2; exit 3")
        self.assertEqual(out["stdout"], "out\n")
        self.assertEqual(out["stderr"], "err\n")
        self.assertEqual(out["exit_code"], 3)
        self.assertIs(out["timed_out"], False)
        self.assertIsInstance(out["duration_ms"], int)
        self.assertNotIn("signal", out)
        self.assertNotIn("stdout_truncated", out)

    def test_killed_by_signal(self):
        out = self.bash("kill -KILL $$")
        self.assertEqual(out["signal"], 9)
        self.assertEqual(out["exit_code"], 128 + 9)

    def test_signals_are_default_in_child(self):
        # envd ignores SIGPIPE for itself; its commands must not inherit that.
        out = self.bash("kill -PIPE $$; echo survived")
        self.assertEqual(out.get("signal"), 13, out)
        self.assertEqual(out["stdout"], "")

    def test_non_utf8_output_is_replaced(self):
        out = self.bash("printf 'a\\377b'")
        self.assertEqual(out["stdout"], "a\ufffdb")

    def test_output_truncated_past_limit(self):
        # 17 MB of output against the 16 MiB per-stream limit: still drained,
        # so the command finishes with its own exit code.
        out = self.bash("head -c 17000000 /dev/zero | tr '\\0' x; exit 7",
                        timeout_s=120)
        self.assertEqual(out["exit_code"], 7)
        self.assertIs(out.get("stdout_truncated"), True)
        self.assertEqual(len(out["stdout"]), 16 << 20)
        self.assertNotIn("stderr_truncated", out)

    # --- timeouts and process groups ------------------------------------
    def test_timeout_returns_504_with_partial_output_and_kills_group(self):
        r = self.envd.action("bash", {
            "command": "sleep 300 & echo bg=$!; echo started; sleep 300",
            "timeout_s": 1})
        err = self.assertError(r, 504, code="timeout")
        self.assertIn("timed out after 1 s", err["message"])
        body = r.json
        self.assertIs(body["timed_out"], True)
        self.assertIsNone(body["exit_code"])
        self.assertIn("started\n", body["stdout"])
        bg = int(body["stdout"].split("bg=", 1)[1].split()[0])
        harness.wait_until(lambda: pid_dead(bg), 10,
                           "the background sleep %d to be killed" % bg)

    def test_slow_call_does_not_delay_fast_call(self):
        marker = os.path.join(self.tmp, "slow-started-" + secrets.token_hex(4))
        order = []
        lock = threading.Lock()

        def call(name, command):
            r = self.envd.action("bash", {"command": command})
            with lock:
                order.append((name, r.status, r.json.get("stdout")))

        slow = threading.Thread(target=call, args=(
            "slow", "touch %s; sleep 3; echo slow" % marker))
        slow.start()
        harness.wait_until(lambda: os.path.exists(marker), 10,
                           "the slow command to start")
        fast = threading.Thread(target=call, args=("fast", "echo fast"))
        fast.start()
        fast.join(60)
        slow.join(60)
        self.assertEqual(order, [("fast", 200, "fast\n"), ("slow", 200, "slow\n")])

    # --- stdin, env, cwd ------------------------------------------------
    def test_stdin_env_cwd(self):
        out = self.bash("cat; echo \"|$GREETING|$(pwd)\"", stdin="hé\nthere",
                        env={"GREETING": "hi there"}, cwd="/usr/share")
        self.assertEqual(out["stdout"], "hé\nthere|hi there|/usr/share\n")

    def test_env_overrides_inherited(self):
        out = self.bash("echo $PATH", env={"PATH": "/bin:/usr/bin"})
        self.assertEqual(out["stdout"], "/bin:/usr/bin\n")

    # --- bad input ------------------------------------------------------
    def test_bad_parameters(self):
        cases = [
            ({}, "command"),
            ({"command": 5}, "command"),
            ({"command": "true", "comand": "x"}, "comand"),
            ({"command": "true", "timeout_s": 0}, "timeout_s"),
            ({"command": "true", "timeout_s": 86401}, "timeout_s"),
            ({"command": "true", "timeout_s": "10"}, "timeout_s"),
            ({"command": "true", "cwd": "/nonexistent/dir"}, "cwd"),
            ({"command": "true", "cwd": ""}, "cwd"),
            ({"command": "true", "env": ["A=1"]}, "env"),
            ({"command": "true", "env": {"A": 1}}, "env"),
            ({"command": "true", "env": {"A=B": "1"}}, "env"),
            ({"command": "true", "stdin": 3}, "stdin"),
        ]
        for params, param in cases:
            with self.subTest(params=params):
                err = self.assertError(self.envd.action("bash", params), 400,
                                       param=param)
                self.assertIn(param, err["message"])

    def test_bad_cwd_message_names_directory(self):
        err = self.assertError(self.envd.action(
            "bash", {"command": "true", "cwd": "/nonexistent/dir"}), 400, "cwd")
        self.assertIn("/nonexistent/dir", err["message"])

    # --- python ---------------------------------------------------------
    def test_python_exit_code_and_exception(self):
        out = self.envd.ok("python", {"code": "import sys\nprint('hi')\nsys.exit(5)"})
        self.assertEqual(out["stdout"], "hi\n")
        self.assertEqual(out["exit_code"], 5)
        out = self.envd.ok("python", {"code": "raise ValueError('boom')"})
        self.assertEqual(out["exit_code"], 1)
        self.assertIn("ValueError: boom", out["stderr"])
        self.assertIn("Traceback", out["stderr"])

    def test_python_stdin_env_cwd(self):
        code = "import os, sys\nprint(sys.stdin.read().upper(), os.environ['X'], os.getcwd())"
        out = self.envd.ok("python", {"code": code, "stdin": "abc",
                                      "env": {"X": "y"}, "cwd": "/tmp"})
        self.assertEqual(out["stdout"], "ABC y /tmp\n")

    def test_python_large_code(self):
        # Past the 64 KiB inline limit the code goes through a temporary file.
        code = "x = 0\n" + "x += 1\n" * 20000 + "print(x)\n"
        self.assertGreater(len(code), 128 * 1024)
        out = self.envd.ok("python", {"code": code, "stdin": "still free"})
        self.assertEqual(out["stdout"], "20000\n", out["stderr"][-500:])

    def test_python_timeout(self):
        r = self.envd.action("python", {
            "code": "import time\nprint('partial', flush=True)\ntime.sleep(300)",
            "timeout_s": 1})
        self.assertError(r, 504, code="timeout")
        self.assertEqual(r.json["stdout"], "partial\n")

    def test_python_missing_code(self):
        self.assertError(self.envd.action("python", {"command": "x"}), 400)
        self.assertError(self.envd.action("python", {}), 400, "code")

    # --- headless -------------------------------------------------------
    def test_display_action_is_409_on_headless(self):
        r = self.envd.action("left_click", {"x": 1, "y": 1})
        if r.status == 404:
            self.skipTest("left_click is not implemented yet")
        self.assertError(r, 409, code="conflict")


def make_user(test):
    """Creates a throwaway user (root only) and returns its passwd entry."""
    if os.geteuid() != 0:
        test.skipTest("creating a user for run-as tests needs root")
    if not shutil.which("useradd"):
        test.skipTest("useradd is not installed")
    name = "cbtest" + secrets.token_hex(3)
    home = tempfile.mkdtemp(prefix="cubicle-home-")
    os.rmdir(home)
    subprocess.run(["useradd", "-M", "-d", home, "-s", "/bin/bash", "-U", name],
                   check=True)
    os.mkdir(home, 0o755)
    pw = pwd.getpwnam(name)
    os.chown(home, pw.pw_uid, pw.pw_gid)
    test.addCleanup(shutil.rmtree, home, True)
    test.addCleanup(subprocess.run, ["userdel", name], check=False,
                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return pw


class ShellRunAsTest(unittest.TestCase):
    def setUp(self):
        self.pw = make_user(self)
        self.envd = harness.Envd(None, args=["--user", self.pw.pw_name]).start()
        self.addCleanup(self.envd.stop)

    def test_bash_runs_as_user_in_home(self):
        out = self.envd.ok("bash", {"command": "id -un; id -u; echo $HOME $USER $LOGNAME; pwd"})
        self.assertEqual(out["stdout"].split("\n")[:4], [
            self.pw.pw_name, str(self.pw.pw_uid),
            "%s %s %s" % (self.pw.pw_dir, self.pw.pw_name, self.pw.pw_name),
            self.pw.pw_dir])

    def test_user_cannot_read_root_files(self):
        out = self.envd.ok("bash", {"command": "cat /etc/shadow"})
        self.assertNotEqual(out["exit_code"], 0)
        self.assertIn("Permission denied", out["stderr"])

    def test_python_runs_as_user(self):
        out = self.envd.ok("python", {"code": "import os; print(os.getuid(), os.getgid())"})
        self.assertEqual(out["stdout"], "%d %d\n" % (self.pw.pw_uid, self.pw.pw_gid))
        code = "import os\nprint(os.getuid())\n" + "#" * (70 * 1024) + "\n"
        out = self.envd.ok("python", {"code": code})
        self.assertEqual(out["stdout"], "%d\n" % self.pw.pw_uid, out["stderr"])

    def test_timeout_kills_user_group(self):
        r = self.envd.action("bash", {"command": "sleep 300 & echo bg=$!; sleep 300",
                                      "timeout_s": 1})
        self.assertEqual(r.status, 504, r)
        bg = int(r.json["stdout"].split("bg=", 1)[1].split()[0])
        harness.wait_until(lambda: pid_dead(bg), 10, "the background sleep to die")


if __name__ == "__main__":
    unittest.main()
