"""cubicled on PostgreSQL (--database, host/store/README.md), end to end
through the API: two cubicleds on one database share workspaces and keys
(a key revoked through one fails on the other within a second), and a
database that goes away is a 503 that says so, never a hang, after which
both carry on by themselves. No computers here: the store's own cases, on
both back ends, are tests/unit/test_store.c.

The server: Debian's postgresql-15, initdb'd into a temporary directory as
uid 65534, on a UNIX socket in that directory only. Skipped when the
binaries are not installed."""

import ctypes
import os
import shutil
import signal
import subprocess
import tempfile
import time
import unittest

from cubicled import Cubicled, wait_until

PG_BIN = os.environ.get("CUBICLE_PG_BIN", "/usr/lib/postgresql/15/bin")
PG_UID = 65534


def as_pg_user():
    """preexec_fn: the server's user, dying with the test (SIGQUIT)."""
    if os.getuid() == 0:
        os.setgroups([])
        os.setgid(PG_UID)
        os.setuid(PG_UID)
    ctypes.CDLL(None).prctl(1, signal.SIGQUIT)  # PR_SET_PDEATHSIG


class PgServer:
    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="cubicle-database-")
        self.data = os.path.join(self.dir, "data")
        self.sock = os.path.join(self.dir, "sock")
        os.chmod(self.dir, 0o711)
        for d in (self.data, self.sock):
            os.mkdir(d, 0o700)
            if os.getuid() == 0:
                os.chown(d, PG_UID, PG_UID)
        self.log = open(os.path.join(self.dir, "postgres.log"), "ab")
        subprocess.run([os.path.join(PG_BIN, "initdb"), "-D", self.data, "-U", "cubicle",
                        "-A", "trust", "-E", "UTF8", "--locale=C", "--no-sync",
                        "--no-instructions"], check=True, stdout=self.log, stderr=self.log,
                       preexec_fn=as_pg_user, env={"PATH": "/usr/bin:/bin", "LC_ALL": "C"})
        self.proc = None
        self.start()
        self.sql("postgres", "CREATE DATABASE cubicle")

    def start(self):
        self.proc = subprocess.Popen(
            [os.path.join(PG_BIN, "postgres"), "-D", self.data, "-k", self.sock, "-c",
             "listen_addresses=", "-c", "fsync=off"], stdout=self.log, stderr=self.log,
            preexec_fn=as_pg_user, env={"PATH": "/usr/bin:/bin", "LC_ALL": "C"})
        wait_until(lambda: self.sql("postgres", "SELECT 1", check=False) == 0, timeout=60,
                   what="postgres to answer")

    def stop(self):
        self.proc.send_signal(signal.SIGINT)  # fast shutdown: sessions ended
        self.proc.wait()

    def sql(self, db, sql, check=True):
        return subprocess.run([os.path.join(PG_BIN, "psql"), "-h", self.sock, "-U", "cubicle",
                               "-d", db, "-qAtc", sql], check=check,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode

    def uri(self):
        return "postgresql:///cubicle?host=%s&user=cubicle" % self.sock

    def remove(self):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGQUIT)
            self.proc.wait()
        self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)


@unittest.skipUnless(os.access(os.path.join(PG_BIN, "postgres"), os.X_OK),
                     "PostgreSQL 15 is not installed (Debian's postgresql-15)")
class Database(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.pg = PgServer()
        # One passes the URI in the environment, the other on the command line.
        os.environ["CUBICLE_DATABASE"] = cls.pg.uri()
        try:
            cls.a = Cubicled().start()
        finally:
            del os.environ["CUBICLE_DATABASE"]
        cls.b = Cubicled(["--database", cls.pg.uri()]).start()

    @classmethod
    def tearDownClass(cls):
        cls.a.stop()
        cls.b.stop()
        cls.pg.remove()

    def test_both_hosts_share_workspaces_and_keys(self):
        ws, key = self.a.workspace("shared")
        self.assertEqual(self.b.ok("GET", "/v1/workspaces/" + ws)["name"], "shared")
        # A key made through a works through b once b's listener has it.
        wait_until(lambda: self.b.req("GET", "/v1/computers", key=key).status == 200,
                   timeout=10, what="b to accept a's key")
        kid = self.b.ok("GET", "/v1/workspaces/%s/keys" % ws)["keys"][0]["id"]
        self.b.ok("DELETE", "/v1/workspaces/%s/keys/%s" % (ws, kid))
        t0 = time.monotonic()
        wait_until(lambda: self.a.req("GET", "/v1/computers", key=key).status == 401,
                   timeout=10, what="a to refuse the key b revoked")
        print("a key revoked through b fails on a after %.0f ms"
              % ((time.monotonic() - t0) * 1000))
        # The URI was wiped from a's environment; its log names the back end.
        with open("/proc/%d/environ" % self.a.proc.pid, "rb") as f:
            self.assertNotIn(b"cubicle?host=", f.read())
        self.assertIn("store: postgresql", self.a.read_log())

    def test_an_outage_is_a_503_then_both_carry_on(self):
        ws, key = self.a.workspace("before")
        wait_until(lambda: self.b.req("GET", "/v1/computers", key=key).status == 200,
                   timeout=10, what="b to accept a's key")
        self.pg.stop()
        try:
            for host in (self.a, self.b):
                t0 = time.monotonic()
                r = host.req("POST", "/v1/workspaces", {"name": "during"})
                self.assertEqual(r.status, 503, r.body)
                self.assertEqual(r.json["error"]["code"], "unavailable")
                self.assertIn("database", r.json["error"]["message"])
                self.assertLess(time.monotonic() - t0, 20)  # a bound: never a hang
                r = host.req("GET", "/v1/computers", key=key)
                self.assertEqual(r.status, 503, r.body)
        finally:
            self.pg.start()
        for host in (self.a, self.b):
            wait_until(lambda h=host: h.req("POST", "/v1/workspaces",
                                            {"name": "after"}).status == 201,
                       timeout=30, what="the store to reconnect")
        self.assertEqual(self.b.ok("GET", "/v1/workspaces/" + ws)["name"], "before")
        self.assertEqual(self.a.req("GET", "/v1/computers", key=key).status, 200)


if __name__ == "__main__":
    unittest.main()
