"""The sandbox image: headless, shell and files only, as user 1000."""

import unittest

from guest import Guest, check_only_envd, check_user_basics, processes

g = None


def setUpModule():
    global g
    g = Guest("sandbox", ["--user", "user"])
    try:
        g.start()
    except BaseException:
        g.stop()
        raise


def tearDownModule():
    g.stop()


class Sandbox(unittest.TestCase):
    def test_python_and_tools(self):
        r = g.ok("python", {"code": "import sys, os; print(sys.version_info[0], os.getuid())"})
        self.assertEqual(r["stdout"].split(), ["3", "1000"])
        r = g.ok("bash", {"command": "git --version && curl --version | head -1 && id -un"})
        self.assertEqual(r["exit_code"], 0, r)
        self.assertEqual(r["stdout"].split()[-1], "user")

    def test_files_in_session_dirs(self):
        g.ok("write_file", {"path": "/session/output/result.txt", "content": "42\n"})
        r = g.ok("bash", {"command": "stat -c %U /session/output/result.txt; "
                                     "cat /session/output/result.txt"})
        self.assertEqual(r["stdout"], "user\n42\n")

    def test_headless(self):
        h = g.request("GET", "/health").json
        self.assertFalse(h["display"])
        self.assertTrue(h["ready"])
        r = g.action("screenshot", {})
        self.assertEqual(r.status, 409)
        self.assertIn("display", r.json["error"]["message"])

    def test_no_way_to_root(self):
        r = g.ok("bash", {"command": "command -v sudo; su -c true root </dev/null; echo $?; "
                                     "find / -xdev -perm /6000 -type f 2>/dev/null | wc -l"})
        lines = r["stdout"].split()
        self.assertNotEqual(lines[0], "0")  # su failed
        self.assertEqual(lines[1], "0")     # no setuid/setgid file anywhere


    def test_user_environment(self):
        check_user_basics(self, g)

    def test_no_services_but_envd(self):
        # Nothing but tini, envd and the command itself (bash and its ps).
        envd, procs, _ = check_only_envd(self, processes(g), (), "")
        others = sorted(p["comm"] for p in procs if p["pid"] not in (1, envd["pid"]))
        self.assertTrue(set(others) <= {"bash", "ps"} and "ps" in others, procs)
        # envd stays root (rootfs/README.md says why); what it runs is 1000.
        self.assertEqual(envd["uid"], 0)
        self.assertEqual({p["uid"] for p in procs if p["comm"] == "ps"}, {1000})

    def test_commands_cannot_end_envd(self):
        # kill -9 -1 ends every process the user may signal (but the
        # caller): the sleep beside it, but not envd (root), which answers
        # the next request.
        r = g.ok("bash", {"command": "sleep 300 & s=$!; kill -9 -1; wait $s; echo $?"})
        self.assertEqual(r["stdout"], "137\n", r)
        r = g.ok("bash", {"command": "id -u"})
        self.assertEqual(r["stdout"], "1000\n")


if __name__ == "__main__":
    unittest.main()
