"""docs/openapi.json, the manager app's own schema, and docs/api.md rendered from it: one section per
route (method, path, summary, auth, parameters, body, responses), then every schema they name."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from docs.gen.text import code, escape, paragraphs, slug

METHODS = ("get", "post", "put", "patch", "delete")
VALIDATION = "#/components/schemas/HTTPValidationError"
AUTH = {
    "apiKey": "a user's API key, `Authorization: Bearer <key>`",
    "agentToken": "the agents' token (`CORRAL_AGENT_TOKEN`), `Authorization: Bearer <token>`",
}

# The page's hand-written head: auth and the error format, which the schema does not say.
INTRO = (Path(__file__).parent / "api_intro.md").read_text()


def schema() -> dict[str, Any]:
    """The manager app's OpenAPI schema, as `/openapi.json` serves it (no database needed)."""
    from corral.boot.manager_app import create_app

    return create_app().openapi()


def dump(spec: Mapping[str, Any]) -> str:
    return json.dumps(spec, indent=2, ensure_ascii=False) + "\n"


def _ref_name(ref: str) -> str:
    return ref.rsplit("/", 1)[-1]


def schema_anchor(name: str) -> str:
    return slug(f"schema {name}")


def route_anchor(method: str, path: str) -> str:
    return slug(f"{method} {path}")


def type_of(s: Mapping[str, Any], refs: set[str]) -> str:
    """A JSON schema as a few words of Markdown, linking the named schemas (collected in `refs`)."""
    if "$ref" in s:
        name = _ref_name(s["$ref"])
        refs.add(name)
        return f"[{name}](#{schema_anchor(name)})"
    for key in ("anyOf", "oneOf"):
        if key in s:
            return " or ".join(dict.fromkeys(type_of(x, refs) for x in s[key]))
    if "allOf" in s:
        return " and ".join(type_of(x, refs) for x in s["allOf"])
    if "enum" in s:
        return "one of " + ", ".join(code(json.dumps(v)) for v in s["enum"])
    if "const" in s:
        return code(json.dumps(s["const"]))
    kind = s.get("type")
    if isinstance(kind, list):
        return " or ".join(kind)
    if kind == "array":
        return f"array of {type_of(s.get('items', {}), refs)}"
    if kind == "object":
        values = s.get("additionalProperties")
        if not isinstance(values, Mapping) and s.get("patternProperties"):
            values = next(iter(s["patternProperties"].values()))
        return f"object of {type_of(values, refs)}" if isinstance(values, Mapping) and values else "object"
    return str(kind) if kind else "any"


def _bounds(s: Mapping[str, Any]) -> list[str]:
    """The constraints worth saying: ranges, lengths, a pattern (of the schema or its non-null branch)."""
    branches = [b for b in s.get("anyOf", []) if b.get("type") != "null"]
    s = branches[0] if len(branches) == 1 and "$ref" not in branches[0] else s
    out = []

    def number(v: float) -> str:
        return str(int(v)) if float(v).is_integer() else str(v)

    for low, high, what in (
        ("minimum", "maximum", ""),
        ("minLength", "maxLength", " characters"),
        ("minItems", "maxItems", " items"),
        ("minProperties", "maxProperties", " entries"),
    ):
        lo, hi = s.get(low), s.get(high)
        if lo is None and low == "minimum" and "exclusiveMinimum" in s:
            lo = s["exclusiveMinimum"]
            what = f" (above {number(lo)})"
        if lo is not None and hi is not None:
            out.append(f"{number(lo)}..{number(hi)}{what}")
        elif hi is not None:
            out.append(f"at most {number(hi)}{what}")
        elif lo is not None:
            out.append(f"at least {number(lo)}{what}")
    if "pattern" in s:
        out.append(f"pattern {code(s['pattern'])}")
    return out


def _field_line(name: str, s: Mapping[str, Any], required: bool, refs: set[str]) -> str:
    facts = [type_of(s, refs), "required" if required else "optional", *_bounds(s)]
    if "default" in s:
        facts.append(f"default {code(json.dumps(s['default']))}")
    line = f"- {code(name)} ({'; '.join(facts)})"
    return line + (f": {escape(s['description'])}" if s.get("description") else "")


def _operations(spec: Mapping[str, Any]) -> Iterator[tuple[str, str, Mapping[str, Any]]]:
    for path, item in spec["paths"].items():
        for method in METHODS:
            if method in item:
                yield method, path, item[method]


def _route(method: str, path: str, op: Mapping[str, Any], refs: set[str]) -> list[str]:
    lines = [f"### `{method.upper()} {path}` {{#{route_anchor(method, path)}}}", ""]
    if op.get("summary"):
        lines += [f"**{escape(op['summary'])}**", ""]
    for paragraph in paragraphs(op.get("description", "")):
        lines += [escape(paragraph), ""]
    schemes = [name for requirement in op.get("security", []) for name in requirement]
    lines += ["Auth: " + ("; ".join(AUTH.get(s, s) for s in schemes) if schemes else "none"), ""]
    params = op.get("parameters", [])
    if params:
        lines += ["Parameters:", ""]
        for p in params:
            line = _field_line(p["name"], p.get("schema", {}), p.get("required", False), refs)
            lines.append(line.replace(" (", f" ({p['in']}, ", 1))
        lines.append("")
    body = op.get("requestBody")
    if body:
        for media, content in body.get("content", {}).items():
            shown = type_of(content.get("schema", {}), refs)
            lines += [f"Request body ({code(media)}): {shown}", ""]
    lines += ["Responses:", ""]
    for status, response in op.get("responses", {}).items():
        contents = response.get("content", {})
        schemas = [c.get("schema", {}) for c in contents.values() if c.get("schema")]
        if any(s.get("$ref") == VALIDATION for s in schemas):
            lines.append(f"- `{status}`: `validation_error`, in the [error format](#errors)")
            continue
        shown = ", ".join(type_of(s, refs) for s in schemas) or "no body"
        said = response.get("description", "")
        said = f" ({escape(said)})" if said and said != "Successful Response" else ""
        lines.append(f"- `{status}`{said}: {shown}")
    return [*lines, ""]


def _schema_section(name: str, s: Mapping[str, Any], refs: set[str]) -> list[str]:
    lines = [f"### {name} {{#{schema_anchor(name)}}}", ""]
    for paragraph in paragraphs(s.get("description", "")):
        lines += [escape(paragraph), ""]
    properties = s.get("properties")
    if properties:
        required = set(s.get("required", []))
        lines += [_field_line(field, sub, field in required, refs) for field, sub in properties.items()]
    else:
        lines.append(f"{type_of({k: v for k, v in s.items() if k != 'description'}, refs)}.")
    return [*lines, ""]


def render(spec: Mapping[str, Any]) -> str:
    refs: set[str] = set()
    by_tag: dict[str, list[str]] = {}
    for method, path, op in _operations(spec):
        tag = (op.get("tags") or ["other"])[0]
        by_tag.setdefault(tag, []).extend(_route(method, path, op, refs))
    lines = [INTRO]
    for tag, section in by_tag.items():
        lines += [f"## {tag[:1].upper()}{tag[1:]} {{#{slug('routes ' + tag)}}}", "", *section]
    components = spec.get("components", {}).get("schemas", {})
    sections: dict[str, list[str]] = {}
    while pending := sorted(refs - sections.keys()):  # the schemas those name, in turn
        for name in pending:
            sections[name] = _schema_section(name, components[name], refs)
    lines += ["## Schemas", "", "Every schema the routes above name, and those they name in turn.", ""]
    for name in sorted(sections):
        lines += sections[name]
    return "\n".join(lines).rstrip() + "\n"
