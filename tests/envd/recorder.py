"""Runs tests/envd/xrecorder on a Desktop and collects the events it prints."""

import json
import os
import queue
import re
import subprocess
import threading
import time

import harness


class Recorder:
    def __init__(self, desktop, geometry="400x300+200+150", color="3366cc",
                 title="xrecorder", override_redirect=False):
        self.desktop = desktop
        self.events = []
        self.lock = threading.Lock()
        self.proc = desktop.spawn(
            [os.path.join(harness.TEST_BIN, "xrecorder"), "--geometry", geometry,
             "--color", color, "--title", title]
            + (["--override-redirect"] if override_redirect else []),
            stdout=subprocess.PIPE)
        self.ready = queue.Queue()
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()
        first = self.ready.get(timeout=15)
        self.window = first["window"]
        # Where the window really is (the window manager may have moved it).
        self.x, self.y, self.width, self.height = harness.wait_until(
            self._geometry, 10, "xrecorder window to be viewable")

    def _read(self):
        for line in self.proc.stdout:
            try:
                ev = json.loads(line)
            except ValueError:
                continue
            if ev.get("ready"):
                self.ready.put(ev)
                continue
            with self.lock:
                self.events.append(ev)

    def _geometry(self):
        out = self.desktop.run(["xwininfo", "-id", str(self.window)]).stdout
        if "IsViewable" not in out:
            return None
        get = lambda k: int(re.search(k + r":\s+(-?\d+)", out).group(1))
        return (get("Absolute upper-left X"), get("Absolute upper-left Y"),
                get("Width"), get("Height"))

    def center(self):
        return self.x + self.width // 2, self.y + self.height // 2

    def clear(self):
        with self.lock:
            self.events.clear()

    def snapshot(self, types=None):
        with self.lock:
            evs = list(self.events)
        if types:
            evs = [e for e in evs if e.get("type") in types]
        return evs

    def wait_for(self, pred, timeout=10, what="events"):
        """Waits until pred(events) is true and returns the events."""
        def check():
            evs = self.snapshot()
            return evs if pred(evs) else None
        return harness.wait_until(check, timeout, what)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.thread.join(timeout=5)
        self.proc.stdout.close()


def focus(desktop, window):
    """Gives `window` the keyboard focus through an independent client."""
    desktop.run(["xdotool", "windowactivate", "--sync", str(window)])
    harness.wait_until(
        lambda: int(desktop.run(["xdotool", "getwindowfocus"]).stdout.strip() or 0) == window,
        10, "focus on window %d" % window)
