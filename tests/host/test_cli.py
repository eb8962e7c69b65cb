"""The `cubicle` CLI (sdk/cli) end to end: the real build/bin/cubicle
against a real cubicled with real container computers (a sandbox and a
desktop), output modes, exit codes, files, streams and bad input."""

import http.client
import json
import os
import struct
import subprocess
import unittest
import urllib.parse

from cubicled import Cubicled, harness, wait_until

CLI = os.environ.get("CUBICLE_CLI") or os.path.join(harness.BIN, "cubicle")

srv = None
key = None
sandbox = desktop = None


def cli(*args, api_key=True, stdin=None, env=None):
    """Runs the CLI; returns CompletedProcess with bytes stdout/stderr."""
    e = dict(os.environ)
    e["CUBICLE_URL"] = "http://127.0.0.1:%d" % srv.port
    e["CUBICLE_API_KEY"] = key if api_key is True else (api_key or "")
    e.update(env or {})
    return subprocess.run([CLI] + list(args), capture_output=True, env=e, input=stdin,
                          timeout=180)


def ok(*args, **kw):
    """Runs the CLI, expects exit 0, returns stdout as text."""
    p = cli(*args, **kw)
    if p.returncode != 0:
        raise AssertionError("cubicle %s -> %d\n%s" % (" ".join(args), p.returncode,
                                                       p.stderr.decode(errors="replace")))
    return p.stdout.decode()


def png_size(data):
    assert data[:8] == b"\x89PNG\r\n\x1a\n", data[:16]
    return struct.unpack(">II", data[16:24])


def setUpModule():
    global srv, key, sandbox, desktop
    srv = Cubicled().start()
    _, key = srv.workspace("cli")
    sandbox = ok("create", "--kind", "sandbox", "--size", "xs", "--metadata", "team=qa",
                 "--wait").strip()
    desktop = ok("create", "--kind=desktop", "--resolution", "1024x768", "--wait").strip()


def tearDownModule():
    srv.stop()


class Lifecycle(unittest.TestCase):
    def test_create_prints_a_running_computer(self):
        c = srv.ok("GET", "/v1/computers/" + sandbox)
        self.assertEqual((c["state"], c["kind"], c["size"]), ("running", "sandbox", "xs"))
        self.assertEqual(c["metadata"], {"team": "qa"})
        self.assertEqual(srv.ok("GET", "/v1/computers/" + desktop)["resolution"], [1024, 768])

    def test_ls_table_and_json(self):
        out = ok("ls")
        lines = out.splitlines()
        self.assertEqual(lines[0].split()[:4], ["ID", "KIND", "SIZE", "STATE"])
        row = [l for l in lines if l.startswith(sandbox)][0].split()
        self.assertEqual(row[1:4], ["sandbox", "xs", "running"])
        # Columns line up: every row's KIND starts where the header's does.
        col = lines[0].index("KIND")
        self.assertTrue(all(l[col - 2:col] == "  " and l[col] != " " for l in lines[1:]))
        ids = [c["id"] for c in json.loads(ok("ls", "--json"))["computers"]]
        self.assertIn(desktop, ids)
        only = json.loads(ok("--json", "ls", "--kind", "desktop"))["computers"]
        self.assertEqual({c["kind"] for c in only}, {"desktop"})

    def test_get_human_and_json(self):
        fields = dict(l.split(None, 1) for l in ok("get", sandbox).splitlines()
                      if len(l.split(None, 1)) == 2)
        self.assertEqual(fields["state"], "running")
        self.assertEqual(fields["metadata"], '{"team":"qa"}')
        self.assertEqual(json.loads(ok("get", sandbox, "--json"))["id"], sandbox)

    def test_stop_start_rm(self):
        cid = ok("create", "--kind", "sandbox", "--size", "xs", "--wait").strip()
        ok("bash", cid, "echo kept > ~/f")
        self.assertEqual(ok("stop", cid).split(), [cid, "stopped"])
        p = cli("bash", cid, "true")
        self.assertEqual(p.returncode, 1)
        self.assertIn(b"stopped", p.stderr)
        self.assertEqual(ok("start", cid).split(), [cid, "running"])
        self.assertEqual(ok("bash", cid, "cat ~/f"), "kept\n")
        self.assertEqual(ok("rm", cid).split(), [cid, "deleted"])
        self.assertEqual(srv.ok("GET", "/v1/computers/" + cid)["state"], "deleted")

    def test_usage(self):
        ok("bash", sandbox, "true")
        lines = ok("usage").splitlines()
        self.assertEqual(lines[0].split(), ["ID", "KIND", "SIZE", "RUNNING_S", "STOPPED_S",
                                            "COST_USD"])
        self.assertTrue(any(l.startswith(sandbox) for l in lines))
        self.assertEqual(lines[-1].split()[0], "total")
        u = json.loads(ok("usage", "--json", "--from", "0"))
        self.assertIn(sandbox, [c["id"] for c in u["computers"]])
        self.assertGreater(u["total"]["running_seconds"], 0)


class Shell(unittest.TestCase):
    def test_bash_passes_the_exit_code_and_both_streams(self):
        p = cli("bash", sandbox, "echo out; echo err >&2; exit 7")
        self.assertEqual((p.returncode, p.stdout, p.stderr), (7, b"out\n", b"err\n"))
        self.assertEqual(cli("bash", sandbox, "true").returncode, 0)
        self.assertEqual(cli("bash", sandbox, r"printf 'a\0b'").stdout, b"a\0b")

    def test_bash_timeout_and_json(self):
        p = cli("bash", sandbox, "echo partial; sleep 30", "--timeout-s", "1")
        self.assertEqual(p.returncode, 124)
        self.assertEqual(p.stdout, b"partial\n")
        self.assertIn(b"timed out", p.stderr)
        p = cli("--json", "bash", sandbox, "echo hi; exit 3")
        self.assertEqual(p.returncode, 3)
        self.assertEqual(json.loads(p.stdout)["stdout"], "hi\n")

    def test_python_and_small_files(self):
        self.assertEqual(ok("python", sandbox, "print(6 * 7)"), "42\n")
        ok("write_file", sandbox, "note.txt", "héllo")
        self.assertEqual(ok("read_file", sandbox, "note.txt"), "héllo")
        self.assertEqual(cli("read_file", sandbox, "/bin/true").stdout[:4], b"\x7fELF")


class Files(unittest.TestCase):
    def setUp(self):
        self.tmp = os.path.join(srv.state, "cli-files")
        os.makedirs(self.tmp, exist_ok=True)

    def test_cp_both_ways_byte_for_byte(self):
        src = os.path.join(self.tmp, "blob.bin")
        data = os.urandom(6 << 20) + bytes(range(256))
        with open(src, "wb") as f:
            f.write(data)
        ok("cp", src, sandbox + ":/tmp/blob.bin")
        self.assertEqual(ok("bash", sandbox, "stat -c %s /tmp/blob.bin").strip(),
                         str(len(data)))
        back = os.path.join(self.tmp, "back.bin")
        ok("cp", sandbox + ":/tmp/blob.bin", back)
        with open(back, "rb") as f:
            self.assertEqual(f.read(), data)
        # A directory on either side takes the other side's name; stdin and stdout work.
        ok("cp", src, sandbox + ":/tmp/dir/")
        self.assertEqual(ok("bash", sandbox, "cmp /tmp/blob.bin /tmp/dir/blob.bin && echo same"),
                         "same\n")
        sub = os.path.join(self.tmp, "sub")
        os.makedirs(sub, exist_ok=True)
        ok("cp", sandbox + ":/tmp/dir/blob.bin", sub)
        self.assertTrue(os.path.exists(os.path.join(sub, "blob.bin")))
        self.assertEqual(cli("cp", "-", sandbox + ":/tmp/piped", stdin=b"through a pipe").returncode,
                         0)
        self.assertEqual(cli("cp", sandbox + ":/tmp/piped", "-").stdout, b"through a pipe")

    def test_cp_errors(self):
        target = os.path.join(self.tmp, "never")
        p = cli("cp", sandbox + ":/tmp/does-not-exist", target)
        self.assertEqual(p.returncode, 1)
        self.assertIn(b"does-not-exist", p.stderr)
        self.assertEqual([n for n in os.listdir(self.tmp) if "never" in n], [])
        p = cli("cp", "/nonexistent/file", sandbox + ":/tmp/x")
        self.assertEqual(p.returncode, 1)
        self.assertEqual(cli("cp", "a", "b").returncode, 2)


class Desktop(unittest.TestCase):
    def test_click_moves_the_pointer(self):
        self.assertEqual(ok("click", desktop, "100", "200", "--button", "right"), "")
        ok("key", desktop, "Escape")
        self.assertEqual(ok("get_cursor_position", desktop).split(), ["100", "200"])
        # Away from the panel, whose menu button would grab the pointer.
        ok("left_click", desktop, "500", "300")
        self.assertEqual(ok("get_cursor_position", desktop), "500 300\n")
        ok("drag", desktop, "300", "300", "600", "450")
        self.assertEqual(ok("get_cursor_position", desktop), "600 450\n")
        ok("action", desktop, "move_cursor", '{"x": 7}', "--param", "y=8")
        self.assertEqual(json.loads(ok("--json", "get_cursor_position", desktop))["x"], 7)
        self.assertEqual(ok("get_screen_size", desktop), "1024 768\n")

    def test_type_into_a_terminal(self):
        ok("launch", desktop, "xfce4-terminal", "--wait-s", "20")
        wait_until(lambda: "Xfce4-terminal" in ok("windows", desktop), 20, "the terminal window")
        ok("type", desktop, "echo typed-by-cli > /tmp/typed\n")
        wait_until(lambda: ok("bash", desktop, "cat /tmp/typed 2>/dev/null") == "typed-by-cli\n",
                   20, "the typed command to run")
        ok("hotkey", desktop, "ctrl", "shift", "q")  # close the terminal

    def test_clipboard_and_scroll(self):
        ok("set_clipboard", desktop, "from the cli ✓")
        self.assertEqual(ok("get_clipboard", desktop), "from the cli ✓")
        self.assertEqual(cli("scroll", desktop, "down", "3").returncode, 0)
        p = cli("scroll", desktop, "sideways")
        self.assertEqual(p.returncode, 1)
        self.assertIn(b"direction", p.stderr)

    def test_screenshot_files(self):
        out = os.path.join(srv.state, "shot.png")
        self.assertEqual(ok("screenshot", desktop, "-o", out).split(), [out, "1024x768"])
        with open(out, "rb") as f:
            self.assertEqual(png_size(f.read()), (1024, 768))
        ok("screenshot", desktop, "--scale", "0.5", "-o", out)
        with open(out, "rb") as f:
            self.assertEqual(png_size(f.read()), (512, 384))
        data = cli("screenshot", desktop, "--region", "10,20,300,100", "-o", "-").stdout
        self.assertEqual(png_size(data), (300, 100))
        jpeg = cli("screenshot", desktop, "--format", "jpeg", "--max-width", "200").stdout
        self.assertEqual(jpeg[:3], b"\xff\xd8\xff")

    def test_accessibility_tree_and_desktop(self):
        tree = ok("get_accessibility_tree", desktop, "--max-depth", "2")
        self.assertIn('application "xfce4-panel"', tree)
        self.assertIn("name", ok("get_desktop_environment", desktop))

    def test_stream_url_works(self):
        url = ok("stream", desktop, "--ttl", "30").strip()
        u = urllib.parse.urlsplit(url)
        self.assertEqual(u.path, "/embed/" + desktop)
        self.assertIn("token=", u.query)
        conn = http.client.HTTPConnection(u.hostname, u.port, timeout=30)
        conn.request("GET", u.path + "?" + u.query)
        r = conn.getresponse()
        self.assertEqual(r.status, 200)
        self.assertIn(b"<", r.read())
        conn.close()
        view = json.loads(ok("--json", "stream", desktop, "--view-only"))
        self.assertTrue(view["view_only"])
        self.assertIn("view_only=1", view["embed_url"])

    def test_record(self):
        rid = ok("record", "start", desktop).strip()
        self.assertRegex(rid, r"^rec-[0-9a-f]{16}$")
        ok("move_cursor", desktop, "12", "34")
        self.assertIn(rid, ok("record", "ls", desktop))
        stopped = json.loads(ok("--json", "record", "stop", desktop, rid))
        self.assertEqual((stopped["state"], stopped["actions"]), ("stopped", 1))
        self.assertIn("move_cursor", ok("record", "actions", desktop, rid))
        webm = cli("record", "get", desktop, rid, "-o", "-").stdout
        self.assertEqual(webm[:4], b"\x1a\x45\xdf\xa3")
        ok("record", "rm", desktop, rid)
        p = cli("record", "get", desktop, rid, "-o", "-")
        self.assertEqual(p.returncode, 1)
        self.assertIn(b"no recording", p.stderr)
        self.assertEqual(cli("record", "stop", desktop).returncode, 2)


    def test_preview_list_and_revoke(self):
        # A server in the sandbox answers through the printed URL.
        ok("bash", sandbox, "(setsid python3 -m http.server 8123 --bind 127.0.0.1 "
                            "--directory /etc >/dev/null 2>&1 &)")
        url = ok("preview", sandbox, "8123", "--ttl", "60").strip()
        u = urllib.parse.urlsplit(url)
        self.assertEqual(u.netloc, "8123-%s.localhost:%d" % (sandbox, srv.preview_port))
        wait_until(lambda: srv.preview_get(url).status == 302, 30, "the preview to answer")
        cookie = srv.preview_get(url).headers["set-cookie"].split(";")[0]
        wait_until(lambda: srv.preview_get(u.netloc, "/hostname", headers={
            "Cookie": cookie}).status == 200, 30, "the server in the sandbox")
        lines = ok("preview", sandbox).splitlines()
        self.assertIn("8123\ttoken", "\n".join(lines))
        self.assertEqual(json.loads(ok("--json", "preview", sandbox, "8123", "--revoke"))["port"],
                         8123)
        self.assertEqual(srv.preview_get(u.netloc, "/hostname",
                                         headers={"Cookie": cookie}).status, 403)
        p = cli("preview", sandbox, "0")
        self.assertEqual(p.returncode, 2)
        p = cli("cdp", sandbox)
        self.assertEqual(p.returncode, 1)
        self.assertIn(b"sandbox", p.stderr)


class BadInput(unittest.TestCase):
    def test_unknown_command_and_option(self):
        p = cli("frobnicate")
        self.assertEqual(p.returncode, 2)
        self.assertIn(b"unknown command 'frobnicate'", p.stderr)
        self.assertIn(b"--help", p.stderr)
        p = cli("ls", "--colour")
        self.assertEqual(p.returncode, 2)
        self.assertIn(b"usage: cubicle ls", p.stderr)
        self.assertEqual(cli().returncode, 2)

    def test_missing_and_malformed_arguments(self):
        for args, says in ((["get"], b"missing"), (["click"], b"ID"),
                           (["move_cursor", "c-x", "5"], b"missing y"),
                           (["click", "c-x", "ten", "20"], b"x: expected an integer"),
                           (["create", "--resolution", "big"], b"--resolution"),
                           (["hotkey", "c-x"], b"missing keys"),
                           (["get", "a", "b"], b"too many")):
            p = cli(*args)
            self.assertEqual(p.returncode, 2, args)
            self.assertIn(says, p.stderr, args)
            self.assertIn(b"usage: cubicle " + args[0].encode(), p.stderr, args)

    def test_api_errors_pass_the_message(self):
        p = cli("get", "c-0000000000000000")
        self.assertEqual(p.returncode, 1)
        self.assertEqual(p.stderr, b"cubicle: no computer c-0000000000000000\n")
        p = cli("create", "--kind", "sandbox", "--size", "huge")
        self.assertEqual(p.returncode, 1)
        self.assertIn(b"xs, sm, md, lg, xl", p.stderr)
        p = cli("left_click", sandbox, "1", "1")
        self.assertEqual(p.returncode, 1)
        self.assertIn(b"needs a display", p.stderr)

    def test_keys_and_unreachable_server(self):
        p = cli("ls", api_key=None)
        self.assertEqual(p.returncode, 2)
        self.assertIn(b"CUBICLE_API_KEY", p.stderr)
        p = cli("ls", api_key="ck_wrong")
        self.assertEqual(p.returncode, 1)
        self.assertIn(b"API key", p.stderr)
        self.assertEqual(cli("ls", "--api-key", key, api_key=None).returncode, 0)
        p = cli("--url", "http://127.0.0.1:1", "ls")
        self.assertEqual(p.returncode, 1)
        self.assertIn(b"cannot reach cubicled at http://127.0.0.1:1", p.stderr)

    def test_template_follow_start_rm(self):
        recipe = os.path.join(srv.state, "motd.txt")
        with open(recipe, "w") as f:
            f.write("made by the cli\n")
        p = cli("template", "create", "cli-tpl", "--apt", "jq", "--run", "echo step-out",
                "--file", "/etc/cli-motd=" + recipe, "--follow")
        out = p.stdout.decode()
        self.assertEqual(p.returncode, 0, p.stderr)
        # The build's log, the cache hit's, or a layer hit's (its image
        # made again over the current base: pruned, or a new envd).
        self.assertRegex(out, r"step|layer tpl-layer-[0-9a-f]{16} is in the cache")
        self.assertRegex(out, r"ready: tpl-image-|cache hit")
        self.assertIn("cli-tpl", ok("template", "ls"))
        t = json.loads(ok("template", "get", "cli-tpl", "--json"))
        self.assertEqual((t["state"], t["base"]), ("ready", "sandbox"))
        self.assertRegex(ok("template", "log", "cli-tpl"),
                         r"step-out|layer tpl-layer-[0-9a-f]{16} is in the cache")
        cid = ok("create", "--template", "cli-tpl", "--wait").strip()
        p = cli("bash", cid, "cat /etc/cli-motd; jq -n 5")
        self.assertEqual(p.stdout, b"made by the cli\n5\n")
        p = cli("template", "rm", "cli-tpl")
        self.assertEqual(p.returncode, 1)
        self.assertIn(b"in use by computer " + cid.encode(), p.stderr)
        ok("rm", cid)
        self.assertEqual(ok("template", "rm", "cli-tpl"), "cli-tpl deleted\n")
        # A failed build: --follow shows why and exits 1.
        p = cli("template", "create", "cli-bad", "--run", "echo nope >&2; exit 9", "--follow")
        self.assertEqual(p.returncode, 1)
        self.assertIn(b"exit code 9", p.stderr + p.stdout)
        ok("template", "rm", "cli-bad")
        p = cli("template", "frobnicate")
        self.assertEqual(p.returncode, 2)

    def test_help_for_every_command(self):
        top = ok("--help")
        names = ["create", "ls", "get", "stop", "start", "rm", "cp", "stream", "usage",
                 "action", "template"]
        actions = " ".join(top.split("Actions")[1].split("Exit status")[0].splitlines()[1:])
        names += actions.split()
        self.assertIn("get_accessibility_tree", names)
        for n in names:
            p = cli(n, "--help", api_key=None)
            self.assertEqual(p.returncode, 0, n)
            self.assertTrue(p.stdout.startswith(b"usage: cubicle " + n.encode()), n)


if __name__ == "__main__":
    unittest.main()
