"""A witness inside a desktop computer for the computer-use tests: xev, an X
client started in the computer, logs every button, key, modifier state and
where it happened; the tests read its log through the bash action. It is
independent of the endpoint under test (which drives envd), so what it
logs is what the X server delivered."""

import base64
import os
import re
import sys

from cubicled import wait_until

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "envd"))
from pngread import Png  # noqa: E402

XEV_LOG = "/tmp/xev.log"
SHIFT, CONTROL, BUTTON1 = 0x1, 0x4, 0x100


def start_xev(act, bash):
    """Starts xev in a 500x400 window at +300+200, focuses it; its window."""
    bash("setsid stdbuf -oL xev -geometry 500x400+300+200 -name cubxev -event mouse "
         "-event keyboard -event button >> %s 2>&1 < /dev/null &" % XEV_LOG)
    win = wait_until(lambda: next((w for w in act("windows")["windows"]
                                   if w["title"] == "cubxev"), None), 30, "the xev window")
    act("focus_window", {"id": win["id"]})
    return win


def png_of(answer):
    """The screenshot in an answer of either dialect, decoded."""
    if answer.get("type") == "computer_call_output":
        url = answer["output"]["image_url"]
        assert answer["output"]["type"] == "computer_screenshot", answer["output"]["type"]
        assert url.startswith("data:image/png;base64,"), url[:40]
        return Png(base64.b64decode(url[len("data:image/png;base64,"):], validate=True))
    images = [c for c in answer["content"] if c["type"] == "image"]
    assert len(images) == 1, answer["content"]
    return png_of_block(images[0])


def png_of_block(image):
    assert image["source"]["type"] == "base64"
    assert image["source"]["media_type"] == "image/png"
    return Png(base64.b64decode(image["source"]["data"], validate=True))


class Xev:
    """The events xev logged since mark(). bash runs a command in the computer."""

    BLOCK = re.compile(r"^(\w+) event, serial")

    def __init__(self, bash):
        self.bash = bash
        self.offset = 0

    def mark(self):
        self.offset = int(self.bash("stat -c %%s %s" % XEV_LOG))

    def events(self):
        text = self.bash("tail -c +%d %s" % (self.offset + 1, XEV_LOG))
        evs = []
        for block in text.split("\n\n"):
            m = self.BLOCK.match(block.strip())
            # xev writes a line at a time: what we read is in the first three.
            if not m or "same_screen" not in block:
                continue
            ev = {"type": m.group(1)}
            for name, pattern, conv in (
                    ("root", r"root:\((-?\d+),(-?\d+)\)", lambda m: (int(m[1]), int(m[2]))),
                    ("state", r"state (0x[0-9a-f]+)", lambda m: int(m[1], 16)),
                    ("button", r"button (\d+)", lambda m: int(m[1])),
                    ("keysym", r"\(keysym 0x[0-9a-f]+, ([^)]+)\)", lambda m: m[1])):
                found = re.search(pattern, block)
                if found:
                    ev[name] = conv(found)
            evs.append(ev)
        return evs

    def wait(self, pred, what):
        return wait_until(lambda: (lambda evs: evs if pred(evs) else None)(self.events()),
                          15, what)

    def buttons(self, n):
        """Waits for n presses and their releases: [(type, button, root, state)]."""
        evs = self.wait(lambda evs: len([e for e in evs if e["type"] == "ButtonRelease"]) >= n,
                        "%d button releases" % n)
        return [(e["type"], e["button"], e["root"], e["state"]) for e in evs
                if e["type"] in ("ButtonPress", "ButtonRelease")]

    def keys(self, last):
        """Waits for the release of `last`: [(type, keysym, state)]."""
        evs = self.wait(lambda evs: any(e["type"] == "KeyRelease" and e["keysym"] == last
                                        for e in evs), "the release of " + last)
        return [(e["type"], e["keysym"], e["state"]) for e in evs
                if e["type"] in ("KeyPress", "KeyRelease")]

    def until_sentinel(self, act, sentinel="F12"):
        """Every event up to a key press of `sentinel`, sent through the action
        API after what is being witnessed: X delivers input in order, so once
        xev logged it, everything before it is in the log too."""
        act("key", {"key": sentinel})
        evs = self.wait(lambda evs: any(e["type"] == "KeyPress" and e.get("keysym") == sentinel
                                        for e in evs), "the sentinel " + sentinel)
        return evs[:next(i for i, e in enumerate(evs)
                         if e["type"] == "KeyPress" and e.get("keysym") == sentinel)]


def presses(evs):
    return [(b, root, state) for t, b, root, state in evs if t == "ButtonPress"]


def typed(evs):
    return [k for t, k, _ in evs if t == "KeyPress"]
