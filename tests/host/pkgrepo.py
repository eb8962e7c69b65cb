"""A tiny package index and npm registry for guests (test_packages), in a
network namespace of the test's own behind a veth pair on a TEST-NET-2 /30
(198.51.100.0/24, which the default egress policy lets guests reach): no
traffic goes anywhere else, and no public index is needed.

It serves, over plain HTTP:
  /simple/                      a PEP 503 index with one project,
  /simple/cubicle-pkgs-demo/    whose wheel is built here (pure Python),
  /files/<wheel>
  /npm/cubicle-demo             an npm packument, and
  /npm/cubicle-demo/-/cubicle-demo-1.0.0.tgz   its tarball, built here (a
                                package with a "bin")
and logs every request path on its stdout, so a test sees what a guest
fetched.
"""

import base64
import hashlib
import io
import json
import os
import random
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile

WHEEL_PROJECT = "cubicle-pkgs-demo"
WHEEL_VALUE = "from the test's own index"
NPM_NAME = "cubicle-demo"
NPM_OUTPUT = "cubicle-demo says hello"

SERVER = r"""
import http.server, os, sys
root = sys.argv[1]
class H(http.server.BaseHTTPRequestHandler):
    def log_message(self, *a):
        pass
    def do_GET(self):
        print(self.path, flush=True)
        rel = self.path.split("?")[0].lstrip("/")
        if rel.endswith("/") or rel == "":
            rel += "index.html"
        path = os.path.realpath(os.path.join(root, rel))
        if os.path.isdir(path):
            path = os.path.join(path, "index.html")
        if not path.startswith(root + "/") or not os.path.isfile(path):
            self.send_error(404)
            return
        with open(path, "rb") as f:
            data = f.read()
        self.send_response(200)
        ctype = ("application/json" if rel.startswith("npm/") and not rel.endswith(".tgz")
                 else "text/html" if rel.endswith(".html") else "application/octet-stream")
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
s = http.server.ThreadingHTTPServer(("0.0.0.0", 0), H)
print(s.server_address[1], flush=True)
s.serve_forever()
"""


def run(*argv):
    p = subprocess.run(argv, capture_output=True, text=True)
    if p.returncode:
        raise RuntimeError("%s: %s" % (" ".join(argv), p.stderr.strip()))
    return p.stdout


def _wheel(path):
    """A pure-Python wheel: cubicle_pkgs_demo with VALUE."""
    files = {
        "cubicle_pkgs_demo/__init__.py": "VALUE = %r\n" % WHEEL_VALUE,
        "cubicle_pkgs_demo-1.0.dist-info/METADATA":
            "Metadata-Version: 2.1\nName: %s\nVersion: 1.0\n" % WHEEL_PROJECT,
        "cubicle_pkgs_demo-1.0.dist-info/WHEEL":
            "Wheel-Version: 1.0\nGenerator: cubicle-test\nRoot-Is-Purelib: true\n"
            "Tag: py3-none-any\n",
    }
    record = []
    with zipfile.ZipFile(path, "w") as z:
        for name, text in files.items():
            data = text.encode()
            z.writestr(name, data)
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
            record.append("%s,sha256=%s,%d" % (name, digest.decode(), len(data)))
        record.append("cubicle_pkgs_demo-1.0.dist-info/RECORD,,")
        z.writestr("cubicle_pkgs_demo-1.0.dist-info/RECORD", "\n".join(record) + "\n")


def _npm_tarball(path):
    pkg = {"name": NPM_NAME, "version": "1.0.0", "bin": {NPM_NAME: "cli.js"},
           "license": "GPL-2.0-or-later"}
    cli = "#!/usr/bin/env node\nconsole.log(%s);\n" % json.dumps(NPM_OUTPUT)
    with tarfile.open(path, "w:gz") as t:
        for name, text, mode in (("package/package.json", json.dumps(pkg), 0o644),
                                 ("package/cli.js", cli, 0o755)):
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mode = mode
            t.addfile(info, io.BytesIO(data))


class Repo:
    """The namespace, its veth pair and the server; make() then url(...)."""

    def __init__(self, owner="pkgs"):
        """owner: the branch's name in what the repository makes on the host
        (its namespace, veth and directory), at most 4 letters."""
        tag = "%06x" % random.getrandbits(24)
        self.owner = owner
        self.ns = "cb" + owner + tag
        self.veth = owner + tag
        self.dir = tempfile.mkdtemp(prefix="cubicle-%s-repo-" % owner)
        self.server = None
        self.made = False
        self.addr = None

    def _free_slash30(self):
        used = run("ip", "-4", "-o", "addr", "show") + run("ip", "-4", "route", "show")
        for _ in range(100):
            k = random.randrange(1, 63)
            if not any(re.search(r"(^|\s)198\.51\.100\.%d(/|\s)" % (4 * k + d), used, re.M)
                       for d in (1, 2)):
                return k
        raise RuntimeError("no free /30 of 198.51.100.0/24 for the test's repository")

    def make(self, tries=3):
        """Makes it, again under new names when the kernel refuses the fresh
        namespace (seen on this machine while other suites' namespaces go:
        "setting the network namespace ... failed: Invalid argument")."""
        for attempt in range(tries):
            try:
                return self._make()
            except RuntimeError:
                self._unmake()
                if attempt == tries - 1:
                    raise
                tag = "%06x" % random.getrandbits(24)
                self.ns, self.veth = "cb" + self.owner + tag, self.owner + tag

    def _unmake(self):
        if self.server:
            self.server.kill()
            self.server.wait()
            self.server.stdout.close()
            self.server = None
        if self.made:
            subprocess.run(["ip", "netns", "del", self.ns], capture_output=True)
            self.made = False

    def _make(self):
        k = self._free_slash30()
        host_end, self.addr = "198.51.100.%d" % (4 * k + 1), "198.51.100.%d" % (4 * k + 2)
        run("ip", "netns", "add", self.ns)
        self.made = True
        run("ip", "link", "add", self.veth, "type", "veth", "peer", "name", "eth0", "netns",
            self.ns)
        run("ip", "addr", "add", host_end + "/30", "dev", self.veth)
        run("ip", "link", "set", self.veth, "up")
        run("ip", "-n", self.ns, "addr", "add", self.addr + "/30", "dev", "eth0")
        run("ip", "-n", self.ns, "link", "set", "eth0", "up")
        run("ip", "-n", self.ns, "link", "set", "lo", "up")
        self.server = subprocess.Popen(
            ["ip", "netns", "exec", self.ns, sys.executable, "-c", SERVER, self.dir],
            stdout=subprocess.PIPE)
        # The port line, read byte by byte: requests() reads the pipe raw.
        line = b""
        while not line.endswith(b"\n"):
            b = os.read(self.server.stdout.fileno(), 1)
            if not b:
                raise RuntimeError("the repository's server did not start")
            line += b
        self.port = int(line)
        self._pending, self._seen = b"", []
        self.base = "http://%s:%d" % (self.addr, self.port)
        self._fill()
        return self

    def _fill(self):
        for name in os.listdir(self.dir):  # a retry's second fill
            shutil.rmtree(os.path.join(self.dir, name))
        os.makedirs(os.path.join(self.dir, "simple", WHEEL_PROJECT))
        os.makedirs(os.path.join(self.dir, "files"))
        os.makedirs(os.path.join(self.dir, "npm", NPM_NAME, "-"))
        wheel = "cubicle_pkgs_demo-1.0-py3-none-any.whl"
        _wheel(os.path.join(self.dir, "files", wheel))
        with open(os.path.join(self.dir, "files", wheel), "rb") as f:
            digest = hashlib.sha256(f.read()).hexdigest()
        with open(os.path.join(self.dir, "simple", "index.html"), "w") as f:
            f.write('<html><body><a href="%s/">%s</a></body></html>\n'
                    % (WHEEL_PROJECT, WHEEL_PROJECT))
        with open(os.path.join(self.dir, "simple", WHEEL_PROJECT, "index.html"), "w") as f:
            f.write('<html><body><a href="../../files/%s#sha256=%s">%s</a></body></html>\n'
                    % (wheel, digest, wheel))
        tgz = os.path.join(self.dir, "npm", NPM_NAME, "-", "%s-1.0.0.tgz" % NPM_NAME)
        _npm_tarball(tgz)
        with open(tgz, "rb") as f:
            data = f.read()
        packument = {
            "name": NPM_NAME, "dist-tags": {"latest": "1.0.0"},
            "versions": {"1.0.0": {
                "name": NPM_NAME, "version": "1.0.0", "bin": {NPM_NAME: "cli.js"},
                "dist": {"tarball": "%s/npm/%s/-/%s-1.0.0.tgz" % (self.base, NPM_NAME, NPM_NAME),
                         "shasum": hashlib.sha1(data).hexdigest(),
                         "integrity": "sha512-" + base64.b64encode(
                             hashlib.sha512(data).digest()).decode()}}}}
        # The packument is "npm/cubicle-demo", also the directory of its
        # tarballs: it lives at npm/cubicle-demo/index.html, which the server
        # answers for the directory's path.
        with open(os.path.join(self.dir, "npm", NPM_NAME, "index.html"), "w") as f:
            json.dump(packument, f)

    def pip_index(self):
        return self.base + "/simple"

    def npm_registry(self):
        return self.base + "/npm/"

    def requests(self):
        """The paths fetched so far (what the server printed, read from its
        pipe as it is: no buffered reader between select and the bytes)."""
        import select
        fd = self.server.stdout.fileno()
        while select.select([fd], [], [], 0)[0]:
            chunk = os.read(fd, 65536)
            if not chunk:
                break
            self._pending += chunk
        *lines, self._pending = self._pending.split(b"\n")
        self._seen += [line.decode() for line in lines]
        return list(self._seen)

    def close(self):
        self._unmake()
        shutil.rmtree(self.dir, ignore_errors=True)
