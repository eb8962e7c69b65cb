"""What a guest's outbound-only network is tested against (test_container,
test_microvm): servers on the host that it must not reach, and a machine
that is not the host, which it must.

HostTargets (root only) listens on the host's 127.0.0.1 and on each of its
IPv4 addresses, and makes a "remote": a network namespace joined to the
host by a veth pair, with a server on a TEST-NET-2 address (outbound
traffic must reach it) and the same server on a link-local address routed
through it, as a cloud host routes its metadata service (the guest must not
reach it). Make it before the computer starts: the drivers take the host's
addresses at each start.
"""

import random
import select
import socket
import subprocess
import sys

# The remote's server: accepts and answers every connection with a line.
REMOTE_SERVER = r"""
import socket, sys
s = socket.socket()
s.bind(("0.0.0.0", 0))
s.listen(16)
print(s.getsockname()[1], flush=True)
while True:
    c, _ = s.accept()
    c.sendall(b"remote\n")
    c.close()
"""

# Run in the guest as the user: connects to each (host, port) and says what
# happened ("connected: <first line>", "timeout" or the error's errno name).
GUEST_PROBE = r"""
import errno, json, socket
res = {}
for host, port in json.loads(sys.argv[1]):
    s = socket.socket()
    s.settimeout(3)
    try:
        s.connect((host, port))
        s.settimeout(2)
        try:
            line = s.recv(64).decode(errors="replace").strip()
        except OSError:
            line = ""
        res["%s:%d" % (host, port)] = "connected: " + line
    except socket.timeout:
        res["%s:%d" % (host, port)] = "timeout"
    except OSError as e:
        res["%s:%d" % (host, port)] = errno.errorcode.get(e.errno, str(e.errno))
    s.close()
print(json.dumps(res))
"""


def run(*argv):
    r = subprocess.run(argv, capture_output=True, text=True)
    if r.returncode != 0:
        raise subprocess.CalledProcessError(r.returncode, argv, r.stdout,
                                            "%s: %s" % (" ".join(argv), r.stderr.strip()))


def host_ipv4():
    """The host's IPv4 addresses, loopback included."""
    out = subprocess.run(["ip", "-o", "-4", "addr", "show"], capture_output=True, text=True,
                         check=True).stdout
    return sorted({line.split()[3].split("/")[0] for line in out.splitlines()})


class HostTargets:
    def __init__(self):
        self.listeners = {}
        self.server = None
        self._pick()

    def _pick(self):
        """New names and addresses: a /30 of 198.51.100.0/24 and a
        link-local address that nothing on the host holds or routes now
        (other suites, other checkouts' tests, make their own at once)."""
        tag = "%06x" % random.getrandbits(24)
        self.ns = "cbt" + tag
        self.veth = "cbh" + tag
        taken = subprocess.run(["ip", "-o", "-4", "addr", "show"], capture_output=True,
                               text=True).stdout + subprocess.run(
            ["ip", "-4", "route", "show", "table", "all"], capture_output=True, text=True).stdout
        while True:
            k = random.randrange(1, 63)
            self.host_end = "198.51.100.%d" % (4 * k + 1)
            self.remote = "198.51.100.%d" % (4 * k + 2)
            self.link_local = "169.254.213.%d" % random.randrange(1, 255)
            if not any(a + "/" in taken or a + " " in taken
                       for a in (self.host_end, self.remote, self.link_local)):
                return

    def __enter__(self):
        try:
            for attempt in range(5):
                try:
                    self._make_remote()
                    break
                except subprocess.CalledProcessError:
                    # Taken between the look and the add (a concurrent
                    # test), or a veth the kernel refused: again, anew.
                    subprocess.run(["ip", "netns", "del", self.ns], capture_output=True)
                    if attempt == 4:
                        raise
                    self._pick()
            for addr in host_ipv4():
                s = socket.socket()
                s.bind((addr, 0))
                s.listen(16)
                self.listeners[addr] = s
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc):
        self.close()

    def _make_remote(self):
        run("ip", "netns", "add", self.ns)
        run("ip", "link", "add", self.veth, "type", "veth", "peer", "name", "eth0",
            "netns", self.ns)
        run("ip", "addr", "add", self.host_end + "/30", "dev", self.veth)
        run("ip", "link", "set", self.veth, "up")
        run("ip", "-n", self.ns, "addr", "add", self.remote + "/30", "dev", "eth0")
        run("ip", "-n", self.ns, "addr", "add", self.link_local + "/32", "dev", "eth0")
        run("ip", "-n", self.ns, "link", "set", "eth0", "up")
        run("ip", "-n", self.ns, "link", "set", "lo", "up")
        run("ip", "route", "add", self.link_local + "/32", "via", self.remote)
        self.server = subprocess.Popen(
            ["ip", "netns", "exec", self.ns, sys.executable, "-c", REMOTE_SERVER],
            stdout=subprocess.PIPE, text=True)
        self.remote_port = int(self.server.stdout.readline())

    def close(self):
        for s in self.listeners.values():
            s.close()
        self.listeners = {}
        if self.server:
            self.server.kill()
            self.server.wait()
            self.server.stdout.close()
            self.server = None
        # The veth pair and the link-local route go with the namespace.
        subprocess.run(["ip", "netns", "del", self.ns], capture_output=True)

    def host_targets(self):
        """(address, port) of every host listener."""
        return [(a, s.getsockname()[1]) for a, s in sorted(self.listeners.items())]

    def host_port(self, addr):
        return self.listeners[addr].getsockname()[1]

    def reached(self):
        """Host addresses whose listener has a connection waiting."""
        return [a for a, s in self.listeners.items() if select.select([s], [], [], 0)[0]]

    def host_reaches_link_local(self):
        """The remote's link-local server answers the host: a guest that does
        not reach it is stopped by its own routes, not by the setup."""
        with socket.create_connection((self.link_local, self.remote_port), timeout=5) as c:
            return c.recv(64) == b"remote\n"



def probe_code(targets):
    """GUEST_PROBE for these (host, port) targets, for envd's python action."""
    return GUEST_PROBE.replace("json.loads(sys.argv[1])", repr([list(t) for t in targets]))
