"""Issue 11, item 7: every request value that becomes a path stays a name.

Before the fix the admin's `PUT /v1/sessions/S/files?workspace=../..&path=x`
wrote x two directories above the state's sessions/ directory, as root.
Here every parameter that reaches a host path (the session routes'
workspace, session and path; a create's session and workspace; the
workspace of the key routes; the embed page's assets) gets traversal
strings from the admin and from a workspace key: each answer is a 400
naming the parameter or a 404, and nothing appears outside the state
directory, whose parent (and grandparents, up to a directory the test made)
is listed before and after.
"""

import json
import os
import shutil
import tempfile
import unittest
import urllib.parse

import attack

srv = None
root = None
ws = key = ws2 = key2 = None

# Raw strings, percent-encoded for the URL by quote(); then strings sent
# exactly as written (already encoded, or encodings of encodings).
TRAVERSALS = [
    "..", "../..", "../../..", "../../../escaped", "..\\..", ".", "/", "/tmp",
    "/etc/passwd", "a/../../..", "x/..", "...", "\x00", "a\x00b", "../\x00",
    "\u2025", "\uff0e\uff0e", "\u00e9t\u00e9", "..\u2215..", "~", "$HOME", "*",
    "a" * 65, "a" * 5000, " ", "a b", "\n", "ws-00000000\r\nx: y",
]
ENCODED = [
    "%2e%2e", "%2e%2e%2f%2e%2e", "%252e%252e%252f", "..%2f..", "%2e%2e%5c%2e%2e",
    "%c0%ae%c0%ae", "%00", "a%00b", "%ff%fe",
]


def values():
    out = [urllib.parse.quote(v, safe="") for v in TRAVERSALS]
    return out + ENCODED


def listing(top, skip):
    """Every path under top (names, sizes), but what is under skip."""
    seen = set()
    for d, dirs, files in os.walk(top):
        if os.path.abspath(d).startswith(os.path.abspath(skip)):
            dirs[:] = []
            continue
        for n in dirs + files:
            p = os.path.join(d, n)
            if os.path.abspath(p) == os.path.abspath(skip):
                continue
            st = os.lstat(p)
            seen.add((os.path.relpath(p, top), st.st_size))
    return seen


def setUpModule():
    global srv, root, ws, key, ws2, key2
    # The state directory four levels down a directory of the test's own,
    # so a walk of up to four ".." lands where the test can see it.
    root = tempfile.mkdtemp(prefix="cubicle-paths-")
    state = os.path.join(root, "a", "b", "c", "state")
    os.makedirs(state)
    srv = attack.Cubicled(state_dir=state).start()
    ws, key = srv.workspace("paths")
    ws2, key2 = srv.workspace("other")


def tearDownModule():
    srv.stop()
    shutil.rmtree(root, ignore_errors=True)


class Paths(unittest.TestCase):
    def setUp(self):
        self.before = listing(root, srv.state)

    def tearDown(self):
        after = listing(root, srv.state)
        self.assertEqual(after - self.before, set(),
                         "files appeared outside the state directory")
        # Nothing in the state directory's own top level but what cubicled keeps.
        for n in os.listdir(srv.state):
            self.assertIn(n.split("-")[0], (
                "cubicle.db", "cubicle.db", "admin.key", "stream.key", "computers",
                "sessions", "spool", "cubicled.log", "byo.sock", "templates"), n)

    def req(self, method, path, body=None, key=True):
        """srv.req, where a connection closed without an answer (the HTTP
        library refusing a decoded NUL) counts as a 400."""
        import http.client
        try:
            return srv.req(method, path, body, key=key)
        except http.client.RemoteDisconnected:
            return attack.cubicled.harness.Response(
                400, {}, b'{"error":{"code":"invalid","message":"closed"}}')

    def refused(self, r, params, what):
        self.assertIn(r.status, (400, 404), "%s -> %d %s" % (what, r.status, r.body[:300]))
        err = json.loads(r.body)["error"]
        if r.status == 400 and "param" in err:
            self.assertIn(err["param"], params, what)

    def test_the_good_way_works(self):
        """The same routes with good values do what they should (so the
        refusals below are about the values)."""
        srv.ok("PUT", "/v1/sessions/s1/files?path=input/a.txt", b"hello", key=key)
        r = srv.req("GET", "/v1/sessions/s1/files?path=input/a.txt", key=key)
        self.assertEqual((r.status, r.body), (200, b"hello"))
        r = srv.req("GET", "/v1/sessions/s1/files?path=input/a.txt&workspace=" + ws)
        self.assertEqual((r.status, r.body), (200, b"hello"))
        self.assertTrue(os.path.isfile(os.path.join(srv.state, "sessions", ws, "s1", "input",
                                                    "a.txt")))

    def test_cut_short_paths_name_nothing(self):
        """A decoded CR, LF or NUL must not cut a path short: DELETE
        /v1/workspaces/WS%0A/keys/K was DELETE /v1/workspaces/WS."""
        w, _ = srv.workspace("victim")
        for enc in ("%0A", "%0D", "%0D%0A", "%00"):
            r = self.req("DELETE", "/v1/workspaces/%s%s/keys/key-1" % (w, enc))
            self.assertIn(r.status, (400, 404), enc)
        ids = [x["id"] for x in srv.ok("GET", "/v1/workspaces")["workspaces"]]
        self.assertIn(w, ids)

    def test_session_workspace_query(self):
        for v in values():
            for method in ("PUT", "GET"):
                path = "/v1/sessions/s1/files?workspace=%s&path=x" % v
                body = b"escaped" if method == "PUT" else None
                self.refused(self.req(method, path, body), ("workspace", "path"),
                             "admin %s %s" % (method, path[:120]))
                # A workspace key may only name its own workspace.
                self.refused(self.req(method, path, body, key=key), ("workspace", "path"),
                             "key %s %s" % (method, path[:120]))

    def test_session_workspace_of_another_or_none(self):
        for k in (True, key):
            r = srv.req("PUT", "/v1/sessions/s1/files?workspace=ws-0000000000000000&path=x",
                        b"x", key=k)
            self.assertEqual(r.status, 404, r.body)
        r = srv.req("PUT", "/v1/sessions/s1/files?workspace=%s&path=x" % ws2, b"x", key=key)
        self.assertEqual(r.status, 404, r.body)
        self.assertFalse(os.path.exists(os.path.join(srv.state, "sessions", ws2, "s1", "x")))

    def test_session_name(self):
        for v in values():
            for k, extra in ((True, "&workspace=" + ws), (key, "")):
                for method in ("PUT", "GET"):
                    path = "/v1/sessions/%s/files?path=x%s" % (v, extra)
                    r = self.req(method, path, b"escaped" if method == "PUT" else None, key=k)
                    if r.status == 200:
                        # The HTTP library folds a decoded %2F's slashes:
                        # what is left is a plain session name.
                        name = urllib.parse.unquote(v).strip("/")
                        self.assertRegex(name, r"^[A-Za-z0-9_-]{1,64}$", path[:120])
                        continue
                    self.refused(r, ("session",), "%s %s" % (method, path[:120]))

    def test_session_file_path(self):
        for v in values():
            for k, extra in ((True, "&workspace=" + ws), (key, "")):
                for method in ("PUT", "GET"):
                    path = "/v1/sessions/s1/files?path=%s%s" % (v, extra)
                    r = self.req(method, path, b"escaped" if method == "PUT" else None, key=k)
                    if r.status == 200:
                        # Any other name is a file name inside the session
                        # ("...", "a b", "~"): allowed; it is there.
                        name = urllib.parse.unquote(v)
                        self.assertTrue("/" not in name and name not in (".", ".."),
                                        "%s %s -> 200" % (method, path[:120]))
                        self.assertTrue(os.path.isfile(os.path.join(
                            srv.state, "sessions", ws, "s1", name)), path[:120])
                        continue
                    self.refused(r, ("path", "workspace"), "%s %s" % (method, path[:120]))

    def test_session_symlink_out_is_refused(self):
        """A guest can leave a symlink in its session; the host never follows it."""
        srv.ok("PUT", "/v1/sessions/s2/files?path=input/ok", b"x", key=key)
        sdir = os.path.join(srv.state, "sessions", ws, "s2")
        outside = os.path.join(root, "secret")
        with open(outside, "w") as f:
            f.write("host secret")
        try:
            os.symlink(outside, os.path.join(sdir, "output", "link"))
            os.symlink(root, os.path.join(sdir, "dirlink"))
            self.before = listing(root, srv.state)
            for p in ("output/link", "dirlink/secret", "dirlink/new"):
                for method in ("GET", "PUT"):
                    r = srv.req(method, "/v1/sessions/s2/files?path=" + p,
                                b"overwritten" if method == "PUT" else None, key=key)
                    self.refused(r, ("path",), method + " " + p)
            with open(outside) as f:
                self.assertEqual(f.read(), "host secret")
        finally:
            os.unlink(outside)
            self.before = listing(root, srv.state)

    def test_create_session_and_workspace(self):
        for v in TRAVERSALS + ENCODED:
            for k, body in ((key, {"kind": "sandbox", "session": v}),
                            (True, {"kind": "sandbox", "session": v, "workspace": ws}),
                            (True, {"kind": "sandbox", "workspace": v})):
                r = srv.req("POST", "/v1/computers", body, key=k)
                self.refused(r, ("session", "workspace"), json.dumps(body)[:120])

    def test_workspace_routes(self):
        for v in values():
            for method, tail in (("POST", "/keys"), ("GET", "/keys"), ("DELETE", ""),
                                 ("DELETE", "/keys/key-1")):
                path = "/v1/workspaces/%s%s" % (v, tail)
                self.refused(self.req(method, path), ("workspace", "key_id", "confirm"),
                             "%s %s" % (method, path[:120]))
        for v in values():
            path = "/v1/workspaces/%s/keys/%s" % (ws, v)
            self.refused(self.req("DELETE", path), ("key_id", "confirm"), path[:120])
        # Still there, with its key.
        srv.ok("GET", "/v1/computers", key=key)

    def test_embed_assets(self):
        page = srv.req("GET", "/embed/c-0", key=None)
        for v in values():
            r = self.req("GET", "/embed/assets/" + v, key=None)
            if r.status == 200:  # the path folded to the page itself
                self.assertEqual(r.body, page.body, v)
                continue
            self.assertIn(r.status, (400, 401, 404), v)


if __name__ == "__main__":
    unittest.main()
