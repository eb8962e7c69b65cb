"""Live streams through cubicled: tokens, the WebSocket gateway, view-only
enforcement on the host, revocation. Real cubicled, a real desktop computer,
envd's real VNC server; the RFB client here is a tiny one of our own."""

import struct
import time
import unittest

from cubicled import Cubicled, wait_until
from wsclient import Refused, WebSocket

srv = None
key = key2 = None
desk = None


def setUpModule():
    global srv, key, key2, desk
    srv = Cubicled().start()
    _, key = srv.workspace("watchers")
    _, key2 = srv.workspace("others")
    desk = srv.computer(key, kind="desktop")


def tearDownModule():
    srv.stop()


def mint(cid=None, k=None, **params):
    return srv.ok("POST", "/v1/computers/%s/stream" % (cid or desk["id"]), params,
                  key=k or key, status=201)


def ws_path(token, cid=None):
    return "/v1/computers/%s/stream?token=%s" % (cid or desk["id"], token)


def refused(path):
    try:
        WebSocket("127.0.0.1", srv.port, path).close()
    except Refused as r:
        return r.status
    return 101


def rfb_connect(token):
    """Opens the stream and does the RFB 3.8 handshake; returns (ws, w, h)."""
    ws = WebSocket("127.0.0.1", srv.port, ws_path(token))
    version = ws.recv_exactly(12)
    assert version.startswith(b"RFB 003."), version
    ws.send(b"RFB 003.008\n")
    n = ws.recv_exactly(1)[0]
    types = ws.recv_exactly(n)
    assert 1 in types, types  # None: the gateway checked the token
    ws.send(b"\x01")
    assert struct.unpack(">I", ws.recv_exactly(4))[0] == 0  # SecurityResult OK
    ws.send(b"\x01")  # ClientInit, shared
    w, h = struct.unpack(">HH", ws.recv_exactly(4))
    ws.recv_exactly(16)
    name_len = struct.unpack(">I", ws.recv_exactly(4))[0]
    ws.recv_exactly(name_len)
    return ws, w, h


def cursor():
    r = srv.act(desk["id"], "get_cursor_position", key=key)
    return r["x"], r["y"]


class Tokens(unittest.TestCase):
    def test_mint_shape_and_limits(self):
        t = mint(ttl_s=30)
        self.assertIn("ws://", t["ws_url"])
        self.assertIn("/embed/%s?token=" % desk["id"], t["embed_url"])
        self.assertTrue(t["expires_at"].endswith("Z"))
        r = srv.req("POST", "/v1/computers/%s/stream" % desk["id"], {"ttl_s": 100000}, key=key)
        self.assertEqual((r.status, r.json["error"]["param"]), (400, "ttl_s"))
        r = srv.req("POST", "/v1/computers/%s/stream" % desk["id"], {}, key=key2)
        self.assertEqual(r.status, 404)

    def test_sandbox_has_no_stream(self):
        sb = srv.computer(key, kind="sandbox", size="xs")
        r = srv.req("POST", "/v1/computers/%s/stream" % sb["id"], {}, key=key)
        self.assertEqual(r.status, 409)
        srv.ok("DELETE", "/v1/computers/" + sb["id"], key=key)

    def test_refused_before_upgrade(self):
        good = mint(ttl_s=60)["token"]
        self.assertEqual(refused(ws_path("")), 401)                       # missing
        self.assertEqual(refused(ws_path("v1.garbage")), 401)              # malformed
        forged = good[:-3] + ("AAA" if not good.endswith("AAA") else "BBB")
        self.assertEqual(refused(ws_path(forged)), 401)                    # tampered MAC
        parts = good.split(".")
        parts[3] = "control" if parts[3] == "view" else "view"
        self.assertEqual(refused(ws_path(".".join(parts))), 401)           # altered claim
        other = srv.computer(key, kind="desktop")
        self.assertEqual(refused(ws_path(good, other["id"])), 403)         # other computer
        srv.ok("DELETE", "/v1/computers/" + other["id"], key=key)
        short = mint(ttl_s=1)["token"]
        wait_until(lambda: refused(ws_path(short)) == 401, 5, "the token to expire")

    def test_stopped_or_deleted_computer(self):
        d = srv.computer(key, kind="desktop")
        t = mint(d["id"], ttl_s=120)["token"]
        srv.ok("POST", "/v1/computers/%s/stop" % d["id"], key=key)
        self.assertEqual(refused(ws_path(t, d["id"])), 403)
        srv.ok("DELETE", "/v1/computers/" + d["id"], key=key)
        self.assertEqual(refused(ws_path(t, d["id"])), 403)


class Stream(unittest.TestCase):
    def test_control_stream_moves_the_pointer(self):
        ws, w, h = rfb_connect(mint()["token"])
        self.assertEqual((w, h), (1280, 800))
        ws.send(struct.pack(">BBHH", 5, 0, 321, 234))  # PointerEvent
        wait_until(lambda: cursor() == (321, 234), 10, "the pointer to move")
        ws.close()

    def test_view_only_input_is_dropped_on_the_host(self):
        srv.act(desk["id"], "move_cursor", {"x": 10, "y": 10}, key=key)
        ws, w, h = rfb_connect(mint(view_only=True)["token"])
        ws.send(struct.pack(">BBHH", 5, 0, 600, 500))       # PointerEvent
        ws.send(struct.pack(">BBxxI", 4, 1, 0x61))          # KeyEvent 'a'
        ws.send(struct.pack(">BBHHHH", 3, 0, 0, 0, 16, 16))  # FramebufferUpdateRequest
        # The update request passes (an update comes back), the pointer did not.
        hdr = ws.recv_exactly(4)
        self.assertEqual(hdr[0], 0)  # FramebufferUpdate
        self.assertEqual(cursor(), (10, 10))
        ws.close()

    def test_revoke_closes_streams_and_old_tokens(self):
        t = mint(ttl_s=120)["token"]
        ws, _, _ = rfb_connect(t)
        srv.ok("POST", "/v1/computers/%s/stream/revoke" % desk["id"], key=key)
        with self.assertRaises((ConnectionError, OSError)):
            for _ in range(1000):
                ws.send(struct.pack(">BBHHHH", 3, 1, 0, 0, 8, 8))
                ws.recv_frame()
        self.assertEqual(refused(ws_path(t)), 403)
        fresh = mint()["token"]
        ws2, _, _ = rfb_connect(fresh)
        ws2.close()


if __name__ == "__main__":
    unittest.main()
