"""Sandboxes that do real work (issue 13): package installs without root,
the operator's CA certificates, and the sizes a guest sees, end to end
through the real cubicled with real guests.

- apt: `apt-get install -y jq` typed as the user (uid 1000) installs from
  the image's Debian sources (the mirror, plain HTTP) through envd's
  package helper; the install_packages action does apt, pip and npm in one
  call; the helper's log. pip and npm come from a package index and an npm
  registry this test serves itself (pkgrepo.py: its own network namespace
  on TEST-NET-2, which the default egress policy lets guests reach),
  through `cubicled --pip-index-url` and `--npm-registry`.
- CA: `cubicled --guest-ca-certs DIR` with a CA made here: the guest's
  bundle holds it, and Python's ssl, OpenSSL, curl and Node accept a
  chain it signed, from a TLS server the test runs inside the guest itself
  (on the guest's loopback: the egress policy keeps the host out of
  reach); with the system bundle taken away, Python refuses it.
- attacks on the helper: shell words in names, a local .deb with a
  postinst, apt's -o/-c, dpkg's --force-*, download/source, APT_CONFIG in
  the environment, hand-made requests on the socket; the user stays uid
  1000 and nothing the attacks planted runs as root.
- sizes: nproc, os.cpu_count, /proc/meminfo (live), /proc/cpuinfo,
  /proc/stat, /proc/uptime and df for xs and md containers.

The microVM side (its own sizes, the start's setup, the helper) is checked
on test_microvm's VM, which boots anyway (a TCG boot is 10-50 s).
"""

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import unittest

from cubicled import Cubicled
import pkgrepo

srv = key = repo = None
CA = {}


def openssl(*args):
    subprocess.run(["openssl"] + list(args), check=True, capture_output=True)


def make_ca(d):
    """A test CA and a leaf it signed (guest.test and 127.0.0.1), in d; the
    operator's directory holds only the CA (and a file that is not .crt)."""
    ca_dir = os.path.join(d, "operator")
    os.makedirs(ca_dir)
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"]
    openssl("req", "-x509", *ec, "-keyout", d + "/ca.key", "-out", ca_dir + "/pkgs-test-ca.crt",
            "-days", "2", "-subj", "/CN=cubicle pkgs test CA", "-addext",
            "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign")
    openssl("req", *ec, "-keyout", d + "/leaf.key", "-out", d + "/leaf.csr", "-subj",
            "/CN=guest.test")
    with open(d + "/ext", "w") as f:
        f.write("subjectAltName=DNS:guest.test,IP:127.0.0.1\n")
    openssl("x509", "-req", "-in", d + "/leaf.csr", "-CA", ca_dir + "/pkgs-test-ca.crt",
            "-CAkey", d + "/ca.key", "-CAcreateserial", "-out", d + "/leaf.crt", "-days", "2",
            "-extfile", d + "/ext")
    with open(ca_dir + "/README.txt", "w") as f:
        f.write("not a certificate: only *.crt files are read\n")
    for name, path in (("ca", ca_dir + "/pkgs-test-ca.crt"), ("leaf", d + "/leaf.crt"),
                       ("leaf_key", d + "/leaf.key")):
        with open(path) as f:
            CA[name] = f.read()
    CA["dir"] = ca_dir


def setUpModule():
    global srv, key, repo
    repo = pkgrepo.Repo()
    CA["tmp"] = tempfile.mkdtemp(prefix="cubicle-pkgs-ca-")
    try:
        repo.make()
        make_ca(CA["tmp"])
        srv = Cubicled(["--guest-ca-certs", CA["dir"], "--pip-index-url", repo.pip_index(),
                        "--npm-registry", repo.npm_registry()]).start()
    except BaseException:
        repo.close()
        shutil.rmtree(CA["tmp"], ignore_errors=True)
        raise
    _, key = srv.workspace("pkgs")


def tearDownModule():
    if srv:
        srv.stop()
    repo.close()
    shutil.rmtree(CA["tmp"], ignore_errors=True)


def bash(cid, cmd, timeout_s=300):
    return srv.act(cid, "bash", {"command": cmd, "timeout_s": timeout_s}, key=key)


def body_of(pem):
    """A PEM certificate's base64 body, on one line."""
    return "".join(line for line in pem.strip().splitlines() if not line.startswith("-----"))


# In the guest, as the user: a TLS server on the guest's loopback with the
# leaf the test CA signed, and clients that trust only the system store.
TLS_CHECK = r"""
import json, os, socket, ssl, subprocess, threading
srv_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
srv_ctx.load_cert_chain("/home/user/tls/leaf.crt", "/home/user/tls/leaf.key")
ls = socket.socket()
ls.bind(("127.0.0.1", 0))
ls.listen(16)
port = ls.getsockname()[1]
def serve():
    while True:
        c, _ = ls.accept()
        try:
            with srv_ctx.wrap_socket(c, server_side=True) as t:
                t.recv(1024)
                t.sendall(b"HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok")
        except OSError:
            pass
threading.Thread(target=serve, daemon=True).start()
res = {}
def python_client():
    ctx = ssl.create_default_context()
    with socket.create_connection(("127.0.0.1", port)) as s:
        with ctx.wrap_socket(s, server_hostname="guest.test") as t:
            t.sendall(b"GET / HTTP/1.0\r\n\r\n")
            return t.recv(100).endswith(b"ok")
res["python"] = python_client()
def run(cmd, env=None):
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=60)
    return p.returncode == 0, (p.stdout + p.stderr)[-300:]
res["openssl_verify"] = run(["openssl", "verify", "/home/user/tls/leaf.crt"])
res["curl"] = run(["curl", "-sS", "--resolve", "guest.test:%d:127.0.0.1" % port,
                   "https://guest.test:%d/" % port])
res["node"] = run(["node", "-e",
    "require('https').get({host:'127.0.0.1',port:%d,servername:'guest.test',path:'/'},"
    "r=>{r.on('data',d=>process.stdout.write(d))}).on('error',e=>{console.error(e.message);"
    "process.exit(1)})" % port])
# Without the system bundle the same Python client refuses the chain: the
# trust comes from the operator's CA in the guest's store, nothing else.
env = dict(os.environ, SSL_CERT_FILE="/dev/null", SSL_CERT_DIR="/nonexistent")
res["python_without_bundle"] = run(["python3", "-c",
    "import socket, ssl; s = socket.create_connection(('127.0.0.1', %d)); "
    "ssl.create_default_context().wrap_socket(s, server_hostname='guest.test')" % port], env)
print(json.dumps(res))
"""


class ContainerSandbox(unittest.TestCase):
    """One sm container sandbox for the installs, the CA and the attacks."""

    @classmethod
    def setUpClass(cls):
        cls.cid = srv.computer(key, kind="sandbox", size="sm", isolation="container")["id"]

    def test_1_trust(self):
        cid = self.cid
        env = bash(cid, "echo $SSL_CERT_FILE $REQUESTS_CA_BUNDLE $PIP_CERT; "
                   "echo $NODE_EXTRA_CA_CERTS")["stdout"].split("\n")
        self.assertEqual(env[0].split(), ["/etc/ssl/certs/ca-certificates.crt"] * 3)
        self.assertEqual(env[1], "/etc/ssl/cubicle-operator.pem")
        bundle = srv.act(cid, "read_file", {"path": "/etc/ssl/certs/ca-certificates.crt"},
                         key=key)["content"]
        flat = bundle.replace("\n", "")
        self.assertIn(body_of(CA["ca"]), flat)
        self.assertIn("cubicled --guest-ca-certs", bundle)
        self.assertLess(flat.index("-----BEGIN CERTIFICATE-----"), flat.index(body_of(CA["ca"])),
                        "Debian's certificates come first")
        alone = srv.act(cid, "read_file", {"path": "/etc/ssl/cubicle-operator.pem"},
                        key=key)["content"]
        self.assertEqual(body_of(alone), body_of(CA["ca"]))  # the .txt was not read
        for name, text in (("leaf.crt", CA["leaf"]), ("leaf.key", CA["leaf_key"])):
            srv.act(cid, "write_file", {"path": "/home/user/tls/" + name, "content": text,
                                         "mode": "0600"}, key=key)
        out = srv.act(cid, "python", {"code": TLS_CHECK, "timeout_s": 120}, key=key)
        res = json.loads(out["stdout"])
        self.assertTrue(res["python"], out)
        for tool in ("openssl_verify", "curl", "node"):
            self.assertTrue(res[tool][0], (tool, res[tool]))
        self.assertIn("ok", res["curl"][1])
        self.assertFalse(res["python_without_bundle"][0], res)
        self.assertIn("CERTIFICATE_VERIFY_FAILED", res["python_without_bundle"][1])

    def test_2_apt_as_user(self):
        cid = self.cid
        t = time.monotonic()
        out = bash(cid, "apt-get install -y jq; echo rc=$?; jq --version; id -u")
        print("\napt-get install -y jq (lists updated first) as the user: %.1f s"
              % (time.monotonic() - t), file=sys.stderr)
        self.assertIn("rc=0", out["stdout"], out)
        self.assertIn("no package lists in this computer yet", out["stderr"])
        lines = out["stdout"].split("\n")
        self.assertTrue(lines[-3].startswith("jq-1."), out["stdout"])
        self.assertEqual(lines[-2], "1000")
        # Read-only commands are the user's own apt.
        out = bash(cid, "apt-cache policy jq | head -3; apt-get -s install curl | tail -1; "
                   "apt-get install -s curl >/dev/null; echo rc=$?; "
                   "cd /tmp && apt-get download jq && stat -c %U jq_*.deb")
        self.assertIn("Installed: 1.", out["stdout"])
        self.assertIn("rc=0", out["stdout"])
        self.assertEqual(out["stdout"].split()[-1], "user", out)  # downloaded as the user
        # Logged: in the guest (root's file, readable) and on the host.
        log = srv.act(cid, "read_file", {"path": "/var/log/cubicle/packages.log"},
                      key=key)["content"]
        entries = [json.loads(line) for line in log.splitlines()]
        jq = [x for x in entries if x["tool"] == "apt-get" and "jq" in x["args"]]
        self.assertTrue(jq, entries)
        self.assertEqual((jq[0]["via"], jq[0]["uid"], jq[0]["exit_code"]), ("apt-get", 1000, 0))
        self.assertGreater(jq[0]["pid"], 1)
        self.assertEqual(bash(cid, "stat -c '%U %a' /var/log/cubicle/packages.log")["stdout"],
                         "root 644\n")
        with open(os.path.join(srv.state, "computers", cid, "console.log")) as f:
            self.assertRegex(f.read(), r"envd: packages: apt-get \(uid 1000, pid \d+, via "
                                       r"apt-get\): .*install -- jq: exit 0")

    def test_3_install_packages(self):
        cid = self.cid
        t = time.monotonic()
        r = srv.act(cid, "install_packages", {"apt": ["jq"], "pip": [pkgrepo.WHEEL_PROJECT],
                                              "npm": [pkgrepo.NPM_NAME]}, key=key)
        print("\ninstall_packages apt+pip+npm: %.1f s" % (time.monotonic() - t), file=sys.stderr)
        self.assertTrue(r["ok"])
        for tool in ("apt", "pip", "npm"):
            self.assertEqual(r[tool]["exit_code"], 0, r[tool])
        self.assertEqual(r["pip"]["packages"], [pkgrepo.WHEEL_PROJECT])
        fetched = repo.requests()
        self.assertIn("/simple/%s/" % pkgrepo.WHEEL_PROJECT, fetched)
        self.assertIn("/npm/%s" % pkgrepo.NPM_NAME, fetched)
        out = bash(cid, "python3 -c 'import cubicle_pkgs_demo as m; print(m.VALUE); "
                   "print(m.__file__)'; command -v %s; %s" % ((pkgrepo.NPM_NAME,) * 2))
        lines = out["stdout"].split("\n")
        self.assertEqual(lines[0], pkgrepo.WHEEL_VALUE, out)
        self.assertTrue(lines[1].startswith("/home/user/.venv/lib/"), lines)
        self.assertEqual(lines[2], "/home/user/.npm-global/bin/" + pkgrepo.NPM_NAME)
        self.assertEqual(lines[3], pkgrepo.NPM_OUTPUT)

        # Bad lists: 400 naming the list, before anything runs.
        for body, param in (({}, "apt"), ({"apt": ["jq;id"]}, "apt"),
                            ({"apt": ["./evil.deb"]}, "apt"), ({"apt": ["-o"]}, "apt"),
                            ({"pip": ["--index-url=http://x"]}, "pip"),
                            ({"pip": ["pkg @ http://x/y.whl"]}, "pip"),
                            ({"npm": ["file:../x"]}, "npm"), ({"npm": ["git+https://x/y"]}, "npm"),
                            ({"apt": "jq"}, "apt"), ({"apt": ["jq"] * 65}, "apt"),
                            ({"apt": ["jq"], "timeout_s": 0}, "timeout_s")):
            r = srv.req("POST", "/v1/computers/%s/actions/install_packages" % cid, body, key=key)
            self.assertEqual(r.status, 400, (body, r.body))
            self.assertEqual(r.json["error"]["param"], param, (body, r.body))
        # A package that is not there: 404 naming the list and the package.
        for body, param, name in (({"apt": ["cubicle-no-such-package"]}, "apt",
                                   "cubicle-no-such-package"),
                                  ({"pip": ["cubicle-no-such-project"]}, "pip",
                                   "cubicle-no-such-project")):
            r = srv.req("POST", "/v1/computers/%s/actions/install_packages" % cid, body, key=key)
            self.assertEqual(r.status, 404, (body, r.body))
            self.assertEqual(r.json["error"]["param"], param)
            self.assertIn(name, r.json["error"]["message"])
            self.assertNotEqual(r.json[param]["exit_code"], 0)

    def test_4_pip_and_npm_by_hand(self):
        cid = self.cid
        out = bash(cid, "python3 -c 'import sys, wheel; print(sys.prefix, wheel.__file__)'; "
                   "python3 -m venv /tmp/v && /tmp/v/bin/pip install -q %s && "
                   "/tmp/v/bin/python -c 'import cubicle_pkgs_demo as m; print(m.VALUE)'; "
                   "mkdir -p /tmp/p && cd /tmp/p && npm install --no-audit --no-fund %s "
                   ">/dev/null && npx %s; echo rc=$?"
                   % (pkgrepo.WHEEL_PROJECT, pkgrepo.NPM_NAME, pkgrepo.NPM_NAME))
        # The default environment is first on PATH and sees Debian's packages
        # (python3-wheel); a new one gets pip and the operator's index.
        self.assertEqual(out["stdout"].split("\n")[:4],
                         ["/home/user/.venv /usr/lib/python3/dist-packages/wheel/__init__.py",
                          pkgrepo.WHEEL_VALUE, pkgrepo.NPM_OUTPUT, "rc=0"], out)

    def test_5_attacks(self):
        cid = self.cid
        # A .deb of the user's own whose postinst would leave root's mark.
        deb = bash(cid, "set -e; d=$(mktemp -d); mkdir -p $d/DEBIAN; "
                   "printf 'Package: cubicle-evil\\nVersion: 1\\nArchitecture: all\\n"
                   "Maintainer: x <x@x>\\nDescription: x\\n' > $d/DEBIAN/control; "
                   "printf '#!/bin/sh\\nid -u > /pwned\\n' > $d/DEBIAN/postinst; "
                   "chmod 755 $d/DEBIAN/postinst; dpkg-deb -b $d /home/user/evil.deb >/dev/null; "
                   "cp /home/user/evil.deb /tmp/evil.deb; echo built")
        self.assertEqual(deb["stdout"], "built\n", deb)
        # apt's configuration in a file of the user's (for -c and APT_CONFIG).
        srv.act(cid, "write_file", {"path": "/home/user/evil.conf", "content":
                                    'APT::Update::Pre-Invoke { "id -u > /pwned"; };\n'
                                    'DPkg::Pre-Invoke { "id -u > /pwned"; };\n'}, key=key)
        name = "not a Debian package name"
        option = "is not allowed through the package helper"
        attempts = {  # what the user types: what refuses it
            "apt-get install -y 'jq;id>/pwned'": name,
            "apt-get install -y '$(id>/pwned)' '`id>/pwned`'": name,
            "cd /home/user && apt-get install -y ./evil.deb": name,
            "apt-get install -y /home/user/evil.deb": name,
            "cd /home/user && apt-get install -y evil.deb": name,
            "apt-get install -y -- -o": name,
            "apt-get -o 'APT::Update::Pre-Invoke::=id -u > /pwned' update": option,
            "apt-get -y -o 'Dpkg::Pre-Invoke::=id -u > /pwned' install jq": option,
            "apt-get -c /home/user/evil.conf update": option,
            "apt install -y --option=Dir::Etc=/home/user jq": option,
            "apt-get install -y --force-yes jq": option,
            "apt-get install -y --allow-unauthenticated jq": option,
            "apt-get remove -y --allow-remove-essential bash": option,
            "apt-get build-dep jq": "are you root?",  # not a helper command
            # dpkg and what needs no root are the user's own programs.
            "dpkg --force-all -i /home/user/evil.deb": "access to the dpkg database",
            "dpkg -i /tmp/evil.deb": "requires superuser privilege",
            "apt-get source jq": "deb-src",
        }
        for cmd, why in attempts.items():
            out = bash(cid, cmd + "; echo rc=$?")
            self.assertNotIn("rc=0", out["stdout"], (cmd, out))
            self.assertIn(why, out["stderr"], (cmd, out))
        # The environment does not reach the helper: APT_CONFIG names the
        # user's configuration, and the update still runs as apt's own.
        out = bash(cid, "APT_CONFIG=/home/user/evil.conf DPKG_ROOT=/home/user "
                   "DPKG_ADMINDIR=/home/user LD_PRELOAD=/home/user/evil.so apt-get update "
                   ">/dev/null 2>&1; echo rc=$?")
        self.assertEqual(out["stdout"], "rc=0\n", out)
        # Words a hand-made client sends straight to the socket.
        out = srv.act(cid, "python", {"code": r"""
import array, json, os, socket
def ask(words, fds=(1, 2)):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    s.connect("/run/envd/pkg.sock")
    msg = b"".join(w.encode() + b"\0" for w in words)
    anc = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))] if fds else []
    s.sendmsg([msg], anc)
    return s.recv(1024).decode()
d = os.open("/home/user", os.O_RDONLY)
print(json.dumps({
    "sh": ask(["sh", "-c", "id -u > /pwned"]),
    "dpkg": ask(["dpkg", "-i", "/tmp/evil.deb"]),
    "no fds": ask(["apt-get", "install", "-y", "jq"], fds=()),
    "directory": ask(["apt-get", "install", "-y", "jq"], fds=(d, d)),
    "deb": ask(["apt-get", "install", "-y", "/tmp/evil.deb"]),
}))
"""}, key=key)
        res = json.loads(out["stdout"])
        for what, answer in res.items():
            self.assertTrue(answer.startswith("error "), (what, answer))
        # Symbolic links in the home change nothing the helper does: it runs
        # from /, with root's own HOME, and leaves nothing of root's behind.
        out = bash(cid, "ln -sf /etc/shadow /home/user/.bash_history; "
                   "ln -sfn /etc /home/user/.cache; cd /home/user && "
                   "apt-get install -y --reinstall jq >/dev/null; echo rc=$?; "
                   "find /home/user -user root | head; stat -c %U /etc/shadow")
        self.assertEqual(out["stdout"], "rc=0\nroot\n", out)
        # A loop of refusals does not grow the host's console log at will.
        log = os.path.join(srv.state, "computers", cid, "console.log")
        before = os.path.getsize(log)
        bash(cid, "for i in $(seq 200); do apt-get install -y 'x;y' 2>/dev/null; done; true")
        with open(log) as f:
            f.seek(before)
            grown = f.read()
        # (at most 30 a minute: the loop's few seconds may straddle two minutes)
        self.assertLessEqual(grown.count("envd: packages: refused"), 60, grown[-500:])
        self.assertLess(len(grown), 60 * 400, len(grown))

        # Nothing planted ran as root; the user is still the user.
        out = bash(cid, "test -e /pwned && cat /pwned; dpkg -s cubicle-evil 2>&1 | head -1; "
                   "id -u; su -c id 2>&1 </dev/null | tail -1; command -v sudo; "
                   "find / -xdev -perm /6000 -type f 2>/dev/null | head -3")
        lines = out["stdout"].split("\n")
        self.assertIn("is not installed", lines[0], out)
        self.assertEqual(lines[1], "1000", out)
        self.assertNotIn("uid=0", out["stdout"])
        self.assertEqual(lines[3:], [""], out)


def sizes(cid):
    """What a guest says about its size, as the user."""
    out = bash(cid, r"""
nproc
python3 -c 'import os; print(os.cpu_count(), len(os.sched_getaffinity(0)))'
awk '/^MemTotal/ {print $2}' /proc/meminfo
grep -c ^processor /proc/cpuinfo
grep -c '^cpu[0-9]' /proc/stat
cat /sys/devices/system/cpu/online
cut -d' ' -f1 /proc/uptime
df -BM --output=size / | tail -1
free -m | awk '/^Mem:/ {print $2}'
""")["stdout"].split()
    keys = ("nproc", "cpu_count", "affinity", "memtotal_kb", "cpuinfo", "stat_cpus", "online",
            "uptime", "df_mb", "free_mb")
    return dict(zip(keys, out))


class ContainerSizes(unittest.TestCase):
    def check(self, size, vcpus, memory_mb, disk_mb):
        host_cpus = len(os.sched_getaffinity(0))
        cpus = min(vcpus, host_cpus)
        cid = srv.computer(key, kind="sandbox", size=size, isolation="container")["id"]
        s = sizes(cid)
        self.assertEqual([s["nproc"], s["cpu_count"], s["affinity"], s["cpuinfo"],
                          s["stat_cpus"]], [str(cpus)] * 5, s)
        self.assertEqual(s["online"], "0" if cpus == 1 else "0-%d" % (cpus - 1))
        self.assertEqual(int(s["memtotal_kb"]), memory_mb * 1024, s)
        self.assertEqual(int(s["free_mb"]), memory_mb, s)
        with open("/proc/uptime") as f:
            host_uptime = float(f.read().split()[0])
        self.assertLess(float(s["uptime"]), min(600, host_uptime), s)
        self.assertTrue(0.9 * disk_mb < int(s["df_mb"].rstrip("M")) <= disk_mb, s)
        # /proc/meminfo is live: 100 MiB more in use shows as less available.
        out = bash(cid, "python3 -c '\n"
                   "def avail():\n"
                   "    return int([l for l in open(\"/proc/meminfo\") if l.startswith(\"MemAvailable\")][0].split()[1])\n"
                   "a = avail(); b = bytearray(100 << 20); b[::4096] = b\"x\" * len(b[::4096]); print(a - avail())'")
        self.assertGreater(int(out["stdout"]), 80 * 1024, out)
        # A process's start time counts from the computer's start, like uptime.
        out = bash(cid, "ps -o etimes= -p 1")["stdout"].strip()
        self.assertLess(int(out), 600, out)
        srv.ok("DELETE", "/v1/computers/" + cid, key=key)

    def test_xs(self):
        self.check("xs", 1, 512, 5120)

    def test_md(self):
        self.check("md", 2, 2048, 20480)


if __name__ == "__main__":
    unittest.main()
