"""Templates end to end (docs/templates.md): real cubicled, real builds in
container computers of the sandbox image, real apt from Debian's mirror,
the real image cache; computers started from templates, in both drivers.

The good recipes are cached by content hash in the image cache, as the
images are: a warm run finds them (the second create of a recipe is a hit
in any run). Every bad recipe builds for real and must leave nothing
behind: no build directory, computer, cgroup, uid range or loop device,
and a row that says why in `error`."""

import glob
import json
import os
import re
import shutil
import signal
import tempfile
import time
import unittest

from cubicled import Cubicled, unmount_sessions, wait_until
import pkgrepo

JQ = {"apt": ["jq"],
      "files": {"/home/user/in.json": "{\"city\": \"Oslo\", \"n\": 7}\n",
                "/etc/cubicle-test/motd": "from a template\n"},
      "run": ["mkdir -p /opt/t && echo built > /opt/t/stamp",
              # A recipe cannot ship a way to root: the setuid bits go.
              "cp /bin/bash /opt/t/rootbash && chmod 4755 /opt/t/rootbash && chmod u+s /usr/bin/jq",
              "mkfifo /opt/t/fifo"]}

srv = None
ws = key = ws2 = key2 = None


def setUpModule():
    global srv, ws, key, ws2, key2
    srv = Cubicled(["--max-templates-per-workspace", "6", "--template-max-mb", "24",
                    "--template-build-timeout", "240"]).start()
    ws, key = srv.workspace("tpl-alpha")
    ws2, key2 = srv.workspace("tpl-beta")


def tearDownModule():
    srv.stop()


def create(body, k=None, status=202):
    return srv.ok("POST", "/v1/templates", body, key=k or key, status=status)


def wait_ready(name, k=None, timeout=900):
    return srv.ok("GET", "/v1/templates/%s?wait=ready&timeout_s=%d" % (name, timeout),
                  key=k or key, timeout=timeout + 30)


def bash(cid, cmd, k=None):
    return srv.act(cid, "bash", {"command": cmd}, key=k or key)


def full_log(name, k=None):
    """The build's log read as a client follows it: offset by offset until
    the build is over. Returns (pieces, text)."""
    pieces, off = [], 0
    while True:
        r = srv.ok("GET", "/v1/templates/%s/log?offset=%d" % (name, off), key=k or key)
        assert r["offset"] == off and r["next_offset"] >= off, r
        if r["log"]:
            pieces.append(r["log"])
        off = r["next_offset"]
        if r["state"] != "building" and off >= r["size"]:
            return pieces, "".join(pieces)
        time.sleep(0.2)


def cache_dir():
    return os.path.dirname(os.path.realpath(os.path.join(
        os.environ.get("CUBICLE_IMAGES") or os.path.join(os.environ["CUBICLE_BUILD"], "images"),
        "sandbox")))


def layer_key(log):
    m = re.search(r"layer key ([0-9a-f]{16})", log)
    return m.group(1) if m else None


def build_ids(log):
    """The build computers a build's log names."""
    return re.findall(r"build computer (tb-[0-9a-f]{16})", log)


def build_leftovers(log):
    """What the build whose log this is could have left on the host: its
    build directory, its computers' cgroups and processes, uid ranges,
    loop devices and mounts."""
    key16 = layer_key(log)
    assert key16, log
    work = ".tpl-build-%s-" % key16
    left = glob.glob(os.path.join(cache_dir(), work + "*"))
    for cid in build_ids(log):
        left += glob.glob("/sys/fs/cgroup/*/cubicle/" + cid) + \
            glob.glob("/sys/fs/cgroup/cubicle/" + cid)
    for slot in glob.glob("/var/lib/cubicle/uid-slots/*"):
        try:
            if work in os.readlink(slot):
                left.append(slot)
        except OSError:
            pass
    for back in glob.glob("/sys/block/loop*/loop/backing_file"):
        try:
            with open(back) as f:
                if work in f.read():
                    left.append(back)
        except OSError:
            pass
    with open("/proc/self/mountinfo") as f:
        left += [line for line in f if work in line]
    return left


class Build(unittest.TestCase):
    def test_build_follow_hit_start_delete(self):
        t = create(dict(JQ, name="jq"))
        self.assertIn(t["state"], ("building", "ready"))  # ready: a warm cache
        self.assertEqual(t["workspace"], ws)
        self.assertFalse(t["global"])
        pieces, log = full_log("jq")
        # Whole, in order: read again from 0 it is the same text.
        again = srv.ok("GET", "/v1/templates/jq/log?offset=0", key=key)["log"]
        self.assertEqual(log, again)
        if t["state"] == "building" and re.search(r"layer tpl-layer-\w+ is in the cache", log):
            # The layer's, only the image made again (pruned, or a new envd).
            self.assertIn("the base tree hard-linked, the layer applied", log)
        elif t["state"] == "building":
            self.assertIn("step", log)
            self.assertIn("Setting up jq", log)
        else:
            self.assertIn("cache hit", log)
        t = wait_ready("jq")
        self.assertEqual(t["state"], "ready", t)
        self.assertGreaterEqual(t["size_mb"], 1)
        self.assertLess(t["size_mb"], 24)
        # The same recipe again: the cache's, at once.
        t0 = time.monotonic()
        hit = create(dict(JQ, name="jq-again"))
        self.assertEqual(hit["state"], "ready")
        self.assertEqual(hit["build_s"], 0)
        self.assertLess(time.monotonic() - t0, 5)
        self.assertIn("cache hit", full_log("jq-again")[1])
        names = [x["name"] for x in srv.ok("GET", "/v1/templates", key=key)["templates"]]
        self.assertIn("jq", names)
        self.assertIn("jq-again", names)

        c = srv.computer(key, template="jq")
        self.assertEqual(c["kind"], "sandbox")
        self.assertEqual(c["template_id"], t["id"])
        out = bash(c["id"], "id -u; jq -r .city ~/in.json; stat -c '%U %a' ~/in.json; "
                            "cat /etc/cubicle-test/motd /opt/t/stamp; stat -c %a /opt/t/rootbash; "
                            "test -e /opt/t/fifo && echo fifo; "
                            "find / -xdev -perm /6000 2>/dev/null | head -3; "
                            "grep ^template= /etc/cubicle/image")
        self.assertEqual(out["exit_code"], 0, out)
        self.assertEqual(out["stdout"].split("\n"),
                         ["1000", "Oslo", "user 644", "from a template", "built", "755",
                          "template=jq", ""])
        # The user's own writes go to its computer, not the template.
        self.assertEqual(bash(c["id"], "touch ~/mine && ls ~/mine")["exit_code"], 0)
        c2 = srv.computer(key, template="jq-again")
        self.assertEqual(bash(c2["id"], "ls ~/mine 2>/dev/null; jq -n 1")["stdout"], "1\n")

        r = srv.req("DELETE", "/v1/templates/jq", key=key)
        self.assertEqual(r.status, 409, r.body)
        self.assertIn(c["id"], r.json["error"]["message"])
        srv.ok("DELETE", "/v1/computers/" + c["id"], key=key)
        srv.ok("DELETE", "/v1/templates/jq", key=key)
        self.assertEqual(srv.req("GET", "/v1/templates/jq", key=key).status, 404)
        r = srv.req("POST", "/v1/computers", {"template": "jq"}, key=key)
        self.assertEqual(r.status, 400, r.body)
        self.assertEqual(r.json["error"]["param"], "template")
        # A stopped computer of a template starts again on it.
        srv.ok("POST", "/v1/computers/%s/stop" % c2["id"], key=key)
        srv.ok("POST", "/v1/computers/%s/start?wait=running" % c2["id"], key=key)
        self.assertEqual(bash(c2["id"], "jq -n 2")["stdout"], "2\n")
        srv.ok("DELETE", "/v1/computers/" + c2["id"], key=key)
        srv.ok("DELETE", "/v1/templates/jq-again", key=key)

    def test_other_workspace_sees_nothing(self):
        create({"name": "private", "run": ["echo private > /opt/private"]})
        for method, path in (("GET", "/v1/templates/private"),
                             ("GET", "/v1/templates/private/log"),
                             ("DELETE", "/v1/templates/private")):
            r = srv.req(method, path, key=key2)
            self.assertEqual(r.status, 404, (method, path, r.body))
            self.assertEqual(r.json["error"]["message"], "no template private")
        self.assertNotIn("private", [x["name"] for x in
                                     srv.ok("GET", "/v1/templates", key=key2)["templates"]])
        r = srv.req("POST", "/v1/computers", {"template": "private"}, key=key2)
        self.assertEqual(r.status, 400, r.body)
        self.assertEqual(r.json["error"]["param"], "template")
        # Asking for the other workspace by name changes nothing.
        r = srv.req("GET", "/v1/templates/private?workspace=" + ws, key=key2)
        self.assertEqual(r.status, 400, r.body)
        wait_ready("private")
        srv.ok("DELETE", "/v1/templates/private", key=key)

    def test_workspace_delete_takes_its_templates(self):
        gone, k = srv.workspace("tpl-gone")
        srv.ok("POST", "/v1/templates", {"name": "doomed", "run": ["true"]}, key=k, status=202)
        srv.ok("DELETE", "/v1/workspaces/%s?confirm=%s" % (gone, gone))
        self.assertNotIn(gone, [t["workspace"] for t in
                                srv.ok("GET", "/v1/templates")["templates"]])

    def test_global_template_both_drivers(self):
        g = srv.ok("POST", "/v1/templates", {"name": "g-jq", "apt": ["jq"]}, status=202)
        self.assertTrue(g["global"])
        self.assertIsNone(g["workspace"])
        r = srv.req("POST", "/v1/templates", {"name": "g-jq", "run": ["true"]}, key=key)
        self.assertEqual(r.status, 409, r.body)  # a workspace cannot take a global name
        self.assertIn("g-jq", [x["name"] for x in
                               srv.ok("GET", "/v1/templates", key=key2)["templates"]])
        self.assertEqual(wait_ready("g-jq")["state"], "ready")
        r = srv.req("DELETE", "/v1/templates/g-jq", key=key)
        self.assertEqual(r.status, 403, r.body)
        c = srv.computer(key2, template="g-jq", isolation="vm", timeout_s=300)
        self.assertEqual(c["isolation"], "vm")
        self.assertEqual(bash(c["id"], "echo '[3]' | jq '.[0]'", k=key2)["stdout"], "3\n")
        srv.ok("DELETE", "/v1/computers/" + c["id"], key=key2)
        # A workspace's template never boots as a microVM.
        create({"name": "mine-vm", "run": ["true"]})
        wait_ready("mine-vm")
        r = srv.req("POST", "/v1/computers", {"template": "mine-vm", "isolation": "vm"}, key=key)
        self.assertEqual(r.status, 400, r.body)
        self.assertEqual(r.json["error"]["param"], "isolation")
        srv.ok("DELETE", "/v1/templates/mine-vm", key=key)
        srv.ok("DELETE", "/v1/templates/g-jq")


class BadRecipes(unittest.TestCase):
    def refused(self, body, param, status=400, k=None):
        r = srv.req("POST", "/v1/templates", body, key=k or key)
        self.assertEqual(r.status, status, (body, r.body))
        if param:
            self.assertEqual(r.json["error"].get("param"), param, r.body)
        name = body.get("name")
        if status == 400 and isinstance(name, str) and re.fullmatch(r"[A-Za-z0-9_-]{1,63}", name):
            # Refused: no row was made.
            self.assertEqual(srv.req("GET", "/v1/templates/" + name, key=k or key).status, 404)
        return r.json["error"]["message"]

    def failed(self, name, body, code_words):
        create(dict(body, name=name))
        t = wait_ready(name, timeout=300)
        self.assertEqual(t["state"], "error", t)
        for w in code_words:
            self.assertIn(w, t["error"])
        log = full_log(name)[1]
        self.assertIn("failed:", log)
        k16 = layer_key(log)
        self.assertTrue(build_ids(log), log)
        self.assertEqual(build_leftovers(log), [])
        self.assertFalse(glob.glob(os.path.join(cache_dir(), "tpl-layer-%s" % k16)))
        r = srv.req("POST", "/v1/computers", {"template": name}, key=key)
        self.assertEqual(r.status, 409, r.body)
        self.assertIn("failed to build", r.json["error"]["message"])
        srv.ok("DELETE", "/v1/templates/" + name, key=key)
        return t

    def test_names_and_fields(self):
        for name in ("../etc", "a/b", "", "x" * 64, "sp ace", "dot.ted", "ü"):
            self.refused({"name": name, "run": ["true"]}, "name")
        self.refused({"run": ["true"]}, "name")
        self.refused({"name": "e"}, "apt")  # nothing to do
        self.refused({"name": "b", "base": "windows", "run": ["true"]}, "base")
        self.refused({"name": "b", "run": ["true"], "dockerfile": "FROM x"}, "dockerfile")
        for pkg in ("jq; rm -rf /", "jq'", "-o=Dpkg::Options::=--force-all", "../x.deb",
                    "/tmp/x.deb", "j", "http://x/y.deb"):
            self.refused({"name": "a", "apt": [pkg]}, "apt")
        for pkg in ("--index-url=http://10.0.0.1/", "git+https://x/y", "./pkg", "a b",
                    "x @ file:///etc/passwd"):
            self.refused({"name": "p", "pip": [pkg]}, "pip")
        for pkg in ("file:../x", "git+ssh://x/y.git", "https://x/y.tgz", "a/b", "../up",
                    "x@file:/etc"):
            self.refused({"name": "n", "npm": [pkg]}, "npm")
        for path in ("relative.txt", "/home/user/../../etc/shadow", "/home/user/./x",
                     "/home//user", "/home/user/", "/tmp/x", "/proc/self/x", "/dev/sda",
                     "/run/cubicle/token", "/session/x", "/", "/a\nb"):
            self.refused({"name": "f", "files": {path: "x"}}, "files")
        self.refused({"name": "f", "files": {"/etc/x": 7}}, "files")
        self.refused({"name": "f", "files": {"/etc/%d" % i: "x" for i in range(101)}}, "files")
        self.refused({"name": "r", "run": ["x" * 16385]}, "run")
        self.refused({"name": "r", "run": ["true"] * 101}, "run")
        for bad in ("/v1/templates/..%2f..", "/v1/templates/a%2Fb", "/v1/templates/..",
                    "/v1/templates/%2e%2e/log"):
            self.assertIn(srv.req("GET", bad, key=key).status, (400, 404), bad)
        r = srv.req("GET", "/v1/templates/jq?wait=running", key=key)
        self.assertEqual(r.status, 400)

    def test_name_clash(self):
        create({"name": "clash", "run": ["true"]})
        msg = self.refused({"name": "clash", "run": ["echo other"]}, None, status=409)
        self.assertIn("already exists", msg)
        # Another workspace may use the name.
        create({"name": "clash", "run": ["true"]}, k=key2)
        wait_ready("clash")
        wait_ready("clash", k=key2)
        srv.ok("DELETE", "/v1/templates/clash", key=key)
        srv.ok("DELETE", "/v1/templates/clash", key=key2)

    def test_unknown_package(self):
        self.failed("nopkg", {"apt": ["cubicle-no-such-package"]},
                    ["apt-get install", "Unable to locate package cubicle-no-such-package"])

    def test_failing_step(self):
        t = self.failed("fails", {"run": ["echo fine", "echo something broke >&2; exit 3"]},
                        ["step 2 of 3", "exit code 3", "something broke"])
        self.assertNotIn("step 3", t["error"])

    def test_too_large(self):
        self.failed("big", {"run": ["head -c 40M /dev/urandom > /opt/big"]},
                    ["more than 24 MiB", "--template-max-mb"])


class Limits(unittest.TestCase):
    """A cubicled of one build at a time, a short build timeout and few
    templates per workspace."""

    @classmethod
    def setUpClass(cls):
        cls.d = Cubicled(["--max-template-builds", "1", "--template-build-timeout", "15",
                          "--max-templates-per-workspace", "2"]).start()
        cls.ws, cls.key = cls.d.workspace("limits")

    @classmethod
    def tearDownClass(cls):
        cls.d.stop()

    def test_limits(self):
        d, k = self.d, self.key
        slow = d.ok("POST", "/v1/templates", {"name": "slow", "run": ["sleep 600"]}, key=k,
                    status=202)
        self.assertEqual(slow["state"], "building")
        # One build at a time: another recipe is a 429, and leaves no row.
        r = d.req("POST", "/v1/templates", {"name": "other", "run": ["echo other"]}, key=k)
        self.assertEqual(r.status, 429, r.body)
        self.assertIn("--max-template-builds", r.json["error"]["message"])
        self.assertEqual(d.req("GET", "/v1/templates/other", key=k).status, 404)
        # The time cap: the build stops, says why, leaves nothing.
        t = d.ok("GET", "/v1/templates/slow?wait=ready&timeout_s=300", key=k, timeout=330)
        self.assertEqual(t["state"], "error")
        self.assertIn("--template-build-timeout (15 s)", t["error"])
        log = d.ok("GET", "/v1/templates/slow/log", key=k)["log"]
        self.assertEqual(build_leftovers(log), [])
        # The count: two per workspace.
        d.ok("POST", "/v1/templates", {"name": "two", "run": ["echo two"]}, key=k, status=202)
        r = d.req("POST", "/v1/templates", {"name": "three", "run": ["echo 3"]}, key=k)
        self.assertEqual(r.status, 429, r.body)
        self.assertIn("--max-templates-per-workspace", r.json["error"]["message"])
        d.ok("GET", "/v1/templates/two?wait=ready&timeout_s=300", key=k, timeout=330)
        # Deleting a template while it builds stops its build.
        d.ok("DELETE", "/v1/templates/slow", key=k)
        d.ok("DELETE", "/v1/templates/two", key=k)
        t = d.ok("POST", "/v1/templates", {"name": "cut", "run": ["sleep 600"]}, key=k,
                 status=202)
        log = wait_until(lambda: (lambda x: "step 1" in x and x)(
            d.ok("GET", "/v1/templates/cut/log", key=k)["log"]), 120, "the build to start")
        d.ok("DELETE", "/v1/templates/cut", key=k)
        wait_until(lambda: build_leftovers(log) == [], 60,
                   "the stopped build's computer to go")

    def test_restart_builds_again(self):
        """A cubicled killed during a build builds it again when it comes back, and
        what the killed build left (its computer) goes."""
        d, k = self.d, self.key
        for t in d.ok("GET", "/v1/templates", key=k)["templates"]:
            d.req("DELETE", "/v1/templates/" + t["name"], key=k)
        # A recipe no cache has (a build, not a hit). A build stopped by a
        # delete holds its place until it has cleaned up.
        run = "sleep 4; echo slept %s" % os.urandom(6).hex()
        wait_until(lambda: d.req("POST", "/v1/templates", {"name": "again", "run": [run]},
                                 key=k).status == 202, 60, "a build's place")
        log = wait_until(lambda: (lambda x: "step 1" in x and x)(
            d.ok("GET", "/v1/templates/again/log", key=k)["log"]), 120, "the build to start")
        d.kill9()
        d.restart()
        self.assertNotIn("cache hit", log)
        t = d.ok("GET", "/v1/templates/again?wait=ready&timeout_s=300", key=k, timeout=330)
        self.assertEqual(t["state"], "ready", t)
        self.assertGreater(t["build_ms"], 0)
        self.assertIn("slept", d.ok("GET", "/v1/templates/again/log", key=k)["log"])
        self.assertEqual(build_leftovers(log), [])
        d.ok("DELETE", "/v1/templates/again", key=k)


class Pruning(unittest.TestCase):
    """A cache of its own that keeps no unused entry: a stop right after a
    build (whose prune removes the entry before it) waits for the prune, and
    a removal is a rename into .tpl-trash-* first, so the cache never holds
    half an entry (one whose manifest.json says it is there, its rootfs
    gone: a hit that starts no computer); trash is swept at the next start."""

    def test_stop_mid_prune_leaves_whole_entries(self):
        cache = tempfile.mkdtemp(prefix="cubicle-templates-cache-")
        state = tempfile.mkdtemp(prefix="cubicle-templates-state-")
        d = Cubicled(["--template-cache", cache, "--template-cache-keep", "0"],
                     state_dir=state).start()
        try:
            _, k = d.workspace("prune")
            tag = os.urandom(6).hex()
            d.ok("POST", "/v1/templates", {"name": "one", "run": ["echo one " + tag]},
                 key=k, status=202)
            one = d.ok("GET", "/v1/templates/one?wait=ready&timeout_s=600", key=k,
                       timeout=630)
            self.assertEqual(one["state"], "ready", one)
            d.ok("DELETE", "/v1/templates/one", key=k)
            d.ok("POST", "/v1/templates", {"name": "two", "run": ["echo two " + tag]},
                 key=k, status=202)
            two = d.ok("GET", "/v1/templates/two?wait=ready&timeout_s=600", key=k,
                       timeout=630)
            self.assertEqual(two["state"], "ready", two)
            # Its image keeps its layer's size (a layer may be pruned first).
            for e in glob.glob(os.path.join(cache, "tpl-image-*", "manifest.json")):
                with open(e) as f:
                    self.assertIn("layer_bytes", json.load(f))
            # At once: one's image is being pruned now.
            d.stop(clean=False)
            images = glob.glob(os.path.join(cache, "tpl-image-*"))
            self.assertTrue(images)
            for e in images:
                if os.path.exists(os.path.join(e, "manifest.json")):
                    for part in ("rootfs/proc", "rootfs/etc/os-release", "rootfs/usr/bin",
                                 "vmlinuz"):
                        self.assertTrue(os.path.lexists(os.path.join(e, part)),
                                        "%s has a manifest but no %s" % (e, part))
            # Trash left by a removal cut short goes at the next start.
            trash = os.path.join(cache, ".tpl-trash-abc123")
            os.makedirs(os.path.join(trash, "rootfs", "etc"))
            d.restart()
            self.assertFalse(os.path.exists(trash))
            self.assertEqual(glob.glob(os.path.join(cache, ".tpl-trash-*")), [])
        finally:
            d.stop(clean=False)
            unmount_sessions(state)
            shutil.rmtree(state, ignore_errors=True)
            shutil.rmtree(cache, ignore_errors=True)


class Indexes(unittest.TestCase):
    """pip and npm in a recipe, from a package index and an npm registry this
    test serves itself (pkgrepo.py: a network namespace of its own on
    TEST-NET-2), through cubicled's --pip-index-url and --npm-registry, which
    a build is told like every computer."""

    @classmethod
    def setUpClass(cls):
        cls.repo = pkgrepo.Repo(owner="tpl")
        try:
            cls.repo.make()
            cls.d = Cubicled(["--pip-index-url", cls.repo.pip_index(),
                              "--npm-registry", cls.repo.npm_registry()]).start()
        except BaseException:
            cls.repo.close()
            raise
        cls.ws, cls.key = cls.d.workspace("indexes")

    @classmethod
    def tearDownClass(cls):
        cls.d.stop()
        cls.repo.close()

    def test_pip_and_npm_land_where_the_user_looks(self):
        d, k = self.d, self.key
        d.ok("POST", "/v1/templates", {"name": "pkgs", "pip": [pkgrepo.WHEEL_PROJECT],
                                       "npm": [pkgrepo.NPM_NAME]}, key=k, status=202)
        t = d.ok("GET", "/v1/templates/pkgs?wait=ready&timeout_s=600", key=k, timeout=630)
        self.assertEqual(t["state"], "ready", t)
        fetched = self.repo.requests()
        self.assertIn("/simple/%s/" % pkgrepo.WHEEL_PROJECT, fetched)
        self.assertIn("/npm/%s" % pkgrepo.NPM_NAME, fetched)
        c = d.computer(k, template="pkgs")
        out = d.act(c["id"], "bash", {"command": (
            "python3 -c 'import cubicle_pkgs_demo as m; print(m.VALUE); print(m.__file__)'; "
            "command -v %s; %s; find ~ ! -user user | head -3") % ((pkgrepo.NPM_NAME,) * 2)},
            key=k)
        lines = out["stdout"].split("\n")
        self.assertEqual(lines[0], pkgrepo.WHEEL_VALUE, out)
        self.assertTrue(lines[1].startswith("/home/user/.venv/lib/"), lines)
        self.assertEqual(lines[2], "/home/user/.npm-global/bin/" + pkgrepo.NPM_NAME)
        self.assertEqual(lines[3:], [pkgrepo.NPM_OUTPUT, ""], out)  # all of ~ is the user's
        d.ok("DELETE", "/v1/computers/" + c["id"], key=k)
        d.ok("DELETE", "/v1/templates/pkgs", key=k)

    def test_the_egress_policy_applies_to_builds(self):
        """A workspace that may not reach the index's address cannot from a
        build either (the address is this test's own namespace's)."""
        d = self.d
        blocked, bk = d.workspace("no-index", egress_deny=[self.repo.addr + "/32"])
        step = "curl -s -o /dev/null -w '%%{http_code}\\n' %s/simple/ || echo unreachable" \
            % self.repo.base
        for k, name in ((self.key, "reach"), (bk, "reach")):
            d.ok("POST", "/v1/templates", {"name": name, "run": ["{ %s; } > /etc/reached" % step]},
                 key=k, status=202)
        results = {}
        for k in (self.key, bk):
            t = d.ok("GET", "/v1/templates/reach?wait=ready&timeout_s=300", key=k, timeout=330)
            self.assertEqual(t["state"], "ready", t)
            c = d.computer(k, template="reach")
            results[k] = d.act(c["id"], "bash", {"command": "cat /etc/reached"}, key=k)["stdout"]
            d.ok("DELETE", "/v1/computers/" + c["id"], key=k)
            d.ok("DELETE", "/v1/templates/reach", key=k)
        self.assertEqual(results[self.key], "200\n")
        self.assertEqual(results[bk], "000\nunreachable\n")


if __name__ == "__main__":
    unittest.main()
