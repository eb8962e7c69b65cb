"""docs/openapi.json against a real cubicled's router: GET /openapi.json
serves the committed document without a key; every operation of the
document is routed (called with ids that name nothing, each answers
something other than "no such endpoint"); every other method on those
paths, and paths outside the document, are not. The router itself refuses
to serve a route the table lacks (host/api/routes.h), so a route added to
the code and not to spec/api.json fails whichever test calls it; and a
static check finds every literal the router's source matches paths with
in the document, for a route no test calls yet. No computer is created:
a few seconds."""

import json
import os
import re
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cubicled import Cubicled  # noqa: E402

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
METHODS = ("get", "post", "put", "delete", "patch", "options")
# What each path parameter is set to: names nothing (or a real asset).
VALUES = {"id": "c-nothere", "workspace": "ws-nothere", "key_id": "key-nothere",
          "session": "s-nothere", "asset": "embed.js", "port": "3000", "host": "h-nothere",
          "rid": "rec-nothere", "name": "t-nothere"}
QUERY = "?path=x&token=t&confirm=ws-nothere"


def no_such_endpoint(r):
    if r.status != 404 or not r.body.startswith(b"{"):
        return False
    return r.json["error"]["message"].startswith("no such endpoint")


class OpenAPI(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        with open(os.path.join(ROOT, "docs", "openapi.json"), "rb") as f:
            cls.raw = f.read()
        cls.doc = json.loads(cls.raw)
        cls.srv = Cubicled().start()

    @classmethod
    def tearDownClass(cls):
        cls.srv.stop()

    def call(self, method, template, op=None):
        path = re.sub(r"\{([^}]*)\}", lambda m: VALUES[m.group(1)], template) + QUERY
        key = False if op is not None and op.get("security") == [] else True
        body = b"" if method in ("PUT", "GET", "OPTIONS") else {}
        return self.srv.req(method, path, body, key=key)

    def test_served_without_a_key(self):
        r = self.srv.req("GET", "/openapi.json", key=False)
        self.assertEqual(r.status, 200)
        self.assertEqual(r.headers["content-type"], "application/json")
        self.assertEqual(r.body, self.raw)
        self.assertEqual(r.json["openapi"], "3.1.0")

    def test_every_operation_is_routed(self):
        n = 0
        for template, item in self.doc["paths"].items():
            for m in METHODS:
                if m not in item:
                    continue
                r = self.call(m.upper(), template, item[m])
                self.assertFalse(no_such_endpoint(r), "%s %s: %r" % (m, template, r))
                self.assertLess(r.status, 500, "%s %s: %r" % (m, template, r))
                n += 1
        self.assertGreater(n, 70)
        # An action path reaches the computer lookup, not the router's 404.
        r = self.call("POST", "/v1/computers/{id}/actions/left_click")
        self.assertEqual(r.status, 404)
        self.assertIn("c-nothere", r.json["error"]["message"])

    def test_nothing_else_is_routed(self):
        for template, item in self.doc["paths"].items():
            if item.get("x-cubicle-any-method"):
                continue
            for m in METHODS:
                if m in item:
                    continue
                r = self.call(m.upper(), template)
                refused = no_such_endpoint(r) or (
                    r.status in (400, 401) and r.json["error"]["code"] in (
                        "bad_request", "unauthorized"))
                self.assertTrue(refused, "%s %s is served: %r" % (m, template, r))
        for path in ("/v1/nothing", "/v1/computers/c-x/nothing", "/v1/computers/c-x/stream/x",
                     "/v1/workspaces/ws-x/keys/k/x", "/openapi.yaml", "/v2/computers"):
            r = self.srv.req("GET", path)
            self.assertTrue(no_such_endpoint(r), "%s: %r" % (path, r))


class RouterSource(unittest.TestCase):
    """Static, for a route no test calls yet: every literal the router
    compares a path or a path segment with (`strcmp(s[N], "x")`,
    `strcmp(req->path, "/x")`) is in the document at that place."""

    def test_router_literals_are_in_the_document(self):
        with open(os.path.join(ROOT, "docs", "openapi.json")) as f:
            paths = list(json.load(f)["paths"])
        segs = [p.strip("/").split("/") for p in paths]
        src = ""
        for name in sorted(os.listdir(os.path.join(ROOT, "host", "api"))):
            if name.endswith(".c"):
                with open(os.path.join(ROOT, "host", "api", name)) as f:
                    src += f.read()
        found = re.findall(r'strcmp\(s\[(\d)\], "([^"]*)"\)', src)
        self.assertIn(("3", "actions"), found)
        for pos, lit in found:
            self.assertTrue(any(len(s) > int(pos) and s[int(pos)] == lit for s in segs),
                            "the router matches segment %s == %r: not in docs/openapi.json"
                            % (pos, lit))
        whole = re.findall(r'strn?cmp\(req->path, "([^"]*)"', src)
        self.assertIn("/healthz", whole)
        for lit in whole:
            self.assertTrue(any(p == lit or (lit.endswith("/") and p.startswith(lit))
                                for p in paths), "the router matches %r: not in the document"
                            % lit)


class Declared(unittest.TestCase):
    """Static, for what a call with dummy values cannot see: every query
    parameter the router and the handlers read is declared on some
    operation, and the document's error codes are exactly the server's."""

    @classmethod
    def setUpClass(cls):
        with open(os.path.join(ROOT, "docs", "openapi.json")) as f:
            cls.doc = json.load(f)

    def params(self):
        comp = self.doc["components"]["parameters"]
        out = set()
        for item in self.doc["paths"].values():
            ops = [item] + [item[m] for m in METHODS if m in item]
            for op in ops:
                for p in op.get("parameters", []):
                    p = comp[p["$ref"].rsplit("/", 1)[1]] if "$ref" in p else p
                    out.add((p["in"], p["name"]))
        return out

    def test_every_query_parameter_read_is_declared(self):
        src = ""
        for name in sorted(os.listdir(os.path.join(ROOT, "host", "api"))):
            if name.endswith(".c"):
                with open(os.path.join(ROOT, "host", "api", name)) as f:
                    src += f.read()
        read = set(re.findall(r'(?:httpd_query|api_query_int|api_query_time)\(req, "([a-z_]+)"',
                              src))
        self.assertTrue({"wait", "timeout_s", "path", "token", "from", "hostname"} <= read, read)
        declared = {name for where, name in self.params() if where == "query"}
        self.assertEqual(read - declared, set(), "read by cubicled, not in docs/openapi.json")

    def test_error_codes_are_the_servers(self):
        with open(os.path.join(ROOT, "wire", "err.c")) as f:
            names = set(re.findall(r'\[ERR_[A-Z_]+\] = \{\d+, "([a-z_]+)"\}', f.read()))
        names.discard("ok")
        with open(os.path.join(ROOT, "wire", "httpd.c")) as f:
            if '"request_timeout"' in f.read():  # httpd's own 408
                names.add("request_timeout")
        self.assertGreater(len(names), 10)
        enum = self.doc["components"]["schemas"]["Error"]["properties"]["error"]["properties"][
            "code"]["enum"]
        self.assertEqual(set(enum), names)
        # ... and the Error response's prose names each, with its status.
        prose = self.doc["components"]["responses"]["Error"]["description"]
        for n in names:
            self.assertIn(n + " (", prose, n)

    def test_every_operation_answers_something_described(self):
        for template, item in self.doc["paths"].items():
            for m in METHODS:
                if m not in item:
                    continue
                op = item[m]
                self.assertIn("operationId", op, (m, template))
                codes = set(op["responses"])
                self.assertTrue(codes & {"200", "201", "202", "204", "101", "405"},
                                (m, template, codes))


if __name__ == "__main__":
    unittest.main()
