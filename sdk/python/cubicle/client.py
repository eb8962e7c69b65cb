"""The HTTP side: one kept-alive connection per thread to cubicled's REST
API (docs/api.md), JSON in and out, files streamed both ways."""

import http.client
import json
import os
import socket
import threading
import urllib.parse

from . import errors

DEFAULT_URL = "http://127.0.0.1:8080"
CHUNK = 1 << 20


def _no_delay(cls):
    """cls with TCP_NODELAY: http.client writes the headers and the body
    separately, and Nagle would hold the body back for the headers' ACK."""

    class NoDelay(cls):
        def connect(self):
            super().connect()
            self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    return NoDelay


HTTP = _no_delay(http.client.HTTPConnection)
HTTPS = _no_delay(http.client.HTTPSConnection)


class Client:
    """A connection to cubicled. `url` defaults to $CUBICLE_URL (else
    http://127.0.0.1:8080) and `api_key` to $CUBICLE_API_KEY."""

    def __init__(self, url=None, api_key=None, timeout=600):
        self.url = (url or os.environ.get("CUBICLE_URL") or DEFAULT_URL).rstrip("/")
        self.api_key = api_key if api_key is not None else os.environ.get("CUBICLE_API_KEY")
        self.timeout = timeout
        u = urllib.parse.urlsplit(self.url)
        if u.scheme not in ("http", "https") or not u.hostname:
            raise ValueError("url: expected http(s)://HOST[:PORT], got %r" % self.url)
        self._https = u.scheme == "https"
        self._host, self._port = u.hostname, u.port
        self._prefix = u.path
        self._local = threading.local()

    def __repr__(self):
        return "Client(%r)" % self.url

    # ---- transport ------------------------------------------------------

    def _connection(self):
        conn = getattr(self._local, "conn", None)
        if conn is None:
            cls = HTTPS if self._https else HTTP
            conn = cls(self._host, self._port, timeout=self.timeout, blocksize=CHUNK)
            self._local.conn = conn
            self._local.used = False
        return conn

    def close(self):
        """Closes this thread's connection (the next call opens a new one)."""
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
            self._local.conn = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def _send(self, method, path, body, headers):
        """Sends a request and returns the response (not yet read). A kept-alive
        connection the server closed while idle is reopened once: the request
        never reached it."""
        for attempt in (0, 1):
            conn = self._connection()
            reused = self._local.used
            try:
                if hasattr(body, "seek") and attempt:
                    body.seek(self._local.body_start)
                if hasattr(body, "tell"):
                    self._local.body_start = body.tell()
                conn.request(method, self._prefix + path, body=body, headers=headers)
                resp = conn.getresponse()
                self._local.used = True
                return resp
            except (http.client.RemoteDisconnected, BrokenPipeError,
                    ConnectionResetError) as exc:
                self.close()
                if not reused or attempt:
                    raise errors.ConnectionFailed(
                        "unreachable", "cannot reach cubicled at %s: %s" % (self.url, exc))
            except OSError as exc:
                self.close()
                raise errors.ConnectionFailed(
                    "unreachable", "cannot reach cubicled at %s: %s" % (self.url, exc))

    def _headers(self, extra=None):
        h = {}
        if self.api_key:
            h["Authorization"] = "Bearer " + self.api_key
        h.update(extra or {})
        return h

    @staticmethod
    def _query(path, query):
        q = {k: v for k, v in (query or {}).items() if v is not None}
        return path + ("?" + urllib.parse.urlencode(q) if q else "")

    def _raise(self, resp, data):
        try:
            body = json.loads(data)
        except ValueError:
            body = None
        exc = errors.from_answer(resp.status, body, resp.getheader("x-request-id"))
        if isinstance(exc, errors.Timeout) and isinstance(body, dict) and "exit_code" in body:
            exc.result = body
        raise exc

    def raw(self, method, path, body=None, query=None, headers=None):
        """One request; returns (status, headers, bytes) and raises the typed
        error for a 4xx/5xx answer."""
        data = None if body is None else json.dumps(body).encode()
        hdrs = self._headers({"Content-Type": "application/json"} if data is not None else {})
        hdrs.update(headers or {})
        resp = self._send(method, self._query(path, query), data, hdrs)
        out = resp.read()
        if resp.status >= 400:
            self._raise(resp, out)
        return resp.status, resp.headers, out

    def request(self, method, path, body=None, query=None):
        """A JSON request; returns the parsed JSON answer."""
        _, _, out = self.raw(method, path, body, query)
        return json.loads(out) if out else None

    def download(self, path, query, sink):
        """GET into sink (a writable binary file), streamed; returns the byte count."""
        resp = self._send("GET", self._query(path, query), None, self._headers())
        if resp.status >= 400:
            self._raise(resp, resp.read())
        n = 0
        while True:
            chunk = resp.read(CHUNK)
            if not chunk:
                return n
            sink.write(chunk)
            n += len(chunk)

    def upload(self, path, query, source, length):
        """PUT `length` bytes of source (bytes or a readable binary file), streamed."""
        hdrs = self._headers({"Content-Type": "application/octet-stream",
                              "Content-Length": str(length)})
        resp = self._send("PUT", self._query(path, query), source, hdrs)
        out = resp.read()
        if resp.status >= 400:
            self._raise(resp, out)
        return json.loads(out) if out else None

    # ---- the API beyond one computer ------------------------------------

    def usage(self, workspace=None, from_=None, to=None):
        """Metered usage: {"computers": [...], "total": {...}} (docs/api.md)."""
        return self.request("GET", "/v1/usage",
                            query={"workspace": workspace, "from": from_, "to": to})

    def run(self, language, code, stdin=None):
        """Runs a snippet in a fresh sandbox (POST /v1/run, docs/code-runner.md):
        language "python" or "javascript" ("js" too); returns {"stdout",
        "stderr", "exit_code", "error"?: {"type", "message"}, "cpu_ms",
        "wall_ms", "memory_kb"}. A snippet that fails is not an exception
        here: look at "error"."""
        body = {"language": "javascript" if language == "js" else language, "code": code}
        if stdin is not None:
            body["stdin"] = stdin
        return self.request("POST", "/v1/run", body)

    def connect_token(self, kind=None, name=None, ttl_s=None, metadata=None, workspace=None):
        """A single-use token and the command that connects a machine you
        bring (docs/byo.md): {"id", "token", "expires_at", "kind", "command"}."""
        body = {"kind": kind, "name": name, "ttl_s": ttl_s, "metadata": metadata,
                "workspace": workspace}
        return self.request("POST", "/v1/connect-tokens",
                            {k: v for k, v in body.items() if v is not None})

    def healthz(self):
        return self.request("GET", "/healthz")

    @property
    def templates(self):
        """Templates: client.templates.create/get/list/delete/log/follow
        (templates.py)."""
        from .templates import Templates
        return Templates(self)


_default = None
_default_lock = threading.Lock()


def default_client():
    """The Client from $CUBICLE_URL and $CUBICLE_API_KEY, made on first use."""
    global _default
    with _default_lock:
        if _default is None:
            _default = Client()
        return _default
