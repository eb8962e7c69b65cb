"""The Python SDK's public surface as JSON, for test_sdk_parity.mjs (which
holds it against the TypeScript SDK's):

    python3 sdk_surface.py  →  {"exports": {name: kind},
                                "classes": {class: {member: {...}}},
                                "functions": {name: [parameter, ...]},
                                "generated": [action, ...]}

A class's members are its public names and those of its bases in the
package (methods, properties, class attributes, and the `self.X = ...` of
its __init__), each {"kind": "method"|"field", "static": bool, "params":
[names] or null, "inherited": bool (defined by a base class)};
"constructor" holds __init__'s parameters. Parameters
are named as a caller passes them: `self`/`cls` and **kwargs left out,
*args by its name, a trailing "_" (from_, Python's way around a reserved
word) dropped. "generated" lists the methods made from spec/actions.json
(both SDKs' tables are generated from it; test_tables.py checks them)."""

import ast
import inspect
import json
import os
import sys
import textwrap

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "sdk",
                                "python"))
import cubicle  # noqa: E402
from cubicle import actions  # noqa: E402


def param_names(fn, bound):
    out = []
    for i, p in enumerate(inspect.signature(fn).parameters.values()):
        if (i == 0 and not bound) or p.kind == p.VAR_KEYWORD:
            continue
        out.append(p.name[:-1] if p.name.endswith("_") else p.name)
    return out


def init_fields(cls):
    """The public attributes __init__ assigns (self.X = ...)."""
    init = cls.__dict__.get("__init__")
    if init is None:
        return []
    tree = ast.parse(textwrap.dedent(inspect.getsource(init)))
    names = []
    for node in ast.walk(tree):
        targets = node.targets if isinstance(node, ast.Assign) else \
            [node.target] if isinstance(node, (ast.AnnAssign, ast.AugAssign)) else []
        for t in targets:
            if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and \
                    t.value.id == "self" and not t.attr.startswith("_"):
                names.append(t.attr)
    return names


def members(cls):
    out = {}
    own = [k for k in cls.__mro__ if k.__module__.split(".")[0] == "cubicle"]
    for k in reversed(own):  # a subclass's definition wins
        inherited = k is not cls
        for name in init_fields(k):
            out[name] = {"kind": "field", "static": False, "params": None,
                         "inherited": inherited}
        for name, v in vars(k).items():
            if name.startswith("_"):
                continue
            if isinstance(v, (staticmethod, classmethod)):
                m = {"kind": "method", "static": True,
                     "params": param_names(getattr(cls, name), True)}
            elif inspect.isfunction(v):
                m = {"kind": "method", "static": False, "params": param_names(v, False)}
            else:  # a property, a class attribute
                m = {"kind": "field", "static": False, "params": None}
            out[name] = dict(m, inherited=inherited)
    owner = next((k for k in own if "__init__" in k.__dict__), None)
    out["constructor"] = {"kind": "method", "static": True,
                          "params": param_names(owner.__init__, False) if owner else [],
                          "inherited": owner is not cls}
    return out


def main():
    surface = {"exports": {}, "classes": {}, "functions": {},
               "generated": [row[0] for row in actions.TABLE]}
    for name in cubicle.__all__:
        v = getattr(cubicle, name)
        if inspect.isclass(v):
            surface["exports"][name] = "class"
            surface["classes"][name] = members(v)
        elif inspect.isfunction(v):
            surface["exports"][name] = "function"
            surface["functions"][name] = param_names(v, True)
        else:
            surface["exports"][name] = "value"
    json.dump(surface, sys.stdout, indent=1, sort_keys=True)
    print()


if __name__ == "__main__":
    main()
