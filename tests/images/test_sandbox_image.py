"""The sandbox image: headless, shell and files only, as user 1000."""

import unittest

from guest import Guest

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


if __name__ == "__main__":
    unittest.main()
