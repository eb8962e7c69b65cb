"""A minimal WebSocket client (RFC 6455) for tests, standard library only:
enough to open the stream gateway with the "binary" subprotocol, send and
receive binary frames, and see an HTTP refusal before the upgrade."""

import base64
import os
import socket
import struct


class Refused(Exception):
    def __init__(self, status, body):
        super().__init__("HTTP %d: %s" % (status, body[:200]))
        self.status = status
        self.body = body


class WebSocket:
    def __init__(self, host, port, path, timeout=10, headers=""):
        self.sock = socket.create_connection((host, port), timeout=timeout)
        key = base64.b64encode(os.urandom(16)).decode()
        self.sock.sendall(("GET %s HTTP/1.1\r\nHost: %s:%d\r\nUpgrade: websocket\r\n"
                           "Connection: Upgrade\r\nSec-WebSocket-Key: %s\r\n"
                           "Sec-WebSocket-Version: 13\r\nSec-WebSocket-Protocol: binary\r\n"
                           "Origin: http://%s:%d\r\n%s\r\n"
                           % (path, host, port, key, host, port, headers)).encode())
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = self.sock.recv(4096)
            if not chunk:
                raise Refused(0, head.decode(errors="replace"))
            head += chunk
        head, self.buf = head.split(b"\r\n\r\n", 1)
        status = int(head.split(b" ", 2)[1])
        if status != 101:
            body = self.buf
            try:
                while True:
                    chunk = self.sock.recv(4096)
                    if not chunk:
                        break
                    body += chunk
            except OSError:
                pass
            self.sock.close()
            raise Refused(status, body.decode(errors="replace"))

    def send(self, data):
        mask = os.urandom(4)
        n = len(data)
        hdr = bytes([0x82])
        if n < 126:
            hdr += bytes([0x80 | n])
        elif n < 65536:
            hdr += bytes([0x80 | 126]) + struct.pack(">H", n)
        else:
            hdr += bytes([0x80 | 127]) + struct.pack(">Q", n)
        body = bytes(b ^ mask[i % 4] for i, b in enumerate(data))
        self.sock.sendall(hdr + mask + body)

    def _read(self, n):
        while len(self.buf) < n:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("the gateway closed the stream")
            self.buf += chunk
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def recv_frame(self):
        """The next data frame's payload; raises ConnectionError on close."""
        while True:
            b0, b1 = self._read(2)
            n = b1 & 0x7F
            if n == 126:
                n = struct.unpack(">H", self._read(2))[0]
            elif n == 127:
                n = struct.unpack(">Q", self._read(8))[0]
            payload = self._read(n)
            op = b0 & 0x0F
            if op == 8:
                if len(payload) >= 2:
                    self.close_code = struct.unpack(">H", payload[:2])[0]
                    self.close_reason = payload[2:].decode(errors="replace")
                raise ConnectionError("the gateway closed the stream")
            if op in (0, 1, 2):
                return payload

    def recv_exactly(self, n):
        """n bytes of the RFB stream, however they were framed."""
        out = b""
        while len(out) < n:
            if self.pending:
                take = self.pending[:n - len(out)]
                self.pending = self.pending[len(take):]
                out += take
            else:
                self.pending = self.recv_frame()
        return out

    pending = b""
    close_code = None  # the close frame's code, once one came
    close_reason = ""

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass
