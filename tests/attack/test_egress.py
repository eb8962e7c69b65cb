"""Egress (issue 11, item 11): what a guest may reach on the host's networks.

Before the egress policy a guest reached every private, CGNAT and other
special range the host reaches (a cloud's metadata service at
100.100.100.200, a database on 10.x): only the host's own addresses and
169.254/16 were denied. Now those ranges are denied by default,
`cubicled --egress-allow/--egress-deny` and a workspace's
`egress_allow`/`egress_deny` change that, and the host's own addresses stay
denied whatever an allow says.

The "private networks" are made here and nowhere else: for each, a network
namespace joined to the host's by a veth pair, the host side .1 of a /30,
the namespace side .2 with a TCP echo server on it; an extra address in the
namespace (.6), routed by the host through .2, stands for "the rest of the
range". A guest's connections are re-made by slirp on the host, so these
are what a guest on this host would reach. No traffic goes to any other
address (IPv6: only a ULA the test puts on its own veth).

One cubicled (--egress-allow N100/30 --egress-deny NTN.2/32) and two
workspaces per isolation, W0 with no override and W1 with egress_allow [N10/30]; each
gets a container sandbox and a microVM sandbox (TCG here: ~5-10 s a boot):

  address                          W0              W1
  N10.2   (10.213.x, private)      EACCES default  echo (workspace allow)
  N172.2  (172.16.x, private)      EACCES default  EACCES
  N100.2  (100.64.x, CGNAT)        echo (--egress-allow)
  N100.6  (the rest of CGNAT)      EACCES default
  NTN.2   (203.0.113.x, public)    EACCES (--egress-deny of what is otherwise allowed)
  NTN.6   (203.0.113.x, public)    echo: outbound works
  every .1 (the host's own)        EACCES, also N100.1 inside the allowed /30
  fd00:213:x::2 (IPv6 ULA)         ENETUNREACH: IPv6 is off

Then W0's PATCH to egress_allow [N172/30] reaches its computers at their
next start (a microVM boots cold: its snapshot has the old policy), and the
user in every guest fails to remove the routes or the rule.
"""

import json
import os
import random
import re
import subprocess
import sys
import unittest

import attack
from attack import Cubicled

ECHO_SERVER = r"""
import socket, threading
s = socket.socket(socket.AF_INET6)
s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
s.bind(("::", 0))
s.listen(64)
print(s.getsockname()[1], flush=True)
def serve(c):
    with c:
        c.settimeout(10)
        try:
            c.sendall(c.recv(256))
        except OSError:
            pass
while True:
    c, _ = s.accept()
    threading.Thread(target=serve, args=(c,), daemon=True).start()
"""

# In the guest, as the user: connects to each (host, port), sends a line and
# says what came back ("echo" when the line did) or the connect's errno name.
GUEST_PROBE = r"""
import errno, json, socket
res = {}
for host, port in TARGETS:
    s = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
    s.settimeout(5)
    try:
        s.connect((host, port))
        line = ("echo " + host + "\n").encode()
        s.sendall(line)
        got = b""
        while len(got) < len(line):
            part = s.recv(256)
            if not part:
                break
            got += part
        res[host] = "echo" if got == line else "connected: %r" % got
    except socket.timeout:
        res[host] = "timeout"
    except OSError as e:
        res[host] = errno.errorcode.get(e.errno, str(e.errno))
    s.close()
print(json.dumps(res))
"""


def run(*argv):
    p = subprocess.run(argv, capture_output=True, text=True)
    if p.returncode:
        raise RuntimeError("%s: %s" % (" ".join(argv), p.stderr.strip()))
    return p.stdout


class Net:
    """A namespace behind a veth pair: host side net.1/30, namespace side
    net.2/30 with the echo server, an extra address net.6 routed through .2,
    optionally an IPv6 ULA pair."""

    def __init__(self, tag, prefix, v6=None):
        self.tag = tag
        self.ns, self.veth = "cbe%s%s" % (tag, SUFFIX), "cbe%s%s" % (tag, SUFFIX)
        a, b, c, d = prefix.split(".")
        base = int(d)
        self.cidr = prefix + "/30"
        self.host = "%s.%s.%s.%d" % (a, b, c, base + 1)
        self.addr = "%s.%s.%s.%d" % (a, b, c, base + 2)
        self.extra = "%s.%s.%s.%d" % (a, b, c, base + 6)
        self.v6 = v6
        self.server = None
        self.made = False

    def make(self):
        run("ip", "netns", "add", self.ns)
        self.made = True
        run("ip", "link", "add", self.veth, "type", "veth", "peer", "name", "eth0", "netns",
            self.ns)
        run("ip", "addr", "add", self.host + "/30", "dev", self.veth)
        run("ip", "link", "set", self.veth, "up")
        run("ip", "-n", self.ns, "addr", "add", self.addr + "/30", "dev", "eth0")
        run("ip", "-n", self.ns, "addr", "add", self.extra + "/32", "dev", "eth0")
        if self.v6:
            run("ip", "-6", "addr", "add", self.v6 + "1/64", "dev", self.veth, "nodad")
            run("ip", "-n", self.ns, "-6", "addr", "add", self.v6 + "2/64", "dev", "eth0",
                "nodad")
        run("ip", "-n", self.ns, "link", "set", "eth0", "up")
        run("ip", "-n", self.ns, "link", "set", "lo", "up")
        run("ip", "route", "add", self.extra + "/32", "via", self.addr)
        self.server = subprocess.Popen(
            ["ip", "netns", "exec", self.ns, sys.executable, "-c", ECHO_SERVER],
            stdout=subprocess.PIPE, text=True)
        self.port = int(self.server.stdout.readline())

    def make_retrying(self, tries=3):
        """make(), again under new names when the kernel refuses the veth
        (seen once in many runs: "RTNETLINK answers: Invalid argument" for
        a fresh namespace, right after another suite's namespaces went)."""
        for attempt in range(tries):
            try:
                return self.make()
            except RuntimeError:
                self.close()
                if attempt == tries - 1:
                    raise
                name = "cbe%s%05x" % (self.tag, random.getrandbits(20))
                self.ns = self.veth = name

    def close(self):
        if self.server:
            self.server.kill()
            self.server.wait()
            self.server.stdout.close()
            self.server = None
        if self.made:
            # The veth pair and the route to .6 go with the namespace.
            subprocess.run(["ip", "netns", "del", self.ns], capture_output=True)
            self.made = False


SUFFIX = "%05x" % random.getrandbits(20)


def free_k():
    """Which /30 of each range (x.x.x.4K/30, .4K+6 for the extra): one whose
    addresses nothing on the host holds (a namespace deleted a moment ago
    takes its veth with it only when the kernel gets to it)."""
    used = run("ip", "-4", "-o", "addr", "show") + run("ip", "-4", "route", "show")
    for _ in range(100):
        k = random.randrange(0, 62)
        if not any(re.search(r"(^|\s)%s\.%d(/|\s)" % (re.escape(p), 4 * k + d), used, re.M)
                   for p in ("10.213.7", "172.16.213", "100.64.213", "203.0.113")
                   for d in (1, 2, 6)):
            return k
    raise RuntimeError("no free /30 for the test's networks")


K = free_k()
N10 = Net("a", "10.213.7.%d" % (4 * K), v6="fd00:213:7:%x::" % K)
N172 = Net("b", "172.16.213.%d" % (4 * K))
N100 = Net("c", "100.64.213.%d" % (4 * K))
NTN = Net("d", "203.0.113.%d" % (4 * K))
NETS = (N10, N172, N100, NTN)

srv = None
W0 = W1 = K0 = K1 = None


def setUpModule():
    global srv, W0, W1, K0, K1
    try:
        for n in NETS:
            n.make_retrying()
        # The host reaches every server itself: only the guests' policy can stop them.
        for n in NETS:
            for a in (n.addr, n.extra):
                subprocess.run(["python3", "-c", "import socket; socket.create_connection(("
                                "%r, %d), timeout=5).close()" % (a, n.port)], check=True)
        srv = Cubicled(["--egress-allow", N100.cidr, "--egress-deny", NTN.addr + "/32"]).start()
        W0, K0 = srv.workspace("w0")
        W1, K1 = srv.workspace("w1", egress_allow=[N10.cidr])
    except BaseException:
        tearDownModule()
        raise


def tearDownModule():
    try:
        if srv:
            srv.stop()
    finally:
        for n in NETS:
            n.close()


def probe(cid, key):
    targets = [(n.host, n.port) for n in NETS] + [(n.addr, n.port) for n in NETS] + \
        [(N100.extra, N100.port), (NTN.extra, NTN.port), (N10.v6 + "2", N10.port)]
    code = GUEST_PROBE.replace("TARGETS", repr(targets))
    out = srv.act(cid, "python", {"code": code, "timeout_s": 120}, key=key)
    return json.loads(out["stdout"])


class Egress:
    isolation = None

    def computer(self, key):
        return srv.computer(key, kind="sandbox", size="sm", isolation=self.isolation,
                            timeout_s=170)

    def expect(self, res, reachable):
        """Every target EACCES (IPv6: ENETUNREACH) but `reachable`, which echo."""
        want = {a: "EACCES" for a in res}
        want[N10.v6 + "2"] = "ENETUNREACH"
        for a in reachable:
            want[a] = "echo"
        self.assertEqual(res, want)

    def test_policy(self):
        # Workspaces of this test's own: the PATCH below must not leak into another's.
        w0, k0 = srv.workspace("w0-" + self.isolation)
        w1, k1 = srv.workspace("w1-" + self.isolation, egress_allow=[N10.cidr])
        c0 = self.computer(k0)
        c1 = self.computer(k1)
        common = [N100.addr, NTN.extra]

        with self.subTest("defaults, --egress-allow, --egress-deny, the host's own"):
            self.expect(probe(c0["id"], k0), common)
        with self.subTest("a workspace's egress_allow: for that workspace only"):
            self.expect(probe(c1["id"], k1), common + [N10.addr])

        with self.subTest("the user cannot remove the routes or the rule"):
            out = srv.act(c1["id"], "bash", {
                "command": "ip route show table 1000; ip rule; "
                           "ip route del %s table 1000 2>&1; "
                           "ip route del 10.0.0.0/8 table 1000 2>&1; "
                           "ip rule del pref 200 2>&1; id -u" % N10.cidr}, key=k1)["stdout"]
            self.assertIn("throw %s" % N10.cidr, out)
            self.assertIn("prohibit 10.0.0.0/8", out)
            self.assertRegex(out, r"200:\s+from all lookup 1000")
            self.assertEqual(out.count("Operation not permitted"), 3, out)
            self.assertTrue(out.rstrip().endswith("1000"), out)
            self.expect(probe(c1["id"], k1), common + [N10.addr])

        with self.subTest("a PATCH reaches the workspace's computers at their next start"):
            ws = srv.ok("PATCH", "/v1/workspaces/" + w0, {"egress_allow": [N172.cidr]})
            self.assertEqual((ws["egress_allow"], ws["egress_deny"]), ([N172.cidr], []))
            srv.ok("POST", "/v1/computers/%s/stop?wait=stopped" % c0["id"], key=k0)
            srv.ok("POST", "/v1/computers/%s/start?wait=running&timeout_s=170" % c0["id"],
                   key=k0)
            self.expect(probe(c0["id"], k0), common + [N172.addr])
            self.expect(probe(c1["id"], k1), common + [N10.addr])  # W1's as it was
        srv.ok("DELETE", "/v1/computers/" + c0["id"], key=k0)
        srv.ok("DELETE", "/v1/computers/" + c1["id"], key=k1)


class Container(Egress, unittest.TestCase):
    isolation = "container"


class MicroVM(Egress, unittest.TestCase):
    isolation = "vm"

    def test_policy_too_long_for_the_command_line(self):
        """A VM's policy rides on its kernel command line (at most 1010 bytes
        through QEMU's -readconfig): one that does not fit fails the start
        with the reason, never boots without it."""
        ws, k = srv.workspace("long", egress_allow=["10.%d.%d.0/24" % (200 + i // 8, i)
                                                    for i in range(32)],
                              egress_deny=["203.0.113.%d" % (100 + i) for i in range(32)])
        r = srv.req("POST", "/v1/computers?wait=running&timeout_s=120",
                    {"kind": "sandbox", "size": "sm", "isolation": "vm"}, key=k)
        cid = r.json.get("id") or r.json["error"].get("computer_id")
        c = srv.ok("GET", "/v1/computers/%s?wait=error&timeout_s=60" % cid, key=k)
        self.assertEqual(c["state"], "error")
        self.assertIn("kernel command line", c["error"])
        srv.ok("DELETE", "/v1/computers/" + cid, key=k)


class WorkspaceFields(unittest.TestCase):
    """The workspace's egress lists: checked, a 400 naming the bad one, admin only."""

    def test_validation(self):
        bad = [("egress_allow", ["10.213.7.1/30"], "10.213.7.0/30"),  # host bits: a hint
               ("egress_allow", ["10.213.7.0/30", "300.1.1.1/32"], "300.1.1.1/32"),
               ("egress_deny", ["fd00::/8"], "IPv6"),
               ("egress_allow", ["169.254.169.254/32"], "link-local"),
               ("egress_deny", ["10.0.2.3/32"], "10.0.2.0/24"),
               ("egress_allow", [7], "egress_allow[0]"),
               ("egress_deny", "10.0.0.0/8", "egress_deny"),
               ("egress_deny", ["203.0.113.%d/32" % i for i in range(33)], "more than 32")]
        for param, value, says in bad:
            for method, path in (("POST", "/v1/workspaces"), ("PATCH", "/v1/workspaces/" + W0)):
                body = {param: value}
                if method == "POST":
                    body["name"] = "bad"
                r = srv.req(method, path, body)
                self.assertEqual(r.status, 400, (method, body, r.body))
                err = r.json["error"]
                self.assertEqual(err["param"], param)
                self.assertIn(says, err["message"])
        names = [w["name"] for w in srv.ok("GET", "/v1/workspaces")["workspaces"]]
        self.assertNotIn("bad", names)  # nothing was created
        # Not a workspace key's business, not even its own workspace's.
        r = srv.req("PATCH", "/v1/workspaces/" + W1, {"egress_allow": []}, key=K1)
        self.assertEqual(r.status, 403)
        self.assertEqual(srv.ok("GET", "/v1/workspaces/" + W1)["egress_allow"], [N10.cidr])
        self.assertEqual(srv.req("PATCH", "/v1/workspaces/ws-0000000000000000",
                                 {"egress_allow": []}).status, 404)
        r = srv.req("PATCH", "/v1/workspaces/" + W1, {"name": "x"})
        self.assertEqual((r.status, r.json["error"]["param"]), (400, "name"))

    def test_flags(self):
        for flag, value, says in (("--egress-allow", "10.0.0.1/8", "10.0.0.0/8"),
                                  ("--egress-deny", "10.0.0.0/8,", "comma"),
                                  ("--egress-allow", "169.254.0.0/16", "link-local")):
            c = Cubicled([flag, value])
            try:
                with self.assertRaises(RuntimeError):
                    c.start()
                self.assertNotEqual(c.proc.wait(timeout=30), 0)
                c.proc.stdout.close()
                c.log.close()
                self.assertIn(says, c.read_log())
            finally:
                c.stop()


if __name__ == "__main__":
    unittest.main()
