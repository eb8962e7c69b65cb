"""Shared pieces of the attack suite (tests/attack/README.md).

An attack runs against the real cubicled (tests/host/cubicled.py) with real
containers and microVMs. In the sanitizer build the same attacks run against
a cubicled built with AddressSanitizer + UndefinedBehaviorSanitizer, so a
memory error an attack provokes fails the test even when the answer looked
right: Cubicled.stop() reads cubicled's log for sanitizer reports.
"""

import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "host"))
import cubicled  # noqa: E402
from cubicled import harness, http_call, wait_until  # noqa: E402,F401

SANITIZER_REPORT = re.compile(
    r"ERROR: (AddressSanitizer|LeakSanitizer)|runtime error:|SUMMARY: UndefinedBehaviorSanitizer")


class SanitizerReport(AssertionError):
    pass


class Cubicled(cubicled.Cubicled):
    """cubicled whose log must hold no sanitizer report when it stops."""

    def check_log(self):
        log = self.read_log()
        m = SANITIZER_REPORT.search(log)
        if m:
            raise SanitizerReport("cubicled's log has a sanitizer report:\n" + log[m.start():][:6000])

    def stop(self, clean=True):
        state_kept = self.own_state
        self.own_state = False  # read the log before the state directory goes
        try:
            super().stop(clean)
            self.check_log()
        finally:
            self.own_state = state_kept
            if state_kept:
                import shutil
                cubicled.unmount_sessions(self.state)
                shutil.rmtree(self.state, ignore_errors=True)


def rss_kb(pid):
    """Resident memory of a process in KiB (VmRSS)."""
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def open_fds(pid):
    return len(os.listdir("/proc/%d/fd" % pid))
