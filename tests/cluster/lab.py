"""A cluster of cubicled on one machine, for tests/cluster/ and bench/cluster.py.

Everything lives on a network this module makes and removes: a hub network
namespace with a bridge, and a namespace per machine (three etcd members,
PostgreSQL — or two under Patroni behind HAProxy — and the cubicled hosts),
each joined to the bridge by a veth pair, plus one veth from the test's own
namespace so it can call every node. Addresses are a /24 of 198.18.0.0/15
(RFC 2544's benchmarking range) that no route or address of the machine
touches, checked before use; names start with "clu" and a random tag.

Processes enter a namespace with `nsenter --net` only (not `ip netns exec`,
which remounts /sys and would hide the cgroup tree the container driver
uses): the mount namespace, cgroups and uid ranges stay the machine's.
Namespaces are held by a process each, not by /run/netns (see Namespace).

Cutting a machine off is a blackhole route in its namespace (packets
vanish, like a real partition: calls time out rather than fail fast).
"""

import ipaddress
import json
import os
import random
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "host"))
import cubicled as cubicled_mod  # noqa: E402
from cubicled import IMAGES, http_call, unmount_sessions, wait_until  # noqa: E402,F401
import harness  # noqa: E402

import http.client  # noqa: E402

PG_BIN = "/usr/lib/postgresql/15/bin"


def run(*argv, check=True, input=None):
    return subprocess.run(argv, check=check, capture_output=True, text=True, input=input)


def in_ns(ns, argv):
    """argv run in network namespace ns (a Namespace's path)."""
    return ["nsenter", "--net=" + ns, "--"] + list(argv)


class Namespace:
    """A network namespace kept alive by a process of its own (`sleep` in
    `unshare --net`), named by that process's /proc path: nothing here
    depends on /run/netns, whose bind mounts a program elsewhere on the
    machine may take away, and the namespace goes when its processes do."""

    def __init__(self):
        self.holder = subprocess.Popen(["unshare", "--net", "--", "sleep", "infinity"],
                                       stdin=subprocess.DEVNULL, start_new_session=True)
        mine = os.readlink("/proc/self/ns/net")
        self.path = "/proc/%d/ns/net" % self.holder.pid
        wait_until(lambda: os.readlink(self.path) != mine, timeout=10,
                   what="a new network namespace")
        self.pid = self.holder.pid

    def ip(self, *args, check=True):
        return run(*in_ns(self.path, ["ip"] + list(args)), check=check)

    def close(self):
        if self.holder.poll() is None:
            self.holder.kill()
            self.holder.wait()


def free_subnet():
    """A /24 of 198.18.0.0/15 no address or route of this machine overlaps."""
    used = []
    for cmd in (["ip", "-4", "-o", "addr", "show"], ["ip", "-4", "route", "show", "table", "all"]):
        for line in run(*cmd).stdout.splitlines():
            for word in line.split():
                try:
                    used.append(ipaddress.ip_network(word, strict=False))
                except ValueError:
                    pass
    used = [u for u in used if u.prefixlen > 0]  # a default route overlaps everything
    candidates = list(range(256))
    random.shuffle(candidates)
    for third in candidates:
        net = ipaddress.ip_network("198.18.%d.0/24" % third)
        if not any(net.overlaps(u) for u in used):
            return net
    raise RuntimeError("no free /24 in 198.18.0.0/24..198.18.255.0/24")


class Net:
    """The hub, its bridge and the test's own veth into it."""

    def __init__(self):
        self.tag = "%04x" % random.getrandbits(16)
        self.root_if = "clu%sr" % self.tag
        self.subnet = free_subnet()
        hosts = list(self.subnet.hosts())
        self.root_addr = str(hosts[0])
        self._next = 10
        self._hosts = hosts
        self.namespaces = []
        self.hub = None

    def __enter__(self):
        try:
            self.hub = Namespace()
            self.namespaces.append(self.hub)
            self.hub.ip("link", "add", "br0", "type", "bridge")
            self.hub.ip("link", "set", "br0", "up")
            run("ip", "link", "add", self.root_if, "type", "veth", "peer", "name", "vroot",
                "netns", str(self.hub.pid))
            self.hub.ip("link", "set", "vroot", "master", "br0", "up")
            run("ip", "addr", "add", "%s/24" % self.root_addr, "dev", self.root_if)
            run("ip", "link", "set", self.root_if, "up")
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc):
        self.close()

    def machine(self, name):
        """A namespace joined to the bridge; returns (its path, address)."""
        ns = Namespace()
        self.namespaces.append(ns)
        addr = str(self._hosts[self._next])
        self._next += 1
        peer = "v" + name
        ns.ip("link", "add", "eth0", "type", "veth", "peer", "name", peer, "netns",
              str(self.hub.pid))
        self.hub.ip("link", "set", peer, "master", "br0", "up")
        ns.ip("addr", "add", "%s/24" % addr, "dev", "eth0")
        ns.ip("link", "set", "eth0", "up")
        ns.ip("link", "set", "lo", "up")
        return ns.path, addr

    def cut(self, ns, addrs):
        """Packets from ns to addrs vanish (a partition, one way is enough)."""
        for a in addrs:
            run(*in_ns(ns, ["ip", "route", "add", "blackhole", a + "/32"]))

    def heal(self, ns, addrs):
        for a in addrs:
            run(*in_ns(ns, ["ip", "route", "del", "blackhole", a + "/32"]), check=False)

    def close(self):
        run("ip", "link", "del", self.root_if, check=False)
        for ns in reversed(self.namespaces):
            ns.close()
        self.namespaces = []


class Proc:
    """A process in a namespace, its output in a log file."""

    def __init__(self, ns, argv, log, env=None, user=None):
        self.log_path = log
        self.log = open(log, "ab")
        pre = ["setpriv", "--reuid=%s" % user, "--regid=%s" % user, "--init-groups"] if user \
            else []
        self.p = subprocess.Popen(in_ns(ns, pre + list(argv)), stdout=self.log,
                                  stderr=subprocess.STDOUT, env=env, start_new_session=True)

    def alive(self):
        return self.p.poll() is None

    def kill(self, sig=signal.SIGKILL):
        if self.p.poll() is None:
            try:
                os.killpg(self.p.pid, sig)
            except ProcessLookupError:
                pass
            try:
                self.p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(self.p.pid, signal.SIGKILL)
                self.p.wait()
        self.log.close()

    def read_log(self, tail=6000):
        with open(self.log_path, "rb") as f:
            return f.read().decode(errors="replace")[-tail:]


class Etcd:
    """Three members, each in its own namespace."""

    def __init__(self, net, tmp, n=3):
        self.net, self.tmp = net, tmp
        self.members = []
        for i in range(n):
            ns, addr = net.machine("e%d" % (i + 1))
            self.members.append({"name": "e%d" % (i + 1), "ns": ns, "addr": addr, "proc": None})
        self.initial = ",".join("%s=http://%s:2380" % (m["name"], m["addr"])
                                for m in self.members)

    @property
    def endpoints(self):
        return ",".join("http://%s:2379" % m["addr"] for m in self.members)

    def start(self, m, new=True):
        data = os.path.join(self.tmp, "etcd-" + m["name"])
        os.makedirs(data, exist_ok=True)
        m["proc"] = Proc(m["ns"], [
            "etcd", "--name", m["name"], "--data-dir", data,
            "--listen-client-urls", "http://%s:2379" % m["addr"],
            "--advertise-client-urls", "http://%s:2379" % m["addr"],
            "--listen-peer-urls", "http://%s:2380" % m["addr"],
            "--initial-advertise-peer-urls", "http://%s:2380" % m["addr"],
            "--initial-cluster", self.initial,
            "--initial-cluster-state", "new" if new else "existing",
            "--initial-cluster-token", "clu" + self.net.tag,
            # Elections in about half a second: well inside the hosts' lease
            # TTL, so a dead etcd leader costs no host its lease.
            "--heartbeat-interval", "50", "--election-timeout", "500",
            "--logger", "zap", "--log-level", "warn"],
            os.path.join(self.tmp, "etcd-%s.log" % m["name"]))

    def __enter__(self):
        for m in self.members:
            self.start(m)
        wait_until(self.healthy, timeout=30, what="etcd's members to elect a leader")
        return self

    def __exit__(self, *exc):
        for m in self.members:
            if m["proc"]:
                m["proc"].kill()

    def call(self, path, body, member=None):
        ms = [member] if member else [m for m in self.members if m["proc"] and
                                      m["proc"].alive()]
        for m in ms:
            c = http.client.HTTPConnection(m["addr"], 2379, timeout=2)
            try:
                c.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
                r = c.getresponse()
                data = r.read()
                if r.status == 200:
                    return json.loads(data)
            except OSError:
                continue
            finally:
                c.close()
        return None

    def status(self, m):
        return self.call("/v3/maintenance/status", {}, member=m)

    def leader(self):
        """The member that leads now (or None)."""
        for m in self.members:
            if not (m["proc"] and m["proc"].alive()):
                continue
            s = self.status(m)
            if s and s.get("leader") and s["leader"] == s["header"]["member_id"]:
                return m
        return None

    def healthy(self):
        return self.leader() is not None


class Postgres:
    """One PostgreSQL 15 in its own namespace (trust authentication: the
    network is the test's own)."""

    def __init__(self, net, tmp):
        self.ns, self.addr = net.machine("pg")
        self.dir = os.path.join(tmp, "pg")
        os.makedirs(self.dir)
        shutil.chown(self.dir, "postgres", "postgres")
        self.proc = None

    @property
    def url(self):
        return "postgresql://cubicle@%s:5432/cubicle" % self.addr

    def __enter__(self):
        run("setpriv", "--reuid=postgres", "--regid=postgres", "--init-groups",
            PG_BIN + "/initdb", "-D", self.dir + "/data", "-A", "trust", "-U", "cubicle",
            "--no-sync")
        with open(self.dir + "/data/pg_hba.conf", "a") as f:
            f.write("host all all 0.0.0.0/0 trust\n")
        self.start()
        run(*in_ns(self.ns, [PG_BIN + "/createdb", "-h", self.addr, "-U", "cubicle",
                             "cubicle"]))
        return self

    def start(self):
        self.proc = Proc(self.ns, [PG_BIN + "/postgres", "-D", self.dir + "/data", "-k",
                                   self.dir, "-c", "listen_addresses=" + self.addr, "-c",
                                   "max_connections=200"],
                         os.path.join(self.dir, "postgres.log"), user="postgres")
        wait_until(lambda: run(*in_ns(self.ns, [PG_BIN + "/pg_isready", "-h", self.addr]),
                               check=False).returncode == 0, timeout=30,
                   what="PostgreSQL to accept connections")

    def psql(self, sql):
        return run(*in_ns(self.ns, ["psql", "-h", self.addr, "-U", "cubicle", "-d", "cubicle",
                                    "-At", "-c", sql])).stdout

    def __exit__(self, *exc):
        if self.proc:
            self.proc.kill(signal.SIGINT)


class Patroni:
    """Two PostgreSQL 15 under Patroni (on the lab's etcd) with synchronous
    replication, behind HAProxy, which sends connections to whichever one
    Patroni's REST API says is the primary. Killing the primary's machine
    (Patroni and PostgreSQL, -9) lets its leader key expire (ttl) and the
    replica, which has every acknowledged commit, take over."""

    TTL = 6  # seconds: the leader key; failover ~ TTL + a loop + HAProxy's checks

    def __init__(self, net, tmp, etcd):
        self.net, self.tmp, self.etcd = net, tmp, etcd
        self.members = []
        for i in range(2):
            ns, addr = net.machine("pg%d" % (i + 1))
            d = os.path.join(tmp, "patroni-pg%d" % (i + 1))
            os.makedirs(d)
            shutil.chown(d, "postgres", "postgres")
            self.members.append({"name": "pg%d" % (i + 1), "ns": ns, "addr": addr, "dir": d,
                                 "proc": None})
        self.px_ns, self.addr = net.machine("px")
        self.haproxy = None

    @property
    def url(self):
        return "postgresql://cubicle@%s:5432/cubicle" % self.addr

    def config(self, m):
        hosts = ",".join("%s:2379" % e["addr"] for e in self.etcd.members)
        return "\n".join([
            "scope: clu%s" % self.net.tag,
            "namespace: /patroni/",
            "name: %s" % m["name"],
            "restapi:",
            "  listen: %s:8008" % m["addr"],
            "  connect_address: %s:8008" % m["addr"],
            "etcd3:",
            "  hosts: %s" % hosts,
            "bootstrap:",
            "  dcs:",
            "    ttl: %d" % self.TTL,
            "    loop_wait: 1",
            "    retry_timeout: 2",
            "    maximum_lag_on_failover: 1048576",
            "    synchronous_mode: true",
            "    postgresql:",
            "      use_pg_rewind: false",
            "      parameters:",
            "        max_connections: 200",
            "        wal_level: replica",
            "        hot_standby: 'on'",
            "        synchronous_commit: 'on'",
            "  initdb:",
            "  - encoding: UTF8",
            "  pg_hba:",
            "  - host replication replicator 0.0.0.0/0 trust",
            "  - host all all 0.0.0.0/0 trust",
            "postgresql:",
            "  listen: %s:5432" % m["addr"],
            "  connect_address: %s:5432" % m["addr"],
            "  data_dir: %s/data" % m["dir"],
            "  bin_dir: %s" % PG_BIN,
            "  pgpass: %s/pgpass" % m["dir"],
            "  authentication:",
            "    replication: {username: replicator, password: replicator}",
            "    superuser: {username: cubicle, password: cubicle}",
            "  parameters:",
            "    unix_socket_directories: '%s'" % m["dir"],
            ""])

    def start(self, m):
        conf = os.path.join(m["dir"], "patroni.yml")
        with open(conf, "w") as f:
            f.write(self.config(m))
        shutil.chown(conf, "postgres", "postgres")
        m["proc"] = Proc(m["ns"], ["patroni", conf], os.path.join(m["dir"], "patroni.log"),
                         user="postgres")

    def role(self, m):
        """'primary', 'replica' or None, as m's Patroni says."""
        try:
            c = http.client.HTTPConnection(m["addr"], 8008, timeout=2)
            c.request("GET", "/patroni")
            r = c.getresponse()
            j = json.loads(r.read())
            c.close()
            if j.get("state") != "running":
                return None
            return "primary" if j.get("role") in ("master", "primary") else "replica"
        except (OSError, ValueError):
            return None

    def primary(self):
        return next((m for m in self.members if m["proc"] and m["proc"].alive() and
                     self.role(m) == "primary"), None)

    def sync_ready(self):
        """The replica streams synchronously (a commit waits for it)."""
        p = self.primary()
        if not p:
            return False
        out = run(*in_ns(p["ns"], ["psql", "-h", p["addr"], "-U", "cubicle", "-d", "postgres",
                                   "-At", "-c", "select sync_state from pg_stat_replication"]),
                  check=False).stdout
        return "sync" in out.split()

    def __enter__(self):
        self.start(self.members[0])
        wait_until(lambda: self.role(self.members[0]) == "primary", timeout=60,
                   what="Patroni's first PostgreSQL to be primary")
        self.start(self.members[1])
        cfg = os.path.join(self.tmp, "haproxy.cfg")
        with open(cfg, "w") as f:
            f.write("\n".join([
                "global", "  maxconn 400",
                "defaults", "  mode tcp", "  timeout connect 1s", "  timeout client 1h",
                "  timeout server 1h", "  timeout check 1s",
                "listen pg", "  bind %s:5432" % self.addr,
                "  option httpchk GET /primary", "  http-check expect status 200",
                "  default-server inter 500ms fall 2 rise 1 on-marked-down shutdown-sessions"]
                + ["  server %s %s:5432 check port 8008" % (m["name"], m["addr"])
                   for m in self.members] + [""]))
        self.haproxy = Proc(self.px_ns, ["haproxy", "-db", "-f", cfg],
                            os.path.join(self.tmp, "haproxy.log"))
        wait_until(self.sync_ready, timeout=90, what="the replica to stream synchronously")
        run(*in_ns(self.px_ns, ["createdb", "-h", self.addr, "-U", "cubicle", "cubicle"]))
        return self

    def psql(self, sql):
        return run(*in_ns(self.px_ns, ["psql", "-h", self.addr, "-U", "cubicle", "-d",
                                       "cubicle", "-At", "-c", sql])).stdout

    def kill_postgres(self, m, sig=signal.SIGKILL):
        """Signals m's postmaster's process group (Patroni starts PostgreSQL
        in a group of its own: killing Patroni leaves it running)."""
        try:
            with open(os.path.join(m["dir"], "data", "postmaster.pid")) as f:
                pid = int(f.readline())
            os.killpg(os.getpgid(pid), sig)
        except (OSError, ValueError):
            pass

    def kill_primary(self):
        """Kills the primary's machine: Patroni and PostgreSQL, -9."""
        p = self.primary()
        p["proc"].kill(signal.SIGKILL)
        self.kill_postgres(p)
        return p

    def __exit__(self, *exc):
        if self.haproxy:
            self.haproxy.kill(signal.SIGTERM)
        for m in self.members:
            if m["proc"]:
                m["proc"].kill(signal.SIGTERM)
            self.kill_postgres(m)


class Node:
    """A cubicled host of the cluster, in its own namespace."""

    def __init__(self, lab, name, args=()):
        self.lab, self.name = lab, name
        self.ns, self.addr = lab.net.machine(name)
        self.state = os.path.join(lab.tmp, "state-" + name)
        os.makedirs(self.state, exist_ok=True)
        self.port = 8080
        self.args = list(args)
        self.proc = None

    def start(self, extra=()):
        env = dict(os.environ)
        env["CUBICLE_ADMIN_KEY"] = self.lab.admin
        # The cluster's flags from a file (--config), as an operator would.
        conf = os.path.join(self.lab.tmp, "cubicled-%s.conf" % self.name)
        with open(conf, "w") as f:
            f.write("# the cluster (docs/cluster.md)\n"
                    "cluster-etcd = %s\ndatabase = %s\nhost-id %s\n"
                    "cluster-ttl = %d\ncluster-secret-file = %s\n" % (
                        self.lab.etcd.endpoints, self.lab.database_url, self.name,
                        self.lab.ttl, self.lab.secret_file))
        argv = [os.path.join(harness.BIN, "cubicled"), "--config", conf,
                "--listen", "%s:%d" % (self.addr, self.port),
                "--state-dir", self.state, "--images", IMAGES] + self.lab.node_args + \
            self.args + list(extra)
        self.proc = Proc(self.ns, argv, os.path.join(self.lab.tmp, "cubicled-%s.log" %
                                                     self.name), env=env)
        wait_until(lambda: self.up(), timeout=60, what="cubicled %s to serve" % self.name)
        return self

    def up(self):
        if not self.proc.alive():
            raise RuntimeError("cubicled %s exited:\n%s" % (self.name, self.proc.read_log()))
        try:
            return self.req("GET", "/healthz", key=None, timeout=2).status == 200
        except OSError:
            return False

    def kill9(self):
        self.proc.kill(signal.SIGKILL)

    def stop(self):
        if self.proc:
            self.proc.kill(signal.SIGTERM)

    def req(self, method, path, body=None, key=True, headers=None, timeout=60):
        conn = http.client.HTTPConnection(self.addr, self.port, timeout=timeout)
        return http_call(conn, method, path, body, self.lab.admin if key is True else key,
                         headers)

    def ok(self, method, path, body=None, key=True, status=200, **kw):
        r = self.req(method, path, body, key, **kw)
        if r.status != status:
            raise AssertionError("%s %s %s -> %d %s" % (self.name, method, path, r.status,
                                                        r.body[:600]))
        ct = r.headers.get("content-type", "")
        return r.json if ct.startswith("application/json") else r


class Lab:
    """The whole cluster: `with Lab(hosts=3) as lab: ...`."""

    def __init__(self, hosts=3, ttl=2, node_args=(), start_nodes=True, patroni=False):
        self.nhosts, self.ttl = hosts, ttl
        self.patroni = patroni
        self.node_args = list(node_args)
        self.start_nodes = start_nodes
        self.admin = "ck_admin_" + secrets.token_hex(16)
        self.tmp = tempfile.mkdtemp(prefix="cubicle-cluster-")
        os.chmod(self.tmp, 0o755)
        self.secret_file = os.path.join(self.tmp, "cluster.secret")
        with open(self.secret_file, "w") as f:
            f.write(secrets.token_hex(32) + "\n")
        os.chmod(self.secret_file, 0o600)
        self.net = self.etcd = self.pg = None
        self.nodes = []

    @property
    def database_url(self):
        return self.pg.url

    def __enter__(self):
        try:
            self.net = Net().__enter__()
            self.etcd = Etcd(self.net, self.tmp).__enter__()
            self.pg = (Patroni(self.net, self.tmp, self.etcd) if self.patroni else
                       Postgres(self.net, self.tmp)).__enter__()
            self.nodes = [Node(self, "n%d" % (i + 1)) for i in range(self.nhosts)]
            if self.start_nodes:
                for n in self.nodes:
                    n.start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc):
        self.close()

    def node(self, name):
        return next(n for n in self.nodes if n.name == name)

    def close(self):
        # Every computer goes: hosts killed meanwhile come back first (a new
        # epoch cleans up what the old one left), then each deletes its own.
        for n in self.nodes:
            try:
                if n.proc and not n.proc.alive():
                    n.start()
            except Exception as e:  # noqa: BLE001
                print("lab: %s did not come back: %s" % (n.name, e), file=sys.stderr)
        for n in self.nodes:
            try:
                if n.proc and n.proc.alive():
                    for c in n.ok("GET", "/v1/computers?host=" + n.name)["computers"]:
                        n.req("DELETE", "/v1/computers/" + c["id"])
            except Exception as e:  # noqa: BLE001
                print("lab: cleaning %s: %s" % (n.name, e), file=sys.stderr)
        for n in self.nodes:
            n.stop()
            unmount_sessions(n.state)
        # A sanitizer build's report (CUBICLE_BUILD=build-asan) fails the
        # lab: cubicled keeps running after UBSan's, and LeakSanitizer's
        # comes at exit, after every assertion.
        reports = []
        for n in self.nodes:
            if n.proc and os.path.exists(n.proc.log_path):
                with open(n.proc.log_path, "rb") as f:
                    text = f.read().decode("utf-8", "replace")
                for mark in ("ERROR: AddressSanitizer", "ERROR: LeakSanitizer",
                             "runtime error:"):
                    i = text.find(mark)
                    if i >= 0:
                        reports.append("%s: %s" % (n.name, text[max(0, i - 200):i + 2000]))
        if self.pg:
            self.pg.__exit__()
        if self.etcd:
            self.etcd.__exit__()
        if self.net:
            self.net.close()
        if os.environ.get("CUBICLE_KEEP_LAB"):
            print("lab: kept %s" % self.tmp, file=sys.stderr)
        else:
            shutil.rmtree(self.tmp, ignore_errors=True)
        if reports:
            raise AssertionError("sanitizer reports in cubicled's logs:\n" +
                                 "\n".join(reports))
