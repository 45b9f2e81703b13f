"""What the generator writes: whole files (the API and CLI references, openapi.json) and marked
parts of hand-written pages (the tables the code enforces)."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

from docs.gen import api_reference, cli_reference, settings_table, tables

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
REGENERATE = "make docs-gen"

# page -> {part name: its text}
PARTS: dict[str, dict[str, Callable[[], str]]] = {
    "concepts.md": {
        "session-transitions": tables.session_transitions,
        "kernel-transitions": tables.kernel_transitions,
        "causes": tables.causes,
    },
    "operations.md": {
        "manager-settings": settings_table.manager,
        "scheduler-settings": settings_table.scheduler,
        "agent-settings": settings_table.agent,
    },
}


def begin(name: str) -> str:
    return f"<!-- generated: {name} ({REGENERATE} writes this part from the code) -->"


def end(name: str) -> str:
    return f"<!-- end of generated: {name} -->"


def splice(text: str, name: str, part: str) -> str:
    """`text` with what stands between `name`'s markers replaced by `part`."""
    found = re.search(re.escape(begin(name)) + r"\n.*?" + re.escape(end(name)), text, re.DOTALL)
    if found is None:
        raise ValueError(f"no markers for {name!r}: put {begin(name)!r} and {end(name)!r} in the page")
    return text[: found.start()] + f"{begin(name)}\n\n{part}\n{end(name)}" + text[found.end() :]


def outputs() -> dict[Path, str]:
    """Every generated file's path and the text it should have."""
    spec = api_reference.schema()
    out = {
        DOCS / "openapi.json": api_reference.dump(spec),
        DOCS / "api.md": api_reference.render(spec),
        DOCS / "cli.md": cli_reference.build(),
    }
    for page, parts in PARTS.items():
        path = DOCS / page
        text = path.read_text()
        for name, make in parts.items():
            text = splice(text, name, make())
        out[path] = text
    return out
