"""The one action table (spec/actions.json) and what is made from it.

Every client is generated from the table (spec/README.md), so these tests
check what generation cannot: the committed outputs (the Python SDK's
table, docs/openapi.json) are current; every handler envd defines is in
the table and every table entry has a handler; every action reaches every
client (the built CLI, the Python SDK, MCP, the OpenAPI document); envd's
README names every action; and a real OpenAPI 3.1 validator from npm
(@apidevtools/swagger-parser) accepts the document. Static: runs the built
`cubicle --help` and node, starts no server and no computer."""

import glob
import json
import os
import re
import subprocess
import sys
import unittest

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
BUILD = os.environ.get("CUBICLE_BUILD") or os.path.join(ROOT, "build")
sys.path.insert(0, os.path.join(ROOT, "sdk", "python"))
sys.path.insert(0, os.path.join(ROOT, "spec"))
import cubicle.actions  # noqa: E402
from cubicle import Computer  # noqa: E402
import gen  # noqa: E402
import openapi  # noqa: E402

# MCP's `screenshot` already returns the image as content, and its
# `scroll` takes the direction.
MCP_COVERED_ELSEWHERE = {"screenshot_base64", "scroll_up", "scroll_down", "scroll_left",
                         "scroll_right"}


def read(*path):
    with open(os.path.join(ROOT, *path)) as f:
        return f.read()


def envd_handlers():
    """The act_NAME functions envd/actions/*.c define."""
    names = set()
    for path in glob.glob(os.path.join(ROOT, "envd", "actions", "*.c")):
        with open(path) as f:
            names |= set(re.findall(r"^int act_([a-z_0-9]+)\(", f.read(), re.M))
    return names


class Tables(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.acts = gen.actions()
        cls.names = {a.name for a in cls.acts}

    def test_table_is_read(self):
        self.assertIn("left_click", self.names)
        self.assertIn("set_screen_size", self.names)
        self.assertGreaterEqual(len(self.names), 40)
        kinds = {a.name: a.kind for a in self.acts}
        self.assertEqual(kinds["bash"], "sandbox")
        self.assertEqual(kinds["left_click"], "desktop")

    def test_committed_outputs_are_current(self):
        p = subprocess.run([sys.executable, os.path.join(ROOT, "spec", "gen.py"), "check"],
                           capture_output=True, text=True)
        self.assertEqual(p.returncode, 0, p.stderr)

    def test_bad_tables_are_refused(self):
        spec = json.loads(read("spec", "actions.json"))
        for bad, why in (({"name": "x", "kind": "desktop", "params": "nope", "answer": "cursor",
                           "doc": "."}, "parameter nope"),
                         ({"name": "x", "kind": "laptop", "params": "", "answer": "cursor",
                           "doc": "."}, "kind"),
                         ({"name": "x", "kind": "desktop", "params": "", "answer": "nope",
                           "doc": "."}, "answer nope"),
                         ({"name": "left_click", "kind": "desktop", "params": "", "answer": "cursor",
                           "doc": "."}, "twice")):
            s = dict(spec, actions=spec["actions"] + [bad])
            with self.assertRaisesRegex(gen.SpecError, why):
                gen.actions(s)

    def test_every_handler_is_in_the_table_and_back(self):
        handlers = envd_handlers()
        self.assertIn("left_click", handlers)
        self.assertEqual(handlers - self.names, set(), "handlers missing from spec/actions.json")
        self.assertEqual(self.names - handlers, set(), "actions without an act_NAME handler")

    def test_python_sdk_has_every_action(self):
        # read_file and write_file are Computer's own (streamed) methods.
        sdk = {row[0] for row in cubicle.actions.TABLE}
        missing = {a for a in self.names - sdk if not callable(getattr(Computer, a, None))}
        self.assertEqual(missing, set())
        own = {a.name for a in self.acts if a.python is False}
        self.assertEqual(own & sdk, set())
        self.assertEqual(own, {"read_file", "write_file"})

    def test_python_signatures_follow_the_table(self):
        import inspect
        sig = inspect.signature(Computer.click)
        self.assertEqual(list(sig.parameters)[:3], ["self", "x", "y"])
        self.assertEqual(sig.parameters["button"].kind, inspect.Parameter.KEYWORD_ONLY)
        self.assertEqual(inspect.signature(Computer.hotkey).parameters["keys"].kind,
                         inspect.Parameter.VAR_POSITIONAL)
        self.assertIn("region", inspect.signature(Computer.screenshot).parameters)

    def test_cli_has_every_action(self):
        cli = os.path.join(BUILD, "bin", "cubicle")
        if not os.path.exists(cli):
            self.skipTest("no built cubicle")
        out = subprocess.run([cli, "--help"], capture_output=True, text=True).stdout
        listed = set(out.split("Actions (cubicle ACTION --help for each):")[1]
                     .split("\n\n")[0].split())
        self.assertEqual(listed, self.names)
        # A parameter's type reaches the CLI: drag's path is JSON, launch's wait_s a number.
        usage = subprocess.run([cli, "drag", "--help"], capture_output=True, text=True).stdout
        self.assertIn("[--path JSON]", usage)
        usage = subprocess.run([cli, "launch", "--help"], capture_output=True, text=True).stdout
        self.assertIn("[--wait-s N]", usage)

    def test_mcp_has_every_action(self):
        mcp = {a.name for a in self.acts if a.mcp}
        self.assertEqual(self.names - mcp, MCP_COVERED_ELSEWHERE)
        # The hand-written tools (lifecycle, streams, runs) do not shadow an action.
        own = set(re.findall(r'^\s+\{"([a-z_0-9]+)",\s*\n?\s*"',
                             read("host", "api", "mcp-tools.c"), re.M))
        self.assertIn("create_computer", own)
        self.assertEqual(own & self.names, set())

    def test_openapi_has_every_action(self):
        doc = json.loads(read("docs", "openapi.json"))
        paths = {p[len(openapi.ACTIONS_PREFIX):] for p in doc["paths"]
                 if p.startswith(openapi.ACTIONS_PREFIX)}
        self.assertEqual(paths, self.names)
        drag = doc["paths"][openapi.ACTIONS_PREFIX + "drag"]["post"]
        body = drag["requestBody"]["content"]["application/json"]["schema"]
        self.assertEqual(body["required"], ["from_x", "from_y", "to_x", "to_y"])
        self.assertEqual(body["properties"]["duration_ms"]["maximum"], 60000)
        shot = doc["paths"][openapi.ACTIONS_PREFIX + "screenshot"]["post"]["responses"]["200"]
        self.assertIn("image/png", shot["content"])

    def test_envd_readme_names_every_action(self):
        envd = read("envd", "README.md").split("## Actions")[1]
        for name in self.names:
            self.assertIn("`%s`" % name, envd, "envd/README.md")

    def test_openapi_validates(self):
        # docs/openapi.json, and a broken copy the validator must refuse.
        doc = json.loads(read("docs", "openapi.json"))
        doc["paths"]["/healthz"]["get"]["responses"] = 5
        bad = os.path.join(os.environ.get("TMPDIR", "/tmp"), "cubicle-bad-openapi-%d.json"
                           % os.getpid())
        with open(bad, "w") as f:
            json.dump(doc, f)
        good = os.path.join(ROOT, "docs", "openapi.json")
        try:
            p = subprocess.run(["node", os.path.join(ROOT, "tests", "host", "validate_openapi.mjs"),
                                good, bad], capture_output=True, text=True, timeout=120)
        finally:
            os.unlink(bad)
        lines = p.stdout.splitlines()
        self.assertEqual(len(lines), 2, p.stdout + p.stderr)
        self.assertIn(": valid OpenAPI 3.1.0", lines[0], p.stdout)
        self.assertIn(": invalid:", lines[1], p.stdout)

if __name__ == "__main__":
    unittest.main()
