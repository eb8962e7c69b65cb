"""get_clipboard and set_clipboard against a real X desktop and xclip.

envd owns the CLIPBOARD selection after set_clipboard and serves it to other
clients (xclip reads it back byte for byte), reads what other clients own,
moves large text by INCR in both directions, and reports an owner that never
answers as a timeout.
"""

import os
import signal
import subprocess
import unittest

import harness

TEXT = "héllo — 世界 🙂\nsecond line\n\ttabbed -n\n"


class ClipboardTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.desk = harness.Desktop().start()
        cls.envd = harness.Envd(cls.desk).start()

    @classmethod
    def tearDownClass(cls):
        try:
            cls.envd.stop()
        finally:
            cls.desk.stop()

    # -- helpers --------------------------------------------------------------

    def xclip_out(self, target=None):
        """What another client pasting CLIPBOARD gets, as bytes."""
        argv = ["xclip", "-o", "-selection", "clipboard"]
        if target:
            argv += ["-t", target]
        r = self.desk.run(argv, text=False)
        self.assertEqual(r.returncode, 0, r.stderr)
        return r.stdout

    def xclip_in(self, data):
        """Starts xclip owning CLIPBOARD with `data` (bytes), in the foreground
        so the test can stop or kill it; it exits when it loses the selection."""
        p = self.desk.spawn(["xclip", "-quiet", "-i", "-selection", "clipboard"],
                            stdin=subprocess.PIPE)
        p.stdin.write(data)
        p.stdin.close()
        return p

    def get(self, **params):
        return self.envd.ok("get_clipboard", params)["text"]

    def wait_for_text(self, expected):
        """Waits until get_clipboard answers `expected` (another client took
        the selection asynchronously) and reports the last answer if not."""
        seen = []

        def check():
            seen[:] = [self.get()]
            return seen[0] == expected
        try:
            harness.wait_until(check, 15, "get_clipboard to return the new text")
        except AssertionError:
            got = seen[0] if seen else None
            self.fail("get_clipboard returned %r (%d chars), expected %r (%d chars)" % (
                (got or "")[:80], len(got or ""), expected[:80], len(expected)))

    def assertError(self, r, status, param=None):
        self.assertEqual(r.status, status, r)
        err = r.json["error"]
        if param is not None:
            self.assertEqual(err.get("param"), param, r)
            self.assertIn(param, err["message"])
        return err

    # -- envd owns the selection ------------------------------------------------

    def test_set_then_other_client_pastes(self):
        out = self.envd.ok("set_clipboard", {"text": TEXT})
        self.assertEqual(out, {"ok": True, "length": len(TEXT.encode())})
        self.assertEqual(self.xclip_out().decode("utf-8"), TEXT)
        self.assertEqual(self.xclip_out("UTF8_STRING").decode("utf-8"), TEXT)
        self.assertEqual(self.xclip_out("text/plain;charset=utf-8").decode("utf-8"), TEXT)
        self.assertEqual(self.get(), TEXT)  # our own copy

    def test_targets(self):
        self.envd.ok("set_clipboard", {"text": "targets"})
        targets = self.xclip_out("TARGETS").decode().split()
        for t in ("TARGETS", "UTF8_STRING", "STRING", "TEXT", "text/plain;charset=utf-8",
                  "text/plain"):
            self.assertIn(t, targets)

    def test_string_target_is_latin1_when_it_fits(self):
        self.envd.ok("set_clipboard", {"text": "café crème"})
        self.assertEqual(self.xclip_out("STRING"), "café crème".encode("latin-1"))
        # Beyond Latin-1: the UTF-8 bytes, as xclip itself serves them.
        self.envd.ok("set_clipboard", {"text": "世界 🙂"})
        self.assertEqual(self.xclip_out("STRING"), "世界 🙂".encode("utf-8"))

    def test_set_twice_second_wins(self):
        self.envd.ok("set_clipboard", {"text": "first"})
        self.envd.ok("set_clipboard", {"text": "second ✓"})
        self.assertEqual(self.xclip_out().decode(), "second ✓")
        self.assertEqual(self.get(), "second ✓")

    def test_large_text_to_other_client_by_incr(self):
        # 1.5 MiB of multi-byte text: far above envd's INCR chunk (256 KiB at
        # most), and chunk boundaries fall inside UTF-8 sequences.
        big = "".join("ligne %d: héllo 世界 🙂\n" % i for i in range(50000))
        self.assertGreater(len(big.encode()), 1 << 20)
        out = self.envd.ok("set_clipboard", {"text": big})
        self.assertEqual(out["length"], len(big.encode()))
        self.assertEqual(self.xclip_out(), big.encode())

    def test_set_empty_string(self):
        self.envd.ok("set_clipboard", {"text": ""})
        self.assertEqual(self.xclip_out(), b"")
        self.assertEqual(self.get(), "")

    # -- another client owns the selection ----------------------------------------

    def test_get_from_other_client(self):
        self.xclip_in(TEXT.encode())
        self.wait_for_text(TEXT)

    def test_large_text_from_other_client_by_incr(self):
        # xclip switches to INCR above about 1 MiB; 1.5 MiB forces it.
        big = "".join("line %06d — ünïcödé 世界 🙂\n" % i for i in range(40000))
        self.assertGreater(len(big.encode()), 3 << 19)
        self.xclip_in(big.encode())
        self.wait_for_text(big)

    def test_envd_takes_over_from_other_client(self):
        p = self.xclip_in(b"owned by xclip")
        self.wait_for_text("owned by xclip")
        self.envd.ok("set_clipboard", {"text": "owned by envd"})
        self.assertEqual(self.xclip_out().decode(), "owned by envd")
        p.wait(timeout=10)  # xclip exits when it loses the selection

    def test_empty_clipboard_is_empty_string(self):
        p = self.xclip_in(b"short-lived")
        self.wait_for_text("short-lived")
        p.kill()  # the owner's window dies with it: CLIPBOARD has no owner
        p.wait()
        harness.wait_until(lambda: self.get() == "", 10, "an ownerless clipboard")
        self.assertEqual(self.envd.ok("get_clipboard", {"timeout_ms": 500}), {"text": ""})

    def test_owner_that_never_answers_is_504(self):
        p = self.xclip_in(b"frozen owner")
        self.wait_for_text("frozen owner")
        os.kill(p.pid, signal.SIGSTOP)
        try:
            r = self.envd.action("get_clipboard", {"timeout_ms": 300})
            err = self.assertError(r, 504)
            self.assertIn("did not answer", err["message"])
        finally:
            os.kill(p.pid, signal.SIGCONT)
            p.kill()
            p.wait()
        # envd is not stuck on the frozen owner: it still serves its own.
        self.envd.ok("set_clipboard", {"text": "alive"})
        self.assertEqual(self.xclip_out().decode(), "alive")

    # -- bad input -------------------------------------------------------------------

    def test_set_without_text_is_400(self):
        self.assertError(self.envd.action("set_clipboard", {}), 400, "text")
        self.assertError(self.envd.action("set_clipboard", {"text": None}), 400, "text")

    def test_text_of_wrong_type_is_400(self):
        for bad in (5, ["a"], {"a": 1}, True):
            self.assertError(self.envd.action("set_clipboard", {"text": bad}), 400, "text")

    def test_bad_timeout_is_400(self):
        for bad in ("soon", 0, -1, 10 ** 9):
            self.assertError(self.envd.action("get_clipboard", {"timeout_ms": bad}), 400,
                             "timeout_ms")

    def test_unknown_parameter_is_400(self):
        self.assertError(self.envd.action("set_clipboard", {"text": "x", "txt": "y"}), 400,
                         "txt")


class HeadlessClipboardTest(unittest.TestCase):
    def test_no_display_is_409(self):
        envd = harness.Envd(None).start()
        try:
            r = envd.action("get_clipboard", {})
            self.assertEqual(r.status, 409, r)
            r = envd.action("set_clipboard", {"text": "x"})
            self.assertEqual(r.status, 409, r)
        finally:
            envd.stop()


if __name__ == "__main__":
    unittest.main()
