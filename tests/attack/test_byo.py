"""A hostile connected machine (docs/byo.md): whatever dials /v1/connect
with a valid token or credential may send anything over its link. Every
frame is untrusted: a frame over the limit, a stream it never got, a stream
it tries to open, a frame type only cubicled sends, a flood, silence — the
link ends with the reason in cubicled's log, the machine goes offline, and
cubicled keeps serving everyone else."""

import json
import os
import struct
import sys
import unittest

from attack import Cubicled, wait_until

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "host"))
from wsclient import WebSocket  # noqa: E402

HELLO, OPEN, DATA, WINDOW, CLOSE, PING, PONG, BYE = range(1, 9)


def frame(t, sid, payload=b""):
    return struct.pack(">BII", t, sid, len(payload)) + payload


class Link:
    """The machine's end of a link, spoken by hand."""

    def __init__(self, d, bearer):
        self.ws = WebSocket("127.0.0.1", d.port, "/v1/connect?hostname=evil&display=0",
                            headers="Authorization: Bearer %s\r\n" % bearer)
        self.buf = b""

    def next(self):
        while len(self.buf) < 9 or len(self.buf) < 9 + struct.unpack(">I", self.buf[5:9])[0]:
            self.buf += self.ws.recv_frame()
        t, sid, n = struct.unpack(">BII", self.buf[:9])
        payload, self.buf = self.buf[9:9 + n], self.buf[9 + n:]
        return t, sid, payload

    def until(self, want):
        while True:
            t, sid, p = self.next()
            if t == want:
                return sid, p

    def closed(self):
        """True once cubicled ended the link (reads what is left)."""
        try:
            while True:
                self.next()
        except (ConnectionError, OSError):
            return True


class TestHostileMachine(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.d = Cubicled().start()
        cls.ws, cls.key = cls.d.workspace("evil")
        tok = cls.d.ok("POST", "/v1/connect-tokens", {"kind": "sandbox"}, key=cls.key,
                       status=201)["token"]
        link = Link(cls.d, tok)
        _, hello = link.until(HELLO)
        h = json.loads(hello)
        cls.id, cls.cred = h["id"], h["credential"]
        link.ws.close()

    @classmethod
    def tearDownClass(cls):
        cls.d.stop()

    def attack(self, payload, reason):
        link = Link(self.d, self.cred)
        link.until(HELLO)
        link.ws.send(payload)
        self.assertTrue(link.closed())
        link.ws.close()
        wait_until(lambda: reason in self.d.read_log(), 10, "the reason in the log")
        wait_until(lambda: self.d.ok("GET", "/v1/computers/" + self.id,
                                     key=self.key)["state"] == "offline", 10, "offline")
        self.assertEqual(self.d.req("GET", "/healthz").status, 200)

    def test_oversize_frame(self):
        self.attack(struct.pack(">BII", DATA, 1, 1 << 30), "a frame of 1073741824 bytes")

    def test_stream_never_opened(self):
        self.attack(frame(DATA, 999, b"x"), "DATA for stream 999, which was never opened")

    def test_machine_opens_a_stream(self):
        self.attack(frame(OPEN, 7, b"http"), "the machine tried to open stream 7")

    def test_machine_says_bye(self):
        self.attack(frame(BYE, 0, b"no"), "the machine sent a BYE frame")

    def test_unknown_type(self):
        self.attack(frame(42, 0), "an unknown frame type 42")

    def test_ping_flood_and_silence(self):
        # 8 MiB of pings as fast as the socket takes them: cubicled answers
        # what it reads, reads no faster than the machine takes its pongs,
        # and stays responsive; then silence ends the link.
        link = Link(self.d, self.cred)
        link.until(HELLO)
        burst = frame(PING, 0, b"12345678") * 4096
        for _ in range(50):
            link.ws.send(burst)
        self.assertEqual(self.d.req("GET", "/healthz").status, 200)
        wait_until(lambda: "nothing from the peer" in self.d.read_log(), 15, "silence noticed")
        self.assertTrue(link.closed())
        link.ws.close()

    def test_tokens(self):
        # Forged and malformed bearers are refused at the upgrade (401).
        from wsclient import Refused
        for bearer in ("cbm_%s_%s" % ("0" * 16, "1" * 32), "cbt_x", "nonsense", ""):
            with self.assertRaises(Refused) as r:
                Link(self.d, bearer)
            self.assertEqual(r.exception.status, 401, bearer)


if __name__ == "__main__":
    unittest.main()
