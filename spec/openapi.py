"""openapi: docs/openapi.json from spec/api.json (every route but the
actions) and spec/actions.json (one path per action, with its parameters
and its answer), and cubicled's route table from the same document."""

import copy
import json
import os
import re

SPEC = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(SPEC)

ACTIONS_PREFIX = "/v1/computers/{id}/actions/"
METHODS = ("get", "post", "put", "delete", "patch", "options")


def version():
    with open(os.path.join(ROOT, "CMakeLists.txt")) as f:
        return re.search(r"project\(cubicle VERSION ([0-9.]+)", f.read()).group(1)


def param_schema(p):
    t = p.type
    if t in ("int", "num"):
        s = {"type": "integer" if t == "int" else "number", "minimum": p.lo, "maximum": p.hi}
    elif t == "str":
        s = {"type": "string"}
    elif t == "enum":
        s = {"type": "string", "enum": list(p.enum)}
    elif t == "strs":
        s = {"type": "array", "items": {"type": "string"}, "minItems": p.lo, "maxItems": p.hi}
    elif t == "points":
        point = {"oneOf": [
            {"type": "array", "items": {"type": "integer"}, "minItems": 2, "maxItems": 2},
            {"type": "object", "properties": {"x": {"type": "integer"}, "y": {"type": "integer"}},
             "required": ["x", "y"]}]}
        s = {"type": "array", "items": point, "maxItems": p.hi}
    elif t == "strmap":
        s = {"type": "object", "additionalProperties": {"type": "string"}}
    else:  # window, mode: an integer, or a string ("0x1a00007", "0644")
        s = {"type": ["integer", "string"]}
    s["description"] = p.doc
    return s


def action_path(a, answers):
    props, required = {}, []
    for p in a.params:
        props[p.name] = param_schema(p)
        if p.required:
            required.append(p.name)
    body = {"type": "object", "additionalProperties": False, "properties": props}
    if required:
        body["required"] = required
    if a.has("x", "y", "width", "height"):
        body["dependentRequired"] = {n: [m for m in ("x", "y", "width", "height") if m != n]
                                     for n in ("x", "y", "width", "height")}
    elif a.has("x", "y"):
        body["dependentRequired"] = {"x": ["y"], "y": ["x"]}
    ans = copy.deepcopy(answers[a.answer])
    if ans.pop("binary", False):
        binary = {"schema": {"type": "string", "format": "binary"}}
        ok = {"description": ans["description"],
              "headers": {h: {"schema": {"type": "number" if h == "X-Scale" else "integer"}}
                          for h in ("X-Width", "X-Height", "X-Scale")},
              "content": {"image/png": binary, "image/jpeg": copy.deepcopy(binary)}}
    else:
        ok = {"description": ans.pop("description", "The answer."),
              "content": {"application/json": {"schema": ans}}}
    desc = a.doc
    if a.kind == "desktop":
        desc += " A desktop action: 409 on a sandbox."
    op = {"operationId": a.name, "tags": ["%s actions" % a.kind], "summary": a.doc,
          "description": desc, "x-cubicle-kind": a.kind,
          "requestBody": {"required": bool(required),
                          "content": {"application/json": {"schema": body}}},
          "responses": {"200": ok, "default": {"$ref": "#/components/responses/Error"}}}
    if a.readonly:
        op["x-cubicle-readonly"] = True
    return {"parameters": [{"$ref": "#/components/parameters/ComputerId"}], "post": op}


def document(acts):
    with open(os.path.join(SPEC, "actions.json")) as f:
        answers = json.load(f)["answers"]
    with open(os.path.join(SPEC, "api.json")) as f:
        doc = json.load(f)
    doc["info"]["version"] = version()
    for a in acts:
        path = ACTIONS_PREFIX + a.name
        if path in doc["paths"]:
            raise ValueError("%s: both in api.json and an action" % path)
        doc["paths"][path] = action_path(a, answers)
    return doc


def text(acts):
    return json.dumps(document(acts), indent=1, ensure_ascii=False) + "\n"


# ---- cubicled's route table -----------------------------------------------------------


def routes(doc):
    """[(pattern, methods, rest)]: the paths of doc with {params} as {}, the
    actions as one pattern (cubicled passes any action name to envd, which
    answers 404 for one it does not have). A path marked x-cubicle-any-method
    is served whatever the method (HEAD /healthz, and the 405s of /mcp);
    x-cubicle-rest: its last parameter takes the rest of the path."""
    out = {}
    for path, item in doc["paths"].items():
        methods = [m for m in METHODS if m in item]
        if item.get("x-cubicle-any-method"):
            methods = list(METHODS) + ["other"]
        if path.startswith(ACTIONS_PREFIX):
            path = ACTIONS_PREFIX + "{action}"
        pattern = re.sub(r"\{[^}]*\}", "{}", path)
        prev = out.get(pattern, ([], False))[0]
        out[pattern] = (sorted(set(prev) | set(methods), key=(METHODS + ("other",)).index),
                        bool(item.get("x-cubicle-rest")))
    return [(p, m, r) for p, (m, r) in out.items()]


def c_bytes(data):
    lines = []
    for i in range(0, len(data), 16):
        lines.append("    " + " ".join("%d," % b for b in data[i:i + 16]))
    return "\n".join(lines)


def gen_routes_c(acts):
    """routes-gen.inc for host/api/routes.c: the route table and the document."""
    body = text(acts).encode()
    out = ["/* Generated by spec/gen.py from spec/api.json and spec/actions.json: do not edit. */",
           "static const struct route_def route_defs[] = {"]
    for pattern, methods, rest in routes(document(acts)):
        mask = " | ".join("M(HTTPD_%s)" % m.upper() for m in methods)
        out.append('    {"%s", %s, %s},' % (pattern, mask, "true" if rest else "false"))
    out.append("};")
    out.append("static const unsigned char openapi_json[] = {")
    out.append(c_bytes(body))
    out.append("};")
    return "\n".join(out) + "\n"
