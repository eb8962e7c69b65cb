"""Attacks on screen recordings from inside a computer (issue 18, item 4):
a compromised guest answers the recorder's RFB connection with whatever it
likes. The test stands in for it by putting its own RFB server on the
container's io/vnc.sock (what envd's socket is on the host), against the
real cubicled and cubicle-record.

- a screen of 8000x8000: the recording does not start (503 naming it);
- a flood of updates nobody asked for: the recording ends with an error,
  its file finished;
- an update of more pixels than four screens: likewise;
- garbage after the handshake: the recording ends (source_ended);
- the recorder that reads these bytes runs as the unprivileged uid, with
  no_new_privs and a seccomp filter, and cubicled answers everyone meanwhile;
- a kill -9 of cubicled mid-recording loses nothing: the recorder finishes
  the file, and the restarted cubicled shows it stopped, with its track.
"""

import os
import socket
import struct
import threading
import time
import unittest

import attack
from attack import wait_until

srv = None
key = key2 = desk = None


def setUpModule():
    global srv, key, key2, desk
    srv = attack.Cubicled().start()
    _, key = srv.workspace("recorded")
    _, key2 = srv.workspace("bystander")
    desk = srv.computer(key, kind="desktop", isolation="container")


def tearDownModule():
    srv.stop()


def read_exactly(c, n):
    buf = b""
    while len(buf) < n:
        chunk = c.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("closed")
        buf += chunk
    return buf


class HostileScreen:
    """An RFB 3.8 server on the computer's VNC socket, in place of envd's.
    behave(conn) runs after ServerInit; width/height go in ServerInit."""

    def __init__(self, width, height, behave):
        self.path = os.path.join(srv.state, "computers", desk["id"], "io", "vnc.sock")
        self.real = self.path + ".real"
        self.width, self.height, self.behave = width, height, behave
        self.errors = []

    def __enter__(self):
        os.rename(self.path, self.real)
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind(self.path)
        self.sock.listen(4)
        self.thread = threading.Thread(target=self.serve, daemon=True)
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.sock.close()
        os.unlink(self.path)
        os.rename(self.real, self.path)

    def serve(self):
        try:
            c, _ = self.sock.accept()
        except OSError:
            return
        try:
            line = b""
            while not line.endswith(b"\n"):
                line += read_exactly(c, 1)
            assert line == b"cubicle-viewer view\n", line  # the recorder only watches
            c.sendall(b"RFB 003.008\n")
            read_exactly(c, 12)
            c.sendall(b"\x01\x01")  # one security type: None
            read_exactly(c, 1)
            c.sendall(struct.pack(">I", 0))
            read_exactly(c, 1)  # ClientInit
            pf = struct.pack(">BBBBHHHBBB3x", 32, 24, 0, 1, 255, 255, 255, 16, 8, 0)
            c.sendall(struct.pack(">HH", self.width, self.height) + pf + struct.pack(">I", 4) +
                      b"evil")
            threading.Thread(target=self.drain, args=(c,), daemon=True).start()
            self.behave(c)
        except (OSError, ConnectionError, AssertionError) as e:
            self.errors.append(repr(e))
        finally:
            time.sleep(0.2)
            c.close()

    @staticmethod
    def drain(c):
        try:
            while c.recv(65536):
                pass
        except OSError:
            pass


def update(rects):
    """A FramebufferUpdate of raw rectangles [(x, y, w, h)], grey pixels."""
    out = struct.pack(">BxH", 0, len(rects))
    for x, y, w, h in rects:
        out += struct.pack(">HHHHi", x, y, w, h, 0) + b"\x80" * (w * h * 4)
    return out


def recordings():
    return srv.ok("GET", "/v1/computers/%s/recordings" % desk["id"], key=key)["recordings"]


def ended(rid):
    return wait_until(lambda: next(r for r in recordings() if r["id"] == rid)["state"] != "recording"
                      and next(r for r in recordings() if r["id"] == rid), 30, "the recording to end")


def still_answering():
    assert srv.req("GET", "/healthz", timeout=10).status == 200
    assert srv.req("GET", "/v1/computers", key=key2, timeout=10).status == 200


class Hostile(unittest.TestCase):
    def test_a_huge_screen_is_refused(self):
        with HostileScreen(8000, 8000, lambda c: time.sleep(3)):
            r = srv.req("POST", "/v1/computers/%s/recordings" % desk["id"], {}, key=key)
        self.assertEqual(r.status, 503, r.body)
        self.assertIn(b"8000x8000, over 4096x4096", r.body)
        self.assertEqual(recordings(), [])
        still_answering()

    def test_a_flood_of_updates_ends_the_recording(self):
        def flood(c):
            c.sendall(update([(0, 0, 64, 48)]))  # the first picture, asked for
            for _ in range(2000):
                c.sendall(update([(1, 1, 1, 1)]))
        with HostileScreen(64, 48, flood):
            rid = srv.ok("POST", "/v1/computers/%s/recordings" % desk["id"], {}, key=key,
                         status=201)["id"]
            r = ended(rid)
        self.assertEqual(r["reason"], "error")
        self.assertIn("more than it was asked for", r["error"])
        f = srv.req("GET", "/v1/computers/%s/recordings/%s" % (desk["id"], rid), key=key)
        self.assertEqual(f.status, 200)
        self.assertEqual(f.body[:4], b"\x1a\x45\xdf\xa3")  # a finished WebM
        still_answering()
        srv.ok("DELETE", "/v1/computers/%s/recordings/%s" % (desk["id"], rid), key=key)

    def test_too_many_pixels_in_one_update(self):
        asked = threading.Event()

        def big(c):
            c.sendall(update([(0, 0, 64, 48)]))
            asked.wait(10)
            c.sendall(update([(0, 0, 64, 48)] * 6))  # six screens in one update
            time.sleep(2)
        with HostileScreen(64, 48, big):
            rid = srv.ok("POST", "/v1/computers/%s/recordings" % desk["id"], {}, key=key,
                         status=201)["id"]
            asked.set()
            r = ended(rid)
        self.assertEqual(r["reason"], "error")
        self.assertIn("more than 4 screens", r["error"])
        srv.ok("DELETE", "/v1/computers/%s/recordings/%s" % (desk["id"], rid), key=key)

    def test_garbage_ends_the_recording_and_the_recorder_is_confined(self):
        go = threading.Event()

        def garbage(c):
            c.sendall(update([(0, 0, 64, 48)]))
            go.wait(20)
            c.sendall(b"\xee" * 64)  # no such server message
            time.sleep(2)
        with HostileScreen(64, 48, garbage):
            rid = srv.ok("POST", "/v1/computers/%s/recordings" % desk["id"], {}, key=key,
                         status=201)["id"]
            # The process reading the guest's bytes: cubicled's child.
            pids = [p for p in os.listdir("/proc") if p.isdigit() and self.is_recorder(p)]
            self.assertEqual(len(pids), 1, pids)
            with open("/proc/%s/status" % pids[0]) as f:
                status = dict(line.split(":", 1) for line in f if ":" in line)
            self.assertEqual(status["Uid"].split()[0], "65534")
            self.assertEqual(status["NoNewPrivs"].strip(), "1")
            self.assertEqual(status["Seccomp"].strip(), "2")
            self.assertEqual(status["CapEff"].strip(), "0000000000000000")
            go.set()
            r = ended(rid)
        self.assertEqual(r["reason"], "source_ended")
        still_answering()
        srv.ok("DELETE", "/v1/computers/%s/recordings/%s" % (desk["id"], rid), key=key)

    def test_z_a_crash_of_cubicled_finishes_the_file(self):
        rid = srv.ok("POST", "/v1/computers/%s/recordings" % desk["id"], {}, key=key,
                     status=201)["id"]
        srv.act(desk["id"], "move_cursor", {"x": 20, "y": 30}, key=key)
        recorder = [p for p in os.listdir("/proc") if p.isdigit() and self.is_recorder(p)]
        self.assertEqual(len(recorder), 1)
        srv.kill9()
        # Its control pipe closed with cubicled: the recorder finishes the
        # file and exits (it is the host's init's child now).
        wait_until(lambda: not os.path.exists("/proc/" + recorder[0]), 30,
                   "the recorder to end")
        srv.restart()
        r = next(x for x in recordings() if x["id"] == rid)
        self.assertEqual((r["state"], r["reason"]), ("stopped", "error"))
        self.assertIn("cubicled stopped during the recording", r["error"])
        f = srv.req("GET", "/v1/computers/%s/recordings/%s" % (desk["id"], rid), key=key)
        self.assertEqual(f.status, 200)
        self.assertEqual(len(f.body), r["bytes"])
        self.assertGreater(r["bytes"], 1000)
        # Finished: the trailer's cues are there (a cut file has none).
        self.assertIn(b"\x1c\x53\xbb\x6b", f.body)  # the Cues element's id
        track = srv.ok("GET", "/v1/computers/%s/recordings/%s/actions" % (desk["id"], rid),
                       key=key)["actions"]
        self.assertEqual([a["action"] for a in track], ["move_cursor"])
        srv.ok("DELETE", "/v1/computers/%s/recordings/%s" % (desk["id"], rid), key=key)

    @staticmethod
    def is_recorder(pid):
        try:
            with open("/proc/%s/stat" % pid) as f:
                stat = f.read()
            with open("/proc/%s/cmdline" % pid, "rb") as f:
                cmd = f.read()
        except OSError:
            return False
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        return ppid == srv.proc.pid and cmd.startswith(b"cubicle-record")


if __name__ == "__main__":
    unittest.main()
