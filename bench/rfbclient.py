"""An RFB client that behaves like noVNC on the wire, for bench/stream.py and
the attack suite (tests/attack/test_rfb.py: any version, any framing).

It sends noVNC 1.7.0's pixel format (32 bpp, depth 24, little-endian) and its
encoding list (core/rfb.js _sendEncodings, without H.264, which a browser
only offers when it can decode it): CopyRect, Tight, TightPNG, ZRLE, JPEG,
Hextile, RRE, Zlib, Raw, quality level 6, compression level 2 and the same
pseudo-encodings. Like noVNC it asks for a full update first, then for one
incremental update as soon as each update has been fully received (one
request outstanding at a time: libvncserver has no continuous updates).

Pixels are never decoded: every encoding is parsed only far enough to know
its length, so the client counts updates, rectangles and bytes exactly while
spending as little CPU as it can (it shares the machine with the servers).

The transport is RFB over WebSocket (tests/host/wsclient.py does the
handshake, "binary" subprotocol) or plain RFB on a UNIX socket. It answers
RFB 3.8 unless told another version (3.3, 3.7), and can send every byte in
a WebSocket frame of its own (byte_frames). ServerCutText messages are kept
in cut_texts (their raw bodies; a negative length is the extended clipboard).
`early` bytes go right after ClientInit, before the client's own messages.
"""

import os
import select
import socket
import struct
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "host"))
from wsclient import WebSocket  # noqa: E402

RAW, COPYRECT, RRE, HEXTILE, ZLIB, TIGHT, ZRLE, JPEG = 0, 1, 2, 5, 6, 7, 16, 21
TIGHT_PNG = -260
CURSOR, DESKTOP_SIZE, LAST_RECT = -239, -223, -224
QEMU_KEY, QEMU_LED, DESKTOP_NAME, EXT_DESKTOP_SIZE = -258, -261, -307, -308
XVP, FENCE, CONTINUOUS, EXT_MOUSE = -309, -312, -313, -316
VMWARE_CURSOR, EXT_CLIPBOARD = 0x574D5664, 0xC0A1E5CE - (1 << 32)

NOVNC_ENCODINGS = [COPYRECT, TIGHT, TIGHT_PNG, ZRLE, JPEG, HEXTILE, RRE, ZLIB, RAW,
                   -32 + 6, -256 + 2,  # quality 6, compression 2 (noVNC's defaults)
                   DESKTOP_SIZE, LAST_RECT, QEMU_KEY, QEMU_LED, EXT_DESKTOP_SIZE, XVP,
                   FENCE, CONTINUOUS, DESKTOP_NAME, EXT_CLIPBOARD, EXT_MOUSE,
                   VMWARE_CURSOR, CURSOR]
BPP = 4  # bytes per pixel in noVNC's format
# The line cubicled's gateway writes before RFB on envd's socket (host/api/stream.h).
PREAMBLE = b"cubicle-viewer control\n"


class Update:
    """One FramebufferUpdate: when it was complete, its rectangles, its bytes."""
    __slots__ = ("t", "rects", "nbytes", "pixels")

    def __init__(self, t, rects, nbytes):
        self.t = t
        self.rects = rects  # (x, y, w, h) of the rectangles with pixels
        self.nbytes = nbytes
        self.pixels = sum(w * h for _, _, w, h in rects)

    def covers(self, x, y, w, h):
        return any(rx < x + w and x < rx + rw and ry < y + h and y < ry + rh
                   for rx, ry, rw, rh in self.rects)


class Client:
    def __init__(self, ws=None, unix=None, timeout=30, version=8, byte_frames=False,
                 preamble=None, early=b""):
        """ws=(host, port, path) for RFB over WebSocket, or unix=PATH. preamble:
        bytes sent before RFB starts; envd's socket wants the gateway's line
        (PREAMBLE, the default for unix=; give it for a websockify in front of
        envd's socket too)."""
        self.buf = bytearray()  # the RFB stream, from self.pos on
        self.pos = 0
        self.raw = bytearray()  # WebSocket bytes not yet unframed
        self.consumed = 0       # RFB bytes read so far
        self.version = version
        self.early = early      # client messages sent right after ClientInit
        self.cut_texts = []     # (length as sent, body) of each ServerCutText
        if ws:
            self.ws = WebSocket(*ws, timeout=timeout)
            self.sock = self.ws.sock
            # As browsers do: without it, a request sent while the last one
            # is unacknowledged waits for the server's delayed ACK (~40 ms).
            self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self.raw += self.ws.buf
            self._send = self.ws.send
            if byte_frames:
                self._send = lambda data: [self.ws.send(data[i:i + 1])
                                           for i in range(len(data))]
        else:
            self.ws = None
            self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            self.sock.settimeout(timeout)
            self.sock.connect(unix)
            self._send = self.sock.sendall
            if preamble is None:
                preamble = PREAMBLE
        if preamble:
            self.send(preamble)
        self._unframe()
        self._handshake()

    # ---- the byte stream ----------------------------------------------------

    def _unframe(self):
        """Moves complete WebSocket frames' payloads from raw to buf."""
        if not self.ws:
            self.buf += self.raw
            self.raw.clear()
            return
        raw, p, n_raw = self.raw, 0, len(self.raw)
        while n_raw - p >= 2:
            b0, b1 = raw[p], raw[p + 1]
            n, h = b1 & 0x7F, 2
            if n == 126:
                if n_raw - p < 4:
                    break
                n, h = struct.unpack_from(">H", raw, p + 2)[0], 4
            elif n == 127:
                if n_raw - p < 10:
                    break
                n, h = struct.unpack_from(">Q", raw, p + 2)[0], 10
            if n_raw - p < h + n:
                break
            op = b0 & 0x0F
            if op == 8:
                raise ConnectionError("the server closed the WebSocket")
            if op in (0, 1, 2):
                self.buf += raw[p + h:p + h + n]
            p += h + n
        del raw[:p]

    def _fill(self):
        chunk = self.sock.recv(1 << 20)
        if not chunk:
            raise ConnectionError("the server closed the connection")
        self.raw += chunk
        self._unframe()

    def _need(self, n):
        while len(self.buf) - self.pos < n:
            if self.pos > (1 << 20):
                del self.buf[:self.pos]
                self.pos = 0
            self._fill()

    def read(self, n):
        self._need(n)
        out = bytes(self.buf[self.pos:self.pos + n])
        self.pos += n
        self.consumed += n
        return out

    def skip(self, n):
        self._need(n)
        self.pos += n
        self.consumed += n

    def unpack(self, fmt):
        size = struct.calcsize(fmt)
        self._need(size)
        v = struct.unpack_from(fmt, self.buf, self.pos)
        self.pos += size
        self.consumed += size
        return v

    def send(self, data):
        self._send(data)

    def readable(self, timeout):
        """True when a message (or part of one) is there within timeout s."""
        if len(self.buf) > self.pos:
            return True
        r, _, _ = select.select([self.sock], [], [], timeout)
        if not r:
            return False
        self._fill()
        return len(self.buf) > self.pos or self.readable(0)

    # ---- protocol -----------------------------------------------------------

    def _handshake(self):
        version = self.read(12)
        if not version.startswith(b"RFB 003."):
            raise ConnectionError("not an RFB server: %r" % version)
        self.send(b"RFB 003.00%d\n" % self.version)
        if self.version == 3:  # the server picks the type; the client says nothing
            kind = self.unpack(">I")[0]
            if kind != 1:
                reason = self.read(self.unpack(">I")[0]) if kind == 0 else kind
                raise ConnectionError("security type %r, not None" % (reason,))
        else:
            n = self.unpack("B")[0]
            if n == 0:
                reason = self.read(self.unpack(">I")[0])
                raise ConnectionError("refused: %r" % reason)
            types = self.read(n)
            if 1 not in types:
                raise ConnectionError("no security type None among %r" % list(types))
            self.send(b"\x01")
            # SecurityResult follows None from 3.8 on only.
            if self.version == 8 and self.unpack(">I")[0] != 0:
                raise ConnectionError("security handshake failed")
        self.send(b"\x01")  # ClientInit: shared
        if self.early:
            self.send(self.early)
        self.width, self.height = self.unpack(">HH")
        self.skip(16)
        self.name = self.read(self.unpack(">I")[0]).decode(errors="replace")
        # SetPixelFormat: 32 bpp, depth 24, little-endian, true colour, R/G/B
        # at shifts 0/8/16 (noVNC's).
        self.send(struct.pack(">B3xBBBBHHHBBB3x", 0, 32, 24, 0, 1, 255, 255, 255, 0, 8, 16))
        self.send(struct.pack(">BxH%di" % len(NOVNC_ENCODINGS), 2, len(NOVNC_ENCODINGS),
                              *NOVNC_ENCODINGS))
        self.request(incremental=False)

    def request(self, incremental=True, x=0, y=0, w=None, h=None):
        self.send(struct.pack(">BBHHHH", 3, 1 if incremental else 0, x, y,
                              self.width if w is None else w,
                              self.height if h is None else h))

    def pointer(self, x, y, mask):
        self.send(struct.pack(">BBHH", 5, mask, x, y))

    def next_update(self, timeout, ask=True):
        """The next FramebufferUpdate (other messages are read and dropped),
        or None when nothing arrives within timeout seconds. With ask, the
        next incremental request goes out as soon as it is complete."""
        deadline = time.perf_counter() + timeout
        while True:
            left = deadline - time.perf_counter()
            if not self.readable(max(0.0, left)):
                return None
            start = self.consumed
            kind = self.unpack("B")[0]
            if kind == 0:
                rects = self._update_body()
                u = Update(time.perf_counter(), rects, self.consumed - start)
                if ask:
                    self.request()
                return u
            self._other_message(kind)

    def _other_message(self, kind):
        if kind == 1:  # SetColourMapEntries
            _, _, n = self.unpack(">xHH")
            self.skip(6 * n)
        elif kind == 2:  # Bell
            pass
        elif kind == 3:  # ServerCutText (negative length: extended clipboard)
            n = self.unpack(">3xi")[0]
            self.cut_texts.append((n, self.read(abs(n))))
        elif kind == 250:  # XVP
            self.skip(3)
        else:
            raise ConnectionError("unknown server message %d" % kind)

    def _update_body(self):
        n = self.unpack(">xH")[0]
        rects = []
        for _ in range(n):
            x, y, w, h, enc = self.unpack(">HHHHi")
            if enc == LAST_RECT:
                break
            if self._rect(enc, w, h):
                rects.append((x, y, w, h))
        return rects

    def _rect(self, enc, w, h):
        """Skips one rectangle's data; True if it carries pixels."""
        if enc == TIGHT or enc == TIGHT_PNG:
            self._tight(w, h)
        elif enc == ZRLE or enc == ZLIB:
            self.skip(self.unpack(">I")[0])
        elif enc == RAW:
            self.skip(w * h * BPP)
        elif enc == COPYRECT:
            self.skip(4)
        elif enc == HEXTILE:
            self._hextile(w, h)
        elif enc == RRE:
            self.skip(BPP + self.unpack(">I")[0] * (BPP + 8))
        elif enc == CURSOR:
            self.skip(w * h * BPP + (w + 7) // 8 * h)
            return False
        elif enc == EXT_DESKTOP_SIZE:
            self.skip(3 + 16 * self.unpack("B")[0])
            return False
        elif enc == DESKTOP_NAME:
            self.skip(self.unpack(">I")[0])
            return False
        elif enc == QEMU_LED:
            self.skip(1)
            return False
        elif enc in (DESKTOP_SIZE, QEMU_KEY, EXT_MOUSE):
            return False
        else:
            raise ConnectionError("unexpected encoding %d" % enc)
        return True

    def _compact_len(self):
        n = shift = 0
        for _ in range(3):
            b = self.unpack("B")[0]
            n |= (b & 0x7F) << shift
            shift += 7
            if not b & 0x80:
                break
        return n

    def _tight(self, w, h):
        ctl = self.unpack("B")[0] >> 4
        if ctl == 8:  # fill: one TPIXEL (3 bytes in this pixel format)
            self.skip(3)
            return
        if ctl in (9, 10):  # JPEG, PNG
            self.skip(self._compact_len())
            return
        if ctl > 10:
            raise ConnectionError("bad Tight control %d" % ctl)
        filt = self.unpack("B")[0] if ctl & 4 else 0
        row = w * 3
        if filt == 1:  # palette
            colours = self.unpack("B")[0] + 1
            self.skip(colours * 3)
            row = (w + 7) // 8 if colours <= 2 else w
        size = row * h
        self.skip(size if size < 12 else self._compact_len())

    def _hextile(self, w, h):
        for ty in range(0, h, 16):
            for tx in range(0, w, 16):
                tw, th = min(16, w - tx), min(16, h - ty)
                sub = self.unpack("B")[0]
                if sub & 1:
                    self.skip(tw * th * BPP)
                    continue
                n = (BPP if sub & 2 else 0) + (BPP if sub & 4 else 0)
                self.skip(n)
                if sub & 8:
                    count = self.unpack("B")[0]
                    self.skip(count * ((BPP if sub & 16 else 0) + 2))

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass
