#!/usr/bin/env python3
"""Templates (docs/templates.md): what a build costs, cold and cached, and
whether a computer from a template starts as fast as one from its base.
Real cubicled, real builds in container computers, real apt from Debian's
mirror, one run.

- a template build, cold (a recipe no cache has: apt jq and a step with a
  fresh nonce) and cached (the same recipe under another name), POST →
  ready; the cold one's stages from its log; side by side with what people
  do today without templates: `apt-get update && apt-get install jq` as
  root in a throwaway root of the same image (a Dockerfile's RUN line,
  without Docker: a hard-linked copy of the tree + chroot);
- create → first bash of a container sandbox from the base image, from a
  small template and from `data`, interleaved; a microVM (TCG here) from
  the base and from a global template, its first boot (which makes the
  template's disk) and its second;
- sizes: the base image's tree, the templates' layers, what their images
  add to the cache (hard links counted once), data's microVM disk;
- `import pandas` in a fresh `data` sandbox vs what a sandbox without a
  template does first: `apt-get install -y python3-pandas` as the user,
  then the import.

CUBICLE_BENCH_RUNS (default 8) create → bash runs per kind; CUBICLE_BENCH_VM=0
skips the microVMs; CUBICLE_BENCH_APT=0 the install side of pandas.
"""

import json
import os
import re
import secrets
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "host"))
from common import table  # noqa: E402
from cubicled import IMAGES, Cubicled  # noqa: E402

RUNS = int(os.environ.get("CUBICLE_BENCH_RUNS", "8"))
VM = os.environ.get("CUBICLE_BENCH_VM", "1") != "0"
APT = os.environ.get("CUBICLE_BENCH_APT", "1") != "0"


def med(xs):
    return statistics.median(xs)


def span(xs, fmt="%.0f", unit="ms"):
    s = sorted(xs)
    return (fmt + " %s") % (med(s), unit), (fmt + "–" + fmt + " %s") % (s[0], s[-1], unit)


def du(*paths):
    """Bytes each path adds, in order, hard links counted once (du's rule
    within one call)."""
    out = subprocess.run(["du", "-s", "-B1", *paths], capture_output=True, text=True).stdout
    return [int(line.split()[0]) for line in out.splitlines()]


def mib(b):
    return "%.0f MiB" % (b / 1048576)


def build(srv, key, body):
    """POST → ready: (seconds, the template, its log)."""
    t = time.perf_counter()
    srv.ok("POST", "/v1/templates", body, key=key, status=202)
    tpl = srv.ok("GET", "/v1/templates/%s?wait=ready&timeout_s=3000" % body["name"], key=key,
                 timeout=3100)
    s = time.perf_counter() - t
    if tpl["state"] != "ready":
        raise RuntimeError("template %s: %s" % (body["name"], tpl.get("error")))
    log = srv.ok("GET", "/v1/templates/%s/log" % body["name"], key=key)["log"]
    return s, tpl, log


def stages(log):
    """The cold build's stages from its log's timestamps."""
    marks = [(float(m.group(1)), m.group(2)) for m in
             re.finditer(r"^\[\s*([0-9.]+)s\] (.*)$", log, re.M)]

    def at(prefix):
        return next((t for t, text in marks if text.startswith(prefix)), None)

    boot, first = at("build computer"), at("step 1 ")
    clean = [t for t, x in marks if "clean up" in x]
    copy, image, ready = at("copying the layer"), at("image tpl-image"), at("ready:")
    rows = []
    if boot is not None and first is not None:
        rows.append(("boot the build's container computer", "%.1f s" % (first - boot)))
    if first is not None and clean:
        rows.append(("the recipe's steps (apt update + install, run)", "%.1f s" % (clean[0] - first)))
    if clean and copy is not None:
        rows.append(("clean-up step, stop", "%.1f s" % (copy - clean[0])))
    if copy is not None and image is not None:
        rows.append(("copy the layer out (sanitized)", "%.1f s" % (image - copy)))
    if image is not None and ready is not None:
        rows.append(("the image: base tree hard-linked + layer applied", "%.1f s" % (ready - image)))
    return rows


def apt_in_chroot(image_dir):
    """A Dockerfile's RUN line without Docker: a hard-linked copy of the image's
    tree, then apt-get update && apt-get install -y jq as root in a chroot."""
    work = tempfile.mkdtemp(prefix="cubicle-bench-templates-", dir=os.path.dirname(image_dir))
    try:
        root = os.path.join(work, "rootfs")
        t = time.perf_counter()
        subprocess.run(["cp", "-al", os.path.join(image_dir, "rootfs"), root], check=True)
        for d in ("proc", "dev"):
            os.makedirs(os.path.join(root, d), exist_ok=True)
        # Its own resolv.conf: apt replaces files, never writes the linked ones.
        resolv = os.path.join(root, "etc", "resolv.conf")
        if os.path.lexists(resolv):
            os.unlink(resolv)
        shutil.copy("/etc/resolv.conf", resolv)
        r = subprocess.run(
            ["unshare", "-m", "--propagation", "private", "sh", "-c",
             "mount -t proc proc \"$1/proc\" && mount --bind /dev \"$1/dev\" && "
             "chroot \"$1\" env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root "
             "DEBIAN_FRONTEND=noninteractive sh -c '/usr/bin/apt-get update -q && "
             "/usr/bin/apt-get install -y -q --no-install-recommends jq'", "-", root],
            capture_output=True, text=True)
        s = time.perf_counter() - t
        if r.returncode != 0:
            raise RuntimeError("apt in the chroot failed: %s" % r.stderr[-500:])
        return s
    finally:
        subprocess.run(["rm", "-rf", "--one-file-system", work])


def first_bash(srv, key, **params):
    """create → the first bash answered, ms; the computer deleted after."""
    t = time.perf_counter()
    c = srv.ok("POST", "/v1/computers?wait=running&timeout_s=300", params, key=key, status=201,
               timeout=330)
    out = srv.act(c["id"], "bash", {"command": "true"}, key=key)
    ms = (time.perf_counter() - t) * 1e3
    assert out["exit_code"] == 0, out
    srv.ok("DELETE", "/v1/computers/" + c["id"], key=key)
    return ms


def pandas_import(srv, key, install):
    """A fresh sandbox → `import pandas` done: (seconds in all, the import's own)."""
    params = {"kind": "sandbox", "size": "md", "isolation": "container"}
    if not install:
        params = {"template": "data", "size": "md", "isolation": "container"}
    t = time.perf_counter()
    c = srv.ok("POST", "/v1/computers?wait=running&timeout_s=300", params, key=key, status=201)
    if install:
        r = srv.req("POST", "/v1/computers/%s/actions/bash" % c["id"],
                    {"command": "apt-get install -y python3-pandas >/dev/null", "timeout_s": 1800},
                    key=key, timeout=1900)
        assert r.status == 200 and r.json["exit_code"] == 0, r.body[-500:]
    out = srv.act(c["id"], "python", {"code": "import time\nt = time.perf_counter()\n"
                                      "import pandas\nprint(time.perf_counter() - t)"}, key=key)
    total = time.perf_counter() - t
    assert out["exit_code"] == 0, out
    srv.ok("DELETE", "/v1/computers/" + c["id"], key=key)
    return total, float(out["stdout"])


def main():
    srv = Cubicled([]).start()
    try:
        _, key = srv.workspace("bench-templates")
        base = os.path.realpath(os.path.join(IMAGES, "sandbox"))
        cache = os.path.dirname(base)

        nonce = secrets.token_hex(6)
        recipe = {"apt": ["jq"], "run": ["echo %s > /etc/bench-nonce" % nonce]}
        cold, small, log = build(srv, key, dict(recipe, name="bench-cold"))
        hit, _, _ = build(srv, key, dict(recipe, name="bench-hit"))
        chroot = [apt_in_chroot(base) for _ in range(2)]
        table("a template build: apt-get install jq + a step (a recipe no cache had), POST → "
              "ready", [("cold (built)", "%.1f s" % cold),
                        ("cached (the same recipe, another name)", "%.0f ms" % (hit * 1e3)),
                        ("today without templates: apt-get update && install jq as root in a "
                         "chroot of the image (2 runs)", "%.1f s" % med(chroot))],
              ("", "time"))
        table("where the cold build's time went (its log)", stages(log), ("stage", "time"))

        data = srv.ok("GET", "/v1/templates/data?wait=ready&timeout_s=3000", key=key,
                      timeout=3100)
        kinds = [("the base image (sandbox)", {"kind": "sandbox"}),
                 ("a small template (+jq)", {"template": "bench-cold"}),
                 ("the data template", {"template": "data"})]
        runs = {name: [] for name, _ in kinds}
        for name, p in kinds:  # warm-up
            first_bash(srv, key, isolation="container", **p)
        for _ in range(RUNS):
            for name, p in kinds:
                runs[name].append(first_bash(srv, key, isolation="container", **p))
        table("container sandbox (sm): create → first bash, %d runs each, interleaved" % RUNS,
              [(name,) + span(runs[name]) for name, _ in kinds], ("from", "median", "range"))

        if VM:
            srv.ok("POST", "/v1/templates", dict(recipe, name="bench-global"), status=202)
            srv.ok("GET", "/v1/templates/bench-global?wait=ready&timeout_s=3000", timeout=3100)
            rows = [("the base image", first_bash(srv, key, isolation="vm", kind="sandbox")),
                    ("a global template, first (makes its disk)",
                     first_bash(srv, key, isolation="vm", template="bench-global")),
                    ("a global template, again",
                     first_bash(srv, key, isolation="vm", template="bench-global")),
                    ("the base image, again", first_bash(srv, key, isolation="vm",
                                                         kind="sandbox"))]
            table("microVM sandbox (sm, TCG): create → first bash, one run each", [
                (n, "%.1f s" % (ms / 1e3)) for n, ms in rows], ("from", "time"))

        rows = []
        small_layer = small["size_mb"]
        rows.append(("sandbox base image", "tree %s" % mib(du(os.path.join(base, "rootfs"))[0]),
                     "", ""))
        # Each template's newest image over this base (its manifest names it).
        images = {}
        for e in os.listdir(cache):
            if not e.startswith("tpl-image-"):
                continue
            try:
                m = json.load(open(os.path.join(cache, e, "manifest.json")))
            except (OSError, ValueError):
                continue
            t = os.stat(os.path.join(cache, e)).st_mtime
            if m.get("base_image") == os.path.basename(base) and \
                    t > images.get(m.get("template"), (0,))[0]:
                images[m.get("template")] = (t, e, m)
        for name, size_mb in (("bench-cold", small_layer), ("data", data["size_mb"])):
            if name not in images:
                continue
            _, e, m = images[name]
            layer = os.path.join(cache, m["layer"], "layer")
            used = du(os.path.join(base, "rootfs"), layer, os.path.join(cache, e, "rootfs"))
            disk = os.path.join(cache, e, "disk.ext4")
            rows.append(("template %s" % name, "layer %d MiB (in the cache: %s)" % (
                size_mb, mib(used[1])), "image tree %s, of which new: %s" % (
                mib(m["rootfs_bytes"]), mib(used[2])),
                ("microVM disk %s" % mib(os.stat(disk).st_blocks * 512))
                if os.path.exists(disk) else "no microVM disk yet"))
        table("sizes (du, hard links counted once)", rows, ("", "", "", ""))

        tpl = [pandas_import(srv, key, False) for _ in range(3)]
        rows = [("a fresh data sandbox: create → import pandas done (3 runs)",
                 "%.2f s" % med([t for t, _ in tpl]),
                 "import alone %.2f s" % med([i for _, i in tpl]))]
        if APT:
            total, imp = pandas_import(srv, key, True)
            rows.append(("a fresh base sandbox: apt-get install -y python3-pandas, then import "
                         "(1 run)", "%.1f s" % total, "import alone %.2f s" % imp))
        table("pandas in a fresh sandbox", rows, ("", "time", ""))
        for n in ("bench-cold", "bench-hit"):
            srv.req("DELETE", "/v1/templates/" + n, key=key)
        srv.req("DELETE", "/v1/templates/bench-global")
    finally:
        srv.stop()


if __name__ == "__main__":
    main()
