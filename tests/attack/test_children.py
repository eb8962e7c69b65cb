"""Issue 11, item 8: what cubicled's children inherit.

Before the fix every program cubicled started (QEMU, mkfs.ext4, qemu-img)
got cubicled's environment, CUBICLE_ADMIN_KEY included, and descriptors
other threads had open without O_CLOEXEC, such as a tenant's upload spool
(a dup() of it). Here, with an upload of another workspace held open in the
middle of its body, a container sandbox and a microVM sandbox start; the
host's /proc of every process of theirs (the guest's init and envd,
slirp4netns, QEMU), of cubicled itself, and what stand-ins for mkfs.ext4
and qemu-img saw of their own environment and descriptors hold no admin
key, no secret of cubicled's environment and no descriptor on the state
directory but the computer's own files.
"""

import os
import shutil
import socket
import stat
import tempfile
import unittest

import attack
from attack import wait_until

CANARY = "CUBICLE_TEST_CANARY"
canary_value = "canary-" + os.urandom(8).hex()
srv = None
wrap = None


def write_wrapper(name, real):
    """An executable `name` in wrap/ that records what it got, then runs real."""
    path = os.path.join(wrap, name)
    with open(path, "w") as f:
        f.write("#!/bin/sh\n"
                "out=%s/seen-%s.$$\n"
                "cat /proc/$$/environ > \"$out.env\" 2>/dev/null\n"
                "for fd in /proc/$$/fd/*; do echo \"$fd $(readlink $fd)\"; done > \"$out.fd\"\n"
                "exec %s \"$@\"\n" % (wrap, name, real))
    os.chmod(path, 0o755)


def which(name):
    for d in os.environ.get("PATH", "").split(":") + ["/usr/sbin", "/sbin", "/usr/bin"]:
        p = os.path.join(d, name)
        if d and os.access(p, os.X_OK):
            return p
    return None


def setUpModule():
    global srv, wrap
    wrap = tempfile.mkdtemp(prefix="cubicle-wrap-")
    os.chmod(wrap, 0o755)
    for name in ("mkfs.ext4", "qemu-img"):
        real = which(name)
        if real:
            write_wrapper(name, real)
    old_path = os.environ.get("PATH", "")
    os.environ["PATH"] = wrap + ":" + old_path
    os.environ[CANARY] = canary_value
    try:
        srv = attack.Cubicled().start()
    finally:
        os.environ["PATH"] = old_path
        del os.environ[CANARY]


def tearDownModule():
    srv.stop()
    shutil.rmtree(wrap, ignore_errors=True)


def computer_pids(cid):
    """Host pids in the computer's cgroups (its init, envd, slirp4netns, QEMU)."""
    out = []
    for p in os.listdir("/proc"):
        if p.isdigit():
            try:
                with open("/proc/%s/cgroup" % p) as f:
                    if cid in f.read():
                        out.append(int(p))
            except OSError:
                pass
    return out


def comm(pid):
    try:
        with open("/proc/%d/comm" % pid) as f:
            return f.read().strip()
    except OSError:
        return "?"


class Children(unittest.TestCase):
    def secrets(self):
        return [srv.admin.encode(), canary_value.encode()]

    def check_environ(self, what, data):
        for s in self.secrets():
            self.assertNotIn(s, data, "%s's environment holds a secret of cubicled's" % what)

    def check_fds(self, what, links, own=()):
        """links: descriptor targets. Nothing of the state directory but
        the computer's own directory."""
        state = os.path.realpath(srv.state)
        for t in links:
            if not t.startswith("/"):
                continue
            if t.startswith(state + "/") or t == state:
                rel = os.path.relpath(t.split(" (deleted)")[0], state)
                self.assertTrue(any(rel.startswith(o) for o in own),
                                "%s holds %s" % (what, t))
            self.assertNotIn("/spool/", t, "%s holds an upload spool: %s" % (what, t))

    def held_upload(self, key):
        """An upload of another workspace, its body half sent, held open."""
        s = socket.create_connection(("127.0.0.1", srv.port))
        s.sendall(b"PUT /v1/sessions/held/files?path=input/big HTTP/1.1\r\n"
                  b"Host: 127.0.0.1\r\nAuthorization: Bearer " + key.encode() +
                  b"\r\nContent-Length: 10000000\r\n\r\n" + b"x" * 65536)
        spool = os.path.join(srv.state, "spool")
        wait_until(lambda: any("upload-" in os.readlink("/proc/%d/fd/%s" % (srv.proc.pid, fd))
                               for fd in os.listdir("/proc/%d/fd" % srv.proc.pid)
                               if os.path.islink("/proc/%d/fd/%s" % (srv.proc.pid, fd))),
                   10, "cubicled to spool the upload in " + spool)
        return s

    def check_cloexec(self):
        """Every descriptor cubicled has open past stdin/stdout/stderr is
        O_CLOEXEC, so no exec can carry it off."""
        pid = srv.proc.pid
        for fd in os.listdir("/proc/%d/fd" % pid):
            if int(fd) < 3:
                continue
            try:
                with open("/proc/%d/fdinfo/%s" % (pid, fd)) as f:
                    flags = int(f.read().split("flags:")[1].split()[0], 8)
                target = os.readlink("/proc/%d/fd/%s" % (pid, fd))
            except (OSError, IndexError):
                continue  # closed meanwhile
            self.assertTrue(flags & 0o2000000, "cubicled's fd %s (%s) is not O_CLOEXEC" %
                            (fd, target))

    def test_cubicled_itself(self):
        with open("/proc/%d/environ" % srv.proc.pid, "rb") as f:
            self.check_environ("cubicled", f.read().replace(canary_value.encode(), b""))

    def test_children_of_both_drivers(self):
        ws, key = srv.workspace("victim")
        ws2, key2 = srv.workspace("observer")
        held = self.held_upload(key)
        self.check_cloexec()
        made = []
        try:
            for iso in ("container", "vm"):
                c = srv.computer(key2, kind="sandbox", size="sm", isolation=iso,
                                 timeout_s=180)
                made.append(c["id"])
                pids = computer_pids(c["id"])
                names = sorted(comm(p) for p in pids)
                if iso == "vm":
                    self.assertTrue(any(n.startswith("qemu") for n in names), names)
                else:
                    self.assertIn("slirp4netns", names)
                    self.assertTrue(any(n in ("tini", "envd") for n in names), names)
                for p in pids:
                    what = "%s %d (%s)" % (iso, p, comm(p))
                    try:
                        with open("/proc/%d/environ" % p, "rb") as f:
                            self.check_environ(what, f.read())
                        links = []
                        for fd in os.listdir("/proc/%d/fd" % p):
                            try:
                                links.append(os.readlink("/proc/%d/fd/%s" % (p, fd)))
                            except OSError:
                                pass
                    except (FileNotFoundError, ProcessLookupError):
                        continue
                    self.check_fds(what, links, own=("computers/" + c["id"],))
            # What the short-lived tools saw (recorded by the stand-ins).
            seen = [n for n in os.listdir(wrap) if n.startswith("seen-")]
            if which("mkfs.ext4"):
                self.assertTrue(any(n.startswith("seen-mkfs") for n in seen), seen)
            for n in seen:
                with open(os.path.join(wrap, n), "rb") as f:
                    data = f.read()
                if n.endswith(".env"):
                    self.check_environ(n, data)
                else:
                    links = [line.split(" ", 1)[1] for line in data.decode().splitlines()
                             if " " in line]
                    self.check_fds(n, links, own=("computers/",))
        finally:
            held.close()
            for cid in made:
                srv.req("DELETE", "/v1/computers/" + cid, key=key2)


if __name__ == "__main__":
    unittest.main()
