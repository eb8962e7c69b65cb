"""Attacks on the code runner (POST /v1/run, docs/code-runner.md): a
snippet is a tenant's code; it must not read or write the host's files,
reach any network, start processes, signal anyone, see secrets, leave
state for the next run, read another run's output, or take cubicled down.
Witnesses are the host's /proc and filesystem and listeners the test owns."""

import json
import os
import socket
import sys
import tempfile
import threading
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "runner"))
from runs import RunnerCase  # noqa: E402


class TestRunnerPython(RunnerCase, unittest.TestCase):
    ARGS = ("--run-wall-ms", "5000")

    def no_escape(self, code, expect="denied\n"):
        """Runs code that prints 'denied' when the attack failed."""
        r = self.py(code)
        self.assertEqual(r["stdout"], expect, r)
        return r

    def test_files(self):
        secret = os.path.join(self.cd.state, "admin.key")
        for path in ("/etc/shadow", "/etc/passwd", "/root/.bashrc", secret,
                     self.cd.state + "/cubicle.db", "/proc/self/environ", "/proc/1/cmdline",
                     "/proc/%d/environ" % self.cd.proc.pid, "/sys/kernel/notes", "/dev/mem",
                     "/usr/bin/python3", "/etc/hostname"):
            self.no_escape("try:\n    open(%r, 'rb').read(1)\n    print('READ')\n"
                           "except OSError:\n    print('denied')" % path)
        for d in ("/", "/etc", "/proc", "/tmp", self.cd.state, "/home"):
            self.no_escape("import os\ntry:\n    print(os.listdir(%r))\n"
                           "except OSError:\n    print('denied')" % d)

    def test_writes(self):
        target = tempfile.mktemp(prefix="cubicle-run-attack-", dir="/tmp")
        for code in ("open(%r, 'w').write('x')" % target,
                     "import os; os.open(%r, os.O_CREAT | os.O_WRONLY)" % target,
                     "import os; os.mkdir(%r)" % target,
                     "import os; os.symlink('/etc/passwd', %r)" % target,
                     "import os; os.mkfifo(%r)" % target,
                     "open('/dev/shm/x', 'w')", "open('x', 'w')",
                     "import os; os.rename('/usr/lib/python3.11/os.py', '/tmp/os.py')",
                     "import os; os.unlink('/usr/lib/python3.11/this.py')",
                     "import os; os.chmod('/usr/lib/python3.11/os.py', 0o777)"):
            r = self.py("try:\n    " + code + "\n    print('WROTE')\nexcept OSError:\n"
                        "    print('denied')")
            self.assertEqual(r["stdout"], "denied\n", (code, r))
        self.assertFalse(os.path.lexists(target))
        self.assertTrue(os.path.exists("/usr/lib/python3.11/os.py"))

    def test_network(self):
        srv = socket.socket()
        srv.bind(("127.0.0.1", 0))
        srv.listen(8)
        srv.settimeout(0)
        port = srv.getsockname()[1]
        got = []
        try:
            for code in ("import socket; socket.create_connection(('127.0.0.1', %d), 1)" % port,
                         "import socket; socket.socket(socket.AF_INET6)",
                         "import socket; s = socket.socket(socket.AF_UNIX); s.connect('\\0x')",
                         "import socket; socket.socket(socket.AF_UNIX).bind('\\0cubicle')",
                         "import socket; socket.socket(socket.AF_PACKET, socket.SOCK_RAW)",
                         "import socket; socket.socket(socket.AF_NETLINK, socket.SOCK_RAW)",
                         "import socket; socket.getaddrinfo('localhost', 80)",
                         "import urllib.request; urllib.request.urlopen('http://127.0.0.1:%d/')" % port,
                         "import socket; socket.socket(socket.AF_INET, socket.SOCK_DGRAM)"
                         ".sendto(b'x', ('127.0.0.1', %d))" % port):
                r = self.py("try:\n    " + code + "\n    print('CONNECTED')\n"
                            "except Exception:\n    print('denied')")
                self.assertEqual(r["stdout"], "denied\n", (code, r))
            try:
                got.append(srv.accept())
            except BlockingIOError:
                pass
            self.assertEqual(got, [])
        finally:
            srv.close()

    def test_processes(self):
        for code in ("import os; os.fork()", "import subprocess; subprocess.run(['id'])",
                     "import os; assert os.system('id > /tmp/pwned') == 0",
                     "import os; os.execv('/bin/sh', ['sh'])",
                     "import os; os.posix_spawn('/bin/sh', ['sh'], {})",
                     "import threading; t = threading.Thread(target=print); t.start(); t.join()",
                     "import multiprocessing; multiprocessing.Process(target=print).start()",
                     "import pty; pty.fork()"):
            r = self.py("try:\n    " + code + "\n    print('SPAWNED')\nexcept BaseException:\n"
                        "    print('denied')")
            self.assertEqual(r["stdout"], "denied\n", (code, r))
        self.assertFalse(os.path.exists("/tmp/pwned"))

    def test_signals(self):
        sups = self.supervisors()
        self.assertTrue(sups)
        targets = [self.cd.proc.pid, 1, -1, 0] + sups
        for pid in targets:
            for sig in (9, 15, 19):
                self.no_escape("import os\ntry:\n    os.kill(%d, %d)\n    print('SENT')\n"
                               "except OSError:\n    print('denied')" % (pid, sig))
        self.no_escape("import os\ntry:\n    os.kill(os.getppid(), 9)\n    print('SENT')\n"
                       "except OSError:\n    print('denied')")
        self.no_escape("import os, signal\ntry:\n    os.killpg(os.getpgrp(), 9)\n"
                       "    print('SENT')\nexcept OSError:\n    print('denied')")
        self.assertIsNone(self.cd.proc.poll())
        self.assertEqual(sorted(self.supervisors()), sorted(sups))
        # signals to itself still work (a snippet may use them)
        r = self.py("import os, signal\nsignal.signal(signal.SIGUSR1, lambda *a: print('got'))\n"
                    "os.kill(os.getpid(), signal.SIGUSR1)")
        self.assertOk(r, "got\n")

    def test_privileges(self):
        r = self.py("import os\nprint(os.getuid(), os.getgid(), os.getgroups())\n"
                    "for f in (lambda: os.setuid(0), lambda: os.chroot('/'), "
                    "lambda: os.unshare(0x10000000) if hasattr(os, 'unshare') else 1/0,"
                    " lambda: os.setgroups([0])):\n"
                    "    try:\n        f(); print('ESCALATED')\n    except Exception:\n"
                    "        print('denied')")
        self.assertEqual(r["stdout"], "65534 65534 []\n" + "denied\n" * 4, r)

    def test_ctypes_and_native_code(self):
        self.no_escape("try:\n    import ctypes\n    print('LOADED')\nexcept ImportError:\n"
                       "    print('denied')")
        self.no_escape("import mmap\ntry:\n    m = mmap.mmap(-1, 4096, prot=7)\n"
                       "    print('denied')\nexcept OSError:\n    print('denied')")
        # ptrace and /proc/self/mem: no writing its own (or anyone's) memory from outside
        self.no_escape("try:\n    f = open('/proc/self/mem', 'r+b')\n    print('OPENED')\n"
                       "except OSError:\n    print('denied')")

    def test_environment(self):
        r = self.py("import os, json; print(json.dumps(dict(os.environ)))")
        env = json.loads(r["stdout"])
        self.assertLessEqual(set(env), {"PATH", "LANG", "TZ", "HOME"}, env)
        self.assertNotIn(self.cd.admin, r["stdout"])
        # the host's own view of the supervisors: no secret in their environment
        for pid in self.supervisors():
            with open("/proc/%d/environ" % pid, "rb") as f:
                environ = f.read()
            self.assertNotIn(self.cd.admin.encode(), environ)
            self.assertNotIn(b"CUBICLE_ADMIN_KEY", environ)
            fds = os.listdir("/proc/%d/fd" % pid)
            # stdin, stdout, stderr, the control socket and the zygote's own
            self.assertLessEqual(len(fds), 8, fds)

    def test_descriptors(self):
        r = self.py("import os\nopen_ = []\nfor fd in range(0, 1024):\n    try:\n"
                    "        os.fstat(fd); open_.append(fd)\n    except OSError:\n        pass\n"
                    "print(open_)")
        self.assertEqual(r["stdout"], "[0, 1, 2, 3]\n", r)  # 3: its verdict pipe

    def test_no_state_between_runs(self):
        self.py("import builtins, json, sys, os\nbuiltins.SECRET = 'left'\n"
                "json.dumps = lambda *a: 'poisoned'\nsys.modules['evil'] = 1\n"
                "os.environ['X'] = 'y'\nimport random; random.seed(1)")
        r = self.py("import builtins, json, sys, os\n"
                    "print(hasattr(builtins, 'SECRET'), json.dumps([1]), 'evil' in sys.modules,"
                    " 'X' in os.environ)")
        self.assertOk(r, "False [1] False False\n")

    def test_runs_do_not_see_each_other(self):
        """64 runs at once, each with its own token, some from each
        workspace: every answer holds its own token and no other."""
        results = {}

        def one(i):
            key = self.key if i % 2 else self.key2
            tok = "tok-%02d-%s" % (i, os.urandom(4).hex())
            code = ("import time, sys, gc\nt = %r\nprint(t)\ntime.sleep(0.3)\n"
                    "print(t, len([o for o in gc.get_objects() if isinstance(o, str) "
                    "and o.startswith('tok-') and o != t]))" % tok)
            r = self.cd.ok("POST", "/v1/run", {"language": "python", "code": code}, key=key)
            results[i] = (tok, r)

        threads = [threading.Thread(target=one, args=(i,)) for i in range(64)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.assertEqual(len(results), 64)
        for i, (tok, r) in results.items():
            self.assertEqual(r["stdout"], "%s\n%s 0\n" % (tok, tok), r)

    def test_builtin_bombs(self):
        for code, kinds in (("x = 'x' * (10 ** 10)", {"memory_limit"}),
                            ("x = 10 ** (10 ** 8)", {"cpu_limit"}),
                            ("x = [0] * (10 ** 9)", {"memory_limit"}),
                            ("import re; re.match(r'(a*)*b', 'a' * 64)", {"cpu_limit"}),
                            ("import math; math.factorial(10 ** 7)", {"cpu_limit"}),
                            ("x = sorted(range(10 ** 9))", {"memory_limit", "cpu_limit"}),
                            ("import json; json.loads('[' * 10 ** 6)", {"exception"}),
                            ("def f(): f()\nf()", {"exception"}),
                            ("import zlib; zlib.decompress(zlib.compress(b'0' * (10 ** 9 // 8)) * 1)",
                             {"memory_limit", "cpu_limit"})):
            r = self.py(code)
            self.assertIn(r.get("error", {}).get("type"), kinds, (code, r))
        self.assertOk(self.py("print('alive')"), "alive\n")

    def test_output_floods(self):
        for code in ("while True: print('x' * 4096)",
                     "import os\nwhile True: os.write(1, b'y' * 65536)",
                     "import os\nwhile True: os.write(2, b'z' * 65536)"):
            r = self.py(code)
            self.assertError(r, "output_limit")
            self.assertLessEqual(len(r["stdout"]) + len(r["stderr"]), 1 << 20)
        self.assertIsNone(self.cd.proc.poll())

    def test_supervisor_killed(self):
        """The zygote killed from outside: the next run starts a new one."""
        for pid in self.supervisors():
            with open("/proc/%d/cmdline" % pid, "rb") as f:
                if f.read().startswith(b"cubicle-pyrun"):
                    os.kill(pid, 9)
        r = self.py("print('back')")
        self.assertOk(r, "back\n")


if __name__ == "__main__":
    unittest.main()
