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
from runs import RunnerCase, wait_until  # noqa: E402


class TestRunnerPython(RunnerCase, unittest.TestCase):
    # 400 ms of CPU: an attack that first imports a module the zygote did not
    # (urllib.request pulls in http.client, email, ssl) can take over 100 ms
    # of copy-on-write faults on a loaded VM; the limit is test_run's to test.
    # 20 s of wall time: a CPU bomb starved of a core (load 40 on 2 cores)
    # must still reach its CPU limit first. No attack here blocks.
    ARGS = ("--run-wall-ms", "20000", "--run-cpu-ms", "400")

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
            # nothing of cubicled's but its log: no database, no keys, no spool
            for fd in os.listdir("/proc/%d/fd" % pid):
                try:
                    target = os.readlink("/proc/%d/fd/%s" % (pid, fd))
                except OSError:
                    continue
                if target.startswith(self.cd.state):
                    self.assertEqual(target, self.cd.log_path, (pid, fd))

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

    def test_no_timers_or_signals_between_runs(self):
        """Timing side effects: timers armed, signals left pending or
        handlers installed by one run never reach the next."""
        self.py("import signal, os\n"
                "signal.signal(signal.SIGALRM, signal.SIG_DFL)\n"
                "signal.setitimer(signal.ITIMER_REAL, 0.2, 0.05)\n"
                "signal.setitimer(signal.ITIMER_PROF, 0.05, 0.01)\n"
                "signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})\n"
                "os.kill(os.getpid(), signal.SIGTERM)\n"
                "signal.signal(signal.SIGINT, signal.SIG_IGN)\n"
                "print('armed')")
        r = self.py("import signal, time\n"
                    "print(signal.getitimer(signal.ITIMER_REAL), signal.getitimer(signal.ITIMER_PROF),"
                    " sorted(signal.sigpending()), sorted(signal.pthread_sigmask(signal.SIG_BLOCK, [])),"
                    " signal.getsignal(signal.SIGINT) is signal.default_int_handler)\n"
                    "time.sleep(0.4)\n"
                    "print('alive')")
        self.assertOk(r, "(0.0, 0.0) (0.0, 0.0) [] [] True\nalive\n")

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
        """Either half of the supervisor killed from outside, the zygote
        (the hub's child) or the hub (cubicled's): the next run starts a
        new supervisor, whose runs work."""
        for half in ("zygote", "hub"):
            hub = self.supervisor("python")
            self.assertIsNotNone(hub)
            if half == "hub":
                os.kill(hub, 9)
            else:
                with open("/proc/%d/task/%d/children" % (hub, hub)) as f:
                    zygote = [int(x) for x in f.read().split()]
                self.assertEqual(len(zygote), 1, zygote)
                os.kill(zygote[0], 9)
            # The hub goes with its zygote, the zygote with its hub.
            wait_until(lambda: self.supervisor("python") is None, what="the supervisor gone")
            r = self.py("print('back')")
            self.assertOk(r, "back\n")
            self.assertNotEqual(self.supervisor("python"), hub)


class TestRunnerJavaScript(RunnerCase, unittest.TestCase):
    """The guest is QuickJS in WebAssembly: nothing of Node is reachable,
    and the Node process behind it is unprivileged and netless."""

    ARGS = ("--run-cpu-ms", "400")  # wall-clock CPU time: see test_run.TestRunJavaScript

    def test_no_node(self):
        escapes = [
            "typeof process", "typeof require", "typeof module", "typeof globalThis.process",
            "typeof this.constructor.constructor('return process')()",
            "typeof Function('return this')().process",
            "typeof (function(){}).bind.constructor('return process')()",
            "typeof [].constructor.constructor('return require')()",
            "typeof Object.getPrototypeOf(function*(){}).constructor('return process')().next().value",
            "typeof WebAssembly", "typeof fetch", "typeof setTimeout",
            "typeof std", "typeof os", "typeof __write", "typeof Deno", "typeof Bun",
        ]
        for e in escapes:
            r = self.js("let v; try { v = %s; } catch (e) { v = 'threw ' + e.name; }\n"
                        "console.log(v)" % e)
            self.assertIn(r["stdout"].strip(), ("undefined", "threw SyntaxError",
                                               "threw ReferenceError", "threw TypeError"),
                          (e, r))
        r = self.js("import('fs').then(() => console.log('IMPORTED'), (e) => console.log('denied'))")
        self.assertEqual(r["stdout"], "denied\n", r)

    def test_prototype_pollution_does_not_last(self):
        self.js("Object.prototype.polluted = 1; Array.prototype.map = null; globalThis.left = 2;"
                "console.log = () => {}")
        r = self.js("console.log(({}).polluted, typeof [].map, typeof left)")
        self.assertOk(r, "undefined function undefined\n")

    def test_runs_do_not_see_each_other(self):
        results = {}

        def one(i):
            key = self.key if i % 2 else self.key2
            tok = "tok-%02d-%s" % (i, os.urandom(4).hex())
            code = ("globalThis.mine = %r; for (let i = 0; i < 1e3; i++) {}\n"
                    "console.log(mine, typeof globalThis.other)" % tok)
            results[i] = (tok, self.cd.ok("POST", "/v1/run",
                                          {"language": "javascript", "code": code}, key=key))

        threads = [threading.Thread(target=one, args=(i,)) for i in range(64)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.assertEqual(len(results), 64)
        for tok, r in results.values():
            self.assertEqual(r["stdout"], "%s undefined\n" % tok, r)

    def test_builtin_bombs(self):
        for code, kinds in (("'x'.repeat(2 ** 30)", {"memory_limit", "exception", "cpu_limit"}),
                            ("let s = 'x'; for (;;) s += s", {"memory_limit", "exception", "cpu_limit"}),
                            ("10n ** 10000000n", {"cpu_limit", "memory_limit", "exception"}),
                            ("/(a*)*b/.test('a'.repeat(64))", {"cpu_limit"}),
                            ("new Array(2 ** 31).fill(0)", {"cpu_limit", "memory_limit", "exception"}),
                            ("JSON.parse('['.repeat(1e6))", {"exception", "memory_limit", "cpu_limit"}),
                            ("function f() { f(); } f()", {"exception"}),
                            ("for (;;) console.error('e'.repeat(65536))", {"output_limit"})):
            r = self.js(code)
            self.assertIn(r.get("error", {}).get("type"), kinds, (code, r))
        self.assertOk(self.js("console.log('alive')"), "alive\n")
        self.assertIsNone(self.cd.proc.poll())

    def test_supervisor_is_unprivileged(self):
        self.js("1")
        for pid in self.supervisors():
            with open("/proc/%d/cmdline" % pid, "rb") as f:
                if not f.read().startswith(b"node"):
                    continue
            with open("/proc/%d/status" % pid) as f:
                st = f.read()
            uid = [l for l in st.splitlines() if l.startswith("Uid:")][0].split()[1:]
            self.assertEqual(set(uid), {"65534"}, uid)
            self.assertIn("NoNewPrivs:\t1", st)
            self.assertIn("Seccomp:\t2", st)
            self.assertNotEqual(os.readlink("/proc/%d/ns/net" % pid), os.readlink("/proc/self/ns/net"))
            with open("/proc/%d/environ" % pid, "rb") as f:
                self.assertNotIn(self.cd.admin.encode(), f.read())
            break
        else:
            self.fail("no node supervisor among %r" % self.supervisors())

    def test_supervisor_killed(self):
        for pid in self.supervisors():
            with open("/proc/%d/cmdline" % pid, "rb") as f:
                if f.read().startswith(b"node"):
                    os.kill(pid, 9)
        self.assertOk(self.js("console.log('back')"), "back\n")


if __name__ == "__main__":
    unittest.main()
