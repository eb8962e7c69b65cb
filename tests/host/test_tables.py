"""Every action envd serves is reachable from every client: the Python
SDK's table, the CLI's table and the MCP tool table name each one (MCP
leaves out what another tool already covers, listed below). A new action
that is not added to a client fails here, before a user finds it missing.
Static: reads the sources, starts nothing."""

import glob
import os
import re
import sys
import unittest

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
sys.path.insert(0, os.path.join(ROOT, "sdk", "python"))
import cubicle.actions  # noqa: E402
from cubicle import Computer  # noqa: E402

# MCP's `screenshot` already returns the image as content, and its
# `scroll` takes the direction.
MCP_COVERED_ELSEWHERE = {"screenshot_base64", "scroll_up", "scroll_down", "scroll_left",
                         "scroll_right"}


def read(*path):
    with open(os.path.join(ROOT, *path)) as f:
        return f.read()


def envd_actions():
    names = set()
    for path in glob.glob(os.path.join(ROOT, "envd", "actions", "*.c")):
        with open(path) as f:
            names |= set(re.findall(
                r'^\s+\{"([a-z_0-9]+)", \w+, (?:0|ACTION_\w+(?:\s*\|\s*ACTION_\w+)*), ',
                f.read(), re.M))
    return names


class Tables(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.envd = envd_actions()

    def test_envd_table_is_read(self):
        self.assertIn("left_click", self.envd)
        self.assertIn("set_screen_size", self.envd)
        self.assertGreaterEqual(len(self.envd), 40)

    def test_python_sdk_has_every_action(self):
        # read_file and write_file are Computer's own (streamed) methods.
        sdk = {row[0] for row in cubicle.actions.TABLE}
        missing = {a for a in self.envd - sdk if not callable(getattr(Computer, a, None))}
        self.assertEqual(missing, set())

    def test_cli_has_every_action(self):
        cli = set(re.findall(r'^\s+\{"([a-z_0-9]+)", ', read("sdk", "cli", "actions.c"), re.M))
        self.assertEqual(self.envd - cli, set())

    def test_mcp_has_every_action(self):
        mcp = set(re.findall(r'^\s+\{"([a-z_0-9]+)",\s*\n?\s*"',
                             read("host", "api", "mcp-tools.c"), re.M))
        self.assertEqual(self.envd - mcp - MCP_COVERED_ELSEWHERE, set())
        self.assertEqual(MCP_COVERED_ELSEWHERE & mcp, set())


if __name__ == "__main__":
    unittest.main()
