#!/usr/bin/env python3
"""The microVM's kernel: Debian's generic kernel (the image's vmlinuz +
initrd.img) against cubicle's small kernel (rootfs/small-kernel/build), side
by side on the same image disk.

    rootfs/small-kernel/build build/small-kernel
    python3 bench/kernel.py build/small-kernel [--runs 5] [--desktop]

1. Serial console: QEMU -M microvm started the way host/drivers/microvm.c
   starts it (same machine, devices and command line, without `quiet` and
   with printk timestamps), the console on a pipe: guest uptime when the
   root file system is mounted and when the first user-space program runs,
   wall time from QEMU's start to the first console line and to envd's
   "listening".
2. The driver: a real cubicled per kernel (the small kernel's --images is a
   scratch directory whose images hard-link the built disk.ext4 beside the
   small kernel; the shared image cache is never written): create → envd
   ready, QEMU's memory, a check that the guest works (uname, id -u, a file
   written and read back, python; a desktop's virtio-serial port and a
   screenshot), stop (snapshot) and start (restore) → the file still there;
   then a sandbox with a session: /session on 9p (the host reads what the
   guest wrote), stop and start (a cold boot) → bash.

Runs alternate between the kernels so a busy machine hurts both alike.
Figures are medians."""

import argparse
import http.client
import os
import re
import secrets
import select
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "host"))
from common import stats, table  # noqa: E402
from cubicled import Cubicled  # noqa: E402
import harness  # noqa: E402

sys.path.insert(0, os.path.dirname(__file__))
from microvm import qemu_pid, status_kib  # noqa: E402

IMAGES = os.path.join(harness.BUILD, "images")
KERNELS = ("debian", "small")
DROPPED = []  # start requests cubicled dropped (see stop_start)
LABELS = {"debian": "Debian generic + initrd", "small": "small (built in)"}


def small_images(small, kinds):
    """A scratch images directory: each kind's built image with the small
    kernel. Hard links (the cache's files are never written: QEMU opens
    disk.ext4 read-only as its overlay's backing file)."""
    d = tempfile.mkdtemp(prefix="cubicle-small-kernel-images-", dir="/var/tmp")
    for kind in kinds:
        src = os.path.realpath(os.path.join(IMAGES, kind))
        dst = os.path.join(d, kind)
        os.mkdir(dst)
        for f in ("disk.ext4", "manifest.json"):
            try:
                os.link(os.path.join(src, f), os.path.join(dst, f))
            except OSError:
                shutil.copy(os.path.join(src, f), os.path.join(dst, f))
        os.symlink(os.path.join(src, "rootfs"), os.path.join(dst, "rootfs"))
        for f in ("vmlinuz", "initrd.img"):
            shutil.copy(os.path.join(small, f), os.path.join(dst, f))
    return d


def tsc_khz():
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("cpu MHz"):
                return int(float(line.split(":")[1]) * 1000)
    return 0


# Both phases use the same accelerator: CUBICLE_VM_ACCEL (kvm or tcg, the
# driver's own switch), TCG unless it says kvm (a /dev/kvm that opens may
# still not run a guest, as on a nested machine).
ACCEL = "kvm" if os.environ.get("CUBICLE_VM_ACCEL") == "kvm" else "tcg"
os.environ["CUBICLE_VM_ACCEL"] = ACCEL


def serial_boot(image, work):
    """One boot with the console on a pipe; returns the figures (s)."""
    disk = os.path.join(work, "disk.qcow2")
    subprocess.run(["qemu-img", "create", "-q", "-f", "qcow2", "-F", "raw", "-b",
                    os.path.join(image, "disk.ext4"), disk], check=True)
    session = os.path.join(work, "session")
    os.makedirs(session, exist_ok=True)
    khz = tsc_khz()
    append = ("console=ttyS0 root=/dev/vda rw panic=-1 printk.time=1%s "
              "init=/sbin/cubicle-init cubicle.session=none cubicle.deny=169.254.0.0/16 "
              "cubicle.token=%s"
              % (" tsc_early_khz=%d" % khz if khz else "", secrets.token_hex(16)))
    kvm = ACCEL == "kvm"
    argv = ["qemu-system-x86_64", "-nodefaults", "-no-user-config", "-display", "none",
            "-no-reboot",
            "-M", "microvm,x-option-roms=off,pit=off,pic=off,rtc=on,isa-serial=on,"
                  "memory-backend=mem",
            "-accel", "kvm" if kvm else "tcg,thread=multi,tb-size=128",
            "-cpu", "host" if kvm else "max", "-smp", "1", "-m", "512",
            "-object", "memory-backend-file,id=mem,share=on,mem-path=%s/mem,size=512M" % work,
            "-kernel", os.path.join(image, "vmlinuz"),
            "-initrd", os.path.join(image, "initrd.img"), "-append", append,
            "-drive", "id=root,file=%s,format=qcow2,if=none,discard=unmap" % disk,
            "-device", "virtio-blk-device,drive=root",
            "-netdev", "user,id=n0,ipv6=off", "-device", "virtio-net-device,netdev=n0",
            "-fsdev", "local,id=session,path=%s,security_model=mapped-xattr" % session,
            "-device", "virtio-9p-device,fsdev=session,mount_tag=session",
            "-serial", "stdio"]
    t0 = time.perf_counter()
    p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT)
    fig, buf, log = {}, b"", []
    stamp = re.compile(rb"^\[\s*(\d+\.\d+)\]")
    try:
        deadline = t0 + 600
        while "envd" not in fig and time.perf_counter() < deadline:
            r, _, _ = select.select([p.stdout], [], [], 1)
            if not r:
                if p.poll() is not None:
                    break
                continue
            chunk = os.read(p.stdout.fileno(), 65536)
            if not chunk:
                break
            buf += chunk
            while b"\n" in buf:
                line, buf = buf.split(b"\n", 1)
                now = time.perf_counter() - t0
                log.append(line)
                fig.setdefault("first line (wall)", now)
                m = stamp.match(line)
                if b"EXT4-fs (vda): mounted" in line and m:
                    fig.setdefault("root mounted (guest uptime)", float(m.group(1)))
                if b"as init process" in line and m:
                    fig.setdefault("first user space (guest uptime; Debian's: the "
                                   "initramfs)", float(m.group(1)))
                if b"envd: listening" in line:
                    fig["envd"] = now
    finally:
        p.kill()
        p.wait()
        p.stdout.close()
        os.unlink(disk)
        os.unlink(os.path.join(work, "mem"))
    if "envd" not in fig:
        raise RuntimeError("%s: no 'envd: listening' on the console:\n%s"
                           % (image, b"\n".join(log[-30:]).decode(errors="replace")))
    fig["envd listening (wall)"] = fig.pop("envd")
    return fig


def bash(srv, cid, key, cmd):
    r = srv.act(cid, "bash", {"command": cmd}, key=key)
    out = r.get("stdout", r.get("output", ""))
    if r.get("exit_code", 0) != 0:
        raise AssertionError("%r -> %r" % (cmd, r))
    return out.strip()


def create(srv, key, kind, size, fig, **extra):
    t = time.perf_counter()
    body = {"kind": kind, "size": size, "isolation": "vm"}
    body.update(extra)
    c = srv.ok("POST", "/v1/computers?wait=running&timeout_s=900", body, key=key,
               status=201, timeout=960)
    fig["create → envd ready" + (" (with a session)" if extra else "")] = \
        (time.perf_counter() - t) * 1000
    return c["id"]


def stop_start(srv, key, cid, fig, what):
    t = time.perf_counter()
    srv.ok("POST", "/v1/computers/%s/stop" % cid, key=key)
    fig["stop" + what] = (time.perf_counter() - t) * 1000
    t = time.perf_counter()
    try:
        srv.ok("POST", "/v1/computers/%s/start" % cid, key=key)
    except (http.client.RemoteDisconnected, ConnectionError):
        # cubicled drops a request that takes over 30 s (a cold boot under
        # a loaded TCG host can): wait for the computer instead.
        DROPPED.append(what)
        srv.ok("GET", "/v1/computers/%s?wait=running&timeout_s=600" % cid, key=key,
               timeout=660)
    bash(srv, cid, key, "true")
    fig["start → bash" + what] = (time.perf_counter() - t) * 1000


def driver_boot(srv, key, kind, size, checks):
    """create → ready, memory, stop (snapshot) → start (restore); with a
    session: create → ready, /session on 9p, stop → start (a cold boot: no
    snapshot while a session is mounted). Returns the figures (ms, MiB)."""
    fig = {}
    cid = create(srv, key, kind, size, fig)
    try:
        mark = secrets.token_hex(8)
        out = bash(srv, cid, key, "uname -r; id -u; echo %s >~/mark; cat ~/mark; "
                   "python3 -c 'print(6*7)'; date -u +%%FT%%TZ; "
                   "cat /sys/devices/system/clocksource/clocksource0/current_clocksource"
                   % mark).split("\n")
        if out[1:4] != ["1000", mark, "42"]:
            raise AssertionError("guest check: %r" % out)
        checks.append("%s: %s" % (kind, " | ".join(out)))
        if kind == "desktop":
            # The live view's virtio-serial port, and a screen that answers.
            port = bash(srv, cid, key, "cat /sys/class/virtio-ports/*/name")
            shot = srv.act(cid, "screenshot_base64", {"format": "jpeg"}, key=key)
            if port != "cubicle.vnc" or not shot.get("width"):
                raise AssertionError("desktop: port %r, screenshot %r" % (port, shot.keys()))
            checks.append("desktop: virtio-serial port %s, screenshot %dx%d"
                          % (port, shot["width"], shot["height"]))
        pid = qemu_pid(srv, cid)
        if pid:
            fig["QEMU RssAnon (MiB)"] = status_kib(pid, "RssAnon") / 1024
            fig["guest RAM touched (MiB)"] = (status_kib(pid, "RssFile") +
                                              status_kib(pid, "RssShmem")) / 1024
        stop_start(srv, key, cid, fig, " (snapshot / restore)")
        # A restore brings the guest's memory back: the file is there even
        # if it never reached the disk.
        if bash(srv, cid, key, "cat ~/mark") != mark:
            raise AssertionError("~/mark did not survive stop/start")
    finally:
        srv.ok("DELETE", "/v1/computers/" + cid, key=key)
    if kind != "sandbox":
        return fig
    session = "k" + secrets.token_hex(4)
    cid = create(srv, key, kind, size, fig, session=session)
    try:
        out = bash(srv, cid, key, "awk '$2 == \"/session\" {print $3}' /proc/mounts; "
                   "echo %s >/session/working/k.txt" % mark)
        got = srv.req("GET", "/v1/sessions/%s/files?path=working/k.txt" % session,
                      key=key).body.decode().strip()
        if out != "9p" or got != mark:
            raise AssertionError("/session: mounted %r, the host reads %r" % (out, got))
        checks.append("%s with a session: /session on %s, the host reads the guest's file"
                      % (kind, out))
        stop_start(srv, key, cid, fig, " (with a session: cold boot)")
    finally:
        srv.ok("DELETE", "/v1/computers/" + cid, key=key)
    return fig


def collect(into, kernel, fig):
    for k, v in fig.items():
        into.setdefault(k, {}).setdefault(kernel, []).append(v)


def side_by_side(title, figs, unit, scale=1.0):
    rows = []
    for what, per in figs.items():
        med = {k: stats(per[k])[0] * scale for k in KERNELS if per.get(k)}
        if len(med) < 2:
            continue
        d, s = med["debian"], med["small"]
        change = "%+.0f %%" % ((s - d) / d * 100) if d else "-"
        rows.append((what, "%.2f %s" % (d, unit) if unit == "s" else "%.0f %s" % (d, unit),
                     "%.2f %s" % (s, unit) if unit == "s" else "%.0f %s" % (s, unit),
                     change, "%d/%d" % (len(per["debian"]), len(per["small"]))))
    table(title, rows, ("what", LABELS["debian"], LABELS["small"], "change", "runs"))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("small", help="the small kernel's directory (rootfs/small-kernel/build OUT)")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--desktop", action="store_true", help="also boot one desktop per kernel")
    ap.add_argument("--only", choices=("serial", "driver"))
    a = ap.parse_args()
    kinds = ["sandbox"] + (["desktop"] if a.desktop else [])
    scratch = small_images(os.path.abspath(a.small), kinds)
    images = {"debian": os.path.realpath(os.path.join(IMAGES, "sandbox")),
              "small": os.path.join(scratch, "sandbox")}
    for k in KERNELS:
        sz = os.path.getsize(os.path.join(images[k], "vmlinuz")) / 1048576
        rd = os.path.getsize(os.path.join(images[k], "initrd.img")) / 1048576
        print("%-24s vmlinuz %.1f MiB, initrd %.1f MiB (%s)" % (LABELS[k], sz, rd, images[k]))
    print("accel: %s (CUBICLE_VM_ACCEL)" % ACCEL)
    work = tempfile.mkdtemp(prefix="cubicle-kernel-bench-", dir="/var/tmp")
    slots = tempfile.mkdtemp(prefix="cubicle-slots-")
    os.environ["CUBICLE_UID_SLOTS"] = slots
    srvs = {}
    try:
        if a.only != "driver":
            serial = {}
            for _ in range(a.runs):
                for k in KERNELS:
                    collect(serial, k, serial_boot(images[k], work))
            side_by_side("Serial console, sandbox disk (QEMU -M microvm as the driver "
                         "starts it, without quiet): medians", serial, "s")
        if a.only != "serial":
            srvs["debian"] = Cubicled(["--idle-timeout", "3600"]).start()
            srvs["small"] = Cubicled(["--idle-timeout", "3600", "--images", scratch]).start()
            keys = {k: srvs[k].workspace("bench")[1] for k in KERNELS}
            for kind, size, runs in [("sandbox", "xs", a.runs)] + \
                    ([("desktop", "small", 1)] if a.desktop else []):
                figs, checks = {}, {k: [] for k in KERNELS}
                for _ in range(runs):
                    for k in KERNELS:
                        collect(figs, k, driver_boot(srvs[k], keys[k], kind, size,
                                                     checks[k]))
                for k in KERNELS:
                    for line in checks[k][:3]:
                        print("checked, %s kernel: %s" % (k, line))
                ms = {w: p for w, p in figs.items() if "MiB" not in w}
                mib = {w: p for w, p in figs.items() if "MiB" in w}
                side_by_side("Through cubicled, %s %s: medians" % (kind, size), ms, "ms")
                if DROPPED:
                    print("(%d start requests were dropped by cubicled after 30 s and "
                          "waited for with GET ?wait=running)" % len(DROPPED))
                    del DROPPED[:]
                side_by_side("QEMU memory after boot + one bash, %s %s" % (kind, size),
                             mib, "MiB")
    finally:
        for s in srvs.values():
            s.stop()
        shutil.rmtree(slots, ignore_errors=True)
        shutil.rmtree(work, ignore_errors=True)
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
