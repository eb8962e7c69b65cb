"""Every envd action (envd/README.md) as a method of Computer, generated
from one table (_table.py, itself generated from spec/actions.json): the
name, its parameters, what it returns, and its doc.

Parameters are written as a small signature:
  "x"       required, positional
  "x?"      optional (None = the server's default), positional
  "*keys"   the remaining positional arguments, sent as the list `keys`
  "-button" keyword-only, optional
Every method also takes **params, sent as they are, for anything newer.
"""

import inspect

from . import errors

P = inspect.Parameter

# name, parameters, result (how the answer is returned), doc: generated from
# spec/actions.json by spec/gen.py (spec/README.md); `make generate` rewrites it.
from ._table import TABLE  # noqa: E402,F401


class ProcessResult:
    """What bash() and python() return."""

    def __init__(self, answer):
        self.stdout = answer.get("stdout", "")
        self.stderr = answer.get("stderr", "")
        self.exit_code = answer.get("exit_code")
        self.signal = answer.get("signal")
        self.duration_ms = answer.get("duration_ms")
        self.timed_out = bool(answer.get("timed_out"))
        self.raw = answer

    @property
    def ok(self):
        return self.exit_code == 0

    def __repr__(self):
        return "ProcessResult(exit_code=%r, stdout=%r, stderr=%r)" % (
            self.exit_code, self.stdout[:200], self.stderr[:200])


def _signature(spec):
    params = [P("self", P.POSITIONAL_OR_KEYWORD)]
    varargs = None
    for word in spec.split():
        if word.startswith("*"):
            varargs = word[1:]
            params.append(P(varargs, P.VAR_POSITIONAL))
        elif word.startswith("-"):
            params.append(P(word[1:], P.KEYWORD_ONLY, default=None))
        elif word.endswith("?"):
            params.append(P(word[:-1], P.POSITIONAL_OR_KEYWORD, default=None))
        else:
            params.append(P(word, P.POSITIONAL_OR_KEYWORD))
    params.append(P("params", P.VAR_KEYWORD))
    return inspect.Signature(params), varargs


def _body(sig, varargs, args, kwargs):
    bound = sig.bind(*args, **kwargs)
    body = {}
    for name, value in list(bound.arguments.items())[1:]:
        if name == "params":
            body.update(value)
        elif name == varargs:
            if value:
                body[name] = list(value)
        elif name == "region" and value is not None:
            body["x"], body["y"], body["width"], body["height"] = value
        elif value is not None:
            body[name] = value
    return body


def _process(c, name, body):
    try:
        return ProcessResult(c.action(name, body))
    except errors.Timeout as exc:
        if isinstance(exc.result, dict):
            exc.result = ProcessResult(exc.result)
        raise


RESULTS = {
    "json": lambda c, name, body: c.action(name, body),
    "image": lambda c, name, body: c.action_raw(name, body),
    "windows": lambda c, name, body: c.action(name, body)["windows"],
    "text": lambda c, name, body: c.action(name, body)["text"],
    "process": _process,
}


def make_method(name, spec, result, doc):
    sig, varargs = _signature(spec)
    call = RESULTS[result]

    def method(*args, **kwargs):
        return call(args[0], name, _body(sig, varargs, args, kwargs))

    method.__name__ = method.__qualname__ = name
    method.__signature__ = sig
    method.__doc__ = doc
    return method


def install(cls):
    """Adds every action of TABLE to cls as a method."""
    for name, spec, result, doc in TABLE:
        setattr(cls, name, make_method(name, spec, result, doc))
    return cls

