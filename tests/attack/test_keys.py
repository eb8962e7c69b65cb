"""Issue 11, item 9: revocation gaps.

Before the fix no endpoint revoked a workspace key or deleted a workspace,
and a stream revocation lived in memory only: a restart of cubicled brought
revoked tokens back until they expired. Here: a revoked key answers 401 at
once; an admin route never takes another workspace's key id; a workspace
key on the admin routes is 403; a deleted workspace's computers are gone
(the host's /proc says so), its keys answer 401, its usage stays queryable;
a revoked stream token stays refused after cubicled restarts (cleanly, and
after kill -9).
"""

import os
import signal
import unittest

import attack
from attack import wait_until

srv = None


def setUpModule():
    global srv
    srv = attack.Cubicled().start()


def tearDownModule():
    srv.stop()


def stop_cleanly(s):
    """SIGTERM, leaving its computers running (the harness's stop deletes them)."""
    s.proc.send_signal(signal.SIGTERM)
    s.proc.wait(timeout=60)
    s.proc.stdout.close()
    s.log.close()


class Keys(unittest.TestCase):
    def test_post_returns_id_and_list_shows_prefix_not_key(self):
        ws, _ = srv.workspace("list")
        made = srv.ok("POST", "/v1/workspaces/%s/keys" % ws, status=201)
        self.assertRegex(made["id"], r"^key-\d+$")
        self.assertTrue(made["key"].startswith(made["prefix"]))
        self.assertLess(len(made["prefix"]), len(made["key"]) // 3)
        r = srv.req("GET", "/v1/workspaces/%s/keys" % ws)
        self.assertEqual(r.status, 200)
        self.assertNotIn(made["key"].encode(), r.body)
        keys = {k["id"]: k for k in r.json["keys"]}
        self.assertIn(made["id"], keys)
        self.assertEqual(keys[made["id"]]["prefix"], made["prefix"])
        self.assertIsNone(keys[made["id"]]["last_used_at"])
        self.assertIsInstance(keys[made["id"]]["created_at"], int)
        # A use shows as last_used_at.
        srv.ok("GET", "/v1/computers", key=made["key"])
        keys = {k["id"]: k for k in srv.ok("GET", "/v1/workspaces/%s/keys" % ws)["keys"]}
        self.assertIsInstance(keys[made["id"]]["last_used_at"], int)
        self.assertGreaterEqual(keys[made["id"]]["last_used_at"], keys[made["id"]]["created_at"])

    def test_revoked_key_is_401_at_once(self):
        ws, keep = srv.workspace("revoke")
        made = srv.ok("POST", "/v1/workspaces/%s/keys" % ws, status=201)
        srv.ok("GET", "/v1/computers", key=made["key"])
        r = srv.req("DELETE", "/v1/workspaces/%s/keys/%s" % (ws, made["id"]))
        self.assertEqual(r.status, 200, r.body)
        for path in ("/v1/computers", "/v1/usage", "/v1/sessions/s/files?path=x"):
            r = srv.req("GET", path, key=made["key"])
            self.assertEqual(r.status, 401, path)
        r = srv.req("POST", "/mcp", {"jsonrpc": "2.0", "id": 1, "method": "ping"},
                    key=made["key"], headers={"Accept": "application/json, text/event-stream"})
        self.assertEqual(r.status, 401)
        # The workspace's other key goes on working; the revoked one is not listed.
        srv.ok("GET", "/v1/computers", key=keep)
        ids = [k["id"] for k in srv.ok("GET", "/v1/workspaces/%s/keys" % ws)["keys"]]
        self.assertNotIn(made["id"], ids)
        # Twice: gone.
        self.assertEqual(srv.req("DELETE", "/v1/workspaces/%s/keys/%s" % (ws, made["id"])).status,
                         404)

    def test_other_workspaces_key_is_404(self):
        a, _ = srv.workspace("a")
        b, bkey = srv.workspace("b")
        bid = srv.ok("GET", "/v1/workspaces/%s/keys" % b)["keys"][0]["id"]
        r = srv.req("DELETE", "/v1/workspaces/%s/keys/%s" % (a, bid))
        self.assertEqual(r.status, 404, r.body)
        srv.ok("GET", "/v1/computers", key=bkey)  # untouched
        for bad in ("key-0", "key-999999", "key-99999999999999999999999", "1", "key--1"):
            r = srv.req("DELETE", "/v1/workspaces/%s/keys/%s" % (a, bad))
            self.assertIn(r.status, (400, 404), bad)

    def test_workspace_key_on_admin_routes_is_403(self):
        ws, key = srv.workspace("tenant")
        kid = srv.ok("GET", "/v1/workspaces/%s/keys" % ws)["keys"][0]["id"]
        for method, path in (("GET", "/v1/workspaces/%s/keys" % ws),
                             ("POST", "/v1/workspaces/%s/keys" % ws),
                             ("DELETE", "/v1/workspaces/%s/keys/%s" % (ws, kid)),
                             ("DELETE", "/v1/workspaces/%s?confirm=%s" % (ws, ws)),
                             ("GET", "/v1/workspaces")):
            r = srv.req(method, path, key=key)
            self.assertEqual(r.status, 403, "%s %s" % (method, path))
        srv.ok("GET", "/v1/computers", key=key)  # still valid

    def test_delete_workspace(self):
        ws, key = srv.workspace("doomed")
        other, okey = srv.workspace("bystander")
        c = srv.computer(key, kind="sandbox", size="xs")
        oc = srv.computer(okey, kind="sandbox", size="xs")
        init = c.get("id")
        state = srv.ok("GET", "/v1/computers/" + init)
        self.assertEqual(state["state"], "running")
        pids = pids_of(init)
        self.assertTrue(pids, "the computer's processes, from the host's /proc")
        srv.ok("PUT", "/v1/sessions/notes/files?path=input/a.txt", b"private", key=key)
        sessions = os.path.join(srv.state, "sessions", ws)
        self.assertTrue(os.path.isdir(sessions))
        # Without ?confirm= it is refused (the HTTP library folds
        # .../keys/.. into .../{ws}).
        r = srv.req("DELETE", "/v1/workspaces/" + ws)
        self.assertEqual(r.status, 400)
        self.assertEqual(r.json["error"]["param"], "confirm")
        r = srv.req("DELETE", "/v1/workspaces/%s?confirm=%s" % (ws, ws))
        self.assertEqual(r.status, 200, r.body)
        self.assertEqual(r.json["computers"], [init])
        self.assertEqual(srv.req("GET", "/v1/computers", key=key).status, 401)
        self.assertNotIn(ws, [w["id"] for w in srv.ok("GET", "/v1/workspaces")["workspaces"]])
        self.assertEqual(srv.ok("GET", "/v1/computers/" + init)["state"], "deleted")
        self.assertFalse(os.path.exists(sessions), "its session files are gone")
        wait_until(lambda: not any(os.path.exists("/proc/%d" % p) for p in pids), 30,
                   "the deleted workspace's processes to end")
        # No new computer, no new key in it; deleting again is 404.
        r = srv.req("POST", "/v1/computers", {"kind": "sandbox", "workspace": ws})
        self.assertIn(r.status, (400, 404))
        self.assertEqual(srv.req("POST", "/v1/workspaces/%s/keys" % ws).status, 404)
        self.assertEqual(srv.req("DELETE", "/v1/workspaces/%s?confirm=%s" % (ws, ws)).status,
                         404)
        # Its usage stays for the admin.
        u = srv.ok("GET", "/v1/usage?workspace=" + ws)
        self.assertEqual([x["id"] for x in u["computers"]], [init])
        self.assertGreater(u["total"]["running_seconds"], 0)
        # The bystander is untouched.
        self.assertEqual(srv.ok("GET", "/v1/computers/" + oc["id"], key=okey)["state"],
                         "running")
        srv.ok("DELETE", "/v1/computers/" + oc["id"], key=okey)


def pids_of(cid):
    """Host pids whose cgroup or command line names the computer."""
    out = []
    for p in os.listdir("/proc"):
        if not p.isdigit():
            continue
        try:
            with open("/proc/%s/cgroup" % p) as f:
                cg = f.read()
        except OSError:
            continue
        if cid in cg:
            out.append(int(p))
    return out


class StreamRevocation(unittest.TestCase):
    def test_revoked_token_stays_refused_after_restart(self):
        s = attack.Cubicled().start()
        try:
            ws, key = s.workspace("viewers")
            d = s.computer(key, kind="desktop", size="small")
            tok = s.ok("POST", "/v1/computers/%s/stream" % d["id"], {"ttl_s": 600}, key=key,
                       status=201)["token"]
            kept = s.ok("POST", "/v1/computers/%s/stream" % d["id"], {"ttl_s": 600}, key=key,
                        status=201)["token"]

            def probe(t):
                # A plain GET of the stream URL: 403 for a refused token,
                # 400 ("connect with Upgrade") for a good one.
                return s.req("GET", "/v1/computers/%s/stream?token=%s" % (d["id"], t),
                             key=None).status

            self.assertEqual(probe(tok), 400)
            s.ok("POST", "/v1/computers/%s/stream/revoke" % d["id"], key=key)
            self.assertEqual(probe(tok), 403)
            self.assertEqual(probe(kept), 403)  # issued before the revocation too
            fresh = s.ok("POST", "/v1/computers/%s/stream" % d["id"], {"ttl_s": 600},
                         key=key, status=201)["token"]
            self.assertEqual(probe(fresh), 400)
            for how in ("clean", "kill9"):
                if how == "clean":
                    stop_cleanly(s)
                else:
                    s.kill9()
                s.restart()
                wait_until(lambda: s.ok("GET", "/v1/computers/" + d["id"],
                                        key=key)["state"] == "running", 60, "adopted")
                self.assertEqual(probe(tok), 403, how)
                self.assertEqual(probe(kept), 403, how)
                self.assertEqual(probe(fresh), 400, how)  # not everything refused
        finally:
            s.stop()


if __name__ == "__main__":
    unittest.main()
