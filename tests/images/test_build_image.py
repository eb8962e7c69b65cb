"""rootfs/build-image's cache: a hit rebuilds nothing and waits for no other
build, and an interrupted build (SIGINT, SIGTERM, or SIGKILL of everything it
started) leaves no image, no partial tree, no mount and no process behind,
and the next build is not confused by what a killed one left.

Every build runs against a temporary cache (its own locks, its own deb
cache). The hit finds a hardlinked copy of the current `make images`
sandbox there. The interrupted builds are stopped during debootstrap,
seconds after they start; the
build that must complete afterwards gets the base tree and kernel of the
current `make images` (hardlinked from the shared cache) so it only has to
copy, add envd and run mkfs. Runs as root, like build-image.
"""

import fcntl
import os
import re
import shutil
import signal
import subprocess
import tempfile
import threading
import unittest

from guest import IMAGES, harness, wait_until

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BUILD_IMAGE = os.path.join(ROOT, "rootfs", "build-image")
IMAGE = os.path.join(IMAGES, "sandbox")


def session_pids(sid):
    """Pids of the processes in session sid (what a build started)."""
    pids = []
    for p in os.listdir("/proc"):
        if not p.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % p) as f:
                stat = f.read()
        except OSError:
            continue
        # Fields after the command (which may hold spaces): state ppid pgrp session.
        if int(stat.rsplit(")", 1)[1].split()[3]) == sid:
            pids.append(int(p))
    return pids


def kill_session(sid):
    """SIGKILL to every process of session sid, again until none is left
    alive (one may fork while the others die, or end on its own first)."""
    for _ in range(100):
        alive = 0
        for p in session_pids(sid):
            try:
                with open("/proc/%d/stat" % p) as f:
                    if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                        continue
                os.kill(p, signal.SIGKILL)
                alive += 1
            except (OSError, ProcessLookupError):
                pass
        if not alive:
            return


def process_named(pids, name):
    for p in pids:
        try:
            with open("/proc/%d/comm" % p) as f:
                if f.read().strip() == name:
                    return p
        except OSError:
            pass
    return None


def mounts_under(path):
    with open("/proc/mounts") as f:
        return [m.split()[1] for m in f if m.split()[1].startswith(path + "/")]


class Build:
    """One build-image run in its own session, its output collected."""

    def __init__(self, build_dir, cache, name="sandbox"):
        env = dict(os.environ, CUBICLE_IMAGE_CACHE=cache)
        env.pop("CUBICLE_IMAGE_VERBOSE", None)
        self.proc = subprocess.Popen([BUILD_IMAGE, name, build_dir], env=env,
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, start_new_session=True)
        self.lines = []
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self):
        for line in self.proc.stdout:
            self.lines.append(line.decode(errors="replace").rstrip("\n"))

    @property
    def output(self):
        return "\n".join(self.lines)

    def running(self):
        if self.proc.poll() is not None:
            raise AssertionError("build-image ended (%d) before it was interrupted:\n%s" % (
                self.proc.returncode, self.output))
        return True

    def wait(self, timeout=60):
        rc = self.proc.wait(timeout=timeout)
        self.reader.join(timeout=10)
        self.proc.stdout.close()
        return rc


class BuildImage(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if os.geteuid() != 0:
            raise unittest.SkipTest("build-image runs as root")
        if not os.path.isfile(os.path.join(IMAGE, "manifest.json")):
            raise AssertionError("%s is missing: run `make images` first" % IMAGE)

    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="cubicle-build-test-", dir="/var/tmp")
        # A build dir of its own holding the same envd: build/images keeps its
        # links, and the image hash is the one `make images` made.
        self.build_dir = os.path.join(self.tmp, "build")
        os.makedirs(os.path.join(self.build_dir, "bin"))
        shutil.copy2(os.path.join(harness.BIN, "envd"), os.path.join(self.build_dir, "bin"))
        self.cache = os.path.join(self.tmp, "cache")
        self.builds = []

    def tearDown(self):
        for b in self.builds:
            kill_session(b.proc.pid)
            b.wait(30)
        shutil.rmtree(self.tmp, ignore_errors=True)

    def start(self, cache=None):
        b = Build(self.build_dir, cache or self.cache)
        self.builds.append(b)
        return b

    def start_debootstrap(self):
        """A build in the temporary cache, caught while debootstrap works."""
        b = self.start()
        wait_until(lambda: b.running() and any("debootstrap --variant=minbase" in line
                                               for line in b.lines),
                   60, "build-image to reach debootstrap")
        work = wait_until(lambda: b.running() and [
            e for e in os.listdir(self.cache) if e.startswith(".build-sandbox-")], 30,
            "the build's temporary directory")
        work = os.path.join(self.cache, work[0])
        # debootstrap has begun writing the tree (its own work directory).
        wait_until(lambda: b.running() and
                   process_named(session_pids(b.proc.pid), "debootstrap") and
                   os.path.isdir(os.path.join(work, "base", "rootfs", "debootstrap")),
                   60, "debootstrap to be writing the tree")
        return b, work

    def assert_nothing_left(self, b, allowed=(".lock", ".prune.lock", "debs")):
        left = sorted(set(os.listdir(self.cache)) - set(allowed))
        self.assertEqual(left, [], "left in the cache after the build ended:\n" + b.output)
        self.assertEqual(mounts_under(self.tmp), [])
        wait_until(lambda: not session_pids(b.proc.pid), 10,
                   "every process of the interrupted build to be gone")
        self.assertFalse(os.path.exists(os.path.join(self.build_dir, "images", "sandbox")))

    def test_cache_hit_rebuilds_nothing(self):
        # The current sandbox image, hardlinked into the temporary cache under
        # its own name, and that cache's build lock held as by a long build
        # of another image: a hit needs neither a build nor the lock.
        image_dir = os.path.join(self.cache, os.path.basename(os.path.realpath(IMAGE)))
        os.makedirs(self.cache)
        subprocess.run(["cp", "-al", os.path.realpath(IMAGE), image_dir], check=True)
        files = ("manifest.json", "disk.ext4", "rootfs/usr/local/bin/envd")
        before = {f: os.stat(os.path.join(image_dir, f)) for f in files}
        with open(os.path.join(image_dir, "manifest.json"), "rb") as f:
            manifest = f.read()
        entries = sorted(os.listdir(self.cache))
        with open(os.path.join(self.cache, ".lock"), "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            b = self.start()
            try:
                rc = b.wait(60)
            except subprocess.TimeoutExpired:
                self.fail("build-image did not return while another build held the lock "
                          "(is build/images/sandbox current? run make images):\n" + b.output)
        self.assertEqual(rc, 0, b.output)
        self.assertRegex(b.output, r"cached: .* -> " + re.escape(image_dir))
        self.assertNotIn("building image", b.output)
        self.assertEqual(os.path.realpath(os.path.join(self.build_dir, "images", "sandbox")),
                         image_dir)
        for f, st in before.items():
            now = os.stat(os.path.join(image_dir, f))
            self.assertEqual((now.st_ino, now.st_size, now.st_mtime_ns),
                             (st.st_ino, st.st_size, st.st_mtime_ns), f)
        with open(os.path.join(image_dir, "manifest.json"), "rb") as f:
            self.assertEqual(f.read(), manifest)
        self.assertEqual(sorted(set(os.listdir(self.cache)) - {".lock", ".prune.lock"}),
                         sorted(set(entries) - {".lock"}), "the hit added or removed entries")

    def test_interrupt_leaves_nothing(self):
        for sig, rc in ((signal.SIGINT, 130), (signal.SIGTERM, 143)):
            with self.subTest(signal=sig.name):
                b, work = self.start_debootstrap()
                os.kill(b.proc.pid, sig)
                self.assertEqual(b.wait(60), rc, b.output)
                self.assertIn("interrupted; the partial build is removed", b.output)
                self.assertFalse(os.path.exists(work))
                self.assert_nothing_left(b)

    def test_next_build_after_sigkill(self):
        # SIGKILL to every process of the build: no trap runs, so the
        # temporary directory stays; its mounts died with their namespaces.
        b, work = self.start_debootstrap()
        kill_session(b.proc.pid)
        b.wait(30)
        self.assertTrue(os.path.isdir(work))
        self.assertEqual(mounts_under(self.tmp), [])
        self.assertFalse([e for e in os.listdir(self.cache)
                          if e.startswith(("sandbox-", "base-", "small-kernel-"))])

        # The next build, with the current base tree and kernel at hand,
        # removes the leftover and completes. (Without them, when the shared
        # cache no longer holds them, it removes the leftover and gets as far
        # as debootstrap in a fresh directory: a full build is minutes.)
        if not self.seed_base_and_kernel():
            b, fresh = self.start_debootstrap()
            self.assertFalse(os.path.exists(work))
            self.assertNotEqual(fresh, work)
            os.kill(b.proc.pid, signal.SIGINT)
            self.assertEqual(b.wait(60), 130, b.output)
            self.assert_nothing_left(b)
            return
        b = self.start()
        self.assertEqual(b.wait(120), 0, b.output)
        self.assertFalse(os.path.exists(work))
        self.assertFalse([e for e in os.listdir(self.cache) if e.startswith(".build-")])
        out = os.path.realpath(os.path.join(self.build_dir, "images", "sandbox"))
        self.assertEqual(os.path.dirname(out), self.cache)
        self.assertEqual(os.path.basename(out), os.path.basename(os.path.realpath(IMAGE)))
        self.assertTrue(os.path.isfile(os.path.join(out, "manifest.json")))
        self.assertTrue(os.access(os.path.join(out, "rootfs", "usr", "local", "bin", "envd"),
                                  os.X_OK))

    def test_interrupted_kernel_build_leaves_nothing(self):
        # With the base tree at hand and no kernel, the build goes on to the
        # small kernel's build (minutes): stopped while it unpacks the
        # source, the ~1 GB build tree goes with the build's directory.
        if not self.seed_base_and_kernel(("base",)):
            self.skipTest("the shared cache no longer holds the sandbox's base tree")
        base = [e for e in os.listdir(self.cache) if e.startswith("base-")]
        b = self.start()
        work = wait_until(lambda: b.running() and [
            os.path.join(self.cache, e) for e in os.listdir(self.cache)
            if e.startswith(".build-sandbox-") and any(
                k.startswith("small-kernel.tmp.")
                for k in os.listdir(os.path.join(self.cache, e)))], 60,
            "the kernel's build directory")[0]
        self.assertIn("kernel: building", b.output)
        os.kill(b.proc.pid, signal.SIGINT)
        self.assertEqual(b.wait(60), 130, b.output)
        self.assertIn("interrupted; the partial build is removed", b.output)
        self.assertFalse(os.path.exists(work))
        self.assert_nothing_left(b, (".lock", ".prune.lock") + tuple(base))

    def seed_base_and_kernel(self, kinds=("base", "kernel")):
        """Hardlinks into the temporary cache the base tree and kernel (or
        only those in kinds) the current sandbox image was made from (it
        shares their inodes); False when the shared cache no longer holds
        them."""
        image = os.path.realpath(IMAGE)
        shared = os.path.dirname(image)
        ino = os.stat(os.path.join(image, "rootfs", "etc", "passwd")).st_ino
        kino = os.stat(os.path.join(image, "vmlinuz")).st_ino
        found = {}
        for e in os.listdir(shared):
            p = os.path.join(shared, e)
            try:
                if e.startswith("base-sandbox-") and \
                        os.stat(os.path.join(p, "rootfs", "etc", "passwd")).st_ino == ino:
                    found["base"] = e
                elif e.startswith("small-kernel-") and os.stat(os.path.join(p, "vmlinuz")).st_ino == kino:
                    found["kernel"] = e
            except OSError:
                continue
        if any(k not in found for k in kinds):
            return False
        os.makedirs(self.cache, exist_ok=True)
        for e in (found[k] for k in kinds):
            subprocess.run(["cp", "-al", os.path.join(shared, e), os.path.join(self.cache, e)],
                           check=True)
        return True

if __name__ == "__main__":
    unittest.main()
