"""Every envd action (envd/README.md) as a method of Computer, generated
from one table: the name, its parameters, what it returns, and its doc.

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

XY = "x? y?"
SHOT = "-format -quality -region -x -y -width -height -max_width -max_height"
PROC = "-timeout_s -cwd -env -stdin"

# name, parameters, result (how the answer is returned), doc
TABLE = [
    # mouse
    ("click", XY + " -button -clicks", "json",
     "Clicks at (x, y), or where the cursor is; button left|middle|right, 1..3 clicks."),
    ("left_click", XY, "json", "Left-clicks at (x, y), or where the cursor is."),
    ("right_click", XY, "json", "Right-clicks at (x, y), or where the cursor is."),
    ("middle_click", XY, "json", "Middle-clicks at (x, y), or where the cursor is."),
    ("double_click", XY + " -button", "json", "Double-clicks at (x, y)."),
    ("triple_click", XY + " -button", "json", "Triple-clicks at (x, y)."),
    ("move_cursor", "x y", "json", "Moves the pointer to (x, y)."),
    ("mouse_down", XY + " -button", "json", "Presses a mouse button."),
    ("mouse_up", XY + " -button", "json", "Releases a mouse button."),
    ("drag", "from_x from_y to_x to_y -path -duration_ms -button", "json",
     "Drags from one point to another; path adds waypoints [[x, y], ...]."),
    ("scroll", "direction? clicks? -x -y", "json",
     'Scrolls "up", "down", "left" or "right" by `clicks` wheel clicks.'),
    ("scroll_up", "clicks? -x -y", "json", "Scrolls up."),
    ("scroll_down", "clicks? -x -y", "json", "Scrolls down."),
    ("scroll_left", "clicks? -x -y", "json", "Scrolls left."),
    ("scroll_right", "clicks? -x -y", "json", "Scrolls right."),
    # keyboard
    ("type", "text -delay_ms", "json", "Types text (any Unicode; \\n is Return)."),
    ("key", "key", "json", 'Presses a key or a combination: "Return", "ctrl+l".'),
    ("hotkey", "*keys", "json", 'Presses keys in order, releases them in reverse: hotkey("ctrl", "c").'),
    ("key_down", "key", "json", "Presses a key and holds it."),
    ("key_up", "key", "json", "Releases a key."),
    # screen
    ("screenshot", SHOT, "image",
     "The screen as PNG (or JPEG) bytes; region=(x, y, width, height), max_width/max_height downscale."),
    ("screenshot_base64", SHOT, "json",
     'The screen as {"image" (base64), "mime_type", "width", "height", "scale"}.'),
    ("get_screen_size", "", "json", '{"width", "height"}.'),
    ("set_screen_size", "width height", "json",
     "Changes the screen's resolution (up to the size the desktop started with, at least 1920x1200)."),
    ("get_cursor_position", "", "json", '{"x", "y", "normalized": {"x", "y"}}.'),
    # windows and apps
    ("windows", "", "windows", "The windows: a list of {id, title, app_class, pid, x, y, width, height, ...}."),
    ("launch", "app *args -wait_s", "json",
     "Starts an app (a .desktop id like firefox-esr, or a command); wait_s waits for its window."),
    ("focus_window", "id", "json", "Focuses a window."),
    ("maximize_window", "id", "json", "Maximizes a window."),
    ("minimize_window", "id", "json", "Minimizes a window."),
    ("close_window", "id", "json", "Asks a window to close."),
    ("get_window_size", "id", "json", '{"id", "width", "height"}.'),
    ("set_window_size", "id width height", "json", "Resizes a window."),
    ("get_window_position", "id", "json", '{"id", "x", "y"}.'),
    ("set_window_position", "id x y", "json", "Moves a window."),
    # desktop
    ("get_desktop_environment", "", "json", '{"name", "version", "window_manager"}.'),
    ("set_wallpaper", "path", "json", "Sets the wallpaper to a PNG or JPEG inside the computer."),
    ("get_accessibility_tree", "-max_depth -app -max_nodes", "json",
     '{"applications": [node], "truncated"}; node = {role, name, states, bounds, children}.'),
    ("get_clipboard", "-timeout_ms", "text", "The clipboard's text."),
    ("set_clipboard", "text", "json", "Puts text on the clipboard."),
    # shell
    ("bash", "command " + PROC, "process",
     "Runs a bash command; returns a ProcessResult (raises Timeout past timeout_s)."),
    ("python", "code " + PROC, "process", "Runs python3 code; returns a ProcessResult."),
]


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

