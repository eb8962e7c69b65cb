"""write_file and read_file through envd's HTTP API on a headless envd.

Binary and UTF-8 round trips, modes, parent directories, the size limit that
points to the streaming endpoint, every bad-input case, and run-as ownership.
"""

import base64
import os
import shutil
import stat
import tempfile
import unittest

import harness
from test_shell import make_user


class FilesTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.envd = harness.Envd(None).start()
        cls.tmp = tempfile.mkdtemp(prefix="cubicle-files-test-")

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)
        cls.envd.stop()

    def path(self, *names):
        return os.path.join(self.tmp, self.id().rsplit(".", 1)[1], *names)

    def assertError(self, r, status, param=None):
        self.assertEqual(r.status, status, r)
        err = r.json["error"]
        if param is not None:
            self.assertEqual(err.get("param"), param, r)
            self.assertIn(param, err["message"])
        return err

    def test_binary_round_trip(self):
        data = bytes(range(256)) * 3
        p = self.path("sub", "dir", "all.bin")  # parents are created
        out = self.envd.ok("write_file", {
            "path": p, "content_base64": base64.b64encode(data).decode()})
        self.assertEqual(out, {"ok": True, "path": p, "size": len(data)})
        with open(p, "rb") as f:
            self.assertEqual(f.read(), data)
        self.assertEqual(stat.S_IMODE(os.stat(p).st_mode), 0o644)
        got = self.envd.ok("read_file", {"path": p})
        self.assertEqual(got["encoding"], "base64")
        self.assertEqual(got["size"], len(data))
        self.assertEqual(got["path"], p)
        self.assertEqual(base64.b64decode(got["content"]), data)

    def test_utf8_round_trip(self):
        text = "héllo — 世界 🙂\n-n\n"
        p = self.path("text.txt")
        out = self.envd.ok("write_file", {"path": p, "content": text})
        self.assertEqual(out["size"], len(text.encode()))
        with open(p, encoding="utf-8") as f:
            self.assertEqual(f.read(), text)
        got = self.envd.ok("read_file", {"path": p})
        self.assertEqual((got["encoding"], got["content"]), ("utf-8", text))
        got = self.envd.ok("read_file", {"path": p, "encoding": "base64"})
        self.assertEqual(base64.b64decode(got["content"]).decode(), text)

    def test_empty_file(self):
        p = self.path("empty")
        self.envd.ok("write_file", {"path": p, "content": ""})
        got = self.envd.ok("read_file", {"path": p})
        self.assertEqual((got["size"], got["content"]), (0, ""))

    def test_explicit_utf8_of_binary_is_400(self):
        p = self.path("bin")
        os.makedirs(os.path.dirname(p), exist_ok=True)
        with open(p, "wb") as f:
            f.write(b"\xff\xfe")
        self.assertError(self.envd.action("read_file", {"path": p, "encoding": "utf-8"}),
                         400, "encoding")
        self.assertError(self.envd.action("read_file", {"path": p, "encoding": "latin1"}),
                         400, "encoding")

    def test_overwrite_is_atomic_and_keeps_mode(self):
        p = self.path("script.sh")
        self.envd.ok("write_file", {"path": p, "content": "one", "mode": "0750"})
        self.assertEqual(stat.S_IMODE(os.stat(p).st_mode), 0o750)
        self.envd.ok("write_file", {"path": p, "content": "two"})
        self.assertEqual(stat.S_IMODE(os.stat(p).st_mode), 0o750)
        self.envd.ok("write_file", {"path": p, "content": "three", "mode": 0o600})
        self.assertEqual(stat.S_IMODE(os.stat(p).st_mode), 0o600)
        with open(p) as f:
            self.assertEqual(f.read(), "three")
        # No temporary files left behind.
        self.assertEqual(os.listdir(os.path.dirname(p)), ["script.sh"])

    def test_write_through_symlink_replaces_target(self):
        target = self.path("real.txt")
        link = self.path("link.txt")
        self.envd.ok("write_file", {"path": target, "content": "old"})
        os.symlink(target, link)
        self.envd.ok("write_file", {"path": link, "content": "new"})
        self.assertTrue(os.path.islink(link))
        with open(target) as f:
            self.assertEqual(f.read(), "new")

    def test_read_over_limit_is_413_pointing_to_files_endpoint(self):
        p = self.path("huge.bin")
        os.makedirs(os.path.dirname(p), exist_ok=True)
        with open(p, "wb") as f:
            f.truncate((1 << 30) + 1)  # sparse: past any sane read_file limit
        err = self.assertError(self.envd.action("read_file", {"path": p}), 413)
        self.assertIn("/v1/files", err["message"])
        self.assertIn(str((1 << 30) + 1), err["message"])

    def test_missing_file_is_404(self):
        p = self.path("nope.txt")
        err = self.assertError(self.envd.action("read_file", {"path": p}), 404)
        self.assertIn(p, err["message"])

    def test_directory_is_400(self):
        os.makedirs(self.path("d"), exist_ok=True)
        self.assertError(self.envd.action("read_file", {"path": self.path("d")}), 400, "path")
        self.assertError(self.envd.action("write_file", {"path": self.path("d"), "content": "x"}),
                         400, "path")

    def test_not_a_regular_file_is_400(self):
        self.assertError(self.envd.action("read_file", {"path": "/dev/null"}), 400, "path")
        self.assertError(self.envd.action("write_file", {"path": "/dev/null", "content": "x"}),
                         400, "path")
        self.assertTrue(stat.S_ISCHR(os.stat("/dev/null").st_mode))

    def test_stream_of_a_non_regular_file_is_400(self):
        # A FIFO with no writer would hold the reader forever, a device never
        # ends: GET /v1/files refuses both, naming what they are.
        os.makedirs(self.path(), exist_ok=True)
        os.mkfifo(self.path("fifo"))
        for path, what in ((self.path("fifo"), "FIFO"), ("/dev/zero", "character device"),
                           (self.path(), "directory")):
            r = self.envd.request("GET", "/v1/files?path=" + path, timeout=30)
            err = self.assertError(r, 400, "path")
            self.assertIn(what, err["message"])

    def test_bad_write_parameters(self):
        p = self.path("x")
        cases = [
            ({"path": p, "content_base64": "not base64!"}, "content_base64"),
            ({"path": p, "content_base64": "QUJD="}, "content_base64"),
            ({"path": p, "content": "a", "content_base64": "YQ=="}, "content_base64"),
            ({"path": p}, "content"),
            ({"content": "a"}, "path"),
            ({"path": "", "content": "a"}, "path"),
            ({"path": p, "content": 5}, "content"),
            ({"path": p, "content": "a", "mode": "rwx"}, "mode"),
            ({"path": p, "content": "a", "mode": 0o10000}, "mode"),
            ({"path": p, "content": "a", "mode": -1}, "mode"),
            ({"path": p, "content": "a", "contents": "b"}, "contents"),
        ]
        for params, param in cases:
            with self.subTest(params=params):
                self.assertError(self.envd.action("write_file", params), 400, param)
        self.assertFalse(os.path.exists(p))

    def test_bad_read_parameters(self):
        self.assertError(self.envd.action("read_file", {}), 400, "path")
        self.assertError(self.envd.action("read_file", {"path": self.path("a"), "offset": 3}),
                         400, "offset")


class FilesRunAsTest(unittest.TestCase):
    def setUp(self):
        self.pw = make_user(self)
        self.envd = harness.Envd(None, args=["--user", self.pw.pw_name]).start()
        self.addCleanup(self.envd.stop)

    def test_files_are_owned_by_user_and_relative_to_home(self):
        out = self.envd.ok("write_file", {"path": "notes/a.txt", "content": "hi"})
        p = os.path.join(self.pw.pw_dir, "notes", "a.txt")
        self.assertEqual(out["path"], p)
        for q in (p, os.path.dirname(p)):
            st = os.stat(q)
            self.assertEqual((st.st_uid, st.st_gid), (self.pw.pw_uid, self.pw.pw_gid), q)
        self.assertEqual(self.envd.ok("read_file", {"path": "notes/a.txt"})["content"], "hi")

    def test_user_cannot_touch_root_files(self):
        r = self.envd.action("read_file", {"path": "/etc/shadow"})
        self.assertEqual(r.status, 403, r)
        self.assertIn("/etc/shadow", r.json["error"]["message"])
        r = self.envd.action("write_file", {"path": "/etc/cubicle-should-not-exist",
                                            "content": "x"})
        self.assertEqual(r.status, 403, r)
        self.assertFalse(os.path.exists("/etc/cubicle-should-not-exist"))
        # The refusals left nothing behind: the next call is still the user's.
        out = self.envd.ok("bash", {"command": "id -u"})
        self.assertEqual(out["stdout"], "%d\n" % self.pw.pw_uid)


if __name__ == "__main__":
    unittest.main()
