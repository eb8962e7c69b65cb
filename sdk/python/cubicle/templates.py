"""Templates (docs/api.md, Templates; docs/templates.md): a recipe of Debian
packages, pip and npm packages, files and shell steps, built once by
cubicled into an image computers start from.

    t = client.templates.create("etl", apt=["jq"], pip=["polars"],
                                run=["echo done"], on_log=print)
    with Computer.create(template="etl") as c:
        ...
"""

import time
import urllib.parse

from . import errors

POLL_S = 0.5


class Templates:
    """The templates the client's key sees (its workspace's and the global
    ones); `client.templates`. Templates are plain dicts: name, base, state
    ("building", "ready", "error"), error, size_mb, build_s, recipe, ..."""

    def __init__(self, client):
        self.client = client

    @staticmethod
    def _path(name, sub=""):
        return "/v1/templates/" + urllib.parse.quote(name, safe="") + sub

    def create(self, name, base="sandbox", apt=None, pip=None, npm=None, run=None, files=None,
               workspace=None, wait=True, timeout_s=1800, on_log=None):
        """Builds template `name`. apt/pip/npm: lists of packages; run: shell
        steps (as root, in order); files: {absolute path: text}. With wait
        (the default) returns once it is built, the template's dict, and
        raises TemplateFailed when its build failed; on_log(text) gets the
        build's log as it grows. wait=False returns at once (state building,
        or ready when the cache had the same recipe)."""
        body = {"name": name, "base": base, "apt": apt, "pip": pip, "npm": npm, "run": run,
                "files": files, "workspace": workspace}
        body = {k: v for k, v in body.items() if v is not None}
        t = self.client.request("POST", "/v1/templates", body)
        if not wait:
            return t
        if on_log is not None:
            for text in self.follow(name):
                on_log(text)
        return self.get(name, wait=True, timeout_s=timeout_s)

    def get(self, name, wait=False, timeout_s=1800):
        """The template's dict; with wait, once its build is over (raises
        TemplateFailed if it failed, Timeout after timeout_s)."""
        query = {"wait": "ready", "timeout_s": int(timeout_s)} if wait else None
        t = self.client.request("GET", self._path(name), query=query)
        if wait and t.get("state") == "error":
            raise errors.TemplateFailed("template_failed", "template %s failed: %s" % (
                name, t.get("error") or "unknown error"))
        return t

    def list(self, workspace=None):
        """Every template the key sees (the admin: every one, or a workspace's
        and the global ones)."""
        return self.client.request("GET", "/v1/templates",
                                   query={"workspace": workspace})["templates"]

    def delete(self, name):
        """Deletes it (Conflict while a computer made from it is not deleted)."""
        return self.client.request("DELETE", self._path(name))

    def log(self, name, offset=0):
        """A piece of the build's log from byte `offset`: {"log", "next_offset",
        "state", ...}."""
        return self.client.request("GET", self._path(name, "/log"), query={"offset": offset})

    def follow(self, name):
        """Yields the build's log as it grows, until the build is over."""
        offset = 0
        while True:
            piece = self.log(name, offset)
            offset = piece["next_offset"]
            if piece["log"]:
                yield piece["log"]
            if piece["state"] != "building":
                rest = self.log(name, offset)
                if rest["log"]:
                    yield rest["log"]
                return
            time.sleep(POLL_S)
