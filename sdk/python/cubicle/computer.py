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
