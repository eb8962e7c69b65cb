"""A computer: its lifecycle and, generated from actions.TABLE, every action."""

import io
import json
import os
import urllib.parse

from . import actions, errors
from .client import default_client

FILES_INLINE = 1 << 20  # write_file of str/bytes up to this size still streams via PUT


@actions.install
class Computer:
    """One computer. Make it with Computer.create() or Computer.get(); its
    methods are named exactly as the envd actions (computer.left_click(10, 20)).

    `with Computer.create(...) as c:` deletes the computer when the block ends.
    """

    def __init__(self, data, client=None):
        self.client = client or default_client()
        self.data = data

    # ---- fields ----------------------------------------------------------

    @property
    def id(self):
        return self.data["id"]

    @property
    def state(self):
        return self.data.get("state")

    @property
    def kind(self):
        return self.data.get("kind")

    @property
    def size(self):
        return self.data.get("size")

    @property
    def workspace(self):
        return self.data.get("workspace")

    @property
    def metadata(self):
        return self.data.get("metadata")

    def __repr__(self):
        return "Computer(%s, %s, %s)" % (self.id, self.kind, self.state)

    # ---- lifecycle -------------------------------------------------------

    @classmethod
    def create(cls, kind=None, size=None, workspace=None, isolation=None,
               resolution=None, idle_timeout_s=None, metadata=None, session=None,
               external_workspace_id=None, template=None, wait=True, timeout_s=120,
               client=None):
        """Creates a computer (a desktop unless kind or a template says
        otherwise: a template's base is its kind); with wait (the default)
        returns once it runs (raises ComputerFailed if it ends in error,
        Timeout after timeout_s)."""
        client = client or default_client()
        if kind is None and template is None:
            kind = "desktop"
        body = {"kind": kind, "size": size, "workspace": workspace, "isolation": isolation,
                "resolution": list(resolution) if resolution else None,
                "idle_timeout_s": idle_timeout_s, "metadata": metadata, "session": session,
                "external_workspace_id": external_workspace_id, "template": template}
        body = {k: v for k, v in body.items() if v is not None}
        query = {"wait": "running", "timeout_s": int(timeout_s)} if wait else None
        c = cls(client.request("POST", "/v1/computers", body, query), client)
        if wait:
            c._check_running()
        return c

    @classmethod
    def get(cls, id, client=None):
        client = client or default_client()
        return cls(client.request("GET", cls._path(id)), client)

    @classmethod
    def list(cls, state=None, kind=None, workspace=None, client=None):
        """The computers the key sees, optionally filtered."""
        client = client or default_client()
        out = client.request("GET", "/v1/computers",
                             query={"state": state, "kind": kind, "workspace": workspace})
        return [cls(c, client) for c in out["computers"]]

    @staticmethod
    def _path(id, sub=""):
        return "/v1/computers/" + urllib.parse.quote(id, safe="") + sub

    def _check_running(self):
        if self.state == "error":
            raise errors.ComputerFailed("computer_failed", "computer %s failed: %s" % (
                self.id, self.data.get("error") or "unknown error"))
        if self.state != "running":
            raise errors.Conflict("conflict", "computer %s is %s" % (self.id, self.state))

    def refresh(self):
        """Reloads the fields (state, last_activity_at, ...); returns self."""
        self.data = self.client.request("GET", self._path(self.id))
        return self

    def wait(self, state="running", timeout_s=60):
        """Waits until the computer reaches state (or error/deleted); returns self."""
        self.data = self.client.request("GET", self._path(self.id),
                                        query={"wait": state, "timeout_s": int(timeout_s)})
        return self

    def stop(self):
        """Stops the computer; its disk stays and billing at the running rate ends."""
        self.data = self.client.request("POST", self._path(self.id, "/stop"))
        return self

    def start(self):
        self.data = self.client.request("POST", self._path(self.id, "/start"))
        return self

    def delete(self):
        """Deletes the computer, for good."""
        self.data = self.client.request("DELETE", self._path(self.id))
        return self

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        try:
            self.delete()
        except errors.NotFound:
            pass
        return False

    def stream(self, view_only=False, ttl_s=60):
        """A stream token: {"token", "expires_at", "ws_url", "embed_url", "view_only"}."""
        return self.client.request("POST", self._path(self.id, "/stream"),
                                   {"view_only": bool(view_only), "ttl_s": int(ttl_s)})

    def stream_url(self, view_only=False, ttl_s=60):
        """The embed page's URL (for a browser or an iframe), valid ttl_s seconds."""
        return self.stream(view_only, ttl_s)["embed_url"]

    def revoke_streams(self):
        """Revokes every stream token issued so far and closes their streams."""
        return self.client.request("POST", self._path(self.id, "/stream/revoke"))

    # ---- previews and CDP (docs/api.md, "Previews" and "CDP") --------------

    def preview(self, port, ttl_s=None, public=False):
        """A URL that opens `port` of this computer in a browser, HTTP and
        WebSocket: {"url", "expires_at", "port", "public"}. The URL carries a
        token (it becomes a cookie of that host on the first request) unless
        public (which cubicled must allow: --public-previews)."""
        body = {"port": int(port)}
        if ttl_s is not None:
            body["ttl_s"] = int(ttl_s)
        if public:
            body["public"] = True
        return self.client.request("POST", self._path(self.id, "/previews"), body)

    def preview_url(self, port, ttl_s=None, public=False):
        """Just the preview's URL."""
        return self.preview(port, ttl_s, public)["url"]

    def previews(self):
        """This computer's previews that still work: [{"port", "public", "expires_at"}]."""
        return self.client.request("GET", self._path(self.id, "/previews"))["previews"]

    def revoke_preview(self, port):
        """Every URL of port's previews stops working; open connections close."""
        return self.client.request("DELETE", self._path(self.id, "/previews/%d" % int(port)))

    def cdp(self, ttl_s=None):
        """The desktop browser's DevTools through cubicled (Chromium started or
        reused): {"ws_url", "http_url", "expires_at", "browser", "started"};
        ws_url is for Playwright's connect_over_cdp."""
        body = {} if ttl_s is None else {"ttl_s": int(ttl_s)}
        return self.client.request("POST", self._path(self.id, "/cdp"), body)

    # ---- recordings (docs/api.md, "Recordings") --------------------------

    def start_recording(self, keep=False):
        """Starts recording the screen (a running desktop); returns the
        recording's JSON ({"id", "state": "recording", ...})."""
        return self.client.request("POST", self._path(self.id, "/recordings"),
                                   {"keep": bool(keep)})

    def stop_recording(self, recording_id, keep=None):
        """Stops it (the file is finished when this returns); `keep` keeps it
        after the computer is deleted. Returns its JSON."""
        body = {} if keep is None else {"keep": bool(keep)}
        return self.client.request(
            "POST", self._path(self.id, "/recordings/%s/stop" % recording_id), body)

    def recordings(self):
        """The computer's recordings, oldest first."""
        return self.client.request("GET", self._path(self.id, "/recordings"))["recordings"]

    def recording_actions(self, recording_id):
        """{"recording", "actions": [{"t_ms", "duration_ms", "action", "params",
        "status"}]}: what the API ran while it recorded."""
        return self.client.request(
            "GET", self._path(self.id, "/recordings/%s/actions" % recording_id))

    def download_recording(self, recording_id, to=None):
        """The WebM file's bytes; or, with `to` (a path or a writable binary
        file), streams it there and returns the byte count."""
        path = self._path(self.id, "/recordings/" + recording_id)
        if to is None:
            buf = io.BytesIO()
            self.client.download(path, None, buf)
            return buf.getvalue()
        if isinstance(to, (str, os.PathLike)):
            with open(to, "wb") as f:
                return self.client.download(path, None, f)
        return self.client.download(path, None, to)

    def delete_recording(self, recording_id):
        """Deletes it (stopping it first if it records)."""
        return self.client.request(
            "DELETE", self._path(self.id, "/recordings/" + recording_id))

    # ---- actions ---------------------------------------------------------

    def action(self, name, params=None, **kw):
        """Runs any action with a dict of parameters; returns its JSON answer."""
        body = dict(params or {}, **kw)
        _, _, out = self.client.raw("POST", self._path(self.id, "/actions/" + name), body)
        return json.loads(out)

    def action_raw(self, name, params=None):
        """Runs an action whose answer is bytes (screenshot)."""
        _, _, out = self.client.raw("POST", self._path(self.id, "/actions/" + name),
                                    params or {})
        return out

    # ---- computer-use: what a model sent, answered as its loop expects ----

    def computer_use(self, input, dialect=None, display=None, screenshot_delay_ms=None,
                     tool=None):
        """Runs what a computer-use model sent and returns what its loop sends
        back, exactly (POST .../computer-use, docs/computer-use.md).

        `input`: an Anthropic tool_use block, assistant turn ({"content": [...]},
        or the Messages API's answer as is) or computer input ({"action", ...});
        an OpenAI computer_call item or action ({"type", ...}). `tool`: the type
        of the tools[] entry the model was given ("computer_toolset_20260801",
        "computer_20251124", ..., "computer", "computer_use_preview"; default:
        by the input's shape); `dialect` ("anthropic"|"openai") may say the
        vendor instead. `display`: what the model sees, (width, height) or
        "WIDTHxHEIGHT".

        The answer is a tool_result block, {"role": "user", "content":
        [tool_result, ...]} for a turn, or a computer_call_output item; a
        ComputerUseAnswer (a dict) whose .ran, .failed (index, or None) and
        .error say how a batch went: a failure midway is in the answer
        (is_error results, "status": "incomplete"), not an exception."""
        body = dict(input)
        query = {"dialect": dialect, "tool": tool, "screenshot_delay_ms": screenshot_delay_ms}
        if isinstance(display, str):
            query["display"] = display
        elif display is not None:
            w, h = (display["width"], display["height"]) if isinstance(display, dict) \
                else display
            body["display"] = {"width": int(w), "height": int(h)}
        _, headers, out = self.client.raw("POST", self._path(self.id, "/computer-use"), body,
                                          query)
        return ComputerUseAnswer(json.loads(out), headers)

    # ---- files: streamed through /files, any size --------------------------

    def read_file(self, path, to=None):
        """The file's bytes; or, with `to` (a path or a writable binary file),
        streams it there and returns the byte count."""
        query = {"path": path}
        files = self._path(self.id, "/files")
        if to is None:
            buf = io.BytesIO()
            self.client.download(files, query, buf)
            return buf.getvalue()
        if isinstance(to, (str, os.PathLike)):
            with open(to, "wb") as f:
                return self.client.download(files, query, f)
        return self.client.download(files, query, to)

    def write_file(self, path, data):
        """Writes data (bytes, str as UTF-8, or a readable binary file, streamed)
        to path; returns {"ok", "path", "size"}."""
        if isinstance(data, str):
            data = data.encode()
        if isinstance(data, (bytes, bytearray, memoryview)):
            return self.client.upload(self._path(self.id, "/files"), {"path": path},
                                      bytes(data), len(data))
        # The upload needs its length up front: from here to the end.
        start = data.tell()
        data.seek(0, os.SEEK_END)
        length = data.tell() - start
        data.seek(start)
        return self.client.upload(self._path(self.id, "/files"), {"path": path}, data, length)


class ComputerUseAnswer(dict):
    """The answer of Computer.computer_use: the vendor's JSON, plus how a
    batch went. ran: calls done, in order; failed: the index of the one that
    failed (in the turn's content, or in actions[]), None if none; error: why."""

    def __init__(self, answer, headers):
        super().__init__(answer)
        ran = headers.get("X-Computer-Use-Ran")
        failed = headers.get("X-Computer-Use-Failed")
        self.ran = int(ran) if ran is not None else 1
        self.failed = int(failed) if failed is not None else None
        self.error = headers.get("X-Computer-Use-Error")
