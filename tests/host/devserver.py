"""A Vite-like dev server for the preview tests, standard library only: it
runs inside a computer (the sandbox image has python3, not node).

    python3 devserver.py PORT APP_DIR

- GET /            APP_DIR/index.html, which loads /assets/app.js by an
                   absolute path (as bundlers' output does)
- GET /assets/...  files under APP_DIR/assets
- GET /echo        JSON: the request's method, target and headers, as the
                   server received them
- GET /big?n=N     N bytes of 'x'
- GET /close       closes the connection without answering
- WebSocket /__hmr (any subprotocol offered, the first echoed, as Vite's
                   "vite-hmr"): every change of APP_DIR/message.txt is sent
                   as a text message {"type":"update","text":...}
- WebSocket /echo  echoes every message (the round-trip benchmark)

One thread per connection; nothing here is meant to be fast or complete,
only real: real HTTP/1.1 keep-alive and real RFC 6455 frames.
"""

import base64
import hashlib
import http.server
import json
import os
import socket
import socketserver
import struct
import sys
import threading
import time

PORT = int(sys.argv[1])
APP = sys.argv[2]
HMR = []  # open /__hmr sockets
HMR_LOCK = threading.Lock()


def ws_send(sock, data, op=1):
    n = len(data)
    if n < 126:
        head = struct.pack("!BB", 0x80 | op, n)
    elif n < 65536:
        head = struct.pack("!BBH", 0x80 | op, 126, n)
    else:
        head = struct.pack("!BBQ", 0x80 | op, 127, n)
    sock.sendall(head + data)


def ws_recv(rfile):
    """(opcode, payload) of the next frame a client sent (masked), or None."""
    h = rfile.read(2)
    if len(h) < 2:
        return None
    op, n = h[0] & 0x0F, h[1] & 0x7F
    if n == 126:
        n = struct.unpack("!H", rfile.read(2))[0]
    elif n == 127:
        n = struct.unpack("!Q", rfile.read(8))[0]
    mask = rfile.read(4)
    data = bytearray(rfile.read(n))
    for i in range(len(data)):
        data[i] ^= mask[i % 4]
    return op, bytes(data)


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def setup(self):
        super().setup()
        # Headers and body go in two writes: without this, Nagle holds the
        # body until the client's delayed ACK (40 ms a request).
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def log_message(self, fmt, *args):
        pass

    def send(self, status, body, ctype="text/plain"):
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def upgrade(self):
        key = self.headers.get("Sec-WebSocket-Key", "")
        accept = base64.b64encode(hashlib.sha1(
            (key + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11").encode()).digest()).decode()
        self.send_response(101)
        self.send_header("Upgrade", "websocket")
        self.send_header("Connection", "Upgrade")
        self.send_header("Sec-WebSocket-Accept", accept)
        proto = self.headers.get("Sec-WebSocket-Protocol")
        if proto:
            self.send_header("Sec-WebSocket-Protocol", proto.split(",")[0].strip())
        self.end_headers()
        self.wfile.flush()
        self.close_connection = True

    def do_GET(self):
        path = self.path.split("?")[0]
        if self.headers.get("Upgrade", "").lower() == "websocket":
            self.upgrade()
            if path == "/__hmr":
                with HMR_LOCK:
                    HMR.append(self.connection)
                while ws_recv(self.rfile) not in (None,):
                    pass
                with HMR_LOCK:
                    if self.connection in HMR:
                        HMR.remove(self.connection)
            else:  # /echo
                while True:
                    f = ws_recv(self.rfile)
                    if f is None or f[0] == 8:
                        break
                    ws_send(self.connection, f[1], f[0] if f[0] in (1, 2) else 1)
            return
        if path == "/echo":
            self.send(200, json.dumps({"method": self.command, "target": self.path,
                                       "headers": [[k, v] for k, v in self.headers.items()]}
                                      ).encode(), "application/json")
        elif path == "/big":
            n = int(self.path.split("n=")[1]) if "n=" in self.path else 1 << 20
            self.send(200, b"x" * n)
        elif path == "/close":
            self.close_connection = True
            self.connection.close()
        else:
            rel = "index.html" if path == "/" else path.lstrip("/")
            full = os.path.realpath(os.path.join(APP, rel))
            if not full.startswith(os.path.realpath(APP)) or not os.path.isfile(full):
                self.send(404, b"not found")
                return
            with open(full, "rb") as f:
                body = f.read()
            ctype = ("text/html" if full.endswith(".html") else
                     "text/javascript" if full.endswith(".js") else "text/plain")
            self.send(200, body, ctype + "; charset=utf-8")

    do_HEAD = do_GET

    def do_POST(self):
        n = int(self.headers.get("Content-Length", "0"))
        body = self.rfile.read(n)
        self.send(200, json.dumps({"target": self.path, "got": len(body),
                                   "sha1": hashlib.sha1(body).hexdigest()}).encode(),
                  "application/json")


def watch():
    """Sends message.txt to every /__hmr client whenever it changes."""
    path = os.path.join(APP, "message.txt")
    last = None
    while True:
        try:
            st = os.stat(path)
            now = (st.st_mtime_ns, st.st_size)
        except OSError:
            now = None
        if now != last and now is not None:
            last = now
            with open(path) as f:
                msg = json.dumps({"type": "update", "text": f.read().strip()}).encode()
            with HMR_LOCK:
                for s in list(HMR):
                    try:
                        ws_send(s, msg)
                    except OSError:
                        HMR.remove(s)
        time.sleep(0.05)


class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True


threading.Thread(target=watch, daemon=True).start()
Server(("0.0.0.0", PORT), Handler).serve_forever()
