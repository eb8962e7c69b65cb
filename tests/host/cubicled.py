"""Runs the built cubicled on a free loopback port with a fresh state
directory, and a small client for its REST API (stdlib only)."""

import http.client
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "envd"))
import harness  # noqa: E402
from harness import Response, http_call, wait_until  # noqa: E402,F401


# The guest images: the normal build's (make images), also for a sanitizer
# build's cubicled (CUBICLE_IMAGES), whose own build has none.
IMAGES = os.environ.get("CUBICLE_IMAGES") or os.path.join(harness.BUILD, "images")


def unmount_sessions(state):
    """Detaches the session disks a cubicled that did not stop cleanly
    (kill -9) left mounted under state/sessions, so the state can go."""
    sessions = os.path.join(state, "sessions")
    try:
        names = os.listdir(sessions)
    except OSError:
        return
    for name in names:
        path = os.path.join(sessions, name)
        if os.path.ismount(path):
            subprocess.run(["umount", "-l", path], check=False)


class Cubicled:
    def __init__(self, args=(), state_dir=None):
        self.args = list(args)
        self.admin = "ck_admin_" + secrets.token_hex(16)
        self.own_state = state_dir is None
        self.state = state_dir or tempfile.mkdtemp(prefix="cubicle-state-")
        self.proc = None
        self.port = None

    def start(self, port=0):
        env = dict(os.environ)
        env["CUBICLE_ADMIN_KEY"] = self.admin
        self.log_path = os.path.join(self.state, "cubicled.log")
        self.log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            [os.path.join(harness.BIN, "cubicled"), "--listen", "127.0.0.1:%d" % port,
             "--state-dir", self.state, "--images", IMAGES]
            + self.args, stdout=subprocess.PIPE, stderr=self.log, env=env)
        line = self.proc.stdout.readline().decode()
        if "listening on" not in line:
            self.proc.kill()
            raise RuntimeError("cubicled did not start: %r\n%s" % (line, self.read_log()))
        self.port = int(line.split("listening on ")[1].split()[0].rsplit(":", 1)[1])
        # Previews and CDP are relayed from a listener of their own.
        m = re.search(r"previews tcp:([^:]+):(\d+)", line)
        self.preview_host = m.group(1) if m else None
        self.preview_port = int(m.group(2)) if m else None
        return self

    def read_log(self):
        with open(self.log_path, "rb") as f:
            return f.read().decode(errors="replace")[-8000:]

    def kill9(self):
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()
        self.proc.stdout.close()
        self.log.close()

    def restart(self):
        """A new cubicled on the same state directory and ports (the API's
        and the preview listener's: port + 1 may be anyone's by now)."""
        if self.preview_port and "--preview-listen" not in self.args:
            self.args += ["--preview-listen", "%s:%d" % (self.preview_host, self.preview_port)]
        return self.start(self.port)

    def stop(self, clean=True):
        """Deletes every computer (so nothing leaks), then stops cubicled."""
        if self.proc and self.proc.poll() is None:
            if clean:
                for c in self.req("GET", "/v1/computers").json.get("computers", []):
                    self.req("DELETE", "/v1/computers/" + c["id"])
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
            self.proc.stdout.close()
            self.log.close()
        if self.own_state:
            unmount_sessions(self.state)
            shutil.rmtree(self.state, ignore_errors=True)

    def req(self, method, path, body=None, key=True, headers=None, timeout=180):
        # CUBICLE_TEST_ISOLATION=vm runs a test's computers as microVMs
        # (those that do not name an isolation).
        iso = os.environ.get("CUBICLE_TEST_ISOLATION")
        if iso and method == "POST" and path.split("?")[0] == "/v1/computers" and \
                isinstance(body, dict) and "isolation" not in body:
            body = dict(body, isolation=iso)
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        return http_call(conn, method, path, body, self.admin if key is True else key,
                         headers)

    def preview_get(self, url_or_host, target="/", headers=None, method="GET", body=None,
                    timeout=30):
        """A request to the preview listener as a browser would send it:
        url_or_host is a preview URL (http://3000-c-….localhost:PORT/…) or a
        Host header. Returns Response (its headers' names lower-case)."""
        host = url_or_host
        if "://" in url_or_host:
            rest = url_or_host.split("://", 1)[1]
            host, _, path = rest.partition("/")
            target = "/" + path
        conn = http.client.HTTPConnection(self.preview_host, self.preview_port, timeout=timeout)
        hdrs = {"Host": host}
        hdrs.update(headers or {})
        return http_call(conn, method, target, body, None, hdrs)

    def ok(self, method, path, body=None, key=True, status=200, **kw):
        r = self.req(method, path, body, key, **kw)
        if r.status != status:
            raise AssertionError("%s %s -> %d %s" % (method, path, r.status, r.body[:600]))
        return r.json if r.headers.get("content-type", "").startswith("application/json") else r

    def workspace(self, name="ws", **kw):
        """Creates a workspace and a key for it: (workspace id, key)."""
        body = {"name": name}
        body.update(kw)
        ws = self.ok("POST", "/v1/workspaces", body, status=201)["id"]
        key = self.ok("POST", "/v1/workspaces/%s/keys" % ws, status=201)["key"]
        return ws, key

    def computer(self, key, timeout_s=120, **params):
        """Creates a computer and waits until it runs; returns its JSON."""
        return self.ok("POST", "/v1/computers?wait=running&timeout_s=%d" % timeout_s,
                       params, key=key, status=201)

    def act(self, cid, action, params=None, key=True, status=200):
        return self.ok("POST", "/v1/computers/%s/actions/%s" % (cid, action), params or {},
                       key=key, status=status)
