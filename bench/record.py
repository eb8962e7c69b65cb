"""Screen recording: cubicle-record against ffmpeg's x11grab, on the same
1280x800 desktop (Xvfb, xfdesktop, three xterms full of text, a coloured
window), for an idle and a busy screen.

  A. cubicle-record, exactly as cubicled runs it: a view viewer of envd's
     RFB server (envd --vnc unix:PATH, the gateway's mode line first),
     VP8 (libvpx, realtime, screen content mode, constant quality 10 capped
     at 4 Mbit/s) muxed into WebM by libavformat, at most 10 frames a
     second and only when the screen changed. Its CPU is the recorder's
     plus what envd spends serving it (RFB updates: the guest's share).
  B. what people use today: ffmpeg -f x11grab -framerate 10 -i :N -c:v
     libvpx into WebM (Debian's ffmpeg), with the same realtime settings
     (-deadline realtime -cpu-used 10 -crf 10 -b:v 4M), and with libvpx's
     defaults (-b:v 1M, the "good" deadline) as a command line gives them.

  idle  nothing moves (the xterms' cursors do not blink)
  busy  xanim scroll repaints the whole screen at 60 fps (bench/stream.py's
        animation): every pixel changes every frame

CPU is utime+stime from /proc/PID/stat over the window, in % of one core
(= CPU seconds per recorded minute / 60 x 100); bytes per minute from the
file's size. SECONDS (default 20) per row.
"""

import os
import signal
import socket
import subprocess
import sys
import tempfile
import time

from common import KeepAlive, harness, table
from screenshot import populate, wait_drawn
from stream import Cpu, LocalAnim, cover_once

RECORDER = os.path.join(harness.BUILD, "bin", "cubicle-record")
SECONDS = float(os.environ.get("SECONDS_PER_ROW", "20"))


def ffprobe_frames(path):
    out = subprocess.run(["ffprobe", "-v", "error", "-count_packets", "-select_streams", "v:0",
                          "-show_entries", "stream=nb_read_packets", "-of", "csv=p=0", path],
                         capture_output=True, text=True).stdout.strip()
    return int(out) if out.isdigit() else 0


def run_recorder(sock, envd_pid, out):
    s = socket.socket(socket.AF_UNIX)
    s.connect(sock)
    s.sendall(b"cubicle-viewer view\n")  # the gateway's line for a view viewer
    f = os.open(out, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
    r, w = os.pipe()

    def fds():
        os.dup2(s.fileno(), 3)
        os.dup2(f, 4)
        os.dup2(r, 5)

    p = subprocess.Popen([RECORDER, "--fps", "10"], preexec_fn=fds, pass_fds=(3, 4, 5),
                         stdout=subprocess.PIPE, text=True)
    ready = p.stdout.readline()
    if not ready.startswith("ready"):
        raise RuntimeError("cubicle-record did not start: %r" % ready)
    cpu = Cpu({"recorder": [p.pid], "envd": [envd_pid]})
    time.sleep(SECONDS)
    use = cpu.stop()
    os.close(w)
    done = p.stdout.read().split()
    p.wait(30)
    s.close()
    os.close(f)
    os.close(r)
    return use["recorder"] + use["envd"], use, int(done[1]), os.path.getsize(out)


def run_ffmpeg(desk, out, tuned):
    enc = (["-deadline", "realtime", "-cpu-used", "10", "-crf", "10", "-b:v", "4M"] if tuned
           else [])
    p = subprocess.Popen(["ffmpeg", "-v", "error", "-y", "-f", "x11grab", "-framerate", "10",
                          "-video_size", "%dx%d" % (desk.width, desk.height), "-i", desk.display,
                          "-c:v", "libvpx"] + enc + [out], env=desk.env,
                         stdin=subprocess.DEVNULL, stderr=subprocess.PIPE)
    harness.wait_until(lambda: os.path.exists(out) and os.path.getsize(out) > 0, 20,
                       "ffmpeg to start writing")
    cpu = Cpu({"ffmpeg": [p.pid]})
    time.sleep(SECONDS)
    use = cpu.stop()["ffmpeg"]
    p.send_signal(signal.SIGINT)  # ffmpeg finishes the file on SIGINT
    p.wait(60)
    return use, ffprobe_frames(out), os.path.getsize(out)


def main():
    if not os.path.exists(RECORDER):
        sys.exit("build cubicle-record first (make build)")
    desk = harness.Desktop().start()
    tmp = tempfile.mkdtemp(prefix="cubicle-bench-record-")
    sock = os.path.join(tmp, "vnc.sock")
    envd = None
    rows = []
    try:
        populate(desk)
        envd = harness.Envd(desk, args=["--vnc", "unix:" + sock]).start()
        wait_drawn(KeepAlive(envd))
        anim = LocalAnim(desk)
        cover_once(anim)
        per_min = 60.0 / SECONDS
        for case in ("idle", "busy"):
            if case == "busy":
                anim.start()
            try:
                total, parts, frames, size = run_recorder(sock, envd.proc.pid,
                                                          os.path.join(tmp, "rec.webm"))
                rows.append((case, "cubicle-record (+ envd serving RFB)",
                             "%.1f %% (%.1f + %.1f)" % (total, parts["recorder"], parts["envd"]),
                             "%.1f" % (total * 0.6), frames,
                             "%.2f MB" % (size * per_min / 1e6)))
                for tuned in (True, False):
                    use, frames, size = run_ffmpeg(desk, os.path.join(tmp, "ff.webm"), tuned)
                    rows.append((case, "ffmpeg x11grab libvpx" +
                                 (" realtime" if tuned else " defaults"),
                                 "%.1f %%" % use, "%.1f" % (use * 0.6), frames,
                                 "%.2f MB" % (size * per_min / 1e6)))
            finally:
                if case == "busy":
                    fps = anim.stop()
                    print("busy: xanim drew %.0f frames/s" % fps)
        table("Recording a 1280x800 desktop at 10 frames/s, %.0f s per row" % SECONDS, rows,
              ["screen", "recorder", "CPU (one core)", "CPU s per recorded min", "frames",
               "bytes per min"])
    finally:
        if envd:
            envd.stop()
        desk.stop()
        subprocess.run(["rm", "-rf", tmp])


if __name__ == "__main__":
    main()
