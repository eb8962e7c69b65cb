"""A real desktop to test envd against, and a client for envd's HTTP API.

Desktop() starts Xvfb on a free display, a D-Bus session bus, the AT-SPI
accessibility bus and the xfwm4 window manager. Envd(desktop) starts the envd
binary from the build tree on a loopback port with a fresh token. Both are
torn down by stop(); Envd.stop() fails the test if envd did not exit cleanly
(a sanitizer report makes the exit code non-zero).

Only the Python standard library is used.
"""

import http.client
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import time

BUILD = os.environ.get("CUBICLE_BUILD") or os.path.join(
    os.path.dirname(__file__), "..", "..", "build")
BIN = os.path.join(BUILD, "bin")
TEST_BIN = os.path.join(BUILD, "tests")


def wait_until(fn, timeout=10.0, what="condition", interval=0.02):
    """Polls fn() until it returns a truthy value, which is returned."""
    deadline = time.monotonic() + timeout
    last_exc = None
    while time.monotonic() < deadline:
        try:
            v = fn()
            if v:
                return v
        except Exception as exc:  # noqa: BLE001 - reported on timeout
            last_exc = exc
        time.sleep(interval)
    raise AssertionError("timed out after %.1fs waiting for %s%s" % (
        timeout, what, (" (last error: %r)" % last_exc) if last_exc else ""))


class Desktop:
    """Xvfb + dbus + AT-SPI + xfwm4 on a free display."""

    def __init__(self, width=1280, height=800, wm=True, a11y=True):
        self.width, self.height = width, height
        self.wm, self.a11y = wm, a11y
        self.procs = []
        self.tmp = tempfile.mkdtemp(prefix="cubicle-desk-")
        self.env = None
        self.display = None
        # Every process of this desktop, however it was started (D-Bus
        # activation, double forks), inherits this marker; stop() kills by it.
        self.marker = "cubicle-test-" + secrets.token_hex(8)

    def start(self):
        r, w = os.pipe()
        xvfb = subprocess.Popen(
            ["env", "CUBICLE_TEST_DESKTOP=" + self.marker, "Xvfb", "-displayfd", str(w), "-screen", "0",
             "%dx%dx24" % (self.width, self.height), "-nolisten", "tcp",
             "-noreset", "+extension", "RANDR"],
            pass_fds=(w,), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        os.close(w)
        self.procs.append(xvfb)
        num = b""
        with os.fdopen(r, "rb") as f:
            num = f.readline().strip()
        if not num:
            raise RuntimeError("Xvfb did not start")
        self.display = ":" + num.decode()
        env = dict(os.environ)
        env["DISPLAY"] = self.display
        env["HOME"] = self.tmp
        env["XDG_RUNTIME_DIR"] = self.tmp
        env["XDG_CONFIG_HOME"] = os.path.join(self.tmp, "config")
        env["XDG_CACHE_HOME"] = os.path.join(self.tmp, "cache")
        env["LANG"] = "C.UTF-8"
        env["CUBICLE_TEST_DESKTOP"] = self.marker
        env["GNOME_ACCESSIBILITY"] = "1"
        env["NO_AT_BRIDGE"] = "0"
        env.pop("DBUS_SESSION_BUS_ADDRESS", None)
        env.pop("AT_SPI_BUS_ADDRESS", None)
        # Sanitizer settings are for envd, not for the apps of the desktop.
        for k in ("ASAN_OPTIONS", "UBSAN_OPTIONS", "LSAN_OPTIONS"):
            env.pop(k, None)
        out = subprocess.run(
            ["dbus-daemon", "--session", "--fork", "--print-address=1",
             "--print-pid=1"], env=env, check=True, capture_output=True,
            text=True).stdout.split()
        env["DBUS_SESSION_BUS_ADDRESS"] = out[0]
        self.dbus_pid = int(out[1])
        self.env = env
        if self.a11y:
            self.spawn(["/usr/libexec/at-spi-bus-launcher", "--launch-immediately"])
        if self.wm:
            self.spawn(["xfwm4", "--compositor=off"])
            wait_until(self._wm_ready, 15, "xfwm4 to manage the screen")
        return self

    def _wm_ready(self):
        out = self.run(["xprop", "-root", "_NET_SUPPORTING_WM_CHECK"]).stdout
        return "window id" in out

    def run(self, argv, **kw):
        """Runs a command on this desktop and returns CompletedProcess."""
        kw.setdefault("capture_output", True)
        kw.setdefault("text", True)
        kw.setdefault("timeout", 30)
        return subprocess.run(argv, env=self.env, **kw)

    def spawn(self, argv, **kw):
        """Starts a program on this desktop; it is killed by stop()."""
        kw.setdefault("stdout", subprocess.DEVNULL)
        kw.setdefault("stderr", subprocess.DEVNULL)
        p = subprocess.Popen(argv, env=self.env, start_new_session=True, **kw)
        self.procs.append(p)
        return p

    def stop(self):
        for p in reversed(self.procs):
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    p.kill()
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
        if getattr(self, "dbus_pid", None):
            try:
                os.kill(self.dbus_pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        kill_marked(self.marker)
        shutil.rmtree(self.tmp, ignore_errors=True)


def kill_marked(marker):
    """SIGKILLs every process whose environment holds CUBICLE_TEST_DESKTOP=marker."""
    needle = ("CUBICLE_TEST_DESKTOP=" + marker).encode()
    for _ in range(3):
        found = False
        for pid in os.listdir("/proc"):
            if not pid.isdigit() or int(pid) == os.getpid():
                continue
            try:
                with open("/proc/%s/environ" % pid, "rb") as f:
                    if needle not in f.read().split(b"\0"):
                        continue
                os.kill(int(pid), signal.SIGKILL)
                found = True
            except (OSError, ProcessLookupError):
                continue
        if not found:
            return
        time.sleep(0.05)


class Response:
    def __init__(self, status, headers, body):
        self.status = status
        self.headers = headers
        self.body = body

    @property
    def json(self):
        return json.loads(self.body)

    def __repr__(self):
        b = self.body[:300]
        return "<Response %d %r>" % (self.status, b)


class UnixConnection(http.client.HTTPConnection):
    """http.client over a UNIX socket (envd in a guest listens on one)."""

    def __init__(self, path, timeout=120):
        super().__init__("localhost", timeout=timeout)
        self.path = path

    def connect(self):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(self.timeout)
        s.connect(self.path)
        self.sock = s


def http_call(conn, method, path, body=None, bearer=None, headers=None):
    """One request on conn (then closed): dict/list bodies go as JSON,
    bearer (if any) as Authorization. Returns a Response."""
    h = {}
    if bearer:
        h["Authorization"] = "Bearer " + bearer
    if isinstance(body, (dict, list)):
        body = json.dumps(body).encode()
        h["Content-Type"] = "application/json"
    if headers:
        h.update(headers)
    try:
        conn.request(method, path, body=body, headers=h)
        r = conn.getresponse()
        return Response(r.status, {k.lower(): v for k, v in r.getheaders()}, r.read())
    finally:
        conn.close()


class Envd:
    """The envd binary on a loopback port, and a small client for it."""

    def __init__(self, desktop=None, args=(), env=None, listen="tcp:127.0.0.1:0"):
        self.desktop = desktop
        self.listen = listen
        self.args = list(args)
        self.extra_env = env or {}
        self.token = secrets.token_hex(16)
        self.proc = None
        self.port = None
        self.tmp = tempfile.mkdtemp(prefix="cubicle-envd-")

    def start(self):
        token_file = os.path.join(self.tmp, "token")
        with open(token_file, "w") as f:
            f.write(self.token + "\n")
        env = dict(self.desktop.env if self.desktop else os.environ)
        for k in ("ASAN_OPTIONS", "UBSAN_OPTIONS", "LSAN_OPTIONS"):
            if k in os.environ:
                env[k] = os.environ[k]
        if not self.desktop:
            env.pop("DISPLAY", None)
        env.update(self.extra_env)
        self.stderr_path = os.path.join(self.tmp, "stderr")
        self.stderr = open(self.stderr_path, "wb")
        self.proc = subprocess.Popen(
            [os.path.join(BIN, "envd"), "--listen", self.listen,
             "--token-file", token_file] + self.args,
            env=env, stdout=subprocess.PIPE, stderr=self.stderr)
        line = self.proc.stdout.readline().decode()
        if "listening on tcp:" not in line:
            self.proc.kill()
            raise RuntimeError("envd did not start: %r\n%s" % (line, self.log()))
        self.port = int(line.rsplit(":", 1)[1])
        return self

    def log(self):
        try:
            with open(self.stderr_path, "rb") as f:
                return f.read().decode(errors="replace")
        except OSError:
            return ""

    def stop(self):
        """Stops envd with SIGTERM and returns its exit code (0 = clean)."""
        if not self.proc:
            return 0
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                raise AssertionError("envd did not exit on SIGTERM\n" + self.log())
        self.stderr.close()
        self.proc.stdout.close()
        code = self.proc.returncode
        log = self.log()
        shutil.rmtree(self.tmp, ignore_errors=True)
        if code != 0 or "Sanitizer" in log or "runtime error" in log:
            raise AssertionError("envd exited with %s\n%s" % (code, log[-6000:]))
        return code

    def request(self, method, path, body=None, headers=None, token=True,
                timeout=120):
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        return http_call(conn, method, path, body, self.token if token is True else token,
                         headers)

    def action(self, name, params=None, **kw):
        """POST /v1/actions/<name>; returns Response."""
        return self.request("POST", "/v1/actions/" + name,
                            body=params if params is not None else {}, **kw)

    def ok(self, name, params=None, **kw):
        """Runs an action that must succeed and returns its JSON answer."""
        r = self.action(name, params, **kw)
        if r.status != 200:
            raise AssertionError("%s(%r) -> %d %s" % (
                name, params, r.status, r.body[:500]))
        if r.headers.get("content-type", "").startswith("application/json"):
            return r.json
        return r


def start_desktop_and_envd(vnc=False, **desktop_kw):
    """Starts a Desktop and an Envd on it; on failure leaves nothing running.
    With vnc, envd also serves RFB on desk.vnc_sock (a unix socket)."""
    desk = Desktop(**desktop_kw)
    try:
        desk.start()
        args = []
        if vnc:
            desk.vnc_sock = os.path.join(desk.tmp, "vnc.sock")
            args = ["--vnc", "unix:" + desk.vnc_sock]
        envd = Envd(desk, args=args).start()
    except BaseException:
        desk.stop()
        raise
    return desk, envd


def stop_desktop_and_envd(desk, envd):
    """Stops what start_desktop_and_envd started (either may be None)."""
    try:
        if envd:
            envd.stop()
    finally:
        if desk:
            desk.stop()
